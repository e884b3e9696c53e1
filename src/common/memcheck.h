/* memcheck.h — is a buffer the application handed us really its memory? */
#ifndef SSW_MEMCHECK_H
#define SSW_MEMCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

/* Can this process read (store: and write) the first len bytes of v?
 * Answers without taking a fault: the kernel's recv()/send() say EFAULT for
 * a buffer that is not the caller's, where a plain copy by the switch (or
 * a library it drives) would kill the application.  One byte per page is
 * read through Cross Memory Attach on ourselves and (store) written back
 * unchanged: about a system call per 2 MiB. */
bool ssw_mem_usable(const struct iovec *v, int n, size_t len, bool store);

#endif
