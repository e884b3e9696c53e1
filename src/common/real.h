/* real.h — the C library's own entry points behind the ones the library
 * interposes, resolved once with dlsym(RTLD_NEXT).  Below the switch so that
 * any layer can call the real function without going back up through the
 * interposed one. */
#ifndef SSW_REAL_H
#define SSW_REAL_H

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct ssw_real {
	int (*socket)(int, int, int);
	int (*socketpair)(int, int, int, int[2]);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*shutdown)(int, int);
	int (*close)(int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned int);
	ssize_t (*read_chk)(int, void *, size_t, size_t);
	ssize_t (*recv_chk)(int, void *, size_t, size_t, int);
	ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *, const sigset_t *);
	int (*execve)(const char *, char *const[], char *const[]);
	pid_t (*vfork)(void);
	void (*exit_)(int);        /* _exit */
	void (*Exit_)(int);        /* _Exit */
	int (*close_range)(unsigned, unsigned, int);
	pid_t (*fork)(void);
	int (*setuid)(uid_t);
	int (*seteuid)(uid_t);
	int (*setreuid)(uid_t, uid_t);
	int (*setresuid)(uid_t, uid_t, uid_t);
	int (*execvpe)(const char *, char *const[], char *const[]);
	int (*posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
			   char *const[], char *const[]);
	int (*posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
			    char *const[], char *const[]);
};

extern struct ssw_real ssw_real;
void ssw_real_init(void);

/* Resolve on first use (constructors of other libraries may call us first). */
#define REAL(name) (ssw_real.name ? ssw_real.name : (ssw_real_init(), ssw_real.name))

/* fork without this library's own wrapper (no holder counting), but through
 * a sanitizer runtime's when one is loaded first: it keeps its own locks
 * consistent across fork.  The raw system call if neither is found. */
pid_t ssw_real_fork_outer(void);

#endif
