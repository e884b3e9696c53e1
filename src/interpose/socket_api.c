/* socket_api.c — interposed socket set-up and control calls: thin wrappers
 * that find the switched socket by fd and call the switch, or go to libc. */
#include "interpose/interpose.h"

#include "common/provfds.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/close_range.h>

/* A new fd from the kernel: any entry left at that number is stale (its
 * socket was closed behind our back, e.g. by fclose). */
static int fresh(int fd)
{
	if (fd >= 0)
		ssw_fd_fresh(fd);
	return fd;
}

/* A provider's own descriptors (libfabric opens its sockets inheritable) are
 * close-on-exec: a program the application starts without fork (posix_spawn,
 * where no fork hook runs) would keep them, and with them the provider's
 * listening port listening after the application is gone. */
/* A provider's IPv6 sockets serve IPv6 only: a fabric listener holds the
 * port for the family its application listener holds, no more (the switch
 * makes a second, IPv4 one for a dual-stack listener: listen.c).  A
 * dual-stack one on [::] for a v6-only [::]:P would hold IPv4 P + offset,
 * which another user's IPv4 listener on P then cannot take. */
static int provider_socket(int domain, int type, int protocol)
{
	int fd = REAL(socket)(domain, type | SOCK_CLOEXEC, protocol);
	if (fd >= 0 && domain == AF_INET6) {
		int one = 1;
		REAL(setsockopt)(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	}
	return fd;
}

EXPORT int socket(int domain, int type, int protocol)
{
	PROVIDER_PASS(provider_socket(domain, type, protocol));
	int fd = fresh(REAL(socket)(domain, type, protocol));
	if (fd >= 0)
		ssw_fd_socket(fd, domain, type, protocol);
	return fd;
}

/* A provider's listening port (fabric: P + port-offset) is shared by the
 * processes that listen on P: each pre-forked worker listens there on its
 * own (setup/listen.c) and the kernel spreads the requests among them.
 * SO_REUSEPORT joins only sockets of the same user: another user's socket
 * on that port still makes the bind fail (Security, "The fabric port"). */
static int provider_bind(int fd, const struct sockaddr *a, socklen_t l)
{
	if (a && l >= sizeof(struct sockaddr_in) && (a->sa_family == AF_INET || a->sa_family == AF_INET6) &&
	    ((const struct sockaddr_in *)a)->sin_port != 0) {
		int one = 1;
		(void)REAL(setsockopt)(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
	}
	return REAL(bind)(fd, a, l);
}

EXPORT int bind(int fd, const struct sockaddr *a, socklen_t l)
{
	PROVIDER_PASS(provider_bind(fd, a, l));
	int r = REAL(bind)(fd, a, l);
	if (r == 0)
		ssw_fd_bound(fd);
	return r;
}

/* A provider's socketpair: libfabric's completion signal, whose two ends a
 * relay process must both keep (common/provfds.h). */
static int provider_socketpair(int d, int t, int p, int sv[2])
{
	int r = REAL(socketpair)(d, t | SOCK_CLOEXEC, p, sv);
	if (r == 0)
		ssw_provfd_pair(sv[0], sv[1]);
	return r;
}

EXPORT int socketpair(int d, int t, int p, int sv[2])
{
	PROVIDER_PASS(provider_socketpair(d, t, p, sv));
	int r = REAL(socketpair)(d, t, p, sv);
	if (r == 0) {
		fresh(sv[0]);
		fresh(sv[1]);
	}
	return r;
}

EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	PROVIDER_PASS(REAL(connect)(fd, addr, len));
	ssw_statreg_answer();
	if (!ssw_init())
		return REAL(connect)(fd, addr, len);
	SSW_RET(ssw_connect(fd, addr, len));
}

EXPORT int listen(int fd, int backlog)
{
	PROVIDER_PASS(REAL(listen)(fd, backlog));
	if (!ssw_init())
		return REAL(listen)(fd, backlog);
	SSW_RET(ssw_listen(fd, backlog));
}

EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	PROVIDER_PASS(REAL(accept4)(fd, addr, len, flags | SOCK_CLOEXEC));
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s || !ssw_sock_listening(s)) {
		ssw_sock_put(s);
		return fresh(REAL(accept4)(fd, addr, len, flags));
	}
	/* switched accepts get their own fdinfo-free socket: nothing to cache */
	int r = ssw_accept(s, fd, addr, len, flags);
	ssw_sock_put(s);
	SSW_RET(r);
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	PROVIDER_PASS(REAL(accept4)(fd, addr, len, SOCK_CLOEXEC));
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s || !ssw_sock_listening(s)) {
		ssw_sock_put(s);
		return fresh(REAL(accept)(fd, addr, len));
	}
	int r = ssw_accept(s, fd, addr, len, 0);
	ssw_sock_put(s);
	SSW_RET(r);
}

