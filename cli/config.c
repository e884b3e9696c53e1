/* config.c — the configuration checks CLI commands share: apply --conf /
 * --routes like the library will see them, and report a bad configuration
 * in one line naming the file (or variable) and line, as the library would. */
#include "cli.h"

#include "common/params.h"
#include "common/safefile.h"
#include "session/session.h"
#include "switch/route/route.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_conf_path(const char *cmd, const char *conf, char *out, size_t outlen)
{
	char why[256], cwd[PATH_MAX];
	/* the checks the library will make, said now, before anything runs */
	int fd = ssw_file_open(conf, SSW_FILE_READ, why, sizeof why);
	if (fd < 0) {
		fprintf(stderr, "sockswitch %s: %s: cannot read: %s\n", cmd, conf, why);
		return -1;
	}
	close(fd);
	/* A program may chdir before the switch reads the file: the name is made
	 * absolute, without resolving links (realpath would turn a link the
	 * library must judge into its target). */
	if (conf[0] != '/' && !getcwd(cwd, sizeof cwd)) {
		fprintf(stderr, "sockswitch %s: --conf %s: %s\n", cmd, conf, strerror(errno));
		return -1;
	}
	int n = conf[0] == '/' ? snprintf(out, outlen, "%s", conf) : snprintf(out, outlen, "%s/%s", cwd, conf);
	if (n < 0 || (size_t)n >= outlen) {
		fprintf(stderr, "sockswitch %s: --conf %s: %s\n", cmd, conf, strerror(ENAMETOOLONG));
		return -1;
	}
	return 0;
}

int cli_apply_config(const char *cmd, const char *conf, const char *routes)
{
	static char conf_abs[PATH_MAX];
	if (conf) {
		if (cli_conf_path(cmd, conf, conf_abs, sizeof conf_abs) < 0)
			return -1;
		if (setenv("SOCKSWITCH_CONF", conf_abs, 1) < 0)
			goto nomem;
	}
	if (routes && setenv("SOCKSWITCH_ROUTES", routes, 1) < 0)
		goto nomem;
	return 0;
nomem:
	fprintf(stderr, "sockswitch %s: out of memory\n", cmd);
	return -1;
}

int cli_check_config(const char *cmd, struct ssw_routes *out, char *err, size_t errlen)
{
	ssw_params_load();
	int bad = ssw_params_first_refusal();
	if (bad >= 0)
		snprintf(err, errlen, "%s", ssw_param_error(bad));
	if (bad >= 0 || ssw_session_config_load(err, errlen) < 0 || ssw_routes_load(out, err, errlen) < 0) {
		if (cmd)
			fprintf(stderr, "sockswitch %s: %s\n", cmd, err);
		return -1;
	}
	return 0;
}
