/* fork.c — a switched connection survives fork(2) the way a kernel socket does.
 *
 * Sessions and endpoints live in fork-shared memory (common/shmem.c), so
 * parent and child drive one connection.  What fork must add is the count of
 * holders: each process's close lets go of its hold, and only the last one
 * ends the connection for the peer.  The count goes up just before fork and
 * back down if fork fails; a read-write lock keeps sessions from being
 * created or closed in between (the forking thread itself skips it, so an
 * atfork handler that closes a socket cannot deadlock).
 *
 * A provider without SSW_CAP_SHARED_CONTEXT (fabric) keeps its endpoints in
 * one process: its listeners cannot be shared, so the child closes its
 * copies, and the parent closes its own too (before the fork, so that no
 * copy outlives it) unless it has accepted on (or polled) the socket: a
 * fork-per-connection server goes on listening there
 * (closing at every fork reset the connects in flight, whose fabric
 * connections the listener had already taken).  A process whose copies
 * went listens again on its own when it first accepts or polls there
 * (setup/listen.c): a pre-forking master's workers each have their own
 * provider listener on the same port, and the master, which never
 * accepts, none.  The listeners' locks are taken before fork, so that no thread of
 * the parent is inside one of them when the child is made, and released in
 * both processes after the close.
 *
 * What a fork costs here is mostly page faults (forklocal.h): the lock, the
 * generation and the forking thread live in the fork-local page, so that
 * neither process writes a page of ours the fork write-protected, and the
 * child does nothing at all unless a private listener must go. */
#include "switch/switch.h"

#include "switch/setup/setup.h"

#include "common/forklocal.h"
#include "common/kick.h"
#include "common/log.h"
#include "common/sys.h"
#include "switch/stat/statreg.h"

#include <pthread.h>
#include <stdbool.h>

#define fork_lock (ssw_fl->fork_lock)
/* Written once, before this process's first fork: its children inherit it. */
static bool forked_ever;

/* The thread inside fork() takes no guard: an atfork handler of the
 * application's may close a socket. */
static bool forking(void)
{
	pthread_t t = __atomic_load_n(&ssw_fl->forking, __ATOMIC_RELAXED);
	return t && pthread_equal(t, pthread_self());
}

void ssw_fork_guard_enter(void)
{
	if (!forking())
		pthread_rwlock_rdlock(&fork_lock);
}

void ssw_fork_guard_leave(void)
{
	if (!forking())
		pthread_rwlock_unlock(&fork_lock);
}

/* A socket may sit at several fds (dup): hold its session once per fork.
 * The generation counts this process's forks (a child's starts at zero
 * again), so a fork is named by the pid too. */
static void hold(int fd, struct ssw_sock *s, void *arg)
{
	int delta = *(int *)arg;
	(void)fd;
	if (!s->sess)
		return;
	pid_t me = ssw_pid();
	bool this_fork = s->fork_gen == ssw_fl->fork_gen && s->fork_pid == me;
	if (delta > 0 && !this_fork) {
		s->fork_gen = ssw_fl->fork_gen;
		s->fork_pid = me;
		ssw_session_hold(s->sess, 1);
	} else if (delta < 0 && this_fork) {
		s->fork_gen = 0;
		ssw_session_hold(s->sess, -1);
	}
}

/* Listeners with a private provider, locked across one fork. */
#define PRIVATE_MAX 256
static struct ssw_sock *priv_ls[PRIVATE_MAX];
static int npriv;

static void find_private(int fd, struct ssw_sock *s, void *arg)
{
	(void)fd, (void)arg;
	if (s->state != SSW_ST_LISTENING || !ssw_setup_listener_has_private(s) || npriv >= PRIVATE_MAX)
		return;
	for (int i = 0; i < npriv; i++)
		if (priv_ls[i] == s) /* dup: one socket at two fds */
			return;
	ssw_sock_ref(s); /* the table's reference keeps it above zero */
	priv_ls[npriv++] = s;
}

/* One walk of the table before the fork: holds, private listeners, calls. */
static void before_fork(int fd, struct ssw_sock *s, void *arg)
{
	int up = 1;
	(void)arg;
	hold(fd, s, &up);
	find_private(fd, s, NULL);
	ssw_forkcalls_note(s);
}

/* Before fork, in the parent: the listeners it does not keep (it never
 * accepted there) go now, so that the child never holds them either.
 * Closed after the fork in both, they lived on until the later of the two
 * closes: a connect in between reached a listener nobody would accept
 * from, and was reset when the last copy went. */
