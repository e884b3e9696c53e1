/* provider.h — the provider SPI: the one contract between the switch and a transport.
 *
 * A provider moves the bytes of a TCP connection over something faster than
 * the kernel stack (shared memory, RDMA).  It knows nothing of socket
 * semantics: the session layer above it (src/session) implements TCP's
 * behaviour (stream, credits, urgent data, shutdown, linger) on top of the
 * few primitives below.  Ops are named after the Windows Sockets Direct SPI
 * calls (WSPxxx) they stand for.
 *
 * Conventions, for every op:
 *  - Return 0 (or a non-negative count) on success, a negative errno on failure.
 *  - Nothing blocks unless its comment says so.  Ops that cannot finish at once
 *    return -EINPROGRESS and finish later (see each op).
 *  - An op marked Optional may be NULL, or lie past its table's `size`: the
 *    switch then does what the op's comment says.  The others are required
 *    (the rdma ones and poll_cq when the provider offers RDMA): the switch
 *    refuses a provider lacking one when it registers, naming the op, and
 *    stubs the rest (src/switch/providers.c).
 *  - Everything a provider reads from shared memory or the wire is untrusted:
 *    on corrupt input it fails that one endpoint with -ECONNRESET, never more.
 *  - Tables start with `size` (sizeof the table) so they can grow.
 *
 * Threads (what the callers guarantee, and what a provider must allow):
 *  - Endpoint ops are serialized per endpoint: the session calls msg, rdma
 *    and progress ops with its per-connection lock held (one call at a time
 *    on one endpoint, whichever thread or process makes it), except:
 *      rx_ready         lock-free hint: any thread, any time, concurrently
 *                       with any other op on the endpoint (read only);
 *      sleep            called without the lock, after arm() returned 0
 *                       under it: other threads may call any op meanwhile;
 *      peer_state       under the lock when probe != 0; with probe == 0 it
 *                       may also run concurrently (read only).
 *    Different endpoints are used concurrently by different threads.
 *  - Listener ops: listen, accept, listener_ready and listener_close on one
 *    listener are serialized by the switch (the listening socket's lock);
 *    listener_fd may be read by any thread (poll/epoll sleep on it).
 *  - connect, connect_fd, connect_complete and close on one connecting
 *    endpoint are serialized by the socket's lock.
 *  - A provider's own threads (an accept or progress thread) must lock
 *    against the calls above themselves; any C library call a provider
 *    makes while the switch holds one of these locks must not re-enter the
 *    switch: wrap such calls (libfabric) in ssw_provider_calls (common/sys.h),
 *    which sends the interposed socket API straight to the C library.
 *
 * Processes (fork, seed 000):
 *  - init() runs once per process before any other op; after fork the child
 *    inherits the provider's memory and must cope (pthread_atfork) with its
 *    threads being gone.
 *  - SSW_CAP_SHARED_CONTEXT: an endpoint lives in fork-shared memory and
 *    any process holding the connection may call its ops (serialized by the
 *    session's process-shared lock); per-process resources (the fds
 *    wait_fds returns) must be valid, or made valid, in each process.
 *    Listeners may be shared too: exactly one process gets each request.
 *  - Without it: at fork the switch closes the child's copies of the
 *    provider's listeners (listener_close in the child must free them
 *    without touching what the parent still uses), and the parent's too
 *    unless the parent has accepted on (or polled) that socket: a
 *    fork-per-connection server keeps listening there, a pre-forking
 *    master's workers take later connects over kernel TCP; an
 *    endpoint is used by one process at a time after fork (the others close
 *    it with SSW_CLOSE_DETACH, which must not touch the wire), and at exit
 *    the switch closes the process's endpoints as the kernel closes a dying
 *    process's sockets, since their unsent data dies with it.
 */
#ifndef SOCKSWITCH_PROVIDER_H
#define SOCKSWITCH_PROVIDER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SSW_SPI_VERSION 4 /* 4: ep_export/ep_import (exec); 3: listen and connect name the protocol version; 2: no duplicate/adopt; note marks and tags, peer_tag */

