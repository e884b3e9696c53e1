/* waitpol.c — the wait policy and the one wait loop (see waitpol.h): look,
 * busy-poll briefly, then hand the core over with sched_yield, counting only
 * the CPU nobody else wanted, then sleep; and learn the spin budget from how
 * long the waits really took. */
#include "common/waitpol.h"

#include "common/sys.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>

static uint64_t (*test_clock)(void);

static inline uint64_t wp_now(void)
{
	return __builtin_expect(test_clock != NULL, 0) ? test_clock() : ssw_now_ns();
}

void ssw_wait_set_clock(uint64_t (*now)(void))
{
	test_clock = now;
}

static int mode = SSW_WAITMODE_AUTO;
static _Atomic uint64_t no_yield_until; /* after long yields (auto): wp_now() */
static _Atomic uint32_t hog_score;      /* see hog_seen */
static _Atomic uint64_t off_ns;         /* the last pause of yields */
/* the user's shared decision (waitshare.c), NULL: this process's own */
static struct ssw_wait_share *share;

void ssw_wait_set_mode(int m)
{
	mode = m;
	atomic_store(&no_yield_until, 0);
	atomic_store(&hog_score, 0);
	atomic_store(&off_ns, 0);
}

void ssw_wait_share_on(void)
{
	if (mode == SSW_WAITMODE_AUTO && !share && !test_clock)
		share = ssw_wait_share_attach();
}

void ssw_wait_share_use(struct ssw_wait_share *w)
{
	share = w;
}

/* Until when yields are off (0: they are on). */
static inline uint64_t off_until(uint64_t now)
{
	return share ? ssw_wait_share_until(share, now) : atomic_load_explicit(&no_yield_until, memory_order_relaxed);
}

bool ssw_wait_yields_off(void)
{
	uint64_t now = wp_now();
	return now < off_until(now);
}

/* CPU-bound neighbours: a yield then gives one a whole slice (ms), while a
 * sleeper's wake-up would preempt it.  Between busy peers a yield comes
 * back within tens of microseconds, with a rare long one (measured, 4
 * ping-pong pairs on 2 cores: 10 in 100,000 over 500 us, sometimes a few in
 * a row); beside CPU-bound loops, 60% of them take milliseconds.  So a
 * score of long yields (+HOG_STEP each, decaying by 1/32 at every yield
 * that let someone run): past HOG_SCORE, two long yields within about 20,
 * no yields in this process for SSW_SPIN_HOG_OFF_NS; the score then starts
 * just under the mark, so one more long yield after the pause turns them
 * off again, while short ones bring it down.
 * Two, not a dozen (the mark was 800 until the scheduler's yield changed,
 * EEVDF since Linux 6.6): a yield now also costs the yielder the rest of
 * its time slice in the scheduler's books (Linux 6.17+ moves its virtual
 * time to its deadline), so every long yield leaves the process behind a
 * CPU-bound neighbour for its next slice too, and its wake-ups wait behind
 * it.  Beside two busy loops and other programs, the load family took
 * 0.2x kernel TCP's round trips with p99s 13-18x kernel's at the old mark,
 * 0.9-1.5x (p99 1.1-3x) at this one. */
#define HOG_STEP 64
#define HOG_SCORE 100
static bool hog_seen(uint64_t now, uint64_t took)
{
	uint32_t sc = atomic_load_explicit(&hog_score, memory_order_relaxed);
	sc -= sc / 32;
	if (took >= SSW_SPIN_HOG_NS)
		sc += HOG_STEP;
	if (sc <= HOG_SCORE) {
		atomic_store_explicit(&hog_score, sc, memory_order_relaxed);
		return false;
	}
	/* The pause grows while trips follow each other (CPU-bound neighbours
	 * stay) and is short again after a quiet spell (a burst between busy
	 * peers costs a short pause, not a second of sleeping waits). */
	uint64_t until = off_until(now);
	uint64_t off = share ? ssw_wait_share_off(share) : atomic_load_explicit(&off_ns, memory_order_relaxed);
	off = until && now - until < 2 * off ? off * 2 : SSW_SPIN_HOG_OFF_MIN_NS;
	if (off > SSW_SPIN_HOG_OFF_NS)
		off = SSW_SPIN_HOG_OFF_NS;
	atomic_store_explicit(&hog_score, HOG_SCORE - HOG_STEP / 2, memory_order_relaxed);
	if (share) {
		if (until <= now) /* else another process turned them off meanwhile */
			ssw_wait_share_set(share, now + off, off);
		return true;
	}
	atomic_store_explicit(&off_ns, off, memory_order_relaxed);
	atomic_store_explicit(&no_yield_until, now + off, memory_order_relaxed);
	return true;
}

static __thread uint64_t cpu_held_since; /* this thread's last yield */

