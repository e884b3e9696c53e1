/* hostile_seg.c — a hostile local peer of the shm provider's rendezvous, for t_hostile_seg.sh: it hands over (or receives) a segment memfd and then tries to shrink it under the other process.
 *
 * No LD_PRELOAD: it speaks the rendezvous itself, as any local user can
 * (the name format and records are the provider's, from its headers).
 *
 *   hostile_seg connect PORT KIND DIR   a connector to 127.0.0.1:PORT whose
 *       HELLO carries a memfd of KIND: "unsealed" (created without sealing,
 *       as before issue 9), "small" (sealed, but smaller than its ring size
 *       needs), "sealed" (as the switch makes them).  Then it waits for the
 *       verdict: a refusal on the rendezvous socket, or DIR/accepted (written
 *       by the server under test once accept() returned), and truncates the
 *       memfd to 0 bytes.  KIND "skip": sealed, but once accepted it lies in
 *       the rings' indices instead: the acceptor is made to start reading
 *       mid-ring (its index as the HELLO leaves it), then told that the
 *       connector rewound there (skip) with a garbage record at the next
 *       lap's start, while the acceptor's own ring is claimed read past its
 *       end; the acceptor must end the connection, not die.
 *   hostile_seg accept PORT DIR          a listener on 127.0.0.1:PORT (kernel
 *       socket and rendezvous name, like a switched server; PORT 0: any,
 *       written to DIR/port once both listen): it takes the connector's
 *       memfd and tries to shrink it, zero it (punching a hole), grow it
 *       and reseal it.
 *
 * Either way, after the truncation it creates DIR/go (the other side goes
 * on: touches the ring) and, when it has a connection, holds it until
 * DIR/sent appears (bounded); it prints one line, RESULT role=...
 * outcome=... truncate=ok|EPERM|... (errno names).
 * Exit 0 when it ran its attack, 1 when it could not (no rendezvous found,
 * nothing received): the test then fails, since the attack was not tried. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "providers/shm/shm_priv.h"
#include "session/wire.h"
#include "switch/setup/setup_priv.h"
#include "switch/sock/addr.h"

#define WAIT_MS 10000

static const char *dir;

static const char *err_name(int rc)
{
	const char *n = rc ? strerrorname_np(-rc) : "ok";
	return n ? n : "unknown";
}

static int sys_rc(int r) { return r < 0 ? -errno : 0; }

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int file_exists(const char *name)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

static void touch(const char *name)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
}

/* The rendezvous name of 127.0.0.1:port, as the provider builds it
 * (specific, or the wildcard one of a server bound to 0.0.0.0). */
