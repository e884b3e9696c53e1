/* api.h — the switch as the interposition layer sees it: entry points and an
 * opaque socket handle, nothing of the switch's structures or tables.
 * Functions taking an fd decide themselves whether the fd is theirs; those
 * taking a struct ssw_sock are called only with a handle from ssw_sock_get.
 * They return a result >= 0 or -errno; SSW_PASS means "not the switch's
 * business: make the kernel call" (the interposition layer then calls libc). */
#ifndef SSW_API_H
#define SSW_API_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#define SSW_PASS (-100000)

/* `sockswitch stat`: ssw_statreg_answer() (a reader rang: answer, at a call's
 * entry, no lock held) and ssw_statreg_changed() (a socket changed state),
 * inline checks of two loads (switch/stat/statreg.h). */
#include "switch/stat/statreg.h"

/* A switched socket (listener or connection).  Its contents are the switch's. */
struct ssw_sock;

/* At load, before any call: the fd table exists from the start so that
 * socket() can record what it made. */
int ssw_fdtab_init(void);
/* At load, while the process has one thread: when the settings may use a
 * registration cache, patch the C library's mapping calls so that the cache
 * hears of every unmap first (common/memhook.h). */
void ssw_mem_monitor_start(void);
/* Initialise once (config, routes, providers).  false: the switch is off in
 * this process (disabled, or could not start): everything goes to the kernel. */
bool ssw_init(void);

/* The switched socket at fd with a reference (pair with ssw_sock_put), or
 * NULL when the fd is not the switch's: the one table load a plain fd costs. */
struct ssw_sock *ssw_sock_get(int fd);
void ssw_sock_put(struct ssw_sock *s);
bool ssw_sock_listening(const struct ssw_sock *s);
/* Any of these fds is a switched socket. */
bool ssw_fdtab_any(const int *fds, int n);

/* What the interposition layer saw happen to an fd through the kernel
 * (the switch keeps what it needs of it). */
void ssw_fd_socket(int fd, int domain, int type, int protocol); /* socket() made fd */
void ssw_fd_bound(int fd);
void ssw_fd_setfl(int fd, int flags);          /* fcntl(F_SETFL) */
void ssw_fd_setown(int fd, int owner);         /* fcntl(F_SETOWN) */
void ssw_fd_nonblock(int fd, bool on);         /* ioctl(FIONBIO) */
void ssw_fd_opt_set(int fd, int level, int opt); /* setsockopt on a kernel socket */
void ssw_fd_epoll(int fd);                     /* epoll_create made fd */
/* A new fd from outside the switch's view (SCM_RIGHTS, pipe, eventfd, a
 * kernel accept): whatever the switch knew of that number is stale. */
void ssw_fd_fresh(int fd);
/* The dup family made newfd refer to oldfd's file; `replaced`: newfd was
 * chosen by the caller (dup2, dup3), so it may have closed another file. */
void ssw_fd_dup(int oldfd, int newfd, bool replaced);
/* close(2) for any fd: the switch forgets it, then closes the kernel fd. */
int ssw_fd_close(int fd);
/* close_range(2) without CLOSE_RANGE_CLOEXEC, before the kernel's: each
 * switched fd in [lo, hi] is let go of as close() does. */
void ssw_fd_close_range(unsigned lo, unsigned hi);

/* A provider's own library changed one of its epoll sets (an epoll_ctl in
 * ssw_provider_calls that succeeded): told to the providers (own_epoll_ctl). */
void ssw_provider_own_epoll_ctl(int epfd, int op, int fd, const struct epoll_event *ev);
/* Every usable provider's quiesce: this process ends without exit handlers. */
void ssw_providers_quiesce(void);

/* Set-up */
int ssw_connect(int fd, const struct sockaddr *addr, socklen_t len);
int ssw_listen(int fd, int backlog);
int ssw_accept(struct ssw_sock *s, int fd, struct sockaddr *addr, socklen_t *len, int flags);

