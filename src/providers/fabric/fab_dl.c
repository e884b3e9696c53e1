/* fab_dl.c — libfabric, loaded on first use: linked in, its dependencies
 * (verbs, psm2, ...) cost every process under the switch ~200 ms at start,
 * most of which never make a fabric connection.  The one loader of the
 * tree: the provider and `sockswitch doctor` (fab_probe.c) go through it. */
#include "providers/fabric/fab_priv.h"

#include "common/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

static int (*p_getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *, struct fi_info **);
static void (*p_freeinfo)(struct fi_info *);
static struct fi_info *(*p_dupinfo)(const struct fi_info *);
static int (*p_fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static const char *(*p_strerror)(int);
static uint32_t (*p_version)(void);
static int load_rc = -ENOSYS;
static char load_why[256];

static void load(void)
{
	/* One of libfabric's dependencies (libinfinipath, through psm2)
	 * installs handlers for SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGINT and
	 * SIGTERM in its constructor and leaves them at SIG_DFL: the
	 * application's own handlers are put back (and the ~100 ms it spends
	 * calibrating a clock is paid here, at the first fabric use). */
	static struct sigaction saved[NSIG];
	static bool have[NSIG];
	for (int s = 1; s < NSIG; s++)
		have[s] = s != SIGKILL && s != SIGSTOP && sigaction(s, NULL, &saved[s]) == 0;
	/* the library stays: its objects may live until exit */
	void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	for (int s = 1; s < NSIG; s++) {
		struct sigaction now;
		if (have[s] && sigaction(s, NULL, &now) == 0 && now.sa_handler != saved[s].sa_handler)
			sigaction(s, &saved[s], NULL);
	}
	if (!h) {
		snprintf(load_why, sizeof load_why, "cannot load libfabric.so.1 (%s)", dlerror());
		load_rc = -ENODEV;
		return;
	}
	p_getinfo = (__typeof__(p_getinfo))dlsym(h, "fi_getinfo");
	p_freeinfo = (__typeof__(p_freeinfo))dlsym(h, "fi_freeinfo");
	p_dupinfo = (__typeof__(p_dupinfo))dlsym(h, "fi_dupinfo");
	p_fabric = (__typeof__(p_fabric))dlsym(h, "fi_fabric");
	p_strerror = (__typeof__(p_strerror))dlsym(h, "fi_strerror");
	p_version = (__typeof__(p_version))dlsym(h, "fi_version");
	load_rc = p_getinfo && p_freeinfo && p_dupinfo && p_fabric && p_strerror ? 0 : -ENODEV;
	if (load_rc)
		snprintf(load_why, sizeof load_why, "libfabric.so.1 lacks the functions the provider needs");
}

int fab_dl_open(const char **why)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, load);
	if (why)
		*why = load_rc ? load_why : NULL;
	return load_rc;
}

int fab_dl_load(void)
{
	static atomic_bool said;
	const char *why;
	int rc = fab_dl_open(&why);
	if (rc && !atomic_exchange(&said, true))
		SSW_WARN("fabric: %s: fabric routes use kernel TCP", why);
	return rc;
}

int fab_getinfo(uint32_t v, const char *node, const char *service, uint64_t flags, const struct fi_info *hints,
		struct fi_info **info)
{
	*info = NULL;
	return fab_dl_load() ? -FI_ENOSYS : p_getinfo(v, node, service, flags, hints, info);
}

void fab_freeinfo(struct fi_info *info)
{
	if (info && p_freeinfo)
		p_freeinfo(info);
}

struct fi_info *fab_allocinfo(void) { return fab_dl_load() ? NULL : p_dupinfo(NULL); }

int fab_open_fabric(struct fi_fabric_attr *attr, struct fid_fabric **f)
{
	return fab_dl_load() ? -FI_ENOSYS : p_fabric(attr, f, NULL);
}

const char *fab_strerror(int e) { return p_strerror ? p_strerror(e) : "libfabric not loaded"; }

uint32_t fab_version(void) { return fab_dl_load() || !p_version ? 0 : p_version(); }

struct fi_info *fab_dupinfo(const struct fi_info *info) { return fab_dl_load() ? NULL : p_dupinfo(info); }
