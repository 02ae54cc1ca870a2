/* bench.h - the few helpers every benchmark program under perf/ shares:
 * the one clock (src/common/clock.h: rc_now_s) and a seeded shuffle
 * (splitmix64), so two programs given the same seed draw the same sample
 * order. Header-only: each program is one file plus this. */
#ifndef RC_PERF_BENCH_H
#define RC_PERF_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "clock.h"

static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Fisher-Yates over v[0..n) with the stream seeded by seed. */
static inline void shuffle(size_t *v, size_t n, uint64_t seed)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)(rng_next(&seed) % i);
		size_t t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
}

#endif
