/* session_life.c — session lifetime: INIT negotiation, creation, shutdown, close and linger, fork holders, state queries. */
/* A session lives in memory shared across fork (its lock is process-shared
 * and robust); the processes holding it are counted, and only the last
 * holder's close reaches the peer. */
#include "session/session_priv.h"

#include "common/bell.h"
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
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>

/* Lock the session.  A process that died holding it (killed inside a
 * send) leaves its state half-updated: that one connection is reset. */
void sess_lock(struct ssw_session *s)
{
	if (pthread_mutex_lock(&s->lock) == EOWNERDEAD) {
		pthread_mutex_consistent(&s->lock);
		sess_set_broken(s, "a process died while using this connection");
	}
}

/* Called locked: this process drives the exclusive connection from now on.
 * Our transport's copy of what arrived before the fork was the other's
 * too: what that one consumed must not be read twice (session_rx.c). */
static void take_over(struct ssw_session *s, pid_t me)
{
	atomic_store(&s->user, me);
	if (s->mv.parked) {
		(void)sess_move_in(s); /* left for the next driver (session_move.c) */
	} else if (sess_move_stale(s)) {
		/* the transport lived in the process that drove it */
		sess_set_broken(s, "the process driving this connection exited with its transport");
	} else if (s->touched && !s->swap_transport) {
		atomic_store(&s->resync, me);
	}
	s->touched = true;
	/* others may ask for it from now on: this process serves them */
	if (sess_swap_possible(s) && sess_holders(s) > 1 && ssw_session_cfg.control_taken)
		ssw_session_cfg.control_taken();
}

/* An exclusive connection is driven by one process at a time: the first to
 * drive it after a fork takes it, and another may take it over once that
 * one is gone (exited, or closed its copy).  Never while the other still
 * drives it: both would read the transport, each taking bytes the other
 * then misses.  Nor when the one gone left a message held as a view of
 * its own memory (s->hv): those bytes are not reachable from here; that
 * process sees a reset instead (sem epoll_fork, where a child only waited
 * on an inherited epoll set: the parent read a stray byte, then EOF).
 * Where the swap runs (session_swap.c), a process that transfers data
 * (`ask`) asks a live controller for it; a look (poll, a sleep's set-up)
 * never does (seed 000: only a transfer of data moves control), and the
 * controller serves those asking first: at once for a transfer (FIFO:
 * they asked first, then we ask again), without waiting for a look. */
static bool enter(struct ssw_session *s, bool ask)
{
	sess_lock(s);
	if (atomic_load_explicit(&s->moved, memory_order_relaxed)) {
		sess_unlock(s); /* another process took the connection (session_unshare.c) */
		if (ask)
			SSW_WARN_ONCE("a connection this process shares went with pid %d, which gave up a user id: "
				      "here it reads as reset (README Security)", (int)atomic_load(&s->moved_to));
		return false;
	}
	if (!s->exclusive)
		return true;
	pid_t me = ssw_pid();
	if (atomic_load(&s->user) == me && s->sw.qn && sess_swap_possible(s))
		(void)sess_swap_serve(s, ask ? ssw_now_ns() + SWAP_WAIT_NS : 0);
	pid_t u = atomic_load(&s->user);
	if (u == me) {
		if (s->mv.parked)
			(void)sess_move_in(s); /* control came with the transport left for us */
		return true;
	}
	bool vacant = (u == 0 || !ssw_pid_alive(u)) && !(s->touched && s->hv);
	if (vacant && !s->sw.qn) {
		take_over(s, me);
		return true;
	}
	/* a live controller (or others already waiting): ask for control */
	if (ask && sess_swap_take(s))
		return true;
	if (ask && vacant) {
		take_over(s, me);
		return true;
	}
	sess_unlock(s);
	return false;
}

bool sess_enter(struct ssw_session *s)
{
	return enter(s, true);
}

bool sess_enter_look(struct ssw_session *s)
{
	return enter(s, false);
}

bool sess_foreign_live(const struct ssw_session *s)
{
	return sess_swap_possible(s) && !s->broken && !atomic_load_explicit(&s->moved, memory_order_relaxed);
}

bool sess_foreign(const struct ssw_session *s)
{
	return s->exclusive && atomic_load_explicit(&s->user, memory_order_relaxed) != ssw_pid();
}

