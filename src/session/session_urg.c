/* session_urg.c — urgent data (MSG_OOB): the mark, the urgent byte, SIGURG to the socket's owner. */
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
#include <unistd.h>

/* SIGURG, as the receiver's kernel raises it when urgent data arrives (to
 * the F_SETOWN owner, even if the receiver is in no socket call).
 *
 * Who raises it: nothing runs at the receiver when the byte lands, so on a
 * transport that lets the sender read the receiver's owner at once (the
 * provider's tag, peer_tag) and tells who the receiver is (peer_cred, from
 * the kernel), the sender raises it for the receiver when it sends.  Else
 * (fabric: another host) the receiver raises it itself when it takes the
 * byte in: at its next call on the socket, or when a poll, epoll or recv
 * it sleeps in wakes for it.  Both ends use the same provider, so exactly
 * one of them raises it.
 *
 * The signal is sent after the session's lock is released (sess_unlock):
 * the handler usually reads the socket, and may run in this very thread. */
static bool sender_raises(const struct ssw_session *s)
{
	return s->p->progress->note && s->p->progress->peer_tag && s->p->conn->peer_cred;
}

#define URG_OWED_MAX 4
static __thread int32_t urg_owed[URG_OWED_MAX];
static __thread int urg_owed_n;

static void urg_owe(int32_t owner)
{
	for (int i = 0; i < urg_owed_n; i++)
		if (urg_owed[i] == owner)
			return;
	if (urg_owed_n < URG_OWED_MAX)
		urg_owed[urg_owed_n++] = owner;
}

void sess_urg_flush(void)
{
	int n = urg_owed_n;
	urg_owed_n = 0;
	for (int i = 0; i < n; i++)
		(void)kill(urg_owed[i], SIGURG);
}

/* The receiver's owner is its word (a peer may publish any tag): signal
 * only the peer process itself or a process of its group, the kernel's
 * word on who the peer is, never anyone else. */
static void urg_raise_for_peer(struct ssw_session *s)
{
	int32_t owner = s->p->progress->peer_tag(s->loc->ep);
	uint32_t uid;
	int32_t pid;
	if (!owner || owner == INT32_MIN || s->p->conn->peer_cred(s->loc->ep, &uid, &pid) < 0 || pid <= 0)
		return;
	pid_t group = getpgid(pid);
	if (group < 0)
		return;
	if (owner > 0 ? owner != pid && getpgid(owner) != group : -owner != group)
		return;
	urg_owe(owner);
}

/* Record the urgent byte.  As in Linux it stays in the stream at `mark`
 * (a normal read stops before it and, without SO_OOBINLINE, skips it); a
 * newer urgent byte moves the mark and the older one becomes plain data. */
void sess_take_oob(struct ssw_session *s, uint8_t byte)
{
	/* tcp_check_urg: a reader standing at the older mark (not inline)
	 * skips that byte when a newer one comes: it is lost, neither data
	 * nor out of band */
	if (s->urg.mark_valid && !s->urg.inline_ && s->rx_pos == s->urg.mark && s->q.len > 0)
		sess_q_take(s, 1);
	if (sess_q_reserve(s, 1) < 0) {
		sess_set_broken(s, "out of memory for urgent byte");
		return;
	}
	s->urg.mark = s->rx_pos + s->q.len;
	s->urg.mark_valid = true;
	s->q.buf[s->q.off + s->q.len++] = byte;
	s->q_owed++;
	s->urg.byte = byte;
	s->urg.have = true;
	s->urg.seen++; /* its credit goes back when it is read (q_owed) */
	if (s->urg.owner && !sender_raises(s))
		urg_owe(s->urg.owner); /* our own F_SETOWN: the application's choice */
}

int sess_urg_send_byte(struct ssw_session *s, uint8_t b)
{
	struct iovec v = { &b, 1 };
	int rc = sess_send_msg(s, SSW_MSG_OOB, NULL, 0, &v, 1, 1);
	if (rc == 0) {
		if (s->p->progress->note) /* POLLPRI at once, before the byte is taken in */
			s->p->progress->note(s->loc->ep, SSW_NOTE_MARK, 0);
		if (sender_raises(s))
			urg_raise_for_peer(s);
	}
	return rc;
}

