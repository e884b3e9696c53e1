/* session.c — TCP stream semantics on top of provider messages: credits,
 * inline data, rendezvous for large sends, urgent data, half-close, reset.
 *
 * Receive side model: messages are handled in ring order.  Control messages
 * (credits, rendezvous replies) are consumed at once; stream messages (DATA,
 * OOB, FIN, rendezvous offers) are delivered to the application straight from
 * the provider's buffer when possible, or staged into a private queue when
 * the session must look past them (a sender waiting for credits queued behind
 * unread data, FIONREAD).  Staged bytes keep their credits until the
 * application reads them, so the peer can never overrun the window. */
#include "session/session.h"

#include "common/log.h"
#include "common/sys.h"
#include "common/waitpol.h"
#include "session/wire.h"

#include <errno.h>
#include <stdatomic.h>
#include <limits.h>
#include <stddef.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#define SPIN_MIN_NS 2000u
#define STAGE_RNDV_MAX (64u << 20)   /* largest rendezvous we stage to break a send/send deadlock */
#define CHUNK_MAX (32u << 10)        /* inline DATA message payload cap */
#ifndef FILL_MAX
#define FILL_MAX (64u << 10)         /* ... when a producer writes it in place: fewer, larger file reads */
#endif
#define WINDOW_DEFAULT (4u << 20)    /* unread bytes a receiver takes, as loopback TCP */
#define HOLD_FLUSH (64u << 10)       /* corked bytes that make a full segment: sent at once */

struct rxq {
	uint8_t *buf;
	size_t off, len, cap;
};

struct ssw_session {
	pthread_mutex_t lock;      /* process-shared and robust: the session is fork-shared */
	_Atomic int holders;       /* processes holding the connection (fork adds one) */
	/* Threads (of any holder) asleep on the provider's fds.  One of them
	 * may drain a doorbell another armed for and then consume what that
	 * one waits for (credits, data): with company, sleeps are naps. */
	_Atomic int sleepers;
	size_t map_size;           /* the session's own mapping: this struct, then the queue */
	const struct ssw_provider *p;
	struct ssw_ep *ep;
	size_t max_payload;

	/* transmit */
	uint32_t tx_seq;
	uint64_t tx_inflight;
	uint64_t peer_window;
	uint32_t sndbuf;
	uint32_t peer_caps;
	int32_t peer_pid;
	uint64_t next_id;
	uint64_t tx_rndv_id;       /* rendezvous we wait on (0: none) */
	bool tx_rndv_done;
	int tx_rndv_status;
	uint64_t tx_rndv_bytes;
	bool tx_sink_have;
	struct ssw_wire_rndv tx_sink;
	bool cork;                 /* TCP_CORK: DATA messages are held (provider send_commit) */
	uint64_t held;             /* footprint of DATA messages held since the last publication */

	/* receive */
	uint32_t rx_seq;
	uint64_t rx_unacked;
	uint32_t window;           /* credit bytes we grant */
	struct rxq q;
	uint64_t q_owed;           /* staged bytes whose credits are still owed */
	bool hv;                   /* head message parsed (credits applied) */
	struct ssw_msg hm;
	size_t cur_off;            /* bytes of the head DATA already delivered */

	/* TCP state as the application sees it: the kernel's sk_shutdown bits,
	 * SOCK_DONE, sk_err and TCP_CLOSE, which every answer below mirrors */
	bool wr_shut;              /* shutdown(SHUT_WR) (our FIN) */
	bool rd_shut;              /* shutdown(SHUT_RD) */
	bool fin_rcvd;             /* the peer's FIN arrived (maybe behind unread data) */
	bool reset;                /* reset by the peer or by a protocol violation */
	bool peer_closed;          /* the peer's socket is closed: data we send draws a reset */
	int so_error;              /* pending error (sk_err): SO_ERROR, recv and send take it */
	bool broken;               /* protocol violation: stop parsing the peer's messages */
	uint32_t urg_seen;         /* urgent bytes handled */
	bool init_rcvd;            /* the peer's in-band INIT arrived */
	bool stage_nomem;          /* staging failed for memory: a sender waiting on it gets ENOBUFS */
	bool credit_owed;          /* a CREDIT message found the transport full */
	bool peer_ack_now;         /* the peer's last DATA asked for its credits at once (ACK_NOW) */
	uint64_t rx_gen;           /* messages taken in: changes another thread's wait may miss */
	uint32_t nap_ms;           /* bound on the next sleep in wait_peer, 0: SLEEP_CAP_MIN_MS */
	pthread_cond_t tx_cv;      /* senders wait here while a rendezvous send is in progress */
	uint32_t peer_urg;         /* urgent bytes the peer announced */
	uint64_t probe_ns;         /* last peer_state probe (a system call) */
	uint64_t send_tick;        /* coarse clock at the last send: one probe per tick */
	struct {
		bool active;
		uint64_t id, total, done;
		struct ssw_rdma_desc desc;
	} rr;                      /* peer's RNDV_READ being consumed */
	struct {
		bool active, sink_out, sink_to_q, wdone;
		uint64_t id, total, done, sink_len, wdone_len;
		int wdone_status;
	} rw;                      /* peer's WRITE_REQ being served */

	/* urgent data */
	bool oobinline, oob_have, mark_valid;
	uint8_t oob_byte;
	uint64_t mark, rx_pos;

	struct ssw_session_stats st;
	uint32_t spin_ns;
};

struct ssw_session_config ssw_session_cfg = {
	.rndv_threshold = SSW_RNDV_OFF,
	.rndv_max = 256u << 10,
	.rdma_mode = SSW_RDMA_AUTO,
	.spin_max_ns = 50000,
};

/* ---- small helpers ------------------------------------------------------ */

static void set_broken(struct ssw_session *s, const char *why);

/* Lock the session.  A process that died holding it (killed inside a
 * send) leaves its state half-updated: that one connection is reset. */
static void sess_lock(struct ssw_session *s)
{
	if (pthread_mutex_lock(&s->lock) == EOWNERDEAD) {
		pthread_mutex_consistent(&s->lock);
		set_broken(s, "a process died while using this connection");
	}
}

static void sess_cond_wait(struct ssw_session *s)
{
	if (pthread_cond_wait(&s->tx_cv, &s->lock) == EOWNERDEAD) {
		pthread_mutex_consistent(&s->lock);
		set_broken(s, "a process died while using this connection");
	}
}

