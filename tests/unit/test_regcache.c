/* test_regcache.c — registration cache: hits, page rounding, revoke, LRU, bounds in entries and bytes, the cache off, invalidation (direct and through the lock-free log), flush, failures, process totals. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "regcache/regcache.h"
#include "sockswitch/provider.h"

#define PG 4096u
#define A(x) ((void *)(uintptr_t)(x))
#define RD SSW_CAP_RDMA_READ
#define WR SSW_CAP_RDMA_WRITE
#define MAX_IDS 65536

/* A provider that never touches memory: it numbers registrations and checks
 * that each is deregistered exactly once. */
struct fake {
	int nreg, ndereg, nrevoke;
	int fail_reg; /* fail this many next reg calls */
	uintptr_t last_addr;
	size_t last_len;
	uint32_t last_access;
	uintptr_t last_dereg_start;
	struct ssw_reg *last_revoked;
	uint64_t last_revoked_gen;
	uint32_t next_id;
	unsigned char live[MAX_IDS];
	/* Simulate a provider whose callback unmaps memory (interposed munmap). */
	void *inval_addr;
	size_t inval_len;
	int inval_on_reg, inval_on_dereg, inval_repeat;
	/* Callbacks run under the cache lock: they count misuse here rather
	 * than assert, which would longjmp out with the lock held. */
	int errors;
};

static uint32_t id_of(const struct ssw_reg *r)
{
	uint32_t id;
	memcpy(&id, r->handle, sizeof id);
	return id;
}

static void maybe_unmap(struct fake *f, int when)
{
	if (!when)
		return;
	for (int i = 0; i < (f->inval_repeat ? f->inval_repeat : 1); i++)
		ssw_regcache_invalidate_all((char *)f->inval_addr + (size_t)i * 16 * PG, f->inval_len);
}

static int fake_reg(void *ctx, void *addr, size_t len, uint32_t access, struct ssw_reg *reg)
{
	struct fake *f = ctx;
	f->nreg++;
	f->last_addr = (uintptr_t)addr;
	f->last_len = len;
	f->last_access = access;
	maybe_unmap(f, f->inval_on_reg);
	if (f->fail_reg > 0) {
		f->fail_reg--;
		return -ENOMEM;
	}
	uint32_t id = ++f->next_id;
	if (id >= MAX_IDS) {
		f->errors++;
		return -ENOSPC;
	}
	f->live[id] = 1;
	memcpy(reg->handle, &id, sizeof id);
	return 0;
}

static void fake_dereg(void *ctx, struct ssw_reg *reg)
{
	struct fake *f = ctx;
	uint32_t id = id_of(reg);
	if (id == 0 || id >= MAX_IDS || !f->live[id]) {
		f->errors++; /* unknown or already deregistered */
		return;
	}
	f->live[id] = 0;
	f->ndereg++;
	f->last_dereg_start = reg->start;
	maybe_unmap(f, f->inval_on_dereg);
}

static void fake_revoke(void *ctx, struct ssw_reg *reg)
{
	struct fake *f = ctx;
	f->nrevoke++;
	f->last_revoked = reg;
	f->last_revoked_gen = reg->generation;
}

static const struct ssw_regcache_ops fake_ops = { fake_reg, fake_dereg, fake_revoke };
static const struct ssw_regcache_ops fake_ops_norevoke = { fake_reg, fake_dereg, NULL };

/* Fakes are never reused: a cache a failed test leaked keeps valid memory
 * behind its ctx. */
static struct fake *new_fake(void)
{
	static struct fake pool[32];
	static unsigned used;
	assert_true(used < sizeof pool / sizeof pool[0]);
	return &pool[used++];
}

static struct ssw_regcache *mk(struct fake **fp, size_t max)
{
	struct fake *f = *fp = new_fake();
	struct ssw_regcache *rc = ssw_regcache_new(max, 0, &fake_ops, f);
	assert_non_null(rc);
	return rc;
}

static int nlive(const struct fake *f)
{
	int n = 0;
	for (int i = 0; i < MAX_IDS; i++)
		n += f->live[i];
	return n;
}

/* Free and check every registration was released exactly once. */
static void finish(struct ssw_regcache *rc, struct fake *f)
{
	ssw_regcache_free(rc);
	assert_int_equal(nlive(f), 0);
	assert_int_equal(f->errors, 0);
}

static struct ssw_regcache_stats stats(struct ssw_regcache *rc)
{
	struct ssw_regcache_stats st;
	ssw_regcache_get_stats(rc, &st);
	return st;
}

