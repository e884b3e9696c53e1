/* fab_probe.h — what this host's libfabric offers the fabric provider, for
 * `sockswitch doctor` (fab_probe.c); needs no libfabric header. */
#ifndef SSW_FAB_PROBE_H
#define SSW_FAB_PROBE_H

#include <stddef.h>

/* One line into line: libfabric's version, the providers it lists (no
 * hints, each name once) and those that can carry the fabric provider (its
 * own hints, any provider name).  Loads libfabric (fab_dl.c) and logs
 * nothing.  Returns -1 (libfabric not installed: information), 0 (some
 * usable) or 1 (none usable, or a libfabric without the functions the
 * provider needs: a warning). */
int ssw_fabric_probe(char *line, size_t len);

#endif
