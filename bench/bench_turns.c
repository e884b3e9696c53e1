/* bench_turns.c — one connection, two processes taking turns (seed 000's
 * hand-over cost): the client connects, forks, and parent and child pass a
 * turn through a pipe; at each turn one process does a 64 B round trip.
 * Only the round trip is timed.  Under a provider without shared context
 * (conns 1: the worker re-execs itself with SOCKSWITCH_SHARED_CONTEXT=0)
 * each turn moves control of the connection to the other process
 * (session/session_swap.c), so the switched figure is a round trip plus
 * a control swap; with shared context, a round trip only. */
#include "bench_net.h"
#include "bench_worker.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Turns of one process: wait for the turn (1 byte: 'g' go on, 'q' stop),
 * time a round trip, pass the turn.  The first process starts; it decides
 * when to stop (count or duration reached) and tells the other.  Returns
 * the number of timed round trips in rtt, -1 on a failed round trip. */
static long take_turns(int fd, int in, int out, bool first, long warmup, long count, double end, double *rtt)
{
	char buf[64], t = 'g';
	memset(buf, 'x', sizeof buf);
	long n = 0;
	for (long i = 0;; i++) {
		if (!(first && i == 0) && (read(in, &t, 1) != 1 || t == 'q'))
			break;
		if (first && (i >= warmup + count || bench_now() >= end)) {
			t = 'q';
			(void)!write(out, &t, 1);
			break;
		}
		double t0 = bench_now();
		if (net_round_trip(fd, buf, sizeof buf) < 0) {
			t = 'q';
			(void)!write(out, &t, 1);
			return -1;
		}
		if (i >= warmup)
			rtt[n++] = bench_now() - t0;
		t = 'g';
		if (write(out, &t, 1) != 1)
			break;
	}
	return n;
}

static double p99_of(double *v, long n)
{
	qsort(v, (size_t)n, sizeof(double), bench_cmp_double);
	return n ? bench_percentile(v, n, 99) : 0;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	long cap = p->count + 2;
	double *rtt = malloc(sizeof(double) * (size_t)cap * 2);
	int fd = -1, a[2] = { -1, -1 }, b[2] = { -1, -1 }, res[2] = { -1, -1 }, rc = -1;
	pid_t kid = -1;
	if (!rtt) {
		bench_fail(r, "malloc");
		goto out;
	}
	if ((fd = net_connect(port)) < 0) {
		bench_fail(r, "connect");
		goto out;
	}
	if (pipe(a) < 0 || pipe(b) < 0 || pipe(res) < 0) {
		bench_fail(r, "pipe");
		goto out;
	}
	double end = bench_now() + p->duration;
	kid = fork();
	if (kid < 0) {
		bench_fail(r, "fork");
		goto out;
	}
	if (kid == 0) {
		/* the child: its turns, then its samples to the parent */
		long n = take_turns(fd, b[0], a[1], false, p->warmup / 2, p->count, end + 60, rtt);
		long k = n < 0 ? -1 : n;
		(void)!write(res[1], &k, sizeof k);
		for (long off = 0; n > 0 && off < (long)(n * (long)sizeof(double));) {
			ssize_t w = write(res[1], (char *)rtt + off, (size_t)(n * (long)sizeof(double) - off));
			if (w <= 0)
				break;
			off += w;
		}
		_exit(0);
	}
	long n = take_turns(fd, a[0], b[1], true, p->warmup / 2, p->count / 2, end, rtt);
	long kn = -1;
	if (read(res[0], &kn, sizeof kn) != (ssize_t)sizeof kn)
		kn = -1;
	if (n < 0 || kn < 0) {
		bench_fail_msg(r, "a round trip failed (one of the two processes)");
		goto out;
	}
	if (kn > cap)
		kn = cap;
	double *krtt = rtt + cap;
	for (long off = 0; off < (long)(kn * (long)sizeof(double));) {
		ssize_t g = read(res[0], (char *)krtt + off, (size_t)(kn * (long)sizeof(double) - off));
		if (g <= 0) {
			kn = off / (long)sizeof(double);
			break;
		}
		off += g;
	}
	if (n + kn == 0) {
		bench_fail_msg(r, "no round trip finished in time");
		goto out;
	}
	/* each process's own p99 (the worse one: a starved process shows),
	 * then all of them together */
	double pp = p99_of(rtt, n), kp = p99_of(krtt, kn);
	memmove(rtt + n, krtt, sizeof(double) * (size_t)kn);
	qsort(rtt, (size_t)(n + kn), sizeof(double), bench_cmp_double);
	r->v[0] = bench_percentile(rtt, n + kn, 50) * 1e6;
	r->v[1] = bench_percentile(rtt, n + kn, 99) * 1e6;
	r->v[BENCH_V_WORST_P99] = (pp > kp ? pp : kp) * 1e6;
	r->samples = n + kn;
	r->ok = 1;
	rc = 0;
out:
	if (kid > 0)
		waitpid(kid, NULL, 0);
	int fds[] = { fd, a[0], a[1], b[0], b[1], res[0], res[1] };
	for (unsigned i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(rtt);
	return rc;
}

const struct bench_roles bench_turns_roles = { bench_echo_server, client };
