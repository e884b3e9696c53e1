/* fuzz_handshake.c — libFuzzer target for the shm provider's connection
 * set-up, everything a peer hands us over the rendezvous sockets: the HELLO a
 * connector leaves in the listener's backlog (with its memfd; accept maps the
 * segment and checks its indices), and what a connector may receive after it
 * (doorbells, a refusal).  The input chooses the record's
 * bytes, how many and which descriptors ride along, and the segment's size and
 * contents.
 *
 * Checked: no crash or sanitizer report; results are 0 or expected errors;
 * a segment accepted can no longer be shrunk by its sender (sealed);
 * no descriptor leaks (descriptors from an untrusted sender are closed on
 * every path); an endpoint that was accepted works on its fuzzed segment
 * without overrunning it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "session/session.h"
#include "common/sys.h"
#include "providers/shm/shm_priv.h"

extern const struct ssw_provider ssw_provider_shm;

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

struct in_hdr {
	uint8_t mode;      /* 0 READY → accept, 1 ACK → connect_complete, 2 HELLO → listener */
	uint8_t fix;       /* bit0: fix magic+type, bit1: valid segment header, bit2: valid ring size,
			    * bit3: seals other than the agreed ones, chosen by bits 4-6 */
	uint8_t nfds;      /* descriptors sent with the record (0..5) */
	uint8_t fdkind;    /* which kind each one is (2 bits each) */
	uint32_t seg_size; /* memfd size selector */
	uint16_t seg_off;  /* where the segment bytes go */
	uint16_t seg_len;
	uint16_t msg_len;
	uint16_t cap;      /* private-data capacity offered */
};

