/* test_fabric_mrc.c — the fabric provider's registration cache (fab_mrc.c)
 * over libfabric's tcp provider on loopback, with the memory hooks live as
 * in a process under the switch:
 *  - one buffer exposed again and again: one registration of its pages
 *    (the cache's), none after the first, and a fresh key each exposure;
 *  - after deregistration the peer's old descriptor is refused at once,
 *    while the pages stay registered in the cache (seed 002);
 *  - pinned pages (SOCKSWITCH_FAULT=pin, as RDMA hardware holds them): a
 *    buffer unmapped and mapped again at the same address with new content
 *    sends the new content, and, with the hooks' callback removed, the old
 *    one (so the case tests what it claims);
 *  - the cache stays within SOCKSWITCH_REGCACHE_MAX, and is empty once the
 *    domain's last connection closed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sockswitch/provider.h>

#include "common/memhook.h"
#include "common/params.h"
#include "regcache/regcache.h"
#include "session/session.h"
#include "common/sys.h"
#include "fabric_pair.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MB (1u << 20)

static int base_port;

/* Read len bytes of the peer's desc into dst, to completion: 0 or the error. */
static int read_desc(struct pair *p, const struct ssw_rdma_desc *d, void *dst, size_t len)
{
	struct iovec v = { dst, len };
	int ctx;
	int rc = P->rdma->rdma_read(p->c, &v, 1, d, 0, len, &ctx);
	if (rc != -EINPROGRESS)
		return rc;
	struct ssw_completion c;
	for (uint64_t t0 = ssw_now_ns(); ssw_now_ns() - t0 < 5000000000ull;) {
		if (P->progress->poll_cq(p->c, &c, 1) == 1) {
			assert_ptr_equal(c.ctx, &ctx);
			return c.status;
		}
		P->progress->peer_state(p->s, 1, NULL); /* the target's progress (tcp) */
		usleep(100);
	}
	fail_msg("rdma_read never completed");
	return -ETIMEDOUT;
}

static struct ssw_regcache_stats totals(void)
{
	struct ssw_regcache_stats t;
	ssw_regcache_totals(&t);
	return t;
}

static void test_repeat_sends_one_registration(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 1);
	uint8_t *buf = malloc(MB), *got = malloc(MB);
	struct ssw_regcache_stats t0 = totals();
	uint64_t keys[10];
	struct ssw_rdma_desc d;
	for (int i = 0; i < 10; i++) {
		memset(buf, 'a' + i, MB);
		assert_int_equal(P->rdma->register_rdma_memory(p.s, buf, MB, SSW_CAP_RDMA_READ, &d), 0);
		memcpy(&keys[i], d.data + 24, sizeof keys[i]); /* fab_rdesc.key */
		assert_int_equal(read_desc(&p, &d, got, MB), 0);
		assert_memory_equal(got, buf, MB);
		P->rdma->deregister_rdma_memory(p.s, &d);
		for (int j = 0; j < i; j++)
			assert_true(keys[j] != keys[i]); /* a key is never handed out twice */
	}
	struct ssw_regcache_stats t1 = totals();
	print_message("10 exposures of one 1 MiB buffer: %llu registration(s) of its pages, %llu hits\n",
		      (unsigned long long)(t1.registrations - t0.registrations), (unsigned long long)(t1.hits - t0.hits));
	assert_int_equal(t1.registrations - t0.registrations, 1);
	assert_int_equal(t1.hits - t0.hits, 9);
	assert_true(t1.entries >= 1);

	/* the last descriptor, deregistered: refused at once (the peer's
	 * provider resets that connection), the pages still registered */
	memset(buf, 'Z', MB);
	int rc = read_desc(&p, &d, got, MB);
	print_message("a read with the deregistered descriptor: %d\n", rc);
	assert_true(rc < 0);
	assert_true(memchr(got, 'Z', MB) == NULL);
	assert_true(totals().entries >= 1);
	free_pair(&p);
	free(buf);
	free(got);
	/* the domain's last connection closed: nothing stays registered */
	assert_int_equal(totals().entries, 0);
}

