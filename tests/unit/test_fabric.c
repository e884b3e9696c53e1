/* test_fabric.c — the fabric provider over libfabric's tcp provider on
 * loopback: connect/accept without the application, messages and the
 * provider's credits, RMA read and write with asynchronous completions,
 * refused connects, orderly close, held messages (cork), reset, detach,
 * corrupt descriptors, rx_ready reporting news only. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sockswitch/provider.h>

#include "session/session.h"
#include "common/sys.h"
#include "fabric_pair.h"

#include <rdma/fabric.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


static int base_port;

/* Drive both ends (manual progress: the target of an RMA must be read
 * too) until cond() or 5 s. */
#define WAIT_FOR(cond, a, b)                                                                                  \
	do {                                                                                                  \
		uint64_t t0_ = ssw_now_ns();                                                                  \
		bool ok_;                                                                                     \
		while (!(ok_ = (cond)) && ssw_now_ns() - t0_ < 5000000000ull) {                               \
			if (a)                                                                                \
				P->progress->peer_state((a), 1, NULL);                                        \
			if (b)                                                                                \
				P->progress->peer_state((b), 1, NULL);                                        \
			usleep(200);                                                                          \
		}                                                                                             \
		assert_true(ok_);                                                                             \
	} while (0)

static void test_connect_accept_peer_addr(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port);
	struct sockaddr_storage a;
	socklen_t al = sizeof a;
	assert_int_equal(P->conn->peer_addr(p.s, &a, &al), 0);
	assert_int_equal(a.ss_family, AF_INET);
	assert_int_equal(((struct sockaddr_in *)&a)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_int_not_equal(((struct sockaddr_in *)&a)->sin_port, 0);
	assert_int_equal(P->conn->ep_caps(p.s) & (SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE),
			 SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE);
	assert_int_equal(P->conn->ep_caps(p.c) & SSW_CAP_SHARED_CONTEXT, 0);
	free_pair(&p);
}

static void test_messages_in_order(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 1);
	assert_true(P->msg->max_msg(p.c) >= 4096);
	for (int i = 0; i < 5; i++) {
		char b[32];
		int n = snprintf(b, sizeof b, "message %d", i);
		assert_int_equal(sendstr(p.c, b, (size_t)n), 0);
	}
	/* an iovec in parts, of the largest size */
	size_t mm = P->msg->max_msg(p.s);
	char *big = malloc(mm);
	for (size_t i = 0; i < mm; i++)
		big[i] = (char)(i * 7);
	struct iovec v[2] = { { big, 100 }, { big + 100, mm - 100 } };
	assert_int_equal(P->msg->send(p.c, v, 2), 0);
	for (int i = 0; i < 5; i++) {
		const void *m;
		size_t len;
		char b[32];
		int n = snprintf(b, sizeof b, "message %d", i);
		assert_int_equal(recv_wait(p.s, &m, &len), 0);
		assert_int_equal(len, (size_t)n);
		assert_memory_equal(m, b, (size_t)n);
		P->msg->recv_done(p.s);
	}
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	assert_int_equal(len, mm);
	assert_memory_equal(m, big, mm);
	P->msg->recv_done(p.s);
	assert_int_equal(P->msg->recv_peek(p.s, &m, &len), -EAGAIN);
	/* the other way */
	assert_int_equal(sendstr(p.s, "back", 4), 0);
	assert_int_equal(recv_wait(p.c, &m, &len), 0);
	assert_int_equal(len, 4);
	P->msg->recv_done(p.c);
	free(big);
	free_pair(&p);
}

