/* fab_msg.c — messages and waiting on the fabric provider: sends into the
 * peer's pre-posted buffers under the provider's credits, received
 * messages in order, and the CQ's wait fd (with fi_trywait) to sleep on. */
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

/* ctl: the message carries no stream data (the SPI's send_ctl) */
static int send_msg(struct ssw_ep *ep, const struct iovec *iov, int iovcnt, bool ctl)
{
	fab_ep_lock(ep);
	if (!ctl)
		ep->data_sent = true;
	ep->sending_ctl = ctl;
	int rc = fab_send_locked(ep, FAB_T_DATA, iov, iovcnt);
	ep->sending_ctl = false;
	fab_ep_unlock(ep);
	return rc;
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
	/* manual progress: what arrived is in the socket until someone reads
	 * the CQ */
	if (ep->cq_fd < 0)
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
		 * look at cq_fd costs, and what it finds is taken, not looked at
		 * here and read by the caller with a second one */
		unsigned f0 = ep->ntx_free;
		fab_progress_cq(ep);
		fab_progress_end(ep);
		bool r = news_locked(ep) || (waiting && ep->ntx_free != f0);
		if (!r) /* a look that found nothing: the next one is real (a spin's) */
			atomic_store_explicit(&ep->quiet_ns, 0, memory_order_relaxed);
		fab_ep_unlock(ep);
		return r;
	}
	/* another thread reads it: a look at the wait fd.  The CQ's signal
	 * is out of cq_fd's set (fab_ep.c), or alone is no news unless sends
	 * or one-sided operations wait for completions */
	if (!ep->cq_sig || ep->sig_fd >= 0) {
		struct pollfd p = { .fd = ep->cq_fd, .events = POLLIN };
		return sys_poll(&p, 1, 0) > 0;
	}
	struct epoll_event ev[4];
	int k = sys_epoll_wait(ep->cq_fd, ev, 4, 0);
	for (int i = 0; i < k; i++)
		if (ev[i].data.ptr != ep->cq_sig || waiting)
			return 1;
	return 0;
}

/* Is anything pending inside libfabric?  With the CQ's signal detached
 * (tcp 1.17), what fi_trywait on the CQ does but its first step: it reads
 * the signal back, which libfabric then writes again at the next
 * completion, two system calls a sleep for a signal nobody waits on.  Its
 * other steps are a progress (the endpoint's buffered bytes, its POLLOUT
 * interest, one epoll_wait) and a look at the queue: a reading of the CQ
 * does them all.  Any completion read is news here: a writer may wait for
 * the slot it gives back.  The EQ, whose signal does wake sleepers
 * (eq_fd), goes through fi_trywait.  Returns whether the caller must look
 * again; the queues are read then. */
static bool pending_locked(struct ssw_ep *ep)
{
	if (ep->sig_fd < 0) {
		if (fi_trywait(ep->fab->fabric, (struct fid *[]){ &ep->cq->fid, &ep->eq->fid }, 2) == 0)
			return false;
		fab_progress(ep);
		return true;
	}
	uint64_t n0 = ep->ncomp;
	fab_progress_cq(ep);
	if (fi_trywait(ep->fab->fabric, (struct fid *[]){ &ep->eq->fid }, 1) != 0 && fab_read_eq(ep))
		fab_progress_cq(ep); /* as fab_progress: what came before the connection's end */
	fab_progress_end(ep);
	return ep->ncomp != n0 || news_locked(ep);
}

static int fab_arm(struct ssw_ep *ep)
{
	fab_ep_lock(ep);
	fab_progress_end(ep);
	int rc = 0;
	/* libfabric: sleeping on the wait fds is safe only after fi_trywait
	 * says nothing is pending inside the provider.  It progresses both
	 * queues itself and fails while a completion or event waits in them,
	 * so reading them only then saves the two system calls (tcp: an
	 * epoll_wait each) a read before it would cost every sleep. */
	if (news_locked(ep)) {
		fab_progress(ep);
		rc = -EAGAIN;
	} else if (pending_locked(ep)) {
		rc = -EAGAIN;
	} else {
		/* from now on, whoever reads news from the CQ rings us (fab_ring) */
		atomic_fetch_add(&ep->armed, 1);
	}
	fab_ep_unlock(ep);
	return rc;
}

static int fab_wait_fds(struct ssw_ep *ep, struct pollfd *pfd, int n)
{
	int k = 0;
	if (k < n && ep->cq_fd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->cq_fd, .events = POLLIN };
	if (k < n && ep->eq_fd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->eq_fd, .events = POLLIN };
	if (k < n && ep->wake_fd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->wake_fd, .events = POLLIN };
	return k;
}

/* After a sleep, on the critical path of a round trip: no system call
 * that is not needed.  Disarmed first, so that our own reading rings
 * nobody but a fellow sleeper.  The eventfd is read only when someone
 * wrote it (`woken` is set after the write: a flag seen late costs one
 * more wake-up, never a count left behind); completions only, as
 * recv_peek reads them: the EQ (a connection's end) is read by arm's
 * fi_trywait, which fails while an event waits there, and by
 * peer_state's probe. */
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
		 * reading the CQ and the EQ costs two, an epoll_wait each, and
		 * the session probes before sends and polls: four a request of
		 * an epoll server).  Only where cq_fd is quiet between messages:
		 * the CQ's signal out of its set (fab_ep.c) */
		struct pollfd p[2] = { { .fd = ep->cq_fd, .events = POLLIN }, { .fd = ep->eq_fd, .events = POLLIN } };
		if (ep->sig_fd < 0 || ep->eq_fd < 0 || sys_poll(p, 2, 0) != 0) {
			fab_progress(ep);
			/* the EQ's signal (an event was written: the connection's
			 * start, say) stays set until a trywait takes it: once
			 * taken, the next probes cost the one poll again */
			if (ep->sig_fd >= 0 && ep->eq_fd >= 0 && (p[1].revents & POLLIN))
				(void)fi_trywait(ep->fab->fabric, (struct fid *[]){ &ep->eq->fid }, 1);
		}
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
	.send = fab_send,
	.recv_peek = fab_recv_peek,
	.recv_done = fab_recv_done,
	.send_room = fab_send_room,
	.send_ctl = fab_send_ctl,
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
