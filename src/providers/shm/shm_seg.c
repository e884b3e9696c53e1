/* shm_seg.c — the segments a connector hands over: made new, kept as a spare
 * when a connect found no listener, and recycled for the next connection to
 * the same listener once its acceptor has let go of it.
 *
 * Why recycle: a new segment costs its creator a memfd, a resize, seals, a
 * mapping, a page fault per page it touches (allocation and zeroing, about
 * 5 us each here) and, at the end, an unmap that frees the pages and the
 * inode (about 20 us): some 45 us of the 150-200 us a short connection
 * (connect, a few bytes, close) takes on these machines, where kernel TCP's
 * loopback connect costs less.  A segment whose connection has ended is
 * handed to the next connection to the same listener instead, its pages
 * already there.  Each side keeps up to 2,048 (a pool's burst), and each for
 * at most 10 s unused: in a burst of 2,000 connects the unmaps alone, each
 * a TLB shoot-down on every CPU the process ran on, took a quarter of the
 * time of both processes (perf, issue 18).
 *
 * Why that is safe (README "Security"): a recycled segment goes only to a
 * connection with the same listening process (the rendezvous peer's pid and
 * uid, from SO_PEERCRED, and the same destination), which had it mapped
 * before and sees the new connection's bytes anyway; and only after the
 * acceptor's last holder wrote `released` as its last touch of the segment
 * (shm_conn.c shm_close), so nothing of the old connection writes into the
 * new one.  An acceptor that lies about it can only corrupt its own
 * connections.  A segment the acceptor never released (its process died, or
 * it refused the request) is never reused: it leaves the cache when newer
 * ones push it out.
 *
 * The acceptor's side keeps the mapping of a segment whose connection ended
 * the same way (mapping a segment and faulting its pages in, then unmapping
 * it, cost the acceptor about 15 us a connection): when the same connector
 * process (pid and uid of the rendezvous connection, SO_PEERCRED) hands the
 * same memfd over again (device and inode; the kept mapping holds the inode
 * alive, so its number is not reused meanwhile), the mapping serves again.
 * Another process never gets a mapping it did not send.
 *
 * Whatever is kept (the spare, the cache, the acceptor's mappings) is marked
 * MADV_DONTFORK at a fork (atfork_prepare; once): a forked child never has
 * those mappings (a worker that drops privileges must not see the next
 * connections), and a child of a fork-per-connection server, which used to
 * unmap each of them at every fork (a TLB flush each), has nothing to do
 * but close the kept memfds it inherited.  Taken out for a connection after
 * a fork, a mapping is marked MADV_DOFORK again: a live connection is
 * inherited like a kernel socket.  One the kernel will not mark is freed. */
#include "providers/shm/shm_priv.h"

#include "providers/shm/shm_priv.h"

