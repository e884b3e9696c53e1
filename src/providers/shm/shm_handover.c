/* shm_handover.c — an shm endpoint carried across exec (provider.h
 * ep_export / ep_import): the image that execs describes it, the new image
 * of the same process maps the same segment and goes on where the rings
 * stand.  The peer sees nothing: the rendezvous connection (its doorbell
 * and hang-up) and the segment are the same kernel objects, and the pid it
 * knows is the same.
 *
 * What goes along: the rendezvous socket and the segment's memfd (the
 * connector's kept one, or the acceptor's: shm_seg_map_fd_keep), and a copy
 * of the endpoint in which only numbers count: every pointer (the segment,
 * the rings in it) is made anew from the new mapping (shm_ring_attach) and
 * the ring positions are checked against it. */
#include "providers/shm/shm_priv.h"

#include "common/log.h"
#include "common/sys.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>


static bool rings_agree(const struct ssw_ep *ep);

int shm_ep_export(struct ssw_ep *ep, void *out, size_t *len, int *fds, int max)
{
	if (*len < sizeof(struct shm_handover_blob) || max < 2)
		return -ENOSPC;
	if (!ep->seg || ep->ctl_fd < 0)
		return -ENOTCONN;
	if (ep->my_efd >= 0 || ep->peer_efd >= 0)
		return -EOPNOTSUPP; /* a test rig's eventfds are not carried */
	/* a reservation being written, a record being read, a copy queued:
	 * pointers into this image's memory would be in flight */
	if (ep->err || ep->peer_gone || ep->tx.resv || ep->rx.cur || shm_rdma_queued() || !rings_agree(ep))
		return -EBUSY; /* the last: what the new image will check */
	struct shm_seg_hdr *h = ep->seg;
	int connector = ep->tx.ctl == &h->ring[0];
	int memfd = connector ? shm_seg_fd_now(ep) : ep->map_fd;
	if (memfd < 0)
		return -ENOENT; /* not kept (the descriptor budget): relayed */
	struct shm_handover_blob *b = out;
	memset(b, 0, sizeof *b);
	b->magic = SHM_HANDOVER_MAGIC;
	b->ep_size = sizeof b->ep;
	b->connector = connector;
	memcpy(&b->ep, ep, sizeof b->ep);
	*len = sizeof *b;
	fds[0] = ep->ctl_fd;
	fds[1] = memfd;
	return 2;
}

/* A flag as its byte says (the description is checked, not trusted: a
 * byte other than 0 or 1 read as bool would be undefined). */
static bool flag(const bool *p)
{
	uint8_t v;
	memcpy(&v, p, 1);
	return v != 0;
}

/* r's pointers (just attached) with the rest of saved: the positions and
 * flags this side kept privately. */
static void ring_restore(struct shm_ring *r, const struct shm_ring *saved)
{
	struct shm_ring live = *r;
	memcpy(r, saved, sizeof *r);
	r->ctl = live.ctl;
	r->data = live.data;
	r->size = live.size;
	r->peer_feat = live.peer_feat;
	r->can_skip = flag(&saved->can_skip);
	r->rewind = flag(&saved->rewind);
	r->dirty = flag(&saved->dirty);
}

/* The positions this side keeps privately, as its own code leaves them
 * between calls: each in step with the others and with the ring's size.
 * The peer's indices are not looked at here: it may move them at any
 * moment, and the ring code checks them at every use (a wrong one resets
 * the connection, as always); a producer that found the ring empty goes
 * on at the next lap's start, so an index may run up to two rings ahead. */
static bool rings_agree(const struct ssw_ep *ep)
{
	const struct shm_ring *t = &ep->tx, *r = &ep->rx;
	return !ep->err && !ep->peer_gone && !t->resv && !r->cur && !((t->pos | t->pub | t->other | t->skip) & 7) &&
	       !((r->pos | r->other) & 7) && t->pub <= t->pos && t->other <= t->pos && t->pos - t->other <= 2 * t->size &&
	       t->skip <= t->pos && r->taken <= r->pos && r->other >= r->pos && r->other - r->pos <= 2 * r->size;
}