static size_t iov_total(const struct iovec *iov, int n)
{
	size_t t = 0;
	for (int i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

/* Copy into the iovec at byte offset `at`. */
static void iov_put(const struct iovec *iov, int n, size_t at, const void *src, size_t len)
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
static int iov_slice(const struct iovec *iov, int n, size_t at, size_t len, struct iovec *out, int max)
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

static uint64_t tx_limit(const struct ssw_session *s)
{
	uint64_t l = s->peer_window;
	if (s->sndbuf && s->sndbuf < l)
		l = s->sndbuf;
	return l;
}

/* sk_shutdown & RCV_SHUTDOWN, & SEND_SHUTDOWN, and sk_state == TCP_CLOSE.
 * On loopback a FIN is acknowledged at once, so both FINs mean CLOSE. */
static bool rcv_down(const struct ssw_session *s) { return s->fin_rcvd || s->rd_shut || s->reset; }
static bool snd_down(const struct ssw_session *s) { return s->wr_shut || s->reset; }
static bool tcp_closed(const struct ssw_session *s) { return s->reset || (s->wr_shut && s->fin_rcvd); }

/* A reset arrives (tcp_reset): EPIPE in CLOSE_WAIT, else ECONNRESET; none
 * once closed.  Data already received stays readable. */
static void on_reset(struct ssw_session *s)
{
	if (tcp_closed(s))
		return;
	s->so_error = s->fin_rcvd && !s->wr_shut ? -EPIPE : -ECONNRESET;
	s->reset = true;
}

/* Take the pending error for a failed send (sk_stream_error). */
static int take_send_error(struct ssw_session *s)
{
	int e = s->so_error ? s->so_error : -EPIPE;
	s->so_error = 0;
	return e;
}

static void set_broken(struct ssw_session *s, const char *why)
{
	if (!s->broken)
		SSW_WARN("session: connection reset: %s", why);
	s->broken = true;
	on_reset(s);
}

/* What the peer announced beside the message stream: a FIN or a reset
 * queued behind unread data, its death, urgent bytes.  `probe` allows a
 * system call (to find a dead peer), at most every 200 µs. */
static void peer_check(struct ssw_session *s, bool probe)
{
	const struct ssw_progress_ops *pg = s->p->progress;
	if (!pg->peer_state || !s->ep)
		return;
	if (probe) {
		uint64_t now = ssw_now_ns();
		if (now - s->probe_ns < 200000)
			probe = false;
		else
			s->probe_ns = now;
	}
	uint32_t urg = s->peer_urg;
	uint32_t st = pg->peer_state(s->ep, probe, &urg);
	s->peer_urg = urg;
	if (st & (SSW_PEER_FIN | SSW_PEER_CLOSED))
		s->fin_rcvd = true;
	if (st & SSW_PEER_CLOSED)
		s->peer_closed = true;
	if (st & SSW_PEER_RESET)
		on_reset(s);
}

/* ---- sending messages ---------------------------------------------------- */

/* Does a message of this type bring the peer stream bytes?  A peer that
 * dies with one unread resets the connection (TCP's unread data on close);
 * left unread, the others (credits, FIN, replies) end it in order. */
static bool carries_data(uint8_t t)
{
	return t == SSW_MSG_DATA || t == SSW_MSG_OOB || t == SSW_MSG_RNDV_READ || t == SSW_MSG_WRITE_REQ ||
	       t == SSW_MSG_WRITE_DONE;
}

static uint32_t ring_window(const struct ssw_provider *prov, struct ssw_ep *ep);

/* May we have less in flight than the peer's credit batch (SO_SNDBUF below
 * it)?  Then the peer would never reach a batch while we wait for one: our
 * DATA asks for its credits at once (ACK_NOW).  The peer's batch is
 * credit_batch on its side: its window (ours to use) against the ring. */
static bool small_sender(const struct ssw_session *s)
{
	uint64_t r = ring_window(s->p, s->ep);
	uint64_t peer_batch = (s->peer_window < r ? s->peer_window : r) / 4;
	return tx_limit(s) < 2 * peer_batch;
}

/* Send one message: header, fixed part, then data.  Returns 0 or -errno;
 * -EAGAIN when the transport is full. */
static int send_msg(struct ssw_session *s, uint8_t type, const void *fixed, size_t flen,
		    const struct iovec *data, int dcnt, size_t dlen)
{
	struct ssw_wire_hdr h;
	struct iovec v[2 + 16];
	uint32_t credits = 0;
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
			 ? mo->send_ctl(s->ep, v, n)
			 : mo->send(s->ep, v, n);
	if (rc == 0) {
		s->held = 0; /* a send publishes the held messages before it */
		s->tx_seq++;
		s->rx_unacked -= credits;
		s->credit_owed = false;
		s->st.msgs_sent++;
	}
	return rc;
}

static int wait_peer(struct ssw_session *s, uint64_t deadline);
static uint32_t window_cap(const struct ssw_provider *prov, struct ssw_ep *ep);
static uint64_t credit_batch(const struct ssw_session *s);
static int pump(struct ssw_session *s, bool stage);

/* Control messages must get through: wait for transport room if needed. */
static int send_ctl(struct ssw_session *s, uint8_t type, const void *fixed, size_t flen)
{
	for (int tries = 0;; tries++) {
		int rc = send_msg(s, type, fixed, flen, NULL, 0, 0);
		if (rc != -EAGAIN)
			return rc;
		pump(s, true);
		rc = wait_peer(s, ssw_now_ns() + 10000000ull);
		if (rc < 0 && rc != -ETIMEDOUT && rc != -EINTR)
			return rc;
		if (tries > 1000)
			return -ECONNRESET;
	}
}

static void return_credits(struct ssw_session *s, uint64_t n)
{
	s->rx_unacked += n;
	if (s->rx_unacked >= (s->peer_ack_now ? 1 : credit_batch(s)))
		/* if the transport is full, the next message carries them, or
		 * wait_peer retries before it sleeps */
		s->credit_owed = send_msg(s, SSW_MSG_CREDIT, NULL, 0, NULL, 0, 0) < 0;
}

/* ---- receiving messages -------------------------------------------------- */

/* Parse the head message once: sequence check, credits applied.
 * Returns 1 with s->hm, 0 when none, -errno when the connection ended. */
static int head(struct ssw_session *s)
{
	const void *buf;
	size_t len;
	if (s->hv)
		return 1;
	if (s->broken)
		return -ECONNRESET;
	int rc = s->p->msg->recv_peek(s->ep, &buf, &len);
	if (rc == -EAGAIN)
		return 0;
	if (rc == -EPIPE) { /* the peer closed (or died) after its last message */
		s->peer_closed = true;
		s->fin_rcvd = true;
		return 0;
	}
	if (rc < 0) {
		on_reset(s);
		return -ECONNRESET;
	}
	s->rx_gen++; /* something arrived: a thread about to sleep must look again */
	if (ssw_wire_parse(buf, len, s->rx_seq, &s->hm) < 0) {
		set_broken(s, "malformed message from peer");
		return -ECONNRESET;
	}
	if (s->hm.h.credits > s->tx_inflight) {
		SSW_DEBUG("credits %u > inflight %lu (type %u seq %u)", s->hm.h.credits, (unsigned long)s->tx_inflight, s->hm.h.type, s->hm.h.seq);
		set_broken(s, "peer returned more credits than were used");
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

static void consume(struct ssw_session *s)
{
	s->p->msg->recv_done(s->ep);
	s->hv = false;
}

static bool is_stream(uint8_t t)
{
	return t == SSW_MSG_DATA || t == SSW_MSG_OOB || t == SSW_MSG_FIN || t == SSW_MSG_RNDV_READ ||
	       t == SSW_MSG_WRITE_REQ;
}

/* Handle a control message at the head (consumes it). */
static void handle_control(struct ssw_session *s)
{
	struct ssw_msg *m = &s->hm;
	switch (m->h.type) {
	case SSW_MSG_INIT: /* a one-trip connect's answer: once, first from the acceptor */
		if (s->init_rcvd || m->u.init.window < 4096) {
			set_broken(s, "unexpected INIT");
			break;
		}
		s->init_rcvd = true;
		s->peer_window = m->u.init.window < window_cap(s->p, s->ep) ? m->u.init.window : window_cap(s->p, s->ep);
		s->peer_caps = m->u.init.caps;
		s->peer_pid = m->u.init.pid;
		break;
	case SSW_MSG_WINDOW:
		if (m->u.window.window < 4096)
			set_broken(s, "peer window too small");
		else
			s->peer_window = m->u.window.window < window_cap(s->p, s->ep) ? m->u.window.window
										    : window_cap(s->p, s->ep);
		break;
	case SSW_MSG_CREDIT:
		break;
	case SSW_MSG_RNDV_DONE:
		if (m->u.done.id != s->tx_rndv_id || s->tx_rndv_done) {
			set_broken(s, "unexpected RNDV_DONE");
			break;
		}
		s->tx_rndv_done = true;
		s->tx_rndv_status = m->u.done.status;
		s->tx_rndv_bytes = m->u.done.len;
		break;
	case SSW_MSG_SINK:
		if (m->u.rndv.id != s->tx_rndv_id || s->tx_sink_have) {
			set_broken(s, "unexpected SINK");
			break;
		}
		s->tx_sink = m->u.rndv;
		s->tx_sink_have = true;
		break;
	case SSW_MSG_WRITE_DONE:
		if (!s->rw.active || !s->rw.sink_out || m->u.done.id != s->rw.id ||
		    (m->u.done.status == 0 && (m->u.done.len == 0 || m->u.done.len > s->rw.sink_len))) {
			set_broken(s, "unexpected WRITE_DONE");
			break;
		}
		s->rw.sink_out = false;
		if (m->u.done.status < 0) { /* writer could not: the rest comes inline */
			s->rw.active = false;
			s->st.rndv_fallback++;
			break;
		}
		s->rw.done += m->u.done.len;
		if (s->rw.sink_to_q) {
			s->q.len += m->u.done.len;
			s->st.bytes_received += m->u.done.len;
			if (s->rw.done == s->rw.total)
				s->rw.active = false;
		} else {
			s->rw.wdone = true;
			s->rw.wdone_len = m->u.done.len;
		}
		break;
	}
	consume(s);
}

static int q_reserve(struct ssw_session *s, size_t more)
{
	struct rxq *q = &s->q;
	if (q->off && q->off + q->len + more > q->cap) {
		memmove(q->buf, q->buf + q->off, q->len);
		q->off = 0;
	}
	if (ssw_session_cfg.fault_nomem)
		return -ENOBUFS;
	/* fixed capacity, reserved with the session (it must not move: forked
	 * processes share it); pages are only used as far as it ever fills */
	return q->len + more <= q->cap ? 0 : -ENOBUFS;
}

/* Record the urgent byte.  As in Linux it stays in the stream at `mark`
 * (a normal read stops before it and, without SO_OOBINLINE, skips it); a
 * newer urgent byte moves the mark and the older one becomes plain data. */
static void take_oob(struct ssw_session *s, uint8_t byte)
{
	uint32_t fp = ssw_wire_footprint(1);
	if (q_reserve(s, 1) < 0) {
		set_broken(s, "out of memory for urgent byte");
		return;
	}
	s->mark = s->rx_pos + s->q.len;
	s->mark_valid = true;
	s->q.buf[s->q.off + s->q.len++] = byte;
	s->q_owed++;
	s->oob_byte = byte;
	s->oob_have = true;
	s->urg_seen++;
	return_credits(s, fp - 1);
}

/* Stage the head stream message into the private queue (see file comment).
 * Returns 1 if staged, 0 if it cannot be staged now. */
static int stage_head(struct ssw_session *s)
{
	struct ssw_msg *m = &s->hm;
	switch (m->h.type) {
	case SSW_MSG_DATA: {
		size_t n = m->h.len - s->cur_off;
		if (q_reserve(s, n) < 0) {
			s->stage_nomem = true;
			return 0;
		}
		memcpy(s->q.buf + s->q.off + s->q.len, m->payload + s->cur_off, n);
		s->q.len += n;
		s->q_owed += n;
		s->st.bytes_received += n;
		/* header overhead now, payload credits when the app reads it */
		return_credits(s, ssw_wire_footprint(m->h.len) - m->h.len + s->cur_off);
		consume(s);
		return 1;
	}
	case SSW_MSG_OOB:
		take_oob(s, m->u.oob);
		consume(s);
		return 1;
	case SSW_MSG_FIN:
		s->fin_rcvd = true;
		consume(s);
		return 1;
	case SSW_MSG_RNDV_READ:
		s->rr.active = true;
		s->rr.id = m->u.rndv.id;
		s->rr.total = m->u.rndv.len;
		s->rr.done = 0;
		s->rr.desc = m->u.rndv.desc;
		consume(s);
		return 1;
	case SSW_MSG_WRITE_REQ:
		s->rw.active = true;
		s->rw.id = m->u.done.id;
		s->rw.total = m->u.done.len;
		s->rw.done = 0;
		s->rw.sink_out = false;
		s->rw.wdone = false;
		if (!s->rw.total)
			set_broken(s, "empty WRITE_REQ");
		consume(s);
		return 1;
	}
	return 0;
}

static int send_rndv_done(struct ssw_session *s, uint64_t id, uint64_t len, int status)
{
	struct ssw_wire_done d = { .id = id, .len = len, .status = status };
	return send_ctl(s, SSW_MSG_RNDV_DONE, &d, sizeof d);
}

/* Pull the rest of the peer's RNDV_READ into the queue. */
static int stage_rr(struct ssw_session *s)
{
	uint64_t n = s->rr.total - s->rr.done;
	if (n > STAGE_RNDV_MAX || q_reserve(s, n) < 0)
		return 0;
	struct iovec v = { s->q.buf + s->q.off + s->q.len, n };
	int rc = s->p->rdma->rdma_read(s->ep, &v, 1, &s->rr.desc, s->rr.done, n, NULL);
	if (rc == -EPERM) {
		s->rr.active = false;
		s->st.rndv_fallback++;
		send_rndv_done(s, s->rr.id, s->rr.done, -EPERM);
		return 1;
	}
	if (rc < 0) {
		set_broken(s, "rdma read of peer buffer failed");
		return 0;
	}
	s->q.len += n;
	s->st.bytes_received += n;
	s->rr.done = s->rr.total;
	s->rr.active = false;
	send_rndv_done(s, s->rr.id, s->rr.total, 0);
	return 1;
}

/* Offer the queue as the sink of the peer's WRITE_REQ. */
static int stage_rw(struct ssw_session *s)
{
	uint64_t n = s->rw.total - s->rw.done, room = s->q.cap - s->q.len;
	if (n > room)
		n = room;
	if (n < 4096 && n < s->rw.total - s->rw.done)
		return 0;
	if (q_reserve(s, n) < 0)
		return 0;
	struct ssw_wire_rndv sk = { .id = s->rw.id, .len = n };
	if (ssw_session_cfg.fault_regfail ||
	    s->p->rdma->register_rdma_memory(s->ep, s->q.buf + s->q.off + s->q.len, n, SSW_CAP_RDMA_WRITE, &sk.desc) < 0)
		return 0;
	s->rw.sink_out = true;
	s->rw.sink_to_q = true;
	s->rw.sink_len = n;
	return send_ctl(s, SSW_MSG_SINK, &sk, sizeof sk) == 0;
}

/* Process messages at the head: control always; stream messages only when
 * `stage` (then everything readable moves into the queue).  Returns the
 * number processed, or -errno when the connection ended. */
static int pump(struct ssw_session *s, bool stage)
{
	int done = 0;
	for (;;) {
		if (stage && s->rr.active && !stage_rr(s))
			return done;
		if (stage && s->rw.active && !s->rw.sink_out && !stage_rw(s))
			return done;
		int rc = head(s);
		if (rc <= 0)
			return done ? done : rc;
		if (!is_stream(s->hm.h.type)) {
			handle_control(s);
			done++;
			continue;
		}
		if (s->rr.active || s->rw.active)
			return done;
		/* a FIN or urgent byte at the head costs no copy: take it, so poll
		 * sees the state the kernel would show */
		if (!stage && s->hm.h.type != SSW_MSG_FIN && s->hm.h.type != SSW_MSG_OOB)
			return done;
		if (!stage_head(s))
			return done;
		done++;
	}
}

/* ---- waiting ------------------------------------------------------------ */

/* Does any installed signal handler lack SA_RESTART?  Then a blocking call
 * interrupted by a signal must report EINTR, as the kernel would. */
static bool eintr_visible(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return true;
	}
	return false;
}

/* After a sleep: take the doorbell, unless a fellow sleeper (still in its
 * sleep) may need it: a woken poll re-checks the fd, and goes back to sleep
 * if we drained it first.  A fellow wakes at once on a doorbell left for it;
 * a count left high by a killed process costs a few extra wake-ups (then
 * the doorbell is taken), not a spin. */
static void woke(struct ssw_session *s)
{
	static __thread unsigned left;
	const struct ssw_progress_ops *pg = s->p->progress;
	if (pg->wake_leave && left < 64 && atomic_load(&s->sleepers) > 0) {
		left++;
		pg->wake_leave(s->ep);
		return;
	}
	left = 0;
	pg->wake_ack(s->ep);
}

#define SLEEP_CAP_MIN_MS 1
#define SLEEP_CAP_MAX_MS 1000  /* alone and idle: about one wake-up a second */
#define SLEEP_CAP_COMPANY_MS 64 /* two threads asleep on one connection */

/* Wait for the peer: look while the wait policy allows (common/waitpol.h),
 * then sleep on the provider (alone: its one-call sleep op).
 * Called and returns with the lock held.  deadline 0 = none.
 * Returns 0 (something may have changed), -ETIMEDOUT or -EINTR. */
static int wait_peer(struct ssw_session *s, uint64_t deadline)
{
	struct ssw_ep *ep = s->ep;
	const struct ssw_progress_ops *pg = s->p->progress;
	uint64_t t0 = ssw_now_ns();
	if (deadline && t0 >= deadline)
		return -ETIMEDOUT;
	uint64_t gen = s->rx_gen;
	struct ssw_spin sp;
	ssw_spin_start(&sp, t0, s->spin_ns);

	pthread_mutex_unlock(&s->lock);
	for (;;) {
		if (pg->rx_ready(ep)) {
			sess_lock(s);
			if (s->spin_ns < ssw_session_cfg.spin_max_ns)
				s->spin_ns += s->spin_ns / 2;
			if (s->spin_ns > ssw_session_cfg.spin_max_ns)
				s->spin_ns = ssw_session_cfg.spin_max_ns;
			return 0;
		}
		if (!ssw_spin_step(&sp))
			break;
	}
	sess_lock(s);
	/* another thread took messages in while we spun unlocked (credits we
	 * wait for, say): their doorbell is gone, so look before sleeping */
	if (s->rx_gen != gen)
		return 0;

	/* Credits we could not return earlier: the peer may be waiting for them
	 * while we wait for it.  Retry, and if the transport is still full,
	 * sleep only briefly. */
	bool owed = s->credit_owed && send_msg(s, SSW_MSG_CREDIT, NULL, 0, NULL, 0, 0) < 0;
	int armed = pg->arm(ep);
	if (armed == -EAGAIN)
		return 0;
	struct pollfd pfd[4];
	int n = pg->wait_fds(ep, pfd, 4);
	bool company = atomic_fetch_add(&s->sleepers, 1) > 0;
	/* Another thread of this connection may take what we wait for (a
	 * credit, say) together with its doorbell, now or after it joins us:
	 * no sleep is endless.  The bound starts at 1 ms and doubles while
	 * nothing comes (an idle connection wakes about once a second, 64 ms
	 * with company), and is short again once traffic wakes us. */
	int cap = s->nap_ms ? (int)s->nap_ms : SLEEP_CAP_MIN_MS;
	if (company && cap > SLEEP_CAP_COMPANY_MS)
		cap = SLEEP_CAP_COMPANY_MS;
	if (armed > 0 && cap > armed)
		cap = armed; /* the peer holds corked data: ours when its hold ends */
	pthread_mutex_unlock(&s->lock);
	/* alone: sleep in the provider's own wait, which takes the wake-up in
	 * the same system call (no poll, then drain) */
	bool lone = !company && pg->sleep;
	int r;
	for (;;) {
		int ms = -1;
		if (deadline) {
			uint64_t now = ssw_now_ns();
			ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
		}
		if (owed && (ms < 0 || ms > 1))
			ms = 1;
		if (ms < 0 || ms > cap)
			ms = cap;
		if (lone && ms > 0) {
			r = pg->sleep(ep, ms);
			if (r == -ENOSYS) {
				lone = false;
				continue;
			}
			if (r == -EINTR && !eintr_visible())
				r = 1; /* disarmed already: the caller looks and comes back */
			if (r == -EINTR) {
				r = -1;
				errno = EINTR;
			}
			break;
		}
		lone = false;
		r = sys_poll(pfd, (nfds_t)n, ms);
		if (r < 0 && errno == EINTR && !eintr_visible())
			continue;
		break;
	}
	int err = errno;
	atomic_fetch_sub(&s->sleepers, 1);
	sess_lock(s);
	if (!lone)
		woke(s);
	if (r > 0)
		s->nap_ms = SLEEP_CAP_MIN_MS;
	else if (r == 0)
		s->nap_ms = cap * 2 > SLEEP_CAP_MAX_MS ? SLEEP_CAP_MAX_MS : (uint32_t)cap * 2;
	/* Slept: the spin did not pay off this time; spin less next time. */
	s->spin_ns /= 2;
	if (s->spin_ns < SPIN_MIN_NS)
		s->spin_ns = SPIN_MIN_NS;
	if (r < 0 && err == EINTR)
		return -EINTR;
	if (r == 0 && deadline && ssw_now_ns() >= deadline)
		return -ETIMEDOUT;
	return 0;
}

static uint64_t deadline_of(int timeout_ms)
{
	return timeout_ms > 0 ? ssw_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
}

/* ---- lifecycle ---------------------------------------------------------- */

/* What the transport itself holds next to control traffic. */
static uint32_t ring_window(const struct ssw_provider *prov, struct ssw_ep *ep)
{
	uint64_t w = (uint64_t)prov->msg->max_msg(ep) * 2;
	return w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

/* Largest window: as much unread data as loopback TCP takes before a
 * sender blocks (about 4 MiB), or the transport's size if larger.  Beyond
 * the transport, bytes wait in the receiver's staging queue, which a
 * receiver stuck in its own send fills (no send/send deadlock). */
static uint32_t window_cap(const struct ssw_provider *prov, struct ssw_ep *ep)
{
	uint32_t r = ring_window(prov, ep);
	return r > WINDOW_DEFAULT ? r : WINDOW_DEFAULT;
}

/* Credits go back in batches; a batch must fit the transport, or a sender
 * waiting for ring space would never hear that it was freed. */
static uint64_t credit_batch(const struct ssw_session *s)
{
	uint32_t r = ring_window(s->p, s->ep);
	return (s->window < r ? s->window : r) / 4;
}

static uint32_t my_caps(void)
{
	switch (ssw_session_cfg.rdma_mode) {
	case SSW_RDMA_READ_ONLY:
		return SSW_CAP_RDMA_READ;
	case SSW_RDMA_WRITE_ONLY:
		return SSW_CAP_RDMA_WRITE;
	case SSW_RDMA_NONE:
		return 0;
	}
	return SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE;
}

void ssw_session_make_init(const struct ssw_session_opts *o, struct ssw_wire_init *out)
{
	pid_t pid = ssw_pid();
	memset(out, 0, sizeof *out);
	out->version = SSW_WIRE_VERSION;
	/* the transport clamps it to what it can hold (window_cap) */
	out->window = o && o->rcvbuf ? o->rcvbuf : UINT32_MAX;
	out->caps = my_caps();
	out->pid = (int32_t)pid;
}

struct ssw_session *ssw_session_new(const struct ssw_provider *prov, struct ssw_ep *ep,
				    const struct ssw_session_opts *o, const struct ssw_wire_init *peer)
{
	if (!peer || peer->version != SSW_WIRE_VERSION || peer->window < 4096)
		return NULL;
	/* queue: what credits allow to be staged, plus one staged rendezvous */
	uint64_t rmax = ssw_session_cfg.rndv_max ? ssw_session_cfg.rndv_max : STAGE_RNDV_MAX;
	size_t head_sz = (sizeof(struct ssw_session) + 4095) & ~(size_t)4095;
	size_t qcap = (size_t)window_cap(prov, ep) + (size_t)rmax + (64u << 10);
	struct ssw_session *s = ssw_shared_alloc(head_sz + qcap, sizeof *s);
	if (!s)
		return NULL;
	s->map_size = head_sz + qcap;
	s->q.buf = (uint8_t *)s + head_sz;
	s->q.cap = qcap;
	atomic_store(&s->holders, 1);
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&s->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	pthread_cond_init(&s->tx_cv, &ca);
	pthread_condattr_destroy(&ca);
	s->p = prov;
	s->ep = ep;
	size_t mm = prov->msg->max_msg(ep);
	s->max_payload = mm - sizeof(struct ssw_wire_hdr) - sizeof(struct ssw_wire_rndv);
	if (s->max_payload > CHUNK_MAX)
		s->max_payload = CHUNK_MAX;
	uint32_t cap = window_cap(prov, ep);
	s->window = o && o->rcvbuf ? o->rcvbuf : cap;
	if (s->window > cap)
		s->window = cap;
	if (s->window < 4096)
		s->window = 4096;
	s->sndbuf = o ? o->sndbuf : 0;
	s->oobinline = o && o->oobinline;
	s->cork = o && o->cork;
	s->spin_ns = ssw_session_cfg.spin_max_ns;
	s->peer_window = peer->window < cap ? peer->window : cap;
	s->peer_caps = peer->caps;
	s->peer_pid = peer->pid;
	return s;
}

static bool rx_pending_data(struct ssw_session *s)
{
	pump(s, false);
	return s->q.len || s->rr.active || s->rw.active || (s->hv && is_stream(s->hm.h.type) && s->hm.h.type != SSW_MSG_FIN);
}

/* This process lets go of the connection; the others keep it. */
static void drop_local(struct ssw_session *s)
{
	s->p->conn->close(s->ep, SSW_CLOSE_DETACH);
	ssw_shared_free(s, s->map_size, false); /* another process still maps it */
}

void ssw_session_close(struct ssw_session *s, bool abort)
{
	if (!s)
		return;
	if (atomic_fetch_sub(&s->holders, 1) > 1) {
		drop_local(s); /* a forked process still holds it: no FIN yet */
		return;
	}
	sess_lock(s);
	/* Kernel TCP resets a connection closed with unread data. */
	if (!abort && !s->broken && rx_pending_data(s))
		abort = true;
	abort = abort || s->broken;
	if (!abort && !s->wr_shut && !s->reset) {
		/* our FIN; if the transport is full the orderly close says it */
		(void)send_msg(s, SSW_MSG_FIN, NULL, 0, NULL, 0, 0);
	}
	s->p->conn->close(s->ep, abort ? SSW_CLOSE_ABORT : SSW_CLOSE_ORDERLY);
	s->ep = NULL;
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->tx_cv);
	ssw_shared_free(s, s->map_size, true); /* the last holder: nobody else maps it */
}

void ssw_session_hold(struct ssw_session *s, int delta)
{
	atomic_fetch_add(&s->holders, delta);
}

int ssw_session_fds(struct ssw_session *s, int *fds, int max)
{
	struct pollfd p[8];
	int n = s->ep ? s->p->progress->wait_fds(s->ep, p, max < 8 ? max : 8) : 0;
	for (int i = 0; i < n; i++)
		fds[i] = p[i].fd;
	return n;
}

bool ssw_session_last_holder(struct ssw_session *s)
{
	return atomic_load(&s->holders) <= 1;
}

/* ---- send --------------------------------------------------------------- */

/* What a send reports before trying (tcp_sendmsg): <0 an error, 1 done
 * with *ok bytes, 0 go on. */
static int send_precheck(struct ssw_session *s, size_t total, ssize_t *ok)
{
	/* a peer that died holding unread data reset us: the kernel's next
	 * send after the RST fails with it.  Finding a dead peer costs a system
	 * call: at most once per tick of the coarse clock (reading it costs a
	 * few ns; the precise clock would cost a quarter of a small send) */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	uint64_t tick = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	peer_check(s, tick != s->send_tick);
	s->send_tick = tick;
	if (tcp_closed(s) || s->so_error || snd_down(s))
		return take_send_error(s);
	if (total == 0) {
		*ok = 0;
		return 1;
	}
	if (s->peer_closed) {
		/* The peer's socket is gone: these bytes are accepted and draw its
		 * reset, so the next send fails (EPIPE: we had its FIN). */
		on_reset(s);
		*ok = (ssize_t)total;
		return 1;
	}
	return 0;
}

/* Where a send's bytes come from: the caller's memory, or a producer that
 * writes them straight into the transport (sendfile's pread). */
struct tx_src {
	const struct iovec *iov;
	int iovcnt;
	ssize_t (*fill)(void *ctx, void *buf, size_t len);
	void *ctx;
};

/* Make held DATA visible (uncork, or before a sender waits: the peer must
 * see what fills the window to free it). */
static void flush_held(struct ssw_session *s)
{
	if (s->held && s->p->msg->flush)
		s->p->msg->flush(s->ep);
	s->held = 0;
}

/* One DATA message of up to `chunk` bytes at `at` of the source, written in
 * place when the provider can (held when `hold`).  Returns 0 with *got
 * (0: the producer had nothing, end of file), or -errno; a producer's error
 * comes back as SSW_FILL_ERR - errno so that it is not taken for the
 * transport's. */
#define SSW_FILL_ERR (-(1 << 20))
static int send_data(struct ssw_session *s, const struct tx_src *src, size_t at, size_t chunk, bool hold,
		     size_t *got)
{
	const struct ssw_msg_ops *mo = s->p->msg;
	struct iovec v[16];
	int k = 0;
	*got = 0;
	if (src->iov) {
		k = iov_slice(src->iov, src->iovcnt, at, chunk, v, 16);
		chunk = iov_total(v, k);
	}
	if (!mo->send_reserve || (!hold && src->iov)) {
		uint8_t *bounce = NULL;
		if (!src->iov) { /* a provider without reserve: one bounce copy */
			/* what the producer gives is gone from it (a pipe): have room first */
			if (mo->send_room && mo->send_room(s->ep) < ssw_wire_footprint(chunk))
				return -EAGAIN;
			if (!(bounce = malloc(chunk)))
				return -ENOBUFS;
			ssize_t n = src->fill(src->ctx, bounce, chunk);
			if (n <= 0) {
				free(bounce);
				return n < 0 ? SSW_FILL_ERR + (int)n : 0;
			}
			v[0] = (struct iovec){ bounce, (size_t)n };
			k = 1;
			chunk = (size_t)n;
		}
		int rc = send_msg(s, SSW_MSG_DATA, NULL, 0, v, k, chunk);
		free(bounce);
		if (rc == 0)
			*got = chunk;
		return rc;
	}
	void *buf;
	struct ssw_wire_hdr h;
	int rc = mo->send_reserve(s->ep, sizeof h + chunk, &buf);
	if (rc)
		return rc;
	uint8_t *p = (uint8_t *)buf + sizeof h;
	if (src->iov) {
		for (int i = 0; i < k; p += v[i].iov_len, i++)
			memcpy(p, v[i].iov_base, v[i].iov_len);
	} else {
		ssize_t n = src->fill(src->ctx, p, chunk);
		if (n <= 0) /* the reservation is abandoned */
			return n < 0 ? SSW_FILL_ERR + (int)n : 0;
		chunk = (size_t)n;
	}
	uint32_t credits = s->rx_unacked > UINT32_MAX ? UINT32_MAX : (uint32_t)s->rx_unacked;
	ssw_wire_hdr_set(&h, SSW_MSG_DATA, (uint32_t)chunk, credits, s->tx_seq);
	memcpy(buf, &h, sizeof h);
	rc = mo->send_commit(s->ep, sizeof h + chunk, hold);
	if (rc)
		return rc;
	s->tx_seq++;
	s->rx_unacked -= credits;
	s->credit_owed = false;
	s->st.msgs_sent++;
	s->held = hold ? s->held + ssw_wire_footprint(chunk) : 0;
	if (s->held >= HOLD_FLUSH)
		flush_held(s); /* a full segment's worth: the kernel sends it too */
	*got = chunk;
	return 0;
}

/* Inline path: DATA messages within credits. */
static ssize_t send_src(struct ssw_session *s, const struct tx_src *src, size_t total, size_t at, bool nonblock,
			uint64_t dl, bool hold)
{
	size_t sent = at;
	int fill_err = 0;
	bool ended = false;
	size_t cap = s->max_payload;
	if (src->fill && s->p->msg->send_reserve) {
		size_t mm = s->p->msg->max_msg(s->ep) - sizeof(struct ssw_wire_hdr);
		cap = mm < FILL_MAX ? mm : FILL_MAX;
	}
	size_t cap0 = cap;
	while (sent < total) {
		uint64_t lim = tx_limit(s);
		uint64_t room = lim > s->tx_inflight ? lim - s->tx_inflight : 0;
		size_t chunk = total - sent;
		if (chunk > cap)
			chunk = cap;
		while (chunk > 1 && ssw_wire_footprint(chunk) > room)
			chunk = room > 32 ? room - 32 : 1;
		if (ssw_wire_footprint(chunk) <= room) {
			size_t got;
			int rc = send_data(s, src, sent, chunk, hold, &got);
			if (rc == 0 && got) {
				cap = src->fill && s->p->msg->send_reserve ? cap0 : s->max_payload;
				s->tx_inflight += ssw_wire_footprint(got);
				s->st.bytes_sent += got;
				sent += got;
				continue;
			}
			if (rc == 0 || rc <= SSW_FILL_ERR) { /* the producer ended, or failed */
				fill_err = rc ? rc - SSW_FILL_ERR : 0;
				ended = true;
				break;
			}
			if (rc == -EAGAIN && chunk > 4096) {
				/* the transport has less room than the credits (POLLOUT
				 * says writable from about 32 KiB, maybe split by the
				 * ring's end): a smaller message makes progress */
				cap = chunk / 2;
				continue;
			}
			if (rc != -EAGAIN) {
				if (rc == -EPIPE) { /* the peer died after reading everything: as a close */
					s->peer_closed = s->fin_rcvd = true;
					on_reset(s);
					if (sent == at)
						return (ssize_t)(total - at);
				} else {
					on_reset(s);
				}
				break;
			}
		}
		/* No room: the peer must see what we hold to free it; credits are
		 * maybe queued behind unread data. */
		flush_held(s);
		s->stage_nomem = false;
		int pr = pump(s, true);
		if (pr > 0)
			continue;
		if (pr < 0 || s->reset || s->peer_closed)
			break;
		if (s->stage_nomem && sent == at)
			return -ENOBUFS; /* credits sit behind data we cannot stage */
		if (nonblock) {
			peer_check(s, true);
			break;
		}
		int w = wait_peer(s, dl);
		if (w < 0) {
			if (sent > at)
				break;
			return w == -ETIMEDOUT ? -EAGAIN : w;
		}
	}
	if (sent == at && total > at) {
		if (ended)
			return fill_err; /* 0: the producer had nothing (end of file) */
		if (tcp_closed(s) || s->so_error)
			return take_send_error(s);
		if (s->peer_closed) {
			on_reset(s);
			return (ssize_t)(total - at);
		}
		return -EAGAIN;
	}
	return (ssize_t)(sent - at);
}

static ssize_t send_inline(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t total, size_t at,
			   bool nonblock, uint64_t dl, bool hold)
{
	struct tx_src src = { .iov = iov, .iovcnt = iovcnt };
	return send_src(s, &src, total, at, nonblock, dl, hold);
}

/* Wait for a rendezvous reply (DONE or SINK). */
static int wait_rndv(struct ssw_session *s, bool want_sink)
{
	while (!(want_sink ? s->tx_sink_have : s->tx_rndv_done)) {
		int pr = pump(s, true);
		if (s->reset || s->peer_closed) {
			on_reset(s);
			return take_send_error(s);
		}
		if (pr > 0)
			continue;
		if (pr < 0)
			return pr;
		int w = wait_peer(s, 0);
		if (w == -EINTR)
			continue; /* the peer may be reading our buffer: finish first */
	}
	return 0;
}

/* Large send by RDMA read: the peer reads our buffer, then says DONE. */
static ssize_t send_rndv_read(struct ssw_session *s, const void *buf, size_t len)
{
	struct ssw_wire_rndv r = { .id = ++s->next_id, .len = len };
	if (ssw_session_cfg.fault_regfail ||
	    s->p->rdma->register_rdma_memory(s->ep, (void *)buf, len, SSW_CAP_RDMA_READ, &r.desc) < 0)
		return -ENOBUFS;
	s->tx_rndv_id = r.id;
	s->tx_rndv_done = false;
	int rc = send_ctl(s, SSW_MSG_RNDV_READ, &r, sizeof r);
	if (rc == 0)
		rc = wait_rndv(s, false);
	s->p->rdma->deregister_rdma_memory(s->ep, &r.desc);
	s->tx_rndv_id = 0;
	pthread_cond_broadcast(&s->tx_cv);
	if (rc < 0)
		return rc;
	if (s->tx_rndv_status == 0 && s->tx_rndv_bytes == len) {
		s->st.rndv_read++;
		s->st.bytes_sent += len;
		return (ssize_t)len;
	}
	if (s->tx_rndv_status == -EPERM && s->tx_rndv_bytes <= len) {
		/* The peer cannot read us: it took tx_rndv_bytes, the rest goes inline. */
		s->peer_caps &= ~(uint32_t)SSW_CAP_RDMA_READ;
		s->st.rndv_fallback++;
		s->st.bytes_sent += s->tx_rndv_bytes;
		return (ssize_t)s->tx_rndv_bytes;
	}
	set_broken(s, "bad RNDV_DONE");
	return -ECONNRESET;
}

/* Large send by RDMA write: the peer offers sinks, we write and say WRITE_DONE. */
static ssize_t send_rndv_write(struct ssw_session *s, const void *buf, size_t len)
{
	struct ssw_wire_done req = { .id = ++s->next_id, .len = len };
	if (ssw_session_cfg.fault_regfail)
		return -ENOBUFS;
	s->tx_rndv_id = req.id;
	s->tx_sink_have = false;
	int rc = send_ctl(s, SSW_MSG_WRITE_REQ, &req, sizeof req);
	size_t done = 0;
	while (rc == 0 && done < len) {
		rc = wait_rndv(s, true);
		if (rc < 0)
			break;
		s->tx_sink_have = false;
		uint64_t n = s->tx_sink.len < len - done ? s->tx_sink.len : len - done;
		struct iovec v = { (uint8_t *)buf + done, n };
		int w = s->p->rdma->rdma_write(s->ep, &v, 1, &s->tx_sink.desc, 0, n, NULL);
		struct ssw_wire_done wd = { .id = req.id, .len = w == 0 ? n : 0, .status = w == 0 ? 0 : -EPERM };
		rc = send_ctl(s, SSW_MSG_WRITE_DONE, &wd, sizeof wd);
		if (w < 0) {
			if (w != -EPERM) {
				set_broken(s, "rdma write to peer failed");
				rc = -ECONNRESET;
			}
			s->peer_caps &= ~(uint32_t)SSW_CAP_RDMA_WRITE;
			s->st.rndv_fallback++;
			break;
		}
		done += n;
	}
	s->tx_rndv_id = 0;
	pthread_cond_broadcast(&s->tx_cv);
	if (rc < 0 && !done)
		return rc;
	if (done == len)
		s->st.rndv_write++;
	s->st.bytes_sent += done;
	return (ssize_t)done;
}

static ssize_t send_oob(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t total, bool nonblock,
			uint64_t dl)
{
	uint8_t last;
	size_t body = total - 1;
	struct iovec v[16];
	int k = iov_slice(iov, iovcnt, body, 1, v, 16);
	if (k != 1)
		return -EINVAL;
	last = *(uint8_t *)v[0].iov_base;
	if (body) {
		ssize_t r = send_inline(s, iov, iovcnt, body, 0, nonblock, dl, false);
		if (r < 0 || (size_t)r < body)
			return r;
	}
	for (;;) {
		uint64_t fp = ssw_wire_footprint(1);
		if (s->tx_inflight + fp <= tx_limit(s)) {
			struct iovec b = { &last, 1 };
			int rc = send_msg(s, SSW_MSG_OOB, NULL, 0, &b, 1, 1);
			if (rc == 0) {
				if (s->p->progress->note) /* SIGURG to the reader's owner */
					s->p->progress->note(s->ep, SSW_NOTE_URG, 0);
				s->tx_inflight += fp;
				s->st.bytes_sent++;
				return (ssize_t)total;
			}
			if (rc != -EAGAIN)
				return body ? (ssize_t)body : rc;
		}
		if (pump(s, true) > 0)
			continue;
		if (nonblock)
			return body ? (ssize_t)body : -EAGAIN;
		int w = wait_peer(s, dl);
		if (w < 0)
			return body ? (ssize_t)body : (w == -ETIMEDOUT ? -EAGAIN : w);
	}
}

/* Start of every send: takes the lock (held on return), then as
 * send_precheck. */
static int send_enter(struct ssw_session *s, size_t total, ssize_t *ok)
{
	sess_lock(s);
	/* Another thread's rendezvous send is in progress (it sleeps without
	 * the lock): our bytes go after all of its bytes, not between. */
	while (s->tx_rndv_id && !s->reset)
		sess_cond_wait(s);
	if (s->p->progress->rx_ready(s->ep))
		pump(s, false);
	return send_precheck(s, total, ok);
}

ssize_t ssw_session_send(struct ssw_session *s, const struct iovec *iov, int iovcnt, int flags, bool nonblock,
			 int timeout_ms)
{
	size_t total = iov_total(iov, iovcnt);
	ssize_t ok = 0, ret;
	nonblock = nonblock || (flags & MSG_DONTWAIT);
	uint64_t dl = deadline_of(timeout_ms);

	int pre = send_enter(s, total, &ok);
	if (pre) {
		pthread_mutex_unlock(&s->lock);
		return pre > 0 ? ok : pre;
	}
	if (total == 0) {
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	if (flags & MSG_OOB) {
		ret = send_oob(s, iov, iovcnt, total, nonblock, dl);
		pthread_mutex_unlock(&s->lock);
		return ret;
	}
	/* Rendezvous only for blocking sends without a timeout: the call owns the
	 * buffer until the peer is done with it, as a kernel send would block. */
	int mode = ssw_session_cfg.rdma_mode;
	bool big = !nonblock && timeout_ms <= 0 && mode != SSW_RDMA_NONE;
	bool hold = s->cork || (flags & MSG_MORE);
	size_t sent = 0;
	ret = 0;
	for (int i = 0; i < iovcnt && ret >= 0; i++) {
		const uint8_t *b = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		if (big && len >= ssw_session_cfg.rndv_threshold &&
		    (!ssw_session_cfg.rndv_max || len <= ssw_session_cfg.rndv_max)) {
			bool rd = (s->peer_caps & SSW_CAP_RDMA_READ) && mode != SSW_RDMA_WRITE_ONLY;
			bool wr = (s->p->conn->ep_caps(s->ep) & SSW_CAP_RDMA_WRITE) && (s->peer_caps & SSW_CAP_RDMA_WRITE) &&
				  mode != SSW_RDMA_READ_ONLY;
			if (rd || wr) {
				flush_held(s);
				ssize_t r = rd ? send_rndv_read(s, b, len) : send_rndv_write(s, b, len);
				if (r < 0) {
					ret = r;
					break;
				}
				sent += (size_t)r;
				if ((size_t)r < len) {
					struct iovec rest = { (uint8_t *)b + r, len - (size_t)r };
					ssize_t q = send_inline(s, &rest, 1, rest.iov_len, 0, nonblock, dl, hold);
					if (q < 0) {
						ret = q;
						break;
					}
					sent += (size_t)q;
					if ((size_t)q < rest.iov_len)
						break;
				}
				continue;
			}
		}
		struct iovec one = { (void *)b, len };
		ssize_t r = send_inline(s, &one, 1, len, 0, nonblock, dl, hold);
		if (r < 0) {
			ret = r;
			break;
		}
		sent += (size_t)r;
		if ((size_t)r < len)
			break;
	}
	pthread_mutex_unlock(&s->lock);
	if (sent)
		return (ssize_t)sent;
	return ret;
}

ssize_t ssw_session_send_fill(struct ssw_session *s, size_t count, ssize_t (*fill)(void *ctx, void *buf, size_t len),
			      void *ctx, int flags, bool nonblock, int timeout_ms)
{
	struct tx_src src = { .fill = fill, .ctx = ctx };
	ssize_t ok = 0;
	nonblock = nonblock || (flags & MSG_DONTWAIT);
	uint64_t dl = deadline_of(timeout_ms);

	int pre = send_enter(s, count, &ok);
	ssize_t r = pre > 0 ? ok : pre;
	if (!pre)
		r = send_src(s, &src, count, 0, nonblock, dl, s->cork || (flags & MSG_MORE));
	pthread_mutex_unlock(&s->lock);
	return r;
}

void ssw_session_set_cork(struct ssw_session *s, bool on)
{
	sess_lock(s);
	s->cork = on;
	if (!on)
		flush_held(s);
	pthread_mutex_unlock(&s->lock);
}

bool ssw_session_cork(struct ssw_session *s)
{
	return __atomic_load_n(&s->cork, __ATOMIC_RELAXED);
}

void ssw_session_flush(struct ssw_session *s)
{
	sess_lock(s);
	flush_held(s);
	pthread_mutex_unlock(&s->lock);
}

/* ---- receive ------------------------------------------------------------ */

/* Serve the peer's WRITE_REQ into the application's buffer. */
static ssize_t recv_by_write(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want)
{
	struct iovec v[1];
	if (iov_slice(iov, iovcnt, 0, want, v, 1) != 1)
		return -EINVAL;
	uint64_t n = v[0].iov_len < s->rw.total - s->rw.done ? v[0].iov_len : s->rw.total - s->rw.done;
	struct ssw_wire_rndv sk = { .id = s->rw.id, .len = n };
	if (ssw_session_cfg.fault_regfail ||
	    s->p->rdma->register_rdma_memory(s->ep, v[0].iov_base, n, SSW_CAP_RDMA_WRITE, &sk.desc) < 0)
		return -ENOBUFS;
	s->rw.sink_out = true;
	s->rw.sink_to_q = false;
	s->rw.sink_len = n;
	s->rw.wdone = false;
	int rc = send_ctl(s, SSW_MSG_SINK, &sk, sizeof sk);
	while (rc == 0 && s->rw.sink_out) {
		int pr = pump(s, false);
		if (s->broken || pr < 0 || s->reset || s->peer_closed) {
			rc = -ECONNRESET; /* the writer is gone: its bytes never come */
			break;
		}
		if (pr == 0 && s->rw.sink_out && wait_peer(s, 0) == -EINTR)
			continue; /* the peer is writing into this buffer: finish first */
	}
	s->p->rdma->deregister_rdma_memory(s->ep, &sk.desc);
	if (rc < 0)
		return rc;
	if (!s->rw.wdone)
		return 0; /* writer fell back to inline data: caller goes on */
	uint64_t got = s->rw.wdone_len;
	s->rw.wdone = false;
	if (s->rw.done == s->rw.total)
		s->rw.active = false;
	s->rx_pos += got;
	s->st.bytes_received += got;
	return (ssize_t)got;
}

/* The application consumed n bytes at the front of the queue. */
static void q_take(struct ssw_session *s, size_t n)
{
	s->q.off += n;
	s->q.len -= n;
	s->rx_pos += n;
	if (s->mark_valid && s->rx_pos > s->mark)
		s->mark_valid = s->oob_have = false; /* read past the mark: urgent state ends */
	/* rendezvous bytes in the queue never took credits */
	uint64_t c = n < s->q_owed ? n : s->q_owed;
	s->q_owed -= c;
	if (c)
		return_credits(s, c);
}

/* Deliver what is available now.  Returns bytes (0: nothing available),
 * or -errno. */
static ssize_t deliver(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want, int flags)
{
	bool peek = flags & MSG_PEEK;
	size_t copied = 0, qpeek = 0;
	while (copied < want) {
		size_t lim = want - copied;
		uint64_t pos = s->rx_pos + (peek ? qpeek : 0);
		if (s->mark_valid) {
			if (pos == s->mark && copied)
				break; /* a read never crosses the urgent mark */
			if (pos == s->mark && !s->oobinline && s->q.len > qpeek) {
				/* the urgent byte is not part of the normal stream */
				if (peek) {
					qpeek++;
				} else {
					q_take(s, 1);
					s->mark_valid = s->oob_have = false;
				}
				continue;
			}
			if (pos < s->mark && s->mark - pos < lim)
				lim = (size_t)(s->mark - pos);
		}
		if (s->q.len > qpeek) {
			size_t n = s->q.len - qpeek < lim ? s->q.len - qpeek : lim;
			iov_put(iov, iovcnt, copied, s->q.buf + s->q.off + qpeek, n);
			copied += n;
			if (peek)
				qpeek += n;
			else
				q_take(s, n);
			continue;
		}
		if (s->rr.active) {
			if (peek)
				break;
			uint64_t n = s->rr.total - s->rr.done < lim ? s->rr.total - s->rr.done : lim;
			struct iovec v[16];
			int k = iov_slice(iov, iovcnt, copied, n, v, 16);
			n = iov_total(v, k);
			int rc = s->p->rdma->rdma_read(s->ep, v, k, &s->rr.desc, s->rr.done, n, NULL);
			if (rc == -EPERM) {
				s->rr.active = false;
				s->st.rndv_fallback++;
				send_rndv_done(s, s->rr.id, s->rr.done, -EPERM);
				continue;
			}
			if (rc < 0) {
				set_broken(s, "rdma read of peer buffer failed");
				break;
			}
			s->rr.done += n;
			s->rx_pos += n;
			s->st.bytes_received += n;
			copied += n;
			if (s->rr.done == s->rr.total) {
				s->rr.active = false;
				send_rndv_done(s, s->rr.id, s->rr.total, 0);
			}
			continue;
		}
		if (s->rw.active) {
			if (peek || copied)
				break;
			if (s->rw.sink_out) { /* a staging sink is outstanding: let it land */
				if (pump(s, false) <= 0)
					break;
				continue;
			}
			ssize_t r = recv_by_write(s, iov, iovcnt, lim);
			if (r != 0)
				return r;
			continue;
		}
		int h = head(s);
		if (h <= 0)
			break;
		if (!is_stream(s->hm.h.type)) {
			handle_control(s);
			continue;
		}
		if (s->hm.h.type == SSW_MSG_DATA) {
			size_t avail = s->hm.h.len - s->cur_off;
			size_t n = avail < lim ? avail : lim;
			iov_put(iov, iovcnt, copied, s->hm.payload + s->cur_off, n);
			copied += n;
			if (peek)
				break; /* peeking stops at the first message still in the transport */
			s->cur_off += n;
			s->rx_pos += n;
			s->st.bytes_received += n;
			if (s->cur_off == s->hm.h.len) {
				uint32_t fp = ssw_wire_footprint(s->hm.h.len);
				consume(s);
				return_credits(s, fp);
			}
			continue;
		}
		if (s->hm.h.type == SSW_MSG_FIN && copied)
			break;
		bool fin = s->hm.h.type == SSW_MSG_FIN;
		stage_head(s); /* OOB, FIN, rendezvous offers: record and go on */
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

	sess_lock(s);
	if (flags & MSG_OOB) {
		pump(s, true);
		if (s->oobinline || !s->oob_have) {
			got = -EINVAL;
		} else {
			if (want)
				iov_put(iov, iovcnt, 0, &s->oob_byte, 1);
			if (!(flags & MSG_PEEK))
				s->oob_have = false;
			got = want ? 1 : 0;
		}
		pthread_mutex_unlock(&s->lock);
		return got;
	}
	size_t total = 0;
	bool probed = false;
	for (;;) {
		if (want == 0) { /* tcp_recvmsg with len 0: 0 once data is there */
			if (rx_pending_data(s))
				break;
		} else {
			struct iovec v[16];
			int k = iov_slice(iov, iovcnt, total, want - total, v, 16);
			ssize_t n = deliver(s, v, k, want - total, flags);
			if (n < 0 && !s->reset) {
				got = n;
				break;
			}
			if (n > 0)
				total += (size_t)n;
			if (total == want || (total && !(flags & MSG_WAITALL)) || (total && (flags & MSG_PEEK)))
				break;
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
				s->probe_ns = 0;
				peer_check(s, true);
				continue;
			}
			if (!total)
				got = -EAGAIN;
			break;
		}
		int w = wait_peer(s, dl);
		if (w < 0) {
			if (!total)
				got = w == -ETIMEDOUT ? -EAGAIN : w;
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return total ? (ssize_t)total : got;
}

/* ---- state queries ------------------------------------------------------ */

int ssw_session_shutdown(struct ssw_session *s, int how)
{
	sess_lock(s);
	if (s->p->progress->rx_ready(s->ep))
		pump(s, false);
	peer_check(s, false);
	/* inet_shutdown: ENOTCONN once closed, but the bits are still set */
	int rc = tcp_closed(s) ? -ENOTCONN : 0;
	if (how == SHUT_RD || how == SHUT_RDWR)
		s->rd_shut = true;
	if ((how == SHUT_WR || how == SHUT_RDWR) && !s->wr_shut) {
		s->wr_shut = true;
		if (!s->reset && !s->peer_closed) {
			(void)send_ctl(s, SSW_MSG_FIN, NULL, 0);
			if (s->p->progress->note)
				s->p->progress->note(s->ep, SSW_NOTE_FIN, 0);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* The transport takes a useful amount now (the window may be larger than
 * the transport; then the peer's CREDIT messages wake a waiter as it reads). */
static bool tx_room_ok(struct ssw_session *s)
{
	if (!s->p->msg->send_room)
		return true;
	size_t want = ssw_wire_footprint(s->max_payload) + 64;
	uint64_t r = ring_window(s->p, s->ep) / 8;
	if (want > r)
		want = (size_t)r;
	return s->p->msg->send_room(s->ep) >= want;
}

/* tcp_poll's answer. */
static short poll_bits(struct ssw_session *s)
{
	short ev = 0;
	pump(s, false);
	uint64_t l0 = tx_limit(s);
	if (!s->wr_shut && (!(l0 > s->tx_inflight && l0 - s->tx_inflight >= l0 / 8) || !tx_room_ok(s)))
		/* a writer waiting for POLLOUT: the credits may sit behind unread
		 * data, and the peer (maybe waiting on us the same way) gets its
		 * transport back when we take its data into our queue, as a
		 * kernel receive buffer would */
		pump(s, true);
	peer_check(s, true);
	size_t q = s->q.len;
	if (q && s->mark_valid && !s->oobinline && s->rx_pos == s->mark)
		q--; /* a lone urgent byte does not make the socket readable */
	bool readable = q || s->rr.active || s->rw.active || (s->hv && is_stream(s->hm.h.type));
	if ((rcv_down(s) && snd_down(s)) || tcp_closed(s))
		ev |= POLLHUP;
	if (rcv_down(s))
		ev |= POLLIN | POLLRDNORM | POLLRDHUP;
	if (readable)
		ev |= POLLIN | POLLRDNORM;
	uint64_t lim = tx_limit(s);
	if (snd_down(s) || s->peer_closed || (lim > s->tx_inflight && lim - s->tx_inflight >= lim / 8 && tx_room_ok(s)))
		ev |= POLLOUT | POLLWRNORM;
	if (s->oob_have || s->peer_urg != s->urg_seen)
		ev |= POLLPRI;
	if (s->so_error)
		ev |= POLLERR;
	return ev;
}

short ssw_session_poll(struct ssw_session *s)
{
	sess_lock(s);
	short ev = poll_bits(s);
	pthread_mutex_unlock(&s->lock);
	return ev;
}

int ssw_session_sleep_prepare(struct ssw_session *s, struct pollfd *pfd, int n, int *nout)
{
	int rc = 0;
	sess_lock(s);
	/* credits the transport had no room for: the peer may wait for them
	 * while the application only polls (as wait_peer: retry, then nap) */
	bool owed = s->credit_owed && send_msg(s, SSW_MSG_CREDIT, NULL, 0, NULL, 0, 0) < 0;
	int armed = s->p->progress->arm(s->ep);
	if (armed == -EAGAIN) {
		rc = -EAGAIN;
	} else {
		*nout = s->p->progress->wait_fds(s->ep, pfd, n);
		/* naps too while the peer holds corked data (ours when its hold ends) */
		rc = atomic_fetch_add(&s->sleepers, 1) > 0 || owed || armed > 0 ? 1 : 0;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void ssw_session_sleep_done(struct ssw_session *s)
{
	atomic_fetch_sub(&s->sleepers, 1);
	sess_lock(s);
	woke(s);
	pthread_mutex_unlock(&s->lock);
}

int ssw_session_watch(struct ssw_session *s)
{
	sess_lock(s);
	int rc = s->ep ? s->p->progress->arm(s->ep) : -EAGAIN;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

void ssw_session_unwatch(struct ssw_session *s)
{
	sess_lock(s);
	if (s->ep)
		woke(s);
	pthread_mutex_unlock(&s->lock);
}

bool ssw_session_rx_ready(struct ssw_session *s)
{
	struct ssw_ep *ep = __atomic_load_n(&s->ep, __ATOMIC_ACQUIRE);
	return ep && s->p->progress->rx_ready(ep);
}

int ssw_session_fionread(struct ssw_session *s)
{
	sess_lock(s);
	pump(s, true);
	uint64_t n = s->q.len;
	if (s->rr.active)
		n += s->rr.total - s->rr.done;
	if (s->hv && s->hm.h.type == SSW_MSG_DATA)
		n += s->hm.h.len - s->cur_off;
	pthread_mutex_unlock(&s->lock);
	return n > INT_MAX ? INT_MAX : (int)n;
}

int ssw_session_atmark(struct ssw_session *s)
{
	sess_lock(s);
	pump(s, true);
	int r = s->mark_valid && s->rx_pos == s->mark;
	pthread_mutex_unlock(&s->lock);
	return r;
}

int ssw_session_take_error(struct ssw_session *s)
{
	sess_lock(s);
	if (s->p->progress->rx_ready(s->ep))
		pump(s, false);
	peer_check(s, true);
	int e = s->so_error;
	s->so_error = 0;
	pthread_mutex_unlock(&s->lock);
	return e;
}

void ssw_session_set_opts(struct ssw_session *s, const struct ssw_session_opts *o)
{
	sess_lock(s);
	s->oobinline = o->oobinline;
	s->sndbuf = o->sndbuf;
	if (o->rcvbuf) {
		uint64_t wmax = window_cap(s->p, s->ep);
		uint32_t w = o->rcvbuf > wmax ? (uint32_t)wmax : o->rcvbuf;
		if (w < 4096)
			w = 4096;
		if (w != s->window) {
			/* the peer applies the new window to what it has in flight */
			s->window = w;
			struct ssw_wire_window ww = { w };
			(void)send_msg(s, SSW_MSG_WINDOW, &ww, sizeof ww, NULL, 0, 0);
		}
	}
	pthread_mutex_unlock(&s->lock);
}

void ssw_session_get_stats(struct ssw_session *s, struct ssw_session_stats *st)
{
	sess_lock(s);
	*st = s->st;
	st->tx_inflight = s->tx_inflight;
	st->tx_limit = tx_limit(s);
	st->rx_window = s->window;
	st->tcp_state = tcp_closed(s) ? TCP_CLOSE : s->wr_shut ? TCP_FIN_WAIT2 : s->fin_rcvd ? TCP_CLOSE_WAIT : TCP_ESTABLISHED;
	pthread_mutex_unlock(&s->lock);
}

int ssw_session_tcp_state(struct ssw_session *s)
{
	sess_lock(s);
	if (s->p->progress->rx_ready(s->ep))
		pump(s, false);
	peer_check(s, false);
	int st = TCP_ESTABLISHED;
	if (tcp_closed(s))
		st = TCP_CLOSE;
	else if (s->wr_shut)
		st = TCP_FIN_WAIT2; /* our FIN was acknowledged at once */
	else if (s->fin_rcvd)
		st = TCP_CLOSE_WAIT;
	pthread_mutex_unlock(&s->lock);
	return st;
}

void ssw_session_set_owner(struct ssw_session *s, int owner)
{
	sess_lock(s);
	if (s->p->progress->note && s->ep)
		s->p->progress->note(s->ep, SSW_NOTE_OWNER, owner);
	pthread_mutex_unlock(&s->lock);
}

int ssw_session_announce(struct ssw_session *s, const struct ssw_session_opts *o)
{
	struct ssw_wire_init me;
	ssw_session_make_init(o, &me);
	if (me.window > s->window)
		me.window = s->window;
	/* The connector assumed we are like it (its own capabilities, the
	 * largest window): when that is so there is nothing to say, and the
	 * message (and a wake-up of the connector) is saved. */
	if (me.caps == s->peer_caps && me.window >= window_cap(s->p, s->ep))
		return 0;
	sess_lock(s);
	int rc = send_ctl(s, SSW_MSG_INIT, &me, sizeof me);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

bool ssw_session_peer_init_seen(struct ssw_session *s)
{
	return __atomic_load_n(&s->init_rcvd, __ATOMIC_ACQUIRE);
}
