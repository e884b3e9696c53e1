/* bench_duplex.c — load family: a full-duplex stream.  Both ends write
 * p->size messages for p->duration from one thread while another thread
 * reads, so each direction's data competes with the other's (credits,
 * wake-ups, copies on both sides at once).  The client reports the bytes of
 * both directions over the time until the last byte of both had arrived. */
#include "bench_net.h"
#include "bench_worker.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct reader {
	int fd;
	size_t cap;
	double bytes;
	double eof_at;
	int err;         /* errno of a failed read, 0 if it ended at EOF */
};

static void *read_to_eof(void *arg)
{
	struct reader *rd = arg;
	char *buf = malloc(rd->cap);
	if (!buf) {
		rd->err = ENOMEM;
		return NULL;
	}
	for (;;) {
		ssize_t n = read(rd->fd, buf, rd->cap);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rd->err = errno;
			break;
		}
		if (n == 0)
			break;
		rd->bytes += (double)n;
	}
	rd->eof_at = bench_now();
	free(buf);
	return NULL;
}

/* Writes whole messages until the time is up; returns bytes written or -1. */
static double write_for(int fd, const struct bench_params *p, struct bench_result *r)
{
	char *buf = malloc(p->size);
	if (!buf)
		return bench_fail(r, "malloc");
	memset(buf, 'd', p->size);
	double end = bench_now() + p->duration, bytes = 0;
	while (bench_now() < end) {
		if (net_write_full(fd, buf, p->size) < 0) {
			free(buf);
			return bench_fail(r, "write");
		}
		bytes += (double)p->size;
	}
	free(buf);
	return bytes;
}

/* The server stops writing on time, but sends its EOF only once it has read
 * the client's: so when the client sees EOF, both directions are complete. */
static int both_ways(int fd, int is_server, const struct bench_params *p, struct bench_result *r)
{
	struct reader rd = { .fd = fd, .cap = p->size > 65536 ? p->size : 65536 };
	pthread_t t;
	double start = bench_now();
	int e = pthread_create(&t, NULL, read_to_eof, &rd);
	if (e) {
		errno = e;
		return bench_fail(r, "pthread_create");
	}
	double sent = write_for(fd, p, r);
	if (sent >= 0 && !is_server && shutdown(fd, SHUT_WR) < 0)
		sent = bench_fail(r, "shutdown");
	if (sent < 0)
		shutdown(fd, SHUT_RDWR); /* unblocks our reader */
	pthread_join(t, NULL);
	if (sent < 0)
		return -1;
	if (rd.err) {
		errno = rd.err;
		return bench_fail(r, "read");
	}
	if (is_server)
		return shutdown(fd, SHUT_WR) < 0 ? bench_fail(r, "shutdown") : 0;
	if (rd.bytes < (double)p->size || rd.eof_at <= start)
		return bench_fail_msg(r, "too little data received to measure");
	r->v[0] = (sent + rd.bytes) / 1e6 / (rd.eof_at - start);
	r->samples = (long)((sent + rd.bytes) / (double)p->size);
	r->ok = 1;
	return 0;
}

static int server(int lfd, const struct bench_params *p, struct bench_result *r)
{
	int fd = net_accept(lfd);
	if (fd < 0)
		return bench_fail(r, "accept");
	int rc = both_ways(fd, 1, p, r);
	close(fd);
	return rc;
}

static int client(uint16_t port, const struct bench_params *p, struct bench_result *r)
{
	int fd = net_connect(port);
	if (fd < 0)
		return bench_fail(r, "connect");
	int rc = both_ways(fd, 0, p, r);
	close(fd);
	return rc;
}

const struct bench_roles bench_duplex_roles = { server, client };
