/* fdtab.c — maps file descriptors to switched sockets.  A flat array indexed by
 * fd, read without locks: socket objects are type-stable (recycled, never
 * returned to malloc) and a reader takes a reference only while the count is
 * not zero, then checks the slot still holds the same object.  So a close
 * racing with a call in another thread never frees a socket in use.  Beside it,
 * one byte per fd caches what the switch learned when the fd was created
 * (saves probing system calls at connect time).
 *
 * Layout of the one mapping: the first page holds the counts, the info bytes
 * of the first INFO_LOW fds and the first slots of the table; the rest of
 * the table and the other info bytes follow.  A fork write-protects every
 * private page, and a fork-per-connection server's next accept and close
 * write a slot, an info byte and the counts of low fds: one page, so one
 * fault after each fork instead of three (issue 18). */
#include "switch/sock/sock.h"

#include "common/forklocal.h"
#include "common/log.h"
#include "switch/stat/statreg.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#define PAGE 4096
#define INFO_LOW 512             /* fds whose info byte sits in the first page */
struct counts {
	_Atomic int count;       /* entries: lets plain-only processes skip the lock */
	_Atomic int end;         /* above every fd ever in the table: walks stop there */
};
#define TAB_OFF (64 + INFO_LOW)  /* the counts, the low info bytes, then the table */
_Static_assert(TAB_OFF % sizeof(void *) == 0 && TAB_OFF + 64 * sizeof(void *) <= PAGE,
	       "the first page holds the counts, the low info bytes and the first slots");

static struct ssw_sock **tab;
static uint8_t *info_low, *info_high; /* fd < INFO_LOW, the others (indexed by fd) */
static int tab_size;
static struct counts no_counts;       /* before the table is made: no entries */
static struct counts *counts = &no_counts;
#define tab_count (counts->count)
#define tab_end (counts->end)
/* in the fork-local page: a child's is a fresh one (forklocal.h) */
#define tab_lock (ssw_fl->tab_lock)

/* A thread walking the table (the stat refresher) may hold its lock at a
 * fork: take it around the fork so the child never inherits it held. */
static void fork_prepare(void)
{
	pthread_rwlock_wrlock(&tab_lock);
}

static void fork_parent(void)
{
	pthread_rwlock_unlock(&tab_lock);
}

int ssw_fdtab_init(void)
{
	struct rlimit rl;
	long n = 65536;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max > n)
		n = (long)rl.rlim_max;
	if (n > (1L << 22))
		n = 1L << 22;
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&once);
	if (tab) {
		pthread_mutex_unlock(&once);
		return 0;
	}
	void *p = mmap(NULL, TAB_OFF + (size_t)n * (sizeof *tab + 1), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		pthread_mutex_unlock(&once);
		return -ENOMEM;
	}
	info_low = (uint8_t *)p + 64;
	info_high = (uint8_t *)p + TAB_OFF + (size_t)n * sizeof *tab;
	__atomic_store_n(&counts, (struct counts *)p, __ATOMIC_RELEASE);
	pthread_atfork(fork_prepare, fork_parent, NULL);
	tab_size = (int)n;
	__atomic_store_n(&tab, (struct ssw_sock **)((uint8_t *)p + TAB_OFF), __ATOMIC_RELEASE);
	pthread_mutex_unlock(&once);
	return 0;
}

/* This thread's calls in progress (forkcalls.c).  Initial-exec:
 * counted at every call, where a __tls_get_addr call each way showed in
 * `bench --case epoll`; one int of the static TLS block, which a
 * preloaded library may use. */
static __thread int mine __attribute__((tls_model("initial-exec")));

struct ssw_sock *ssw_sock_get(int fd)
{
	if (fd < 0 || fd >= tab_size || !atomic_load_explicit(&tab_count, memory_order_relaxed))
		return NULL;
	for (;;) {
		struct ssw_sock *s = __atomic_load_n(&tab[fd], __ATOMIC_ACQUIRE);
		if (!s)
			return NULL;
		uint64_t r = atomic_load_explicit(&s->refs, memory_order_relaxed);
		do {
			if (!(uint32_t)r)
				break; /* being torn down: the slot is about to be empty */
		} while (!atomic_compare_exchange_weak(&s->refs, &r, r + SSW_SOCK_CALL));
		if (!(uint32_t)r)
			continue;
		mine++;
		if (__atomic_load_n(&tab[fd], __ATOMIC_ACQUIRE) == s)
			return s;
		ssw_sock_put(s); /* recycled for another fd meanwhile */
	}
}

static void unref_by(struct ssw_sock *s, uint64_t by)
{
	if ((uint32_t)atomic_fetch_sub(&s->refs, by) == 1)
		ssw_sock_destroy(s);
}

void ssw_sock_put(struct ssw_sock *s)
{
	if (!s)
		return;
	mine--;
	unref_by(s, SSW_SOCK_CALL);
}

void ssw_sock_get_again(struct ssw_sock *s)
{
	atomic_fetch_add(&s->refs, SSW_SOCK_CALL);
	mine++;
}

void ssw_sock_ref(struct ssw_sock *s)
{
	atomic_fetch_add(&s->refs, 1);
}

void ssw_sock_unref(struct ssw_sock *s)
{
	if (s)
		unref_by(s, 1);
}

