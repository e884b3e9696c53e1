/* conf_run.c — runs the conformance cases for one provider, each bounded in time,
 * and plays the peer process of the cases that kill one (a re-execution of the suite). */
#include "conf.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CASE_SECONDS 20 /* a case that takes longer hangs: fail it loudly */

static void on_alarm(int sig)
{
	(void)sig;
	char msg[200];
	/* the case is the last one cmocka announced as RUN */
	int n = snprintf(msg, sizeof msg, "conformance: the running case hung (over %d s): failing the run\n",
			 CASE_SECONDS);
	(void)!write(2, msg, (size_t)n);
	_exit(3);
}

static int case_setup(void **state)
{
	(void)state;
	alarm(CASE_SECONDS);
	return 0;
}

static int case_teardown(void **state)
{
	(void)state;
	alarm(0);
	if (conf_env->release)
		conf_env->release();
	conf_release_ports();
	return 0;
}

/* ---- the peer process ------------------------------------------------------ */

static void hex(char *out, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void unhex(void *p, const char *s, size_t n)
{
	uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		unsigned v = 0;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			exit(2);
		b[i] = (uint8_t)v;
	}
}

pid_t conf_spawn_peer(const char *role, int n, struct ssw_listener *l, const struct sockaddr_storage *dst,
		      socklen_t dlen, struct ssw_ep **a)
{
	int pp[2];
	assert_int_equal(pipe(pp), 0);
	char addr[2 * sizeof *dst + 1], num[16], fd[16];
	hex(addr, dst, dlen);
	snprintf(num, sizeof num, "%d", n);
	snprintf(fd, sizeof fd, "%d", pp[1]);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pp[0]);
		char *args[] = { "conformance-peer", "--conf-peer", (char *)role, num, addr, fd, NULL };
		execv("/proc/self/exe", args);
		_exit(127);
	}
	close(pp[1]);
	/* accept while it connects: a provider may need the listener to move */
	uint8_t priv[SSW_CONNECT_PRIV_MAX];
	size_t plen = sizeof priv;
	int rc = conf_accept(l, a, priv, &plen, 10000);
	char ok = 0;
	struct pollfd p = { .fd = pp[0], .events = POLLIN };
	for (int64_t end = conf_ms() + 10000; !ok && conf_ms() < end;) {
		if (poll(&p, 1, 10) == 1 && read(pp[0], &ok, 1) != 1)
			break; /* it died */
		if (*a)
			conf_kick(*a);
	}
	close(pp[0]);
	if (rc || ok != 'R') {
		conf_kill_peer(pid);
		fail_msg("peer process (%s) did not connect: accept %d, ready %d", role, rc, ok);
	}
	return pid;
}

