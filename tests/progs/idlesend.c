/* idlesend.c — a sender whose send() returned, then idles outside the
 * socket layer (blocked reading a pipe), and a reader that must still get
 * every byte: kernel TCP delivers what send() accepted whatever its sender
 * does next (t_fabric_idle_send: over fabric the bytes once stayed in the
 * provider's transmit queue until the sender called into the switch again).
 *
 *   idlesend server PORTFILE SENT DONE ROUNDS BYTES MODE
 *        listen on 0.0.0.0:0, write the port to PORTFILE, accept one
 *        connection; each round: (MODE "after") wait for the writer's word
 *        (a byte on the fifo SENT), then read BYTES, or (MODE "during") read BYTES
 *        while the writer writes; a read that waits 10 s for more ends the
 *        round ("STALL round r after n of BYTES"); then one byte to the
 *        fifo DONE.  Prints "READ total fnv", the slowest round's time
 *        (information only), and exits.
 *   idlesend client ADDR PORT SENT DONE ROUNDS BYTES PIECE
 *        connect; each round: BYTES in send()s of PIECE bytes (0: of 1 B
 *        to 64 KiB, a fixed pseudo-random sequence), one byte to SENT,
 *        then block reading
 *        DONE (the pipe the reader answers on).  Prints "WROTE total fnv".
 */
#include "portfile.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int die(const char *what)
{
	fprintf(stderr, "idlesend: %s: %s\n", what, strerror(errno));
	return 1;
}

static uint32_t fnv(const uint8_t *p, size_t n, uint32_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint8_t pat(uint64_t off) { return (uint8_t)(off * 131u + (off >> 9)); }

/* One byte each way on the fifos.  A fifo's open waits for the other
 * end: each side opens SENT first, DONE only once the first round's bytes
 * are sent (the writer) or taken (the reader). */
static int tell(int fd) { return write(fd, "x", 1) == 1 ? 0 : -1; }

static int await(int fd)
{
	char c;
	ssize_t n;
	while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
		;
	return n == 1 ? 0 : -1;
}

static int server(char **argv)
{
	const char *sent = argv[3], *done = argv[4];
	int rounds = atoi(argv[5]);
	size_t bytes = (size_t)atol(argv[6]);
	int after = strcmp(argv[7], "after") == 0;
	const char *what;
	int l = listen_port_file(argv[2], &what);
	if (l < 0)
		return die(what);
	int c = accept(l, NULL, NULL);
	if (c < 0)
		return die("accept");
	int sf = open(sent, O_RDONLY), df = -1;
	if (sf < 0)
		return die("fifo");
	static uint8_t b[65536];
	unsigned long long total = 0;
	uint32_t h = 2166136261u;
	double slowest = 0;
	for (int r = 0; r < rounds; r++) {
		if (after && await(sf))
			return die("the writer went away");
		double t0 = now_ms();
		size_t got = 0;
		while (got < bytes) {
			struct pollfd p = { .fd = c, .events = POLLIN };
			int pr = poll(&p, 1, 10000);
			if (pr < 0 && errno == EINTR)
				continue;
			if (pr == 0) {
				printf("STALL round %d after %zu of %zu\n", r, got, bytes);
				break;
			}
			size_t want = bytes - got < sizeof b ? bytes - got : sizeof b;
			ssize_t n = read(c, b, want);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				printf("END round %d after %zu of %zu: %s\n", r, got, bytes, n ? strerror(errno) : "EOF");
				break;
			}
			h = fnv(b, (size_t)n, h);
			got += (size_t)n;
		}
		total += got;
		if (now_ms() - t0 > slowest)
			slowest = now_ms() - t0;
		if (!after && await(sf))
			return die("the writer went away");
		if (df < 0 && (df = open(done, O_WRONLY)) < 0)
			return die("fifo");
		if (tell(df))
			return die("the writer went away");
		if (got < bytes)
			break;
	}
	printf("READ %llu %08x\n", total, h);
	printf("SLOWEST round took %.1f ms\n", slowest);
	return 0;
}

static int client(char **argv)
{
	const char *sent = argv[4], *done = argv[5];
	int rounds = atoi(argv[6]);
	size_t bytes = (size_t)atol(argv[7]), piece = (size_t)atol(argv[8]);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };
	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
		return die("address");
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0)
		return die("connect");
	int sf = open(sent, O_WRONLY), df = -1;
	if (sf < 0)
		return die("fifo");
	static uint8_t b[65536];
	if (piece > sizeof b)
		piece = sizeof b;
	uint64_t off = 0;
	uint32_t h = 2166136261u, rnd = 500344;
	for (int r = 0; r < rounds; r++) {
		size_t left = bytes;
		while (left) {
			rnd = rnd * 1103515245u + 12345u;
			size_t n = piece ? piece : 1 + (rnd >> 8) % sizeof b;
			if (n > left)
				n = left;
			for (size_t i = 0; i < n; i++)
				b[i] = pat(off + i);
			size_t w = 0;
			while (w < n) {
				ssize_t k = send(c, b + w, n - w, 0);
				if (k < 0 && errno == EINTR)
					continue;
				if (k < 0)
					return die("send");
				w += (size_t)k;
			}
			h = fnv(b, n, h);
			off += n;
			left -= n;
		}
		/* everything accepted: now idle, blocked on a pipe, until the
		 * reader says it has it all (or gave up) */
		if (tell(sf))
			return die("the reader went away");
		if (df < 0 && (df = open(done, O_RDONLY)) < 0)
			return die("fifo");
		if (await(df))
			return die("the reader went away");
	}
	printf("WROTE %llu %08x\n", (unsigned long long)off, h);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 8 && strcmp(argv[1], "server") == 0)
		return server(argv);
	if (argc == 9 && strcmp(argv[1], "client") == 0)
		return client(argv);
	fprintf(stderr, "usage: idlesend server PORTFILE SENT DONE ROUNDS BYTES after|during\n"
			"       idlesend client ADDR PORT SENT DONE ROUNDS BYTES PIECE\n");
	return 2;
}
