/* fab_pack.c — checking and reading packed messages (fab_pack.h): the part of the framing read from the wire. */
#include "providers/fabric/fab_pack.h"

#include <string.h>

int fab_pack_check(const uint8_t *p, size_t len, uint32_t *count)
{
	uint32_t n = 0;
	size_t off = 0;
	while (off < len) {
		uint32_t r;
		if (len - off < FAB_PACK_REC)
			return -1;
		memcpy(&r, p + off, sizeof r);
		off += FAB_PACK_REC;
		if (r == 0 || r > len - off)
			return -1;
		off += r;
		n++;
	}
	if (n == 0)
		return -1;
	*count = n;
	return 0;
}

const uint8_t *fab_pack_rec(const uint8_t *p, uint32_t off, uint32_t *len)
{
	memcpy(len, p + off, sizeof *len);
	return p + off + FAB_PACK_REC;
}