static void test_credits(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 2);
	/* the peer reads nothing: small messages beyond its buffers join a
	 * pack in the sender's backlog (1000 of them: one buffer a message
	 * would stop at its 16 buffers and our 30 slots) */
	int n = 1000;
	for (int i = 0; i < n; i++)
		assert_int_equal(sendstr(p.c, &i, sizeof i), 0);
	assert_true(P->msg->send_room(p.c) > 0);
	/* each arrives once, in order; consuming them returns the credits, and
	 * the backlog leaves without the sender calling in (the provider's
	 * thread sends it, as a kernel socket's buffer drains by itself) */
	for (int i = 0; i < n; i++) {
		const void *m;
		size_t len;
		assert_int_equal(recv_wait(p.s, &m, &len), 0);
		assert_int_equal(len, sizeof i);
		assert_memory_equal(m, &i, sizeof i);
		P->msg->recv_done(p.s);
	}
	/* messages too big to share a buffer: the sender runs out of the
	 * peer's buffers, then of its own slots */
	size_t big = 40000;
	uint8_t *b = calloc(1, big);
	int sent = 0, rc;
	struct iovec v = { b, big };
	while (memcpy(b, &sent, sizeof sent), (rc = P->msg->send(p.c, &v, 1)) == 0 && sent < 1000)
		sent++;
	assert_int_equal(rc, -EAGAIN);
	assert_true(sent > 16 && sent < 64);
	assert_int_equal(P->msg->send_room(p.c), 0);
	for (int i = 0; i < sent; i++) {
		const void *m;
		size_t len;
		assert_int_equal(recv_wait(p.s, &m, &len), 0);
		assert_int_equal(len, big);
		assert_memory_equal(m, &i, sizeof i);
		P->msg->recv_done(p.s);
	}
	free(b);
	WAIT_FOR(P->msg->send_room(p.c) > 0, p.c, p.s);
	assert_int_equal(sendstr(p.c, "again", 5), 0);
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	assert_int_equal(len, 5);
	P->msg->recv_done(p.s);
	free_pair(&p);
}

static void test_rma_async(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 3);
	size_t n = 1 << 20;
	uint8_t *target = calloc(1, n), *src = malloc(n), *back = calloc(1, n);
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)(i * 13 + 1);
	struct ssw_rdma_desc d;
	assert_int_equal(P->rdma->register_rdma_memory(p.s, target, n, SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE, &d), 0);
	assert_true(d.len > 0 && d.len <= SSW_RDMA_DESC_MAX);

	/* write: two pieces, one completion with our context */
	struct iovec v[2] = { { src, 1000 }, { src + 1000, n - 1000 } };
	int ctx1, ctx2;
	int rc = P->rdma->rdma_write(p.c, v, 2, &d, 0, n, &ctx1);
	assert_true(rc == -EINPROGRESS || rc == 0);
	struct ssw_completion c[4];
	int got = rc == 0;
	WAIT_FOR(got || (got = P->progress->poll_cq(p.c, c, 4)) > 0, NULL, p.s);
	if (rc == -EINPROGRESS) {
		assert_int_equal(got, 1);
		assert_ptr_equal(c[0].ctx, &ctx1);
		assert_int_equal(c[0].status, 0);
	}
	/* the session's contract: a message sent after the completion is
	 * seen by the target after the written data */
	assert_int_equal(sendstr(p.c, "written", 7), 0);
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	P->msg->recv_done(p.s);
	assert_memory_equal(target, src, n);

	/* read back from an offset */
	struct iovec r = { back, n - 4096 };
	rc = P->rdma->rdma_read(p.c, &r, 1, &d, 4096, n - 4096, &ctx2);
	assert_true(rc == -EINPROGRESS || rc == 0);
	got = rc == 0;
	WAIT_FOR(got || (got = P->progress->poll_cq(p.c, c, 4)) > 0, NULL, p.s);
	if (rc == -EINPROGRESS) {
		assert_ptr_equal(c[0].ctx, &ctx2);
		assert_int_equal(c[0].status, 0);
	}
	assert_memory_equal(back, src + 4096, n - 4096);
	assert_int_equal(P->progress->poll_cq(p.c, c, 4), 0);

	/* several in flight complete, each once, in any order */
	int ctxs[4];
	for (int i = 0; i < 4; i++) {
		struct iovec w = { src + i * 4096, 4096 };
		rc = P->rdma->rdma_write(p.c, &w, 1, &d, (uint64_t)i * 8192, 4096, &ctxs[i]);
		assert_true(rc == -EINPROGRESS);
	}
	int seen = 0, total = 0;
	for (uint64_t t0 = ssw_now_ns(); total < 4 && ssw_now_ns() - t0 < 5000000000ull;) {
		got = P->progress->poll_cq(p.c, c, 4);
		for (int k = 0; k < got; k++) {
			assert_int_equal(c[k].status, 0);
			seen |= 1 << ((int *)c[k].ctx - ctxs);
		}
		total += got;
		P->progress->peer_state(p.s, 1, NULL);
		usleep(200);
	}
	assert_int_equal(total, 4);
	assert_int_equal(seen, 15);

	/* messages still flow after RMA */
	assert_int_equal(sendstr(p.c, "after", 5), 0);
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	P->msg->recv_done(p.s);
	P->rdma->deregister_rdma_memory(p.s, &d);
	free(target);
	free(src);
	free(back);
	free_pair(&p);
}

