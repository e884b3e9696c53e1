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

/* A process that exited but was not reaped yet (a zombie) answers kill(0)
 * like a live one, yet will never act again: its state in /proc says. */
bool ssw_pid_alive(pid_t p)
{
	if (p <= 0 || (kill(p, 0) < 0 && errno == ESRCH))
		return false;
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
	return !(e && e[1] == ' ' && (e[2] == 'Z' || e[2] == 'X'));
}
