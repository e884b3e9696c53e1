/* params.c — the table of SOCKSWITCH_* settings and its parser: every
 * setting is validated the same way and a bad value earns one line naming
 * the variable, the value and what is accepted. */
#include "common/params.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const bools[] = { "0", "1", NULL };
static const char *const rdma_modes[] = { "auto", "read", "write", "none", NULL };
static const char *const wait_modes[] = { "auto", "spin", "yield", "sleep", NULL };
static const char *const faults[] = { "regfail", "nomem", "async", "pin", "relay", "swap-suspend", "swap-resume", "swap-suspended", NULL };

#define CHOICE(v, d) .type = SSW_PT_CHOICE, .choices = (v), .dchoice = (d)

/* Keep in this order: enum ssw_param_id indexes it. */
const struct ssw_param ssw_params[SSW_P_COUNT] = {
	[SSW_P_LOG] = { "SOCKSWITCH_LOG", CHOICE(levels, 1), .nocase = true, .bad = SSW_PB_DEFAULT, .def = "warn",
			.users = "library",
			.help = "log level (warn: silent unless something is wrong; info: one line per connection decision)" },
	[SSW_P_LOG_FILE] = { "SOCKSWITCH_LOG_FILE", .type = SSW_PT_PATH, .bad = SSW_PB_DEFAULT, .def = "stderr",
			     .users = "library", .help = "append log lines to this regular file instead of stderr" },
	[SSW_P_CONF] = { "SOCKSWITCH_CONF", .type = SSW_PT_PATH, .bad = SSW_PB_OFF, .def = "none",
			 .users = "library, sockswitch run/routes/doctor",
			 .help = "routing configuration file (sockswitch.conf(5)); a regular file of at most 1 MiB" },
	[SSW_P_ROUTES] = { "SOCKSWITCH_ROUTES", .type = SSW_PT_TEXT, .bad = SSW_PB_OFF, .def = "none",
			   .users = "library, sockswitch run/routes/doctor",
			   .help = "routing rules, ';'-separated, tried before the file's" },
	[SSW_P_DISABLE] = { "SOCKSWITCH_DISABLE", CHOICE(bools, 0), .bad = SSW_PB_OFF, .def = "0", .users = "library",
			    .help = "1: never switch (every connection on kernel TCP)" },
	[SSW_P_STATS_FILE] = { "SOCKSWITCH_STATS_FILE", .type = SSW_PT_PATH, .bad = SSW_PB_DEFAULT, .def = "none",
			       .users = "library",
			       .help = "at exit every process appends one sockswitch-stats line to this regular file" },
	[SSW_P_STAT] = { "SOCKSWITCH_STAT", CHOICE(bools, 1), .bad = SSW_PB_DEFAULT, .def = "1", .users = "library",
			 .help = "0: do not publish the program's sockets for sockswitch stat" },
	[SSW_P_STAT_DIR] = { "SOCKSWITCH_STAT_DIR", .type = SSW_PT_PATH, .absolute = true, .bad = SSW_PB_DEFAULT,
			     .def = "/dev/shm/sockswitch", .users = "library, sockswitch stat/doctor",
			     .help = "where programs publish their sockets (one directory per network namespace)" },
	[SSW_P_CMA] = { "SOCKSWITCH_CMA", CHOICE(bools, 1), .bad = SSW_PB_OFF, .def = "1", .users = "library",
			.help = "0: never use Cross Memory Attach; large sends are copied through the ring" },
	[SSW_P_RDMA] = { "SOCKSWITCH_RDMA", CHOICE(rdma_modes, 0), .bad = SSW_PB_OFF, .def = "auto",
			 .users = "library", .help = "rendezvous mode for large sends (none: never; read|write force a mode)" },
	[SSW_P_RNDV_THRESHOLD] = { "SOCKSWITCH_RNDV_THRESHOLD", .type = SSW_PT_BYTES, .bad = SSW_PB_OFF,
				   .def = "4M (64K with SOCKSWITCH_RDMA=read|write)", .dnum = 4u << 20,
				   .lo = 4096, .hi = 1u << 30, .users = "library",
				   .help = "blocking sends of at least this many bytes use the rendezvous" },
	[SSW_P_RNDV_MAX] = { "SOCKSWITCH_RNDV_MAX", .type = SSW_PT_BYTES, .bad = SSW_PB_OFF, .def = "0",
			     .dnum = 0, .lo = 0, .hi = 1u << 31, .users = "library",
			     .help = "... and at most this many (0: no limit)" },
	[SSW_P_REGCACHE] = { "SOCKSWITCH_REGCACHE", CHOICE(bools, 1), .bad = SSW_PB_OFF, .def = "1", .users = "library",
			     .help = "0: no registration cache (every rendezvous registers and deregisters its buffers)" },
	[SSW_P_REGCACHE_MAX] = { "SOCKSWITCH_REGCACHE_MAX", .type = SSW_PT_BYTES, .bad = SSW_PB_OFF, .def = "64M",
				 .dnum = 64u << 20, .lo = 4096, .hi = 1ull << 40, .users = "library",
				 .help = "bytes of registered memory a cache keeps (per provider domain; also at most 256 entries)" },
	[SSW_P_WAIT] = { "SOCKSWITCH_WAIT", CHOICE(wait_modes, 0), .bad = SSW_PB_OFF, .def = "auto",
			 .users = "library", .help = "how a waiting thread spends the time before it sleeps" },
	[SSW_P_SPIN_US] = { "SOCKSWITCH_SPIN_US", .type = SSW_PT_NUM, .bad = SSW_PB_OFF, .def = "50", .dnum = 50,
			    .lo = 0, .hi = 100000, .users = "library",
			    .help = "most CPU time (us) a wait may burn while nobody else wants the core; setting it selects SOCKSWITCH_WAIT=spin" },
	[SSW_P_SHM_RING] = { "SOCKSWITCH_SHM_RING", .type = SSW_PT_BYTES, .pow2 = true, .bad = SSW_PB_OFF,
			     .def = "512K", .dnum = 512u << 10, .lo = 16u << 10, .hi = 64u << 20, .users = "library",
			     .help = "ring size of a shm connection, each way (memory per connection: 4K + 2 rings)" },
	[SSW_P_LIB] = { "SOCKSWITCH_LIB", .type = SSW_PT_PATH, .bad = SSW_PB_OFF, .def = "search", .cli = true,
			.users = "sockswitch run/doctor",
			.help = "libsockswitch.so to preload instead of the one next to the sockswitch binary" },
	[SSW_P_GNUPLOT] = { "SOCKSWITCH_GNUPLOT", .type = SSW_PT_TEXT, .bad = SSW_PB_DEFAULT, .def = "gnuplot", .cli = true,
			    .users = "sockswitch bench", .help = "gnuplot program for bench --plot" },
	[SSW_P_NO_EXEC_KEEP] = { "SOCKSWITCH_NO_EXEC_KEEP", CHOICE(bools, 0), .bad = SSW_PB_DEFAULT, .def = "0",
				 .users = "library",
				 .help = "1: exec does not put the switch back into an environment that dropped it" },
	[SSW_P_INHERIT] = { "SOCKSWITCH_INHERIT", .type = SSW_PT_TEXT, .bad = SSW_PB_DEFAULT, .def = "none",
			    .users = "library (set by the switch at exec)",
			    .help = "switched listeners and connections an exec'd image inherits; set by the switch itself, never by hand" },
	[SSW_P_SHARED_CONTEXT] = { "SOCKSWITCH_SHARED_CONTEXT", CHOICE(bools, 1), .bad = SSW_PB_OFF, .def = "1",
				   .users = "library (tests, benches)",
				   .help = "0: shm shares no connection state between processes either: a connection shared by fork is driven by one process at a time, control moving by suspend and resume with the peer (the way of a provider without shared context, on one host)" },
	[SSW_P_FAULT] = { "SOCKSWITCH_FAULT", CHOICE(faults, -1), .bad = SSW_PB_OFF, .def = "none",
			  .users = "library (tests)", .help = "fault injection for tests: registration fails, temporary buffers fail, RDMA completes later (async), or registrations pin pages as RDMA hardware does (pin), or connections exec'd or sent over SCM_RIGHTS are relayed, never taken over (relay), or each connection's first send is preceded by a control-swap message out of turn, as a hostile peer would send it (swap-suspend: SUSPEND, and RESUME only at a send 1 s later; swap-resume: RESUME; swap-suspended: SUSPENDED)" },
};

