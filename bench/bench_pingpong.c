/* bench_pingpong.c — load family, blocking request/response between many
 * processes: N ping-pong pairs (a server process and a client process each;
 * the server worker accepts them all, then forks one process per connection),
 * and a server that forks a process per connection which waits in poll() on
 * its socket and a pipe from the parent, as postgres backends do.  The client
 * side is the same for both: conns processes, one connection each. */
#include "bench_load.h"
#include "bench_net.h"
#include "bench_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Round trips before the window: connection set-up, page faults and the
 * switch's lazy start stay out of the numbers. */
#define WARMUP 50

static int client_proc(struct load_proc *lp, void *arg, const struct bench_params *p, struct bench_result *r)
{
	uint16_t port = *(const uint16_t *)arg;
	char *buf = calloc(1, p->size);
	int fd = -1, rc = -1;
	if (!buf) {
		bench_fail(r, "malloc");
		goto out;
	}
	if ((fd = net_connect(port)) < 0) {
		bench_fail(r, "connect");
		goto out;
	}
	for (int i = 0; i < WARMUP; i++)
		if (net_round_trip(fd, buf, p->size) < 0) {
			bench_fail(r, "round trip");
			goto out;
		}
	if (load_ready(lp) < 0) {
		bench_fail_msg(r, "the group gave up before the start");
		goto out;
	}
	double end = load_window_end(lp), t0;
	while ((t0 = bench_now()) < end) {
		if (net_round_trip(fd, buf, p->size) < 0) {
			bench_fail(r, "round trip");
			goto out;
		}
		load_record(lp, t0, bench_now());
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd); /* the server side sees EOF and ends */
	free(buf);
	return rc;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	return load_run(p->conns, client_proc, &port, p, 1, r);
}

/* The server half of the pairs.  The server worker accepts every
 * connection first and only then forks one echo process per connection, so
 * that the pairs measure blocking round trips under contention and nothing
 * of how a shared listener hands out connections (sendfile does that). */
struct pairs {
	int lfd;
	int *fds;
	int n;
};

static int pair_server(struct load_proc *lp, void *arg, const struct bench_params *p, struct bench_result *r)
{
	const struct pairs *ps = arg;
	close(ps->lfd);
	for (int i = 0; i < ps->n; i++)
		if (i != lp->idx)
			close(ps->fds[i]);
	return bench_echo(ps->fds[lp->idx], p, r);
}

static int pairs_server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	struct pairs ps = { lfd, calloc((size_t)p->conns, sizeof(int)), 0 };
	int rc = ps.fds ? 0 : bench_fail(r, "malloc");
	for (; rc == 0 && ps.n < p->conns; ps.n++)
		if ((ps.fds[ps.n] = net_accept(lfd)) < 0)
			rc = bench_fail(r, "accept");
	if (rc == 0)
		rc = load_run(p->conns, pair_server, &ps, p, 0, r);
	for (int i = 0; i < ps.n; i++)
		if (ps.fds[i] >= 0)
			close(ps.fds[i]);
	free(ps.fds);
	return rc;
}

/* What a forked backend is handed. */
struct backend {
	int fd;       /* its connection */
	int parent;   /* read end of a pipe the parent holds open: EOF = parent gone */
	int close_fds[2]; /* the parent's: the listener and the pipe's write end */
};

/* Sleeps in poll() on both, like a postgres backend on its socket and the
 * postmaster-death pipe; answers each request until the client closes. */
static int backend(struct load_proc *lp, void *arg, const struct bench_params *p, struct bench_result *r)
{
	(void)lp;
	const struct backend *b = arg;
	close(b->close_fds[0]);
	close(b->close_fds[1]);
	char *buf = malloc(p->size);
	int rc = -1;
	if (!buf) {
		bench_fail(r, "malloc");
		goto out;
	}
	double end = bench_now() + p->duration + BENCH_SLACK_S;
	while (bench_now() < end) {
		struct pollfd pfd[2] = { { .fd = b->fd, .events = POLLIN }, { .fd = b->parent, .events = POLLIN } };
		int n = poll(pfd, 2, 1000);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			bench_fail(r, "poll");
			goto out;
		}
		if (pfd[1].revents) {
			bench_fail_msg(r, "the server process went away");
			goto out;
		}
		if (!pfd[0].revents)
			continue;
		int got = net_read_full(b->fd, buf, p->size);
		if (got == 0) {
			rc = 0;
			goto out;
		}
		if (got < 0 || net_write_full(b->fd, buf, p->size) < 0) {
			bench_fail(r, got < 0 ? "read" : "write");
			goto out;
		}
	}
	bench_fail_msg(r, "client did not finish in time");
out:
	close(b->fd);
	free(buf);
	return rc;
}

/* Accepts p->conns connections, forking a backend for each; the parent keeps
 * only the listener and the pipe's write end. */
static int forking_server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	int pp[2];
	if (pipe2(pp, O_CLOEXEC) < 0)
		return bench_fail(r, "pipe");
	struct load_group *g = load_group_new(p->conns, r);
	int rc = g ? 0 : -1;
	for (int i = 0; i < p->conns && rc == 0; i++) {
		struct backend b = { net_accept(lfd), pp[0], { lfd, pp[1] } };
		if (b.fd < 0) {
			rc = bench_fail(r, "accept");
			break;
		}
		rc = load_spawn(g, i, backend, &b, p, r);
		close(b.fd);
	}
	close(pp[0]);
	if (g) {
		double end = bench_now() + p->duration + BENCH_SLACK_S;
		double deadline = load_deadline();
		int wrc = load_wait(g, end < deadline ? end : deadline, r);
		rc = rc < 0 ? rc : wrc;
	}
	close(pp[1]);
	load_group_free(g);
	return rc;
}

const struct bench_roles bench_pingpong_roles = { pairs_server, client };
const struct bench_roles bench_forkserver_roles = { forking_server, client };
