/* bench_worker.c — hidden `sockswitch bench-worker`: one side of one case, reported as one line on stdout. */
#include "bench_net.h"
#include "bench_worker.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int bench_fail(struct bench_result *r, const char *what)
{
	if (errno)
		snprintf(r->error, sizeof(r->error), "%s: %s", what, strerror(errno));
	else /* a broken interposer can fail without saying why */
		snprintf(r->error, sizeof(r->error), "%s failed (errno not set)", what);
	return -1;
}

int bench_fail_msg(struct bench_result *r, const char *msg)
{
	snprintf(r->error, sizeof(r->error), "%s", msg);
	return -1;
}

static const struct bench_roles *roles_of(enum bench_kind k)
{
	switch (k) {
	case BENCH_LATENCY: return &bench_latency_roles;
	case BENCH_TURNS: return &bench_turns_roles;
	case BENCH_STREAM: return &bench_stream_roles;
	case BENCH_CONNECT: return &bench_connect_roles;
	case BENCH_EPOLL: return &bench_epoll_roles;
	case BENCH_MANYCONNS: return &bench_manyconns_roles;
	case BENCH_PINGPONG: return &bench_pingpong_roles;
	case BENCH_FORKSERVER: return &bench_forkserver_roles;
	case BENCH_SENDFILE: return &bench_sendfile_roles;
	case BENCH_DUPLEX: return &bench_duplex_roles;
	case BENCH_BURST: return &bench_burst_roles;
	case BENCH_FORKCONN: return &bench_forkconn_roles;
	case BENCH_PREFORK: return &bench_prefork_roles;
	case BENCH_FORKEXIT: return &bench_forkexit_roles;
	case BENCH_KIND_COUNT: break;
	}
	return NULL;
}

static int parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* The parent is the only caller, so a malformed line is a bug: say which argument. */
static int parse_args(int argc, char **argv, int *server, struct bench_params *p, long *port)
{
	long size = 0, conns = 0;
	*server = -1;
	*port = 0;
	memset(p, 0, sizeof(*p));
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		char *end;
		int bad = 0;
		if (!strcmp(k, "--role"))
			*server = !strcmp(v, "server") ? 1 : !strcmp(v, "client") ? 0 : (bad = 1, -1);
		else if (!strcmp(k, "--case"))
			bad = bench_kind_parse(v, &p->kind) < 0;
		else if (!strcmp(k, "--size"))
			bad = parse_long(v, 1, 64L << 20, &size) < 0;
		else if (!strcmp(k, "--count"))
			bad = parse_long(v, 1, 1L << 40, &p->count) < 0;
		else if (!strcmp(k, "--warmup"))
			bad = parse_long(v, 0, 1L << 30, &p->warmup) < 0;
		else if (!strcmp(k, "--conns"))
			bad = parse_long(v, 0, 1000000, &conns) < 0;
		else if (!strcmp(k, "--hold")) {
			long h;
			bad = parse_long(v, 0, 1, &h) < 0;
			p->hold = (int)h;
		}
		else if (!strcmp(k, "--addr"))
			bad = net_set_addr(v) < 0;
		else if (!strcmp(k, "--port"))
			bad = parse_long(v, 1, 65535, port) < 0;
		else if (!strcmp(k, "--duration")) {
			p->duration = strtod(v, &end);
			bad = *end || !(p->duration > 0 && p->duration <= BENCH_WORKER_TIMEOUT_S);
		} else
			bad = 1;
		if (bad) {
			fprintf(stderr, "sockswitch bench-worker: bad argument %s %s\n", k, v);
			return -1;
		}
	}
	p->size = (size_t)size;
	p->conns = (int)conns;
	if (*server < 0 || !p->size || !p->count || !p->duration || (!*server && !*port)) {
		fprintf(stderr, "sockswitch bench-worker: missing arguments (internal to sockswitch bench)\n");
		return -1;
	}
	return 0;
}

#define EXEC_FD_ENV "SOCKSWITCH_BENCH_EXEC_FD"
static int worker_argc;
static char **worker_argv;

int bench_worker_reexec(int fd, struct bench_result *r)
{
	char v[16], **argv = calloc((size_t)worker_argc + 2, sizeof *argv);
	if (!argv)
		return bench_fail(r, "calloc");
	argv[0] = "sockswitch";
	for (int i = 0; i < worker_argc; i++)
		argv[i + 1] = worker_argv[i];
	snprintf(v, sizeof v, "%d", fd);
	if (fcntl(fd, F_SETFD, 0) < 0 || setenv(EXEC_FD_ENV, v, 1) < 0)
		return bench_fail(r, "keep the connection across exec");
	execv("/proc/self/exe", argv);
	free(argv);
	return bench_fail(r, "exec");
}

int bench_worker_main(int argc, char **argv)
{
	struct bench_params p;
	struct bench_result r = { 0 };
	int server, rc;
	long port;

	if (parse_args(argc, argv, &server, &p, &port) < 0)
		return CLI_EXIT_USAGE;
	worker_argc = argc;
	worker_argv = argv;
	/* A peer that goes away must show up as EPIPE in the report, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	/* Stop by ourselves even if the parent that would kill us is gone. */
	alarm((unsigned)BENCH_WORKER_TIMEOUT_S + 1);

	/* the turns case without shared context: this client, and the process
	 * it forks, run with SOCKSWITCH_SHARED_CONTEXT=0 (read at load); the
	 * epoll case with a holding child: both sides */
	if (((!server && p.kind == BENCH_TURNS && p.conns) || (p.kind == BENCH_EPOLL && p.hold)) &&
	    !getenv("SOCKSWITCH_SHARED_CONTEXT")) {
		char **av = calloc((size_t)argc + 2, sizeof *av);
		if (av && setenv("SOCKSWITCH_SHARED_CONTEXT", "0", 1) == 0) {
			av[0] = "sockswitch";
			for (int i = 0; i < argc; i++)
				av[i + 1] = argv[i];
			execv("/proc/self/exe", av);
		}
		free(av);
		dprintf(1, "error cannot re-exec with SOCKSWITCH_SHARED_CONTEXT=0\n");
		return CLI_EXIT_FAIL;
	}
	const struct bench_roles *roles = roles_of(p.kind);
	const char *exec_fd = getenv(EXEC_FD_ENV);
	if (server && exec_fd && p.kind == BENCH_STREAM) {
		/* the image bench_worker_reexec started: the connection is here */
		int fd = atoi(exec_fd);
		unsetenv(EXEC_FD_ENV);
		rc = bench_stream_receive(fd, &p, &r);
	} else if (server) {
		uint16_t bound;
		int lfd = net_listen(&bound);
		if (lfd < 0) {
			rc = bench_fail(&r, "listen");
		} else {
			dprintf(1, "port %u\n", (unsigned)bound);
			rc = roles->server(lfd, &p, &r);
			close(lfd);
		}
	} else {
		rc = roles->client((uint16_t)port, &p, &r);
	}

	if (rc == 0 && r.ok)
		dprintf(1, "result %.17g %.17g %.17g %ld %.17g %.17g %.17g\n", r.v[0], r.v[1], r.v[2], r.samples,
			r.v[BENCH_V_WORST_P99], r.v[BENCH_V_SLOWEST], r.v[BENCH_V_SPREAD]);
	else if (rc < 0)
		dprintf(1, "error %s\n", r.error);
	return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
