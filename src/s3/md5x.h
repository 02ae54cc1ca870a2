/* md5x.h - the MD5s of several bodies at once, one body per SIMD lane
 * (md5x.c). MD5 is one long dependency chain per body, so a core runs
 * it at a fraction of its width; sixteen independent bodies side by side
 * in AVX-512 lanes keep the same chain length and do sixteen times the
 * work. Write-back hashes many upload parts at once (every object of a
 * save, several parts each): its digest threads take them together.
 *
 * The values are OpenSSL's (s3_md5_pieces), bit for bit; where the CPU
 * has no AVX-512F, or the crypto library refuses MD5 (FIPS), each body
 * goes through s3_md5_pieces one after the other. */
#ifndef RC_MD5X_H
#define RC_MD5X_H

#include <stdbool.h>

#include "s3_types.h"

#define MD5X_MAX 16

struct md5x_body {
	const struct s3_piece *pieces; /* the body, in order */
	unsigned n_pieces;
	unsigned char md5[16]; /* out */
	bool ok;               /* out: false when MD5 is refused (md5 zeroed) */
};

/* How many bodies md5x hashes side by side on this CPU: 16 or 1. */
unsigned md5x_lanes(void);

/* The MD5 of each of bodies[0..n), n <= MD5X_MAX (more are taken in
 * turns). Reads only the pieces; thread-safe. */
void md5x(struct md5x_body *bodies, unsigned n);

/* The same with the lanes forced off (false) or back to the CPU's
 * choice (true): tests compare both paths on one machine. */
void md5x_use_lanes(bool on);

#endif