static struct ssw_reg *get(struct ssw_regcache *rc, uintptr_t addr, size_t len, uint32_t access)
{
	struct ssw_reg *r = NULL;
	assert_int_equal(ssw_regcache_get(rc, A(addr), len, access, &r), 0);
	assert_non_null(r);
	assert_true(r->start <= addr && addr + (len ? len : 1) <= r->end);
	assert_int_equal(r->access & access, access);
	return r;
}

/* get then put: the entry stays cached, idle. */
static struct ssw_reg *touch(struct ssw_regcache *rc, uintptr_t addr, size_t len, uint32_t access)
{
	struct ssw_reg *r = get(rc, addr, len, access);
	ssw_regcache_put(rc, r);
	return r;
}

static void test_miss_then_hit(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *r1 = get(rc, 0x100000, 100, 0);
	assert_int_equal(f->nreg, 1);
	assert_int_equal(r1->inuse, 1);
	ssw_regcache_put(rc, r1);
	assert_int_equal(r1->inuse, 0);
	struct ssw_reg *r2 = get(rc, 0x100000, 100, 0);
	assert_ptr_equal(r1, r2);
	assert_int_equal(f->nreg, 1);
	struct ssw_regcache_stats st = stats(rc);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.misses, 1);
	ssw_regcache_put(rc, r2);
	finish(rc, f);
}

static void test_covering_range_hit(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *big = touch(rc, 0x100000, 3 * PG, 0);
	assert_ptr_equal(touch(rc, 0x100000 + PG + 10, 100, 0), big);
	assert_ptr_equal(touch(rc, 0x100000 + 3 * PG - 1, 1, 0), big);
	assert_int_equal(f->nreg, 1);
	/* One byte past the end is not covered. */
	struct ssw_reg *r = touch(rc, 0x100000 + 2 * PG, PG + 1, 0);
	assert_int_equal(f->nreg, 2);
	assert_true(r->end >= 0x100000 + 3 * PG + 1);
	finish(rc, f);
}

static void test_access_upgrade_is_miss(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *loc = touch(rc, 0x100000, 100, 0);
	assert_int_equal(loc->access, 0);
	struct ssw_reg *rd = get(rc, 0x100000, 100, RD);
	assert_int_equal(f->nreg, 2);
	assert_int_equal(f->last_access & RD, RD);
	/* The local-only entry is superseded, not kept alongside. */
	assert_int_equal(f->ndereg, 1);
	assert_int_equal(stats(rc).entries, 1);
	ssw_regcache_put(rc, rd);

	struct ssw_reg *rw = touch(rc, 0x100000, 100, WR);
	assert_int_equal(f->nreg, 3);
	assert_int_equal(f->last_access, RD | WR);
	/* Less access than the entry has is a hit. */
	assert_ptr_equal(touch(rc, 0x100000, 100, 0), rw);
	assert_ptr_equal(touch(rc, 0x100000, 100, RD), rw);
	assert_int_equal(f->nreg, 3);

	/* Upgrading under a user: the old entry stays registered until its put. */
	struct ssw_reg *held = get(rc, 0x200000, 100, 0);
	struct ssw_reg *up = get(rc, 0x200000, 100, RD);
	assert_ptr_not_equal(held, up);
	int before = f->ndereg;
	assert_int_equal(stats(rc).entries, 3);
	ssw_regcache_put(rc, held);
	assert_int_equal(f->ndereg, before + 1);
	assert_int_equal(f->last_dereg_start, 0x200000);
	ssw_regcache_put(rc, up);
	assert_ptr_equal(touch(rc, 0x200000, 100, 0), up);
	finish(rc, f);
}

static void test_page_rounding(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *r = touch(rc, 0x100010, 100, 0);
	assert_int_equal(f->last_addr, 0x100000);
	assert_int_equal(f->last_len, PG);
	assert_int_equal(r->start, 0x100000);
	assert_int_equal(r->end, 0x101000);
	/* A neighbouring buffer on the same page hits, up to the page end. */
	assert_ptr_equal(touch(rc, 0x100F00, 0x100, 0), r);
	assert_ptr_equal(touch(rc, 0x100000, 1, 0), r);
	assert_int_equal(f->nreg, 1);
	/* Crossing into the next page misses; both pages get registered. */
	struct ssw_reg *r2 = touch(rc, 0x100FF0, 0x20, 0);
	assert_int_equal(f->nreg, 2);
	assert_int_equal(f->last_addr, 0x100000);
	assert_int_equal(f->last_len, 2 * PG);
	assert_ptr_equal(touch(rc, 0x101800, 1, 0), r2);
	assert_ptr_equal(touch(rc, 0x100010, 100, 0), r2);
	assert_int_equal(f->nreg, 2);
	assert_int_equal(stats(rc).entries, 1);

	touch(rc, 0x200001, 2 * PG, 0);
	assert_int_equal(f->last_addr, 0x200000);
	assert_int_equal(f->last_len, 3 * PG);
	finish(rc, f);
}

