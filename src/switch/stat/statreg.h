/* statreg.h — the live socket registry `sockswitch stat` reads: each process
 * running the switch publishes its switched sockets (and the connections that
 * fell back to kernel TCP, with the reason) in a small shared-memory file,
 *
 *     $SOCKSWITCH_STAT_DIR (default /dev/shm/sockswitch)      1777 sticky, root's
 *         / uid-<euid>                                         0700, owned by euid
 *             / net-<netns inode>                              0700, owned by euid
 *                 / <pid>.stat, doorbell                       0600, owned by euid
 *
 * created at the process's first switched socket or fallback.  Trust model
 * (see statreg.c): a user writes only below its own uid directory; root's
 * `stat` reads everyone's, a user's `stat` its own; every directory and file
 * is opened without following links and checked (owner, mode, type, size)
 * before use, and anything that fails is skipped, never trusted.  The data
 * path never touches the registry: a reader rings (takes the next value of
 * the directory's `doorbell` counter and writes it into each process's
 * header `bell`); the process, at its next socket call or within
 * SSW_STATREG_LOOK_MS while it waits in the switch, copies the sessions' own
 * counters into the slots, then stores that value in the header's `ack`.  Slots
 * are written under a per-slot seqlock; readers copy the file with pread
 * (never touch a mapping of another process's file: it can shrink under
 * them) and keep a slot only if its sequence number is even and unchanged
 * across two copies.  Any failure here means "not published", never an error
 * for the application. */
#ifndef SSW_STATREG_H
#define SSW_STATREG_H

#include "common/forklocal.h"
#include "common/sys.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define SSW_STATREG_MAGIC 0x3154415453575353ull  /* "SSWSTAT1" */
#define SSW_STATREG_VERSION 2 /* 2: a bell per process */
#define SSW_STATREG_SLOTS 4096          /* slots of a new file; it doubles when full */
#define SSW_STATREG_MAX_SLOTS (1u << 18) /* 96 MiB of tmpfs, touched only as used */
#define SSW_STATREG_HDR_SIZE 4096
#define SSW_STATREG_DEFAULT_DIR "/dev/shm/sockswitch"

enum ssw_statreg_kind { SSW_SR_FREE = 0, SSW_SR_SWITCHED = 1, SSW_SR_KERNEL = 2 };

enum ssw_statreg_state {
	SSW_SR_UNKNOWN = 0,
	SSW_SR_LISTENING,
	SSW_SR_CONNECTING,
	SSW_SR_CONNECTED,
	SSW_SR_CLOSING,      /* half-closed either way, or closed by the peer */
	SSW_SR_SUSPENDED,    /* session suspended while moving between processes */
};

enum { SSW_SR_F_SHARED = 1 };  /* another process holds the socket too (fork) */

struct ssw_statreg_hdr {
	uint64_t magic;
	uint32_t version, nslots, slot_size, hdr_size;
	int32_t pid;
	uint32_t ack;             /* doorbell value of the last refresh (atomic) */
	uint64_t starttime;       /* field 22 of /proc/PID/stat: tells pid reuse apart */
	uint64_t netns;           /* inode of /proc/self/ns/net */
	uint64_t refreshed_ns;    /* CLOCK_REALTIME of the last refresh */
	uint32_t dropped;         /* sockets not shown: the table was full (atomic) */
	uint32_t used;            /* slots at and past this index are free (atomic) */
	char comm[16];
	/* the process's registration caches (regcache.h ssw_regcache_totals),
	 * as of the last refresh: per process, not per connection */
	struct {
		uint64_t hits, misses, evictions, invalidations, registrations, entries, bytes;
	} regcache;
	/* rung by a reader (pwrite of the doorbell's new value): the process
	 * answers (a refresh, then ack = bell) at its next socket call */
	uint32_t bell;
	uint32_t pad;
};

struct ssw_statreg_slot {
	uint32_t seq;             /* seqlock: odd while the slot is written */
	uint8_t kind;             /* enum ssw_statreg_kind */
	uint8_t state;            /* enum ssw_statreg_state */
	uint16_t flags;
	int32_t fd;
	char provider[12];        /* "shm", "fabric", "tcp" for kernel TCP; a listener: "shm+fabric" */
	uint64_t bytes_sent, bytes_received, msgs_sent, msgs_received;
	uint64_t tx_inflight;     /* bytes sent and not yet credited back */
	uint64_t tx_limit;        /* bytes that may be in flight (peer window, SO_SNDBUF) */
	uint64_t rx_window;       /* credit window granted to the peer */
	uint64_t ino;             /* inode of the kernel socket */
	uint64_t since_ns;        /* CLOCK_REALTIME when published */
	char local[64], remote[64];   /* "1.2.3.4:80", "[::1]:80", "*" */
	char reason[96];          /* why kernel TCP (SSW_SR_KERNEL); a listener: its note (a provider
				   * half lost, the last request dropped), or "" */
	char describe[48];        /* the provider's describe() line ("fabric (libfabric tcp)"), or "" */
	uint64_t ring_resident;   /* bytes of the connection's shared memory resident (shm: its segment,
				   * both rings), 0: not known */
	uint32_t refused;         /* a listener: connection requests dropped at accept */
	int32_t driver;           /* a connection shared by fork whose processes take turns driving it
				   * (no shared context): the pid driving it, -1 none since the fork;
				   * 0 any other (and every row of a library before this field) */
};

_Static_assert(sizeof(struct ssw_statreg_slot) == 384, "slot layout");
_Static_assert(sizeof(struct ssw_statreg_hdr) <= SSW_STATREG_HDR_SIZE, "header layout");

