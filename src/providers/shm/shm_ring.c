/* shm_ring.c — single-producer/single-consumer message rings in shared memory.
 *
 * The peer writes this memory: every index and record header read from it is
 * validated before use and read exactly once, so a corrupt or malicious peer
 * can only fail its own connection (-ECONNRESET), never make us overrun. */
#include "providers/shm/shm_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

#define ALIGN8(x) (((x) + 7u) & ~(uint64_t)7u)

uint64_t shm_seg_size(uint64_t ring_size)
{
	return SHM_DATA_OFF + 2 * ring_size;
}

void shm_seg_init(struct shm_seg_hdr *h, uint64_t ring_size)
{
	h->magic = SHM_MAGIC;
	h->version = SHM_VERSION;
	h->ring_size = ring_size;
	h->seg_size = shm_seg_size(ring_size);
}

void shm_ring_attach(struct ssw_ep *ep, struct shm_seg_hdr *h, uint64_t ring_size, int connector)
{
	uint8_t *base = (uint8_t *)h + SHM_DATA_OFF;
	int t = connector ? 0 : 1, r = connector ? 1 : 0;
	ep->tx.ctl = &h->ring[t];
	ep->tx.data = base + (uint64_t)t * ring_size;
	ep->tx.size = ring_size;
	ep->rx.ctl = &h->ring[r];
	ep->rx.data = base + (uint64_t)r * ring_size;
	ep->rx.size = ring_size;
}

static int corrupt(struct ssw_ep *ep)
{
	ep->err = -ECONNRESET;
	return -ECONNRESET;
}

void shm_wake_peer(struct ssw_ep *ep)
{
	/* Pairs with the consumer's store of `armed` then re-read of `tail`:
	 * either it sees our tail, or we see its flag. */
	atomic_thread_fence(memory_order_seq_cst);
	/* one ring per sleep round, however many sleepers (they share the fd) */
	if (atomic_load_explicit(&ep->tx.ctl->armed, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&ep->tx.ctl->rung, 1, memory_order_relaxed)) {
		atomic_store_explicit(&ep->tx.ctl->rang_ns, ssw_now_ns(), memory_order_relaxed);
		shm_ring_bell(ep);
	}
}

/* Ring the peer's doorbell: one byte on the rendezvous connection (the fd
 * it already sleeps on for our hang-up), or an eventfd where the endpoint
 * has one (test rigs).  A full socket buffer means rings are pending. */
void shm_ring_bell(struct ssw_ep *ep)
{
	if (ep->peer_efd >= 0) {
		uint64_t one = 1;
		(void)!sys_write(ep->peer_efd, &one, sizeof one);
	} else if (ep->ctl_fd >= 0) {
		char b = 0;
		SYS_(sendto, ep->ctl_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL, NULL, 0);
	}
}

int shm_ring_reserve(struct ssw_ep *ep, size_t len, void **buf)
{
	struct shm_ring *r = &ep->tx;

	r->resv = 0;
	if (ep->err)
		return ep->err;
	if (ep->peer_gone) /* died: a reset if it left our data unread */
		return shm_gone_state(ep);
	if (atomic_load_explicit(&ep->rx.ctl->closed, memory_order_acquire) == SHM_CLOSED_RESET)
		return -ECONNRESET;
	uint64_t need = SHM_REC_HDR + ALIGN8(len);
	if (need > r->size / 4)
		return -EMSGSIZE;

	uint64_t off = r->pos & (r->size - 1);
	uint64_t pad = off + need > r->size ? r->size - off : 0;
	if (r->pos - r->other + pad + need > r->size) {
		uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
		if (head > r->pos || r->pos - head > r->size || (head & 7))
			return corrupt(ep);
		r->other = head;
		if (r->pos - r->other + pad + need > r->size)
			return -EAGAIN;
	}
	if (pad) {
		/* goes out with the next published record; an abandoned
		 * reservation leaves only this (valid) padding behind */
		struct shm_rec p = { (uint32_t)(pad - SHM_REC_HDR), SHM_REC_PAD };
		memcpy(r->data + off, &p, sizeof p);
		r->pos += pad;
		off = 0;
	}
	r->resv = need;
	*buf = r->data + off + SHM_REC_HDR;
	return 0;
}

