/* poll.c — poll/ppoll (and, through them, select) over a mix of switched and
 * kernel fds.  A switched connection's readiness comes from its session; to
 * sleep, its kernel fd is replaced by the provider's wait fds, which are armed
 * first so a peer that sends afterwards wakes us. */
#include "switch/switch.h"

#include "common/kick.h"
#include "common/sys.h"
#include "switch/stat/statreg.h"
#include "switch/events/evwait.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define EXTRA_PER_SOCK 4
#define NESTED_FDS 256   /* wait fds of switched members of polled epoll fds */
#define NESTED_ARMED 64

struct pslot {
	struct ssw_sock *s;
	struct ssw_session *armed; /* sleep_done after sleeping */
	bool staged;               /* ring staged during this call */
};

/* Readiness of one switched entry now, as poll bits. */
static short switched_revents(struct ssw_sock *s, int fd, short events)
{
	short ev = 0;
	if (s->state == SSW_ST_CONNECTING) {
		int rc = ssw_connect_poll(s, fd, 0);
		if (rc == -EINPROGRESS)
			return 0;
		if (s->state != SSW_ST_CONNECTED)
			return POLLOUT | POLLERR | POLLHUP; /* final error: SO_ERROR tells */
	}
	if (s->state == SSW_ST_CONNECTED && s->sess) {
		ev = ssw_session_poll(s->sess);
		/* looking may have taken an epoll set's doorbell: a provider
		 * whose wait fds are its transport's (fabric: the CQ's socket)
		 * is drained by any progress, and a set that holds this socket
		 * would sleep through what we just found */
		if (ev & (POLLIN | POLLPRI | POLLHUP | POLLERR | POLLRDHUP))
			ssw_epoll_touch(s);
	}
	return ev & (events | POLLERR | POLLHUP | POLLNVAL);
}

static void disarm_nested(struct ssw_session **armed, struct ssw_sock **held, int *n)
{
	for (int i = 0; i < *n; i++) {
		ssw_session_sleep_done(armed[i]);
		ssw_epoll_touch(held[i]); /* the doorbell it took may have been a watcher's */
		ssw_sock_put(held[i]);
	}
	*n = 0;
}

