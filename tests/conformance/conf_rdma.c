/* conf_rdma.c — conformance of one-sided transfers: registrations, RDMA read
 * and write with completions reported now or later by poll_cq (in any order),
 * and descriptors that do not validate. */
#include "conf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define REGION (256u << 10)
#define NOPS 4

static void need_rdma(struct ssw_ep *c, struct ssw_ep *a)
{
	uint32_t want = SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE;
	if ((P->caps & want) != want) {
		P->conn->close(c, SSW_CLOSE_ORDERLY);
		P->conn->close(a, SSW_CLOSE_ORDERLY);
		CONF_SKIP("provider offers no SSW_CAP_RDMA_READ|WRITE (one-sided access is optional)");
	}
	/* offered by the provider, between two ends of this process: granted */
	assert_int_equal(P->conn->ep_caps(c) & want, want);
	assert_int_equal(P->conn->ep_caps(a) & want, want);
}

/* The descriptor travels as the session sends it: inside a message. */
static void pass_desc(struct ssw_ep *from, struct ssw_ep *to, const struct ssw_rdma_desc *d, struct ssw_rdma_desc *out)
{
	assert_true(d->len > 0 && d->len <= SSW_RDMA_DESC_MAX);
	assert_int_equal(conf_send(from, to, d, sizeof *d, 5000), 0);
	const void *m;
	size_t len;
	assert_int_equal(conf_wait(to, from, &m, &len, 5000), 0);
	assert_int_equal(len, sizeof *d);
	memcpy(out, m, sizeof *out);
	P->msg->recv_done(to);
}

struct op {
	int done;
	int status;
};

/* Every transfer started with ctx &ops[i] completes exactly once: at once
 * (0) or through poll_cq, in any order. */
/* One transfer (write or read) of len bytes at offset 0: its status, at
 * once or from its completion (bounded wait, the peer kicked meanwhile). */
static int one_status(struct ssw_ep *c, struct ssw_ep *a, int write, const struct iovec *v,
		      const struct ssw_rdma_desc *rd, size_t len)
{
	const struct ssw_rdma_ops *r = P->rdma;
	struct op o = { 0, 0 };
	int rc = write ? r->rdma_write(c, v, 1, rd, 0, len, &o) : r->rdma_read(c, v, 1, rd, 0, len, &o);
	if (rc != -EINPROGRESS)
		return rc;
	struct ssw_completion cq;
	int64_t end = conf_ms() + 5000;
	while (P->progress->poll_cq(c, &cq, 1) == 0) {
		assert_true(conf_ms() < end);
		conf_kick(a);
	}
	assert_ptr_equal(cq.ctx, &o);
	return cq.status;
}

static void complete_all(struct ssw_ep *ep, struct ssw_ep *peer, struct op *ops, const int *rc, int n)
{
	int pending = 0;
	for (int i = 0; i < n; i++) {
		assert_true(rc[i] == 0 || rc[i] == -EINPROGRESS);
		ops[i].done = rc[i] == 0;
		pending += rc[i] == -EINPROGRESS;
	}
	if (pending)
		print_message("%d of %d transfers completed later (poll_cq)\n", pending, n);
	if (conf_env->expect_async)
		assert_int_equal(pending, n);
	int64_t end = conf_ms() + 5000;
	while (pending) {
		assert_true(conf_ms() < end);
		struct ssw_completion cq[NOPS + 1];
		int k = P->progress->poll_cq(ep, cq, NOPS + 1);
		assert_true(k >= 0 && k <= NOPS + 1);
		for (int j = 0; j < k; j++) {
			struct op *o = cq[j].ctx;
			assert_true(o >= ops && o < ops + n); /* the caller's own ctx */
			assert_false(o->done);                /* once */
			o->done = 1;
			o->status = cq[j].status;
			pending--;
		}
		conf_kick(peer);
	}
	for (int i = 0; i < n; i++)
		assert_int_equal(ops[i].status, 0);
	/* nothing more to report */
	struct ssw_completion extra;
	assert_int_equal(P->progress->poll_cq(ep, &extra, 1), 0);
}

/* A pair with the acceptor's region of REGION bytes (filled from `seed`)
 * exposed for read and write, its descriptor at the connector, and a
 * local buffer there. */
