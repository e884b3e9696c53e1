/* load.c — what the library does as it is loaded, before any interposed call. */
#include "interpose/interpose.h"

#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void early(void)
{
	ssw_real_init();
	ssw_fdtab_init();
	/* listeners this image inherited from the one that exec'd it
	 * (setup/exec.c): switched again before the program's first accept;
	 * the variable is this exec's, not for the ones after */
	const char *inherit = getenv("SOCKSWITCH_INHERIT");
	if (inherit) {
		char *copy = strdup(inherit);
		unsetenv("SOCKSWITCH_INHERIT");
		if (copy)
			ssw_exec_inherited(copy);
		free(copy);
	}
	ssw_mem_monitor_start();
}
