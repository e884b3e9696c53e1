/* privdrop.c — a process that gives up a user id (setuid and kin after
 * fork) stops sharing its connections' memory with the processes it was
 * forked from (session_unshare.c says why and how). */
#include "switch/switch.h"

#include "common/bell.h"
#include "common/log.h"

#include <stdlib.h>

static bool holds_session(const struct ssw_sock *s)
{
	return s->sess != NULL;
}

void ssw_privdrop_unshare(void)
{
	int max = ssw_fdtab_count() + 64; /* room for sockets made meanwhile */
	int *fds = malloc((size_t)max * sizeof *fds);
	int n = fds ? ssw_fdtab_list(holds_session, fds, max) : ssw_fdtab_count();
	int listed = !fds ? 0 : n < max ? n : max;
	int moved = 0, failed = n - listed; /* not listed (no memory): still shared, said */
	for (int i = 0; i < listed; i++) {
		struct ssw_sock *s = ssw_sock_get(fds[i]);
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
	free(fds);
	ssw_bell_unshare(); /* no more doorbells shared with the processes it was forked from */
	if (failed)
		SSW_WARN("privilege drop: %d connection(s) still share memory with the processes this one was "
			 "forked from (out of memory)", failed);
	else if (listed)
		SSW_DEBUG("privilege drop: %d connection(s) checked, now this process's alone", moved);
}
