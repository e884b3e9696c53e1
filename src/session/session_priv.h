/* session_priv.h — the session's state and the calls its files (stream, credits, rendezvous, urgent data, waiting, lifetime) make to each other. */
#ifndef SSW_SESSION_PRIV_H
#define SSW_SESSION_PRIV_H

#include "common/sys.h"
#include "common/trim.h"
#include "common/waitpol.h"
#include "session/session.h"
#include "session/wire.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Largest rendezvous we stage to break a send/send deadlock, and what the
 * session's queue reserves for it (address space, touched only when used;
 * RNDV_MAX below it reserves less) */
#define STAGE_RNDV_MAX (8u << 20)
#define CHUNK_MAX (32u << 10)        /* inline DATA message payload cap */
#define WINDOW_DEFAULT (4u << 20)    /* unread bytes a receiver takes, as loopback TCP */

/* Received bytes staged out of the transport (see session_rx.c). */
struct rxq {
	uint8_t *buf;
	size_t off, len, cap;
	size_t hi;                 /* the most of buf used since it was last given back (session_mem.c) */
	uint64_t gen;              /* stagings so far */
	struct ssw_trim_clock idle; /* how long gen has stood still */
};

/* A send's rendezvous in progress (one at a time: other senders wait on tx_cv). */
struct sess_txr {
	uint64_t next_id;
	uint64_t id;               /* rendezvous we wait on (0: none) */
	bool done;                 /* RNDV_DONE arrived, with status and bytes */
	int status;
	uint64_t bytes;
	bool sink_have;            /* a SINK arrived for a write rendezvous */
	struct ssw_wire_rndv sink;
};

/* The peer's RNDV_READ being consumed. */
struct sess_rr {
	bool active;
	bool busy;                 /* a read of it is in flight (another thread waits for it) */
	uint64_t id, total, done;
	struct ssw_rdma_desc desc;
};

/* The peer's WRITE_REQ being served. */
struct sess_rw {
	bool active, sink_out, sink_to_q, wdone;
	uint64_t id, total, done, sink_len, wdone_len;
	int wdone_status;
};

/* One RDMA read or write in flight (session_rma.c). */
#define SESS_RMA_SLOTS 4
struct sess_rma {
	uint32_t gen;              /* uses of this slot: a stale completion names an old one */
	bool busy, done;
	int status;
};

/* Urgent data: as in Linux the byte stays in the stream at `mark`. */
struct sess_urg {
	bool inline_;              /* SO_OOBINLINE */
	bool have, mark_valid;
	uint8_t byte;
	uint64_t mark;
	uint32_t seen;             /* urgent bytes handled */
	uint32_t peer;             /* urgent bytes the peer announced (provider marks) */
	int32_t owner;             /* F_SETOWN: pid, or -pgid; 0 none */
};

/* Waiting on the peer (session_wait.c). */
struct sess_wait {
	/* Threads (of any holder) asleep on the provider's fds.  One of them
	 * may drain a doorbell another armed for and then consume what that
	 * one waits for (credits, data): with company, sleeps are naps. */
	_Atomic int sleepers;
	uint64_t rx_gen;           /* messages taken in: changes another thread's wait may miss */
	struct ssw_waitpol pol;    /* wait_peer's learned spin budget and re-check */
	uint64_t probe_ns;         /* last peer_state probe (a system call) */
	uint64_t send_tick;        /* coarse clock at the last send: one probe per tick */
};

/* Control of an exclusive connection moving between the processes that
 * share it (session_swap.c).  In the session's shared memory. */
#define SWAP_Q 8
/* A controller that never hands over, a peer that never resumes: the
 * connection is reset after this long */
#define SWAP_WAIT_NS (30ull * 1000000000ull)
/* A last close waits this long for a suspended peer to take what was
 * staged (session_stage.c), then resets */
