/* bench_stats.c — the switched workers' own counters (SOCKSWITCH_STATS_FILE), one file per case: --stats-dir, and a note when the switched column was not all switched. */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char statvar[PATH_MAX + 64];

static void path_of(const char *dir, const struct bench_params *p, char *buf, size_t len)
{
	char id[64];
	bench_case_id(p, id, sizeof(id));
	snprintf(buf, len, "%s/%s.stats", dir, id);
}

char **bench_stats_env(const char *dir, const struct bench_params *p, char **env, char *err, size_t len)
{
	int off = snprintf(statvar, sizeof(statvar), "SOCKSWITCH_STATS_FILE=");
	path_of(dir, p, statvar + off, sizeof(statvar) - (size_t)off);
	int fd = open(statvar + off, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(err, len, "stats file %.180s: %s", statvar + off, strerror(errno));
		return NULL;
	}
	close(fd);
	char **out = bench_env_override(env, statvar);
	if (!out)
		snprintf(err, len, "out of memory");
	return out;
}

/* A switched column whose connections fell back is kernel TCP under another
 * name: across hosts that happens (a pre-forked server's listener, a port the
 * provider cannot map), and the ratio would silently compare kernel with
 * kernel.  Say so next to the number. */
void bench_stats_note(const char *dir, const struct bench_params *p, struct bench_result *r)
{
	char path[PATH_MAX], line[512];
	path_of(dir, p, path, sizeof(path));
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	unsigned long sw = 0, fb = 0, lines = 0, a, b;
	while (fgets(line, sizeof(line), f)) {
		const char *s = strstr(line, " switched="), *k = strstr(line, " fallback=");
		if (strncmp(line, "sockswitch-stats ", 17) || !s || !k || sscanf(s, " switched=%lu", &a) != 1 ||
		    sscanf(k, " fallback=%lu", &b) != 1)
			continue;
		sw += a;
		fb += b;
		lines++;
	}
	fclose(f);
	if (!r->ok || r->note[0] || !lines)
		return;
	if (!sw)  /* fell back, or a route said tcp */
		snprintf(r->note, sizeof(r->note), "no connection switched (%lu fell back): this column is kernel TCP", fb);
	else if (fb)
		snprintf(r->note, sizeof(r->note), "%lu of %lu connection ends fell back to kernel TCP: partly kernel TCP",
			 fb, fb + sw);
}

void bench_stats_remove(const char *dir, const struct bench_case *cases, int n)
{
	char path[PATH_MAX];
	for (int i = 0; i < n; i++) {
		path_of(dir, &cases[i].p, path, sizeof(path));
		unlink(path);
	}
	rmdir(dir);
}
