/* route.c — the routing table: parses SOCKSWITCH_ROUTES / SOCKSWITCH_CONF rules and answers which provider serves a destination. */
#include "switch/route/route.h"

#include "common/params.h"
#include "common/safefile.h"
#include "switch/route/providers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CONF_MAX_BYTES (1u << 20)
/* One slot is kept for the built-in default so that it can always be appended. */
#define USER_RULES_MAX (SSW_ROUTE_MAX_RULES - 1)
/* Longest token quoted back in a message: keeps messages readable on garbage input. */
#define ECHO_MAX 64
/* Tokens kept per rule: `route`, destination, provider, options, plus one so
 * that "one too many" can still be quoted back. */
#define TOK_MAX (3 + SSW_ROUTE_MAX_OPTS + 1)

struct tok {
	const char *p;
	size_t n;
};

struct parse_ctx {
	struct ssw_routes *out;
	char *err;
	size_t errlen;
	const char *file;   /* NULL while parsing SOCKSWITCH_ROUTES */
	unsigned number;    /* line in the file, or rule number in the variable */
};

/* Control characters would break the one-line promise of messages and origins
 * (file names and tokens come from the user), so they are shown as '?'. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

static const char *echo(char buf[ECHO_MAX + 4], struct tok t)
{
	size_t n = t.n > ECHO_MAX ? ECHO_MAX : t.n;
	memcpy(buf, t.p, n);
	if (n < t.n)
		memcpy(buf + n, "...", 3), n += 3;
	buf[n] = '\0';
	return buf;
}

static bool tok_is(struct tok t, const char *word)
{
	size_t n = strlen(word);
	return t.n == n && memcmp(t.p, word, n) == 0;
}

__attribute__((format(printf, 2, 3)))
static int fail(struct parse_ctx *c, const char *fmt, ...)
{
	if (!c->err || c->errlen == 0)
		return -1;
	int n;
	if (c->file)
		n = snprintf(c->err, c->errlen, "%s:%u: ", c->file, c->number);
	else
		n = snprintf(c->err, c->errlen, "SOCKSWITCH_ROUTES rule %u: ", c->number);
	if (n >= 0 && (size_t)n < c->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	sanitize(c->err);
	return -1;
}

/* The origin must keep its line number even for a very long path, since it is
 * what `sockswitch routes` shows to explain a decision: cut the path's head. */
static void origin_into(const struct parse_ctx *c, char *origin, size_t olen)
{
	if (!c->file) {
		snprintf(origin, olen, "SOCKSWITCH_ROUTES rule %u", c->number);
		return;
	}
	char suffix[16];
	int sn = snprintf(suffix, sizeof suffix, ":%u", c->number);
	size_t avail = olen - 1 - (size_t)sn;
	size_t fn = strlen(c->file);
	if (fn <= avail)
		snprintf(origin, olen, "%s%s", c->file, suffix);
	else
		snprintf(origin, olen, "...%s%s", c->file + fn - (avail - 3), suffix);
	sanitize(origin);
}

static void set_origin(const struct parse_ctx *c, struct ssw_route_rule *r)
{
	origin_into(c, r->origin, sizeof r->origin);
}

static void clear_host_bits(uint8_t *a, int prefix, int bytes)
{
	for (int i = 0; i < bytes; i++) {
		int keep = prefix - i * 8;
		if (keep >= 8)
			continue;
		a[i] &= keep <= 0 ? 0 : (uint8_t)(0xffu << (8 - keep));
	}
}

static bool is_v4mapped(const uint8_t *a)
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(a, pfx, sizeof pfx) == 0;
}

