/* session_wait.c — waiting on the peer: spin then sleep on the provider, poll bits, epoll arming. */
#include "session/session_priv.h"

#include "common/kick.h"
#include "common/log.h"
#include "common/waitpol.h"

#include <errno.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* What the peer announced beside the message stream: a FIN or a reset
 * queued behind unread data, its death, urgent bytes.  `probe` allows a
 * system call (to find a dead peer), at most every 200 µs. */
void sess_peer_check(struct ssw_session *s, bool probe)
{
	const struct ssw_progress_ops *pg = s->p->progress;
	/* a transport that moves ends after MOVED: no news of the connection */
	if (!pg->peer_state || !s->loc->ep || s->mv.offered || s->mv.waiting)
		return;
	if (probe) {
		uint64_t now = ssw_now_ns();
		if (now - s->w.probe_ns < 200000)
			probe = false;
		else
			s->w.probe_ns = now;
	}
	uint32_t urg = s->urg.peer;
	uint32_t st = pg->peer_state(s->loc->ep, probe, &urg);
	s->urg.peer = urg;
	if (st & (SSW_PEER_FIN | SSW_PEER_CLOSED))
		s->fin_rcvd = true;
	if (st & SSW_PEER_CLOSED)
		s->peer_closed = true;
	if (st & SSW_PEER_RESET)
		sess_on_reset(s);
}

/* Does any installed signal handler lack SA_RESTART?  Then a blocking call
 * interrupted by a signal must report EINTR, as the kernel would. */
static bool eintr_visible(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return true;
	}
	return false;
}

/* After a sleep: take the doorbell, unless a fellow sleeper (still in its
 * sleep) may need it: a woken poll re-checks the fd, and goes back to sleep
 * if we drained it first.  A fellow wakes at once on a doorbell left for it;
 * a count left high by a killed process costs a few extra wake-ups (then
 * the doorbell is taken), not a spin. */
static void woke(struct ssw_session *s)
{
	static __thread unsigned left;
	const struct ssw_progress_ops *pg = s->p->progress;
	if (!s->loc->ep)
		return; /* its transport went meanwhile (moved, or reset) */
	if (pg->wake_leave && left < 64 && atomic_load(&s->w.sleepers) > 0) {
		left++;
		pg->wake_leave(s->loc->ep);
		return;
	}
	left = 0;
	pg->wake_ack(s->loc->ep);
}

#define SLEEP_CAP_MIN_MS 1
#define SLEEP_CAP_MAX_MS 1000  /* alone and idle: about one wake-up a second */
#define SLEEP_CAP_COMPANY_MS 64 /* two threads asleep on one connection */

/* A session's wait (common/waitpol.h): look while the policy allows, then
 * sleep once on the provider and let the caller look.  Another thread of
 * this connection may take what we wait for (a credit, say) together with
 * its doorbell, now or after it joins us: no sleep is endless.  The bound
 * (the policy's re-check) starts at 1 ms and doubles while nothing comes
 * (an idle connection wakes about once a second, 64 ms with company), and
 * is short again once traffic wakes us. */
static const struct ssw_waitcfg session_wait = {
	.nap_min_ms = SLEEP_CAP_MIN_MS,
	.nap_max_ms = SLEEP_CAP_MAX_MS,
	.once = true,
};

struct sess_waiter {
	struct ssw_waiter w;
	struct ssw_session *s;
	uint64_t gen, kgen;
	bool locked;
};

static int peer_ready(struct ssw_waiter *w)
{
	struct sess_waiter *sw = (struct sess_waiter *)w;
	if (!sess_rx_ready(sw->s))
		return 0;
	sess_lock(sw->s); /* what the wait learns is the session's */
	sw->locked = true;
	return 1;
}

/* Sleep on the provider (alone: its one-call sleep op).  Called unlocked,
 * returns locked. */
