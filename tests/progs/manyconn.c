/* manyconn.c — many concurrent connections to one epoll echo server: opens N
 * connections from one client process, sends a 64 B request on every one of
 * them at once and reads the answers, then times round trips on a few while all N stay open (the cost
 * of an epoll_wait with N members), and reports the kernel TCP segments sent
 * during the round trips.
 *
 *   manyconn [-n CONNS] [-r ROUNDS] [-k SAMPLE] [-f FDS]
 *            [-a ADDR -p PORT [-P SERVER_PID]]     client of a server elsewhere
 *   manyconn -s FILE [-a ADDR] [-n CONNS] [-f FDS]  that server alone
 *
 * Without -a or -s the server is forked here, on 127.0.0.1.  -s listens on
 * ADDR (default 0.0.0.0), writes "PORT PID" to FILE and serves until SIGTERM
 * (then exits, so that the switch writes its stats); once it has accepted
 * CONNS it prints "SERVER conns=N fds_per_conn=F" (descriptors it holds
 * per connection beyond the first connection's).  -f: descriptors a
 * connection may take, for the RLIMIT_NOFILE needed (default 2).
 *
 * Prints "RESULT conns=N rt_p50_us=X rt_p99_us=Y outsegs_delta=D connect_s=S
 * idle_cpu_ms=C fds_per_conn=F" (C: the server's CPU time over half a
 * second with every connection idle; F: this client's descriptors per
 * connection beyond the first connection's).
 * Exit 0 ok, 1 failure, 77 when RLIMIT_NOFILE cannot be raised far enough
 * (a line "SKIP ..." says why). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "readfull.h"
#include "fdcount.h"

#define MSG 64
#define FDS_SPARE 256
static long fds_per_conn = 2; /* shm: the kernel socket and the switch's rendezvous socket */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "manyconn: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Soft limit to the hard one; the hard one up too when allowed (root). */
static int fds_for(long conns)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)(conns * fds_per_conn + FDS_SPARE);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -1;
	if (rl.rlim_max < need) {
		struct rlimit up = { need, need };
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			return 0;
		printf("SKIP RLIMIT_NOFILE hard limit %lu < %lu descriptors needed for %ld connections "
		       "(%d per connection) and it cannot be raised\n",
		       (unsigned long)rl.rlim_max, (unsigned long)need, conns, (int)fds_per_conn);
		return 77;
	}
	rl.rlim_cur = rl.rlim_max;
	return setrlimit(RLIMIT_NOFILE, &rl);
}

static long outsegs(void)
{
	FILE *f = fopen("/proc/net/snmp", "r");
	char hdr[1024], val[1024];
	long r = -1;
	while (f && fgets(hdr, sizeof hdr, f) && fgets(val, sizeof val, f)) {
		if (strncmp(hdr, "Tcp:", 4) != 0)
			continue;
		char *hs, *vs, *h = strtok_r(hdr, " \n", &hs), *v = strtok_r(val, " \n", &vs);
		for (; h && v; h = strtok_r(NULL, " \n", &hs), v = strtok_r(NULL, " \n", &vs))
			if (!strcmp(h, "OutSegs"))
				r = atol(v);
	}
	if (f)
		fclose(f);
	return r;
}

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* CPU time (user + system) process pid has used, in ms. */
static long cpu_ms_of(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	/* after the name: state and 10 fields, then utime and stime */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* The server: level-triggered epoll over the listener and every connection,
 * echoing what arrives, until the listener's control pipe closes (ctl < 0:
 * until SIGTERM); told `expect`, it reports its descriptors per connection
 * once it has accepted that many.  SIGTERM is blocked but inside
 * epoll_pwait: one that came while the server closed the client's
 * connections (the test stops it right after the client exits) was lost
 * before, and the server slept for good. */
static void serve(int lfd, int ctl, long expect)
{
	sigset_t term, open_mask;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, &open_mask);
	sigdelset(&open_mask, SIGTERM);
	long accepted = 0;
	int fd1 = 0;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd }, evs[256];
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("server epoll");
	ev.data.fd = ctl;
	if (ctl >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, ctl, &ev) < 0)
		die("server epoll ctl");
	for (;;) {
		int n = epoll_pwait(ep, evs, 256, -1, &open_mask);
		if (stop)
			exit(0); /* at exit the switch writes its stats */
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == ctl)
				exit(0); /* at exit the switch writes its stats */
			if (fd == lfd) {
				int c;
				while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					struct epoll_event cev = { .events = EPOLLIN, .data.fd = c };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) < 0)
						die("epoll_ctl(ADD conn)");
					if (++accepted == 1)
						fd1 = count_fds();
					else if (accepted == expect)
						printf("SERVER conns=%ld fds_per_conn=%.2f\n", accepted,
						       (double)(count_fds() - fd1) / (double)(accepted - 1));
				}
				if (errno != EAGAIN)
					die("accept4");
				continue;
			}
			char b[4096];
			ssize_t r = read(fd, b, sizeof b);
			if (r > 0 && write(fd, b, (size_t)r) != r)
				die("echo write");
			if (r == 0 || (r < 0 && errno != EAGAIN)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
			}
		}
	}
}

