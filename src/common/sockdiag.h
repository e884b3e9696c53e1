/* sockdiag.h — who owns a kernel TCP socket, asked of the kernel (NETLINK_SOCK_DIAG):
 * the rendezvous trusts the kernel's word on addresses and owners, never a peer's. */
#ifndef SSW_SOCKDIAG_H
#define SSW_SOCKDIAG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Owner of the kernel LISTEN socket a SYN to dst (normalized: v4 or v6, not
 * v4-mapped) would reach, found by the kernel's own lookup.  0 and *uid;
 * -ENOENT: no listener; another -errno: the kernel could not tell. */
int ssw_diag_listener_uid(const struct sockaddr_storage *dst, uid_t *uid);
/* The same lookup, described: the owner, whether the listener is bound to
 * exactly dst's address (not a wildcard that also serves it), and whether
 * it was bound with IP_FREEBIND/IP_TRANSPARENT (an address the namespace
 * need not have). */
struct ssw_diag_listener {
	uid_t uid;
	bool exact, nonlocal;
};
int ssw_diag_listener(const struct sockaddr_storage *dst, struct ssw_diag_listener *out);

/* Does uid hold a kernel TCP socket of `domain` (AF_INET, AF_INET6, other:
 * either) bound (not yet connected) to exactly addr (normalized), as the
 * switch's connecting sockets are?  Sockets bound
 * with IP_FREEBIND/IP_TRANSPARENT do not count: kernel TCP cannot connect
 * from an address that is not local.  0 yes, -ENOENT no, else -errno (the
 * kernel cannot dump bound sockets: Linux < 6.8). */
int ssw_diag_bound_by(const struct sockaddr_storage *addr, int domain, uid_t uid);

/* Does process pid's descriptor fd (taken with pidfd_getfd, then closed:
 * needs ptrace rights over pid, i.e. root or the same user) hold a TCP
 * socket of uid bound to exactly addr, in the network namespace of our
 * socket ref_fd, without IP_FREEBIND/IP_TRANSPARENT?  (A socket made in a
 * namespace of the claimant's own may hold any address there, a privileged
 * port included, and be passed back.)  0 yes; -ENOENT no (it is not such a
 * socket); another -errno: cannot tell (no rights, process gone, old kernel). */
int ssw_diag_fd_bound(pid_t pid, int fd, const struct sockaddr_storage *addr, uid_t uid, int ref_fd);
/* Our own socket fd has IP_FREEBIND or IP_TRANSPARENT set. */
bool ssw_diag_fd_nonlocal(int fd);
/* Is the unix socket of this inode still open in some process (1), gone
 * (0), or can the kernel not tell (-errno)? */
int ssw_diag_unix_alive(uint64_t ino);
/* The first port any user may bind in our network namespace
 * (net.ipv4.ip_unprivileged_port_start, read once; 1024 if unreadable). */
int ssw_diag_unprivileged_port_start(void);

/* Why the provider refused (a rendezvous that failed a check), for the
 * switch to show in `sockswitch stat`: noted by the provider, taken (and
 * cleared) by the switch on the same thread.  NULL when none. */
void ssw_diag_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *ssw_diag_take_note(void);

#endif
