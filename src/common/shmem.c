/* shmem.c — memory that a forked child shares with its parent.
 *
 * A switched connection's state (session, provider endpoint, staging queue)
 * lives in MAP_SHARED anonymous memory, so after fork(2) parent and child
 * see one connection, as they see one kernel socket: either may read or
 * write it, in turn or at once (the session lock is process-shared).  A
 * mapping made after a fork is simply private to the processes forked from
 * its maker afterwards, which is exactly who can hold the connection. */
#include "common/sys.h"

#include <sys/mman.h>

void *ssw_shared_alloc(size_t size)
{
	/* NORESERVE: the staging area is reserved, pages come on first use */
	long p = SYS_(mmap, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == -1 ? NULL : (void *)p;
}

void ssw_shared_free(void *p, size_t size)
{
	if (p)
		SYS_(munmap, p, size);
}