/* Capabilities of a provider (and, once connected, of one endpoint: the
 * peer may lack what the provider has, e.g. Cross Memory Attach refused). */
enum ssw_cap {
	SSW_CAP_RDMA_READ = 1u << 0,      /* rdma_read works on this endpoint */
	SSW_CAP_RDMA_WRITE = 1u << 1,     /* rdma_write works on this endpoint */
	SSW_CAP_SHARED_CONTEXT = 1u << 2, /* endpoint usable from every process sharing it */
};

/* Largest opaque descriptor register_rdma_memory may return. */
#define SSW_RDMA_DESC_MAX 64
/* Largest private data a connect request may carry to the listener. */
#define SSW_CONNECT_PRIV_MAX 192

struct ssw_ep;       /* a connected endpoint: defined by each provider */
struct ssw_listener; /* a provider listener: defined by each provider */

/* A remote-accessible registration, as sent to the peer. */
struct ssw_rdma_desc {
	uint32_t len;                      /* bytes used in data[] */
	uint8_t data[SSW_RDMA_DESC_MAX];   /* opaque to everyone but the provider */
};

/* A local registration handle (WSPRegisterMemory).  Providers that need no
 * registration (shm) return a handle with key 0. */
struct ssw_mr {
	void *addr;
	size_t len;
	uint64_t key;  /* provider-private */
	void *prov;    /* provider-private */
};

/* Connection set-up: WSPSocket + WSPBind + WSPListen + WSPAccept + WSPConnect. */
struct ssw_conn_ops {
	size_t size;

	/* WSPListen: start accepting provider connections addressed to `addr`
	 * (which may be a wildcard address: then any local address matches)
	 * that speak protocol version `proto` (the switch's set-up and session
	 * protocol, src/switch/setup): the rendezvous is keyed by it, so that a
	 * connector of another version finds no listener here and uses kernel
	 * TCP (connect's -ENOENT), and no byte of one version ever reaches a
	 * peer of another.  Returns 0 and a listener, -EADDRINUSE when another
	 * provider listener already serves that exact address (and version), or
	 * another error (the switch then serves the socket with kernel TCP only).
	 * Port 0: a port of the provider's choice (listener_name tells it). */
	int (*listen)(const struct sockaddr *addr, socklen_t addrlen, int backlog, uint32_t proto,
		      struct ssw_listener **out);

	/* Connection requests (WSPAccept).  The connect must complete without
	 * the application calling accept (seed 001): a request waits in the
	 * provider's backlog like a SYN in the kernel's, and any process
	 * sharing the listener may accept it.  accept() takes one request,
	 * non-blocking: 0 with an endpoint and the connector's private data
	 * (*priv_len in: capacity, out: length), or -EAGAIN.  listener_fd() is
	 * readable while one waits.  Exactly one process gets each.  (A
	 * provider whose connect needs the listener's answer before it
	 * completes would need a helper of the switch's that answers before the
	 * application accepts; none does, and the switch has none.) */
	int (*listener_fd)(struct ssw_listener *l);
	int (*accept)(struct ssw_listener *l, struct ssw_ep **ep, void *priv, size_t *priv_len);

	/* Stop listening; endpoints already accepted stay valid. */
	void (*listener_close)(struct ssw_listener *l);

	/* A listener across exec (a listening socket the new program inherits:
	 * socket activation, a server re-exec'ing itself on upgrade).
	 * listener_export: the descriptors (at most max) a new image of this
	 * process needs to go on serving l, requests already waiting in them
	 * included (none may be lost: a connector would see a reset); the switch
	 * keeps them open across the exec, and closes nothing of l if the exec
	 * fails.  listener_import, in the new image: the listener rebuilt from
	 * those descriptors (checked: they come through the environment) for
	 * the same address and version; -EINVAL if they are not what they must
	 * be (the switch then closes them).  Optional, both or none (NULL: l
	 * ends at exec, and the new image listens on the provider afresh). */
	int (*listener_export)(struct ssw_listener *l, int *fds, int max);
	int (*listener_import)(const struct sockaddr *addr, socklen_t addrlen, uint32_t proto, const int *fds, int n,
			       struct ssw_listener **out);

