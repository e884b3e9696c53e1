/* test_wire.c — session wire format: header layout, parsing of every message
 * type, rejection of malformed input (type, length, flags, reserved, sequence,
 * fixed payloads). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "providers/shm/shm_priv.h"
#include "session/wire.h"

extern const struct ssw_provider ssw_provider_shm;

/* The header is part of the protocol between two processes that may run
 * different builds: its layout must not drift. */
_Static_assert(sizeof(struct ssw_wire_hdr) == 16, "wire header is 16 bytes");
_Static_assert(offsetof(struct ssw_wire_hdr, len) == 4, "len at 4");
_Static_assert(offsetof(struct ssw_wire_hdr, credits) == 8, "credits at 8");
_Static_assert(offsetof(struct ssw_wire_hdr, seq) == 12, "seq at 12");

/* Build header + payload into buf; returns the total length. */
static size_t build(uint8_t *buf, uint8_t type, const void *pl, size_t plen, uint32_t credits, uint32_t seq)
{
	struct ssw_wire_hdr h;
	ssw_wire_hdr_set(&h, type, (uint32_t)plen, credits, seq);
	memcpy(buf, &h, sizeof h);
	if (plen)
		memcpy(buf + sizeof h, pl, plen);
	return sizeof h + plen;
}

static void test_hdr_set(void **state)
{
	(void)state;
	struct ssw_wire_hdr h;
	memset(&h, 0xa5, sizeof h);
	ssw_wire_hdr_set(&h, SSW_MSG_CREDIT, 7, 1234, 99);
	assert_int_equal(h.type, SSW_MSG_CREDIT);
	assert_int_equal(h.flags, 0);    /* no garbage from the stack goes on the wire */
	assert_int_equal(h.reserved, 0);
	assert_int_equal(h.len, 7);
	assert_int_equal(h.credits, 1234);
	assert_int_equal(h.seq, 99);
}

static void test_parse_every_type(void **state)
{
	(void)state;
	uint8_t buf[256];
	struct ssw_msg m;
	size_t n;

	struct ssw_wire_init in = { SSW_WIRE_VERSION, 65536, SSW_CAP_RDMA_READ, 4242 };
	n = build(buf, SSW_MSG_INIT, &in, sizeof in, 0, 5);
	assert_int_equal(ssw_wire_parse(buf, n, 5, &m), 0);
	assert_int_equal(m.h.type, SSW_MSG_INIT);
	assert_int_equal(m.u.init.window, 65536);
	assert_int_equal(m.u.init.caps, SSW_CAP_RDMA_READ);
	assert_int_equal(m.u.init.pid, 4242);

	n = build(buf, SSW_MSG_DATA, "hello", 5, 300, 6);
	assert_int_equal(ssw_wire_parse(buf, n, 6, &m), 0);
	assert_int_equal(m.h.len, 5);
	assert_int_equal(m.h.credits, 300);
	assert_ptr_equal(m.payload, buf + 16); /* payload points into the buffer */
	assert_memory_equal(m.payload, "hello", 5);

	n = build(buf, SSW_MSG_OOB, "!", 1, 0, 7);
	assert_int_equal(ssw_wire_parse(buf, n, 7, &m), 0);
	assert_int_equal(m.u.oob, '!');

	n = build(buf, SSW_MSG_FIN, NULL, 0, 0, 8);
	assert_int_equal(ssw_wire_parse(buf, n, 8, &m), 0);
	assert_int_equal(m.h.type, SSW_MSG_FIN);

	n = build(buf, SSW_MSG_CREDIT, NULL, 0, 4096, 9);
	assert_int_equal(ssw_wire_parse(buf, n, 9, &m), 0);
	assert_int_equal(m.h.credits, 4096);

	struct ssw_wire_rndv r;
	memset(&r, 0, sizeof r);
	r.id = 77;
	r.len = 1 << 20;
	r.desc.len = 32;
	memset(r.desc.data, 0x5a, 32);
	n = build(buf, SSW_MSG_RNDV_READ, &r, sizeof r, 0, 10);
	assert_int_equal(ssw_wire_parse(buf, n, 10, &m), 0);
	assert_int_equal(m.u.rndv.id, 77);
	assert_int_equal(m.u.rndv.len, 1 << 20);
	assert_int_equal(m.u.rndv.desc.len, 32);
	assert_int_equal(m.u.rndv.desc.data[31], 0x5a);
	n = build(buf, SSW_MSG_SINK, &r, sizeof r, 0, 11);
	assert_int_equal(ssw_wire_parse(buf, n, 11, &m), 0);
	assert_int_equal(m.h.type, SSW_MSG_SINK);

	struct ssw_wire_done d = { .id = 3, .len = 100, .status = 0 };
	const uint8_t done_types[] = { SSW_MSG_RNDV_DONE, SSW_MSG_WRITE_REQ, SSW_MSG_WRITE_DONE };
	for (unsigned i = 0; i < sizeof done_types; i++) {
		n = build(buf, done_types[i], &d, sizeof d, 0, 12 + i);
		assert_int_equal(ssw_wire_parse(buf, n, 12 + i, &m), 0);
		assert_int_equal(m.h.type, done_types[i]);
		assert_int_equal(m.u.done.id, 3);
		assert_int_equal(m.u.done.len, 100);
	}
	d.status = -EPERM; /* a failed rendezvous is reported, not malformed */
	n = build(buf, SSW_MSG_RNDV_DONE, &d, sizeof d, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), 0);
	assert_int_equal(m.u.done.status, -EPERM);

	struct ssw_wire_window w = { 8192 };
	n = build(buf, SSW_MSG_WINDOW, &w, sizeof w, 0, 20);
	assert_int_equal(ssw_wire_parse(buf, n, 20, &m), 0);
	assert_int_equal(m.u.window.window, 8192);
}

