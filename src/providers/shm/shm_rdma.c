/* shm_rdma.c — one-sided transfers of the shm provider: RDMA read/write become
 * process_vm_readv/writev (Cross Memory Attach) on the peer's registered range.
 * A descriptor from the peer is checked (magic, size, owner, bounds) before use.
 * SOCKSWITCH_FAULT=async queues the copies for poll_cq (tests of the SPI's
 * asynchronous completions). */
#include "providers/shm/shm_priv.h"

#include "common/memcheck.h"
#include "common/params.h"
#include "common/sys.h"
#include "regcache/regcache.h"
#include "regcache/regpin.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int shm_cma_disabled;
int shm_pin_mode;

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

/* ---- SOCKSWITCH_FAULT=pin ----------------------------------------------------
 * Cross Memory Attach pins nothing: it finds the pages at the addresses at
 * each copy, so shm registers no memory and keeps no registration cache.
 * Tests make it pin as RDMA hardware does: a read exposure is then backed by
 * the pages a cached registration pinned (regcache/regpin.h), copied out as
 * a device would move them, so that a stale cache entry sends wrong bytes
 * here too.  One cache per process: the exposures are the process's. */
static struct ssw_regcache *pin_cache;
static pthread_once_t pin_once = PTHREAD_ONCE_INIT;
static struct {
	struct ssw_reg *pin;
	void *shadow;
} pinned[SHM_EXPO_SLOTS]; /* by exposure slot */


static void pin_cache_new(void)
{
	static const struct ssw_regcache_ops ops = { ssw_pin_cache_reg, ssw_pin_cache_dereg, NULL };
	size_t entries, bytes;
	ssw_regcache_bounds(&entries, &bytes);
	pin_cache = ssw_regcache_new(entries, bytes, &ops, NULL);
}

/* The exposed copy of what the pinned pages of [addr, addr+len) hold, or NULL. */
static void *pin_shadow(void *addr, size_t len, struct ssw_reg **pin)
{
	pthread_once(&pin_once, pin_cache_new);
	void *shadow = pin_cache ? malloc(len) : NULL;
	if (!shadow)
		return NULL;
	if (ssw_regcache_get(pin_cache, addr, len, 0, pin) == 0) {
		struct ssw_pin *p;
		memcpy(&p, (*pin)->handle, sizeof p);
		if (ssw_pin_read(p, (uintptr_t)addr - (*pin)->start, shadow, len) == 0)
			return shadow;
		ssw_regcache_put(pin_cache, *pin);
	}
	free(shadow);
	return NULL;
}

/* The descriptor: a slot of this process's exposure table opened for the
 * range, and the vouch for that table (shm_vouch.c; once per process and
 * connection): without one the peer refuses it, and the transfer goes
 * through the ring. */
static int shm_register_rdma_memory(struct ssw_ep *ep, void *addr, size_t len, uint32_t access,
				    struct ssw_rdma_desc *desc)
{
	struct shm_desc d;
	access &= SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE;
	if (!access || !len)
		return -EINVAL;
	struct ssw_reg *pin = NULL;
	void *shadow = NULL;
	if (shm_pin_mode && access == SSW_CAP_RDMA_READ && !(shadow = pin_shadow(addr, len, &pin)))
		return -ENOBUFS;
	if (shm_expo_open(shadow ? shadow : addr, len, access, &d) < 0) {
		if (pin)
			ssw_regcache_put(pin_cache, pin);
		free(shadow);
		return -ENOBUFS;
	}
	if (shadow) {
		pinned[d.slot].pin = pin;
		pinned[d.slot].shadow = shadow;
	}
	memset(desc, 0, sizeof *desc);
	memcpy(desc->data, &d, sizeof d);
	desc->len = sizeof d;
	if (!shm_cma_disabled)
		(void)shm_vouch_send(ep);
	return 0;
}

/* The slot closes: the peer's next copy with this descriptor is refused. */
static void shm_deregister_rdma_memory(struct ssw_ep *ep, const struct ssw_rdma_desc *desc)
{
	(void)ep;
	struct shm_desc d;
	if (desc->len != sizeof d)
		return;
	memcpy(&d, desc->data, sizeof d);
	if (!shm_expo_close(&d) || !pinned[d.slot].shadow)
		return;
	ssw_regcache_put(pin_cache, pinned[d.slot].pin);
	free(pinned[d.slot].shadow);
	pinned[d.slot].pin = NULL;
	pinned[d.slot].shadow = NULL;
}

static int check_desc(struct ssw_ep *ep, const struct ssw_rdma_desc *desc, uint64_t off, size_t len,
		      struct shm_desc *d, int write)
{
	if (desc->len != sizeof *d)
		return -EINVAL;
	memcpy(d, desc->data, sizeof *d);
	if (d->magic != SHM_DESC_MAGIC || off > d->len || len > d->len - off || d->addr + d->len < d->addr)
		return -EINVAL;
	/* Only an exposure still open in the process that vouched for it, as
	 * the kernel says, of our user now; anything else goes through the
	 * ring (-EPERM). */
	shm_peer_cred(ep);
	if (shm_cma_disabled || !(ep->caps & SSW_CAP_RDMA_READ))
		return -EPERM;
	return shm_vouch_check(ep, d, write != 0);
}