struct rdma_rig {
	struct ssw_ep *c, *a;
	uint8_t *region, *local;
	struct ssw_rdma_desc d, rd;
};

static void rig_up(struct rdma_rig *g, int seed)
{
	conf_pair_new(NULL, &g->c, &g->a);
	need_rdma(g->c, g->a);
	g->region = malloc(REGION);
	g->local = malloc(REGION);
	assert_non_null(g->region);
	assert_non_null(g->local);
	conf_fill(g->region, REGION, seed);
	memset(&g->d, 0, sizeof g->d);
	assert_int_equal(P->rdma->register_rdma_memory(g->a, g->region, REGION,
						       SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE, &g->d), 0);
	pass_desc(g->a, g->c, &g->d, &g->rd);
}

/* NOPS transfers of REGION/NOPS each, reads and writes in turn, ctx
 * &ops[i] (ops[i].done set for those done at once); how many are in flight. */
static int start_mixed(struct rdma_rig *g, struct op *ops)
{
	const struct ssw_rdma_ops *r = P->rdma;
	int pending = 0;
	memset(ops, 0, sizeof *ops * NOPS);
	for (int i = 0; i < NOPS; i++) {
		struct iovec v = { g->local + i * (REGION / NOPS), REGION / NOPS };
		uint64_t off = (uint64_t)i * (REGION / NOPS);
		int rc = (i & 1) ? r->rdma_write(g->c, &v, 1, &g->rd, off, REGION / NOPS, &ops[i])
				 : r->rdma_read(g->c, &v, 1, &g->rd, off, REGION / NOPS, &ops[i]);
		assert_true(rc == 0 || rc == -EINPROGRESS);
		ops[i].done = rc == 0;
		pending += rc == -EINPROGRESS;
	}
	return pending;
}

void conf_rdma_read_write(void **state)
{
	(void)state;
	const struct ssw_rdma_ops *r = P->rdma;
	/* the acceptor exposes a region, the connector reads and writes it */
	struct rdma_rig g;
	rig_up(&g, 1);
	struct ssw_ep *c = g.c, *a = g.a;
	uint8_t *region = g.region, *local = g.local;
	memset(local, 0, REGION);
	struct ssw_rdma_desc d = g.d, rd = g.rd;
	struct ssw_mr mr;
	memset(&mr, 0, sizeof mr);
	bool reg = CONF_HAS(r, register_memory) && CONF_HAS(r, deregister_memory);
	if (reg) /* optional: the switch stubs a provider that needs none */
		assert_int_equal(r->register_memory(c, local, REGION, &mr), 0);

	/* reads: four pieces at odd offsets, the last one into two iovec parts */
	const uint64_t off[NOPS] = { 0, 4097, 65536 + 3, REGION - 70000 };
	const size_t len[NOPS] = { 4097, 1, 60000, 70000 };
	uint8_t *dst[NOPS] = { local, local + 8192, local + 16384, local + 100000 };
	struct op ops[NOPS];
	int rc[NOPS];
	memset(ops, 0, sizeof ops);
	for (int i = 0; i < NOPS; i++) {
		struct iovec v[2] = { { dst[i], len[i] / 2 }, { dst[i] + len[i] / 2, len[i] - len[i] / 2 } };
		rc[i] = r->rdma_read(c, v, 2, &rd, off[i], len[i], &ops[i]);
	}
	complete_all(c, a, ops, rc, NOPS);
	for (int i = 0; i < NOPS; i++)
		assert_memory_equal(dst[i], region + off[i], len[i]);

	/* writes: new content to the same pieces */
	conf_fill(local, REGION, 2);
	memset(ops, 0, sizeof ops);
	for (int i = 0; i < NOPS; i++) {
		struct iovec v = { local + off[i], len[i] };
		rc[i] = r->rdma_write(c, &v, 1, &rd, off[i], len[i], &ops[i]);
	}
	complete_all(c, a, ops, rc, NOPS);
	/* as the session does: a message after the completions, then look */
	conf_send_seq(c, a, 50, 8);
	conf_expect_seq(a, c, 50, 8);
	uint8_t *want = malloc(REGION);
	assert_non_null(want);
	conf_fill(want, REGION, 1);
	for (int i = 0; i < NOPS; i++)
		memcpy(want + off[i], local + off[i], len[i]);
	assert_memory_equal(region, want, REGION); /* written where asked, nowhere else */

	if (reg)
		r->deregister_memory(c, &mr);
	r->deregister_rdma_memory(a, &d);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
	free(region);
	free(local);
	free(want);
}

