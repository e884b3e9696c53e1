/* session_handover.c — a connection's session carried across exec into the
 * new image of the same process (switch/share/handover.c): seed 000's
 * duplicate-and-adopt, for the one case where the adopter can only get the
 * connection through descriptors.
 *
 * The session lives in anonymous fork-shared memory, which the exec takes
 * away.  So the image about to exec writes it into a memfd the new image
 * inherits: a header, the provider's description of its endpoint
 * (ep_export), the session itself and the bytes staged in its queue.  The
 * new image maps a fresh session, reads them back and makes anew what
 * names this image's memory: the provider, the endpoint, the queue's
 * address, the lock.  Only a quiet session goes (no rendezvous or RDMA
 * transfer in flight, every message at the head staged) and only one held
 * by this process alone: anything else is relayed as before.
 *
 * An endpoint in process memory (fabric: no ep_export) does not go: the
 * transport moves instead, as control does between processes
 * (session_move.c).  The image parks it (the peer suspended, everything it
 * sent before into the queue, MOVED), the new image connects to the
 * peer's offer at load and resumes it. */
#include "session/session_priv.h"

#include "common/log.h"
#include "common/sys.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(struct img_hdr) + SSW_SESSION_NOTE_MAX <= IMG_HDR, "the header page holds the note");

/* Hand-overs that failed in this process (an exec, a pass to a process
 * that did not take it): a transport parked for one of them is this
 * process's to take back. */
static _Atomic uint32_t handover_failures;

void ssw_session_handover_failed(void)
{
	atomic_fetch_add(&handover_failures, 1);
}

bool sess_handover_holds(const struct ssw_session *s)
{
	return s->loc->handover_hold && s->loc->handover_hold == atomic_load(&handover_failures) + 1;
}

static size_t head_size(void)
{
	return (sizeof(struct ssw_session) + 4095) & ~(size_t)4095;
}

static bool quiet(const struct ssw_session *s)
{
	/* (bytes staged for a suspended peer are not carried: session_stage.c) */
	if (s->hv || s->rr.active || s->rw.active || s->txr.id || s->reset || s->broken || s->ts.len)
		return false;
	for (int i = 0; i < SESS_RMA_SLOTS; i++)
		if (s->rma[i].busy)
			return false;
	return true;
}

/* All n bytes at `at`, written (write) or read: pwrite/pread in a loop. */
static bool io_all(int fd, void *p, size_t n, off_t at, bool write)
{
	uint8_t *b = p;
	while (n) {
		ssize_t k = write ? pwrite(fd, b, n, at) : pread(fd, b, n, at);
		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			return false;
		}
		b += k;
		n -= (size_t)k;
		at += k;
	}
	return true;
}

static bool write_all(int fd, const void *p, size_t n, off_t at)
{
	return io_all(fd, (void *)p, n, at, true);
}

static bool read_all(int fd, void *p, size_t n, off_t at)
{
	return io_all(fd, p, n, at, false);
}

/* The transport of a connection an exec will carry must move (fabric):
 * ask its peer to stop now, so that all of the exec's peers answer at
 * once (sess_park waits for each afterwards).  A connection relayed after
 * all answers its SUSPENDED with RESUME (sess_swap_flush). */
static bool must_move(struct ssw_session *s)
{
	return !s->p->conn->ep_export && s->exclusive && sess_swap_possible(s);
}

void ssw_session_exec_ask(struct ssw_session *s)
{
	if (!must_move(s) || sess_holders(s) != 1 || !sess_enter(s))
		return;
	if (sess_holders(s) == 1 && atomic_load(&s->user) == ssw_pid() && !s->sw.asked && !s->txr.id &&
	    !s->mv.parked && sess_park_ask(s))
		s->sw.serving = ssw_pid(); /* the answer is the park's (as in sess_park): no look of ours
					      meanwhile may take it for one to resume */
	sess_unlock(s);
}

