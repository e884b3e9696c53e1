/* bench_stream.c — one-way stream of fixed-size messages; the receiver (server) measures.
 * conns 1: the receiver first execs itself with the connection (a program
 * exec'd with its connection, as inetd's: README Limits), and the new image
 * measures.  conns 2: the receiver sends the connection over SCM_RIGHTS to
 * another process (a worker, as a master passes connections) and closes
 * its copy; that process measures. */
#include "bench_net.h"
#include "bench_worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Reads with a buffer of at least 64 KiB whatever the message size, as real
 * receivers do, and measures from the first byte to EOF: what the sender
 * managed to push through, including draining what was still queued. */
int bench_stream_receive(int fd, const struct bench_params *p, struct bench_result *r)
{
	size_t cap = p->size > 65536 ? p->size : 65536;
	char *buf = malloc(cap);
	if (!buf) {
		close(fd);
		return bench_fail(r, "malloc");
	}
	double limit_bytes = (double)p->count * (double)p->size;
	double deadline = bench_now() + p->duration + BENCH_SLACK_S;
	double first = 0, last = 0, bytes = 0;
	int rc = -1;
	for (;;) {
		ssize_t n = read(fd, buf, cap);
		if (n < 0) {
			bench_fail(r, "read");
			goto out;
		}
		if (n == 0)
			break;
		last = bench_now();
		if (bytes == 0)
			first = last;
		bytes += (double)n;
		if (bytes > limit_bytes || last > deadline) {
			bench_fail_msg(r, "sender did not stop in time");
			goto out;
		}
	}
	if (bytes < (double)p->size || last <= first) {
		bench_fail_msg(r, "too little data received to measure");
		goto out;
	}
	r->v[0] = bytes / 1e6 / (last - first);
	r->v[1] = bytes / (double)p->size / (last - first);
	r->samples = (long)(bytes / (double)p->size);
	r->ok = 1;
	rc = 0;
out:
	close(fd);
	free(buf);
	return rc;
}

/* Writes whole messages back to back for p->duration.  The clock is read
 * about every 64 KiB, not per message, so that timing small messages does not
 * cost more than sending them. */
static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	char *buf = malloc(p->size);
	if (!buf)
		return bench_fail(r, "malloc");
	memset(buf, 'x', p->size);
	int fd = net_connect(port);
	if (fd < 0) {
		free(buf);
		return bench_fail(r, "connect");
	}
	long check = p->size >= 65536 ? 1 : (long)(65536 / p->size);
	double end = bench_now() + p->duration;
	int rc = 0;
	for (long i = 0; i < p->count; i++) {
		if (i % check == 0 && bench_now() >= end)
			break;
		if (net_write_full(fd, buf, p->size) < 0) {
			rc = bench_fail(r, "write");
			break;
		}
	}
	close(fd);
	free(buf);
	return rc;
}

static int recv_fd(int u)
{
	char b;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} c;
	struct iovec v = { &b, 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b };
	if (recvmsg(u, &m, 0) != 1)
		return -1;
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	int fd = -1;
	if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(h), sizeof fd);
	return fd;
}

static int send_fd(int u, int fd)
{
	char b = 'c';
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} c;
	memset(&c, 0, sizeof c);
	struct iovec v = { &b, 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof c.b };
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof fd);
	return sendmsg(u, &m, 0) == 1 ? 0 : -1;
}

/* conns 2: accept, fork the worker (after the accept: a fabric listener
 * stays with a parent that accepted, README Limits), which lets go of the
 * copy the fork gave it; send it the connection, close ours. */
static int pass_to_worker(int lfd, const struct bench_params *p, struct bench_result *r)
{
	int sv[2];
	struct bench_result *w = mmap(NULL, sizeof *w, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (w == MAP_FAILED)
		return bench_fail(r, "mmap");
	memset(w, 0, sizeof *w);
	int fd = net_accept(lfd);
	if (fd < 0)
		return bench_fail(r, "accept");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return bench_fail(r, "socketpair");
	pid_t pid = fork();
	if (pid < 0)
		return bench_fail(r, "fork");
	if (pid == 0) {
		close(fd);
		close(sv[0]);
		close(lfd);
		int got = recv_fd(sv[1]);
		int rc = got < 0 ? bench_fail(w, "receive the connection") : bench_stream_receive(got, p, w);
		exit(rc == 0 ? 0 : 1); /* not _exit: the switch's stats line (--stats-dir) is written at exit */
	}
	close(sv[1]);
	int rc = send_fd(sv[0], fd) < 0 ? bench_fail(r, "send the connection") : 0;
	close(fd);
	close(sv[0]);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (rc == 0) {
		*r = *w;
		rc = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
		if (rc < 0 && !r->error[0])
			bench_fail(r, "the worker failed");
	}
	munmap(w, sizeof *w);
	return rc;
}

static int server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	if (p->conns == 2)
		return pass_to_worker(lfd, p, r);
	int fd = net_accept(lfd);
	if (fd < 0)
		return bench_fail(r, "accept");
	if (p->conns == 1) {
		close(lfd);
		return bench_worker_reexec(fd, r); /* returns only if the exec failed */
	}
	return bench_stream_receive(fd, p, r);
}

const struct bench_roles bench_stream_roles = { server, client };
