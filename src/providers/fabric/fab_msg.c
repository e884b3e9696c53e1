/* fab_msg.c — messages and waiting on the fabric provider: sends into the
 * peer's pre-posted buffers under the provider's credits, received
 * messages in order, and what a waiter sleeps on (the endpoint's socket
 * and wake_fd, which whoever takes our news from the shared queue rings). */
#include "providers/fabric/fab_priv.h"
#include "providers/fabric/fab_pack.h"

#include "common/sys.h"

#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>

static size_t fab_max_msg(struct ssw_ep *ep)
{
	(void)ep;
	return FAB_MSG_MAX;
}

/* Two full messages: the peer posts FAB_RX_N buffers and packs several
 * small messages into one (fab_pack.h), so the window is bytes, not
 * buffers; more in flight only waits in the sender's tx backlog. */
static size_t fab_window(struct ssw_ep *ep)
{
	return 2 * fab_max_msg(ep);
}

/* ctl: the message carries no stream data (the SPI's send_ctl) */
static int send_msg(struct ssw_ep *ep, const struct iovec *iov, int iovcnt, bool ctl)
{
	fab_ep_lock(ep);
	fab_unreserve_locked(ep);
	bool held = ep->hold_ns != 0;
	ep->hold_ns = 0; /* a send publishes what was held, then itself */
	ep->sending_ctl = ctl;
	int rc = fab_send_locked(ep, FAB_T_DATA, iov, iovcnt);
	ep->sending_ctl = false;
	if (held && ep->bl_n)
		fab_flush_backlog(ep);
	fab_ep_unlock(ep);
	return rc;
}

/* Held messages (TCP_CORK, MSG_MORE): see fab_commit_locked */
static int fab_send_reserve(struct ssw_ep *ep, size_t len, void **buf)
{
	fab_ep_lock(ep);
	int rc = fab_reserve_locked(ep, len, buf);
	fab_ep_unlock(ep);
	return rc;
}

static int fab_send_commit(struct ssw_ep *ep, size_t len, int hold)
{
	fab_ep_lock(ep);
	int rc = fab_commit_locked(ep, len, hold != 0);
	fab_ep_unlock(ep);
	return rc;
}

static void fab_flush(struct ssw_ep *ep)
{
	fab_ep_lock(ep);
	fab_unhold_locked(ep);
	fab_ep_unlock(ep);
}

static int fab_send(struct ssw_ep *ep, const struct iovec *iov, int iovcnt) { return send_msg(ep, iov, iovcnt, false); }
static int fab_send_ctl(struct ssw_ep *ep, const struct iovec *iov, int iovcnt) { return send_msg(ep, iov, iovcnt, true); }

static int peek_locked(struct ssw_ep *ep, const void **msg, size_t *len)
{
	if (atomic_load(&ep->broken) || atomic_load(&ep->peer_reset))
		return -ECONNRESET;
	if (ep->rxq_n) {
		uint32_t slot = ep->rxq[ep->rxq_head];
		const uint8_t *p = ep->rxbuf + (size_t)slot * FAB_BUF_SIZE + sizeof(struct fab_hdr);
		if (ep->rx_pack[slot]) {
			uint32_t r;
			*msg = fab_pack_rec(p, ep->rx_off[slot], &r); /* checked at arrival (on_recv) */
			*len = r;
		} else {
			*msg = p;
			*len = ep->rx_len[slot] - sizeof(struct fab_hdr);
		}
		atomic_store(&ep->peeked, true);
		return 0;
	}
	return atomic_load(&ep->peer_closed) ? -EPIPE : -EAGAIN;
}

/* How long a reading of the CQ that left it empty stands for the socket's
 * silence.  A round trip read the CQ five times on each side, an
 * epoll_wait each (tcp), four of them within microseconds of the one
 * before and finding what it found: after the message is taken, the
 * session's receive looks for another; the application's send looks
 * (send_enter), its next receive reads, its wait looks at once and spins.
 * Data that arrives meanwhile is read at most this much later (once a
 * look or arm reads for real: a sleep never misses it), far below a round
 * trip between hosts. */
