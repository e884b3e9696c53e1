/* evwait.c — the wait policy and socket arming shared by poll.c,
 * epoll_wait.c and accept (see evwait.h). */
#include "switch/events/evwait.h"
#include "switch/setup/setup.h"

#include "common/sys.h"
#include "session/session.h"

#include <errno.h>

/* A thread's waits share one learned budget: a server's event loop waits
 * for the same clients in poll, epoll_wait and accept. */
static __thread struct ssw_waitpol ev_pol;

const struct ssw_waitcfg ssw_ev_wait = { .start_ns = 20000 };
const struct ssw_waitcfg ssw_ev_wait_once = { .start_ns = 20000, .once = true };

struct ssw_waitpol *ssw_ev_pol(void)
{
	return &ev_pol;
}

uint64_t ssw_ev_rang(struct ssw_session *s, uint64_t t_sleep, uint64_t now)
{
	uint64_t rang = ssw_session_wake_sent_ns(s);
	return rang >= t_sleep && rang <= now ? rang : 0;
}

int ssw_ev_arm(struct ssw_sock *s, struct pollfd *pf, int n, int *nout, bool *staged,
	       struct ssw_session **armed)
{
	*nout = 0;
	*armed = NULL;
	int k = ssw_setup_wait_fds(s, pf, n); /* a listener's or a connect's */
	if (k >= 0) {
		*nout = k;
		if (s->state == SSW_ST_LISTENING)
			return k ? SSW_EV_ARMED : SSW_EV_IDLE;
		return k ? SSW_EV_ARMED : SSW_EV_NAP;
	}
	struct ssw_session *sess = s->sess;
	if (!sess)
		return SSW_EV_NAP; /* between states: look again soon */
	int sp = ssw_session_sleep_prepare(sess, pf, n, nout);
	if (sp >= 0) {
		*armed = sess;
		return sp ? SSW_EV_NAP : SSW_EV_ARMED; /* NAP: fds given, but sleep in naps */
	}
	*nout = 0;
	if (!*staged) {
		(void)ssw_session_fionread(sess); /* stages everything queued */
		*staged = true;
		return SSW_EV_PENDING;
	}
	/* still pending after staging: a finished connection (nothing more can
	 * arrive), or the session could not stage (memory): then nap.  Half
	 * finished (the peer's end, not ours) it can still change without a
	 * word from the peer: a send that draws the reset, or our shutdown,
	 * and when another process holds the connection too (fork) nothing
	 * rings here when that one does it (soak seed 851000734): naps then */
	short ev = ssw_session_poll(sess);
	if (ev & (POLLHUP | POLLERR))
		return SSW_EV_IDLE;
	if (ev & POLLRDHUP)
		return ssw_session_last_holder(sess) ? SSW_EV_IDLE : SSW_EV_NAP;
	return SSW_EV_NAP;
}
