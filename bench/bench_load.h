/* bench_load.h — worker-side helpers of the load family: groups of forked processes sharing one measuring window, and latency histograms. */
#ifndef SSW_BENCH_LOAD_H
#define SSW_BENCH_LOAD_H

#include "bench.h"

/* Round-trip times with 2 % resolution from 0.1 us to minutes, in fixed
 * memory: one per process, summed by the parent, however long the run. */
#define LOAD_HIST_BUCKETS 1200
struct load_hist {
	long n;
	long b[LOAD_HIST_BUCKETS];
};

void load_hist_add(struct load_hist *h, double seconds);
/* The pct-th percentile in seconds (h->n >= 1). */
double load_hist_pct(const struct load_hist *h, double pct);

/* The processes of one side of one case, and what they share (anonymous
 * shared memory: never a socket, so the switch cannot touch it). */
struct load_group;

/* What a process of the group sees of it. */
struct load_proc {
	struct load_group *g;
	int idx;
};

typedef int (*load_fn)(struct load_proc *lp, void *arg, const struct bench_params *p, struct bench_result *r);

/* A group of up to n processes; NULL with r->error on failure. */
struct load_group *load_group_new(int n, struct bench_result *r);
/* Forks process number idx running fn; its exit status and r->error come
 * back through the group.  The child dies with the worker (PDEATHSIG). */
int load_spawn(struct load_group *g, int idx, load_fn fn, void *arg, const struct bench_params *p,
	       struct bench_result *r);
/* Measuring groups: once every process called load_ready, opens a window of
 * p->duration for all of them at once.  0, or -1 with r->error when a
 * process died first or they were not ready by the deadline. */
int load_release(struct load_group *g, const struct bench_params *p, double deadline, struct bench_result *r);
/* Waits for every spawned process until deadline (then kills them); 0 if all
 * succeeded, else -1 with the first failure in r->error. */
int load_wait(struct load_group *g, double deadline, struct bench_result *r);
/* Requests per second over the window and p99 of what the processes recorded. */
int load_result(struct load_group *g, const struct bench_params *p, struct bench_result *r);
void load_group_free(struct load_group *g);

/* All of the above for n processes running fn; measure: release them into
 * one window and fill r with the result. */
int load_run(int n, load_fn fn, void *arg, const struct bench_params *p, int measure, struct bench_result *r);

/* In a process of the group: says it is ready (connected, warmed up) and
 * waits for the window to open; -1 if the group gave up. */
int load_ready(struct load_proc *lp);
double load_window_end(const struct load_proc *lp);
/* One request issued at t0 and answered at t1: counted if issued inside the window. */
void load_record(struct load_proc *lp, double t0, double t1);
/* A counter shared by the group (e.g. connections closed, over all servers). */
long load_counter_add(struct load_proc *lp, long delta);

/* The deadline a worker-side wait must respect so that the parent's kill at
 * BENCH_WORKER_TIMEOUT_S never comes first. */
double load_deadline(void);

#endif
