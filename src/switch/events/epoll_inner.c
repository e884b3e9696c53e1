/* epoll_inner.c — what an epoll fd with side entries holds in the kernel: the
 * kick eventfd and the inner epoll set of its members' wait fds (their
 * doorbells), both registered in it under private tags. */
#include "switch/events/epoll_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <sys/eventfd.h>

void epx_wfd_unregister(struct epx *x, struct epx_entry *e)
{
	for (int i = 0; i < e->nwfd; i++)
		(void)sys_epoll_ctl(x->inner, EPOLL_CTL_DEL, e->wfd[i], NULL);
	e->nwfd = 0;
}

/* Put the member's wait fds in the inner set: how many (0: it has none,
 * the peer is gone), or -1 when they cannot be (the same connection twice
 * in the set through a dup): then it is polled. */
int epx_wfd_register(struct epx *x, struct epx_entry *e)
{
	int fds[WFD_MAX];
	e->wfd_gen = ssw_session_fds_gen(e->s->sess);
	int k = ssw_session_fds(e->s->sess, fds, WFD_MAX);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)e->gen << 32 | (uint32_t)e->fd };
	for (int i = 0; i < k; i++) {
		if (sys_epoll_ctl(x->inner, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
			epx_wfd_unregister(x, e);
			return -1;
		}
		e->wfd[e->nwfd++] = fds[i];
	}
	return k;
}

void epx_kick(struct epx *x)
{
	if (x->kick >= 0) {
		uint64_t one = 1;
		(void)!sys_write(x->kick, &one, sizeof one);
	}
}

void epx_kick_drain(int fd)
{
	uint64_t v;
	(void)!sys_read(fd, &v, sizeof v);
}

/* The kick eventfd and the inner set of x, created and registered with the
 * kernel on the first side entry; this also checks that epfd is an epoll fd
 * (as the kernel's epoll_ctl would: EBADF, EINVAL). */
static int hidden_fd(struct epx *x, int fd, uint64_t tag)
{
	if (fd < 0)
		return -errno;
	fd = ssw_fd_hide(fd);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
	if (sys_epoll_ctl(x->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = errno;
		sys_close(fd);
		return -e;
	}
	return fd;
}

int epx_kick_setup(struct epx *x)
{
	if (x->kick < 0) {
		int k = hidden_fd(x, sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), EPX_KICK_TAG);
		if (k < 0)
			return k;
		x->kick = k;
	}
	if (x->inner < 0) {
		int in = hidden_fd(x, sys_epoll_create1(EPOLL_CLOEXEC), EPX_INNER_TAG);
		if (in < 0)
			return in;
		x->inner = in;
	}
	return 0;
}

int ssw_epoll_filter(struct epoll_event *ev, int n)
{
	int w = 0;
	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 != EPX_KICK_TAG && ev[i].data.u64 != EPX_INNER_TAG)
			ev[w++] = ev[i];
	return w;
}
