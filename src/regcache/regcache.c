/* regcache.c — registrations cached by address range, so a reused buffer costs a lookup only. */
#include "regcache/regcache.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/params.h"
#include "common/forklocal.h"
#include "common/sys.h"

/* Registrations cover whole pages so that neighbouring buffers on the same
 * pages hit; pinning is page-granular anyway. */
#define RC_PAGE ((uintptr_t)4096)
/* Ranges the invalidation log holds: a cache that falls further behind
 * drops everything it holds. */
#define LOG_N 512u
/* Yields a reader waits for a writer between taking a log slot and filling it
 * (a few instructions, unless it was preempted there: then the reader drops
 * everything it holds rather than wait). */
#define LOG_WAIT 100

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
	pid_t pid;       /* the process that made it: a forked child leaves its parent's alone */
};

struct ssw_regcache {
	pthread_mutex_t lock;
	struct ssw_regcache_ops ops;
	void *ctx;
	size_t max, max_bytes;
	/* Sorted by start and never overlapping, so starts and ends are both
	 * sorted and a lookup is one binary search. */
	struct rc_entry **idx;
	size_t n, cap;
	struct rc_link lru; /* head: released most recently */
	struct rc_link detached;
	size_t nregs, bytes; /* registrations held (detached ones included) and their bytes: what the bounds limit */
	/* Generations come from one counter per cache so that a new entry on
	 * the same range never brings an old descriptor back to life. */
	uint64_t next_gen;
	uint64_t log_pos; /* the invalidation log up to here is applied */
	uint64_t hits, misses, evictions, invalidations, regs, over_cap;
	struct ssw_regcache *gprev, *gnext;
};

/* ---- process-wide state --------------------------------------------------- */

static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ssw_regcache *caches;
static _Atomic size_t ncaches; /* without caches an unmap costs one load */

static struct {
	_Atomic uint64_t hits, misses, evictions, invalidations, regs;
	_Atomic int64_t entries, bytes;
} tot;

/* The invalidation log: a ring of ranges, each slot a seqlock (odd while its
 * writer fills it, 2q+2 once range q is in).  Writers never wait. */
static struct {
	_Atomic uint64_t seq;
	_Atomic uintptr_t s, e;
} rlog[LOG_N];
static _Atomic uint64_t log_head;

static atomic_bool monitored;

/* ---- lists and index ------------------------------------------------------- */

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

/* ---- registrations --------------------------------------------------------- */

static size_t span(const struct rc_entry *en)
{
	return en->reg.end - en->reg.start;
}

