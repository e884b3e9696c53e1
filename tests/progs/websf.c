/* websf.c — web-server-like load (nginx's sendfile + TCP_CORK pattern): 2
 * worker processes with epoll serve a file to keep-alive connections of one
 * client process; prints responses per second.  Manual measurement tool:
 *   websf FILE_BYTES [SECONDS] [CONNS] [MODE]
 * MODE: cork (header write + sendfile under TCP_CORK, the default), write
 * (header + file bytes by write from a mapping, no cork), nocork (write +
 * sendfile), readwrite (nginx with sendfile off: pread into a buffer, then
 * write, under TCP_CORK). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REQ_LEN 64
#define HDR_LEN 200
#define MAXC 256

enum { M_CORK, M_WRITE, M_NOCORK, M_READWRITE };

struct conn {
	int fd;
	size_t got;      /* request bytes read (server) / response bytes read (client) */
	off_t off;       /* file offset sent (server); -1: idle */
	size_t hdr_sent;
};

static size_t fsize;
static int mode;
static int filefd;
static char *filemap;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void cork(int fd, int on)
{
	if (mode == M_CORK || mode == M_READWRITE)
		setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
}

/* Send what is left of the response; returns 1 when complete, 0 on EAGAIN, -1 on error. */
static int serve(struct conn *c)
{
	static char hdr[HDR_LEN];
	while (c->hdr_sent < HDR_LEN) {
		ssize_t n = write(c->fd, hdr + c->hdr_sent, HDR_LEN - c->hdr_sent);
		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		c->hdr_sent += (size_t)n;
	}
	while ((size_t)c->off < fsize) {
		ssize_t n;
		if (mode == M_WRITE) {
			n = write(c->fd, filemap + c->off, fsize - (size_t)c->off);
			if (n > 0)
				c->off += n;
		} else if (mode == M_READWRITE) {
			static char rbuf[1 << 15]; /* nginx's output buffers are 32 KiB */
			size_t want = fsize - (size_t)c->off < sizeof rbuf ? fsize - (size_t)c->off : sizeof rbuf;
			n = pread(filefd, rbuf, want, c->off);
			if (n > 0)
				n = write(c->fd, rbuf, (size_t)n); /* a short write re-reads: fine for a measurement */
			if (n > 0)
				c->off += n;
		} else {
			n = sendfile(c->fd, filefd, &c->off, fsize - (size_t)c->off);
		}
		if (n < 0)
			return errno == EAGAIN ? 0 : -1;
		if (n == 0)
			return -1;
	}
	cork(c->fd, 0);
	return 1;
}

static void worker(int lfd)
{
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = NULL };
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	struct epoll_event evs[64];
	char buf[REQ_LEN * 4];
	for (;;) {
		int n = epoll_wait(ep, evs, 64, -1);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c) {
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
				if (fd < 0)
					continue;
				c = calloc(1, sizeof *c);
				c->fd = fd;
				c->off = -1;
				struct epoll_event e = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c };
				epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
				continue;
			}
			for (;;) {
				if (c->off >= 0) { /* a response in progress */
					int r = serve(c);
					if (r < 0)
						goto drop;
					if (r == 0)
						break;
					c->off = -1;
				}
				ssize_t k = read(c->fd, buf, REQ_LEN - c->got);
				if (k == 0)
					goto drop;
				if (k < 0) {
					if (errno == EAGAIN)
						break;
					goto drop;
				}
				c->got += (size_t)k;
				if (c->got == REQ_LEN) {
					c->got = 0;
					c->off = 0;
					c->hdr_sent = 0;
					cork(c->fd, 1);
				}
			}
			continue;
drop:
			close(c->fd);
			free(c);
		}
	}
}

static long done_total;

