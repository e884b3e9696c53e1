/* move_spoof.c — a hostile local user against the listener a suspended
 * peer opens for a transport moving with control (switch/setup/move.c,
 * session/session_move.c), for t_hostile_move.sh.  It finds root's
 * listening TCP ports in its network namespace (/proc/net/tcp, which any
 * user reads), leaves out the ones named on its command line, and until
 * its time is up, on each port in turn:
 *   raw      a kernel TCP connect that writes garbage and closes;
 *   forged   a fabric connect under the move protocol with the right magic
 *            and a random token (a guess: 16 random bytes);
 *   garbage  a fabric connect under the move protocol with random private
 *            data of random length;
 *   squat    (ports from /proc/net/tcp only: local ones) a listener of its
 *            own on the same port, to take the next transport instead of
 *            root's: on the same address plain, with SO_REUSEADDR, with
 *            SO_REUSEPORT, with IP_FREEBIND and SO_REUSEPORT, on 0.0.0.0
 *            with SO_REUSEPORT, on [::] dual-stack (IPV6_V6ONLY off) with
 *            SO_REUSEPORT; each listen that succeeds while root's listener
 *            is still there counts.
 * It uses the switch's own fabric provider (the library itself is the
 * attacker's tool too).  A fabric connect that completes is watched for
 * 100 ms: any message on it would be the connection's data leaking.
 * usage: move_spoof SECONDS [EXCLUDE_PORT...]
 *        MOVE_SPOOF_TARGETS=IP:PORT[,IP:PORT...] dials those instead (from
 *        another namespace, where /proc/net/tcp does not show them)
 * prints "RESULT ports=N raw=N forged=N garbage=N completed=N leaked=N
 * squats=N squatted=N". */
#include <sockswitch/provider.h>

#include "common/sys.h"
#include "session/session.h"
#include "switch/setup/setup_priv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

extern const struct ssw_provider ssw_provider_fabric;
static const struct ssw_provider *P = &ssw_provider_fabric;

#define MAX_PORTS 32
#define MAX_TRIES 400 /* of each kind on each port: the loop ends by itself */

static struct {
	long raw, forged, garbage, completed, leaked, squats, squatted;
} n;

/* Root's listening IPv4 sockets, except the ports excluded. */
struct target {
	uint32_t ip; /* as the kernel prints it: the address's bytes in memory order */
	int port;
};

static int root_listeners(struct target *ts, int max, char **excl, int nexcl)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	if (!f)
		return 0;
	char line[512];
	int k = 0;
	if (!fgets(line, sizeof line, f)) {
		fclose(f);
		return 0;
	}
	while (k < max && fgets(line, sizeof line, f)) {
		unsigned ip, port, st, uid;
		if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %u", &ip, &port, &st, &uid) != 4)
			continue;
		if (st != 0x0A || uid != 0)
			continue;
		int skip = 0;
		for (int i = 0; i < nexcl; i++)
			skip |= atoi(excl[i]) == (int)port;
		if (!skip)
			ts[k++] = (struct target){ ip ? ip : htonl(INADDR_LOOPBACK), (int)port };
	}
	fclose(f);
	return k;
}

/* Does root still listen on port (beside us, when we just took it)? */
static bool root_listens(int port)
{
	struct target ts[MAX_PORTS];
	int k = root_listeners(ts, MAX_PORTS, NULL, 0);
	for (int i = 0; i < k; i++)
		if (ts[i].port == port)
			return true;
	return false;
}

static int given_targets(const char *list, struct target *ts, int max)
{
	int k = 0;
	char buf[512];
	snprintf(buf, sizeof buf, "%s", list);
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && k < max; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':');
		struct in_addr ia;
		if (!colon)
			continue;
		*colon = 0;
		if (inet_pton(AF_INET, tok, &ia) == 1 && atoi(colon + 1) > 0)
			ts[k++] = (struct target){ ia.s_addr, atoi(colon + 1) };
	}
	return k;
}

static struct sockaddr_in addr(const struct target *t)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)t->port) };
	a.sin_addr.s_addr = t->ip;
	return a;
}

static void raw(const struct target *t)
{
	struct sockaddr_in a = addr(t);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS) {
		struct pollfd pf = { .fd = fd, .events = POLLOUT };
		if (poll(&pf, 1, 500) == 1) {
			char junk[512];
			if (getrandom(junk, sizeof junk, 0) == (ssize_t)sizeof junk && write(fd, junk, sizeof junk) > 0)
				n.raw++;
		}
	}
	close(fd);
}

/* One way of binding the port for ourselves: 0 or the SO_* option to set,
 * freebind, the wildcard, IPv6 dual-stack. */
struct squat_way {
	int opt;
	bool freebind, any, v6;
};

