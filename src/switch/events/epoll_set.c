/* epoll_set.c — the switch's side of each epoll fd: its side entries, found by
 * fd and by tag, and the lists a wait looks at (check list, polled list, hot
 * members); taken over by a forked child; dropped with the fd or the socket.
 * The design: epoll_priv.h. */
#include "switch/events/epoll_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct epx *epx_all;
static uint32_t gen_next;

/* fork (switch/share/fork.c): no other thread of ours may be halfway
 * through changing the sets when the child is made, or the child would
 * wait for a lock nobody there releases (soak seed 866200343: a thread in
 * epoll_wait, a fork, the child's first send) or read half-changed lists.
 * The lock is fork-local (the child's is a fresh one) and taken across the
 * fork, for a bounded time: a thread holding it may itself wait for the
 * fork (a socket's last reference dropped under it closes the session
 * behind the fork guard); then the child takes the sets as they are. */
void ssw_epoll_fork_begin(void)
{
	if (!__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 20 * 1000000L;
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_sec++, ts.tv_nsec -= 1000000000L;
	ssw_fl->epx_fork_held = pthread_mutex_timedlock(&epx_lock, &ts) == 0;
}

void ssw_epoll_fork_end(void)
{
	if (ssw_fl->epx_fork_held) {
		ssw_fl->epx_fork_held = false;
		pthread_mutex_unlock(&epx_lock);
	}
}

void epx_q_push(struct epx *x, struct epx_entry *e)
{
	if (e->queued || e->polled)
		return;
	e->queued = true;
	e->qnext = NULL;
	*x->qtail = e;
	x->qtail = &e->qnext;
}

struct epx_entry *epx_q_pop(struct epx *x)
{
	struct epx_entry *e = x->qhead;
	if (!e)
		return NULL;
	x->qhead = e->qnext;
	if (!x->qhead)
		x->qtail = &x->qhead;
	e->queued = false;
	return e;
}

static void q_remove(struct epx *x, struct epx_entry *e)
{
	if (!e->queued)
		return;
	struct epx_entry **pp = &x->qhead, *prev = NULL;
	while (*pp && *pp != e) {
		prev = *pp;
		pp = &(*pp)->qnext;
	}
	if (!*pp)
		return;
	*pp = e->qnext;
	if (x->qtail == &e->qnext)
		x->qtail = prev ? &prev->qnext : &x->qhead;
	e->queued = false;
}

void epx_p_remove(struct epx *x, struct epx_entry *e)
{
	if (!e->polled)
		return;
	for (struct epx_entry **pp = &x->polled; *pp; pp = &(*pp)->pnext)
		if (*pp == e) {
			*pp = e->pnext;
			break;
		}
	e->polled = false;
}

static void sock_unlink(struct epx_entry *e)
{
	for (struct epx_entry **pp = (struct epx_entry **)&e->s->ep_watch; *pp; pp = &(*pp)->snext)
		if (*pp == e) {
			*pp = e->snext;
			return;
		}
}

void epx_make_polled(struct epx *x, struct epx_entry *e)
{
	q_remove(x, e);
	if (e->polled)
		return;
	e->polled = true;
	e->pnext = x->polled;
	x->polled = e;
}

void epx_unwatch(struct epx_entry *e)
{
	if (e->armed && e->s->sess)
		ssw_session_unwatch(e->s->sess);
	e->armed = false;
	if (e->swapw) {
		e->swapw = false;
		e->x->nswapw--;
	}
}

/* A forked child inherits the sets with the parent's arms: its entries arm
 * again for themselves (an arm is a count in the shared ring). */
static void own(struct epx *x)
{
	pid_t me = ssw_pid();
	if (x->pid == me)
		return;
	x->pid = me;
	for (int i = 0; i < x->nhot; i++)
		x->hot[i]->hot = false;
	x->nhot = 0;
	for (int fd = 0; fd < x->nbyfd; fd++) {
		struct epx_entry *e = x->byfd[fd];
		if (e) {
			e->armed = e->swapw = false;
			epx_q_push(x, e);
		}
	}
	x->nswapw = 0;
}

struct epx *epx_find(int epfd, bool create)
{
	for (struct epx *x = epx_all; x; x = x->next)
		if (x->epfd == epfd) {
			own(x);
			return x;
		}
	if (!create)
		return NULL;
	struct epx *x = calloc(1, sizeof *x);
	if (x) {
		x->epfd = epfd;
		x->kick = x->inner = -1;
		x->pid = ssw_pid();
		x->qtail = &x->qhead;
		x->next = epx_all;
		epx_all = x;
	}
	return x;
}

struct epx_entry **epx_find_entry(struct epx *x, int fd)
{
	if (fd < 0 || fd >= x->nbyfd || !x->byfd[fd])
		return NULL;
	return &x->byfd[fd];
}

struct epx_entry *epx_by_tag(struct epx *x, uint64_t tag)
{
	int fd = (int)(uint32_t)tag;
	struct epx_entry **pp = epx_find_entry(x, fd);
	return pp && (*pp)->gen == (uint32_t)(tag >> 32) ? *pp : NULL;
}

static int byfd_grow(struct epx *x, int fd)
{
	if (fd < x->nbyfd)
		return 0;
	int n = x->nbyfd ? x->nbyfd : 64;
	while (n <= fd)
		n *= 2;
	struct epx_entry **b = realloc(x->byfd, (size_t)n * sizeof *b);
	if (!b)
		return -ENOMEM;
	memset(b + x->nbyfd, 0, (size_t)(n - x->nbyfd) * sizeof *b);
	x->byfd = b;
	x->nbyfd = n;
	return 0;
}

static void hot_remove(struct epx *x, struct epx_entry *e)
{
	for (int i = 0; e->hot && i < x->nhot; i++)
		if (x->hot[i] == e)
			x->hot[i] = x->hot[--x->nhot];
	e->hot = false;
}

void epx_free_entry(struct epx *x, struct epx_entry *e)
{
	hot_remove(x, e);
	q_remove(x, e);
	epx_p_remove(x, e);
	sock_unlink(e);
	if (x->inner >= 0)
		epx_wfd_unregister(x, e);
	epx_unwatch(e);
	if (e->fd < x->nbyfd && x->byfd[e->fd] == e)
		x->byfd[e->fd] = NULL;
	ssw_sock_unref(e->s);
	free(e);
	x->n--;
}

struct epx_entry *epx_new_entry(struct epx *x, int fd, struct ssw_sock *s, const struct epoll_event *ev)
{
	struct epx_entry *e = byfd_grow(x, fd) == 0 ? calloc(1, sizeof *e) : NULL;
	if (!e)
		return NULL;
	e->fd = fd;
	e->s = s;
	ssw_sock_keep(s); /* epoll_ctl's reference: the entry's from now on */
	e->x = x;
	e->gen = ++gen_next;
	e->events = ev->events;
	e->data = ev->data;
	e->snext = s->ep_watch;
	s->ep_watch = e;
	x->byfd[fd] = e;
	x->n++;
	if (s->state == SSW_ST_CONNECTED && s->sess)
		epx_q_push(x, e);
	else
		epx_make_polled(x, e);
	return e;
}

bool ssw_epoll_has_members(int epfd)
{
	if (!(ssw_fdinfo_get(epfd) & SSW_FI_EPOLL) || !__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = epx_find(epfd, false);
	bool r = x && x->n;
	pthread_mutex_unlock(&epx_lock);
	return r;
}

void ssw_epoll_forget(int epfd)
{
	if (!__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&epx_lock);
	for (struct epx **pp = &epx_all; *pp; pp = &(*pp)->next) {
		struct epx *x = *pp;
		if (x->epfd != epfd)
			continue;
		*pp = x->next;
		for (int fd = 0; fd < x->nbyfd; fd++)
			if (x->byfd[fd])
				epx_free_entry(x, x->byfd[fd]);
		free(x->byfd);
		if (x->kick >= 0)
			sys_close(x->kick);
		if (x->inner >= 0)
			sys_close(x->inner);
		while (x->nested) {
			struct epx_nested *q = x->nested;
			x->nested = q->next;
			free(q);
		}
		free(x);
		break;
	}
	pthread_mutex_unlock(&epx_lock);
}

void ssw_epoll_drop_sock(struct ssw_sock *s)
{
	if (!__atomic_load_n(&s->ep_watch, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&epx_lock);
	/* its last descriptor is gone: the kernel drops it from every set */
	while (s->ep_watch) {
		struct epx_entry *e = s->ep_watch;
		epx_free_entry(e->x, e);
	}
	pthread_mutex_unlock(&epx_lock);
}