static void test_merge_neighbours(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	/* Overlapping buffers used in turn: one miss each, then both hit. */
	touch(rc, 0x100000, 2 * PG, 0);
	struct ssw_reg *m = touch(rc, 0x101000, 2 * PG, RD);
	assert_int_equal(f->last_addr, 0x100000);
	assert_int_equal(f->last_len, 3 * PG);
	assert_int_equal(f->last_access, RD);
	assert_int_equal(f->ndereg, 1);
	for (int i = 0; i < 3; i++) {
		assert_ptr_equal(touch(rc, 0x100000, 2 * PG, 0), m);
		assert_ptr_equal(touch(rc, 0x101000, 2 * PG, RD), m);
	}
	assert_int_equal(f->nreg, 2);
	/* Adjacent pages are not merged. */
	touch(rc, 0x103000, PG, 0);
	assert_int_equal(f->last_addr, 0x103000);
	assert_int_equal(f->last_len, PG);
	assert_int_equal(stats(rc).entries, 2);
	finish(rc, f);
}

static void test_put_keeps_entry(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *r = get(rc, 0x100000, 100, 0);
	uint64_t gen = r->generation;
	ssw_regcache_put(rc, r);
	assert_int_equal(f->ndereg, 0);
	assert_int_equal(f->nrevoke, 0);
	assert_int_equal(r->generation, gen);
	assert_int_equal(stats(rc).entries, 1);
	assert_ptr_equal(touch(rc, 0x100000, 100, 0), r);
	assert_int_equal(f->nreg, 1);
	finish(rc, f);
}

static void test_remote_put_revokes(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *r = get(rc, 0x100000, 100, RD);
	uint64_t g0 = r->generation;
	ssw_regcache_put(rc, r);
	assert_int_equal(f->nrevoke, 1);
	assert_ptr_equal(f->last_revoked, r);
	assert_true(r->generation > g0);
	assert_int_equal(f->last_revoked_gen, r->generation); /* bumped before revoke */
	assert_int_equal(f->ndereg, 0);

	uint64_t g1 = r->generation;
	assert_ptr_equal(touch(rc, 0x100000, 100, RD), r);
	assert_int_equal(f->nrevoke, 2);
	assert_true(r->generation > g1);
	assert_int_equal(f->nreg, 1);

	/* A local use of a remote-capable entry exposes nothing. */
	uint64_t g2 = r->generation;
	assert_ptr_equal(touch(rc, 0x100000, 100, 0), r);
	assert_int_equal(f->nrevoke, 2);
	assert_int_equal(r->generation, g2);

	/* Two remote users: the first put must not revoke under the second. */
	struct ssw_reg *a = get(rc, 0x100000, 10, RD);
	struct ssw_reg *b = get(rc, 0x100020, 10, RD);
	assert_ptr_equal(a, b);
	ssw_regcache_put(rc, a);
	assert_int_equal(f->nrevoke, 2);
	assert_int_equal(r->generation, g2);
	ssw_regcache_put(rc, b);
	assert_int_equal(f->nrevoke, 3);
	assert_true(r->generation > g2);
	finish(rc, f);

	/* Without a revoke callback the generation still moves. */
	f = new_fake();
	rc = ssw_regcache_new(4, 0, &fake_ops_norevoke, f);
	assert_non_null(rc);
	r = get(rc, 0x100000, 100, WR);
	g0 = r->generation;
	ssw_regcache_put(rc, r);
	assert_true(r->generation > g0);
	finish(rc, f);
}

static void test_generation_not_reused(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	/* A new entry on the same range must not repeat a generation an old
	 * descriptor carried. */
	struct ssw_reg *r = get(rc, 0x100000, 100, RD);
	uint64_t old = r->generation;
	ssw_regcache_put(rc, r);
	uint64_t revoked = r->generation;
	ssw_regcache_invalidate(rc, A(0x100000), PG);
	r = get(rc, 0x100000, 100, RD);
	assert_true(r->generation != old && r->generation != revoked);
	ssw_regcache_put(rc, r);
	finish(rc, f);
}

