/* stat.c — `sockswitch stat`: lists the live sockets that processes running
 * the switch publish in this network namespace (src/switch/stat/statreg.h):
 * rings each process's bell so that it refreshes its counters, waits briefly for
 * their answers, then reads each process's table with the per-slot seqlock. */
#include "cli.h"

#include "json.h"
#include "switch/stat/statreg.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ACK_WAIT_MS 1000

void stat_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch stat [--json] [-p PID]\n"
		"\n"
		"Lists every live socket of the programs running under the switch in this\n"
		"network namespace: connections carried by a provider (shm, fabric), their listeners,\n"
		"and the connections that fell back to kernel TCP, with the reason.\n"
		"Counters are the programs' own, refreshed on request: reading them costs\n"
		"the data path nothing.\n"
		"\n"
		"columns:\n"
		"  PID, COMMAND, FD     the process and its descriptor\n"
		"  PROVIDER             the provider carrying the connection, as it describes\n"
		"                       itself (shm; fabric (libfabric tcp)); a listener: every\n"
		"                       provider it listens on (shm+fabric); tcp: kernel TCP\n"
		"                       (see REASON)\n"
		"  STATE                listening, connecting, connected, closing, suspended\n"
		"  LOCAL, REMOTE        addr:port as the program sees them\n"
		"  SENT, RECEIVED       payload bytes (messages) each way; for kernel TCP the\n"
		"                       bytes acknowledged / received and data segments\n"
		"  CREDITS              send credit left / limit, and the receive window granted\n"
		"  RING                 the connection's shared memory resident now (shm: both\n"
		"                       rings and their header; - when not known)\n"
		"  REASON               why kernel TCP; for a switched listener, the connection\n"
		"                       requests it dropped (last reason) or a provider it lost;\n"
		"                       for a connection shared by fork whose processes take\n"
		"                       turns (fabric, or shm without shared context): the\n"
		"                       process driving it now (driven by pid N)\n"
		"\n"
		"options:\n"
		"  --json          one JSON array of objects with the keys pid, command, fd,\n"
		"                  local, remote, provider, provider_describe, state,\n"
		"                  bytes_sent, bytes_received,\n"
		"                  msgs_sent, msgs_received, tx_inflight, tx_limit, rx_window,\n"
		"                  ring_resident (bytes, null when not known),\n"
		"                  shared, driver (of a connection shared by fork whose\n"
		"                  processes take turns: the pid driving it, 0 none since\n"
		"                  the fork; null otherwise), stale, refused (a listener's\n"
		"                  dropped connection requests), fallback_reason (null when\n"
		"                  switched), note (a switched listener's last dropped\n"
		"                  request or lost provider),\n"
		"                  and the process's registration caches (per process: the\n"
		"                  same in each of its rows): regcache_hits, regcache_misses,\n"
		"                  regcache_evictions, regcache_invalidations (entries dropped\n"
		"                  because their memory was unmapped), regcache_registrations\n"
		"                  (registrations made), regcache_entries, regcache_bytes (held)\n"
		"  -p, --pid PID   only the sockets of process PID\n"
		"  -h, --help      show this help\n"
		"\n"
		"environment:\n"
		"  SOCKSWITCH_STAT_DIR  where processes publish (default %s);\n"
		"                       must match the programs' setting\n"
		"  SOCKSWITCH_STAT=0    (in a program's environment) do not publish it\n"
		"\n"
		"Each user publishes under its own directory (mode 0700): a user sees its own\n"
		"programs, root everyone's.  Entries that fail the checks (not a regular file\n"
		"of the directory's owner, or naming a process of another uid) are skipped and\n"
		"counted on stderr; strings are shown with non-printable bytes as \\xNN.\n"
		"Files of processes that are gone are removed.  A process answers at its\n"
		"next socket call, or while it waits in one; one that does not answer within\n"
		"%d ms (asleep elsewhere, stopped) is shown from its last snapshot and\n"
		"marked stale.  exit status: 0, 1 if the registry cannot be read or -p names\n"
		"no process, 2 on a usage error.\n",
		SSW_STATREG_DEFAULT_DIR, ACK_WAIT_MS);
}