	/* WSPConnect, non-blocking (WSPEventSelect FD_CONNECT semantics).
	 * Returns 0 with a connected endpoint; -EINPROGRESS with an endpoint whose
	 * connect_fd() becomes readable when connect_complete() can tell the
	 * result; -ECONNREFUSED / -ECONNRESET / -EHOSTUNREACH only when kernel TCP
	 * is certain to fail too; -ENOENT: no listener of protocol version
	 * `proto` there (see listen); any other error means "this provider
	 * cannot serve": the switch falls back to kernel TCP (seed 001). */
	int (*connect)(const struct sockaddr *dst, socklen_t dstlen, uint32_t proto, const void *priv,
		       size_t priv_len, struct ssw_ep **out);
	int (*connect_fd)(struct ssw_ep *ep);
	/* 0 when connected (with the listener's reply private data in reply,
	 * *reply_len in: capacity, out: length), -EINPROGRESS while pending,
	 * else the error (same meaning as connect's).  On error the endpoint
	 * must still be closed. */
	int (*connect_complete)(struct ssw_ep *ep, void *reply, size_t *reply_len);

	/* WSPCloseSocket.  `how`:
	 *  SSW_CLOSE_ORDERLY  the peer's recv_peek reports -EPIPE once it has
	 *                     consumed every message sent before the close, and
	 *                     its peer_state() shows SSW_PEER_CLOSED at once;
	 *  SSW_CLOSE_ABORT    the peer sees a reset (-ECONNRESET, SSW_PEER_RESET);
	 *  SSW_CLOSE_DETACH   other processes still hold the endpoint (fork): free
	 *                     this process's resources only, tell the peer nothing
	 *                     (it learns of the end when the last holder is gone). */
	void (*close)(struct ssw_ep *ep, int how);

	/* WSPDuplicateSocket / WSPSocket(dwProviderReserved), for exec.  A
	 * connection's state is mostly the session's (credits, queued bytes,
	 * urgent mark, shutdown), above this SPI; the switch shares it across
	 * fork through the session's fork-shared memory (every holder uses the
	 * endpoint with SSW_CAP_SHARED_CONTEXT; one at a time, the others
	 * closing with SSW_CLOSE_DETACH, without it).  A program exec'd with
	 * the connection (inetd, socat EXEC, a server re-exec'ing itself) gets
	 * it through these two, with the session's state beside the endpoint's
	 * (switch/share/handover.c); a process it is sent to over SCM_RIGHTS,
	 * or an image without the switch, through a relay process forked from
	 * the holder (switch/share/relay.h).
	 *
	 * ep_export: this process alone holds ep and is about to exec a program
	 * whose switch will take it over.  Write into blob (at most *blob_len
	 * bytes; *blob_len set to what was used) what the new image needs,
	 * position-independent (no pointer of this image means anything there),
	 * and put the descriptors it needs in fds[] (at most max: the switch
	 * keeps them open across the exec).  ep stays valid and usable here (the
	 * exec may fail).  The number of fds, or -errno when ep cannot be carried
	 * now (a transfer in flight, a test rig's doorbells: the switch relays
	 * it instead).  ep_import, in the new image: the endpoint back from the
	 * blob and those fds, checked (they come through the environment and
	 * memory of the image before): 0 with *ep, or -errno (the caller closes
	 * the fds).  Optional, both or none (NULL: relayed). */
	int (*ep_export)(struct ssw_ep *ep, void *blob, size_t *blob_len, int *fds, int max);
	int (*ep_import)(const void *blob, size_t blob_len, const int *fds, int n, struct ssw_ep **ep);

	/* Capabilities of this connected endpoint (enum ssw_cap). */
	uint32_t (*ep_caps)(struct ssw_ep *ep);

