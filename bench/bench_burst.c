/* bench_burst.c — load family: a burst of connects.  One client opens
 * p->conns connections at once (nonblocking connects, one after another as
 * fast as it can) to an epoll server that drains its backlog (accept until
 * EAGAIN), waits until all are established, then sends one 64 B request on
 * each and waits for every answer; the server answers and closes, the client
 * waits for every close before the next burst.  What it shows: what a pool
 * warm-up or a fan-out of short connections costs (connection set-up in a
 * burst, nothing kept from one connection for the next).
 * Reported: connects per second (p->conns over the time until the last one
 * was established), the same over the bursts after the first (at least
 * two run), and the time in ms until every connection has made its round
 * trip. */
#include "bench_load.h"
#include "bench_net.h"
#include "bench_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* the first byte of the client's last request: the server ends */
#define QUIT 'q'

struct sconn {
	int fd;
	size_t have;
};

/* Accept until the backlog is empty, as an epoll server does. */
static int drain(int lfd, int ep, struct bench_result *r)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? 0 : bench_fail(r, "accept");
		struct sconn *c = calloc(1, sizeof *c);
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
		if (!c || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			free(c);
			close(fd);
			return bench_fail(r, "epoll_ctl");
		}
		c->fd = fd;
	}
}

/* 1: the request is answered and the connection closed; 0: more to come;
 * 2: it was the quit request; -1: an error. */
static int serve(struct sconn *c, char *buf, size_t size)
{
	for (;;) {
		ssize_t n = read(c->fd, buf + c->have, size - c->have);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n <= 0) /* EOF before a whole request: the client gave up */
			return -1;
		c->have += (size_t)n;
		if (c->have < size)
			continue;
		int quit = buf[0] == QUIT;
		int rc = net_write_full(c->fd, buf, size) < 0 ? -1 : quit ? 2 : 1;
		close(c->fd); /* closed first: TIME_WAIT stays here, the client never runs out of ports */
		return rc;
	}
}

static int server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	char *buf = malloc(p->size);
	int rc = -1;
	if (ep < 0 || !buf || fcntl(lfd, F_SETFL, O_NONBLOCK) < 0) {
		bench_fail(r, "setup");
		goto out;
	}
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0) {
		bench_fail(r, "epoll_ctl");
		goto out;
	}
	/* a slow burst takes seconds: wait as long as the workers may run */
	double end = load_deadline();
	struct epoll_event evs[256];
	while (bench_now() < end) {
		int n = epoll_wait(ep, evs, 256, 1000);
		for (int i = 0; i < n; i++) {
			struct sconn *c = evs[i].data.ptr;
			if (!c) {
				if (drain(lfd, ep, r) < 0)
					goto out;
				continue;
			}
			int got = serve(c, buf, p->size);
			if (got == 0)
				continue;
			free(c); /* closed: it left the epoll set */
			if (got == 2) {
				rc = 0;
				goto out;
			}
		}
	}
	bench_fail_msg(r, "client did not finish in time");
out:
	if (ep >= 0)
		close(ep);
	free(buf);
	return rc;
}

static int open_conn(const struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0 && errno != EINPROGRESS) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Waits for n events of the set (each connection once), calling fn on each. */
static int wait_all(int ep, struct epoll_event *evs, int n, double deadline, int (*fn)(int ep, int fd, void *arg),
		    void *arg, int *fds)
{
	int done = 0;
	while (done < n) {
		if (bench_now() > deadline) {
			errno = ETIMEDOUT;
			return -1;
		}
		int k = epoll_wait(ep, evs, n, 1000);
		if (k < 0 && errno != EINTR)
			return -1;
		for (int i = 0; i < k; i++) {
			int rc = fn(ep, fds[evs[i].data.u32], arg);
			if (rc < 0)
				return -1;
			done += rc;
		}
	}
	return 0;
}

/* Established (writable, no error): the request goes, and we wait for the answer. */
static int established(int ep, int fd, void *arg)
{
	int err = 0;
	socklen_t l = sizeof err;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err) {
		errno = err ? err : errno;
		return -1;
	}
	if (epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) < 0 || net_write_full(fd, arg, 64) < 0)
		return -1;
	return 1;
}