static int cma(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
	       uint64_t off, size_t len, int write)
{
	struct shm_desc d;
	int rc = check_desc(ep, desc, off, len, &d, write);
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
			if (errno != EFAULT)
				return -errno;
			/* which side faulted: ours is -EFAULT (as recv() would say),
			 * the peer's range a bad descriptor */
			return ssw_mem_usable(liov + li, n - li, len - done, !write) ? -EINVAL : -EFAULT;
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

/* Async mode (tests): a queued copy is done by a later poll_cq of its
 * endpoint, one a call: the newest first while two or more are queued (an
 * RDMA provider completes out of order; the others then wait their full
 * count again), a lone one at its SHM_ASYNC_POLLS-th poll.  The queue is this process's, as the local buffers it points to. */
#define SHM_ASYNC_POLLS 4
int shm_rdma_async;
int shm_rdma_reordered; /* completions reported before an older one (tests) */

struct pending {
	struct pending *next;
	struct ssw_ep *ep;
	pid_t pid;         /* a child forked with this queued does not do it: its buffers are copies */
	int write, polls, n;
	struct ssw_rdma_desc desc;
	uint64_t off;
	size_t len;
	void *ctx;
	struct iovec liov[];
};

static pthread_mutex_t pend_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pending *pend; /* newest first */

static int queue(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
		 uint64_t off, size_t len, int write, void *ctx)
{
	/* what does not validate is refused now, as a provider checks its
	 * arguments before posting; the copy's own failures complete later */
	struct shm_desc d;
	int rc = check_desc(ep, desc, off, len, &d, write);
	if (rc < 0)
		return rc;
	if (iovcnt < 1 || iovcnt > 64)
		return -EINVAL;
	struct pending *p = malloc(sizeof *p + (size_t)iovcnt * sizeof(struct iovec));
	if (!p)
		return -ENOMEM;
	*p = (struct pending){ .ep = ep, .pid = ssw_pid(), .write = write, .n = iovcnt, .desc = *desc, .off = off, .len = len, .ctx = ctx };
	memcpy(p->liov, local, (size_t)iovcnt * sizeof *local);
	pthread_mutex_lock(&pend_mu);
	p->next = pend;
	__atomic_store_n(&pend, p, __ATOMIC_RELEASE); /* read unlocked by shm_rdma_cancel */
	pthread_mutex_unlock(&pend_mu);
	return -EINPROGRESS;
}

int shm_rdma_poll_cq(struct ssw_ep *ep, struct ssw_completion *c, int n)
{
	if (n < 1)
		return 0;
	pthread_mutex_lock(&pend_mu);
	struct pending **victim = NULL;
	int queued = 0;
	for (struct pending **pp = &pend; *pp; pp = &(*pp)->next) {
		struct pending *p = *pp;
		if (p->ep != ep || p->pid != ssw_pid())
			continue;
		if (!queued++)
			victim = pp; /* the newest */
		p->polls++;
	}
	if (!victim || (queued < 2 && (*victim)->polls < SHM_ASYNC_POLLS)) {
		pthread_mutex_unlock(&pend_mu);
		return 0;
	}
	struct pending *p = *victim;
	*victim = p->next;
	if (queued >= 2) {
		shm_rdma_reordered++;
		/* the older ones wait their full count again: a caller that took
		 * this completion for its own goes on before its copy is done */
		for (struct pending *q = pend; q; q = q->next)
			if (q->ep == ep)
				q->polls = 0;
	}
	pthread_mutex_unlock(&pend_mu);
	c[0].ctx = p->ctx;
	c[0].status = cma(ep, p->liov, p->n, &p->desc, p->off, p->len, p->write);
	free(p);
	return 1;
}

void shm_rdma_cancel(struct ssw_ep *ep)
{
	/* Nothing queued (the rule: rendezvous copies are rare): the lock is
	 * not taken, since after a fork its page is write-protected and taking
	 * it costs a fault at each connection's end.  A copy for this endpoint
	 * is queued only by its owner, which is the one closing it. */
	if (!__atomic_load_n(&pend, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&pend_mu);
	for (struct pending **pp = &pend; *pp;) {
		struct pending *p = *pp;
		if (p->ep == ep) {
			*pp = p->next;
			free(p);
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&pend_mu);
}

int shm_rdma_queued(void)
{
	int k = 0;
	pthread_mutex_lock(&pend_mu);
	for (struct pending *p = pend; p; p = p->next)
		k++;
	pthread_mutex_unlock(&pend_mu);
	return k;
}

static int shm_rdma_read(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
			 uint64_t offset, size_t len, void *ctx)
{
	if (shm_rdma_async)
		return queue(ep, local, iovcnt, desc, offset, len, 0, ctx);
	return cma(ep, local, iovcnt, desc, offset, len, 0);
}

static int shm_rdma_write(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
			  uint64_t offset, size_t len, void *ctx)
{
	if (shm_rdma_async)
		return queue(ep, local, iovcnt, desc, offset, len, 1, ctx);
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
