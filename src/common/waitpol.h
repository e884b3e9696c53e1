/* waitpol.h — the wait policy: how a thread that waits for its peer spends
 * the time before it sleeps, whatever the load of the host.
 *
 * Spinning pays only while a core is free for the spinner: a waiter that
 * spins while its peer waits for a CPU delays the very event it waits for,
 * and sleeping costs a wake-up (45-90 us on these machines).  The policy
 * asks the one party that knows whether anyone wants this core right now,
 * the scheduler, at every step:
 *   - the first SSW_SPIN_PAUSE_NS of a wait busy-poll (pause): a hot peer
 *     answers within a microsecond; unless the peer was last seen on the
 *     waiter's own CPU (the provider's peer_cpu hint), where it cannot
 *     answer before the waiter lets go of the CPU;
 *   - then each step is a sched_yield: when another thread is runnable on
 *     this core (often the peer, or a peer's neighbour) it runs at once —
 *     the hand-off of cooperative user-space stacks, a context switch
 *     instead of a wake-up; when nobody is, the call returns in well under
 *     a microsecond and the step was a spin.
 * The budget counts only the CPU the waiter held while nobody else wanted
 * it (steps that came back at once), not the time others ran: on an idle
 * host a wait burns at most the adaptive spin budget (SOCKSWITCH_SPIN_US at
 * most) and sleeps; on a loaded host it keeps handing the core over, at
 * little cost to anyone, for up to SSW_SPIN_WALL_NS before it sleeps.
 * Unless a neighbour is CPU-bound: a yield then gives it a whole slice (ms)
 * while a sleeper's wake-up would preempt it.  When two yields close
 * together come back after SSW_SPIN_HOG_NS (waitpol.c: hog_seen), yields
 * are off in this process for a pause (20 ms, doubling up to 1 s while it
 * keeps finding them): waits then sleep at once.
 * Two processes that keep answering each other within the pause, on two
 * CPUs, never yield nor sleep: they would hold both CPUs until the
 * scheduler's tick while everyone else waits.  So a sender that has held
 * its CPU for SSW_CEDE_NS yields once when its consumer shares its CPU or
 * is awake on another one (ssw_wait_cede_to): clients take turns.
 * No shared state (nothing another user could write), no system call but
 * the yields themselves.
 *
 * SOCKSWITCH_WAIT=auto|spin|yield|sleep: auto is the above; spin busy-polls
 * only (the old behaviour, budget in wall time; also what an explicit
 * SOCKSWITCH_SPIN_US asks for unless SOCKSWITCH_WAIT says otherwise); yield
 * yields from the first step; sleep never spins. */
#ifndef SSW_WAITPOL_H
#define SSW_WAITPOL_H

#include <stdbool.h>
#include <stdint.h>

/* In the order of SOCKSWITCH_WAIT's values in the settings table (params.c). */
enum ssw_wait_mode { SSW_WAITMODE_AUTO = 0, SSW_WAITMODE_SPIN, SSW_WAITMODE_YIELD, SSW_WAITMODE_SLEEP };

#define SSW_SPIN_PAUSE_NS 2000ull      /* pure busy-poll at the start of a wait */
#define SSW_SPIN_WALL_NS 2000000ull    /* no wait stays runnable longer than this */
#define SSW_SPIN_EMPTY_NS 3000ull      /* a yield back within this: nobody else ran */
#define SSW_SPIN_HOG_NS 500000ull      /* a yield back after this: a CPU-bound neighbour (a slice) */
#define SSW_SPIN_HOG_OFF_MIN_NS 20000000ull /* ... often: then no yields in this process for 20 ms, */
#define SSW_SPIN_HOG_OFF_NS 1000000000ull     /* doubling while trips follow each other, up to 1 s */

/* Set once at start-up from the configuration (SOCKSWITCH_WAIT); also
 * forgets what was learnt of CPU-bound neighbours. */
void ssw_wait_set_mode(int mode);
/* Are yields off in this process now (CPU-bound neighbours seen)? */
bool ssw_wait_yields_off(void);

/* After publishing to a consumer last seen on `peer_cpu` (the provider's
 * hint): yield once if this thread has held its CPU for SSW_CEDE_NS (since
 * it last yielded or slept) and the consumer shares that CPU, or is awake
 * (`peer_awake`: not asleep waiting for us) on another one, where the
 * clock is looked at every SSW_CEDE_LOOK-th send only (waitpol.c).  Mode
 * auto only.  ssw_wait_cede(cpu) is ssw_wait_cede_to(cpu, false). */
#define SSW_CEDE_NS 50000ull
#define SSW_CEDE_LOOK 8
void ssw_wait_cede_to(int peer_cpu, bool peer_awake);
void ssw_wait_cede(int peer_cpu);
/* After a sleep (the thread gave its CPU up): the cede's clock restarts. */
void ssw_wait_slept(void);

/* One wait's look-before-sleeping phase. */
struct ssw_spin {
	uint64_t t0;      /* start of the wait */
	uint64_t last;    /* end of the previous step */
	uint64_t burn;    /* CPU held while nobody else wanted it */
	uint64_t budget;  /* burn allowed (the caller's adaptive spin budget) */
	uint64_t turned;  /* EXPERIMENT: time others ran during our yields */
	bool spun;        /* at least one step taken */
	bool handoff;     /* the peer runs on our CPU: yield from the first step */
};

/* Begin (now: ssw_now_ns()); budget 0 or mode sleep: no steps at all. */
void ssw_spin_start(struct ssw_spin *sp, uint64_t now, uint64_t budget_ns);
/* The awaited peer was last seen on `cpu` (-1: not known).  On our own CPU
 * it cannot answer while we busy-poll, only once we yield: skip the pause
 * (with two processes of a ping-pong pair on one core, the pause cost ~2 us
 * per hand-off, a third of the round trip). */
void ssw_spin_peer_cpu(struct ssw_spin *sp, int cpu);
/* One step (a pause or a yield): true while the budget lasts; false when
 * it is time to sleep.  The caller looks for its event between steps. */
bool ssw_spin_step(struct ssw_spin *sp);
/* No more steps (after a sleep, the wait goes on without spinning). */
static inline void ssw_spin_stop(struct ssw_spin *sp) { sp->budget = 0; }

#endif
