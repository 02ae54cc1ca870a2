/* log.h - leveled logging to stderr (journald picks it up under systemd).
 * Never pass credentials to these functions. */
#ifndef RC_LOG_H
#define RC_LOG_H

enum rc_log_level { RC_LOG_ERROR = 0, RC_LOG_WARN, RC_LOG_INFO, RC_LOG_DEBUG };

extern int rc_log_level;

void rc_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_error(...) rc_log(RC_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) rc_log(RC_LOG_WARN, __VA_ARGS__)
#define log_info(...) rc_log(RC_LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                                      \
	do {                                                                \
		if (rc_log_level >= RC_LOG_DEBUG)                           \
			rc_log(RC_LOG_DEBUG, __VA_ARGS__);                  \
	} while (0)

/* Parses "error", "warn", "info", "debug"; returns -1 if unknown. */
int rc_log_level_parse(const char *s);

#endif
