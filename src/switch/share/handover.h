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
/* In the new image, at load: the connections SOCKSWITCH_INHERIT names. */
void ssw_handover_import(const char *spec);

#endif
