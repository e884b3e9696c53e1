/* listen.c — a listening socket's provider halves: a switched listener
 * listens on the kernel socket (the fd layer's) and on every provider that
 * its routes could deliver to its address, under each protocol version the
 * switch speaks.  A provider connect is one trip (the request waits in the
 * provider's backlog like a SYN in the kernel's), so nothing has to answer
 * before the application calls accept (seed 001). */
#include "switch/setup/setup_priv.h"

#include "common/log.h"
#include "common/sockdiag.h"
#include "common/sys.h"
#include "switch/route/providers.h"
#include "switch/sock/addr.h"
#include "switch/switch.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static bool have(const struct ssw_sock *s, const struct ssw_provider *p, uint32_t v, bool any4)
{
	for (int i = 0; i < s->npl; i++)
		if (s->pl[i].prov == p && s->pl[i].proto == v && s->pl[i].any4 == any4)
			return true;
	return false;
}

/* One provider listener per provider, family (a dual-stack wildcard has an
 * IPv4 one beside) and protocol version; none where one is there already
 * (kept across exec: exec.c). */
static void listen_one(struct ssw_sock *s, const struct ssw_provider *p, const struct sockaddr_storage *a, bool any4,
		       int backlog)
{
	for (uint32_t v = SSW_PROTO_MIN; v <= SSW_PROTO_MAX && s->npl < SSW_MAX_PLISTEN; v++)
		if (!have(s, p, v, any4) &&
		    p->conn->listen((const struct sockaddr *)a, ssw_addr_len(a), backlog, v, &s->pl[s->npl].l) == 0) {
			s->pl[s->npl].prov = p;
			s->pl[s->npl].proto = v;
			s->pl[s->npl].any4 = any4;
			s->npl++;
		}
}

/* private_only: only providers without shared context (reopen_private) */
static int listen_on(struct ssw_sock *s, const struct sockaddr_storage *a, bool dual, int backlog, char *names,
		     size_t nlen, bool private_only)
{
	/* A listener is reachable through whatever serves its address; a
	 * wildcard one through whatever serves any address of this host (shm
	 * for local peers and fabric for remote ones, at once). */
	int targets[SSW_REGISTRY_MAX], nt;
	if (ssw_addr_is_wildcard(a)) {
		nt = ssw_route_local_targets(&ssw_routes_table, a->ss_family == AF_INET || dual, a->ss_family == AF_INET6,
					     targets, SSW_REGISTRY_MAX);
	} else {
		ssw_route_lookup(&ssw_routes_table, (const struct sockaddr *)a, ssw_addr_len(a), &targets[0]);
		nt = targets[0] != SSW_TARGET_TCP;
	}
	struct sockaddr_storage any4;
	memset(&any4, 0, sizeof any4);
	any4.ss_family = AF_INET;
	ssw_addr_set_port(&any4, ssw_addr_port(a));
	size_t nn = 0;
	int np = 0;
	if (nlen)
		names[0] = '\0';
	for (int i = 0; i < nt; i++) {
		const struct ssw_provider *p = ssw_provider_for(targets[i]);
		if (!p || (private_only && (p->caps & SSW_CAP_SHARED_CONTEXT)))
			continue;
		np++;
		int before = s->npl;
		listen_one(s, p, a, false, backlog);
		if (dual)
			listen_one(s, p, &any4, true, backlog);
		if (s->npl > before && nn < nlen)
			nn += (size_t)snprintf(names + nn, nlen - nn, " + %s", p->name);
	}
	return np;
}

int ssw_setup_listen(struct ssw_sock *s, const struct sockaddr_storage *a, bool dual, int backlog, char *names,
		     size_t nlen, const char **note)
{
	int np = listen_on(s, a, dual, backlog, names, nlen, false);
	*note = ssw_diag_take_note();
	return np ? s->npl : -1;
}

/* A process that dropped its copies of a listener's private provider
 * listeners at fork (share/fork.c: they cannot be shared) listens there
 * itself once it accepts or polls: each worker of a pre-forking server on
 * its own fabric listener, beside the others' on the same port (a
 * provider's listening sockets are SO_REUSEPORT, interpose/socket_api.c:
 * the kernel spreads the requests among those of the same user).  A
 * process that never accepts (the master) takes none, so none waits for
 * it.  Under s->lock. */
static void reopen_private(struct ssw_sock *s)
{
	if (!s->lreopen)
		return;
	s->lreopen = false;
	struct sockaddr_storage a;
	ssw_addr_listener(&s->local, s->local_len, &a);
	char names[64];
	int before = s->npl;
	(void)listen_on(s, &a, s->ldual, s->lbacklog, names, sizeof names, true);
	const char *note = ssw_diag_take_note();
	if (s->npl > before)
		SSW_INFO("fd %d: listening again on%s in this process (its copies went at fork)", s->fd, names);
	else if (note)
		snprintf(s->lnote, sizeof s->lnote, "%s", note);
}

bool ssw_setup_listener_ready(struct ssw_sock *s)
{
	struct pollfd pf[SSW_MAX_PLISTEN];
	int n = 0;
	bool ready = false;
	__atomic_store_n(&s->looked_by, ssw_pid(), __ATOMIC_RELAXED);
	pthread_mutex_lock(&s->lock);
	reopen_private(s);
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

int ssw_setup_listener_fds(struct ssw_sock *s, struct pollfd *pf, int n)
{
	int k = 0;
	pthread_mutex_lock(&s->lock); /* fork may close listeners (drop_private) */
	reopen_private(s);
	for (int i = 0; i < s->npl && k < n; i++)
		pf[k++] = (struct pollfd){ .fd = s->pl[i].prov->conn->listener_fd(s->pl[i].l), .events = POLLIN };
	pthread_mutex_unlock(&s->lock);
	return k;
}

bool ssw_setup_listener_has_private(const struct ssw_sock *s)
{
	for (int i = 0; i < s->npl; i++)
		if (!(s->pl[i].prov->caps & SSW_CAP_SHARED_CONTEXT))
			return true;
	return false;
}

int ssw_setup_listener_drop_all(struct ssw_sock *s)
{
	int n = s->npl;
	for (int i = 0; i < n; i++)
		s->pl[i].prov->conn->listener_close(s->pl[i].l);
	s->npl = 0;
	return n;
}

int ssw_setup_listener_drop_private(struct ssw_sock *s, char *names, size_t len)
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
		s->lreopen = true;
		if (names && used < len && !strstr(names, p->name))
			used += (size_t)snprintf(names + used, len - used, "%s%s", used ? ", " : "", p->name);
	}
	s->npl = k;
	return dropped;
}

int ssw_setup_wait_fds(struct ssw_sock *s, struct pollfd *pf, int n)
{
	if (s->state == SSW_ST_LISTENING)
		return ssw_setup_listener_fds(s, pf, n);
	struct ssw_ep *cep = s->cep;
	if (s->state == SSW_ST_CONNECTING && cep) {
		if (n < 1)
			return 0;
		pf[0] = (struct pollfd){ .fd = s->prov->conn->connect_fd(cep), .events = POLLIN };
		return 1;
	}
	return -1;
}

void ssw_setup_release(struct ssw_sock *s)
{
	ssw_proof_release(s); /* asks the session: before it goes */
	if (s->cep)
		s->prov->conn->close(s->cep, SSW_CLOSE_ABORT);
	s->cep = NULL;
	for (int i = 0; i < s->npl; i++)
		s->pl[i].prov->conn->listener_close(s->pl[i].l);
	s->npl = 0;
}
