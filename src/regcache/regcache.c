/* regcache.c — registrations cached by address range, so a reused buffer costs a lookup only. */
#include "regcache/regcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* Registrations cover whole pages so that neighbouring buffers on the same
 * pages hit; pinning is page-granular anyway. */
#define RC_PAGE ((uintptr_t)4096)
/* Invalidations that arrive while this thread is inside the cache (see
 * defer()); past this many, everything idle is dropped instead. */
#define RC_DEFER_MAX 8

struct rc_link {
	struct rc_link *prev, *next;
};

struct rc_entry {
	struct ssw_reg reg; /* first: callers hold &reg and put hands it back */
	/* Idle indexed entries sit on rc->lru, dropped entries still in use on
	 * rc->detached; indexed entries in use are on no list. */
	struct rc_link link;
	bool dead;       /* out of the index: freed at the last put */
	bool registered; /* flush deregisters entries under their users */
	bool exposed;    /* got for remote access since the last revoke */
};

struct ssw_regcache {
	pthread_mutex_t lock; /* invalidate_all comes from any thread */
	struct ssw_regcache_ops ops;
	void *ctx;
	size_t max;
	/* Sorted by start and never overlapping, so starts and ends are both
	 * sorted and a lookup is one binary search. */
	struct rc_entry **idx;
	size_t n, cap;
	struct rc_link lru; /* head: released most recently */
	struct rc_link detached;
	size_t nregs; /* registrations held, detached ones included: what the cap limits */
	/* Generations come from one counter per cache so that a new entry on
	 * the same range never brings an old descriptor back to life. */
	uint64_t next_gen;
	uint64_t hits, misses, evictions, invalidations, over_cap;
	struct ssw_regcache *gprev, *gnext;
};

static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ssw_regcache *caches;
static size_t ncaches; /* read without the lock: munmap must stay cheap without caches */

/* Provider callbacks and our own free() may unmap memory, and the interposed
 * munmap calls invalidate_all: taking a lock this thread already holds would
 * deadlock, so such invalidations are queued and applied once the thread
 * holds no cache lock.  initial-exec: the preload library is in the static
 * TLS block, and __tls_get_addr may allocate. */
#define RC_TLS __thread __attribute__((tls_model("initial-exec")))
static RC_TLS unsigned t_depth;
static RC_TLS bool t_draining;
static RC_TLS unsigned t_npend;
static RC_TLS bool t_pend_all;
static RC_TLS uintptr_t t_pend[RC_DEFER_MAX][2];

static void invalidate_everywhere(uintptr_t s, uintptr_t e);

static void drain_deferred(void)
{
	t_draining = true;
	while (t_npend || t_pend_all) {
		uintptr_t s, e;
		if (t_pend_all) {
			s = 0;
			e = UINTPTR_MAX;
			t_pend_all = false;
			t_npend = 0;
		} else {
			t_npend--;
			s = t_pend[t_npend][0];
			e = t_pend[t_npend][1];
		}
		invalidate_everywhere(s, e);
	}
	t_draining = false;
}

static void enter(pthread_mutex_t *m)
{
	pthread_mutex_lock(m);
	t_depth++;
}

static void leave(pthread_mutex_t *m)
{
	pthread_mutex_unlock(m);
	if (--t_depth == 0 && !t_draining && (t_npend || t_pend_all))
		drain_deferred();
}

static void defer(uintptr_t s, uintptr_t e)
{
	if (t_npend < RC_DEFER_MAX) {
		t_pend[t_npend][0] = s;
		t_pend[t_npend][1] = e;
		t_npend++;
	} else {
		t_pend_all = true;
	}
}

static void link_init(struct rc_link *l)
{
	l->prev = l->next = l;
}

static void link_del(struct rc_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
	link_init(l);
}

static void link_add_head(struct rc_link *head, struct rc_link *l)
{
	l->next = head->next;
	l->prev = head;
	head->next->prev = l;
	head->next = l;
}

static struct rc_entry *entry_of(struct rc_link *l)
{
	return (struct rc_entry *)((char *)l - offsetof(struct rc_entry, link));
}

static bool overlaps(const struct rc_entry *en, uintptr_t s, uintptr_t e)
{
	return en->reg.start < e && s < en->reg.end;
}

