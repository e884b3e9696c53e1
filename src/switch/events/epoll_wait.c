/* epoll_wait.c — epoll_wait with switched members: side and kernel events
 * merged (nested epoll fds too), the spin, then a sleep on the epoll fd and
 * the polled members' wait fds; arming for a sleeper outside (poll). */
#include "switch/events/epoll_priv.h"

#include "common/sys.h"
#include "switch/events/evwait.h"
#include "switch/stat/statreg.h"

#include <errno.h>
#include <stdlib.h>

#define ARM_FDS 4
#define RELOOK_MAX 8   /* looks in a row without sleeping, then the sleep decides */

/* Arm the polled members of x into pf (at most n fds); their sessions go
 * to armed[]/held[] (at most hmax, count in *na).  Called with epx_lock.
 * Returns SSW_EV_PENDING when a member has something (re-check first),
 * SSW_EV_NAP when not all could be armed, else SSW_EV_ARMED.  Members on
 * the check list sleep on the inner set (part of the epoll fd). */
static int arm_members(struct epx *x, struct pollfd *pf, int n, int *nout, struct ssw_session **armed,
		       struct ssw_sock **held, int hmax, int *na)
{
	epx_arm_hot(x);
	int k = 0, res = x->nap ? SSW_EV_NAP : SSW_EV_ARMED;
	if (x->again)
		res = SSW_EV_PENDING;
	for (struct epx_entry *e = x->polled; e && res != SSW_EV_PENDING; e = e->pnext) {
		if (e->disabled)
			continue;
		if (k + ARM_FDS > n || *na >= hmax) {
			res = SSW_EV_NAP;
			break;
		}
		int got = 0;
		struct ssw_session *a = NULL;
		int r = ssw_ev_arm(e->s, &pf[k], ARM_FDS, &got, &e->staged, &a);
		if (r == SSW_EV_PENDING) {
			res = SSW_EV_PENDING;
			break;
		}
		if (r == SSW_EV_NAP)
			res = SSW_EV_NAP;
		k += got;
		if (a) {
			ssw_sock_get_again(e->s); /* this wait's, put after it */
			held[*na] = e->s;
			armed[(*na)++] = a;
		}
	}
	*nout = k;
	return res;
}

static int polled_fds(struct epx *x)
{
	int k = 0;
	for (struct epx_entry *e = x ? x->polled : NULL; e; e = e->pnext)
		k += ARM_FDS;
	return k;
}

static void polled_woke(struct epx *x)
{
	for (struct epx_entry *e = x ? x->polled : NULL; e; e = e->pnext)
		e->staged = false;
}

int ssw_epoll_arm_members(int epfd, struct pollfd *pf, int n, int *nout, struct ssw_session **armed,
			  struct ssw_sock **held, int hmax, int *na)
{
	*nout = 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = epx_find(epfd, false);
	int r = x ? arm_members(x, pf, n, nout, armed, held, hmax, na) : SSW_EV_IDLE;
	polled_woke(x);
	pthread_mutex_unlock(&epx_lock);
	return r;
}

/* Events of nested epoll fds whose switched members are ready (outside
 * epx_lock: peeking takes it), merged with what the kernel reported for
 * them; appended to out[n..max). */
static int nested_events(int epfd, struct epoll_event *out, int n, int max, bool *any)
{
	struct epx_nested copy[16];
	int k = 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = epx_find(epfd, false);
	for (struct epx_nested *q = x ? x->nested : NULL; q && k < 16; q = q->next)
		copy[k++] = *q;
	pthread_mutex_unlock(&epx_lock);
	*any = k > 0;
	for (int i = 0; i < k; i++) {
		/* the kernel saw the inner epoll fd readable: maybe only its private
		 * kick or doorbells (wake-ups for its own waiters), which are not
		 * events to anyone else */
		int j = 0;
		while (j < n && out[j].data.u64 != copy[i].data.u64)
			j++;
		if (j == n)
			continue;
		pthread_mutex_lock(&epx_lock);
		struct epx *in = epx_find(copy[i].fd, false);
		int kfd = in ? in->kick : -1;
		pthread_mutex_unlock(&epx_lock);
		if (kfd < 0)
			continue;
		epx_kick_drain(kfd);
		if (ssw_epoll_peek(copy[i].fd) > 0) /* takes its doorbells too */
			continue;
		struct pollfd p = { .fd = copy[i].fd, .events = POLLIN };
		if (sys_poll(&p, 1, 0) > 0)
			continue;
		out[j] = out[--n]; /* nothing there after all */
	}
	for (int i = 0; i < k && n < max; i++) {
		if (!(copy[i].events & EPOLLIN) || ssw_epoll_peek(copy[i].fd) <= 0)
			continue;
		bool merged = false;
		for (int j = 0; j < n && !merged; j++)
			if (out[j].data.u64 == copy[i].data.u64) {
				out[j].events |= EPOLLIN;
				merged = true;
			}
		if (!merged)
			out[n++] = (struct epoll_event){ .events = EPOLLIN, .data = copy[i].data };
	}
	return n;
}

