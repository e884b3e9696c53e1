/* log.h — the switch's logging: quiet by default, SOCKSWITCH_LOG / SOCKSWITCH_LOG_FILE. */
#ifndef SSW_LOG_H
#define SSW_LOG_H

enum ssw_log_level { SSW_LOG_ERROR = 0, SSW_LOG_WARN, SSW_LOG_INFO, SSW_LOG_DEBUG };

/* Applies SOCKSWITCH_LOG / SOCKSWITCH_LOG_FILE from the settings table (a
 * rejected level counts as warn; the table reports it).  Returns 0, or -1
 * and a message in err when the log file cannot be used (stderr then). */
int ssw_log_init(char *err, unsigned errlen);
int ssw_log_enabled(enum ssw_log_level lvl);
/* The fd log lines go to (2, or SOCKSWITCH_LOG_FILE's). */
int ssw_log_fd(void);
void ssw_log(enum ssw_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SSW_ERROR(...) ssw_log(SSW_LOG_ERROR, __VA_ARGS__)
#define SSW_WARN(...) ssw_log(SSW_LOG_WARN, __VA_ARGS__)
#define SSW_INFO(...) do { if (ssw_log_enabled(SSW_LOG_INFO)) ssw_log(SSW_LOG_INFO, __VA_ARGS__); } while (0)
#define SSW_DEBUG(...) do { if (ssw_log_enabled(SSW_LOG_DEBUG)) ssw_log(SSW_LOG_DEBUG, __VA_ARGS__); } while (0)
/* Log at most once per call site (internal failures that fall back to TCP). */
#define SSW_WARN_ONCE(...) do { static int once_; if (!__atomic_exchange_n(&once_, 1, __ATOMIC_RELAXED)) ssw_log(SSW_LOG_WARN, __VA_ARGS__); } while (0)

#endif
