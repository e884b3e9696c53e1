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

static int fab_recv_peek(struct ssw_ep *ep, const void **msg, size_t *len)
{
	fab_ep_lock(ep);
	int rc = peek_locked(ep, msg, len);
	if (rc == -EAGAIN) {
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
	 * the CQ; its wait fd says whether anything waits there */
	if (ep->cq_fd < 0)
		return 0;
	/* send completions matter only when they give back slots we are short
	 * of: reading them after every send (a stream) cost a pump a message */
	bool waiting = (atomic_load_explicit(&ep->tx_out, memory_order_relaxed) &&
			__atomic_load_n(&ep->ntx_free, __ATOMIC_RELAXED) < FAB_TX_N / 2) ||
		       __atomic_load_n(&ep->all, __ATOMIC_RELAXED);
	if (ep->sig_fd >= 0) {
		/* the CQ's signal is out of cq_fd's set (fab_ep.c): it stays set
		 * between sleeps, so it is news only while sends or one-sided
		 * operations wait for completions (those may complete inside a
		 * call that reads no socket) */
		struct pollfd p[2] = { { .fd = ep->cq_fd, .events = POLLIN }, { .fd = ep->sig_fd, .events = POLLIN } };
		return sys_poll(p, waiting ? 2 : 1, 0) > 0;
	}
	if (!ep->cq_sig) {
		struct pollfd p = { .fd = ep->cq_fd, .events = POLLIN };
		return sys_poll(&p, 1, 0) > 0;
	}
	/* the set is level-triggered: looking takes nothing from libfabric.
	 * The CQ's signal alone is news only while sends or one-sided
	 * operations wait for completions; after a message it is a leftover. */
	struct epoll_event ev[4];
	int k = sys_epoll_wait(ep->cq_fd, ev, 4, 0);
	for (int i = 0; i < k; i++)
		if (ev[i].data.ptr != ep->cq_sig || waiting)
			return 1;
	return 0;
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
	 * epoll_wait each) a read before it would cost every sleep.  With news
	 * already here the queues are read all the same: that takes the CQ's
	 * own signal (tcp writes it at every completion), so that the wait
	 * fds are quiet once the news is taken. */
	if (news_locked(ep) ||
	    fi_trywait(ep->fab->fabric, (struct fid *[]){ &ep->cq->fid, &ep->eq->fid }, 2) != 0) {
		fab_progress(ep);
		rc = -EAGAIN;
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
	if (k < n && ep->sig_fd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->sig_fd, .events = POLLIN };
	if (k < n && ep->wake_fd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->wake_fd, .events = POLLIN };
	return k;
}

/* After a sleep, on the critical path of a round trip: no system call
 * that is not needed.  The eventfd is read only when the thread wrote it
 * (it sets `woken` after the write: a flag seen late costs one more
 * wake-up, never a count left behind); completions only, as recv_peek
 * reads them: the EQ (a connection's end) is read by arm's fi_trywait,
 * which fails while an event waits there, and by peer_state's probe. */
static void fab_wake_ack(struct ssw_ep *ep)
{
	uint64_t v;
	if (ep->wake_fd >= 0 && atomic_exchange(&ep->woken, false))
		(void)!sys_read(ep->wake_fd, &v, sizeof v);
	fab_ep_lock(ep);
	fab_progress_cq(ep);
	/* the CQ's signal, out of cq_fd's set (fab_ep.c), is not taken by
	 * progress: fi_trywait takes it, so that the wait fds are quiet again
	 * once what woke us is read (one system call a wake-up, none a
	 * message); a completion it finds meanwhile is read now */
	if (ep->sig_fd >= 0 && fi_trywait(ep->fab->fabric, (struct fid *[]){ &ep->cq->fid }, 1) != 0)
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
		if (ep->sig_fd < 0 || ep->eq_fd < 0 || sys_poll(p, 2, 0) != 0)
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
