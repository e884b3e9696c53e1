/* run.c — `sockswitch run`: preloads the switch into a command and becomes that command. */
#include "cli.h"
#include "libpath.h"
#include "preload.h"
#include "switch/route/route.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void run_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch run [--log LEVEL] [--conf FILE] [--routes RULES] [--] CMD [ARGS...]\n"
		"\n"
		"Runs CMD with libsockswitch.so preloaded.  Its TCP connections, and those of\n"
		"the programs it starts, go over the switch when the peer runs the switch\n"
		"too, and over plain kernel TCP otherwise.  CMD replaces sockswitch (same\n"
		"pid, signals and exit status).\n"
		"\n"
		"options:\n"
		"  --log LEVEL     switch logging: error, warn (default), info, debug\n"
		"                  (sets SOCKSWITCH_LOG)\n"
		"  --conf FILE     routing configuration file (sets SOCKSWITCH_CONF)\n"
		"  --routes RULES  routing rules separated by ';', e.g. 'route local shm;\n"
		"                  route 0.0.0.0/0 tcp' (sets SOCKSWITCH_ROUTES)\n"
		"  -h, --help      show this help\n"
		"\n"
		"environment:\n"
		"  SOCKSWITCH_LIB       libsockswitch.so to preload; by default it is searched\n"
		"                       next to sockswitch, in ../lib and ../" SSW_REL_LIBDIR "\n"
		"                       from there, and in " SSW_INSTALL_LIBDIR "\n"
		"  LD_PRELOAD           existing entries are kept, after the switch\n"
		"  SOCKSWITCH_LOG, SOCKSWITCH_LOG_FILE, SOCKSWITCH_CONF, SOCKSWITCH_ROUTES\n"
		"                       passed on to CMD; the options above override them\n"
		"\n"
		"exit status: that of CMD; 127 if libsockswitch.so or CMD is not found,\n"
		"126 if CMD cannot be executed, 1 if the configuration is invalid (one line\n"
		"naming the file or variable and the line; CMD is not started), 2 on a\n"
		"usage error.\n");
}

/* Accepts "--name VALUE" and "--name=VALUE"; returns the value or NULL. */
static const char *option_value(int argc, char **argv, int *i, const char *name, int *bad)
{
	size_t n = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, n))
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		fprintf(stderr, "sockswitch run: %s needs a value\n", name);
		*bad = 1;
		return NULL;
	}
	return argv[++*i];
}

static int valid_level(const char *lvl)
{
	static const char *levels[] = { "error", "warn", "info", "debug" };
	for (unsigned i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		if (!strcasecmp(lvl, levels[i]))
			return 1;
	return 0;
}

int run_main(int argc, char **argv)
{
	const char *log = NULL, *conf = NULL, *routes = NULL;
	int i, bad = 0;

	/* Parse only up to the command: what follows belongs to it. */
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v;
		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (cli_is_help(a)) {
			run_usage(stdout);
			return CLI_EXIT_OK;
		}
		if ((v = option_value(argc, argv, &i, "--log", &bad)))
			log = v;
		else if ((v = option_value(argc, argv, &i, "--conf", &bad)))
			conf = v;
		else if ((v = option_value(argc, argv, &i, "--routes", &bad)))
			routes = v;
		else if (bad)
			return CLI_EXIT_USAGE;
		else if (a[0] == '-') {
			fprintf(stderr, "sockswitch run: unknown option '%s'\n\n", a);
			run_usage(stderr);
			return CLI_EXIT_USAGE;
		} else
			break;
	}
	if (i >= argc) {
		fprintf(stderr, "sockswitch run: no command given\n\n");
		run_usage(stderr);
		return CLI_EXIT_USAGE;
	}
	if (log && !valid_level(log)) {
		fprintf(stderr, "sockswitch run: --log %s: expected error, warn, info or debug\n", log);
		return CLI_EXIT_USAGE;
	}

	char conf_abs[PATH_MAX];
	if (conf) {
		if (cli_conf_path("run", conf, conf_abs, sizeof conf_abs) < 0)
			return CLI_EXIT_FAIL;
		conf = conf_abs;
	}

	char lib[PATH_MAX], why[2048];
	if (ssw_find_lib(lib, sizeof(lib), why, sizeof(why)) < 0) {
		fprintf(stderr, "sockswitch run: %s\n", why);
		return CLI_EXIT_NOTFOUND;
	}
	char *preload = ssw_preload_prepend(lib, getenv("LD_PRELOAD"));
	if (!preload || setenv("LD_PRELOAD", preload, 1) < 0 ||
	    (log && setenv("SOCKSWITCH_LOG", log, 1) < 0) ||
	    (conf && setenv("SOCKSWITCH_CONF", conf, 1) < 0) ||
	    (routes && setenv("SOCKSWITCH_ROUTES", routes, 1) < 0)) {
		fprintf(stderr, "sockswitch run: out of memory\n");
		return CLI_EXIT_FAIL;
	}
	free(preload);

	/* A program would run on plain TCP with a bad configuration (after one
	 * warning); asked through the CLI, the mistake is reported instead. */
	static struct ssw_routes check;
	char cerr[512];
	if (cli_check_config("run", &check, cerr, sizeof cerr) < 0)
		return CLI_EXIT_FAIL;

	execvp(argv[i], argv + i);
	int err = errno;
	if (err == ENOENT) {
		fprintf(stderr, "sockswitch run: %s: %s\n", argv[i],
			strchr(argv[i], '/') ? "no such file" : "command not found");
		return CLI_EXIT_NOTFOUND;
	}
	fprintf(stderr, "sockswitch run: %s: %s\n", argv[i], strerror(err));
	return CLI_EXIT_NOEXEC;
}
