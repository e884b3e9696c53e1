/* session_tx.c — send side of the stream: inline DATA within credits, cork and held messages, the send entry points. */
#include "session/session_priv.h"

#include "common/waitpol.h"

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

static void sess_cond_wait(struct ssw_session *s)
{
	if (pthread_cond_wait(&s->tx_cv, &s->lock) == EOWNERDEAD) {
		pthread_mutex_consistent(&s->lock);
		sess_set_broken(s, "a process died while using this connection");
	}
}

#ifndef FILL_MAX
#define FILL_MAX (64u << 10)         /* inline DATA cap when a producer writes it in place: fewer, larger file reads */
#endif
#define HOLD_FLUSH (64u << 10)       /* corked bytes that make a full segment: sent at once */

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
	sess_peer_check(s, tick != s->w.send_tick);
	s->w.send_tick = tick;
	if (tcp_closed(s) || s->so_error || snd_down(s))
		return sess_take_send_error(s);
	if (total == 0) {
		*ok = 0;
		return 1;
	}
	if (s->peer_closed) {
		/* The peer's socket is gone: these bytes are accepted and draw its
		 * reset, so the next send fails (EPIPE: we had its FIN). */
		sess_on_reset(s);
		*ok = (ssize_t)total;
		return 1;
	}
	return 0;
}

/* Make held DATA visible (uncork, or before a sender waits: the peer must
 * see what fills the window to free it). */
void sess_flush_held(struct ssw_session *s)
{
	if (s->held && s->p->msg->flush)
		s->p->msg->flush(s->loc->ep);
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
		k = sess_iov_slice(src->iov, src->iovcnt, at, chunk, v, 16);
		chunk = iov_total(v, k);
	}
	if (sess_staging(s)) { /* the peer is suspended (session_stage.c) */
		if (src->iov) {
			sess_stage_put(s, v, k, chunk);
			*got = chunk;
			return 0;
		}
		void *p = sess_stage_room(s, chunk);
		if (!p)
			return -EAGAIN;
		ssize_t n = src->fill(src->ctx, p, chunk);
		if (n <= 0)
			return n < 0 ? SSW_FILL_ERR + (int)n : 0;
		sess_stage_commit(s, (size_t)n);
		*got = (size_t)n;
		return 0;
	}
	if (!mo->send_reserve || (!hold && src->iov)) {
		uint8_t *bounce = NULL;
		if (!src->iov) { /* a provider without reserve: one bounce copy */
			/* what the producer gives is gone from it (a pipe): have room first */
			if (mo->send_room && mo->send_room(s->loc->ep) < sess_msg_space(s, sizeof(struct ssw_wire_hdr) + chunk))
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
		int rc = sess_send_msg(s, SSW_MSG_DATA, NULL, 0, v, k, chunk);
		free(bounce);
		if (rc == 0)
			*got = chunk;
		return rc;
	}
	void *buf;
	struct ssw_wire_hdr h;
	int rc = mo->send_reserve(s->loc->ep, sizeof h + chunk, &buf);
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
	rc = mo->send_commit(s->loc->ep, sizeof h + chunk, hold);
	if (rc)
		return rc;
	sess_sent(s, credits);
	s->held = hold ? s->held + chunk : 0;
	if (s->held >= HOLD_FLUSH)
		sess_flush_held(s); /* a full segment's worth: the kernel sends it too */
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
		size_t mm = s->p->msg->max_msg(s->loc->ep) - sizeof(struct ssw_wire_hdr);
		cap = mm < FILL_MAX ? mm : FILL_MAX;
	}
	size_t cap0 = cap;
	while (sent < total) {
		if (s->ts.len && !s->sw.suspended)
			(void)sess_stage_flush(s); /* staged bytes first */
		uint64_t lim = tx_limit(s);
		uint64_t room = lim > s->tx_inflight ? lim - s->tx_inflight : 0;
		size_t chunk = total - sent;
		if (chunk > cap)
			chunk = cap;
		if (chunk > room)
			chunk = (size_t)room;
		if (chunk) {
			size_t got;
			int rc = send_data(s, src, sent, chunk, hold, &got);
			if (rc == 0 && got) {
				cap = src->fill && s->p->msg->send_reserve ? cap0 : s->max_payload;
				s->tx_inflight += got;
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
					sess_on_reset(s);
					if (sent == at)
						return (ssize_t)(total - at);
				} else {
					sess_on_reset(s);
				}
				break;
			}
		}
		/* No room: the peer must see what we hold to free it; credits are
		 * maybe queued behind unread data. */
		sess_flush_held(s);
		s->stage_nomem = false;
		int pr = sess_pump(s, true);
		if (pr > 0)
			continue;
		if (pr < 0 || s->reset || s->peer_closed)
			break;
		if (s->stage_nomem && sent == at)
			return -ENOBUFS; /* credits sit behind data we cannot stage */
		if (nonblock) {
			sess_peer_check(s, true);
			break;
		}
		int w = sess_wait_peer(s, dl);
		if (w < 0) {
			if (sent > at)
				break;
			return w == -ETIMEDOUT ? -EAGAIN : w;
		}
		if (snd_down(s)) /* another thread shut us down (sk_stream_wait_memory) */
			break;
	}
	if (sent == at && total > at) {
		if (ended)
			return fill_err; /* 0: the producer had nothing (end of file) */
		if (tcp_closed(s) || s->so_error || snd_down(s))
			return sess_take_send_error(s);
		if (s->peer_closed) {
			sess_on_reset(s);
			return (ssize_t)(total - at);
		}
		return -EAGAIN;
	}
	return (ssize_t)(sent - at);
}

