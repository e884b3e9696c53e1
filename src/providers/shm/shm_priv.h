/* shm_priv.h — private structures of the shared-memory provider. */
#ifndef SSW_SHM_PRIV_H
#define SSW_SHM_PRIV_H

#include <sockswitch/provider.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/trim.h"

/* seals older headers may lack (the kernel's values) */
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#ifndef F_SEAL_EXEC
#define F_SEAL_EXEC 0x0020
#endif

#define SHM_MAGIC 0x4d575353u /* "SSWM" */
#define SHM_VERSION 1
#define SHM_DATA_OFF 4096u
#define SHM_RING_MIN (16u << 10)
#define SHM_RING_MAX (64u << 20)
#define SHM_REC_HDR 8u
#define SHM_PAGE 4096u
/* What a transmit ring keeps when its connection idles (shm_ring_trim):
 * its first pages, where traffic that never fills the ring stays (a ring
 * rewinds to its start whenever the consumer has read everything: a
 * ping-pong of messages up to a few KiB never leaves them).  Pages past it
 * are given back once the ring has been drained and unused for a while. */
#define SHM_RING_FLOOR (2u * SHM_PAGE)

/* One direction of a connection.  Each index lives on its own cache line so
 * producer and consumer never write the same line (no false sharing). */
struct shm_ring_ctl {
	_Alignas(64) _Atomic uint64_t tail;   /* bytes produced (producer writes) */
	/* held messages (send_commit with hold): records written up to `held`,
	 * not yet published in `tail`; the consumer takes them itself once
	 * SSW_HOLD_MS have passed since held_ns (CLOCK_MONOTONIC) */
	_Atomic uint64_t held;
	_Atomic uint64_t held_ns;
	_Atomic int32_t cpu;                  /* 1 + the CPU the producer last published from (0: not yet; a hint: peer_cpu) */
	/* the producer rewound here (it found the ring empty): a consumer that
	 * stands at this index, with records published or held past the next
	 * lap's start, goes on there (shm_ring.c) */
	_Atomic uint64_t skip;
	_Alignas(64) _Atomic uint64_t head;   /* bytes consumed (consumer writes) */
	/* the consumer's SSW_NOTE_UNREAD: stream data taken out of this ring
	 * that its application has not read (its death is then a reset:
	 * shm_gone_state).  In the head's line, whose padding an older
	 * switch leaves zero: no feature word needed. */
	_Atomic uint32_t unread;
	_Alignas(64) _Atomic uint32_t armed;  /* consumer threads (about to go) asleep: a count */
	_Atomic uint32_t rung;                /* producer rang since the consumer last woke */
	_Atomic uint64_t rang_ns;             /* when the producer last rang (a hint: wake_sent_ns) */
	/* written by the producer only, beside the records (see peer_state) */
	_Atomic uint32_t closed;              /* SHM_CLOSED_* */
	_Atomic uint32_t fin;                 /* no more data follows */
	_Atomic uint32_t urg;                 /* marks sent (SSW_NOTE_MARK) */
	_Atomic int32_t tag;                  /* producer's SSW_NOTE_TAG (peer_tag) */
};

enum { SHM_OPEN = 0, SHM_CLOSED_ORDERLY = 1, SHM_CLOSED_RESET = 2 };

/* Start of every segment; written by the connector, read (validated) by the acceptor. */
struct shm_seg_hdr {
	uint32_t magic;
	uint32_t version;
	uint64_t ring_size;
	uint64_t seg_size;
	struct shm_ring_ctl ring[2]; /* [0] connector->acceptor, [1] acceptor->connector */
	/* written by the acceptor's last holder as its last touch of the
	 * segment: the connector may recycle it (shm_seg.c) */
	_Atomic uint32_t released;
	/* what each side's switch understands (SHM_FEAT_*): [0] written by
	 * the connector with the header, [1] by the acceptor when it maps the
	 * segment.  A producer uses a feature once its consumer has said so:
	 * a switch that predates a field never sees it used (it leaves its
	 * word 0, the fields past its own header being zero). */
	_Atomic uint32_t feat[2];
	/* the connector's count of this segment's connections (SHM_FEAT_EPOCH):
	 * one more at each recycle, so that an acceptor that saw epoch E can
	 * tell the segment still carries that connection (shm_lend.c) */
	_Atomic uint32_t epoch;
};
#define SHM_FEAT_SKIP 1u /* the consumer follows the producer's rewinds (ctl->skip) */
/* feat[0] only: the connector keeps this segment's memfd to recycle it, so
 * the acceptor's mapping of it is worth keeping (shm_seg.c) */
