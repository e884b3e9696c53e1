/* pid.c — this process's pid without a system call each time (glibc no
 * longer caches getpid).  The cache sits in the fork-local page
 * (forklocal.h): a forked child reads zero there and asks the kernel. */
#include "common/forklocal.h"
#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

pid_t ssw_pid(void)
{
	pid_t p = atomic_load_explicit(&ssw_fl->pid, memory_order_relaxed);
	if (p)
		return p;
	p = (pid_t)SYS_(getpid, 0);
	atomic_store_explicit(&ssw_fl->pid, p, memory_order_relaxed);
	return p;
}

void ssw_pid_forget(void)
{
	atomic_store_explicit(&ssw_fl->pid, 0, memory_order_relaxed);
}

/* Processes recently seen alive and not zombies, so that the control
 * swap's checks of the controller and of the next in line (several per
 * swap, on its critical path) cost a kill(0) and not the /proc read too
 * (about 4 us each: a tenth of a swap).  One word each: the pid and when
 * (in units of 2^20 ns), so that threads need no lock. */
#define SEEN_N 8
#define SEEN_UNITS 2 /* a zombie shows at most this many units (about 2 ms) late */
static _Atomic uint64_t seen[SEEN_N];

static uint32_t unit_now(void)
{
	return (uint32_t)(ssw_now_ns() >> 20);
}

static bool seen_lately(pid_t p)
{
	uint64_t w = atomic_load_explicit(&seen[(unsigned)p % SEEN_N], memory_order_relaxed);
	return (pid_t)(w >> 32) == p && unit_now() - (uint32_t)w <= SEEN_UNITS;
}

static void seen_now(pid_t p)
{
	atomic_store_explicit(&seen[(unsigned)p % SEEN_N], (uint64_t)(uint32_t)p << 32 | unit_now(),
			      memory_order_relaxed);
}

/* A process that exited but was not reaped yet (a zombie) answers kill(0)
 * like a live one, yet will never act again: its state in /proc says.  A
 * process gone for good (reaped) shows at once; one that became a zombie
 * within the last SEEN_UNITS may still pass (the callers look again). */
bool ssw_pid_alive(pid_t p)
{
	if (p <= 0 || (kill(p, 0) < 0 && errno == ESRCH))
		return false;
	if (seen_lately(p))
		return true;
	char path[32], buf[128];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
	int fd = (int)SYS_(openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true; /* no /proc: as kill says */
	ssize_t n = sys_read(fd, buf, sizeof buf - 1);
	sys_close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	const char *e = strrchr(buf, ')'); /* the name may hold anything */
	if (e && e[1] == ' ' && (e[2] == 'Z' || e[2] == 'X'))
		return false;
	seen_now(p);
	return true;
}