#define SSW_STATREG_FILE_SIZE(nslots) ((uint64_t)SSW_STATREG_HDR_SIZE + (uint64_t)(nslots) * sizeof(struct ssw_statreg_slot))
#define SSW_STATREG_DOOR_SIZE 4096

/* The base directory ($SOCKSWITCH_STAT_DIR or the default). */
const char *ssw_statreg_base(void);
/* Inode of this process's network namespace; 0 if it cannot be read. */
uint64_t ssw_statreg_netns(void);
/* This user's directory for this namespace (base/uid-EUID/net-INODE) into
 * buf; -1 if the network namespace cannot be read. */
int ssw_statreg_dir(char *buf, unsigned len);

/* Opens the directory name under dirfd (AT_FDCWD: a path) without following
 * a link and checks it: owned by uid and writable by nobody else; -1 (errno
 * EPERM for a wrong owner or mode, ENOTDIR...) otherwise. */
int ssw_statreg_open_dir(int dirfd, const char *name, uid_t uid);
/* Opens the file name under dirfd (O_NOFOLLOW, O_NONBLOCK: a FIFO never
 * blocks) and checks it: a regular file owned by uid whose size is within
 * [minsize, maxsize]; -1 otherwise (errno EPERM: wrong owner; EINVAL: not a
 * regular file or a wrong size). */
int ssw_statreg_open_file(int dirfd, const char *name, int flags, uid_t uid, uint64_t minsize, uint64_t maxsize);
const char *ssw_statreg_state_name(int state);
/* Reads a small file (a /proc one) whole into buf, NUL-terminated: its
 * length, or -1. */
int ssw_statreg_read_small(const char *path, char *buf, size_t len);

/* ---- hooks the switch calls (cheap no-ops once the registry is off) ---- */

/* A switched socket exists in this process: make sure the table exists
 * (the sockets themselves are read from the fd table when a reader rings). */
void ssw_statreg_ensure_slow(void);
/* Wait (at most 1 s) for a refresh pass in progress to drop its references. */
void ssw_statreg_quiesce(void);
/* Around fork (fork.c): no refresher pass runs across it. */
void ssw_statreg_fork_begin(void);
void ssw_statreg_fork_end(bool child);
/* Before exec or _exit: take this process's file away (see statreg.c). */
void ssw_statreg_leave(void);
/* The doorbell a reader rings, and the last ring answered: the first member
 * of the registry's fork-local state (statreg.c), so that the check below
 * costs two loads.  door is NULL while this process is not published. */
struct ssw_statreg_bell {
	uint32_t *door;
	uint32_t served;
	uint32_t dirty;   /* a socket changed state in a process already watched */
};
#define SSW_STATREG_BELL ((struct ssw_statreg_bell *)ssw_fl->statreg)
/* How long a switch wait sleeps at most while this process is published:
 * then it answers a ring (`sockswitch stat` waits 1 s for answers).  An idle
 * process wakes about once a second for it, as an idle session wait does. */
#define SSW_STATREG_LOOK_MS 900
void ssw_statreg_answer_slow(void);
/* A reader rang: answer it (a refresh pass).  Called where no lock of the
 * switch is held: interposed calls' entries, waits' wake-ups. */
void ssw_statreg_owed(void);
static inline void ssw_statreg_answer(void)
{
	if (ssw_provider_calls) /* a provider's own call, maybe under a session lock */
		return;
	if (__builtin_expect(ssw_fl->statreg_owed_ns != 0, 0))
		ssw_statreg_owed();
	uint32_t *d = __atomic_load_n(&SSW_STATREG_BELL->door, __ATOMIC_ACQUIRE);
	if (d && (__atomic_load_n(d, __ATOMIC_RELAXED) != SSW_STATREG_BELL->served || SSW_STATREG_BELL->dirty))
		ssw_statreg_answer_slow();
}
struct ssw_sock;
/* fd changed state (sock: after a shutdown) or is being closed (sock NULL):
 * a process that a reader watches (rang within a few seconds) updates that
 * row now, not at its next ring, so that a program that stops calling (a
 * half-closed client that only sleeps) shows what it did.  Never waits. */
void ssw_statreg_changed(int fd, struct ssw_sock *sock);
/* A wait's sleep in ms (-1: none), cut to SSW_STATREG_LOOK_MS while
 * published, so that a process asleep in the switch answers too. */
static inline int ssw_statreg_sleep_ms(int ms)
{
	if (!__atomic_load_n(&SSW_STATREG_BELL->door, __ATOMIC_RELAXED))
		return ms;
	return ms < 0 || ms > SSW_STATREG_LOOK_MS ? SSW_STATREG_LOOK_MS : ms;
}
static inline void ssw_statreg_ensure(void)
{
	if (!__atomic_load_n(&ssw_fl->statreg_ready, __ATOMIC_RELAXED))
		ssw_statreg_ensure_slow();
}

/* fd is a kernel TCP connection the switch decided not to (or could not)
 * carry; peer may be NULL (read back later).  why: the fallback reason. */
void ssw_statreg_kernel(int fd, const struct sockaddr *peer, socklen_t len, const char *why);

struct ssw_route_rule;
/* connect() routed to TCP: published when an explicit rule said so. */
void ssw_statreg_route_tcp(int fd, const struct sockaddr *peer, socklen_t len, const struct ssw_route_rule *rule);

/* fd is being closed. */
void ssw_statreg_fd_closed(int fd);

/* starttime (field 22) from the text of /proc/PID/stat: tells a pid reused
 * by another process from the one that published; 0 if unreadable. */
uint64_t ssw_statreg_starttime(const char *stat);

#endif
