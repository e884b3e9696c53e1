/* session_unshare.c — a process that drops privileges stops sharing a
 * connection's memory with the processes it was forked from.
 *
 * After fork the session and the provider's endpoint are one fork-shared
 * mapping for every holder (fork.c), and that memory holds pointers the
 * switch follows (the provider's ops, the endpoint, the staging queue, the
 * rings) and the peer's credentials.  A child that goes on as another user
 * (a fork-per-connection server's setuid) and is later taken over could
 * write them while its privileged parent still holds the connection: the
 * parent would jump where the child says.  So at the drop, while the child
 * still runs the program's own code, it copies the connection's memory and
 * puts the copy in place of its mapping, at the same address (the pointers
 * stay right); the original is left to the other holders, marked moved.
 * No process of another uid can map it again (anonymous shared memory:
 * only /proc/PID/map_files or ptrace, both refused to it).
 *
 * The connection goes with the process that dropped privileges, the one
 * serving it; for the others it reads as reset and their close only lets
 * go (kernel TCP would let both use it: README Security says so).  A
 * rendezvous transfer in flight at that moment is not carried over. */
#include "session/session_priv.h"

#include "common/log.h"
#include "common/sys.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

int ssw_session_unshare(struct ssw_session *s)
{
	if (!s || sess_holders(s) <= 1)
		return 0; /* nobody else maps it */
	sess_lock(s);
	if (atomic_load(&s->moved) || sess_holders(s) <= 1) {
		sess_unlock(s); /* a ghost already (another holder took it), or alone now */
		return 0;
	}
	size_t head = (sizeof *s + 4095) & ~(size_t)4095, size = s->map_size;
	struct ssw_session *c = ssw_shared_dup(s, size, head);
	if (!c) {
		sess_unlock(s);
		return -ENOMEM;
	}
	/* the staged bytes, at the same offsets */
	size_t qat = (size_t)(s->q.buf - (uint8_t *)s), qtop = s->q.off + s->q.len;
	if (qtop > s->q.cap)
		qtop = s->q.cap;
	memcpy((uint8_t *)c + qat, s->q.buf, qtop);
	/* and those sent while the peer was suspended (session_stage.c) */
	size_t tat = (size_t)(s->ts.buf - (uint8_t *)s);
	memcpy((uint8_t *)c + tat + s->ts.off, s->ts.buf + s->ts.off, s->ts.len);
	int rc = s->loc->ep && s->p->conn->unshare ? s->p->conn->unshare(s->loc->ep) : 0;
	if (rc < 0) {
		SYS_(munmap, c, size);
		sess_unlock(s);
		return rc;
	}
	/* the copy: a lock and condition of its own (the original's may be
	 * waited on by the others), this process its only holder */
	sess_init_sync(c);
	sess_holds_set(c, 1);
	atomic_store(&c->w.sleepers, 0);
	if (c->exclusive && atomic_load(&c->user) != ssw_pid())
		atomic_store(&c->user, 0); /* ours to take over, as from a holder gone */
	/* the original: the others' from now on */
	atomic_store(&s->moved_to, ssw_pid());
	atomic_store(&s->moved, true);
	sess_hold_drop(s);
	sess_unlock(s);
	if (!ssw_shared_move(c, size, s)) {
		/* still the original here, which now reads as reset */
		SSW_WARN_ONCE("privilege drop: could not separate a connection's memory (out of memory); it is reset here");
		return -ENOMEM;
	}
	return 0;
}
