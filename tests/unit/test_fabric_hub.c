/* test_fabric_hub.c — fabric endpoints sharing the provider's libfabric
 * objects (src/providers/fabric/fab_hub.c, fab_eq.c): descriptors per
 * connection, a reader of a shared completion queue ringing another
 * endpoint's sleeper, output libfabric holds for a socket that nobody waits
 * on leaving anyway, memory keys that another connection's peer cannot
 * guess, a fork child driving one connection of a hub while the parent
 * drives another, and a closing endpoint that other closes cannot free.  libfabric's epoll_ctl and socketpair calls are reported
 * here as the interposition reports them in libsockswitch.so (this test
 * links the core alone): without that report endpoints share nothing. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "session/session.h"
#include "fabric_pair.h"
#include "../progs/fdcount.h"

#include "common/provfds.h"
#include "providers/fabric/fab_priv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>


/* ---- what libsockswitch.so's interposition does for libfabric ------------ */

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	int r = (int)syscall(SYS_epoll_ctl, epfd, op, fd, ev);
	if (r == 0 && ssw_provider_calls)
		P->own_epoll_ctl(epfd, op, fd, ev); /* the provider's op, as the switch calls it */
	return r;
}

int socketpair(int d, int t, int p, int sv[2])
{
	int r = (int)syscall(SYS_socketpair, d, t, p, sv);
	if (r == 0 && ssw_provider_calls)
		ssw_provfd_pair(sv[0], sv[1]);
	return r;
}

/* ---- helpers ---------------------------------------------------------------- */

static int base_port;

/* One more connection to listener l (port), accepted. */
static void connect_one(struct ssw_listener *l, int port, struct ssw_ep **c, struct ssw_ep **s)
{
	struct sockaddr_in a = lo(port);
	int rc = P->conn->connect((struct sockaddr *)&a, sizeof a, SSW_PROTO_MAX, "hub", 3, c);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	char reply[64];
	size_t rl = sizeof reply;
	uint64_t t0 = ssw_now_ns();
	while ((rc = P->conn->connect_complete(*c, reply, &rl)) == -EINPROGRESS && ssw_now_ns() - t0 < 5000000000ull) {
		struct pollfd pf = { .fd = P->conn->connect_fd(*c), .events = POLLIN };
		poll(&pf, 1, 50);
		rl = sizeof reply;
	}
	assert_int_equal(rc, 0);
	char priv[SSW_CONNECT_PRIV_MAX];
	size_t plen = sizeof priv;
	t0 = ssw_now_ns();
	while ((rc = accept_one(l, s, priv, &plen)) == -EAGAIN && ssw_now_ns() - t0 < 5000000000ull) {
		struct pollfd pf = { .fd = P->conn->listener_fd(l), .events = POLLIN };
		poll(&pf, 1, 50);
		plen = sizeof priv;
	}
	assert_int_equal(rc, 0);
}

static void expect(struct ssw_ep *ep, const char *what)
{
	const void *m;
	size_t len;
	assert_int_equal(recv_wait(ep, &m, &len), 0);
	assert_int_equal(len, strlen(what));
	assert_memory_equal(m, what, len);
	P->msg->recv_done(ep);
}

/* ---- descriptors --------------------------------------------------------------- */

/* A connection's endpoint costs its socket and its eventfd, and a share of
 * its hub's queue (3 descriptors for FAB_HUB_EPS endpoints): 48
 * connections in this process (96 endpoints) stay below 2.5 a side.
 * An event queue and a completion queue of its own cost 8. */
