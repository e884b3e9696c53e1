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