static void test_lru_eviction_order(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 3);

	touch(rc, 0x100000, 1, 0); /* A */
	touch(rc, 0x200000, 1, 0); /* B */
	touch(rc, 0x300000, 1, 0); /* C */
	touch(rc, 0x100000, 1, 0); /* A used again: B is now the oldest */
	assert_int_equal(f->ndereg, 0);
	touch(rc, 0x400000, 1, 0); /* D evicts B */
	assert_int_equal(f->ndereg, 1);
	assert_int_equal(f->last_dereg_start, 0x200000);
	assert_int_equal(stats(rc).evictions, 1);
	assert_int_equal(stats(rc).entries, 3);
	touch(rc, 0x200000, 1, 0); /* B misses, evicts C */
	assert_int_equal(f->nreg, 5);
	assert_int_equal(f->last_dereg_start, 0x300000);
	touch(rc, 0x100000, 1, 0); /* A still cached */
	assert_int_equal(f->nreg, 5);
	assert_int_equal(stats(rc).evictions, 2);
	assert_int_equal(ssw_regcache_over_cap(rc), 0);
	finish(rc, f);
}

static void test_inuse_not_evicted(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 2);

	struct ssw_reg *a = get(rc, 0x100000, 1, 0); /* oldest, held */
	touch(rc, 0x200000, 1, 0);
	struct ssw_reg *c = get(rc, 0x300000, 1, 0);
	assert_int_equal(f->ndereg, 1);
	assert_int_equal(f->last_dereg_start, 0x200000);
	/* Everything in use: the cap is soft. */
	struct ssw_reg *d = get(rc, 0x400000, 1, 0);
	assert_int_equal(f->ndereg, 1);
	assert_int_equal(stats(rc).entries, 3);
	assert_int_equal(stats(rc).evictions, 1);
	assert_int_equal(ssw_regcache_over_cap(rc), 1);
	ssw_regcache_put(rc, a);
	ssw_regcache_put(rc, c);
	ssw_regcache_put(rc, d);
	assert_int_equal(f->ndereg, 1);
	/* The next miss brings the cache back under the cap, oldest first. */
	touch(rc, 0x500000, 1, 0);
	assert_int_equal(stats(rc).entries, 2);
	assert_int_equal(stats(rc).evictions, 3);
	assert_ptr_equal(touch(rc, 0x400000, 1, 0), d);
	assert_int_equal(f->nreg, 5);
	finish(rc, f);
}

static void test_invalidate_overlapping_only(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *p1 = touch(rc, 0x110000, PG, 0);
	touch(rc, 0x112000, PG, 0);
	struct ssw_reg *p3 = touch(rc, 0x114000, PG, 0);

	ssw_regcache_invalidate(rc, A(0x111000), PG); /* touches p1's end and p2's start */
	assert_int_equal(f->ndereg, 0);
	ssw_regcache_invalidate(rc, A(0x112FFF), 1); /* p2's last byte */
	assert_int_equal(f->ndereg, 1);
	assert_int_equal(f->last_dereg_start, 0x112000);
	ssw_regcache_invalidate(rc, A(0x113000), PG); /* ends where p3 starts */
	assert_int_equal(f->ndereg, 1);
	ssw_regcache_invalidate(rc, A(0x10F000), PG + 1); /* p1's first byte */
	assert_int_equal(f->ndereg, 2);
	assert_int_equal(f->last_dereg_start, 0x110000);
	ssw_regcache_invalidate(rc, A(0x114000), 0); /* empty */
	assert_int_equal(f->ndereg, 2);

	struct ssw_regcache_stats st = stats(rc);
	assert_int_equal(st.invalidations, 2);
	assert_int_equal(st.entries, 1);
	assert_ptr_equal(touch(rc, 0x114000, PG, 0), p3);
	assert_int_equal(f->nreg, 3);
	struct ssw_reg *again = touch(rc, 0x110000, PG, 0);
	assert_int_equal(f->nreg, 4);
	(void)again;
	(void)p1;

	/* One call covering several entries drops them all. */
	ssw_regcache_invalidate(rc, A(0), 0x200000);
	assert_int_equal(stats(rc).entries, 0);
	assert_int_equal(stats(rc).invalidations, 4);
	finish(rc, f);
}

