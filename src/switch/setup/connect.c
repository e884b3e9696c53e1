/* connect.c — the connecting side of the set-up (seed 001): route the
 * destination, bind the kernel socket to a real local port, make the
 * address provable, connect over the provider without blocking, negotiate
 * the session; or say why kernel TCP must carry the connection. */
#include "switch/setup/setup_priv.h"
#include "common/forklocal.h"

#include "common/log.h"
#include "common/sockdiag.h"
#include "common/sys.h"
#include "common/waitpol.h"
#include "switch/route/providers.h"
#include "switch/sock/addr.h"
#include "switch/switch.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int kernel(struct ssw_setup_decision *d, const char *fmt, const char *arg)
{
	snprintf(d->buf, sizeof d->buf, fmt, arg);
	d->why = d->buf;
	d->rule = NULL;
	return SSW_SETUP_KERNEL;
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

/* Would the acceptor believe our address (claim.c claim_check)?  Only an
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

/* A listener of another user checks our address when it accepts (claim.c): the proof must outlive our socket until then (proof.c).  One
 * of our own user does not check. */
static bool needs_proof(const struct ssw_provider *p, struct ssw_ep *ep)
{
	const struct ssw_conn_ops *c = p->conn;
	uint32_t uid;
	int32_t pid;
	if (c->peer_addr) /* the acceptor takes our address from the transport (claim.c) */
		return false;
	if (!c->peer_cred)
		return true;
	return c->peer_cred(ep, &uid, &pid) < 0 || uid != geteuid();
}

static bool final_error(int rc)
{
	return rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -EHOSTUNREACH;
}

/* The route: a provider for dst, or kernel TCP and why. */
static const struct ssw_provider *route(const struct sockaddr_storage *dst, struct ssw_setup_decision *d)
{
	int t;
	uint16_t port = ssw_addr_port(dst);
	const struct ssw_route_rule *rule = ssw_route_lookup(&ssw_routes_table, (const struct sockaddr *)dst,
							     ssw_addr_len(dst), &t);
	const struct ssw_provider *p = ssw_provider_for(t);
	if (p && !ssw_route_port_excluded(&ssw_routes_table, port))
		return p;
	if (t != SSW_TARGET_TCP || ssw_route_port_excluded(&ssw_routes_table, port)) {
		if (p)
			kernel(d, "%s", "port excluded");
		else
			kernel(d, "provider %s unavailable", ssw_target_name(t));
		return NULL;
	}
	d->rule = rule; /* the route itself says tcp (or no route): no fallback */
	d->why = NULL;
	return NULL;
}

/* ---- refused lately ---------------------------------------------------------
 * A provider connect refused ("no switched listener") after longer than a
 * kernel connect takes is not tried again toward that destination for
 * REFUSED_TTL: its connects go to kernel TCP at once.  Over fabric a
 * refusal costs a connection manager round trip (0.3 ms and more here):
 * a host whose server does not run the switch, or a fork-per-connection
 * server that stopped taking fabric requests (fabric's fab_conn.c), would
 * make every connect of a client that opens one per request pay it.  A
 * refusal that costs nothing (shm's, microseconds) is not remembered, so
 * a local server that starts listening is switched from its first
 * connection.  Per process, a few destinations. */
#define REFUSED_SLOTS 16
#define REFUSED_TTL_NS (2 * 1000000000ull)
#define REFUSED_SLOW_NS (100 * 1000ull)

struct refused {
	const struct ssw_provider *p;
	struct sockaddr_storage a;
	uint64_t until;
};
static struct refused refused[REFUSED_SLOTS];
#define refused_lock (ssw_fl->setup_lock[0]) /* fork-local: a child's is a fresh one */

static bool same_dst(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	socklen_t l = ssw_addr_len(a);
	return l && l == ssw_addr_len(b) && !memcmp(a, b, l);
}

static bool refused_lately(const struct ssw_provider *p, const struct sockaddr_storage *dst)
{
	uint64_t now = ssw_now_ns();
	bool hit = false;
	pthread_mutex_lock(&refused_lock);
	for (int i = 0; i < REFUSED_SLOTS && !hit; i++)
		hit = refused[i].p == p && refused[i].until > now && same_dst(&refused[i].a, dst);
	pthread_mutex_unlock(&refused_lock);
	return hit;
}

static void note_refused(const struct ssw_provider *p, const struct sockaddr_storage *dst, uint64_t t0)
{
	uint64_t now = ssw_now_ns();
	if (now - t0 < REFUSED_SLOW_NS)
		return;
	pthread_mutex_lock(&refused_lock);
	int k = 0;
	for (int i = 0; i < REFUSED_SLOTS; i++) {
		if (refused[i].p == p && same_dst(&refused[i].a, dst)) {
			k = i;
			break;
		}
		if (refused[i].until < refused[k].until)
			k = i; /* the oldest (or an empty one) goes */
	}
	refused[k] = (struct refused){ .p = p, .a = *dst, .until = now + REFUSED_TTL_NS };
	pthread_mutex_unlock(&refused_lock);
	SSW_DEBUG("connect %s: %s refused after %llu us: kernel TCP there for %llu s", ssw_addr_str((const struct sockaddr *)dst),
		  p->name, (unsigned long long)((now - t0) / 1000), (unsigned long long)(REFUSED_TTL_NS / 1000000000ull));
}

/* The provider connect, newest protocol version first: a listener of
 * another version is no listener for us (-ENOENT), the next one is tried. */
static int provider_connect(const struct ssw_provider *p, const struct sockaddr_storage *dst,
			    const struct ssw_conn_priv *priv, struct ssw_ep **ep)
{
	int rc = -ENOENT;
	for (uint32_t v = SSW_PROTO_MAX; v >= SSW_PROTO_MIN && rc == -ENOENT; v--)
		rc = p->conn->connect((const struct sockaddr *)dst, ssw_addr_len(dst), v, priv, sizeof *priv, ep);
	return rc;
}

int ssw_setup_connect(int fd, int family, const struct sockaddr *addr, socklen_t len,
		      const struct sockaddr_storage *dst, struct ssw_sock **out, struct ssw_setup_decision *d)
{
	*out = NULL;
	const struct ssw_provider *p = route(dst, d);
	if (!p)
		return SSW_SETUP_KERNEL;
	if (refused_lately(p, dst))
		return kernel(d, "%s", "no switched listener (refused lately)");
	uint64_t t0 = ssw_now_ns();
	if (bind_local(fd, family, dst) < 0)
		return kernel(d, "%s", "cannot bind a local port");
	/* the listener checks that our user holds the socket we connect from
	 * (claim.c): one made by another user (before a setuid) would be
	 * refused there, with a reset instead of kernel TCP */
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid())
		return kernel(d, "%s", "socket created by another user");

	struct ssw_sock *s = ssw_sock_new(SSW_ST_CONNECTING, fd, family);
	if (!s)
		return kernel(d, "%s", "out of memory");
	s->prov = p;
	ssw_sock_load_opts(s, fd);
	s->local_len = sizeof s->local;
	sys_getsockname(fd, (struct sockaddr *)&s->local, &s->local_len);
	memcpy(&s->peer, addr, len < sizeof s->peer ? len : sizeof s->peer);
	s->peer_len = len;
	memcpy(&s->dst, addr, len < sizeof s->dst ? len : sizeof s->dst);
	s->dst_len = len;
	s->pdst = *dst;
	s->connect_t0 = t0;

	if (!p->conn->peer_addr && !provable_source(fd, s)) {
		ssw_sock_put(s);
		return kernel(d, "%s", "source address not provable (non-local or privileged)");
	}

	struct ssw_conn_priv priv;
	uint8_t init[SSW_SESSION_INIT_BYTES];
	ssw_session_make_init(&s->opts, init);
	ssw_conn_priv_make(&priv, &s->local, dst, init);
	/* a listener of another user checks the proof (claim.c): one it finds
	 * in O(1) when the last connect there met such a listener */
	int proof = ssw_proof_hint(dst) ? ssw_proof_make_listening(s, fd) : -1;
	bool listening = proof >= 0;
	if (listening)
		SSW_DEBUG("fd %d: connect %s: a listening proof (the acceptor checks our address)", fd, ssw_addr_str(addr));
	/* a root acceptor looks at the socket the request names: ours, while
	 * the application holds it (after a close, the proof below keeps the
	 * address held for the kernel's bind table) */
	priv.cfd = listening ? proof : fd;
	priv.cdomain = (uint16_t)family;
	struct ssw_ep *ep = NULL;
	int rc = provider_connect(p, dst, &priv, &ep);
	const char *note = ssw_diag_take_note(); /* also after a success: a squatter passed over */
	bool started = rc == 0 || rc == -EINPROGRESS;
	bool other = started && needs_proof(p, ep);
	if (other)
		ssw_proof_learn(dst, true);
	/* kept while the acceptor may check it: another user's listener, or
	 * one whose workers changed user (the hint came from their INIT); a
	 * listener of our own user checks nothing, and costs no duplicate */
	if (started && other && !listening)
		proof = ssw_proof_make(fd);
	if (started && (other || listening)) {
		s->proof_fd = proof;
	} else {
		if (proof >= 0)
			sys_close(proof);
		ssw_proof_undo(s, fd);
	}
	if (!started) {
		ssw_sock_put(s);
		if (final_error(rc))
			return rc;
		if (rc == -ENOENT)
			note_refused(p, dst, t0);
		if (note)
			return kernel(d, "%s", note);
		return kernel(d, "%s", rc == -ENOENT ? "no switched listener" : strerror(-rc));
	}
	s->cep = ep;
	*out = s;
	return 0;
}