/* A descriptor, offset or length that does not validate: -EINVAL, the
 * peer's memory untouched, the endpoint still fine. */
void conf_rdma_bad_desc(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	need_rdma(c, a);
	const struct ssw_rdma_ops *r = P->rdma;
	enum { SZ = 8192 };
	uint8_t *region = malloc(SZ + 4096), *local = malloc(2 * SZ);
	assert_non_null(region);
	assert_non_null(local);
	memset(region, 0x5a, SZ + 4096);
	memset(local, 0xa5, 2 * SZ);
	struct ssw_rdma_desc d, rd;
	memset(&d, 0, sizeof d);
	assert_int_equal(r->register_rdma_memory(a, region, SZ, SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE, &d), 0);
	pass_desc(a, c, &d, &rd);
	struct {
		uint64_t off;
		size_t len;
		const char *what;
	} bad[] = {
		{ SZ + 1, 1, "offset past the end" },
		{ SZ - 10, 20, "length past the end" },
		{ 0, SZ + 1, "longer than the registration" },
		{ UINT64_MAX - 5, 10, "offset + length wraps" },
	};
	struct iovec v = { local, 2 * SZ };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		for (int w = 0; w < 2; w++) {
			int rc = w ? r->rdma_write(c, &v, 1, &rd, bad[i].off, bad[i].len, &bad[i])
				   : r->rdma_read(c, &v, 1, &rd, bad[i].off, bad[i].len, &bad[i]);
			if (rc != -EINVAL)
				print_message("rdma_%s, %s: %d\n", w ? "write" : "read", bad[i].what, rc);
			assert_int_equal(rc, -EINVAL);
		}
	}
	/* a descriptor cut short */
	struct ssw_rdma_desc cut = rd;
	cut.len = 0;
	assert_int_equal(r->rdma_read(c, &v, 1, &cut, 0, 1, NULL), -EINVAL);
	cut.len = SSW_RDMA_DESC_MAX + 1;
	assert_int_equal(r->rdma_read(c, &v, 1, &cut, 0, 1, NULL), -EINVAL);
	/* nothing was written beyond the registration, nothing completes late */
	for (size_t i = SZ; i < SZ + 4096; i++)
		assert_int_equal(region[i], 0x5a);
	struct ssw_completion extra;
	assert_int_equal(P->progress->poll_cq(c, &extra, 1), 0);
	/* and the endpoint carries on */
	conf_send_seq(c, a, 60, 600);
	conf_expect_seq(a, c, 60, 600);
	r->deregister_rdma_memory(a, &d);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
	free(region);
	free(local);
}

/* After deregister_rdma_memory the peer's copy of the descriptor is refused:
 * at once or by its completion, and the memory is left alone. */
