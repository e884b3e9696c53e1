/* test_waitpol.c — the wait policy: what a wait's budget counts in each mode,
 * that a busy neighbour on the same core makes a wait hand the core over
 * (long wall time, little CPU burned) instead of burning its budget, and
 * when a send cedes the CPU (a consumer on it, or awake elsewhere). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common/sys.h"
#include "common/waitpol.h"

static int count_steps(struct ssw_spin *sp, uint64_t *elapsed)
{
	int n = 0;
	while (ssw_spin_step(sp) && n < 10000000)
		n++;
	*elapsed = ssw_now_ns() - sp->t0;
	return n;
}

/* sleep: no step at all; a zero budget: none either */
static void test_sleep_and_zero(void **st)
{
	(void)st;
	struct ssw_spin sp;
	uint64_t el;
	ssw_wait_set_mode(SSW_WAITMODE_SLEEP);
	ssw_spin_start(&sp, ssw_now_ns(), 50000);
	assert_int_equal(count_steps(&sp, &el), 0);
	assert_false(sp.spun);
	ssw_wait_set_mode(SSW_WAITMODE_AUTO);
	ssw_spin_start(&sp, ssw_now_ns(), 0);
	assert_int_equal(count_steps(&sp, &el), 0);
	ssw_spin_start(&sp, ssw_now_ns(), 50000);
	ssw_spin_stop(&sp);
	assert_int_equal(count_steps(&sp, &el), 0);
}

/* spin: the budget is wall time */
static void test_spin_is_wall_time(void **st)
{
	(void)st;
	struct ssw_spin sp;
	uint64_t el;
	ssw_wait_set_mode(SSW_WAITMODE_SPIN);
	ssw_spin_start(&sp, ssw_now_ns(), 200000);
	assert_true(count_steps(&sp, &el) > 0);
	assert_true(el >= 200000);
	assert_true(sp.spun);
	ssw_wait_set_mode(SSW_WAITMODE_AUTO);
}

/* auto: a wait ends when it burned its budget, reached the wall cap, or
 * met a CPU-bound neighbour (budget dropped, yields off), never before */
static void test_auto_ends_on_burn_or_wall(void **st)
{
	(void)st;
	for (int i = 0; i < 20; i++) {
		struct ssw_spin sp;
		uint64_t el;
		ssw_wait_set_mode(SSW_WAITMODE_AUTO);
		ssw_spin_start(&sp, ssw_now_ns(), 20000);
		assert_true(count_steps(&sp, &el) > 0);
		assert_true(sp.burn >= 20000 || el >= SSW_SPIN_WALL_NS || sp.budget == 0 || ssw_wait_yields_off());
		assert_true(el < 50 * SSW_SPIN_WALL_NS); /* bounded, whatever the load */
	}
}

static atomic_int stop_busy;

/* A neighbour thread: CPU-bound (arg NULL), or one that works ~10 us and
 * yields, as a peer on the same core does. */
static void *neighbour(void *arg)
{
	while (!atomic_load_explicit(&stop_busy, memory_order_relaxed)) {
		if (!arg) {
			ssw_cpu_relax();
			continue;
		}
		uint64_t t0 = ssw_now_ns();
		while (ssw_now_ns() - t0 < 10000)
			ssw_cpu_relax();
		sched_yield();
	}
	return NULL;
}

/* Times this thread gave its CPU away without sleeping (a yield that
 * switched counts as an involuntary switch): whoever took the CPU, the
 * neighbour or another program beside the test (CI runs tests at once). */
static long switched_away(void)
{
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nivcsw;
}

static atomic_ulong neighbour_laps;

/* A peer that answers at once and yields, counting its turns. */
static void *counting_neighbour(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&stop_busy, memory_order_relaxed)) {
		atomic_fetch_add_explicit(&neighbour_laps, 1, memory_order_relaxed);
		sched_yield();
	}
	return NULL;
}

static cpu_set_t saved;

/* Run this thread and a new one (fn) on one core, which *cpu names. */
static pthread_t with_thread(void *(*fn)(void *), void *arg, int *cpu_out)
{
	cpu_set_t one;
	assert_int_equal(sched_getaffinity(0, sizeof saved, &saved), 0);
	int cpu = 0;
	while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &saved))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0); /* the new thread inherits it */
	atomic_store(&stop_busy, 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
	usleep(20000); /* let it run */
	if (cpu_out)
		*cpu_out = cpu;
	return t;
}

