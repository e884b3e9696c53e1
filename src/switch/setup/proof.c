/* proof.c — keeps a connecting socket's address provable until the acceptor
 * has checked it (claim.c asks the kernel who holds that address).
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
#include "switch/setup/setup_priv.h"
#include "common/forklocal.h"
#include "switch/switch.h"

#include "common/sys.h"
#include "session/session.h"
#include "switch/sock/addr.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>

#define KEEP_NS (10ull * 1000000000ull)
#define KEEP_MAX 1024

#define keep_lock (ssw_fl->setup_lock[1]) /* fork-local: a child's is a fresh one */
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

/* A listening proof.  The kernel names the user of a bound-only socket only
 * by walking its whole bind table (sockdiag.c ssw_diag_bound_by: 1.5 ms an
 * accepted connection on this VM, every connection of a server whose
 * clients are other users), but finds a listening socket by the O(1)
 * lookup a SYN gets (ssw_diag_listener_uid: 9 us).  So the proof is a
 * socket of ours listening on exactly the connecting socket's address: it
 * shares the port through SO_REUSEPORT, which the kernel grants only to
 * sockets of the same user (another user's bind of that port still fails,
 * with or without SO_REUSEADDR/SO_REUSEPORT), so nobody gains a way onto
 * the port, and only a socket of our user can answer that lookup.  A SYN
 * to the client's port meanwhile waits in its backlog and is reset when
 * it closes (README Security).  -1 when the socket cannot share its port
 * (bound by the application without SO_REUSEPORT: the set-up is refused)
 * or anything fails: the caller makes the plain proof instead. */
int ssw_proof_make_listening(struct ssw_sock *s, int fd)
{
	int one = 1, v = 0;
	socklen_t vl = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &v, &vl) < 0)
		return -1;
	if (!v) {
		if (sys_setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
			return -1;
		s->reuseport_ours = true;
	}
	int p = sys_socket(s->local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
	if (p < 0)
		return -1;
	if (s->local.ss_family == AF_INET6) { /* the connecting socket's own setting */
		int v6 = 0;
		vl = sizeof v6;
		if (sys_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, &vl) < 0 ||
		    sys_setsockopt(p, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6) < 0) {
			sys_close(p);
			return -1;
		}
	}
	if (sys_setsockopt(p, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
	    sys_bind(p, (const struct sockaddr *)&s->local, s->local_len) < 0 || sys_listen(p, 1) < 0) {
		sys_close(p);
		return -1;
	}
	return ssw_fd_hide(p);
}

/* A socket object goes: its proof goes too, unless the acceptor may still
 * have to check it. */
void ssw_proof_release(struct ssw_sock *s)
{
	int fd = s->proof_fd;
	s->proof_fd = -1;
	/* a connector whose acceptor answered: did it have to check us? */
	if (s->dst.ss_family && s->sess && ssw_session_peer_init_seen(s->sess)) {
		struct sockaddr_storage d;
		if (ssw_addr_normalize((const struct sockaddr *)&s->dst, s->dst_len, &d) == 0)
			ssw_proof_learn(&d, ssw_session_peer_asks_proof(s->sess));
	}
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

void ssw_proof_undo(struct ssw_sock *s, int fd)
{
	int zero = 0;
	if (!s->reuseport_ours)
		return;
	(void)sys_setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &zero, sizeof zero);
	s->reuseport_ours = false;
}

/* Destinations whose listener belongs to another user, as the last
 * connect there found (needs a proof): the next connect there makes the
 * listening proof.  A hint only: a wrong guess costs one walk of the bind
 * table at the acceptor, or a listener made for nothing and closed at
 * once.  Per process, the newest HINT_MAX destinations. */
#define HINT_MAX 16
#define hint_lock (ssw_fl->setup_lock[2])
static struct sockaddr_storage hint_dst[HINT_MAX];
static bool hint_other[HINT_MAX];
static int nhint, hint_next;

static int hint_find(const struct sockaddr_storage *dst)
{
	socklen_t l = ssw_addr_len(dst);
	for (int i = 0; i < nhint; i++)
		if (hint_dst[i].ss_family == dst->ss_family && !memcmp(&hint_dst[i], dst, l))
			return i;
	return -1;
}

bool ssw_proof_hint(const struct sockaddr_storage *dst)
{
	pthread_mutex_lock(&hint_lock);
	int i = hint_find(dst);
	bool other = i >= 0 && hint_other[i];
	pthread_mutex_unlock(&hint_lock);
	return other;
}

void ssw_proof_learn(const struct sockaddr_storage *dst, bool other)
{
	pthread_mutex_lock(&hint_lock);
	int i = hint_find(dst);
	if (i < 0 && other) { /* only the exceptions are remembered */
		i = nhint < HINT_MAX ? nhint++ : hint_next;
		hint_next = (hint_next + 1) % HINT_MAX;
		hint_dst[i] = *dst;
	}
	if (i >= 0)
		hint_other[i] = other;
	pthread_mutex_unlock(&hint_lock);
}
