/* config.c — the configuration checks CLI commands share: apply --conf /
 * --routes like the library will see them, and report a bad configuration
 * in one line naming the file (or variable) and line, as the library would. */
#include "cli.h"

#include "common/params.h"
#include "session/session.h"
#include "switch/route.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cli_apply_config(const char *cmd, const char *conf, const char *routes)
{
	static char conf_abs[PATH_MAX];
	if (conf) {
		/* a program may chdir before the switch reads the file */
		if (access(conf, R_OK) < 0 || !realpath(conf, conf_abs)) {
			fprintf(stderr, "sockswitch %s: --conf %s: %s\n", cmd, conf, strerror(errno));
			return -1;
		}
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