/* Kernel events into out[n..max): the kick tag is dropped (and the kick
 * drained), the inner tag fills the check list (*harvested); a listener's
 * kernel event merges with its side event. */
static int kernel_events(struct epx *x, struct epoll_event *out, int n, int max, int nside, bool *harvested)
{
	int k = sys_epoll_wait(x->epfd, out + n, max - n, 0);
	if (k < 0)
		return -errno;
	int w = n;
	for (int i = n; i < n + k; i++) {
		struct epoll_event ev = out[i];
		if (ev.data.u64 == EPX_KICK_TAG) {
			if (x->kick >= 0)
				epx_kick_drain(x->kick);
			continue;
		}
		if (ev.data.u64 == EPX_INNER_TAG) {
			epx_harvest(x);
			*harvested = true;
			continue;
		}
		bool merged = false;
		for (int j = 0; j < nside && !merged; j++)
			if (out[j].data.u64 == ev.data.u64) {
				out[j].events |= ev.events;
				merged = true;
			}
		if (!merged)
			out[w++] = ev;
	}
	return w;
}

struct sleep_buf {
	struct pollfd *pf;
	struct ssw_session **armed;
	struct ssw_sock **held;
	int cap;
};

static int sleep_grow(struct sleep_buf *b, int need)
{
	if (need <= b->cap)
		return 0;
	struct pollfd *np = realloc(b->pf, (size_t)need * sizeof *np);
	if (np)
		b->pf = np;
	struct ssw_session **na = np ? realloc(b->armed, (size_t)need * sizeof *na) : NULL;
	if (na)
		b->armed = na;
	struct ssw_sock **nh = na ? realloc(b->held, (size_t)need * sizeof *nh) : NULL;
	if (nh)
		b->held = nh;
	if (!np || !na || !nh)
		return -ENOMEM;
	b->cap = need;
	return 0;
}

/* One epoll_wait call's wait (common/waitpol.h). */
struct ep_wait {
	struct ssw_waiter w;
	int epfd, max;
	struct epoll_event *events;
	const sigset_t *mask;
	struct sleep_buf b;
	bool looked;
};

/* Sleep on epfd (kernel events, kicks, members' doorbells through the inner
 * set) and the polled members' fds, at most ns (-1: no bound). */
static int ep_sleep(struct ssw_waiter *w, int64_t ns)
{
	struct ep_wait *ew = (struct ep_wait *)w;
	struct sleep_buf *b = &ew->b;
	int epfd = ew->epfd;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = epx_find(epfd, false);
	int need = 1 + polled_fds(x);
	for (struct epx_nested *q = x ? x->nested : NULL; q; q = q->next)
		need += polled_fds(epx_find(q->fd, false));
	if (!x || sleep_grow(b, need) < 0) {
		pthread_mutex_unlock(&epx_lock);
		return x ? -ENOMEM : -EBADF;
	}
	int np = 0, na = 0;
	uint64_t nap = 0;
	bool again = false;
	b->pf[np++] = (struct pollfd){ .fd = epfd, .events = POLLIN };
	/* our polled members, then those of nested epoll fds */
	struct epx *sets[17];
	int nsets = 0;
	sets[nsets++] = x;
	for (struct epx_nested *q = x->nested; q && nsets < 17; q = q->next)
		if ((sets[nsets] = epx_find(q->fd, false)))
			nsets++;
	for (int i = 0; i < nsets && !again; i++) {
		int got = 0, r = arm_members(sets[i], &b->pf[np], b->cap - np, &got, b->armed, b->held, b->cap, &na);
		np += got;
		if (r == SSW_EV_PENDING)
			again = true;
		else if (r == SSW_EV_NAP || sets[i]->nswapw)
			nap = SSW_EV_NAP_NS; /* (members whose control may leave: epx_swap_scan) */
	}
	if (!again)
		x->waiters++;
	pthread_mutex_unlock(&epx_lock);
	int r = 0, err = 0;
	uint64_t t0 = ssw_now_ns();
	if (!again) {
		int64_t left = ns;
		if (nap && (left < 0 || (uint64_t)left > nap))
			left = (int64_t)nap;
		/* published for `sockswitch stat`: wake to answer its reader */
		int look = ssw_statreg_sleep_ms(-1);
		if (look >= 0 && (left < 0 || left > (int64_t)look * 1000000))
			left = (int64_t)look * 1000000;
		struct timespec ts = { (time_t)(left / 1000000000), (long)(left % 1000000000) };
		r = sys_ppoll(b->pf, (nfds_t)np, left < 0 ? NULL : &ts, ew->mask);
		err = errno;
	}
	uint64_t woke_at = ssw_now_ns(), first = 0;
	for (int i = 0; i < na; i++) {
		uint64_t rang = ssw_ev_rang(b->armed[i], t0, woke_at);
		if (rang && (!first || rang < first))
			first = rang;
		ssw_session_sleep_done(b->armed[i]);
		ssw_epoll_touch(b->held[i]); /* the doorbell it took may have been a watcher's */
		ssw_sock_put(b->held[i]);
	}
	if (again) {
		ssw_statreg_answer(); /* no lock held */
		return SSW_WAIT_LOOK;
	}
	w->rang = first;
	pthread_mutex_lock(&epx_lock);
	x = epx_find(epfd, false);
	if (x)
		x->waiters--;
	polled_woke(x);
	for (struct epx_nested *n = x ? x->nested : NULL; n; n = n->next)
		polled_woke(epx_find(n->fd, false));
	pthread_mutex_unlock(&epx_lock);
	if (r < 0 && err == EINTR)
		return -EINTR;
	ssw_statreg_answer(); /* no lock held: a ring that woke us is answered */
	return r > 0 ? SSW_WAIT_WOKEN : SSW_WAIT_TIMEDOUT;
}

