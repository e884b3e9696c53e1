/* fab_priv.h — private structures of the fabric provider (libfabric FI_EP_MSG endpoints). */
#ifndef SSW_FAB_PRIV_H
#define SSW_FAB_PRIV_H

#include <sockswitch/provider.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define FAB_API FI_VERSION(1, 17)

/* Messages: a provider header then up to FAB_MSG_MAX bytes of the session's.
 * Each side pre-posts FAB_RX_N receive buffers; a sender spends one credit
 * per message and learns of reposted buffers from the `credits` field of
 * whatever the peer sends (a bare FAB_T_CREDIT when it has nothing else to
 * say), so that nothing is ever sent into no buffer (verbs needs this: an
 * RC send without a posted receive is an RNR error). */
/* 64 KiB of stream and the session's header in one message: an
 * application's 64 KiB write is one message, not one and a sliver
 * (bench --netns, 64 KiB stream: 1.4-1.8 -> 2.0-2.1 GB/s) */
#define FAB_MSG_MAX ((64u << 10) + 512u)
#define FAB_RX_N 16u
#define FAB_TX_N 32u
#define FAB_LINGER_NS (10000ull * 1000000ull) /* longest a closed connection waits for its peer */
#define FAB_EXIT_NS (5000ull * 1000000ull) /* longest an exit waits for what was sent to leave */
#define FAB_IDLE_NS 200000ull /* the thread flushes a backlog its owner left this long */
#define FAB_WATCH_NS 200000ull /* how often the thread looks at watched endpoints */
#define FAB_TX_KEEP 2u /* tx slots data leaves for a credit return and the close */
/* Credits kept back: data leaves two, a credit return one, so that a
 * credit return and the close or reset always find a buffer. */
#define FAB_DATA_RESERVE 2u
#define FAB_CREDIT_RESERVE 1u
/* Return credits once this many buffers were reposted unannounced. */
#define FAB_CREDIT_BATCH (FAB_RX_N / 4u)

/* HELLO: the switch's private data, first message of a connection whose
 * request could not carry it (verbs over RDMA CM: 56 bytes) */
/* PACK: session messages that waited for the peer's credits, several in
 * one buffer (fab_pack.h): a sender ahead of its reader fills the peer's
 * buffers, not one buffer a message */
enum { FAB_T_DATA = 1, FAB_T_CREDIT = 2, FAB_T_CLOSE = 3, FAB_T_RESET = 4, FAB_T_HELLO = 5, FAB_T_PACK = 6 };

#define FAB_HDR_MAGIC 0x4653u /* "SF" */
struct fab_hdr {
	uint16_t magic;
	uint8_t type;
	uint8_t pad;
	uint32_t credits; /* receive buffers reposted since the last report */
};
#define FAB_BUF_SIZE (sizeof(struct fab_hdr) + FAB_MSG_MAX)

/* Connection request private data: our header, then the switch's data.
 * The magic is also the wire's version: a peer that does not know it
 * rejects the request, and the connector goes to kernel TCP (version 2:
 * FAB_T_PACK, which a version 1 peer would take for corrupt input). */
/* The magic names the switch's protocol version (provider.h listen: 2 is
 * "SSF2", the library before versions; 3 "SSF3"): a listener rejects
 * another version's request, and the connector goes to kernel TCP. */
#define FAB_CM_MAGIC(proto) (0x53534630u + (uint32_t)(proto))     /* "SSF<v>": the data follows in the request */
#define FAB_CM_MAGIC_MSG(proto) (0x53534830u + (uint32_t)(proto)) /* "SSH<v>": it follows as the first message (FAB_T_HELLO) */
struct fab_cm_hdr {
	uint32_t magic;
	uint32_t len; /* bytes of the switch's private data that follow */
};

/* The remote descriptor of a registration (inside ssw_rdma_desc.data). */
#define FAB_RDESC_MAGIC 0x46524431u
struct fab_rdesc {
	uint32_t magic;
	uint32_t id;    /* index of the registration at its owner */
	uint64_t base;  /* address to use in fi_read/fi_write at offset 0 */
	uint64_t len;
	uint64_t key;
	uint64_t check; /* fab_rdesc_check(): catches a corrupted or forged-by-accident descriptor */
};

