/* log.c — formats log lines and writes them with a raw syscall, so logging never
 * re-enters the interposed socket API nor depends on stdio state. */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int log_level = SSW_LOG_WARN;
static int log_fd = 2;

int ssw_log_init(char *err, unsigned errlen)
{
	const char *lvl = getenv("SOCKSWITCH_LOG");
	const char *file = getenv("SOCKSWITCH_LOG_FILE");
	int rc = 0;

	if (file && *file) {
		int fd = (int)syscall(SYS_openat, AT_FDCWD, file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd >= 0)
			log_fd = fd;
		else if (err) {
			snprintf(err, errlen, "SOCKSWITCH_LOG_FILE=%s: %s (logging to stderr)", file, strerror(errno));
			rc = -1;
		}
	}
	if (lvl && *lvl) {
		static const char *names[] = { "error", "warn", "info", "debug" };
		int found = -1;
		for (int i = 0; i < 4; i++)
			if (!strcasecmp(lvl, names[i]))
				found = i;
		if (found >= 0)
			log_level = found;
		else if (err && rc == 0) {
			snprintf(err, errlen, "SOCKSWITCH_LOG=%s: expected error, warn, info or debug", lvl);
			rc = -1;
		}
	}
	return rc;
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
