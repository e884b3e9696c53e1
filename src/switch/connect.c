/* connect.c — connect(2) through the switch (seed 001): route the destination,
 * bind the kernel socket to a real local port, connect over the provider
 * without blocking, negotiate the session, and fall back to kernel TCP
 * whenever the provider cannot serve. */
#include "switch/switch.h"

#include "common/log.h"
#include "common/sockdiag.h"
#include "common/sys.h"
#include "switch/addr.h"
#include "switch/statreg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#define CONNECT_SPIN_NS 100000ull

/* Is fd an IPv4/IPv6 TCP stream socket? */
static bool is_tcp_socket(int fd, int *family)
{
	uint8_t fi = ssw_fdinfo_get(fd);
	if (fi & SSW_FI_KNOWN) {
		*family = fi & SSW_FI_TCP4 ? AF_INET : AF_INET6;
		return (fi & (SSW_FI_TCP4 | SSW_FI_TCP6)) != 0;
	}
	int v;
	socklen_t l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || (v != AF_INET && v != AF_INET6))
		return false;
	*family = v;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_STREAM)
		return false;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return false;
	return true;
}

/* Read the options the application set on the kernel socket before
 * connect/listen: they shape the session. */
void ssw_sock_load_opts(struct ssw_sock *s, int fd)
{
	uint8_t fi = ssw_fdinfo_get(fd);
	if ((fi & SSW_FI_KNOWN) && !(fi & SSW_FI_OPTS)) { /* defaults: nothing to read back */
		atomic_store(&s->nonblock, (fi & SSW_FI_NONBLOCK) != 0);
		return;
	}
	int v;
	socklen_t l = sizeof v;
	struct timeval tv;
	struct linger lg;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &v, &l) == 0)
		s->opts.oobinline = v != 0;
	l = sizeof v;
	if (sys_getsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, &l) == 0)
		s->opts.cork = v != 0;
	l = sizeof tv;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
		s->rcvtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
	l = sizeof tv;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
		s->sndtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
	l = sizeof lg;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l) == 0) {
		s->linger_on = lg.l_onoff != 0;
		s->linger_s = lg.l_linger;
	}
	/* SO_RCVBUF/SO_SNDBUF read back doubled when the application set them;
	 * an untouched socket shows the sysctl default. */
	static int def[2] = { -1, -1 };
	if (def[0] < 0) {
		const char *files[2] = { "/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem" };
		for (int i = 0; i < 2; i++) {
			char buf[128] = "";
			int f = (int)SYS_(openat, AT_FDCWD, files[i], O_RDONLY | O_CLOEXEC);
			long a = 0, b = 0;
			if (f >= 0) {
				(void)!sys_read(f, buf, sizeof buf - 1);
				sys_close(f);
			}
			def[i] = sscanf(buf, "%ld %ld", &a, &b) == 2 ? (int)b : 0;
		}
	}
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &l) == 0 && v != def[0] && v > 0)
		s->opts.rcvbuf = (uint32_t)v / 2;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &l) == 0 && v != def[1] && v > 0)
		s->opts.sndbuf = (uint32_t)v / 2;
	int fl = sys_fcntl(fd, F_GETFL, 0);
	atomic_store(&s->nonblock, fl >= 0 && (fl & O_NONBLOCK));
}

/* Bind an unbound socket to the local address the kernel would use to reach
 * a local destination, so the application sees a real local port. */
static int bind_local(int fd, int family, const struct sockaddr_storage *dst)
{
	struct sockaddr_storage cur;
	socklen_t cl = sizeof cur;
	uint8_t fi = ssw_fdinfo_get(fd);
	if (!(fi & SSW_FI_KNOWN) || (fi & SSW_FI_BOUND)) {
		if (sys_getsockname(fd, (struct sockaddr *)&cur, &cl) < 0)
			return -errno;
		if (ssw_addr_port(&cur) != 0)
			return 0; /* the application bound it already */
	}
	struct sockaddr_storage b;
	socklen_t bl = ssw_addr_for_family(dst, family, &b);
	if (!ssw_addr_is_local((const struct sockaddr *)dst, ssw_addr_len(dst))) {
		/* a remote peer (fabric): the source address the kernel would
		 * pick, asked of a UDP socket's connect (nothing is sent) */
		struct sockaddr_storage src;
		socklen_t sl = sizeof src;
		int u = sys_socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		bool ok = u >= 0 && sys_connect(u, (struct sockaddr *)&b, bl) == 0 &&
			  sys_getsockname(u, (struct sockaddr *)&src, &sl) == 0;
		if (u >= 0)
			sys_close(u);
		if (!ok)
			return -errno;
		memcpy(&b, &src, sizeof b);
		bl = sl;
	}
	ssw_addr_set_port(&b, 0);
	if (sys_bind(fd, (struct sockaddr *)&b, bl) < 0)
		return -errno;
	return 0;
}

