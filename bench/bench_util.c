/* bench_util.c — small helpers shared by the bench parent and its workers. */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const kind_names[] = {
	[BENCH_LATENCY] = "latency",
	[BENCH_STREAM] = "stream",
	[BENCH_CONNECT] = "connect",
	[BENCH_EPOLL] = "epoll",
	[BENCH_TURNS] = "turns",
	[BENCH_PINGPONG] = "pingpong",
	[BENCH_FORKSERVER] = "forkserver",
	[BENCH_SENDFILE] = "sendfile",
	[BENCH_DUPLEX] = "duplex",
	[BENCH_MANYCONNS] = "manyconns",
	[BENCH_BURST] = "burst",
	[BENCH_FORKCONN] = "forkconn",
	[BENCH_PREFORK] = "prefork",
	[BENCH_FORKEXIT] = "forkexit",
};

const char *bench_kind_name(enum bench_kind k)
{
	return kind_names[k];
}

int bench_kind_parse(const char *s, enum bench_kind *k)
{
	for (unsigned i = 0; i < sizeof(kind_names) / sizeof(kind_names[0]); i++)
		if (!strcmp(s, kind_names[i])) {
			*k = (enum bench_kind)i;
			return 0;
		}
	return -1;
}

const char *bench_mode_name(enum bench_mode m)
{
	return m == MODE_KERNEL ? "kernel TCP" : "switched";
}

/* How a case is named to people, in progress lines, the table and notes. */
void bench_case_label(const struct bench_params *p, char *buf, size_t len)
{
	char sz[32];
	bench_size_label(p->size, sz, sizeof(sz));
	switch (p->kind) {
	case BENCH_LATENCY: snprintf(buf, len, "round trip %s", sz); return;
	case BENCH_STREAM:
		snprintf(buf, len, "stream %s%s", sz, p->conns == 1 ? " exec'd" : p->conns == 2 ? " passed" : "");
		return;
	case BENCH_CONNECT: snprintf(buf, len, "connect+1 B+close"); return;
	case BENCH_EPOLL:
		if (p->hold)
			snprintf(buf, len, "epoll %d+%d idle held by a child", BENCH_EPOLL_CONNS, BENCH_EPOLL_IDLE);
		else
			snprintf(buf, len, "epoll %d conns %s", BENCH_EPOLL_CONNS, sz);
		return;
	case BENCH_TURNS: snprintf(buf, len, "2 procs in turn %s%s", sz, p->conns ? " swap" : ""); return;
	case BENCH_PINGPONG: snprintf(buf, len, "pingpong %d pairs", p->conns); return;
	case BENCH_FORKSERVER: snprintf(buf, len, "fork/conn %d clients", p->conns); return;
	case BENCH_SENDFILE: snprintf(buf, len, "sendfile %s x%d", sz, p->conns); return;
	case BENCH_DUPLEX: snprintf(buf, len, "duplex %s", sz); return;
	case BENCH_MANYCONNS: snprintf(buf, len, "epoll %d conns", p->conns); return;
	case BENCH_BURST: snprintf(buf, len, "burst %d connects", p->conns); return;
	case BENCH_FORKCONN: snprintf(buf, len, "fork/request %d clients", p->conns); return;
	case BENCH_PREFORK: snprintf(buf, len, "prefork %d clients", p->conns); return;
	case BENCH_FORKEXIT: snprintf(buf, len, "fork+exit+wait%s", p->conns ? " stat=0" : ""); return;
	case BENCH_KIND_COUNT: break;
	}
	snprintf(buf, len, "?");
}

/* Monotonic, so a clock step during a run cannot produce negative latencies. */
double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "64", "4K", "64k", "1M" (binary multiples, as message sizes usually are). */
int bench_parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		return -1;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	if (*end == 'i' || *end == 'B' || *end == 'b')
		end += (*end == 'i' && (end[1] == 'B' || end[1] == 'b')) ? 2 : 1;
	if (*end || v == 0 || v > (64ULL << 20))
		return -1;
	*out = (size_t)v;
	return 0;
}

void bench_size_label(size_t size, char *buf, size_t len)
{
	if (size >= (1u << 20) && size % (1u << 20) == 0)
		snprintf(buf, len, "%zu MiB", size >> 20);
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(buf, len, "%zu KiB", size >> 10);
	else
		snprintf(buf, len, "%zu B", size);
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of an ascending array (n >= 1). */
double bench_percentile(double *sorted, long n, double pct)
{
	long rank = (long)ceil(pct / 100.0 * (double)n);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

/* The machine name of a case: JSON "case", and the file name of --stats-dir. */
void bench_case_id(const struct bench_params *p, char *buf, size_t len)
{
	char sz[32], id[32];
	size_t k = 0;
	bench_size_label(p->size, sz, sizeof(sz));
	for (const char *s = sz; *s && k < sizeof(id) - 1; s++)  /* "4KiB": no spaces */
		if (*s != ' ')
			id[k++] = *s;
	id[k] = '\0';
	const char *kind = bench_kind_name(p->kind);
	switch (p->kind) {
	case BENCH_CONNECT: snprintf(buf, len, "connect"); return;
	case BENCH_EPOLL: snprintf(buf, len, "epoll_%d_%s%s", BENCH_EPOLL_CONNS, id, p->hold ? "_held" : ""); return;
	case BENCH_SENDFILE:
	case BENCH_DUPLEX: snprintf(buf, len, "load_%s_%s", kind, id); return;
	default:
		if (bench_is_load(p->kind))
			snprintf(buf, len, "load_%s_%d", kind, p->conns);
		else if (p->kind == BENCH_STREAM && p->conns) /* exec'd, passed: their own stats file */
			snprintf(buf, len, "%s_%s_%s", kind, id, p->conns == 1 ? "exec" : "passed");
		else if (p->kind == BENCH_TURNS && p->conns)
			snprintf(buf, len, "%s_%s_swap", kind, id);
		else
			snprintf(buf, len, "%s_%s", kind, id);
	}
}
