/* bench_cpu.c — chooses the two CPUs the workers are pinned to. */
#include "bench.h"

#include <sched.h>

/* Left to the scheduler, the two workers of a case sometimes share a core and
 * sometimes not, and the numbers jump between two very different regimes from
 * run to run (a cross-core wake-up costs tens of microseconds on small VMs).
 * One worker per core is the setting a fast path is built for, and repeatable. */
int bench_pick_cpus(int cpus[2])
{
	cpu_set_t set;
	int n = 0;
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return -1;
	for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
		if (CPU_ISSET(c, &set))
			cpus[n++] = c;
	return n == 2 ? 0 : -1;
}
