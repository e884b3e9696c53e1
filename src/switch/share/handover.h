/* handover.h — a switched connection carried across exec into the new
 * image, which takes it over itself (handover.c). */
#ifndef SSW_HANDOVER_H
#define SSW_HANDOVER_H

#include <stdint.h>

#include "switch/switch.h"

/* Before an exec whose new image will load the switch: carry s (fds: its
 * descriptors, those without FD_CLOEXEC go) into it, waiting until
 * wait_until (CLOCK_MONOTONIC ns) for relays holding it too to let go; its entry
 * appended to buf (SOCKSWITCH_INHERIT), its descriptors kept open in k.
 * 0, or -errno with nothing changed: the caller relays s. */
int ssw_handover_export(struct ssw_sock *s, const int *fds, int nfds, uint64_t wait_until, char *buf, size_t len,
			struct ssw_exec_keep *k);
/* The session of s (held by this process alone, quiet) and what the socket
 * knows of it, written into a memfd beside the provider's descriptors (the
 * endpoint's own: the image names them, they stay s's until s is gone).
 * 0, or -errno with s unchanged. */
int ssw_handover_pack(struct ssw_sock *s, struct ssw_session_image *img);

/* The receiving side: an image read back (its memfd closed; on failure its
 * descriptors too), with what the socket will know (opaque here). */
struct ssw_handover_note {
	const struct ssw_provider *p;
	_Alignas(16) uint8_t b[384];
};
struct ssw_session *ssw_handover_load(const char *prov, struct ssw_session_image *img, struct ssw_handover_note *hn,
				      int *err);
/* A loaded session not installed after all: its copy and descriptors go,
 * the peer is told nothing (the exporter carries on). */
void ssw_handover_unload(struct ssw_session *sess);
/* The loaded session becomes the connection of the app fds (TCP sockets of
 * its family, unknown to the table); `how` for the log.  False: it is lost. */
bool ssw_handover_install(struct ssw_session *sess, const struct ssw_handover_note *hn, const int *app, int napp,
			  const char *how);

/* In the new image, at load: the connections SOCKSWITCH_INHERIT names. */
void ssw_handover_import(const char *spec);

#endif
