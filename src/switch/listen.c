/* listen.c — listen(2) and accept(2) through the switch.
 *
 * A switched listener listens on the kernel socket and on the provider.  A
 * provider connect is one trip (the request waits in the provider's backlog
 * like a SYN in the kernel's), so nothing has to answer before the
 * application calls accept: a program that connects and then accepts on one
 * thread works (seed 001), and no helper thread wakes up per connection.
 * accept takes whichever is ready: a kernel connection or a provider one;
 * processes sharing the listener after fork accept from the same backlog. */
#include "switch/switch.h"

#include "common/log.h"
#include "common/sockdiag.h"
#include "common/sys.h"
#include "switch/addr.h"
#include "switch/evwait.h"
#include "switch/providers.h"
#include "switch/statreg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- listen ------------------------------------------------------------- */

static bool wildcard(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

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
	/* v4-mapped binds are IPv4 listeners; the unspecified address stays a wildcard */
	if (name.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&name)->sin6_addr))
		ssw_addr_normalize((struct sockaddr *)&name, nl, &a);
	else
		memcpy(&a, &name, sizeof a);
	uint16_t port = ssw_addr_port(&a);
	if (ssw_route_port_excluded(&ssw_routes_table, port))
		return 0;
	/* A listener is reachable through whatever serves its address; a
	 * wildcard one through whatever serves any address of this host (shm
	 * for local peers and fabric for remote ones, at once). */
	int v6only = 1;
	l = sizeof v6only;
	bool dual = dom == AF_INET6 && wildcard(&a) &&
		    sys_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &l) == 0 && !v6only;
	int targets[SSW_REGISTRY_MAX], nt;
	if (wildcard(&a)) {
		nt = ssw_route_local_targets(&ssw_routes_table, a.ss_family == AF_INET || dual, a.ss_family == AF_INET6,
					     targets, SSW_REGISTRY_MAX);
	} else {
		ssw_route_lookup(&ssw_routes_table, (struct sockaddr *)&a, ssw_addr_len(&a), &targets[0]);
		nt = targets[0] != SSW_TARGET_TCP;
	}
	const struct ssw_provider *provs[SSW_REGISTRY_MAX];
	int np = 0;
	for (int i = 0; i < nt; i++)
		if ((provs[np] = ssw_provider_for(targets[i])))
			np++;
	if (!np)
		return 0;

	s = ssw_sock_new(SSW_ST_LISTENING, fd, dom);
	if (!s)
		return 0;
	ssw_sock_load_opts(s, fd);
	s->lopts = s->opts;
	if (backlog < 16)
		backlog = 16;
	struct sockaddr_in any4 = { .sin_family = AF_INET, .sin_port = htons(port) };
	char names[96] = "";
	size_t nn = 0;
	for (int i = 0; i < np; i++) {
		const struct ssw_provider *p = provs[i];
		int before = s->npl;
		if (s->npl < SSW_MAX_PLISTEN &&
		    p->conn->listen((struct sockaddr *)&a, ssw_addr_len(&a), backlog, &s->pl[s->npl].l) == 0)
			s->pl[s->npl++].prov = p;
		if (dual && s->npl < SSW_MAX_PLISTEN &&
		    p->conn->listen((struct sockaddr *)&any4, sizeof any4, backlog, &s->pl[s->npl].l) == 0)
			s->pl[s->npl++].prov = p;
		if (s->npl > before && nn < sizeof names)
			nn += (size_t)snprintf(names + nn, sizeof names - nn, " + %s", p->name);
	}
	const char *note = ssw_diag_take_note();
	if (!s->npl) {
		if (note)
			ssw_statreg_kernel(fd, NULL, 0, note); /* warned by the provider */
		SSW_INFO("fd %d: listen %s: kernel TCP only (%s)", fd, ssw_addr_str((struct sockaddr *)&a),
			 note ? note : "provider listen failed");
		ssw_sock_put(s);
		return 0;
	}
	s->local = name;
	s->local_len = nl;
	ssw_fdtab_set(fd, s);
	SSW_INFO("fd %d: listening on %s (kernel TCP%s)", fd, ssw_addr_str((struct sockaddr *)&a), names);
	ssw_sock_put(s);
	return 0;
}

/* ---- accept ------------------------------------------------------------- */

/* Would accept take a provider connection now?  poll, select and epoll
 * report this, so that an accept right after never says EAGAIN. */
