/* idlemem.c — the memory idle connections hold: N connections to an epoll
 * echo server (forked here, on 127.0.0.1), R round trips of S bytes on each
 * (in rounds: a message on every connection, then every answer; one
 * connection at a time above 16 KiB), then all
 * of them idle; prints what client and server hold beyond what they held
 * before connecting, right after the traffic and again after W seconds of
 * idling.  Run it plain and under the switch (scripts/idlemem.sh does both)
 * to compare kernel TCP's buffers with the switch's shared memory.
 *
 *   idlemem [-n CONNS] [-r ROUNDS] [-s SIZE] [-w IDLE_S]
 *
 * Prints one line
 *   RESULT conns=N rounds=R size=S busy_shmem_kib=B idle_shmem_kib=I
 *          per_conn_kib=P tcp_mem_kib=T secs=X housekeeper_cpu_ms=H
 * shmem: the shared memory (memfd, MAP_SHARED, tmpfs) resident in client
 * and server together (Pss_Shmem of /proc/PID/smaps_rollup summed: a page
 * both map counts once), over the baseline taken before connecting; busy:
 * right after the last round trip; idle (and per_conn): after IDLE_S
 * seconds.  tcp_mem: the kernel's TCP buffer memory at that point over its
 * baseline (/proc/net/sockstat "mem", pages; host-wide, so other TCP
 * traffic on the host shows in it).  housekeeper_cpu_ms: CPU time of the
 * switch's housekeeping threads (ssw-trim) in both processes.  Exit 0 ok, 1 failure, 77 when
 * RLIMIT_NOFILE cannot be raised far enough. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
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

static void die(const char *what)
{
	fprintf(stderr, "idlemem: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Soft limit up to what conns connections need (4 descriptors each covers
 * both ends in the switch's case), the hard one too when allowed. */
static int fds_for(long conns)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)(conns * 4 + 256);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -1;
	if (rl.rlim_max < need) {
		struct rlimit up = { need, need };
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			return 0;
		printf("SKIP RLIMIT_NOFILE hard limit %lu < %lu needed for %ld connections\n",
		       (unsigned long)rl.rlim_max, (unsigned long)need, conns);
		return 77;
	}
	rl.rlim_cur = rl.rlim_max;
	return setrlimit(RLIMIT_NOFILE, &rl);
}

/* kB of the field `key` in /proc/PID/smaps_rollup, -1 if absent. */
static long rollup_kib(pid_t pid, const char *key)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
	FILE *f = fopen(path, "r");
	long v = -1;
	size_t kl = strlen(key);
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, key, kl) && line[kl] == ':')
			v = atol(line + kl + 1);
	if (f)
		fclose(f);
	return v;
}

/* The kernel's TCP buffer memory, in KiB. */
static long tcp_mem_kib(void)
{
	FILE *f = fopen("/proc/net/sockstat", "r");
	char line[256];
	long pages = -1;
	while (f && fgets(line, sizeof line, f)) {
		char *m = strncmp(line, "TCP:", 4) ? NULL : strstr(line, " mem ");
		if (m)
			pages = atol(m + 5);
	}
	if (f)
		fclose(f);
	return pages < 0 ? -1 : pages * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The echo server: level-triggered epoll over the listener and every
 * connection, until the control pipe closes. */
static void serve(int lfd, int ctl)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd }, evs[256];
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("server epoll");
	ev.data.fd = ctl;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, ctl, &ev) < 0)
		die("server epoll ctl");
	static char b[64 * 1024];
	for (;;) {
		int n = epoll_wait(ep, evs, 256, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == ctl)
				exit(0);
			if (fd == lfd) {
				int c;
				while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					struct epoll_event cev = { .events = EPOLLIN, .data.fd = c };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) < 0)
						die("epoll_ctl(ADD conn)");
				}
				if (errno != EAGAIN)
					die("accept4");
				continue;
			}
			ssize_t r = read(fd, b, sizeof b);
			for (ssize_t off = 0; r > 0 && off < r;) {
				ssize_t w = write(fd, b + off, (size_t)(r - off));
				if (w < 0 && errno == EAGAIN) {
					struct timespec ts = { 0, 100000 };
					nanosleep(&ts, NULL);
					continue;
				}
				if (w <= 0)
					die("echo write");
				off += w;
			}
			if (r == 0 || (r < 0 && errno != EAGAIN)) {
				epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
				close(fd);
			}
		}
	}
}

