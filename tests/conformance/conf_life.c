/* conf_life.c — conformance of a connection's end: orderly close, abort,
 * a peer process killed, corrupt input from a hostile peer, and a close by
 * one of several holders (DETACH). */
#include "conf.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint32_t peer_state(struct ssw_ep *ep, int probe)
{
	return P->progress->peer_state(ep, probe, NULL);
}

/* After the end was seen, sends fail with the end's error: at once, or as
 * kernel TCP after at most a round trip (the transport learns of the end). */
static void send_fails(struct ssw_ep *ep)
{
	uint8_t b = 1;
	struct iovec v = { &b, 1 };
	int rc = 0, sent = 0;
	for (int64_t end = conf_ms() + 2000; conf_ms() < end; usleep(10000)) {
		rc = P->msg->send(ep, &v, 1);
		if (rc != 0 && rc != -EAGAIN)
			break;
		sent += rc == 0;
		conf_kick(ep);
	}
	if (sent)
		print_message("%d sends taken after the peer's end before %d\n", sent, rc);
	if (rc != -EPIPE && rc != -ECONNRESET)
		print_message("send after the peer's end: %d\n", rc);
	assert_true(rc == -EPIPE || rc == -ECONNRESET);
}

/* peer_state reports `bit` while messages are still unread ("poll must
 * report a FIN or a reset queued behind unread data"): at once for a
 * transport in memory, as soon as it arrived for a network; bounded. */
static void state_shows(struct ssw_ep *ep, uint32_t bit)
{
	int64_t t0 = conf_ms();
	while (!(P->progress->peer_state(ep, 0, NULL) & bit)) {
		assert_true(conf_ms() - t0 < 2000);
		conf_kick(ep);
		usleep(1000);
	}
	if (conf_ms() - t0 > 0)
		print_message("peer_state showed %s after %lld ms\n", bit == SSW_PEER_CLOSED ? "CLOSED" : "RESET",
			      (long long)(conf_ms() - t0));
}

/* The next result of recv_peek after waiting: an error that stays. */
static int end_seen(struct ssw_ep *ep, int ms)
{
	const void *m;
	size_t len;
	int rc = conf_wait(ep, NULL, &m, &len, ms);
	assert_true(rc < 0 && rc != -EAGAIN);
	for (int i = 0; i < 3; i++)
		assert_int_equal(P->msg->recv_peek(ep, &m, &len), rc); /* sticky */
	return rc;
}

/* The peer drains what was sent before the close, then -EPIPE; its
 * peer_state says CLOSED at once, and a sleeper is woken by the close. */
void conf_orderly_close(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	bool ps = CONF_HAS(P->progress, peer_state);
	if (ps)
		assert_int_equal(peer_state(a, 0), 0);
	for (unsigned i = 0; i < 3; i++)
		conf_send_seq(c, a, 20 + i, 100 * (i + 1));
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(a, c, &m, &len, 5000), 0); /* first one is there */
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	if (ps)
		state_shows(a, SSW_PEER_CLOSED); /* behind unread data */
	for (unsigned i = 0; i < 3; i++)
		conf_expect_seq(a, NULL, 20 + i, 100 * (i + 1));
	assert_int_equal(end_seen(a, 2000), -EPIPE);
	P->conn->close(a, SSW_CLOSE_ORDERLY);

	/* a sleeping receiver learns of the close */
	conf_pair_new(NULL, &c, &a);
	assert_int_equal(P->progress->arm(a), 0);
	struct pollfd pfd[8];
	int n = P->progress->wait_fds(a, pfd, 8);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	assert_true(poll(pfd, (nfds_t)n, 2000) > 0);
	/* the busy-polling hint sees the state change too */
	for (int64_t t0 = conf_ms(); !P->progress->rx_ready(a); usleep(1000)) {
		assert_true(conf_ms() - t0 < 2000);
		conf_kick(a);
	}
	P->progress->wake_ack(a);
	assert_int_equal(end_seen(a, 1000), -EPIPE);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

void conf_abort(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	conf_send_seq(c, a, 30, 30);
	conf_send_seq(c, a, 31, 31);
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(a, c, &m, &len, 5000), 0);
	P->conn->close(c, SSW_CLOSE_ABORT);
	if (CONF_HAS(P->progress, peer_state))
		state_shows(a, SSW_PEER_RESET);
	/* data in flight may be lost, as with TCP's RST: the reset comes within it */
	int rc = 0;
	for (int i = 0; i < 3 && rc == 0; i++) {
		rc = conf_wait(a, NULL, &m, &len, 2000);
		if (rc == 0)
			P->msg->recv_done(a);
	}
	assert_int_equal(rc, -ECONNRESET);
	assert_int_equal(end_seen(a, 100), -ECONNRESET);
	send_fails(a);
	P->conn->close(a, SSW_CLOSE_ABORT);
}

/* A peer process killed with our data unread: a reset (SPI recv_peek:
 * "-ECONNRESET on ... peer death"; as kernel TCP, unread data means RST). */
