/* bench_epoll.c — an event-driven server: BENCH_EPOLL_CONNS connections to
 * one epoll loop (level-triggered, nonblocking), each with one request of
 * `size` bytes in flight at a time; the client drives them all from its own
 * epoll loop and counts answered requests per second.  This is the shape of
 * redis, memcached or nginx keep-alive traffic.  The server also serves
 * the load family's manyconns case (bench_manyconns.c). */
#include "bench_net.h"
#include "bench_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* A request or its echo, partly read or written: per connection. */
struct conn {
	int fd;
	size_t have;
};

static void nonblocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Read what is there into c; 1 when a whole message is in, 0 not yet, -1
 * EOF or error. */
static int take(struct conn *c, char *buf, size_t size)
{
	for (;;) {
		ssize_t n = read(c->fd, buf + c->have, size - c->have);
		if (n > 0) {
			c->have += (size_t)n;
			if (c->have == size) {
				c->have = 0;
				return 1;
			}
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		return -1;
	}
}

/* Connections past the first nconns are accepted and closed at once: the
 * connect-rate phase of manyconns, measured while the others stay open. */
static int accept_close(int lfd)
{
	int fd = net_accept(lfd);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

/* The hold variant: a child that keeps a copy of every connection and
 * never touches them, as redis' BGSAVE child (a snapshot written while the
 * parent serves).  Under a provider without shared context each
 * connection is then shared by fork; what that costs the parent's waits
 * is what this measures (an epoll set that looked at every such member at
 * every wait ran 100x slower). */
static pid_t hold_all(void)
{
	pid_t kid = fork();
	if (kid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;)
			pause();
	}
	return kid;
}

int bench_epoll_server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	int nconns = p->conns > 0 ? p->conns : BENCH_EPOLL_CONNS + (p->hold ? BENCH_EPOLL_IDLE : 0);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct conn *cs = calloc((size_t)nconns, sizeof *cs);
	char *buf = malloc(p->size);
	int rc = -1, open = 0;
	pid_t holder = 0;
	if (ep < 0 || !cs || !buf) {
		bench_fail(r, "setup");
		goto out;
	}
	for (int i = 0; i < nconns; i++)
		cs[i].fd = -1;
	for (int i = 0; i < nconns; i++) {
		if ((cs[i].fd = net_accept(lfd)) < 0) {
			bench_fail(r, "accept");
			goto out;
		}
		nonblocking(cs[i].fd);
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &cs[i] };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev) < 0) {
			bench_fail(r, "epoll_ctl");
			goto out;
		}
		open++;
	}
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0) {
		bench_fail(r, "epoll_ctl listener");
		goto out;
	}
	if (p->hold && (holder = hold_all()) < 0) {
		bench_fail(r, "fork the holding child");
		goto out;
	}
	/* manyconns: a warm-up pass and a round-trip phase of up to p->duration
	 * each, and a connect phase of half that */
	double end = bench_now() + 3 * p->duration + BENCH_SLACK_S;
	struct epoll_event evs[64];
	while (open > 0 && bench_now() < end) {
		int n = epoll_wait(ep, evs, 64, 1000);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c) {
				if (accept_close(lfd) < 0) {
					bench_fail(r, "accept");
					goto out;
				}
				continue;
			}
			int got = take(c, buf, p->size);
			if (got < 0) {
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				close(c->fd);
				c->fd = -1;
				open--;
			} else if (got == 1 && net_write_full(c->fd, buf, p->size) < 0) {
				bench_fail(r, "write");
				goto out;
			}
		}
	}
	rc = open ? bench_fail_msg(r, "client did not finish in time") : 0;
out:
	if (holder > 0) {
		kill(holder, SIGKILL);
		waitpid(holder, NULL, 0);
	}
	for (int i = 0; cs && i < nconns; i++)
		if (cs[i].fd >= 0)
			close(cs[i].fd);
	if (ep >= 0)
		close(ep);
	free(cs);
	free(buf);
	return rc;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	/* the hold variant: idle connections too (a server's keep-alive
	 * clients), which a wait must not pay for */
	int total = BENCH_EPOLL_CONNS + (p->hold ? BENCH_EPOLL_IDLE : 0);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct conn *cs = calloc((size_t)total, sizeof *cs);
	char *buf = malloc(p->size);
	int rc = -1;
	long done = 0;
	if (ep < 0 || !cs || !buf) {
		bench_fail(r, "setup");
		goto out;
	}
	memset(buf, 'e', p->size);
	for (int i = 0; i < total; i++)
		cs[i].fd = -1;
	for (int i = 0; i < total; i++) {
		if ((cs[i].fd = net_connect(port)) < 0) {
			bench_fail(r, "connect");
			goto out;
		}
	}
	/* every connection up: start timing, one request in flight on each */
	double start = bench_now(), end = start + p->duration;
	for (int i = 0; i < BENCH_EPOLL_CONNS; i++) {
		nonblocking(cs[i].fd);
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &cs[i] };
		epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
		if (net_write_full(cs[i].fd, buf, p->size) < 0) {
			bench_fail(r, "write");
			goto out;
		}
	}
	struct epoll_event evs[64];
	double now = start;
	while ((now = bench_now()) < end && done < p->count) {
		int n = epoll_wait(ep, evs, 64, 1000);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			int got = take(c, buf, p->size);
			if (got < 0) {
				bench_fail_msg(r, "server closed a connection");
				goto out;
			}
			if (got == 1) {
				done++;
				if (net_write_full(c->fd, buf, p->size) < 0) {
					bench_fail(r, "write");
					goto out;
				}
			}
		}
	}
	if (done == 0) {
		bench_fail_msg(r, "no request answered in time");
		goto out;
	}
	r->v[0] = (double)done / (now - start);
	r->samples = done;
	r->ok = 1;
	rc = 0;
out:
	for (int i = 0; cs && i < total; i++)
		if (cs[i].fd >= 0)
			close(cs[i].fd); /* the server sees EOF on each and ends */
	if (ep >= 0)
		close(ep);
	free(cs);
	free(buf);
	return rc;
}

const struct bench_roles bench_epoll_roles = { bench_epoll_server, client };
