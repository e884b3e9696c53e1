/* test_forklocal.c — the fork-local page (common/forklocal.h): a child forked
 * while the parent holds the switch's locks finds them free, its counters,
 * pid cache and socket free list start over, and the parent keeps its own. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/forklocal.h"
#include "common/sys.h"
#include "switch/sock/sock.h"
#include "switch/switch.h"

/* Runs fn in a forked child (bounded by an alarm: a lock inherited held
 * would hang it) and returns its exit status, 99 for a signal. */
static int in_child(int (*fn)(void))
{
	pid_t p = fork();
	if (p == 0) {
		alarm(5);
		_exit(fn());
	}
	int st = 0;
	assert_int_equal(waitpid(p, &st, 0), p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static int child_locks(void)
{
	if (pthread_mutex_trylock(&ssw_fl->sock_pool_lock) != 0)
		return 1;
	if (pthread_mutex_trylock(&ssw_fl->pool_lock) != 0)
		return 2;
	if (pthread_rwlock_trywrlock(&ssw_fl->tab_lock) != 0)
		return 3;
	if (pthread_rwlock_trywrlock(&ssw_fl->fork_lock) != 0)
		return 4;
	pthread_mutex_unlock(&ssw_fl->sock_pool_lock);
	/* the switch's own path through the free list's lock */
	struct ssw_sock *s = ssw_sock_new(SSW_ST_CONNECTING, -1, AF_INET);
	if (!s)
		return 5;
	return 0;
}

/* The parent holds the locks across the fork, as another of its threads may. */
static void test_child_locks_free(void **state)
{
	(void)state;
	pthread_mutex_lock(&ssw_fl->sock_pool_lock);
	pthread_mutex_lock(&ssw_fl->pool_lock);
	pthread_rwlock_wrlock(&ssw_fl->tab_lock);
	pthread_rwlock_wrlock(&ssw_fl->fork_lock);
	int rc = in_child(child_locks);
	/* still held here: the child's are its own */
	assert_int_not_equal(pthread_mutex_trylock(&ssw_fl->sock_pool_lock), 0);
	pthread_rwlock_unlock(&ssw_fl->fork_lock);
	pthread_rwlock_unlock(&ssw_fl->tab_lock);
	pthread_mutex_unlock(&ssw_fl->pool_lock);
	pthread_mutex_unlock(&ssw_fl->sock_pool_lock);
	assert_int_equal(rc, 0);
}

static int child_state(void)
{
	if (atomic_load(&ssw_counters.switched) != 0)
		return 1;
	if (ssw_pid() != (pid_t)SYS_(getpid, 0))
		return 2;
	if (ssw_fl->sock_pool)
		return 3;
	return 0;
}

static void test_child_starts_over(void **state)
{
	(void)state;
	atomic_store(&ssw_counters.switched, 7);
	pid_t me = ssw_pid();
	/* one object on the free list */
	struct ssw_sock *s = ssw_sock_new(SSW_ST_CONNECTING, -1, AF_INET);
	assert_non_null(s);
	ssw_sock_put(s);
	assert_non_null(ssw_fl->sock_pool);
	assert_int_equal(in_child(child_state), 0);
	assert_int_equal(atomic_load(&ssw_counters.switched), 7);
	assert_int_equal(ssw_pid(), me);
	assert_non_null(ssw_fl->sock_pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_child_locks_free),
		cmocka_unit_test(test_child_starts_over),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