#define SHM_FEAT_KEEP 2u
/* feat[0] only: the connector counts recycles in `epoch` */
#define SHM_FEAT_EPOCH 4u

/* A ring record: header then payload, padded to 8 bytes. */
/* CTL: a message without stream data (its loss at the peer's death is no reset) */
enum { SHM_REC_MSG = 1, SHM_REC_PAD = 2, SHM_REC_CTL = 3 };
struct shm_rec {
	uint32_t len;
	uint32_t kind;
};

/* The view of one ring from one side.  Indices are kept privately; the shared
 * copies are published for the other side and re-read only to learn its progress. */
struct shm_ring {
	struct shm_ring_ctl *ctl;
	uint8_t *data;
	uint64_t size;     /* private copy, validated at attach */
	uint64_t pos;      /* tail (producer) or head (consumer), private */
	uint64_t other;    /* last value seen of the other side's index */
	uint64_t cur;      /* consumer: bytes of the record being peeked, 0 if none */
	uint64_t pub;      /* producer: tail last published (pos - pub: held or reserved) */
	uint64_t resv;     /* producer: record bytes reserved by send_reserve, 0 if none */
	uint64_t taken;    /* consumer: end of held records taken before their publication */
	struct ssw_trim_clock idle; /* producer: how long pos has stood still (shm_ring_trim) */
	uint64_t skip;     /* producer: the last rewind's index (ctl->skip) */
	const _Atomic uint32_t *peer_feat; /* producer: the consumer's SHM_FEAT_* word (NULL: none) */
	bool can_skip;     /* producer: the consumer said SHM_FEAT_SKIP */
	bool rewind;       /* producer: the reserved record goes to the next lap's start */
	bool dirty;        /* producer: records went past SHM_RING_FLOOR since the last trim */
};

/* The consumer's view of the published tail: one that still lags behind
 * held records we took (their hold time ended) counts as where we are. */
static inline uint64_t shm_rx_tail(const struct shm_ring *r, uint64_t seen)
{
	uint64_t t = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
	return t < seen && seen <= __atomic_load_n(&r->taken, __ATOMIC_RELAXED) ? seen : t;
}

/* Handshake over the rendezvous socket (SOCK_SEQPACKET). */
enum { SHM_HS_HELLO = 1, SHM_HS_ACK = 2 }; /* ACK: only a refusal (status < 0) */
struct shm_hs {
	uint32_t magic;
	uint32_t type;
	uint64_t ring_size;
	int32_t status;       /* ACK: 0 or a negative errno */
	uint32_t priv_len;
	uint8_t priv[SSW_CONNECT_PRIV_MAX];
};

/* Who a connector's segment went to: the destination and the listening
 * process that answered its rendezvous (shm_seg.c). */
struct shm_seg_key {
	uint8_t addr[16];
	uint16_t port;    /* network order */
	uint16_t family;
	int32_t pid;
	uint32_t uid;
};

/* A rendezvous descriptor (shm_rdma.c): whose memory, where, and which
 * exposure of it: slot `slot` of the owner's exposure table, open while it
 * holds this generation (shm_vouch.c).  Deregistration closes the slot, so
 * the peer's copy of the descriptor is refused at once. */
#define SHM_DESC_MAGIC 0x32534d52u /* "RMS2" */
struct shm_desc {
	uint32_t magic;
	int32_t pid;
	uint64_t addr;
	uint64_t len;
	uint64_t gen;
	uint32_t slot;
	uint32_t access; /* SSW_CAP_RDMA_READ / _WRITE */
};

/* One exposure, as its owner publishes it in its own memory: the peer reads
 * it there (Cross Memory Attach) before every copy.  gen and gen2 bracket
 * the rest (both equal and nonzero: open and consistent). */
struct shm_expo {
	_Atomic uint64_t gen;
	uint64_t nonce;   /* the owner's, as its vouch says */
	uint64_t addr, len;
	uint32_t access, pad;
	_Atomic uint64_t gen2;
};
#define SHM_EXPO_SLOTS 4096u

/* A process's word, with the kernel's credentials beside it: its exposure
 * table is at `table` (nslots slots, each carrying `nonce`).  Sent once per
 * process and connection, before its first exposure (shm_vouch.c). */