EXPORT int shutdown(int fd, int how)
{
	PROVIDER_PASS(REAL(shutdown)(fd, how));
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s)
		return REAL(shutdown)(fd, how);
	int r = ssw_shutdown(s, how);
	ssw_statreg_changed(fd, s);
	ssw_sock_put(s);
	if (r == SSW_PASS)
		return REAL(shutdown)(fd, how);
	SSW_RET(r);
}

static int provider_close(int fd)
{
	ssw_provfd_closed(fd);
	return REAL(close)(fd);
}

EXPORT int close(int fd)
{
	PROVIDER_PASS(provider_close(fd));
	ssw_provfd_closed(fd); /* one the application closed under the provider */
	ssw_statreg_changed(fd, NULL); /* a watched process shows the socket gone at once */
	SSW_RET(ssw_fd_close(fd));
}

/* close_range: the switch lets go of each switched socket in the range as
 * close() does (a forked child closing everything must drop its holds). */
EXPORT int close_range(unsigned lo, unsigned hi, int flags)
{
	if (!(flags & CLOSE_RANGE_CLOEXEC) && lo <= hi)
		ssw_fd_close_range(lo, hi);
	if (!ssw_real.close_range)
		ssw_real_init();
	if (ssw_real.close_range)
		return ssw_real.close_range(lo, hi, flags);
	return sys_close_range(lo, hi, flags);
}

EXPORT int dup(int fd)
{
	PROVIDER_PASS(REAL(dup)(fd));
	int n = REAL(dup)(fd);
	if (n >= 0)
		ssw_fd_dup(fd, n, false);
	return n;
}

EXPORT int dup2(int fd, int nfd)
{
	PROVIDER_PASS(REAL(dup2)(fd, nfd));
	if (fd == nfd)
		return REAL(dup2)(fd, nfd);
	int r = REAL(dup2)(fd, nfd);
	if (r >= 0)
		ssw_fd_dup(fd, r, true); /* dup2 closed whatever nfd was */
	return r;
}

EXPORT int dup3(int fd, int nfd, int flags)
{
	PROVIDER_PASS(REAL(dup3)(fd, nfd, flags));
	int r = REAL(dup3)(fd, nfd, flags);
	if (r >= 0)
		ssw_fd_dup(fd, r, true);
	return r;
}

EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	PROVIDER_PASS(REAL(fcntl)(fd, cmd, arg));
	int r = REAL(fcntl)(fd, cmd, arg);
	if (r < 0)
		return r;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		ssw_fd_dup(fd, r, false);
	else if (cmd == F_SETFL)
		ssw_fd_setfl(fd, (int)(long)arg);
	else if (cmd == F_SETOWN)
		ssw_fd_setown(fd, (int)(long)arg);
	return r;
}

EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl(fd, cmd, arg);
}

EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	PROVIDER_PASS(REAL(ioctl)(fd, req, arg));
	if (req == FIONBIO && arg)
		ssw_fd_nonblock(fd, *(int *)arg != 0);
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		bool handled;
		int r = ssw_ioctl(s, fd, req, arg, &handled);
		ssw_sock_put(s);
		if (handled)
			SSW_RET(r);
	}
	return REAL(ioctl)(fd, req, arg);
}

