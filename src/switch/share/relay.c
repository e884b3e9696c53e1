/* relay.c — a relay process carries a switched connection for a program
 * exec'd with it (see relay.h).
 *
 * The relay is forked (twice, so that it is nobody's child: the application
 * never reaps or waits for it) from the image about to exec, so it shares the
 * connection's fork-shared state and holds it like any forked process.  It
 * keeps only what it needs (the connection's fds, its end of the Unix socket,
 * the provider's wake-up fds, the log), and copies bytes both ways until both
 * directions are closed, turning end-of-file into shutdown(SHUT_WR) on the
 * other side.  The exec'ing image lets go of the connection as a forked
 * process does when it closes its copy. */
#include "switch/share/relay_priv.h"
#include "switch/share/handover.h"

#include "common/log.h"
#include "common/real.h"
#include "common/sys.h"
#include "switch/setup/setup.h"
#include "switch/stat/statreg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/sockios.h>
#include <unistd.h>

struct collect {
	struct held *v;
	int n, max;
};

static void collect_one(int fd, struct ssw_sock *s, void *arg)
{
	struct collect *c = arg;
	for (int i = 0; i < c->n; i++) {
		if (c->v[i].s == s) {
			if (c->v[i].nfds < MAXFDS)
				c->v[i].fds[c->v[i].nfds++] = fd;
			return;
		}
	}
	if (c->n == c->max)
		return;
	ssw_sock_ref(s); /* under the table lock: the entry holds one */
	c->v[c->n++] = (struct held){ .s = s, .fds = { fd }, .nfds = 1 };
}

/* Every switched socket with its fds, each with a reference; false if none
 * or no memory.  Pair with release_all. */
static bool collect_all(struct collect *c)
{
	c->n = 0;
	c->max = 256;
	c->v = ssw_fdtab_count() ? malloc(sizeof *c->v * (size_t)c->max) : NULL;
	if (c->v)
		ssw_fdtab_each(collect_one, c);
	return c->n > 0;
}

static void release_all(struct collect *c)
{
	for (int i = 0; i < c->n; i++)
		ssw_sock_unref(c->v[i].s);
	free(c->v);
}

bool ssw_has_switched(void)
{
	return ssw_fdtab_count() > 0;
}

/* The fd still is a TCP socket of the table's family: a close the switch did
 * not see (fclose of an fdopen'd socket, a raw system call) leaves a stale
 * entry, and numbers reused through our calls clear theirs. */