static void test_descriptors_per_endpoint(void **st)
{
	(void)st;
	enum { N = 48 };
	struct ssw_listener *l;
	struct sockaddr_in a = lo(base_port);
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 64, SSW_PROTO_MAX, &l), 0);
	struct ssw_ep *c[N + 1], *s[N + 1];
	connect_one(l, base_port, &c[N], &s[N]); /* the process's queues exist now */
	int f0 = count_fds();
	for (int i = 0; i < N; i++)
		connect_one(l, base_port, &c[i], &s[i]);
	int f1 = count_fds();
	double per = (double)(f1 - f0) / (2.0 * N);
	print_message("%d connections in one process: %.2f descriptors per endpoint\n", N, per);
	assert_true(per <= 2.5);
	assert_true(c[0]->hub && c[0]->hub->shared && c[0]->hub->cap == FAB_HUB_EPS);
	/* and every connection carries its own messages */
	for (int i = 0; i < N; i++) {
		char b[16];
		snprintf(b, sizeof b, "to s%d", i);
		assert_int_equal(sendstr(c[i], b, strlen(b)), 0);
		snprintf(b, sizeof b, "to c%d", i);
		assert_int_equal(sendstr(s[i], b, strlen(b)), 0);
	}
	for (int i = N - 1; i >= 0; i--) {
		char b[16];
		snprintf(b, sizeof b, "to s%d", i);
		expect(s[i], b);
		snprintf(b, sizeof b, "to c%d", i);
		expect(c[i], b);
	}
	for (int i = 0; i <= N; i++) {
		P->conn->close(c[i], SSW_CLOSE_ABORT);
		P->conn->close(s[i], SSW_CLOSE_ABORT);
	}
	P->conn->listener_close(l);
}

/* ---- another reader rings ---------------------------------------------------- */

/* A waiter sleeps on its own socket; a message for it that another
 * endpoint's reader of the shared queue took leaves that socket quiet:
 * the reader must ring it (before, each endpoint's queue was its own). */
static void test_other_endpoints_reader_rings(void **st)
{
	(void)st;
	struct ssw_listener *l;
	struct sockaddr_in a = lo(base_port + 1);
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l), 0);
	struct ssw_ep *ca, *sa, *cb, *sb;
	connect_one(l, base_port + 1, &ca, &sa);
	connect_one(l, base_port + 1, &cb, &sb);
	assert_ptr_equal(sa->hub, sb->hub);
	const void *m;
	size_t len;
	assert_int_equal(P->msg->recv_peek(sb, &m, &len), -EAGAIN);
	for (int round = 0; round < 3; round++) {
		struct sleeper z = { .ep = sb };
		pthread_t t;
		assert_int_equal(pthread_create(&t, NULL, sleeper_main, &z), 0);
		while (atomic_load(&z.stage) != 1)
			usleep(100);
		assert_int_equal(z.armed, 0);
		assert_int_equal(sendstr(cb, "for b", 5), 0);
		struct pollfd pf = { .fd = fab_data_fd(sb), .events = POLLIN };
		assert_true(pf.fd >= 0);
		assert_int_equal(poll(&pf, 1, 5000), 1); /* in b's socket, unread */
		/* a look at a: the shared queue read, b's message taken */
		assert_int_equal(P->msg->recv_peek(sa, &m, &len), -EAGAIN);
		assert_int_equal(poll(&pf, 1, 0), 0);
		atomic_store(&z.stage, 2);
		pthread_join(t, NULL);
		assert_int_equal(z.woke, 1);
		assert_true(z.slept_ns < 1000000000ull);
		expect(sb, "for b");
	}
	P->conn->close(ca, SSW_CLOSE_ABORT);
	P->conn->close(sa, SSW_CLOSE_ABORT);
	P->conn->close(cb, SSW_CLOSE_ABORT);
	P->conn->close(sb, SSW_CLOSE_ABORT);
	P->conn->listener_close(l);
}

/* ---- output nobody waits for ---------------------------------------------------- */

/* A sender whose socket is full leaves the rest of its messages in
 * libfabric, which sends them when a reading of the sender's hub finds the
 * socket writable.  Its owner may sleep on the socket's input only (an
 * epoll set registers the wait fds once), or not at all: the provider's
 * thread serves the hub when the socket can take more.  Here nobody uses
 * the sender after its sends, and the receiver is on another hub: every
 * message must still arrive. */