/* What a completion's op_context points to.  Endpoints share completion
 * queues (fab_hub.c): whoever reads one hands each completion to the
 * endpoint it names, in its inbox (the fields after ep, under the hub's
 * lock), where its owner takes it. */
enum { FAB_CTX_RX = 1, FAB_CTX_TX = 2, FAB_CTX_RMA = 3 };
struct fab_ctx {
	int kind;
	int idx; /* RX/TX: buffer slot */
	struct ssw_ep *ep;
	struct fab_ctx *inext;
	uint32_t ilen;
	int ierr;
};

struct fab_rma_op {
	struct fab_ctx c;       /* first: the completion context */
	struct fab_rma_op *next;      /* the done list */
	struct fab_rma_op *all_next;  /* every op of the endpoint not yet freed */
	void *ctx;              /* the caller's */
	int pending;            /* libfabric operations not yet completed */
	int status;
	int nmr;
	struct ssw_reg *mr[8];  /* local registrations it uses (FI_MR_LOCAL), from the domain's cache */
	bool sync;              /* ctx == NULL: the caller waits for it */
	bool done;
	bool kept;              /* failed before libfabric finished with it: freed at close */
};

/* One exposure to the peer (register_rdma_memory): a registration with
 * remote access and a key of its own, closed at deregistration. */
struct fab_reg {
	struct fid_mr *mr;      /* NULL: free slot */
	uint64_t check;
	struct ssw_reg *pin;    /* the domain cache's registration holding its pages, or NULL */
	void *shadow;           /* SOCKSWITCH_FAULT=pin: what the pinned pages held, exposed instead */
};

struct ssw_reg;
struct fab_mrc;

/* One libfabric fabric, shared by the endpoints of this process that use
 * it, with the event queue all of them report to (fab_eq.c). */
struct fab_fabric {
	char name[128];
	struct fid_fabric *fabric;
	pthread_mutex_t eqmu;      /* reading eq, and closing an endpoint bound to it */
	struct fid_eq *eq;         /* opened with the first endpoint */
	int eq_fd;                 /* its wait fd (an epoll set, tcp) */
	int eq_sig;                /* the read end of its signal in eq_fd's set (tcp), or -1 */
	bool eq_sig_byte;          /* fork: the signal held its byte (fab_eq_atfork_prepare) */
	struct fab_fabric *next;
};

/* Up to FAB_HUB_EPS endpoints of one domain on one completion queue
 * (fab_hub.c).  The struct lives until exit (the provider's thread may
 * name it in an event); its libfabric objects go with its last endpoint. */
#define FAB_HUB_EPS 16u
struct fab_hub {
	pthread_mutex_t mu;        /* reading cq, the inboxes of its endpoints, its member list */
	struct fab_fabric *fab;
	char dom_name[64];
	struct fid_domain *domain; /* the process's domain (shared hubs), or the hub's own */
	struct fab_mrc *mrc;       /* the domain's registration cache */
	bool own_domain;
	bool shared;               /* endpoints wait on their own sockets (tcp 1.17), cap > 1 */
	struct fid_cq *cq;         /* NULL: closed */
	int cq_fd;                 /* its wait fd: an epoll set of the members' sockets (tcp) */
	void *cq_sig;              /* the CQ's own signal in cq_fd's set (learn_cq_signal), or NULL */
	int sig_fd;                /* that signal's fd, taken out of cq_fd's set, or -1 */
	unsigned cap, nep;
	/* the last reading that left the queue empty (ssw_now_ns), and whose:
	 * every member's socket was read then (fab_msg.c: quiet) */
	_Atomic uint64_t quiet_ns;
	struct ssw_ep *_Atomic quiet_by;
	int hello_wait;            /* pending accepted endpoints awaiting their first message (fab_listen.c) */
	struct ssw_ep *eps;        /* members, through hnext */
	/* members closed while the queue stays open, kept (not freed), newest
	 * first through hnext: the provider may still report their receives
	 * cancelled, naming contexts inside them (CI's ASan saw one freed);
	 * their contexts name no endpoint now.  Freed with the queue, or the
	 * oldest once FAB_HUB_GONE are kept. */
	struct ssw_ep *gone;
	unsigned ngone;
	struct fab_hub *next;
};
#define FAB_HUB_GONE 32u

