/* statreg.c — publishes this process's live sockets for `sockswitch stat`
 * (layout and protocol in statreg.h).  Off the data path entirely: the
 * connect/accept/close hooks touch the table only for kernel-TCP fallbacks,
 * and the refresher thread rebuilds the switched sockets' slots from the fd
 * table when a reader rings the doorbell.  Every failure just leaves the
 * process unpublished.
 *
 * Trust model — nothing here is world-writable, and nothing is trusted for
 * its name alone:
 *   base/                 1777 + sticky, owned by root (or by the user who
 *                         made it: then only that user's programs use it; a
 *                         root process takes it over: fchown to root, and
 *                         moves a link or file planted in its place aside)
 *   base/uid-U/           0700, owned by U: nobody else can add, remove,
 *                         rename or read anything below; a directory of the
 *                         wrong owner or mode is refused (logged once, the
 *                         program runs unpublished); root renames a squatted
 *                         uid-0 aside and makes its own
 *   base/uid-U/net-N/     0700, owned by U: one per network namespace
 *   .../<pid>.stat        0600, owned by U, created O_EXCL (an old file of
 *                         the same name is unlinked first)
 *   .../doorbell          0600, owned by U: only U and root can ring it
 * Every directory is opened O_DIRECTORY|O_NOFOLLOW and fstat-checked (owner,
 * no group/other write); every file O_NOFOLLOW|O_NONBLOCK and checked to be a
 * regular file of the directory's owner and of the expected size, before it
 * is mapped or read.  `sockswitch stat` (cli/stat.c) reads with pread only,
 * rings a doorbell with pread/pwrite and a FUTEX_WAKE on a mapping it never
 * touches (a truncated file makes the syscall fail, never a SIGBUS), skips
 * and counts entries that fail the checks (or that claim a pid not running
 * as their uid), and removes entries of dead processes — a pid is alive only
 * if its start time matches the one recorded — in every namespace directory
 * it can reach, and the directories that become empty (never waiting for a
 * directory lock), so that a namespace whose inode number is reused never
 * inherits old entries.  A process of the
 * same uid can still truncate a program's own file or doorbell (SIGBUS), as
 * it could ptrace it: same-uid processes trust each other, as in the kernel. */
#include "regcache/regcache.h"
#include "switch/stat/statreg.h"

#include "common/log.h"
#include "common/params.h"
#include "common/sys.h"
#include "switch/switch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>

/* Kernel TCP states (include/net/tcp_states.h), as TCP_INFO reports them. */
enum { K_ESTABLISHED = 1, K_SYN_SENT, K_SYN_RECV, K_FIN_WAIT1, K_FIN_WAIT2, K_TIME_WAIT, K_CLOSE,
       K_CLOSE_WAIT, K_LAST_ACK, K_LISTEN, K_CLOSING };

#define REFRESH_MIN_NS 5000000ull  /* a doorbell rung in a loop costs at most 200 refreshes/s */
#define REFRESH_DIRTY_NS 50000000ull /* changes of a watched process: at most 20 refreshes/s */
#define WATCHED_NS 3000000000ull    /* rung within this: a reader is watching (ssw_statreg_changed) */

/* This process's registry, in the fork-local page (common/forklocal.h): a
 * forked child finds it all zero (unpublished, unlocked, no refresher) and
 * publishes a file of its own at its next socket, with no work at the fork. */
struct local {
	struct ssw_statreg_bell bell;     /* first: ssw_statreg_answer reads it (statreg.h) */
	pthread_mutex_t reg_lock;
	/* held by the refresher for a whole pass, references included: see ssw_statreg_quiesce */
	pthread_mutex_t pass_lock;
	struct ssw_statreg_hdr *hdr;      /* NULL: not published */
	struct ssw_statreg_slot *slots;
	uint32_t nslots;                  /* slots mapped */
	pid_t owner;
	_Atomic int nkernel;              /* live SSW_SR_KERNEL slots */
	/* Fallback connections that found the table full (at its largest):
	 * counted since they happened, closed or not — the refresher cannot tell. */
	_Atomic uint32_t kernel_dropped;
	uint64_t answered_ns;             /* the last pass's start */
	uint64_t rung_ns;                 /* the last ring seen */
	struct collect_buf {
		void *v;                  /* struct ref[max], this process's (a child allocates its own) */
		int max;
	} refs;
};
_Static_assert(sizeof(struct local) <= sizeof ssw_fl->statreg, "the registry's state fits its fork-local room");
#define L ((struct local *)ssw_fl->statreg)
static char my_dir[PATH_MAX - 32], my_path[PATH_MAX];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

const char *ssw_statreg_state_name(int state)
{
	switch (state) {
	case SSW_SR_LISTENING: return "listening";
	case SSW_SR_CONNECTING: return "connecting";
	case SSW_SR_CONNECTED: return "connected";
	case SSW_SR_CLOSING: return "closing";
	case SSW_SR_SUSPENDED: return "suspended";
	}
	return "unknown";
}