static uint64_t deadline_of(const struct timespec *t)
{
	if (!t)
		return 0;
	return ssw_now_ns() + (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec;
}

static void disarm_all(struct pslot *sl, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (sl[i].armed) {
			ssw_session_sleep_done(sl[i].armed);
			sl[i].armed = NULL;
			ssw_epoll_touch(sl[i].s); /* the doorbell may have been an epoll set's */
		}
}

/* One poll call's wait (common/waitpol.h). */
struct poll_wait {
	struct ssw_waiter w;
	struct pollfd *fds, *k;
	nfds_t n;
	struct pslot *sl;
	const sigset_t *mask;
	struct ssw_session *narmed[NESTED_ARMED];
	struct ssw_sock *nheld[NESTED_ARMED];
	int nna;
	uint64_t kgen;
	bool nested, looked;
};

/* Switched readiness, and the kernel's view of the rest without waiting:
 * the count of ready entries, 0, or -errno. */
static int poll_look(struct ssw_waiter *w)
{
	struct poll_wait *pw = (struct poll_wait *)w;
	struct pollfd *fds = pw->fds, *k = pw->k;
	struct pslot *sl = pw->sl;
	nfds_t n = pw->n;
	/* a local shutdown from here on makes us look again (kick.h) */
	pw->kgen = ssw_kick_gen();
	/* every switched peer in the set on our CPU: hand it over at once */
	int peer_cpu = pw->looked ? -1 : -2;
	int ready = 0;
	pw->nested = false;
	for (nfds_t i = 0; i < n; i++) {
		k[i] = fds[i];
		k[i].revents = 0;
		fds[i].revents = 0;
		struct ssw_sock *s = sl[i].s;
		if (!s) {
			/* an epoll fd with switched members: the kernel sees only
			 * its kernel members */
			int pk = fds[i].fd >= 0 ? ssw_epoll_peek(fds[i].fd) : -1;
			if (pk >= 0)
				pw->nested = true;
			if (pk > 0 && (fds[i].events & POLLIN))
				fds[i].revents = POLLIN;
			continue;
		}
		if (s->state == SSW_ST_LISTENING) {
			if ((fds[i].events & POLLIN) && ssw_listener_ready(s))
				fds[i].revents |= POLLIN;
			continue; /* kernel fd stays in the set */
		}
		short ev = switched_revents(s, fds[i].fd, fds[i].events);
		if (!ssw_fdtab_any(&fds[i].fd, 1)) { /* fell back to kernel TCP */
			ssw_sock_put(s);
			sl[i].s = NULL;
			continue;
		}
		fds[i].revents = ev;
		k[i].fd = -1;
		if (peer_cpu != -1 && s->state == SSW_ST_CONNECTED && s->sess) {
			int c = ssw_session_peer_cpu(s->sess);
			peer_cpu = peer_cpu == -2 || peer_cpu == c ? c : -1;
		}
	}
	if (!pw->looked)
		w->peer_cpu = peer_cpu;
	pw->looked = true;
	for (nfds_t i = 0; i < n; i++)
		if (fds[i].revents)
			ready++;
	/* the kernel's view, when it holds any of the set (a spin over
	 * switched sockets only would pay a system call per step) */
	bool kfds = false;
	for (nfds_t i = 0; i < n && !kfds; i++)
		kfds = k[i].fd >= 0;
	int kr = kfds ? sys_ppoll(k, n, &(struct timespec){ 0, 0 }, NULL) : 0;
	if (kr < 0)
		return -errno;
	for (nfds_t i = 0; i < n; i++) {
		if (!k[i].revents || k[i].fd < 0)
			continue;
		if (!fds[i].revents)
			ready++;
		fds[i].revents |= k[i].revents;
	}
	return ready;
}

/* Sleep on kernel fds + provider wait fds. */
static int poll_sleep(struct ssw_waiter *w, int64_t ns)
{
	struct poll_wait *pw = (struct poll_wait *)w;
	struct pollfd *fds = pw->fds, *k = pw->k;
	struct pslot *sl = pw->sl;
	nfds_t n = pw->n, nk = n;
	bool again = false;
	uint64_t nap = 0;
	for (nfds_t i = 0; i < n && !again; i++) {
		struct ssw_sock *s = sl[i].s;
		if (!s)
			continue;
		int got = 0;
		switch (ssw_ev_arm(s, &k[nk], EXTRA_PER_SOCK, &got, &sl[i].staged, &sl[i].armed)) {
		case SSW_EV_PENDING:
			again = true;
			break;
		case SSW_EV_NAP:
			nap = SSW_EV_NAP_NS;
			nk += (nfds_t)got; /* fds may come with a nap */
			break;
		default:
			nk += (nfds_t)got;
		}
	}
	if (again) {
		disarm_all(sl, n);
		return SSW_WAIT_LOOK; /* re-check readiness at once */
	}
	/* epoll fds with switched members: sleep on those members too */
	nfds_t kmax = n + n * EXTRA_PER_SOCK + 1 + NESTED_FDS;
	for (nfds_t i = 0; pw->nested && i < n && !again; i++) {
		if (sl[i].s || fds[i].fd < 0 || !(fds[i].events & POLLIN))
			continue;
		int got = 0, cnt = 0;
		int r = ssw_epoll_arm_members(fds[i].fd, &k[nk], (int)(kmax - nk), &got, pw->narmed + pw->nna,
					      pw->nheld + pw->nna, NESTED_ARMED - pw->nna, &cnt);
		pw->nna += cnt;
		nk += (nfds_t)got;
		if (r == SSW_EV_PENDING)
			again = true;
		else if (r == SSW_EV_NAP)
			nap = SSW_EV_NAP_NS;
	}
	if (again) {
		disarm_nested(pw->narmed, pw->nheld, &pw->nna);
		disarm_all(sl, n);
		return SSW_WAIT_LOOK;
	}
	/* a switched connection in the set: another thread's shutdown of
	 * it changes our answer without a doorbell, and kicks us.  Armed or
	 * not: one whose peer has gone has no doorbell to arm, and our own
	 * shutdown still brings it POLLHUP (soak seed 835001863) */
	int kick = -1;
	for (nfds_t i = 0; i < n && kick < 0; i++)
		if (sl[i].s)
			kick = ssw_kick_arm(SSW_KICK_ANY);
	if (kick >= 0 && ssw_kick_gen() != pw->kgen) {
		ssw_kick_disarm(0);
		disarm_nested(pw->narmed, pw->nheld, &pw->nna);
		disarm_all(sl, n);
		return SSW_WAIT_LOOK;
	}
	nfds_t kslot = nk;
	if (kick >= 0)
		k[nk++] = (struct pollfd){ .fd = kick, .events = POLLIN };
	struct timespec ts, *tp = NULL;
	uint64_t t0 = ssw_now_ns();
	/* published for `sockswitch stat`: wake to answer its reader */
	int look = ssw_statreg_sleep_ms(-1);
	if (look >= 0 && (!nap || nap > (uint64_t)look * 1000000ull))
		nap = (uint64_t)look * 1000000ull;
	if (ns >= 0 || nap) {
		uint64_t left = ns < 0 || (nap && (uint64_t)ns > nap) ? nap : (uint64_t)ns;
		ts.tv_sec = (time_t)(left / 1000000000ull);
		ts.tv_nsec = (long)(left % 1000000000ull);
		tp = &ts;
	}
	int r = sys_ppoll(k, nk, tp, pw->mask);
	int err = errno;
	if (kick >= 0)
		ssw_kick_disarm(r > 0 ? k[kslot].revents : 0);
	uint64_t woke_at = ssw_now_ns(), first = 0;
	for (nfds_t i = 0; i < n; i++) {
		uint64_t rang = sl[i].armed ? ssw_ev_rang(sl[i].armed, t0, woke_at) : 0;
		if (rang && (!first || rang < first))
			first = rang;
	}
	w->rang = first;
	disarm_all(sl, n);
	disarm_nested(pw->narmed, pw->nheld, &pw->nna);
	if (r < 0 && err == EINTR)
		return -EINTR;
	for (nfds_t i = 0; i < n; i++)
		sl[i].staged = false;
	ssw_statreg_answer(); /* no lock held (references only): a ring is answered */
	return r > 0 ? SSW_WAIT_WOKEN : SSW_WAIT_TIMEDOUT;
}

int ssw_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask)
{
	struct pslot small[16];
	struct pslot *sl = n <= 16 ? small : calloc(n, sizeof *sl);
	struct pollfd *k = calloc(n + n * EXTRA_PER_SOCK + 2 + NESTED_FDS, sizeof *k);
	if (!sl || !k) {
		free(k);
		if (sl != small)
			free(sl);
		return -ENOMEM;
	}
	memset(sl, 0, (n <= 16 ? 16 : n) * sizeof *sl);
	for (nfds_t i = 0; i < n; i++)
		sl[i].s = ssw_sock_get(fds[i].fd);
	struct poll_wait pw = {
		.w = { .ready = poll_look, .sleep = poll_sleep, .peer_cpu = -1 },
		.fds = fds,
		.k = k,
		.n = n,
		.sl = sl,
		.mask = mask,
	};
	/* a zero timeout: a deadline of now, one look */
	int ret = ssw_wait(ssw_ev_pol(), &ssw_ev_wait, deadline_of(timeout), &pw.w);
	if (ret == -ETIMEDOUT)
		ret = 0;
	for (nfds_t i = 0; i < n; i++)
		ssw_sock_put(sl[i].s);
	free(k);
	if (sl != small)
		free(sl);
	return ret;
}
