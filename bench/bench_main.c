/* bench_main.c — `sockswitch bench`: plans the cases, runs each under kernel TCP and switched, reports. */
#include "bench.h"
#include "cli.h"
#include "libpath.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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

/* Seconds of each load case's measuring window (manyconns: plus half of it
 * for connects): --load is about 1 min on 2 cores, --load --quick ~25 s. */
#define LOAD_FULL_S 2.0
#define LOAD_QUICK_S 0.3
#define LOAD_MAX_CASES 16

void bench_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch bench [--json] [--quick] [--duration SEC] [--sizes LIST] [--plot FILE.png]\n"
		"       sockswitch bench --load [--case NAME[,NAME...]] [--json] [--quick] [--duration SEC]\n"
		"                        [--stats-dir DIR]\n"
		"       sockswitch bench --netns [any of the options above]\n"
		"       sockswitch bench --peer HOST[:PORT] [any of the options above]\n"
		"       sockswitch bench --serve[=PORT]\n"
		"\n"
		"Measures kernel TCP and switched TCP side by side in one run, between two\n"
		"processes over 127.0.0.1 (--netns: across two network namespaces), a fresh\n"
		"port per case.  Each case runs twice with the same worker programs: once\n"
		"without libsockswitch.so (kernel TCP) and once with it preloaded in both\n"
		"processes (switched).\n"
		"\n"
		"cases:\n"
		"  round trip 64 B    blocking ping-pong, p50 and p99 in microseconds\n"
		"                     (%ld round trips after %ld warm-up; --quick: %ld after %ld)\n"
		"  stream SIZE        one process writes whole messages for --duration, the\n"
		"                     other reads; MB/s (10^6 bytes) and messages/s at the reader\n"
		"  connect+1 B+close  connections per second, served one after another\n"
		"                     (after one warm-up connection: a first fabric connect\n"
		"                     loads libfabric, about 0.3 s)\n"
		"  epoll 64 conns 64 B  64 connections to one epoll server, one 64 B request\n"
		"                     in flight on each; answered requests per second\n"
		"  epoll 64+448 idle held by a child  the same with 448 idle connections\n"
		"                     more, while a child the server forked holds every\n"
		"                     connection and touches none (redis' BGSAVE), both\n"
		"                     sides without shared context (the swap's rule, as\n"
		"                     fabric's): the connections are shared by fork\n"
		"The ratio column is oriented so that above 1 means switched is faster:\n"
		"switched/kernel for rates, kernel/switched for latencies.\n"
		"\n"
		"load cases (--load; many processes, never pinned: contention for the CPUs\n"
		"is part of what they measure; each over a %.1f s window, --quick %.1f s).\n"
		"\n"
		"Rounds: without --quick, each side of a case runs in rounds (3; load cases\n"
		"%d), kernel TCP and switched taking turns and the side that goes first\n"
		"alternating; latencies are the median of the rounds, rates their mean, and\n"
		"the progress lines on stderr list each round's main figure.  A burst of\n"
		"the host's noise (other jobs; a virtual CPU its host stops for 1-5 ms)\n"
		"then lands in one round of one side instead of deciding a whole figure.\n"
		"pingpong, forkserver and sendfile also report how each client process\n"
		"fared: the worst client's own p99 (worst p99), the slowest client's rate\n"
		"(slowest), and the slowest client's rate over the fastest's (min/max).\n"
		"  pingpong      N pairs of processes (a client and a server each) doing\n"
		"                blocking 64 B ping-pong, N = 1, 2, 4, 8 per CPU allowed;\n"
		"                round trips/s over all pairs and p99 round trip\n"
		"  forkserver    a server forking a process per connection, which waits in\n"
		"                poll() on its socket and a pipe (like postgres); 8 client\n"
		"                processes doing 64 B request/response; requests/s and p99\n"
		"  sendfile      2 pre-forked epoll workers sharing one listener answer 32\n"
		"                keep-alive connections (2 client processes) with a header\n"
		"                by write() and a 4 KiB or 64 KiB file by sendfile() under\n"
		"                TCP_CORK; requests/s and p99\n"
		"  duplex        one connection, both ends writing and reading 64 KiB\n"
		"                messages at once (a writer and a reader thread each); MB/s\n"
		"                of both directions together\n"
		"  manyconns     one epoll server holding 100, 1000 and 5000 connections;\n"
		"                64 B round trips one at a time on each connection in turn\n"
		"                (round trips/s, p99), then connect+accept+close per second\n"
		"                while they stay open.  RLIMIT_NOFILE is raised as far as\n"
		"                the hard limit allows; a case it cannot fit is skipped\n"
		"  burst         one client opens 2000 connections at once (nonblocking\n"
		"                connects) to an epoll server that accepts until EAGAIN,\n"
		"                then one 64 B round trip on each, bursts until the window\n"
		"                is over (two at least); connects/s (until all are\n"
		"                established), ms until all made their round trip, and\n"
		"                connects/s of the bursts after the first (the first pays\n"
		"                for everything new: the switch's fresh memory)\n"
		"  forkconn      a server forking a process per connection, which answers\n"
		"                one 64 B request and exits; 8 client processes opening a\n"
		"                new connection per request; requests/s and the worst\n"
		"                client's p99\n"
		"  prefork       a pre-forking server: 3 workers wait in poll() on the\n"
		"                listener they inherited and accept, answer one 64 B\n"
		"                request and close (the master never accepts); the same 8\n"
		"                clients; requests/s and the worst client's p99\n"
		"  forkexit      fork() + _exit() + waitpid() by a process holding one\n"
		"                listening socket; us per cycle (a second row: the switched\n"
		"                column with SOCKSWITCH_STAT=0)\n"
		"\n"
		"options:\n"
		"  --json           print one JSON object instead of the table\n"
		"  --quick          fewer round trips and %.1f s per case (about 10 s in all), for CI;\n"
		"                   with --load, %.1f s windows (well under a minute in all)\n"
		"  --duration SEC   seconds per stream, connect and epoll case (default %.1f, max 20),\n"
		"                   or of each load case's window\n"
		"  --sizes LIST     stream message sizes, e.g. 64,4K,64K,1M (the default; K and M\n"
		"                   are 1024 and 1024*1024)\n"
		"  --no-pin         let the scheduler place the two workers (default: one per\n"
		"                   CPU, on the first two CPUs allowed, for repeatable numbers)\n"
		"  --load           run the load cases instead of the ones above\n"
		"  --netns          put the server worker(s) and the client worker(s) in two network\n"
		"                   namespaces joined by a veth pair, %s.1 and .2, made for\n"
		"                   the run and gone with it: the two talk as two hosts do, and the\n"
		"                   switched column crosses with the route '%s'\n"
		"                   unless SOCKSWITCH_ROUTES is set.  Needs root and ip (iproute2)\n"
		"  --peer HOST[:PORT]  run the server worker(s) on HOST (IPv4), where\n"
		"                   `sockswitch bench --serve` runs, and the clients here: both\n"
		"                   columns across the network.  Set SOCKSWITCH_ROUTES on both hosts\n"
		"                   (e.g. 'route 10.0.0.0/8 fabric provider=tcp') so the switched\n"
		"                   column crosses over fabric; --stats-dir covers this host's workers\n"
		"  --serve[=PORT]   wait for `bench --peer` clients on PORT (default %d, kernel\n"
		"                   TCP, all addresses) and run the server workers they ask for,\n"
		"                   one case at a time, until interrupted.  Anyone who reaches PORT\n"
		"                   can start bench workers (30 s each): trusted networks only\n"
		"  --case LIST      run only these cases, comma-separated, of either set:\n"
		"                   latency, stream, connect, epoll, turns, pingpong,\n"
		"                   forkserver, sendfile, duplex, manyconns, burst, forkconn,\n"
		"                   prefork, forkexit (turns: a client and its fork taking\n"
		"                   turns at a round trip on one connection, with shared\n"
		"                   context and without: each turn a control swap; one host)\n"
		"  --stats-dir DIR  the switched workers of each case append the switch's\n"
		"                   per-process counters (SOCKSWITCH_STATS_FILE) to DIR/CASE.stats,\n"
		"                   CASE as in the JSON \"case\" field (files emptied first): proof\n"
		"                   that the switched column was switched (fallback=0).  Without it\n"
		"                   they go to a temporary directory; either way a switched column\n"
		"                   whose connections fell back to kernel TCP gets a note\n"
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
		"1 if any failed or the library is missing, 2 on a usage error (a skipped\n"
		"case is not a failure).\n",
		full.rtt_count, full.rtt_warmup, quick.rtt_count, quick.rtt_warmup,
		LOAD_FULL_S, LOAD_QUICK_S, BENCH_ROUNDS_MAX, quick.duration, LOAD_QUICK_S, full.duration, BENCH_NETNS_NET,
		BENCH_NETNS_ROUTES, BENCH_SERVE_PORT, BENCH_WORKER_TIMEOUT_S);
}

