/* interpose.h — what the interposed wrappers share: the C library's own
 * functions (common/real.h), the switch's narrow interface (switch/api.h),
 * exporting, and the system call convention for the switch's results. */
#ifndef SSW_INTERPOSE_H
#define SSW_INTERPOSE_H

#include <errno.h>

#include "common/real.h"
#include "switch/api.h"

#define EXPORT __attribute__((visibility("default")))

/* System call convention from a switch result (>= 0 or -errno). */
#define SSW_RET(expr)                          \
	do {                                   \
		long r_ = (long)(expr);        \
		if (r_ < 0) {                  \
			errno = (int)-r_;      \
			return -1;             \
		}                              \
		return r_;                     \
	} while (0)

#endif