struct ssw_ep {
	pthread_mutex_t mu;
	pid_t pid;                 /* the process that made it */
	struct fi_info *info;
	struct fab_fabric *fab;
	/* The domain, event queue and completion queue are shared with other
	 * endpoints of this process (fab_hub.c, fab_eq.c): a connection's own
	 * descriptors are its socket (tcp) and wake_fd. */
	struct fab_hub *hub;
	struct ssw_ep *hnext;      /* the hub's members */
	struct fid_domain *domain; /* hub->domain */
	struct fab_mrc *mrc;       /* that domain's registration cache (fab_mrc.c), held */
	struct fid_ep *ep;
	/* tcp 1.17: the endpoint's socket, learnt from libfabric's own
	 * epoll_ctl on the hub's set (fab_hub.c: fab_hub_epoll_note), -1
	 * before; what its waiters sleep on for its data */
	_Atomic int sock_fd;
	/* libfabric waits for that socket to take more (its POLLOUT interest
	 * in the hub's set): waiters must wake when it can */
	_Atomic bool want_out;
	/* the process whose provider thread watches that socket for room
	 * (fab_hub.c: watch_room), 0 before; wanted since the first send
	 * libfabric may not finish at once */
	_Atomic pid_t room_watch;
	_Atomic bool room_wanted;
	/* The process whose hub set holds the socket: after a fork, neither
	 * process progresses an endpoint through its hub until it uses it
	 * itself (fab_hub.c: fab_hub_claim), 0 meanwhile */
	pid_t live;
	/* completions another reader of the hub took for us, in order (under
	 * hub->mu); in_n of them, in_news that a waiter may need */
	struct fab_ctx *in_head, *in_tail;
	_Atomic unsigned in_n, in_news;
	/* the shared event queue's reader found these for us (fab_eq.c) */
	_Atomic unsigned eqev;     /* FAB_EV_* */
	unsigned ev_seen;          /* every FAB_EV_* dispatched so far (under fab->eqmu) */
	int eqerr;                 /* the first error event's error (positive, libfabric's) */
	bool eqerr_conn;           /* it came after the connection was established */
	/* Waiters between a successful arm and their wake_ack: while there are
	 * any, whoever reads news for this endpoint rings wake_fd (fab_ring),
	 * since its socket no longer shows what another reader took */
	_Atomic int armed;
	bool comp_news;            /* the CQ reading under way took something a waiter may need */
	_Atomic uint64_t quiet_ns; /* the last reading of the CQ that left it empty (ssw_now_ns), 0: taken */
	_Atomic unsigned tx_out;   /* sends posted with a completion still to come */
	bool mr_local, virt_addr, prov_key, mr_endpoint;

	uint8_t *rxbuf, *txbuf;    /* FAB_RX_N / FAB_TX_N slots of FAB_BUF_SIZE */
	struct fid_mr *rx_mr, *tx_mr;
	struct fab_ctx rxc[FAB_RX_N], txc[FAB_TX_N];
	uint32_t rx_len[FAB_RX_N];
	/* a PACK: offset in the payload of its next record, and records left */
	uint32_t rx_off[FAB_RX_N], rx_left[FAB_RX_N];
	bool rx_pack[FAB_RX_N];
	/* completed receives in order: ring of slot numbers */
	uint32_t rxq[FAB_RX_N];
	unsigned rxq_head, rxq_n;
	_Atomic bool peeked;
	_Atomic unsigned rx_avail; /* session messages in rxq (records of packs count each), for rx_ready */
	uint32_t tx_free[FAB_TX_N];
	unsigned ntx_free;
	/* the backlog: tx slots holding data the peer has no buffer for yet */
	uint32_t bl[FAB_TX_N], bl_len[FAB_TX_N];
	unsigned bl_head, bl_n;
	/* TCP_CORK, MSG_MORE (the SPI's send_commit with hold): the backlog
	 * stays unsent until a send, a commit without hold, a flush or an
	 * orderly close, at the latest SSW_HOLD_MS after hold_ns (when the
	 * first held message came; 0: nothing held) */
	uint64_t hold_ns;
	/* send_reserve's tx slot, until send_commit (a message written in
	 * place); rsv_pack: room was left for a pack's record length */
	bool rsv, rsv_pack;
	size_t rsv_len;      /* the reservation's length: a commit may not pass it */
	uint32_t rsv_slot;
	int wake_fd;               /* eventfd: the provider's thread moved something for us */
	_Atomic bool woken;        /* set by the thread after it wrote wake_fd */
	bool watched;              /* on the thread's list (fab_watch) of process watch_pid */
	pid_t watch_pid;
	uint64_t ncomp;            /* completions read so far */
	_Atomic uint64_t app_ns;   /* last op of the owner (ssw_now_ns) */
	struct ssw_ep *wnext;

