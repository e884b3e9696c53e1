/* session_move.c — a connection's transport moving with control between
 * the processes that share it, for a provider whose endpoint lives in
 * process memory (fabric): seed 000's duplicate and re-connect.
 *
 * The control swap (session_swap.c) suspends the peer and hands control to
 * another process of ours.  With shared context the new controller drives
 * the same endpoint; without, its copy of the endpoint (inherited at fork)
 * is not the transport's state, so the transport moves:
 *
 *   1. the peer, asked to SUSPEND, answers SUSPENDED with an offer: the
 *      address of a listener of its own (one per process and address, port
 *      of the provider's choice) and a random token;
 *   2. our controller takes in everything up to SUSPENDED, sends MOVED (the
 *      last message of this transport), leaves its copy (stale from now),
 *      and hands control over with the session "parked";
 *   3. the new controller connects to the offer presenting the token (its
 *      own endpoint, in its own memory: sess_local), and its first message
 *      is RESUME;
 *   4. the peer, once it has consumed MOVED, takes the next transport from
 *      its listener (token and the peer host's address checked), closes
 *      the old one and goes on (RESUME first).
 *
 * The session's sequence numbers, credits and queues are the session's
 * (shared memory): only the provider's state is new.  mv.tgen counts the
 * transports; a process whose copy is of an older one holds a dead copy,
 * left with SSW_CLOSE_DETACH when it closes or connects anew.
 *
 * A controller that lets go of a transport of its own while others keep
 * the connection (close, exit) parks it the same way, without an asker:
 * whoever drives it next connects to the offer.  Failures end in a reset
 * (a bound: SWAP_WAIT_NS), never a hang; a peer whose side is shared by
 * fork too makes no offer (its own copies would go stale): then control
 * does not move, and the asker's call fails as before the swap (README
 * Limits). */
#include "session/session_priv.h"

#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/random.h>

#define MOVE_NAP_MS 20 /* a wait for the next transport looks again this often */
#define MOVE_SPIN_NS 40000ull /* ... after looking without sleeping this long */
_Static_assert(SSW_MOVE_TOKEN == SSW_SESSION_MOVE_TOKEN, "one token size");

/* What connection set-up does for us (switch/setup/move.c). */
static const struct ssw_move_ops *ops(void)
{
	return ssw_session_cfg.move;
}

static bool movable(const struct ssw_provider *p)
{
	return ops() && ops()->movable(p);
}

bool sess_move_needed(const struct ssw_session *s)
{
	return !s->swap_transport;
}

bool sess_move_possible(const struct ssw_session *s)
{
	return s->mv.peer_move && movable(s->p);
}

bool ssw_session_same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
		      sizeof(struct in6_addr)) == 0;
}

/* ---- the suspended side ------------------------------------------------- */

/* This process's transports taken (the suspended side): new ones, and
 * lanes a controller came back on (a forked child counts its own). */
static struct {
	pid_t pid;
	uint64_t fresh, back;
} counts;

static void count(bool back)
{
	if (counts.pid != ssw_pid())
		counts.pid = ssw_pid(), counts.fresh = counts.back = 0;
	if (back)
		counts.back++;
	else
		counts.fresh++;
}

void ssw_session_move_counts(uint64_t *fresh, uint64_t *back)
{
	bool mine = counts.pid == ssw_pid();
	*fresh = mine ? counts.fresh : 0;
	*back = mine ? counts.back : 0;
}

/* ---- lanes: transports kept idle for their controller's return --------- */

/* Our transport came with a token, and is this process's own (a child's
 * inherited copy of its parent's is not: t_hostile_move, where a child
 * closing such a copy with a reset killed its parent's lane). */
static bool tok_mine(const struct sess_local *l)
{
	return l->tok && l->tok == ssw_pid();
}

/* Lane i leaves the list (the later ones move up): its transport. */
static struct ssw_ep *lane_take(struct ssw_session *s, int i)
{
	struct sess_local *l = s->loc;
	struct ssw_ep *ep = l->lane[i].ep;
	for (; i + 1 < SSW_MOVE_LANES; i++)
		l->lane[i] = l->lane[i + 1];
	l->lane[SSW_MOVE_LANES - 1].ep = NULL;
	l->lane[SSW_MOVE_LANES - 1].peeked = false;
	return ep;
}