struct row {
	int pid;
	char comm[17];
	bool stale;
	struct ssw_statreg_slot s;
	__typeof__(((struct ssw_statreg_hdr *)0)->regcache) rc; /* its process's */
};

struct rows {
	struct row *v;
	int n, cap;
};

/* One namespace directory of one user: base/uid-U/net-N. */
struct nsdir {
	uid_t uid;
	int fd;
	uint32_t want;            /* doorbell value to wait for; 0: not rung */
};

struct proc {
	int pid;
	int dir;                  /* index in the nsdir array */
	char name[32];
	bool answered;
};

/* What stat could not show, and why (said once, at the end). */
struct tally {
	int untrusted;            /* entries failing the owner/type/size checks */
	int forged;               /* entries claiming a process of another uid */
	int bad_dirs;             /* uid-U directories not owned by U (or writable by others) */
	int others;               /* other users' directories (not readable unless root) */
	unsigned long unshown;    /* sockets processes could not publish (table full) */
	int other_version;        /* live processes running another version of the library */
	int removed;              /* entries of dead processes removed */
};

#define FILE_MAX SSW_STATREG_FILE_SIZE(SSW_STATREG_MAX_SLOTS)

static int read_proc_file(int pid, const char *what, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", pid, what);
	return ssw_statreg_read_small(path, buf, len) < 0 ? -1 : 0;
}

static uint64_t proc_starttime(int pid)
{
	char buf[1024];
	return read_proc_file(pid, "stat", buf, sizeof buf) < 0 ? 0 : ssw_statreg_starttime(buf);
}

/* Does process pid run as uid (real or effective)?  Root's entries may name
 * any process: root can write anywhere anyway. */
static bool runs_as(int pid, uid_t uid)
{
	if (uid == 0)
		return true;
	char buf[4096];
	if (read_proc_file(pid, "status", buf, sizeof buf) < 0)
		return false;
	const char *u = strstr(buf, "\nUid:");
	unsigned long r, e;
	return u && sscanf(u + 5, "%lu %lu", &r, &e) == 2 && (r == uid || e == uid);
}

/* Network namespace inode of process pid; 0 if it cannot be read. */
static uint64_t proc_netns(int pid)
{
	char path[64], link[64];
	snprintf(path, sizeof path, "/proc/%d/ns/net", pid);
	ssize_t n = readlink(path, link, sizeof link - 1);
	if (n <= 0)
		return 0;
	link[n] = '\0';
	unsigned long long ino;
	return sscanf(link, "net:[%llu]", &ino) == 1 ? ino : 0;
}

/* Reads and checks the header of an open registry file. */
static int read_hdr(int fd, struct ssw_statreg_hdr *h)
{
	struct stat st;
	if (pread(fd, h, sizeof *h, 0) != (ssize_t)sizeof *h || h->magic != SSW_STATREG_MAGIC ||
	    h->version != SSW_STATREG_VERSION || h->slot_size != sizeof(struct ssw_statreg_slot) ||
	    h->hdr_size != SSW_STATREG_HDR_SIZE || h->nslots > SSW_STATREG_MAX_SLOTS || fstat(fd, &st) < 0 ||
	    (uint64_t)st.st_size < SSW_STATREG_FILE_SIZE(h->nslots))
		return -1;
	return 0;
}

/* Opens entry name (PID.stat) of a namespace directory owned by uid: the
 * file descriptor, -1 if it is not there or not ready yet, -2 if it fails
 * the checks (counted as untrusted), -3 if it is a file of another version
 * of the library (a program started before an upgrade).  Never blocks: O_NONBLOCK, and a FIFO
 * or device is refused before anything is read. */
static int open_entry(int dfd, const char *name, uid_t uid, struct ssw_statreg_hdr *h)
{
	int fd = ssw_statreg_open_file(dfd, name, O_RDONLY, uid, 0, FILE_MAX);
	if (fd < 0)
		return errno == ENOENT ? -1 : -2;
	struct stat st;
	if (read_hdr(fd, h) < 0) {
		bool young = fstat(fd, &st) == 0 && st.st_size == 0; /* being created */
		/* magic and version open every version's header */
		bool other = !young && h->magic == SSW_STATREG_MAGIC && h->version != SSW_STATREG_VERSION;
		close(fd);
		return young ? -1 : other ? -3 : -2;
	}
	return fd;
}

