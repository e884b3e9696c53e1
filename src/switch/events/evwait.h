/* evwait.h — shared pieces of poll.c, epoll_wait.c and accept: their wait
 * policy and arming one switched socket before the caller sleeps. */
#ifndef SSW_EVWAIT_H
#define SSW_EVWAIT_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/waitpol.h"
#include "switch/sock/sock.h"

/* The waits of poll, epoll_wait and accept (common/waitpol.h): one learned
 * policy per thread (ssw_ev_pol), this kind's start (ssw_ev_wait; _once:
 * a wait that returns after one sleep, accept's). */
extern const struct ssw_waitcfg ssw_ev_wait, ssw_ev_wait_once;
struct ssw_waitpol *ssw_ev_pol(void);
/* The peer's ring of an armed session that fell in the sleep [t_sleep,
 * now], else 0: callers keep the earliest (the one that woke them). */
uint64_t ssw_ev_rang(struct ssw_session *s, uint64_t t_sleep, uint64_t now);

/* Fill up to n pollfds (*nout) to sleep on for socket s.  Returns
 *   SSW_EV_ARMED    fds given; if *armed was set, call ssw_session_sleep_done
 *                   on it after sleeping
 *   SSW_EV_PENDING  something is pending: re-check readiness before sleeping
 *   SSW_EV_IDLE     nothing will change on s (a finished connection)
 *   SSW_EV_NAP      sleep in short naps (fds may be given, and *armed set, too)
 * A switched connection whose ring holds messages the application has not
 * asked for (data while it waits for POLLOUT only, or past an edge already
 * reported) cannot be armed; those messages are staged into the session (the
 * kernel holds them in the socket buffer too), which also applies the credits
 * that travel behind them.  *staged (in/out, per wait call and socket) says
 * that was done already. */
enum { SSW_EV_ARMED = 0, SSW_EV_PENDING, SSW_EV_IDLE, SSW_EV_NAP };
#define SSW_EV_NAP_NS 5000000ull
int ssw_ev_arm(struct ssw_sock *s, struct pollfd *pf, int n, int *nout, bool *staged,
	       struct ssw_session **armed);

#endif
