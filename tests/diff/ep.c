/* ep.c — one endpoint of a differential-tester program: a plain socket
 * program (kernel TCP, or the switch when preloaded) that runs the steps the
 * driver sends it and prints what the application observed.
 *
 * The main process reads commands from its pipe; a forked child (OP_FORK)
 * reads its own pipe; a second thread (OP_THREAD) makes one blocking call,
 * and the main process reports its result at the settle where the model
 * says it must have returned (never when it happens: the transcript stays
 * in step order).  Every line goes to the driver's report pipe through
 * tests/lib/transcript.c's say(), prefixed with the actor (A.M, B.C, ...). */
#include "diff.h"
#include "transcript.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int me;                 /* 0 = A, 1 = B */
static int cmd_fd, cmd_child_fd;
static int sock = -1, lfd = -1, epfd = -1;
static int slow = 1;
static bool light;             /* settle without FIONREAD (struct prog's light) */
static struct addr server;     /* B: where A listens */
static pid_t child = -1;       /* main: the forked child */
static bool is_child;

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void reply(long v)
{
	char b[32];
	int n = snprintf(b, sizeof b, ".ok %ld\n", v);
	write_all_fd(rep_fd, b, (size_t)n);
}

static uint32_t fnv(const uint8_t *b, size_t n, uint32_t h)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}
#define FNV0 2166136261u

/* what a read returned, as the transcript shows it */
static const char *got(const uint8_t *b, long r)
{
	static char o[4][160];
	static int k;
	char *s = o[k++ & 3];
	if (r <= 0)
		return "";
	if (r <= 16)
		snprintf(s, sizeof o[0], " \"%s\"", esc(b, (size_t)r));
	else
		snprintf(s, sizeof o[0], " fnv %08x", fnv(b, (size_t)r, FNV0));
	return s;
}

static const char *sigpipe_note(int before)
{
	return n_sigpipe != before ? " +SIGPIPE" : "";
}

/* n bytes cut into niov pieces (deterministic: by the step's seed) */
static int split(struct iovec *iov, int niov, uint8_t *b, size_t n, uint32_t seed)
{
	if (niov < 1)
		niov = 1;
	if (niov > 8)
		niov = 8;
	size_t left = n;
	for (int i = 0; i < niov; i++) {
		size_t take = i == niov - 1 ? left : (left ? (seed >> (i * 3)) % (left + 1) : 0);
		iov[i].iov_base = b;
		iov[i].iov_len = take;
		b += take;
		left -= take;
	}
	return niov;
}

static int memfd_with(const uint8_t *b, size_t n, size_t off)
{
	int f = memfd_create("diff-sendfile", 0);
	if (f < 0)
		die("memfd_create: %s", ename(errno));
	if (off && pwrite(f, "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~", off, 0) != (ssize_t)off)
		die("pwrite");
	size_t done = 0;
	while (done < n) {
		ssize_t w = pwrite(f, b + done, n - done, (off_t)(off + done));
		if (w <= 0)
			die("pwrite: %s", ename(errno));
		done += (size_t)w;
	}
	return f;
}

/* ------------------------------------------------------------ sends */

/* One send of the kind op; returns what the call returned (errno kept). */
static long send_one(int op, const uint8_t *b, size_t n, int flags, int niov, uint32_t seed, char *desc,
		     size_t dlen)
{
	struct iovec iov[8];
	long r = -1;
	errno = 0;
	switch (op) {
	case OP_SEND:
		snprintf(desc, dlen, "send(%zu, %s)", n, flagstr(flags));
		r = send(sock, b, n, flags);
		break;
	case OP_WRITE:
		snprintf(desc, dlen, "write(%zu)", n);
		r = write(sock, b, n);
		break;
	case OP_WRITEV: {
		int k = split(iov, niov, (uint8_t *)b, n, seed);
		snprintf(desc, dlen, "writev(%zu in %d)", n, k);
		r = writev(sock, iov, k);
		break;
	}
	case OP_SENDMSG: {
		struct msghdr mh;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)split(iov, niov, (uint8_t *)b, n, seed);
		snprintf(desc, dlen, "sendmsg(%zu in %zu, %s)", n, mh.msg_iovlen, flagstr(flags));
		r = sendmsg(sock, &mh, flags);
		break;
	}
	case OP_SENDFILE: {
		size_t off = seed % 37;
		int f = memfd_with(b, n, off);
		off_t o = (off_t)off;
		snprintf(desc, dlen, "sendfile(%zu)", n);
		errno = 0;
		r = sendfile(sock, f, &o, n);
		int e = errno;
		if (r >= 0 && o != (off_t)(off + (size_t)r))
			snprintf(desc + strlen(desc), dlen - strlen(desc), " offset moved %ld", (long)(o - (off_t)off));
		close(f);
		errno = e;
		break;
	}
	case OP_SPLICE_IN: {
		int p[2];
		if (pipe(p) < 0)
			die("pipe: %s", ename(errno));
		if (n && write(p[1], b, n) != (ssize_t)n)
			die("pipe write");
		snprintf(desc, dlen, "splice(pipe -> socket, %zu%s)", n, flags ? ", SPLICE_F_MORE" : "");
		errno = 0;
		r = splice(p[0], NULL, sock, NULL, n, flags ? SPLICE_F_MORE : 0);
		int e = errno;
		close(p[0]);
		close(p[1]);
		errno = e;
		break;
	}
	}
	return r;
}

