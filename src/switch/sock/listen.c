/* listen.c — listen(2) and accept(2) through the switch, the fd layer's side.
 *
 * A switched listener listens on the kernel socket and on the providers
 * (setup/listen.c).  accept takes whichever is ready: a provider connection
 * the set-up took and checked (setup/accept.c), given a kernel socket and a
 * place in the table here, or a kernel TCP connection as it is; processes
 * sharing the listener after fork accept from the same backlogs. */
#include "switch/switch.h"

#include "common/log.h"
#include "common/sys.h"
#include "switch/events/evwait.h"
#include "switch/setup/setup.h"
#include "switch/sock/addr.h"
#include "switch/stat/statreg.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* ---- listen ------------------------------------------------------------- */

int ssw_listen(int fd, int backlog)
{
	if (sys_listen(fd, backlog) < 0)
		return -errno;
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) { /* listen again: new backlog, already switched */
		ssw_sock_put(s);
		return 0;
	}
	int dom, type, proto;
	socklen_t l = sizeof dom;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) < 0 || (dom != AF_INET && dom != AF_INET6))
		return 0;
	l = sizeof type;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_STREAM)
		return 0;
	l = sizeof proto;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) < 0 || proto != IPPROTO_TCP)
		return 0;

	struct sockaddr_storage name, a;
	socklen_t nl = sizeof name;
	if (sys_getsockname(fd, (struct sockaddr *)&name, &nl) < 0)
		return 0;
	ssw_addr_listener(&name, nl, &a);
	uint16_t port = ssw_addr_port(&a);
	if (ssw_route_port_excluded(&ssw_routes_table, port))
		return 0;
	int v6only = 1;
	l = sizeof v6only;
	bool dual = dom == AF_INET6 && ssw_addr_is_wildcard(&a) &&
		    sys_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &l) == 0 && !v6only;
	s = ssw_sock_new(SSW_ST_LISTENING, fd, dom);
	if (!s)
		return 0;
	s->v6only = dom == AF_INET6 && ssw_addr_is_wildcard(&a) && !dual;
	ssw_sock_load_opts(s, fd);
	s->lopts = s->opts;
	if (backlog < 16)
		backlog = 16;
	char names[96];
	const char *note = NULL;
	int np = ssw_setup_listen(s, &a, dual, backlog, names, sizeof names, &note);
	if (np < 0) { /* no route gives it a provider: a plain kernel listener */
		ssw_sock_put(s);
		return 0;
	}
	if (np == 0) {
		if (note)
			ssw_statreg_kernel(fd, NULL, 0, note); /* warned by the provider */
		SSW_INFO("fd %d: listen %s: kernel TCP only (%s)", fd, ssw_addr_str((struct sockaddr *)&a),
			 note ? note : "no provider serves it");
		ssw_sock_put(s);
		return 0;
	}
	if (note) /* a provider half lost (warned by the provider): `stat` says why */
		snprintf(s->lnote, sizeof s->lnote, "%s", note);
	s->local = name;
	s->local_len = nl;
	s->lbacklog = backlog;
	s->ldual = dual;
	ssw_fdtab_set(fd, s);
	SSW_INFO("fd %d: listening on %s (kernel TCP%s)", fd, ssw_addr_str((struct sockaddr *)&a), names);
	ssw_sock_put(s);
	return 0;
}

/* ---- accept ------------------------------------------------------------- */

bool ssw_listener_ready(struct ssw_sock *s)
{
	return ssw_setup_listener_ready(s);
}

/* A provider connection taken by the set-up: its kernel socket (a fresh one,
 * as accept4 would make), its socket object, and its place in the table. */
static int install(struct ssw_sock *ls, struct ssw_setup_accepted *a, struct sockaddr *addr, socklen_t *alen,
		   int flags)
{
	int nfd = sys_socket(ls->family, SOCK_STREAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)), IPPROTO_TCP);
	struct ssw_sock *s = nfd >= 0 ? ssw_sock_new(SSW_ST_CONNECTED, nfd, ls->family) : NULL;
	if (!s) {
		int e = nfd < 0 ? -errno : -ENOMEM;
		ssw_session_close(a->sess, true);
		if (nfd >= 0)
			sys_close(nfd);
		ssw_fork_guard_leave();
		return e;
	}
	s->prov = a->prov;
	s->sess = a->sess;
	s->opts = a->opts;
	s->linger_on = ls->linger_on;
	s->linger_s = ls->linger_s;
	if (s->opts.oobinline) {
		int one = 1;
		sys_setsockopt(nfd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one);
	}
	/* a kernel-accepted socket inherits the listener's buffer sizes, and
	 * getsockopt on ours reads this fresh kernel socket */
	int bufs[2] = { (int)s->opts.rcvbuf, (int)s->opts.sndbuf };
	if (bufs[0] > 0)
		sys_setsockopt(nfd, SOL_SOCKET, SO_RCVBUF, &bufs[0], sizeof bufs[0]);
	if (bufs[1] > 0)
		sys_setsockopt(nfd, SOL_SOCKET, SO_SNDBUF, &bufs[1], sizeof bufs[1]);
	atomic_store(&s->nonblock, (flags & SOCK_NONBLOCK) != 0);
	s->local_len = ssw_addr_for_family(&a->server, ls->family, &s->local);
	s->peer_len = ssw_addr_for_family(&a->client, ls->family, &s->peer);
	ssw_fdtab_set(nfd, s);
	ssw_fork_guard_leave();
	ssw_sock_put(s);
	atomic_fetch_add(&ssw_counters.switched, 1);
	ssw_addr_copy_out(&s->peer, s->peer_len, addr, alen);
	SSW_INFO("fd %d: accepted %s over %s", nfd, ssw_addr_str((struct sockaddr *)&s->peer), a->prov->name);
	return nfd;
}