static int peer_sleep(struct ssw_waiter *w, int64_t ns)
{
	struct sess_waiter *sw = (struct sess_waiter *)w;
	struct ssw_session *s = sw->s;
	struct ssw_ep *ep = s->loc->ep;
	const struct ssw_progress_ops *pg = s->p->progress;
	sess_lock(s);
	sw->locked = true;
	/* another thread took messages in while we spun unlocked (credits we
	 * wait for, say): their doorbell is gone, so look before sleeping; or
	 * shut the socket down (ssw_session_shutdown kicks only armed sleeps);
	 * or control of the connection went to another process meanwhile
	 * (session_swap.c): its transport is not ours to touch, the caller
	 * asks for it again (sess_swap_check) */
	if (s->w.rx_gen != sw->gen || ssw_kick_gen() != sw->kgen || sess_foreign(s))
		return SSW_WAIT_RETURN;

	/* Credits we could not return earlier: the peer may be waiting for them
	 * while we wait for it.  Retry, and if the transport is still full,
	 * sleep only briefly. */
	bool owed = s->credit_owed && sess_send_msg(s, SSW_MSG_CREDIT, NULL, 0, NULL, 0, 0) < 0;
	int armed = pg->arm(ep);
	if (armed == -EAGAIN)
		return SSW_WAIT_RETURN;
	struct pollfd pfd[5];
	int n = pg->wait_fds(ep, pfd, 4);
	bool company = atomic_fetch_add(&s->w.sleepers, 1) > 0;
	int cap = s->w.pol.nap_ms ? (int)s->w.pol.nap_ms : SLEEP_CAP_MIN_MS;
	if (company && cap > SLEEP_CAP_COMPANY_MS)
		cap = SLEEP_CAP_COMPANY_MS;
	if (armed > 0 && cap > armed)
		cap = armed; /* the peer holds corked data: ours when its hold ends */
	int ms = ssw_wait_ms(ns); /* the deadline's, bounded by the re-check: never -1 */
	if (owed && ms > 1)
		ms = 1;
	if (ms > cap)
		ms = cap;
	/* alone: sleep in the provider's own wait, which takes the wake-up in
	 * the same system call (no poll, then drain); but only the first
	 * sleep after traffic (1 ms), since nothing but the peer can wake it.
	 * Longer sleeps poll our kick eventfd too: a shutdown by another
	 * thread of ours (kernel TCP wakes the sleeper at once) writes it
	 * (common/kick.h).  Registered under the lock that the shutdown takes. */
	bool lone = !company && pg->sleep && cap <= SLEEP_CAP_MIN_MS;
	int kick = lone ? -1 : ssw_kick_arm(s);
	if (kick >= 0)
		pfd[n++] = (struct pollfd){ .fd = kick, .events = POLLIN };
	sess_unlock(s);
	int r = -ENOSYS;
	if (lone && ms > 0)
		r = pg->sleep(ep, ms);
	if (r == -ENOSYS) {
		lone = false;
		r = sys_poll(pfd, (nfds_t)n, ms);
		if (r < 0)
			r = -errno;
	}
	/* interrupted by a signal whose handler restarts calls: woken (the
	 * caller looks and comes back, disarmed already) */
	if (r == -EINTR && !eintr_visible())
		r = 1;
	if (kick >= 0)
		ssw_kick_disarm(r > 0 ? pfd[n - 1].revents : 0);
	atomic_fetch_sub(&s->w.sleepers, 1);
	sess_lock(s);
	if (!lone)
		woke(s);
	if (r > 0 && pg->wake_sent_ns)
		w->rang = pg->wake_sent_ns(ep); /* ssw_wait keeps it if it fell in this wait */
	if (r < 0)
		return r;
	return r > 0 ? SSW_WAIT_WOKEN : SSW_WAIT_TIMEDOUT;
}

/* Wait for the peer.  Called and returns with the lock held.
 * deadline 0 = none.  Returns 0 (something may have changed), -ETIMEDOUT
 * or -EINTR. */
int sess_wait_peer(struct ssw_session *s, uint64_t deadline)
{
	if (deadline && ssw_now_ns() >= deadline)
		return -ETIMEDOUT;
	if (s->mv.waiting)
		return sess_move_wait(s, deadline);
	struct sess_waiter sw = {
		.w = { .ready = peer_ready, .sleep = peer_sleep, .peer_cpu = ssw_session_peer_cpu(s) },
		.s = s,
		.gen = s->w.rx_gen,
		.kgen = ssw_kick_gen(),
	};
	sess_unlock(s);
	int r = ssw_wait(&s->w.pol, &session_wait, deadline, &sw.w);
	if (!sw.locked)
		sess_lock(s);
	/* without the lock, control may have gone to another process, or
	 * another may be asking for it (session_swap.c) */
	if (s->exclusive)
		sess_swap_check(s);
	if (r == -EINTR || r == -ETIMEDOUT)
		return r;
	return 0;
}

