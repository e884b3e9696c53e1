/* session.h — TCP stream semantics over a provider endpoint (seeds 003/004):
 * credits, inline data, RDMA read/write rendezvous for large sends, urgent
 * data, half-close, linger and reset.  One session per switched connection;
 * every call is thread-safe (a per-session mutex, released while sleeping). */
#ifndef SSW_SESSION_H
#define SSW_SESSION_H

#include <sockswitch/provider.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

struct ssw_session;

/* Tunables, read once from the environment (session_config.c). */
/* What connection set-up does for a moving transport (switch/setup/move.c;
 * the protocol is session_move.c's).  Tokens are SSW_SESSION_MOVE_TOKEN
 * bytes.  All return 0 or -errno unless said. */
#define SSW_SESSION_MOVE_TOKEN 16
/* The same host: two addresses' IP (the port aside). */
bool ssw_session_same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b);
struct ssw_move_ops {
	/* Can this provider's transports move at all? */
	bool (*movable)(const struct ssw_provider *p);
	/* The peer's host as the transport established it. */
	int (*peer_host)(const struct ssw_provider *p, struct ssw_ep *ep, struct sockaddr_storage *host);
	/* The suspended side: a listener of this process on ep's own address,
	 * its address for the peer's next controller (at most *len bytes), and
	 * the token that will come (a connect with another token is refused at
	 * once); forget drops a token no longer awaited (the connection ended). */
	int (*listen)(const struct ssw_provider *p, struct ssw_ep *ep, const uint8_t *token, void *where, uint32_t *len);
	void (*forget)(const uint8_t *token);
	/* A transport that came with this token: 1 with *ep (not yet taken by
	 * a session: *from its peer's host), 0 none yet; ready says so without
	 * taking it; fd is what to sleep on meanwhile (-1 none). */
	int (*take)(const struct ssw_provider *p, const uint8_t *token, struct ssw_ep **ep, struct sockaddr_storage *from);
	bool (*ready)(const struct ssw_provider *p, const uint8_t *token);
	int (*fd)(const struct ssw_provider *p);
	/* The new controller: connect to where, presenting token (blocks, at
	 * most a few seconds). */
	int (*connect)(const struct ssw_provider *p, const void *where, uint32_t len, const uint8_t *token,
		       struct ssw_ep **ep);
};

struct ssw_session_config {
	uint32_t rndv_threshold;   /* SOCKSWITCH_RNDV_THRESHOLD: sends >= this use rendezvous
				    * (SSW_RNDV_DEFAULT; 64 KiB when a mode is forced) */
	uint32_t rndv_max;         /* SOCKSWITCH_RNDV_MAX: ... and <= this (0: no limit) */
	int rdma_mode;             /* SOCKSWITCH_RDMA: 0 auto, 1 read, 2 write, 3 none */
	uint32_t spin_max_ns;      /* SOCKSWITCH_SPIN_US */
	int fault_regfail;         /* SOCKSWITCH_FAULT=regfail: registration fails (tests) */
	int fault_nomem;           /* SOCKSWITCH_FAULT=nomem: temporary buffers fail (tests) */
	int fault_swap;            /* SOCKSWITCH_FAULT=swap-*: a swap message out of turn (tests: SSW_FAULT_SWAP_*) */
	/* This process came to control a connection that others share and
	 * may ask for (session_swap.c): the switch starts the thread that
	 * serves them while the process is busy elsewhere. */
	void (*control_taken)(void);
	/* The provider set-up a transport moving with control needs
	 * (session_move.c), done by connection set-up, its one owner
	 * (switch/setup/move.c).  NULL: such transports do not move. */
	const struct ssw_move_ops *move;
};
/* This process's control swaps so far: how many it took, their total
 * and longest time from asking to control. */
void ssw_session_swap_counts(uint64_t *n, uint64_t *ns, uint64_t *max_ns, uint64_t *driven);
/* The other side of it: how often this process's peers suspended one of
 * its connections, and the bytes its sends staged meanwhile. */
void ssw_session_suspend_counts(uint64_t *suspended, uint64_t *staged);
/* ... and the transports it took as the peer's control moved (fabric):
 * new connections, and the peer's processes back on their own. */
