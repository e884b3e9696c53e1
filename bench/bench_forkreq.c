/* bench_forkreq.c — load family: what fork costs a server under the switch.
 *
 * forkconn: a small fork-per-connection server (inetd, a CGI or PHP-style
 * page server) and p->conns client processes that each open a new
 * connection per 64 B request: connect, request, answer, close.  The server
 * forks a process per connection that answers once and exits; the server
 * reaps them as it goes.  Requests per second over all clients, and the
 * worst client's own p99 (one client starved by the others shows there).
 *
 * prefork: a pre-forking server (apache prefork, gunicorn's sync workers):
 * the master listens, forks PREFORK_WORKERS workers and never accepts; each
 * worker waits in poll() on the listener, accepts, answers one request and
 * closes; the same clients as forkconn.  Across hosts each worker listens
 * on the fabric on its own (README: pre-forked servers).
 *
 * forkexit: fork(), _exit() in the child, waitpid() in the parent, in a loop,
 * by a process that holds one listening socket (switched in the switched
 * column) and nothing else: what a fork-per-connection server pays per
 * request before doing anything.  Microseconds per cycle.  With conns = 1
 * the switched column runs with SOCKSWITCH_STAT=0 (bench_main.c). */
#include "bench_load.h"
#include "bench_net.h"
#include "bench_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* the first byte of the last request: the server ends after answering it */
#define QUIT 'q'

/* ---- forkconn ------------------------------------------------------------ */

static volatile sig_atomic_t quit_seen;
static void on_quit(int sig)
{
	(void)sig;
	quit_seen = 1;
}

/* One connection's process: read the request, answer, exit (the exit
 * closes the connection, as such servers' children do). */
static void answer(int fd, pid_t server, size_t size)
{
	char buf[256];
	size_t n = size < sizeof buf ? size : sizeof buf;
	if (net_read_full(fd, buf, n) != 1)
		_exit(1);
	if (net_write_full(fd, buf, n) < 0)
		_exit(1);
	if (buf[0] == QUIT)
		kill(server, SIGUSR1);
	_exit(0);
}

static void reap(long *failed)
{
	int st;
	pid_t pid;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			(*failed)++;
}

static int forking_server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	struct sigaction sa = { .sa_handler = on_quit }; /* no SA_RESTART: accept returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	pid_t me = getpid();
	long failed = 0;
	double end = bench_now() + p->duration + BENCH_SLACK_S;
	while (!quit_seen && bench_now() < end) {
		/* The quitting child's signal may come before accept blocks (then
		 * nothing interrupts it): wait in short turns, both columns alike. */
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		int pr = poll(&pfd, 1, 50);
		if (pr <= 0) {
			if (pr < 0 && errno != EINTR)
				return bench_fail(r, "poll");
			continue;
		}
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			return bench_fail(r, "accept");
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(lfd);
			answer(fd, me, p->size);
		}
		close(fd);
		if (pid < 0)
			return bench_fail(r, "fork");
		reap(&failed);
	}
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
	if (!quit_seen)
		return bench_fail_msg(r, "client did not finish in time");
	if (failed)
		return bench_fail_msg(r, "a forked child failed to answer");
	return 0;
}

/* Each client's own latencies, beside the group's: the worst p99 of them. */
struct forkconn_clients {
	uint16_t port;
	struct load_hist hist[];
};

static int fc_client(struct load_proc *lp, void *arg, const struct bench_params *p, struct bench_result *r)
{
	struct forkconn_clients *fc = arg;
	struct load_hist *mine = &fc->hist[lp->idx];
	char *buf = calloc(1, p->size);
	if (!buf)
		return bench_fail(r, "malloc");
	int rc = -1;
	/* a few requests before the window: the lazy starts stay out */
	for (int i = 0; i < 5; i++) {
		int fd = net_connect(fc->port);
		int ok = fd >= 0 && net_round_trip(fd, buf, p->size) == 0;
		if (fd >= 0)
			close(fd);
		if (!ok) {
			bench_fail(r, "request (warm-up)");
			goto out;
		}
	}
	if (load_ready(lp) < 0) {
		bench_fail_msg(r, "the group gave up before the start");
		goto out;
	}
	double end = load_window_end(lp), t0;
	while ((t0 = bench_now()) < end) {
		int fd = net_connect(fc->port);
		if (fd < 0) {
			bench_fail(r, "connect");
			goto out;
		}
		int ok = net_round_trip(fd, buf, p->size) == 0;
		close(fd);
		if (!ok) {
			bench_fail(r, "request");
			goto out;
		}
		double t1 = bench_now();
		load_record(lp, t0, t1);
		load_hist_add(mine, t1 - t0);
	}
	rc = 0;
out:
	free(buf);
	return rc;
}

