/* test_safefile.c — files named by settings: regular only, no blocking on
 * a FIFO, bounded reads, and no following of a link or file another user
 * planted in a sticky world-writable directory (whatever the sysctls say). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/safefile.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64], why[256];

static void path_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/test_safefile.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_types(void **state)
{
	(void)state;
	char p[128];
	path_in(p, sizeof p, "fifo");
	assert_int_equal(mkfifo(p, 0600), 0);
	/* neither mode waits for the other end */
	assert_int_equal(ssw_file_open(p, SSW_FILE_READ, why, sizeof why), -1);
	assert_string_equal(why, "is a FIFO, not a regular file");
	assert_int_equal(ssw_file_open(p, SSW_FILE_APPEND, why, sizeof why), -1);
	assert_string_equal(why, "is a FIFO, not a regular file");
	assert_int_equal(ssw_file_open("/dev/null", SSW_FILE_APPEND, why, sizeof why), -1);
	assert_string_equal(why, "is a character device, not a regular file");
	assert_int_equal(ssw_file_open(dir, SSW_FILE_READ, why, sizeof why), -1);
	assert_string_equal(why, "is a directory, not a regular file");
	char slash[80];
	snprintf(slash, sizeof slash, "%s/", dir);
	assert_int_equal(ssw_file_open(slash, SSW_FILE_APPEND, why, sizeof why), -1);
	path_in(p, sizeof p, "nope/x");
	assert_int_equal(ssw_file_open(p, SSW_FILE_APPEND, why, sizeof why), -1);
	assert_string_equal(why, "No such file or directory");
	/* a link to a FIFO is a FIFO */
	char l[128];
	path_in(p, sizeof p, "fifo");
	path_in(l, sizeof l, "link-to-fifo");
	assert_int_equal(symlink(p, l), 0);
	assert_int_equal(ssw_file_open(l, SSW_FILE_READ, why, sizeof why), -1);
	assert_string_equal(why, "is a FIFO, not a regular file");
}

static void test_append_and_read(void **state)
{
	(void)state;
	char p[128], l[128];
	path_in(p, sizeof p, "log");
	int fd = ssw_file_open(p, SSW_FILE_APPEND, why, sizeof why);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "one\n", 4), 4);
	close(fd);
	/* our own link, in a directory of ours: followed */
	path_in(l, sizeof l, "log-link");
	assert_int_equal(symlink("log", l), 0);
	fd = ssw_file_open(l, SSW_FILE_APPEND, why, sizeof why);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "two\n", 4), 4);
	close(fd);
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(ssw_file_read(p, 8, &text, &len, why, sizeof why), 0);
	assert_int_equal(len, 8);
	assert_string_equal(text, "one\ntwo\n");
	free(text);
	assert_int_equal(ssw_file_read(p, 7, &text, &len, why, sizeof why), -1);
	assert_string_equal(why, "larger than 7 bytes (the limit)");
	assert_int_equal(ssw_file_read(p, SSW_FILE_READ_MAX, &text, &len, why, sizeof why), 0);
	free(text);
}

/* Another user's link or file in a sticky world-writable directory (/tmp's
 * situation): refused, as the kernel's protected_symlinks/_regular would. */
static void test_planted(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		print_message("skipped: planting as another uid needs root\n");
		return;
	}
	char sticky[96], target[128], l[160], f[160], sub[160], via[200];
	path_in(sticky, sizeof sticky, "sticky");
	path_in(target, sizeof target, "root-owned");
	assert_int_equal(mkdir(sticky, 0777), 0);
	assert_int_equal(chmod(sticky, 01777), 0);
	int fd = open(target, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(l, sizeof l, "%s/stats", sticky);
	assert_int_equal(symlink(target, l), 0);
	assert_int_equal(lchown(l, 65534, 65534), 0);
	assert_int_equal(ssw_file_open(l, SSW_FILE_APPEND, why, sizeof why), -1);
	assert_non_null(strstr(why, "is a symlink of uid 65534 in a sticky world-writable directory: not followed"));
	assert_int_equal(ssw_file_open(l, SSW_FILE_READ, why, sizeof why), -1);
	struct stat st;
	assert_int_equal(stat(target, &st), 0);
	assert_int_equal(st.st_size, 0);
	/* the same link of ours is followed */
	assert_int_equal(lchown(l, 0, 0), 0);
	fd = ssw_file_open(l, SSW_FILE_APPEND, why, sizeof why);
	assert_true(fd >= 0);
	close(fd);
	/* a planted directory link on the way */
	snprintf(sub, sizeof sub, "%s/dir", sticky);
	assert_int_equal(symlink(dir, sub), 0);
	assert_int_equal(lchown(sub, 65534, 65534), 0);
	snprintf(via, sizeof via, "%s/root-owned", sub);
	assert_int_equal(ssw_file_open(via, SSW_FILE_APPEND, why, sizeof why), -1);
	assert_non_null(strstr(why, "its directory"));
	/* a planted regular file */
	snprintf(f, sizeof f, "%s/conf", sticky);
	fd = open(f, O_WRONLY | O_CREAT, 0644);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(chown(f, 65534, 65534), 0);
	assert_int_equal(ssw_file_open(f, SSW_FILE_READ, why, sizeof why), -1);
	assert_non_null(strstr(why, "is a file of uid 65534 in a sticky world-writable directory"));
	/* not sticky: the directory's owner decided who may write there */
	assert_int_equal(chmod(sticky, 0777), 0);
	fd = ssw_file_open(f, SSW_FILE_READ, why, sizeof why);
	assert_true(fd >= 0);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_types),
		cmocka_unit_test(test_append_and_read),
		cmocka_unit_test(test_planted),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