void conf_peer_killed_unread(void **state)
{
	(void)state;
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	struct ssw_ep *a = NULL;
	pid_t pid = conf_spawn_peer("hold", 0, l, &dst, dlen, &a);
	for (unsigned i = 0; i < 3; i++)
		conf_send_seq(a, NULL, 40 + i, 4000);
	conf_kill_peer(pid);
	if (CONF_HAS(P->progress, peer_state)) {
		/* a probe finds a peer that died without a word, before any recv */
		int64_t t0 = conf_ms();
		while (!(peer_state(a, 1) & (SSW_PEER_RESET | SSW_PEER_CLOSED))) {
			assert_true(conf_ms() - t0 < 3000);
			usleep(1000);
		}
	}
	int rc = end_seen(a, 5000);
	print_message("peer killed with data unread: %s\n", strerror(-rc));
	assert_int_equal(rc, -ECONNRESET);
	if (CONF_HAS(P->progress, peer_state))
		assert_true(peer_state(a, 1) & SSW_PEER_RESET);
	send_fails(a);
	P->conn->close(a, SSW_CLOSE_ABORT);
	P->conn->listener_close(l);
}

/* A peer process killed after it read everything: what it sent before is
 * ours, then the end.  The SPI allows -ECONNRESET (recv_peek) or an orderly
 * end (-EPIPE: send_ctl, peer_state); peer_state must agree with recv_peek. */
void conf_peer_killed_quiet(void **state)
{
	(void)state;
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	struct ssw_ep *a = NULL;
	enum { N = 5 };
	pid_t pid = conf_spawn_peer("send", N, l, &dst, dlen, &a);
	for (unsigned i = 0; i < N; i++)
		conf_expect_seq(a, NULL, i, 100 + i);
	/* a sleeper is woken by the death */
	int armed = P->progress->arm(a);
	assert_true(armed >= 0);
	struct pollfd pfd[8];
	int n = P->progress->wait_fds(a, pfd, 8);
	conf_kill_peer(pid);
	assert_true(poll(pfd, (nfds_t)n, 3000) > 0);
	P->progress->wake_ack(a);
	int rc = end_seen(a, 5000);
	print_message("peer killed with nothing unread: %s\n", strerror(-rc));
	assert_true(rc == -EPIPE || rc == -ECONNRESET);
	if (CONF_HAS(P->progress, peer_state)) {
		uint32_t st = peer_state(a, 1);
		assert_true(rc == -EPIPE ? (st & SSW_PEER_CLOSED) && !(st & SSW_PEER_RESET) : (st & SSW_PEER_RESET));
	}
	P->conn->close(a, SSW_CLOSE_ABORT);
	P->conn->listener_close(l);
}

/* Corrupt input fails that one endpoint with -ECONNRESET, never more: another
 * connection carries on, the listener still accepts. */
void conf_corrupt_input(void **state)
{
	(void)state;
	if (!conf_env->corrupt)
		CONF_SKIP("the instantiation has no hook to corrupt the provider's input");
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	struct ssw_ep *bc, *ba;
	conf_pair(l, &dst, dlen, &bc, &ba); /* the bystander */
	int v = 0;
	for (;; v++) {
		struct ssw_ep *c, *a;
		conf_pair(l, &dst, dlen, &c, &a);
		conf_send_seq(c, a, 60, 60); /* good data first */
		conf_expect_seq(a, c, 60, 60);
		if (!conf_env->corrupt(c, v)) {
			P->conn->close(c, SSW_CLOSE_ABORT);
			P->conn->close(a, SSW_CLOSE_ABORT);
			break;
		}
		int rc = end_seen(a, 3000);
		if (rc != -ECONNRESET)
			print_message("corruption %d: %s\n", v, strerror(-rc));
		assert_int_equal(rc, -ECONNRESET);
		if (CONF_HAS(P->progress, peer_state))
			(void)peer_state(a, 1); /* may look at the corrupt input: must not crash */
		send_fails(a);
		P->conn->close(a, SSW_CLOSE_ABORT);
		P->conn->close(c, SSW_CLOSE_ABORT);
		conf_send_seq(bc, ba, 70 + (unsigned)v, 700);
		conf_send_seq(ba, bc, 80 + (unsigned)v, 800);
		conf_expect_seq(ba, bc, 70 + (unsigned)v, 700);
		conf_expect_seq(bc, ba, 80 + (unsigned)v, 800);
	}
	print_message("%d kinds of corrupt input, each a reset of its endpoint only\n", v);
	assert_true(v >= 1);
	struct ssw_ep *c, *a;
	conf_pair(l, &dst, dlen, &c, &a);
	conf_send_seq(c, a, 90, 9);
	conf_expect_seq(a, c, 90, 9);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
	P->conn->close(bc, SSW_CLOSE_ORDERLY);
	P->conn->close(ba, SSW_CLOSE_ORDERLY);
	P->conn->listener_close(l);
}