int shm_ep_import(const void *in, size_t len, const int *fds, int n, struct ssw_ep **out)
{
	struct shm_handover_blob b;
	if (len != sizeof b || n != 2)
		return -EINVAL;
	memcpy(&b, in, sizeof b);
	uint64_t ring = b.ep.tx.size;
	if (b.magic != SHM_HANDOVER_MAGIC || b.ep_size != sizeof b.ep || ring < SHM_RING_MIN || ring > SHM_RING_MAX ||
	    (ring & (ring - 1)) || b.ep.rx.size != ring || b.ep.seg_size != shm_seg_size(ring))
		return -EINVAL;
	int dom = 0, type = 0;
	socklen_t l = sizeof dom;
	if (sys_getsockopt(fds[0], SOL_SOCKET, SO_DOMAIN, &dom, &l) < 0 || dom != AF_UNIX)
		return -EINVAL;
	l = sizeof type;
	if (sys_getsockopt(fds[0], SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_SEQPACKET)
		return -EINVAL;
	struct stat st;
	if (shm_seg_check(fds[1], b.ep.seg_size, &st) < 0)
		return -EINVAL;
	void *p = mmap(NULL, b.ep.seg_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	if (p == MAP_FAILED)
		return -errno;
	struct shm_seg_hdr *h = p;
	struct ssw_ep *ep = shm_ep_alloc();
	if (!ep || __atomic_load_n(&h->magic, __ATOMIC_RELAXED) != SHM_MAGIC ||
	    __atomic_load_n(&h->version, __ATOMIC_RELAXED) != SHM_VERSION) {
		munmap(p, b.ep.seg_size);
		ssw_shared_free(ep, sizeof *ep, true);
		return ep ? -EINVAL : -ENOMEM;
	}
	memcpy(ep, &b.ep, sizeof *ep);
	struct shm_ring tx = ep->tx, rx = ep->rx;
	memset(&ep->tx, 0, sizeof ep->tx);
	memset(&ep->rx, 0, sizeof ep->rx);
	shm_ring_attach(ep, h, ring, b.connector);
	ring_restore(&ep->tx, &tx);
	ring_restore(&ep->rx, &rx);
	ep->seg = p;
	ep->ctl_fd = fds[0];
	ep->seg_fd = b.connector ? fds[1] : -1;
	ep->map_fd = b.connector ? -1 : fds[1];
	ep->live_slot = -1; /* the connector's live list was the other image's */
	ep->my_efd = ep->peer_efd = -1;
	ep->seg_dev = (uint64_t)st.st_dev;
	ep->seg_ino = (uint64_t)st.st_ino;
	atomic_store(&ep->vouch_lock, 0);
	/* learnt again from the rendezvous socket (the same kernel object):
	 * the peer's credentials, and whether it is gone */
	atomic_store(&ep->cred_done, 0);
	atomic_store(&ep->cred_ok, 0);
	ep->gone_state = 0;
	if (ep->nvouch > SHM_VOUCHES * 2)
		ep->nvouch %= SHM_VOUCHES;
	/* our exposure table is a new one: vouch for it again before the
	 * first exposure (the peer keeps the newest vouch of a pid) */
	for (int i = 0; i < SHM_VOUCHERS; i++)
		atomic_store(&ep->vouchers[i], 0);
	if (!rings_agree(ep)) {
		SSW_DEBUG("handover: ring positions do not agree (tx pos %llu pub %llu seen %llu head %llu; rx pos %llu "
			  "seen %llu taken %llu tail %llu held %llu head %llu size %llu)", (unsigned long long)ep->tx.pos,
			  (unsigned long long)ep->tx.pub, (unsigned long long)ep->tx.other,
			  (unsigned long long)atomic_load(&ep->tx.ctl->head), (unsigned long long)ep->rx.pos,
			  (unsigned long long)ep->rx.other, (unsigned long long)ep->rx.taken,
			  (unsigned long long)atomic_load(&ep->rx.ctl->tail), (unsigned long long)atomic_load(&ep->rx.ctl->held),
			  (unsigned long long)atomic_load(&ep->rx.ctl->head), (unsigned long long)ep->rx.size);
		munmap(p, b.ep.seg_size);
		ssw_shared_free(ep, sizeof *ep, true);
		return -EINVAL;
	}
	if (ep->map_fd >= 0)
		shm_seg_map_fd_adopt(); /* counted as kept here, as where it was */
	*out = ep;
	return 0;
}
