/* test_validate.c - the checks on client-written entries and ring state
 * (src/server/validate.c) without a daemon: every SQE field, key, buffer
 * range, table id, ring index and ring size goes through good, boundary
 * and hostile values, and each rejection carries the errno
 * include/ringcache.h documents (EINVAL malformed, EBADF unknown handle,
 * lease or buffer, EFAULT outside the buffer, ENOENT/EACCES datasets). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "validate.h"

/* ---- the entry as a whole ---------------------------------------------- */

enum { A = 1, H = 2, O = 4, L = 8, B = 16, D = 32 };
/* include/ringcache.h's table of the fields each opcode reads, restated
 * here so a change to validate.c's copy cannot pass unnoticed. */
static const unsigned reads[RC_OP__COUNT] = {
	[RC_OP_NOP] = 0,
	[RC_OP_OPEN] = D | A,
	[RC_OP_STAT] = H | A,
	[RC_OP_LIST] = D | A | O | B | L,
	[RC_OP_READ] = H | O | L,
	[RC_OP_READ_INTO] = H | O | L | B,
	[RC_OP_RELEASE] = H,
	[RC_OP_CLOSE] = H,
	[RC_OP_PREFETCH_PLAN] = B | L,
	[RC_OP_WRITE_OPEN] = D | A,
	[RC_OP_WRITE] = H | O | L | B,
	[RC_OP_COMMIT] = H,
	[RC_OP_ABORT] = H,
	[RC_OP_RENAME] = H | A,
	[RC_OP_SYNC] = H | D | A,
	[RC_OP_READ_KEY] = D | A | O | L,
};

struct field {
	const char *name;
	unsigned bit;
	void (*set)(struct rc_sqe *e, uint64_t v);
};
static void set_arg(struct rc_sqe *e, uint64_t v) { e->arg = (uint16_t)v; }
static void set_arg_len(struct rc_sqe *e, uint64_t v) { e->arg_len = (uint32_t)v; }
static void set_handle(struct rc_sqe *e, uint64_t v) { e->handle = (uint32_t)v; }
static void set_offset(struct rc_sqe *e, uint64_t v) { e->offset = v; }
static void set_len(struct rc_sqe *e, uint64_t v) { e->len = v; }
static void set_buf_index(struct rc_sqe *e, uint64_t v) { e->buf_index = (uint32_t)v; }
static void set_buf_offset(struct rc_sqe *e, uint64_t v) { e->buf_offset = v; }
static void set_dataset(struct rc_sqe *e, uint64_t v) { e->dataset = (uint32_t)v; }

static const struct field fields[] = {
	{"arg", A, set_arg}, {"arg_len", A, set_arg_len},
	{"handle", H, set_handle}, {"offset", O, set_offset},
	{"len", L, set_len}, {"buf_index", B, set_buf_index},
	{"buf_offset", B, set_buf_offset}, {"dataset", D, set_dataset},
};
#define N_FIELDS (sizeof(fields) / sizeof(fields[0]))

static const uint64_t hostile[] = {1, 2, 0x7f, 0xffff, 0xffffffffull,
				   0x8000000000000000ull, UINT64_MAX};
#define N_HOSTILE (sizeof(hostile) / sizeof(hostile[0]))

Test(validate_sqe, every_opcode_with_zero_fields_is_well_formed)
{
	for (unsigned op = 0; op < RC_OP__COUNT; op++) {
		struct rc_sqe e = {.opcode = (uint8_t)op, .user_data = ~0ull};
		cr_assert_eq(validate_sqe(&e), 0, "opcode %u", op);
	}
}

Test(validate_sqe, unknown_opcodes_are_einval)
{
	for (unsigned op = RC_OP__COUNT; op <= 255; op++) {
		struct rc_sqe e = {.opcode = (uint8_t)op};
		cr_assert_eq(validate_sqe(&e), -EINVAL, "opcode %u", op);
	}
}

