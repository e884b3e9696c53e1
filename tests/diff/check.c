/* check.c — kernel TCP against the switch, program by program.
 *
 * Each program runs twice, with the same endpoints: once plain (the
 * oracle), once with the switch preloaded; the transcripts must be equal,
 * the switched run must really have been switched (its statistics, and on
 * shm no kernel TCP segment at all) and quiet (nothing on stderr).  A
 * difference is shrunk: steps are dropped, in halves then singly, while
 * the two runs still differ, and the smallest program is printed with the
 * command that replays it.  Differences the README lists (Limits) are
 * recognised and counted apart, with their reason; so is a program whose
 * kernel TCP runs differ from each other, when the switched run matches
 * one of them (kernel_varies). */
#include "diff.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct check_opts {
	int profile;
	const char *preload;     /* LD_PRELOAD of the switched run */
	const char *netns[2];
	const char *addr;
	int slow;
	const char *replay;      /* the command that replays a seed (the seed and steps appended) */
	const char *tmpdir;
	bool verbose, show, no_shrink;
	bool twice;              /* both runs on kernel TCP: the tester's own determinism */
	int shrink_runs;         /* most runs a shrink may take */
	int budget_s;            /* no shrinking once this many seconds have passed (0: none) */
	uint64_t t0_ms;
};

struct verdict {
	int kind;                /* V_* */
	char why[512];
};
enum { V_SAME, V_DIFF, V_KNOWN, V_KERNEL_BAD, V_MODEL, V_NOT_SWITCHED, V_NOISY };

static uint64_t now_ms_c(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ environment */

static char **make_env(const struct check_opts *o, bool switched, const char *stats)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **e = calloc(n + 4, sizeof *e);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], "LD_PRELOAD=", 11) == 0 || strncmp(environ[i], "SOCKSWITCH_STATS_FILE=", 22) == 0)
			continue;
		e[k++] = environ[i];
	}
	if (switched) {
		char *p, *s;
		if (asprintf(&p, "LD_PRELOAD=%s", o->preload) < 0 || asprintf(&s, "SOCKSWITCH_STATS_FILE=%s", stats) < 0)
			exit(2);
		e[k++] = p;
		e[k++] = s;
	}
	e[k] = NULL;
	return e;
}

static void free_env(char **e, bool switched)
{
	if (switched) {
		size_t k = 0;
		while (e[k])
			k++;
		free(e[k - 1]);
		free(e[k - 2]);
	}
	free(e);
}

static long outsegs(void)
{
	FILE *f = fopen("/proc/net/snmp", "r");
	if (!f)
		return -1;
	char hdr[2048], val[2048];
	long r = -1;
	while (fgets(hdr, sizeof hdr, f)) {
		if (strncmp(hdr, "Tcp:", 4) || !fgets(val, sizeof val, f))
			continue;
		char *hs, *vs, *h = strtok_r(hdr, " \n", &hs), *v = strtok_r(val, " \n", &vs);
		while (h && v) {
			if (strcmp(h, "OutSegs") == 0) {
				r = atol(v);
				break;
			}
			h = strtok_r(NULL, " \n", &hs);
			v = strtok_r(NULL, " \n", &vs);
		}
		break;
	}
	fclose(f);
	return r;
}

/* sum of "switched=N" over the statistics lines of a run */
static long stats_switched(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[1024];
	long s = 0;
	while (fgets(line, sizeof line, f)) {
		char *p = strstr(line, " switched=");
		if (p && strncmp(line, "sockswitch-stats ", 17) == 0)
			s += atol(p + 10);
	}
	fclose(f);
	return s;
}

static char *slurp(const char *path, size_t max)
{
	int f = open(path, O_RDONLY);
	if (f < 0)
		return NULL;
	char *b = malloc(max + 1);
	ssize_t n = read(f, b, max);
	close(f);
	b[n > 0 ? n : 0] = 0;
	return b;
}

/* ------------------------------------------------------------ one program */