#define STAGE_CLOSE_NS (5ull * 1000000000ull)
struct sess_swap {
	_Atomic uint32_t bell;     /* futex: bumped when control moves; askers sleep on it */
	pid_t q[SWAP_Q];           /* processes asking for control, in order */
	unsigned qn;
	pid_t serving;             /* the process whose thread is suspending the peer now (0: none) */
	bool driving;              /* ... an asker, on a shared transport, for itself (session_swap.c: drive) */
	pid_t granted;             /* control handed to it, not yet taken by its thread that asked */
	bool asked;                /* SUSPEND sent: the peer's SUSPENDED awaited */
	uint64_t asked_ns;         /* since when */
	bool got;                  /* ... and it came: nothing more from the peer until RESUME */
	bool resume_owed;          /* the controller owes the peer RESUME */
	/* the other side of it: our peer's controller asked us to stop */
	bool peer_wants;           /* its SUSPEND came: SUSPENDED owed once we are quiet */
	bool suspended;            /* SUSPENDED sent: we send nothing until its RESUME */
	bool fin_owed;             /* a shutdown while suspended: our FIN goes at RESUME */
	uint64_t suspended_ns;     /* since when (a bound: README Limits) */
	uint32_t refused;          /* bumped when control cannot move (session_move.c): askers give up */
	/* SOCKSWITCH_FAULT=swap-*: what this side sent out of turn, and when */
	uint8_t fault_step;
	uint64_t fault_ns;
};

/* Stream bytes sent while the peer is suspended for a control swap on
 * its side (session_stage.c): kept in the session's memory until its
 * RESUME, as a kernel socket buffer keeps what the peer's window does not
 * take yet.  Page-aligned, after the staging queue; pages on first use. */
struct txstage {
	uint8_t *buf;
	size_t off, len, cap;
	size_t hi;                 /* the most of buf used since it was last given back */
	/* an urgent byte staged (MSG_OOB): where in buf; it leaves as its own
	 * message, in its place among the bytes (one at a time) */
	size_t urg;
	bool urg_set;
};

/* The session's part in each process's private memory. */
struct sess_local {
	struct ssw_ep *ep;         /* this process's endpoint (a copy, after fork) */
	bool relay;                /* this process is a relay ending (its hold counts as one: sess_hold_drop) */
	uint32_t tgen;             /* the transport it belongs to (session_move.c: mv.tgen) */
	uint32_t fgen;             /* bumped when the fds to wait on change (epoll registers them anew) */
	uint32_t handover_hold;    /* parked for the hand-over under way (exec, pass; its number + 1): the taker moves in, not us */
	/* session_move.c, lanes: the token our transport came with (the side
	 * whose control moves: it made it; the suspended side: it took it),
	 * and on the suspended side the transports of earlier controllers,
	 * kept idle for their return.  tok: the process whose transport that
	 * is (0: none); a forked child's copy names its parent, whose
	 * transport it is not (neither to drive nor to close with a reset) */
	pid_t tok;
	uint8_t token[SSW_MOVE_TOKEN];
	struct {
		struct ssw_ep *ep;
		uint8_t token[SSW_MOVE_TOKEN];
		bool peeked;       /* its first message seen (rx_ready no longer counts it) */
	} lane[SSW_MOVE_LANES];
};

/* A transport in process memory (fabric) moving with control between the
 * processes that share the connection (session_move.c).  In the
 * session's shared memory. */
struct sess_move {
	bool peer_move;            /* the peer's INIT said SSW_INIT_MOVE */
	uint32_t tgen;             /* transports since the fork-shared one (0): older copies are dead */
	/* our side (the one whose control moves) */
	bool parked;               /* no live transport: the next controller connects to `offer` */
	bool have_offer;
	struct ssw_wire_offer offer; /* the peer's, from its SUSPENDED */
	/* the peer's side (the one suspended) */
	bool offered;              /* our SUSPENDED carried an offer of ours */
	bool ending;               /* MOVED came: the transport ends once it is consumed */
	bool waiting;              /* ... and the next comes to our listener */
	uint8_t token[SSW_MOVE_TOKEN];
	struct sockaddr_storage host; /* the peer's, when we offered: the next transport must come from it */
};

