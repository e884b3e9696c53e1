/* stale_send.c — a sender whose buffers change mappings between sends, and a
 * receiver that checks every byte, for t_regcache_stale.sh.
 *
 *   stale_send server PORTFILE [ADDR]   accept one connection, read frames to
 *       the end, print "RESULT server frames=N bytes=B stale=K" (K: bytes that are
 *       not what the frame's header says the sender wrote)
 *   stale_send client ADDR PORT         the scenarios below, one frame per
 *       send; print "RESULT client frames=N reused=R" (R: scenarios whose second
 *       buffer came back at the first one's address, i.e. that could go stale)
 *
 * Each frame is a 16-byte header (magic, id, length) then the payload,
 * written in one send() from the buffer under test: 64 KiB and more, so
 * that with the rendezvous on the receiver copies straight from that
 * buffer.  Scenarios: a buffer mmap'ed, sent, munmap'ed, and a new mapping
 * at the same address with new content sent; the same with malloc/free of
 * large blocks (glibc unmaps inside free), with realloc that moves (the old
 * address is then taken by a new block), with a heap block given back by
 * malloc_trim (brk) and allocated again, with madvise(MADV_DONTNEED); and
 * ten sends from one buffer rewritten in place (the cache's hits). */
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAGIC 0x53544c45u /* "ELTS" */
#define MB ((size_t)1 << 20)

struct hdr {
	uint32_t magic, id;
	uint64_t len;
};

static uint8_t pat(uint32_t id, size_t i)
{
	return (uint8_t)(id * 131u + i * 7u + (i >> 12));
}

static void fill(uint8_t *p, size_t n, uint32_t id)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(id, i);
}

static int sendall(int fd, const void *p, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t k = send(fd, (const char *)p + done, n - done, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		done += (size_t)k;
	}
	return 0;
}

static int recvall(int fd, void *p, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t k = recv(fd, (char *)p + done, n - done, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return done ? -1 : 0;
		done += (size_t)k;
	}
	return 1;
}

static int fd, frames, reused;

static void frame(const uint8_t *buf, size_t n, uint32_t id)
{
	struct hdr h = { MAGIC, id, n };
	if (sendall(fd, &h, sizeof h) || sendall(fd, buf, n)) {
		perror("send");
		exit(1);
	}
	frames++;
}

static void scenario_mmap(uint32_t id)
{
	uint8_t *a = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(a, MB, id);
	frame(a, MB, id);
	munmap(a, MB);
	uint8_t *b = mmap(a, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (b == MAP_FAILED)
		b = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	reused += b == a;
	fill(b, MB, id + 1);
	frame(b, MB, id + 1);
	munmap(b, MB);
}

static void scenario_malloc(uint32_t id)
{
	uint8_t *p = malloc(MB);
	fill(p, MB, id);
	frame(p, MB, id);
	uintptr_t old = (uintptr_t)p;
	free(p);
	uint8_t *q = malloc(MB);
	reused += (uintptr_t)q == old;
	fill(q, MB, id + 1);
	frame(q, MB, id + 1);
	free(q);
}

static void scenario_realloc(uint32_t id)
{
	size_t n = 256u << 10;
	uint8_t *p = malloc(n);
	fill(p, n, id);
	frame(p, n, id);
	uintptr_t old = (uintptr_t)p;
	/* the pages after it taken, so that growing it must move it */
	void *block = mmap((void *)((old + n + 8192) & ~(uintptr_t)4095), 4096, PROT_READ,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	uint8_t *q = realloc(p, 8 * n);
	fill(q, 8 * n, id + 1);
	frame(q, 8 * n, id + 1);
	uint8_t *r = malloc(n); /* where the old block was, new pages */
	reused += (uintptr_t)q != old && (uintptr_t)r == old;
	fill(r, n, id + 2);
	frame(r, n, id + 2);
	free(r);
	free(q);
	if (block != MAP_FAILED)
		munmap(block, 4096);
}

static void scenario_brk(uint32_t id)
{
	size_t n = 96u << 10; /* below the mmap threshold: the heap */
	uint8_t *p = malloc(n);
	fill(p, n, id);
	frame(p, n, id);
	uintptr_t old = (uintptr_t)p;
	free(p);
	malloc_trim(0); /* the heap's top goes back to the system (brk) */
	uint8_t *q = malloc(n);
	reused += (uintptr_t)q == old;
	fill(q, n, id + 1);
	frame(q, n, id + 1);
	free(q);
}

static void scenario_madvise(uint32_t id)
{
	uint8_t *a = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(a, MB, id);
	frame(a, MB, id);
	madvise(a, MB, MADV_DONTNEED); /* new pages at the next touch */
	reused++;
	fill(a, MB, id + 1);
	frame(a, MB, id + 1);
	munmap(a, MB);
}

static void scenario_same_buffer(uint32_t id)
{
	uint8_t *p = malloc(MB);
	for (uint32_t k = 0; k < 10; k++) {
		fill(p, MB, id + k);
		frame(p, MB, id + k);
	}
	free(p);
}

static int client(const char *addr, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, addr, &a.sin_addr);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
		return perror("connect"), 1;
	/* large blocks always by mmap, as glibc does by default until a free
	 * raises its threshold (which would send them to the heap) */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	mallopt(M_TRIM_THRESHOLD, 64 << 10);
	for (int round = 0; round < 2; round++) {
		uint32_t b = 100u * (uint32_t)round;
		scenario_mmap(b + 1);
		scenario_malloc(b + 10);
		scenario_realloc(b + 20);
		scenario_brk(b + 30);
		scenario_madvise(b + 40);
		scenario_same_buffer(b + 50);
	}
	shutdown(fd, SHUT_WR);
	char c;
	while (recv(fd, &c, 1, 0) > 0)
		;
	printf("RESULT client frames=%d reused=%d\n", frames, reused);
	return 0;
}

static int server(const char *portfile, const char *addr)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	inet_pton(AF_INET, addr, &a.sin_addr);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	socklen_t al = sizeof a;
	if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return perror("listen"), 1;
	FILE *f = fopen(portfile, "w");
	fprintf(f, "%d\n", ntohs(a.sin_port));
	fclose(f);
	int c = accept(l, NULL, NULL);
	if (c < 0)
		return perror("accept"), 1;
	uint8_t *buf = malloc(8 * MB);
	unsigned long long bytes = 0, stale = 0;
	int n = 0, rc;
	struct hdr h;
	while ((rc = recvall(c, &h, sizeof h)) == 1) {
		if (h.magic != MAGIC || h.len > 8 * MB || recvall(c, buf, h.len) != 1) {
			printf("RESULT server bad-frame-after=%d\n", n);
			return 1;
		}
		for (size_t i = 0; i < h.len; i++)
			stale += buf[i] != pat(h.id, i);
		bytes += h.len;
		n++;
	}
	close(c);
	printf("RESULT server frames=%d bytes=%llu stale=%llu\n", n, bytes, stale);
	return rc < 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "server"))
		return server(argv[2], argc > 3 ? argv[3] : "127.0.0.1");
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: stale_send server PORTFILE [ADDR] | client ADDR PORT\n");
	return 2;
}
