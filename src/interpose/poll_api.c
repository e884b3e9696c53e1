/* poll_api.c — interposed readiness calls: poll, ppoll, select, pselect and
 * epoll.  Calls that involve no switched fd go straight to libc. */
#include "interpose/interpose.h"

#include "common/provfds.h"

#include <stdlib.h>
#include <string.h>

/* glibc declares poll's array write-only (access attribute, for fortify),
 * yet poll reads fd and events by definition: GCC's uninitialized-read
 * warning about them is wrong. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

static bool any_switched(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		int fd = fds[i].fd;
		if (ssw_fdtab_any(&fd, 1) || ssw_epoll_has_members(fd))
			return true;
	}
	return false;
}

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	PROVIDER_PASS(REAL(poll)(fds, n, timeout));
	ssw_statreg_answer(); /* a reader of `sockswitch stat` rang */
	if (!any_switched(fds, n))
		return REAL(poll)(fds, n, timeout);
	struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000L };
	SSW_RET(ssw_poll(fds, n, timeout < 0 ? NULL : &ts, NULL));
}

EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof *fds < n)
		__builtin_trap();
	return poll(fds, n, timeout);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
	PROVIDER_PASS(REAL(ppoll)(fds, n, t, mask));
	ssw_statreg_answer(); /* a reader of `sockswitch stat` rang */
	if (!any_switched(fds, n))
		return REAL(ppoll)(fds, n, t, mask);
	SSW_RET(ssw_poll(fds, n, t, mask));
}

/* select in terms of poll: the same readiness rules as the kernel's
 * (hang-up and error count as readable, error as writable too). */
static int select_common(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *mask,
			 bool *handled)
{
	*handled = false;
	if (nfds <= 0 || nfds > FD_SETSIZE)
		return 0;
	ssw_statreg_answer();
	int fds[FD_SETSIZE], n = 0;
	for (int fd = 0; fd < nfds; fd++)
		if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))
			fds[n++] = fd;
	bool ours = ssw_fdtab_any(fds, n);
	for (int i = 0; i < n && !ours; i++)
		ours = ssw_epoll_has_members(fds[i]);
	if (!ours)
		return 0;
	*handled = true;
	struct pollfd *p = calloc((size_t)n + 1, sizeof *p);
	if (!p)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		p[i].fd = fds[i];
		if (r && FD_ISSET(fds[i], r))
			p[i].events |= POLLIN;
		if (w && FD_ISSET(fds[i], w))
			p[i].events |= POLLOUT;
		if (e && FD_ISSET(fds[i], e))
			p[i].events |= POLLPRI;
	}
	int rc = ssw_poll(p, (nfds_t)n, t, mask);
	if (rc >= 0) {
		int count = 0;
		for (int i = 0; i < n; i++) {
			short re = p[i].revents;
			if (re & POLLNVAL) {
				rc = -EBADF;
				break;
			}
			if (r && FD_ISSET(fds[i], r)) {
				if (re & (POLLIN | POLLHUP | POLLERR))
					count++;
				else
					FD_CLR(fds[i], r);
			}
			if (w && FD_ISSET(fds[i], w)) {
				if (re & (POLLOUT | POLLERR))
					count++;
				else
					FD_CLR(fds[i], w);
			}
			if (e && FD_ISSET(fds[i], e)) {
				if (re & POLLPRI)
					count++;
				else
					FD_CLR(fds[i], e);
			}
		}
		if (rc >= 0)
			rc = count;
	}
	free(p);
	return rc;
}

EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	bool handled;
	struct timespec ts, *tp = NULL;
	if (tv) {
		ts.tv_sec = tv->tv_sec;
		ts.tv_nsec = tv->tv_usec * 1000;
		tp = &ts;
	}
	uint64_t t0 = tv ? ssw_now_ns() : 0;
	int rc = select_common(nfds, r, w, e, tp, NULL, &handled);
	if (!handled)
		return REAL(select)(nfds, r, w, e, tv);
	if (tv) { /* Linux reports the time left */
		uint64_t used = ssw_now_ns() - t0, all = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		uint64_t left = used >= all ? 0 : all - used;
		tv->tv_sec = (time_t)(left / 1000000000ull);
		tv->tv_usec = (suseconds_t)(left % 1000000000ull / 1000);
	}
	SSW_RET(rc);
}

EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *mask)
{
	bool handled;
	int rc = select_common(nfds, r, w, e, t, mask, &handled);
	if (!handled)
		return REAL(pselect)(nfds, r, w, e, t, mask);
	SSW_RET(rc);
}

EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (__builtin_expect(ssw_provider_calls != 0, 0)) {
		/* a provider's own set: straight to the kernel, then told to the
		 * provider (which socket is whose, libfabric's interest in output) */
		int r = REAL(epoll_ctl)(epfd, op, fd, ev);
		if (r == 0)
			ssw_provider_own_epoll_ctl(epfd, op, fd, ev);
		return r;
	}
	bool handled = false;
	int r = ssw_epoll_ctl(epfd, op, fd, ev, &handled);
	if (!handled)
		return REAL(epoll_ctl)(epfd, op, fd, ev);
	SSW_RET(r);
}

/* A kernel epoll_wait that began before the first switched fd joined the
 * set can return the switch's kick event: hide it, and if nothing else came,
 * wait again (now through the switch) for the time left. */
static int after_kernel_wait(int epfd, struct epoll_event *ev, int max, int r, int timeout_ms, uint64_t t0,
			     const sigset_t *mask)
{
	if (r <= 0)
		return r;
	int n = ssw_epoll_filter(ev, r);
	if (n)
		return n;
	int left = timeout_ms;
	if (timeout_ms > 0) {
		uint64_t used = (ssw_now_ns() - t0) / 1000000ull;
		left = used >= (uint64_t)timeout_ms ? 0 : timeout_ms - (int)used;
	}
	bool handled;
	n = ssw_epoll_wait(epfd, ev, max, left, mask, &handled);
	if (!handled)
		n = ssw_epoll_filter(ev, sys_epoll_wait(epfd, ev, max, 0));
	SSW_RET(n);
}

EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	PROVIDER_PASS(REAL(epoll_wait)(epfd, ev, max, timeout));
	ssw_statreg_answer(); /* a reader of `sockswitch stat` rang */
	bool handled;
	int r = ssw_epoll_wait(epfd, ev, max, timeout, NULL, &handled);
	if (!handled) {
		uint64_t t0 = ssw_now_ns();
		return after_kernel_wait(epfd, ev, max, REAL(epoll_wait)(epfd, ev, max, timeout), timeout, t0, NULL);
	}
	SSW_RET(r);
}

EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
	PROVIDER_PASS(REAL(epoll_pwait)(epfd, ev, max, timeout, mask));
	ssw_statreg_answer(); /* a reader of `sockswitch stat` rang */
	bool handled;
	int r = ssw_epoll_wait(epfd, ev, max, timeout, mask, &handled);
	if (!handled) {
		uint64_t t0 = ssw_now_ns();
		return after_kernel_wait(epfd, ev, max, REAL(epoll_pwait)(epfd, ev, max, timeout, mask), timeout, t0,
					 mask);
	}
	SSW_RET(r);
}

EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *t, const sigset_t *mask)
{
	PROVIDER_PASS(REAL(epoll_pwait2)(epfd, ev, max, t, mask));
	ssw_statreg_answer(); /* a reader of `sockswitch stat` rang */
	bool handled;
	int ms = t ? (int)(t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000) : -1;
	int r = ssw_epoll_wait(epfd, ev, max, ms, mask, &handled);
	if (!handled) {
		uint64_t t0 = ssw_now_ns();
		return after_kernel_wait(epfd, ev, max, REAL(epoll_pwait2)(epfd, ev, max, t, mask), ms, t0, mask);
	}
	SSW_RET(r);
}