struct pair_run {
	char *kernel, *switched, *err;
	int krc, src;
	long switched_conns, segs;
};

static void pair_free(struct pair_run *r)
{
	free(r->kernel);
	free(r->switched);
	free(r->err);
	memset(r, 0, sizeof *r);
}

static int run_one(const struct check_opts *o, const struct prog *p, bool switched, char **out, long *conns,
		   long *segs, char **err)
{
	if (o->twice)
		switched = false;
	char stats[512], errf[512];
	snprintf(stats, sizeof stats, "%s/stats", o->tmpdir);
	snprintf(errf, sizeof errf, "%s/stderr", o->tmpdir);
	unlink(stats);
	unlink(errf);
	char **env = make_env(o, switched, stats);
	struct run_env re = { .self = "/proc/self/exe", .envp = env, .netns = { o->netns[0], o->netns[1] },
			      .addr = o->addr, .slow = o->slow, .errfile = errf, .switched = switched };
	long s0 = outsegs();
	int rc = diff_run(p, &re, out);
	if (segs)
		*segs = outsegs() - s0;
	if (conns)
		*conns = switched ? stats_switched(stats) : 0;
	if (err)
		*err = slurp(errf, 4096);
	free_env(env, switched);
	return rc;
}

static bool model_trouble(const char *t)
{
	return strstr(t, "settle: still waiting") || strstr(t, "[returned before") || strstr(t, "still blocked") ||
	       strstr(t, "driver:") || strstr(t, "still alive");
}

/* The events of an epoll_wait line ("... = 2 [EPOLLIN data=3, EPOLLOUT
 * data=4]"), the part before them in *head (its length in *hlen); NULL
 * when it is not one. */
static const char *ep_events(const char *line, size_t len, size_t *hlen)
{
	const char *w = strstr(line, "epoll_wait(");
	const char *eq = w ? strstr(w, ") = ") : NULL;
	if (!eq || (size_t)(eq - line) >= len)
		return NULL;
	*hlen = (size_t)(eq - line) + 4;
	const char *br = memchr(line, '[', len);
	return br ? br + 1 : "";
}

/* Is item (up to ',' or ']') of list `b` in list `a`? */
static bool ep_item_in(const char *item, size_t ilen, const char *a)
{
	for (const char *p = a; *p && *p != ']' && *p != '\n';) {
		size_t l = strcspn(p, ",]\n");
		if (l == ilen && !memcmp(p, item, l))
			return true;
		p += l;
		while (*p == ',' || *p == ' ')
			p++;
	}
	return false;
}

/* The edge-triggered EPOLLOUT one more than the kernel's (README Limits;
 * soak seeds 830913005, 840000586): the switch makes an EPOLLOUT edge
 * whenever the peer's reads give room back, the kernel only after a send
 * or a poll found too little.  The switched line lists the kernel's events
 * and one more, "EPOLLOUT data=D", and the entry for D was last added or
 * modified with EPOLLET (its step line in the transcript before). */