bool ssw_listener_ready(struct ssw_sock *s)
{
	struct pollfd pf[SSW_MAX_PLISTEN];
	int n = 0;
	bool ready = false;
	__atomic_store_n(&s->looked_by, ssw_pid(), __ATOMIC_RELAXED);
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->npl && !ready; i++) {
		const struct ssw_conn_ops *c = s->pl[i].prov->conn;
		if (c->listener_ready) /* its fd may wake for a request not complete yet */
			ready = c->listener_ready(s->pl[i].l);
		else
			pf[n++] = (struct pollfd){ .fd = c->listener_fd(s->pl[i].l), .events = POLLIN };
	}
	ready = ready || (n && sys_poll(pf, (nfds_t)n, 0) > 0);
	pthread_mutex_unlock(&s->lock);
	return ready;
}

bool ssw_listen_has_private(const struct ssw_sock *s)
{
	for (int i = 0; i < s->npl; i++)
		if (!(s->pl[i].prov->caps & SSW_CAP_SHARED_CONTEXT))
			return true;
	return false;
}

int ssw_listen_drop_private(struct ssw_sock *s, char *names, size_t len)
{
	int k = 0, dropped = 0;
	size_t used = names && len ? strlen(names) : 0;
	for (int i = 0; i < s->npl; i++) {
		const struct ssw_provider *p = s->pl[i].prov;
		if (p->caps & SSW_CAP_SHARED_CONTEXT) {
			s->pl[k++] = s->pl[i];
			continue;
		}
		p->conn->listener_close(s->pl[i].l);
		dropped++;
		if (names && used < len && !strstr(names, p->name))
			used += (size_t)snprintf(names + used, len - used, "%s%s", used ? ", " : "", p->name);
	}
	s->npl = k;
	return dropped;
}

/* Does this listener serve `server`, the address the connector says it
 * dialed (the accepted socket's name)? */
static bool serves(const struct ssw_sock *ls, const struct sockaddr_storage *server)
{
	struct sockaddr_storage a;
	const struct sockaddr_in6 *l6 = (const void *)&ls->local;
	if (ls->local.ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&l6->sin6_addr))
		ssw_addr_normalize((const struct sockaddr *)&ls->local, ls->local_len, &a);
	else
		memcpy(&a, &ls->local, sizeof a);
	if (ssw_addr_port(&a) != ssw_addr_port(server))
		return false;
	if (wildcard(&a))
		return true;
	if (a.ss_family != server->ss_family)
		return false;
	if (a.ss_family == AF_INET)
		return ((struct sockaddr_in *)&a)->sin_addr.s_addr == ((const struct sockaddr_in *)server)->sin_addr.s_addr;
	return IN6_ARE_ADDR_EQUAL(&((struct sockaddr_in6 *)&a)->sin6_addr, &((const struct sockaddr_in6 *)server)->sin6_addr);
}

/* The connector's word on its own address is taken only when the kernel
 * backs it, as TCP's peer address comes from the kernel: the connector's
 * user holds a TCP socket bound to exactly that address (the switch binds
 * every connecting socket: connect.c bind_local).  Seen as the connector's
 * listening proof (proof.c: the kernel's lookup of a listener, 9 us), in
 * the socket the connector names (its fd, taken with pidfd_getfd: a root
 * server), else in the kernel's list of bound sockets (sock_diag; a walk of
 * the bind table, 1.5 ms on this VM).
 * A connector of our own user is not asked: it could read our memory
 * anyway.  A refused request is reset; a genuine connector is not refused
 * (connect.c falls back to kernel TCP first when its socket belongs to
 * another user). */
static int claim_check(const struct ssw_sock *ls, const struct ssw_provider *p, struct ssw_ep *ep,
		       const struct sockaddr_storage *client, const struct sockaddr_storage *server, int cfd,
		       int cdomain, uint32_t *uid, bool *ask_proof)
{
	const struct ssw_conn_ops *c = p->conn;
	int32_t pid = 0;
	if (!c->peer_cred)
		return -ENOSYS;
	int rc = c->peer_cred(ep, uid, &pid);
	if (rc < 0)
		return rc;
	if (!serves(ls, server))
		return -EADDRNOTAVAIL;
	if (*uid == geteuid())
		return 0;
	/* a listening proof (proof.c): the kernel's O(1) lookup finds a socket
	 * of that user listening on the claimed address, which only that user
	 * can hold while the proof is there */
	uid_t luid;
	*ask_proof = true; /* unless the connector's descriptor answers (a root server) */
	if (ssw_diag_listener_uid(client, &luid) == 0 && luid == *uid) {
		SSW_DEBUG("fd %d: %s (uid %u) proven by its listening proof", ls->fd,
			  ssw_addr_str((const struct sockaddr *)client), (unsigned)*uid);
		return 0;
	}
	if (ssw_diag_fd_bound(pid, cfd, client, *uid) == 0) {
		*ask_proof = false;
		return 0;
	}
	/* the descriptor moved (dup2), or we have no rights over the process;
	 * a kernel that cannot list bound sockets (Linux < 6.8): refused */
	return ssw_diag_bound_by(client, cdomain, *uid);
}

