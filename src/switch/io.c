/* io.c — data transfer, close, dup and socket options of switched sockets:
 * the socket-level rules (blocking mode, timeouts, SIGPIPE, option tracking)
 * around the session's stream operations. */
#include "switch/relay.h"
#include "switch/switch.h"

#include "common/log.h"
#include "common/sys.h"
#include "switch/addr.h"
#include "switch/statreg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

/* Make sure a connecting socket is connected, or hand it to the kernel.
 * Returns 0 (go on with the session), SSW_PASS, or -errno. */
static int ready_for_io(struct ssw_sock *s, int wait)
{
	if (s->state == SSW_ST_CONNECTED)
		return 0;
	if (s->state != SSW_ST_CONNECTING)
		return SSW_PASS;
	bool nb = atomic_load(&s->nonblock);
	int rc = ssw_connect_poll(s, s->fd, nb || !wait ? 0 : -1);
	if (rc == 0 && s->state == SSW_ST_CONNECTED)
		return 0;
	if (rc == -EINPROGRESS)
		return -EAGAIN;
	if (rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -EHOSTUNREACH)
		return rc; /* final: kernel TCP would fail the same way */
	return SSW_PASS; /* fell back to kernel TCP, which carries on */
}

ssize_t ssw_send(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	bool nb = atomic_load(&s->nonblock) || (flags & MSG_DONTWAIT);
	ssize_t r = ssw_session_send(s->sess, iov, iovcnt, flags, nb, s->sndtimeo_ms);
	if (!nb)
		ssw_epoll_touch(s); /* it may have slept: its doorbell taken here */
	if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
		ssw_raise_sigpipe();
	return r;
}

ssize_t ssw_recv(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	bool nb = atomic_load(&s->nonblock) || (flags & MSG_DONTWAIT);
	ssize_t r = ssw_session_recv(s->sess, iov, iovcnt, flags, nb, s->rcvtimeo_ms);
	if (!nb)
		ssw_epoll_touch(s);
	return r;
}

ssize_t ssw_sendfile(struct ssw_sock *s, int in_fd, off_t *offset, size_t count)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	off_t pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
	if (pos < 0)
		return -errno;
	size_t bufsz = count < (1u << 20) ? count : (1u << 20);
	if (bufsz == 0)
		return 0;
	char *buf = malloc(bufsz);
	if (!buf)
		return -ENOMEM;
	size_t done = 0;
	ssize_t err = 0;
	while (done < count) {
		size_t want = count - done < bufsz ? count - done : bufsz;
		ssize_t n = pread(in_fd, buf, want, pos + (off_t)done);
		if (n <= 0) {
			if (n < 0)
				err = -errno;
			break;
		}
		struct iovec v = { buf, (size_t)n };
		/* A file read is never partial on purpose: send all of it, as the
		 * kernel's sendfile would for a blocking socket. */
		ssize_t w = ssw_send(s, &v, 1, MSG_NOSIGNAL);
		if (w < 0) {
			err = w;
			break;
		}
		done += (size_t)w;
		if ((size_t)w < (size_t)n)
			break;
	}
	free(buf);
	if (offset)
		*offset = pos + (off_t)done;
	else if (done)
		lseek(in_fd, pos + (off_t)done, SEEK_SET);
	if (done)
		return (ssize_t)done;
	if (err == -EPIPE)
		ssw_raise_sigpipe();
	return err;
}

int ssw_shutdown(struct ssw_sock *s, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	if (s->state == SSW_ST_CONNECTING) {
		int rc = ready_for_io(s, 0);
		if (rc)
			return rc == SSW_PASS ? SSW_PASS : -ENOTCONN;
	}
	if (s->state != SSW_ST_CONNECTED)
		return SSW_PASS;
	int rc = ssw_session_shutdown(s->sess, how);
	ssw_epoll_touch(s);
	return rc;
}

