/* statreg_priv.h — what the registry's three files share: this process's
 * registry state (in the fork-local page) and the helpers of each file.
 * statreg_files.c: the directories and files and their checks;
 * statreg_rows.c: the slot table and what a row says;
 * statreg.c: answering a reader, set-up, fork and exit, the hooks. */
#ifndef SSW_STATREG_PRIV_H
#define SSW_STATREG_PRIV_H

#include "switch/stat/statreg.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Kernel TCP states (include/net/tcp_states.h), as TCP_INFO reports them. */
enum { K_ESTABLISHED = 1, K_SYN_SENT, K_SYN_RECV, K_FIN_WAIT1, K_FIN_WAIT2, K_TIME_WAIT, K_CLOSE,
       K_CLOSE_WAIT, K_LAST_ACK, K_LISTEN, K_CLOSING };

#define REFRESH_MIN_NS 5000000ull  /* a doorbell rung in a loop costs at most 200 refreshes/s */
#define REFRESH_DIRTY_NS 50000000ull /* changes of a watched process: at most 20 refreshes/s */
#define WATCHED_NS 3000000000ull    /* rung within this: a reader is watching (ssw_statreg_changed) */

/* This process's registry, in the fork-local page (common/forklocal.h): a
 * forked child finds it all zero (unpublished, unlocked) and
 * publishes a file of its own at its next socket, with no work at the fork. */
struct local {
	struct ssw_statreg_bell bell;     /* first: ssw_statreg_answer reads it (statreg.h) */
	pthread_mutex_t reg_lock;
	/* held by an answer for a whole pass, references included: see ssw_statreg_quiesce */
	pthread_mutex_t pass_lock;
	struct ssw_statreg_hdr *hdr;      /* NULL: not published */
	struct ssw_statreg_slot *slots;
	uint32_t nslots;                  /* slots mapped */
	pid_t owner;
	_Atomic int nkernel;              /* live SSW_SR_KERNEL slots */
	/* Fallback connections that found the table full (at its largest):
	 * counted since they happened, closed or not — a pass cannot tell. */
	_Atomic uint32_t kernel_dropped;
	uint64_t answered_ns;             /* the last pass's start */
	uint64_t rung_ns;                 /* the last ring seen */
	struct collect_buf {
		void *v;                  /* struct ref[max], this process's (a child allocates its own) */
		int max;
	} refs;
};
_Static_assert(sizeof(struct local) <= sizeof ssw_fl->statreg, "the registry's state fits its fork-local room");
#define L ((struct local *)ssw_fl->statreg)

/* this process's file and its directory (set up by statreg.c) */
extern char ssw_statreg_dirpath[PATH_MAX - 32], ssw_statreg_path[PATH_MAX];

/* statreg_files.c */
uint64_t ssw_statreg_proc_starttime(void);
uint64_t ssw_statreg_realtime_ns(void);
void *ssw_statreg_map(int fd, uint64_t size);
int ssw_statreg_lock_dir(int dirfd, const char *name, int how);
bool ssw_statreg_only_doorbell(int dfd);
int ssw_statreg_open_ns_dir(uint64_t ino);

/* statreg_rows.c (with reg_lock held, but fmt_addr and fd_inode) */
void ssw_statreg_slot_begin(struct ssw_statreg_slot *sl);
void ssw_statreg_slot_end(struct ssw_statreg_slot *sl);
void ssw_statreg_slot_free(struct ssw_statreg_slot *sl);
struct ssw_statreg_slot *ssw_statreg_slot_alloc(void);
void ssw_statreg_fmt_addr(const struct sockaddr_storage *a, char *out, size_t n);
uint64_t ssw_statreg_fd_inode(int fd);
bool ssw_statreg_kernel_refresh(struct ssw_statreg_slot *sl);
struct ssw_sock;
void ssw_statreg_publish_sock(int fd, struct ssw_sock *s, struct ssw_statreg_slot *sl);

#endif
