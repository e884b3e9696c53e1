/* evwait.c — the adaptive busy-poll budget and socket arming shared by
 * poll.c and epoll.c (see evwait.h). */
#include "switch/evwait.h"
#include "switch/setup/setup.h"

#include "common/sys.h"
#include "common/waitpol.h"
#include "session/session.h"

#include <errno.h>

#define SPIN_MIN_NS 2000u
#define SPIN_START_NS 20000u

static __thread uint32_t spin_ns = SPIN_START_NS;

static uint32_t spin_max(void)
{
	uint32_t m = ssw_session_cfg.spin_max_ns;
	return m ? m : 50000u;
}

uint64_t ssw_ev_spin_ns(void)
{
	uint32_t m = spin_max();
	return spin_ns > m ? m : spin_ns;
}

void ssw_ev_spin_hit(void)
{
	uint32_t m = spin_max();
	spin_ns += spin_ns / 4;
	if (spin_ns > m)
		spin_ns = m;
}

/* A backend of a busy server (pgbench -S -c 8 -j 8: 8 client threads and 8
 * backends on 2 cores) slept a few hundred us between queries, always
 * within 4 budgets of its sleep's start (the wake-up included), so its
 * budget stayed at the most and each wait spun it away in ~13 empty yields
 * while the clients queued on the other CPU; the ring came long after the
 * most a wait may spin, so that budget now halves. */
void ssw_ev_slept(uint64_t slept_ns, bool woken, uint64_t event_ns)
{
	ssw_wait_slept();
	uint32_t m = spin_max();
	bool soon = event_ns ? event_ns <= m : slept_ns < 4ull * m;
	if (woken && soon) {
		/* the event came within a few spin budgets: spin longer */
		spin_ns *= 2;
		if (spin_ns > m)
			spin_ns = m;
	} else {
		spin_ns /= 2;
		if (spin_ns < SPIN_MIN_NS)
			spin_ns = SPIN_MIN_NS;
	}
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
	 * arrive), or the session could not stage (memory): then nap */
	if (ssw_session_poll(sess) & (POLLHUP | POLLERR | POLLRDHUP))
		return SSW_EV_IDLE;
	return SSW_EV_NAP;
}