static int parse_cidr(struct parse_ctx *c, struct tok t, struct ssw_route_rule *r)
{
	char q[ECHO_MAX + 4];
	const char *slash = memchr(t.p, '/', t.n);
	size_t alen = slash ? (size_t)(slash - t.p) : t.n;
	char buf[INET6_ADDRSTRLEN + 1];

	bool v6 = memchr(t.p, ':', alen) != NULL;
	r->family = v6 ? AF_INET6 : AF_INET;
	if (alen == 0 || alen >= sizeof buf)
		goto bad_addr;
	memcpy(buf, t.p, alen);
	buf[alen] = '\0';
	if (inet_pton(r->family, buf, r->addr) != 1)
		goto bad_addr;

	int maxp = v6 ? 128 : 32;
	r->prefix = maxp;
	if (slash) {
		struct tok pt = { slash, t.n - alen };
		const char *d = slash + 1;
		size_t dn = pt.n - 1;
		int v = 0;
		bool ok = dn >= 1 && dn <= 3;
		for (size_t i = 0; ok && i < dn; i++) {
			ok = d[i] >= '0' && d[i] <= '9';
			v = v * 10 + (d[i] - '0');
		}
		if (!ok || v > maxp)
			return fail(c, "bad prefix length '%s' for %s", echo(q, pt), v6 ? "IPv6" : "IPv4");
		r->prefix = v;
	}
	clear_host_bits(r->addr, r->prefix, v6 ? 16 : 4);

	/* Lookups treat a v4-mapped destination as the IPv4 address it carries, so a
	 * rule written in the mapped form must become the IPv4 rule it means, or it
	 * could never match. */
	if (v6 && r->prefix >= 96 && is_v4mapped(r->addr)) {
		memmove(r->addr, r->addr + 12, 4);
		memset(r->addr + 4, 0, 12);
		r->family = AF_INET;
		r->prefix -= 96;
	}
	return 0;

bad_addr:
	return fail(c, "bad address '%s' (expected an IPv4 or IPv6 address or CIDR, or 'local')", echo(q, t));
}

static int parse_provider(struct parse_ctx *c, struct tok t, int *target)
{
	char q[ECHO_MAX + 4], names[128];
	if (tok_is(t, "tcp")) {
		*target = SSW_TARGET_TCP;
		return 0;
	}
	*target = ssw_registry_find(t.p, t.n);
	if (*target >= 0)
		return 0;
	ssw_registry_names(names, sizeof names);
	return fail(c, "unknown provider '%s' (expected %s or tcp)", echo(q, t), names);
}

static int parse_option(struct parse_ctx *c, struct tok t, struct ssw_route_rule *r)
{
	char q[ECHO_MAX + 4];
	const char *eq = memchr(t.p, '=', t.n);
	if (!eq || eq == t.p || eq == t.p + t.n - 1)
		return fail(c, "malformed option '%s' (expected key=value)", echo(q, t));
	size_t kn = (size_t)(eq - t.p), vn = t.n - kn - 1;
	struct tok key = { t.p, kn };
	if (kn >= sizeof r->opt_key[0])
		return fail(c, "option key '%s' too long (max %zu characters)", echo(q, key), sizeof r->opt_key[0] - 1);
	if (vn >= sizeof r->opt_val[0])
		return fail(c, "value of option '%s' too long (max %zu characters)", echo(q, key),
			    sizeof r->opt_val[0] - 1);
	for (int i = 0; i < r->nopts; i++)
		if (strlen(r->opt_key[i]) == kn && memcmp(r->opt_key[i], t.p, kn) == 0)
			return fail(c, "duplicate option '%s'", r->opt_key[i]);
	memcpy(r->opt_key[r->nopts], t.p, kn);
	r->opt_key[r->nopts][kn] = '\0';
	memcpy(r->opt_val[r->nopts], eq + 1, vn);
	r->opt_val[r->nopts][vn] = '\0';
	r->nopts++;
	return 0;
}

static int parse_route(struct parse_ctx *c, const struct tok *t, size_t ntok)
{
	char q[ECHO_MAX + 4];
	struct ssw_routes *out = c->out;
	if (ntok < 2)
		return fail(c, "missing destination after 'route' (expected a CIDR or 'local')");
	if (ntok < 3) {
		char names[128];
		ssw_registry_names(names, sizeof names);
		return fail(c, "missing provider after '%s' (expected %s or tcp)", echo(q, t[1]), names);
	}
	if (ntok > 3 + SSW_ROUTE_MAX_OPTS)
		return fail(c, "too many options (max %d)", SSW_ROUTE_MAX_OPTS);
	if (out->nrules >= USER_RULES_MAX)
		return fail(c, "too many rules (max %d besides the built-in default)", USER_RULES_MAX);

	struct ssw_route_rule *r = &out->rules[out->nrules];
	memset(r, 0, sizeof *r);
	if (tok_is(t[1], "local"))
		r->local = true;
	else if (parse_cidr(c, t[1], r))
		return -1;
	if (parse_provider(c, t[2], &r->target))
		return -1;
	for (size_t i = 3; i < ntok; i++)
		if (parse_option(c, t[i], r))
			return -1;
	set_origin(c, r);
	out->nrules++;
	return 0;
}

