/* relay.h — handing a switched connection to a program exec'd with it, or
 * to a process it is sent to over SCM_RIGHTS.
 *
 * A switched connection's state lives in this image's memory and dies with
 * it at exec (and never reaches a process the fd is sent to).  So before an
 * exec (or posix_spawn) that keeps a switched connection's fd open, or before
 * the fd is sent, a relay process forked from this image takes the
 * connection over and the fd becomes an AF_UNIX stream socket to the relay
 * (relay.c); the new program reads and writes it like any socket, and asks
 * the switch (relayed.c) only for what a Unix socket would answer
 * differently from TCP: its addresses and TCP options. */
#ifndef SSW_RELAY_H
#define SSW_RELAY_H

#include <stdbool.h>
#include <sys/socket.h>

#include "switch/switch.h"

/* relay.c: ssw_exec_prepare, ssw_exec_failed, ssw_relay_fds and
 * ssw_has_switched are the interposition layer's (api.h). */

/* relayed.c */
int ssw_relayed_add(int fd, const struct sockaddr_storage *local, socklen_t llen,
		    const struct sockaddr_storage *peer, socklen_t plen);
void ssw_relayed_drop(int fd);
void ssw_relayed_dup(int oldfd, int newfd);
void ssw_relayed_close_range(unsigned lo, unsigned hi);
/* (enum ssw_relayed_q: api.h)  getsockname/getpeername (val = sockaddr, len = its length), get/setsockopt
 * for a relayed fd: 0 or -errno; SSW_PASS: not relayed or the kernel's answer. */
int ssw_relayed_query(int fd, enum ssw_relayed_q q, int level, int opt, void *val, socklen_t *len);
/* The abstract name a relay listens on, carrying the connection's addresses
 * (getpeername of the application's end returns it), and its parser. */
struct sockaddr_un;
int ssw_relay_name(const struct sockaddr_storage *l, socklen_t ll, const struct sockaddr_storage *p, socklen_t pl,
		   struct sockaddr_un *out, socklen_t *outlen);
bool ssw_relay_name_parse(const struct sockaddr_un *un, socklen_t len, struct sockaddr_storage *l, socklen_t *ll,
			  struct sockaddr_storage *p, socklen_t *pl);
/* fd is connected to a relay's name: that name (un, len) and the
 * connection's addresses it carries; false if it is not (one system call). */
bool ssw_relay_peer(int fd, struct sockaddr_un *un, socklen_t *len, struct sockaddr_storage *l, socklen_t *ll,
		    struct sockaddr_storage *p, socklen_t *pl);
/* fd (not in the table) is a relay's socket: add it; false if it is not one. */
bool ssw_relayed_recognize(int fd);

#endif