	uint32_t credits;          /* the peer's buffers we may still fill */
	uint32_t unreported;       /* our reposted buffers the peer has not been told of */
	/* what the peer's buffers we filled and it has not credited back
	 * hold, in order: stream data, or only control (send_ctl, credits):
	 * a peer that dies with data unread is a reset, as in kernel TCP */
	uint8_t tx_data[FAB_TX_N];
	uint8_t sent_data[FAB_RX_N];
	unsigned sent_head, sent_n;
	bool sending_ctl;          /* fab_send_ctl: this message carries no stream data */

	/* connection state */
	bool connected;            /* FI_CONNECTED seen */
	int conn_err;              /* connect failed: the error for connect_complete */
	_Atomic int peer_closed;   /* FAB_T_CLOSE, or the connection ended without a reset */
	_Atomic int peer_reset;    /* FAB_T_RESET */
	_Atomic int broken;        /* a libfabric error: -ECONNRESET from now on */
	bool shutdown_seen;        /* FI_SHUTDOWN on the EQ */
	uint64_t conn_deadline;    /* connector: give up (kernel TCP) after this (ssw_now_ns) */
	bool lingering;            /* closed by its owner, the thread finishes it (fab_ep_linger) */
	bool close_sent;
	uint64_t linger_end;

	/* RMA */
	struct fab_rma_op *done_head, *done_tail; /* completed asynchronous ops for poll_cq */
	struct fab_rma_op *all;    /* every op not yet reaped */
	struct fab_reg *regs;
	uint32_t nregs;
	uint32_t nexposed;         /* registrations the peer may use now */

	/* the switch's private data: the connector's to send in a HELLO, the
	 * acceptor's as received */
	uint8_t priv[SSW_CONNECT_PRIV_MAX];
	size_t priv_len;
	bool connector;            /* made by connect: its waiter sleeps on wake_fd until connected */
	int conn_fd;               /* connector until connected: an epoll set of wake_fd and the event queue's fd, or -1 */
	bool hello_out;            /* connector: HELLO still to send once connected */
	bool hello_wait;           /* acceptor: HELLO still to come (not accepted before) */
	struct ssw_ep *qnext;      /* listener queues */
	struct ssw_listener *owner;
};

struct ssw_listener {
	pid_t pid;
	uint32_t proto;            /* the protocol version its requests must speak */
	struct fab_fabric *fab;
	struct fi_info *info;
	struct fid_pep *pep;
	struct fid_eq *eq;
	int eq_fd;
	int efd;                   /* eventfd: readable while `ready` holds one */
	struct ssw_ep *pending;    /* accepted, waiting for FI_CONNECTED */
	struct ssw_ep *ready, *ready_tail;
	struct ssw_listener *next;
};

/* fab_dl.c: the few libfabric functions that are not inline, loaded on first use */
/* Loads libfabric once: 0, or -ENODEV with why set to one phrase
 * ("cannot load libfabric.so.1 (...)"); says nothing. */
int fab_dl_open(const char **why);
/* fab_dl_open for the provider's own use: the failure is logged, once. */
int fab_dl_load(void);
int fab_getinfo(uint32_t v, const char *node, const char *service, uint64_t flags, const struct fi_info *hints,
		struct fi_info **info);
