/* local.c — the addresses of this host (loopback, every interface's, kept
 * in a snapshot refreshed at most once a second): what `local` routes match
 * and what a connector may claim. */
#include "switch/route/route.h"
#include "switch/route/route_priv.h"

#include "common/forklocal.h"
#include "common/params.h"
#include "common/safefile.h"
#include "switch/route/providers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

bool ssw_net_is_v4mapped(const uint8_t *a)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(a, pfx, sizeof pfx) == 0;
}

/* Addresses past this many are ignored: such a destination is then treated as
 * remote, which only costs it the shm fast path. */
#define IFADDR_MAX 256
#define IFADDR_REFRESH_NS 1000000000ull

struct if_snapshot {
	int n;
	struct net_addr e[IFADDR_MAX];
};

/* Two buffers so that getifaddrs (slow, allocates, may block on netlink) runs
 * without the lock readers take: the refresher fills if_next under
 * if_refresh_lock, then swaps the pointers under if_read_lock. */
static struct if_snapshot if_bufs[2];
static struct if_snapshot *if_cur = &if_bufs[0];
static struct if_snapshot *if_next = &if_bufs[1];
/* in the fork-local page: a forked child's are unlocked (common/forklocal.h) */
#define if_refresh_lock (ssw_fl->if_lock[0])
#define if_read_lock (ssw_fl->if_lock[1])
static pthread_once_t if_once = PTHREAD_ONCE_INIT;
static bool if_loaded;          /* atomic */
static uint64_t if_stamp_ns;    /* atomic; time of the last refresh attempt */

/* A fork while another thread holds either lock would leave it locked forever
 * in the child; taking both around fork makes the parent's state whole, and
 * the child's locks are fresh ones. */
static void if_prefork(void)
{
	pthread_mutex_lock(&if_refresh_lock);
	pthread_mutex_lock(&if_read_lock);
}

static void if_postfork(void)
{
	pthread_mutex_unlock(&if_read_lock);
	pthread_mutex_unlock(&if_refresh_lock);
}