/* An entry of another version: removed if its process is gone (its pid
 * from the name; a reused pid keeps it until that process ends too), else
 * counted.  true: it was removed. */
static bool other_version(int dfd, const char *name, int pid, struct tally *t)
{
	if (kill(pid, 0) < 0 && errno == ESRCH) {
		if (unlinkat(dfd, name, 0) == 0) {
			t->removed++;
			return true;
		}
		return false;
	}
	t->other_version++;
	return false;
}

/* Is the file's process alive (and the same process, not a reused pid)? */
static bool alive(const struct ssw_statreg_hdr *h, int pid)
{
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	uint64_t st = proc_starttime(pid);
	return st && st == h->starttime;
}

/* Takes the namespace's next ring value: the doorbell file is a counter
 * (pread/pwrite, never mapped: its owner may truncate it), each process's
 * bell gets it (ring_proc).  Returns the value to wait for, or 0. */
static uint32_t ring(int dfd, uid_t uid)
{
	int fd = ssw_statreg_open_file(dfd, "doorbell", O_RDWR, uid, SSW_STATREG_DOOR_SIZE, SSW_STATREG_DOOR_SIZE);
	if (fd < 0)
		return 0;
	uint32_t v = 0;
	if (pread(fd, &v, sizeof v, 0) != (ssize_t)sizeof v)
		goto out;
	if (++v == 0)
		v = 1; /* 0 means "not rung" */
	if (pwrite(fd, &v, sizeof v, 0) != (ssize_t)sizeof v)
		v = 0;
out:
	close(fd);
	return v;
}

/* Rings one process: the doorbell's value into its file's bell, which the
 * process reads at its next socket call (src/switch/stat/statreg.c).  The
 * file passed open_entry's checks; opened again with the same ones, and
 * written with pwrite only (never mapped: its owner may truncate it). */
static void ring_proc(int dfd, const char *name, uid_t uid, uint32_t want)
{
	int fd = ssw_statreg_open_file(dfd, name, O_WRONLY, uid, SSW_STATREG_HDR_SIZE, FILE_MAX);
	if (fd < 0)
		return;
	ssize_t w = pwrite(fd, &want, sizeof want, offsetof(struct ssw_statreg_hdr, bell));
	(void)w; /* not rung: the process is shown stale */
	close(fd);
}

/* The last process of a namespace removes its directory at exit; one killed
 * leaves it behind: with no live process left, remove it (under the same
 * lock as the library, src/switch/statreg.c). */
static void remove_if_empty(int ufd, const char *name, uid_t uid)
{
	int fd = ssw_statreg_open_dir(ufd, name, uid);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0) { /* never wait: its owner may hold the lock forever */
		DIR *d = fdopendir(dup(fd));
		bool empty = d != NULL;
		struct dirent *e;
		while (d && (e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "doorbell"))
				empty = false;
		if (d)
			closedir(d);
		if (empty) {
			unlinkat(fd, "doorbell", 0);
			unlinkat(ufd, name, AT_REMOVEDIR);
		}
	}
	close(fd);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static struct row *row_add(struct rows *r)
{
	if (r->n == r->cap) {
		int nc = r->cap ? r->cap * 2 : 64;
		struct row *v = realloc(r->v, sizeof *v * (size_t)nc);
		if (!v)
			return NULL;
		r->v = v;
		r->cap = nc;
	}
	return &r->v[r->n++];
}

