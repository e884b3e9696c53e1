/* load.c — what the library does as it is loaded, before any interposed call. */
#include "interpose/interpose.h"

__attribute__((constructor)) static void early(void)
{
	ssw_real_init();
	ssw_fdtab_init();
	ssw_mem_monitor_start();
}
