/* sem.c — TCP semantics scenarios: what an application observes on a
 * connected TCP socket, printed as a deterministic transcript.
 *
 *   sem LIST        scenario names, one a line
 *   sem HELP        names with a one-line description
 *   sem NAME        run one scenario, print its transcript on stdout
 *
 * t_semantics.sh runs every scenario once on kernel TCP and once under the
 * switch (LD_PRELOAD) and requires identical transcripts: the kernel is the
 * oracle.  A transcript holds return values, errno names, bytes, poll/epoll
 * revents — never ports, fd numbers, pids or timings.  Where the kernel's
 * own behaviour would be racy the processes synchronise over pipes (which
 * the switch never touches) and, where a packet has to travel first, sleep
 * a little (loopback delivery is synchronous; the sleeps are margins).
 *
 * Processes: most scenarios fork a client (child) and run the server in the
 * parent.  Each process's lines are prefixed with its role; a child's lines
 * travel to its parent through a report pipe and appear in the transcript
 * where the parent reaps it, followed by its exit status.  Watchdogs
 * (alarm) make every process give up (exit 3, "WATCHDOG" line) instead of
 * hanging.  Exit status: 0 ran to completion, 1 a set-up step or a child
 * failed, 3 watchdog.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "readfull.h"

#include "transcript.h"

#define WD_PARENT 20 /* seconds; a child gives up first so its lines survive */
#define WD_CHILD 15
#define SETTLE_US 50000 /* margin for a segment / RST to cross loopback */

/* ------------------------------------------------------------ transcript
 * (tests/lib/transcript.c: say, RC, errno/flag/event names, patterns) */

static int bad;             /* a set-up step or a child failed */
static const char *self_exe = "/proc/self/exe";
static void set_listen_opt(int fd);

/* ------------------------------------------------------------ processes */

typedef void (*proc_fn)(void *);
struct proc {
	pid_t pid;
	int rep;
	const char *role;
};

/* Fork a process that runs fn(arg) with its own role and watchdog; its
 * lines go to the parent through a pipe (survives exec: no CLOEXEC). */
static struct proc spawn(const char *r, proc_fn fn, void *arg)
{
	struct proc p = { -1, -1, r };
	int fds[2];
	if (pipe(fds) < 0)
		die("pipe: %s", ename(errno));
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", ename(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fds[0]);
		if (rep_fd >= 0)
			close(rep_fd);
		rep_fd = fds[1];
		role = r;
		nkids = 0;
		bad = 0;
		alarm(WD_CHILD);
		fn(arg);
		exit(bad ? 1 : 0); /* atexit handlers run, as in most programs */
	}
	close(fds[1]);
	p.pid = pid;
	p.rep = fds[0];
	int slot = 0; /* a reaped child's slot is free again */
	while (slot < nkids && kids[slot] > 0)
		slot++;
	if (slot < (int)(sizeof kids / sizeof kids[0])) {
		kids[slot] = pid;
		if (slot == nkids)
			nkids++;
	}
	return p;
}

/* Collect a child's lines (into our own transcript) and its wait status. */
static int reap_status(struct proc *p)
{
	char b[4096];
	for (;;) {
		ssize_t n = read(p->rep, b, sizeof b);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		emit(b, (size_t)n);
	}
	close(p->rep);
	int st = 0;
	while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
		;
	for (int i = 0; i < nkids; i++)
		if (kids[i] == p->pid)
			kids[i] = 0;
	p->pid = -1;
	return st;
}

/* Collect a child's lines and its exit status (into our own transcript). */
static void reap(struct proc *p)
{
	if (p->pid <= 0)
		return;
	int st = reap_status(p);
	if (WIFEXITED(st)) {
		say("%s exited with status %d", p->role, WEXITSTATUS(st));
		if (WEXITSTATUS(st))
			bad = 1;
	} else if (WIFSIGNALED(st)) {
		say("%s killed by %s", p->role, signame(WTERMSIG(st)));
		if (WTERMSIG(st) != SIGKILL && WTERMSIG(st) != SIGPIPE)
			bad = 1;
	}
}

/* Pipes between the two roles of a scenario (plain kernel pipes). */
static int sync_in = -1, sync_out = -1;

static void tell_buf(const void *p, size_t n)
{
	write_all_fd(sync_out, p, n);
}
static void tell(void)
{
	tell_buf("!", 1);
}
static void await_buf(void *p, size_t n)
{
	if (read_full(sync_in, p, n) < 0)
		die("peer process went away");
}
static void await(void)
{
	char c;
	await_buf(&c, 1);
}

/* ------------------------------------------------------------ sockets */

static int listener(int fam, bool any, struct addr *out)
{
	int fd = socket(fam, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", ename(errno));
	int one = 1, zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct addr a;
	loopback_of(fam, 0, &a);
	if (any) {
		if (fam == AF_INET) {
			((struct sockaddr_in *)&a.ss)->sin_addr.s_addr = htonl(INADDR_ANY);
		} else {
			((struct sockaddr_in6 *)&a.ss)->sin6_addr = in6addr_any;
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
		}
	}
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0)
		die("bind: %s", ename(errno));
	set_listen_opt(fd);
	if (listen(fd, 64) < 0)
		die("listen: %s", ename(errno));
	get_name(fd, false, out);
	return fd;
}

static int acc(int lfd)
{
	int fd;
	do
		fd = accept(lfd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		die("accept: %s", ename(errno));
	return fd;
}

static int conn(const struct addr *a)
{
	int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", ename(errno));
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
		die("connect: %s", ename(errno));
	return fd;
}

static ssize_t RECV(int fd, size_t n, int flags)
{
	char buf[1024];
	if (n > sizeof buf)
		n = sizeof buf;
	errno = 0;
	ssize_t r = recv(fd, buf, n, flags);
	int e = errno;
	if (r > 0)
		say("recv(%zu, %s) = %zd \"%s\"", n, flagstr(flags), r, esc(buf, (size_t)r));
	else
		say("recv(%zu, %s) = %s", n, flagstr(flags), rcs(r, e));
	errno = e;
	return r;
}

static ssize_t SEND(int fd, const char *s, int flags)
{
	size_t n = strlen(s);
	errno = 0;
	ssize_t r = send(fd, s, n, flags);
	int e = errno;
	say("send(\"%s\", %s) = %s", esc(s, n), flagstr(flags), rcs(r, e));
	errno = e;
	return r;
}

/* Read exactly n bytes (the sender's pieces may arrive together or not). */
static void recv_exact(int fd, size_t n)
{
	char buf[4096];
	size_t got = 0;
	if (n > sizeof buf)
		n = sizeof buf;
	while (got < n) {
		ssize_t r = recv(fd, buf + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			say("recv_exact(%zu): %s after %zu bytes \"%s\"", n, r == 0 ? "EOF" : ename(errno), got,
			    esc(buf, got));
			return;
		}
		got += (size_t)r;
	}
	say("recv_exact(%zu) = \"%s\"", n, esc(buf, n));
}

/* Wait (up to 5 s) until fd is readable; prints only a timeout. */
static void wait_readable(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };
	if (poll(&p, 1, 5000) != 1)
		say("wait_readable: not readable within 5 s");
}

static void EPCTL_(int ep, int fd);
static void EPW_(int ep);

/* ------------------------------------------------------------ streams */

static size_t send_stream(int fd, size_t total, uint32_t seed)
{
	size_t cap = 256 * KiB, sent = 0;
	uint8_t *b = malloc(cap);
	while (sent < total) {
		size_t n = total - sent < cap ? total - sent : cap;
		fill(b, n, sent, seed);
		size_t off = 0;
		while (off < n) {
			ssize_t w = send(fd, b + off, n - off, 0);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				say("send_stream: %s after %zu bytes", ename(errno), sent + off);
				free(b);
				return sent + off;
			}
			off += (size_t)w;
		}
		sent += n;
	}
	free(b);
	say("sent %zu bytes (pattern %u)", total, seed);
	return sent;
}

/* Receive total bytes of pattern seed starting at stream position start;
 * total == SIZE_MAX: until EOF. */
static size_t recv_stream_at(int fd, size_t total, uint32_t seed, uint64_t start)
{
	size_t cap = 64 * KiB;
	uint8_t *b = malloc(cap);
	struct rx r;
	rx_init(&r);
	while (r.got < total) {
		size_t want = total - r.got < cap ? total - r.got : cap;
		ssize_t n = recv(fd, b, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 && total == SIZE_MAX)
			break;
		if (n <= 0) {
			say("recv_stream: %s after %zu of %zu bytes", n == 0 ? "EOF" : ename(errno), r.got, total);
			break;
		}
		rx_feed(&r, b, (size_t)n, start, seed);
	}
	free(b);
	rx_say(&r, total == SIZE_MAX ? NULL : "received");
	return r.got;
}
#define recv_stream(fd, total, seed) recv_stream_at(fd, total, seed, 0)

/* ------------------------------------------------------------ pairs */

typedef void (*srv_fn)(int lfd);
typedef void (*cli_fn)(const struct addr *a);

static struct proc g_client;      /* the client process of the running pair */
static struct addr g_laddr;       /* server: the listener's own address */

struct pair_args {
	cli_fn cli;
	int in, out, x1, x2;
};

static void pair_client(void *arg)
{
	struct pair_args *p = arg;
	close(p->x1);
	close(p->x2);
	sync_in = p->in;
	sync_out = p->out;
	struct addr a;
	await_buf(&a, sizeof a);
	p->cli(&a);
}

/* Fork the client, then (so that the client does not inherit it) listen on
 * lfam (loopback, or the wildcard address with any), and give the client
 * the loopback address of family cfam with the listener's port. */
static void pair_ex(int lfam, bool any, int cfam, srv_fn srv, cli_fn cli)
{
	int sc[2], cs[2];
	if (pipe(sc) < 0 || pipe(cs) < 0)
		die("pipe: %s", ename(errno));
	role = "server";
	struct pair_args pa = { cli, sc[0], cs[1], sc[1], cs[0] };
	g_client = spawn("client", pair_client, &pa);
	close(sc[0]);
	close(cs[1]);
	sync_in = cs[0];
	sync_out = sc[1];
	int lfd = listener(lfam, any, &g_laddr);
	struct addr ca;
	loopback_of(cfam, port_of(&g_laddr), &ca);
	tell_buf(&ca, sizeof ca);
	srv(lfd);
	close(lfd);
	reap(&g_client);
	close(sync_in);
	close(sync_out);
}

static void pair(int fam, srv_fn srv, cli_fn cli)
{
	pair_ex(fam, false, fam, srv, cli);
}

/* ================================================================ scenarios */

/* ---- exchange_v4 / exchange_v6: small, 1 MiB, 8 MiB each way ----------- */

static void exchange_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 4);
	SEND(fd, "pong", 0);
	recv_stream(fd, 1 * MiB, 11);
	send_stream(fd, 1 * MiB, 12);
	recv_stream(fd, 8 * MiB, 13);
	send_stream(fd, 8 * MiB, 14);
	RECV(fd, 16, 0);
	RC("close", close(fd));
}

static void exchange_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "ping", 0);
	recv_exact(fd, 4);
	send_stream(fd, 1 * MiB, 11);
	recv_stream(fd, 1 * MiB, 12);
	send_stream(fd, 8 * MiB, 13);
	recv_stream(fd, 8 * MiB, 14);
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	RECV(fd, 16, 0);
	RC("close", close(fd));
}

static void sc_exchange_v4(void) { pair(AF_INET, exchange_srv, exchange_cli); }
static void sc_exchange_v6(void) { pair(AF_INET6, exchange_srv, exchange_cli); }

/* ---- duplex: both directions at once, nonblocking, driven by poll ------- */

static void duplex_run(int fd, uint32_t sseed, uint32_t rseed)
{
	const size_t total = 4 * MiB;
	uint8_t *sb = malloc(64 * KiB), *rb = malloc(64 * KiB);
	size_t sent = 0;
	bool eof = false, shut = false;
	struct rx r;
	rx_init(&r);
	set_nonblock(fd, true);
	while (!eof || !shut) {
		struct pollfd p = { fd, (short)((shut ? 0 : POLLOUT) | (eof ? 0 : POLLIN)), 0 };
		int n = poll(&p, 1, 5000);
		if (n <= 0) {
			say("duplex: poll = %s (sent %s, received %s)", rcs(n, errno), shut ? "all" : "part",
			    eof ? "all" : "part");
			break;
		}
		if (p.revents & (POLLERR | POLLNVAL)) {
			say("duplex: revents %s", evstr(p.revents));
			break;
		}
		if (p.revents & (POLLIN | POLLHUP)) {
			ssize_t k = recv(fd, rb, 64 * KiB, 0);
			if (k > 0)
				rx_feed(&r, rb, (size_t)k, 0, rseed);
			else if (k == 0)
				eof = true;
			else if (errno != EAGAIN) {
				say("duplex: recv %s", ename(errno));
				break;
			}
		}
		if (!shut && (p.revents & POLLOUT)) {
			size_t want = total - sent < 64 * KiB ? total - sent : 64 * KiB;
			fill(sb, want, sent, sseed);
			ssize_t k = send(fd, sb, want, 0);
			if (k > 0)
				sent += (size_t)k;
			else if (k < 0 && errno != EAGAIN) {
				say("duplex: send %s", ename(errno));
				break;
			}
			if (sent == total) {
				shutdown(fd, SHUT_WR);
				shut = true;
			}
		}
	}
	say("duplex: sent %zu, EOF %s", sent, eof ? "seen" : "NOT seen");
	rx_say(&r, "duplex: received");
	free(sb);
	free(rb);
}

static void duplex_srv(int lfd)
{
	int fd = acc(lfd);
	duplex_run(fd, 31, 32);
	close(fd);
}

static void duplex_cli(const struct addr *a)
{
	int fd = conn(a);
	duplex_run(fd, 32, 31);
	close(fd);
}

static void sc_duplex(void) { pair(AF_INET, duplex_srv, duplex_cli); }

/* ---- names_v4 / names_v6: getsockname / getpeername on both ends -------- */

static void names_srv(int lfd)
{
	struct addr acc_a, sl, sp, cl, cp, shortp;
	memset(&acc_a, 0, sizeof acc_a);
	acc_a.len = sizeof acc_a.ss;
	int fd = accept(lfd, (struct sockaddr *)&acc_a.ss, &acc_a.len);
	if (fd < 0)
		die("accept: %s", ename(errno));
	say("accept address: %s", adesc(&acc_a));
	get_name(fd, false, &sl);
	get_name(fd, true, &sp);
	say("getsockname: %s", adesc(&sl));
	say("getpeername: %s", adesc(&sp));
	/* a too-short buffer: truncated, the real length reported */
	memset(&shortp, 0, sizeof shortp);
	shortp.len = 4;
	RC("getpeername(len 4)", getpeername(fd, (struct sockaddr *)&shortp.ss, &shortp.len));
	say("getpeername(len 4): len now %u, family %s", (unsigned)shortp.len,
	    shortp.ss.ss_family == sp.ss.ss_family ? "matches" : "differs");
	await_buf(&cl, sizeof cl);
	await_buf(&cp, sizeof cp);
	say("accept address == server getpeername: %s", same_ep(&acc_a, &sp) ? "consistent" : "MISMATCH");
	say("client getsockname == server getpeername: %s", same_ep(&cl, &sp) ? "consistent" : "MISMATCH");
	say("client getpeername == server getsockname: %s", same_ep(&cp, &sl) ? "consistent" : "MISMATCH");
	say("server getsockname == listener address: %s", same_ep(&sl, &g_laddr) ? "consistent" : "MISMATCH");
	say("client local port differs from listener port: %s", port_of(&cl) != port_of(&g_laddr) ? "yes" : "no");
	tell();
	await();
	close(fd);
}

static void names_cli(const struct addr *a)
{
	int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	struct addr l, p;
	memset(&p, 0, sizeof p);
	p.len = sizeof p.ss;
	RC("getpeername before connect", getpeername(fd, (struct sockaddr *)&p.ss, &p.len));
	RC("connect", connect(fd, (const struct sockaddr *)&a->ss, a->len));
	get_name(fd, false, &l);
	get_name(fd, true, &p);
	say("getsockname: %s", adesc(&l));
	say("getpeername: %s", adesc(&p));
	say("getpeername == address connected to: %s", same_ep(&p, a) ? "consistent" : "MISMATCH");
	tell_buf(&l, sizeof l);
	tell_buf(&p, sizeof p);
	await();
	RC("close", close(fd));
	tell();
}

static void sc_names_v4(void) { pair(AF_INET, names_srv, names_cli); }
static void sc_names_v6(void) { pair(AF_INET6, names_srv, names_cli); }

/* ---- v4mapped / wildcard: dual-stack and wildcard listeners ------------- */

static void any_srv(int lfd)
{
	struct addr acc_a, sl, sp, cl, cp;
	memset(&acc_a, 0, sizeof acc_a);
	acc_a.len = sizeof acc_a.ss;
	say("listener: %s", adesc(&g_laddr));
	int fd = accept(lfd, (struct sockaddr *)&acc_a.ss, &acc_a.len);
	if (fd < 0)
		die("accept: %s", ename(errno));
	say("accept address: %s", adesc(&acc_a));
	get_name(fd, false, &sl);
	get_name(fd, true, &sp);
	say("getsockname: %s", adesc(&sl));
	say("getpeername: %s", adesc(&sp));
	await_buf(&cl, sizeof cl);
	await_buf(&cp, sizeof cp);
	say("client getsockname == server getpeername: %s", same_ep(&cl, &sp) ? "consistent" : "MISMATCH");
	say("client getpeername == server getsockname: %s", same_ep(&cp, &sl) ? "consistent" : "MISMATCH");
	recv_exact(fd, 5);
	SEND(fd, "world", 0);
	RECV(fd, 16, 0);
	close(fd);
}

static void any_cli(const struct addr *a)
{
	int fd = conn(a);
	struct addr l, p;
	get_name(fd, false, &l);
	get_name(fd, true, &p);
	say("getsockname: %s", adesc(&l));
	say("getpeername: %s", adesc(&p));
	tell_buf(&l, sizeof l);
	tell_buf(&p, sizeof p);
	SEND(fd, "hello", 0);
	recv_exact(fd, 5);
	close(fd);
}

static void sc_v4mapped(void) { pair_ex(AF_INET6, true, AF_INET, any_srv, any_cli); }
static void sc_wildcard_v4(void) { pair_ex(AF_INET, true, AF_INET, any_srv, any_cli); }
static void sc_wildcard_v6(void) { pair_ex(AF_INET6, true, AF_INET6, any_srv, any_cli); }

/* ---- errno_kept: a connect that succeeds leaves errno as it was ---------- */

static void errno_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 5);
	close(fd);
}

/* a wildcard listener: the switch looks for the specific rendezvous name
 * first, which is not there (its connect fails, ECONNREFUSED) */
static void errno_cli(const struct addr *a)
{
	int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	errno = EDOM;
	int rc = connect(fd, (const struct sockaddr *)&a->ss, a->len);
	say("connect = %d, errno after it: %s", rc, ename(errno));
	errno = EDOM;
	rc = (int)send(fd, "hello", 5, 0);
	say("send = %d, errno after it: %s", rc, ename(errno));
	close(fd);
}

static void sc_errno_kept(void) { pair_ex(AF_INET, true, AF_INET, errno_srv, errno_cli); }

/* ---- self_connect: one thread connects to its own listener, then accepts */

static void sc_self_connect(void)
{
	role = "proc";
	struct addr la, cl, ap;
	int lfd = listener(AF_INET, false, &la);
	int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	RC("connect (nonblocking)", connect(c, (struct sockaddr *)&la.ss, la.len));
	POLL1(c, POLLOUT, 5000);
	GETINT(c, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	int a = accept(lfd, NULL, NULL);
	say("accept: %s", a >= 0 ? "ok" : ename(errno));
	if (a < 0)
		die("accept");
	get_name(c, false, &cl);
	get_name(a, true, &ap);
	say("client getsockname == accepted getpeername: %s", same_ep(&cl, &ap) ? "consistent" : "MISMATCH");
	SEND(c, "hello", 0);
	recv_exact(a, 5);
	SEND(a, "world", 0);
	POLL1(c, POLLIN, 5000);
	RECV(c, 64, 0);
	RECV(c, 64, 0);
	RC("close client", close(c));
	RECV(a, 64, 0);
	RC("close accepted", close(a));
	close(lfd);
}

/* ---- nb_connect: EINPROGRESS, POLLOUT, SO_ERROR 0, then data ----------- */

static void nbc_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 4);
	SEND(fd, "reply", 0);
	RECV(fd, 16, 0);
	close(fd);
}

static void nbc_cli(const struct addr *a)
{
	int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	set_nonblock(fd, true);
	RC("connect (nonblocking)", connect(fd, (const struct sockaddr *)&a->ss, a->len));
	POLL1(fd, POLLOUT, 5000);
	GETINT(fd, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	RC("connect again", connect(fd, (const struct sockaddr *)&a->ss, a->len));
	RC("connect a third time", connect(fd, (const struct sockaddr *)&a->ss, a->len));
	struct addr p;
	get_name(fd, true, &p);
	say("getpeername: %s", adesc(&p));
	set_nonblock(fd, false);
	SEND(fd, "data", 0);
	recv_exact(fd, 5);
	RC("close", close(fd));
}

static void sc_nb_connect(void) { pair(AF_INET, nbc_srv, nbc_cli); }

/* ---- refused_v4 / refused_v6: nobody listens → ECONNREFUSED ------------- */

static void refused(int fam)
{
	role = "proc";
	struct addr hole, la;
	/* a bound, not listening socket keeps the port ours and closed */
	int holder = socket(fam, SOCK_STREAM, 0);
	loopback_of(fam, 0, &hole);
	if (bind(holder, (struct sockaddr *)&hole.ss, hole.len) < 0)
		die("bind: %s", ename(errno));
	get_name(holder, false, &hole);

	int fd = socket(fam, SOCK_STREAM, 0);
	RC("connect (blocking)", connect(fd, (struct sockaddr *)&hole.ss, hole.len));
	GETINT(fd, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	int nb = socket(fam, SOCK_STREAM | SOCK_NONBLOCK, 0);
	long r = RC("connect (nonblocking)", connect(nb, (struct sockaddr *)&hole.ss, hole.len));
	if (r < 0 && errno == EINPROGRESS)
		POLL1(nb, POLLOUT, 5000);
	GETINT(nb, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	GETINT(nb, SOL_SOCKET, SO_ERROR, "SO_ERROR again");
	struct addr p;
	memset(&p, 0, sizeof p);
	p.len = sizeof p.ss;
	RC("getpeername", getpeername(nb, (struct sockaddr *)&p.ss, &p.len));
	RC("send", send(nb, "x", 1, MSG_NOSIGNAL));
	close(nb);

	/* the refused socket may connect again, to a listener this time */
	int lfd = listener(fam, false, &la);
	RC("connect again, to a listener", connect(fd, (struct sockaddr *)&la.ss, la.len));
	int a = acc(lfd);
	SEND(fd, "hi", 0);
	recv_exact(a, 2);
	close(a);
	RECV(fd, 8, 0);
	close(fd);
	close(lfd);
	close(holder);
}

static void sc_refused_v4(void) { refused(AF_INET); }
static void sc_refused_v6(void) { refused(AF_INET6); }

/* ---- peek ------------------------------------------------------------- */

/* ---- peek_sends: a peek looks past the first send's bytes -------------- */

static void peek_sends_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "ab", 0);
	SEND(fd, "cd", 0);
	SEND(fd, "ef", 0);
	tell();
	await();
	close(fd);
}

static void peek_sends_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	wait_readable(fd);
	usleep(SETTLE_US);
	RECV(fd, 5, MSG_PEEK);
	RECV(fd, 100, MSG_PEEK | MSG_DONTWAIT);
	RECV(fd, 1, 0);
	RECV(fd, 100, MSG_PEEK);
	RECV(fd, 100, 0);
	tell();
	close(fd);
}

static void sc_peek_sends(void) { pair(AF_INET, peek_sends_srv, peek_sends_cli); }

static void peek_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "abcdef", 0);
	tell();
	await();
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	tell();
	await();
	close(fd);
}