/* A neighbour on this thread's core: cooperative (works briefly, yields)
 * or CPU-bound. */
static pthread_t with_neighbour(bool cooperative)
{
	return with_thread(neighbour, cooperative ? (void *)1 : NULL, NULL);
}

static void without_neighbour(pthread_t t)
{
	atomic_store(&stop_busy, 1);
	pthread_join(t, NULL);
	sched_setaffinity(0, sizeof saved, &saved);
	ssw_wait_set_mode(SSW_WAITMODE_AUTO);
}

/* A neighbour on the same core that works briefly and yields, as a peer
 * does: each of our yields lets it run, so the wait goes on past its CPU
 * budget, up to the wall cap, having burned less than the budget. */
static void test_auto_hands_over_to_neighbour(void **st)
{
	(void)st;
	pthread_t t = with_neighbour(true);
	int handed = 0, tried = 0;
	for (int i = 0; i < 40 && tried < 8; i++) {
		struct ssw_spin sp;
		uint64_t el;
		ssw_wait_set_mode(SSW_WAITMODE_AUTO); /* a stray long yield (load) ends one wait only */
		ssw_spin_start(&sp, ssw_now_ns(), 50000);
		count_steps(&sp, &el);
		if (ssw_wait_yields_off())
			continue; /* two long yields (programs beside the test) ended it: another */
		tried++;
		if (el >= SSW_SPIN_WALL_NS && sp.burn < 50000)
			handed++;
	}
	without_neighbour(t);
	assert_true(handed >= 2);
}

/* One round of test_peer_on_our_cpu_first_step_yields: 20 waits each way. */
static void first_step_round(int cpu, int *ran_here, int *ran_elsewhere)
{
	*ran_here = *ran_elsewhere = 0;
	for (int i = 0; i < 20; i++) {
		struct ssw_spin sp;
		/* CPU-bound neighbours (tests side by side) may switch yields
		 * off (hog_seen): each pair of waits starts from a clean state */
		ssw_wait_set_mode(SSW_WAITMODE_AUTO);
		ssw_spin_start(&sp, ssw_now_ns(), 50000);
		ssw_spin_peer_cpu(&sp, cpu);
		long before = switched_away();
		bool stepped = ssw_spin_step(&sp); /* false only when preempted past the wall cap */
		*ran_here += stepped && switched_away() != before;
		ssw_spin_start(&sp, ssw_now_ns(), 50000);
		ssw_spin_peer_cpu(&sp, cpu + 1 < CPU_SETSIZE ? cpu + 1 : 0);
		before = switched_away();
		stepped = ssw_spin_step(&sp);
		*ran_elsewhere += stepped && switched_away() != before;
	}
}

/* The peer last seen on our CPU: the first step hands the CPU over (the
 * peer runs before it returns); elsewhere, the first step is a pause (the
 * peer, pinned to our core, cannot run during it).  A tick or a CPU-bound
 * neighbour may preempt us now and then: up to 10 rounds, the first that
 * shows the pattern counts. */
static void test_peer_on_our_cpu_first_step_yields(void **st)
{
	(void)st;
	int cpu;
	pthread_t t = with_thread(counting_neighbour, NULL, &cpu);
	int ran_here = 0, ran_elsewhere = 0;
	for (int round = 0; round < 10; round++) {
		first_step_round(cpu, &ran_here, &ran_elsewhere);
		if (ran_here >= 15 && ran_elsewhere <= 5)
			break;
	}
	without_neighbour(t);
	ssw_wait_set_mode(SSW_WAITMODE_AUTO);
	assert_true(ran_here >= 15);
	assert_true(ran_elsewhere <= 5);
}

/* One round of test_cede_after_publish: 20 sends after holding the CPU. */
static void cede_round(int cpu, int *ceded, int *elsewhere, int *again)
{
	*ceded = *elsewhere = *again = 0;
	for (int i = 0; i < 20; i++) {
		/* a CPU-bound neighbour (tests side by side) turns yields off
		 * after two long ones (hog_seen): each send starts clean */
		ssw_wait_set_mode(SSW_WAITMODE_AUTO);
		uint64_t t0 = ssw_now_ns();
		while (ssw_now_ns() - t0 < 2 * SSW_CEDE_NS) /* hold the CPU */
			ssw_cpu_relax();
		long before = switched_away();
		ssw_wait_cede(cpu + 1 < CPU_SETSIZE ? cpu + 1 : 0);
		*elsewhere += switched_away() != before;
		before = switched_away();
		ssw_wait_cede(cpu);
		*ceded += switched_away() != before;
		before = switched_away();
		ssw_wait_cede(cpu); /* just yielded */
		*again += switched_away() != before;
	}
}

