/* privdrop.c — a fork-per-connection server whose children drop privileges
 * (setuid to nobody), and one of them then turns hostile: it scribbles over
 * every piece of shared memory it maps (the connection's fork-shared state,
 * the segment) while the privileged parent still holds that connection.
 * What the switch must give (session_unshare.c): a child maps none of its
 * parent's stat registry file; the child that dropped
 * privileges keeps serving its connection; the parent's copy reads as
 * reset and closes cleanly; the parent neither crashes nor hangs, and its
 * listener goes on serving.
 *
 *   privdrop            run as root (exit 77 otherwise)
 *
 * A last child only switches its effective uid and back (a root daemon's
 * seteuid around a file access): that gives up nothing, the connection
 * stays shared and the parent answers on it.
 *
 * Prints "RESULT legit=ok|bad hostile=ok|bad after=ok|bad toggle=ok|bad"
 * (and a reason on stderr for each bad); exit 0 when all are ok, 1 otherwise, 77
 * when not root.  The parent stops itself after 30 s (SIGALRM: a hang). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "readfull.h"

#define REQ 64
#define NOBODY 65534

static int answer(int fd)
{
	unsigned char b[REQ];
	if (read_full(fd, b, REQ) < 0)
		return -1;
	for (int i = 0; i < REQ; i++)
		b[i]++;
	return write(fd, b, REQ) == REQ ? 0 : -1;
}

/* 0: the answer is the request plus one, byte by byte */
static int ask(int fd, unsigned char seed)
{
	unsigned char q[REQ], a[REQ];
	for (int i = 0; i < REQ; i++)
		q[i] = (unsigned char)(seed + i);
	if (write(fd, q, REQ) != REQ || read_full(fd, a, REQ) < 0)
		return -1;
	for (int i = 0; i < REQ; i++)
		if (a[i] != (unsigned char)(q[i] + 1))
			return -1;
	return 0;
}

static int dial(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
		return -1;
	return fd;
}

/* The client: the legit connection (answered, then an orderly end), the
 * one the hostile child holds (anything but a hang), and one more to the
 * parent itself. */
static int client(int port)
{
	int bad = 0;
	int c1 = dial(port);
	if (c1 < 0 || ask(c1, 1) < 0) {
		fprintf(stderr, "client: legit connection not answered right\n");
		bad = 1;
	} else {
		char x;
		ssize_t r = read(c1, &x, 1);
		if (r != 0) {
			fprintf(stderr, "client: legit connection: read after the answer %zd (%s), not end-of-file\n", r,
				r < 0 ? strerror(errno) : "data");
			bad = 1;
		}
	}
	close(c1);
	int c2 = dial(port);
	unsigned char q[REQ] = { 0 };
	if (c2 >= 0)
		(void)!write(c2, q, REQ);
	struct pollfd p = { .fd = c2, .events = POLLIN };
	(void)poll(&p, 1, 5000); /* the server closes it: whatever comes, no hang */
	close(c2);
	int c3 = dial(port);
	if (c3 < 0 || ask(c3, 7) < 0) {
		fprintf(stderr, "client: the parent's own connection after the attack not answered right\n");
		bad = 1;
	}
	close(c3);
	int c4 = dial(port);
	if (c4 < 0 || ask(c4, 11) < 0) {
		fprintf(stderr, "client: the connection whose child only switched its euid and back not answered right\n");
		bad = 1;
	}
	close(c4);
	return bad;
}

static void drop(void)
{
	if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0) {
		perror("setuid");
		_exit(3);
	}
	/* never outlive the test (the change of user cleared the death signal) */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(30);
}

/* The hostile child: every shared writable mapping it has, overwritten;
 * *stat: how many of them were a process's stat registry file (its
 * parent's: a child has none of its own yet). */
static int scribble(int *stat)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	char line[512];
	int n = 0;
	*stat = 0;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[1] != 'w' || perms[3] != 's')
			continue;
		*stat += strstr(line, ".stat") != NULL;
		memset((void *)lo, 0x41, hi - lo);
		n++;
	}
	fclose(f);
	return n;
}

