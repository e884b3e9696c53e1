/* shm_init.c — the shm provider object: same-host transport over shared memory. */
#include "providers/shm/shm_priv.h"

#include "common/params.h"
#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int shm_init(void)
{
	shm_cma_disabled = ssw_param_choice(SSW_P_CMA) == 0;
	shm_rdma_async = ssw_param_choice(SSW_P_FAULT) == 2; /* SOCKSWITCH_FAULT=async */
	shm_pin_mode = ssw_param_choice(SSW_P_FAULT) == 3;   /* SOCKSWITCH_FAULT=pin */
	return 0;
}

static size_t shm_max_msg(struct ssw_ep *ep) { return ep->tx.size / 4 - SHM_REC_HDR; }
/* half the ring: the other half is slack for records' framing and padding
 * and for the record that wraps at the end of the ring */
static size_t shm_window(struct ssw_ep *ep) { return 2 * shm_max_msg(ep); }
/* a ring record: its header, the message padded to 8 bytes */
static size_t shm_msg_space(struct ssw_ep *ep, size_t len) { (void)ep; return SHM_REC_HDR + ((len + 7) & ~(size_t)7); }

static const struct ssw_msg_ops shm_msg_ops = {
	.size = sizeof(struct ssw_msg_ops),
	.max_msg = shm_max_msg,
	.window = shm_window,
	.send = shm_ring_send,
	.recv_peek = shm_ring_peek,
	.recv_done = shm_ring_done,
	.send_room = shm_ring_room,
	.send_ctl = shm_ring_send_ctl,
	.send_reserve = shm_ring_reserve,
	.send_commit = shm_ring_commit,
	.flush = shm_ring_flush,
	.msg_space = shm_msg_space,
	.trim = shm_ring_trim,
	.resident = shm_seg_resident,
};

static int shm_wait_fds(struct ssw_ep *ep, struct pollfd *pfd, int n)
{
	int k = 0;
	if (k < n && ep->my_efd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->my_efd, .events = POLLIN };
	if (k < n && ep->ctl_fd >= 0 && !ep->peer_gone)
		pfd[k++] = (struct pollfd){ .fd = ep->ctl_fd, .events = POLLIN };
	return k;
}

/* The relay (a process that keeps one connection and closes the rest) may
 * give the connection away later (ep_export): the segment's memfd stays too. */
static int shm_keep_fds(struct ssw_ep *ep, int *fds, int max)
{
	struct pollfd p[2];
	int n = shm_wait_fds(ep, p, 2), k = 0;
	for (int i = 0; i < n && k < max; i++)
		fds[k++] = p[i].fd;
	if (ep->ctl_fd >= 0 && ep->peer_gone && k < max)
		fds[k++] = ep->ctl_fd;
	struct shm_seg_hdr *h = ep->seg;
	int seg = !h ? -1 : ep->tx.ctl == &h->ring[0] ? shm_seg_fd_now(ep) : ep->map_fd;
	if (seg >= 0 && k < max)
		fds[k++] = seg;
	return k;
}

/* After the HELLO the rendezvous connection carries doorbells (1 byte),
 * vouches for rendezvous descriptors (shm_vouch.c) and at most a refusal
 * (anything else: the listener could not take us, a reset); its hang-up
 * means every process holding the peer's end is gone. */
void shm_ctl_record(struct ssw_ep *ep, const void *rec, size_t n, const struct msghdr *mh)
{
	/* no descriptor belongs on this connection: one a peer attached would
	 * stay open in our table (a hostile peer could fill it) */
	for (struct cmsghdr *c = mh ? CMSG_FIRSTHDR(mh) : NULL; c; c = CMSG_NXTHDR((struct msghdr *)mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof fd, sizeof fd);
				sys_close(fd);
			}
	if (n > 1 && shm_vouch_is(rec, n)) {
		if (mh)
			shm_vouch_record(ep, rec, n, mh);
		return;
	}
	if (n > 1)
		ep->err = -ECONNRESET;
	if (n == 0 || n > 1)
		ep->peer_gone = 1;
}

ssize_t shm_ctl_take(struct ssw_ep *ep, int flags)
{
	struct shm_vouch m;
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { &m, sizeof m };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf };
	ssize_t n = sys_recvmsg(ep->ctl_fd, &mh, flags);
	if (n >= 0) /* a record longer than a vouch is a refusal, its text unread */
		shm_ctl_record(ep, &m, mh.msg_flags & MSG_TRUNC ? sizeof m + 1 : (size_t)n, &mh);
	return n;
}

#define DRAIN_MAX 16

/* Drain the doorbells (wake_ack): every record waiting in one system call
 * (a wake-up should cost the sleeper no more than kernel TCP's recv). */
