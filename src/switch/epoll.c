/* epoll.c — epoll over switched sockets.  A switched connection is not
 * registered with the kernel (its kernel socket is idle); the switch keeps it
 * in a side list of the epoll fd and merges its readiness with the kernel's
 * events.  Listeners stay registered with the kernel and are also watched for
 * provider connections (one merged event).  Level- and edge-triggered,
 * EPOLLONESHOT and EPOLLRDHUP follow the kernel; an edge is a new arrival
 * (bytes, FIN, reset) or returned send credits, as the kernel's wake-ups.
 *
 * Each epoll fd with side entries also holds a "kick" eventfd registered
 * with the kernel under a private tag: epoll_ctl on a side entry rings it so
 * that threads already sleeping on the epoll fd (ours, or a plain kernel
 * epoll_wait that began before the first switched fd was added) look again.
 * Kernel events carrying the tag are never shown to the application. */
#include "switch/switch.h"

#include "common/sys.h"
#include "switch/evwait.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#define EPX_KICK_TAG 0x5353574b49434b21ull /* "SSWKICK!" */
#define ARM_FDS 4

struct epx_entry {
	int fd;
	struct ssw_sock *s;   /* holds a reference */
	uint32_t events;
	epoll_data_t data;
	bool disabled;        /* EPOLLONESHOT fired */
	bool staged;          /* ring staged during the current wait */
	uint32_t last;        /* edge-triggered: bits reported last time */
	uint64_t rx_seen;     /* edge-triggered: bytes arrived at last report */
	uint64_t tx_seen;     /* edge-triggered: credits returned at last look */
	struct epx_entry *next;
};

/* An epoll fd of ours (with switched members) registered in this one: the
 * kernel sees only its kernel members, so its switched readiness is added
 * here (nested epoll). */
struct epx_nested {
	int fd;
	uint32_t events;
	epoll_data_t data;
	struct epx_nested *next;
};

struct epx {
	int epfd;
	int kick;             /* eventfd, registered in epfd with EPX_KICK_TAG; -1: none */
	int n;                /* side entries */
	struct epx_entry *list;
	struct epx_nested *nested;
	struct epx *next;
};

static pthread_mutex_t epx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct epx *epx_all;

static struct epx *find(int epfd, bool create)
{
	for (struct epx *x = epx_all; x; x = x->next)
		if (x->epfd == epfd)
			return x;
	if (!create)
		return NULL;
	struct epx *x = calloc(1, sizeof *x);
	if (x) {
		x->epfd = epfd;
		x->kick = -1;
		x->next = epx_all;
		epx_all = x;
	}
	return x;
}

static struct epx_entry **find_entry(struct epx *x, int fd)
{
	for (struct epx_entry **pp = &x->list; *pp; pp = &(*pp)->next)
		if ((*pp)->fd == fd)
			return pp;
	return NULL;
}

static void free_entry(struct epx *x, struct epx_entry *e)
{
	ssw_sock_put(e->s);
	free(e);
	x->n--;
}

static void kick(struct epx *x)
{
	if (x->kick >= 0) {
		uint64_t one = 1;
		(void)!sys_write(x->kick, &one, sizeof one);
	}
}

static void kick_drain(int fd)
{
	uint64_t v;
	(void)!sys_read(fd, &v, sizeof v);
}

/* The kick eventfd of x, created and registered with the kernel on the first
 * side entry; this also checks that epfd is an epoll fd (as the kernel's
 * epoll_ctl would: EBADF, EINVAL). */
static int kick_setup(struct epx *x)
{
	if (x->kick >= 0)
		return 0;
	int k = sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (k < 0)
		return -errno;
	k = ssw_fd_hide(k);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EPX_KICK_TAG };
	if (sys_epoll_ctl(x->epfd, EPOLL_CTL_ADD, k, &ev) < 0) {
		int e = errno;
		sys_close(k);
		return -e;
	}
	x->kick = k;
	return 0;
}

/* epoll_ctl of an epoll fd with switched members into another epoll fd:
 * the kernel registers it (its kernel members), we remember it for the
 * switched ones.  Called with epx_lock. */
