/* swap_helper.c — the thread that serves other processes' requests for a
 * connection this process controls while it is busy elsewhere (seed 000's
 * control swap: session/session_swap.c).
 *
 * A process that controls a connection it shares with others by fork may
 * sit for long in code that never touches it (a master in waitpid, a
 * worker on another socket).  Another process that wants to send rings
 * this process's doorbell (common/bell.h); the thread wakes, looks at each
 * of the process's connections, and serves those asked for (suspends the
 * peer, hands control over).  Started at the first control of such a
 * connection (ssw_session_cfg.control_taken), once per process: a forked
 * child starts its own when it needs one.
 *
 * As the housekeeper (sock/trim.c) it holds references to sockets during
 * a look, so fork takes the look's lock first (ssw_swap_fork_begin); a
 * serve therefore waits for the peer at most SERVE_MS per look (fork waits
 * no longer than that), and the look comes again while asked. */
#include "switch/switch.h"

#include "common/bell.h"
#include "common/forklocal.h"
#include "common/log.h"
#include "common/sys.h"
#include "session/session.h"
#include "switch/sock/sock.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#define look_lock (ssw_fl->swap_lock[0])
#define start_lock (ssw_fl->swap_lock[1])
#define LOOK_MAX 256
#define IDLE_MS 1000 /* a ring lost to a shared word is found by the next look */
#define SERVE_MS 50  /* a look's wait for one peer's answer (fork waits for a look) */

static pid_t started; /* the process that started the thread (a fork child has none) */

struct refs {
	struct ssw_sock *v[LOOK_MAX];
	int n;
};

static void collect(int fd, struct ssw_sock *s, void *arg)
{
	struct refs *r = arg;
	/* a dup'ed socket appears once per fd: once is enough */
	if (r->n >= LOOK_MAX || s->fd != fd || s->state != SSW_ST_CONNECTED || !s->sess)
		return;
	ssw_sock_ref(s); /* the table's own reference keeps it above zero */
	r->v[r->n++] = s;
}

static void *helper(void *arg)
{
	(void)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_setname_np(pthread_self(), "ssw-swap");
	static struct refs r;
	int pending = 0; /* looks in a row that left something to serve */
	for (;;) {
		uint32_t seen = ssw_bell_seen();
		pthread_mutex_lock(&look_lock);
		r.n = 0;
		ssw_fdtab_each(collect, &r);
		bool left = false;
		for (int i = 0; i < r.n; i++)
			left |= ssw_session_swap_serve(r.v[i]->sess, SERVE_MS);
		for (int i = 0; i < r.n; i++)
			ssw_sock_unref(r.v[i]);
		pthread_mutex_unlock(&look_lock);
		/* a peer that answers only at its next call: look often at
		 * first, then less (its SUSPENDED waits in the transport) */
		pending = left ? pending + 1 : 0;
		ssw_bell_wait(seen, !left ? IDLE_MS : pending < 50 ? 1 : 20);
	}
	return NULL;
}

/* ssw_session_cfg.control_taken: the thread of this process, made once. */
static void start(void)
{
	pid_t me = ssw_pid();
	if (__atomic_load_n(&started, __ATOMIC_RELAXED) == me)
		return;
	pthread_mutex_lock(&start_lock);
	if (started != me) {
		if (ssw_thread_start(helper))
			__atomic_store_n(&started, me, __ATOMIC_RELAXED);
		else
			SSW_WARN_ONCE("no thread to hand shared connections over while this process is busy elsewhere: "
				      "another process asking for one waits for this one's next call on it");
	}
	pthread_mutex_unlock(&start_lock);
}

void ssw_swap_helper_init(void)
{
	ssw_session_cfg.control_taken = start;
}

void ssw_swap_fork_begin(void)
{
	pthread_mutex_lock(&look_lock);
}

/* The thread is not in the child, whose locks are fresh (fork-local page). */
void ssw_swap_fork_end(bool child)
{
	if (!child)
		pthread_mutex_unlock(&look_lock);
}
