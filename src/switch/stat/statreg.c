/* statreg.c — publishes this process's live sockets for `sockswitch stat`
 * (layout and protocol in statreg.h; the files and their trust model in
 * statreg_files.c, the rows in statreg_rows.c).  Off the data path: the
 * connect/accept/close hooks touch the table only for kernel-TCP fallbacks,
 * and the switched sockets' rows are rebuilt from the fd table when a reader
 * rings (ssw_statreg_answer).  Every failure just leaves the process
 * unpublished. */
#include "regcache/regcache.h"
#include "switch/stat/statreg_priv.h"

#include "common/log.h"
#include "common/params.h"
#include "common/sys.h"
#include "switch/switch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>

char ssw_statreg_dirpath[PATH_MAX - 32], ssw_statreg_path[PATH_MAX];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* ---- answering a reader -------------------------------------------------- */

struct ref {
	int fd;
	struct ssw_sock *s;
};

struct collect {
	struct ref *v;
	int n, max, dropped;
};

static void collect_one(int fd, struct ssw_sock *s, void *arg)
{
	struct collect *c = arg;
	if (c->n >= c->max) {
		c->dropped++;
		return;
	}
	ssw_sock_ref(s); /* the table's own reference keeps it above zero */
	c->v[c->n++] = (struct ref){ fd, s };
}

static bool refresh(struct collect *c)
{
	c->n = 0;
	c->dropped = 0;
	ssw_fdtab_each(collect_one, c);

	/* never waits: the caller may be a signal handler that interrupted a
	 * holder (ssw_statreg_answer) */
	bool locked = pthread_mutex_trylock(&L->reg_lock) == 0;
	if (!locked)
		goto drop;
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used; i++) {
		struct ssw_statreg_slot *sl = &L->slots[i];
		if (sl->kind == SSW_SR_SWITCHED || (sl->kind == SSW_SR_KERNEL && !ssw_statreg_kernel_refresh(sl)))
			ssw_statreg_slot_free(sl);
	}
	int dropped = c->dropped;
	for (int i = 0; i < c->n; i++) {
		struct ssw_statreg_slot *sl = ssw_statreg_slot_alloc();
		if (sl)
			ssw_statreg_publish_sock(c->v[i].fd, c->v[i].s, sl);
		else
			dropped++;
	}
	__atomic_store_n(&L->hdr->dropped, (uint32_t)dropped + atomic_load(&L->kernel_dropped), __ATOMIC_RELAXED);
	struct ssw_regcache_stats rc;
	ssw_regcache_totals(&rc);
	L->hdr->regcache.hits = rc.hits;
	L->hdr->regcache.misses = rc.misses;
	L->hdr->regcache.evictions = rc.evictions;
	L->hdr->regcache.invalidations = rc.invalidations;
	L->hdr->regcache.registrations = rc.registrations;
	L->hdr->regcache.entries = rc.entries;
	L->hdr->regcache.bytes = rc.bytes;
	__atomic_store_n(&L->hdr->refreshed_ns, ssw_statreg_realtime_ns(), __ATOMIC_RELAXED);
	pthread_mutex_unlock(&L->reg_lock);
drop:
	/* outside the registry lock: the last reference may tear a socket down */
	for (int i = 0; i < c->n; i++)
		ssw_sock_unref(c->v[i].s);
	return locked;
}

/* The pass answering a ring, in the caller's thread: an interposed call's
 * entry or a switch wait's wake-up, never with a lock of the switch held.
 *
 * Why not a thread of our own, as before: glibc forks a process that ever
 * had a second thread by its multithreaded path (malloc arenas, stdio and
 * stack lists reset in parent and child), a dozen more page faults a fork,
 * about 300 us on these machines — fork + _exit + waitpid took 1.4x as long
 * under the switch, and every fork-per-connection server paid it per
 * connection (issue 18).  The cost here: a process answers at its next
 * socket call, or within SSW_STATREG_LOOK_MS while it sleeps in one of the
 * switch's waits (epoll, poll/select); one blocked elsewhere (sleep,
 * waitpid, a pipe) answers when it comes back, and `sockswitch stat` shows
 * its last rows as stale meanwhile. */
