/* epoll.c — epoll over switched sockets.  A switched connection is not
 * registered with the kernel (its kernel socket is idle); the switch keeps it
 * in a side list of the epoll fd and merges its readiness with the kernel's
 * events.  Listeners stay registered with the kernel and are also watched for
 * provider connections.  Level- and edge-triggered and EPOLLONESHOT are kept;
 * full fidelity (nesting, sharing across fork) is the event layer's work. */
#include "switch/switch.h"

#include "common/sys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct epx_entry {
	int fd;
	struct ssw_sock *s;   /* holds a reference */
	uint32_t events;
	epoll_data_t data;
	bool disabled;        /* EPOLLONESHOT fired */
	uint32_t last;        /* edge-triggered: bits reported last time */
	uint64_t gen;         /* edge-triggered: session activity at last report */
	struct epx_entry *next;
};

struct epx {
	int epfd;
	struct epx_entry *list;
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

static void free_entry(struct epx_entry *e)
{
	ssw_sock_put(e->s);
	free(e);
}

int ssw_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev, bool *handled)
{
	*handled = false;
	struct ssw_sock *s = ssw_sock_get(fd);
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, s != NULL);
	struct epx_entry **pp = x ? find_entry(x, fd) : NULL;
	int rc = 0;
	if (!s) {
		/* no longer ours (fell back to TCP): forget any side entry */
		if (pp && (op == EPOLL_CTL_DEL || op == EPOLL_CTL_MOD)) {
			struct epx_entry *e = *pp;
			*pp = e->next;
			free_entry(e);
			if (op == EPOLL_CTL_MOD) { /* it was never in the kernel set */
				pthread_mutex_unlock(&epx_lock);
				*handled = true;
				return sys_epoll_ctl(epfd, EPOLL_CTL_ADD, fd, ev) < 0 ? -errno : 0;
			}
			*handled = true;
		}
		pthread_mutex_unlock(&epx_lock);
		return 0;
	}
	if (!x) {
		pthread_mutex_unlock(&epx_lock);
		ssw_sock_put(s);
		return -ENOMEM;
	}
	bool listener = s->state == SSW_ST_LISTENING;
	if (listener) {
		/* the kernel registration decides errors (EEXIST, ENOENT) */
		int k = sys_epoll_ctl(epfd, op, fd, ev);
		if (k < 0) {
			rc = -errno;
			pthread_mutex_unlock(&epx_lock);
			ssw_sock_put(s);
			*handled = true;
			return rc;
		}
	}
	*handled = true;
	switch (op) {
	case EPOLL_CTL_ADD:
		if (pp) {
			rc = -EEXIST;
			break;
		}
		if (!ev) {
			rc = -EFAULT;
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
		break;
	case EPOLL_CTL_MOD:
		if (!pp) {
			rc = -ENOENT;
			break;
		}
		if (!ev) {
			rc = -EFAULT;
			break;
		}
		(*pp)->events = ev->events;
		(*pp)->data = ev->data;
		(*pp)->disabled = false;
		(*pp)->last = 0;
		break;
	case EPOLL_CTL_DEL:
		if (!pp) {
			rc = -ENOENT;
			break;
		}
		struct epx_entry *d = *pp;
		*pp = d->next;
		free_entry(d);
		break;
	default:
		rc = -EINVAL;
	}
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

/* Collect ready side entries into out (at most max). */
static int collect(struct epx *x, struct epoll_event *out, int max)
{
	int n = 0;
	for (struct epx_entry *e = x->list; e && n < max; e = e->next) {
		if (e->disabled)
			continue;
		uint32_t ev = entry_ready(e);
		if (e->events & EPOLLET) {
			struct ssw_session_stats st = { 0 };
			if (e->s->sess)
				ssw_session_get_stats(e->s->sess, &st);
			uint64_t gen = st.msgs_received + st.msgs_sent;
			uint32_t fresh = ev & ~e->last;
			e->last = ev;
			if (!fresh && gen == e->gen)
				continue;
			e->gen = gen;
		}
		if (!ev)
			continue;
		out[n].events = ev;
		out[n].data = e->data;
		n++;
		if (e->events & EPOLLONESHOT)
			e->disabled = true;
	}
	return n;
}

int ssw_epoll_wait(int epfd, struct epoll_event *events, int max, int timeout_ms, const sigset_t *mask, bool *handled)
{
	*handled = false;
	if (max <= 0)
		return 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	bool any = x && x->list;
	pthread_mutex_unlock(&epx_lock);
	if (!any)
		return 0;
	*handled = true;
	uint64_t dl = timeout_ms > 0 ? ssw_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
	uint64_t spin_until = ssw_now_ns() + 20000;
	for (;;) {
		pthread_mutex_lock(&epx_lock);
		x = find(epfd, false);
		int n = x ? collect(x, events, max) : 0;
		pthread_mutex_unlock(&epx_lock);
		if (n < max) {
			int k = sys_epoll_wait(epfd, events + n, max - n, 0);
			if (k > 0) {
				/* a listener reported by both: keep one event */
				n += k;
			} else if (k < 0 && !n) {
				return -errno;
			}
		}
		if (n || timeout_ms == 0)
			return n;
		if (timeout_ms > 0 && ssw_now_ns() >= dl)
			return 0;
		if (ssw_now_ns() < spin_until) {
			ssw_cpu_relax();
			continue;
		}
		/* sleep: the epoll fd itself (kernel events) + every side entry's wait fds */
		struct pollfd pf[1 + 64 * 4];
		struct ssw_sock *armed[64];
		int np = 0, na = 0;
		bool again = false;
		pf[np++] = (struct pollfd){ .fd = epfd, .events = POLLIN };
		pthread_mutex_lock(&epx_lock);
		x = find(epfd, false);
		for (struct epx_entry *e = x ? x->list : NULL; e && na < 64 && np + 4 < (int)(sizeof pf / sizeof pf[0]); e = e->next) {
			struct ssw_sock *s = e->s;
			if (e->disabled)
				continue;
			if (s->state == SSW_ST_LISTENING) {
				for (int i = 0; i < s->npl; i++)
					pf[np++] = (struct pollfd){ .fd = s->prov->conn->listener_fd(s->pl[i]), .events = POLLIN };
			} else if (s->state == SSW_ST_CONNECTING && s->cep) {
				pf[np++] = (struct pollfd){ .fd = s->prov->conn->connect_fd(s->cep), .events = POLLIN };
			} else if (s->sess) {
				int got = 0;
				if (ssw_session_sleep_prepare(s->sess, &pf[np], 4, &got) < 0) {
					again = true;
					break;
				}
				atomic_fetch_add(&s->refs, 1);
				armed[na++] = s;
				np += got;
			}
		}
		pthread_mutex_unlock(&epx_lock);
		if (!again) {
			int ms = timeout_ms < 0 ? -1 : 0;
			if (timeout_ms > 0) {
				uint64_t now = ssw_now_ns();
				ms = now >= dl ? 0 : (int)((dl - now + 999999) / 1000000);
			}
			/* more than 64 switched entries: poll them in short naps */
			if (x && na == 64 && (ms < 0 || ms > 1))
				ms = 1;
			struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
			int r = sys_ppoll(pf, (nfds_t)np, ms < 0 ? NULL : &ts, mask);
			int err = errno;
			for (int i = 0; i < na; i++) {
				ssw_session_sleep_done(armed[i]->sess);
				ssw_sock_put(armed[i]);
			}
			if (r < 0 && err == EINTR)
				return -EINTR;
		} else {
			for (int i = 0; i < na; i++) {
				ssw_session_sleep_done(armed[i]->sess);
				ssw_sock_put(armed[i]);
			}
		}
		spin_until = 0;
	}
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
			free_entry(e);
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
		struct epx_entry **pp = find_entry(x, fd);
		if (pp) {
			struct epx_entry *e = *pp;
			*pp = e->next;
			free_entry(e);
		}
	}
	pthread_mutex_unlock(&epx_lock);
}
