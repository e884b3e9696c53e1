/* rdv_spoof.c — a hostile connector for t_hostile_rdv.sh and t_hostile_src.sh:
 * speaks the shm rendezvous directly (no preload) and claims whatever client
 * address it is told to.
 * usage: rdv_spoof PORT CLAIM_IP CLAIM_PORT   (CLAIM_PORT 0: its own bound socket's,
 * the honest control).  Prints "sent" once the HELLO with its memfd went out.
 * The socket it names as its own (the one a root acceptor looks at) is, by
 * the environment:
 *   SPOOF_BIND=IP:PORT   bound there (else 127.0.0.1, any port), with
 *   SPOOF_FREEBIND=1     IP_FREEBIND first (an address the host lacks), and
 *   SPOOF_LISTEN=1       listening (SO_REUSEPORT): a "listening proof"
 *   SPOOF_FD=PATH        received with SCM_RIGHTS on the unix socket PATH
 *                        (made by a process in a namespace of its own)
 * SPOOF_VERSION=N puts wire version N in its INIT (a malformed request). */
#include "providers/shm/shm_priv.h"
#include "session/session.h"
#include "session/wire.h"
#include "switch/setup/setup_priv.h"
#include "switch/sock/addr.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <unistd.h>

static int rdv(int port)
{
	const char *forms[2] = { "sockswitch.v3:4:127.0.0.1:%d", "sockswitch.v3:4*:%d" };
	for (int i = 0; i < 2; i++) {
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		int n = snprintf(un.sun_path + 1, sizeof un.sun_path - 1, forms[i], port);
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		if (connect(fd, (struct sockaddr *)&un, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) == 0)
			return fd;
		close(fd);
	}
	return -1;
}

static int own_sock(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	const char *b = getenv("SPOOF_BIND");
	if (b) {
		char ip[64];
		snprintf(ip, sizeof ip, "%s", b);
		char *colon = strrchr(ip, ':');
		if (!colon)
			return -1;
		*colon = '\0';
		inet_pton(AF_INET, ip, &a.sin_addr);
		a.sin_port = htons((uint16_t)atoi(colon + 1));
	}
	if (getenv("SPOOF_FREEBIND") && setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof one) < 0)
		return -1;
	if (getenv("SPOOF_LISTEN") && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
		return -1;
	if (getenv("SPOOF_LISTEN") && listen(fd, 1) < 0)
		return -1;
	return fd;
}

/* A socket another process (in a namespace of its own) hands us. */
static int recv_sock(const char *path)
{
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	snprintf(un.sun_path, sizeof un.sun_path, "%s", path);
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(l, (struct sockaddr *)&un, sizeof un) < 0 || listen(l, 1) < 0)
		return -1;
	printf("waiting for a socket on %s\n", path);
	fflush(stdout);
	int c = accept(l, NULL, NULL);
	char b;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr a;
	} u;
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	if (c < 0 || recvmsg(c, &mh, 0) != 1)
		return -1;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int fd = -1;
	if (cm && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(cm), sizeof fd);
	return fd;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	/* a real socket of ours, bound as the switch binds a connecting one */
	int own = getenv("SPOOF_FD") ? recv_sock(getenv("SPOOF_FD")) : own_sock();
	struct sockaddr_in me;
	socklen_t ml = sizeof me;
	if (own < 0 || getsockname(own, (struct sockaddr *)&me, &ml) < 0)
		return perror("own socket"), 1;
	struct sockaddr_storage client = { 0 }, server = { 0 };
	struct sockaddr_in *c = (void *)&client, *s = (void *)&server;
	c->sin_family = s->sin_family = AF_INET;
	inet_pton(AF_INET, argv[2], &c->sin_addr);
	c->sin_port = atoi(argv[3]) ? htons((uint16_t)atoi(argv[3])) : me.sin_port;
	s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->sin_port = htons((uint16_t)atoi(argv[1]));
	printf("claim %s:%d\n", argv[2], ntohs(c->sin_port));

	uint64_t ring = 64u << 10, size = shm_seg_size(ring);
	/* sealed as the library's own segments are: the acceptor maps no other */
	int mfd = shm_seg_create("x", size);
	void *p = mfd >= 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0) : MAP_FAILED;
	if (p == MAP_FAILED)
		return perror("memfd"), 1;
	shm_seg_init(p, ring);
	struct shm_hs hs = { .magic = SHM_MAGIC, .type = SHM_HS_HELLO, .ring_size = ring };
	struct ssw_wire_init init;
	ssw_session_make_init(NULL, &init);
	if (getenv("SPOOF_VERSION"))
		init.version = (uint32_t)atoi(getenv("SPOOF_VERSION"));
	struct ssw_conn_priv priv;
	ssw_conn_priv_make(&priv, &client, &server, &init);
	priv.cfd = own; /* for a forged claim: a socket of ours, bound elsewhere */
	priv.cdomain = AF_INET;
	memcpy(hs.priv, &priv, sizeof priv);
	hs.priv_len = sizeof priv;

	int fd = rdv(atoi(argv[1]));
	if (fd < 0)
		return printf("no rendezvous\n"), 1;
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr a;
	} u = { 0 };
	struct iovec iov = { &hs, sizeof hs };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &mfd, sizeof mfd);
	if (sendmsg(fd, &mh, 0) != (ssize_t)sizeof hs)
		return perror("sendmsg"), 1;
	printf("sent\n");
	fflush(stdout);
	sleep(2); /* hold the connection while the server accepts (or not) */
	return 0;
}
