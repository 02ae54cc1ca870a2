/* log.c - owns the daemon's log line format and level. */
#include "log.h"

#include "clock.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

_Atomic int rc_log_level = RC_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* A key is at most RC_MAX_KEY (1024) bytes: escaped, at most 4 times that. */
#define ESC_MAX 4200
#define LINE_MAX_BYTES 16384

/* strict: also bytes above ASCII and the escape character itself, so the
 * text maps back to exactly one byte string. */
static bool needs_escape(unsigned char c, bool strict)
{
	if (c < 0x20 || c == 0x7f)
		return true;
	return strict && (c > 0x7f || c == '\\');
}

/* Copies src into dst (size > 0), writing bytes needs_escape() names as
 * \xNN; "..." marks a cut when dst is too small. */
static void escape_into(char *dst, size_t size, const char *src,
			bool strict)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (const unsigned char *c = (const unsigned char *)src; *c; c++) {
		size_t need = needs_escape(*c, strict) ? 4 : 1;
		if (o + need + 4 > size) {
			memcpy(dst + o, "...", 4);
			return;
		}
		if (need == 1) {
			dst[o++] = (char)*c;
			continue;
		}
		dst[o++] = '\\';
		dst[o++] = 'x';
		dst[o++] = hex[*c >> 4];
		dst[o++] = hex[*c & 15];
	}
	dst[o] = '\0';
}

const char *rc_esc(const char *s)
{
	static _Thread_local char bufs[4][ESC_MAX];
	static _Thread_local unsigned next;
	char *b = bufs[next++ & 3];
	escape_into(b, ESC_MAX, s ? s : "(null)", true);
	return b;
}

void rc_log(int level, const char *fmt, ...)
{
	if (level > rc_log_level)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	char line[LINE_MAX_BYTES];
	int n = snprintf(line, sizeof(line),
			 "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
			 tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
			 level_names[level]);
	va_list ap;
	va_start(ap, fmt);
	char text[LINE_MAX_BYTES];
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	/* Whatever a caller forgot to rc_esc() still stays on this line. */
	escape_into(line + n, sizeof(line) - (size_t)n, text, false);
	fprintf(stderr, "%s\n", line);
}

bool rc_log_limit_pass(struct rc_log_limit *l, uint64_t now_ns,
		       unsigned per_sec, uint64_t *suppressed)
{
	uint64_t sec = now_ns / 1000000000ull + 1;
	uint64_t cur = atomic_load_explicit(&l->second, memory_order_relaxed);
	if (cur != sec && atomic_compare_exchange_strong_explicit(
				  &l->second, &cur, sec, memory_order_relaxed,
				  memory_order_relaxed))
		atomic_store_explicit(&l->lines, 0, memory_order_relaxed);
	if (atomic_fetch_add_explicit(&l->lines, 1, memory_order_relaxed) <
	    per_sec) {
		*suppressed = atomic_exchange_explicit(&l->suppressed, 0,
						       memory_order_relaxed);
		return true;
	}
	atomic_fetch_add_explicit(&l->suppressed, 1, memory_order_relaxed);
	return false;
}

void rc_log_limited(struct rc_log_limit *l, int level, const char *fmt, ...)
{
	uint64_t suppressed;
	if (level > rc_log_level ||
	    !rc_log_limit_pass(l, rc_now_ns(), RC_LOG_PER_SEC, &suppressed))
		return;
	char text[LINE_MAX_BYTES - 64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (suppressed)
		rc_log(level, "%s (%llu similar lines suppressed)", text,
		       (unsigned long long)suppressed);
	else
		rc_log(level, "%s", text);
}

int rc_log_level_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

void rc_set_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}
