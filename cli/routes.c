/* routes.c — `sockswitch routes`: which rule and provider an address gets
 * under the configuration the switch would load, and why; without an address,
 * the whole table in the order it is tried. */
#include "cli.h"

#include "common/params.h"
#include "json.h"

#include "switch/route/providers.h"
#include "switch/route/route.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void routes_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch routes [--json] [--conf FILE] [--routes RULES] [ADDR[:PORT]...]\n"
		"\n"
		"For each address, prints the provider a connect() to it gets (shm, fabric\n"
		"or tcp = kernel TCP), the rule that decides it (file and line, the\n"
		"SOCKSWITCH_ROUTES rule number, or the built-in default) and why.  With a\n"
		"port, port-exclude lines count too.  Without an address, prints the table\n"
		"in the order rules are tried.\n"
		"\n"
		"ADDR is an IPv4 or IPv6 address or a host name; with a port: 1.2.3.4:80,\n"
		"[::1]:80, localhost:6379.\n"
		"\n"
		"options:\n"
		"  --json          one JSON array: per address {address, host, provider,\n"
		"                  rule, rule_text, origin, port_excluded_by, why}; without\n"
		"                  an address, the rules {index, rule, origin}\n"
		"  --conf FILE     routing configuration file (instead of SOCKSWITCH_CONF)\n"
		"  --routes RULES  rules separated by ';' (instead of SOCKSWITCH_ROUTES)\n"
		"  -h, --help      show this help\n"
		"\n"
		"environment:\n"
		"  SOCKSWITCH_ROUTES, SOCKSWITCH_CONF   the configuration, as programs under\n"
		"                                      the switch read it (see sockswitch.conf(5))\n"
		"\n"
		"exit status: 0; 1 if the configuration is invalid (one line naming the file\n"
		"and line) or an address cannot be resolved; 2 on a usage error.\n");
}

static void print_table(const struct ssw_routes *r)
{
	printf("rules, first match wins:\n");
	for (int i = 0; i < r->nrules; i++) {
		char txt[256];
		ssw_route_rule_format(&r->rules[i], txt, sizeof txt);
		printf("  %2d  %-44s  %s\n", i + 1, txt, r->rules[i].origin);
	}
	printf("      %-44s  %s\n", "(anything else) tcp", "no rule: kernel TCP");
	int first = 1;
	for (int p = 1; p < 65536; p++) {
		if (!ssw_route_port_excluded(r, (uint16_t)p))
			continue;
		if (first)
			printf("ports never switched:");
		int by = r->port_excl_by[p];
		printf("%s %d (%s)", first ? "" : ",", p,
		       by >= 1 && by <= SSW_ROUTE_MAX_EXCL ? r->excl_origin[by - 1] : "port-exclude");
		first = 0;
	}
	if (!first)
		printf("\n");
}

/* "1.2.3.4", "1.2.3.4:80", "::1", "[::1]:80", "host", "host:80". */
static int parse_target(const char *arg, struct sockaddr_storage *ss, socklen_t *len, bool *has_port)
{
	char host[256];
	const char *port = NULL;
	*has_port = false;
	if (strlen(arg) >= sizeof host)
		return -1;
	if (arg[0] == '[') {
		const char *rb = strchr(arg, ']');
		if (!rb)
			return -1;
		snprintf(host, sizeof host, "%.*s", (int)(rb - arg - 1), arg + 1);
		if (rb[1] == ':')
			port = rb + 2;
		else if (rb[1])
			return -1;
	} else {
		const char *c = strchr(arg, ':');
		if (c && !strchr(c + 1, ':')) { /* exactly one ':': host:port */
			snprintf(host, sizeof host, "%.*s", (int)(c - arg), arg);
			port = c + 1;
		} else {
			snprintf(host, sizeof host, "%s", arg);
		}
	}
	unsigned long pn = 0;
	if (port) {
		char *end;
		pn = strtoul(port, &end, 10);
		if (!*port || *end || pn > 65535)
			return -1;
		*has_port = true;
	}
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG }, *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
		hints.ai_flags = 0;
		if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
			return -2;
	}
	memset(ss, 0, sizeof *ss);
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)pn);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)pn);
	return 0;
}

static void json_or_null(const char *s)
{
	if (s)
		cli_json_str(s);
	else
		printf("null");
}

static void json_table(const struct ssw_routes *r)
{
	printf("[");
	for (int i = 0; i < r->nrules; i++) {
		char txt[256];
		ssw_route_rule_format(&r->rules[i], txt, sizeof txt);
		printf("%s\n  {\"index\": %d, \"rule\": ", i ? "," : "", i + 1);
		cli_json_str(txt);
		printf(", \"origin\": ");
		cli_json_str(r->rules[i].origin);
		printf("}");
	}
	printf("\n]\n");
}

