/* bench_sendfile.c — load family: a static-file server shaped like nginx.
 * Two pre-forked worker processes accept from one inherited listener, each
 * with its own epoll loop; every request on a keep-alive connection is
 * answered by a small HTTP-like header written with write() and a p->size
 * file sent with sendfile(), under TCP_CORK.  Two client processes keep
 * p->conns connections busy (half each), one request in flight on each, and
 * read every response in full. */
#include "bench_load.h"
#include "bench_net.h"
#include "bench_worker.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROCS 2
static const char request[] = "GET /file HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/* ---- server ---- */

struct site {
	int lfd;
	int file;
	char header[128];
	size_t header_len;
};

struct hconn {
	int fd;
	int sending;        /* a response is partly out; waiting for EPOLLOUT */
	char req[256];
	size_t have;
	size_t header_off;
	off_t file_off;
};

static int cork(int fd, int on)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on));
}

/* Pushes the rest of the response: 1 done, 0 the socket is full, -1 error. */
static int push(struct hconn *c, const struct site *s, size_t size)
{
	while (c->header_off < s->header_len) {
		ssize_t n = write(c->fd, s->header + c->header_off, s->header_len - c->header_off);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		c->header_off += (size_t)n;
	}
	while ((size_t)c->file_off < size) {
		ssize_t n = sendfile(c->fd, s->file, &c->file_off, size - (size_t)c->file_off);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		if (n == 0) {
			errno = EIO; /* the file is shorter than it was made */
			return -1;
		}
	}
	return cork(c->fd, 0) < 0 ? -1 : 1;
}

/* Reads what the client sent; a complete request starts a response.
 * 1 keep going, 0 the client closed, -1 error (in r). */
static int on_readable(struct hconn *c, const struct site *s, size_t size, int ep, struct bench_result *r)
{
	ssize_t n = read(c->fd, c->req + c->have, sizeof(c->req) - 1 - c->have);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 1 : bench_fail(r, "read request");
	if (n == 0)
		return 0;
	c->have += (size_t)n;
	c->req[c->have] = '\0';
	char *eoh = strstr(c->req, "\r\n\r\n");
	if (!eoh)
		return c->have < sizeof(c->req) - 1 ? 1 : bench_fail_msg(r, "request too long");
	if ((size_t)(eoh + 4 - c->req) != c->have)
		return bench_fail_msg(r, "data after the request (clients send one at a time)");
	c->have = 0;
	c->header_off = 0;
	c->file_off = 0;
	if (cork(c->fd, 1) < 0)
		return bench_fail(r, "setsockopt TCP_CORK");
	int done = push(c, s, size);
	if (done < 0)
		return bench_fail(r, "send response");
	if (!done) {
		struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = c };
		c->sending = 1;
		if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
			return bench_fail(r, "epoll_ctl");
	}
	return 1;
}

static int on_writable(struct hconn *c, const struct site *s, size_t size, int ep, struct bench_result *r)
{
	int done = push(c, s, size);
	if (done < 0)
		return bench_fail(r, "send response");
	if (done) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
		c->sending = 0;
		if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
			return bench_fail(r, "epoll_ctl");
	}
	return 1;
}

/* Takes every pending connection; the other worker may have taken it first. */
static int accept_all(const struct site *s, struct hconn *cs, int max, int *open, int ep, struct bench_result *r)
{
	for (;;) {
		int fd = net_accept(s->lfd);
		if (fd < 0)
			return errno == EAGAIN ? 0 : bench_fail(r, "accept");
		int i = 0;
		while (i < max && cs[i].fd >= 0)
			i++;
		if (i == max) {
			close(fd);
			return bench_fail_msg(r, "more connections than clients");
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		memset(&cs[i], 0, sizeof(cs[i]));
		cs[i].fd = fd;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &cs[i] };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			return bench_fail(r, "epoll_ctl");
		(*open)++;
	}
}

/* One pre-forked worker; it stops once the clients closed every connection,
 * counted over both workers. */
