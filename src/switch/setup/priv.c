/* priv.c — the private data a connect request carries to the listener
 * (setup_priv.h struct ssw_conn_priv): made by the connector, validated
 * field by field by the acceptor (it comes from another process). */
#include "switch/setup/setup_priv.h"

#include "switch/sock/addr.h"

#include <netinet/in.h>
#include <string.h>

#define PRIV_MAGIC 0x53535750u

static void put(const struct sockaddr_storage *a, uint16_t *fam, uint16_t *port, uint8_t *addr)
{
	*fam = a->ss_family;
	*port = ssw_addr_port(a);
	if (a->ss_family == AF_INET)
		memcpy(addr, &((const struct sockaddr_in *)a)->sin_addr, 4);
	else
		memcpy(addr, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
}

void ssw_conn_priv_make(struct ssw_conn_priv *p, const struct sockaddr_storage *client,
			const struct sockaddr_storage *server, const void *init)
{
	struct sockaddr_storage c;
	memset(p, 0, sizeof *p);
	p->magic = PRIV_MAGIC;
	p->vmin = SSW_PROTO_MIN;
	p->vmax = SSW_PROTO_MAX;
	/* the client's address as seen by the server: never v4-mapped */
	if (ssw_addr_normalize((const struct sockaddr *)client, sizeof *client, &c) < 0)
		memcpy(&c, client, sizeof c);
	put(&c, &p->cfam, &p->cport, p->caddr);
	put(server, &p->sfam, &p->sport, p->saddr);
	memcpy(p->init, init, sizeof p->init);
	p->cfd = -1;
}

static int get(uint16_t fam, uint16_t port, const uint8_t *addr, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof *out);
	if (fam == AF_INET) {
		struct sockaddr_in *o = (struct sockaddr_in *)out;
		o->sin_family = AF_INET;
		o->sin_port = htons(port);
		memcpy(&o->sin_addr, addr, 4);
		return 0;
	}
	if (fam == AF_INET6) {
		struct sockaddr_in6 *o = (struct sockaddr_in6 *)out;
		o->sin6_family = AF_INET6;
		o->sin6_port = htons(port);
		memcpy(&o->sin6_addr, addr, 16);
		return 0;
	}
	return -1;
}

int ssw_conn_priv_parse(const void *buf, size_t len, uint32_t proto, struct sockaddr_storage *client,
			struct sockaddr_storage *server, void *init, int *cfd, int *cdomain)
{
	struct ssw_conn_priv p;
	if (len != sizeof p)
		return -1;
	memcpy(&p, buf, sizeof p);
	if (p.magic != PRIV_MAGIC || proto < p.vmin || proto > p.vmax || get(p.cfam, p.cport, p.caddr, client) < 0 ||
	    get(p.sfam, p.sport, p.saddr, server) < 0)
		return -1;
	memcpy(init, p.init, sizeof p.init);
	*cfd = p.cfd;
	*cdomain = p.cdomain;
	return 0;
}
