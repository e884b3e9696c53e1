/* conf_conn.c — conformance of connection set-up: listen, connect, accept,
 * refused connects, listener readiness and the listener's end. */
#include "session/session.h"
#include "conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A connect to something that is gone or never was: an error (at once or
 * from connect_complete, bounded), never a connection.  Returns it. */
static int connect_fails(const struct sockaddr_storage *dst, socklen_t dlen)
{
	struct ssw_ep *ep = NULL;
	int64_t t0 = conf_ms();
	int rc = conf_connect((const struct sockaddr *)dst, dlen, "x", 1, &ep);
	if (rc == -EINPROGRESS) {
		char reply[SSW_CONNECT_PRIV_MAX];
		size_t rlen = sizeof reply;
		rc = conf_connect_wait(ep, NULL, reply, &rlen, 5000);
		assert_int_not_equal(rc, -ETIMEDOUT);
		P->conn->close(ep, SSW_CLOSE_ABORT); /* "on error the endpoint must still be closed" */
	}
	assert_int_not_equal(rc, 0);
	assert_true(rc < 0);
	/* a host without the switch costs at most a round trip, not a timeout */
	assert_true(conf_ms() - t0 < 3000);
	return rc;
}

void conf_connect_accept(void **state)
{
	(void)state;
	struct ssw_listener *l;
	struct ssw_ep *c, *a;
	conf_pair_new(&l, &c, &a);

	/* an endpoint offers at most what its provider offers */
	assert_int_equal(P->conn->ep_caps(c) & ~P->caps, 0);
	assert_int_equal(P->conn->ep_caps(a) & ~P->caps, 0);
	/* room for a session header and some data in every message */
	assert_true(P->msg->max_msg(c) >= 64);
	assert_true(P->msg->max_msg(a) >= 64);

	if (CONF_HAS(P->conn, peer_cred)) {
		uint32_t uid;
		int32_t pid;
		/* both ends live in this process */
		assert_int_equal(P->conn->peer_cred(a, &uid, &pid), 0);
		assert_int_equal(uid, getuid());
		assert_int_equal(pid, getpid());
		assert_int_equal(P->conn->peer_cred(c, &uid, &pid), 0);
		assert_int_equal(uid, getuid());
	}
	if (CONF_HAS(P->conn, peer_addr)) {
		struct sockaddr_storage pa;
		socklen_t plen = sizeof pa;
		int rc = P->conn->peer_addr(a, &pa, &plen);
		/* vouched for by the transport: where the connector is */
		if (rc != -ENOSYS) {
			assert_int_equal(rc, 0);
			assert_int_equal(pa.ss_family, AF_INET);
			char ip[INET_ADDRSTRLEN] = "?";
			inet_ntop(AF_INET, &((struct sockaddr_in *)&pa)->sin_addr, ip, sizeof ip);
			print_message("peer_addr: %s\n", ip);
			if (conf_env->peer_ip)
				assert_string_equal(ip, conf_env->peer_ip);
			else
				assert_int_equal(ntohl(((struct sockaddr_in *)&pa)->sin_addr.s_addr) >> 24, 127);
		}
	}
	conf_send_seq(c, a, 1, 10);
	conf_send_seq(a, c, 2, 20);
	conf_expect_seq(a, c, 1, 10);
	conf_expect_seq(c, a, 2, 20);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
	P->conn->listener_close(l);

	/* the largest private data arrives whole; none at all too */
	struct sockaddr_storage dst;
	socklen_t dlen;
	l = conf_listen(0, &dst, &dlen);
	for (size_t plen = SSW_CONNECT_PRIV_MAX;; plen = 0) {
		uint8_t priv[SSW_CONNECT_PRIV_MAX], got[SSW_CONNECT_PRIV_MAX + 8];
		conf_fill(priv, sizeof priv, 11);
		int rc = conf_connect((struct sockaddr *)&dst, dlen, priv, plen, &c);
		assert_true(rc == 0 || rc == -EINPROGRESS);
		if (rc == -EINPROGRESS) {
			char reply[SSW_CONNECT_PRIV_MAX];
			size_t rlen = sizeof reply;
			assert_int_equal(conf_connect_wait(c, l, reply, &rlen, 5000), 0);
		}
		size_t glen = sizeof got;
		assert_int_equal(conf_accept(l, &a, got, &glen, 5000), 0);
		assert_int_equal(glen, plen);
		assert_memory_equal(got, priv, plen);
		P->conn->close(c, SSW_CLOSE_ORDERLY);
		P->conn->close(a, SSW_CLOSE_ORDERLY);
		if (!plen)
			break;
	}
	P->conn->listener_close(l);
}