static void op_send(const struct step *s)
{
	uint8_t *b = malloc((size_t)s->a + 1);
	fill(b, (size_t)s->a, 0, s->seed);
	char d[160];
	int sp = n_sigpipe;
	int flags = s->b;
	if (s->op == OP_SPLICE_IN)
		flags = s->b & 1;
	long r = send_one(s->op, b, (size_t)s->a, flags, s->niov, s->seed, d, sizeof d);
	say("%s = %s%s", d, rcs(r, errno), sigpipe_note(sp));
	free(b);
}

static void op_send_oob(const struct step *s)
{
	uint8_t b[16];
	fill(b, (size_t)s->a, 0, s->seed);
	int sp = n_sigpipe;
	errno = 0;
	long r = send(sock, b, (size_t)s->a, MSG_OOB | MSG_NOSIGNAL);
	say("send(\"%s\", MSG_OOB) = %s%s", esc(b, (size_t)s->a), rcs(r, errno), sigpipe_note(sp));
}

static void op_burst(const struct step *s)
{
	int one = 1, zero = 0;
	if (s->sub)
		RC("setsockopt(TCP_CORK, 1)", setsockopt(sock, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	for (int k = 0; k < s->nsub; k++) {
		const struct sub *u = &s->subs[k];
		uint8_t *b = malloc(u->n + 1);
		fill(b, u->n, 0, s->seed + (uint32_t)k);
		char d[160];
		int sp = n_sigpipe;
		int flags = u->more ? (u->op == OP_SPLICE_IN ? 1 : MSG_MORE) : 0;
		long r = send_one(u->op, b, u->n, flags, u->niov, s->seed + (uint32_t)k, d, sizeof d);
		say("%s = %s%s", d, rcs(r, errno), sigpipe_note(sp));
		free(b);
	}
	switch (s->end) {
	case BURST_END_UNCORK:
		RC("setsockopt(TCP_CORK, 0)", setsockopt(sock, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
		break;
	case BURST_END_NODELAY:
		RC("setsockopt(TCP_NODELAY, 1)", setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
		RC("setsockopt(TCP_CORK, 0)", setsockopt(sock, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
		break;
	case BURST_END_SHUTWR:
		RC("shutdown(SHUT_WR)", shutdown(sock, SHUT_WR));
		break;
	case BURST_END_CLOSE:
		RC("close", close(sock));
		sock = -1;
		break;
	case BURST_END_PLAIN: {
		int sp = n_sigpipe;
		errno = 0;
		long r = send(sock, "!", 1, 0);
		say("send(\"!\", 0) = %s%s", rcs(r, errno), sigpipe_note(sp));
		break;
	}
	}
}

/* ------------------------------------------------------------ reads */

struct rresult {
	long r;
	int e;
	int msg_flags;
	uint8_t *buf;
};

/* One read of the kind op into a fresh buffer. */
static void recv_one(int op, size_t n, int flags, int niov, uint32_t seed, struct rresult *res)
{
	struct iovec iov[8];
	res->buf = calloc(1, n + 1);
	res->msg_flags = -1;
	res->r = -1; /* (an op not below) */
	errno = 0;
	switch (op) {
	case OP_RECV:
		res->r = recv(sock, res->buf, n, flags);
		break;
	case OP_READ:
		res->r = read(sock, res->buf, n);
		break;
	case OP_READV: {
		int k = split(iov, niov, res->buf, n, seed);
		res->r = readv(sock, iov, k);
		break;
	}
	case OP_RECVMSG: {
		struct msghdr mh;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)split(iov, niov, res->buf, n, seed);
		res->r = recvmsg(sock, &mh, flags);
		res->msg_flags = mh.msg_flags;
		break;
	}
	case OP_SPLICE_OUT: {
		int p[2];
		if (pipe(p) < 0)
			die("pipe: %s", ename(errno));
		errno = 0;
		res->r = splice(sock, NULL, p[1], NULL, n, (flags & MSG_DONTWAIT) ? SPLICE_F_NONBLOCK : 0);
		int e = errno;
		if (res->r > 0 && read(p[0], res->buf, (size_t)res->r) != res->r)
			die("pipe read");
		close(p[0]);
		close(p[1]);
		errno = e;
		break;
	}
	}
	res->e = errno;
}

static const char *recv_desc(int op, size_t n, int flags, int niov)
{
	static char d[2][96];
	static int k;
	char *o = d[k++ & 1];
	switch (op) {
	case OP_RECV: snprintf(o, sizeof d[0], "recv(%zu, %s)", n, flagstr(flags)); break;
	case OP_READ: snprintf(o, sizeof d[0], "read(%zu)", n); break;
	case OP_READV: snprintf(o, sizeof d[0], "readv(%zu in %d)", n, niov < 1 ? 1 : niov > 8 ? 8 : niov); break;
	case OP_RECVMSG: snprintf(o, sizeof d[0], "recvmsg(%zu, %s)", n, flagstr(flags)); break;
	case OP_SPLICE_OUT:
		snprintf(o, sizeof d[0], "splice(socket -> pipe, %zu%s)", n, (flags & MSG_DONTWAIT) ? ", SPLICE_F_NONBLOCK" : "");
		break;
	default: snprintf(o, sizeof d[0], "?"); break;
	}
	return o;
}

static void op_recv(const struct step *s)
{
	struct rresult res;
	recv_one(s->op, (size_t)s->a, s->b, s->niov, s->seed, &res);
	char mf[64] = "";
	if (res.msg_flags >= 0)
		snprintf(mf, sizeof mf, " msg_flags=%s", flagstr(res.msg_flags));
	say("%s = %s%s%s", recv_desc(s->op, (size_t)s->a, s->b, s->niov), rcs(res.r, res.e),
	    (s->b & MSG_TRUNC) ? "" : got(res.buf, res.r), mf);
	free(res.buf);
}

static void op_drain_now(void)
{
	uint8_t *b = malloc(65536);
	uint32_t h = FNV0;
	long total = 0, r;
	int e;
	for (;;) {
		errno = 0;
		r = recv(sock, b, 65536, MSG_DONTWAIT);
		e = errno;
		if (r <= 0)
			break;
		h = fnv(b, (size_t)r, h);
		total += r;
	}
	say("reads until nothing: %ld bytes fnv %08x, then %s", total, h, rcs(r, e));
	free(b);
}

/* ------------------------------------------------------------ waits */

static void op_poll(const struct step *s)
{
	POLL1(sock, (short)s->a, s->b);
}

static void op_select(const struct step *s)
{
	SELECT(sock, s->a & 1, s->a & 2, s->a & 4, s->b);
}

static void op_epoll_ctl(const struct step *s)
{
	if (epfd < 0) {
		epfd = epoll_create1(0);
		if (epfd < 0)
			die("epoll_create1: %s", ename(errno));
	}
	char label[128];
	const char *opn = s->a == EPOLL_CTL_ADD ? "ADD" : s->a == EPOLL_CTL_MOD ? "MOD" : "DEL";
	snprintf(label, sizeof label, "epoll_ctl(%s, %s)", opn, epstr((uint32_t)s->b));
	EPCTL(epfd, s->a, sock, (uint32_t)s->b, (uint64_t)s->c, label);
}

/* ------------------------------------------------------------ the thread */

static struct {
	pthread_t th;
	bool running;           /* started, not yet reported */
	struct step s;
	_Atomic int tid;
	_Atomic int done;
	uint64_t done_us;
	/* results, formatted by main */
	long r;
	int e;
	uint32_t revents;
	int nev;
	struct epoll_event ev[4];
	uint8_t *buf;
	int msg_flags;
	int sel;                /* select: ready bits */
	int sp;                 /* SIGPIPEs before */
} T;

static void *thr_main(void *arg)
{
	(void)arg;
	const struct step *s = &T.s;
	T.tid = (int)syscall(SYS_gettid);
	switch (s->sub) {
	case TH_RECV: {
		struct rresult res;
		recv_one(s->c, (size_t)s->a, s->b, s->niov, s->seed, &res);
		T.r = res.r;
		T.e = res.e;
		T.buf = res.buf;
		T.msg_flags = res.msg_flags;
		break;
	}
	case TH_POLL: {
		struct pollfd p = { sock, (short)s->a, 0 };
		errno = 0;
		T.r = poll(&p, 1, -1);
		T.e = errno;
		T.revents = (uint16_t)p.revents;
		break;
	}
	case TH_SELECT: {
		fd_set rs, xs;
		FD_ZERO(&rs);
		FD_ZERO(&xs);
		if (s->a & 1)
			FD_SET(sock, &rs);
		if (s->a & 4)
			FD_SET(sock, &xs);
		errno = 0;
		T.r = select(sock + 1, &rs, NULL, &xs, NULL);
		T.e = errno;
		T.sel = (FD_ISSET(sock, &rs) ? 1 : 0) | (FD_ISSET(sock, &xs) ? 4 : 0);
		break;
	}
	case TH_EPOLL:
		errno = 0;
		T.r = epoll_wait(epfd, T.ev, 4, -1);
		T.e = errno;
		T.nev = T.r > 0 ? (int)T.r : 0;
		break;
	case TH_ACCEPT: {
		errno = 0;
		int fd = accept(lfd, NULL, NULL);
		T.e = errno;
		T.r = fd;
		if (fd >= 0)
			close(fd);
		break;
	}
	case TH_SEND: {
		uint8_t *b = malloc((size_t)s->a);
		fill(b, (size_t)s->a, 0, s->seed);
		errno = 0;
		T.r = send(sock, b, (size_t)s->a, MSG_NOSIGNAL);
		T.e = errno;
		free(b);
		break;
	}
	}
	T.done_us = now_us();
	atomic_store(&T.done, 1);
	return NULL;
}

/* the thread's state letter from /proc ('S': asleep in the kernel) */
static char thr_state(void)
{
	char path[64], b[512];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", atomic_load(&T.tid));
	int f = open(path, O_RDONLY);
	if (f < 0)
		return '?';
	ssize_t n = read(f, b, sizeof b - 1);
	close(f);
	if (n <= 0)
		return '?';
	b[n] = 0;
	char *p = strrchr(b, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

static void op_thread(const struct step *s)
{
	memset(&T, 0, sizeof T);
	T.s = *s;
	T.sp = n_sigpipe;
	if (pthread_create(&T.th, NULL, thr_main, NULL) != 0)
		die("pthread_create: %s", ename(errno));
	T.running = true;
	/* let it get into its call and fall asleep there (the switch's waits
	 * spin and yield first), so that what wakes it is a wake-up */
	uint64_t t0 = now_us();
	while (!atomic_load(&T.done) && now_us() - t0 < 300000u * (unsigned)slow) {
		if (atomic_load(&T.tid) && thr_state() == 'S')
			break;
		usleep(200);
	}
	static const char *const th[] = { "?", "recv", "poll", "select", "epoll_wait", "accept", "send" };
	say("second thread started: %s", th[s->sub % 7]);
}

/* the thread's result line (role X.T) */
static void thr_report(const char *note)
{
	const struct step *s = &T.s;
	const char *saved = role;
	role = me ? "B.T" : "A.T";
	char extra[300] = "";
	switch (s->sub) {
	case TH_RECV: {
		char mf[64] = "";
		if (T.msg_flags >= 0)
			snprintf(mf, sizeof mf, " msg_flags=%s", flagstr(T.msg_flags));
		say("%s = %s%s%s%s", recv_desc(s->c, (size_t)s->a, s->b, s->niov), rcs(T.r, T.e), got(T.buf, T.r), mf,
		    note);
		break;
	}
	case TH_POLL:
		say("poll(%s, -1) = %s revents=%s%s", evstr(s->a), rcs(T.r, T.e), evstr(T.revents), note);
		break;
	case TH_SELECT:
		say("select(%s, NULL) = %s%s%s%s", (s->a & 4) ? "rx" : "r", rcs(T.r, T.e), (T.sel & 1) ? " read" : "",
		    (T.sel & 4) ? " except" : "", note);
		break;
	case TH_EPOLL:
		for (int i = 0; i < T.nev; i++)
			snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "%s%s data=%llu", i ? ", " : " [",
				 epstr(T.ev[i].events), (unsigned long long)T.ev[i].data.u64);
		if (T.nev)
			strcat(extra, "]");
		say("epoll_wait(-1) = %s%s%s", rcs(T.r, T.e), extra, note);
		break;
	case TH_ACCEPT:
		say("accept = %s%s", T.r >= 0 ? "a new socket (closed)" : rcs(T.r, T.e), note);
		break;
	case TH_SEND:
		say("send(%d) = %s%s", s->a, rcs(T.r, T.e), note);
		break;
	}
	role = saved;
	free(T.buf);
	T.buf = NULL;
	pthread_join(T.th, NULL);
	T.running = false;
}

/* ------------------------------------------------------------ big amounts */

static int wait_fd(short ev)
{
	struct pollfd p = { sock, ev, 0 };
	return poll(&p, 1, 5000 * slow);
}

static void xfer_send(const struct step *s)
{
	size_t total = (size_t)s->a, done = 0;
	uint32_t r = s->seed;
	uint8_t *b = malloc(262144);
	int sp = n_sigpipe;
	long err = 0;
	int e = 0;
	while (done < total) {
		r = r * 1103515245u + 12345u;
		size_t n = 1 + (r >> 8) % 262144;
		if (n > total - done)
			n = total - done;
		for (size_t i = 0; i < n; i++)
			b[i] = pat(done + i, s->seed);
		static const uint8_t ops[] = { OP_SEND, OP_WRITE, OP_WRITEV, OP_SENDFILE };
		int op = ops[(r >> 4) % 4];
		char d[160];
		long w = send_one(op, b, n, 0, 3, r, d, sizeof d);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			wait_fd(POLLOUT);
			continue;
		}
		if (w <= 0) {
			err = w;
			e = errno;
			break;
		}
		done += (size_t)w;
	}
	if (err < 0)
		say("xfer: sending %zu bytes: %s after %zu%s", total, rcs(err, e), done, sigpipe_note(sp));
	else
		say("xfer: sent %zu bytes", total);
	free(b);
}

static void xfer_recv(const struct step *s, long want)
{
	uint8_t *b = malloc(262144);
	uint32_t h = FNV0, r = s->seed ^ 0x5a5a5a5au;
	long have = 0;
	while (have < want) {
		r = r * 1103515245u + 12345u;
		size_t n = 1 + (r >> 8) % 262144;
		if ((long)n > want - have)
			n = (size_t)(want - have);
		struct rresult res;
		static const uint8_t ops[] = { OP_RECV, OP_READ, OP_READV, OP_RECV };
		recv_one(ops[(r >> 4) % 4], n, 0, 3, r, &res);
		if (res.r < 0 && res.e == EINTR) {
			free(res.buf);
			continue;
		}
		if (res.r < 0 && res.e == EAGAIN) {
			free(res.buf);
			if (wait_fd(POLLIN) == 0) {
				say("xfer: nothing for 5 s after %ld of %ld bytes", have, want);
				break;
			}
			continue;
		}
		if (res.r <= 0) {
			say("xfer: %s after %ld of %ld bytes", rcs(res.r, res.e), have, want);
			free(res.buf);
			break;
		}
		h = fnv(res.buf, (size_t)res.r, h);
		have += res.r;
		free(res.buf);
	}
	if (have == want)
		say("xfer: received %ld bytes, fnv %08x", have, h);
	free(b);
}

static void drain_fill(long want)
{
	uint8_t *b = malloc(65536);
	long have = 0;
	while (have < want) {
		size_t n = want - have < 65536 ? (size_t)(want - have) : 65536;
		errno = 0;
		long r = recv(sock, b, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN) {
			if (wait_fd(POLLIN) == 0)
				break;
			continue;
		}
		if (r <= 0)
			break;
		have += r;
	}
	say("drained: received everything the sender sent: %s", have == want ? "yes" : "no");
	if (have != want && getenv("DIFF_EXACT"))
		say("drained %ld of %ld", have, want);
	free(b);
}

/* ------------------------------------------------------------ set-up */

static void set_opts(int fd, int opts)
{
	int one = 1;
	if (opts & SET_NODELAY)
		RC("setsockopt(TCP_NODELAY, 1)", setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
	if (opts & SET_OOBINLINE)
		RC("setsockopt(SO_OOBINLINE, 1)", setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one));
	if (opts & SET_CORK)
		RC("setsockopt(TCP_CORK, 1)", setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
}

static void do_listen(const struct cmd *c)
{
	struct addr a;
	loopback_of(c->v6 ? AF_INET6 : AF_INET, 0, &a);
	if (c->addr[0] && inet_pton(AF_INET, c->addr, &((struct sockaddr_in *)&a.ss)->sin_addr) != 1)
		die("bad address %s", c->addr);
	lfd = socket(a.ss.ss_family, SOCK_STREAM, 0);
	if (lfd < 0)
		die("socket: %s", ename(errno));
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	set_opts(lfd, c->lopt);
	if (bind(lfd, (struct sockaddr *)&a.ss, a.len) < 0)
		die("bind: %s", ename(errno));
	RC("listen", listen(lfd, 16));
	struct addr got_;
	get_name(lfd, false, &got_);
	reply(port_of(&got_));
}

static void do_connect(const struct cmd *c)
{
	loopback_of(c->v6 ? AF_INET6 : AF_INET, (int)c->arg, &server);
	if (c->addr[0] && inet_pton(AF_INET, c->addr, &((struct sockaddr_in *)&server.ss)->sin_addr) != 1)
		die("bad address %s", c->addr);
	sock = socket(server.ss.ss_family, SOCK_STREAM, 0);
	if (sock < 0)
		die("socket: %s", ename(errno));
	set_opts(sock, c->copt);
	if (c->nb_connect) {
		set_nonblock(sock, true);
		RC("connect (nonblocking)", connect(sock, (struct sockaddr *)&server.ss, server.len));
		POLL1(sock, POLLOUT, 5000 * slow);
		GETINT(sock, SOL_SOCKET, SO_ERROR, "SO_ERROR");
		RC("connect again", connect(sock, (struct sockaddr *)&server.ss, server.len));
		set_nonblock(sock, false);
	} else {
		RC("connect", connect(sock, (struct sockaddr *)&server.ss, server.len));
	}
	reply(0);
}

static void do_accept(const struct cmd *c)
{
	if (c->acc4_nb) {
		POLL1(lfd, POLLIN, 5000 * slow);
		sock = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
	} else {
		sock = accept(lfd, NULL, NULL);
	}
	if (sock < 0)
		die("accept: %s", ename(errno));
	say("accept = a socket");
	if (c->lopt & SET_CORK) { /* inherited: shown, then off (a corked socket holds data across steps) */
		GETINT(sock, IPPROTO_TCP, TCP_CORK, "TCP_CORK");
		int zero = 0;
		RC("setsockopt(TCP_CORK, 0)", setsockopt(sock, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
	}
	if (!c->keep_listener) {
		RC("close(listener)", close(lfd));
		lfd = -1;
	}
	reply(0);
}

/* ------------------------------------------------------------ steps */

static void op_linger(int v)
{
	struct linger l = { v > 0, v == 2 ? 1 : 0 };
	char label[64];
	snprintf(label, sizeof label, "setsockopt(SO_LINGER, {%d, %d})", l.l_onoff, l.l_linger);
	RC(label, setsockopt(sock, SOL_SOCKET, SO_LINGER, &l, sizeof l));
}

static void op_rcvtimeo(int on)
{
	struct timeval tv = { 0, on ? 20000 : 0 };
	RC(on ? "setsockopt(SO_RCVTIMEO, 20 ms)" : "setsockopt(SO_RCVTIMEO, 0)",
	   setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
}

static void op_names(void)
{
	struct addr a;
	get_name(sock, false, &a);
	say("getsockname: %s", adesc(&a));
	get_name(sock, true, &a);
	say("getpeername: %s", adesc(&a));
}

/* TCP_INFO's state, less what an ACK's timing decides (FIN_WAIT1 or 2,
 * CLOSING or TIME_WAIT, LAST_ACK or CLOSE) */
static void op_tcpinfo(void)
{
	struct tcp_info ti;
	memset(&ti, 0, sizeof ti);
	socklen_t l = sizeof ti;
	if (getsockopt(sock, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0) {
		say("getsockopt(TCP_INFO) = %s", rcs(-1, errno));
		return;
	}
	const char *st = tcpstate(ti.tcpi_state);
	switch (ti.tcpi_state) {
	case TCP_FIN_WAIT1: case TCP_FIN_WAIT2: st = "FIN_WAIT1/2"; break;
	case TCP_CLOSING: case TCP_TIME_WAIT: st = "CLOSING/TIME_WAIT"; break;
	case TCP_LAST_ACK: case TCP_CLOSE: st = "LAST_ACK/CLOSE"; break;
	}
	say("getsockopt(TCP_INFO): tcpi_state %s", st);
}

static void endpoint_loop(void);

static void op_fork(void)
{
	pid_t p = fork();
	if (p < 0)
		die("fork: %s", ename(errno));
	if (p == 0) {
		is_child = true;
		role = me ? "B.C" : "A.C";
		cmd_fd = cmd_child_fd;
		memset(&T, 0, sizeof T);
		child = -1;
		endpoint_loop();
		_exit(0);
	}
	child = p;
	say("fork = a child");
}

static long exec_step(const struct cmd *c)
{
	const struct step *s = &c->step;
	long v = 0;
	switch (s->op) {
	case OP_SEND: case OP_WRITE: case OP_WRITEV: case OP_SENDMSG: case OP_SENDFILE: case OP_SPLICE_IN:
		op_send(s);
		break;
	case OP_SEND_OOB: op_send_oob(s); break;
	case OP_BURST: op_burst(s); break;
	case OP_RECV: case OP_READ: case OP_READV: case OP_RECVMSG: case OP_SPLICE_OUT:
		op_recv(s);
		break;
	case OP_DRAIN_NOW: op_drain_now(); break;
	case OP_POLL: op_poll(s); break;
	case OP_SELECT: op_select(s); break;
	case OP_EPOLL_WAIT: EPW(epfd, s->b); break;
	case OP_FIONREAD: FIONREAD_(sock); break;
	case OP_ATMARK: ATMARK(sock); break;
	case OP_SOERROR: GETINT(sock, SOL_SOCKET, SO_ERROR, "SO_ERROR"); break;
	case OP_TCPINFO: op_tcpinfo(); break;
	case OP_NAMES: op_names(); break;
	case OP_NONBLOCK: {
		int fl = fcntl(sock, F_GETFL);
		RC(s->a ? "fcntl(O_NONBLOCK on)" : "fcntl(O_NONBLOCK off)",
		   fcntl(sock, F_SETFL, s->a ? fl | O_NONBLOCK : fl & ~O_NONBLOCK));
		break;
	}
	case OP_OOBINLINE: SETINT(sock, SOL_SOCKET, SO_OOBINLINE, "SO_OOBINLINE", s->a); break;
	case OP_NODELAY: SETINT(sock, IPPROTO_TCP, TCP_NODELAY, "TCP_NODELAY", s->a); break;
	case OP_CORK: SETINT(sock, IPPROTO_TCP, TCP_CORK, "TCP_CORK", s->a); break;
	case OP_LINGER: op_linger(s->a); break;
	case OP_RCVTIMEO: op_rcvtimeo(s->a); break;
	case OP_EPOLL_CTL: op_epoll_ctl(s); break;
	case OP_SHUTDOWN: {
		static const char *const how[] = { "shutdown(SHUT_RD)", "shutdown(SHUT_WR)", "shutdown(SHUT_RDWR)" };
		RC(how[s->sub % 3], shutdown(sock, s->sub));
		break;
	}
	case OP_CLOSE:
		RC("close", close(sock));
		sock = -1;
		break;
	case OP_EXIT:
		say("exit(0), the socket still open");
		reply(0);
		exit(0);
	case OP_FORK: op_fork(); break;
	case OP_THREAD: op_thread(s); break;
	case OP_FILL: v = (long)fill_nonblocking(sock, 20000u * (unsigned)slow); break;
	case OP_DRAIN_FILL: drain_fill((long)c->arg); break;
	case OP_XFER:
		if (c->arg == 0)
			xfer_send(s);
		else
			xfer_recv(s, s->a + (long)c->extra);
		break;
	case OP_CONNECT2: {
		int fd = socket(server.ss.ss_family, SOCK_STREAM, 0);
		RC("connect (a second socket)", connect(fd, (struct sockaddr *)&server.ss, server.len));
		RC("close (the second socket)", close(fd));
		break;
	}
	case OP_ACCEPT_NOW: {
		errno = 0;
		int fd = accept(lfd, NULL, NULL);
		say("accept = %s", fd >= 0 ? "a new socket (closed)" : rcs(fd, errno));
		if (fd >= 0)
			close(fd);
		break;
	}
	case OP_LPOLL: POLL1(lfd, POLLIN | POLLOUT, 0); break;
	case OP_LSHUTDOWN: RC("shutdown(listener, SHUT_RDWR)", shutdown(lfd, SHUT_RDWR)); break;
	case OP_LCLOSE:
		RC("close(listener)", close(lfd));
		lfd = -1;
		break;
	default:
		die("unknown step %d", s->op);
	}
	return v;
}

/* ------------------------------------------------------------ settle */

static void settle_fd(const struct settle *st)
{
	if (sock < 0)
		return;
	/* FIONREAD counts nothing past an urgent mark: held bytes there are
	 * waited out (README Limits: the kernel pushes what follows urgent
	 * data at once, the switch holds it its 200 ms) */
	if (!light && st->held && st->fionread_min < 0)
		usleep((DIFF_HOLD_MS + 20) * 1000);
	if (st->fionread_min < 0 && !st->revents && !st->unsent && !(light && st->held))
		return;
	/* light (a switched run on shm, whose sends are in the ring when they
	 * return): no FIONREAD, which would take every byte out of the ring;
	 * held bytes are the peer's to take once its hold is over */
	struct settle l;
	if (light) {
		l = *st;
		if (l.fionread_min >= 0)
			l.revents |= POLLIN;
		l.fionread_min = -1;
		if (l.held)
			usleep((DIFF_HOLD_MS + 20) * 1000);
		st = &l;
	}
	uint64_t t0 = now_us(), limit = 2000000u * (uint64_t)slow;
	unsigned nap = 50;
	int inq = -1, outq = -1;
	short rev = 0;
	for (;;) {
		bool ok = true;
		if (st->unsent) { /* left the send queue (an error: nothing to wait for) */
			outq = 0;
			ioctl(sock, SIOCOUTQNSD, &outq);
			ok = outq <= 0;
		}
		if (ok && st->fionread_min >= 0) {
			inq = -1;
			ioctl(sock, FIONREAD, &inq);
			ok = inq >= st->fionread_min;
		}
		if (ok && st->revents) {
			struct pollfd p = { sock, POLLIN | POLLOUT | POLLPRI | POLLRDHUP, 0 };
			poll(&p, 1, 0);
			rev = p.revents;
			ok = ((uint16_t)rev & st->revents) == st->revents;
		}
		if (ok)
			return;
		if (now_us() - t0 > limit)
			break;
		usleep(nap);
		if (nap < 2000)
			nap *= 2;
	}
	say("settle: still waiting after %d s for FIONREAD >= %d, %s%s (FIONREAD %d, revents %s, unsent %d)", 2 * slow,
	    st->fionread_min, evstr(st->revents), st->unsent ? ", nothing unsent" : "", inq, evstr(rev), outq);
}

static void settle_main(const struct settle *st)
{
	uint64_t t0 = now_us();
	if (st->at_end) { /* before either side exits (its FIN would wake it) */
		if (T.running && !atomic_load(&T.done)) {
			const char *saved = role;
			role = me ? "B.T" : "A.T";
			say("blocked until the end");
			role = saved;
		} else if (T.running) {
			thr_report(" [returned before what should wake it]");
		}
		return;
	}
	if (T.running && st->thr_done) {
		uint64_t limit = 2000000u * (uint64_t)slow;
		while (!atomic_load(&T.done) && now_us() - t0 < limit)
			usleep(100);
		if (!atomic_load(&T.done)) {
			const char *saved = role;
			role = me ? "B.T" : "A.T";
			say("still blocked %d s after what should have woken it%s", 2 * slow,
			    st->thr_cause == 1 ? " (its own process's shutdown)" :
			    st->thr_cause == 2 ? " (its child's shutdown)" :
			    st->thr_cause == 3 ? " (a reset its own process's send drew)" : "");
			role = saved;
		} else {
			uint64_t late = T.done_us > t0 ? (T.done_us - t0) / 1000 : 0;
			char note[96] = "";
			if (late > DIFF_LATE_MS + (uint64_t)st->delay_ms)
				snprintf(note, sizeof note, " [woke late: > %d ms%s]", DIFF_LATE_MS,
					 st->thr_cause == 1 ? ", after its own process's shutdown" :
					 st->thr_cause == 2 ? ", after its child's shutdown" :
					 st->thr_cause == 3 ? ", after a reset its own process's send drew" : "");
			thr_report(note);
		}
	} else if (T.running && atomic_load(&T.done)) {
		thr_report(" [returned before what should wake it]");
	}
	if (st->child_exit && child > 0) {
		int status = 0;
		uint64_t limit = 5000000u * (uint64_t)slow;
		pid_t r;
		while ((r = waitpid(child, &status, WNOHANG)) == 0 && now_us() - t0 < limit)
			usleep(200);
		const char *saved = role;
		role = me ? "B.C" : "A.C";
		if (r == 0)
			say("still alive %d s after exit()", 5 * slow);
		else if (WIFEXITED(status))
			say("exited with status %d", WEXITSTATUS(status));
		else if (WIFSIGNALED(status))
			say("killed by %s", signame(WTERMSIG(status)));
		role = saved;
		if (r != 0)
			child = -1;
	}
	if (st->fd_by == 1)
		settle_fd(st);
}

/* ------------------------------------------------------------ loop */

static void endpoint_loop(void)
{
	for (;;) {
		struct cmd c;
		size_t have = 0;
		while (have < sizeof c) {
			ssize_t r = read(cmd_fd, (char *)&c + have, sizeof c - have);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				_exit(4); /* the driver went away */
			have += (size_t)r;
		}
		slow = c.slow > 0 ? c.slow : 1;
		if (c.type == CMD_LISTEN || c.type == CMD_CONNECT)
			light = c.light;
		switch (c.type) {
		case CMD_LISTEN: do_listen(&c); break;
		case CMD_CONNECT: do_connect(&c); break;
		case CMD_ACCEPT: do_accept(&c); break;
		case CMD_EXEC: {
			long v = exec_step(&c);
			reply(v);
			break;
		}
		case CMD_SETTLE:
			if (is_child)
				settle_fd(&c.st);
			else
				settle_main(&c.st);
			reply(0);
			break;
		case CMD_QUIT:
			if (!is_child && child > 0) {
				int st;
				uint64_t t0 = now_us();
				while (waitpid(child, &st, WNOHANG) == 0 && now_us() - t0 < 5000000u * (uint64_t)slow)
					usleep(500);
			}
			reply(0);
			exit(0);
		default:
			die("bad command %d", c.type);
		}
	}
}

/* __ep A|B CMD_FD CMD_CHILD_FD REP_FD */
int diff_endpoint_main(int argc, char **argv)
{
	if (argc != 6)
		return 2;
	me = argv[2][0] == 'B';
	role = me ? "B.M" : "A.M";
	cmd_fd = atoi(argv[3]);
	cmd_child_fd = atoi(argv[4]);
	rep_fd = atoi(argv[5]);
	handle(SIGPIPE, on_sigpipe);
	handle(SIGALRM, on_alarm);
	alarm(120);
	endpoint_loop();
	return 0;
}