static int client(int port, double secs, int nconn)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(0x7f000001) };
	int ep = epoll_create1(0);
	static struct conn cs[MAXC];
	char req[REQ_LEN] = "GET /f HTTP/1.1\r\n";
	size_t resp = HDR_LEN + fsize;
	for (int i = 0; i < nconn; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
			perror("connect");
			return 1;
		}
		fcntl(fd, F_SETFL, O_NONBLOCK);
		cs[i].fd = fd;
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = &cs[i] };
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
		if (write(fd, req, REQ_LEN) != REQ_LEN)
			return 1;
	}
	char *buf = malloc(1 << 20);
	long done = 0;
	double t0 = now(), tend = t0 + secs, worst = 0, last = t0;
	struct epoll_event evs[64];
	while (now() < tend) {
		int n = epoll_wait(ep, evs, 64, 1000);
		double t = now();
		if (n == 0) {
			fprintf(stderr, "websf: no progress for 1 s (stall)\n");
		}
		if (n > 0) {
			if (done > 2L * nconn && t - last > worst) /* past the start (accepts) */
				worst = t - last;
			last = t;
		}
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			for (;;) {
				size_t want = resp - c->got < (1u << 20) ? resp - c->got : (1u << 20);
				ssize_t k = read(c->fd, buf, want);
				if (k <= 0) {
					if (k < 0 && errno == EAGAIN)
						break;
					fprintf(stderr, "websf: read %zd errno %d\n", k, errno);
					return 1;
				}
				c->got += (size_t)k;
				if (c->got == resp) {
					c->got = 0;
					done++;
					if (write(c->fd, req, REQ_LEN) != REQ_LEN)
						return 1;
				}
			}
		}
	}
	double el = now() - t0;
	done_total = done;
	printf("%zu bytes x %d conns: %.0f resp/s, %.1f MB/s, longest gap %.1f ms", fsize, nconn, done / el,
	       done * (double)resp / el / 1e6, worst * 1e3);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: websf FILE_BYTES [SECONDS] [CONNS] [cork|write|nocork]\n");
		return 2;
	}
	fsize = strtoul(argv[1], NULL, 0);
	double secs = argc > 2 ? atof(argv[2]) : 2;
	int nconn = argc > 3 ? atoi(argv[3]) : 32;
	if (nconn > MAXC)
		nconn = MAXC;
	const char *m = argc > 4 ? argv[4] : "cork";
	mode = !strcmp(m, "write") ? M_WRITE : !strcmp(m, "nocork") ? M_NOCORK : !strcmp(m, "readwrite") ? M_READWRITE : M_CORK;
	char path[] = "/tmp/websf.XXXXXX";
	filefd = mkstemp(path);
	unlink(path);
	char *tmp = malloc(fsize + 1);
	for (size_t i = 0; i < fsize; i++)
		tmp[i] = (char)('a' + i % 26);
	if (write(filefd, tmp, fsize) != (ssize_t)fsize)
		return 1;
	free(tmp);
	filemap = fsize ? mmap(NULL, fsize, PROT_READ, MAP_SHARED, filefd, 0) : NULL;

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	if (bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 512) < 0) {
		perror("listen");
		return 1;
	}
	socklen_t al = sizeof a;
	getsockname(lfd, (struct sockaddr *)&a, &al);
	pid_t w[2];
	for (int i = 0; i < 2; i++) {
		w[i] = fork();
		if (w[i] == 0) {
			worker(lfd);
			_exit(0);
		}
	}
	int rc = client(ntohs(a.sin_port), secs, nconn);
	for (int i = 0; i < 2; i++) {
		kill(w[i], SIGKILL);
		waitpid(w[i], NULL, 0);
	}
	/* CPU per response (client and workers): less sensitive than the rate
	 * to other load on the machine */
	struct rusage a1, a2;
	getrusage(RUSAGE_SELF, &a1);
	getrusage(RUSAGE_CHILDREN, &a2);
	double cpu = a1.ru_utime.tv_sec + a1.ru_stime.tv_sec + a2.ru_utime.tv_sec + a2.ru_stime.tv_sec +
		     (a1.ru_utime.tv_usec + a1.ru_stime.tv_usec + a2.ru_utime.tv_usec + a2.ru_stime.tv_usec) / 1e6;
	printf(", %.2f us CPU/resp\n", done_total ? cpu * 1e6 / (double)done_total : 0.0);
	return rc;
}
