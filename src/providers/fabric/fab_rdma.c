/* fab_rdma.c — memory registration and one-sided transfers of the fabric
 * provider: fi_mr_reg with remote keys, descriptors checked before use,
 * fi_readmsg/fi_writemsg completing through poll_cq in any order. */
#include "providers/fabric/fab_priv.h"

#include "common/memcheck.h"
#include "common/sys.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define FAB_MAX_REGS 4096u
#define FAB_SYNC_WAIT_NS (10000ull * 1000000ull)

uint64_t fab_rdesc_check(const struct fab_rdesc *d)
{
	uint64_t v[5] = { ((uint64_t)d->magic << 32) | d->id, d->base, d->len, d->key, 0x9e3779b97f4a7c15ull };
	uint64_t h = 0xcbf29ce484222325ull;
	for (int i = 0; i < 5; i++) {
		h ^= v[i];
		h *= 0x100000001b3ull;
		h ^= h >> 29;
	}
	return h;
}

/* The peer's descriptor, checked: NULL when it does not validate. */
static const struct fab_rdesc *rdesc_ok(const struct ssw_rdma_desc *desc, uint64_t offset, size_t len,
					struct fab_rdesc *out)
{
	if (!desc || desc->len != sizeof *out)
		return NULL;
	memcpy(out, desc->data, sizeof *out);
	if (out->magic != FAB_RDESC_MAGIC || out->check != fab_rdesc_check(out))
		return NULL;
	if (offset > out->len || len > out->len - offset || out->base + offset < out->base)
		return NULL;
	return out;
}

static int reg_mr(struct ssw_ep *ep, void *addr, size_t len, uint64_t access, struct fid_mr **mr)
{
	/* the domain is shared with other peers' connections: a key they
	 * could not guess (fab_hub.c) */
	uint64_t key = ep->prov_key ? 0 : fab_random_key();
	int rc = fi_mr_reg(ep->domain, addr, len, access, 0, key, 0, mr, NULL);
	if (rc == 0 && ep->mr_endpoint) {
		rc = fi_mr_bind(*mr, &ep->ep->fid, 0);
		if (rc == 0)
			rc = fi_mr_enable(*mr);
		if (rc) {
			fi_close(&(*mr)->fid);
			*mr = NULL;
		}
	}
	return rc;
}

/* WSPRegisterMemory: the domain's cache (fab_mrc.c).  (The session does
 * not call it: rdma_read and rdma_write register their local side
 * themselves, through the same cache.) */
static int fab_register_memory(struct ssw_ep *ep, void *addr, size_t len, struct ssw_mr *mr)
{
	*mr = (struct ssw_mr){ .addr = addr, .len = len };
	struct ssw_reg *r;
	if (!ep->mrc || fab_mrc_get(ep->mrc, addr, len, &r) < 0)
		return -ENOBUFS;
	mr->key = fi_mr_key(fab_mrc_mr(r));
	mr->prov = r;
	return 0;
}

static void fab_deregister_memory(struct ssw_ep *ep, struct ssw_mr *mr)
{
	fab_mrc_put(ep->mrc, mr->prov);
	mr->prov = NULL;
}

/* An exposure's own registration and what it held (fab_reg). */
static void reg_release(struct ssw_ep *ep, struct fab_reg *r)
{
	fi_close(&r->mr->fid);
	r->mr = NULL;
	fab_mrc_put(ep->mrc, r->pin);
	r->pin = NULL;
	free(r->shadow);
	r->shadow = NULL;
}

/* WSPRegisterRdmaMemory: the pages stay registered in the domain's cache
 * (when it caches), the peer's access is a registration of its own with a
 * fresh key, which deregistration closes (fab_mrc.c says why). */
