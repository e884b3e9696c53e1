/* test_waitloop.c — the one wait loop (common/waitpol.c, ssw_wait) on a fake
 * clock with fake ready/sleep callbacks: an event caught by the spin, after
 * N looks; the spin budget learnt from when the peer rang (or, without its
 * ring, from the sleep's length); the deadline; the periodic re-check; what
 * the sleep callback's answers do.  Mode spin (a pause per step, the budget
 * in wall time): the steps are counted on the fake clock alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>

#include "common/waitpol.h"

#define MAX_NS 50000u
#define TICK 100 /* each look at the clock moves it on */

static uint64_t fake_ns;

static uint64_t fake_now(void)
{
	fake_ns += TICK;
	return fake_ns;
}

struct fake {
	struct ssw_waiter w;
	int ready_at;         /* the look that finds the event (0: never by itself) */
	int looks, sleeps;
	int ready_after_sleep; /* a look after that many sleeps finds it (0: never) */
	int answers[8];       /* the sleep callback's answers, in turn; then the last */
	uint64_t sleep_ns;    /* how long each sleep lasts on the clock (-1 given: this) */
	int64_t ring_in;      /* the peer rang this long after the sleep began (<0: unknown) */
	int64_t given[16];    /* the bounds each sleep was given */
};

static int fake_ready(struct ssw_waiter *w)
{
	struct fake *f = (struct fake *)w;
	f->looks++;
	if (f->ready_at && f->looks >= f->ready_at)
		return 7;
	if (f->ready_after_sleep && f->sleeps >= f->ready_after_sleep)
		return 7;
	return 0;
}

static int fake_sleep(struct ssw_waiter *w, int64_t ns)
{
	struct fake *f = (struct fake *)w;
	int i = f->sleeps < 8 ? f->sleeps : 7;
	if (f->sleeps < 16)
		f->given[f->sleeps] = ns;
	f->sleeps++;
	int a = f->answers[i];
	if (a == SSW_WAIT_LOOK || a == SSW_WAIT_RETURN)
		return a;
	uint64_t t = fake_ns;
	uint64_t len = a == SSW_WAIT_TIMEDOUT && ns >= 0 ? (uint64_t)ns : f->sleep_ns;
	fake_ns += len;
	if (f->ring_in >= 0 && a == SSW_WAIT_WOKEN)
		w->rang = t + (uint64_t)f->ring_in;
	return a;
}

static struct fake fake(void)
{
	struct fake f = { .w = { .ready = fake_ready, .sleep = fake_sleep, .peer_cpu = -1 }, .ring_in = -1 };
	f.sleep_ns = 1000000;
	for (int i = 0; i < 8; i++)
		f.answers[i] = SSW_WAIT_WOKEN;
	return f;
}

static int setup(void **st)
{
	(void)st;
	fake_ns = 1000000000ull;
	ssw_wait_set_clock(fake_now);
	ssw_wait_set_mode(SSW_WAITMODE_SPIN);
	ssw_wait_set_spin_max(MAX_NS);
	return 0;
}

static int teardown(void **st)
{
	(void)st;
	ssw_wait_set_clock(NULL);
	ssw_wait_set_mode(SSW_WAITMODE_AUTO);
	return 0;
}

static const struct ssw_waitcfg kind = { .start_ns = 20000 };

/* Ready after N looks within the budget: no sleep, the answer returned, one
 * step between looks, and the budget grows (a caught spin says it paid). */
static void test_ready_after_n_looks(void **st)
{
	(void)st;
	struct ssw_waitpol pol = { 0 };
	struct fake f = fake();
	f.ready_at = 10;
	assert_int_equal(ssw_waitpol_budget(&pol, &kind), 20000);
	assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), 7);
	assert_int_equal(f.looks, 10);
	assert_int_equal(f.sleeps, 0);
	assert_int_equal(ssw_waitpol_budget(&pol, &kind), 25000); /* +1/4 */
	/* caught late in a spin: at least 1.5 x what it took, at most the most */
	for (int i = 0; i < 20; i++) {
		f = fake();
		f.ready_at = 150; /* ~150 steps of 100 ns: 15 us into the spin */
		assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), 7);
	}
	assert_int_equal(ssw_waitpol_budget(&pol, &kind), MAX_NS);
	/* the caller has just looked: a step first, then the look */
	f = fake();
	f.ready_at = 1;
	f.w.looked = true;
	assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), 7);
	assert_int_equal(f.looks, 1);
}

/* The event never comes during the spin: the spin lasts the budget (wall
 * time in mode spin), then the sleep; a once-wait returns after it. */
