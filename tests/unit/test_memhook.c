/* test_memhook.c — the memory hooks keep a registration cache from going
 * stale, through every way a mapping changes: munmap then a new mapping at
 * the same address, free() of a large block and a new one in its place,
 * realloc() that moves, madvise(DONTNEED), brk shrinking inside free(),
 * MAP_FIXED over a range, mremap, shmdt.
 *
 * The cache's registrations pin pages as an RDMA device does (regcache/
 * regpin.h), so a stale hit shows: the "transfer" reads the old pages.
 * Each case runs twice in the same process: with the hooks reporting to the
 * cache, where every byte must be the buffer's new content, and with the
 * callback removed (the mechanism disabled), where the case must see stale
 * bytes — otherwise it would not be testing anything. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "common/memhook.h"
#include "regcache/regcache.h"
#include "regcache/regpin.h"

#define LEN (256u << 10)

static const struct ssw_regcache_ops pin_ops = { ssw_pin_cache_reg, ssw_pin_cache_dereg, NULL };
static struct ssw_regcache *rc;
static uint8_t *seen;

/* "Send" len bytes at buf as a cached-registration transfer would: the
 * registration's pinned pages, read by the "device".  Returns the bytes
 * that differ from what buf holds now. */
static size_t send_stale(const void *buf, size_t len)
{
	struct ssw_reg *r;
	assert_int_equal(ssw_regcache_get(rc, (void *)buf, len, 0, &r), 0);
	struct ssw_pin *p;
	memcpy(&p, r->handle, sizeof p);
	assert_int_equal(ssw_pin_read(p, (uintptr_t)buf - r->start, seen, len), 0);
	ssw_regcache_put(rc, r);
	size_t bad = 0;
	for (size_t i = 0; i < len; i++)
		bad += seen[i] != ((const uint8_t *)buf)[i];
	return bad;
}

static int setup(void **state)
{
	(void)state;
	assert_int_equal(ssw_memhook_install(ssw_regcache_invalidate_all), 0);
	rc = ssw_regcache_new(64, 0, &pin_ops, NULL);
	seen = malloc(4u << 20);
	/* large blocks always by mmap, at the same threshold (glibc raises a
	 * dynamic one after each free, which would move them to the heap) */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	mallopt(M_TRIM_THRESHOLD, 64 << 10);
	return rc && seen ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	ssw_regcache_free(rc);
	free(seen);
	return 0;
}

/* Run `scenario` with the hooks on (expect 0 stale bytes) and off (expect
 * some, proving the case exercises a real change of mapping). */
typedef size_t (*scenario_fn)(void);
static void both_ways(const char *name, scenario_fn f)
{
	struct ssw_regcache_stats a, b;
	ssw_regcache_get_stats(rc, &a);
	size_t on = f();
	ssw_regcache_get_stats(rc, &b);
	ssw_regcache_flush(rc);
	assert_int_equal(ssw_memhook_install(NULL), 0); /* the mechanism disabled */
	size_t off = f();
	ssw_regcache_flush(rc);
	assert_int_equal(ssw_memhook_install(ssw_regcache_invalidate_all), 0);
	print_message("%-28s stale bytes with hooks: %zu, without: %zu (invalidations %llu)\n", name, on, off,
		      (unsigned long long)(b.invalidations - a.invalidations));
	assert_int_equal(on, 0);
	assert_true(b.invalidations > a.invalidations);
	assert_true(off > 0);
}

static size_t mmap_munmap_mmap(void)
{
	uint8_t *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	munmap(p, LEN);
	uint8_t *q = mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	assert_ptr_equal(q, p);
	memset(q, 'B', LEN);
	size_t bad = send_stale(q, LEN);
	munmap(q, LEN);
	return bad;
}

static size_t malloc_free_malloc(void)
{
	uint8_t *p = malloc(LEN);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	free(p); /* glibc unmaps it inside free(): __munmap */
	uint8_t *q = malloc(LEN);
	assert_ptr_equal(q, p); /* the same place, new pages */
	memset(q, 'B', LEN);
	size_t bad = send_stale(q, LEN);
	free(q);
	return bad;
}