/* After a send: the consumer, when it runs on our CPU, cannot take what we
 * published until we let go of the CPU; kernel TCP's wake-up would preempt
 * us for it, a consumer that yield-waits gets no such wake-up, and an event
 * loop with work always ready held the CPU for a whole scheduler slice
 * (sendfile 64 KiB, 2 workers and 2 clients on 2 cores: p99 3-4 ms against
 * kernel TCP's 1-2 ms in 4 runs of 5).  So a thread that has held the CPU
 * for SSW_CEDE_NS since it last yielded yields once after publishing to a
 * consumer last seen on its CPU: p99 0.25-1.6 ms, the same throughput.
 *
 * The same for a consumer that is awake on another CPU: the two answer
 * each other within the busy-poll and never sleep nor yield, so they keep
 * both CPUs until the scheduler's tick (4 ms at HZ=250) while the other
 * clients' processes wait, runnable, for a CPU (nothing wakes, so nothing
 * preempts them).  Measured with 2-8 ping-pong pairs per core: such holds
 * of 1-9 ms, the worst client's p99 1.5-3.5x kernel TCP's while the
 * throughput was 2-4x.  A yield every SSW_CEDE_NS (it returns at once when
 * nobody else wants the CPU) makes them take turns: the worst client's p99
 * then 0.7-0.9x kernel TCP's at 1 and 2 pairs per core. */
static __thread unsigned cede_sends; /* sends to a consumer elsewhere */

void ssw_wait_cede_to(int peer_cpu, bool peer_awake)
{
	/* on every send: the CPU first (rseq, no clock read), the clock only
	 * when the consumer shares it, or at every SSW_CEDE_LOOK-th send to
	 * one awake elsewhere: a stream to it sends a message every few
	 * hundred ns, and the clock costs 25-40 ns here */
	if (mode != SSW_WAITMODE_AUTO || peer_cpu < 0)
		return;
	if (peer_cpu != sched_getcpu() && (!peer_awake || ++cede_sends % SSW_CEDE_LOOK))
		return;
	uint64_t now = wp_now();
	if (now - cpu_held_since < SSW_CEDE_NS || now < off_until(now))
		return;
	sched_yield();
	uint64_t back = wp_now();
	cpu_held_since = back;
	/* a cede that gave a CPU-bound neighbour its slice counts as a wait's
	 * long yield does */
	if (back - now >= SSW_SPIN_EMPTY_NS)
		(void)hog_seen(back, back - now);
}

void ssw_wait_cede(int peer_cpu)
{
	ssw_wait_cede_to(peer_cpu, false);
}

void ssw_wait_slept(void)
{
	cpu_held_since = wp_now();
}

void ssw_spin_start(struct ssw_spin *sp, uint64_t now, uint64_t budget_ns)
{
	*sp = (struct ssw_spin){ .t0 = now, .last = now, .budget = mode == SSW_WAITMODE_SLEEP ? 0 : budget_ns };
}

void ssw_spin_peer_cpu(struct ssw_spin *sp, int cpu)
{
	sp->handoff = cpu >= 0 && cpu == sched_getcpu();
}

bool ssw_spin_step(struct ssw_spin *sp)
{
	uint64_t now = wp_now();
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
	/* CPU-bound neighbours about: no yields, and the cede is off too.  The
	 * pause still catches a peer that answers at once on another CPU (a
	 * pinned pair: 1 us round trips), but two processes answering each
	 * other within it would then hold both CPUs without a break until the
	 * tick, while everyone else waits: once this thread has held its CPU
	 * for SSW_CEDE_NS, its next wait sleeps at once, as kernel TCP's
	 * waiter does (the cede, by sleeping) */
	if (mode == SSW_WAITMODE_AUTO && now < off_until(now) &&
	    (elapsed >= SSW_SPIN_PAUSE_NS || sp->handoff || now - cpu_held_since >= SSW_CEDE_NS))
		return false;
	sp->spun = true;
	if (mode == SSW_WAITMODE_SPIN || (mode == SSW_WAITMODE_AUTO && elapsed < SSW_SPIN_PAUSE_NS && !sp->handoff)) {
		for (int j = 0; j < 16; j++)
			ssw_cpu_relax();
		sp->last = now;
		return true;
	}
	sched_yield();
	uint64_t back = wp_now();
	cpu_held_since = back;
	if (back - now >= SSW_SPIN_EMPTY_NS && hog_seen(back, back - now)) {
		sp->budget = 0; /* sleep now */
		return true;
	}
	/* back at once: nobody else wanted the core, the step was a spin */
	if (back - now < SSW_SPIN_EMPTY_NS)
		sp->burn += back - now;
	sp->last = back;
	return true;
}

/* ---- the wait loop ------------------------------------------------------ */

static uint32_t spin_max_ns = 50000;

void ssw_wait_set_spin_max(uint32_t ns)
{
	spin_max_ns = ns;
}

uint32_t ssw_wait_spin_max(void)
{
	return spin_max_ns;
}

