/* doctor_fabric.h — `sockswitch doctor`'s look at libfabric (doctor_fabric.c). */
#ifndef SSW_CLI_DOCTOR_FABRIC_H
#define SSW_CLI_DOCTOR_FABRIC_H

#include <stddef.h>

/* One line: libfabric's version, the providers it lists (no hints, each
 * name once) and those usable by the fabric provider (FI_EP_MSG with
 * FI_MSG | FI_RMA).  Returns -1 (information: not installed), 0 (some
 * usable) or 1 (installed, none usable: a warning). */
int doctor_fabric_summary(char *line, size_t len);

#endif
