/* session_rx.c — receive side of the stream: parse the head message, handle control, stage, deliver to the application. */
/* Receive side model: messages are handled in ring order.  Control messages
 * (credits, rendezvous replies) are consumed at once; stream messages (DATA,
 * OOB, FIN, rendezvous offers) are delivered to the application straight from
 * the provider's buffer when possible, or staged into a private queue when
 * the session must look past them (a sender waiting for credits queued behind
 * unread data, FIONREAD).  Staged bytes keep their credits until the
 * application reads them, so the peer can never overrun the window. */
#include "session/session_priv.h"

#include "common/log.h"
#include "common/trim.h"
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

/* Copy into the iovec at byte offset `at`. */
void sess_iov_put(const struct iovec *iov, int n, size_t at, const void *src, size_t len)
{
	const uint8_t *s = src;
	for (int i = 0; i < n && len; i++) {
		if (at >= iov[i].iov_len) {
			at -= iov[i].iov_len;
			continue;
		}
		size_t k = iov[i].iov_len - at;
		if (k > len)
			k = len;
		memcpy((uint8_t *)iov[i].iov_base + at, s, k);
		s += k;
		len -= k;
		at = 0;
	}
}

/* Build a sub-iovec [at, at+len) of iov into out (at most max entries). */
int sess_iov_slice(const struct iovec *iov, int n, size_t at, size_t len, struct iovec *out, int max)
{
	int k = 0;
	for (int i = 0; i < n && len && k < max; i++) {
		if (at >= iov[i].iov_len) {
			at -= iov[i].iov_len;
			continue;
		}
		size_t c = iov[i].iov_len - at;
		if (c > len)
			c = len;
		out[k].iov_base = (uint8_t *)iov[i].iov_base + at;
		out[k].iov_len = c;
		k++;
		len -= c;
		at = 0;
	}
	return k;
}

/* A connection taken over from a process that drove it since the fork
 * (fabric: each process's transport state is its own).  Our transport
 * still holds the messages it had received before the fork, which that
 * process consumed (their credits returned, their data delivered or staged
 * here): skipped, by their sequence number.  A message past the next one
 * expected was received by that process and went with it: the stream has
 * a hole, and the connection is reset (README Limits).  1: buf is the next
 * message; 0: skipped, look again; -ECONNRESET. */
static int sess_resync(struct ssw_session *s, const void *buf, size_t len)
{
	struct ssw_wire_hdr h;
	if (len < sizeof h)
		return 1; /* the parse refuses it */
	memcpy(&h, buf, sizeof h);
	int32_t d = (int32_t)(h.seq - s->rx_seq);
	if (d < 0 && d > -(1 << 24)) { /* (a bound: a peer's garbage is not skipped for ever) */
		s->p->msg->recv_done(s->loc->ep);
		return 0;
	}
	atomic_store(&s->resync, 0);
	if (d > 0) {
		sess_set_broken(s, "the process that drove this connection after a fork exited with data it had "
				   "received (fabric: a transport's state is its process's)");
		return -ECONNRESET;
	}
	return 1;
}

/* Parse the head message once: sequence check, credits applied.
 * Returns 1 with s->hm, 0 when none, -errno when the connection ended. */
int sess_head(struct ssw_session *s)
{
	const void *buf;
	size_t len;
	if (s->hv)
		return 1;
	if (s->broken)
		return -ECONNRESET;
	/* a copy of a transport that moved on is read no more (session_move.c) */
	if (sess_move_stale(s))
		return 0;
	/* the transport moved (session_move.c): the next one, when it comes */
	if (s->mv.waiting) {
		int r = sess_move_accept(s);
		if (r <= 0)
			return r;
	}
	int rc = s->p->msg->recv_peek(s->loc->ep, &buf, &len);
	if (rc == -EAGAIN)
		return 0;
	if (rc == -EPIPE) { /* the peer closed (or died) after its last message */
		s->peer_closed = true;
		s->fin_rcvd = true;
		return 0;
	}
	if (rc < 0) {
		sess_on_reset(s);
		return -ECONNRESET;
	}
	s->w.rx_gen++; /* something arrived: a thread about to sleep must look again */
	if (atomic_load_explicit(&s->resync, memory_order_relaxed) == ssw_pid()) {
		rc = sess_resync(s, buf, len);
		if (rc <= 0)
			return rc;
	}
	if (ssw_wire_parse(buf, len, s->rx_seq, &s->hm) < 0) {
		SSW_DEBUG("malformed: type %u len %u seq %u (expected %u), %zu bytes", s->hm.h.type, s->hm.h.len,
			  s->hm.h.seq, s->rx_seq, len);
		sess_set_broken(s, "malformed message from peer");
		return -ECONNRESET;
	}
	if (s->hm.h.credits > s->tx_inflight) {
		SSW_DEBUG("credits %u > inflight %lu (type %u seq %u)", s->hm.h.credits, (unsigned long)s->tx_inflight, s->hm.h.type, s->hm.h.seq);
		sess_set_broken(s, "peer returned more credits than were used");
		return -ECONNRESET;
	}
	s->tx_inflight -= s->hm.h.credits;
	if (s->hm.h.type == SSW_MSG_DATA)
		s->peer_ack_now = s->hm.h.flags & SSW_WIRE_F_ACK_NOW;
	s->st.tx_credited += s->hm.h.credits;
	s->rx_seq++;
	s->hv = true;
	s->cur_off = 0;
	s->st.msgs_received++;
	return 1;
}

