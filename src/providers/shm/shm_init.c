/* shm_init.c — the shm provider object: same-host transport over shared memory. */
#include "providers/shm/shm_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int shm_init(void)
{
	const char *e = getenv("SOCKSWITCH_CMA");
	shm_cma_disabled = e && !strcmp(e, "0");
	return 0;
}

static size_t shm_max_msg(struct ssw_ep *ep) { return ep->tx.size / 4 - SHM_REC_HDR; }

static const struct ssw_msg_ops shm_msg_ops = {
	.size = sizeof(struct ssw_msg_ops),
	.max_msg = shm_max_msg,
	.send = shm_ring_send,
	.recv_peek = shm_ring_peek,
	.recv_done = shm_ring_done,
};

static int shm_poll_cq(struct ssw_ep *ep, struct ssw_completion *c, int n)
{
	(void)ep, (void)c, (void)n;
	return 0; /* CMA transfers complete synchronously */
}

static int shm_wait_fds(struct ssw_ep *ep, struct pollfd *pfd, int n)
{
	int k = 0;
	if (k < n && !ep->connecting && ep->my_efd >= 0)
		pfd[k++] = (struct pollfd){ .fd = ep->my_efd, .events = POLLIN };
	if (k < n && ep->ctl_fd >= 0 && !ep->peer_gone)
		pfd[k++] = (struct pollfd){ .fd = ep->ctl_fd, .events = POLLIN };
	return k;
}

static void shm_wake_ack(struct ssw_ep *ep)
{
	uint64_t v;
	atomic_store_explicit(&ep->rx.ctl->armed, 0, memory_order_relaxed);
	if (sys_read(ep->my_efd, &v, sizeof v) == sizeof v)
		return;
	/* Not our doorbell: maybe the rendezvous connection hung up. */
	char c;
	struct iovec iov = { &c, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (!ep->connecting && ep->ctl_fd >= 0 && sys_recvmsg(ep->ctl_fd, &mh, MSG_DONTWAIT | MSG_PEEK) == 0)
		ep->peer_gone = 1;
}

static int shm_rx_ready(struct ssw_ep *ep)
{
	const struct shm_ring *r = &ep->rx;
	uint64_t seen = __atomic_load_n(&r->pos, __ATOMIC_RELAXED) + __atomic_load_n(&r->cur, __ATOMIC_RELAXED);
	return atomic_load_explicit(&r->ctl->tail, memory_order_acquire) != seen ||
	       atomic_load_explicit(&r->ctl->closed, memory_order_relaxed) != SHM_OPEN;
}

static const struct ssw_progress_ops shm_progress_ops = {
	.size = sizeof(struct ssw_progress_ops),
	.poll_cq = shm_poll_cq,
	.rx_ready = shm_rx_ready,
	.arm = shm_ring_arm,
	.wait_fds = shm_wait_fds,
	.wake_ack = shm_wake_ack,
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
