/* test_listen_fork.c — a listener with several providers: fork closes the listeners of a provider without shared context, in both processes, and keeps the others. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/params.h"
#include "switch/route/providers.h"
#include "switch/setup/setup.h"
#include "switch/switch.h"

extern const struct ssw_provider ssw_provider_shm;

static int closed_shared, closed_private;
static int efd = -1;
static struct ssw_listener *const L_SHARED = (struct ssw_listener *)1, *const L_PRIVATE = (struct ssw_listener *)2;

static void fake_listener_close(struct ssw_listener *l)
{
	if (l == L_SHARED)
		closed_shared++;
	else if (l == L_PRIVATE)
		closed_private++;
}

static int fake_listener_fd(struct ssw_listener *l)
{
	(void)l;
	return efd;
}

/* shm's tables with fake listener ops; caps decide shared context */
static struct ssw_conn_ops conn;
static struct ssw_provider shared_raw, private_raw;
static struct ssw_provider_copy shared_p, private_p;

static void make_providers(void)
{
	conn = *ssw_provider_shm.conn;
	conn.listener_close = fake_listener_close;
	conn.listener_fd = fake_listener_fd;
	conn.listener_ready = NULL;
	shared_raw = ssw_provider_shm;
	shared_raw.conn = &conn;
	private_raw = shared_raw;
	private_raw.name = "private";
	private_raw.caps = 0; /* no SSW_CAP_SHARED_CONTEXT, no RDMA */
	char why[256];
	assert_int_equal(ssw_provider_check(&shared_raw, &shared_p, why, sizeof why), 0);
	assert_int_equal(ssw_provider_check(&private_raw, &private_p, why, sizeof why), 0);
}

static struct ssw_sock *make_listener(int fd)
{
	struct ssw_sock *s = ssw_sock_new(SSW_ST_LISTENING, fd, AF_INET);
	assert_non_null(s);
	s->pl[s->npl++] = (struct ssw_plisten){ &private_p.p, L_PRIVATE, SSW_PROTO_MAX, false };
	s->pl[s->npl++] = (struct ssw_plisten){ &shared_p.p, L_SHARED, SSW_PROTO_MAX, false };
	s->pl[s->npl++] = (struct ssw_plisten){ &private_p.p, L_PRIVATE, SSW_PROTO_MAX, false }; /* dual stack: a second one */
	return s;
}

/* What both processes must see after the fork. */
static int after_fork_ok(struct ssw_sock *s)
{
	return s->npl == 1 && s->pl[0].prov == &shared_p.p && s->pl[0].l == L_SHARED && closed_private == 2 &&
	       closed_shared == 0 && !ssw_setup_listener_has_private(s);
}

static void test_fork_drops_private_listeners(void **state)
{
	(void)state;
	assert_int_equal(ssw_fdtab_init(), 0);
	make_providers();
	efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0 && efd >= 0);
	struct ssw_sock *s = make_listener(fd);
	assert_true(ssw_setup_listener_has_private(s));
	ssw_fdtab_set(fd, s);
	ssw_sock_put(s); /* the table holds it */

	ssw_fork_begin();
	pid_t pid = fork();
	ssw_fork_end(pid);
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(after_fork_ok(s) ? 0 : 1);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0); /* the child closed them too */
	assert_true(after_fork_ok(s));
	/* readiness asks the remaining provider only */
	assert_false(ssw_listener_ready(s));
	uint64_t one = 1;
	assert_int_equal(write(efd, &one, sizeof one), sizeof one);
	assert_true(ssw_listener_ready(s));

	/* close: the remaining listener goes with the socket */
	struct ssw_sock *t = ssw_fdtab_take(fd);
	assert_ptr_equal(t, s);
	ssw_sock_put(t);
	assert_int_equal(closed_shared, 1);
	close(fd);
}

static void test_failed_fork(void **state)
{
	(void)state;
	assert_int_equal(ssw_fdtab_init(), 0);
	make_providers();
	closed_private = closed_shared = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct ssw_sock *s = make_listener(fd);
	ssw_fdtab_set(fd, s);
	ssw_sock_put(s);
	/* accepted on here: a failed fork leaves its private listeners */
	__atomic_store_n(&s->looked_by, ssw_pid(), __ATOMIC_RELAXED);
	ssw_fork_begin();
	ssw_fork_end(-1);
	assert_int_equal(s->npl, 3);
	assert_int_equal(closed_private, 0);
	/* never accepted on here: they go before the fork (no child may hold
	 * a copy that outlives the parent's), fork or not; the next accept or
	 * poll listens again */
	__atomic_store_n(&s->looked_by, 0, __ATOMIC_RELAXED);
	ssw_fork_begin();
	ssw_fork_end(-1);
	assert_int_equal(s->npl, 1);
	assert_int_equal(closed_private, 2);
	assert_true(s->lreopen);
	struct ssw_sock *t = ssw_fdtab_take(fd);
	ssw_sock_put(t);
	assert_int_equal(closed_private, 2);
	assert_int_equal(closed_shared, 1);
	close(fd);
}

int main(void)
{
	/* no stat registry: its refresher would hold references of its own,
	 * and the tests count the last one going */
	setenv("SOCKSWITCH_STAT", "0", 1);
	ssw_params_load();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_drops_private_listeners),
		cmocka_unit_test(test_failed_fork),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
