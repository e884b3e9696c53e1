/* bench_netns.c — `bench --netns`: two throw-away network namespaces joined by a veth pair, so that server and client talk as two hosts do. */
#include "bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The namespaces have no name (nothing under /run/netns): the bench holds
 * them by descriptor, so they and the veth inside vanish with the bench
 * however it ends, and parallel runs never collide. */

/* Runs `ip ARGS…` inside nsfd (or here when -1); 0, or -1 with ip's last
 * words in err. */
static int run_ip(int nsfd, char *const argv[], char *err, size_t len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(err, len, "pipe: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, len, "fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(p[1], 2) < 0)
			_exit(127);
		if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0) {
			dprintf(2, "setns: %s", strerror(errno));
			_exit(127);
		}
		execvp("ip", argv);
		dprintf(2, "cannot run ip (iproute2): %s", strerror(errno));
		_exit(127);
	}
	close(p[1]);
	char buf[256];
	size_t got = 0;
	ssize_t r;
	while ((r = read(p[0], buf + got, sizeof(buf) - 1 - got)) > 0 || (r < 0 && errno == EINTR))
		if (r > 0 && (got += (size_t)r) == sizeof(buf) - 1)
			break;
	buf[got] = '\0';
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	buf[strcspn(buf, "\n")] = '\0';
	snprintf(err, len, "ip %s %s: %s", argv[1], argv[2], got ? buf : "failed");
	return -1;
}

/* A child that moves into a new network namespace and waits there until
 * killed, so that `ip link add … netns PID` can name the namespace. */
static pid_t holder(char *err, size_t len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(err, len, "pipe: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		char ok = unshare(CLONE_NEWNET) == 0 ? 1 : 0;
		int e = errno;
		if (write(p[1], &ok, 1) != 1 || !ok)
			_exit(e & 0x7f);
		for (;;)
			pause();
	}
	close(p[1]);
	char ok = 0;
	ssize_t r = pid > 0 ? read(p[0], &ok, 1) : -1;
	close(p[0]);
	if (pid < 0 || r != 1 || !ok) {
		int st = 0;
		if (pid > 0)
			waitpid(pid, &st, 0);
		snprintf(err, len, "cannot make a network namespace (unshare: %s; --netns needs root)",
			 pid < 0 ? strerror(errno) : strerror(WIFEXITED(st) ? WEXITSTATUS(st) : EPERM));
		return -1;
	}
	return pid;
}

static void reap(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
}

/* The veth's carrier comes up asynchronously: a child makes a listener in
 * the server's namespace and connects to it from the client's until that
 * works (a socket stays in the namespace it was made in), for up to 5 s. */
static int wait_link(const struct bench_where *w, char *err, size_t len)
{
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, len, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		struct sockaddr_in sa = { .sin_family = AF_INET };
		socklen_t sl = sizeof(sa);
		inet_pton(AF_INET, w->addr, &sa.sin_addr);
		int l = -1;
		if (setns(w->nsfd[0], CLONE_NEWNET) < 0 || (l = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
		    bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 64) < 0 ||
		    getsockname(l, (struct sockaddr *)&sa, &sl) < 0 || setns(w->nsfd[1], CLONE_NEWNET) < 0)
			_exit(2);
		for (double end = bench_now() + 5; bench_now() < end;) {
			int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
			if (c < 0)
				_exit(2);
			int e = connect(c, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : errno;
			if (e == EINPROGRESS) {
				struct pollfd pf = { c, POLLOUT, 0 };
				socklen_t el = sizeof(e);
				e = poll(&pf, 1, 200) == 1 && getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &el) == 0 ? e : ETIMEDOUT;
			}
			close(c);
			if (e == 0)
				_exit(0);
			usleep(20000);
		}
		_exit(1);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	snprintf(err, len, "no TCP connection across the veth pair within 5 s");
	return -1;
}

int bench_netns_up(struct bench_where *w, char *err, size_t len)
{
	pid_t h[2] = { -1, -1 };
	char dev[2][16], pidstr[2][16], addr[2][32];
	int rc = -1;

	w->nsfd[0] = w->nsfd[1] = -1;
	for (int i = 0; i < 2; i++) {
		if ((h[i] = holder(err, len)) < 0)
			goto out;
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)h[i]);
		if ((w->nsfd[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			snprintf(err, len, "%s: %s", path, strerror(errno));
			goto out;
		}
		snprintf(dev[i], sizeof(dev[i]), "sbv%d%c", (int)getpid() % 10000000, i ? 'c' : 's');
		snprintf(pidstr[i], sizeof(pidstr[i]), "%d", (int)h[i]);
		snprintf(addr[i], sizeof(addr[i]), "%s.%d/24", BENCH_NETNS_NET, i + 1);
	}
	char *veth[] = { "ip", "link", "add", dev[0], "netns", pidstr[0], "type", "veth",
			 "peer", "name", dev[1], "netns", pidstr[1], NULL };
	if (run_ip(-1, veth, err, len) < 0)
		goto out;
	for (int i = 0; i < 2; i++) {
		char *a[] = { "ip", "addr", "add", addr[i], "dev", dev[i], NULL };
		char *lo[] = { "ip", "link", "set", "lo", "up", NULL };
		char *up[] = { "ip", "link", "set", dev[i], "up", NULL };
		if (run_ip(w->nsfd[i], a, err, len) < 0 || run_ip(w->nsfd[i], lo, err, len) < 0 ||
		    run_ip(w->nsfd[i], up, err, len) < 0)
			goto out;
	}
	snprintf(w->addr, sizeof(w->addr), "%s.1", BENCH_NETNS_NET);
	rc = wait_link(w, err, len);
out:
	/* from here on the descriptors alone keep the namespaces */
	reap(h[0]);
	reap(h[1]);
	if (rc < 0)
		bench_netns_down(w);
	return rc;
}

void bench_netns_down(struct bench_where *w)
{
	for (int i = 0; i < 2; i++)
		if (w->nsfd[i] >= 0) {
			close(w->nsfd[i]);
			w->nsfd[i] = -1;
		}
}

int bench_netns_enter(const struct bench_where *w, int client)
{
	return w && w->nsfd[client] >= 0 ? setns(w->nsfd[client], CLONE_NEWNET) : 0;
}