/* Each field set on each opcode: accepted exactly where the opcode reads
 * it (whatever its value: ranges are checked later, against the
 * session), -EINVAL everywhere else. */
Test(validate_sqe, fields_an_opcode_does_not_read_are_einval)
{
	for (unsigned op = 0; op < RC_OP__COUNT; op++) {
		for (unsigned f = 0; f < N_FIELDS; f++) {
			for (unsigned v = 0; v < N_HOSTILE; v++) {
				struct rc_sqe e = {.opcode = (uint8_t)op};
				fields[f].set(&e, hostile[v]);
				struct rc_sqe zero = {.opcode = (uint8_t)op};
				if (!memcmp(&e, &zero, sizeof(e)))
					continue; /* truncated to 0 by a narrow field */
				bool read = reads[op] & fields[f].bit;
				/* SYNC reads dataset and arg with a prefix only */
				if (op == RC_OP_SYNC &&
				    (fields[f].bit & (D | A)))
					read = false;
				cr_assert_eq(validate_sqe(&e), read ? 0 : -EINVAL,
					     "opcode %u field %s = %#llx", op,
					     fields[f].name,
					     (unsigned long long)hostile[v]);
			}
		}
	}
}

Test(validate_sqe, sync_reads_dataset_and_prefix_only_with_sync_prefix)
{
	struct rc_sqe e = {.opcode = RC_OP_SYNC, .handle = RC_SYNC_PREFIX,
			   .dataset = 3, .arg = 5, .arg_len = 7};
	cr_assert_eq(validate_sqe(&e), 0);
	uint32_t others[] = {0, 1, RC_SYNC_ALL, RC_WRITE_HANDLE | 2,
			     RC_SYNC_PREFIX - 1};
	for (unsigned i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		e.handle = others[i];
		cr_assert_eq(validate_sqe(&e), -EINVAL, "handle %#x", others[i]);
		struct rc_sqe bare = {.opcode = RC_OP_SYNC, .handle = others[i]};
		cr_assert_eq(validate_sqe(&bare), 0, "handle %#x", others[i]);
	}
}

Test(validate_sqe, flags_only_plan_append_read_key_close_open_at)
{
	for (unsigned op = 0; op < RC_OP__COUNT; op++) {
		for (unsigned bit = 0; bit < 8; bit++) {
			struct rc_sqe e = {.opcode = (uint8_t)op,
					   .flags = (uint8_t)(1u << bit)};
			bool ok = (op == RC_OP_PREFETCH_PLAN &&
				   (1u << bit) == RC_PLAN_APPEND) ||
				  (op == RC_OP_READ_KEY &&
				   (1u << bit) == RC_READ_KEY_CLOSE) ||
				  (op == RC_OP_OPEN &&
				   (1u << bit) == RC_OPEN_AT);
			cr_assert_eq(validate_sqe(&e), ok ? 0 : -EINVAL,
				     "opcode %u flag %#x", op, 1u << bit);
		}
		struct rc_sqe all = {.opcode = (uint8_t)op, .flags = 0xff};
		cr_assert_eq(validate_sqe(&all), -EINVAL);
	}
}

Test(validate_sqe, reserved_fields_are_einval)
{
	for (unsigned op = 0; op < RC_OP__COUNT; op++) {
		struct rc_sqe e = {.opcode = (uint8_t)op, .reserved0 = 1};
		cr_assert_eq(validate_sqe(&e), -EINVAL);
		e.reserved0 = 0;
		e.reserved1 = 1ull << 63;
		cr_assert_eq(validate_sqe(&e), -EINVAL);
	}
}

/* Random entries: the verdict is 0 or -EINVAL, and 0 only when every
 * field the opcode does not read is zero. */
