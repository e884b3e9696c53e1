/* addr.c — socket address helpers (normalising, family conversion, printing). */
#include "switch/sock/addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

int ssw_addr_normalize(const struct sockaddr *a, socklen_t len, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof *out);
	if (a->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in *o = (struct sockaddr_in *)out;
		memcpy(o, a, sizeof *o);
		if (o->sin_addr.s_addr == htonl(INADDR_ANY))
			o->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return 0;
	}
	if (a->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *i6 = (const void *)a;
		if (IN6_IS_ADDR_V4MAPPED(&i6->sin6_addr)) {
			struct sockaddr_in *o = (struct sockaddr_in *)out;
			o->sin_family = AF_INET;
			o->sin_port = i6->sin6_port;
			memcpy(&o->sin_addr, &i6->sin6_addr.s6_addr[12], 4);
			if (o->sin_addr.s_addr == htonl(INADDR_ANY))
				o->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			return 0;
		}
		struct sockaddr_in6 *o = (struct sockaddr_in6 *)out;
		memcpy(o, i6, sizeof *o);
		if (IN6_IS_ADDR_UNSPECIFIED(&o->sin6_addr))
			o->sin6_addr = in6addr_loopback;
		return 0;
	}
	return -1;
}

socklen_t ssw_addr_len(const struct sockaddr_storage *a)
{
	return a->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

uint16_t ssw_addr_port(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)a)->sin_port);
	if (a->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
	return 0;
}

void ssw_addr_set_port(struct sockaddr_storage *a, uint16_t port)
{
	if (a->ss_family == AF_INET)
		((struct sockaddr_in *)a)->sin_port = htons(port);
	else if (a->ss_family == AF_INET6)
		((struct sockaddr_in6 *)a)->sin6_port = htons(port);
}

socklen_t ssw_addr_for_family(const struct sockaddr_storage *a, int family, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof *out);
	if (family == AF_INET6 && a->ss_family == AF_INET) {
		const struct sockaddr_in *i4 = (const void *)a;
		struct sockaddr_in6 *o = (struct sockaddr_in6 *)out;
		o->sin6_family = AF_INET6;
		o->sin6_port = i4->sin_port;
		o->sin6_addr.s6_addr[10] = 0xff;
		o->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&o->sin6_addr.s6_addr[12], &i4->sin_addr, 4);
		return sizeof *o;
	}
	memcpy(out, a, sizeof *out);
	return ssw_addr_len(out);
}

const char *ssw_addr_str(const struct sockaddr *a)
{
	static __thread char buf[INET6_ADDRSTRLEN + 16];
	char h[INET6_ADDRSTRLEN] = "?";
	if (a->sa_family == AF_INET) {
		const struct sockaddr_in *i = (const void *)a;
		inet_ntop(AF_INET, &i->sin_addr, h, sizeof h);
		snprintf(buf, sizeof buf, "%s:%u", h, ntohs(i->sin_port));
	} else if (a->sa_family == AF_INET6) {
		const struct sockaddr_in6 *i = (const void *)a;
		inet_ntop(AF_INET6, &i->sin6_addr, h, sizeof h);
		snprintf(buf, sizeof buf, "[%s]:%u", h, ntohs(i->sin6_port));
	} else {
		snprintf(buf, sizeof buf, "(family %d)", a->sa_family);
	}
	return buf;
}

void ssw_addr_copy_out(const struct sockaddr_storage *a, socklen_t alen, struct sockaddr *out, socklen_t *outlen)
{
	if (!out || !outlen)
		return;
	socklen_t n = *outlen < alen ? *outlen : alen;
	memcpy(out, a, n);
	*outlen = alen;
}

void ssw_addr_listener(const struct sockaddr_storage *name, socklen_t nl, struct sockaddr_storage *out)
{
	if (name->ss_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)name)->sin6_addr))
		ssw_addr_normalize((const struct sockaddr *)name, nl, out);
	else
		memcpy(out, name, sizeof *out);
}

bool ssw_addr_is_wildcard(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}
