/* mdblocks.h - a body given in pieces, as the 64-byte blocks an MD5 or a
 * SHA-256 compresses: its bytes, then the Merkle-Damgard padding (0x80,
 * zeros, the length in bits). The two digests differ only in the length's
 * byte order. The lane-parallel digests (md5x.c, sha256x.c) run one reader
 * per lane. */
#ifndef RC_MDBLOCKS_H
#define RC_MDBLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3_types.h"

struct mdblocks {
	const struct s3_piece *p;
	unsigned n, i;   /* pieces, the current one */
	size_t off;      /* in the current piece */
	uint64_t total;  /* bytes handed out */
	unsigned pad_left, pad_next;
	bool ended, length_be;
	_Alignas(64) uint8_t buf[128]; /* a block across pieces, or the tail */
};

/* pieces may be NULL when n is 0 (an empty body); length_be: the padding's
 * length big-endian (SHA-256) rather than little-endian (MD5). */
void mdblocks_init(struct mdblocks *r, const struct s3_piece *pieces,
		   unsigned n, bool length_be);

/* A reader that hands out nothing: a lane without a body. */
void mdblocks_none(struct mdblocks *r);

/* The block that straddles pieces, the padding, or NULL after the last. */
const uint8_t *mdblocks_next_slow(struct mdblocks *r);

/* The next 64 bytes straight from the current piece, where it holds them
 * (and no padding is pending); else NULL. */
static inline const uint8_t *mdblocks_whole(struct mdblocks *r)
{
	if (r->pad_left || r->i >= r->n || r->p[r->i].len - r->off < 64)
		return NULL;
	const uint8_t *b = (const uint8_t *)r->p[r->i].data + r->off;
	r->off += 64;
	r->total += 64;
	return b;
}

/* The next block, valid until the next call; NULL after the last. Inline:
 * the digests take one per lane per round. */
static inline const uint8_t *mdblocks_next(struct mdblocks *r)
{
	const uint8_t *b = mdblocks_whole(r);
	return b ? b : mdblocks_next_slow(r);
}

#endif
