/* stat.c — `sockswitch stat`: lists the live sockets that processes running
 * the switch publish in this network namespace (src/switch/statreg.h): rings
 * the doorbell so every process refreshes its counters, waits briefly for
 * their answers, then reads each process's table with the per-slot seqlock. */
#include "cli.h"

#include "json.h"
#include "switch/statreg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ACK_WAIT_MS 500

void stat_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch stat [--json] [-p PID]\n"
		"\n"
		"Lists every live socket of the programs running under the switch in this\n"
		"network namespace: connections carried by a provider (shm), their listeners,\n"
		"and the connections that fell back to kernel TCP, with the reason.\n"
		"Counters are the programs' own, refreshed on request: reading them costs\n"
		"the data path nothing.\n"
		"\n"
		"columns:\n"
		"  PID, COMMAND, FD     the process and its descriptor\n"
		"  PROVIDER             shm (switched), or tcp (kernel TCP: see REASON)\n"
		"  STATE                listening, connecting, connected, closing, suspended\n"
		"  LOCAL, REMOTE        addr:port as the program sees them\n"
		"  SENT, RECEIVED       payload bytes (messages) each way; for kernel TCP the\n"
		"                       bytes acknowledged / received and data segments\n"
		"  CREDITS              send credit left / limit, and the receive window granted\n"
		"\n"
		"options:\n"
		"  --json          one JSON array of objects with the keys pid, command, fd,\n"
		"                  local, remote, provider, state, bytes_sent, bytes_received,\n"
		"                  msgs_sent, msgs_received, tx_inflight, tx_limit, rx_window,\n"
		"                  shared, stale, fallback_reason (null when switched)\n"
		"  -p, --pid PID   only the sockets of process PID\n"
		"  -h, --help      show this help\n"
		"\n"
		"environment:\n"
		"  SOCKSWITCH_STAT_DIR  where processes publish (default %s);\n"
		"                       must match the programs' setting\n"
		"  SOCKSWITCH_STAT=0    (in a program's environment) do not publish it\n"
		"\n"
		"Files of processes that are gone are removed.  A process that does not\n"
		"answer within %d ms (stopped, busy) is shown from its last snapshot and\n"
		"marked stale.  exit status: 0, 1 if the registry cannot be read, 2 on a\n"
		"usage error.\n",
		SSW_STATREG_DEFAULT_DIR, ACK_WAIT_MS);
}

struct row {
	int pid;
	char comm[17];
	bool stale;
	struct ssw_statreg_slot s;
};

struct proc {
	int pid;
	char path[PATH_MAX];
	uint64_t starttime;
	bool answered;
};

static uint64_t proc_starttime(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return ssw_statreg_starttime(buf);
}

static int read_hdr(const char *path, struct ssw_statreg_hdr *h)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, h, sizeof *h, 0);
	close(fd);
	if (n != (ssize_t)sizeof *h || h->magic != SSW_STATREG_MAGIC || h->version != SSW_STATREG_VERSION ||
	    h->slot_size != sizeof(struct ssw_statreg_slot) || h->hdr_size != SSW_STATREG_HDR_SIZE)
		return -1;
	return 0;
}

/* Is the file's process alive (and the same process, not a reused pid)? */
static bool alive(const struct ssw_statreg_hdr *h, int pid)
{
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	uint64_t st = proc_starttime(pid);
	return !st || !h->starttime || st == h->starttime;
}

/* Rings the doorbell; returns the value to wait for, or 0 if it cannot. */
static uint32_t ring(const char *dir)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/doorbell", dir);
	int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return 0;
	uint32_t *door = m;
	uint32_t v = __atomic_add_fetch(door, 1, __ATOMIC_ACQ_REL);
	syscall(SYS_futex, door, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	munmap(m, 4096);
	return v;
}

/* The last process of a namespace removes its directory at exit; one killed
 * leaves it behind: with no live process left, remove it (under the same
 * lock as the library, src/switch/statreg.c). */
static void remove_if_empty(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX) == 0) {
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
			rmdir(dir);
		}
	}
	close(fd);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Copies the live slots of one file into rows; returns how many were added. */
static int read_slots(const char *path, int pid, bool stale, struct row **rows, int *n, int *cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct ssw_statreg_hdr h;
	int added = 0;
	if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != SSW_STATREG_MAGIC) {
		close(fd);
		return 0;
	}
	uint32_t used = __atomic_load_n(&h.used, __ATOMIC_RELAXED);
	if (used > h.nslots || used > SSW_STATREG_SLOTS)
		used = SSW_STATREG_SLOTS;
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
		if (*n == *cap) {
			int nc = *cap ? *cap * 2 : 64;
			struct row *r = realloc(*rows, sizeof **rows * (size_t)nc);
			if (!r)
				goto out;
			*rows = r;
			*cap = nc;
		}
		struct row *r = &(*rows)[(*n)++];
		memset(r, 0, sizeof *r);
		r->pid = pid;
		r->stale = stale;
		memcpy(r->comm, h.comm, sizeof h.comm);
		r->comm[16] = '\0';
		r->s = *s;
		/* the strings come from another process: make sure they end */
		r->s.provider[sizeof r->s.provider - 1] = '\0';
		r->s.local[sizeof r->s.local - 1] = '\0';
		r->s.remote[sizeof r->s.remote - 1] = '\0';
		r->s.reason[sizeof r->s.reason - 1] = '\0';
		added++;
	}
