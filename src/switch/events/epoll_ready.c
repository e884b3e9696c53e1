/* epoll_ready.c — the ready list: which side entries to report, looked at
 * (level, edge, oneshot as the kernel), then armed on their doorbell or kept
 * hot while waits spin; what the inner set rang taken in. */
#include "switch/events/epoll_priv.h"

#include "common/bell.h"
#include "common/sys.h"

#include <errno.h>

#define HARVEST 64
#define SETTLE_TRIES 3

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
	bool rx_interest = e->events & (EPOLLIN | EPOLLPRI | EPOLLRDNORM | EPOLLRDBAND);
	/* every arrival counted (staged): for an entry that asks for input,
	 * only once it is readable (staging at every look of one that is not
	 * left nginx's connections waiting: t_nginx, ab with a connection per
	 * request); one that asks only for urgent data counts at each look */
	if (!peek && ((ev & EPOLLIN) || (rx_interest && !(e->events & EPOLLIN))))
		(void)ssw_session_fionread(e->s->sess);
	ssw_session_get_stats(e->s->sess, &st);
	/* Kernel TCP wakes the socket's waiters, and so every edge-triggered
	 * entry, at the peer's FIN (sk_state_change: any interest) and at an
	 * arrival of data for an entry that asked for input or urgent data
	 * (sk_data_ready's key: IN, PRI, RDNORM, RDBAND); the entry then
	 * reports whatever of its interest is ready, not only what is new (an
	 * urgent byte not yet read: EPOLLPRI again; EPOLLIN at an arrival). */
	bool fin_wake = (st.fin_in && !e->fin_seen) || st.state_wakes != e->wakes_seen;
	bool rx_wake = rx_interest && st.bytes_received != e->rx_seen;
	if (fin_wake || rx_wake)
		fresh |= ev;
	if (!peek) {
		e->fin_seen = st.fin_in;
		e->wakes_seen = st.state_wakes;
	}
	/* credits came back.  Kernel TCP makes this edge only after a send or
	 * a poll found too little room (SOCK_NOSPACE); the switch makes it
	 * whenever room comes back: one edge more, never one less (README
	 * Limits; gating it on every path that can find no room hung nginx) */
	if ((ev & EPOLLOUT) && st.tx_credited != e->tx_seen)
		fresh |= EPOLLOUT;
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

/* e holds a standing arm now.  On a connection whose processes take turns
 * (seed 000's swap), the doorbell serves only while control is ours: once
 * another process takes it, the peer's news goes to that one's reads and
 * nothing rings here (soak seed 866200343: a thread in epoll_wait since
 * before the fork missed the peer's reset).  Such members are counted: the
 * set's sleeps nap while there are any, and epx_swap_scan looks at them
 * again when control left this process. */
static void armed(struct epx *x, struct epx_entry *e)
{
	e->armed = true;
	if (!e->swapw && ssw_session_swap_shared(e->s->sess)) {
		e->swapw = true;
		if (!x->nswapw++)
			x->swapw_bell = ssw_bell_seen();
		/* control may have left between the arm and the bell's read */
		if (!ssw_session_controlled_here(e->s->sess)) {
			epx_q_push(x, e);
			x->again = true;
		}
	}
}

void epx_swap_scan(struct epx *x)
{
	if (!x->nswapw)
		return;
	uint32_t b = ssw_bell_seen();
	if (b == x->swapw_bell)
		return; /* control left no connection of this process since the last scan */
	x->swapw_bell = b;
	for (int fd = 0; fd < x->nbyfd; fd++) {
		struct epx_entry *e = x->byfd[fd];
		if (e && e->swapw && e->s->sess &&
		    (!ssw_session_controlled_here(e->s->sess) || !ssw_session_swap_shared(e->s->sess)))
			epx_q_push(x, e);
	}
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
		epx_make_polled(x, e);
		return;
	}
	if (e->disabled || e->finished) {
		epx_wfd_unregister(x, e); /* a hang-up must not wake us for ever */
		return;
	}
	if (e->nwfd && e->wfd_gen != ssw_session_fds_gen(sess))
		epx_wfd_unregister(x, e); /* its transport moved (session/session_move.c) */
	int r = e->nowatch ? -1 : e->nwfd ? e->nwfd : epx_wfd_register(x, e);
	if (r < 0) {
		e->nowatch = true;
		epx_make_polled(x, e);
		return;
	}
	if (r == 0) {
		/* no wait fd: the peer is gone, nothing will ring; its end (EOF,
		 * reset) may be news, so e is looked at once more */
		e->finished = true;
		epx_q_push(x, e);
		x->again = true;
		return;
	}
	if (ssw_session_watch(sess) == 0) {
		armed(x, e);
		return;
	}
	if (!ssw_session_controlled_here(sess) && ssw_session_look_sees(sess)) {
		/* another process drives it (processes take turns): nothing
		 * here rings, and what it does (its reads, a reset it draws)
		 * is seen only by looking: after each nap, while it is not
		 * ours (soak seed 866200343: a shutdown of ours made it look
		 * finished, and the peer's reset later went unseen).  Over
		 * fabric a look sees nothing of the driver's transport: the
		 * staging below asks for control (t_fabric_swap (e)) */
		epx_q_push(x, e);
		x->nap = true;
		return;
	}
	for (int i = 0; i < SETTLE_TRIES; i++) {
		(void)ssw_session_fionread(sess); /* stages everything queued */
		if (ssw_session_watch(sess) == 0) {
			armed(x, e);
			epx_q_push(x, e);
			x->again = true;
			return;
		}
		if (ssw_session_poll(sess) & (POLLHUP | POLLERR | POLLRDHUP)) {
			/* the peer is done: nothing more will ring.  It may have
			 * ended since e was looked at (EOF is news): look once more
			 * (a finished entry is not settled again, so no loop) */
			e->finished = true;
			epx_wfd_unregister(x, e);
			epx_q_push(x, e);
			x->again = true;
			return;
		}
	}
	epx_q_push(x, e); /* could not stage (memory): look again after a nap */
	x->nap = true;
}