static bool same_socket(int fd, const struct ssw_sock *s)
{
	struct stat st;
	int dom = 0;
	socklen_t l = sizeof dom;
	if (SYS_(fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	return sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 && dom == s->family;
}

/* Keep the fds of h that still are its socket; true if one of them stays
 * open across exec (no FD_CLOEXEC). */
static bool live_fds(struct held *h)
{
	int live = 0;
	bool inherit = false;
	for (int j = 0; j < h->nfds; j++) {
		if (!same_socket(h->fds[j], h->s))
			continue;
		h->fds[live++] = h->fds[j];
		if (!(sys_fcntl(h->fds[j], F_GETFD, 0) & FD_CLOEXEC))
			inherit = true;
	}
	h->nfds = live;
	return inherit;
}

/* ---- the relay process ---------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Close every fd but k[]: the relay must not keep the application's files,
 * pipes and other connections open (a reader would never see their EOF). */
static void close_others(int *k, int nk)
{
	qsort(k, (size_t)nk, sizeof *k, cmp_int);
	unsigned lo = 0;
	for (int i = 0; i <= nk; i++) {
		unsigned hi = i < nk ? (unsigned)k[i] : ~0u;
		if (hi > lo && sys_close_range(lo, hi - 1, 0) < 0) {
			struct rlimit rl;
			unsigned top = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (1u << 20) ? (unsigned)rl.rlim_cur : 1u << 16;
			for (unsigned fd = lo; fd < hi && fd < top; fd++)
				sys_close((int)fd);
		}
		if (i < nk)
			lo = (unsigned)k[i] + 1;
	}
}

/* One read or write on an end: bytes moved, or -1 with errno. */
static ssize_t end_recv(struct ssw_sock *s, int fd, void *buf, size_t len)
{
	if (!s)
		return sys_recv(fd, buf, len, MSG_DONTWAIT);
	struct iovec v = { buf, len };
	ssize_t n = ssw_recv(s, &v, 1, MSG_DONTWAIT);
	if (n == SSW_PASS)
		return sys_recv(fd, buf, len, MSG_DONTWAIT);
	if (n < 0) {
		errno = (int)-n;
		return -1;
	}
	return n;
}

static ssize_t end_send(struct ssw_sock *s, int fd, const void *buf, size_t len)
{
	if (!s)
		return sys_send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	struct iovec v = { (void *)buf, len };
	ssize_t n = ssw_send(s, &v, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n == SSW_PASS)
		return sys_send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0) {
		errno = (int)-n;
		return -1;
	}
	return n;
}

static void end_shut_wr(struct ssw_sock *s, int fd)
{
	/* the application's end-of-file, while another process holds the
	 * connection too (a helper a shell ran with it): that process let go
	 * of its copy, which ends nothing for the others */
	if (s && s->sess && !ssw_session_last_holder(s->sess))
		return;
	if (!s || ssw_shutdown(s, SHUT_WR) == SSW_PASS)
		sys_shutdown(fd, SHUT_WR);
}

/* Take what the application read of the peeked bytes handed to it. */
static void lazy_account(struct dir *d, struct ssw_session *sess)
{
	int inq = 0;
	if (!d->peeked || sys_ioctl(d->app, SIOCINQ, &inq) < 0 || inq < 0 || (size_t)inq > d->off)
		return;
	size_t read = d->off - (size_t)inq;
	if (read > d->taken) {
		ssize_t t = ssw_session_take_at(sess, d->pos + d->taken, read - d->taken);
		if (t < (ssize_t)(read - d->taken)) {
			/* another holder read them meanwhile (both read at once: the
			 * application's copies are the same bytes); start again */
			d->peeked = false;
			d->off = d->len = d->taken = 0;
			return;
		}
		d->taken += (size_t)t;
		SSW_DEBUG("relay: took %zd at %llu", t, (unsigned long long)(d->pos + d->taken - (size_t)t));
		d->nap_us = NAP_FIRST_US;
	}
	if (d->taken == d->len) {
		d->peeked = false;
		d->off = d->len = d->taken = 0;
		d->nap_us = 0;
	}
}

/* The lazy way of `in` (see struct dir): peek, hand over, take as read.
 * Called while another process holds the connection. */
static void pump_lazy(struct dir *d, struct ssw_session *sess, short rev_from, short rev_to)
{
	lazy_account(d, sess);
	if (!d->peeked && !d->eof && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
		ssize_t n = ssw_session_peek_at(sess, d->buf, RELAY_BUF, &d->pos);
		if (n > 0) {
			d->len = (size_t)n;
			d->off = 0;
			d->peeked = true;
			d->nap_us = NAP_FIRST_US;
		} else if (n < 0) {
			SSW_DEBUG("relay: fd %d: %s (peeking)", d->from, strerror((int)-n));
			d->eof = true;
		} else {
			if (!d->nap_us) /* readable, yet nothing to peek (a rendezvous): look later */
				d->nap_us = NAP_FIRST_US;
		}
	}
	if (d->off < d->len && (rev_to & (POLLOUT | POLLERR | POLLHUP))) {
		ssize_t n = end_send(d->sto, d->to, d->buf + d->off, d->len - d->off);
		if (n > 0)
			d->off += (size_t)n;
		else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			d->off = d->len = 0; /* the application is gone: nothing was taken */
			d->peeked = false;
			d->eof = true;
		}
	}
	if (d->eof && !d->peeked && !d->shut) {
		sys_shutdown(d->to, SHUT_WR);
		d->shut = true;
	}
}

/* Nothing more goes to the application: what it did not read of what was
 * handed over stays the connection's (for the others, in lazy mode). */
static void in_done(struct dir *d)
{
	d->eof = d->shut = true;
	d->len = d->off = 0;
	d->peeked = false;
}

/* This relay became the connection's last holder: bytes it peeked are
 * taken now (those not handed over yet go out as pump sends them), and
 * `in` goes on as pump does. */
static void lazy_end(struct dir *d, struct ssw_session *sess)
{
	if (d->peeked && d->len > d->taken)
		(void)ssw_session_take_at(sess, d->pos + d->taken, d->len - d->taken);
	d->peeked = false;
	d->taken = 0;
	d->nap_us = 0;
	if (d->off == d->len)
		d->off = d->len = 0;
}

