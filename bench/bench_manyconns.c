/* bench_manyconns.c — load family: one epoll server (bench_epoll.c's) holding
 * p->conns open connections, all in its epoll set; the client does 64 B
 * round trips one at a time, each on the next connection in turn, then
 * measures connect+accept+close per second while all of them stay open.
 * What it shows: whether the cost of a wake-up or a connect grows with the
 * number of sockets a process holds. */
#include "bench_load.h"
#include "bench_net.h"
#include "bench_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Connect, wait for the server's close, close: one connection per loop, for
 * half the round-trip phase's time.  The server closes first, so TIME_WAIT
 * stays on its side and the client never runs out of ports. */
static int connect_phase(uint16_t port, double duration, struct bench_result *r)
{
	double start = bench_now(), end = start + duration, now = start;
	long n = 0;
	char c;
	while ((now = bench_now()) < end) {
		int fd = net_connect(port);
		if (fd < 0)
			return bench_fail(r, "connect (connect phase)");
		int got = net_read_full(fd, &c, 1);
		close(fd);
		if (got != 0)
			return got < 0 ? bench_fail(r, "read (connect phase)")
				       : bench_fail_msg(r, "unexpected data from server (connect phase)");
		n++;
	}
	if (n == 0)
		return bench_fail_msg(r, "no connection finished in time");
	r->v[2] = (double)n / (now - start);
	return 0;
}

static int rotate(int *fds, int n, const struct bench_params *p, struct bench_result *r)
{
	static struct load_hist h;
	char *buf = calloc(1, p->size);
	long count = 0;
	if (!buf)
		return bench_fail(r, "malloc");
	/* one pass over the connections first, so that each has carried data
	 * before the clock starts, as in the other cases' warm-up; but never
	 * longer than the measurement itself, however slow a round trip is */
	double wend = bench_now() + p->duration;
	for (int i = 0; i < n && bench_now() < wend; i++)
		if (net_round_trip(fds[i], buf, p->size) < 0) {
			free(buf);
			return bench_fail(r, "round trip (warm-up)");
		}
	double start = bench_now(), end = start + p->duration, t0;
	for (int i = 0; (t0 = bench_now()) < end; i = (i + 1) % n) {
		if (net_round_trip(fds[i], buf, p->size) < 0) {
			free(buf);
			return bench_fail(r, "round trip");
		}
		load_hist_add(&h, bench_now() - t0);
		count++;
	}
	free(buf);
	r->v[0] = (double)count / (bench_now() - start);
	r->v[1] = load_hist_pct(&h, 99) * 1e6;
	r->samples = count;
	return 0;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	int *fds = malloc(sizeof(int) * (size_t)p->conns);
	int n = 0, rc = -1;
	if (!fds)
		return bench_fail(r, "malloc");
	for (; n < p->conns; n++)
		if ((fds[n] = net_connect(port)) < 0) {
			char what[64];
			snprintf(what, sizeof(what), "connect #%d", n + 1);
			bench_fail(r, what);
			goto out;
		}
	if (rotate(fds, n, p, r) < 0 || connect_phase(port, p->duration / 2, r) < 0)
		goto out;
	r->ok = 1;
	rc = 0;
out:
	for (int i = 0; i < n; i++)
		close(fds[i]); /* the server ends when all are closed */
	free(fds);
	return rc;
}

const struct bench_roles bench_manyconns_roles = { bench_epoll_server, client };
