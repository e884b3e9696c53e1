/* plot.c — `sockswitch bench --plot FILE.png`: writes the measured cases as
 * gnuplot data and script in a temporary directory and has gnuplot draw three
 * panels (latency by message size, stream throughput by message size,
 * connections per second), kernel TCP next to switched. */
#include "common/params.h"
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *bench_gnuplot(void)
{
	const char *g = ssw_param_str(SSW_P_GNUPLOT);
	return g && *g ? g : "gnuplot";
}

int bench_plot_check(const char *png, char *err, size_t errlen)
{
	const char *g = bench_gnuplot();
	bool found = false;
	if (strchr(g, '/')) {
		found = access(g, X_OK) == 0;
	} else {
		const char *path = getenv("PATH");
		char dir[PATH_MAX];
		for (const char *p = path ? path : "/usr/bin:/bin"; p && *p && !found;) {
			const char *c = strchr(p, ':');
			size_t n = c ? (size_t)(c - p) : strlen(p);
			snprintf(dir, sizeof dir, "%.*s/%s", (int)n, p, g);
			found = n && access(dir, X_OK) == 0;
			p = c ? c + 1 : NULL;
		}
	}
	if (!found) {
		snprintf(err, errlen, "--plot: %s not found (Debian package gnuplot-nox; scripts/setup.sh installs it)", g);
		return -1;
	}
	int fd = open(png, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		snprintf(err, errlen, "--plot %s: %s", png, strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

static void value(FILE *f, const struct bench_result *r, int idx)
{
	if (r->ok && isfinite(r->v[idx]) && r->v[idx] > 0)
		fprintf(f, " %.6g", r->v[idx]);
	else
		fprintf(f, " ?");
}

/* A file name quoted for gnuplot's single-quoted strings. */
static void quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f); /* '' is a quote inside '...' */
		fputc(*s, f);
	}
	fputc('\'', f);
}

