/* preload.c — rewrites LD_PRELOAD lists (ld.so separates entries by spaces or colons). */
#include "preload.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define SEPARATORS " :"

/* Two spellings of one file (relative, via a symlink) must count as the same
 * library, or it would be preloaded twice and interpose on itself. */
static int same_file(const char *entry, const char *lib)
{
	char real[PATH_MAX];
	if (!strcmp(entry, lib))
		return 1;
	return realpath(entry, real) && !strcmp(real, lib);
}

static int is_switch(const char *entry)
{
	const char *base = strrchr(entry, '/');
	base = base ? base + 1 : entry;
	return !strncmp(base, "libsockswitch", strlen("libsockswitch"));
}

/* Returns first (if any) then the entries of old, ':'-separated, leaving out
 * lib and, with drop_any_switch, every other copy of the switch too.
 * The buffer fits: each kept entry gains at most one separator over old. */
static char *filter(const char *first, const char *old, const char *lib, int drop_any_switch)
{
	size_t cap = (first ? strlen(first) : 0) + (old ? strlen(old) : 0) + 2;
	char *out = malloc(cap);
	char *copy = strdup(old ? old : "");
	if (!out || !copy) {
		free(out);
		free(copy);
		return NULL;
	}
	out[0] = '\0';
	if (first)
		strcpy(out, first);
	char *save = NULL;
	for (char *tok = strtok_r(copy, SEPARATORS, &save); tok; tok = strtok_r(NULL, SEPARATORS, &save)) {
		if (same_file(tok, lib) || (drop_any_switch && is_switch(tok)))
			continue;
		if (out[0])
			strcat(out, ":");
		strcat(out, tok);
	}
	free(copy);
	return out;
}

char *ssw_preload_prepend(const char *lib, const char *old)
{
	return filter(lib, old, lib, 0);
}

char *ssw_preload_without(const char *lib, const char *old)
{
	return filter(NULL, old, lib, 1);
}
