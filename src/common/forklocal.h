/* forklocal.h — the switch's state that a forked child must start without:
 * its locks, caches' locks, counters and the stat registry's handle, in one
 * page that the kernel hands a child zeroed (MADV_WIPEONFORK).
 *
 * Why one page: a fork write-protects every private page of the parent, and
 * the first write to each afterwards, in the parent or the child, costs a
 * page fault (10-35 us on the virtual machines measured, where a plain
 * fork + _exit + waitpid takes 190 us to a few ms).  State each module
 * reset in its own atfork handler cost both processes a fault per page it
 * sat in, every fork.  A wipe-on-fork page is never write-protected in the
 * parent (the kernel does not copy it) and reads as zeros in the child: a
 * zeroed mutex or rwlock is an unlocked one (glibc's initializers are all
 * zeros), a zero pid asks the kernel again, zero counters start over, a
 * NULL registry handle makes the child publish anew at its first socket.
 * So the child does nothing at fork for any of it, and pays for the page
 * only when it uses the switch.
 *
 * The struct lists each module's part by its own layer's plain types;
 * modules above src/common keep their structs in opaque room, with a
 * _Static_assert that they fit.  Where the kernel refuses the advice
 * (before Linux 4.14), a child zeroes the page itself at fork. */
#ifndef SSW_FORKLOCAL_H
#define SSW_FORKLOCAL_H

#include <pthread.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <sys/types.h>

#define SSW_FORK_PIDS 32 /* children remembered, by fork generation (shm_lend.c) */

struct ssw_forklocal {
	_Atomic pid_t pid;                 /* common/pid.c: 0 asks getpid */
	pthread_mutex_t pool_lock;         /* common/shmem.c */
	int pool_n[4];                     /* common/shmem.c: mappings kept per size (a child has none) */
	pthread_rwlock_t fork_lock;        /* switch/share/fork.c */
	pthread_t forking;                 /* switch/share/fork.c: the thread inside fork(), or 0 */
	unsigned fork_gen;                 /* switch/share/fork.c: this process's forks */
	pid_t child_pid[SSW_FORK_PIDS];    /* switch/share/fork.c: the child of fork g at g % SSW_FORK_PIDS (0: failed) */
	unsigned outer_forks;              /* common/real.c: forks past the fork handlers (a relay's) */
	_Alignas(8) unsigned char shm_lend[1984]; /* providers/shm/shm_lend.c: accepted and lent segments */
	pthread_rwlock_t tab_lock;         /* switch/sock/fdtab.c */
	pthread_mutex_t seg_lock;          /* providers/shm/shm_seg.c */
	pthread_mutex_t if_lock[2];        /* switch/route/local.c: refresh, read */
	pthread_mutex_t trim_lock[2];      /* switch/sock/trim.c: look, start */
	pthread_mutex_t swap_lock[2];      /* switch/share/swap_helper.c: look, start */
	pthread_mutex_t sock_pool_lock;    /* switch/sock/sock.c: recycled socket objects */
	pthread_mutex_t epx_lock;          /* switch/events/epoll_set.c: the epoll sets (held across fork) */
	bool epx_fork_held;                /* switch/events/epoll_set.c: ... by this fork */
	pthread_mutex_t move_lock;         /* switch/setup/move.c */
	pthread_mutex_t setup_lock[3];     /* switch/setup: connect.c refused, proof.c keep and hint */
	pthread_mutex_t relayed_lock;      /* switch/share/relayed.c */
	void *sock_pool;                   /* switch/sock/sock.c: a child starts without the parent's */
	_Alignas(64) unsigned char counters[128];  /* switch/stat/stats.c: struct ssw_counters */
	int statreg_ready;                 /* switch/stat/statreg.h: the registry was looked at */
	uint64_t statreg_owed_ns;          /* a forked child with its parent's sockets: publish at its
					    * first call from then on (ssw_now_ns), 0: nothing owed */
	_Alignas(64) unsigned char statreg[192];  /* switch/stat/statreg.c */
};

/* Never NULL: the wipe-on-fork page, made by a constructor that runs
 * before the switch's own (forklocal.c). */
extern struct ssw_forklocal *ssw_fl;

/* More wipe-on-fork memory, zeroed, for a table a child must start without
 * (and its maker must not pay a copy-on-write fault for after each fork);
 * NULL when the kernel refuses the advice (the caller then keeps its table
 * in ordinary memory, and checks its owner as before). */
void *ssw_wipeonfork_alloc(size_t size);
/* Is ssw_fl wiped by the kernel in every child (false: the atfork handler
 * zeroes it, for libc's forks only)? */
bool ssw_forklocal_wiped(void);

/* The code a forked child runs inside fork() (the fork wrapper, atfork
 * child handlers, ssw_fork_end), kept together: a child has no page table
 * entries for the library's code and faults on each 64 KiB window of it
 * that it runs (fault-around), so scattered handlers cost a fault each.
 * .text.hot.* is gathered in one place by the linker's default script. */
#define SSW_FORK_TEXT __attribute__((section(".text.hot.ssw_fork"), noinline))

#endif
