/* bench_report.c — prints the results as a side-by-side table or as one JSON object. */
#include "bench.h"
#include "json.h"
#include "cli.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* One printed line: a case yields one (connect) to five (pingpong). */
#define MAX_ROWS 5
struct row {
	char name[96];   /* machine name, for JSON */
	char label[96];  /* human name, for the table */
	const char *unit;
	int idx;         /* which of bench_result.v */
	int higher_is_better;
};

static void set_row(struct row *r, const char *name, const char *label, const char *unit, int idx, int higher)
{
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->label, sizeof(r->label), "%s", label);
	r->unit = unit;
	r->idx = idx;
	r->higher_is_better = higher;
}

/* Load cases: a rate row, then p99 (or a bandwidth row for duplex); then
 * how the clients fared each where the clients are several processes. */
static int load_rows(const struct bench_case *c, const char *id, const char *what, struct row rows[MAX_ROWS])
{
	char name[96], label[96];
	if (c->p.kind == BENCH_DUPLEX) {
		snprintf(name, sizeof(name), "load_duplex_%s_bandwidth", id);
		set_row(&rows[0], name, what, "MB/s", 0, 1);
		return 1;
	}
	char base[48];
	bench_case_id(&c->p, base, sizeof(base));
	if (c->p.kind == BENCH_FORKEXIT) {
		snprintf(name, sizeof(name), "%s_cycle", base);
		set_row(&rows[0], name, what, "us", 0, 0);
		return 1;
	}
	if (c->p.kind == BENCH_BURST) {
		snprintf(name, sizeof(name), "%s_connect", base);
		set_row(&rows[0], name, what, "conn/s", 0, 1);
		snprintf(name, sizeof(name), "%s_all_rt", base);
		snprintf(label, sizeof(label), "burst %d all+rt", c->p.conns);
		set_row(&rows[1], name, label, "ms", 1, 0);
		snprintf(name, sizeof(name), "%s_connect_later", base);
		snprintf(label, sizeof(label), "burst %d after first", c->p.conns);
		set_row(&rows[2], name, label, "conn/s", 2, 1);
		return 3;
	}
	const char *rate = c->p.kind == BENCH_PINGPONG || c->p.kind == BENCH_MANYCONNS ? "rt/s" : "req/s";
	snprintf(name, sizeof(name), "%s_rate", base);
	set_row(&rows[0], name, what, rate, 0, 1);
	snprintf(name, sizeof(name), "%s_p99", base);
	snprintf(label, sizeof(label), "%s p99", what);
	if (c->p.kind == BENCH_FORKCONN)
		snprintf(label, sizeof(label), "fork/req worst p99");
	if (c->p.kind == BENCH_PREFORK)
		snprintf(label, sizeof(label), "prefork worst p99");
	set_row(&rows[1], name, label, "us", 1, 0);
	if (c->p.kind == BENCH_PINGPONG || c->p.kind == BENCH_FORKSERVER || c->p.kind == BENCH_SENDFILE) {
		snprintf(name, sizeof(name), "%s_p99_worst_client", base);
		snprintf(label, sizeof(label), "%s worst p99", what);
		set_row(&rows[2], name, label, "us", BENCH_V_WORST_P99, 0);
		snprintf(name, sizeof(name), "%s_slowest_client_rate", base);
		snprintf(label, sizeof(label), "%s slowest", what);
		set_row(&rows[3], name, label, rate, BENCH_V_SLOWEST, 1);
		snprintf(name, sizeof(name), "%s_client_min_max", base);
		snprintf(label, sizeof(label), "%s min/max", what);
		set_row(&rows[4], name, label, "ratio", BENCH_V_SPREAD, 1);
		return 5;
	}
	if (c->p.kind != BENCH_MANYCONNS)
		return 2;
	snprintf(name, sizeof(name), "%s_connect", base);
	snprintf(label, sizeof(label), "%s connect", what);
	set_row(&rows[2], name, label, "conn/s", 2, 1);
	return 3;
}