/* A pending provider connect's wait (common/waitpol.h).  A provider that
 * answers later: its reply comes within microseconds, and a wake-up of ours
 * would cost more than a short spin (not learnt: 100 us each time); then
 * sleeps on its fd, looking every 100 ms whatever it says. */
static const struct ssw_waitcfg connect_wait = { .start_ns = 100000, .nap_min_ms = 100, .nap_max_ms = 100 };

struct connect_waiter {
	struct ssw_waiter w;
	struct ssw_sock *s;
	struct pollfd q;
	int rc;       /* connect_complete's last answer */
	bool ask;     /* ask the provider at the next look, whatever its fd says */
	bool spun;    /* the spin is over (asked once after it) */
};

/* The provider's answer: 1 connected (the session made), 0 pending, or
 * -errno (the provider failed).  While spinning, it asks the provider only
 * when its fd says something came; at the spin's end and after each sleep
 * it asks anyway (a provider may need the call to make progress). */
static int connect_look(struct ssw_waiter *w)
{
	struct connect_waiter *cw = (struct connect_waiter *)w;
	struct ssw_sock *s = cw->s;
	const struct ssw_provider *p = s->prov;
	if (!cw->ask && sys_poll(&cw->q, 1, 0) == 0)
		return 0;
	cw->ask = false;
	cw->q = (struct pollfd){ .fd = p->conn->connect_fd(s->cep), .events = POLLIN };
	uint8_t reply[SSW_SESSION_INIT_BYTES];
	size_t rlen = sizeof reply;
	int rc = p->conn->connect_complete(s->cep, reply, &rlen);
	if (rc == 0) {
		ssw_fork_guard_enter();
		s->sess = ssw_session_connected(p, s->cep, &s->opts, reply, rlen);
		ssw_fork_guard_leave();
		if (!s->sess)
			rc = -EPROTO;
	}
	cw->rc = rc;
	return rc == 0 ? 1 : rc == -EINPROGRESS ? 0 : rc;
}

