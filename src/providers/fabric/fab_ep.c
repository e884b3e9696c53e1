/* fab_ep.c — life of one fabric endpoint: its domain, event and completion
 * queues, registered message buffers, pre-posted receives, the provider
 * header with its credits, reading completions, and closing. */
#include "providers/fabric/fab_priv.h"
#include "providers/fabric/fab_pack.h"

#include "common/log.h"
#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

void fab_ep_lock(struct ssw_ep *ep)
{
	fab_gate_enter();
	pthread_mutex_lock(&ep->mu);
	if (ep->watched)
		atomic_store_explicit(&ep->app_ns, ssw_now_ns(), memory_order_relaxed);
}

/* As fab_ep_lock, but false at once when another thread holds the endpoint. */
bool fab_ep_trylock(struct ssw_ep *ep)
{
	fab_gate_enter();
	if (pthread_mutex_trylock(&ep->mu) != 0) {
		fab_gate_leave();
		return false;
	}
	if (ep->watched)
		atomic_store_explicit(&ep->app_ns, ssw_now_ns(), memory_order_relaxed);
	return true;
}

void fab_ep_unlock(struct ssw_ep *ep)
{
	pthread_mutex_unlock(&ep->mu);
	fab_gate_leave();
}


static void sent_credited(struct ssw_ep *ep, uint32_t n);
static int get_wait_fd(struct fid *f, int *fd)
{
	int rc = fi_control(f, FI_GETWAIT, fd);
	return rc ? rc : *fd >= 0 ? 0 : -FI_EINVAL;
}

static int reg_buf(struct ssw_ep *ep, void *buf, size_t len, uint64_t access, struct fid_mr **mr)
{
	*mr = NULL;
	if (!ep->mr_local)
		return 0; /* the provider needs no descriptor for local buffers (tcp) */
	int rc = fi_mr_reg(ep->domain, buf, len, access, 0, ep->next_key++, 0, mr, NULL);
	if (rc == 0 && ep->mr_endpoint) {
		rc = fi_mr_bind(*mr, &ep->ep->fid, 0);
		if (rc == 0)
			rc = fi_mr_enable(*mr);
	}
	return rc;
}

int fab_post_recv(struct ssw_ep *ep, uint32_t slot)
{
	void *desc = ep->rx_mr ? fi_mr_desc(ep->rx_mr) : NULL;
	ssize_t rc = -FI_EAGAIN;
	/* at most FAB_RX_N receives are ever posted, within the queue's size:
	 * -FI_EAGAIN here is the provider catching up (a few tries) */
	for (int tries = 0; rc == -FI_EAGAIN && tries < 100; tries++)
		rc = fi_recv(ep->ep, ep->rxbuf + (size_t)slot * FAB_BUF_SIZE, FAB_BUF_SIZE, desc, 0, &ep->rxc[slot]);
	return (int)rc;
}

/* tcp (libfabric 1.17): the CQ's wait fd is a level-triggered epoll set
 * of the endpoint's socket (its epoll data: the endpoint's fid) and of the
 * CQ's own signal, a socketpair that libfabric writes at a completion
 * (unless its byte is already there) and reads back at the next progress
 * that finds it in the set.  On the data path that was two system calls
 * per completion on each side (a unix socket write and read, about a
 * sixth of a 4 KiB sender's time), to wake nobody: the caller reads the
 * CQ itself.  So the signal is taken out of cq_fd's set (detach_cq_signal)
 * and nobody waits on it: progress never sees it, so it stays set and
 * costs nothing (libfabric writes it only when its byte was taken; arm
 * reads the CQ instead of fi_trywait on it, which would take the byte,
 * fab_msg.c: pending_locked).  What it was for, waking a
 * sleeper when a completion is read by someone else (another thread, the
 * provider's thread) instead of arriving in the sleeper's socket, is done
 * by whoever reads it: fab_ring on wake_fd, only while a waiter is armed,
 * so that an epoll set (which registers the wait fds for good) is not
 * woken by the completions of its owner's own sends.  Its epoll data is
 * learnt here, once, from a signal of our own (fi_cq_signal) on the set
 * before the connection adds its socket.  Any other provider or version:
 * the wait fd as it is. */
