/* decimal.h - the one strict reader of an unsigned decimal number from
 * bytes that are not NUL-ended: HTTP header values (Content-Length,
 * Content-Range, the status code) and XML text (<Size>, <PartNumber>).
 *
 * Use: rc_parse_dec_u64(s, n, &v) is true when s[0..n) is 1..20 ASCII
 * digits whose value fits 64 bits; then v is set, else v is untouched.
 * No sign, blank, base prefix or locale: every byte may be hostile. */
#ifndef RC_DECIMAL_H
#define RC_DECIMAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool rc_parse_dec_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0 || n > 20)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

#endif