/* Longest part of a value quoted back: messages stay one readable line. */
#define QUOTE_MAX 64
#define ERR_MAX 320

static struct ssw_param_value vals[SSW_P_COUNT];
static char errs[SSW_P_COUNT][ERR_MAX];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* A value as it can be printed: control bytes become '?', long ones end in "...". */
static void quote(const char *v, char *out, size_t len)
{
	size_t i = 0;
	for (; v[i] && i < QUOTE_MAX && i + 4 < len; i++)
		out[i] = (unsigned char)v[i] < 0x20 || v[i] == 0x7f ? '?' : v[i];
	if (v[i] && i + 4 <= len)
		memcpy(out + i, "...", 3), i += 3;
	out[i] = '\0';
}

static void list_choices(const char *const *c, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = '\0';
	for (int i = 0; c[i] && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i == 0 ? "" : c[i + 1] ? ", " : " or ", c[i]);
}

void ssw_param_accepted(const struct ssw_param *p, char *buf, size_t len)
{
	switch (p->type) {
	case SSW_PT_CHOICE:
		list_choices(p->choices, buf, len);
		break;
	case SSW_PT_NUM:
		snprintf(buf, len, "a number from %llu to %llu", (unsigned long long)p->lo, (unsigned long long)p->hi);
		break;
	case SSW_PT_BYTES:
		snprintf(buf, len, "%s from %llu to %llu (bytes; K, M, G: KiB, MiB, GiB)",
			 p->pow2 ? "a power of two" : "a number", (unsigned long long)p->lo, (unsigned long long)p->hi);
		break;
	case SSW_PT_PATH:
		snprintf(buf, len, p->absolute ? "an absolute path" : "a path");
		break;
	case SSW_PT_TEXT:
		snprintf(buf, len, "text");
		break;
	}
}