/* Writable as tcp_poll says (sk_stream_is_writeable): the free space at
 * least half of what is queued, i.e. up to two thirds of the limit in
 * flight.  A writer that waits for POLLOUT is woken with a third of the
 * window to fill, not a sliver (fewer, larger writes). */
static bool tx_writable(const struct ssw_session *s)
{
	uint64_t lim = tx_limit(s), q = s->tx_inflight;
	return lim > q && lim - q >= q / 2;
}

/* tcp_poll's answer from what is known (nothing read here); `transport`:
 * also readable when the transport holds a message not looked at yet. */
static short state_bits(struct ssw_session *s, bool transport)
{
	short ev = 0;
	size_t q = s->q.len;
	if (q && s->urg.mark_valid && !s->urg.inline_ && s->rx_pos == s->urg.mark)
		q--; /* a lone urgent byte does not make the socket readable */
	bool readable = q || s->rr.active || s->rw.active || (s->hv && is_stream(s->hm.h.type)) ||
			(transport && s->loc->ep && s->p->progress->rx_ready(s->loc->ep));
	if ((rcv_down(s) && snd_down(s)) || tcp_closed(s))
		ev |= POLLHUP;
	if (rcv_down(s))
		ev |= POLLIN | POLLRDNORM | POLLRDHUP;
	if (readable)
		ev |= POLLIN | POLLRDNORM;
	if (snd_down(s) || s->peer_closed || (tx_writable(s) && sess_tx_room_ok(s)))
		ev |= POLLOUT | POLLWRNORM;
	if (sess_urg_pending(s))
		ev |= POLLPRI;
	if (s->so_error)
		ev |= POLLERR;
	return ev;
}

/* tcp_poll's answer. */
static short poll_bits(struct ssw_session *s)
{
	sess_pump(s, false);
	if (!s->wr_shut && (!tx_writable(s) || !sess_tx_room_ok(s)))
		/* a writer waiting for POLLOUT: the credits may sit behind unread
		 * data, and the peer (maybe waiting on us the same way) gets its
		 * transport back when we take its data into our queue, as a
		 * kernel receive buffer would */
		sess_pump(s, true);
	sess_peer_check(s, true);
	return state_bits(s, false);
}

/* What a fork-shared transport holds, into the session as a receive
 * buffer would take it, by whoever looks (the transport, the queue and the
 * counts are the session's, which all holders share): credits applied,
 * stream bytes staged, so that a process not in control sees the socket
 * readable for bytes a read returns, as tcp_poll, and not for credits
 * (soak seed 866100416: a thread's select woke on the credits that
 * followed a swap).  The swap's messages are taken in too: what they
 * change is the session's state, which the controller answers at its
 * next call (a SUSPEND becomes peer_wants); a look that stopped there
 * never saw the bytes behind a SUSPEND the controller, in no call, had
 * not answered yet (soak seed 869100040).  A rendezvous stays at the
 * head for the controller, parsed: its fields are copied into the
 * session. */
static void foreign_pump(struct ssw_session *s)
{
	if (s->hv || s->rr.active || s->rw.active)
		return;
	while (sess_head(s) > 0) {
		uint8_t t = s->hm.h.type;
		if (t == SSW_MSG_CREDIT || t == SSW_MSG_WINDOW || t == SSW_MSG_SUSPEND || t == SSW_MSG_SUSPENDED ||
		    t == SSW_MSG_RESUME)
			sess_handle_control(s);
		else if (t != SSW_MSG_DATA && t != SSW_MSG_FIN && t != SSW_MSG_OOB)
			return;
		else if (!sess_stage_head(s))
			return; /* the queue is full: readable anyway */
	}
}

void sess_foreign_stage(struct ssw_session *s)
{
	/* (a copy of a transport in process memory says nothing: fabric) */
	if (s->loc->ep && s->swap_transport) {
		sess_peer_check(s, true);
		foreign_pump(s);
	}
}

/* Another process drives the connection now (session_swap.c): the same
 * answer from what all holders know, without reading (a read would take
 * control); a fork-shared transport (s->swap_transport), which any holder
 * may look at, pumped first (foreign_pump). */
static short foreign_bits(struct ssw_session *s)
{
	sess_lock(s);
	sess_foreign_stage(s);
	short ev = state_bits(s, false);
	sess_unlock(s);
	return ev;
}

short ssw_session_poll(struct ssw_session *s)
{
	if (!sess_enter_look(s)) /* a reset socket's bits, in this process */
		return sess_foreign_live(s) ? foreign_bits(s)
					    : POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLERR | POLLHUP | POLLRDHUP;
	short ev = poll_bits(s);
	sess_unlock(s);
	return ev;
}

