/* session_credit.c — credits: the messages that carry them, the window and its batches. */
#include "session/session_priv.h"

#include "common/log.h"
#include "common/waitpol.h"

#include <errno.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Credits count stream bytes, as TCP's window does (SO_RCVBUF); what the
 * transport holds is the provider's business, in its own units: it says
 * "no room" (-EAGAIN, send_room) and how much room a message takes
 * (msg_space).  The session needs that only to size the window and to
 * wake a sender waiting for room. */

size_t sess_msg_space(const struct ssw_session *s, size_t len)
{
	const struct ssw_msg_ops *mo = s->p->msg;
	return mo->size > offsetof(struct ssw_msg_ops, msg_space) && mo->msg_space ? mo->msg_space(s->loc->ep, len) : len;
}

/* May we have less in flight than the peer's credit batch (SO_SNDBUF below
 * it)?  Then the peer would never reach a batch while we wait for one: our
 * DATA asks for its credits at once (ACK_NOW).  The peer's batch is
 * credit_batch on its side: its window (ours to use) against the transport. */
static bool small_sender(const struct ssw_session *s)
{
	uint64_t r = sess_transport_bytes(s->p, s->loc->ep);
	uint64_t peer_batch = (s->peer_window < r ? s->peer_window : r) / 4;
	return tx_limit(s) < 2 * peer_batch;
}

/* Send one message: header, fixed part, then data.  Returns 0 or -errno;
 * -EAGAIN when the transport is full. */
int sess_send_msg(struct ssw_session *s, uint8_t type, const void *fixed, size_t flen,
		    const struct iovec *data, int dcnt, size_t dlen)
{
	struct ssw_wire_hdr h;
	struct iovec v[2 + 16];
	uint32_t credits = 0;
	/* suspended: nothing leaves until the peer's RESUME but the swap's
	 * own messages (session_swap.c) */
	if (s->sw.suspended && type != SSW_MSG_SUSPENDED && type != SSW_MSG_RESUME && type != SSW_MSG_SUSPEND)
		return -EAGAIN;
	/* only the process in control writes into the transport: its copy
	 * in another process may be of an older one (session_move.c), and a
	 * message there would take a sequence number the peer never sees */
	if (sess_foreign(s) || sess_move_stale(s))
		return -EAGAIN;
	credits = s->rx_unacked > UINT32_MAX ? UINT32_MAX : (uint32_t)s->rx_unacked;
	ssw_wire_hdr_set(&h, type, (uint32_t)(flen + dlen), credits, s->tx_seq);
	if (type == SSW_MSG_DATA && small_sender(s))
		h.flags = SSW_WIRE_F_ACK_NOW;
	int n = 0;
	v[n++] = (struct iovec){ &h, sizeof h };
	if (flen)
		v[n++] = (struct iovec){ (void *)fixed, flen };
	for (int i = 0; i < dcnt && n < (int)(sizeof v / sizeof v[0]); i++)
		v[n++] = data[i];
	const struct ssw_msg_ops *mo = s->p->msg;
	int rc = !carries_data(type) && mo->size > offsetof(struct ssw_msg_ops, send_ctl) && mo->send_ctl
			 ? mo->send_ctl(s->loc->ep, v, n)
			 : mo->send(s->loc->ep, v, n);
	if (rc == 0) {
		s->held = 0; /* a send publishes the held messages before it */
		sess_sent(s, credits);
	}
	return rc;
}

/* A message left with `credits`: it wakes the peer, and carries them. */
void sess_sent(struct ssw_session *s, uint32_t credits)
{
	s->tx_seq++;
	s->rx_unacked -= credits;
	s->rx_space = 0;
	s->credit_owed = false;
	s->st.msgs_sent++;
}

