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
 * already there.
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

#include "common/forklocal.h"
#include "common/params.h"
#include "common/sys.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* Segments waiting for their next connection, per process: each holds its
 * memfd, its mapping and the pages its connection touched (at most one ring
 * pair's worth: 1 MiB by default). */
#define RECYCLE_MAX 8
/* Live connections that keep their memfd open to recycle it at their end:
 * one hidden descriptor each, so only the newest few (a new connection
 * takes the oldest one's: that one will not be recycled).  A process with
 * thousands of connections then needs 2 descriptors per connection plus
 * these (README Limits). */
#define LIVE_MAX 16

#define seg_lock (ssw_fl->seg_lock) /* a forked child's is unlocked (common/forklocal.h) */
static struct shm_seg spare = { .memfd = -1 };
static struct shm_seg cache[RECYCLE_MAX];
static int ncache;
static uint64_t cache_age[RECYCLE_MAX]; /* insertion order: the oldest leaves first */
static uint64_t age_next;
static pid_t owner;                     /* the process the spare, cache and live list belong to */
static struct ssw_ep *live[LIVE_MAX];   /* oldest first; endpoints no other process holds */
static int nlive;

/* The acceptor's kept mappings. */
#define MAPS_MAX 8
static struct {
	void *p;
	size_t size;
	uint64_t dev, ino;
	int32_t pid;
	uint32_t uid;
	uint64_t age;
	bool nofork; /* marked MADV_DONTFORK at a fork */
} maps[MAPS_MAX];
static int nmaps;

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
	for (int i = 0; i < ncache; i++)
		seg_forget(&cache[i]);
	ncache = 0;
	for (int i = 0; i < nmaps; i++)
		if (!maps[i].nofork)
			munmap(maps[i].p, maps[i].size);
	nmaps = 0;
	nlive = 0; /* the parent's: its fds are closed as the connections end */
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
	for (int i = 0; i < ncache; i++) {
		if (cache[i].nofork || (cache[i].nofork = ssw_fork_out(cache[i].p, shm_seg_size(cache[i].ring))))
			continue;
		seg_free(&cache[i]);
		cache[i] = cache[--ncache];
		cache_age[i--] = cache_age[ncache];
	}
	for (int i = 0; i < nmaps; i++) {
		if (maps[i].nofork || (maps[i].nofork = ssw_fork_out(maps[i].p, maps[i].size)))
			continue;
		munmap(maps[i].p, maps[i].size);
		maps[i--] = maps[--nmaps];
	}
}
/* Nothing written unless something is kept: each write here costs the
 * process a page fault after every fork (common/forklocal.h). */