static char early_names[64];
static int early_n;

static void drop_private_early(void)
{
	early_names[0] = '\0';
	early_n = 0;
	for (int i = 0; i < npriv; i++)
		if (__atomic_load_n(&priv_ls[i]->looked_by, __ATOMIC_RELAXED) != ssw_pid())
			early_n += ssw_setup_listener_drop_private(priv_ls[i], early_names, sizeof early_names) > 0;
}

/* After fork, in each process: close (the child: what the parent kept),
 * unlock, let go. */
static void drop_private(bool parent)
{
	for (int i = 0; i < npriv; i++) {
		if (!parent)
			(void)ssw_setup_listener_drop_private(priv_ls[i], NULL, 0);
		pthread_mutex_unlock(&priv_ls[i]->lock);
	}
	for (int i = 0; i < npriv; i++)
		ssw_sock_unref(priv_ls[i]);
	if (npriv)
		npriv = 0;
	if (early_n && parent)
		SSW_INFO("fork: %d listener(s) stop listening on %s in this process (its connections cannot be shared "
			 "between processes) until it accepts or polls there itself; a process that does (a forked "
			 "worker) listens on its own", early_n, early_names);
}

bool ssw_forked(void)
{
	return __atomic_load_n(&forked_ever, __ATOMIC_RELAXED);
}

void ssw_fork_begin(void)
{
	ssw_statreg_fork_begin(); /* first: statreg.c says why */
	ssw_trim_fork_begin();    /* the same for the housekeeper's looks (trim.c) */
	ssw_swap_fork_begin();    /* and the swap helper's (swap_helper.c) */
	pthread_rwlock_wrlock(&fork_lock);
	__atomic_store_n(&ssw_fl->forking, pthread_self(), __ATOMIC_RELAXED);
	if (!forked_ever)
		__atomic_store_n(&forked_ever, true, __ATOMIC_RELAXED);
	if (++ssw_fl->fork_gen == 0)
		ssw_fl->fork_gen = 1;
	ssw_forkcalls_begin();
	ssw_fdtab_each(before_fork, NULL); /* npriv is 0 between forks */
	for (int i = 0; i < npriv; i++)
		pthread_mutex_lock(&priv_ls[i]->lock);
	drop_private_early();
	ssw_epoll_fork_begin(); /* last: the child's lock is a fresh one */
}

/* After a fork, in the parent: a thread asleep on a connection the child
 * now shares slept as the one process driving it, on the transport's
 * doorbell alone; once the child takes control, the peer's news reaches
 * the child's reads and rings nothing here (soak seed 866200343: a thread
 * in epoll_wait since before the fork missed the peer's reset).  Woken,
 * it looks again and sleeps as sharers do (in naps: session.h). */
static void wake_sharers(int fd, struct ssw_sock *s, void *arg)
{
	(void)arg;
	if (s->fd != fd || s->state != SSW_ST_CONNECTED || !s->sess || !ssw_session_swap_shared(s->sess))
		return;
	ssw_kick(s->sess);
	ssw_epoll_touch(s);
}

SSW_FORK_TEXT void ssw_fork_end(pid_t pid)
{
	if (pid == 0) {
		/* the child: the parent's other threads are gone; its pid,
		 * counters, registry handle and locks are zero already (the
		 * fork-local page) */
		ssw_forkcalls_child(); /* other threads' calls: none here */
		if (npriv)
			drop_private(false);
		ssw_statreg_fork_end(true);
		return;
	}
	__atomic_store_n(&ssw_fl->forking, (pthread_t)0, __ATOMIC_RELAXED);
	ssw_epoll_fork_end();
	/* who may still map what this process closes later (shm_lend.c) */
	ssw_fl->child_pid[ssw_fl->fork_gen % SSW_FORK_PIDS] = pid > 0 ? pid : 0;
	if (pid < 0) {
		int down = -1;
		ssw_fdtab_each(hold, &down);
		for (int i = 0; i < npriv; i++) { /* no fork: those kept stay, the others come back at the next accept */
			pthread_mutex_unlock(&priv_ls[i]->lock);
			ssw_sock_unref(priv_ls[i]);
		}
		npriv = 0;
	} else if (npriv) {
		drop_private(true);
	}
	pthread_rwlock_unlock(&fork_lock);
	ssw_swap_fork_end(false);
	ssw_trim_fork_end(false);
	ssw_statreg_fork_end(false);
	if (pid > 0)
		ssw_fdtab_each(wake_sharers, NULL);
}
