/* transcript.c — what the semantics programs share: a transcript of what
 * an application observed (say, RC, errno/flag/event names, escaped bytes),
 * the process bookkeeping behind it (roles, report pipes, watchdogs), data
 * patterns with their receive-side check, and the small observation helpers
 * (poll, ioctl, getsockopt, epoll) both print the same way.  Used by
 * tests/progs/sem.c (fixed scenarios) and tests/diff (random programs): one
 * format, so that their transcripts read alike and a fix to either shows in
 * both. */
#include "transcript.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ transcript */

const char *role = "proc";
int rep_fd = -1;     /* a child's report pipe; -1: stdout */
pid_t kids[16];
int nkids;

void write_all_fd(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		c += w;
		n -= (size_t)w;
	}
}

void emit(const char *s, size_t n)
{
	write_all_fd(rep_fd >= 0 ? rep_fd : 1, s, n);
}

void say(const char *fmt, ...)
{
	char line[2048];
	int n = snprintf(line, sizeof line, "%s: ", role);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	if ((size_t)(n + m) > sizeof line - 2)
		m = (int)sizeof line - 2 - n;
	line[n + m] = '\n';
	emit(line, (size_t)(n + m + 1));
}

void kill_kids(void)
{
	for (int i = 0; i < nkids; i++)
		if (kids[i] > 0)
			kill(kids[i], SIGKILL);
}

void on_alarm(int sig)
{
	(void)sig;
	say("WATCHDOG: stuck, giving up");
	kill_kids();
	_exit(3);
}

/* A step the scenario cannot go on without failed. */
void die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	say("FATAL: %s", msg);
	kill_kids();
	_exit(1);
}