static bool extra_out_edge(const char *kline, size_t kl, const char *sline, size_t sl, const char *before, size_t blen)
{
	size_t hk, hs;
	const char *lk = ep_events(kline, kl, &hk), *ls = ep_events(sline, sl, &hs);
	if (!lk || !ls || hk != hs || memcmp(kline, sline, hk - 4))
		return false;
	int extra = 0;
	unsigned long long data = 0;
	for (const char *p = ls; *p && *p != ']' && *p != '\n';) {
		size_t l = strcspn(p, ",]\n");
		if (!ep_item_in(p, l, lk)) {
			if (extra++ || sscanf(p, "EPOLLOUT data=%llu", &data) != 1 || strncmp(p, "EPOLLOUT data=", 14))
				return false;
		}
		p += l;
		while (*p == ',' || *p == ' ')
			p++;
	}
	if (extra != 1)
		return false;
	/* the last registration of that entry by the same side ("A.M: ..."):
	 * its step line "A.M epoll_ctl a=1|3 b=0x... c=D" */
	const char *who = memchr(sline, '.', sl);
	if (!who || who == sline || who[-1] < 'A' || who[-1] > 'Z')
		return false;
	char want[32], side[4] = { ' ', who[-1], '.', 0 };
	snprintf(want, sizeof want, " c=%llu ", data);
	bool et = false;
	for (const char *p = before; p < before + blen;) {
		const char *e = memchr(p, '\n', (size_t)(before + blen - p));
		size_t l = e ? (size_t)(e - p) : (size_t)(before + blen - p);
		char line[512];
		snprintf(line, sizeof line, "%.*s", (int)l, p);
		const char *c = strstr(line, " epoll_ctl a=");
		unsigned op;
		unsigned long ev;
		if (c && strstr(line, want) && strstr(line, side) && sscanf(c, " epoll_ctl a=%u b=%lx", &op, &ev) == 2 &&
		    (op == 1 || op == 3))
			et = (ev & 0x80000000ul) != 0;
		p += l + 1;
	}
	return et;
}

/* Over fabric a FIN behind unread data is learned when the switch reaches
 * its message (README Limits, beside urgent data; soak seed 842000067): a
 * poll or epoll that the data woke shows POLLIN without the kernel's
 * POLLRDHUP.  The switched line is the kernel's without its RDHUP bits. */
static bool rdhup_later(const char *kline, size_t kl, const char *sline, size_t sl)
{
	char k[1024];
	if (kl >= sizeof k || sl >= kl)
		return false;
	/* only in what the call returned (after " = "), not what it asked */
	const char *eq = NULL;
	for (const char *p = kline; p + 3 <= kline + kl; p++)
		if (!memcmp(p, " = ", 3)) {
			eq = p;
			break;
		}
	if (!eq)
		return false;
	size_t n = (size_t)(eq - kline);
	memcpy(k, kline, n);
	for (size_t i = n; i < kl;) {
		static const char *const drop[] = { "|EPOLLRDHUP", "|POLLRDHUP", "EPOLLRDHUP|", "POLLRDHUP|" };
		bool skipped = false;
		for (int d = 0; d < 4 && !skipped; d++) {
			size_t l = strlen(drop[d]);
			if (i + l <= kl && !memcmp(kline + i, drop[d], l)) {
				i += l;
				skipped = true;
			}
		}
		if (!skipped)
			k[n++] = kline[i++];
	}
	return n == sl && !memcmp(k, sline, sl) && (strstr(k, "poll(") || strstr(k, "epoll_wait("));
}

/* An epoll set of the main process does not see a forked child's shutdown
 * until the connection's next event (README Limits, beside the sleepers a
 * child's shutdown does not wake; soak seed 847000021): the first
 * difference is the main process's epoll_wait, and a child of the same
 * side shut the socket down earlier ("N --- A.C shutdown"). */
static bool child_shut_epoll(const char *sline, size_t sl, const char *before, size_t blen)
{
	char line[1024], want[32];
	snprintf(line, sizeof line, "%.*s", (int)sl, sline);
	const char *m = strstr(line, ".M: epoll_wait(");
	if (!m || m == line)
		return false;
	snprintf(want, sizeof want, "--- %c.C shutdown", m[-1]);
	char *prior = strndup(before, blen);
	bool r = prior && strstr(prior, want);
	free(prior);
	return r;
}

/* A splice from a socket into a pipe that takes more than the pipe's 16
 * buffers hold: kernel TCP puts one received segment in each buffer, the
 * switch fills them (README Limits; soak seed 848006247).  Both took bytes;
 * only the count (and so the checksum of what was taken) differs. */
