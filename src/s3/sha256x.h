/* sha256x.h - the SHA-256s of several bodies at once, two interleaved
 * (sha256x.c). A core's SHA-NI rounds instruction has a latency of twice
 * its issue interval, so one body's chain of rounds leaves it half idle;
 * two independent bodies keep it busy and take the time of one. Write-back
 * hashes many upload parts at once (the SigV4 payload hash of each): its
 * digest threads take them together, as for md5x.h.
 *
 * The values are OpenSSL's (s3_sha256_pieces), bit for bit; where the CPU
 * has no SHA-NI, or OpenSSL runs in FIPS mode (a validated module's
 * digests only), each body goes through s3_sha256_pieces one after the
 * other, as does a lone body. */
#ifndef RC_SHA256X_H
#define RC_SHA256X_H

#include <stdbool.h>

#include "s3_types.h"

struct sha256x_body {
	const struct s3_piece *pieces; /* the body, in order */
	unsigned n_pieces;
	unsigned char sha256[32]; /* out */
	bool ok;                  /* out: false when the library failed */
};

/* How many bodies sha256x hashes side by side on this CPU: 2 or 1. */
unsigned sha256x_lanes(void);

/* The SHA-256 of each of bodies[0..n). Reads only the pieces;
 * thread-safe. */
void sha256x(struct sha256x_body *bodies, unsigned n);

/* The same with the lanes forced off (false) or back to the CPU's choice
 * (true): tests compare both paths on one machine. */
void sha256x_use_lanes(bool on);

#endif
