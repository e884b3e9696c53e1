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
 * copies, and the parent closes its own too unless it has accepted on (or
 * polled) the socket: a fork-per-connection server goes on listening there
 * (closing at every fork reset the connects in flight, whose fabric
 * connections the listener had already taken), a pre-forking master whose
 * workers accept leaves them kernel TCP and the other providers (said
 * once).  The listeners' locks are taken before fork, so that no thread of
 * the parent is inside one of them when the child is made, and released in
 * both processes after the close. */
#include "switch/switch.h"

#include "switch/setup/setup.h"

#include "common/log.h"
#include "common/sys.h"
#include "switch/stat/statreg.h"

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
	atomic_fetch_add(&s->refs, 1); /* the table's reference keeps it above zero */
	priv_ls[npriv++] = s;
}

/* After fork, in each process: close, unlock, let go. */
static void drop_private(bool parent)
{
	char names[64] = "";
	int n = 0;
	for (int i = 0; i < npriv; i++) {
		bool keep = parent && __atomic_load_n(&priv_ls[i]->looked_by, __ATOMIC_RELAXED) == ssw_pid();
		if (!keep)
			n += ssw_setup_listener_drop_private(priv_ls[i], names, sizeof names) > 0;
		pthread_mutex_unlock(&priv_ls[i]->lock);
	}
	for (int i = 0; i < npriv; i++)
		ssw_sock_put(priv_ls[i]);
	npriv = 0;
	if (n && parent)
		SSW_WARN_ONCE("fork: %d listener(s) stop listening on %s, whose connections cannot be shared between "
			      "processes: new connections to them use kernel TCP (or another provider)", n, names);
}

bool ssw_forked(void)
{
	return __atomic_load_n(&fork_gen, __ATOMIC_RELAXED) != 0;
}

void ssw_fork_begin(void)
{
	ssw_statreg_fork_begin(); /* first: statreg.c says why */
	ssw_trim_fork_begin();    /* the same for the housekeeper's looks (trim.c) */
	pthread_rwlock_wrlock(&fork_lock);
	forking = true;
	if (++fork_gen == 0)
		fork_gen = 1;
	int up = 1;
	ssw_fdtab_each(hold, &up);
	npriv = 0;
	ssw_fdtab_each(find_private, NULL);
	for (int i = 0; i < npriv; i++)
		pthread_mutex_lock(&priv_ls[i]->lock);
}

void ssw_fork_end(pid_t pid)
{
	forking = false;
	if (pid == 0) { /* the child: the parent's other threads are gone */
		ssw_pid_forget();
		ssw_stats_forget();
		ssw_statreg_fork_end(true);
		ssw_trim_fork_end(true);
		drop_private(false);
		pthread_rwlock_init(&fork_lock, NULL);
		return;
	}
	if (pid < 0) {
		int down = -1;
		ssw_fdtab_each(hold, &down);
		for (int i = 0; i < npriv; i++) { /* no fork: the listeners stay */
			pthread_mutex_unlock(&priv_ls[i]->lock);
			ssw_sock_put(priv_ls[i]);
		}
		npriv = 0;
	} else {
		drop_private(true);
	}
	pthread_rwlock_unlock(&fork_lock);
	ssw_trim_fork_end(false);
	ssw_statreg_fork_end(false);
}