/* SSW_CLOSE_DETACH by one holder (a forked child) tells the peer nothing;
 * the other holder carries on.  Needs an endpoint shared across fork. */
void conf_detach(void **state)
{
	(void)state;
	if (!(P->caps & SSW_CAP_SHARED_CONTEXT))
		CONF_SKIP("no SSW_CAP_SHARED_CONTEXT: an endpoint has one holder, DETACH has no second to leave");
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	assert_true(P->conn->ep_caps(c) & SSW_CAP_SHARED_CONTEXT);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		P->conn->close(c, SSW_CLOSE_DETACH);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(a, c, &m, &len, 200), -EAGAIN); /* no end seen */
	if (CONF_HAS(P->progress, peer_state))
		assert_int_equal(peer_state(a, 1), 0);
	conf_send_seq(c, a, 95, 95);
	conf_send_seq(a, c, 96, 96);
	conf_expect_seq(a, c, 95, 95);
	conf_expect_seq(c, a, 96, 96);
	/* the last holder's close is the end */
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	assert_int_equal(end_seen(a, 2000), -EPIPE);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* A peer process killed with only control messages of ours unread
 * (send_ctl: "ends the connection in order"): -EPIPE, not a reset. */
void conf_peer_killed_ctl_unread(void **state)
{
	(void)state;
	if (!CONF_HAS(P->msg, send_ctl))
		CONF_SKIP("send_ctl absent (optional: then any unread message means a reset)");
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	struct ssw_ep *a = NULL;
	pid_t pid = conf_spawn_peer("hold", 0, l, &dst, dlen, &a);
	uint8_t b[32];
	conf_fill(b, sizeof b, 1);
	struct iovec v = { b, sizeof b };
	for (int i = 0; i < 3; i++)
		assert_int_equal(P->msg->send_ctl(a, &v, 1), 0);
	conf_kill_peer(pid);
	int rc = end_seen(a, 5000);
	print_message("peer killed with control messages unread: %s\n", strerror(-rc));
	assert_int_equal(rc, -EPIPE);
	if (CONF_HAS(P->progress, peer_state))
		assert_false(peer_state(a, 1) & SSW_PEER_RESET);
	P->conn->close(a, SSW_CLOSE_ABORT);
	P->conn->listener_close(l);
}

/* The fork-per-connection server: after fork the parent lets go of its copy
 * (DETACH: a word to nobody) and the child carries the connection on, then
 * closes it; the peer sees only the child's messages and the end. */
void conf_fork_handover(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	conf_send_seq(c, a, 110, 11); /* used before the fork */
	conf_expect_seq(a, c, 110, 11);
	int go[2];
	assert_int_equal(pipe(go), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* no cmocka assertion here: a failure must not resume the run in the child */
		char b;
		close(go[1]);
		if (read(go[0], &b, 1) != 1)
			_exit(2);
		uint8_t msg[120];
		conf_fill(msg, sizeof msg, 111);
		struct iovec v = { msg, sizeof msg };
		int rc;
		for (int i = 0; (rc = P->msg->send(c, &v, 1)) == -EAGAIN && i < 1000; i++)
			usleep(1000);
		if (rc)
			_exit(3);
		const void *m;
		size_t len;
		rc = conf_wait(c, NULL, &m, &len, 5000);
		conf_fill(msg, sizeof msg, 112);
		if (rc || len != 60 || memcmp(m, msg, 60))
			_exit(4);
		P->msg->recv_done(c);
		P->conn->close(c, SSW_CLOSE_ORDERLY);
		_exit(0);
	}
	close(go[0]);
	P->conn->close(c, SSW_CLOSE_DETACH);
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(a, NULL, &m, &len, 200), -EAGAIN); /* the detach said nothing */
	if (CONF_HAS(P->progress, peer_state))
		assert_int_equal(peer_state(a, 1), 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	conf_expect_seq(a, NULL, 111, 120);
	conf_send_seq(a, NULL, 112, 60);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail_msg("the child holding the connection failed: status %#x", st);
	assert_int_equal(end_seen(a, 3000), -EPIPE);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* Once the peer is gone and that was seen, sends fail (SPI send: "-ECONNRESET
 * / -EPIPE when the peer is gone"), as kernel TCP's after a round trip: a
 * sender waiting for room that never comes would hang. */
void conf_send_after_end(void **state)
{
	(void)state;
	/* the peer closed in order */
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	assert_int_equal(end_seen(a, 2000), -EPIPE);
	send_fails(a);
	P->conn->close(a, SSW_CLOSE_ORDERLY);

	/* the peer's process was killed */
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	pid_t pid = conf_spawn_peer("hold", 0, l, &dst, dlen, &a);
	conf_kill_peer(pid);
	int rc = end_seen(a, 5000);
	assert_true(rc == -EPIPE || rc == -ECONNRESET);
	send_fails(a);
	P->conn->close(a, SSW_CLOSE_ABORT);
	P->conn->listener_close(l);
}
