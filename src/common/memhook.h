/* memhook.h — hear of a memory mapping before it changes, including the
 * changes the C library makes inside free(), realloc() and malloc_trim().
 *
 * A registration cache (seed 002) must drop a cached registration before the
 * pages behind its addresses change: a registration pins physical pages, and
 * a hit on a range that was unmapped and mapped again would move the old
 * pages' bytes.  Interposing munmap & co. by name (LD_PRELOAD) sees only the
 * program's own calls: glibc's malloc unmaps through its internal aliases
 * (__munmap in free() of a large block, __mremap in realloc(), __madvise and
 * __brk when it trims a heap), which no symbol lookup reaches.  So the C
 * library's own functions are patched, as UCX's "bistro" hooks do: the first
 * bytes of munmap, mremap, madvise, mmap, brk, shmat and shmdt in libc.so.6
 * become a jump to a replacement here, which tells the callback about the
 * range and then makes the system call itself.  Every caller in the process
 * reaches it: the program, glibc inside free(), other libraries.
 *
 * What is reported (before the kernel call):
 *   munmap(a, n)                      [a, a+n)
 *   mremap(a, n, m, f[, b])           [a, a+n); and [b, b+m) with MREMAP_FIXED
 *   madvise(a, n, DONTNEED|DONTNEED_LOCKED|FREE|REMOVE)   [a, a+n)
 *   mmap(a, n, .., MAP_FIXED, ..)     [a, a+n) (not MAP_FIXED_NOREPLACE)
 *   brk(b) below the current break    [b, current break)
 *   shmat(id, a, SHM_REMAP)           [a, a + the segment's size)
 *   shmdt(a)                          [a, end of the address space): the
 *                                     segment's size is not known here
 *
 * What it cannot see: system calls made without the C library (syscall(2),
 * Go, static binaries, io_uring's IORING_OP_MADVISE), the dynamic loader's own
 * munmap (dlclose), another process changing ours (process_madvise), the
 * kernel's copy-on-write after fork (the pinning process's concern), and a
 * C library other than glibc on x86-64 (then nothing is installed and
 * ssw_memhook_install fails).
 *
 * The callback may run in any thread and in any context the C library
 * unmaps from, including inside malloc with its arena lock held and inside
 * signal handlers: it must not allocate, free or take a lock that is held
 * around an allocation (the registration cache only records the range in a
 * lock-free log, regcache.c).  errno is preserved across it. */
#ifndef SSW_MEMHOOK_H
#define SSW_MEMHOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*ssw_memhook_fn)(void *addr, size_t len);

/* Patch the C library (once per process; later calls only set fn).  0, or
 * -errno: -ENOSYS (not glibc on x86-64), -EACCES (the code pages cannot be
 * made writable: W^X policies), -ENOENT (an entry point is missing).  Best
 * installed while the process has one thread (a constructor): a thread
 * executing the first bytes of one of these functions while they are
 * rewritten would run garbage. */
int ssw_memhook_install(ssw_memhook_fn fn);
/* Every entry point is patched and reports to a callback. */
bool ssw_memhook_active(void);
/* Ranges reported so far (tests). */
uint64_t ssw_memhook_reported(void);

#endif
