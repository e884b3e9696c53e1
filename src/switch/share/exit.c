/* exit.c — at exit, close this process's connections as the kernel closes a dying process's sockets. */
#include "switch/switch.h"

#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel closes each descriptor of an exiting process; so does this,
 * for every switched connection, after the application's own atexit
 * handlers (ours is registered first, at start-up).  A fabric connection's
 * unsent data and transport live in the process: without the close a
 * program that writes and exits (socat, shell tools, exit() after a reply)
 * would cut the stream short.  A shared-memory connection outlives its
 * process, but left open the peer learns of the death only at its next
 * look at the doorbell connection, and must then guess from the ring
 * whether the data it finds unread came before the death (a reset, as
 * tcp_close with unread data) or after (kernel TCP: an orderly end, the
 * later data drawing the reset); its sends run a few milliseconds between
 * such looks (soak seed 848007859: splice then send after the peer read
 * everything and exited, ECONNRESET where kernel TCP says EPIPE).  Closed
 * here, the state is the one tcp_close leaves: a reset with unread data
 * (staged too: FIONREAD, MSG_PEEK, urgent data; seed 13) or SO_LINGER
 * {1, 0}, else an orderly end.  A connection another process still holds
 * (a forked child exits) only loses this process's hold (seed 843000004).
 * _exit() and fatal signals skip it: there kernel TCP still delivers and
 * this cannot. */

#define EXIT_MAX 4096

static bool switched_connection(const struct ssw_sock *s)
{
	return s->state == SSW_ST_CONNECTED && s->sess && s->prov;
}

/* Still the connection collected: another thread may have closed it since. */
static bool still_switched(int fd)
{
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s)
		return false;
	bool r = switched_connection(s);
	ssw_sock_put(s);
	return r;
}

static void close_at_exit(void)
{
	static int fds[EXIT_MAX]; /* at exit the stack may be small (a thread's) */
	int listed = ssw_fdtab_list(switched_connection, fds, EXIT_MAX), n = 0;
	if (listed > EXIT_MAX)
		listed = EXIT_MAX;
	for (int i = 0; i < listed; i++)
		if (still_switched(fds[i])) {
			ssw_close(fds[i]);
			n++;
		}
	if (n)
		SSW_DEBUG("exit: %d connection(s) closed as the kernel would", n);
}

/* _exit, _Exit (interpose/exit_api.c): no close as above (its end of a
 * connection this process alone holds is left as before: README Limits),
 * but a connection other processes share loses this process's hold, as
 * the kernel drops a dying process's reference to a shared socket: else
 * the others' last close would never be the last (no FIN), and a
 * transport that lives in this process alone (a moved fabric transport,
 * session_move.c) would die with it instead of going to them.  _exit may
 * be called from a signal handler that interrupted the switch itself: no
 * lock is waited for (the table is walked lock-free; a session whose lock
 * stays taken keeps its hold, as before). */
void ssw_exit_hand_over(void)
{
	if ((pid_t)syscall(SYS_getpid) != ssw_pid() || ssw_provider_calls)
		return; /* a vfork child in its parent's memory; inside a provider's library */
	int end = ssw_fdtab_end(), n = 0;
	for (int fd = 0; fd < end; fd++) {
		struct ssw_sock *s = ssw_sock_get(fd);
		if (!s)
			continue;
		/* a dup'ed socket appears once per fd: once is enough */
		if (s->fd == fd && switched_connection(s) && ssw_session_exit_release(s->sess))
			n++;
		ssw_sock_put(s);
	}
	if (n)
		SSW_DEBUG("_exit: %d shared connection(s) let go as the kernel would", n);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void register_once(void)
{
	atexit(close_at_exit);
}

void ssw_exit_close_private(void)
{
	pthread_once(&once, register_once);
}