/* Side and kernel events (nested sets' too): how many, 0, or -errno.
 * Members to look at (doorbells just taken from the inner set, or
 * re-queued) are looked at again before the answer, a few times. */
static int ep_look(struct ssw_waiter *w)
{
	struct ep_wait *ew = (struct ep_wait *)w;
	struct epoll_event *events = ew->events;
	int max = ew->max;
	for (int relook = 0;; relook++) {
		pthread_mutex_lock(&epx_lock);
		struct epx *x = epx_find(ew->epfd, false);
		if (!x) { /* closed under us */
			pthread_mutex_unlock(&epx_lock);
			return -EBADF;
		}
		/* leave room for the kernel's events when both kinds are ready */
		int side_max = max > 1 ? max - 1 : max;
		epx_hot_scan(x);
		epx_swap_scan(x);
		if (!ew->looked)
			w->peer_cpu = epx_hot_peers_cpu(x);
		ew->looked = true;
		int n = epx_collect(x, events, side_max);
		bool harvested = false;
		int r = kernel_events(x, events, n, max, n, &harvested);
		if (r > 0)
			n = r;
		if (harvested && n < max) /* doorbells found meanwhile: as the kernel, report them now */
			n += epx_collect_queue(x, events + n, max - n);
		bool again = x->again;
		pthread_mutex_unlock(&epx_lock);
		if (r < 0 && !n)
			return r;
		bool nested = false;
		n = nested_events(ew->epfd, events, n < 0 ? 0 : n, max, &nested);
		if (n || !((harvested || again) && relook < RELOOK_MAX))
			return n;
	}
}

int ssw_epoll_wait(int epfd, struct epoll_event *events, int max, int timeout_ms, const sigset_t *mask, bool *handled)
{
	*handled = false;
	if (!__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = epx_find(epfd, false);
	bool ours = x && (x->n || x->kick >= 0 || x->nested);
	pthread_mutex_unlock(&epx_lock);
	if (!ours || max <= 0 || !events)
		return 0; /* the kernel answers (and gives EINVAL/EFAULT) */
	*handled = true;
	uint64_t now = ssw_now_ns();
	/* a zero timeout: a deadline of now, one look */
	uint64_t dl = timeout_ms >= 0 ? now + (uint64_t)timeout_ms * 1000000ull : 0;
	struct ep_wait ew = {
		.w = { .ready = ep_look, .sleep = ep_sleep, .peer_cpu = -1 },
		.epfd = epfd,
		.max = max,
		.events = events,
		.mask = mask,
	};
	int ret = ssw_wait(ssw_ev_pol(), &ssw_ev_wait, dl, &ew.w);
	if (ret == -ETIMEDOUT)
		ret = 0;
	free(ew.b.pf);
	free(ew.b.armed);
	free(ew.b.held);
	return ret;
}