static void peek_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	wait_readable(fd);
	RECV(fd, 3, MSG_PEEK);
	RECV(fd, 100, MSG_PEEK);
	FIONREAD_(fd);
	RECV(fd, 4, 0);
	RECV(fd, 100, MSG_PEEK);
	RECV(fd, 100, 0);
	RECV(fd, 100, MSG_PEEK | MSG_DONTWAIT);
	tell();
	await();
	wait_readable(fd);
	RECV(fd, 100, MSG_PEEK);
	RECV(fd, 100, 0);
	tell();
	close(fd);
}

static void sc_peek(void) { pair(AF_INET, peek_srv, peek_cli); }

/* ---- waitall: MSG_WAITALL across several small sends, and at EOF -------- */

static void waitall_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	for (int i = 0; i < 10; i++) {
		char b[11];
		memset(b, 'a' + i, 10);
		b[10] = 0;
		if (send(fd, b, 10, 0) != 10)
			say("send %d failed", i);
		usleep(20000);
	}
	say("sent 10 x 10 bytes, 20 ms apart");
	await();
	SEND(fd, "tail!", 0);
	RC("close", close(fd));
}

static void waitall_cli(const struct addr *a)
{
	int fd = conn(a);
	char buf[200];
	tell();
	ssize_t r = recv(fd, buf, 100, MSG_WAITALL);
	say("recv(100, MSG_WAITALL) = %s \"%s\"", rcs(r, errno), r > 0 ? esc(buf, (size_t)r) : "");
	if (r == 100) {
		bool ok = true;
		for (int i = 0; i < 100; i++)
			ok &= buf[i] == 'a' + i / 10;
		say("content in order: %s", ok ? "yes" : "no");
	}
	tell();
	r = recv(fd, buf, 100, MSG_WAITALL);
	say("recv(100, MSG_WAITALL) at EOF = %s \"%s\"", rcs(r, errno), r > 0 ? esc(buf, (size_t)r) : "");
	RECV(fd, 100, MSG_WAITALL);
	close(fd);
}

static void sc_waitall(void) { pair(AF_INET, waitall_srv, waitall_cli); }

/* ---- dontwait: MSG_DONTWAIT, O_NONBLOCK, FIONBIO ------------------------ */

static void dontwait_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	SEND(fd, "x", 0);
	tell();
	await();
	recv_exact(fd, 3);
	await();
	usleep(100000);
	SEND(fd, "late", 0);
	await();
	close(fd);
}

static void dontwait_cli(const struct addr *a)
{
	int fd = conn(a);
	char b[16];
	RECV(fd, 10, MSG_DONTWAIT);
	tell();
	await();
	wait_readable(fd);
	RECV(fd, 10, MSG_DONTWAIT);
	RECV(fd, 10, MSG_DONTWAIT);
	SEND(fd, "abc", MSG_DONTWAIT);
	tell();
	set_nonblock(fd, true);
	RC("read (O_NONBLOCK, empty)", read(fd, b, sizeof b));
	RC("recv (O_NONBLOCK, empty)", recv(fd, b, sizeof b, 0));
	int zero = 0, one = 1;
	RC("ioctl(FIONBIO, 0)", ioctl(fd, FIONBIO, &zero));
	say("O_NONBLOCK now: %s", fcntl(fd, F_GETFL) & O_NONBLOCK ? "set" : "clear");
	tell();
	RECV(fd, 10, 0); /* blocks ~100 ms until "late" */
	RC("ioctl(FIONBIO, 1)", ioctl(fd, FIONBIO, &one));
	say("O_NONBLOCK now: %s", fcntl(fd, F_GETFL) & O_NONBLOCK ? "set" : "clear");
	RECV(fd, 10, 0);
	tell();
	close(fd);
}

static void sc_dontwait(void) { pair(AF_INET, dontwait_srv, dontwait_cli); }

/* ---- rcvtimeo / sndtimeo ----------------------------------------------- */

static void rcvtimeo_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	SEND(fd, "data", 0);
	await();
	close(fd);
}

static void rcvtimeo_cli(const struct addr *a)
{
	int fd = conn(a);
	struct timeval tv = { 0, 200000 };
	RC("setsockopt(SO_RCVTIMEO, 200ms)", setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
	struct timeval g = { 9, 9 };
	socklen_t gl = sizeof g;
	getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &g, &gl);
	say("getsockopt(SO_RCVTIMEO) = %ld.%06ld", (long)g.tv_sec, (long)g.tv_usec);
	uint64_t t0 = now_ms();
	RECV(fd, 10, 0);
	uint64_t dt = now_ms() - t0;
	say("waited >= 150 ms: %s, < 2 s: %s", dt >= 150 ? "yes" : "no", dt < 2000 ? "yes" : "no");
	tell();
	RECV(fd, 10, 0);
	tell();
	close(fd);
}

static void sc_rcvtimeo(void) { pair(AF_INET, rcvtimeo_srv, rcvtimeo_cli); }

/* Accept, wait for the sender to fill the window, drain the stream (its
 * bytes checked against pattern `seed`), compare with the sender's total. */
static void drain_compare_srv(int lfd, int seed)
{
	int fd = acc(lfd);
	await();
	size_t got = recv_stream_at(fd, SIZE_MAX, seed, 0);
	size_t sent;
	await_buf(&sent, sizeof sent);
	say("received total == sender's total: %s", got == sent ? "yes" : "no");
	tell();
	close(fd);
}

static void fill_drain_srv(int lfd) { drain_compare_srv(lfd, 21); }

static void sndtimeo_cli(const struct addr *a)
{
	int fd = conn(a);
	struct timeval tv = { 0, 200000 };
	RC("setsockopt(SO_SNDTIMEO, 200ms)", setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv));
	uint8_t *b = malloc(64 * KiB);
	size_t total = 0;
	int err = 0;
	uint64_t last = 0;
	while (total < 512 * MiB) {
		fill(b, 64 * KiB, total, 21);
		uint64_t t0 = now_ms();
		ssize_t w = send(fd, b, 64 * KiB, 0);
		last = now_ms() - t0;
		if (w < 0) {
			err = errno;
			break;
		}
		total += (size_t)w;
	}
	say("blocking send with SO_SNDTIMEO eventually returned: %s", err ? rcs(-1, err) : "never failed");
	say("that call waited >= 150 ms: %s", last >= 150 ? "yes" : "no");
	tell();
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	tell_buf(&total, sizeof total);
	await();
	free(b);
	close(fd);
}

static void sc_sndtimeo(void) { pair(AF_INET, fill_drain_srv, sndtimeo_cli); }

/* ---- nb_fill: a nonblocking sender fills the window -------------------- */

static void nb_fill_cli(const struct addr *a)
{
	int fd = conn(a);
	set_nonblock(fd, true);
	uint8_t *b = malloc(64 * KiB);
	size_t total = 0;
	bool eagain = false;
	while (total < 512 * MiB) {
		fill(b, 64 * KiB, total, 21);
		ssize_t w = send(fd, b, 64 * KiB, 0);
		if (w < 0) {
			if (errno == EAGAIN)
				eagain = true;
			else
				say("send: %s", ename(errno));
			break;
		}
		total += (size_t)w;
	}
	say("got EAGAIN: %s", eagain ? "yes" : "no");
	POLL1(fd, POLLOUT, 0);
	tell(); /* the reader starts draining */
	POLL1(fd, POLLOUT, 5000);
	size_t target = total + 2 * MiB;
	bool stuck = false;
	while (total < target) {
		struct pollfd p = { fd, POLLOUT, 0 };
		if (poll(&p, 1, 5000) != 1) {
			stuck = true;
			break;
		}
		fill(b, 64 * KiB, total, 21);
		ssize_t w = send(fd, b, 64 * KiB, 0);
		if (w > 0)
			total += (size_t)w;
		else if (errno != EAGAIN) {
			say("send: %s", ename(errno));
			break;
		}
	}
	say("sent 2 MiB more while the reader drains: %s", stuck ? "STUCK" : "yes");
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	tell_buf(&total, sizeof total);
	await();
	free(b);
	close(fd);
}

static void sc_nb_fill(void) { pair(AF_INET, fill_drain_srv, nb_fill_cli); }

/* ---- fionread ---------------------------------------------------------- */

static void fionread_srv(int lfd)
{
	int fd = acc(lfd);
	char b[1000];
	for (int i = 0; i < 1000; i++)
		b[i] = (char)('A' + i % 26);
	await();
	RC("send(1000 bytes)", send(fd, b, sizeof b, 0));
	SEND(fd, "xyz", 0);
	tell();
	await();
	RC("close", close(fd));
	tell();
}

static void fionread_cli(const struct addr *a)
{
	int fd = conn(a);
	FIONREAD_(fd);
	tell();
	await();
	usleep(100000);
	FIONREAD_(fd);
	IOCTL_INT(fd, SIOCINQ, "SIOCINQ");
	recv_exact(fd, 500);
	FIONREAD_(fd);
	recv_exact(fd, 503);
	FIONREAD_(fd);
	tell();
	await();
	wait_readable(fd);
	FIONREAD_(fd);
	RECV(fd, 10, 0);
	close(fd);
}

static void sc_fionread(void) { pair(AF_INET, fionread_srv, fionread_cli); }

/* ---- zero_len ---------------------------------------------------------- */

static void zero_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	SEND(fd, "abc", 0);
	tell();
	await();
	wait_readable(fd);
	RECV(fd, 10, MSG_DONTWAIT);
	close(fd);
}

static void zero_cli(const struct addr *a)
{
	int fd = conn(a);
	char b[8];
	RECV(fd, 0, MSG_DONTWAIT);
	SEND(fd, "", 0);
	RC("write(0 bytes)", write(fd, b, 0));
	tell();
	await();
	wait_readable(fd);
	RECV(fd, 0, 0);
	RECV(fd, 0, MSG_DONTWAIT);
	RC("read(0 bytes)", read(fd, b, 0));
	RECV(fd, 10, 0);
	close(fd);
	tell();
}

static void sc_zero_len(void) { pair(AF_INET, zero_srv, zero_cli); }

/* read() and readv() of nothing return 0 before TCP is asked (the VFS),
 * data or not, blocking or not; recv() of nothing is TCP's: EAGAIN */
static void read_zero_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	close(fd);
}

static void read_zero_cli(const struct addr *a)
{
	int fd = conn(a);
	char b[8];
	struct iovec v[2] = { { b, 0 }, { b + 1, 0 } };
	RC("read(0 bytes), nothing there", read(fd, b, 0));
	RC("readv(2 empty iovecs), nothing there", readv(fd, v, 2));
	set_nonblock(fd, true);
	RC("read(0 bytes), nonblocking", read(fd, b, 0));
	RC("readv(2 empty iovecs), nonblocking", readv(fd, v, 2));
	RECV(fd, 0, 0);
	set_nonblock(fd, false);
	struct timeval tv = { 0, 20000 };
	RC("setsockopt(SO_RCVTIMEO, 20 ms)", setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
	RECV(fd, 0, 0); /* its wait times out: 0, the loop of nothing ended */
	RECV(fd, 1, 0);
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	RC("writev(2 empty iovecs) after SHUT_WR", writev(fd, v, 2));
	RC("write(0 bytes) after SHUT_WR", write(fd, b, 0));
	RC("send(0 bytes) after SHUT_WR", send(fd, b, 0, MSG_NOSIGNAL));
	tell();
	close(fd);
}

static void sc_read_zero(void) { pair(AF_INET, read_zero_srv, read_zero_cli); }

/* ---- shutdown_wr / shutdown_rd / shutdown_rdwr ------------------------- */

static void shutwr_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 7);
	RECV(fd, 64, 0);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	SEND(fd, "reply", 0);
	await();
	RC("close", close(fd));
	tell();
}

static void shutwr_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "request", 0);
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	POLL1(fd, POLLOUT, 0);
	SEND(fd, "more", 0);
	say("SIGPIPE count: %d", (int)n_sigpipe);
	recv_exact(fd, 5);
	tell();
	await();
	wait_readable(fd);
	RECV(fd, 64, 0);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RC("shutdown(SHUT_RDWR) after both FINs", shutdown(fd, SHUT_RDWR));
	struct addr p;
	memset(&p, 0, sizeof p);
	p.len = sizeof p.ss;
	RC("getpeername after both FINs", getpeername(fd, (struct sockaddr *)&p.ss, &p.len));
	RC("close", close(fd));
}

static void sc_shutdown_wr(void) { pair(AF_INET, shutwr_srv, shutwr_cli); }

static void shutrd_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 8);
	await();
	RC("close", close(fd));
	tell();
}

static void shutrd_cli(const struct addr *a)
{
	int fd = conn(a);
	RC("shutdown(SHUT_RD)", shutdown(fd, SHUT_RD));
	RECV(fd, 64, 0);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	SEND(fd, "still ok", 0);
	tell();
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RC("close", close(fd));
}

static void sc_shutdown_rd(void) { pair(AF_INET, shutrd_srv, shutrd_cli); }

static void shutrdwr_srv(int lfd)
{
	int fd = acc(lfd);
	RECV(fd, 64, 0);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RC("close", close(fd));
	tell();
}

static void shutrdwr_cli(const struct addr *a)
{
	int fd = conn(a);
	RC("shutdown(SHUT_RDWR)", shutdown(fd, SHUT_RDWR));
	RECV(fd, 64, 0);
	SEND(fd, "x", MSG_NOSIGNAL);
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RC("shutdown(7)", shutdown(fd, 7));
	RC("close", close(fd));
}

static void sc_shutdown_rdwr(void) { pair(AF_INET, shutrdwr_srv, shutrdwr_cli); }

/* ---- close with / without unread data, linger -------------------------- */

static void close_unread_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	wait_readable(fd);
	FIONREAD_(fd);
	RC("close with 100 unread bytes", close(fd));
	tell();
}

static void close_unread_cli(const struct addr *a)
{
	int fd = conn(a);
	char b[100];
	memset(b, 'u', sizeof b);
	RC("send(100 bytes)", send(fd, b, sizeof b, 0));
	tell();
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	SEND(fd, "x", MSG_NOSIGNAL);
	GETINT(fd, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	struct addr p;
	memset(&p, 0, sizeof p);
	p.len = sizeof p.ss;
	RC("getpeername", getpeername(fd, (struct sockaddr *)&p.ss, &p.len));
	RC("close", close(fd));
}

static void sc_close_unread(void) { pair(AF_INET, close_unread_srv, close_unread_cli); }

static void close_read_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 100);
	RC("close", close(fd));
	tell();
}

static void close_read_cli(const struct addr *a)
{
	int fd = conn(a);
	char b[100];
	memset(b, 'r', sizeof b);
	RC("send(100 bytes)", send(fd, b, sizeof b, 0));
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, MSG_DONTWAIT);
	RECV(fd, 64, 0);
	GETINT(fd, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	RC("close", close(fd));
}

static void sc_close_read(void) { pair(AF_INET, close_read_srv, close_read_cli); }

static void close_wakes_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "x", 0);
	await();
	usleep(100000);
	RC("close", close(fd));
}

static void close_wakes_cli(const struct addr *a)
{
	int fd = conn(a);
	recv_exact(fd, 1);
	int ep = epoll_create1(0);
	EPCTL_(ep, fd);
	tell();
	POLL1(fd, POLLIN | POLLRDHUP, 5000); /* the peer closes ~100 ms later */
	EPW_(ep);
	RECV(fd, 64, MSG_DONTWAIT);
	close(ep);
	close(fd);
}

static void sc_close_wakes_poll(void) { pair(AF_INET, close_wakes_srv, close_wakes_cli); }

static void close_wakes_epoll_cli(const struct addr *a)
{
	int fd = conn(a);
	recv_exact(fd, 1);
	int ep = epoll_create1(0);
	EPCTL_(ep, fd);
	tell();
	EPW_(ep); /* blocks until the peer closes ~100 ms later */
	POLL1(fd, POLLIN | POLLRDHUP, 0);
	RECV(fd, 64, MSG_DONTWAIT);
	close(ep);
	close(fd);
}

static void sc_close_wakes_epoll(void) { pair(AF_INET, close_wakes_srv, close_wakes_epoll_cli); }

static void linger0_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 1);
	struct linger lg = { 1, 0 };
	RC("setsockopt(SO_LINGER, {1, 0})", setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
	RC("close", close(fd));
	tell();
}

static void linger0_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "x", 0);
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	RC("close", close(fd));
}

static void sc_linger0(void) { pair(AF_INET, linger0_srv, linger0_cli); }

static void linger_srv(int lfd)
{
	int fd = acc(lfd);
	struct linger lg = { 1, 5 };
	RC("setsockopt(SO_LINGER, {1, 5})", setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
	struct linger g;
	socklen_t gl = sizeof g;
	getsockopt(fd, SOL_SOCKET, SO_LINGER, &g, &gl);
	say("getsockopt(SO_LINGER) = {%d, %d}", g.l_onoff, g.l_linger);
	send_stream(fd, 256 * KiB, 41);
	RC("close (lingering)", close(fd));
}

static void linger_cli(const struct addr *a)
{
	int fd = conn(a);
	recv_stream(fd, 256 * KiB, 41);
	RECV(fd, 64, 0);
	close(fd);
}

static void sc_linger_graceful(void) { pair(AF_INET, linger_srv, linger_cli); }

/* ---- rst_with_pending: the reset arrives while we hold unread data ------- */

static void rstp_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "hello", 0);
	await();
	wait_readable(fd);
	RC("close with 1 unread byte", close(fd));
	tell();
}

static void rstp_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "x", 0);
	wait_readable(fd);
	tell();
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void sc_rst_with_pending(void) { pair(AF_INET, rstp_srv, rstp_cli); }

/* ---- epipe / sigpipe_default: writing after the peer closed ------------ */

static void epipe_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 5);
	RC("close", close(fd));
	tell();
}

static void epipe_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "hello", 0);
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	SEND(fd, "first", 0);
	say("SIGPIPE count: %d", (int)n_sigpipe);
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	SEND(fd, "second", 0);
	say("SIGPIPE count: %d", (int)n_sigpipe);
	SEND(fd, "third", MSG_NOSIGNAL);
	say("SIGPIPE count: %d", (int)n_sigpipe);
	RC("write", write(fd, "fourth", 6));
	say("SIGPIPE count: %d", (int)n_sigpipe);
	struct iovec v = { (void *)"fifth", 5 };
	RC("writev", writev(fd, &v, 1));
	say("SIGPIPE count: %d", (int)n_sigpipe);
	RECV(fd, 64, 0);
	RC("close", close(fd));
}

static void sc_epipe(void) { pair(AF_INET, epipe_srv, epipe_cli); }

static void sigdfl_cli(const struct addr *a)
{
	signal(SIGPIPE, SIG_DFL);
	int fd = conn(a);
	SEND(fd, "hello", 0);
	await();
	usleep(SETTLE_US);
	SEND(fd, "first", 0);
	usleep(SETTLE_US);
	SEND(fd, "second", 0);
	say("still alive after the second send");
	close(fd);
}

static void sc_sigpipe_default(void) { pair(AF_INET, epipe_srv, sigdfl_cli); }

/* ---- kill_clean / kill_unread: the peer process dies (SIGKILL) ---------- */

/* SIGKILL the client process, reap it, and leave its end time to reach us. */
static void kill_client(void)
{
	kill(g_client.pid, SIGKILL);
	reap(&g_client);
	usleep(SETTLE_US);
}

static void kill_clean_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "data", 0);
	await();
	kill_client();
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	recv_exact(fd, 3);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void kill_clean_cli(const struct addr *a)
{
	int fd = conn(a);
	recv_exact(fd, 4);
	SEND(fd, "bye", 0);
	tell();
	for (;;)
		pause();
}

static void sc_kill_clean(void) { pair(AF_INET, kill_clean_srv, kill_clean_cli); }

static void kill_unread_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "data", 0);
	await();
	kill_client();
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	SEND(fd, "x", MSG_NOSIGNAL);
	close(fd);
}

static void kill_unread_cli(const struct addr *a)
{
	int fd = conn(a);
	wait_readable(fd);
	say("holding unread data");
	tell();
	for (;;)
		pause();
}

static void sc_kill_unread(void) { pair(AF_INET, kill_unread_srv, kill_unread_cli); }

/* the reader's look took the bytes out of the transport (FIONREAD, as a
 * poll that finds them on arming does: the CI failure of kill_unread), then
 * it is killed: a reset all the same; after reading part of them too */
/* FIONREAD, read `n` of the 4 bytes 2 at a time, then wait to be killed */
static void looked_then_killed(const struct addr *a, int n, const char *what)
{
	int fd = conn(a);
	wait_readable(fd);
	FIONREAD_(fd);
	for (int i = 0; i < n; i += 2)
		RECV(fd, 2, 0);
	say("%s", what);
	tell();
	for (;;)
		pause();
}

static void kill_looked_cli(const struct addr *a) { looked_then_killed(a, 2, "holding unread data it looked at"); }

static void sc_kill_unread_looked(void) { pair(AF_INET, kill_unread_srv, kill_looked_cli); }

/* ... and once it read them all: an orderly end (nothing unread) */
static void kill_read_all_cli(const struct addr *a) { looked_then_killed(a, 4, "read everything"); }

static void sc_kill_read_all(void) { pair(AF_INET, kill_unread_srv, kill_read_all_cli); }

/* the reader looked (FIONREAD: the switch takes the bytes out of its
 * transport), then exits without close: a reset all the same */
static void exit_unread_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "data", 0);
	await();
	reap(&g_client);
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	SEND(fd, "x", MSG_NOSIGNAL);
	close(fd);
}

static void exit_unread_cli(const struct addr *a)
{
	int fd = conn(a);
	wait_readable(fd);
	FIONREAD_(fd);
	RECV(fd, 2, MSG_PEEK);
	say("exit(0) without close, holding unread data");
	tell();
	exit(0);
}

static void sc_exit_unread(void) { pair(AF_INET, exit_unread_srv, exit_unread_cli); }

/* SO_LINGER {1, 0}, then exit without close: a reset, as close would */
static void exit_linger0_cli(const struct addr *a)
{
	int fd = conn(a);
	wait_readable(fd);
	char b[16];
	RC("recv", recv(fd, b, sizeof b, 0));
	struct linger l = { 1, 0 };
	RC("setsockopt(SO_LINGER, {1, 0})", setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l));
	say("exit(0) without close");
	tell();
	exit(0);
}

static void sc_exit_linger0(void) { pair(AF_INET, exit_unread_srv, exit_linger0_cli); }

/* ---- death without close(): exit, SIGKILL, a forked copy ---------------- */
/* A process that ends without close() while holding nothing unread closes
 * its socket as close() would: the peer reads every byte, then EOF.  Only
 * unread received data turns the end into a reset (see kill_unread). */

#define DEATH_BYTES (400 * KiB)

/* Read until EOF or an error from stream position start (pattern seed):
 * whether anything came, the pattern, and how the stream ended.  The amount
 * depends on how far the killed sender got, so it is not printed. */