static void if_init(void)
{
	pthread_atfork(if_prefork, if_postfork, NULL);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	/* The coarse clock is enough for a once-a-second refresh and is the
	 * cheapest read on the connect path. */
	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Called with if_refresh_lock held.  On failure the previous snapshot stays:
 * a transient getifaddrs error must not flip local destinations to TCP. */
static void if_refresh(void)
{
	struct ifaddrs *list = NULL;
	if (getifaddrs(&list) != 0)
		return;
	struct if_snapshot *s = if_next;
	s->n = 0;
	for (struct ifaddrs *i = list; i && s->n < IFADDR_MAX; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		struct net_addr *e = &s->e[s->n];
		memset(e, 0, sizeof *e);
		if (i->ifa_addr->sa_family == AF_INET) {
			e->family = AF_INET;
			memcpy(e->a, (const char *)i->ifa_addr + offsetof(struct sockaddr_in, sin_addr), 4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			e->family = AF_INET6;
			memcpy(e->a, (const char *)i->ifa_addr + offsetof(struct sockaddr_in6, sin6_addr), 16);
			if (ssw_net_is_v4mapped(e->a)) {
				e->family = AF_INET;
				memmove(e->a, e->a + 12, 4);
				memset(e->a + 4, 0, 12);
			}
		} else {
			continue;
		}
		s->n++;
	}
	freeifaddrs(list);

	pthread_mutex_lock(&if_read_lock);
	if_next = if_cur;
	if_cur = s;
	pthread_mutex_unlock(&if_read_lock);
}

static bool if_stale(uint64_t now)
{
	if (!__atomic_load_n(&if_loaded, __ATOMIC_ACQUIRE))
		return true;
	/* `now` may predate a refresh another thread just stamped: that is fresh,
	 * not a wrapped-around "very old". */
	uint64_t stamp = __atomic_load_n(&if_stamp_ns, __ATOMIC_ACQUIRE);
	return now > stamp && now - stamp >= IFADDR_REFRESH_NS;
}

/* Make the snapshot fresh enough to answer from. */
static void if_fresh(void)
{
	pthread_once(&if_once, if_init);
	uint64_t now = mono_ns();
	if (if_stale(now)) {
		if (pthread_mutex_trylock(&if_refresh_lock) == 0) {
			/* Another thread may have refreshed between the check and the lock. */
			if (if_stale(now)) {
				if_refresh();
				__atomic_store_n(&if_stamp_ns, now, __ATOMIC_RELEASE);
				__atomic_store_n(&if_loaded, true, __ATOMIC_RELEASE);
			}
			pthread_mutex_unlock(&if_refresh_lock);
		} else if (!__atomic_load_n(&if_loaded, __ATOMIC_ACQUIRE)) {
			/* Nothing to answer from yet: wait for the first snapshot rather
			 * than call this host's own address remote.  Later refreshes never
			 * make anyone wait: the previous snapshot is good enough. */
			pthread_mutex_lock(&if_refresh_lock);
			pthread_mutex_unlock(&if_refresh_lock);
		}
	}
}

static bool if_has(const struct net_addr *x)
{
	if_fresh();
	bool found = false;
	size_t n = x->family == AF_INET ? 4 : 16;
	pthread_mutex_lock(&if_read_lock);
	for (int i = 0; i < if_cur->n && !found; i++)
		found = if_cur->e[i].family == x->family && memcmp(if_cur->e[i].a, x->a, n) == 0;
	pthread_mutex_unlock(&if_read_lock);
	return found;
}

bool ssw_net_addr_from(const struct sockaddr *sa, socklen_t len, struct net_addr *x)
{
	/* Copied by offset, never through a cast: the caller's buffer need not be
	 * aligned for sockaddr_in6. */
	const char *p = (const char *)sa;
	sa_family_t fam;
	if (!sa || len < (socklen_t)sizeof fam)
		return false;
	memcpy(&fam, p + offsetof(struct sockaddr, sa_family), sizeof fam);
	memset(x, 0, sizeof *x);
	if (fam == AF_INET) {
		if (len < (socklen_t)(offsetof(struct sockaddr_in, sin_addr) + 4))
			return false;
		x->family = AF_INET;
		memcpy(x->a, p + offsetof(struct sockaddr_in, sin_addr), 4);
		return true;
	}
	if (fam == AF_INET6) {
		if (len < (socklen_t)(offsetof(struct sockaddr_in6, sin6_addr) + 16))
			return false;
		x->family = AF_INET6;
		memcpy(x->a, p + offsetof(struct sockaddr_in6, sin6_addr), 16);
		if (ssw_net_is_v4mapped(x->a)) {
			x->family = AF_INET;
			memmove(x->a, x->a + 12, 4);
			memset(x->a + 4, 0, 12);
		}
		return true;
	}
	return false;
}

bool ssw_net_addr_is_local(const struct net_addr *x)
{
	static const uint8_t zero[16];
	if (x->family == AF_INET) {
		if (x->a[0] == 127 || memcmp(x->a, zero, 4) == 0)
			return true;
	} else {
		if (memcmp(x->a, zero, 15) == 0 && (x->a[15] == 0 || x->a[15] == 1))
			return true;
	}
	/* Called from interposed connect(): the application's errno is not ours
	 * to change. */
	int saved = errno;
	bool found = if_has(x);
	errno = saved;
	return found;
}

bool ssw_addr_is_local(const struct sockaddr *sa, socklen_t len)
{
	struct net_addr x;
	return ssw_net_addr_from(sa, len, &x) && ssw_net_addr_is_local(&x);
}

int ssw_route_local_targets(const struct ssw_routes *r, bool v4, bool v6, int *out, int max)
{
	struct net_addr addrs[IFADDR_MAX + 4]; /* 5 KiB: listen() is no hot path */
	int saved = errno, n = 0, k = 0;
	/* the wildcard itself and loopback first: `local` rules and a host
	 * whose lo is not listed */
	if (v4) {
		addrs[n++] = (struct net_addr){ .family = AF_INET };
		addrs[n++] = (struct net_addr){ .family = AF_INET, .a = { 127, 0, 0, 1 } };
	}
	if (v6) {
		addrs[n++] = (struct net_addr){ .family = AF_INET6 };
		addrs[n++] = (struct net_addr){ .family = AF_INET6, .a = { [15] = 1 } };
	}
	if_fresh();
	pthread_mutex_lock(&if_read_lock);
	for (int i = 0; i < if_cur->n && n < IFADDR_MAX + 4; i++)
		if ((if_cur->e[i].family == AF_INET && v4) || (if_cur->e[i].family == AF_INET6 && v6))
			addrs[n++] = if_cur->e[i];
	pthread_mutex_unlock(&if_read_lock);
	for (int i = 0; i < n; i++) {
		struct sockaddr_storage ss = { .ss_family = (sa_family_t)addrs[i].family };
		socklen_t len = sizeof(struct sockaddr_in6);
		if (addrs[i].family == AF_INET) {
			memcpy((char *)&ss + offsetof(struct sockaddr_in, sin_addr), addrs[i].a, 4);
			len = sizeof(struct sockaddr_in);
		} else {
			memcpy((char *)&ss + offsetof(struct sockaddr_in6, sin6_addr), addrs[i].a, 16);
		}
		int t;
		ssw_route_lookup(r, (struct sockaddr *)&ss, len, &t);
		bool dup = t == SSW_TARGET_TCP;
		for (int j = 0; j < k && !dup; j++)
			dup = out[j] == t;
		if (!dup && k < max)
			out[k++] = t;
	}
	errno = saved;
	return k;
}