struct ssw_session {
	/* lifetime */
	pthread_mutex_t lock;      /* process-shared and robust: the session is fork-shared */
	/* processes holding the connection (fork adds one), and in the high
	 * half, of them, relay processes (switch/share/relay.c): one word, so
	 * that a relay's hold and its count as a relay go in one step (an
	 * exec waiting while the other holders are all relays never sees one
	 * half gone without the other: sess_hold_drop) */
	_Atomic uint64_t holds;
	/* A provider without SSW_CAP_SHARED_CONTEXT (fabric) keeps the
	 * transport's state in each process's private memory: after fork only
	 * one process may drive it (session_life.c: sess_enter) */
	bool exclusive;
	_Atomic pid_t user;        /* exclusive: the process driving it; 0: nobody since the fork */
	bool touched;              /* exclusive: driven since the fork (by user, or by a process gone) */
	/* exclusive: a process that took the connection over from one that
	 * drove it (session_rx.c sess_head): its own transport still holds
	 * what arrived before the fork, which the other consumed already */
	_Atomic pid_t resync;
	/* exclusive: another process may be given control while this one
	 * lives (session_swap.c): the peer answers SUSPEND (its INIT said
	 * SSW_INIT_SWAP) and the transport serves any holder once the peer is
	 * suspended (its endpoint is shared, though the provider is taken as
	 * one that is not: SOCKSWITCH_SHARED_CONTEXT=0) */
	bool peer_swap, swap_transport;
	struct sess_swap sw;
	struct sess_move mv;
	struct txstage ts;
	/* A process that dropped privileges took its own copy of the
	 * connection (session_unshare.c) and left this memory to the others:
	 * here the connection is gone (reset), and a close only lets go.
	 * Written once, by that process before its drop. */
	_Atomic bool moved;
	_Atomic pid_t moved_to;    /* that process */
	size_t map_size;           /* the session's own mapping: this struct, then the queue */
	const struct ssw_provider *p;
	/* The endpoint, as this process holds it (sess_local: fork copies it
	 * with the heap): a provider without shared context keeps a copy per
	 * process, and a connection moved to a new transport (session_move.c)
	 * lives in one process only */
	struct sess_local *loc;
	size_t max_payload;
	pthread_cond_t tx_cv;      /* senders wait here while a rendezvous send is in progress */

	/* transmit and the peer's credits */
	uint32_t tx_seq;
	uint64_t tx_inflight;
	uint64_t peer_window;      /* stream bytes the peer grants */
	uint32_t sndbuf;
	uint32_t peer_caps;
	int32_t peer_pid;
	bool peer_asks_proof;      /* its INIT said SSW_INIT_ASK_PROOF */
	bool cork;                 /* TCP_CORK: DATA messages are held (provider send_commit) */
	uint64_t held;             /* stream bytes of DATA messages held since the last publication */
	struct sess_txr txr;

	/* receive and our credits */
	uint32_t rx_seq;
	uint64_t rx_unacked;
	uint32_t window;           /* stream bytes we grant (SO_RCVBUF) */
	uint64_t rx_space;         /* transport bytes (msg_space) we consumed since our last message */
	struct rxq q;
	uint64_t q_owed;           /* staged bytes whose credits are still owed */
	/* what the peer was told (SSW_NOTE_UNREAD) of q holding unread bytes,
	 * and on which endpoint: a death of ours then is a reset there */
	bool unread_noted;
	struct ssw_ep *unread_ep;
	bool hv;                   /* head message parsed (credits applied) */
	struct ssw_msg hm;
	size_t cur_off;            /* bytes of the head DATA already delivered */
	uint64_t rx_pos;           /* stream bytes the application consumed */
	bool init_rcvd;            /* the peer's in-band INIT arrived */
	bool stage_nomem;          /* staging failed for memory: a sender waiting on it gets ENOBUFS */
	bool credit_owed;          /* a CREDIT message found the transport full */
	bool peer_ack_now;         /* the peer's last DATA asked for its credits at once (ACK_NOW) */
	struct sess_rr rr;
	struct sess_rw rw;
	struct sess_rma rma[SESS_RMA_SLOTS];

	/* TCP state as the application sees it: the kernel's sk_shutdown bits,
	 * SOCK_DONE, sk_err and TCP_CLOSE, which every answer mirrors */
	bool wr_shut;              /* shutdown(SHUT_WR) (our FIN) */
	bool rd_shut;              /* shutdown(SHUT_RD) */
	bool fin_rcvd;             /* the peer's FIN arrived (maybe behind unread data) */
	bool reset;                /* reset by the peer or by a protocol violation */
	bool peer_closed;          /* the peer's socket is closed: data we send draws a reset */
	int so_error;              /* pending error (sk_err): SO_ERROR, recv and send take it */
	bool broken;               /* protocol violation: stop parsing the peer's messages */

