/* bench_latency.c — 64 B blocking ping-pong; the client times each round trip. */
#include "bench_net.h"
#include "bench_worker.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Echoes fixed-size messages on fd until the client closes; closes fd. */
int bench_echo(int fd, const struct bench_params *p, struct bench_result *r)
{
	char *buf = malloc(p->size);
	if (!buf) {
		close(fd);
		return bench_fail(r, "malloc");
	}
	double end = bench_now() + p->duration + BENCH_SLACK_S;
	long limit = p->warmup + p->count;
	int rc = 0;
	for (long i = 0; i <= limit && bench_now() < end; i++) {
		int got = net_read_full(fd, buf, p->size);
		if (got == 0)
			break;
		if (got < 0 || net_write_full(fd, buf, p->size) < 0) {
			rc = bench_fail(r, got < 0 ? "read" : "write");
			break;
		}
	}
	close(fd);
	free(buf);
	return rc;
}

int bench_echo_server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	int fd = net_accept(lfd);
	return fd < 0 ? bench_fail(r, "accept") : bench_echo(fd, p, r);
}

static int round_trip(int fd, char *buf, size_t size, struct bench_result *r)
{
	return net_round_trip(fd, buf, size) < 0 ? bench_fail(r, "round trip") : 0;
}

/* Warm-up first so connection set-up, page faults and the switch's lazy
 * initialisation stay out of the percentiles. */
static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	char *buf = malloc(p->size);
	double *rtt = malloc(sizeof(double) * (size_t)(p->count > 0 ? p->count : 1));
	int fd = -1, rc = -1;
	long n = 0;

	if (!buf || !rtt) {
		bench_fail(r, "malloc");
		goto out;
	}
	memset(buf, 'x', p->size);
	if ((fd = net_connect(port)) < 0) {
		bench_fail(r, "connect");
		goto out;
	}
	double end = bench_now() + p->duration;
	for (long i = 0; i < p->warmup && bench_now() < end; i++)
		if (round_trip(fd, buf, p->size, r) < 0)
			goto out;
	end = bench_now() + p->duration;
	for (; n < p->count; n++) {
		double t0 = bench_now();
		if (t0 >= end)
			break;
		if (round_trip(fd, buf, p->size, r) < 0)
			goto out;
		rtt[n] = bench_now() - t0;
	}
	if (n == 0) {
		bench_fail_msg(r, "no round trip finished in time");
		goto out;
	}
	qsort(rtt, (size_t)n, sizeof(double), bench_cmp_double);
	r->v[0] = bench_percentile(rtt, n, 50) * 1e6;
	r->v[1] = bench_percentile(rtt, n, 99) * 1e6;
	r->samples = n;
	r->ok = 1;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(rtt);
	free(buf);
	return rc;
}

const struct bench_roles bench_latency_roles = { bench_echo_server, client };
