/* fab_ep.c — life of one fabric endpoint: its place on the shared queues
 * (fab_hub.c, fab_eq.c), registered message buffers, pre-posted receives,
 * the provider header with its credits, taking its completions, and
 * closing. */
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

/* The owner's ops (the session's): this process drives the endpoint
 * (fab_hub_claim: after a fork, the first to use it), and has the thread
 * that reads the shared event queue (a fork child has none yet). */
void fab_ep_lock(struct ssw_ep *ep)
{
	fab_thread_ensure();
	fab_gate_enter();
	pthread_mutex_lock(&ep->mu);
	if (ep->watched)
		atomic_store_explicit(&ep->app_ns, ssw_now_ns(), memory_order_relaxed);
	fab_hub_claim(ep);
}

/* As fab_ep_lock, but false at once when another thread holds the endpoint. */
bool fab_ep_trylock(struct ssw_ep *ep)
{
	fab_thread_ensure();
	fab_gate_enter();
	if (pthread_mutex_trylock(&ep->mu) != 0) {
		fab_gate_leave();
		return false;
	}
	if (ep->watched)
		atomic_store_explicit(&ep->app_ns, ssw_now_ns(), memory_order_relaxed);
	fab_hub_claim(ep);
	return true;
}

void fab_ep_unlock(struct ssw_ep *ep)
{
	pthread_mutex_unlock(&ep->mu);
	fab_gate_leave();
}


static void sent_credited(struct ssw_ep *ep, uint32_t n);

