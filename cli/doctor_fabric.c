/* doctor_fabric.c — `sockswitch doctor`: which libfabric providers this host has, and which can carry the fabric provider. */
#include "doctor_fabric.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if __has_include(<rdma/fabric.h>)
#include <rdma/fabric.h>
#define HAVE_FABRIC_H 1
#endif

#ifdef HAVE_FABRIC_H
/* libfabric is opened at run time: the CLI works on hosts without it. */
struct fi {
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	uint32_t (*version)(void);
};

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

int doctor_fabric_summary(char *line, size_t len)
{
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(line, len, "libfabric: not installed: `route ... fabric` rules use kernel TCP");
		return -1;
	}
	struct fi f = {
		.getinfo = (int (*)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
				    struct fi_info **))dlsym(h, "fi_getinfo"),
		.freeinfo = (void (*)(struct fi_info *))dlsym(h, "fi_freeinfo"),
		.dupinfo = (struct fi_info * (*)(const struct fi_info *)) dlsym(h, "fi_dupinfo"),
		.version = (uint32_t (*)(void))dlsym(h, "fi_version"),
	};
	if (!f.getinfo || !f.freeinfo || !f.dupinfo || !f.version) {
		snprintf(line, len, "libfabric: libfabric.so.1 lacks fi_getinfo: `route ... fabric` rules use kernel TCP");
		dlclose(h);
		return 1;
	}
	uint32_t v = f.version();
	char all[256] = "", usable[256] = "";
	struct fi_info *info = NULL, *hints = f.dupinfo(NULL);
	int nall = 0, nuse = 0;
	if (f.getinfo(v, NULL, NULL, 0, NULL, &info) == 0) {
		nall = names(info, all, sizeof all);
		f.freeinfo(info);
	}
	if (hints) {
		hints->ep_attr->type = FI_EP_MSG;
		hints->caps = FI_MSG | FI_RMA;
		info = NULL;
		if (f.getinfo(v, NULL, NULL, 0, hints, &info) == 0) {
			nuse = names(info, usable, sizeof usable);
			f.freeinfo(info);
		}
		f.freeinfo(hints);
	}
	snprintf(line, len, "libfabric: %u.%u, providers found: %s; usable by the fabric provider (FI_EP_MSG, "
		 "FI_MSG|FI_RMA): %s", v >> 16, v & 0xffff, nall ? all : "none", nuse ? usable : "none");
	dlclose(h);
	return nuse ? 0 : 1;
}
#else
int doctor_fabric_summary(char *line, size_t len)
{
	snprintf(line, len, "libfabric: this sockswitch was built without its headers: cannot list its providers");
	return -1;
}
#endif