struct options {
	int json, quick, no_pin, load, netns;
	const char *peer;  /* --peer HOST[:PORT] */
	unsigned serve;    /* --serve[=PORT]: the control port, 0 = not serving */
	unsigned cases;    /* bit per enum bench_kind from --case; 0 = not given */
	double duration;   /* 0 = from the knobs */
	const char *sizes;
	const char *plot;
	const char *stats_dir;
};

static unsigned load_bits(void)
{
	return ((1u << BENCH_KIND_COUNT) - 1) & ~((1u << BENCH_LOAD_FIRST) - 1);
}

static int plan_default(const struct options *o, struct bench_case *cases, int max);

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

/* --case LIST: kind names, as the worker command line spells them. */
static int parse_cases(const char *v, unsigned *mask)
{
	char list[256];
	if (snprintf(list, sizeof(list), "%s", v) >= (int)sizeof(list))
		return usage_error(0, "--case: list too long");
	char *save = NULL;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		enum bench_kind k;
		if (bench_kind_parse(tok, &k) < 0)
			return usage_error(0, "--case: unknown case '%s' (see --help)", tok), -1;
		*mask |= 1u << k;
	}
	if (!*mask)
		return usage_error(0, "--case: empty list"), -1;
	return 0;
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
		int takes_value = !strcmp(name, "--duration") || !strcmp(name, "--sizes") || !strcmp(name, "--plot") ||
				  !strcmp(name, "--case") || !strcmp(name, "--stats-dir") || !strcmp(name, "--peer");
		if (!strcmp(name, "--serve")) {
			char *end = NULL;
			long port = eq ? strtol(eq + 1, &end, 10) : BENCH_SERVE_PORT;
			if (eq && (*end || end == eq + 1 || port < 1 || port > 65535))
				return usage_error(0, "--serve=%s: expected a port from 1 to 65535", eq + 1);
			o->serve = (unsigned)port;
			continue;
		}
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
		} else if (!strcmp(name, "--stats-dir")) {
			o->stats_dir = v;
		} else if (!strcmp(name, "--load")) {
			o->load = 1;
		} else if (!strcmp(name, "--netns")) {
			o->netns = 1;
		} else if (!strcmp(name, "--peer")) {
			o->peer = v;
		} else if (!strcmp(name, "--case")) {
			if (parse_cases(v, &o->cases) < 0)
				return CLI_EXIT_USAGE;
		} else {
			return usage_error(1, "unknown option '%s'", a);
		}
	}
	if (o->load && (o->cases & ~load_bits()))
		return usage_error(0, "--load: --case names a case that is not a load case");
	if (o->netns && o->peer)
		return usage_error(0, "--netns and --peer: one or the other");
	if (o->serve && (o->netns || o->peer || o->plot || o->json || o->load || o->cases))
		return usage_error(0, "--serve takes no other option: the client (--peer) chooses the cases");
	if (o->plot && (o->load || o->cases))
		return usage_error(0, "--plot draws the default cases; it does not go with --load or --case");
	return -1;
}