/* Who is the peer of an accepted provider connection?  *client holds the
 * connector's claim on entry.  A transport that vouches for the peer's
 * address (peer_addr: fabric, from its own connection) gives the host, and
 * the claim is not checked (a remote host has no kernel sockets here to
 * check it against).  The port stays the claimed one, the connector's
 * application socket's, which is what kernel TCP would report: the
 * transport's own source port means nothing to the application, and a
 * remote host picks its source ports with kernel TCP too (a claimed
 * privileged port is not believed: see below).  Without
 * peer_addr the claim must pass claim_check.  Either way the listener must
 * serve the address the connector says it dialed. */
static bool peer_ok(const struct ssw_sock *ls, const struct ssw_provider *p, struct ssw_ep *ep,
		    struct sockaddr_storage *client, const struct sockaddr_storage *server, int cfd, int cdomain,
		    bool *ask_proof)
{
	uint32_t uid = (uint32_t)-1;
	int rc;
	char cl[64];
	if (p->conn->peer_addr) {
		struct sockaddr_storage pa, n;
		socklen_t plen = sizeof pa;
		rc = p->conn->peer_addr(ep, &pa, &plen);
		if (rc == 0 && ssw_addr_normalize((struct sockaddr *)&pa, plen, &n) < 0)
			rc = -EAFNOSUPPORT;
		if (rc == 0 && !serves(ls, server))
			rc = -EADDRNOTAVAIL;
		if (rc == 0) {
			/* the claimed port is believed only where kernel TCP would
			 * not have checked it either: from another host, and not a
			 * port below 1024 (privilege there, which a word does not
			 * prove).  From this host, another user could claim a port
			 * some other user holds: then the transport's own source
			 * port, which the kernel assigned to the connector. */
			bool remote = !ssw_addr_is_local((struct sockaddr *)&n, ssw_addr_len(&n));
			if (remote && (ssw_addr_port(client) >= 1024 || ssw_addr_port(&n) < 1024))
				ssw_addr_set_port(&n, ssw_addr_port(client));
			*client = n;
			return true;
		}
		snprintf(cl, sizeof cl, "%s", ssw_addr_str((const struct sockaddr *)client));
		SSW_WARN_ONCE("fd %d: refused a %s connection (claiming %s) to %s: %s", ls->fd, p->name, cl,
			      ssw_addr_str((const struct sockaddr *)server), strerror(-rc));
		return false;
	}
	rc = claim_check(ls, p, ep, client, server, cfd, cdomain, &uid, ask_proof);
	if (rc == 0)
		return true;
	const char *why = rc == -ENOENT ? "that user holds no socket bound there" : strerror(-rc);
	snprintf(cl, sizeof cl, "%s", ssw_addr_str((const struct sockaddr *)client));
	SSW_WARN_ONCE("fd %d: refused a switched connection claiming to come from %s to %s (uid %u): %s", ls->fd, cl,
		      ssw_addr_str((const struct sockaddr *)server), (unsigned)uid, why);
	SSW_INFO("fd %d: refused a switched connection claiming %s (uid %u): %s", ls->fd, cl, (unsigned)uid, why);
	return false;
}

