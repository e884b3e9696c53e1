/* fuzz_fab_pack.c — libFuzzer target for the fabric provider's packed messages: the input is a packed
 * payload as a hostile peer sends it.  fab_pack_check must accept exactly a sequence of non-empty records
 * that fills the payload, and the receiver's walk over an accepted one (fab_pack_rec, as recv_peek and
 * recv_done take it) must stay inside it (ASan: the payload is a heap block of exactly its size) and end
 * at its end after the count it was told. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "providers/fabric/fab_pack.h"

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *p = malloc(size ? size : 1);
	if (!p)
		return 0;
	memcpy(p, data, size);
	uint32_t count = 0;
	if (fab_pack_check(p, size, &count) == 0) {
		CHECK(count >= 1 && count <= size / (FAB_PACK_REC + 1));
		uint32_t off = 0;
		for (uint32_t i = 0; i < count; i++) {
			uint32_t len;
			const uint8_t *rec = fab_pack_rec(p, off, &len);
			CHECK(len >= 1 && rec >= p && rec + len <= p + size);
			volatile uint8_t last = rec[len - 1]; /* read as the session does */
			(void)last;
			off += FAB_PACK_REC + len;
		}
		CHECK(off == size);
	}
	free(p);
	return 0;
}
