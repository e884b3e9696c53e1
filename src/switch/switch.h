/* switch.h — the switch's entry points, called by the interposition layer.
 * Functions taking an fd decide themselves whether the fd is theirs; those
 * taking a struct ssw_sock are called only for switched sockets.  They return
 * a result >= 0 or -errno; SSW_PASS means "not the switch's business: make
 * the kernel call" (the interposition layer then calls libc). */
#ifndef SSW_SWITCH_H
#define SSW_SWITCH_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "switch/route.h"
#include "switch/sock.h"

#define SSW_PASS (-100000)

/* Initialise once (config, routes, providers).  false: the switch is off in
 * this process (disabled, or could not start): everything goes to the kernel. */
bool ssw_init(void);
extern struct ssw_routes ssw_routes_table;

/* The provider a route target names, checked and started (init.c); NULL:
 * kernel TCP (tcp, not built, refused or failed to start). */
const struct ssw_provider *ssw_provider_for(int t);

/* Set-up */
int ssw_connect(int fd, const struct sockaddr *addr, socklen_t len);
int ssw_listen(int fd, int backlog);
int ssw_accept(struct ssw_sock *s, int fd, struct sockaddr *addr, socklen_t *len, int flags);
/* A listener's provider side has a connection accept would take now. */
bool ssw_listener_ready(struct ssw_sock *s);
int ssw_connect_poll(struct ssw_sock *s, int fd, int wait_ms);
void ssw_sock_load_opts(struct ssw_sock *s, int fd);

/* Data */
ssize_t ssw_send(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t ssw_recv(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t ssw_sendfile(struct ssw_sock *s, int in_fd, off_t *offset, size_t count);
/* splice between a pipe and a switched socket (either way round). */
ssize_t ssw_splice_from_pipe(struct ssw_sock *s, int pipe_fd, size_t len, unsigned flags);
ssize_t ssw_splice_to_pipe(struct ssw_sock *s, int pipe_fd, size_t len, unsigned flags);
int ssw_shutdown(struct ssw_sock *s, int how);
/* close(2) for any fd: drops the switch's entry, then closes the kernel fd. */
int ssw_close(int fd);
/* The fd `newfd` now refers to the same socket as `oldfd` (dup family):
 * what the switch knows of oldfd (entry, fd info, relayed) goes to newfd too. */
void ssw_dup(int oldfd, int newfd);
/* A new fd from outside the switch's view (SCM_RIGHTS): forget the number. */
void ssw_fd_fresh(int fd);
/* close_range(2) without CLOSE_RANGE_CLOEXEC: close() each switched fd in [lo, hi]. */
void ssw_close_range(unsigned lo, unsigned hi);

/* Options and control */
int ssw_getsockopt(struct ssw_sock *s, int fd, int level, int opt, void *val, socklen_t *len);
int ssw_setsockopt(struct ssw_sock *s, int fd, int level, int opt, const void *val, socklen_t len);
int ssw_ioctl(struct ssw_sock *s, int fd, unsigned long req, void *arg, bool *handled);
void ssw_fcntl_setfl(struct ssw_sock *s, int flags);
void ssw_fcntl_setown(struct ssw_sock *s, int owner);
/* The socket's last descriptor was closed: out of every epoll set. */
void ssw_epoll_drop_sock(struct ssw_sock *s);
int ssw_getsockname(struct ssw_sock *s, struct sockaddr *a, socklen_t *l);
int ssw_getpeername(struct ssw_sock *s, struct sockaddr *a, socklen_t *l);

/* Readiness */
int ssw_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask);
int ssw_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev, bool *handled);
int ssw_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask, bool *handled);
void ssw_epoll_forget(int epfd);
/* An epoll fd of ours watched from outside (poll, or another epoll fd):
 * 1 if a switched member is ready now, 0 if not, -1 if it has none. */
int ssw_epoll_peek(int epfd);
bool ssw_epoll_has_members(int epfd);
/* Sleeping on such an epoll fd from outside: arm its switched members (see
 * ssw_ev_arm in evwait.h for the return values), then after the sleep
 * ssw_session_sleep_done + ssw_sock_put each armed/held. */
int ssw_epoll_arm_members(int epfd, struct pollfd *pf, int n, int *nout, struct ssw_session **armed,
			  struct ssw_sock **held, int hmax, int *na);
/* This process may have taken s's doorbell itself (it slept on s), or
 * changed s's readiness (shutdown, options): epoll sets holding s look at
 * it again. */
void ssw_epoll_touch(struct ssw_sock *s);

/* A listener listens on a provider whose endpoints cannot be shared
 * between processes (no SSW_CAP_SHARED_CONTEXT). */
bool ssw_listen_has_private(const struct ssw_sock *s);
/* Close those provider listeners (fork: in both processes), under s->lock;
 * their names are appended to names.  Returns how many were closed. */
int ssw_listen_drop_private(struct ssw_sock *s, char *names, size_t len);

/* fork (fork.c): holders of fork-shared sessions */
void ssw_fork_begin(void);
void ssw_fork_end(pid_t pid);
/* Around creating or closing a session, so a fork sees all or none of it. */
void ssw_fork_guard_enter(void);
void ssw_fork_guard_leave(void);

/* Statistics (stats.c) */
struct ssw_counters {
	_Atomic unsigned long switched, fallback, bytes_sent, bytes_received;
};
extern struct ssw_counters ssw_counters;
void ssw_stats_account_closed(struct ssw_sock *s);
void ssw_stats_dump_at_exit(void);
/* Tries SOCKSWITCH_STATS_FILE at start-up: an unusable one is said once, then. */
void ssw_stats_check_file(void);

/* Raise SIGPIPE on the calling thread, as the kernel does for EPIPE. */
void ssw_raise_sigpipe(void);

#endif