EXPORT int getsockopt(int fd, int level, int opt, void *val, socklen_t *len)
{
	PROVIDER_PASS(REAL(getsockopt)(fd, level, opt, val, len));
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s) {
		int q = ssw_relayed_answer(fd, SSW_RQ_GETOPT, level, opt, val, len);
		if (q != SSW_PASS)
			SSW_RET(q);
		return REAL(getsockopt)(fd, level, opt, val, len);
	}
	int r = ssw_getsockopt(s, fd, level, opt, val, len);
	ssw_sock_put(s);
	if (r == SSW_PASS)
		return REAL(getsockopt)(fd, level, opt, val, len);
	SSW_RET(r);
}

EXPORT int setsockopt(int fd, int level, int opt, const void *val, socklen_t len)
{
	PROVIDER_PASS(REAL(setsockopt)(fd, level, opt, val, len));
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s) {
		socklen_t l = len;
		int q = ssw_relayed_answer(fd, SSW_RQ_SETOPT, level, opt, (void *)val, &l);
		if (q != SSW_PASS)
			SSW_RET(q);
		ssw_fd_opt_set(fd, level, opt);
		return REAL(setsockopt)(fd, level, opt, val, len);
	}
	int r = ssw_setsockopt(s, fd, level, opt, val, len);
	ssw_sock_put(s);
	SSW_RET(r);
}

EXPORT int getsockname(int fd, struct sockaddr *a, socklen_t *l)
{
	PROVIDER_PASS(REAL(getsockname)(fd, a, l));
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s) {
		int q = ssw_relayed_answer(fd, SSW_RQ_SOCKNAME, 0, 0, a, l);
		if (q != SSW_PASS)
			SSW_RET(q);
		return REAL(getsockname)(fd, a, l);
	}
	int r = ssw_getsockname(s, a, l);
	ssw_sock_put(s);
	if (r == SSW_PASS)
		return REAL(getsockname)(fd, a, l);
	SSW_RET(r);
}

EXPORT int getpeername(int fd, struct sockaddr *a, socklen_t *l)
{
	PROVIDER_PASS(REAL(getpeername)(fd, a, l));
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s) {
		int q = ssw_relayed_answer(fd, SSW_RQ_PEERNAME, 0, 0, a, l);
		if (q != SSW_PASS)
			SSW_RET(q);
		return REAL(getpeername)(fd, a, l);
	}
	int r = ssw_getpeername(s, a, l);
	ssw_sock_put(s);
	if (r == SSW_PASS)
		return REAL(getpeername)(fd, a, l);
	SSW_RET(r);
}

/* Other calls that create fds: a reused number must not look switched. */
EXPORT int pipe(int fds[2])
{
	PROVIDER_PASS(sys_pipe2(fds, 0));
	int r = sys_pipe2(fds, 0);
	if (r == 0) {
		fresh(fds[0]);
		fresh(fds[1]);
	}
	return r;
}

EXPORT int pipe2(int fds[2], int flags)
{
	PROVIDER_PASS(sys_pipe2(fds, flags));
	int r = sys_pipe2(fds, flags);
	if (r == 0) {
		fresh(fds[0]);
		fresh(fds[1]);
	}
	return r;
}

EXPORT int eventfd(unsigned int v, int flags)
{
	PROVIDER_PASS(sys_eventfd(v, flags));
	return fresh(sys_eventfd(v, flags));
}

EXPORT int epoll_create(int size)
{
	/* libfabric's own sets (its accept thread makes them while an
	 * application thread may hold the epoll table's lock) */
	PROVIDER_PASS(size <= 0 ? (errno = EINVAL, -1) : sys_epoll_create1(0));
	if (size <= 0) {
		errno = EINVAL;
		return -1;
	}
	int r = fresh(sys_epoll_create1(0));
	if (r >= 0)
		ssw_fd_epoll(r);
	return r;
}

EXPORT int epoll_create1(int flags)
{
	PROVIDER_PASS(sys_epoll_create1(flags));
	int r = fresh(sys_epoll_create1(flags));
	if (r >= 0)
		ssw_fd_epoll(r);
	return r;
}
