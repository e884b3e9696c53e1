/* bench.h — shared types of `sockswitch bench`: the parent plans and reports, workers measure. */
#ifndef SSW_BENCH_H
#define SSW_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a pair of worker processes measures. */
enum bench_kind {
	BENCH_LATENCY, /* blocking ping-pong, round-trip percentiles */
	BENCH_STREAM,  /* one-way stream of fixed-size messages */
	BENCH_CONNECT, /* connect + 1 byte + close, repeated */
	BENCH_EPOLL,   /* BENCH_EPOLL_CONNS connections to one epoll server, request/response */
	BENCH_TURNS,   /* one connection, two processes (fork) taking turns at a round trip; conns 1:
			* without shared context (SOCKSWITCH_SHARED_CONTEXT=0): each turn a control swap */
	/* The load family (--load): many processes at once, never pinned, since
	 * how the wait policy copes with more runnable tasks than cores is the
	 * point.  conns is the number of pairs, clients or connections. */
	BENCH_PINGPONG,   /* conns pairs of processes, blocking ping-pong */
	BENCH_FORKSERVER, /* a server forking per connection (poll on socket + pipe), conns client processes */
	BENCH_SENDFILE,   /* 2 pre-forked epoll servers, conns keep-alive clients, header + sendfile under TCP_CORK */
	BENCH_DUPLEX,     /* one connection, both ends writing and reading at once */
	BENCH_MANYCONNS,  /* one epoll server holding conns connections: round trips, then connects/s */
	BENCH_BURST,      /* conns connects at once to an epoll server, a round trip on each: connects/s, ms */
	BENCH_FORKCONN,   /* a server forking per connection, conns clients opening one connection per request */
	BENCH_PREFORK,    /* a pre-forking server (3 workers accept), conns clients opening one connection per request */
	BENCH_FORKEXIT,   /* fork + _exit + waitpid by a process holding a listener (conns 1: SOCKSWITCH_STAT=0) */
	BENCH_KIND_COUNT
};

#define BENCH_LOAD_FIRST BENCH_PINGPONG

#define BENCH_EPOLL_CONNS 64
#define BENCH_EPOLL_IDLE 448 /* the hold variant: idle connections beside the busy ones */

/* The two columns: identical workers, with or without the switch preloaded. */
enum bench_mode { MODE_KERNEL, MODE_SWITCHED, MODE_COUNT };

/* Parameters of one case, passed on the worker command line. */
struct bench_params {
	enum bench_kind kind;
	size_t size;      /* message size in bytes */
	long count;       /* latency: measured round trips; others: upper bound */
	long warmup;      /* latency: round trips not measured */
	double duration;  /* seconds: how long to send (stream, connect) or at most measure (latency) */
	int conns;        /* load family: pairs, clients or connections; 0 elsewhere */
	int hold;         /* epoll: a child the server forked holds every connection and touches
			   * none (redis' BGSAVE); both sides without shared context (swap mode) */
};

/* The load cases whose clients are several processes (pingpong,
 * forkserver, sendfile) report beside the p99 over all requests how the
 * clients fared each: the worst client's own p99 (each process's p99, then
 * the largest), the slowest client's requests/s, and the slowest's over the
 * fastest's (1 = all served alike).  A client that waits
 * while the others trade the cores shows here, not in the overall p99. */
enum { BENCH_V_WORST_P99 = 3, BENCH_V_SLOWEST, BENCH_V_SPREAD, BENCH_VALUES };

/* What one run of one case in one mode produced. */
struct bench_result {
	int ok;
	int skipped;      /* not measured, for a reason in error (not a failure) */
	char error[256];  /* why it failed, for the report */
	char note[256];   /* something odd that did not spoil the numbers */
	double v[BENCH_VALUES]; /* latency: p50, p99 in us; stream: MB/s, msg/s; connect: conn/s;
			   * load: requests/s, p99 in us (manyconns: conn/s in v[2]); duplex: MB/s;
			   * burst: connects/s, ms until all made a round trip, connects/s
			   * after the first burst; forkconn: requests/s,
			   * the worst client's p99 in us; forkexit: us per cycle;
			   * load cases with several client processes also v[BENCH_V_WORST_P99..] */
	long samples;     /* round trips, messages or connections actually measured */
};

/* One row of the plan; a row produces one or two report lines. */
struct bench_case {
	struct bench_params p;
	struct bench_result r[MODE_COUNT];
};

/* A worker must be done within this; past it the parent kills it. */
#define BENCH_WORKER_TIMEOUT_S 30.0

static inline int bench_is_load(enum bench_kind k)
{
	return k >= BENCH_LOAD_FIRST;
}

/* Rounds (bench_rounds.c): without --quick, each side of a case runs in
 * rounds of 1/rounds of its length, kernel TCP and switched taking turns, so
 * that a burst of the host's noise lands in one round of one side instead
 * of deciding a whole figure.  Latencies are the median of the rounds,
 * rates their mean. */
#define BENCH_ROUNDS_MAX 5
int bench_rounds(const struct bench_params *p, int quick);
void bench_round_params(const struct bench_params *p, int rounds, struct bench_params *rp);
void bench_merge_rounds(enum bench_kind kind, const struct bench_result *rr, int n, struct bench_result *out);
/* The figure a progress line lists by round: its index in v and its label. */
int bench_round_figure(enum bench_kind kind, const char **label);

