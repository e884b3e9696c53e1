/* pid.c — this process's pid without a system call each time (glibc no
 * longer caches getpid).  Forgotten at fork, in the child. */
#include "common/sys.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static _Atomic pid_t cached;

static void forget(void)
{
	atomic_store_explicit(&cached, 0, memory_order_relaxed);
}

static void install(void)
{
	pthread_atfork(NULL, NULL, forget);
}

pid_t ssw_pid(void)
{
	pid_t p = atomic_load_explicit(&cached, memory_order_relaxed);
	if (p)
		return p;
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, install);
	p = (pid_t)SYS_(getpid, 0);
	atomic_store_explicit(&cached, p, memory_order_relaxed);
	return p;
}

void ssw_pid_forget(void)
{
	forget();
}
