/* session_swap.c — control of a connection shared by fork moving between
 * live processes, for a provider without shared context (seed 000).
 *
 * Such a connection is driven by one process at a time (s->user).  Before,
 * another process could take it only once that one was gone; meanwhile it
 * saw a reset.  Now a process that wants to transfer data asks: it joins
 * the session's queue (FIFO) and rings the controller (common/bell.h),
 * whose own next operation, or its helper thread when it is idle
 * (switch/share/swap_helper.c), serves the queue:
 *
 *   1. the controller sends SUSPEND once nothing of its own is in flight
 *      (no rendezvous of ours waiting for the peer);
 *   2. the peer, once quiet itself (no rendezvous of its own in flight),
 *      answers SUSPENDED and sends nothing more: a blocking send waits, a
 *      non-blocking one gets EAGAIN, poll shows it not writable;
 *   3. the controller takes in everything up to SUSPENDED (staged into the
 *      session's queue, which all holders share), so the transport holds
 *      nothing of the peer's, and hands control to the first process
 *      still alive in the queue;
 *   4. the new controller sends RESUME before anything else; the peer
 *      goes on.
 *
 * On a transport in fork-shared memory (s->swap_transport) an asker
 * whose controller is idle (in no call on the connection, nothing of its
 * own in flight) does steps 1-4 itself (drive): the controller's helper
 * thread is not woken, nor the asker by the hand-over, two wake-ups less
 * (a swap on a host: about 30 us before, most of it those wake-ups).
 *
 * A thread of the controller asleep in an operation does not hold control
 * back: it asks again when it wakes (sess_swap_check), behind the others,
 * as the seed completes such requests and queues them anew.
 *
 * Failures: a controller that dies mid-swap leaves control to whoever
 * asks next, who finishes what it began (waits for SUSPENDED if SUSPEND
 * went, and owes RESUME); a peer that stays suspended SWAP_WAIT_NS ends
 * the connection (reset), as does a process that waited that long for
 * control.  Every message is checked against the state: a SUSPENDED not
 * asked for, a RESUME while not suspended, a second SUSPEND, reset the
 * connection.
 *
 * The transport must serve the new controller as it served the old one
 * once the peer is suspended: true of an endpoint in fork-shared memory
 * (shm with SOCKSWITCH_SHARED_CONTEXT=0: s->swap_transport).  An
 * endpoint in process memory (fabric) needs a new connection from the new
 * controller; until then such a connection keeps the old rule (README
 * Limits). */
#include "session/session_priv.h"

#include "common/bell.h"
#include "common/kick.h"
#include "common/log.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* How long the controller of a shared transport waits for the peer's
 * SUSPENDED before it hands control over anyway: a peer whose program is
 * not in a call on the socket answers only at its next one, and a kernel
 * TCP sender would not wait for it (soak seed 860000016).  An endpoint in
 * process memory (fabric) cannot do without the answer. */
#define SWAP_PATIENCE_NS (2ull * 1000000ull)

/* This process's swaps, for its statistics line (a forked child counts
 * its own). */
static struct {
	pid_t pid;
	uint64_t n, ns, max_ns;
	uint64_t driven;            /* of n, swaps this process did itself as the asker (drive) */
	uint64_t suspended, staged; /* the other side: times the peer suspended us, bytes staged meanwhile */
} counts;

void ssw_session_swap_counts(uint64_t *n, uint64_t *ns, uint64_t *max_ns, uint64_t *driven)
{
	bool mine = counts.pid == ssw_pid();
	*n = mine ? counts.n : 0;
	*driven = mine ? counts.driven : 0;
	*ns = mine ? counts.ns : 0;
	*max_ns = mine ? counts.max_ns : 0;
}

void ssw_session_suspend_counts(uint64_t *suspended, uint64_t *staged)
{
	bool mine = counts.pid == ssw_pid();
	*suspended = mine ? counts.suspended : 0;
	*staged = mine ? counts.staged : 0;
}

static void counts_mine(void)
{
	if (counts.pid != ssw_pid())
		memset(&counts, 0, sizeof counts), counts.pid = ssw_pid();
}

void sess_count_staged(size_t n)
{
	counts_mine();
	counts.staged += n;
}

static void count(uint64_t ns)
{
	counts_mine();
	counts.n++;
	counts.ns += ns;
	if (ns > counts.max_ns)
		counts.max_ns = ns;
}