#define FAB_QUIET_NS 5000u

static bool quiet(struct ssw_ep *ep)
{
	uint64_t q = atomic_load_explicit(&ep->quiet_ns, memory_order_relaxed);
	/* another member's reading of the shared queue read our socket too
	 * (an epoll server's looks at its hot members: one reading a hub,
	 * not one a member); ours alone stands for a spin's next look only
	 * while it is not reset (fab_rx_ready) */
	struct fab_hub *h = ep->hub;
	if (h && h->shared && atomic_load_explicit(&h->quiet_by, memory_order_relaxed) != ep) {
		uint64_t hq = atomic_load_explicit(&h->quiet_ns, memory_order_relaxed);
		if (hq > q)
			q = hq;
	}
	return q && ssw_now_ns() - q < FAB_QUIET_NS;
}

static int fab_recv_peek(struct ssw_ep *ep, const void **msg, size_t *len)
{
	fab_ep_lock(ep);
	int rc = peek_locked(ep, msg, len);
	if (rc == -EAGAIN && !quiet(ep)) {
		fab_progress_cq(ep);
		fab_progress_end(ep);
		rc = peek_locked(ep, msg, len);
	}
	fab_ep_unlock(ep);
	return rc;
}

static void fab_recv_done(struct ssw_ep *ep)
{
	fab_ep_lock(ep);
	if (ep->rxq_n) {
		uint32_t slot = ep->rxq[ep->rxq_head];
		atomic_fetch_sub_explicit(&ep->rx_avail, 1, memory_order_release);
		atomic_store(&ep->peeked, false);
		if (ep->rx_pack[slot] && ep->rx_left[slot] > 1) {
			/* the pack's next record; its buffer stays until the last */
			uint32_t r;
			(void)fab_pack_rec(ep->rxbuf + (size_t)slot * FAB_BUF_SIZE + sizeof(struct fab_hdr),
					   ep->rx_off[slot], &r);
			ep->rx_off[slot] += FAB_PACK_REC + r;
			ep->rx_left[slot]--;
			fab_ep_unlock(ep);
			return;
		}
		ep->rxq_head = (ep->rxq_head + 1) % FAB_RX_N;
		ep->rxq_n--;
		if (fab_post_recv(ep, slot) == 0)
			ep->unreported++;
		else
			atomic_store(&ep->broken, 1);
		/* a reader that sends nothing returns its buffers by itself; each
		 * one at once after the peer's close: it lingers (at its exit too)
		 * until its data is taken, since closing its socket over our
		 * unread credits resets the transport and drops what our kernel
		 * still holds of its data */
		if (ep->unreported >= FAB_CREDIT_BATCH || atomic_load(&ep->peer_closed))
			fab_send_locked(ep, FAB_T_CREDIT, NULL, 0);
	}
	fab_ep_unlock(ep);
}

/* Room: tx slots (data beyond the peer's credits waits in them) */
static size_t room_locked(struct ssw_ep *ep)
{
	return ep->ntx_free > FAB_TX_KEEP ? (size_t)(ep->ntx_free - FAB_TX_KEEP) * FAB_MSG_MAX : 0;
}

static size_t fab_send_room(struct ssw_ep *ep)
{
	fab_ep_lock(ep);
	size_t r = room_locked(ep);
	if (!r) {
		fab_progress(ep);
		r = room_locked(ep);
	}
	fab_ep_unlock(ep);
	return r;
}

/* ---- progress and waiting ----------------------------------------------- */

static bool news_locked(struct ssw_ep *ep)
{
	return atomic_load(&ep->rx_avail) > (atomic_load(&ep->peeked) ? 1u : 0u) || atomic_load(&ep->peer_closed) ||
	       atomic_load(&ep->peer_reset) || atomic_load(&ep->broken) || ep->done_head;
}