ssize_t sess_send_oob(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t total, bool nonblock,
			uint64_t dl)
{
	uint8_t last;
	size_t body = total - 1;
	struct iovec v[16];
	int k = sess_iov_slice(iov, iovcnt, body, 1, v, 16);
	if (k != 1)
		return -EINVAL;
	last = *(uint8_t *)v[0].iov_base;
	if (body) {
		ssize_t r = sess_send_inline(s, iov, iovcnt, body, 0, nonblock, dl, false);
		if (r < 0 || (size_t)r < body)
			return r;
	}
	for (;;) {
		/* after the bytes staged while the peer was suspended (session_stage.c) */
		if (s->ts.len && !s->sw.suspended)
			(void)sess_stage_flush(s);
		if (!sess_staging(s) && s->tx_inflight + 1 <= tx_limit(s)) {
			int rc = sess_urg_send_byte(s, last);
			if (rc == 0) {
				s->tx_inflight++;
				s->st.bytes_sent++;
				return (ssize_t)total;
			}
			if (rc != -EAGAIN)
				return body ? (ssize_t)body : rc;
		} else if (sess_staging(s) && !s->ts.urg_set && s->tx_inflight + 1 <= tx_limit(s) &&
			   sess_stage_room(s, 1)) {
			/* the peer is suspended (a control swap on its side): the
			 * urgent byte is staged in its place too, as the kernel's
			 * buffer takes it (soak seed 867100000: a non-blocking
			 * send of 6 urgent bytes returned 5) */
			struct iovec b = { &last, 1 };
			s->ts.urg = s->ts.off + s->ts.len;
			sess_stage_put(s, &b, 1, 1);
			s->ts.urg_set = true;
			s->tx_inflight++;
			s->st.bytes_sent++;
			return (ssize_t)total;
		}
		if (sess_pump(s, true) > 0)
			continue;
		if (nonblock)
			return body ? (ssize_t)body : -EAGAIN;
		int w = sess_wait_peer(s, dl);
		if (w < 0)
			return body ? (ssize_t)body : (w == -ETIMEDOUT ? -EAGAIN : w);
	}
}

int ssw_session_atmark(struct ssw_session *s)
{
	if (!sess_enter(s))
		return 0;
	sess_pump(s, true);
	int r = s->urg.mark_valid && s->rx_pos == s->urg.mark;
	sess_unlock(s);
	return r;
}

void ssw_session_set_owner(struct ssw_session *s, int owner)
{
	if (!sess_enter(s))
		return;
	s->urg.owner = owner;
	if (s->p->progress->note && s->loc->ep)
		s->p->progress->note(s->loc->ep, SSW_NOTE_TAG, owner); /* for a sender that raises it (above) */
	sess_unlock(s);
}

/* Urgent data to report (POLLPRI, select's exceptfds): the byte, or marks
 * the peer announced that its messages have not brought in yet (a
 * transport without marks announces none). */
bool sess_urg_pending(const struct ssw_session *s)
{
	return s->urg.have || (s->p->progress->note && s->urg.peer != s->urg.seen);
}

/* recv(MSG_OOB): the urgent byte, unless it is inline or there is none. */
ssize_t sess_recv_oob(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want, int flags)
{
	sess_pump(s, true);
	if (s->urg.inline_ || !s->urg.have)
		return -EINVAL;
	/* tcp_recv_urg: a connection reset before the peer's FIN is closed
	 * without SOCK_DONE, and its urgent byte is not given out (soak seed
	 * 835003027) */
	if (s->reset && !s->fin_rcvd)
		return -ENOTCONN;
	if (want)
		sess_iov_put(iov, iovcnt, 0, &s->urg.byte, 1);
	if (!(flags & MSG_PEEK))
		s->urg.have = false;
	return want ? 1 : 0;
}

int ssw_session_splice_room(struct ssw_session *s, bool nonblock, size_t *room)
{
	*room = SIZE_MAX;
	if (!sess_enter(s))
		return 1; /* the read itself says */
	sess_pump(s, true);
	int rc = 1;
	if (s->urg.mark_valid && s->urg.mark > s->rx_pos) {
		*room = (size_t)(s->urg.mark - s->rx_pos);
	} else if (s->urg.mark_valid && s->urg.mark == s->rx_pos) {
		/* tcp_splice_read's checks when it moved nothing */
		if (s->fin_rcvd)
			rc = 0;
		else if (s->so_error) {
			rc = s->so_error;
			s->so_error = 0;
		} else if (rcv_down(s))
			rc = 0;
		else if (tcp_closed(s))
			rc = -ENOTCONN;
		else
			rc = nonblock ? -EAGAIN : 0;
	}
	sess_unlock(s);
	return rc;
}
