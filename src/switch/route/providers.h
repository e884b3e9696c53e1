/* providers.h — the registry of providers this build knows, and the checks a
 * provider passes before the switch uses it (providers.c).
 *
 * Routes name providers by their `name`; the registry turns the name into
 * a checked copy of the provider's tables.  In that copy an op is present
 * only when its table's `size` covers it; the ops the switch or session call
 * unconditionally must be present (else the provider is refused, with a
 * message naming the op); the optional ops whose absence provider.h defines
 * ("Optional (NULL: ...)") are NULL when absent and every call site checks
 * them; the few ops nothing may find missing (rdma ops a hostile peer could
 * ask for, poll_cq) get explicit stubs (-EPERM, -ENOBUFS, 0 completions)
 * instead. */
#ifndef SSW_PROVIDERS_H
#define SSW_PROVIDERS_H

#include <sockswitch/provider.h>
#include <stdbool.h>
#include <stddef.h>

/* A registry row: the name routes use, and the provider (NULL when this
 * build left its folder out: routes to it use kernel TCP). */
struct ssw_registered {
	const char *name;
	const struct ssw_provider *prov;
};
extern const struct ssw_registered ssw_registry[];
extern const int ssw_registry_count;
#define SSW_REGISTRY_MAX 8

/* Index of the provider called name[0..len) in ssw_registry, or -1. */
int ssw_registry_find(const char *name, size_t len);
/* "shm, fabric" for messages. */
void ssw_registry_names(char *buf, size_t len);

/* The build's facts in one line after SSW_BUILD_FACTS_TAG: "providers
 * built in: shm fabric", or "providers built in: shm; left out: fabric
 * (why)".  The tag marks the line in the library file (cli/doctor.c). */
#define SSW_BUILD_FACTS_TAG "\nsockswitch build: "
extern const char ssw_build_facts[];
#define SSW_BUILD_FACTS (ssw_build_facts + sizeof SSW_BUILD_FACTS_TAG - 1)

/* A provider as the switch uses it: the checked copy of its tables. */
struct ssw_provider_copy {
	struct ssw_provider p;
	struct ssw_conn_ops conn;
	struct ssw_msg_ops msg;
	struct ssw_rdma_ops rdma;
	struct ssw_progress_ops progress;
};

/* Check raw (version, tables, required ops) and fill *out with the copy the
 * switch calls through.  0, or -1 with one sentence in why naming the first
 * problem ("conn op connect_fd missing", "msg table size 24 too small for
 * its required ops").  Does not call init. */
int ssw_provider_check(const struct ssw_provider *raw, struct ssw_provider_copy *out, char *why, size_t len);

#endif