static int parse_ports(struct parse_ctx *c, const struct tok *t, size_t ntok)
{
	char q[ECHO_MAX + 4];
	if (ntok < 2)
		return fail(c, "missing port list after 'port-exclude'");
	if (ntok > 2)
		return fail(c, "unexpected '%s' after the port list (separate ports with commas, no spaces)",
			    echo(q, t[2]));
	struct ssw_routes *out = c->out;
	int idx = out->nexcl < SSW_ROUTE_MAX_EXCL ? out->nexcl++ : SSW_ROUTE_MAX_EXCL - 1;
	origin_into(c, out->excl_origin[idx], sizeof out->excl_origin[idx]);
	const char *p = t[1].p, *end = t[1].p + t[1].n;
	for (;;) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		struct tok pt = { p, (size_t)((comma ? comma : end) - p) };
		unsigned v = 0;
		bool ok = pt.n >= 1 && pt.n <= 5;
		for (size_t i = 0; ok && i < pt.n; i++) {
			ok = pt.p[i] >= '0' && pt.p[i] <= '9';
			v = v * 10 + (unsigned)(pt.p[i] - '0');
		}
		if (!ok || v < 1 || v > 65535)
			return fail(c, "bad port '%s' (expected 1-65535)", echo(q, pt));
		c->out->port_excluded[v >> 3] |= (uint8_t)(1u << (v & 7));
		if (!out->port_excl_by[v])
			out->port_excl_by[v] = (uint8_t)(idx + 1);
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/* One rule: a file line or a SOCKSWITCH_ROUTES item, not NUL-terminated. */
static int parse_rule(struct parse_ctx *c, const char *s, size_t n)
{
	char q[ECHO_MAX + 4];
	const char *hash = memchr(s, '#', n);
	if (hash)
		n = (size_t)(hash - s);

	struct tok t[TOK_MAX];
	size_t ntok = 0;
	for (size_t i = 0; i < n;) {
		while (i < n && (s[i] == ' ' || s[i] == '\t'))
			i++;
		if (i == n)
			break;
		size_t start = i;
		while (i < n && s[i] != ' ' && s[i] != '\t')
			i++;
		if (ntok < TOK_MAX)
			t[ntok] = (struct tok){ s + start, i - start };
		ntok++;
	}
	if (ntok == 0)
		return 0;
	if (tok_is(t[0], "route"))
		return parse_route(c, t, ntok);
	if (tok_is(t[0], "port-exclude"))
		return parse_ports(c, t, ntok);
	return fail(c, "unknown keyword '%s' (expected route or port-exclude)", echo(q, t[0]));
}

/* Items are numbered by position, empty ones included, so that "rule N" is
 * the N-th ';'-separated piece of the variable as the user wrote it. */
static int parse_env(struct parse_ctx *c, const char *s)
{
	c->file = NULL;
	c->number = 0;
	for (;;) {
		const char *semi = strchr(s, ';');
		size_t n = semi ? (size_t)(semi - s) : strlen(s);
		c->number++;
		if (parse_rule(c, s, n))
			return -1;
		if (!semi)
			return 0;
		s = semi + 1;
	}
}

static int parse_file(struct parse_ctx *c, const char *name, const char *text)
{
	c->file = name ? name : "config";
	c->number = 0;
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		c->number++;
		/* Tolerate CRLF files: an editor's line ending is not a syntax error. */
		if (n && p[n - 1] == '\r')
			n--;
		if (parse_rule(c, p, n))
			return -1;
		if (!nl)
			break;
		p = nl + 1;
	}
	return 0;
}