/* Seed 001: connects complete while nobody accepts, and a connector may
 * send at once; accept later finds each request with its own private data. */
void conf_connect_without_accept(void **state)
{
	(void)state;
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	enum { N = 3 };
	struct ssw_ep *c[N], *a[N] = { 0 };
	for (int i = 0; i < N; i++) {
		uint8_t priv[4] = { 'c', 'o', 'n', (uint8_t)i };
		int rc = conf_connect((struct sockaddr *)&dst, dlen, priv, sizeof priv, &c[i]);
		assert_true(rc == 0 || rc == -EINPROGRESS);
		if (rc == -EINPROGRESS) {
			/* connect_fd becomes readable when connect_complete can tell */
			struct pollfd p = { .fd = P->conn->connect_fd(c[i]), .events = POLLIN };
			assert_int_equal(poll(&p, 1, 5000), 1);
			char reply[SSW_CONNECT_PRIV_MAX];
			size_t rlen = sizeof reply;
			int64_t t0 = conf_ms();
			while ((rc = P->conn->connect_complete(c[i], reply, &rlen)) == -EINPROGRESS && conf_ms() - t0 < 100)
				rlen = sizeof reply;
			assert_int_equal(rc, 0);
		}
		conf_send_seq(c[i], NULL, 100 + (unsigned)i, 50 + (size_t)i);
	}
	for (int k = 0; k < N; k++) {
		uint8_t priv[SSW_CONNECT_PRIV_MAX];
		size_t plen = sizeof priv;
		struct ssw_ep *ep;
		assert_int_equal(conf_accept(l, &ep, priv, &plen, 5000), 0);
		assert_int_equal(plen, 4);
		assert_memory_equal(priv, "con", 3);
		int i = priv[3];
		assert_true(i < N);
		assert_null(a[i]); /* each request once */
		a[i] = ep;
	}
	uint8_t priv[8];
	size_t plen = sizeof priv;
	struct ssw_ep *extra;
	assert_int_equal(P->conn->accept(l, &extra, priv, &plen), -EAGAIN);
	for (int i = 0; i < N; i++) {
		conf_expect_seq(a[i], c[i], 100 + (unsigned)i, 50 + (size_t)i);
		P->conn->close(c[i], SSW_CLOSE_ORDERLY);
		P->conn->close(a[i], SSW_CLOSE_ORDERLY);
	}
	P->conn->listener_close(l);
}

void conf_wildcard_and_inuse(void **state)
{
	(void)state;
	for (int wild = 1; wild >= 0; wild--) {
		struct sockaddr_storage at, dst;
		socklen_t len;
		struct ssw_listener *l = NULL, *l2 = NULL;
		struct ssw_ep *c, *a;
		assert_int_equal(conf_env->addr(wild, &at, &dst, &len), 0);
		assert_int_equal(P->conn->listen((struct sockaddr *)&at, len, 8, SSW_PROTO_MAX, &l), 0);
		/* a wildcard listener serves the specific local address */
		conf_pair(l, &dst, len, &c, &a);
		conf_send_seq(c, a, 3, 33);
		conf_expect_seq(a, c, 3, 33);
		/* another provider listener on that exact address: refused */
		assert_int_equal(P->conn->listen((struct sockaddr *)&at, len, 8, SSW_PROTO_MAX, &l2), -EADDRINUSE);
		P->conn->close(c, SSW_CLOSE_ORDERLY);
		P->conn->close(a, SSW_CLOSE_ORDERLY);
		P->conn->listener_close(l);
	}
}