/* The queue holds bytes the application has not read (taken out of the
 * transport by a poll's or an epoll's look, a writer's, a peek): the peer
 * hears so, since nothing runs here to say it should this process be
 * killed, and kernel TCP resets a connection whose owner dies with unread
 * data (sem kill_unread: the reader's poll had taken the bytes in).  Said
 * on changes only, at the end of the call that made them. */
static void note_unread(struct ssw_session *s)
{
	bool u = s->q.len != 0;
	struct ssw_ep *ep = s->loc ? s->loc->ep : NULL;
	if ((u == s->unread_noted && (!u || ep == s->unread_ep)) || !ep || !s->p->progress->note)
		return;
	s->p->progress->note(ep, SSW_NOTE_UNREAD, u);
	s->unread_noted = u;
	s->unread_ep = ep;
}

void sess_unlock(struct ssw_session *s)
{
	note_unread(s);
	if (sess_swap_owed(s))
		sess_swap_flush(s);
	pthread_mutex_unlock(&s->lock);
	sess_urg_flush();
}

/* The kernel's sk_state_change: every waiter on the socket looks again,
 * this process's asleep ones (the kick) and edge-triggered entries (the
 * count of state wakes). */
static void state_change(struct ssw_session *s)
{
	s->st.state_wakes++;
	ssw_kick(s);
}

/* A reset arrives (tcp_reset): EPIPE in CLOSE_WAIT, else ECONNRESET; none
 * once closed.  Data already received stays readable.  As tcp_done's
 * sk_state_change, our threads asleep on the socket look again: a reset
 * our own send drew (the peer's socket was gone) rings no doorbell (soak
 * seeds 840000053, 842000431; sem reset_wakes). */
void sess_on_reset(struct ssw_session *s)
{
	if (tcp_closed(s))
		return;
	s->so_error = s->fin_rcvd && !s->wr_shut ? -EPIPE : -ECONNRESET;
	s->reset = true;
	state_change(s);
}

/* Take the pending error for a failed send (sk_stream_error). */
int sess_take_send_error(struct ssw_session *s)
{
	int e = s->so_error ? s->so_error : -EPIPE;
	s->so_error = 0;
	return e;
}

void sess_set_broken(struct ssw_session *s, const char *why)
{
	if (!s->broken)
		SSW_WARN("session: connection reset: %s", why);
	s->broken = true;
	sess_on_reset(s);
}

/* What we let the peer do: nothing one-sided while our own rendezvous is
 * off (session_rndv.c refuses it anyway; said here, the peer never asks). */
static uint32_t my_caps(void)
{
	if (!sess_rndv_enabled())
		return 0;
	switch (ssw_session_cfg.rdma_mode) {
	case SSW_RDMA_READ_ONLY:
		return SSW_CAP_RDMA_READ;
	case SSW_RDMA_WRITE_ONLY:
		return SSW_CAP_RDMA_WRITE;
	case SSW_RDMA_NONE:
		return 0;
	}
	return SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE;
}

_Static_assert(sizeof(struct ssw_wire_init) == SSW_SESSION_INIT_BYTES, "the INIT the switch carries");

void ssw_session_make_init(const struct ssw_session_opts *o, void *buf)
{
	struct ssw_wire_init in = {
		.version = SSW_WIRE_VERSION,
		/* the transport clamps it to what it can hold (window_cap) */
		.window = o && o->rcvbuf ? o->rcvbuf : UINT32_MAX,
		.caps = my_caps() | SSW_INIT_SWAP | SSW_INIT_MOVE | (o && o->ask_proof ? SSW_INIT_ASK_PROOF : 0),
		.pid = (int32_t)ssw_pid(),
	};
	memcpy(buf, &in, sizeof in);
}

void sess_init_sync(struct ssw_session *s)
{
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&s->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
	pthread_cond_init(&s->tx_cv, &ca);
	pthread_condattr_destroy(&ca);
}