static void test_invalidate_inuse_dropped_at_put(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	struct ssw_reg *old = get(rc, 0x100000, 100, RD);
	uint32_t old_id = id_of(old);
	ssw_regcache_invalidate(rc, A(0x100000), PG);
	assert_int_equal(f->ndereg, 0); /* its user may still be transferring */
	assert_int_equal(stats(rc).invalidations, 1);
	assert_int_equal(stats(rc).entries, 1);

	struct ssw_reg *fresh = get(rc, 0x100000, 100, RD); /* dead: not found again */
	assert_ptr_not_equal(fresh, old);
	assert_int_equal(f->nreg, 2);
	ssw_regcache_put(rc, old);
	assert_int_equal(f->ndereg, 1);
	assert_int_equal(f->live[old_id], 0);
	assert_int_equal(f->nrevoke, 0); /* deregistered, not merely revoked */
	assert_int_equal(stats(rc).entries, 1);
	ssw_regcache_put(rc, fresh);
	assert_int_equal(f->ndereg, 1);
	assert_ptr_equal(touch(rc, 0x100000, 100, 0), fresh);
	finish(rc, f);
}

static void test_invalidate_all_two_caches(void **state)
{
	(void)state;
	struct fake *f1, *f2;
	struct ssw_regcache *c1 = mk(&f1, 16), *c2 = mk(&f2, 16);

	touch(c1, 0x300000, 1, 0);
	touch(c1, 0x400000, 1, 0);
	touch(c2, 0x301000, 1, 0);
	touch(c2, 0x500000, 1, 0);

	ssw_regcache_invalidate_all(A(0x300000), 0x10000);
	/* logged: each cache applies it before its next lookup */
	assert_int_equal(f1->ndereg, 0);
	ssw_regcache_sync(c1);
	ssw_regcache_sync(c2);
	assert_int_equal(f1->ndereg, 1);
	assert_int_equal(f1->last_dereg_start, 0x300000);
	assert_int_equal(f2->ndereg, 1);
	assert_int_equal(f2->last_dereg_start, 0x301000);
	assert_int_equal(stats(c1).invalidations, 1);
	assert_int_equal(stats(c2).invalidations, 1);

	/* A freed cache is no longer reached. */
	finish(c1, f1);
	int d1 = f1->ndereg;
	ssw_regcache_invalidate_all(A(0x400000), 0x200000);
	touch(c2, 0x900000, 1, 0); /* a lookup applies the log first */
	assert_int_equal(f1->ndereg, d1);
	assert_int_equal(f2->ndereg, 2);
	assert_int_equal(stats(c2).entries, 1);
	finish(c2, f2);
}

static void test_flush_deregisters_all(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	touch(rc, 0x100000, 1, 0);
	touch(rc, 0x200000, 1, RD);
	struct ssw_reg *held = get(rc, 0x300000, 1, RD);
	struct ssw_reg *dead = get(rc, 0x400000, 1, 0);
	ssw_regcache_invalidate(rc, A(0x400000), 1);
	assert_int_equal(f->ndereg, 0);

	ssw_regcache_flush(rc);
	assert_int_equal(f->ndereg, 4);
	assert_int_equal(nlive(f), 0);
	assert_int_equal(stats(rc).entries, 0);
	ssw_regcache_put(rc, held); /* already deregistered: not twice */
	ssw_regcache_put(rc, dead);
	assert_int_equal(f->ndereg, 4);
	assert_int_equal(f->nrevoke, 1); /* only the idle remote entry's earlier put */

	touch(rc, 0x100000, 1, 0);
	assert_int_equal(f->nreg, 5);
	finish(rc, f);
}

static void test_free_deregisters_all(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);

	touch(rc, 0x100000, 1, 0);
	(void)get(rc, 0x200000, 1, RD);
	(void)get(rc, 0x300000, 1, 0);
	ssw_regcache_invalidate(rc, A(0x300000), 1);
	ssw_regcache_free(rc);
	assert_int_equal(f->nreg, 3);
	assert_int_equal(f->ndereg, 3);
	assert_int_equal(nlive(f), 0);
}

