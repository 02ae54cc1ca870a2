/* s3_checksum.h - the integrity header values S3 takes (s3_checksum.c):
 * Content-MD5 and x-amz-checksum-crc32c, both base64.
 *
 * Use: out is the caller's buffer of the size shown, always NUL-ended. */
#ifndef RC_S3_CHECKSUM_H
#define RC_S3_CHECKSUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3_types.h"

/* The MD5 of a body: 0, or -1 where the crypto library has none (FIPS),
 * md5 then zeroed. */
int s3_md5(const void *data, size_t len, unsigned char md5[16]);
/* The same of a body in pieces, taken in order. */
int s3_md5_pieces(const struct s3_piece *pieces, unsigned n,
		  unsigned char md5[16]);
/* The SHA-256 of a body in pieces (sigv4's payload hash), or zeros
 * and -1. */
int s3_sha256_pieces(const struct s3_piece *pieces, unsigned n,
		     unsigned char sha256[32]);
/* Content-MD5 value of an MD5 s3_md5 took (24 chars + NUL); "" when it
 * failed (ok false): the server then refuses the request, clearly. */
void s3_md5_b64(const unsigned char md5[16], bool ok, char out[25]);
/* Content-MD5 value of a body: the two above. */
void s3_content_md5(const void *data, size_t len, char out[25]);
/* x-amz-checksum-crc32c value of a CRC-32C: base64 of its 4 big-endian
 * bytes (8 chars + NUL). The CRC itself comes from crc32c.h. */
void s3_crc32c_b64(uint32_t crc, char out[9]);

#endif
