/* bench_peer.c — `bench --serve` runs the server workers that `bench --peer` on another host asks for, over a one-line control connection. */
#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The request, one line: "ssw-bench 1 MODE KIND SIZE COUNT WARMUP DURATION
 * CONNS".  The answer: the worker's own stdout ("port N", then "result …" or
 * "error …"), then "stderr LAST-LINE" and "exit N" (or "exit signal N"),
 * then the server closes.  The client closing first kills the worker. */
#define MAGIC "ssw-bench 1"

/* The control connection is kernel TCP: the bench itself is never preloaded. */
int bench_peer_request(const struct bench_where *w, const struct bench_params *p, char *err, size_t len)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)w->peer_port) };
	if (inet_pton(AF_INET, w->addr, &sa.sin_addr) != 1) {
		snprintf(err, len, "--peer %s: not an IPv4 address", w->addr);
		return -1;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(err, len, "--peer %s:%u: %s (is `sockswitch bench --serve` running there?)", w->addr,
			 w->peer_port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char line[256];
	int n = snprintf(line, sizeof(line), MAGIC " %s %s %zu %ld %ld %.6g %d\n",
			 w->mode == MODE_SWITCHED ? "switched" : "kernel", bench_kind_name(p->kind), p->size,
			 p->count, p->warmup, p->duration, p->conns);
	if (write(fd, line, (size_t)n) != n) {
		snprintf(err, len, "--peer %s:%u: sending the request: %s", w->addr, w->peer_port, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* One request line within 5 s; 0, or -1 (answered with "error …"). */
static int read_request(int c, struct bench_params *p, int *mode)
{
	char line[256], kind[32], m[16];
	size_t got = 0;
	double end = bench_now() + 5;
	while (got < sizeof(line) - 1 && !memchr(line, '\n', got)) {
		struct pollfd pf = { c, POLLIN, 0 };
		if (bench_now() > end || poll(&pf, 1, 100) < 0)
			return -1;
		if (!pf.revents)
			continue;
		ssize_t r = read(c, line + got, sizeof(line) - 1 - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	line[got] = '\0';
	memset(p, 0, sizeof(*p));
	if (sscanf(line, MAGIC " %15s %31s %zu %ld %ld %lf %d", m, kind, &p->size, &p->count, &p->warmup,
		   &p->duration, &p->conns) != 7 || bench_kind_parse(kind, &p->kind) < 0 ||
	    (strcmp(m, "kernel") && strcmp(m, "switched")) || p->size < 1 || p->size > (64u << 20) ||
	    p->count < 1 || p->warmup < 0 || !(p->duration > 0 && p->duration <= BENCH_WORKER_TIMEOUT_S) ||
	    p->conns < 0 || p->conns > 1000000) {
		dprintf(c, "error bad request from the bench client (version mismatch?)\n");
		return -1;
	}
	*mode = strcmp(m, "switched") ? MODE_KERNEL : MODE_SWITCHED;
	return 0;
}

static void write_all(int fd, const char *b, size_t n)
{
	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		b += w;
		n -= (size_t)w;
	}
}

/* Runs one requested server worker, relaying its stdout to c until it ends
 * (or c closes: then it is killed). */
static void serve_one(int c, char **env[MODE_COUNT])
{
	struct bench_params p;
	int mode;
	if (read_request(c, &p, &mode) < 0)
		return;
	struct bench_where w = { .nsfd = { -1, -1 } };
	struct sockaddr_in me;
	socklen_t ml = sizeof(me);
	/* the server listens on the address the client reached us at */
	if (getsockname(c, (struct sockaddr *)&me, &ml) < 0 || me.sin_family != AF_INET ||
	    !inet_ntop(AF_INET, &me.sin_addr, w.addr, sizeof(w.addr))) {
		dprintf(c, "error the control connection is not IPv4\n");
		return;
	}
	int fds[2];
	pid_t pid = bench_worker_spawn("server", &p, 0, -1, env[mode], &w, fds);
	if (pid < 0) {
		dprintf(c, "error cannot start worker: %s\n", strerror(errno));
		return;
	}
	char last[200] = "", buf[4096];
	size_t lastlen = 0;
	double end = bench_now() + BENCH_WORKER_TIMEOUT_S + 5;
	while ((fds[0] >= 0 || fds[1] >= 0) && bench_now() < end) {
		struct pollfd pf[3] = { { fds[0], POLLIN, 0 }, { fds[1], POLLIN, 0 }, { c, POLLIN, 0 } };
		if (poll(pf, 3, 100) < 0 && errno != EINTR)
			break;
		if (pf[2].revents) {  /* the client went away (or spoke out of turn) */
			ssize_t r = read(c, buf, sizeof(buf));
			if (r <= 0)
				break;
		}
		for (int i = 0; i < 2; i++) {
			if (fds[i] < 0 || !pf[i].revents)
				continue;
			ssize_t r = read(fds[i], buf, sizeof(buf));
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r <= 0) {
				close(fds[i]);
				fds[i] = -1;
			} else if (i == 0) {
				write_all(c, buf, (size_t)r);
			} else {  /* keep the last line of stderr: it explains a crash */
				for (ssize_t k = 0; k < r; k++) {
					if (buf[k] == '\n') {
						if (lastlen)
							last[lastlen] = '\0';
						lastlen = 0;
					} else if (lastlen < sizeof(last) - 1) {
						if (!lastlen)
							last[0] = '\0';
						last[lastlen++] = buf[k];
					}
				}
			}
		}
	}
	if (fds[0] >= 0 || fds[1] >= 0)
		kill(pid, SIGKILL);
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (lastlen)
		last[lastlen] = '\0';
	if (last[0])
		dprintf(c, "stderr %s\n", last);
	if (WIFSIGNALED(st))
		dprintf(c, "exit signal %d\n", WTERMSIG(st));
	else
		dprintf(c, "exit %d\n", WEXITSTATUS(st));
}

int bench_serve(unsigned port, char **env[MODE_COUNT], char *err, size_t len)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 8) < 0) {
		snprintf(err, len, "--serve: port %u: %s", port, strerror(errno));
		if (l >= 0)
			close(l);
		return -1;
	}
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "bench: serving server workers on port %u (one case at a time; Ctrl-C stops)\n", port);
	for (;;) {
		int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			snprintf(err, len, "--serve: accept: %s", strerror(errno));
			close(l);
			return -1;
		}
		serve_one(c, env);
		close(c);
	}
}
