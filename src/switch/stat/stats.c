/* stats.c — process-wide counters of the switch, and the one-line summary a
 * process appends to SOCKSWITCH_STATS_FILE at exit (tests read it to prove
 * the payload went over a provider). */
#include "switch/switch.h"

#include "common/log.h"
#include "common/params.h"
#include "common/safefile.h"
#include "common/sys.h"
#include "regcache/regcache.h"
#include "switch/stat/statreg.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

_Static_assert(sizeof(struct ssw_counter_set) <= sizeof ssw_fl->counters, "the counters fit their fork-local room");

void ssw_stats_account_closed(struct ssw_sock *s)
{
	struct ssw_session_stats st;
	if (!s->sess)
		return;
	ssw_session_get_stats(s->sess, &st);
	atomic_fetch_add(&ssw_counters.bytes_sent, st.bytes_sent);
	atomic_fetch_add(&ssw_counters.bytes_received, st.bytes_received);
	atomic_fetch_add(&ssw_counters.rndv, st.rndv_read + st.rndv_write);
	atomic_fetch_add(&ssw_counters.rndv_fallback, st.rndv_fallback);
	atomic_fetch_add(&ssw_counters.rdma_regs, st.rdma_regs);
}

struct live_sum {
	unsigned long sent, received, rndv, rndv_fallback, rdma_regs;
};

static void add_live(int fd, struct ssw_sock *s, void *arg)
{
	struct live_sum *l = arg;
	struct ssw_session_stats st;
	(void)fd;
	/* a dup'ed socket appears once per fd: count it at its first fd only */
	if (!s->sess || s->fd != fd)
		return;
	ssw_session_get_stats(s->sess, &st);
	l->sent += st.bytes_sent;
	l->received += st.bytes_received;
	l->rndv += st.rndv_read + st.rndv_write;
	l->rndv_fallback += st.rndv_fallback;
	l->rdma_regs += st.rdma_regs;
}

/* Set once the file was found unusable and said so: one warning per process. */
static bool stats_warned;

/* The summary file, opened like every file a setting names (safefile.c):
 * regular, never blocking, never through another user's planted link. */
static int open_stats(const char *path)
{
	char why[256];
	int fd = ssw_file_open(path, SSW_FILE_APPEND, why, sizeof why);
	if (fd < 0 && !stats_warned) {
		stats_warned = true;
		SSW_WARN("SOCKSWITCH_STATS_FILE=%s: %s (no statistics written)", path, why);
	}
	return fd;
}

void ssw_stats_check_file(void)
{
	const char *path = ssw_param_str(SSW_P_STATS_FILE);
	if (!path || !*path)
		return;
	int fd = open_stats(path);
	if (fd >= 0)
		sys_close(fd);
}

void ssw_stats_dump_at_exit(void)
{
	const char *path = ssw_param_str(SSW_P_STATS_FILE);
	if (!path || !*path || stats_warned)
		return;
	ssw_statreg_quiesce();
	struct live_sum l = { 0, 0, 0, 0, 0 };
	ssw_fdtab_each(add_live, &l);
	struct ssw_regcache_stats rc;
	ssw_regcache_totals(&rc);
	uint64_t sw_n, sw_ns, sw_max, sw_driven;
	ssw_session_swap_counts(&sw_n, &sw_ns, &sw_max, &sw_driven);
	uint64_t susp, staged;
	ssw_session_suspend_counts(&susp, &staged);
	uint64_t mv_new, mv_back;
	ssw_session_move_counts(&mv_new, &mv_back);
	char line[800];
	int n = snprintf(line, sizeof line, "sockswitch-stats pid=%d switched=%lu fallback=%lu bytes_sent=%lu bytes_received=%lu refused=%lu"
			 " adopted=%lu rndv=%lu rndv_fallback=%lu rdma_regs=%lu regcache_hits=%llu regcache_misses=%llu regcache_evictions=%llu regcache_invalidations=%llu"
			 " regcache_registrations=%llu swaps=%llu swap_us=%llu swap_us_max=%llu swaps_driven=%llu"
			 " suspended=%llu staged_bytes=%llu"
			 " moved_in=%llu moved_back=%llu\n",
			 (int)getpid(), atomic_load(&ssw_counters.switched), atomic_load(&ssw_counters.fallback),
			 atomic_load(&ssw_counters.bytes_sent) + l.sent, atomic_load(&ssw_counters.bytes_received) + l.received,
			 atomic_load(&ssw_counters.refused), atomic_load(&ssw_counters.adopted), atomic_load(&ssw_counters.rndv) + l.rndv,
			 atomic_load(&ssw_counters.rndv_fallback) + l.rndv_fallback,
			 atomic_load(&ssw_counters.rdma_regs) + l.rdma_regs, (unsigned long long)rc.hits, (unsigned long long)rc.misses,
			 (unsigned long long)rc.evictions, (unsigned long long)rc.invalidations,
			 (unsigned long long)rc.registrations, (unsigned long long)sw_n, (unsigned long long)(sw_ns / 1000),
			 (unsigned long long)(sw_max / 1000), (unsigned long long)sw_driven, (unsigned long long)susp, (unsigned long long)staged,
			 (unsigned long long)mv_new, (unsigned long long)mv_back);
	int fd = open_stats(path);
	if (fd < 0)
		return;
	(void)!sys_write(fd, line, (size_t)n);
	sys_close(fd);
}

void ssw_raise_sigpipe(void)
{
	SYS_(tgkill, getpid(), SYS_(gettid, 0), SIGPIPE);
}