static void test_reg_failure(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);
	struct ssw_reg *r = A(0x1);

	f->fail_reg = 1;
	assert_int_equal(ssw_regcache_get(rc, A(0x100000), 100, 0, &r), -ENOBUFS);
	assert_ptr_equal(r, A(0x1));
	struct ssw_regcache_stats st = stats(rc);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.misses, 1);
	assert_int_equal(st.hits, 0);
	/* Nothing was cached: the next get registers. */
	touch(rc, 0x100000, 100, 0);
	assert_int_equal(f->nreg, 2);
	assert_int_equal(stats(rc).hits, 0);

	/* A failed merged registration falls back to the buffer's own pages. */
	touch(rc, 0x600000, 2 * PG, 0);
	int n = f->nreg;
	f->fail_reg = 1;
	struct ssw_reg *m = touch(rc, 0x601800, PG, 0);
	assert_int_equal(f->nreg, n + 2);
	assert_int_equal(f->last_addr, 0x601000);
	assert_int_equal(f->last_len, 2 * PG);
	assert_int_equal(m->start, 0x601000);
	assert_int_equal(f->last_dereg_start, 0x600000); /* the overlapped entry went */
	touch(rc, 0x600000, 1, 0);
	assert_int_equal(f->nreg, n + 3);

	/* Every attempt failing (merged, alone, alone once the idle entries
	 * elsewhere are gone) leaves the overlapped entries as they were. */
	size_t entries = stats(rc).entries;
	int d = f->ndereg;
	n = f->nreg;
	f->fail_reg = 3;
	assert_int_equal(ssw_regcache_get(rc, A(0x600800), PG, 0, &r), -ENOBUFS);
	assert_int_equal(f->nreg, n + 3);
	assert_int_equal(stats(rc).entries, entries - 1); /* 0x100000 made way */
	assert_int_equal(f->ndereg, d + 1);
	touch(rc, 0x600000, 1, 0);
	touch(rc, 0x601000, 2 * PG, 0);
	assert_int_equal(f->nreg, n + 3);
	/* An address range that wraps cannot be registered. */
	assert_int_equal(ssw_regcache_get(rc, A(UINTPTR_MAX - 10), 100, 0, &r), -ENOBUFS);
	finish(rc, f);
}

static void test_stats_counts(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 2);

	touch(rc, 0x100000, 1, 0);  /* miss */
	touch(rc, 0x100000, 1, 0);  /* hit */
	touch(rc, 0x200000, 1, 0);  /* miss */
	touch(rc, 0x300000, 1, 0);  /* miss, evicts 0x100000 */
	touch(rc, 0x200000, 10, 0); /* hit */
	ssw_regcache_invalidate(rc, A(0x300000), 1);
	f->fail_reg = 2; /* fails, and again once the idle 0x200000 made way */
	struct ssw_reg *r;
	assert_int_equal(ssw_regcache_get(rc, A(0x500000), 1, 0, &r), -ENOBUFS); /* miss */

	struct ssw_regcache_stats st = stats(rc);
	assert_int_equal(st.hits, 2);
	assert_int_equal(st.misses, 4);
	assert_int_equal(st.evictions, 2);
	assert_int_equal(st.invalidations, 1);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.entries, (size_t)nlive(f));
	finish(rc, f);
}

static void test_many_entries_sorted(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 4096);
	enum { N = 1024 };
	uintptr_t base = 0x10000000;

	/* Insert in a scrambled order, pages with gaps between them. */
	for (unsigned k = 0; k < N; k++) {
		unsigned j = (k * 389u) % N;
		touch(rc, base + 2 * j * PG + 7, 100, 0);
	}
	assert_int_equal(f->nreg, N);
	for (unsigned j = 0; j < N; j++) {
		struct ssw_reg *r = touch(rc, base + 2 * j * PG, PG, 0);
		assert_int_equal(r->start, base + 2 * j * PG);
	}
	assert_int_equal(f->nreg, N);
	for (unsigned j = 1; j < N; j += 2)
		ssw_regcache_invalidate(rc, A(base + 2 * j * PG + PG - 1), 1);
	assert_int_equal(stats(rc).invalidations, N / 2);
	for (unsigned j = 0; j < N; j += 2)
		touch(rc, base + 2 * j * PG, 1, 0);
	assert_int_equal(f->nreg, N);
	for (unsigned j = 1; j < N; j += 2)
		touch(rc, base + 2 * j * PG, 1, 0);
	assert_int_equal(f->nreg, N + N / 2);
	finish(rc, f);
}

