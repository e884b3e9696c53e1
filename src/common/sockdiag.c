/* sockdiag.c — the kernel's word on TCP sockets (owner, address) through
 * NETLINK_SOCK_DIAG, for the rendezvous checks (shm_conn.c, listen.c).
 *
 * One dump per family, filtered in the kernel on the local port (inet_diag
 * bytecode), on a netlink socket opened for the question: the application
 * may close or dup2 over any descriptor kept between calls, and a forked
 * child must not read its parent's replies.  Nothing is cached: a port can
 * change owners between two connects. */
#include "common/sockdiag.h"

#include "common/sys.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Linux >= 6.8 dumps sockets that are bound but neither connected nor
 * listening under this pseudo-state (include/net/tcp_states.h). */
#define DIAG_BOUND_INACTIVE 13
#define DIAG_LISTEN 10 /* TCP_LISTEN */

/* An address reduced to what compares: 4 bytes for IPv4 (v4-mapped
 * included), 16 for IPv6. */
struct naddr {
	int fam;
	uint8_t a[16];
};

static void naddr_from_diag(int fam, const uint32_t *src, struct naddr *o)
{
	memset(o, 0, sizeof *o);
	const uint8_t *b = (const uint8_t *)src;
	if (fam == AF_INET6 && IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)src)) {
		o->fam = AF_INET;
		memcpy(o->a, b + 12, 4);
	} else {
		o->fam = fam;
		memcpy(o->a, b, fam == AF_INET ? 4 : 16);
	}
}

static uint16_t naddr_from_ss(const struct sockaddr_storage *s, struct naddr *o)
{
	memset(o, 0, sizeof *o);
	if (s->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)s;
		o->fam = AF_INET;
		memcpy(o->a, &in->sin_addr, 4);
		return ntohs(in->sin_port);
	}
	const struct sockaddr_in6 *in6 = (const void *)s;
	naddr_from_diag(AF_INET6, (const uint32_t *)&in6->sin6_addr, o);
	return ntohs(in6->sin6_port);
}

static bool naddr_eq(const struct naddr *x, const struct naddr *y)
{
	return x->fam == y->fam && memcmp(x->a, y->a, 16) == 0;
}

/* A socket bound to `bound` holds `want` for kernel TCP's connect: the same
 * address, or the wildcard of its family, or IPv6's wildcard when it is not
 * v6-only (a v6-only [::]:P does not hold IPv4 P: another user may).
 * Nobody else binds that address and port while it is held (but the same
 * user, with SO_REUSEADDR). */
static bool naddr_holds(const struct naddr *bound, bool v6only, const struct naddr *want)
{
	static const uint8_t zero[16];
	if (naddr_eq(bound, want))
		return true;
	return memcmp(bound->a, zero, 16) == 0 &&
	       (bound->fam == want->fam || (bound->fam == AF_INET6 && want->fam == AF_INET && !v6only));
}

/* One socket of a dump, with the attributes the checks need. */
struct diag_sock {
	int family; /* of the socket itself */
	struct naddr src;
	uint16_t sport;
	uid_t uid;
	uint32_t ino;
	bool nonlocal; /* IP_FREEBIND or IP_TRANSPARENT */
	bool v6only;   /* IPV6_V6ONLY (or not said) */
};

typedef void (*diag_fn)(const struct diag_sock *ds, void *arg);

static void parse_attrs(const struct inet_diag_msg *m, size_t len, struct diag_sock *ds)
{
	const struct nlattr *a = (const void *)((const char *)m + NLMSG_ALIGN(sizeof *m));
	size_t left = len > NLMSG_ALIGN(sizeof *m) ? len - NLMSG_ALIGN(sizeof *m) : 0;
	while (left >= sizeof *a && a->nla_len >= sizeof *a && a->nla_len <= left) {
		const uint8_t *p = (const uint8_t *)a + NLA_HDRLEN;
		size_t plen = a->nla_len - NLA_HDRLEN;
		int type = a->nla_type & NLA_TYPE_MASK;
		if (type == INET_DIAG_SOCKOPT && plen >= sizeof(struct inet_diag_sockopt)) {
			struct inet_diag_sockopt so;
			memcpy(&so, p, sizeof so);
			ds->nonlocal = so.freebind || so.transparent;
		}
		if (type == INET_DIAG_SKV6ONLY && plen >= 1)
			ds->v6only = p[0] != 0;
		size_t step = NLA_ALIGN(a->nla_len);
		if (step >= left)
			break;
		left -= step;
		a = (const void *)((const char *)a + step);
	}
}

/* Dump the TCP sockets of one family in `states` with local port `port`.
 * 0 when the dump completed, else -errno. */