static void squat_one(const struct target *t, const struct squat_way *w)
{
	int one = 1, zero = 0;
	int fd = socket(w->v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (w->opt)
		(void)setsockopt(fd, SOL_SOCKET, w->opt, &one, sizeof one);
	if (w->freebind)
		(void)setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof one);
	if (w->v6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
	int rc;
	if (w->v6) {
		struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)t->port), .sin6_addr = in6addr_any };
		rc = bind(fd, (struct sockaddr *)&a6, sizeof a6);
	} else {
		struct sockaddr_in a = addr(t);
		if (w->any)
			a.sin_addr.s_addr = htonl(INADDR_ANY);
		rc = bind(fd, (struct sockaddr *)&a, sizeof a);
	}
	n.squats++;
	/* a port root no longer listens on (its server ended) is anyone's */
	if (rc == 0 && listen(fd, 4) == 0 && root_listens(t->port)) {
		n.squatted++;
		fprintf(stderr, "move_spoof: took port %d (opt %d freebind %d any %d v6 %d)\n", t->port, w->opt,
			w->freebind, w->any, w->v6);
	}
	close(fd);
}

static void squat(const struct target *t)
{
	static const struct squat_way ways[] = {
		{ 0, false, false, false },	      { SO_REUSEADDR, false, false, false },
		{ SO_REUSEPORT, false, false, false }, { SO_REUSEPORT, true, false, false },
		{ SO_REUSEPORT, false, true, false },  { SO_REUSEPORT, false, true, true },
	};
	for (unsigned i = 0; i < sizeof ways / sizeof ways[0]; i++)
		squat_one(t, &ways[i]);
}

static void fabric(const struct target *t, const void *priv, size_t len)
{
	struct sockaddr_in a = addr(t);
	struct ssw_ep *ep = NULL;
	int rc = P->conn->connect((struct sockaddr *)&a, sizeof a, SSW_MOVE_PROTO, priv, len, &ep);
	uint64_t dl = ssw_now_ns() + 1000000000ull;
	while (rc == -EINPROGRESS && ssw_now_ns() < dl) {
		struct pollfd pf = { .fd = P->conn->connect_fd(ep), .events = POLLIN };
		(void)poll(&pf, 1, 10);
		uint8_t reply[SSW_CONNECT_PRIV_MAX];
		size_t rl = sizeof reply;
		rc = P->conn->connect_complete(ep, reply, &rl);
	}
	if (rc == 0) {
		n.completed++;
		uint64_t end = ssw_now_ns() + 100000000ull;
		while (ssw_now_ns() < end) {
			const void *m;
			size_t ml;
			int r = P->msg->recv_peek(ep, &m, &ml);
			if (r >= 0) {
				n.leaked++;
				break;
			}
			if (r != -EAGAIN)
				break;
			usleep(2000);
		}
	}
	if (ep)
		P->conn->close(ep, SSW_CLOSE_ABORT);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: move_spoof SECONDS [EXCLUDE_PORT...]\n");
		return 2;
	}
	char err[160] = "";
	/* no port offset: the ports in /proc/net/tcp are the ones to dial */
	if (P->configure("provider", "tcp", err, sizeof err) || P->configure("port-offset", "0", err, sizeof err) ||
	    P->init() != 0) {
		fprintf(stderr, "move_spoof: fabric provider unusable: %s\n", err);
		return 1;
	}
	uint64_t end = ssw_now_ns() + (uint64_t)(atof(argv[1]) * 1e9);
	struct target ts[MAX_PORTS];
	int np = 0;
	/* the peer opens its listener at its first suspension: look until then */
	const char *given = getenv("MOVE_SPOOF_TARGETS");
	while (!np && ssw_now_ns() < end) {
		np = given ? given_targets(given, ts, MAX_PORTS) : root_listeners(ts, MAX_PORTS, argv + 2, argc - 2);
		if (!np)
			usleep(20000);
	}
	for (int t = 0; t < MAX_TRIES && np && ssw_now_ns() < end; t++) {
		for (int i = 0; i < np; i++) {
			if (!given)
				squat(&ts[i]);
			raw(&ts[i]);
			struct ssw_move_priv mp = { .magic = SSW_MOVE_MAGIC };
			if (getrandom(mp.token, sizeof mp.token, 0) == (ssize_t)sizeof mp.token) {
				fabric(&ts[i], &mp, sizeof mp);
				n.forged++;
			}
			uint8_t junk[SSW_CONNECT_PRIV_MAX];
			if (getrandom(junk, sizeof junk, 0) == (ssize_t)sizeof junk) {
				fabric(&ts[i], junk, 1 + junk[0] % sizeof junk);
				n.garbage++;
			}
		}
	}
	printf("RESULT ports=%d raw=%ld forged=%ld garbage=%ld completed=%ld leaked=%ld squats=%ld squatted=%ld\n", np,
	       n.raw, n.forged, n.garbage, n.completed, n.leaked, n.squats, n.squatted);
	return 0;
}
