/* test_route.c — the routing table: syntax, precedence, CIDR matching, errors, local-address detection (lookups only, no traffic). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "switch/route/providers.h"
#include "switch/route/route.h"

/* Routes name providers by the registry's names; the tests follow it. */
#define T_SHM ssw_registry_find("shm", 3)
#define T_FABRIC ssw_registry_find("fabric", 6)

/* ~85 KB each: kept off the stack. */
static struct ssw_routes T, T2;
static char err[512];

/* ---- getifaddrs stand-in --------------------------------------------------
 * Defined here, it takes precedence over libc's for route.c (linked into this
 * executable), so the interface list, failures and call counts are ours. */

enum fake_mode { FAKE_OFF, FAKE_A, FAKE_B, FAKE_FAIL, FAKE_SLOW_A };
static int fake_mode = FAKE_OFF;          /* atomic */
static int getifaddrs_calls;              /* atomic */

static struct ifaddrs fake_ifa[4];
static struct sockaddr fake_packet = { .sa_family = AF_PACKET };
static struct sockaddr_in fake_v4;
static struct sockaddr_in6 fake_v6;

static void fake_fill(const char *v4, const char *v6)
{
	memset(fake_ifa, 0, sizeof fake_ifa);
	fake_v4 = (struct sockaddr_in){ .sin_family = AF_INET };
	fake_v6 = (struct sockaddr_in6){ .sin6_family = AF_INET6 };
	inet_pton(AF_INET, v4, &fake_v4.sin_addr);
	inet_pton(AF_INET6, v6, &fake_v6.sin6_addr);
	/* An entry without an address (some tunnels) and a link-layer one: both must be skipped. */
	fake_ifa[0] = (struct ifaddrs){ .ifa_next = &fake_ifa[1], .ifa_name = "tun0", .ifa_addr = NULL };
	fake_ifa[1] = (struct ifaddrs){ .ifa_next = &fake_ifa[2], .ifa_name = "eth0", .ifa_addr = &fake_packet };
	fake_ifa[2] = (struct ifaddrs){ .ifa_next = &fake_ifa[3], .ifa_name = "eth0",
					.ifa_addr = (struct sockaddr *)&fake_v4, .ifa_flags = IFF_UP };
	fake_ifa[3] = (struct ifaddrs){ .ifa_next = NULL, .ifa_name = "eth0",
					.ifa_addr = (struct sockaddr *)&fake_v6, .ifa_flags = IFF_UP };
}

int getifaddrs(struct ifaddrs **ifap)
{
	__atomic_add_fetch(&getifaddrs_calls, 1, __ATOMIC_RELAXED);
	switch (__atomic_load_n(&fake_mode, __ATOMIC_ACQUIRE)) {
	case FAKE_OFF: {
		int (*real)(struct ifaddrs **) = (int (*)(struct ifaddrs **))dlsym(RTLD_NEXT, "getifaddrs");
		return real(ifap);
	}
	case FAKE_FAIL:
		errno = ENOBUFS;
		return -1;
	case FAKE_SLOW_A:
		usleep(300 * 1000);
		/* fallthrough */
	default:
		*ifap = &fake_ifa[0];
		return 0;
	}
}

void freeifaddrs(struct ifaddrs *ifa)
{
	if (ifa == &fake_ifa[0])
		return;
	void (*real)(struct ifaddrs *) = (void (*)(struct ifaddrs *))dlsym(RTLD_NEXT, "freeifaddrs");
	real(ifa);
}

static void set_fake(int mode)
{
	if (mode == FAKE_A || mode == FAKE_SLOW_A)
		fake_fill("198.51.100.7", "2001:db8:feed::7");
	else if (mode == FAKE_B)
		fake_fill("198.51.100.8", "2001:db8:feed::8");
	__atomic_store_n(&fake_mode, mode, __ATOMIC_RELEASE);
}

/* The cache refreshes at most once a second: waiting longer forces the next
 * lookup to see the current (fake) interface list. */
static void wait_refresh(void)
{
	usleep(1150 * 1000);
}

/* ---- helpers --------------------------------------------------------------- */

struct addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