struct ssw_session *ssw_session_new(const struct ssw_provider *prov, struct ssw_ep *ep,
				    const struct ssw_session_opts *o, const void *peer_init)
{
	struct ssw_wire_init pi, *peer = &pi;
	if (!peer_init)
		return NULL;
	memcpy(&pi, peer_init, sizeof pi);
	if (peer->version != SSW_WIRE_VERSION || peer->window < 4096)
		return NULL;
	/* queue: what credits allow to be staged, plus one staged rendezvous */
	uint64_t rmax = ssw_session_cfg.rndv_max && ssw_session_cfg.rndv_max < STAGE_RNDV_MAX ? ssw_session_cfg.rndv_max
											  : STAGE_RNDV_MAX;
	size_t head_sz = (sizeof(struct ssw_session) + 4095) & ~(size_t)4095;
	size_t qcap = ((size_t)sess_window_cap(prov, ep) + (size_t)rmax + (64u << 10) + 4095) & ~(size_t)4095;
	size_t tcap = sess_stage_size(prov, ep);
	struct ssw_session *s = ssw_shared_alloc(head_sz + qcap + tcap, sizeof *s);
	if (!s)
		return NULL;
	s->loc = calloc(1, sizeof *s->loc);
	if (!s->loc) {
		ssw_shared_free(s, head_sz + qcap + tcap, true);
		return NULL;
	}
	s->map_size = head_sz + qcap + tcap;
	s->q.buf = (uint8_t *)s + head_sz;
	s->q.cap = qcap;
	s->ts.buf = s->q.buf + qcap;
	s->ts.cap = tcap;
	sess_holds_set(s, 1);
	sess_init_sync(s);
	s->p = prov;
	s->loc->ep = ep;
	s->exclusive = !(prov->caps & SSW_CAP_SHARED_CONTEXT);
	/* the endpoint itself is in fork-shared memory (shm taken as a
	 * provider without shared context): any holder can drive it once the
	 * peer is suspended (session_swap.c) */
	s->swap_transport = s->exclusive && prov->conn->ep_caps && (prov->conn->ep_caps(ep) & SSW_CAP_SHARED_CONTEXT);
	if (s->exclusive)
		(void)ssw_bell_init();
	atomic_store(&s->user, ssw_pid());
	s->touched = true;
	size_t mm = prov->msg->max_msg(ep);
	s->max_payload = mm - sizeof(struct ssw_wire_hdr) - sizeof(struct ssw_wire_rndv);
	if (s->max_payload > CHUNK_MAX)
		s->max_payload = CHUNK_MAX;
	uint32_t cap = sess_window_cap(prov, ep);
	s->window = o && o->rcvbuf ? o->rcvbuf : cap;
	if (s->window > cap)
		s->window = cap;
	if (s->window < 4096)
		s->window = 4096;
	s->sndbuf = o ? o->sndbuf : 0;
	s->urg.inline_ = o && o->oobinline;
	s->cork = o && o->cork;
	s->peer_window = peer->window < cap ? peer->window : cap;
	sess_set_peer_caps(s, peer->caps);
	s->peer_pid = peer->pid;
	return s;
}

bool sess_rx_pending_data(struct ssw_session *s)
{
	sess_pump(s, false);
	return s->q.len || s->rr.active || s->rw.active || (s->hv && is_stream(s->hm.h.type) && s->hm.h.type != SSW_MSG_FIN);
}

void ssw_session_sopt_set(struct ssw_session *s, int which, int v)
{
	if (which < 0 || which >= SSW_SOPT_COUNT)
		return;
	atomic_store(&s->sopt[which], v);
	atomic_fetch_or(&s->sopt_set, 1u << which);
}

int ssw_session_sopt(struct ssw_session *s, int which, int dflt)
{
	if (which < 0 || which >= SSW_SOPT_COUNT || !(atomic_load(&s->sopt_set) & (1u << which)))
		return dflt;
	return atomic_load(&s->sopt[which]);
}

/* The controller of a transport of its own lets go while others keep
 * the connection: the peer is suspended and the transport parked for the
 * next driver (session_move.c), or the connection is reset (bounded).
 * For an exec (session_handover.c: the new image is the next driver) a
 * peer that cannot take a new transport (no offer) is resumed instead and
 * the connection stays as it was: -EOPNOTSUPP, the caller relays it; a
 * peer that did not answer in time: -ETIMEDOUT (its SUSPENDED, when it
 * comes, is answered by whoever drives next: sess_swap_flush). */
#define PARK_NS (2ull * 1000000000ull)
/* An exec waits no longer (a peer in no call answers only at its next
 * one): the connection is relayed instead.  The exec asks every peer at
 * once first (ssw_session_exec_ask), so this bounds the exec's wait, not
 * each connection's. */
