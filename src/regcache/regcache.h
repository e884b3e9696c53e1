/* regcache.h — the registration cache (seed 002): registrations of local buffers
 * stay cached after deregister, keyed by virtual address range, until the
 * mapping changes, the cache is full (LRU eviction) or the connection closes.
 *
 * One cache per endpoint.  The cache calls the provider through the two
 * callbacks; it never touches memory itself.  The session serializes its own
 * calls; an internal lock per cache also serializes them against
 * ssw_regcache_invalidate_all from any thread, so the callbacks run under that
 * lock, possibly on a thread that is not the session's: they must not call
 * back into the cache nor take a lock held around regcache calls.
 */
#ifndef SSW_REGCACHE_H
#define SSW_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

struct ssw_regcache;

/* A cached registration.  `handle` is what the provider's reg callback filled. */
struct ssw_reg {
	uintptr_t start, end;   /* registered range [start, end) */
	uint32_t access;        /* SSW_CAP_RDMA_READ / _WRITE bits, 0 = local only */
	uint64_t generation;    /* bumped each time a remote-exposed use ends */
	int inuse;              /* users between get and put */
	unsigned char handle[96];
};

struct ssw_regcache_ops {
	/* Register [addr, addr+len) for access; fill reg->handle.  0 or -errno. */
	int (*reg)(void *ctx, void *addr, size_t len, uint32_t access, struct ssw_reg *reg);
	/* Undo a registration (on eviction, invalidation or flush). */
	void (*dereg)(void *ctx, struct ssw_reg *reg);
	/* A remote-exposed use ended: the peer's old descriptor must stop working
	 * (reg->generation has already been bumped).  May be NULL. */
	void (*revoke)(void *ctx, struct ssw_reg *reg);
};

struct ssw_regcache_stats {
	uint64_t hits, misses, evictions, invalidations; /* invalidations: entries dropped */
	size_t entries; /* registrations held, dropped ones still in use included */
};

/* max_entries is a soft cap (0 counts as 1): past it, least recently released
 * entries are evicted; when all are in use a miss registers anyway. */
struct ssw_regcache *ssw_regcache_new(size_t max_entries, const struct ssw_regcache_ops *ops, void *ctx);
/* Deregisters every entry, then frees the cache. */
void ssw_regcache_free(struct ssw_regcache *rc);

/* Find a cached registration covering [addr, addr+len) with at least `access`,
 * or register one (a miss).  Returns 0 and *out (in use until put), or -ENOBUFS
 * when registration fails.  A miss registers whole 4 KiB pages, merged with the
 * cached entries it overlaps (their access included); len 0 counts as 1. */
int ssw_regcache_get(struct ssw_regcache *rc, void *addr, size_t len, uint32_t access, struct ssw_reg **out);
/* WSPDeregisterMemory: the entry stays cached; if it was exposed for remote
 * access (got with access != 0), its generation changes and revoke is called
 * when its last user puts it. */
void ssw_regcache_put(struct ssw_regcache *rc, struct ssw_reg *reg);
/* The mapping of [addr, addr+len) is about to change: drop every overlapping
 * entry not in use (entries in use are dropped at their put). */
void ssw_regcache_invalidate(struct ssw_regcache *rc, void *addr, size_t len);
/* Drop all entries (before the connection closes). */
void ssw_regcache_flush(struct ssw_regcache *rc);
void ssw_regcache_get_stats(const struct ssw_regcache *rc, struct ssw_regcache_stats *st);
/* Misses that registered beyond max_entries because every entry was in use. */
uint64_t ssw_regcache_over_cap(const struct ssw_regcache *rc);

/* Process-wide: invalidate [addr, addr+len) in every live cache.  Called by
 * the interposed munmap / mremap / madvise / brk before the kernel call.  When
 * called from inside the cache (a callback, or libc freeing for the cache), it
 * is applied as soon as this thread leaves the cache, not before returning. */
void ssw_regcache_invalidate_all(void *addr, size_t len);

#endif