Test(validate_sqe, random_entries_match_the_table)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	unsigned accepted = 0;
	for (unsigned n = 0; n < 200000; n++) {
		struct rc_sqe e;
		uint8_t *p = (uint8_t *)&e;
		for (unsigned i = 0; i < sizeof(e); i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			/* mostly zero bytes, so some entries pass */
			p[i] = (x & 31) == 0 ? (uint8_t)(x >> 8) : 0;
		}
		e.opcode %= RC_OP__COUNT + 2;
		int r = validate_sqe(&e);
		cr_assert(r == 0 || r == -EINVAL);
		if (r)
			continue;
		accepted++;
		unsigned rd = reads[e.opcode];
		if (e.opcode == RC_OP_SYNC && e.handle != RC_SYNC_PREFIX)
			rd &= ~(unsigned)(D | A);
		cr_assert(e.opcode < RC_OP__COUNT);
		cr_assert(!e.reserved0 && !e.reserved1);
		cr_assert((rd & A) || (!e.arg && !e.arg_len));
		cr_assert((rd & H) || !e.handle);
		cr_assert((rd & O) || !e.offset);
		cr_assert((rd & L) || !e.len);
		cr_assert((rd & B) || (!e.buf_index && !e.buf_offset));
		cr_assert((rd & D) || !e.dataset);
		cr_assert(!e.flags || (e.opcode == RC_OP_PREFETCH_PLAN &&
				       e.flags == RC_PLAN_APPEND) ||
			  (e.opcode == RC_OP_READ_KEY &&
			   e.flags == RC_READ_KEY_CLOSE));
	}
	cr_assert_gt(accepted, 1000, "the generator reached few valid entries");
}

/* ---- keys in arg slots ------------------------------------------------- */

#define SLOTS 4u

static uint8_t *slots_with(uint32_t slot, const void *bytes, size_t n)
{
	/* exactly SLOTS slots: ASan sees any read past the last one */
	uint8_t *args = malloc(SLOTS * RC_ARG_SLOT_SIZE);
	cr_assert_not_null(args);
	memset(args, 'x', SLOTS * RC_ARG_SLOT_SIZE);
	memcpy(args + (size_t)slot * RC_ARG_SLOT_SIZE, bytes, n);
	return args;
}

static int key_check(const char *k, bool allow_empty, char *out)
{
	uint8_t *args = slots_with(1, k, strlen(k));
	int r = validate_key_copy(args, SLOTS, 1, (uint32_t)strlen(k),
				  allow_empty, out);
	free(args);
	return r;
}

Test(validate_key, good_keys_are_copied_nul_terminated)
{
	const char *good[] = {"a", "train/0001.tar", "dir/", "a//b", ".a",
			      "..a", "a..", "...", "a/.../b", "a/.b/c",
			      "x y/\xc3\xa9t\xc3\xa9", "a/b/c/d/e/f"};
	for (unsigned i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char key[RC_MAX_KEY + 1];
		memset(key, 'z', sizeof(key));
		cr_assert_eq(key_check(good[i], false, key), 0, "%s", good[i]);
		cr_assert_str_eq(key, good[i]);
	}
}

Test(validate_key, escaping_keys_are_einval)
{
	const char *bad[] = {"/a", "/", ".", "..", "./a", "../a", "a/.",
			     "a/..", "a/./b", "a/../b", "a/b/..", "a/../../etc",
			     "//a"};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char key[RC_MAX_KEY + 1];
		cr_assert_eq(key_check(bad[i], false, key), -EINVAL, "%s",
			     bad[i]);
		cr_assert_eq(key_check(bad[i], true, key), -EINVAL, "%s",
			     bad[i]);
	}
}

Test(validate_key, empty_only_where_allowed)
{
	char key[RC_MAX_KEY + 1];
	uint8_t *args = slots_with(0, "", 0);
	cr_assert_eq(validate_key_copy(args, SLOTS, 0, 0, false, key), -EINVAL);
	cr_assert_eq(validate_key_copy(args, SLOTS, 0, 0, true, key), 0);
	cr_assert_str_eq(key, "");
	free(args);
}

