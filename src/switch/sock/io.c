/* io.c — data transfer, close, dup and socket options of switched sockets:
 * the socket-level rules (blocking mode, timeouts, SIGPIPE, option tracking)
 * around the session's stream operations. */
#include "switch/share/relay.h"
#include "switch/switch.h"

#include "common/log.h"
#include "common/sys.h"
#include "switch/sock/addr.h"
#include "switch/stat/statreg.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

/* O_NONBLOCK, the timeouts and SO_LINGER as every process holding the
 * connection sees them: its open file's, which a fork shares (the session
 * keeps what any of them set since; until then this process's copy). */
static bool sock_nb(struct ssw_sock *s)
{
	bool nb = atomic_load(&s->nonblock);
	return s->state == SSW_ST_CONNECTED && s->sess ? ssw_session_sopt(s->sess, SSW_SOPT_NONBLOCK, nb) != 0 : nb;
}

static int sock_rcvtimeo(struct ssw_sock *s)
{
	return s->state == SSW_ST_CONNECTED && s->sess ? ssw_session_sopt(s->sess, SSW_SOPT_RCVTIMEO, s->rcvtimeo_ms)
						      : s->rcvtimeo_ms;
}

static int sock_sndtimeo(struct ssw_sock *s)
{
	return s->state == SSW_ST_CONNECTED && s->sess ? ssw_session_sopt(s->sess, SSW_SOPT_SNDTIMEO, s->sndtimeo_ms)
						      : s->sndtimeo_ms;
}

bool ssw_sock_linger0(struct ssw_sock *s)
{
	int own = s->linger_on ? s->linger_s : -1;
	return (s->sess ? ssw_session_sopt(s->sess, SSW_SOPT_LINGER, own) : own) == 0;
}

static void share_opt(struct ssw_sock *s, int which, int v)
{
	if (s->state == SSW_ST_CONNECTED && s->sess)
		ssw_session_sopt_set(s->sess, which, v);
}

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

/* After a send: a reset it drew (a state wake of the session since gen)
 * makes the socket's epoll entries look again, as an epoll_wait asleep
 * elsewhere on it would be woken (soak seed 847001021). */
static void touch_if_changed(struct ssw_sock *s, uint64_t gen)
{
	if (ssw_session_state_gen(s->sess) != gen)
		ssw_epoll_touch(s);
}

/* After a send, sendfile or splice: one that could block may have slept on
 * the doorbell an epoll_wait elsewhere on the socket waits for (data that
 * came meanwhile rang it once): its entries look again (sem
 * blocking_send_wakes, whose splice round failed in CI under load). */
static void touch_after_send(struct ssw_sock *s, bool nb, uint64_t gen)
{
	if (!nb)
		ssw_epoll_touch(s);
	else
		touch_if_changed(s, gen);
}

ssize_t ssw_send(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	bool nb = sock_nb(s) || (flags & MSG_DONTWAIT);
	uint64_t gen = ssw_session_state_gen(s->sess);
	ssize_t r = ssw_session_send(s->sess, iov, iovcnt, flags, nb, sock_sndtimeo(s));
	touch_after_send(s, nb, gen);
	if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
		ssw_raise_sigpipe();
	return r;
}

ssize_t ssw_recv(struct ssw_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	bool nb = sock_nb(s) || (flags & MSG_DONTWAIT);
	ssize_t r = ssw_session_recv(s->sess, iov, iovcnt, flags, nb, sock_rcvtimeo(s));
	if (!nb)
		ssw_epoll_touch(s);
	return r;
}

/* sendfile's source: the file read straight into the transport. */
struct file_src {
	int fd;
	off_t pos;
};

static ssize_t file_fill(void *ctx, void *buf, size_t len)
{
	struct file_src *f = ctx;
	ssize_t n = pread(f->fd, buf, len, f->pos);
	if (n < 0)
		return errno == ESPIPE ? -EINVAL : -errno; /* a pipe or socket: the kernel says EINVAL */
	f->pos += n;
	return n;
}

#define RW_MAX 0x7ffff000 /* MAX_RW_COUNT: the most one call moves */

