/* switch.h — what the switch's files share among themselves: its entry
 * points for the interposition layer (api.h), with the socket's structure
 * (sock.h) and the functions only the switch calls.  The interposition
 * layer includes api.h alone. */
#ifndef SSW_SWITCH_H
#define SSW_SWITCH_H

#include "common/forklocal.h"
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "switch/api.h"
#include "switch/route/route.h"
#include "switch/sock/sock.h"

extern struct ssw_routes ssw_routes_table;

/* The provider a route target names, checked and started (init.c); NULL:
 * kernel TCP (tcp, not built, refused or failed to start). */
const struct ssw_provider *ssw_provider_for(int t);

/* Set-up (the rest: api.h) */
/* A listener's provider side has a connection accept would take now. */
bool ssw_listener_ready(struct ssw_sock *s);
/* For a connecting socket: connect() again, SO_ERROR, poll (sock/connect.c).
 * 0 connected, -EINPROGRESS pending, or the final error. */
int ssw_connect_poll(struct ssw_sock *s, int fd, int wait_ms);
void ssw_sock_load_opts(struct ssw_sock *s, int fd);
/* SO_LINGER {1, 0} as every process holding the connection sees it (io.c) */
bool ssw_sock_linger0(struct ssw_sock *s);

/* fds (api.h has what the interposition layer reports) */
/* close(2) for any fd: drops the switch's entry, then closes the kernel fd. */
int ssw_close(int fd);
/* At exit, close the connections the kernel would close differently than a dead process (exit.c). */
void ssw_exit_close_private(void);
/* The fd `newfd` now refers to the same socket as `oldfd` (dup family):
 * what the switch knows of oldfd (entry, fd info, relayed) goes to newfd too. */
void ssw_dup(int oldfd, int newfd);
/* close_range(2) without CLOSE_RANGE_CLOEXEC: close() each switched fd in [lo, hi]. */
void ssw_close_range(unsigned lo, unsigned hi);

/* Options and control */
void ssw_fcntl_setfl(struct ssw_sock *s, int flags);
void ssw_fcntl_setown(struct ssw_sock *s, int owner);
/* The socket's last descriptor was closed: out of every epoll set. */
void ssw_epoll_drop_sock(struct ssw_sock *s);

/* Readiness */
void ssw_epoll_forget(int epfd);
/* An epoll fd of ours watched from outside (poll, or another epoll fd):
 * 1 if a switched member is ready now, 0 if not, -1 if it has none. */
int ssw_epoll_peek(int epfd);
/* Sleeping on such an epoll fd from outside: arm its switched members (see
 * ssw_ev_arm in events/evwait.h for the return values), then after the sleep
 * ssw_session_sleep_done + ssw_sock_put each armed/held. */
int ssw_epoll_arm_members(int epfd, struct pollfd *pf, int n, int *nout, struct ssw_session **armed,
			  struct ssw_sock **held, int hmax, int *na);
/* This process may have taken s's doorbell itself (it slept on s), or
 * changed s's readiness (shutdown, options): epoll sets holding s look at
 * it again. */
void ssw_epoll_touch(struct ssw_sock *s);

/* fork (fork.c; ssw_fork_begin and _end: api.h) */
/* This process forked (or is a child of a fork) since the switch started:
 * its open files may be shared with another process. */
bool ssw_forked(void);
/* Around creating or closing a session, so a fork sees all or none of it. */
void ssw_fork_guard_enter(void);
void ssw_fork_guard_leave(void);

/* The housekeeping thread that gives back idle connections' memory
 * (trim.c): registered at start-up; around fork (after statreg's). */
void ssw_trim_init(void);
/* share/swap_helper.c: the thread serving requests for shared connections
 * this process controls; fork takes its look's lock like the trim's. */
void ssw_swap_helper_init(void);
void ssw_swap_fork_begin(void);
/* The epoll sets held across a fork, in the parent (switch/events/epoll_set.c). */
void ssw_epoll_fork_begin(void);
void ssw_epoll_fork_end(void);
void ssw_swap_fork_end(bool child);
void ssw_trim_fork_begin(void);
void ssw_trim_fork_end(bool child);

/* Statistics (stats.c) */
struct ssw_counter_set {
	_Atomic unsigned long switched, fallback, bytes_sent, bytes_received;
	_Atomic unsigned long refused; /* connection requests dropped at accept (listen.c refuse) */
	_Atomic unsigned long rndv, rndv_fallback, rdma_regs; /* of connections closed: rendezvous sends done,
							       * refused, buffers exposed */
	_Atomic unsigned long adopted; /* connections taken over across exec (share/handover.c) */
};
/* In the fork-local page (common/forklocal.h): a forked child starts its
 * counts at zero, since what the parent counted is the parent's, and a
 * fork-per-connection server's children would otherwise each report every
 * connection accepted before them. */
#define ssw_counters (*(struct ssw_counter_set *)ssw_fl->counters)
void ssw_stats_account_closed(struct ssw_sock *s);
void ssw_stats_dump_at_exit(void);
/* Tries SOCKSWITCH_STATS_FILE at start-up: an unusable one is said once, then. */
void ssw_stats_check_file(void);

/* Raise SIGPIPE on the calling thread, as the kernel does for EPIPE. */
void ssw_raise_sigpipe(void);

#endif
