/* epoll.c — epoll over switched sockets.  A switched connection is not
 * registered with the kernel (its kernel socket is idle); the switch keeps it
 * as a side entry of the epoll fd and merges its readiness with the kernel's
 * events.  Listeners stay registered with the kernel and are also watched for
 * provider connections (one merged event).  Level- and edge-triggered,
 * EPOLLONESHOT and EPOLLRDHUP follow the kernel; an edge is a new arrival
 * (bytes, FIN, reset) or returned send credits, as the kernel's wake-ups.
 *
 * A wait looks only at members that may have changed, as the kernel's ready
 * list: arrivals are written by another process into shared memory, so no
 * callback can tell us; instead each connected member keeps a standing arm
 * on its session (the peer rings its doorbell on the next arrival) and its
 * wait fds sit in a private "inner" epoll fd under the member's tag.  The
 * kernel's readiness of those fds is the ready list; the inner fd is itself
 * registered in the application's epoll fd, so a sleep on the epoll fd (by
 * us, by poll, or by an outer epoll fd) wakes on any member's doorbell.
 * Members reported level-triggered are looked at again on the next wait
 * (the kernel's LT re-queue); so are members whose doorbell this process
 * may have taken itself (ssw_epoll_touch).  Listeners and connecting
 * sockets (few) are looked at on every wait.
 *
 * Each epoll fd with side entries also holds a "kick" eventfd registered
 * with the kernel under a private tag: epoll_ctl on a side entry rings it so
 * that threads already sleeping on the epoll fd (ours, or a plain kernel
 * epoll_wait that began before the first switched fd was added) look again.
 * Kernel events carrying either tag are never shown to the application. */
#include "switch/switch.h"

#include "common/sys.h"
#include "switch/evwait.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#define EPX_KICK_TAG 0x5353574b49434b21ull  /* "SSWKICK!" */
#define EPX_INNER_TAG 0x535357494e4e5221ull /* "SSWINNR!" */
#define ARM_FDS 4
#define WFD_MAX 4 /* fabric: CQ, EQ, the CQ's signal and the provider's wake-up (wait_fds) */
#define HARVEST 64
#define SETTLE_TRIES 3
#define HOT_MAX 128     /* recently active members watched by looking while a wait spins */
#define RELOOK_MAX 8   /* looks in a row without sleeping, then the sleep decides */

struct epx;

struct epx_entry {
	int fd;
	struct ssw_sock *s;   /* holds a reference */
	struct epx *x;
	uint32_t events;
	epoll_data_t data;
	uint32_t gen;         /* tag in the inner set: gen << 32 | fd */
	bool disabled;        /* EPOLLONESHOT fired */
	bool armed;           /* holds a standing arm on the session (doorbell) */
	bool queued;          /* on x's check list */
	bool polled;          /* on x's polled list: looked at on every wait */
	bool finished;        /* nothing more comes from the peer: out of the inner set */
	bool staged;          /* polled: ring staged during the current wait */
	bool nowatch;         /* its wait fds cannot join the inner set (a dup there already) */
	bool hot;             /* in x->hot: not armed, looked at while waits spin */
	int nwfd;
	int wfd[WFD_MAX];     /* registered in x->inner */
	uint64_t call;        /* the wait call (x->call) that reported it last */
	uint32_t last;        /* edge-triggered: bits reported last time */
	uint64_t rx_seen;     /* edge-triggered: bytes arrived at last report */
	uint64_t tx_seen;     /* edge-triggered: credits returned at last look */
	struct epx_entry *qnext;  /* check list */
	struct epx_entry *pnext;  /* polled list */
	struct epx_entry *snext;  /* entries of the same socket (s->ep_watch) */
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
	int inner;            /* members' wait fds; registered in epfd with EPX_INNER_TAG */
	pid_t pid;            /* process whose standing arms the entries hold */
	int n;                /* side entries */
	int nbyfd;
	struct epx_entry **byfd;  /* side entries by fd number */
	struct epx_entry *qhead, **qtail;
	struct epx_entry *polled;
	struct epx_entry *hot[HOT_MAX];
	int nhot;
	uint64_t call;        /* wait calls so far: one report per entry and call */
	bool again;           /* an entry was re-queued to be looked at before sleeping */
	bool nap;             /* an entry could not be armed: sleep in naps */
	int waiters;          /* threads of ours asleep on epfd */
	struct epx_nested *nested;
	struct epx *next;
};