	/* Would accept() take a request now?  What poll/select/epoll report for
	 * the listener: once it says yes, accept succeeds (as the kernel's
	 * listener).  listener_fd() may wake for a request that is not complete
	 * yet; this call moves such work out of its way, so that listener_fd()
	 * then stays quiet until a request can be taken.  Optional (NULL:
	 * listener_fd() readable). */
	int (*listener_ready)(struct ssw_listener *l);

	/* The user and process ids of the peer as the kernel reports them
	 * (for an accepted endpoint: the connector, at its connect).  The
	 * switch checks the connector's claimed address against the kernel
	 * sockets it holds.  0 or -errno.  Optional (NULL: the switch cannot
	 * tell, and refuses connectors that are not of its own user). */
	int (*peer_cred)(struct ssw_ep *ep, uint32_t *uid, int32_t *pid);

	/* The peer's address as the transport itself established it (for an
	 * accepted endpoint: the source of the fabric connection, never the
	 * connector's word).  When present and 0, the switch reports it
	 * (accept, getpeername) and checks no claim of the connector's: the
	 * transport vouches for it.  0 or -errno.  Optional (NULL: the switch
	 * verifies the connector's claimed address against the kernel sockets
	 * of this host, which only works for a same-host peer). */
	int (*peer_addr)(struct ssw_ep *ep, struct sockaddr_storage *addr, socklen_t *len);

	/* This process drops privileges that the other processes holding the
	 * endpoint after fork keep (session_unshare.c): give it a copy of the
	 * endpoint's fork-shared state of its own, at the same address, so
	 * that it can no longer write what they read.  The session lock is
	 * held.  0, or -errno with nothing changed.  Optional (NULL: the
	 * endpoint keeps nothing the others would follow in fork-shared
	 * memory). */
	int (*unshare)(struct ssw_ep *ep);

	/* A connection's transport moving to another process (seed 000's
	 * control swap without shared context: session/session_move.c).  The
	 * side whose peer moves listens with port 0 (listen: any port, the
	 * provider's choice) on the connection's own address and tells the
	 * peer where: listener_name, the address a connect must name to reach
	 * l; local_addr, the endpoint's own address as the transport
	 * established it (where the peer reaches this host).  0 or -errno.
	 * Optional, both or none (NULL: a connection whose peer shares it
	 * between processes stays with one of them). */
	int (*listener_name)(struct ssw_listener *l, struct sockaddr_storage *addr, socklen_t *len);
	int (*local_addr)(struct ssw_ep *ep, struct sockaddr_storage *addr, socklen_t *len);
};

/* Control messages: WSPSend / WSPRecv into pre-posted registered buffers.
 * A message is an opaque datagram of at most max_msg bytes, delivered once,
 * in order.  The session layer defines what is inside. */
struct ssw_msg_ops {
	size_t size;

	/* Largest message this endpoint carries. */
	size_t (*max_msg)(struct ssw_ep *ep);
	/* The transport window: bytes of messages (their framing, msg_space,
	 * included) that may be in flight toward the peer before it consumes
	 * any, so that send() never meets a full transport while credits allow
	 * (the session keeps its window and credit batches within it). */
	size_t (*window)(struct ssw_ep *ep);

	/* Send one message made of the iovec parts (total <= max_msg).
	 * -EAGAIN when the transport has no room now (rare: session credits
	 * normally prevent it; the caller waits on the wait fds), -ECONNRESET /
	 * -EPIPE when the peer is gone.  Wakes the peer if it sleeps. */
	int (*send)(struct ssw_ep *ep, const struct iovec *iov, int iovcnt);

	/* Look at the next received message without consuming it: 0 and a
	 * pointer/length valid until recv_done(), -EAGAIN when none, -EPIPE after
	 * the peer's orderly close, -ECONNRESET on reset, peer death or corrupt
	 * input. */
	int (*recv_peek)(struct ssw_ep *ep, const void **msg, size_t *len);

	/* Consume the message recv_peek returned and re-post its buffer. */
	void (*recv_done)(struct ssw_ep *ep);

