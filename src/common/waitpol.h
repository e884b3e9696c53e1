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
 * The decision to stop yielding is shared by the user's switched processes
 * (waitshare.c: a page only that user can read or write), so that they all
 * yield or all sleep: a mix lets the yielders keep the cores from the
 * sleepers.  No system call but the yields themselves.
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
/* From now on (mode auto), whether yields are off is decided with the
 * user's other switched processes on the host (waitshare.c); the library
 * calls it at load.  Without it (unit tests) each process decides alone. */
void ssw_wait_share_on(void);

/* waitshare.c: the shared decision (a page per uid, NULL if it cannot be
 * had); until: when yields come back on (0 or a bounded value); off: the
 * last pause's length. */
struct ssw_wait_share;
struct ssw_wait_share *ssw_wait_share_attach(void);
/* Tests: the page of another key; the page this process's policy uses. */
struct ssw_wait_share *ssw_wait_share_attach_key(int key);
void ssw_wait_share_use(struct ssw_wait_share *w);
uint64_t ssw_wait_share_until(const struct ssw_wait_share *w, uint64_t now);
uint64_t ssw_wait_share_off(const struct ssw_wait_share *w);
void ssw_wait_share_set(struct ssw_wait_share *w, uint64_t until, uint64_t off);

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

/* ---- the wait loop ------------------------------------------------------
 * Every wait of the library (a session's wait for its peer, poll, epoll,
 * accept, a connect's progress, shm's wait for a HELLO) is one call of
 * ssw_wait: look (the caller's ready callback), step while the spin budget
 * lasts, then sleep (the caller's sleep callback) until an event, the
 * deadline or the periodic re-check, look again, and so on.  What the wait
 * learns of its peer goes back into the waiter's policy object. */

/* The most a wait may spin (SOCKSWITCH_SPIN_US); 50 us until configured. */
void ssw_wait_set_spin_max(uint32_t ns);
uint32_t ssw_wait_spin_max(void);
#define SSW_WAIT_SPIN_MIN_NS 2000u /* a learned budget never goes below */

/* A waiter's learned policy: one per session, one per thread for the
 * event waits.  All zero is a fresh one. */
struct ssw_waitpol {
	uint32_t spin_ns; /* the spin budget learned, 0: not yet (the kind's start) */
	uint32_t nap_ms;  /* bound on the next sleep (re-check), 0: the kind's least */
};

/* A kind of wait: how it starts and re-checks (one constant per caller). */
struct ssw_waitcfg {
	uint32_t start_ns;   /* a fresh policy's budget, 0: the most; also the
			      * fixed budget of a wait without a policy */
	uint32_t nap_min_ms; /* periodic re-check: sleeps are bounded by a nap */
	uint32_t nap_max_ms; /* that starts at min, doubles at every sleep that
			      * ran to its end, up to max, and is min again after
			      * a wake-up (0: sleeps only end on an event or the
			      * deadline) */
	bool once;           /* the wait ends after its first sleep: its caller
			      * looks itself (with its lock held, say) */
};

/* What a sleep callback says. */
enum {
	SSW_WAIT_TIMEDOUT = 0, /* slept the whole time given */
	SSW_WAIT_WOKEN = 1,    /* woken by an event (or a signal to be ignored) */
	SSW_WAIT_LOOK = 2,     /* did not sleep: something may be there, look now */
	SSW_WAIT_RETURN = 3,   /* did not sleep: the wait is over (ssw_wait gives 0) */
};

/* The caller's side of one wait (embed it; container_of in the callbacks). */
struct ssw_waiter {
	/* Look for the event: >0 it is there (ssw_wait returns it), 0 not
	 * yet, <0 an -errno that ends the wait. */
	int (*ready)(struct ssw_waiter *w);
	/* Sleep at most ns (-1: no bound) on whatever wakes this waiter:
	 * SSW_WAIT_*, or an -errno (-EINTR) that ends the wait.  NULL: a wait
	 * that only spins (ssw_wait gives -ETIMEDOUT when the budget is spent). */
	int (*sleep)(struct ssw_waiter *w, int64_t ns);
	int peer_cpu;  /* the awaited peer's CPU (-1: unknown); the first look may set it */
	uint64_t rang; /* set by sleep: when the peer rang during it (0: unknown) */
	bool looked;   /* the caller has just looked: step before the first look */
};

/* A sleep callback's bound for poll(2): whole ms, rounded up (-1: none). */
static inline int ssw_wait_ms(int64_t ns)
{
	if (ns < 0)
		return -1;
	int64_t ms = (ns + 999999) / 1000000;
	return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

/* Wait: returns ready's positive answer; 0 when a `once` wait has slept, or
 * a sleep said SSW_WAIT_RETURN; -ETIMEDOUT once `deadline` (ns on
 * ssw_now_ns's clock, 0: none) has passed, after one look at least (a
 * deadline of "now" is a look without waiting); -errno from a callback.
 * pol NULL: cfg->start_ns is the budget (none when the most a wait may spin
 * is 0), and nothing is learnt. */
int ssw_wait(struct ssw_waitpol *pol, const struct ssw_waitcfg *cfg, uint64_t deadline, struct ssw_waiter *w);

/* What a wait learns (ssw_wait calls it; exposed for its tests): the event
 * came `took` ns after the wait began (caught), or never / too late.  An
 * event within the most a wait may spin: the budget becomes at least
 * 1.5 x took and grows by a quarter (spinning that long next time catches
 * it without a wake-up); else the budget halves. */
void ssw_waitpol_learn(struct ssw_waitpol *pol, const struct ssw_waitcfg *cfg, bool caught, uint64_t took);
/* The budget a wait of this policy spins now. */
uint64_t ssw_waitpol_budget(const struct ssw_waitpol *pol, const struct ssw_waitcfg *cfg);

/* Tests: the clock of the whole policy (NULL: ssw_now_ns). */
void ssw_wait_set_clock(uint64_t (*now)(void));

#endif