void ssw_statreg_answer_slow(void)
{
	int saved = errno;
	uint32_t v = __atomic_load_n(L->bell.door, __ATOMIC_ACQUIRE);
	uint64_t t0 = ssw_now_ns();
	bool rung = v != L->bell.served;
	if (rung)
		L->rung_ns = t0;
	/* a change alone (no ring): at most every REFRESH_DIRTY_NS */
	uint64_t gap = rung ? REFRESH_MIN_NS : REFRESH_DIRTY_NS;
	if ((!rung && !L->bell.dirty) || t0 - L->answered_ns < gap ||
	    pthread_mutex_trylock(&L->pass_lock) != 0) /* another thread answers it */
		goto out;
	L->bell.dirty = 0;
	v = __atomic_load_n(L->bell.door, __ATOMIC_ACQUIRE);
	struct collect c = { .v = L->refs.v, .max = L->refs.max };
	if (!c.v) {
		c.max = SSW_STATREG_SLOTS;
		c.v = malloc(sizeof *c.v * (size_t)c.max);
		if (!c.v) {
			pthread_mutex_unlock(&L->pass_lock);
			goto out;
		}
	}
	bool done = refresh(&c);
	int cap_max = SSW_STATREG_MAX_SLOTS;
	if (done && c.dropped && c.max < cap_max) {
		/* more sockets than references: a bigger array, then again */
		int m = c.n + c.dropped + c.dropped / 4;
		m = m > cap_max ? cap_max : m;
		struct ref *nv = realloc(c.v, sizeof *c.v * (size_t)m);
		if (nv) {
			c.v = nv;
			c.max = m;
			done = refresh(&c);
		}
	}
	L->refs.v = c.v;
	L->refs.max = c.max;
	if (!done || pthread_mutex_trylock(&L->reg_lock) != 0) {
		pthread_mutex_unlock(&L->pass_lock);
		goto out;
	}
	L->answered_ns = t0;
	__atomic_store_n(&L->bell.served, v, __ATOMIC_RELAXED);
	__atomic_store_n(&L->hdr->ack, v, __ATOMIC_RELEASE); /* under reg_lock: the table may move when it grows */
	pthread_mutex_unlock(&L->reg_lock);
	pthread_mutex_unlock(&L->pass_lock);
out:
	errno = saved;
}

void ssw_statreg_changed(int fd, struct ssw_sock *sock)
{
	if (!__atomic_load_n(&L->bell.door, __ATOMIC_ACQUIRE) || !L->rung_ns ||
	    ssw_now_ns() - L->rung_ns > WATCHED_NS)
		return; /* not watched now: nothing to keep up to date */
	/* that socket's row alone: never waits (see ssw_statreg_answer) */
	if (pthread_mutex_trylock(&L->reg_lock) != 0) {
		L->bell.dirty = 1; /* the next call's answer does it */
		return;
	}
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used; i++) {
		struct ssw_statreg_slot *sl = &L->slots[i];
		if (sl->kind != SSW_SR_SWITCHED || sl->fd != fd)
			continue;
		if (sock)
			ssw_statreg_publish_sock(fd, sock, sl);
		else
			ssw_statreg_slot_free(sl);
		break;
	}
	pthread_mutex_unlock(&L->reg_lock);
}

/* ---- set-up --------------------------------------------------------------- */

static void at_exit(void)
{
	if (!L->hdr || L->owner != ssw_pid())
		return;
	int dfd = ssw_statreg_lock_dir(AT_FDCWD, ssw_statreg_dirpath, LOCK_EX);
	if (dfd < 0)
		return; /* moved, or no longer ours: leave it to `sockswitch stat` */
	char name[32];
	snprintf(name, sizeof name, "%d.stat", (int)L->owner);
	SYS_(unlinkat, dfd, name, 0);
	if (ssw_statreg_only_doorbell(dfd)) {
		SYS_(unlinkat, dfd, "doorbell", 0);
		SYS_(unlinkat, AT_FDCWD, ssw_statreg_dirpath, AT_REMOVEDIR);
	}
	sys_close(dfd);
}

/* Leaving without exit handlers: exec (this image's sockets go with it, and
 * the pid lives on in the new program, which starts a file of its own if it
 * switches anything; if the exec fails, this process no longer shows in
 * `stat` — rare: a failed exec is usually followed by _exit), or a relay's
 * _exit. */
void ssw_statreg_leave(void)
{
	at_exit();
}

/* Another thread may hold the registry lock at the fork (a pass, a hook):
 * the child would inherit it locked by a thread it does not have. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&L->reg_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&L->reg_lock);
}

/* The pass lock is taken by fork.c before anything else of a fork: a pass
 * ends by dropping its references, which may tear a socket down, and that
 * waits for fork.c's lock; taken after it (in atfork_prepare), the fork
 * and the pass would wait for each other. */
void ssw_statreg_fork_begin(void)
{
	pthread_mutex_lock(&L->pass_lock);
}

#define CHILD_PUBLISH_NS (100ull * 1000000ull)

/* The child of a fork has its parent's mappings but not its published
 * file: its registry state is all zero (the fork-local page), and it starts
 * over with a file of its own at its first socket call 100 ms after the
 * fork when it holds switched sockets (its parent's), else at its first
 * socket; its pass lock is a fresh one. */
