/* addr.h — socket address helpers shared by connect and accept, and the
 * private data a connect request carries to the listener. */
#ifndef SSW_ADDR_H
#define SSW_ADDR_H

#include <stdint.h>
#include <sys/socket.h>

#include "session/session.h"

/* v4-mapped IPv6 → IPv4; the unspecified address → loopback (Linux connects
 * to 0.0.0.0 / :: as to the local host).  -1 for other families or short len. */
int ssw_addr_normalize(const struct sockaddr *a, socklen_t len, struct sockaddr_storage *out);
socklen_t ssw_addr_len(const struct sockaddr_storage *a);
uint16_t ssw_addr_port(const struct sockaddr_storage *a);
void ssw_addr_set_port(struct sockaddr_storage *a, uint16_t port);
/* Express a (normalized) address as the given family would see it: an IPv4
 * address on an AF_INET6 socket becomes v4-mapped. */
socklen_t ssw_addr_for_family(const struct sockaddr_storage *a, int family, struct sockaddr_storage *out);
/* "1.2.3.4:80" / "[::1]:80", in a thread-local buffer. */
const char *ssw_addr_str(const struct sockaddr *a);
/* Copy an address out as getsockname/getpeername do (truncating). */
void ssw_addr_copy_out(const struct sockaddr_storage *a, socklen_t alen, struct sockaddr *out, socklen_t *outlen);

/* What a connector tells the listener: its own address (the accepted
 * socket's peer), the address it dialed (the accepted socket's name), its
 * session INIT, and the number of its kernel socket (cfd) in its process:
 * where the listener can see that address held (listen.c peer_ok).  The
 * listener's reply is its INIT alone. */
struct ssw_conn_priv {
	uint32_t magic;
	uint16_t cfam, cport, sfam, sport;
	uint8_t caddr[16], saddr[16];
	uint8_t init[SSW_SESSION_INIT_BYTES]; /* the session's, opaque here */
	int32_t cfd;
	uint16_t cdomain; /* that socket's family (AF_INET6 may hold IPv4) */
	uint16_t pad;
};
void ssw_conn_priv_make(struct ssw_conn_priv *p, const struct sockaddr_storage *client,
			const struct sockaddr_storage *server, const void *init);
/* Validate and decode; -1 if malformed. */
int ssw_conn_priv_parse(const void *buf, size_t len, struct sockaddr_storage *client,
			struct sockaddr_storage *server, void *init, int *cfd, int *cdomain);

#endif