static int reg_buf(struct ssw_ep *ep, void *buf, size_t len, uint64_t access, struct fid_mr **mr)
{
	*mr = NULL;
	if (!ep->mr_local)
		return 0; /* the provider needs no descriptor for local buffers (tcp) */
	/* (the domain is shared: a key another peer could not guess) */
	int rc = fi_mr_reg(ep->domain, buf, len, access, 0, ep->prov_key ? 0 : fab_random_key(), 0, mr, NULL);
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

/* Message buffers of closed endpoints, kept for the next ones: a connect
 * and close each mapped and unmapped 3 MiB (and faulted its pages in
 * again).  A few only: a kept buffer keeps the pages its stream touched. */
#define FAB_BUF_KEEP 4
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static void *pool_rx[FAB_BUF_KEEP], *pool_tx[FAB_BUF_KEEP];
static unsigned pool_nrx, pool_ntx;

/* fork (fab_init.c): as the info cache's lock (fab_conn.c) */
void fab_ep_atfork_prepare(void) { pthread_mutex_lock(&pool_mu); }
void fab_ep_atfork_parent(void) { pthread_mutex_unlock(&pool_mu); }
void fab_ep_atfork_child(void) { pthread_mutex_init(&pool_mu, NULL); }

static void *buf_get(bool rx)
{
	void *b = NULL;
	pthread_mutex_lock(&pool_mu);
	if (rx && pool_nrx)
		b = pool_rx[--pool_nrx];
	else if (!rx && pool_ntx)
		b = pool_tx[--pool_ntx];
	pthread_mutex_unlock(&pool_mu);
	/* page-aligned: registered memory (verbs pins pages) */
	if (!b && posix_memalign(&b, 4096, (rx ? FAB_RX_N : FAB_TX_N) * FAB_BUF_SIZE))
		b = NULL;
	return b;
}

static void buf_put(void *b, bool rx)
{
	if (!b)
		return;
	pthread_mutex_lock(&pool_mu);
	if (rx && pool_nrx < FAB_BUF_KEEP) {
		pool_rx[pool_nrx++] = b;
		b = NULL;
	} else if (!rx && pool_ntx < FAB_BUF_KEEP) {
		pool_tx[pool_ntx++] = b;
		b = NULL;
	}
	pthread_mutex_unlock(&pool_mu);
	free(b);
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
	atomic_store(&ep->sock_fd, -1);
	ep->conn_fd = -1;
	ep->wake_fd = ssw_fd_hide(sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	ep->info = info;
	uint64_t mm = info->domain_attr->mr_mode;
	ep->mr_local = (mm & FI_MR_LOCAL) != 0;
	ep->virt_addr = (mm & FI_MR_VIRT_ADDR) != 0;
	ep->prov_key = (mm & FI_MR_PROV_KEY) != 0;
	ep->mr_endpoint = (mm & FI_MR_ENDPOINT) != 0;
	ep->credits = FAB_RX_N;
	ep->rxbuf = buf_get(true);
	ep->txbuf = buf_get(false);
	int rc = ep->wake_fd < 0 || !ep->rxbuf || !ep->txbuf ? -FI_ENOMEM : 0;
	for (uint32_t i = 0; i < FAB_TX_N; i++) {
		ep->txc[i] = (struct fab_ctx){ .kind = FAB_CTX_TX, .idx = (int)i, .ep = ep };
		ep->tx_free[ep->ntx_free++] = FAB_TX_N - 1 - i;
	}
	for (uint32_t i = 0; i < FAB_RX_N; i++)
		ep->rxc[i] = (struct fab_ctx){ .kind = FAB_CTX_RX, .idx = (int)i, .ep = ep };
	/* the domain and the queues are the process's (fab_hub.c, fab_eq.c);
	 * the endpoint's context is itself: the queues' readers find it so */
	if (!rc)
		rc = fab_eq_open(fab);
	if (!rc)
		rc = fab_hub_join(ep, info, fab);
	if (!rc)
		rc = fi_endpoint(ep->domain, info, &ep->ep, ep);
	if (!rc)
		rc = fi_ep_bind(ep->ep, &fab->eq->fid, 0);
	if (!rc)
		rc = fi_ep_bind(ep->ep, &ep->hub->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!rc)
		rc = fi_enable(ep->ep);
	if (!rc)
		rc = reg_buf(ep, ep->rxbuf, FAB_RX_N * FAB_BUF_SIZE, FI_RECV, &ep->rx_mr);
	if (!rc)
		rc = reg_buf(ep, ep->txbuf, FAB_TX_N * FAB_BUF_SIZE, FI_SEND, &ep->tx_mr);
	/* receives are posted before the connection exists: the peer may send
	 * the moment it is established (and counts on FAB_RX_N buffers) */
	for (uint32_t i = 0; !rc && i < FAB_RX_N; i++)
		rc = fab_post_recv(ep, i);
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

/* The shared event queue read (fab_eq.c), and what it holds for us taken:
 * whether there was anything. */
bool fab_read_eq(struct ssw_ep *ep)
{
	if (!ep->fab)
		return false;
	fab_eq_poll(ep->fab);
	return fab_eq_fold(ep);
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

/* Completions only: the fast path of a receive (the event queue, which
 * only says a connection came or went, is read by fab_progress: before a
 * sleep, and when the peer's state is asked).  quiet_self: an arm's last
 * look, which finds our news itself (rings only another waiter). */
static void progress_cq(struct ssw_ep *ep, bool quiet_self)
{
	if (!ep->ep || !ep->hub)
		return;
	bool drained;
	struct fab_ctx *c = fab_hub_read(ep, quiet_self, &drained);
	while (c) {
		struct fab_ctx *next = c->inext; /* before: a receive reposted may complete again */
		on_completion(ep, c, c->ilen, c->ierr);
		c = next;
	}
	/* rx_ready then takes the socket's silence as read (fab_msg.c) */
	atomic_store_explicit(&ep->quiet_ns, drained ? ssw_now_ns() : 0, memory_order_relaxed);
	if (ep->comp_news) {
		ep->comp_news = false;
		if (!quiet_self)
			fab_ring(ep);
	}
}

void fab_progress_cq(struct ssw_ep *ep) { progress_cq(ep, false); }
void fab_progress_cq_quiet(struct ssw_ep *ep) { progress_cq(ep, true); }

/* The wake-up the CQ's signal gave before it was detached: a waiter armed
 * on this endpoint sleeps on its socket, which the completions just read
 * (by another thread, the provider's, a send's, another endpoint's reader
 * of the hub) no longer show.  Written before `woken` is set (see
 * fab_wake_ack). */
void fab_ring(struct ssw_ep *ep)
{
	if (atomic_load(&ep->armed) <= 0)
		return;
	fab_kick(ep);
}

void fab_kick(struct ssw_ep *ep)
{
	if (ep->wake_fd < 0 || atomic_load(&ep->woken))
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
	if (inject) {
		ep->tx_free[ep->ntx_free++] = slot;
	} else {
		atomic_fetch_add_explicit(&ep->tx_out, 1, memory_order_relaxed);
		/* what the socket did not take leaves without us (fab_hub.c) */
		fab_hub_watch_room(ep);
	}
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
	if (ep->hold_ns) {
		/* held (TCP_CORK, MSG_MORE): until released, or the kernel's
		 * ceiling (the owner's next call or the provider's thread, which
		 * watches an endpoint with a backlog, finds it over) */
		if (ssw_now_ns() - ep->hold_ns < (uint64_t)SSW_HOLD_MS * 1000000u)
			return;
		ep->hold_ns = 0;
	}
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

/* The SPI's send_reserve: a tx slot, the message written in place after
 * the provider's header (and, when it fits, a pack's record length: a held
 * message that others join, or one that waits for credits, is a pack). */
int fab_reserve_locked(struct ssw_ep *ep, size_t len, void **buf)
{
	if (atomic_load(&ep->broken) || atomic_load(&ep->peer_reset))
		return -ECONNRESET;
	if (atomic_load(&ep->peer_closed))
		return -EPIPE;
	if (len == 0 || len > FAB_MSG_MAX)
		return -EMSGSIZE;
	if (!ep->rsv) {
		if (ep->ntx_free <= FAB_TX_KEEP) {
			fab_progress_cq(ep);
			fab_progress_end(ep);
			if (atomic_load(&ep->broken))
				return -ECONNRESET;
			if (ep->ntx_free <= FAB_TX_KEEP)
				return -EAGAIN;
		}
		ep->rsv_slot = ep->tx_free[--ep->ntx_free];
		ep->rsv = true;
	}
	ep->rsv_len = len;
	ep->rsv_pack = sizeof(struct fab_hdr) + FAB_PACK_REC + len <= FAB_BUF_SIZE;
	*buf = ep->txbuf + (size_t)ep->rsv_slot * FAB_BUF_SIZE + sizeof(struct fab_hdr) +
	       (ep->rsv_pack ? FAB_PACK_REC : 0);
	return 0;
}

void fab_unreserve_locked(struct ssw_ep *ep)
{
	if (ep->rsv) {
		ep->tx_free[ep->ntx_free++] = ep->rsv_slot;
		ep->rsv = false;
	}
}

void fab_unhold_locked(struct ssw_ep *ep)
{
	if (!ep->hold_ns)
		return;
	ep->hold_ns = 0;
	fab_flush_backlog(ep);
}

/* The SPI's send_commit.  The message leaves as fab_send_locked's would
 * (the backlog first, the peer's credits), or, held, waits in the backlog
 * (joining the last held pack when it fits: many small corked writes, one
 * message).  Never -EAGAIN: what a producer wrote in place is gone from it
 * (a pipe), and the slot is ours already. */
int fab_commit_locked(struct ssw_ep *ep, size_t len, bool hold)
{
	if (!ep->rsv)
		return -EINVAL;
	uint32_t slot = ep->rsv_slot;
	size_t pre = sizeof(struct fab_hdr) + (ep->rsv_pack ? FAB_PACK_REC : 0);
	if (len == 0 || len > ep->rsv_len || pre + len > FAB_BUF_SIZE)
		return -EINVAL; /* as shm: longer than what was reserved */
	ep->rsv = false;
	int rc = 0;
	if (atomic_load(&ep->broken) || atomic_load(&ep->peer_reset))
		rc = -ECONNRESET;
	else if (atomic_load(&ep->peer_closed))
		rc = -EPIPE;
	if (rc) {
		ep->tx_free[ep->ntx_free++] = slot;
		return rc;
	}
	if (!hold)
		ep->hold_ns = 0;
	uint8_t *b = ep->txbuf + (size_t)slot * FAB_BUF_SIZE;
	bool queue = hold || ep->bl_n || ep->credits <= FAB_DATA_RESERVE;
	if (queue && ep->bl_n && pack_onto_backlog(ep, &(struct iovec){ b + pre, len }, 1, len)) {
		ep->tx_free[ep->ntx_free++] = slot;
	} else {
		struct fab_hdr *h = (void *)b;
		*h = (struct fab_hdr){ .magic = FAB_HDR_MAGIC, .type = ep->rsv_pack ? FAB_T_PACK : FAB_T_DATA };
		if (ep->rsv_pack) {
			uint32_t r = (uint32_t)len;
			memcpy(b + sizeof *h, &r, sizeof r);
		}
		ep->tx_data[slot] = 1;
		if (!queue) {
			rc = post_slot(ep, slot, pre + len);
			if (rc && rc != -EAGAIN) {
				ep->tx_free[ep->ntx_free++] = slot;
				return rc;
			}
			queue = rc == -EAGAIN; /* the provider's queue is full: it leaves later */
		}
		if (queue) {
			ep->bl_len[slot] = (uint32_t)(pre + len);
			ep->bl[(ep->bl_head + ep->bl_n) % FAB_TX_N] = slot;
			ep->bl_n++;
			fab_watch(ep);
		}
	}
	if (hold && !ep->hold_ns)
		ep->hold_ns = ssw_now_ns() | 1;
	else if (!hold && ep->bl_n)
		fab_flush_backlog(ep);
	return 0;
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
			/* its socket taking more, the peer's credits, or another
			 * reader of the hub ringing (we count as armed meanwhile) */
			int fd = fab_data_fd(ep);
			struct pollfd p[2] = { { .fd = ep->wake_fd, .events = POLLIN },
					       { .fd = fd, .events = POLLIN | (atomic_load(&ep->want_out) ? POLLOUT : 0) } };
			atomic_fetch_add(&ep->armed, 1);
			if (!atomic_load(&ep->in_n))
				sys_poll(p, fd >= 0 ? 2 : 1, 10);
			atomic_fetch_sub(&ep->armed, 1);
			if (atomic_exchange(&ep->woken, false)) {
				uint64_t v;
				(void)!sys_read(ep->wake_fd, &v, sizeof v);
			}
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
	fab_unreserve_locked(ep);
	ep->hold_ns = 0; /* corked data goes before the close, as the kernel's */
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
	/* DETACH: after a fork the hub's and the queue's sets are this
	 * process's own (fab_hub.c, fab_eq.c): closing touches nothing the
	 * other process uses, and a socket closed here is not shut down */
	if (how == SSW_CLOSE_DETACH) {
	} else if (ep->ep && ep->connected && !ep->shutdown_seen && !atomic_load(&ep->broken)) {
		/* a peer that closed (or reset) reads nothing more from us */
		if (how != FAB_CLOSE_FINAL && !atomic_load(&ep->peer_closed) && !atomic_load(&ep->peer_reset)) {
			fab_unreserve_locked(ep);
			ep->hold_ns = 0;
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
	fab_ep_release(ep, fab_hub_close_ep(ep, how == SSW_CLOSE_DETACH));
}

void fab_ep_release(struct ssw_ep *ep, struct fab_hub *left)
{
	fab_rma_release(ep); /* after the endpoint: nothing can complete any more */
	if (ep->rx_mr)
		fi_close(&ep->rx_mr->fid);
	if (ep->tx_mr)
		fi_close(&ep->tx_mr->fid);
	if (ep->info)
		fab_freeinfo(ep->info);
	if (ep->wake_fd >= 0)
		sys_close(ep->wake_fd);
	if (ep->conn_fd >= 0)
		sys_close(ep->conn_fd);
	buf_put(ep->rxbuf, true);
	buf_put(ep->txbuf, false);
	free(ep->regs);
	pthread_mutex_destroy(&ep->mu);
	/* last: once kept, another thread's close may free it (CI's ASan saw
	 * free(ep->regs) read a struct freed by the hub's close) */
	fab_hub_let_go(left, ep);
}