void ssw_session_move_counts(uint64_t *fresh, uint64_t *back);
/* Another process holds the connection too (a fork) and control may move
 * between them (session_swap.c): this process's threads asleep on it
 * since before must look again (from now on poll's sleeps nap, and an
 * epoll set naps and looks at it again when control left: epoll_ready.c). */
bool ssw_session_swap_shared(struct ssw_session *s);
/* For `stat`, lock-free: of a connection shared by fork whose processes take
 * turns driving it (session_swap.c), the pid driving it now, -1 when none
 * has since the fork; 0 for any other connection. */
pid_t ssw_session_driver(struct ssw_session *s);
/* Lock-free: this process drives the connection (always, where processes do
 * not take turns). */
bool ssw_session_controlled_here(struct ssw_session *s);
/* Lock-free: a look by a process that does not drive the connection sees
 * its transport (fork-shared memory: shm without shared context), so that
 * its poll and FIONREAD answer without control.  false where the transport
 * lives in the driver's memory (fabric): there a look asks for control. */
bool ssw_session_look_sees(struct ssw_session *s);
/* The helper's look at one connection: if this process controls it and
 * another asks, serve (suspend the peer, hand over), waiting for the peer
 * at most ms.  true while a request is left to serve. */
bool ssw_session_swap_serve(struct ssw_session *s, int ms);
enum { SSW_FAULT_SWAP_SUSPEND = 1, SSW_FAULT_SWAP_RESUME, SSW_FAULT_SWAP_SUSPENDED };
enum { SSW_RDMA_AUTO = 0, SSW_RDMA_READ_ONLY, SSW_RDMA_WRITE_ONLY, SSW_RDMA_NONE };
#define SSW_RNDV_OFF UINT32_MAX
#define SSW_RNDV_DEFAULT (4u << 20)
extern struct ssw_session_config ssw_session_cfg;
/* Re-reads the settings from the environment and applies the session's.
 * Returns 0, or -1 with a message naming the bad variable. */
int ssw_session_config_load(char *err, size_t errlen);
/* Applies the settings as last loaded (ssw_params_load), invalid ones at
 * their defaults. */
void ssw_session_config_apply(void);
/* Do the settings leave the rendezvous on (before the switch starts: the
 * memory hooks are installed only where a registration cache may serve)? */
bool ssw_session_rndv_configured(void);

/* Socket options that drive the session. */
struct ssw_session_opts {
	uint32_t rcvbuf;           /* our receive window (credits we grant) */
	uint32_t sndbuf;           /* cap on bytes in flight */
	bool oobinline;
	bool cork;                 /* TCP_CORK set before the connection (or on its listener) */
	bool ask_proof;            /* acceptor: tell the connector to make listening proofs (wire.h SSW_INIT_ASK_PROOF) */
};

/* The protocol versions this library speaks: one number for the whole
 * set-up and session wire (rendezvous records, the connect request's
 * private data, INIT, messages; wire.h SSW_WIRE_VERSION is the newest).
 * A listener answers under each of them, a connector tries them from the
 * newest down (providers key their rendezvous by it: provider.h listen),
 * and peers without one in common use kernel TCP.  3: vouched rendezvous
 * descriptors, refusals of a rendezvous, the version range in the request. */
#define SSW_PROTO_MIN 3
#define SSW_PROTO_MAX 3

/* Session negotiation (seed 001): each side's INIT (window, capabilities,
 * pid) travels in the provider's connect / accept private data, so both are
 * known before connect returns and before accept is called.  To the switch
 * it is SSW_SESSION_INIT_BYTES opaque bytes that it carries. */
#define SSW_SESSION_INIT_BYTES 16
void ssw_session_make_init(const struct ssw_session_opts *o, void *out);
/* Wrap a connected endpoint, given the peer's INIT.  NULL when the INIT is
 * not acceptable or memory is short (the caller refuses the connection). */
struct ssw_session *ssw_session_new(const struct ssw_provider *prov, struct ssw_ep *ep,
				    const struct ssw_session_opts *o, const void *peer_init);

/* The connecting side, once the provider's connect_complete said 0: the
 * session, from the listener's INIT (its reply, reply_len bytes; a one-trip
 * provider gives none: then the listener is taken to be like us until its
 * INIT arrives in-band).  NULL when the INIT is not acceptable or memory is
 * short: ep stays the caller's to close. */
