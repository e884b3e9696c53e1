/* fdcount.h — how many descriptors this process holds (/proc/self/fd), for
 * the tests that measure what a connection costs (manyconn.c,
 * unit/test_fabric_hub.c). */
#ifndef SSW_TEST_FDCOUNT_H
#define SSW_TEST_FDCOUNT_H

#include <dirent.h>

static inline int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n - 1; /* the directory's own */
}

#endif