static int cores_allowed(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	int n = CPU_COUNT(&set);
	return n > 0 ? n : 1;
}

/* The load family, in the order of --help. */
static int plan_load(const struct options *o, struct bench_case *cases, int max)
{
	double d = o->duration > 0 ? o->duration : o->quick ? LOAD_QUICK_S : LOAD_FULL_S;
	long big = 1000000000;
	int n = 0, cores = cores_allowed();
	struct bench_params ps[LOAD_MAX_CASES];
	for (int per = 1; per <= 8; per *= 2)
		ps[n++] = (struct bench_params){ BENCH_PINGPONG, 64, big, 0, d, per * cores, 0 };
	ps[n++] = (struct bench_params){ BENCH_FORKSERVER, 64, big, 0, d, 8, 0 };
	ps[n++] = (struct bench_params){ BENCH_SENDFILE, 4096, big, 0, d, 32, 0 };
	ps[n++] = (struct bench_params){ BENCH_SENDFILE, 65536, big, 0, d, 32, 0 };
	ps[n++] = (struct bench_params){ BENCH_DUPLEX, 65536, big, 0, d, 0, 0 };
	/* warm-up, round trips and connects take up to 2.5 windows: stay
	 * within the workers' time limit whatever --duration says */
	double dm = d < 8 ? d : 8;
	ps[n++] = (struct bench_params){ BENCH_MANYCONNS, 64, big, 0, dm, 100, 0 };
	ps[n++] = (struct bench_params){ BENCH_MANYCONNS, 64, big, 0, dm, 1000, 0 };
	ps[n++] = (struct bench_params){ BENCH_MANYCONNS, 64, big, 0, dm, 5000, 0 };
	ps[n++] = (struct bench_params){ BENCH_BURST, 64, big, 0, d, 2000, 0 };
	ps[n++] = (struct bench_params){ BENCH_FORKCONN, 64, big, 0, d, 8, 0 };
	ps[n++] = (struct bench_params){ BENCH_PREFORK, 64, big, 0, d, 8, 0 };
	ps[n++] = (struct bench_params){ BENCH_FORKEXIT, 64, big, 0, d, 0, 0 };
	ps[n++] = (struct bench_params){ BENCH_FORKEXIT, 64, big, 0, d, 1, 0 };
	int k = 0;
	for (int i = 0; i < n && k < max; i++)
		cases[k++].p = ps[i];
	return k;
}

