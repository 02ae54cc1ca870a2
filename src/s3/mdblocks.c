/* mdblocks.c - owns the block reader of the lane-parallel digests
 * (mdblocks.h): whole blocks straight from the pieces, blocks that straddle
 * pieces and the padding through its own buffer. */
#include "mdblocks.h"

#include <string.h>

void mdblocks_init(struct mdblocks *r, const struct s3_piece *pieces,
		   unsigned n, bool length_be)
{
	memset(r, 0, offsetof(struct mdblocks, buf));
	r->p = pieces;
	r->n = pieces ? n : 0;
	r->length_be = length_be;
}

void mdblocks_none(struct mdblocks *r)
{
	memset(r, 0, offsetof(struct mdblocks, buf));
	r->ended = true;
}

const uint8_t *mdblocks_next_slow(struct mdblocks *r)
{
	if (r->pad_left) {
		r->pad_left--;
		return r->buf + 64 * r->pad_next++;
	}
	if (r->ended)
		return NULL;
	while (r->i < r->n && r->off == r->p[r->i].len) {
		r->i++;
		r->off = 0;
	}
	const uint8_t *whole = mdblocks_whole(r); /* past empty pieces */
	if (whole)
		return whole;
	size_t got = 0;
	while (got < 64 && r->i < r->n) {
		size_t left = r->p[r->i].len - r->off;
		size_t take = left < 64 - got ? left : 64 - got;
		if (take)
			memcpy(r->buf + got,
			       (const uint8_t *)r->p[r->i].data + r->off, take);
		got += take;
		r->off += take;
		if (r->off == r->p[r->i].len) {
			r->i++;
			r->off = 0;
		}
	}
	r->total += got;
	if (got == 64)
		return r->buf;
	/* The body ends in this block: 0x80, zeros, the length in bits. */
	r->ended = true;
	unsigned blocks = got < 56 ? 1 : 2;
	r->buf[got] = 0x80;
	memset(r->buf + got + 1, 0, blocks * 64 - got - 1);
	uint64_t bits = r->total * 8;
	uint8_t *len = r->buf + blocks * 64 - 8;
	for (unsigned k = 0; k < 8; k++)
		len[r->length_be ? 7 - k : k] = (uint8_t)(bits >> (8 * k));
	r->pad_left = blocks - 1;
	r->pad_next = 1;
	return r->buf;
}
