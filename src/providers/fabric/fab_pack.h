/* fab_pack.h — the fabric provider's packed messages: several session messages in one transport message. */
#ifndef SSW_FAB_PACK_H
#define SSW_FAB_PACK_H

#include <stddef.h>
#include <stdint.h>

/* A packed payload is records back to back, each a 32-bit length (host
 * order: both ends run this code) then that many bytes, at least one. */
#define FAB_PACK_REC 4u

/* Untrusted input: 0 with the number of records when the payload is
 * exactly a sequence of one or more non-empty records, else -1. */
int fab_pack_check(const uint8_t *p, size_t len, uint32_t *count);

/* The record at offset `off` of a checked payload: its bytes and length. */
const uint8_t *fab_pack_rec(const uint8_t *p, uint32_t off, uint32_t *len);

#endif