static void test_bad_descriptor(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 4);
	uint8_t buf[4096], loc[4096];
	struct ssw_rdma_desc d;
	assert_int_equal(P->rdma->register_rdma_memory(p.s, buf, sizeof buf, SSW_CAP_RDMA_READ, &d), 0);
	struct iovec v = { loc, sizeof loc };
	int ctx;
	/* past the end, or overflowing */
	assert_int_equal(P->rdma->rdma_read(p.c, &v, 1, &d, 1, sizeof buf, &ctx), -EINVAL);
	assert_int_equal(P->rdma->rdma_read(p.c, &v, 1, &d, UINT64_MAX - 10, 100, &ctx), -EINVAL);
	/* corrupted: every byte of it matters */
	for (uint32_t i = 0; i < d.len; i++) {
		struct ssw_rdma_desc bad = d;
		bad.data[i] ^= 0x40;
		assert_int_equal(P->rdma->rdma_read(p.c, &v, 1, &bad, 0, 16, &ctx), -EINVAL);
	}
	struct ssw_rdma_desc shortd = d;
	shortd.len = 8;
	assert_int_equal(P->rdma->rdma_read(p.c, &v, 1, &shortd, 0, 16, &ctx), -EINVAL);
	/* the connection is untouched by refused descriptors */
	assert_int_equal(P->progress->peer_state(p.c, 1, NULL), 0);
	assert_int_equal(sendstr(p.c, "ok", 2), 0);
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	P->msg->recv_done(p.s);

	/* a descriptor the owner deregistered: the peer's provider refuses the
	 * key, and that connection (only) is reset */
	P->rdma->deregister_rdma_memory(p.s, &d);
	int rc = P->rdma->rdma_read(p.c, &v, 1, &d, 0, 16, &ctx);
	struct ssw_completion c[2];
	int got = 0;
	if (rc == -EINPROGRESS) {
		WAIT_FOR((got = P->progress->poll_cq(p.c, c, 2)) > 0, NULL, p.s);
		assert_int_equal(got, 1);
		assert_ptr_equal(c[0].ctx, &ctx);
		assert_int_equal(c[0].status, -ECONNRESET);
		assert_int_equal(P->progress->poll_cq(p.c, c, 2), 0); /* once */
		assert_true(P->progress->peer_state(p.c, 1, NULL) & SSW_PEER_RESET);
	} else {
		assert_int_equal(rc, -ECONNRESET);
	}
	free_pair(&p);
}

static void test_refused(void **st)
{
	(void)st;
	struct sockaddr_in a = lo(base_port + 5); /* nobody listens */
	struct ssw_ep *ep = NULL;
	int rc = P->conn->connect((struct sockaddr *)&a, sizeof a, SSW_PROTO_MAX, "x", 1, &ep);
	if (rc == -EINPROGRESS) {
		char r[8];
		size_t rl = sizeof r;
		uint64_t t0 = ssw_now_ns();
		while ((rc = P->conn->connect_complete(ep, r, &rl)) == -EINPROGRESS && ssw_now_ns() - t0 < 5000000000ull) {
			struct pollfd pf = { .fd = P->conn->connect_fd(ep), .events = POLLIN };
			poll(&pf, 1, 50);
		}
		P->conn->close(ep, SSW_CLOSE_ABORT);
	}
	/* not ECONNREFUSED: the application's port may be open on a host
	 * without the switch; the switch falls back to kernel TCP */
	assert_true(rc < 0 && rc != -EINPROGRESS);
	assert_int_not_equal(rc, -ECONNREFUSED);
	assert_int_not_equal(rc, -ECONNRESET);
	assert_int_not_equal(rc, -EHOSTUNREACH);
}

/* A port whose fabric port passes 65535 (an ephemeral one a server got by
 * binding port 0) is switched too: its fabric port counts on from 1. */
static void test_high_port(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, 65535 - (int)(getpid() % 500));
	assert_int_equal(sendstr(p.c, "hi", 2), 0);
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	P->msg->recv_done(p.s);
	free_pair(&p);
}

