/* sample.h - how much of a long loop a unit test runs. A loop whose every
 * step costs real work (a journal replay per crash cut) runs in full in
 * the plain build, where a step takes milliseconds; under ASan or TSan a
 * step costs 10-50 times more and a loaded machine stretches that again,
 * so there it runs its edges plus a seeded random subset, a different one
 * each run. RINGCACHE_TEST_LONG=1 (tests/run --long) runs every step in
 * every build; RINGCACHE_TEST_SEED=N repeats a run's subset (the seed is
 * logged). Header-only: each test program includes it once. */
#ifndef RC_TESTS_SAMPLE_H
#define RC_TESTS_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RC_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RC_TEST_SANITIZED 1
#endif
#endif
#ifndef RC_TEST_SANITIZED
#define RC_TEST_SANITIZED 0
#endif

/* True when every step of a sampled loop runs. */
static inline bool sample_all(void)
{
	const char *l = getenv("RINGCACHE_TEST_LONG");
	return !RC_TEST_SANITIZED || (l && *l && strcmp(l, "0") != 0);
}

/* How many rounds a loop of identical rounds runs: `full`, or `fewer`
 * under a sanitizer (unless RINGCACHE_TEST_LONG). */
static inline unsigned sample_rounds(unsigned full, unsigned fewer)
{
	return sample_all() ? full : fewer;
}

/* Picks steps of a loop of n: every step when sample_all(), else each
 * step already marked in keep[] (the edges) plus `extra` more drawn with a
 * logged seed. keep[i] is true for each step to run; returns how many. */
static inline size_t sample_steps(const char *what, bool *keep, size_t n,
				  size_t extra)
{
	size_t kept = 0;
	if (sample_all()) {
		for (size_t i = 0; i < n; i++)
			keep[i] = true;
		return n;
	}
	const char *s = getenv("RINGCACHE_TEST_SEED");
	uint64_t seed = s && *s ? strtoull(s, NULL, 0)
				: (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	if (x == 0)
		x = 1; /* xorshift's one fixed point */
	for (size_t i = 0; i < n; i++)
		kept += keep[i];
	size_t edges = kept;
	/* Draws until `extra` new steps are marked (or all are). */
	for (size_t added = 0; added < extra && kept < n;) {
		x ^= x >> 12, x ^= x << 25, x ^= x >> 27; /* xorshift64* */
		size_t i = (size_t)((x * 0x2545f4914f6cdd1dull) % n);
		if (!keep[i]) {
			keep[i] = true;
			kept++;
			added++;
		}
	}
	/* On stderr: meson's log keeps it, a failing test's message names
	 * the step, the seed brings back the same set. */
	fprintf(stderr, "%s: a sanitizer build runs %zu of %zu steps (%zu "
		"edges, the rest drawn with RINGCACHE_TEST_SEED=%llu; "
		"RINGCACHE_TEST_LONG=1 runs all)\n", what, kept, n, edges,
		(unsigned long long)seed);
	return kept;
}

#endif
