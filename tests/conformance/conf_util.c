/* conf_util.c — what the conformance cases share: addresses, connected pairs,
 * sending and waiting by the SPI's own protocol, peer processes. */
#include "session/session.h"
#include "conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const struct conf_env *conf_env;

int64_t conf_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- addresses ----------------------------------------------------------- */

#define MAX_HELD 64
static int held[MAX_HELD];
static int nheld;

void conf_inet(struct sockaddr_storage *ss, socklen_t *len, const char *ip, int port)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof *ss);
	in->sin_family = AF_INET;
	in->sin_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET, ip, &in->sin_addr), 1);
	*len = sizeof *in;
}

/* The kernel picks a free port and keeps it ours while the socket is bound:
 * no other test run on this host can listen there meanwhile. */
int conf_reserve_port(int wildcard)
{
	struct sockaddr_storage ss;
	socklen_t len;
	conf_inet(&ss, &len, wildcard ? "0.0.0.0" : "127.0.0.1", 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, len), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	assert_true(nheld < MAX_HELD);
	held[nheld++] = fd;
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

void conf_release_ports(void)
{
	while (nheld)
		close(held[--nheld]);
}

/* ---- connection set-up ----------------------------------------------------- */

struct ssw_listener *conf_listen(int wildcard, struct sockaddr_storage *dst, socklen_t *dlen)
{
	struct sockaddr_storage at;
	socklen_t len;
	struct ssw_listener *l = NULL;
	assert_int_equal(conf_env->addr(wildcard, &at, dst, &len), 0);
	*dlen = len;
	int rc = P->conn->listen((struct sockaddr *)&at, len, 16, SSW_PROTO_MAX, &l);
	if (rc)
		print_message("listen: %s\n", strerror(-rc));
	assert_int_equal(rc, 0);
	assert_non_null(l);
	return l;
}

/* Sleep until the listener or a connect may move (bounded). */
static void set_wait(struct ssw_listener *l, struct ssw_ep *c, int ms)
{
	struct pollfd p[3];
	int n = 0;
	if (l)
		p[n++] = (struct pollfd){ .fd = P->conn->listener_fd(l), .events = POLLIN };
	if (c)
		p[n++] = (struct pollfd){ .fd = P->conn->connect_fd(c), .events = POLLIN };
	poll(p, (nfds_t)n, ms);
}

int conf_accept(struct ssw_listener *l, struct ssw_ep **a, void *priv, size_t *priv_len, int ms)
{
	int64_t end = conf_ms() + ms;
	size_t cap = *priv_len;
	for (;;) {
		*priv_len = cap;
		int rc = P->conn->accept(l, a, priv, priv_len);
		if (rc != -EAGAIN) {
			assert_int_equal(rc, 0);
			return 0;
		}
		int64_t left = end - conf_ms();
		if (left <= 0)
			return -EAGAIN;
		set_wait(l, NULL, left < 20 ? (int)left : 20);
	}
}

int conf_connect_wait(struct ssw_ep *c, struct ssw_listener *l, void *reply, size_t *reply_len, int ms)
{
	int64_t end = conf_ms() + ms;
	size_t cap = *reply_len;
	for (;;) {
		*reply_len = cap;
		int rc = P->conn->connect_complete(c, reply, reply_len);
		if (rc != -EINPROGRESS)
			return rc;
		int64_t left = end - conf_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		set_wait(l, c, left < 20 ? (int)left : 20);
	}
}

int conf_connect(const struct sockaddr *dst, socklen_t dlen, const void *priv, size_t plen, struct ssw_ep **out)
{
	if (conf_env->connect_enter)
		conf_env->connect_enter();
	int rc = P->conn->connect(dst, dlen, SSW_PROTO_MAX, priv, plen, out);
	if (conf_env->connect_leave)
		conf_env->connect_leave();
	return rc;
}

/* Connect with private data naming this connection, complete it without
 * accepting (seed 001: connect completes before the application accepts),
 * then accept it and check the private data and the reply came through. */
void conf_pair(struct ssw_listener *l, const struct sockaddr_storage *dst, socklen_t dlen, struct ssw_ep **c,
	       struct ssw_ep **a)
{
	static unsigned serial;
	uint8_t priv[SSW_CONNECT_PRIV_MAX], got[SSW_CONNECT_PRIV_MAX];
	size_t plen = 40 + serial % 100;
	conf_fill(priv, plen, 7000 + serial++);
	int rc = conf_connect((const struct sockaddr *)dst, dlen, priv, plen, c);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	assert_non_null(*c);
	if (rc == -EINPROGRESS) {
		char reply[64];
		size_t rlen = sizeof reply;
		assert_int_equal(conf_connect_wait(*c, l, reply, &rlen, 5000), 0);
	}
	size_t glen = sizeof got;
	assert_int_equal(conf_accept(l, a, got, &glen, 5000), 0);
	assert_non_null(*a);
	assert_int_equal(glen, plen);
	assert_memory_equal(got, priv, plen);
}

void conf_pair_new(struct ssw_listener **l, struct ssw_ep **c, struct ssw_ep **a)
{
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct ssw_listener *lst = conf_listen(0, &dst, &dlen);
	conf_pair(lst, &dst, dlen, c, a);
	if (l)
		*l = lst;
	else
		P->conn->listener_close(lst);
}

/* ---- messages -------------------------------------------------------------- */

void conf_kick(struct ssw_ep *ep)
{
	struct ssw_completion none;
	if (ep)
		assert_int_equal(P->progress->poll_cq(ep, &none, 0), 0);
}

int conf_send(struct ssw_ep *ep, struct ssw_ep *peer, const void *buf, size_t len, int ms)
{
	struct iovec v = { (void *)buf, len };
	int64_t end = conf_ms() + ms;
	for (;;) {
		int rc = P->msg->send(ep, &v, 1);
		if (rc != -EAGAIN || conf_ms() >= end)
			return rc;
		conf_kick(ep);
		conf_kick(peer);
		usleep(1000);
	}
}

int conf_wait(struct ssw_ep *ep, struct ssw_ep *peer, const void **msg, size_t *len, int ms)
{
	const struct ssw_progress_ops *pg = P->progress;
	int64_t end = conf_ms() + ms;
	for (;;) {
		int rc = P->msg->recv_peek(ep, msg, len);
		if (rc != -EAGAIN)
			return rc;
		int64_t left = end - conf_ms();
		if (left <= 0)
			return -EAGAIN;
		int armed = pg->arm(ep);
		if (armed == -EAGAIN)
			continue; /* something arrived: do not sleep */
		assert_true(armed >= 0);
		struct pollfd pfd[8];
		int n = pg->wait_fds(ep, pfd, 8);
		assert_true(n >= 0 && n <= 8);
		int t = left > 1000 ? 1000 : (int)left;
		if (armed > 0 && armed < t)
			t = armed;
		if (peer && t > 10)
			t = 10; /* the peer lives in this process: let it progress too */
		poll(pfd, (nfds_t)n, t);
		pg->wake_ack(ep);
		conf_kick(peer);
	}
}

void conf_fill(uint8_t *b, size_t n, unsigned seq)
{
	uint32_t x = seq * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		b[i] = (uint8_t)(x >> 16);
	}
}

void conf_expect(struct ssw_ep *ep, struct ssw_ep *peer, const void *buf, size_t len)
{
	const void *m;
	size_t got;
	int rc = conf_wait(ep, peer, &m, &got, 5000);
	if (rc)
		print_message("expected a message of %zu bytes: %s\n", len, strerror(-rc));
	assert_int_equal(rc, 0);
	assert_int_equal(got, len);
	assert_memory_equal(m, buf, len);
	P->msg->recv_done(ep);
}

void conf_send_seq(struct ssw_ep *ep, struct ssw_ep *peer, unsigned seq, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);
	assert_non_null(b);
	conf_fill(b, n, seq);
	assert_int_equal(conf_send(ep, peer, b, n, 5000), 0);
	free(b);
}

void conf_expect_seq(struct ssw_ep *ep, struct ssw_ep *peer, unsigned seq, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);
	assert_non_null(b);
	conf_fill(b, n, seq);
	conf_expect(ep, peer, b, n);
	free(b);
}

int conf_wait_readable(struct ssw_ep *ep, int ms)
{
	struct pollfd pfd[8];
	int n = P->progress->wait_fds(ep, pfd, 8);
	assert_true(n >= 1 && n <= 8);
	return poll(pfd, (nfds_t)n, ms);
}
