/* accept.c — taking a provider connection request: the connector's private
 * data, its address claim, the session built from the listener's options.
 * A request that fails any of it is dropped and counted, as kernel TCP
 * drops a bad SYN; processes sharing the listener after fork take requests
 * from the same backlog, each exactly once (the provider's contract). */
#include "switch/setup/setup_priv.h"

#include "common/log.h"
#include "switch/switch.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* A request that failed the set-up: the connector sees a reset, the
 * application never an error it did not ask for (an accept loop that
 * treats errors as fatal would die of one malformed message).  Counted,
 * with the last reason, for `stat`. */
static void refuse(struct ssw_sock *ls, const struct ssw_provider *p, struct ssw_ep *ep, const char *why)
{
	if (ep)
		p->conn->close(ep, SSW_CLOSE_ABORT);
	atomic_fetch_add(&ls->refused, 1);
	atomic_fetch_add(&ssw_counters.refused, 1);
	pthread_mutex_lock(&ls->lock);
	snprintf(ls->lnote, sizeof ls->lnote, "%s", why);
	pthread_mutex_unlock(&ls->lock);
	SSW_DEBUG("fd %d: dropped a %s connection request: %s", ls->fd, p->name, why);
}

/* One request taken off a provider listener: checked, and its session. */
static int take(struct ssw_sock *ls, const struct ssw_provider *p, uint32_t proto, struct ssw_ep *ep, const void *priv,
		size_t plen, struct ssw_setup_accepted *a)
{
	uint8_t peer[SSW_SESSION_INIT_BYTES];
	int cfd, cdom;
	bool ask_proof = false;
	if (ssw_conn_priv_parse(priv, plen, proto, &a->client, &a->server, peer, &cfd, &cdom) < 0) {
		refuse(ls, p, ep, "malformed connection request");
		return -EAGAIN;
	}
	if (!ssw_claim_ok(ls, p, ep, &a->client, &a->server, cfd, cdom, &ask_proof)) {
		refuse(ls, p, ep, "address claim not proven");
		return -EAGAIN;
	}
	a->prov = p;
	a->opts = ls->lopts;
	a->opts.ask_proof = ask_proof; /* in our INIT: a listening proof next time (proof.c) */
	a->sess = ssw_session_new(p, ep, &a->opts, peer);
	if (a->sess && ssw_session_announce(a->sess, &a->opts) < 0) {
		ssw_session_close(a->sess, true); /* closes ep */
		a->sess = NULL;
		ep = NULL;
	}
	if (!a->sess) {
		refuse(ls, p, ep, "session refused (wire version, window or memory)");
		return -EAGAIN;
	}
	return 0;
}

int ssw_setup_accept(struct ssw_sock *ls, struct ssw_setup_accepted *a)
{
	for (;;) {
		struct ssw_ep *ep = NULL;
		uint8_t priv[SSW_CONNECT_PRIV_MAX];
		size_t plen = 0;
		const struct ssw_provider *p = NULL;
		uint32_t proto = 0;
		/* the lock keeps fork (ssw_setup_listener_drop_private) from
		 * closing a listener under us */
		pthread_mutex_lock(&ls->lock);
		for (int i = 0; i < ls->npl && !p; i++) {
			plen = sizeof priv;
			if (ls->pl[i].prov->conn->accept(ls->pl[i].l, &ep, priv, &plen) == 0) {
				p = ls->pl[i].prov;
				proto = ls->pl[i].proto;
			}
		}
		pthread_mutex_unlock(&ls->lock);
		if (!p)
			return -EAGAIN;
		if (take(ls, p, proto, ep, priv, plen, a) == 0)
			return 0;
	}
}
