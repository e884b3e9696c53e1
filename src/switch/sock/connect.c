/* connect.c — connect(2) through the switch, the fd layer's side: the set-up
 * (setup/connect.c) starts a provider connection or says why kernel TCP
 * carries it; here the socket object goes into the fd table, a pending
 * connect is driven (connect again, SO_ERROR, poll), and a fallback
 * connects the kernel socket, counted and published for `stat`. */
#include "switch/switch.h"

#include "common/log.h"
#include "common/sys.h"
#include "switch/setup/setup.h"
#include "switch/sock/addr.h"
#include "switch/stat/statreg.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

/* Is fd an IPv4/IPv6 TCP stream socket? */
static bool is_tcp_socket(int fd, int *family)
{
	uint8_t fi = ssw_fdinfo_get(fd);
	if (fi & SSW_FI_KNOWN) {
		*family = fi & SSW_FI_TCP4 ? AF_INET : AF_INET6;
		return (fi & (SSW_FI_TCP4 | SSW_FI_TCP6)) != 0;
	}
	int v;
	socklen_t l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || (v != AF_INET && v != AF_INET6))
		return false;
	*family = v;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) < 0 || v != SOCK_STREAM)
		return false;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return false;
	return true;
}

/* Read the options the application set on the kernel socket before
 * connect/listen: they shape the session. */
void ssw_sock_load_opts(struct ssw_sock *s, int fd)
{
	uint8_t fi = ssw_fdinfo_get(fd);
	if ((fi & SSW_FI_KNOWN) && !(fi & SSW_FI_OPTS)) { /* defaults: nothing to read back */
		atomic_store(&s->nonblock, (fi & SSW_FI_NONBLOCK) != 0);
		return;
	}
	int v;
	socklen_t l = sizeof v;
	struct timeval tv;
	struct linger lg;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &v, &l) == 0)
		s->opts.oobinline = v != 0;
	l = sizeof v;
	if (sys_getsockopt(fd, IPPROTO_TCP, TCP_CORK, &v, &l) == 0)
		s->opts.cork = v != 0;
	l = sizeof tv;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
		s->rcvtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
	l = sizeof tv;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
		s->sndtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
	l = sizeof lg;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l) == 0) {
		s->linger_on = lg.l_onoff != 0;
		s->linger_s = lg.l_linger;
	}
	/* SO_RCVBUF/SO_SNDBUF read back doubled when the application set them;
	 * an untouched socket shows the sysctl default. */
	static int def[2] = { -1, -1 };
	if (def[0] < 0) {
		const char *files[2] = { "/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_wmem" };
		for (int i = 0; i < 2; i++) {
			char buf[128] = "";
			int f = (int)SYS_(openat, AT_FDCWD, files[i], O_RDONLY | O_CLOEXEC);
			long a = 0, b = 0;
			if (f >= 0) {
				(void)!sys_read(f, buf, sizeof buf - 1);
				sys_close(f);
			}
			def[i] = sscanf(buf, "%ld %ld", &a, &b) == 2 ? (int)b : 0;
		}
	}
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &l) == 0 && v != def[0] && v > 0)
		s->opts.rcvbuf = (uint32_t)v / 2;
	l = sizeof v;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, &l) == 0 && v != def[1] && v > 0)
		s->opts.sndbuf = (uint32_t)v / 2;
	int fl = sys_fcntl(fd, F_GETFL, 0);
	atomic_store(&s->nonblock, fl >= 0 && (fl & O_NONBLOCK));
}

/* Kernel TCP for this connect, as the decision says (a fallback is
 * counted and published with its reason; a route that says tcp is not a
 * fallback).  s: a socket object of a provider attempt given up. */
static int kernel_connect(struct ssw_sock *s, int fd, const struct sockaddr *addr, socklen_t len,
			  const struct ssw_setup_decision *d)
{
	if (d->why) {
		atomic_fetch_add(&ssw_counters.fallback, 1);
		SSW_INFO("fd %d: connect %s: kernel TCP (%s)", fd, ssw_addr_str(addr), d->why);
	} else {
		SSW_INFO("fd %d: connect %s: kernel TCP (%s%s)", fd, ssw_addr_str(addr),
			 d->rule ? "route says tcp: " : "no route for this address", d->rule ? d->rule->origin : "");
	}
	if (s) {
		ssw_setup_connect_undo(s, fd);
		struct ssw_sock *t = ssw_fdtab_take(fd);
		if (t)
			ssw_sock_unref(t);
	}
	int r = sys_connect(fd, addr, len);
	int err = r < 0 ? errno : 0;
	/* published after the connect: with the state it has */
	if (d->why)
		ssw_statreg_kernel(fd, addr, len, d->why);
	else
		ssw_statreg_route_tcp(fd, addr, len, d->rule);
	return -err;
}

/* For a connecting socket: connect() again, SO_ERROR, poll.  Returns 0
 * (connected), -EINPROGRESS/-EALREADY (pending) or the final error. */
int ssw_connect_poll(struct ssw_sock *s, int fd, int wait_ms)
{
	struct ssw_setup_decision d;
	pthread_mutex_lock(&s->lock);
	int rc = ssw_setup_connect_poll(s, wait_ms, &d);
	if (rc == SSW_SETUP_KERNEL) {
		rc = kernel_connect(s, fd, (struct sockaddr *)&s->dst, s->dst_len, &d);
	} else if (rc < 0 && rc != -EINPROGRESS) {
		struct ssw_sock *t = ssw_fdtab_take(fd); /* a final error: the socket is the kernel's again */
		if (t)
			ssw_sock_unref(t);
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int ssw_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	if (ssw_provider_calls) { /* a provider's own socket (libfabric tcp) */
		int r = sys_connect(fd, addr, len);
		return r < 0 ? -errno : 0;
	}
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		int rc;
		if (s->state == SSW_ST_CONNECTED)
			/* the first connect after an asynchronous completion says 0 */
			rc = atomic_exchange(&s->connect_unseen, false) ? 0 : -EISCONN;
		else if (s->state == SSW_ST_LISTENING)
			rc = -EINVAL;
		else {
			rc = ssw_connect_poll(s, fd, atomic_load(&s->nonblock) ? 0 : -1);
			if (rc == -EINPROGRESS)
				rc = -EALREADY;
			else
				atomic_store(&s->connect_unseen, false);
		}
		ssw_sock_put(s);
		return rc;
	}

	int family;
	struct sockaddr_storage dst;
	if (!addr || len < sizeof(sa_family_t) || !is_tcp_socket(fd, &family) ||
	    ssw_addr_normalize(addr, len, &dst) < 0) {
		int r = sys_connect(fd, addr, len);
		return r < 0 ? -errno : 0;
	}
	struct ssw_setup_decision d;
	int rc = ssw_setup_connect(fd, family, addr, len, &dst, &s, &d);
	if (rc == SSW_SETUP_KERNEL)
		return kernel_connect(NULL, fd, addr, len, &d);
	if (rc < 0)
		return rc;
	ssw_fdtab_set(fd, s);
	ssw_sock_put(s); /* the table holds it now */

	bool nonblock = atomic_load(&s->nonblock);
	rc = ssw_connect_poll(s, fd, nonblock ? 0 : (s->sndtimeo_ms > 0 ? s->sndtimeo_ms : -1));
	/* a nonblocking TCP connect says EINPROGRESS even on loopback, and
	 * programs count on it (they wait for POLLOUT, then connect() says 0) */
	if (rc == 0 && nonblock)
		rc = -EINPROGRESS;
	if (rc == -EINPROGRESS)
		atomic_store(&s->connect_unseen, true);
	return rc;
}
