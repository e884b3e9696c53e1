/* test_pid_alive.c — ssw_pid_alive (common/pid.c), the control swap's "can
 * that process still act?": a live process is alive (from the /proc read,
 * then from its cache), one reaped is not at once, a zombie (exited, not
 * reaped) is not within the cache's bound (about 2 ms), even when it was
 * seen alive just before it exited; pids 0 and below never are. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sys.h"

/* A child that waits for a byte on fd, then exits. */
static pid_t child_waiting(int *wfd)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t k = fork();
	assert_true(k >= 0);
	if (k == 0) {
		char c;
		close(p[1]);
		alarm(10);
		(void)!read(p[0], &c, 1);
		_exit(0);
	}
	close(p[0]);
	*wfd = p[1];
	return k;
}

/* Whether the zombie k stops passing within ms milliseconds. */
static bool dead_within(pid_t k, int ms)
{
	uint64_t end = ssw_now_ns() + (uint64_t)ms * 1000000ull;
	while (ssw_pid_alive(k))
		if (ssw_now_ns() > end)
			return false;
		else
			usleep(200);
	return true;
}

/* The child is a zombie (exited, not reaped) once waitid with WNOWAIT
 * says it exited. */
static void exit_unreaped(pid_t k, int wfd)
{
	close(wfd);
	siginfo_t si;
	assert_int_equal(waitid(P_PID, (id_t)k, &si, WEXITED | WNOWAIT), 0);
}

static void test_live_and_cached(void **state)
{
	(void)state;
	assert_true(ssw_pid_alive(getpid()));
	int wfd;
	pid_t k = child_waiting(&wfd);
	for (int i = 0; i < 100; i++) /* the first from /proc, then from the cache */
		assert_true(ssw_pid_alive(k));
	exit_unreaped(k, wfd);
	assert_true(dead_within(k, 50)); /* a zombie: within the cache's bound */
	assert_false(ssw_pid_alive(k));
	assert_int_equal(waitpid(k, NULL, 0), k);
	assert_false(ssw_pid_alive(k)); /* reaped: kill(0) says so */
}

static void test_zombie_never_cached(void **state)
{
	(void)state;
	int wfd;
	pid_t k = child_waiting(&wfd);
	exit_unreaped(k, wfd); /* never seen alive: the /proc read says zombie */
	assert_false(ssw_pid_alive(k));
	assert_false(ssw_pid_alive(k));
	assert_int_equal(waitpid(k, NULL, 0), k);
}

static void test_reaped_at_once(void **state)
{
	(void)state;
	int wfd;
	pid_t k = child_waiting(&wfd);
	assert_true(ssw_pid_alive(k)); /* cached alive */
	close(wfd);
	assert_int_equal(waitpid(k, NULL, 0), k);
	assert_false(ssw_pid_alive(k)); /* the cache does not outlive the process */
}

static void test_not_a_pid(void **state)
{
	(void)state;
	assert_false(ssw_pid_alive(0));
	assert_false(ssw_pid_alive(-1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_live_and_cached),
		cmocka_unit_test(test_zombie_never_cached),
		cmocka_unit_test(test_reaped_at_once),
		cmocka_unit_test(test_not_a_pid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
