/* test_shm_mem.c — the shm rings' memory like kernel TCP's: a ring rewinds to
 * its start whenever the consumer has read everything (ping-pong keeps to
 * the first page), never while anything is unread, leaving the whole ring
 * to a burst, and corked records behind a rewind arrive whole; the idle trim gives back the pages past the floor but for
 * those still to be read, and what is read afterwards is intact; the
 * resident op counts the segment's pages.
 *
 * A real segment (ssw_shm_pair: a sealed memfd mapped twice), since what is
 * resident is the kernel's answer (mincore). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/sys.h"
#include "providers/shm/shm_priv.h"

extern const struct ssw_provider ssw_provider_shm;

#define RS (64u << 10)
#define PAGES (RS / SHM_PAGE)

struct rig {
	struct ssw_ep *a, *b; /* a sends on ring 0, b on ring 1 */
};

static int setup(void **state)
{
	struct rig *g = calloc(1, sizeof *g);
	assert_non_null(g);
	assert_int_equal(ssw_shm_pair(RS, &g->a, &g->b), 0);
	*state = g;
	return 0;
}

static int teardown(void **state)
{
	struct rig *g = *state;
	ssw_provider_shm.conn->close(g->a, SSW_CLOSE_ORDERLY);
	ssw_provider_shm.conn->close(g->b, SSW_CLOSE_ORDERLY);
	free(g);
	return 0;
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static void send_msg(struct ssw_ep *ep, size_t n, unsigned seed)
{
	static uint8_t b[32 << 10];
	assert_true(n <= sizeof b);
	fill(b, n, seed);
	struct iovec v = { b, n };
	assert_int_equal(shm_ring_send(ep, &v, 1), 0);
}

/* The next message must be n bytes of pattern seed. */
static void recv_msg(struct ssw_ep *ep, size_t n, unsigned seed)
{
	static uint8_t want[32 << 10];
	const void *m;
	size_t len;
	assert_int_equal(shm_ring_peek(ep, &m, &len), 0);
	assert_int_equal(len, n);
	fill(want, n, seed);
	assert_memory_equal(m, want, n);
	shm_ring_done(ep);
}

/* The housekeeper's look at a's ring, as if its last look had been its
 * quiet time ago (a second at first): what a real look finds a second on. */
static int look_later(struct ssw_ep *ep)
{
	if (ep->tx.idle.mark_ns)
		ep->tx.idle.mark_ns -= 2 * SSW_TRIM_QUIET_MIN_NS;
	return shm_ring_trim(ep, 0);
}

/* Pages of ring r's data area resident in the memfd. */
static int resident_pages(struct ssw_ep *ep, int r)
{
	unsigned char v[PAGES];
	uint8_t *data = (uint8_t *)ep->seg + SHM_DATA_OFF + (size_t)r * RS;
	assert_int_equal(mincore(data, RS, v), 0);
	int n = 0;
	for (unsigned i = 0; i < PAGES; i++)
		n += v[i] & 1;
	return n;
}

static void test_pingpong_keeps_first_page(void **state)
{
	struct rig *g = *state;
	/* 600 round trips of 1,000 B (plus a 16 B header, as the session's)
	 * move 600 KiB each way through 64 KiB rings */
	for (unsigned i = 0; i < 600; i++) {
		send_msg(g->a, 1016, i);
		recv_msg(g->b, 1016, i);
		send_msg(g->b, 1016, ~i);
		recv_msg(g->a, 1016, ~i);
	}
	assert_true(g->a->tx.pos > 4 * RS); /* rewinds count as going round */
	assert_int_equal(resident_pages(g->a, 0), 1);
	assert_int_equal(resident_pages(g->a, 1), 1);
	assert_false(g->a->tx.dirty); /* never past the floor: no trim to ask for */
}

/* A consumer that never said it follows rewinds (a switch of before
 * them: its word in the header stays 0) is written to as it always was. */
static void test_no_rewind_toward_older_peer(void **state)
{
	struct rig *g = *state;
	struct shm_seg_hdr *h = g->a->seg;
	atomic_store(&h->feat[1], 0);
	for (unsigned i = 0; i < 200; i++) {
		send_msg(g->a, 1016, i);
		recv_msg(g->b, 1016, i);
	}
	assert_int_equal(atomic_load(&g->a->tx.ctl->skip), 0);
	assert_int_equal(resident_pages(g->a, 0), (int)PAGES);
	/* the other way the connector said so: the acceptor rewinds */
	for (unsigned i = 0; i < 200; i++) {
		send_msg(g->b, 1016, i);
		recv_msg(g->a, 1016, i);
	}
	assert_int_equal(resident_pages(g->a, 1), 1);
}

static void test_no_rewind_over_unread(void **state)
{
	struct rig *g = *state;
	/* one message always unread: the producer must go on round the ring
	 * (rewinding would write the next record over it) */
	send_msg(g->a, 1016, 0);
	for (unsigned i = 1; i < 200; i++) {
		send_msg(g->a, 1016, i);
		recv_msg(g->b, 1016, i - 1);
	}
	recv_msg(g->b, 1016, 199);
	assert_int_equal(resident_pages(g->a, 0), (int)PAGES);
}

/* After a rewind the whole ring is there for a burst (a PAD to the end
 * would have left only what lay before it until the consumer read it). */
static void test_rewind_leaves_whole_ring(void **state)
{
	struct rig *g = *state;
	send_msg(g->a, 100, 1);
	recv_msg(g->b, 100, 1);
	assert_int_equal(g->a->tx.pos, 112);
	assert_int_equal(shm_ring_room(g->a), RS); /* empty: the next record rewinds */
	for (unsigned i = 0; i < 15; i++) /* 60 KiB, unread */
		send_msg(g->a, 4088, 10 + i);
	assert_int_equal(g->a->tx.pos, RS + 15 * 4096);
	assert_int_equal(atomic_load(&g->a->tx.ctl->skip), 112);
	for (unsigned i = 0; i < 15; i++)
		recv_msg(g->b, 4088, 10 + i);
	assert_int_equal(atomic_load(&g->a->tx.ctl->head), RS + 15 * 4096);
	const void *m;
	size_t len;
	assert_int_equal(shm_ring_peek(g->b, &m, &len), -EAGAIN);
}

/* Corked records behind a rewind: the consumer jumps only once they are
 * its to read (flushed, or their hold time over). */
static void test_rewind_held(void **state)
{
	struct rig *g = *state;
	send_msg(g->a, 100, 1);
	recv_msg(g->b, 100, 1);
	(void)shm_ring_room(g->a);
	static uint8_t b[3000];
	for (unsigned i = 0; i < 3; i++) {
		void *buf;
		assert_int_equal(shm_ring_reserve(g->a, sizeof b, &buf), 0);
		fill(buf, sizeof b, 20 + i);
		assert_int_equal(shm_ring_commit(g->a, sizeof b, 1), 0);
	}
	const void *m;
	size_t len;
	assert_int_equal(shm_ring_peek(g->b, &m, &len), -EAGAIN);
	assert_int_equal(g->b->rx.pos, 112); /* not jumped yet */
	atomic_store(&g->a->tx.ctl->held_ns, 1); /* the hold time is over */
	for (unsigned i = 0; i < 3; i++)
		recv_msg(g->b, sizeof b, 20 + i);
	assert_int_equal(shm_ring_peek(g->b, &m, &len), -EAGAIN);
	shm_ring_flush(g->a);
	assert_int_equal(shm_ring_peek(g->b, &m, &len), -EAGAIN);
	send_msg(g->a, 50, 30);
	recv_msg(g->b, 50, 30);
}

/* Send `count` messages of n bytes, reading them `lag` messages behind. */
static void stream(struct rig *g, unsigned count, size_t n, unsigned lag, unsigned seed)
{
	for (unsigned i = 0; i < count; i++) {
		send_msg(g->a, n, seed + i);
		if (i >= lag)
			recv_msg(g->b, n, seed + i - lag);
	}
	for (unsigned i = count > lag ? count - lag : 0; i < count; i++)
		recv_msg(g->b, n, seed + i);
}

static void test_trim_after_stream(void **state)
{
	struct rig *g = *state;
	stream(g, 40, 8000, 4, 10); /* round the ring, four messages unread at a time */
	assert_true(g->a->tx.dirty);
	assert_int_equal(resident_pages(g->a, 0), (int)PAGES);
	/* the first look notes where the ring stands; a second one at once
	 * finds it idle too short a time; one a second later trims */
	assert_int_equal(shm_ring_trim(g->a, 0), 1);
	assert_int_equal(shm_ring_trim(g->a, 0), 1);
	assert_int_equal(resident_pages(g->a, 0), (int)PAGES);
	assert_int_equal(look_later(g->a), 0);
	assert_false(g->a->tx.dirty);
	/* the floor and the page the next record goes to */
	assert_true(resident_pages(g->a, 0) <= (int)(SHM_RING_FLOOR / SHM_PAGE) + 1);
	/* and the ring goes on: zeroed pages fault in again */
	stream(g, 40, 8000, 4, 100);
	assert_true(g->a->tx.dirty);
	stream(g, 3, 1000, 0, 200);
}

static void test_trim_waits_for_idle_and_reader(void **state)
{
	struct rig *g = *state;
	stream(g, 20, 8000, 4, 10);
	assert_int_equal(shm_ring_trim(g->a, 0), 1);
	send_msg(g->a, 8000, 50); /* sent since the look: not idle */
	assert_int_equal(look_later(g->a), 1);
	assert_int_equal(resident_pages(g->a, 0), (int)PAGES);
	/* unread: nothing goes however long it idles */
	assert_int_equal(look_later(g->a), 1);
	assert_int_equal(resident_pages(g->a, 0), (int)PAGES);
	recv_msg(g->b, 8000, 50);
	assert_int_equal(look_later(g->a), 0);
	assert_true(resident_pages(g->a, 0) <= (int)(SHM_RING_FLOOR / SHM_PAGE) + 1);
}

/* Traffic back soon after a trim: the next trim waits twice as long. */
static void test_trim_backs_off(void **state)
{
	struct rig *g = *state;
	stream(g, 20, 8000, 4, 10);
	assert_int_equal(shm_ring_trim(g->a, 0), 1);
	assert_int_equal(look_later(g->a), 0);
	stream(g, 20, 8000, 4, 30); /* at once: the trim was wasted */
	assert_int_equal(g->a->tx.idle.quiet_ns, 2 * SSW_TRIM_QUIET_MIN_NS);
	assert_int_equal(shm_ring_trim(g->a, 0), 1);
	g->a->tx.idle.mark_ns -= SSW_TRIM_QUIET_MIN_NS + SSW_TRIM_QUIET_MIN_NS / 2;
	assert_int_equal(shm_ring_trim(g->a, 0), 1); /* 1.5 s idle: not yet */
	assert_int_equal(resident_pages(g->a, 0), (int)PAGES);
	g->a->tx.idle.mark_ns -= SSW_TRIM_QUIET_MIN_NS;
	assert_int_equal(shm_ring_trim(g->a, 0), 0); /* 2.5 s */
}

static void test_forced_trim_keeps_unread(void **state)
{
	struct rig *g = *state;
	stream(g, 20, 8000, 0, 10);
	/* 4 x 8 KB unread, somewhere round the ring (it may wrap the end) */
	for (unsigned i = 0; i < 4; i++)
		send_msg(g->a, 8000, 60 + i);
	shm_ring_trim(g->a, 1); /* the connection ends: what was read goes now */
	int left = resident_pages(g->a, 0);
	assert_true(left < (int)PAGES);
	assert_true(left >= 8);
	for (unsigned i = 0; i < 4; i++)
		recv_msg(g->b, 8000, 60 + i);
}

static void test_resident(void **state)
{
	struct rig *g = *state;
	/* the header page (written by the connector) */
	assert_int_equal(shm_seg_resident(g->a), SHM_PAGE);
	assert_int_equal(shm_seg_resident(g->b), SHM_PAGE);
	send_msg(g->a, 100, 1);
	recv_msg(g->b, 100, 1);
	send_msg(g->b, 100, 2);
	assert_int_equal(shm_seg_resident(g->a), 3 * SHM_PAGE);
	stream(g, 40, 8000, 4, 10);
	assert_int_equal(shm_seg_resident(g->b), (int64_t)(2 + PAGES) * SHM_PAGE);
	const struct ssw_msg_ops *mo = ssw_provider_shm.msg;
	assert_ptr_equal(mo->resident, shm_seg_resident);
	assert_ptr_equal(mo->trim, shm_ring_trim);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_pingpong_keeps_first_page), T(test_no_rewind_toward_older_peer), T(test_no_rewind_over_unread), T(test_rewind_leaves_whole_ring), T(test_rewind_held),
		T(test_trim_after_stream),         T(test_trim_waits_for_idle_and_reader), T(test_trim_backs_off),
		T(test_forced_trim_keeps_unread),  T(test_resident),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
