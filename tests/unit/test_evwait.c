/* test_evwait.c — the adaptive spin budget of poll/select/epoll waits
 * (switch/evwait.c): after a sleep it grows when the event came soon
 * enough that a longer spin would have caught it, and shrinks otherwise;
 * "soon" is judged from the peer's ring time when the provider knows it,
 * from the sleep's length (wake-up included) when it does not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "switch/evwait.h"

#define MAX_NS 50000u /* the default most a wait may spin (SOCKSWITCH_SPIN_US) */
#define MIN_NS 2000u

/* Drives the per-thread budget to the most (old rule: woken within four
 * budgets of the sleep's start) and checks it got there. */
static void to_max(void)
{
	for (int i = 0; i < 10; i++)
		ssw_ev_slept(100000, true, 0);
	assert_int_equal(ssw_ev_spin_ns(), MAX_NS);
}

/* A busy server's backend (pgbench -S -c 8 -j 8): woken 100 us after it
 * went to sleep, always "soon" by the sleep's length, but the client rang
 * 150 us after the wait began, past the most a wait may spin: halve, down
 * to the least; a ring within it doubles again. */
static void test_ring_time_decides(void **st)
{
	(void)st;
	to_max();
	ssw_ev_slept(100000, true, 150000);
	assert_int_equal(ssw_ev_spin_ns(), MAX_NS / 2);
	for (int i = 0; i < 10; i++)
		ssw_ev_slept(100000, true, 150000);
	assert_int_equal(ssw_ev_spin_ns(), MIN_NS);
	ssw_ev_slept(100000, true, 30000);
	assert_int_equal(ssw_ev_spin_ns(), 2 * MIN_NS);
	/* at the mark: still within */
	ssw_ev_slept(100000, true, MAX_NS);
	assert_int_equal(ssw_ev_spin_ns(), 4 * MIN_NS);
}

/* No ring time (another provider, kernel fds): the sleep's length, up to
 * four budgets, as before; a timeout always shrinks. */
static void test_without_ring_time(void **st)
{
	(void)st;
	to_max();
	ssw_ev_slept(300000, true, 0);
	assert_int_equal(ssw_ev_spin_ns(), MAX_NS / 2);
	ssw_ev_slept(150000, true, 0);
	assert_int_equal(ssw_ev_spin_ns(), MAX_NS);
	ssw_ev_slept(1000, false, 1000);
	assert_int_equal(ssw_ev_spin_ns(), MAX_NS / 2);
	ssw_ev_slept(1000, false, 0);
	assert_int_equal(ssw_ev_spin_ns(), MAX_NS / 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ring_time_decides),
		cmocka_unit_test(test_without_ring_time),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
