/* fdpass.h — one message with descriptors over a Unix socket (SCM_RIGHTS):
 * shm's handshake (providers/shm/shm_conn.c) and a relay's hand-over of
 * its connection (switch/share/handover_pass.c). */
#ifndef SSW_FDPASS_H
#define SSW_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

#define SSW_FDPASS_MAX 16

/* len bytes with n (<= SSW_FDPASS_MAX) fds, sendmsg flags as given:
 * 0 when all of it went, -EPROTO when only part did, else -errno. */
int ssw_fdpass_send(int sock, const void *msg, size_t len, const int *fds, int n, int flags);
/* One message into msg (up to len bytes) and up to max fds (*got of them,
 * close-on-exec; any others are closed: the sender is untrusted).  Room is
 * left for the credentials SO_PASSCRED adds.  Bytes (0: end of file), or
 * -errno; -EPROTO, with no fd kept, when the message or its descriptors
 * were cut short. */
ssize_t ssw_fdpass_recv(int sock, void *msg, size_t len, int *fds, int max, int *got, int flags);

#endif