Test(validate_key, a_nul_inside_is_einval)
{
	char key[RC_MAX_KEY + 1];
	uint8_t *args = slots_with(2, "ab\0cd", 5);
	cr_assert_eq(validate_key_copy(args, SLOTS, 2, 5, false, key), -EINVAL);
	cr_assert_eq(validate_key_copy(args, SLOTS, 2, 2, false, key), 0);
	cr_assert_str_eq(key, "ab");
	free(args);
}

Test(validate_key, length_boundary_in_the_last_slot)
{
	char big[RC_MAX_KEY + 2];
	memset(big, 'k', sizeof(big));
	char key[RC_MAX_KEY + 1];
	uint8_t *args = slots_with(SLOTS - 1, big, sizeof(big));
	cr_assert_eq(validate_key_copy(args, SLOTS, SLOTS - 1, RC_MAX_KEY,
				       false, key), 0);
	cr_assert_eq(strlen(key), RC_MAX_KEY);
	cr_assert_eq(validate_key_copy(args, SLOTS, SLOTS - 1, RC_MAX_KEY + 1,
				       false, key), -EINVAL);
	uint32_t hostile_len[] = {RC_ARG_SLOT_SIZE, RC_ARG_SLOT_SIZE + 1,
				  0x7fffffffu, UINT32_MAX};
	for (unsigned i = 0; i < 4; i++)
		cr_assert_eq(validate_key_copy(args, SLOTS, SLOTS - 1,
					       hostile_len[i], true, key),
			     -EINVAL);
	free(args);
}

Test(validate_key, slot_past_the_region_is_einval)
{
	char key[RC_MAX_KEY + 1];
	uint8_t *args = slots_with(0, "k", 1);
	uint32_t bad[] = {SLOTS, SLOTS + 1, 0xffff, UINT32_MAX};
	for (unsigned i = 0; i < 4; i++) {
		cr_assert_eq(validate_key_copy(args, SLOTS, bad[i], 1, false, key),
			     -EINVAL, "slot %u", bad[i]);
		cr_assert_eq(validate_arg_slot(bad[i], SLOTS), -EINVAL);
	}
	cr_assert_eq(validate_arg_slot(SLOTS - 1, SLOTS), 0);
	cr_assert_eq(validate_arg_slot(0, 0), -EINVAL);
	free(args);
}

/* The verdict is about the copy: rewriting the slot after the call (a
 * client racing the daemon) cannot change the key the daemon uses. */
Test(validate_key, the_copy_is_what_was_checked)
{
	char key[RC_MAX_KEY + 1];
	uint8_t *args = slots_with(1, "safe/key", 8);
	cr_assert_eq(validate_key_copy(args, SLOTS, 1, 8, false, key), 0);
	memcpy(args + RC_ARG_SLOT_SIZE, "../../xx", 8);
	cr_assert_str_eq(key, "safe/key");
	free(args);
}

/* ---- datasets, handles, leases, buffers -------------------------------- */

Test(validate_ids, dataset_ids)
{
	cr_assert_eq(validate_dataset_id(0, 3), 0);
	cr_assert_eq(validate_dataset_id(2, 3), 0);
	cr_assert_eq(validate_dataset_id(3, 3), -ENOENT);
	cr_assert_eq(validate_dataset_id(RC_MAX_DATASETS, RC_MAX_DATASETS),
		     -ENOENT);
	cr_assert_eq(validate_dataset_id(UINT32_MAX, 3), -ENOENT);
	cr_assert_eq(validate_dataset_id(0, 0), -ENOENT);
}