static bool splice_pipe_count(const char *kline, size_t kl, const char *sline, size_t sl)
{
	char k[1024], s[1024];
	if (kl >= sizeof k || sl >= sizeof s)
		return false;
	snprintf(k, sizeof k, "%.*s", (int)kl, kline);
	snprintf(s, sizeof s, "%.*s", (int)sl, sline);
	const char *kc = strstr(k, ": splice(socket -> pipe, "), *sc = strstr(s, ": splice(socket -> pipe, ");
	if (!kc || !sc || kc - k != sc - s || memcmp(k, s, (size_t)(kc - k)))
		return false;
	long kwant, swant, kgot, sgot;
	if (sscanf(kc, ": splice(socket -> pipe, %ld) = %ld fnv", &kwant, &kgot) != 2 ||
	    sscanf(sc, ": splice(socket -> pipe, %ld) = %ld fnv", &swant, &sgot) != 2)
		return false;
	/* more than 16 buffers' worth asked, something taken on both sides */
	return kwant == swant && kwant > 16 * 1448 && kgot > 0 && sgot > 0;
}

/* A thread asleep in poll or epoll_wait while another thread's send draws
 * the reset: it may look before or after that send takes the error, so it
 * reports POLLERR with the POLLHUP or not (README Limits; kernel TCP has
 * the same race; soak seeds 848005466, 848009553, 850000327).  The two lines
 * are a thread's and differ only in an ERR bit, and a send of the same
 * step just failed with EPIPE or ECONNRESET. */
static bool err_bit_race(const char *kline, size_t kl, const char *sline, size_t sl, const char *before, size_t blen)
{
	char k[1024], s[1024];
	if (kl >= sizeof k || sl >= sizeof s)
		return false;
	snprintf(k, sizeof k, "%.*s", (int)kl, kline);
	snprintf(s, sizeof s, "%.*s", (int)sl, sline);
	if (!strstr(k, "T: poll(") && !strstr(k, "T: epoll_wait("))
		return false;
	/* drop the first ERR bit (with its separator) of each line */
	static const char *const bits[] = { "POLLERR|", "|POLLERR", "EPOLLERR|", "|EPOLLERR" };
	for (int side = 0; side < 2; side++) {
		char *t = side ? s : k;
		for (int b = 0; b < 4; b++) {
			char *at = strstr(t, bits[b]);
			if (at) {
				size_t l = strlen(bits[b]);
				memmove(at, at + l, strlen(at + l) + 1);
				break;
			}
		}
	}
	if (strcmp(k, s) != 0 || !strcmp(k, kline))
		return false;
	/* the step number that starts the line, and a failed send in it */
	int step;
	if (sscanf(k, "%d", &step) != 1 || blen == 0)
		return false;
	char *prior = strndup(before, blen);
	if (!prior)
		return false;
	bool found = false;
	for (char *line = strtok(prior, "\n"); line; line = strtok(NULL, "\n")) {
		int st;
		if (sscanf(line, "%d", &st) == 1 && st == step &&
		    (strstr(line, "= -1 EPIPE") || strstr(line, "= -1 ECONNRESET")))
			found = true;
	}
	free(prior);
	return found;
}

/* Is the first difference a known one: a thread woken late, or not at
 * all, after a forked child shut its socket down (README Limits)?  What
 * follows it is its consequence.  (Its own process's shutdown, and a reset
 * its own process's send drew, wake it at once since the fixes of issue
 * 19, item 4: no longer tolerated.) */
static int only_known(const char *k, const char *s, bool fabric)
{
	const char *a = k, *b = s;
	for (;;) {
		const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
		if (!ea || !eb)
			return false;
		size_t la = (size_t)(ea - a), lb = (size_t)(eb - b);
		if (la != lb || memcmp(a, b, la)) {
			char line[1024];
			snprintf(line, sizeof line, "%.*s", (int)lb, b);
			if (extra_out_edge(a, la, b, lb, k, (size_t)(a - k)))
				return 3;
			if (fabric && rdhup_later(a, la, b, lb))
				return 4;
			if (child_shut_epoll(b, lb, k, (size_t)(a - k)))
				return 5;
			if (splice_pipe_count(a, la, b, lb))
				return 6;
			if (err_bit_race(a, la, b, lb, k, (size_t)(a - k)))
				return 7;
			if (!strstr(line, "T: "))
				return 0;
			if (strstr(line, ", after its child's shutdown]") || strstr(line, "(its child's shutdown)"))
				return 1;
			return 0;
		}
		a = ea + 1;
		b = eb + 1;
	}
}

