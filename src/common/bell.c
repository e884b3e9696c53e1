/* bell.c — per-process doorbells in one fork-shared page (see bell.h). */
#include "common/bell.h"

#include "common/sys.h"

#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#define BELLS 1024u

static _Atomic uint32_t *_Atomic page;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void map_page(void)
{
	/* MAP_SHARED anonymous: a child made by fork sees the same words */
	void *p = mmap(NULL, BELLS * sizeof(uint32_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED)
		atomic_store(&page, (_Atomic uint32_t *)p);
}

bool ssw_bell_init(void)
{
	pthread_once(&once, map_page);
	return atomic_load(&page) != NULL;
}

void ssw_bell_unshare(void)
{
	_Atomic uint32_t *old = atomic_load(&page);
	if (!old)
		return;
	void *p = mmap(NULL, BELLS * sizeof(uint32_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	/* the old page stays mapped: this process's helper may sleep on it */
	atomic_store(&page, p != MAP_FAILED ? (_Atomic uint32_t *)p : NULL);
}

static _Atomic uint32_t *word(pid_t pid)
{
	_Atomic uint32_t *p = atomic_load_explicit(&page, memory_order_acquire);
	return p ? &p[(uint32_t)pid % BELLS] : NULL;
}

void ssw_bell_ring(pid_t pid)
{
	_Atomic uint32_t *w = word(pid);
	if (!w || pid <= 0)
		return;
	atomic_fetch_add(w, 1);
	SYS_(futex, w, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

void ssw_bell_bump(pid_t pid)
{
	_Atomic uint32_t *w = word(pid);
	if (w && pid > 0)
		atomic_fetch_add(w, 1);
}

uint32_t ssw_bell_seen(void)
{
	_Atomic uint32_t *w = word(ssw_pid());
	return w ? atomic_load(w) : 0;
}

void ssw_bell_wait(uint32_t seen, int ms)
{
	_Atomic uint32_t *w = word(ssw_pid());
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	if (!w) {
		nanosleep(&ts, NULL);
		return;
	}
	if (atomic_load(w) == seen)
		SYS_(futex, w, FUTEX_WAIT, seen, &ts, NULL, 0);
}