static int http_worker(struct load_proc *lp, void *arg, const struct bench_params *p, struct bench_result *r)
{
	const struct site *s = arg;
	int ep = epoll_create1(EPOLL_CLOEXEC), open = 0, rc = -1;
	struct hconn *cs = calloc((size_t)p->conns, sizeof(*cs));
	struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL }, evs[64];
	if (ep < 0 || !cs || epoll_ctl(ep, EPOLL_CTL_ADD, s->lfd, &lev) < 0) {
		bench_fail(r, "setup");
		goto out;
	}
	for (int i = 0; i < p->conns; i++)
		cs[i].fd = -1;
	double end = bench_now() + p->duration + BENCH_SLACK_S;
	while (open > 0 || load_counter_add(lp, 0) < p->conns) {
		if (bench_now() > end) {
			bench_fail_msg(r, "clients did not finish in time");
			goto out;
		}
		int n = epoll_wait(ep, evs, 64, 100);
		if (n < 0 && errno != EINTR) {
			bench_fail(r, "epoll_wait");
			goto out;
		}
		for (int i = 0; i < n; i++) {
			struct hconn *c = evs[i].data.ptr;
			int more;
			if (!c)
				more = accept_all(s, cs, p->conns, &open, ep, r) < 0 ? -1 : 1;
			else if (c->sending)
				more = on_writable(c, s, p->size, ep, r);
			else
				more = on_readable(c, s, p->size, ep, r);
			if (more < 0)
				goto out;
			if (more == 0) {
				close(c->fd); /* also leaves the epoll set */
				c->fd = -1;
				open--;
				load_counter_add(lp, 1);
			}
		}
	}
	rc = 0;
out:
	for (int i = 0; cs && i < p->conns; i++)
		if (cs[i].fd >= 0)
			close(cs[i].fd);
	if (ep >= 0)
		close(ep);
	free(cs);
	return rc;
}