static void test_bounded(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 2);
	enum { N = 8 };
	uint8_t *b[N];
	struct ssw_regcache_stats t0 = totals();
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < N; i++) {
			if (!round) /* apart: buffers sharing a page would merge into one entry */
				b[i] = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			struct ssw_rdma_desc d;
			assert_int_equal(P->rdma->register_rdma_memory(p.s, b[i], MB, SSW_CAP_RDMA_READ, &d), 0);
			P->rdma->deregister_rdma_memory(p.s, &d);
			struct ssw_regcache_stats t = totals();
			/* SOCKSWITCH_REGCACHE_MAX=4M (main) */
			assert_true(t.bytes <= 4 * MB);
		}
	struct ssw_regcache_stats t1 = totals();
	print_message("16 exposures of 8 buffers of 1 MiB, 4 MiB cache: %llu registrations, %llu evictions\n",
		      (unsigned long long)(t1.registrations - t0.registrations),
		      (unsigned long long)(t1.evictions - t0.evictions));
	assert_true(t1.evictions - t0.evictions >= N);
	assert_int_equal(t1.registrations - t0.registrations, 2 * N); /* LRU: a cyclic pattern never hits */
	free_pair(&p);
	for (int i = 0; i < N; i++)
		munmap(b[i], MB);
	assert_int_equal(totals().entries, 0);
}

/* One stale-page round: a mapping at `at` filled with 'A' exposed, unmapped,
 * a new one there filled with 'B' exposed: how many bytes the peer read
 * that are not 'B'. */
static size_t stale_round(struct pair *p, uint8_t *at, uint8_t *got)
{
	struct ssw_rdma_desc d;
	uint8_t *a = mmap(at, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	assert_ptr_equal(a, at);
	memset(a, 'A', MB);
	assert_int_equal(P->rdma->register_rdma_memory(p->s, a, MB, SSW_CAP_RDMA_READ, &d), 0);
	assert_int_equal(read_desc(p, &d, got, MB), 0);
	assert_memory_equal(got, a, MB); /* pinned pages read what the process wrote */
	P->rdma->deregister_rdma_memory(p->s, &d);
	munmap(a, MB);
	uint8_t *b = mmap(at, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	assert_ptr_equal(b, at);
	memset(b, 'B', MB);
	assert_int_equal(P->rdma->register_rdma_memory(p->s, b, MB, SSW_CAP_RDMA_READ, &d), 0);
	assert_int_equal(read_desc(p, &d, got, MB), 0);
	P->rdma->deregister_rdma_memory(p->s, &d);
	munmap(b, MB);
	size_t bad = 0;
	for (size_t i = 0; i < MB; i++)
		bad += got[i] != 'B';
	return bad;
}

static void test_stale_pages(void **st)
{
	(void)st;
	struct pair p;
	make_pair(&p, base_port + 3);
	uint8_t *got = malloc(MB);
	uint8_t *at = mmap(NULL, MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(at, MB); /* an address free for the rounds */
	size_t on = stale_round(&p, at, got);
	assert_int_equal(ssw_memhook_install(NULL), 0); /* the mechanism disabled */
	size_t off = stale_round(&p, at, got);
	assert_int_equal(ssw_memhook_install(ssw_regcache_invalidate_all), 0);
	print_message("1 MiB unmapped and mapped again: %zu stale bytes with the hooks, %zu without\n", on, off);
	assert_int_equal(on, 0);
	assert_int_equal(off, MB);
	free_pair(&p);
	free(got);
}

int main(void)
{
	char err[160];
	base_port = 31000 + (int)(getpid() % 2000) * 10;
	/* as the library does at load: hooks before any cache exists */
	setenv("SOCKSWITCH_FAULT", "pin", 1);
	setenv("SOCKSWITCH_REGCACHE_MAX", "4M", 1);
	ssw_params_load();
	if (ssw_memhook_install(ssw_regcache_invalidate_all) != 0) {
		fprintf(stderr, "SKIP: no memory hooks here\n");
		return 77;
	}
	ssw_regcache_set_monitored(true);
	if (P->configure("provider", "tcp", err, sizeof err) || P->configure("port-offset", "10000", err, sizeof err) ||
	    P->init() != 0) {
		fprintf(stderr, "fabric provider unusable: %s\n", err);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_repeat_sends_one_registration),
		cmocka_unit_test(test_bounded),
		cmocka_unit_test(test_stale_pages),
	};
	alarm(100);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