static int make_accepted(struct ssw_sock *ls, const struct ssw_provider *p, struct ssw_ep *ep, const void *priv,
			 size_t plen, struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct sockaddr_storage client, server;
	uint8_t peer[SSW_SESSION_INIT_BYTES];
	int cfd, cdom;
	bool ask_proof = false;
	if (ssw_conn_priv_parse(priv, plen, &client, &server, peer, &cfd, &cdom) < 0 ||
	    !peer_ok(ls, p, ep, &client, &server, cfd, cdom, &ask_proof)) {
		p->conn->close(ep, SSW_CLOSE_ABORT);
		return -EAGAIN;
	}
	int nfd = sys_socket(ls->family, SOCK_STREAM | (flags & (SOCK_NONBLOCK | SOCK_CLOEXEC)), IPPROTO_TCP);
	if (nfd < 0) {
		int e = -errno;
		p->conn->close(ep, SSW_CLOSE_ABORT);
		return e;
	}
	struct ssw_sock *s = ssw_sock_new(SSW_ST_CONNECTED, nfd, ls->family);
	if (!s) {
		p->conn->close(ep, SSW_CLOSE_ABORT);
		sys_close(nfd);
		return -ENOMEM;
	}
	s->prov = p;
	s->opts = ls->lopts;
	s->opts.ask_proof = ask_proof; /* in our INIT: a listening proof next time (proof.c) */
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
	s->local_len = ssw_addr_for_family(&server, ls->family, &s->local);
	s->peer_len = ssw_addr_for_family(&client, ls->family, &s->peer);
	ssw_fork_guard_enter(); /* a fork sees this session whole, in the table */
	s->sess = ssw_session_new(p, ep, &s->opts, peer);
	if (s->sess && ssw_session_announce(s->sess, &s->opts) < 0) {
		ssw_session_close(s->sess, true);
		s->sess = NULL;
		ep = NULL;
	}
	if (!s->sess) {
		ssw_fork_guard_leave();
		p->conn->close(ep, SSW_CLOSE_ABORT);
		ssw_sock_put(s);
		sys_close(nfd);
		return -ENOMEM;
	}
	ssw_fdtab_set(nfd, s);
	ssw_fork_guard_leave();
	ssw_sock_put(s);
	atomic_fetch_add(&ssw_counters.switched, 1);
	ssw_addr_copy_out(&s->peer, s->peer_len, addr, alen);
	SSW_INFO("fd %d: accepted %s over %s", nfd, ssw_addr_str((struct sockaddr *)&s->peer), p->name);
	return nfd;
}

int ssw_accept(struct ssw_sock *s, int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	/* O_NONBLOCK is the open file's, and the processes sharing a listener
	 * share it: a pre-forked sibling may have changed it since we looked
	 * (sem fork_nonblock_listener); one system call per accept */
	__atomic_store_n(&s->looked_by, ssw_pid(), __ATOMIC_RELAXED);
	int fl = sys_fcntl(fd, F_GETFL, 0);
	if (fl >= 0)
		atomic_store(&s->nonblock, (fl & O_NONBLOCK) != 0);
	bool nonblock = atomic_load(&s->nonblock);
	uint64_t dl = s->rcvtimeo_ms > 0 ? ssw_now_ns() + (uint64_t)s->rcvtimeo_ms * 1000000ull : 0;
	for (;;) {
		struct ssw_ep *ep = NULL;
		uint8_t priv[SSW_CONNECT_PRIV_MAX];
		size_t plen = 0;
		const struct ssw_provider *p = NULL;
		struct pollfd pf[1 + SSW_MAX_PLISTEN];
		int npf = 1;
		pf[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
		/* the lock keeps fork (ssw_listen_drop_private) from closing a
		 * listener under us; the wait below runs without it */
		pthread_mutex_lock(&s->lock);
		for (int i = 0; i < s->npl && !p; i++) {
			plen = sizeof priv;
			if (s->pl[i].prov->conn->accept(s->pl[i].l, &ep, priv, &plen) == 0)
				p = s->pl[i].prov;
		}
		for (int i = 0; i < s->npl && !p; i++)
			pf[npf++] = (struct pollfd){ .fd = s->pl[i].prov->conn->listener_fd(s->pl[i].l), .events = POLLIN };
		pthread_mutex_unlock(&s->lock);
		if (p) {
			int r = make_accepted(s, p, ep, priv, plen, addr, alen, flags);
			if (r != -EAGAIN)
				return r;
			continue;
		}
		int ms = -1;
		if (nonblock)
			ms = 0;
		else if (dl) {
			uint64_t now = ssw_now_ns();
			ms = now >= dl ? 0 : (int)((dl - now) / 1000000) + 1;
		}
		int r = 0;
		if (ms != 0) {
			/* a busy server's next connection is often a few µs away: look
			 * for the adaptive spin budget before paying for a wake-up */
			struct ssw_spin sp;
			ssw_spin_start(&sp, ssw_now_ns(), ssw_ev_spin_ns());
			while ((r = sys_poll(pf, (nfds_t)npf, 0)) == 0 && ssw_spin_step(&sp))
				;
			if (r > 0)
				ssw_ev_spin_hit();
		}
		if (r == 0) {
			uint64_t t1 = ssw_now_ns();
			r = sys_poll(pf, (nfds_t)npf, ms);
			if (ms != 0)
				ssw_ev_slept(ssw_now_ns() - t1, r > 0, 0);
		}
		if (r < 0)
			return -errno;
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