static int dump(int nl, int family, uint32_t states, uint16_t port, diag_fn fn, void *arg)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
		struct nlattr bc;
		struct inet_diag_bc_op op[2];
	} req;
	memset(&req, 0, sizeof req);
	req.nlh.nlmsg_len = sizeof req;
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	req.nlh.nlmsg_seq = (uint32_t)family;
	req.r.sdiag_family = (uint8_t)family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = states;
	req.bc.nla_type = INET_DIAG_REQ_BYTECODE;
	req.bc.nla_len = NLA_HDRLEN + sizeof req.op;
	/* sport == port: on a match jump to the end (accept), else past it (reject) */
	req.op[0] = (struct inet_diag_bc_op){ INET_DIAG_BC_S_EQ, sizeof req.op, sizeof req.op + 4 };
	req.op[1] = (struct inet_diag_bc_op){ 0, 0, port };
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	struct iovec iov = { &req, sizeof req };
	struct msghdr mh = { .msg_name = &k, .msg_namelen = sizeof k, .msg_iov = &iov, .msg_iovlen = 1 };
	if (sys_sendmsg(nl, &mh, 0) < 0)
		return -errno;
	union {
		char b[16384];
		struct nlmsghdr align;
	} buf;
	for (int rounds = 0; rounds < 4096; rounds++) {
		ssize_t n = SYS_(recvfrom, nl, buf.b, sizeof buf.b, 0, NULL, NULL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (struct nlmsghdr *h = &buf.align; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);
				return h->nlmsg_len >= NLMSG_LENGTH(sizeof *e) && e->error ? e->error : -EPROTO;
			}
			if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
				continue;
			const struct inet_diag_msg *m = NLMSG_DATA(h);
			struct diag_sock ds = { .family = m->idiag_family, .uid = m->idiag_uid, .ino = m->idiag_inode,
						.sport = ntohs(m->id.idiag_sport), .v6only = true };
			if (m->idiag_family != AF_INET && m->idiag_family != AF_INET6)
				continue;
			naddr_from_diag(m->idiag_family, m->id.idiag_src, &ds.src);
			parse_attrs(m, h->nlmsg_len - NLMSG_LENGTH(0), &ds);
			if (ds.sport == port)
				fn(&ds, arg);
		}
	}
	return -EIO;
}

static int nl_open(void)
{
	int nl = sys_socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	return nl < 0 ? -errno : nl;
}

/* One family (AF_UNSPEC: both; an AF_INET6 socket may hold an IPv4
 * address, v4-mapped).  Each dump walks a whole kernel table. */
static int dump_fams(int family, uint32_t states, uint16_t port, diag_fn fn, void *arg)
{
	int nl = nl_open();
	if (nl < 0)
		return nl;
	int rc = 0;
	if (family != AF_INET6)
		rc = dump(nl, AF_INET, states, port, fn, arg);
	if (rc == 0 && family != AF_INET)
		rc = dump(nl, AF_INET6, states, port, fn, arg);
	sys_close(nl);
	return rc;
}

/* ---- listeners --------------------------------------------------------- */

/* The kernel's own lookup: a request for one socket (no dump) runs the
 * lookup a segment from `any:0` to dst would get on lo (established
 * sockets first, none can match a peer 0.0.0.0:0; then the listeners: the
 * exact address, the wildcard, dual-stack IPv6 sockets, device binds,
 * SO_REUSEPORT groups, whose members share one owner) and describes the
 * socket it finds, with its IP_FREEBIND/IP_TRANSPARENT bits (the kernel
 * adds INET_DIAG_SOCKOPT to every reply). */
