/* libpath.c — finds libsockswitch.so the way an installed or in-tree sockswitch expects it. */
#include "libpath.h"

#include "common/params.h"
#include "common/safefile.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Appends to a bounded message buffer; truncation only shortens the message. */
static void add(char *buf, size_t len, const char *s)
{
	size_t used = strnlen(buf, len);
	if (used + 1 < len)
		snprintf(buf + used, len - used, "%s", s);
}

/* 0 when path is a readable regular file that nobody else planted (the
 * checks of every file a setting names, safefile.c), else -1 with why. */
static int usable(const char *path, char *why, size_t whylen)
{
	int fd = ssw_file_open(path, SSW_FILE_READ, why, whylen);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

/* ld.so splits LD_PRELOAD on spaces and colons, so such a path cannot be preloaded. */
static int preloadable(const char *path)
{
	return strpbrk(path, " :\t\n") == NULL;
}

static int accept_path(const char *path, char *out, size_t outlen, char *why, size_t whylen)
{
	char real[PATH_MAX];
	if (!realpath(path, real)) {
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (strlen(real) >= outlen) {
		snprintf(why, whylen, "%s: %s", real, strerror(ENAMETOOLONG));
		return -1;
	}
	if (!preloadable(real)) {
		snprintf(why, whylen, "%s: cannot be used in LD_PRELOAD (path contains a space or colon)", real);
		return -1;
	}
	memcpy(out, real, strlen(real) + 1);
	return 0;
}

int ssw_find_lib(char *out, size_t outlen, char *why, size_t whylen)
{
	why[0] = '\0';
	const char *env = ssw_param_str(SSW_P_LIB);
	if (ssw_param_error(SSW_P_LIB)) {
		snprintf(why, whylen, "%s", ssw_param_error(SSW_P_LIB));
		return -1;
	}
	if (env && *env) {
		char reason[256];
		if (usable(env, reason, sizeof reason) < 0) {
			snprintf(why, whylen, "SOCKSWITCH_LIB=%s: %s", env, reason);
			return -1;
		}
		return accept_path(env, out, outlen, why, whylen);
	}

	char cand[4][PATH_MAX + 64];
	int n = 0;
	char exe[PATH_MAX];
	if (realpath("/proc/self/exe", exe)) {
		char *slash = strrchr(exe, '/');
		if (slash)
			*slash = '\0';
		snprintf(cand[n++], sizeof(cand[0]), "%s/" SSW_LIB_NAME, exe);
		snprintf(cand[n++], sizeof(cand[0]), "%s/../lib/" SSW_LIB_NAME, exe);
#ifdef SSW_REL_LIBDIR
		if (strcmp(SSW_REL_LIBDIR, "lib"))
			snprintf(cand[n++], sizeof(cand[0]), "%s/../" SSW_REL_LIBDIR "/" SSW_LIB_NAME, exe);
#endif
	}
#ifdef SSW_INSTALL_LIBDIR
	snprintf(cand[n++], sizeof(cand[0]), "%s/" SSW_LIB_NAME, SSW_INSTALL_LIBDIR);
#endif
	for (int i = 0; i < n; i++)
		if (usable(cand[i], why, whylen) == 0)
			return accept_path(cand[i], out, outlen, why, whylen);

	why[0] = '\0';
	add(why, whylen, SSW_LIB_NAME " not found; looked for:");
	for (int i = 0; i < n; i++) {
		add(why, whylen, "\n  ");
		add(why, whylen, cand[i]);
	}
	add(why, whylen, "\nbuild it, or set SOCKSWITCH_LIB to its path");
	return -1;
}