static int fab_rx_ready(struct ssw_ep *ep)
{
	unsigned n = atomic_load_explicit(&ep->rx_avail, memory_order_acquire);
	if (n > (atomic_load(&ep->peeked) ? 1u : 0u) || atomic_load(&ep->peer_closed) || atomic_load(&ep->peer_reset) ||
	    atomic_load(&ep->broken))
		return 1;
	/* another reader of the hub took news for us (fab_hub.c) */
	if (atomic_load_explicit(&ep->in_news, memory_order_relaxed))
		return 1;
	/* manual progress: what arrived is in the socket until someone reads
	 * the CQ */
	int fd = fab_data_fd(ep);
	if (fd < 0)
		return 0;
	if (quiet(ep))
		return 0;
	/* send completions matter only when they give back slots we are short
	 * of: reading them after every send (a stream) cost a pump a message */
	bool waiting = (atomic_load_explicit(&ep->tx_out, memory_order_relaxed) &&
			__atomic_load_n(&ep->ntx_free, __ATOMIC_RELAXED) <= FAB_TX_N / 2) ||
		       __atomic_load_n(&ep->all, __ATOMIC_RELAXED);
	if (fab_ep_trylock(ep)) {
		/* read the CQ itself: for tcp that costs the one epoll_wait a
		 * look at the socket costs, and what it finds is taken, not
		 * looked at here and read by the caller with a second one */
		unsigned f0 = ep->ntx_free;
		fab_progress_cq(ep);
		fab_progress_end(ep);
		bool r = news_locked(ep) || (waiting && ep->ntx_free != f0);
		if (!r) /* a look that found nothing: the next one is real (a spin's) */
			atomic_store_explicit(&ep->quiet_ns, 0, memory_order_relaxed);
		fab_ep_unlock(ep);
		return r;
	}
	/* another thread reads it: a look at the socket */
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return sys_poll(&p, 1, 0) > 0;
}

/* Is anything pending inside libfabric?  Reading the CQ does what
 * fi_trywait on it would but its first step, which reads the CQ's signal
 * back (libfabric then writes it again at the next completion: two system
 * calls a sleep for a signal nobody waits on), and it walks every endpoint
 * of the hub (fab_hub.c).  Any completion read is news here: a writer may
 * wait for the slot it gives back.  The event queue is the thread's: what
 * it found for us waits in eqev (and rang us once armed).  Returns whether
 * the caller must look again; the queues are read then. */
static bool pending_locked(struct ssw_ep *ep)
{
	uint64_t n0 = ep->ncomp;
	fab_progress_cq_quiet(ep);
	if (fab_eq_fold(ep))
		fab_progress_cq(ep); /* as fab_progress: what came before the connection's end */
	fab_progress_end(ep);
	return ep->ncomp != n0 || news_locked(ep);
}

static int fab_arm(struct ssw_ep *ep)
{
	fab_ep_lock(ep);
	fab_progress_end(ep);
	int rc = 0;
	/* armed before the last look: whoever takes news for us after it
	 * (another reader of the hub, the event queue's) rings us; news it
	 * took before, the look finds in our inbox */
	atomic_fetch_add(&ep->armed, 1);
	/* libfabric: sleeping on the wait fds is safe only once nothing is
	 * pending inside the provider: the look reads the queue itself */
	if (news_locked(ep) || atomic_load(&ep->in_n) || atomic_load(&ep->eqev)) {
		fab_progress(ep);
		rc = -EAGAIN;
	} else if (pending_locked(ep)) {
		rc = -EAGAIN;
	}
	if (rc)
		atomic_fetch_sub(&ep->armed, 1);
	fab_ep_unlock(ep);
	return rc;
}

/* The endpoint's socket (its data, its end; its room while libfabric has
 * output waiting for it), and wake_fd.  A hub of its own: the hub's wait
 * fd, libfabric's set of the socket with its own interests. */