void fab_freeinfo(struct fi_info *info);
struct fi_info *fab_allocinfo(void);
int fab_open_fabric(struct fi_fabric_attr *attr, struct fid_fabric **f);
const char *fab_strerror(int e);
uint32_t fab_version(void); /* the loaded library's (fi_version), 0 if unknown */

/* fab_init.c: settings and shared objects */
extern char fab_prov_name[32];
extern int fab_port_offset;
extern long fab_cm_data_max; /* cm-data=N: at most N bytes in a connection request (-1: the provider's) */
/* Every libfabric call happens between gate_enter and gate_leave (a read
 * lock): fork's prepare handler takes it for writing, so that a child never
 * inherits a libfabric lock held by a thread it does not have. */
void fab_gate_enter(void);
void fab_gate_leave(void);
/* The port the peer's fabric listener for app port `port` uses, or -1. */
int fab_map_port(int port);
/* Its inverse: the application port whose fabric port is `port`. */
int fab_unmap_port(int port);
struct fi_info *fab_hints(void);
int fab_fabric_get(struct fi_info *info, struct fab_fabric **out);
/* fi_dupinfo (fab_dl.c) */
struct fi_info *fab_dupinfo(const struct fi_info *info);
int fab_errno(int fi_err); /* a libfabric error as a negative errno */

/* fab_ep.c: endpoint life */
int fab_ep_open(struct fi_info *info, struct fab_fabric *fab, struct ssw_ep **out);
/* how: SSW_CLOSE_*, or FAB_CLOSE_FINAL (the end of a linger: nothing more
 * to send, the thread's list already left) */
#define FAB_CLOSE_FINAL 99
/* The descriptor its waiters sleep on for data (its socket, or the hub's
 * wait fd when the hub is its alone), or -1. */
int fab_data_fd(const struct ssw_ep *ep);
void fab_ep_destroy(struct ssw_ep *ep, int how);
/* fab_ep_destroy's end, after fab_hub_close_ep returned `left`: the
 * endpoint's own objects go, then the struct (fab_hub_let_go). */
void fab_ep_release(struct ssw_ep *ep, struct fab_hub *left);
bool fab_ep_linger(struct ssw_ep *ep);
bool fab_linger_step(struct ssw_ep *ep);
void fab_ep_lock(struct ssw_ep *ep);
void fab_ep_unlock(struct ssw_ep *ep);
bool fab_ep_trylock(struct ssw_ep *ep);
/* Read the EQ and the CQ (called with the endpoint locked). */
void fab_progress(struct ssw_ep *ep);
void fab_progress_cq(struct ssw_ep *ep);
/* As fab_progress_cq, for an arm's last look: news for this endpoint
 * rings only another waiter (the caller learns of it by itself). */
void fab_progress_cq_quiet(struct ssw_ep *ep);
void fab_progress_end(struct ssw_ep *ep);
/* Wake the endpoint's armed waiters (wake_fd), if it has any. */
void fab_ring(struct ssw_ep *ep);
/* Wake whoever waits on wake_fd, armed or not (a connect's completion). */
void fab_kick(struct ssw_ep *ep);
bool fab_read_eq(struct ssw_ep *ep);
int fab_post_recv(struct ssw_ep *ep, uint32_t slot);
int fab_send_locked(struct ssw_ep *ep, int type, const struct iovec *iov, int iovcnt);
void fab_flush_backlog(struct ssw_ep *ep);
/* The SPI's send_reserve / send_commit / flush (called locked): a DATA
 * message written in place in a tx slot; held (hold) it joins the backlog
 * and stays there (fab_flush_backlog) until released. */
int fab_reserve_locked(struct ssw_ep *ep, size_t len, void **buf);
int fab_commit_locked(struct ssw_ep *ep, size_t len, bool hold);
/* Held messages leave now (a send, a flush, an orderly close). */
void fab_unhold_locked(struct ssw_ep *ep);
/* An unfinished reservation is given back (a send, a close). */
void fab_unreserve_locked(struct ssw_ep *ep);

