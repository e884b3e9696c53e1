/* test_shm_maps.c — the acceptor's table of kept segment mappings
 * (providers/shm/shm_maps.c): every entry found by its inode however the
 * hash buckets collide, whichever order entries leave in (the oldest
 * first when full); a dropped one is never found again and no chain runs
 * through a free slot (a server once hung walking one). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "providers/shm/shm_maps.h"

#include <stdlib.h>

#define N SHM_MAPS_CAP

static char mem[N + 64]; /* distinct non-NULL addresses */

static struct shm_kept_map entry(int k, uint64_t ino)
{
	return (struct shm_kept_map){ .p = &mem[k], .size = 4096, .dev = 7, .ino = ino, .pid = 100, .uid = 1, .t = (uint64_t)k };
}

/* Inodes spread at random (splitmix64: distinct for distinct k): 2,048 of
 * them in 1,024 buckets collide often, where the consecutive inodes of
 * memfds made one after another hardly ever do. */
static uint64_t ino_of(int k)
{
	uint64_t z = (uint64_t)k * 0x9e3779b97f4a7c15ull + 1;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void check_all(const char *present, const uint64_t *inos)
{
	int n = 0;
	for (int k = 0; k < N; k++) {
		int32_t i = shm_maps_find(7, inos[k], 4096, 100, 1);
		if (present[k]) {
			assert_true(i >= 0);
			assert_ptr_equal(shm_maps_at(i)->p, &mem[k]);
			n++;
		} else {
			assert_int_equal(i, -1);
		}
	}
	assert_int_equal(shm_maps_count(), n);
	assert_int_equal(shm_maps_chained(), n);
}

static void test_drops_in_any_order(void **state)
{
	(void)state;
	static char present[N];
	static uint64_t inos[N];
	struct shm_kept_map out;
	shm_maps_reset();
	srand(1);
	for (int k = 0; k < N; k++) {
		inos[k] = ino_of(k);
		struct shm_kept_map m = entry(k, inos[k]);
		shm_maps_add(&m, &out);
		assert_null(out.p);
		present[k] = 1;
	}
	check_all(present, inos);
	/* another connector's copy of the same segment is not it */
	assert_int_equal(shm_maps_find(7, inos[5], 4096, 101, 1), -1);
	for (int round = 0; round < 8; round++) {
		for (int d = 0; d < N / 8; d++) {
			int k = rand() % N;
			int32_t i = shm_maps_find(7, inos[k], 4096, 100, 1);
			if (present[k]) {
				shm_maps_drop(i);
				present[k] = 0;
			} else {
				assert_int_equal(i, -1);
			}
		}
		check_all(present, inos);
	}
	shm_maps_reset();
	assert_int_equal(shm_maps_count(), 0);
	assert_int_equal(shm_maps_chained(), 0);
}

static void test_full_evicts_oldest(void **state)
{
	(void)state;
	struct shm_kept_map out;
	shm_maps_reset();
	for (int k = 0; k < N; k++) {
		struct shm_kept_map m = entry(k, ino_of(k));
		shm_maps_add(&m, &out);
	}
	for (int k = 0; k < 64; k++) {
		struct shm_kept_map m = entry(N + k, ino_of(N + k));
		shm_maps_add(&m, &out);
		assert_ptr_equal(out.p, &mem[k]); /* the oldest left */
		assert_int_equal(shm_maps_find(7, ino_of(k), 4096, 100, 1), -1);
		assert_true(shm_maps_find(7, ino_of(N + k), 4096, 100, 1) >= 0);
		assert_int_equal(shm_maps_count(), N);
	}
	assert_int_equal(shm_maps_chained(), N);
	assert_ptr_equal(shm_maps_at(shm_maps_oldest())->p, &mem[64]);
	shm_maps_reset();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drops_in_any_order),
		cmocka_unit_test(test_full_evicts_oldest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