int bench_plot(const struct bench_case *cases, int n, const char *png, char *err, size_t errlen)
{
	char dir[] = "/tmp/sockswitch-plot.XXXXXX";
	if (!mkdtemp(dir)) {
		snprintf(err, errlen, "--plot: temporary directory: %s", strerror(errno));
		return -1;
	}
	char lat[PATH_MAX], thr[PATH_MAX], con[PATH_MAX], gp[PATH_MAX], log[PATH_MAX];
	snprintf(lat, sizeof lat, "%s/latency.dat", dir);
	snprintf(thr, sizeof thr, "%s/stream.dat", dir);
	snprintf(con, sizeof con, "%s/connect.dat", dir);
	snprintf(gp, sizeof gp, "%s/plot.gp", dir);
	snprintf(log, sizeof log, "%s/gnuplot.log", dir);
	FILE *fl = fopen(lat, "w"), *ft = fopen(thr, "w"), *fc = fopen(con, "w"), *fg = fopen(gp, "w");
	int rc = -1;
	if (!fl || !ft || !fc || !fg) {
		snprintf(err, errlen, "--plot: cannot write in %s", dir);
		goto out;
	}
	size_t lo = SIZE_MAX, hi = 0;
	fprintf(fl, "# size kernel_p50 switched_p50 kernel_p99 switched_p99 (us)\n");
	fprintf(ft, "# size kernel_MBps switched_MBps\n");
	fprintf(fc, "# label kernel switched (connections/s)\n");
	for (int i = 0; i < n; i++) {
		const struct bench_case *c = &cases[i];
		const struct bench_result *k = &c->r[MODE_KERNEL], *s = &c->r[MODE_SWITCHED];
		if (c->p.kind == BENCH_EPOLL || (c->p.kind == BENCH_STREAM && c->p.conns))
			continue; /* not drawn: one number, in the table and --json */
		if (c->p.kind != BENCH_CONNECT) {
			lo = c->p.size < lo ? c->p.size : lo;
			hi = c->p.size > hi ? c->p.size : hi;
		}
		if (c->p.kind == BENCH_LATENCY) {
			fprintf(fl, "%zu", c->p.size);
			value(fl, k, 0), value(fl, s, 0), value(fl, k, 1), value(fl, s, 1);
			fprintf(fl, "\n");
		} else if (c->p.kind == BENCH_STREAM) {
			fprintf(ft, "%zu", c->p.size);
			value(ft, k, 0), value(ft, s, 0);
			fprintf(ft, "\n");
		} else {
			fprintf(fc, "\"connect+1B+close\"");
			value(fc, k, 0), value(fc, s, 0);
			fprintf(fc, "\n");
		}
	}
	if (hi == 0)
		lo = hi = 64;

	fprintf(fg, "set output ");
	quoted(fg, png);
	fprintf(fg, "\nset datafile missing '?'\n"
		    "set multiplot layout 1,3 title 'sockswitch bench: kernel TCP vs switched (127.0.0.1)'\n"
		    "set grid\nset key top left\n"
		    "set logscale x 2\nset xrange [%g:%g]\nset format x '%%.0b%%BB'\n"
		    "set xlabel 'message size'\n",
		(double)lo / 1.5, (double)hi * 1.5);
	fprintf(fg, "set title 'round-trip latency (lower is better)'\nset ylabel 'microseconds'\nset logscale y\n"
		    "plot ");
	quoted(fg, lat);
	fprintf(fg, " using 1:2 with linespoints lw 2 lc rgb '#c0392b' title 'kernel p50', \\\n"
		    "  '' using 1:3 with linespoints lw 2 lc rgb '#2471a3' title 'switched p50', \\\n"
		    "  '' using 1:4 with linespoints dt 2 lc rgb '#c0392b' title 'kernel p99', \\\n"
		    "  '' using 1:5 with linespoints dt 2 lc rgb '#2471a3' title 'switched p99'\n");
	fprintf(fg, "set title 'stream throughput (higher is better)'\nset ylabel 'MB/s'\nplot ");
	quoted(fg, thr);
	fprintf(fg, " using 1:2 with linespoints lw 2 lc rgb '#c0392b' title 'kernel TCP', \\\n"
		    "  '' using 1:3 with linespoints lw 2 lc rgb '#2471a3' title 'switched'\n");
	fprintf(fg, "unset logscale\nunset xrange\nset xrange [*:*]\nunset format\nunset xlabel\nset yrange [0:*]\n"
		    "set title 'connections per second (higher is better)'\nset ylabel 'connections/s'\n"
		    "set style data histogram\nset style histogram clustered gap 1\nset style fill solid 0.8\n"
		    "set boxwidth 0.9\nplot ");
	quoted(fg, con);
	fprintf(fg, " using 2:xtic(1) lc rgb '#c0392b' title 'kernel TCP', '' using 3 lc rgb '#2471a3' title 'switched'\n"
		    "unset multiplot\n");
	fclose(fl), fclose(ft), fclose(fc), fclose(fg);
	fl = ft = fc = fg = NULL;

	/* pngcairo draws better; plain png (libgd) is the fallback. */
	static const char *terms[] = { "set terminal pngcairo size 1500,520 font ',10'",
				       "set terminal png size 1500,520" };
	for (int t = 0; t < 2 && rc != 0; t++) {
		pid_t p = fork();
		if (p < 0) {
			snprintf(err, errlen, "--plot: fork: %s", strerror(errno));
			goto out;
		}
		if (p == 0) {
			int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (lfd >= 0) {
				dup2(lfd, 1);
				dup2(lfd, 2);
			}
			execlp(bench_gnuplot(), bench_gnuplot(), "-e", terms[t], gp, (char *)NULL);
			_exit(127);
		}
		int st;
		while (waitpid(p, &st, 0) < 0 && errno == EINTR)
			;
		struct stat sb;
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && stat(png, &sb) == 0 && sb.st_size > 0)
			rc = 0;
	}
	if (rc != 0) {
		char msg[200] = "";
		FILE *f = fopen(log, "r");
		if (f) {
			size_t k = fread(msg, 1, sizeof msg - 1, f);
			msg[k] = '\0';
			for (char *q = msg; *q; q++)
				if (*q == '\n')
					*q = ' ';
			fclose(f);
		}
		snprintf(err, errlen, "--plot: %s failed: %s", bench_gnuplot(), msg[0] ? msg : "no output");
	}
out:
	if (fl)
		fclose(fl);
	if (ft)
		fclose(ft);
	if (fc)
		fclose(fc);
	if (fg)
		fclose(fg);
	unlink(lat), unlink(thr), unlink(con), unlink(gp), unlink(log);
	rmdir(dir);
	return rc;
}