void ssw_sock_keep(struct ssw_sock *s)
{
	atomic_fetch_sub(&s->refs, SSW_SOCK_CALL - 1);
	mine--;
}

void ssw_sock_mine(int d)
{
	mine += d;
}

int ssw_sock_mine_now(void)
{
	return mine;
}

int ssw_fdtab_set(int fd, struct ssw_sock *s)
{
	if (fd < 0 || fd >= tab_size)
		return -EMFILE;
	ssw_statreg_ensure(); /* a switched socket: publish this process for `sockswitch stat` */
	pthread_rwlock_wrlock(&tab_lock);
	struct ssw_sock *old = tab[fd];
	ssw_sock_ref(s);
	atomic_fetch_add(&s->fdrefs, 1);
	__atomic_store_n(&tab[fd], s, __ATOMIC_RELEASE);
	if (!old)
		atomic_fetch_add(&tab_count, 1);
	if (fd >= atomic_load_explicit(&tab_end, memory_order_relaxed))
		atomic_store_explicit(&tab_end, fd + 1, memory_order_relaxed);
	pthread_rwlock_unlock(&tab_lock);
	if (old) {
		if (atomic_fetch_sub(&old->fdrefs, 1) == 1)
			ssw_forkcalls_last_fd(old);
		ssw_sock_unref(old);
	}
	return 0;
}

struct ssw_sock *ssw_fdtab_take(int fd)
{
	if (fd < 0 || fd >= tab_size || !__atomic_load_n(&tab[fd], __ATOMIC_RELAXED))
		return NULL;
	pthread_rwlock_wrlock(&tab_lock);
	struct ssw_sock *s = tab[fd];
	if (s) {
		__atomic_store_n(&tab[fd], NULL, __ATOMIC_RELEASE);
		atomic_fetch_sub(&tab_count, 1);
		if (atomic_fetch_sub(&s->fdrefs, 1) == 1)
			ssw_forkcalls_last_fd(s);
	}
	pthread_rwlock_unlock(&tab_lock);
	return s;
}

bool ssw_fdtab_any(const int *fds, int n)
{
	if (!atomic_load_explicit(&tab_count, memory_order_relaxed))
		return false;
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0 && fds[i] < tab_size && __atomic_load_n(&tab[fds[i]], __ATOMIC_RELAXED))
			return true;
	return false;
}

void ssw_fdtab_each(void (*fn)(int fd, struct ssw_sock *s, void *arg), void *arg)
{
	if (!atomic_load_explicit(&tab_count, memory_order_relaxed))
		return;
	pthread_rwlock_rdlock(&tab_lock);
	int end = atomic_load_explicit(&tab_end, memory_order_relaxed);
	for (int fd = 0; fd < end; fd++)
		if (tab[fd])
			fn(fd, tab[fd], arg);
	pthread_rwlock_unlock(&tab_lock);
}

int ssw_fdtab_list(bool (*want)(const struct ssw_sock *s), int *fds, int max)
{
	int n = 0;
	if (!atomic_load_explicit(&tab_count, memory_order_relaxed))
		return 0;
	pthread_rwlock_rdlock(&tab_lock);
	int end = atomic_load_explicit(&tab_end, memory_order_relaxed);
	for (int fd = 0; fd < end; fd++)
		if (tab[fd] && want(tab[fd])) {
			if (n < max)
				fds[n] = fd;
			n++;
		}
	pthread_rwlock_unlock(&tab_lock);
	return n;
}

int ssw_fdtab_end(void)
{
	return atomic_load_explicit(&tab_end, memory_order_acquire);
}

int ssw_fdtab_size(void)
{
	return tab_size;
}

int ssw_fdtab_count(void)
{
	return atomic_load_explicit(&tab_count, memory_order_relaxed);
}

/* In a relay process (relay.c): the table keeps only fd's socket.  Other
 * sockets are dropped without their teardown, which belongs to the processes
 * that hold them: their objects are simply left behind. */
void ssw_fdtab_forget_except(int keep)
{
	struct ssw_sock *ks = keep >= 0 && keep < tab_size ? tab[keep] : NULL;
	int end = atomic_load(&tab_end);
	for (int fd = 0; fd < end && atomic_load(&tab_count) > (ks ? 1 : 0); fd++) {
		if (fd == keep || !tab[fd])
			continue;
		struct ssw_sock *s = ssw_fdtab_take(fd);
		if (s == ks)
			ssw_sock_unref(s);
	}
}

/* fd's info byte; fd within the table */
static uint8_t *info(int fd)
{
	return fd < INFO_LOW ? &info_low[fd] : &info_high[fd];
}

uint8_t ssw_fdinfo_get(int fd)
{
	return fd >= 0 && fd < tab_size ? __atomic_load_n(info(fd), __ATOMIC_RELAXED) : 0;
}

void ssw_fdinfo_set(int fd, uint8_t v)
{
	if (fd >= 0 && fd < tab_size)
		__atomic_store_n(info(fd), v, __ATOMIC_RELAXED);
}

void ssw_fdinfo_update(int fd, uint8_t set, uint8_t clear)
{
	uint8_t *b = fd >= 0 && fd < tab_size ? info(fd) : NULL;
	if (b && __atomic_load_n(b, __ATOMIC_RELAXED))
		__atomic_store_n(b, (uint8_t)((*b & ~clear) | set), __ATOMIC_RELAXED);
}
