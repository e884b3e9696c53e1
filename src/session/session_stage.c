/* session_stage.c — sends while the peer is suspended: staged in the
 * session's memory until its RESUME, as a kernel socket buffer keeps bytes
 * the network does not take yet (seed 000: the peer "buffers nonblocking
 * sends up to SO_SNDBUF, then EAGAIN").
 *
 * While control of the connection moves between the processes of the
 * other side (session_swap.c), our side sends nothing on the transport:
 * the transport may be about to change hands (a provider without shared
 * context needs a connection of the new controller's).  Without the stage
 * a send would block, or fail with EAGAIN, where kernel TCP accepts the
 * bytes at once: a server's small reply would wait for another host's
 * processes, and a hostile peer could stall a blocking server with one
 * SUSPEND (tests/integration/t_hostile_swap.sh).
 *
 * Staged bytes count as in flight (tx_inflight: the peer's credits cover
 * them), so the stage never holds more than the peer's window and our
 * SO_SNDBUF allow; its own size is half the transport's, which a RESUME
 * leaves empty on our side (the old controller took in everything up to
 * SUSPENDED): the whole stage leaves at RESUME, in order, before anything
 * sent later. */
#include "session/session_priv.h"

#include "common/bell.h"
#include "common/log.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

size_t sess_stage_size(const struct ssw_provider *prov, struct ssw_ep *ep)
{
	size_t n = (size_t)sess_transport_bytes(prov, ep) / 2;
	n &= ~(size_t)4095;
	return n < 4096 ? 4096 : n;
}

/* The first byte staged (or a FIN owed): this process's helper thread
 * looks at the connection until they are gone (switch/share/
 * swap_helper.c), so that they leave at RESUME even if the program makes
 * no further call on the socket. */
void sess_stage_watch(void)
{
	if (ssw_session_cfg.control_taken)
		ssw_session_cfg.control_taken();
	if (ssw_bell_init()) /* (once per image) */
		ssw_bell_ring(ssw_pid());
}

static void grew(struct txstage *t)
{
	if (t->off + t->len > t->hi)
		t->hi = t->off + t->len;
}

void sess_stage_put(struct ssw_session *s, const struct iovec *v, int k, size_t n)
{
	struct txstage *t = &s->ts;
	uint8_t *p = t->buf + t->off + t->len;
	size_t n0 = n;
	if (!t->len && n)
		sess_stage_watch();
	for (int i = 0; i < k && n; i++) {
		size_t c = v[i].iov_len < n ? v[i].iov_len : n;
		memcpy(p, v[i].iov_base, c);
		p += c;
		n -= c;
		t->len += c;
	}
	sess_count_staged(n0);
	grew(t);
}

void *sess_stage_room(struct ssw_session *s, size_t n)
{
	struct txstage *t = &s->ts;
	return t->off + t->len + n <= t->cap ? t->buf + t->off + t->len : NULL;
}

void sess_stage_commit(struct ssw_session *s, size_t n)
{
	if (!s->ts.len && n)
		sess_stage_watch();
	s->ts.len += n;
	sess_count_staged(n);
	grew(&s->ts);
}

void sess_stage_trim(struct ssw_session *s)
{
	struct txstage *t = &s->ts;
	if (t->hi) {
		size_t top = (t->hi + 4095) & ~(size_t)4095;
		/* MADV_REMOVE: the session is shared memory (session_mem.c) */
		(void)madvise(t->buf, top < t->cap ? top : t->cap, MADV_REMOVE);
	}
	t->hi = 0;
}

bool sess_stage_flush(struct ssw_session *s)
{
	struct txstage *t = &s->ts;
	while (t->len && !s->sw.suspended && !s->reset && !s->broken && s->loc->ep) {
		size_t n = t->len < s->max_payload ? t->len : s->max_payload;
		if (t->urg_set && t->urg == t->off) { /* the urgent byte, in its place */
			int rc = sess_urg_send_byte(s, t->buf[t->off]);
			if (rc == -EAGAIN)
				return false;
			if (rc < 0) {
				sess_on_reset(s);
				break;
			}
			t->urg_set = false;
			t->off++;
			t->len--;
			continue;
		}
		if (t->urg_set && t->urg > t->off && t->urg - t->off < n)
			n = t->urg - t->off; /* the bytes before it first */
		struct iovec v = { t->buf + t->off, n };
		int rc = sess_send_msg(s, SSW_MSG_DATA, NULL, 0, &v, 1, n);
		if (rc == -EAGAIN)
			return false; /* the next unlock, send or wait goes on */
		if (rc < 0) {
			sess_on_reset(s);
			break;
		}
		t->off += n;
		t->len -= n;
	}
	if (s->reset || s->broken)
		t->len = 0; /* gone with the connection, as a reset kernel socket's buffer */
	if (t->len)
		return false;
	t->off = 0;
	t->urg_set = false;
	sess_stage_trim(s);
	return true;
}

bool sess_stage_drain(struct ssw_session *s, uint64_t dl)
{
	while (s->ts.len) {
		if (sess_stage_flush(s))
			return true;
		if (s->reset || s->broken || ssw_now_ns() >= dl)
			return false;
		if (sess_pump(s, true) > 0)
			continue;
		int w = sess_wait_peer(s, dl);
		if (w < 0 && w != -ETIMEDOUT && w != -EINTR)
			return false;
	}
	return true;
}