static pthread_mutex_t epx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct epx *epx_all;
static uint32_t gen_next;

/* ---- lists ---------------------------------------------------------------- */

static void q_push(struct epx *x, struct epx_entry *e)
{
	if (e->queued || e->polled)
		return;
	e->queued = true;
	e->qnext = NULL;
	*x->qtail = e;
	x->qtail = &e->qnext;
}

static struct epx_entry *q_pop(struct epx *x)
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

static void p_remove(struct epx *x, struct epx_entry *e)
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

/* ---- kernel registrations ---------------------------------------------------- */

static void wfd_unregister(struct epx *x, struct epx_entry *e)
{
	for (int i = 0; i < e->nwfd; i++)
		(void)sys_epoll_ctl(x->inner, EPOLL_CTL_DEL, e->wfd[i], NULL);
	e->nwfd = 0;
}

/* Put the member's wait fds in the inner set: how many (0: it has none,
 * the peer is gone), or -1 when they cannot be (the same connection twice
 * in the set through a dup): then it is polled. */
static int wfd_register(struct epx *x, struct epx_entry *e)
{
	int fds[WFD_MAX];
	int k = ssw_session_fds(e->s->sess, fds, WFD_MAX);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)e->gen << 32 | (uint32_t)e->fd };
	for (int i = 0; i < k; i++) {
		if (sys_epoll_ctl(x->inner, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
			wfd_unregister(x, e);
			return -1;
		}
		e->wfd[e->nwfd++] = fds[i];
	}
	return k;
}

static void make_polled(struct epx *x, struct epx_entry *e)
{
	q_remove(x, e);
	if (e->polled)
		return;
	e->polled = true;
	e->pnext = x->polled;
	x->polled = e;
}

static void unwatch(struct epx_entry *e)
{
	if (e->armed && e->s->sess)
		ssw_session_unwatch(e->s->sess);
	e->armed = false;
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

static int kick_setup(struct epx *x)
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

/* ---- the set ---------------------------------------------------------------- */

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
			e->armed = false;
			q_push(x, e);
		}
	}
}

static struct epx *find(int epfd, bool create)
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

static struct epx_entry **find_entry(struct epx *x, int fd)
{
	if (fd < 0 || fd >= x->nbyfd || !x->byfd[fd])
		return NULL;
	return &x->byfd[fd];
}

