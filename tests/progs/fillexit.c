/* fillexit.c — a writer that fills its connection and exits without closing
 * it, and a reader that stops itself before reading (the test resumes it):
 * everything the writer's write() accepted must reach the reader, as
 * kernel TCP delivers a dead process's socket buffer.
 *
 *   fillexit server PORTFILE [PACE_US]   listen on 0.0.0.0:0, write the
 *                                port to PORTFILE, accept one connection,
 *                                SIGSTOP itself (or, given PACE_US, pause
 *                                that long after each read of up to 16 KiB:
 *                                a slow reader), then read to EOF: "READ n"
 *   fillexit client ADDR PORT MAX [CHUNK [block]]  connect, write CHUNK
 *                                bytes at a time (default 16384),
 *                                nonblocking until EAGAIN (or blocking, with
 *                                "block") or MAX bytes: "WROTE n", exit(0)
 *                                without close
 */
#include "portfile.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int die(const char *what)
{
	fprintf(stderr, "fillexit: %s: %s\n", what, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((argc == 3 || argc == 4) && strcmp(argv[1], "server") == 0) {
		unsigned pace = argc == 4 ? (unsigned)atoi(argv[3]) : 0;
		const char *what;
		int l = listen_port_file(argv[2], &what);
		if (l < 0)
			return die(what);
		int c = accept(l, NULL, NULL);
		if (c < 0)
			return die("accept");
		if (!pace)
			raise(SIGSTOP); /* the writer fills everything meanwhile */
		static char b[65536];
		unsigned long long got = 0;
		for (;;) {
			ssize_t n = read(c, b, pace ? 16384 : sizeof b);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return die("read");
			if (n == 0)
				break;
			got += (unsigned long long)n;
			if (pace)
				usleep(pace);
		}
		printf("READ %llu\n", got);
		return 0;
	}
	if (argc >= 5 && argc <= 7 && strcmp(argv[1], "client") == 0) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };
		if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
			return die("address");
		unsigned long long max = strtoull(argv[4], NULL, 10), sent = 0;
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
			return die("connect");
		if (!(argc == 7 && strcmp(argv[6], "block") == 0))
			fcntl(s, F_SETFL, O_NONBLOCK);
		static char b[1 << 20];
		size_t chunk = argc == 6 ? (size_t)atol(argv[5]) : 16384;
		if (chunk < 1 || chunk > sizeof b)
			chunk = 16384;
		memset(b, 'f', sizeof b);
		while (sent < max) {
			size_t n = max - sent < chunk ? (size_t)(max - sent) : chunk;
			ssize_t w = write(s, b, n);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno == EAGAIN) {
				/* full: a little more may fit once what was queued leaves */
				usleep(20000);
				w = write(s, b, n);
				if (w < 0)
					break;
			}
			if (w < 0)
				return die("write");
			sent += (unsigned long long)w;
		}
		printf("WROTE %llu\n", sent);
		exit(0);
	}
	fprintf(stderr, "usage: fillexit server PORTFILE | client ADDR PORT MAX\n");
	return 2;
}
