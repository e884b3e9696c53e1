/* session_mem.c — memory like kernel TCP's: an idle connection gives back
 * what its traffic no longer needs (the transport's through the provider's
 * trim op, and the session's own staging queue), and says what it holds
 * (`sockswitch stat`).  The housekeeping thread (switch/trim.c) calls
 * ssw_session_trim every SSW_TRIM_PERIOD_MS while anything is pending. */
#include "session/session_priv.h"

#include "common/trim.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>

/* The staging queue (session_rx.c): empty, and nothing staged for its
 * quiet time (common/trim.h): its pages go (MADV_REMOVE: the session lives
 * in shared memory, where MADV_DONTNEED would keep them).  1 while pages
 * may be left. */
static int q_trim(struct ssw_session *s)
{
	struct rxq *q = &s->q;
	if (!q->hi)
		return 0;
	uint64_t now = ssw_now_ns();
	if (!ssw_trim_idle(&q->idle, q->gen, now) || q->len)
		return 1;
	size_t top = (q->hi + 4095) & ~(size_t)4095;
	if (top > q->cap)
		top = q->cap;
	(void)madvise(q->buf, top, MADV_REMOVE); /* buf is page-aligned (ssw_session_new) */
	q->hi = 0;
	q->off = 0;
	ssw_trim_given(&q->idle, now);
	return 0;
}

int ssw_session_trim(struct ssw_session *s)
{
	/* never wait: a connection in use is not idle anyway */
	int rc = pthread_mutex_trylock(&s->lock);
	if (rc == EOWNERDEAD) {
		pthread_mutex_consistent(&s->lock);
		sess_set_broken(s, "a process died while using this connection");
		rc = 0;
	}
	if (rc)
		return 1;
	int more = 0;
	/* an exclusive connection's transport state is its driver's (fabric) */
	if (s->loc->ep && s->p->msg->trim && !sess_foreign(s))
		more = s->p->msg->trim(s->loc->ep, 0);
	more |= q_trim(s);
	sess_unlock(s);
	return more;
}

int64_t sess_resident_locked(struct ssw_session *s)
{
	return s->loc->ep && s->p->msg->resident && !sess_foreign(s) ? s->p->msg->resident(s->loc->ep) : -1;
}

int64_t ssw_session_resident(struct ssw_session *s)
{
	sess_lock(s);
	int64_t n = sess_resident_locked(s);
	sess_unlock(s);
	return n;
}