static void test_output_leaves_without_its_owner(void **st)
{
	(void)st;
	struct ssw_listener *l;
	struct sockaddr_in a = lo(base_port + 2);
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 128, SSW_PROTO_MAX, &l), 0);
	/* a pair split across two hubs: fill hubs, freeing one slot of a
	 * full one, until a connector takes a hub's last slot */
	struct ssw_ep *c[64] = { 0 }, *s[64] = { 0 };
	int k = -1;
	for (int i = 0; i < 64 && k < 0; i++) {
		connect_one(l, base_port + 2, &c[i], &s[i]);
		if (c[i]->hub != s[i]->hub)
			k = i;
		else if (c[i]->hub->nep == c[i]->hub->cap) {
			P->conn->close(s[i], SSW_CLOSE_ABORT);
			s[i] = NULL;
		}
	}
	assert_true(k >= 0);
	struct ssw_ep *tx = c[k], *rx = s[k];
	/* a small send buffer: the sends cannot all be in the kernel */
	int sb = 4096;
	assert_int_equal(setsockopt(atomic_load(&tx->sock_fd), SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb), 0);
	enum { MSGS = FAB_RX_N - FAB_DATA_RESERVE, SZ = 60000 };
	char *b = malloc(SZ);
	for (int i = 0; i < MSGS; i++) {
		memset(b, 'a' + i, SZ);
		struct iovec v = { b, SZ };
		assert_int_equal(P->msg->send(tx, &v, 1), 0);
	}
	/* its owner goes to sleep (arm reads the hub: libfabric states its
	 * interest in the socket's output then), but nobody wakes it for
	 * output: an epoll set registered its wait fds for their input only */
	int rc;
	for (int i = 0; i < 100 && (rc = P->progress->arm(tx)) == -EAGAIN; i++)
		;
	assert_int_equal(rc, 0);
	assert_true(atomic_load(&tx->want_out)); /* libfabric holds output for the socket */
	for (int i = 0; i < MSGS; i++) {
		const void *m;
		size_t len;
		assert_int_equal(recv_wait(rx, &m, &len), 0);
		assert_int_equal(len, SZ);
		assert_int_equal(((const char *)m)[0], 'a' + i);
		assert_int_equal(((const char *)m)[SZ - 1], 'a' + i);
		P->msg->recv_done(rx);
	}
	free(b);
	P->progress->wake_ack(tx);
	for (int i = 0; i < 64; i++) {
		if (c[i])
			P->conn->close(c[i], SSW_CLOSE_ABORT);
		if (s[i])
			P->conn->close(s[i], SSW_CLOSE_ABORT);
	}
	P->conn->listener_close(l);
}

/* ---- closing while others close ------------------------------------------------ */

/* A closed endpoint's struct stays with its hub while the queue may still
 * name its contexts, and another thread's closes free the oldest of those
 * kept.  It must join them only once its own teardown is over: CI's ASan
 * saw the provider's thread free one (33 closes later) while the
 * application's close was still releasing its objects.  Here the
 * interleaving is made by hand: A leaves its hub, 40 other endpoints of
 * that hub close, then A's teardown runs (a use after free under ASan
 * if A had been kept at leaving), and only then is A kept. */
static void test_closing_endpoint_outlives_other_closes(void **st)
{
	(void)st;
	struct ssw_listener *l;
	struct sockaddr_in a = lo(base_port + 5);
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l), 0);
	struct ssw_ep *ca, *sa;
	connect_one(l, base_port + 5, &ca, &sa);
	struct fab_hub *left = fab_hub_close_ep(ca, false);
	assert_non_null(left);
	int joined = 0;
	for (int i = 0; i < 40; i++) {
		struct ssw_ep *c, *s;
		connect_one(l, base_port + 5, &c, &s);
		joined += (c->hub == left) + (s->hub == left);
		P->conn->close(c, SSW_CLOSE_ABORT);
		P->conn->close(s, SSW_CLOSE_ABORT);
	}
	assert_true(joined > (int)FAB_HUB_GONE); /* more closes in A's hub than it keeps */
	fab_ep_release(ca, left);
	pthread_mutex_lock(&left->mu);
	bool kept = false;
	for (struct ssw_ep *e = left->gone; e; e = e->hnext)
		kept |= e == ca;
	assert_true(kept || !left->cq); /* newest of the kept: the queue may name its contexts */
	pthread_mutex_unlock(&left->mu);
	P->conn->close(sa, SSW_CLOSE_ABORT);
	P->conn->listener_close(l);
}