static void ctl_drain(struct ssw_ep *ep)
{
	struct shm_vouch m[DRAIN_MAX];
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} cm[DRAIN_MAX];
	struct iovec iov[DRAIN_MAX];
	struct mmsghdr mm[DRAIN_MAX];
	for (int round = 0; round < 4 && !ep->peer_gone; round++) {
		for (int i = 0; i < DRAIN_MAX; i++) {
			/* a record longer than a vouch is a refusal, its text unread */
			iov[i] = (struct iovec){ .iov_base = &m[i], .iov_len = sizeof m[i] };
			mm[i] = (struct mmsghdr){ .msg_hdr = { .msg_iov = &iov[i], .msg_iovlen = 1,
							       .msg_control = cm[i].buf, .msg_controllen = sizeof cm[i].buf } };
		}
		int n = (int)SYS_(recvmmsg, ep->ctl_fd, mm, DRAIN_MAX, MSG_DONTWAIT, NULL);
		for (int i = 0; i < n && !ep->peer_gone; i++) {
			size_t len = mm[i].msg_hdr.msg_flags & MSG_TRUNC ? sizeof m[i] + 1 : mm[i].msg_len;
			shm_ctl_record(ep, &m[i], len, &mm[i].msg_hdr);
		}
		if (n < DRAIN_MAX)
			return;
	}
}

/* Has the peer hung up (or refused us)?  Looks without taking anything:
 * another thread of ours may be asleep waiting for a doorbell. */
