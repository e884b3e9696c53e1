/* trim.c — the housekeeping thread that gives back idle connections'
 * memory (common/trim.h says when and why).
 *
 * Started in a process at its first note (a ring or a staging queue grew
 * past its floor: a process whose traffic keeps to its floors never has
 * one), it sleeps on the notes' futex while nothing is pending; otherwise
 * every SSW_TRIM_PERIOD_MS it looks at each switched connection of the
 * process (ssw_session_trim: never waits for a connection's lock), and
 * goes back to sleep for good once a whole look found nothing left.  A
 * connection is given back only at a look that finds it unchanged since
 * the previous one, so it must idle SSW_TRIM_PERIOD_MS to 2x that.
 *
 * Like the stat refresher (stat/statreg.c) it holds references to sockets
 * during a look, and the last one may tear a socket down when the look
 * drops it: fork takes the look's lock before its own (ssw_trim_fork_begin
 * after ssw_statreg_fork_begin), and the thread allocates only under it. */
#include "switch/switch.h"

#include "common/forklocal.h"
#include "common/log.h"
#include "common/sys.h"
#include "common/trim.h"
#include "switch/sock/sock.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

/* in the fork-local page: a forked child's are unlocked (common/forklocal.h) */
#define look_lock (ssw_fl->trim_lock[0])
#define start_lock (ssw_fl->trim_lock[1])
static pid_t started; /* the process that started the thread (a fork child has none) */

struct refs {
	struct ssw_sock **v;
	int n, max, dropped;
};

static void collect(int fd, struct ssw_sock *s, void *arg)
{
	(void)fd;
	struct refs *r = arg;
	if (r->n >= r->max) {
		r->dropped++;
		return;
	}
	ssw_sock_ref(s); /* the table's own reference keeps it above zero */
	r->v[r->n++] = s;
}

/* One look at every connection; true while anything may be left. */
static bool look(struct refs *r)
{
	r->n = r->dropped = 0;
	ssw_fdtab_each(collect, r);
	bool more = false;
	for (int i = 0; i < r->n; i++) {
		struct ssw_sock *s = r->v[i];
		/* never wait for a connect in progress (it holds the lock) */
		if (pthread_mutex_trylock(&s->lock) != 0) {
			more = true;
			continue;
		}
		struct ssw_session *sess = s->state == SSW_ST_CONNECTED ? s->sess : NULL;
		pthread_mutex_unlock(&s->lock);
		/* sess is fixed once connected and lives as long as our reference */
		if (sess && ssw_session_trim(sess))
			more = true;
	}
	for (int i = 0; i < r->n; i++)
		ssw_sock_unref(r->v[i]);
	if (r->dropped) { /* more sockets than room: a larger array next time */
		int m = r->max + r->dropped + r->dropped / 4;
		struct ssw_sock **v = realloc(r->v, sizeof *v * (size_t)m);
		if (v) {
			r->v = v;
			r->max = m;
		}
		more = true;
	}
	return more;
}

static void *housekeeper(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_setname_np(pthread_self(), "ssw-trim"); /* what ps -L shows */
	struct refs r = { .max = 1024 };
	pthread_mutex_lock(&look_lock);
	r.v = malloc(sizeof *r.v * (size_t)r.max);
	pthread_mutex_unlock(&look_lock);
	if (!r.v)
		return NULL;
	for (;;) {
		ssw_trim_wait_pending();
		struct timespec ts = { SSW_TRIM_PERIOD_MS / 1000, (long)(SSW_TRIM_PERIOD_MS % 1000) * 1000000L };
		while (SYS_(nanosleep, &ts, &ts) < 0 && errno == EINTR)
			;
		uint32_t seen = ssw_trim_pending();
		pthread_mutex_lock(&look_lock);
		bool more = look(&r);
		pthread_mutex_unlock(&look_lock);
		if (!more)
			ssw_trim_settle(seen);
	}
	return NULL;
}

/* ssw_trim_note's starter: the thread of this process, made once. */
static void start(void)
{
	pid_t me = ssw_pid();
	pthread_mutex_lock(&start_lock);
	if (started != me) {
		if (ssw_thread_start(housekeeper)) {
			started = me;
			ssw_trim_started();
		} else {
			SSW_DEBUG("no housekeeping thread: idle connections keep their memory");
		}
	}
	pthread_mutex_unlock(&start_lock);
}

void ssw_trim_init(void)
{
	ssw_trim_set_starter(start);
}

/* start_lock is not taken here: a note is made under a connection's lock,
 * which fork may wait for (fabric connections' fork holds). */
void ssw_trim_fork_begin(void)
{
	pthread_mutex_lock(&look_lock);
}

/* The thread is not in the child: its next note starts one, and its locks
 * are fresh ones (the fork-local page), so the child has nothing to do. */
void ssw_trim_fork_end(bool child)
{
	if (!child)
		pthread_mutex_unlock(&look_lock);
}
