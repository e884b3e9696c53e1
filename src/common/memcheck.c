/* memcheck.c — buffer checks without faults, through Cross Memory Attach on ourselves. */
#include "common/memcheck.h"

#include <stdint.h>
#include <unistd.h>

enum { BATCH = 512 };

static bool touch(struct iovec *mine, struct iovec *at, int n, bool store)
{
	pid_t self = getpid();
	return !n || (process_vm_readv(self, mine, (unsigned long)n, at, (unsigned long)n, 0) == n &&
		      (!store || process_vm_writev(self, mine, (unsigned long)n, at, (unsigned long)n, 0) == n));
}

bool ssw_mem_usable(const struct iovec *v, int n, size_t len, bool store)
{
	struct iovec at[BATCH], mine[BATCH];
	uint8_t bytes[BATCH];
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t pg = page > 0 ? (uintptr_t)page : 4096;
	int k = 0;
	for (int i = 0; i < n && len; i++) {
		size_t l = v[i].iov_len < len ? v[i].iov_len : len;
		uintptr_t a = (uintptr_t)v[i].iov_base, end = a + l;
		len -= l;
		if (end < a)
			return false; /* wraps the address space */
		/* the bytes written back are the ones just read: a buffer about to
		 * be received into is overwritten anyway */
		for (; a < end; a = (a | (pg - 1)) + 1) { /* a byte in each page */
			at[k] = (struct iovec){ (void *)a, 1 };
			mine[k] = (struct iovec){ &bytes[k], 1 };
			if (++k == BATCH) {
				if (!touch(mine, at, k, store))
					return false;
				k = 0;
			}
		}
	}
	return !len && touch(mine, at, k, store);
}
