/* forkcalls.c — calls that other threads had in progress on a socket when
 * the process forked: in the child they hold nothing.
 *
 * A socket's reference word counts the calls in progress apart (sock.h).
 * The child has only the forking thread, so the calls other threads were
 * making (a poll, a blocking recv, an epoll_wait's armed members) never
 * end there; left counted, the child's close of the socket never ended
 * its connection (sem fork_poll_thread, the differential tester's seed
 * 861000052: the peer learnt of the end only at the child's exit).
 *
 * The parent's table walk before the fork lists the sockets with calls in
 * progress; the child, first thing, reads how many each had (nothing else
 * runs there yet) and drops them when its last descriptor of that socket
 * closes.  Not at the fork itself: writing each listed socket's word
 * then would cost the child a copy-on-write fault per page (65 us each on
 * this VM) even when it only execs; at the close the word is written
 * anyway.  A fork made from a signal handler that interrupted a call of
 * the forking thread itself cannot tell its own calls from the others':
 * then nothing is dropped (the connection ends at the child's exit, as
 * before).  More sockets than the list holds: the child drops the
 * others' calls of every socket at once. */
#include "switch/switch.h"

#include <stdatomic.h>

#define FORKCALLS_MAX 256

struct pending {
	struct ssw_sock *s; /* (objects are never freed: sock.c) */
	uint32_t calls;
};

static struct ssw_sock *cand[FORKCALLS_MAX]; /* the parent's walk, for the child */
static int ncand;                            /* FORKCALLS_MAX + 1: more */
static struct pending pend[FORKCALLS_MAX];   /* this process's, since it was forked */
static int npend;

void ssw_forkcalls_begin(void)
{
	ncand = 0;
}

void ssw_forkcalls_note(struct ssw_sock *s)
{
	if (!(atomic_load_explicit(&s->refs, memory_order_relaxed) >> 32) || ncand > FORKCALLS_MAX)
		return;
	for (int i = 0; i < ncand && i < FORKCALLS_MAX; i++)
		if (cand[i] == s) /* dup: one socket at two fds */
			return;
	if (ncand < FORKCALLS_MAX)
		cand[ncand] = s;
	ncand++;
}

/* Take `c` calls out of s's word: never below its descriptors'
 * references, nor below one (the closer's, at its last descriptor): a
 * count that went wrong may leak a socket, it must not free one in use. */
static void drop(struct ssw_sock *s, uint32_t c)
{
	uint64_t r = atomic_load(&s->refs);
	uint32_t n = (uint32_t)r, have = (uint32_t)(r >> 32);
	int fr = atomic_load(&s->fdrefs);
	uint32_t keep = fr > 0 ? (uint32_t)fr : 1;
	if (c > have)
		c = have;
	if (n < keep)
		return;
	if (c > n - keep)
		c = n - keep;
	if (c)
		atomic_fetch_sub(&s->refs, (uint64_t)c * SSW_SOCK_CALL);
}

static void drop_now(int fd, struct ssw_sock *s, void *arg)
{
	(void)fd, (void)arg;
	drop(s, (uint32_t)(atomic_load(&s->refs) >> 32));
}

void ssw_forkcalls_child(void)
{
	npend = 0;
	if (!ncand || ssw_sock_mine_now())
		return;
	if (ncand > FORKCALLS_MAX) {
		ssw_fdtab_each(drop_now, NULL); /* (see the file comment) */
		return;
	}
	for (int i = 0; i < ncand; i++) {
		uint32_t c = (uint32_t)(atomic_load_explicit(&cand[i]->refs, memory_order_relaxed) >> 32);
		if (c)
			pend[npend++] = (struct pending){ cand[i], c };
	}
}

void ssw_forkcalls_last_fd(struct ssw_sock *s)
{
	for (int i = 0; i < npend; i++)
		if (pend[i].s == s && pend[i].calls) {
			drop(s, pend[i].calls);
			pend[i].calls = 0;
		}
}