/* The file lives in memory (memfd), like a hot file in the page cache. */
static int make_file(size_t size)
{
	int fd = memfd_create("sockswitch-bench-file", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	char *buf = malloc(size);
	if (!buf) {
		close(fd);
		return -1;
	}
	memset(buf, 'f', size);
	int rc = net_write_full(fd, buf, size);
	free(buf);
	if (rc < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	struct site s = { .lfd = lfd, .file = make_file(p->size) };
	if (s.file < 0)
		return bench_fail(r, "create the file to send");
	int len = snprintf(s.header, sizeof(s.header),
			   "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %zu\r\n\r\n",
			   p->size);
	s.header_len = (size_t)len;
	fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
	int rc = load_run(PROCS, http_worker, &s, p, 0, r);
	close(s.file);
	return rc;
}

/* ---- client ---- */

struct cconn {
	int fd;
	double issued;
	int in_body;
	char hdr[512];
	size_t hlen;
	size_t body_left;
};

static int issue(struct cconn *c, struct bench_result *r)
{
	c->issued = bench_now();
	c->in_body = 0;
	c->hlen = 0;
	/* one small request on an idle connection: the socket has room */
	ssize_t n = write(c->fd, request, sizeof(request) - 1);
	if (n != (ssize_t)(sizeof(request) - 1))
		return n < 0 ? bench_fail(r, "write request") : bench_fail_msg(r, "short write of a request");
	return 0;
}

/* Takes n bytes of response: 1 the response is complete, 0 not yet, -1 error. */
static int consume(struct cconn *c, const char *data, size_t n, size_t size, struct bench_result *r)
{
	size_t i = 0;
	while (i < n) {
		if (c->in_body) {
			size_t k = n - i < c->body_left ? n - i : c->body_left;
			i += k;
			c->body_left -= k;
		} else {
			if (c->hlen >= sizeof(c->hdr) - 1)
				return bench_fail_msg(r, "response header too long");
			c->hdr[c->hlen++] = data[i++];
			c->hdr[c->hlen] = '\0';
			if (c->hlen < 4 || memcmp(c->hdr + c->hlen - 4, "\r\n\r\n", 4))
				continue;
			const char *cl = strstr(c->hdr, "Content-Length: ");
			if (strncmp(c->hdr, "HTTP/1.1 200 ", 13) || !cl || strtoul(cl + 16, NULL, 10) != size)
				return bench_fail_msg(r, "unexpected response header");
			c->in_body = 1;
			c->body_left = size;
		}
		if (c->in_body && c->body_left == 0)
			return i == n ? 1 : bench_fail_msg(r, "data after the response");
	}
	return 0;
}

struct client_conf {
	uint16_t port;
};

/* Reads one event's worth; 1 when a response completed, 0 not yet, -1 error. */
static int on_response(struct cconn *c, char *buf, size_t cap, size_t size, struct bench_result *r)
{
	ssize_t n = read(c->fd, buf, cap);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : bench_fail(r, "read response");
	if (n == 0)
		return bench_fail_msg(r, "server closed a connection");
	return consume(c, buf, (size_t)n, size, r);
}

/* Runs requests on every connection until `until`; with lp, records them.
 * A connection whose response arrives after `until` stays idle. */
static int drive(struct cconn *cs, int n, int ep, char *buf, size_t cap, double until, struct load_proc *lp,
		 const struct bench_params *p, struct bench_result *r)
{
	struct epoll_event evs[64];
	int busy = n;
	double deadline = load_deadline();
	for (int i = 0; i < n; i++)
		if (issue(&cs[i], r) < 0)
			return -1;
	while (busy > 0) {
		if (bench_now() > deadline)
			return bench_fail_msg(r, "responses did not arrive in time");
		int k = epoll_wait(ep, evs, 64, 1000);
		if (k < 0 && errno != EINTR)
			return bench_fail(r, "epoll_wait");
		for (int i = 0; i < k; i++) {
			struct cconn *c = evs[i].data.ptr;
			int got = on_response(c, buf, cap, p->size, r);
			if (got < 0)
				return -1;
			if (!got)
				continue;
			double now = bench_now();
			if (lp)
				load_record(lp, c->issued, now);
			if (now >= until)
				busy--;
			else if (issue(c, r) < 0)
				return -1;
		}
	}
	return 0;
}

static int client_proc(struct load_proc *lp, void *arg, const struct bench_params *p, struct bench_result *r)
{
	const struct client_conf *cf = arg;
	int n = p->conns / PROCS + (lp->idx < p->conns % PROCS);
	int ep = epoll_create1(EPOLL_CLOEXEC), made = 0, rc = -1;
	size_t cap = 65536 + sizeof(((struct cconn *)0)->hdr);
	struct cconn *cs = calloc((size_t)n, sizeof(*cs));
	char *buf = malloc(cap);
	if (ep < 0 || !cs || !buf) {
		bench_fail(r, "setup");
		goto out;
	}
	for (; made < n; made++) {
		if ((cs[made].fd = net_connect(cf->port)) < 0) {
			bench_fail(r, "connect");
			goto out;
		}
		fcntl(cs[made].fd, F_SETFL, fcntl(cs[made].fd, F_GETFL) | O_NONBLOCK);
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &cs[made] };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[made].fd, &ev) < 0) {
			bench_fail(r, "epoll_ctl");
			made++;
			goto out;
		}
	}
	/* warm-up: one request on every connection, not recorded */
	if (drive(cs, n, ep, buf, cap, 0, NULL, p, r) < 0)
		goto out;
	if (load_ready(lp) < 0) {
		bench_fail_msg(r, "the group gave up before the start");
		goto out;
	}
	rc = drive(cs, n, ep, buf, cap, load_window_end(lp), lp, p, r);
out:
	for (int i = 0; i < made; i++)
		close(cs[i].fd); /* the servers count the closes and end */
	if (ep >= 0)
		close(ep);
	free(cs);
	free(buf);
	return rc;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	struct client_conf cf = { port };
	return load_run(PROCS, client_proc, &cf, p, 1, r);
}

const struct bench_roles bench_sendfile_roles = { server, client };
