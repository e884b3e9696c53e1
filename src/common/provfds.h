/* provfds.h — what a provider's own library does with descriptors, noted by
 * the interposition for the provider: the socketpairs it made (libfabric
 * signals its completion and event queues through one), so that a process
 * keeping one connection's transport and closing everything else keeps
 * both ends; and its epoll_ctl calls, which tell a provider sharing
 * libfabric's objects between connections which socket is whose. */
#ifndef SSW_PROVFDS_H
#define SSW_PROVFDS_H

/* Noted by the interposed socketpair() for a provider's call; forgotten by
 * its close().  Descriptors from 65536 up are not followed. */
void ssw_provfd_pair(int a, int b);
void ssw_provfd_closed(int fd);
/* The other end of a provider's socketpair, or -1. */
int ssw_provfd_partner(int fd);

struct epoll_event;
/* A provider's library changed one of its epoll sets (the interposed
 * epoll_ctl, for a provider's call that succeeded): passed to the hook the
 * provider installed, if any (set once, before its library is loaded). */
typedef void (*ssw_provfd_epoll_fn)(int epfd, int op, int fd, const struct epoll_event *ev);
void ssw_provfd_epoll_hook(ssw_provfd_epoll_fn fn);
void ssw_provfd_epoll(int epfd, int op, int fd, const struct epoll_event *ev);

#endif