/* ---- keys ---------------------------------------------------------------------- */

/* Connections of one process share its domain, hence its memory keys: a
 * peer that takes the key of memory exposed to it and tries the next or
 * the previous one must not reach memory exposed on another connection
 * (sequential keys would give exactly that); it resets only itself. */
static void test_neighbour_key_is_refused(void **st)
{
	(void)st;
	struct ssw_listener *l;
	struct sockaddr_in a = lo(base_port + 3);
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l), 0);
	for (int delta = -1; delta <= 1; delta += 2) {
		struct ssw_ep *ca, *sa, *cb, *sb;
		connect_one(l, base_port + 3, &ca, &sa);
		connect_one(l, base_port + 3, &cb, &sb);
		assert_ptr_equal(sa->domain, sb->domain);
		enum { N = 4096 };
		char *secret = malloc(N), *mine = malloc(N), *got = calloc(1, N);
		memset(secret, 'S', N);
		memset(mine, 'm', N);
		struct ssw_rdma_desc da, db;
		/* exposed around one another: a counter would give neighbours */
		assert_int_equal(P->rdma->register_rdma_memory(sa, secret, N, SSW_CAP_RDMA_READ, &da), 0);
		assert_int_equal(P->rdma->register_rdma_memory(sb, mine, N, SSW_CAP_RDMA_READ, &db), 0);
		struct fab_rdesc r;
		memcpy(&r, db.data, sizeof r);
		r.key += (uint64_t)(int64_t)delta;
		r.check = fab_rdesc_check(&r);
		struct ssw_rdma_desc forged = db;
		memcpy(forged.data, &r, sizeof r);
		struct iovec v = { got, N };
		int ctx, status = 0;
		int rc = P->rdma->rdma_read(cb, &v, 1, &forged, 0, N, &ctx);
		if (rc == -EINPROGRESS) {
			struct ssw_completion cc[2];
			int n = 0;
			for (uint64_t t0 = ssw_now_ns(); n == 0 && ssw_now_ns() - t0 < 5000000000ull; usleep(200)) {
				P->progress->peer_state(sb, 1, NULL);
				P->progress->peer_state(sa, 1, NULL);
				n = P->progress->poll_cq(cb, cc, 2);
			}
			assert_int_equal(n, 1);
			status = cc[0].status;
		} else {
			status = rc;
		}
		assert_true(status != 0);
		assert_true(got[0] != 'S' && got[N - 1] != 'S');
		/* the other connection is untouched */
		assert_int_equal(sendstr(ca, "still", 5), 0);
		expect(sa, "still");
		P->rdma->deregister_rdma_memory(sa, &da);
		P->rdma->deregister_rdma_memory(sb, &db);
		P->conn->close(ca, SSW_CLOSE_ABORT);
		P->conn->close(sa, SSW_CLOSE_ABORT);
		P->conn->close(cb, SSW_CLOSE_ABORT);
		P->conn->close(sb, SSW_CLOSE_ABORT);
		free(secret);
		free(mine);
		free(got);
	}
	P->conn->listener_close(l);
}

/* ---- fork ------------------------------------------------------------------- */

/* After a fork the child drives one connection of a hub (a
 * fork-per-connection server's child) while the parent keeps driving
 * another of the same hub: the parent's readings of the hub must not take
 * what arrives for the child's connection, nor the child's the parent's. */
