/* provfds.c — the other end of each socketpair a provider's library made, and
 * the hook for its epoll_ctl calls (provfds.h). */
#include "common/provfds.h"

#include <stdatomic.h>
#include <stdbool.h>

#define PROVFD_MAX 65536

/* partner + 1; 0: none.  Untouched pages cost nothing. */
static _Atomic int partner[PROVFD_MAX];

static bool tracked(int fd) { return fd >= 0 && fd < PROVFD_MAX; }

void ssw_provfd_pair(int a, int b)
{
	if (!tracked(a) || !tracked(b))
		return;
	atomic_store_explicit(&partner[a], b + 1, memory_order_relaxed);
	atomic_store_explicit(&partner[b], a + 1, memory_order_relaxed);
}

void ssw_provfd_closed(int fd)
{
	if (tracked(fd) && atomic_load_explicit(&partner[fd], memory_order_relaxed))
		atomic_store_explicit(&partner[fd], 0, memory_order_relaxed);
}

int ssw_provfd_partner(int fd)
{
	return tracked(fd) ? atomic_load_explicit(&partner[fd], memory_order_relaxed) - 1 : -1;
}
