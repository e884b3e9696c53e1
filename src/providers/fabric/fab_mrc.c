/* fab_mrc.c — a libfabric domain's registration cache (seed 002).
 *
 * What is cached, per domain (the process's shared one, or a hub's own):
 * registrations of the rendezvous buffers for local access (FI_READ |
 * FI_WRITE), what pins the pages on RDMA hardware.  They serve as the local
 * descriptor of fi_read/fi_write where the provider needs one (FI_MR_LOCAL)
 * and hold the pages of a buffer exposed to the peer between its exposures.
 *
 * What is not: the peer's access.  Each exposure (register_rdma_memory) is
 * a registration of its own with remote access and a key never used before
 * (random: the domain is shared by several peers), closed by
 * deregister_rdma_memory, so the peer's copy of the descriptor is refused
 * at once by libfabric (a key it no longer knows).  libfabric has no memory
 * windows, the only way to withdraw remote access from a registration that
 * stays; seed 002 asks for exactly this fallback ("if the buffer can only be
 * made inaccessible by removing the registration, do so, but leave it
 * locked down").
 *
 * The cache hears of unmapped ranges through the memory hooks (regcache.h)
 * and is flushed when the domain's last endpoint closes (and before a
 * hub's own domain closes).  Without the hooks, or with
 * SOCKSWITCH_REGCACHE=0, it registers for each use and deregisters at its
 * end, as before it existed, and exposures register no pin.
 *
 * SOCKSWITCH_FAULT=pin (tests): each cached registration also pins its pages
 * as a device does (regcache/regpin.h), and an exposure for reading
 * publishes what those pages hold (a copy the peer reads), so that a stale
 * registration sends wrong bytes, as it would on RDMA hardware. */
#include "providers/fabric/fab_priv.h"

#include "common/log.h"
#include "common/params.h"
#include "regcache/regcache.h"
#include "regcache/regpin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct fab_mrc {
	struct fid_domain *domain;
	struct ssw_regcache *rc;
	bool prov_key;
	bool caching;
	bool pin;            /* SOCKSWITCH_FAULT=pin */
	_Atomic unsigned refs; /* the domain's owner and each endpoint */
	_Atomic unsigned users; /* endpoints */
};

/* What a cached registration holds (ssw_reg.handle). */
struct mrc_handle {
	struct fid_mr *mr;
	struct ssw_pin *pin;
};
_Static_assert(sizeof(struct mrc_handle) <= sizeof(((struct ssw_reg *)0)->handle), "handle");

static int mrc_reg(void *ctx, void *addr, size_t len, uint32_t access, struct ssw_reg *reg)
{
	(void)access;
	struct fab_mrc *m = ctx;
	struct mrc_handle h = { 0 };
	if (m->pin && ssw_pin_new(addr, len, &h.pin) < 0)
		return -ENOBUFS;
	fab_gate_enter();
	int rc = fi_mr_reg(m->domain, addr, len, FI_READ | FI_WRITE, 0, m->prov_key ? 0 : fab_random_key(), 0, &h.mr,
			   NULL);
	fab_gate_leave();
	if (rc) {
		ssw_pin_free(h.pin);
		return -ENOBUFS;
	}
	memcpy(reg->handle, &h, sizeof h);
	return 0;
}

static void mrc_dereg(void *ctx, struct ssw_reg *reg)
{
	(void)ctx;
	struct mrc_handle h;
	memcpy(&h, reg->handle, sizeof h);
	fab_gate_enter();
	fi_close(&h.mr->fid);
	fab_gate_leave();
	ssw_pin_free(h.pin);
}

static const struct ssw_regcache_ops mrc_ops = { mrc_reg, mrc_dereg, NULL };

struct fab_mrc *fab_mrc_new(struct fid_domain *domain, bool prov_key)
{
	struct fab_mrc *m = calloc(1, sizeof *m);
	if (!m)
		return NULL;
	size_t entries, bytes;
	ssw_regcache_bounds(&entries, &bytes);
	m->domain = domain;
	m->prov_key = prov_key;
	m->caching = entries > 0;
	m->pin = ssw_param_choice(SSW_P_FAULT) == 3;
	m->rc = ssw_regcache_new(entries, bytes, &mrc_ops, m);
	if (!m->rc) {
		free(m);
		return NULL;
	}
	atomic_store(&m->refs, 1);
	return m;
}

static void mrc_unref(struct fab_mrc *m)
{
	if (atomic_fetch_sub(&m->refs, 1) == 1) {
		ssw_regcache_free(m->rc);
		free(m);
	}
}

void fab_mrc_hold(struct fab_mrc *m)
{
	if (!m)
		return;
	atomic_fetch_add(&m->refs, 1);
	atomic_fetch_add(&m->users, 1);
}

void fab_mrc_release(struct fab_mrc *m)
{
	if (!m)
		return;
	/* the domain's last connection is gone: nothing stays pinned for it */
	if (atomic_fetch_sub(&m->users, 1) == 1)
		ssw_regcache_flush(m->rc);
	mrc_unref(m);
}

void fab_mrc_domain_closing(struct fab_mrc *m)
{
	if (!m)
		return;
	ssw_regcache_flush(m->rc);
	mrc_unref(m);
}

bool fab_mrc_caching(const struct fab_mrc *m)
{
	return m && m->caching;
}

bool fab_mrc_pinning(const struct fab_mrc *m)
{
	return m && m->pin;
}

int fab_mrc_get(struct fab_mrc *m, void *addr, size_t len, struct ssw_reg **out)
{
	return ssw_regcache_get(m->rc, addr, len, 0, out);
}

void fab_mrc_put(struct fab_mrc *m, struct ssw_reg *r)
{
	if (m && r)
		ssw_regcache_put(m->rc, r);
}

struct fid_mr *fab_mrc_mr(const struct ssw_reg *r)
{
	struct mrc_handle h;
	memcpy(&h, r->handle, sizeof h);
	return h.mr;
}

int fab_mrc_pin_read(const struct ssw_reg *r, const void *addr, void *dst, size_t len)
{
	struct mrc_handle h;
	memcpy(&h, r->handle, sizeof h);
	if (!h.pin)
		return -EINVAL;
	return ssw_pin_read(h.pin, (uintptr_t)addr - r->start, dst, len);
}