Test(validate_ids, dataset_access)
{
	cr_assert_eq(validate_access(true, RC_ACCESS_READ, RC_ACCESS_READ), 0);
	cr_assert_eq(validate_access(true, RC_ACCESS_READ | RC_ACCESS_WRITE,
				     RC_ACCESS_READ), 0);
	cr_assert_eq(validate_access(true, RC_ACCESS_WRITE, RC_ACCESS_READ),
		     -EACCES);
	cr_assert_eq(validate_access(true, 0, RC_ACCESS_READ), -EACCES);
	cr_assert_eq(validate_access(true, RC_ACCESS_READ,
				     RC_ACCESS_READ | RC_ACCESS_WRITE), -EACCES);
	/* a dataset a reload removed: gone, whatever access was computed */
	cr_assert_eq(validate_access(false, RC_ACCESS_READ, RC_ACCESS_READ),
		     -ENOENT);
	cr_assert_eq(validate_access(false, 0, RC_ACCESS_READ), -ENOENT);
}

Test(validate_ids, handles_and_leases)
{
	cr_assert_eq(validate_table_id(0, 64), 0);
	cr_assert_eq(validate_table_id(63, 64), 0);
	cr_assert_eq(validate_table_id(64, 64), -EBADF);
	cr_assert_eq(validate_table_id(0, 0), -EBADF); /* nothing opened yet */
	cr_assert_eq(validate_table_id(RC_NO_LEASE, 1u << 20), -EBADF);
	cr_assert_eq(validate_table_id(RC_WRITE_HANDLE, 1u << 20), -EBADF);
	cr_assert_eq(validate_table_id(RC_SYNC_PREFIX, UINT32_MAX), 0);
	cr_assert_eq(validate_table_id(UINT32_MAX, UINT32_MAX), -EBADF);
}

Test(validate_buf, indexes)
{
	cr_assert_eq(validate_buf_index(0), 0);
	cr_assert_eq(validate_buf_index(VALIDATE_MAX_BUFS - 1), 0);
	cr_assert_eq(validate_buf_index(VALIDATE_MAX_BUFS), -EBADF);
	cr_assert_eq(validate_buf_index(UINT32_MAX), -EBADF);
}