void sess_consume(struct ssw_session *s)
{
	s->p->msg->recv_done(s->loc->ep);
	s->rx_space += sess_msg_space(s, sizeof s->hm.h + s->hm.h.len);
	s->hv = false;
}

/* Handle a control message at the head (consumes it). */
void sess_handle_control(struct ssw_session *s)
{
	struct ssw_msg *m = &s->hm;
	switch (m->h.type) {
	case SSW_MSG_INIT: /* a one-trip connect's answer: once, first from the acceptor */
		if (s->init_rcvd || m->u.init.window < 4096) {
			sess_set_broken(s, "unexpected INIT");
			break;
		}
		s->init_rcvd = true;
		s->peer_window = m->u.init.window < sess_window_cap(s->p, s->loc->ep) ? m->u.init.window : sess_window_cap(s->p, s->loc->ep);
		sess_set_peer_caps(s, m->u.init.caps);
		s->peer_pid = m->u.init.pid;
		break;
	case SSW_MSG_WINDOW:
		if (m->u.window.window < 4096)
			sess_set_broken(s, "peer window too small");
		else
			s->peer_window = m->u.window.window < sess_window_cap(s->p, s->loc->ep) ? m->u.window.window
										    : sess_window_cap(s->p, s->loc->ep);
		break;
	case SSW_MSG_CREDIT:
		break;
	case SSW_MSG_SUSPEND:
	case SSW_MSG_SUSPENDED:
	case SSW_MSG_RESUME:
		sess_swap_msg(s, m);
		break;
	case SSW_MSG_MOVED:
		sess_move_msg(s);
		break;
	case SSW_MSG_RNDV_DONE:
	case SSW_MSG_SINK:
	case SSW_MSG_WRITE_DONE:
		sess_rndv_reply(s, m);
		break;
	}
	sess_consume(s);
	if (s->mv.ending)
		sess_move_consumed(s);
}

int sess_q_reserve(struct ssw_session *s, size_t more)
{
	struct rxq *q = &s->q;
	if (q->off && q->off + q->len + more > q->cap) {
		memmove(q->buf, q->buf + q->off, q->len);
		q->off = 0;
	}
	if (ssw_session_cfg.fault_nomem)
		return -ENOBUFS;
	/* fixed capacity, reserved with the session (it must not move: forked
	 * processes share it); pages are only used as far as it fills, and
	 * given back once it idles (session_mem.c) */
	if (q->len + more > q->cap)
		return -ENOBUFS;
	q->gen++;
	if (q->off + q->len + more > q->hi) {
		if (!q->hi) {
			ssw_trim_regrown(&q->idle, ssw_now_ns());
			ssw_trim_note();
		}
		q->hi = q->off + q->len + more;
	}
	return 0;
}

/* Stage the head stream message into the private queue (see file comment).
 * Returns 1 if staged, 0 if it cannot be staged now. */