/* e was just looked at by a wait.  A recently active member is not armed
 * yet: while waits spin they look at its ring (no doorbell, so no system
 * call on either side); it is armed before anyone sleeps (epx_arm_hot). */
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
void epx_hot_scan(struct epx *x)
{
	for (int i = 0; i < x->nhot; i++)
		if (ssw_session_rx_ready(x->hot[i]->s->sess))
			epx_q_push(x, x->hot[i]);
}

/* The CPU every hot member's peer was last seen on, or -1 (mixed, or not
 * known): a waiter whose peers all share its CPU hands it over at once. */
int epx_hot_peers_cpu(struct epx *x)
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
void epx_arm_hot(struct epx *x)
{
	while (x->nhot) {
		struct epx_entry *e = x->hot[--x->nhot];
		e->hot = false;
		if (!e->queued)
			settle(x, e);
	}
}

/* e's socket was found ready: its other entries (a dup in this set, or
 * the socket in other sets) look too.  Looking drained what their doorbell
 * was (fabric: the CQ's socket), so the inner sets would not tell them.
 * Called with epx_lock. */
static void touch_siblings(struct epx_entry *e)
{
	for (struct epx_entry *o = e->s->ep_watch; o; o = o->snext) {
		if (o == e)
			continue;
		epx_q_push(o->x, o);
		if (o->x != e->x && o->x->waiters)
			epx_kick(o->x);
	}
}

/* Look at one entry: its events to report now (0: none); peek looks only. */
static uint32_t look(struct epx *x, struct epx_entry *e, bool peek, bool *gone)
{
	*gone = false;
	epx_unwatch(e); /* takes the doorbell; settle arms again */
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
void epx_harvest(struct epx *x)
{
	struct epoll_event evs[HARVEST];
	int k = x->inner >= 0 ? sys_epoll_wait(x->inner, evs, HARVEST, 0) : 0;
	for (int i = 0; i < k; i++) {
		struct epx_entry *e = epx_by_tag(x, evs[i].data.u64);
		if (e)
			epx_q_push(x, e);
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
		epx_q_push(x, e); /* level-triggered: looked at again next time */
	else
		cool(x, e);
}

/* Collect ready side entries into out (at most max): the polled entries,
 * then the check list.  Entries reported go to the end of the check list
 * (level-triggered) so that busy sockets do not starve the others. */
int epx_collect(struct epx *x, struct epoll_event *out, int max)
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
			epx_free_entry(x, e);
			continue;
		}
		if (e->s->state == SSW_ST_CONNECTED && e->s->sess && !e->nowatch) {
			epx_p_remove(x, e); /* connected: from now on on the check list */
			epx_q_push(x, e);
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
	return n + epx_collect_queue(x, out + n, max - n);
}

/* The check list part of collect; also called again within one wait call
 * for members whose doorbell was found after the first pass. */
int epx_collect_queue(struct epx *x, struct epoll_event *out, int max)
{
	int n = 0;
	struct epx_entry *stop = NULL;
	while (n < max && x->qhead && x->qhead != stop) {
		struct epx_entry *e = epx_q_pop(x);
		if (e->call == x->call) { /* reported by this call already */
			epx_q_push(x, e);
			if (!stop)
				stop = e;
			continue;
		}
		bool gone;
		uint32_t ev = look(x, e, false, &gone);
		if (gone) {
			epx_free_entry(x, e);
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
	epx_arm_hot(x);
	epx_harvest(x);
	for (struct epx_entry *e = x->polled; e; e = e->pnext) {
		bool gone;
		if (!e->disabled && look(x, e, true, &gone))
			return true;
	}
	struct epx_entry *stop = NULL;
	while (x->qhead && x->qhead != stop) {
		struct epx_entry *e = epx_q_pop(x);
		bool gone;
		if (look(x, e, true, &gone) && !gone) {
			epx_q_push(x, e); /* stays for the wait that takes it */
			return true;
		}
		if (gone) {
			epx_free_entry(x, e);
			continue;
		}
		settle(x, e);
		if (!stop && e->queued)
			stop = e;
	}
	return false;
}

int ssw_epoll_peek(int epfd)
{
	if (!(ssw_fdinfo_get(epfd) & SSW_FI_EPOLL) || !__atomic_load_n(&epx_all, __ATOMIC_RELAXED))
		return -1;
	pthread_mutex_lock(&epx_lock);
	struct epx *x = epx_find(epfd, false);
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
		epx_q_push(e->x, e);
		if (e->x->waiters)
			epx_kick(e->x);
	}
	pthread_mutex_unlock(&epx_lock);
}