/* fab_hub.c: shared domains and completion queues */
/* Put the endpoint on a hub for `info` (sets ep->hub, ep->domain). */
int fab_hub_join(struct ssw_ep *ep, struct fi_info *info, struct fab_fabric *fab);
/* Close the endpoint's libfabric endpoint and leave its hub: what the hub
 * still holds for it is dropped, its contexts name no endpoint.  detach:
 * another process keeps the connection (fork).  Called inside the gate,
 * unlocked.  Returns the hub it left (NULL: none), for fab_hub_let_go. */
struct fab_hub *fab_hub_close_ep(struct ssw_ep *ep, bool detach);
/* The struct of an endpoint closed by fab_hub_close_ep, its own teardown
 * done: kept by the hub while its queue may still name its contexts
 * (fab_hub.gone), else freed.  Last: a kept one may be freed by another
 * thread's close at any time after. */
void fab_hub_let_go(struct fab_hub *h, struct ssw_ep *ep);
/* Read the endpoint's hub (locked endpoint): every completion to its
 * endpoint's inbox, armed endpoints rung; returns this endpoint's inbox
 * (oldest first) and whether the queue was left empty. */
struct fab_ctx *fab_hub_read(struct ssw_ep *ep, bool quiet_self, bool *drained);
/* The provider's thread: read a hub for its members (an event named it). */
void fab_hub_service(struct fab_hub *h);
/* The provider's thread, woken by nothing: hubs with output libfabric still holds read again. */
void fab_hub_sweep(void);
/* Have this process's thread watch the endpoint's socket for room from
 * now on (a send libfabric may not finish at once; locked endpoint). */
void fab_hub_watch_room(struct ssw_ep *ep);
/* This process drives the endpoint from now on (after a fork): its socket
 * back in this process's hub set.  Called with the endpoint locked. */
void fab_hub_claim(struct ssw_ep *ep);
/* Is the endpoint progressed through its hub in this process? */
bool fab_hub_live(const struct ssw_ep *ep);
/* The interposed epoll_ctl reports libfabric's own calls (common/provfds.h). */
void fab_hub_epoll_note(int epfd, int op, int fd, const struct epoll_event *ev);
void fab_hub_atfork_prepare(void);
void fab_hub_atfork_child(void);
/* A random 64-bit memory key for a domain several peers share: one peer
 * must not guess another's (fab_rdma.c). */
uint64_t fab_random_key(void);

/* fab_eq.c: the fabric's shared event queue */
enum { FAB_EV_CONNECTED = 1u, FAB_EV_SHUTDOWN = 2u, FAB_EV_ERR = 4u };
int fab_eq_open(struct fab_fabric *fab);
/* Read the queue and hand each event to its endpoint (any thread; skipped
 * while another reads it).  Returns whether it read anything. */
bool fab_eq_poll(struct fab_fabric *fab);
/* Take the endpoint's events into its state (locked endpoint); true when
 * there were any. */
bool fab_eq_fold(struct ssw_ep *ep);
/* Every fabric with an event queue, for the thread and fork. */
void fab_eq_each(void (*fn)(struct fab_fabric *fab, void *arg), void *arg);
void fab_eq_atfork_prepare(void);
void fab_eq_atfork_child(void);
/* fab_ep.c, fab_conn.c: their locks held across fork (fab_init.c) */
void fab_ep_atfork_prepare(void);
void fab_ep_atfork_parent(void);
void fab_ep_atfork_child(void);
void fab_conn_atfork_prepare(void);
void fab_conn_atfork_parent(void);
void fab_conn_atfork_child(void);
/* libfabric 1.17's tcp provider (the tricks of fab_hub.c and fab_eq.c) */
bool fab_is_tcp117(void);

/* fab_fork.c: an epoll set's members as /proc/self/fdinfo lists them (up to
 * max; how many) */
struct fab_member {
	int fd;
	uint32_t events;
	uint64_t data;
};
int fab_epoll_members(int epfd, struct fab_member *out, int max);
/* fab_fork.c: make the epoll sets reachable from this wait fd ours alone */
void fab_unshare_fds(int fd);
/* Does the peer hold stream data of ours it has not credited back (fab_ep.c)? */
bool fab_data_uncredited(const struct ssw_ep *ep);
/* SPI keep_fds (fab_fork.c). */
int fab_keep_fds(struct ssw_ep *ep, int *fds, int max);

