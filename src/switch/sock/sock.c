/* sock.c — creation and teardown of the switch's socket objects. */
#include "switch/switch.h"

#include "common/forklocal.h"
#include "common/log.h"
#include "switch/setup/setup.h"

#include <stdlib.h>
#include <string.h>

/* Socket objects are recycled, never freed: the fd table reads them without
 * locks (see fdtab.c), so their memory must stay valid.  The free list and
 * its lock sit in the fork-local page (common/forklocal.h): a fork-per-
 * connection server takes a socket from it and gives one back after every
 * fork, and a write to a page of its own the fork write-protected costs a
 * fault.  A forked child starts with an empty list and an unlocked lock (the
 * parent's pooled objects stay unused in its copy of the heap, never written,
 * so never copied), whatever another thread of the parent was doing. */
#define pool_lock (ssw_fl->sock_pool_lock)
#define pool (*(struct ssw_sock **)&ssw_fl->sock_pool)

struct ssw_sock *ssw_sock_new(enum ssw_state st, int fd, int family)
{
	pthread_mutex_lock(&pool_lock);
	struct ssw_sock *s = pool;
	if (s)
		pool = *(struct ssw_sock **)&s->sess;
	pthread_mutex_unlock(&pool_lock);
	if (!s)
		s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	/* refs is 0 here and no reader increments a zero count: clear the rest */
	memset((char *)s + sizeof s->refs, 0, sizeof *s - sizeof s->refs);
	atomic_init(&s->fdrefs, 0);
	pthread_mutex_init(&s->lock, NULL);
	s->state = st;
	s->fd = fd;
	s->family = family;
	s->rcvtimeo_ms = s->sndtimeo_ms = -1;
	s->proof_fd = -1;
	ssw_sock_mine(1);
	atomic_store(&s->refs, SSW_SOCK_CALL); /* the creating call's reference */
	return s;
}

void ssw_sock_destroy(struct ssw_sock *s)
{
	ssw_setup_release(s); /* its proof asks the session: before it goes */
	if (s->sess) {
		ssw_fork_guard_enter();
		if (ssw_session_last_holder(s->sess)) /* counted once, by the last holder */
			ssw_stats_account_closed(s);
		ssw_session_close(s->sess, ssw_sock_linger0(s));
		ssw_fork_guard_leave();
	}
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_lock(&pool_lock);
	*(struct ssw_sock **)&s->sess = pool;
	pool = s;
	pthread_mutex_unlock(&pool_lock);
}
