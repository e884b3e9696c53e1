/* shm_maps.c — the acceptor's kept segment mappings (shm_maps.h): slots in
 * an LRU order (common/lru.c) and chained from hash buckets by inode.  A
 * link is a slot + 1 everywhere (0: none), in the buckets and in the
 * chains alike. */
#include "providers/shm/shm_maps.h"

#include "common/lru.h"

#include <string.h>

#define BUCKETS 1024

static struct shm_kept_map maps[SHM_MAPS_CAP];
static int32_t hnext[SHM_MAPS_CAP];     /* the next in its bucket */
static int32_t bucket[BUCKETS];         /* the first in each */
static int32_t lru_prev[SHM_MAPS_CAP], lru_next[SHM_MAPS_CAP];
static struct ssw_lru lru = SSW_LRU(lru_prev, lru_next);

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

void shm_maps_reset(void)
{
	ssw_lru_reset(&lru);
	memset(bucket, 0, sizeof bucket);
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
