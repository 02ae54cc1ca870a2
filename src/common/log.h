/* log.h - leveled logging to stderr (journald picks it up under systemd).
 * Never pass credentials to these functions. */
#ifndef RC_LOG_H
#define RC_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum rc_log_level { RC_LOG_ERROR = 0, RC_LOG_WARN, RC_LOG_INFO, RC_LOG_DEBUG };

extern _Atomic int rc_log_level; /* a reload sets it while shards log */

/* One line per call: any control character that reaches the line (a
 * client's key, an S3 message) is written as \xNN, so no value can end
 * the line or forge another. */
void rc_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* s as a log-safe string: bytes outside printable ASCII, and the backslash itself, as
 * \xNN, so the logged text names exactly the bytes a client or S3 sent.
 * Returns one of a few per-thread buffers, valid until the fourth next
 * call on the same thread: use it directly as a printf argument. NULL
 * gives "(null)". Every client- or S3-controlled string goes through it. */
const char *rc_esc(const char *s);

#define log_error(...) rc_log(RC_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) rc_log(RC_LOG_WARN, __VA_ARGS__)
#define log_info(...) rc_log(RC_LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                                      \
	do {                                                                \
		if (rc_log_level >= RC_LOG_DEBUG)                           \
			rc_log(RC_LOG_DEBUG, __VA_ARGS__);                  \
	} while (0)

/* One call site's share of the log: a line that a client or S3 can make
 * the daemon repeat (a missing key, a broken reply) is logged at most
 * RC_LOG_PER_SEC times a second from that site; the next line logged
 * from it says how many similar lines were suppressed meanwhile. Any
 * thread (the counts are atomics; a second's count may be off by a line
 * or two when threads race, never unbounded). */
struct rc_log_limit {
	_Atomic uint64_t second;     /* 1 + the monotonic second counted */
	_Atomic uint32_t lines;      /* lines logged in it */
	_Atomic uint64_t suppressed; /* dropped since the last line logged */
};
#define RC_LOG_PER_SEC 10u

/* The rule alone (now_ns: rc_now_ns()): true if a line may be logged now;
 * then *suppressed is the count dropped since the last one (and reset). */
bool rc_log_limit_pass(struct rc_log_limit *l, uint64_t now_ns,
		       unsigned per_sec, uint64_t *suppressed);
void rc_log_limited(struct rc_log_limit *l, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* rc_log, rate-limited per call site. */
#define log_limited(level, ...)                                             \
	do {                                                                \
		static struct rc_log_limit rc_log_site_;                    \
		rc_log_limited(&rc_log_site_, level, __VA_ARGS__);          \
	} while (0)

/* Formats an error message into a caller's buffer (err may be NULL or
 * errlen 0: nothing is written). The one way subsystems hand errors up. */
void rc_set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Parses "error", "warn", "info", "debug"; returns -1 if unknown. */
int rc_log_level_parse(const char *s);

#endif