static int send_rec(int fd, const void *msg, size_t len, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { (void *)msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* An accepted endpoint on a fuzzed segment: use it, bounded. */
static void exercise(struct ssw_ep *ep)
{
	for (int i = 0; i < 64; i++) {
		const void *m;
		size_t len;
		int rc = ssw_provider_shm.msg->recv_peek(ep, &m, &len);
		if (rc < 0) {
			CHECK(rc == -EAGAIN || rc == -EPIPE || rc == -ECONNRESET);
			break;
		}
		CHECK((const uint8_t *)m >= ep->rx.data && (const uint8_t *)m + len <= ep->rx.data + ep->rx.size);
		ssw_provider_shm.msg->recv_done(ep);
	}
	struct iovec v = { "hello", 5 };
	int rc = ssw_provider_shm.msg->send(ep, &v, 1);
	CHECK(rc == 0 || rc == -EAGAIN || rc == -EPIPE || rc == -ECONNRESET);
	(void)ssw_provider_shm.progress->rx_ready(ep);
	(void)ssw_provider_shm.progress->peer_state(ep, 1, NULL);
}

/* Descriptors open in this process (/proc/self/fd, the directory's own one
 * not counted). */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;
}

static struct ssw_listener *the_listener(void)
{
	static struct ssw_listener *l;
	static int tried;
	if (tried)
		return l;
	tried = 1;
	/* an address nobody else uses, so other test runs cannot collide */
	struct sockaddr_in a = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.211.7.13", &a.sin_addr);
	for (int i = 0; i < 20 && !l; i++) {
		a.sin_port = htons((uint16_t)(20000 + (getpid() * 7 + i) % 40000));
		if (ssw_provider_shm.conn->listen((struct sockaddr *)&a, sizeof a, 16, SSW_PROTO_MAX, &l) < 0)
			l = NULL;
	}
	return l;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in_hdr h;
	memset(&h, 0, sizeof h);
	memcpy(&h, data, size < sizeof h ? size : sizeof h);
	data += size < sizeof h ? size : sizeof h;
	size -= size < sizeof h ? size : sizeof h;
	struct ssw_listener *lis = the_listener(); /* made once, before the mark */
	/* the lowest free descriptor and how many are open: the same after
	 * this input, or it leaked (the provider may keep a descriptor high) */
	int fd_mark = dup(0);
	close(fd_mark);
	int fd_count = count_fds();

	/* the record */
	struct shm_hs hs;
	uint8_t msg[sizeof hs + 16];
	size_t mlen = h.msg_len % (sizeof msg + 1);
	memset(msg, 0, sizeof msg);
	size_t k = mlen < size ? mlen : size;
	memcpy(msg, data, k);
	data += k, size -= k;
	static const uint32_t types[] = { SHM_HS_HELLO, SHM_HS_ACK, SHM_HS_HELLO };
	uint64_t ring = SHM_RING_MIN;
	if (mlen >= sizeof hs) {
		memcpy(&hs, msg, sizeof hs);
		if (h.fix & 1) {
			hs.magic = SHM_MAGIC;
			hs.type = types[h.mode % 3];
		}
		if (h.fix & 4)
			hs.ring_size = SHM_RING_MIN << (hs.ring_size % 4);
		if (hs.ring_size >= SHM_RING_MIN && hs.ring_size <= SHM_RING_MAX && !(hs.ring_size & (hs.ring_size - 1)))
			ring = hs.ring_size;
		memcpy(msg, &hs, sizeof hs);
	}

	/* the segment: sealed as the switch seals them, or (bit 3) not quite */
	static const int seal_sets[8] = { 0, F_SEAL_SHRINK, F_SEAL_SHRINK | F_SEAL_GROW, F_SEAL_GROW | F_SEAL_SEAL,
					  SHM_SEALS | F_SEAL_WRITE, SHM_SEALS | F_SEAL_FUTURE_WRITE, -1, SHM_SEALS };
	int seals = h.fix & 8 ? seal_sets[(h.fix >> 4) & 7] : SHM_SEALS;
	int memfd = memfd_create("fuzz-seg", MFD_CLOEXEC | (seals >= 0 ? MFD_ALLOW_SEALING : 0));
	CHECK(memfd >= 0);
	uint64_t ssz = h.seg_size & 0x80000000u ? (h.seg_size & 0xfffff) : shm_seg_size(ring) + (h.seg_size & 7) * 8;
	if (ftruncate(memfd, (off_t)ssz) == 0 && ssz) {
		uint8_t *seg = mmap(NULL, ssz, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		if (seg != MAP_FAILED) {
			if (h.fix & 2) {
				struct shm_seg_hdr sh = { .magic = SHM_MAGIC, .version = SHM_VERSION, .ring_size = ring,
							  .seg_size = ssz };
				memcpy(seg, &sh, ssz < sizeof sh ? ssz : sizeof sh);
			}
			size_t off = h.seg_off % ssz, n = h.seg_len % 512;
			n = n < size ? n : size;
			n = off + n <= ssz ? n : ssz - off;
			memcpy(seg + off, data, n);
			munmap(seg, ssz);
		}
	}
	if (seals > 0)
		CHECK(fcntl(memfd, F_ADD_SEALS, seals) == 0);

	/* the descriptors riding along */
	int sp[2], fds[8], nf = h.nfds % 6, opened[8], no = 0;
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) == 0);
	for (int i = 0; i < nf; i++) {
		switch ((h.fdkind >> (2 * (i % 4))) & 3) {
		case 0: fds[i] = memfd; break;
		case 1: fds[i] = opened[no++] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); break;
		case 2: fds[i] = sp[1]; break; /* a socket where a memfd belongs, and vice versa */
		default: fds[i] = opened[no++] = open("/dev/null", O_RDWR | O_CLOEXEC); break;
		}
		CHECK(fds[i] >= 0);
	}

	char priv[SSW_CONNECT_PRIV_MAX];
	size_t cap = h.cap % (SSW_CONNECT_PRIV_MAX + 1);
	switch (h.mode % 3) {
	case 1: { /* anything after the HELLO on a connected rendezvous socket */
		/* One-trip connect: after the HELLO the rendezvous socket carries
		 * doorbells (1 byte) and at most a refusal. */
		struct ssw_ep *ep = shm_ep_alloc();
		CHECK(ep);
		ep->ctl_fd = fcntl(sp[0], F_DUPFD_CLOEXEC, 0);
		ep->my_efd = ep->peer_efd = ep->seg_fd = ep->map_fd = -1;
		size_t rlen = cap;
		CHECK(ssw_provider_shm.conn->connect_complete(ep, priv, &rlen) == 0 && rlen == 0);
		struct shm_ring_ctl *ctl = calloc(2, sizeof *ctl);
		CHECK(ctl);
		ep->rx.ctl = &ctl[0];
		ep->tx.ctl = &ctl[1];
		if (send_rec(sp[1], msg, mlen, fds, nf) == 0) {
			/* drained as a waking sleeper does: a 1-byte record is a
			 * doorbell, a longer one a refusal (reset), an empty one
			 * reads as the hang-up; one the size and magic of a vouch
			 * (shm_vouch.c) is kept as one, not a refusal */
			ssw_provider_shm.progress->wake_ack(ep);
			CHECK(mlen <= 1 || ep->err == -ECONNRESET || shm_vouch_is(msg, mlen));
			CHECK(mlen != 1 || (!ep->err && !ep->peer_gone));
			/* then the peer goes away: an end either way, and reads fail */
			shutdown(sp[1], SHUT_WR);
			uint32_t st = ssw_provider_shm.progress->peer_state(ep, 1, NULL);
			CHECK(st == SSW_PEER_RESET || st == (SSW_PEER_FIN | SSW_PEER_CLOSED));
			CHECK(ssw_provider_shm.msg->recv_peek(ep, &(const void *){ 0 }, &(size_t){ 0 }) < 0);
		}
		ep->rx.ctl = ep->tx.ctl = NULL;
		free(ctl);
		shm_ep_free(ep);
		break;
	}
	case 0:
	case 2: { /* HELLO in the listener's backlog → accept maps and checks the segment */
		if (!lis)
			break;
		struct sockaddr_un un;
		socklen_t ul = sizeof un;
		CHECK(getsockname(lis->lfd, (struct sockaddr *)&un, &ul) == 0);
		int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		CHECK(c >= 0);
		if (connect(c, (struct sockaddr *)&un, ul) == 0 && send_rec(c, msg, mlen, fds, nf) == 0) {
			for (int i = 0; i < 3; i++) {
				struct ssw_ep *acc = NULL;
				size_t plen = cap;
				int rc = ssw_provider_shm.conn->accept(lis, &acc, priv, &plen);
				CHECK(rc == 0 || rc == -EAGAIN || rc == -ENOMEM);
				if (rc != 0)
					continue;
				CHECK(plen <= cap);
				/* whoever sent it can no longer shrink it under us */
				CHECK(nf && ftruncate(memfd, 0) < 0);
				exercise(acc);
				ssw_provider_shm.conn->close(acc, SSW_CLOSE_ABORT);
				break;
			}
		}
		close(c);
		/* let the listener see the hang-up of anything left pending */
		for (int i = 0; i < 3; i++) {
			struct ssw_ep *ep = NULL;
			size_t plen = sizeof priv;
			if (ssw_provider_shm.conn->accept(lis, &ep, priv, &plen) == 0)
				ssw_provider_shm.conn->close(ep, SSW_CLOSE_ABORT);
		}
		break;
	}
	}
	for (int i = 0; i < no; i++)
		close(opened[i]);
	close(memfd);
	close(sp[0]);
	close(sp[1]);
	/* every descriptor the provider received was closed or handed back */
	int probe = dup(0);
	int now = count_fds();
	if ((probe != fd_mark || now != fd_count + 1) && getenv("FUZZ_FD_DEBUG")) { /* to find which descriptor leaked */
		char cmd[64];
		snprintf(cmd, sizeof cmd, "ls -l /proc/%d/fd >&2", getpid());
		(void)!system(cmd);
		fprintf(stderr, "mode %u fix %u nfds %u fdkind %#x msg_len %zu\n", h.mode % 3, h.fix, nf, h.fdkind, mlen);
	}
	CHECK(probe == fd_mark && now == fd_count + 1);
	close(probe);
	return 0;
}