static void judge(const struct check_opts *o, struct pair_run *r, struct verdict *v)
{
	memset(v, 0, sizeof *v);
	if (r->krc != 0 || model_trouble(r->kernel)) {
		v->kind = model_trouble(r->kernel) && r->krc == 0 ? V_MODEL : V_KERNEL_BAD;
		snprintf(v->why, sizeof v->why, "%s", r->krc ? "the kernel run broke" : "the kernel run waited for what never came (the model is wrong)");
		return;
	}
	if (strcmp(r->kernel, r->switched) != 0) {
		int known = only_known(r->kernel, r->switched, o->profile == PROF_FABRIC);
		/* each class only_known finds, by its number */
		static const char *const why[] = {
			[1] = "known: a thread blocked on a socket is woken late (or not) by a forked child's shutdown "
			      "of it (the local wake-up of issue 19, item 4)",
			[3] = "known: an edge-triggered EPOLLOUT when the peer's reads gave room back, one edge more "
			      "than the kernel's (README Limits)",
			[4] = "known: over fabric a FIN behind unread data shows (POLLRDHUP) once the switch reaches it "
			      "(README Limits)",
			[5] = "known: an epoll set does not see a forked child's shutdown until the connection's next "
			      "event (README Limits)",
			[6] = "known: a splice from a socket into a pipe takes a different count (kernel TCP: one segment "
			      "per pipe buffer; README Limits)",
			[7] = "known: a thread asleep in poll/epoll_wait while another thread's send draws the reset sees "
			      "POLLERR or not, by timing (README Limits)",
		};
		if (known > 0 && known < (int)(sizeof why / sizeof why[0]) && why[known]) {
			v->kind = V_KNOWN;
			snprintf(v->why, sizeof v->why, "%s", why[known]);
		} else {
			v->kind = V_DIFF;
			snprintf(v->why, sizeof v->why, "the transcripts differ");
		}
		return;
	}
	if (r->src != 0) {
		v->kind = V_DIFF;
		snprintf(v->why, sizeof v->why, "the switched run broke");
		return;
	}
	if (o->twice) {
		v->kind = V_SAME;
		return;
	}
	if (r->switched_conns < 2) {
		v->kind = V_NOT_SWITCHED;
		snprintf(v->why, sizeof v->why, "the connection was not switched (statistics: switched=%ld)",
			 r->switched_conns);
		return;
	}
	if (o->profile == PROF_SHM && r->segs > 0) {
		v->kind = V_NOT_SWITCHED;
		snprintf(v->why, sizeof v->why, "kernel TCP sent %ld segments during the switched run", r->segs);
		return;
	}
	if (r->err && r->err[0]) {
		v->kind = V_NOISY;
		snprintf(v->why, sizeof v->why, "the switched run wrote to stderr: %.300s", r->err);
		return;
	}
	v->kind = V_SAME;
}

static void run_pair(const struct check_opts *o, const struct prog *p, struct pair_run *r, struct verdict *v)
{
	memset(r, 0, sizeof *r);
	r->krc = run_one(o, p, false, &r->kernel, NULL, NULL, NULL);
	r->src = run_one(o, p, true, &r->switched, &r->switched_conns, &r->segs, &r->err);
	if (o->profile == PROF_SHM && r->segs > 0) {
		/* the kernel run's sockets may still send (a delayed ACK, a FIN
		 * retransmitted from FIN_WAIT1) while the switched run goes: the
		 * namespace's counter is not the switched run's alone.  Once they
		 * are quiet, the switched run again decides (soak seeds 832900329,
		 * 833000140, 834000153: one segment each, never again) */
		usleep(250000);
		free(r->switched);
		free(r->err);
		r->switched = r->err = NULL;
		r->src = run_one(o, p, true, &r->switched, &r->switched_conns, &r->segs, &r->err);
	}
	judge(o, r, v);
}

