/* shm_ring.c — single-producer/single-consumer message rings in shared memory.
 *
 * The peer writes this memory: every index and record header read from it is
 * validated before use and read exactly once, so a corrupt or malicious peer
 * can only fail its own connection (-ECONNRESET), never make us overrun. */
#include "providers/shm/shm_priv.h"

#include "common/sys.h"
#include "common/trim.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
	atomic_store_explicit(&h->feat[0], SHM_FEAT_SKIP, memory_order_relaxed);
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
	ep->tx.peer_feat = &h->feat[connector ? 1 : 0];
	ep->tx.can_skip = false;
	if (!connector) /* the acceptor's word, before it sends anything */
		atomic_store_explicit(&h->feat[1], SHM_FEAT_SKIP, memory_order_relaxed);
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

/* The start of the lap after pos's. */
static inline uint64_t next_lap(const struct shm_ring *r, uint64_t pos)
{
	return (pos | (r->size - 1)) + 1;
}

/* The consumer's index as the producer may use it: read once, taken past a
 * rewind the consumer has not jumped yet (it stands at our skip: nothing
 * is left before the next lap's start), and checked (false: out of bounds,
 * a corrupt peer). */
static bool tx_head(struct shm_ring *r, uint64_t *out)
{
	uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
	if (head == r->skip && (head & (r->size - 1)))
		head = next_lap(r, head);
	if (head > r->pos || r->pos - head > r->size || (head & 7))
		return false;
	*out = head;
	return true;
}

/* Rewind: once the consumer has read everything we wrote, the next record
 * goes to the ring's start (the next lap's), and `skip` tells the consumer
 * to jump there from where it stands.  Traffic that never fills the ring
 * then keeps to its first pages: a ping-pong of 1,000 B messages never
 * leaves the first 4 KiB, where going round the ring touched (and kept)
 * all 512 KiB of it.  Out of band (not a PAD record to the end, which
 * would take the rest of the ring until the consumer has read it: a burst
 * after a rewind would find the ring full).  Whether the ring is empty
 * costs a read of the consumer's index (a cache line it writes): a last
 * look that found it empty serves, else it is asked only when the record
 * would reach a new page.  Only toward a consumer that said it follows
 * rewinds (SHM_FEAT_SKIP: a switch of before them reads on as it always
 * did).  1: rewind, 0: not, -ECONNRESET. */
static int rewind_wanted(struct ssw_ep *ep, uint64_t off, uint64_t need)
{
	struct shm_ring *r = &ep->tx;
	if (!off)
		return 0;
	if (!r->can_skip) { /* a consumer that does not follow rewinds (an older switch), or not yet known */
		if (!r->peer_feat || !(atomic_load_explicit(r->peer_feat, memory_order_relaxed) & SHM_FEAT_SKIP))
			return 0;
		r->can_skip = true;
	}
	if (r->other != r->pos) {
		if ((off + need - 1) / SHM_PAGE == (off - 1) / SHM_PAGE)
			return 0;
		uint64_t head;
		if (!tx_head(r, &head))
			return corrupt(ep);
		r->other = head;
		if (head != r->pos)
			return 0;
	}
	return 1;
}