static void test_reentrant_invalidate(void **state)
{
	(void)state;
	struct fake *f1, *f2;
	struct ssw_regcache *c1 = mk(&f1, 16), *c2 = mk(&f2, 16);

	/* c2's dereg unmaps memory c1 caches: logged without a lock (the
	 * memory hooks call from inside malloc), applied at c1's next look. */
	touch(c1, 0x100000, 1, 0);
	touch(c2, 0x200000, 1, 0);
	f2->inval_addr = A(0x100000);
	f2->inval_len = PG;
	f2->inval_on_dereg = 1;
	ssw_regcache_invalidate(c2, A(0x200000), 1);
	assert_int_equal(f2->ndereg, 1);
	assert_int_equal(stats(c1).entries, 0);
	assert_int_equal(f1->ndereg, 1);
	f2->inval_on_dereg = 0;

	/* A reg callback unmapping another entry of the same cache. */
	touch(c1, 0x300000, 1, 0);
	f1->inval_addr = A(0x300000);
	f1->inval_len = PG;
	f1->inval_on_reg = 1;
	struct ssw_reg *r = touch(c1, 0x400000, 1, 0);
	f1->inval_on_reg = 0;
	assert_int_equal(stats(c1).entries, 1);
	assert_int_equal(f1->last_dereg_start, 0x300000);
	assert_ptr_equal(touch(c1, 0x400000, 1, 0), r);
	finish(c1, f1);
	finish(c2, f2);
}

/* More ranges than the log holds before a cache looks: it cannot know which
 * of its entries they hit, so it drops them all. */
static void test_log_lapped(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);
	touch(rc, 0x100000, 1, 0);
	touch(rc, 0x200000, 1, 0);
	for (int i = 0; i < 600; i++)
		ssw_regcache_invalidate_all(A(0x70000000 + (uintptr_t)i * PG), PG); /* none of its ranges */
	struct ssw_regcache_stats st = stats(rc);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.invalidations, 2);
	/* a few: each applied, the others stay */
	touch(rc, 0x100000, 1, 0);
	touch(rc, 0x200000, 1, 0);
	for (int i = 0; i < 100; i++)
		ssw_regcache_invalidate_all(A(0x70000000 + (uintptr_t)i * PG), PG);
	ssw_regcache_invalidate_all(A(0x200000), 1);
	st = stats(rc);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.invalidations, 3);
	assert_int_equal(f->last_dereg_start, 0x200000);
	finish(rc, f);
}

/* Bounded in bytes as well as entries: past max_bytes the least recently
 * released go; a registration larger than the bound serves its use only. */
static void test_bytes_bound(void **state)
{
	(void)state;
	struct fake *f = new_fake();
	struct ssw_regcache *rc = ssw_regcache_new(16, 8 * PG, &fake_ops, f);
	assert_non_null(rc);
	touch(rc, 0x100000, 4 * PG, 0); /* A: 4 pages */
	touch(rc, 0x200000, 3 * PG, 0); /* B: 3 */
	assert_int_equal(stats(rc).bytes, 7 * PG);
	touch(rc, 0x300000, 2 * PG, 0); /* C: 2 more would be 9: A (oldest) goes */
	struct ssw_regcache_stats st = stats(rc);
	assert_int_equal(st.bytes, 5 * PG);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(f->last_dereg_start, 0x100000);
	assert_true(st.bytes <= 8 * PG);
	/* larger than the whole bound: registered, used, deregistered at put */
	int d = f->ndereg;
	struct ssw_reg *big = get(rc, 0x400000, 9 * PG, 0);
	assert_int_equal(stats(rc).entries, 3);
	ssw_regcache_put(rc, big);
	assert_int_equal(f->ndereg, d + 1);
	assert_int_equal(f->last_dereg_start, 0x400000);
	st = stats(rc);
	assert_int_equal(st.entries, 2);
	assert_true(st.bytes <= 8 * PG);
	/* ... and it took nothing cached with it */
	touch(rc, 0x200000, 3 * PG, 0);
	touch(rc, 0x300000, 2 * PG, 0);
	assert_int_equal(stats(rc).hits, 2);
	finish(rc, f);
}

/* max_entries 0 (SOCKSWITCH_REGCACHE=0): every use registers and its put
 * deregisters, as without a cache. */
static void test_cache_off(void **state)
{
	(void)state;
	struct fake *f = new_fake();
	struct ssw_regcache *rc = ssw_regcache_new(0, 0, &fake_ops, f);
	assert_non_null(rc);
	for (int i = 0; i < 3; i++) {
		struct ssw_reg *r = get(rc, 0x100000, 100, 0);
		assert_int_equal(nlive(f), 1);
		ssw_regcache_put(rc, r);
		assert_int_equal(nlive(f), 0);
	}
	struct ssw_regcache_stats st = stats(rc);
	assert_int_equal(f->nreg, 3);
	assert_int_equal(st.misses, 3);
	assert_int_equal(st.hits, 0);
	assert_int_equal(st.registrations, 3);
	assert_int_equal(st.entries, 0);
	finish(rc, f);
}