static void lane_drop(struct ssw_session *s, int i, int how)
{
	s->p->conn->close(lane_take(s, i), how);
}

/* Lanes whose other end went (its process closed or exited) go. */
static void lanes_prune(struct ssw_session *s)
{
	const struct ssw_progress_ops *pg = s->p->progress;
	for (int i = 0; i < SSW_MOVE_LANES && s->loc->lane[i].ep;)
		if (pg->peer_state && (pg->peer_state(s->loc->lane[i].ep, 1, NULL) & (SSW_PEER_CLOSED | SSW_PEER_RESET)))
			lane_drop(s, i, SSW_CLOSE_ABORT);
		else
			i++;
}

/* The transport that carried MOVED, kept for its controller's return (the
 * oldest lane gives way); one that came with no token (the connection's
 * first, which every process of the other side holds a copy of) goes. */
static void lane_keep(struct ssw_session *s, struct ssw_ep *ep)
{
	struct sess_local *l = s->loc;
	if (!tok_mine(l)) {
		s->p->conn->close(ep, SSW_CLOSE_ORDERLY); /* its last message, MOVED, was read */
		return;
	}
	if (l->lane[SSW_MOVE_LANES - 1].ep)
		lane_drop(s, 0, SSW_CLOSE_ABORT);
	int i = 0;
	while (l->lane[i].ep)
		i++;
	l->lane[i].ep = ep;
	l->lane[i].peeked = false;
	memcpy(l->lane[i].token, l->token, sizeof l->token);
}

/* Go on with ep (which came with token): the current transport becomes a lane. */
static void switch_to(struct ssw_session *s, struct ssw_ep *ep, const uint8_t *token)
{
	lane_keep(s, s->loc->ep);
	s->loc->ep = ep;
	memcpy(s->loc->token, token, sizeof s->loc->token);
	s->loc->tok = ssw_pid();
	s->loc->fgen++;
	ops()->forget(s->mv.token);
	s->mv.waiting = s->mv.offered = false;
}

int sess_move_offer(struct ssw_session *s, struct ssw_wire_offer *o)
{
	/* a side shared by fork itself would leave its other copies stale */
	if (!movable(s->p) || s->swap_transport || sess_holders(s) > 1 || s->mv.offered)
		return -ENOTSUP;
	if (getrandom(s->mv.token, sizeof s->mv.token, 0) != (ssize_t)sizeof s->mv.token)
		return -EIO;
	memset(o, 0, sizeof *o);
	o->addrlen = sizeof o->addr;
	int rc = ops()->peer_host(s->p, s->loc->ep, &s->mv.host);
	if (!rc)
		rc = ops()->listen(s->p, s->loc->ep, s->mv.token, o->addr, &o->addrlen);
	if (rc) {
		SSW_WARN_ONCE("move: no listener for a moving connection's next transport (%s): the peer's processes "
			      "cannot share it",
			      strerror(-rc));
		return rc;
	}
	memcpy(o->token, s->mv.token, sizeof o->token);
	lanes_prune(s);
	for (int i = 0; i < SSW_MOVE_LANES && s->loc->lane[i].ep; i++)
		memcpy(o->kept[o->nkept++], s->loc->lane[i].token, SSW_MOVE_TOKEN);
	s->mv.offered = true;
	return 0;
}

void sess_move_msg(struct ssw_session *s)
{
	/* only after our offer, while suspended */
	if (!s->mv.offered || !s->sw.suspended || s->mv.ending || s->mv.waiting)
		sess_set_broken(s, "MOVED not asked for");
	else
		s->mv.ending = true;
}

void sess_move_consumed(struct ssw_session *s)
{
	/* the old transport is read no more: the next one comes to our listener */
	s->mv.ending = false;
	s->mv.waiting = true;
	s->loc->fgen++;
}