/* Make every record written so far visible (hold: only say they are held). */
static void publish(struct ssw_ep *ep, int hold)
{
	struct shm_ring *r = &ep->tx;
	if (hold) {
		uint64_t h = atomic_load_explicit(&r->ctl->held, memory_order_relaxed), now = ssw_now_ns();
		bool start = h <= r->pub;
		if (!start && now - atomic_load_explicit(&r->ctl->held_ns, memory_order_relaxed) >= (uint64_t)SSW_HOLD_MS * 1000000u) {
			/* the last hold is over (its records were the peer's to take
			 * already): they are published, and a new hold starts */
			r->pub = h;
			atomic_store_explicit(&r->ctl->tail, h, memory_order_release);
			start = true;
		}
		if (start)
			atomic_store_explicit(&r->ctl->held_ns, now, memory_order_relaxed);
		atomic_store_explicit(&r->ctl->held, r->pos, memory_order_release);
		/* A peer asleep already would never learn that the hold ends (its
		 * arm found nothing held): woken once, it sleeps again until then,
		 * as kernel TCP sends corked data by itself at its 200 ms ceiling */
		if (start)
			shm_wake_peer(ep);
		return;
	}
	r->pub = r->pos;
	/* where we run, for a peer deciding how to wait for our next record
	 * (peer_cpu): on the tail's own cache line, which the peer reads anyway */
	atomic_store_explicit(&r->ctl->cpu, sched_getcpu() + 1, memory_order_relaxed);
	atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
	shm_wake_peer(ep);
}

static int commit(struct ssw_ep *ep, size_t len, int hold, uint32_t kind)
{
	struct shm_ring *r = &ep->tx;
	uint64_t need = SHM_REC_HDR + ALIGN8(len);
	if (!r->resv || need > r->resv)
		return -EINVAL;
	struct shm_rec m = { (uint32_t)len, kind };
	memcpy(r->data + (r->pos & (r->size - 1)), &m, sizeof m);
	r->pos += need;
	r->resv = 0;
	publish(ep, hold);
	return 0;
}

int shm_ring_commit(struct ssw_ep *ep, size_t len, int hold)
{
	return commit(ep, len, hold, SHM_REC_MSG);
}

void shm_ring_flush(struct ssw_ep *ep)
{
	struct shm_ring *r = &ep->tx;
	if (r->ctl && r->pos != r->pub)
		publish(ep, 0);
}

static int ring_send(struct ssw_ep *ep, const struct iovec *iov, int iovcnt, uint32_t kind)
{
	size_t len = 0;
	void *buf;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	int rc = shm_ring_reserve(ep, len, &buf);
	if (rc)
		return rc;
	uint8_t *dst = buf;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(dst, iov[i].iov_base, iov[i].iov_len);
		dst += iov[i].iov_len;
	}
	return commit(ep, len, 0, kind);
}

int shm_ring_send(struct ssw_ep *ep, const struct iovec *iov, int iovcnt)
{
	return ring_send(ep, iov, iovcnt, SHM_REC_MSG);
}

int shm_ring_send_ctl(struct ssw_ep *ep, const struct iovec *iov, int iovcnt)
{
	return ring_send(ep, iov, iovcnt, SHM_REC_CTL);
}

