/* provfds.h — the socketpairs a provider's own library made, noted by the
 * interposition (libfabric signals its completion and event queues through
 * one), so that a process keeping one connection's transport and closing
 * everything else keeps both ends (provider.h, "What the switch's
 * interposition does for a provider"). */
#ifndef SSW_PROVFDS_H
#define SSW_PROVFDS_H

/* Noted by the interposed socketpair() for a provider's call; forgotten by
 * its close().  Descriptors from 65536 up are not followed. */
void ssw_provfd_pair(int a, int b);
void ssw_provfd_closed(int fd);
/* The other end of a provider's socketpair, or -1 (provider.h). */
int ssw_provfd_partner(int fd);

#endif