static void read_rest(int fd, uint32_t seed, uint64_t start)
{
	size_t cap = 64 * KiB;
	uint8_t *b = malloc(cap);
	struct rx r;
	rx_init(&r);
	const char *end = "EOF";
	for (;;) {
		ssize_t n = recv(fd, b, cap, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			end = ename(errno);
		if (n <= 0)
			break;
		rx_feed(&r, b, (size_t)n, start, seed);
	}
	free(b);
	say("read %s bytes then %s, pattern %s", r.got ? ">0" : "0", end, r.mismatch ? "MISMATCH" : "ok");
}

static void exit_unclosed_srv(int lfd)
{
	int fd = acc(lfd);
	reap(&g_client);
	recv_stream(fd, DEATH_BYTES, 31);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void exit_unclosed_cli(const struct addr *a)
{
	int fd = conn(a);
	send_stream(fd, DEATH_BYTES, 31);
	say("exit(0) without close");
	exit(0);
}

static void sc_exit_unclosed(void) { pair(AF_INET, exit_unclosed_srv, exit_unclosed_cli); }

static void kill_sent_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	kill_client();
	recv_stream(fd, DEATH_BYTES, 32);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void kill_sent_cli(const struct addr *a)
{
	int fd = conn(a);
	send_stream(fd, DEATH_BYTES, 32);
	tell();
	for (;;)
		pause();
}

static void sc_kill_sent(void) { pair(AF_INET, kill_sent_srv, kill_sent_cli); }

/* The sender is killed while it still sends 64 MiB: after 1 MiB was read
 * (mid-way), or once it is blocked on a full window (nothing read). */
static void kill_sending(int lfd, bool midway)
{
	int fd = acc(lfd);
	await();
	uint64_t start = 0;
	if (midway) {
		start = recv_stream(fd, MiB, 33);
		/* data in flight when the kill lands: the kernel's send buffer
		 * refills the window by itself, a switched sender must have run
		 * since our last read (a loaded host may not have scheduled it) */
		struct pollfd p = { .fd = fd, .events = POLLIN };
		poll(&p, 1, 2000);
	} else
		usleep(300000); /* the sender fills the window and blocks */
	kill_client();
	read_rest(fd, 33, start);
	RECV(fd, 64, 0);
	close(fd);
}

static void kill_midway_srv(int lfd) { kill_sending(lfd, true); }
static void kill_blocked_srv(int lfd) { kill_sending(lfd, false); }

static void kill_sending_cli(const struct addr *a)
{
	int fd = conn(a);
	tell();
	send_stream(fd, 64 * MiB, 33);
	for (;;)
		pause();
}

static void sc_kill_midway(void) { pair(AF_INET, kill_midway_srv, kill_sending_cli); }

/* ---- send_peer_exited: the peer read everything and exited with its
 * socket open (the kernel closes it: a FIN, nothing unread); then two
 * sends with a pause between: the first goes out and draws a reset, the
 * second says EPIPE (tcp_reset in CLOSE_WAIT).  The switch once learned
 * of the death at the second send's look at the doorbell and took the
 * first send's bytes, unread in the ring, for data the peer died without
 * reading: ECONNRESET (soak seed 848007859). */
static void send_exited_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "hello", 0);
	reap(&g_client); /* soon after the send above: the switch looks for a
			  * dead peer once per few milliseconds of sends */
	SEND(fd, "after the exit", 0);
	usleep(SETTLE_US);
	SEND(fd, "and once more", 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void send_exited_cli(const struct addr *a)
{
	int fd = conn(a);
	RECV(fd, 5, MSG_WAITALL);
	say("exit(0), the socket still open");
	exit(0);
}

static void sc_send_peer_exited(void) { pair(AF_INET, send_exited_srv, send_exited_cli); }

/* ---- shutdown_peer_exited: both ends shut once the peer process exits
 * with its socket open (the kernel closes it: a FIN), so shutdown() says
 * ENOTCONN; on one host the switch learns it from the peer's death, not a
 * message (the differential tester's seed 832901075). */
static void shut_exited_srv(int lfd)
{
	int fd = acc(lfd);
	RC("shutdown(SHUT_RDWR)", shutdown(fd, SHUT_RDWR));
	tell();
	reap(&g_client);
	usleep(SETTLE_US);
	RC("shutdown(SHUT_WR) after the peer exited", shutdown(fd, SHUT_WR));
	close(fd);
}

static void shut_exited_cli(const struct addr *a)
{
	int fd = conn(a);
	(void)fd;
	await(); /* and exit with it open */
}

static void sc_shutdown_peer_exited(void) { pair(AF_INET, shut_exited_srv, shut_exited_cli); }

/* ---- tcpinfo_peer_exited: the same, but the first call after the peer's
 * exit is TCP_INFO: its state already says the peer's FIN came (the
 * differential tester's seed 840002047: FIN_WAIT2 once, then CLOSE). */
static void tcpinfo_exited_srv(int lfd)
{
	int fd = acc(lfd);
	RC("shutdown(SHUT_RDWR)", shutdown(fd, SHUT_RDWR));
	tell();
	reap(&g_client);
	usleep(SETTLE_US);
	TCPINFO(fd);
	close(fd);
}

static void sc_tcpinfo_peer_exited(void) { pair(AF_INET, tcpinfo_exited_srv, shut_exited_cli); }
static void sc_kill_blocked(void) { pair(AF_INET, kill_blocked_srv, kill_sending_cli); }

static void fork_idle_child(void *arg)
{
	(void)arg;
	say("exiting without touching the inherited socket");
}

static void fork_exit_srv(int lfd)
{
	int fd = acc(lfd);
	await(); /* the client closed */
	recv_stream(fd, DEATH_BYTES, 34);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void fork_exit_cli(const struct addr *a)
{
	int fd = conn(a);
	struct proc ch = spawn("client-child", fork_idle_child, NULL);
	reap(&ch);
	send_stream(fd, DEATH_BYTES, 34);
	RC("close", close(fd));
	tell();
}

static void sc_fork_child_exit(void) { pair(AF_INET, fork_exit_srv, fork_exit_cli); }

/* ---- fork_exit_close_unread: the peer sends, a forked child exits
 * (exit(), the socket still open: the kernel closes it), then the parent
 * closes with the peer's bytes unread: the last close resets the
 * connection (tcp_close with unread data).  The child's FIONREAD had the
 * switch take the bytes out of the ring; its exit left the count of
 * holders one too high, so the parent's close took itself for one of two
 * and sent nothing, and the peer, finding the ring read, saw an orderly end
 * (the differential tester's seed 843000004). */
struct fork_wait {
	int go[2];
	int fd;
};

/* Waits for the parent's word, asks FIONREAD (which has the switch take
 * the bytes in: out of the ring), and exits with the socket open. */
static void fork_wait_child(void *arg)
{
	struct fork_wait *w = arg;
	char b;
	close(w->go[1]);
	(void)!read(w->go[0], &b, 1);
	int n = -1;
	RC("ioctl(FIONREAD)", ioctl(w->fd, FIONREAD, &n));
	say("FIONREAD says %d; exiting with the socket open", n);
}

static void fork_unread_srv(int lfd)
{
	struct fork_wait w;
	w.fd = acc(lfd);
	int fd = w.fd;
	if (pipe(w.go) < 0)
		die("pipe: %s", ename(errno));
	struct proc ch = spawn("server-child", fork_wait_child, &w);
	close(w.go[0]);
	tell();
	await(); /* the client's bytes are here, unread */
	close(w.go[1]); /* the child may go on */
	reap(&ch);
	RC("close with the client's bytes unread", close(fd));
	tell();
	await();
}

/* The server closed (its word): what the end looks like here. */
static void await_end(int fd)
{
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLRDHUP, 0);
	RECV(fd, 64, MSG_DONTWAIT);
	tell();
	close(fd);
}

static void fork_unread_cli(const struct addr *a)
{
	int fd = conn(a);
	await(); /* the server forked */
	SEND(fd, "unread by anyone", 0);
	usleep(SETTLE_US);
	tell();
	await_end(fd);
}

static void sc_fork_exit_close_unread(void) { pair(AF_INET, fork_unread_srv, fork_unread_cli); }

/* ---- fork_poll_thread: a thread of the server polls the connection as
 * the server forks a child; the client's bytes wake it; the parent
 * closes, then the child (which never read), with the bytes unread: the
 * last close resets the connection.  The child's copy of the socket
 * counted the parent thread's poll as a call in progress, a thread that
 * does not exist there, so its close never ended the connection (the
 * differential tester's seed 861000052, over fabric: the peer waited for
 * the child's exit). */
struct fork_poll {
	int fd;
	bool epoll; /* the thread waits in epoll_wait (its member armed) */
	int go[2], done[2], bye[2];
};

static void *fork_poll_thread(void *arg)
{
	struct fork_poll *w = arg;
	if (!w->epoll) {
		POLL1(w->fd, POLLIN, 5000);
		return NULL;
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, w->fd, &ev) < 0)
		die("epoll: %s", ename(errno));
	int n = epoll_wait(ep, &ev, 1, 5000);
	say("thread: epoll_wait = %d%s", n, n == 1 && (ev.events & EPOLLIN) ? " EPOLLIN" : "");
	close(ep); /* (the parent's: its last copy, the child's goes at its exit) */
	return NULL;
}

static void fork_poll_child(void *arg)
{
	struct fork_poll *w = arg;
	char b = 0;
	close(w->go[1]);
	close(w->done[0]);
	close(w->bye[1]);
	(void)!read(w->go[0], &b, 1);
	RC("child: close", close(w->fd));
	(void)!write(w->done[1], &b, 1);
	(void)!read(w->bye[0], &b, 1); /* alive until the client looked */
}

static void fork_wait_srv(int lfd, bool epoll)
{
	struct fork_poll w;
	w.fd = acc(lfd);
	w.epoll = epoll;
	if (pipe(w.go) < 0 || pipe(w.done) < 0 || pipe(w.bye) < 0)
		die("pipe: %s", ename(errno));
	pthread_t th;
	if (pthread_create(&th, NULL, fork_poll_thread, &w) != 0)
		die("pthread_create");
	usleep(SETTLE_US); /* the thread is in poll */
	struct proc ch = spawn("server-child", fork_poll_child, &w);
	close(w.go[0]);
	close(w.done[1]);
	close(w.bye[0]);
	tell();
	pthread_join(th, NULL); /* the client's bytes woke it */
	RC("close (the child holds it too)", close(w.fd));
	char b = 0;
	(void)!write(w.go[1], &b, 1);
	(void)!read(w.done[0], &b, 1);
	tell(); /* both closed */
	await();
	close(w.bye[1]);
	reap(&ch);
}

static void fork_poll_cli(const struct addr *a)
{
	int fd = conn(a);
	await(); /* the server forked, its thread polling */
	SEND(fd, "unread by anyone", 0);
	await_end(fd); /* closed by parent and child */
}

static void fork_poll_srv(int lfd) { fork_wait_srv(lfd, false); }
static void fork_epoll_srv(int lfd) { fork_wait_srv(lfd, true); }
static void sc_fork_poll_thread(void) { pair(AF_INET, fork_poll_srv, fork_poll_cli); }
static void sc_fork_epoll_thread(void) { pair(AF_INET, fork_epoll_srv, fork_poll_cli); }

/* ---- fork_takeover: a child drives an inherited connection, then exits;
 * the parent goes on with it.  After a stream one way, the other side's
 * acknowledgements (fabric: credit messages) were on their way when the
 * fork came: both processes' transports held them, the child consumed them,
 * and the parent, taking the connection over, must not read them again
 * (the differential tester's seed 825665961: "malformed message"). */
static void takeover_child(void *arg)
{
	int fd = *(int *)arg;
	wait_readable(fd);
	int n = -1;
	RC("ioctl(FIONREAD)", ioctl(fd, FIONREAD, &n));
	say("child: FIONREAD %d", n);
}

static void takeover_srv(int lfd)
{
	int fd = acc(lfd);
	send_stream(fd, 2 * MiB, 35);
	await(); /* the client read it all */
	struct proc ch = spawn("server-child", takeover_child, &fd);
	tell(); /* the client sends */
	reap(&ch);
	recv_stream(fd, 689, 36);
	RECV(fd, 64, 0);
	close(fd);
}

static void takeover_cli(const struct addr *a)
{
	int fd = conn(a);
	recv_stream(fd, 2 * MiB, 35);
	tell();
	await();
	send_stream(fd, 689, 36);
	RC("close", close(fd));
}

static void sc_fork_takeover(void) { pair(AF_INET, takeover_srv, takeover_cli); }

/* ---- fork_child_writes: a child writes a stream on an inherited
 * connection and exits while the parent still holds it: every byte
 * arrives (kernel TCP sends what is in the socket buffer whatever
 * happens to the process), then the parent's close ends it. */
static void child_writes(void *arg)
{
	send_stream(*(int *)arg, 4 * MiB, 37);
}

static void child_writes_srv(int lfd)
{
	int fd = acc(lfd);
	struct proc ch = spawn("server-child", child_writes, &fd);
	reap(&ch);
	await(); /* the client has it all */
	close(fd);
}

static void child_writes_cli(const struct addr *a)
{
	int fd = conn(a);
	recv_stream(fd, 4 * MiB, 37);
	tell();
	RECV(fd, 64, 0);
	close(fd);
}

static void sc_fork_child_writes(void) { pair(AF_INET, child_writes_srv, child_writes_cli); }

/* The reader dies holding unread data: its reset reaches a sender that had
 * not looked (the first send fails with the reset, later ones EPIPE). */
static void kill_unread_send_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "data", 0);
	await();
	kill_client();
	SEND(fd, "x", MSG_NOSIGNAL);
	SEND(fd, "y", MSG_NOSIGNAL);
	SEND(fd, "z", MSG_NOSIGNAL);
	GETINT(fd, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	RECV(fd, 64, 0);
	close(fd);
}

static void sc_kill_unread_send(void) { pair(AF_INET, kill_unread_send_srv, kill_unread_cli); }

/* The same reset reaching a sender blocked on the full window. */
static void *kill_client_later(void *arg)
{
	(void)arg;
	usleep(300000); /* the sender below is blocked by then */
	kill(g_client.pid, SIGKILL);
	return NULL;
}

static void kill_reader_blocked_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	pthread_t th;
	if (pthread_create(&th, NULL, kill_client_later, NULL) != 0)
		die("pthread_create");
	uint8_t *b = calloc(1, 256 * KiB);
	size_t total = 0;
	ssize_t w;
	while (total < 512 * MiB && (w = send(fd, b, 256 * KiB, MSG_NOSIGNAL)) > 0)
		total += (size_t)w;
	say("blocking send failed: %s, after %s bytes", total >= 512 * MiB ? "never" : ename(errno),
	    total ? ">0" : "0");
	pthread_join(th, NULL);
	reap(&g_client);
	SEND(fd, "x", MSG_NOSIGNAL);
	free(b);
	close(fd);
}

static void idle_reader_cli(const struct addr *a)
{
	(void)conn(a);
	say("connected, never reading");
	tell();
	for (;;)
		pause();
}

static void sc_kill_reader_blocked(void) { pair(AF_INET, kill_reader_blocked_srv, idle_reader_cli); }

/* ---- urgent data -------------------------------------------------------- */

static void oob_send_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	SEND(fd, "ab", 0);
	SEND(fd, "c", MSG_OOB);
	SEND(fd, "de", 0);
	tell();
	await();
	close(fd);
}

static void oob_wait(int fd)
{
	tell();
	await();
	usleep(SETTLE_US);
	(void)fd;
}

static void oob_srv(int lfd)
{
	int fd = acc(lfd);
	RECV(fd, 10, MSG_OOB);
	RECV(fd, 10, MSG_OOB | MSG_DONTWAIT);
	oob_wait(fd);
	POLL1(fd, POLLIN | POLLPRI | POLLOUT, 0);
	SELECT(fd, true, false, true, 0);
	ATMARK(fd);
	RECV(fd, 100, 0);
	ATMARK(fd);
	RECV(fd, 100, MSG_OOB | MSG_PEEK);
	RECV(fd, 100, MSG_OOB);
	RECV(fd, 100, MSG_OOB);
	ATMARK(fd);
	POLL1(fd, POLLIN | POLLPRI, 0);
	SELECT(fd, true, false, true, 0);
	RECV(fd, 100, 0);
	ATMARK(fd);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob(void) { pair(AF_INET, oob_srv, oob_send_cli); }

static void oob_first_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	ATMARK(fd);
	RECV(fd, 100, MSG_OOB);
	ATMARK(fd);
	POLL1(fd, POLLIN | POLLPRI, 0);
	RECV(fd, 100, 0);
	ATMARK(fd);
	RECV(fd, 100, 0);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob_first(void) { pair(AF_INET, oob_first_srv, oob_send_cli); }

/* FIONREAD counts up to the urgent mark (tcp_inq), unless the byte is inline */
static void oob_fionread_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	FIONREAD_(fd);
	RECV(fd, 1, 0);
	FIONREAD_(fd);
	RECV(fd, 100, 0);
	FIONREAD_(fd);
	SETINT(fd, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE", 1);
	FIONREAD_(fd);
	SETINT(fd, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE", 0);
	RECV(fd, 100, MSG_OOB);
	FIONREAD_(fd);
	RECV(fd, 100, 0);
	FIONREAD_(fd);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob_fionread(void) { pair(AF_INET, oob_fionread_srv, oob_send_cli); }

/* MSG_WAITALL does not cross the urgent mark either */
static void oob_waitall_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	RECV(fd, 100, MSG_WAITALL);
	RECV(fd, 1, MSG_WAITALL | MSG_PEEK);
	RECV(fd, 100, MSG_OOB);
	tell();
	RECV(fd, 100, MSG_WAITALL);
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob_waitall(void) { pair(AF_INET, oob_waitall_srv, oob_send_cli); }

/* MSG_PEEK|MSG_WAITALL stops at the urgent mark too, with more data
 * behind it (the differential tester's seed 846000957: the switch's peek
 * looked for the mark where a read would have left it, and waited for
 * ever) */
static void oob_peek_waitall_srv(int lfd)
{
	int fd = acc(lfd);
	RC("send(MSG_OOB) of 8 bytes", send(fd, "abcdefgX", 8, MSG_OOB));
	SEND(fd, "more data behind the mark", 0);
	usleep(SETTLE_US);
	tell();
	await();
	close(fd);
}

static void oob_peek_waitall_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	RECV(fd, 100, MSG_PEEK | MSG_WAITALL);
	RECV(fd, 100, MSG_WAITALL);
	tell();
	close(fd);
}

static void sc_oob_peek_waitall(void) { pair(AF_INET, oob_peek_waitall_srv, oob_peek_waitall_cli); }

/* recvmsg of the urgent byte: msg_flags says MSG_OOB (and MSG_TRUNC
 * without room for it) */
static void RECVMSG_FLAGS(int fd, size_t n, int flags)
{
	char b[64];
	struct iovec v = { b, n };
	struct msghdr mh;
	memset(&mh, 0, sizeof mh);
	mh.msg_iov = &v;
	mh.msg_iovlen = 1;
	mh.msg_flags = -1;
	errno = 0;
	ssize_t r = recvmsg(fd, &mh, flags);
	int e = errno;
	say("recvmsg(%zu, %s) = %s%s%s msg_flags=%s", n, flagstr(flags), rcs(r, e), r > 0 ? " " : "",
	    r > 0 ? esc(b, (size_t)r) : "", r >= 0 ? flagstr(mh.msg_flags) : "-");
}

static void oob_recvmsg_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	RECVMSG_FLAGS(fd, 0, MSG_OOB | MSG_PEEK);
	RECVMSG_FLAGS(fd, 10, MSG_OOB | MSG_PEEK);
	RECVMSG_FLAGS(fd, 10, MSG_OOB);
	RECVMSG_FLAGS(fd, 10, MSG_OOB);
	RECVMSG_FLAGS(fd, 10, 0);
	tell();
	RECVMSG_FLAGS(fd, 10, 0);
	close(fd);
}

static void sc_oob_recvmsg(void) { pair(AF_INET, oob_recvmsg_srv, oob_send_cli); }

/* splice from the socket into a pipe, and what it moved */
static void SPLICE_OUT(int fd, size_t n)
{
	int p[2];
	if (pipe(p) < 0)
		die("pipe: %s", ename(errno));
	errno = 0;
	ssize_t r = splice(fd, NULL, p[1], NULL, n, 0);
	int e = errno;
	char b[256] = "";
	if (r > 0 && read(p[0], b, (size_t)r < sizeof b ? (size_t)r : sizeof b) < 0)
		die("read pipe: %s", ename(errno));
	if (r > 0)
		say("splice(socket -> pipe, %zu) = %zd \"%s\"", n, r, esc(b, (size_t)r));
	else
		say("splice(socket -> pipe, %zu) = %s", n, rcs(r, e));
	close(p[0]);
	close(p[1]);
}

/* splice (tcp_read_sock) stops at urgent data and never passes the mark:
 * 0 there (EAGAIN nonblocking), until a read skips the byte */
static void oob_splice_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	SPLICE_OUT(fd, 100);
	SPLICE_OUT(fd, 100);
	set_nonblock(fd, true);
	SPLICE_OUT(fd, 100);
	RECV(fd, 100, MSG_OOB);
	SPLICE_OUT(fd, 100);
	set_nonblock(fd, false);
	RECV(fd, 1, 0);
	SPLICE_OUT(fd, 100);
	tell();
	SPLICE_OUT(fd, 100);
	close(fd);
}

static void sc_oob_splice(void) { pair(AF_INET, oob_splice_srv, oob_send_cli); }

static void oob_inline_srv(int lfd)
{
	int fd = acc(lfd);
	SETINT(fd, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE", 1);
	oob_wait(fd);
	POLL1(fd, POLLIN | POLLPRI, 0);
	SELECT(fd, true, false, true, 0);
	ATMARK(fd);
	RECV(fd, 100, MSG_OOB);
	RECV(fd, 100, 0);
	ATMARK(fd);
	POLL1(fd, POLLIN | POLLPRI, 0);
	RECV(fd, 100, 0);
	ATMARK(fd);
	POLL1(fd, POLLIN | POLLPRI, 0);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob_inline(void) { pair(AF_INET, oob_inline_srv, oob_send_cli); }

/* two urgent bytes before the reader looks: only the last mark counts */
static void oob_twice_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	SEND(fd, "a", 0);
	SEND(fd, "b", MSG_OOB);
	SEND(fd, "c", 0);
	SEND(fd, "d", MSG_OOB);
	SEND(fd, "e", 0);
	tell();
	await();
	close(fd);
}

static void oob_twice_common(int fd)
{
	oob_wait(fd);
	POLL1(fd, POLLIN | POLLPRI, 0);
	ATMARK(fd);
	RECV(fd, 100, MSG_OOB);
	for (int i = 0; i < 4; i++) {
		if (RECV(fd, 100, MSG_DONTWAIT) <= 0)
			break;
		ATMARK(fd);
	}
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

/* two urgent bytes, then plain reads only: the newer mark moved when it
 * came, so the first read returns the older urgent byte as data */
static void oob_twice_read_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	RECV(fd, 100, 0);
	RECV(fd, 100, 0);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob_twice_read(void) { pair(AF_INET, oob_twice_read_srv, oob_twice_cli); }

/* a reader standing at an urgent mark when a newer urgent byte comes: the
 * older byte is skipped (tcp_check_urg), neither data nor out of band */
static void oob_at_mark_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	RECV(fd, 100, 0);
	ATMARK(fd);
	tell();
	await();
	usleep(SETTLE_US);
	RECV(fd, 100, 0);
	RECV(fd, 100, MSG_OOB);
	RECV(fd, 100, MSG_DONTWAIT);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void oob_at_mark_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	SEND(fd, "ab", MSG_OOB);
	tell();
	await();
	SEND(fd, "xyc", MSG_OOB);
	tell();
	await();
	close(fd);
}

static void sc_oob_at_mark(void) { pair(AF_INET, oob_at_mark_srv, oob_at_mark_cli); }

/* MSG_PEEK|MSG_WAITALL waits for the whole amount, then peeks it */
static void peek_waitall_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "ab", 0);
	tell();
	await(); /* the client waits in its peek for 4 bytes */
	usleep(SETTLE_US);
	SEND(fd, "cd", 0);
	tell();
	await();
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	await();
	close(fd);
}

static void peek_waitall_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	wait_readable(fd);
	RECV(fd, 4, MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT);
	tell();
	RECV(fd, 4, MSG_PEEK | MSG_WAITALL); /* returns when "cd" came */
	RECV(fd, 3, 0);
	tell();
	RECV(fd, 8, MSG_PEEK | MSG_WAITALL); /* "d", then the FIN ends the wait */
	RECV(fd, 8, 0);
	tell();
	close(fd);
}

static void sc_peek_waitall(void) { pair(AF_INET, peek_waitall_srv, peek_waitall_cli); }

static void oob_twice_srv(int lfd)
{
	oob_twice_common(acc(lfd));
}

static void oob_twice_inline_srv(int lfd)
{
	int fd = acc(lfd);
	SETINT(fd, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE", 1);
	oob_twice_common(fd);
}

static void sc_oob_twice(void) { pair(AF_INET, oob_twice_srv, oob_twice_cli); }
static void sc_oob_twice_inline(void) { pair(AF_INET, oob_twice_inline_srv, oob_twice_cli); }

/* send("xyz", MSG_OOB): only the last byte is urgent */
static void oob_multi_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	SEND(fd, "xyz", MSG_OOB);
	tell();
	await();
	close(fd);
}

