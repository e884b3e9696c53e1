/* wire.h — the session protocol's messages (seeds 003/004): a 16-byte header,
 * optionally followed by an inline payload.  Parsing is separate from use so it
 * can be unit-tested and fuzzed: everything here comes from the peer. */
#ifndef SSW_WIRE_H
#define SSW_WIRE_H

#include <sockswitch/provider.h>
#include "session/session.h"
#include <stddef.h>
#include <stdint.h>

/* The newest protocol version (session.h SSW_PROTO_MAX); 3: vouched
 * descriptors and SINK refusals, 2: credits and windows count stream bytes
 * (1 counted shm ring bytes) */
#define SSW_WIRE_VERSION SSW_PROTO_MAX

enum ssw_msg_type {
	SSW_MSG_INIT = 1,       /* first message each way: window, capabilities, pid */
	SSW_MSG_DATA = 2,       /* inline stream bytes (consume credits) */
	SSW_MSG_OOB = 3,        /* the urgent byte (MSG_OOB); consumes credits */
	SSW_MSG_FIN = 4,        /* shutdown(SHUT_WR): end of stream */
	SSW_MSG_CREDIT = 5,     /* credits only */
	SSW_MSG_RNDV_READ = 6,  /* large send: read this descriptor, then RNDV_DONE */
	SSW_MSG_RNDV_DONE = 7,  /* receiver finished reading (or could not: status) */
	SSW_MSG_WRITE_REQ = 8,  /* large send, peer cannot read: ask for sinks */
	SSW_MSG_SINK = 9,       /* receiver: write into this descriptor */
	SSW_MSG_WRITE_DONE = 10,/* sender: wrote n bytes into the sink (or failed) */
	SSW_MSG_WINDOW = 11,    /* receiver's window changed (SO_RCVBUF) */
	/* Control of a connection moving between processes that share it
	 * (session_swap.c); only to a peer whose INIT said SSW_INIT_SWAP */
	SSW_MSG_SUSPEND = 12,   /* stop sending: another process of ours takes over */
	SSW_MSG_SUSPENDED = 13, /* answer: nothing more from me until RESUME */
	SSW_MSG_RESUME = 14,    /* from the new controller: go on */
	/* A transport in process memory (fabric) moves with control
	 * (session_move.c); only to a peer whose INIT said SSW_INIT_MOVE */
	SSW_MSG_MOVED = 15,     /* the last message of this transport: the next comes to your offer */
	SSW_MSG_MAX_ = 16
};

/* Header flags.  ACK_NOW (DATA only): return this message's credits as soon
 * as it is read, not in a batch: the sender may have less in flight than
 * the receiver's batch (a small SO_SNDBUF) and would wait for ever. */
enum { SSW_WIRE_F_ACK_NOW = 1u };

struct ssw_wire_hdr {
	uint8_t type;
	uint8_t flags;
	uint16_t reserved;
	uint32_t len;      /* payload bytes after the header */
	uint32_t credits;  /* stream bytes the sender of this message has consumed since its last */
	uint32_t seq;      /* per-direction message number */
};

struct ssw_wire_init {
	uint32_t version;
	uint32_t window;   /* credit bytes the peer may have outstanding */
	uint32_t caps;     /* SSW_CAP_* this side can serve as the target of, and SSW_INIT_* */
	int32_t pid;
};
/* In an acceptor's INIT caps: it had to check the connector's address
 * (another user), and a listening proof would let it do so in O(1)
 * (switch/proof.c): the connector makes one for its next connects here.
 * A peer that does not know it ignores it. */
#define SSW_INIT_ASK_PROOF (1u << 31)
/* In either INIT's caps: this side answers SUSPEND and RESUME (a control
 * swap, session_swap.c).  An older peer neither sends nor expects them. */
#define SSW_INIT_SWAP (1u << 30)
/* ... and takes a new transport for the connection from its peer's next
 * controller (MOVED, the offer in SUSPENDED: session_move.c). */
#define SSW_INIT_MOVE (1u << 29)

/* SUSPENDED's payload from a side whose transport can move: where the
 * peer's next controller connects (the provider's address of a listener
 * there), and the token it must present.  No payload: it cannot. */
#define SSW_MOVE_TOKEN 16
#define SSW_MOVE_LANES 3
struct ssw_wire_offer {
	uint8_t token[SSW_MOVE_TOKEN];
	uint32_t addrlen;
	uint8_t addr[28];  /* struct sockaddr_in or sockaddr_in6 */
	/* the transports of earlier controllers it keeps (their tokens): a
	 * process whose own is among them goes on with it, no connect */
	uint32_t nkept;
	uint8_t kept[SSW_MOVE_LANES][SSW_MOVE_TOKEN];
};

struct ssw_wire_rndv {     /* RNDV_READ and SINK */
	uint64_t id;
	uint64_t len;
	struct ssw_rdma_desc desc;
};

struct ssw_wire_done {     /* RNDV_DONE, WRITE_REQ (len = total), WRITE_DONE */
	uint64_t id;
	uint64_t len;
	int32_t status;
	uint32_t pad;
};

struct ssw_wire_window {
	uint32_t window;
};

/* A parsed, validated message: header copied out of shared memory. */
struct ssw_msg {
	struct ssw_wire_hdr h;
	const uint8_t *payload; /* still in shared memory: copy before trusting */
	union {
		struct ssw_wire_init init;
		struct ssw_wire_rndv rndv;
		struct ssw_wire_done done;
		struct ssw_wire_window window;
		struct ssw_wire_offer offer;
		uint8_t oob;
	} u;                    /* fixed-size payloads, copied and checked */
};

/* Parse a message of `len` bytes.  Returns 0, or -1 when it is malformed
 * (unknown type, wrong length for its type, bad descriptor size, wrong
 * sequence number when expect_seq is given). */
int ssw_wire_parse(const void *buf, size_t len, uint32_t expect_seq, struct ssw_msg *out);

/* Fill a header. */
static inline void ssw_wire_hdr_set(struct ssw_wire_hdr *h, uint8_t type, uint32_t len, uint32_t credits, uint32_t seq)
{
	h->type = type;
	h->flags = 0;
	h->reserved = 0;
	h->len = len;
	h->credits = credits;
	h->seq = seq;
}

#endif