static struct addr mkaddr(const char *s)
{
	struct addr a;
	memset(&a, 0, sizeof a);
	if (strchr(s, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a.ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(80);
		if (inet_pton(AF_INET6, s, &s6->sin6_addr) != 1)
			fail_msg("test bug: bad address %s", s);
		a.len = sizeof *s6;
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&a.ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(80);
		if (inet_pton(AF_INET, s, &s4->sin_addr) != 1)
			fail_msg("test bug: bad address %s", s);
		a.len = sizeof *s4;
	}
	return a;
}

static const struct ssw_route_rule *lookup(const struct ssw_routes *r, const char *s, int *t)
{
	struct addr a = mkaddr(s);
	return ssw_route_lookup(r, (struct sockaddr *)&a.ss, a.len, t);
}

static bool is_local(const char *s)
{
	struct addr a = mkaddr(s);
	return ssw_addr_is_local((struct sockaddr *)&a.ss, a.len);
}

/* cmocka's fail_msg() reports its own line; helpers report their caller's. */
#define fail_at(file, line, ...) do { print_error(__VA_ARGS__); print_error("\n"); _fail(file, line); } while (0)

/* Checks target and, when origin is non-NULL, the origin of the rule that
 * decided ("" = no rule matched). */
#define expect_route(r, addr, tgt, origin) expect_route_at(r, addr, tgt, origin, __FILE__, __LINE__)
static void expect_route_at(const struct ssw_routes *r, const char *addr, int tgt,
			    const char *origin, const char *file, int line)
{
	int t = (int)99;
	const struct ssw_route_rule *rule = lookup(r, addr, &t);
	if (t != tgt)
		fail_at(file, line, "%s: target %s, expected %s", addr, ssw_target_name(t), ssw_target_name(tgt));
	if (!rule && tgt != SSW_TARGET_TCP)
		fail_at(file, line, "%s: no rule matched", addr);
	if (rule && rule->target != t)
		fail_at(file, line, "%s: rule target and *target differ", addr);
	if (origin) {
		const char *got = rule ? rule->origin : "";
		if (strcmp(got, origin) != 0)
			fail_at(file, line, "%s: origin '%s', expected '%s'", addr, got, origin);
	}
}


static int build(struct ssw_routes *r, const char *env, const char *text)
{
	return ssw_routes_build(r, env, "test.conf", text, err, sizeof err);
}

static bool bitmap_empty(const struct ssw_routes *r)
{
	for (size_t i = 0; i < sizeof r->port_excluded; i++)
		if (r->port_excluded[i])
			return false;
	return true;
}

/* ---- default table ---------------------------------------------------------- */

static void test_default_table(void **state)
{
	(void)state;
	assert_int_equal(build(&T, NULL, NULL), 0);
	assert_string_equal(err, "");
	assert_int_equal(T.nrules, 1);
	assert_true(T.rules[0].local);
	assert_int_equal(T.rules[0].target, T_SHM);
	assert_string_equal(T.rules[0].origin, "built-in default");
	assert_true(bitmap_empty(&T));

	expect_route(&T, "127.0.0.1", T_SHM, "built-in default");
	expect_route(&T, "127.5.5.5", T_SHM, "built-in default");
	expect_route(&T, "127.255.255.255", T_SHM, "built-in default");
	expect_route(&T, "::1", T_SHM, "built-in default");
	expect_route(&T, "::ffff:127.0.0.1", T_SHM, "built-in default");
	expect_route(&T, "0.0.0.0", T_SHM, "built-in default");
	expect_route(&T, "::", T_SHM, "built-in default");
	expect_route(&T, "::ffff:0.0.0.0", T_SHM, "built-in default");

	expect_route(&T, "8.8.8.8", SSW_TARGET_TCP, "");
	expect_route(&T, "2001:db8::1", SSW_TARGET_TCP, "");
	expect_route(&T, "::ffff:8.8.8.8", SSW_TARGET_TCP, "");
	expect_route(&T, "::2", SSW_TARGET_TCP, "");                   /* next to ::1 */
	expect_route(&T, "::127.0.0.1", SSW_TARGET_TCP, "");           /* v4-compatible, not mapped */
	expect_route(&T, "128.0.0.1", SSW_TARGET_TCP, "");             /* just past 127/8 */
	expect_route(&T, "126.255.255.255", SSW_TARGET_TCP, "");       /* just before */

	/* Empty inputs are the same as none. */
	assert_int_equal(build(&T2, "", ""), 0);
	assert_int_equal(T2.nrules, 1);
	assert_string_equal(T2.rules[0].origin, "built-in default");
}

static void test_bad_sockaddr(void **state)
{
	(void)state;
	int t = T_SHM;
	assert_int_equal(build(&T, NULL, NULL), 0);
	struct addr a = mkaddr("127.0.0.1");

	assert_null(ssw_route_lookup(&T, NULL, 16, &t));
	assert_int_equal(t, SSW_TARGET_TCP);
	t = T_SHM;
	assert_null(ssw_route_lookup(&T, (struct sockaddr *)&a.ss, 4, &t));   /* truncated */
	assert_int_equal(t, SSW_TARGET_TCP);
	assert_false(ssw_addr_is_local((struct sockaddr *)&a.ss, 4));
	assert_false(ssw_addr_is_local(NULL, 16));

	struct addr u = a;
	u.ss.ss_family = AF_UNIX;
	t = T_SHM;
	assert_null(ssw_route_lookup(&T, (struct sockaddr *)&u.ss, u.len, &t));
	assert_int_equal(t, SSW_TARGET_TCP);

	/* A v6 address need not be aligned in the caller's buffer. */
	struct addr b = mkaddr("::1");
	_Alignas(8) char buf[sizeof(struct sockaddr_in6) + 1];
	memcpy(buf + 1, &b.ss, sizeof(struct sockaddr_in6));
	assert_true(ssw_addr_is_local((struct sockaddr *)(buf + 1), sizeof(struct sockaddr_in6)));

	/* target may be NULL; NULL table means everything TCP. */
	assert_non_null(ssw_route_lookup(&T, (struct sockaddr *)&a.ss, a.len, NULL));
	t = T_SHM;
	assert_null(ssw_route_lookup(NULL, (struct sockaddr *)&a.ss, a.len, &t));
	assert_int_equal(t, SSW_TARGET_TCP);
}

/* ---- precedence ------------------------------------------------------------- */

static void test_env_beats_file(void **state)
{
	(void)state;
	assert_int_equal(build(&T, "route 10.0.0.0/8 fabric", "route 10.0.0.0/8 tcp\nroute 11.0.0.0/8 shm\n"), 0);
	assert_int_equal(T.nrules, 4);
	assert_string_equal(T.rules[0].origin, "SOCKSWITCH_ROUTES rule 1");
	assert_string_equal(T.rules[1].origin, "test.conf:1");
	assert_string_equal(T.rules[2].origin, "test.conf:2");
	assert_string_equal(T.rules[3].origin, "built-in default");
	expect_route(&T, "10.1.2.3", T_FABRIC, "SOCKSWITCH_ROUTES rule 1");
	expect_route(&T, "11.1.2.3", T_SHM, "test.conf:2");

	/* The file can't override the env's `local` rule, and the default comes last. */
	assert_int_equal(build(&T, "route local fabric", "route local tcp"), 0);
	expect_route(&T, "127.0.0.1", T_FABRIC, "SOCKSWITCH_ROUTES rule 1");
	assert_int_equal(build(&T, NULL, "route local tcp"), 0);
	expect_route(&T, "127.0.0.1", SSW_TARGET_TCP, "test.conf:1");
	expect_route(&T, "::1", SSW_TARGET_TCP, "test.conf:1");
}

static void test_first_match_wins(void **state)
{
	(void)state;
	assert_int_equal(build(&T, NULL, "route 10.0.0.0/8 fabric\nroute 10.1.0.0/16 shm\n"), 0);
	expect_route(&T, "10.1.2.3", T_FABRIC, "test.conf:1");

	assert_int_equal(build(&T, NULL, "route 10.1.0.0/16 shm\nroute 10.0.0.0/8 fabric\n"), 0);
	expect_route(&T, "10.1.2.3", T_SHM, "test.conf:1");
	expect_route(&T, "10.2.0.1", T_FABRIC, "test.conf:2");

	/* Same within the variable. */
	assert_int_equal(build(&T, "route 10.1.0.0/16 tcp;route 10.0.0.0/8 fabric", NULL), 0);
	expect_route(&T, "10.1.0.1", SSW_TARGET_TCP, "SOCKSWITCH_ROUTES rule 1");
	expect_route(&T, "10.9.0.1", T_FABRIC, "SOCKSWITCH_ROUTES rule 2");
}

static void test_catch_all_tcp(void **state)
{
	(void)state;
	/* 0.0.0.0/0 is an IPv4 prefix: it switches off IPv4 (mapped included) only. */
	assert_int_equal(build(&T, NULL, "route 0.0.0.0/0 tcp\nroute local shm\n"), 0);
	expect_route(&T, "127.0.0.1", SSW_TARGET_TCP, "test.conf:1");
	expect_route(&T, "::ffff:127.0.0.1", SSW_TARGET_TCP, "test.conf:1");
	expect_route(&T, "0.0.0.0", SSW_TARGET_TCP, "test.conf:1");
	expect_route(&T, "::1", T_SHM, "test.conf:2");

	assert_int_equal(build(&T, "route 0.0.0.0/0 tcp;route ::/0 tcp", NULL), 0);
	expect_route(&T, "127.0.0.1", SSW_TARGET_TCP, "SOCKSWITCH_ROUTES rule 1");
	expect_route(&T, "::1", SSW_TARGET_TCP, "SOCKSWITCH_ROUTES rule 2");
	expect_route(&T, "::", SSW_TARGET_TCP, "SOCKSWITCH_ROUTES rule 2");

	/* After `local`, a catch-all only affects remote destinations. */
	assert_int_equal(build(&T, NULL, "route local shm\nroute 0.0.0.0/0 fabric\n"), 0);
	expect_route(&T, "127.0.0.1", T_SHM, "test.conf:1");
	expect_route(&T, "8.8.8.8", T_FABRIC, "test.conf:2");
	expect_route(&T, "2001:db8::1", SSW_TARGET_TCP, "");
}

/* ---- CIDR matching ---------------------------------------------------------- */

static void test_cidr_v4(void **state)
{
	(void)state;
	assert_int_equal(build(&T, NULL, "route 0.0.0.0/0 fabric"), 0);
	assert_int_equal(T.rules[0].family, AF_INET);
	assert_int_equal(T.rules[0].prefix, 0);
	expect_route(&T, "1.2.3.4", T_FABRIC, NULL);
	expect_route(&T, "255.255.255.255", T_FABRIC, NULL);
	expect_route(&T, "2001:db8::1", SSW_TARGET_TCP, "");   /* v4 rules never match v6 */

	assert_int_equal(build(&T, NULL, "route 10.0.0.0/8 fabric"), 0);
	expect_route(&T, "10.0.0.0", T_FABRIC, NULL);
	expect_route(&T, "10.255.255.255", T_FABRIC, NULL);
	expect_route(&T, "9.255.255.255", SSW_TARGET_TCP, "");
	expect_route(&T, "11.0.0.0", SSW_TARGET_TCP, "");
	expect_route(&T, "::ffff:10.1.2.3", T_FABRIC, "test.conf:1");

	assert_int_equal(build(&T, NULL, "route 172.16.0.0/12 fabric"), 0);
	expect_route(&T, "172.31.255.255", T_FABRIC, NULL);
	expect_route(&T, "172.32.0.0", SSW_TARGET_TCP, "");
	expect_route(&T, "172.15.255.255", SSW_TARGET_TCP, "");

	assert_int_equal(build(&T, NULL, "route 192.168.1.4/31 fabric"), 0);
	expect_route(&T, "192.168.1.4", T_FABRIC, NULL);
	expect_route(&T, "192.168.1.5", T_FABRIC, NULL);
	expect_route(&T, "192.168.1.3", SSW_TARGET_TCP, "");
	expect_route(&T, "192.168.1.6", SSW_TARGET_TCP, "");

	/* Bare address = /32. */
	assert_int_equal(build(&T, NULL, "route 192.168.1.7 fabric"), 0);
	assert_int_equal(T.rules[0].prefix, 32);
	expect_route(&T, "192.168.1.7", T_FABRIC, NULL);
	expect_route(&T, "192.168.1.6", SSW_TARGET_TCP, "");
	expect_route(&T, "192.168.1.8", SSW_TARGET_TCP, "");
	assert_int_equal(build(&T, NULL, "route 192.168.1.7/32 fabric"), 0);
	expect_route(&T, "192.168.1.7", T_FABRIC, NULL);
	expect_route(&T, "192.168.1.6", SSW_TARGET_TCP, "");

	/* Host bits are cleared. */
	static const uint8_t net10[16] = { 10 };
	static const uint8_t net192[16] = { 192, 168, 1, 4 };
	assert_int_equal(build(&T, NULL, "route 10.1.2.3/8 fabric\nroute 192.168.1.5/31 shm"), 0);
	assert_memory_equal(T.rules[0].addr, net10, 16);
	assert_int_equal(T.rules[0].prefix, 8);
	assert_memory_equal(T.rules[1].addr, net192, 16);
	expect_route(&T, "10.200.0.1", T_FABRIC, NULL);
	expect_route(&T, "192.168.1.4", T_SHM, NULL);
}

static void test_cidr_v6(void **state)
{
	(void)state;
	assert_int_equal(build(&T, NULL, "route ::/0 fabric"), 0);
	assert_int_equal(T.rules[0].family, AF_INET6);
	expect_route(&T, "2001:db8::1", T_FABRIC, NULL);
	expect_route(&T, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", T_FABRIC, NULL);
	expect_route(&T, "8.8.8.8", SSW_TARGET_TCP, "");
	expect_route(&T, "::ffff:8.8.8.8", SSW_TARGET_TCP, "");   /* mapped = IPv4 */

	assert_int_equal(build(&T, NULL, "route fd00::/8 shm"), 0);
	expect_route(&T, "fd12:3456::1", T_SHM, NULL);
	expect_route(&T, "fdff:ffff::1", T_SHM, NULL);
	expect_route(&T, "fc00::1", SSW_TARGET_TCP, "");
	expect_route(&T, "fe00::1", SSW_TARGET_TCP, "");

	assert_int_equal(build(&T, NULL, "route 2001:db8:1:2::/64 fabric"), 0);
	expect_route(&T, "2001:db8:1:2::", T_FABRIC, NULL);
	expect_route(&T, "2001:db8:1:2:ffff:ffff:ffff:ffff", T_FABRIC, NULL);
	expect_route(&T, "2001:db8:1:3::", SSW_TARGET_TCP, "");
	expect_route(&T, "2001:db8:1:1:ffff:ffff:ffff:ffff", SSW_TARGET_TCP, "");

	assert_int_equal(build(&T, NULL, "route 2001:db8::5 fabric"), 0);
	assert_int_equal(T.rules[0].prefix, 128);
	expect_route(&T, "2001:db8::5", T_FABRIC, NULL);
	expect_route(&T, "2001:db8::4", SSW_TARGET_TCP, "");
	expect_route(&T, "2001:db8::6", SSW_TARGET_TCP, "");
	assert_int_equal(build(&T, NULL, "route 2001:db8::5/128 fabric"), 0);
	expect_route(&T, "2001:db8::5", T_FABRIC, NULL);
	expect_route(&T, "2001:db8::4", SSW_TARGET_TCP, "");

	assert_int_equal(build(&T, NULL, "route 2001:db8::4/127 fabric"), 0);
	expect_route(&T, "2001:db8::5", T_FABRIC, NULL);
	expect_route(&T, "2001:db8::6", SSW_TARGET_TCP, "");

	/* Host bits are cleared. */
	struct in6_addr want;
	inet_pton(AF_INET6, "2001:db8::", &want);
	assert_int_equal(build(&T, NULL, "route 2001:db8::ffff/64 fabric"), 0);
	assert_memory_equal(T.rules[0].addr, want.s6_addr, 16);

	/* A rule in v4-mapped form means the IPv4 prefix it carries. */
	static const uint8_t net10[16] = { 10 };
	assert_int_equal(build(&T, NULL, "route ::ffff:10.0.0.0/104 fabric"), 0);
	assert_int_equal(T.rules[0].family, AF_INET);
	assert_int_equal(T.rules[0].prefix, 8);
	assert_memory_equal(T.rules[0].addr, net10, 16);
	expect_route(&T, "10.1.2.3", T_FABRIC, NULL);
	expect_route(&T, "::ffff:10.1.2.3", T_FABRIC, NULL);
	expect_route(&T, "11.1.2.3", SSW_TARGET_TCP, "");
}

/* ---- syntax ----------------------------------------------------------------- */

static void test_whitespace_and_comments(void **state)
{
	(void)state;
	const char *text =
		"# a comment\n"
		"\n"
		"   \t  \n"
		"\troute\t10.0.0.0/8   fabric\t \n"
		"route 11.0.0.0/8 shm # trailing comment\n"
		"route 12.0.0.0/8 shm#glued comment\n"
		"    # indented comment\n"
		"route 13.0.0.0/8 fabric\r\n"       /* CRLF */
		"route 14.0.0.0/8 fabric";          /* no final newline */
	assert_int_equal(build(&T, NULL, text), 0);
	assert_int_equal(T.nrules, 6);
	expect_route(&T, "10.0.0.1", T_FABRIC, "test.conf:4");
	expect_route(&T, "11.0.0.1", T_SHM, "test.conf:5");
	expect_route(&T, "12.0.0.1", T_SHM, "test.conf:6");
	expect_route(&T, "13.0.0.1", T_FABRIC, "test.conf:8");
	expect_route(&T, "14.0.0.1", T_FABRIC, "test.conf:9");

	/* Items are numbered by position, empty and comment-only ones included. */
	assert_int_equal(build(&T, " route 10.0.0.0/8 fabric ;; # nothing ; route 11.0.0.0/8 shm;", NULL), 0);
	assert_int_equal(T.nrules, 3);
	expect_route(&T, "10.0.0.1", T_FABRIC, "SOCKSWITCH_ROUTES rule 1");
	expect_route(&T, "11.0.0.1", T_SHM, "SOCKSWITCH_ROUTES rule 4");

	/* A comment ends at ';' in the variable. */
	assert_int_equal(build(&T, "route 10.0.0.0/8 fabric # c;route 11.0.0.0/8 shm", NULL), 0);
	expect_route(&T, "11.0.0.1", T_SHM, "SOCKSWITCH_ROUTES rule 2");
}

static void test_options(void **state)
{
	(void)state;
	assert_int_equal(build(&T, "route local shm ring=64k",
			       "route 10.0.0.0/8 fabric provider=verbs mtu=4096\n"
			       "route 11.0.0.0/8 fabric a=1 b=2 c=3 d=x=y\n"
			       "route 12.0.0.0/8 tcp\n"),
			 0);
	assert_int_equal(T.rules[0].nopts, 1);
	assert_string_equal(T.rules[0].opt_key[0], "ring");
	assert_string_equal(T.rules[0].opt_val[0], "64k");

	const struct ssw_route_rule *r = lookup(&T, "10.9.9.9", NULL);
	assert_non_null(r);
	assert_int_equal(r->nopts, 2);
	assert_string_equal(r->opt_key[0], "provider");
	assert_string_equal(r->opt_val[0], "verbs");
	assert_string_equal(r->opt_key[1], "mtu");
	assert_string_equal(r->opt_val[1], "4096");

	r = lookup(&T, "11.9.9.9", NULL);
	assert_non_null(r);
	assert_int_equal(r->nopts, SSW_ROUTE_MAX_OPTS);
	assert_string_equal(r->opt_key[3], "d");
	assert_string_equal(r->opt_val[3], "x=y");   /* split at the first '=' */

	r = lookup(&T, "12.9.9.9", NULL);
	assert_non_null(r);
	assert_int_equal(r->nopts, 0);

	/* Longest accepted key and value. */
	char line[256];
	snprintf(line, sizeof line, "route local shm %031d=%063d", 0, 0);
	assert_int_equal(build(&T, NULL, line), 0);
	assert_int_equal(strlen(T.rules[0].opt_key[0]), 31);
	assert_int_equal(strlen(T.rules[0].opt_val[0]), 63);
}

static void test_port_exclude(void **state)
{
	(void)state;
	assert_int_equal(build(&T, "port-exclude 22,5432", "port-exclude 1,65535\nport-exclude 8080\n"), 0);
	assert_int_equal(T.nrules, 1);   /* port rules are not routes */
	static const uint16_t yes[] = { 1, 22, 5432, 8080, 65535 };
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
		if (!ssw_route_port_excluded(&T, yes[i]))
			fail_msg("port %u should be excluded", yes[i]);
	int n = 0;
	for (unsigned p = 0; p <= 65535; p++)
		n += ssw_route_port_excluded(&T, (uint16_t)p);
	assert_int_equal(n, 5);

	assert_int_equal(build(&T, NULL, NULL), 0);
	for (unsigned p = 0; p <= 65535; p++)
		if (ssw_route_port_excluded(&T, (uint16_t)p))
			fail_msg("port %u excluded by default", p);
	assert_false(ssw_route_port_excluded(NULL, 22));
}

/* ssw_route_explain: the rule, its position and origin, locality, the
 * port-exclude line that overrides it, and a sentence saying so. */
static void explain(const char *addr, uint16_t port, bool has_port, struct ssw_route_explanation *ex)
{
	struct addr a = mkaddr(addr);
	if (a.ss.ss_family == AF_INET)
		((struct sockaddr_in *)&a.ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)&a.ss)->sin6_port = htons(port);
	ssw_route_explain(&T, (struct sockaddr *)&a.ss, a.len, has_port, ex);
}

static void test_explain(void **state)
{
	(void)state;
	static struct ssw_route_explanation ex;
	assert_int_equal(build(&T, "route 10.1.0.0/16 tcp", "# c\nroute 10.0.0.0/8 fabric provider=verbs\n"
			       "port-exclude 22\nport-exclude 22,5432\n"), 0);
	explain("10.1.2.3", 80, true, &ex);
	assert_int_equal(ex.target, SSW_TARGET_TCP);
	assert_int_equal(ex.rule_index, 1);
	assert_string_equal(ex.rule->origin, "SOCKSWITCH_ROUTES rule 1");
	assert_false(ex.local);
	assert_non_null(strstr(ex.why, "never switched"));

	explain("10.2.0.1", 80, true, &ex);
	assert_int_equal(ex.target, T_FABRIC);
	assert_int_equal(ex.rule_index, 2);
	assert_string_equal(ex.rule->origin, "test.conf:2");
	assert_false(ex.port_excluded);
	char txt[256];
	ssw_route_rule_format(ex.rule, txt, sizeof txt);
	assert_string_equal(txt, "route 10.0.0.0/8 fabric provider=verbs");

	/* the first port-exclude line that names the port is the one shown */
	explain("10.2.0.1", 22, true, &ex);
	assert_int_equal(ex.target, SSW_TARGET_TCP);
	assert_true(ex.port_excluded);
	assert_string_equal(ex.port_origin, "test.conf:3");
	assert_non_null(strstr(ex.why, "port 22 is excluded by port-exclude (test.conf:3)"));
	explain("10.2.0.1", 5432, true, &ex);
	assert_string_equal(ex.port_origin, "test.conf:4");
	/* without a port, port-exclude does not apply */
	explain("10.2.0.1", 22, false, &ex);
	assert_int_equal(ex.target, T_FABRIC);

	explain("127.0.0.1", 80, true, &ex);
	assert_int_equal(ex.target, T_SHM);
	assert_true(ex.local);
	assert_int_equal(ex.rule_index, 3);
	assert_string_equal(ex.rule->origin, "built-in default");
	assert_non_null(strstr(ex.why, "is an address of this host"));
	explain("::ffff:127.0.0.1", 80, true, &ex);
	assert_int_equal(ex.target, T_SHM);

	explain("192.0.2.99", 80, true, &ex);
	assert_null(ex.rule);
	assert_int_equal(ex.rule_index, 0);
	assert_int_equal(ex.target, SSW_TARGET_TCP);
	assert_non_null(strstr(ex.why, "no rule matches 192.0.2.99"));

	/* a v6 rule prints back in its CIDR form */
	assert_int_equal(build(&T, "route fd00::/8 tcp;route ::ffff:10.0.0.0/104 shm", NULL), 0);
	ssw_route_rule_format(&T.rules[0], txt, sizeof txt);
	assert_string_equal(txt, "route fd00::/8 tcp");
	ssw_route_rule_format(&T.rules[1], txt, sizeof txt);
	assert_string_equal(txt, "route 10.0.0.0/8 shm");

	/* many port-exclude lines: origins stay bounded, the last slot stands for the rest */
	char many[4096] = "";
	for (int i = 1; i <= SSW_ROUTE_MAX_EXCL + 5; i++)
		snprintf(many + strlen(many), sizeof many - strlen(many), "port-exclude %d\n", 1000 + i);
	assert_int_equal(build(&T, NULL, many), 0);
	assert_int_equal(T.nexcl, SSW_ROUTE_MAX_EXCL);
	explain("127.0.0.1", 1001, true, &ex);
	assert_string_equal(ex.port_origin, "test.conf:1");
	explain("127.0.0.1", 1000 + SSW_ROUTE_MAX_EXCL + 5, true, &ex);
	assert_true(ex.port_excluded);

	/* not an address */
	struct sockaddr_un_like { sa_family_t f; char p[20]; } u = { AF_UNIX, "x" };
	ssw_route_explain(&T, (struct sockaddr *)&u, sizeof u, true, &ex);
	assert_int_equal(ex.target, SSW_TARGET_TCP);
	assert_null(ex.rule);
}

static void test_origins(void **state)
{
	(void)state;
	assert_int_equal(ssw_routes_build(&T, NULL, "/etc/sockswitch.conf", "\n\nroute 10.0.0.0/8 fabric", err, sizeof err), 0);
	assert_string_equal(T.rules[0].origin, "/etc/sockswitch.conf:3");

	/* A path too long for the origin keeps its tail and the line number. */
	char path[300];
	memset(path, 'd', sizeof path);
	path[0] = '/';
	strcpy(path + sizeof path - 1 - strlen("/routes.conf"), "/routes.conf");
	assert_int_equal(ssw_routes_build(&T, NULL, path, "#\nroute local shm\n", err, sizeof err), 0);
	const char *o = T.rules[0].origin;
	size_t on = strlen(o);
	assert_int_equal(on, sizeof T.rules[0].origin - 1);
	assert_memory_equal(o, "...ddd", 6);
	assert_string_equal(o + on - strlen("/routes.conf:2"), "/routes.conf:2");
	assert_string_equal(T.rules[1].origin, "built-in default");

	assert_string_equal(ssw_target_name(SSW_TARGET_TCP), "tcp");
	assert_string_equal(ssw_target_name(T_SHM), "shm");
	assert_string_equal(ssw_target_name(T_FABRIC), "fabric");
}

/* ---- errors ----------------------------------------------------------------- */

struct err_case {
	const char *env, *text, *msg;
};

static const struct err_case err_cases[] = {
	/* unknown keyword */
	{ NULL, "# header\n\nroutes 10.0.0.0/8 shm\n", "test.conf:3: unknown keyword 'routes' (expected route or port-exclude)" },
	{ NULL, "Route local shm", "test.conf:1: unknown keyword 'Route' (expected route or port-exclude)" },
	{ "route local shm;bogus", NULL, "SOCKSWITCH_ROUTES rule 2: unknown keyword 'bogus' (expected route or port-exclude)" },
	/* missing fields */
	{ NULL, "route local shm\nroute\n", "test.conf:2: missing destination after 'route' (expected a CIDR or 'local')" },
	{ NULL, "route 10.0.0.0/8   # no provider", "test.conf:1: missing provider after '10.0.0.0/8' (expected shm, fabric or tcp)" },
	{ NULL, "port-exclude", "test.conf:1: missing port list after 'port-exclude'" },
	/* bad address */
	{ NULL, "route 10.0.0.256/8 shm", "test.conf:1: bad address '10.0.0.256/8' (expected an IPv4 or IPv6 address or CIDR, or 'local')" },
	{ NULL, "route 10.0.0/8 shm", "test.conf:1: bad address '10.0.0/8' (expected an IPv4 or IPv6 address or CIDR, or 'local')" },
	{ NULL, "route /8 shm", "test.conf:1: bad address '/8' (expected an IPv4 or IPv6 address or CIDR, or 'local')" },
	{ NULL, "route fe80::1%eth0 shm", "test.conf:1: bad address 'fe80::1%eth0' (expected an IPv4 or IPv6 address or CIDR, or 'local')" },
	{ NULL, "route 1:2:3:4:5:6:7:8:9 shm", "test.conf:1: bad address '1:2:3:4:5:6:7:8:9' (expected an IPv4 or IPv6 address or CIDR, or 'local')" },
	{ NULL, "route localhost shm", "test.conf:1: bad address 'localhost' (expected an IPv4 or IPv6 address or CIDR, or 'local')" },
	/* bad prefix */
	{ "route local shm;route 10.0.0.0/33 shm", NULL, "SOCKSWITCH_ROUTES rule 2: bad prefix length '/33' for IPv4" },
	{ NULL, "route ::/129 shm", "test.conf:1: bad prefix length '/129' for IPv6" },
	{ NULL, "route 10.0.0.0/ shm", "test.conf:1: bad prefix length '/' for IPv4" },
	{ NULL, "route 10.0.0.0/-1 shm", "test.conf:1: bad prefix length '/-1' for IPv4" },
	{ NULL, "route 10.0.0.0/8x shm", "test.conf:1: bad prefix length '/8x' for IPv4" },
	{ NULL, "route 10.0.0.0/0008 shm", "test.conf:1: bad prefix length '/0008' for IPv4" },
	{ NULL, "route ::/64/64 shm", "test.conf:1: bad prefix length '/64/64' for IPv6" },
	/* unknown provider */
	{ NULL, "\n\n\n\n\n\nroute 10.0.0.0/8 rdma\n", "test.conf:7: unknown provider 'rdma' (expected shm, fabric or tcp)" },
	{ NULL, "route local SHM", "test.conf:1: unknown provider 'SHM' (expected shm, fabric or tcp)" },
	/* malformed key=value */
	{ NULL, "route local shm verbs", "test.conf:1: malformed option 'verbs' (expected key=value)" },
	{ NULL, "route local shm =x", "test.conf:1: malformed option '=x' (expected key=value)" },
	{ NULL, "route local shm x=", "test.conf:1: malformed option 'x=' (expected key=value)" },
	{ NULL, "route local shm a=1 a=2", "test.conf:1: duplicate option 'a'" },
	{ NULL, "route local shm aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1",
	  "test.conf:1: option key 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' too long (max 31 characters)" },
	{ NULL, "route local shm k=0123456789012345678901234567890123456789012345678901234567890123",
	  "test.conf:1: value of option 'k' too long (max 63 characters)" },
	/* too many options */
	{ NULL, "route local shm a=1 b=2 c=3 d=4 e=5", "test.conf:1: too many options (max 4)" },
	/* bad port */
	{ NULL, "port-exclude 0", "test.conf:1: bad port '0' (expected 1-65535)" },
	{ NULL, "port-exclude 22,65536", "test.conf:1: bad port '65536' (expected 1-65535)" },
	{ NULL, "port-exclude 22,", "test.conf:1: bad port '' (expected 1-65535)" },
	{ NULL, "port-exclude ,22", "test.conf:1: bad port '' (expected 1-65535)" },
	{ NULL, "port-exclude 22,,23", "test.conf:1: bad port '' (expected 1-65535)" },
	{ NULL, "port-exclude ssh", "test.conf:1: bad port 'ssh' (expected 1-65535)" },
	{ NULL, "port-exclude -1", "test.conf:1: bad port '-1' (expected 1-65535)" },
	{ NULL, "port-exclude 99999999999", "test.conf:1: bad port '99999999999' (expected 1-65535)" },
	{ "port-exclude 22;port-exclude 22, 23", NULL,
	  "SOCKSWITCH_ROUTES rule 2: unexpected '23' after the port list (separate ports with commas, no spaces)" },
	{ NULL, NULL, NULL },   /* end */
};

static void check_empty_table(const struct ssw_routes *r)
{
	assert_int_equal(r->nrules, 0);
	assert_true(bitmap_empty(r));
	expect_route(r, "127.0.0.1", SSW_TARGET_TCP, "");
	expect_route(r, "::1", SSW_TARGET_TCP, "");
}

static void test_errors(void **state)
{
	(void)state;
	for (const struct err_case *c = err_cases; c->msg; c++) {
		/* Start from a full table: a failed build must leave nothing behind. */
		assert_int_equal(build(&T, "port-exclude 80", "route 10.0.0.0/8 fabric"), 0);
		memset(err, 'x', sizeof err);
		int rc = build(&T, c->env, c->text);
		if (rc != -1)
			fail_msg("case %d: rc %d, expected -1", (int)(c - err_cases), rc);
		if (strcmp(err, c->msg) != 0)
			fail_msg("case %d:\n  got      '%s'\n  expected '%s'", (int)(c - err_cases), err, c->msg);
		check_empty_table(&T);
	}

	/* A bad file after a good variable still empties the table. */
	assert_int_equal(build(&T, "route local shm;port-exclude 22", "route 10.0.0.0/8 rdma"), -1);
	assert_string_equal(err, "test.conf:1: unknown provider 'rdma' (expected shm, fabric or tcp)");
	check_empty_table(&T);

	/* Without a name, the text is called "config". */
	assert_int_equal(ssw_routes_build(&T, NULL, NULL, "\nroute x shm", err, sizeof err), -1);
	assert_string_equal(err, "config:2: bad address 'x' (expected an IPv4 or IPv6 address or CIDR, or 'local')");

	/* A long token is cut, and control characters can't break the line. */
	char line[300];
	snprintf(line, sizeof line, "route 10.0.0.0/8 %0200d\x1b[2J", 7);
	assert_int_equal(build(&T, NULL, line), -1);
	assert_null(strchr(err, '\x1b'));
	assert_non_null(strstr(err, "...'"));
	assert_true(strlen(err) < 200);
	assert_int_equal(build(&T, "route\x0b local shm", NULL), -1);
	assert_string_equal(err, "SOCKSWITCH_ROUTES rule 1: unknown keyword 'route?' (expected route or port-exclude)");
	assert_int_equal(ssw_routes_build(&T, NULL, "bad\nname", "bogus", err, sizeof err), -1);
	assert_string_equal(err, "bad?name:1: unknown keyword 'bogus' (expected route or port-exclude)");

	/* A small buffer gets a truncated message, and NULL means no message. */
	char small[8];
	assert_int_equal(ssw_routes_build(&T, NULL, "test.conf", "bogus", small, sizeof small), -1);
	assert_string_equal(small, "test.co");
	assert_int_equal(ssw_routes_build(&T, NULL, "test.conf", "bogus", NULL, 0), -1);
	check_empty_table(&T);
}

static void test_too_many_rules(void **state)
{
	(void)state;
	static char text[SSW_ROUTE_MAX_RULES * 32];
	size_t n = 0;
	for (int i = 0; i < SSW_ROUTE_MAX_RULES - 1; i++)
		n += (size_t)snprintf(text + n, sizeof text - n, "route 10.%d.0.0/16 fabric\n", i);
	assert_int_equal(build(&T, NULL, text), 0);
	assert_int_equal(T.nrules, SSW_ROUTE_MAX_RULES);
	assert_string_equal(T.rules[SSW_ROUTE_MAX_RULES - 1].origin, "built-in default");
	expect_route(&T, "10.126.0.1", T_FABRIC, "test.conf:127");
	expect_route(&T, "127.0.0.1", T_SHM, "built-in default");

	snprintf(text + n, sizeof text - n, "\nroute 11.0.0.0/8 shm\n");
	assert_int_equal(build(&T, NULL, text), -1);
	assert_string_equal(err, "test.conf:129: too many rules (max 127 besides the built-in default)");
	check_empty_table(&T);

	/* The limit counts the variable and the file together. */
	assert_int_equal(build(&T, "route 9.0.0.0/8 shm", text + strlen("route 10.0.0.0/16 fabric\n")), -1);
	assert_string_equal(err, "test.conf:128: too many rules (max 127 besides the built-in default)");
	assert_int_equal(build(&T, "route 9.0.0.0/8 shm", text + n + 1), 0);
}

/* ---- ssw_routes_load: environment and file ------------------------------------ */

static char tmpdir[64];

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void test_load(void **state)
{
	(void)state;
	char path[128], msg[256];
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test_route.XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	snprintf(path, sizeof path, "%s/sockswitch.conf", tmpdir);

	unsetenv("SOCKSWITCH_ROUTES");
	unsetenv("SOCKSWITCH_CONF");
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), 0);
	assert_int_equal(T.nrules, 1);
	assert_string_equal(T.rules[0].origin, "built-in default");

	const char *conf = "# test\nroute 10.0.0.0/8 tcp\nroute 11.0.0.0/8 fabric provider=verbs\nport-exclude 22\n";
	write_file(path, conf, strlen(conf));
	setenv("SOCKSWITCH_CONF", path, 1);
	setenv("SOCKSWITCH_ROUTES", "route 10.0.0.0/8 shm;port-exclude 5432", 1);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), 0);
	assert_int_equal(T.nrules, 4);
	expect_route(&T, "10.0.0.1", T_SHM, "SOCKSWITCH_ROUTES rule 1");
	snprintf(msg, sizeof msg, "%s:3", path);
	expect_route(&T, "11.0.0.1", T_FABRIC, msg);
	assert_true(ssw_route_port_excluded(&T, 22));
	assert_true(ssw_route_port_excluded(&T, 5432));

	/* An error in the file names the file and line. */
	const char *bad = "route local shm\n\nroute 10.0.0.0/8 rdma\n";
	write_file(path, bad, strlen(bad));
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), -1);
	snprintf(msg, sizeof msg, "%s:3: unknown provider 'rdma' (expected shm, fabric or tcp)", path);
	assert_string_equal(err, msg);
	check_empty_table(&T);

	/* Unreadable file: the table is emptied even though it was full before. */
	write_file(path, conf, strlen(conf));
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), 0);
	char missing[160];
	snprintf(missing, sizeof missing, "%s/nope.conf", tmpdir);
	setenv("SOCKSWITCH_CONF", missing, 1);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), -1);
	snprintf(msg, sizeof msg, "%s: cannot read: No such file or directory", missing);
	assert_string_equal(err, msg);
	check_empty_table(&T);

	setenv("SOCKSWITCH_CONF", tmpdir, 1);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), -1);
	snprintf(msg, sizeof msg, "%s: cannot read: is a directory, not a regular file", tmpdir);
	assert_string_equal(err, msg);
	check_empty_table(&T);

	/* A FIFO is refused without waiting for a writer (it would hang every
	 * program at its first socket call). */
	char fifo[160];
	snprintf(fifo, sizeof fifo, "%s/fifo.conf", tmpdir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	setenv("SOCKSWITCH_CONF", fifo, 1);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), -1);
	snprintf(msg, sizeof msg, "%s: cannot read: is a FIFO, not a regular file", fifo);
	assert_string_equal(err, msg);
	check_empty_table(&T);
	unlink(fifo);

	/* Exactly 1 MiB is accepted, one byte more is not. */
	size_t big = 1u << 20;
	char *buf = malloc(big + 1);
	assert_non_null(buf);
	memset(buf, ' ', big + 1);
	memcpy(buf, "route 12.0.0.0/8 fabric\n", 24);
	buf[big - 1] = '\n';
	setenv("SOCKSWITCH_CONF", path, 1);
	write_file(path, buf, big);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), 0);
	expect_route(&T, "12.0.0.1", T_FABRIC, NULL);
	write_file(path, buf, big + 1);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), -1);
	snprintf(msg, sizeof msg, "%s: cannot read: larger than 1 MiB (the limit)", path);
	assert_string_equal(err, msg);
	check_empty_table(&T);
	free(buf);

	/* A NUL byte would hide the rest of the file from the parser. */
	static const char with_nul[] = "route local shm\nroute 1\0.0.0.0 shm\nroute 10.0.0.0/8 rdma\n";
	write_file(path, with_nul, sizeof with_nul - 1);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), -1);
	snprintf(msg, sizeof msg, "%s:2: NUL byte in the file", path);
	assert_string_equal(err, msg);
	check_empty_table(&T);

	/* An error in the variable is reported even with a good file. */
	write_file(path, conf, strlen(conf));
	setenv("SOCKSWITCH_ROUTES", "route local shm;;route 10.0.0.0/33 shm", 1);
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), -1);
	assert_string_equal(err, "SOCKSWITCH_ROUTES rule 3: bad prefix length '/33' for IPv4");
	check_empty_table(&T);

	/* An empty SOCKSWITCH_CONF means no file. */
	setenv("SOCKSWITCH_CONF", "", 1);
	unsetenv("SOCKSWITCH_ROUTES");
	assert_int_equal(ssw_routes_load(&T, err, sizeof err), 0);
	assert_int_equal(T.nrules, 1);

	unsetenv("SOCKSWITCH_CONF");
	unlink(path);
	rmdir(tmpdir);
}