static void test_fork_child_and_parent_share_a_hub(void **st)
{
	(void)st;
	struct ssw_listener *l;
	struct sockaddr_in a = lo(base_port + 4);
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l), 0);
	struct ssw_ep *ca, *sa, *cb, *sb;
	connect_one(l, base_port + 4, &ca, &sa);
	connect_one(l, base_port + 4, &cb, &sb);
	assert_ptr_equal(ca->hub, cb->hub);
	int go[2];
	assert_int_equal(pipe(go), 0);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		char x;
		close(go[1]);
		if (read(go[0], &x, 1) != 1)
			_exit(2);
		if (sendstr(ca, "from the child", 14) != 0)
			_exit(3);
		const void *m;
		size_t len;
		for (int i = 0; i < 20; i++) {
			if (recv_wait(ca, &m, &len) != 0)
				_exit(4);
			char want[32];
			snprintf(want, sizeof want, "to the child %d", i);
			if (len != strlen(want) || memcmp(m, want, len) != 0)
				_exit(5);
			P->msg->recv_done(ca);
		}
		int rc = sendstr(ca, "bye", 3);
		P->conn->close(ca, SSW_CLOSE_ORDERLY);
		_exit(rc == 0 ? 0 : 6);
	}
	close(go[0]);
	P->conn->close(ca, SSW_CLOSE_DETACH); /* the child's now */
	assert_int_equal(write(go[1], "g", 1), 1);
	close(go[1]);
	/* the parent's own traffic on the hub all along: each reading of it
	 * would take what arrives for the child's connection */
	bool asked = false;
	int replied = 0;
	for (uint64_t t0 = ssw_now_ns(); replied < 20 && ssw_now_ns() - t0 < 10000000000ull;) {
		assert_int_equal(sendstr(cb, "ping", 4), 0);
		expect(sb, "ping");
		assert_int_equal(sendstr(sb, "pong", 4), 0);
		expect(cb, "pong");
		const void *m;
		size_t len;
		if (!asked && P->msg->recv_peek(sa, &m, &len) == 0) {
			assert_int_equal(len, 14);
			assert_memory_equal(m, "from the child", 14);
			P->msg->recv_done(sa);
			asked = true;
		}
		if (asked) {
			char r[32];
			snprintf(r, sizeof r, "to the child %d", replied++);
			assert_int_equal(sendstr(sa, r, strlen(r)), 0);
			usleep(2000);
		}
	}
	assert_int_equal(replied, 20);
	expect(sa, "bye");
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	P->conn->close(sa, SSW_CLOSE_ABORT);
	P->conn->close(cb, SSW_CLOSE_ABORT);
	P->conn->close(sb, SSW_CLOSE_ABORT);
	P->conn->listener_close(l);
}

/* A forked child draws memory keys of its own: with the parent's pool
 * copied, both would hand out the same next keys. */
static void test_fork_child_draws_its_own_keys(void **st)
{
	(void)st;
	(void)fab_random_key(); /* a pool drawn from */
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint64_t k[4];
		for (int i = 0; i < 4; i++)
			k[i] = fab_random_key();
		_exit(write(pfd[1], k, sizeof k) == sizeof k ? 0 : 1);
	}
	uint64_t mine[4], child[4];
	for (int i = 0; i < 4; i++)
		mine[i] = fab_random_key();
	assert_int_equal(read(pfd[0], child, sizeof child), sizeof child);
	int st2;
	assert_int_equal(waitpid(pid, &st2, 0), pid);
	close(pfd[0]);
	close(pfd[1]);
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			assert_true(mine[i] != child[j]);
}

int main(void)
{
	char err[160];
	/* fabric ports (app port + 10000) apart from the other fabric tests' */
	base_port = 20000 + (int)(getpid() % 1000) * 8;
	if (P->configure("provider", "tcp", err, sizeof err) || P->configure("port-offset", "10000", err, sizeof err) ||
	    P->init() != 0) {
		fprintf(stderr, "fabric provider unusable: %s\n", err);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_descriptors_per_endpoint),
		cmocka_unit_test(test_other_endpoints_reader_rings),
		cmocka_unit_test(test_output_leaves_without_its_owner),
		cmocka_unit_test(test_closing_endpoint_outlives_other_closes),
		cmocka_unit_test(test_neighbour_key_is_refused),
		cmocka_unit_test(test_fork_child_and_parent_share_a_hub),
		cmocka_unit_test(test_fork_child_draws_its_own_keys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
