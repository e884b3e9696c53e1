/* fuzz_ring.c — libFuzzer target for the shm rings: the input is what a
 * hostile peer controls in shared memory (its index, our index as it sees it,
 * its held index and hold time, its rewind index, the closed flag, every byte of the ring; our own
 * sends rewind when its index says the ring is empty).  Consuming and producing must
 * stay inside the ring (ASan checks: the ring is a heap block of exactly its
 * size), end in a bounded number of steps, and report corruption as
 * -ECONNRESET, sticky. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sys.h"
#include "providers/shm/shm_priv.h"

#define RS SHM_RING_MIN

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

struct hdr {
	uint64_t pos;     /* consumer's private index */
	uint64_t tail;    /* producer's published index (raw or relative to pos) */
	uint64_t head;    /* consumer's published index, as the producer reads it */
	uint32_t closed;
	uint32_t flags;   /* bit0: tail raw, bit1: head raw, bit2: peer_gone, bit3: hold expired,
			   * bit4: held raw, bit5: our sends held, bit6: skip raw, 8..: send size */
	uint64_t held;    /* producer's held index (raw or relative to tail) */
	uint64_t skip;    /* producer's rewind index (bit6 of flags: raw; else ours, pos) */
};

static uint64_t get(const uint8_t **p, size_t *n, size_t want, void *out)
{
	memset(out, 0, want);
	size_t k = *n < want ? *n : want;
	memcpy(out, *p, k);
	*p += k;
	*n -= k;
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct shm_ring_ctl *ctl[2];
	static uint8_t *ring[2];
	if (!ctl[0]) {
		for (int i = 0; i < 2; i++) {
			ctl[i] = aligned_alloc(64, sizeof *ctl[i]);
			ring[i] = malloc(RS);
		}
	}
	struct hdr h;
	get(&data, &size, sizeof h, &h);
	memset(ctl[0], 0, sizeof *ctl[0]);
	memset(ctl[1], 0, sizeof *ctl[1]);
	/* the ring's bytes: the rest of the input, repeated (records anywhere) */
	for (size_t i = 0; i < RS; i++)
		ring[0][i] = size ? data[i % size] : 0;
	memset(ring[1], 0, RS);

	uint64_t pos = h.pos & ~7ull; /* our own index is always aligned */
	uint64_t tail = h.flags & 1 ? h.tail : pos + (h.tail % (2 * RS + 16));
	atomic_store(&ctl[0]->tail, tail);
	atomic_store(&ctl[0]->closed, h.closed % 4 == 3 ? h.closed : h.closed % 4);
	uint64_t held = h.flags & 16 ? h.held : tail + (h.held % (RS + 16));
	atomic_store(&ctl[0]->held, held);
	atomic_store(&ctl[0]->held_ns, h.flags & 8 ? 0 : ssw_now_ns());
	atomic_store(&ctl[0]->skip, h.flags & 64 ? h.skip : pos); /* at ours: a rewind to the next lap */
	uint64_t end = held > tail ? held : tail;

	/* c consumes ring 0 (the hostile side's output) and produces ring 1 */
	struct ssw_ep c;
	memset(&c, 0, sizeof c);
	c.ctl_fd = c.seg_fd = c.map_fd = c.my_efd = c.peer_efd = -1;
	c.peer_gone = !!(h.flags & 4);
	c.rx = (struct shm_ring){ .ctl = ctl[0], .data = ring[0], .size = RS, .pos = pos, .other = pos };
	uint64_t txpos = h.head & ~7ull;
	c.tx = (struct shm_ring){ .ctl = ctl[1], .data = ring[1], .size = RS, .pos = txpos, .other = txpos,
				  .can_skip = true };
	atomic_store(&ctl[1]->head, h.flags & 2 ? h.head : txpos - (h.tail % (RS + 16)));

	int err = 0;
	/* every successful peek consumes at least one 8-byte record: bounded
	 * (up to a ring's worth published, then a ring's worth held past it) */
	for (unsigned steps = 0; steps < 2 * RS / 8 + 4; steps++) {
		const void *m;
		size_t len;
		int rc = shm_ring_peek(&c, &m, &len);
		if (rc < 0) {
			CHECK(rc == -EAGAIN || rc == -EPIPE || rc == -ECONNRESET);
			err = rc;
			break;
		}
		const uint8_t *b = m;
		CHECK(b >= ring[0] + SHM_REC_HDR && len <= RS && b + len <= ring[0] + RS);
		volatile uint8_t sum = 0;
		for (size_t i = 0; i < len; i++) /* the payload is readable in full */
			sum += b[i];
		(void)sum;
		shm_ring_done(&c);
		CHECK(c.rx.pos <= end); /* never consumed past what was published (or held) */
	}
	CHECK(err != 0); /* the ring always ends: empty, closed or corrupt */
	if (err == -ECONNRESET || err == -EPIPE) {
		const void *m;
		size_t len;
		CHECK(shm_ring_peek(&c, &m, &len) == err); /* sticky */
	}

	/* the producer side: our writes, driven by the hostile head */
	uint8_t payload[RS / 4];
	memset(payload, 0x5a, sizeof payload);
	size_t want = (h.flags >> 8) % (sizeof payload + 16);
	struct iovec v = { payload, want < sizeof payload ? want : sizeof payload };
	c.err = 0;
	for (int i = 0; i < 8; i++) {
		int rc;
		if (h.flags & 32) { /* in place, held */
			void *buf;
			rc = shm_ring_reserve(&c, v.iov_len, &buf);
			if (rc == 0) {
				memset(buf, 0x5a, v.iov_len);
				rc = shm_ring_commit(&c, v.iov_len, 1);
			}
		} else {
			rc = shm_ring_send(&c, &v, 1);
		}
		CHECK(rc == 0 || rc == -EAGAIN || rc == -EMSGSIZE || rc == -ECONNRESET || rc == -EPIPE);
		if (rc < 0)
			break;
		/* never more than a ring ahead of the consumer's last validated index */
		CHECK(c.tx.pos - c.tx.other <= RS);
	}
	shm_ring_flush(&c);
	(void)shm_ring_arm(&c);
	return 0;
}