static void oob_multi_srv(int lfd)
{
	int fd = acc(lfd);
	oob_wait(fd);
	ATMARK(fd);
	RECV(fd, 100, MSG_OOB);
	RECV(fd, 100, 0);
	ATMARK(fd);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob_multibyte(void) { pair(AF_INET, oob_multi_srv, oob_multi_cli); }

static void oob_sigurg_srv(int lfd)
{
	int fd = acc(lfd);
	handle(SIGURG, on_sigurg);
	RC("fcntl(F_SETOWN, self)", fcntl(fd, F_SETOWN, getpid()));
	say("F_GETOWN is self: %s", fcntl(fd, F_GETOWN) == getpid() ? "yes" : "no");
	oob_wait(fd);
	say("SIGURG count: %d", (int)n_sigurg);
	RECV(fd, 100, MSG_OOB);
	RECV(fd, 100, 0);
	tell();
	RECV(fd, 100, 0);
	close(fd);
}

static void sc_oob_sigurg(void) { pair(AF_INET, oob_sigurg_srv, oob_send_cli); }

/* ---- readiness: poll, select, epoll ------------------------------------ */

static void ready_cli(const struct addr *a)
{
	/* a generic client: on each "tell" send the next piece */
	int fd = conn(a);
	const char *steps[] = { "x", "SHUT_WR", NULL };
	for (int i = 0; steps[i]; i++) {
		await();
		if (strcmp(steps[i], "SHUT_WR") == 0)
			RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
		else
			SEND(fd, steps[i], 0);
		tell();
	}
	await();
	close(fd);
}

static void poll_srv(int lfd)
{
	int fd = acc(lfd);
	int pp[2];
	if (pipe(pp) < 0)
		die("pipe");
	POLL1(fd, POLLIN | POLLOUT, 0);
	POLL1(fd, POLLIN, 100);
	POLL1(fd, 0, 0);
	tell();
	await();
	POLL1(fd, POLLIN, 5000);
	POLL1(fd, POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM | POLLPRI | POLLRDHUP, 0);
	struct pollfd m[3] = { { fd, POLLIN, 0 }, { pp[0], POLLIN, 0 }, { -1, POLLIN, 0 } };
	int r = poll(m, 3, 0);
	say("poll([sock, pipe, -1]) = %d revents=[%s, %s, %s]", r, evstr(m[0].revents), evstr(m[1].revents),
	    evstr(m[2].revents));
	if (write(pp[1], "p", 1) != 1)
		die("write pipe");
	r = poll(m, 3, 5000);
	say("poll([sock, pipe, -1]) = %d revents=[%s, %s, %s]", r, evstr(m[0].revents), evstr(m[1].revents),
	    evstr(m[2].revents));
	struct timespec ts = { 0, 0 };
	sigset_t ss;
	sigemptyset(&ss);
	r = ppoll(m, 2, &ts, &ss);
	say("ppoll([sock, pipe]) = %d revents=[%s, %s]", r, evstr(m[0].revents), evstr(m[1].revents));
	RECV(fd, 10, 0);
	POLL1(fd, POLLIN, 0);
	struct pollfd two[2] = { { fd, POLLIN, 0 }, { fd, POLLOUT, 0 } };
	r = poll(two, 2, 0);
	say("poll([sock POLLIN, sock POLLOUT]) = %d revents=[%s, %s]", r, evstr(two[0].revents),
	    evstr(two[1].revents));
	tell();
	await();
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 5000);
	RECV(fd, 10, 0);
	tell();
	int saved = fd;
	close(fd);
	POLL1(saved, POLLIN, 0);
	close(pp[0]);
	close(pp[1]);
}

static void sc_poll(void) { pair(AF_INET, poll_srv, ready_cli); }

static void select_srv(int lfd)
{
	int fd = acc(lfd);
	SELECT(fd, true, true, true, 0);
	SELECT(fd, true, false, false, 100);
	tell();
	await();
	wait_readable(fd);
	SELECT(fd, true, true, true, 0);
	SELECT(fd, true, false, false, 0);
	fd_set rs;
	FD_ZERO(&rs);
	FD_SET(fd, &rs);
	struct timespec ts = { 0, 0 };
	sigset_t ss;
	sigemptyset(&ss);
	int r = pselect(fd + 1, &rs, NULL, NULL, &ts, &ss);
	say("pselect(r, 0ms) = %d%s", r, FD_ISSET(fd, &rs) ? " ready: read" : "");
	RECV(fd, 10, 0);
	SELECT(fd, true, true, false, 0);
	tell();
	await();
	wait_readable(fd);
	SELECT(fd, true, true, true, 0);
	RECV(fd, 10, 0);
	tell();
	close(fd);
}

static void sc_select(void) { pair(AF_INET, select_srv, ready_cli); }

static void epoll_lt_srv(int lfd)
{
	int fd = acc(lfd);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP, 77, "epoll_ctl(ADD, IN|OUT|RDHUP)");
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 77, "epoll_ctl(ADD again)");
	EPW(ep, 0);
	tell();
	await();
	wait_readable(fd);
	EPW(ep, 0);
	EPW(ep, 0);
	RECV(fd, 10, 0);
	EPW(ep, 0);
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLIN | EPOLLRDHUP, 78, "epoll_ctl(MOD, IN|RDHUP)");
	EPW(ep, 100);
	tell();
	await();
	wait_readable(fd);
	EPW(ep, 0);
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLIN, 79, "epoll_ctl(MOD, IN)");
	EPW(ep, 0);
	EPCTL(ep, EPOLL_CTL_DEL, fd, 0, 0, "epoll_ctl(DEL)");
	EPW(ep, 0);
	EPCTL(ep, EPOLL_CTL_DEL, fd, 0, 0, "epoll_ctl(DEL again)");
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 80, "epoll_ctl(ADD, IN)");
	EPW(ep, 0);
	tell();
	RC("close the socket (still in the epoll set)", close(fd));
	EPW(ep, 0);
	close(ep);
}

static void sc_epoll_lt(void) { pair(AF_INET, epoll_lt_srv, ready_cli); }

static void et_cli(const struct addr *a)
{
	int fd = conn(a);
	const char *steps[] = { "a", "b", "c", "d", NULL };
	for (int i = 0; steps[i]; i++) {
		await();
		SEND(fd, steps[i], 0);
		tell();
	}
	await();
	close(fd);
}

static void epoll_et_srv(int lfd)
{
	int fd = acc(lfd);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLET, 7, "epoll_ctl(ADD, IN|ET)");
	EPW(ep, 0);
	tell();
	await();
	EPW(ep, 5000);
	EPW(ep, 100);
	tell();
	await();
	EPW(ep, 5000);
	EPW(ep, 100);
	recv_exact(fd, 2);
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLIN | EPOLLONESHOT, 8, "epoll_ctl(MOD, IN|ONESHOT)");
	EPW(ep, 0);
	tell();
	await();
	EPW(ep, 5000);
	EPW(ep, 100);
	tell();
	await();
	usleep(SETTLE_US);
	EPW(ep, 100);
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLIN | EPOLLONESHOT, 9, "epoll_ctl(MOD, IN|ONESHOT) re-arm");
	EPW(ep, 0);
	EPW(ep, 0);
	recv_exact(fd, 2);
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLOUT | EPOLLET, 10, "epoll_ctl(MOD, OUT|ET)");
	EPW(ep, 0);
	EPW(ep, 0);
	tell();
	close(ep);
	close(fd);
}

static void sc_epoll_et(void) { pair(AF_INET, epoll_et_srv, et_cli); }

/* ---- epoll_et_wakes: what wakes an edge-triggered entry.  Kernel TCP
 * wakes a socket's waiters at each arrival of data (for an entry asking
 * for input or urgent data) and at the peer's FIN (any entry); the entry
 * then reports all of its interest that is ready: an urgent byte not yet
 * read shows again (the differential tester's seed 832663577). */
static void et_wakes_srv(int lfd)
{
	int fd = acc(lfd);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLPRI | EPOLLET, 12, "epoll_ctl(ADD, PRI|ET)");
	tell();
	await(); /* urgent data sent */
	EPW(ep, 5000);
	EPW(ep, 0);
	tell();
	await(); /* more, plain */
	usleep(SETTLE_US);
	EPW(ep, 0);
	EPW(ep, 0);
	tell();
	await(); /* the peer's FIN */
	usleep(SETTLE_US);
	EPW(ep, 0);
	EPW(ep, 0);
	tell();
	close(ep);
	close(fd);
}

static void et_wakes_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	RC("send(MSG_OOB)", send(fd, "u!", 2, MSG_OOB));
	tell();
	await();
	SEND(fd, "more", 0);
	tell();
	await();
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	tell();
	await();
	close(fd);
}

static void sc_epoll_et_wakes(void) { pair(AF_INET, et_wakes_srv, et_wakes_cli); }

/* ---- epoll_et_shutdown: our own shutdown() wakes our edge-triggered
 * entry (inet_shutdown ends in sk_state_change; and the peer's ACK of our
 * FIN, FIN_WAIT1 to FIN_WAIT2, once more): what is ready shows again. */
static void et_shut_srv(int lfd)
{
	int fd = acc(lfd);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT | EPOLLET, 13, "epoll_ctl(ADD, IN|OUT|ET)");
	EPW(ep, 0);
	EPW(ep, 0);
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	usleep(SETTLE_US);
	EPW(ep, 0);
	EPW(ep, 0);
	tell();
	await();
	close(ep);
	close(fd);
}

static void et_shut_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	RECV(fd, 64, 0);
	tell();
	close(fd);
}

static void sc_epoll_et_shutdown(void) { pair(AF_INET, et_shut_srv, et_shut_cli); }

static void EPCTL_(int ep, int fd)
{
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, 1, "epoll_ctl(ADD, IN|RDHUP)");
}

static void EPW_(int ep)
{
	EPW(ep, 5000);
}

/* ---- accept_nb: nonblocking listener, readiness, accept4 flags ---------- */

static void accept_nb_srv(int lfd)
{
	set_nonblock(lfd, true);
	RC("accept (nonblocking, none pending)", accept(lfd, NULL, NULL));
	POLL1(lfd, POLLIN, 0);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, lfd, EPOLLIN, 5, "epoll_ctl(ADD listener, IN)");
	EPW(ep, 0);
	tell();
	await();
	POLL1(lfd, POLLIN | POLLOUT, 5000);
	SELECT(lfd, true, true, false, 0);
	EPW(ep, 0);
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	say("accept4(SOCK_NONBLOCK|SOCK_CLOEXEC): %s", fd >= 0 ? "ok" : ename(errno));
	if (fd < 0)
		die("accept4");
	say("O_NONBLOCK: %s, FD_CLOEXEC: %s", fcntl(fd, F_GETFL) & O_NONBLOCK ? "set" : "clear",
	    fcntl(fd, F_GETFD) & FD_CLOEXEC ? "set" : "clear");
	RECV(fd, 10, 0);
	RC("accept again", accept(lfd, NULL, NULL));
	POLL1(lfd, POLLIN, 0);
	EPW(ep, 0);
	tell();
	await();
	wait_readable(fd);
	RECV(fd, 10, 0);
	POLL1(lfd, POLLIN, 5000);
	int fd2 = accept(lfd, NULL, NULL);
	say("accept (second connection): %s", fd2 >= 0 ? "ok" : ename(errno));
	if (fd2 >= 0) {
		say("O_NONBLOCK inherited from the listener: %s, FD_CLOEXEC: %s",
		    fcntl(fd2, F_GETFL) & O_NONBLOCK ? "yes" : "no", fcntl(fd2, F_GETFD) & FD_CLOEXEC ? "set" : "clear");
		recv_exact(fd2, 2);
		close(fd2);
	}
	tell();
	close(ep);
	close(fd);
}

static void accept_nb_cli(const struct addr *a)
{
	await();
	int fd = conn(a);
	say("connected");
	tell();
	await();
	SEND(fd, "x", 0);
	int fd2 = conn(a);
	SEND(fd2, "yz", 0);
	tell();
	await();
	close(fd2);
	close(fd);
}

static void sc_accept_nb(void) { pair(AF_INET, accept_nb_srv, accept_nb_cli); }

/* ---- accept_ready_*: once the listener is reported readable, accept works */
/* A thread connects ACC_RACE_N times while the main thread waits for the
 * nonblocking listener to be readable and accepts.  As the kernel: every
 * readiness report is followed by a successful accept. */

#define ACC_RACE_N 1000

struct acc_race {
	struct addr a;
	int fds[ACC_RACE_N];
	int failed;
};

static void *acc_race_connector(void *arg)
{
	struct acc_race *r = arg;
	for (int i = 0; i < ACC_RACE_N; i++) {
		r->fds[i] = socket(r->a.ss.ss_family, SOCK_STREAM, 0);
		if (r->fds[i] < 0 || connect(r->fds[i], (struct sockaddr *)&r->a.ss, r->a.len) < 0)
			r->failed++;
	}
	return NULL;
}

enum acc_wait { ACC_SELECT, ACC_POLL, ACC_EPOLL };

/* Wait up to 5 s for the listener to be readable: true if it is. */
static bool acc_wait_readable(int lfd, int ep, enum acc_wait how)
{
	if (how == ACC_SELECT) {
		fd_set rs;
		FD_ZERO(&rs);
		FD_SET(lfd, &rs);
		struct timeval tv = { 5, 0 };
		return select(lfd + 1, &rs, NULL, NULL, &tv) == 1 && FD_ISSET(lfd, &rs);
	}
	if (how == ACC_POLL) {
		struct pollfd p = { lfd, POLLIN, 0 };
		return poll(&p, 1, 5000) == 1 && (p.revents & POLLIN);
	}
	struct epoll_event ev;
	return epoll_wait(ep, &ev, 1, 5000) == 1 && (ev.events & EPOLLIN);
}

static void accept_ready(enum acc_wait how)
{
	role = "proc";
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct addr la;
	loopback_of(AF_INET, 0, &la);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&la.ss, la.len) < 0 || listen(lfd, 4096) < 0)
		die("listener: %s", ename(errno));
	int ep = -1;
	if (how == ACC_EPOLL) {
		ep = epoll_create1(0);
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
			die("epoll_ctl: %s", ename(errno));
	}
	static struct acc_race r;
	memset(&r, 0, sizeof r);
	get_name(lfd, false, &r.a);
	pthread_t th;
	if (pthread_create(&th, NULL, acc_race_connector, &r) != 0)
		die("pthread_create");
	int accepted = 0, eagain_after_ready = 0, other = 0;
	bool stuck = false;
	while (accepted < ACC_RACE_N && !stuck) {
		if (!acc_wait_readable(lfd, ep, how)) {
			stuck = true;
			break;
		}
		for (bool first = true;; first = false) {
			int fd = accept(lfd, NULL, NULL);
			if (fd >= 0) {
				accepted++;
				close(fd);
				continue;
			}
			if (errno == EAGAIN && first)
				eagain_after_ready++;
			else if (errno != EAGAIN)
				other++;
			break;
		}
	}
	pthread_join(th, NULL);
	say("connects failed: %d", r.failed);
	say("accepted %d, EAGAIN after ready %d, other errors %d%s", accepted, eagain_after_ready, other,
	    stuck ? ", STUCK (not readable within 5 s)" : "");
	for (int i = 0; i < ACC_RACE_N; i++)
		if (r.fds[i] >= 0)
			close(r.fds[i]);
	if (ep >= 0)
		close(ep);
	close(lfd);
}

static void sc_accept_ready_select(void) { accept_ready(ACC_SELECT); }
static void sc_accept_ready_poll(void) { accept_ready(ACC_POLL); }
static void sc_accept_ready_epoll(void) { accept_ready(ACC_EPOLL); }

/* ---- loop_drain_*: one event loop drains the peer of its own full client */
/* A nonblocking client with SO_SNDBUF 1024 fills its socket (EAGAIN); the
 * same single-threaded loop then drains the server end and waits for the
 * client to become writable again, as an asyncio sock_sendall does. */

static int loop_wait(enum acc_wait how, int ep, int srv, int cli, bool *rd, bool *wr)
{
	*rd = *wr = false;
	if (how == ACC_SELECT) {
		fd_set rs, ws;
		FD_ZERO(&rs);
		FD_ZERO(&ws);
		FD_SET(srv, &rs);
		FD_SET(cli, &ws);
		struct timeval tv = { 5, 0 };
		int n = select((srv > cli ? srv : cli) + 1, &rs, &ws, NULL, &tv);
		*rd = n > 0 && FD_ISSET(srv, &rs);
		*wr = n > 0 && FD_ISSET(cli, &ws);
		return n;
	}
	if (how == ACC_POLL) {
		struct pollfd p[2] = { { srv, POLLIN, 0 }, { cli, POLLOUT, 0 } };
		int n = poll(p, 2, 5000);
		*rd = n > 0 && (p[0].revents & POLLIN);
		*wr = n > 0 && (p[1].revents & POLLOUT);
		return n;
	}
	struct epoll_event ev[2];
	int n = epoll_wait(ep, ev, 2, 5000);
	for (int i = 0; i < n; i++) {
		if (ev[i].data.fd == srv && (ev[i].events & EPOLLIN))
			*rd = true;
		if (ev[i].data.fd == cli && (ev[i].events & EPOLLOUT))
			*wr = true;
	}
	return n;
}

static void loop_drain(enum acc_wait how)
{
	role = "proc";
	struct addr la;
	int lfd = listener(AF_INET, false, &la);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &(int){ 1024 }, sizeof(int));
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(c, (struct sockaddr *)&la.ss, la.len) < 0)
		die("connect: %s", ename(errno));
	int s = acc(lfd);
	set_nonblock(c, true);
	set_nonblock(s, true);
	uint8_t b[4096];
	size_t sent = 0, got = 0;
	for (int i = 0; i < 100000; i++) {
		fill(b, sizeof b, sent, 41);
		ssize_t w = send(c, b, sizeof b, 0);
		if (w < 0)
			break;
		sent += (size_t)w;
	}
	say("client filled its socket: %s", errno == EAGAIN ? "EAGAIN" : ename(errno));
	int ep = -1;
	if (how == ACC_EPOLL) {
		ep = epoll_create1(0);
		struct epoll_event e1 = { .events = EPOLLIN, .data.fd = s }, e2 = { .events = EPOLLOUT, .data.fd = c };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &e1) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &e2) < 0)
			die("epoll_ctl: %s", ename(errno));
	}
	struct rx r;
	rx_init(&r);
	bool writable = false;
	for (int round = 0; round < 1000 && !writable; round++) {
		bool rd, wr;
		if (loop_wait(how, ep, s, c, &rd, &wr) <= 0)
			break;
		for (ssize_t n; rd && (n = recv(s, b, sizeof b, 0)) > 0;) {
			rx_feed(&r, b, (size_t)n, 0, 41);
			got += (size_t)n;
		}
		writable = wr;
	}
	say("client writable again after the server drained: %s", writable ? "yes" : "NO (stuck 5 s)");
	/* what is still in flight arrives too */
	for (int i = 0; i < 1000 && got < sent; i++) {
		struct pollfd p = { s, POLLIN, 0 };
		if (poll(&p, 1, 5000) != 1)
			break;
		for (ssize_t n; (n = recv(s, b, sizeof b, 0)) > 0;) {
			rx_feed(&r, b, (size_t)n, 0, 41);
			got += (size_t)n;
		}
	}
	say("server received what the client sent: %s, pattern %s", got == sent ? "yes" : "NO",
	    r.mismatch ? "MISMATCH" : "ok");
	if (ep >= 0)
		close(ep);
	close(c);
	close(s);
	close(lfd);
}

static void sc_loop_drain_epoll(void) { loop_drain(ACC_EPOLL); }
static void sc_loop_drain_poll(void) { loop_drain(ACC_POLL); }
static void sc_loop_drain_select(void) { loop_drain(ACC_SELECT); }

/* ---- backlog_order: connections queue before accept, FIFO -------------- */

static void backlog_srv(int lfd)
{
	int fds[4];
	await();
	for (int i = 0; i < 4; i++) {
		fds[i] = acc(lfd);
		say("accept #%d", i);
		recv_exact(fds[i], 1);
	}
	for (int i = 0; i < 4; i++) {
		char b[16];
		snprintf(b, sizeof b, "bye %d", i);
		SEND(fds[i], b, 0);
	}
	await();
	for (int i = 0; i < 4; i++)
		close(fds[i]);
}

static void backlog_cli(const struct addr *a)
{
	int fds[4];
	for (int i = 0; i < 4; i++) {
		fds[i] = conn(a);
		char b[2] = { (char)('0' + i), 0 };
		SEND(fds[i], b, 0);
	}
	say("4 connections made before any accept");
	tell();
	for (int i = 0; i < 4; i++)
		recv_exact(fds[i], 5);
	tell();
	for (int i = 0; i < 4; i++)
		close(fds[i]);
}

static void sc_backlog_order(void) { pair(AF_INET, backlog_srv, backlog_cli); }

/* ---- backlog_order_epoll: 16 queued, accepted one per epoll wake-up ----- */

enum { BQ = 16 };

static void backlog_epoll_srv(int lfd)
{
	int fds[BQ], ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = lfd };
	RC("epoll_ctl", epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev));
	await();
	char got[BQ + 1] = { 0 };
	for (int i = 0; i < BQ; i++) {
		struct epoll_event out;
		if (epoll_wait(ep, &out, 1, 5000) != 1)
			say("epoll_wait: listener not ready at #%d", i);
		fds[i] = acc(lfd);
		char b;
		if (recv(fds[i], &b, 1, MSG_WAITALL) == 1)
			got[i] = b;
	}
	say("accept order: %s", got);
	for (int i = 0; i < BQ; i++)
		close(fds[i]);
	close(ep);
	await();
}

static void backlog_epoll_cli(const struct addr *a)
{
	int fds[BQ];
	for (int i = 0; i < BQ; i++) {
		fds[i] = conn(a);
		char b = (char)('a' + i);
		if (send(fds[i], &b, 1, 0) != 1)
			say("send #%d failed", i);
	}
	say("%d connections made before any accept", BQ);
	tell();
	for (int i = 0; i < BQ; i++)
		RECV(fds[i], 1, 0); /* EOF */
	tell();
	for (int i = 0; i < BQ; i++)
		close(fds[i]);
}

static void sc_backlog_order_epoll(void) { pair(AF_INET, backlog_epoll_srv, backlog_epoll_cli); }

/* ---- options ----------------------------------------------------------- */

static void opts_srv(int lfd)
{
	GETINT(lfd, SOL_SOCKET, SO_ACCEPTCONN, "listener SO_ACCEPTCONN");
	int fd = acc(lfd);
	GETINT(fd, SOL_SOCKET, SO_ACCEPTCONN, "SO_ACCEPTCONN");
	recv_exact(fd, 2);
	SEND(fd, "ok", 0);
	await();
	close(fd);
}

