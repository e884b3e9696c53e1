/* fab_probe.c — `sockswitch doctor`'s look at libfabric: which providers this host has, and which can carry the fabric provider. */
#include "providers/fabric/fab_probe.h"

#include "providers/fabric/fab_priv.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Provider names of info, each once ("tcp;ofi_rxm" is a utility provider
 * layered over tcp: listed as it is named), appended to buf. */
static int names(const struct fi_info *info, char *buf, size_t len)
{
	int n = 0;
	size_t used = strlen(buf);
	for (const struct fi_info *i = info; i; i = i->next) {
		const char *nm = i->fabric_attr && i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "?";
		bool dup = false;
		for (const struct fi_info *j = info; j != i && !dup; j = j->next)
			dup = j->fabric_attr && j->fabric_attr->prov_name && !strcmp(j->fabric_attr->prov_name, nm);
		if (dup)
			continue;
		int w = snprintf(buf + used, used < len ? len - used : 0, "%s%s", n ? ", " : "", nm);
		if (w > 0 && used + (size_t)w < len)
			used += (size_t)w;
		n++;
	}
	return n;
}

int ssw_fabric_probe(char *line, size_t len)
{
	const char *why;
	if (fab_dl_open(&why) < 0) {
		bool absent = strncmp(why, "cannot load", 11) == 0;
		snprintf(line, len, "libfabric: %s: `route ... fabric` rules use kernel TCP",
			 absent ? "not installed (libfabric1)" : why);
		return absent ? -1 : 1;
	}
	uint32_t v = fab_version();
	char all[256] = "", usable[256] = "";
	int nall = 0, nuse = 0;
	struct fi_info *info = NULL;
	if (fab_getinfo(FAB_API, NULL, NULL, 0, NULL, &info) == 0)
		nall = names(info, all, sizeof all);
	fab_freeinfo(info);
	/* the provider's own hints, whatever provider a route would name */
	struct fi_info *h = fab_hints();
	if (h) {
		free(h->fabric_attr->prov_name);
		h->fabric_attr->prov_name = NULL;
		info = NULL;
		if (fab_getinfo(FAB_API, NULL, NULL, 0, h, &info) == 0)
			nuse = names(info, usable, sizeof usable);
		fab_freeinfo(info);
		fab_freeinfo(h);
	}
	snprintf(line, len, "libfabric: %u.%u, providers found: %s; usable by the fabric provider (FI_EP_MSG, "
		 "FI_MSG|FI_RMA): %s", v >> 16, v & 0xffff, nall ? all : "none", nuse ? usable : "none");
	return nuse ? 0 : 1;
}