static int fab_register_rdma_memory(struct ssw_ep *ep, void *addr, size_t len, uint32_t access,
				    struct ssw_rdma_desc *desc)
{
	uint64_t acc = ((access & SSW_CAP_RDMA_READ) ? FI_REMOTE_READ : 0) |
		       ((access & SSW_CAP_RDMA_WRITE) ? FI_REMOTE_WRITE : 0);
	if (!acc || !len)
		return -EINVAL;
	struct ssw_reg *pin = NULL;
	void *shadow = NULL, *expose = addr;
	if (fab_mrc_caching(ep->mrc) && fab_mrc_get(ep->mrc, addr, len, &pin) < 0)
		return -ENOBUFS;
	if (pin && fab_mrc_pinning(ep->mrc) && acc == FI_REMOTE_READ) {
		/* tests: the peer reads what the pinned pages hold */
		shadow = malloc(len);
		if (!shadow || fab_mrc_pin_read(pin, addr, shadow, len) < 0) {
			free(shadow);
			fab_mrc_put(ep->mrc, pin);
			return -ENOBUFS;
		}
		expose = shadow;
	}
	fab_ep_lock(ep);
	uint32_t id = 0;
	while (id < ep->nregs && ep->regs[id].mr)
		id++;
	if (id == ep->nregs) {
		uint32_t n = ep->nregs ? ep->nregs * 2 : 16;
		struct fab_reg *r = n <= FAB_MAX_REGS ? realloc(ep->regs, n * sizeof *r) : NULL;
		if (!r) {
			fab_ep_unlock(ep);
			free(shadow);
			fab_mrc_put(ep->mrc, pin);
			return -ENOBUFS;
		}
		memset(r + ep->nregs, 0, (n - ep->nregs) * sizeof *r);
		ep->regs = r;
		ep->nregs = n;
	}
	struct fid_mr *mr;
	int rc = reg_mr(ep, expose, len, acc, &mr);
	if (rc) {
		fab_ep_unlock(ep);
		free(shadow);
		fab_mrc_put(ep->mrc, pin);
		return -ENOBUFS;
	}
	struct fab_rdesc d = { .magic = FAB_RDESC_MAGIC,
			       .id = id,
			       .base = ep->virt_addr ? (uint64_t)(uintptr_t)expose : 0,
			       .len = len,
			       .key = fi_mr_key(mr) };
	d.check = fab_rdesc_check(&d);
	ep->regs[id] = (struct fab_reg){ .mr = mr, .check = d.check, .pin = pin, .shadow = shadow };
	/* the peer's reads and writes of it need our progress (tcp: the
	 * target serves them in fi_cq_read): the thread gives it while we
	 * are away */
	ep->nexposed++;
	fab_watch(ep);
	fab_ep_unlock(ep);
	memset(desc, 0, sizeof *desc);
	desc->len = sizeof d;
	memcpy(desc->data, &d, sizeof d);
	return 0;
}

static void fab_deregister_rdma_memory(struct ssw_ep *ep, const struct ssw_rdma_desc *desc)
{
	struct fab_rdesc d;
	if (desc->len != sizeof d)
		return;
	memcpy(&d, desc->data, sizeof d);
	fab_ep_lock(ep);
	if (d.id < ep->nregs && ep->regs[d.id].mr && ep->regs[d.id].check == d.check) {
		/* the key dies with it: the peer's later use fails there; the
		 * pages stay registered in the cache */
		reg_release(ep, &ep->regs[d.id]);
		ep->nexposed--;
	}
	fab_ep_unlock(ep);
}

void fab_rma_free(struct ssw_ep *ep, struct fab_rma_op *op)
{
	for (struct fab_rma_op **pp = &ep->all; *pp; pp = &(*pp)->all_next)
		if (*pp == op) {
			*pp = op->all_next;
			break;
		}
	for (int i = 0; i < op->nmr; i++)
		fab_mrc_put(ep->mrc, op->mr[i]);
	free(op);
}