ssize_t ssw_sendfile(struct ssw_sock *s, int in_fd, off_t *offset, size_t count)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	if (offset && *offset < 0)
		return -EINVAL;
	off_t pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
	if (pos < 0)
		return errno == ESPIPE ? -EINVAL : -errno;
	/* the kernel reads the file first: nothing to read (no count, or its
	 * end) is 0, whatever the socket's state (shut down, reset, full) */
	struct stat st;
	int fl = sys_fcntl(in_fd, F_GETFL, 0);
	if (fl < 0 || (fl & O_ACCMODE) == O_WRONLY)
		return -EBADF;
	if (count == 0 || (fstat(in_fd, &st) == 0 && S_ISREG(st.st_mode) && pos >= st.st_size))
		return 0;
	struct file_src f = { in_fd, pos };
	uint64_t gen = ssw_session_state_gen(s->sess);
	bool nb = sock_nb(s);
	ssize_t r = ssw_session_send_fill(s->sess, count < RW_MAX ? count : RW_MAX, file_fill, &f, 0, nb,
					  sock_sndtimeo(s));
	touch_after_send(s, nb, gen);
	off_t done = r > 0 ? (off_t)r : 0;
	if (offset)
		*offset = pos + done;
	else if (done)
		lseek(in_fd, pos + done, SEEK_SET);
	if (r == -EPIPE)
		ssw_raise_sigpipe();
	return r;
}

/* splice's pipe as a source: what it holds now, read straight into the
 * transport (under the session's lock: never waits for more). */
struct pipe_src {
	int fd;
	bool nowait_ok; /* the kernel takes RWF_NOWAIT for pipes */
};

static ssize_t pipe_fill(void *ctx, void *buf, size_t len)
{
	struct pipe_src *p = ctx;
	struct iovec v = { buf, len };
	ssize_t n = p->nowait_ok ? preadv2(p->fd, &v, 1, -1, RWF_NOWAIT) : -1;
	if (n < 0 && p->nowait_ok && (errno == EOPNOTSUPP || errno == EINVAL))
		p->nowait_ok = false;
	if (n < 0 && !p->nowait_ok) {
		/* an older kernel: look first (a reader elsewhere may race us) */
		struct pollfd q = { .fd = p->fd, .events = POLLIN };
		if (sys_poll(&q, 1, 0) <= 0 || !(q.revents & POLLIN))
			return 0;
		n = sys_read(p->fd, buf, len);
	}
	return n < 0 ? (errno == EAGAIN ? 0 : -errno) : n;
}

/* Wait until the pipe has `events` (POLLIN: data or no writer left;
 * POLLOUT: room), as splice does before it moves anything.  0, 1 (no
 * writer left, nothing to read), -EAGAIN (SPLICE_F_NONBLOCK), -EPIPE (no
 * reader left) or -EINTR. */
static int pipe_wait(int fd, short events, unsigned flags)
{
	struct pollfd q = { .fd = fd, .events = events };
	int r = sys_poll(&q, 1, (flags & SPLICE_F_NONBLOCK) ? 0 : -1);
	if (r < 0)
		return -errno;
	if (events == POLLOUT && (q.revents & POLLERR))
		return -EPIPE;
	if (r == 0)
		return -EAGAIN;
	return q.revents & events ? 0 : 1; /* 1: POLLIN, no data and no writer left: end of the pipe */
}

ssize_t ssw_splice_from_pipe(struct ssw_sock *s, int pipe_fd, size_t len, unsigned flags)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	rc = pipe_wait(pipe_fd, POLLIN, flags);
	if (rc)
		return rc > 0 ? 0 : rc;
	struct pipe_src p = { pipe_fd, true };
	/* SPLICE_F_NONBLOCK is about the pipe: the socket's own mode decides */
	bool nb = sock_nb(s);
	uint64_t gen = ssw_session_state_gen(s->sess);
	ssize_t r = ssw_session_send_fill(s->sess, len < RW_MAX ? len : RW_MAX, pipe_fill, &p,
					  (flags & SPLICE_F_MORE) ? MSG_MORE : 0, nb, sock_sndtimeo(s));
	touch_after_send(s, nb, gen);
	if (r == -EPIPE)
		ssw_raise_sigpipe();
	return r;
}

#define SPLICE_CHUNK (64u << 10)