int ssw_close(int fd)
{
	ssw_statreg_fd_closed(fd);
	struct ssw_sock *s = ssw_fdtab_take(fd);
	int r = sys_close(fd);
	int err = errno;
	if (s) {
		if (atomic_load(&s->fdrefs) == 0)
			ssw_epoll_drop_sock(s); /* last descriptor: the kernel drops it from every epoll set */
		ssw_sock_put(s);
	}
	ssw_epoll_forget(fd);
	errno = err;
	return r < 0 ? -err : 0;
}

void ssw_fd_fresh(int fd)
{
	struct ssw_sock *s = ssw_fdtab_take(fd);
	if (s)
		ssw_sock_put(s);
	ssw_fdinfo_set(fd, 0);
	ssw_relayed_drop(fd);
}

void ssw_close_range(unsigned lo, unsigned hi)
{
	unsigned top = (unsigned)ssw_fdtab_size();
	for (unsigned fd = lo; fd <= hi && fd < top && ssw_fdtab_count(); fd++) {
		int f = (int)fd;
		if (ssw_fdtab_any(&f, 1))
			ssw_close(f);
	}
}

void ssw_dup(int oldfd, int newfd)
{
	ssw_fdinfo_set(newfd, ssw_fdinfo_get(oldfd));
	ssw_relayed_dup(oldfd, newfd);
	struct ssw_sock *s = ssw_sock_get(oldfd);
	if (!s)
		return;
	ssw_fdtab_set(newfd, s);
	ssw_sock_put(s);
}

/* ---- options ------------------------------------------------------------ */