out:
	free(a);
	free(b);
	close(fd);
	return added;
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
		printf(", \"state\": \"%s\", \"bytes_sent\": %llu, \"bytes_received\": %llu, "
		       "\"msgs_sent\": %llu, \"msgs_received\": %llu, \"tx_inflight\": %llu, \"tx_limit\": %llu, "
		       "\"rx_window\": %llu, \"shared\": %s, \"stale\": %s, \"fallback_reason\": ",
		       ssw_statreg_state_name(s->state), (unsigned long long)s->bytes_sent,
		       (unsigned long long)s->bytes_received, (unsigned long long)s->msgs_sent,
		       (unsigned long long)s->msgs_received, (unsigned long long)s->tx_inflight,
		       (unsigned long long)s->tx_limit, (unsigned long long)s->rx_window,
		       s->flags & SSW_SR_F_SHARED ? "true" : "false", r->stale ? "true" : "false");
		if (s->kind == SSW_SR_KERNEL)
			cli_json_str(s->reason);
		else
			printf("null");
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

static void print_table(const struct row *rows, int n)
{
	printf("%-7s %-15s %4s %-8s %-10s %-22s %-22s %11s %11s %-17s %s\n", "PID", "COMMAND", "FD", "PROVIDER",
	       "STATE", "LOCAL", "REMOTE", "SENT", "RECEIVED", "CREDITS", "REASON");
	for (int i = 0; i < n; i++) {
		const struct row *r = &rows[i];
		const struct ssw_statreg_slot *s = &r->s;
		char sent[24], recv[24], cred[40] = "-", tx[16], rx[16];
		human(s->bytes_sent, sent, sizeof sent);
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
		printf("%-7d %-15s %4d %-8s %-10s %-22s %-22s %11s %11s %-17s %s\n", r->pid, r->comm, s->fd, s->provider,
		       state, s->local, s->remote, sent, recv, cred, s->kind == SSW_SR_KERNEL ? s->reason : "");
	}
	if (!n)
		printf("(no sockets: no program under the switch in this network namespace has a switched\n"
		       " socket or a fallen-back connection open)\n");
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

	char dir[PATH_MAX - 300];
	if (ssw_statreg_dir(dir, sizeof dir) < 0) {
		fprintf(stderr, "sockswitch stat: cannot read this process's network namespace (/proc/self/ns/net)\n");
		return CLI_EXIT_FAIL;
	}
	struct row *rows = NULL;
	int n = 0, cap = 0;
	DIR *d = opendir(dir);
	if (!d && errno != ENOENT) {
		fprintf(stderr, "sockswitch stat: %s: %s\n", dir, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	struct proc *procs = NULL;
	int np = 0, pcap = 0;
	uint32_t want = 0;
	if (d) {
		want = ring(dir);
		struct dirent *e;
		while ((e = readdir(d))) {
			char *end;
			long pid = strtol(e->d_name, &end, 10);
			if (pid <= 0 || strcmp(end, ".stat") || (only > 0 && pid != only))
				continue;
			struct proc p = { .pid = (int)pid };
			snprintf(p.path, sizeof p.path, "%s/%s", dir, e->d_name);
			struct ssw_statreg_hdr h;
			if (read_hdr(p.path, &h) < 0)
				continue;
			if (!alive(&h, p.pid)) {
				unlink(p.path); /* may fail (another user's file): skipped all the same */
				continue;
			}
			if (np == pcap) {
				pcap = pcap ? pcap * 2 : 16;
				struct proc *q = realloc(procs, sizeof *procs * (size_t)pcap);
				if (!q)
					break;
				procs = q;
			}
			procs[np++] = p;
		}
		closedir(d);
	}
	if (d && np == 0 && only < 0)
		remove_if_empty(dir);
	/* Wait for every process's refresher to answer the doorbell. */
	for (int waited = 0; want && waited <= ACK_WAIT_MS; waited += 2) {
		bool all = true;
		for (int i = 0; i < np; i++) {
			struct ssw_statreg_hdr h;
			if (!procs[i].answered && read_hdr(procs[i].path, &h) == 0)
				procs[i].answered = (int32_t)(__atomic_load_n(&h.ack, __ATOMIC_RELAXED) - want) >= 0;
			all = all && procs[i].answered;
		}
		if (all)
			break;
		sleep_ms(2);
	}
	for (int i = 0; i < np; i++)
		read_slots(procs[i].path, procs[i].pid, !procs[i].answered, &rows, &n, &cap);
	free(procs);
	if (n > 1)
		qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
	if (json)
		print_json(rows, n);
	else
		print_table(rows, n);
	free(rows);
	return CLI_EXIT_OK;
}