Test(validate_buf, ranges)
{
	const uint64_t sz = 1u << 20;
	cr_assert_eq(validate_buf_range(0, sz, sz), 0);
	cr_assert_eq(validate_buf_range(0, 0, sz), 0);
	cr_assert_eq(validate_buf_range(sz, 0, sz), 0); /* empty, at the end */
	cr_assert_eq(validate_buf_range(sz - 1, 1, sz), 0);
	cr_assert_eq(validate_buf_range(sz - 1, 2, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(sz, 1, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(sz + 1, 0, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(1, sz, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(0, sz + 1, sz), -EFAULT);
	/* offset + len wrapping past 2^64 must not look small */
	cr_assert_eq(validate_buf_range(UINT64_MAX, 2, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(2, UINT64_MAX, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(UINT64_MAX, UINT64_MAX, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(1ull << 63, 1ull << 63, sz), -EFAULT);
	cr_assert_eq(validate_buf_range(0, UINT64_MAX, UINT64_MAX), 0);
	/* an index with nothing registered */
	cr_assert_eq(validate_buf_range(0, 0, 0), -EBADF);
	cr_assert_eq(validate_buf_range(0, 1, 0), -EBADF);
}

Test(validate_buf, register_sizes)
{
	cr_assert_eq(validate_regbuf_size(0), -EINVAL);
	cr_assert_eq(validate_regbuf_size(1), 0);
	cr_assert_eq(validate_regbuf_size(VALIDATE_MAX_REGBUF), 0);
	cr_assert_eq(validate_regbuf_size(VALIDATE_MAX_REGBUF + 1), -EINVAL);
	cr_assert_eq(validate_regbuf_size(UINT64_MAX), -EINVAL);
}

/* ---- offsets and lengths ----------------------------------------------- */

Test(validate_len, io_lengths)
{
	cr_assert_eq(validate_io_len(0), 0);
	cr_assert_eq(validate_io_len(1), 0);
	cr_assert_eq(validate_io_len(RC_MAX_IO), 0);
	cr_assert_eq(validate_io_len(RC_MAX_IO + 1ull), -EINVAL);
	cr_assert_eq(validate_io_len(1ull << 32), -EINVAL);
	cr_assert_eq(validate_io_len(UINT64_MAX), -EINVAL);
}

Test(validate_len, list_offsets)
{
	cr_assert_eq(validate_list_offset(0), 0);
	cr_assert_eq(validate_list_offset(UINT32_MAX), 0);
	cr_assert_eq(validate_list_offset(1ull << 32), -EINVAL);
	cr_assert_eq(validate_list_offset(UINT64_MAX), -EINVAL);
}

Test(validate_len, plan_lengths)
{
	const uint64_t rec = sizeof(struct rc_plan_entry);
	cr_assert_eq(rec, 24);
	cr_assert_eq(validate_plan_len(0), 0); /* an empty plan drops it */
	cr_assert_eq(validate_plan_len(rec), 0);
	cr_assert_eq(validate_plan_len(rec * 1000000), 0);
	cr_assert_eq(validate_plan_len(rec - 1), -EINVAL);
	cr_assert_eq(validate_plan_len(rec + 1), -EINVAL);
	cr_assert_eq(validate_plan_len(1), -EINVAL);
	cr_assert_eq(validate_plan_len(UINT64_MAX), -EINVAL);
}

/* ---- ring indices ------------------------------------------------------ */

Test(validate_ring, sq_pending)
{
	cr_assert_eq(validate_sq_pending(10, 10, 64), 0);
	cr_assert_eq(validate_sq_pending(15, 10, 64), 5);
	cr_assert_eq(validate_sq_pending(74, 10, 64), 64);
	/* a wild tail: never more than one ring's worth per pass */
	cr_assert_eq(validate_sq_pending(75, 10, 64), 64);
	cr_assert_eq(validate_sq_pending(9, 10, 64), 64);
	cr_assert_eq(validate_sq_pending(UINT32_MAX, 0, 64), 64);
	/* the indices wrap at 2^32 */
	cr_assert_eq(validate_sq_pending(2, UINT32_MAX - 2, 64), 5);
	cr_assert_eq(validate_sq_pending(0, UINT32_MAX, 4096), 1);
}

Test(validate_ring, cq_room)
{
	cr_assert_eq(validate_cq_room(10, 10, 128), 128);
	cr_assert_eq(validate_cq_room(11, 10, 128), 127);
	cr_assert_eq(validate_cq_room(137, 10, 128), 1);
	cr_assert_eq(validate_cq_room(138, 10, 128), 0);
	/* a wild head: ahead of the tail, or more than a ring behind */
	cr_assert_eq(validate_cq_room(10, 11, 128), 0);
	cr_assert_eq(validate_cq_room(10, UINT32_MAX / 2, 128), 0);
	cr_assert_eq(validate_cq_room(500, 10, 128), 0);
	/* wrapping */
	cr_assert_eq(validate_cq_room(3, UINT32_MAX - 4, 128), 120);
}

static bool pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

Test(validate_ring, geometry_defaults)
{
	struct ring_geometry g;
	validate_ring_geometry(0, 0, 0, &g);
	cr_assert_eq(g.sq_entries, 256);
	cr_assert_eq(g.cq_entries, 512);
	cr_assert_eq(g.arg_slots, 64);
	cr_assert_eq(g.sq_off, 4096);
	cr_assert_eq(g.cq_off, 4096 + 256 * sizeof(struct rc_sqe));
	cr_assert_eq(g.arg_off, g.cq_off + 512 * sizeof(struct rc_cqe));
	cr_assert_eq(g.size, g.arg_off + 64 * RC_ARG_SLOT_SIZE);
}

/* Whatever sizes a client asks for, the region is laid out so that no
 * part overlaps another or the header and every index mask works. */
Test(validate_ring, geometry_of_any_request)
{
	uint32_t asks[] = {0, 1, 2, 3, 5, 63, 64, 65, 255, 256, 1000, 4095,
			   4096, 4097, 8191, 8192, 8193, 1u << 20, 0x7fffffffu,
			   0x80000000u, 0x80000001u, UINT32_MAX};
	unsigned n = sizeof(asks) / sizeof(asks[0]);
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < n; j++)
			for (unsigned k = 0; k < n; k++) {
				struct ring_geometry g;
				validate_ring_geometry(asks[i], asks[j], asks[k], &g);
				cr_assert(pow2(g.sq_entries) && pow2(g.cq_entries));
				cr_assert_leq(g.sq_entries, VALIDATE_MAX_SQ);
				cr_assert_leq(g.cq_entries, 2 * VALIDATE_MAX_SQ);
				cr_assert_geq(g.cq_entries, g.sq_entries);
				cr_assert_geq(g.sq_entries, asks[i] &&
					      asks[i] <= VALIDATE_MAX_SQ ?
					      asks[i] : 1);
				cr_assert(g.arg_slots >= 1 &&
					  g.arg_slots <= VALIDATE_MAX_ARGS);
				cr_assert_eq(g.arg_slots, asks[k] == 0 ? 64 :
					     asks[k] > 1024 ? 1024 : asks[k]);
				cr_assert_geq(g.sq_off, sizeof(struct rc_ring_hdr));
				cr_assert_eq(g.cq_off, g.sq_off + (uint64_t)g.sq_entries *
					     sizeof(struct rc_sqe));
				cr_assert_eq(g.arg_off, g.cq_off + (uint64_t)g.cq_entries *
					     sizeof(struct rc_cqe));
				cr_assert_geq(g.size, g.arg_off + (uint64_t)g.arg_slots *
					      RC_ARG_SLOT_SIZE);
				cr_assert_eq(g.size % 4096, 0);
				cr_assert_lt(g.size - (g.arg_off + (uint64_t)g.arg_slots *
						       RC_ARG_SLOT_SIZE), 4096);
				cr_assert_eq(g.cq_off % 64, 0);
				cr_assert_eq(g.arg_off % 64, 0);
			}
}

Test(validate_ring, geometry_rounds_up_and_clamps)
{
	struct ring_geometry g;
	validate_ring_geometry(3, 0, 0, &g);
	cr_assert_eq(g.sq_entries, 4);
	cr_assert_eq(g.cq_entries, 8);
	validate_ring_geometry(64, 16, 0, &g); /* CQ never below the SQ */
	cr_assert_eq(g.cq_entries, 64);
	validate_ring_geometry(1, 1, 1, &g); /* nor below two entries */
	cr_assert_eq(g.sq_entries, 1);
	cr_assert_eq(g.cq_entries, 2);
	cr_assert_eq(g.arg_off % 64, 0);
	validate_ring_geometry(UINT32_MAX, UINT32_MAX, UINT32_MAX, &g);
	cr_assert_eq(g.sq_entries, VALIDATE_MAX_SQ);
	cr_assert_eq(g.cq_entries, 2 * VALIDATE_MAX_SQ);
	cr_assert_eq(g.arg_slots, VALIDATE_MAX_ARGS);
}

/* An OPEN names a handle only with RC_OPEN_AT (a re-attach's re-open). */
Test(validate_sqe, open_handle_only_with_open_at)
{
	struct rc_sqe e = {.opcode = RC_OP_OPEN, .handle = 5};
	cr_assert_eq(validate_sqe(&e), -EINVAL);
	e.flags = RC_OPEN_AT;
	cr_assert_eq(validate_sqe(&e), 0);
	e.handle = 0;
	cr_assert_eq(validate_sqe(&e), 0);
	e.opcode = RC_OP_READ_KEY; /* bit 0 is READ_KEY_CLOSE there */
	e.handle = 5;
	cr_assert_eq(validate_sqe(&e), -EINVAL);
}
