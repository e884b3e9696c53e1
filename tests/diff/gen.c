/* gen.c — the differential tester's programs: generated from a seed, step by
 * step, each step kept only if the model says it is safe where it stands.
 *
 * The model is not an oracle (the kernel is): it only has to know enough
 * to keep a program deterministic and free of hangs.  It tracks, per
 * direction, how many bytes the receiver can read (a range when urgent data
 * makes it uncertain), and per endpoint its shutdowns, resets, who holds
 * the socket (main, a forked child), a blocked second thread and what will
 * wake it.  From that it derives
 *   - whether a step may block forever (then it is not generated),
 *   - what the endpoints wait for after each step before the next one runs
 *     (struct settle: bytes queued, FIN/reset seen, a thread returned),
 *   - which outcomes would depend on timing (a blocked reader woken by a
 *     stream cut into segments; a poll that may or may not see an urgent
 *     byte; how much a full socket took): such steps are not generated.
 * A shrunk program (diff_select) goes through the same model: steps that
 * lost what made them safe are dropped with the rest. */
#include "diff.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

/* ------------------------------------------------------------ random */

static uint64_t rs;
static uint64_t rnd(void)
{
	uint64_t z = (rs += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}
static int rn(int n) { return n > 0 ? (int)(rnd() % (uint64_t)n) : 0; }
static bool chance(int pct) { return rn(100) < pct; }
static int range(int lo, int hi) { return lo + rn(hi - lo + 1); }

/* a size to send: mostly small, sometimes up to the window */
static int send_size(int room)
{
	int n;
	int k = rn(100);
	if (k < 5)
		n = 0;
	else if (k < 15)
		n = 1;
	else if (k < 35)
		n = range(2, 16);
	else if (k < 60)
		n = range(17, 512);
	else if (k < 80)
		n = range(513, 4096);
	else
		n = range(4097, DIFF_WINDOW);
	return n < room ? n : room;
}

/* a buffer to read into: short and long */
static int recv_size(void)
{
	int k = rn(100);
	if (k < 30)
		return range(1, 16);
	if (k < 55)
		return range(17, 512);
	if (k < 75)
		return range(513, 8192);
	if (k < 80)
		return 0;
	return 65536;
}

/* ------------------------------------------------------------ model */

struct mdir { /* bytes from endpoint i to endpoint 1 - i */
	int qmin, qmax;   /* inline bytes the receiver can read */
	int urg;          /* 0: none; 1: an urgent byte waits (POLLPRI); 2: maybe */
	bool residue;     /* urgent bytes may be left in the receiver's queue */
	int fill;         /* 0; 1: filled by OP_FILL; 2: and the receiver read some */
	int fill_base;    /* unread before the fill, less what was read since,
			   * plus a blocked thread's send behind it */
	int nsends;       /* sends behind the unread bytes (kernel TCP: a segment or more each) */
};

struct mside {
	bool m_alive, m_fd, c_alive, c_fd;
	bool gone;        /* every holder closed it: the socket is released */
	bool nonblock, oobinline, linger0, rcvtimeo;
	bool cork;        /* TCP_CORK left on: what it sends waits up to 200 ms */
	bool shut_rd, shut_wr;
	bool shut_called; /* shutdown() was called on it (a wake-up in the kernel) */
	bool fin_in;      /* the peer's FIN arrived */
	int rst;          /* 0; 1: reset; 2: maybe */
	bool end_in;      /* a FIN or a reset arrived: reads never block */
	bool out_wait;    /* settle: POLLOUT must show again (after a drained fill) */
	int thr;          /* TH_* under way, 0: none */
	bool thr_nb;      /* it started nonblocking (or with a receive timeout) */
	struct step thr_step;
	bool ep_have, ep_added, ep_lt;
	bool ep_shared;   /* the epoll set was there at the fork: both processes hold it */
	bool ep_stale;    /* and main changed it since (README Limits: not seen by the child) */
	uint32_t ep_events;
	int owner;        /* fabric after fork: 1 main, 2 child drive the connection; 3 nobody: the
			   * child that drove it exited (README Limits: the fabric provider's own
			   * flow control is each process's, and a takeover may reset) */
	bool listener, lshut;
	int backlog;
};

struct model {
	struct mside e[2];
	struct mdir d[2]; /* d[i]: from e[i] to e[1 - i] */
	int profile;
};

static bool exact(const struct mdir *d) { return d->qmin == d->qmax && d->urg == 0 && !d->fill; }

static bool holds(const struct mside *x, int actor)
{
	if (actor == AC_C)
		return x->c_alive && x->c_fd;
	return x->m_alive && x->m_fd;
}

static bool alive(const struct mside *x, int actor)
{
	return actor == AC_C ? x->c_alive : x->m_alive;
}

/* README Limits: across the veth (fabric) kernel TCP's send buffer starts
 * at about 68 KiB, and a receiver that is not reading delays its ACKs (its
 * window does not open) by 40 ms or more: meanwhile a sender with more
 * than two thirds of that unacknowledged is not writable (tcp_poll).  The
 * switch has no such queue: writable.  Bytes the peer has not read stand
 * for the unacknowledged ones, with room for the kernel's overhead. */
#define DIFF_FAB_UNACKED_SURE (24 * 1024)
static bool explained_fabric_unacked(const struct model *m, int i)
{
	const struct mside *x = &m->e[i];
	return m->profile == PROF_FABRIC && m->d[i].qmax > DIFF_FAB_UNACKED_SURE && !x->shut_wr && x->rst == 0 &&
	       !m->e[1 - i].gone;
}

/* readiness of endpoint i's socket: bits that surely show, bits that may */
static void ready(const struct model *m, int i, uint32_t *sure, uint32_t *maybe)
{
	const struct mside *x = &m->e[i];
	const struct mdir *in = &m->d[1 - i], *out = &m->d[i];
	uint32_t s = 0, y = 0;
	if (in->qmin > 0 || in->fill || x->end_in || x->shut_rd || x->rst == 1)
		s |= POLLIN;
	else if (in->qmax > 0 || in->urg || x->rst == 2)
		y |= POLLIN;
	if (in->urg == 1)
		s |= POLLPRI;
	else if (in->urg == 2)
		y |= POLLPRI;
	if (out->fill && x->rst == 0 && !x->shut_wr)
		y |= POLLOUT; /* writable again or not: timing (see OP_POLL in apply) */
	else if (explained_fabric_unacked(m, i))
		y |= POLLOUT;
	else
		s |= POLLOUT;
	if (x->fin_in || x->shut_rd || x->rst == 1)
		s |= POLLRDHUP;
	else if (x->rst == 2)
		y |= POLLRDHUP;
	if ((x->shut_wr && (x->shut_rd || x->fin_in)) || x->rst == 1)
		s |= POLLHUP;
	else if (x->rst == 2)
		y |= POLLHUP;
	if (x->rst)
		y |= POLLERR;
	*sure = s;
	*maybe = y & ~s;
}

/* Bytes a blocking read needs before it returns: a read() or readv() of
 * nothing returns at once (the VFS), a recv() or recvmsg() of nothing waits
 * for a byte like any other (the kernel's target is at least 1). */
static int need_of(int op, int len, int flags)
{
	if (len == 0)
		return op == OP_RECV || op == OP_RECVMSG ? 1 : 0;
	return (flags & MSG_WAITALL) ? len : 1;
}

/* Will endpoint i's blocked thread have returned: 0 no, 1 yes, 2 can't tell. */
static int thr_ready(const struct model *m, int i)
{
	const struct mside *x = &m->e[i];
	const struct step *t = &x->thr_step;
	const struct mdir *in = &m->d[1 - i];
	uint32_t sure, maybe, want = 0;
	switch (x->thr) {
	case 0:
		return 0;
	case TH_RECV: {
		if (x->thr_nb || x->end_in || x->shut_rd || x->rst == 1 || need_of(t->c, t->a, t->b) == 0)
			return 1;
		if (x->rst == 2)
			return 2;
		int need = need_of(t->c, t->a, t->b);
		if (in->qmin >= need)
			return 1;
		if (in->qmax >= need || in->urg)
			return 2;
		return 0;
	}
	case TH_POLL:
		want = (uint32_t)t->a | POLLERR | POLLHUP;
		break;
	case TH_EPOLL:
		want = x->ep_added ? (x->ep_events & 0xffff) | POLLERR | POLLHUP : 0;
		break;
	case TH_SELECT: /* a: 1 read, 2 write, 4 except */
		if (t->a & 1)
			want |= POLLIN | POLLHUP | POLLERR;
		if (t->a & 2)
			want |= POLLOUT | POLLERR;
		if (t->a & 4)
			want |= POLLPRI;
		break;
	case TH_ACCEPT:
		return x->backlog > 0 || x->lshut;
	case TH_SEND:
		return m->d[i].fill == 0;
	default:
		return 2;
	}
	ready(m, i, &sure, &maybe);
	/* a wait that returns says every bit: POLLOUT that may or may not show
	 * (a filled socket's send buffer growing as ACKs come; fabric seed
	 * 900000239: EPOLLIN|EPOLLOUT on kernel TCP, EPOLLIN switched) */
	if (maybe & want & POLLOUT)
		return 2;
	if (sure & want)
		return 1;
	if (maybe & want)
		return 2;
	return 0;
}

/* A read of up to n bytes (not a peek) took what was there. */
static void consume(struct mdir *in, int n)
{
	if (in->fill) {
		in->fill = 2;
		in->qmin -= n < in->qmin ? n : in->qmin;
		in->fill_base -= n;
		return;
	}
	if (in->qmin == in->qmax && in->urg == 0) {
		int c = in->qmin < n ? in->qmin : n;
		in->qmin -= c;
		in->qmax -= c;
		if (!in->qmax)
			in->nsends = 0;
		return;
	}
	in->qmin = in->qmin > n ? in->qmin - n : 0;
	if (in->urg == 1) /* a read at the mark takes the urgent byte along, or not */
		in->urg = 2;
}

/* The thread's call returned: its effect on the model. */
static void thr_finish(struct model *m, int i)
{
	struct mside *x = &m->e[i];
	const struct step *t = &x->thr_step;
	if (x->thr == TH_RECV && !(t->b & MSG_PEEK))
		consume(&m->d[1 - i], t->a);
	else if (x->thr == TH_ACCEPT && x->backlog > 0 && !x->lshut)
		x->backlog--;
	x->thr = 0;
}

/* The socket of endpoint i was released by its last holder. */
static void release(struct model *m, int i)
{
	struct mside *x = &m->e[i], *y = &m->e[1 - i];
	const struct mdir *in = &m->d[1 - i];
	x->gone = true;
	x->ep_added = false;
	if (x->rst == 1 || y->gone)
		return;
	int r; /* 0: FIN, 1: reset, 2: either */
	if (x->linger0 || in->qmin > 0 || in->fill)
		r = 1;
	else if (in->qmax > 0 || in->residue || in->urg || x->rst == 2)
		r = 2;
	else
		r = 0;
	if (r == 0) {
		if (!x->shut_wr)
			y->fin_in = true;
	} else if (r == 1) {
		y->rst = 1;
	} else if (y->rst != 1) {
		y->rst = 2;
	}
	y->end_in = true;
	m->d[i].fill = 0;
}

/* Data from i to the peer: where it goes. */
static void deliver(struct model *m, int i, int n, bool oob)
{
	struct mside *y = &m->e[1 - i];
	struct mdir *d = &m->d[i];
	if (y->gone) { /* its kernel answers with a reset */
		if (n > 0) {
			m->e[i].rst = 1;
			m->e[i].end_in = true;
		}
		return;
	}
	if (y->shut_rd && y->shut_wr && (n > 0 || oob)) {
		/* data for a socket that shut both ways (FIN_WAIT): RFC 1122's
		 * reset, both ends */
		m->e[i].rst = 1;
		m->e[i].end_in = true;
		y->rst = 1;
		y->end_in = true;
		return;
	}
	d->nsends++;
	if (oob) {
		d->qmin += n - 1;
		d->qmax += n;
		d->urg = d->urg ? 2 : 1;
		d->residue = true;
	} else {
		d->qmin += n;
		d->qmax += n;
	}
}

static int room(const struct model *m, int i)
{
	int r = DIFF_WINDOW - m->d[i].qmax;
	return r > 0 ? r : 0;
}

/* Does a send of n bytes by endpoint i return at once, whatever it says? */
static bool can_send(const struct model *m, int i, int n)
{
	const struct mside *x = &m->e[i];
	if (m->d[i].fill)
		return false; /* a full socket: how much more it takes is timing */
	if (x->shut_wr || x->rst == 1)
		return true; /* EPIPE at once */
	return n <= room(m, i);
}

/* Does a blocking read of endpoint i return (need bytes or the end)? */
static bool recv_returns(const struct model *m, int i, int need)
{
	const struct mside *x = &m->e[i];
	if (x->nonblock || x->rcvtimeo || need == 0 || x->end_in || x->shut_rd || x->rst == 1)
		return true;
	return m->d[1 - i].qmin >= need;
}

/* A reader blocked in the peer's thread returns what woke it: one send it
 * got whole (a longer one may wake it part way). */
static bool wakes_whole(const struct model *m, int sender, int n)
{
	return m->e[1 - sender].thr != TH_RECV || n <= DIFF_WAKE_ONE;
}

static int data_len(const struct step *s)
{
	int n = 0;
	if (s->op == OP_BURST) {
		for (int k = 0; k < s->nsub; k++)
			n += (int)s->subs[k].n;
		return n + (s->end == BURST_END_PLAIN); /* its closing send("!") */
	}
	return s->a;
}

static bool sends(const struct step *s)
{
	switch (s->op) {
	case OP_SEND: case OP_WRITE: case OP_WRITEV: case OP_SENDMSG: case OP_SENDFILE: case OP_SPLICE_IN:
	case OP_SEND_OOB: case OP_BURST: case OP_XFER:
		return true;
	}
	return false;
}

static bool is_listener_op(int op)
{
	return op == OP_CONNECT2 || op == OP_LPOLL || op == OP_ACCEPT_NOW || op == OP_LSHUTDOWN || op == OP_LCLOSE;
}

/* ------------------------------------------------------------ explained
 * Differences README Limits lists: the generator keeps away from them, so
 * that a soak finds the others.  Each is a real difference, left as it is
 * for the reason the README gives. */

/* Data for a socket that shut down both ways (FIN_WAIT with its read side
 * shut): kernel TCP resets both ends (RFC 1122); the switch delivers it. */
static bool explained_rdwr_data(const struct model *m, int i, int n)
{
	const struct mside *x = &m->e[i], *y = &m->e[1 - i];
	return n > 0 && !x->shut_wr && x->rst != 1 && !y->gone && y->shut_rd && y->shut_wr;
}

/* A sendfile that fails (EPIPE, ECONNRESET): kernel TCP reports a new
 * EPOLLOUT edge to an edge-triggered epoll set; the switch does not. */
static bool explained_failed_sendfile(const struct mside *x, int op)
{
	return op == OP_SENDFILE && (x->shut_wr || x->rst) && x->ep_added && (x->ep_events & (EPOLLET | EPOLLONESHOT));
}

/* Sends held by TCP_CORK or MSG_MORE for a peer whose socket is gone:
 * kernel TCP accepts them until it pushes them (uncork, a full segment,
 * the 200 ms ceiling) and the reset comes back; the switch draws the
 * reset at the first such send, and the next ones fail (EPIPE). */
static bool explained_held_to_closed(const struct model *m, int i, bool held)
{
	const struct mside *x = &m->e[i];
	return held && m->e[1 - i].gone && !x->shut_wr && x->rst != 1;
}

/* An edge-triggered epoll set of a socket that sent its FIN: kernel TCP
 * wakes the set at the shutdown() call and once more when the peer's ACK
 * moves it from FIN_WAIT1 to FIN_WAIT2; whether a wait comes between the
 * two is timing (a veth round trip; on one host, a loaded machine's
 * softirq: soak seed 833000462).  The switch's edge at the call stands for
 * both (sem epoll_et_shutdown checks it after a settle). */
static bool explained_et_after_fin(const struct mside *x)
{
	return (x->shut_wr || x->shut_called) && x->ep_added && (x->ep_events & EPOLLET);
}

/* An edge-triggered epoll set of a socket whose peer filled it.  Over
 * fabric, once it read part of it: the read lets more of the peer's bytes
 * in as soon as the transport has room (a new EPOLLIN edge), where kernel
 * TCP waits until its window opens by a few segments and makes no edge for
 * a small read.  On either, before any read: kernel TCP's filler saw EAGAIN
 * with its send buffer full, which goes on draining into this socket (more
 * edges, for a while), where the switch's ring was full at that EAGAIN
 * (soak seed 832663594).  A true arrival either way; when it comes is the
 * transport's. */
static bool explained_refill_edge(const struct mdir *in, const struct mside *x, bool fab)
{
	return (fab ? in->fill == 2 : in->fill != 0) && (x->ep_events & EPOLLET);
}

/* Sending by endpoint i, any kind: the model's side of it. */
static void sent(struct model *m, int i, int n)
{
	struct mside *x = &m->e[i];
	if (x->shut_wr || x->rst == 1)
		return; /* refused */
	if (n <= 0)
		return; /* nothing leaves: no reset drawn (soak seed 870600081: a
			   0-byte sendmsg after the peer's close) */
	if (x->rst == 2) { /* sent or refused: a reset either way */
		x->rst = 1;
		return;
	}
	deliver(m, i, n, false);
}

/* Does this send wait in the kernel (TCP_CORK on, MSG_MORE, SPLICE_F_MORE)
 * until the 200 ms ceiling?  It arrives then: the settle waits for it, and a
 * thread it wakes wakes that late on kernel TCP too. */
static bool held_send(const struct mside *x, const struct step *s)
{
	if (s->op == OP_SEND || s->op == OP_SENDMSG)
		return x->cork || (s->b & MSG_MORE);
	if (s->op == OP_SPLICE_IN)
		return x->cork || (s->b & 1);
	return x->cork;
}

/* Apply step s to m; false if it is not safe here.  an: what the driver
 * needs of it (may be NULL). */
static bool apply(struct model *m, const struct step *s, struct annot *an)
{
	bool held = false;
	int i = s->ep, j = 1 - i;
	struct mside *x = &m->e[i], *y = &m->e[j];
	struct mdir *out = &m->d[i], *in = &m->d[j];
	bool fab = m->profile == PROF_FABRIC;
	bool child_exit = false, main_exit = false;
	int32_t extra = 0;
	int rst_before[2] = { m->e[0].rst, m->e[1].rst };
	int n;

	if (s->op == OP_NONE || s->op >= OP__COUNT || s->ep > 1 || s->actor > AC_C)
		return false;
	/* who may act */
	if (s->actor == AC_T) {
		if (s->op != OP_THREAD || x->thr || !x->m_alive)
			return false;
		if (s->sub == TH_ACCEPT ? !x->listener : (!holds(x, AC_M) || x->gone))
			return false;
	} else if (s->op == OP_THREAD) {
		return false;
	} else if (s->op == OP_EXIT) {
		if (!alive(x, s->actor))
			return false;
	} else if (is_listener_op(s->op) || s->op == OP_FORK || s->op == OP_EPOLL_CTL) {
		if (s->actor != AC_M || !x->m_alive)
			return false;
	} else if (s->op == OP_XFER) {
		/* the sender: s->actor of i; the receiver: s->b of j */
		if (s->b > AC_C || s->b == AC_T || !holds(x, s->actor) || !holds(y, s->b))
			return false;
	} else if (!holds(x, s->actor)) {
		return false;
	}
	/* fabric: after fork one process drives the connection */
	if (fab && x->owner && s->op != OP_CLOSE && s->op != OP_EXIT && s->op != OP_FORK && !is_listener_op(s->op) &&
	    s->actor != AC_T && (s->actor == AC_C ? 2 : 1) != x->owner)
		return false;
	if (fab && x->owner && s->actor == AC_T && x->owner != 1)
		return false;
	if (fab && s->op == OP_XFER && y->owner && (s->b == AC_C ? 2 : 1) != y->owner)
		return false;
	/* a blocked reader thread owns the receive side of its socket */
	if (x->thr == TH_RECV && s->actor != AC_T) {
		switch (s->op) {
		case OP_RECV: case OP_READ: case OP_READV: case OP_RECVMSG: case OP_SPLICE_OUT:
		case OP_DRAIN_NOW: case OP_POLL: case OP_SELECT: case OP_EPOLL_WAIT: case OP_FIONREAD:
		case OP_ATMARK: case OP_OOBINLINE: case OP_DRAIN_FILL: case OP_XFER:
			return false;
		}
	}
	if (y->thr == TH_RECV && s->op == OP_XFER)
		return false;
	/* the receiver of a fill only reads some of it, looks, or drains it */
	if (in->fill) {
		switch (s->op) {
		case OP_FIONREAD: case OP_DRAIN_NOW: case OP_CLOSE: case OP_EXIT: case OP_LINGER: case OP_XFER:
		case OP_SPLICE_OUT: case OP_OOBINLINE: case OP_THREAD: case OP_SHUTDOWN: case OP_FORK:
			return false;
		}
	}
	/* the sender of a fill only waits for the drain */
	if (out->fill) {
		switch (s->op) {
		case OP_CLOSE: case OP_EXIT: case OP_SHUTDOWN: case OP_LINGER: case OP_XFER: case OP_FILL:
		case OP_BURST: case OP_FORK: case OP_SEND_OOB:
			return false;
		case OP_POLL: case OP_SELECT: case OP_EPOLL_WAIT:
			/* writable again or not: timing (a kernel socket's send
			 * buffer grows as ACKs come, even while the peer reads
			 * nothing: 1 in some thousand polls over a veth) */
			return false;
		}
	}

	switch (s->op) {
	case OP_SEND: case OP_WRITE: case OP_WRITEV: case OP_SENDMSG: case OP_SENDFILE: case OP_SPLICE_IN:
		n = s->a;
		if (out->fill) /* EAGAIN, or a few more bytes taken: timing, as above */
			return false;
		if (!can_send(m, i, n) || !wakes_whole(m, i, n) || explained_rdwr_data(m, i, n) ||
		    explained_failed_sendfile(x, s->op))
			return false;
		held = n > 0 && held_send(x, s);
		if (explained_held_to_closed(m, i, held_send(x, s)))
			return false;
		sent(m, i, n);
		break;
	case OP_SEND_OOB:
		if (fab || s->a < 1 || !can_send(m, i, s->a) || explained_rdwr_data(m, i, s->a))
			return false;
		if (y->thr) /* a blocked call and urgent data: which it sees first is timing */
			return false;
		if (x->shut_wr || x->rst == 1)
			break;
		if (x->rst == 2) {
			x->rst = 1;
			break;
		}
		deliver(m, i, s->a, true);
		break;
	case OP_BURST:
		n = data_len(s);
		if (!can_send(m, i, n) || (y->thr && n > DIFF_WAKE_ONE) || explained_rdwr_data(m, i, n))
			return false;
		for (int k = 0; k < s->nsub; k++)
			if (explained_failed_sendfile(x, s->subs[k].op) ||
			    explained_held_to_closed(m, i, s->sub || x->cork || s->subs[k].more))
				return false;
		if (y->thr && (s->nsub > 1 || s->end == BURST_END_PLAIN) && s->sub == 0)
			return false; /* MSG_MORE alone: the sends may leave one by one */
		if (s->end == BURST_END_CLOSE && (x->thr || (s->actor == AC_M && x->c_alive && x->c_fd) ||
						  (s->actor == AC_C && x->m_alive && x->m_fd)))
			return false;
		/* README Limits: corked bytes, then a close that resets: kernel TCP
		 * sent the full segments already (its size goal: 32 KiB on lo, 1448
		 * on the veth) and drops the rest; the switch drops what it held
		 * (under 64 KiB; fabric also what waits for credits).  After urgent
		 * data kernel TCP may have sent it all (urgent mode pushes held
		 * bytes until the urgent byte is acknowledged: timing) */
		if (s->end == BURST_END_CLOSE && (fab || n >= 1400 || out->urg) &&
		    (x->linger0 || in->qmax > 0 || in->urg || in->residue))
			return false;
		sent(m, i, n);
		m->d[i].nsends += s->nsub > 1 ? s->nsub - 1 : 0; /* one segment or more a send */
		if (s->sub)
			x->cork = s->end == BURST_END_SHUTWR || s->end == BURST_END_CLOSE;
		/* left corked, or MSG_MORE alone on a corked socket: held, but for
		 * a FIN, which pushes it */
		held = n > 0 && x->cork && s->end != BURST_END_SHUTWR && s->end != BURST_END_CLOSE;
		if (s->end == BURST_END_SHUTWR && !x->shut_wr && x->rst != 1) {
			x->shut_wr = true;
			if (!y->gone) {
				y->fin_in = true;
				y->end_in = true;
			}
		}
		if (s->end == BURST_END_CLOSE) {
			if (s->actor == AC_C)
				x->c_fd = false;
			else
				x->m_fd = false;
			release(m, i);
		}
		break;
	case OP_RECV: case OP_READ: case OP_READV: case OP_RECVMSG: case OP_SPLICE_OUT: {
		int fl = s->b;
		if (fl & MSG_OOB) {
			if (fab || in->fill)
				return false;
			if (in->urg == 1 && !x->oobinline && !(fl & MSG_PEEK))
				in->urg = 0;
			break;
		}
		/* SPLICE_F_NONBLOCK is the pipe's: the socket side waits unless O_NONBLOCK */
		bool nb = x->nonblock || ((fl & MSG_DONTWAIT) && s->op != OP_SPLICE_OUT);
		int need = need_of(s->op, s->a, fl);
		if (in->fill) {
			/* at least 64 KiB wait: a read of up to 16 KiB gets it all */
			if (s->a > 16384 || s->a > in->qmin || (fl & MSG_TRUNC) || s->op == OP_SPLICE_OUT)
				return false;
			if (!(fl & MSG_PEEK))
				consume(in, s->a);
			break;
		}
		if (!nb && !recv_returns(m, i, need))
			return false;
		/* README Limits: a splice into a pipe over fabric takes what the
		 * pipe's 16 buffers hold, which for kernel TCP across the veth is
		 * one received segment each (their sizes are the kernel's: soak
		 * seed 832700346, 48,073 bytes against the switch's 49,152) */
		if (fab && s->op == OP_SPLICE_OUT && s->a > 16384 && in->qmax > 16384)
			return false;
		/* the same on one host once more sends wait than the pipe has
		 * buffers (a segment each: soak seed 832901216) */
		if (s->op == OP_SPLICE_OUT && in->nsends > 8 && s->a > 4096)
			return false;
		if (!(fl & MSG_PEEK))
			consume(in, s->a);
		break;
	}
	case OP_DRAIN_NOW:
		in->qmin = in->qmax = in->nsends = 0;
		if (in->urg)
			in->urg = 2;
		break;
	case OP_POLL: case OP_SELECT:
		if (explained_fabric_unacked(m, i) && (s->op == OP_POLL ? (s->a & POLLOUT) != 0 : (s->a & 2) != 0))
			return false;
		break;
	case OP_FIONREAD: case OP_ATMARK: case OP_SOERROR: case OP_TCPINFO:
	case OP_NAMES: case OP_NODELAY:
		break;
	case OP_EPOLL_WAIT:
		if (!x->ep_have || (s->actor == AC_C && fab) || explained_et_after_fin(x) ||
		    explained_refill_edge(in, x, fab) ||
		    (explained_fabric_unacked(m, i) && x->ep_added && (x->ep_events & EPOLLOUT)))
			return false;
		/* README Limits: an epoll set shared across fork is the switch's in
		 * each process: what one changes (epoll_ctl, an edge or a oneshot
		 * taken by its wait) the other does not see */
		if (x->ep_shared && x->c_alive && (!x->ep_lt && x->ep_added))
			return false;
		if (s->actor == AC_C && x->ep_stale)
			return false;
		break;
	case OP_NONBLOCK:
		x->nonblock = s->a; /* a call under way keeps the mode it started with */
		break;
	case OP_OOBINLINE:
		if (fab)
			return false;
		x->oobinline = s->a;
		if (in->urg)
			in->urg = 2;
		break;
	case OP_LINGER:
		x->linger0 = s->a == 1;
		break;
	case OP_RCVTIMEO:
		x->rcvtimeo = s->a;
		break;
	case OP_CORK: /* off pushes what waits */
		x->cork = s->a;
		break;
	case OP_EPOLL_CTL:
		if (x->thr == TH_EPOLL)
			return false;
		if (x->ep_shared && x->c_alive)
			x->ep_stale = true;
		x->ep_have = true;
		if (x->gone)
			break; /* EBADF */
		if (s->a == EPOLL_CTL_ADD && !x->ep_added) {
			x->ep_added = true;
			x->ep_events = (uint32_t)s->b;
		} else if (s->a == EPOLL_CTL_MOD && x->ep_added) {
			x->ep_events = (uint32_t)s->b;
		} else if (s->a == EPOLL_CTL_DEL && x->ep_added) {
			x->ep_added = false;
		}
		x->ep_lt = x->ep_added && !(x->ep_events & (EPOLLET | EPOLLONESHOT));
		break;
	case OP_SHUTDOWN: {
		int how = s->sub;
		x->shut_called = true;
		if (x->rst)
			break; /* ENOTCONN: nothing moves */
		if (x->thr == TH_SEND && how != SHUT_RD)
			return false;
		if (how == SHUT_RD || how == SHUT_RDWR)
			x->shut_rd = true;
		if ((how == SHUT_WR || how == SHUT_RDWR) && !x->shut_wr) {
			x->shut_wr = true;
			if (!y->gone) {
				y->fin_in = true;
				y->end_in = true;
			}
		}
		break;
	}
	case OP_CLOSE:
		if (x->thr && x->thr != TH_ACCEPT && s->actor == AC_M)
			return false; /* under a blocked call the kernel keeps the socket open */
		/* fabric: the driver let go; the other process taking over may
		 * be reset (README Limits): nobody drives it from now on */
		if (x->owner == (s->actor == AC_C ? 2 : 1))
			x->owner = 3;
		if (s->actor == AC_C)
			x->c_fd = false;
		else
			x->m_fd = false;
		if (!(x->m_alive && x->m_fd) && !(x->c_alive && x->c_fd))
			release(m, i);
		break;
	case OP_EXIT:
		if (s->actor == AC_M && (x->c_alive || x->thr))
			return false; /* main exits last, without a call under way */
		if (fab && out->qmax > 0 && !y->gone && !x->rst &&
		    (s->actor == AC_M ? (x->m_fd && !(x->c_alive && x->c_fd)) : (x->c_fd && !(x->m_alive && x->m_fd))))
			return false; /* fabric: exit waits for the peer to take the data (README Limits) */
		if (s->actor == AC_C) {
			x->c_alive = false;
			child_exit = true;
			if (x->owner == 2)
				x->owner = 3;
		} else {
			x->m_alive = false;
			main_exit = true;
			x->listener = false;
			x->ep_have = false;
		}
		if (!(x->m_alive && x->m_fd) && !(x->c_alive && x->c_fd) && !x->gone)
			release(m, i);
		break;
	case OP_FORK:
		if (x->c_alive)
			return false; /* one child at a time */
		if (fab && x->thr && s->a)
			return false; /* the parent's thread still uses it: the child cannot drive it */
		x->c_alive = true;
		x->c_fd = x->m_fd && !x->gone;
		x->ep_shared = x->ep_have;
		x->ep_stale = false;
		/* a driver that let go (owner 3) stays the last one: a new child
		 * taking over is the same takeover (soak seed 848006565) */
		if (fab && x->owner != 3)
			x->owner = s->a ? 2 : 1;
		break;
	case OP_THREAD:
		x->thr = s->sub;
		x->thr_step = *s;
		x->thr_nb = x->nonblock || x->rcvtimeo;
		switch (s->sub) {
		case TH_RECV:
			if (in->fill || (s->b & MSG_OOB))
				return false;
			break;
		case TH_POLL: case TH_SELECT:
			break;
		case TH_EPOLL:
			if (!x->ep_lt)
				return false;
			break;
		case TH_ACCEPT:
			if (i != 0)
				return false;
			break;
		case TH_SEND:
			/* not generated: whether a full kernel socket takes another
			 * 16 KiB by now is timing (its send buffer grows as ACKs come) */
			return false;
		default:
			return false;
		}
		break;
	case OP_FILL:
		if (out->fill || in->fill || !exact(out) || out->residue || y->gone || x->shut_wr || x->rst || y->rst ||
		    y->shut_rd || y->shut_wr || y->thr == TH_RECV || y->thr == TH_SEND || x->thr == TH_SEND)
			return false;
		if (!holds(y, AC_M) && !holds(y, AC_C))
			return false;
		out->fill = 1;
		out->fill_base = out->qmin;
		out->qmin += 65536; /* both kernel TCP and the rings hold more */
		out->qmax = out->qmin;
		break;
	case OP_DRAIN_FILL:
		if (!in->fill)
			return false;
		extra = in->fill_base;
		in->fill = 0;
		in->qmin = in->qmax = in->nsends = 0;
		y->out_wait = true;
		break;
	case OP_XFER:
		if (s->a < 1 || out->fill || in->fill || !exact(out) || x->shut_wr || x->rst || y->rst || y->gone ||
		    y->thr || x->thr == TH_SEND || y->shut_rd || y->shut_wr)
			return false;
		extra = out->qmin;
		out->qmin = out->qmax = out->nsends = 0;
		break;
	case OP_CONNECT2:
		/* README Limits: over fabric a connection its client closed before
		 * the server accepted it is refused (accept never sees it) */
		if (fab || i != 1 || !m->e[0].listener || m->e[0].lshut || !m->e[0].m_alive || m->e[0].backlog >= 4)
			return false;
		m->e[0].backlog++;
		break;
	case OP_ACCEPT_NOW:
		if (i != 0 || !x->listener || x->thr == TH_ACCEPT)
			return false;
		if (x->backlog == 0 && !x->lshut)
			return false; /* a blocking listener: it would wait */
		if (x->backlog > 0 && !x->lshut)
			x->backlog--;
		break;
	case OP_LPOLL:
		if (i != 0 || !x->listener)
			return false;
		break;
	case OP_LSHUTDOWN:
		/* README Limits: with a connection waiting to be accepted, kernel
		 * TCP resets it and accept says EINVAL; the switch hands it out */
		if (i != 0 || !x->listener || x->c_alive || x->backlog > 0)
			return false;
		x->lshut = true;
		x->backlog = 0;
		break;
	case OP_LCLOSE:
		if (i != 0 || !x->listener || x->thr == TH_ACCEPT || x->c_alive)
			return false;
		x->listener = false;
		break;
	default:
		return false;
	}

	/* a thread started by this step, or woken by it */
	int done[2] = { 0, 0 };
	for (int k = 0; k < 2; k++) {
		if (!m->e[k].thr)
			continue;
		int r = thr_ready(m, k);
		if (r == 2)
			return false;
		if (r == 1) {
			done[k] = 1;
			thr_finish(m, k);
		}
	}

	if (an) {
		an->extra = extra;
		for (int k = 0; k < 2; k++) {
			struct mside *e = &m->e[k];
			struct settle *t = &an->st[k];
			memset(t, 0, sizeof *t);
			t->fionread_min = -1;
			t->thr_done = (uint8_t)done[k];
			/* 1: its own process shut the socket down; 2: its child did */
			t->thr_cause = done[k] && (s->op == OP_SHUTDOWN || s->op == OP_LSHUTDOWN ||
						   (s->op == OP_BURST && s->end == BURST_END_SHUTWR)) && s->ep == k
					       ? (s->actor == AC_C ? 2 : 1)
					       : 0;
			/* 3: a reset its own process's send drew (a closed peer) */
			if (done[k] && s->ep == k && sends(s) && rst_before[k] != 1 && e->rst == 1)
				t->thr_cause = 3;
			t->thr_pending = e->thr != 0;
			if (done[k] && held)
				t->delay_ms = DIFF_HOLD_MS;
			if (held && k == j)
				t->held = 1;
			if (k == i) {
				t->child_exit = child_exit;
				t->main_exit = main_exit;
			}
			if (e->gone)
				continue;
			t->fd_by = (e->m_alive && e->m_fd) ? 1 : (e->c_alive && e->c_fd) ? 2 : 0;
			/* fabric: the process that drives the connection looks (a look is a
			 * use: the other would take it over) */
			if (e->owner == 2 && e->c_alive && e->c_fd)
				t->fd_by = 2;
			if (e->owner == 3)
				continue;
			if (!t->fd_by)
				continue;
			const struct mdir *din = &m->d[1 - k];
			/* FIONREAD counts up to an urgent mark only: not a measure then */
			if (e->rst == 0 && !din->fill && din->qmin > 0 && e->thr != TH_RECV && !din->residue)
				t->fionread_min = din->qmin;
			/* after a fill, something of it has arrived: over fabric the
			 * bytes a nonblocking sender got accepted may still be on their
			 * way, where the kernel's veth has them queued when the send
			 * returns (soak seed 843000064: a nonblocking recv said EAGAIN) */
			if (e->rst == 0 && din->fill && e->thr != TH_RECV && !din->residue && !din->urg)
				t->fionread_min = (int32_t)din->fill_base + 1;
			if (k == i && sends(s) && e->rst == 0)
				t->unsent = 1;
			if (e->end_in)
				t->revents |= POLLRDHUP;
			if (e->rst == 1)
				t->revents |= POLLHUP;
			if (e->out_wait)
				t->revents |= POLLOUT;
		}
	}
	m->e[0].out_wait = m->e[1].out_wait = false;
	return true;
}

static void model_init(struct model *m, const struct prog *p)
{
	memset(m, 0, sizeof *m);
	m->profile = p->profile;
	for (int k = 0; k < 2; k++)
		m->e[k].m_alive = m->e[k].m_fd = true;
	m->e[0].nonblock = p->acc4_nb;
	m->e[0].oobinline = p->lopt & SET_OOBINLINE;
	m->e[1].oobinline = p->copt & SET_OOBINLINE;
	m->e[0].listener = p->keep_listener;
}

bool diff_model(const struct prog *p, struct annot *an, int *bad_step)
{
	struct model m;
	model_init(&m, p);
	for (int k = 0; k < p->n; k++) {
		if (!apply(&m, &p->s[k], an ? &an[k] : NULL)) {
			if (bad_step)
				*bad_step = k;
			return false;
		}
	}
	return true;
}

void diff_select(const struct prog *in, const uint16_t *keep, int nkeep, struct prog *out)
{
	struct model m;
	*out = *in;
	out->n = 0;
	model_init(&m, in);
	int j = 0;
	for (int k = 0; k < in->n; k++) {
		while (j < nkeep && keep[j] < in->s[k].index)
			j++;
		if (j >= nkeep || keep[j] != in->s[k].index)
			continue;
		struct model t = m;
		if (!apply(&t, &in->s[k], NULL))
			continue;
		m = t;
		out->s[out->n++] = in->s[k];
	}
}

/* ------------------------------------------------------------ generator */

static int pick_actor(const struct mside *x)
{
	if (x->c_alive && chance(40))
		return AC_C;
	return AC_M;
}

static int recv_flags(bool fab)
{
	int f = 0;
	if (chance(20))
		f |= MSG_PEEK;
	if (chance(15))
		f |= MSG_WAITALL;
	if (chance(15))
		f |= MSG_DONTWAIT;
	if (chance(5))
		f |= MSG_TRUNC;
	if (!fab && chance(5))
		f |= MSG_OOB;
	return f;
}

static uint32_t poll_events(void)
{
	static const uint32_t pick[] = { POLLIN, POLLOUT, POLLPRI, POLLRDHUP, POLLIN | POLLOUT,
					 POLLIN | POLLRDHUP, POLLIN | POLLPRI | POLLOUT | POLLRDHUP, 0 };
	return pick[rn(sizeof pick / sizeof pick[0])];
}

static void gen_epoll_ctl(const struct mside *x, struct step *s)
{
	s->op = OP_EPOLL_CTL;
	s->actor = AC_M;
	s->a = x->ep_added ? (chance(70) ? EPOLL_CTL_MOD : chance(50) ? EPOLL_CTL_DEL : EPOLL_CTL_ADD)
			   : (chance(90) ? EPOLL_CTL_ADD : EPOLL_CTL_MOD);
	uint32_t ev = poll_events();
	if (chance(30))
		ev |= EPOLLET;
	if (chance(20))
		ev |= EPOLLONESHOT;
	s->b = (int32_t)ev;
	s->c = range(1, 99); /* the event's data */
}

static void gen_burst(struct step *s, int rm)
{
	static const uint8_t ops[] = { OP_SEND, OP_WRITE, OP_WRITEV, OP_SENDMSG, OP_SENDFILE, OP_SPLICE_IN };
	s->op = OP_BURST;
	s->sub = chance(70); /* TCP_CORK, else MSG_MORE alone */
	s->nsub = (uint8_t)range(1, DIFF_MAX_SUB);
	int left = rm;
	for (int q = 0; q < s->nsub; q++) {
		struct sub *u = &s->subs[q];
		u->op = ops[rn(sizeof ops)];
		u->n = (uint32_t)send_size(left / 2 + 1);
		if (u->n > (uint32_t)left)
			u->n = (uint32_t)left;
		left -= (int)u->n;
		u->more = (u->op == OP_SEND || u->op == OP_SENDMSG || u->op == OP_SPLICE_IN) && chance(60);
		u->niov = (uint16_t)range(1, 4);
	}
	if (s->sub) {
		static const uint8_t ends[] = { BURST_END_UNCORK, BURST_END_UNCORK, BURST_END_UNCORK,
						BURST_END_NODELAY, BURST_END_SHUTWR, BURST_END_CLOSE };
		s->end = ends[rn(sizeof ends)];
	} else {
		s->end = chance(80) ? BURST_END_PLAIN : BURST_END_SHUTWR;
	}
}

static void gen_thread(struct step *s)
{
	static const uint8_t th[] = { TH_RECV, TH_RECV, TH_RECV, TH_POLL, TH_SELECT, TH_EPOLL, TH_ACCEPT };
	s->op = OP_THREAD;
	s->actor = AC_T;
	s->sub = th[rn(sizeof th)];
	switch (s->sub) {
	case TH_RECV: {
		static const uint8_t ops[] = { OP_RECV, OP_READ, OP_READV, OP_RECVMSG };
		s->c = ops[rn(sizeof ops)];
		s->a = recv_size();
		/* a blocking read of 0 bytes returns at the socket's next wake-up
		 * of any kind in the kernel (tcp_recvmsg's loop ends with len 0),
		 * its own process's shutdown(SHUT_WR) too, which does not end
		 * the switch's (README Limits; soak seed 842000086) */
		if (!s->a)
			s->a = 1;
		if (s->c == OP_RECV || s->c == OP_RECVMSG)
			s->b = (chance(20) ? MSG_PEEK : 0) | (chance(20) ? MSG_WAITALL : 0);
		s->niov = (uint16_t)range(1, 4);
		break;
	}
	case TH_POLL:
		s->a = (int)(poll_events() & ~(uint32_t)POLLOUT);
		break;
	case TH_SELECT:
		s->a = chance(80) ? 1 : 5;
		break;
	case TH_SEND:
		s->a = range(1, 16384);
		break;
	case TH_ACCEPT:
		s->ep = 0;
		break;
	}
}

static void gen_step(struct model *m, struct step *s, int index, bool late)
{
	memset(s, 0, sizeof *s);
	s->index = (uint16_t)index;
	s->seed = (uint32_t)rnd();
	s->ep = (uint8_t)rn(2);
	const struct mside *x = &m->e[s->ep];
	bool fab = m->profile == PROF_FABRIC;
	s->actor = (uint8_t)pick_actor(x);
	int k = rn(1000);
	int rm = room(m, s->ep);
	if (k < 230) { /* a send */
		static const uint8_t ops[] = { OP_SEND, OP_SEND, OP_WRITE, OP_WRITEV, OP_SENDMSG, OP_SENDFILE, OP_SPLICE_IN };
		s->op = ops[rn(sizeof ops)];
		s->a = send_size(rm);
		if (s->op == OP_SPLICE_IN && s->a > 60000)
			s->a = 60000;
		if (s->op == OP_SEND || s->op == OP_SENDMSG) {
			if (chance(15))
				s->b |= MSG_DONTWAIT;
			if (chance(30))
				s->b |= MSG_NOSIGNAL;
			if (chance(5))
				s->b |= MSG_MORE;
		}
		if (s->op == OP_SPLICE_IN && chance(5))
			s->b |= 1; /* SPLICE_F_MORE */
		s->niov = (uint16_t)range(1, 5);
		if (!fab && chance(4)) {
			s->op = OP_SEND_OOB;
			s->a = range(1, 8);
		}
	} else if (k < 460) { /* a read */
		static const uint8_t ops[] = { OP_RECV, OP_RECV, OP_READ, OP_READV, OP_RECVMSG, OP_SPLICE_OUT };
		s->op = ops[rn(sizeof ops)];
		s->a = recv_size();
		if (s->op == OP_RECV || s->op == OP_RECVMSG)
			s->b = recv_flags(fab);
		if (s->op == OP_SPLICE_OUT && chance(30))
			s->b = MSG_DONTWAIT; /* SPLICE_F_NONBLOCK: the pipe side only */
		s->niov = (uint16_t)range(1, 5);
		if (chance(8))
			s->op = OP_DRAIN_NOW;
	} else if (k < 640) { /* an observation */
		static const uint8_t ops[] = { OP_POLL, OP_POLL, OP_SELECT, OP_EPOLL_WAIT, OP_EPOLL_WAIT, OP_FIONREAD,
					       OP_ATMARK, OP_SOERROR, OP_TCPINFO, OP_NAMES };
		s->op = ops[rn(sizeof ops)];
		s->a = (int)poll_events();
		s->b = chance(85) ? 0 : 5; /* timeout, ms */
		if (s->op == OP_SELECT)
			s->a = range(1, 7);
		if (s->op == OP_EPOLL_WAIT && !x->ep_have)
			gen_epoll_ctl(x, s);
	} else if (k < 720) { /* an option */
		static const uint8_t ops[] = { OP_NONBLOCK, OP_NONBLOCK, OP_OOBINLINE, OP_NODELAY, OP_LINGER, OP_RCVTIMEO,
					       OP_EPOLL_CTL, OP_EPOLL_CTL, OP_CORK };
		s->op = ops[rn(sizeof ops)];
		s->a = chance(50);
		if (s->op == OP_LINGER)
			s->a = rn(3); /* 0 off, 1 {1, 0}, 2 {1, 1 s} */
		if (s->op == OP_EPOLL_CTL)
			gen_epoll_ctl(x, s);
	} else if (k < 770) { /* a second thread */
		gen_thread(s);
	} else if (k < 830) { /* life: the ends mostly late in the program */
		int l = late ? rn(100) : chance(85) ? rn(35) : range(35, 99);
		if (l >= 35 && l < 80 && !late && chance(60))
			l = range(80, 99);
		if (l < 35) {
			s->op = OP_SHUTDOWN;
			s->sub = (uint8_t)rn(3);
		} else if (l < 65) {
			s->op = OP_CLOSE;
		} else if (l < 80) {
			s->op = OP_EXIT;
		} else {
			s->op = OP_FORK;
			s->actor = AC_M;
			s->a = chance(50);
		}
	} else if (k < 890) { /* a corked burst */
		gen_burst(s, rm);
	} else if (k < 950) { /* big amounts */
		int l = rn(100);
		if (l < 55) {
			s->op = OP_XFER;
			s->a = (int)(1u << range(10, 21));
			s->a += rn(s->a);
			s->b = pick_actor(&m->e[1 - s->ep]);
		} else if (l < 80) {
			s->op = OP_FILL;
		} else {
			s->op = OP_DRAIN_FILL;
			s->a = range(1, 4);
		}
	} else { /* the listener and a second connection */
		static const uint8_t ops[] = { OP_CONNECT2, OP_CONNECT2, OP_ACCEPT_NOW, OP_LPOLL, OP_LSHUTDOWN, OP_LCLOSE };
		s->op = ops[rn(sizeof ops)];
		s->actor = AC_M;
		s->ep = s->op == OP_CONNECT2 ? 1 : 0;
		if (s->op != OP_CONNECT2 && chance(40)) {
			gen_thread(s);
			s->sub = TH_ACCEPT;
			s->ep = 0;
		}
	}
}

void diff_gen(struct prog *p, uint32_t seed, int profile)
{
	memset(p, 0, sizeof *p);
	rs = seed * 0x2545F4914F6CDD1Dull + 17;
	p->seed = seed;
	p->profile = profile;
	p->v6 = profile == PROF_SHM && chance(25);
	p->lopt = (chance(20) ? SET_NODELAY : 0) | (profile == PROF_SHM && chance(15) ? SET_OOBINLINE : 0) |
		  (chance(10) ? SET_CORK : 0);
	p->copt = (chance(20) ? SET_NODELAY : 0) | (profile == PROF_SHM && chance(15) ? SET_OOBINLINE : 0);
	p->nb_connect = chance(30);
	p->acc4_nb = chance(25);
	p->keep_listener = chance(50);
	p->light = profile == PROF_SHM && chance(50);
	int len = range(12, 60);
	struct model m;
	model_init(&m, p);
	for (int idx = 0; p->n < len && idx < 4 * len + 40; idx++) {
		struct step s;
		bool ok = false;
		for (int tries = 0; tries < 40 && !ok; tries++) {
			gen_step(&m, &s, idx, p->n >= len * 2 / 3);
			struct model t = m;
			if (apply(&t, &s, NULL)) {
				m = t;
				ok = true;
			}
		}
		if (ok)
			p->s[p->n++] = s;
	}
}

/* ------------------------------------------------------------ text */

static const char *opname(int op)
{
	static const char *const n[OP__COUNT] = {
		[OP_NONE] = "none", [OP_SEND] = "send", [OP_WRITE] = "write", [OP_WRITEV] = "writev",
		[OP_SENDMSG] = "sendmsg", [OP_SENDFILE] = "sendfile", [OP_SPLICE_IN] = "splice-to-socket",
		[OP_SEND_OOB] = "send-oob", [OP_BURST] = "burst", [OP_RECV] = "recv", [OP_READ] = "read",
		[OP_READV] = "readv", [OP_RECVMSG] = "recvmsg", [OP_SPLICE_OUT] = "splice-from-socket",
		[OP_DRAIN_NOW] = "drain-now", [OP_POLL] = "poll", [OP_SELECT] = "select",
		[OP_EPOLL_WAIT] = "epoll_wait", [OP_FIONREAD] = "FIONREAD", [OP_ATMARK] = "SIOCATMARK",
		[OP_SOERROR] = "SO_ERROR", [OP_TCPINFO] = "TCP_INFO", [OP_NAMES] = "names",
		[OP_NONBLOCK] = "O_NONBLOCK", [OP_OOBINLINE] = "SO_OOBINLINE", [OP_NODELAY] = "TCP_NODELAY",
		[OP_LINGER] = "SO_LINGER", [OP_RCVTIMEO] = "SO_RCVTIMEO", [OP_CORK] = "TCP_CORK", [OP_EPOLL_CTL] = "epoll_ctl",
		[OP_SHUTDOWN] = "shutdown", [OP_CLOSE] = "close", [OP_EXIT] = "exit", [OP_FORK] = "fork",
		[OP_THREAD] = "thread", [OP_FILL] = "fill", [OP_DRAIN_FILL] = "drain-fill", [OP_XFER] = "xfer",
		[OP_CONNECT2] = "connect2", [OP_ACCEPT_NOW] = "accept-now", [OP_LPOLL] = "poll-listener",
		[OP_LSHUTDOWN] = "shutdown-listener", [OP_LCLOSE] = "close-listener",
	};
	return op >= 0 && op < OP__COUNT && n[op] ? n[op] : "?";
}

const char *diff_actor_name(int ep, int actor)
{
	static const char *const n[2][3] = { { "A.M", "A.T", "A.C" }, { "B.M", "B.T", "B.C" } };
	return n[ep & 1][actor % 3];
}

void diff_describe(const struct step *s, char *buf, size_t len)
{
	int o = snprintf(buf, len, "%s %s", diff_actor_name(s->ep, s->actor), opname(s->op));
	if (o < 0 || (size_t)o >= len)
		return;
	buf += o;
	len -= (size_t)o;
	switch (s->op) {
	case OP_THREAD: {
		static const char *const th[] = { "?", "recv", "poll", "select", "epoll_wait", "accept", "send" };
		snprintf(buf, len, " %s a=%d flags=0x%x via=%s", th[s->sub % 7], s->a, (unsigned)s->b,
			 s->sub == TH_RECV ? opname(s->c) : "-");
		break;
	}
	case OP_BURST: {
		static const char *const ends[] = { "uncork", "nodelay", "shutdown", "close", "plain" };
		int w = snprintf(buf, len, " %s then %s:", s->sub ? "cork" : "more", ends[s->end % 5]);
		for (int k = 0; k < s->nsub && w > 0 && (size_t)w < len; k++)
			w += snprintf(buf + w, len - (size_t)w, " %s(%u%s)", opname(s->subs[k].op), s->subs[k].n,
				      s->subs[k].more ? ",MORE" : "");
		break;
	}
	case OP_SHUTDOWN:
		snprintf(buf, len, " %s", s->sub == SHUT_RD ? "SHUT_RD" : s->sub == SHUT_WR ? "SHUT_WR" : "SHUT_RDWR");
		break;
	case OP_XFER:
		snprintf(buf, len, " %d bytes to %s", s->a, diff_actor_name(1 - s->ep, s->b));
		break;
	default:
		snprintf(buf, len, " a=%d b=0x%x c=%d niov=%u", s->a, (unsigned)s->b, s->c, s->niov);
	}
}

const char *diff_profile_name(int profile)
{
	return profile == PROF_FABRIC ? "fabric" : "shm";
}

void diff_print(const struct prog *p, FILE *f)
{
	fprintf(f, "# seed %u profile %s: %s, listener opts %d, connector opts %d, %s connect, accept%s, listener %s%s\n",
		p->seed, diff_profile_name(p->profile), p->v6 ? "IPv6" : "IPv4", p->lopt, p->copt,
		p->nb_connect ? "nonblocking" : "blocking", p->acc4_nb ? "4(SOCK_NONBLOCK)" : "",
		p->keep_listener ? "kept" : "closed", p->light ? ", light settle" : "");
	char b[512];
	for (int k = 0; k < p->n; k++) {
		diff_describe(&p->s[k], b, sizeof b);
		fprintf(f, "%3u %s\n", p->s[k].index, b);
	}
}
