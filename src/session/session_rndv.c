/* session_rndv.c — rendezvous for large sends: the peer reads our buffer (RNDV_READ) or writes into sinks we offer (WRITE_REQ/SINK). */
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

/* Expose [buf, buf+len) to the peer (WSPRegisterRdmaMemory), counted. */
static int expose(struct ssw_session *s, void *buf, size_t len, uint32_t access, struct ssw_rdma_desc *d)
{
	if (ssw_session_cfg.fault_regfail || s->p->rdma->register_rdma_memory(s->loc->ep, buf, len, access, d) < 0)
		return -ENOBUFS;
	s->st.rdma_regs++;
	return 0;
}

int sess_send_rndv_done(struct ssw_session *s, uint64_t id, uint64_t len, int status)
{
	struct ssw_wire_done d = { .id = id, .len = len, .status = status };
	return sess_send_ctl(s, SSW_MSG_RNDV_DONE, &d, sizeof d);
}

/* Is our own rendezvous on?  A receiver whose rendezvous is off lets
 * nobody copy into or out of its process: it refuses the peer's RNDV_READ
 * and WRITE_REQ, and the bytes come through the ring. */
bool sess_rndv_enabled(void)
{
	return ssw_session_cfg.rdma_mode != SSW_RDMA_NONE && ssw_session_cfg.rndv_threshold != SSW_RNDV_OFF;
}

/* Read the next n bytes of the peer's RNDV_READ into v, and tell the peer
 * when it is all read.  Returns n, 0 when the transport refused one-sided
 * access (the peer then sends the rest inline), or -1 when the connection
 * broke.  Another thread finds rr busy meanwhile and waits. */
static ssize_t rr_read(struct ssw_session *s, const struct iovec *v, int k, uint64_t n)
{
	s->rr.busy = true;
	int rc = sess_rndv_enabled() ? sess_rma(s, false, v, k, &s->rr.desc, s->rr.done, n) : -EPERM;
	s->rr.busy = false;
	if (rc == -EPERM) {
		s->rr.active = false;
		s->st.rndv_fallback++;
		sess_send_rndv_done(s, s->rr.id, s->rr.done, -EPERM);
		return 0;
	}
	if (rc < 0) {
		sess_set_broken(s, rc == -EINVAL ? "peer sent a bad rendezvous descriptor"
						 : "rdma read of peer buffer failed");
		return -1;
	}
	s->rr.done += n;
	s->st.bytes_received += n;
	if (s->rr.done == s->rr.total) {
		s->rr.active = false;
		sess_send_rndv_done(s, s->rr.id, s->rr.total, 0);
	}
	return (ssize_t)n;
}

/* Pull the rest of the peer's RNDV_READ into the queue. */
int sess_stage_rr(struct ssw_session *s)
{
	uint64_t n = s->rr.total - s->rr.done;
	if (n > STAGE_RNDV_MAX || sess_q_reserve(s, n) < 0)
		return 0;
	/* the tail of the queue: nothing else writes there while rr is busy */
	struct iovec v = { s->q.buf + s->q.off + s->q.len, n };
	ssize_t r = rr_read(s, &v, 1, n);
	if (r < 0)
		return 0;
	if (r > 0)
		s->q.len += n;
	return 1;
}

/* Refuse the peer's WRITE_REQ: a sink of no bytes (the writer answers
 * WRITE_DONE -EPERM and sends the rest inline). */
static int rw_refuse(struct ssw_session *s)
{
	struct ssw_wire_rndv sk = { .id = s->rw.id, .len = 0 };
	s->rw.sink_out = true;
	s->rw.sink_to_q = true;
	s->rw.sink_len = 0;
	return sess_send_ctl(s, SSW_MSG_SINK, &sk, sizeof sk) == 0;
}

/* Offer the queue as the sink of the peer's WRITE_REQ. */
int sess_stage_rw(struct ssw_session *s)
{
	uint64_t n = s->rw.total - s->rw.done, room = s->q.cap - s->q.len;
	/* all written already, into the sink of a receiver that has not
	 * collected it yet (it waits unlocked): nothing left to offer */
	if (n == 0 || s->rw.wdone)
		return 0;
	if (!sess_rndv_enabled())
		return rw_refuse(s);
	if (n > room)
		n = room;
	if (n < 4096 && n < s->rw.total - s->rw.done)
		return 0;
	if (sess_q_reserve(s, n) < 0)
		return 0;
	struct ssw_wire_rndv sk = { .id = s->rw.id, .len = n };
	if (expose(s, s->q.buf + s->q.off + s->q.len, n, SSW_CAP_RDMA_WRITE, &sk.desc) < 0)
		return 0;
	s->rw.sink_out = true;
	s->rw.sink_to_q = true;
	s->rw.sink_len = n;
	return sess_send_ctl(s, SSW_MSG_SINK, &sk, sizeof sk) == 0;
}

