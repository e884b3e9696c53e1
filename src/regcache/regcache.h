/* regcache.h — the registration cache (seed 002): registrations of local
 * buffers stay cached after their last user puts them back, keyed by virtual
 * address range, until the mapping behind them changes, the cache is full
 * (least recently used first) or its owner flushes it (before the domain or
 * connection it serves closes).
 *
 * The cache calls its owner (a provider) through the callbacks; it never
 * touches memory itself.  Calls on one cache are serialized by its lock, and
 * the callbacks run under it: they must not call back into the same cache.
 *
 * Invalidation: ssw_regcache_invalidate_all() is what the memory hooks
 * (common/memhook.h) call before a mapping changes, from any thread and from
 * inside the C library's malloc with its locks held.  It takes no lock and
 * allocates nothing: it appends the range to a process-wide log.  Every
 * cache applies the log before its next lookup (and before reporting its
 * counters): an entry overlapping a logged range is taken out of the index
 * (deregistered at once when idle, at its last put when in use), so no
 * lookup made after the unmap returned can hit it.  A log lapped by more
 * ranges than it holds drops every entry of the caches that fell behind. */
#ifndef SSW_REGCACHE_H
#define SSW_REGCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ssw_regcache;

/* A cached registration.  `handle` is what the owner's reg callback filled. */
struct ssw_reg {
	uintptr_t start, end;   /* registered range [start, end), whole pages */
	uint32_t access;        /* SSW_CAP_RDMA_READ / _WRITE: exposed to the peer; 0: local only (merged entries: the union) */
	uint64_t generation;    /* unique per registration in this cache; bumped when a remote-exposed use ends */
	int inuse;              /* users between get and put */
	unsigned char handle[96];
};

struct ssw_regcache_ops {
	/* Register [addr, addr+len) for access; fill reg->handle.  0 or -errno. */
	int (*reg)(void *ctx, void *addr, size_t len, uint32_t access, struct ssw_reg *reg);
	/* Undo a registration (on eviction, invalidation or flush). */
	void (*dereg)(void *ctx, struct ssw_reg *reg);
	/* For owners whose remote access can be withdrawn while the registration
	 * stays (memory windows): the last use of an entry got with access != 0
	 * ended; its generation has been bumped.  May be NULL.  (The fabric
	 * provider keys each exposure separately and gets its cached
	 * registrations with access 0: libfabric has no memory windows.) */
	void (*revoke)(void *ctx, struct ssw_reg *reg);
};

struct ssw_regcache_stats {
	uint64_t hits, misses, evictions, invalidations; /* invalidations: entries dropped for a mapping change */
	uint64_t registrations;                           /* reg callbacks that succeeded */
	size_t entries;                                   /* registrations held, dropped ones still in use included */
	size_t bytes;                                     /* ... and the bytes they cover */
};

/* max_entries and max_bytes (0: no byte bound) bound what stays registered:
 * past either, least recently released entries are evicted; a miss whose
 * every candidate is in use registers anyway (counted: over_cap), and one
 * larger than max_bytes alone is registered for its use only.  max_entries
 * 0: nothing stays cached (every last put deregisters): the cache off. */
struct ssw_regcache *ssw_regcache_new(size_t max_entries, size_t max_bytes, const struct ssw_regcache_ops *ops,
				      void *ctx);
/* Deregisters every entry, then frees the cache. */
void ssw_regcache_free(struct ssw_regcache *rc);

/* Find a cached registration covering [addr, addr+len) with at least
 * `access`, or register one (a miss).  Returns 0 and *out (in use until
 * put), or -ENOBUFS when registration fails.  A miss registers whole 4 KiB
 * pages, merged with the cached entries it overlaps (their access
 * included); len 0 counts as 1. */
int ssw_regcache_get(struct ssw_regcache *rc, void *addr, size_t len, uint32_t access, struct ssw_reg **out);
/* WSPDeregisterMemory: the entry stays cached (unless the cache is off or
 * the entry was invalidated meanwhile). */
void ssw_regcache_put(struct ssw_regcache *rc, struct ssw_reg *reg);
/* The mapping of [addr, addr+len) is about to change: drop every overlapping
 * entry of this cache now (entries in use are dropped at their put). */
void ssw_regcache_invalidate(struct ssw_regcache *rc, void *addr, size_t len);
/* Drop all entries (before the connection or domain closes). */
void ssw_regcache_flush(struct ssw_regcache *rc);
/* Apply the invalidation log now (get and get_stats do it themselves). */
void ssw_regcache_sync(struct ssw_regcache *rc);
void ssw_regcache_get_stats(struct ssw_regcache *rc, struct ssw_regcache_stats *st);
/* Misses that registered beyond the bounds because every entry was in use. */
uint64_t ssw_regcache_over_cap(struct ssw_regcache *rc);

/* Process-wide: the mapping of [addr, addr+len) is about to change (see the
 * top of this file: lock-free, any thread, any context). */
void ssw_regcache_invalidate_all(void *addr, size_t len);

/* Every cache of this process since it started (a forked child starts from
 * its parent's counts), for `sockswitch stat`; caches already freed included. */
void ssw_regcache_totals(struct ssw_regcache_stats *st);

/* The settings: SOCKSWITCH_REGCACHE (on unless 0) and whether the memory
 * hooks report mapping changes here; a cache is only worth its staleness
 * risk with both.  Owners create their caches with max_entries 0 otherwise. */
bool ssw_regcache_wanted(void);
/* The memory hooks are live in this process (set by whoever installed them). */
void ssw_regcache_set_monitored(bool on);
bool ssw_regcache_monitored(void);
/* Bounds for a new cache from the settings: SOCKSWITCH_REGCACHE_MAX bytes,
 * SSW_REGCACHE_ENTRIES entries (0, 0 when !ssw_regcache_wanted()). */
#define SSW_REGCACHE_ENTRIES 256
void ssw_regcache_bounds(size_t *max_entries, size_t *max_bytes);

#endif
