/* shm_lend.c — a fork-per-connection server's copy of its child's segment.
 *
 * Such a server accepts, forks a child for the connection and closes its own
 * copy at once.  Its copy of the connector's segment (1 MiB, its first
 * pages touched) used to be unmapped there: a page-table walk and TLB
 * flush, 100-400 us a request on these machines, in the loop that accepts.
 * And a child that ends with _exit() (or a signal) never released the
 * segment to its connector (shm_seg.c: the acceptor's last holder does
 * that at its close), so the connector could not recycle it and made a new
 * one for each connection.
 *
 * So the parent keeps the mapping instead, marked MADV_DONTFORK (no later
 * child gets it), until every child forked since it accepted the
 * connection has exited (kill(pid, 0); a pid reused meanwhile only keeps
 * it longer) and nobody holds the connection's rendezvous socket any more
 * (the kernel's word, sock_diag: a grandchild that a child forked, or a
 * relay it made, unseen here, holds it), looked at before each accept.
 * Then, as the acceptor's last holder: if nobody released the segment and it still carries that
 * connection (its connector's epoch is the one seen at the accept: no
 * recycle since), it is released now; the mapping is kept as a last
 * holder's is (shm_seg.c), to serve again when the connector recycles the
 * segment for its next connection here, else unmapped.  Everything this
 * needs was recorded at the accept, before any child existed (and the
 * rendezvous socket's inode at the lend, from our own descriptor: no
 * system call on the accept path), in the fork-local page (a child has none of it; the parent writes no page a
 * fork write-protected): the children may have written anything in the
 * shared memory.  A child that lies there can only do what it could before
 * (release its own segment early: its own connection's loss). */
#include "providers/shm/shm_priv.h"

#include "common/forklocal.h"
#include "common/sockdiag.h"
#include "common/sys.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define ACCEPTED_MAX 16 /* connections accepted here and still open, by address */
#define LENT_MAX 8
#define KIDS_MAX 4
#define LOOK_AGAIN_NS 100000000ull /* a lent segment whose socket is still held: looked at again after */

/* What the acceptor knew of a connection's segment at the accept. */
struct seg_rec {
	struct shm_seg_hdr *seg; /* NULL: free (in a lent record) */
	size_t size;
	uint64_t dev, ino;
	int32_t pid;
	uint32_t uid;
	uint32_t epoch;
	bool has_epoch;   /* the connector counts recycles */
	uint64_t ctl_ino; /* the rendezvous socket's inode, our end (at the lend) */
};

struct accepted {
	struct ssw_ep *ep; /* NULL: free */
	struct seg_rec r;
	int ctl_fd;     /* ours: asked for its inode only if the segment is lent */
	unsigned gen;   /* this process's fork generation at the accept */
	unsigned outer; /* and its count of forks past the handlers (relays) */
};

struct lent {
	struct seg_rec r;
	uint64_t next_ns; /* when to look at the rendezvous socket again */
	pid_t kids[KIDS_MAX];
};

struct lend_state {
	struct accepted acc[ACCEPTED_MAX];
	struct lent lent[LENT_MAX];
	int nlent;
};
_Static_assert(sizeof(struct lend_state) <= sizeof ssw_fl->shm_lend, "fits the fork-local room");

#define st ((struct lend_state *)(void *)ssw_fl->shm_lend)
#define lend_lock (ssw_fl->seg_lock) /* short sections, never nested in shm_seg.c's */

static struct accepted *acc_slot(const struct ssw_ep *ep)
{
	return &st->acc[((uintptr_t)ep >> 12) % ACCEPTED_MAX]; /* endpoints are page-aligned mappings */
}

void shm_lend_accepted(struct ssw_ep *ep)
{
	struct shm_seg_hdr *h = ep->seg;
	if (!h || !ep->seg_ino || !atomic_load(&ep->cred_ok))
		return;
	uint32_t feat = atomic_load_explicit(&h->feat[0], memory_order_relaxed);
	struct accepted a = { .ep = ep,
			      .r = { .seg = h, .size = ep->seg_size, .dev = ep->seg_dev, .ino = ep->seg_ino,
				     .pid = ep->peer_pid, .uid = ep->peer_uid,
				     .epoch = atomic_load_explicit(&h->epoch, memory_order_relaxed),
				     .has_epoch = (feat & SHM_FEAT_EPOCH) != 0 },
			      .ctl_fd = ep->ctl_fd, .gen = ssw_fl->fork_gen, .outer = ssw_fl->outer_forks };
	pthread_mutex_lock(&lend_lock);
	*acc_slot(ep) = a; /* a newer connection at the same place overwrites */
	pthread_mutex_unlock(&lend_lock);
}

