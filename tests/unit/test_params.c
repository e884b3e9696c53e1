/* test_params.c — the settings table: every entry well formed, each type
 * parsed strictly, one message shape naming the variable, value and what is
 * accepted, and what a rejected value leads to. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/params.h"
#include "common/waitpol.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

static int parse(enum ssw_param_id id, const char *text, struct ssw_param_value *v)
{
	return ssw_param_parse(&ssw_params[id], text, v, err, sizeof err);
}

static void test_table_well_formed(void **state)
{
	(void)state;
	for (int i = 0; i < SSW_P_COUNT; i++) {
		const struct ssw_param *p = &ssw_params[i];
		assert_non_null(p->name);
		assert_int_equal(strncmp(p->name, "SOCKSWITCH_", 11), 0);
		assert_true(p->help && *p->help && p->def && *p->def && p->users && *p->users);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(p->name, ssw_params[j].name);
		if (p->type == SSW_PT_CHOICE) {
			int n = 0;
			while (p->choices[n])
				n++;
			assert_true(n >= 2 && p->dchoice >= -1 && p->dchoice < n);
			if (p->dchoice >= 0)
				assert_string_equal(p->choices[p->dchoice], p->def);
		}
		/* a default outside the range is a sentinel ("off"), documented as such */
		if ((p->type == SSW_PT_NUM || p->type == SSW_PT_BYTES) && (p->dnum < p->lo || p->dnum > p->hi))
			assert_non_null(strstr(p->def, "off"));
	}
}

static void test_numbers(void **state)
{
	(void)state;
	struct ssw_param_value v;
	assert_int_equal(parse(SSW_P_SPIN_US, "0", &v), 0);
	assert_true(v.set && !v.invalid && v.num == 0);
	assert_int_equal(parse(SSW_P_SPIN_US, "100000", &v), 0);
	assert_int_equal(v.num, 100000);
	/* unset and empty: the default, not "set" */
	assert_int_equal(parse(SSW_P_SPIN_US, NULL, &v), 0);
	assert_true(!v.set && v.num == 50);
	assert_int_equal(parse(SSW_P_SPIN_US, "", &v), 0);
	assert_true(!v.set && v.num == 50);
	static const char *const bad[] = { "abc", "-1", " 5", "5 ", "+5", "5x", "0x10", "100001", "99999999999999999999999", "1K" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(parse(SSW_P_SPIN_US, bad[i], &v), -1);
		/* rejected: the default stands */
		assert_true(v.set && v.invalid && v.num == 50);
		char want[128];
		snprintf(want, sizeof want, "SOCKSWITCH_SPIN_US=%s: expected a number from 0 to 100000", bad[i]);
		assert_string_equal(err, want);
	}
}

static void test_bytes(void **state)
{
	(void)state;
	struct ssw_param_value v;
	assert_int_equal(parse(SSW_P_RNDV_THRESHOLD, "4096", &v), 0);
	assert_int_equal(v.num, 4096);
	assert_int_equal(parse(SSW_P_RNDV_THRESHOLD, "64K", &v), 0);
	assert_int_equal(v.num, 65536);
	assert_int_equal(parse(SSW_P_RNDV_THRESHOLD, "1m", &v), 0);
	assert_int_equal(v.num, 1u << 20);
	assert_int_equal(parse(SSW_P_RNDV_THRESHOLD, "1G", &v), 0);
	assert_int_equal(v.num, 1u << 30);
	static const char *const bad[] = { "4095", "2G", "1T", "1KB", "K", "64 K", "99999999999999G", "-4096" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(parse(SSW_P_RNDV_THRESHOLD, bad[i], &v), -1);
		assert_true(v.invalid && v.num == 4u << 20); /* the default stands */
	}
	/* the ring: a power of two in range */
	assert_int_equal(parse(SSW_P_SHM_RING, "16K", &v), 0);
	assert_int_equal(v.num, 16384);
	assert_int_equal(parse(SSW_P_SHM_RING, "64M", &v), 0);
	assert_int_equal(parse(SSW_P_SHM_RING, "1000000", &v), -1);
	assert_int_equal(parse(SSW_P_SHM_RING, "8K", &v), -1);
	assert_int_equal(parse(SSW_P_SHM_RING, "128M", &v), -1);
	assert_int_equal(parse(SSW_P_SHM_RING, "garbage", &v), -1);
	assert_int_equal(v.num, 512u << 10);
	assert_string_equal(err, "SOCKSWITCH_SHM_RING=garbage: expected a power of two from 16384 to 67108864 "
				 "(bytes; K, M, G: KiB, MiB, GiB)");
}

