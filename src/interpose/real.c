/* real.c — resolves the C library entry points we interpose (RTLD_NEXT). */
#include "interpose/real.h"

#include <dlfcn.h>
#include <pthread.h>

#include "switch/sock.h"

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

__attribute__((constructor)) static void early(void)
{
	ssw_real_init();
	/* the fd table exists from the start so socket() can record what it made */
	ssw_fdtab_init();
}
