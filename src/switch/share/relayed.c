/* relayed.c — fds that carry a switched connection through a relay process
 * (relay.c): kernel AF_UNIX stream sockets to the application, so reads,
 * writes and readiness are the kernel's own; only what would show the
 * difference (addresses, the socket's domain and protocol, TCP and IP
 * options) is answered from what this table remembers of the connection.
 * A process that gets such an fd another way (exec, SCM_RIGHTS) recognises
 * it by the relay's name (ssw_relayed_recognize), so a program exec'd with
 * an inherited connection (inetd, sshd, socat EXEC) sees its TCP peer. */
#include "switch/share/relay.h"
#include "common/forklocal.h"

#include "common/sys.h"
#include "switch/sock/addr.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>

struct relayed {
	struct sockaddr_storage local, peer;
	socklen_t local_len, peer_len;
	int nodelay;
};

#define lock (ssw_fl->relayed_lock) /* fork-local: a child's is a fresh one */
static struct relayed **tab;
static int tab_len;
static _Atomic int count; /* entries: a process without any skips the lock */

static int set_locked(int fd, const struct relayed *r)
{
	if (fd < 0)
		return -EBADF;
	if (fd >= tab_len) {
		int n = tab_len ? tab_len : 64;
		while (n <= fd)
			n *= 2;
		struct relayed **t = realloc(tab, (size_t)n * sizeof *t);
		if (!t)
			return -ENOMEM;
		memset(t + tab_len, 0, (size_t)(n - tab_len) * sizeof *t);
		tab = t;
		tab_len = n;
	}
	if (!tab[fd]) {
		tab[fd] = malloc(sizeof *tab[fd]);
		if (!tab[fd])
			return -ENOMEM;
		atomic_fetch_add(&count, 1);
	}
	*tab[fd] = *r;
	return 0;
}

static void drop_locked(int fd)
{
	if (fd >= 0 && fd < tab_len && tab[fd]) {
		free(tab[fd]);
		tab[fd] = NULL;
		atomic_fetch_sub(&count, 1);
	}
}

int ssw_relayed_add(int fd, const struct sockaddr_storage *local, socklen_t llen,
		    const struct sockaddr_storage *peer, socklen_t plen)
{
	struct relayed r = { .local = *local, .peer = *peer, .local_len = llen, .peer_len = plen, .nodelay = 1 };
	pthread_mutex_lock(&lock);
	int e = set_locked(fd, &r);
	pthread_mutex_unlock(&lock);
	return e;
}

void ssw_relayed_drop(int fd)
{
	if (!atomic_load_explicit(&count, memory_order_relaxed))
		return;
	pthread_mutex_lock(&lock);
	drop_locked(fd);
	pthread_mutex_unlock(&lock);
}

void ssw_relayed_dup(int oldfd, int newfd)
{
	if (!atomic_load_explicit(&count, memory_order_relaxed))
		return;
	pthread_mutex_lock(&lock);
	if (oldfd >= 0 && oldfd < tab_len && tab[oldfd] && oldfd != newfd) {
		struct relayed r = *tab[oldfd];
		(void)set_locked(newfd, &r);
	}
	pthread_mutex_unlock(&lock);
}

void ssw_relayed_close_range(unsigned lo, unsigned hi)
{
	if (!atomic_load_explicit(&count, memory_order_relaxed))
		return;
	pthread_mutex_lock(&lock);
	for (unsigned fd = lo; fd <= hi && fd < (unsigned)tab_len; fd++)
		drop_locked((int)fd);
	pthread_mutex_unlock(&lock);
}

static int put_addr(const struct sockaddr_storage *ss, socklen_t sl, struct sockaddr *a, socklen_t *l)
{
	if (!a || !l)
		return -EFAULT;
	ssw_addr_copy_out(ss, sl, a, l);
	return 0;
}

static int put_int(int v, void *val, socklen_t *len)
{
	if (!val || !len || *len < (socklen_t)sizeof(int))
		return -EINVAL;
	memcpy(val, &v, sizeof v);
	*len = sizeof v;
	return 0;
}

/* Answers for a relayed fd; SSW_PASS when fd is not one, or the kernel's
 * AF_UNIX answer is the same as TCP's. */
