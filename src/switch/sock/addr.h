/* addr.h — socket address helpers (normalising, family conversion, printing). */
#ifndef SSW_ADDR_H
#define SSW_ADDR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

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
/* A listening socket's address as the switch serves it (its getsockname):
 * a v4-mapped bind is an IPv4 listener, the unspecified address stays a wildcard. */
void ssw_addr_listener(const struct sockaddr_storage *name, socklen_t nl, struct sockaddr_storage *out);
/* 0.0.0.0 or :: */
bool ssw_addr_is_wildcard(const struct sockaddr_storage *a);
/* Copy an address out as getsockname/getpeername do (truncating). */
void ssw_addr_copy_out(const struct sockaddr_storage *a, socklen_t alen, struct sockaddr *out, socklen_t *outlen);

#endif
