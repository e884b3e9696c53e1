/* sys.h — raw system calls for the switch's own use.  Code inside
 * libsockswitch.so must not call the socket API by name: those symbols resolve
 * to our own interposed wrappers.  These go straight to the kernel. */
#ifndef SSW_SYS_H
#define SSW_SYS_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SYS_(name, ...) syscall(SYS_##name, __VA_ARGS__)

static inline int sys_close(int fd) { return (int)SYS_(close, fd); }
static inline ssize_t sys_read(int fd, void *b, size_t n) { return SYS_(read, fd, b, n); }
static inline ssize_t sys_write(int fd, const void *b, size_t n) { return SYS_(write, fd, b, n); }
static inline int sys_socket(int d, int t, int p) { return (int)SYS_(socket, d, t, p); }
static inline int sys_bind(int fd, const struct sockaddr *a, socklen_t l) { return (int)SYS_(bind, fd, a, l); }
static inline int sys_listen(int fd, int b) { return (int)SYS_(listen, fd, b); }
static inline int sys_connect(int fd, const struct sockaddr *a, socklen_t l) { return (int)SYS_(connect, fd, a, l); }
static inline int sys_accept4(int fd, struct sockaddr *a, socklen_t *l, int f) { return (int)SYS_(accept4, fd, a, l, f); }
static inline ssize_t sys_sendmsg(int fd, const struct msghdr *m, int f) { return SYS_(sendmsg, fd, m, f); }
static inline ssize_t sys_recvmsg(int fd, struct msghdr *m, int f) { return SYS_(recvmsg, fd, m, f); }
static inline ssize_t sys_recv(int fd, void *b, size_t n, int f) { return SYS_(recvfrom, fd, b, n, f, NULL, NULL); }
static inline ssize_t sys_send(int fd, const void *b, size_t n, int f) { return SYS_(sendto, fd, b, n, f, NULL, 0); }
static inline int sys_shutdown(int fd, int how) { return (int)SYS_(shutdown, fd, how); }
/* fcntl's third argument as the kernel takes it: an int or a pointer, in one long */
static inline int sys_fcntl(int fd, int cmd, long arg) { return (int)SYS_(fcntl, fd, cmd, arg); }
static inline int sys_ioctl(int fd, unsigned long req, void *arg) { return (int)SYS_(ioctl, fd, req, arg); }
static inline int sys_dup3(int fd, int nfd, int f) { return (int)SYS_(dup3, fd, nfd, f); }
static inline int sys_pipe2(int fds[2], int f) { return (int)SYS_(pipe2, fds, f); }
static inline int sys_close_range(unsigned lo, unsigned hi, int f) { return (int)SYS_(close_range, lo, hi, f); }
static inline int sys_getsockname(int fd, struct sockaddr *a, socklen_t *l) { return (int)SYS_(getsockname, fd, a, l); }
static inline int sys_getpeername(int fd, struct sockaddr *a, socklen_t *l) { return (int)SYS_(getpeername, fd, a, l); }
static inline int sys_getsockopt(int fd, int lv, int o, void *v, socklen_t *l) { return (int)SYS_(getsockopt, fd, lv, o, v, l); }
static inline int sys_setsockopt(int fd, int lv, int o, const void *v, socklen_t l) { return (int)SYS_(setsockopt, fd, lv, o, v, l); }
static inline int sys_ppoll(struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *m)
{
	return (int)SYS_(ppoll, p, n, t, m, m ? _NSIG / 8 : 0);
}
/* poll with a millisecond timeout (-1 = forever). */
static inline int sys_poll(struct pollfd *p, nfds_t n, int ms)
{
	struct timespec ts, *tp = NULL;
	if (ms >= 0) {
		ts.tv_sec = ms / 1000;
		ts.tv_nsec = (long)(ms % 1000) * 1000000L;
		tp = &ts;
	}
	return sys_ppoll(p, n, tp, NULL);
}
static inline int sys_eventfd(unsigned v, int f) { return (int)SYS_(eventfd2, v, f); }
static inline int sys_memfd_create(const char *n, unsigned f) { return (int)SYS_(memfd_create, n, f); }
static inline int sys_epoll_create1(int f) { return (int)SYS_(epoll_create1, f); }
static inline int sys_epoll_ctl(int e, int op, int fd, struct epoll_event *ev) { return (int)SYS_(epoll_ctl, e, op, fd, ev); }
static inline int sys_epoll_wait(int e, struct epoll_event *ev, int n, int ms) { return (int)SYS_(epoll_pwait, e, ev, n, ms, NULL, 0); }

/* Nonzero while this thread is inside a provider's own library (libfabric):
 * the sockets that library makes reach the interposed connect/listen and
 * must go to the kernel as they are, never be switched (provcall.c). */
extern __thread int ssw_provider_calls;

/* getpid(2), cached (pid.c: a fork child's cache is empty); ssw_pid_forget()
 * where a process is made without libc's fork (relay.c's clone). */
pid_t ssw_pid(void);
void ssw_pid_forget(void);
/* Is p a process that can still act (alive, and not a zombie)? */
bool ssw_pid_alive(pid_t p);
/* A detached thread of the switch's running fn(NULL) (thread.c); false if none. */
bool ssw_thread_start(void *(*fn)(void *));

/* Memory shared with forked children (shmem.c): the first `zero` bytes are
 * zero (all of it when newly mapped); NULL on failure.  free with reuse only
 * when no other process can still see it (kept for the next alloc). */
void *ssw_shared_alloc(size_t size, size_t zero);
void ssw_shared_free(void *p, size_t size, bool reuse);
/* A fresh fork-shared mapping of `size` bytes whose first `n` are a copy
 * of p's, the rest zero: the private copy a process takes of a connection's
 * memory before it drops privileges (switch/share/privdrop.c).  NULL if no
 * memory. */
void *ssw_shared_dup(const void *p, size_t size, size_t n);
/* Put `copy` (from ssw_shared_dup) in place of this process's mapping at
 * `at`, same size: from then on `at` shows the copy here, while every
 * other process that mapped `at`'s memory keeps the original.  false if
 * the kernel refused (copy unmapped, `at` unchanged). */
bool ssw_shared_move(void *copy, size_t size, void *at);
/* A mapping kept for reuse leaves the children of later forks out
 * (MADV_DONTFORK, done at the fork); false: the kernel refused, it must not
 * be kept.  ssw_fork_in: back in use, one a fork marked is inherited again;
 * false: it cannot serve (shmem.c, shm_seg.c). */
bool ssw_fork_out(void *p, size_t size);
bool ssw_fork_in(void *p, size_t size, bool marked);

/* Move one of the switch's own fds above FD_SETSIZE when the limit allows
 * (fdhide.c); returns the fd to use (the old one is closed if moved). */
int ssw_fd_hide(int fd);
/* The descriptor limit as first seen, when the switch's own descriptors are
 * moved above the floor; 0 when they are not (a low limit).  A new hidden
 * descriptor's number, less the floor, then tells how many above the floor
 * are in use (each takes the lowest free number). */
long ssw_fd_hide_limit(void);
/* A close-on-exec copy of fd, above FD_SETSIZE when the limit allows (one
 * system call, where a dup then ssw_fd_hide takes three); -1 on error. */
int ssw_fd_dup_hidden(int fd);

static inline uint64_t ssw_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static inline void ssw_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

#endif