/* Copies the live slots of one open file into rows. */
static void read_slots(int fd, const struct ssw_statreg_hdr *h, int pid, bool stale, struct rows *rows)
{
	uint32_t used = h->used;
	if (used > h->nslots)
		used = h->nslots;
	size_t sz = (size_t)used * sizeof(struct ssw_statreg_slot);
	struct ssw_statreg_slot *a = malloc(sz ? sz : 1), *b = malloc(sz ? sz : 1);
	if (!a || !b)
		goto out;
	for (int attempt = 0; attempt < 5; attempt++) {
		if (pread(fd, a, sz, SSW_STATREG_HDR_SIZE) != (ssize_t)sz ||
		    pread(fd, b, sz, SSW_STATREG_HDR_SIZE) != (ssize_t)sz)
			goto out;
		bool torn = false;
		for (uint32_t i = 0; i < used; i++)
			if (a[i].seq != b[i].seq || (a[i].seq & 1))
				torn = true;
		if (!torn || attempt == 4)
			break;
		sleep_ms(1);
	}
	for (uint32_t i = 0; i < used; i++) {
		struct ssw_statreg_slot *s = &a[i];
		if (s->seq != b[i].seq || (s->seq & 1) || (s->kind != SSW_SR_SWITCHED && s->kind != SSW_SR_KERNEL))
			continue;
		struct row *r = row_add(rows);
		if (!r)
			goto out;
		memset(r, 0, sizeof *r);
		r->pid = pid;
		r->stale = stale;
		memcpy(r->comm, h->comm, sizeof h->comm);
		r->comm[16] = '\0';
		r->rc = h->regcache;
		r->s = *s;
		/* the strings come from another process: make sure they end */
		r->s.provider[sizeof r->s.provider - 1] = '\0';
		r->s.local[sizeof r->s.local - 1] = '\0';
		r->s.remote[sizeof r->s.remote - 1] = '\0';
		r->s.reason[sizeof r->s.reason - 1] = '\0';
		r->s.describe[sizeof r->s.describe - 1] = '\0';
	}
out:
	free(a);
	free(b);
}

/* Parses "PID.stat"; 0 if name is not an entry. */
static int entry_pid(const char *name)
{
	char *end;
	long pid = strtol(name, &end, 10);
	return pid > 0 && pid <= INT_MAX && !strcmp(end, ".stat") && name[0] != '+' && name[0] != '-' ? (int)pid : 0;
}

/* Removes the entries of dead processes in a directory of another namespace
 * (its inode may be reused by a new namespace), then the directory if empty. */
static void clean_ns_dir(int ufd, const char *name, uid_t uid, struct tally *t)
{
	int dfd = ssw_statreg_open_dir(ufd, name, uid);
	if (dfd < 0)
		return;
	DIR *d = fdopendir(dup(dfd));
	struct dirent *e;
	while (d && (e = readdir(d))) {
		int pid = entry_pid(e->d_name);
		struct ssw_statreg_hdr h;
		int fd = pid ? open_entry(dfd, e->d_name, uid, &h) : -1;
		if (fd == -3) {
			struct tally quiet = { 0 }; /* another namespace: only cleaned */
			if (other_version(dfd, e->d_name, pid, &quiet))
				t->removed++;
		}
		if (fd < 0)
			continue;
		if (!alive(&h, pid) && unlinkat(dfd, e->d_name, 0) == 0)
			t->removed++;
		close(fd);
	}
	if (d)
		closedir(d);
	close(dfd);
	remove_if_empty(ufd, name, uid);
}

/* Walks base/uid-U/ (every U for root, our own otherwise): rings the
 * doorbells of this namespace's directories, cleans the others. */
