/* relayed.c — fds that carry a switched connection through a relay process
 * (relay.c): kernel AF_UNIX stream sockets to the application, so reads,
 * writes and readiness are the kernel's own; only what would show the
 * difference (addresses, the socket's domain and protocol, TCP and IP
 * options) is answered from what this table remembers of the connection.
 * The table crosses exec in SOCKSWITCH_RELAYED, so a program exec'd with an
 * inherited connection (inetd, sshd, socat EXEC) sees its TCP peer. */
#include "switch/relay.h"

#include "common/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct relayed {
	struct sockaddr_storage local, peer;
	socklen_t local_len, peer_len;
	int nodelay;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
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
	memcpy(a, ss, *l < sl ? *l : sl);
	*l = sl;
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

/* ---- across exec --------------------------------------------------------- */

static void hex(const void *p, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[b[i] >> 4];
		out[2 * i + 1] = d[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static int unhex(const char *s, size_t n, void *out, size_t max)
{
	if (n % 2 || n / 2 > max)
		return -1;
	unsigned char *b = out;
	for (size_t i = 0; i < n / 2; i++) {
		int v = 0;
		for (int k = 0; k < 2; k++) {
			char c = s[2 * i + (size_t)k];
			int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
			if (x < 0)
				return -1;
			v = v * 16 + x;
		}
		b[i] = (unsigned char)v;
	}
	return (int)(n / 2);
}

/* "SOCKSWITCH_RELAYED=fd:local:peer;..." for the relayed fds an exec keeps
 * (no FD_CLOEXEC); NULL when there are none or memory is short. */
char *ssw_relayed_env(void)
{
	if (!atomic_load_explicit(&count, memory_order_relaxed))
		return NULL;
	pthread_mutex_lock(&lock);
	size_t per = 16 + 4 * sizeof(struct sockaddr_storage) + 4, cap = 32, n = 0;
	for (int fd = 0; fd < tab_len; fd++)
		if (tab[fd])
			cap += per;
	char *out = malloc(cap);
	if (out) {
		n = (size_t)snprintf(out, cap, "SOCKSWITCH_RELAYED=");
		for (int fd = 0; fd < tab_len; fd++) {
			struct relayed *e = tab[fd];
			int fl = e ? (int)SYS_(fcntl, fd, F_GETFD) : -1;
			if (!e || fl < 0 || (fl & FD_CLOEXEC))
				continue;
			char l[2 * sizeof e->local + 1], p[2 * sizeof e->peer + 1];
			hex(&e->local, e->local_len, l);
			hex(&e->peer, e->peer_len, p);
			n += (size_t)snprintf(out + n, cap - n, "%s%d:%s:%s", out[n - 1] == '=' ? "" : ";", fd, l, p);
		}
		if (out[n - 1] == '=') {
			free(out);
			out = NULL;
		}
	}
	pthread_mutex_unlock(&lock);
	return out;
}

static bool is_unix_stream(int fd)
{
	struct stat st;
	int v = 0;
	socklen_t l = sizeof v;
	if (SYS_(fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	if (sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_UNIX)
		return false;
	l = sizeof v;
	return sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) == 0 && v == SOCK_STREAM;
}

/* At start: take over what the image before exec left.  An entry whose fd is
 * not (any more) an AF_UNIX stream socket is ignored: the variable may have
 * outlived the fd it described (a grandchild, a program that closed it). */
void ssw_relayed_import(void)
{
	const char *v = getenv("SOCKSWITCH_RELAYED");
	if (!v)
		return;
	char *copy = strdup(v);
	unsetenv("SOCKSWITCH_RELAYED");
	if (!copy)
		return;
	char *save = NULL;
	for (char *it = strtok_r(copy, ";", &save); it; it = strtok_r(NULL, ";", &save)) {
		char *c1 = strchr(it, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		char *end;
		long fd = strtol(it, &end, 10);
		if (end != c1 || fd < 0 || fd > 1 << 22)
			continue;
		struct sockaddr_storage l, p;
		memset(&l, 0, sizeof l);
		memset(&p, 0, sizeof p);
		int ll = unhex(c1 + 1, (size_t)(c2 - c1 - 1), &l, sizeof l);
		int pl = unhex(c2 + 1, strlen(c2 + 1), &p, sizeof p);
		if (ll < (int)sizeof(sa_family_t) || pl < (int)sizeof(sa_family_t) || !is_unix_stream((int)fd))
			continue;
		if (l.ss_family != AF_INET && l.ss_family != AF_INET6)
			continue;
		ssw_relayed_add((int)fd, &l, (socklen_t)ll, &p, (socklen_t)pl);
	}
	free(copy);
}
