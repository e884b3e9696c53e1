/* shm_vouch.c — whose memory a rendezvous descriptor opens, as the kernel
 * says, and for how long.
 *
 * A descriptor (shm_rdma.c) names a process and a range of its memory, and
 * the receiver copies from or into it with Cross Memory Attach.  The peer's
 * word on the process is worth nothing: a server worker that dropped its
 * privileges could name its root master, whose pid is the one SO_PEERCRED
 * shows (the master made the rendezvous listener), and have a root client
 * read or write the master's memory for it.  So a process that exposes
 * memory first sends a vouch beside the ring, on the rendezvous connection,
 * with SCM_CREDENTIALS (the kernel refuses a sender that is not root any pid
 * but its own): "my exposure table is at T".  Each exposure is a slot of
 * that table, written by the process in its own memory: the range, the
 * access it allows and a generation.  The receiver uses a descriptor only
 * when the process it names vouched for its table on this connection, that
 * process's slot (read from its memory, by CMA) holds exactly the
 * descriptor's range, access and generation, and its real, effective and
 * saved uids are ours at the time of the copy.
 *
 * Revocation (seed 002): deregistration closes the slot, a store in the
 * owner's memory; the peer's copy of the descriptor is refused from then on
 * (the next copy reads the closed slot), and a generation is never reused.
 * One vouch per process and connection, none per exposure.
 *
 * The receiver keeps the vouches it reads in the fork-shared endpoint (any
 * process of its side may drain the connection).  On the rendezvous
 * connection a vouch is a record of exactly sizeof(struct shm_vouch) bytes
 * with SHM_VOUCH_MAGIC; a doorbell is one byte; anything else is a refusal
 * (shm_init.c ctl_record). */
#include "providers/shm/shm_priv.h"

#include "common/forklocal.h"
#include "common/sys.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/uio.h>
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

/* ---- this process's exposure table ------------------------------------------ */

static struct shm_expo expo[SHM_EXPO_SLOTS];
static _Atomic uint64_t expo_used[SHM_EXPO_SLOTS / 64];
static _Atomic uint64_t expo_gen;
static _Atomic uint64_t nonce;
static _Atomic pid_t nonce_pid;

static void expo_atfork_child(void);
static pthread_once_t expo_once = PTHREAD_ONCE_INIT;
static void expo_init(void)
{
	pthread_atfork(NULL, NULL, expo_atfork_child);
}

/* The nonce slots carry, drawn anew in each process (a forked child's
 * vouch names its own table, which its parent's cannot be taken for). */
static uint64_t my_nonce(void)
{
	pid_t me = ssw_pid();
	if (atomic_load(&nonce_pid) != me) {
		uint64_t n = 0;
		if (getrandom(&n, sizeof n, 0) != (ssize_t)sizeof n || !n)
			n = ssw_now_ns() * 0x9e3779b97f4a7c15ull | 1;
		atomic_store(&nonce, n);
		atomic_store(&nonce_pid, me);
	}
	return atomic_load(&nonce);
}

int shm_expo_open(void *addr, size_t len, uint32_t access, struct shm_desc *d)
{
	pthread_once(&expo_once, expo_init);
	for (uint32_t w = 0; w < SHM_EXPO_SLOTS / 64; w++) {
		uint64_t used = atomic_load(&expo_used[w]);
		while (~used) {
			uint32_t b = (uint32_t)__builtin_ctzll(~used);
			if (!atomic_compare_exchange_weak(&expo_used[w], &used, used | 1ull << b))
				continue;
			uint32_t i = w * 64 + b;
			struct shm_expo *x = &expo[i];
			uint64_t g = atomic_fetch_add(&expo_gen, 1) + 1;
			x->nonce = my_nonce();
			x->addr = (uint64_t)(uintptr_t)addr;
			x->len = len;
			x->access = access;
			/* the brackets last: a reader sees the slot open only complete */
			atomic_store_explicit(&x->gen2, g, memory_order_release);
			atomic_store_explicit(&x->gen, g, memory_order_release);
			*d = (struct shm_desc){ SHM_DESC_MAGIC, (int32_t)ssw_pid(), x->addr, len, g, i, access };
			return 0;
		}
	}
	return -ENOBUFS;
}

bool shm_expo_close(const struct shm_desc *d)
{
	if (d->magic != SHM_DESC_MAGIC || d->pid != (int32_t)ssw_pid() || d->slot >= SHM_EXPO_SLOTS)
		return false;
	struct shm_expo *x = &expo[d->slot];
	if (atomic_load(&x->gen) != d->gen)
		return false; /* not (or no longer) this exposure */
	atomic_store_explicit(&x->gen, 0, memory_order_release);
	atomic_store_explicit(&x->gen2, 0, memory_order_release);
	atomic_fetch_and(&expo_used[d->slot / 64], ~(1ull << (d->slot % 64)));
	return true;
}

unsigned shm_expo_open_count(void)
{
	unsigned n = 0;
	for (uint32_t w = 0; w < SHM_EXPO_SLOTS / 64; w++)
		n += (unsigned)__builtin_popcountll(atomic_load(&expo_used[w]));
	return n;
}

/* A forked child's table is a copy of its parent's exposures, which are
 * not its own to close: it starts empty (the parent's slots stay open in
 * the parent, where its sends are still in progress). */