int ssw_routes_build(struct ssw_routes *out, const char *env_routes, const char *conf_name,
		     const char *conf_text, char *err, size_t errlen)
{
	struct parse_ctx c = { .out = out, .err = err, .errlen = errlen };
	if (err && errlen)
		err[0] = '\0';
	if (!out) {
		if (err && errlen)
			snprintf(err, errlen, "no routing table to fill");
		return -1;
	}
	memset(out, 0, sizeof *out);
	if (env_routes && parse_env(&c, env_routes))
		goto fail;
	if (conf_text && parse_file(&c, conf_name, conf_text))
		goto fail;

	struct ssw_route_rule *def = &out->rules[out->nrules++];
	memset(def, 0, sizeof *def);
	def->local = true;
	def->target = ssw_registry_find("shm", 3);
	snprintf(def->origin, sizeof def->origin, "built-in default");
	return 0;

fail:
	/* Half a configuration could switch traffic the user meant to exclude: a
	 * broken config means plain TCP for everything. */
	memset(out, 0, sizeof *out);
	return -1;
}

/* Regular files only, opened without blocking and read up to the limit
 * (safefile.c): a FIFO named as the configuration would otherwise hang
 * every program at its first socket call. */
static int read_conf(const char *path, char **text, char *err, size_t errlen)
{
	char why[256];
	char *buf = NULL;
	size_t len = 0;
	if (ssw_file_read(path, CONF_MAX_BYTES, &buf, &len, why, sizeof why) < 0) {
		if (err && errlen) {
			snprintf(err, errlen, "%s: cannot read: %s", path, why);
			sanitize(err);
		}
		return -1;
	}
	/* Parsing works on C strings: a NUL would silently hide the rest of the file. */
	const char *nul = memchr(buf, '\0', len);
	if (nul) {
		unsigned line = 1;
		for (const char *p = buf; p < nul; p++)
			line += *p == '\n';
		if (err && errlen) {
			snprintf(err, errlen, "%s:%u: NUL byte in the file", path, line);
			sanitize(err);
		}
		free(buf);
		return -1;
	}
	*text = buf;
	return 0;
}

/* The table as the settings write it, options not handed to providers. */
static int routes_parse(struct ssw_routes *out, char *err, size_t errlen)
{
	const char *env = ssw_param_str(SSW_P_ROUTES);
	const char *path = ssw_param_str(SSW_P_CONF);
	if (ssw_param_error(SSW_P_CONF))
		return -1;
	char *text = NULL;
	if (path && *path && read_conf(path, &text, err, errlen))
		return -1;
	int rc = ssw_routes_build(out, env, path, text, err, errlen);
	free(text);
	return rc;
}

bool ssw_routes_name_other_than(const char *provider)
{
	struct ssw_routes *r = malloc(sizeof *r);
	char err[256];
	bool other = false;
	if (r && routes_parse(r, err, sizeof err) == 0)
		for (int i = 0; i < r->nrules && !other; i++)
			other = r->rules[i].target >= 0 && strcmp(ssw_registry[r->rules[i].target].name, provider) != 0;
	free(r);
	return other;
}

int ssw_routes_load(struct ssw_routes *out, char *err, size_t errlen)
{
	ssw_params_load(); /* callers (the CLI, tests) may have changed the environment */
	const char *env = ssw_param_str(SSW_P_ROUTES);
	const char *path = ssw_param_str(SSW_P_CONF);
	const char *bad = ssw_param_error(SSW_P_CONF);
	if (bad) {
		if (err && errlen)
			snprintf(err, errlen, "%s", bad);
		if (out)
			memset(out, 0, sizeof *out);
		return -1;
	}
	char *text = NULL;
	if (path && *path && read_conf(path, &text, err, errlen)) {
		if (out)
			memset(out, 0, sizeof *out);
		return -1;
	}
	int rc = ssw_routes_build(out, env, path, text, err, errlen);
	free(text);
	for (int i = 0; rc == 0 && out && i < out->nrules; i++) {
		const struct ssw_route_rule *r = &out->rules[i];
		rc = ssw_route_configure(r, r->target >= 0 ? ssw_registry[r->target].prov : NULL, err, errlen);
		if (rc < 0)
			memset(out, 0, sizeof *out); /* as a syntax error: everything on TCP */
	}
	return rc;
}