int sess_stage_head(struct ssw_session *s)
{
	struct ssw_msg *m = &s->hm;
	switch (m->h.type) {
	case SSW_MSG_DATA: {
		size_t n = m->h.len - s->cur_off;
		if (sess_q_reserve(s, n) < 0) {
			s->stage_nomem = true;
			return 0;
		}
		memcpy(s->q.buf + s->q.off + s->q.len, m->payload + s->cur_off, n);
		s->q.len += n;
		s->q_owed += n;
		s->st.bytes_received += n;
		/* what the application read of it now, the rest when it reads it */
		sess_return_credits(s, s->cur_off);
		sess_consume(s);
		return 1;
	}
	case SSW_MSG_OOB:
		sess_take_oob(s, m->u.oob);
		sess_consume(s);
		return 1;
	case SSW_MSG_FIN:
		s->fin_rcvd = true;
		sess_consume(s);
		return 1;
	case SSW_MSG_RNDV_READ:
	case SSW_MSG_WRITE_REQ:
		sess_rndv_offer(s, m);
		sess_consume(s);
		return 1;
	}
	return 0;
}

/* Process messages at the head: control always; stream messages only when
 * `stage` (then everything readable moves into the queue).  Returns the
 * number processed, or -errno when the connection ended. */
int sess_pump(struct ssw_session *s, bool stage)
{
	int done = 0;
	for (;;) {
		if (stage && s->rr.active && (s->rr.busy || !sess_stage_rr(s)))
			return done;
		if (stage && s->rw.active && !s->rw.sink_out && !sess_stage_rw(s))
			return done;
		int rc = sess_head(s);
		if (rc <= 0)
			return done ? done : rc;
		if (!is_stream(s->hm.h.type)) {
			sess_handle_control(s);
			done++;
			continue;
		}
		if (s->rr.active || s->rw.active)
			return done;
		/* a FIN or urgent byte at the head costs no copy: take it, so poll
		 * sees the state the kernel would show */
		if (!stage && s->hm.h.type != SSW_MSG_FIN && s->hm.h.type != SSW_MSG_OOB)
			return done;
		if (!sess_stage_head(s))
			return done;
		done++;
	}
}

/* The application consumed n bytes at the front of the queue. */
void sess_q_take(struct ssw_session *s, size_t n)
{
	s->q.off += n;
	s->q.len -= n;
	if (!s->q.len)
		s->q.off = 0; /* empty: the next staging starts at the front, on pages already there */
	s->rx_pos += n;
	if (s->urg.mark_valid && s->rx_pos > s->urg.mark)
		s->urg.mark_valid = s->urg.have = false; /* read past the mark: urgent state ends */
	/* rendezvous bytes in the queue never took credits */
	uint64_t c = n < s->q_owed ? n : s->q_owed;
	s->q_owed -= c;
	if (c)
		sess_return_credits(s, c);
}

/* Deliver what is available now.  Returns bytes (0: nothing available),
 * or -errno. */