volatile sig_atomic_t n_sigpipe, n_sigurg;
void on_sigpipe(int s)
{
	(void)s;
	n_sigpipe++;
}
void on_sigurg(int s)
{
	(void)s;
	n_sigurg++;
}
void handle(int sig, void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = fn;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

/* ------------------------------------------------------------ formatting */

const char *ename(int e)
{
	switch (e) {
#define E(x) case x: return #x
		E(EAGAIN); E(EINPROGRESS); E(EALREADY); E(EISCONN); E(ENOTCONN);
		E(ECONNREFUSED); E(ECONNRESET); E(ECONNABORTED); E(EPIPE); E(EINVAL);
		E(EBADF); E(ENOTSOCK); E(EFAULT); E(EINTR); E(ETIMEDOUT); E(ENOENT);
		E(EEXIST); E(EOPNOTSUPP); E(EADDRINUSE); E(EADDRNOTAVAIL); E(ENOBUFS);
		E(ENOMEM); E(EHOSTUNREACH); E(ENETUNREACH); E(ENOPROTOOPT); E(EPERM);
		E(EMSGSIZE); E(ESPIPE); E(EPROTO); E(ENOSYS);
#undef E
	}
	static char b[4][32];
	static int k;
	char *o = b[k++ & 3];
	snprintf(o, sizeof b[0], "errno%d", e);
	return o;
}

const char *signame(int s)
{
	switch (s) {
	case SIGKILL: return "SIGKILL";
	case SIGPIPE: return "SIGPIPE";
	case SIGSEGV: return "SIGSEGV";
	case SIGABRT: return "SIGABRT";
	case SIGBUS: return "SIGBUS";
	case SIGALRM: return "SIGALRM";
	case SIGTERM: return "SIGTERM";
	case SIGURG: return "SIGURG";
	case SIGILL: return "SIGILL";
	case SIGTRAP: return "SIGTRAP";
	}
	static char b[32];
	snprintf(b, sizeof b, "signal %d", s);
	return b;
}

/* "r" or "-1 ENAME" */
const char *rcs(long r, int e)
{
	static char b[8][48];
	static int k;
	char *o = b[k++ & 7];
	if (r < 0)
		snprintf(o, sizeof b[0], "-1 %s", ename(e));
	else
		snprintf(o, sizeof b[0], "%ld", r);
	return o;
}

const char *esc(const void *p, size_t n)
{
	static char b[4][400];
	static int k;
	char *o = b[k++ & 3];
	const unsigned char *c = p;
	size_t j = 0, lim = n > 48 ? 40 : n;
	for (size_t i = 0; i < lim; i++) {
		if (c[i] >= 0x20 && c[i] < 0x7f && c[i] != '"' && c[i] != '\\')
			o[j++] = (char)c[i];
		else
			j += (size_t)snprintf(o + j, 8, "\\x%02x", c[i]);
	}
	if (lim < n)
		j += (size_t)snprintf(o + j, 48, "...(%zu bytes)", n);
	o[j] = 0;
	return o;
}

const char *flagstr(int f)
{
	static char b[4][128];
	static int k;
	char *o = b[k++ & 3];
	o[0] = 0;
	static const struct { int bit; const char *n; } t[] = {
		{ MSG_PEEK, "MSG_PEEK" }, { MSG_WAITALL, "MSG_WAITALL" }, { MSG_DONTWAIT, "MSG_DONTWAIT" },
		{ MSG_OOB, "MSG_OOB" }, { MSG_NOSIGNAL, "MSG_NOSIGNAL" }, { MSG_TRUNC, "MSG_TRUNC" },
		{ MSG_CTRUNC, "MSG_CTRUNC" }, { MSG_EOR, "MSG_EOR" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (f & t[i].bit) {
			strcat(o, "|");
			strcat(o, t[i].n);
			f &= ~t[i].bit;
		}
	if (f)
		snprintf(o + strlen(o), 32, "|0x%x", (unsigned)f);
	return o[0] ? o + 1 : "0";
}

const char *bits(unsigned ev, bool ep)
{
	static char b[4][200];
	static int k;
	char *o = b[k++ & 3];
	o[0] = 0;
	static const struct { unsigned bit; const char *n; } t[] = {
		{ POLLIN, "IN" }, { POLLPRI, "PRI" }, { POLLOUT, "OUT" }, { POLLERR, "ERR" },
		{ POLLHUP, "HUP" }, { POLLNVAL, "NVAL" }, { POLLRDNORM, "RDNORM" }, { POLLRDBAND, "RDBAND" },
		{ POLLWRNORM, "WRNORM" }, { POLLWRBAND, "WRBAND" }, { POLLRDHUP, "RDHUP" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (ev & t[i].bit) {
			if (o[0])
				strcat(o, "|");
			strcat(o, ep ? "EPOLL" : "POLL");
			strcat(o, t[i].n);
			ev &= ~t[i].bit;
		}
	if (ev)
		snprintf(o + strlen(o), 32, "%s0x%x", o[0] ? "|" : "", ev);
	return o[0] ? o : "0";
}

uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

short POLL1(int fd, short ev, int ms)
{
	struct pollfd p = { fd, ev, 0 };
	errno = 0;
	int r = poll(&p, 1, ms);
	int e = errno;
	say("poll(%s, %dms) = %s revents=%s", evstr(ev), ms, rcs(r, e), evstr(p.revents));
	return p.revents;
}


void IOCTL_INT(int fd, unsigned long req, const char *name)
{
	int v = -7;
	errno = 0;
	int r = ioctl(fd, req, &v);
	int e = errno;
	if (r < 0)
		say("ioctl(%s) = %s", name, rcs(r, e));
	else
		say("ioctl(%s) = %d, value %d", name, r, v);
}

int GETINT(int fd, int lvl, int opt, const char *name)
{
	int v = -7;
	socklen_t l = sizeof v;
	errno = 0;
	int r = getsockopt(fd, lvl, opt, &v, &l);
	int e = errno;
	if (r < 0)
		say("getsockopt(%s) = %s", name, rcs(r, e));
	else if (opt == SO_ERROR && lvl == SOL_SOCKET)
		say("getsockopt(%s) = %d, value %s, len %u", name, r, v ? ename(v) : "0", (unsigned)l);
	else
		say("getsockopt(%s) = %d, value %d, len %u", name, r, v, (unsigned)l);
	return v;
}

void SETINT(int fd, int lvl, int opt, const char *name, int v)
{
	char label[96];
	snprintf(label, sizeof label, "setsockopt(%s, %d)", name, v);
	RC(label, setsockopt(fd, lvl, opt, &v, sizeof v));
}

void fill(uint8_t *b, size_t n, uint64_t pos, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(pos + i, seed);
}

void rx_init(struct rx *r)
{
	memset(r, 0, sizeof *r);
	r->fnv = 2166136261u;
}

void rx_feed(struct rx *r, const uint8_t *b, size_t n, uint64_t start, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t pos = start + r->got + i;
		if (!r->mismatch && b[i] != pat(pos, seed)) {
			r->mismatch = true;
			r->bad_at = pos;
		}
		r->fnv = (r->fnv ^ b[i]) * 16777619u;
	}
	r->got += n;
}

void rx_say(const struct rx *r, const char *what)
{
	if (!what) { /* until EOF: the amount depends on the window, not printed */
		say("received until EOF: pattern %s", r->mismatch ? "MISMATCH" : "ok");
		return;
	}
	if (r->mismatch)
		say("%s %zu bytes, checksum %08x, pattern MISMATCH at byte %" PRIu64, what, r->got, r->fnv, r->bad_at);
	else
		say("%s %zu bytes, checksum %08x, pattern ok", what, r->got, r->fnv);
}

void EPW(int ep, int ms)
{
	struct epoll_event ev[4];
	memset(ev, 0, sizeof ev);
	errno = 0;
	int n = epoll_wait(ep, ev, 4, ms);
	int e = errno;
	if (n <= 0) {
		say("epoll_wait(%dms) = %s", ms, rcs(n, e));
		return;
	}
	char list[256] = "";
	for (int i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s data=%" PRIu64, i ? ", " : "",
			 epstr(ev[i].events), (uint64_t)ev[i].data.u64);
	say("epoll_wait(%dms) = %d [%s]", ms, n, list);
}

void EPCTL(int ep, int op, int fd, uint32_t events, uint64_t data, const char *label)
{
	struct epoll_event ev;
	memset(&ev, 0, sizeof ev);
	ev.events = events;
	ev.data.u64 = data;
	RC(label, epoll_ctl(ep, op, fd, &ev));
}

/* ------------------------------------------------------------ addresses */

int port_of(const struct addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
}

void loopback_of(int fam, int port, struct addr *o)
{
	memset(o, 0, sizeof *o);
	if (fam == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&o->ss;
		s->sin_family = AF_INET;
		s->sin_port = htons((uint16_t)port);
		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		o->len = sizeof *s;
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&o->ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons((uint16_t)port);
		s->sin6_addr = in6addr_loopback;
		o->len = sizeof *s;
	}
}

/* "AF_INET 127.0.0.1 len=16" (no port) */
const char *adesc(const struct addr *a)
{
	static char b[4][128];
	static int k;
	char *o = b[k++ & 3];
	char ip[INET6_ADDRSTRLEN] = "?";
	const char *fam = "AF_?";
	if (a->ss.ss_family == AF_INET) {
		fam = "AF_INET";
		inet_ntop(AF_INET, &((const struct sockaddr_in *)&a->ss)->sin_addr, ip, sizeof ip);
	} else if (a->ss.ss_family == AF_INET6) {
		fam = "AF_INET6";
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&a->ss)->sin6_addr, ip, sizeof ip);
	} else if (a->ss.ss_family == AF_UNSPEC) {
		fam = "AF_UNSPEC";
	}
	snprintf(o, sizeof b[0], "%s %s len=%u port=%s", fam, ip, (unsigned)a->len, port_of(a) ? "set" : "0");
	return o;
}

/* The same endpoint?  An IPv4 address equals its v4-mapped IPv6 form. */
bool same_ep(const struct addr *x, const struct addr *y)
{
	uint8_t ax[16], ay[16];
	const struct addr *in[2] = { x, y };
	uint8_t *out[2] = { ax, ay };
	for (int i = 0; i < 2; i++) {
		memset(out[i], 0, 16);
		if (in[i]->ss.ss_family == AF_INET) {
			out[i][10] = out[i][11] = 0xff;
			memcpy(out[i] + 12, &((const struct sockaddr_in *)&in[i]->ss)->sin_addr, 4);
		} else if (in[i]->ss.ss_family == AF_INET6) {
			memcpy(out[i], &((const struct sockaddr_in6 *)&in[i]->ss)->sin6_addr, 16);
		} else {
			return false;
		}
	}
	return port_of(x) == port_of(y) && memcmp(ax, ay, 16) == 0;
}

void get_name(int fd, bool peer, struct addr *a)
{
	memset(a, 0, sizeof *a);
	a->len = sizeof a->ss;
	int r = peer ? getpeername(fd, (struct sockaddr *)&a->ss, &a->len)
		     : getsockname(fd, (struct sockaddr *)&a->ss, &a->len);
	if (r < 0) {
		say("%s: %s", peer ? "getpeername" : "getsockname", rcs(r, errno));
		memset(a, 0, sizeof *a);
	}
}

/* ------------------------------------------------------------ more observations */

void SELECT(int fd, bool r, bool w, bool x, int ms)
{
	fd_set rs, ws, xs;
	FD_ZERO(&rs);
	FD_ZERO(&ws);
	FD_ZERO(&xs);
	if (r)
		FD_SET(fd, &rs);
	if (w)
		FD_SET(fd, &ws);
	if (x)
		FD_SET(fd, &xs);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	errno = 0;
	int n = select(fd + 1, &rs, &ws, &xs, &tv);
	int e = errno;
	char want[16] = "", got[32] = "";
	snprintf(want, sizeof want, "%s%s%s", r ? "r" : "", w ? "w" : "", x ? "x" : "");
	if (n > 0)
		snprintf(got, sizeof got, " ready:%s%s%s", FD_ISSET(fd, &rs) ? " read" : "",
			 FD_ISSET(fd, &ws) ? " write" : "", FD_ISSET(fd, &xs) ? " except" : "");
	say("select(%s, %dms) = %s%s", want, ms, rcs(n, e), got);
}

const char *tcpstate(int s)
{
	static const char *n[] = { "?", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2",
				   "TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING" };
	return s >= 0 && s < (int)(sizeof n / sizeof n[0]) ? n[s] : "??";
}

void TCPINFO(int fd)
{
	struct tcp_info ti;
	memset(&ti, 0, sizeof ti);
	socklen_t l = sizeof ti;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
		say("getsockopt(TCP_INFO) = %s", rcs(-1, errno));
	else
		say("getsockopt(TCP_INFO): tcpi_state %s", tcpstate(ti.tcpi_state));
}

/* Nonblocking sends until EAGAIN persists past a few settles of settle_us
 * each; the total.  The socket's blocking mode is left as it was. */
size_t fill_nonblocking(int fd, unsigned settle_us)
{
	bool was_nb = fcntl(fd, F_GETFL) & O_NONBLOCK;
	set_nonblock(fd, true);
	uint8_t b[16 * KiB];
	memset(b, 'f', sizeof b);
	size_t total = 0;
	bool eagain = false;
	for (int round = 0; round < 3; round++) {
		eagain = false;
		while (total < 64 * MiB) {
			ssize_t w = send(fd, b, sizeof b, 0);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				eagain = errno == EAGAIN;
				if (!eagain)
					say("send: %s", ename(errno));
				break;
			}
			total += (size_t)w;
		}
		usleep(settle_us);
	}
	set_nonblock(fd, was_nb);
	say("nonblocking sender stopped by EAGAIN: %s", eagain ? "yes" : "no");
	if (getenv("SEM_EXACT"))
		say("exact sent: %zu", total);
	return total;
}