int ssw_route_configure(const struct ssw_route_rule *rule, const struct ssw_provider *p, char *err, size_t errlen)
{
	char why[256] = "";
	char o[160];
	snprintf(o, sizeof o, "%s", rule->origin);
	for (int i = 0; i < rule->nopts && i < SSW_ROUTE_MAX_OPTS; i++) {
		const char *k = rule->opt_key[i], *v = rule->opt_val[i];
		int rc = 0;
		if (rule->target == SSW_TARGET_TCP)
			snprintf(why, sizeof why, "tcp takes no options (got '%s=%s')", k, v), rc = -1;
		else if (!p)
			continue; /* not built: the route goes to kernel TCP, its options to no one */
		else if (!p->configure)
			snprintf(why, sizeof why, "provider %s takes no options (got '%s=%s')", p->name, k, v), rc = -1;
		else if ((rc = p->configure(k, v, why, sizeof why)) < 0 && !why[0])
			snprintf(why, sizeof why, "option '%s=%s' refused", k, v);
		if (rc < 0) {
			if (err && errlen) {
				/* the provider's message names it already, or it gets named */
				size_t nl = p ? strlen(p->name) : 0;
				if (p && p->configure && !(strncmp(why, p->name, nl) == 0 && why[nl] == ' '))
					snprintf(err, errlen, "%s: provider %s: %s", o, p->name, why);
				else
					snprintf(err, errlen, "%s: %s", o, why);
				sanitize(err);
			}
			return -1;
		}
	}
	return 0;
}

/* ---- local addresses ------------------------------------------------------ */

/* Addresses are kept in the normalized form lookups use: family plus 16 bytes,
 * IPv4 (and v4-mapped IPv6) in the first 4. */
struct net_addr {
	int family;
	uint8_t a[16];
};

/* Addresses past this many are ignored: such a destination is then treated as
 * remote, which only costs it the shm fast path. */
#define IFADDR_MAX 256
#define IFADDR_REFRESH_NS 1000000000ull

struct if_snapshot {
	int n;
	struct net_addr e[IFADDR_MAX];
};

/* Two buffers so that getifaddrs (slow, allocates, may block on netlink) runs
 * without the lock readers take: the refresher fills if_next under
 * if_refresh_lock, then swaps the pointers under if_read_lock. */
static struct if_snapshot if_bufs[2];
static struct if_snapshot *if_cur = &if_bufs[0];
static struct if_snapshot *if_next = &if_bufs[1];
static pthread_mutex_t if_read_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t if_refresh_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t if_once = PTHREAD_ONCE_INIT;
static bool if_loaded;          /* atomic */
static uint64_t if_stamp_ns;    /* atomic; time of the last refresh attempt */

/* A fork while another thread holds either lock would leave it locked forever
 * in the child; taking both around fork makes the child start clean. */
static void if_prefork(void)
{
	pthread_mutex_lock(&if_refresh_lock);
	pthread_mutex_lock(&if_read_lock);
}

static void if_postfork(void)
{
	pthread_mutex_unlock(&if_read_lock);
	pthread_mutex_unlock(&if_refresh_lock);
}