/* A lane the next controller goes on with: its first message is there.
 * Asked through rx_ready first, the busy-poll hint: a peek may take a
 * look that found nothing a moment ago for the socket's silence (fabric:
 * up to 5 us), a spin's next hint looks for real.  The hint counts only
 * messages beyond the one peeked: a lane whose message we saw is ready
 * without it (t_fabric_swap waited 30 s for a RESUME peeked once). */
static int lane_ready(struct ssw_session *s)
{
	const struct ssw_progress_ops *pg = s->p->progress;
	for (int i = 0; i < SSW_MOVE_LANES && s->loc->lane[i].ep; i++) {
		const void *m;
		size_t n;
		if (!s->loc->lane[i].peeked && pg->rx_ready && !pg->rx_ready(s->loc->lane[i].ep))
			continue;
		int rc = s->p->msg->recv_peek(s->loc->lane[i].ep, &m, &n);
		s->loc->lane[i].peeked = rc == 0;
		if (rc == 0)
			return i;
		if (rc != -EAGAIN) {
			lane_drop(s, i, SSW_CLOSE_ABORT); /* its process went */
			i--;
		}
	}
	return -1;
}

int sess_move_accept(struct ssw_session *s)
{
	struct ssw_ep *ep = NULL;
	struct sockaddr_storage from;
	int r = ops()->take(s->p, s->mv.token, &ep, &from);
	if (r < 0)
		return r;
	if (r == 0) {
		int i = lane_ready(s);
		if (i < 0)
			return 0;
		uint8_t token[SSW_MOVE_TOKEN];
		memcpy(token, s->loc->lane[i].token, sizeof token);
		switch_to(s, lane_take(s, i), token);
		count(true);
		SSW_DEBUG("move: the peer's next controller came back on its transport");
		return 1;
	}
	/* the token came from our offer; the host must be the one the
	 * connection goes to (an offer seen by another host is no key) */
	if (!ssw_session_same_host(&s->mv.host, &from)) {
		s->p->conn->close(ep, SSW_CLOSE_ABORT);
		sess_set_broken(s, "a moved transport came from another host");
		return -ECONNRESET;
	}
	switch_to(s, ep, s->mv.token);
	count(false);
	SSW_DEBUG("move: the peer's next controller connected");
	return 1;
}

static int sess_move_fd(struct ssw_session *s)
{
	return ops()->fd(s->p);
}

bool sess_move_ready(struct ssw_session *s)
{
	return ops()->ready(s->p, s->mv.token) || lane_ready(s) >= 0;
}

int sess_move_fds(struct ssw_session *s, struct pollfd *pfd, int n, bool arm)
{
	int k = 0, fd = sess_move_fd(s);
	if (fd >= 0 && k < n)
		pfd[k++] = (struct pollfd){ .fd = fd, .events = POLLIN };
	const struct ssw_progress_ops *pg = s->p->progress;
	for (int i = 0; i < SSW_MOVE_LANES && s->loc->lane[i].ep && k < n; i++) {
		if (arm && pg->arm(s->loc->lane[i].ep) == -EAGAIN)
			return -EAGAIN;
		k += pg->wait_fds(s->loc->lane[i].ep, pfd + k, n - k);
	}
	return k;
}

static void lanes_ack(struct ssw_session *s)
{
	for (int i = 0; i < SSW_MOVE_LANES && s->loc->lane[i].ep; i++)
		s->p->progress->wake_ack(s->loc->lane[i].ep);
}

int sess_move_wait(struct ssw_session *s, uint64_t deadline)
{
	if (sess_move_ready(s))
		return 0;
	/* the next controller is usually on its way (MOVED was just read, its
	 * RESUME follows within a round trip): look a few times before a sleep
	 * whose wake-up would cost more than the wait.  Not armed meanwhile:
	 * news read for an armed lane rings it too (two system calls more on
	 * the look that finds the RESUME) */
	for (uint64_t end = ssw_now_ns() + MOVE_SPIN_NS; ssw_now_ns() < end;) {
		sess_unlock(s);
		sched_yield();
		sess_lock(s);
		if (sess_move_ready(s))
			return 0;
	}
	struct pollfd pf[1 + 2 * SSW_MOVE_LANES];
	int n = sess_move_fds(s, pf, 1 + 2 * SSW_MOVE_LANES, true);
	if (n < 0) {
		lanes_ack(s);
		return 0; /* a lane has news */
	}
	int ms = MOVE_NAP_MS;
	if (deadline) {
		uint64_t now = ssw_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if ((deadline - now) / 1000000ull < (uint64_t)ms)
			ms = (int)((deadline - now) / 1000000ull) + 1;
	}
	sess_unlock(s);
	(void)sys_poll(pf, (nfds_t)n, ms);
	sess_lock(s);
	lanes_ack(s);
	return 0;
}