#define SHM_VOUCH_MAGIC 0x32435556u /* "VUC2" */
struct shm_vouch {
	uint32_t magic;
	int32_t pid;
	uint32_t nslots;
	uint32_t pad;
	uint64_t table;
	uint64_t nonce;
};
#define SHM_VOUCHES 8  /* vouching processes remembered per connection (the newest) */
#define SHM_VOUCHERS 8 /* processes of our side that vouched on a connection */

struct ssw_ep {
	int ctl_fd;        /* rendezvous connection: stays open, HUP = peer gone; doorbell
			    * bytes both ways (1 byte each; anything longer is a refusal) */
	int seg_fd;        /* connector only: the memfd it handed over, kept to recycle it (shm_seg.c), or -1 */
	int map_fd;        /* acceptor only: the memfd it mapped, kept (hidden, within the descriptor
			    * budget) so that an exec can carry the connection (shm_handover.c), or -1 */
	int live_slot;     /* connector: where its process's live list has it (shm_seg.c), or -1 */
	struct shm_seg_key seg_key; /* connector: where that segment went */
	int my_efd;        /* eventfd doorbells instead (test rigs), else -1 */
	int peer_efd;
	void *seg;
	size_t seg_size;
	struct shm_ring tx, rx;
	int err;           /* sticky: 0, -EPIPE, -ECONNRESET */
	int peer_gone;     /* ctl_fd reported the peer's end closed */
	int gone_state;    /* after peer_gone: shm_gone_state's answer once known, else 0 */
	int ctl_blocking;  /* ctl_fd made blocking for shm_sleep (every other use says MSG_DONTWAIT) */
	int ctl_timeo_ms;  /* SO_RCVTIMEO set on ctl_fd, 0: none yet */
	pid_t peer_pid;    /* peer_pid, peer_uid, caps: read shm_peer_cred() first */
	uid_t peer_uid;
	uint32_t caps;
	_Atomic int cred_done;
	_Atomic int cred_ok;  /* peer_pid/peer_uid came from the kernel (SO_PEERCRED answered) */
	uint64_t seg_dev, seg_ino; /* acceptor: the segment's memfd (shm_seg_map_keep) */
	/* the peer's processes that vouched (shm_vouch.c), the newest SHM_VOUCHES */
	_Atomic uint32_t vouch_lock;
	uint32_t nvouch;
	struct shm_vouch vouched[SHM_VOUCHES];
	/* our processes that vouched on this connection (pids; 0: free) */
	_Atomic int32_t vouchers[SHM_VOUCHERS];
};

#define SHM_MAX_PENDING 1024

struct ssw_listener {
	int lfd;           /* abstract unix listening socket */
	int hb[2];         /* handback pair: requests sent on [1] reach any process on [0] */
	_Atomic int *handed; /* requests in the pair (fork-shared; a hint: see taken_back) */
	int epfd;          /* lfd + hb[0] + this process's pending requests (listener_fd) */
	pid_t epfd_pid;    /* epoll sets are shared across fork: one per process */
	pid_t owner;       /* the process that made this object (a forked child's is a copy) */
	pthread_mutex_t mu; /* pending[] (threads accepting at once) */
	int npending;
	int pending[SHM_MAX_PENDING]; /* requests this process took, HELLO not read yet */
};

extern int shm_cma_disabled; /* SOCKSWITCH_CMA=0: refuse one-sided access */
extern int shm_pin_mode;     /* SOCKSWITCH_FAULT=pin: read exposures backed by pinned pages (shm_rdma.c) */
/* SOCKSWITCH_FAULT=async (tests): rdma_read/rdma_write queue the copy and
 * return -EINPROGRESS; a later poll_cq of the endpoint does it and reports
 * it (the newest first while several are queued), as an RDMA provider would. */
extern int shm_rdma_async;
extern int shm_rdma_reordered; /* completions reported before an older one */
int shm_rdma_poll_cq(struct ssw_ep *ep, struct ssw_completion *c, int n);
/* Drop the endpoint's queued transfers unreported (close). */
void shm_rdma_cancel(struct ssw_ep *ep);
/* Transfers queued in this process (tests). */
int shm_rdma_queued(void);

/* shm_seal.c: the seals every segment carries before it is handed over (no
 * resizing by anyone, no seal changes) */
#define SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* A new memfd of `size` bytes, sealed: its fd, or -errno. */
int shm_seg_create(const char *name, uint64_t size);
/* A peer's memfd may be mapped for `want` bytes: 0, or -EPROTO (logged at info). */
int shm_seg_check(int fd, uint64_t want, struct stat *st);
/* The same, for a memfd whose fstat the caller has. */
int shm_seg_check_stat(int fd, uint64_t want, const struct stat *st);