static void opts_cli(const struct addr *a)
{
	int fd = conn(a);
	GETINT(fd, SOL_SOCKET, SO_TYPE, "SO_TYPE");
	GETINT(fd, SOL_SOCKET, SO_DOMAIN, "SO_DOMAIN");
	GETINT(fd, SOL_SOCKET, SO_PROTOCOL, "SO_PROTOCOL");
	GETINT(fd, SOL_SOCKET, SO_ACCEPTCONN, "SO_ACCEPTCONN");
	GETINT(fd, SOL_SOCKET, SO_ERROR, "SO_ERROR");
	SETINT(fd, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY", 1);
	GETINT(fd, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY");
	SETINT(fd, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", 1);
	GETINT(fd, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE");
	SETINT(fd, SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF", 65536);
	GETINT(fd, SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF");
	SETINT(fd, SOL_SOCKET, SO_SNDBUF, "SO_SNDBUF", 65536);
	GETINT(fd, SOL_SOCKET, SO_SNDBUF, "SO_SNDBUF");
	GETINT(fd, SOL_SOCKET, SO_RCVLOWAT, "SO_RCVLOWAT");
	SETINT(fd, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE", 1);
	GETINT(fd, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE");
	GETINT(fd, SOL_SOCKET, SO_REUSEADDR, "SO_REUSEADDR");
	SETINT(fd, SOL_SOCKET, 9999, "bogus option 9999", 1);
	GETINT(fd, SOL_SOCKET, 9999, "bogus option 9999");
	SEND(fd, "hi", 0);
	recv_exact(fd, 2);
	tell();
	close(fd);
}

static void sc_sockopts(void) { pair(AF_INET, opts_srv, opts_cli); }

static void tcpinfo_srv(int lfd)
{
	TCPINFO(lfd);
	int fd = acc(lfd);
	TCPINFO(fd);
	await();
	RC("close", close(fd));
	tell();
}

static void tcpinfo_cli(const struct addr *a)
{
	int fd = conn(a);
	TCPINFO(fd);
	GETINT(fd, IPPROTO_TCP, TCP_MAXSEG, "TCP_MAXSEG");
	tell();
	await();
	wait_readable(fd);
	RECV(fd, 8, 0);
	TCPINFO(fd);
	close(fd);
}

static void sc_tcp_info(void) { pair(AF_INET, tcpinfo_srv, tcpinfo_cli); }

/* ---- fd_numbers: the switch takes no descriptors the app can see -------- */

static int count_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 1024; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			n++;
	return n;
}

static void fdn_srv(int lfd)
{
	int c0 = count_fds();
	struct addr la2;
	int l2 = listener(AF_INET, false, &la2);
	say("open descriptors after socket+bind+listen: %+d", count_fds() - c0);
	close(l2);
	c0 = count_fds();
	int fd = acc(lfd);
	say("open descriptors after accept: %+d", count_fds() - c0);
	int n = open("/dev/null", O_RDONLY);
	say("first free fd after accept = accepted + %d", n - fd);
	close(n);
	recv_exact(fd, 2);
	close(fd);
	say("open descriptors after close: %+d", count_fds() - c0);
}

static void fdn_cli(const struct addr *a)
{
	int c0 = count_fds();
	int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
		die("connect: %s", ename(errno));
	say("open descriptors after socket+connect: %+d", count_fds() - c0);
	int n = open("/dev/null", O_RDONLY);
	say("first free fd after connect = socket + %d", n - fd);
	close(n);
	SEND(fd, "hi", 0);
	close(fd);
	say("open descriptors after close: %+d", count_fds() - c0);
}

static void sc_fd_numbers(void) { pair(AF_INET, fdn_srv, fdn_cli); }

/* ---- dup / dup2 ------------------------------------------------------- */

static void dup_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 7);
	await();
	SEND(fd, "reply", 0);
	recv_exact(fd, 8);
	RECV(fd, 64, 0);
	close(fd);
}

static void dup_cli(const struct addr *a)
{
	int fd = conn(a);
	int d = dup(fd);
	say("dup: %s", d >= 0 ? "ok" : ename(errno));
	RC("write(dup, \"via dup\")", write(d, "via dup", 7));
	RC("close(original)", close(fd));
	RC("fcntl(original, F_GETFD)", fcntl(fd, F_GETFD));
	tell();
	recv_exact(d, 5);
	SEND(d, "still up", 0);
	RC("close(dup)", close(d));
}

static void sc_dup(void) { pair(AF_INET, dup_srv, dup_cli); }

static void dup2_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 8);
	recv_exact(fd, 11);
	RECV(fd, 64, 0);
	close(fd);
}

static void dup2_cli(const struct addr *a)
{
	int fd = conn(a);
	RC("dup2(sock, 100)", dup2(fd, 100));
	RC("close(original)", close(fd));
	SEND(100, "via dup2", 0);
	int f = fcntl(100, F_DUPFD_CLOEXEC, 200);
	say("fcntl(F_DUPFD_CLOEXEC, 200) >= 200: %s", f >= 200 ? "yes" : "no");
	RC("close(100)", close(100));
	SEND(f, "via F_DUPFD", 0);
	RC("close(last)", close(f));
}

static void sc_dup2(void) { pair(AF_INET, dup2_srv, dup2_cli); }

/* dup2 over a switched socket closes that socket's connection */
static void dup2r_srv(int lfd)
{
	int a = acc(lfd), b = acc(lfd);
	recv_exact(a, 1);
	recv_exact(b, 1);
	tell();
	await();
	say("connection B:");
	RECV(b, 64, 0);
	say("connection A:");
	recv_exact(a, 16);
	await();
	RECV(a, 64, 0);
	close(a);
	close(b);
}

static void dup2r_cli(const struct addr *a)
{
	int fa = conn(a);
	SEND(fa, "A", 0);
	int fb = conn(a);
	SEND(fb, "B", 0);
	await();
	int r = dup2(fa, fb);
	say("dup2(A, B) returned B: %s", r == fb ? "yes" : rcs(r, errno));
	SEND(fb, "A via B's number", 0);
	tell();
	close(fa);
	close(fb);
	tell();
}

static void sc_dup2_replace(void) { pair(AF_INET, dup2r_srv, dup2r_cli); }

/* ---- fork: shared connection ------------------------------------------- */

static int g_fd;
static int g_gsync[2];

static void fork_child_writer(void *arg)
{
	(void)arg;
	SEND(g_fd, "from child", 0);
	recv_exact(g_fd, 3);
	char c;
	if (read(g_gsync[0], &c, 1) != 1)
		die("parent went away");
	SEND(g_fd, "second", 0);
	say("exiting without close");
}

static void fork_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 10);
	SEND(fd, "ack", 0);
	recv_exact(fd, 6);
	RECV(fd, 64, 0);
	close(fd);
}

static void fork_cli(const struct addr *a)
{
	g_fd = conn(a);
	if (pipe(g_gsync) < 0)
		die("pipe");
	struct proc ch = spawn("client-child", fork_child_writer, NULL);
	RC("parent: close its copy", close(g_fd));
	if (write(g_gsync[1], "!", 1) != 1)
		die("pipe");
	reap(&ch);
}

static void sc_fork_after_connect(void) { pair(AF_INET, fork_srv, fork_cli); }

/* ---- fork_opts: the socket's options are the open file's, shared by the
 * processes after fork: a timeout or O_NONBLOCK one of them sets holds for
 * the other, and SO_LINGER 0 makes the last close a reset ------------- */

static int g_po[2], g_op[2]; /* parent -> child, child -> parent */

static void opts_child(void *arg)
{
	(void)arg;
	char c;
	if (read(g_po[0], &c, 1) != 1) /* the parent set SO_RCVTIMEO */
		die("parent went away");
	RECV(g_fd, 10, 0); /* nothing comes: the parent's 50 ms timeout */
	int fl = fcntl(g_fd, F_GETFL);
	RC("fcntl(O_NONBLOCK on)", fcntl(g_fd, F_SETFL, fl | O_NONBLOCK));
	if (write(g_op[1], "!", 1) != 1)
		die("pipe");
	if (read(g_po[0], &c, 1) != 1) /* the parent set SO_LINGER {1, 0} and closed its copy */
		die("parent went away");
	say("exiting without close (the last holder)");
}

static void fork_opts_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void fork_opts_cli(const struct addr *a)
{
	g_fd = conn(a);
	if (pipe(g_po) < 0 || pipe(g_op) < 0)
		die("pipe");
	struct proc ch = spawn("client-child", opts_child, NULL);
	struct timeval tv = { 0, 50000 };
	RC("setsockopt(SO_RCVTIMEO, 50 ms)", setsockopt(g_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
	if (write(g_po[1], "!", 1) != 1)
		die("pipe");
	char c;
	if (read(g_op[0], &c, 1) != 1) /* the child set O_NONBLOCK */
		die("child went away");
	RECV(g_fd, 10, 0); /* the child's O_NONBLOCK: at once */
	struct linger l = { 1, 0 };
	RC("setsockopt(SO_LINGER, {1, 0})", setsockopt(g_fd, SOL_SOCKET, SO_LINGER, &l, sizeof l));
	RC("close its copy", close(g_fd));
	if (write(g_po[1], "!", 1) != 1)
		die("pipe");
	reap(&ch);
	tell();
}

static void sc_fork_opts(void) { pair(AF_INET, fork_opts_srv, fork_opts_cli); }

static void keep_child(void *arg)
{
	(void)arg;
	SEND(g_fd, "child", 0);
	say("exiting without close");
}

static void keep_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 5);
	await();
	POLL1(fd, POLLIN, 200);
	tell();
	recv_exact(fd, 6);
	RECV(fd, 64, 0);
	close(fd);
}

static void keep_cli(const struct addr *a)
{
	g_fd = conn(a);
	struct proc ch = spawn("client-child", keep_child, NULL);
	reap(&ch);
	tell();
	await();
	SEND(g_fd, "parent", 0);
	RC("close", close(g_fd));
}

static void sc_fork_parent_keeps(void) { pair(AF_INET, keep_srv, keep_cli); }

/* fork + exec: an inherited connected socket in a new program (inetd) */
static void exec_child(void *arg)
{
	(void)arg;
	char fdarg[16], reparg[16];
	snprintf(fdarg, sizeof fdarg, "%d", g_fd);
	snprintf(reparg, sizeof reparg, "%d", rep_fd);
	execl(self_exe, "sem", "__exec_writer", fdarg, reparg, (char *)NULL);
	die("exec: %s", ename(errno));
}

static int exec_writer(int fd, int rfd)
{
	rep_fd = rfd;
	role = "exec-child";
	handle(SIGPIPE, on_sigpipe);
	handle(SIGALRM, on_alarm);
	alarm(WD_CHILD);
	struct addr p;
	get_name(fd, true, &p);
	say("inherited socket: getpeername %s", adesc(&p));
	SEND(fd, "from exec", 0);
	recv_exact(fd, 2);
	RC("close", close(fd));
	return 0;
}

static void exec_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 9);
	SEND(fd, "ok", 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void exec_cli(const struct addr *a)
{
	g_fd = conn(a);
	struct proc ch = spawn("exec-child", exec_child, NULL);
	RC("parent: close its copy", close(g_fd));
	reap(&ch);
}

static void sc_exec_inherit(void) { pair(AF_INET, exec_srv, exec_cli); }

/* fork + exec: the new program sees a TCP socket (options, names) and the
 * peer's close as end-of-file */
static void exec_child2(void *arg)
{
	(void)arg;
	char fdarg[16], reparg[16];
	snprintf(fdarg, sizeof fdarg, "%d", g_fd);
	snprintf(reparg, sizeof reparg, "%d", rep_fd);
	execlp(self_exe, "sem", "__exec_reader", fdarg, reparg, (char *)NULL);
	die("exec: %s", ename(errno));
}

static int exec_reader(int fd, int rfd)
{
	rep_fd = rfd;
	role = "exec-child";
	handle(SIGPIPE, on_sigpipe);
	handle(SIGALRM, on_alarm);
	alarm(WD_CHILD);
	int v = -1, one = 1;
	socklen_t l = sizeof v;
	RC("getsockopt SO_DOMAIN", getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l));
	say("domain is AF_INET: %d", v == AF_INET);
	l = sizeof v;
	RC("getsockopt SO_TYPE", getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l));
	say("type is SOCK_STREAM: %d", v == SOCK_STREAM);
	l = sizeof v;
	RC("getsockopt SO_PROTOCOL", getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l));
	say("protocol is TCP: %d", v == IPPROTO_TCP);
	RC("setsockopt TCP_NODELAY", setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
	l = sizeof v;
	RC("getsockopt TCP_NODELAY", getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &l));
	say("nodelay: %d", v != 0);
	struct addr me, p;
	get_name(fd, false, &me);
	get_name(fd, true, &p);
	say("getsockname %s, getpeername %s", adesc(&me), adesc(&p));
	int d = dup(fd);
	struct addr p2;
	get_name(d, true, &p2);
	say("dup'ed fd has the same peer: %d", p2.len == p.len && memcmp(&p2.ss, &p.ss, p.len) == 0);
	close(d);
	SEND(fd, "ready", 0);
	recv_exact(fd, 3);
	RECV(fd, 64, 0);
	POLL1(fd, POLLIN | POLLRDHUP, 1000);
	RC("close", close(fd));
	return 0;
}

static void exec2_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 5);
	SEND(fd, "bye", 0);
	RC("server close", close(fd));
}

static void exec2_cli(const struct addr *a)
{
	g_fd = conn(a);
	struct proc ch = spawn("exec-child", exec_child2, NULL);
	RC("parent: close its copy", close(g_fd));
	reap(&ch);
}

static void sc_exec_eof(void) { pair(AF_INET, exec2_srv, exec2_cli); }

/* SCM_RIGHTS: a connected socket sent to another process over a Unix socket */
static int g_sp[2];

static void scm_receiver(void *arg)
{
	(void)arg;
	char b;
	struct iovec v = { &b, 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	if (recvmsg(g_sp[1], &m, 0) != 1)
		die("recvmsg: %s", ename(errno));
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		die("no fd received");
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof fd);
	int v2 = -1;
	socklen_t l = sizeof v2;
	RC("getsockopt SO_DOMAIN", getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v2, &l));
	say("domain is AF_INET: %d", v2 == AF_INET);
	struct addr me, p;
	get_name(fd, false, &me);
	get_name(fd, true, &p);
	say("getsockname %s, getpeername %s", adesc(&me), adesc(&p));
	SEND(fd, "via passed fd", 0);
	recv_exact(fd, 2);
	RC("shutdown SHUT_WR", shutdown(fd, SHUT_WR));
	RECV(fd, 64, 0);
	RC("close", close(fd));
}

static void scm_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 13);
	SEND(fd, "ok", 0);
	RECV(fd, 64, 0);
	RC("server close", close(fd));
}

static void scm_cli(const struct addr *a)
{
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, g_sp) < 0)
		die("socketpair");
	struct proc ch = spawn("receiver", scm_receiver, NULL);
	int fd = conn(a);
	char b = 'F';
	struct iovec v = { &b, 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	RC("sendmsg SCM_RIGHTS", sendmsg(g_sp[0], &m, 0));
	RC("sender: close its copy", close(fd));
	reap(&ch);
}

static void sc_scm_rights(void) { pair(AF_INET, scm_srv, scm_cli); }

/* a forked helper closes its copy of the listener: the listener lives on */
static int g_lfd;
static void close_listener_child(void *arg)
{
	(void)arg;
	RC("close inherited listener", close(g_lfd));
}