ssize_t sess_send_inline(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t total, size_t at,
			   bool nonblock, uint64_t dl, bool hold)
{
	struct tx_src src = { .iov = iov, .iovcnt = iovcnt };
	return send_src(s, &src, total, at, nonblock, dl, hold);
}

/* Start of every send: takes the lock (held on return), then as
 * send_precheck. */
static int send_enter(struct ssw_session *s, size_t total, ssize_t *ok)
{
	if (!sess_enter(s)) {
		sess_lock(s); /* the callers unlock */
		return -ECONNRESET;
	}
	/* Another thread's rendezvous send is in progress (it sleeps without
	 * the lock): our bytes go after all of its bytes, not between. */
	while (s->txr.id && !s->reset)
		sess_cond_wait(s);
	if (ssw_session_cfg.fault_swap)
		sess_swap_fault(s);
	if (sess_rx_ready(s))
		sess_pump(s, false);
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
		sess_unlock(s);
		return pre > 0 ? ok : pre;
	}
	if (total == 0) {
		sess_unlock(s);
		return 0;
	}
	if (flags & MSG_OOB) {
		ret = sess_send_oob(s, iov, iovcnt, total, nonblock, dl);
		sess_unlock(s);
		return ret;
	}
	/* Rendezvous only for blocking sends without a timeout: the call owns the
	 * buffer until the peer is done with it, as a kernel send would block. */
	bool big = !nonblock && timeout_ms <= 0 && !sess_staging(s);
	bool hold = s->cork || (flags & MSG_MORE);
	size_t sent = 0;
	ret = 0;
	/* No piece for a rendezvous: the pieces of one writev/sendmsg go as
	 * messages cut across them, as the kernel's segments are (one message
	 * up to its size: a reader woken by a first piece alone would miss the
	 * others, which kernel TCP hands over in the same segment) */
	bool rndv = false;
	for (int i = 0; big && i < iovcnt && !rndv; i++)
		rndv = sess_rndv_choose(s, iov[i].iov_len) != 0;
	if (!rndv) {
		ret = sess_send_inline(s, iov, iovcnt, total, 0, nonblock, dl, hold);
		if (ret > 0)
			sent = (size_t)ret;
		iovcnt = 0;
	}
	for (int i = 0; i < iovcnt && ret >= 0; i++) {
		const uint8_t *b = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		size_t off = 0; /* what a rendezvous took: the rest goes inline */
		int how = big ? sess_rndv_choose(s, len) : 0;
		if (how) {
			sess_flush_held(s);
			ssize_t r = sess_send_rndv(s, b, len, how);
			if (r < 0) {
				ret = r;
				break;
			}
			sent += (size_t)r;
			off = (size_t)r;
			if (off == len)
				continue;
		}
		struct iovec one = { (void *)(b + off), len - off };
		ssize_t r = sess_send_inline(s, &one, 1, len - off, 0, nonblock, dl, hold);
		if (r < 0) {
			ret = r;
			break;
		}
		sent += (size_t)r;
		if ((size_t)r < len - off)
			break;
	}
	sess_unlock(s);
	if (sent && !hold)
		sess_cede(s);
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
	bool held = s->cork || (flags & MSG_MORE);
	sess_unlock(s);
	if (r > 0 && !held)
		sess_cede(s);
	return r;
}

void ssw_session_set_cork(struct ssw_session *s, bool on)
{
	if (!sess_enter(s))
		return;
	s->cork = on;
	if (!on)
		sess_flush_held(s);
	sess_unlock(s);
	if (!on)
		sess_cede(s);
}

bool ssw_session_cork(struct ssw_session *s)
{
	return __atomic_load_n(&s->cork, __ATOMIC_RELAXED);
}

void ssw_session_flush(struct ssw_session *s)
{
	if (!sess_enter(s))
		return;
	sess_flush_held(s);
	sess_unlock(s);
}
