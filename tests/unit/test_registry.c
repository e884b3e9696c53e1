/* test_registry.c — the provider registry: broken providers (missing op, short table, wrong version) are refused with a message naming the problem; route options reach configure. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "switch/route/providers.h"
#include "switch/route/route.h"

extern const struct ssw_provider ssw_provider_shm;

/* A provider built from shm's ops, to be broken one way per test. */
static struct ssw_conn_ops conn;
static struct ssw_msg_ops msg;
static struct ssw_rdma_ops rdma;
static struct ssw_progress_ops progress;
static struct ssw_provider prov;
static struct ssw_provider_copy copy;
static char why[256];

static int setup(void **state)
{
	(void)state;
	conn = *ssw_provider_shm.conn;
	msg = *ssw_provider_shm.msg;
	rdma = *ssw_provider_shm.rdma;
	progress = *ssw_provider_shm.progress;
	prov = ssw_provider_shm;
	prov.name = "fake";
	prov.conn = &conn;
	prov.msg = &msg;
	prov.rdma = &rdma;
	prov.progress = &progress;
	memset(why, 0, sizeof why);
	return 0;
}

static void refused(const char *expect)
{
	assert_int_equal(ssw_provider_check(&prov, &copy, why, sizeof why), -1);
	if (!strstr(why, expect))
		fail_msg("message '%s' does not say '%s'", why, expect);
}

static void test_shm_accepted(void **state)
{
	(void)state;
	assert_int_equal(ssw_provider_check(&ssw_provider_shm, &copy, why, sizeof why), 0);
	assert_string_equal(why, "");
	assert_ptr_equal(copy.p.conn, &copy.conn);
	assert_int_equal(copy.conn.size, sizeof copy.conn);
	assert_ptr_equal(copy.conn.connect, ssw_provider_shm.conn->connect);
	assert_ptr_equal(copy.msg.send_reserve, ssw_provider_shm.msg->send_reserve);
	assert_string_equal(copy.p.name, "shm");
}

static void test_wrong_version(void **state)
{
	(void)state;
	prov.spi_version = SSW_SPI_VERSION + 1;
	refused("SPI version");
}

static void test_missing_required_ops(void **state)
{
	(void)state;
	/* each op the switch or session calls without looking */
	static const struct { size_t off; int table; const char *msg; } ops[] = {
		{ offsetof(struct ssw_conn_ops, connect_fd), 0, "conn op connect_fd missing (NULL)" },
		{ offsetof(struct ssw_conn_ops, listener_fd), 0, "conn op listener_fd missing (NULL)" },
		{ offsetof(struct ssw_conn_ops, listener_close), 0, "conn op listener_close missing (NULL)" },
		{ offsetof(struct ssw_conn_ops, ep_caps), 0, "conn op ep_caps missing (NULL)" },
		{ offsetof(struct ssw_conn_ops, accept), 0, "conn op accept missing (NULL)" },
		{ offsetof(struct ssw_msg_ops, max_msg), 1, "msg op max_msg missing (NULL)" },
		{ offsetof(struct ssw_msg_ops, window), 1, "msg op window missing (NULL)" },
		{ offsetof(struct ssw_msg_ops, recv_done), 1, "msg op recv_done missing (NULL)" },
		{ offsetof(struct ssw_progress_ops, wake_ack), 2, "progress op wake_ack missing (NULL)" },
		{ offsetof(struct ssw_progress_ops, arm), 2, "progress op arm missing (NULL)" },
	};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		setup(NULL);
		void *t = ops[i].table == 0 ? (void *)&conn : ops[i].table == 1 ? (void *)&msg : (void *)&progress;
		memset((char *)t + ops[i].off, 0, sizeof(void *));
		refused(ops[i].msg);
	}
	setup(NULL);
	prov.init = NULL;
	refused("no init op");
	setup(NULL);
	prov.msg = NULL;
	refused("no msg table");
}

static void test_short_table(void **state)
{
	(void)state;
	/* a table whose size ends before a required op: the op is absent even
	 * though the memory past the size holds a pointer */
	conn.size = offsetof(struct ssw_conn_ops, ep_caps);
	refused("conn op ep_caps missing: the table's size");
	setup(NULL);
	msg.size = offsetof(struct ssw_msg_ops, recv_peek);
	refused("msg op recv_peek missing: the table's size");
	setup(NULL);
	conn.size = 3;
	refused("not a table size");
}