static void flisten_srv(int lfd)
{
	g_lfd = lfd;
	struct proc h = spawn("helper", close_listener_child, NULL);
	reap(&h);
	tell();
	int fd = acc(lfd);
	recv_exact(fd, 5);
	SEND(fd, "world", 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void flisten_cli(const struct addr *a)
{
	await();
	int fd = conn(a);
	SEND(fd, "hello", 0);
	recv_exact(fd, 5);
	close(fd);
}

static void sc_fork_listener(void) { pair(AF_INET, flisten_srv, flisten_cli); }

/* O_NONBLOCK belongs to the open file: a forked helper that sets it on the
 * inherited listener makes the parent's accept non-blocking too (a
 * pre-forked worker switching the shared listener to non-blocking) */
static void nonblock_listener_child(void *arg)
{
	(void)arg;
	int fl = fcntl(g_lfd, F_GETFL);
	RC("fcntl(F_SETFL, O_NONBLOCK) in the child", fcntl(g_lfd, F_SETFL, fl | O_NONBLOCK));
}

static void fnb_srv(int lfd)
{
	g_lfd = lfd;
	struct proc h = spawn("helper", nonblock_listener_child, NULL);
	reap(&h);
	int fd = accept(lfd, NULL, NULL);
	say("accept with nothing queued = %s", rcs(fd, errno));
	if (fd >= 0)
		close(fd);
	RC("fcntl(F_SETFL, 0)", fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) & ~O_NONBLOCK));
	tell();
	fd = acc(lfd);
	recv_exact(fd, 5);
	SEND(fd, "world", 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void sc_fork_nonblock_listener(void) { pair(AF_INET, fnb_srv, flisten_cli); }

/* pre-fork server: two workers accept on one listener, once each */
static void worker(void *arg)
{
	(void)arg;
	int fd = acc(g_lfd);
	say("accepted");
	recv_exact(fd, 1);
	SEND(fd, "ok", 0);
	RECV(fd, 8, 0);
	close(fd);
}

static void prefork_srv(int lfd)
{
	g_lfd = lfd;
	struct proc w1 = spawn("worker", worker, NULL);
	struct proc w2 = spawn("worker", worker, NULL);
	tell();
	reap(&w1);
	reap(&w2);
}

static void prefork_cli(const struct addr *a)
{
	await();
	for (int i = 0; i < 2; i++) {
		int fd = conn(a);
		SEND(fd, "x", 0);
		recv_exact(fd, 2);
		close(fd);
	}
}

static void sc_prefork_accept(void) { pair(AF_INET, prefork_srv, prefork_cli); }

/* pre-fork burst: rounds of 8 workers that accept once each while 8 clients
 * connect at the same moment; a connection one worker took off the shared
 * backlog and never accepted would leave a sibling and a client hanging */
#define BURST_N 8
#define BURST_ROUNDS 4

static void burst_worker(void *arg)
{
	(void)arg;
	int fd = acc(g_lfd);
	char c;
	ssize_t r = recv(fd, &c, 1, 0);
	if (r != 1 || send(fd, &c, 1, 0) != 1)
		die("echo: %s", r == 0 ? "EOF" : ename(errno));
	r = recv(fd, &c, 1, 0); /* until the client closes */
	if (r != 0)
		say("after the echo: recv = %s", rcs(r, errno));
	close(fd);
}

static int burst_go[2] = { -1, -1 }; /* EOF on [0] releases every client at once */

static void burst_client(void *arg)
{
	const struct addr *a = arg;
	char c;
	close(burst_go[1]);
	while (read(burst_go[0], &c, 1) < 0 && errno == EINTR)
		;
	int fd = conn(a);
	if (send(fd, "e", 1, 0) != 1 || recv(fd, &c, 1, 0) != 1 || c != 'e')
		die("echo: %s", ename(errno));
	close(fd);
}

/* Wait for n processes; how many exited with status 0. */
static int reap_ok(struct proc *p, int n)
{
	int ok = 0;
	for (int i = 0; i < n; i++) {
		int st = reap_status(&p[i]);
		ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	return ok;
}

static void burst_srv(int lfd)
{
	g_lfd = lfd;
	int ok = 0;
	for (int round = 0; round < BURST_ROUNDS; round++) {
		struct proc w[BURST_N];
		for (int i = 0; i < BURST_N; i++)
			w[i] = spawn("worker", burst_worker, NULL);
		usleep(20000); /* margin: the workers are asleep in accept */
		tell();
		ok += reap_ok(w, BURST_N);
	}
	say("%d of %d workers accepted one connection and echoed", ok, BURST_N * BURST_ROUNDS);
}

static void burst_cli(const struct addr *a)
{
	int ok = 0;
	for (int round = 0; round < BURST_ROUNDS; round++) {
		await();
		if (pipe(burst_go) < 0)
			die("pipe: %s", ename(errno));
		struct proc c[BURST_N];
		for (int i = 0; i < BURST_N; i++)
			c[i] = spawn("client", burst_client, (void *)a);
		close(burst_go[0]);
		close(burst_go[1]);
		ok += reap_ok(c, BURST_N);
	}
	say("%d of %d connections echoed", ok, BURST_N * BURST_ROUNDS);
}

static void sc_prefork_burst(void) { pair(AF_INET, burst_srv, burst_cli); }

/* ---- iovec, sendmsg/recvmsg, recvfrom, sendfile ----------------------- */

static void iovec_srv(int lfd)
{
	int fd = acc(lfd);
	await();
	usleep(SETTLE_US);
	char a[2], b[5], c[10];
	struct iovec v[3] = { { a, 2 }, { b, 5 }, { c, 10 } };
	errno = 0;
	ssize_t r = readv(fd, v, 3);
	say("readv(2+5+10) = %s [\"%s\", \"%s\", \"%s\"]", rcs(r, errno), esc(a, 2), esc(b, 5),
	    esc(c, r > 7 ? (size_t)r - 7 : 0));
	char d[1], e[1], f[4];
	struct iovec w[3] = { { d, 1 }, { e, 1 }, { f, 4 } };
	struct sockaddr_storage ss;
	char ctl[64];
	struct msghdr m;
	memset(&m, 0, sizeof m);
	m.msg_name = &ss;
	m.msg_namelen = sizeof ss;
	m.msg_iov = w;
	m.msg_iovlen = 3;
	m.msg_control = ctl;
	m.msg_controllen = sizeof ctl;
	m.msg_flags = 0x4000000;
	errno = 0;
	r = recvmsg(fd, &m, 0);
	say("recvmsg(1+1+4) = %s \"%s\" msg_namelen=%u msg_controllen=%zu msg_flags=%s", rcs(r, errno),
	    esc(d, r > 0 ? 1 : 0), (unsigned)m.msg_namelen, (size_t)m.msg_controllen, flagstr(m.msg_flags));
	tell();
	/* 900 KiB written with one writev, read with a 2-element readv loop */
	struct rx rx;
	rx_init(&rx);
	uint8_t *p = malloc(80000);
	while (rx.got < 900 * KiB) {
		size_t want = 900 * KiB - rx.got;
		struct iovec two[2] = { { p, want < 40000 ? want : 40000 }, { p + 40000, want > 40000 ? (want - 40000 < 40000 ? want - 40000 : 40000) : 0 } };
		ssize_t k = readv(fd, two, 2);
		if (k <= 0) {
			say("readv: %s", k == 0 ? "EOF" : ename(errno));
			break;
		}
		rx_feed(&rx, p, (size_t)k, 0, 51);
	}
	rx_say(&rx, "readv loop");
	free(p);
	await();
	usleep(SETTLE_US);
	char z[10];
	struct sockaddr_storage from;
	memset(&from, 0x55, sizeof from);
	socklen_t fl = sizeof from;
	errno = 0;
	r = recvfrom(fd, z, sizeof z, 0, (struct sockaddr *)&from, &fl);
	say("recvfrom(with address) = %s \"%s\" addrlen=%u", rcs(r, errno), esc(z, r > 0 ? (size_t)r : 0),
	    (unsigned)fl);
	RECV(fd, 64, 0);
	close(fd);
}

static void iovec_cli(const struct addr *a)
{
	int fd = conn(a);
	struct iovec v[3] = { { (void *)"abc", 3 }, { (void *)"defg", 4 }, { (void *)"hi", 2 } };
	RC("writev(\"abc\", \"defg\", \"hi\")", writev(fd, v, 3));
	struct iovec w[4] = { { (void *)"12", 2 }, { (void *)"345", 3 }, { (void *)"", 0 }, { (void *)"6789", 4 } };
	struct msghdr m;
	memset(&m, 0, sizeof m);
	m.msg_iov = w;
	m.msg_iovlen = 4;
	RC("sendmsg(\"12\", \"345\", \"\", \"6789\")", sendmsg(fd, &m, 0));
	tell();
	await();
	size_t part = 300 * KiB;
	uint8_t *big = malloc(3 * part);
	fill(big, 3 * part, 0, 51);
	struct iovec bv[3] = { { big, part }, { big + part, part }, { big + 2 * part, part } };
	RC("writev(3 x 300 KiB)", writev(fd, bv, 3));
	free(big);
	RC("sendto(\"zz\", with an address)", sendto(fd, "zz", 2, 0, (const struct sockaddr *)&a->ss, a->len));
	tell();
	RC("close", close(fd));
}

static void sc_iovec(void) { pair(AF_INET, iovec_srv, iovec_cli); }

static void sendfile_srv(int lfd)
{
	int fd = acc(lfd);
	recv_stream_at(fd, 300000, 61, 0);
	recv_stream_at(fd, 5000, 61, 1000);
	recv_stream_at(fd, 1000, 61, 299000);
	RECV(fd, 64, 0);
	close(fd);
}

static void sendfile_cli(const struct addr *a)
{
	int fd = conn(a);
	char path[] = "/tmp/sem-sendfile.XXXXXX";
	int f = mkstemp(path);
	if (f < 0)
		die("mkstemp: %s", ename(errno));
	unlink(path);
	uint8_t *b = malloc(300000);
	fill(b, 300000, 0, 61);
	if (write(f, b, 300000) != 300000)
		die("write file");
	free(b);
	off_t off = 0;
	size_t total = 0;
	while (total < 300000) {
		ssize_t r = sendfile(fd, f, &off, 300000 - total);
		if (r <= 0) {
			say("sendfile: %s", rcs(r, errno));
			break;
		}
		total += (size_t)r;
	}
	say("sendfile(offset ptr) total %zu, offset now %ld", total, (long)off);
	lseek(f, 1000, SEEK_SET);
	RC("sendfile(NULL offset, 5000) from position 1000", sendfile(fd, f, NULL, 5000));
	say("file position now %ld", (long)lseek(f, 0, SEEK_CUR));
	off = 299000;
	RC("sendfile(offset 299000, 10000) near EOF", sendfile(fd, f, &off, 10000));
	say("offset now %ld", (long)off);
	RC("sendfile(at EOF)", sendfile(fd, f, &off, 10000));
	close(f);
	RC("close", close(fd));
}

static void sc_sendfile(void) { pair(AF_INET, sendfile_srv, sendfile_cli); }

/* A temporary file of n bytes of pattern `seed` (unlinked). */
static int pattern_file(size_t n, uint32_t seed)
{
	char path[] = "/tmp/sem-file.XXXXXX";
	int f = mkstemp(path);
	if (f < 0)
		die("mkstemp: %s", ename(errno));
	unlink(path);
	uint8_t *b = malloc(n);
	fill(b, n, 0, seed);
	if (write(f, b, n) != (ssize_t)n)
		die("write file");
	free(b);
	return f;
}

static void say_cork(int fd)
{
	int v = -1;
	socklen_t l = sizeof v;
	int r = getsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, &l);
	say("getsockopt(TCP_CORK) = %d, value %d, len %u", r, v, (unsigned)l);
}

/* ---- cork: TCP_CORK and MSG_MORE hold data, uncork sends it ------------- */

static void cork_srv(int lfd)
{
	int fd = acc(lfd);
	await(); /* corked: header + small sendfile written */
	POLL1(fd, POLLIN, 50); /* held: nothing readable */
	tell();
	recv_exact(fd, 8);
	recv_stream_at(fd, 3000, 71, 0);
	await(); /* MSG_MORE sent */
	POLL1(fd, POLLIN, 50);
	tell();
	recv_exact(fd, 7);
	await(); /* corked again, a big sendfile */
	POLL1(fd, POLLIN, 2000); /* full segments go out while corked */
	tell();
	recv_stream_at(fd, 300000, 72, 0);
	await(); /* corked, small write, then TCP_NODELAY */
	POLL1(fd, POLLIN, 150); /* NODELAY pushes at once */
	recv_exact(fd, 2);
	tell();
	await(); /* corked, small write, left corked */
	POLL1(fd, POLLIN, 2000); /* the 200 ms cork ceiling */
	recv_exact(fd, 4);
	tell();
	RECV(fd, 64, 0);
	close(fd);
}

static void cork_cli(const struct addr *a)
{
	int fd = conn(a);
	int one = 1, zero = 0;
	say_cork(fd);
	RC("setsockopt(TCP_CORK, 1)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	RC("setsockopt(TCP_CORK, short len)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, 2));
	say_cork(fd);
	SEND(fd, "HTTP/1.1", 0);
	int f = pattern_file(3000, 71);
	off_t off = 0;
	RC("sendfile(3000) corked", sendfile(fd, f, &off, 3000));
	close(f);
	tell();
	await();
	RC("setsockopt(TCP_CORK, 0)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
	say_cork(fd);
	SEND(fd, "more", MSG_MORE);
	tell();
	await();
	SEND(fd, "end", 0);
	RC("setsockopt(TCP_CORK, 1)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	f = pattern_file(300000, 72);
	off = 0;
	size_t total = 0;
	while (total < 300000) {
		ssize_t r = sendfile(fd, f, &off, 300000 - total);
		if (r <= 0)
			break;
		total += (size_t)r;
	}
	say("sendfile corked: total %zu, offset %ld", total, (long)off);
	close(f);
	tell();
	await();
	RC("setsockopt(TCP_CORK, 0)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
	RC("setsockopt(TCP_CORK, 1)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	SEND(fd, "nd", 0);
	RC("setsockopt(TCP_NODELAY, 1)", setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
	say_cork(fd);
	tell();
	await();
	RC("setsockopt(TCP_NODELAY, 0)", setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &zero, sizeof zero));
	SEND(fd, "late", 0);
	tell();
	await();
	RC("close", close(fd)); /* still corked: nothing left to send */
}

static void sc_cork(void) { pair(AF_INET, cork_srv, cork_cli); }

/* ---- cork_close: corked data goes out before the FIN -------------------- */

static void cork_close_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 5);
	RECV(fd, 64, 0);
	close(fd);
}

static void cork_close_cli(const struct addr *a)
{
	int fd = conn(a);
	int one = 1;
	RC("setsockopt(TCP_CORK, 1)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	SEND(fd, "bye!!", 0);
	RC("close while corked", close(fd));
}

static void sc_cork_close(void) { pair(AF_INET, cork_close_srv, cork_close_cli); }

/* ---- cork_inherit: set before connect, or on the listener ---------------- */

static void cork_inherit_srv(int lfd)
{
	int one = 1, zero = 0;
	RC("setsockopt(listener, TCP_CORK, 1)", setsockopt(lfd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	tell();
	int fd = acc(lfd);
	say_cork(fd); /* accepted sockets inherit it */
	SEND(fd, "abc", 0);
	tell();
	await(); /* the client saw nothing */
	RC("setsockopt(TCP_CORK, 0)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
	await(); /* the client sent, corked */
	POLL1(fd, POLLIN, 50);
	tell();
	recv_exact(fd, 3);
	RECV(fd, 64, 0);
	close(fd);
}

static void cork_inherit_cli(const struct addr *a)
{
	int one = 1, zero = 0;
	await();
	int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	RC("setsockopt(TCP_CORK, 1) before connect", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
		die("connect: %s", ename(errno));
	say_cork(fd);
	await();
	POLL1(fd, POLLIN, 50);
	tell();
	recv_exact(fd, 3);
	SEND(fd, "xyz", 0);
	tell();
	await();
	RC("setsockopt(TCP_CORK, 0)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
	close(fd);
}

static void sc_cork_inherit(void) { pair(AF_INET, cork_inherit_srv, cork_inherit_cli); }

/* ---- sendfile_nb: nonblocking sendfile into a full window ---------------- */

static void sendfile_nb_srv(int lfd) { drain_compare_srv(lfd, 73); }

static void sendfile_nb_cli(const struct addr *a)
{
	int fd = conn(a);
	set_nonblock(fd, true);
	size_t fsz = 24 * MiB;
	int f = pattern_file(fsz, 73);
	off_t off = 0;
	size_t total = 0;
	bool eagain = false, partial = false;
	while (total < fsz) {
		ssize_t r = sendfile(fd, f, &off, 1 * MiB);
		if (r < 0) {
			eagain = errno == EAGAIN;
			if (!eagain)
				say("sendfile: %s", ename(errno));
			break;
		}
		if (r < (ssize_t)MiB)
			partial = true;
		total += (size_t)r;
	}
	say("window full: partial count %s, then EAGAIN %s; offset == total: %s", partial ? "yes" : "no",
	    eagain ? "yes" : "no", (size_t)off == total ? "yes" : "no");
	say("file position untouched: %s", lseek(f, 0, SEEK_CUR) == 0 ? "yes" : "no");
	POLL1(fd, POLLOUT, 0);
	tell(); /* the reader drains */
	bool stuck = false;
	while (total < fsz) {
		struct pollfd p = { fd, POLLOUT, 0 };
		if (poll(&p, 1, 5000) != 1) {
			stuck = true;
			break;
		}
		ssize_t r = sendfile(fd, f, &off, fsz - total);
		if (r > 0)
			total += (size_t)r;
		else if (r == 0 || errno != EAGAIN) {
			say("sendfile: %s", rcs(r, errno));
			break;
		}
	}
	say("rest of the file sent while the reader drains: %s, offset == total: %s", stuck ? "STUCK" : "yes",
	    (size_t)off == total ? "yes" : "no");
	RC("sendfile at EOF", sendfile(fd, f, &off, 4096));
	close(f);
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	tell_buf(&total, sizeof total);
	await();
	close(fd);
}

static void sc_sendfile_nb(void) { pair(AF_INET, sendfile_nb_srv, sendfile_nb_cli); }

/* ---- more_poll: a request left held by MSG_MORE reaches a peer asleep in
 * poll when the 200 ms ceiling passes (kernel TCP's timer), and its reply
 * comes back: no one waits forever ------------------------------------- */

static void more_poll_srv(int lfd)
{
	int fd = acc(lfd);
	tell();
	uint64_t t0 = now_ms();
	POLL1(fd, POLLIN, 10000);
	say("woken well before the timeout (within 3 s): %s", now_ms() - t0 < 3000 ? "yes" : "no");
	recv_exact(fd, 3);
	SEND(fd, "reply", 0);
	await();
	close(fd);
}

static void more_poll_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	usleep(SETTLE_US); /* the server sleeps in poll by now */
	SEND(fd, "req", MSG_MORE);
	struct pollfd p = { fd, POLLIN, 0 };
	RC("poll(POLLIN, 5000ms) for the reply", poll(&p, 1, 5000));
	recv_exact(fd, 5);
	tell();
	close(fd);
}

static void sc_more_poll(void) { pair(AF_INET, more_poll_srv, more_poll_cli); }

/* ---- cork_twice: TCP_CORK left on; each held send reaches a peer asleep
 * in poll when its own 200 ms are over (the second hold too) ---------- */

static void cork_twice_srv(int lfd)
{
	int fd = acc(lfd);
	for (int i = 0; i < 2; i++) {
		tell();
		uint64_t t0 = now_ms();
		POLL1(fd, POLLIN, 10000);
		say("woken well before the timeout (within 3 s): %s", now_ms() - t0 < 3000 ? "yes" : "no");
		recv_exact(fd, 1);
	}
	tell();
	await();
	close(fd);
}

static void cork_twice_cli(const struct addr *a)
{
	int fd = conn(a);
	int one = 1;
	RC("setsockopt(TCP_CORK, 1)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	await();
	usleep(SETTLE_US); /* the server sleeps in poll by now */
	SEND(fd, "a", 0);
	await(); /* it took "a" (after the 200 ms ceiling) */
	usleep(SETTLE_US);
	SEND(fd, "b", 0);
	await();
	tell();
	close(fd);
}

static void sc_cork_twice(void) { pair(AF_INET, cork_twice_srv, cork_twice_cli); }

/* ---- cork_reset / cork_linger0: a reset sends nothing corked ------------ */

static void cork_reset_srv(int lfd)
{
	int fd = acc(lfd);
	SEND(fd, "unread", 0);
	await();
	usleep(SETTLE_US);
	POLL1(fd, POLLIN | POLLOUT | POLLRDHUP, 0);
	RECV(fd, 64, 0);
	RECV(fd, 64, 0);
	close(fd);
}

static void cork_reset_common(int fd, bool linger0)
{
	int one = 1;
	RC("setsockopt(TCP_CORK, 1)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	SEND(fd, "held", 0);
	if (linger0) {
		struct linger l = { 1, 0 };
		RC("setsockopt(SO_LINGER, {1, 0})", setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l));
	}
	RC("close", close(fd));
	tell();
}

/* closed with our data unread: the reset goes, the corked bytes do not */
static void cork_reset_cli(const struct addr *a)
{
	int fd = conn(a);
	wait_readable(fd);
	cork_reset_common(fd, false);
}

static void cork_linger0_cli(const struct addr *a)
{
	int fd = conn(a);
	wait_readable(fd);
	char b[16];
	RC("recv", recv(fd, b, sizeof b, 0));
	cork_reset_common(fd, true);
}

static void sc_cork_reset(void) { pair(AF_INET, cork_reset_srv, cork_reset_cli); }
static void sc_cork_linger0(void) { pair(AF_INET, cork_reset_srv, cork_linger0_cli); }

/* ---- sendfile_nothing: nothing to read is 0, whatever the socket says ---- */

static void sendfile_nothing_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 10);
	RECV(fd, 100, 0);
	await();
	struct linger l = { 1, 0 };
	RC("setsockopt(SO_LINGER, {1, 0})", setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l));
	RC("close (a reset)", close(fd));
	tell();
}

static void sendfile_nothing_cli(const struct addr *a)
{
	int fd = conn(a);
	int f = pattern_file(10, 7);
	off_t off = 0;
	RC("sendfile(0)", sendfile(fd, f, &off, 0));
	RC("sendfile(10)", sendfile(fd, f, &off, 10));
	RC("sendfile(10) at the file's end", sendfile(fd, f, &off, 10));
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	RC("sendfile(0) after SHUT_WR", sendfile(fd, f, &off, 0));
	RC("sendfile(10) at the file's end after SHUT_WR", sendfile(fd, f, &off, 10));
	off = 0;
	RC("sendfile(10) after SHUT_WR", sendfile(fd, f, &off, 10));
	say("SIGPIPE count: %d", (int)n_sigpipe);
	tell();
	await();
	usleep(SETTLE_US);
	RC("sendfile(0) after a reset", sendfile(fd, f, &off, 0));
	RC("sendfile(10) from a write-only descriptor", sendfile(fd, open("/dev/null", O_WRONLY), NULL, 10));
	RC("sendfile(0) from a write-only descriptor", sendfile(fd, open("/dev/null", O_WRONLY), NULL, 0));
	say("SIGPIPE count: %d", (int)n_sigpipe);
	close(f);
	close(fd);
}

static void sc_sendfile_nothing(void) { pair(AF_INET, sendfile_nothing_srv, sendfile_nothing_cli); }

/* ---- splice: pipe -> socket and socket -> pipe --------------------------- */

static void say_pipe(int pfd, size_t n, uint32_t seed)
{
	uint8_t *b = malloc(n);
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(pfd, b + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	struct rx r;
	rx_init(&r);
	rx_feed(&r, b, got, 0, seed);
	rx_say(&r, "pipe holds");
	free(b);
}

static void splice_srv(int lfd)
{
	int fd = acc(lfd);
	recv_stream_at(fd, 10000, 74, 0);
	int p[2];
	if (pipe(p) < 0)
		die("pipe");
	tell();
	await(); /* the client sent 5000 bytes */
	usleep(SETTLE_US);
	RC("splice(socket -> pipe, 65536)", splice(fd, NULL, p[1], NULL, 65536, 0));
	say_pipe(p[0], 5000, 75);
	set_nonblock(fd, true); /* SPLICE_F_NONBLOCK is about the pipe only */
	RC("splice(nonblocking socket -> pipe) nothing there", splice(fd, NULL, p[1], NULL, 65536, 0));
	set_nonblock(fd, false);
	loff_t o = 0;
	RC("splice(socket -> pipe, off_out)", splice(fd, NULL, p[1], &o, 100, 0));
	tell();
	await(); /* 100000 more, then the client's FIN */
	size_t total = 0;
	for (int i = 0; i < 1000; i++) {
		ssize_t r = splice(fd, NULL, p[1], NULL, 100000 - total, 0);
		if (r <= 0)
			break;
		struct rx x;
		rx_init(&x);
		uint8_t *b = malloc((size_t)r);
		size_t got = 0;
		while (got < (size_t)r) {
			ssize_t k = read(p[0], b + got, (size_t)r - got);
			if (k <= 0)
				break;
			got += (size_t)k;
		}
		rx_feed(&x, b, got, total, 76);
		if (x.mismatch)
			say("pipe data MISMATCH at %" PRIu64, x.bad_at);
		free(b);
		total += got;
		if (total == 100000)
			break;
	}
	say("spliced 100000 through the pipe: %s", total == 100000 ? "yes" : "no");
	RC("splice(socket -> pipe) at EOF", splice(fd, NULL, p[1], NULL, 4096, 0));
	close(p[0]);
	close(p[1]);
	close(fd);
}

static void splice_cli(const struct addr *a)
{
	int fd = conn(a);
	int p[2];
	if (pipe(p) < 0)
		die("pipe");
	uint8_t *b = malloc(100000);
	fill(b, 10000, 0, 74);
	if (write(p[1], b, 10000) != 10000)
		die("write pipe");
	RC("splice(pipe -> socket, 10000)", splice(p[0], NULL, fd, NULL, 10000, 0));
	RC("splice(pipe -> socket, NONBLOCK) empty pipe", splice(p[0], NULL, fd, NULL, 100, SPLICE_F_NONBLOCK));
	loff_t o = 0;
	RC("splice(pipe -> socket, off_in)", splice(p[0], &o, fd, NULL, 100, 0));
	int f = pattern_file(10, 74);
	RC("splice(file -> socket)", splice(f, NULL, fd, NULL, 10, 0));
	close(f);
	await();
	fill(b, 5000, 0, 75);
	RC("send(5000)", send(fd, b, 5000, 0));
	tell();
	await();
	fill(b, 100000, 0, 76);
	size_t off = 0;
	while (off < 100000) {
		ssize_t w = send(fd, b + off, 100000 - off, 0);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	say("sent 100000: %s", off == 100000 ? "yes" : "no");
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	tell();
	close(p[1]);
	RC("splice(pipe -> socket) no writer left", splice(p[0], NULL, fd, NULL, 100, 0));
	close(p[0]);
	free(b);
	close(fd);
}

static void sc_splice(void) { pair(AF_INET, splice_srv, splice_cli); }

/* ================================================================ event scenarios (appended) */

/* CPU time of this process, ms. */
static long cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void say_cpu(long t0, long wall_ms)
{
	long used = cpu_ms() - t0;
	say("cpu while waiting: %s", used * 3 < wall_ms ? "low" : "HIGH (busy loop)");
}

/* three small sends arrive; the client then waits for our go */
static void three_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	SEND(fd, "a", 0);
	SEND(fd, "b", 0);
	SEND(fd, "c", 0);
	tell();
	await();
	close(fd);
}

/* ---- unread_idle: unread data, waiting for something else sleeps -------- */

static void unread_idle_srv(int lfd)
{
	int fd = acc(lfd);
	tell();
	await();
	usleep(SETTLE_US);
	long t0 = cpu_ms();
	POLL1(fd, POLLPRI, 300);
	struct pollfd p[1] = { { fd, 0, 0 } };
	RC("poll(events 0, 300ms)", poll(p, 1, 300));
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLET, 3, "epoll_ctl(ADD, IN|ET)");
	EPW(ep, 0);
	EPW(ep, 300);
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLPRI, 4, "epoll_ctl(MOD, PRI)");
	EPW(ep, 300);
	say_cpu(t0, 1200);
	recv_exact(fd, 3);
	tell();
	close(ep);
	close(fd);
}

static void sc_unread_idle(void) { pair(AF_INET, unread_idle_srv, three_cli); }

/* ---- epoll_close_dup: a registered fd closed while a dup keeps it -------- */

static void close_dup_srv(int lfd)
{
	int fd = acc(lfd);
	int d = dup(fd);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 5, "epoll_ctl(ADD fd, IN)");
	tell();
	await();
	EPW(ep, 5000);
	RC("close(fd) while a dup is open", close(fd));
	EPW(ep, 100); /* the registration lives on with the open file */
	RC("epoll_ctl(DEL, closed fd)", epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL));
	RC("close(dup)", close(d));
	EPW(ep, 100); /* last descriptor gone: removed from the set */
	tell();
	close(ep);
}

static void sc_epoll_close_dup(void) { pair(AF_INET, close_dup_srv, three_cli); }

/* ---- epoll_flags: EPOLLEXCLUSIVE rules, EINVAL/EEXIST/ENOENT/EBADF ------- */

static void flags_srv(int lfd)
{
	int fd = acc(lfd);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, .data.u64 = 1 };
	RC("epoll_ctl(ADD, IN|EXCLUSIVE|ONESHOT)", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLEXCLUSIVE, 6, "epoll_ctl(ADD, IN|EXCLUSIVE)");
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 6, "epoll_ctl(ADD again)");
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLIN, 6, "epoll_ctl(MOD of an EXCLUSIVE entry)");
	EPW(ep, 0);
	tell();
	await();
	EPW(ep, 5000);
	RC("epoll_ctl(DEL)", epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL));
	RC("epoll_ctl(DEL again)", epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL));
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLIN, 6, "epoll_ctl(MOD, not registered)");
	EPCTL(ep, EPOLL_CTL_ADD, ep, EPOLLIN, 6, "epoll_ctl(ADD epfd to itself)");
	EPCTL(fd, EPOLL_CTL_ADD, fd, EPOLLIN, 6, "epoll_ctl(ADD on a socket as epfd)");
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLOUT, 7, "epoll_ctl(ADD, IN|OUT)");
	EPW(ep, 0);
	recv_exact(fd, 3);
	tell();
	close(ep);
	close(fd);
}

static void sc_epoll_flags(void) { pair(AF_INET, flags_srv, three_cli); }

/* ---- epoll_threads: two threads wait on one epoll fd; a third adds ------- */

struct ep_thr {
	int ep;
	int got;
};

static void *ep_waiter(void *arg)
{
	struct ep_thr *t = arg;
	struct epoll_event ev;
	t->got = epoll_wait(t->ep, &ev, 1, 5000);
	return NULL;
}

static void threads_srv(int lfd)
{
	int fd = acc(lfd);
	int ep = epoll_create1(0);
	struct ep_thr a = { ep, -2 }, b = { ep, -2 };
	pthread_t ta, tb;
	pthread_create(&ta, NULL, ep_waiter, &a);
	pthread_create(&tb, NULL, ep_waiter, &b);
	usleep(SETTLE_US); /* both asleep on an epoll fd with nothing in it */
	tell();
	await();           /* the data is there */
	usleep(SETTLE_US);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLONESHOT, 8, "epoll_ctl(ADD, IN|ONESHOT) while two threads wait");
	uint64_t t0 = now_ms();
	while ((a.got == -2 && b.got == -2) && now_ms() - t0 < 3000)
		usleep(1000);
	say("a waiter woke within 3 s: %s", a.got == 1 || b.got == 1 ? "yes" : "no");
	usleep(SETTLE_US);
	say("waiters that got the oneshot event: %d", (a.got == 1) + (b.got == 1));
	EPCTL(ep, EPOLL_CTL_MOD, fd, EPOLLIN, 9, "epoll_ctl(MOD, IN) re-arm");
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	say("both waiters returned an event: %s", a.got == 1 && b.got == 1 ? "yes" : "no");
	recv_exact(fd, 3);
	tell();
	close(ep);
	close(fd);
}

static void sc_epoll_threads(void) { pair(AF_INET, threads_srv, three_cli); }

/* ---- epoll_fork: an epoll fd inherited by a child ------------------------ */

static void fork_ep_srv(int lfd)
{
	int fd = acc(lfd);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 10, "epoll_ctl(ADD, IN)");
	tell();
	await();
	pid_t p = fork();
	if (p == 0) {
		struct epoll_event ev;
		int n = epoll_wait(ep, &ev, 1, 5000);
		_exit(n == 1 && ev.data.u64 == 10 ? 0 : 1);
	}
	int st = 0;
	waitpid(p, &st, 0);
	say("child saw the event on the inherited epoll fd: %s", WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "yes" : "no");
	EPW(ep, 0);
	recv_exact(fd, 3);
	tell();
	close(ep);
	close(fd);
}

static void sc_epoll_fork(void) { pair(AF_INET, fork_ep_srv, three_cli); }

/* ---- epoll_nested: an epoll fd watched by another epoll fd and by poll --- */

static void nested_srv(int lfd)
{
	int fd = acc(lfd);
	int inner = epoll_create1(0), outer = epoll_create1(0);
	EPCTL(inner, EPOLL_CTL_ADD, fd, EPOLLIN, 11, "epoll_ctl(inner, ADD, IN)");
	EPCTL(outer, EPOLL_CTL_ADD, inner, EPOLLIN, 12, "epoll_ctl(outer, ADD inner, IN)");
	EPW(outer, 0);
	tell();
	await();
	EPW(outer, 5000);
	POLL1(inner, POLLIN, 5000);
	EPW(inner, 0);
	recv_exact(fd, 3);
	EPW(outer, 0);
	tell();
	close(outer);
	close(inner);
	close(fd);
}

static void sc_epoll_nested(void) { pair(AF_INET, nested_srv, three_cli); }

/* ---- HUP/ERR through epoll, whatever the interest set ------------------ */

/* epoll always reports EPOLLERR and EPOLLHUP; the other bits only when
 * asked for.  One epoll fd per interest set (a fd is in a set once). */
