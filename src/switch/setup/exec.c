/* exec.c — a switched listener across exec: socket activation (a supervisor
 * listens, then execs the server, which takes fd 3), inetd-style launchers,
 * and binary upgrades (a server re-execs itself keeping its listeners).
 *
 * The kernel listening socket survives the exec; the switch's state does
 * not.  So before an exec, each listener the new program inherits hands the
 * new image what its providers need to go on serving it (listener_export:
 * shm's rendezvous listener and handback pair, with the requests waiting in
 * them), kept open across the exec and named in the new image's
 * environment:
 *
 *     SOCKSWITCH_INHERIT=<fd>/<provider>/<version>/<a|4>/<fd>,<fd>,...;...
 *
 * (a: the listener's own address, 4: the IPv4 wildcard beside a dual-stack
 * one).  At load, the new image takes them back (listener_import), checking
 * every descriptor (they come through the environment), listens afresh on
 * the providers that cannot be kept (fabric), and the socket is switched
 * again before the program's first accept: a request made before the exec
 * is accepted after it, none is reset. */
#include "switch/setup/setup_priv.h"

#include "common/log.h"
#include "common/sys.h"
#include "switch/route/providers.h"
#include "switch/sock/addr.h"
#include "switch/switch.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP_FDS 8 /* per provider listener */

bool ssw_setup_exec_keep(int fd, struct ssw_exec_keep *k)
{
	int fl = sys_fcntl(fd, F_GETFD, 0);
	if (fl < 0 || k->n >= SSW_EXEC_KEEP_MAX)
		return false;
	if ((fl & FD_CLOEXEC) && sys_fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) < 0)
		return false;
	if (fl & FD_CLOEXEC)
		k->fd[k->n++] = fd;
	return true;
}

void ssw_setup_exec_undo(struct ssw_exec_keep *k)
{
	for (int i = 0; i < k->n; i++)
		(void)sys_fcntl(k->fd[i], F_SETFD, FD_CLOEXEC);
	k->n = 0;
	for (int i = 0; i < k->nmade; i++)
		sys_close(k->made[i]);
	k->nmade = 0;
}

int ssw_setup_exec_export(struct ssw_sock *s, int fd, char *buf, size_t len, struct ssw_exec_keep *k)
{
	size_t used = strlen(buf);
	int n = 0;
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->npl; i++) {
		const struct ssw_plisten *pl = &s->pl[i];
		const struct ssw_conn_ops *c = pl->prov->conn;
		int fds[KEEP_FDS], nf;
		if (!(pl->prov->caps & SSW_CAP_SHARED_CONTEXT) || !c->listener_export ||
		    (nf = c->listener_export(pl->l, fds, KEEP_FDS)) <= 0)
			continue;
		char e[160];
		size_t el = (size_t)snprintf(e, sizeof e, "%d/%s/%u/%c/", fd, pl->prov->name, pl->proto, pl->any4 ? '4' : 'a');
		bool ok = true;
		for (int j = 0; j < nf && ok && el < sizeof e; j++) {
			ok = ssw_setup_exec_keep(fds[j], k);
			el += (size_t)snprintf(e + el, sizeof e - el, "%s%d", j ? "," : "", fds[j]);
		}
		if (!ok || el + 2 >= sizeof e || used + el + 2 >= len)
			continue; /* its descriptors close at the exec: that provider's requests are reset */
		used += (size_t)snprintf(buf + used, len - used, "%s;", e);
		n++;
	}
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* ---- in the new image ------------------------------------------------------ */

struct entry {
	int fd, prov, nf, fds[KEEP_FDS];
	uint32_t proto;
	bool any4;
};

static bool parse_entry(const char *e, struct entry *o)
{
	char prov[32], slot;
	int used = 0;
	unsigned proto;
	if (sscanf(e, "%d/%31[a-z0-9]/%u/%c/%n", &o->fd, prov, &proto, &slot, &used) != 4 || !used ||
	    (slot != 'a' && slot != '4') || o->fd < 0)
		return false;
	o->prov = ssw_registry_find(prov, strlen(prov));
	o->proto = proto;
	o->any4 = slot == '4';
	o->nf = 0;
	const char *p = e + used;
	while (*p && *p != ';' && o->nf < KEEP_FDS) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 0 || v > 1 << 30)
			return false;
		o->fds[o->nf++] = (int)v;
		p = *end == ',' ? end + 1 : end;
	}
	return o->prov >= 0 && o->nf > 0 && (*p == ';' || !*p);
}

/* The inherited fd is a listening TCP socket: its family and address. */
static bool tcp_listener(int fd, int *dom, struct sockaddr_storage *name, socklen_t *nl)
{
	int v = 0;
	socklen_t l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || !v)
		return false;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return false;
	l = sizeof *dom;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, dom, &l) < 0 || (*dom != AF_INET && *dom != AF_INET6))
		return false;
	*nl = sizeof *name;
	return sys_getsockname(fd, (struct sockaddr *)name, nl) == 0;
}