int ssw_session_sleep_prepare(struct ssw_session *s, struct pollfd *pfd, int n, int *nout)
{
	int rc = 0;
	if (!sess_enter_look(s)) {
		if (!sess_foreign_live(s))
			return -EAGAIN; /* ready: poll_bits says reset */
		/* another process drives it: nothing here rings; naps */
		atomic_fetch_add(&s->w.sleepers, 1);
		*nout = 0;
		return 1;
	}
	if (s->mv.waiting) { /* for the next transport (session_move.c) */
		int k = sess_move_ready(s) ? -EAGAIN : sess_move_fds(s, pfd, n, true);
		if (k < 0) {
			rc = -EAGAIN;
		} else {
			*nout = k;
			atomic_fetch_add(&s->w.sleepers, 1);
			rc = 1;
		}
		sess_unlock(s);
		return rc;
	}
	/* credits the transport had no room for: the peer may wait for them
	 * while the application only polls (as wait_peer: retry, then nap) */
	if (!s->loc->ep) { /* no transport (gone with a reset): nothing rings, look */
		sess_unlock(s);
		return -EAGAIN;
	}
	bool owed = s->credit_owed && sess_send_msg(s, SSW_MSG_CREDIT, NULL, 0, NULL, 0, 0) < 0;
	int armed = s->p->progress->arm(s->loc->ep);
	if (armed == -EAGAIN) {
		rc = -EAGAIN;
	} else {
		*nout = s->p->progress->wait_fds(s->loc->ep, pfd, n);
		/* naps too while the peer holds corked data (ours when its hold ends),
		 * and while another process may take control (sess_swap_shared) */
		rc = atomic_fetch_add(&s->w.sleepers, 1) > 0 || owed || armed > 0 || sess_swap_shared(s) ? 1 : 0;
	}
	sess_unlock(s);
	return rc;
}

void ssw_session_sleep_done(struct ssw_session *s)
{
	atomic_fetch_sub(&s->w.sleepers, 1);
	if (!sess_enter_look(s))
		return;
	woke(s);
	sess_unlock(s);
}

int ssw_session_watch(struct ssw_session *s)
{
	if (!sess_enter_look(s))
		return -EAGAIN;
	struct pollfd pf[8];
	int rc = s->mv.waiting ? (sess_move_ready(s) || sess_move_fds(s, pf, 8, true) < 0 ? -EAGAIN : 0)
		 : s->loc->ep  ? s->p->progress->arm(s->loc->ep)
			       : -EAGAIN;
	sess_unlock(s);
	return rc;
}

void ssw_session_unwatch(struct ssw_session *s)
{
	if (!sess_enter_look(s))
		return;
	if (s->loc->ep)
		woke(s);
	sess_unlock(s);
}

int ssw_session_peer_cpu(struct ssw_session *s)
{
	struct ssw_ep *ep = __atomic_load_n(&s->loc->ep, __ATOMIC_ACQUIRE);
	if (sess_foreign(s))
		return -1;
	return ep && s->p->progress->peer_cpu ? s->p->progress->peer_cpu(ep) : -1;
}

uint64_t ssw_session_wake_sent_ns(struct ssw_session *s)
{
	struct ssw_ep *ep = __atomic_load_n(&s->loc->ep, __ATOMIC_ACQUIRE);
	if (sess_foreign(s))
		return 0;
	return ep && s->p->progress->wake_sent_ns ? s->p->progress->wake_sent_ns(ep) : 0;
}

void sess_cede(struct ssw_session *s)
{
	struct ssw_ep *ep = __atomic_load_n(&s->loc->ep, __ATOMIC_ACQUIRE);
	const struct ssw_progress_ops *pg = s->p->progress;
	if (sess_foreign(s) || !ep)
		return;
	int cpu = pg->peer_cpu ? pg->peer_cpu(ep) : -1;
	ssw_wait_cede_to(cpu, pg->peer_asleep && pg->peer_asleep(ep) == 0);
}

bool ssw_session_rx_ready(struct ssw_session *s)
{
	struct ssw_ep *ep = __atomic_load_n(&s->loc->ep, __ATOMIC_ACQUIRE);
	if (sess_foreign(s))
		return true; /* not ours to look at: the next locked op says (and may take it) */
	return ep && s->p->progress->rx_ready(ep);
}