int shm_ring_reserve(struct ssw_ep *ep, size_t len, void **buf)
{
	struct shm_ring *r = &ep->tx;

	r->resv = 0;
	r->rewind = false;
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
	int rw = rewind_wanted(ep, off, need);
	if (rw < 0)
		return rw;
	if (rw) {
		/* the record goes to the next lap's start; commit says so (an
		 * abandoned reservation changes nothing) */
		r->rewind = true;
		off = 0;
	} else {
		uint64_t pad = off + need > r->size ? r->size - off : 0;
		if (r->pos - r->other + pad + need > r->size) {
			uint64_t head;
			if (!tx_head(r, &head))
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
	}
	if (off + need > SHM_RING_FLOOR && !r->dirty) {
		/* past the floor: the housekeeper gives it back once idle */
		r->dirty = true;
		ssw_trim_regrown(&r->idle, ssw_now_ns());
		ssw_trim_note();
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
	if (r->rewind) {
		/* published with the record (publish's release store) */
		r->skip = r->pos;
		atomic_store_explicit(&r->ctl->skip, r->pos, memory_order_relaxed);
		r->pos = r->other = next_lap(r, r->pos); /* empty up to there */
		r->rewind = false;
	}
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
	uint64_t head;
	if (!tx_head(r, &head))
		return 0; /* corrupt: send() will say so */
	r->other = head;
	if (head == r->pos)
		return (size_t)r->size; /* empty: a record would rewind to the start */
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
static bool unread_data(struct shm_ring *r)
{
	uint64_t head;
	if (!tx_head(r, &head))
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
		if (head == r->skip && (head & (r->size - 1)))
			head = next_lap(r, head); /* a rewind: the records go on there */
	}
	return false;
}

/* A peer that died without closing: as kernel TCP, a reset if it died with
 * data of ours unread (control messages left unread do not count: credits
 * we returned to a sender that never looked again), else an orderly end.
 * Unread is in the ring, or taken out of it into the peer's own memory
 * and not read by its application (its SSW_NOTE_UNREAD: sem kill_unread,
 * whose reader's poll took the bytes in).  Neither can change any more:
 * the answer is kept. */
int shm_gone_state(struct ssw_ep *ep)
{
	if (!ep->gone_state)
		ep->gone_state = unread_data(&ep->tx) || atomic_load_explicit(&ep->tx.ctl->unread, memory_order_acquire)
					 ? -ECONNRESET
					 : -EPIPE;
	return ep->gone_state;
}

#define HELD_CORRUPT UINT64_MAX
static uint64_t held_end(struct ssw_ep *ep, uint64_t from, uint64_t *wait_ns);

/* What an empty ring means: nothing yet, or the peer is gone; 1: not empty
 * after all.  The peer publishes its last records, then says it closed:
 * a tail read before the close was said may have missed them, so a close
 * (or a death) seen here sends the caller to look once more — read first,
 * end after, as kernel TCP delivers every byte before the FIN. */
static int empty_state(struct ssw_ep *ep)
{
	uint32_t c = atomic_load_explicit(&ep->rx.ctl->closed, memory_order_acquire);
	if (c == SHM_CLOSED_ORDERLY || (c == SHM_OPEN && ep->peer_gone)) {
		struct shm_ring *r = &ep->rx;
		uint64_t t = shm_rx_tail(r, r->pos);
		if (t != r->pos || held_end(ep, t, NULL) != t)
			return 1;
	}
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

/* Where our next record starts: our position, or the next lap's start
 * when the producer rewound there (its skip is our position) and has
 * records up to `frontier` (published or held) past it.  The producer's
 * word, which decides only where in its own output we read next. */
static uint64_t rx_start(const struct shm_ring *r, uint64_t frontier)
{
	uint64_t sk = atomic_load_explicit(&r->ctl->skip, memory_order_relaxed);
	if (sk != r->pos || !(r->pos & (r->size - 1)) || frontier < next_lap(r, r->pos))
		return r->pos;
	return next_lap(r, r->pos);
}

/* Records the peer holds past `from` that we may take now: its hold time
 * is over, or it is gone (a kernel close sends corked data too).  Returns
 * their end (`from` when none; *wait_ns: how long until they are ours), or
 * HELD_CORRUPT. */
static uint64_t held_end(struct ssw_ep *ep, uint64_t from, uint64_t *wait_ns)
{
	struct shm_ring *r = &ep->rx;
	uint64_t h = atomic_load_explicit(&r->ctl->held, memory_order_acquire);
	if (h <= from)
		return from; /* none, or published meanwhile */
	if (h - rx_start(r, h) > r->size || (h & 7))
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
			if (tail == r->pos) {
				tail = held_end(ep, tail, NULL);
				if (tail == HELD_CORRUPT)
					return corrupt(ep);
				if (tail > r->taken)
					r->taken = tail;
			}
			uint64_t start = rx_start(r, tail);
			if (start != r->pos) { /* the producer rewound: on at the next lap */
				r->pos = start;
				atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
			}
			if (tail < r->pos || tail - r->pos > r->size || (tail & 7))
				return corrupt(ep);
			r->other = tail;
			if (tail == r->pos) {
				int e = empty_state(ep);
				if (e == 1)
					continue; /* records came before the close */
				return e;
			}
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

/* Give back [a, b) of our transmit ring (offsets; page-aligned, a < b). */
static void punch(struct shm_ring *r, uint64_t a, uint64_t b)
{
	if (a < b)
		(void)madvise(r->data + a, b - a, MADV_REMOVE);
}

/* The idle give-back (msg op trim): the pages of our transmit ring past
 * the floor, but for those the consumer has still to read ([head, pos))
 * and the one holding pos (the next record, or the rewind's PAD, goes
 * there).  MADV_REMOVE on our mapping frees them in the memfd, for the
 * peer's mapping too (the consumer reads only below pos, so it never
 * sees them go; a later write faults a zeroed page in again).  Only once
 * pos has stood still for the ring's quiet time (common/trim.h: a second,
 * longer for a ring whose traffic came back soon after its last trim) and
 * the consumer has read it all: a ring in use is never trimmed between
 * two messages (a page given back costs its refault, about 5-15 us here
 * on each side).  Returns 1 while pages past the floor may be
 * left (look again), 0 when not. */
int shm_ring_trim(struct ssw_ep *ep, int force)
{
	struct shm_ring *r = &ep->tx;
	if (!r->ctl || !r->dirty)
		return 0;
	/* (a reservation seen here was abandoned: the session writes and
	 * commits under the lock its caller holds; corked records unpublished
	 * count as a change) */
	uint64_t now = ssw_now_ns();
	if (!force && !ssw_trim_idle(&r->idle, r->pos != r->pub ? ~r->pos : r->pos, now))
		return 1;
	uint64_t head;
	if (!tx_head(r, &head))
		return 0; /* corrupt: the next send says so; nothing to give back */
	r->other = head;
	if (!force && head != r->pos)
		return 1; /* the consumer has yet to read it: later */
	uint64_t mask = r->size - 1, floor = SHM_RING_FLOOR;
	/* kept: the pages from head's to pos's, which may wrap round the end */
	uint64_t k0 = (head & mask) / SHM_PAGE * SHM_PAGE, k1 = ((r->pos & mask) / SHM_PAGE + 1) * SHM_PAGE;
	if (k1 < floor)
		k1 = floor;
	if (head != r->pos && r->pos - head >= r->size - (head & mask)) {
		punch(r, k1, k0); /* kept [k0, size) and [0, k1) */
	} else {
		punch(r, floor, k0);
		punch(r, k1, r->size);
	}
	ssw_trim_given(&r->idle, now);
	r->dirty = false;
	return 0;
}

int64_t shm_seg_resident(struct ssw_ep *ep)
{
	if (!ep->seg)
		return -1;
	size_t pages = (ep->seg_size + SHM_PAGE - 1) / SHM_PAGE;
	unsigned char small[512], *v = pages <= sizeof small ? small : malloc(pages);
	int64_t n = -1;
	if (v && mincore(ep->seg, ep->seg_size, v) == 0) {
		n = 0;
		for (size_t i = 0; i < pages; i++)
			n += v[i] & 1;
		n *= SHM_PAGE;
	}
	if (v != small)
		free(v);
	return n;
}
