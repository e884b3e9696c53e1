/* waitshare.c — one wait-policy decision for all of a user's switched
 * processes on the host: whether yields are off (CPU-bound neighbours).
 *
 * Why shared: each process used to decide alone (waitpol.c hog_seen).  With
 * many busy ping-pong pairs on few cores, some processes then slept at once
 * while others still yielded, and the yielders kept the cores from the
 * sleepers: 16 pairs on 2 cores, the worst client's p99 4-8x kernel TCP's,
 * where all of them sleeping gave 1.3x and all of them yielding better than
 * kernel TCP.  A decision every process follows keeps them alike.
 *
 * Where: a System V shared memory segment of one page per uid (key from
 * the uid), mode 0600.  Not a file: a file can be truncated under a mapping
 * (SIGBUS), a segment cannot; and it needs no directory.  A segment that is
 * not ours (another uid made it first under our key, or it has the wrong
 * size, mode or layout) is not used: the process then decides alone, as
 * before.  Other users cannot read or write it; a process of the same uid
 * can only make the others sleep or yield, as its ptrace could.  The
 * segment stays (4 KiB, `ipcs -m`) for the next process of the user; each
 * IPC namespace (container) has its own. */
#include "common/waitpol.h"

#include "common/log.h"
#include "common/sys.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>

#define SHARE_MAGIC 0x57504f4cu /* "WPOL" */
#define SHARE_VERSION 1
#define SHARE_SIZE 4096

struct ssw_wait_share {
	uint32_t magic, version;
	_Atomic uint64_t no_yield_until; /* CLOCK_MONOTONIC ns */
	_Atomic uint64_t off_ns;         /* the last pause */
};

static key_t share_key(uid_t uid)
{
	/* "SSWP" mixed with the uid and the layout's version: distinct users
	 * get distinct keys short of a hash collision, which the owner check
	 * below catches, and a library of another layout a page of its own
	 * (after a package upgrade old and new programs each keep theirs) */
	uint32_t k = (0x53535750u + SHARE_VERSION * 0x01000193u) ^ ((uint32_t)uid * 2654435761u);
	return (key_t)(k == IPC_PRIVATE ? 1 : k);
}

struct ssw_wait_share *ssw_wait_share_attach(void)
{
	return ssw_wait_share_attach_key(share_key(geteuid()));
}

struct ssw_wait_share *ssw_wait_share_attach_key(int key)
{
	uid_t me = geteuid();
	int id = shmget((key_t)key, SHARE_SIZE, IPC_CREAT | 0600);
	if (id < 0) {
		SSW_DEBUG("wait policy: no shared segment (%d): this process decides alone", errno);
		return NULL;
	}
	struct shmid_ds ds;
	if (shmctl(id, IPC_STAT, &ds) < 0 || ds.shm_perm.uid != me || ds.shm_perm.cuid != me ||
	    (ds.shm_perm.mode & 0777) != 0600 || ds.shm_segsz != SHARE_SIZE) {
		SSW_DEBUG("wait policy: the shared segment of uid %u is not its own 0600 page: this process decides alone",
			  (unsigned)me);
		return NULL;
	}
	struct ssw_wait_share *w = shmat(id, NULL, 0);
	if (w == (void *)-1)
		return NULL;
	/* a fresh segment is zero: the first process writes the layout; one of
	 * another layout (another version of the library) is left alone */
	uint32_t zero = 0;
	if (__atomic_compare_exchange_n(&w->magic, &zero, SHARE_MAGIC, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		__atomic_store_n(&w->version, SHARE_VERSION, __ATOMIC_RELEASE);
	for (int i = 0; i < 1000 && !__atomic_load_n(&w->version, __ATOMIC_ACQUIRE); i++)
		ssw_cpu_relax(); /* its maker is writing the version */
	if (__atomic_load_n(&w->magic, __ATOMIC_ACQUIRE) != SHARE_MAGIC ||
	    __atomic_load_n(&w->version, __ATOMIC_ACQUIRE) != SHARE_VERSION) {
		shmdt(w);
		return NULL;
	}
	return w;
}

/* What the shared page says, bounded: a value further ahead than the
 * longest pause is not ours to believe (a clock of another time namespace,
 * or junk) and counts as nothing. */
uint64_t ssw_wait_share_until(const struct ssw_wait_share *w, uint64_t now)
{
	uint64_t u = atomic_load_explicit(&((struct ssw_wait_share *)w)->no_yield_until, memory_order_relaxed);
	return u > now + SSW_SPIN_HOG_OFF_NS ? 0 : u;
}

uint64_t ssw_wait_share_off(const struct ssw_wait_share *w)
{
	uint64_t o = atomic_load_explicit(&((struct ssw_wait_share *)w)->off_ns, memory_order_relaxed);
	return o > SSW_SPIN_HOG_OFF_NS ? SSW_SPIN_HOG_OFF_NS : o;
}

void ssw_wait_share_set(struct ssw_wait_share *w, uint64_t until, uint64_t off)
{
	atomic_store_explicit(&w->off_ns, off, memory_order_relaxed);
	atomic_store_explicit(&w->no_yield_until, until, memory_order_relaxed);
}
