/* waitpol.c — the host-aware wait policy (see waitpol.h): spin while a core
 * is free, yield the CPU when runnable threads outnumber cores. */
#include "common/waitpol.h"

#include "common/sys.h"

#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static int mode = SSW_WAITMODE_AUTO;
static _Atomic uint64_t sampled_at;   /* ssw_now_ns() of the last sample, 0: never */
static _Atomic uint32_t running;      /* nr_running then; 0: unknown */
static _Atomic uint32_t cores;
static _Atomic uint32_t sampling;     /* one thread samples, the others use the last value */

void ssw_wait_set_mode(int m) { mode = m; }
int ssw_wait_mode(void) { return mode; }

static const char *const names[] = { "auto", "spin", "yield", "sleep" };

int ssw_wait_parse(const char *v)
{
	for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
		if (!strcmp(v, names[i]))
			return i;
	return -1;
}

const char *ssw_wait_mode_name(int m)
{
	return m >= 0 && m < (int)(sizeof names / sizeof names[0]) ? names[m] : "?";
}

/* "0.52 0.58 0.59 3/412 12345": the running count is before the '/'. */
int ssw_wait_parse_loadavg(const char *buf, size_t len)
{
	size_t i = 0;
	for (int field = 0; field < 3; field++) {
		while (i < len && buf[i] != ' ')
			i++;
		while (i < len && buf[i] == ' ')
			i++;
	}
	long v = 0;
	size_t start = i;
	while (i < len && buf[i] >= '0' && buf[i] <= '9' && v < 1000000)
		v = v * 10 + (buf[i++] - '0');
	if (i == start || i >= len || buf[i] != '/')
		return -1;
	return (int)v;
}

/* Opened and closed each time: a descriptor kept open could be closed or
 * reused under us by a program that closes every fd it does not know. */
static void sample(uint64_t now)
{
	if (!atomic_load_explicit(&cores, memory_order_relaxed)) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		atomic_store(&cores, n > 0 ? (uint32_t)n : 1);
	}
	uint32_t r = 0;
	int fd = (int)SYS_(openat, AT_FDCWD, "/proc/loadavg", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char buf[128];
		ssize_t n = sys_read(fd, buf, sizeof buf);
		sys_close(fd);
		int v = n > 0 ? ssw_wait_parse_loadavg(buf, (size_t)n) : -1;
		r = v > 0 ? (uint32_t)v : 0;
	}
	atomic_store_explicit(&running, r, memory_order_relaxed);
	atomic_store_explicit(&sampled_at, now, memory_order_release);
}

int ssw_wait_how(uint64_t now)
{
	switch (mode) {
	case SSW_WAITMODE_SPIN:
		return SSW_WAIT_SPIN;
	case SSW_WAITMODE_YIELD:
		return SSW_WAIT_YIELD;
	case SSW_WAITMODE_SLEEP:
		return SSW_WAIT_SLEEP;
	}
	uint64_t at = atomic_load_explicit(&sampled_at, memory_order_acquire);
	/* a sampler lost to fork (it ran in another thread) is ignored after
	 * a while: two samplers at once only store the same thing twice */
	if ((!at || now - at >= SSW_WAIT_SAMPLE_NS) &&
	    (!atomic_exchange_explicit(&sampling, 1, memory_order_acquire) ||
	     now - at >= 100 * SSW_WAIT_SAMPLE_NS)) {
		sample(now);
		atomic_store_explicit(&sampling, 0, memory_order_release);
	}
	uint32_t r = atomic_load_explicit(&running, memory_order_relaxed);
	uint32_t c = atomic_load_explicit(&cores, memory_order_relaxed);
	/* the waiter itself is one of the running threads: a core is free for
	 * it when every runnable thread has one */
	if (!r || r <= c)
		return SSW_WAIT_SPIN;
	return SSW_WAIT_YIELD;
}

static uint64_t yield_ns = 1000000;

uint64_t ssw_wait_budget(int how, uint64_t spin_ns)
{
	static int once;
	if (!once) {
		const char *v = getenv("SSW_YIELD_US");
		if (v)
			yield_ns = strtoull(v, NULL, 10) * 1000;
		once = 1;
	}
	if (how == SSW_WAIT_SLEEP)
		return 0;
	if (how == SSW_WAIT_YIELD && spin_ns < yield_ns)
		return yield_ns;
	return spin_ns;
}

void ssw_wait_step(int how)
{
	if (how == SSW_WAIT_YIELD) {
		sched_yield();
		return;
	}
	for (int j = 0; j < 16; j++)
		ssw_cpu_relax();
}

void ssw_wait_load(uint32_t *r, uint32_t *c)
{
	*r = atomic_load_explicit(&running, memory_order_relaxed);
	*c = atomic_load_explicit(&cores, memory_order_relaxed);
}
