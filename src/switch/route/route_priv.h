/* route_priv.h — what the routing files share: addresses in the normalized
 * form lookups use. */
#ifndef SSW_ROUTE_PRIV_H
#define SSW_ROUTE_PRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* Addresses are kept in the normalized form lookups use: family plus 16 bytes,
 * IPv4 (and v4-mapped IPv6) in the first 4. */
struct net_addr {
	int family;
	uint8_t a[16];
};

/* sa (IPv4, IPv6, v4-mapped as IPv4) into x; false for another family or a short len. */
bool ssw_net_addr_from(const struct sockaddr *sa, socklen_t len, struct net_addr *x);
/* 16 bytes of the ::ffff:0:0/96 prefix */
bool ssw_net_is_v4mapped(const uint8_t *a);
/* An address of this host (loopback, unspecified, or an interface's: local.c). */
bool ssw_net_addr_is_local(const struct net_addr *x);

#endif