static void scan_users(int bfd, uint64_t ns, struct nsdir **dirs, int *nd, struct tally *t)
{
	char mine[32];
	snprintf(mine, sizeof mine, "net-%llu", (unsigned long long)ns);
	uid_t me = geteuid();
	DIR *d = fdopendir(dup(bfd));
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *end;
		if (strncmp(e->d_name, "uid-", 4) || !isdigit((unsigned char)e->d_name[4]))
			continue;
		unsigned long u = strtoul(e->d_name + 4, &end, 10);
		if (*end || u > UINT32_MAX)
			continue;
		if (me != 0 && u != me) {
			t->others++;
			continue;
		}
		int ufd = ssw_statreg_open_dir(bfd, e->d_name, (uid_t)u);
		if (ufd < 0) {
			if (errno == EPERM)
				t->bad_dirs++;
			continue;
		}
		DIR *nd_ = fdopendir(dup(ufd));
		struct dirent *n;
		while (nd_ && (n = readdir(nd_))) {
			if (strncmp(n->d_name, "net-", 4))
				continue;
			if (strcmp(n->d_name, mine)) {
				clean_ns_dir(ufd, n->d_name, (uid_t)u, t);
				continue;
			}
			int dfd = ssw_statreg_open_dir(ufd, n->d_name, (uid_t)u);
			struct nsdir *g = dfd >= 0 ? realloc(*dirs, sizeof **dirs * (size_t)(*nd + 1)) : NULL;
			if (!g) {
				if (dfd >= 0)
					close(dfd);
				continue;
			}
			*dirs = g;
			g[*nd] = (struct nsdir){ (uid_t)u, dfd, ring(dfd, (uid_t)u) };
			(*nd)++;
		}
		if (nd_)
			closedir(nd_);
		close(ufd);
	}
	if (d)
		closedir(d);
}

/* Lists the entries of this namespace's directories that pass the checks
 * (removing those of dead processes). */
static void list_procs(const struct nsdir *dirs, int nd, long only, uint64_t ns, struct proc **procs, int *np,
		       struct tally *t)
{
	for (int i = 0; i < nd; i++) {
		DIR *d = fdopendir(dup(dirs[i].fd));
		struct dirent *e;
		while (d && (e = readdir(d))) {
			int pid = entry_pid(e->d_name);
			if (!pid || (only > 0 && pid != only))
				continue;
			struct ssw_statreg_hdr h;
			int fd = open_entry(dirs[i].fd, e->d_name, dirs[i].uid, &h);
			if (fd == -2)
				t->untrusted++;
			if (fd == -3)
				other_version(dirs[i].fd, e->d_name, pid, t);
			if (fd < 0)
				continue;
			bool ok = true;
			if (h.pid != pid || !alive(&h, pid)) {
				if (h.pid == pid && unlinkat(dirs[i].fd, e->d_name, 0) == 0)
					t->removed++;
				ok = false;
			} else if (!runs_as(pid, dirs[i].uid)) {
				t->forged++;
				ok = false;
			} else {
				uint64_t pns = proc_netns(pid);
				ok = !pns || pns == ns; /* moved to another namespace (setns) */
			}
			close(fd);
			if (!ok)
				continue;
			if (dirs[i].want)
				ring_proc(dirs[i].fd, e->d_name, dirs[i].uid, dirs[i].want);
			struct proc *q = realloc(*procs, sizeof **procs * (size_t)(*np + 1));
			if (!q)
				break;
			*procs = q;
			q[*np] = (struct proc){ .pid = pid, .dir = i };
			snprintf(q[*np].name, sizeof q[*np].name, "%d.stat", pid);
			(*np)++;
		}
		if (d)
			closedir(d);
	}
}

/* Waits (at most ACK_WAIT_MS) for every process to answer its doorbell. */
static void wait_acks(const struct nsdir *dirs, struct proc *procs, int np)
{
	for (int waited = 0; waited <= ACK_WAIT_MS; waited += 2) {
		bool all = true;
		for (int i = 0; i < np; i++) {
			const struct nsdir *g = &dirs[procs[i].dir];
			struct ssw_statreg_hdr h;
			if (procs[i].answered || !g->want)
				continue;
			int fd = open_entry(g->fd, procs[i].name, g->uid, &h);
			if (fd >= 0) {
				procs[i].answered = (int32_t)(h.ack - g->want) >= 0;
				close(fd);
			}
			all = all && procs[i].answered;
		}
		if (all)
			return;
		sleep_ms(2);
	}
}

static void read_procs(const struct nsdir *dirs, const struct proc *procs, int np, struct rows *rows,
		       struct tally *t)
{
	for (int i = 0; i < np; i++) {
		const struct nsdir *g = &dirs[procs[i].dir];
		struct ssw_statreg_hdr h;
		int fd = open_entry(g->fd, procs[i].name, g->uid, &h);
		if (fd < 0)
			continue;
		read_slots(fd, &h, procs[i].pid, !procs[i].answered, rows);
		t->unshown += h.dropped;
		close(fd);
	}
}

