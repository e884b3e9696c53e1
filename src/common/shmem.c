/* shmem.c — memory that a forked child shares with its parent.
 *
 * A switched connection's state (session, provider endpoint, staging queue)
 * lives in MAP_SHARED anonymous memory, so after fork(2) parent and child
 * see one connection, as they see one kernel socket: either may read or
 * write it, in turn or at once (the session lock is process-shared).  A
 * mapping made after a fork is simply private to the processes forked from
 * its maker afterwards, which is exactly who can hold the connection.
 *
 * Short connections would pay two mmap/munmap pairs per side (and munmap in
 * a threaded process costs a TLB shoot-down), so freed mappings that no
 * other process can still see are kept for reuse, a few per size.  A forked
 * child forgets the pool: those mappings are shared with its parent. */
#include "common/forklocal.h"
#include "common/sys.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#define POOL_MAX 16

#define pool_lock (ssw_fl->pool_lock) /* a child's is unlocked (forklocal.h) */
static struct {
	void *p;
	size_t size;
} pool[POOL_MAX];
static int npool;

/* Nothing written when the pool is empty (a fork-per-connection server's
 * parent frees its connections' memory without reuse): a write here would
 * cost the child a page fault at every fork. */
SSW_FORK_TEXT static void forget_in_child(void)
{
	if (!npool)
		return;
	for (int i = 0; i < npool; i++)
		SYS_(munmap, pool[i].p, pool[i].size);
	npool = 0;
}

static void install(void)
{
	pthread_atfork(NULL, NULL, forget_in_child);
}

void *ssw_shared_alloc(size_t size, size_t zero)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install);
	pthread_mutex_lock(&pool_lock);
	for (int i = npool - 1; i >= 0; i--) {
		if (pool[i].size != size)
			continue;
		void *p = pool[i].p;
		pool[i] = pool[--npool];
		pthread_mutex_unlock(&pool_lock);
		memset(p, 0, zero < size ? zero : size);
		return p;
	}
	pthread_mutex_unlock(&pool_lock);
	/* NORESERVE: the staging area is reserved, pages come on first use */
	long p = SYS_(mmap, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == -1 ? NULL : (void *)p;
}

void ssw_shared_free(void *p, size_t size, bool reuse)
{
	if (!p)
		return;
	if (reuse) {
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