/* Drops the cases --case did not name. */
static int keep_selected(unsigned mask, struct bench_case *cases, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		if (!mask || (mask & (1u << cases[i].p.kind)))
			cases[k++] = cases[i];
	return k;
}

/* Builds the list of cases; returns how many, or -1 on a bad --sizes. */
static int plan(const struct options *o, struct bench_case *cases, int max)
{
	memset(cases, 0, sizeof(*cases) * (size_t)max);
	int n = 0;
	if (!o->load && (!o->cases || (o->cases & ~load_bits())))
		if ((n = plan_default(o, cases, max - LOAD_MAX_CASES)) < 0)
			return -1;
	if (o->load || (o->cases & load_bits()))
		n += plan_load(o, cases + n, max - n);
	return keep_selected(o->cases, cases, n);
}

/* The default family: round trip, streams by size, connect, epoll. */
static int plan_default(const struct options *o, struct bench_case *cases, int max)
{
	const struct plan_knobs *k = o->quick ? &quick : &full;
	double duration = o->duration > 0 ? o->duration : k->duration;
	int n = 0;

	cases[n++].p = (struct bench_params){ BENCH_LATENCY, 64, k->rtt_count, k->rtt_warmup, k->rtt_max_s, 0, 0 };
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
			cases[n++].p = (struct bench_params){ BENCH_LATENCY, size, count, count / 10, k->rtt_max_s / 2, 0, 0 };
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
		if (n - first_stream >= MAX_SIZES || n >= max - 7) { /* and the 7 cases after */
			fprintf(stderr, "sockswitch bench: --sizes: at most %d sizes\n", MAX_SIZES);
			return -1;
		}
		/* The count only bounds the loop in case the clock misbehaves. */
		long count = (long)((64ULL << 30) / size);
		cases[n++].p = (struct bench_params){ BENCH_STREAM, size, count, 0, duration, 0, 0 };
	}
	if (n == first_stream) {
		fprintf(stderr, "sockswitch bench: --sizes: empty list\n");
		return -1;
	}
	/* the same 1 MiB stream to a receiver that exec'd itself with the
	 * connection first (README Limits: taken over, not relayed) */
	cases[n++].p = (struct bench_params){ BENCH_STREAM, 1u << 20, (long)((64ULL << 30) >> 20), 0, duration, 1, 0 };
	/* and to a worker it was sent to over SCM_RIGHTS (taken over from its relay) */
	cases[n++].p = (struct bench_params){ BENCH_STREAM, 1u << 20, (long)((64ULL << 30) >> 20), 0, duration, 2, 0 };
	cases[n++].p = (struct bench_params){ BENCH_CONNECT, 1, 10000000, 0, duration, 0, 0 };
	cases[n++].p = (struct bench_params){ BENCH_EPOLL, 64, 1000000000, 0, duration, 0, 0 };
	/* the same while a forked child holds every connection (BGSAVE), in
	 * swap mode (no shared context): sharing by fork must not tax waits */
	if (!o->peer)
		cases[n++].p = (struct bench_params){ BENCH_EPOLL, 64, 1000000000, 0, duration, 0, 1 };
	/* two processes taking turns on one connection: shared context, then
	 * without (each turn a control swap: session_swap.c); between hosts
	 * (fabric: no shared context) each turn moves the transport too
	 * (session_move.c), the second case alone */
	if (!o->peer && !o->netns)
		cases[n++].p = (struct bench_params){ BENCH_TURNS, 64, k->rtt_count / 4, k->rtt_warmup / 4, k->rtt_max_s, 0, 0 };
	cases[n++].p = (struct bench_params){ BENCH_TURNS, 64, k->rtt_count / 4, k->rtt_warmup / 4, k->rtt_max_s, 1, 0 };
	return n;
}