/* Would the acceptor believe our address (listen.c claim_check)?  Only an
 * address of this namespace, bound without IP_FREEBIND/IP_TRANSPARENT, and
 * a privileged port only from root's socket.  A socket that cannot prove
 * its address goes to kernel TCP from the start rather than be refused
 * (reset) by a listener of another user.  Only a socket the application
 * bound or set options on can be such a one: ours binds a local address. */
static bool provable_source(int fd, const struct ssw_sock *s)
{
	uint8_t fi = ssw_fdinfo_get(fd);
	if ((fi & SSW_FI_KNOWN) && !(fi & (SSW_FI_OPTS | SSW_FI_BOUND)))
		return true;
	struct sockaddr_storage n;
	if (ssw_addr_normalize((const struct sockaddr *)&s->local, s->local_len, &n) < 0)
		return false;
	if (ssw_diag_fd_nonlocal(fd) || !ssw_addr_is_local((const struct sockaddr *)&n, ssw_addr_len(&n)))
		return false;
	return ssw_addr_port(&n) >= ssw_diag_unprivileged_port_start() || geteuid() == 0;
}

/* A listener of another user checks our address when it accepts (listen.c
 * peer_ok): the proof must outlive our socket until then (proof.c).  One
 * of our own user does not check. */
static bool needs_proof(const struct ssw_provider *p, struct ssw_ep *ep)
{
	const struct ssw_conn_ops *c = p->conn;
	uint32_t uid;
	int32_t pid;
	if (c->peer_addr) /* the acceptor takes our address from the transport (listen.c peer_ok) */
		return false;
	if (!c->peer_cred)
		return true;
	return c->peer_cred(ep, &uid, &pid) < 0 || uid != geteuid();
}

static int fallback_connect(struct ssw_sock *s, int fd, const struct sockaddr *addr, socklen_t len,
			    const char *why)
{
	atomic_fetch_add(&ssw_counters.fallback, 1);
	SSW_INFO("fd %d: connect %s: kernel TCP (%s)", fd, ssw_addr_str(addr), why);
	ssw_statreg_kernel(fd, addr, len, why);
	if (s) {
		ssw_proof_undo(s, fd);
		struct ssw_sock *t = ssw_fdtab_take(fd);
		if (t)
			ssw_sock_put(t);
	}
	int r = sys_connect(fd, addr, len);
	return r < 0 ? -errno : 0;
}

/* Drive a pending provider connect and session negotiation.
 * Returns 0 when connected, -EINPROGRESS while pending, or another -errno:
 * the provider failed (the caller falls back, or reports a final error). */
static int progress(struct ssw_sock *s, int wait_ms)
{
	const struct ssw_provider *p = s->prov;
	uint64_t dl = wait_ms > 0 ? ssw_now_ns() + (uint64_t)wait_ms * 1000000ull : 0;
	bool spun = false;
	for (;;) {
		ssw_fork_guard_enter();
		int rc = ssw_session_connect_complete(p, s->cep, &s->opts, &s->sess);
		ssw_fork_guard_leave();
		if (rc == 0) {
			s->cep = NULL;
			break;
		}
		if (rc != -EINPROGRESS)
			return rc;
		if (wait_ms == 0)
			return -EINPROGRESS;
		/* A provider that answers later: its reply comes within microseconds;
		 * a wake-up of ours would cost more than a short busy-poll. */
		if (!spun) {
			spun = true;
			uint64_t t0 = ssw_now_ns();
			struct pollfd q = { .fd = p->conn->connect_fd(s->cep), .events = POLLIN };
			while (ssw_now_ns() - t0 < CONNECT_SPIN_NS && sys_poll(&q, 1, 0) == 0)
				ssw_cpu_relax();
			continue;
		}
		struct pollfd pf = { .fd = p->conn->connect_fd(s->cep), .events = POLLIN };
		int ms = 100;
		if (dl) {
			uint64_t now = ssw_now_ns();
			if (now >= dl)
				return -ETIMEDOUT;
			if ((dl - now) / 1000000 < 100)
				ms = (int)((dl - now) / 1000000) + 1;
		}
		sys_poll(&pf, 1, ms);
	}
	s->state = SSW_ST_CONNECTED;
	atomic_fetch_add(&ssw_counters.switched, 1);
	SSW_INFO("fd %d: connected to %s over %s", s->fd, ssw_addr_str((struct sockaddr *)&s->peer), p->name);
	return 0;
}

