/* evwait.h — shared pieces of poll.c and epoll.c: the adaptive busy-poll
 * budget and arming one switched socket before the caller sleeps. */
#ifndef SSW_EVWAIT_H
#define SSW_EVWAIT_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/waitpol.h"
#include "switch/sock/sock.h"

/* Adaptive spin (per thread).  A wait spins for ssw_ev_spin_ns() before it
 * sleeps.  The budget grows when spinning paid off or when a sleep ended
 * by an event soon after it began (the peer answers within a wake-up's
 * cost: spinning longer would have caught it), and shrinks when a sleep was
 * long or timed out (idle: spinning only burns CPU).
 * "Soon": when the peer's wake-up time is known (event_ns: from the start
 * of the wait, spin included, to the peer's ring; ssw_ev_rang), within the
 * most a wait may spin; else, within four times that of the sleep's start
 * (the sleep's length includes the wake-up's own latency, which on a busy
 * host outlasts any budget). */
uint64_t ssw_ev_spin_ns(void);
void ssw_ev_spin_hit(void);
void ssw_ev_slept(uint64_t slept_ns, bool woken, uint64_t event_ns);
/* The peer's ring of an armed session that fell in the sleep [t_sleep,
 * now], else 0: callers keep the earliest (the one that woke them). */
uint64_t ssw_ev_rang(struct ssw_session *s, uint64_t t_sleep, uint64_t now);
/* Each step of that spin: common/waitpol.h (ssw_spin_start with
 * ssw_ev_spin_ns(), ssw_spin_step). */

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