struct ssw_session *ssw_session_connected(const struct ssw_provider *prov, struct ssw_ep *ep,
					 const struct ssw_session_opts *o, const void *reply, size_t reply_len);

/* The accepting side of a one-trip connect (the provider's connect_complete
 * gave no reply): send our INIT as the first message on the ring. */
int ssw_session_announce(struct ssw_session *s, const struct ssw_session_opts *o);

/* Stream I/O.  Flags are MSG_* (PEEK, WAITALL, DONTWAIT, OOB, NOSIGNAL).
 * Return bytes, or -errno (-EAGAIN, -EPIPE, -ECONNRESET, -EINTR, -ENOBUFS...).
 * timeout_ms < 0: none (SO_RCVTIMEO / SO_SNDTIMEO otherwise). */
ssize_t ssw_session_send(struct ssw_session *s, const struct iovec *iov, int iovcnt, int flags,
			 bool nonblock, int timeout_ms);
ssize_t ssw_session_recv(struct ssw_session *s, const struct iovec *iov, int iovcnt, int flags,
			 bool nonblock, int timeout_ms);

/* Send up to `count` bytes that `fill` writes (at most `len` at a time)
 * straight into the transport, as a file read into the socket (sendfile,
 * splice).  fill returns bytes, 0 at the end (the send stops there), or
 * -errno (returned when nothing was sent).  As ssw_session_send otherwise. */
ssize_t ssw_session_send_fill(struct ssw_session *s, size_t count, ssize_t (*fill)(void *ctx, void *buf, size_t len),
			      void *ctx, int flags, bool nonblock, int timeout_ms);
/* TCP_CORK: while set, sent data is held (not visible to the peer, which
 * is not woken) until uncorked, a full segment's worth is held, or
 * SSW_HOLD_MS pass; MSG_MORE does the same for one send.  Uncorking and
 * ssw_session_flush (TCP_NODELAY) send what is held. */
void ssw_session_set_cork(struct ssw_session *s, bool on);
bool ssw_session_cork(struct ssw_session *s);
/* The peer's INIT arrived (a connector: the acceptor took the connection). */
bool ssw_session_peer_init_seen(struct ssw_session *s);
/* ... and asked for listening proofs (SSW_INIT_ASK_PROOF). */
bool ssw_session_peer_asks_proof(struct ssw_session *s);
void ssw_session_flush(struct ssw_session *s);

int ssw_session_shutdown(struct ssw_session *s, int how);
/* Close.  abort: SO_LINGER with zero timeout (reset).  Frees the session. */
void ssw_session_close(struct ssw_session *s, bool abort);
/* Close is per process: the session lives in fork-shared memory and counts
 * the processes holding it; only the last one's close reaches the peer.
 * fork() adds a holder (ssw_session_hold +1 before, -1 if fork failed). */
void ssw_session_hold(struct ssw_session *s, int delta);
/* The provider fds this connection needs in this process (at most max). */
int ssw_session_fds(struct ssw_session *s, int *fds, int max);
/* Changes when the fds to wait on change (a transport that moved,
 * session_move.c): a set holding the old ones registers them anew. */
uint32_t ssw_session_fds_gen(struct ssw_session *s);
/* _exit: this process's hold of a connection others share goes (its
 * transport parked if it lives here: session_move.c), without waiting for
 * a lock another may hold.  true if it went. */
bool ssw_session_exit_release(struct ssw_session *s);
/* Every descriptor the connection's transport needs in this process (the
 * provider's keep_fds; its wait fds when it has none): for a relay process
 * that closes all others. */
int ssw_session_keep_fds(struct ssw_session *s, int *fds, int max);
bool ssw_session_last_holder(struct ssw_session *s);
/* Relay processes among the holders (switch/share/relay.c): a hold of a
 * relay's, one more or one less (counted as a holder and as a relay at
 * once); in a relay process about to let go, its close drops both at once
 * (relay_ending); are the others all relays? */
void ssw_session_relay_hold(struct ssw_session *s, int delta);
void ssw_session_relay_ending(struct ssw_session *s);
bool ssw_session_only_relays(struct ssw_session *s);
/* This process is about to lose privileges the other processes holding the
 * connection keep (a setuid after fork): take a copy of the connection's
 * fork-shared memory for this process alone, in place, and leave the
 * original to them as a connection that moved away (reset there, a close
 * only lets go).  0: done, or nothing shared; -errno: still shared. */
