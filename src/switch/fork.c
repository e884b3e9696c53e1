/* fork.c — a switched connection survives fork(2) the way a kernel socket does.
 *
 * Sessions and endpoints live in fork-shared memory (common/shmem.c), so
 * parent and child drive one connection.  What fork must add is the count of
 * holders: each process's close lets go of its hold, and only the last one
 * ends the connection for the peer.  The count goes up just before fork and
 * back down if fork fails; a read-write lock keeps sessions from being
 * created or closed in between (the forking thread itself skips it, so an
 * atfork handler that closes a socket cannot deadlock). */
#include "switch/switch.h"

#include "common/sys.h"

#include <pthread.h>
#include <stdbool.h>

static pthread_rwlock_t fork_lock = PTHREAD_RWLOCK_INITIALIZER;
static __thread bool forking;
static unsigned fork_gen;

void ssw_fork_guard_enter(void)
{
	if (!forking)
		pthread_rwlock_rdlock(&fork_lock);
}

void ssw_fork_guard_leave(void)
{
	if (!forking)
		pthread_rwlock_unlock(&fork_lock);
}

/* A socket may sit at several fds (dup): hold its session once per fork. */
static void hold(int fd, struct ssw_sock *s, void *arg)
{
	int delta = *(int *)arg;
	(void)fd;
	if (!s->sess)
		return;
	if (delta > 0 && s->fork_gen != fork_gen) {
		s->fork_gen = fork_gen;
		ssw_session_hold(s->sess, 1);
	} else if (delta < 0 && s->fork_gen == fork_gen) {
		s->fork_gen = 0;
		ssw_session_hold(s->sess, -1);
	}
}

void ssw_fork_begin(void)
{
	pthread_rwlock_wrlock(&fork_lock);
	forking = true;
	if (++fork_gen == 0)
		fork_gen = 1;
	int up = 1;
	ssw_fdtab_each(hold, &up);
}

void ssw_fork_end(pid_t pid)
{
	forking = false;
	if (pid == 0) { /* the child: the parent's other threads are gone */
		ssw_pid_forget();
		pthread_rwlock_init(&fork_lock, NULL);
		return;
	}
	if (pid < 0) {
		int down = -1;
		ssw_fdtab_each(hold, &down);
	}
	pthread_rwlock_unlock(&fork_lock);
}