/* ---- the side whose control moves ---------------------------------------- */

bool sess_move_take_offer(struct ssw_session *s, const struct ssw_wire_offer *o)
{
	struct sockaddr_storage a, peer;
	memset(&a, 0, sizeof a);
	memcpy(&a, o->addr, o->addrlen);
	/* the peer's word: it names its own host, nothing else (a peer must
	 * not point our switch at another machine) */
	if (!movable(s->p) || ops()->peer_host(s->p, s->loc->ep, &peer) || !ssw_session_same_host(&a, &peer)) {
		sess_set_broken(s, "the peer offered another host for the connection's next transport");
		return false;
	}
	s->mv.offer = *o;
	s->mv.have_offer = true;
	return true;
}

int sess_move_out(struct ssw_session *s)
{
	int rc = sess_send_ctl(s, SSW_MSG_MOVED, NULL, 0);
	if (rc)
		return rc;
	sess_flush_held(s);
	/* our copy stays (stale: mv.tgen moves on) until this process closes
	 * the socket or drives it again: what is queued in it still leaves */
	s->mv.tgen++;
	s->mv.parked = true;
	return 0;
}

int sess_move_in(struct ssw_session *s)
{
	if (!s->mv.parked)
		return 0;
	if (sess_handover_holds(s))
		return -EAGAIN; /* the image an exec starts connects (session_handover.c) */
	if (!s->mv.have_offer) {
		sess_set_broken(s, "the connection's transport went with a process, and the peer made no offer");
		return -ECONNRESET;
	}
	/* our own transport from an earlier turn, if the peer kept it (lanes) */
	struct sess_local *l = s->loc;
	for (uint32_t i = 0; tok_mine(l) && l->ep && i < s->mv.offer.nkept && i < SSW_MOVE_LANES; i++)
		if (!memcmp(s->mv.offer.kept[i], l->token, sizeof l->token)) {
			l->tgen = s->mv.tgen;
			l->fgen++;
			s->mv.parked = s->mv.have_offer = false;
			return 0;
		}
	struct ssw_ep *ep = NULL;
	int rc = ops()->connect(s->p, s->mv.offer.addr, s->mv.offer.addrlen, s->mv.offer.token, &ep);
	if (rc) {
		SSW_WARN("move: cannot reach the peer for the connection's next transport: %s", strerror(-rc));
		sess_set_broken(s, "the connection's transport could not move to this process");
		return -ECONNRESET;
	}
	if (s->loc->ep) /* a stale copy (inherited), or our own the peer let go */
		s->p->conn->close(s->loc->ep, tok_mine(l) ? SSW_CLOSE_ABORT : SSW_CLOSE_DETACH);
	s->loc->ep = ep;
	l->tok = ssw_pid();
	memcpy(l->token, s->mv.offer.token, sizeof l->token);
	s->loc->tgen = s->mv.tgen;
	s->loc->fgen++;
	s->mv.parked = s->mv.have_offer = false;
	return 0;
}

bool sess_move_stale(const struct ssw_session *s)
{
	return s->loc->tgen != s->mv.tgen;
}

void sess_move_unoffer(struct ssw_session *s)
{
	if (!s->mv.offered || s->mv.ending || s->mv.waiting)
		return;
	if (ops())
		ops()->forget(s->mv.token);
	s->mv.offered = false;
}

void sess_move_end(struct ssw_session *s)
{
	if (s->mv.offered && ops())
		ops()->forget(s->mv.token); /* a transport coming for it now is refused */
	s->mv.offered = s->mv.waiting = false;
	while (s->loc->lane[0].ep)
		lane_drop(s, 0, SSW_CLOSE_ABORT);
}
