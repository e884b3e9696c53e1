/* providers.c — the providers this build knows (one line each) and the registration checks of providers.h. */
#include "switch/route/providers.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* To add a provider: its folder under src/providers, exporting
 * `const struct ssw_provider ssw_provider_NAME` with .name = "NAME", and one
 * line here: BUILT(NAME) for one every build has, or a pair like fabric's
 * for one the build may leave out.  The build decides (cmake/fabric.cmake:
 * fabric needs libfabric's headers) and says so with SSW_WITH_FABRIC; a
 * provider left out keeps its name here without a table, so that a route
 * naming it falls back to kernel TCP with one warning (a configuration
 * shared by hosts with different builds) instead of being an error. */
#ifdef SSW_WITH_FABRIC
#define SSW_FABRIC(BUILT, LEFT_OUT) BUILT(fabric)
#else
#define SSW_FABRIC(BUILT, LEFT_OUT) LEFT_OUT(fabric)
#endif
#define SSW_PROVIDERS(BUILT, LEFT_OUT) \
	BUILT(shm)                      \
	SSW_FABRIC(BUILT, LEFT_OUT)

#define NONE(n)
#define DECLARE(n) extern const struct ssw_provider ssw_provider_##n __attribute__((visibility("hidden")));
SSW_PROVIDERS(DECLARE, NONE)
#define ROW(n) { #n, &ssw_provider_##n },
#define ABSENT(n) { #n, NULL },
const struct ssw_registered ssw_registry[] = { SSW_PROVIDERS(ROW, ABSENT) };
const int ssw_registry_count = (int)(sizeof ssw_registry / sizeof ssw_registry[0]);
_Static_assert(sizeof ssw_registry / sizeof ssw_registry[0] <= SSW_REGISTRY_MAX, "registry size");

/* The build's facts, also kept in the library file: `sockswitch doctor`
 * reads them from the library it would preload (cli/doctor.c). */
#define NAME(n) " " #n
#ifdef SSW_WITH_FABRIC
#define LEFT_OUT_LINE ""
#else
#ifndef SSW_FABRIC_LEFT_OUT
#define SSW_FABRIC_LEFT_OUT "not configured"
#endif
#define LEFT_OUT_LINE "; left out: fabric (" SSW_FABRIC_LEFT_OUT ")"
#endif
__attribute__((used)) const char ssw_build_facts[] =
	SSW_BUILD_FACTS_TAG "providers built in:" SSW_PROVIDERS(NAME, NONE) LEFT_OUT_LINE;

int ssw_registry_find(const char *name, size_t len)
{
	for (int i = 0; i < ssw_registry_count; i++)
		if (strlen(ssw_registry[i].name) == len && memcmp(ssw_registry[i].name, name, len) == 0)
			return i;
	return -1;
}

void ssw_registry_names(char *buf, size_t len)
{
	size_t n = 0;
	if (!len)
		return;
	buf[0] = '\0';
	for (int i = 0; i < ssw_registry_count && n < len; i++) {
		int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", ssw_registry[i].name);
		if (w < 0)
			break;
		n += (size_t)w;
	}
}

/* ---- stubs for ops nothing may find missing ------------------------------ */

static int stub_register(struct ssw_ep *ep, void *addr, size_t len, struct ssw_mr *mr)
{
	(void)ep, (void)addr, (void)len, (void)mr;
	return -ENOSYS;
}

static void stub_deregister(struct ssw_ep *ep, struct ssw_mr *mr)
{
	(void)ep, (void)mr;
}

/* -ENOBUFS and -EPERM are what provider.h tells the session to answer by
 * copying through messages. */
static int stub_register_rdma(struct ssw_ep *ep, void *addr, size_t len, uint32_t access,
			      struct ssw_rdma_desc *desc)
{
	(void)ep, (void)addr, (void)len, (void)access, (void)desc;
	return -ENOBUFS;
}

static void stub_deregister_rdma(struct ssw_ep *ep, const struct ssw_rdma_desc *desc)
{
	(void)ep, (void)desc;
}

static int stub_rdma(struct ssw_ep *ep, const struct iovec *local, int iovcnt, const struct ssw_rdma_desc *desc,
		     uint64_t offset, size_t len, void *ctx)
{
	(void)ep, (void)local, (void)iovcnt, (void)desc, (void)offset, (void)len, (void)ctx;
	return -EPERM;
}

static int stub_poll_cq(struct ssw_ep *ep, struct ssw_completion *c, int n)
{
	(void)ep, (void)c, (void)n;
	return 0;
}

/* ---- checks ---------------------------------------------------------------- */

struct op {
	const char *name;
	size_t off;
};
#define OP(T, f) { #f, offsetof(struct T, f) }

/* What the switch and the session call without looking first. */
static const struct op conn_required[] = {
	OP(ssw_conn_ops, listen),      OP(ssw_conn_ops, listener_fd), OP(ssw_conn_ops, accept),
	OP(ssw_conn_ops, listener_close), OP(ssw_conn_ops, connect), OP(ssw_conn_ops, connect_fd),
	OP(ssw_conn_ops, connect_complete), OP(ssw_conn_ops, close), OP(ssw_conn_ops, ep_caps),
};
static const struct op msg_required[] = {
	OP(ssw_msg_ops, max_msg), OP(ssw_msg_ops, window), OP(ssw_msg_ops, send), OP(ssw_msg_ops, recv_peek),
	OP(ssw_msg_ops, recv_done),
};
static const struct op progress_required[] = {
	OP(ssw_progress_ops, rx_ready), OP(ssw_progress_ops, arm), OP(ssw_progress_ops, wait_fds),
	OP(ssw_progress_ops, wake_ack),
};
/* Optional, but all or none (provider.h). */
static const struct op conn_exec_group[] = {
	OP(ssw_conn_ops, listener_export), OP(ssw_conn_ops, listener_import),
};
static const struct op conn_handover_group[] = {
	OP(ssw_conn_ops, ep_export), OP(ssw_conn_ops, ep_import),
};
static const struct op conn_move_group[] = {
	OP(ssw_conn_ops, listener_name), OP(ssw_conn_ops, local_addr),
};
static const struct op msg_zcopy_group[] = {
	OP(ssw_msg_ops, send_reserve), OP(ssw_msg_ops, send_commit), OP(ssw_msg_ops, flush),
};
/* Required for a provider offering one-sided transfers. */
static const struct op rdma_read_required[] = {
	OP(ssw_rdma_ops, register_rdma_memory), OP(ssw_rdma_ops, deregister_rdma_memory), OP(ssw_rdma_ops, rdma_read),
};
static const struct op rdma_write_required[] = {
	OP(ssw_rdma_ops, register_rdma_memory), OP(ssw_rdma_ops, deregister_rdma_memory), OP(ssw_rdma_ops, rdma_write),
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static bool present(const void *copy, size_t off)
{
	void *fn;
	memcpy(&fn, (const char *)copy + off, sizeof fn);
	return fn != NULL;
}

/* Copy a table: fields its size does not cover stay NULL.  A newer
 * provider's larger table is cut to the ops this switch knows. */
static int copy_table(const char *what, const void *raw, void *copy, size_t full, char *why, size_t len)
{
	memset(copy, 0, full);
	if (!raw)
		return snprintf(why, len, "no %s table", what), -1;
	size_t sz;
	memcpy(&sz, raw, sizeof sz);
	if (sz < sizeof(size_t))
		return snprintf(why, len, "%s table size %zu is not a table size", what, sz), -1;
	memcpy(copy, raw, sz < full ? sz : full);
	memcpy(copy, &full, sizeof full);
	return 0;
}

static int need(const char *what, const void *raw, const void *copy, const struct op *ops, size_t n,
		const char *because, char *why, size_t len)
{
	for (size_t i = 0; i < n; i++) {
		if (present(copy, ops[i].off))
			continue;
		size_t sz;
		memcpy(&sz, raw, sizeof sz);
		if (ops[i].off + sizeof(void *) > sz)
			snprintf(why, len, "%s op %s missing: the table's size (%zu bytes) ends before it%s", what,
				 ops[i].name, sz, because);
		else
			snprintf(why, len, "%s op %s missing (NULL)%s", what, ops[i].name, because);
		return -1;
	}
	return 0;
}

static int all_or_none(const char *what, const void *copy, const struct op *ops, size_t n, char *why, size_t len)
{
	size_t have = 0;
	for (size_t i = 0; i < n; i++)
		have += present(copy, ops[i].off);
	if (have == 0 || have == n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!present(copy, ops[i].off)) {
			char names[128];
			size_t k = 0;
			for (size_t j = 0; j < n && k < sizeof names; j++)
				k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", ops[j].name,
						      j + 2 < n ? ", " : j + 1 < n ? " and " : "");
			snprintf(why, len, "%s op %s missing: %s go together", what, ops[i].name, names);
			return -1;
		}
	return 0;
}

int ssw_provider_check(const struct ssw_provider *raw, struct ssw_provider_copy *out, char *why, size_t len)
{
	char tmp[8];
	if (!why || !len)
		why = tmp, len = sizeof tmp;
	why[0] = '\0';
	memset(out, 0, sizeof *out);
	if (!raw)
		return snprintf(why, len, "not built"), -1;
	if (raw->spi_version != SSW_SPI_VERSION)
		return snprintf(why, len, "SPI version %u, this switch speaks %u", raw->spi_version, SSW_SPI_VERSION), -1;
	if (!raw->name || !raw->name[0])
		return snprintf(why, len, "no name"), -1;
	if (!raw->init)
		return snprintf(why, len, "no init op"), -1;
	if (copy_table("conn", raw->conn, &out->conn, sizeof out->conn, why, len) ||
	    copy_table("msg", raw->msg, &out->msg, sizeof out->msg, why, len) ||
	    copy_table("progress", raw->progress, &out->progress, sizeof out->progress, why, len))
		return -1;
	/* a provider without one-sided transfers may have no rdma table */
	if (raw->rdma && copy_table("rdma", raw->rdma, &out->rdma, sizeof out->rdma, why, len))
		return -1;
	static const char none[] = "";
	if (need("conn", raw->conn, &out->conn, conn_required, N(conn_required), none, why, len) ||
	    need("msg", raw->msg, &out->msg, msg_required, N(msg_required), none, why, len) ||
	    need("progress", raw->progress, &out->progress, progress_required, N(progress_required), none, why, len) ||
	    all_or_none("conn", &out->conn, conn_exec_group, N(conn_exec_group), why, len) ||
	    all_or_none("conn", &out->conn, conn_handover_group, N(conn_handover_group), why, len) ||
	    all_or_none("conn", &out->conn, conn_move_group, N(conn_move_group), why, len) ||
	    all_or_none("msg", &out->msg, msg_zcopy_group, N(msg_zcopy_group), why, len))
		return -1;
	if (raw->caps & (SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE)) {
		if (!raw->rdma)
			return snprintf(why, len, "offers RDMA but has no rdma table"), -1;
		if ((raw->caps & SSW_CAP_RDMA_READ) &&
		    need("rdma", raw->rdma, &out->rdma, rdma_read_required, N(rdma_read_required),
			 " (the provider offers SSW_CAP_RDMA_READ)", why, len))
			return -1;
		if ((raw->caps & SSW_CAP_RDMA_WRITE) &&
		    need("rdma", raw->rdma, &out->rdma, rdma_write_required, N(rdma_write_required),
			 " (the provider offers SSW_CAP_RDMA_WRITE)", why, len))
			return -1;
		/* deferred completions come back through poll_cq */
		static const struct op cq[] = { OP(ssw_progress_ops, poll_cq) };
		if (need("progress", raw->progress, &out->progress, cq, 1, " (the provider offers RDMA)", why, len))
			return -1;
	}
	out->rdma.size = sizeof out->rdma;
	if (!out->rdma.register_memory)
		out->rdma.register_memory = stub_register;
	if (!out->rdma.deregister_memory)
		out->rdma.deregister_memory = stub_deregister;
	if (!out->rdma.register_rdma_memory)
		out->rdma.register_rdma_memory = stub_register_rdma;
	if (!out->rdma.deregister_rdma_memory)
		out->rdma.deregister_rdma_memory = stub_deregister_rdma;
	if (!out->rdma.rdma_read)
		out->rdma.rdma_read = stub_rdma;
	if (!out->rdma.rdma_write)
		out->rdma.rdma_write = stub_rdma;
	if (!out->progress.poll_cq)
		out->progress.poll_cq = stub_poll_cq;
	out->p = *raw;
	out->p.conn = &out->conn;
	out->p.msg = &out->msg;
	out->p.rdma = &out->rdma;
	out->p.progress = &out->progress;
	return 0;
}