/* After a send: a thread that has held its CPU for SSW_CEDE_NS yields
 * once to a consumer on its CPU (a neighbour thread there is always
 * runnable, so the yield switches); not right after a yield, and not for
 * a consumer elsewhere.  A tick may preempt us now and then, and CPU-bound
 * neighbours (the suite runs tests side by side) more often: up to 10
 * rounds, the first that shows the pattern counts (without the yield none
 * would). */
static void test_cede_after_publish(void **st)
{
	(void)st;
	int ceded = 0, again = 0, elsewhere = 0;
	for (int round = 0; round < 10; round++) {
		/* a fresh neighbour each round: the scheduler (EEVDF) can settle
		 * a pair of yielding threads into turns where every other yield
		 * finds the neighbour not yet eligible, for as long as both live
		 * (10 of 20 in every round, 1 run in 30 on a quiet host) */
		int cpu;
		pthread_t t = with_thread(counting_neighbour, NULL, &cpu);
		ssw_wait_set_mode(SSW_WAITMODE_AUTO);
		cede_round(cpu, &ceded, &elsewhere, &again);
		without_neighbour(t);
		if (ceded >= 15 && elsewhere <= 5 && again <= 5)
			break;
	}
	assert_true(ceded >= 15);
	assert_true(elsewhere <= 5);
	assert_true(again <= 5);
}

/* One round of test_cede_to_awake_peer_elsewhere: 20 sends after holding
 * the CPU, to a consumer elsewhere that is asleep, then awake; then 20 to
 * an awake one right after a sleep. */
static void cede_awake_round(int cpu, int *asleep, int *awake, int *after_sleep)
{
	*asleep = *awake = *after_sleep = 0;
	int other = cpu + 1 < CPU_SETSIZE ? cpu + 1 : 0;
	for (int i = 0; i < 20; i++) {
		ssw_wait_set_mode(SSW_WAITMODE_AUTO); /* as in cede_round */
		uint64_t t0 = ssw_now_ns();
		while (ssw_now_ns() - t0 < 2 * SSW_CEDE_NS) /* hold the CPU */
			ssw_cpu_relax();
		/* SSW_CEDE_LOOK sends each: one of them looks at the clock */
		long before = switched_away();
		for (int k = 0; k < SSW_CEDE_LOOK; k++)
			ssw_wait_cede_to(other, false);
		*asleep += switched_away() != before;
		before = switched_away();
		for (int k = 0; k < SSW_CEDE_LOOK; k++)
			ssw_wait_cede_to(other, true);
		*awake += switched_away() != before;
		t0 = ssw_now_ns();
		while (ssw_now_ns() - t0 < 2 * SSW_CEDE_NS)
			ssw_cpu_relax();
		ssw_wait_slept(); /* as a wait that slept just now */
		before = switched_away();
		for (int k = 0; k < SSW_CEDE_LOOK; k++)
			ssw_wait_cede_to(other, true);
		*after_sleep += switched_away() != before;
	}
}

/* A consumer awake on another CPU (it answers within the busy-poll, so
 * the pair never sleeps nor yields): after SSW_CEDE_NS of holding the CPU
 * one of the next SSW_CEDE_LOOK sends yields once, so that the processes waiting for this CPU get it
 * (a neighbour there is always runnable: the yield switches); not for a
 * consumer elsewhere that sleeps (its wake-up is the scheduler's business),
 * and not right after a sleep, which gave the CPU up.  Preemptions (ticks,
 * CPU-bound neighbours of the suite) now and then: up to 10 rounds. */