static void if_init(void)
{
	pthread_atfork(if_prefork, if_postfork, if_postfork);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	/* The coarse clock is enough for a once-a-second refresh and is the
	 * cheapest read on the connect path. */
	if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Called with if_refresh_lock held.  On failure the previous snapshot stays:
 * a transient getifaddrs error must not flip local destinations to TCP. */
static void if_refresh(void)
{
	struct ifaddrs *list = NULL;
	if (getifaddrs(&list) != 0)
		return;
	struct if_snapshot *s = if_next;
	s->n = 0;
	for (struct ifaddrs *i = list; i && s->n < IFADDR_MAX; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		struct net_addr *e = &s->e[s->n];
		memset(e, 0, sizeof *e);
		if (i->ifa_addr->sa_family == AF_INET) {
			e->family = AF_INET;
			memcpy(e->a, (const char *)i->ifa_addr + offsetof(struct sockaddr_in, sin_addr), 4);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			e->family = AF_INET6;
			memcpy(e->a, (const char *)i->ifa_addr + offsetof(struct sockaddr_in6, sin6_addr), 16);
			if (is_v4mapped(e->a)) {
				e->family = AF_INET;
				memmove(e->a, e->a + 12, 4);
				memset(e->a + 4, 0, 12);
			}
		} else {
			continue;
		}
		s->n++;
	}
	freeifaddrs(list);

	pthread_mutex_lock(&if_read_lock);
	if_next = if_cur;
	if_cur = s;
	pthread_mutex_unlock(&if_read_lock);
}

static bool if_stale(uint64_t now)
{
	if (!__atomic_load_n(&if_loaded, __ATOMIC_ACQUIRE))
		return true;
	/* `now` may predate a refresh another thread just stamped: that is fresh,
	 * not a wrapped-around "very old". */
	uint64_t stamp = __atomic_load_n(&if_stamp_ns, __ATOMIC_ACQUIRE);
	return now > stamp && now - stamp >= IFADDR_REFRESH_NS;
}

/* Make the snapshot fresh enough to answer from. */
static void if_fresh(void)
{
	pthread_once(&if_once, if_init);
	uint64_t now = mono_ns();
	if (if_stale(now)) {
		if (pthread_mutex_trylock(&if_refresh_lock) == 0) {
			/* Another thread may have refreshed between the check and the lock. */
			if (if_stale(now)) {
				if_refresh();
				__atomic_store_n(&if_stamp_ns, now, __ATOMIC_RELEASE);
				__atomic_store_n(&if_loaded, true, __ATOMIC_RELEASE);
			}
			pthread_mutex_unlock(&if_refresh_lock);
		} else if (!__atomic_load_n(&if_loaded, __ATOMIC_ACQUIRE)) {
			/* Nothing to answer from yet: wait for the first snapshot rather
			 * than call this host's own address remote.  Later refreshes never
			 * make anyone wait: the previous snapshot is good enough. */
			pthread_mutex_lock(&if_refresh_lock);
			pthread_mutex_unlock(&if_refresh_lock);
		}
	}
}

static bool if_has(const struct net_addr *x)
{
	if_fresh();
	bool found = false;
	size_t n = x->family == AF_INET ? 4 : 16;
	pthread_mutex_lock(&if_read_lock);
	for (int i = 0; i < if_cur->n && !found; i++)
		found = if_cur->e[i].family == x->family && memcmp(if_cur->e[i].a, x->a, n) == 0;
	pthread_mutex_unlock(&if_read_lock);
	return found;
}

static bool addr_normalize(const struct sockaddr *sa, socklen_t len, struct net_addr *x)
{
	/* Copied by offset, never through a cast: the caller's buffer need not be
	 * aligned for sockaddr_in6. */
	const char *p = (const char *)sa;
	sa_family_t fam;
	if (!sa || len < (socklen_t)sizeof fam)
		return false;
	memcpy(&fam, p + offsetof(struct sockaddr, sa_family), sizeof fam);
	memset(x, 0, sizeof *x);
	if (fam == AF_INET) {
		if (len < (socklen_t)(offsetof(struct sockaddr_in, sin_addr) + 4))
			return false;
		x->family = AF_INET;
		memcpy(x->a, p + offsetof(struct sockaddr_in, sin_addr), 4);
		return true;
	}
	if (fam == AF_INET6) {
		if (len < (socklen_t)(offsetof(struct sockaddr_in6, sin6_addr) + 16))
			return false;
		x->family = AF_INET6;
		memcpy(x->a, p + offsetof(struct sockaddr_in6, sin6_addr), 16);
		if (is_v4mapped(x->a)) {
			x->family = AF_INET;
			memmove(x->a, x->a + 12, 4);
			memset(x->a + 4, 0, 12);
		}
		return true;
	}
	return false;
}

static bool is_local_norm(const struct net_addr *x)
{
	static const uint8_t zero[16];
	if (x->family == AF_INET) {
		if (x->a[0] == 127 || memcmp(x->a, zero, 4) == 0)
			return true;
	} else {
		if (memcmp(x->a, zero, 15) == 0 && (x->a[15] == 0 || x->a[15] == 1))
			return true;
	}
	/* Called from interposed connect(): the application's errno is not ours
	 * to change. */
	int saved = errno;
	bool found = if_has(x);
	errno = saved;
	return found;
}

bool ssw_addr_is_local(const struct sockaddr *sa, socklen_t len)
{
	struct net_addr x;
	return addr_normalize(sa, len, &x) && is_local_norm(&x);
}

int ssw_route_local_targets(const struct ssw_routes *r, bool v4, bool v6, int *out, int max)
{
	struct net_addr addrs[IFADDR_MAX + 4]; /* 5 KiB: listen() is no hot path */
	int saved = errno, n = 0, k = 0;
	/* the wildcard itself and loopback first: `local` rules and a host
	 * whose lo is not listed */
	if (v4) {
		addrs[n++] = (struct net_addr){ .family = AF_INET };
		addrs[n++] = (struct net_addr){ .family = AF_INET, .a = { 127, 0, 0, 1 } };
	}
	if (v6) {
		addrs[n++] = (struct net_addr){ .family = AF_INET6 };
		addrs[n++] = (struct net_addr){ .family = AF_INET6, .a = { [15] = 1 } };
	}
	if_fresh();
	pthread_mutex_lock(&if_read_lock);
	for (int i = 0; i < if_cur->n && n < IFADDR_MAX + 4; i++)
		if ((if_cur->e[i].family == AF_INET && v4) || (if_cur->e[i].family == AF_INET6 && v6))
			addrs[n++] = if_cur->e[i];
	pthread_mutex_unlock(&if_read_lock);
	for (int i = 0; i < n; i++) {
		struct sockaddr_storage ss = { .ss_family = (sa_family_t)addrs[i].family };
		socklen_t len = sizeof(struct sockaddr_in6);
		if (addrs[i].family == AF_INET) {
			memcpy((char *)&ss + offsetof(struct sockaddr_in, sin_addr), addrs[i].a, 4);
			len = sizeof(struct sockaddr_in);
		} else {
			memcpy((char *)&ss + offsetof(struct sockaddr_in6, sin6_addr), addrs[i].a, 16);
		}
		int t;
		ssw_route_lookup(r, (struct sockaddr *)&ss, len, &t);
		bool dup = t == SSW_TARGET_TCP;
		for (int j = 0; j < k && !dup; j++)
			dup = out[j] == t;
		if (!dup && k < max)
			out[k++] = t;
	}
	errno = saved;
	return k;
}

static bool prefix_match(const uint8_t *net, const uint8_t *a, int prefix)
{
	int full = prefix / 8, rem = prefix % 8;
	if (memcmp(net, a, (size_t)full) != 0)
		return false;
	return rem == 0 || ((a[full] ^ net[full]) & (uint8_t)(0xffu << (8 - rem))) == 0;
}

const struct ssw_route_rule *ssw_route_lookup(const struct ssw_routes *r, const struct sockaddr *sa,
					      socklen_t len, int *target)
{
	int dummy;
	struct net_addr x;
	if (!target)
		target = &dummy;
	*target = SSW_TARGET_TCP;
	if (!r || !addr_normalize(sa, len, &x))
		return NULL;
	int local = -1; /* asked at most once, and only if a `local` rule is reached */
	int n = r->nrules < SSW_ROUTE_MAX_RULES ? r->nrules : SSW_ROUTE_MAX_RULES;
	for (int i = 0; i < n; i++) {
		const struct ssw_route_rule *rule = &r->rules[i];
		if (rule->local) {
			if (local < 0)
				local = is_local_norm(&x);
			if (!local)
				continue;
		} else {
			int maxp = rule->family == AF_INET ? 32 : 128;
			if (rule->family != x.family || rule->prefix < 0 || rule->prefix > maxp ||
			    !prefix_match(rule->addr, x.a, rule->prefix))
				continue;
		}
		*target = rule->target;
		return rule;
	}
	return NULL;
}

bool ssw_route_port_excluded(const struct ssw_routes *r, uint16_t port)
{
	return r && (r->port_excluded[port >> 3] >> (port & 7)) & 1;
}

const char *ssw_target_name(int t)
{
	if (t == SSW_TARGET_TCP)
		return "tcp";
	if (t >= 0 && t < ssw_registry_count)
		return ssw_registry[t].name;
	return "unknown";
}

void ssw_route_rule_format(const struct ssw_route_rule *rule, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";
	int n;
	if (!buf || !len)
		return;
	if (rule->local)
		n = snprintf(buf, len, "route local %s", ssw_target_name(rule->target));
	else {
		inet_ntop(rule->family, rule->addr, a, sizeof a);
		n = snprintf(buf, len, "route %s/%d %s", a, rule->prefix, ssw_target_name(rule->target));
	}
	for (int i = 0; i < rule->nopts && i < SSW_ROUTE_MAX_OPTS && n >= 0 && (size_t)n < len; i++)
		n += snprintf(buf + n, len - (size_t)n, " %s=%s", rule->opt_key[i], rule->opt_val[i]);
}

void ssw_route_explain(const struct ssw_routes *r, const struct sockaddr *sa, socklen_t len, bool has_port,
		       struct ssw_route_explanation *out)
{
	memset(out, 0, sizeof *out);
	out->target = SSW_TARGET_TCP;
	struct net_addr x;
	if (!r || !addr_normalize(sa, len, &x)) {
		snprintf(out->why, sizeof out->why, "not an IPv4 or IPv6 address: kernel TCP");
		return;
	}
	char host[INET6_ADDRSTRLEN] = "?";
	inet_ntop(x.family, x.a, host, sizeof host);
	out->local = is_local_norm(&x);
	out->rule = ssw_route_lookup(r, sa, len, &out->target);
	if (out->rule)
		out->rule_index = (int)(out->rule - r->rules) + 1;

	uint16_t port = 0;
	if (has_port) {
		const char *p = (const char *)sa;
		uint16_t nport;
		memcpy(&nport, p + (x.family == AF_INET && ((const struct sockaddr *)sa)->sa_family == AF_INET
					   ? offsetof(struct sockaddr_in, sin_port)
					   : offsetof(struct sockaddr_in6, sin6_port)),
		       sizeof nport);
		port = ntohs(nport);
		if (ssw_route_port_excluded(r, port)) {
			out->port_excluded = true;
			int by = r->port_excl_by[port];
			out->port_origin = by >= 1 && by <= SSW_ROUTE_MAX_EXCL ? r->excl_origin[by - 1] : "port-exclude";
		}
	}

	char rule_txt[256] = "";
	if (out->rule)
		ssw_route_rule_format(out->rule, rule_txt, sizeof rule_txt);
	const char *where = out->local ? "an address of this host" : "not an address of this host";
	int n;
	if (!out->rule)
		n = snprintf(out->why, sizeof out->why, "no rule matches %s (%s): kernel TCP", host, where);
	else if (out->rule->local)
		n = snprintf(out->why, sizeof out->why, "%s is %s, and rule %d `%s` (%s) is the first that matches",
			     host, where, out->rule_index, rule_txt, out->rule->origin);
	else
		n = snprintf(out->why, sizeof out->why, "%s (%s) is inside rule %d `%s` (%s), the first that matches",
			     host, where, out->rule_index, rule_txt, out->rule->origin);
	if (out->rule && out->target == SSW_TARGET_TCP && n >= 0 && (size_t)n < sizeof out->why)
		n += snprintf(out->why + n, sizeof out->why - (size_t)n, ": never switched");
	if (out->port_excluded) {
		out->target = SSW_TARGET_TCP;
		if (n >= 0 && (size_t)n < sizeof out->why)
			snprintf(out->why + n, sizeof out->why - (size_t)n,
				 "; but port %u is excluded by port-exclude (%s): kernel TCP", port, out->port_origin);
	}
}