void ssw_session_exec_asked_done(struct ssw_session *s)
{
	if (!must_move(s))
		return;
	sess_lock(s);
	/* not parked after all (relayed, or not carried): whoever drives
	 * it next resumes the peer when its SUSPENDED comes */
	if (s->sw.serving == ssw_pid())
		s->sw.serving = 0;
	sess_unlock(s);
}

int ssw_session_export(struct ssw_session *s, const void *note, size_t note_len, struct ssw_session_image *out)
{
	const struct ssw_conn_ops *c = s->p->conn;
	/* an endpoint in process memory cannot go: its transport moves to the
	 * new image instead, as with control between processes (parked) */
	bool move = must_move(s);
	if ((!c->ep_export || s->exclusive) && !move)
		return -EOPNOTSUPP;
	if (note_len > SSW_SESSION_NOTE_MAX)
		return -EOPNOTSUPP;
	if (sess_holders(s) != 1) {
		SSW_DEBUG("handover: %d holders", sess_holders(s));
		return -EBUSY;
	}
	if (!sess_enter(s))
		return -ECONNRESET;
	int rc = -EBUSY;
	int memfd = -1;
	if (sess_holders(s) != 1 || atomic_load(&s->moved))
		goto out;
	sess_flush_held(s);
	(void)sess_pump(s, true); /* every message at the head into the queue: none names the rings */
	/* a large message being read through the rendezvous (a reader that
	 * took part of it: a relay's buffer is smaller than a 1 MiB write):
	 * the rest into the queue too, or a stream would never be quiet */
	if (s->rr.active && !s->reset && !s->broken)
		(void)sess_stage_rr(s);
	if (!quiet(s) || s->stage_nomem) {
		SSW_DEBUG("handover: not quiet (head %d, rendezvous %d/%d/%llu, reset %d, broken %d, nomem %d)", s->hv,
			  s->rr.active, s->rw.active, (unsigned long long)s->txr.id, s->reset, s->broken, s->stage_nomem);
		goto out;
	}
	if (move && atomic_load(&s->user) != ssw_pid())
		goto out;
	uint8_t blob[IMG_BLOB_MAX];
	size_t blen = 0;
	int n = 0;
	if (move) {
		/* the peer suspended, everything it sent before into the queue,
		 * MOVED: the new image connects to its offer (a peer that cannot
		 * take a new transport is resumed: relayed) */
		if ((rc = sess_park(s, true)) != 0)
			goto out;
		s->loc->handover_hold = atomic_load(&handover_failures) + 1;
		if (!quiet(s)) {
			/* (parked all the same: the relay that carries it connects) */
			rc = -EBUSY;
			goto out;
		}
	} else {
		blen = sizeof blob;
		n = c->ep_export(s->loc->ep, blob, &blen, out->fds, SSW_SESSION_IMAGE_FDS);
		if (n < 0) {
			rc = n;
			goto out;
		}
	}
	struct img_hdr h = {
		.magic = IMG_MAGIC,
		.sess_size = sizeof *s,
		.head = (uint32_t)head_size(),
		.map_size = s->map_size,
		.qend = s->q.off + s->q.len,
		.blob_len = (uint32_t)blen,
		.note_len = (uint32_t)note_len,
		.parked = move,
	};
	snprintf(h.prov, sizeof h.prov, "%s", s->p->name);
	memfd = (int)SYS_(memfd_create, "sockswitch-handover", MFD_CLOEXEC);
	if (memfd < 0 || h.qend > s->q.cap || (uint8_t *)s + h.head != s->q.buf) {
		rc = memfd < 0 ? -errno : -EINVAL;
		goto out;
	}
	if (ftruncate(memfd, (off_t)(IMG_SESS + h.head + h.qend)) < 0 || !write_all(memfd, &h, sizeof h, 0) || !write_all(memfd, note, note_len, sizeof h) ||
	    !write_all(memfd, blob, blen, IMG_HDR) || !write_all(memfd, s, sizeof *s, IMG_SESS) ||
	    !write_all(memfd, s->q.buf, h.qend, IMG_SESS + h.head)) {
		rc = -EIO;
		goto out;
	}
	out->memfd = memfd;
	out->nfds = n;
	memfd = -1;
	rc = 0;
out:
	sess_unlock(s);
	if (memfd >= 0)
		sys_close(memfd);
	return rc;
}

