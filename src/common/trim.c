/* trim.c — the data path's notes of memory to give back once idle, and the
 * futex the housekeeping thread sleeps on (see trim.h). */
#include "common/trim.h"

#include "common/sys.h"

#include <linux/futex.h>
#include <stdatomic.h>
#include <stddef.h>

/* The futex word: bumped by every note, back to 0 only when a whole look
 * found nothing (ssw_trim_settle), so that a note between the look and
 * the sleep is never lost. */
static _Atomic uint32_t pending;
static _Atomic pid_t runner; /* the process whose housekeeper runs (0: none) */
static void (*starter)(void);

void ssw_trim_set_starter(void (*start)(void))
{
	starter = start;
}

void ssw_trim_started(void)
{
	atomic_store(&runner, ssw_pid());
}

void ssw_trim_note(void)
{
	uint32_t was = atomic_fetch_add(&pending, 1);
	/* a forked child inherits the count, not the thread */
	if (atomic_load_explicit(&runner, memory_order_relaxed) != ssw_pid()) {
		if (starter)
			starter();
	} else if (was == 0) {
		SYS_(futex, &pending, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	}
}

uint32_t ssw_trim_pending(void)
{
	return atomic_load(&pending);
}

void ssw_trim_wait_pending(void)
{
	while (!atomic_load(&pending))
		SYS_(futex, &pending, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

bool ssw_trim_settle(uint32_t seen)
{
	return atomic_compare_exchange_strong(&pending, &seen, 0);
}

static uint64_t quiet(const struct ssw_trim_clock *c)
{
	return c->quiet_ns ? c->quiet_ns : SSW_TRIM_QUIET_MIN_NS;
}

bool ssw_trim_idle(struct ssw_trim_clock *c, uint64_t state, uint64_t now)
{
	if (state != c->mark || !c->mark_ns) {
		c->mark = state;
		c->mark_ns = now;
		return false;
	}
	return now - c->mark_ns >= quiet(c);
}

void ssw_trim_given(struct ssw_trim_clock *c, uint64_t now)
{
	c->trimmed_ns = now;
}

void ssw_trim_regrown(struct ssw_trim_clock *c, uint64_t now)
{
	if (!c->trimmed_ns)
		return;
	uint64_t q = quiet(c), away = now - c->trimmed_ns;
	/* back within a few quiet times: giving it back cost more than it saved */
	if (away < 4 * q)
		q = q * 2 > SSW_TRIM_QUIET_MAX_NS ? SSW_TRIM_QUIET_MAX_NS : q * 2;
	else if (away > 16 * q)
		q = q / 2 < SSW_TRIM_QUIET_MIN_NS ? SSW_TRIM_QUIET_MIN_NS : q / 2;
	c->quiet_ns = q;
	c->trimmed_ns = 0;
}