#include "common/forklocal.h"
#include "common/lru.h"
#include "providers/shm/shm_maps.h"
#include "common/params.h"
#include "common/sys.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* Segments waiting for their next connection, per process, oldest first:
 * each holds its memfd, its mapping and the pages its connection left (the
 * header and each ring's floor once trimmed, shm_ring_trim).  As many as a
 * burst of a pool's connections: a client that opens 2,000 at once finds
 * them all again the next time (each new one cost both sides a memfd, a
 * mapping, fresh pages and an unmap whose TLB shoot-down reaches every CPU
 * the process ran on: most of a burst's time, measured).  One that waited
 * longer than KEEP_IDLE_NS goes at a later get or put. */
#define CACHE_CAP 2048
#define KEEP_IDLE_NS 10000000000ull
#define EXPIRE_MAX 4 /* freed per call, at most: no call pays for a whole pool */
/* Live connections that keep their memfd open to recycle it at their end,
 * and cached segments, hold one descriptor each: descriptors the
 * application cannot have.  So they share a budget: with a low descriptor
 * limit (the switch's own not moved above the floor, common/fdhide.c)
 * LOW_BUDGET, as many as before this grew; else a quarter of the numbers
 * still free as of the newest hidden descriptor a connect made (each takes
 * the lowest free number, so that one says how many are in use), never more
 * than KEPT_CAP.  As a process's connections take descriptors, the budget
 * shrinks and what is kept goes (the oldest cached first, then the oldest
 * live connections' memfds: those connections will not be recycled), at
 * most SHED_MAX per call; a process near its limit keeps none.  */
#define LOW_BUDGET 24
#define LIVE_CAP 2048
#define KEPT_CAP (LIVE_CAP + CACHE_CAP)
#define SHED_MAX 8
/* How far find_recycled looks back for a released segment of the same
 * destination (entries of other destinations cost a compare each). */
#define FIND_PROBES 64

#define seg_lock (ssw_fl->seg_lock) /* a forked child's is unlocked (common/forklocal.h) */
static struct shm_seg spare = { .memfd = -1 };
static struct {
	struct shm_seg g;
	uint64_t t; /* when put in */
} cache[CACHE_CAP];
static int32_t cache_prev[CACHE_CAP], cache_next[CACHE_CAP];
static struct ssw_lru cache_lru = SSW_LRU(cache_prev, cache_next);
static pid_t owner; /* the process the spare, cache and live list belong to */
static long fd_top;  /* the newest connect's highest hidden descriptor */

/* Endpoints no other process holds whose memfd is kept, oldest first;
 * ep->live_slot says where (checked against the entry: a slot of another
 * process's list, or of a list emptied since, is not it). */
static struct ssw_ep *live[LIVE_CAP];
static int32_t live_prev[LIVE_CAP], live_next[LIVE_CAP];
static struct ssw_lru live_lru = SSW_LRU(live_prev, live_next);

/* The acceptor's kept mappings (up to 2,048, found by inode): shm_maps.c. */

/* SOCKSWITCH_SHM_RING, validated by the settings table (a power of two
 * within SHM_RING_MIN..SHM_RING_MAX, checked again here: the table is
 * edited by hand). */
uint64_t shm_ring_size_setting(void)
{
	uint64_t r = ssw_param_num(SSW_P_SHM_RING);
	if (!r || (r & (r - 1)) || r < SHM_RING_MIN || r > SHM_RING_MAX)
		r = ssw_params[SSW_P_SHM_RING].dnum;
	return r;
}

int shm_seg_fd_budget(void)
{
	long lim = ssw_fd_hide_limit();
	if (!lim)
		return LOW_BUDGET;
	long b = (lim - fd_top) / 4;
	return b < 0 ? 0 : b > KEPT_CAP ? KEPT_CAP : (int)b;
}

/* Acceptors' memfds kept (ep->map_fd), at most half the budget and
 * MAPFD_CAP: an inetd-style server closes its copy of each connection at
 * once (its child execs with it), a server of many connections keeps its
 * first few and no more (a descriptor each, never given back early: the
 * budget shrinks as accepted connections take numbers, and a process near
 * its limit keeps none).  A count of this process's copies (a forked child
 * starts with its parent's, as it starts with the descriptors). */
#define MAPFD_CAP 32
static _Atomic int maps_kept;
/* descriptors kept now, against the budget (with seg_lock) */
#define KEPT_NOW (cache_lru.n + live_lru.n + atomic_load(&maps_kept))

void shm_seg_map_fd_keep(struct ssw_ep *ep, int memfd)
{
	pthread_mutex_lock(&seg_lock);
	if (ep->ctl_fd > fd_top)
		fd_top = ep->ctl_fd; /* the newest hidden number: how many are in use */
	int budget = shm_seg_fd_budget(), cap = budget / 2 < MAPFD_CAP ? budget / 2 : MAPFD_CAP;
	bool keep = KEPT_NOW < budget && atomic_load(&maps_kept) < cap;
	if (keep)
		atomic_fetch_add(&maps_kept, 1);
	pthread_mutex_unlock(&seg_lock);
	if (!keep) {
		sys_close(memfd);
		ep->map_fd = -1;
		return;
	}
	ep->map_fd = ssw_fd_hide(memfd);
}

void shm_seg_map_fd_adopt(void)
{
	atomic_fetch_add(&maps_kept, 1);
}

void shm_seg_map_fd_close(const struct ssw_ep *ep)
{
	if (ep->map_fd < 0)
		return;
	sys_close(ep->map_fd);
	atomic_fetch_sub(&maps_kept, 1);
}

int shm_seg_fd_now(const struct ssw_ep *ep)
{
	pthread_mutex_lock(&seg_lock);
	int fd = ep->seg_fd;
	pthread_mutex_unlock(&seg_lock);
	return fd;
}

static void seg_free(struct shm_seg *g)
{
	munmap(g->p, shm_seg_size(g->ring));
	sys_close(g->memfd);
	g->memfd = -1;
}

/* A kept segment this process forgets (a forked child: the memfd it
 * inherited; a raw clone's child has the mapping too, if no fork marked it). */
static void seg_forget(struct shm_seg *g)
{
	if (!g->nofork)
		munmap(g->p, shm_seg_size(g->ring));
	sys_close(g->memfd);
	g->memfd = -1;
}

/* The live list emptied (its endpoints keep their memfds to their end). */
static void live_reset(void)
{
	for (int32_t i = ssw_lru_oldest(&live_lru); i >= 0; i = ssw_lru_newer(&live_lru, i))
		live[i] = NULL;
	ssw_lru_reset(&live_lru);
}

/* What a forked child inherited is its parent's: our copies of the fds and
 * mappings go at once (atfork_child), the parent keeps its own.  A kept
 * segment serves the parent's next connections: a child that kept a
 * mapping of it (and then dropped privileges, or runs something else) could
 * read them.  drop_foreign is the same for a child made without libc's
 * fork (a raw clone): at its first use.  Called with seg_lock. */
static void forget_all(void)
{
	/* the mappings marked at the fork were not inherited, only the memfds
	 * were; a raw clone's child has those kept since the last fork */
	if (spare.memfd >= 0)
		seg_forget(&spare);
	for (int32_t i = ssw_lru_oldest(&cache_lru); i >= 0; i = ssw_lru_newer(&cache_lru, i))
		seg_forget(&cache[i].g);
	ssw_lru_reset(&cache_lru);
	for (int32_t i = shm_maps_oldest(); i >= 0; i = shm_maps_newer(i))
		if (!shm_maps_at(i)->nofork)
			munmap(shm_maps_at(i)->p, shm_maps_at(i)->size);
	shm_maps_reset();
	live_reset(); /* the parent's: its fds are closed as the connections end */
}

static void drop_foreign(void)
{
	pid_t me = ssw_pid();
	if (owner == me)
		return;
	forget_all();
	owner = me;
}

/* fork: the parent's live connections are now held by the child too, and
 * their seg_fd (in fork-shared memory) names a descriptor in both: never
 * taken away from them again (they are still recycled at their end). */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&seg_lock);
	if (spare.memfd >= 0 && !spare.nofork && !(spare.nofork = ssw_fork_out(spare.p, shm_seg_size(spare.ring))))
		seg_free(&spare);
	for (int32_t i = ssw_lru_oldest(&cache_lru), nx; i >= 0; i = nx) {
		nx = ssw_lru_newer(&cache_lru, i);
		struct shm_seg *g = &cache[i].g;
		if (g->nofork || (g->nofork = ssw_fork_out(g->p, shm_seg_size(g->ring))))
			continue;
		seg_free(g);
		ssw_lru_drop(&cache_lru, i);
	}
	for (int32_t i = shm_maps_oldest(), nx; i >= 0; i = nx) {
		struct shm_kept_map *m = shm_maps_at(i);
		nx = shm_maps_newer(i);
		if (m->nofork || (m->nofork = ssw_fork_out(m->p, m->size)))
			continue;
		munmap(m->p, m->size);
		shm_maps_drop(i);
	}
}
/* Nothing written unless something is kept: each write here costs the
 * process a page fault after every fork (common/forklocal.h). */