/* Wait for a rendezvous reply (DONE or SINK). */
static int wait_rndv(struct ssw_session *s, bool want_sink)
{
	while (!(want_sink ? s->txr.sink_have : s->txr.done)) {
		int pr = sess_pump(s, true);
		if (s->reset || s->peer_closed) {
			sess_on_reset(s);
			return sess_take_send_error(s);
		}
		if (pr > 0)
			continue;
		if (pr < 0)
			return pr;
		int w = sess_wait_peer(s, 0);
		if (w == -EINTR)
			continue; /* the peer may be reading our buffer: finish first */
	}
	return 0;
}

/* Large send by RDMA read: the peer reads our buffer, then says DONE. */
static ssize_t send_rndv_read(struct ssw_session *s, const void *buf, size_t len)
{
	struct ssw_wire_rndv r = { .id = ++s->txr.next_id, .len = len };
	if (expose(s, (void *)buf, len, SSW_CAP_RDMA_READ, &r.desc) < 0)
		return -ENOBUFS;
	s->txr.id = r.id;
	s->txr.done = false;
	int rc = sess_send_ctl(s, SSW_MSG_RNDV_READ, &r, sizeof r);
	if (rc == 0)
		rc = wait_rndv(s, false);
	s->p->rdma->deregister_rdma_memory(s->loc->ep, &r.desc);
	s->txr.id = 0;
	pthread_cond_broadcast(&s->tx_cv);
	if (rc < 0)
		return rc;
	if (s->txr.status == 0 && s->txr.bytes == len) {
		s->st.rndv_read++;
		s->st.bytes_sent += len;
		return (ssize_t)len;
	}
	if (s->txr.status == -EPERM && s->txr.bytes <= len) {
		/* The peer cannot read us: it took tx_rndv_bytes, the rest goes inline. */
		s->peer_caps &= ~(uint32_t)SSW_CAP_RDMA_READ;
		s->st.rndv_fallback++;
		s->st.bytes_sent += s->txr.bytes;
		return (ssize_t)s->txr.bytes;
	}
	sess_set_broken(s, "bad RNDV_DONE");
	return -ECONNRESET;
}

/* Large send by RDMA write: the peer offers sinks, we write and say WRITE_DONE. */
static ssize_t send_rndv_write(struct ssw_session *s, const void *buf, size_t len)
{
	struct ssw_wire_done req = { .id = ++s->txr.next_id, .len = len };
	if (ssw_session_cfg.fault_regfail)
		return -ENOBUFS;
	s->txr.id = req.id;
	s->txr.sink_have = false;
	int rc = sess_send_ctl(s, SSW_MSG_WRITE_REQ, &req, sizeof req);
	size_t done = 0;
	while (rc == 0 && done < len) {
		rc = wait_rndv(s, true);
		if (rc < 0)
			break;
		s->txr.sink_have = false;
		uint64_t n = s->txr.sink.len < len - done ? s->txr.sink.len : len - done;
		struct iovec v = { (uint8_t *)buf + done, n };
		/* a sink of no bytes: the peer refuses (its rendezvous is off) */
		int w = n ? sess_rma(s, true, &v, 1, &s->txr.sink.desc, 0, n) : -EPERM;
		struct ssw_wire_done wd = { .id = req.id, .len = w == 0 ? n : 0, .status = w == 0 ? 0 : -EPERM };
		rc = sess_send_ctl(s, SSW_MSG_WRITE_DONE, &wd, sizeof wd);
		if (w < 0) {
			if (w != -EPERM) {
				sess_set_broken(s, w == -EINVAL ? "peer sent a bad sink descriptor" : "rdma write to peer failed");
				rc = -ECONNRESET;
			}
			s->peer_caps &= ~(uint32_t)SSW_CAP_RDMA_WRITE;
			s->st.rndv_fallback++;
			break;
		}
		done += n;
	}
	s->txr.id = 0;
	pthread_cond_broadcast(&s->tx_cv);
	if (rc < 0 && !done)
		return rc;
	if (done == len)
		s->st.rndv_write++;
	s->st.bytes_sent += done;
	return (ssize_t)done;
}

