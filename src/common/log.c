/* log.c — formats log lines and writes them with a raw syscall, so logging never
 * re-enters the interposed socket API nor depends on stdio state. */
#include "common/log.h"

#include "common/params.h"
#include "common/safefile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int log_level = SSW_LOG_WARN;
static int log_fd = 2;

int ssw_log_init(char *err, unsigned errlen)
{
	ssw_params_load();
	const char *file = ssw_param_str(SSW_P_LOG_FILE);
	/* a rejected level is reported with the other settings (init.c) */
	log_level = ssw_param_choice(SSW_P_LOG);
	if (!file || !*file)
		return 0;
	char why[256];
	int fd = ssw_file_open(file, SSW_FILE_APPEND, why, sizeof why);
	if (fd >= 0) {
		log_fd = fd;
		return 0;
	}
	if (err)
		snprintf(err, errlen, "SOCKSWITCH_LOG_FILE=%s: %s (logging to stderr)", file, why);
	return -1;
}

int ssw_log_enabled(enum ssw_log_level lvl)
{
	return (int)lvl <= log_level;
}

void ssw_log(enum ssw_log_level lvl, const char *fmt, ...)
{
	static const char *tags[] = { "error", "warn", "info", "debug" };
	char line[1024];
	int saved = errno;
	if (!ssw_log_enabled(lvl)) {
		errno = saved;
		return;
	}
	int n = snprintf(line, sizeof line, "sockswitch[%d] %s: ", (int)getpid(), tags[lvl]);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof line - 2)
		len = sizeof line - 2;
	line[len++] = '\n';
	(void)!syscall(SYS_write, log_fd, line, len);
	errno = saved;
}

int ssw_log_fd(void)
{
	return log_fd;
}