static int round_trip(int fd)
{
	char b[MSG];
	memset(b, 'x', sizeof b);
	if (write(fd, b, sizeof b) != (ssize_t)sizeof b)
		return -1;
	return read_full(fd, b, sizeof b);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	long conns = 1000, rounds = 2000, sample = 8;
	const char *addr = NULL, *serve_file = NULL;
	int port = 0;
	pid_t srv = 0;
	int o;
	while ((o = getopt(argc, argv, "n:r:k:a:p:s:P:f:")) != -1) {
		if (o == 'n')
			conns = atol(optarg);
		else if (o == 'r')
			rounds = atol(optarg);
		else if (o == 'k')
			sample = atol(optarg);
		else if (o == 'a')
			addr = optarg;
		else if (o == 'p')
			port = atoi(optarg);
		else if (o == 's')
			serve_file = optarg;
		else if (o == 'P')
			srv = (pid_t)atol(optarg);
		else if (o == 'f')
			fds_per_conn = atol(optarg);
		else
			return fprintf(stderr, "usage: manyconn [-n CONNS] [-r ROUNDS] [-k SAMPLE] [-f FDS] "
					       "[-a ADDR -p PORT [-P PID] | -s FILE [-a ADDR]]\n"),
			       1;
	}
	if (conns < 1 || rounds < 1 || sample < 1 || fds_per_conn < 1 || (addr && !serve_file && port <= 0))
		return 1;
	if (sample > conns)
		sample = conns;
	int rc = fds_for(conns);
	if (rc)
		return rc == 77 ? 77 : (perror("setrlimit"), 1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(120);

	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (addr && inet_pton(AF_INET, addr, &a.sin_addr) != 1)
		return fprintf(stderr, "manyconn: bad address %s\n", addr), 1;
	if (serve_file) {
		/* the server alone: listen, say where, serve until SIGTERM */
		if (!addr)
			a.sin_addr.s_addr = htonl(INADDR_ANY);
		a.sin_port = htons((uint16_t)port);
		socklen_t al = sizeof a;
		int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0 ||
		    getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
			die("listen");
		signal(SIGTERM, on_term);
		alarm(0);
		char tmp[4096];
		snprintf(tmp, sizeof tmp, "%s.tmp", serve_file);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%d %d\n", ntohs(a.sin_port), (int)getpid()) < 0 || fclose(f) || rename(tmp, serve_file))
			die("port file");
		serve(lfd, -1, conns);
	}
	int pp[2] = { -1, -1 };
	if (addr) {
		a.sin_port = htons((uint16_t)port);
	} else {
		socklen_t al = sizeof a;
		int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0 ||
		    getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
			die("listen");
		if (pipe(pp) < 0)
			die("pipe");
		srv = fork();
		if (srv < 0)
			die("fork");
		if (srv == 0) {
			close(pp[1]);
			serve(lfd, pp[0], 0);
		}
		close(pp[0]);
		close(lfd);
	}

	int *fds = calloc((size_t)conns, sizeof *fds);
	double t0 = now_s();
	int fd1 = 0;
	for (long i = 0; i < conns; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fds[i] < 0) {
			fprintf(stderr, "manyconn: socket #%ld: %s\n", i, strerror(errno));
			exit(1);
		}
		int one = 1;
		setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (connect(fds[i], (struct sockaddr *)&a, sizeof a) < 0) {
			fprintf(stderr, "manyconn: connect #%ld: %s\n", i, strerror(errno));
			exit(1);
		}
		if (i == 0)
			fd1 = count_fds(); /* the first connection opens what a process shares */
	}
	double per_conn = conns > 1 ? (double)(count_fds() - fd1) / (double)(conns - 1) : 0;
	double t_conn = now_s() - t0;
	/* a request on every connection at once: the server finds them all
	 * ready together (more than one epoll_wait can return) */
	char req[MSG];
	memset(req, 'y', sizeof req);
	for (long i = 0; i < conns; i++)
		if (write(fds[i], req, sizeof req) != (ssize_t)sizeof req)
			die("request on every connection");
	for (long i = 0; i < conns; i++)
		if (read_full(fds[i], req, sizeof req) < 0)
			die("answer on every connection");

	double *lat = calloc((size_t)rounds, sizeof *lat);
	long seg0 = outsegs();
	for (long r = 0; r < rounds; r++) {
		int fd = fds[(r % sample) * (conns / sample)];
		double t = now_s();
		if (round_trip(fd) < 0)
			die("timed round trip");
		lat[r] = (now_s() - t) * 1e6;
	}
	long seg1 = outsegs();
	/* every connection idle: the server must sleep, not scan */
	usleep(100000);
	long c0 = cpu_ms_of(srv);
	usleep(500000);
	long idle = cpu_ms_of(srv) - c0;
	qsort(lat, (size_t)rounds, sizeof *lat, cmp_double);
	printf("RESULT conns=%ld rt_p50_us=%.1f rt_p99_us=%.1f outsegs_delta=%ld connect_s=%.3f idle_cpu_ms=%ld "
	       "fds_per_conn=%.2f\n",
	       conns, lat[rounds / 2], lat[rounds * 99 / 100], seg1 - seg0, t_conn, idle, per_conn);

	if (pp[1] >= 0) {
		close(pp[1]);
		int st;
		if (waitpid(srv, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			return fprintf(stderr, "manyconn: server failed\n"), 1;
	}
	for (long i = 0; i < conns; i++)
		close(fds[i]);
	return 0;
}