/* ------------------------------------------------------------ shrinking */

static bool still_differs(const struct check_opts *o, const struct prog *p, int kind)
{
	struct pair_run r;
	struct verdict v;
	run_pair(o, p, &r, &v);
	pair_free(&r);
	return v.kind == kind;
}

/* Drop steps while the difference stays: chunks of half the program, then
 * smaller, down to single steps. */
static void shrink(const struct check_opts *o, const struct prog *full, int kind, struct prog *best)
{
	uint16_t keep[DIFF_MAX_STEPS], cand[DIFF_MAX_STEPS];
	*best = *full;
	int n = best->n, runs = 0;
	for (int i = 0; i < n; i++)
		keep[i] = best->s[i].index;
	for (int chunk = n / 2 > 0 ? n / 2 : 1; chunk >= 1; chunk /= 2) {
		for (int at = 0; at < n && runs < o->shrink_runs &&
				 !(o->budget_s && now_ms_c() - o->t0_ms > (uint64_t)o->budget_s * 1000);) {
			int m = 0;
			for (int i = 0; i < n; i++)
				if (i < at || i >= at + chunk)
					cand[m++] = keep[i];
			struct prog t;
			diff_select(full, cand, m, &t);
			if (t.n < best->n && (runs++, still_differs(o, &t, kind))) {
				*best = t;
				n = t.n;
				for (int i = 0; i < n; i++)
					keep[i] = t.s[i].index;
			} else {
				at += chunk;
			}
		}
		if (chunk == 1)
			break;
	}
}

/* ------------------------------------------------------------ reporting */

/* diff -u of the two transcripts, from the first difference on */
static void print_diff(const struct check_opts *o, const char *k, const char *s)
{
	char fk[600], fs[600], cmd[1500];
	snprintf(fk, sizeof fk, "%s/kernel.txt", o->tmpdir);
	snprintf(fs, sizeof fs, "%s/switched.txt", o->tmpdir);
	FILE *a = fopen(fk, "w"), *b = fopen(fs, "w");
	if (!a || !b)
		return;
	fputs(k, a);
	fputs(s, b);
	fclose(a);
	fclose(b);
	fflush(stdout);
	snprintf(cmd, sizeof cmd,
		 "diff -U4 --label 'kernel TCP' --label switched '%s' '%s' | head -n 80 | sed 's/^/    /'", fk, fs);
	if (system(cmd) < 0)
		printf("    (diff failed)\n");
}

static void steps_list(const struct prog *p, char *b, size_t len)
{
	size_t o = 0;
	b[0] = 0;
	for (int i = 0; i < p->n && o + 8 < len; i++)
		o += (size_t)snprintf(b + o, len - o, "%s%u", i ? "," : "", p->s[i].index);
}

static const char *kind_name(int k)
{
	static const char *const n[] = { "SAME", "DIFF", "KNOWN", "TESTER", "MODEL", "NOT-SWITCHED", "NOISY" };
	return n[k];
}

/* ------------------------------------------------------------ entry */

/* The two runs differ: is it the kernel's run that varied?  The program
 * runs again on kernel TCP (up to twice); if a run gives another
 * transcript than the first one and exactly the switched run's, the
 * program is not deterministic on kernel TCP itself (a 200 ms ceiling a
 * loaded host reaches, a segment sent early) and the switch did what
 * kernel TCP also does.  A switched transcript no kernel run gives stays a
 * difference. */
static bool kernel_varies(const struct check_opts *o, const struct prog *p, const struct pair_run *r)
{
	if (r->krc != 0 || r->src != 0)
		return false;
	for (int k = 0; k < 2; k++) {
		char *again = NULL;
		int rc = run_one(o, p, false, &again, NULL, NULL, NULL);
		bool match = rc == 0 && again && strcmp(again, r->kernel) != 0 && strcmp(again, r->switched) == 0;
		free(again);
		if (match)
			return true;
	}
	return false;
}