#define EXEC_PARK_NS (200ull * 1000000ull)
bool sess_park_ask(struct ssw_session *s)
{
	if (!s->sw.asked && sess_send_ctl(s, SSW_MSG_SUSPEND, NULL, 0) == 0) {
		s->sw.asked = true;
		s->sw.asked_ns = ssw_now_ns();
	}
	return s->sw.asked;
}

int sess_park(struct ssw_session *s, bool for_exec)
{
	uint64_t dl = ssw_now_ns() + PARK_NS;
	(void)sess_park_ask(s);
	if (for_exec && s->sw.asked)
		dl = s->sw.asked_ns + EXEC_PARK_NS;
	pid_t me = ssw_pid();
	bool was = sess_swap_alone(true); /* leaving: no serving, no asking back */
	/* the answer is ours: our helper thread, looking meanwhile, must not
	 * take it for one to resume (sess_swap_flush: t_hostile_move, where a
	 * child's exit then reset the connection) */
	s->sw.serving = me;
	while (s->sw.asked && !(s->sw.got && !s->hv) && !s->broken && !s->reset && ssw_now_ns() < dl &&
	       atomic_load(&s->user) == me) {
		if (sess_pump(s, true) > 0)
			continue;
		int w = sess_wait_peer(s, dl);
		if (w < 0 && w != -ETIMEDOUT && w != -EINTR)
			break;
	}
	if (s->sw.serving == me)
		s->sw.serving = 0;
	sess_swap_alone(was);
	/* (the wait may have served another process asking: control and the
	 * transport went to it, nothing is left to park) */
	if (s->broken || s->reset || atomic_load(&s->user) != me)
		return -ECONNRESET;
	if (for_exec && !(s->sw.got && !s->hv))
		return -ETIMEDOUT;
	if (for_exec && !s->mv.have_offer) {
		s->sw.asked = s->sw.got = false;
		s->sw.resume_owed = true;
		sess_swap_flush(s);
		return -EOPNOTSUPP;
	}
	if (!s->sw.got || !s->mv.have_offer || sess_move_out(s) < 0) {
		SSW_DEBUG("park: asked %d got %d offer %d hv %d", s->sw.asked, s->sw.got, s->mv.have_offer, s->hv);
		sess_set_broken(s, "a process left a shared connection whose transport could not be handed over");
		return -ECONNRESET;
	}
	s->sw.asked = s->sw.got = false;
	s->sw.resume_owed = true; /* the next driver's first message */
	return 0;
}

/* Does this process drive a transport of its own (moved: session_move.c),
 * which the others sharing the connection would lose with it?  Locked. */
static bool owns_moved(struct ssw_session *s)
{
	return s->exclusive && atomic_load(&s->user) == ssw_pid() && s->mv.tgen && !sess_move_stale(s) &&
	       !s->mv.parked;
}

bool ssw_session_exit_release(struct ssw_session *s)
{
	if (sess_holders(s) <= 1 || atomic_load(&s->moved))
		return false;
	/* never wait for the lock: its holder may be the code this _exit's
	 * signal handler interrupted */
	int rc = EBUSY;
	for (int i = 0; i < 100 && (rc = pthread_mutex_trylock(&s->lock)) == EBUSY; i++) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	if (rc == EOWNERDEAD) {
		pthread_mutex_consistent(&s->lock);
		sess_set_broken(s, "a process died while using this connection");
	} else if (rc) {
		return false;
	}
	if (owns_moved(s))
		(void)sess_park(s, false);
	if (s->exclusive && atomic_load(&s->user) == ssw_pid()) {
		(void)sess_pump(s, true); /* what our copy took in, into the shared queue (drop_local) */
		atomic_store(&s->user, 0); /* another holder may take it over */
	}
	sess_hold_drop(s);
	sess_unlock(s);
	return true;
}

/* What this process needs to let go of its copy, read while its hold
 * (or the lock) still keeps the session: once both are gone the last
 * holder may end it and its mapping serve another connection (a child's
 * exit freed the new one's sess_local). */
struct held {
	struct sess_local *loc;
	const struct ssw_provider *p;
	size_t map_size;
};

static struct held held_of(const struct ssw_session *s)
{
	return (struct held){ s->loc, s->p, s->map_size };
}

