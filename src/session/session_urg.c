/* session_urg.c — urgent data (MSG_OOB): the mark, the urgent byte, SIGURG ownership. */
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

/* Record the urgent byte.  As in Linux it stays in the stream at `mark`
 * (a normal read stops before it and, without SO_OOBINLINE, skips it); a
 * newer urgent byte moves the mark and the older one becomes plain data. */
void sess_take_oob(struct ssw_session *s, uint8_t byte)
{
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
		if (s->tx_inflight + 1 <= tx_limit(s)) {
			struct iovec b = { &last, 1 };
			int rc = sess_send_msg(s, SSW_MSG_OOB, NULL, 0, &b, 1, 1);
			if (rc == 0) {
				if (s->p->progress->note) /* SIGURG to the reader's owner */
					s->p->progress->note(s->ep, SSW_NOTE_URG, 0);
				s->tx_inflight++;
				s->st.bytes_sent++;
				return (ssize_t)total;
			}
			if (rc != -EAGAIN)
				return body ? (ssize_t)body : rc;
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
	sess_lock(s);
	sess_pump(s, true);
	int r = s->urg.mark_valid && s->rx_pos == s->urg.mark;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void ssw_session_set_owner(struct ssw_session *s, int owner)
{
	sess_lock(s);
	if (s->p->progress->note && s->ep)
		s->p->progress->note(s->ep, SSW_NOTE_OWNER, owner);
	pthread_mutex_unlock(&s->lock);
}

/* recv(MSG_OOB): the urgent byte, unless it is inline or there is none. */
ssize_t sess_recv_oob(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want, int flags)
{
	sess_pump(s, true);
	if (s->urg.inline_ || !s->urg.have)
		return -EINVAL;
	if (want)
		sess_iov_put(iov, iovcnt, 0, &s->urg.byte, 1);
	if (!(flags & MSG_PEEK))
		s->urg.have = false;
	return want ? 1 : 0;
}
