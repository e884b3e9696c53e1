/* poll.c — poll/ppoll (and, through them, select) over a mix of switched and
 * kernel fds.  A switched connection's readiness comes from its session; to
 * sleep, its kernel fd is replaced by the provider's wait fds, which are armed
 * first so a peer that sends afterwards wakes us. */
#include "switch/switch.h"

#include "common/sys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define EXTRA_PER_SOCK 4
#define SPIN_POLL_NS 20000u

struct pslot {
	struct ssw_sock *s;
	int first_extra, nextra;   /* provider fds of this entry in the extra area */
	bool armed;
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
	if (s->state == SSW_ST_CONNECTED)
		ev = ssw_session_poll(s->sess);
	return ev & (events | POLLERR | POLLHUP | POLLNVAL);
}

static bool listener_pending(struct ssw_sock *s)
{
	struct pollfd pf[SSW_MAX_PLISTEN];
	for (int i = 0; i < s->npl; i++)
		pf[i] = (struct pollfd){ .fd = s->prov->conn->listener_fd(s->pl[i]), .events = POLLIN };
	return s->npl && sys_poll(pf, (nfds_t)s->npl, 0) > 0;
}

static uint64_t deadline_of(const struct timespec *t)
{
	if (!t)
		return 0;
	return ssw_now_ns() + (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec;
}

int ssw_poll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask)
{
	struct pslot small[16];
	struct pslot *sl = n <= 16 ? small : calloc(n, sizeof *sl);
	struct pollfd *k = calloc(n + n * EXTRA_PER_SOCK + 1, sizeof *k);
	int ret = 0;
	if (!sl || !k) {
		free(k);
		if (sl != small)
			free(sl);
		return -ENOMEM;
	}
	memset(sl, 0, (n <= 16 ? 16 : n) * sizeof *sl);
	for (nfds_t i = 0; i < n; i++)
		sl[i].s = ssw_sock_get(fds[i].fd);
	uint64_t dl = deadline_of(timeout);
	bool forever = !timeout, zero = timeout && !timeout->tv_sec && !timeout->tv_nsec;
	uint64_t spin_until = ssw_now_ns() + SPIN_POLL_NS;

	for (;;) {
		/* 1. switched readiness, and the kernel's view of the rest without waiting */
		int ready = 0;
		nfds_t nk = n;
		for (nfds_t i = 0; i < n; i++) {
			k[i] = fds[i];
			k[i].revents = 0;
			fds[i].revents = 0;
			struct ssw_sock *s = sl[i].s;
			if (!s)
				continue;
			if (s->state == SSW_ST_LISTENING) {
				if ((fds[i].events & POLLIN) && listener_pending(s))
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
		}
		for (nfds_t i = 0; i < n; i++)
			if (fds[i].revents)
				ready++;
		int kr = sys_ppoll(k, n, &(struct timespec){ 0, 0 }, NULL);
		if (kr < 0) {
			ret = -errno;
			break;
		}
		for (nfds_t i = 0; i < n; i++) {
			if (!k[i].revents || k[i].fd < 0)
				continue;
			if (!fds[i].revents)
				ready++;
			fds[i].revents |= k[i].revents;
		}
		if (ready || zero) {
			ret = ready;
			break;
		}
		if (!forever && ssw_now_ns() >= dl) {
			ret = 0;
			break;
		}
		/* 2. traffic may be hot: a short spin costs less than a wake-up */
		if (ssw_now_ns() < spin_until) {
			ssw_cpu_relax();
			continue;
		}
		/* 3. sleep on kernel fds + provider wait fds */
		bool again = false;
		for (nfds_t i = 0; i < n; i++) {
			struct ssw_sock *s = sl[i].s;
			sl[i].nextra = 0;
			sl[i].armed = false;
			if (!s)
				continue;
			sl[i].first_extra = (int)nk;
			if (s->state == SSW_ST_LISTENING) {
				for (int j = 0; j < s->npl; j++)
					k[nk++] = (struct pollfd){ .fd = s->prov->conn->listener_fd(s->pl[j]), .events = POLLIN };
			} else if (s->state == SSW_ST_CONNECTED) {
				int got = 0;
				if (ssw_session_sleep_prepare(s->sess, &k[nk], EXTRA_PER_SOCK, &got) < 0) {
					again = true;
					break;
				}
				sl[i].armed = true;
				nk += (nfds_t)got;
			} else if (s->state == SSW_ST_CONNECTING && s->cep) {
				k[nk++] = (struct pollfd){ .fd = s->prov->conn->connect_fd(s->cep), .events = POLLIN };
			} else {
				/* negotiating: the session's fds */
				int got = 0;
				if (s->sess && ssw_session_sleep_prepare(s->sess, &k[nk], EXTRA_PER_SOCK, &got) == 0) {
					sl[i].armed = true;
					nk += (nfds_t)got;
				} else {
					again = true;
					break;
				}
			}
			sl[i].nextra = (int)nk - sl[i].first_extra;
		}
		if (!again) {
			struct timespec ts, *tp = NULL;
			if (!forever) {
				uint64_t now = ssw_now_ns(), left = dl > now ? dl - now : 0;
				ts.tv_sec = (time_t)(left / 1000000000ull);
				ts.tv_nsec = (long)(left % 1000000000ull);
				tp = &ts;
			}
			int r = sys_ppoll(k, nk, tp, mask);
			int err = errno;
			for (nfds_t i = 0; i < n; i++)
				if (sl[i].armed)
					ssw_session_sleep_done(sl[i].s->sess);
			if (r < 0 && err == EINTR) {
				ret = -EINTR;
				break;
			}
		} else {
			for (nfds_t i = 0; i < n; i++)
				if (sl[i].armed)
					ssw_session_sleep_done(sl[i].s->sess);
		}
		spin_until = 0;
	}
	for (nfds_t i = 0; i < n; i++)
		ssw_sock_put(sl[i].s);
	free(k);
	if (sl != small)
		free(sl);
	return ret;
}