size_t shm_ring_room(struct ssw_ep *ep)
{
	struct shm_ring *r = &ep->tx;
	if (ep->err || !r->ctl)
		return 0;
	uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
	if (head > r->pos || r->pos - head > r->size || (head & 7))
		return 0; /* corrupt: send() will say so */
	r->other = head;
	uint64_t room = r->size - (r->pos - head), to_end = r->size - (r->pos & (r->size - 1));
	/* A record may not wrap: it goes before the end, or after a PAD to the
	 * end.  The largest record that fits, so that send_room() >=
	 * msg_space(len) says exactly whether send(len) succeeds. */
	if (room > to_end)
		room = to_end > room - to_end ? to_end : room - to_end;
	return (size_t)room;
}

/* Does [head, pos) of our transmit ring hold a data record?  Only our own
 * records are there, but the memory is shared: every length is checked, and
 * anything odd counts as data (a reset). */
static bool unread_data(const struct shm_ring *r, uint64_t head)
{
	if (head > r->pos || r->pos - head > r->size || (head & 7))
		return true;
	while (head < r->pos) {
		uint64_t off = head & (r->size - 1), left = r->pos - head;
		const struct shm_rec *rec = (const struct shm_rec *)(r->data + off);
		uint32_t rlen = __atomic_load_n(&rec->len, __ATOMIC_RELAXED);
		uint32_t kind = __atomic_load_n(&rec->kind, __ATOMIC_RELAXED);
		uint64_t need = kind == SHM_REC_PAD ? r->size - off : SHM_REC_HDR + ALIGN8((uint64_t)rlen);
		if ((kind != SHM_REC_CTL && kind != SHM_REC_PAD) || need > left || off + need > r->size)
			return true;
		head += need;
	}
	return false;
}

/* A peer that died without closing: as kernel TCP, a reset if it died with
 * data of ours unread (control messages left unread do not count: credits
 * we returned to a sender that never looked again), else an orderly end.
 * The ring cannot change any more: the answer is kept. */
int shm_gone_state(struct ssw_ep *ep)
{
	if (!ep->gone_state) {
		uint64_t head = atomic_load_explicit(&ep->tx.ctl->head, memory_order_acquire);
		ep->gone_state = unread_data(&ep->tx, head) ? -ECONNRESET : -EPIPE;
	}
	return ep->gone_state;
}

/* What an empty ring means: nothing yet, or the peer is gone. */
static int empty_state(struct ssw_ep *ep)
{
	uint32_t c = atomic_load_explicit(&ep->rx.ctl->closed, memory_order_acquire);
	if (c == SHM_CLOSED_RESET)
		return ep->err = -ECONNRESET;
	if (c != SHM_OPEN && c != SHM_CLOSED_ORDERLY)
		return corrupt(ep);
	if (c == SHM_CLOSED_ORDERLY)
		return ep->err = -EPIPE;
	if (ep->peer_gone) /* died: see shm_gone_state */
		return ep->err = shm_gone_state(ep);
	return -EAGAIN;
}

/* Records the peer holds past `from` that we may take now: its hold time
 * is over, or it is gone (a kernel close sends corked data too).  Returns
 * their end (`from` when none; *wait_ns: how long until they are ours), or
 * HELD_CORRUPT. */
#define HELD_CORRUPT UINT64_MAX
static uint64_t held_end(struct ssw_ep *ep, uint64_t from, uint64_t *wait_ns)
{
	struct shm_ring *r = &ep->rx;
	uint64_t h = atomic_load_explicit(&r->ctl->held, memory_order_acquire);
	if (h <= from)
		return from; /* none, or published meanwhile */
	if (h - r->pos > r->size || (h & 7))
		return HELD_CORRUPT;
	uint64_t t0 = atomic_load_explicit(&r->ctl->held_ns, memory_order_relaxed);
	uint64_t now = ssw_now_ns(), hold = (uint64_t)SSW_HOLD_MS * 1000000u;
	bool over = now - t0 >= hold || t0 > now;
	uint32_t closed = atomic_load_explicit(&r->ctl->closed, memory_order_acquire);
	/* an abortive close (or a death with our data unread) sends nothing it
	 * still held: tcp_close's reset drops the unsent queue (the closer
	 * drops the mark, shm_ring_drop_held; this covers a reader that loaded
	 * it first, and a peer that died) */
	if (!over && (closed == SHM_CLOSED_RESET || (ep->peer_gone && closed == SHM_OPEN && shm_gone_state(ep) == -ECONNRESET)))
		return from;
	if (ep->peer_gone || closed != SHM_OPEN || over)
		return h;
	if (wait_ns)
		*wait_ns = t0 + hold - now;
	return from;
}