void relay_pump(struct dir *d, short rev_from, short rev_to)
{
	if (!d->eof && d->len < RELAY_BUF && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
		ssize_t n = end_recv(d->sfrom, d->from, d->buf + d->len, RELAY_BUF - d->len);
		if (n > 0) {
			d->len += (size_t)n;
			d->total += (uint64_t)n;
		} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			SSW_DEBUG("relay: fd %d: %s after %llu bytes", d->from, n ? strerror(errno) : "end of file",
				  (unsigned long long)d->total);
			d->eof = true; /* a reset reads as the end here: a Unix socket has no RST */
		}
	}
	if (d->off < d->len && (rev_to & (POLLOUT | POLLERR | POLLHUP))) {
		ssize_t n = end_send(d->sto, d->to, d->buf + d->off, d->len - d->off);
		if (n > 0) {
			d->off += (size_t)n;
			if (d->off == d->len)
				d->off = d->len = 0;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			SSW_DEBUG("relay: send fd %d: %s", d->to, strerror(errno));
			d->off = d->len = 0; /* the receiver is gone: nothing more goes that way */
			d->eof = true;
		}
	}
	if (d->eof && d->len == 0 && !d->shut) {
		end_shut_wr(d->sto, d->to);
		d->shut = true;
	}
}

/* app, pidfd: for an exec'd program (relay(exec)), the relay's copy of its
 * end and the program's pidfd (-1 otherwise: see struct dir); lfd, st: the
 * listening socket of the relay's name and the application's end as fstat
 * saw it (a receiver asks there for the connection: handover_pass.c) */