static ssize_t deliver(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want, int flags)
{
	bool peek = flags & MSG_PEEK;
	size_t copied = 0, qpeek = 0;
	bool took_marks = false;
	/* urgent bytes the peer sent before this call are in, as in the kernel
	 * (where they moved the mark when they came, the reader where it stood
	 * then: sess_take_oob) */
	if (s->p->progress->note) {
		sess_peer_check(s, false);
		if (s->urg.peer != s->urg.seen)
			sess_pump(s, true);
	}
	while (copied < want) {
		size_t lim = want - copied;
		uint64_t pos = s->rx_pos + (peek ? qpeek : 0);
		/* A newer urgent byte the peer announced (the provider's marks)
		 * moves the mark once it arrives, as kernel TCP's urgent pointer
		 * does, and the older byte becomes plain data: take it in before
		 * stopping at (or skipping) the old mark */
		if (s->urg.mark_valid && pos == s->urg.mark && !took_marks && s->p->progress->note) {
			took_marks = true;
			sess_peer_check(s, false);
			if (s->urg.peer != s->urg.seen) {
				sess_pump(s, true);
				continue;
			}
		}
		if (s->urg.mark_valid) {
			if (pos == s->urg.mark && copied)
				break; /* a read never crosses the urgent mark */
			if (pos == s->urg.mark && !s->urg.inline_ && s->q.len > qpeek) {
				/* the urgent byte is not part of the normal stream */
				if (peek) {
					qpeek++;
				} else {
					sess_q_take(s, 1);
					s->urg.mark_valid = s->urg.have = false;
				}
				continue;
			}
			if (pos < s->urg.mark && s->urg.mark - pos < lim)
				lim = (size_t)(s->urg.mark - pos);
		}
		if (s->q.len > qpeek) {
			size_t n = s->q.len - qpeek < lim ? s->q.len - qpeek : lim;
			sess_iov_put(iov, iovcnt, copied, s->q.buf + s->q.off + qpeek, n);
			copied += n;
			if (peek)
				qpeek += n;
			else
				sess_q_take(s, n);
			continue;
		}
		if (s->rr.active) {
			if (peek || s->rr.busy) /* busy: another thread reads it now */
				break;
			ssize_t n = sess_rr_deliver(s, iov, iovcnt, copied, lim);
			if (n < 0)
				break;
			copied += (size_t)n;
			continue;
		}
		if (s->rw.active) {
			if (peek || copied)
				break;
			if (s->rw.sink_out) { /* a staging sink is outstanding: let it land */
				if (sess_pump(s, false) <= 0)
					break;
				continue;
			}
			ssize_t r = sess_recv_by_write(s, iov, iovcnt, lim);
			if (r != 0)
				return r;
			continue;
		}
		int h = sess_head(s);
		if (h <= 0)
			break;
		if (!is_stream(s->hm.h.type)) {
			sess_handle_control(s);
			continue;
		}
		if (s->hm.h.type == SSW_MSG_DATA) {
			size_t avail = s->hm.h.len - s->cur_off;
			/* a peek wanting more than this message looks on, as the
			 * kernel's does across segments: staged, the queue shows it
			 * (without memory for it: this message only) */
			if (peek && avail < lim && sess_stage_head(s))
				continue;
			size_t n = avail < lim ? avail : lim;
			sess_iov_put(iov, iovcnt, copied, s->hm.payload + s->cur_off, n);
			copied += n;
			if (peek)
				break; /* peeking stops at the first message still in the transport */
			s->cur_off += n;
			s->rx_pos += n;
			s->st.bytes_received += n;
			if (s->cur_off == s->hm.h.len) {
				uint32_t n = s->hm.h.len;
				sess_consume(s);
				sess_return_credits(s, n);
			}
			continue;
		}
		if (s->hm.h.type == SSW_MSG_FIN && copied)
			break;
		bool fin = s->hm.h.type == SSW_MSG_FIN;
		sess_stage_head(s); /* OOB, FIN, rendezvous offers: record and go on */
		if (fin)
			break;
	}
	return (ssize_t)copied;
}

ssize_t ssw_session_recv(struct ssw_session *s, const struct iovec *iov, int iovcnt, int flags, bool nonblock,
			 int timeout_ms)
{
	size_t want = iov_total(iov, iovcnt);
	nonblock = nonblock || (flags & MSG_DONTWAIT);
	uint64_t dl = deadline_of(timeout_ms);
	ssize_t got = 0;

	if (!sess_enter(s))
		return -ECONNRESET;
	if (flags & MSG_OOB) {
		got = sess_recv_oob(s, iov, iovcnt, want, flags);
		sess_unlock(s);
		return got;
	}
	size_t total = 0, peeked = 0;
	bool probed = false;
	for (;;) {
		if (want == 0) { /* tcp_recvmsg with len 0: 0 once data is there */
			if (sess_rx_pending_data(s))
				break;
		} else {
			struct iovec v[16];
			int k = sess_iov_slice(iov, iovcnt, total, want - total, v, 16);
			ssize_t n = deliver(s, v, k, want - total, flags);
			if (n < 0 && !s->reset) {
				got = n;
				break;
			}
			if (n > 0)
				total += (size_t)n;
			if (total == want || (total && !(flags & MSG_WAITALL)))
				break;
			/* tcp_recvmsg: nor does MSG_WAITALL cross the urgent mark (a
			 * peek leaves rx_pos where it was: its bytes end there too;
			 * soak seed 846000957 waited for ever) */
			if (total && s->urg.mark_valid && s->rx_pos + ((flags & MSG_PEEK) ? total : 0) == s->urg.mark)
				break;
			if (total && (flags & MSG_PEEK)) {
				/* MSG_PEEK|MSG_WAITALL waits for all of it (or the end), then
				 * peeks it: what it saw so far is looked at again then.  A
				 * FIN behind the peeked bytes is taken in (the peek stopped
				 * at it), else the wait would find it again and again */
				sess_pump(s, false);
				sess_peer_check(s, false);
				if (s->so_error || tcp_closed(s) || rcv_down(s) || nonblock)
					break;
				peeked = total;
				total = 0;
			}
		}
		/* the order of tcp_recvmsg's checks */
		if (total) {
			if (s->so_error || tcp_closed(s) || rcv_down(s))
				break;
		} else {
			if (s->fin_rcvd)
				break;
			if (s->so_error) {
				got = s->so_error;
				s->so_error = 0;
				break;
			}
			if (rcv_down(s))
				break;
			if (tcp_closed(s)) {
				got = -ENOTCONN;
				break;
			}
		}
		if (nonblock) {
			if (!probed) { /* a peer that died without a word: one look */
				probed = true;
				s->w.probe_ns = 0;
				sess_peer_check(s, true);
				continue;
			}
			if (!total)
				got = -EAGAIN;
			break;
		}
		int w = sess_wait_peer(s, dl);
		if (w < 0) {
			if (!total && peeked)
				total = peeked; /* timed out: what a peek saw */
			else if (!total)
				got = w == -ETIMEDOUT ? (want ? -EAGAIN : 0) : w; /* nothing wanted: 0 (its loop ends) */
			break;
		}
	}
	sess_unlock(s);
	return total ? (ssize_t)total : got;
}