static socklen_t rv_name(struct sockaddr_un *un, int port, int wildcard)
{
	memset(un, 0, sizeof *un);
	un->sun_family = AF_UNIX;
	int n = wildcard ? snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "sockswitch.v3:4*:%d", port)
			 : snprintf(un->sun_path + 1, sizeof un->sun_path - 1, "sockswitch.v3:4:127.0.0.1:%d", port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int send_fd(int s, const void *msg, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = { (void *)msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	return sendmsg(s, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

/* The segment a connector of KIND hands over, its header written as the
 * switch writes it (so that only its seals or size can be refused). */
static int make_seg(const char *kind, uint64_t ring)
{
	int sealed = strcmp(kind, "unsealed") != 0;
	uint64_t size = shm_seg_size(ring);
	if (!strcmp(kind, "small"))
		size -= ring; /* the second ring is missing */
	int fd = memfd_create("hostile", MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		return -1;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -1;
	shm_seg_init(p, ring);
	if (!strcmp(kind, "skip")) /* the acceptor takes its reading index from here */
		atomic_store(&((struct shm_seg_hdr *)p)->ring[0].head, 8000);
	munmap(p, size);
	if (sealed && fcntl(fd, F_ADD_SEALS, SHM_SEALS) < 0)
		return -1;
	return fd;
}

/* What the rendezvous socket says before DIR/accepted shows up. */
static const char *verdict(int s)
{
	for (long t0 = now_ms(); now_ms() - t0 < WAIT_MS;) {
		if (file_exists("accepted"))
			return "accepted";
		struct pollfd pf = { .fd = s, .events = POLLIN };
		if (poll(&pf, 1, 20) <= 0)
			continue;
		struct shm_hs hs;
		ssize_t n = recv(s, &hs, sizeof hs, MSG_DONTWAIT);
		if (n == (ssize_t)sizeof hs && hs.type == SHM_HS_ACK && hs.status < 0)
			return "refused";
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return "hangup";
		/* a doorbell byte: the server took it and rang us */
	}
	return "timeout";
}

/* Keep the connection until the other side touched it after the attack. */
static void hold_until_sent(void)
{
	for (long t0 = now_ms(); now_ms() - t0 < WAIT_MS && !file_exists("sent");)
		usleep(10000);
}

/* KIND "skip": a rewind to a garbage record, and a claim to have read the
 * acceptor's ring past its end. */
static int lie_in_indices(int memfd, uint64_t ring)
{
	uint64_t size = shm_seg_size(ring);
	uint8_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (p == MAP_FAILED)
		return -errno;
	struct shm_seg_hdr *h = (struct shm_seg_hdr *)p;
	uint8_t *ring0 = p + SHM_DATA_OFF;
	struct shm_rec r = { 16, SHM_REC_MSG };
	memcpy(ring0, &r, sizeof r);
	memset(ring0 + sizeof r, 0xa5, 16);
	atomic_store(&h->ring[0].skip, 8000);
	atomic_store(&h->ring[0].tail, ring + 24);
	touch("go"); /* the acceptor sends (on its ring, which we leave alone), then reads ours */
	hold_until_sent();
	atomic_store(&h->ring[1].head, 3 * ring + 8); /* what its close writes meets this */
	munmap(p, size);
	return 0;
}

static int do_connect(int port, const char *kind)
{
	uint64_t ring = SHM_RING_MIN;
	int memfd = make_seg(kind, ring);
	if (memfd < 0) {
		perror("hostile_seg: segment");
		return 1;
	}
	/* a kernel socket bound to the address it claims, as a switched connector holds */
	int k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_storage me = { 0 }, srv = { 0 };
	struct sockaddr_in *mi = (struct sockaddr_in *)&me, *si = (struct sockaddr_in *)&srv;
	mi->sin_family = si->sin_family = AF_INET;
	mi->sin_addr.s_addr = si->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	si->sin_port = htons((uint16_t)port);
	socklen_t ml = sizeof *mi;
	if (k < 0 || bind(k, (struct sockaddr *)mi, ml) < 0 || getsockname(k, (struct sockaddr *)mi, &ml) < 0) {
		perror("hostile_seg: local socket");
		return 1;
	}
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un un;
	int found = 0;
	for (int w = 0; w < 2 && !found; w++) {
		socklen_t ul = rv_name(&un, port, w);
		found = connect(s, (struct sockaddr *)&un, ul) == 0;
	}
	if (!found) {
		fprintf(stderr, "hostile_seg: no rendezvous for 127.0.0.1:%d\n", port);
		return 1;
	}
	struct ssw_conn_priv priv;
	struct ssw_wire_init init = { .version = SSW_WIRE_VERSION, .window = 1u << 20, .pid = getpid() };
	ssw_conn_priv_make(&priv, &me, &srv, &init);
	struct shm_hs hs = { .magic = SHM_MAGIC, .type = SHM_HS_HELLO, .ring_size = ring, .priv_len = sizeof priv };
	memcpy(hs.priv, &priv, sizeof priv);
	if (send_fd(s, &hs, sizeof hs, memfd) < 0) {
		perror("hostile_seg: HELLO");
		return 1;
	}
	const char *outcome = verdict(s);
	if (!strcmp(kind, "skip")) {
		int rc = strcmp(outcome, "accepted") ? -EPROTO : lie_in_indices(memfd, ring);
		printf("RESULT role=connector uid=%d kind=%s outcome=%s lie=%s\n", (int)getuid(), kind, outcome,
		       err_name(rc));
		touch("go");
		return 0;
	}
	int tr = sys_rc(ftruncate(memfd, 0)); /* the attack, whatever the verdict */
	int ph = sys_rc(fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 << 20)); /* zeros: allowed */
	printf("RESULT role=connector uid=%d kind=%s outcome=%s truncate=%s punch=%s\n", (int)getuid(), kind, outcome,
	       err_name(tr), err_name(ph));
	touch("go");
	if (!strcmp(outcome, "accepted"))
		hold_until_sent();
	return 0;
}

static int do_accept(int port)
{
	int k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	setsockopt(k, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (k < 0 || bind(k, (struct sockaddr *)&a, sizeof a) < 0 || listen(k, 16) < 0) {
		perror("hostile_seg: kernel listener");
		return 1;
	}
	socklen_t al = sizeof a;
	getsockname(k, (struct sockaddr *)&a, &al);
	struct sockaddr_un un;
	socklen_t ul = rv_name(&un, ntohs(a.sin_port), 0);
	int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&un, ul) < 0 || listen(l, 16) < 0) {
		perror("hostile_seg: rendezvous");
		return 1;
	}
	char p[4096];
	snprintf(p, sizeof p, "%s/port", dir);
	FILE *f = fopen(p, "w");
	if (!f || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 || fclose(f) != 0) {
		perror("hostile_seg: port file");
		return 1;
	}
	struct pollfd pf = { .fd = l, .events = POLLIN };
	int c = poll(&pf, 1, WAIT_MS) == 1 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
	pf = (struct pollfd){ .fd = c, .events = POLLIN };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct shm_hs hs;
	struct iovec iov = { &hs, sizeof hs };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	int memfd = -1;
	if (c >= 0 && poll(&pf, 1, WAIT_MS) == 1 && recvmsg(c, &mh, MSG_CMSG_CLOEXEC) > 0) {
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		if (cm && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&memfd, CMSG_DATA(cm), sizeof memfd);
	}
	if (memfd < 0) {
		fprintf(stderr, "hostile_seg: no HELLO with a memfd came\n");
		return 1;
	}
	struct stat st;
	fstat(memfd, &st);
	int seals = fcntl(memfd, F_GET_SEALS);
	int tr = sys_rc(ftruncate(memfd, 0));
	/* allowed on a sealed memfd (no write seal: both sides write): the
	 * pages read back as zeros, no SIGBUS; the rings look corrupt or empty */
	int ph = sys_rc(fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size));
	touch("go"); /* the connector writes on its (possibly shrunk) mapping now */
	hold_until_sent();
	int gr = sys_rc(ftruncate(memfd, st.st_size + (1 << 20)));
	int sr = sys_rc(fcntl(memfd, F_ADD_SEALS, F_SEAL_WRITE)); /* would stop the connector's writes */
	printf("RESULT role=acceptor uid=%d outcome=received size=%lld seals=%#x truncate=%s punch=%s grow=%s addseal=%s\n",
	       (int)getuid(), (long long)st.st_size, seals, err_name(tr), err_name(ph), err_name(gr), err_name(sr));
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && !strcmp(argv[1], "connect")) {
		dir = argv[4];
		return do_connect(atoi(argv[2]), argv[3]);
	}
	if (argc == 4 && !strcmp(argv[1], "accept")) {
		dir = argv[3];
		return do_accept(atoi(argv[2]));
	}
	fprintf(stderr, "usage: hostile_seg connect PORT unsealed|small|sealed DIR | accept PORT DIR\n");
	return 2;
}