/* The answer (64 B, one message on loopback and over shm) is in. */
static int answered(int ep, int fd, void *arg)
{
	char *buf = arg;
	ssize_t n = read(fd, buf, 64);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n == 64)
		return epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) < 0 ? -1 : 1;
	errno = n < 0 ? errno : EPROTO;
	return -1;
}

/* The server's close after its answer. */
static int eof(int ep, int fd, void *arg)
{
	char b;
	(void)ep, (void)arg;
	ssize_t n = read(fd, &b, 1);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n == 0)
		return 1;
	errno = n < 0 ? errno : EPROTO;
	return -1;
}

static int readd(int ep, int *fds, int n, uint32_t events)
{
	for (int i = 0; i < n; i++) {
		struct epoll_event ev = { .events = events, .data.u32 = (uint32_t)i };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0 && errno != EEXIST)
			return -1;
	}
	return 0;
}

/* One burst: n connects at once; *conn_s: until all established, *all_s:
 * until every one made its round trip.  All closed again by the server. */
static int burst(const struct sockaddr_in *sa, int n, int *fds, struct epoll_event *evs, double *conn_s, double *all_s,
		 struct bench_result *r)
{
	char buf[64];
	int ep = epoll_create1(EPOLL_CLOEXEC), opened = 0, rc = -1;
	double deadline = load_deadline();
	memset(buf, 'b', sizeof buf);
	if (ep < 0)
		return bench_fail(r, "epoll_create1");
	double t0 = bench_now();
	for (; opened < n; opened++) {
		if ((fds[opened] = open_conn(sa)) < 0) {
			bench_fail(r, "connect");
			goto out;
		}
		struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = (uint32_t)opened };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[opened], &ev) < 0) {
			bench_fail(r, "epoll_ctl");
			goto out;
		}
	}
	if (wait_all(ep, evs, n, deadline, established, buf, fds) < 0) {
		bench_fail(r, "establishing");
		goto out;
	}
	double t1 = bench_now();
	if (readd(ep, fds, n, EPOLLIN) < 0 || wait_all(ep, evs, n, deadline, answered, buf, fds) < 0) {
		bench_fail(r, "round trip");
		goto out;
	}
	double t2 = bench_now();
	if (readd(ep, fds, n, EPOLLIN) < 0 || wait_all(ep, evs, n, deadline, eof, NULL, fds) < 0) {
		bench_fail(r, "waiting for the server's close");
		goto out;
	}
	*conn_s = t1 - t0;
	*all_s = t2 - t0;
	rc = 0;
out:
	for (int i = 0; i < opened; i++)
		close(fds[i]);
	close(ep);
	return rc;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	int n = p->conns > 0 ? p->conns : 1;
	int *fds = malloc(sizeof(int) * (size_t)n);
	struct epoll_event *evs = malloc(sizeof *evs * (size_t)n);
	struct sockaddr_in sa = net_server_addr(port);
	int rc = -1;
	if (!fds || !evs) {
		bench_fail(r, "malloc");
		goto out;
	}
	/* bursts until the window is over (at least one); the server closes
	 * each burst's connections as it answers, and the answers' EOFs are
	 * read before the next burst starts */
	double end = bench_now() + p->duration, conns = 0, conn_time = 0, all_time = 0, later_time = 0;
	long bursts = 0;
	do {
		double c = 0, a = 0;
		if (burst(&sa, n, fds, evs, &c, &a, r) < 0)
			goto out;
		conns += n;
		conn_time += c;
		all_time += a;
		if (bursts)
			later_time += c;
		bursts++;
	} while (bursts < 2 || bench_now() < end);
	int q = net_connect(port);
	char buf[64];
	memset(buf, QUIT, sizeof buf);
	if (q < 0 || net_round_trip(q, buf, sizeof buf) < 0) {
		bench_fail(r, "quit request");
		if (q >= 0)
			close(q);
		goto out;
	}
	close(q);
	r->v[0] = conns / conn_time;
	r->v[1] = all_time / (double)bursts * 1e3;
	/* the bursts after the first: what the process kept from one burst
	 * for the next (the first pays for everything new) */
	r->v[2] = (conns - n) / later_time;
	r->samples = (long)conns;
	r->ok = 1;
	rc = 0;
out:
	free(fds);
	free(evs);
	return rc;
}

const struct bench_roles bench_burst_roles = { server, client };
