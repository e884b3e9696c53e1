/* bench_connect.c — connection rate: connect, send 1 byte, close, repeated; the client measures. */
#include "bench_net.h"
#include "bench_worker.h"

#include <unistd.h>

/* The byte the client sends on its last connection, so the server stops
 * without having to guess whether more connections are coming. */
#define QUIT 'q'
#define WORK 'c'

static int server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	double deadline = bench_now() + p->duration + BENCH_SLACK_S;
	for (long i = 0; i <= p->count + 1; i++) { /* + the warm-up and the quit */
		char c;
		int fd = net_accept(lfd);
		if (fd < 0)
			return bench_fail(r, "accept");
		int got = net_read_full(fd, &c, 1);
		close(fd);
		if (got < 0)
			return bench_fail(r, "read");
		if (got == 1 && c == QUIT)
			return 0;
		if (bench_now() > deadline)
			return bench_fail_msg(r, "client did not finish in time");
	}
	return bench_fail_msg(r, "more connections than expected");
}

/* One full exchange.  Waiting for the server's close (EOF) means each
 * connection is counted only once it was served, and the server closing first
 * keeps TIME_WAIT on its side, so the client never runs out of local ports. */
static int one(uint16_t port, char what, struct bench_result *r)
{
	char c;
	int fd = net_connect(port);
	if (fd < 0)
		return bench_fail(r, "connect");
	if (net_write_full(fd, &what, 1) < 0) {
		close(fd);
		return bench_fail(r, "write");
	}
	int got = net_read_full(fd, &c, 1);
	close(fd);
	if (got != 0)
		return got < 0 ? bench_fail(r, "read") : bench_fail_msg(r, "unexpected data from server");
	return 0;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	/* one connection before the clock starts, as the other cases warm up:
	 * a process's first fabric connect loads libfabric (about 0.3 s, README
	 * Limits), which is not the rate of connects */
	if (one(port, WORK, r) < 0)
		return -1;
	double start = bench_now(), end = start + p->duration, now = start;
	long n = 0;
	while (n < p->count && (now = bench_now()) < end) {
		if (one(port, WORK, r) < 0)
			return -1;
		n++;
	}
	now = bench_now();
	if (one(port, QUIT, r) < 0)
		return -1;
	if (n == 0)
		return bench_fail_msg(r, "no connection finished in time");
	r->v[0] = (double)n / (now - start);
	r->samples = n;
	r->ok = 1;
	return 0;
}

const struct bench_roles bench_connect_roles = { server, client };