/* Control messages must get through: wait for transport room if needed. */
int sess_send_ctl(struct ssw_session *s, uint8_t type, const void *fixed, size_t flen)
{
	for (int tries = 0;; tries++) {
		/* suspended (session_swap.c): a FIN goes at RESUME, after the
		 * bytes staged meanwhile (session_stage.c), as a kernel shutdown
		 * never waits; anything else waits for it (bounded) */
		if (type == SSW_MSG_FIN && (s->sw.suspended || (s->ts.len && !sess_stage_flush(s)))) {
			if (!s->sw.fin_owed)
				sess_stage_watch(); /* it goes at RESUME, whatever the program does */
			s->sw.fin_owed = true;
			return 0;
		}
		int rc = sess_send_msg(s, type, fixed, flen, NULL, 0, 0);
		if (rc != -EAGAIN)
			return rc;
		sess_pump(s, true);
		rc = sess_wait_peer(s, ssw_now_ns() + 10000000ull);
		if (rc < 0 && rc != -ETIMEDOUT && rc != -EINTR)
			return rc;
		if (s->broken || (tries > 1000 && !s->sw.suspended))
			return -ECONNRESET;
	}
}

void sess_return_credits(struct ssw_session *s, uint64_t n)
{
	s->rx_unacked += n;
	/* a batch of stream bytes; or, for small messages whose framing fills
	 * the transport before their bytes fill a batch, a quarter of the
	 * transport freed: a sender may be waiting for that room */
	if (s->rx_unacked >= (s->peer_ack_now ? 1 : sess_credit_batch(s)) ||
	    (s->rx_unacked && s->rx_space >= sess_transport_bytes(s->p, s->loc->ep) / 4))
		/* if the transport is full, the next message carries them, or
		 * wait_peer retries before it sleeps */
		s->credit_owed = sess_send_msg(s, SSW_MSG_CREDIT, NULL, 0, NULL, 0, 0) < 0;
}

/* What the transport holds, next to control traffic: two of its largest
 * messages. */
uint32_t sess_transport_bytes(const struct ssw_provider *prov, struct ssw_ep *ep)
{
	uint64_t w = prov->msg->window(ep);
	return w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

/* Largest window: as much unread data as loopback TCP takes before a
 * sender blocks (about 4 MiB), or the transport's size if larger.  Beyond
 * the transport, bytes wait in the receiver's staging queue, which a
 * receiver stuck in its own send fills (no send/send deadlock). */
uint32_t sess_window_cap(const struct ssw_provider *prov, struct ssw_ep *ep)
{
	uint32_t r = sess_transport_bytes(prov, ep);
	return r > WINDOW_DEFAULT ? r : WINDOW_DEFAULT;
}

/* Credits go back in batches; a batch must fit the transport, or a sender
 * waiting for room in it would never hear that it was freed. */
uint64_t sess_credit_batch(const struct ssw_session *s)
{
	uint32_t r = sess_transport_bytes(s->p, s->loc->ep);
	return (s->window < r ? s->window : r) / 4;
}

/* The transport takes a useful amount now (the window may be larger than
 * the transport; then the peer's CREDIT messages wake a waiter as it reads). */
bool sess_tx_room_ok(struct ssw_session *s)
{
	if (!s->p->msg->send_room || sess_staging(s)) /* (the stage's room is in tx_limit) */
		return true;
	size_t want = sess_msg_space(s, sizeof(struct ssw_wire_hdr) + s->max_payload) + 64;
	uint64_t r = sess_transport_bytes(s->p, s->loc->ep) / 8;
	if (want > r)
		want = (size_t)r;
	return s->p->msg->send_room(s->loc->ep) >= want;
}

void ssw_session_set_opts(struct ssw_session *s, const struct ssw_session_opts *o)
{
	if (!sess_enter(s))
		return;
	/* urgent bytes that came before the change were taken in under the old
	 * setting in the kernel (tcp_check_urg at arrival): take ours in first
	 * (soak seed 840002208, sem oob_new_mark_then_inline) */
	if (o->oobinline != s->urg.inline_)
		(void)sess_pump(s, true);
	s->urg.inline_ = o->oobinline;
	s->sndbuf = o->sndbuf;
	if (o->rcvbuf) {
		uint64_t wmax = sess_window_cap(s->p, s->loc->ep);
		uint32_t w = o->rcvbuf > wmax ? (uint32_t)wmax : o->rcvbuf;
		if (w < 4096)
			w = 4096;
		if (w != s->window) {
			/* the peer applies the new window to what it has in flight */
			s->window = w;
			struct ssw_wire_window ww = { w };
			(void)sess_send_msg(s, SSW_MSG_WINDOW, &ww, sizeof ww, NULL, 0, 0);
		}
	}
	sess_unlock(s);
}