static void atfork_parent(void)
{
	if (live_lru.n)
		live_reset();
	pthread_mutex_unlock(&seg_lock);
}
SSW_FORK_TEXT static void atfork_child(void)
{
	if (spare.memfd < 0 && !cache_lru.n && !shm_maps_may_hold() && !live_lru.n)
		return; /* drop_foreign takes the child's pid at its first use */
	forget_all();
	owner = 0;
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_install(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* Called with seg_lock: ep leaves the live list (false: it was not there).
 * A slot names its endpoint only while in the list (live_reset). */
static bool live_remove(struct ssw_ep *ep)
{
	int32_t i = ep->live_slot;
	if (i < 0 || i >= LIVE_CAP || live[i] != ep)
		return false;
	live[i] = NULL;
	ssw_lru_drop(&live_lru, i);
	ep->live_slot = -1;
	return true;
}

void shm_seg_key_dst(struct shm_seg_key *k, const struct sockaddr *dst)
{
	memset(k, 0, sizeof *k);
	k->family = dst->sa_family;
	if (dst->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)dst;
		memcpy(k->addr, &in->sin_addr, 4);
		k->port = in->sin_port;
	} else {
		const struct sockaddr_in6 *in6 = (const void *)dst;
		memcpy(k->addr, &in6->sin6_addr, 16);
		k->port = in6->sin6_port;
	}
}

static bool same_dst(const struct shm_seg_key *a, const struct shm_seg_key *b)
{
	return a->family == b->family && a->port == b->port && !memcmp(a->addr, b->addr, sizeof a->addr);
}

static bool released(const struct shm_seg *g)
{
	const struct shm_seg_hdr *h = g->p;
	return atomic_load_explicit(&h->released, memory_order_acquire) != 0;
}

/* Called with seg_lock: the newest released segment for dst, or -1. */
static int32_t find_recycled(const struct shm_seg_key *dst, uint64_t ring)
{
	int probes = 0;
	for (int32_t i = ssw_lru_newest(&cache_lru); i >= 0 && probes < FIND_PROBES; i = ssw_lru_older(&cache_lru, i)) {
		if (cache[i].g.ring != ring || !same_dst(&cache[i].g.key, dst))
			continue;
		if (released(&cache[i].g))
			return i;
		probes++;
	}
	return -1;
}

/* Called with seg_lock: segments that waited too long leave the cache and
 * mappings the kept list, a few per call, into old[] (freed by the caller
 * outside the lock); returns how many. */
#define OLD_MAX (2 * EXPIRE_MAX + SHED_MAX + 1)
struct old {
	void *p;
	size_t size;
	int fd;
};
static int expire(uint64_t now, struct old *old)
{
	int n = 0;
	int32_t i;
	while (n < EXPIRE_MAX && (i = ssw_lru_oldest(&cache_lru)) >= 0 && now - cache[i].t > KEEP_IDLE_NS) {
		old[n++] = (struct old){ cache[i].g.p, shm_seg_size(cache[i].g.ring), cache[i].g.memfd };
		ssw_lru_drop(&cache_lru, i);
	}
	int k = 0;
	while (k < EXPIRE_MAX && (i = shm_maps_oldest()) >= 0 && now - shm_maps_at(i)->t > KEEP_IDLE_NS) {
		old[n++] = (struct old){ shm_maps_at(i)->p, shm_maps_at(i)->size, -1 };
		shm_maps_drop(i);
		k++;
	}
	return n;
}

static void free_old(const struct old *old, int n)
{
	for (int i = 0; i < n; i++) {
		munmap(old[i].p, old[i].size);
		if (old[i].fd >= 0)
			sys_close(old[i].fd);
	}
}

/* Called with seg_lock: the oldest cached segment leaves (into old[n]). */
static void cache_evict(struct old *old, int *n)
{
	int32_t i = ssw_lru_oldest(&cache_lru);
	old[(*n)++] = (struct old){ cache[i].g.p, shm_seg_size(cache[i].g.ring), cache[i].g.memfd };
	ssw_lru_drop(&cache_lru, i);
}

/* Called with seg_lock: g joins the cache, the oldest entries leaving when
 * it is full or over the descriptor budget, or g itself goes when nothing
 * older may (into old[], returned count). */
static int cache_put(const struct shm_seg *g, struct old *old)
{
	uint64_t now = ssw_now_ns();
	int n = expire(now, old);
	int budget = shm_seg_fd_budget(), shed = 0;
	while (cache_lru.n && shed++ < SHED_MAX && (cache_lru.n == CACHE_CAP || KEPT_NOW >= budget))
		cache_evict(old, &n);
	int32_t i = KEPT_NOW < budget ? ssw_lru_take(&cache_lru) : -1;
	if (i < 0) {
		old[n++] = (struct old){ g->p, shm_seg_size(g->ring), g->memfd };
		return n;
	}
	cache[i].g = *g;
	cache[i].g.recycled = 0;
	cache[i].g.nofork = 0;
	cache[i].t = now;
	return n;
}

static int seg_new(struct shm_seg *g)
{
	g->recycled = 0;
	g->ring = shm_ring_size_setting();
	uint64_t size = shm_seg_size(g->ring);
	g->memfd = shm_seg_create("sockswitch", size); /* sealed: kept as spare, it stays so */
	if (g->memfd < 0)
		return g->memfd;
	g->p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, g->memfd, 0);
	if (g->p == MAP_FAILED) {
		int rc = -errno;
		sys_close(g->memfd);
		g->memfd = -1;
		return rc;
	}
	return 0;
}

