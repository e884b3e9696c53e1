/* io_api.c — interposed data calls.  For a plain fd the cost is one table
 * load; a switched connection goes to its session. */
#include "interpose/interpose.h"

#include <string.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

static ssize_t do_send(struct ssw_sock *s, const struct iovec *iov, int cnt, int flags)
{
	ssize_t r = ssw_send(s, iov, cnt, flags);
	ssw_sock_put(s);
	return r;
}

static ssize_t do_recv(struct ssw_sock *s, const struct iovec *iov, int cnt, int flags)
{
	ssize_t r = ssw_recv(s, iov, cnt, flags);
	ssw_sock_put(s);
	return r;
}

EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	ssw_statreg_answer(); /* a reader of `sockswitch stat` rang (kernel TCP fds too) */
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		struct iovec v = { (void *)buf, len };
		ssize_t r = do_send(s, &v, 1, flags);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(send)(fd, buf, len, flags);
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *a, socklen_t al)
{
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		/* a connected TCP socket ignores the address */
		struct iovec v = { (void *)buf, len };
		ssize_t r = do_send(s, &v, 1, flags);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(sendto)(fd, buf, len, flags, a, al);
}

/* fds in SCM_RIGHTS messages: (at most) the first 64 of them */
static int cmsg_fds(const struct msghdr *m, int *out, int max)
{
	int n = 0;
	if (!m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
		return 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && n < max; i++)
			memcpy(&out[n++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	return n;
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
	ssw_statreg_answer();
	if (m && m->msg_controllen && ssw_has_switched()) {
		/* a switched connection sent to another process goes through a relay */
		int fds[64];
		int n = cmsg_fds(m, fds, 64);
		if (n)
			ssw_relay_fds(fds, n);
	}
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		ssize_t r = do_send(s, m->msg_iov, (int)m->msg_iovlen, flags);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(sendmsg)(fd, m, flags);
}

/* read(), readv() and writev() of nothing: 0 from the VFS before the
 * socket is asked (vfs_writev, sock_read_iter), so the kernel socket answers
 * (write(), send() and recv() of nothing are TCP's: EPIPE after SHUT_WR) */
static bool iov_empty(const struct iovec *iov, int cnt)
{
	for (int i = 0; i < cnt; i++)
		if (iov[i].iov_len)
			return false;
	return cnt >= 0;
}

EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		struct iovec v = { (void *)buf, len };
		ssize_t r = do_send(s, &v, 1, 0);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(write)(fd, buf, len);
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	ssw_statreg_answer();
	struct ssw_sock *s = iov && iov_empty(iov, cnt) ? NULL : ssw_sock_get(fd);
	if (s) {
		ssize_t r = do_send(s, iov, cnt, 0);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(writev)(fd, iov, cnt);
}

EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		struct iovec v = { buf, len };
		ssize_t r = do_recv(s, &v, 1, flags);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(recv)(fd, buf, len, flags);
}

EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		__builtin_trap(); /* what glibc's __chk_fail does, minus the message */
	return recv(fd, buf, len, flags);
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *a, socklen_t *al)
{
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		struct iovec v = { buf, len };
		ssize_t r = do_recv(s, &v, 1, flags);
		if (r != SSW_PASS) {
			if (r >= 0 && a && al)
				*al = 0; /* TCP reports no source address */
			SSW_RET(r);
		}
	}
	return REAL(recvfrom)(fd, buf, len, flags, a, al);
}

EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags, struct sockaddr *a,
			      socklen_t *al)
{
	if (len > buflen)
		__builtin_trap();
	return recvfrom(fd, buf, len, flags, a, al);
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(fd);
	if (s) {
		ssize_t r = do_recv(s, m->msg_iov, (int)m->msg_iovlen, flags);
		if (r != SSW_PASS) {
			if (r >= 0) {
				m->msg_namelen = 0;
				m->msg_controllen = 0;
				/* the urgent byte says so (tcp_recvmsg's recv_urg), and
				 * MSG_TRUNC when there was no room for it */
				m->msg_flags = (flags & MSG_OOB) ? MSG_OOB | (r == 0 ? MSG_TRUNC : 0) : 0;
			}
			SSW_RET(r);
		}
	}
	ssize_t r = REAL(recvmsg)(fd, m, flags);
	if (r >= 0 && m->msg_controllen) {
		/* new fds: whatever the switch knew of those numbers is stale */
		int fds[64];
		int n = cmsg_fds(m, fds, 64);
		for (int i = 0; i < n; i++)
			ssw_fd_fresh(fds[i]);
		/* a switched connection or listener another process sent:
		 * taken up here when that can be done (not for a peek's copies:
		 * the read that follows brings the same ones again) */
		if (n && !(flags & MSG_PEEK))
			ssw_handover_received(fds, n);
	}
	return r;
}

EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	ssw_statreg_answer();
	struct ssw_sock *s = len ? ssw_sock_get(fd) : NULL;
	if (s) {
		struct iovec v = { buf, len };
		ssize_t r = do_recv(s, &v, 1, 0);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(read)(fd, buf, len);
}

EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (len > buflen)
		__builtin_trap();
	return read(fd, buf, len);
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	ssw_statreg_answer();
	struct ssw_sock *s = iov && iov_empty(iov, cnt) ? NULL : ssw_sock_get(fd);
	if (s) {
		ssize_t r = do_recv(s, iov, cnt, 0);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(readv)(fd, iov, cnt);
}

EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	ssw_statreg_answer();
	struct ssw_sock *s = ssw_sock_get(out);
	if (s) {
		ssize_t r = ssw_sendfile(s, in, off, count);
		ssw_sock_put(s);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(sendfile)(out, in, off, count);
}

static bool is_pipe(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* splice with a switched socket on one side: the other must be a pipe, and
 * neither takes an offset (the kernel: EINVAL, ESPIPE). */
static ssize_t splice_switched(struct ssw_sock *in, int fd_in, loff_t *off_in, struct ssw_sock *out, int fd_out,
			       loff_t *off_out, size_t len, unsigned flags)
{
	bool pin = !in && is_pipe(fd_in), pout = !out && is_pipe(fd_out);
	if (!pin && !pout)
		return -EINVAL;
	if ((pin && off_in) || (pout && off_out))
		return -ESPIPE;
	if (off_in || off_out)
		return -EINVAL;
	if (len == 0)
		return 0;
	return out ? ssw_splice_from_pipe(out, fd_in, len, flags) : ssw_splice_to_pipe(in, fd_out, len, flags);
}

EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags)
{
	ssw_statreg_answer();
	struct ssw_sock *in = ssw_sock_get(fd_in);
	struct ssw_sock *out = ssw_sock_get(fd_out);
	if (in || out) {
		ssize_t r = splice_switched(in, fd_in, off_in, out, fd_out, off_out, len, flags);
		ssw_sock_put(in);
		ssw_sock_put(out);
		if (r != SSW_PASS)
			SSW_RET(r);
	}
	return REAL(splice)(fd_in, off_in, fd_out, off_out, len, flags);
}

EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
	return sendfile(out, in, off, count);
}
