/* drive.c — one run of a differential-tester program: the two endpoint
 * processes (this program again, exec'd with the environment of the run:
 * kernel TCP, or the switch preloaded), then the steps in lockstep.
 *
 * For each step the driver sends it to the process that runs it (the main
 * process, its child, or, for a thread's call, the main process that starts
 * it) and reads its lines; then every live process settles (waits for what
 * the model says has arrived).  The transcript is the lines in that order,
 * each with the step's index: one run of a program always prints the same
 * transcript on kernel TCP. */
#include "diff.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct buf {
	char *s;
	size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->s = realloc(b->s, b->cap);
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = 0;
}

static void putf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct buf *b, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof line - 1)
		n = (int)sizeof line - 1;
	if (n > 0)
		put(b, line, (size_t)n);
}

static uint64_t now_ms_(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct endpoint {
	pid_t pid;
	int cmd, cmdc, rep;       /* the driver's ends */
	bool m_alive, c_alive;
	char pend[8192];          /* read, not yet a whole line */
	size_t npend;
};

struct run {
	struct buf out;
	struct endpoint e[2];
	const char *prefix;       /* of the lines being collected */
	int slow;
	bool broken;
};

static const char *ename_(int e)
{
	static char b[32];
	snprintf(b, sizeof b, "errno %d", e);
	return e == EPIPE ? "EPIPE" : b;
}

static void status_line(struct run *r, const char *who, int st)
{
	if (WIFEXITED(st))
		putf(&r->out, "%s %s: exited with status %d\n", r->prefix, who, WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		putf(&r->out, "%s %s: killed by signal %d%s\n", r->prefix, who, WTERMSIG(st),
		     WCOREDUMP(st) ? " (core)" : "");
}

/* Read lines from endpoint k until its ".ok VALUE"; false if it broke. */
static bool collect(struct run *r, int k, long *val)
{
	struct endpoint *e = &r->e[k];
	uint64_t deadline = now_ms_() + 15000u * (unsigned)r->slow;
	for (;;) {
		/* whole lines first */
		char *nl;
		while ((nl = memchr(e->pend, '\n', e->npend))) {
			size_t len = (size_t)(nl - e->pend) + 1;
			if (len > 4 && memcmp(e->pend, ".ok ", 4) == 0) {
				if (val)
					*val = strtol(e->pend + 4, NULL, 10);
				memmove(e->pend, e->pend + len, e->npend - len);
				e->npend -= len;
				return true;
			}
			putf(&r->out, "%s ", r->prefix);
			put(&r->out, e->pend, len);
			memmove(e->pend, e->pend + len, e->npend - len);
			e->npend -= len;
		}
		if (e->npend == sizeof e->pend) { /* an overlong line */
			put(&r->out, e->pend, e->npend);
			put(&r->out, "\n", 1);
			e->npend = 0;
		}
		struct pollfd p = { e->rep, POLLIN, 0 };
		int n = poll(&p, 1, 100);
		if (n > 0) {
			ssize_t got = read(e->rep, e->pend + e->npend, sizeof e->pend - e->npend);
			if (got > 0) {
				e->npend += (size_t)got;
				continue;
			}
			if (got == 0) {
				putf(&r->out, "%s driver: %s's report pipe closed (every process of it gone)\n", r->prefix,
				     k ? "B" : "A");
				return false;
			}
		}
		int st;
		if (e->m_alive && waitpid(e->pid, &st, WNOHANG) == e->pid) {
			e->m_alive = false;
			status_line(r, k ? "B.M" : "A.M", st);
			/* its child may still answer; else this endpoint is done */
			if (!e->c_alive)
				return false;
		}
		if (now_ms_() > deadline) {
			putf(&r->out, "%s driver: no answer from %s within %d s (hung)\n", r->prefix, k ? "B" : "A",
			     15 * r->slow);
			/* DIFF_HUNG_WAIT=SEC: time to look at the hung processes (gdb -p) */
			if (getenv("DIFF_HUNG_WAIT")) {
				fprintf(stderr, "diff: hung: %s is pid %d (its process group); waiting %s s\n", k ? "B" : "A",
					(int)e->pid, getenv("DIFF_HUNG_WAIT"));
				sleep((unsigned)atoi(getenv("DIFF_HUNG_WAIT")));
			}
			return false;
		}
	}
}

static bool send_cmd(struct run *r, int k, bool to_child, const struct cmd *c)
{
	int fd = to_child ? r->e[k].cmdc : r->e[k].cmd;
	const char *p = (const char *)c;
	size_t left = sizeof *c;
	while (left) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			putf(&r->out, "%s driver: cannot reach %s.%s: %s\n", r->prefix, k ? "B" : "A", to_child ? "C" : "M",
			     ename_(errno));
			return false;
		}
		p += w;
		left -= (size_t)w;
	}
	return true;
}