static void ctl_probe(struct ssw_ep *ep)
{
	if (ep->ctl_fd < 0 || ep->peer_gone)
		return;
	struct pollfd p = { .fd = ep->ctl_fd, .events = POLLRDHUP };
	if (sys_poll(&p, 1, 0) <= 0 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return;
	struct shm_hs m;
	/* the first record left: a doorbell (1 byte), a vouch, a refusal, or
	 * nothing; all but a refusal leave a hang-up (peeked: the record stays) */
	ssize_t n = SYS_(recvfrom, ep->ctl_fd, &m, sizeof m, MSG_DONTWAIT | MSG_PEEK | MSG_TRUNC, NULL, NULL);
	bool refusal = n > 1 && !shm_vouch_is(&m, (size_t)n);
	shm_ctl_record(ep, &m, refusal ? (size_t)n : 0, NULL);
}

static void shm_wake_leave(struct ssw_ep *ep)
{
	uint32_t a = atomic_load_explicit(&ep->rx.ctl->armed, memory_order_relaxed);
	while (a && !atomic_compare_exchange_weak_explicit(&ep->rx.ctl->armed, &a, a - 1, memory_order_relaxed,
							   memory_order_relaxed))
		;
}

static void shm_wake_ack(struct ssw_ep *ep)
{
	uint64_t v;
	if (ep->my_efd < 0)
		ctl_drain(ep);
	else if (sys_read(ep->my_efd, &v, sizeof v) != sizeof v)
		ctl_probe(ep); /* not our doorbell */
	/* Only now may the producer ring again: had we cleared `rung` before
	 * draining the eventfd, a ring in between would be drained with it and
	 * `rung` left set, and the next sleep would never be rung.  A message
	 * sent while `rung` was still set is seen: the caller looks at the ring
	 * after waking. */
	atomic_store_explicit(&ep->rx.ctl->rung, 0, memory_order_seq_cst);
	atomic_thread_fence(memory_order_seq_cst); /* pairs with shm_wake_peer's fence */
	shm_wake_leave(ep);
}

/* Sleep in a blocking recv on the rendezvous connection itself: the
 * doorbell is taken by the system call that sleeps (poll + drain would be
 * two).  The socket is shared across fork, and so are its flags and
 * timeout: every other use of it passes MSG_DONTWAIT, and the timeout
 * cached here lives in the fork-shared endpoint. */
static int shm_sleep(struct ssw_ep *ep, int ms)
{
	if (ep->my_efd >= 0 || ep->ctl_fd < 0 || ep->peer_gone || ms <= 0)
		return -ENOSYS;
	if (!ep->ctl_blocking) {
		int fl = (int)SYS_(fcntl, ep->ctl_fd, F_GETFL, 0);
		if (fl < 0 || SYS_(fcntl, ep->ctl_fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
			return -ENOSYS;
		ep->ctl_blocking = 1;
	}
	if (ep->ctl_timeo_ms != ms) {
		struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
		if (sys_setsockopt(ep->ctl_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
			return -ENOSYS;
		ep->ctl_timeo_ms = ms;
	}
	ssize_t n = shm_ctl_take(ep, 0);
	int err = errno;
	if (n >= 0) {
		/* as in wake_ack: the producer may ring again only now */
		atomic_store_explicit(&ep->rx.ctl->rung, 0, memory_order_seq_cst);
		atomic_thread_fence(memory_order_seq_cst);
	}
	shm_wake_leave(ep);
	if (n >= 0)
		return 1;
	return err == EINTR ? -EINTR : 0;
}

static int shm_rx_ready(struct ssw_ep *ep)
{
	const struct shm_ring *r = &ep->rx;
	uint64_t seen = __atomic_load_n(&r->pos, __ATOMIC_RELAXED) + __atomic_load_n(&r->cur, __ATOMIC_RELAXED);
	return shm_rx_tail(r, seen) != seen ||
	       atomic_load_explicit(&r->ctl->closed, memory_order_relaxed) != SHM_OPEN;
}

static uint32_t shm_peer_state(struct ssw_ep *ep, int probe, uint32_t *urg)
{
	if (!ep->rx.ctl)
		return 0;
	const struct shm_ring_ctl *c = ep->rx.ctl;
	if (urg)
		*urg = atomic_load_explicit(&c->urg, memory_order_acquire);
	uint32_t closed = atomic_load_explicit(&c->closed, memory_order_acquire);
	if (closed == SHM_CLOSED_RESET)
		return SSW_PEER_RESET;
	if (closed == SHM_CLOSED_ORDERLY)
		return SSW_PEER_FIN | SSW_PEER_CLOSED;
	uint32_t st = atomic_load_explicit(&c->fin, memory_order_acquire) ? SSW_PEER_FIN : 0;
	if (probe)
		ctl_probe(ep);
	if (ep->err == -ECONNRESET)
		return SSW_PEER_RESET;
	if (ep->peer_gone)
		return shm_gone_state(ep) == -ECONNRESET ? SSW_PEER_RESET : SSW_PEER_FIN | SSW_PEER_CLOSED;
	return st;
}

static void shm_note(struct ssw_ep *ep, uint32_t what, int32_t arg)
{
	if (!ep->tx.ctl)
		return;
	struct shm_ring_ctl *c = ep->tx.ctl;
	switch (what) {
	case SSW_NOTE_FIN:
		atomic_store_explicit(&c->fin, 1, memory_order_release);
		shm_wake_peer(ep);
		break;
	case SSW_NOTE_MARK:
		atomic_fetch_add_explicit(&c->urg, 1, memory_order_release);
		shm_wake_peer(ep);
		break;
	case SSW_NOTE_TAG:
		atomic_store_explicit(&c->tag, arg, memory_order_release);
		break;
	case SSW_NOTE_UNREAD:
		if (ep->rx.ctl) /* the word is the consumer's: in our receive ring */
			atomic_store_explicit(&ep->rx.ctl->unread, arg != 0, memory_order_release);
		break;
	}
}

/* In the shared segment: the sender of a mark reads the receiver's tag at
 * once, though the receiver may not be running. */
static int32_t shm_peer_tag(struct ssw_ep *ep)
{
	return ep->rx.ctl ? atomic_load_explicit(&ep->rx.ctl->tag, memory_order_acquire) : 0;
}

/* Written by the peer at each publication: it shares our CPUs (one host). */
static int shm_peer_cpu(struct ssw_ep *ep)
{
	return ep->rx.ctl ? atomic_load_explicit(&ep->rx.ctl->cpu, memory_order_relaxed) - 1 : -1;
}

/* The peer's clock is ours (one host). */
static uint64_t shm_wake_sent_ns(struct ssw_ep *ep)
{
	return ep->rx.ctl ? atomic_load_explicit(&ep->rx.ctl->rang_ns, memory_order_relaxed) : 0;
}

/* The consumer's count of threads armed to sleep on the ring we fill. */
static int shm_peer_asleep(struct ssw_ep *ep)
{
	return ep->tx.ctl ? atomic_load_explicit(&ep->tx.ctl->armed, memory_order_relaxed) != 0 : -1;
}

static const struct ssw_progress_ops shm_progress_ops = {
	.size = sizeof(struct ssw_progress_ops),
	.poll_cq = shm_rdma_poll_cq,
	.rx_ready = shm_rx_ready,
	.arm = shm_ring_arm,
	.wait_fds = shm_wait_fds,
	.keep_fds = shm_keep_fds,
	.wake_ack = shm_wake_ack,
	.wake_leave = shm_wake_leave,
	.sleep = shm_sleep,
	.peer_state = shm_peer_state,
	.note = shm_note,
	.peer_tag = shm_peer_tag,
	.peer_cpu = shm_peer_cpu,
	.wake_sent_ns = shm_wake_sent_ns,
	.peer_asleep = shm_peer_asleep,
};

const struct ssw_provider ssw_provider_shm = {
	.spi_version = SSW_SPI_VERSION,
	.name = "shm",
	.caps = SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE | SSW_CAP_SHARED_CONTEXT,
	.init = shm_init,
	.conn = &shm_conn_ops,
	.msg = &shm_msg_ops,
	.rdma = &shm_rdma_ops,
	.progress = &shm_progress_ops,
};