/* manyconns holds conns sockets in each of two processes (and the switch
 * may keep descriptors of its own per connection): raise the soft limit of
 * open files, which the workers inherit, as far as the hard one allows.
 * -1 with the reason when even the connections themselves cannot fit. */
static int fit_nofile(int conns, char *why, size_t len)
{
	struct rlimit rl;
	rlim_t want = (rlim_t)conns * 4 + 256, need = (rlim_t)conns + 64;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		snprintf(why, len, "manyconns %d: getrlimit(RLIMIT_NOFILE): %s", conns, strerror(errno));
		return -1;
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		rlim_t to = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
		if (to > rl.rlim_cur) {
			struct rlimit up = { to, rl.rlim_max };
			if (setrlimit(RLIMIT_NOFILE, &up) == 0)
				rl.rlim_cur = to;
		}
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		snprintf(why, len, "manyconns %d: RLIMIT_NOFILE is %llu (hard %llu), %llu descriptors needed",
			 conns, (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, (unsigned long long)need);
		return -1;
	}
	return 0;
}

/* --peer HOST[:PORT]: the peer's IPv4 address (a name is resolved once). */
static int parse_peer(const char *arg, struct bench_where *w)
{
	char host[256];
	const char *colon = strrchr(arg, ':');
	long port = BENCH_SERVE_PORT;
	snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - arg) : (int)strlen(arg), arg);
	if (colon) {
		char *end;
		port = strtol(colon + 1, &end, 10);
		if (*end || end == colon + 1 || port < 1 || port > 65535)
			return usage_error(0, "--peer %s: expected HOST[:PORT], PORT from 1 to 65535", arg), -1;
	}
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int e = getaddrinfo(host, NULL, &hints, &ai);
	if (e || !ai) {
		usage_error(0, "--peer %s: %s (an IPv4 host)", host, e ? gai_strerror(e) : "no address");
		return -1;
	}
	inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, w->addr, sizeof(w->addr));
	freeaddrinfo(ai);
	w->peer_port = (unsigned)port;
	return 0;
}