/* Our copy goes; the others keep the connection (nothing shared is read). */
static void let_go(struct ssw_session *s, struct held h)
{
	h.p->conn->close(h.loc->ep, SSW_CLOSE_DETACH);
	free(h.loc);
	ssw_shared_free(s, h.map_size, false); /* another process still maps it */
}

/* This process lets go of the connection; the others keep it. */
static void drop_local(struct ssw_session *s)
{
	if (s->exclusive && atomic_load(&s->user) == ssw_pid()) {
		/* what our transport took in goes into the shared queue,
		 * where the next process to drive it finds it: left in our
		 * memory (a message held, or not yet looked at) it would
		 * be lost to that one, and its connection reset */
		(void)sess_pump(s, true);
		atomic_store(&s->user, 0); /* another holder may take it over */
	}
	struct held h = held_of(s); /* (see held_of) */
	sess_unlock(s);
	let_go(s, h);
}

void ssw_session_close(struct ssw_session *s, bool abort)
{
	if (!s)
		return;
	if (atomic_load(&s->moved)) {
		/* the connection went with a process that dropped privileges:
		 * let go of this copy, tell the peer nothing (read first: the
		 * others may end it once our hold is gone) */
		struct held h = held_of(s);
		sess_hold_drop(s);
		let_go(s, h);
		return;
	}
	if (!s->exclusive) {
		/* shared context: nothing of ours to hand over; the hold goes
		 * at once (a wrapper's exec waits for its relays' holds to go:
		 * switch/share/handover.c), and nothing shared is read after */
		struct held h = held_of(s);
		if (sess_hold_drop(s) > 1) {
			let_go(s, h);
			return;
		}
		sess_lock(s);
	} else {
		sess_lock(s);
		/* a transport of our own the others need goes to them first (its
		 * wait lets the lock go at times: our hold counts meanwhile) */
		if (sess_holders(s) > 1 && owns_moved(s))
			(void)sess_park(s, false);
		if (sess_hold_drop(s) > 1) {
			drop_local(s); /* a forked process still holds it: no FIN yet */
			return;
		}
	}
	/* the last holder: whoever drove it is gone (one that left a message
	 * held in its own memory leaves it unread: the close resets) */
	if (s->exclusive && atomic_load(&s->user) != ssw_pid() && !(s->touched && s->hv)) {
		take_over(s, ssw_pid());
		sess_swap_flush(s); /* a moved transport's RESUME (session_move.c) before our FIN */
	}
	/* Kernel TCP resets a connection closed with unread data. */
	if (!abort && !s->broken && sess_rx_pending_data(s))
		abort = true;
	/* bytes sent while the peer was suspended leave first, as a kernel
	 * socket's buffer drains after close (bounded: the peer's side may
	 * never resume) */
	if (!abort && s->ts.len && !sess_stage_drain(s, ssw_now_ns() + STAGE_CLOSE_NS)) {
		SSW_WARN_ONCE("close: the peer stayed suspended %d s with bytes sent before the close; the connection is reset",
			      (int)(STAGE_CLOSE_NS / 1000000000ull));
		abort = true;
	}
	abort = abort || s->broken;
	if (!abort && !s->wr_shut && !s->reset) {
		/* our FIN; if the transport is full the orderly close says it */
		(void)sess_send_msg(s, SSW_MSG_FIN, NULL, 0, NULL, 0, 0);
	}
	sess_move_end(s);
	s->p->conn->close(s->loc->ep, abort ? SSW_CLOSE_ABORT : SSW_CLOSE_ORDERLY);
	s->loc->ep = NULL;
	sess_unlock(s);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->tx_cv);
	/* the mapping is kept for a next connection (common/shmem.c): not
	 * with the pages a stream staged */
	if (s->q.hi > 4096) {
		size_t top = (s->q.hi + 4095) & ~(size_t)4095;
		(void)madvise(s->q.buf, top < s->q.cap ? top : s->q.cap, MADV_REMOVE);
	}
	sess_stage_trim(s);
	free(s->loc);
	ssw_shared_free(s, s->map_size, true); /* the last holder: nobody else maps it */
}

