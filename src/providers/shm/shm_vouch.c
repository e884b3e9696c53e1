/* shm_vouch.c — whose memory a rendezvous descriptor opens, as the kernel says.
 *
 * A descriptor (shm_rdma.c) names a process and a range of its memory, and
 * the receiver copies from or into it with Cross Memory Attach.  The peer's
 * word on the process is worth nothing: a server worker that dropped its
 * privileges could name its root master, whose pid is the one SO_PEERCRED
 * shows (the master made the rendezvous listener), and have a root client
 * read or write the master's memory for it.  So whoever registers memory
 * for the peer also sends a vouch beside the ring, on the rendezvous
 * connection, carrying the descriptor and SCM_CREDENTIALS: the kernel
 * refuses a sender that is not root any pid but its own.  The receiver
 * keeps the vouches it reads (in the fork-shared endpoint: any process of
 * its side may drain the connection), and a descriptor is used only when a
 * vouch of the same bytes came from the pid it names, and that process's
 * real, effective and saved uids are ours at the time of use.
 *
 * On the rendezvous connection a vouch is a record of exactly
 * sizeof(struct shm_vouch) bytes with SHM_VOUCH_MAGIC; a doorbell is one
 * byte; anything else is a refusal (shm_init.c ctl_record). */
#include "providers/shm/shm_priv.h"

#include "common/sys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* PIDFD_GET_INFO (Linux 6.13) in its first layout; older headers lack it. */
struct pidfd_info_v0 {
	uint64_t mask;
	uint64_t cgroupid;
	uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
	uint32_t spare0[1];
};
#define SHM_PIDFD_GET_INFO _IOWR(0xFF, 11, struct pidfd_info_v0)
#define SHM_PIDFD_INFO_CREDS (1ull << 1)

void shm_vouch_passcred(int fd)
{
	int one = 1;
	if (fd >= 0)
		(void)sys_setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
}

int shm_vouch_send(struct ssw_ep *ep, const struct shm_desc *d)
{
	struct ucred me = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
	return shm_vouch_send_as(ep, d, &me) < 0 ? -EPERM : 0;
}

int shm_vouch_send_as(struct ssw_ep *ep, const struct shm_desc *d, const struct ucred *cr)
{
	if (ep->ctl_fd < 0)
		return -EBADF;
	struct shm_vouch v = { .magic = SHM_VOUCH_MAGIC, .d = *d };
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct iovec iov = { &v, sizeof v };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_CREDENTIALS;
	c->cmsg_len = CMSG_LEN(sizeof(struct ucred));
	memcpy(CMSG_DATA(c), cr, sizeof *cr);
	/* never blocks: a full connection (doorbells the peer has not read)
	 * refuses this one transfer, which then goes through the ring */
	ssize_t n = sys_sendmsg(ep->ctl_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	return n == (ssize_t)sizeof v ? 0 : n < 0 ? -errno : -EIO;
}

bool shm_vouch_is(const void *rec, size_t n)
{
	uint32_t m;
	if (n != sizeof(struct shm_vouch))
		return false;
	memcpy(&m, rec, sizeof m);
	return m == SHM_VOUCH_MAGIC;
}

/* A few stores under it; a holder killed inside would block its side's
 * rendezvous forever, so a long wait takes the lock over. */
static void vlock(struct ssw_ep *ep)
{
	for (int i = 0; i < 10000 && atomic_exchange_explicit(&ep->vouch_lock, 1, memory_order_acquire); i++)
		syscall(SYS_sched_yield);
}

static void vunlock(struct ssw_ep *ep)
{
	atomic_store_explicit(&ep->vouch_lock, 0, memory_order_release);
}

void shm_vouch_record(struct ssw_ep *ep, const void *rec, size_t n, const struct msghdr *mh)
{
	if (!shm_vouch_is(rec, n))
		return;
	int32_t pid = 0; /* no credentials came with it: it vouches for nothing */
	for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)mh); c; c = CMSG_NXTHDR((struct msghdr *)mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
			struct ucred cr;
			memcpy(&cr, CMSG_DATA(c), sizeof cr);
			pid = cr.pid;
		}
	struct shm_vouch v;
	memcpy(&v, rec, sizeof v);
	if (pid <= 0 || v.d.pid != pid)
		return;
	vlock(ep);
	uint32_t i = ep->nvouch++ % SHM_VOUCHES;
	ep->vouched[i] = v.d;
	vunlock(ep);
}

static bool vouched(struct ssw_ep *ep, const struct shm_desc *d)
{
	bool ok = false;
	vlock(ep);
	for (uint32_t i = 0; i < SHM_VOUCHES && !ok; i++)
		ok = memcmp(&ep->vouched[i], d, sizeof *d) == 0;
	vunlock(ep);
	return ok;
}

/* Read what waits on the rendezvous connection (never sleeping): vouches
 * are kept, doorbells and a refusal recorded as the doorbell drain does. */
static void drain(struct ssw_ep *ep)
{
	if (ep->ctl_fd < 0 || ep->peer_gone)
		return;
	for (int k = 0; k < 64; k++) {
		ssize_t n = shm_ctl_take(ep, MSG_DONTWAIT);
		if (n <= 0 || ep->peer_gone)
			return;
	}
}

/* Are the real, effective and saved uids of pid all uid?  Asked through a
 * pidfd (PIDFD_GET_INFO), else /proc/PID/status. */
static bool pid_uids_are(pid_t pid, uid_t uid)
{
	int pfd = (int)SYS_(pidfd_open, pid, 0);
	if (pfd < 0)
		return false;
	struct pidfd_info_v0 in = { .mask = SHM_PIDFD_INFO_CREDS };
	bool ok;
	if (SYS_(ioctl, pfd, SHM_PIDFD_GET_INFO, &in) == 0 && (in.mask & SHM_PIDFD_INFO_CREDS)) {
		ok = in.ruid == uid && in.euid == uid && in.suid == uid;
	} else {
		char path[40], buf[2048];
		snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
		int f = (int)SYS_(openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		ssize_t n = f >= 0 ? sys_read(f, buf, sizeof buf - 1) : -1;
		if (f >= 0)
			sys_close(f);
		buf[n > 0 ? n : 0] = '\0';
		const char *u = strstr(buf, "\nUid:");
		unsigned r, e, s;
		ok = u && sscanf(u, "\nUid: %u %u %u", &r, &e, &s) == 3 && r == uid && e == uid && s == uid;
		/* still the process the pidfd names (not a pid reused meanwhile) */
		ok = ok && SYS_(pidfd_send_signal, pfd, 0, NULL, 0) == 0;
	}
	sys_close(pfd);
	return ok;
}

int shm_vouch_check(struct ssw_ep *ep, const struct shm_desc *d)
{
	if (!vouched(ep, d)) {
		drain(ep);
		if (!vouched(ep, d))
			return -EPERM;
	}
	return pid_uids_are(d->pid, geteuid()) ? 0 : -EPERM;
}
