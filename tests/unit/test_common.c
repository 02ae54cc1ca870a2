/* test_common.c - the header-only helpers of src/common that parse or hold
 * hostile or unbounded input: decimal.h's strict reader (HTTP header
 * numbers, XML <Size>), list.h's splice (a queue taken whole under a
 * lock) and vec.h's growth (zeroed slots, overflow refused). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "decimal.h"
#include "extents.h"
#include "list.h"
#include "log.h"
#include "vec.h"

Test(decimal, reads_digits_up_to_uint64_max)
{
	uint64_t v = 7;

	cr_assert(rc_parse_dec_u64("0", 1, &v));
	cr_assert_eq(v, 0);
	cr_assert(rc_parse_dec_u64("18446744073709551615", 20, &v));
	cr_assert_eq(v, UINT64_MAX);
	/* Only the n bytes given: a header value is not NUL-ended. */
	cr_assert(rc_parse_dec_u64("123456", 3, &v));
	cr_assert_eq(v, 123);
}

Test(decimal, refuses_what_is_not_plain_digits)
{
	static const char *const bad[] = {
		"", "18446744073709551616", "99999999999999999999",
		"000000000000000000001", "-1", "+1", " 1", "1 ", "0x10", "1e3",
		"１",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 42;
		cr_assert(!rc_parse_dec_u64(bad[i], strlen(bad[i]), &v),
			  "accepted \"%s\"", bad[i]);
		cr_assert_eq(v, 42, "\"%s\" changed the output", bad[i]);
	}
}

struct item {
	int n;
	struct rc_list link;
};

static int drain(struct rc_list *head, int *out, int cap)
{
	struct rc_list *pos, *tmp;
	int k = 0;

	rc_list_for_each_safe(pos, tmp, head) {
		cr_assert_lt(k, cap);
		out[k++] = rc_list_entry(pos, struct item, link)->n;
		rc_list_del(pos);
	}
	return k;
}

/* A memfd of 1 MiB with data at [64K, 128K) and from 512K to its end:
 * the walk gives exactly those, clipped to the size asked, and nothing
 * past the last (holes stay holes for the prefault helper and the
 * registered-buffer warm-up). */
Test(extents, walks_the_data_of_a_memfd_and_skips_its_holes)
{
	int fd = memfd_create("rc-extents", MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 1 << 20), 0);
	static char page[64 << 10];
	memset(page, 7, sizeof(page));
	cr_assert_eq(pwrite(fd, page, sizeof(page), 64 << 10), sizeof(page));
	for (off_t at = 512 << 10; at < (1 << 20); at += sizeof(page))
		cr_assert_eq(pwrite(fd, page, sizeof(page), at), sizeof(page));
	uint64_t pos = 0, end = 0, got[4][2];
	unsigned n = 0;
	for (; n < 4 && rc_next_data_extent(fd, 1 << 20, &pos, &end);
	     pos = end, n++) {
		got[n][0] = pos;
		got[n][1] = end;
	}
	cr_assert_eq(n, 2);
	cr_assert_eq(got[0][0], 64 << 10);
	cr_assert_eq(got[0][1], 128 << 10);
	cr_assert_eq(got[1][0], 512 << 10);
	cr_assert_eq(got[1][1], 1 << 20);
	pos = 0;
	cr_assert(rc_next_data_extent(fd, 96 << 10, &pos, &end));
	cr_assert_eq(end, 96 << 10, "clipped to the size asked");
	pos = 96 << 10;
	cr_assert_not(rc_next_data_extent(fd, 96 << 10, &pos, &end));
	pos = 200 << 10;
	cr_assert_not(rc_next_data_extent(fd, 400 << 10, &pos, &end),
		      "a hole to the size asked");
	close(fd);
}

Test(list, splice_tail_appends_in_order_and_empties_the_source)
{
	struct rc_list dst = RC_LIST_INIT(dst), src = RC_LIST_INIT(src);
	struct item it[5];
	int got[8];

	for (int i = 0; i < 5; i++) {
		it[i].n = i;
		rc_list_add_tail(i < 2 ? &dst : &src, &it[i].link);
	}
	rc_list_splice_tail(&dst, &src);
	cr_assert(rc_list_empty(&src));
	cr_assert_eq(drain(&dst, got, 8), 5);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(got[i], i);
	cr_assert(rc_list_empty(&dst));
}

Test(list, splice_of_an_empty_list_changes_nothing)
{
	struct rc_list dst = RC_LIST_INIT(dst), src = RC_LIST_INIT(src);
	struct item a = { .n = 1 };
	int got[2];

	rc_list_splice_tail(&dst, &src);
	cr_assert(rc_list_empty(&dst));
	rc_list_add_tail(&dst, &a.link);
	rc_list_splice_tail(&dst, &src);
	cr_assert_eq(drain(&dst, got, 2), 1);
	cr_assert_eq(got[0], 1);
}

Test(vec, grows_to_need_with_zeroed_slots)
{
	uint64_t *items = NULL;
	uint32_t cap = 0;

	for (uint64_t n = 1; n <= 1000; n++) {
		cr_assert_eq(RC_GROW(items, cap, n), 0);
		cr_assert_geq(cap, n);
		cr_assert_eq(items[n - 1], 0, "slot %llu not zeroed",
			     (unsigned long long)(n - 1));
		items[n - 1] = n;
	}
	for (uint64_t n = 1; n <= 1000; n++)
		cr_assert_eq(items[n - 1], n);
	free(items);
}

Test(vec, refuses_a_capacity_past_uint32)
{
	char *items = NULL;
	uint32_t cap = 0;

	cr_assert_eq(RC_GROW(items, cap, 16), 0);
	cr_assert_eq(RC_GROW(items, cap, (uint64_t)UINT32_MAX + 1), -ENOMEM);
	cr_assert_eq(cap, 16, "capacity changed on failure");
	cr_assert_not_null(items);
	free(items);
}

/* At most per_sec lines a second from one site; the first line of a later
 * second carries the count dropped before it, exactly once. */
Test(log_limit, passes_per_sec_a_second_and_counts_the_rest)
{
	struct rc_log_limit l = {0};
	const uint64_t s = 1000000000ull;
	uint64_t sup = 99;
	unsigned passed = 0;

	for (unsigned i = 0; i < 1000; i++)
		if (rc_log_limit_pass(&l, 5 * s + i * 1000, 10, &sup)) {
			passed++;
			cr_assert_eq(sup, 0, "nothing suppressed before");
		}
	cr_assert_eq(passed, 10);
	cr_assert(rc_log_limit_pass(&l, 6 * s + 1, 10, &sup));
	cr_assert_eq(sup, 990, "the summary counts every dropped line");
	cr_assert(rc_log_limit_pass(&l, 6 * s + 2, 10, &sup));
	cr_assert_eq(sup, 0, "and is given once");
	/* A quiet site logs every line. */
	for (unsigned i = 0; i < 20; i++) {
		cr_assert(rc_log_limit_pass(&l, (10 + i) * s, 10, &sup));
		cr_assert_eq(sup, 0);
	}
}

Test(log_limit, sites_are_independent)
{
	struct rc_log_limit a = {0}, b = {0};
	uint64_t sup;

	for (unsigned i = 0; i < 10; i++)
		cr_assert(rc_log_limit_pass(&a, 1, 10, &sup));
	cr_assert_not(rc_log_limit_pass(&a, 2, 10, &sup));
	cr_assert(rc_log_limit_pass(&b, 3, 10, &sup), "another site");
}