int shm_seg_get(struct shm_seg *g, const struct sockaddr *dst)
{
	struct shm_seg_key k;
	struct old old[OLD_MAX];
	g->memfd = -1;
	shm_seg_key_dst(&k, dst);
	uint64_t ring = shm_ring_size_setting();
	pthread_once(&atfork_once, atfork_install); /* before anything is kept */
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	int32_t i = find_recycled(&k, ring);
	if (i >= 0) {
		*g = cache[i].g;
		g->recycled = 1;
		ssw_lru_drop(&cache_lru, i);
	} else if (spare.memfd >= 0) {
		*g = spare;
		spare.memfd = -1;
	}
	int nold = expire(ssw_now_ns(), old);
	pthread_mutex_unlock(&seg_lock);
	free_old(old, nold);
	if (g->memfd >= 0 && !ssw_fork_in(g->p, shm_seg_size(g->ring), g->nofork)) {
		seg_free(g);
		i = -1;
	}
	g->nofork = 0;
	int rc = i >= 0 || g->memfd >= 0 ? 0 : seg_new(g);
	if (i < 0)
		g->key = k; /* the listener's pid and uid come with shm_seg_settle */
	return rc;
}

/* A segment nobody else has seen (new or the spare) becomes the spare, or is
 * freed when there is one; a recycled one goes back to the cache. */
