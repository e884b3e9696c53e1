/* rtwait.c — a 64 B blocking ping-pong that reports how its client waited: round trips, p50 (us) and voluntary context switches (sleeps) per round trip. */
/* The server may answer its first SLOW requests 300 us late: a client that
 * learns from those waits to sleep must unlearn it once answers are quick. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int full(int fd, char *b, size_t n, int rd)
{
	for (size_t o = 0; o < n;) {
		ssize_t r = rd ? read(fd, b + o, n - o) : write(fd, b + o, n - o);
		if (r <= 0)
			return -1;
		o += (size_t)r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "server") && (strcmp(argv[1], "client") || argc < 5))) {
		fprintf(stderr, "usage: rtwait server PORT [SLOW] | rtwait client PORT HOST ROUNDS\n");
		return 2;
	}
	int one = 1;
	char b[64] = { 0 };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])) };
	if (!strcmp(argv[1], "server")) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4)) {
			perror("rtwait server");
			return 1;
		}
		int f = accept(l, NULL, NULL);
		setsockopt(f, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		int slow = argc > 3 ? atoi(argv[3]) : 0;
		for (int i = 0; full(f, b, sizeof b, 1) == 0; i++) {
			if (i < slow)
				usleep(300);
			if (full(f, b, sizeof b, 0))
				break;
		}
		return 0;
	}
	int n = atoi(argv[4]);
	if (n < 10 || inet_pton(AF_INET, argv[3], &a.sin_addr) != 1) {
		fprintf(stderr, "rtwait: bad rounds or host\n");
		return 2;
	}
	int f = socket(AF_INET, SOCK_STREAM, 0);
	if (f < 0 || connect(f, (struct sockaddr *)&a, sizeof a)) {
		perror("rtwait connect");
		return 1;
	}
	setsockopt(f, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	double *t = malloc((size_t)n * sizeof *t);
	for (int i = 0; i < n / 10; i++) /* warm-up */
		if (full(f, b, sizeof b, 0) || full(f, b, sizeof b, 1))
			return 1;
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	for (int i = 0; i < n; i++) {
		double t0 = now_us();
		if (full(f, b, sizeof b, 0) || full(f, b, sizeof b, 1)) {
			fprintf(stderr, "rtwait: connection lost at round trip %d\n", i);
			return 1;
		}
		t[i] = now_us() - t0;
	}
	getrusage(RUSAGE_SELF, &r1);
	qsort(t, (size_t)n, sizeof *t, cmp);
	printf("rounds %d p50_us %.1f sleeps_per_rt %.3f\n", n, t[n / 2], (double)(r1.ru_nvcsw - r0.ru_nvcsw) / n);
	free(t);
	close(f);
	return 0;
}