/* Decimal digits only (no sign, no space, no hex): "-1" must not wrap. */
static int parse_number(const struct ssw_param *p, const char *v, uint64_t *out)
{
	if (*v < '0' || *v > '9')
		return -1;
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno)
		return -1;
	if (p->type == SSW_PT_BYTES && *end) {
		const char *units = "KMG";
		const char *u = strchr(units, *end & ~0x20);
		if (!u || end[1])
			return -1;
		int shift = 10 * (int)(u - units + 1);
		if (x > (ULLONG_MAX >> shift))
			return -1;
		x <<= shift;
		end++;
	}
	if (*end || x < p->lo || x > p->hi || (p->pow2 && (x & (x - 1))))
		return -1;
	*out = x;
	return 0;
}

static int parse_choice(const struct ssw_param *p, const char *v)
{
	for (int i = 0; p->choices[i]; i++)
		if (p->nocase ? !strcasecmp(v, p->choices[i]) : !strcmp(v, p->choices[i]))
			return i;
	return -1;
}

static void set_default(const struct ssw_param *p, struct ssw_param_value *out)
{
	*out = (struct ssw_param_value){ .num = p->dnum, .choice = p->type == SSW_PT_CHOICE ? p->dchoice : -1 };
}

int ssw_param_parse(const struct ssw_param *p, const char *text, struct ssw_param_value *out, char *err,
		    size_t errlen)
{
	set_default(p, out);
	if (err && errlen)
		err[0] = '\0';
	if (!text || !*text)
		return 0;
	out->set = true;
	int ok = 0;
	switch (p->type) {
	case SSW_PT_NUM:
	case SSW_PT_BYTES:
		ok = parse_number(p, text, &out->num) == 0;
		break;
	case SSW_PT_CHOICE:
		ok = (out->choice = parse_choice(p, text)) >= 0;
		break;
	case SSW_PT_PATH:
		ok = strlen(text) < PATH_MAX && (!p->absolute || text[0] == '/');
		out->str = text;
		break;
	case SSW_PT_TEXT:
		ok = 1;
		out->str = text;
		break;
	}
	if (ok)
		return 0;
	char q[QUOTE_MAX + 8], acc[160];
	quote(text, q, sizeof q);
	ssw_param_accepted(p, acc, sizeof acc);
	if (err && errlen)
		snprintf(err, errlen, "%s=%s: expected %s%s", p->name, q, acc,
			 p->type == SSW_PT_PATH ? " shorter than PATH_MAX" : "");
	set_default(p, out);
	out->set = out->invalid = true;
	return -1;
}

static int load_all(void)
{
	int bad = 0;
	for (int i = 0; i < SSW_P_COUNT; i++)
		bad += ssw_param_parse(&ssw_params[i], getenv(ssw_params[i].name), &vals[i], errs[i], ERR_MAX) < 0;
	return bad;
}

static void load_once(void)
{
	load_all();
}

int ssw_params_load(void)
{
	/* the once is spent here too, so that no accessor loads again later,
	 * concurrently with its readers */
	pthread_once(&once, load_once);
	return load_all();
}

const struct ssw_param_value *ssw_param(enum ssw_param_id id)
{
	pthread_once(&once, load_once);
	return &vals[id];
}

uint64_t ssw_param_num(enum ssw_param_id id)
{
	return ssw_param(id)->num;
}

int ssw_param_choice(enum ssw_param_id id)
{
	return ssw_param(id)->choice;
}

const char *ssw_param_str(enum ssw_param_id id)
{
	const struct ssw_param_value *v = ssw_param(id);
	return v->invalid ? NULL : v->str;
}

const char *ssw_param_error(enum ssw_param_id id)
{
	return ssw_param(id)->invalid ? errs[id] : NULL;
}

void ssw_param_problem(enum ssw_param_id id, char *buf, size_t len)
{
	const struct ssw_param *p = &ssw_params[id];
	const char *e = ssw_param_error(id);
	if (!e)
		snprintf(buf, len, "%s: valid", p->name);
	else if (p->bad == SSW_PB_OFF)
		snprintf(buf, len, "%s; switch off, using kernel TCP", e);
	else
		snprintf(buf, len, "%s; using the default (%s)", e, p->def);
}

int ssw_params_first_refusal(void)
{
	for (int i = 0; i < SSW_P_COUNT; i++)
		if (ssw_param(i)->invalid && ssw_params[i].bad == SSW_PB_OFF && !ssw_params[i].cli)
			return i;
	return -1;
}