/* rr: the case's rounds (n of them), whose main figure is listed */
static void progress(const struct bench_case *c, enum bench_mode m, double secs, const struct bench_result *rr, int n)
{
	char what[64], list[12 * BENCH_ROUNDS_MAX + 32] = "";
	const struct bench_result *r = &c->r[m];
	bench_case_label(&c->p, what, sizeof(what));
	const char *label;
	int f = bench_round_figure(c->p.kind, &label);
	int any = 0; /* a figure there (duplex has no p99) */
	for (int k = 0; r->ok && k < n; k++)
		any |= rr[k].v[f] > 0;
	for (int k = 0, off = 0; any && n > 1 && k < n && off < (int)sizeof(list); k++)
		off += snprintf(list + off, sizeof(list) - (size_t)off, "%s%.*f", k ? " " : "", rr[k].v[f] < 100 ? 1 : 0,
				rr[k].v[f]);
	fprintf(stderr, "bench: %-20s %-10s %4.1f s  %s%s%s%s%s%s\n", what, bench_mode_name(m), secs, r->ok ? "ok" : "FAILED: ",
		r->ok ? "" : r->error, list[0] ? "  (" : "", list[0] ? label : "", list[0] ? " by round: " : "",
		list[0] ? strcat(list, ")") : "");
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

	struct bench_case cases[2 * MAX_SIZES + 5 + LOAD_MAX_CASES];
	int n = plan(&o, cases, (int)(sizeof(cases) / sizeof(cases[0])));
	if (n < 0)
		return CLI_EXIT_USAGE;
	if (n == 0) {
		fprintf(stderr, "sockswitch bench: --case: nothing to run\n");
		return CLI_EXIT_USAGE;
	}

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

	if (o.serve) {
		char serr[256];
		bench_serve(o.serve, env, serr, sizeof(serr));
		fprintf(stderr, "sockswitch bench: %s\n", serr);
		bench_env_free(env[MODE_KERNEL]);
		bench_env_free(env[MODE_SWITCHED]);
		return CLI_EXIT_FAIL;
	}

	/* --netns: the workers in two namespaces over a veth; the switched
	 * column routes that network over fabric unless told otherwise.
	 * --peer: the server workers on another host, under `bench --serve`. */
	struct bench_where where = { "127.0.0.1", { -1, -1 }, 0, 0 };
	if (o.peer && parse_peer(o.peer, &where) < 0) {
		bench_env_free(env[MODE_KERNEL]);
		bench_env_free(env[MODE_SWITCHED]);
		return CLI_EXIT_USAGE;
	}
	char **swenv = env[MODE_SWITCHED];
	static char routes[] = "SOCKSWITCH_ROUTES=" BENCH_NETNS_ROUTES;
	if (o.netns) {
		char nerr[512];
		if (bench_netns_up(&where, nerr, sizeof(nerr)) < 0) {
			fprintf(stderr, "sockswitch bench: --netns: %s\n", nerr);
			bench_env_free(env[MODE_KERNEL]);
			bench_env_free(env[MODE_SWITCHED]);
			return CLI_EXIT_FAIL;
		}
		if (!getenv("SOCKSWITCH_ROUTES") && !(swenv = bench_env_override(env[MODE_SWITCHED], routes))) {
			fprintf(stderr, "sockswitch bench: out of memory\n");
			swenv = env[MODE_SWITCHED];
		}
		fprintf(stderr, "bench: server in a network namespace at %s, client in another at %s.2, over a veth; switched: SOCKSWITCH_ROUTES='%s'\n",
			where.addr, BENCH_NETNS_NET, getenv("SOCKSWITCH_ROUTES") ? getenv("SOCKSWITCH_ROUTES") : BENCH_NETNS_ROUTES);
	}

	/* the switched workers always write their counters, to --stats-dir or
	 * to a private directory removed at the end: a switched column that
	 * fell back to kernel TCP is then noted in the report */
	char tmpdir[PATH_MAX];
	const char *stats_dir = o.stats_dir;
	snprintf(tmpdir, sizeof(tmpdir), "%s/sockswitch-bench-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!stats_dir && mkdtemp(tmpdir))
		stats_dir = tmpdir;

	int cpus[2], pin = !o.no_pin && bench_pick_cpus(cpus) == 0;

	/* Kernel then switched for each case, so both columns of a row are
	 * measured as close together in time as possible. */
	int load = 0;
	for (int i = 0; i < n; i++) {
		char why[256];
		load |= bench_is_load(cases[i].p.kind);
		if ((cases[i].p.kind == BENCH_MANYCONNS || cases[i].p.kind == BENCH_BURST) &&
		    fit_nofile(cases[i].p.conns, why, sizeof(why)) < 0) {
			for (int m = 0; m < MODE_COUNT; m++) {
				cases[i].r[m].skipped = 1;
				snprintf(cases[i].r[m].error, sizeof(cases[i].r[m].error), "%s", why);
			}
			fprintf(stderr, "bench: skipped: %s\n", why);
			continue;
		}
		int pinned = pin && !bench_is_load(cases[i].p.kind);
		char serr[256];
		char **cenv[MODE_COUNT] = { env[MODE_KERNEL],
					    stats_dir ? bench_stats_env(stats_dir, &cases[i].p, swenv, serr, sizeof(serr)) : swenv };
		/* forkexit stat=0: the switched column without the stat registry */
		static char nostat[] = "SOCKSWITCH_STAT=0";
		char **plain_sw = cenv[MODE_SWITCHED];
		if (cases[i].p.kind == BENCH_FORKEXIT && cases[i].p.conns && plain_sw &&
		    !(cenv[MODE_SWITCHED] = bench_env_override(plain_sw, nostat)))
			snprintf(serr, sizeof(serr), "out of memory");
		/* rounds (bench_rounds.c), the side that goes first swapped
		 * every round */
		int rounds = bench_rounds(&cases[i].p, o.quick);
		struct bench_params rp;
		bench_round_params(&cases[i].p, rounds, &rp);
		struct bench_result rr[MODE_COUNT][BENCH_ROUNDS_MAX];
		double took[MODE_COUNT] = { 0 };
		for (int k = 0; k < rounds; k++)
			for (int j = 0; j < MODE_COUNT; j++) {
				int m = k & 1 ? MODE_COUNT - 1 - j : j;
				double t0 = bench_now();
				struct bench_result *r = &rr[m][k];
				memset(r, 0, sizeof(*r));
				where.mode = m;
				if (cenv[m])
					bench_run_case(&rp, cenv[m], pinned ? cpus : NULL, &where, r);
				else
					snprintf(r->error, sizeof(r->error), "%s", serr);
				took[m] += bench_now() - t0;
			}
		for (int m = 0; m < MODE_COUNT; m++) {
			bench_merge_rounds(cases[i].p.kind, rr[m], rounds, &cases[i].r[m]);
			if (m == MODE_SWITCHED && stats_dir)
				bench_stats_note(stats_dir, &cases[i].p, &cases[i].r[m]);
			progress(&cases[i], (enum bench_mode)m, took[m], rr[m], rounds);
		}
		if (cenv[MODE_SWITCHED] != plain_sw)
			free(cenv[MODE_SWITCHED]);
		if (plain_sw != swenv)
			free(plain_sw);
	}

	int all_load = load;
	for (int i = 0; i < n; i++)
		all_load &= bench_is_load(cases[i].p.kind);
	struct bench_info info = { lib, o.quick, cases[n - 1].p.duration, pin && !all_load ? cpus : NULL, load,
				   where.addr, o.netns, where.peer_port != 0 };
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
	if (swenv != env[MODE_SWITCHED])
		free(swenv);
	if (stats_dir && stats_dir != o.stats_dir)
		bench_stats_remove(stats_dir, cases, n);
	bench_netns_down(&where);
	bench_env_free(env[MODE_KERNEL]);
	bench_env_free(env[MODE_SWITCHED]);
	return bench_report_failures(cases, n) || plot_failed ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