static void ep_interest_report(int fd, const char *when)
{
	static const struct { uint32_t ev; const char *n; } sets[] = {
		{ EPOLLIN | EPOLLOUT | EPOLLRDHUP, "IN|OUT|RDHUP" }, { EPOLLIN, "IN" }, { EPOLLOUT, "OUT" },
		{ EPOLLRDHUP, "RDHUP" },  { 0, "0" },
	};
	say("-- %s", when);
	for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
		int ep = epoll_create1(0);
		struct epoll_event ev = { .events = sets[i].ev, .data.u64 = i };
		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			die("epoll set-up: %s", ename(errno));
		struct epoll_event out[2];
		memset(out, 0, sizeof out);
		int n = epoll_wait(ep, out, 2, 0);
		say("epoll interest %s: %d %s", sets[i].n, n, n > 0 ? epstr(out[0].events) : "-");
		close(ep);
	}
	POLL1(fd, 0, 0);
	POLL1(fd, POLLOUT, 0);
}

static void ephup_close_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 1);
	await();
	RC("close (everything read)", close(fd));
	tell();
	await();
}

static void ephup_close_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "x", 0);
	usleep(SETTLE_US);
	ep_interest_report(fd, "established, idle");
	tell();
	await();
	usleep(SETTLE_US);
	ep_interest_report(fd, "the peer closed (its FIN)");
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	usleep(SETTLE_US);
	ep_interest_report(fd, "and we shut down writing: both FINs");
	RECV(fd, 64, 0);
	tell();
	close(fd);
}

static void sc_epoll_hup_closed(void) { pair(AF_INET, ephup_close_srv, ephup_close_cli); }

static void ephup_reset_srv(int lfd)
{
	int fd = acc(lfd);
	recv_exact(fd, 1);
	await();
	usleep(100000); /* the client is asleep in epoll_wait by now */
	struct linger lg = { 1, 0 };
	RC("setsockopt(SO_LINGER, {1, 0})", setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg));
	RC("close (reset)", close(fd));
	tell();
}

static void ephup_reset_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "x", 0);
	/* interest 0: only the reset's ERR|HUP may end this wait */
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, 0, 5, "epoll_ctl(ADD, 0)");
	tell();
	EPW(ep, 5000);
	close(ep);
	await();
	ep_interest_report(fd, "reset by the peer");
	RECV(fd, 64, 0);
	ep_interest_report(fd, "reset, error taken");
	close(fd);
}

static void sc_epoll_hup_reset(void) { pair(AF_INET, ephup_reset_srv, ephup_reset_cli); }

/* ---- SO_RCVBUF/SO_SNDBUF set before connect or listen ------------------ */

/* What kernel TCP does with a 16 KiB SO_RCVBUF: the receiver's queue stays
 * within its buffer (24 KiB: the doubled 32 KiB less overhead), while a
 * nonblocking sender pushes up to its own autotuned send buffer (MiBs) before
 * EAGAIN.  So the receiver's queue is what is compared; a switch that ignored
 * the option would let its default window (hundreds of KiB) through.
 * SEM_EXACT=1 adds the exact amounts (they differ run to run: by hand only). */
static int g_lrcvbuf, g_lsndbuf; /* set on the listener before listen (0: not) */

static void set_listen_opt(int fd)
{
	if (g_lrcvbuf && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &g_lrcvbuf, sizeof g_lrcvbuf) < 0)
		die("setsockopt(SO_RCVBUF) before listen: %s", ename(errno));
	if (g_lsndbuf && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &g_lsndbuf, sizeof g_lsndbuf) < 0)
		die("setsockopt(SO_SNDBUF) before listen: %s", ename(errno));
}

/* Nonblocking sends until EAGAIN persists past a few settles; the total. */
static size_t fill_nb(int fd)
{
	return fill_nonblocking(fd, SETTLE_US);
}

static void say_bucket(const char *what, size_t n)
{
	static const size_t edges[] = { 64 * KiB, 256 * KiB, 1 * MiB, 8 * MiB };
	size_t i = 0;
	while (i < sizeof edges / sizeof edges[0] && n >= edges[i])
		i++;
	if (i == 0)
		say("%s: < 64 KiB", what);
	else if (i == sizeof edges / sizeof edges[0])
		say("%s: >= 8 MiB", what);
	else
		say("%s: %zu KiB .. %zu KiB", what, edges[i - 1] / KiB, edges[i] / KiB);
}

/* The receiver, once the sender is stuck: how much it holds, then reads
 * everything and compares with the sender's total. */
static void drain_count(int fd)
{
	await();
	int inq = -1;
	if (ioctl(fd, FIONREAD, &inq) < 0)
		say("FIONREAD: %s", ename(errno));
	if (getenv("SEM_EXACT"))
		say("exact queued: %d", inq);
	say_bucket("queued at the receiver (FIONREAD)", inq < 0 ? 0 : (size_t)inq);
	char b[64 * KiB];
	size_t got = 0, sent;
	for (;;) {
		ssize_t r = recv(fd, b, sizeof b, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	await_buf(&sent, sizeof sent);
	say("received everything the sender sent: %s", got == sent ? "yes" : "no");
}

static void fill_then_close(int fd)
{
	size_t n = fill_nb(fd);
	tell();
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	tell_buf(&n, sizeof n);
}

static void rcvbuf_writer_srv(int lfd)
{
	int fd = acc(lfd);
	fill_then_close(fd);
	close(fd);
}

static void rcvbuf_connect_cli(const struct addr *a)
{
	int fd = socket(a->ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", ename(errno));
	SETINT(fd, SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF before connect", 16 * KiB);
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) < 0)
		die("connect: %s", ename(errno));
	GETINT(fd, SOL_SOCKET, SO_RCVBUF, "SO_RCVBUF after connect");
	drain_count(fd);
	close(fd);
}

static void sc_rcvbuf_connect(void) { pair(AF_INET, rcvbuf_writer_srv, rcvbuf_connect_cli); }

static void rcvbuf_listen_srv(int lfd)
{
	GETINT(lfd, SOL_SOCKET, SO_RCVBUF, "listener SO_RCVBUF");
	GETINT(lfd, SOL_SOCKET, SO_SNDBUF, "listener SO_SNDBUF");
	int fd = acc(lfd);
	GETINT(fd, SOL_SOCKET, SO_RCVBUF, "accepted SO_RCVBUF");
	GETINT(fd, SOL_SOCKET, SO_SNDBUF, "accepted SO_SNDBUF");
	tell();
	drain_count(fd);
	close(fd);
}

/* Sends once the server has accepted: before that, the switch's connector
 * assumes the largest window until the acceptor's INIT arrives (a gap). */
static void writer_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	fill_then_close(fd);
	close(fd);
}

static void sc_rcvbuf_listen(void)
{
	g_lrcvbuf = 16 * KiB;
	g_lsndbuf = 24 * KiB;
	say("listener: SO_RCVBUF %d, SO_SNDBUF %d before listen", g_lrcvbuf, g_lsndbuf);
	pair(AF_INET, rcvbuf_listen_srv, writer_cli);
}
/* ---- epoll_dup_twice: a socket and its dup in one set, LT and ET --------- */

static void dup_twice_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	SEND(fd, "abc", 0);
	/* in the receiver's queue before it looks: under load loopback
	 * delivery may wait for ksoftirqd, and the kernel's epoll_wait woken
	 * by the first entry's callback may return before the second's
	 * (CI: the kernel reference returned one entry) */
	usleep(SETTLE_US);
	tell();
	await();
	usleep(SETTLE_US); /* the server is asleep by now */
	SEND(fd, "d", 0);
	await();
	close(fd);
}

static void dup_twice_srv(int lfd)
{
	int fd = acc(lfd);
	int d = dup(fd);
	int ep = epoll_create1(0);
	EPCTL(ep, EPOLL_CTL_ADD, fd, EPOLLIN, 13, "epoll_ctl(ADD fd, IN)");
	EPCTL(ep, EPOLL_CTL_ADD, d, EPOLLIN | EPOLLET, 14, "epoll_ctl(ADD dup, IN|ET)");
	EPW(ep, 0);
	tell();
	await(); /* all three bytes sent */
	EPW(ep, 5000); /* both entries */
	EPW(ep, 100);  /* the level-triggered one only */
	recv_exact(fd, 3);
	EPW(ep, 100);
	tell();
	EPW(ep, 5000); /* asleep when the byte comes: one doorbell, both entries */
	recv_exact(fd, 1);
	tell();
	close(ep);
	close(d);
	close(fd);
}

static void sc_epoll_dup_twice(void) { pair(AF_INET, dup_twice_srv, dup_twice_cli); }

/* ---- shut_wakes_*: a shutdown wakes the threads asleep on the socket -------
 * Another thread of the process (or the peer) shuts the socket down while a
 * thread sleeps in recv, send, poll, select, epoll_wait or accept: the
 * kernel wakes it at once (sk_state_change), and it returns what the new
 * state says, or sleeps on when that changes nothing for it.  The sleeper
 * has slept a while first (1.2 s: a sleep that only ends by itself would
 * end up to a second later); "within 0.3 s" is a margin, not a figure. */

enum { SW_RECV, SW_SEND, SW_POLL, SW_SELECT, SW_EPOLL, SW_ACCEPT };

struct sleeper {
	int fd, kind;
	short events;         /* SW_POLL, SW_SELECT (POLLIN: read set, POLLOUT: write set), SW_EPOLL */
	long r;               /* recv/send/poll/select/epoll_wait/accept's result (SW_SEND: the last send's) */
	int err;
	short revents;        /* poll revents, epoll events (low bits), select: POLLIN/POLLOUT ready */
	size_t sent;          /* SW_SEND: bytes the blocking sends took */
	_Atomic int done;
	pthread_t th;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *w = arg;
	char buf[64 * 1024];
	memset(buf, 's', sizeof buf);
	errno = 0;
	switch (w->kind) {
	case SW_RECV:
		w->r = recv(w->fd, buf, sizeof buf, 0);
		break;
	case SW_SEND: /* until a send fails: a blocked one may return a part first */
		while ((w->r = send(w->fd, buf, sizeof buf, MSG_NOSIGNAL)) > 0)
			w->sent += (size_t)w->r;
		break;
	case SW_POLL: {
		struct pollfd p = { w->fd, w->events, 0 };
		w->r = poll(&p, 1, 2000);
		w->revents = p.revents;
		break;
	}
	case SW_SELECT: {
		fd_set rs, ws;
		FD_ZERO(&rs);
		FD_ZERO(&ws);
		if (w->events & POLLIN)
			FD_SET(w->fd, &rs);
		if (w->events & POLLOUT)
			FD_SET(w->fd, &ws);
		struct timeval tv = { 2, 0 };
		w->r = select(w->fd + 1, &rs, &ws, NULL, &tv);
		w->revents = (short)((FD_ISSET(w->fd, &rs) ? POLLIN : 0) | (FD_ISSET(w->fd, &ws) ? POLLOUT : 0));
		break;
	}
	case SW_EPOLL: {
		int ep = epoll_create1(EPOLL_CLOEXEC);
		struct epoll_event ev = { .events = (uint32_t)w->events };
		epoll_ctl(ep, EPOLL_CTL_ADD, w->fd, &ev);
		w->r = epoll_wait(ep, &ev, 1, 2000);
		w->revents = w->r > 0 ? (short)ev.events : 0;
		close(ep);
		break;
	}
	case SW_ACCEPT:
		w->r = accept(w->fd, NULL, NULL);
		break;
	}
	w->err = errno;
	atomic_store(&w->done, 1);
	return NULL;
}

static void sleeper_start(struct sleeper *w, int fd, int kind, short events)
{
	memset(w, 0, sizeof *w);
	w->fd = fd;
	w->kind = kind;
	w->events = events;
	if (pthread_create(&w->th, NULL, sleeper_main, w) != 0)
		die("pthread_create: %s", ename(errno));
}

/* Has it returned within ms? */
static bool sleeper_within(struct sleeper *w, int ms)
{
	uint64_t t0 = now_ms();
	while (!atomic_load(&w->done) && now_ms() - t0 < (uint64_t)ms)
		usleep(1000);
	return atomic_load(&w->done);
}

static const char *sleeper_what(const struct sleeper *w)
{
	static const char *n[] = { "recv", "send", "poll", "select", "epoll_wait", "accept" };
	return n[w->kind];
}

/* Joins it and says what its call returned. */
static void sleeper_say(struct sleeper *w)
{
	pthread_join(w->th, NULL);
	const char *what = sleeper_what(w);
	if (w->kind == SW_POLL || w->kind == SW_SELECT)
		say("%s(%s) = %s ready %s", what, evstr(w->events), rcs(w->r, w->err), evstr(w->revents));
	else if (w->kind == SW_EPOLL)
		say("%s(%s) = %s events %s", what, epstr((uint32_t)(unsigned short)w->events), rcs(w->r, w->err),
		    epstr((uint32_t)(unsigned short)w->revents));
	else if (w->kind == SW_ACCEPT)
		say("%s = %s", what, w->r >= 0 ? "a connection" : rcs(w->r, w->err));
	else
		say("%s = %s", what, rcs(w->r, w->err));
	if (w->kind == SW_ACCEPT && w->r >= 0)
		close((int)w->r);
}

/* shutdown(how) while w sleeps: it must go on sleeping (wake false) or
 * return within 0.3 s. */
static void shut_and_see(int fd, int how, const char *name, struct sleeper *w, bool wake)
{
	RC(name, shutdown(fd, how));
	if (wake)
		say("%s returned within 0.3 s: %s", sleeper_what(w), sleeper_within(w, 300) ? "yes" : "no");
	else
		say("%s still asleep 0.1 s later: %s", sleeper_what(w), sleeper_within(w, 100) ? "no" : "yes");
}

/* Nonblocking sends until the window is shut for good: the receiver does
 * not read, and what was in flight is acknowledged (no POLLOUT later). */
static void fill_window(int fd)
{
	char b[64 * 1024];
	memset(b, 'f', sizeof b);
	set_nonblock(fd, true);
	for (int round = 0; round < 40; round++) {
		size_t n = 0;
		ssize_t w;
		while ((w = send(fd, b, sizeof b, MSG_NOSIGNAL)) > 0)
			n += (size_t)w;
		if (round && !n)
			break;
		usleep(SETTLE_US);
	}
	set_nonblock(fd, false);
}

static void shut_srv(int lfd)
{
	int fd = acc(lfd);
	await(); /* the client is done: close (maybe with its data unread) */
	close(fd);
	tell();
}

static void shut_recv_cli(const struct addr *a)
{
	int fd = conn(a);
	struct sleeper w;
	sleeper_start(&w, fd, SW_RECV, 0);
	usleep(1200 * 1000);
	shut_and_see(fd, SHUT_WR, "shutdown(SHUT_WR) while another thread sleeps in recv", &w, false);
	shut_and_see(fd, SHUT_RD, "shutdown(SHUT_RD) while another thread sleeps in recv", &w, true);
	sleeper_say(&w);
	tell();
	await();
	close(fd);
}

static void sc_shut_wakes_recv(void) { pair(AF_INET, shut_srv, shut_recv_cli); }

/* The peer sent a little and closed; a thread sleeps for urgent data
 * only (POLLPRI: poll, then epoll_wait), which the peer's FIN does not
 * end.  Our SHUT_WR shuts the last direction: the sleeper wakes with
 * POLLHUP at once.  On one host the switch had no doorbell left to arm for
 * such a socket (its peer is gone), and the sleeper slept on until its
 * next look, 0.8 s (the differential tester's seed 835001863). */
static void shut_hup_srv(int lfd)
{
	for (int i = 0; i < 2; i++) {
		int fd = acc(lfd);
		SEND(fd, "bye", 0);
		close(fd);
	}
	tell();
	await();
}

static void shut_hup_cli(const struct addr *a)
{
	static const int kinds[2] = { SW_POLL, SW_EPOLL };
	int fds[2];
	for (int i = 0; i < 2; i++)
		fds[i] = conn(a);
	await(); /* both peers sent and closed */
	usleep(SETTLE_US);
	for (int i = 0; i < 2; i++) {
		struct sleeper w;
		sleeper_start(&w, fds[i], kinds[i], POLLPRI);
		usleep(1200 * 1000);
		shut_and_see(fds[i], SHUT_WR, "shutdown(SHUT_WR) while another thread sleeps for POLLPRI", &w, true);
		sleeper_say(&w);
		close(fds[i]);
	}
	tell();
}

static void sc_shut_wakes_hup(void) { pair(AF_INET, shut_hup_srv, shut_hup_cli); }

/* ---- blocking_send_wakes: a thread sleeps in epoll_wait for POLLIN
 * while another thread's blocking sendfile (then splice from a pipe) waits
 * for room; the peer sends a byte, then reads everything.  The byte wakes
 * the sleeper at once, before the big send is done.  Under the switch the
 * sender's sleep may take the doorbell meant for the watcher; a blocking
 * send looks at the socket's epoll entries after it, sendfile and splice
 * once only looked when a reset came in. */