int ssw_diag_listener(const struct sockaddr_storage *dst, struct ssw_diag_listener *out)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	struct naddr d;
	uint16_t port = naddr_from_ss(dst, &d);
	memset(&req, 0, sizeof req);
	req.nlh.nlmsg_len = sizeof req;
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = (uint8_t)d.fam;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	req.r.id.idiag_sport = htons(port);
	req.r.id.idiag_if = 1; /* lo: local destinations are reached through it */
	req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	memcpy(req.r.id.idiag_src, d.a, d.fam == AF_INET ? 4 : 16);
	int nl = nl_open();
	if (nl < 0)
		return nl;
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	union {
		char b[4096];
		struct nlmsghdr align;
	} buf;
	int rc = -EPROTO;
	ssize_t n = 0;
	if (SYS_(sendto, nl, &req, sizeof req, 0, &k, sizeof k) < 0)
		rc = -errno;
	else {
		do
			n = SYS_(recvfrom, nl, buf.b, sizeof buf.b, 0, NULL, NULL);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			rc = -errno;
	}
	sys_close(nl);
	struct nlmsghdr *h = &buf.align;
	if (n <= 0 || !NLMSG_OK(h, (size_t)n))
		return rc;
	if (h->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(h);
		return h->nlmsg_len >= NLMSG_LENGTH(sizeof *e) && e->error ? e->error : -EPROTO;
	}
	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
		return -EPROTO;
	const struct inet_diag_msg *m = NLMSG_DATA(h);
	if (m->idiag_state != DIAG_LISTEN || ntohs(m->id.idiag_sport) != port)
		return -ENOENT;
	struct diag_sock ds = { .uid = m->idiag_uid };
	struct naddr src;
	naddr_from_diag(m->idiag_family, m->id.idiag_src, &src);
	parse_attrs(m, h->nlmsg_len - NLMSG_LENGTH(0), &ds);
	out->uid = m->idiag_uid;
	out->exact = naddr_eq(&src, &d);
	out->nonlocal = ds.nonlocal;
	return 0;
}

int ssw_diag_listener_uid(const struct sockaddr_storage *dst, uid_t *uid)
{
	struct ssw_diag_listener l;
	int rc = ssw_diag_listener(dst, &l);
	if (rc == 0)
		*uid = l.uid;
	return rc;
}

/* ---- bound sockets ----------------------------------------------------- */

struct bound_q {
	struct naddr addr;
	uid_t uid;
	uint32_t ino; /* the probe's own socket, else 0 */
	bool found, seen_probe;
};

static void bound_one(const struct diag_sock *ds, void *arg)
{
	struct bound_q *q = arg;
	if (q->ino) {
		q->seen_probe |= ds->ino == q->ino;
		return;
	}
	if (naddr_holds(&ds->src, ds->v6only, &q->addr) && ds->uid == q->uid && !ds->nonlocal)
		q->found = true;
}

/* Does this kernel dump bound-only sockets?  Asked once, of a socket of our
 * own (bound with IP_FREEBIND: lo may be down). */
static int bound_dump_works(void)
{
	static _Atomic int known; /* 0 unknown, 1 yes, -1 no */
	int k = atomic_load(&known);
	if (k)
		return k;
	int fd = sys_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;
	struct stat st;
	struct bound_q q = { 0 };
	if (sys_setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof one) == 0 &&
	    sys_bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && sys_getsockname(fd, (struct sockaddr *)&a, &al) == 0 &&
	    fstat(fd, &st) == 0) {
		q.ino = (uint32_t)st.st_ino;
		int nl = nl_open();
		if (nl >= 0) {
			dump(nl, AF_INET, 1u << DIAG_BOUND_INACTIVE, ntohs(a.sin_port), bound_one, &q);
			sys_close(nl);
		}
	}
	sys_close(fd);
	k = q.seen_probe ? 1 : -1;
	atomic_store(&known, k);
	return k;
}

int ssw_diag_bound_by(const struct sockaddr_storage *addr, int domain, uid_t uid)
{
	struct bound_q q = { .uid = uid };
	uint16_t port = naddr_from_ss(addr, &q.addr);
	if (domain != AF_INET && domain != AF_INET6)
		domain = AF_UNSPEC;
	if (q.addr.fam == AF_INET6)
		domain = AF_INET6; /* an IPv4 socket holds no IPv6 address */
	int rc = dump_fams(domain, 1u << DIAG_BOUND_INACTIVE, port, bound_one, &q);
	if (rc < 0)
		return rc;
	if (q.found)
		return 0;
	return bound_dump_works() > 0 ? -ENOENT : -EOPNOTSUPP;
}

/* ---- one descriptor of another process -------------------------------- */

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71
#endif

/* The network namespace a socket lives in, as the kernel names it (Linux
 * >= 5.14; no privilege needed, unlike SIOCGSKNS). */
static int netns_cookie(int fd, uint64_t *c)
{
	socklen_t l = sizeof *c;
	return sys_getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, c, &l) == 0 && l == sizeof *c ? 0 : -1;
}

/* A socket that holds its address as kernel TCP would connect from it: a
 * TCP socket of the internet families, in the namespace of ref_fd, bound
 * without IP_FREEBIND/IP_TRANSPARENT (the same inet bits for IPv6). */
