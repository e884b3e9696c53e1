/* waitpol.c — the wait policy (see waitpol.h): busy-poll briefly, then hand
 * the core over with sched_yield, counting only the CPU nobody else wanted. */
#include "common/waitpol.h"

#include "common/sys.h"

#include <sched.h>
#include <string.h>

static int mode = SSW_WAITMODE_AUTO;

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

void ssw_spin_start(struct ssw_spin *sp, uint64_t now, uint64_t budget_ns)
{
	*sp = (struct ssw_spin){ .t0 = now, .last = now, .budget = mode == SSW_WAITMODE_SLEEP ? 0 : budget_ns };
}

bool ssw_spin_step(struct ssw_spin *sp)
{
	uint64_t now = ssw_now_ns();
	uint64_t elapsed = now - sp->t0;
	if (mode == SSW_WAITMODE_SPIN) {
		/* the old fixed busy-poll: the budget is wall time */
		if (elapsed >= sp->budget)
			return false;
	} else {
		sp->burn += now - sp->last; /* looking is ours too */
		if (sp->burn >= sp->budget || elapsed >= SSW_SPIN_WALL_NS)
			return false;
	}
	sp->spun = true;
	if (mode == SSW_WAITMODE_SPIN || (mode == SSW_WAITMODE_AUTO && elapsed < SSW_SPIN_PAUSE_NS)) {
		for (int j = 0; j < 16; j++)
			ssw_cpu_relax();
		sp->last = now;
		return true;
	}
	sched_yield();
	uint64_t back = ssw_now_ns();
	/* back at once: nobody else wanted the core, the step was a spin */
	if (back - now < SSW_SPIN_EMPTY_NS)
		sp->burn += back - now;
	sp->last = back;
	return true;
}
