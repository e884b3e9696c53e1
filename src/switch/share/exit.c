/* exit.c — at exit, close this process's connections over providers without shared context, as the kernel closes a dying process's sockets. */
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
 * those connections only, after the application's own atexit handlers
 * (ours is registered first, at start-up).  _exit() and fatal signals skip
 * it: there kernel TCP still delivers and this cannot. */

#define EXIT_MAX 4096

struct exit_list {
	int fd[EXIT_MAX];
	int n;
};

static void collect(int fd, struct ssw_sock *s, void *arg)
{
	struct exit_list *l = arg;
	if (l->n < EXIT_MAX && s->state == SSW_ST_CONNECTED && s->sess && s->prov &&
	    !(s->prov->caps & SSW_CAP_SHARED_CONTEXT))
		l->fd[l->n++] = fd;
}

static void close_private_at_exit(void)
{
	static struct exit_list l; /* at exit the stack may be small (a thread's) */
	l.n = 0;
	ssw_fdtab_each(collect, &l);
	for (int i = 0; i < l.n; i++)
		ssw_close(l.fd[i]);
	if (l.n)
		SSW_DEBUG("exit: %d connection(s) over a private transport closed as the kernel would", l.n);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void register_once(void)
{
	atexit(close_private_at_exit);
}

void ssw_exit_close_private(void)
{
	pthread_once(&once, register_once);
}