static void test_choices(void **state)
{
	(void)state;
	struct ssw_param_value v;
	assert_int_equal(parse(SSW_P_LOG, "INFO", &v), 0); /* levels ignore case */
	assert_int_equal(v.choice, 2);
	assert_int_equal(parse(SSW_P_LOG, "verbose", &v), -1);
	assert_int_equal(v.choice, 1);
	assert_string_equal(err, "SOCKSWITCH_LOG=verbose: expected error, warn, info or debug");
	assert_int_equal(parse(SSW_P_WAIT, "fast", &v), -1);
	assert_string_equal(err, "SOCKSWITCH_WAIT=fast: expected auto, spin, yield or sleep");
	assert_int_equal(parse(SSW_P_WAIT, "yield", &v), 0);
	assert_int_equal(v.choice, SSW_WAITMODE_YIELD); /* the policy takes the index as its mode */
	assert_int_equal(parse(SSW_P_WAIT, "sleep", &v), 0);
	assert_int_equal(v.choice, SSW_WAITMODE_SLEEP);
	assert_int_equal(parse(SSW_P_CMA, "abc", &v), -1);
	assert_string_equal(err, "SOCKSWITCH_CMA=abc: expected 0 or 1");
	assert_int_equal(v.choice, 1);
	assert_int_equal(parse(SSW_P_CMA, "0", &v), 0);
	assert_int_equal(v.choice, 0);
	assert_int_equal(parse(SSW_P_FAULT, NULL, &v), 0);
	assert_int_equal(v.choice, -1);
}

static void test_paths_and_quoting(void **state)
{
	(void)state;
	struct ssw_param_value v;
	assert_int_equal(parse(SSW_P_STAT_DIR, "/run/ssw", &v), 0);
	assert_string_equal(v.str, "/run/ssw");
	assert_int_equal(parse(SSW_P_STAT_DIR, "run/ssw", &v), -1);
	assert_null(v.str);
	assert_string_equal(err, "SOCKSWITCH_STAT_DIR=run/ssw: expected an absolute path shorter than PATH_MAX");
	assert_int_equal(parse(SSW_P_LOG_FILE, "rel.log", &v), 0);
	static char long_path[PATH_MAX + 10];
	memset(long_path, 'a', sizeof long_path - 1);
	assert_int_equal(parse(SSW_P_LOG_FILE, long_path, &v), -1);
	/* the value is quoted back shortened, with no control byte */
	assert_true(strlen(err) < 200);
	assert_non_null(strstr(err, "aaa..."));
	assert_int_equal(parse(SSW_P_WAIT, "a\033[2Jb\n", &v), -1);
	assert_string_equal(err, "SOCKSWITCH_WAIT=a?[2Jb?: expected auto, spin, yield or sleep");
}

static void test_load_and_consequence(void **state)
{
	(void)state;
	for (int i = 0; i < SSW_P_COUNT; i++)
		unsetenv(ssw_params[i].name);
	assert_int_equal(ssw_params_load(), 0);
	assert_int_equal(ssw_params_first_refusal(), -1);
	/* a rejected level: the default, said so */
	setenv("SOCKSWITCH_LOG", "verbose", 1);
	assert_int_equal(ssw_params_load(), 1);
	assert_int_equal(ssw_params_first_refusal(), -1);
	char line[512];
	ssw_param_problem(SSW_P_LOG, line, sizeof line);
	assert_string_equal(line, "SOCKSWITCH_LOG=verbose: expected error, warn, info or debug; using the default (warn)");
	/* a rejected data-path setting: the switch stays off */
	setenv("SOCKSWITCH_CMA", "abc", 1);
	assert_int_equal(ssw_params_load(), 2);
	assert_int_equal(ssw_params_first_refusal(), SSW_P_CMA);
	ssw_param_problem(SSW_P_CMA, line, sizeof line);
	assert_string_equal(line, "SOCKSWITCH_CMA=abc: expected 0 or 1; switch off, using kernel TCP");
	/* a setting of the command line tool only never turns the library off */
	unsetenv("SOCKSWITCH_CMA");
	setenv("SOCKSWITCH_LIB", "", 1);
	char long_path[PATH_MAX + 10];
	memset(long_path, 'b', sizeof long_path - 1);
	long_path[sizeof long_path - 1] = '\0';
	setenv("SOCKSWITCH_LIB", long_path, 1);
	assert_int_equal(ssw_params_load(), 2);
	assert_int_equal(ssw_params_first_refusal(), -1);
	assert_null(ssw_param_str(SSW_P_LIB));
	assert_non_null(ssw_param_error(SSW_P_LIB));
	unsetenv("SOCKSWITCH_LIB");
	unsetenv("SOCKSWITCH_LOG");
	assert_int_equal(ssw_params_load(), 0);
	assert_null(ssw_param_error(SSW_P_LOG));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_well_formed),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_choices),
		cmocka_unit_test(test_paths_and_quoting),
		cmocka_unit_test(test_load_and_consequence),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
