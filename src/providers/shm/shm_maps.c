/* shm_maps.c — the acceptor's kept segment mappings (shm_maps.h): slots in
 * an LRU order (common/lru.c) and chained from hash buckets by inode.  A
 * link is a slot + 1 everywhere (0: none), in the buckets and in the
 * chains alike.
 *
 * The table lives in wipe-on-fork memory (common/forklocal.h): a
 * fork-per-connection server takes a mapping out and puts one back at
 * every request, and in a page a fork write-protected each of those writes
 * cost a copy-on-write fault (65 us here) per page touched; a child starts
 * with an empty table, which it would have emptied anyway (its kept
 * mappings are not inherited).  Zeroed, every field means "empty". */
#include "providers/shm/shm_maps.h"

#include "common/forklocal.h"
#include "common/lru.h"

#include <string.h>

#define BUCKETS 1024

struct maps_state {
	struct shm_kept_map maps_[SHM_MAPS_CAP];
	int32_t hnext_[SHM_MAPS_CAP]; /* the next in its bucket */
	int32_t bucket_[BUCKETS];     /* the first in each */
	int32_t lru_prev[SHM_MAPS_CAP], lru_next[SHM_MAPS_CAP];
	struct ssw_lru lru_;
};

static struct maps_state early; /* if no wipe-on-fork memory can be had */
static struct maps_state *st;

/* The caller holds seg_lock. */
static struct maps_state *S(void)
{
	if (!st) {
		st = ssw_wipeonfork_alloc(sizeof *st);
		if (!st)
			st = &early;
	}
	if (!st->lru_.prev) /* new, or wiped by a fork */
		st->lru_ = (struct ssw_lru)SSW_LRU(st->lru_prev, st->lru_next);
	return st;
}

#define maps (S()->maps_)
#define hnext (S()->hnext_)
#define bucket (S()->bucket_)
#define lru (S()->lru_)

/* Fibonacci hashing: consecutive inodes (memfds made one after another)
 * land far apart */
static uint32_t bucket_of(uint64_t ino) { return (uint32_t)((ino * 0x9e3779b97f4a7c15ull) >> 54) % BUCKETS; }

int32_t shm_maps_find(uint64_t dev, uint64_t ino, size_t size, int32_t pid, uint32_t uid)
{
	for (int32_t k = bucket[bucket_of(ino)]; k; k = hnext[k - 1]) {
		const struct shm_kept_map *m = &maps[k - 1];
		if (m->dev == dev && m->ino == ino && m->size == size && m->pid == pid && m->uid == uid)
			return k - 1;
	}
	return -1;
}

struct shm_kept_map *shm_maps_at(int32_t i) { return &maps[i]; }

void shm_maps_drop(int32_t i)
{
	int32_t *link = &bucket[bucket_of(maps[i].ino)];
	while (*link && *link - 1 != i)
		link = &hnext[*link - 1];
	if (*link)
		*link = hnext[i];
	maps[i].p = NULL;
	ssw_lru_drop(&lru, i);
}

int32_t shm_maps_add(const struct shm_kept_map *m, struct shm_kept_map *evicted)
{
	evicted->p = NULL;
	int32_t i = ssw_lru_take(&lru);
	if (i < 0) {
		i = ssw_lru_oldest(&lru);
		*evicted = maps[i];
		shm_maps_drop(i);
		i = ssw_lru_take(&lru);
	}
	uint32_t b = bucket_of(m->ino);
	maps[i] = *m;
	hnext[i] = bucket[b];
	bucket[b] = i + 1;
	return i;
}

int32_t shm_maps_oldest(void) { return ssw_lru_oldest(&lru); }
int32_t shm_maps_newer(int32_t i) { return ssw_lru_newer(&lru, i); }
int shm_maps_count(void) { return lru.n; }

/* In a forked child, without touching the table: one in wipe-on-fork
 * memory is empty there (a look at it would cost the child two page
 * faults, and this code's page a third). */
SSW_FORK_TEXT bool shm_maps_may_hold(void)
{
	return st == &early && early.lru_.n;
}

void shm_maps_reset(void)
{
	ssw_lru_reset(&lru);
	memset(bucket, 0, sizeof S()->bucket_);
}

int shm_maps_chained(void)
{
	int n = 0;
	for (int b = 0; b < BUCKETS; b++)
		for (int32_t k = bucket[b]; k; k = hnext[k - 1]) {
			if (k > SHM_MAPS_CAP || !maps[k - 1].p || n >= SHM_MAPS_CAP)
				return -1;
			n++;
		}
	return n;
}
