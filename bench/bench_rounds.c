/* bench_rounds.c — a case measured in rounds, kernel TCP and switched taking turns, merged into one result per side. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

int bench_rounds(const struct bench_params *p, int quick)
{
	if (quick || p->duration < 1.0)
		return 1;
	return bench_is_load(p->kind) ? BENCH_ROUNDS_MAX : 3;
}

void bench_round_params(const struct bench_params *p, int rounds, struct bench_params *rp)
{
	*rp = *p;
	rp->duration = p->duration / rounds;
	if (p->kind == BENCH_LATENCY || p->kind == BENCH_TURNS) /* a count of round trips, at most that long */
		rp->count = p->count / rounds > 0 ? p->count / rounds : 1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const struct bench_result *rr, int n, int i)
{
	double v[BENCH_ROUNDS_MAX];
	for (int k = 0; k < n; k++)
		v[k] = rr[k].v[i];
	qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Which figures are latencies (the median of the rounds); the others are
 * rates over equally long rounds (their mean). */
static bool is_latency(enum bench_kind k, int i)
{
	if (k == BENCH_LATENCY || k == BENCH_TURNS)
		return i <= 1 || (k == BENCH_TURNS && i == BENCH_V_WORST_P99); /* p50, p99 */
	if (k == BENCH_FORKEXIT)
		return i == 0;                 /* us per cycle */
	return bench_is_load(k) && (i == 1 || i == BENCH_V_WORST_P99); /* p99s */
}

void bench_merge_rounds(enum bench_kind kind, const struct bench_result *rr, int n, struct bench_result *out)
{
	memset(out, 0, sizeof(*out));
	for (int k = 0; k < n; k++) {
		if (!rr[k].ok) {
			*out = rr[k];
			out->ok = 0;
			return;
		}
		out->samples += rr[k].samples;
		if (!out->note[0] && rr[k].note[0])
			memcpy(out->note, rr[k].note, sizeof(out->note));
	}
	for (int i = 0; i < BENCH_VALUES; i++) {
		if (is_latency(kind, i)) {
			out->v[i] = median(rr, n, i);
		} else {
			for (int k = 0; k < n; k++)
				out->v[i] += rr[k].v[i] / n;
		}
	}
	out->ok = 1;
}

int bench_round_figure(enum bench_kind kind, const char **label)
{
	if (kind == BENCH_BURST) {
		*label = "conn/s";
		return 0;
	}
	if (kind == BENCH_FORKEXIT) {
		*label = "us";
		return 0;
	}
	if (bench_is_load(kind)) {
		*label = "p99 us";
		return 1;
	}
	switch (kind) {
	case BENCH_LATENCY:
	case BENCH_TURNS: *label = "p50 us"; return 0;
	case BENCH_STREAM: *label = "MB/s"; return 0;
	default: *label = "per s"; return 0;
	}
}
