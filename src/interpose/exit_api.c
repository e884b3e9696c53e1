/* exit_api.c — _exit and _Exit: the process ends without its atexit
 * handlers (a forked child's usual end: Python's os._exit, multiprocessing),
 * so the switch's own close at exit does not run; connections other
 * processes share lose this process's hold first (switch/share/exit.c), as
 * the kernel drops a dying process's reference to a shared socket. */
#include "interpose/interpose.h"

#include <sys/syscall.h>
#include <unistd.h>

static _Noreturn void end(void (*real)(int), int status)
{
	ssw_exit_hand_over();
	if (real)
		real(status);
	for (;;)
		syscall(SYS_exit_group, status);
}

EXPORT void _exit(int status)
{
	if (!ssw_real.exit_)
		ssw_real_init();
	end(ssw_real.exit_, status);
}

EXPORT void _Exit(int status)
{
	if (!ssw_real.Exit_)
		ssw_real_init();
	end(ssw_real.Exit_, status);
}
