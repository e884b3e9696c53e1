/* statreg_files.c — the registry's directories and files for `sockswitch stat`
 * (layout and protocol in statreg.h): where they are, how they are made,
 * opened and checked.  Every failure just leaves the process unpublished.
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
#include "switch/stat/statreg_priv.h"

#include "common/forklocal.h"
#include "common/log.h"
#include "common/params.h"
#include "common/sys.h"
#include "switch/switch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

/* With raw syscalls: read/close are interposed in the library. */
int ssw_statreg_read_small(const char *path, char *buf, size_t len)
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

uint64_t ssw_statreg_proc_starttime(void)
{
	char buf[1024];
	if (ssw_statreg_read_small("/proc/self/stat", buf, sizeof buf) < 0)
		return 0;
	return ssw_statreg_starttime(buf);
}

uint64_t ssw_statreg_realtime_ns(void)
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
void *ssw_statreg_map(int fd, uint64_t size)
{
	struct stat st;
	if (SYS_(fstat, fd, &st) < 0 || ((uint64_t)st.st_size < size && SYS_(ftruncate, fd, (off_t)size) < 0))
		return NULL;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* A child starts a file of its own (its registry state is wiped at
	 * fork): it must not keep ours, where a child that changed user could
	 * write the slot count we loop over.  Kept where the state is not
	 * wiped by the kernel (a raw clone would still use it). */
	if (ssw_forklocal_wiped())
		(void)SYS_(madvise, p, size, MADV_DONTFORK);
	return p;
}


/* The namespace's directory goes away with its last process, so that test
 * namespaces leave nothing behind.  Creators hold the directory's lock shared
 * while they add their file and map the doorbell; the last one out holds it
 * exclusively while it removes the doorbell and the directory. */
int ssw_statreg_lock_dir(int dirfd, const char *name, int how)
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

bool ssw_statreg_only_doorbell(int dfd)
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

/* Opens (making them if needed) and checks base/uid-U/net-N; returns the
 * namespace directory, locked shared, or -1. */
int ssw_statreg_open_ns_dir(uint64_t ino)
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
		nfd = ssw_statreg_lock_dir(ufd, nname, LOCK_SH); /* removed meanwhile by the last one out: again */
	}
	sys_close(ufd);
	return nfd;
}