static void explain_one(const struct ssw_routes *r, const char *arg, const struct sockaddr_storage *ss,
			socklen_t len, bool has_port, int json)
{
	struct ssw_route_explanation ex;
	ssw_route_explain(r, (const struct sockaddr *)ss, len, has_port, &ex);
	char host[INET6_ADDRSTRLEN] = "?";
	const void *a = ss->ss_family == AF_INET ? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
						  : (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
	inet_ntop(ss->ss_family, a, host, sizeof host);
	if (json) {
		char txt[256] = "";
		if (ex.rule)
			ssw_route_rule_format(ex.rule, txt, sizeof txt);
		printf("%s\n  {\"address\": ", json > 1 ? "," : "");
		cli_json_str(arg);
		printf(", \"host\": ");
		cli_json_str(host);
		printf(", \"provider\": ");
		cli_json_str(ssw_target_name(ex.target));
		if (ex.rule)
			printf(", \"rule\": %d", ex.rule_index);
		else
			printf(", \"rule\": null");
		printf(", \"rule_text\": ");
		json_or_null(ex.rule ? txt : NULL);
		printf(", \"origin\": ");
		json_or_null(ex.rule ? ex.rule->origin : NULL);
		printf(", \"port_excluded_by\": ");
		json_or_null(ex.port_excluded ? ex.port_origin : NULL);
		printf(", \"why\": ");
		cli_json_str(ex.why);
		printf("}");
		return;
	}

	printf("%s", arg);
	if (strcmp(arg, host) && !has_port)
		printf(" (%s)", host);
	printf("\n");
	const char *note = "";
	if (ex.target >= 0 && ex.target < ssw_registry_count && !ssw_registry[ex.target].prov)
		note = " (not built into this library: connections fall back to kernel TCP)";
	printf("  provider  %s%s%s\n", ssw_target_name(ex.target), ex.target == SSW_TARGET_TCP ? " (kernel TCP)" : "", note);
	if (ex.rule) {
		char txt[256];
		ssw_route_rule_format(ex.rule, txt, sizeof txt);
		printf("  rule      %d: %s\n", ex.rule_index, txt);
		printf("  from      %s\n", ex.rule->origin);
	} else {
		printf("  rule      none\n");
	}
	if (ex.port_excluded)
		printf("  port      excluded by %s\n", ex.port_origin);
	printf("  why       %s\n", ex.why);
	if (ex.target != SSW_TARGET_TCP)
		printf("  note      switched only if the peer runs the switch too (else kernel TCP)\n");
}

int routes_main(int argc, char **argv)
{
	const char *conf = NULL, *rules = NULL;
	int first = argc, json = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char **dst = NULL;
		const char *v = NULL;
		if (cli_is_help(a)) {
			routes_usage(stdout);
			return CLI_EXIT_OK;
		}
		if (!strcmp(a, "--")) {
			first = i + 1;
			break;
		}
		if (!strcmp(a, "--json")) {
			json = 1;
			continue;
		}
		if (!strncmp(a, "--conf", 6) && (a[6] == '\0' || a[6] == '='))
			dst = &conf, v = a[6] ? a + 7 : NULL;
		else if (!strncmp(a, "--routes", 8) && (a[8] == '\0' || a[8] == '='))
			dst = &rules, v = a[8] ? a + 9 : NULL;
		else if (a[0] == '-' && a[1] && !strchr(a, ':')) {
			fprintf(stderr, "sockswitch routes: unknown option '%s'\n\n", a);
			routes_usage(stderr);
			return CLI_EXIT_USAGE;
		} else {
			first = i;
			break;
		}
		if (!v) {
			if (i + 1 >= argc) {
				fprintf(stderr, "sockswitch routes: %s needs a value\n", a);
				return CLI_EXIT_USAGE;
			}
			v = argv[++i];
		}
		*dst = v;
	}
	if (cli_apply_config("routes", conf, rules) < 0)
		return CLI_EXIT_FAIL;
	static struct ssw_routes table;
	char err[512];
	if (cli_check_config("routes", &table, err, sizeof err) < 0)
		return CLI_EXIT_FAIL;
	if (ssw_param_choice(SSW_P_DISABLE) == 1 && !json)
		printf("note: SOCKSWITCH_DISABLE is set: programs started with it use kernel TCP for everything\n");

	if (first >= argc) {
		if (json)
			json_table(&table);
		else
			print_table(&table);
		return CLI_EXIT_OK;
	}
	if (json)
		printf("[");
	int rc = CLI_EXIT_OK;
	for (int i = first; i < argc; i++) {
		struct sockaddr_storage ss;
		socklen_t len;
		bool has_port;
		int pr = parse_target(argv[i], &ss, &len, &has_port);
		if (pr == -1) {
			fprintf(stderr, "sockswitch routes: '%s': expected ADDR, ADDR:PORT or [IPv6]:PORT\n", argv[i]);
			return CLI_EXIT_USAGE;
		}
		if (pr < 0) {
			fprintf(stderr, "sockswitch routes: '%s': cannot resolve this host name\n", argv[i]);
			rc = CLI_EXIT_FAIL;
			continue;
		}
		explain_one(&table, argv[i], &ss, len, has_port, json ? json++ : 0);
	}
	if (json)
		printf("\n]\n");
	return rc;
}
