/* fdtab.c — maps file descriptors to switched sockets.  A flat array indexed by
 * fd; readers take a read lock only long enough to take a reference, so a
 * close racing with a call in another thread never frees a socket in use. */
#include "switch/sock.h"

#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

static struct ssw_sock **tab;
static int tab_size;
static _Atomic int tab_count;   /* entries: lets plain-only processes skip the lock */
static pthread_rwlock_t tab_lock = PTHREAD_RWLOCK_INITIALIZER;

int ssw_fdtab_init(void)
{
	struct rlimit rl;
	long n = 65536;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max > n)
		n = (long)rl.rlim_max;
	if (n > (1L << 22))
		n = 1L << 22;
	void *p = mmap(NULL, (size_t)n * sizeof *tab, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	tab = p;
	tab_size = (int)n;
	return 0;
}

struct ssw_sock *ssw_sock_get(int fd)
{
	if (fd < 0 || fd >= tab_size || !atomic_load_explicit(&tab_count, memory_order_relaxed))
		return NULL;
	if (!__atomic_load_n(&tab[fd], __ATOMIC_RELAXED))
		return NULL;
	pthread_rwlock_rdlock(&tab_lock);
	struct ssw_sock *s = tab[fd];
	if (s)
		atomic_fetch_add(&s->refs, 1);
	pthread_rwlock_unlock(&tab_lock);
	return s;
}

void ssw_sock_put(struct ssw_sock *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1)
		ssw_sock_destroy(s);
}

int ssw_fdtab_set(int fd, struct ssw_sock *s)
{
	if (fd < 0 || fd >= tab_size)
		return -EMFILE;
	pthread_rwlock_wrlock(&tab_lock);
	struct ssw_sock *old = tab[fd];
	atomic_fetch_add(&s->refs, 1);
	atomic_fetch_add(&s->fdrefs, 1);
	__atomic_store_n(&tab[fd], s, __ATOMIC_RELEASE);
	if (!old)
		atomic_fetch_add(&tab_count, 1);
	pthread_rwlock_unlock(&tab_lock);
	if (old) {
		atomic_fetch_sub(&old->fdrefs, 1);
		ssw_sock_put(old);
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
		atomic_fetch_sub(&s->fdrefs, 1);
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
	for (int fd = 0; fd < tab_size; fd++)
		if (tab[fd])
			fn(fd, tab[fd], arg);
	pthread_rwlock_unlock(&tab_lock);
}