static bool ask(struct run *r, int k, bool to_child, const struct cmd *c, long *val)
{
	return send_cmd(r, k, to_child, c) && collect(r, k, val);
}

static void wait_main(struct run *r, int k)
{
	struct endpoint *e = &r->e[k];
	if (!e->m_alive)
		return;
	uint64_t deadline = now_ms_() + 10000u * (unsigned)r->slow;
	int st;
	pid_t w;
	while ((w = waitpid(e->pid, &st, WNOHANG)) == 0 && now_ms_() < deadline)
		usleep(500);
	if (w == e->pid) {
		status_line(r, k ? "B.M" : "A.M", st);
	} else {
		putf(&r->out, "%s %s: still alive %d s after exit\n", r->prefix, k ? "B.M" : "A.M", 10 * r->slow);
		r->broken = true;
	}
	e->m_alive = false;
}

static pid_t start_endpoint(const struct run_env *env, int k, int fds[3], int close_fds[], int nclose, pid_t pgid)
{
	pid_t p = fork();
	if (p != 0)
		return p;
	setpgid(0, pgid);
	for (int i = 0; i < nclose; i++)
		close(close_fds[i]);
	if (env->netns[k]) {
		int ns = open(env->netns[k], O_RDONLY | O_CLOEXEC);
		if (ns < 0 || setns(ns, CLONE_NEWNET) < 0) {
			dprintf(2, "diff: setns %s: %s\n", env->netns[k], strerror(errno));
			_exit(5);
		}
		close(ns);
	}
	if (env->errfile) {
		int f = open(env->errfile, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (f >= 0) {
			dup2(f, 2);
			close(f);
		}
	}
	char a[3][16];
	for (int i = 0; i < 3; i++)
		snprintf(a[i], sizeof a[i], "%d", fds[i]);
	char *argv[] = { (char *)"ssw_diff", (char *)"__ep", (char *)(k ? "B" : "A"), a[0], a[1], a[2], NULL };
	execve(env->self, argv, env->envp);
	dprintf(2, "diff: exec %s: %s\n", env->self, strerror(errno));
	_exit(5);
}

int diff_run(const struct prog *p, const struct run_env *env, char **out)
{
	struct run r;
	memset(&r, 0, sizeof r);
	r.slow = env->slow > 0 ? env->slow : 1;
	r.prefix = "  -";
	struct annot *an = calloc((size_t)p->n + 1, sizeof *an);
	int bad = -1;
	if (!diff_model(p, an, &bad)) {
		putf(&r.out, "the model refuses step %d\n", bad);
		free(an);
		*out = r.out.s;
		return -1;
	}
	/* pipes: per endpoint, commands to main, to its child, reports back */
	int pc[2][2], pcc[2][2], pr[2][2];
	for (int k = 0; k < 2; k++)
		if (pipe2(pc[k], O_CLOEXEC) < 0 || pipe2(pcc[k], O_CLOEXEC) < 0 || pipe2(pr[k], O_CLOEXEC) < 0) {
			perror("pipe");
			exit(2);
		}
	pid_t pgid = 0;
	for (int k = 0; k < 2; k++) {
		/* the endpoint's own ends survive its exec; every other end is closed */
		int mine[3] = { fcntl(pc[k][0], F_DUPFD, 10), fcntl(pcc[k][0], F_DUPFD, 10), fcntl(pr[k][1], F_DUPFD, 10) };
		int others[12], no = 0;
		for (int j = 0; j < 2; j++) {
			others[no++] = pc[j][1];
			others[no++] = pcc[j][1];
			others[no++] = pr[j][0];
		}
		pid_t pid = start_endpoint(env, k, mine, others, no, pgid);
		for (int i = 0; i < 3; i++)
			close(mine[i]);
		if (pid < 0) {
			perror("fork");
			exit(2);
		}
		if (!pgid)
			pgid = pid;
		setpgid(pid, pgid);
		r.e[k].pid = pid;
		r.e[k].m_alive = true;
	}
	for (int k = 0; k < 2; k++) {
		close(pc[k][0]);
		close(pcc[k][0]);
		close(pr[k][1]);
		r.e[k].cmd = pc[k][1];
		r.e[k].cmdc = pcc[k][1];
		r.e[k].rep = pr[k][0];
	}

	struct cmd c;
	memset(&c, 0, sizeof c);
	c.slow = r.slow;
	c.v6 = p->v6;
	c.lopt = p->lopt;
	c.copt = p->copt;
	c.nb_connect = p->nb_connect;
	c.acc4_nb = p->acc4_nb;
	c.keep_listener = p->keep_listener;
	/* light settle trusts a returned send to be in the ring; a connection
	 * shared by fork without shared context (SOCKSWITCH_SHARED_CONTEXT=0)
	 * stages sends while the peer's control swap suspends it
	 * (session_stage.c): they reach the ring at its RESUME, so the
	 * settle counts bytes (soak seed 866200175) */
	const char *sc = getenv("SOCKSWITCH_SHARED_CONTEXT");
	c.light = p->light && env->switched && !(sc && !strcmp(sc, "0"));
	if (env->addr)
		snprintf(c.addr, sizeof c.addr, "%s", env->addr);
	long port = 0;
	int rc = 0;
	c.type = CMD_LISTEN;
	if (!ask(&r, 0, false, &c, &port))
		goto broken;
	c.type = CMD_CONNECT;
	c.arg = port;
	if (!ask(&r, 1, false, &c, NULL))
		goto broken;
	c.type = CMD_ACCEPT;
	if (!ask(&r, 0, false, &c, NULL))
		goto broken;

	long fill_total[2] = { 0, 0 };
	char pfx[16], desc[512];
	bool times = getenv("DIFF_TIMES") != NULL;
	for (int i = 0; i < p->n; i++) {
		const struct step *s = &p->s[i];
		uint64_t t_step = now_ms_();
		snprintf(pfx, sizeof pfx, "%3u", s->index);
		r.prefix = pfx;
		diff_describe(s, desc, sizeof desc);
		putf(&r.out, "%s --- %s\n", pfx, desc);
		memset(&c.step, 0, sizeof c.step);
		c.type = CMD_EXEC;
		c.step = *s;
		c.extra = an[i].extra;
		c.arg = 0;
		long v = 0;
		if (s->op == OP_XFER) {
			c.arg = 0;
			if (!send_cmd(&r, s->ep, s->actor == AC_C, &c))
				goto broken;
			c.arg = 1;
			if (!send_cmd(&r, 1 - s->ep, s->b == AC_C, &c))
				goto broken;
			if (!collect(&r, s->ep, NULL) || !collect(&r, 1 - s->ep, NULL))
				goto broken;
		} else {
			if (s->op == OP_DRAIN_FILL)
				c.arg = fill_total[1 - s->ep] + an[i].extra;
			if (!ask(&r, s->ep, s->actor == AC_C, &c, &v))
				goto broken;
		}
		if (s->op == OP_FILL)
			fill_total[s->ep] = v;
		if (s->op == OP_FORK)
			r.e[s->ep].c_alive = true;
		if (s->op == OP_EXIT && s->actor == AC_C)
			r.e[s->ep].c_alive = false;
		/* settle */
		for (int k = 0; k < 2; k++) {
			const struct settle *st = &an[i].st[k];
			if (st->main_exit)
				wait_main(&r, k);
			c.type = CMD_SETTLE;
			c.st = *st;
			if (r.e[k].m_alive && !ask(&r, k, false, &c, NULL))
				goto broken;
			if (st->fd_by == 2 && r.e[k].c_alive && !ask(&r, k, true, &c, NULL))
				goto broken;
		}
		if (times && now_ms_() - t_step > 20)
			fprintf(stderr, "step %u (%s): %llu ms\n", s->index, desc, (unsigned long long)(now_ms_() - t_step));
	}
	r.prefix = "end";
	c.type = CMD_SETTLE;
	memset(&c.st, 0, sizeof c.st);
	c.st.at_end = 1;
	for (int k = 0; k < 2; k++)
		if (r.e[k].m_alive && !ask(&r, k, false, &c, NULL))
			goto broken;
	/* every process is told before any is waited for: an exit may wait for
	 * its peer to take what it sent (fabric, README Limits) */
	c.type = CMD_QUIT;
	for (int k = 0; k < 2; k++) {
		if (r.e[k].c_alive && !ask(&r, k, true, &c, NULL))
			goto broken;
		r.e[k].c_alive = false;
		if (r.e[k].m_alive && !ask(&r, k, false, &c, NULL))
			goto broken;
	}
	for (int k = 0; k < 2; k++)
		wait_main(&r, k);
	if (r.broken)
		rc = -1;
	goto done;
broken:
	rc = -1;
done:
	if (pgid > 0)
		kill(-pgid, SIGKILL);
	for (int k = 0; k < 2; k++) {
		if (r.e[k].m_alive)
			waitpid(r.e[k].pid, NULL, 0);
		close(r.e[k].cmd);
		close(r.e[k].cmdc);
		close(r.e[k].rep);
	}
	while (waitpid(-1, NULL, WNOHANG) > 0)
		; /* orphans handed to us (a child subreaper) */
	free(an);
	if (!r.out.s)
		put(&r.out, "", 0);
	*out = r.out.s;
	return rc;
}