void ssw_statreg_fork_end(bool child)
{
	if (!child)
		pthread_mutex_unlock(&L->pass_lock);
	else if (ssw_fdtab_count() > 0)
		/* a child that makes no socket of its own (it serves the one it
		 * inherited) showed nowhere, and the connection vanished from
		 * `stat` once the parent closed its copy.  Not at once: a
		 * fork-per-connection server's child that answers one request
		 * and exits would pay for a file of its own (-10 to -18% of
		 * `bench --load --case forkconn`'s requests/s): at its first
		 * socket call once it has lived CHILD_PUBLISH_NS */
		ssw_fl->statreg_owed_ns = ssw_now_ns() + CHILD_PUBLISH_NS;
}

void ssw_statreg_owed(void)
{
	if (ssw_now_ns() < ssw_fl->statreg_owed_ns)
		return;
	ssw_fl->statreg_owed_ns = 0;
	ssw_statreg_ensure();
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, NULL);
	atexit(at_exit);
}

static bool disabled(void)
{
	return ssw_param_choice(SSW_P_STAT) == 0;
}

static void create_locked(void)
{
	uint64_t ino = ssw_statreg_netns();
	if (!ino || ssw_statreg_dir(ssw_statreg_dirpath, sizeof ssw_statreg_dirpath) < 0)
		return;
	int dfd = ssw_statreg_open_ns_dir(ino);
	if (dfd < 0)
		return;
	uid_t me = geteuid();
	char name[32];
	snprintf(name, sizeof name, "%d.stat", (int)getpid());
	snprintf(ssw_statreg_path, sizeof ssw_statreg_path, "%s/%s", ssw_statreg_dirpath, name);
	SYS_(unlinkat, dfd, name, 0); /* a file of a dead process with our pid */
	int fd = ssw_statreg_open_file(dfd, name, O_RDWR | O_CREAT | O_EXCL, me, 0, 0);
	struct ssw_statreg_hdr *h = fd >= 0 ? ssw_statreg_map(fd, SSW_STATREG_FILE_SIZE(SSW_STATREG_SLOTS)) : NULL;
	/* the bell word, read at every socket call: a mapping of the header
	 * page alone, which the table's growth (mremap) never moves; in our own
	 * file (the shared doorbell may be truncated by any process of the
	 * user, and a read there would then be a SIGBUS) */
	struct ssw_statreg_hdr *bh = h ? ssw_statreg_map(fd, SSW_STATREG_HDR_SIZE) : NULL;
	if (fd >= 0)
		sys_close(fd);
	/* the readers' counter: they ring each process's bell with its next value */
	fd = bh ? ssw_statreg_open_file(dfd, "doorbell", O_RDWR | O_CREAT, me, 0, SSW_STATREG_DOOR_SIZE) : -1;
	bool door = fd >= 0 && (SYS_(ftruncate, fd, SSW_STATREG_DOOR_SIZE) == 0);
	if (fd >= 0)
		sys_close(fd);
	if (!door) {
		if (bh)
			munmap(bh, SSW_STATREG_HDR_SIZE);
		SSW_WARN_ONCE("stat registry: cannot publish in %s: %s", ssw_statreg_dirpath, strerror(errno));
		if (h) {
			munmap(h, SSW_STATREG_FILE_SIZE(SSW_STATREG_SLOTS));
			SYS_(unlinkat, dfd, name, 0);
		}
		sys_close(dfd); /* unlocks */
		return;
	}
	sys_close(dfd); /* unlocks */
	h->version = SSW_STATREG_VERSION;
	h->nslots = SSW_STATREG_SLOTS;
	L->nslots = SSW_STATREG_SLOTS;
	h->slot_size = sizeof(struct ssw_statreg_slot);
	h->hdr_size = SSW_STATREG_HDR_SIZE;
	h->pid = (int32_t)getpid();
	h->starttime = ssw_statreg_proc_starttime();
	h->netns = ino;
	h->refreshed_ns = ssw_statreg_realtime_ns();
	prctl(PR_GET_NAME, h->comm, 0, 0, 0);
	h->comm[sizeof h->comm - 1] = '\0';
	__atomic_store_n(&h->magic, SSW_STATREG_MAGIC, __ATOMIC_RELEASE);

	/* rows of switched sockets come with the first ring answered */
	L->bell.served = 0;
	L->hdr = h;
	L->slots = (struct ssw_statreg_slot *)((char *)h + SSW_STATREG_HDR_SIZE);
	L->owner = getpid();
	pthread_once(&atfork_once, atfork_register);

	__atomic_store_n(&L->bell.door, &bh->bell, __ATOMIC_RELEASE);
	SSW_DEBUG("stat registry: %s", ssw_statreg_path);
}

/* A socket the application closed while a refresh pass held a reference is
 * torn down (and its bytes counted) by that pass when it ends; the
 * exit summary waits for a pass in progress, at most a second, so that a
 * short-lived program does not lose its last connection's counters. */
