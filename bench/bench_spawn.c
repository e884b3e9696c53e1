/* bench_spawn.c — runs one case as a server and a client worker process, never longer than 30 s. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* After the measuring side is done the other side only has to see EOF and
 * exit; longer than this means it hangs, and we stop waiting. */
#define GRACE_S 5.0

struct worker {
	const char *role;
	pid_t pid;       /* > 0 until reaped */
	int fd[2];       /* read ends of its stdout and stderr, -1 at EOF */
	char out[1024];  /* start of stdout: the lines we parse come first */
	size_t outlen;
	char err[2048];  /* end of stderr: the last words explain a crash */
	size_t errlen;
	int status;      /* wait status once reaped */
	int killed;      /* we killed it (timeout, or its peer already failed) */
	int remote;      /* --peer: a server on the peer host; fd[0] is the control connection */
};

/* Running: a process not yet reaped, or a remote server whose control
 * connection is still open. */
static int running(const struct worker *w)
{
	return w->remote ? w->fd[0] >= 0 : w->pid > 0;
}

static void child_exec(int out, int err, const char *role, const struct bench_params *p,
		       unsigned port, int cpu, pid_t parent, char *const env[], const struct bench_where *w)
{
	if (cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	char rolearg[16], kind[16], size[32], count[32], warmup[32], duration[32], conns[16], ports[16], hold[8];
	snprintf(rolearg, sizeof(rolearg), "%s", role);
	snprintf(kind, sizeof(kind), "%s", bench_kind_name(p->kind));
	snprintf(size, sizeof(size), "%zu", p->size);
	snprintf(count, sizeof(count), "%ld", p->count);
	snprintf(warmup, sizeof(warmup), "%ld", p->warmup);
	snprintf(duration, sizeof(duration), "%.6g", p->duration);
	snprintf(conns, sizeof(conns), "%d", p->conns);
	snprintf(hold, sizeof(hold), "%d", p->hold ? 1 : 0);
	snprintf(ports, sizeof(ports), "%u", port);
	char addr[64];
	snprintf(addr, sizeof(addr), "%s", w->addr);
	char *argv[] = { "sockswitch", "bench-worker", "--role", rolearg,
			 "--case", kind, "--size", size,
			 "--count", count, "--warmup", warmup, "--duration", duration,
			 "--conns", conns, "--hold", hold, "--addr", addr, port ? "--port" : NULL, ports, NULL };

	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		_exit(127);
	/* A worker must not outlive an interrupted bench. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	if (bench_netns_enter(w, !strcmp(role, "client")) < 0) {
		dprintf(2, "cannot enter the %s's network namespace: %s\n", role, strerror(errno));
		_exit(127);
	}
	/* Re-executing ourselves is what lets LD_PRELOAD (in env) take effect. */
	execve("/proc/self/exe", argv, env);
	dprintf(2, "cannot execute /proc/self/exe: %s\n", strerror(errno));
	_exit(127);
}

int bench_worker_spawn(const char *role, const struct bench_params *p, unsigned port, int cpu,
			 char *const env[], const struct bench_where *where, int fds[2])
{
	int out[2], err[2];
	if (pipe2(out, O_CLOEXEC) < 0)
		return -1;
	if (pipe2(err, O_CLOEXEC) < 0) {
		close(out[0]);
		close(out[1]);
		return -1;
	}
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		child_exec(out[1], err[1], role, p, port, cpu, parent, env, where);
	close(out[1]);
	close(err[1]);
	if (pid < 0) {
		close(out[0]);
		close(err[0]);
		return -1;
	}
	fds[0] = out[0];
	fds[1] = err[0];
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	return pid;
}

static int spawn(struct worker *w, const char *role, const struct bench_params *p,
		 unsigned port, int cpu, char *const env[], const struct bench_where *where)
{
	memset(w, 0, sizeof(*w));
	w->role = role;
	w->fd[0] = w->fd[1] = -1;
	pid_t pid = bench_worker_spawn(role, p, port, cpu, env, where, w->fd);
	if (pid < 0)
		return -1;
	w->pid = pid;
	return 0;
}

/* --peer: the server worker runs on the peer host, under `bench --serve`,
 * which relays its stdout and ends with "stderr LAST-LINE" and "exit N". */
static int spawn_remote(struct worker *w, const struct bench_params *p, const struct bench_where *where,
			char *err, size_t len)
{
	memset(w, 0, sizeof(*w));
	w->role = "server";
	w->remote = 1;
	w->fd[1] = -1;
	w->status = 1 << 8;  /* exit status 1 until the peer says otherwise */
	if ((w->fd[0] = bench_peer_request(where, p, err, len)) < 0)
		return -1;
	fcntl(w->fd[0], F_SETFL, O_NONBLOCK);
	return 0;
}

/* What the peer said of its worker's end, once its control connection closed. */
static void remote_ended(struct worker *w)
{
	const char *l;
	for (l = w->out; (l = strstr(l, "stderr ")); l++)
		if (l == w->out || l[-1] == '\n') {
			size_t n = strcspn(l + 7, "\n");
			snprintf(w->err, sizeof(w->err), "%.*s", (int)n, l + 7);
			w->errlen = strlen(w->err);
			break;
		}
	for (l = w->out; (l = strstr(l, "exit ")); l++)
		if (l == w->out || l[-1] == '\n') {
			int code, sig;
			if (sscanf(l + 5, "signal %d", &sig) == 1)
				w->status = sig & 0x7f;
			else if (sscanf(l + 5, "%d", &code) == 1)
				w->status = (code & 0xff) << 8;
			break;
		}
}

/* Drains whatever a worker wrote; a full stderr must never block it. */
static void drain(struct worker *w, int which)
{
	char tmp[4096];
	for (;;) {
		ssize_t n = read(w->fd[which], tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0)
			n = 0;  /* a broken control connection (--peer) ends like EOF */
		if (n == 0) {
			close(w->fd[which]);
			w->fd[which] = -1;
			return;
		}
		if (which == 0) {
			size_t room = sizeof(w->out) - 1 - w->outlen;
			size_t k = (size_t)n < room ? (size_t)n : room;
			memcpy(w->out + w->outlen, tmp, k);
			w->outlen += k;
			w->out[w->outlen] = '\0';
		} else {
			size_t keep = sizeof(w->err) - 1;
			if ((size_t)n >= keep) {
				memcpy(w->err, tmp + (size_t)n - keep, keep);
				w->errlen = keep;
			} else {
				if (w->errlen + (size_t)n > keep) {
					size_t drop = w->errlen + (size_t)n - keep;
					memmove(w->err, w->err + drop, w->errlen - drop);
					w->errlen -= drop;
				}
				memcpy(w->err + w->errlen, tmp, (size_t)n);
				w->errlen += (size_t)n;
			}
			w->err[w->errlen] = '\0';
		}
	}
}

/* Waits for output or until `until` (at most 50 ms, so exits are noticed
 * without a SIGCHLD handler), then reaps whoever has exited. */
static void pump(struct worker *ws, int n, double until)
{
	struct pollfd pfd[4];
	struct worker *owner[4];
	int which[4], k = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < 2; j++)
			if (ws[i].fd[j] >= 0) {
				pfd[k] = (struct pollfd){ .fd = ws[i].fd[j], .events = POLLIN };
				owner[k] = &ws[i];
				which[k++] = j;
			}
	double left = until - bench_now();
	int ms = left <= 0 ? 0 : left > 0.05 ? 50 : (int)(left * 1000) + 1;
	if (poll(pfd, (nfds_t)k, ms) > 0)
		for (int i = 0; i < k; i++)
			if (pfd[i].revents) {
				drain(owner[i], which[i]);
				if (owner[i]->remote && owner[i]->fd[0] < 0)
					remote_ended(owner[i]);
			}
	for (int i = 0; i < n; i++)
		if (ws[i].pid > 0 && waitpid(ws[i].pid, &ws[i].status, WNOHANG) == ws[i].pid)
			ws[i].pid = 0;
}