/* A hold more or less (a relay's counts as one of the relays too). */
static void hold_change(struct ssw_session *s, int delta, bool relay)
{
	uint64_t one = 1 + (relay ? SESS_HOLD_RELAY : 0);
	if (delta > 0)
		atomic_fetch_add(&s->holds, one);
	else
		atomic_fetch_sub(&s->holds, one);
	if (!s->exclusive)
		return;
	/* fork (+1): whichever process drives it first takes it (sess_enter).
	 * A hold dropped (a fork that failed, an exec that does not inherit
	 * it): this process lets go, if it drove it (its pid lives on in the
	 * new image, which must not keep the others off) */
	sess_lock(s);
	if (delta > 0) {
		atomic_store(&s->user, 0);
		s->touched = false;
	} else if (atomic_load(&s->user) == ssw_pid()) {
		atomic_store(&s->user, 0);
	}
	sess_unlock(s);
}

void ssw_session_hold(struct ssw_session *s, int delta)
{
	hold_change(s, delta, false);
}

int ssw_session_fds(struct ssw_session *s, int *fds, int max)
{
	struct pollfd p[8];
	if (__atomic_load_n(&s->mv.waiting, __ATOMIC_RELAXED)) {
		/* the next transport comes to a listener, or on a lane (session_move.c) */
		int n = sess_move_fds(s, p, max < 8 ? max : 8, false);
		for (int i = 0; i < n; i++)
			fds[i] = p[i].fd;
		return n < 0 ? 0 : n;
	}
	int n = s->loc->ep ? s->p->progress->wait_fds(s->loc->ep, p, max < 8 ? max : 8) : 0;
	for (int i = 0; i < n; i++)
		fds[i] = p[i].fd;
	return n;
}

uint32_t ssw_session_fds_gen(struct ssw_session *s)
{
	return s->loc->fgen + (__atomic_load_n(&s->mv.waiting, __ATOMIC_RELAXED) ? 1u << 31 : 0);
}

int ssw_session_keep_fds(struct ssw_session *s, int *fds, int max)
{
	if (s->loc->ep && s->p->progress->keep_fds)
		return s->p->progress->keep_fds(s->loc->ep, fds, max);
	return ssw_session_fds(s, fds, max);
}

void ssw_session_relay_hold(struct ssw_session *s, int delta)
{
	hold_change(s, delta, true);
}

void ssw_session_relay_ending(struct ssw_session *s)
{
	s->loc->relay = true;
}

bool ssw_session_only_relays(struct ssw_session *s)
{
	uint64_t v = atomic_load(&s->holds);
	int h = (int)(uint32_t)v, r = (int)(v >> 32);
	return h > 1 && h - r == 1;
}

bool ssw_session_last_holder(struct ssw_session *s)
{
	return sess_holders(s) <= 1 && !atomic_load(&s->moved);
}

int ssw_session_shutdown(struct ssw_session *s, int how)
{
	if (!sess_enter(s))
		return -ENOTCONN;
	if (sess_rx_ready(s))
		sess_pump(s, false);
	/* a peer process that exited left no FIN in the ring: a probe sees it
	 * gone, as its kernel's FIN would have told (ENOTCONN below once both
	 * ends are shut: soak seed 832901075) */
	sess_peer_check(s, true);
	/* inet_shutdown: ENOTCONN once closed, but the bits are still set */
	int rc = tcp_closed(s) ? -ENOTCONN : 0;
	if (how == SHUT_RD || how == SHUT_RDWR)
		s->rd_shut = true;
	if ((how == SHUT_WR || how == SHUT_RDWR) && !s->wr_shut) {
		s->wr_shut = true;
		if (!s->reset && !s->peer_closed) {
			(void)sess_send_ctl(s, SSW_MSG_FIN, NULL, 0);
			if (s->p->progress->note && !s->sw.fin_owed)
				s->p->progress->note(s->loc->ep, SSW_NOTE_FIN, 0);
		}
	}
	/* inet_shutdown ends in sk_state_change: our threads asleep on the
	 * socket look again (a recv returns 0, a send EPIPE; poll sees the new
	 * bits), and edge-triggered entries report their ready interest */
	state_change(s);
	sess_unlock(s);
	return rc;
}

int ssw_session_take_error(struct ssw_session *s)
{
	if (!sess_enter(s))
		return ECONNRESET;
	if (sess_rx_ready(s))
		sess_pump(s, false);
	sess_peer_check(s, true);
	int e = s->so_error;
	s->so_error = 0;
	sess_unlock(s);
	return e;
}