/* The fixed parts are copied out of (shared) memory: later changes to the
 * buffer by the peer must not change what was validated. */
static void test_fixed_payload_copied(void **state)
{
	(void)state;
	uint8_t buf[256];
	struct ssw_msg m;
	struct ssw_wire_rndv r = { .id = 1, .len = 10, .desc = { .len = 8 } };
	size_t n = build(buf, SSW_MSG_RNDV_READ, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), 0);
	memset(buf, 0xff, n);
	assert_int_equal(m.h.type, SSW_MSG_RNDV_READ);
	assert_int_equal(m.u.rndv.desc.len, 8);
	assert_int_equal(m.u.rndv.len, 10);
}

static void test_reject_header(void **state)
{
	(void)state;
	uint8_t buf[256];
	struct ssw_msg m;
	size_t n;

	/* shorter than a header */
	n = build(buf, SSW_MSG_CREDIT, NULL, 0, 0, 0);
	for (size_t k = 0; k < n; k++)
		assert_int_equal(ssw_wire_parse(buf, k, 0, &m), -1);

	/* unknown types */
	const uint8_t bad_types[] = { 0, SSW_MSG_MAX_, SSW_MSG_MAX_ + 1, 100, 255 };
	for (unsigned i = 0; i < sizeof bad_types; i++) {
		n = build(buf, bad_types[i], NULL, 0, 0, 0);
		assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
		n = build(buf, bad_types[i], "x", 1, 0, 0);
		assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	}

	/* header length disagrees with the message length, both ways */
	n = build(buf, SSW_MSG_DATA, "abcd", 4, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n - 1, 0, &m), -1);
	assert_int_equal(ssw_wire_parse(buf, n + 1, 0, &m), -1);
	struct ssw_wire_hdr h;
	memcpy(&h, buf, sizeof h);
	h.len = UINT32_MAX; /* would wrap a careless len + 16 */
	memcpy(buf, &h, sizeof h);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);

	/* wrong sequence number: a lost or replayed message */
	n = build(buf, SSW_MSG_DATA, "abcd", 4, 0, 41);
	assert_int_equal(ssw_wire_parse(buf, n, 41, &m), 0);
	assert_int_equal(ssw_wire_parse(buf, n, 42, &m), -1);
	assert_int_equal(ssw_wire_parse(buf, n, 40, &m), -1);

	/* reserved bits and undefined flags (ACK_NOW: on DATA only), so a peer
	 * setting them speaks a protocol we do not */
	n = build(buf, SSW_MSG_DATA, "abcd", 4, 0, 0);
	memcpy(&h, buf, sizeof h);
	h.reserved = 1;
	memcpy(buf, &h, sizeof h);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	for (unsigned f = 1; f < 256; f <<= 1) {
		n = build(buf, SSW_MSG_DATA, "abcd", 4, 0, 0);
		buf[offsetof(struct ssw_wire_hdr, flags)] = (uint8_t)f;
		assert_int_equal(ssw_wire_parse(buf, n, 0, &m), f == SSW_WIRE_F_ACK_NOW ? 0 : -1);
		n = build(buf, SSW_MSG_CREDIT, NULL, 0, 0, 0);
		buf[offsetof(struct ssw_wire_hdr, flags)] = (uint8_t)f;
		assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	}
}

