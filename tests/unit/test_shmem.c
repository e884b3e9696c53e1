/* test_shmem.c — the pool of kept shared mappings (common/shmem.c): a
 * mapping freed for reuse never reaches a child forked afterwards (it may
 * carry the parent's next connection), one handed out again after a fork
 * is inherited like any live connection, and reuse gives it back zeroed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sys.h"

#define SIZE (3 * 4096 + 4096 * 16) /* a size of this test's own: a class to itself */

/* Is address p inside a mapping of this process (/proc/self/maps)? */
static int mapped(const void *p)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int in = 0;
	if (!f)
		return -1;
	while (!in && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2)
			in = (unsigned long)p >= lo && (unsigned long)p < hi;
	}
	fclose(f);
	return in;
}

/* Forks; the child exits with fn(p); returns that status (99: a signal). */
static int in_child(int (*fn)(unsigned char *), unsigned char *p)
{
	pid_t pid = fork();
	if (pid == 0) {
		alarm(5);
		_exit(fn(p));
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static int child_has_none(unsigned char *p)
{
	return mapped(p) == 0 ? 0 : 1;
}

static int child_sees_it(unsigned char *p)
{
	return mapped(p) == 1 && p[100] == 0x5a ? 0 : 1;
}

static void test_kept_mapping_stays_out_of_children(void **state)
{
	(void)state;
	unsigned char *p = ssw_shared_alloc(SIZE, SIZE);
	assert_non_null(p);
	memset(p, 0xa5, 4096);
	ssw_shared_free(p, SIZE, true); /* kept */
	assert_int_equal(mapped(p), 1);  /* still ours */
	assert_int_equal(in_child(child_has_none, p), 0);
	/* handed out again: the same mapping, zeroed, and inherited now */
	unsigned char *q = ssw_shared_alloc(SIZE, 4096);
	assert_ptr_equal(q, p);
	for (int i = 0; i < 4096; i++)
		assert_int_equal(q[i], 0);
	q[100] = 0x5a;
	assert_int_equal(in_child(child_sees_it, q), 0);
	/* kept again after that fork: out of the next child too */
	ssw_shared_free(q, SIZE, true);
	assert_int_equal(in_child(child_has_none, q), 0);
	q = ssw_shared_alloc(SIZE, 4096);
	assert_ptr_equal(q, p);
	ssw_shared_free(q, SIZE, false); /* another process maps it: gone */
	assert_int_equal(mapped(q), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kept_mapping_stays_out_of_children),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