void shm_seg_unused(struct shm_seg *g)
{
	struct old old[OLD_MAX];
	int nold = 0;
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	if (g->recycled) {
		nold = cache_put(g, old);
	} else if (spare.memfd < 0) {
		spare = *g;
		spare.nofork = 0;
		g->memfd = -1;
	} else {
		old[nold++] = (struct old){ g->p, shm_seg_size(g->ring), g->memfd };
	}
	pthread_mutex_unlock(&seg_lock);
	free_old(old, nold);
	g->memfd = -1;
}

int shm_seg_settle(struct shm_seg *g, int32_t pid, uint32_t uid)
{
	if (g->recycled && (g->key.pid != pid || g->key.uid != uid)) {
		/* another process answers for that address now: the old
		 * listener's segment waits for its own (or leaves the cache) */
		shm_seg_unused(g);
		int rc = seg_new(g);
		if (rc < 0)
			return rc;
	}
	g->key.pid = pid;
	g->key.uid = uid;
	return 0;
}

void shm_seg_prepare(struct shm_seg *g)
{
	struct shm_seg_hdr *h = g->p;
	uint32_t epoch = 0;
	if (g->recycled) { /* the old connection's indices and flags */
		epoch = atomic_load_explicit(&h->epoch, memory_order_relaxed) + 1;
		memset(h, 0, sizeof *h);
	}
	shm_seg_init(h, g->ring);
	atomic_store_explicit(&h->epoch, epoch, memory_order_relaxed);
	/* shm_seg_retain keeps the memfd (or a newer connection takes it
	 * later, and says so here) */
	atomic_fetch_or_explicit(&h->feat[0], SHM_FEAT_KEEP | SHM_FEAT_EPOCH, memory_order_relaxed);
}

/* Called with seg_lock: the oldest live connection gives its memfd up
 * (into victims[n], closed by the caller): it will not be recycled. */
static void live_shed(int *victims, int *n)
{
	int32_t i = ssw_lru_oldest(&live_lru);
	struct ssw_ep *old = live[i];
	victims[(*n)++] = old->seg_fd;
	old->seg_fd = -1;
	if (old->seg) /* its acceptor need not keep a mapping for it */
		atomic_fetch_and_explicit(&((struct shm_seg_hdr *)old->seg)->feat[0], ~SHM_FEAT_KEEP, memory_order_relaxed);
	live_remove(old);
}

void shm_seg_retain(struct shm_seg *g, struct ssw_ep *ep)
{
	int fd = g->recycled ? g->memfd : ssw_fd_hide(g->memfd); /* a recycled one is hidden already */
	int victims[SHED_MAX + 2], nv = 0, nold = 0;
	struct old old[OLD_MAX];
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	fd_top = fd > ep->ctl_fd ? fd : ep->ctl_fd;
	int budget = shm_seg_fd_budget(), shed = 0;
	while (cache_lru.n && shed++ < SHED_MAX && KEPT_NOW >= budget)
		cache_evict(old, &nold);
	if (live_lru.n && (live_lru.n == LIVE_CAP || KEPT_NOW >= budget))
		live_shed(victims, &nv); /* the newest takes the oldest's place */
	while (live_lru.n && shed++ < SHED_MAX && KEPT_NOW >= budget)
		live_shed(victims, &nv);
	int32_t i = KEPT_NOW < budget ? ssw_lru_take(&live_lru) : -1;
	if (i >= 0) {
		live[i] = ep;
		ep->live_slot = i;
	} else { /* nothing may be kept: not this one either */
		victims[nv++] = fd;
		fd = -1;
		ep->live_slot = -1;
		if (ep->seg)
			atomic_fetch_and_explicit(&((struct shm_seg_hdr *)ep->seg)->feat[0], ~SHM_FEAT_KEEP,
						  memory_order_relaxed);
	}
	ep->seg_fd = fd;
	pthread_mutex_unlock(&seg_lock);
	for (int k = 0; k < nv; k++)
		sys_close(victims[k]);
	free_old(old, nold);
}