static void do_dereg(struct ssw_regcache *rc, struct rc_entry *en)
{
	if (!en->registered)
		return;
	en->registered = false;
	rc->nregs--;
	rc->bytes -= span(en);
	atomic_fetch_sub(&tot.entries, 1);
	atomic_fetch_sub(&tot.bytes, (int64_t)span(en));
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

static bool over_bounds(const struct ssw_regcache *rc, size_t more_regs, size_t more_bytes, size_t freed_regs,
			size_t freed_bytes)
{
	if (rc->nregs + more_regs > rc->max + freed_regs)
		return true;
	return rc->max_bytes && rc->bytes + more_bytes > rc->max_bytes + freed_bytes;
}

/* One idle entry out of the index and the cache, counted. */
static void evict(struct ssw_regcache *rc, struct rc_entry *en)
{
	size_t i = first_ending_after(rc, en->reg.start);
	index_splice(rc, i, i + 1, NULL);
	drop_idle(rc, en);
	rc->evictions++;
	atomic_fetch_add(&tot.evictions, 1);
}

/* Evict least recently released entries until one more registration of
 * `len` bytes fits.  Idle entries overlapping the miss [s, e) go anyway
 * (freed_*): they are skipped here and counted as room. */
static void make_room(struct ssw_regcache *rc, uintptr_t s, uintptr_t e, size_t freed, size_t freed_bytes)
{
	struct rc_link *l = rc->lru.prev;
	while (over_bounds(rc, 1, e - s, freed, freed_bytes) && l != &rc->lru) {
		struct rc_entry *en = entry_of(l);
		l = l->prev;
		if (overlaps(en, s, e))
			continue;
		evict(rc, en);
	}
}

/* Every idle entry outside [s, e) goes (a registration failed: pinning
 * limits are what it most likely met). */
static size_t evict_idle(struct ssw_regcache *rc, uintptr_t s, uintptr_t e)
{
	size_t k = 0;
	for (struct rc_link *l = rc->lru.prev; l != &rc->lru;) {
		struct rc_entry *en = entry_of(l);
		l = l->prev;
		if (overlaps(en, s, e))
			continue;
		evict(rc, en);
		k++;
	}
	return k;
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
	rc->bytes += e - s;
	rc->regs++;
	atomic_fetch_add(&tot.regs, 1);
	atomic_fetch_add(&tot.entries, 1);
	atomic_fetch_add(&tot.bytes, (int64_t)(e - s));
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
	size_t lo, hi, idle = 0, idle_bytes = 0;

	/* too large to keep, or the cache is off: it will serve this use only,
	 * and takes nothing cached with it */
	bool keep = rc->max && (!rc->max_bytes || re - rs <= rc->max_bytes);
	overlap_run(rc, rs, re, &lo, &hi);
	for (size_t i = lo; i < hi; i++)
		if (!rc->idx[i]->reg.inuse) {
			idle++;
			idle_bytes += span(rc->idx[i]);
		}
	if (keep)
		make_room(rc, rs, re, idle, idle_bytes);
	overlap_run(rc, rs, re, &lo, &hi); /* eviction moved them */

	if (rc->n == rc->cap && grow(rc))
		return -ENOBUFS;
	struct rc_entry *en = calloc(1, sizeof *en);
	if (!en)
		return -ENOBUFS;
	link_init(&en->link);
	en->pid = ssw_pid();

	uintptr_t ms = rs, me = re;
	uint32_t macc = access;
	if (lo < hi && keep) {
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
	/* ... and so can one beside many idle pinned entries */
	if (ret && evict_idle(rc, rs, re))
		ret = try_reg(rc, en, rs, re, access);
	if (ret) {
		free(en);
		return ret;
	}
	en->reg.inuse = 1;
	en->exposed = access != 0;
	if (keep) {
		overlap_run(rc, en->reg.start, en->reg.end, &lo, &hi);
		for (size_t i = lo; i < hi; i++)
			drop(rc, rc->idx[i]);
		index_splice(rc, lo, hi, en);
	} else {
		en->dead = true;
		link_add_head(&rc->detached, &en->link);
	}
	if (keep && over_bounds(rc, 0, 0, 0, 0))
		rc->over_cap++;
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
	atomic_fetch_add(&tot.invalidations, hi - lo);
}

/* ---- the invalidation log -------------------------------------------------- */

/* Read range q of the log: 1 and the range, 0 not written yet, -1 gone
 * (overwritten by a later lap). */
static int log_read(uint64_t q, uintptr_t *s, uintptr_t *e)
{
	uint64_t want = 2 * q + 2;
	__typeof__(&rlog[0]) l = &rlog[q % LOG_N];
	uint64_t a = atomic_load_explicit(&l->seq, memory_order_acquire);
	if (a != want)
		return a > want ? -1 : 0;
	*s = atomic_load_explicit(&l->s, memory_order_relaxed);
	*e = atomic_load_explicit(&l->e, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&l->seq, memory_order_relaxed) == want ? 1 : -1;
}

/* Apply what was logged since this cache last looked (its lock held). */
static void sync_locked(struct ssw_regcache *rc)
{
	uint64_t head = atomic_load_explicit(&log_head, memory_order_acquire);
	if (head == rc->log_pos)
		return;
	bool all = head - rc->log_pos > LOG_N;
	for (uint64_t q = rc->log_pos; q < head && !all; q++) {
		uintptr_t s, e;
		int r = 0;
		/* a writer between taking its slot and filling it: a few
		 * instructions, unless it was preempted there */
		for (int k = 0; k < LOG_WAIT && (r = log_read(q, &s, &e)) == 0; k++)
			sched_yield();
		if (r == 1)
			invalidate_locked(rc, s, e);
		else
			all = true; /* lapped, or never filled: nothing can be trusted */
	}
	if (all)
		invalidate_locked(rc, 0, UINTPTR_MAX);
	rc->log_pos = head;
}

void ssw_regcache_invalidate_all(void *addr, size_t len)
{
	if (!len || !atomic_load_explicit(&ncaches, memory_order_acquire))
		return;
	uintptr_t s = (uintptr_t)addr, e = len > UINTPTR_MAX - s ? UINTPTR_MAX : s + len;
	uint64_t q = atomic_fetch_add_explicit(&log_head, 1, memory_order_acq_rel);
	__typeof__(&rlog[0]) l = &rlog[q % LOG_N];
	atomic_store_explicit(&l->seq, 2 * q + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&l->s, s, memory_order_relaxed);
	atomic_store_explicit(&l->e, e, memory_order_relaxed);
	atomic_store_explicit(&l->seq, 2 * q + 2, memory_order_release);
}

/* ---- the cache's calls -------------------------------------------------------- */

/* Entries in use are deregistered too but stay allocated until their put. */
static void flush_locked(struct ssw_regcache *rc)
{
	for (size_t i = 0; i < rc->n; i++)
		drop(rc, rc->idx[i]);
	rc->n = 0;
	for (struct rc_link *l = rc->detached.next; l != &rc->detached; l = l->next)
		do_dereg(rc, entry_of(l));
}

/* A forked child starts every cache empty: the registrations belong to the
 * parent's transport state (its provider's, not copied with the memory in
 * any usable way), a thread of the parent may have been inside a cache, and
 * the child's memory will soon differ.  Its copies of the entries are left
 * alone (leaked), and puts of them ignored (rc_entry.pid). */
SSW_FORK_TEXT static void forked_child(void)
{
	pthread_mutex_init(&caches_lock, NULL);
	for (struct ssw_regcache *rc = caches; rc; rc = rc->gnext) {
		pthread_mutex_init(&rc->lock, NULL);
		rc->n = 0;
		link_init(&rc->lru);
		link_init(&rc->detached);
		atomic_fetch_sub(&tot.entries, (int64_t)rc->nregs);
		atomic_fetch_sub(&tot.bytes, (int64_t)rc->bytes);
		rc->nregs = rc->bytes = 0;
		rc->log_pos = atomic_load(&log_head);
	}
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_install(void)
{
	pthread_atfork(NULL, NULL, forked_child);
}

struct ssw_regcache *ssw_regcache_new(size_t max_entries, size_t max_bytes, const struct ssw_regcache_ops *ops,
				      void *ctx)
{
	pthread_once(&atfork_once, atfork_install);
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
	rc->max = max_entries;
	rc->max_bytes = max_bytes;
	rc->next_gen = 1;
	link_init(&rc->lru);
	link_init(&rc->detached);

	pthread_mutex_lock(&caches_lock);
	/* ranges logged before it existed concern none of its entries */
	rc->log_pos = atomic_load(&log_head);
	rc->gnext = caches;
	if (caches)
		caches->gprev = rc;
	caches = rc;
	atomic_fetch_add(&ncaches, 1);
	pthread_mutex_unlock(&caches_lock);
	return rc;
}

void ssw_regcache_free(struct ssw_regcache *rc)
{
	if (!rc)
		return;
	pthread_mutex_lock(&caches_lock);
	if (rc->gprev)
		rc->gprev->gnext = rc->gnext;
	else
		caches = rc->gnext;
	if (rc->gnext)
		rc->gnext->gprev = rc->gprev;
	atomic_fetch_sub(&ncaches, 1);
	pthread_mutex_unlock(&caches_lock);

	pthread_mutex_lock(&rc->lock);
	flush_locked(rc);
	while (rc->detached.next != &rc->detached) {
		struct rc_entry *en = entry_of(rc->detached.next);
		link_del(&en->link);
		free(en);
	}
	free(rc->idx);
	pthread_mutex_unlock(&rc->lock);
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

	pthread_mutex_lock(&rc->lock);
	sync_locked(rc);
	size_t i = first_ending_after(rc, s);
	struct rc_entry *en = i < rc->n ? rc->idx[i] : NULL;
	if (en && en->reg.start <= s && e <= en->reg.end && (en->reg.access & access) == access) {
		rc->hits++;
		atomic_fetch_add(&tot.hits, 1);
		if (en->reg.inuse++ == 0)
			link_del(&en->link);
		if (access)
			en->exposed = true;
		*out = &en->reg;
	} else {
		rc->misses++;
		atomic_fetch_add(&tot.misses, 1);
		ret = miss(rc, s, e, access, out);
	}
	pthread_mutex_unlock(&rc->lock);
	return ret;
}

void ssw_regcache_put(struct ssw_regcache *rc, struct ssw_reg *reg)
{
	struct rc_entry *en = (struct rc_entry *)reg;
	bool bad = false;

	if (!reg || en->pid != ssw_pid())
		return; /* made before a fork: the parent's (forked_child) */
	pthread_mutex_lock(&rc->lock);
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
	pthread_mutex_unlock(&rc->lock);
	if (bad)
		SSW_WARN_ONCE("regcache: put of a registration not in use (ignored)");
}

void ssw_regcache_invalidate(struct ssw_regcache *rc, void *addr, size_t len)
{
	if (!len)
		return;
	uintptr_t s = (uintptr_t)addr, e = len > UINTPTR_MAX - s ? UINTPTR_MAX : s + len;
	pthread_mutex_lock(&rc->lock);
	invalidate_locked(rc, s, e);
	pthread_mutex_unlock(&rc->lock);
}

void ssw_regcache_flush(struct ssw_regcache *rc)
{
	pthread_mutex_lock(&rc->lock);
	flush_locked(rc);
	rc->log_pos = atomic_load(&log_head); /* nothing left for the log to concern */
	pthread_mutex_unlock(&rc->lock);
}

void ssw_regcache_sync(struct ssw_regcache *rc)
{
	pthread_mutex_lock(&rc->lock);
	sync_locked(rc);
	pthread_mutex_unlock(&rc->lock);
}

void ssw_regcache_get_stats(struct ssw_regcache *rc, struct ssw_regcache_stats *st)
{
	pthread_mutex_lock(&rc->lock);
	sync_locked(rc);
	st->hits = rc->hits;
	st->misses = rc->misses;
	st->evictions = rc->evictions;
	st->invalidations = rc->invalidations;
	st->registrations = rc->regs;
	st->entries = rc->nregs;
	st->bytes = rc->bytes;
	pthread_mutex_unlock(&rc->lock);
}

uint64_t ssw_regcache_over_cap(struct ssw_regcache *rc)
{
	pthread_mutex_lock(&rc->lock);
	uint64_t n = rc->over_cap;
	pthread_mutex_unlock(&rc->lock);
	return n;
}

void ssw_regcache_totals(struct ssw_regcache_stats *st)
{
	st->hits = atomic_load(&tot.hits);
	st->misses = atomic_load(&tot.misses);
	st->evictions = atomic_load(&tot.evictions);
	st->invalidations = atomic_load(&tot.invalidations);
	st->registrations = atomic_load(&tot.regs);
	int64_t n = atomic_load(&tot.entries), b = atomic_load(&tot.bytes);
	st->entries = n > 0 ? (size_t)n : 0;
	st->bytes = b > 0 ? (size_t)b : 0;
}

/* ---- settings ------------------------------------------------------------------ */

void ssw_regcache_set_monitored(bool on)
{
	atomic_store(&monitored, on);
}

bool ssw_regcache_monitored(void)
{
	return atomic_load(&monitored);
}

bool ssw_regcache_wanted(void)
{
	return ssw_param_choice(SSW_P_REGCACHE) != 0 && ssw_regcache_monitored();
}

void ssw_regcache_bounds(size_t *max_entries, size_t *max_bytes)
{
	bool on = ssw_regcache_wanted();
	*max_entries = on ? SSW_REGCACHE_ENTRIES : 0;
	*max_bytes = on ? (size_t)ssw_param_num(SSW_P_REGCACHE_MAX) : 0;
}
