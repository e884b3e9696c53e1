/* forklocal.c — the wipe-on-fork page of forklocal.h, made as the library
 * (or a program linking the switch) is loaded, before any other code of
 * the switch runs. */
#include "common/forklocal.h"

#include "common/sys.h"

#include <string.h>
#include <sys/mman.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

_Static_assert(sizeof(struct ssw_forklocal) <= 4096, "the fork-local state fits one page");

static struct ssw_forklocal early_page; /* where the advice is refused */
struct ssw_forklocal *ssw_fl = &early_page;

void *ssw_wipeonfork_alloc(size_t size)
{
	long p = SYS_(mmap, NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == -1)
		return NULL;
	if (SYS_(madvise, p, size, MADV_WIPEONFORK) != 0) {
		SYS_(munmap, p, size);
		return NULL;
	}
	return (void *)p;
}

bool ssw_forklocal_wiped(void)
{
	return ssw_fl != &early_page;
}

static void zero_in_child(void)
{
	memset(ssw_fl, 0, sizeof *ssw_fl);
}

/* Before the other constructors (the interposer's starts the switch), and
 * before the program has threads: nothing holds a lock of the early page. */
__attribute__((constructor(101))) static void forklocal_init(void)
{
	void *p = ssw_wipeonfork_alloc(4096);
	if (p) {
		memcpy(p, &early_page, sizeof early_page);
		ssw_fl = p;
#ifdef __SANITIZE_ADDRESS__
		/* the leak checker scans no mapping of ours by itself: the
		 * free list of socket objects starts here (switch/sock/sock.c) */
		__lsan_register_root_region(p, 4096);
#endif
		return;
	}
	pthread_atfork(NULL, NULL, zero_in_child);
}
