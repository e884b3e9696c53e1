/* route.h — the routing table (seed 001): which provider serves a destination.
 *
 * Rules come, in this order of precedence, from SOCKSWITCH_ROUTES (rules
 * separated by ';'), from the file named by SOCKSWITCH_CONF (one rule a line,
 * '#' comments), then the built-in default `route local shm`; an address no
 * rule matches goes to kernel TCP.  First match wins.
 *
 *   route <cidr>|local <provider> [key=value ...]   provider: a registered name
 *                                                    (providers.c: shm, fabric) or tcp
 *   port-exclude <port>[,<port>...]                  ports never switched
 *
 * Options go to the provider's configure op (ssw_routes_load): an option it
 * refuses is a configuration error naming the file and line. */
#ifndef SSW_ROUTE_H
#define SSW_ROUTE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* A route's target: an index into the provider registry (providers.h), or
 * SSW_TARGET_TCP, the built-in "kernel TCP, never switched". */
#define SSW_TARGET_TCP (-1)

#define SSW_ROUTE_MAX_RULES 128
#define SSW_ROUTE_MAX_OPTS 4

struct ssw_route_rule {
	bool local;          /* `local`: any address of this host */
	int family;          /* AF_INET / AF_INET6 for a cidr rule */
	uint8_t addr[16];    /* network address, host bits cleared */
	int prefix;          /* prefix length */
	int target;          /* registry index or SSW_TARGET_TCP */
	int nopts;
	char opt_key[SSW_ROUTE_MAX_OPTS][32];
	char opt_val[SSW_ROUTE_MAX_OPTS][64];
	char origin[160];    /* "FILE:LINE", "SOCKSWITCH_ROUTES rule N" or "built-in default" */
};

#define SSW_ROUTE_MAX_EXCL 32

struct ssw_routes {
	int nrules;
	struct ssw_route_rule rules[SSW_ROUTE_MAX_RULES];
	uint8_t port_excluded[65536 / 8];   /* bitmap */
	/* For explanations: where each port-exclude line is, and which line
	 * first excluded each port (1 + index into excl_origin; 0: none).  Past
	 * SSW_ROUTE_MAX_EXCL lines the last origin stands for the rest. */
	int nexcl;
	char excl_origin[SSW_ROUTE_MAX_EXCL][160];
	uint8_t port_excl_by[65536];
};

/* Build the table from the environment (SOCKSWITCH_ROUTES, SOCKSWITCH_CONF)
 * plus the default, and hand each rule's options to its provider
 * (ssw_route_configure).  Returns 0, or -1 with a one-line message in err naming
 * the file and line (or env variable and rule number) and what is wrong; on
 * error *out holds no rule at all (everything goes to TCP). */
int ssw_routes_load(struct ssw_routes *out, char *err, size_t errlen);

/* Same, from explicit inputs (either may be NULL), syntax only (options are
 * not handed to providers); used by load and tests.
 * conf_text is the file's content, conf_name its name for messages. */
int ssw_routes_build(struct ssw_routes *out, const char *env_routes, const char *conf_name,
		     const char *conf_text, char *err, size_t errlen);

/* Hand rule's options to p (NULL: a provider not built, options unchecked).
 * 0, or -1 with "ORIGIN: ..." in err: tcp or a provider without configure
 * given options, or an option p refuses. */
struct ssw_provider;
int ssw_route_configure(const struct ssw_route_rule *rule, const struct ssw_provider *p, char *err, size_t errlen);

/* Which target serves sa (IPv4, IPv6 or v4-mapped IPv6).  Returns the matching
 * rule (NULL when none matched: target TCP) and sets *target. */
const struct ssw_route_rule *ssw_route_lookup(const struct ssw_routes *r, const struct sockaddr *sa,
					      socklen_t len, int *target);

/* The targets (without tcp, each once) that serve some address of this
 * host, of the families asked: what a wildcard listener may be reached
 * through.  Returns how many were put in out (at most max). */
int ssw_route_local_targets(const struct ssw_routes *r, bool v4, bool v6, int *out, int max);

bool ssw_route_port_excluded(const struct ssw_routes *r, uint16_t port);

/* Do the settings' routes (SOCKSWITCH_ROUTES, SOCKSWITCH_CONF; read, not
 * configured) name a provider other than this one?  false on any error. */
bool ssw_routes_name_other_than(const char *provider);

/* Why a destination gets its provider, for `sockswitch routes` and logs. */
struct ssw_route_explanation {
	int target;                          /* what connect() would use */
	const struct ssw_route_rule *rule;   /* first matching rule, NULL: none */
	int rule_index;                      /* its 1-based position in the table, 0: none */
	bool local;                          /* the address is one of this host's */
	bool port_excluded;                  /* has_port and the port is excluded */
	const char *port_origin;             /* the port-exclude line that excludes it */
	char why[384];                       /* one sentence */
};
/* has_port: sa's port counts (port-exclude); otherwise only the address. */
void ssw_route_explain(const struct ssw_routes *r, const struct sockaddr *sa, socklen_t len, bool has_port,
		       struct ssw_route_explanation *out);
/* The rule as the configuration would write it: "route 10.0.0.0/8 fabric provider=verbs". */
void ssw_route_rule_format(const struct ssw_route_rule *rule, char *buf, size_t len);

/* True when sa is an address of this host: 127.0.0.0/8, ::1, v4-mapped
 * loopback, the unspecified address, or any address on a local interface
 * (getifaddrs, cached). */
bool ssw_addr_is_local(const struct sockaddr *sa, socklen_t len);

/* The provider's name ("shm", "fabric") or "tcp". */
const char *ssw_target_name(int t);

#endif
