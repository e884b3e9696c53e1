/* test_waitshare.c — the user's shared wait-policy page (waitshare.c): two
 * attaches see one page; a segment that is not the user's own 0600 page of
 * the right size and layout is refused (the process then decides alone);
 * what the page says is bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sys.h"
#include "common/waitpol.h"

static int key_n;

/* A key of this test run, removed at the end of each test. */
static int test_key(void)
{
	return 0x7e5b0000 | ((getpid() & 0xfff) << 4) | (key_n++ & 0xf);
}

static void remove_key(int key)
{
	int id = shmget(key, 0, 0);
	if (id >= 0)
		shmctl(id, IPC_RMID, NULL);
}

static void test_two_attaches_share_one_page(void **st)
{
	(void)st;
	int key = test_key();
	struct ssw_wait_share *a = ssw_wait_share_attach_key(key), *b = ssw_wait_share_attach_key(key);
	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	uint64_t now = ssw_now_ns();
	assert_int_equal(ssw_wait_share_until(b, now), 0);
	ssw_wait_share_set(a, now + 20000000, 20000000);
	assert_int_equal(ssw_wait_share_until(b, now), now + 20000000);
	assert_int_equal(ssw_wait_share_off(b), 20000000);
	shmdt(a);
	shmdt(b);
	remove_key(key);
}

/* Further ahead than the longest pause (another time namespace's clock,
 * junk written by a process of the user): counts as nothing. */
static void test_values_are_bounded(void **st)
{
	(void)st;
	int key = test_key();
	struct ssw_wait_share *a = ssw_wait_share_attach_key(key);
	assert_non_null(a);
	uint64_t now = ssw_now_ns();
	ssw_wait_share_set(a, now + 10 * SSW_SPIN_HOG_OFF_NS, UINT64_MAX);
	assert_int_equal(ssw_wait_share_until(a, now), 0);
	assert_int_equal(ssw_wait_share_off(a), SSW_SPIN_HOG_OFF_NS);
	shmdt(a);
	remove_key(key);
}

/* A segment made under the key with another size, or readable by others:
 * not used. */
static void test_wrong_size_or_mode_refused(void **st)
{
	(void)st;
	int k1 = test_key(), k2 = test_key();
	assert_true(shmget(k1, 8192, IPC_CREAT | IPC_EXCL | 0600) >= 0);
	assert_true(shmget(k2, 4096, IPC_CREAT | IPC_EXCL | 0644) >= 0);
	assert_null(ssw_wait_share_attach_key(k1));
	assert_null(ssw_wait_share_attach_key(k2));
	remove_key(k1);
	remove_key(k2);
}

/* Another layout (another version of the library wrote it): not used. */
static void test_other_layout_refused(void **st)
{
	(void)st;
	int key = test_key();
	int id = shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0600);
	assert_true(id >= 0);
	uint32_t *p = shmat(id, NULL, 0);
	assert_true(p != (void *)-1);
	p[0] = 0x12345678;
	p[1] = 1;
	assert_null(ssw_wait_share_attach_key(key));
	p[0] = 0x57504f4cu; /* our magic, another version */
	p[1] = 99;
	assert_null(ssw_wait_share_attach_key(key));
	shmdt(p);
	remove_key(key);
}

/* Another user made the segment first under the key (squatting it, to
 * steer this user's processes): refused, even by root, who could attach. */
static void test_other_owner_refused(void **st)
{
	(void)st;
	if (geteuid() != 0)
		skip();
	int key = test_key();
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(2);
		_exit(shmget(key, 4096, IPC_CREAT | IPC_EXCL | 0600) >= 0 ? 0 : 1);
	}
	int status = -1;
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_null(ssw_wait_share_attach_key(key));
	remove_key(key);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_attaches_share_one_page),
		cmocka_unit_test(test_values_are_bounded),
		cmocka_unit_test(test_wrong_size_or_mode_refused),
		cmocka_unit_test(test_other_layout_refused),
		cmocka_unit_test(test_other_owner_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
