/* proof.c — keeps a connecting socket's address provable until the acceptor
 * has checked it (listen.c peer_ok asks the kernel who holds that address).
 *
 * The check happens when the server accepts, which may be after the client
 * closed its socket (connect, write, close: kernel TCP delivers that).  So
 * each switched connect to another user's listener holds a hidden duplicate
 * of its kernel socket: the request names it, and it stays bound until the
 * acceptor's INIT shows the check is done, or, once the application closed
 * the socket first, for KEEP_NS more (kernel TCP holds a closed port longer,
 * in TIME_WAIT), at most KEEP_MAX of them per process and a sixteenth of
 * its descriptor limit (the oldest go first).
 * A client process that exits before the accept takes its proofs along: that
 * request is refused. */
#include "switch/switch.h"

#include "common/sys.h"
#include "session/session.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>

#define KEEP_NS (10ull * 1000000000ull)
#define KEEP_MAX 1024

static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int fd;
	uint64_t until;
	pid_t pid;
} kept[KEEP_MAX];
static int nkept;

/* Kept proofs count against the application's descriptor limit: a
 * sixteenth of it at most. */
static int keep_cap(void)
{
	static int cap;
	if (!cap) {
		struct rlimit rl;
		uint64_t c = KEEP_MAX;
		if (SYS_(prlimit64, 0, RLIMIT_NOFILE, NULL, &rl) == 0 && rl.rlim_cur / 16 < c)
			c = rl.rlim_cur / 16;
		cap = c ? (int)c : 1;
	}
	return cap;
}

/* Close expired proofs (and a forked parent's copies: ours to close, theirs
 * to keep).  Called with keep_lock. */
static void reap(uint64_t now)
{
	pid_t me = ssw_pid();
	for (int i = 0; i < nkept;) {
		if (kept[i].until > now && kept[i].pid == me) {
			i++;
			continue;
		}
		sys_close(kept[i].fd);
		kept[i] = kept[--nkept];
	}
}

int ssw_proof_make(int fd)
{
	return ssw_fd_dup_hidden(fd);
}

/* A socket object goes: its proof goes too, unless the acceptor may still
 * have to check it. */
void ssw_proof_release(struct ssw_sock *s)
{
	int fd = s->proof_fd;
	s->proof_fd = -1;
	if (fd < 0)
		return;
	if (s->sess && ssw_session_peer_init_seen(s->sess)) {
		sys_close(fd);
		return;
	}
	uint64_t now = ssw_now_ns();
	pthread_mutex_lock(&keep_lock);
	reap(now);
	if (nkept >= keep_cap()) { /* the oldest: reap keeps no order, find it */
		int o = 0;
		for (int i = 1; i < nkept; i++)
			if (kept[i].until < kept[o].until)
				o = i;
		sys_close(kept[o].fd);
		kept[o] = kept[--nkept];
	}
	kept[nkept].fd = fd;
	kept[nkept].until = now + KEEP_NS;
	kept[nkept].pid = ssw_pid();
	nkept++;
	pthread_mutex_unlock(&keep_lock);
}