/* A thread inside the swap code (its waits come back here otherwise). */
static __thread bool in_swap;

bool sess_swap_alone(bool on)
{
	bool was = in_swap;
	in_swap = on;
	return was;
}

bool sess_swap_possible(const struct ssw_session *s)
{
	/* a transport in process memory moves with control (session_move.c) */
	return s->exclusive && s->peer_swap && (s->swap_transport || sess_move_possible(s));
}

static bool q_has(const struct ssw_session *s, pid_t p)
{
	for (unsigned i = 0; i < s->sw.qn && i < SWAP_Q; i++)
		if (s->sw.q[i] == p)
			return true;
	return false;
}

static void q_del(struct ssw_session *s, pid_t p)
{
	unsigned k = 0;
	for (unsigned i = 0; i < s->sw.qn && i < SWAP_Q; i++)
		if (s->sw.q[i] != p)
			s->sw.q[k++] = s->sw.q[i];
	s->sw.qn = k;
}

/* The first process of the queue still alive (the dead ones leave it). */
static pid_t q_pop(struct ssw_session *s)
{
	while (s->sw.qn) {
		pid_t p = s->sw.q[0];
		q_del(s, p);
		if (ssw_pid_alive(p))
			return p;
	}
	return 0;
}

static void bell_bump(struct ssw_session *s)
{
	atomic_fetch_add(&s->sw.bell, 1);
	/* not FUTEX_PRIVATE: the session is shared with other processes */
	(void)SYS_(futex, &s->sw.bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Hand control to the first process waiting (called by the controller
 * once the peer is suspended, or when there is no peer left to suspend). */
static bool hand(struct ssw_session *s)
{
	pid_t next = q_pop(s);
	bool asked = s->sw.asked;
	if (s->sw.got || s->reset || s->broken || s->peer_closed) {
		s->sw.asked = s->sw.got = false;
		if (asked)
			s->sw.resume_owed = true; /* the next controller's first message (or ours) */
	}
	/* else the peer has not answered yet (a shared transport need not
	 * wait for it: SWAP_PATIENCE_NS): its SUSPENDED reaches the next
	 * controller, which resumes it then (sess_swap_flush) */
	if (!next)
		return false;
	atomic_store(&s->user, next);
	/* Control left this process: its threads armed on the doorbell would
	 * hear nothing of the peer any more (the new controller's reads take
	 * the news).  Its epoll waits nap while armed on such a connection
	 * and look at those members again when its bell word moved
	 * (switch/events/epoll_ready.c); a bump wakes nobody (no wake-up on
	 * the swap's path).  The same in drive, for the process it took
	 * control from. */
	ssw_bell_bump(ssw_pid());
	s->sw.granted = next; /* for the thread there that asked: none of its own may serve first */
	s->touched = true;
	bell_bump(s);
	return true;
}

/* The peer cannot take a new transport (its side is shared by fork too):
 * control stays here; the peer goes on, and those asking are told no
 * (their call fails, as before the swap: README Limits). */
static void refuse(struct ssw_session *s)
{
	s->sw.asked = s->sw.got = false;
	s->sw.resume_owed = true;
	s->sw.qn = 0;
	s->sw.refused++;
	bell_bump(s);
	SSW_WARN_ONCE("a fabric connection shared with another process cannot move to it: the peer's side is shared "
		      "by fork too (README Limits)");
}

/* Nothing of ours in flight that the peer must finish with us: a
 * rendezvous send waiting for its RNDV_DONE, a read of the peer's buffer
 * under way in another thread. */
static bool quiet(const struct ssw_session *s)
{
	return !s->txr.id && !s->rr.busy;
}

/* Nothing of the peer's held half-read in this process: a message held as
 * a view, a rendezvous read or write under way. */
static bool settled(const struct ssw_session *s)
{
	return !s->hv && !s->rr.active && !s->rw.active;
}

/* Step 1: SUSPEND, once (retried at the next look while the transport is
 * full). */
static void ask_peer(struct ssw_session *s)
{
	if (!s->sw.asked && sess_send_msg(s, SSW_MSG_SUSPEND, NULL, 0, NULL, 0, 0) == 0) {
		s->sw.asked = true;
		s->sw.asked_ns = ssw_now_ns();
	}
}

bool sess_swap_serve(struct ssw_session *s, uint64_t dl)
{
	pid_t me = ssw_pid();
	if (in_swap || !s->sw.qn || atomic_load(&s->user) != me)
		return false;
	/* another thread of ours is taking control as an asker (drive) */
	if (s->sw.driving)
		return false;
	if (s->sw.serving && s->sw.serving != me && ssw_pid_alive(s->sw.serving))
		return false;
	/* control came for a thread of ours that has not taken it yet (asleep
	 * in sess_swap_take): it must have its turn first */
	if (s->sw.granted == me)
		return false;
	/* control just came: the peer hears RESUME before another SUSPEND */
	sess_swap_flush(s);
	if (s->sw.resume_owed)
		return false;
	in_swap = true;
	s->sw.serving = me;
	bool went = false;
	/* control may go and come back while we wait: a round of its own */
	uint32_t round = atomic_load(&s->sw.bell);
	for (;;) {
		if (s->reset || s->broken || s->peer_closed || (s->fin_rcvd && !s->sw.asked && !sess_move_needed(s))) {
			/* nothing more will come from the peer (after its FIN only
			 * credits, which a shared transport keeps: a SUSPEND to a
			 * peer that closed would draw a reset kernel TCP does not
			 * send, soak seed 860000276): no need to stop it */
			went = hand(s);
			break;
		}
		sess_flush_held(s);
		if (quiet(s))
			ask_peer(s);
		/* everything the peer sent before SUSPENDED comes into the queue */
		(void)sess_pump(s, true);
		if (settled(s) && s->sw.got && sess_move_needed(s)) {
			/* the transport goes too (session_move.c), if the peer can take it */
			if (!s->mv.have_offer) {
				refuse(s);
				break;
			}
			if (sess_move_out(s) < 0) {
				sess_set_broken(s, "the connection's transport could not be handed over");
				break;
			}
			went = hand(s);
			break;
		}
		if (settled(s) && (s->sw.got || (s->swap_transport && s->sw.asked &&
					      ssw_now_ns() - s->sw.asked_ns > SWAP_PATIENCE_NS))) {
			went = hand(s);
			break;
		}
		if (!dl || ssw_now_ns() >= dl || !s->sw.qn)
			break;
		int w = sess_wait_peer(s, dl);
		if (w < 0 && w != -ETIMEDOUT && w != -EINTR)
			break;
		if (atomic_load(&s->user) != me || atomic_load(&s->sw.bell) != round)
			break;
	}
	if (s->sw.serving == me)
		s->sw.serving = 0;
	in_swap = false;
	return went;
}

/* Control came to us: what the swap still owes. */
static void took(struct ssw_session *s, uint64_t t0)
{
	s->sw.granted = 0;
	/* the transport was left for us: ours now (session_move.c) */
	if (s->mv.parked && sess_move_in(s) < 0)
		return;
	count(ssw_now_ns() - t0);
	if (ssw_session_cfg.control_taken)
		ssw_session_cfg.control_taken();
	sess_swap_flush(s);
	/* the peer's SUSPENDED still to come: our thread watches for it */
	if (s->sw.asked)
		ssw_bell_ring(ssw_pid());
}

/* An asker may do the controller's part itself: the transport is in
 * fork-shared memory, the controller is in no call on the connection (we
 * hold the lock and none of its threads is serving the queue) with
 * nothing of its own in flight or held in its memory, we are first in
 * the queue, and control was not handed to another process that has not
 * taken it yet (its turn comes first). */
static bool may_drive(const struct ssw_session *s, pid_t me)
{
	return s->swap_transport && !s->sw.driving && s->sw.qn && s->sw.q[0] == me &&
	       (!s->sw.serving || !ssw_pid_alive(s->sw.serving)) &&
	       (!s->sw.granted || !ssw_pid_alive(s->sw.granted)) && quiet(s) && settled(s);
}

/* Steps 1-4 of the swap by the asker (may_drive).  Control is ours from
 * the start (the controller's threads, should one wake, see it gone and
 * ask again, behind us), `driving` keeps our own helper from serving the
 * queue meanwhile; the peer is suspended as the controller would: SUSPEND,
 * everything up to its SUSPENDED into the queue (or, as there, no more
 * than SWAP_PATIENCE_NS of waiting for a peer in no call: its SUSPENDED
 * comes later and is answered then). */
static void drive(struct ssw_session *s, pid_t me)
{
	pid_t was = atomic_load(&s->user);
	atomic_store(&s->user, me);
	if (was != me)
		ssw_bell_bump(was); /* control left it (see hand) */
	q_del(s, me);
	s->touched = true;
	s->sw.serving = me;
	s->sw.driving = true;
	in_swap = true;
	/* a peer still suspended from the last swap (RESUME not sent yet)
	 * has nothing in flight: nothing to wait for */
	while (!s->sw.resume_owed && !s->reset && !s->broken && !s->peer_closed && !(s->fin_rcvd && !s->sw.asked)) {
		ask_peer(s);
		(void)sess_pump(s, true);
		if (s->sw.got || !s->sw.asked || ssw_now_ns() - s->sw.asked_ns > SWAP_PATIENCE_NS)
			break;
		int w = sess_wait_peer(s, s->sw.asked_ns + SWAP_PATIENCE_NS + 1);
		if ((w < 0 && w != -ETIMEDOUT && w != -EINTR) || atomic_load(&s->user) != me)
			break;
	}
	if (s->sw.asked && (s->sw.got || s->reset || s->broken || s->peer_closed)) {
		s->sw.asked = s->sw.got = false;
		s->sw.resume_owed = true;
	}
	in_swap = false;
	s->sw.driving = false;
	if (s->sw.serving == me)
		s->sw.serving = 0;
	if (atomic_load(&s->user) == me) {
		counts_mine();
		counts.driven++;
	}
	/* those queued behind us look again (we are the one to ring now) */
	if (s->sw.qn)
		bell_bump(s);
}

/* The controller is gone: control is ours, with what it began.  If it
 * had asked the peer to stop, the peer's SUSPENDED still marks where the
 * transport's messages end: wait for it as it would have. */
static void take_from_gone(struct ssw_session *s, pid_t me, uint64_t dl)
{
	atomic_store(&s->user, me);
	s->touched = true;
	s->sw.serving = 0;
	s->sw.driving = false;
	in_swap = true;
	while (s->sw.asked && !s->sw.got && !s->reset && !s->broken && ssw_now_ns() < dl) {
		if (sess_pump(s, true) > 0)
			continue;
		int w = sess_wait_peer(s, dl);
		if (w < 0 && w != -ETIMEDOUT && w != -EINTR)
			break;
	}
	in_swap = false;
	if (s->sw.asked) {
		s->sw.asked = s->sw.got = false;
		s->sw.resume_owed = true;
	}
	/* a transport of its own went with it (not parked: session_move.c) */
	if (!s->mv.parked && sess_move_stale(s))
		sess_set_broken(s, "the process driving this connection exited with its transport");
	bell_bump(s);
}

bool sess_swap_take(struct ssw_session *s)
{
	if (!sess_swap_possible(s) || in_swap)
		return false;
	pid_t me = ssw_pid();
	uint64_t t0 = ssw_now_ns(), dl = t0 + SWAP_WAIT_NS;
	uint32_t refused = s->sw.refused;
	for (;;) {
		if (s->sw.refused != refused) {
			q_del(s, me); /* control cannot move here (refuse) */
			return false;
		}
		/* a full queue (SWAP_Q processes asking at once): join it when
		 * one of them has had its turn */
		if (!q_has(s, me) && s->sw.qn < SWAP_Q)
			s->sw.q[s->sw.qn++] = me;
		pid_t u = atomic_load(&s->user);
		if (u == me) {
			q_del(s, me);
			took(s, t0);
			return true;
		}
		if (u == 0 || !ssw_pid_alive(u) || s->broken) {
			q_del(s, me);
			take_from_gone(s, me, dl);
			took(s, t0);
			return true;
		}
		if (may_drive(s, me)) {
			drive(s, me);
			if (atomic_load(&s->user) == me) {
				took(s, t0);
				return true;
			}
			continue;
		}
		if (ssw_now_ns() >= dl) {
			q_del(s, me);
			atomic_store(&s->user, me);
			sess_set_broken(s, "control of a connection shared with another process did not come in 30 s");
			return true;
		}
		uint32_t seen = atomic_load(&s->sw.bell);
		ssw_bell_ring(u);
		sess_unlock(s);
		/* a swap takes tens of microseconds: yield the CPU a few times
		 * (the controller's thread may need this one) before sleeping */
		for (int k = 0; k < 20 && atomic_load(&s->sw.bell) == seen; k++)
			sched_yield();
		/* short naps: the controller may die without a word */
		struct timespec ts = { 0, 5 * 1000000L };
		(void)SYS_(futex, &s->sw.bell, FUTEX_WAIT, seen, &ts, NULL, 0);
		sess_lock(s);
	}
}

void sess_swap_check(struct ssw_session *s)
{
	/* (without the swap, the old rule: sess_enter's next call decides) */
	if (in_swap || !sess_swap_possible(s))
		return;
	pid_t me = ssw_pid();
	if (atomic_load(&s->user) == me) {
		if (s->sw.qn)
			(void)sess_swap_serve(s, ssw_now_ns() + SWAP_WAIT_NS);
		if (atomic_load(&s->user) == me)
			return;
	}
	if (!sess_swap_take(s) && atomic_load(&s->user) != me)
		sess_set_broken(s, "control of a connection shared with another process cannot be asked for");
}

void sess_swap_msg(struct ssw_session *s, const struct ssw_msg *m)
{
	switch (m->h.type) {
	case SSW_MSG_SUSPEND:
		if (s->sw.peer_wants || s->sw.suspended)
			sess_set_broken(s, "SUSPEND while suspended");
		else
			s->sw.peer_wants = true;
		break;
	case SSW_MSG_SUSPENDED:
		if (!s->sw.asked && !s->sw.got && s->peer_closed)
			break; /* the answer to a SUSPEND we stopped waiting for when the peer's close showed (ahead
				  of its last messages: soak seed 866300526): nothing more comes from it */
		if (!s->sw.asked || s->sw.got)
			sess_set_broken(s, "SUSPENDED not asked for");
		else if (!m->h.len || sess_move_take_offer(s, &m->u.offer))
			s->sw.got = true;
		break;
	case SSW_MSG_RESUME:
		if (!s->sw.suspended) {
			sess_set_broken(s, "RESUME while not suspended");
			break;
		}
		s->sw.suspended = false; /* a FIN owed goes as the lock does (sess_swap_flush) */
		/* resumed on this transport: our offer was not taken (an exec
		 * that relayed the connection after all), a later swap makes
		 * a new one */
		sess_move_unoffer(s);
		/* senders waiting for room look again: room came back, as the
		 * kernel's write-space wake-up (an EPOLLOUT edge), not a change
		 * of state that wakes every interest (soak seed 869100026: an
		 * edge-triggered EPOLLIN entry reported unread data again) */
		s->st.tx_credited++;
		ssw_kick(s);
		break;
	}
}

/* SOCKSWITCH_FAULT=swap-suspend keeps the peer suspended for a second,
 * until a send after it. */
#define FAULT_HOLD_NS 1000000000ull
static bool fault_holds(const struct ssw_session *s)
{
	return ssw_session_cfg.fault_swap == SSW_FAULT_SWAP_SUSPEND && s->sw.fault_step == 1 &&
	       ssw_now_ns() - s->sw.fault_ns < FAULT_HOLD_NS;
}

void sess_swap_fault(struct ssw_session *s)
{
	static const uint8_t type[] = { 0, SSW_MSG_SUSPEND, SSW_MSG_RESUME, SSW_MSG_SUSPENDED };
	int f = ssw_session_cfg.fault_swap;
	if (f < 1 || f > 3 || s->sw.fault_step || s->reset || s->broken)
		return;
	if (sess_send_msg(s, type[f], NULL, 0, NULL, 0, 0) < 0)
		return;
	SSW_INFO("SOCKSWITCH_FAULT: sent swap message %u out of turn", type[f]);
	s->sw.fault_step = 1;
	s->sw.fault_ns = ssw_now_ns();
	if (f == SSW_FAULT_SWAP_SUSPEND) {
		s->sw.asked = true; /* its SUSPENDED is awaited: the flush resumes it after FAULT_HOLD_NS */
		s->sw.asked_ns = s->sw.fault_ns;
	}
}

void sess_swap_flush(struct ssw_session *s)
{
	/* only the process driving the transport writes into it (none once
	 * the connection is closed here: its last unlock) */
	if (!s->loc->ep || (s->exclusive && atomic_load(&s->user) != ssw_pid()))
		return;
	/* control came with the transport left for us: ours first (session_move.c) */
	if (s->mv.parked && sess_move_in(s) < 0)
		return;
	/* the answer to a SUSPEND sent before control came here */
	if (s->sw.asked && s->sw.got && !s->sw.serving && !fault_holds(s)) {
		s->sw.asked = s->sw.got = false;
		s->sw.resume_owed = true;
	}
	if (s->sw.resume_owed && sess_send_msg(s, SSW_MSG_RESUME, NULL, 0, NULL, 0, 0) == 0)
		s->sw.resume_owed = false;
	if (s->ts.len && !s->sw.suspended)
		(void)sess_stage_flush(s); /* what was sent while suspended (session_stage.c) */
	if (s->sw.fin_owed && !s->sw.suspended && !s->ts.len && sess_send_msg(s, SSW_MSG_FIN, NULL, 0, NULL, 0, 0) == 0) {
		s->sw.fin_owed = false;
		if (s->p->progress->note)
			s->p->progress->note(s->loc->ep, SSW_NOTE_FIN, 0);
	}
	if (s->sw.peer_wants && !s->sw.suspended && !s->txr.id) {
		/* where the peer's next controller reaches us, if it must
		 * (a transport in process memory: session_move.c) */
		struct ssw_wire_offer o;
		bool off = sess_move_offer(s, &o) == 0;
		if (sess_send_msg(s, SSW_MSG_SUSPENDED, off ? &o : NULL, off ? sizeof o : 0, NULL, 0, 0) != 0) {
			s->mv.offered = false; /* (again at the next try) */
		} else {
			s->sw.peer_wants = false;
			s->sw.suspended = true;
			counts_mine();
			counts.suspended++;
			s->sw.suspended_ns = ssw_now_ns();
		}
	} else if (s->sw.suspended && ssw_now_ns() - s->sw.suspended_ns > SWAP_WAIT_NS) {
		sess_set_broken(s, "the peer's processes did not resume this connection in 30 s");
	}
}

/* The helper's look at a connection with bytes staged for a suspended
 * peer (session_stage.c): they leave once its RESUME is in, even while
 * this process's program is in no call on the socket (a kernel socket
 * sends its buffer by itself). */
static bool stage_serve(struct ssw_session *s)
{
	sess_lock(s);
	bool mine = !sess_foreign(s) && !s->reset && !s->broken;
	if (mine && (s->ts.len || s->sw.fin_owed))
		(void)sess_pump(s, true); /* RESUME, maybe; the unlock flushes */
	sess_unlock(s);
	/* (a connection reset keeps nothing to send: no more looks) */
	return mine && (__atomic_load_n(&s->ts.len, __ATOMIC_RELAXED) || __atomic_load_n(&s->sw.fin_owed, __ATOMIC_RELAXED));
}

bool ssw_session_swap_shared(struct ssw_session *s)
{
	return sess_swap_shared(s);
}

bool ssw_session_controlled_here(struct ssw_session *s)
{
	return !sess_foreign(s);
}

bool ssw_session_look_sees(struct ssw_session *s)
{
	return s->swap_transport;
}

pid_t ssw_session_driver(struct ssw_session *s)
{
	if (!sess_swap_shared(s))
		return 0;
	pid_t u = atomic_load(&s->user);
	return u > 0 ? u : -1;
}

bool ssw_session_swap_serve(struct ssw_session *s, int ms)
{
	if (__atomic_load_n(&s->ts.len, __ATOMIC_RELAXED) || __atomic_load_n(&s->sw.fin_owed, __ATOMIC_RELAXED))
		return stage_serve(s);
	if ((!__atomic_load_n(&s->sw.qn, __ATOMIC_RELAXED) && !__atomic_load_n(&s->sw.asked, __ATOMIC_RELAXED)) ||
	    !sess_swap_possible(s))
		return false;
	sess_lock(s);
	bool mine = atomic_load(&s->user) == ssw_pid();
	if (mine && s->sw.qn)
		(void)sess_swap_serve(s, ssw_now_ns() + (uint64_t)ms * 1000000ull);
	else if (mine && s->sw.asked && !s->sw.serving && !in_swap)
		(void)sess_pump(s, true); /* its SUSPENDED, then RESUME as the lock goes */
	mine = atomic_load(&s->user) == ssw_pid();
	bool left = mine && (s->sw.qn || s->sw.asked);
	sess_unlock(s);
	return left;
}
