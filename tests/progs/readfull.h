/* readfull.h — read exactly n bytes from a socket or pipe (the test
 * programs' request and answer reads: forklend.c, idlemem.c, manyconn.c,
 * privdrop.c; sem.c's reads from its peer process). */
#ifndef SSW_TEST_READFULL_H
#define SSW_TEST_READFULL_H

#include <errno.h>
#include <stddef.h>
#include <unistd.h>

/* 0 once n bytes are in b; -1 at end-of-file or an error (EINTR retried). */
static inline int read_full(int fd, void *b, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

#endif