/* Data */
ssize_t ssw_send(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t ssw_recv(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t ssw_sendfile(struct ssw_sock *s, int in_fd, off_t *offset, size_t count);
/* splice between a pipe and a switched socket (either way round). */
ssize_t ssw_splice_from_pipe(struct ssw_sock *s, int pipe_fd, size_t len, unsigned flags);
ssize_t ssw_splice_to_pipe(struct ssw_sock *s, int pipe_fd, size_t len, unsigned flags);
int ssw_shutdown(struct ssw_sock *s, int how);

/* Options and control */
int ssw_getsockopt(struct ssw_sock *s, int fd, int level, int opt, void *val, socklen_t *len);
int ssw_setsockopt(struct ssw_sock *s, int fd, int level, int opt, const void *val, socklen_t len);
int ssw_ioctl(struct ssw_sock *s, int fd, unsigned long req, void *arg, bool *handled);
int ssw_getsockname(struct ssw_sock *s, struct sockaddr *a, socklen_t *l);
int ssw_getpeername(struct ssw_sock *s, struct sockaddr *a, socklen_t *l);
/* An fd that is no switched socket may carry a switched connection through
 * a relay process (relay.h): getsockname, getpeername, get/setsockopt are
 * answered for it here (val = sockaddr, len = its length for the names);
 * SSW_PASS: not such an fd, or the kernel's answer is the right one. */
enum ssw_relayed_q { SSW_RQ_SOCKNAME, SSW_RQ_PEERNAME, SSW_RQ_GETOPT, SSW_RQ_SETOPT };
int ssw_relayed_answer(int fd, enum ssw_relayed_q q, int level, int opt, void *val, socklen_t *len);

/* Readiness */
int ssw_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask);
int ssw_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev, bool *handled);
int ssw_epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *mask, bool *handled);
bool ssw_epoll_has_members(int epfd);
/* Drop the switch's own kick events (events/epoll_inner.c) from events a
 * plain kernel epoll_wait returned; returns how many are left. */
int ssw_epoll_filter(struct epoll_event *ev, int n);

/* fork: holders of fork-shared sessions (around the C library's fork) */
void ssw_fork_begin(void);
void ssw_fork_end(pid_t pid);
/* The process's user ids just changed (setuid and kin): its connections stop
 * sharing memory with the processes it was forked from (privdrop.c). */
void ssw_privdrop_unshare(void);
/* _exit, _Exit: transports others sharing a connection need go to them
 * first (share/exit.c). */
void ssw_exit_hand_over(void);

/* exec, spawn and fds sent to other processes: switched connections go
 * through relay processes (relay.h). */
#define SSW_EXEC_KEEP_MAX 64
/* Descriptors whose close-on-exec was taken off for an exec (put back if it fails). */
struct ssw_exec_keep {
	int n;
	int fd[SSW_EXEC_KEEP_MAX];
	int nmade;
	int made[SSW_EXEC_KEEP_MAX]; /* made for the new image (handover.c): closed if the exec fails */
};
struct ssw_exec_undo {
	struct ssw_sock **dropped; /* holds given up for the exec, given back if it fails */
	int n;
	struct ssw_exec_keep keep; /* listeners' provider descriptors kept open for the new image */
	char inherit[2048];        /* the new image's SOCKSWITCH_INHERIT ("": none) */
};
/* Before exec (in_place) or posix_spawn (!in_place): hand every switched
 * connection the new program inherits to it (an exec whose image loads the
 * switch: adopt) or to a relay; for an exec, also give up this image's
 * hold of the others. */
void ssw_exec_prepare(bool in_place, bool adopt, struct ssw_exec_undo *u);
/* The exec failed: this image holds its connections again. */
void ssw_exec_failed(struct ssw_exec_undo *u);
/* At load, in an image exec'd with switched listeners: SOCKSWITCH_INHERIT's
 * value (setup/exec.c); the switch starts and takes them back. */
void ssw_exec_inherited(const char *spec);
/* Before passing fds to another process (SCM_RIGHTS): relay the switched
 * connections among them.  Those fds stay usable here, through the relay. */
void ssw_relay_fds(const int *fds, int n);
/* After receiving fds (SCM_RIGHTS): those that are a relay's end of a
 * switched connection become the connection itself, taken over from the
 * relay (share/handover_pass.c) where it can be. */
void ssw_handover_received(const int *fds, int n);
/* Any switched socket in this process (vfork then behaves as fork). */
bool ssw_has_switched(void);

#endif