static void test_orderly_close(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 6);
	assert_int_equal(sendstr(p.c, "one", 3), 0);
	assert_int_equal(sendstr(p.c, "two", 3), 0);
	P->conn->close(p.c, SSW_CLOSE_ORDERLY);
	p.c = NULL;
	WAIT_FOR(P->progress->peer_state(p.s, 1, NULL) & SSW_PEER_CLOSED, NULL, p.s);
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	assert_memory_equal(m, "one", 3);
	P->msg->recv_done(p.s);
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	assert_memory_equal(m, "two", 3);
	P->msg->recv_done(p.s);
	assert_int_equal(recv_wait(p.s, &m, &len), -EPIPE);
	assert_int_equal(P->progress->peer_state(p.s, 1, NULL) & SSW_PEER_RESET, 0);
	free_pair(&p);
}

/* A close right after sends the peer had no room for yet returns at once,
 * and every message still arrives before the end (a kernel socket's close
 * sends its buffered bytes before the FIN). */
static void test_close_delivers_backlog(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 11);
	char big[4096];
	int sent = 0;
	while (sent < 40) {
		memset(big, sent, sizeof big);
		if (sendstr(p.c, big, sizeof big) != 0)
			break;
		sent++;
	}
	assert_true(sent > 20); /* beyond the peer's buffers: a backlog */
	uint64_t t0 = ssw_now_ns();
	P->conn->close(p.c, SSW_CLOSE_ORDERLY);
	p.c = NULL;
	assert_true(ssw_now_ns() - t0 < 200000000ull); /* did not wait for the reader */
	for (int i = 0; i < sent; i++) {
		const void *m;
		size_t len;
		assert_int_equal(recv_wait(p.s, &m, &len), 0);
		assert_int_equal(len, sizeof big);
		assert_int_equal(((const unsigned char *)m)[0], (unsigned char)i);
		P->msg->recv_done(p.s);
	}
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), -EPIPE);
	free_pair(&p);
}

/* send_commit with hold (TCP_CORK, MSG_MORE): the peer sees nothing until
 * a flush, a send, or SSW_HOLD_MS; then every held message, in order. */
static int commit_str(struct ssw_ep *ep, const char *str, int hold)
{
	void *buf;
	size_t n = strlen(str);
	int rc = P->msg->send_reserve(ep, n, &buf);
	if (rc)
		return rc;
	memcpy(buf, str, n);
	return P->msg->send_commit(ep, n, hold);
}

static void expect_str(struct ssw_ep *ep, const char *str)
{
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(ep, &m, &len), 0);
	assert_int_equal(len, strlen(str));
	assert_memory_equal(m, str, len);
	P->msg->recv_done(ep);
}

static void test_held_until_flush(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 13);
	const void *m;
	size_t len;
	assert_int_equal(commit_str(p.c, "ab", 1), 0);
	assert_int_equal(commit_str(p.c, "cd", 1), 0);
	assert_int_equal(commit_str(p.c, "ef", 1), 0);
	for (int i = 0; i < 50; i++) { /* both ends progressed: nothing shows */
		P->progress->peer_state(p.c, 1, NULL);
		P->progress->peer_state(p.s, 1, NULL);
		usleep(1000);
	}
	assert_int_equal(P->msg->recv_peek(p.s, &m, &len), -EAGAIN);
	P->msg->flush(p.c);
	expect_str(p.s, "ab");
	expect_str(p.s, "cd");
	expect_str(p.s, "ef");
	/* a send publishes what is held before it */
	assert_int_equal(commit_str(p.c, "gh", 1), 0);
	assert_int_equal(sendstr(p.c, "ij", 2), 0);
	expect_str(p.s, "gh");
	expect_str(p.s, "ij");
	/* an abandoned reservation sends nothing; a commit without hold at once */
	void *buf;
	assert_int_equal(P->msg->send_reserve(p.c, 100, &buf), 0);
	assert_int_equal(commit_str(p.c, "kl", 0), 0);
	expect_str(p.s, "kl");
	/* left held: it leaves by itself after SSW_HOLD_MS */
	uint64_t t0 = ssw_now_ns();
	assert_int_equal(commit_str(p.c, "mn", 1), 0);
	WAIT_FOR(P->msg->recv_peek(p.s, &m, &len) == 0, p.c, p.s);
	assert_true(ssw_now_ns() - t0 >= (uint64_t)SSW_HOLD_MS * 1000000u / 2);
	expect_str(p.s, "mn");
	assert_int_equal(P->msg->recv_peek(p.s, &m, &len), -EAGAIN);
	free_pair(&p);
}

