/* bench_main.c — `sockswitch bench`: plans the cases, runs each under kernel TCP and switched, reports. */
#include "bench.h"
#include "cli.h"
#include "libpath.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 16
#define DEFAULT_SIZES "64,4K,64K,1M"

/* Iterations and durations, sized so the default run stays under a minute on
 * a 2-core machine where kernel loopback round trips take ~60 us, and
 * --quick stays around 10 s for CI. */
struct plan_knobs {
	long rtt_count, rtt_warmup;
	double rtt_max_s;  /* latency stops early past this, slow or not */
	double duration;   /* each stream and connect case */
};
static const struct plan_knobs full = { 20000, 2000, 10.0, 1.5 };
static const struct plan_knobs quick = { 8000, 800, 3.0, 0.7 };

void bench_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch bench [--json] [--quick] [--duration SEC] [--sizes LIST] [--plot FILE.png]\n"
		"\n"
		"Measures kernel TCP and switched TCP side by side in one run, between two\n"
		"processes over 127.0.0.1, a fresh port per case.  Each case runs twice with\n"
		"the same worker programs: once without libsockswitch.so (kernel TCP) and once\n"
		"with it preloaded in both processes (switched).\n"
		"\n"
		"cases:\n"
		"  round trip 64 B    blocking ping-pong, p50 and p99 in microseconds\n"
		"                     (%ld round trips after %ld warm-up; --quick: %ld after %ld)\n"
		"  stream SIZE        one process writes whole messages for --duration, the\n"
		"                     other reads; MB/s (10^6 bytes) and messages/s at the reader\n"
		"  connect+1 B+close  connections per second, served one after another\n"
		"  epoll 64 conns 64 B  64 connections to one epoll server, one 64 B request\n"
		"                     in flight on each; answered requests per second\n"
		"The ratio column is oriented so that above 1 means switched is faster:\n"
		"switched/kernel for rates, kernel/switched for latencies.\n"
		"\n"
		"options:\n"
		"  --json           print one JSON object instead of the table\n"
		"  --quick          fewer round trips and %.1f s per case (about 10 s in all), for CI\n"
		"  --duration SEC   seconds per stream, connect and epoll case (default %.1f, max 20)\n"
		"  --sizes LIST     stream message sizes, e.g. 64,4K,64K,1M (the default; K and M\n"
		"                   are 1024 and 1024*1024)\n"
		"  --no-pin         let the scheduler place the two workers (default: one per\n"
		"                   CPU, on the first two CPUs allowed, for repeatable numbers)\n"
		"  --plot FILE.png  also measure the round trip at every --sizes size, and draw\n"
		"                   latency and throughput by message size and connections/s,\n"
		"                   kernel next to switched, as a PNG with gnuplot (the table or\n"
		"                   JSON is printed as well)\n"
		"  -h, --help       show this help\n"
		"\n"
		"environment:\n"
		"  SOCKSWITCH_LIB   libsockswitch.so for the switched column (default: searched\n"
		"                   like `sockswitch run` does)\n"
		"  SOCKSWITCH_GNUPLOT  gnuplot program for --plot (default: gnuplot from PATH;\n"
		"                   Debian package gnuplot-nox)\n"
		"  SOCKSWITCH_LOG, SOCKSWITCH_CONF, SOCKSWITCH_ROUTES, ...\n"
		"                   passed to the workers, so they affect the switched column\n"
		"\n"
		"Progress goes to stderr.  A worker still running after %.0f s is killed and\n"
		"its case reported as failed.  exit status: 0 if every case was measured,\n"
		"1 if any failed or the library is missing, 2 on a usage error.\n",
		full.rtt_count, full.rtt_warmup, quick.rtt_count, quick.rtt_warmup,
		quick.duration, full.duration, BENCH_WORKER_TIMEOUT_S);
}

struct options {
	int json, quick, no_pin;
	double duration;   /* 0 = from the knobs */
	const char *sizes;
	const char *plot;
};

/* The full usage only when the option itself is unknown; a bad value needs
 * just the message. */
__attribute__((format(printf, 2, 3)))
static int usage_error(int show_usage, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "sockswitch bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (show_usage) {
		fprintf(stderr, "\n");
		bench_usage(stderr);
	}
	return CLI_EXIT_USAGE;
}

/* Returns -1 to continue, or an exit code (help printed, or a usage error). */
static int parse_options(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof(*o));
	o->sizes = DEFAULT_SIZES;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		const char *eq = strchr(a, '=');
		char name[32];
		snprintf(name, sizeof(name), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
		int takes_value = !strcmp(name, "--duration") || !strcmp(name, "--sizes") || !strcmp(name, "--plot");
		if (takes_value) {
			if (eq)
				v = eq + 1;
			else if (i + 1 < argc)
				v = argv[++i];
			else
				return usage_error(0, "%s needs a value", name);
		} else if (eq) {
			return usage_error(0, "%s takes no value", name);
		}
		if (cli_is_help(a)) {
			bench_usage(stdout);
			return CLI_EXIT_OK;
		} else if (!strcmp(name, "--json")) {
			o->json = 1;
		} else if (!strcmp(name, "--quick")) {
			o->quick = 1;
		} else if (!strcmp(name, "--no-pin")) {
			o->no_pin = 1;
		} else if (!strcmp(name, "--duration")) {
			char *end;
			o->duration = strtod(v, &end);
			if (*end || !(o->duration >= 0.05 && o->duration <= 20))
				return usage_error(0, "--duration %s: expected seconds between 0.05 and 20", v);
		} else if (!strcmp(name, "--sizes")) {
			o->sizes = v;
		} else if (!strcmp(name, "--plot")) {
			o->plot = v;
		} else {
			return usage_error(1, "unknown option '%s'", a);
		}
	}
	return -1;
}