int ssw_session_unshare(struct ssw_session *s);
/* Across exec (session_handover.c): a session this process alone holds,
 * quiet, written into a memfd (with the caller's note, at most
 * SSW_SESSION_NOTE_MAX bytes) beside the provider's descriptors, which the
 * new image inherits; the session stays usable here (the exec may fail).
 * 0, or -errno when it cannot go now (the caller relays it). */
#define SSW_SESSION_NOTE_MAX 1024
#define SSW_SESSION_IMAGE_FDS 8
struct ssw_session_image {
	int memfd;
	int fds[SSW_SESSION_IMAGE_FDS];
	int nfds;
};
int ssw_session_export(struct ssw_session *s, const void *note, size_t note_len, struct ssw_session_image *out);
/* In the new image: the session back, held by this process alone, and the
 * note (*note_len in: room, out: length); NULL with *err when the image is
 * not one this library wrote (the caller closes the descriptors). */
struct ssw_session *ssw_session_import(const struct ssw_provider *prov, const struct ssw_session_image *img,
				       void *note, size_t *note_len, int *err);
/* An imported session given up before use (the one that exported it
 * carries on): its copy goes, the peer is told nothing. */
void ssw_session_import_undo(struct ssw_session *s);
/* Before an exec: a connection it may carry whose transport must move
 * (fabric) asks its peer to stop now (all peers at once). */
void ssw_session_exec_ask(struct ssw_session *s);
/* After the exec's hand-overs, for each connection asked: its answer is
 * anyone's again (one parked took it already). */
void ssw_session_exec_asked_done(struct ssw_session *s);
/* The exec failed, or the process a connection was passed to did not take
 * it: transports parked for it (fabric) are this process's again. */
void ssw_session_handover_failed(void);
/* Options of the socket's open file that a fork shares (fcntl's O_NONBLOCK,
 * SO_RCVTIMEO and SO_SNDTIMEO in ms, SO_LINGER: -1 off, else seconds):
 * set by whichever process holding the connection sets them, read by all
 * (dflt: this process's own value, until one sets it). */
enum { SSW_SOPT_NONBLOCK, SSW_SOPT_RCVTIMEO, SSW_SOPT_SNDTIMEO, SSW_SOPT_LINGER, SSW_SOPT_COUNT };
void ssw_session_sopt_set(struct ssw_session *s, int which, int v);
int ssw_session_sopt(struct ssw_session *s, int which, int dflt);
/* splice from the socket: tcp_read_sock stops at urgent data and never
 * skips the byte (a recv does).  Returns 1 with *room, the most a splice
 * may take now (SIZE_MAX: no mark ahead); at the mark itself what the
 * kernel's splice answers (0, -EAGAIN, a pending error). */
int ssw_session_splice_room(struct ssw_session *s, bool nonblock, size_t *room);

/* poll(2) bits now: POLLIN, POLLOUT, POLLPRI, POLLRDHUP, POLLHUP, POLLERR. */
short ssw_session_poll(struct ssw_session *s);
/* Prepare to sleep: returns 0 and fills up to n pollfds, 1 the same but
 * sleep in naps (credits wait for transport room), or
 * another thread sleeps on this connection too (then sleep in naps: it may
 * take the wake-up meant for this one), or -EAGAIN if something is already
 * pending (do not sleep).  After 0 or 1, call ssw_session_sleep_done. */
int ssw_session_sleep_prepare(struct ssw_session *s, struct pollfd *pfd, int n, int *nout);
void ssw_session_sleep_done(struct ssw_session *s);
/* epoll's standing watch: arm the provider without sleeping (the peer's
 * next arrival rings the wait fds); 0 armed, -EAGAIN something is pending
 * or the connection is finished.  unwatch: take the doorbell, drop the arm.
 * A watch on a connection whose processes take turns
 * (ssw_session_swap_shared) hears nothing once control leaves this process
 * (its bell word changes then: common/bell.h): look again then
 * (ssw_session_controlled_here false). */