/* CPU time (ms) of pid's threads named `name` (the switch's housekeeper). */
static long thread_cpu_ms(pid_t pid, const char *name)
{
	char path[512], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	long ms = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = 0;
		if (strncmp(buf, name, strlen(name)) != 0)
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
		f = fopen(path, "r");
		n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = 0;
		char *p = strrchr(buf, ')');
		unsigned long ut = 0, st = 0;
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
			ms += (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
	}
	if (d)
		closedir(d);
	return ms;
}

/* Shared memory resident in both processes together. */
static long shmem_kib(pid_t srv)
{
	long a = rollup_kib(getpid(), "Pss_Shmem"), b = rollup_kib(srv, "Pss_Shmem");
	return a < 0 || b < 0 ? -1 : a + b;
}

int main(int argc, char **argv)
{
	long conns = 1000, rounds = 600, size = 1000;
	double idle_s = 3.0;
	int o;
	while ((o = getopt(argc, argv, "n:r:s:w:")) != -1) {
		if (o == 'n')
			conns = atol(optarg);
		else if (o == 'r')
			rounds = atol(optarg);
		else if (o == 's')
			size = atol(optarg);
		else if (o == 'w')
			idle_s = atof(optarg);
		else
			return fprintf(stderr, "usage: idlemem [-n CONNS] [-r ROUNDS] [-s SIZE] [-w IDLE_S]\n"), 1;
	}
	if (conns < 1 || rounds < 0 || size < 1 || size > (1 << 20) || idle_s < 0)
		return 1;
	int rc = fds_for(conns);
	if (rc)
		return rc == 77 ? 77 : (perror("setrlimit"), 1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(600);

	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &al) < 0)
		die("listen");
	int pp[2];
	if (pipe(pp) < 0)
		die("pipe");
	pid_t srv = fork();
	if (srv < 0)
		die("fork");
	if (srv == 0) {
		close(pp[1]);
		serve(lfd, pp[0]);
	}
	close(pp[0]);
	close(lfd);
	usleep(100000); /* the server is up and asleep */
	long base_shm = shmem_kib(srv), base_tcp = tcp_mem_kib();

	int *fds = calloc((size_t)conns, sizeof *fds);
	char *buf = malloc((size_t)size);
	if (!fds || !buf)
		die("malloc");
	memset(buf, 'm', (size_t)size);
	double t0 = now_s();
	for (long i = 0; i < conns; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		int one = 1;
		if (fds[i] < 0)
			die("socket");
		setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (connect(fds[i], (struct sockaddr *)&a, sizeof a) < 0)
			die("connect");
	}
	/* small messages: one on every connection, then every answer (a
	 * message fits the socket buffers either way); larger ones one
	 * connection at a time (the server's echo would wait for our reads) */
	long batch = size <= 16384 ? conns : 1;
	for (long r = 0; r < rounds; r++)
		for (long b = 0; b < conns; b += batch) {
			long e = b + batch < conns ? b + batch : conns;
			for (long i = b; i < e; i++)
				if (write(fds[i], buf, (size_t)size) != (ssize_t)size)
					die("write");
			for (long i = b; i < e; i++)
				if (read_full(fds[i], buf, (size_t)size) < 0)
					die("read");
		}
	double secs = now_s() - t0;
	long busy = shmem_kib(srv) - base_shm;
	struct timespec idle = { (time_t)idle_s, (long)((idle_s - (double)(time_t)idle_s) * 1e9) };
	nanosleep(&idle, NULL);
	long idle_shm = shmem_kib(srv) - base_shm, tcp = tcp_mem_kib() - base_tcp;
	long hk = thread_cpu_ms(getpid(), "ssw-trim") + thread_cpu_ms(srv, "ssw-trim");
	printf("RESULT conns=%ld rounds=%ld size=%ld busy_shmem_kib=%ld idle_shmem_kib=%ld per_conn_kib=%.1f "
	       "tcp_mem_kib=%ld secs=%.2f housekeeper_cpu_ms=%ld\n",
	       conns, rounds, size, busy, idle_shm, (double)idle_shm / (double)conns, tcp, secs, hk);

	close(pp[1]);
	int st;
	if (waitpid(srv, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return fprintf(stderr, "idlemem: server failed\n"), 1;
	for (long i = 0; i < conns; i++)
		close(fds[i]);
	return 0;
}
