/* fabric_pair.h — the fabric provider's unit tests' fixture: a connected
 * pair of endpoints over libfabric's tcp provider on loopback, and the
 * sending, sleeping-receive and armed-sleeper helpers they share
 * (test_fabric*.c; after cmocka.h). */
#ifndef SSW_TEST_FABRIC_PAIR_H
#define SSW_TEST_FABRIC_PAIR_H

#include <sockswitch/provider.h>

#include "session/session.h"
#include "common/sys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>

extern const struct ssw_provider ssw_provider_fabric;
static const struct ssw_provider *P = &ssw_provider_fabric;

static inline struct sockaddr_in lo(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

struct pair {
	struct ssw_listener *l;
	struct ssw_ep *c, *s; /* connector, accepted */
	int port;
};

static inline int accept_one(struct ssw_listener *l, struct ssw_ep **ep, char *priv, size_t *plen)
{
	size_t cap = *plen;
	int rc = P->conn->accept(l, ep, priv, &cap);
	if (rc == 0)
		*plen = cap;
	return rc;
}

static inline void make_pair(struct pair *p, int port)
{
	memset(p, 0, sizeof *p);
	p->port = port;
	struct sockaddr_in a = lo(port);
	assert_int_equal(P->conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &p->l), 0);
	const char hello[] = "switch private data";
	int rc = P->conn->connect((struct sockaddr *)&a, sizeof a, SSW_PROTO_MAX, hello, sizeof hello, &p->c);
	assert_true(rc == 0 || rc == -EINPROGRESS);
	char reply[64];
	size_t rl = sizeof reply;
	/* nobody calls accept: the connect completes anyway */
	uint64_t t0 = ssw_now_ns();
	while ((rc = P->conn->connect_complete(p->c, reply, &rl)) == -EINPROGRESS && ssw_now_ns() - t0 < 5000000000ull) {
		struct pollfd pf = { .fd = P->conn->connect_fd(p->c), .events = POLLIN };
		poll(&pf, 1, 50);
		rl = sizeof reply;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(rl, 0);
	/* the listener's fd says a connection waits; accept takes it */
	struct pollfd pf = { .fd = P->conn->listener_fd(p->l), .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 5000), 1);
	assert_true(P->conn->listener_ready(p->l));
	char priv[SSW_CONNECT_PRIV_MAX];
	size_t plen = sizeof priv;
	assert_int_equal(accept_one(p->l, &p->s, priv, &plen), 0);
	assert_int_equal(plen, sizeof hello);
	assert_memory_equal(priv, hello, sizeof hello);
	/* nothing else waits: not ready, and the fd is quiet */
	assert_false(P->conn->listener_ready(p->l));
	assert_int_equal(poll(&pf, 1, 0), 0);
	plen = sizeof priv;
	assert_int_equal(accept_one(p->l, &p->s, priv, &plen) == -EAGAIN, 1);
}

static inline void free_pair(struct pair *p)
{
	if (p->c)
		P->conn->close(p->c, SSW_CLOSE_ABORT);
	if (p->s)
		P->conn->close(p->s, SSW_CLOSE_ABORT);
	if (p->l)
		P->conn->listener_close(p->l);
}

static inline int sendstr(struct ssw_ep *ep, const void *s, size_t n)
{
	struct iovec v = { (void *)s, n };
	return P->msg->send(ep, &v, 1);
}

/* Sleep on the provider's wait fds until a message arrives (arm first). */
static inline int recv_wait(struct ssw_ep *ep, const void **m, size_t *len)
{
	for (int i = 0; i < 100; i++) {
		int rc = P->msg->recv_peek(ep, m, len);
		if (rc != -EAGAIN)
			return rc;
		if (P->progress->arm(ep) == 0) {
			struct pollfd pf[4];
			int n = P->progress->wait_fds(ep, pf, 4);
			assert_true(n >= 1);
			poll(pf, (nfds_t)n, 100);
			P->progress->wake_ack(ep);
		}
	}
	return -ETIMEDOUT;
}

/* A thread that arms an endpoint, waits until told (stage 2), then sleeps
 * on its wait fds (3 s at most) as a blocking receive does. */
struct sleeper {
	struct ssw_ep *ep;
	atomic_int stage; /* 1: armed; 2: go to sleep */
	int armed;        /* arm()'s result */
	int woke;         /* poll's result */
	uint64_t slept_ns;
};

static inline void *sleeper_main(void *arg)
{
	struct sleeper *z = arg;
	z->armed = P->progress->arm(z->ep);
	atomic_store(&z->stage, 1);
	while (atomic_load(&z->stage) != 2)
		usleep(100);
	struct pollfd pf[4];
	int n = P->progress->wait_fds(z->ep, pf, 4);
	uint64_t t0 = ssw_now_ns();
	z->woke = poll(pf, (nfds_t)n, 3000);
	z->slept_ns = ssw_now_ns() - t0;
	P->progress->wake_ack(z->ep);
	return NULL;
}

#endif