static void test_abort_and_detach(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 7);
	/* detach (a fork child goes on with the connection): nothing reaches
	 * the peer, and the child's connection still works */
	struct pair q;
	make_pair(&q, base_port + 8);
	int go[2];
	assert_int_equal(pipe(go), 0);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		char b;
		close(go[1]);
		if (read(go[0], &b, 1) != 1)
			_exit(2);
		const void *cm;
		size_t cl;
		if (recv_wait(q.c, &cm, &cl) != 0 || cl != 12 || memcmp(cm, "to the child", 12) != 0)
			_exit(4);
		P->msg->recv_done(q.c);
		int rc = sendstr(q.c, "from the child", 14);
		P->conn->close(q.c, SSW_CLOSE_ORDERLY);
		_exit(rc == 0 ? 0 : 3);
	}
	close(go[0]);
	P->conn->close(q.c, SSW_CLOSE_DETACH);
	q.c = NULL;
	/* closed here unused while a child holds it (a fork-per-connection
	 * server): its listeners go on taking requests (the next cases) */
	usleep(100000);
	assert_int_equal(P->progress->peer_state(q.s, 1, NULL), 0);
	const void *m;
	size_t len;
	assert_int_equal(P->msg->recv_peek(q.s, &m, &len), -EAGAIN);
	assert_int_equal(sendstr(q.s, "to the child", 12), 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	assert_int_equal(recv_wait(q.s, &m, &len), 0);
	assert_int_equal(len, 14);
	assert_memory_equal(m, "from the child", 14);
	P->msg->recv_done(q.s);
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(recv_wait(q.s, &m, &len), -EPIPE);
	/* abort: a reset, even with data queued before it */
	assert_int_equal(sendstr(p.c, "lost", 4), 0);
	P->conn->close(p.c, SSW_CLOSE_ABORT);
	p.c = NULL;
	WAIT_FOR(P->progress->peer_state(p.s, 1, NULL) & SSW_PEER_RESET, NULL, p.s);
	assert_int_equal(P->msg->recv_peek(p.s, &m, &len), -ECONNRESET);
	assert_int_equal(sendstr(p.s, "x", 1), -ECONNRESET);
	free_pair(&p);
	free_pair(&q);
}

static void test_listener_close_resets_queue(void **st)
{
	(void)st;
	struct sockaddr_in a = lo(base_port + 9);
	struct ssw_listener *l;
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l), 0);
	struct ssw_ep *c;
	int rc = P->conn->connect((struct sockaddr *)&a, sizeof a, SSW_PROTO_MAX, "q", 1, &c);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	char r[8];
	size_t rl = sizeof r;
	WAIT_FOR(P->conn->connect_complete(c, r, &rl) == 0, NULL, NULL);
	struct pollfd pf = { .fd = P->conn->listener_fd(l), .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 5000), 1);
	P->conn->listener_close(l); /* never accepted */
	WAIT_FOR(P->progress->peer_state(c, 1, NULL) & SSW_PEER_RESET, c, NULL);
	P->conn->close(c, SSW_CLOSE_ABORT);
	/* the port is free again */
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l), 0);
	P->conn->listener_close(l);
}

/* cm-data=0: the private data goes as the connection's first message (the
 * path of verbs, whose connection request carries 56 bytes) */
static void test_private_data_in_first_message(void **st)
{
	(void)st;
	char err[160];
	assert_int_equal(P->configure("cm-data", "0", err, sizeof err), 0);
	struct pair p;
	make_pair(&p, base_port + 10); /* checks the private data accept() returns */
	assert_int_equal(sendstr(p.c, "first", 5), 0);
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(p.s, &m, &len), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(m, "first", 5);
	P->msg->recv_done(p.s);
	free_pair(&p);
	assert_int_equal(P->configure("cm-data", "-1", err, sizeof err), -EINVAL);
	assert_int_equal(P->configure("cm-data", "65536", err, sizeof err), 0);
}

/* rx_ready is news only: after a message is taken, the tcp provider's CQ
 * signal (written at a completion, taken only before and after a sleep) is
 * not news (it cost every message a pump between its arrival and the
 * answer); while sends holding half our slots wait for their completions
 * it is (a writer waiting for room wakes on it); a message is seen before
 * anyone reads the CQ. */
