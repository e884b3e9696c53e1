/* pid.c — this process's pid without a system call each time (glibc no
 * longer caches getpid).  The cache sits in the fork-local page
 * (forklocal.h): a forked child reads zero there and asks the kernel. */
#include "common/forklocal.h"
#include "common/sys.h"

#include <stdatomic.h>
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
