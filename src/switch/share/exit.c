/* exit.c — at exit, close this process's connections as the kernel closes a dying process's sockets, where the peer could not tell otherwise. */
#include "switch/switch.h"

#include "common/log.h"

#include <pthread.h>
#include <stdlib.h>

/* A shared-memory connection outlives its process (the peer reads what is
 * in the ring, then sees the end), but a fabric connection's unsent data
 * and its transport live in the process: a program that writes and exits
 * without close() (socat, shell tools, exit() after a reply) would cut the
 * stream short, where kernel TCP delivers every byte and then FIN.  The
 * kernel closes each descriptor of an exiting process; so does this, for
 * those connections (and a shared-memory one in one case: must_close),
 * after the application's own atexit handlers (ours is registered first,
 * at start-up).  _exit() and fatal signals skip
 * it: there kernel TCP still delivers and this cannot. */

#define EXIT_MAX 4096

struct exit_list {
	int fd[EXIT_MAX];
	int n;
};

static void collect(int fd, struct ssw_sock *s, void *arg)
{
	struct exit_list *l = arg;
	if (l->n < EXIT_MAX && s->state == SSW_ST_CONNECTED && s->sess && s->prov)
		l->fd[l->n++] = fd;
}

/* A shared-memory connection whose last process exits with data it took
 * out of the ring but never read (staged: FIONREAD, MSG_PEEK, urgent data
 * bring it in), or with SO_LINGER {1, 0}, would look to the peer like an
 * orderly end, the ring being empty; kernel TCP resets it (tcp_close with
 * unread data, or lingering 0), and so does this close.  One that another
 * process still holds (a forked child exits) is closed too, which only
 * lets go of this process's hold: left counted, it made the last real
 * holder's close take itself for one of two, send nothing, and the peer
 * see an orderly end where kernel TCP resets (soak seed 843000004, sem
 * fork_exit_close_unread).  Any other shared-memory connection is left as
 * it is: the peer reads what is in the ring, then sees the end (or the
 * reset, when the ring still holds what this process did not read). */
static bool must_close(int fd)
{
	struct ssw_sock *s = ssw_sock_get(fd);
	if (!s)
		return false;
	bool r = s->state == SSW_ST_CONNECTED && s->sess && s->prov &&
		 (!(s->prov->caps & SSW_CAP_SHARED_CONTEXT) || !ssw_session_last_holder(s->sess) ||
		  ssw_sock_linger0(s) || ssw_session_unread(s->sess));
	ssw_sock_put(s);
	return r;
}

static void close_at_exit(void)
{
	static struct exit_list l; /* at exit the stack may be small (a thread's) */
	l.n = 0;
	ssw_fdtab_each(collect, &l);
	int n = 0;
	for (int i = 0; i < l.n; i++)
		if (must_close(l.fd[i])) {
			ssw_close(l.fd[i]);
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