/* A libfabric completion of one of the op's transfers (err: 0 or -errno). */
void fab_rma_complete(struct ssw_ep *ep, struct fab_rma_op *op, int err)
{
	if (op->done)
		return; /* failed already with its broken endpoint (fab_rma_fail_all) */
	if (err && !op->status) {
		/* a refused key or range at the peer, or the connection broke:
		 * this connection is over, no other */
		op->status = -ECONNRESET;
		atomic_store(&ep->broken, 1);
	}
	if (--op->pending > 0)
		return;
	op->done = true;
	for (int i = 0; i < op->nmr; i++)
		fab_mrc_put(ep->mrc, op->mr[i]);
	op->nmr = 0;
	if (op->sync)
		return;
	op->next = NULL;
	if (ep->done_tail)
		ep->done_tail->next = op;
	else
		ep->done_head = op;
	ep->done_tail = op;
}

/* The endpoint broke: transfers still in flight will not all complete
 * (the tcp provider drops a connection whose peer refused a key, without
 * completing the rest); each fails now, once.  Their memory stays until the
 * endpoint's close, in case libfabric still reports them. */
void fab_rma_fail_all(struct ssw_ep *ep)
{
	for (struct fab_rma_op *op = ep->all; op; op = op->all_next)
		if (!op->done && op->pending > 0) {
			op->kept = true;
			op->pending = 1;
			fab_rma_complete(ep, op, -ECONNRESET);
		}
}

/* Closing: every op and registration goes (after the endpoint's close). */
void fab_rma_release(struct ssw_ep *ep)
{
	while (ep->all)
		fab_rma_free(ep, ep->all);
	ep->done_head = ep->done_tail = NULL;
	for (uint32_t i = 0; i < ep->nregs; i++)
		if (ep->regs[i].mr)
			reg_release(ep, &ep->regs[i]);
	/* the endpoint's hold of its domain's cache: the last one flushes it */
	fab_mrc_release(ep->mrc);
	ep->mrc = NULL;
}

/* Post the transfers of one op: the local iovec in groups the provider
 * takes at once, each against the next part of the remote range. */
static int post(struct ssw_ep *ep, struct fab_rma_op *op, bool rd, const struct iovec *local, int iovcnt,
		const struct fab_rdesc *r, uint64_t offset, size_t len)
{
	size_t lim = ep->info->tx_attr->iov_limit ? ep->info->tx_attr->iov_limit : 1;
	if (lim > 8)
		lim = 8;
	struct iovec seg[8];
	void *desc[8];
	size_t done = 0;
	int i = 0;
	size_t in_off = 0; /* into local[i] */
	while (done < len) {
		size_t n = 0, glen = 0;
		while (n < lim && done + glen < len && i < iovcnt) {
			size_t take = local[i].iov_len - in_off;
			if (take > len - done - glen)
				take = len - done - glen;
			if (take) {
				seg[n] = (struct iovec){ (uint8_t *)local[i].iov_base + in_off, take };
				desc[n] = NULL;
				if (ep->mr_local) {
					if (op->nmr == 8)
						return -EPERM; /* more pieces than we register per op: copy instead */
					if (!ep->mrc || fab_mrc_get(ep->mrc, seg[n].iov_base, take, &op->mr[op->nmr]) < 0)
						return -EFAULT;
					desc[n] = fi_mr_desc(fab_mrc_mr(op->mr[op->nmr++]));
				}
				n++;
				glen += take;
				in_off += take;
			}
			if (in_off == local[i].iov_len) {
				i++;
				in_off = 0;
			}
		}
		if (!glen)
			return -EFAULT; /* the local iovec is shorter than len */
		struct fi_rma_iov rio = { .addr = r->base + offset + done, .len = glen, .key = r->key };
		struct fi_msg_rma m = { .msg_iov = seg, .desc = desc, .iov_count = n, .rma_iov = &rio, .rma_iov_count = 1,
					.context = op };
		ssize_t rc;
		for (int tries = 0; tries < 1000; tries++) {
			rc = rd ? fi_readmsg(ep->ep, &m, FI_COMPLETION) : fi_writemsg(ep->ep, &m, FI_COMPLETION);
			if (rc != -FI_EAGAIN)
				break;
			fab_progress(ep);
		}
		if (rc)
			return -ECONNRESET;
		op->pending++;
		done += glen;
	}
	return 0;
}