static void test_short_table_optional_ops_absent(void **state)
{
	(void)state;
	/* everything required is covered; the optional ops past the size must
	 * read as NULL in the copy the switch calls through */
	conn.size = offsetof(struct ssw_conn_ops, listener_ready);
	msg.size = offsetof(struct ssw_msg_ops, send_room);
	progress.size = offsetof(struct ssw_progress_ops, wake_leave);
	assert_int_equal(ssw_provider_check(&prov, &copy, why, sizeof why), 0);
	assert_null(copy.conn.listener_ready);
	assert_null(copy.conn.peer_cred);
	assert_null(copy.conn.peer_addr);
	assert_null(copy.msg.send_room);
	assert_null(copy.msg.send_reserve);
	assert_null(copy.progress.sleep);
	assert_null(copy.progress.note);
	assert_null(copy.progress.peer_tag);
	assert_non_null(copy.conn.ep_caps);
	assert_int_equal(copy.conn.size, sizeof copy.conn);
}

static void test_groups_all_or_none(void **state)
{
	(void)state;
	msg.flush = NULL;
	refused("msg op flush missing: send_reserve, send_commit and flush go together");
	setup(NULL);
	msg.send_reserve = NULL;
	msg.send_commit = NULL;
	msg.flush = NULL;
	assert_int_equal(ssw_provider_check(&prov, &copy, why, sizeof why), 0);
}

static void test_rdma_caps_need_ops(void **state)
{
	(void)state;
	rdma.rdma_read = NULL;
	refused("rdma op rdma_read missing (NULL) (the provider offers SSW_CAP_RDMA_READ)");
	setup(NULL);
	rdma.rdma_write = NULL;
	prov.caps &= ~(uint32_t)SSW_CAP_RDMA_READ;
	refused("rdma op rdma_write missing (NULL) (the provider offers SSW_CAP_RDMA_WRITE)");
	setup(NULL);
	prov.rdma = NULL;
	refused("offers RDMA but has no rdma table");
}

static void test_no_rdma_gets_stubs(void **state)
{
	(void)state;
	prov.caps = 0;
	prov.rdma = NULL;
	progress.poll_cq = NULL;
	assert_int_equal(ssw_provider_check(&prov, &copy, why, sizeof why), 0);
	struct iovec v = { why, 1 };
	struct ssw_rdma_desc d = { 0 };
	struct ssw_completion c[2];
	assert_int_equal(copy.rdma.rdma_read(NULL, &v, 1, &d, 0, 1, NULL), -EPERM);
	assert_int_equal(copy.rdma.rdma_write(NULL, &v, 1, &d, 0, 1, NULL), -EPERM);
	assert_int_equal(copy.rdma.register_rdma_memory(NULL, why, 1, SSW_CAP_RDMA_READ, &d), -ENOBUFS);
	copy.rdma.deregister_rdma_memory(NULL, &d);
	assert_int_equal(copy.progress.poll_cq(NULL, c, 2), 0);
	assert_int_equal(copy.rdma.size, sizeof copy.rdma);
}

static void test_registry_names(void **state)
{
	(void)state;
	int i = ssw_registry_find("shm", 3);
	assert_true(i >= 0);
	assert_ptr_equal(ssw_registry[i].prov, &ssw_provider_shm);
	assert_true(ssw_registry_find("fabric", 6) >= 0);
	assert_int_equal(ssw_registry_find("sh", 2), -1);
	assert_int_equal(ssw_registry_find("tcp", 3), -1); /* built in, not a provider */
	char names[128];
	ssw_registry_names(names, sizeof names);
	assert_non_null(strstr(names, "shm"));
	assert_non_null(strstr(names, "fabric"));
	/* every registered provider calls itself by its registry name */
	for (int k = 0; k < ssw_registry_count; k++)
		if (ssw_registry[k].prov)
			assert_string_equal(ssw_registry[k].prov->name, ssw_registry[k].name);
}

/* The registry has the providers the build has, whoever links it (this
 * test links ssw_core as a plain archive: a provider referenced weakly
 * would read as absent here), and names the one it left out. */