/* A blocking accept's wait for the kernel listener or a provider's
 * (common/waitpol.h): a busy server's next connection is often a few us
 * away, so it looks for the thread's spin budget before it pays for a
 * wake-up. */
struct accept_wait {
	struct ssw_waiter w;
	struct pollfd *pf;
	nfds_t npf;
	int r; /* the last poll's answer (pf's revents) */
};

static int accept_look(struct ssw_waiter *w)
{
	struct accept_wait *aw = (struct accept_wait *)w;
	aw->r = sys_poll(aw->pf, aw->npf, 0);
	return aw->r < 0 ? -errno : aw->r;
}

static int accept_sleep(struct ssw_waiter *w, int64_t ns)
{
	struct accept_wait *aw = (struct accept_wait *)w;
	int ms = ssw_wait_ms(ns);
	/* published for `sockswitch stat`: wake to answer its reader */
	aw->r = sys_poll(aw->pf, aw->npf, ms ? ssw_statreg_sleep_ms(ms) : 0);
	if (aw->r < 0)
		return -errno;
	if (aw->r == 0 && ms != 0)
		ssw_statreg_answer(); /* no lock held here */
	return aw->r > 0 ? SSW_WAIT_WOKEN : SSW_WAIT_TIMEDOUT;
}

int ssw_accept(struct ssw_sock *s, int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	/* O_NONBLOCK is the open file's, and the processes sharing a listener
	 * share it: a pre-forked sibling may have changed it since we looked
	 * (sem fork_nonblock_listener); one system call per accept, once this
	 * process has forked (before, fcntl and ioctl here told us) */
	__atomic_store_n(&s->looked_by, ssw_pid(), __ATOMIC_RELAXED);
	if (ssw_forked()) {
		int fl = sys_fcntl(fd, F_GETFL, 0);
		if (fl >= 0)
			atomic_store(&s->nonblock, (fl & O_NONBLOCK) != 0);
	}
	bool nonblock = atomic_load(&s->nonblock);
	uint64_t dl = s->rcvtimeo_ms > 0 ? ssw_now_ns() + (uint64_t)s->rcvtimeo_ms * 1000000ull : 0;
	for (;;) {
		struct ssw_setup_accepted a;
		ssw_fork_guard_enter(); /* a fork sees the session whole, in the table */
		if (ssw_setup_accept(s, &a) == 0)
			return install(s, &a, addr, alen, flags);
		ssw_fork_guard_leave();
		struct pollfd pf[1 + SSW_MAX_PLISTEN];
		pf[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
		int npf = 1 + ssw_setup_listener_fds(s, pf + 1, SSW_MAX_PLISTEN);
		/* nonblocking: a deadline of now, one look */
		struct accept_wait aw = {
			.w = { .ready = accept_look, .sleep = accept_sleep, .peer_cpu = -1 },
			.pf = pf,
			.npf = (nfds_t)npf,
		};
		int r = ssw_wait(ssw_ev_pol(), &ssw_ev_wait_once, nonblock ? ssw_now_ns() : dl, &aw.w);
		if (r < 0 && r != -ETIMEDOUT)
			return r;
		r = aw.r;
		if (pf[0].revents & (POLLIN | POLLERR | POLLHUP)) {
			/* a kernel TCP connection: accept it as it is */
			int k = sys_accept4(fd, addr, alen, flags);
			if (k >= 0) {
				atomic_fetch_add(&ssw_counters.fallback, 1);
				SSW_INFO("fd %d: accepted fd %d over kernel TCP (peer not switched)", fd, k);
				ssw_statreg_kernel(k, NULL, 0, "peer not switched");
			}
			if (k >= 0 || errno != EAGAIN || nonblock)
				return k >= 0 ? k : -errno;
			continue;
		}
		if (r == 0 && (nonblock || (dl && ssw_now_ns() >= dl)))
			return -EAGAIN;
	}
}