static _Noreturn void relay_main(struct held *h, int u, int app, int pidfd, int lfd, const struct stat *st)
{
	ssw_pid_forget();
	setsid();
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &sa, NULL); /* the application's handlers are not ours */
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sigset_t none;
	sigemptyset(&none);
	pthread_sigmask(SIG_SETMASK, &none, NULL);

	int n = h->fds[0];
	int k[6 + RELAY_KEEP_FDS], nk = 0;
	k[nk++] = n;
	k[nk++] = u;
	k[nk++] = ssw_log_fd();
	if (lfd >= 0)
		k[nk++] = lfd;
	if (app >= 0 && pidfd >= 0) {
		k[nk++] = app;
		k[nk++] = pidfd;
	}
	nk += ssw_session_keep_fds(h->s->sess, k + nk, RELAY_KEEP_FDS);
	/* the table forgets the rest; the other copies of this one close normally */
	ssw_fdtab_forget_except(n);
	close_others(k, nk);
	/* seen as such in ps; it keeps no stat registry (no threads of its own) */
	prctl(PR_SET_NAME, "ssw-relay", 0, 0, 0);

	if (app < 0 || pidfd < 0)
		app = pidfd = -1; /* closed by close_others */
	struct dir in = { .from = n, .to = u, .sfrom = h->s, .buf = malloc(RELAY_BUF), .app = app };
	struct dir out = { .from = u, .to = n, .sto = h->s, .buf = malloc(RELAY_BUF), .app = -1 };
	struct ssw_session *sess = h->s->sess;
	bool lazy = app >= 0 && !ssw_session_last_holder(sess);
	if (!in.buf || !out.buf)
		in.eof = out.eof = true;
	struct relay_give g = { .lfd = lfd, .app_dev = st->st_dev, .app_ino = st->st_ino, .h = h, .u = u, .in = &in, .out = &out };
	while (!(in.shut && out.shut)) {
		if (lazy && ssw_session_last_holder(sess)) {
			lazy = false;
			lazy_end(&in, sess);
		}
		if (!lazy && in.app >= 0) {
			/* the application's end is its own again: its close shows */
			sys_close(in.app);
			sys_close(pidfd);
			in.app = pidfd = -1;
		}
		struct pollfd p[4] = { { .fd = n }, { .fd = u }, { .fd = lfd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
		if (!in.eof && in.len < RELAY_BUF && !(lazy && (in.peeked || in.nap_us)))
			p[0].events |= POLLIN;
		if (out.len)
			p[0].events |= POLLOUT;
		if (!out.eof && out.len < RELAY_BUF)
			p[1].events |= POLLIN;
		if (in.len > in.off || (!lazy && in.len))
			p[1].events |= POLLOUT;
		/* lazy: the application's reads show only in its queue, looked at
		 * again after a nap that grows while nothing changes */
		struct timespec nap = { in.nap_us / 1000000, (in.nap_us % 1000000) * 1000L };
		int pr = ssw_poll(p, lazy ? 4 : 3, lazy && in.nap_us ? &nap : NULL, NULL);
		if (pr < 0) {
			if (pr == -EINTR)
				continue;
			SSW_WARN("relay: poll: %s", strerror(-pr));
			break;
		}
		/* The application closed its end for good: nobody reads what the
		 * peer sends any more; what the application sent still goes out. */
		if ((p[1].revents & POLLHUP) && out.eof && !in.shut) {
			SSW_DEBUG("relay: the application closed its end");
			in_done(&in);
		}
		if (p[2].revents & POLLIN) {
			g.lazy = lazy;
			if (relay_give(&g)) {
				/* the connection is the receiver's now: nothing here
				 * closes or touches it (its descriptors go with the exit) */
				SYS_(exit_group, 0);
			}
			continue;
		}
		if (lazy && (p[3].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
			/* the program exited: what it read is known exactly, and
			 * what it did not read stays the others' */
			lazy_account(&in, sess);
			SSW_DEBUG("relay: the program exited");
			if (!in.shut)
				sys_shutdown(u, SHUT_WR);
			in_done(&in);
			lazy = false; /* its copy of the end goes (never polled again): the last close of it shows */
			continue;
		}
		if (lazy) {
			int was = in.nap_us;
			pump_lazy(&in, sess, pr == 0 && !in.peeked ? POLLIN : p[0].revents, p[1].revents);
			if (pr == 0 && in.nap_us == was && in.nap_us && in.nap_us < NAP_MAX_US)
				in.nap_us *= 2; /* nothing changed in the nap */
		} else {
			relay_pump(&in, p[0].revents, p[1].revents);
		}
		relay_pump(&out, p[1].revents, p[0].revents);
	}
	SSW_DEBUG("relay: done (in %d/%d, out %d/%d, lazy %d)", in.eof, in.shut, out.eof, out.shut, lazy);
	ssw_session_relay_ending(sess); /* its hold and its count as a relay go together at its close */
	ssw_close(n);
	/* collect_all's reference: the last one lets go of the connection (the
	 * last holder's close: FIN, or RST over unread data) */
	ssw_sock_unref(h->s);
	sys_close(u);
	/* what the close handed over still leaves (fabric: from this
	 * process's memory, which exit_group takes) */
	ssw_providers_quiesce();
	SYS_(exit_group, 0);
	__builtin_unreachable();
}

/* ---- the exec'ing image ----------------------------------------------------- */

/* A connected pair whose listening end carries the connection's name:
 * sv[0] the application's end, sv[1] the relay's, sv[2] the listening
 * socket (the relay keeps it: a receiver of the application's end asks
 * there for the connection, handover_pass.c). */
static int named_pair(const struct ssw_sock *s, int sv[3])
{
	struct sockaddr_un un;
	socklen_t ul;
	if (ssw_relay_name(&s->local, s->local_len, &s->peer, s->peer_len, &un, &ul) < 0)
		return -EINVAL;
	int lfd = sys_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int cfd = sys_socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int afd = -1, e = 0;
	if (lfd < 0 || cfd < 0 || sys_bind(lfd, (struct sockaddr *)&un, ul) < 0 || sys_listen(lfd, 4) < 0 ||
	    sys_connect(cfd, (struct sockaddr *)&un, ul) < 0 || (afd = sys_accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		e = -errno;
	if (e) {
		if (lfd >= 0)
			sys_close(lfd);
		if (cfd >= 0)
			sys_close(cfd);
		return e;
	}
	sv[0] = cfd;
	sv[1] = afd;
	sv[2] = lfd;
	return 0;
}

/* exec: for a program exec'd with the connection (the relay may then have
 * to share it with other holders: struct dir), else SCM_RIGHTS */
static int relay(struct held *h, bool exec)
{
	int sv[3] = { -1, -1, -1 }, pp[2];
	int e = named_pair(h->s, sv);
	if (e < 0)
		return e;
	struct stat st;
	if (SYS_(fstat, sv[0], &st) < 0 || sys_pipe2(pp, O_CLOEXEC) < 0) {
		e = -errno;
		for (int i = 0; i < 3; i++)
			sys_close(sv[i]);
		return e;
	}
	ssw_session_relay_hold(h->s->sess, 1); /* the relay's */
	pid_t me = (pid_t)SYS_(getpid, 0);
	pid_t a = ssw_real_fork_outer(); /* no holder counting: the relay takes its one hold itself */
	if (a == 0) {
		pid_t b = ssw_real_fork_outer();
		if (b == 0) {
			/* the program's pidfd before it may go on (and exit) */
			int pidfd = exec ? (int)SYS_(pidfd_open, me, 0) : -1;
			int app = exec && pidfd >= 0 ? sv[0] : -1;
			if (app < 0)
				sys_close(sv[0]);
			sys_close(pp[0]);
			(void)!sys_write(pp[1], "r", 1); /* started: the connection is ours */
			sys_close(pp[1]);
			(void)sys_fcntl(sv[2], F_SETFL, O_RDWR | O_NONBLOCK);
			relay_main(h, sv[1], app, pidfd, sv[2], &st);
		}
		SYS_(exit_group, 0);
	}
	sys_close(sv[1]);
	sys_close(sv[2]);
	sys_close(pp[1]);
	/* B says it started; A's exit status cannot tell us, since the
	 * application's SIGCHLD handler may reap A first */
	char c;
	ssize_t got;
	while ((got = sys_read(pp[0], &c, 1)) < 0 && errno == EINTR)
		;
	sys_close(pp[0]);
	if (a > 0)
		while (SYS_(wait4, a, NULL, 0, NULL) < 0 && errno == EINTR)
			;
	if (got != 1) {
		ssw_session_relay_hold(h->s->sess, -1);
		sys_close(sv[0]);
		return -EAGAIN;
	}
	if (atomic_load(&h->s->nonblock))
		sys_fcntl(sv[0], F_SETFL, O_RDWR | O_NONBLOCK);
	for (int i = 0; i < h->nfds; i++) {
		int fd = h->fds[i];
		int fl = sys_fcntl(fd, F_GETFD, 0);
		sys_dup3(sv[0], fd, fl >= 0 && (fl & FD_CLOEXEC) ? O_CLOEXEC : 0);
		struct ssw_sock *t = ssw_fdtab_take(fd);
		if (t)
			ssw_sock_unref(t); /* the last one lets go of the connection: the relay holds it */
		ssw_epoll_forget(fd);
		ssw_relayed_add(fd, &h->s->local, h->s->local_len, &h->s->peer, h->s->peer_len);
	}
	sys_close(sv[0]);
	SSW_INFO("fd %d: switched connection handed to a relay process (exec or SCM_RIGHTS)", h->fds[0]);
	return 0;
}

/* How long an exec waits, at most, for relays that hold connections it
 * would carry to let go (handover.c): a shell's relays of the commands it
 * ran before its `exec` end as those commands do. */
#define HANDOVER_WAIT_NS (50 * 1000000ull)

void ssw_exec_prepare(bool in_place, bool adopt, struct ssw_exec_undo *u)
{
	u->dropped = NULL;
	u->n = 0;
	u->keep.n = 0;
	u->keep.nmade = 0;
	uint64_t wait_until = ssw_now_ns() + HANDOVER_WAIT_NS;
	u->inherit[0] = '\0';
	struct collect c = { 0 };
	if (collect_all(&c) && in_place)
		u->dropped = malloc(sizeof *u->dropped * (size_t)c.n);
	/* the peers of transports that move with the connections (fabric)
	 * asked all at once: the exec waits for the slowest, not their sum */
	for (int i = 0; in_place && adopt && i < c.n; i++)
		if (c.v[i].s->state == SSW_ST_CONNECTED && c.v[i].s->sess && live_fds(&c.v[i]))
			ssw_session_exec_ask(c.v[i].s->sess);
	for (int i = 0; i < c.n; i++) {
		struct held *h = &c.v[i];
		/* a listener the new program keeps: its providers' part goes
		 * along (setup/exec.c), under its first inherited fd */
		if (in_place && h->s->state == SSW_ST_LISTENING && live_fds(h)) {
			for (int j = 0; j < h->nfds; j++)
				if (!(sys_fcntl(h->fds[j], F_GETFD, 0) & FD_CLOEXEC)) {
					ssw_setup_exec_export(h->s, h->fds[j], u->inherit, sizeof u->inherit, &u->keep);
					break;
				}
			continue;
		}
		if (h->s->state != SSW_ST_CONNECTED || !h->s->sess)
			continue;
		if (live_fds(h)) {
			/* the new image takes it over itself, or a relay carries it */
			int rc = in_place && adopt ? ssw_handover_export(h->s, h->fds, h->nfds, wait_until, u->inherit,
									 sizeof u->inherit, &u->keep)
						   : -EOPNOTSUPP;
			if (rc == 0)
				continue;
			if (in_place && adopt)
				SSW_DEBUG("fd %d: relayed across exec: %s", h->fds[0], strerror(-rc));
			if (relay(h, in_place) == 0)
				continue;
		}
		/* Not inherited: this image's hold ends with it.  The sole holder
		 * keeps it (an exec that fails must find the connection alive);
		 * its peer learns of the end from the provider's hang-up. */
		if (in_place && u->dropped && !ssw_session_last_holder(h->s->sess)) {
			ssw_session_hold(h->s->sess, -1);
			u->dropped[u->n++] = h->s;
			h->s = NULL; /* its reference keeps the session mapped until the undo */
		}
	}
	for (int i = 0; in_place && adopt && i < c.n; i++)
		if (c.v[i].s && c.v[i].s->state == SSW_ST_CONNECTED && c.v[i].s->sess)
			ssw_session_exec_asked_done(c.v[i].s->sess);
	release_all(&c);
	if (in_place)
		ssw_statreg_leave();
}

static bool in_list(const int *fds, int n, int fd)
{
	for (int i = 0; i < n; i++)
		if (fds[i] == fd)
			return true;
	return false;
}

/* A listener sent to another process: that process may accept on it, and
 * its switch cannot tell that the kernel socket is switched here, so a
 * client that reached our provider listeners would wait for an accept that
 * never comes.  The listener goes back to kernel TCP here: new clients
 * connect by the kernel, which any holder accepts (requests already
 * waiting on a provider are reset, as a closed listener's).  A process
 * that shares the listener by fork keeps its own provider listeners (README
 * Limits).  Adopting it in the receiver, as an exec'd image does
 * (setup/exec.c), is not done for SCM_RIGHTS. */
static void pass_listener(struct held *h)
{
	struct ssw_sock *s = h->s;
	pthread_mutex_lock(&s->lock);
	int n = ssw_setup_listener_drop_all(s);
	if (n)
		snprintf(s->lnote, sizeof s->lnote, "%s", "sent to another process (SCM_RIGHTS): kernel TCP only");
	pthread_mutex_unlock(&s->lock);
	if (n)
		SSW_INFO("fd %d: listener sent to another process with SCM_RIGHTS: kernel TCP only from now on",
			 h->fds[0]);
}

void ssw_relay_fds(const int *fds, int n)
{
	struct collect c = { 0 };
	if (!ssw_fdtab_any(fds, n) || !collect_all(&c)) {
		free(c.v);
		return;
	}
	for (int i = 0; i < c.n; i++) {
		struct held *h = &c.v[i];
		bool sent = false;
		for (int j = 0; j < h->nfds; j++)
			sent |= in_list(fds, n, h->fds[j]);
		if (sent && h->s->state == SSW_ST_LISTENING) {
			pass_listener(h);
			continue;
		}
		if (!sent || h->s->state != SSW_ST_CONNECTED || !h->s->sess)
			continue;
		(void)live_fds(h);
		if (h->nfds && relay(h, false) < 0)
			SSW_WARN("fd %d: cannot relay a switched connection sent to another process", h->fds[0]);
	}
	release_all(&c);
}

void ssw_exec_failed(struct ssw_exec_undo *u)
{
	ssw_setup_exec_undo(&u->keep);
	ssw_session_handover_failed();
	for (int i = 0; i < u->n; i++) {
		ssw_session_hold(u->dropped[i]->sess, 1);
		ssw_sock_unref(u->dropped[i]);
	}
	free(u->dropped);
	u->dropped = NULL;
	u->n = 0;
}
