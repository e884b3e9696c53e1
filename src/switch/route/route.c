/* route.c — the routing table's answers: which provider serves a destination, excluded ports, rules explained. */
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
	if (!r || !ssw_net_addr_from(sa, len, &x))
		return NULL;
	int local = -1; /* asked at most once, and only if a `local` rule is reached */
	int n = r->nrules < SSW_ROUTE_MAX_RULES ? r->nrules : SSW_ROUTE_MAX_RULES;
	for (int i = 0; i < n; i++) {
		const struct ssw_route_rule *rule = &r->rules[i];
		if (rule->local) {
			if (local < 0)
				local = ssw_net_addr_is_local(&x);
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
	if (!r || !ssw_net_addr_from(sa, len, &x)) {
		snprintf(out->why, sizeof out->why, "not an IPv4 or IPv6 address: kernel TCP");
		return;
	}
	char host[INET6_ADDRSTRLEN] = "?";
	inet_ntop(x.family, x.a, host, sizeof host);
	out->local = ssw_net_addr_is_local(&x);
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
