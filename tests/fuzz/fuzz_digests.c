/* fuzz_digests.c - the lane-parallel digests of upload parts against
 * OpenSSL's: the MD5s of md5x.c and the SHA-256s of sha256x.c. The
 * input's first byte says how many bodies (1 to 2 x MD5X_MAX, more than
 * one batch), the next two bytes of each a length and where its pieces
 * are cut (empty pieces included); the rest is the bytes they hash,
 * bodies overlapping. Every body's digests must be OpenSSL's. */
#include <string.h>

#include "fuzz.h"
#include "md5x.h"
#include "s3_checksum.h"
#include "sha256x.h"

#define MAX_BODIES (2 * MD5X_MAX)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned n = 1 + data[0] % MAX_BODIES;
	if (size < 1 + 2 * (size_t)n)
		return 0;
	const uint8_t *hdr = data + 1, *bytes = data + 1 + 2 * n;
	size_t avail = size - 1 - 2 * n;
	struct s3_piece pieces[MAX_BODIES][3];
	struct md5x_body bodies[MAX_BODIES];
	struct sha256x_body shas[MAX_BODIES];
	for (unsigned k = 0; k < n; k++) {
		size_t len = avail ? (hdr[2 * k] * 7u + k) % (avail + 1) : 0;
		size_t start = avail - len ? (k * 13u) % (avail - len + 1) : 0;
		size_t cut = len ? (hdr[2 * k + 1] * 3u) % (len + 1) : 0;
		const uint8_t *b = bytes + start;
		pieces[k][0] = (struct s3_piece){b, cut};
		pieces[k][1] = (struct s3_piece){b + cut, 0};
		pieces[k][2] = (struct s3_piece){b + cut, len - cut};
		bodies[k] = (struct md5x_body){.pieces = pieces[k],
					       .n_pieces = 3};
		shas[k] = (struct sha256x_body){.pieces = pieces[k],
						.n_pieces = 3};
	}
	/* now and then the other path */
	md5x_use_lanes(data[0] < 0xf0);
	sha256x_use_lanes(data[0] < 0xe8 || data[0] >= 0xf0);
	md5x(bodies, n);
	sha256x(shas, n);
	for (unsigned k = 0; k < n; k++) {
		unsigned char want[32];
		FUZZ_CHECK(s3_md5_pieces(pieces[k], 3, want) == 0);
		FUZZ_CHECK(bodies[k].ok);
		FUZZ_CHECK(memcmp(bodies[k].md5, want, 16) == 0);
		FUZZ_CHECK(s3_sha256_pieces(pieces[k], 3, want) == 0);
		FUZZ_CHECK(shas[k].ok);
		FUZZ_CHECK(memcmp(shas[k].sha256, want, 32) == 0);
	}
	return 0;
}
