/* api.c — what the interposition layer reports of fds, turned into the
 * switch's own records (fd info, fd table, relayed table, epoll sets), so
 * that the layer above sees none of them (api.h). */
#include "switch/share/relay.h"
#include "switch/switch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

bool ssw_sock_listening(const struct ssw_sock *s)
{
	return s->state == SSW_ST_LISTENING;
}

void ssw_fd_socket(int fd, int domain, int type, int protocol)
{
	uint8_t fi = SSW_FI_KNOWN;
	if ((type & 0xff) == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP))
		fi |= domain == AF_INET ? SSW_FI_TCP4 : domain == AF_INET6 ? SSW_FI_TCP6 : 0;
	if (type & SOCK_NONBLOCK)
		fi |= SSW_FI_NONBLOCK;
	ssw_fdinfo_set(fd, fi);
}

void ssw_fd_bound(int fd)
{
	ssw_fdinfo_update(fd, SSW_FI_BOUND, 0);
}

void ssw_fd_nonblock(int fd, bool on)
{
	ssw_fdinfo_update(fd, on ? SSW_FI_NONBLOCK : 0, on ? 0 : SSW_FI_NONBLOCK);
}

void ssw_fd_setfl(int fd, int flags)
{
	ssw_fd_nonblock(fd, (flags & O_NONBLOCK) != 0);
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		ssw_fcntl_setfl(s, flags);
		ssw_sock_put(s);
	}
}

void ssw_fd_setown(int fd, int owner)
{
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		ssw_fcntl_setown(s, owner);
		ssw_sock_put(s);
	}
}

#ifndef IPV6_FREEBIND
#define IPV6_FREEBIND 78
#endif
#ifndef IPV6_TRANSPARENT
#define IPV6_TRANSPARENT 75
#endif

/* connect reads such options back onto the switched socket (SSW_FI_OPTS),
 * and checks that a socket bound with a non-local address can prove it
 * (connect.c provable_source) */
void ssw_fd_opt_set(int fd, int level, int opt)
{
	if (level == SOL_SOCKET || (level == IPPROTO_TCP && opt == TCP_CORK) ||
	    (level == SOL_IP && (opt == IP_FREEBIND || opt == IP_TRANSPARENT)) ||
	    (level == SOL_IPV6 && (opt == IPV6_FREEBIND || opt == IPV6_TRANSPARENT)))
		ssw_fdinfo_update(fd, SSW_FI_OPTS, 0);
}

void ssw_fd_epoll(int fd)
{
	ssw_epoll_forget(fd);
	ssw_fdinfo_set(fd, SSW_FI_EPOLL);
}

void ssw_fd_dup(int oldfd, int newfd, bool replaced)
{
	ssw_fd_fresh(newfd);
	if (replaced)
		ssw_epoll_forget(newfd); /* it may have been an epoll fd, closed by the dup */
	ssw_dup(oldfd, newfd);
}

int ssw_fd_close(int fd)
{
	ssw_fdinfo_set(fd, 0);
	ssw_relayed_drop(fd);
	return ssw_close(fd);
}

void ssw_fd_close_range(unsigned lo, unsigned hi)
{
	ssw_close_range(lo, hi);
	ssw_relayed_close_range(lo, hi);
}

/* An fd not met before (received over SCM_RIGHTS, inherited across exec) is
 * looked at once, unless the switch knows it is something else. */
int ssw_relayed_answer(int fd, enum ssw_relayed_q q, int level, int opt, void *val, socklen_t *len)
{
	int r = ssw_relayed_query(fd, q, level, opt, val, len);
	if (r != SSW_PASS || fd < 0)
		return r;
	uint8_t fi = ssw_fdinfo_get(fd);
	if (fi & (SSW_FI_NOTRELAY | SSW_FI_TCP4 | SSW_FI_TCP6 | SSW_FI_EPOLL))
		return SSW_PASS;
	if (!ssw_relayed_recognize(fd)) {
		ssw_fdinfo_set(fd, fi | SSW_FI_NOTRELAY);
		return SSW_PASS;
	}
	return ssw_relayed_query(fd, q, level, opt, val, len);
}
