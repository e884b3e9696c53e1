/* real.c — resolves the C library entry points the library interposes (RTLD_NEXT). */
#include "common/real.h"
#include "common/forklocal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ssw_real ssw_real;

static void resolve(void)
{
#define R(name) ssw_real.name = (__typeof__(ssw_real.name))dlsym(RTLD_NEXT, #name)
#define RN(field, sym) ssw_real.field = (__typeof__(ssw_real.field))dlsym(RTLD_NEXT, sym)
	R(socket); R(socketpair); R(connect); R(bind); R(listen); R(accept); R(accept4); R(shutdown); R(close);
	R(dup); R(dup2); R(dup3); R(fcntl); R(ioctl); R(getsockopt); R(setsockopt); R(getsockname);
	R(getpeername); R(send); R(recv); R(sendto); R(recvfrom); R(sendmsg); R(recvmsg); R(read);
	R(write); R(readv); R(writev); R(sendfile); R(splice); R(poll); R(ppoll); R(select); R(pselect);
	R(epoll_ctl); R(epoll_wait); R(epoll_pwait); R(epoll_pwait2); R(execve); R(execvpe); R(fork);
	R(posix_spawn); R(posix_spawnp); R(vfork); R(close_range);
	R(setuid); R(seteuid); R(setreuid); R(setresuid);
	RN(exit_, "_exit");
	RN(Exit_, "_Exit");
	RN(read_chk, "__read_chk");
	RN(recv_chk, "__recv_chk");
	RN(recvfrom_chk, "__recvfrom_chk");
#undef R
#undef RN
}

void ssw_real_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, resolve);
}

pid_t ssw_real_fork_outer(void)
{
	static pid_t (*fn)(void);
	if (!fn) {
		pid_t (*first)(void) = (pid_t(*)(void))dlsym(RTLD_DEFAULT, "fork");
		Dl_info a, b;
		bool ours = first && dladdr((void *)first, &a) && dladdr((void *)ssw_real_fork_outer, &b) &&
			    a.dli_fbase == b.dli_fbase;
		fn = first && !ours ? first : (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");
	}
	/* its child maps what this process maps, unseen by fork.c (shm_lend.c) */
	__atomic_fetch_add(&ssw_fl->outer_forks, 1, __ATOMIC_RELAXED);
	return fn ? fn() : (pid_t)syscall(SYS_fork);
}