void shm_seg_release(struct ssw_ep *ep, bool recycle)
{
	struct old old[OLD_MAX];
	int nold = 0;
	int fd;
	pthread_mutex_lock(&seg_lock);
	bool mine = live_remove(ep) || owner == ssw_pid();
	fd = ep->seg_fd; /* read under the lock: a newer connection may take it */
	if (fd >= 0 && recycle && mine && ep->seg) {
		struct shm_seg g = { .memfd = fd, .p = ep->seg, .ring = ep->tx.size, .key = ep->seg_key };
		ep->seg_fd = -1;
		ep->seg = NULL; /* the cache's now */
		nold = cache_put(&g, old);
		fd = -1;
	}
	pthread_mutex_unlock(&seg_lock);
	if (fd >= 0)
		sys_close(fd); /* this process's copy; the ep keeps the number for the others */
	free_old(old, nold);
}

void *shm_seg_map_take(uint64_t dev, uint64_t ino, size_t size, int32_t pid, uint32_t uid)
{
	void *p = NULL;
	bool marked = false;
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	int32_t i = shm_maps_find(dev, ino, size, pid, uid);
	if (i >= 0) {
		p = shm_maps_at(i)->p;
		marked = shm_maps_at(i)->nofork;
		shm_maps_drop(i);
	}
	pthread_mutex_unlock(&seg_lock);
	if (p && !ssw_fork_in(p, size, marked)) {
		munmap(p, size);
		p = NULL; /* mapped anew by the caller */
	}
	return p;
}

/* With seg_lock: m joins the kept mappings (the oldest out when full, and
 * those idle too long, into old[]). */
static void keep_locked(struct shm_kept_map *m, struct old *old, int *nold)
{
	uint64_t now = ssw_now_ns();
	*nold = expire(now, old);
	m->t = now;
	struct shm_kept_map out;
	shm_maps_add(m, &out);
	if (out.p)
		old[(*nold)++] = (struct old){ out.p, out.size, -1 };
}

void shm_seg_map_keep(struct ssw_ep *ep)
{
	struct old old[OLD_MAX];
	int nold = 0;
	if (!ep->seg || !ep->seg_ino || !atomic_load(&ep->cred_ok))
		return;
	/* a connector that keeps no memfd for it never sends it again */
	const struct shm_seg_hdr *h = ep->seg;
	if (!(atomic_load_explicit(&h->feat[0], memory_order_relaxed) & SHM_FEAT_KEEP))
		return;
	pthread_once(&atfork_once, atfork_install);
	pthread_mutex_lock(&seg_lock);
	if (owner == ssw_pid()) {
		struct shm_kept_map m = { .p = ep->seg, .size = ep->seg_size, .dev = ep->seg_dev, .ino = ep->seg_ino,
					  .pid = ep->peer_pid, .uid = ep->peer_uid };
		keep_locked(&m, old, &nold);
		ep->seg = NULL; /* kept */
	}
	pthread_mutex_unlock(&seg_lock);
	free_old(old, nold);
}

void shm_seg_keep_mapping(void *p, size_t size, uint64_t dev, uint64_t ino, int32_t pid, uint32_t uid)
{
	struct old old[OLD_MAX];
	int nold = 0;
	pthread_once(&atfork_once, atfork_install);
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	struct shm_kept_map m = { .p = p, .size = size, .dev = dev, .ino = ino, .pid = pid, .uid = uid, .nofork = true };
	keep_locked(&m, old, &nold);
	pthread_mutex_unlock(&seg_lock);
	free_old(old, nold);
}

int shm_seg_maps_chained(void)
{
	pthread_mutex_lock(&seg_lock);
	int n = shm_maps_chained();
	pthread_mutex_unlock(&seg_lock);
	return n;
}

void shm_seg_kept(int *segs, int *maps_n)
{
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	*segs = cache_lru.n;
	*maps_n = shm_maps_count();
	pthread_mutex_unlock(&seg_lock);
}