static int fab_wait_fds(struct ssw_ep *ep, struct pollfd *pfd, int n)
{
	int k = 0;
	int fd = fab_data_fd(ep);
	if (k < n && fd >= 0)
		pfd[k++] = (struct pollfd){ .fd = fd, .events = POLLIN | (atomic_load(&ep->want_out) ? POLLOUT : 0) };
	if (k < n && ep->wake_fd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->wake_fd, .events = POLLIN };
	return k;
}

/* After a sleep, on the critical path of a round trip: no system call
 * that is not needed.  Disarmed first, so that our own reading rings
 * nobody but a fellow sleeper.  The eventfd is read only when someone
 * wrote it (`woken` is set after the write: a flag seen late costs one
 * more wake-up, never a count left behind); completions only, as
 * recv_peek reads them: the event queue (a connection's end) is the
 * thread's, and peer_state's probe folds what it found. */
static void fab_wake_ack(struct ssw_ep *ep)
{
	uint64_t v;
	int a = atomic_load(&ep->armed);
	while (a > 0 && !atomic_compare_exchange_weak(&ep->armed, &a, a - 1))
		;
	if (ep->wake_fd >= 0 && atomic_exchange(&ep->woken, false))
		(void)!sys_read(ep->wake_fd, &v, sizeof v);
	fab_ep_lock(ep);
	fab_progress_cq(ep);
	fab_progress_end(ep);
	fab_ep_unlock(ep);
}

static uint32_t fab_peer_state(struct ssw_ep *ep, int probe, uint32_t *urg)
{
	if (urg)
		*urg = 0;
	if (probe) {
		fab_ep_lock(ep);
		/* one system call when nothing happened (the SPI's allowance;
		 * the session probes before sends and polls: four a request of
		 * an epoll server): the socket shows the peer's data and end,
		 * in_n what another reader of the hub took, eqev what the event
		 * queue's reader found.  Not wake_fd: a ring is for a waiter,
		 * and one left unread (a connect's, until the first sleep)
		 * made every probe a full progress, two epoll_waits */
		int fd = fab_data_fd(ep);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (fd < 0 || atomic_load(&ep->eqev) || atomic_load(&ep->in_n) || sys_poll(&p, 1, 0) != 0)
			fab_progress(ep);
		fab_ep_unlock(ep);
	}
	if (atomic_load(&ep->peer_reset) || atomic_load(&ep->broken))
		return SSW_PEER_RESET;
	if (atomic_load(&ep->peer_closed))
		return SSW_PEER_FIN | SSW_PEER_CLOSED;
	return 0;
}

static int fab_poll_cq(struct ssw_ep *ep, struct ssw_completion *c, int n)
{
	int k = 0;
	fab_ep_lock(ep);
	if (!ep->done_head)
		fab_progress(ep);
	while (k < n && ep->done_head) {
		struct fab_rma_op *op = ep->done_head;
		ep->done_head = op->next;
		if (!ep->done_head)
			ep->done_tail = NULL;
		c[k++] = (struct ssw_completion){ .ctx = op->ctx, .status = op->status };
		if (!op->kept)
			fab_rma_free(ep, op);
	}
	fab_ep_unlock(ep);
	return k;
}

const struct ssw_msg_ops fab_msg_ops = {
	.size = sizeof(struct ssw_msg_ops),
	.max_msg = fab_max_msg,
	.window = fab_window,
	.send = fab_send,
	.recv_peek = fab_recv_peek,
	.recv_done = fab_recv_done,
	.send_room = fab_send_room,
	.send_ctl = fab_send_ctl,
	.send_reserve = fab_send_reserve,
	.send_commit = fab_send_commit,
	.flush = fab_flush,
};

const struct ssw_progress_ops fab_progress_ops = {
	.size = sizeof(struct ssw_progress_ops),
	.poll_cq = fab_poll_cq,
	.rx_ready = fab_rx_ready,
	.arm = fab_arm,
	.wait_fds = fab_wait_fds,
	.keep_fds = fab_keep_fds,
	.wake_ack = fab_wake_ack,
	.peer_state = fab_peer_state,
};
