/* bench_stream.c — one-way stream of fixed-size messages; the receiver (server) measures.
 * conns 1: the receiver first execs itself with the connection (a program
 * exec'd with its connection, as inetd's: README Limits), and the new image
 * measures. */
#include "bench_net.h"
#include "bench_worker.h"

#include <stdlib.h>
#include <string.h>
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

static int server(int lfd, const struct bench_params *p, struct bench_result *r)
{
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
