/* bench_env.c — the environments of the two columns: same variables, switch preloaded or not. */
#include "bench.h"
#include "preload.h"

#include <link.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static int find_asan(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	const char *base = strrchr(info->dlpi_name, '/');
	base = base ? base + 1 : info->dlpi_name;
	if (!strncmp(base, "libasan.so", 10)) {
		*(const char **)data = info->dlpi_name;
		return 1;
	}
	return 0;
}

/* In a sanitizer build the workers (this same binary) abort unless the
 * dynamic ASan runtime comes first in the library list, ahead of anything
 * preloaded; so when we run with it, it leads LD_PRELOAD too. */
static char *asan_first(char *preload)
{
	const char *asan = NULL;
	dl_iterate_phdr(find_asan, &asan);
	if (!asan || !preload || !preload[0])
		return preload;
	char *with = ssw_preload_prepend(asan, preload);
	free(preload);
	return with;
}

/* Copies environ, replacing LD_PRELOAD so that only the preload of the switch
 * differs between the columns; the kernel column also drops a switch that the
 * caller may have inherited (e.g. when bench itself runs under `sockswitch run`). */
char **bench_env(enum bench_mode mode, const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	char *preload = asan_first(mode == MODE_SWITCHED ? ssw_preload_prepend(lib, old) : ssw_preload_without(lib, old));
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 2, sizeof(char *));
	if (!env || !preload) {
		free(env);
		free(preload);
		return NULL;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11))
			env[k++] = environ[i];
	if (preload[0]) {
		char *var = malloc(strlen(preload) + sizeof("LD_PRELOAD="));
		if (!var) {
			free(env);
			free(preload);
			return NULL;
		}
		strcpy(var, "LD_PRELOAD=");
		strcat(var, preload);
		env[k++] = var;
	}
	free(preload);
	env[k] = NULL;
	return env;
}

void bench_env_free(char **env)
{
	if (!env)
		return;
	/* The only string we own: every other entry points into environ. */
	for (char **e = env; *e; e++)
		if (!strncmp(*e, "LD_PRELOAD=", 11))
			free(*e);
	free(env);
}

char **bench_env_override(char *const env[], char *var)
{
	size_t n = 0, name = strcspn(var, "=") + 1, k = 0;
	while (env[n])
		n++;
	char **out = calloc(n + 2, sizeof(char *));
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(env[i], var, name))
			out[k++] = env[i];
	out[k++] = var;
	out[k] = NULL;
	return out;
}