	/* Bytes of messages send() would take now (header overhead included),
	 * without blocking: poll's POLLOUT needs it when the credit window is
	 * larger than the transport.  Optional (NULL: as much as credits allow). */
	size_t (*send_room)(struct ssw_ep *ep);

	/* As send, for a message that carries no stream data (credits, window,
	 * rendezvous replies, FIN): a peer process that dies without reading
	 * such messages ends the connection in order, as TCP resets only when
	 * received data is left unread.  Optional (NULL: send, and any unread
	 * message means a reset). */
	int (*send_ctl)(struct ssw_ep *ep, const struct iovec *iov, int iovcnt);
	/* Zero-copy send and held messages (TCP_CORK, MSG_MORE, sendfile
	 * straight from the page cache).  Optional: all three or none.
	 *
	 *  - send_reserve: room for one message of up to `len` bytes (total <=
	 *    max_msg), written in place at *buf.  Same errors as send.  The
	 *    reservation lasts until send_commit or the next reserve/send on
	 *    this endpoint (then it is abandoned: nothing is sent).
	 *  - send_commit: send the reserved message, its first `len` bytes
	 *    (<= the reserved length).  hold == 0: as send (it and every held
	 *    message become visible, the peer is woken if it sleeps).  hold != 0:
	 *    the message is queued but held: the peer does not see it, until a
	 *    send, a commit without hold or a flush, or the endpoint's orderly
	 *    close (an abortive one drops it); at the latest SSW_HOLD_MS after
	 *    the first held message (the peer then takes them by itself: its
	 *    arm() bounds the sleep, and a peer asleep when the hold starts is
	 *    woken once for that).  0, or -EINVAL without a reservation.
	 *  - flush: make held messages visible; wakes the peer at most once. */
	int (*send_reserve)(struct ssw_ep *ep, size_t len, void **buf);
	int (*send_commit)(struct ssw_ep *ep, size_t len, int hold);
	void (*flush)(struct ssw_ep *ep);

	/* Bytes of the transport, as send_room counts them, that one message
	 * of `len` bytes takes (the message and the transport's own framing).
	 * The session's credits count stream bytes (SO_RCVBUF); this tells it
	 * whether a message fits send_room, and when a receiver has freed
	 * enough of the transport that a waiting sender must hear of it.
	 * Optional (NULL: len). */
	size_t (*msg_space)(struct ssw_ep *ep, size_t len);

	/* Memory like kernel TCP's: give back transport memory the endpoint
	 * holds beyond a small floor of its own choosing, once it idles.  Called
	 * from time to time by a housekeeping thread while any is held, under
	 * the session's exclusion (no send runs meanwhile), and with force at
	 * the end of the connection (nothing more is sent).  Without force the
	 * provider decides what idle means (e.g. nothing sent since the last
	 * call and everything sent read).  Returns 1 while memory beyond the
	 * floor may be left (call again later), 0 when not.  The provider
	 * asks for the calls with ssw_trim_note() (common/trim.h) when its
	 * memory grows past the floor.  Optional (NULL: nothing to give back). */
	int (*trim)(struct ssw_ep *ep, int force);

	/* Bytes of memory the endpoint's transport holds resident now (what
	 * `sockswitch stat` shows), -1 when not known; may cost a system call.
	 * Optional (NULL: not known). */
	int64_t (*resident)(struct ssw_ep *ep);
};

/* Longest a held message stays invisible (the kernel's TCP_CORK ceiling). */
#define SSW_HOLD_MS 200

/* Memory registration and one-sided transfers (seeds 002, 004). */
struct ssw_rdma_ops {
	size_t size;

	/* WSPRegisterMemory / WSPDeregisterMemory: local buffers. */
	int (*register_memory)(struct ssw_ep *ep, void *addr, size_t len, struct ssw_mr *mr);
	void (*deregister_memory)(struct ssw_ep *ep, struct ssw_mr *mr);