/* fab_listen.c: listeners and the accept thread */
int fab_listen(const struct sockaddr *addr, socklen_t addrlen, int backlog, uint32_t proto, struct ssw_listener **out);
int fab_listener_fd(struct ssw_listener *l);
int fab_listener_name(struct ssw_listener *l, struct sockaddr_storage *addr, socklen_t *len);
int fab_listener_ready(struct ssw_listener *l);
int fab_accept(struct ssw_listener *l, struct ssw_ep **ep, void *priv, size_t *priv_len);
void fab_listener_close(struct ssw_listener *l);
void fab_listen_atfork_child(void);
/* Have the provider's thread progress this endpoint while its owner is
 * away, until it has no backlog and no memory exposed to the peer (called
 * with the endpoint locked); fab_unwatch before freeing it. */
void fab_watch(struct ssw_ep *ep);
void fab_unwatch(struct ssw_ep *ep);
/* Hand a closed endpoint to the thread (fab_ep_linger): 0, or -errno (then
 * the caller destroys it itself). */
int fab_linger(struct ssw_ep *ep);
/* Wait (FAB_EXIT_NS at most) for the lingering endpoints' backlogs and
 * closes to leave: at exit, and for a process that ends without its exit
 * handlers (the provider's quiesce). */
void fab_quiesce(void);
/* The thread of this process, started if need be (not with lmu held). */
int fab_thread_ensure(void);
/* Have the thread sleep on fd too (a fabric's event queue). */
void fab_thread_add_fd(int fd);
/* Have the thread serve hub h whenever socket fd, which a write found
 * full, has room again (fab_hub.c: watch_room): 0, or -1 when this process
 * has no thread yet. */
int fab_thread_watch_out(int fd, struct fab_hub *h);
void fab_thread_unwatch_out(int fd);
/* ... or when hub h's set shows anything (its members await a first
 * message: fab_listen.c), on = false to stop. */
void fab_thread_watch_hub(struct fab_hub *h, bool on);

/* fab_conn.c */
extern const struct ssw_conn_ops fab_conn_ops;

/* fab_msg.c */
extern const struct ssw_msg_ops fab_msg_ops;
extern const struct ssw_progress_ops fab_progress_ops;

/* fab_mrc.c: a domain's registration cache (what is cached and what is
 * not: there) */
struct fab_mrc *fab_mrc_new(struct fid_domain *domain, bool prov_key);
/* An endpoint starts / stops using it (its last: everything is flushed). */
void fab_mrc_hold(struct fab_mrc *m);
void fab_mrc_release(struct fab_mrc *m);
/* The domain closes: flushed first; freed once no endpoint holds it. */
void fab_mrc_domain_closing(struct fab_mrc *m);
/* Registrations stay cached (the hooks are there and the setting wants it). */
bool fab_mrc_caching(const struct fab_mrc *m);
/* SOCKSWITCH_FAULT=pin: registrations pin pages as RDMA hardware does. */
bool fab_mrc_pinning(const struct fab_mrc *m);
/* A registration for local access covering [addr, addr+len), in use until put. */
int fab_mrc_get(struct fab_mrc *m, void *addr, size_t len, struct ssw_reg **out);
void fab_mrc_put(struct fab_mrc *m, struct ssw_reg *r);
struct fid_mr *fab_mrc_mr(const struct ssw_reg *r);
/* SOCKSWITCH_FAULT=pin: what the pages r pinned hold at addr. */
int fab_mrc_pin_read(const struct ssw_reg *r, const void *addr, void *dst, size_t len);

/* fab_rdma.c */
extern const struct ssw_rdma_ops fab_rdma_ops;
/* A descriptor's integrity check (not a secret: the key is what guards it). */
uint64_t fab_rdesc_check(const struct fab_rdesc *d);
void fab_rma_complete(struct ssw_ep *ep, struct fab_rma_op *op, int status);
void fab_rma_release(struct ssw_ep *ep);
void fab_rma_free(struct ssw_ep *ep, struct fab_rma_op *op);
void fab_rma_fail_all(struct ssw_ep *ep);


#endif
