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
 * A kept mapping must not reach a forked child (it is this process's, and
 * it may carry the next connection, which a child that dropped privileges
 * must not see).  At fork (prepare) each kept mapping not yet marked is
 * marked MADV_DONTFORK, so the child never has it and the fork does not
 * copy it; one taken out after a fork is marked MADV_DOFORK again (a live
 * connection is inherited like a kernel socket).  A process that does not
 * fork pays no system call for this (a mark at every free and reuse cost
 * short connections 15% of their rate).  The count lives in the fork-local
 * page, so a child starts with an empty pool and does nothing at fork.  A
 * child made by a raw clone(2), without the fork handlers, inherits the
 * mappings kept since the last fork (they are never used there). */
#include "common/forklocal.h"
#include "common/sys.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

/* Kept per size (the session, the endpoint, ...: a few sizes per process),
 * newest on top.  Enough for a burst of a pool's connections (a client
 * that opens 2,000 at once finds every mapping again the next time); each
 * kept one holds the pages its connection touched (a session's head page,
 * an endpoint's page: the staging queue goes, session_life.c), and one
 * kept longer than IDLE_NS is unmapped at a later alloc or free. */
#define CLASSES 4
#define POOL_MAX 2048
#define IDLE_NS 10000000000ull
#define TRIM_MAX 4

#define pool_lock (ssw_fl->pool_lock) /* a child's is unlocked (forklocal.h) */
#define pool_n (ssw_fl->pool_n)        /* a child's are 0: it has none of them */
static struct cls {
	size_t size;
	unsigned head; /* the next push's index (a ring: the oldest at head - n) */
	struct {
		void *p;
		uint64_t t;
		bool nofork; /* marked MADV_DONTFORK at a fork */
	} e[POOL_MAX];
} cls[CLASSES];

/* With pool_lock: the class of this size, made if room (NULL: none). */
static struct cls *class_of(size_t size, int *k, bool make)
{
	for (int i = 0; i < CLASSES; i++)
		if (cls[i].size == size) {
			*k = i;
			return &cls[i];
		}
	for (int i = 0; make && i < CLASSES; i++)
		if (!pool_n[i]) { /* empty: (re)assigned to this size */
			cls[i].size = size;
			*k = i;
			return &cls[i];
		}
	return NULL;
}

/* With pool_lock: the oldest of class k if it idled too long, taken out. */
static void *stale(struct cls *c, int k, uint64_t now)
{
	if (!pool_n[k])
		return NULL;
	unsigned tail = (c->head + POOL_MAX - (unsigned)pool_n[k]) % POOL_MAX;
	if (now - c->e[tail].t < IDLE_NS)
		return NULL;
	pool_n[k]--;
	return c->e[tail].p;
}

bool ssw_fork_out(void *p, size_t size)
{
	return SYS_(madvise, p, size, MADV_DONTFORK) == 0;
}

bool ssw_fork_in(void *p, size_t size, bool marked)
{
	return !marked || SYS_(madvise, p, size, MADV_DOFORK) == 0;
}

/* fork, before: every kept mapping leaves the child out (one the kernel
 * will not mark is unmapped); the lock is held across the fork, so that
 * nothing is kept meanwhile unmarked.  The child's lock is a fresh one. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
	for (int k = 0; k < CLASSES; k++) {
		struct cls *c = &cls[k];
		for (int i = 0; i < pool_n[k]; i++) {
			unsigned j = (c->head + POOL_MAX - 1 - (unsigned)i) % POOL_MAX;
			if (c->e[j].nofork)
				continue;
			if ((c->e[j].nofork = ssw_fork_out(c->e[j].p, c->size)))
				continue;
			/* unmarkable: out of the pool (the oldest takes its place) */
			SYS_(munmap, c->e[j].p, c->size);
			unsigned tail = (c->head + POOL_MAX - (unsigned)pool_n[k]) % POOL_MAX;
			c->e[j] = c->e[tail];
			pool_n[k]--;
			i--;
		}
	}
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&pool_lock);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_install(void)
{
	pthread_atfork(fork_prepare, fork_parent, NULL);
}

static void trim(void **old, int nold, size_t size)
{
	for (int i = 0; i < nold; i++)
		SYS_(munmap, old[i], size);
}

/* A kept mapping of this size, taken out of the pool; NULL if none. */
static void *take(size_t size)
{
	void *p = NULL, *old[TRIM_MAX];
	int nold = 0, k;
	uint64_t now = ssw_now_ns();
	pthread_mutex_lock(&pool_lock);
	struct cls *c = class_of(size, &k, false);
	bool marked = false;
	if (c && pool_n[k]) {
		c->head = (c->head + POOL_MAX - 1) % POOL_MAX;
		pool_n[k]--;
		p = c->e[c->head].p;
		marked = c->e[c->head].nofork;
	}
	while (c && nold < TRIM_MAX && (old[nold] = stale(c, k, now)))
		nold++;
	pthread_mutex_unlock(&pool_lock);
	trim(old, nold, size);
	if (p && !ssw_fork_in(p, size, marked)) {
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
	void *old[TRIM_MAX];
	int nold = 0, k;
	if (reuse) {
		uint64_t now = ssw_now_ns();
		pthread_once(&fork_once, fork_install);
		pthread_mutex_lock(&pool_lock);
		struct cls *c = class_of(size, &k, true);
		if (c && pool_n[k] < POOL_MAX) {
			c->e[c->head].p = p;
			c->e[c->head].t = now;
			c->e[c->head].nofork = false;
			c->head = (c->head + 1) % POOL_MAX;
			pool_n[k]++;
			p = NULL;
		}
		while (c && nold < TRIM_MAX && (old[nold] = stale(c, k, now)))
			nold++;
		pthread_mutex_unlock(&pool_lock);
	}
	trim(old, nold, size);
	if (p)
		SYS_(munmap, p, size);
}

void *ssw_shared_dup(const void *p, size_t size, size_t n)
{
	long m = SYS_(mmap, NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == -1)
		return NULL;
	memcpy((void *)m, p, n < size ? n : size);
	return (void *)m;
}

bool ssw_shared_move(void *copy, size_t size, void *at)
{
	long m = SYS_(mremap, copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, at);
	if (m == -1) {
		SYS_(munmap, copy, size);
		return false;
	}
	return true;
}