	/* WSPRegisterRdmaMemory: expose [addr, addr+len) to the peer for
	 * `access` (SSW_CAP_RDMA_READ and/or SSW_CAP_RDMA_WRITE) and describe it
	 * in *desc.  WSPDeregisterRdmaMemory: afterwards the peer's copy of the
	 * descriptor must be refused.  -ENOBUFS when it cannot register. */
	int (*register_rdma_memory)(struct ssw_ep *ep, void *addr, size_t len, uint32_t access,
				    struct ssw_rdma_desc *desc);
	void (*deregister_rdma_memory)(struct ssw_ep *ep, const struct ssw_rdma_desc *desc);

	/* WSPRdmaRead: copy `len` bytes at `offset` of the peer's registration
	 * `desc` into the local iovec.  WSPRdmaWrite: the other way.
	 * Return 0 when complete, -EINPROGRESS when the completion will be
	 * reported later by poll_cq with `ctx` (completions in any order),
	 * -EINVAL for a descriptor/offset/length that does not validate, -EFAULT
	 * for a bad local buffer, -EPERM when the transport refuses one-sided
	 * access (the session then copies through messages), -ECONNRESET. */
	int (*rdma_read)(struct ssw_ep *ep, const struct iovec *local, int iovcnt,
			 const struct ssw_rdma_desc *desc, uint64_t offset, size_t len, void *ctx);
	int (*rdma_write)(struct ssw_ep *ep, const struct iovec *local, int iovcnt,
			  const struct ssw_rdma_desc *desc, uint64_t offset, size_t len, void *ctx);
};

/* One completion of a deferred rdma_read / rdma_write. */
struct ssw_completion {
	void *ctx;
	int status; /* 0 or a negative errno */
};

/* Progress and sleeping. */
struct ssw_progress_ops {
	size_t size;

	/* Reap up to n deferred completions; returns how many.  Any thread may
	 * reap any transfer's completion (the session matches ctx).  A transfer
	 * owns its local buffer until its completion is reaped: an endpoint
	 * that fails completes what is pending with an error status (nothing
	 * stays pending for ever), and close() cancels what is pending (no
	 * completion is reported and no local buffer is touched after it). */
	int (*poll_cq)(struct ssw_ep *ep, struct ssw_completion *c, int n);

	/* Lock-free hint for busy-polling: nonzero when a message beyond the one
	 * currently peeked has arrived or the peer's state changed.  May be
	 * called while another thread uses the endpoint. */
	int (*rx_ready)(struct ssw_ep *ep);

	/* Declare that the caller is about to sleep until a message arrives.
	 * Returns 0 when armed (safe to sleep on the wait fds: any later send by
	 * the peer wakes them), -EAGAIN when something already arrived (do not
	 * sleep).  The provider clears the arm when the caller wakes.  > 0:
	 * armed, but the peer holds messages (send_commit) that become ours
	 * without a wake-up in at most this many ms: sleep no longer. */
	int (*arm)(struct ssw_ep *ep);

	/* Fill up to n pollfds to sleep on (events set by the provider).
	 * Returns how many.  A pollfd reporting HUP/ERR means the peer may be
	 * gone: call recv_peek to learn. */
	int (*wait_fds)(struct ssw_ep *ep, struct pollfd *pfd, int n);

	/* Every descriptor the endpoint's transport needs in this process (its
	 * wait fds among them): up to max into fds, returns how many.  For a
	 * process that keeps one connection and closes all other descriptors
	 * (the switch's relay, forked before an exec), and those ep_export
	 * would name (a relay may give the connection away to the process
	 * its application's end was sent to).  Optional (NULL: the wait fds
	 * are all). */
	int (*keep_fds)(struct ssw_ep *ep, int *fds, int max);

	/* After waking: clear wake-up state (drain eventfds, disarm). */
	void (*wake_ack)(struct ssw_ep *ep);

	/* After waking, when another thread or process still sleeps on this
	 * endpoint: disarm, but leave the wake-up (doorbell) pending, since it
	 * may be the only one the other sleeper gets.  Optional (NULL: the
	 * switch calls wake_ack). */
	void (*wake_leave)(struct ssw_ep *ep);