ssize_t ssw_session_peek_at(struct ssw_session *s, void *buf, size_t len, uint64_t *pos)
{
	if (!sess_enter(s))
		return -ECONNRESET;
	struct iovec v = { buf, len };
	*pos = s->rx_pos;
	sess_pump(s, true); /* a peek looks past the first message once staged */
	ssize_t n = deliver(s, &v, 1, len, MSG_PEEK);
	if (n == 0 && s->reset)
		n = -ECONNRESET;
	else if (n == 0 && rcv_down(s))
		n = -EPIPE; /* nothing more will come */
	sess_unlock(s);
	return n;
}

ssize_t ssw_session_take_at(struct ssw_session *s, uint64_t pos, size_t len)
{
	if (!sess_enter(s))
		return -ECONNRESET;
	size_t took = 0;
	uint8_t scratch[16384];
	while (s->rx_pos == pos + took && took < len) {
		struct iovec v = { scratch, len - took < sizeof scratch ? len - took : sizeof scratch };
		ssize_t n = deliver(s, &v, 1, v.iov_len, 0);
		if (n <= 0)
			break;
		took += (size_t)n;
	}
	sess_unlock(s);
	return (ssize_t)took;
}

int ssw_session_unread(struct ssw_session *s, const void *buf, size_t len)
{
	if (!len)
		return 0;
	if (!sess_enter(s))
		return -ECONNRESET;
	int rc = 0;
	if (s->q.len + len > s->q.cap || s->rx_pos < len) {
		rc = -ENOSPC;
	} else {
		if (s->q.off < len) {
			/* room at the front: the queue moves up (overlapping) */
			size_t to = len;
			memmove(s->q.buf + to, s->q.buf + s->q.off, s->q.len);
			s->q.off = to;
		}
		s->q.off -= len;
		memcpy(s->q.buf + s->q.off, buf, len);
		s->q.len += len;
		if (s->q.off + s->q.len > s->q.hi)
			s->q.hi = s->q.off + s->q.len;
		/* the stream position goes back with them; their credits went back
		 * to the peer when they were first taken, so none are owed */
		s->rx_pos -= len;
	}
	sess_unlock(s);
	return rc;
}

/* A look (seed 000: only a transfer of data moves control): a process not
 * in control counts what a fork-shared transport holds, as its poll does
 * (soak seed 869100040: an epoll_wait there asked for control and missed
 * the byte behind the peer's SUSPEND).  A transport in another process's
 * memory (fabric) shows nothing to a look: there it asks, as before. */
int ssw_session_fionread(struct ssw_session *s)
{
	if (sess_enter_look(s)) {
		sess_pump(s, true);
	} else if (sess_foreign_live(s) && s->swap_transport) {
		sess_lock(s);
		sess_foreign_stage(s);
	} else if (sess_enter(s)) {
		sess_pump(s, true);
	} else {
		return 0;
	}
	uint64_t n = s->q.len;
	if (s->rr.active)
		n += s->rr.total - s->rr.done;
	if (s->hv && s->hm.h.type == SSW_MSG_DATA)
		n += s->hm.h.len - s->cur_off;
	/* tcp_inq: while an urgent byte not inline is ahead (read out of band
	 * or not), only the bytes before the mark */
	if (s->urg.mark_valid && !s->urg.inline_ && s->urg.mark >= s->rx_pos && n > s->urg.mark - s->rx_pos)
		n = s->urg.mark - s->rx_pos;
	sess_unlock(s);
	return n > INT_MAX ? INT_MAX : (int)n;
}