void shm_ring_drop_held(struct ssw_ep *ep)
{
	struct shm_ring *r = &ep->tx;
	uint64_t t0 = atomic_load_explicit(&r->ctl->held_ns, memory_order_relaxed), now = ssw_now_ns();
	if (atomic_load_explicit(&r->ctl->held, memory_order_relaxed) > r->pub && now - t0 < (uint64_t)SSW_HOLD_MS * 1000000u &&
	    t0 <= now)
		atomic_store_explicit(&r->ctl->held, r->pub, memory_order_release);
}

int shm_ring_peek(struct ssw_ep *ep, const void **msg, size_t *len)
{
	struct shm_ring *r = &ep->rx;

	if (ep->err)
		return ep->err;
	for (;;) {
		if (r->pos == r->other) {
			uint64_t tail = shm_rx_tail(r, r->pos);
			if (tail < r->pos || tail - r->pos > r->size || (tail & 7))
				return corrupt(ep);
			if (tail == r->pos) {
				tail = held_end(ep, tail, NULL);
				if (tail == HELD_CORRUPT)
					return corrupt(ep);
				if (tail > r->taken)
					r->taken = tail;
			}
			r->other = tail;
			if (tail == r->pos)
				return empty_state(ep);
		}
		uint64_t off = r->pos & (r->size - 1);
		uint64_t avail = r->other - r->pos;
		const struct shm_rec *rec = (const struct shm_rec *)(r->data + off);
		uint32_t rlen = __atomic_load_n(&rec->len, __ATOMIC_RELAXED);
		uint32_t kind = __atomic_load_n(&rec->kind, __ATOMIC_RELAXED);
		if (kind == SHM_REC_PAD) {
			uint64_t pad = r->size - off;
			if (rlen != pad - SHM_REC_HDR || pad > avail)
				return corrupt(ep);
			r->pos += pad;
			atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
			continue;
		}
		uint64_t need = SHM_REC_HDR + ALIGN8((uint64_t)rlen);
		if ((kind != SHM_REC_MSG && kind != SHM_REC_CTL) || need > avail || off + need > r->size)
			return corrupt(ep);
		r->cur = need;
		*msg = r->data + off + SHM_REC_HDR;
		*len = rlen;
		return 0;
	}
}

void shm_ring_done(struct ssw_ep *ep)
{
	struct shm_ring *r = &ep->rx;
	if (!r->cur)
		return;
	r->pos += r->cur;
	r->cur = 0;
	atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
}

int shm_ring_arm(struct ssw_ep *ep)
{
	struct shm_ring *r = &ep->rx;
	if (ep->err || ep->peer_gone)
		return -EAGAIN;
	/* a count, not a flag: two threads of ours may sleep on this ring */
	atomic_fetch_add_explicit(&r->ctl->armed, 1, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst);
	uint64_t tail = shm_rx_tail(r, r->pos + r->cur);
	uint64_t wait_ns = 0;
	if (tail != r->pos + r->cur ||
	    atomic_load_explicit(&r->ctl->closed, memory_order_acquire) != SHM_OPEN ||
	    held_end(ep, tail, &wait_ns) != tail) {
		atomic_fetch_sub_explicit(&r->ctl->armed, 1, memory_order_relaxed);
		return -EAGAIN;
	}
	/* held records: a flush rings us, else they are ours when the hold ends */
	return wait_ns ? (int)(wait_ns / 1000000u) + 1 : 0;
}
