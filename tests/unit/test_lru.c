/* test_lru.c — the slot order of common/lru.c: oldest first, taken at the
 * newest end until full, dropped from anywhere, touched to the newest end,
 * reset to empty; a zeroed set works from its first use. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/lru.h"

#define CAP 5
static int32_t prev_[CAP], next_[CAP];

/* The slots oldest to newest, as a string of digits; checked both ways. */
static const char *order(const struct ssw_lru *l, char *buf)
{
	int n = 0;
	for (int32_t i = ssw_lru_oldest(l); i >= 0; i = ssw_lru_newer(l, i))
		buf[n++] = (char)('0' + i);
	buf[n] = 0;
	int k = n;
	for (int32_t i = ssw_lru_newest(l); i >= 0; i = ssw_lru_older(l, i))
		assert_int_equal(buf[--k], '0' + i);
	assert_int_equal(k, 0);
	assert_int_equal(n, l->n);
	return buf;
}

static void test_take_drop_touch(void **state)
{
	(void)state;
	struct ssw_lru l = SSW_LRU(prev_, next_);
	char b[CAP + 1];
	assert_int_equal(ssw_lru_oldest(&l), -1); /* zeroed: empty */
	for (int i = 0; i < CAP; i++)
		assert_int_equal(ssw_lru_take(&l), i);
	assert_int_equal(ssw_lru_take(&l), -1); /* full */
	assert_string_equal(order(&l, b), "01234");
	ssw_lru_drop(&l, 2);
	ssw_lru_drop(&l, 0);
	ssw_lru_drop(&l, 4);
	assert_string_equal(order(&l, b), "13");
	ssw_lru_touch(&l, 1);
	assert_string_equal(order(&l, b), "31");
	int32_t a = ssw_lru_take(&l), c = ssw_lru_take(&l), d = ssw_lru_take(&l);
	assert_true(a >= 0 && c >= 0 && d >= 0 && a != c && c != d && a != d);
	assert_int_equal(ssw_lru_take(&l), -1);
	assert_int_equal(l.n, CAP);
	ssw_lru_touch(&l, 3); /* the oldest to the newest end */
	assert_int_equal(ssw_lru_newest(&l), 3);
	assert_int_equal(ssw_lru_oldest(&l), 1);
	ssw_lru_reset(&l);
	assert_string_equal(order(&l, b), "");
	for (int i = 0; i < CAP; i++)
		assert_true(ssw_lru_take(&l) >= 0);
	assert_int_equal(ssw_lru_take(&l), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_drop_touch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