static void test_reject_payloads(void **state)
{
	(void)state;
	uint8_t buf[512], zero[256] = { 0 };
	struct ssw_msg m;
	size_t n;

	/* empty DATA is never sent: zero-length sends send nothing */
	n = build(buf, SSW_MSG_DATA, NULL, 0, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	/* OOB carries exactly one byte */
	n = build(buf, SSW_MSG_OOB, NULL, 0, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	n = build(buf, SSW_MSG_OOB, "ab", 2, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	/* FIN and CREDIT carry nothing */
	n = build(buf, SSW_MSG_FIN, "a", 1, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	n = build(buf, SSW_MSG_CREDIT, "a", 1, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);

	/* fixed-size payloads: one byte short or long is malformed */
	const struct { uint8_t type; size_t size; } fx[] = {
		{ SSW_MSG_INIT, sizeof(struct ssw_wire_init) },
		{ SSW_MSG_RNDV_READ, sizeof(struct ssw_wire_rndv) },
		{ SSW_MSG_SINK, sizeof(struct ssw_wire_rndv) },
		{ SSW_MSG_RNDV_DONE, sizeof(struct ssw_wire_done) },
		{ SSW_MSG_WRITE_REQ, sizeof(struct ssw_wire_done) },
		{ SSW_MSG_WRITE_DONE, sizeof(struct ssw_wire_done) },
		{ SSW_MSG_WINDOW, sizeof(struct ssw_wire_window) },
	};
	for (unsigned i = 0; i < sizeof fx / sizeof fx[0]; i++) {
		n = build(buf, fx[i].type, zero, fx[i].size - 1, 0, 0);
		assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
		n = build(buf, fx[i].type, zero, fx[i].size + 1, 0, 0);
		assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
		n = build(buf, fx[i].type, zero, 0, 0, 0);
		assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	}

	/* INIT of another protocol version */
	struct ssw_wire_init in = { SSW_WIRE_VERSION + 1, 65536, 0, 1 };
	n = build(buf, SSW_MSG_INIT, &in, sizeof in, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);

	/* rendezvous: descriptor longer than its array, or nothing to move */
	struct ssw_wire_rndv r = { .id = 1, .len = 100, .desc = { .len = SSW_RDMA_DESC_MAX } };
	n = build(buf, SSW_MSG_RNDV_READ, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), 0);
	r.desc.len = SSW_RDMA_DESC_MAX + 1;
	n = build(buf, SSW_MSG_RNDV_READ, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	r.desc.len = UINT32_MAX;
	n = build(buf, SSW_MSG_SINK, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	r.desc.len = 8;
	r.len = 0;
	n = build(buf, SSW_MSG_SINK, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	n = build(buf, SSW_MSG_RNDV_READ, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	/* ... but a sink of nothing with no descriptor is a refusal (a
	 * receiver whose rendezvous is off) */
	r.desc.len = 0;
	n = build(buf, SSW_MSG_SINK, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), 0);
	n = build(buf, SSW_MSG_RNDV_READ, &r, sizeof r, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);

	/* a write rendezvous of zero bytes (found by fuzz_session_rx: the
	 * session went on to offer a zero-length sink, itself malformed) */
	struct ssw_wire_done wr = { .id = 1, .len = 0 };
	n = build(buf, SSW_MSG_WRITE_REQ, &wr, sizeof wr, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	wr.len = 1;
	n = build(buf, SSW_MSG_WRITE_REQ, &wr, sizeof wr, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), 0);

	/* a status is 0 or a negative errno */
	struct ssw_wire_done d = { .id = 1, .len = 1, .status = 1 };
	n = build(buf, SSW_MSG_WRITE_DONE, &d, sizeof d, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
	d.status = INT32_MAX;
	n = build(buf, SSW_MSG_RNDV_DONE, &d, sizeof d, 0, 0);
	assert_int_equal(ssw_wire_parse(buf, n, 0, &m), -1);
}

/* The session compares messages with send_room through the provider's
 * msg_space: it must be what a message really takes in the shm ring (send
 * messages through a real ring and measure the tail). */
static void test_msg_space_matches_ring(void **state)
{
	(void)state;
	struct ssw_ep *a, *b;
	assert_int_equal(ssw_shm_pair(SHM_RING_MIN, &a, &b), 0);
	uint8_t payload[600];
	memset(payload, 'p', sizeof payload);
	int wraps = 0;
	for (int round = 0; round < 4; round++) {
		for (size_t n = 0; n < sizeof payload; n += 37) {
			struct ssw_wire_hdr h;
			ssw_wire_hdr_set(&h, SSW_MSG_DATA, (uint32_t)n, 0, 0);
			struct iovec v[2] = { { &h, sizeof h }, { payload, n } };
			uint64_t tail0 = atomic_load(&a->tx.ctl->tail);
			int rc = shm_ring_send(a, v, 2);
			if (rc == -EAGAIN) { /* full: the consumer drains, then it fits */
				const void *msg;
				size_t len;
				while (shm_ring_peek(b, &msg, &len) == 0)
					shm_ring_done(b);
				rc = shm_ring_send(a, v, 2);
			}
			assert_int_equal(rc, 0);
			/* a message that does not fit before the end of the ring is
			 * preceded by a PAD record: that part is not the message's cost */
			uint64_t off = tail0 & (SHM_RING_MIN - 1), fp = ssw_provider_shm.msg->msg_space(a, sizeof h + n);
			uint64_t pad = off + fp > SHM_RING_MIN ? SHM_RING_MIN - off : 0;
			wraps += pad != 0;
			assert_int_equal(atomic_load(&a->tx.ctl->tail) - tail0, fp + pad);
		}
	}
	assert_true(wraps > 0); /* the loop did cross the end of the ring */
	ssw_provider_shm.conn->close(a, 0);
	ssw_provider_shm.conn->close(b, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hdr_set),
		cmocka_unit_test(test_parse_every_type),
		cmocka_unit_test(test_fixed_payload_copied),
		cmocka_unit_test(test_reject_header),
		cmocka_unit_test(test_reject_payloads),
		cmocka_unit_test(test_msg_space_matches_ring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