/* Reads a small /proc file with raw syscalls (read/close are interposed). */
static int read_small(const char *path, char *buf, size_t len)
{
	int fd = (int)SYS_(openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = sys_read(fd, buf, len - 1);
	sys_close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return (int)n;
}

const char *ssw_statreg_base(void)
{
	const char *base = ssw_param_str(SSW_P_STAT_DIR); /* NULL: unset or rejected */
	return base ? base : SSW_STATREG_DEFAULT_DIR;
}

uint64_t ssw_statreg_netns(void)
{
	char link[64];
	long n = SYS_(readlinkat, AT_FDCWD, "/proc/self/ns/net", link, sizeof link - 1);
	if (n <= 0)
		return 0;
	link[n] = '\0';
	unsigned long long ino = 0;
	if (sscanf(link, "net:[%llu]", &ino) != 1)
		return 0;
	return ino;
}

int ssw_statreg_dir(char *buf, unsigned len)
{
	uint64_t ino = ssw_statreg_netns();
	if (!ino)
		return -1;
	int k = snprintf(buf, len, "%s/uid-%u/net-%llu", ssw_statreg_base(), (unsigned)geteuid(),
			 (unsigned long long)ino);
	return k > 0 && (unsigned)k < len ? 0 : -1;
}

int ssw_statreg_open_dir(int dirfd, const char *name, uid_t uid)
{
	int fd = (int)SYS_(openat, dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (SYS_(fstat, fd, &st) < 0 || st.st_uid != uid || (st.st_mode & 022)) {
		sys_close(fd);
		errno = EPERM;
		return -1;
	}
	return fd;
}

int ssw_statreg_open_file(int dirfd, const char *name, int flags, uid_t uid, uint64_t minsize, uint64_t maxsize)
{
	int fd = (int)SYS_(openat, dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	struct stat st;
	int err = 0;
	if (SYS_(fstat, fd, &st) < 0)
		err = errno;
	else if (!S_ISREG(st.st_mode))
		err = EINVAL;
	else if (st.st_uid != uid || (st.st_mode & 022))
		err = EPERM;
	else if ((uint64_t)st.st_size < minsize || (uint64_t)st.st_size > maxsize)
		err = EINVAL;
	if (err) {
		sys_close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

uint64_t ssw_statreg_starttime(const char *stat)
{
	const char *p = strrchr(stat, ')');
	if (!p)
		return 0;
	/* after ") " come fields 3, 4, ...: starttime is field 22 */
	int field = 2;
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	return strtoull(p, NULL, 10);
}

static uint64_t proc_starttime(void)
{
	char buf[1024];
	if (read_small("/proc/self/stat", buf, sizeof buf) < 0)
		return 0;
	return ssw_statreg_starttime(buf);
}

static uint64_t realtime_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The base directory, shared by every user: sticky and world-writable like
 * /tmp, and owned by root or by this user (another user owning it could
 * remove or rename our directory).  Root takes over one made by a user. */
static int open_base(const char *base, int tries)
{
	bool made = SYS_(mkdirat, AT_FDCWD, base, 01777) == 0;
	int fd = (int)SYS_(openat, AT_FDCWD, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR) && geteuid() == 0 && tries > 0) {
		/* a link or a file planted where the directory goes: root moves it aside */
		char aside[PATH_MAX];
		snprintf(aside, sizeof aside, "%s.untrusted-%d-%llu", base, (int)getpid(), (unsigned long long)ssw_now_ns());
		SSW_WARN("stat registry: %s was not a directory: moved aside as %s", base, aside);
		if (SYS_(renameat, AT_FDCWD, base, AT_FDCWD, aside) == 0)
			return open_base(base, tries - 1);
	}
	if (fd < 0) {
		SSW_WARN_ONCE("stat registry: %s: %s: this program is not listed by `sockswitch stat`", base, strerror(errno));
		return -1;
	}
	struct stat st;
	uid_t me = geteuid();
	if (SYS_(fstat, fd, &st) < 0)
		goto bad;
	if (made && st.st_uid == me && SYS_(fchmod, fd, 01777) == 0)
		st.st_mode = S_IFDIR | 01777; /* the umask took bits away */
	if (st.st_uid != 0 && st.st_uid != me) {
		if (me != 0)
			goto bad;
		SSW_WARN("stat registry: %s was owned by uid %u: taken over by root", base, (unsigned)st.st_uid);
		if (SYS_(fchown, fd, 0, 0) < 0 || SYS_(fchmod, fd, 01777) < 0)
			goto bad;
		st.st_mode = S_IFDIR | 01777;
	}
	if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX))
		goto bad; /* shared, but anyone could remove our directory */
	return fd;
bad:
	SSW_WARN_ONCE("stat registry: %s is not a directory owned by root or uid %u (sticky if shared): "
		      "this program is not listed by `sockswitch stat`", base, (unsigned)me);
	sys_close(fd);
	return -1;
}

/* This user's directory name under dirfd: made 0700 if missing, refused if
 * someone else made it (root moves a squatted one aside and retries). */
static int open_own_dir(int dirfd, const char *name, const char *shown)
{
	uid_t me = geteuid();
	for (int attempt = 0; attempt < 2; attempt++) {
		SYS_(mkdirat, dirfd, name, 0700);
		int fd = ssw_statreg_open_dir(dirfd, name, me);
		if (fd >= 0)
			return fd;
		if (me != 0 || errno != EPERM)
			break;
		char aside[64];
		snprintf(aside, sizeof aside, ".untrusted-%s-%d-%llu", name, (int)getpid(),
			 (unsigned long long)ssw_now_ns());
		SSW_WARN("stat registry: %s/%s was not root's 0700 directory: moved aside as %s", shown, name, aside);
		if (SYS_(renameat, dirfd, name, dirfd, aside) < 0)
			break;
	}
	SSW_WARN_ONCE("stat registry: %s/%s is not a 0700 directory of uid %u: this program is not listed by "
		      "`sockswitch stat`", shown, name, (unsigned)me);
	return -1;
}

/* Maps an open, checked file read-write at size bytes (grown to it first). */
static void *map_fd(int fd, uint64_t size)
{
	struct stat st;
	if (SYS_(fstat, fd, &st) < 0 || ((uint64_t)st.st_size < size && SYS_(ftruncate, fd, (off_t)size) < 0))
		return NULL;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* ---- L->slots ---------------------------------------------------------------- */

static void slot_begin(struct ssw_statreg_slot *sl)
{
	__atomic_store_n(&sl->seq, sl->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void slot_end(struct ssw_statreg_slot *sl)
{
	__atomic_store_n(&sl->seq, sl->seq + 1, __ATOMIC_RELEASE);
}

static void slot_free(struct ssw_statreg_slot *sl)
{
	if (sl->kind == SSW_SR_FREE)
		return;
	if (sl->kind == SSW_SR_KERNEL)
		atomic_fetch_sub(&L->nkernel, 1);
	slot_begin(sl);
	sl->kind = SSW_SR_FREE;
	slot_end(sl);
}

/* Doubles the table (file and mapping); with L->reg_lock held.  Readers size
 * their copy from the header's L->nslots, set once the file is grown. */
static bool grow(void)
{
	if (L->nslots >= SSW_STATREG_MAX_SLOTS)
		return false;
	uint32_t n = L->nslots * 2;
	int fd = ssw_statreg_open_file(AT_FDCWD, my_path, O_RDWR, geteuid(), 0, SSW_STATREG_FILE_SIZE(n));
	if (fd < 0)
		return false;
	bool ok = SYS_(ftruncate, fd, (off_t)SSW_STATREG_FILE_SIZE(n)) == 0;
	sys_close(fd);
	void *p = ok ? mremap(L->hdr, SSW_STATREG_FILE_SIZE(L->nslots), SSW_STATREG_FILE_SIZE(n), MREMAP_MAYMOVE) : MAP_FAILED;
	if (p == MAP_FAILED)
		return false;
	L->hdr = p;
	L->slots = (struct ssw_statreg_slot *)((char *)p + SSW_STATREG_HDR_SIZE);
	L->nslots = n;
	__atomic_store_n(&L->hdr->nslots, n, __ATOMIC_RELEASE);
	return true;
}

/* A free slot, or NULL; with L->reg_lock held (it may move the table). */
static struct ssw_statreg_slot *slot_alloc(void)
{
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used; i++)
		if (L->slots[i].kind == SSW_SR_FREE)
			return &L->slots[i];
	if (used >= L->nslots && !grow())
		return NULL;
	__atomic_store_n(&L->hdr->used, used + 1, __ATOMIC_RELEASE);
	return &L->slots[used];
}

static void fmt_addr(const struct sockaddr_storage *a, char *out, size_t n)
{
	char h[INET6_ADDRSTRLEN] = "?";
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *i = (const void *)a;
		inet_ntop(AF_INET, &i->sin_addr, h, sizeof h);
		snprintf(out, n, "%s:%u", h, ntohs(i->sin_port));
	} else if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *i = (const void *)a;
		if (IN6_IS_ADDR_V4MAPPED(&i->sin6_addr)) {
			inet_ntop(AF_INET, &i->sin6_addr.s6_addr[12], h, sizeof h);
			snprintf(out, n, "%s:%u", h, ntohs(i->sin6_port));
		} else {
			inet_ntop(AF_INET6, &i->sin6_addr, h, sizeof h);
			snprintf(out, n, "[%s]:%u", h, ntohs(i->sin6_port));
		}
	} else {
		snprintf(out, n, "*");
	}
}

static uint64_t fd_inode(int fd)
{
	struct stat st;
	if (SYS_(fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	return (uint64_t)st.st_ino;
}

/* Re-read a kernel connection; false when fd no longer is that socket. */
static bool kernel_refresh(struct ssw_statreg_slot *sl)
{
	if (fd_inode(sl->fd) != sl->ino)
		return false;
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	char loc[64] = "*", rem[64];
	memcpy(rem, sl->remote, sizeof rem);
	if (sys_getsockname(sl->fd, (struct sockaddr *)&a, &l) == 0)
		fmt_addr(&a, loc, sizeof loc);
	l = sizeof a;
	if ((int)SYS_(getpeername, sl->fd, (struct sockaddr *)&a, &l) == 0)
		fmt_addr(&a, rem, sizeof rem);
	struct tcp_info ti;
	memset(&ti, 0, sizeof ti);
	l = sizeof ti;
	int st = SSW_SR_UNKNOWN;
	bool have = sys_getsockopt(sl->fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0;
	if (have) {
		switch (ti.tcpi_state) {
		case K_ESTABLISHED: st = SSW_SR_CONNECTED; break;
		case K_SYN_SENT: case K_SYN_RECV: st = SSW_SR_CONNECTING; break;
		case K_LISTEN: st = SSW_SR_LISTENING; break;
		default: st = SSW_SR_CLOSING; break;
		}
	}
	slot_begin(sl);
	memcpy(sl->local, loc, sizeof sl->local);
	memcpy(sl->remote, rem, sizeof sl->remote);
	sl->state = (uint8_t)st;
	if (have && l >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) {
		/* the SYN counts as one byte acknowledged */
		sl->bytes_sent = ti.tcpi_bytes_acked ? ti.tcpi_bytes_acked - 1 : 0;
		sl->bytes_received = ti.tcpi_bytes_received;
	}
	if (have && l >= offsetof(struct tcp_info, tcpi_data_segs_out) + sizeof ti.tcpi_data_segs_out) {
		sl->msgs_sent = ti.tcpi_data_segs_out;
		sl->msgs_received = ti.tcpi_data_segs_in;
	}
	slot_end(sl);
	return true;
}

/* ---- the refresher -------------------------------------------------------- */

struct ref {
	int fd;
	struct ssw_sock *s;
};

struct collect {
	struct ref *v;
	int n, max, dropped;
};

static void collect_one(int fd, struct ssw_sock *s, void *arg)
{
	struct collect *c = arg;
	if (c->n >= c->max) {
		c->dropped++;
		return;
	}
	atomic_fetch_add(&s->refs, 1); /* the table's own reference keeps it above zero */
	c->v[c->n++] = (struct ref){ fd, s };
}

static void publish_sock(int fd, struct ssw_sock *s, struct ssw_statreg_slot *sl)
{
	struct ssw_session_stats st;
	int64_t ring = -1;
	bool have_stats = false;
	int state = SSW_SR_UNKNOWN;
	/* Never wait for a connect in progress: it holds the lock while it
	 * waits, and the refresher must stay quick. */
	bool locked = pthread_mutex_trylock(&s->lock) == 0;
	enum ssw_state ss = s->state;
	if (ss == SSW_ST_LISTENING) {
		state = SSW_SR_LISTENING;
	} else if (ss == SSW_ST_CONNECTED && s->sess) {
		/* sess is fixed once connected and lives as long as our reference */
		ssw_session_get_stats(s->sess, &st);
		ring = ssw_session_resident(s->sess); /* a system call (mincore): off the data path */
		have_stats = true;
		/* half-closed either way, or reset: what TCP calls the closing states */
		state = st.tcp_state == K_ESTABLISHED ? SSW_SR_CONNECTED : SSW_SR_CLOSING;
	} else if (ss == SSW_ST_CONNECTING) {
		state = SSW_SR_CONNECTING;
	}
	char loc[64], rem[64] = "*";
	fmt_addr(&s->local, loc, sizeof loc);
	if (ss != SSW_ST_LISTENING)
		fmt_addr(ss == SSW_ST_CONNECTING ? &s->dst : &s->peer, rem, sizeof rem);
	char pname[sizeof sl->provider] = "?", pdesc[sizeof sl->describe] = "", note[sizeof sl->reason] = "";
	uint32_t refused = 0;
	if (ss == SSW_ST_LISTENING) {
		refused = atomic_load(&s->refused);
		if (locked) /* written under the lock (listen.c refuse) */
			memcpy(note, s->lnote, sizeof note < sizeof s->lnote ? sizeof note : sizeof s->lnote);
		note[sizeof note - 1] = '\0';
		/* each provider once (a dual-stack wildcard has two listeners each) */
		size_t k = 0;
		for (int i = 0; i < s->npl && i < SSW_MAX_PLISTEN; i++) {
			const char *nm = s->pl[i].prov->name;
			bool dup = false;
			for (int j = 0; j < i && !dup; j++)
				dup = s->pl[j].prov == s->pl[i].prov;
			if (!dup && k < sizeof pname)
				k += (size_t)snprintf(pname + k, sizeof pname - k, "%s%s", k ? "+" : "", nm);
		}
	} else if (s->prov && s->prov->name) {
		snprintf(pname, sizeof pname, "%s", s->prov->name);
		if (s->prov->describe)
			snprintf(pdesc, sizeof pdesc, "%s", s->prov->describe());
	}
	bool shared = s->sess && !ssw_session_last_holder(s->sess); /* held by a forked process too */
	if (locked)
		pthread_mutex_unlock(&s->lock);

	slot_begin(sl);
	sl->kind = SSW_SR_SWITCHED;
	sl->state = (uint8_t)state;
	sl->flags = shared ? SSW_SR_F_SHARED : 0;
	sl->fd = fd;
	memcpy(sl->provider, pname, sizeof pname);
	memcpy(sl->describe, pdesc, sizeof pdesc);
	if (have_stats) {
		sl->bytes_sent = st.bytes_sent;
		sl->bytes_received = st.bytes_received;
		sl->msgs_sent = st.msgs_sent;
		sl->msgs_received = st.msgs_received;
		sl->tx_inflight = st.tx_inflight;
		sl->tx_limit = st.tx_limit;
		sl->rx_window = st.rx_window;
	} else {
		sl->bytes_sent = sl->bytes_received = sl->msgs_sent = sl->msgs_received = 0;
		sl->tx_inflight = sl->tx_limit = sl->rx_window = 0;
	}
	sl->ring_resident = ring > 0 ? (uint64_t)ring : 0;
	sl->ino = 0;
	sl->since_ns = 0;
	memcpy(sl->local, loc, sizeof loc);
	memcpy(sl->remote, rem, sizeof rem);
	memcpy(sl->reason, note, sizeof note);
	sl->refused = refused;
	slot_end(sl);
}

/* false: the registry was busy (nothing changed; answered at a later call) */
static bool refresh(struct collect *c)
{
	c->n = 0;
	c->dropped = 0;
	ssw_fdtab_each(collect_one, c);

	/* never waits: the caller may be a signal handler that interrupted a
	 * holder (ssw_statreg_answer) */
	bool locked = pthread_mutex_trylock(&L->reg_lock) == 0;
	if (!locked)
		goto drop;
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used; i++) {
		struct ssw_statreg_slot *sl = &L->slots[i];
		if (sl->kind == SSW_SR_SWITCHED || (sl->kind == SSW_SR_KERNEL && !kernel_refresh(sl)))
			slot_free(sl);
	}
	int dropped = c->dropped;
	for (int i = 0; i < c->n; i++) {
		struct ssw_statreg_slot *sl = slot_alloc();
		if (sl)
			publish_sock(c->v[i].fd, c->v[i].s, sl);
		else
			dropped++;
	}
	__atomic_store_n(&L->hdr->dropped, (uint32_t)dropped + atomic_load(&L->kernel_dropped), __ATOMIC_RELAXED);
	struct ssw_regcache_stats rc;
	ssw_regcache_totals(&rc);
	L->hdr->regcache.hits = rc.hits;
	L->hdr->regcache.misses = rc.misses;
	L->hdr->regcache.evictions = rc.evictions;
	L->hdr->regcache.invalidations = rc.invalidations;
	L->hdr->regcache.registrations = rc.registrations;
	L->hdr->regcache.entries = rc.entries;
	L->hdr->regcache.bytes = rc.bytes;
	__atomic_store_n(&L->hdr->refreshed_ns, realtime_ns(), __ATOMIC_RELAXED);
	pthread_mutex_unlock(&L->reg_lock);
drop:
	/* outside the registry lock: the last reference may tear a socket down */
	for (int i = 0; i < c->n; i++)
		ssw_sock_put(c->v[i].s);
	return locked;
}

/* The pass answering a ring, in the caller's thread: an interposed call's
 * entry or a switch wait's wake-up, never with a lock of the switch held.
 *
 * Why not a thread of our own, as before: glibc forks a process that ever
 * had a second thread by its multithreaded path (malloc arenas, stdio and
 * stack lists reset in parent and child), a dozen more page faults a fork,
 * about 300 us on these machines — fork + _exit + waitpid took 1.4x as long
 * under the switch, and every fork-per-connection server paid it per
 * connection (issue 18).  The cost here: a process answers at its next
 * socket call, or within SSW_STATREG_LOOK_MS while it sleeps in one of the
 * switch's waits (epoll, poll/select); one blocked elsewhere (sleep,
 * waitpid, a pipe) answers when it comes back, and `sockswitch stat` shows
 * its last rows as stale meanwhile. */
void ssw_statreg_answer_slow(void)
{
	int saved = errno;
	uint32_t v = __atomic_load_n(L->bell.door, __ATOMIC_ACQUIRE);
	uint64_t t0 = ssw_now_ns();
	bool rung = v != L->bell.served;
	if (rung)
		L->rung_ns = t0;
	/* a change alone (no ring): at most every REFRESH_DIRTY_NS */
	uint64_t gap = rung ? REFRESH_MIN_NS : REFRESH_DIRTY_NS;
	if ((!rung && !L->bell.dirty) || t0 - L->answered_ns < gap ||
	    pthread_mutex_trylock(&L->pass_lock) != 0) /* another thread answers it */
		goto out;
	L->bell.dirty = 0;
	v = __atomic_load_n(L->bell.door, __ATOMIC_ACQUIRE);
	struct collect c = { .v = L->refs.v, .max = L->refs.max };
	if (!c.v) {
		c.max = SSW_STATREG_SLOTS;
		c.v = malloc(sizeof *c.v * (size_t)c.max);
		if (!c.v) {
			pthread_mutex_unlock(&L->pass_lock);
			goto out;
		}
	}
	bool done = refresh(&c);
	int cap_max = SSW_STATREG_MAX_SLOTS;
	if (done && c.dropped && c.max < cap_max) {
		/* more sockets than references: a bigger array, then again */
		int m = c.n + c.dropped + c.dropped / 4;
		m = m > cap_max ? cap_max : m;
		struct ref *nv = realloc(c.v, sizeof *c.v * (size_t)m);
		if (nv) {
			c.v = nv;
			c.max = m;
			done = refresh(&c);
		}
	}
	L->refs.v = c.v;
	L->refs.max = c.max;
	if (!done || pthread_mutex_trylock(&L->reg_lock) != 0) {
		pthread_mutex_unlock(&L->pass_lock);
		goto out;
	}
	L->answered_ns = t0;
	__atomic_store_n(&L->bell.served, v, __ATOMIC_RELAXED);
	__atomic_store_n(&L->hdr->ack, v, __ATOMIC_RELEASE); /* under reg_lock: the table may move when it grows */
	pthread_mutex_unlock(&L->reg_lock);
	pthread_mutex_unlock(&L->pass_lock);
out:
	errno = saved;
}

void ssw_statreg_changed(int fd, struct ssw_sock *sock)
{
	if (!__atomic_load_n(&L->bell.door, __ATOMIC_ACQUIRE) || !L->rung_ns ||
	    ssw_now_ns() - L->rung_ns > WATCHED_NS)
		return; /* not watched now: nothing to keep up to date */
	/* that socket's row alone: never waits (see ssw_statreg_answer) */
	if (pthread_mutex_trylock(&L->reg_lock) != 0) {
		L->bell.dirty = 1; /* the next call's answer does it */
		return;
	}
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used; i++) {
		struct ssw_statreg_slot *sl = &L->slots[i];
		if (sl->kind != SSW_SR_SWITCHED || sl->fd != fd)
			continue;
		if (sock)
			publish_sock(fd, sock, sl);
		else
			slot_free(sl);
		break;
	}
	pthread_mutex_unlock(&L->reg_lock);
}

/* ---- set-up --------------------------------------------------------------- */

/* The namespace's directory goes away with its last process, so that test
 * namespaces leave nothing behind.  Creators hold the directory's lock shared
 * while they add their file and map the doorbell; the last one out holds it
 * exclusively while it removes the doorbell and the directory. */
static int lock_dir(int dirfd, const char *name, int how)
{
	int fd = ssw_statreg_open_dir(dirfd, name, geteuid());
	if (fd < 0)
		return -1;
	struct stat st;
	if (SYS_(flock, fd, how) < 0 || SYS_(fstat, fd, &st) < 0 || st.st_nlink == 0) {
		sys_close(fd); /* removed meanwhile */
		return -1;
	}
	return fd;
}

static bool only_doorbell(int dfd)
{
	char buf[2048];
	for (;;) {
		long n = SYS_(getdents64, dfd, buf, sizeof buf);
		if (n <= 0)
			return n == 0;
		for (long off = 0; off < n;) {
			/* struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name */
			unsigned short reclen;
			memcpy(&reclen, buf + off + 16, sizeof reclen);
			const char *name = buf + off + 19;
			if (strcmp(name, ".") && strcmp(name, "..") && strcmp(name, "doorbell"))
				return false;
			off += reclen;
		}
	}
}

static void at_exit(void)
{
	if (!L->hdr || L->owner != ssw_pid())
		return;
	int dfd = lock_dir(AT_FDCWD, my_dir, LOCK_EX);
	if (dfd < 0)
		return; /* moved, or no longer ours: leave it to `sockswitch stat` */
	char name[32];
	snprintf(name, sizeof name, "%d.stat", (int)L->owner);
	SYS_(unlinkat, dfd, name, 0);
	if (only_doorbell(dfd)) {
		SYS_(unlinkat, dfd, "doorbell", 0);
		SYS_(unlinkat, AT_FDCWD, my_dir, AT_REMOVEDIR);
	}
	sys_close(dfd);
}

/* Leaving without exit handlers: exec (this image's sockets go with it, and
 * the pid lives on in the new program, which starts a file of its own if it
 * switches anything; if the exec fails, this process no longer shows in
 * `stat` — rare: a failed exec is usually followed by _exit), or a relay's
 * _exit. */
void ssw_statreg_leave(void)
{
	at_exit();
}

/* The refresher may hold the registry lock at the fork: the child would
 * inherit it locked by a thread it does not have. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&L->reg_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&L->reg_lock);
}

/* The pass lock is taken by fork.c before anything else of a fork: a pass
 * ends by dropping its references, which may tear a socket down, and that
 * waits for fork.c's lock; taken after it (in atfork_prepare), the fork
 * and the pass would wait for each other. */
void ssw_statreg_fork_begin(void)
{
	pthread_mutex_lock(&L->pass_lock);
}

/* The child of a fork has its parent's mappings but not its refresher: its
 * registry state is all zero (the fork-local page), and it starts over with a
 * file of its own at its next socket; its pass lock is a fresh one. */
void ssw_statreg_fork_end(bool child)
{
	if (!child)
		pthread_mutex_unlock(&L->pass_lock);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, NULL);
	atexit(at_exit);
}

static bool disabled(void)
{
	return ssw_param_choice(SSW_P_STAT) == 0;
}

/* Opens (making them if needed) and checks base/uid-U/net-N; returns the
 * namespace directory, locked shared, or -1. */
static int open_ns_dir(uint64_t ino)
{
	const char *base = ssw_statreg_base();
	char uname[32], nname[32], shown[PATH_MAX];
	snprintf(uname, sizeof uname, "uid-%u", (unsigned)geteuid());
	snprintf(nname, sizeof nname, "net-%llu", (unsigned long long)ino);
	int bfd = open_base(base, 2);
	if (bfd < 0)
		return -1;
	int ufd = open_own_dir(bfd, uname, base);
	sys_close(bfd);
	if (ufd < 0)
		return -1;
	snprintf(shown, sizeof shown, "%s/%s", base, uname);
	int nfd = -1;
	for (int attempt = 0; attempt < 3 && nfd < 0; attempt++) {
		int fd = open_own_dir(ufd, nname, shown);
		if (fd < 0)
			break;
		sys_close(fd);
		nfd = lock_dir(ufd, nname, LOCK_SH); /* removed meanwhile by the last one out: again */
	}
	sys_close(ufd);
	return nfd;
}

static void create_locked(void)
{
	uint64_t ino = ssw_statreg_netns();
	if (!ino || ssw_statreg_dir(my_dir, sizeof my_dir) < 0)
		return;
	int dfd = open_ns_dir(ino);
	if (dfd < 0)
		return;
	uid_t me = geteuid();
	char name[32];
	snprintf(name, sizeof name, "%d.stat", (int)getpid());
	snprintf(my_path, sizeof my_path, "%s/%s", my_dir, name);
	SYS_(unlinkat, dfd, name, 0); /* a file of a dead process with our pid */
	int fd = ssw_statreg_open_file(dfd, name, O_RDWR | O_CREAT | O_EXCL, me, 0, 0);
	struct ssw_statreg_hdr *h = fd >= 0 ? map_fd(fd, SSW_STATREG_FILE_SIZE(SSW_STATREG_SLOTS)) : NULL;
	/* the bell word, read at every socket call: a mapping of the header
	 * page alone, which the table's growth (mremap) never moves; in our own
	 * file (the shared doorbell may be truncated by any process of the
	 * user, and a read there would then be a SIGBUS) */
	struct ssw_statreg_hdr *bh = h ? map_fd(fd, SSW_STATREG_HDR_SIZE) : NULL;
	if (fd >= 0)
		sys_close(fd);
	/* the readers' counter: they ring each process's bell with its next value */
	fd = bh ? ssw_statreg_open_file(dfd, "doorbell", O_RDWR | O_CREAT, me, 0, SSW_STATREG_DOOR_SIZE) : -1;
	bool door = fd >= 0 && (SYS_(ftruncate, fd, SSW_STATREG_DOOR_SIZE) == 0);
	if (fd >= 0)
		sys_close(fd);
	if (!door) {
		if (bh)
			munmap(bh, SSW_STATREG_HDR_SIZE);
		SSW_WARN_ONCE("stat registry: cannot publish in %s: %s", my_dir, strerror(errno));
		if (h) {
			munmap(h, SSW_STATREG_FILE_SIZE(SSW_STATREG_SLOTS));
			SYS_(unlinkat, dfd, name, 0);
		}
		sys_close(dfd); /* unlocks */
		return;
	}
	sys_close(dfd); /* unlocks */
	h->version = SSW_STATREG_VERSION;
	h->nslots = SSW_STATREG_SLOTS;
	L->nslots = SSW_STATREG_SLOTS;
	h->slot_size = sizeof(struct ssw_statreg_slot);
	h->hdr_size = SSW_STATREG_HDR_SIZE;
	h->pid = (int32_t)getpid();
	h->starttime = proc_starttime();
	h->netns = ino;
	h->refreshed_ns = realtime_ns();
	prctl(PR_GET_NAME, h->comm, 0, 0, 0);
	h->comm[sizeof h->comm - 1] = '\0';
	__atomic_store_n(&h->magic, SSW_STATREG_MAGIC, __ATOMIC_RELEASE);

	/* rows of switched sockets come with the first ring answered */
	L->bell.served = 0;
	L->hdr = h;
	L->slots = (struct ssw_statreg_slot *)((char *)h + SSW_STATREG_HDR_SIZE);
	L->owner = getpid();
	pthread_once(&atfork_once, atfork_register);

	__atomic_store_n(&L->bell.door, &bh->bell, __ATOMIC_RELEASE);
	SSW_DEBUG("stat registry: %s", my_path);
}

/* A socket the application closed while a refresh pass held a reference is
 * torn down (and its bytes counted) by the refresher when the pass ends; the
 * exit summary waits for a pass in progress, at most a second, so that a
 * short-lived program does not lose its last connection's counters. */
void ssw_statreg_quiesce(void)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 1;
	if (pthread_mutex_timedlock(&L->pass_lock, &dl) == 0)
		pthread_mutex_unlock(&L->pass_lock);
}

void ssw_statreg_ensure_slow(void)
{
	int saved = errno;
	pthread_mutex_lock(&L->reg_lock);
	if (!ssw_fl->statreg_ready) {
		if (!disabled())
			create_locked();
		__atomic_store_n(&ssw_fl->statreg_ready, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&L->reg_lock);
	errno = saved;
}

/* ---- hooks ---------------------------------------------------------------- */

void ssw_statreg_kernel(int fd, const struct sockaddr *peer, socklen_t len, const char *why)
{
	ssw_statreg_ensure();
	if (!__atomic_load_n(&L->hdr, __ATOMIC_ACQUIRE) || fd < 0)
		return;
	int saved = errno;
	uint64_t ino = fd_inode(fd);
	if (!ino)
		goto out;
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	char loc[64] = "*", rem[64] = "*";
	if (sys_getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		fmt_addr(&a, loc, sizeof loc);
	if (peer && len >= sizeof(sa_family_t)) {
		memset(&a, 0, sizeof a);
		memcpy(&a, peer, len < sizeof a ? len : sizeof a);
		fmt_addr(&a, rem, sizeof rem);
	}

	pthread_mutex_lock(&L->reg_lock);
	if (!L->hdr) {
		pthread_mutex_unlock(&L->reg_lock);
		goto out;
	}
	struct ssw_statreg_slot *sl = NULL;
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used && !sl; i++)
		if (L->slots[i].kind == SSW_SR_KERNEL && L->slots[i].fd == fd)
			sl = &L->slots[i]; /* the fd was closed behind our back */
	if (!sl)
		sl = slot_alloc();
	for (uint32_t i = 0; i < used && !sl; i++)
		if (L->slots[i].kind == SSW_SR_KERNEL && fd_inode(L->slots[i].fd) != L->slots[i].ino) {
			slot_free(&L->slots[i]);
			sl = &L->slots[i];
		}
	if (!sl) {
		atomic_fetch_add(&L->kernel_dropped, 1);
		__atomic_fetch_add(&L->hdr->dropped, 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&L->reg_lock);
		goto out;
	}
	if (sl->kind != SSW_SR_KERNEL)
		atomic_fetch_add(&L->nkernel, 1);
	slot_begin(sl);
	sl->kind = SSW_SR_KERNEL;
	sl->state = SSW_SR_CONNECTING;
	sl->flags = 0;
	sl->fd = fd;
	snprintf(sl->provider, sizeof sl->provider, "tcp");
	sl->describe[0] = '\0';
	sl->bytes_sent = sl->bytes_received = sl->msgs_sent = sl->msgs_received = 0;
	sl->tx_inflight = sl->tx_limit = sl->rx_window = 0;
	sl->ring_resident = 0;
	sl->ino = ino;
	sl->since_ns = realtime_ns();
	memcpy(sl->local, loc, sizeof loc);
	memcpy(sl->remote, rem, sizeof rem);
	snprintf(sl->reason, sizeof sl->reason, "%s", why ? why : "");
	sl->refused = 0;
	slot_end(sl);
	/* its state now (connected, listening), from the kernel: a process
	 * that never answers a ring (it sleeps elsewhere) still shows it */
	if (!kernel_refresh(sl))
		slot_free(sl);
	pthread_mutex_unlock(&L->reg_lock);
out:
	errno = saved;
}

void ssw_statreg_route_tcp(int fd, const struct sockaddr *peer, socklen_t len, const struct ssw_route_rule *rule)
{
	if (!rule)
		return; /* no rule matched: a remote host, not a decision worth listing */
	char why[96 + 16];
	snprintf(why, sizeof why, "route says tcp (%.80s)", rule->origin);
	ssw_statreg_kernel(fd, peer, len, why);
}

void ssw_statreg_fd_closed(int fd)
{
	if (!atomic_load_explicit(&L->nkernel, memory_order_relaxed))
		return;
	pthread_mutex_lock(&L->reg_lock);
	if (L->hdr) {
		uint32_t used = L->hdr->used;
		for (uint32_t i = 0; i < used; i++)
			if (L->slots[i].kind == SSW_SR_KERNEL && L->slots[i].fd == fd)
				slot_free(&L->slots[i]);
	}
	pthread_mutex_unlock(&L->reg_lock);
}
