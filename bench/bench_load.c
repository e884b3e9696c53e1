/* bench_load.c — forked process groups with one common measuring window, and mergeable latency histograms, for the load family. */
#include "bench_load.h"
#include "bench_worker.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HIST_BASE 1e-7   /* seconds: lower edge of bucket 0 */
#define HIST_GROWTH 1.02

void load_hist_add(struct load_hist *h, double seconds)
{
	long i = seconds > HIST_BASE ? (long)(log(seconds / HIST_BASE) / log(HIST_GROWTH)) : 0;
	if (i >= LOAD_HIST_BUCKETS)
		i = LOAD_HIST_BUCKETS - 1;
	h->b[i]++;
	h->n++;
}

/* Nearest rank, like bench_percentile; a bucket is reported by its geometric
 * middle, so the error stays within 1 %. */
double load_hist_pct(const struct load_hist *h, double pct)
{
	long rank = (long)ceil(pct / 100.0 * (double)h->n), seen = 0;
	if (rank < 1)
		rank = 1;
	for (int i = 0; i < LOAD_HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank)
			return HIST_BASE * pow(HIST_GROWTH, i + 0.5);
	}
	return HIST_BASE * pow(HIST_GROWTH, LOAD_HIST_BUCKETS);
}

struct load_slot {
	pid_t pid;              /* > 0 while running */
	int status;             /* wait status once reaped */
	char error[256];        /* written by the process before it fails */
	long count;             /* requests issued inside the window */
	struct load_hist hist;
};

struct load_group {
	size_t bytes;           /* of the mapping */
	int n;                  /* processes spawned so far */
	int max;
	atomic_int ready;
	atomic_int state;       /* 0 waiting, 1 window open, -1 given up */
	double start, end;      /* the window, written before state becomes 1 */
	atomic_long counter;
	struct load_slot slot[];
};

static double load_t0;

double load_deadline(void)
{
	if (load_t0 == 0)
		load_t0 = bench_now();
	return load_t0 + BENCH_WORKER_TIMEOUT_S - 3;
}

struct load_group *load_group_new(int n, struct bench_result *r)
{
	size_t bytes = sizeof(struct load_group) + (size_t)n * sizeof(struct load_slot);
	(void)load_deadline();
	struct load_group *g = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (g == MAP_FAILED) {
		bench_fail(r, "mmap shared memory");
		return NULL;
	}
	g->bytes = bytes;
	g->max = n;
	return g;
}

void load_group_free(struct load_group *g)
{
	if (g)
		munmap(g, g->bytes);
}

int load_spawn(struct load_group *g, int idx, load_fn fn, void *arg, const struct bench_params *p,
	       struct bench_result *r)
{
	if (idx >= g->max)
		return bench_fail_msg(r, "too many processes for the group");
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return bench_fail(r, "fork");
	if (pid == 0) {
		/* An orphan would keep its sockets and the bench's port busy. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		alarm((unsigned)BENCH_WORKER_TIMEOUT_S + 1);  /* not inherited by fork */
		struct load_proc lp = { g, idx };
		struct bench_result mine = { 0 };
		int rc = fn(&lp, arg, p, &mine);
		if (rc < 0)
			memcpy(g->slot[idx].error, mine.error, sizeof(g->slot[idx].error));
		/* exit, not _exit: the switch writes its stats at exit */
		exit(rc < 0 ? 1 : 0);
	}
	g->slot[idx].pid = pid;
	if (idx >= g->n)
		g->n = idx + 1;
	return 0;
}

/* Reaps whoever exited; returns how many are still running. */
static int reap(struct load_group *g)
{
	int running = 0;
	for (int i = 0; i < g->n; i++) {
		struct load_slot *s = &g->slot[i];
		if (s->pid > 0 && waitpid(s->pid, &s->status, WNOHANG) == s->pid)
			s->pid = 0;
		running += s->pid > 0;
	}
	return running;
}

static int slot_failed(const struct load_slot *s)
{
	return s->pid == 0 && !(WIFEXITED(s->status) && WEXITSTATUS(s->status) == 0);
}

static void kill_all(struct load_group *g)
{
	atomic_store(&g->state, -1);
	for (int i = 0; i < g->n; i++)
		if (g->slot[i].pid > 0) {
			kill(g->slot[i].pid, SIGKILL);
			while (waitpid(g->slot[i].pid, &g->slot[i].status, 0) < 0 && errno == EINTR)
				;
			g->slot[i].pid = 0;
		}
}

static void nap(long ms)
{
	struct timespec ts = { 0, ms * 1000000 };
	nanosleep(&ts, NULL);
}