void conf_rdma_deregistered(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	need_rdma(c, a);
	const struct ssw_rdma_ops *r = P->rdma;
	enum { SZ = 4096 };
	static uint8_t region[SZ], local[SZ];
	memset(region, 0x11, SZ);
	memset(local, 0x22, SZ);
	struct ssw_rdma_desc d, rd;
	memset(&d, 0, sizeof d);
	assert_int_equal(r->register_rdma_memory(a, region, SZ, SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE, &d), 0);
	pass_desc(a, c, &d, &rd);
	struct iovec v = { local, SZ };
	struct op ok = { 0, 0 };
	int rc0 = r->rdma_read(c, &v, 1, &rd, 0, SZ, &ok);
	complete_all(c, a, &ok, &rc0, 1); /* valid while registered */
	r->deregister_rdma_memory(a, &d);
	conf_send_seq(a, c, 51, 5); /* the peer learns of it the usual way: after a message */
	conf_expect_seq(c, a, 51, 5);
	memset(local, 0x33, SZ);
	for (int w = 0; w < 2; w++) {
		int rc = one_status(c, a, w, &v, &rd, SZ);
		print_message("rdma_%s with a deregistered descriptor: %d\n", w ? "write" : "read", rc);
		assert_true(rc < 0);
	}
	for (int i = 0; i < SZ; i++)
		assert_int_equal(region[i], 0x11);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* Closing an endpoint with transfers in flight cancels them: no completion
 * reaches freed memory, the peer sees the end, the peer's memory stays its own. */
void conf_rdma_close_pending(void **state)
{
	(void)state;
	struct rdma_rig g;
	rig_up(&g, 3);
	struct op ops[NOPS];
	int started = start_mixed(&g, ops);
	print_message("%d of %d transfers in flight at close\n", started, NOPS);
	P->conn->close(g.c, SSW_CLOSE_ABORT);
	free(g.local); /* nothing may write there any more */
	const void *m;
	size_t len;
	int rc = conf_wait(g.a, NULL, &m, &len, 3000);
	assert_true(rc == -ECONNRESET || rc == -EPIPE);
	P->rdma->deregister_rdma_memory(g.a, &g.d);
	P->conn->close(g.a, SSW_CLOSE_ABORT);
	free(g.region);
}

/* A local buffer that is not ours: -EFAULT (at once or by its completion),
 * no crash, the endpoint carries on. */
void conf_rdma_bad_local(void **state)
{
	(void)state;
	struct ssw_ep *c, *a;
	conf_pair_new(NULL, &c, &a);
	need_rdma(c, a);
	const struct ssw_rdma_ops *r = P->rdma;
	enum { SZ = 8192 };
	static uint8_t region[SZ];
	memset(region, 0x77, SZ);
	struct ssw_rdma_desc d, rd;
	memset(&d, 0, sizeof d);
	assert_int_equal(r->register_rdma_memory(a, region, SZ, SSW_CAP_RDMA_READ | SSW_CAP_RDMA_WRITE, &d), 0);
	pass_desc(a, c, &d, &rd);
	void *hole = mmap(NULL, SZ, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(hole != MAP_FAILED);
	struct iovec v = { hole, SZ };
	for (int w = 0; w < 2; w++) {
		int rc = one_status(c, a, w, &v, &rd, SZ);
		print_message("rdma_%s into memory that is not ours: %d\n", w ? "write" : "read", rc);
		assert_int_equal(rc, -EFAULT);
	}
	for (int i = 0; i < SZ; i++)
		assert_int_equal(region[i], 0x77);
	munmap(hole, SZ);
	conf_send_seq(c, a, 61, 61);
	conf_expect_seq(a, c, 61, 61);
	r->deregister_rdma_memory(a, &d);
	P->conn->close(c, SSW_CLOSE_ORDERLY);
	P->conn->close(a, SSW_CLOSE_ORDERLY);
}

/* Transfers in flight when the peer goes: each completes, once, with
 * whatever status (SPI poll_cq: "nothing stays pending for ever"). */
void conf_rdma_peer_gone(void **state)
{
	(void)state;
	struct rdma_rig g;
	rig_up(&g, 4);
	struct ssw_ep *c = g.c;
	struct op ops[NOPS];
	int pending = start_mixed(&g, ops);
	P->conn->close(g.a, SSW_CLOSE_ABORT);
	int failed = 0;
	for (int64_t end = conf_ms() + 5000; pending;) {
		assert_true(conf_ms() < end);
		struct ssw_completion cq[NOPS];
		int k = P->progress->poll_cq(c, cq, NOPS);
		assert_true(k >= 0 && k <= NOPS);
		for (int j = 0; j < k; j++) {
			struct op *o = cq[j].ctx;
			assert_true(o >= ops && o < ops + NOPS);
			assert_false(o->done);
			o->done = 1;
			failed += cq[j].status != 0;
			assert_true(cq[j].status <= 0);
			pending--;
		}
		if (!k)
			usleep(1000);
	}
	print_message("peer gone with transfers in flight: all completed, %d with an error\n", failed);
	P->conn->close(c, SSW_CLOSE_ABORT);
	free(g.region);
	free(g.local);
}