/* Builds the list of cases; returns how many, or -1 on a bad --sizes. */
static int plan(const struct options *o, struct bench_case *cases, int max)
{
	const struct plan_knobs *k = o->quick ? &quick : &full;
	double duration = o->duration > 0 ? o->duration : k->duration;
	int n = 0;

	memset(cases, 0, sizeof(*cases) * (size_t)max);
	cases[n++].p = (struct bench_params){ BENCH_LATENCY, 64, k->rtt_count, k->rtt_warmup, k->rtt_max_s };
	if (o->plot) {
		/* the chart draws latency by message size: one round-trip case per size */
		char lat[256];
		snprintf(lat, sizeof(lat), "%s", o->sizes);
		char *ls = NULL;
		for (char *tok = strtok_r(lat, ",", &ls); tok; tok = strtok_r(NULL, ",", &ls)) {
			size_t size;
			if (bench_parse_size(tok, &size) < 0 || size == 64 || n >= max - MAX_SIZES - 3)
				continue; /* a bad size is reported below */
			/* big messages take longer per round trip: fewer of them */
			long count = size > 65536 ? k->rtt_count / 8 : k->rtt_count;
			cases[n++].p = (struct bench_params){ BENCH_LATENCY, size, count, count / 10, k->rtt_max_s / 2 };
		}
	}

	char list[256];
	if (strlen(o->sizes) >= sizeof(list)) {
		fprintf(stderr, "sockswitch bench: --sizes: list too long\n");
		return -1;
	}
	memcpy(list, o->sizes, strlen(o->sizes) + 1);
	char *save = NULL;
	int first_stream = n;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t size;
		if (bench_parse_size(tok, &size) < 0) {
			fprintf(stderr, "sockswitch bench: --sizes: '%s' is not a size from 1 to 64M\n", tok);
			return -1;
		}
		if (n - first_stream >= MAX_SIZES || n >= max - 2) {
			fprintf(stderr, "sockswitch bench: --sizes: at most %d sizes\n", MAX_SIZES);
			return -1;
		}
		/* The count only bounds the loop in case the clock misbehaves. */
		long count = (long)((64ULL << 30) / size);
		cases[n++].p = (struct bench_params){ BENCH_STREAM, size, count, 0, duration };
	}
	if (n == first_stream) {
		fprintf(stderr, "sockswitch bench: --sizes: empty list\n");
		return -1;
	}
	cases[n++].p = (struct bench_params){ BENCH_CONNECT, 1, 10000000, 0, duration };
	cases[n++].p = (struct bench_params){ BENCH_EPOLL, 64, 1000000000, 0, duration };
	return n;
}

static void progress(const struct bench_case *c, enum bench_mode m, double secs)
{
	char what[64];
	const struct bench_result *r = &c->r[m];
	bench_case_label(&c->p, what, sizeof(what));
	fprintf(stderr, "bench: %-18s %-10s %4.1f s  %s%s\n", what, bench_mode_name(m), secs,
		r->ok ? "ok" : "FAILED: ", r->ok ? "" : r->error);
}

int bench_main(int argc, char **argv)
{
	struct options o;
	int rc = parse_options(argc, argv, &o);
	if (rc >= 0)
		return rc;
	char perr[512];
	if (o.plot && bench_plot_check(o.plot, perr, sizeof(perr)) < 0) {
		fprintf(stderr, "sockswitch bench: %s\n", perr);
		return CLI_EXIT_FAIL;
	}

	struct bench_case cases[2 * MAX_SIZES + 3];
	int n = plan(&o, cases, 2 * MAX_SIZES + 3);
	if (n < 0)
		return CLI_EXIT_USAGE;

	char lib[PATH_MAX], why[2048];
	if (ssw_find_lib(lib, sizeof(lib), why, sizeof(why)) < 0) {
		fprintf(stderr, "sockswitch bench: cannot run the switched column: %s\n", why);
		return CLI_EXIT_FAIL;
	}
	char **env[MODE_COUNT] = { bench_env(MODE_KERNEL, lib), bench_env(MODE_SWITCHED, lib) };
	if (!env[MODE_KERNEL] || !env[MODE_SWITCHED]) {
		fprintf(stderr, "sockswitch bench: out of memory\n");
		bench_env_free(env[MODE_KERNEL]);
		bench_env_free(env[MODE_SWITCHED]);
		return CLI_EXIT_FAIL;
	}

	int cpus[2], pin = !o.no_pin && bench_pick_cpus(cpus) == 0;

	/* Kernel then switched for each case, so both columns of a row are
	 * measured as close together in time as possible. */
	for (int i = 0; i < n; i++)
		for (int m = 0; m < MODE_COUNT; m++) {
			double t0 = bench_now();
			bench_run_case(&cases[i].p, env[m], pin ? cpus : NULL, &cases[i].r[m]);
			progress(&cases[i], (enum bench_mode)m, bench_now() - t0);
		}

	struct bench_info info = { lib, o.quick, cases[n - 1].p.duration, pin ? cpus : NULL };
	if (o.json)
		bench_report_json(cases, n, &info);
	else
		bench_report_table(cases, n, &info);
	fflush(stdout);
	int plot_failed = 0;
	if (o.plot) {
		if (bench_plot(cases, n, o.plot, perr, sizeof(perr)) < 0) {
			fprintf(stderr, "sockswitch bench: %s\n", perr);
			plot_failed = 1;
		} else {
			fprintf(stderr, "bench: chart written to %s\n", o.plot);
		}
	}
	bench_env_free(env[MODE_KERNEL]);
	bench_env_free(env[MODE_SWITCHED]);
	return bench_report_failures(cases, n) || plot_failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