	/* After arm() returned 0, for a caller that is the only one asleep on
	 * this endpoint: sleep until the peer's wake-up (taken, as wake_ack
	 * would), its hang-up, a signal, or ms milliseconds (ms > 0), in one
	 * system call where the transport allows (a wake-up should cost no more
	 * than kernel TCP's own blocking recv).  Returns 1 woken (or the peer's
	 * state changed), 0 timed out, -EINTR; disarmed in every case.
	 * -ENOSYS when it cannot serve this endpoint (then nothing was done:
	 * sleep on wait_fds).  Optional (NULL: the same as -ENOSYS). */
	int (*sleep)(struct ssw_ep *ep, int ms);

	/* What the peer announced, readable without consuming messages (poll
	 * must report a FIN or a reset queued behind unread data, as TCP does).
	 * Returns SSW_PEER_* bits; *marks (may be NULL) gets the number of
	 * SSW_NOTE_MARK the peer sent so far.  probe != 0 allows one system call
	 * to find a peer that died without a word.  Optional (NULL: messages
	 * only). */
	uint32_t (*peer_state)(struct ssw_ep *ep, int probe, uint32_t *marks);

	/* Signals beside the message stream, each visible to the peer's
	 * peer_state / peer_tag without consuming messages.  The provider gives
	 * them no meaning (the session uses marks for urgent data and the tag
	 * for its F_SETOWN owner: SIGURG is the session's business):
	 *  SSW_NOTE_FIN   no more messages follow (after those already sent);
	 *  SSW_NOTE_MARK  the peer's mark count goes up by one, after the
	 *                 messages already sent; the peer is woken if it sleeps;
	 *  SSW_NOTE_TAG   `arg` becomes what the peer's peer_tag() returns (the
	 *                 latest wins); wakes nobody, not ordered with messages;
	 *  SSW_NOTE_UNREAD `arg` != 0: this side took stream data out of the
	 *                 transport that its application has not read yet; 0:
	 *                 none.  Should this process die without a close, the
	 *                 peer sees a reset (SSW_PEER_RESET), not an orderly
	 *                 end, as kernel TCP resets a connection whose owner
	 *                 dies with unread data.  Wakes nobody.
	 * `arg` is 0 but for SSW_NOTE_TAG.  Optional (NULL: no marks, no tag). */
	void (*note)(struct ssw_ep *ep, uint32_t what, int32_t arg);

	/* The peer's latest SSW_NOTE_TAG (0 before any), readable at once by any
	 * thread or process holding the endpoint, without waiting for the peer
	 * to run: the sender of urgent data needs the receiver's word at the
	 * moment it sends, since nothing runs at the receiver to act on the
	 * arrival.  The peer's word: untrusted.  Optional (NULL: none). */
	int32_t (*peer_tag)(struct ssw_ep *ep);

	/* The CPU the peer last ran on, when the peer shares this host's CPUs
	 * (-1 otherwise, or not known): a hint for the wait policy, since a
	 * waiter whose peer runs on the waiter's own CPU cannot see it answer
	 * by busy-polling, only by handing the CPU over.  Lock-free, any
	 * thread.  The peer's word, used as a hint only (a wrong value costs
	 * speed, nothing else).  Optional (NULL: not known). */
	int (*peer_cpu)(struct ssw_ep *ep);

	/* When the peer sent its latest wake-up (ssw_now_ns()'s clock,
	 * CLOCK_MONOTONIC; 0: not known), where the peer shares this host's
	 * clock.  A waiter that slept learns how long the event itself took,
	 * without the wake-up's own latency (45-90 us on a loaded host): had
	 * it spun that long, would it have caught it?  Lock-free, any thread;
	 * the peer's word, a hint only.  Optional (NULL: not known). */
	uint64_t (*wake_sent_ns)(struct ssw_ep *ep);