/* Serve the peer's WRITE_REQ into the application's buffer. */
ssize_t sess_recv_by_write(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want)
{
	struct iovec v[1];
	if (sess_iov_slice(iov, iovcnt, 0, want, v, 1) != 1)
		return -EINVAL;
	uint64_t n = v[0].iov_len < s->rw.total - s->rw.done ? v[0].iov_len : s->rw.total - s->rw.done;
	struct ssw_wire_rndv sk = { .id = s->rw.id, .len = n };
	int rc;
	s->rw.wdone = false;
	/* refused: the writer answers WRITE_DONE -EPERM and goes on inline;
	 * the caller waits for those bytes as for any others */
	if (!sess_rndv_enabled())
		return rw_refuse(s) ? 0 : -ECONNRESET;
	if (expose(s, v[0].iov_base, n, SSW_CAP_RDMA_WRITE, &sk.desc) < 0)
		return -ENOBUFS;
	s->rw.sink_out = true;
	s->rw.sink_to_q = false;
	s->rw.sink_len = n;
	rc = sess_send_ctl(s, SSW_MSG_SINK, &sk, sizeof sk);
	while (rc == 0 && s->rw.sink_out) {
		int pr = sess_pump(s, false);
		if (s->broken || pr < 0 || s->reset || s->peer_closed) {
			rc = -ECONNRESET; /* the writer is gone: its bytes never come */
			break;
		}
		if (pr == 0 && s->rw.sink_out && sess_wait_peer(s, 0) == -EINTR)
			continue; /* the peer is writing into this buffer: finish first */
	}
	if (sk.desc.len)
		s->p->rdma->deregister_rdma_memory(s->loc->ep, &sk.desc);
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

/* A reply to our rendezvous (RNDV_DONE, SINK) or the writer's WRITE_DONE
 * into a sink we offered; anything unexpected breaks the connection. */
void sess_rndv_reply(struct ssw_session *s, const struct ssw_msg *m)
{
	switch (m->h.type) {
	case SSW_MSG_RNDV_DONE:
		if (m->u.done.id != s->txr.id || s->txr.done) {
			sess_set_broken(s, "unexpected RNDV_DONE");
			return;
		}
		s->txr.done = true;
		s->txr.status = m->u.done.status;
		s->txr.bytes = m->u.done.len;
		return;
	case SSW_MSG_SINK:
		if (m->u.rndv.id != s->txr.id || s->txr.sink_have) {
			sess_set_broken(s, "unexpected SINK");
			return;
		}
		s->txr.sink = m->u.rndv;
		s->txr.sink_have = true;
		return;
	case SSW_MSG_WRITE_DONE:
		if (!s->rw.active || !s->rw.sink_out || m->u.done.id != s->rw.id ||
		    (m->u.done.status == 0 && (m->u.done.len == 0 || m->u.done.len > s->rw.sink_len))) {
			sess_set_broken(s, "unexpected WRITE_DONE");
			return;
		}
		s->rw.sink_out = false;
		if (m->u.done.status < 0) { /* writer could not: the rest comes inline */
			s->rw.active = false;
			s->st.rndv_fallback++;
			return;
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
		return;
	}
}

/* The peer's offer of a large send (RNDV_READ, WRITE_REQ) at the head. */
void sess_rndv_offer(struct ssw_session *s, const struct ssw_msg *m)
{
	switch (m->h.type) {
	case SSW_MSG_RNDV_READ:
		s->rr.active = true;
		s->rr.id = m->u.rndv.id;
		s->rr.total = m->u.rndv.len;
		s->rr.done = 0;
		s->rr.desc = m->u.rndv.desc;
		return;
	case SSW_MSG_WRITE_REQ:
		s->rw.active = true;
		s->rw.id = m->u.done.id;
		s->rw.total = m->u.done.len;
		s->rw.done = 0;
		s->rw.sink_out = false;
		s->rw.wdone = false;
		if (!s->rw.total)
			sess_set_broken(s, "empty WRITE_REQ");
		return;
	}
}

/* Read the peer's RNDV_READ straight into the application's iovec at `at`,
 * up to lim bytes.  Returns bytes, 0 when the transport refused (the rest
 * then comes inline), -1 when the connection broke. */
ssize_t sess_rr_deliver(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t at, size_t lim)
{
	uint64_t n = s->rr.total - s->rr.done < lim ? s->rr.total - s->rr.done : lim;
	struct iovec v[16];
	int k = sess_iov_slice(iov, iovcnt, at, n, v, 16);
	ssize_t r = rr_read(s, v, k, iov_total(v, k));
	if (r > 0)
		s->rx_pos += (uint64_t)r;
	return r;
}

/* Which rendezvous a blocking send of `len` bytes uses: 0 none (inline),
 * SSW_CAP_RDMA_READ (the peer reads us) or SSW_CAP_RDMA_WRITE (we write
 * into its sinks), from the settings and both ends' capabilities. */
int sess_rndv_choose(struct ssw_session *s, size_t len)
{
	int mode = ssw_session_cfg.rdma_mode;
	if (mode == SSW_RDMA_NONE || len < ssw_session_cfg.rndv_threshold ||
	    (ssw_session_cfg.rndv_max && len > ssw_session_cfg.rndv_max))
		return 0;
	if ((s->peer_caps & SSW_CAP_RDMA_READ) && mode != SSW_RDMA_WRITE_ONLY)
		return SSW_CAP_RDMA_READ;
	if ((s->p->conn->ep_caps(s->loc->ep) & SSW_CAP_RDMA_WRITE) && (s->peer_caps & SSW_CAP_RDMA_WRITE) &&
	    mode != SSW_RDMA_READ_ONLY)
		return SSW_CAP_RDMA_WRITE;
	return 0;
}

/* Send `len` bytes of buf by the rendezvous `how` (sess_rndv_choose).
 * Returns the bytes the peer took (the rest goes inline), or -errno. */
ssize_t sess_send_rndv(struct ssw_session *s, const void *buf, size_t len, int how)
{
	return how == SSW_CAP_RDMA_READ ? send_rndv_read(s, buf, len) : send_rndv_write(s, buf, len);
}