static void nested_ctl(int epfd, int op, int fd, const struct epoll_event *ev)
{
	if (!(ssw_fdinfo_get(fd) & SSW_FI_EPOLL))
		return;
	struct epx *x = find(epfd, false);
	if (!x && op != EPOLL_CTL_ADD)
		return;
	if (!x && !(x = find(epfd, true)))
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
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, s != NULL && op == EPOLL_CTL_ADD);
	struct epx_entry **pp = x ? find_entry(x, fd) : NULL;
	int rc = 0;
	if (!s && pp && op != EPOLL_CTL_ADD && SYS_(fcntl, fd, F_GETFD) < 0) {
		pthread_mutex_unlock(&epx_lock);
		return 0; /* a closed fd: the kernel says EBADF */
	}
	if (!s || (pp && (*pp)->s != s)) {
		/* no longer ours (fell back to TCP), or another socket now has the
		 * number: forget the side entry; the kernel decides the rest */
		if (pp && (op == EPOLL_CTL_DEL || op == EPOLL_CTL_MOD || op == EPOLL_CTL_ADD)) {
			struct epx_entry *e = *pp;
			*pp = e->next;
			free_entry(x, e);
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
	if (op == EPOLL_CTL_ADD && !listener && !pp) {
		rc = kick_setup(x);
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
	switch (op) {
	case EPOLL_CTL_ADD: {
		if (pp) {
			rc = -EEXIST;
			break;
		}
		struct epx_entry *e = calloc(1, sizeof *e);
		if (!e) {
			rc = -ENOMEM;
			break;
		}
		e->fd = fd;
		e->s = s;
		s = NULL; /* the entry keeps the reference */
		e->events = ev->events;
		e->data = ev->data;
		e->next = x->list;
		x->list = e;
		x->n++;
		kick(x);
		break;
	}
	case EPOLL_CTL_MOD:
		if (!pp) {
			rc = -ENOENT;
			break;
		}
		if ((ev->events & EPOLLEXCLUSIVE) || ((*pp)->events & EPOLLEXCLUSIVE)) {
			rc = -EINVAL;
			break;
		}
		(*pp)->events = ev->events;
		(*pp)->data = ev->data;
		(*pp)->disabled = false;
		(*pp)->last = 0; /* the kernel re-checks readiness on MOD */
		kick(x);
		break;
	case EPOLL_CTL_DEL: {
		if (!pp) {
			rc = -ENOENT;
			break;
		}
		struct epx_entry *d = *pp;
		*pp = d->next;
		free_entry(x, d);
		break;
	}
	default:
		rc = -EINVAL;
	}
out:
	pthread_mutex_unlock(&epx_lock);
	ssw_sock_put(s);
	return rc;
}

/* Ready bits of one side entry (EPOLL* share values with POLL*). */
static uint32_t entry_ready(struct epx_entry *e)
{
	struct ssw_sock *s = e->s;
	uint32_t want = e->events | EPOLLERR | EPOLLHUP;
	uint32_t ev = 0;
	if (s->state == SSW_ST_LISTENING) {
		struct pollfd pf[SSW_MAX_PLISTEN];
		for (int i = 0; i < s->npl; i++)
			pf[i] = (struct pollfd){ .fd = s->prov->conn->listener_fd(s->pl[i]), .events = POLLIN };
		if (s->npl && sys_poll(pf, (nfds_t)s->npl, 0) > 0)
			ev = EPOLLIN;
		return ev & want;
	}
	if (s->state == SSW_ST_CONNECTING) {
		int rc = ssw_connect_poll(s, e->fd, 0);
		if (rc == -EINPROGRESS)
			return 0;
		if (s->state != SSW_ST_CONNECTED)
			return (EPOLLOUT | EPOLLERR | EPOLLHUP) & want;
	}
	if (s->sess)
		ev = (uint16_t)ssw_session_poll(s->sess);
	return ev & want;
}

/* Edge-triggered: is there an edge since the last report? */
static bool entry_edge(struct epx_entry *e, uint32_t ev)
{
	uint32_t fresh = ev & ~e->last;
	e->last = ev;
	if (!e->s->sess)
		return fresh != 0;
	struct ssw_session_stats st = { 0 };
	if (ev & EPOLLIN)
		(void)ssw_session_fionread(e->s->sess); /* every arrival counted */
	ssw_session_get_stats(e->s->sess, &st);
	if ((ev & EPOLLIN) && st.bytes_received != e->rx_seen)
		fresh |= EPOLLIN;
	if ((ev & EPOLLOUT) && st.tx_credited != e->tx_seen)
		fresh |= EPOLLOUT; /* credits came back */
	e->tx_seen = st.tx_credited;
	if (fresh)
		e->rx_seen = st.bytes_received;
	return fresh != 0;
}

/* Is e's socket gone from every descriptor?  Either its connect fell back
 * to kernel TCP (then the kernel takes the registration over) or its last
 * descriptor was closed (the kernel drops it from the set).  A socket still
 * open through a dup stays registered, as in the kernel. */
static bool entry_gone(struct epx *x, struct epx_entry *e)
{
	if (atomic_load(&e->s->fdrefs) > 0)
		return false;
	struct ssw_sock *now = ssw_sock_get(e->fd);
	ssw_sock_put(now);
	if (now == e->s)
		return false;
	bool fell_back = e->s->state == SSW_ST_CONNECTING && !e->s->cep && !e->s->sess;
	if (!now && fell_back && !e->disabled) {
		struct epoll_event kev = { .events = e->events, .data = e->data };
		(void)sys_epoll_ctl(x->epfd, EPOLL_CTL_ADD, e->fd, &kev);
	}
	return true;
}

/* Collect ready side entries into out (at most max); reported entries move
 * to the end of the list so that busy sockets do not starve the others.
 * While a wait spins, listeners are left out: looking at one is a system
 * call (a web server's listener sits in every epoll set, and each spin step
 * paid for it); a connection that comes meanwhile wakes the sleep that
 * follows the spin at once. */
static int collect(struct epx *x, struct epoll_event *out, int max, bool spinning)
{
	int n = 0;
	struct epx_entry *moved = NULL, **mt = &moved;
	for (struct epx_entry **pp = &x->list; *pp && n < max;) {
		struct epx_entry *e = *pp;
		if (e->disabled || (spinning && e->s->state == SSW_ST_LISTENING)) {
			pp = &e->next;
			continue;
		}
		uint32_t ev = entry_ready(e);
		if (e->s->state != SSW_ST_LISTENING && entry_gone(x, e)) {
			*pp = e->next;
			free_entry(x, e);
			continue;
		}
		if ((e->events & EPOLLET) && !entry_edge(e, ev))
			ev = 0;
		if (!ev) {
			pp = &e->next;
			continue;
		}
		out[n].events = ev;
		out[n].data = e->data;
		n++;
		if (e->events & EPOLLONESHOT)
			e->disabled = true;
		*pp = e->next;
		e->next = NULL;
		*mt = e;
		mt = &e->next;
	}
	struct epx_entry **tail = &x->list;
	while (*tail)
		tail = &(*tail)->next;
	*tail = moved;
	return n;
}

/* Would an epoll_wait on x report a switched member now?  As the kernel's
 * poll of an epoll fd: edge-triggered members only with an edge not yet
 * reported; nothing is consumed.  Called with epx_lock. */
static bool side_ready(struct epx *x)
{
	for (struct epx_entry *e = x->list; e; e = e->next) {
		if (e->disabled)
			continue;
		uint32_t ev = entry_ready(e);
		if (!ev)
			continue;
		if (!(e->events & EPOLLET) || (ev & ~e->last))
			return true;
		if (e->s->sess) {
			struct ssw_session_stats st = { 0 };
			ssw_session_get_stats(e->s->sess, &st);
			if (((ev & EPOLLIN) && st.bytes_received != e->rx_seen) ||
			    ((ev & EPOLLOUT) && st.tx_credited != e->tx_seen))
				return true;
		}
	}
	return false;
}

/* Arm the switched members of x into pf (at most n fds); their sessions go
 * to armed[]/held[] (at most hmax, count in *na).  Called with epx_lock.
 * Returns SSW_EV_PENDING when a member has something (re-check first),
 * SSW_EV_NAP when not all could be armed, else SSW_EV_ARMED. */
static int arm_members(struct epx *x, struct pollfd *pf, int n, int *nout, struct ssw_session **armed,
		       struct ssw_sock **held, int hmax, int *na)
{
	int k = 0, res = SSW_EV_ARMED;
	for (struct epx_entry *e = x->list; e; e = e->next) {
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
			atomic_fetch_add(&e->s->refs, 1);
			held[*na] = e->s;
			armed[(*na)++] = a;
		}
	}
	*nout = k;
	return res;
}

int ssw_epoll_arm_members(int epfd, struct pollfd *pf, int n, int *nout, struct ssw_session **armed,
			  struct ssw_sock **held, int hmax, int *na)
{
	*nout = 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	int r = x ? arm_members(x, pf, n, nout, armed, held, hmax, na) : SSW_EV_IDLE;
	pthread_mutex_unlock(&epx_lock);
	return r;
}

void ssw_epoll_members_woke(int epfd)
{
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	for (struct epx_entry *e = x ? x->list : NULL; e; e = e->next)
		e->staged = false;
	pthread_mutex_unlock(&epx_lock);
}

bool ssw_epoll_has_members(int epfd)
{
	if (!(ssw_fdinfo_get(epfd) & SSW_FI_EPOLL) || !__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	bool r = x && x->n;
	pthread_mutex_unlock(&epx_lock);
	return r;
}

int ssw_epoll_peek(int epfd)
{
	if (!(ssw_fdinfo_get(epfd) & SSW_FI_EPOLL) || !__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return -1;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	int r = x && x->n ? side_ready(x) : -1;
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
	struct epx *x = find(epfd, false);
	for (struct epx_nested *q = x ? x->nested : NULL; q && k < 16; q = q->next)
		copy[k++] = *q;
	pthread_mutex_unlock(&epx_lock);
	*any = k > 0;
	for (int i = 0; i < k; i++) {
		/* the kernel saw the inner epoll fd readable: maybe only its private
		 * kick (an epoll_ctl wake-up for its own waiters), which is not an
		 * event to anyone else */
		int j = 0;
		while (j < n && out[j].data.u64 != copy[i].data.u64)
			j++;
		if (j == n)
			continue;
		pthread_mutex_lock(&epx_lock);
		struct epx *in = find(copy[i].fd, false);
		int kfd = in ? in->kick : -1;
		pthread_mutex_unlock(&epx_lock);
		if (kfd < 0)
			continue;
		kick_drain(kfd);
		struct pollfd p = { .fd = copy[i].fd, .events = POLLIN };
		if (sys_poll(&p, 1, 0) > 0 || ssw_epoll_peek(copy[i].fd) > 0)
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
 * drained); a listener's kernel event merges with its side event. */
static int kernel_events(struct epx *x, struct epoll_event *out, int n, int max, int nside)
{
	int k = sys_epoll_wait(x->epfd, out + n, max - n, 0);
	if (k < 0)
		return -errno;
	int w = n;
	for (int i = n; i < n + k; i++) {
		struct epoll_event ev = out[i];
		if (ev.data.u64 == EPX_KICK_TAG) {
			if (x->kick >= 0)
				kick_drain(x->kick);
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

int ssw_epoll_wait(int epfd, struct epoll_event *events, int max, int timeout_ms, const sigset_t *mask, bool *handled)
{
	*handled = false;
	if (!__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	bool ours = x && (x->list || x->kick >= 0 || x->nested);
	pthread_mutex_unlock(&epx_lock);
	if (!ours || max <= 0 || !events)
		return 0; /* the kernel answers (and gives EINVAL/EFAULT) */
	*handled = true;
	uint64_t t_start = ssw_now_ns();
	uint64_t dl = timeout_ms > 0 ? t_start + (uint64_t)timeout_ms * 1000000ull : 0;
	uint64_t spin_until = t_start + ssw_ev_spin_ns();
	bool spun = false, in_spin = false; /* in_spin: this look is a spin step's */
	struct pollfd *pf = NULL;
	struct ssw_session **armed = NULL;
	struct ssw_sock **held = NULL;
	int cap = 0, ret;
	for (;;) {
		pthread_mutex_lock(&epx_lock);
		x = find(epfd, false);
		if (!x) { /* closed under us */
			pthread_mutex_unlock(&epx_lock);
			ret = -EBADF;
			break;
		}
		/* leave room for the kernel's events when both kinds are ready */
		int side_max = max > 1 ? max - 1 : max;
		int n = collect(x, events, side_max, in_spin);
		int nside = n;
		int r = kernel_events(x, events, n, max, nside);
		pthread_mutex_unlock(&epx_lock);
		if (r < 0 && !n) {
			ret = r;
			break;
		}
		if (r > 0)
			n = r;
		bool nested = false;
		n = nested_events(epfd, events, n < 0 ? 0 : n, max, &nested);
		if (n || timeout_ms == 0) {
			if (n && spun)
				ssw_ev_spin_hit();
			ret = n;
			break;
		}
		uint64_t now = ssw_now_ns();
		if (timeout_ms > 0 && now >= dl) {
			ret = 0;
			break;
		}
		in_spin = ssw_ev_spin_step(now, spin_until, &spun);
		if (in_spin)
			continue;
		/* sleep: the epoll fd itself (kernel events, kicks) + every side
		 * entry's wait fds */
		pthread_mutex_lock(&epx_lock);
		x = find(epfd, false);
		int need = 1 + (x ? x->n : 0) * ARM_FDS;
		for (struct epx_nested *q = x ? x->nested : NULL; q; q = q->next) {
			struct epx *in = find(q->fd, false);
			need += in ? in->n * ARM_FDS : 0;
		}
		if (need > cap) {
			struct pollfd *np = realloc(pf, (size_t)need * sizeof *pf);
			struct ssw_session **na = np ? realloc(armed, (size_t)need * sizeof *armed) : NULL;
			if (np)
				pf = np;
			if (na)
				armed = na;
			struct ssw_sock **nh = na ? realloc(held, (size_t)need * sizeof *held) : NULL;
			if (nh)
				held = nh;
			if (!np || !na || !nh) {
				pthread_mutex_unlock(&epx_lock);
				ret = -ENOMEM;
				break;
			}
			cap = need;
		}
		int np = 0, na = 0;
		bool again = false;
		uint64_t nap = 0;
		pf[np++] = (struct pollfd){ .fd = epfd, .events = POLLIN };
		/* our switched members, then those of nested epoll fds */
		for (int pass = 0; x && pass < 2 && !again; pass++) {
			for (struct epx_nested *q = pass ? x->nested : NULL; pass == 0 || q; q = q ? q->next : NULL) {
				struct epx *t = pass ? find(q->fd, false) : x;
				int got = 0, r = t ? arm_members(t, &pf[np], cap - np, &got, armed, held, cap, &na)
						   : SSW_EV_IDLE;
				np += got;
				if (r == SSW_EV_PENDING)
					again = true;
				else if (r == SSW_EV_NAP)
					nap = SSW_EV_NAP_NS;
				if (pass == 0 || again)
					break;
			}
		}
		pthread_mutex_unlock(&epx_lock);
		int r2 = 0, err = 0;
		uint64_t t0 = ssw_now_ns();
		if (!again) {
			int64_t left = -1;
			if (timeout_ms > 0)
				left = (int64_t)(dl > t0 ? dl - t0 : 0);
			if (nap && (left < 0 || (uint64_t)left > nap))
				left = (int64_t)nap;
			struct timespec ts = { (time_t)(left / 1000000000), (long)(left % 1000000000) };
			r2 = sys_ppoll(pf, (nfds_t)np, left < 0 ? NULL : &ts, mask);
			err = errno;
		}
		for (int i = 0; i < na; i++) {
			ssw_session_sleep_done(armed[i]);
			ssw_sock_put(held[i]);
		}
		if (again)
			continue;
		ssw_ev_slept(ssw_now_ns() - t0, r2 > 0);
		if (r2 < 0 && err == EINTR) {
			ret = -EINTR;
			break;
		}
		pthread_mutex_lock(&epx_lock);
		x = find(epfd, false);
		for (struct epx_entry *e = x ? x->list : NULL; e; e = e->next)
			e->staged = false;
		for (struct epx_nested *q = x ? x->nested : NULL; q; q = q->next) {
			struct epx *in = find(q->fd, false);
			for (struct epx_entry *e = in ? in->list : NULL; e; e = e->next)
				e->staged = false;
		}
		pthread_mutex_unlock(&epx_lock);
		spin_until = 0;
	}
	free(pf);
	free(armed);
	free(held);
	return ret;
}

int ssw_epoll_filter(struct epoll_event *ev, int n)
{
	int w = 0;
	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 != EPX_KICK_TAG)
			ev[w++] = ev[i];
	return w;
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
		while (x->list) {
			struct epx_entry *e = x->list;
			x->list = e->next;
			free_entry(x, e);
		}
		if (x->kick >= 0)
			sys_close(x->kick);
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

void ssw_epoll_drop_fd(int fd)
{
	if (!__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&epx_lock);
	for (struct epx *x = epx_all; x; x = x->next) {
		/* the entry may carry another (since closed) number of the same
		 * socket: drop every entry whose socket has no descriptor left */
		for (struct epx_entry **pp = &x->list; *pp;) {
			struct epx_entry *e = *pp;
			if (e->fd == fd || atomic_load(&e->s->fdrefs) == 0) {
				*pp = e->next;
				free_entry(x, e);
			} else {
				pp = &e->next;
			}
		}
	}
	pthread_mutex_unlock(&epx_lock);
}