#define BSW_BYTES (32 * MiB) /* more than kernel TCP buffers on loopback (about 10 MiB) */
static void bsw_srv(int lfd)
{
	int fd = acc(lfd);
	for (int i = 0; i < 2; i++) {
		await(); /* the sender is about to block */
		usleep(300 * 1000);
		SEND(fd, "x", 0);
		usleep(300 * 1000);
		size_t got = 0;
		char b[64 * 1024];
		while (got < BSW_BYTES) {
			size_t want = BSW_BYTES - got < sizeof b ? BSW_BYTES - got : sizeof b;
			ssize_t n = recv(fd, b, want, 0);
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		say("read %s", got == BSW_BYTES ? "all of it" : "less");
	}
	await();
	close(fd);
}

static void bsw_cli(const struct addr *a)
{
	int fd = conn(a);
	char path[] = "/tmp/sem-bsw.XXXXXX";
	int f = mkstemp(path);
	if (f < 0)
		die("mkstemp: %s", ename(errno));
	unlink(path);
	char *blk = calloc(1, MiB);
	for (size_t i = 0; i < BSW_BYTES / MiB; i++)
		if (write(f, blk, MiB) != (ssize_t)MiB)
			die("write: %s", ename(errno));
	for (int round = 0; round < 2; round++) {
		struct sleeper w;
		sleeper_start(&w, fd, SW_EPOLL, POLLIN);
		usleep(100 * 1000);
		tell();
		size_t total = 0;
		if (round == 0) {
			off_t off = 0;
			while (total < BSW_BYTES) {
				ssize_t r = sendfile(fd, f, &off, BSW_BYTES - total);
				if (r <= 0)
					break;
				total += (size_t)r;
			}
		} else {
			int p[2];
			if (pipe(p) < 0)
				die("pipe: %s", ename(errno));
			while (total < BSW_BYTES) {
				ssize_t in = write(p[1], blk, 64 * 1024);
				ssize_t r = in > 0 ? splice(p[0], NULL, fd, NULL, (size_t)in, 0) : -1;
				if (r <= 0)
					break;
				total += (size_t)r;
			}
			close(p[0]);
			close(p[1]);
		}
		bool woke = atomic_load(&w.done);
		say("%s of 32 MiB: %s; epoll_wait had returned before it ended: %s", round ? "splice" : "sendfile",
		    total == BSW_BYTES ? "all sent" : "short", woke ? "yes" : "no");
		sleeper_say(&w);
		RECV(fd, 1, 0);
	}
	tell();
	free(blk);
	close(f);
	close(fd);
}

static void sc_blocking_send_wakes(void) { pair(AF_INET, bsw_srv, bsw_cli); }

/* ---- reset_wakes: the peer read everything and closed; a thread sleeps
 * for urgent data only (POLLPRI: poll, then epoll_wait), which the peer's
 * FIN does not end.  Another thread's send to the closed peer draws its
 * reset: the sleeper wakes at once with POLLERR|POLLHUP (tcp_reset's
 * sk_state_change).  Under the switch the send finds the peer gone and
 * makes the reset itself; the sleeper slept on until its next look
 * (the differential tester's seeds 840000053, 842000431 and others). */
static void reset_wakes_cli(const struct addr *a)
{
	/* the third: a nonblocking send, and an epoll entry for errors only
	 * (soak seed 847001021: that sleeper was not woken) */
	static const int kinds[3] = { SW_POLL, SW_EPOLL, SW_EPOLL };
	static const int evs[3] = { POLLPRI, POLLPRI, 0 };
	static const int how[3] = { MSG_NOSIGNAL, MSG_NOSIGNAL, MSG_NOSIGNAL | MSG_DONTWAIT };
	int fds[3];
	for (int i = 0; i < 3; i++)
		fds[i] = conn(a);
	await(); /* the peers sent and closed */
	usleep(SETTLE_US);
	for (int i = 0; i < 3; i++) {
		RECV(fds[i], 64, 0); /* "bye": all read, only the FIN is left */
		struct sleeper w;
		sleeper_start(&w, fds[i], kinds[i], evs[i]);
		usleep(1200 * 1000);
		RC("send to the closed peer while another thread sleeps", send(fds[i], "x", 1, how[i]));
		say("%s returned within 0.3 s: %s", sleeper_what(&w), sleeper_within(&w, 300) ? "yes" : "no");
		sleeper_say(&w);
		close(fds[i]);
	}
	tell();
}

static void reset_wakes_srv(int lfd)
{
	for (int i = 0; i < 3; i++) {
		int fd = acc(lfd);
		SEND(fd, "bye", 0);
		close(fd);
	}
	tell();
	await();
}

static void sc_reset_wakes(void) { pair(AF_INET, reset_wakes_srv, reset_wakes_cli); }

/* ---- oob_after_reset: urgent data, then a reset before any FIN.  The
 * server leaves the client's bytes unread and closes (a reset); the
 * urgent byte it sent first is not given out any more: tcp_recv_urg says
 * ENOTCONN for a closed socket that saw no FIN (the differential tester's
 * seed 835003027). */
static void oob_reset_srv(int lfd)
{
	int fd = acc(lfd);
	await(); /* the client's bytes are here, unread */
	RC("send(MSG_OOB)", send(fd, "!", 1, MSG_OOB));
	usleep(SETTLE_US);
	close(fd);
	tell();
	await();
}

static void oob_reset_cli(const struct addr *a)
{
	int fd = conn(a);
	SEND(fd, "unread", 0);
	usleep(SETTLE_US);
	tell();
	await(); /* urgent byte sent, then the reset */
	usleep(SETTLE_US);
	char c;
	ssize_t r = recv(fd, &c, 1, MSG_OOB | MSG_PEEK);
	say("recv(MSG_OOB|MSG_PEEK) after the reset = %s", rcs(r, errno));
	r = recv(fd, &c, 1, MSG_OOB);
	say("recv(MSG_OOB) after the reset = %s", rcs(r, errno));
	tell();
	close(fd);
}

static void sc_oob_after_reset(void) { pair(AF_INET, oob_reset_srv, oob_reset_cli); }

/* ---- oob_new_mark_then_inline: a reader stopped at the urgent mark, a
 * second urgent byte comes, then the reader sets SO_OOBINLINE.  The second
 * byte's arrival skipped the first (tcp_check_urg: the reader stood at the
 * old mark, not inline), before the option changed: what is left to read
 * is the second byte alone (the differential tester's seed 840002208). */
static void oob_mark_inline_srv(int lfd)
{
	int fd = acc(lfd);
	RC("send(MSG_OOB) of 8 bytes", send(fd, "abcdefgX", 8, MSG_OOB));
	usleep(SETTLE_US);
	tell();
	await(); /* the client read up to the mark */
	RC("send(MSG_OOB) of 1 byte", send(fd, "Y", 1, MSG_OOB));
	usleep(SETTLE_US);
	tell();
	await();
	close(fd);
}

static void oob_mark_inline_cli(const struct addr *a)
{
	int fd = conn(a);
	await();
	RECV(fd, 64, 0); /* stops before the mark */
	tell();
	await(); /* the second urgent byte is here */
	SETINT(fd, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE", 1);
	RECV(fd, 64, MSG_DONTWAIT);
	RECV(fd, 64, MSG_DONTWAIT);
	tell();
	close(fd);
}

static void sc_oob_new_mark_then_inline(void) { pair(AF_INET, oob_mark_inline_srv, oob_mark_inline_cli); }

static void shut_send_cli(const struct addr *a)
{
	int fd = conn(a);
	fill_window(fd);
	struct sleeper w;
	sleeper_start(&w, fd, SW_SEND, 0);
	usleep(1200 * 1000);
	shut_and_see(fd, SHUT_RD, "shutdown(SHUT_RD) while another thread sleeps in send", &w, false);
	shut_and_see(fd, SHUT_WR, "shutdown(SHUT_WR) while another thread sleeps in send", &w, true);
	sleeper_say(&w);
	tell();
	await();
	close(fd);
}

static void sc_shut_wakes_send(void) { pair(AF_INET, shut_srv, shut_send_cli); }

/* For each of poll, select and epoll_wait, two connections with a full
 * window: a wait for input sleeps on through SHUT_WR and wakes at SHUT_RD
 * (readable, RDHUP); a wait for output sleeps on through SHUT_RD and wakes
 * at SHUT_WR (epoll_wait: SHUT_RDWR). */
#define SHUT_POLL_CONNS 6
static void shut_poll_srv(int lfd)
{
	int fds[SHUT_POLL_CONNS];
	for (int i = 0; i < SHUT_POLL_CONNS; i++)
		fds[i] = acc(lfd);
	await();
	for (int i = 0; i < SHUT_POLL_CONNS; i++)
		close(fds[i]);
	tell();
}

static void shut_poll_cli(const struct addr *a)
{
	static const int kinds[3] = { SW_POLL, SW_SELECT, SW_EPOLL };
	int fds[SHUT_POLL_CONNS];
	for (int i = 0; i < SHUT_POLL_CONNS; i++)
		fds[i] = conn(a);
	for (int i = 0; i < SHUT_POLL_CONNS; i++)
		fill_window(fds[i]);
	for (int i = 0; i < 3; i++) {
		int in = fds[2 * i], out = fds[2 * i + 1];
		struct sleeper w;
		sleeper_start(&w, in, kinds[i], kinds[i] == SW_SELECT ? POLLIN : POLLIN | POLLRDHUP);
		usleep(200 * 1000);
		shut_and_see(in, SHUT_WR, "shutdown(SHUT_WR) while another thread waits for input", &w, false);
		shut_and_see(in, SHUT_RD, "shutdown(SHUT_RD) while another thread waits for input", &w, true);
		sleeper_say(&w);
		sleeper_start(&w, out, kinds[i], POLLOUT);
		usleep(200 * 1000);
		shut_and_see(out, SHUT_RD, "shutdown(SHUT_RD) while another thread waits for output", &w, false);
		if (kinds[i] == SW_EPOLL)
			shut_and_see(out, SHUT_RDWR, "shutdown(SHUT_RDWR) while another thread waits for output", &w, true);
		else
			shut_and_see(out, SHUT_WR, "shutdown(SHUT_WR) while another thread waits for output", &w, true);
		sleeper_say(&w);
	}
	tell();
	await();
	for (int i = 0; i < SHUT_POLL_CONNS; i++)
		close(fds[i]);
}

static void sc_shut_wakes_poll(void) { pair(AF_INET, shut_poll_srv, shut_poll_cli); }

/* A thread asleep in accept: SHUT_WR leaves it asleep (a connection still
 * comes through), SHUT_RD makes accept fail with EINVAL. */
static void shut_accept_srv(int lfd)
{
	struct sleeper w;
	sleeper_start(&w, lfd, SW_ACCEPT, 0);
	usleep(200 * 1000);
	shut_and_see(lfd, SHUT_WR, "shutdown(SHUT_WR) of the listener while another thread sleeps in accept", &w, false);
	tell(); /* the client connects */
	say("accept returned within 3 s: %s", sleeper_within(&w, 3000) ? "yes" : "no");
	sleeper_say(&w);
	sleeper_start(&w, lfd, SW_ACCEPT, 0);
	usleep(200 * 1000);
	shut_and_see(lfd, SHUT_RD, "shutdown(SHUT_RD) of the listener while another thread sleeps in accept", &w, true);
	sleeper_say(&w);
	tell();
	await();
}

static void shut_accept_cli(const struct addr *a)
{
	await();
	int fd = conn(a);
	await();
	tell();
	close(fd);
}

static void sc_shut_wakes_accept(void) { pair(AF_INET, shut_accept_srv, shut_accept_cli); }

/* The peer's shutdown: its SHUT_WR (a FIN) wakes our recv with 0; its
 * close with our data unread (a reset) wakes our blocked send. */
static void shut_peer_srv(int lfd)
{
	int fd = acc(lfd);
	await(); /* the client sleeps in recv */
	usleep(1200 * 1000);
	tell();
	RC("shutdown(SHUT_WR)", shutdown(fd, SHUT_WR));
	await(); /* the client sleeps in send */
	usleep(1200 * 1000);
	tell();
	RC("close with unread data", close(fd));
	await();
}

static void shut_peer_cli(const struct addr *a)
{
	int fd = conn(a);
	struct sleeper w;
	sleeper_start(&w, fd, SW_RECV, 0);
	tell();
	await(); /* the peer shuts down now */
	say("recv returned within 0.3 s of the peer's SHUT_WR: %s", sleeper_within(&w, 300) ? "yes" : "no");
	sleeper_say(&w);
	fill_window(fd);
	sleeper_start(&w, fd, SW_SEND, 0);
	tell();
	await(); /* the peer closes now */
	say("send returned within 0.3 s of the peer's close: %s", sleeper_within(&w, 300) ? "yes" : "no");
	sleeper_say(&w);
	tell();
	close(fd);
}

static void sc_shut_wakes_peer(void) { pair(AF_INET, shut_peer_srv, shut_peer_cli); }

/* ================================================================ table */

struct scenario {
	const char *name;
	void (*run)(void);
	const char *desc;
};

static const struct scenario scenarios[] = {
	{ "exchange_v4", sc_exchange_v4, "small, 1 MiB, 8 MiB each way with checksums (IPv4)" },
	{ "exchange_v6", sc_exchange_v6, "small, 1 MiB, 8 MiB each way with checksums (IPv6)" },
	{ "duplex", sc_duplex, "4 MiB each way at the same time, nonblocking, poll-driven" },
	{ "names_v4", sc_names_v4, "getsockname/getpeername/accept address consistent on both ends (IPv4)" },
	{ "names_v6", sc_names_v6, "getsockname/getpeername/accept address consistent on both ends (IPv6)" },
	{ "v4mapped", sc_v4mapped, "IPv4 client to a dual-stack IPv6 wildcard listener" },
	{ "wildcard_v4", sc_wildcard_v4, "client to a 0.0.0.0 listener" },
	{ "errno_kept", sc_errno_kept, "a connect and a send that succeed leave errno as it was" },
	{ "wildcard_v6", sc_wildcard_v6, "client to a :: listener over ::1" },
	{ "self_connect", sc_self_connect, "one thread: nonblocking connect to its own listener, accept, exchange" },
	{ "nb_connect", sc_nb_connect, "nonblocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0, EISCONN, data" },
	{ "refused_v4", sc_refused_v4, "no listener: ECONNREFUSED blocking and nonblocking; reconnect works" },
	{ "refused_v6", sc_refused_v6, "same over IPv6" },
	{ "peek", sc_peek, "MSG_PEEK then normal reads; peek at EOF" },
	{ "peek_sends", sc_peek_sends, "MSG_PEEK sees the bytes of several sends at once" },
	{ "peek_waitall", sc_peek_waitall, "MSG_PEEK|MSG_WAITALL waits for all of it (or the end), then peeks it" },
	{ "waitall", sc_waitall, "MSG_WAITALL across 10 small sends; at EOF" },
	{ "dontwait", sc_dontwait, "MSG_DONTWAIT, O_NONBLOCK, FIONBIO" },
	{ "rcvtimeo", sc_rcvtimeo, "SO_RCVTIMEO 200 ms: EAGAIN, then data" },
	{ "sndtimeo", sc_sndtimeo, "SO_SNDTIMEO 200 ms on a full window: EAGAIN; totals match" },
	{ "nb_fill", sc_nb_fill, "nonblocking sender fills the window: EAGAIN, POLLOUT after drain, totals" },
	{ "fionread", sc_fionread, "FIONREAD/SIOCINQ before, after arrival, after partial reads, at EOF" },
	{ "zero_len", sc_zero_len, "zero-length send/recv/read/write" },
	{ "read_zero", sc_read_zero, "read()/readv()/writev() of nothing return 0 at once; recv() says EAGAIN, write() EPIPE" },
	{ "shutdown_wr", sc_shutdown_wr, "SHUT_WR half-close: data then EOF, reply still flows, EPIPE, POLLRDHUP" },
	{ "shutdown_rd", sc_shutdown_rd, "SHUT_RD: recv 0, sending still works" },
	{ "shutdown_rdwr", sc_shutdown_rdwr, "SHUT_RDWR, and shutdown with a bad how" },
	{ "close_unread", sc_close_unread, "peer closes with unread data: ECONNRESET, then 0, EPIPE" },
	{ "close_read", sc_close_read, "peer closes with everything read: EOF" },
	{ "close_wakes_poll", sc_close_wakes_poll, "the peer's close wakes a blocked poll: POLLIN|POLLRDHUP" },
	{ "close_wakes_epoll", sc_close_wakes_epoll, "the peer's close wakes a blocked epoll_wait: EPOLLIN|EPOLLRDHUP" },
	{ "linger0", sc_linger0, "SO_LINGER {1,0} close: peer sees ECONNRESET" },
	{ "linger_graceful", sc_linger_graceful, "SO_LINGER {1,5} close with data in flight: all delivered, EOF" },
	{ "rst_with_pending", sc_rst_with_pending, "reset arrives while we hold unread data" },
	{ "epipe", sc_epipe, "writes after the peer closed: first ok, then EPIPE; SIGPIPE unless MSG_NOSIGNAL" },
	{ "sigpipe_default", sc_sigpipe_default, "default SIGPIPE disposition kills the writer" },
	{ "kill_clean", sc_kill_clean, "peer SIGKILLed with nothing unread: its data, then EOF" },
	{ "kill_unread", sc_kill_unread, "peer SIGKILLed holding unread data: ECONNRESET" },
	{ "kill_unread_looked", sc_kill_unread_looked, "peer SIGKILLed holding data its FIONREAD took in: ECONNRESET" },
	{ "kill_read_all", sc_kill_read_all, "peer SIGKILLed after reading what its FIONREAD took in: an orderly end" },
	{ "exit_unclosed", sc_exit_unclosed, "peer exits without close after sending 400 KiB: its data, then EOF" },
	{ "kill_sent", sc_kill_sent, "peer SIGKILLed after sending 400 KiB, nothing unread: its data, then EOF" },
	{ "kill_midway", sc_kill_midway, "sender SIGKILLed mid-way through 64 MiB: what arrived, then EOF" },
	{ "kill_blocked", sc_kill_blocked, "sender SIGKILLed blocked on a full window: what arrived, then EOF" },
	{ "fork_child_writes", sc_fork_child_writes, "a forked child writes 4 MiB on an inherited connection and exits; the parent closes: all data, EOF" },
	{ "fork_takeover", sc_fork_takeover, "a forked child drives an inherited connection after a stream, exits; the parent reads on" },
	{ "fork_exit_close_unread", sc_fork_exit_close_unread, "a forked child exits holding the socket, the parent closes with the peer's bytes unread: a reset" },
	{ "fork_poll_thread", sc_fork_poll_thread, "a thread polls across the fork; parent and child close with the peer's bytes unread: a reset at the child's close" },
	{ "fork_epoll_thread", sc_fork_epoll_thread, "a thread waits in epoll_wait across the fork; parent and child close with the peer's bytes unread: a reset at the child's close" },
	{ "send_peer_exited", sc_send_peer_exited, "two sends after the peer read everything and exited (socket open): the first sent, then EPIPE" },
	{ "shutdown_peer_exited", sc_shutdown_peer_exited, "shutdown after ours and the peer process's exit (socket left open): ENOTCONN" },
	{ "tcpinfo_peer_exited", sc_tcpinfo_peer_exited, "TCP_INFO after our shutdown and the peer process's exit (socket left open): closed" },
	{ "fork_child_exit", sc_fork_child_exit, "a forked child exits without touching its copy; the parent sends 400 KiB, closes: data, EOF" },
	{ "kill_reader_blocked", sc_kill_reader_blocked, "reader SIGKILLed holding unread data while we block in send: ECONNRESET, then EPIPE" },
	{ "kill_unread_send", sc_kill_unread_send, "reader SIGKILLed holding unread data: the next send gets the reset, then EPIPE" },
	{ "exit_unread", sc_exit_unread, "peer looked at our data (FIONREAD, MSG_PEEK), then exits without close: a reset" },
	{ "exit_linger0", sc_exit_linger0, "SO_LINGER {1, 0}, then exit without close: a reset" },
	{ "oob", sc_oob, "urgent byte: EINVAL before, POLLPRI/except, SIOCATMARK, read up to the mark, MSG_OOB" },
	{ "oob_first", sc_oob_first, "urgent byte read before the normal data" },
	{ "oob_fionread", sc_oob_fionread, "FIONREAD counts up to the urgent mark (all with SO_OOBINLINE)" },
	{ "oob_recvmsg", sc_oob_recvmsg, "recvmsg of the urgent byte: msg_flags MSG_OOB (MSG_TRUNC without room)" },
	{ "oob_waitall", sc_oob_waitall, "MSG_WAITALL stops at the urgent mark" },
	{ "oob_peek_waitall", sc_oob_peek_waitall, "MSG_PEEK|MSG_WAITALL stops at the urgent mark, data behind it" },
	{ "oob_splice", sc_oob_splice, "splice from the socket stops at the urgent mark and never passes it" },
	{ "oob_inline", sc_oob_inline, "SO_OOBINLINE: urgent byte in the stream, SIOCATMARK, EINVAL for MSG_OOB" },
	{ "oob_twice_read", sc_oob_twice_read, "two urgent bytes, plain reads only: the older byte reads as data" },
	{ "oob_at_mark", sc_oob_at_mark, "a newer urgent byte while the reader stands at the older mark: that byte is skipped" },
	{ "oob_twice", sc_oob_twice, "two urgent bytes before the reader looks" },
	{ "oob_twice_inline", sc_oob_twice_inline, "two urgent bytes, SO_OOBINLINE" },
	{ "oob_multibyte", sc_oob_multibyte, "send(\"xyz\", MSG_OOB): only the last byte is urgent" },
	{ "oob_sigurg", sc_oob_sigurg, "F_SETOWN: SIGURG on urgent data" },
	{ "poll", sc_poll, "poll/ppoll readiness, mixed with a pipe, POLLNVAL after close" },
	{ "select", sc_select, "select/pselect readiness" },
	{ "epoll_lt", sc_epoll_lt, "epoll level-triggered, MOD/DEL, EPOLLRDHUP, close removes" },
	{ "epoll_et_shutdown", sc_epoll_et_shutdown, "epoll EPOLLET: our own shutdown(SHUT_WR) makes one more edge" },
	{ "epoll_et_wakes", sc_epoll_et_wakes, "epoll EPOLLET|EPOLLPRI: an unread urgent byte shows again at each arrival and at the peer's FIN" },
	{ "epoll_et", sc_epoll_et, "epoll EPOLLET once per arrival, EPOLLONESHOT, re-arm" },
	{ "accept_nb", sc_accept_nb, "nonblocking listener: EAGAIN, POLLIN/epoll on arrival, accept4 flags" },
	{ "accept_ready_select", sc_accept_ready_select, "1000 connects from a thread: select says readable, accept succeeds" },
	{ "accept_ready_poll", sc_accept_ready_poll, "1000 connects from a thread: poll says readable, accept succeeds" },
	{ "accept_ready_epoll", sc_accept_ready_epoll, "1000 connects from a thread: epoll says readable, accept succeeds" },
	{ "loop_drain_epoll", sc_loop_drain_epoll, "SO_SNDBUF 1024 client fills up; one epoll loop drains the server end: client writable again" },
	{ "loop_drain_poll", sc_loop_drain_poll, "the same with poll" },
	{ "loop_drain_select", sc_loop_drain_select, "the same with select" },
	{ "backlog_order", sc_backlog_order, "4 connections queued before accept come out in order" },
	{ "backlog_order_epoll", sc_backlog_order_epoll, "16 connections queued, accepted one per epoll wake-up: in order" },
	{ "sockopts", sc_sockopts, "socket options on a connected socket" },
	{ "tcp_info", sc_tcp_info, "TCP_INFO state, TCP_MAXSEG" },
	{ "fd_numbers", sc_fd_numbers, "no hidden descriptors between the app's own fd numbers" },
	{ "dup", sc_dup, "write through a dup, close the original, close the dup: EOF" },
	{ "dup2", sc_dup2, "dup2 and F_DUPFD_CLOEXEC copies carry the connection" },
	{ "dup2_replace", sc_dup2_replace, "dup2 onto another connection's fd closes that connection" },
	{ "fork_after_connect", sc_fork_after_connect, "child writes, parent closes its copy: data, then EOF when the child exits" },
	{ "fork_opts", sc_fork_opts, "after fork a timeout, O_NONBLOCK, SO_LINGER 0 one process sets hold for the other" },
	{ "fork_parent_keeps", sc_fork_parent_keeps, "child exits, parent still holds: no EOF until the parent closes" },
	{ "exec_inherit", sc_exec_inherit, "fork+exec with an inherited connected socket" },
	{ "scm_rights", sc_scm_rights, "a connected socket sent over SCM_RIGHTS: the receiver talks to the peer, sees its names, EOF" },
	{ "exec_eof", sc_exec_eof, "fork+execlp: the new program sees TCP options and names, then the peer's close as EOF" },
	{ "fork_listener", sc_fork_listener, "a forked child closes its copy of the listener; the listener lives on" },
	{ "fork_nonblock_listener", sc_fork_nonblock_listener,
	  "a forked child sets O_NONBLOCK on the inherited listener: the parent's accept says EAGAIN" },
	{ "prefork_accept", sc_prefork_accept, "two worker processes accept on one listener, once each" },
	{ "prefork_burst", sc_prefork_burst, "8 pre-forked workers accept once each while 8 clients connect at once (4 rounds)" },
	{ "iovec", sc_iovec, "writev/readv/sendmsg/recvmsg with several iovecs, recvfrom address" },
	{ "sendfile", sc_sendfile, "sendfile with and without an offset, near and at EOF" },
	{ "cork", sc_cork, "TCP_CORK holds a header + sendfile until uncork; MSG_MORE; full segments; NODELAY; 200 ms ceiling" },
	{ "cork_inherit", sc_cork_inherit, "TCP_CORK set before connect, and on a listener (accepted sockets inherit it)" },
	{ "cork_close", sc_cork_close, "close while corked: the held bytes arrive, then EOF" },
	{ "more_poll", sc_more_poll, "a request held by MSG_MORE reaches a peer asleep in poll after 200 ms; the reply comes back" },
	{ "cork_twice", sc_cork_twice, "TCP_CORK left on: each held send reaches a peer asleep in poll after 200 ms" },
	{ "cork_reset", sc_cork_reset, "corked bytes, then close with unread data: the reset goes, the corked bytes never do" },
	{ "cork_linger0", sc_cork_linger0, "corked bytes, then SO_LINGER 0 close: the reset goes, the corked bytes never do" },
	{ "sendfile_nb", sc_sendfile_nb, "nonblocking sendfile into a full window: partial count, EAGAIN, offsets" },
	{ "sendfile_nothing", sc_sendfile_nothing, "sendfile of nothing (count 0, the file's end) is 0 after SHUT_WR or a reset" },
	{ "splice", sc_splice, "splice pipe -> socket and socket -> pipe: counts, EAGAIN, EOF, bad offsets" },
	{ "unread_idle", sc_unread_idle, "unread data while waiting for POLLPRI / after an ET edge: sleeps, no busy loop" },
	{ "epoll_close_dup", sc_epoll_close_dup, "a registered fd closed while a dup is open stays in the set until the last close" },
	{ "epoll_flags", sc_epoll_flags, "EPOLLEXCLUSIVE rules; EEXIST, ENOENT, EINVAL from epoll_ctl" },
	{ "epoll_threads", sc_epoll_threads, "two threads asleep on one epoll fd; epoll_ctl from a third wakes one (ONESHOT), re-arm wakes the other" },
	{ "epoll_fork", sc_epoll_fork, "an epoll fd inherited across fork reports in the child" },
	{ "epoll_nested", sc_epoll_nested, "an epoll fd watched by another epoll fd and by poll" },
	{ "epoll_hup_closed", sc_epoll_hup_closed, "peer closed, then we SHUT_WR: HUP through epoll with any interest set (even 0)" },
	{ "epoll_hup_reset", sc_epoll_hup_reset, "peer reset: ERR|HUP wakes an epoll_wait with interest 0; every interest set" },
	{ "rcvbuf_connect", sc_rcvbuf_connect, "SO_RCVBUF 16 KiB before connect: the receiver's queue stays small" },
	{ "rcvbuf_listen", sc_rcvbuf_listen, "SO_RCVBUF/SO_SNDBUF on the listener: the accepted socket inherits them" },
	{ "shut_wakes_recv", sc_shut_wakes_recv, "another thread's SHUT_RD wakes a recv asleep 1.2 s (SHUT_WR does not): 0" },
	{ "shut_wakes_send", sc_shut_wakes_send, "another thread's SHUT_WR wakes a send blocked on a full window (SHUT_RD does not): EPIPE" },
	{ "oob_after_reset", sc_oob_after_reset, "urgent data then a reset before any FIN: recv(MSG_OOB) says ENOTCONN" },
	{ "oob_new_mark_then_inline", sc_oob_new_mark_then_inline, "a reader at the urgent mark, a second urgent byte, then SO_OOBINLINE: the second byte alone is left" },
	{ "blocking_send_wakes", sc_blocking_send_wakes, "a byte from the peer wakes an epoll_wait asleep beside a blocking sendfile/splice that waits for room" },
	{ "reset_wakes", sc_reset_wakes, "a send that draws the closed peer's reset wakes a poll/epoll_wait asleep for POLLPRI with POLLERR|POLLHUP" },
	{ "shut_wakes_hup", sc_shut_wakes_hup, "our shutdown(SHUT_WR) after the peer's close wakes a poll/epoll_wait asleep for POLLPRI with POLLHUP" },
	{ "shut_wakes_poll", sc_shut_wakes_poll, "another thread's shutdown wakes poll, select and epoll_wait waiting for input (SHUT_RD) or output (SHUT_WR)" },
	{ "shut_wakes_accept", sc_shut_wakes_accept, "another thread's SHUT_RD of a listener makes a sleeping accept fail (EINVAL); SHUT_WR does not" },
	{ "shut_wakes_peer", sc_shut_wakes_peer, "the peer's SHUT_WR wakes a recv asleep 1.2 s (0); its close with data unread wakes a blocked send" },
	{ "epoll_dup_twice", sc_epoll_dup_twice, "a socket and its dup in one epoll set (LT and ET): one arrival reports both" },
};

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "__exec_writer") == 0)
		return exec_writer(atoi(argv[2]), atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "__exec_reader") == 0)
		return exec_reader(atoi(argv[2]), atoi(argv[3]));
	if (argc != 2) {
		fprintf(stderr, "usage: sem LIST | HELP | SCENARIO\n");
		return 2;
	}
	size_t n = sizeof scenarios / sizeof scenarios[0];
	if (strcmp(argv[1], "LIST") == 0 || strcmp(argv[1], "HELP") == 0) {
		for (size_t i = 0; i < n; i++) {
			if (argv[1][0] == 'L')
				printf("%s\n", scenarios[i].name);
			else
				printf("%-20s %s\n", scenarios[i].name, scenarios[i].desc);
		}
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (strcmp(argv[1], scenarios[i].name) != 0)
			continue;
		handle(SIGPIPE, on_sigpipe);
		handle(SIGALRM, on_alarm);
		alarm(WD_PARENT);
		say("scenario %s", scenarios[i].name);
		scenarios[i].run();
		kill_kids();
		say("done");
		return bad ? 1 : 0;
	}
	fprintf(stderr, "sem: unknown scenario %s (try LIST)\n", argv[1]);
	return 2;
}
