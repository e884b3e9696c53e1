/* epoll_ctl.c — epoll_ctl with switched sockets: side entries added, changed
 * and removed (listeners with the kernel too), epoll fds nested in epoll fds
 * remembered. */
#include "switch/events/epoll_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

/* epoll_ctl of an epoll fd with switched members into another epoll fd:
 * the kernel registers it (its kernel members), we remember it for the
 * switched ones.  Called with epx_lock. */
static void nested_ctl(int epfd, int op, int fd, const struct epoll_event *ev)
{
	if (!(ssw_fdinfo_get(fd) & SSW_FI_EPOLL))
		return;
	struct epx *x = epx_find(epfd, false);
	if (!x && op != EPOLL_CTL_ADD)
		return;
	if (!x && !(x = epx_find(epfd, true)))
		return;
	struct epx_nested **pp = &x->nested;
	while (*pp && (*pp)->fd != fd)
		pp = &(*pp)->next;
	if (op == EPOLL_CTL_DEL) {
		if (*pp) {
			struct epx_nested *d = *pp;
			*pp = d->next;
			free(d);
		}
		return;
	}
	if (!ev || (!*pp && op != EPOLL_CTL_ADD))
		return;
	if (!*pp && !(*pp = calloc(1, sizeof **pp)))
		return;
	(*pp)->fd = fd;
	(*pp)->events = ev->events;
	(*pp)->data = ev->data;
}

/* The switch's part of epoll_ctl on a side entry (called with epx_lock). */
static int side_ctl(struct epx *x, struct epx_entry **pp, int op, int fd, struct ssw_sock **sp,
		    const struct epoll_event *ev)
{
	switch (op) {
	case EPOLL_CTL_ADD:
		if (pp)
			return -EEXIST;
		if (!epx_new_entry(x, fd, *sp, ev))
			return -ENOMEM;
		*sp = NULL; /* the entry keeps the reference */
		epx_kick(x);
		return 0;
	case EPOLL_CTL_MOD: {
		if (!pp)
			return -ENOENT;
		struct epx_entry *e = *pp;
		if ((ev->events & EPOLLEXCLUSIVE) || (e->events & EPOLLEXCLUSIVE))
			return -EINVAL;
		e->events = ev->events;
		e->data = ev->data;
		e->disabled = false;
		e->last = 0; /* the kernel re-checks readiness on MOD */
		epx_q_push(x, e);
		epx_kick(x);
		return 0;
	}
	case EPOLL_CTL_DEL:
		if (!pp)
			return -ENOENT;
		epx_free_entry(x, *pp);
		return 0;
	}
	return -EINVAL;
}

int ssw_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev, bool *handled)
{
	*handled = false;
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s && (ssw_fdinfo_get(fd) & SSW_FI_EPOLL) && __atomic_load_n(&epx_all, __ATOMIC_RELAXED)) {
		/* an epoll fd into an epoll fd: the kernel decides; we remember it */
		*handled = true;
		if (sys_epoll_ctl(epfd, op, fd, ev) < 0)
			return -errno;
		pthread_mutex_lock(&epx_lock);
		nested_ctl(epfd, op, fd, ev);
		pthread_mutex_unlock(&epx_lock);
		return 0;
	}
	if (!s && !__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = epx_find(epfd, s != NULL && op == EPOLL_CTL_ADD);
	struct epx_entry **pp = x ? epx_find_entry(x, fd) : NULL;
	int rc = 0;
	if (!s && pp && op != EPOLL_CTL_ADD && SYS_(fcntl, fd, F_GETFD) < 0) {
		pthread_mutex_unlock(&epx_lock);
		return 0; /* a closed fd: the kernel says EBADF */
	}
	if (!s || (pp && (*pp)->s != s)) {
		/* no longer ours (fell back to TCP), or another socket now has the
		 * number: forget the side entry; the kernel decides the rest */
		if (pp && (op == EPOLL_CTL_DEL || op == EPOLL_CTL_MOD || op == EPOLL_CTL_ADD)) {
			epx_free_entry(x, *pp);
			if (op == EPOLL_CTL_MOD) { /* it was never in the kernel set */
				pthread_mutex_unlock(&epx_lock);
				ssw_sock_put(s);
				*handled = true;
				return sys_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, ev) < 0 ? -errno : 0;
			}
			if (op == EPOLL_CTL_DEL) {
				pthread_mutex_unlock(&epx_lock);
				ssw_sock_put(s);
				*handled = true;
				return 0;
			}
		}
		if (!s) {
			pthread_mutex_unlock(&epx_lock);
			return 0;
		}
		pp = NULL;
	}
	if (!x) {
		pthread_mutex_unlock(&epx_lock);
		ssw_sock_put(s);
		if (op == EPOLL_CTL_ADD)
			return -ENOMEM;
		/* MOD/DEL of a switched fd this epoll fd never saw: the kernel
		 * gives the error (ENOENT, EBADF, EINVAL) */
		return 0;
	}
	*handled = true;
	if (epfd == fd) {
		rc = -EINVAL;
		goto out;
	}
	if (op != EPOLL_CTL_DEL && !ev) {
		rc = -EFAULT;
		goto out;
	}
	if (op == EPOLL_CTL_ADD && (ev->events & EPOLLEXCLUSIVE) &&
	    (ev->events & ~(uint32_t)(EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE |
				     EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND))) {
		rc = -EINVAL; /* as the kernel: EXCLUSIVE with ONESHOT, RDHUP, ... */
		goto out;
	}
	bool listener = s->state == SSW_ST_LISTENING;
	if (op == EPOLL_CTL_ADD && !pp) {
		rc = epx_kick_setup(x);
		if (rc < 0)
			goto out;
	}
	if (listener) {
		/* registered with the kernel too: its answer decides errors */
		if (sys_epoll_ctl(epfd, op, fd, ev) < 0) {
			rc = -errno;
			goto out;
		}
	}
	rc = side_ctl(x, pp, op, fd, &s, ev);
out:
	pthread_mutex_unlock(&epx_lock);
	ssw_sock_put(s);
	return rc;
}
