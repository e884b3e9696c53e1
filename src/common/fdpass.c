/* fdpass.c — one message with descriptors over a Unix socket (fdpass.h). */
#include "common/fdpass.h"

#include "common/sys.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

int ssw_fdpass_send(int sock, const void *msg, size_t len, const int *fds, int n, int flags)
{
	union {
		char buf[CMSG_SPACE(SSW_FDPASS_MAX * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { (void *)msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n < 0 || n > SSW_FDPASS_MAX)
		return -EINVAL;
	if (n) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)n * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
	}
	ssize_t r;
	while ((r = sys_sendmsg(sock, &mh, flags)) < 0 && errno == EINTR)
		;
	if (r < 0)
		return -errno;
	return r == (ssize_t)len ? 0 : -EPROTO;
}

ssize_t ssw_fdpass_recv(int sock, void *msg, size_t len, int *fds, int max, int *got, int flags)
{
	union {
		char buf[CMSG_SPACE(SSW_FDPASS_MAX * sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	*got = 0;
	ssize_t r;
	while ((r = sys_recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (r < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
			if (*got < max)
				fds[(*got)++] = f;
			else
				sys_close(f);
		}
	}
	if (r > 0 && (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		for (int i = 0; i < *got; i++)
			sys_close(fds[i]);
		*got = 0;
		return -EPROTO;
	}
	return r;
}