static void test_registry_is_the_build(void **state)
{
	(void)state;
	const struct ssw_provider *fab = ssw_registry[ssw_registry_find("fabric", 6)].prov;
#ifdef SSW_WITH_FABRIC
	assert_non_null(fab);
	assert_string_equal(SSW_BUILD_FACTS, "providers built in: shm fabric");
#else
	assert_null(fab);
	assert_string_equal(SSW_BUILD_FACTS, "providers built in: shm; left out: fabric (" SSW_FABRIC_LEFT_OUT ")");
#endif
	assert_non_null(ssw_registry[ssw_registry_find("shm", 3)].prov);
	assert_memory_equal(ssw_build_facts, SSW_BUILD_FACTS_TAG, sizeof SSW_BUILD_FACTS_TAG - 1);
}

/* ---- route options reach configure ---------------------------------------- */

static char seen[4][96];
static int nseen;

static int fake_configure(const char *key, const char *value, char *err, size_t errlen)
{
	if (nseen < 4)
		snprintf(seen[nseen++], sizeof seen[0], "%s=%s", key, value);
	if (!strcmp(key, "provider") && (!strcmp(value, "tcp") || !strcmp(value, "verbs")))
		return 0;
	if (!strcmp(key, "provider"))
		return snprintf(err, errlen, "provider=%s: expected tcp or verbs", value), -EINVAL;
	if (!strcmp(key, "port")) /* a message that names the provider itself */
		return snprintf(err, errlen, "fake option port=%s: expected a number", value), -EINVAL;
	snprintf(err, errlen, "unknown option '%s'", key);
	return -EINVAL;
}

static void test_route_options(void **state)
{
	(void)state;
	static struct ssw_routes T;
	char err[512];
	prov.configure = fake_configure;
	nseen = 0;
	assert_int_equal(ssw_routes_build(&T, NULL, "test.conf", "route local shm\nroute 10.0.0.0/8 fabric provider=tcp\n"
				     "route 11.0.0.0/8 fabric provider=rdma\nroute 12.0.0.0/8 fabric mtu=9000\n"
				     "route 13.0.0.0/8 fabric port=x\n",
				     err, sizeof err), 0);
	assert_int_equal(ssw_route_configure(&T.rules[0], &prov, err, sizeof err), 0);
	assert_int_equal(nseen, 0);
	assert_int_equal(ssw_route_configure(&T.rules[1], &prov, err, sizeof err), 0);
	assert_int_equal(nseen, 1);
	assert_string_equal(seen[0], "provider=tcp");
	assert_int_equal(ssw_route_configure(&T.rules[2], &prov, err, sizeof err), -1);
	assert_string_equal(err, "test.conf:3: provider fake: provider=rdma: expected tcp or verbs");
	assert_int_equal(ssw_route_configure(&T.rules[3], &prov, err, sizeof err), -1);
	assert_string_equal(err, "test.conf:4: provider fake: unknown option 'mtu'");
	assert_int_equal(ssw_route_configure(&T.rules[4], &prov, err, sizeof err), -1);
	assert_string_equal(err, "test.conf:5: fake option port=x: expected a number");
	/* a provider not built: options unchecked, its route is kernel TCP anyway */
	assert_int_equal(ssw_route_configure(&T.rules[3], NULL, err, sizeof err), 0);
	/* a provider that takes no options */
	prov.configure = NULL;
	assert_int_equal(ssw_route_configure(&T.rules[1], &prov, err, sizeof err), -1);
	assert_string_equal(err, "test.conf:2: provider fake takes no options (got 'provider=tcp')");
	/* tcp takes none either */
	assert_int_equal(ssw_routes_build(&T, "route 10.0.0.0/8 tcp x=1", NULL, NULL, err, sizeof err), 0);
	assert_int_equal(ssw_route_configure(&T.rules[0], NULL, err, sizeof err), -1);
	assert_string_equal(err, "SOCKSWITCH_ROUTES rule 1: tcp takes no options (got 'x=1')");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_shm_accepted, setup),
		cmocka_unit_test_setup(test_wrong_version, setup),
		cmocka_unit_test_setup(test_missing_required_ops, setup),
		cmocka_unit_test_setup(test_short_table, setup),
		cmocka_unit_test_setup(test_short_table_optional_ops_absent, setup),
		cmocka_unit_test_setup(test_groups_all_or_none, setup),
		cmocka_unit_test_setup(test_rdma_caps_need_ops, setup),
		cmocka_unit_test_setup(test_no_rdma_gets_stubs, setup),
		cmocka_unit_test_setup(test_registry_names, setup),
		cmocka_unit_test(test_registry_is_the_build),
		cmocka_unit_test_setup(test_route_options, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