/* shm_seg.c: the connector's segments (new, the spare, recycled) */
struct shm_seg {
	int memfd;
	void *p;
	uint64_t ring;
	int recycled;             /* from the cache: key.pid/uid say who had it */
	int nofork;               /* kept across a fork: marked MADV_DONTFORK (shm_seg.c) */
	struct shm_seg_key key;
};
uint64_t shm_ring_size_setting(void);
void shm_seg_key_dst(struct shm_seg_key *k, const struct sockaddr *dst);
/* A segment for a connection to dst: a released one that last went there,
 * the spare, or a new one.  0 or -errno. */
int shm_seg_get(struct shm_seg *g, const struct sockaddr *dst);
/* The rendezvous was answered by pid/uid: a recycled segment that went to
 * another process is put back and a new one made.  0 or -errno. */
int shm_seg_settle(struct shm_seg *g, int32_t pid, uint32_t uid);
/* Header written for the new connection (a recycled one's old state cleared). */
void shm_seg_prepare(struct shm_seg *g);
/* Not handed over after all: kept (spare or cache) or freed. */
void shm_seg_unused(struct shm_seg *g);
/* Handed over: the connection keeps the memfd (hidden) to recycle the
 * segment at its end (the newest connections do, as many as the
 * descriptor budget allows: shm_seg.c). */
void shm_seg_retain(struct shm_seg *g, struct ssw_ep *ep);
/* The connector's memfd, when it kept one: into the cache (recycle: its
 * last holder closes, the mapping goes too) or this process's copy closed. */
void shm_seg_release(struct ssw_ep *ep, bool recycle);
/* The acceptor's side: a mapping kept of the segment (device, inode) of
 * that size that the connector pid/uid sent before, or NULL. */
void *shm_seg_map_take(uint64_t dev, uint64_t ino, size_t size, int32_t pid, uint32_t uid);
/* The acceptor's last holder closes: its mapping is kept (ep->seg cleared). */
void shm_seg_map_keep(struct ssw_ep *ep);
/* A mapping kept as shm_seg_map_keep keeps one (marked MADV_DONTFORK
 * already), from what the caller recorded privately (shm_lend.c). */
void shm_seg_keep_mapping(void *p, size_t size, uint64_t dev, uint64_t ino, int32_t pid, uint32_t uid);
/* shm_lend.c: a fork-per-connection server's copies of its children's
 * segments, kept until they exit (see there). */
void shm_lend_accepted(struct ssw_ep *ep);
bool shm_lend_detach(struct ssw_ep *ep);
void shm_lend_forget(struct ssw_ep *ep);
void shm_lend_reap(void);
/* Segments in this process's cache, mappings kept (tests). */
void shm_seg_kept(int *segs, int *maps);
/* Kept mappings reachable through the lookup table: as many as are kept,
 * or -1 (a chain through a freed slot, or a loop) (tests). */
int shm_seg_maps_chained(void);
/* Memfds this process may keep for recycling now, live connections' and
 * cached segments' together (shm_seg.c; tests). */
int shm_seg_fd_budget(void);
/* An acceptor's memfd, mapped: kept as ep->map_fd (hidden) while a share
 * of that budget allows, else closed (ep->map_fd -1). */
void shm_seg_map_fd_keep(struct ssw_ep *ep, int memfd);
/* One more kept (an endpoint that came with its memfd across exec). */
void shm_seg_map_fd_adopt(void);
/* This process's copy of ep->map_fd closed (the number stays for the
 * processes that still hold ep after a fork). */
void shm_seg_map_fd_close(const struct ssw_ep *ep);
/* The connector's kept memfd as it stands now (a newer connection may shed
 * it): the fd, or -1. */
int shm_seg_fd_now(const struct ssw_ep *ep);

/* shm_ring.c */
int shm_ring_send(struct ssw_ep *ep, const struct iovec *iov, int iovcnt);
int shm_ring_send_ctl(struct ssw_ep *ep, const struct iovec *iov, int iovcnt);
int shm_ring_reserve(struct ssw_ep *ep, size_t len, void **buf);
int shm_ring_commit(struct ssw_ep *ep, size_t len, int hold);
void shm_ring_flush(struct ssw_ep *ep);
/* An abortive close: records still held (their hold not over) are never published. */
void shm_ring_drop_held(struct ssw_ep *ep);
int shm_ring_peek(struct ssw_ep *ep, const void **msg, size_t *len);
void shm_ring_done(struct ssw_ep *ep);
int shm_ring_arm(struct ssw_ep *ep);
size_t shm_ring_room(struct ssw_ep *ep);
/* Give back our transmit ring's pages past the floor (msg op trim; force:
 * the connection ends, nothing is sent any more). */