static bool final_error(int rc)
{
	return rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -EHOSTUNREACH;
}

/* Abandon the provider attempt of a connecting socket and go to the kernel. */
static int abandon(struct ssw_sock *s, int fd, int rc, bool nonblock)
{
	if (s->sess) {
		ssw_session_close(s->sess, true);
		s->sess = NULL;
	}
	if (s->cep) {
		s->prov->conn->close(s->cep, SSW_CLOSE_ABORT);
		s->cep = NULL;
	}
	if (final_error(rc)) {
		struct ssw_sock *t = ssw_fdtab_take(fd);
		if (t)
			ssw_sock_put(t);
		return rc;
	}
	char why[64];
	snprintf(why, sizeof why, "provider connect failed: %s", strerror(-rc));
	rc = fallback_connect(s, fd, (struct sockaddr *)&s->dst, s->dst_len, why);
	if (rc == -EINPROGRESS && !nonblock)
		rc = 0; /* cannot happen on a blocking socket */
	return rc;
}

/* For a connecting socket: connect() again, SO_ERROR, poll.  Returns 0
 * (connected), -EINPROGRESS/-EALREADY (pending) or the final error. */
int ssw_connect_poll(struct ssw_sock *s, int fd, int wait_ms)
{
	pthread_mutex_lock(&s->lock);
	int rc = 0;
	if (s->state == SSW_ST_CONNECTING) {
		rc = progress(s, wait_ms);
		if (rc != 0 && rc != -EINPROGRESS)
			rc = abandon(s, fd, rc, true);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int ssw_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	if (ssw_provider_calls) { /* a provider's own socket (libfabric tcp) */
		int r = sys_connect(fd, addr, len);
		return r < 0 ? -errno : 0;
	}
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		int rc;
		if (s->state == SSW_ST_CONNECTED)
			/* the first connect after an asynchronous completion says 0 */
			rc = atomic_exchange(&s->connect_unseen, false) ? 0 : -EISCONN;
		else if (s->state == SSW_ST_LISTENING)
			rc = -EINVAL;
		else {
			rc = ssw_connect_poll(s, fd, atomic_load(&s->nonblock) ? 0 : -1);
			if (rc == -EINPROGRESS)
				rc = -EALREADY;
			else
				atomic_store(&s->connect_unseen, false);
		}
		ssw_sock_put(s);
		return rc;
	}

	int family;
	struct sockaddr_storage dst;
	if (!addr || len < sizeof(sa_family_t) || !is_tcp_socket(fd, &family) ||
	    ssw_addr_normalize(addr, len, &dst) < 0) {
		int r = sys_connect(fd, addr, len);
		return r < 0 ? -errno : 0;
	}
	int t;
	const struct ssw_route_rule *rule = ssw_route_lookup(&ssw_routes_table, (struct sockaddr *)&dst,
							     ssw_addr_len(&dst), &t);
	const struct ssw_provider *p = ssw_provider_for(t);
	if (!p || ssw_route_port_excluded(&ssw_routes_table, ssw_addr_port(&dst))) {
		if (t != SSW_TARGET_TCP || ssw_route_port_excluded(&ssw_routes_table, ssw_addr_port(&dst))) {
			char why[64];
			snprintf(why, sizeof why, "provider %s unavailable", ssw_target_name(t));
			return fallback_connect(NULL, fd, addr, len, p ? "port excluded" : why);
		}
		SSW_INFO("fd %d: connect %s: kernel TCP (%s%s)", fd, ssw_addr_str(addr),
			 rule ? "route says tcp: " : "no route for this address", rule ? rule->origin : "");
		ssw_statreg_route_tcp(fd, addr, len, rule);
		int r = sys_connect(fd, addr, len);
		return r < 0 ? -errno : 0;
	}

	int rc = bind_local(fd, family, &dst);
	if (rc < 0)
		return fallback_connect(NULL, fd, addr, len, "cannot bind a local port");

	/* the listener checks that our user holds the socket we connect from
	 * (listen.c peer_ok): one made by another user (before a setuid)
	 * would be refused there, with a reset instead of kernel TCP */
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid())
		return fallback_connect(NULL, fd, addr, len, "socket created by another user");

	s = ssw_sock_new(SSW_ST_CONNECTING, fd, family);
	if (!s)
		return fallback_connect(NULL, fd, addr, len, "out of memory");
	s->prov = p;
	ssw_sock_load_opts(s, fd);
	s->local_len = sizeof s->local;
	sys_getsockname(fd, (struct sockaddr *)&s->local, &s->local_len);
	memcpy(&s->peer, addr, len < sizeof s->peer ? len : sizeof s->peer);
	s->peer_len = len;
	memcpy(&s->dst, addr, len < sizeof s->dst ? len : sizeof s->dst);
	s->dst_len = len;

	if (!p->conn->peer_addr && !provable_source(fd, s)) {
		ssw_sock_put(s);
		return fallback_connect(NULL, fd, addr, len, "source address not provable (non-local or privileged)");
	}

	struct ssw_conn_priv priv;
	uint8_t init[SSW_SESSION_INIT_BYTES];
	ssw_session_make_init(&s->opts, init);
	ssw_conn_priv_make(&priv, &s->local, &dst, init);
	/* a listener of another user checks the proof (listen.c claim_check):
	 * one it finds in O(1) when the last connect there met such a listener */
	int proof = ssw_proof_hint(&dst) ? ssw_proof_make_listening(s, fd) : -1;
	bool listening = proof >= 0;
	if (listening)
		SSW_DEBUG("fd %d: connect %s: a listening proof (the acceptor checks our address)", fd, ssw_addr_str(addr));
	if (proof < 0)
		proof = ssw_proof_make(fd);
	priv.cfd = proof >= 0 ? proof : fd;
	priv.cdomain = (uint16_t)family;
	struct ssw_ep *ep = NULL;
	rc = p->conn->connect((struct sockaddr *)&dst, ssw_addr_len(&dst), &priv, sizeof priv, &ep);
	const char *note = ssw_diag_take_note(); /* also after a success: a squatter passed over */
	bool started = rc == 0 || rc == -EINPROGRESS;
	bool other = started && needs_proof(p, ep);
	if (other)
		ssw_proof_learn(&dst, true);
	/* kept while the acceptor may check it: another user's listener, or
	 * one whose workers changed user (the hint came from their INIT) */
	if (started && (other || listening)) {
		s->proof_fd = proof;
	} else {
		if (proof >= 0)
			sys_close(proof);
		ssw_proof_undo(s, fd);
	}
	if (rc != 0 && rc != -EINPROGRESS) {
		ssw_sock_put(s);
		if (final_error(rc))
			return rc;
		return fallback_connect(NULL, fd, addr, len,
					note ? note : rc == -ENOENT ? "no switched listener" : strerror(-rc));
	}
	s->cep = ep;
	ssw_fdtab_set(fd, s);
	ssw_sock_put(s); /* the table holds it now */

	bool nonblock = atomic_load(&s->nonblock);
	rc = ssw_connect_poll(s, fd, nonblock ? 0 : (s->sndtimeo_ms > 0 ? s->sndtimeo_ms : -1));
	/* a nonblocking TCP connect says EINPROGRESS even on loopback, and
	 * programs count on it (they wait for POLLOUT, then connect() says 0) */
	if (rc == 0 && nonblock)
		rc = -EINPROGRESS;
	if (rc == -EINPROGRESS)
		atomic_store(&s->connect_unseen, true);
	return rc;
}