static int cmp_rows(const void *x, const void *y)
{
	const struct row *a = x, *b = y;
	if (a->pid != b->pid)
		return a->pid < b->pid ? -1 : 1;
	return a->s.fd < b->s.fd ? -1 : a->s.fd > b->s.fd;
}


static void print_json(const struct row *rows, int n)
{
	printf("[");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		const struct ssw_statreg_slot *s = &r->s;
		printf("%s\n  {\"pid\": %d, \"command\": ", i ? "," : "", r->pid);
		cli_json_str(r->comm);
		printf(", \"fd\": %d, \"local\": ", s->fd);
		cli_json_str(s->local);
		printf(", \"remote\": ");
		cli_json_str(s->remote);
		printf(", \"provider\": ");
		cli_json_str(s->provider);
		printf(", \"provider_describe\": ");
		cli_json_str(s->describe[0] ? s->describe : s->provider);
		printf(", \"state\": \"%s\", \"bytes_sent\": %llu, \"bytes_received\": %llu, "
		       "\"msgs_sent\": %llu, \"msgs_received\": %llu, \"tx_inflight\": %llu, \"tx_limit\": %llu, "
		       "\"rx_window\": %llu, \"ring_resident\": ",
		       ssw_statreg_state_name(s->state), (unsigned long long)s->bytes_sent,
		       (unsigned long long)s->bytes_received, (unsigned long long)s->msgs_sent,
		       (unsigned long long)s->msgs_received, (unsigned long long)s->tx_inflight,
		       (unsigned long long)s->tx_limit, (unsigned long long)s->rx_window);
		if (s->ring_resident)
			printf("%llu", (unsigned long long)s->ring_resident);
		else
			printf("null");
		printf(", \"shared\": %s, \"driver\": ", s->flags & SSW_SR_F_SHARED ? "true" : "false");
		if (s->driver)
			printf("%d", s->driver > 0 ? (int)s->driver : 0);
		else
			printf("null");
		printf(", \"stale\": %s, \"refused\": %u, \"fallback_reason\": ", r->stale ? "true" : "false", s->refused);
		if (s->kind == SSW_SR_KERNEL)
			cli_json_str(s->reason);
		else
			printf("null");
		printf(", \"note\": ");
		if (s->kind != SSW_SR_KERNEL && s->reason[0])
			cli_json_str(s->reason);
		else
			printf("null");
		printf(", \"regcache_hits\": %llu, \"regcache_misses\": %llu, \"regcache_evictions\": %llu, "
		       "\"regcache_invalidations\": %llu, \"regcache_registrations\": %llu, \"regcache_entries\": %llu, "
		       "\"regcache_bytes\": %llu",
		       (unsigned long long)r->rc.hits, (unsigned long long)r->rc.misses,
		       (unsigned long long)r->rc.evictions, (unsigned long long)r->rc.invalidations,
		       (unsigned long long)r->rc.registrations, (unsigned long long)r->rc.entries,
		       (unsigned long long)r->rc.bytes);
		printf("}");
	}
	printf("%s]\n", n ? "\n" : "");
}

static void human(uint64_t v, char *buf, size_t len)
{
	static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double d = (double)v;
	int i = 0;
	while (d >= 1024 && i < 4)
		d /= 1024, i++;
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)v);
	else
		snprintf(buf, len, "%.1f %s", d, u[i]);
}

/* Every string of the registry comes from another process: in the table,
 * bytes outside printable ASCII (terminal escapes included) become \xNN,
 * and a backslash \\, so that nothing reaches the terminal as is. */
static const char *esc(const char *in, char *out, size_t len)
{
	size_t k = 0;
	for (; *in && k + 5 < len; in++) {
		unsigned char c = (unsigned char)*in;
		if (c == '\\')
			k += (size_t)snprintf(out + k, len - k, "\\\\");
		else if (c < 0x20 || c >= 0x7f)
			k += (size_t)snprintf(out + k, len - k, "\\x%02x", c);
		else
			out[k++] = (char)c;
	}
	out[k] = '\0';
	return out;
}

