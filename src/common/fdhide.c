/* fdhide.c — keep the switch's own descriptors out of the application's way.
 *
 * Programs see the numbers the kernel hands them: select() users are bound
 * by FD_SETSIZE (1024), some programs dup2 onto fixed numbers or count their
 * descriptors, and every new fd gets the lowest free number.  The switch's
 * descriptors (rendezvous sockets, doorbells, epoll sets) therefore move to
 * numbers >= 1024 whenever the descriptor limit leaves room for them there;
 * with a low limit they stay where the kernel put them. */
#include "common/sys.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <sys/resource.h>

#define HIDE_FLOOR 1024

static _Atomic int floor_fd = -1; /* -1 unknown, 0 do not move */
static _Atomic long limit_fd;      /* the limit as first seen (0: not moving) */

static int hide_floor(void)
{
	int f = atomic_load_explicit(&floor_fd, memory_order_relaxed);
	if (f >= 0)
		return f;
	struct rlimit rl;
	f = 0;
	/* room above the floor for the switch and the application's growth */
	if (SYS_(prlimit64, 0, RLIMIT_NOFILE, NULL, &rl) == 0 && rl.rlim_cur >= 2 * HIDE_FLOOR) {
		f = HIDE_FLOOR;
		atomic_store_explicit(&limit_fd, rl.rlim_cur > (rlim_t)1 << 30 ? 1L << 30 : (long)rl.rlim_cur,
				      memory_order_relaxed);
	}
	atomic_store_explicit(&floor_fd, f, memory_order_relaxed);
	return f;
}

int ssw_fd_hide(int fd)
{
	int f = hide_floor();
	if (fd < 0 || !f || fd >= f)
		return fd;
	int n = (int)SYS_(fcntl, fd, F_DUPFD_CLOEXEC, f);
	if (n < 0)
		return fd; /* limit lowered since: keep it where it is */
	sys_close(fd);
	return n;
}

long ssw_fd_hide_limit(void)
{
	return hide_floor() ? atomic_load_explicit(&limit_fd, memory_order_relaxed) : 0;
}

int ssw_fd_dup_hidden(int fd)
{
	int f = hide_floor();
	int n = f ? (int)SYS_(fcntl, fd, F_DUPFD_CLOEXEC, f) : -1;
	return n >= 0 ? n : (int)SYS_(fcntl, fd, F_DUPFD_CLOEXEC, 0);
}