static void test_spin_then_sleep(void **st)
{
	(void)st;
	struct ssw_waitpol pol = { .spin_ns = 10000 };
	struct fake f = fake();
	f.ready_after_sleep = 1;
	uint64_t t0 = fake_ns;
	assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), 7);
	assert_int_equal(f.sleeps, 1);
	assert_true(f.looks >= 10000 / TICK / 2 && f.looks <= 10000 / TICK + 2);
	assert_int_equal(f.given[0], -1); /* no deadline, no re-check: unbounded */
	assert_true(fake_ns - t0 >= 10000 + f.sleep_ns);
	/* once: the caller looks itself after the sleep */
	const struct ssw_waitcfg once = { .start_ns = 20000, .once = true };
	f = fake();
	assert_int_equal(ssw_wait(&pol, &once, 0, &f.w), 0);
	assert_int_equal(f.sleeps, 1);
	/* mode sleep: no step at all, one look then the sleep */
	ssw_wait_set_mode(SSW_WAITMODE_SLEEP);
	f = fake();
	f.ready_after_sleep = 1;
	assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), 7);
	assert_int_equal(f.looks, 2);
	ssw_wait_set_mode(SSW_WAITMODE_SPIN);
}

/* One sleep with the peer's ring `ring_in` after the sleep began (-1: no
 * ring time), lasting sleep_ns; returns the budget after. */
static uint64_t one_sleep(struct ssw_waitpol *pol, int64_t ring_in, uint64_t sleep_ns, int answer)
{
	struct fake f = fake();
	f.ready_after_sleep = 1;
	f.ring_in = ring_in;
	f.sleep_ns = sleep_ns;
	f.answers[0] = answer;
	(void)ssw_wait(pol, &kind, answer == SSW_WAIT_TIMEDOUT ? fake_ns + 2000000 : 0, &f.w);
	return ssw_waitpol_budget(pol, &kind);
}

/* A busy server's backend (pgbench -S -c 8 -j 8): woken 100 us after it
 * went to sleep, but its client rang 150 us after the wait began, past the
 * most a wait may spin: the budget halves down to the least.  A ring
 * within the most: at least 1.5 x when it rang (spinning that long would
 * have caught it). */
static void test_ring_time_decides(void **st)
{
	(void)st;
	struct ssw_waitpol pol = { .spin_ns = MAX_NS };
	assert_int_equal(one_sleep(&pol, 100000, 100000, SSW_WAIT_WOKEN), MAX_NS / 2);
	for (int i = 0; i < 10; i++)
		one_sleep(&pol, 100000, 100000, SSW_WAIT_WOKEN);
	assert_int_equal(ssw_waitpol_budget(&pol, &kind), SSW_WAIT_SPIN_MIN_NS);
	/* spun 2 us (+ a tick), rang 10 us into the sleep: took ~12 us */
	uint64_t b = one_sleep(&pol, 10000, 100000, SSW_WAIT_WOKEN);
	assert_true(b >= 18000 && b <= 18600);
	/* a ring later than the most a wait may spin: halves again */
	assert_true(one_sleep(&pol, MAX_NS, 100000, SSW_WAIT_WOKEN) == b / 2);
}

/* No ring time (kernel fds, a provider that does not say): a quarter of the
 * sleep counts (the rest, the wake-up's latency); a sleep that ran out
 * always shrinks the budget. */
static void test_without_ring_time(void **st)
{
	(void)st;
	struct ssw_waitpol pol = { .spin_ns = MAX_NS };
	assert_int_equal(one_sleep(&pol, -1, 300000, SSW_WAIT_WOKEN), MAX_NS / 2);
	/* spun 25 us, slept 80 us: 45 us counted, within the most */
	assert_int_equal(one_sleep(&pol, -1, 80000, SSW_WAIT_WOKEN), MAX_NS);
	assert_int_equal(one_sleep(&pol, -1, 1000, SSW_WAIT_TIMEDOUT), MAX_NS / 2);
	/* a sleep that ended in an error: shrinks too */
	assert_int_equal(one_sleep(&pol, -1, 1000, -EINTR), MAX_NS / 4);
	/* the most a wait may spin bounds every budget (SOCKSWITCH_SPIN_US) */
	ssw_wait_set_spin_max(0);
	assert_int_equal(ssw_waitpol_budget(&pol, &kind), 0);
	assert_int_equal(ssw_waitpol_budget(NULL, &kind), 0); /* a fixed one too: 0 is no spin */
	ssw_wait_set_spin_max(MAX_NS);
}

/* The deadline: the sleeps are given what is left of it, the wait looks
 * once more after it passed, then says -ETIMEDOUT; a deadline of now is one
 * look, without a step or a sleep. */