static int failed(const struct worker *w)
{
	return !running(w) && !(WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0);
}

static void stop(struct worker *w)
{
	if (w->remote && w->fd[0] >= 0)
		w->killed = 1;  /* closing the control connection kills it over there */
	if (w->pid > 0) {
		kill(w->pid, SIGKILL);
		w->killed = 1;
		while (waitpid(w->pid, &w->status, 0) < 0 && errno == EINTR)
			;
		w->pid = 0;
	}
	for (int j = 0; j < 2; j++)
		if (w->fd[j] >= 0) {
			drain(w, j);
			if (w->fd[j] >= 0)
				close(w->fd[j]);
			w->fd[j] = -1;
		}
}

/* The text after "key " on the worker's first complete line starting with
 * key, or NULL; a line still being written does not count. */
static const char *line_of(const struct worker *w, const char *key)
{
	size_t k = strlen(key);
	for (const char *l = w->out, *nl; (nl = strchr(l, '\n')); l = nl + 1)
		if (!strncmp(l, key, k) && l[k] == ' ')
			return l + k + 1;
	return NULL;
}

/* Copies the line starting at s (up to newline) into dst. */
static void copy_line(char *dst, size_t len, const char *s)
{
	size_t n = strcspn(s, "\n");
	snprintf(dst, len, "%.*s", (int)n, s);
}

static const char *last_err_line(const struct worker *w, char *buf, size_t len)
{
	char tmp[sizeof(w->err)];
	memcpy(tmp, w->err, w->errlen + 1);
	size_t n = strlen(tmp);
	while (n && (tmp[n - 1] == '\n' || tmp[n - 1] == ' '))
		tmp[--n] = '\0';
	const char *nl = strrchr(tmp, '\n'), *last = nl ? nl + 1 : tmp;
	size_t k = strlen(last) < len - 1 ? strlen(last) : len - 1;  /* cut, on purpose */
	memcpy(buf, last, k);
	buf[k] = '\0';
	return buf;
}

