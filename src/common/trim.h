/* trim.h — memory given back once idle (trim.c).
 *
 * A switched connection keeps the pages its traffic touched: a ring that a
 * stream went round stays resident (1 MiB a connection with the default
 * rings) long after the stream, where kernel TCP frees its buffers as soon
 * as they are read.  The data path notes, once per growth, that some
 * memory went past its floor (ssw_trim_note: an atomic add, and a wake-up
 * only when nothing was pending); a housekeeping thread (switch/trim.c),
 * started at the first note in a process, then looks at the process's
 * connections every SSW_TRIM_PERIOD_MS while anything is pending and gives
 * back what stayed idle for a whole period (the provider's trim op, the
 * session's staging queue).  A process whose traffic never leaves its
 * floors never notes anything and has no such thread. */
#ifndef SSW_TRIM_H
#define SSW_TRIM_H

#include <stdbool.h>
#include <stdint.h>

#define SSW_TRIM_PERIOD_MS 500
/* How long memory must stay unused before it goes: at least a second,
 * doubling (up to 32 s) each time it is needed again soon after it went,
 * so that a connection whose bursts come back every few seconds stops
 * paying for the page faults that bring it back (5-15 us a page on each
 * side here), and halving again when it stays away. */
#define SSW_TRIM_QUIET_MIN_NS 1000000000ull
#define SSW_TRIM_QUIET_MAX_NS 32000000000ull

/* One piece of memory's idle clock (in the memory's owner's state: shared
 * across fork like it, used under the owner's lock). */
struct ssw_trim_clock {
	uint64_t quiet_ns;   /* 0: SSW_TRIM_QUIET_MIN_NS */
	uint64_t mark;       /* the owner's change counter at the last look */
	uint64_t mark_ns;    /* when the last look saw it change */
	uint64_t trimmed_ns; /* when it was last given back (0: never) */
};
/* A look at `state` (a counter of the memory's uses): true when it has not
 * changed for the clock's quiet time. */
bool ssw_trim_idle(struct ssw_trim_clock *c, uint64_t state, uint64_t now);
/* The memory was given back now. */
void ssw_trim_given(struct ssw_trim_clock *c, uint64_t now);
/* It grows past its floor again (before ssw_trim_note): soon after it
 * was given back, the next time waits longer. */
void ssw_trim_regrown(struct ssw_trim_clock *c, uint64_t now);

/* Some memory of this process's connections grew past its floor. */
void ssw_trim_note(void);

/* The housekeeper's side. */
/* Called (once per process) at the first note: starts the thread. */
void ssw_trim_set_starter(void (*start)(void));
/* Notes so far (0: nothing pending). */
uint32_t ssw_trim_pending(void);
/* Sleep until something is pending. */
void ssw_trim_wait_pending(void);
/* A look found nothing left to give back: pending from `seen` (its value
 * when the look began) to 0; false when a note came meanwhile. */
bool ssw_trim_settle(uint32_t seen);
/* The thread runs in this process (a forked child has none). */
void ssw_trim_started(void);

#endif
