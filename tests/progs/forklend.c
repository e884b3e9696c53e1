/* forklend — a fork-per-connection server and its clients, for t_fork_lend.
 *
 * forklend [-n REQUESTS] [-c CLIENTS] [-x] [-g]: a server on 127.0.0.1 (a free
 * port) forks a child per connection that reads a 64-byte request, answers
 * it (the request with each byte + 1) followed by how many shared-memory
 * segments the child maps (memfd mappings in /proc/self/maps), and ends
 * with _exit (-x: exit) without closing; the server closes its copy right
 * after the fork and reaps its children as it goes.  CLIENTS processes
 * each send REQUESTS requests, a new connection each, and check every
 * answer.  Prints "RESULT requests=N bad=N max_segments=N": a child maps
 * its own connection's segment only; one that also mapped a segment the
 * server kept from an earlier connection (shm_lend.c) would see another
 * connection's memory.  distinct_segments: how many segments the children
 * named (by inode): a client recycles its segments once the server side
 * released them, so few serve many connections. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "readfull.h"

#define REQ 64

/* How many memfd mappings this process has, and the inode of the first. */
static int memfd_maps(unsigned long *ino)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	char line[512];
	int n = 0;
	*ino = 0;
	while (fgets(line, sizeof line, f))
		if (strstr(line, "/memfd:")) {
			unsigned long i = 0;
			if (!n && sscanf(line, "%*s %*s %*s %*s %lu", &i) == 1)
				*ino = i;
			n++;
		}
	fclose(f);
	return n;
}

/* -g: the child forks a grandchild that serves the connection and ends
 * itself at once (the double fork of a daemon); the grandchild answers,
 * then goes on writing a little for a while: kernel TCP refuses that once
 * the client closed, and a segment the server released while the
 * grandchild still held it would carry those bytes into another
 * connection. */
static void grandchild(int fd);

static void child(int fd, int use_exit)
{
	unsigned char b[REQ + sizeof(int) + sizeof(unsigned long)];
	if (read_full(fd, b, REQ) < 0)
		_exit(2);
	for (int i = 0; i < REQ; i++)
		b[i]++;
	unsigned long ino = 0;
	int segs = memfd_maps(&ino);
	memcpy(b + REQ, &segs, sizeof segs);
	memcpy(b + REQ + sizeof segs, &ino, sizeof ino);
	if (write(fd, b, sizeof b) != (ssize_t)sizeof b)
		_exit(3);
	if (use_exit)
		exit(0);
	_exit(0);
}

/* res[3]: distinct segments the children named; res[4]: a lock; from
 * res[8] on, the inodes seen (at most SEEN_MAX). */
#define SEEN_MAX 500
static void note_segment(long *res, unsigned long ino)
{
	long unlocked = 0;
	while (!__atomic_compare_exchange_n(&res[4], &unlocked, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		unlocked = 0;
	bool seen = false;
	for (long i = 0; i < res[3] && i < SEEN_MAX && !seen; i++)
		seen = (unsigned long)res[8 + i] == ino;
	if (!seen) {
		if (res[3] < SEEN_MAX)
			res[8 + res[3]] = (long)ino;
		res[3]++;
	}
	__atomic_store_n(&res[4], 0, __ATOMIC_RELEASE);
}

static void grandchild(int fd)
{
	signal(SIGPIPE, SIG_IGN);
	pid_t g = fork();
	if (g != 0)
		_exit(g > 0 ? 0 : 5);
	unsigned char b[REQ + sizeof(int) + sizeof(unsigned long)];
	if (read_full(fd, b, REQ) < 0)
		_exit(2);
	for (int i = 0; i < REQ; i++)
		b[i]++;
	int segs = 1;
	unsigned long ino = 0;
	memcpy(b + REQ, &segs, sizeof segs);
	memcpy(b + REQ + sizeof segs, &ino, sizeof ino);
	if (write(fd, b, sizeof b) != (ssize_t)sizeof b)
		_exit(3);
	/* and goes on writing for 50 ms, until the connection says it ended */
	memset(b, 0xee, sizeof b);
	for (int i = 0; i < 250; i++) {
		if (write(fd, b, 8) < 0)
			break;
		usleep(200);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	int n = 200, clients = 1, use_exit = 0, grand = 0, o;
	while ((o = getopt(argc, argv, "n:c:xg")) != -1) {
		if (o == 'n')
			n = atoi(optarg);
		else if (o == 'c')
			clients = atoi(optarg);
		else if (o == 'x')
			use_exit = 1;
		else if (o == 'g')
			grand = 1;
		else
			return 64;
	}
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 128) || getsockname(l, (struct sockaddr *)&a, &al)) {
		perror("forklend: listen");
		return 1;
	}
	/* shared results: requests answered, bad answers, most segments seen */
	long *res = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t server = fork();
	if (server == 0) {
		alarm(120);
		for (;;) {
			int fd = accept(l, NULL, NULL);
			if (fd < 0) {
				if (errno == EINTR)
					continue;
				_exit(4);
			}
			pid_t c = fork();
			if (c == 0) {
				close(l);
				if (grand)
					grandchild(fd);
				child(fd, use_exit);
			}
			close(fd);
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
		}
	}
	close(l);
	for (int k = 0; k < clients; k++)
		if (fork() == 0) {
			alarm(100);
			for (int i = 0; i < n; i++) {
				int fd = socket(AF_INET, SOCK_STREAM, 0);
				if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
					__atomic_fetch_add(&res[1], 1, __ATOMIC_RELAXED);
					if (fd >= 0)
						close(fd);
					continue;
				}
				unsigned char q[REQ], b[REQ + sizeof(int) + sizeof(unsigned long)];
				for (int j = 0; j < REQ; j++)
					q[j] = (unsigned char)(i * 7 + j + k);
				int ok = write(fd, q, REQ) == REQ && read_full(fd, b, sizeof b) == 0;
				for (int j = 0; ok && j < REQ; j++)
					ok = b[j] == (unsigned char)(q[j] + 1);
				int segs;
				unsigned long ino;
				memcpy(&segs, b + REQ, sizeof segs);
				memcpy(&ino, b + REQ + sizeof segs, sizeof ino);
				close(fd);
				if (ok)
					note_segment(res, ino);
				__atomic_fetch_add(&res[ok ? 0 : 1], 1, __ATOMIC_RELAXED);
				long cur = __atomic_load_n(&res[2], __ATOMIC_RELAXED);
				while (ok && segs > cur && !__atomic_compare_exchange_n(&res[2], &cur, segs, 0, __ATOMIC_RELAXED,
											 __ATOMIC_RELAXED))
					;
			}
			exit(0); /* the switch writes its statistics at exit */
		}
	int st, failed = 0;
	for (int k = 0; k < clients; k++)
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed++;
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	printf("RESULT requests=%ld bad=%ld max_segments=%ld distinct_segments=%ld clients_failed=%d\n", res[0], res[1],
	       res[2], res[3], failed);
	return failed || res[1] ? 1 : 0;
}
