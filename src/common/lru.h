/* lru.h — an ordered set of slots in the caller's fixed arrays, oldest
 * first: a slot is taken at the newest end, dropped from anywhere, the
 * oldest found at once, and walked newest to oldest.  The caller keeps its
 * entries in arrays indexed by slot; this keeps only the order (two int32
 * arrays of the same capacity) and the free slots.  Not locked: the
 * caller's lock covers it.  A zeroed struct is an empty set that sets
 * itself up at first use. */
#ifndef SSW_COMMON_LRU_H
#define SSW_COMMON_LRU_H

#include <stdint.h>

struct ssw_lru {
	int32_t *prev, *next; /* the caller's arrays, cap entries each */
	int32_t cap;
	int32_t head, tail;   /* oldest, newest; -1 when empty */
	int32_t free;         /* freed slots, chained through next */
	int32_t fresh;        /* slots from here on were never taken since the reset */
	int32_t n;
	int32_t ready;
};

#define SSW_LRU(prev_arr, next_arr) \
	{ .prev = (prev_arr), .next = (next_arr), .cap = (int32_t)(sizeof(prev_arr) / sizeof((prev_arr)[0])) }

/* Every slot free again (the entries' contents are the caller's to drop);
 * touches none of the arrays, so that a forked child pays no page for it. */
void ssw_lru_reset(struct ssw_lru *l);
/* A free slot, made the newest; -1 when all are taken. */
int32_t ssw_lru_take(struct ssw_lru *l);
/* Slot i (taken) is free again. */
void ssw_lru_drop(struct ssw_lru *l, int32_t i);
/* Slot i (taken) becomes the newest. */
void ssw_lru_touch(struct ssw_lru *l, int32_t i);

static inline int32_t ssw_lru_oldest(const struct ssw_lru *l) { return l->ready ? l->head : -1; }
static inline int32_t ssw_lru_newest(const struct ssw_lru *l) { return l->ready ? l->tail : -1; }
static inline int32_t ssw_lru_older(const struct ssw_lru *l, int32_t i) { return l->prev[i]; }
static inline int32_t ssw_lru_newer(const struct ssw_lru *l, int32_t i) { return l->next[i]; }

#endif
