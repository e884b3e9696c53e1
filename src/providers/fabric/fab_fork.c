/* fab_fork.c — libfabric objects across fork: which descriptors a connection's
 * transport holds (for a relay process that closes all others), and freeing
 * this process's copy of objects that another process (a fork) still uses,
 * without disturbing it: the epoll sets they
 * hold are kernel objects shared across fork, and libfabric's close takes
 * its sockets out of them (epoll_ctl DEL), which would silence the other
 * process.  So each such epoll fd is first replaced, in our fd table only,
 * by an empty one of our own; the close then changes nothing shared, and
 * only drops our references (a socket closed here is not shut down). */
#include "providers/fabric/fab_priv.h"

#include "common/provfds.h"
#include "common/sys.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static bool is_epoll(int fd)
{
	char p[64], t[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(p, t, sizeof t - 1);
	if (n <= 0)
		return false;
	t[n] = '\0';
	return strcmp(t, "anon_inode:[eventpoll]") == 0;
}

int fab_epoll_members(int epfd, struct fab_member *out, int max)
{
	char p[64], line[256];
	snprintf(p, sizeof p, "/proc/self/fdinfo/%d", epfd);
	int f = (int)SYS_(openat, AT_FDCWD, p, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return 0;
	FILE *fp = fdopen(f, "r");
	if (!fp) {
		sys_close(f);
		return 0;
	}
	int n = 0, t;
	unsigned ev;
	unsigned long long data;
	while (n < max && fgets(line, sizeof line, fp))
		if (sscanf(line, "tfd: %d events: %x data: %llx", &t, &ev, &data) == 3 && t >= 0)
			out[n++] = (struct fab_member){ .fd = t, .events = ev, .data = data };
	fclose(fp);
	return n;
}

/* The fds an epoll set watches. */
static int epoll_targets(int fd, int *out, int max)
{
	struct fab_member m[64];
	int n = fab_epoll_members(fd, m, max < 64 ? max : 64);
	for (int i = 0; i < n; i++)
		out[i] = m[i].fd;
	return n;
}

static void neuter(int fd, int depth)
{
	if (fd < 0 || depth > 3 || !is_epoll(fd))
		return;
	int t[64];
	int n = epoll_targets(fd, t, 64);
	for (int i = 0; i < n; i++)
		if (t[i] != fd)
			neuter(t[i], depth + 1);
	int e = sys_epoll_create1(EPOLL_CLOEXEC);
	if (e < 0)
		return;
	if (e != fd)
		(void)SYS_(dup3, e, fd, O_CLOEXEC);
	sys_close(e);
}

void fab_unshare_fds(int fd) { neuter(fd, 0); }

static bool have(const int *fds, int n, int fd)
{
	for (int i = 0; i < n; i++)
		if (fds[i] == fd)
			return true;
	return false;
}

static int add(int *fds, int n, int max, int fd)
{
	if (fd >= 0 && n < max && !have(fds, n, fd))
		fds[n++] = fd;
	return n;
}

/* Its socket and wake_fd, the hub's and the event queue's wait sets with
 * their signals (both ends: libfabric writes the one that is in no set),
 * and, for a hub of its own, what that set watches.  Not the members of a
 * shared hub's set: other connections' sockets (the process keeping this
 * one must let them go). */
int fab_keep_fds(struct ssw_ep *ep, int *fds, int max)
{
	int n = 0;
	n = add(fds, n, max, fab_data_fd(ep));
	n = add(fds, n, max, ep->wake_fd);
	struct fab_hub *h = ep->hub;
	if (h) {
		n = add(fds, n, max, h->cq_fd);
		n = add(fds, n, max, h->sig_fd);
		n = add(fds, n, max, ssw_provfd_partner(h->sig_fd));
	}
	if (ep->fab && ep->fab->eq) {
		n = add(fds, n, max, ep->fab->eq_fd);
		n = add(fds, n, max, ep->fab->eq_sig);
		n = add(fds, n, max, ssw_provfd_partner(ep->fab->eq_sig));
	}
	for (int i = 0; i < n; i++) { /* n grows: a breadth-first walk */
		bool shared_set = h && h->shared && fds[i] == h->cq_fd;
		if (!shared_set && is_epoll(fds[i])) {
			int t[16];
			int k = epoll_targets(fds[i], t, 16);
			for (int j = 0; j < k; j++)
				n = add(fds, n, max, t[j]);
		}
		n = add(fds, n, max, ssw_provfd_partner(fds[i]));
	}
	return n;
}
