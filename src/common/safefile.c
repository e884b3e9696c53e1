/* safefile.c — opens the files the switch's settings name without blocking,
 * without following another user's planted link, and only if regular. */
#include "common/safefile.h"

#include "common/sys.h"

#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int stat_at(int dfd, const char *p, struct stat *st, int flags)
{
	return (int)SYS_(newfstatat, dfd, p, st, flags);
}

static int stat_fd(int fd, struct stat *st)
{
	return stat_at(fd, "", st, AT_EMPTY_PATH);
}

static const char *type_name(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFIFO: return "a FIFO";
	case S_IFCHR: return "a character device";
	case S_IFBLK: return "a block device";
	case S_IFDIR: return "a directory";
	case S_IFSOCK: return "a socket";
	case S_IFLNK: return "a symlink";
	default: return "a special file";
	}
}

/* The rule of the kernel's protected_symlinks and protected_regular: in a
 * sticky world-writable directory, an entry of a third user (neither us nor
 * the directory's owner) may have been planted there to make us follow it. */
static bool planted(const struct stat *dir, const struct stat *entry)
{
	return (dir->st_mode & S_ISVTX) && (dir->st_mode & S_IWOTH) && entry->st_uid != (uid_t)SYS_(geteuid, 0) &&
	       entry->st_uid != dir->st_uid;
}

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -1;
}

static int fail_errno(char *why, size_t whylen, int e)
{
	char buf[96];
	snprintf(why, whylen, "%s", strerror_r(e, buf, sizeof buf));
	return -1;
}

/* dir: the directory component that is the link, NULL for the file itself */
static int refuse_link(const char *dir, const struct stat *l, char *why, size_t whylen)
{
	return fail(why, whylen,
		    "%s%s%sis a symlink of uid %u in a sticky world-writable directory: not followed (another user may have planted it)",
		    dir ? "its directory " : "", dir ? dir : "", dir ? " " : "", (unsigned)l->st_uid);
}

/* One directory step of the walk: an O_PATH fd of comp inside dfd; a
 * symlink is followed only when nobody else could have planted it (an entry
 * of ours or of the directory's owner cannot be swapped in a sticky
 * directory, so the second lookup finds the same link). */
static int step(int dfd, const char *prefix, const char *comp, char *why, size_t whylen)
{
	struct stat st, d;
	int fd = (int)SYS_(openat, dfd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return fail_errno(why, whylen, errno);
	if (stat_fd(fd, &st) < 0 || stat_fd(dfd, &d) < 0) {
		int e = errno;
		sys_close(fd);
		return fail_errno(why, whylen, e);
	}
	if (S_ISDIR(st.st_mode))
		return fd;
	sys_close(fd);
	if (!S_ISLNK(st.st_mode))
		return fail(why, whylen, "%s is not a directory", prefix);
	if (planted(&d, &st))
		return refuse_link(prefix, &st, why, whylen);
	fd = (int)SYS_(openat, dfd, comp, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? fail_errno(why, whylen, errno) : fd;
}

/* O_PATH fd of the directory holding the last component of buf (a writable
 * copy of the path), each directory symlink on the way checked; *base is
 * that last component ("" when the path ends in '/'). */
static int walk(char *buf, char **base, char *why, size_t whylen)
{
	int dfd = (int)SYS_(openat, AT_FDCWD, buf[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return fail_errno(why, whylen, errno);
	char *p = buf;
	for (;;) {
		while (*p == '/')
			p++;
		char *slash = strchr(p, '/');
		if (!slash) {
			*base = p;
			return dfd;
		}
		*slash = '\0'; /* buf is now the prefix, for messages */
		int nfd = step(dfd, buf, p, why, whylen);
		*slash = '/';
		sys_close(dfd);
		if (nfd < 0)
			return -1;
		dfd = nfd;
		p = slash + 1;
	}
}

/* Checks the last component before opening it: no device is opened, no
 * FIFO waited on, no planted link followed.  *follow: it is a link we may
 * follow.  ENOENT is left to the open (O_CREAT may create it). */
static int check_entry(int dfd, const char *base, bool *follow, char *why, size_t whylen)
{
	struct stat d, e;
	*follow = false;
	if (stat_fd(dfd, &d) < 0)
		return fail_errno(why, whylen, errno);
	if (stat_at(dfd, base, &e, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : fail_errno(why, whylen, errno);
	if (S_ISLNK(e.st_mode)) {
		if (planted(&d, &e))
			return refuse_link(NULL, &e, why, whylen);
		*follow = true;
		if (stat_at(dfd, base, &e, 0) < 0)
			return errno == ENOENT ? 0 : fail_errno(why, whylen, errno);
	} else if (S_ISREG(e.st_mode) && planted(&d, &e)) {
		return fail(why, whylen, "is a file of uid %u in a sticky world-writable directory: not used (another user may have planted it)",
			    (unsigned)e.st_uid);
	}
	if (!S_ISREG(e.st_mode))
		return fail(why, whylen, "is %s, not a regular file", type_name(e.st_mode));
	return 0;
}

int ssw_file_open(const char *path, enum ssw_file_mode mode, char *why, size_t whylen)
{
	char buf[PATH_MAX], *base;
	if (!path || !*path)
		return fail(why, whylen, "empty path");
	if (strlen(path) >= sizeof buf)
		return fail_errno(why, whylen, ENAMETOOLONG);
	memcpy(buf, path, strlen(path) + 1);
	int dfd = walk(buf, &base, why, whylen);
	if (dfd < 0)
		return -1;
	bool follow = false;
	int fd = -1;
	if (!*base)
		fail(why, whylen, "is a directory, not a regular file");
	else if (check_entry(dfd, base, &follow, why, whylen) == 0) {
		int flags = (mode == SSW_FILE_READ ? O_RDONLY : O_WRONLY | O_APPEND | O_CREAT) | O_NONBLOCK |
			    O_CLOEXEC | O_NOCTTY | (follow ? 0 : O_NOFOLLOW);
		fd = (int)SYS_(openat, dfd, base, flags, 0644);
		if (fd < 0)
			fail_errno(why, whylen, errno);
	}
	struct stat st, d;
	/* the entry may have changed between the check and the open */
	if (fd >= 0 && (stat_fd(fd, &st) < 0 || stat_fd(dfd, &d) < 0 || !S_ISREG(st.st_mode) ||
			(!follow && planted(&d, &st)))) {
		fail(why, whylen, "changed while being opened: not used");
		sys_close(fd);
		fd = -1;
	}
	sys_close(dfd);
	return fd;
}

int ssw_file_read(const char *path, size_t max, char **text, size_t *len, char *why, size_t whylen)
{
	int fd = ssw_file_open(path, SSW_FILE_READ, why, whylen);
	if (fd < 0)
		return -1;
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	if (stat_fd(fd, &st) < 0 || (size_t)st.st_size > max)
		goto too_large;
	/* one byte past the limit is how growth beyond it is noticed */
	buf = malloc(max + 2);
	if (!buf) {
		fail_errno(why, whylen, ENOMEM);
		goto out;
	}
	for (;;) {
		ssize_t r = sys_read(fd, buf + n, max + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail_errno(why, whylen, errno);
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max)
			goto too_large;
	}
	buf[n] = '\0';
	sys_close(fd);
	*text = buf;
	*len = n;
	return 0;
too_large:
	if (max % (1u << 20) == 0)
		snprintf(why, whylen, "larger than %zu MiB (the limit)", max >> 20);
	else
		snprintf(why, whylen, "larger than %zu bytes (the limit)", max);
out:
	free(buf);
	sys_close(fd);
	return -1;
}