struct ssw_session *ssw_session_import(const struct ssw_provider *prov, const struct ssw_session_image *img,
				       void *note, size_t *note_len, int *err)
{
	struct img_hdr h;
	struct stat st;
	size_t head = head_size();
	*err = -EINVAL;
	if (fstat(img->memfd, &st) < 0 || !S_ISREG(st.st_mode) || !read_all(img->memfd, &h, sizeof h, 0))
		return NULL;
	if (h.magic != IMG_MAGIC || h.sess_size != sizeof(struct ssw_session) || h.head != head ||
	    h.map_size < head || h.map_size > IMG_MAP_MAX || h.qend > h.map_size - head || h.blob_len > IMG_BLOB_MAX ||
	    h.note_len > *note_len || strncmp(h.prov, prov->name, sizeof h.prov) || (!h.parked && !prov->conn->ep_import) ||
	    (h.parked && (h.blob_len || img->nfds)) ||
	    (uint64_t)st.st_size < IMG_SESS + head + h.qend) {
		return NULL;
	}
	uint8_t blob[IMG_BLOB_MAX];
	if (!read_all(img->memfd, note, h.note_len, sizeof h) || !read_all(img->memfd, blob, h.blob_len, IMG_HDR))
		return NULL;
	*note_len = h.note_len;
	struct ssw_session *s = ssw_shared_alloc(h.map_size, sizeof *s);
	if (!s) {
		*err = -ENOMEM;
		return NULL;
	}
	struct ssw_ep *ep = NULL;
	struct sess_local *loc = calloc(1, sizeof *loc);
	if (!loc || !read_all(img->memfd, s, sizeof *s, IMG_SESS) ||
	    !read_all(img->memfd, (uint8_t *)s + head, h.qend, IMG_SESS + head) || s->map_size != h.map_size ||
	    s->q.off + s->q.len != h.qend || s->q.cap > h.map_size - head || s->ts.cap != h.map_size - head - s->q.cap ||
	    s->ts.len || s->ts.off || (h.parked && (!s->exclusive || !s->mv.parked || !s->mv.have_offer)) ||
	    (!h.parked && (*err = prov->conn->ep_import(blob, h.blob_len, img->fds, img->nfds, &ep)) < 0)) {
		free(loc);
		ssw_shared_free(s, h.map_size, false);
		return NULL;
	}
	/* what named the other image's memory, made anew */
	s->loc = loc;
	s->p = prov;
	s->loc->ep = ep;
	s->q.buf = (uint8_t *)s + head;
	s->ts.buf = s->q.buf + s->q.cap;
	s->ts.hi = 0;
	memset(&s->hm, 0, sizeof s->hm);
	sess_init_sync(s);
	sess_holds_set(s, 1); /* (no relays: one that gave the connection away held it) */
	atomic_store(&s->moved, false);
	atomic_store(&s->moved_to, 0);
	atomic_store(&s->w.sleepers, 0);
	atomic_store(&s->user, ssw_pid());
	*err = 0;
	if (h.parked) {
		/* our transport now, before the program's first call: the peer
		 * waits for it (SWAP_WAIT_NS at most), a kernel socket would not
		 * make it wait for the program */
		sess_lock(s);
		s->sw.serving = 0;
		s->sw.qn = 0;
		s->sw.granted = 0;
		s->sw.driving = false;
		if (sess_move_in(s) == 0)
			sess_swap_flush(s); /* RESUME */
		sess_unlock(s);
	}
	return s;
}

void ssw_session_import_undo(struct ssw_session *s)
{
	/* as a copy whose connection went elsewhere: nothing reaches the peer */
	atomic_store(&s->moved, true);
	ssw_session_close(s, false);
}