static int timeval_ms(const void *val, socklen_t len)
{
	struct timeval tv;
	if (len < sizeof tv)
		return -1;
	memcpy(&tv, val, sizeof tv);
	if (!tv.tv_sec && !tv.tv_usec)
		return -1;
	return (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
}

int ssw_setsockopt(struct ssw_sock *s, int fd, int level, int opt, const void *val, socklen_t len)
{
	/* The kernel socket keeps every option (getsockopt reads them back). */
	if (sys_setsockopt(fd, level, opt, val, len) < 0)
		return -errno;
	if (level != SOL_SOCKET)
		return 0;
	int iv = 0;
	if (len >= sizeof(int))
		memcpy(&iv, val, sizeof iv);
	pthread_mutex_lock(&s->lock);
	bool changed = true;
	switch (opt) {
	case SO_RCVBUF:
		s->opts.rcvbuf = iv > 0 ? (uint32_t)iv : 0;
		break;
	case SO_SNDBUF:
		s->opts.sndbuf = iv > 0 ? (uint32_t)iv : 0;
		break;
	case SO_OOBINLINE:
		s->opts.oobinline = iv != 0;
		break;
	case SO_RCVTIMEO:
		s->rcvtimeo_ms = timeval_ms(val, len);
		changed = false;
		break;
	case SO_SNDTIMEO:
		s->sndtimeo_ms = timeval_ms(val, len);
		changed = false;
		break;
	case SO_LINGER:
		if (len >= sizeof(struct linger)) {
			struct linger lg;
			memcpy(&lg, val, sizeof lg);
			s->linger_on = lg.l_onoff != 0;
			s->linger_s = lg.l_linger;
		}
		changed = false;
		break;
	default:
		changed = false;
	}
	if (s->state == SSW_ST_LISTENING)
		s->lopts = s->opts;
	if (changed && s->sess)
		ssw_session_set_opts(s->sess, &s->opts);
	pthread_mutex_unlock(&s->lock);
	if (changed)
		ssw_epoll_touch(s); /* POLLOUT's threshold, POLLPRI vs POLLIN */
	return 0;
}

/* TCP_INFO / TCP_MAXSEG of a switched connection: the kernel socket under
 * it is not connected, so its answers are patched to what a connected
 * loopback socket reports. */
static int tcp_getsockopt(struct ssw_sock *s, int fd, int opt, void *val, socklen_t *len)
{
	if (s->state != SSW_ST_CONNECTED || !s->sess || !val || !len)
		return SSW_PASS;
	if (opt == TCP_INFO) {
		if (sys_getsockopt(fd, IPPROTO_TCP, TCP_INFO, val, len) < 0)
			return -errno;
		if (*len >= 1)
			((struct tcp_info *)val)->tcpi_state = (uint8_t)ssw_session_tcp_state(s->sess);
		return 0;
	}
	if (opt == TCP_MAXSEG && *len >= sizeof(int)) {
		/* Linux on loopback: MSS bounded by half the initial window */
		int mss = 32741;
		memcpy(val, &mss, sizeof mss);
		*len = sizeof mss;
		return 0;
	}
	return SSW_PASS;
}

int ssw_getsockopt(struct ssw_sock *s, int fd, int level, int opt, void *val, socklen_t *len)
{
	if (level == IPPROTO_TCP)
		return tcp_getsockopt(s, fd, opt, val, len);
	if (level != SOL_SOCKET || opt != SO_ERROR || !val || !len || *len < sizeof(int))
		return SSW_PASS;
	int e = 0;
	if (s->state == SSW_ST_CONNECTING) {
		int rc = ready_for_io(s, 0);
		if (rc == SSW_PASS)
			return SSW_PASS; /* the kernel connect carries on, and reports */
		if (rc < 0 && rc != -EAGAIN)
			e = -rc;
	} else if (s->state == SSW_ST_CONNECTED) {
		e = -ssw_session_take_error(s->sess);
	} else {
		return SSW_PASS;
	}
	memcpy(val, &e, sizeof e);
	*len = sizeof e;
	return 0;
}

int ssw_ioctl(struct ssw_sock *s, int fd, unsigned long req, void *arg, bool *handled)
{
	*handled = false;
	(void)fd;
	if (req == FIONBIO) {
		if (arg)
			atomic_store(&s->nonblock, *(int *)arg != 0);
		return 0; /* and the kernel too */
	}
	if (s->state != SSW_ST_CONNECTED || !arg)
		return 0;
	switch (req) {
	case FIONREAD: /* == SIOCINQ */
		*(int *)arg = ssw_session_fionread(s->sess);
		break;
	case SIOCATMARK:
		*(int *)arg = ssw_session_atmark(s->sess);
		break;
	case SIOCOUTQ:
	case SIOCOUTQNSD:
		*(int *)arg = 0; /* sent data is already in the peer's buffers */
		break;
	default:
		return 0;
	}
	*handled = true;
	return 0;
}

void ssw_fcntl_setfl(struct ssw_sock *s, int flags)
{
	atomic_store(&s->nonblock, (flags & O_NONBLOCK) != 0);
}

void ssw_fcntl_setown(struct ssw_sock *s, int owner)
{
	if (s->state == SSW_ST_CONNECTED && s->sess)
		ssw_session_set_owner(s->sess, owner);
}

int ssw_getsockname(struct ssw_sock *s, struct sockaddr *a, socklen_t *l)
{
	if (s->state != SSW_ST_CONNECTED)
		return SSW_PASS;
	if (!a || !l)
		return -EFAULT;
	ssw_addr_copy_out(&s->local, s->local_len, a, l);
	return 0;
}

int ssw_getpeername(struct ssw_sock *s, struct sockaddr *a, socklen_t *l)
{
	if (s->state == SSW_ST_CONNECTING)
		return ready_for_io(s, 0) == 0 ? ssw_getpeername(s, a, l) : -ENOTCONN;
	if (s->state != SSW_ST_CONNECTED)
		return SSW_PASS;
	if (!a || !l)
		return -EFAULT;
	if (ssw_session_tcp_state(s->sess) == TCP_CLOSE)
		return -ENOTCONN; /* reset, or both FINs: inet_getname says so */
	ssw_addr_copy_out(&s->peer, s->peer_len, a, l);
	return 0;
}