struct tally {
	long seeds, same, diff, known, tester;
};

static int check_prog(const struct check_opts *o, const struct prog *p, struct tally *t)
{
	struct pair_run r;
	struct verdict v;
	run_pair(o, p, &r, &v);
	t->seeds++;
	char steps[1024];
	if (o->show) {
		printf("==== kernel TCP\n%s==== switched\n%s", r.kernel, r.switched);
		if (r.err && r.err[0])
			printf("==== switched stderr\n%s", r.err);
	}
	if (v.kind == V_SAME) {
		t->same++;
		if (o->verbose)
			printf("ok   seed %u (%d steps)\n", p->seed, p->n);
		pair_free(&r);
		return 0;
	}
	if (v.kind == V_KNOWN) {
		t->known++;
		printf("KNOWN seed %u: %s\n", p->seed, v.why);
		pair_free(&r);
		return 0;
	}
	if (v.kind == V_KERNEL_BAD || v.kind == V_MODEL) {
		t->tester++;
		steps_list(p, steps, sizeof steps);
		printf("TESTER seed %u: %s\n  replay: %s --seed %u --steps %s --show\n", p->seed, v.why, o->replay, p->seed,
		       steps);
		if (o->verbose)
			printf("%s", r.kernel);
		pair_free(&r);
		return 1;
	}
	if (v.kind == V_DIFF && kernel_varies(o, p, &r)) {
		t->known++;
		printf("KNOWN seed %u: kernel TCP's own runs of this program differ, and the switched run matches one "
		       "of them (the kernel's timing under load, e.g. TCP_CORK's 200 ms ceiling: diff.shm seed 88)\n",
		       p->seed);
		pair_free(&r);
		return 0;
	}
	t->diff++;
	printf("DIFF seed %u (%s, %d steps): %s [%s]\n", p->seed, diff_profile_name(p->profile), p->n, v.why,
	       kind_name(v.kind));
	fflush(stdout);
	struct prog small = *p;
	char *first_k = strdup(r.kernel), *first_s = strdup(r.switched);
	if (o->budget_s && now_ms_c() - o->t0_ms > (uint64_t)o->budget_s * 1000) {
		printf("  (not shrunk: the run's time budget of %d s is spent)\n", o->budget_s);
	} else if (!o->no_shrink) {
		shrink(o, p, v.kind, &small);
		pair_free(&r);
		run_pair(o, &small, &r, &v);
	}
	steps_list(&small, steps, sizeof steps);
	printf("  minimal replay (%d of %d steps): %s --seed %u --steps %s\n", small.n, p->n, o->replay, p->seed,
	       steps);
	printf("  program:\n");
	diff_print(&small, stdout);
	if (v.kind == V_SAME) {
		printf("  (the shrunk program did not differ again: timing?  The first run's difference:)\n");
		print_diff(o, first_k, first_s);
	} else {
		print_diff(o, r.kernel, r.switched);
	}
	free(first_k);
	free(first_s);
	if (r.err && r.err[0])
		printf("  switched stderr: %.500s\n", r.err);
	fflush(stdout);
	pair_free(&r);
	return 1;
}

