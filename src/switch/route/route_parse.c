/* route_parse.c — the routing table built: SOCKSWITCH_ROUTES and SOCKSWITCH_CONF rules parsed, checked (file and line in every message) and handed to their providers. */
#include "switch/route/route.h"
#include "switch/route/route_priv.h"

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
	if (v6 && r->prefix >= 96 && ssw_net_is_v4mapped(r->addr)) {
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

