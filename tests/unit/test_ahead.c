/* test_ahead.c - the mount's fetch-ahead detector (src/client/ahead.c)
 * without a mount: a reader walking a directory in listing order (alone,
 * or one of N sharing the walk) gets the files ahead of it fetched, never
 * more than AHEAD_MAX ahead and never one twice; the window opens at
 * AHEAD_MIN and doubles; a step back or a jump closes it; readers in
 * random order get nothing; more readers than slots forget the oldest. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/client/ahead.h"

#define FILES 2000u

/* Walks files first, first + step, ... as reader; returns the files
 * fetched and checks each against what it has read and was fetched. */
static unsigned walk(struct ahead *a, uint64_t reader, uint32_t first,
		     uint32_t step, uint32_t files, bool *fetched)
{
	unsigned n = 0;
	for (uint32_t i = first; i < files; i += step) {
		struct ahead_fetch f = ahead_note(a, reader, 7, i);
		cr_assert(f.count == 0 || f.stride == step,
			  "reader %llu at %u: step %u, not %u",
			  (unsigned long long)reader, i, f.stride, step);
		cr_assert_leq(f.window, AHEAD_MAX);
		for (uint32_t k = 0; k < f.count; k++) {
			uint32_t x = f.first + k * f.stride;
			cr_assert_gt(x, i, "fetched %u behind the reader at %u",
				     x, i);
			cr_assert_leq((x - i) / step, AHEAD_MAX,
				      "%u is more than %u files ahead of %u",
				      x, AHEAD_MAX, i);
			cr_assert(x < FILES + AHEAD_MAX * step);
			cr_assert(!fetched[x], "%u fetched twice", x);
			fetched[x] = true;
			n++;
		}
	}
	return n;
}

Test(ahead, one_reader_in_order_gets_a_window_that_doubles_to_its_bound)
{
	static struct ahead a;
	static bool fetched[FILES + AHEAD_MAX * 16];
	memset(&a, 0, sizeof(a));
	uint32_t windows[8] = {0}, w = 0;
	for (uint32_t i = 0; i < 12; i++) {
		struct ahead_fetch f = ahead_note(&a, 1, 7, i);
		cr_assert_eq(f.count == 0, i < AHEAD_CONFIRM,
			     "file %u: %u fetched", i, f.count);
		if (f.count && w < 8)
			windows[w++] = f.window;
	}
	cr_assert_eq(windows[0], AHEAD_MIN);
	for (uint32_t k = 1; k < w; k++)
		cr_assert_eq(windows[k], windows[k - 1] * 2 > AHEAD_MAX
			     ? AHEAD_MAX : windows[k - 1] * 2);
	cr_assert_eq(windows[w - 1], AHEAD_MAX);
	memset(&a, 0, sizeof(a));
	unsigned n = walk(&a, 1, 0, 1, FILES, fetched);
	/* every file but the first AHEAD_CONFIRM + 1, and AHEAD_MAX past
	 * the end (the caller drops what the listing lacks) */
	cr_assert_eq(n, FILES - AHEAD_CONFIRM - 1 + AHEAD_MAX);
}

Test(ahead, readers_sharing_a_walk_each_fetch_their_own_files)
{
	static struct ahead a;
	static bool fetched[FILES + AHEAD_MAX * 16];
	memset(&a, 0, sizeof(a));
	/* 8 readers, reader r every 8th file from r, taking turns */
	for (uint32_t i = 0; i < FILES; i++) {
		struct ahead_fetch f = ahead_note(&a, 100 + i % 8, 7, i);
		for (uint32_t k = 0; k < f.count; k++) {
			uint32_t x = f.first + k * f.stride;
			cr_assert_eq(f.stride, 8);
			cr_assert_eq(x % 8, i % 8, "reader %u fetched %u",
				     i % 8, x);
			cr_assert(!fetched[x], "%u fetched twice", x);
			fetched[x] = true;
		}
	}
	for (uint32_t x = 8 * (AHEAD_CONFIRM + 1); x < FILES; x++)
		cr_assert(fetched[x], "%u never fetched", x);
}

Test(ahead, a_break_closes_the_window_until_a_walk_is_confirmed_again)
{
	static struct ahead a;
	memset(&a, 0, sizeof(a));
	for (uint32_t i = 0; i < 40; i++)
		ahead_note(&a, 1, 7, i);
	/* back, a jump, another stride: each a new walk to confirm */
	uint32_t breaks[][2] = {{10, 1}, {500, 1}, {600, 3}};
	for (unsigned b = 0; b < 3; b++) {
		uint32_t at = breaks[b][0], step = breaks[b][1];
		for (uint32_t k = 0; k <= AHEAD_CONFIRM + 3; k++) {
			struct ahead_fetch f = ahead_note(&a, 1, 7,
							  at + k * step);
			cr_assert_eq(f.count == 0, k < AHEAD_CONFIRM,
				     "break %u, file %u: %u fetched", b, k,
				     f.count);
			if (k == AHEAD_CONFIRM)
				cr_assert_eq(f.window, AHEAD_MIN);
		}
	}
	/* the same file again changes nothing; another directory is
	 * another walk */
	struct ahead_fetch f = ahead_note(&a, 1, 7, 600 + 3 * (AHEAD_CONFIRM + 3));
	cr_assert_eq(f.count, 0);
	f = ahead_note(&a, 1, 8, 600 + 3 * (AHEAD_CONFIRM + 4));
	cr_assert_eq(f.count, 0);
}

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A shuffled loader: every file once, in random order, by 1 or 8
 * readers. A fetch needs AHEAD_CONFIRM equal forward steps in a row,
 * which a random order has about 16 / FILES^3 per read. */
Test(ahead, readers_in_random_order_fetch_nothing)
{
	static struct ahead a;
	static uint32_t perm[FILES];
	for (unsigned seed = 1; seed <= 20; seed++) {
		uint64_t s = seed * 0x9e3779b97f4a7c15ull;
		for (uint32_t i = 0; i < FILES; i++)
			perm[i] = i;
		for (uint32_t i = FILES - 1; i > 0; i--) {
			uint32_t j = (uint32_t)(next_rand(&s) % (i + 1));
			uint32_t t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		memset(&a, 0, sizeof(a));
		unsigned readers = seed % 2 ? 1 : 8;
		for (uint32_t i = 0; i < FILES; i++) {
			struct ahead_fetch f = ahead_note(&a, i % readers, 7,
							  perm[i]);
			cr_assert_eq(f.count, 0, "seed %u, read %u: %u fetched",
				     seed, i, f.count);
		}
	}
}

Test(ahead, more_readers_than_slots_forget_the_least_recent)
{
	static struct ahead a;
	memset(&a, 0, sizeof(a));
	/* AHEAD_STREAMS + 1 readers in turn: each one's slot is taken
	 * before it comes back, so none is ever confirmed */
	for (uint32_t i = 0; i < 10 * (AHEAD_STREAMS + 1); i++) {
		struct ahead_fetch f = ahead_note(&a, 1 + i % (AHEAD_STREAMS + 1),
						  7, i / (AHEAD_STREAMS + 1));
		cr_assert_eq(f.count, 0);
	}
	/* as many as the slots: all followed */
	memset(&a, 0, sizeof(a));
	unsigned fired = 0;
	for (uint32_t i = 0; i < 10 * AHEAD_STREAMS; i++)
		fired += ahead_note(&a, 1 + i % AHEAD_STREAMS, 7,
				    i / AHEAD_STREAMS).count > 0;
	cr_assert_gt(fired, 0);
}