SSW_FORK_TEXT static void expo_atfork_child(void)
{
	for (uint32_t w = 0; w < SHM_EXPO_SLOTS / 64; w++) {
		uint64_t used = atomic_exchange(&expo_used[w], 0);
		for (; used; used &= used - 1)
			memset(&expo[w * 64 + (uint32_t)__builtin_ctzll(used)], 0, sizeof expo[0]);
	}
}


/* ---- vouches ------------------------------------------------------------------ */

/* Has this process vouched on this connection?  (Records it when not, so
 * that concurrent senders vouch once; a failed vouch is forgotten.) */
static bool vouched_here(struct ssw_ep *ep, bool claim)
{
	int32_t me = (int32_t)ssw_pid();
	for (int i = 0; i < SHM_VOUCHERS; i++)
		if (atomic_load(&ep->vouchers[i]) == me)
			return true;
	if (!claim)
		return false;
	for (int i = 0; i < SHM_VOUCHERS; i++) {
		int32_t z = 0;
		if (atomic_compare_exchange_strong(&ep->vouchers[i], &z, me))
			return false;
	}
	/* full: the oldest holders' records give way (they may vouch again) */
	atomic_store(&ep->vouchers[me % SHM_VOUCHERS], me);
	return false;
}

static void unclaim(struct ssw_ep *ep)
{
	int32_t me = (int32_t)ssw_pid();
	for (int i = 0; i < SHM_VOUCHERS; i++) {
		int32_t v = me;
		atomic_compare_exchange_strong(&ep->vouchers[i], &v, 0);
	}
}

/* One vouch record with these credentials: 0 or -errno (the kernel refuses
 * credentials not ours unless we are root). */
static int send_vouch(struct ssw_ep *ep, const struct ucred *cr)
{
	struct shm_vouch v = { .magic = SHM_VOUCH_MAGIC, .pid = (int32_t)cr->pid, .nslots = SHM_EXPO_SLOTS,
			       .table = (uint64_t)(uintptr_t)expo, .nonce = my_nonce() };
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
	 * refuses this one transfer, which then goes through the ring; the
	 * next exposure tries again */
	ssize_t n = sys_sendmsg(ep->ctl_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	return n == (ssize_t)sizeof v ? 0 : n < 0 ? -errno : -EIO;
}

int shm_vouch_send(struct ssw_ep *ep)
{
	pthread_once(&expo_once, expo_init);
	if (ep->ctl_fd < 0)
		return -EPERM;
	if (vouched_here(ep, true))
		return 0;
	struct ucred me = { .pid = getpid(), .uid = getuid(), .gid = getgid() };
	if (send_vouch(ep, &me) == 0)
		return 0;
	unclaim(ep);
	return -EPERM;
}

int shm_vouch_send_as(struct ssw_ep *ep, const struct ucred *cr)
{
	pthread_once(&expo_once, expo_init);
	return ep->ctl_fd < 0 ? -EBADF : send_vouch(ep, cr);
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
	if (pid <= 0 || v.pid != pid || !v.nslots)
		return;
	vlock(ep);
	uint32_t i = 0;
	while (i < SHM_VOUCHES && ep->vouched[i].pid != pid)
		i++;
	if (i == SHM_VOUCHES) /* a new process: in the oldest's place */
		i = ep->nvouch++ % SHM_VOUCHES;
	ep->vouched[i] = v;
	vunlock(ep);
}

/* The vouch of process pid on this connection, if one came. */
static bool vouch_of(struct ssw_ep *ep, int32_t pid, struct shm_vouch *out)
{
	bool ok = false;
	vlock(ep);
	for (uint32_t i = 0; i < SHM_VOUCHES && !ok; i++)
		if (ep->vouched[i].magic == SHM_VOUCH_MAGIC && ep->vouched[i].pid == pid) {
			*out = ep->vouched[i];
			ok = true;
		}
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

/* Is d's slot, in the memory of the process that vouched for its table,
 * open for exactly d?  (One process_vm_readv: a closed or reused slot, a
 * process gone or one we may not read all say no.) */
static bool slot_open(const struct shm_vouch *v, const struct shm_desc *d, uint32_t need)
{
	if (d->slot >= v->nslots || !d->gen)
		return false;
	struct shm_expo x;
	struct iovec l = { &x, sizeof x };
	struct iovec r = { (void *)(uintptr_t)(v->table + (uint64_t)d->slot * sizeof x), sizeof x };
	if (process_vm_readv(d->pid, &l, 1, &r, 1, 0) != (ssize_t)sizeof x)
		return false;
	return x.gen == d->gen && x.gen2 == d->gen && x.nonce == v->nonce && x.addr == d->addr && x.len == d->len &&
	       x.access == d->access && (x.access & need) == need;
}

int shm_vouch_check(struct ssw_ep *ep, const struct shm_desc *d, bool write)
{
	struct shm_vouch v;
	if (!vouch_of(ep, d->pid, &v)) {
		drain(ep);
		if (!vouch_of(ep, d->pid, &v))
			return -EPERM;
	}
	if (!slot_open(&v, d, write ? SSW_CAP_RDMA_WRITE : SSW_CAP_RDMA_READ))
		return -EPERM;
	return pid_uids_are(d->pid, geteuid()) ? 0 : -EPERM;
}
