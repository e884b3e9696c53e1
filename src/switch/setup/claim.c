/* claim.c — whose address a connector may claim: the acceptor reports what
 * the kernel backs (a plain TCP socket of the claiming user, in this
 * namespace, on a local address), or what the transport vouches for
 * (fabric), never the peer's word (README Security). */
#include "switch/setup/setup_priv.h"

#include "common/log.h"
#include "common/sockdiag.h"
#include "switch/sock/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Does this listener serve `server`, the address the connector says it
 * dialed (the accepted socket's name)?  A wildcard serves its own family,
 * and IPv4 too when it is a dual-stack IPv6 one: a v6-only listener on [::]
 * does not hold the IPv4 port (another user may hold it). */
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
	if (ssw_addr_is_wildcard(&a))
		return a.ss_family == server->ss_family || (a.ss_family == AF_INET6 && !ls->v6only);
	if (a.ss_family != server->ss_family)
		return false;
	if (a.ss_family == AF_INET)
		return ((struct sockaddr_in *)&a)->sin_addr.s_addr == ((const struct sockaddr_in *)server)->sin_addr.s_addr;
	return IN6_ARE_ADDR_EQUAL(&((struct sockaddr_in6 *)&a)->sin6_addr, &((const struct sockaddr_in6 *)server)->sin6_addr);
}

/* May a connector of this host claim `client` at all?  Kernel TCP connects
 * only from an address of the namespace (IP_FREEBIND lets a socket bind
 * 10.9.9.9, but its connect fails), never from the unspecified one. */
static bool claimable(const struct sockaddr_storage *client)
{
	struct sockaddr_storage n;
	if (ssw_addr_normalize((const struct sockaddr *)client, ssw_addr_len(client), &n) < 0 ||
	    memcmp(&n, client, ssw_addr_len(client)) != 0) /* the unspecified address (or v4-mapped) */
		return false;
	return ssw_addr_port(client) != 0 && ssw_addr_is_local((const struct sockaddr *)client, ssw_addr_len(client));
}

/* The connector's word on its own address is taken only when the kernel
 * backs it, as TCP's peer address comes from the kernel: the address is
 * one of this namespace's, and the connector's user holds a plain TCP
 * socket (no IP_FREEBIND, no IP_TRANSPARENT, in this namespace) bound to
 * exactly that address (the switch binds every connecting socket: connect.c
 * bind_local).  Seen as the connector's listening proof (proof.c: the
 * kernel's lookup of a listener, 9 us; exactly on that address, not a
 * wildcard), in the socket the connector names (its fd, taken with
 * pidfd_getfd: a root server), else in the kernel's list of bound sockets
 * of this namespace (sock_diag; a walk of the bind table, 1.5 ms on this
 * VM).  A port below net.ipv4.ip_unprivileged_port_start needs a socket of
 * root's: the kernel let another user bind it only in a namespace of its
 * own, or with a capability the socket's owner does not show.
 * A connector of our own user is not asked: it could read our memory
 * anyway.  A refused request is dropped; a genuine connector is not refused
 * (connect.c falls back to kernel TCP first when its socket belongs to
 * another user or holds an address it could not prove). */
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
	if (!claimable(client))
		return -EADDRNOTAVAIL;
	if (ssw_addr_port(client) < ssw_diag_unprivileged_port_start() && *uid != 0)
		return -EACCES;
	/* a listening proof (proof.c): the kernel's O(1) lookup finds a socket
	 * of that user listening on the claimed address, which only that user
	 * can hold while the proof is there */
	struct ssw_diag_listener dl;
	*ask_proof = true; /* unless the connector's descriptor answers (a root server) */
	if (ssw_diag_listener(client, &dl) == 0 && dl.uid == *uid && dl.exact && !dl.nonlocal) {
		SSW_DEBUG("fd %d: %s (uid %u) proven by its listening proof", ls->fd,
			  ssw_addr_str((const struct sockaddr *)client), (unsigned)*uid);
		return 0;
	}
	if (ssw_diag_fd_bound(pid, cfd, client, *uid, ls->fd) == 0) {
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
bool ssw_claim_ok(struct ssw_sock *ls, const struct ssw_provider *p, struct ssw_ep *ep,
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

