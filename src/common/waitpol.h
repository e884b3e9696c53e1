/* waitpol.h — the host-aware wait policy: how a thread that waits for its
 * peer spends the time before it sleeps.
 *
 * Spinning pays only while a core is free for the spinner: a waiter that
 * spins while its peer waits for a CPU delays the very event it waits for.
 * So a wait asks ssw_wait_how() before each round of looking:
 *   SSW_WAIT_SPIN   runnable threads on the host <= cores: every runnable
 *                   thread has a core, busy-poll (pause) as before;
 *   SSW_WAIT_YIELD  more runnable threads than cores: hand the CPU to
 *                   whoever waits for it (often the peer), look again when
 *                   the scheduler comes back (sched_yield: one cheap system
 *                   call that returns at once when nobody else is runnable
 *                   on this core).
 * The count of runnable threads is the kernel's own (nr_running, as
 * /proc/loadavg's fourth field shows it: host-wide, every namespace and
 * user), read with one pread at most every SSW_WAIT_SAMPLE_NS per process
 * (~1 us each), so the policy costs nothing on the hot path and needs no
 * shared state another user could write.
 *
 * SOCKSWITCH_WAIT=auto|spin|yield|sleep forces a mode (auto is the
 * default); SOCKSWITCH_SPIN_US set explicitly implies spin (the old
 * behaviour: a fixed budget of pure busy-polling) unless SOCKSWITCH_WAIT
 * says otherwise. */
#ifndef SSW_WAITPOL_H
#define SSW_WAITPOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ssw_wait_how { SSW_WAIT_SPIN = 0, SSW_WAIT_YIELD = 1, SSW_WAIT_SLEEP = 2 };
enum ssw_wait_mode { SSW_WAITMODE_AUTO = 0, SSW_WAITMODE_SPIN, SSW_WAITMODE_YIELD, SSW_WAITMODE_SLEEP };

#define SSW_WAIT_SAMPLE_NS 100000ull

/* Set once at start-up from the configuration (SOCKSWITCH_WAIT). */
void ssw_wait_set_mode(int mode);
int ssw_wait_mode(void);
/* Parse a SOCKSWITCH_WAIT value: the mode, or -1. */
int ssw_wait_parse(const char *v);
const char *ssw_wait_mode_name(int mode);

/* How to spend the next round of a wait (now: ssw_now_ns()). */
int ssw_wait_how(uint64_t now);

/* How long to keep looking before sleeping, in mode how, for a caller
 * whose adaptive spin budget is spin_ns: a yield hands the core to others,
 * so looking on costs little while they run (the budget of a loaded host
 * is longer); sleep: 0. */
uint64_t ssw_wait_budget(int how, uint64_t spin_ns);

/* One step of waiting: a few pauses (spin) or a sched_yield (yield).
 * Returns the number of look-ups the caller should do before the next step
 * (a spin step is short: look once; callers loop). */
void ssw_wait_step(int how);

/* The last sample: runnable threads on the host and online cores (for
 * doctor/stat and tests); 0 when never sampled or unreadable. */
void ssw_wait_load(uint32_t *running, uint32_t *cores);

/* Test support: parse a /proc/loadavg line's running count (-1 if bad). */
int ssw_wait_parse_loadavg(const char *buf, size_t len);

#endif