int diff_check_main(int argc, char **argv)
{
	struct check_opts o = { .profile = PROF_SHM, .slow = 1, .replay = "ssw_diff check", .shrink_runs = 150,
				.t0_ms = now_ms_c() };
	long from = 1, count = 1;
	const char *steps = NULL;
	uint32_t list[256]; /* --seeds: these, not from..from+count-1 */
	int nlist = 0;
	bool gen_only = false;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--profile") && v) {
			o.profile = strcmp(v, "fabric") == 0 ? PROF_FABRIC : PROF_SHM;
			i++;
		} else if (!strcmp(a, "--seed") && v) {
			from = atol(v);
			count = 1;
			i++;
		} else if (!strcmp(a, "--seeds") && v) {
			for (const char *c = v; *c && nlist < (int)(sizeof list / sizeof list[0]);) {
				list[nlist++] = (uint32_t)strtoul(c, (char **)&c, 10);
				while (*c == ',' || *c == ' ')
					c++;
			}
			count = nlist;
			i++;
		} else if (!strcmp(a, "--from") && v) {
			from = atol(v);
			i++;
		} else if (!strcmp(a, "--count") && v) {
			count = atol(v);
			i++;
		} else if (!strcmp(a, "--steps") && v) {
			steps = v;
			i++;
		} else if (!strcmp(a, "--preload") && v) {
			o.preload = v;
			i++;
		} else if (!strcmp(a, "--netns") && v) {
			char *c = strdup(v), *comma = strchr(c, ',');
			if (!comma)
				return 2;
			*comma = 0;
			o.netns[0] = c;
			o.netns[1] = comma + 1;
			i++;
		} else if (!strcmp(a, "--addr") && v) {
			o.addr = v;
			i++;
		} else if (!strcmp(a, "--slow") && v) {
			o.slow = atoi(v);
			i++;
		} else if (!strcmp(a, "--replay") && v) {
			o.replay = v;
			i++;
		} else if (!strcmp(a, "--shrink-runs") && v) {
			o.shrink_runs = atoi(v);
			i++;
		} else if (!strcmp(a, "--budget") && v) {
			o.budget_s = atoi(v);
			i++;
		} else if (!strcmp(a, "--verbose")) {
			o.verbose = true;
		} else if (!strcmp(a, "--show")) {
			o.show = true;
		} else if (!strcmp(a, "--no-shrink")) {
			o.no_shrink = true;
		} else if (!strcmp(a, "--twice")) {
			o.twice = true;
		} else if (!strcmp(a, "--print")) {
			gen_only = true;
		} else {
			fprintf(stderr, "ssw_diff check: unknown argument %s\n", a);
			return 2;
		}
	}
	if (!o.preload && !gen_only && !o.twice) {
		fprintf(stderr, "ssw_diff check: --preload LIB needed (the switched runs' LD_PRELOAD)\n");
		return 2;
	}
	prctl(PR_SET_CHILD_SUBREAPER, 1); /* a dead endpoint's children come back to us */
	char tmpl[] = "/tmp/ssw-diff.XXXXXX";
	o.tmpdir = mkdtemp(tmpl);
	if (!o.tmpdir) {
		perror("mkdtemp");
		return 2;
	}
	struct tally t = { 0 };
	int bad = 0;
	for (long k = 0; k < count; k++) {
		struct prog p, q;
		diff_gen(&p, nlist ? list[k] : (uint32_t)(from + k), o.profile);
		if (steps) {
			uint16_t keep[DIFF_MAX_STEPS];
			int n = 0;
			for (const char *c = steps; *c && n < DIFF_MAX_STEPS;) {
				keep[n++] = (uint16_t)strtoul(c, (char **)&c, 10);
				while (*c == ',' || *c == ' ')
					c++;
			}
			diff_select(&p, keep, n, &q);
			p = q;
		}
		if (gen_only) {
			diff_print(&p, stdout);
			continue;
		}
		bad |= check_prog(&o, &p, &t);
		fflush(stdout);
	}
	if (!gen_only && nlist)
		printf("# %s: %ld seeds (listed): %ld same, %ld known differences, %ld differences, %ld tester faults\n",
		       diff_profile_name(o.profile), t.seeds, t.same, t.known, t.diff, t.tester);
	else if (!gen_only)
		printf("# %s: %ld seeds (%ld..%ld): %ld same, %ld known differences, %ld differences, %ld tester faults\n",
		       diff_profile_name(o.profile), t.seeds, from, from + count - 1, t.same, t.known, t.diff, t.tester);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", o.tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "ssw_diff: could not remove %s\n", o.tmpdir);
	return bad ? 1 : 0;
}