/* The provider as the table shows it: its describe() line when it gave one. */
static const char *prov_shown(const struct ssw_statreg_slot *s)
{
	return s->describe[0] ? s->describe : s->provider;
}

/* REASON: why kernel TCP; for a switched listener, what it refused or lost;
 * for a connection whose processes take turns, which one drives it. */
static const char *reason_shown(const struct ssw_statreg_slot *s, char *buf, size_t len)
{
	char e[sizeof s->reason * 4];
	if (s->kind == SSW_SR_KERNEL)
		return esc(s->reason, buf, len);
	if (s->driver > 0) {
		snprintf(buf, len, "driven by pid %d", (int)s->driver);
		return buf;
	}
	if (s->driver < 0)
		return "driven by none since the fork";
	if (!s->refused)
		return esc(s->reason, buf, len);
	snprintf(buf, len, "%u requests dropped%s%s", s->refused, s->reason[0] ? ", last: " : "",
		 esc(s->reason, e, sizeof e));
	return buf;
}

static void print_table(const struct row *rows, int n)
{
	int pw = 8;
	for (int i = 0; i < n; i++)
		if ((int)strlen(prov_shown(&rows[i].s)) > pw)
			pw = (int)strlen(prov_shown(&rows[i].s));
	printf("%-7s %-15s %4s %-*s %-10s %-22s %-22s %11s %11s %-17s %9s %s\n", "PID", "COMMAND", "FD", pw, "PROVIDER",
	       "STATE", "LOCAL", "REMOTE", "SENT", "RECEIVED", "CREDITS", "RING", "REASON");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		const struct ssw_statreg_slot *s = &r->s;
		char sent[24], recv[24], cred[40] = "-", tx[16], rx[16], ring[24] = "-";
		human(s->bytes_sent, sent, sizeof sent);
		if (s->ring_resident)
			human(s->ring_resident, ring, sizeof ring);
		human(s->bytes_received, recv, sizeof recv);
		if (s->kind == SSW_SR_SWITCHED && s->tx_limit) {
			uint64_t left = s->tx_limit > s->tx_inflight ? s->tx_limit - s->tx_inflight : 0;
			human(left, tx, sizeof tx);
			human(s->rx_window, rx, sizeof rx);
			snprintf(cred, sizeof cred, "%s/%s", tx, rx);
		}
		char state[24];
		snprintf(state, sizeof state, "%s%s%s", ssw_statreg_state_name(s->state),
			 s->flags & SSW_SR_F_SHARED ? "+shared" : "", r->stale ? "?" : "");
		char comm[sizeof r->comm * 4], prov[sizeof s->describe * 4], loc[sizeof s->local * 4],
			rem[sizeof s->remote * 4], why[sizeof s->reason * 4];
		printf("%-7d %-15s %4d %-*s %-10s %-22s %-22s %11s %11s %-17s %9s %s\n", r->pid, esc(r->comm, comm, sizeof comm),
		       s->fd, pw, esc(prov_shown(s), prov, sizeof prov), state, esc(s->local, loc, sizeof loc),
		       esc(s->remote, rem, sizeof rem), sent, recv, cred, ring, reason_shown(s, why, sizeof why));
	}
	if (!n)
		printf("(no sockets: no program under the switch in this network namespace has a switched\n"
		       " socket or a fallen-back connection open)\n");
}

/* What could not be shown goes to stderr (the JSON on stdout stays an array). */
static void report_tally(const struct tally *t)
{
	if (t->unshown)
		fprintf(stderr, "sockswitch stat: %lu sockets not shown: their processes' tables are full\n", t->unshown);
	if (t->other_version)
		fprintf(stderr, "sockswitch stat: %d processes not shown: they run another version of the library "
				"(started before an upgrade)\n", t->other_version);
	if (t->untrusted)
		fprintf(stderr, "sockswitch stat: %d entries skipped: not owned by their uid (or not a regular file of the "
				"expected size)\n", t->untrusted);
	if (t->forged)
		fprintf(stderr, "sockswitch stat: %d entries skipped: they name a process that does not run as their uid\n",
			t->forged);
	if (t->others)
		fprintf(stderr, "sockswitch stat: only this user's programs are shown (%d other users publish: root sees "
				"everyone's)\n", t->others);
	if (t->bad_dirs)
		fprintf(stderr, "sockswitch stat: %d user directories skipped: not owned by their uid, or writable by others\n",
			t->bad_dirs);
}