static void describe_exit(const struct worker *w, char *buf, size_t len)
{
	char last[200];
	int off;
	if (WIFSIGNALED(w->status))
		off = snprintf(buf, len, "%s worker killed by signal %d (%s)", w->role,
			       WTERMSIG(w->status), strsignal(WTERMSIG(w->status)));
	else
		off = snprintf(buf, len, "%s worker exited with status %d", w->role, WEXITSTATUS(w->status));
	if (off > 0 && (size_t)off < len && *last_err_line(w, last, sizeof(last)))
		snprintf(buf + off, len - (size_t)off, "; stderr: %s", last);
}

/* Decides from what both workers said and how they ended. */
static void verdict(struct worker *ws, int n, int timed_out, struct bench_result *out)
{
	for (int i = 0; i < n; i++) {
		const char *res = line_of(&ws[i], "result");
		if (res && !failed(&ws[i]) &&
		    sscanf(res, "%lf %lf %lf %ld %lf %lf %lf", &out->v[0], &out->v[1], &out->v[2], &out->samples,
			   &out->v[BENCH_V_WORST_P99], &out->v[BENCH_V_SLOWEST], &out->v[BENCH_V_SPREAD]) >= 4) {
			out->ok = 1;
			const struct worker *o = &ws[1 - i];
			if (n == 2 && failed(o))
				snprintf(out->note, sizeof(out->note), "%s worker %s after the %s finished",
					 o->role, o->killed ? "hung and was killed" : "failed", ws[i].role);
			return;
		}
	}
	/* both sides' words when both failed: a hung server often only says it
	 * waited in vain, and the client why */
	size_t off = 0;
	for (int i = 0; i < n && off < sizeof(out->error); i++) {
		const char *err = line_of(&ws[i], "error");
		if (err) {
			char msg[200];
			copy_line(msg, sizeof(msg), err);
			int k = snprintf(out->error + off, sizeof(out->error) - off, "%s%s: %s", off ? "; " : "",
					 ws[i].role, msg);
			off += k > 0 ? (size_t)k : 0;
		}
	}
	if (off)
		return;
	if (timed_out) {
		if (n == 1)
			snprintf(out->error, sizeof(out->error), "server worker reported no port within %.0f s; killed",
				 BENCH_WORKER_TIMEOUT_S);
		else
			snprintf(out->error, sizeof(out->error), "%s still running after %.0f s; killed",
				 ws[0].killed && ws[1].killed ? "server and client workers" :
				 ws[0].killed ? "server worker" : "client worker", BENCH_WORKER_TIMEOUT_S);
		return;
	}
	for (int i = 0; i < n; i++)
		if (failed(&ws[i]) && !ws[i].killed) {
			describe_exit(&ws[i], out->error, sizeof(out->error));
			return;
		}
	for (int i = 0; i < n; i++)
		if (ws[i].killed && n == 2) {
			snprintf(out->error, sizeof(out->error), "%s worker still running %.0f s after the %s finished; killed",
				 ws[i].role, GRACE_S, ws[1 - i].role);
			return;
		}
	snprintf(out->error, sizeof(out->error), "no result reported");
}

void bench_run_case(const struct bench_params *p, char *const env[], const int cpus[2],
		    const struct bench_where *where, struct bench_result *out)
{
	struct worker ws[2];
	double deadline = bench_now() + BENCH_WORKER_TIMEOUT_S;
	unsigned port = 0;
	int n = 1, timed_out = 0;

	memset(out, 0, sizeof(*out));
	if (where->peer_port) {
		char err[200];
		if (spawn_remote(&ws[0], p, where, err, sizeof(err)) < 0) {
			snprintf(out->error, sizeof(out->error), "%s", err);
			return;
		}
	} else if (spawn(&ws[0], "server", p, 0, cpus ? cpus[0] : -1, env, where) < 0) {
		snprintf(out->error, sizeof(out->error), "cannot start worker: %s", strerror(errno));
		return;
	}
	while (!port && running(&ws[0]) && bench_now() < deadline) {
		pump(ws, 1, deadline);
		const char *l = line_of(&ws[0], "port");
		if (l)
			port = (unsigned)strtoul(l, NULL, 10);
	}
	if (!port) {
		timed_out = running(&ws[0]);
		goto done;
	}
	if (spawn(&ws[1], "client", p, port, cpus ? cpus[1] : -1, env, where) < 0) {
		snprintf(out->error, sizeof(out->error), "cannot start worker: %s", strerror(errno));
		stop(&ws[0]);
		return;
	}
	n = 2;
	double until = deadline;
	while (running(&ws[0]) || running(&ws[1])) {
		double now = bench_now();
		if (now >= until) {
			timed_out = until == deadline;
			break;
		}
		pump(ws, 2, until);
		for (int i = 0; i < 2; i++) {
			if (failed(&ws[i]))
				stop(&ws[1 - i]); /* its peer is gone; nothing left to wait for */
			else if (!running(&ws[i]) && until == deadline)
				until = bench_now() + GRACE_S < deadline ? bench_now() + GRACE_S : deadline;
		}
	}
done:
	for (int i = 0; i < n; i++)
		stop(&ws[i]);
	verdict(ws, n, timed_out, out);
}
