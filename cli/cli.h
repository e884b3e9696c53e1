/* cli.h — the contract between main.c's command table and each subcommand. */
#ifndef SSW_CLI_H
#define SSW_CLI_H

#include <stddef.h>
#include <stdio.h>

#define SSW_VERSION "0.1.0"

/* Conventional exit codes, so scripts can tell a usage mistake from a failure. */
enum {
	CLI_EXIT_OK = 0,
	CLI_EXIT_FAIL = 1,
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_NOEXEC = 126,   /* like a shell: found but cannot be executed */
	CLI_EXIT_NOTFOUND = 127, /* like a shell: command or library missing */
};

/* A subcommand gets argv with argv[0] = its own name, getopt-style. */
typedef int (*cli_main_fn)(int argc, char **argv);
/* Prints the command's full usage (synopsis, options, environment) to out. */
typedef void (*cli_usage_fn)(FILE *out);

int run_main(int argc, char **argv);
void run_usage(FILE *out);

int bench_main(int argc, char **argv);
void bench_usage(FILE *out);

int stat_main(int argc, char **argv);
void stat_usage(FILE *out);

int routes_main(int argc, char **argv);
void routes_usage(FILE *out);

int doctor_main(int argc, char **argv);
void doctor_usage(FILE *out);

int params_main(int argc, char **argv);
void params_usage(FILE *out);

/* Applies --conf FILE / --routes RULES (either may be NULL) to this process's
 * environment, as `run` passes them to a program; -1 with a message on stderr. */
int cli_apply_config(const char *cmd, const char *conf, const char *routes);
/* --conf FILE checked as the library will read it (a regular file nobody
 * else planted) and made absolute into out; -1 with a message on stderr. */
int cli_conf_path(const char *cmd, const char *conf, char *out, size_t outlen);

struct ssw_routes;
/* Loads the configuration the library would load from the environment (the
 * tunables and the routing table into *out).  On error: -1, the one-line
 * message in err, and printed as "sockswitch CMD: message" unless cmd is NULL. */
int cli_check_config(const char *cmd, struct ssw_routes *out, char *err, size_t errlen);

/* Hidden: the process that bench re-executes for each side of a measurement. */
int bench_worker_main(int argc, char **argv);

/* True when arg is "--help" or "-h": every command answers it the same way. */
int cli_is_help(const char *arg);

#endif