int main(void)
{
	if (geteuid() != 0) {
		printf("SKIP not root\n");
		return 77;
	}
	/* the client first, told the port over a pipe: over fabric a fork
	 * before the listener's first accept would leave it kernel TCP */
	int port_pipe[2];
	if (pipe(port_pipe) < 0)
		return 1;
	pid_t cl = fork();
	if (cl == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(30);
		int port = 0;
		if (read(port_pipe[0], &port, sizeof port) != sizeof port)
			_exit(1);
		_exit(client(port));
	}
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof a;
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 16) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0) {
		perror("listen");
		return 1;
	}
	int port = ntohs(a.sin_port);
	(void)!write(port_pipe[1], &port, sizeof port);
	alarm(30);
	int legit = 1, hostile = 1, after = 1, st;

	/* legit: the child drops privileges and answers; the parent closes its
	 * copy only after the drop (its close must not end the connection) */
	int pp[2], back[2]; /* child -> parent, parent -> child */
	if (pipe(pp) < 0 || pipe(back) < 0)
		return 1;
	int a1 = accept(l, NULL, NULL);
	pid_t k = fork();
	if (k == 0) {
		close(l);
		drop();
		(void)!write(pp[1], "d", 1);
		char go;
		(void)!read(back[0], &go, 1); /* the parent closed its copy */
		_exit(answer(a1) < 0 ? 4 : 0);
	}
	char x;
	(void)!read(pp[0], &x, 1);
	if (close(a1) < 0) {
		fprintf(stderr, "legit: the parent's close after the child's drop: %s\n", strerror(errno));
		legit = 0;
	}
	(void)!write(back[1], "g", 1);
	if (waitpid(k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "legit: the child that dropped privileges failed (status %d)\n", st);
		legit = 0;
	}

	/* hostile: the child drops, scribbles, and stays; the parent uses and
	 * closes its copy */
	int a2 = accept(l, NULL, NULL);
	k = fork();
	if (k == 0) {
		close(l);
		drop();
		int stat = 0, n = scribble(&stat);
		(void)!write(pp[1], stat ? "t" : n > 0 ? "s" : "n", 1);
		pause();
		_exit(0);
	}
	(void)!read(pp[0], &x, 1);
	if (x != 's') {
		fprintf(stderr, "hostile: %s\n",
			x == 't' ? "the child maps its parent's stat registry file"
				 : "the child found no shared mapping to scribble on");
		hostile = 0;
	}
	unsigned char q[REQ] = { 0 };
	ssize_t w = send(a2, q, REQ, MSG_NOSIGNAL);
	int e = errno;
	if (w >= 0 || (e != ECONNRESET && e != EPIPE)) {
		fprintf(stderr, "hostile: the parent's send on its copy: %zd (%s), not a reset\n", w,
			w < 0 ? strerror(e) : "sent");
		hostile = 0;
	}
	struct pollfd p = { .fd = a2, .events = POLLIN | POLLOUT };
	if (poll(&p, 1, 1000) != 1 || !(p.revents & (POLLERR | POLLHUP))) {
		fprintf(stderr, "hostile: the parent's poll on its copy: revents %#x\n", p.revents);
		hostile = 0;
	}
	if (close(a2) < 0) {
		fprintf(stderr, "hostile: the parent's close: %s\n", strerror(errno));
		hostile = 0;
	}
	kill(k, SIGKILL);
	waitpid(k, &st, 0);

	/* after: the parent's listener and a connection of its own still work */
	int a3 = accept(l, NULL, NULL);
	if (a3 < 0 || answer(a3) < 0) {
		fprintf(stderr, "after: the parent's own connection failed\n");
		after = 0;
	}
	close(a3);

	/* toggle: a child that takes another euid and comes back (saved uid 0:
	 * it could always return) has given up nothing: the connection stays
	 * shared, and the parent answers on it */
	int toggle = 1;
	int a4 = accept(l, NULL, NULL);
	k = fork();
	if (k == 0) {
		close(l);
		if (seteuid(NOBODY) < 0 || seteuid(0) < 0)
			_exit(3);
		(void)!write(pp[1], "e", 1);
		char go;
		(void)!read(back[0], &go, 1);
		_exit(0);
	}
	(void)!read(pp[0], &x, 1);
	if (a4 < 0 || answer(a4) < 0) {
		fprintf(stderr, "toggle: the parent could not answer after its child's seteuid and back\n");
		toggle = 0;
	}
	(void)!write(back[1], "g", 1);
	waitpid(k, &st, 0);
	close(a4);
	if (waitpid(cl, &st, 0) != cl || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "client failed (status %d)\n", st);
		legit = 0;
	}
	printf("RESULT legit=%s hostile=%s after=%s toggle=%s\n", legit ? "ok" : "bad", hostile ? "ok" : "bad",
	       after ? "ok" : "bad", toggle ? "ok" : "bad");
	return legit && hostile && after && toggle ? 0 : 1;
}
