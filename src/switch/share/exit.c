/* exit.c — at exit, close this process's connections as the kernel closes a dying process's sockets. */
#include "switch/switch.h"

#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>

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

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void register_once(void)
{
	atexit(close_at_exit);
}

void ssw_exit_close_private(void)
{
	pthread_once(&once, register_once);
}