int stat_main(int argc, char **argv)
{
	bool json = false;
	long only = -1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = NULL;
		if (cli_is_help(a)) {
			stat_usage(stdout);
			return CLI_EXIT_OK;
		} else if (!strcmp(a, "--json")) {
			json = true;
			continue;
		} else if (!strcmp(a, "-p") || !strcmp(a, "--pid")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "sockswitch stat: %s needs a process id\n", a);
				return CLI_EXIT_USAGE;
			}
			v = argv[++i];
		} else if (!strncmp(a, "--pid=", 6)) {
			v = a + 6;
		} else if (!strncmp(a, "-p", 2) && a[2]) {
			v = a + 2;
		} else {
			fprintf(stderr, "sockswitch stat: unknown option '%s'\n\n", a);
			stat_usage(stderr);
			return CLI_EXIT_USAGE;
		}
		char *end;
		errno = 0;
		only = strtol(v, &end, 10);
		if (*end || errno || only <= 0 || only > INT_MAX) {
			fprintf(stderr, "sockswitch stat: -p %s: expected a process id\n", v);
			return CLI_EXIT_USAGE;
		}
	}

	if (only > 0 && kill((pid_t)only, 0) < 0 && errno == ESRCH) {
		fprintf(stderr, "sockswitch stat: -p %ld: no such process\n", only);
		return CLI_EXIT_FAIL;
	}
	uint64_t ns = ssw_statreg_netns();
	if (!ns) {
		fprintf(stderr, "sockswitch stat: cannot read this process's network namespace (/proc/self/ns/net)\n");
		return CLI_EXIT_FAIL;
	}
	const char *base = ssw_statreg_base();
	struct rows rows = { 0 };
	struct tally t = { 0 };
	int bfd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (bfd < 0 && errno != ENOENT) {
		fprintf(stderr, "sockswitch stat: %s: %s\n", base, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	struct stat bst;
	if (bfd >= 0 && fstat(bfd, &bst) == 0 && ((bst.st_uid != 0 && bst.st_uid != geteuid()) ||
						   ((bst.st_mode & 022) && !(bst.st_mode & S_ISVTX))))
		fprintf(stderr, "sockswitch stat: warning: %s is owned by uid %u (mode %04o): its owner can hide entries\n",
			base, (unsigned)bst.st_uid, (unsigned)(bst.st_mode & 07777));
	struct nsdir *dirs = NULL;
	struct proc *procs = NULL;
	int nd = 0, np = 0;
	if (bfd >= 0) {
		scan_users(bfd, ns, &dirs, &nd, &t);
		list_procs(dirs, nd, only, ns, &procs, &np, &t);
		wait_acks(dirs, procs, np);
		read_procs(dirs, procs, np, &rows, &t);
		if (np == 0 && only < 0)
			for (int i = 0; i < nd; i++) {
				char uname[32], nname[32];
				snprintf(uname, sizeof uname, "uid-%u", (unsigned)dirs[i].uid);
				snprintf(nname, sizeof nname, "net-%llu", (unsigned long long)ns);
				int ufd = ssw_statreg_open_dir(bfd, uname, dirs[i].uid);
				if (ufd >= 0) {
					remove_if_empty(ufd, nname, dirs[i].uid);
					close(ufd);
				}
			}
		for (int i = 0; i < nd; i++)
			close(dirs[i].fd);
		close(bfd);
	}
	free(dirs);
	free(procs);
	int n = rows.n;
	struct row *rv = rows.v;
	if (n > 1)
		qsort(rv, (size_t)n, sizeof *rv, cmp_rows);
	if (json)
		print_json(rv, n);
	else
		print_table(rv, n);
	free(rv);
	report_tally(&t);
	return CLI_EXIT_OK;
}