	/* Is a thread of the peer asleep waiting for our messages (it armed
	 * and has not woken since)?  1 asleep, 0 not (running, or runnable:
	 * it will see our next message without a wake-up), -1 not known.  A
	 * hint for the wait policy: a sender whose receiver stays awake on
	 * another CPU holds its own CPU for as long as the two keep answering
	 * each other, and must let it go now and then when others want it.
	 * Lock-free, any thread; the peer's word, a hint only.  Optional
	 * (NULL: not known). */
	int (*peer_asleep)(struct ssw_ep *ep);
};

enum { SSW_CLOSE_ORDERLY = 0, SSW_CLOSE_ABORT = 1, SSW_CLOSE_DETACH = 2 };
enum { SSW_PEER_FIN = 1u, SSW_PEER_CLOSED = 2u, SSW_PEER_RESET = 4u };
enum { SSW_NOTE_FIN = 1u, SSW_NOTE_MARK = 2u, SSW_NOTE_TAG = 3u, SSW_NOTE_UNREAD = 4u };

/* A provider: what one folder under src/providers exports (one symbol). */
struct ssw_provider {
	uint32_t spi_version;  /* SSW_SPI_VERSION */
	const char *name;      /* "shm", "fabric": the name routes use */
	uint32_t caps;         /* enum ssw_cap the provider can offer */
	/* Called once before any other op; 0 or -errno (provider unusable). */
	int (*init)(void);
	const struct ssw_conn_ops *conn;
	const struct ssw_msg_ops *msg;
	const struct ssw_rdma_ops *rdma;
	const struct ssw_progress_ops *progress;
	/* A route option for this provider ("route 10.0.0.0/8 fabric
	 * provider=tcp": key "provider", value "tcp"), given before init.
	 * 0, or -EINVAL with a message in err naming the problem (the
	 * configuration is then refused with file and line).  Optional (NULL:
	 * the provider takes no options). */
	int (*configure)(const char *key, const char *value, char *err, size_t errlen);
	/* One line for `sockswitch stat` / `doctor`: what serves the
	 * connections (e.g. "fabric (libfabric tcp)").  Optional (NULL: name). */
	const char *(*describe)(void);
	/* The provider's own library changed one of its epoll sets: an
	 * epoll_ctl made inside ssw_provider_calls (below) that succeeded,
	 * reported by the interposition after the kernel's (libfabric's tcp
	 * provider tells which socket is whose that way).  Any thread; must not
	 * block.  Optional (NULL: not wanted). */
	void (*own_epoll_ctl)(int epfd, int op, int fd, const struct epoll_event *ev);
	/* The process ends without its exit handlers (the switch's relay
	 * process ends with exit_group, past the application's handlers it
	 * inherited): wait, bounded, for what its closes handed over to leave,
	 * as the provider's exit handler would (a kernel socket's buffer
	 * outlives its process; a provider's queue in process memory does
	 * not).  Optional (NULL: nothing outlives a close). */
	void (*quiesce)(void);
};

/* ---- What the switch's interposition does for a provider ------------------
 *
 * The switch interposes the socket API of the whole process, the provider's
 * own libraries included.  A provider that calls into a library which uses
 * sockets itself (libfabric) raises ssw_provider_calls on the calling
 * thread around those calls (and its own threads while they run that
 * library): inside, the interposed calls go straight to the C library —
 * sockets are plain kernel sockets, made close-on-exec (a program exec'd
 * without fork must not keep the provider's listening port open), IPv6 ones
 * v6-only (a fabric listener holds the port for the family its application
 * listener holds: the switch makes an IPv4 one beside a dual-stack one),
 * connect, accept, close and friends are the kernel's; the socketpairs made
 * there are remembered (ssw_provfd_partner), and epoll_ctl calls are
 * reported to own_epoll_ctl. */
extern __thread int ssw_provider_calls;
/* The other end of a socketpair the provider's library made (inside
 * ssw_provider_calls), -1 if none is known (descriptors from 65536 up are
 * not followed): a process keeping one connection's transport after
 * closing all else (a relay) keeps both ends. */
int ssw_provfd_partner(int fd);

#ifdef __cplusplus
}
#endif
#endif
