/* shm_rdma.c — one-sided transfers of the shm provider: RDMA read/write become
 * process_vm_readv/writev (Cross Memory Attach) on the peer's registered range.
 * A descriptor from the peer is checked (magic, size, owner, bounds) before use. */
#include "providers/shm/shm_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHM_DESC_MAGIC 0x43534d52u /* "RMSC" */

struct shm_desc {
	uint32_t magic;
	int32_t pid;
	uint64_t addr;
	uint64_t len;
	uint64_t gen;
};

int shm_cma_disabled;

static int shm_register_memory(struct ssw_ep *ep, void *addr, size_t len, struct ssw_mr *mr)
{
	(void)ep;
	mr->addr = addr;
	mr->len = len;
	mr->key = 0;
	mr->prov = NULL;
	return 0; /* shared memory needs no pinning */
}

static void shm_deregister_memory(struct ssw_ep *ep, struct ssw_mr *mr)
{
	(void)ep, (void)mr;
}

static int shm_register_rdma_memory(struct ssw_ep *ep, void *addr, size_t len, uint32_t access,
				    struct ssw_rdma_desc *desc)
{
	static uint64_t gen;
	(void)ep, (void)access;
	struct shm_desc d = { SHM_DESC_MAGIC, (int32_t)ssw_pid(), (uint64_t)(uintptr_t)addr, len,
			      __atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED) };
	memcpy(desc->data, &d, sizeof d);
	desc->len = sizeof d;
	return 0;
}

static void shm_deregister_rdma_memory(struct ssw_ep *ep, const struct ssw_rdma_desc *desc)
{
	/* CMA cannot revoke access; the session refuses stale transfers by id. */
	(void)ep, (void)desc;
}

static int check_desc(struct ssw_ep *ep, const struct ssw_rdma_desc *desc, uint64_t off, size_t len,
		      struct shm_desc *d)
{
	if (desc->len != sizeof *d)
		return -EINVAL;
	memcpy(d, desc->data, sizeof *d);
	if (d->magic != SHM_DESC_MAGIC || off > d->len || len > d->len - off || d->addr + d->len < d->addr)
		return -EINVAL;
	/* Only the process at the other end of this connection; anything else
	 * (e.g. a forked sharer) goes through the copy path. */
	shm_peer_cred(ep);
	if (shm_cma_disabled || d->pid != ep->peer_pid || !(ep->caps & SSW_CAP_RDMA_READ))
		return -EPERM;
	return 0;
}

static int cma(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
	       uint64_t off, size_t len, int write)
{
	struct shm_desc d;
	int rc = check_desc(ep, desc, off, len, &d);
	if (rc < 0)
		return rc;
	size_t cap = 0;
	for (int i = 0; i < iovcnt; i++)
		cap += local[i].iov_len;
	if (cap < len)
		return -EINVAL;
	struct iovec liov[64];
	int n = iovcnt < 64 ? iovcnt : 64;
	memcpy(liov, local, (size_t)n * sizeof *liov);
	size_t done = 0;
	int li = 0;
	while (done < len) {
		struct iovec r = { (void *)(uintptr_t)(d.addr + off + done), len - done };
		ssize_t k = write ? process_vm_writev(d.pid, liov + li, (unsigned long)(n - li), &r, 1, 0)
				  : process_vm_readv(d.pid, liov + li, (unsigned long)(n - li), &r, 1, 0);
		if (k < 0) {
			if (errno == EPERM || errno == ESRCH || errno == ENOSYS) {
				ep->caps &= ~(uint32_t)(SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE);
				return -EPERM;
			}
			return errno == EFAULT ? -EINVAL : -errno;
		}
		if (k == 0)
			return -EINVAL;
		done += (size_t)k;
		/* advance the local iovec past what was copied */
		size_t adv = (size_t)k;
		while (adv && li < n) {
			if (adv >= liov[li].iov_len) {
				adv -= liov[li].iov_len;
				li++;
			} else {
				liov[li].iov_base = (char *)liov[li].iov_base + adv;
				liov[li].iov_len -= adv;
				adv = 0;
			}
		}
		if (li >= n && done < len)
			return -EINVAL;
	}
	return 0;
}

static int shm_rdma_read(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
			 uint64_t offset, size_t len, void *ctx)
{
	(void)ctx;
	return cma(ep, local, iovcnt, desc, offset, len, 0);
}

static int shm_rdma_write(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
			  uint64_t offset, size_t len, void *ctx)
{
	(void)ctx;
	return cma(ep, local, iovcnt, desc, offset, len, 1);
}

const struct ssw_rdma_ops shm_rdma_ops = {
	.size = sizeof(struct ssw_rdma_ops),
	.register_memory = shm_register_memory,
	.deregister_memory = shm_deregister_memory,
	.register_rdma_memory = shm_register_rdma_memory,
	.deregister_rdma_memory = shm_deregister_rdma_memory,
	.rdma_read = shm_rdma_read,
	.rdma_write = shm_rdma_write,
};