static int fc_client_side(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	size_t bytes = sizeof(struct forkconn_clients) + sizeof(struct load_hist) * (size_t)p->conns;
	struct forkconn_clients *fc = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (fc == MAP_FAILED)
		return bench_fail(r, "mmap");
	fc->port = port;
	int rc = load_run(p->conns, fc_client, fc, p, 1, r);
	if (rc == 0) {
		double worst = 0;
		for (int i = 0; i < p->conns; i++)
			if (fc->hist[i].n) {
				double v = load_hist_pct(&fc->hist[i], 99) * 1e6;
				worst = v > worst ? v : worst;
			}
		r->v[1] = worst;
	}
	/* the server ends after answering this one */
	char *buf = calloc(1, p->size);
	int q = buf ? net_connect(port) : -1;
	if (buf)
		memset(buf, QUIT, p->size);
	if (q < 0 || net_round_trip(q, buf, p->size) < 0) {
		if (rc == 0)
			rc = bench_fail(r, "quit request");
		r->ok = 0;
	}
	if (q >= 0)
		close(q);
	free(buf);
	munmap(fc, bytes);
	return rc;
}

const struct bench_roles bench_forkconn_roles = { forking_server, fc_client_side };

/* ---- prefork ------------------------------------------------------------- */

#define PREFORK_WORKERS 3

static _Noreturn void prefork_worker(int lfd, pid_t master, size_t size)
{
	char buf[256];
	size_t n = size < sizeof buf ? size : sizeof buf;
	for (;;) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		if (poll(&pfd, 1, 50) <= 0) {
			if (getppid() != master)
				_exit(0); /* the master is gone: so is the run */
			continue;
		}
		/* the others may take it first: the listener is nonblocking */
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				continue;
			_exit(1);
		}
		if (net_read_full(fd, buf, n) != 1 || net_write_full(fd, buf, n) < 0)
			_exit(1);
		close(fd);
		if (buf[0] == QUIT)
			kill(master, SIGUSR1);
	}
}

static int prefork_server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	struct sigaction sa = { .sa_handler = on_quit };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	if (fcntl(lfd, F_SETFL, O_RDWR | O_NONBLOCK) < 0)
		return bench_fail(r, "fcntl");
	pid_t me = getpid(), kids[PREFORK_WORKERS];
	int nk = 0;
	long failed = 0;
	for (; nk < PREFORK_WORKERS; nk++) {
		kids[nk] = fork();
		if (kids[nk] == 0)
			prefork_worker(lfd, me, p->size);
		if (kids[nk] < 0)
			break;
	}
	double end = bench_now() + p->duration + BENCH_SLACK_S;
	while (nk == PREFORK_WORKERS && !quit_seen && bench_now() < end && !failed) {
		(void)poll(NULL, 0, 50);
		int st;
		if (waitpid(-1, &st, WNOHANG) > 0)
			failed++; /* a worker ended before the run did */
	}
	for (int i = 0; i < nk; i++)
		kill(kids[i], SIGTERM);
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
	if (nk < PREFORK_WORKERS)
		return bench_fail(r, "fork");
	if (failed)
		return bench_fail_msg(r, "a worker failed to answer");
	if (!quit_seen)
		return bench_fail_msg(r, "client did not finish in time");
	return 0;
}

const struct bench_roles bench_prefork_roles = { prefork_server, fc_client_side };

/* ---- forkexit ------------------------------------------------------------ */

#define FORKEXIT_WARMUP 20

static int cycle(struct bench_result *r)
{
	pid_t pid = fork();
	if (pid < 0)
		return bench_fail(r, "fork");
	if (pid == 0)
		_exit(0);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return bench_fail(r, "waitpid");
	return 0;
}

/* The cycles first, holding only the listener; then the client's
 * connection (waiting in the backlog meanwhile) is accepted, answered with
 * one byte (data over the switch: the listener was a switched one) and
 * closed, which ends the client. */
static int fe_server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	for (int i = 0; i < FORKEXIT_WARMUP; i++)
		if (cycle(r) < 0)
			return -1;
	double start = bench_now(), end = start + p->duration, now;
	long n = 0;
	while ((now = bench_now()) < end && n < p->count) {
		if (cycle(r) < 0)
			return -1;
		n++;
	}
	int fd = net_accept(lfd);
	if (fd < 0)
		return bench_fail(r, "accept");
	char c = 'x';
	int w = net_write_full(fd, &c, 1);
	close(fd);
	if (w < 0)
		return bench_fail(r, "write");
	r->v[0] = (now - start) / (double)n * 1e6;
	r->samples = n;
	r->ok = 1;
	return 0;
}

static int fe_client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	(void)p;
	char c;
	int fd = net_connect(port);
	if (fd < 0)
		return bench_fail(r, "connect");
	int got = net_read_full(fd, &c, 1);
	close(fd);
	return got < 0 ? bench_fail(r, "read") : 0;
}

const struct bench_roles bench_forkexit_roles = { fe_server, fe_client };