static void test_deadline(void **st)
{
	(void)st;
	struct ssw_waitpol pol = { .spin_ns = 10000 };
	struct fake f = fake();
	f.answers[0] = SSW_WAIT_TIMEDOUT;
	uint64_t dl = fake_ns + 5000000;
	assert_int_equal(ssw_wait(&pol, &kind, dl, &f.w), -ETIMEDOUT);
	assert_int_equal(f.sleeps, 1);
	assert_true(f.given[0] > 4900000 && f.given[0] <= 5000000);
	assert_true(fake_ns >= dl);
	/* an event at the last look: found, not a timeout */
	f = fake();
	f.answers[0] = SSW_WAIT_TIMEDOUT;
	f.ready_after_sleep = 1;
	assert_int_equal(ssw_wait(&pol, &kind, fake_ns + 5000000, &f.w), 7);
	/* a deadline of now */
	f = fake();
	assert_int_equal(ssw_wait(&pol, &kind, fake_ns, &f.w), -ETIMEDOUT);
	assert_int_equal(f.looks, 1);
	assert_int_equal(f.sleeps, 0);
	/* woken, nothing there, woken again... until the deadline: sleeps
	 * shorter each time */
	f = fake();
	f.sleep_ns = 2000000;
	assert_int_equal(ssw_wait(&pol, &kind, fake_ns + 5000000, &f.w), -ETIMEDOUT);
	assert_int_equal(f.sleeps, 3);
	assert_true(f.given[1] < f.given[0] && f.given[2] < f.given[1]);
}

/* The periodic re-check: sleeps bounded by a nap that doubles while they
 * run out, up to its most, and is the least again after a wake-up. */
static void test_recheck(void **st)
{
	(void)st;
	const struct ssw_waitcfg nap = { .nap_min_ms = 1, .nap_max_ms = 8 };
	struct ssw_waitpol pol = { .spin_ns = 5000 };
	struct fake f = fake();
	for (int i = 0; i < 5; i++)
		f.answers[i] = SSW_WAIT_TIMEDOUT;
	f.answers[5] = SSW_WAIT_WOKEN;
	f.ready_after_sleep = 6;
	assert_int_equal(ssw_wait(&pol, &nap, 0, &f.w), 7);
	assert_int_equal(f.sleeps, 6);
	const int64_t ms = 1000000;
	assert_true(f.given[0] == 1 * ms && f.given[1] == 2 * ms && f.given[2] == 4 * ms);
	assert_true(f.given[3] == 8 * ms && f.given[4] == 8 * ms && f.given[5] == 8 * ms);
	assert_int_equal(pol.nap_ms, 1);
	/* a deadline closer than the nap bounds the sleep */
	f = fake();
	f.ready_after_sleep = 1;
	assert_int_equal(ssw_wait(&pol, &nap, fake_ns + ms / 2, &f.w), 7);
	assert_true(f.given[0] > 0 && f.given[0] <= ms / 2);
}

/* The sleep callback's answers: LOOK has the wait look again before it
 * sleeps, RETURN ends it with 0, an -errno ends it with that error. */
static void test_sleep_answers(void **st)
{
	(void)st;
	struct ssw_waitpol pol = { .spin_ns = 5000 };
	struct fake f = fake();
	f.answers[0] = SSW_WAIT_LOOK;
	f.answers[1] = SSW_WAIT_LOOK;
	f.ready_after_sleep = 2; /* the look after the second LOOK finds it */
	assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), 7);
	assert_int_equal(f.sleeps, 2);
	assert_true(f.looks >= 3); /* the spin's looks, and one after each LOOK */
	f = fake();
	f.answers[0] = SSW_WAIT_RETURN;
	assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), 0);
	assert_int_equal(f.sleeps, 1);
	f = fake();
	f.answers[0] = -EINTR;
	assert_int_equal(ssw_wait(&pol, &kind, 0, &f.w), -EINTR);
	/* a spin-only wait (no sleep callback): -ETIMEDOUT once the budget is
	 * spent; a fixed budget without a policy */
	f = fake();
	f.w.sleep = NULL;
	const struct ssw_waitcfg fixed = { .start_ns = 3000 };
	assert_int_equal(ssw_wait(NULL, &fixed, 0, &f.w), -ETIMEDOUT);
	assert_true(f.looks >= 3000 / TICK / 2 && f.looks <= 3000 / TICK + 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ready_after_n_looks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_spin_then_sleep, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ring_time_decides, setup, teardown),
		cmocka_unit_test_setup_teardown(test_without_ring_time, setup, teardown),
		cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recheck, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sleep_answers, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