ssize_t ssw_splice_to_pipe(struct ssw_sock *s, int pipe_fd, size_t len, unsigned flags)
{
	int rc = ready_for_io(s, 1);
	if (rc)
		return rc;
	rc = pipe_wait(pipe_fd, POLLOUT, flags);
	if (rc == -EPIPE)
		ssw_raise_sigpipe();
	if (rc)
		return rc;
	/* Take from the socket only what the pipe surely holds without
	 * blocking: all of its room when it is empty, else one page (a pipe
	 * with room has a free page slot). */
	int inpipe = 0, cap = sys_fcntl(pipe_fd, F_GETPIPE_SZ, 0);
	if (SYS_(ioctl, pipe_fd, FIONREAD, &inpipe) < 0 || cap <= 0)
		return -EINVAL;
	size_t n = inpipe == 0 ? (size_t)cap : 4096;
	if (n > len)
		n = len;
	if (n > SPLICE_CHUNK)
		n = SPLICE_CHUNK;
	bool nb = sock_nb(s);
	size_t room;
	rc = ssw_session_splice_room(s->sess, nb, &room);
	if (rc <= 0)
		return rc;
	if (n > room)
		n = room;
	void *buf = malloc(n);
	if (!buf)
		return -ENOMEM;
	struct iovec v = { buf, n };
	ssize_t r = ssw_session_recv(s->sess, &v, 1, 0, nb, sock_rcvtimeo(s));
	for (size_t off = 0; r > 0 && off < (size_t)r;) {
		ssize_t w = sys_write(pipe_fd, (char *)buf + off, (size_t)r - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) { /* the reader left meanwhile: those bytes are lost, as in a kernel splice */
			r = off ? (ssize_t)off : -EPIPE;
			break;
		}
		off += (size_t)w;
	}
	free(buf);
	return r;
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
		ssw_sock_unref(s);
	}
	ssw_epoll_forget(fd);
	if (errno != err) /* its page: see fork() in interpose/exec_api.c */
		errno = err;
	return r < 0 ? -err : 0;
}

void ssw_fd_fresh(int fd)
{
	struct ssw_sock *s = ssw_fdtab_take(fd);
	if (s)
		ssw_sock_unref(s);
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

/* TCP_CORK of a connection: the session holds data (no system call, and
 * getsockopt answers from the session). */
static int set_cork(struct ssw_sock *s, const void *val, socklen_t len)
{
	int on;
	if (len < sizeof on)
		return -EINVAL;
	if (!val)
		return -EFAULT;
	memcpy(&on, val, sizeof on);
	ssw_session_set_cork(s->sess, on != 0);
	return 0;
}

int ssw_setsockopt(struct ssw_sock *s, int fd, int level, int opt, const void *val, socklen_t len)
{
	bool conn = s->state == SSW_ST_CONNECTED && s->sess;
	if (level == IPPROTO_TCP && opt == TCP_CORK && conn)
		return set_cork(s, val, len);
	/* The kernel socket keeps every option (getsockopt reads them back). */
	if (sys_setsockopt(fd, level, opt, val, len) < 0)
		return -errno;
	if (level == IPPROTO_TCP && opt == TCP_NODELAY && conn && val && len >= sizeof(int) && *(const int *)val)
		ssw_session_flush(s->sess); /* as the kernel: pending output goes now, corked or not */
	if (level == IPPROTO_TCP && opt == TCP_CORK && !conn) {
		/* kept for the connection to come: a connect, or (listener) the
		 * accepted ones, which inherit it as in the kernel */
		pthread_mutex_lock(&s->lock);
		s->opts.cork = *(const int *)val != 0;
		if (s->state == SSW_ST_LISTENING)
			s->lopts.cork = s->opts.cork;
		pthread_mutex_unlock(&s->lock);
	}
	if (level != SOL_SOCKET)
		return 0;
	int iv = 0;
	if (len >= sizeof(int))
		memcpy(&iv, val, sizeof iv);
	pthread_mutex_lock(&s->lock);
	bool changed = true;
	switch (opt) {
	case SO_REUSEPORT:
		s->reuseport_ours = false; /* the application's own setting now */
		changed = false;
		break;
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
		share_opt(s, SSW_SOPT_RCVTIMEO, s->rcvtimeo_ms);
		changed = false;
		break;
	case SO_SNDTIMEO:
		s->sndtimeo_ms = timeval_ms(val, len);
		share_opt(s, SSW_SOPT_SNDTIMEO, s->sndtimeo_ms);
		changed = false;
		break;
	case SO_LINGER:
		if (len >= sizeof(struct linger)) {
			struct linger lg;
			memcpy(&lg, val, sizeof lg);
			s->linger_on = lg.l_onoff != 0;
			s->linger_s = lg.l_linger;
			share_opt(s, SSW_SOPT_LINGER, s->linger_on ? s->linger_s : -1);
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
	if (opt == TCP_CORK) {
		int on = ssw_session_cork(s->sess);
		socklen_t n = *len < sizeof on ? *len : sizeof on;
		memcpy(val, &on, n);
		*len = n;
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
	if (level == SOL_SOCKET && opt == SO_REUSEPORT && s->reuseport_ours && val && len && *len >= sizeof(int)) {
		int zero = 0; /* set for the listening proof (proof.c), not by the application */
		memcpy(val, &zero, sizeof zero);
		*len = sizeof zero;
		return 0;
	}
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
		if (arg) {
			atomic_store(&s->nonblock, *(int *)arg != 0);
			share_opt(s, SSW_SOPT_NONBLOCK, *(int *)arg != 0);
		}
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
	share_opt(s, SSW_SOPT_NONBLOCK, (flags & O_NONBLOCK) != 0);
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