int ssw_relayed_query(int fd, enum ssw_relayed_q q, int level, int opt, void *val, socklen_t *len)
{
	if (!atomic_load_explicit(&count, memory_order_relaxed))
		return SSW_PASS;
	int r = SSW_PASS;
	pthread_mutex_lock(&lock);
	struct relayed *e = fd >= 0 && fd < tab_len ? tab[fd] : NULL;
	if (!e)
		goto out;
	switch (q) {
	case SSW_RQ_SOCKNAME:
		r = put_addr(&e->local, e->local_len, val, len);
		break;
	case SSW_RQ_PEERNAME:
		r = put_addr(&e->peer, e->peer_len, val, len);
		break;
	case SSW_RQ_GETOPT:
		if (level == SOL_SOCKET && opt == SO_DOMAIN)
			r = put_int(e->local.ss_family, val, len);
		else if (level == SOL_SOCKET && opt == SO_PROTOCOL)
			r = put_int(IPPROTO_TCP, val, len);
		else if (level == IPPROTO_TCP && opt == TCP_NODELAY)
			r = put_int(e->nodelay, val, len);
		else if (level == IPPROTO_TCP && opt == TCP_MAXSEG)
			r = put_int(65483, val, len); /* loopback's */
		else if (level == IPPROTO_TCP && opt == TCP_INFO) {
			struct tcp_info ti;
			memset(&ti, 0, sizeof ti);
			ti.tcpi_state = TCP_ESTABLISHED;
			socklen_t n = *len < (socklen_t)sizeof ti ? *len : (socklen_t)sizeof ti;
			memcpy(val, &ti, n);
			*len = n;
			r = 0;
		} else if (level == IPPROTO_TCP || level == IPPROTO_IP || level == IPPROTO_IPV6)
			r = put_int(0, val, len); /* options the relay has no use for read as unset */
		break;
	case SSW_RQ_SETOPT:
		if (level == IPPROTO_TCP && opt == TCP_NODELAY && val && *len >= (socklen_t)sizeof(int))
			e->nodelay = *(const int *)val != 0;
		if (level == IPPROTO_TCP || level == IPPROTO_IP || level == IPPROTO_IPV6)
			r = 0; /* accepted: the relay keeps the peer connection as it is */
		break;
	}
out:
	pthread_mutex_unlock(&lock);
	return r;
}

/* ---- recognising a relay's socket -------------------------------------- */

/* The relay listens on an abstract Unix name that carries the connection's
 * addresses, and the application's end is connected to it: so any process
 * that ends up with that end (through exec, SCM_RIGHTS or fork) can ask the
 * kernel (getpeername) what it stands for, with nothing else to pass along.
 * Name: \0, prefix, pid, counter, local len, local, peer len, peer. */
#define NAME_PREFIX "sockswitch-relay/"

int ssw_relay_name(const struct sockaddr_storage *l, socklen_t ll, const struct sockaddr_storage *p, socklen_t pl,
		   struct sockaddr_un *out, socklen_t *outlen)
{
	static _Atomic unsigned counter;
	if (ll > sizeof(struct sockaddr_in6) || pl > sizeof(struct sockaddr_in6))
		return -EINVAL;
	memset(out, 0, sizeof *out);
	out->sun_family = AF_UNIX;
	char *b = out->sun_path;
	size_t n = 1 + sizeof NAME_PREFIX - 1;
	memcpy(b + 1, NAME_PREFIX, sizeof NAME_PREFIX - 1);
	uint32_t id[2] = { (uint32_t)ssw_pid(), atomic_fetch_add(&counter, 1) };
	memcpy(b + n, id, sizeof id);
	n += sizeof id;
	if (n + 2 + ll + pl > sizeof out->sun_path)
		return -ENAMETOOLONG;
	b[n++] = (char)ll;
	memcpy(b + n, l, ll);
	n += ll;
	b[n++] = (char)pl;
	memcpy(b + n, p, pl);
	n += pl;
	*outlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	return 0;
}

static bool inet_ok(const struct sockaddr_storage *a, size_t len)
{
	return (a->ss_family == AF_INET && len == sizeof(struct sockaddr_in)) ||
	       (a->ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6));
}

/* Parse a peer name; false when it is not a relay's (anything may be there:
 * another program's abstract socket, or a made-up name). */
bool ssw_relay_name_parse(const struct sockaddr_un *un, socklen_t len, struct sockaddr_storage *l, socklen_t *ll,
			  struct sockaddr_storage *p, socklen_t *pl)
{
	size_t off = offsetof(struct sockaddr_un, sun_path);
	if (len <= off || un->sun_family != AF_UNIX)
		return false;
	size_t n = len - off, k = 1 + sizeof NAME_PREFIX - 1 + 2 * sizeof(uint32_t);
	const unsigned char *b = (const unsigned char *)un->sun_path;
	if (n < k + 2 || b[0] != 0 || memcmp(b + 1, NAME_PREFIX, sizeof NAME_PREFIX - 1))
		return false;
	size_t a = b[k++];
	if (a > sizeof *l || k + a + 1 > n)
		return false;
	memset(l, 0, sizeof *l);
	memcpy(l, b + k, a);
	k += a;
	*ll = (socklen_t)a;
	size_t c = b[k++];
	if (c > sizeof *p || k + c != n)
		return false;
	memset(p, 0, sizeof *p);
	memcpy(p, b + k, c);
	*pl = (socklen_t)c;
	return inet_ok(l, a) && inet_ok(p, c) && l->ss_family == p->ss_family;
}

bool ssw_relay_peer(int fd, struct sockaddr_un *un, socklen_t *len, struct sockaddr_storage *l, socklen_t *ll,
		    struct sockaddr_storage *p, socklen_t *pl)
{
	*len = sizeof *un;
	return sys_getpeername(fd, (struct sockaddr *)un, len) == 0 && *len <= sizeof *un &&
	       ssw_relay_name_parse(un, *len, l, ll, p, pl);
}

/* fd is not in the table: is it a relay's socket we have not met (received
 * over SCM_RIGHTS, inherited across exec)?  Then it is added.  One system
 * call; the caller skips fds known to be something else. */
bool ssw_relayed_recognize(int fd)
{
	struct sockaddr_un un;
	socklen_t len;
	struct sockaddr_storage l, p;
	socklen_t ll, pl;
	return ssw_relay_peer(fd, &un, &len, &l, &ll, &p, &pl) && ssw_relayed_add(fd, &l, ll, &p, pl) == 0;
}