static void close_entry(const struct entry *e)
{
	for (int i = 0; i < e->nf; i++)
		sys_close(e->fds[i]);
}

/* One inherited listener: its entries (those of fd) imported, the other
 * providers its routes give it listened on afresh; how: for the log. */
static bool adopt(int fd, struct entry *es, int ne, const char *how)
{
	int dom;
	struct sockaddr_storage name, a;
	socklen_t nl;
	struct ssw_sock *s = NULL;
	if (tcp_listener(fd, &dom, &name, &nl) && !ssw_fdtab_any(&fd, 1)) {
		ssw_addr_listener(&name, nl, &a);
		s = ssw_sock_new(SSW_ST_LISTENING, fd, dom);
	}
	int v6only = 1;
	socklen_t vl = sizeof v6only;
	bool dual = s && dom == AF_INET6 && ssw_addr_is_wildcard(&a) &&
		    sys_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &vl) == 0 && !v6only;
	for (int i = 0; i < ne; i++) {
		struct entry *e = &es[i];
		const struct ssw_provider *p = s ? ssw_provider_for(e->prov) : NULL;
		struct ssw_listener *l = NULL;
		struct sockaddr_storage at = a;
		if (e->any4) {
			memset(&at, 0, sizeof at);
			at.ss_family = AF_INET;
			ssw_addr_set_port(&at, ssw_addr_port(&a));
		}
		if (!p || !p->conn->listener_import || s->npl >= SSW_MAX_PLISTEN || e->proto < SSW_PROTO_MIN ||
		    e->proto > SSW_PROTO_MAX || (e->any4 && !dual) ||
		    p->conn->listener_import((struct sockaddr *)&at, ssw_addr_len(&at), e->proto, e->fds, e->nf, &l) < 0) {
			SSW_WARN_ONCE("fd %d: a listener inherited across exec: its %s descriptors are not what they "
				      "should be (closed)", fd, p ? p->name : "provider");
			close_entry(e);
			continue;
		}
		for (int j = 0; j < e->nf; j++)
			(void)sys_fcntl(e->fds[j], F_SETFD, FD_CLOEXEC);
		s->pl[s->npl++] = (struct ssw_plisten){ .prov = p, .l = l, .proto = e->proto, .any4 = e->any4 };
	}
	if (!s)
		return false;
	ssw_sock_load_opts(s, fd);
	s->lopts = s->opts;
	s->v6only = dom == AF_INET6 && ssw_addr_is_wildcard(&a) && !dual;
	char names[96];
	const char *note = NULL;
	int kept = s->npl;
	(void)ssw_setup_listen(s, &a, dual, 128, names, sizeof names, &note); /* the providers not kept */
	s->local = name;
	s->local_len = nl;
	s->lbacklog = 128;
	s->ldual = dual;
	if (!s->npl) {
		ssw_sock_put(s);
		return false;
	}
	ssw_fdtab_set(fd, s);
	SSW_INFO("fd %d: listener %s: %s (%d provider listener(s) kept%s)", fd, how,
		 ssw_addr_str((struct sockaddr *)&a), kept, names);
	ssw_sock_put(s);
	return true;
}

bool ssw_setup_listener_received(int fd)
{
	int v = 0;
	socklen_t l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || !v)
		return false;
	return adopt(fd, NULL, 0, "received over SCM_RIGHTS");
}

void ssw_setup_exec_import(const char *spec)
{
	struct entry es[SSW_MAX_PLISTEN * 4];
	int ne = 0;
	for (const char *p = spec; p && *p && ne < (int)(sizeof es / sizeof es[0]);) {
		if (*p == 'c')
			; /* a connection's (share/handover.c) */
		else if (parse_entry(p, &es[ne]))
			ne++;
		else
			SSW_WARN_ONCE("SOCKSWITCH_INHERIT: an entry is malformed (ignored): %.60s", p);
		const char *semi = strchr(p, ';');
		p = semi ? semi + 1 : NULL;
	}
	/* entries of one listener together, in the order they came */
	bool done[SSW_MAX_PLISTEN * 4] = { false };
	for (int i = 0; i < ne; i++) {
		if (done[i])
			continue;
		struct entry group[SSW_MAX_PLISTEN];
		int ng = 0;
		for (int j = i; j < ne; j++)
			if (!done[j] && es[j].fd == es[i].fd && ng < SSW_MAX_PLISTEN) {
				group[ng++] = es[j];
				done[j] = true;
			}
		(void)adopt(es[i].fd, group, ng, "inherited across exec");
	}
}