int ssw_session_watch(struct ssw_session *s);
void ssw_session_unwatch(struct ssw_session *s);
/* Lock-free hint for busy-polling: something new arrived (the provider's rx_ready). */
bool ssw_session_rx_ready(struct ssw_session *s);
/* The CPU the peer was last seen on (a hint for the wait policy), -1 when
 * not known or the peer is on another host.  Lock-free. */
int ssw_session_peer_cpu(struct ssw_session *s);
/* When the peer last rang this session's doorbell (the provider's
 * wake_sent_ns), 0 when not known.  Lock-free. */
uint64_t ssw_session_wake_sent_ns(struct ssw_session *s);

int ssw_session_fionread(struct ssw_session *s);
/* Bytes this process took from the connection and must give back, in front
 * of what it has not read yet (a relay handing the connection over:
 * share/relay_give.c): 0, or -ENOSPC when the queue cannot hold them. */
int ssw_session_unread(struct ssw_session *s, const void *buf, size_t len);
/* For a relay that must not take bytes another holder may read
 * (share/relay.c): a peek (MSG_PEEK) of up to len bytes with the stream
 * position it starts at (-EPIPE: the peer's end came and nothing is left),
 * and later the taking of those bytes, only while nobody else read since:
 * the bytes taken (0: another holder read them). */
ssize_t ssw_session_peek_at(struct ssw_session *s, void *buf, size_t len, uint64_t *pos);
ssize_t ssw_session_take_at(struct ssw_session *s, uint64_t pos, size_t len);
int ssw_session_atmark(struct ssw_session *s);
/* SO_ERROR: pending error, cleared by the read (like the kernel). */
int ssw_session_take_error(struct ssw_session *s);
/* TCP_ESTABLISHED, TCP_CLOSE_WAIT, TCP_FIN_WAIT2 or TCP_CLOSE: what
 * TCP_INFO and getpeername report for the connection. */
int ssw_session_tcp_state(struct ssw_session *s);
/* The count of this side's state changes that wake every waiter (shutdown
 * calls, resets): read without the lock, to see whether a call made one. */
uint64_t ssw_session_state_gen(struct ssw_session *s);
/* F_SETOWN on the socket: SIGURG goes to `owner` (pid, or -pgid) when urgent data arrives (session_urg.c). */
void ssw_session_set_owner(struct ssw_session *s, int owner);
void ssw_session_set_opts(struct ssw_session *s, const struct ssw_session_opts *o);

struct ssw_session_stats {
	uint64_t bytes_sent, bytes_received, msgs_sent, msgs_received;
	uint64_t rndv_read, rndv_write, rndv_fallback;
	uint64_t rdma_regs;      /* buffers exposed to the peer (register_rdma_memory: each one a
				  * registration of its own over fabric, its key revoked at the end) */
	uint64_t rma_async;      /* RDMA transfers the provider completed later (poll_cq) */
	uint64_t tx_inflight, tx_limit, rx_window;
	uint64_t tx_credited;   /* credit bytes the peer ever returned: a monotonic count, so that
				 * edge-triggered epoll sees space freed since its last look even
				 * when sends in between refilled the window */
	int tcp_state;   /* as ssw_session_tcp_state, from what is known (no message is read) */
	bool fin_in;     /* the peer's FIN arrived */
	uint64_t state_wakes; /* this side's state changes that wake every waiter (shutdown calls, resets) */
};
void ssw_session_get_stats(struct ssw_session *s, struct ssw_session_stats *st);
/* The same for `stat`, which never waits: its caller may be a signal
 * handler that interrupted this session's lock holder in its own thread.
 * With the lock busy the figures are read without it (each whole, not all
 * of one instant) and *resident is -1; else *resident is as
 * ssw_session_resident.  false when the lock was busy. */
bool ssw_session_peek_stats(struct ssw_session *s, struct ssw_session_stats *st, int64_t *resident);

/* Memory like kernel TCP's (session_mem.c).  The housekeeping thread's look
 * at a connection: what stayed idle since its last look is given back
 * (never waits for the lock: a busy connection is looked at again).
 * Returns 1 while memory may be left to give back later, 0 when not. */
int ssw_session_trim(struct ssw_session *s);
/* Bytes of the connection's transport memory resident now (`stat`; may
 * cost a system call), -1 when not known. */
int64_t ssw_session_resident(struct ssw_session *s);

#endif
