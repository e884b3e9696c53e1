/* params.c — `sockswitch params`: every SOCKSWITCH_* setting from the one
 * table the library parses (src/common/params.c), with its value in this
 * environment, whether that value is accepted, its default and its help. */
#include "cli.h"

#include "common/params.h"
#include "json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void params_usage(FILE *out)
{
	fprintf(out,
		"usage: sockswitch params [--json] [--set] [NAME...]\n"
		"\n"
		"Lists the settings of the switch (environment variables SOCKSWITCH_*):\n"
		"name, value in this environment, what is accepted, default, who reads it\n"
		"and what it does.  A rejected value is shown with the one line the\n"
		"library prints for it and what happens then (the default is used, or\n"
		"the switch stays off and programs use kernel TCP).\n"
		"\n"
		"options:\n"
		"  --json   one JSON array of objects (name, value, valid, error, accepted,\n"
		"           default, on_error, used_by, help)\n"
		"  --set    only the variables set in this environment\n"
		"  NAME     only these variables (with or without the SOCKSWITCH_ prefix)\n"
		"\n"
		"exit status: 0; 1 if a value set is rejected; 2 for a usage error\n"
		"(an unknown NAME).\n");
}

/* Values come from the environment: nothing unescaped reaches a terminal. */
static void print_safe(const char *s)
{
	for (; *s; s++)
		putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

static int find(const char *name)
{
	for (int i = 0; i < SSW_P_COUNT; i++)
		if (!strcmp(ssw_params[i].name, name) ||
		    (!strncmp(ssw_params[i].name, "SOCKSWITCH_", 11) && !strcasecmp(ssw_params[i].name + 11, name)))
			return i;
	return -1;
}

static const char *on_error(const struct ssw_param *p)
{
	return p->bad == SSW_PB_OFF ? (p->cli ? "refused" : "switch off") : "default";
}

static void print_text(int i, bool first)
{
	const struct ssw_param *p = &ssw_params[i];
	const struct ssw_param_value *v = ssw_param(i);
	const char *raw = getenv(p->name);
	char acc[200], line[512];
	ssw_param_accepted(p, acc, sizeof acc);
	printf("%s%s", first ? "" : "\n", p->name);
	if (v->set) {
		printf(" = ");
		print_safe(raw);
	} else {
		printf(" (not set)");
	}
	printf("\n    %s\n    accepts %s; default %s; read by %s\n", p->help, acc, p->def, p->users);
	if (v->invalid) {
		ssw_param_problem(i, line, sizeof line);
		printf("    REJECTED: ");
		print_safe(line);
		printf("\n");
	}
}

static void json_field(const char *key, const char *val, bool comma)
{
	printf("\"%s\": ", key);
	if (val)
		cli_json_str(val);
	else
		printf("null");
	if (comma)
		printf(", ");
}

static void print_json(int i, bool first)
{
	const struct ssw_param *p = &ssw_params[i];
	const struct ssw_param_value *v = ssw_param(i);
	char acc[200];
	ssw_param_accepted(p, acc, sizeof acc);
	printf("%s{", first ? "" : ",\n ");
	json_field("name", p->name, true);
	json_field("value", v->set ? getenv(p->name) : NULL, true);
	printf("\"valid\": %s, ", v->invalid ? "false" : "true");
	json_field("error", ssw_param_error(i), true);
	json_field("accepted", acc, true);
	json_field("default", p->def, true);
	json_field("on_error", on_error(p), true);
	json_field("used_by", p->users, true);
	json_field("help", p->help, false);
	printf("}");
}

int params_main(int argc, char **argv)
{
	bool json = false, only_set = false;
	bool pick[SSW_P_COUNT] = { false }, picked = false;
	for (int i = 1; i < argc; i++) {
		if (cli_is_help(argv[i])) {
			params_usage(stdout);
			return CLI_EXIT_OK;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--set")) {
			only_set = true;
		} else if (find(argv[i]) >= 0) {
			pick[find(argv[i])] = picked = true;
		} else {
			fprintf(stderr, "sockswitch params: unknown setting or option '%s'\n\n", argv[i]);
			params_usage(stderr);
			return CLI_EXIT_USAGE;
		}
	}
	ssw_params_load();
	int shown = 0, bad = 0;
	if (json)
		printf("[");
	for (int i = 0; i < SSW_P_COUNT; i++) {
		if ((picked && !pick[i]) || (only_set && !ssw_param(i)->set))
			continue;
		bad += ssw_param(i)->invalid;
		if (json)
			print_json(i, shown == 0);
		else
			print_text(i, shown == 0);
		shown++;
	}
	if (json)
		printf("]\n");
	return bad ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