static void test_cede_to_awake_peer_elsewhere(void **st)
{
	(void)st;
	int asleep = 0, awake = 0, after_sleep = 0;
	for (int round = 0; round < 10; round++) {
		int cpu;
		pthread_t t = with_thread(counting_neighbour, NULL, &cpu);
		ssw_wait_set_mode(SSW_WAITMODE_AUTO);
		cede_awake_round(cpu, &asleep, &awake, &after_sleep);
		without_neighbour(t);
		if (awake >= 15 && asleep <= 5 && after_sleep <= 5)
			break;
	}
	assert_true(awake >= 15);
	assert_true(asleep <= 5);
	assert_true(after_sleep <= 5);
}

/* A CPU-bound neighbour takes a whole slice at each yield: after a few
 * such yields the process stops yielding, and a wait then ends after its
 * short busy-poll, well before a slice; a wait of a thread that has held
 * its CPU for SSW_CEDE_NS ends at once, without a step (a pair answering
 * each other within the busy-poll would otherwise hold two CPUs until the
 * tick: the cede, by sleeping). */
static void test_auto_stops_yielding_beside_cpu_hog(void **st)
{
	(void)st;
	pthread_t t = with_neighbour(false);
	ssw_wait_set_mode(SSW_WAITMODE_AUTO);
	for (int i = 0; i < 200 && !ssw_wait_yields_off(); i++) {
		struct ssw_spin sp;
		uint64_t el;
		ssw_spin_start(&sp, ssw_now_ns(), 50000);
		count_steps(&sp, &el);
	}
	bool off = ssw_wait_yields_off();
	struct ssw_spin sp;
	uint64_t el;
	ssw_wait_slept(); /* as a wait that slept just now */
	ssw_spin_start(&sp, ssw_now_ns(), 50000);
	count_steps(&sp, &el);
	uint64_t t0 = ssw_now_ns();
	while (ssw_now_ns() - t0 < 2 * SSW_CEDE_NS) /* hold the CPU */
		ssw_cpu_relax();
	struct ssw_spin held;
	uint64_t el2;
	ssw_spin_start(&held, ssw_now_ns(), 50000);
	int steps = count_steps(&held, &el2);
	bool still_off = ssw_wait_yields_off();
	without_neighbour(t);
	assert_true(off);
	assert_true(el < SSW_SPIN_HOG_NS);
	if (still_off) /* not preempted past the pause meanwhile */
		assert_int_equal(steps, 0);
}

/* With the user's shared decision in use (waitshare.c), a CPU-bound
 * neighbour seen by this process turns yields off in another process too:
 * a forked child that attaches the same page finds them off. */
static void test_hog_seen_turns_yields_off_for_others(void **st)
{
	(void)st;
	int key = 0x7e5a0000 | (getpid() & 0xffff);
	struct ssw_wait_share *w = ssw_wait_share_attach_key(key);
	assert_non_null(w);
	ssw_wait_set_mode(SSW_WAITMODE_AUTO);
	ssw_wait_share_use(w);
	assert_false(ssw_wait_yields_off());
	pthread_t t = with_neighbour(false);
	for (int i = 0; i < 200 && !ssw_wait_yields_off(); i++) {
		struct ssw_spin sp;
		uint64_t el;
		ssw_spin_start(&sp, ssw_now_ns(), 50000);
		count_steps(&sp, &el);
	}
	without_neighbour(t);
	bool off = ssw_wait_yields_off();
	pid_t pid = fork();
	if (pid == 0) {
		struct ssw_wait_share *c = ssw_wait_share_attach_key(key);
		uint64_t now = ssw_now_ns();
		_exit(c && ssw_wait_share_until(c, now) > now ? 0 : 1);
	}
	int status = -1;
	waitpid(pid, &status, 0);
	ssw_wait_share_use(NULL);
	int id = shmget(key, 0, 0);
	if (id >= 0)
		shmctl(id, IPC_RMID, NULL);
	assert_true(off);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sleep_and_zero),
		cmocka_unit_test(test_spin_is_wall_time),
		cmocka_unit_test(test_auto_ends_on_burn_or_wall),
		cmocka_unit_test(test_auto_hands_over_to_neighbour),
		cmocka_unit_test(test_peer_on_our_cpu_first_step_yields),
		cmocka_unit_test(test_cede_after_publish),
		cmocka_unit_test(test_cede_to_awake_peer_elsewhere),
		cmocka_unit_test(test_auto_stops_yielding_beside_cpu_hog),
		cmocka_unit_test(test_hog_seen_turns_yields_off_for_others),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
