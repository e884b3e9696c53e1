/* test_fabric_wake.c — who wakes a waiter armed on a fabric endpoint now
 * that the CQ's own signal is out of its wait fds: a waiter whose message
 * another thread read is rung (wake_fd), and an armed endpoint is not made
 * ready by the completions of its own sends (an epoll server registers the
 * wait fds for good: it would wake for nothing at every send). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fabric_pair.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int base_port;

/* Until fd is readable (not read) or 5 s. */
static bool readable_within(int fd, int ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	return poll(&pf, 1, ms) == 1;
}

/* A thread armed for a message that arrives and is read by another thread
 * before it sleeps: the socket it sleeps on is quiet by then, so it must
 * be rung (before, the CQ's signal in its wait fds did it). */
static void test_reader_rings_sleeper(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port);
	const void *m;
	size_t len;
	/* the connection's own traffic (its private data, credits) read first */
	assert_int_equal(P->msg->recv_peek(p.s, &m, &len), -EAGAIN);
	for (int round = 0; round < 3; round++) {
		struct sleeper z = { .ep = p.s };
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, sleeper_main, &z), 0);
		while (atomic_load(&z.stage) != 1)
			usleep(100);
		assert_int_equal(z.armed, 0);
		assert_int_equal(sendstr(p.c, "wake", 4), 0);
		struct pollfd pf[4];
		int n = P->progress->wait_fds(p.s, pf, 4);
		assert_true(n >= 1);
		assert_true(readable_within(pf[0].fd, 5000)); /* in the socket, unread */
		/* this thread reads it (a send's look, a second reader) */
		int rc = -EAGAIN;
		for (int i = 0; i < 5000 && rc == -EAGAIN; i++) {
			rc = P->msg->recv_peek(p.s, &m, &len);
			if (rc == -EAGAIN)
				usleep(100);
		}
		assert_int_equal(rc, 0);
		assert_int_equal(len, 4);
		P->msg->recv_done(p.s);
		atomic_store(&z.stage, 2);
		pthread_join(t, NULL);
		assert_int_equal(z.woke, 1);
		assert_true(z.slept_ns < 1000000000ull);
	}
	free_pair(&p);
}

/* An armed endpoint (an epoll set's member between two looks) whose owner
 * sends: the completions of those sends are nobody's news, its wait fds
 * stay quiet; a message from the peer still wakes it. */
static void test_own_sends_wake_nobody(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 1);
	const void *m;
	size_t len;
	assert_int_equal(P->msg->recv_peek(p.s, &m, &len), -EAGAIN);
	size_t big = 60000; /* beyond an inject: each send has a completion */
	char *b = calloc(1, big);
	struct iovec v = { b, big };
	for (int round = 0; round < 3; round++) {
		assert_int_equal(P->progress->arm(p.s), 0);
		struct pollfd pf[4];
		int n = P->progress->wait_fds(p.s, pf, 4);
		assert_true(n >= 1);
		for (int i = 0; i < 3; i++)
			assert_int_equal(P->msg->send(p.s, &v, 1), 0);
		/* the peer takes them (its reading sends credits back later) */
		for (int i = 0; i < 3; i++) {
			assert_int_equal(recv_wait(p.c, &m, &len), 0);
			assert_int_equal(len, big);
			P->msg->recv_done(p.c);
		}
		/* completed, unread: nothing for the sleeper (the CQ's signal,
		 * written at each, is in no wait fd) ... */
		assert_int_equal(poll(pf, (nfds_t)n, 100), 0);
		/* ... nor once a look has read them */
		assert_int_equal(P->progress->rx_ready(p.s), 0);
		assert_int_equal(poll(pf, (nfds_t)n, 100), 0);
		/* the peer's message does wake it */
		assert_int_equal(sendstr(p.c, "news", 4), 0);
		assert_int_equal(poll(pf, (nfds_t)n, 5000), 1);
		P->progress->wake_ack(p.s);
		assert_int_equal(recv_wait(p.s, &m, &len), 0);
		assert_int_equal(len, 4);
		P->msg->recv_done(p.s);
	}
	free(b);
	free_pair(&p);
}

int main(void)
{
	char err[160];
	/* fabric ports (app port + 10000) apart from test_fabric's */
	base_port = 51000 + (int)(getpid() % 1000) * 4;
	if (P->configure("provider", "tcp", err, sizeof err) || P->configure("port-offset", "10000", err, sizeof err) ||
	    P->init() != 0) {
		fprintf(stderr, "fabric provider unusable: %s\n", err);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reader_rings_sleeper),
		cmocka_unit_test(test_own_sends_wake_nobody),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