static size_t first_ending_after(const struct ssw_regcache *rc, uintptr_t s)
{
	size_t lo = 0, hi = rc->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (rc->idx[mid]->reg.end <= s)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Indexed entries overlapping [s, e) are idx[*lo .. *hi). */
static void overlap_run(const struct ssw_regcache *rc, uintptr_t s, uintptr_t e, size_t *lo, size_t *hi)
{
	size_t i = first_ending_after(rc, s);
	*lo = i;
	while (i < rc->n && rc->idx[i]->reg.start < e)
		i++;
	*hi = i;
}

/* Replace idx[lo .. hi) with `en`, or with nothing when en is NULL.  The
 * caller made room for the case lo == hi. */
static void index_splice(struct ssw_regcache *rc, size_t lo, size_t hi, struct rc_entry *en)
{
	size_t to = en ? lo + 1 : lo;
	if (rc->n > hi) /* idx may still be NULL when empty: memmove(NULL, ..., 0) is undefined */
		memmove(&rc->idx[to], &rc->idx[hi], (rc->n - hi) * sizeof *rc->idx);
	if (en)
		rc->idx[lo] = en;
	rc->n = rc->n - (hi - lo) + (en ? 1 : 0);
}

static void do_dereg(struct ssw_regcache *rc, struct rc_entry *en)
{
	if (!en->registered)
		return;
	en->registered = false;
	rc->nregs--;
	rc->ops.dereg(rc->ctx, &en->reg);
}

/* An idle entry already out of the index. */
static void drop_idle(struct ssw_regcache *rc, struct rc_entry *en)
{
	link_del(&en->link);
	do_dereg(rc, en);
	free(en);
}

/* Take an entry out of the index; one in use stays registered until its
 * last put, since its user may still be transferring. */
static void drop(struct ssw_regcache *rc, struct rc_entry *en)
{
	if (en->reg.inuse) {
		en->dead = true;
		link_add_head(&rc->detached, &en->link);
	} else {
		drop_idle(rc, en);
	}
}

/* Evict least recently released entries until one more registration fits.
 * `freed` idle entries overlap the miss [s, e) and go anyway: they are
 * skipped here and counted as room. */
static void make_room(struct ssw_regcache *rc, uintptr_t s, uintptr_t e, size_t freed)
{
	struct rc_link *l = rc->lru.prev;
	while (rc->nregs + 1 > rc->max + freed && l != &rc->lru) {
		struct rc_entry *en = entry_of(l);
		l = l->prev;
		if (overlaps(en, s, e))
			continue;
		size_t i = first_ending_after(rc, en->reg.start);
		index_splice(rc, i, i + 1, NULL);
		drop_idle(rc, en);
		rc->evictions++;
	}
}

static int grow(struct ssw_regcache *rc)
{
	size_t cap = rc->cap ? rc->cap * 2 : 16;
	struct rc_entry **idx = realloc(rc->idx, cap * sizeof *idx);
	if (!idx)
		return -ENOMEM;
	rc->idx = idx;
	rc->cap = cap;
	return 0;
}

static int try_reg(struct ssw_regcache *rc, struct rc_entry *en, uintptr_t s, uintptr_t e, uint32_t access)
{
	memset(&en->reg, 0, sizeof en->reg);
	en->reg.start = s;
	en->reg.end = e;
	en->reg.access = access;
	en->reg.generation = rc->next_gen++;
	if (rc->ops.reg(rc->ctx, (void *)s, e - s, access, &en->reg) != 0)
		return -ENOBUFS;
	/* The index is keyed on these: a provider must not move them. */
	en->reg.start = s;
	en->reg.end = e;
	en->reg.access = access;
	en->registered = true;
	rc->nregs++;
	return 0;
}

/* Register the miss [s, e) merged with every entry it overlaps: the index
 * must stay free of overlaps, and the merged entry keeps serving the buffers
 * those entries served. */
static int miss(struct ssw_regcache *rc, uintptr_t s, uintptr_t e, uint32_t access, struct ssw_reg **out)
{
	if (e > UINTPTR_MAX - (RC_PAGE - 1))
		return -ENOBUFS;
	uintptr_t rs = s & ~(RC_PAGE - 1), re = (e + RC_PAGE - 1) & ~(RC_PAGE - 1);
	size_t lo, hi, idle = 0;

	overlap_run(rc, rs, re, &lo, &hi);
	for (size_t i = lo; i < hi; i++)
		idle += !rc->idx[i]->reg.inuse;
	make_room(rc, rs, re, idle);
	overlap_run(rc, rs, re, &lo, &hi); /* eviction moved them */

	if (rc->n == rc->cap && grow(rc))
		return -ENOBUFS;
	struct rc_entry *en = calloc(1, sizeof *en);
	if (!en)
		return -ENOBUFS;
	link_init(&en->link);

	uintptr_t ms = rs, me = re;
	uint32_t macc = access;
	if (lo < hi) {
		ms = rc->idx[lo]->reg.start < rs ? rc->idx[lo]->reg.start : rs;
		me = rc->idx[hi - 1]->reg.end > re ? rc->idx[hi - 1]->reg.end : re;
		for (size_t i = lo; i < hi; i++)
			macc |= rc->idx[i]->reg.access;
	}
	int ret = try_reg(rc, en, ms, me, macc);
	/* A larger merged registration can fail where the buffer alone would
	 * not (pinning limits): the overlapped entries are then just replaced. */
	if (ret && (ms != rs || me != re || macc != access))
		ret = try_reg(rc, en, rs, re, access);
	if (ret) {
		free(en);
		return ret;
	}

	for (size_t i = lo; i < hi; i++)
		drop(rc, rc->idx[i]);
	index_splice(rc, lo, hi, en);
	if (rc->nregs > rc->max)
		rc->over_cap++;
	en->reg.inuse = 1;
	en->exposed = access != 0;
	*out = &en->reg;
	return 0;
}

static void invalidate_locked(struct ssw_regcache *rc, uintptr_t s, uintptr_t e)
{
	size_t lo, hi;
	overlap_run(rc, s, e, &lo, &hi);
	for (size_t i = lo; i < hi; i++)
		drop(rc, rc->idx[i]);
	index_splice(rc, lo, hi, NULL);
	rc->invalidations += hi - lo;
}

static void invalidate_everywhere(uintptr_t s, uintptr_t e)
{
	enter(&caches_lock);
	for (struct ssw_regcache *rc = caches; rc; rc = rc->gnext) {
		enter(&rc->lock);
		invalidate_locked(rc, s, e);
		leave(&rc->lock);
	}
	leave(&caches_lock);
}

/* Entries in use are deregistered too but stay allocated until their put. */
static void flush_locked(struct ssw_regcache *rc)
{
	for (size_t i = 0; i < rc->n; i++)
		drop(rc, rc->idx[i]);
	rc->n = 0;
	for (struct rc_link *l = rc->detached.next; l != &rc->detached; l = l->next)
		do_dereg(rc, entry_of(l));
}

/* [addr, addr+len) clamped to the address space; false when empty. */
static bool inval_range(void *addr, size_t len, uintptr_t *s, uintptr_t *e)
{
	*s = (uintptr_t)addr;
	*e = len > UINTPTR_MAX - *s ? UINTPTR_MAX : *s + len;
	return len != 0;
}

struct ssw_regcache *ssw_regcache_new(size_t max_entries, const struct ssw_regcache_ops *ops, void *ctx)
{
	if (!ops || !ops->reg || !ops->dereg) {
		errno = EINVAL;
		return NULL;
	}
	struct ssw_regcache *rc = calloc(1, sizeof *rc);
	if (!rc)
		return NULL;
	int err = pthread_mutex_init(&rc->lock, NULL);
	if (err) {
		free(rc);
		errno = err;
		return NULL;
	}
	rc->ops = *ops;
	rc->ctx = ctx;
	rc->max = max_entries ? max_entries : 1;
	rc->next_gen = 1;
	link_init(&rc->lru);
	link_init(&rc->detached);

	enter(&caches_lock);
	rc->gnext = caches;
	if (caches)
		caches->gprev = rc;
	caches = rc;
	__atomic_store_n(&ncaches, ncaches + 1, __ATOMIC_RELEASE);
	leave(&caches_lock);
	return rc;
}

void ssw_regcache_free(struct ssw_regcache *rc)
{
	if (!rc)
		return;
	/* Unlinked first: an invalidate_all in progress holds caches_lock, so
	 * once this returns none can reach rc. */
	enter(&caches_lock);
	if (rc->gprev)
		rc->gprev->gnext = rc->gnext;
	else
		caches = rc->gnext;
	if (rc->gnext)
		rc->gnext->gprev = rc->gprev;
	__atomic_store_n(&ncaches, ncaches - 1, __ATOMIC_RELEASE);
	leave(&caches_lock);

	enter(&rc->lock);
	flush_locked(rc);
	while (rc->detached.next != &rc->detached) {
		struct rc_entry *en = entry_of(rc->detached.next);
		link_del(&en->link);
		free(en);
	}
	free(rc->idx);
	leave(&rc->lock);
	pthread_mutex_destroy(&rc->lock);
	free(rc);
}

int ssw_regcache_get(struct ssw_regcache *rc, void *addr, size_t len, uint32_t access, struct ssw_reg **out)
{
	uintptr_t s = (uintptr_t)addr;
	if (len == 0)
		len = 1;
	if (len > UINTPTR_MAX - s)
		return -ENOBUFS;
	uintptr_t e = s + len;
	int ret = 0;

	enter(&rc->lock);
	size_t i = first_ending_after(rc, s);
	struct rc_entry *en = i < rc->n ? rc->idx[i] : NULL;
	if (en && en->reg.start <= s && e <= en->reg.end && (en->reg.access & access) == access) {
		rc->hits++;
		if (en->reg.inuse++ == 0)
			link_del(&en->link);
		if (access)
			en->exposed = true;
		*out = &en->reg;
	} else {
		rc->misses++;
		ret = miss(rc, s, e, access, out);
	}
	leave(&rc->lock);
	return ret;
}

void ssw_regcache_put(struct ssw_regcache *rc, struct ssw_reg *reg)
{
	struct rc_entry *en = (struct rc_entry *)reg;
	bool bad = false;

	if (!reg)
		return;
	enter(&rc->lock);
	if (en->reg.inuse <= 0) {
		bad = true;
	} else if (--en->reg.inuse == 0) {
		if (en->dead) {
			link_del(&en->link);
			do_dereg(rc, en);
			free(en);
		} else {
			/* Revoked only when the last user is done: another
			 * user's peer may still be transferring with the same
			 * descriptor. */
			if (en->exposed) {
				en->exposed = false;
				en->reg.generation = rc->next_gen++;
				if (rc->ops.revoke)
					rc->ops.revoke(rc->ctx, &en->reg);
			}
			link_add_head(&rc->lru, &en->link);
		}
	}
	leave(&rc->lock);
	if (bad)
		SSW_WARN_ONCE("regcache: put of a registration not in use (ignored)");
}

void ssw_regcache_invalidate(struct ssw_regcache *rc, void *addr, size_t len)
{
	uintptr_t s, e;
	if (!inval_range(addr, len, &s, &e))
		return;
	enter(&rc->lock);
	invalidate_locked(rc, s, e);
	leave(&rc->lock);
}

void ssw_regcache_flush(struct ssw_regcache *rc)
{
	enter(&rc->lock);
	flush_locked(rc);
	leave(&rc->lock);
}

void ssw_regcache_get_stats(const struct ssw_regcache *rc, struct ssw_regcache_stats *st)
{
	struct ssw_regcache *m = (struct ssw_regcache *)rc; /* the lock, not the cache, changes */
	enter(&m->lock);
	st->hits = rc->hits;
	st->misses = rc->misses;
	st->evictions = rc->evictions;
	st->invalidations = rc->invalidations;
	st->entries = rc->nregs;
	leave(&m->lock);
}

uint64_t ssw_regcache_over_cap(const struct ssw_regcache *rc)
{
	struct ssw_regcache *m = (struct ssw_regcache *)rc;
	enter(&m->lock);
	uint64_t n = rc->over_cap;
	leave(&m->lock);
	return n;
}

void ssw_regcache_invalidate_all(void *addr, size_t len)
{
	uintptr_t s, e;
	if (!inval_range(addr, len, &s, &e))
		return;
	if (t_depth) {
		defer(s, e);
		return;
	}
	if (!__atomic_load_n(&ncaches, __ATOMIC_ACQUIRE))
		return;
	invalidate_everywhere(s, e);
}