static int rma(struct ssw_ep *ep, bool rd, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
	       uint64_t offset, size_t len, void *ctx)
{
	struct fab_rdesc r;
	if (!rdesc_ok(desc, offset, len, &r) || iovcnt < 0)
		return -EINVAL;
	if (!len)
		return 0;
	/* libfabric touches the buffer with plain loads and stores from
	 * whatever thread drives progress: not ours would kill the application */
	if (!ssw_mem_usable(local, iovcnt, len, rd))
		return -EFAULT;
	struct fab_rma_op *op = calloc(1, sizeof *op);
	if (!op)
		return -ENOMEM;
	op->c.kind = FAB_CTX_RMA;
	op->c.ep = ep;
	op->ctx = ctx;
	op->sync = ctx == NULL;
	fab_ep_lock(ep);
	if (atomic_load(&ep->broken) || atomic_load(&ep->peer_reset) || !ep->connected) {
		fab_ep_unlock(ep);
		free(op);
		return -ECONNRESET;
	}
	op->all_next = ep->all;
	ep->all = op;
	int rc = post(ep, op, rd, local, iovcnt, &r, offset, len);
	if (rc) {
		if (op->pending) {
			/* some are on their way: the endpoint is given up, the op
			 * freed with it */
			atomic_store(&ep->broken, 1);
			op->sync = true;
		} else {
			fab_rma_free(ep, op);
		}
		if (rc == -ECONNRESET)
			atomic_store(&ep->broken, 1);
		fab_ep_unlock(ep);
		return rc;
	}
	if (!op->sync) {
		fab_ep_unlock(ep);
		return -EINPROGRESS;
	}
	/* No completion context: the caller waits here (bounded), on its
	 * socket and wake_fd (armed: another reader of the hub rings it) */
	uint64_t end = ssw_now_ns() + FAB_SYNC_WAIT_NS;
	while (!op->done && ssw_now_ns() < end) {
		fab_progress(ep);
		if (op->done)
			break;
		int fd = fab_data_fd(ep);
		struct pollfd p[2] = { { .fd = ep->wake_fd, .events = POLLIN },
				       { .fd = fd, .events = POLLIN | (atomic_load(&ep->want_out) ? POLLOUT : 0) } };
		atomic_fetch_add(&ep->armed, 1);
		pthread_mutex_unlock(&ep->mu);
		if (!atomic_load(&ep->in_n))
			sys_poll(p, fd >= 0 ? 2 : 1, 10);
		pthread_mutex_lock(&ep->mu);
		atomic_fetch_sub(&ep->armed, 1);
		if (atomic_exchange(&ep->woken, false)) {
			uint64_t v;
			(void)!sys_read(ep->wake_fd, &v, sizeof v);
		}
	}
	if (!op->done) {
		atomic_store(&ep->broken, 1);
		fab_ep_unlock(ep);
		return -ECONNRESET;
	}
	rc = op->status;
	fab_rma_free(ep, op);
	fab_ep_unlock(ep);
	return rc;
}

static int fab_rdma_read(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
			 uint64_t offset, size_t len, void *ctx)
{
	return rma(ep, true, local, iovcnt, desc, offset, len, ctx);
}

static int fab_rdma_write(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
			  uint64_t offset, size_t len, void *ctx)
{
	return rma(ep, false, local, iovcnt, desc, offset, len, ctx);
}

const struct ssw_rdma_ops fab_rdma_ops = {
	.size = sizeof(struct ssw_rdma_ops),
	.register_memory = fab_register_memory,
	.deregister_memory = fab_deregister_memory,
	.register_rdma_memory = fab_register_rdma_memory,
	.deregister_rdma_memory = fab_deregister_rdma_memory,
	.rdma_read = fab_rdma_read,
	.rdma_write = fab_rdma_write,
};