void conf_kill_peer(pid_t pid)
{
	int st;
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

/* The child's side: connect, play the role, say "ready", idle until killed. */
static int peer_main(char **argv)
{
	struct sockaddr_storage dst;
	memset(&dst, 0, sizeof dst);
	size_t alen = strlen(argv[4]) / 2;
	if (alen > sizeof dst)
		return 2;
	unhex(&dst, argv[4], alen);
	int n = atoi(argv[3]), fd = atoi(argv[5]);
	if ((conf_env->setup && conf_env->setup() < 0) || P->init() < 0)
		return 2;
	struct ssw_ep *ep = NULL;
	uint8_t priv[8] = "peer";
	int rc = conf_connect((struct sockaddr *)&dst, (socklen_t)alen, priv, sizeof priv, &ep);
	if (rc == -EINPROGRESS) {
		char reply[SSW_CONNECT_PRIV_MAX];
		size_t rlen = sizeof reply;
		rc = conf_connect_wait(ep, NULL, reply, &rlen, 10000);
	}
	if (rc)
		return 3;
	if (!strcmp(argv[2], "send"))
		for (int i = 0; i < n; i++)
			conf_send_seq(ep, NULL, (unsigned)i, 100 + (size_t)i);
	if (write(fd, "R", 1) != 1)
		return 4;
	for (int i = 0; i < 6000; i++) { /* 60 s at most, should the parent forget us */
		conf_kick(ep);
		usleep(10000);
	}
	return 5;
}

#define T(f) { #f, f, case_setup, case_teardown, NULL }

static const struct CMUnitTest all_cases[] = {
	T(conf_spi_tables),
	T(conf_configure_describe),
	T(conf_connect_accept),
	T(conf_shared_accept_once),
	T(conf_connect_without_accept),
	T(conf_wildcard_and_inuse),
	T(conf_connect_nobody),
	T(conf_listener_readiness),
	T(conf_listener_close_keeps_eps),
	T(conf_sizes_and_order),
	T(conf_flow_control),
	T(conf_room_agrees),
	T(conf_arm_wake),
	T(conf_sleeper_woken),
	T(conf_two_sleepers),
	T(conf_wait_hints),
	T(conf_threads_contract),
	T(conf_reserve_commit),
	T(conf_hold_flush),
	T(conf_note_fin_mark),
	T(conf_note_tag),
	T(conf_rdma_read_write),
	T(conf_rdma_bad_desc),
	T(conf_rdma_deregistered),
	T(conf_rdma_close_pending),
	T(conf_rdma_bad_local),
	T(conf_rdma_peer_gone),
	T(conf_orderly_close),
	T(conf_abort),
	T(conf_send_after_end),
	T(conf_peer_killed_unread),
	T(conf_peer_killed_quiet),
	T(conf_peer_killed_ctl_unread),
	T(conf_corrupt_input),
	T(conf_detach),
	T(conf_fork_handover),
};
enum { NCASES = sizeof all_cases / sizeof all_cases[0] };

/* The instantiation's reason when `name` is a known deviation, else NULL. */
static const char *deviation(const char *name)
{
	size_t n = strlen(name);
	for (const char *const *d = conf_env->deviations; d && *d; d++)
		if (!strncmp(*d, name, n) && (*d)[n] == ':')
			return *d + n + 1;
	return NULL;
}

#define DEV_FAILED 42

/* A known deviation must still fail (in a child, so that its failure cannot
 * disturb the other cases); 0 when it did. */
static int run_deviation(const struct CMUnitTest *t, const char *why)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) /* its own code: a crash or a sanitizer's report is no expected failure */
		_exit(_cmocka_run_group_tests(t->name, t, 1, NULL, NULL) ? DEV_FAILED : 0);
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid) {
		fprintf(stderr, "conformance: cannot run %s\n", t->name);
		return 1;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		printf("[ XPASS    ] %s: %s conforms now; drop its deviation (\"%s\")\n", t->name, P->name, why);
		return 1;
	}
	/* "crash: ..." : the known deviation is that the provider crashes there */
	bool crash_known = !strncmp(why, " crash:", 7) || !strncmp(why, "crash:", 6);
	if (crash_known && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		printf("[ DEVIATES ] %s: known deviation of %s from the SPI:%s (status %#x)\n", t->name, P->name, why, st);
		return 0;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != DEV_FAILED) {
		printf("[ CRASHED  ] %s: known deviation, but it ended otherwise than by failing (status %#x)\n", t->name, st);
		return 1;
	}
	printf("[ DEVIATES ] %s: known deviation of %s from the SPI:%s\n", t->name, P->name, why);
	return 0;
}

int conf_run(const struct conf_env *env, int argc, char **argv)
{
	conf_env = env;
	signal(SIGPIPE, SIG_IGN);
	if (argc == 6 && !strcmp(argv[1], "--conf-peer"))
		return peer_main(argv);
	if (env->setup && env->setup() < 0) {
		fprintf(stderr, "conformance %s: environment setup failed\n", env->prov->name);
		return 1;
	}
	if (env->prov->configure)
		conf_configure_rc = env->prov->configure(CONF_BAD_KEY, "1", conf_configure_err, sizeof conf_configure_err);
	int rc = env->prov->init();
	if (rc < 0) {
		fprintf(stderr, "conformance %s: init: %s\n", env->prov->name, strerror(-rc));
		return 1;
	}
	signal(SIGALRM, on_alarm);
	struct CMUnitTest cases[NCASES], devs[NCASES];
	int nc = 0, nd = 0;
	for (int i = 0; i < NCASES; i++) {
		if (deviation(all_cases[i].name))
			devs[nd++] = all_cases[i];
		else
			cases[nc++] = all_cases[i];
	}
	char group[64];
	snprintf(group, sizeof group, "conformance.%s", env->prov->name);
	int failed = _cmocka_run_group_tests(group, cases, (size_t)nc, NULL, NULL);
	for (int i = 0; i < nd; i++)
		failed += run_deviation(&devs[i], deviation(devs[i].name));
	return failed;
}