uint64_t ssw_waitpol_budget(const struct ssw_waitpol *pol, const struct ssw_waitcfg *cfg)
{
	if (!pol) /* a fixed budget (a connect's reply, a HELLO): not learnt,
		   * and not bounded by the most unless that is no spin at all */
		return spin_max_ns ? cfg->start_ns : 0;
	uint32_t b = pol->spin_ns ? pol->spin_ns : cfg->start_ns ? cfg->start_ns : spin_max_ns;
	return b > spin_max_ns ? spin_max_ns : b;
}

/* One rule for every waiter (a session's, and a thread's poll, epoll and
 * accept had one each, with different steps: +1/2 or +1/4 on a caught
 * spin, 1.5 x took or x2 after a wake-up).  An event caught by the spin
 * or soon after it (within the most a wait may spin, the wake-up's own
 * latency not counted: see ssw_wait) says a longer spin would have paid;
 * halving otherwise keeps idle waits cheap.  Growing at least to 1.5 x
 * took matters: halving then would leave two peers that both slept once
 * sleeping for good, each one's wake-up stretching the other's wait past
 * its shrinking budget (fabric ping-pong across a veth: 70 us round trips,
 * a sleep each, against 18 us spinning). */
void ssw_waitpol_learn(struct ssw_waitpol *pol, const struct ssw_waitcfg *cfg, bool caught, uint64_t took)
{
	uint64_t b = ssw_waitpol_budget(pol, cfg);
	if (caught && took <= spin_max_ns) {
		b += b / 4;
		if (b < took + took / 2)
			b = took + took / 2;
		if (b > spin_max_ns)
			b = spin_max_ns;
	} else {
		b /= 2;
		if (b < SSW_WAIT_SPIN_MIN_NS)
			b = SSW_WAIT_SPIN_MIN_NS;
	}
	pol->spin_ns = (uint32_t)b;
}

static uint32_t nap_ms(const struct ssw_waitpol *pol, const struct ssw_waitcfg *cfg)
{
	uint32_t n = pol && pol->nap_ms ? pol->nap_ms : cfg->nap_min_ms;
	return n > cfg->nap_max_ms ? cfg->nap_max_ms : n;
}

int ssw_wait(struct ssw_waitpol *pol, const struct ssw_waitcfg *cfg, uint64_t deadline, struct ssw_waiter *w)
{
	uint64_t t0 = wp_now();
	struct ssw_spin sp;
	ssw_spin_start(&sp, t0, ssw_waitpol_budget(pol, cfg));
	bool first = true, slept = false, look = !w->looked;
	for (;;) {
		if (look) {
			/* while spinning, the end of the last step is the time (no
			 * clock read of our own on the data path) */
			int r = w->ready(w);
			if (r > 0 && pol && sp.spun && !slept)
				ssw_waitpol_learn(pol, cfg, true, sp.last - t0);
			if (r != 0)
				return r;
			if (deadline && (slept ? wp_now() : sp.last) >= deadline)
				return -ETIMEDOUT;
		}
		look = true;
		if (first) {
			ssw_spin_peer_cpu(&sp, w->peer_cpu);
			first = false;
		}
		/* a hot peer: a short spin costs less than a wake-up */
		if (ssw_spin_step(&sp))
			continue;
		if (!w->sleep)
			return -ETIMEDOUT;
		uint64_t t_sleep = wp_now();
		int64_t ns = -1;
		if (deadline)
			ns = deadline > t_sleep ? (int64_t)(deadline - t_sleep) : 0;
		uint32_t nap = nap_ms(pol, cfg);
		if (nap && (ns < 0 || ns > (int64_t)nap * 1000000))
			ns = (int64_t)nap * 1000000;
		w->rang = 0;
		int s = w->sleep(w, ns);
		if (s == SSW_WAIT_LOOK)
			continue; /* the spin goes on, if anything is left of it */
		if (s == SSW_WAIT_RETURN)
			return 0;
		uint64_t back = wp_now();
		ssw_wait_slept();
		ssw_spin_stop(&sp);
		slept = true;
		if (pol) {
			/* the event came when the peer rang, not when we got the CPU
			 * back: on a busy host the wake-up alone outlasts any spin
			 * budget.  Without the ring's time, a quarter of the sleep
			 * counts (the rest: the wake-up's latency) */
			bool woken = s == SSW_WAIT_WOKEN;
			uint64_t took = w->rang > t0 && w->rang <= back ? w->rang - t0 : t_sleep - t0 + (back - t_sleep) / 4;
			ssw_waitpol_learn(pol, cfg, woken, took);
			if (woken)
				pol->nap_ms = cfg->nap_min_ms;
			else if (s == SSW_WAIT_TIMEDOUT && nap)
				pol->nap_ms = 2 * nap > cfg->nap_max_ms ? cfg->nap_max_ms : 2 * nap;
		}
		if (s < 0)
			return s;
		if (cfg->once)
			return s == SSW_WAIT_TIMEDOUT && deadline && wp_now() >= deadline ? -ETIMEDOUT : 0;
	}
}