/* Where the two workers meet: the server's address, and the network
 * namespaces of server [0] and client [1] (descriptors; -1 = the bench's own). */
struct bench_where {
	char addr[64];
	int nsfd[2];
	unsigned peer_port;  /* --peer: the server runs on addr under `bench --serve` on this port; 0 = here */
	int mode;            /* --peer: the column (enum bench_mode) the peer's server runs in */
};

/* --netns: the /24 of the veth pair (server .1, client .2), and the route
 * the switched column gets unless SOCKSWITCH_ROUTES is set. */
#define BENCH_NETNS_NET "10.77.200"
#define BENCH_NETNS_ROUTES "route 10.77.0.0/16 fabric provider=tcp"

/* bench_netns.c: makes two network namespaces joined by a veth pair, held by
 * descriptor only (gone when the bench exits); 0, or -1 with err. */
int bench_netns_up(struct bench_where *w, char *err, size_t len);
void bench_netns_down(struct bench_where *w);
/* In a worker about to exec: move into its side's namespace (if any). */
int bench_netns_enter(const struct bench_where *w, int client);

/* --peer / --serve: the control port `bench --serve` listens on by default. */
#define BENCH_SERVE_PORT 7390

/* bench_peer.c: asks `bench --serve` at w->addr:w->peer_port to start the
 * server worker of p in column w->mode; the connected control socket, or -1
 * with err.  bench_serve: the --serve loop (never returns but on a setup
 * error, -1 with err). */
int bench_peer_request(const struct bench_where *w, const struct bench_params *p, char *err, size_t len);
int bench_serve(unsigned port, char **env[MODE_COUNT], char *err, size_t len);

/* bench_spawn.c: starts one worker process (server when port is 0), its
 * stdout and stderr on the non-blocking pipes fds[0], fds[1]; pid or -1. */
int bench_worker_spawn(const char *role, const struct bench_params *p, unsigned port, int cpu,
		       char *const env[], const struct bench_where *w, int fds[2]);

/* bench_spawn.c: runs one case under one mode with a server and a client
 * worker, pinned to cpus[0] and cpus[1] unless cpus is NULL, placed as w says. */
void bench_run_case(const struct bench_params *p, char *const env[], const int cpus[2],
		    const struct bench_where *w, struct bench_result *out);

/* bench_cpu.c: two distinct CPUs this process may run on; -1 if there are not two. */
int bench_pick_cpus(int cpus[2]);

/* bench_env.c: the environment of one column, NULL-terminated; NULL if out of memory. */
char **bench_env(enum bench_mode mode, const char *lib);
void bench_env_free(char **env);
/* A copy of env (the array only: free() it) with var, "NAME=value", in
 * place of any NAME= there; NULL if out of memory. */
char **bench_env_override(char *const env[], char *var);

/* bench_stats.c: the switched environment with p's own stats file in dir
 * (emptied first: a file holds one run of one case), or NULL with err; and
 * the note on r when that file shows connections that fell back. */
char **bench_stats_env(const char *dir, const struct bench_params *p, char **env, char *err, size_t len);
void bench_stats_note(const char *dir, const struct bench_params *p, struct bench_result *r);
/* Removes the cases' stats files and dir (the bench's own temporary one). */
void bench_stats_remove(const char *dir, const struct bench_case *cases, int n);

/* How the run was made, for the report header. */
struct bench_info {
	const char *lib;
	int quick;
	double duration;   /* of each stream and connect case */
	const int *cpus;   /* the two CPUs the workers were pinned to, or NULL */
	int load;          /* load-family cases are present (never pinned) */
	const char *addr;  /* the server's address */
	int netns;         /* server and client in two namespaces over a veth */
	int peer;          /* the server workers on another host (--peer) */
};

/* bench_report.c */
void bench_report_table(const struct bench_case *cases, int n, const struct bench_info *info);
void bench_report_json(const struct bench_case *cases, int n, const struct bench_info *info);
int bench_report_failures(const struct bench_case *cases, int n);

/* plot.c: --plot.  check: gnuplot is there and FILE.png can be written (before
 * measuring); plot: draw the cases.  Both 0, or -1 with a message in err. */
int bench_plot_check(const char *png, char *err, size_t errlen);
int bench_plot(const struct bench_case *cases, int n, const char *png, char *err, size_t errlen);
/* The gnuplot to run: $SOCKSWITCH_GNUPLOT, else gnuplot from PATH. */
const char *bench_gnuplot(void);

/* bench_util.c: names (worker command line, reports), time, sizes, statistics. */
const char *bench_kind_name(enum bench_kind k);
int bench_kind_parse(const char *s, enum bench_kind *k);
const char *bench_mode_name(enum bench_mode m);
void bench_case_label(const struct bench_params *p, char *buf, size_t len);
void bench_size_label(size_t size, char *buf, size_t len);
void bench_case_id(const struct bench_params *p, char *buf, size_t len);
double bench_now(void);
int bench_parse_size(const char *s, size_t *out);
double bench_percentile(double *sorted, long n, double pct);
/* qsort's comparison of doubles, ascending. */
int bench_cmp_double(const void *a, const void *b);

#endif