static struct epx_entry *by_tag(struct epx *x, uint64_t tag)
{
	int fd = (int)(uint32_t)tag;
	struct epx_entry **pp = find_entry(x, fd);
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

static void free_entry(struct epx *x, struct epx_entry *e)
{
	hot_remove(x, e);
	q_remove(x, e);
	p_remove(x, e);
	sock_unlink(e);
	if (x->inner >= 0)
		wfd_unregister(x, e);
	unwatch(e);
	if (e->fd < x->nbyfd && x->byfd[e->fd] == e)
		x->byfd[e->fd] = NULL;
	ssw_sock_put(e->s);
	free(e);
	x->n--;
}

static struct epx_entry *new_entry(struct epx *x, int fd, struct ssw_sock *s, const struct epoll_event *ev)
{
	struct epx_entry *e = byfd_grow(x, fd) == 0 ? calloc(1, sizeof *e) : NULL;
	if (!e)
		return NULL;
	e->fd = fd;
	e->s = s;
	e->x = x;
	e->gen = ++gen_next;
	e->events = ev->events;
	e->data = ev->data;
	e->snext = s->ep_watch;
	s->ep_watch = e;
	x->byfd[fd] = e;
	x->n++;
	if (s->state == SSW_ST_CONNECTED && s->sess)
		q_push(x, e);
	else
		make_polled(x, e);
	return e;
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

/* The switch's part of epoll_ctl on a side entry (called with epx_lock). */
static int side_ctl(struct epx *x, struct epx_entry **pp, int op, int fd, struct ssw_sock **sp,
		    const struct epoll_event *ev)
{
	switch (op) {
	case EPOLL_CTL_ADD:
		if (pp)
			return -EEXIST;
		if (!new_entry(x, fd, *sp, ev))
			return -ENOMEM;
		*sp = NULL; /* the entry keeps the reference */
		kick(x);
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
		q_push(x, e);
		kick(x);
		return 0;
	}
	case EPOLL_CTL_DEL:
		if (!pp)
			return -ENOENT;
		free_entry(x, *pp);
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
			free_entry(x, *pp);
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
	rc = side_ctl(x, pp, op, fd, &s, ev);
out:
	pthread_mutex_unlock(&epx_lock);
	ssw_sock_put(s);
	return rc;
}

/* ---- readiness ---------------------------------------------------------------- */

/* Ready bits of one side entry (EPOLL* share values with POLL*). */
static uint32_t entry_ready(struct epx_entry *e)
{
	struct ssw_sock *s = e->s;
	uint32_t want = e->events | EPOLLERR | EPOLLHUP;
	uint32_t ev = 0;
	if (s->state == SSW_ST_LISTENING)
		return (ssw_listener_ready(s) ? EPOLLIN : 0) & want;
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

/* Edge-triggered: is there an edge since the last report?  peek: look
 * only (nothing is consumed). */
static bool entry_edge(struct epx_entry *e, uint32_t ev, bool peek)
{
	uint32_t fresh = ev & ~e->last;
	if (!peek)
		e->last = ev;
	if (!e->s->sess)
		return fresh != 0;
	struct ssw_session_stats st = { 0 };
	if ((ev & EPOLLIN) && !peek)
		(void)ssw_session_fionread(e->s->sess); /* every arrival counted */
	ssw_session_get_stats(e->s->sess, &st);
	if ((ev & EPOLLIN) && st.bytes_received != e->rx_seen)
		fresh |= EPOLLIN;
	if ((ev & EPOLLOUT) && st.tx_credited != e->tx_seen)
		fresh |= EPOLLOUT; /* credits came back */
	if (peek)
		return fresh != 0;
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

/* e was looked at and is not to be looked at again by itself: give it a
 * standing arm, so that the peer's next arrival rings its doorbell (a wait
 * fd in the inner set).  Messages already in the ring are staged first (the
 * kernel holds them in the socket buffer too); then e is looked at once
 * more, since staging may have made it ready. */
static void settle(struct epx *x, struct epx_entry *e)
{
	struct ssw_session *sess = e->s->sess;
	if (e->s->state != SSW_ST_CONNECTED || !sess) {
		make_polled(x, e);
		return;
	}
	if (e->disabled || e->finished) {
		wfd_unregister(x, e); /* a hang-up must not wake us for ever */
		return;
	}
	int r = e->nowatch ? -1 : e->nwfd ? e->nwfd : wfd_register(x, e);
	if (r < 0) {
		e->nowatch = true;
		make_polled(x, e);
		return;
	}
	if (r == 0) {
		/* no wait fd: the peer is gone, nothing will ring; its end (EOF,
		 * reset) may be news, so e is looked at once more */
		e->finished = true;
		q_push(x, e);
		x->again = true;
		return;
	}
	if (ssw_session_watch(sess) == 0) {
		e->armed = true;
		return;
	}
	for (int i = 0; i < SETTLE_TRIES; i++) {
		(void)ssw_session_fionread(sess); /* stages everything queued */
		if (ssw_session_watch(sess) == 0) {
			e->armed = true;
			q_push(x, e);
			x->again = true;
			return;
		}
		if (ssw_session_poll(sess) & (POLLHUP | POLLERR | POLLRDHUP)) {
			/* the peer is done: nothing more will ring.  It may have
			 * ended since e was looked at (EOF is news): look once more
			 * (a finished entry is not settled again, so no loop) */
			e->finished = true;
			wfd_unregister(x, e);
			q_push(x, e);
			x->again = true;
			return;
		}
	}
	q_push(x, e); /* could not stage (memory): look again after a nap */
	x->nap = true;
}

/* e was just looked at by a wait.  A recently active member is not armed
 * yet: while waits spin they look at its ring (no doorbell, so no system
 * call on either side); it is armed before anyone sleeps (arm_hot). */
static void cool(struct epx *x, struct epx_entry *e)
{
	if (e->hot)
		return;
	/* not while another thread sleeps on the set: it must be rung */
	if (x->nhot < HOT_MAX && !x->waiters && !e->disabled && !e->finished && !e->nowatch && e->nwfd &&
	    e->s->state == SSW_ST_CONNECTED && e->s->sess) {
		e->hot = true;
		x->hot[x->nhot++] = e;
		return;
	}
	settle(x, e);
}

/* Hot members with something new in their ring go on the check list. */
static void hot_scan(struct epx *x)
{
	for (int i = 0; i < x->nhot; i++)
		if (ssw_session_rx_ready(x->hot[i]->s->sess))
			q_push(x, x->hot[i]);
}

/* The CPU every hot member's peer was last seen on, or -1 (mixed, or not
 * known): a waiter whose peers all share its CPU hands it over at once. */
static int hot_peers_cpu(struct epx *x)
{
	int cpu = -1;
	for (int i = 0; i < x->nhot; i++) {
		int c = ssw_session_peer_cpu(x->hot[i]->s->sess);
		if (c < 0 || (i && c != cpu))
			return -1;
		cpu = c;
	}
	return cpu;
}

/* Before a sleep (ours, or a sleeper's outside): every member armed. */
static void arm_hot(struct epx *x)
{
	while (x->nhot) {
		struct epx_entry *e = x->hot[--x->nhot];
		e->hot = false;
		if (!e->queued)
			settle(x, e);
	}
}

/* Look at one entry: its events to report now (0: none); peek looks only. */
/* e's socket was found ready: its other entries (a dup in this set, or
 * the socket in other sets) look too.  Looking drained what their doorbell
 * was (fabric: the CQ's socket), so the inner sets would not tell them.
 * Called with epx_lock. */
static void touch_siblings(struct epx_entry *e)
{
	for (struct epx_entry *o = e->s->ep_watch; o; o = o->snext) {
		if (o == e)
			continue;
		q_push(o->x, o);
		if (o->x != e->x && o->x->waiters)
			kick(o->x);
	}
}

static uint32_t look(struct epx *x, struct epx_entry *e, bool peek, bool *gone)
{
	*gone = false;
	unwatch(e); /* takes the doorbell; settle arms again */
	if (e->disabled)
		return 0;
	uint32_t ev = entry_ready(e);
	if (e->s->state != SSW_ST_LISTENING && entry_gone(x, e)) {
		*gone = true;
		return 0;
	}
	if (ev & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		touch_siblings(e);
	if ((e->events & EPOLLET) && !entry_edge(e, ev, peek))
		ev = 0;
	return ev;
}

/* Take what the inner set says (members whose doorbell rang or whose peer
 * hung up) into the check list.  One call: the inner set is level-triggered
 * and its fds stay readable until their member is looked at, so a longer
 * list is taken over the next rounds (the kernel rotates it). */
static void harvest(struct epx *x)
{
	struct epoll_event evs[HARVEST];
	int k = x->inner >= 0 ? sys_epoll_wait(x->inner, evs, HARVEST, 0) : 0;
	for (int i = 0; i < k; i++) {
		struct epx_entry *e = by_tag(x, evs[i].data.u64);
		if (e)
			q_push(x, e);
	}
}

/* One report of e: out[*n], ONESHOT, and where e goes next. */
static void report(struct epx *x, struct epx_entry *e, uint32_t ev, struct epoll_event *out, int *n)
{
	e->call = x->call;
	out[*n].events = ev;
	out[*n].data = e->data;
	(*n)++;
	if (e->events & EPOLLONESHOT)
		e->disabled = true;
	if (e->polled)
		return;
	if (!(e->events & (EPOLLET | EPOLLONESHOT)))
		q_push(x, e); /* level-triggered: looked at again next time */
	else
		cool(x, e);
}

/* Collect ready side entries into out (at most max): the polled entries,
 * then the check list.  Entries reported go to the end of the check list
 * (level-triggered) so that busy sockets do not starve the others. */
static int collect_queue(struct epx *x, struct epoll_event *out, int max);

static int collect(struct epx *x, struct epoll_event *out, int max)
{
	int n = 0;
	x->again = x->nap = false;
	x->call++;
	for (struct epx_entry *e = x->polled, *nx; e && n < max; e = nx) {
		nx = e->pnext;
		if (e->disabled)
			continue;
		bool gone;
		uint32_t ev = look(x, e, false, &gone);
		if (gone) {
			free_entry(x, e);
			continue;
		}
		if (e->s->state == SSW_ST_CONNECTED && e->s->sess && !e->nowatch) {
			p_remove(x, e); /* connected: from now on on the check list */
			q_push(x, e);
		}
		if (ev) {
			e->call = x->call;
			out[n].events = ev;
			out[n].data = e->data;
			n++;
			if (e->events & EPOLLONESHOT)
				e->disabled = true;
		}
	}
	return n + collect_queue(x, out + n, max - n);
}

/* The check list part of collect; also called again within one wait call
 * for members whose doorbell was found after the first pass. */
static int collect_queue(struct epx *x, struct epoll_event *out, int max)
{
	int n = 0;
	struct epx_entry *stop = NULL;
	while (n < max && x->qhead && x->qhead != stop) {
		struct epx_entry *e = q_pop(x);
		if (e->call == x->call) { /* reported by this call already */
			q_push(x, e);
			if (!stop)
				stop = e;
			continue;
		}
		bool gone;
		uint32_t ev = look(x, e, false, &gone);
		if (gone) {
			free_entry(x, e);
			continue;
		}
		if (ev) {
			report(x, e, ev, out, &n);
			if (!stop && e->queued)
				stop = e; /* once round the list */
		} else {
			cool(x, e);
			if (!stop && e->queued)
				stop = e;
		}
	}
	return n;
}

/* Would an epoll_wait on x report a switched member now?  As the kernel's
 * poll of an epoll fd: edge-triggered members only with an edge not yet
 * reported; nothing is consumed.  Called with epx_lock. */
static bool side_ready(struct epx *x)
{
	arm_hot(x);
	harvest(x);
	for (struct epx_entry *e = x->polled; e; e = e->pnext) {
		bool gone;
		if (!e->disabled && look(x, e, true, &gone))
			return true;
	}
	struct epx_entry *stop = NULL;
	while (x->qhead && x->qhead != stop) {
		struct epx_entry *e = q_pop(x);
		bool gone;
		if (look(x, e, true, &gone) && !gone) {
			q_push(x, e); /* stays for the wait that takes it */
			return true;
		}
		if (gone) {
			free_entry(x, e);
			continue;
		}
		settle(x, e);
		if (!stop && e->queued)
			stop = e;
	}
	return false;
}

/* ---- sleeping ------------------------------------------------------------------ */

/* Arm the polled members of x into pf (at most n fds); their sessions go
 * to armed[]/held[] (at most hmax, count in *na).  Called with epx_lock.
 * Returns SSW_EV_PENDING when a member has something (re-check first),
 * SSW_EV_NAP when not all could be armed, else SSW_EV_ARMED.  Members on
 * the check list sleep on the inner set (part of the epoll fd). */
static int arm_members(struct epx *x, struct pollfd *pf, int n, int *nout, struct ssw_session **armed,
		       struct ssw_sock **held, int hmax, int *na)
{
	arm_hot(x);
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
			atomic_fetch_add(&e->s->refs, 1);
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
	struct epx *x = find(epfd, false);
	int r = x ? arm_members(x, pf, n, nout, armed, held, hmax, na) : SSW_EV_IDLE;
	polled_woke(x);
	pthread_mutex_unlock(&epx_lock);
	return r;
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

void ssw_epoll_touch(struct ssw_sock *s)
{
	if (!__atomic_load_n(&s->ep_watch, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&epx_lock);
	for (struct epx_entry *e = s->ep_watch; e; e = e->snext) {
		q_push(e->x, e);
		if (e->x->waiters)
			kick(e->x);
	}
	pthread_mutex_unlock(&epx_lock);
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
		 * kick or doorbells (wake-ups for its own waiters), which are not
		 * events to anyone else */
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
				kick_drain(x->kick);
			continue;
		}
		if (ev.data.u64 == EPX_INNER_TAG) {
			harvest(x);
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

/* Sleep on epfd (kernel events, kicks, members' doorbells through the inner
 * set) and the polled members' fds.  Returns >0 woken, 0 timed out or must
 * look again (*again), -errno. */
static int sleep_once(int epfd, struct sleep_buf *b, uint64_t t_start, uint64_t dl, const sigset_t *mask,
		      bool *again)
{
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	int need = 1 + polled_fds(x);
	for (struct epx_nested *q = x ? x->nested : NULL; q; q = q->next)
		need += polled_fds(find(q->fd, false));
	if (!x || sleep_grow(b, need) < 0) {
		pthread_mutex_unlock(&epx_lock);
		return x ? -ENOMEM : -EBADF;
	}
	int np = 0, na = 0;
	uint64_t nap = 0;
	b->pf[np++] = (struct pollfd){ .fd = epfd, .events = POLLIN };
	/* our polled members, then those of nested epoll fds */
	struct epx *sets[17];
	int ns = 0;
	sets[ns++] = x;
	for (struct epx_nested *q = x->nested; q && ns < 17; q = q->next)
		if ((sets[ns] = find(q->fd, false)))
			ns++;
	for (int i = 0; i < ns && !*again; i++) {
		int got = 0, r = arm_members(sets[i], &b->pf[np], b->cap - np, &got, b->armed, b->held, b->cap, &na);
		np += got;
		if (r == SSW_EV_PENDING)
			*again = true;
		else if (r == SSW_EV_NAP)
			nap = SSW_EV_NAP_NS;
	}
	if (!*again)
		x->waiters++;
	pthread_mutex_unlock(&epx_lock);
	int r = 0, err = 0;
	uint64_t t0 = ssw_now_ns();
	if (!*again) {
		int64_t left = -1;
		if (dl)
			left = (int64_t)(dl > t0 ? dl - t0 : 0);
		if (nap && (left < 0 || (uint64_t)left > nap))
			left = (int64_t)nap;
		struct timespec ts = { (time_t)(left / 1000000000), (long)(left % 1000000000) };
		r = sys_ppoll(b->pf, (nfds_t)np, left < 0 ? NULL : &ts, mask);
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
	if (*again)
		return 0;
	ssw_ev_slept(woke_at - t0, r > 0, first ? first - t_start : 0);
	pthread_mutex_lock(&epx_lock);
	x = find(epfd, false);
	if (x)
		x->waiters--;
	polled_woke(x);
	for (struct epx_nested *n = x ? x->nested : NULL; n; n = n->next)
		polled_woke(find(n->fd, false));
	pthread_mutex_unlock(&epx_lock);
	if (r < 0 && err == EINTR)
		return -EINTR;
	return r;
}

int ssw_epoll_wait(int epfd, struct epoll_event *events, int max, int timeout_ms, const sigset_t *mask, bool *handled)
{
	*handled = false;
	if (!__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = find(epfd, false);
	bool ours = x && (x->n || x->kick >= 0 || x->nested);
	pthread_mutex_unlock(&epx_lock);
	if (!ours || max <= 0 || !events)
		return 0; /* the kernel answers (and gives EINVAL/EFAULT) */
	*handled = true;
	uint64_t t_start = ssw_now_ns();
	uint64_t dl = timeout_ms > 0 ? t_start + (uint64_t)timeout_ms * 1000000ull : 0;
	struct ssw_spin sp;
	ssw_spin_start(&sp, t_start, ssw_ev_spin_ns());
	struct sleep_buf b = { 0 };
	int ret, relook = 0;
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
		hot_scan(x);
		if (!sp.spun)
			ssw_spin_peer_cpu(&sp, hot_peers_cpu(x));
		int n = collect(x, events, side_max);
		bool harvested = false;
		int r = kernel_events(x, events, n, max, n, &harvested);
		if (r > 0)
			n = r;
		if (harvested && n < max) /* doorbells found meanwhile: as the kernel, report them now */
			n += collect_queue(x, events + n, max - n);
		bool again = x->again;
		pthread_mutex_unlock(&epx_lock);
		if (r < 0 && !n) {
			ret = r;
			break;
		}
		bool nested = false;
		n = nested_events(epfd, events, n < 0 ? 0 : n, max, &nested);
		/* members to look at (doorbells just taken from the inner set, or
		 * re-queued): before any sleep, and before a zero timeout says 0 */
		bool look_again = (harvested || again) && relook++ < RELOOK_MAX;
		if (n || (timeout_ms == 0 && !look_again)) {
			if (n && sp.spun)
				ssw_ev_spin_hit();
			ret = n;
			break;
		}
		if (look_again)
			continue;
		relook = 0;
		uint64_t now = ssw_now_ns();
		if (timeout_ms > 0 && now >= dl) {
			ret = 0;
			break;
		}
		if (ssw_spin_step(&sp))
			continue;
		again = false;
		int s = sleep_once(epfd, &b, t_start, dl, mask, &again);
		if (s < 0) {
			ret = s;
			break;
		}
		if (!again)
			ssw_spin_stop(&sp);
	}
	free(b.pf);
	free(b.armed);
	free(b.held);
	return ret;
}

int ssw_epoll_filter(struct epoll_event *ev, int n)
{
	int w = 0;
	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 != EPX_KICK_TAG && ev[i].data.u64 != EPX_INNER_TAG)
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
		for (int fd = 0; fd < x->nbyfd; fd++)
			if (x->byfd[fd])
				free_entry(x, x->byfd[fd]);
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
		free_entry(e->x, e);
	}
	pthread_mutex_unlock(&epx_lock);
}