void ssw_statreg_quiesce(void)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 1;
	if (pthread_mutex_timedlock(&L->pass_lock, &dl) == 0)
		pthread_mutex_unlock(&L->pass_lock);
}

void ssw_statreg_ensure_slow(void)
{
	int saved = errno;
	pthread_mutex_lock(&L->reg_lock);
	if (!ssw_fl->statreg_ready) {
		if (!disabled())
			create_locked();
		__atomic_store_n(&ssw_fl->statreg_ready, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&L->reg_lock);
	errno = saved;
}

/* ---- hooks ---------------------------------------------------------------- */

void ssw_statreg_kernel(int fd, const struct sockaddr *peer, socklen_t len, const char *why)
{
	ssw_statreg_ensure();
	if (!__atomic_load_n(&L->hdr, __ATOMIC_ACQUIRE) || fd < 0)
		return;
	int saved = errno;
	uint64_t ino = ssw_statreg_fd_inode(fd);
	if (!ino)
		goto out;
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	char loc[64] = "*", rem[64] = "*";
	if (sys_getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		ssw_statreg_fmt_addr(&a, loc, sizeof loc);
	if (peer && len >= sizeof(sa_family_t)) {
		memset(&a, 0, sizeof a);
		memcpy(&a, peer, len < sizeof a ? len : sizeof a);
		ssw_statreg_fmt_addr(&a, rem, sizeof rem);
	}

	pthread_mutex_lock(&L->reg_lock);
	if (!L->hdr) {
		pthread_mutex_unlock(&L->reg_lock);
		goto out;
	}
	struct ssw_statreg_slot *sl = NULL;
	uint32_t used = L->hdr->used;
	for (uint32_t i = 0; i < used && !sl; i++)
		if (L->slots[i].kind == SSW_SR_KERNEL && L->slots[i].fd == fd)
			sl = &L->slots[i]; /* the fd was closed behind our back */
	if (!sl)
		sl = ssw_statreg_slot_alloc();
	for (uint32_t i = 0; i < used && !sl; i++)
		if (L->slots[i].kind == SSW_SR_KERNEL && ssw_statreg_fd_inode(L->slots[i].fd) != L->slots[i].ino) {
			ssw_statreg_slot_free(&L->slots[i]);
			sl = &L->slots[i];
		}
	if (!sl) {
		atomic_fetch_add(&L->kernel_dropped, 1);
		__atomic_fetch_add(&L->hdr->dropped, 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&L->reg_lock);
		goto out;
	}
	if (sl->kind != SSW_SR_KERNEL)
		atomic_fetch_add(&L->nkernel, 1);
	ssw_statreg_slot_begin(sl);
	sl->kind = SSW_SR_KERNEL;
	sl->state = SSW_SR_CONNECTING;
	sl->flags = 0;
	sl->fd = fd;
	snprintf(sl->provider, sizeof sl->provider, "tcp");
	sl->describe[0] = '\0';
	sl->bytes_sent = sl->bytes_received = sl->msgs_sent = sl->msgs_received = 0;
	sl->tx_inflight = sl->tx_limit = sl->rx_window = 0;
	sl->ring_resident = 0;
	sl->ino = ino;
	sl->since_ns = ssw_statreg_realtime_ns();
	memcpy(sl->local, loc, sizeof loc);
	memcpy(sl->remote, rem, sizeof rem);
	snprintf(sl->reason, sizeof sl->reason, "%s", why ? why : "");
	sl->refused = 0;
	sl->driver = 0;
	ssw_statreg_slot_end(sl);
	/* its state now (connected, listening), from the kernel: a process
	 * that never answers a ring (it sleeps elsewhere) still shows it */
	if (!ssw_statreg_kernel_refresh(sl))
		ssw_statreg_slot_free(sl);
	pthread_mutex_unlock(&L->reg_lock);
out:
	errno = saved;
}

void ssw_statreg_route_tcp(int fd, const struct sockaddr *peer, socklen_t len, const struct ssw_route_rule *rule)
{
	if (!rule)
		return; /* no rule matched: a remote host, not a decision worth listing */
	char why[96 + 16];
	snprintf(why, sizeof why, "route says tcp (%.80s)", rule->origin);
	ssw_statreg_kernel(fd, peer, len, why);
}

void ssw_statreg_fd_closed(int fd)
{
	if (!atomic_load_explicit(&L->nkernel, memory_order_relaxed))
		return;
	pthread_mutex_lock(&L->reg_lock);
	if (L->hdr) {
		uint32_t used = L->hdr->used;
		for (uint32_t i = 0; i < used; i++)
			if (L->slots[i].kind == SSW_SR_KERNEL && L->slots[i].fd == fd)
				ssw_statreg_slot_free(&L->slots[i]);
	}
	pthread_mutex_unlock(&L->reg_lock);
}