static void learn_cq_signal(struct ssw_ep *ep)
{
	uint32_t v = fab_version();
	if (strcmp(fab_prov_name, "tcp") != 0 || FI_MAJOR(v) != 1 || FI_MINOR(v) != 17 || ep->cq_fd < 0)
		return;
	if (fi_cq_signal(ep->cq) != 0)
		return;
	struct epoll_event ev[2];
	int n = sys_epoll_wait(ep->cq_fd, ev, 2, 0);
	if (n == 1 && ev[0].data.ptr && ev[0].data.ptr != (void *)&ep->ep->fid)
		ep->cq_sig = ev[0].data.ptr;
	/* our signal back: fi_trywait reads it */
	(void)fi_trywait(ep->fab->fabric, (struct fid *[]){ &ep->cq->fid }, 1);
}

/* The fd in cq_fd's set whose epoll data is the signal's, as
 * /proc/self/fdinfo lists the set's members, or -1. */
static int find_cq_signal_fd(struct ssw_ep *ep)
{
	char p[64], line[256];
	snprintf(p, sizeof p, "/proc/self/fdinfo/%d", ep->cq_fd);
	int f = (int)SYS_(openat, AT_FDCWD, p, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return -1;
	FILE *fp = fdopen(f, "r");
	if (!fp) {
		sys_close(f);
		return -1;
	}
	int fd = -1, t, found = 0;
	unsigned ev;
	unsigned long long data;
	while (fgets(line, sizeof line, fp))
		if (sscanf(line, "tfd: %d events: %x data: %llx", &t, &ev, &data) == 3) {
			found++;
			if ((uintptr_t)data == (uintptr_t)ep->cq_sig)
				fd = t;
		}
	fclose(fp);
	/* before the connection the set holds the signal alone */
	return found == 1 ? fd : -1;
}

/* The detached signal stays set between sleeps: it must never be among
 * the wait fds (epoll.c registers them for good, and a set watching it
 * woke an epoll server at every completion of its own sends: manyconns
 * across the veth 1.7-1.9x kernel TCP -> 0.3-0.5x).  fab_ring does its
 * job.  A switch for measuring the attached signal against it. */
#define FAB_DETACH_CQ_SIGNAL 1

static void detach_cq_signal(struct ssw_ep *ep)
{
	if (!FAB_DETACH_CQ_SIGNAL || !ep->cq_sig)
		return;
	int fd = find_cq_signal_fd(ep);
	if (fd < 0)
		return;
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	/* quiet now (learn_cq_signal took its byte back), or not the signal */
	if (sys_poll(&pf, 1, 0) != 0 || sys_epoll_ctl(ep->cq_fd, EPOLL_CTL_DEL, fd, NULL) != 0)
		return;
	ep->sig_fd = fd;
}

/* A new endpoint for `info` (a connect's, or a connection request's):
 * everything set up and the receive buffers posted, not yet connected.
 * Takes `info` on success only.  Called inside the gate. */
int fab_ep_open(struct fi_info *info, struct fab_fabric *fab, struct ssw_ep **out)
{
	struct ssw_ep *ep = calloc(1, sizeof *ep);
	if (!ep)
		return -FI_ENOMEM;
	pthread_mutex_init(&ep->mu, NULL);
	ep->pid = ssw_pid();
	ep->fab = fab;
	ep->eq_fd = ep->cq_fd = ep->sig_fd = -1;
	ep->wake_fd = ssw_fd_hide(sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	ep->info = info;
	uint64_t mm = info->domain_attr->mr_mode;
	ep->mr_local = (mm & FI_MR_LOCAL) != 0;
	ep->virt_addr = (mm & FI_MR_VIRT_ADDR) != 0;
	ep->prov_key = (mm & FI_MR_PROV_KEY) != 0;
	ep->mr_endpoint = (mm & FI_MR_ENDPOINT) != 0;
	ep->next_key = 1;
	ep->credits = FAB_RX_N;
	void *rb = NULL, *tb = NULL;
	/* page-aligned: registered memory (verbs pins pages) */
	int rc = ep->wake_fd < 0 || posix_memalign(&rb, 4096, FAB_RX_N * FAB_BUF_SIZE) ||
			 posix_memalign(&tb, 4096, FAB_TX_N * FAB_BUF_SIZE)
		 ? -FI_ENOMEM
		 : 0;
	ep->rxbuf = rb;
	ep->txbuf = tb;
	struct fi_eq_attr ea = { .size = 16, .wait_obj = FI_WAIT_FD };
	struct fi_cq_attr ca = { .size = 4 * (FAB_RX_N + FAB_TX_N) + 64,
				 .format = FI_CQ_FORMAT_DATA,
				 .wait_obj = FI_WAIT_FD };
	if (!rc)
		rc = fi_domain(fab->fabric, info, &ep->domain, NULL);
	if (!rc)
		rc = fi_eq_open(fab->fabric, &ea, &ep->eq, NULL);
	if (!rc)
		rc = fi_cq_open(ep->domain, &ca, &ep->cq, NULL);
	if (!rc)
		rc = fi_endpoint(ep->domain, info, &ep->ep, NULL);
	if (!rc)
		rc = fi_ep_bind(ep->ep, &ep->eq->fid, 0);
	if (!rc)
		rc = fi_ep_bind(ep->ep, &ep->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(ep->ep);
	if (!rc)
		rc = get_wait_fd(&ep->eq->fid, &ep->eq_fd);
	if (!rc)
		rc = get_wait_fd(&ep->cq->fid, &ep->cq_fd);
	if (!rc) {
		learn_cq_signal(ep);
		detach_cq_signal(ep);
	}
	if (!rc)
		rc = reg_buf(ep, ep->rxbuf, FAB_RX_N * FAB_BUF_SIZE, FI_RECV, &ep->rx_mr);
	if (!rc)
		rc = reg_buf(ep, ep->txbuf, FAB_TX_N * FAB_BUF_SIZE, FI_SEND, &ep->tx_mr);
	for (uint32_t i = 0; i < FAB_TX_N; i++) {
		ep->txc[i] = (struct fab_ctx){ FAB_CTX_TX, (int)i };
		ep->tx_free[ep->ntx_free++] = FAB_TX_N - 1 - i;
	}
	/* receives are posted before the connection exists: the peer may send
	 * the moment it is established (and counts on FAB_RX_N buffers) */
	for (uint32_t i = 0; !rc && i < FAB_RX_N; i++) {
		ep->rxc[i] = (struct fab_ctx){ FAB_CTX_RX, (int)i };
		rc = fab_post_recv(ep, i);
	}
	if (rc) {
		ep->info = NULL; /* the caller's still */
		fab_ep_destroy(ep, SSW_CLOSE_DETACH);
		return rc;
	}
	*out = ep;
	return 0;
}

static void rxq_push(struct ssw_ep *ep, uint32_t slot, uint32_t len, bool pack, uint32_t count)
{
	ep->rx_len[slot] = len;
	ep->rx_pack[slot] = pack;
	ep->rx_off[slot] = 0;
	ep->rx_left[slot] = count;
	ep->rxq[(ep->rxq_head + ep->rxq_n) % FAB_RX_N] = slot;
	ep->rxq_n++;
	atomic_fetch_add_explicit(&ep->rx_avail, count, memory_order_release);
}

/* Corrupt input or a transport error: this endpoint is reset, nothing else. */
static void set_broken(struct ssw_ep *ep, const char *why)
{
	if (!atomic_exchange(&ep->broken, 1))
		SSW_INFO("fabric: connection reset: %s", why);
}

static void on_recv(struct ssw_ep *ep, uint32_t slot, size_t len)
{
	const struct fab_hdr *h = (const void *)(ep->rxbuf + (size_t)slot * FAB_BUF_SIZE);
	if (len < sizeof *h || len > FAB_BUF_SIZE || h->magic != FAB_HDR_MAGIC ||
	    h->credits > FAB_RX_N - ep->credits || h->type < FAB_T_DATA || h->type > FAB_T_PACK) {
		set_broken(ep, "malformed message");
		return;
	}
	ep->credits += h->credits;
	sent_credited(ep, h->credits);
	switch (h->type) {
	case FAB_T_DATA:
	case FAB_T_PACK: {
		if (ep->hello_wait) {
			set_broken(ep, "data before the connection's private data");
			return;
		}
		uint32_t count = 1;
		if (h->type == FAB_T_PACK && fab_pack_check((const uint8_t *)(h + 1), len - sizeof *h, &count) != 0) {
			set_broken(ep, "malformed packed message");
			return;
		}
		rxq_push(ep, slot, (uint32_t)len, h->type == FAB_T_PACK, count);
		break;
	}
	case FAB_T_HELLO:
		if (!ep->hello_wait || len - sizeof *h > SSW_CONNECT_PRIV_MAX) {
			set_broken(ep, "unexpected or oversized private data");
			return;
		}
		memcpy(ep->priv, h + 1, len - sizeof *h);
		ep->priv_len = len - sizeof *h;
		ep->hello_wait = false;
		ep->unreported++;
		if (fab_post_recv(ep, slot))
			set_broken(ep, "cannot repost a receive");
		break;
	case FAB_T_CREDIT:
		/* ours again at once: the peer counts it among our returns */
		ep->unreported++;
		if (fab_post_recv(ep, slot))
			set_broken(ep, "cannot repost a receive");
		break;
	case FAB_T_CLOSE:
		atomic_store(&ep->peer_closed, 1);
		break;
	case FAB_T_RESET:
		atomic_store(&ep->peer_reset, 1);
		break;
	}
}

static void on_completion(struct ssw_ep *ep, struct fab_ctx *c, size_t len, int err)
{
	ep->ncomp++;
	if (!c)
		return;
	/* what an armed waiter may wait for: anything but the completion of a
	 * send while slots are plenty (no writer waits for those) */
	if (c->kind != FAB_CTX_TX || err || ep->ntx_free <= FAB_TX_N / 2)
		ep->comp_news = true;
	switch (c->kind) {
	case FAB_CTX_RX:
		if (err) {
			if (err != -ECANCELED)
				set_broken(ep, "receive failed");
			return;
		}
		if (c->idx >= 0 && (unsigned)c->idx < FAB_RX_N)
			on_recv(ep, (uint32_t)c->idx, len);
		return;
	case FAB_CTX_TX:
		if (atomic_load_explicit(&ep->tx_out, memory_order_relaxed))
			atomic_fetch_sub_explicit(&ep->tx_out, 1, memory_order_relaxed);
		if (ep->ntx_free < FAB_TX_N)
			ep->tx_free[ep->ntx_free++] = (uint32_t)c->idx;
		if (err)
			set_broken(ep, "send failed");
		return;
	case FAB_CTX_RMA:
		fab_rma_complete(ep, (struct fab_rma_op *)c, err);
		return;
	}
}

/* Returns whether anything was read. */
bool fab_read_eq(struct ssw_ep *ep)
{
	bool any = false;
	if (!ep->eq)
		return false;
	for (;; any = true) {
		uint32_t ev;
		struct fi_eq_cm_entry e;
		ssize_t n = fi_eq_read(ep->eq, &ev, &e, sizeof e, 0);
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry ee = { 0 };
			if (fi_eq_readerr(ep->eq, &ee, 0) < 0)
				return any;
			if (!ep->connected) {
				/* refused or unreachable: the caller decides what it means */
				ep->conn_err = ee.err == FI_ECONNREFUSED ? -ECONNREFUSED : -(ee.err ? ee.err : EIO);
			} else {
				set_broken(ep, "connection error event");
			}
			continue;
		}
		if (n < 0)
			return any;
		if (ev == FI_CONNECTED) {
			ep->connected = true;
		} else if (ev == FI_SHUTDOWN) {
			/* the peer's process ended the connection without a word of
			 * ours (it died, or exited without closing): as a kernel FIN */
			ep->shutdown_seen = true;
			if (!ep->connected)
				ep->conn_err = -ECONNREFUSED;
		}
	}
}

void fab_progress(struct ssw_ep *ep)
{
	fab_progress_cq(ep);
	/* the EQ after, so that its shutdown finds the data before it reaped;
	 * once more the CQ, for what arrived in between */
	if (fab_read_eq(ep))
		fab_progress_cq(ep);
	fab_progress_end(ep);
}

void fab_progress_end(struct ssw_ep *ep)
{
	if (ep->bl_n)
		fab_flush_backlog(ep);
	if (ep->shutdown_seen && !atomic_load(&ep->peer_reset) && !atomic_load(&ep->peer_closed)) {
		/* the connection ended without the peer's close message: its
		 * process died.  Kernel TCP resets when it died with our data
		 * unread.  Data messages not credited back were unread, or read
		 * and not yet announced (a reader returns credits in batches):
		 * a reset either way (the SPI allows it for a peer that read
		 * everything; an orderly end for one that did not would hide
		 * the loss).  Unread control messages alone end in order. */
		if (fab_data_uncredited(ep))
			atomic_store(&ep->peer_reset, 1);
		else
			atomic_store(&ep->peer_closed, 1);
	}
	if (ep->all && (atomic_load(&ep->broken) || ep->shutdown_seen))
		fab_rma_fail_all(ep);
}

/* Completions only: the fast path of a receive (the EQ, which only says
 * a connection came or went, is read by fab_progress: before a sleep, and
 * when the peer's state is asked). */
void fab_progress_cq(struct ssw_ep *ep)
{
	if (!ep->ep)
		return;
	struct fi_cq_data_entry c[16];
	bool drained = false;
	for (int round = 0; round < 8; round++) {
		ssize_t n = fi_cq_read(ep->cq, c, 16);
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry ee = { 0 };
			if (fi_cq_readerr(ep->cq, &ee, 0) > 0)
				on_completion(ep, ee.op_context, 0, ee.err == FI_ECANCELED ? -ECANCELED : -ECONNRESET);
			continue;
		}
		if (n <= 0) {
			drained = n == -FI_EAGAIN;
			break;
		}
		for (ssize_t i = 0; i < n; i++)
			on_completion(ep, c[i].op_context, c[i].len, 0);
		if (n < 16) {
			drained = true;
			break;
		}
	}
	/* rx_ready then takes the socket's silence as read (fab_msg.c) */
	atomic_store_explicit(&ep->quiet_ns, drained ? ssw_now_ns() : 0, memory_order_relaxed);
	if (ep->comp_news) {
		ep->comp_news = false;
		fab_ring(ep);
	}
}

/* The wake-up the CQ's signal gave before it was detached: a waiter armed
 * on this endpoint sleeps on its socket, which the completions just read
 * (by another thread, the provider's, a send's) no longer show.  Written
 * before `woken` is set (see fab_wake_ack). */
void fab_ring(struct ssw_ep *ep)
{
	if (atomic_load(&ep->armed) <= 0 || ep->wake_fd < 0 || atomic_load(&ep->woken))
		return;
	uint64_t one = 1;
	(void)!sys_write(ep->wake_fd, &one, sizeof one);
	atomic_store(&ep->woken, true);
}

/* Post the message in tx slot `slot` (its header written, `len` bytes in
 * all); its credits field gets what we have to announce now.  0, -EAGAIN
 * (the provider's queue is full: the slot stays ours), -ECONNRESET. */
static int post_slot(struct ssw_ep *ep, uint32_t slot, size_t len)
{
	uint8_t *b = ep->txbuf + (size_t)slot * FAB_BUF_SIZE;
	struct fab_hdr *h = (void *)b;
	h->credits = ep->unreported;
	void *desc = ep->tx_mr ? fi_mr_desc(ep->tx_mr) : NULL;
	/* small ones are injected: the buffer is ours again at once, and no
	 * completion is written (for tcp: two system calls fewer a message);
	 * the close and the reset are waited for (drain_tx) */
	bool inject = len <= ep->info->tx_attr->inject_size && h->type != FAB_T_CLOSE && h->type != FAB_T_RESET;
	ssize_t rc = -FI_EAGAIN;
	for (int tries = 0; tries < 64 && rc == -FI_EAGAIN; tries++) {
		rc = inject ? fi_inject(ep->ep, b, len, 0) : fi_send(ep->ep, b, len, desc, 0, &ep->txc[slot]);
		if (rc == -FI_EAGAIN)
			fab_progress_cq(ep);
	}
	if (rc == -FI_EAGAIN)
		return -EAGAIN;
	if (rc) {
		set_broken(ep, "send refused");
		return -ECONNRESET;
	}
	if (inject)
		ep->tx_free[ep->ntx_free++] = slot;
	else
		atomic_fetch_add_explicit(&ep->tx_out, 1, memory_order_relaxed);
	ep->unreported = 0;
	ep->credits--;
	if (ep->sent_n < FAB_RX_N)
		ep->sent_data[(ep->sent_head + ep->sent_n++) % FAB_RX_N] = ep->tx_data[slot];
	/* libfabric completes queued sends inside a send, into the CQ: a
	 * writer armed for room (slots short) is rung to read them itself.
	 * Not read here: taking the peer's messages in the middle of a send
	 * or a backlog's flush left both ends of a duplex stream at their
	 * last credit with their returns unsent (bench --load duplex hung in
	 * 4 runs of 10) */
	if (atomic_load(&ep->armed) > 0 && atomic_load_explicit(&ep->tx_out, memory_order_relaxed) &&
	    ep->ntx_free <= FAB_TX_N / 2)
		fab_ring(ep);
	return 0;
}

/* The peer credited back `n` buffers: the oldest messages we sent. */
static void sent_credited(struct ssw_ep *ep, uint32_t n)
{
	for (; n && ep->sent_n; n--, ep->sent_n--)
		ep->sent_head = (ep->sent_head + 1) % FAB_RX_N;
}

bool fab_data_uncredited(const struct ssw_ep *ep)
{
	for (unsigned i = 0; i < ep->sent_n; i++)
		if (ep->sent_data[(ep->sent_head + i) % FAB_RX_N])
			return true;
	return false;
}

/* Messages the peer had no buffer for yet, in order, as credits allow
 * (called locked, after every reading of completions). */
void fab_flush_backlog(struct ssw_ep *ep)
{
	while (ep->bl_n && ep->credits > FAB_DATA_RESERVE && !atomic_load(&ep->broken)) {
		uint32_t slot = ep->bl[ep->bl_head];
		int rc = post_slot(ep, slot, ep->bl_len[slot]);
		if (rc == -EAGAIN)
			return;
		ep->bl_head = (ep->bl_head + 1) % FAB_TX_N;
		ep->bl_n--;
		if (rc) {
			ep->tx_free[ep->ntx_free++] = slot;
			return;
		}
	}
}

/* A message that must wait for the peer's credits joins the backlog's
 * last slot when that is a pack with room: one buffer of the peer's, and
 * one send, for many small messages (a stream of small writes to a reader
 * that fell behind).  Order is kept: nothing leaves before the backlog. */
static bool pack_onto_backlog(struct ssw_ep *ep, const struct iovec *iov, int iovcnt, size_t plen)
{
	uint32_t t = ep->bl[(ep->bl_head + ep->bl_n - 1) % FAB_TX_N];
	uint8_t *b = ep->txbuf + (size_t)t * FAB_BUF_SIZE;
	if (((struct fab_hdr *)b)->type != FAB_T_PACK || plen == 0 ||
	    (size_t)ep->bl_len[t] + FAB_PACK_REC + plen > FAB_BUF_SIZE)
		return false;
	size_t off = ep->bl_len[t];
	uint32_t r = (uint32_t)plen;
	memcpy(b + off, &r, sizeof r);
	off += sizeof r;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(b + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	ep->bl_len[t] = (uint32_t)off;
	if (!ep->sending_ctl)
		ep->tx_data[t] = 1;
	return true;
}

/* Send one message of `type` (called locked).  Credits: data leaves
 * FAB_DATA_RESERVE of the peer's buffers, a credit return
 * FAB_CREDIT_RESERVE, the close or reset may take the last.  Data the peer
 * has no buffer for yet waits in our tx slots (the backlog), as a kernel
 * socket's send buffer holds it, and leaves as its credits come back: by
 * the caller's next call, or by the provider's thread (fab_listen.c), so
 * that a sender busy elsewhere still delivers (kernel TCP does). */
int fab_send_locked(struct ssw_ep *ep, int type, const struct iovec *iov, int iovcnt)
{
	if (atomic_load(&ep->broken) || atomic_load(&ep->peer_reset))
		return -ECONNRESET;
	/* the peer's endpoint is gone (its close message, or the connection's
	 * end): nothing it will ever read, and no credits will come back */
	if (atomic_load(&ep->peer_closed))
		return -EPIPE;
	size_t len = sizeof(struct fab_hdr);
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (len > FAB_BUF_SIZE)
		return -EMSGSIZE;
	uint32_t keep = type == FAB_T_DATA ? FAB_DATA_RESERVE : type == FAB_T_CREDIT ? FAB_CREDIT_RESERVE : 0;
	bool queue = type == FAB_T_DATA && (ep->bl_n || ep->credits <= keep);
	if (queue && ep->bl_n && pack_onto_backlog(ep, iov, iovcnt, len - sizeof(struct fab_hdr)))
		return 0;
	/* two slots are kept for a credit return and the close */
	unsigned slots = type == FAB_T_DATA ? FAB_TX_KEEP : 0;
	if ((!queue && ep->credits <= keep) || ep->ntx_free <= slots) {
		/* completions only (credits, tx slots): the EQ, one more system
		 * call, says only that the connection ended, which a send learns
		 * from its own failure, arm or peer_state */
		fab_progress_cq(ep);
		fab_progress_end(ep);
		if (atomic_load(&ep->broken))
			return -ECONNRESET;
		queue = type == FAB_T_DATA && (ep->bl_n || ep->credits <= keep);
		if ((!queue && ep->credits <= keep) || ep->ntx_free <= slots)
			return -EAGAIN;
	}
	uint32_t slot = ep->tx_free[--ep->ntx_free];
	ep->tx_data[slot] = type == FAB_T_DATA && !ep->sending_ctl;
	uint8_t *b = ep->txbuf + (size_t)slot * FAB_BUF_SIZE;
	struct fab_hdr *h = (void *)b;
	*h = (struct fab_hdr){ .magic = FAB_HDR_MAGIC, .type = (uint8_t)type };
	size_t off = sizeof *h;
	/* the first of the backlog's slot: a pack that later ones may join */
	if (queue && len > sizeof *h && len + FAB_PACK_REC <= FAB_BUF_SIZE) {
		uint32_t r = (uint32_t)(len - sizeof *h);
		h->type = FAB_T_PACK;
		memcpy(b + off, &r, sizeof r);
		off += sizeof r;
	}
	for (int i = 0; i < iovcnt; i++) {
		memcpy(b + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	if (queue) {
		ep->bl_len[slot] = (uint32_t)off;
		ep->bl[(ep->bl_head + ep->bl_n) % FAB_TX_N] = slot;
		ep->bl_n++;
		fab_watch(ep);
		return 0;
	}
	int rc = post_slot(ep, slot, off);
	if (rc)
		ep->tx_free[ep->ntx_free++] = slot;
	return rc;
}

static void discard_backlog(struct ssw_ep *ep)
{
	while (ep->bl_n) {
		ep->tx_free[ep->ntx_free++] = ep->bl[ep->bl_head];
		ep->bl_head = (ep->bl_head + 1) % FAB_TX_N;
		ep->bl_n--;
	}
}

/* Wait (bounded) for our sends to leave: a close must not cut off the
 * messages before it. */
static void drain_tx(struct ssw_ep *ep, int ms)
{
	uint64_t end = ssw_now_ns() + (uint64_t)ms * 1000000ull;
	while ((ep->ntx_free < FAB_TX_N || ep->bl_n) && !atomic_load(&ep->broken) && !ep->shutdown_seen &&
	       !atomic_load(&ep->peer_closed) && ssw_now_ns() < end) {
		fab_progress(ep);
		if (ep->ntx_free < FAB_TX_N || ep->bl_n) {
			struct pollfd p[2] = { { .fd = ep->cq_fd, .events = POLLIN }, { .fd = ep->sig_fd, .events = POLLIN } };
			if (fi_trywait(ep->fab->fabric, (struct fid *[]){ &ep->cq->fid }, 1) == 0)
				sys_poll(p, ep->sig_fd >= 0 ? 2 : 1, 10);
		}
	}
}

/* Free everything (called inside the gate).  DETACH: another process (a
 * fork) still uses the connection: nothing goes on the wire, and the
 * objects are unshared first (fab_fork.c), so that closing our copies
 * leaves the other process's connection as it is. */
/* Is the connection still one the peer reads? */
static bool peer_listens(struct ssw_ep *ep)
{
	return ep->ep && ep->connected && !ep->shutdown_seen && !atomic_load(&ep->broken) &&
	       !atomic_load(&ep->peer_closed) && !atomic_load(&ep->peer_reset);
}

/* Messages that arrive after our close are dropped, their buffers posted
 * again (the peer must not stall on us while we linger). */
static void drop_rx(struct ssw_ep *ep)
{
	while (ep->rxq_n) {
		uint32_t slot = ep->rxq[ep->rxq_head];
		ep->rxq_head = (ep->rxq_head + 1) % FAB_RX_N;
		ep->rxq_n--;
		if (fab_post_recv(ep, slot) == 0)
			ep->unreported++;
	}
	atomic_store(&ep->rx_avail, 0);
}

/* An orderly close (called inside the gate, nobody else using the
 * endpoint).  As a kernel socket's close, it returns at once and what was
 * sent still arrives: the backlog, then our close message, leave from the
 * provider's thread, which frees the endpoint once the peer has closed too
 * (TCP's FIN_WAIT: closing with the peer's bytes unread would reset the
 * connection and lose ours), or after FAB_LINGER_NS.  true when the
 * endpoint was handed over, false when there is nothing to wait for. */
bool fab_ep_linger(struct ssw_ep *ep)
{
	pthread_mutex_lock(&ep->mu);
	fab_progress(ep);
	drop_rx(ep);
	bool handed = peer_listens(ep);
	if (handed) {
		if (!ep->bl_n)
			ep->close_sent = fab_send_locked(ep, FAB_T_CLOSE, NULL, 0) == 0;
		ep->linger_end = ssw_now_ns() + FAB_LINGER_NS;
		ep->lingering = true;
	}
	pthread_mutex_unlock(&ep->mu);
	return handed && fab_linger(ep) == 0;
}

/* The provider's thread, for a lingering endpoint (locked): true when it
 * can go (fab_ep_destroy with FAB_CLOSE_FINAL). */
bool fab_linger_step(struct ssw_ep *ep)
{
	fab_progress(ep);
	drop_rx(ep);
	if (!peer_listens(ep) || ssw_now_ns() > ep->linger_end)
		return true;
	if (!ep->close_sent && !ep->bl_n)
		ep->close_sent = fab_send_locked(ep, FAB_T_CLOSE, NULL, 0) == 0;
	return false; /* until the peer closes (shutdown_seen, peer_closed) */
}

void fab_ep_destroy(struct ssw_ep *ep, int how)
{
	if (!ep)
		return;
	if (how != FAB_CLOSE_FINAL)
		fab_unwatch(ep);
	if (how == SSW_CLOSE_DETACH) {
		fab_unshare_fds(ep->cq_fd);
		fab_unshare_fds(ep->eq_fd);
	} else if (ep->ep && ep->connected && !ep->shutdown_seen && !atomic_load(&ep->broken)) {
		/* a peer that closed (or reset) reads nothing more from us */
		if (how != FAB_CLOSE_FINAL && !atomic_load(&ep->peer_closed) && !atomic_load(&ep->peer_reset)) {
			if (how == SSW_CLOSE_ORDERLY)
				drain_tx(ep, 2000); /* the backlog first, as the kernel sends buffered data before its FIN */
			else
				discard_backlog(ep); /* a reset drops what was not sent */
			fab_send_locked(ep, how == SSW_CLOSE_ORDERLY ? FAB_T_CLOSE : FAB_T_RESET, NULL, 0);
			drain_tx(ep, 1000);
		}
		if (how == FAB_CLOSE_FINAL)
			drain_tx(ep, 100); /* our close message, when the peer went first */
		fi_shutdown(ep->ep, 0);
	}
	if (ep->ep)
		fi_close(&ep->ep->fid);
	fab_rma_release(ep); /* after the endpoint: nothing can complete any more */
	if (ep->rx_mr)
		fi_close(&ep->rx_mr->fid);
	if (ep->tx_mr)
		fi_close(&ep->tx_mr->fid);
	if (ep->cq)
		fi_close(&ep->cq->fid);
	if (ep->eq)
		fi_close(&ep->eq->fid);
	if (ep->domain)
		fi_close(&ep->domain->fid);
	if (ep->info)
		fab_freeinfo(ep->info);
	if (ep->wake_fd >= 0)
		sys_close(ep->wake_fd);
	free(ep->rxbuf);
	free(ep->txbuf);
	free(ep->regs);
	pthread_mutex_destroy(&ep->mu);
	free(ep);
}