void shm_lend_forget(struct ssw_ep *ep)
{
	pthread_mutex_lock(&lend_lock);
	struct accepted *a = acc_slot(ep);
	if (a->ep == ep)
		a->ep = NULL;
	pthread_mutex_unlock(&lend_lock);
}

bool shm_lend_detach(struct ssw_ep *ep)
{
	bool lent = false;
	pthread_mutex_lock(&lend_lock);
	struct accepted *a = acc_slot(ep);
	unsigned forks = ssw_fl->fork_gen - a->gen;
	/* accepted here (not a child's view), its other holders the children
	 * forked since (at most KIDS_MAX, all still remembered; no relay made
	 * meanwhile, which fork.c does not see), room left */
	struct stat cs;
	if (a->ep == ep && a->r.seg == ep->seg && forks > 0 && forks <= KIDS_MAX && forks <= SSW_FORK_PIDS &&
	    a->outer == ssw_fl->outer_forks && st->nlent < LENT_MAX && fstat(a->ctl_fd, &cs) == 0) {
		struct lent l = { .r = a->r };
		l.r.ctl_ino = (uint64_t)cs.st_ino; /* still our descriptor: it closes after this */
		int n = 0;
		for (unsigned g = a->gen + 1; g - a->gen <= forks; g++)
			if (ssw_fl->child_pid[g % SSW_FORK_PIDS] > 0)
				l.kids[n++] = ssw_fl->child_pid[g % SSW_FORK_PIDS];
		/* marked under seg_lock, which shm_seg.c's fork handler takes:
		 * no fork in between */
		if (n && ssw_fork_out(l.r.seg, l.r.size)) {
			for (int i = 0; i < LENT_MAX; i++)
				if (!st->lent[i].r.seg) {
					st->lent[i] = l;
					st->nlent++;
					lent = true;
					break;
				}
		}
	}
	if (a->ep == ep)
		a->ep = NULL;
	pthread_mutex_unlock(&lend_lock);
	return lent;
}

static bool kids_gone(const struct lent *l)
{
	int saved = errno; /* the application's */
	bool gone = true;
	for (int i = 0; i < KIDS_MAX && gone; i++)
		if (l->kids[i] > 0 && !(SYS_(kill, l->kids[i], 0) < 0 && errno == ESRCH))
			gone = false;
	errno = saved;
	return gone;
}

/* The children of a lent segment are gone: this process is the acceptor's
 * last holder. */
static void finish(const struct seg_rec *r)
{
	struct shm_seg_hdr *h = r->seg;
	bool same = r->has_epoch && atomic_load_explicit(&h->epoch, memory_order_relaxed) == r->epoch;
	if (same && !atomic_load_explicit(&h->released, memory_order_acquire))
		atomic_store_explicit(&h->released, 1, memory_order_release);
	bool keep = same && (atomic_load_explicit(&h->feat[0], memory_order_relaxed) & SHM_FEAT_KEEP);
	if (keep)
		shm_seg_keep_mapping(h, r->size, r->dev, r->ino, r->pid, r->uid);
	else
		munmap(h, r->size);
}

void shm_lend_reap(void)
{
	if (!__atomic_load_n(&st->nlent, __ATOMIC_RELAXED))
		return;
	struct seg_rec done[LENT_MAX];
	int n = 0;
	uint64_t now = ssw_now_ns();
	pthread_mutex_lock(&lend_lock);
	for (int i = 0; i < LENT_MAX; i++) {
		struct lent *l = &st->lent[i];
		if (!l->r.seg || now < l->next_ns || !kids_gone(l))
			continue;
		/* a process the children left behind (a grandchild, a relay one
		 * of them made) may hold the connection still: the kernel says
		 * whether anyone has the rendezvous socket's end open */
		int alive = ssw_diag_unix_alive(l->r.ctl_ino);
		if (alive > 0) {
			l->next_ns = now + LOOK_AGAIN_NS;
			continue;
		}
		done[n] = l->r;
		done[n++].has_epoch &= alive == 0; /* cannot tell: never released */
		l->r.seg = NULL;
		st->nlent--;
	}
	pthread_mutex_unlock(&lend_lock);
	for (int i = 0; i < n; i++)
		finish(&done[i]);
}