static void atfork_parent(void)
{
	if (nlive)
		nlive = 0;
	pthread_mutex_unlock(&seg_lock);
}
SSW_FORK_TEXT static void atfork_child(void)
{
	if (spare.memfd < 0 && !ncache && !nmaps && !nlive)
		return; /* drop_foreign takes the child's pid at its first use */
	forget_all();
	owner = 0;
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_install(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* Called with seg_lock: ep leaves the live list (false: it was not there). */
static bool live_remove(struct ssw_ep *ep)
{
	for (int i = 0; i < nlive; i++)
		if (live[i] == ep) {
			memmove(&live[i], &live[i + 1], (size_t)(nlive - i - 1) * sizeof live[0]);
			nlive--;
			return true;
		}
	return false;
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
static int find_recycled(const struct shm_seg_key *dst, uint64_t ring)
{
	int best = -1;
	for (int i = 0; i < ncache; i++)
		if (cache[i].ring == ring && same_dst(&cache[i].key, dst) && released(&cache[i]) &&
		    (best < 0 || cache_age[i] > cache_age[best]))
			best = i;
	return best;
}

/* Called with seg_lock: g joins the cache, the oldest entry leaving when it
 * is full (returned in *out for the caller to free outside the lock). */
static void cache_put(const struct shm_seg *g, struct shm_seg *out)
{
	out->memfd = -1;
	int slot = ncache;
	if (ncache == RECYCLE_MAX) {
		slot = 0;
		for (int i = 1; i < ncache; i++)
			if (cache_age[i] < cache_age[slot])
				slot = i;
		*out = cache[slot];
	} else {
		ncache++;
	}
	cache[slot] = *g;
	cache[slot].recycled = 0;
	cache[slot].nofork = 0;
	cache_age[slot] = ++age_next;
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
	g->memfd = -1;
	shm_seg_key_dst(&k, dst);
	uint64_t ring = shm_ring_size_setting();
	pthread_once(&atfork_once, atfork_install); /* before anything is kept */
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	int i = find_recycled(&k, ring);
	if (i >= 0) {
		*g = cache[i];
		g->recycled = 1;
		cache[i] = cache[--ncache];
		cache_age[i] = cache_age[ncache];
	} else if (spare.memfd >= 0) {
		*g = spare;
		spare.memfd = -1;
	}
	pthread_mutex_unlock(&seg_lock);
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
	struct shm_seg out = { .memfd = -1 };
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	if (g->recycled) {
		cache_put(g, &out);
	} else if (spare.memfd < 0) {
		spare = *g;
		spare.nofork = 0;
		g->memfd = -1;
	} else {
		out = *g;
	}
	pthread_mutex_unlock(&seg_lock);
	if (out.memfd >= 0)
		seg_free(&out);
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
	if (g->recycled) /* the old connection's indices and flags */
		memset(h, 0, sizeof *h);
	shm_seg_init(h, g->ring);
}

void shm_seg_retain(struct shm_seg *g, struct ssw_ep *ep)
{
	int fd = g->recycled ? g->memfd : ssw_fd_hide(g->memfd); /* a recycled one is hidden already */
	int victim = -1;
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	if (nlive == LIVE_MAX) {
		struct ssw_ep *old = live[0];
		live_remove(old);
		victim = old->seg_fd;
		old->seg_fd = -1;
	}
	live[nlive++] = ep;
	ep->seg_fd = fd;
	pthread_mutex_unlock(&seg_lock);
	if (victim >= 0)
		sys_close(victim);
}

void shm_seg_release(struct ssw_ep *ep, bool recycle)
{
	struct shm_seg out = { .memfd = -1 };
	int fd;
	pthread_mutex_lock(&seg_lock);
	bool mine = live_remove(ep) || owner == ssw_pid();
	fd = ep->seg_fd; /* read under the lock: a newer connection may take it */
	if (fd >= 0 && recycle && mine && ep->seg) {
		struct shm_seg g = { .memfd = fd, .p = ep->seg, .ring = ep->tx.size, .key = ep->seg_key };
		ep->seg_fd = -1;
		ep->seg = NULL; /* the cache's now */
		cache_put(&g, &out);
		fd = -1;
	}
	pthread_mutex_unlock(&seg_lock);
	if (fd >= 0)
		sys_close(fd); /* this process's copy; the ep keeps the number for the others */
	if (out.memfd >= 0)
		seg_free(&out);
}

void *shm_seg_map_take(uint64_t dev, uint64_t ino, size_t size, int32_t pid, uint32_t uid)
{
	void *p = NULL;
	bool marked = false;
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	for (int i = 0; i < nmaps; i++)
		if (maps[i].dev == dev && maps[i].ino == ino && maps[i].size == size && maps[i].pid == pid &&
		    maps[i].uid == uid) {
			p = maps[i].p;
			marked = maps[i].nofork;
			maps[i] = maps[--nmaps];
			break;
		}
	pthread_mutex_unlock(&seg_lock);
	if (p && !ssw_fork_in(p, size, marked)) {
		munmap(p, size);
		p = NULL; /* mapped anew by the caller */
	}
	return p;
}

void shm_seg_map_keep(struct ssw_ep *ep)
{
	void *old = NULL;
	size_t oldsz = 0;
	if (!ep->seg || !ep->seg_ino || !atomic_load(&ep->cred_ok))
		return;
	pthread_once(&atfork_once, atfork_install);
	pthread_mutex_lock(&seg_lock);
	if (owner == ssw_pid()) {
		int slot = nmaps;
		if (nmaps == MAPS_MAX) {
			slot = 0;
			for (int i = 1; i < nmaps; i++)
				if (maps[i].age < maps[slot].age)
					slot = i;
			old = maps[slot].p;
			oldsz = maps[slot].size;
		} else {
			nmaps++;
		}
		maps[slot].p = ep->seg;
		maps[slot].size = ep->seg_size;
		maps[slot].dev = ep->seg_dev;
		maps[slot].ino = ep->seg_ino;
		maps[slot].pid = ep->peer_pid;
		maps[slot].uid = ep->peer_uid;
		maps[slot].age = ++age_next;
		maps[slot].nofork = false;
		ep->seg = NULL; /* kept */
	}
	pthread_mutex_unlock(&seg_lock);
	if (old)
		munmap(old, oldsz);
}

void shm_seg_kept(int *segs, int *maps)
{
	pthread_mutex_lock(&seg_lock);
	drop_foreign();
	*segs = ncache;
	*maps = nmaps;
	pthread_mutex_unlock(&seg_lock);
}
