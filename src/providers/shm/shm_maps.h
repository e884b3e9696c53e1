/* shm_maps.h — the acceptor's kept segment mappings (shm_seg.c): a table of
 * at most SHM_MAPS_CAP, oldest first, found by the segment's inode.  No lock
 * of its own: the caller holds shm_seg.c's seg_lock. */
#ifndef SSW_SHM_MAPS_H
#define SSW_SHM_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_MAPS_CAP 2048

struct shm_kept_map {
	void *p; /* NULL: a free slot */
	size_t size;
	uint64_t dev, ino;
	int32_t pid;  /* the connector that sent it */
	uint32_t uid;
	uint64_t t;   /* when kept */
	bool nofork;  /* marked MADV_DONTFORK at a fork */
};

/* The kept mapping of that segment for that connector: its slot, or -1. */
int32_t shm_maps_find(uint64_t dev, uint64_t ino, size_t size, int32_t pid, uint32_t uid);
struct shm_kept_map *shm_maps_at(int32_t i);
/* m joins as the newest; when the table is full the oldest leaves first,
 * copied into *evicted (evicted->p NULL when none did).  Its slot. */
int32_t shm_maps_add(const struct shm_kept_map *m, struct shm_kept_map *evicted);
/* Slot i leaves (its mapping is the caller's to unmap). */
void shm_maps_drop(int32_t i);
int32_t shm_maps_oldest(void);
int32_t shm_maps_newer(int32_t i);
int shm_maps_count(void);
/* In a forked child's fork handler: may the table hold mappings (only
 * when it is not in wipe-on-fork memory)? */
bool shm_maps_may_hold(void);
/* Empty again, nothing looked at (a forked child forgets its parent's). */
void shm_maps_reset(void);
/* Kept mappings reachable by inode: shm_maps_count(), or -1 when a chain
 * runs through a free slot or loops (tests). */
int shm_maps_chained(void);

#endif