static int connect_sleep(struct ssw_waiter *w, int64_t ns)
{
	struct connect_waiter *cw = (struct connect_waiter *)w;
	cw->ask = true;
	if (!cw->spun) {
		cw->spun = true;
		return SSW_WAIT_LOOK;
	}
	int r = sys_poll(&cw->q, 1, ssw_wait_ms(ns));
	return r > 0 ? SSW_WAIT_WOKEN : SSW_WAIT_TIMEDOUT; /* an error: look, then sleep again */
}

/* Drive a pending provider connect and session negotiation, waiting up to
 * wait_ms (0: not at all, <0: no bound).
 * Returns 0 when connected, -EINPROGRESS while pending, or another -errno:
 * the provider failed (the caller falls back, or reports a final error). */
static int progress(struct ssw_sock *s, int wait_ms)
{
	const struct ssw_provider *p = s->prov;
	uint64_t now = ssw_now_ns();
	struct connect_waiter cw = {
		.w = { .ready = connect_look, .sleep = connect_sleep, .peer_cpu = -1 },
		.s = s,
		.rc = -EINPROGRESS,
		.ask = true,
	};
	int r = ssw_wait(NULL, &connect_wait, wait_ms >= 0 ? now + (uint64_t)wait_ms * 1000000ull : 0, &cw.w);
	if (r == -ETIMEDOUT && cw.rc == -EINPROGRESS) /* the deadline, not the provider */
		return wait_ms == 0 ? -EINPROGRESS : -ETIMEDOUT;
	if (cw.rc != 0)
		return cw.rc;
	s->cep = NULL;
	s->state = SSW_ST_CONNECTED;
	atomic_fetch_add(&ssw_counters.switched, 1);
	SSW_INFO("fd %d: connected to %s over %s", s->fd, ssw_addr_str((struct sockaddr *)&s->peer), p->name);
	return 0;
}

/* The provider attempt ends: its endpoint and any session go. */
static void let_go(struct ssw_sock *s)
{
	if (s->sess) {
		ssw_session_close(s->sess, true);
		s->sess = NULL;
	}
	if (s->cep) {
		s->prov->conn->close(s->cep, SSW_CLOSE_ABORT);
		s->cep = NULL;
	}
}

int ssw_setup_connect_poll(struct ssw_sock *s, int wait_ms, struct ssw_setup_decision *d)
{
	if (s->state != SSW_ST_CONNECTING)
		return 0;
	int rc = progress(s, wait_ms);
	if (rc == 0 || rc == -EINPROGRESS)
		return rc;
	let_go(s);
	if (final_error(rc))
		return rc;
	if (rc == -ENOENT)
		note_refused(s->prov, &s->pdst, s->connect_t0);
	snprintf(d->buf, sizeof d->buf, "provider connect failed: %s", strerror(-rc));
	d->why = d->buf;
	d->rule = NULL;
	return SSW_SETUP_KERNEL;
}

void ssw_setup_connect_undo(struct ssw_sock *s, int fd)
{
	ssw_proof_undo(s, fd);
}
