/* lru.c — the slot order of lru.h: a doubly linked list through the
 * caller's index arrays, and a list of freed slots through the same `next`;
 * slots never taken since the reset come after those, in order. */
#include "common/lru.h"

void ssw_lru_reset(struct ssw_lru *l)
{
	l->head = l->tail = -1;
	l->n = 0;
	l->free = -1;
	l->fresh = 0;
	l->ready = 1;
}

static void link_newest(struct ssw_lru *l, int32_t i)
{
	l->prev[i] = l->tail;
	l->next[i] = -1;
	if (l->tail >= 0)
		l->next[l->tail] = i;
	else
		l->head = i;
	l->tail = i;
}

static void unlink_slot(struct ssw_lru *l, int32_t i)
{
	if (l->prev[i] >= 0)
		l->next[l->prev[i]] = l->next[i];
	else
		l->head = l->next[i];
	if (l->next[i] >= 0)
		l->prev[l->next[i]] = l->prev[i];
	else
		l->tail = l->prev[i];
}

int32_t ssw_lru_take(struct ssw_lru *l)
{
	if (!l->ready)
		ssw_lru_reset(l);
	int32_t i = l->free;
	if (i >= 0)
		l->free = l->next[i];
	else if (l->fresh < l->cap)
		i = l->fresh++;
	else
		return -1;
	link_newest(l, i);
	l->n++;
	return i;
}

void ssw_lru_drop(struct ssw_lru *l, int32_t i)
{
	unlink_slot(l, i);
	l->prev[i] = -1;
	l->next[i] = l->free;
	l->free = i;
	l->n--;
}

void ssw_lru_touch(struct ssw_lru *l, int32_t i)
{
	unlink_slot(l, i);
	link_newest(l, i);
}
