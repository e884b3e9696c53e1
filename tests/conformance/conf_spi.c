/* conf_spi.c — conformance of the provider object itself: version, sized tables, the ops the
 * switch requires, and the optional configure/describe. */
#include "conf.h"

#include <errno.h>
#include <string.h>

/* Ops the switch calls without looking (as its registration checks them):
 * a provider lacking one cannot serve. */
#define REQUIRE(tbl, op)                                                                                               \
	do {                                                                                                           \
		if (!CONF_HAS(tbl, op))                                                                                \
			fail_msg("%s: required op %s missing (NULL or beyond the table's size)", P->name, #op);        \
	} while (0)

int conf_configure_rc = 1; /* conf_run's probe before init: 1 when there was none */
char conf_configure_err[256];

void conf_spi_tables(void **state)
{
	(void)state;
	assert_int_equal(P->spi_version, SSW_SPI_VERSION);
	assert_non_null(P->name);
	assert_true(P->name[0] != 0);
	assert_int_equal(P->caps & ~(uint32_t)(SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE | SSW_CAP_SHARED_CONTEXT), 0);
	assert_non_null(P->init);
	const struct ssw_conn_ops *c = P->conn;
	const struct ssw_msg_ops *m = P->msg;
	const struct ssw_rdma_ops *r = P->rdma;
	const struct ssw_progress_ops *g = P->progress;
	assert_non_null(c);
	assert_non_null(m);
	assert_non_null(g);
	/* `size` is really set: at least up to the required ops, not absurd */
	assert_true(c->size >= offsetof(struct ssw_conn_ops, ep_caps) + sizeof(void *) && c->size < 4096);
	assert_true(m->size >= offsetof(struct ssw_msg_ops, recv_done) + sizeof(void *) && m->size < 4096);
	assert_true(g->size >= offsetof(struct ssw_progress_ops, wake_ack) + sizeof(void *) && g->size < 4096);
	/* what the switch and the session call without looking first */
	REQUIRE(c, listen);
	REQUIRE(c, listener_fd);
	REQUIRE(c, accept);
	REQUIRE(c, listener_close);
	REQUIRE(c, connect);
	REQUIRE(c, connect_fd);
	REQUIRE(c, connect_complete);
	REQUIRE(c, close);
	REQUIRE(c, ep_caps);
	REQUIRE(m, max_msg);
	REQUIRE(m, window);
	REQUIRE(m, send);
	REQUIRE(m, recv_peek);
	REQUIRE(m, recv_done);
	REQUIRE(g, rx_ready);
	REQUIRE(g, arm);
	REQUIRE(g, wait_fds);
	REQUIRE(g, wake_ack);
	/* one-sided transfers offered: their ops, and poll_cq for completions */
	if (P->caps & (SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE)) {
		assert_non_null(r);
		assert_true(r->size >= sizeof(size_t) && r->size < 4096);
		REQUIRE(r, register_rdma_memory);
		REQUIRE(r, deregister_rdma_memory);
		if (P->caps & SSW_CAP_RDMA_READ)
			REQUIRE(r, rdma_read);
		if (P->caps & SSW_CAP_RDMA_WRITE)
			REQUIRE(r, rdma_write);
		REQUIRE(g, poll_cq);
	}
	print_message("optional ops present:%s%s%s%s%s%s%s%s%s%s%s%s\n", CONF_HAS(c, listener_ready) ? " listener_ready" : "",
		      CONF_HAS(c, peer_cred) ? " peer_cred" : "", CONF_HAS(c, peer_addr) ? " peer_addr" : "",
		      CONF_HAS(m, send_room) ? " send_room" : "", CONF_HAS(m, send_ctl) ? " send_ctl" : "",
		      CONF_HAS(m, send_reserve) ? " send_reserve/commit/flush" : "",
		      CONF_HAS(g, wake_leave) ? " wake_leave" : "", CONF_HAS(g, sleep) ? " sleep" : "",
		      CONF_HAS(g, peer_state) ? " peer_state" : "", CONF_HAS(g, note) ? " note" : "",
		      CONF_HAS(g, peer_tag) ? " peer_tag" : "",
		      P->configure ? " configure" : "");
}

/* configure refuses what it does not know, naming it; describe gives one line. */
void conf_configure_describe(void **state)
{
	(void)state;
	if (!P->configure && !P->describe)
		CONF_SKIP("configure and describe absent (optional)");
	if (P->describe) {
		const char *d = P->describe();
		assert_non_null(d);
		assert_true(d[0] != 0);
		assert_null(strchr(d, '\n')); /* one line */
		print_message("describe: %s\n", d);
	}
	if (P->configure) {
		/* probed by conf_run before init, as the configuration loader would */
		assert_int_equal(conf_configure_rc, -EINVAL);
		print_message("configure of an unknown key: %s\n", conf_configure_err);
		assert_non_null(strstr(conf_configure_err, CONF_BAD_KEY));
	}
}