static int rows_of(const struct bench_case *c, struct row rows[MAX_ROWS])
{
	char sz[32], id[32], what[48];
	size_t k = 0;
	bench_size_label(c->p.size, sz, sizeof(sz));
	bench_case_label(&c->p, what, sizeof(what));
	for (const char *s = sz; *s; s++)  /* JSON names have no spaces: "4KiB" */
		if (*s != ' ')
			id[k++] = *s;
	id[k] = '\0';
	if (c->p.kind == BENCH_STREAM && c->p.conns)
		/* the receiver exec'd with the connection, or was sent it */
		snprintf(id + k, sizeof(id) - k, "%s", c->p.conns == 1 ? "_exec" : "_passed");
	if (c->p.kind == BENCH_TURNS && c->p.conns)
		snprintf(id + k, sizeof(id) - k, "_swap");
	if (c->p.kind == BENCH_EPOLL && c->p.hold)
		snprintf(id + k, sizeof(id) - k, "_held");
	memset(rows, 0, MAX_ROWS * sizeof(*rows));
	if (bench_is_load(c->p.kind))
		return load_rows(c, id, what, rows);
	switch (c->p.kind) {
	case BENCH_LATENCY:
	case BENCH_TURNS:
		for (int i = 0; i < 3; i++) {
			const char *pct = i == 2 ? "worst p99" : i ? "p99" : "p50";
			snprintf(rows[i].name, sizeof(rows[i].name), "%s_%s_%s", bench_kind_name(c->p.kind), id,
				 i == 2 ? "p99_worst_process" : pct);
			snprintf(rows[i].label, sizeof(rows[i].label), "%s %s", what, pct);
			rows[i].unit = "us";
			rows[i].idx = i == 2 ? BENCH_V_WORST_P99 : i;
		}
		return c->p.kind == BENCH_TURNS ? 3 : 2;
	case BENCH_STREAM:
		snprintf(rows[0].name, sizeof(rows[0].name), "stream_%s_bandwidth", id);
		snprintf(rows[1].name, sizeof(rows[1].name), "stream_%s_messages", id);
		for (int i = 0; i < 2; i++) {
			snprintf(rows[i].label, sizeof(rows[i].label), "%s", what);
			rows[i].unit = i ? "msg/s" : "MB/s";
			rows[i].idx = i;
			rows[i].higher_is_better = 1;
		}
		return 2;
	case BENCH_EPOLL:
		snprintf(rows[0].name, sizeof(rows[0].name), "epoll_%d_%s_requests", BENCH_EPOLL_CONNS, id);
		snprintf(rows[0].label, sizeof(rows[0].label), "%s", what);
		rows[0].unit = "req/s";
		rows[0].higher_is_better = 1;
		return 1;
	case BENCH_CONNECT:
		snprintf(rows[0].name, sizeof(rows[0].name), "connect");
		snprintf(rows[0].label, sizeof(rows[0].label), "%s", what);
		rows[0].unit = "conn/s";
		rows[0].higher_is_better = 1;
		return 1;
	default:
		return 0;
	}
}

/* Oriented so that above 1 always means the switch is better. */
static double speedup(const struct bench_case *c, const struct row *r)
{
	if (!c->r[MODE_KERNEL].ok || !c->r[MODE_SWITCHED].ok)
		return NAN;
	double k = c->r[MODE_KERNEL].v[r->idx], s = c->r[MODE_SWITCHED].v[r->idx];
	double x = r->higher_is_better ? s / k : k / s;
	return isfinite(x) ? x : NAN;
}

/* Enough digits to compare, without 8-digit noise on large rates. */
static void fmt_value(char *buf, size_t len, const struct bench_result *r, int idx)
{
	double v = r->v[idx];
	if (r->skipped)
		snprintf(buf, len, "skipped");
	else if (!r->ok)
		snprintf(buf, len, "failed");
	else if (v < 100)
		snprintf(buf, len, "%.2f", v);
	else if (v < 10000)
		snprintf(buf, len, "%.1f", v);
	else
		snprintf(buf, len, "%.0f", v);
}

