/* kick.c — per-thread eventfds that let a local event (shutdown) wake the
 * threads of this process asleep on a switched socket (see kick.h).
 *
 * Why per thread, not per socket: a descriptor per connection would cost
 * every connection a third descriptor (README Limits), while only threads
 * that sleep need one, and only one each.  A record per such thread sits on
 * a list for ssw_kick to walk; its key says what the thread sleeps on now
 * (NULL: it does not).  A sleeper stores its key, then compares the
 * generation it read before looking; ssw_kick bumps the generation, then
 * reads the keys: with both sequentially consistent, either the sleeper
 * sees the new generation (and looks again) or the kick sees its key.
 * Kicks are rare (a shutdown), so the walk takes a lock; sleeps never do. */
#include "common/kick.h"

#include "common/forklocal.h"
#include "common/sys.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>

struct kick_rec {
	_Atomic(const void *) key; /* what the thread sleeps on, NULL: awake */
	_Atomic int efd;           /* -1: none yet (or lost to the program); set by its thread only */
	struct kick_rec *prev, *next;
};

static pthread_mutex_t kick_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kick_rec *all;
static _Atomic uint64_t gen;
static __thread struct kick_rec *me;
static pthread_key_t exit_key;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void unlink_rec(struct kick_rec *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		all = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

/* A thread leaves: its record and descriptor go. */
static void on_exit_thread(void *arg)
{
	struct kick_rec *r = arg;
	pthread_mutex_lock(&kick_lock);
	unlink_rec(r);
	pthread_mutex_unlock(&kick_lock);
	if (r->efd >= 0)
		sys_close(r->efd);
	free(r);
	me = NULL;
}

/* A forked child has only the thread that forked: the other records are
 * copies of the parent's threads, and this one's eventfd is the parent's
 * too (a kick there would wake us), so a new one is made at the next use. */
SSW_FORK_TEXT static void atfork_child(void)
{
	pthread_mutex_init(&kick_lock, NULL);
	struct kick_rec *r = all;
	while (r) {
		struct kick_rec *n = r->next;
		if (r != me)
			free(r);
		r = n;
	}
	all = me;
	if (me) {
		me->prev = me->next = NULL;
		atomic_store_explicit(&me->key, NULL, memory_order_relaxed);
		me->efd = -1; /* the parent's: not closed, the parent still uses it */
	}
}

static void init_once(void)
{
	if (pthread_key_create(&exit_key, on_exit_thread) != 0)
		exit_key = (pthread_key_t)-1;
	pthread_atfork(NULL, NULL, atfork_child);
}

static struct kick_rec *self(void)
{
	struct kick_rec *r = me;
	if (!r) {
		pthread_once(&once, init_once);
		if (exit_key == (pthread_key_t)-1 || !(r = calloc(1, sizeof *r)))
			return NULL;
		r->efd = -1;
		if (pthread_setspecific(exit_key, r) != 0) {
			free(r);
			return NULL;
		}
		pthread_mutex_lock(&kick_lock);
		r->next = all;
		if (all)
			all->prev = r;
		all = r;
		pthread_mutex_unlock(&kick_lock);
		me = r;
	}
	if (r->efd < 0)
		r->efd = ssw_fd_hide(sys_eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	return r->efd >= 0 ? r : NULL;
}

uint64_t ssw_kick_gen(void)
{
	return atomic_load(&gen);
}

int ssw_kick_arm(const void *key)
{
	struct kick_rec *r = self();
	if (!r)
		return -1;
	atomic_store(&r->key, key);
	return r->efd;
}

void ssw_kick_disarm(short revents)
{
	struct kick_rec *r = me;
	if (!r)
		return;
	atomic_store_explicit(&r->key, NULL, memory_order_relaxed);
	if (revents & POLLNVAL) {
		r->efd = -1; /* closed by the program: a new one next time */
	} else if (revents & POLLIN) {
		uint64_t v;
		(void)!sys_read(r->efd, &v, sizeof v);
	}
}

void ssw_kick(const void *key)
{
	atomic_fetch_add(&gen, 1);
	pthread_mutex_lock(&kick_lock);
	for (struct kick_rec *r = all; r; r = r->next) {
		const void *k = atomic_load(&r->key);
		int fd = atomic_load_explicit(&r->efd, memory_order_relaxed);
		if (k && (k == key || k == SSW_KICK_ANY) && fd >= 0) {
			uint64_t one = 1;
			(void)!sys_write(fd, &one, sizeof one);
		}
	}
	pthread_mutex_unlock(&kick_lock);
}