static bool fd_is_plain_tcp_here(int f, int ref_fd)
{
	int v = 0;
	socklen_t l = sizeof v;
	uint64_t mine, theirs;
	if (sys_getsockopt(f, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_STREAM)
		return false;
	l = sizeof v;
	if (sys_getsockopt(f, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return false;
	if (netns_cookie(f, &theirs) < 0 || netns_cookie(ref_fd, &mine) < 0 || theirs != mine)
		return false;
	static const int nonlocal[2] = { IP_FREEBIND, IP_TRANSPARENT };
	for (int i = 0; i < 2; i++) {
		l = sizeof v;
		if (sys_getsockopt(f, SOL_IP, nonlocal[i], &v, &l) < 0 || v)
			return false;
	}
	return true;
}

int ssw_diag_fd_bound(pid_t pid, int fd, const struct sockaddr_storage *addr, uid_t uid, int ref_fd)
{
	if (pid <= 0 || fd < 0)
		return -EINVAL;
	int pfd = (int)SYS_(pidfd_open, pid, 0);
	if (pfd < 0)
		return -errno;
	int f = (int)SYS_(pidfd_getfd, pfd, fd, 0);
	int rc = f < 0 ? -errno : 0;
	sys_close(pfd);
	if (rc < 0)
		return rc;
	struct sockaddr_storage a;
	socklen_t al = sizeof a;
	struct stat st;
	struct naddr got, want;
	rc = -ENOENT;
	int v6only = 1;
	socklen_t vl = sizeof v6only;
	if (fstat(f, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == uid && fd_is_plain_tcp_here(f, ref_fd) &&
	    sys_getsockname(f, (struct sockaddr *)&a, &al) == 0 && (a.ss_family == AF_INET || a.ss_family == AF_INET6) &&
	    (a.ss_family == AF_INET || sys_getsockopt(f, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl) == 0) &&
	    naddr_from_ss(&a, &got) == naddr_from_ss(addr, &want) && naddr_holds(&got, v6only != 0, &want))
		rc = 0;
	sys_close(f);
	return rc;
}

bool ssw_diag_fd_nonlocal(int fd)
{
	int v = 0;
	socklen_t l = sizeof v;
	if (sys_getsockopt(fd, SOL_IP, IP_FREEBIND, &v, &l) == 0 && v)
		return true;
	l = sizeof v;
	return sys_getsockopt(fd, SOL_IP, IP_TRANSPARENT, &v, &l) == 0 && v;
}

int ssw_diag_unix_alive(uint64_t ino)
{
	int nl = nl_open();
	if (nl < 0)
		return nl;
	struct {
		struct nlmsghdr nh;
		struct unix_diag_req r;
	} req = {
		.nh = { .nlmsg_len = sizeof req, .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST },
		.r = { .sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_ino = (uint32_t)ino,
		       .udiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } },
	};
	int rc = -EIO;
	union {
		struct nlmsghdr nh;
		char b[1024];
	} resp;
	if (ino > UINT32_MAX)
		rc = -EINVAL;
	else if (SYS_(sendto, nl, &req, sizeof req, 0, NULL, 0) == (long)sizeof req) {
		long n = SYS_(recvfrom, nl, &resp, sizeof resp, 0, NULL, 0);
		if (n >= (long)sizeof(struct nlmsghdr) && resp.nh.nlmsg_type == SOCK_DIAG_BY_FAMILY)
			rc = 1;
		else if (n >= (long)(sizeof(struct nlmsghdr) + sizeof(int)) && resp.nh.nlmsg_type == NLMSG_ERROR) {
			int e = ((const struct nlmsgerr *)NLMSG_DATA(&resp.nh))->error;
			rc = e == -ENOENT ? 0 : e ? e : -EIO;
		}
	}
	sys_close(nl);
	return rc;
}

/* net.ipv4.ip_unprivileged_port_start of our namespace (it covers IPv6
 * too), read once: the first port any user may bind. */
int ssw_diag_unprivileged_port_start(void)
{
	static _Atomic int start;
	int s = atomic_load(&start);
	if (s)
		return s;
	char b[16] = "";
	int f = (int)SYS_(openat, AT_FDCWD, "/proc/sys/net/ipv4/ip_unprivileged_port_start", O_RDONLY | O_CLOEXEC);
	if (f >= 0) {
		(void)!sys_read(f, b, sizeof b - 1);
		sys_close(f);
	}
	s = atoi(b);
	if (s <= 0 || s > 65536)
		s = 1024; /* unreadable: the kernel's default */
	atomic_store(&start, s);
	return s;
}

/* ---- refusal notes ----------------------------------------------------- */

static __thread char note[96];
static __thread bool noted;

void ssw_diag_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(note, sizeof note, fmt, ap);
	va_end(ap);
	noted = true;
}

const char *ssw_diag_take_note(void)
{
	if (!noted)
		return NULL;
	noted = false;
	return note;
}