void conf_connect_nobody(void **state)
{
	(void)state;
	struct sockaddr_storage dst;
	socklen_t dlen;
	assert_int_equal(conf_env->unused_addr(&dst, &dlen), 0);
	int rc = connect_fails(&dst, dlen);
	bool refused = rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -EHOSTUNREACH;
	print_message("connect to nobody: %s (%s)\n", strerror(-rc), refused ? "refused" : "fall back to kernel TCP");
	assert_true(conf_env->refused_ok & (refused ? CONF_REFUSED : CONF_FALLBACK));
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* listener_fd and listener_ready say what accept will do. */
void conf_listener_readiness(void **state)
{
	(void)state;
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	const struct ssw_conn_ops *co = P->conn;
	bool has_ready = CONF_HAS(co, listener_ready);
	int lfd = co->listener_fd(l);
	assert_true(lfd >= 0);
	assert_false(readable(lfd, 0));
	if (has_ready)
		assert_int_equal(co->listener_ready(l), 0);
	if (!has_ready)
		print_message("(listener_ready absent: listener_fd alone tells)\n");

	enum { N = 2 };
	struct ssw_ep *c[N], *a[N];
	for (int i = 0; i < N; i++) {
		char priv[2] = { 'r', (char)i };
		int rc = conf_connect((struct sockaddr *)&dst, dlen, priv, 2, &c[i]);
		assert_true(rc == 0 || rc == -EINPROGRESS);
		if (rc == -EINPROGRESS) {
			char reply[SSW_CONNECT_PRIV_MAX];
			size_t rlen = sizeof reply;
			assert_int_equal(conf_connect_wait(c[i], l, reply, &rlen, 5000), 0);
		}
	}
	for (int k = 0; k < N; k++) {
		uint8_t priv[8];
		size_t plen = sizeof priv;
		struct ssw_ep *ep;
		/* readable while a request waits; once ready says yes, accept succeeds */
		int64_t end = conf_ms() + 5000;
		for (;;) {
			assert_true(conf_ms() < end);
			if (!readable(lfd, 100))
				continue;
			if (!has_ready || co->listener_ready(l) == 1)
				break;
		}
		assert_int_equal(co->accept(l, &ep, priv, &plen), 0);
		assert_int_equal(plen, 2);
		assert_true(priv[0] == 'r' && priv[1] < N);
		a[priv[1]] = ep; /* requests may be taken in any order */
	}
	uint8_t priv[8];
	size_t plen = sizeof priv;
	struct ssw_ep *none;
	assert_int_equal(co->accept(l, &none, priv, &plen), -EAGAIN);
	if (has_ready)
		assert_int_equal(co->listener_ready(l), 0);
	/* nothing left to take: quiet (no busy loop for a poller) */
	assert_false(readable(lfd, 0));
	for (int i = 0; i < N; i++) {
		conf_send_seq(c[i], a[i], 40 + (unsigned)i, 9);
		conf_expect_seq(a[i], c[i], 40 + (unsigned)i, 9);
		co->close(c[i], SSW_CLOSE_ORDERLY);
		co->close(a[i], SSW_CLOSE_ORDERLY);
	}
	co->listener_close(l);
}

/* Stop listening; endpoints already accepted stay valid, new connects fail. */
void conf_listener_close_keeps_eps(void **state)
{
	(void)state;
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	struct ssw_ep *c, *a;
	conf_pair(l, &dst, dlen, &c, &a);
	P->conn->listener_close(l);
	conf_send_seq(c, a, 5, 500);
	conf_send_seq(a, c, 6, 600);
	conf_expect_seq(a, c, 5, 500);
	conf_expect_seq(c, a, 6, 600);
	int rc = connect_fails(&dst, dlen);
	print_message("connect after listener_close: %s\n", strerror(-rc));
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* The forked sharer of conf_shared_accept_once: accepts for 500 ms, answers
 * on each connection it took, reports their ids on fd and exits (no cmocka
 * assertion here: a failure must not resume the parent's run in the child). */
static int sharer(struct ssw_listener *l, int fd, int n)
{
	uint8_t ids[64];
	int k = 0;
	for (int64_t end = conf_ms() + 500; conf_ms() < end && k < n;) {
		uint8_t priv[SSW_CONNECT_PRIV_MAX], msg[50];
		size_t plen = sizeof priv;
		struct ssw_ep *ep;
		int rc = P->conn->accept(l, &ep, priv, &plen);
		if (rc == -EAGAIN) {
			struct pollfd p = { .fd = P->conn->listener_fd(l), .events = POLLIN };
			poll(&p, 1, 20);
			continue;
		}
		if (rc || plen != 2 || priv[0] != 's' || priv[1] >= n)
			return 2;
		conf_fill(msg, sizeof msg, 500u + priv[1]);
		struct iovec v = { msg, sizeof msg };
		if (P->msg->send(ep, &v, 1))
			return 3;
		ids[k++] = priv[1];
	}
	return write(fd, ids, (size_t)k) == k ? 0 : 4;
}

/* Any process sharing the listener may accept; exactly one gets each
 * request.  Needs a listener shared across fork (SSW_CAP_SHARED_CONTEXT). */
void conf_shared_accept_once(void **state)
{
	(void)state;
	if (!(P->caps & SSW_CAP_SHARED_CONTEXT))
		CONF_SKIP("no SSW_CAP_SHARED_CONTEXT: a listener is not shared across fork");
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *l = conf_listen(0, &dst, &dlen);
	enum { N = 6 };
	struct ssw_ep *c[N], *a[N] = { 0 };
	for (int i = 0; i < N; i++) {
		uint8_t priv[2] = { 's', (uint8_t)i };
		int rc = conf_connect((struct sockaddr *)&dst, dlen, priv, 2, &c[i]);
		assert_true(rc == 0 || rc == -EINPROGRESS);
		if (rc == -EINPROGRESS) {
			char reply[SSW_CONNECT_PRIV_MAX];
			size_t rlen = sizeof reply;
			assert_int_equal(conf_connect_wait(c[i], l, reply, &rlen, 5000), 0);
		}
	}
	int pp[2];
	assert_int_equal(pipe(pp), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(sharer(l, pp[1], N));
	close(pp[1]);
	int nmine = 0;
	int64_t end = conf_ms() + 500;
	while (conf_ms() < end && nmine < N) {
		uint8_t priv[SSW_CONNECT_PRIV_MAX];
		size_t plen = sizeof priv;
		struct ssw_ep *ep;
		if (conf_accept(l, &ep, priv, &plen, 20) < 0)
			continue;
		assert_true(plen == 2 && priv[0] == 's' && priv[1] < N);
		assert_null(a[priv[1]]);
		a[priv[1]] = ep;
		nmine++;
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	uint8_t theirs[N + 1];
	ssize_t nt = read(pp[0], theirs, sizeof theirs);
	close(pp[0]);
	assert_true(nt >= 0);
	print_message("accepted: %d here, %d in the forked sharer\n", nmine, (int)nt);
	assert_int_equal(nmine + nt, N); /* every request, once */
	for (ssize_t k = 0; k < nt; k++) {
		int i = theirs[k];
		assert_null(a[i]);
		conf_expect_seq(c[i], NULL, 500 + (unsigned)i, 50);
		P->conn->close(c[i], SSW_CLOSE_ABORT);
		c[i] = NULL;
	}
	for (int i = 0; i < N; i++) {
		if (!c[i])
			continue;
		assert_non_null(a[i]);
		conf_send_seq(c[i], a[i], 600 + (unsigned)i, 60);
		conf_expect_seq(a[i], c[i], 600 + (unsigned)i, 60);
		P->conn->close(c[i], SSW_CLOSE_ORDERLY);
		P->conn->close(a[i], SSW_CLOSE_ORDERLY);
	}
	P->conn->listener_close(l);
}
