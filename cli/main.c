/* main.c — the sockswitch command: finds the subcommand in one table and runs it. */
#include "cli.h"

#include "switch/route/providers.h"

#include <stdio.h>
#include <string.h>

static int help_main(int argc, char **argv);
static void help_usage(FILE *out);

struct command {
	const char *name;
	const char *summary; /* NULL hides the command from usage */
	cli_main_fn main;
	cli_usage_fn usage;
};

/* One row per subcommand.  New commands (stat, routes, doctor) are one row
 * each here plus their own file; usage and `help CMD` pick them up from this
 * table, so nothing else in this file needs to change. */
static const struct command commands[] = {
	{ "run", "run a program with its TCP connections switched", run_main, run_usage },
	{ "bench", "measure switched vs kernel TCP side by side", bench_main, bench_usage },
	{ "stat", "list switched sockets on this host", stat_main, stat_usage },
	{ "routes", "show which provider an address is routed to, and why", routes_main, routes_usage },
	{ "doctor", "check this host for what can be switched", doctor_main, doctor_usage },
	{ "params", "list the SOCKSWITCH_* settings: value, default, help", params_main, params_usage },
	{ "help", "show usage of sockswitch or of one command", help_main, help_usage },
	{ "bench-worker", NULL, bench_worker_main, NULL },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

int cli_is_help(const char *arg)
{
	return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			return &commands[i];
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch COMMAND [OPTIONS] [ARGS...]\n"
		"       sockswitch --help | --version\n"
		"\n"
		"Carries the TCP connections of unmodified programs over a faster\n"
		"transport (shared memory on this host) by preloading libsockswitch.so.\n"
		"\n"
		"commands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (commands[i].summary)
			fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
	fprintf(out,
		"\n"
		"Run `sockswitch COMMAND --help` (or `sockswitch help COMMAND`) for its options.\n"
		"\n"
		"environment:\n"
		"  SOCKSWITCH_LIB   path of libsockswitch.so to use instead of searching for it\n"
		"  (every SOCKSWITCH_* setting, its value here and default: sockswitch params)\n"
		"\n"
		"See sockswitch(1) and sockswitch.conf(5).\n");
}

static void help_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch help [COMMAND]\n"
		"\n"
		"Prints the usage of sockswitch, or of COMMAND with its options and\n"
		"environment variables (the same as `sockswitch COMMAND --help`).\n");
}

static int help_main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stdout);
		return CLI_EXIT_OK;
	}
	if (cli_is_help(argv[1])) {
		help_usage(stdout);
		return CLI_EXIT_OK;
	}
	const struct command *c = find_command(argv[1]);
	if (!c || !c->usage) {
		fprintf(stderr, "sockswitch help: unknown command '%s'\n\n", argv[1]);
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	c->usage(stdout);
	return CLI_EXIT_OK;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	const char *name = argv[1];
	if (cli_is_help(name)) {
		usage(stdout);
		return CLI_EXIT_OK;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
		printf("sockswitch %s (%s)\n", SSW_VERSION, SSW_BUILD_FACTS);
		return CLI_EXIT_OK;
	}
	const struct command *c = find_command(name);
	if (!c) {
		fprintf(stderr, "sockswitch: unknown command '%s'\n\n", name);
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	/* Answered here so that every command, including ones added later, has
	 * --help; a command's own parser also accepts it among its options. */
	if (argc >= 3 && cli_is_help(argv[2]) && c->usage) {
		c->usage(stdout);
		return CLI_EXIT_OK;
	}
	return c->main(argc - 1, argv + 1);
}
