/* privdrop.c — a process that gives up a user id (setuid and kin after
 * fork) stops sharing its connections' memory with the processes it was
 * forked from (session_unshare.c says why and how). */
#include "switch/switch.h"

#include "common/log.h"

#include <stdlib.h>

struct held_list {
	int *fd;
	int n, max;
	int lost; /* not listed (no memory): still shared, said */
};

static void collect(int fd, struct ssw_sock *s, void *arg)
{
	struct held_list *l = arg;
	if (!s->sess)
		return;
	if (l->n == l->max) {
		int m = l->max ? 2 * l->max : 64;
		int *v = realloc(l->fd, (size_t)m * sizeof *v);
		if (!v) {
			l->lost++;
			return;
		}
		l->fd = v;
		l->max = m;
	}
	l->fd[l->n++] = fd;
}

void ssw_privdrop_unshare(void)
{
	struct held_list l = { 0 };
	ssw_fdtab_each(collect, &l);
	int moved = 0, failed = 0;
	for (int i = 0; i < l.n; i++) {
		struct ssw_sock *s = ssw_sock_get(l.fd[i]);
		if (!s)
			continue;
		/* dups of one connection: the session's own check makes a second
		 * unshare of it a no-op (it is this process's alone by then) */
		if (s->sess) {
			int rc = ssw_session_unshare(s->sess);
			moved += rc == 0;
			failed += rc < 0;
		}
		ssw_sock_put(s);
	}
	free(l.fd);
	failed += l.lost;
	if (failed)
		SSW_WARN("privilege drop: %d connection(s) still share memory with the processes this one was "
			 "forked from (out of memory)", failed);
	else if (l.n)
		SSW_DEBUG("privilege drop: %d connection(s) checked, now this process's alone", moved);
}