/* The first failure among the processes, in r->error. */
static int first_failure(struct load_group *g, struct bench_result *r)
{
	for (int i = 0; i < g->n; i++) {
		struct load_slot *s = &g->slot[i];
		if (!slot_failed(s))
			continue;
		if (s->error[0])
			snprintf(r->error, sizeof(r->error), "process %d of %d: %.200s", i + 1, g->n, s->error);
		else if (WIFSIGNALED(s->status))
			snprintf(r->error, sizeof(r->error), "process %d of %d killed by signal %d (%s)", i + 1, g->n,
				 WTERMSIG(s->status), strsignal(WTERMSIG(s->status)));
		else
			snprintf(r->error, sizeof(r->error), "process %d of %d exited with status %d", i + 1, g->n,
				 WEXITSTATUS(s->status));
		return -1;
	}
	return 0;
}

int load_release(struct load_group *g, const struct bench_params *p, double deadline, struct bench_result *r)
{
	while (atomic_load(&g->ready) < g->n) {
		int running = reap(g);
		for (int i = 0; i < g->n; i++)
			if (slot_failed(&g->slot[i])) {
				/* the cause, before kill_all makes more failures */
				int rc = first_failure(g, r);
				kill_all(g);
				return rc;
			}
		if (running < g->n || bench_now() > deadline) {
			kill_all(g);
			return bench_fail_msg(r, running < g->n ? "a process ended before the start"
					      : "processes not connected and ready in time");
		}
		nap(1);
	}
	/* a little ahead, so that every process is waiting when it opens */
	g->start = bench_now() + 0.002;
	g->end = g->start + p->duration;
	atomic_store(&g->state, 1);
	return 0;
}

int load_wait(struct load_group *g, double deadline, struct bench_result *r)
{
	while (reap(g) > 0) {
		if (bench_now() > deadline) {
			kill_all(g);
			return bench_fail_msg(r, "processes still running at the deadline; killed");
		}
		/* seldom: these wake-ups would compete with the measured processes */
		nap(10);
	}
	return first_failure(g, r);
}

int load_result(struct load_group *g, const struct bench_params *p, struct bench_result *r)
{
	static struct load_hist all;
	long count = 0;
	memset(&all, 0, sizeof(all));
	for (int i = 0; i < g->n; i++) {
		count += g->slot[i].count;
		for (int b = 0; b < LOAD_HIST_BUCKETS; b++)
			all.b[b] += g->slot[i].hist.b[b];
		all.n += g->slot[i].hist.n;
	}
	if (count == 0 || all.n == 0)
		return bench_fail_msg(r, "no request answered in the window");
	r->v[0] = (double)count / p->duration;
	r->v[1] = load_hist_pct(&all, 99) * 1e6;
	r->samples = count;
	/* each client by itself: a client that hardly ran has few requests
	 * and a long tail, and counts as it is */
	double worst = 0, slow = INFINITY, fast = 0;
	for (int i = 0; i < g->n; i++) {
		const struct load_slot *s = &g->slot[i];
		double rate = (double)s->count / p->duration;
		double p99 = s->hist.n ? load_hist_pct(&s->hist, 99) * 1e6 : INFINITY;
		worst = p99 > worst ? p99 : worst;
		slow = rate < slow ? rate : slow;
		fast = rate > fast ? rate : fast;
	}
	r->v[BENCH_V_WORST_P99] = worst;
	r->v[BENCH_V_SLOWEST] = slow;
	r->v[BENCH_V_SPREAD] = slow / fast;
	r->ok = 1;
	return 0;
}

int load_run(int n, load_fn fn, void *arg, const struct bench_params *p, int measure, struct bench_result *r)
{
	struct load_group *g = load_group_new(n, r);
	if (!g)
		return -1;
	int rc = 0;
	for (int i = 0; i < n && rc == 0; i++)
		rc = load_spawn(g, i, fn, arg, p, r);
	if (rc < 0)
		kill_all(g);
	else if (measure)
		rc = load_release(g, p, load_deadline(), r);
	if (rc == 0)
		rc = load_wait(g, load_deadline(), r);
	if (rc == 0 && measure)
		rc = load_result(g, p, r);
	load_group_free(g);
	return rc;
}

int load_ready(struct load_proc *lp)
{
	struct load_group *g = lp->g;
	atomic_fetch_add(&g->ready, 1);
	double deadline = load_deadline();
	int st;
	while ((st = atomic_load(&g->state)) == 0 && bench_now() < deadline)
		nap(1);
	if (st != 1)
		return -1;
	/* the parent opened the window slightly ahead: start on the mark */
	while (bench_now() < g->start)
		;
	return 0;
}

double load_window_end(const struct load_proc *lp)
{
	return lp->g->end;
}

void load_record(struct load_proc *lp, double t0, double t1)
{
	struct load_slot *s = &lp->g->slot[lp->idx];
	if (t0 < lp->g->start || t0 >= lp->g->end)
		return;
	s->count++;
	load_hist_add(&s->hist, t1 - t0);
}

long load_counter_add(struct load_proc *lp, long delta)
{
	return atomic_fetch_add(&lp->g->counter, delta) + delta;
}