	struct sess_urg urg;

	/* The socket's own options (O_NONBLOCK, SO_RCVTIMEO, SO_SNDTIMEO,
	 * SO_LINGER) belong to its open file, which the processes holding the
	 * connection after fork share: the last value any of them set (the
	 * bit in sopt_set says which were), over each process's own copy */
	_Atomic int sopt[SSW_SOPT_COUNT];
	_Atomic uint32_t sopt_set;
	struct sess_wait w;
	struct ssw_session_stats st;
};

static inline size_t iov_total(const struct iovec *iov, int n)
{
	size_t t = 0;
	for (int i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

/* Stream bytes in flight may reach this (the peer's window, SO_SNDBUF
 * below it).  While the peer is suspended (session_swap.c) bytes go to the
 * stage (session_stage.c), which counts them in flight: its room caps the
 * limit too. */
static inline uint64_t tx_limit(const struct ssw_session *s)
{
	uint64_t l = s->peer_window;
	if (s->sndbuf && s->sndbuf < l)
		l = s->sndbuf;
	if (s->sw.suspended || s->ts.len) {
		uint64_t st = s->tx_inflight + (s->ts.cap - s->ts.off - s->ts.len);
		if (st < l)
			l = st;
	}
	return l;
}

/* Sends go to the stage now (session_stage.c): the peer is suspended, or
 * bytes staged meanwhile have not all left yet (order). */
static inline bool sess_staging(const struct ssw_session *s)
{
	return s->sw.suspended || s->ts.len;
}

/* sk_shutdown & RCV_SHUTDOWN, & SEND_SHUTDOWN, and sk_state == TCP_CLOSE.
 * On loopback a FIN is acknowledged at once, so both FINs mean CLOSE. */
/* The caps of the peer's INIT: what it serves as a target of, and its
 * request for listening proofs (SSW_INIT_ASK_PROOF), kept apart. */
static inline void sess_set_peer_caps(struct ssw_session *s, uint32_t caps)
{
	s->peer_caps = caps & ~(SSW_INIT_ASK_PROOF | SSW_INIT_SWAP | SSW_INIT_MOVE);
	s->peer_asks_proof = (caps & SSW_INIT_ASK_PROOF) != 0;
	s->peer_swap = (caps & SSW_INIT_SWAP) != 0;
	s->mv.peer_move = (caps & SSW_INIT_MOVE) != 0;
}
static inline bool rcv_down(const struct ssw_session *s) { return s->fin_rcvd || s->rd_shut || s->reset; }
static inline bool snd_down(const struct ssw_session *s) { return s->wr_shut || s->reset; }
static inline bool tcp_closed(const struct ssw_session *s) { return s->reset || (s->wr_shut && s->fin_rcvd); }


/* Does a message of this type bring the peer stream bytes?  A peer that
 * dies with one unread resets the connection (TCP's unread data on close);
 * left unread, the others (credits, FIN, replies) end it in order. */
static inline bool carries_data(uint8_t t)
{
	return t == SSW_MSG_DATA || t == SSW_MSG_OOB || t == SSW_MSG_RNDV_READ || t == SSW_MSG_WRITE_REQ ||
	       t == SSW_MSG_WRITE_DONE;
}

static inline bool is_stream(uint8_t t)
{
	return t == SSW_MSG_DATA || t == SSW_MSG_OOB || t == SSW_MSG_FIN || t == SSW_MSG_RNDV_READ ||
	       t == SSW_MSG_WRITE_REQ;
}

static inline uint64_t deadline_of(int timeout_ms)
{
	return timeout_ms > 0 ? ssw_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
}

/* Where a send's bytes come from: the caller's memory, or a producer that
 * writes them straight into the transport (sendfile's pread). */
struct tx_src {
	const struct iovec *iov;
	int iovcnt;
	ssize_t (*fill)(void *ctx, void *buf, size_t len);
	void *ctx;
};

/* session_handover.c: the memfd an exec'ing image writes for the next one */
#define IMG_MAGIC 0x32444e4148575353ull /* "SSWHAND2" */
#define IMG_HDR 4096u                   /* header page: header, then the caller's note */
#define IMG_BLOB_MAX 4096u              /* the provider's page */
#define IMG_SESS (IMG_HDR + IMG_BLOB_MAX) /* the session mapping's image from here */
#define IMG_MAP_MAX (1ull << 30)
struct img_hdr {
	uint64_t magic;
	uint32_t sess_size, head;   /* sizeof(struct ssw_session), its page-rounded room */
	uint64_t map_size;          /* the session's mapping */
	uint64_t qend;              /* queue bytes to copy (q.off + q.len) */
	uint32_t blob_len, note_len;
	char prov[32];
	uint32_t parked; /* no endpoint: the peer awaits the next transport (session_move.c) */
};

/* The holds (struct ssw_session holds). */
#define SESS_HOLD_RELAY (1ull << 32)
static inline int sess_holders(struct ssw_session *s)
{
	return (int)(uint32_t)atomic_load(&s->holds);
}
static inline void sess_holds_set(struct ssw_session *s, int holders)
{
	atomic_store(&s->holds, (uint64_t)holders);
}
/* This process's hold goes (a relay's with its count as a relay); returns
 * the number of holders there were.  Nothing shared may be written after
 * unless it was the last: another holder may free the session then. */
static inline int sess_hold_drop(struct ssw_session *s)
{
	return (int)(uint32_t)atomic_fetch_sub(&s->holds, 1 + (s->loc->relay ? SESS_HOLD_RELAY : 0));
}

/* session_life.c */
void sess_lock(struct ssw_session *s);
/* sess_lock for a public op: false (unlocked again) when this process may
 * not drive the connection (exclusive, and another process drives it or
 * did since the fork: what it took from the transport is in its memory);
 * the op then acts as on a reset socket, in this process only. */
bool sess_enter(struct ssw_session *s);
/* The session's process-shared lock and condition, made anew (a new
 * session, or a process's own copy of one: session_unshare.c). */
void sess_init_sync(struct ssw_session *s);
/* Another process holds the connection too and may take control from us
 * at any moment (session_swap.c) without a word to our threads asleep on
 * the transport: they must not sleep there unbounded, but nap and look
 * (as sleepers of a process not in control do); an epoll set keeps such
 * a member armed, naps, and looks at it when told control left
 * (its bell word bumped: session_swap.c hand). */
static inline bool sess_swap_shared(struct ssw_session *s)
{
	return s->exclusive && sess_holders(s) > 1;
}
/* The busy-poll hint of the connection's transport; none while it has no
 * endpoint (a fabric transport moving, or gone with a reset: CI's
 * t_fabric_swap, a NULL endpoint read after the peer's 30 s). */
static inline bool sess_rx_ready(struct ssw_session *s)
{
	struct ssw_ep *ep = s->loc->ep;
	return ep && s->p->progress->rx_ready(ep);
}
/* Lock-free: is the connection another process's now (exclusive)? */
bool sess_foreign(const struct ssw_session *s);
/* Called locked: the transport memory resident now (`stat`), -1 when not known. */
int64_t sess_resident_locked(struct ssw_session *s);
/* Unlock, then raise the SIGURGs owed (a handler may use the socket). */
void sess_unlock(struct ssw_session *s);
void sess_on_reset(struct ssw_session *s);
int sess_take_send_error(struct ssw_session *s);
void sess_set_broken(struct ssw_session *s, const char *why);
bool sess_rx_pending_data(struct ssw_session *s);

/* session_credit.c */
int sess_send_msg(struct ssw_session *s, uint8_t type, const void *fixed, size_t flen,
		    const struct iovec *data, int dcnt, size_t dlen);
int sess_send_ctl(struct ssw_session *s, uint8_t type, const void *fixed, size_t flen);
void sess_return_credits(struct ssw_session *s, uint64_t n);
uint32_t sess_transport_bytes(const struct ssw_provider *prov, struct ssw_ep *ep);
size_t sess_msg_space(const struct ssw_session *s, size_t len);
void sess_sent(struct ssw_session *s, uint32_t credits);
uint32_t sess_window_cap(const struct ssw_provider *prov, struct ssw_ep *ep);
uint64_t sess_credit_batch(const struct ssw_session *s);
bool sess_tx_room_ok(struct ssw_session *s);

/* session_rx.c */
void sess_iov_put(const struct iovec *iov, int n, size_t at, const void *src, size_t len);
int sess_iov_slice(const struct iovec *iov, int n, size_t at, size_t len, struct iovec *out, int max);
int sess_head(struct ssw_session *s);
void sess_consume(struct ssw_session *s);
void sess_handle_control(struct ssw_session *s);
int sess_q_reserve(struct ssw_session *s, size_t more);
int sess_stage_head(struct ssw_session *s);
/* Lock held, another process in control: what a fork-shared transport
 * holds, staged into the session as any holder may (session_wait.c). */
void sess_foreign_stage(struct ssw_session *s);
int sess_pump(struct ssw_session *s, bool stage);
void sess_q_take(struct ssw_session *s, size_t n);

/* session_tx.c */
void sess_flush_held(struct ssw_session *s);

/* session_stage.c: sends while the peer is suspended (all called locked) */
/* Room in the session's mapping for the stage, after a queue of qbytes. */
size_t sess_stage_size(const struct ssw_provider *prov, struct ssw_ep *ep);
/* Take n bytes into the stage (room checked by the caller: tx_limit). */
void sess_stage_put(struct ssw_session *s, const struct iovec *v, int k, size_t n);
/* Room for a producer to write n bytes in place (sendfile): a pointer, or
 * NULL; sess_stage_commit then says how many it wrote. */
void *sess_stage_room(struct ssw_session *s, size_t n);
void sess_stage_commit(struct ssw_session *s, size_t n);
/* Send what is staged once the peer is resumed: true when nothing is left. */
bool sess_stage_flush(struct ssw_session *s);
/* A closing holder: wait until dl for the stage to leave. true if it did. */
bool sess_stage_drain(struct ssw_session *s, uint64_t dl);
/* Have this process's helper thread flush what waits for RESUME. */
void sess_stage_watch(void);
/* The stage's pages go back (closed, or emptied after heavy use). */
void sess_stage_trim(struct ssw_session *s);
/* This process's statistics (session_swap.c). */
void sess_count_staged(size_t n);

/* session_swap.c: control of an exclusive connection moving between live
 * processes (seed 000).  All called locked. */
bool sess_swap_possible(const struct ssw_session *s);
/* This thread's waits neither serve others asking nor ask for control
 * (a process parking its transport as it leaves: session_life.c); returns
 * the previous setting. */
bool sess_swap_alone(bool on);
/* sess_enter for a look (poll): never asks for control. */
bool sess_enter_look(struct ssw_session *s);
/* Not ours now, but ours to ask for (a live connection another process
 * drives). */
bool sess_foreign_live(const struct ssw_session *s);
/* Ask for control while another live process has it, and wait for it:
 * true when ours; false (still locked) when it cannot be asked. */
bool sess_swap_take(struct ssw_session *s);
/* The controller: give control to the first process asking, after
 * suspending the peer; waits for the peer until dl (0: no wait).  true
 * when control went. */
bool sess_swap_serve(struct ssw_session *s, uint64_t dl);
/* After a wait without the lock: serve those asking, or take control
 * back if it went meanwhile. */
void sess_swap_check(struct ssw_session *s);
/* The messages, from the peer (session_rx.c). */
void sess_swap_msg(struct ssw_session *s, const struct ssw_msg *m);
/* session_move.c: the transport moving with control (fabric).  Locked. */
bool sess_move_needed(const struct ssw_session *s);   /* our copies are not the transport */
bool sess_move_possible(const struct ssw_session *s); /* the peer and the provider can */
/* The suspended side: an offer for SUSPENDED (0), or none (-errno). */
int sess_move_offer(struct ssw_session *s, struct ssw_wire_offer *o);
/* MOVED came (checked); then, once consumed, the next transport is awaited. */
void sess_move_msg(struct ssw_session *s);
void sess_move_consumed(struct ssw_session *s);
/* Awaiting it: 1 it came (now s->loc->ep), 0 not yet, -errno. */
int sess_move_accept(struct ssw_session *s);
bool sess_move_ready(struct ssw_session *s);
/* What to sleep on for it (the listener, the idle lanes; arm: armed
 * first): how many, or -EAGAIN when a lane has news already. */
int sess_move_fds(struct ssw_session *s, struct pollfd *pfd, int n, bool arm);
/* Sleep until it may have come (unlocks meanwhile); 0 or -ETIMEDOUT. */
int sess_move_wait(struct ssw_session *s, uint64_t deadline);
/* The moving side: the peer's offer (checked: false, and reset, if bad). */
bool sess_move_take_offer(struct ssw_session *s, const struct ssw_wire_offer *o);
/* The controller lets go of its transport: the peer suspended, MOVED,
 * parked for the next driver (session_life.c; for_exec: see there). */
int sess_park(struct ssw_session *s, bool for_exec);
/* Its first step: SUSPEND, once (waiting for room); whether it is asked. */
bool sess_park_ask(struct ssw_session *s);
/* Parked for a hand-over still under way (an exec, a pass: session_handover.c):
 * this process must not take the transport back (a failed one lets it). */
bool sess_handover_holds(const struct ssw_session *s);
/* The controller, peer suspended: MOVED, our copy left; parked. */
int sess_move_out(struct ssw_session *s);
/* RESUME on the transport we offered to leave: the offer is void. */
void sess_move_unoffer(struct ssw_session *s);
/* The new controller of a parked connection: its own transport. */
int sess_move_in(struct ssw_session *s);
/* The connection ends here: an offer of ours is withdrawn. */
void sess_move_end(struct ssw_session *s);
/* This process's copy is of an older transport. */
bool sess_move_stale(const struct ssw_session *s);

/* SOCKSWITCH_FAULT=swap-*: a send plays the hostile peer (tests). */
void sess_swap_fault(struct ssw_session *s);
/* What is owed (SUSPENDED, RESUME), before the lock goes. */
void sess_swap_flush(struct ssw_session *s);
static inline bool sess_swap_owed(const struct ssw_session *s)
{
	return s->sw.peer_wants || s->sw.resume_owed || s->sw.suspended || s->sw.fin_owed || s->sw.got || s->ts.len;
}
ssize_t sess_send_inline(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t total, size_t at,
			   bool nonblock, uint64_t dl, bool hold);

/* session_rndv.c */
int sess_send_rndv_done(struct ssw_session *s, uint64_t id, uint64_t len, int status);
int sess_stage_rr(struct ssw_session *s);
int sess_stage_rw(struct ssw_session *s);
/* Our rendezvous is on (a threshold or a mode set): else we refuse the peer's. */
bool sess_rndv_enabled(void);
int sess_rndv_choose(struct ssw_session *s, size_t len);
ssize_t sess_send_rndv(struct ssw_session *s, const void *buf, size_t len, int how);
ssize_t sess_recv_by_write(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want);
void sess_rndv_reply(struct ssw_session *s, const struct ssw_msg *m);
void sess_rndv_offer(struct ssw_session *s, const struct ssw_msg *m);
ssize_t sess_rr_deliver(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t at, size_t lim);

/* session_rma.c: one RDMA read or write, to completion (called and returns
 * with the lock held; it is released while the transfer is in flight).
 * 0, -EPERM (copy through messages), -EINVAL (the peer's descriptor does
 * not validate) or -ECONNRESET. */
int sess_rma(struct ssw_session *s, bool write, const struct iovec *v, int k, const struct ssw_rdma_desc *d,
	     uint64_t off, size_t len);

/* session_urg.c */
void sess_take_oob(struct ssw_session *s, uint8_t byte);
/* The urgent byte as its own message, with the mark's note and SIGURG
 * (session_urg.c; a staged one at its turn: session_stage.c). */
int sess_urg_send_byte(struct ssw_session *s, uint8_t b);
ssize_t sess_send_oob(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t total, bool nonblock,
			uint64_t dl);
ssize_t sess_recv_oob(struct ssw_session *s, const struct iovec *iov, int iovcnt, size_t want, int flags);
bool sess_urg_pending(const struct ssw_session *s); /* POLLPRI */
void sess_urg_flush(void);                          /* SIGURGs owed by this thread */

/* session_wait.c */
void sess_peer_check(struct ssw_session *s, bool probe);
int sess_wait_peer(struct ssw_session *s, uint64_t deadline);
/* After publishing (unlocked): the wait policy's cede (common/waitpol.h). */
void sess_cede(struct ssw_session *s);

#endif