/* ---- local addresses ------------------------------------------------------------ */

static void test_local_loopback(void **state)
{
	(void)state;
	static const char *local[] = { "127.0.0.1", "127.0.0.2", "127.255.255.255", "127.5.5.5", "::1",
				       "::ffff:127.0.0.1", "::ffff:127.9.9.9", "0.0.0.0", "::", "::ffff:0.0.0.0" };
	for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
		if (!is_local(local[i]))
			fail_msg("%s should be local", local[i]);
	static const char *remote[] = { "8.8.8.8", "2001:db8::1", "::2", "::ffff:8.8.8.8", "128.0.0.1", "0.0.0.1" };
	for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++)
		if (is_local(remote[i]))
			fail_msg("%s should not be local", remote[i]);

	/* Loopback and unspecified addresses never need the interface list. */
	int before = __atomic_load_n(&getifaddrs_calls, __ATOMIC_RELAXED);
	wait_refresh();
	for (int i = 0; i < 100; i++)
		assert_true(is_local("127.0.0.1") && is_local("::1") && is_local("0.0.0.0"));
	assert_int_equal(__atomic_load_n(&getifaddrs_calls, __ATOMIC_RELAXED), before);
}

/* Every address this host really has is local and, by default, goes to shm. */
static void test_local_real_interfaces(void **state)
{
	(void)state;
	struct ifaddrs *list;
	if (getifaddrs(&list) != 0)
		skip();
	int checked = 0;
	char buf[INET6_ADDRSTRLEN];
	assert_int_equal(build(&T, NULL, NULL), 0);
	for (struct ifaddrs *i = list; i; i = i->ifa_next) {
		if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
		const void *a = i->ifa_addr->sa_family == AF_INET ? (void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
								  : (void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
		inet_ntop(i->ifa_addr->sa_family, a, buf, sizeof buf);
		if (!ssw_addr_is_local(i->ifa_addr, len))
			fail_msg("%s (%s) should be local", buf, i->ifa_name);
		int t;
		assert_non_null(ssw_route_lookup(&T, i->ifa_addr, len, &t));
		assert_int_equal(t, T_SHM);
		checked++;
	}
	freeifaddrs(list);
	print_message("checked %d interface addresses\n", checked);
}

/* What a wildcard listener listens on: the providers of this host's
 * addresses, each once, tcp never, by family. */
static void test_local_targets(void **state)
{
	(void)state;
	int t[8];
	set_fake(FAKE_A); /* eth0: 198.51.100.7, 2001:db8:feed::7 */
	wait_refresh();
	assert_int_equal(build(&T, NULL, NULL), 0);
	assert_int_equal(ssw_route_local_targets(&T, true, true, t, 8), 1);
	assert_int_equal(t[0], T_SHM);
	/* shm for local peers and fabric for remote ones, at once */
	assert_int_equal(build(&T, "route 198.51.100.0/24 fabric", NULL), 0);
	assert_int_equal(ssw_route_local_targets(&T, true, false, t, 8), 2);
	assert_int_equal(t[0], T_SHM);     /* 0.0.0.0, 127.0.0.1: `local` */
	assert_int_equal(t[1], T_FABRIC);  /* eth0's IPv4 address */
	assert_int_equal(ssw_route_local_targets(&T, false, true, t, 8), 1); /* no v6 fabric route */
	assert_int_equal(t[0], T_SHM);
	assert_int_equal(ssw_route_local_targets(&T, true, true, t, 1), 1);  /* bounded by max */
	/* a v6 route, and tcp for loopback: never a target */
	assert_int_equal(build(&T, "route 2001:db8:feed::/48 fabric;route 127.0.0.0/8 tcp;route ::1/128 tcp;"
				   "route 0.0.0.0/32 tcp;route ::/128 tcp", NULL), 0);
	assert_int_equal(ssw_route_local_targets(&T, false, true, t, 8), 1);
	assert_int_equal(t[0], T_FABRIC);
	assert_int_equal(ssw_route_local_targets(&T, true, false, t, 8), 1);
	assert_int_equal(t[0], T_SHM); /* 198.51.100.7 by `local` */
	/* everything tcp: nothing to listen on */
	assert_int_equal(build(&T, "route 0.0.0.0/0 tcp;route ::/0 tcp", NULL), 0);
	assert_int_equal(ssw_route_local_targets(&T, true, true, t, 8), 0);
	set_fake(FAKE_OFF);
	wait_refresh();
}

static void test_local_cache(void **state)
{
	(void)state;
	assert_int_equal(build(&T, NULL, NULL), 0);
	set_fake(FAKE_A);
	wait_refresh();
	__atomic_store_n(&getifaddrs_calls, 0, __ATOMIC_RELAXED);

	assert_true(is_local("198.51.100.7"));
	assert_true(is_local("2001:db8:feed::7"));
	assert_true(is_local("::ffff:198.51.100.7"));
	assert_false(is_local("198.51.100.8"));
	assert_false(is_local("2001:db8:feed::8"));
	expect_route(&T, "198.51.100.7", T_SHM, "built-in default");
	expect_route(&T, "2001:db8:feed::7", T_SHM, "built-in default");
	expect_route(&T, "198.51.100.8", SSW_TARGET_TCP, "");

	/* Cached: one getifaddrs for many lookups within the second. */
	for (int i = 0; i < 1000; i++)
		assert_false(is_local("198.51.100.8"));
	assert_int_equal(__atomic_load_n(&getifaddrs_calls, __ATOMIC_RELAXED), 1);

	/* A change shows after the refresh interval, not before. */
	set_fake(FAKE_B);
	assert_false(is_local("198.51.100.8"));
	wait_refresh();
	assert_true(is_local("198.51.100.8"));
	assert_true(is_local("2001:db8:feed::8"));
	assert_false(is_local("198.51.100.7"));
	assert_false(is_local("2001:db8:feed::7"));
	assert_int_equal(__atomic_load_n(&getifaddrs_calls, __ATOMIC_RELAXED), 2);

	/* getifaddrs failing keeps the last list, doesn't retry on every call, and
	 * leaves errno alone. */
	set_fake(FAKE_FAIL);
	wait_refresh();
	errno = 1234;
	assert_true(is_local("198.51.100.8"));
	assert_int_equal(errno, 1234);
	assert_true(is_local("127.0.0.1"));
	for (int i = 0; i < 100; i++)
		is_local("192.0.2.1");
	assert_int_equal(__atomic_load_n(&getifaddrs_calls, __ATOMIC_RELAXED), 3);
	expect_route(&T, "127.0.0.1", T_SHM, "built-in default");

	set_fake(FAKE_OFF);
	wait_refresh();
}

struct hammer {
	volatile int stop;
	int bad;
	long iters;
};

static void *hammer_thread(void *arg)
{
	struct hammer *h = arg;
	struct addr lo = mkaddr("127.0.0.1"), ext = mkaddr("198.51.100.7"), ext6 = mkaddr("2001:db8:feed::8");
	while (!__atomic_load_n(&h->stop, __ATOMIC_RELAXED)) {
		int t;
		if (!ssw_route_lookup(&T2, (struct sockaddr *)&lo.ss, lo.len, &t) || t != T_SHM)
			__atomic_add_fetch(&h->bad, 1, __ATOMIC_RELAXED);
		ssw_route_lookup(&T2, (struct sockaddr *)&ext.ss, ext.len, &t);
		ssw_addr_is_local((struct sockaddr *)&ext6.ss, ext6.len);
		__atomic_add_fetch(&h->iters, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* Lookups from many threads while the list changes: no crash (ASan/UBSan
 * build), loopback always local, still at most one refresh per second. */
static void test_local_concurrent(void **state)
{
	(void)state;
	assert_int_equal(build(&T2, NULL, NULL), 0);
	struct hammer h = { 0 };
	pthread_t th[4];
	set_fake(FAKE_A);
	__atomic_store_n(&getifaddrs_calls, 0, __ATOMIC_RELAXED);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, hammer_thread, &h), 0);
	for (int i = 0; i < 5; i++) {
		usleep(300 * 1000);
		/* Only the mode flips: the fake list itself is rewritten only while
		 * no thread can be reading it (see set_fake callers). */
		__atomic_store_n(&fake_mode, i % 2 ? FAKE_A : FAKE_FAIL, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&h.stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	int calls = __atomic_load_n(&getifaddrs_calls, __ATOMIC_RELAXED);
	print_message("%ld lookups in %.2fs, %d getifaddrs calls\n", h.iters, secs, calls);
	assert_int_equal(h.bad, 0);
	assert_true(h.iters > 100);
	/* Refreshes are at least a second apart (less the coarse clock's few ms of
	 * jitter), counting the one at the start. */
	assert_true(calls >= 1);
	assert_true(calls <= (int)(secs / 0.99) + 1);
	set_fake(FAKE_OFF);
	wait_refresh();
}

static void *slow_lookup(void *arg)
{
	(void)arg;
	is_local("192.0.2.55");
	return NULL;
}

/* A fork while another thread is inside the refresh must leave the child able
 * to refresh (a lock inherited held would freeze its view forever). */
static void test_local_fork(void **state)
{
	(void)state;
	set_fake(FAKE_SLOW_A);
	wait_refresh();
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, slow_lookup, NULL), 0);
	usleep(100 * 1000);  /* the thread is now in the 300 ms getifaddrs */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		set_fake(FAKE_B);
		wait_refresh();
		_exit(is_local("198.51.100.8") && !is_local("198.51.100.7") ? 0 : 1);
	}
	pthread_join(th, NULL);
	int status = 0;
	for (int i = 0; i < 100; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			break;
		if (i == 99) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fail_msg("child hung");
		}
		usleep(100 * 1000);
	}
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_true(is_local("198.51.100.7"));
	set_fake(FAKE_OFF);
	wait_refresh();
}

/* The very first lookup of a process must wait for the first interface list
 * rather than answer "remote" while another thread is building it.  Needs a
 * fresh process (the cache is never empty again), so the test re-executes
 * this binary in a mode that runs only this scenario. */
static void *first_fill_thread(void *arg)
{
	*(bool *)arg = is_local("198.51.100.7");
	return NULL;
}

static int first_fill_main(void)
{
	bool a = false;
	pthread_t th;
	set_fake(FAKE_SLOW_A);
	if (pthread_create(&th, NULL, first_fill_thread, &a) != 0)
		return 2;
	usleep(100 * 1000);  /* the thread is now in the 300 ms getifaddrs */
	bool b = is_local("198.51.100.7");
	pthread_join(th, NULL);
	int calls = __atomic_load_n(&getifaddrs_calls, __ATOMIC_RELAXED);
	if (!a || !b || calls != 1) {
		fprintf(stderr, "first fill: thread %d, main %d, %d getifaddrs calls\n", a, b, calls);
		return 1;
	}
	return 0;
}

static void test_local_first_fill(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv("TEST_ROUTE_FIRST_FILL", "1", 1);
		execl("/proc/self/exe", "test_route", (char *)NULL);
		_exit(127);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	if (getenv("TEST_ROUTE_FIRST_FILL"))
		return first_fill_main();

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_table),
		cmocka_unit_test(test_bad_sockaddr),
		cmocka_unit_test(test_env_beats_file),
		cmocka_unit_test(test_first_match_wins),
		cmocka_unit_test(test_catch_all_tcp),
		cmocka_unit_test(test_cidr_v4),
		cmocka_unit_test(test_cidr_v6),
		cmocka_unit_test(test_whitespace_and_comments),
		cmocka_unit_test(test_options),
		cmocka_unit_test(test_port_exclude),
		cmocka_unit_test(test_explain),
		cmocka_unit_test(test_origins),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_too_many_rules),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_local_loopback),
		cmocka_unit_test(test_local_real_interfaces),
		cmocka_unit_test(test_local_targets),
		cmocka_unit_test(test_local_cache),
		cmocka_unit_test(test_local_concurrent),
		cmocka_unit_test(test_local_fork),
		cmocka_unit_test(test_local_first_fill),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