static void read_stats(struct ssw_session *s, struct ssw_session_stats *st)
{
	*st = s->st;
	st->tx_inflight = s->tx_inflight;
	st->tx_limit = tx_limit(s);
	st->rx_window = s->window;
	st->tcp_state = tcp_closed(s) ? TCP_CLOSE : s->wr_shut ? TCP_FIN_WAIT2 : s->fin_rcvd ? TCP_CLOSE_WAIT : TCP_ESTABLISHED;
	st->fin_in = s->fin_rcvd;
}

void ssw_session_get_stats(struct ssw_session *s, struct ssw_session_stats *st)
{
	sess_lock(s);
	read_stats(s, st);
	sess_unlock(s);
}

bool ssw_session_peek_stats(struct ssw_session *s, struct ssw_session_stats *st, int64_t *resident)
{
	int rc = pthread_mutex_trylock(&s->lock);
	if (rc == EOWNERDEAD) {
		pthread_mutex_consistent(&s->lock);
		sess_set_broken(s, "a process died while using this connection");
		rc = 0;
	}
	*resident = -1;
	read_stats(s, st); /* unlocked: aligned words, each whole */
	if (rc)
		return false;
	*resident = sess_resident_locked(s);
	sess_unlock(s);
	return true;
}

uint64_t ssw_session_state_gen(struct ssw_session *s)
{
	return __atomic_load_n(&s->st.state_wakes, __ATOMIC_RELAXED);
}

int ssw_session_tcp_state(struct ssw_session *s)
{
	if (!sess_enter(s))
		return TCP_CLOSE;
	if (sess_rx_ready(s))
		sess_pump(s, false);
	/* a peer process that exited left no FIN in the ring: a probe sees it
	 * gone, as its kernel's FIN would have told (soak seed 840002047) */
	sess_peer_check(s, true);
	int st = TCP_ESTABLISHED;
	if (tcp_closed(s))
		st = TCP_CLOSE;
	else if (s->wr_shut)
		st = TCP_FIN_WAIT2; /* our FIN was acknowledged at once */
	else if (s->fin_rcvd)
		st = TCP_CLOSE_WAIT;
	sess_unlock(s);
	return st;
}

struct ssw_session *ssw_session_connected(const struct ssw_provider *prov, struct ssw_ep *ep,
					 const struct ssw_session_opts *o, const void *reply, size_t reply_len)
{
	struct ssw_wire_init peer;
	size_t plen = reply_len;
	if (plen == sizeof peer)
		memcpy(&peer, reply, sizeof peer);
	if (plen == 0) {
		/* one-trip provider: the listener's INIT comes first on the
		 * ring; until then assume it is like us (a larger window is
		 * bounded by the transport, capabilities by -EPERM fallback) */
		ssw_session_make_init(NULL, &peer);
		peer.pid = 0;
		plen = sizeof peer;
	}
	return plen == sizeof peer ? ssw_session_new(prov, ep, o, &peer) : NULL;
}

int ssw_session_announce(struct ssw_session *s, const struct ssw_session_opts *o)
{
	struct ssw_wire_init me;
	ssw_session_make_init(o, &me);
	if (me.window > s->window)
		me.window = s->window;
	/* The connector assumed we are like it (its own capabilities, the
	 * largest window): when that is so there is nothing to say, and the
	 * message (and a wake-up of the connector) is saved. */
	if ((me.caps & ~(uint32_t)(SSW_INIT_SWAP | SSW_INIT_MOVE)) == s->peer_caps &&
	    me.window >= sess_window_cap(s->p, s->loc->ep))
		return 0; /* (SSW_INIT_SWAP, _MOVE: a connector that knows them assumed them of us; an older one has no use for them) */
	if (!sess_enter(s))
		return -ECONNRESET;
	int rc = sess_send_ctl(s, SSW_MSG_INIT, &me, sizeof me);
	sess_unlock(s);
	return rc;
}

bool ssw_session_peer_init_seen(struct ssw_session *s)
{
	return __atomic_load_n(&s->init_rcvd, __ATOMIC_ACQUIRE);
}

bool ssw_session_peer_asks_proof(struct ssw_session *s)
{
	return ssw_session_peer_init_seen(s) && s->peer_asks_proof;
}
