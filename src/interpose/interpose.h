/* interpose.h — what the interposed wrappers share: the C library's own
 * functions (common/real.h), the switch's narrow interface (switch/api.h),
 * exporting, and the system call convention for the switch's results. */
#ifndef SSW_INTERPOSE_H
#define SSW_INTERPOSE_H

#include <errno.h>

#include "common/real.h"
#include "common/sys.h"
#include "switch/api.h"

#define EXPORT __attribute__((visibility("default")))

/* A provider's own library (libfabric) calls the C library from inside the
 * switch, sometimes from its own threads while the switch holds locks: its
 * calls go straight to the C library, never back into the switch (a
 * re-entry would take the switch's locks in the other order). */
#define PROVIDER_PASS(call)                                       \
	do {                                                      \
		if (__builtin_expect(ssw_provider_calls != 0, 0)) \
			return call;                              \
	} while (0)

/* System call convention from a switch result (>= 0 or -errno).  A call
 * that succeeds leaves errno as it found it, as a system call does: the
 * switch's own failed attempts inside (a rendezvous name that is not there)
 * are not the application's to see. */
#define SSW_RET(expr)                          \
	do {                                   \
		int e_ = errno;                \
		long r_ = (long)(expr);        \
		if (r_ < 0) {                  \
			errno = (int)-r_;      \
			return -1;             \
		}                              \
		errno = e_;                    \
		return r_;                     \
	} while (0)

/* exec_image.c: an exec of `file` (searched in PATH when `search` and it
 * has no '/') starts a program that loads this very switch (at `self`),
 * given that the new environment preloads it. */
bool ssw_exec_image_loads_switch(const char *file, bool search, bool preloaded, const char *self);

#endif