int shm_ring_trim(struct ssw_ep *ep, int force);
/* Bytes of the segment resident (msg op resident), -1 if unknown. */
int64_t shm_seg_resident(struct ssw_ep *ep);
void shm_ring_attach(struct ssw_ep *ep, struct shm_seg_hdr *h, uint64_t ring_size, int connector);
uint64_t shm_seg_size(uint64_t ring_size);
/* The connector writes the header of a new (zeroed) segment. */
void shm_seg_init(struct shm_seg_hdr *h, uint64_t ring_size);
void shm_wake_peer(struct ssw_ep *ep);
void shm_ring_bell(struct ssw_ep *ep);
int shm_gone_state(struct ssw_ep *ep);

/* shm_conn.c */
extern const struct ssw_conn_ops shm_conn_ops;
void shm_ep_free(struct ssw_ep *ep);   /* this process's view: fds, mappings */
/* Learn who the peer is (SO_PEERCRED) and what it allows, once: only large
 * sends (one-sided access) need it. */
void shm_peer_cred(struct ssw_ep *ep);
struct ssw_ep *shm_ep_alloc(void);     /* zeroed, fork-shared */

/* shm_rdma.c */
extern const struct ssw_rdma_ops shm_rdma_ops;

/* shm_vouch.c: the kernel's word on whose memory a descriptor opens */
struct msghdr;
/* SO_PASSCRED on a rendezvous socket (the listener's: accepted ones inherit it). */
void shm_vouch_passcred(int fd);
/* Vouch for this process's exposure table on the rendezvous connection,
 * unless it did on this connection already: 0 or -EPERM. */
int shm_vouch_send(struct ssw_ep *ep);
/* A vouch with these credentials, every time (the kernel refuses ones not
 * ours unless we are root: tests play a forger with it): 0 or -errno. */
struct ucred;
int shm_vouch_send_as(struct ssw_ep *ep, const struct ucred *cr);
/* Expose [addr, addr+len) of this process for access: a slot of its table
 * opened, and *d describing it.  0, or -ENOBUFS (every slot in use). */
int shm_expo_open(void *addr, size_t len, uint32_t access, struct shm_desc *d);
/* Close the exposure d names (ours): the peer's copy is refused from now on.
 * false when d names no open exposure of ours. */
bool shm_expo_close(const struct shm_desc *d);
/* Exposures open in this process (tests). */
unsigned shm_expo_open_count(void);
/* Is this rendezvous-connection record a vouch? */
bool shm_vouch_is(const void *rec, size_t n);
/* Keep a vouch read from the connection (mh: its credentials). */
void shm_vouch_record(struct ssw_ep *ep, const void *rec, size_t n, const struct msghdr *mh);
/* May we copy from (write: into) the peer's d: the process it names vouched
 * for its table, the slot there is open for exactly d with that access, and
 * that process's uids are ours now?  0 or -EPERM. */
int shm_vouch_check(struct ssw_ep *ep, const struct shm_desc *d, bool write);

/* shm_init.c: one record read from the rendezvous connection after the
 * handshake (n its length, 0 at hang-up; mh its credentials, or NULL). */
void shm_ctl_record(struct ssw_ep *ep, const void *rec, size_t n, const struct msghdr *mh);
/* Read and record one (recvmsg flags): its length, 0 at hang-up, or -1. */
ssize_t shm_ctl_take(struct ssw_ep *ep, int flags);

/* shm_handover.c: an endpoint carried into the image an exec starts
 * (provider.h ep_export): the description it writes */
#define SHM_HANDOVER_MAGIC 0x48455353u /* "SSEH" */
struct shm_handover_blob {
	uint32_t magic;
	uint32_t ep_size;  /* sizeof(struct ssw_ep): the same library on both sides */
	int32_t connector; /* which ring is ours to send on */
	uint32_t pad;
	struct ssw_ep ep;  /* numbers only are used (see import) */
};
int shm_ep_export(struct ssw_ep *ep, void *blob, size_t *blob_len, int *fds, int max);
int shm_ep_import(const void *blob, size_t blob_len, const int *fds, int n, struct ssw_ep **out);

/* shm_pair.c (test support): a connected pair without the rendezvous. */
int ssw_shm_pair(uint64_t ring_size, struct ssw_ep **a, struct ssw_ep **b);

#endif