void bench_report_table(const struct bench_case *cases, int n, const struct bench_info *info)
{
	printf("sockswitch bench %s: kernel TCP vs switched, %s over %s%s\n", SSW_VERSION,
	       info->load ? "worker processes" : "two processes", info->addr,
	       info->netns ? " (server and client in two network namespaces joined by a veth pair)" :
	       info->peer ? " (server workers on that host, under `sockswitch bench --serve`)" : "");
	printf("switched = LD_PRELOAD=%s\n", info->lib);
	if (info->cpus)
		printf("server pinned to CPU %d, client to CPU %d%s\n", info->cpus[0], info->cpus[1],
		       info->load ? " (load cases: not pinned)" : "");
	else
		printf("workers placed by the scheduler (not pinned)\n");
	printf("ratio = switched/kernel for rates, kernel/switched for latency: above 1 means switched is faster\n");
	if (info->load)
		printf("worst p99 = the worst client's own p99; slowest = the slowest client's rate;\n"
		       "min/max = slowest client's rate over the fastest's (1: every client served alike)\n");
	printf("\n%-30s %-7s %13s %13s %9s\n", "case", "unit", "kernel TCP", "switched", "ratio");
	for (int i = 0; i < n; i++) {
		struct row rows[MAX_ROWS];
		int nr = rows_of(&cases[i], rows);
		for (int j = 0; j < nr; j++) {
			char k[32], s[32], x[32];
			fmt_value(k, sizeof(k), &cases[i].r[MODE_KERNEL], rows[j].idx);
			fmt_value(s, sizeof(s), &cases[i].r[MODE_SWITCHED], rows[j].idx);
			double sp = speedup(&cases[i], &rows[j]);
			if (isnan(sp))
				snprintf(x, sizeof(x), "-");
			else  /* a small ratio keeps its digits: 0.004x is not 0.00x */
				snprintf(x, sizeof(x), sp < 0.1 ? "%.3fx" : "%.2fx", sp);
			printf("%-30s %-7s %13s %13s %9s\n", rows[j].label, rows[j].unit, k, s, x);
		}
	}
	int header = 0;
	for (int i = 0; i < n; i++)
		for (int m = 0; m < MODE_COUNT; m++) {
			const struct bench_result *r = &cases[i].r[m];
			if (r->ok && !r->note[0])
				continue;
			if (!header++)
				printf("\n");
			char what[64];
			bench_case_label(&cases[i].p, what, sizeof(what));
			printf("%s %s, %s: %s\n", r->ok ? "note:" : r->skipped ? "skipped:" : "FAILED:", what,
			       bench_mode_name((enum bench_mode)m), r->ok ? r->note : r->error);
		}
}


static void json_number(double v)
{
	if (isfinite(v))
		printf("%.3f", v);
	else
		printf("null");
}

void bench_report_json(const struct bench_case *cases, int n, const struct bench_info *info)
{
	printf("{\n  \"tool\": \"sockswitch bench\",\n  \"version\": \"%s\",\n  \"library\": ", SSW_VERSION);
	cli_json_str(info->lib);
	printf(",\n  \"address\": ");
	cli_json_str(info->addr);
	printf(",\n  \"netns\": %s,\n  \"peer\": %s,\n  \"quick\": %s,\n  \"duration_s\": ",
	       info->netns ? "true" : "false", info->peer ? "true" : "false", info->quick ? "true" : "false");
	json_number(info->duration);
	if (info->cpus)
		printf(",\n  \"cpus\": {\"server\": %d, \"client\": %d}", info->cpus[0], info->cpus[1]);
	else
		printf(",\n  \"cpus\": null");
	if (info->load)
		printf(",\n  \"load_cases_pinned\": false");
	printf(",\n  \"speedup\": \"above 1 means switched is better: switched/kernel for rates, kernel/switched for latency\",\n");
	printf("  \"cases\": [");
	const char *sep = "\n";
	for (int i = 0; i < n; i++) {
		struct row rows[MAX_ROWS];
		int nr = rows_of(&cases[i], rows);
		for (int j = 0; j < nr; j++) {
			const struct bench_result *k = &cases[i].r[MODE_KERNEL], *s = &cases[i].r[MODE_SWITCHED];
			char cid[64];
			bench_case_id(&cases[i].p, cid, sizeof(cid));
			printf("%s    {\"name\": \"%s\", \"case\": \"%s\", \"family\": \"%s\", \"unit\": \"%s\", "
			       "\"higher_is_better\": %s, \"kernel\": ",
			       sep, rows[j].name, cid, bench_is_load(cases[i].p.kind) ? "load" : "default", rows[j].unit,
			       rows[j].higher_is_better ? "true" : "false");
			json_number(k->ok ? k->v[rows[j].idx] : NAN);
			printf(", \"switched\": ");
			json_number(s->ok ? s->v[rows[j].idx] : NAN);
			printf(", \"speedup\": ");
			json_number(speedup(&cases[i], &rows[j]));
			printf(", \"kernel_samples\": %ld, \"switched_samples\": %ld", k->samples, s->samples);
			for (int m = 0; m < MODE_COUNT; m++) {
				const struct bench_result *r = &cases[i].r[m];
				if (!r->ok || r->note[0]) {
					printf(", \"%s_%s\": ", m == MODE_KERNEL ? "kernel" : "switched",
					       r->ok ? "note" : r->skipped ? "skipped" : "error");
					cli_json_str(r->ok ? r->note : r->error);
				}
			}
			printf("}");
			sep = ",\n";
		}
	}
	printf("\n  ],\n  \"failed\": %d\n}\n", bench_report_failures(cases, n));
}

int bench_report_failures(const struct bench_case *cases, int n)
{
	int failed = 0;
	for (int i = 0; i < n; i++)
		for (int m = 0; m < MODE_COUNT; m++)
			failed += !cases[i].r[m].ok && !cases[i].r[m].skipped;
	return failed;
}