/* A registration that fails beside idle entries (pinning limits) is tried
 * again once they are gone. */
static void test_reg_failure_evicts_idle(void **state)
{
	(void)state;
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 16);
	touch(rc, 0x100000, 1, 0);
	touch(rc, 0x200000, 1, 0);
	f->fail_reg = 1;
	struct ssw_reg *r = get(rc, 0x300000, 1, 0);
	assert_int_equal(r->start, 0x300000);
	assert_int_equal(stats(rc).entries, 1);
	assert_int_equal(stats(rc).evictions, 2);
	ssw_regcache_put(rc, r);
	finish(rc, f);
}

/* The process totals (sockswitch stat) count every cache, freed ones too. */
static void test_totals(void **state)
{
	(void)state;
	struct ssw_regcache_stats t0, t1;
	ssw_regcache_totals(&t0);
	struct fake *f;
	struct ssw_regcache *rc = mk(&f, 1);
	touch(rc, 0x100000, 1, 0);
	touch(rc, 0x100000, 1, 0);
	touch(rc, 0x200000, 1, 0); /* evicts */
	ssw_regcache_invalidate(rc, A(0x200000), 1);
	finish(rc, f);
	ssw_regcache_totals(&t1);
	assert_int_equal(t1.hits - t0.hits, 1);
	assert_int_equal(t1.misses - t0.misses, 2);
	assert_int_equal(t1.registrations - t0.registrations, 2);
	assert_int_equal(t1.evictions - t0.evictions, 1);
	assert_int_equal(t1.invalidations - t0.invalidations, 1);
	assert_int_equal(t1.entries, t0.entries);
	assert_int_equal(t1.bytes, t0.bytes);
}

struct race {
	struct ssw_regcache *rc;
	int stop;
};

static void *unmapper(void *arg)
{
	struct race *rr = arg;
	while (!__atomic_load_n(&rr->stop, __ATOMIC_RELAXED))
		for (uintptr_t a = 0x100000; a < 0x108000; a += PG)
			ssw_regcache_invalidate_all(A(a), PG);
	return NULL;
}

static void test_invalidate_all_from_other_thread(void **state)
{
	(void)state;
	struct fake *f;
	struct race rr = { mk(&f, 4), 0 };
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, unmapper, &rr), 0);
	for (int i = 0; i < 20000; i++) {
		uintptr_t a = 0x100000 + (uintptr_t)(i % 8) * PG + (uintptr_t)(i % 3) * 100;
		struct ssw_reg *r = get(rr.rc, a, 200, (i & 1) ? RD : 0);
		ssw_regcache_put(rr.rc, r);
	}
	__atomic_store_n(&rr.stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	size_t held = stats(rr.rc).entries; /* the log applied first */
	assert_int_equal(held, (size_t)nlive(f));
	finish(rr.rc, f);
	assert_int_equal(f->nreg, f->ndereg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_miss_then_hit),
		cmocka_unit_test(test_covering_range_hit),
		cmocka_unit_test(test_access_upgrade_is_miss),
		cmocka_unit_test(test_page_rounding),
		cmocka_unit_test(test_merge_neighbours),
		cmocka_unit_test(test_put_keeps_entry),
		cmocka_unit_test(test_remote_put_revokes),
		cmocka_unit_test(test_generation_not_reused),
		cmocka_unit_test(test_lru_eviction_order),
		cmocka_unit_test(test_inuse_not_evicted),
		cmocka_unit_test(test_invalidate_overlapping_only),
		cmocka_unit_test(test_invalidate_inuse_dropped_at_put),
		cmocka_unit_test(test_invalidate_all_two_caches),
		cmocka_unit_test(test_flush_deregisters_all),
		cmocka_unit_test(test_free_deregisters_all),
		cmocka_unit_test(test_reg_failure),
		cmocka_unit_test(test_stats_counts),
		cmocka_unit_test(test_many_entries_sorted),
		cmocka_unit_test(test_reentrant_invalidate),
		cmocka_unit_test(test_log_lapped),
		cmocka_unit_test(test_bytes_bound),
		cmocka_unit_test(test_cache_off),
		cmocka_unit_test(test_reg_failure_evicts_idle),
		cmocka_unit_test(test_totals),
		cmocka_unit_test(test_invalidate_all_from_other_thread),
	};
	alarm(50); /* a deadlock fails the run instead of hanging it */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
