/* fuzz_creds_json.c - the credentials document the container and IMDS
 * sources answer (creds.c's JSON reader). Accepted credentials are never
 * empty and end inside their buffers; refused ones leave nothing behind. */
#include <string.h>

#include "creds.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rc_creds c;
	char err[256];
	if (creds_parse_json((const char *)data, size, &c, err,
			     sizeof(err)) == 0) {
		FUZZ_CHECK(memchr(c.access_key, '\0', sizeof(c.access_key)));
		FUZZ_CHECK(memchr(c.secret_key, '\0', sizeof(c.secret_key)));
		FUZZ_CHECK(memchr(c.session_token, '\0',
				  sizeof(c.session_token)));
		FUZZ_CHECK(c.access_key[0] && c.secret_key[0]);
	} else {
		static const struct rc_creds zero;
		FUZZ_CHECK(memcmp(&c, &zero, sizeof(c)) == 0);
		FUZZ_CHECK(memchr(err, '\0', sizeof(err)) && err[0]);
	}
	return 0;
}
