/* test_fileahead.c - the mount's in-file fetch-ahead detector
 * (src/client/fileahead.c) without a mount: a file read in order (READs
 * of 1 MiB, some out of order as the kernel's workers send them) gets
 * every byte past its first FILEAHEAD_CONFIRM fetched, each once, never
 * past its end nor more than FILEAHEAD_MAX past the reads; readers that
 * read a little of many files and stop hold at most the budget fetched
 * and not read, until their streams' life ends; a seek closes the window. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/client/fileahead.h"

#define MIB (1ull << 20)
#define LIFE_NS 30000000000ull

static struct fileahead fa;

static void setup(uint64_t budget)
{
	memset(&fa, 0, sizeof(fa));
	fa.budget = budget;
	fa.life_ns = LIFE_NS;
}

/* Reads a file of size bytes in order in READs of 1 MiB, each pair
 * swapped (two workers); checks every fetch against the bounds and
 * marks its bytes (by MiB) in got. Returns the bytes fetched. */
static uint64_t read_in_order(uint64_t file, uint64_t size, uint8_t *got,
			      uint64_t *now)
{
	uint64_t fetched = 0;
	for (uint64_t at = 0; at < size; at += 2 * MIB) {
		uint64_t offs[2] = {at + MIB, at};
		for (int k = 0; k < 2; k++) {
			if (offs[k] >= size)
				continue;
			uint64_t len = size - offs[k] < MIB ? size - offs[k]
							    : MIB;
			struct fileahead_fetch f = fileahead_note(
				&fa, file, size, offs[k], len, (*now)++);
			if (!f.len)
				continue;
			cr_assert_leq(f.off + f.len, size, "past the end");
			cr_assert_geq(f.off, offs[k] + len > at + 2 * MIB ?
					     at + 2 * MIB : offs[k] + len,
				      "fetched %llu, behind a READ",
				      (unsigned long long)f.off);
			cr_assert_leq(f.off + f.len,
				      at + 2 * MIB + FILEAHEAD_MAX,
				      "more than FILEAHEAD_MAX ahead");
			cr_assert(f.len >= FILEAHEAD_STEP ||
				  f.off + f.len == size, "a tiny piece");
			for (uint64_t b = f.off; b < f.off + f.len; b += MIB) {
				cr_assert(!got[b / MIB], "MiB %llu fetched "
					  "twice", (unsigned long long)(b / MIB));
				got[b / MIB] = 1;
			}
			fetched += f.len;
		}
	}
	return fetched;
}

Test(fileahead, a_file_read_in_order_is_fetched_past_its_reads_once)
{
	setup(1ull << 30);
	uint64_t size = 100 * MIB + 12345, now = 1;
	uint8_t got[101] = {0};
	uint64_t fetched = read_in_order(7, size, got, &now);
	/* from the first MiB fetched, every MiB to the end */
	unsigned first = 0;
	while (first < 101 && !got[first])
		first++;
	cr_assert_leq(first, 4, "nothing fetched before MiB %u", first);
	for (unsigned b = first; b < 101; b++)
		cr_assert(got[b], "MiB %u never fetched", b);
	cr_assert_eq(fetched, size - first * MIB);
	cr_assert_eq(fa.unread, 0, "all read: nothing ahead");
}

Test(fileahead, readers_that_stop_hold_at_most_the_budget_until_life_ends)
{
	uint64_t budget = 40 * MIB, now = 1, waste = 0;
	setup(budget);
	/* 100 files: each read 4 MiB in order, then left; what was
	 * fetched past 4 MiB is never read */
	for (uint64_t file = 1; file <= 100; file++) {
		for (uint64_t off = 0; off < 4 * MIB; off += MIB) {
			struct fileahead_fetch f = fileahead_note(
				&fa, file, 1ull << 32, off, MIB, now++);
			uint64_t from = f.off > 4 * MIB ? f.off : 4 * MIB;
			if (f.len && f.off + f.len > from)
				waste += f.off + f.len - from;
			cr_assert_leq(fa.unread, budget);
		}
	}
	cr_assert_leq(waste, budget, "%llu fetched and never read",
		      (unsigned long long)waste);
	cr_assert_eq(fa.unread, waste);
	cr_assert_geq(waste, budget - 4 * MIB, "budget unused");
	/* the life of every stream ends: the budget is free again */
	now += LIFE_NS + 1;
	uint64_t again = 0;
	for (uint64_t off = 0; off < 4 * MIB; off += MIB)
		again += fileahead_note(&fa, 1000, 1ull << 32, off, MIB,
					now++).len;
	cr_assert_gt(again, 0, "expired streams still hold the budget");
	cr_assert_eq(fa.unread, again - 2 * MIB, "only file 1000's bytes "
		     "past its reads count");
}

Test(fileahead, small_or_random_reads_fetch_nothing)
{
	setup(1ull << 30);
	uint64_t now = 1;
	/* one READ of 1 MiB per file: under FILEAHEAD_CONFIRM */
	for (uint64_t file = 1; file <= 64; file++)
		cr_assert_eq(fileahead_note(&fa, file, 64 * MIB, 0, MIB,
					    now++).len, 0);
	/* 1 MiB at random offsets of one large file: each a seek */
	srand(22);
	for (int i = 0; i < 1000; i++) {
		uint64_t off = (uint64_t)(rand() % 1024) * 16 * MIB;
		cr_assert_eq(fileahead_note(&fa, 500, 1ull << 36, off, MIB,
					    now++).len, 0, "read %d", i);
	}
	cr_assert_eq(fa.unread, 0);
}

Test(fileahead, a_seek_closes_the_window_and_frees_its_bytes)
{
	setup(1ull << 30);
	uint64_t now = 1, fetched = 0;
	for (uint64_t off = 0; off < 16 * MIB; off += MIB)
		fetched += fileahead_note(&fa, 3, 1ull << 32, off, MIB,
					  now++).len;
	cr_assert_gt(fetched, 0);
	cr_assert_gt(fa.unread, 0);
	/* back to the start: a new stream, nothing fetched until confirmed */
	cr_assert_eq(fileahead_note(&fa, 3, 1ull << 32, 0, MIB, now++).len, 0);
	cr_assert_eq(fa.unread, 0, "the old window's bytes still counted");
}