uint32_t fab_version(void);
static bool ready_within(struct ssw_ep *ep, int want, int ms)
{
	for (uint64_t t0 = ssw_now_ns(); ssw_now_ns() - t0 < (uint64_t)ms * 1000000ull; usleep(100))
		if ((P->progress->rx_ready(ep) != 0) == want)
			return true;
	return (P->progress->rx_ready(ep) != 0) == want;
}

static void test_rx_ready_news_only(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 12);
	const void *m;
	size_t len;
	for (int round = 0; round < 3; round++) {
		assert_int_equal(sendstr(p.c, "ping", 4), 0);
		assert_true(ready_within(p.s, 1, 5000)); /* unread in the socket: seen */
		assert_int_equal(P->msg->recv_peek(p.s, &m, &len), 0);
		assert_int_equal(len, 4);
		P->msg->recv_done(p.s);
		/* taken: nothing is news (libfabric 1.17's tcp; other versions
		 * may report the signal, a spurious look) */
		uint32_t v = fab_version();
		if (FI_MAJOR(v) == 1 && FI_MINOR(v) == 17)
			assert_int_equal(P->progress->rx_ready(p.s), 0);
	}
	/* a send larger than an inject: its completion is no news while our
	 * slots are plenty (a stream would pump after every send) ... */
	size_t big = 60000;
	char *b = calloc(1, big);
	struct iovec v = { b, big };
	uint32_t fv = fab_version();
	bool v117 = FI_MAJOR(fv) == 1 && FI_MINOR(fv) == 17;
	assert_int_equal(P->msg->send(p.s, &v, 1), 0);
	usleep(20000);
	if (v117)
		assert_int_equal(P->progress->rx_ready(p.s), 0);
	/* ... and news until read once they hold half of them, since a
	 * writer may then wait for room (14 posted within the peer's
	 * credits, 3 more waiting for them) */
	int n = 17;
	for (int i = 1; i < n; i++)
		assert_int_equal(P->msg->send(p.s, &v, 1), 0);
	assert_true(ready_within(p.s, 1, 5000));
	assert_int_equal(P->msg->recv_peek(p.s, &m, &len), -EAGAIN); /* reads the completions */
	assert_true(ready_within(p.s, 0, 5000) || P->msg->recv_peek(p.s, &m, &len) != -EAGAIN);
	for (int i = 0; i < n; i++) {
		assert_int_equal(recv_wait(p.c, &m, &len), 0);
		assert_int_equal(len, big);
		P->msg->recv_done(p.c);
	}
	free(b);
	free_pair(&p);
}

static void test_configure(void **st)
{
	(void)st;
	char err[160];
	assert_int_equal(P->configure("port-offset", "x1", err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "port-offset"));
	assert_int_equal(P->configure("port-offset", "70000", err, sizeof err), -EINVAL);
	assert_int_equal(P->configure("provider", "", err, sizeof err), -EINVAL);
	assert_int_equal(P->configure("colour", "red", err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "colour"));
	assert_int_equal(P->configure("provider", "tcp", err, sizeof err), 0);
	assert_int_equal(P->configure("port-offset", "10000", err, sizeof err), 0);
	assert_non_null(P->describe());
}

int main(void)
{
	char err[160];
	/* ports from the pid: parallel runs of the suite do not collide */
	base_port = 30000 + (int)(getpid() % 2000) * 10;
	if (P->configure("provider", "tcp", err, sizeof err) || P->configure("port-offset", "10000", err, sizeof err) ||
	    P->init() != 0) {
		fprintf(stderr, "fabric provider unusable: %s\n", err);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_configure),
		cmocka_unit_test(test_connect_accept_peer_addr),
		cmocka_unit_test(test_messages_in_order),
		cmocka_unit_test(test_credits),
		cmocka_unit_test(test_rma_async),
		cmocka_unit_test(test_bad_descriptor),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_high_port),
		cmocka_unit_test(test_orderly_close),
		cmocka_unit_test(test_close_delivers_backlog),
		cmocka_unit_test(test_held_until_flush),
		cmocka_unit_test(test_abort_and_detach),
		cmocka_unit_test(test_listener_close_resets_queue),
		cmocka_unit_test(test_private_data_in_first_message),
		cmocka_unit_test(test_rx_ready_news_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
