/* shmem.c — memory that a forked child shares with its parent.
 *
 * A switched connection's state (session, provider endpoint, staging queue)
 * lives in MAP_SHARED anonymous memory, so after fork(2) parent and child
 * see one connection, as they see one kernel socket: either may read or
 * write it, in turn or at once (the session lock is process-shared).  A
 * mapping made after a fork is simply private to the processes forked from
 * its maker afterwards, which is exactly who can hold the connection.
 *
 * Short connections would pay two mmap/munmap pairs per side, and a burst
 * of them far more: a fresh mapping costs page-table pages and a fault per
 * page touched, and munmap frees them and flushes the TLB of every CPU the
 * process ran on (measured on a burst of 2,000 connects: most of the
 * switch's time).  So freed mappings that no other process can still see
 * are kept for reuse, up to POOL_MAX, their pages still in place.
 *
 * A kept mapping is marked MADV_DONTFORK: a forked child never has it (it
 * is this process's, and it may carry the next connection, which a child
 * that dropped privileges must not see), and a fork does not copy it.  The
 * count lives in the fork-local page, so a child starts with an empty pool
 * and does nothing at fork.  Reused, a mapping is marked MADV_DOFORK again:
 * a live connection is inherited like a kernel socket. */
#include "common/forklocal.h"
#include "common/sys.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

/* a burst of "hundreds at once" (connection pools) finds its mappings again;
 * each kept one holds the pages its connection touched (a few KiB for small
 * messages: the staging queue is given back when idle, session_mem.c) */
#define POOL_MAX 512

#define pool_lock (ssw_fl->pool_lock) /* a child's is unlocked (forklocal.h) */
#define npool (ssw_fl->pool_n)         /* a child's is 0: it has none of them */
static struct {
	void *p;
	size_t size;
} pool[POOL_MAX];

/* A kept mapping of this size, taken out of the pool; NULL if none. */
static void *take(size_t size)
{
	void *p = NULL;
	pthread_mutex_lock(&pool_lock);
	for (int i = npool - 1; i >= 0 && !p; i--) {
		if (pool[i].size == size) {
			p = pool[i].p;
			pool[i] = pool[--npool];
		}
	}
	pthread_mutex_unlock(&pool_lock);
	if (p && SYS_(madvise, p, size, MADV_DOFORK) < 0) {
		SYS_(munmap, p, size); /* a child would not inherit it: never hand it out */
		p = NULL;
	}
	return p;
}

void *ssw_shared_alloc(size_t size, size_t zero)
{
	void *p = take(size);
	if (p) {
		memset(p, 0, zero < size ? zero : size);
		return p;
	}
	/* NORESERVE: the staging area is reserved, pages come on first use */
	long m = SYS_(mmap, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return m == -1 ? NULL : (void *)m;
}

void ssw_shared_free(void *p, size_t size, bool reuse)
{
	if (!p)
		return;
	if (reuse && SYS_(madvise, p, size, MADV_DONTFORK) == 0) {
		pthread_mutex_lock(&pool_lock);
		if (npool < POOL_MAX) {
			pool[npool].p = p;
			pool[npool++].size = size;
			pthread_mutex_unlock(&pool_lock);
			return;
		}
		pthread_mutex_unlock(&pool_lock);
	}
	SYS_(munmap, p, size);
}