static size_t realloc_moves(void)
{
	uint8_t *p = malloc(LEN);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	uintptr_t old = (uintptr_t)p; /* the address, not the block: realloc frees it */
	/* keep the next pages busy so that growing must move (mremap) */
	uint8_t *block = mmap((uint8_t *)p + LEN + 4096 * 2, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	uint8_t *q = realloc(p, 8 * LEN);
	assert_true((uintptr_t)q != old);
	assert_true(q[LEN - 1] == 'A');
	/* a new block where the old one was (its chunk started 16 bytes before) */
	uint8_t *r = mmap((void *)(old - 16), LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	assert_true((uintptr_t)r == old - 16);
	memset(r, 'C', LEN);
	size_t bad = send_stale(r + 16, LEN - 16);
	munmap(r, LEN);
	free(q);
	if (block != MAP_FAILED)
		munmap(block, 4096);
	return bad;
}

static size_t madvise_dontneed(void)
{
	uint8_t *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	madvise(p, LEN, MADV_DONTNEED); /* new zero pages at the next touch */
	memset(p, 'B', LEN);
	size_t bad = send_stale(p, LEN);
	munmap(p, LEN);
	return bad;
}

static size_t brk_shrink(void)
{
	/* a heap block below the mmap threshold, last in the heap */
	size_t n = 96u << 10;
	uint8_t *p = malloc(n);
	memset(p, 'A', n);
	assert_int_equal(send_stale(p, n), 0);
	free(p);
	malloc_trim(0); /* the heap's top goes back: __brk inside glibc */
	uint8_t *q = malloc(n);
	assert_ptr_equal(q, p);
	memset(q, 'B', n);
	size_t bad = send_stale(q, n);
	free(q);
	return bad;
}

static size_t map_fixed_over(void)
{
	uint8_t *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	assert_ptr_equal(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p);
	memset(p, 'B', LEN);
	size_t bad = send_stale(p, LEN);
	munmap(p, LEN);
	return bad;
}

static size_t mremap_away(void)
{
	uint8_t *p = mmap(NULL, 2 * LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(p + LEN, LEN);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	uint8_t *q = mremap(p, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, p + LEN);
	assert_ptr_equal(q, p + LEN);
	assert_ptr_equal(mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0), p);
	memset(p, 'B', LEN);
	size_t bad = send_stale(p, LEN);
	munmap(p, 2 * LEN);
	return bad;
}

static size_t shmdt_reattach(void)
{
	int a = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600), b = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
	assert_true(a >= 0 && b >= 0);
	uint8_t *p = shmat(a, NULL, 0);
	assert_true(p != (void *)-1);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	shmdt(p);
	uint8_t *q = shmat(b, p, 0);
	assert_ptr_equal(q, p);
	memset(q, 'B', LEN);
	size_t bad = send_stale(q, LEN);
	shmdt(q);
	shmctl(a, IPC_RMID, NULL);
	shmctl(b, IPC_RMID, NULL);
	return bad;
}

/* AddressSanitizer replaces glibc's malloc: its free() keeps blocks in
 * quarantine and never unmaps them, so the cases of glibc's own unmaps do
 * not exist there (the release build runs them). */
#if defined(__SANITIZE_ADDRESS__)
#define GLIBC_MALLOC_ONLY()                                                          \
	do {                                                                         \
		print_message("skipped: AddressSanitizer's malloc is not glibc's\n"); \
		skip();                                                              \
	} while (0)
#else
#define GLIBC_MALLOC_ONLY() ((void)0)
#endif

static void t_munmap(void **s) { (void)s; both_ways("munmap + mmap", mmap_munmap_mmap); }
static void t_free(void **s) { (void)s; GLIBC_MALLOC_ONLY(); both_ways("free + malloc (large)", malloc_free_malloc); }
static void t_realloc(void **s) { (void)s; GLIBC_MALLOC_ONLY(); both_ways("realloc that moves", realloc_moves); }
static void t_madvise(void **s) { (void)s; both_ways("madvise(DONTNEED)", madvise_dontneed); }
static void t_brk(void **s) { (void)s; GLIBC_MALLOC_ONLY(); both_ways("free + malloc_trim (brk)", brk_shrink); }
static void t_map_fixed(void **s) { (void)s; both_ways("MAP_FIXED over", map_fixed_over); }
static void t_mremap(void **s) { (void)s; both_ways("mremap away + mmap", mremap_away); }
static void t_shmdt(void **s) { (void)s; both_ways("shmdt + shmat", shmdt_reattach); }

/* Unrelated mappings leave the cache alone, and the hooks keep the C
 * library's answers (errno included). */
static void t_semantics(void **state)
{
	(void)state;
	uint8_t *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memset(p, 'A', LEN);
	assert_int_equal(send_stale(p, LEN), 0);
	struct ssw_regcache_stats a, b;
	ssw_regcache_get_stats(rc, &a);
	void *x = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(x, 4096);
	madvise(p, LEN, MADV_WILLNEED);
	assert_int_equal(send_stale(p, LEN), 0);
	ssw_regcache_get_stats(rc, &b);
	assert_int_equal(b.hits, a.hits + 1);
	assert_int_equal(b.invalidations, a.invalidations);
	munmap(p, LEN);

	errno = 0;
	assert_int_equal(munmap((void *)1, 4096), -1);
	assert_int_equal(errno, EINVAL);
	assert_ptr_equal(mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1), MAP_FAILED);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(madvise((void *)1, 4096, MADV_DONTNEED), -1);
	assert_int_equal(errno, EINVAL);
	void *cur = sbrk(0);
	assert_ptr_equal(sbrk(4096), cur);
	assert_ptr_equal(sbrk(-4096), (char *)cur + 4096);
	assert_ptr_equal(sbrk(0), cur);
	assert_int_equal(brk((void *)(UINTPTR_MAX - 4095)), -1); /* refused by the kernel: glibc's answer */
	assert_int_equal(errno, ENOMEM);
	assert_ptr_equal(sbrk(0), cur);
	assert_true(ssw_memhook_active());
	assert_true(ssw_memhook_reported() > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_munmap), cmocka_unit_test(t_free),	   cmocka_unit_test(t_realloc),
		cmocka_unit_test(t_madvise), cmocka_unit_test(t_brk),	   cmocka_unit_test(t_map_fixed),
		cmocka_unit_test(t_mremap),	cmocka_unit_test(t_shmdt),	   cmocka_unit_test(t_semantics),
	};
	alarm(60);
	return cmocka_run_group_tests(tests, setup, teardown);
}
