/* fuzz_handover.c — libFuzzer target for what a new image reads back when an
 * exec carries a connection (switch/share/handover.c): the session's memfd
 * image (header, the provider's description of its endpoint, the staged
 * bytes) and, above all, the segment as the peer left it (its header and
 * every ring index: the peer writes them whenever it likes).  The input
 * chooses the image header, the endpoint description, the segment's
 * indices, and whether the basics are made right so the fuzzer gets past
 * them.
 *
 * Checked: no crash or sanitizer report; an import that succeeds gives an
 * endpoint whose rings stay inside the segment (a receive and a send on it,
 * ASan watching); one that fails leaves the caller's descriptors open (its
 * own to close) and nothing else; no descriptor leaks either way. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sys.h"
#include "providers/shm/shm_priv.h"
#include "session/session_priv.h"

extern const struct ssw_provider ssw_provider_shm;

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)
#define RING SHM_RING_MIN

struct in_hdr {
	uint8_t fix;      /* bit0: blob basics right, bit1: image header right, bit2: indices small */
	uint8_t connector;
	uint16_t qend;    /* staged bytes in the image */
	uint64_t tx_pos, tx_pub, tx_other, rx_pos;  /* our private indices, in the blob */
	uint64_t head0, tail0, held0, head1, tail1, held1; /* the segment's, as the peer left them */
	uint32_t magic;   /* the segment header's */
};

static size_t take(const uint8_t **p, size_t *n, void *out, size_t want)
{
	memset(out, 0, want);
	size_t k = *n < want ? *n : want;
	memcpy(out, *p, k);
	*p += k;
	*n -= k;
	return k;
}

static int count_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static uint64_t small(uint64_t v, bool fix)
{
	return fix ? (v % (4 * RING)) & ~7ull : v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fds_before = count_fds();
	struct in_hdr h;
	take(&data, &size, &h, sizeof h);
	bool fix_idx = h.fix & 4;

	/* the segment, sealed as a connector makes it, with the peer's indices */
	uint64_t seg_size = shm_seg_size(RING);
	int memfd = shm_seg_create("fuzz", seg_size);
	CHECK(memfd >= 0);
	struct shm_seg_hdr *sh = mmap(NULL, seg_size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	CHECK(sh != MAP_FAILED);
	shm_seg_init(sh, RING);
	if (!(h.fix & 1))
		sh->magic = h.magic;
	atomic_store(&sh->ring[0].head, small(h.head0, fix_idx));
	atomic_store(&sh->ring[0].tail, small(h.tail0, fix_idx));
	atomic_store(&sh->ring[0].held, small(h.held0, fix_idx));
	atomic_store(&sh->ring[1].head, small(h.head1, fix_idx));
	atomic_store(&sh->ring[1].tail, small(h.tail1, fix_idx));
	atomic_store(&sh->ring[1].held, small(h.held1, fix_idx));
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);

	/* the endpoint's description: the input's bytes, the basics made right */
	struct shm_handover_blob b;
	take(&data, &size, &b, sizeof b);
	if (h.fix & 1) {
		b.magic = SHM_HANDOVER_MAGIC;
		b.ep_size = sizeof b.ep;
		b.connector = h.connector & 1;
		b.ep.tx.size = b.ep.rx.size = RING;
		b.ep.seg_size = seg_size;
		b.ep.tx.pos = small(h.tx_pos, fix_idx);
		b.ep.tx.pub = small(h.tx_pub, fix_idx);
		b.ep.tx.other = small(h.tx_other, fix_idx);
		b.ep.rx.pos = small(h.rx_pos, fix_idx);
	}

	/* the image: header, note (none), the blob, a session and staged bytes */
	size_t head = (sizeof(struct ssw_session) + 4095) & ~(size_t)4095, qcap = 64u << 10;
	struct img_hdr ih;
	take(&data, &size, &ih, sizeof ih);
	if (h.fix & 2) {
		ih.magic = IMG_MAGIC;
		ih.sess_size = sizeof(struct ssw_session);
		ih.head = (uint32_t)head;
		ih.map_size = head + qcap;
		ih.qend = h.qend % qcap;
		ih.blob_len = sizeof b;
		ih.note_len = 0;
		memset(ih.prov, 0, sizeof ih.prov);
		strcpy(ih.prov, "shm");
	}
	struct ssw_session *s = calloc(1, sizeof *s);
	CHECK(s);
	s->map_size = head + qcap;
	s->q.cap = qcap;
	s->q.off = 0;
	s->q.len = (size_t)ih.qend <= qcap ? (size_t)ih.qend : 0;
	s->window = s->peer_window = 4096;
	int img = (int)SYS_(memfd_create, "fuzz-image", MFD_CLOEXEC);
	CHECK(img >= 0);
	CHECK(ftruncate(img, (off_t)(IMG_SESS + head + qcap)) == 0);
	CHECK(pwrite(img, &ih, sizeof ih, 0) == (ssize_t)sizeof ih);
	CHECK(pwrite(img, &b, sizeof b, IMG_HDR) == (ssize_t)sizeof b);
	CHECK(pwrite(img, s, sizeof *s, IMG_SESS) == (ssize_t)sizeof *s);
	if (size)
		CHECK(pwrite(img, data, size < qcap ? size : qcap, (off_t)(IMG_SESS + head)) >= 0);
	free(s);

	struct ssw_session_image si = { .memfd = img, .fds = { sv[0], memfd }, .nfds = 2 };
	char note[16];
	size_t nl = sizeof note;
	int err = 0;
	struct ssw_session *got = ssw_session_import(&ssw_provider_shm, &si, note, &nl, &err);
	if (got) {
		CHECK(err == 0 && nl == 0);
		/* the endpoint stays inside its segment whatever the peer left */
		struct ssw_ep *ep = got->loc->ep;
		const void *m;
		size_t ml;
		for (int i = 0; i < 4 && shm_ring_peek(ep, &m, &ml) == 0; i++)
			shm_ring_done(ep);
		struct iovec v = { "x", 1 };
		(void)shm_ring_send(ep, &v, 1);
		/* the session's close closes its endpoint and the descriptors */
		ssw_session_close(got, true);
	} else {
		CHECK(err < 0);
		sys_close(sv[0]);
		sys_close(memfd);
	}
	sys_close(sv[1]);
	sys_close(img);
	munmap(sh, seg_size);
	CHECK(count_fds() == fds_before);
	return 0;
}
