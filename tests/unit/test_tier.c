/* test_tier.c - the NVMe tier (src/store/tier.c) and CRC-32C (src/common/crc32c.c):
 * round trips through a private io_uring with registered buffers, restart
 * with the persisted index, its sync on the ring, corrupted data and index,
 * eviction when full, file systems that refuse O_DIRECT and a missing
 * directory. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "tier.h"
#include "uring.h"
#include "ramfs.h"

#define MIB (1024u * 1024u)
#define BIG MIB
#define SMALL (64u * 1024u)
#define ARENA_SLOTS 48 /* 1 MiB each: 32 to write from, 16 to read into */

static struct io_uring ring;
static uint8_t *arena;
static struct iovec arena_iov;
static char dir[64];
static char path[128];
static uint64_t seed;

static void setup(void)
{
	cr_assert_eq(io_uring_queue_init(256, &ring, 0), 0);
	arena = aligned_alloc(TIER_ALIGN, (size_t)ARENA_SLOTS * MIB);
	cr_assert_not_null(arena);
	arena_iov = (struct iovec){arena, (size_t)ARENA_SLOTS * MIB};
	strcpy(dir, "/tmp/rc-tier-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/tier", dir);
	seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
}

static void teardown(void)
{
	io_uring_queue_exit(&ring);
	free(arena);
	unlink(path);
	rmdir(dir);
}

TestSuite(tier, .init = setup, .fini = teardown, .timeout = 120);
TestSuite(crc32c);

/* ---- CRC-32C ---- */

Test(crc32c, known_vectors)
{
	uint8_t zeros[32] = {0}, ones[32], inc[32];
	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++)
		inc[i] = (uint8_t)i;
	/* RFC 3720 B.4 and the usual check value. */
	cr_assert_eq(crc32c(0, "123456789", 9), 0xe3069283u);
	cr_assert_eq(crc32c(0, zeros, 32), 0x8a9136aau);
	cr_assert_eq(crc32c(0, ones, 32), 0x62a8ab43u);
	cr_assert_eq(crc32c(0, inc, 32), 0x46dd794eu);
	cr_assert_eq(crc32c_sw(0, "123456789", 9), 0xe3069283u);
	cr_assert_eq(crc32c_sw(0, inc, 32), 0x46dd794eu);
	cr_assert_eq(crc32c(0, "", 0), 0u);
}

Test(crc32c, hardware_matches_table_and_chains)
{
	static uint8_t buf[70000];
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < sizeof(buf); i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
	for (size_t n = 0; n < sizeof(buf); n = n * 3 + 1) {
		uint32_t whole = crc32c(0, buf, n);
		cr_assert_eq(whole, crc32c_sw(0, buf, n), "len %zu", n);
		size_t h = n / 3;
		cr_assert_eq(crc32c(crc32c(0, buf, h), buf + h, n - h), whole);
	}
	/* The three-stream path starts at 12 KiB; odd lengths hit its tail. */
	size_t big[] = {12287, 12288, 12289, 12301, 65536, 65539, 69999};
	for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++)
		cr_assert_eq(crc32c(7, buf, big[i]), crc32c_sw(7, buf, big[i]),
			     "len %zu", big[i]);
}

/* ---- helpers ---- */

static uint32_t block_len(unsigned i)
{
	return i % 2 ? SMALL : BIG;
}

static void block_key(struct tier_key *k, unsigned i)
{
	tier_key_make(k, "ds", i % 2 ? "small/obj" : "large/obj", "\"etag1\"",
		      i);
}

static void fill(uint8_t *p, unsigned i, uint32_t len)
{
	uint64_t x = seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull) ^ 1;
	for (uint32_t o = 0; o < len; o += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(p + o, &x, 8);
	}
}

static uint8_t *wbuf(unsigned i)
{
	return arena + (size_t)(i % 32) * MIB;
}

static uint8_t *rbuf(unsigned i)
{
	return arena + (size_t)(32 + i % 16) * MIB;
}

struct result {
	int res;
	bool done;
};

static void on_done(void *ctx, int res)
{
	struct result *r = ctx;
	r->res = res;
	r->done = true;
}

static void drain(struct tier *t)
{
	while (tier_inflight(t)) {
		struct io_uring_cqe *cqe;
		cr_assert_eq(io_uring_submit_and_wait(&ring, 1) >= 0, true);
		unsigned head, n = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			rc_ev_dispatch(cqe); /* its handler: tier_complete */
			n++;
		}
		io_uring_cq_advance(&ring, n);
	}
}

static struct tier *open_tier(const char *p, uint64_t size, uint32_t bb)
{
	struct tier_config cfg = {.path = p, .size_bytes = size,
				  .block_bytes = bb};
	char err[256] = "";
	struct tier *t = tier_open(&cfg, &ring, &arena_iov, 1, err,
				   sizeof(err));
	cr_assert_not_null(t, "tier_open: %s", err);
	return t;
}

/* Writes blocks [from, to) in batches of 32, all succeeding. */
static void write_blocks(struct tier *t, unsigned from, unsigned to)
{
	struct result r[32];
	for (unsigned b = from; b < to; b += 32) {
		unsigned n = to - b < 32 ? to - b : 32;
		for (unsigned j = 0; j < n; j++) {
			struct tier_key k;
			block_key(&k, b + j);
			fill(wbuf(b + j), b + j, block_len(b + j));
			r[j].done = false;
			cr_assert_eq(tier_write(t, &k, wbuf(b + j),
						block_len(b + j), on_done,
						&r[j]), 0, "block %u", b + j);
		}
		drain(t);
		for (unsigned j = 0; j < n; j++)
			cr_assert_eq(r[j].res, (int)block_len(b + j));
	}
}

/* Reads block i back; returns the callback's result. */
static int read_block(struct tier *t, unsigned i)
{
	struct tier_key k;
	struct result r = {0};
	uint32_t len = 0;
	block_key(&k, i);
	int rc = tier_lookup(t, &k, &len);
	if (rc < 0)
		return rc;
	cr_assert_eq(len, block_len(i));
	memset(rbuf(i), 0xa5, len);
	cr_assert_eq(tier_read(t, &k, rbuf(i), len, on_done, &r), 0);
	drain(t);
	cr_assert(r.done);
	if (r.res < 0)
		return r.res;
	cr_assert_eq(r.res, (int)len);
	fill(wbuf(i), i, len);
	cr_assert_eq(memcmp(rbuf(i), wbuf(i), len), 0, "block %u differs", i);
	return 0;
}

/* Reads blocks [from, to) with 16 reads in flight, checking bytes. */
static void read_all(struct tier *t, unsigned from, unsigned to)
{
	struct result r[16];
	for (unsigned b = from; b < to; b += 16) {
		unsigned n = to - b < 16 ? to - b : 16;
		for (unsigned j = 0; j < n; j++) {
			struct tier_key k;
			uint32_t len;
			block_key(&k, b + j);
			cr_assert_eq(tier_lookup(t, &k, &len), 0, "block %u",
				     b + j);
			r[j].done = false;
			cr_assert_eq(tier_read(t, &k, rbuf(b + j), len,
					       on_done, &r[j]), 0);
		}
		drain(t);
		for (unsigned j = 0; j < n; j++) {
			unsigned i = b + j;
			cr_assert_eq(r[j].res, (int)block_len(i), "block %u", i);
			fill(wbuf(i), i, block_len(i));
			cr_assert_eq(memcmp(rbuf(i), wbuf(i), block_len(i)), 0,
				     "block %u differs", i);
		}
	}
}

static void poke(const char *p, int64_t off)
{
	int fd = open(p, O_RDWR);
	uint8_t c;
	cr_assert_eq(pread(fd, &c, 1, off), 1);
	c ^= 0x40;
	cr_assert_eq(pwrite(fd, &c, 1, off), 1);
	cr_assert_eq(fdatasync(fd), 0);
	close(fd);
}

/* ---- the tier ---- */

Test(tier, round_trip_and_restart)
{
	struct tier *t = open_tier(path, 256ull * MIB, BIG);
	struct tier_stats st;
	tier_get_stats(t, &st);
	cr_assert(st.direct, "ext4 /tmp should take O_DIRECT");
	cr_assert(st.fixed_files);
	cr_assert(st.fixed_bufs);
	cr_assert_geq(st.n_slots, 200);
	write_blocks(t, 0, 200);
	read_all(t, 0, 200);
	struct tier_key k;
	block_key(&k, 3);
	cr_assert_eq(tier_write(t, &k, wbuf(3), SMALL, NULL, NULL), -EEXIST);
	tier_close(t);

	t = open_tier(path, 256ull * MIB, BIG);
	tier_get_stats(t, &st);
	cr_assert_eq(st.n_used, 200);
	read_all(t, 0, 200);
	tier_key_make(&k, "ds", "large/obj", "\"etag2\"", 0); /* new ETag */
	uint32_t len;
	cr_assert_eq(tier_lookup(t, &k, &len), -ENOENT);
	tier_close(t);

	/* Another geometry on the same file: starts empty, no stale hits. */
	t = open_tier(path, 256ull * MIB, SMALL);
	tier_get_stats(t, &st);
	cr_assert_eq(st.n_used, 0);
	cr_assert_eq(read_block(t, 1), -ENOENT);
	tier_close(t);
}

static struct tier *open_region(uint64_t offset, uint64_t size)
{
	struct tier_config cfg = {.path = path, .offset = offset,
				  .size_bytes = size, .block_bytes = BIG};
	char err[256] = "";
	struct tier *t = tier_open(&cfg, &ring, &arena_iov, 1, err,
				   sizeof(err));
	cr_assert_not_null(t, "tier_open at %llu: %s",
			   (unsigned long long)offset, err);
	return t;
}

/* Shards share one file (or device), each tier in its own region: their
 * headers, indexes and slots never overlap, and each restarts warm. */
/* Lengths of the first n records of the index on the disk, read through
 * a file descriptor of our own. */
static unsigned records_on_disk(unsigned n)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	unsigned used = 0;
	for (unsigned s = 0; s < n; s++) {
		uint32_t len = 0;
		/* record s: 4096 + 48 s; its length after id, blkno, gen */
		cr_assert_eq(pread(fd, &len, 4, 4096 + 48 * (off_t)s + 32), 4);
		used += len != 0;
	}
	close(fd);
	return used;
}

/* The 30 s sync a shard's timer runs: queued on the ring, nothing
 * written before the ring runs it (no pwrite on the caller's thread),
 * on the disk once its CQEs are reaped, and a block written meanwhile is
 * in the next one. */
Test(tier, index_sync_goes_through_the_ring)
{
	struct tier *t = open_tier(path, 64ull * MIB, BIG);
	cr_assert_eq(tier_sync_index_start(t), 0, "a fresh index is clean");
	write_blocks(t, 0, 8);
	cr_assert_eq(records_on_disk(32), 0);
	cr_assert_eq(tier_sync_index_start(t), 1);
	cr_assert_eq(tier_inflight(t), 1);
	cr_assert_eq(tier_sync_index_start(t), -EBUSY);
	cr_assert_eq(tier_sync_index(t), -EBUSY, "idxbuf is the kernel's");
	cr_assert_eq(records_on_disk(32), 0, "queued, not yet submitted");
	struct tier_key k;
	block_key(&k, 8);
	fill(wbuf(8), 8, block_len(8));
	struct result r = {0};
	cr_assert_eq(tier_write(t, &k, wbuf(8), block_len(8), on_done, &r), 0);
	drain(t);
	cr_assert_eq(r.res, (int)block_len(8));
	cr_assert_eq(records_on_disk(32), 8);

	/* A second tier on the file now sees what the sync wrote. */
	struct tier *again = open_tier(path, 64ull * MIB, BIG);
	struct tier_stats st;
	tier_get_stats(again, &st);
	cr_assert_eq(st.n_used, 8);
	read_all(again, 0, 8);
	tier_close(again);

	cr_assert_eq(tier_sync_index_start(t), 1, "block 8 came after");
	drain(t);
	cr_assert_eq(records_on_disk(32), 9);
	cr_assert_eq(tier_sync_index_start(t), 0);
	tier_close(t);
}

Test(tier, regions_of_one_file_are_separate_tiers)
{
	const uint64_t region = 64ull * MIB;
	struct tier *a = open_region(0, region);
	struct tier *b = open_region(region, region);
	write_blocks(a, 0, 40);
	write_blocks(b, 100, 140);
	read_all(a, 0, 40);
	read_all(b, 100, 140);
	cr_assert_eq(read_block(a, 100), -ENOENT);
	cr_assert_eq(read_block(b, 0), -ENOENT);
	struct tier_key k;
	block_key(&k, 139);
	cr_assert_geq(tier_block_offset(b, &k), (int64_t)region);
	tier_close(a);
	tier_close(b);
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_geq((uint64_t)sb.st_size, 2 * region);

	a = open_region(0, region);
	b = open_region(region, region);
	struct tier_stats sa, sbs;
	tier_get_stats(a, &sa);
	tier_get_stats(b, &sbs);
	cr_assert_eq(sa.n_used, 40);
	cr_assert_eq(sbs.n_used, 40);
	read_all(a, 0, 40);
	read_all(b, 100, 140);
	tier_close(a);
	tier_close(b);

	struct tier_config odd = {.path = path, .offset = 4096 + 512,
				  .size_bytes = region, .block_bytes = BIG};
	char err[256] = "";
	cr_assert_null(tier_open(&odd, &ring, NULL, 0, err, sizeof(err)));
	cr_assert(strstr(err, "offset"), "%s", err);
}

Test(tier, corrupt_block_is_dropped)
{
	struct tier *t = open_tier(path, 64ull * MIB, BIG);
	write_blocks(t, 0, 20);
	struct tier_key k;
	block_key(&k, 6);
	int64_t off = tier_block_offset(t, &k);
	cr_assert_geq(off, 0);
	poke(path, off + 1234);
	cr_assert_eq(read_block(t, 6), -EBADMSG);
	uint32_t len;
	cr_assert_eq(tier_lookup(t, &k, &len), -ENOENT);
	cr_assert(tier_enabled(t));
	struct tier_stats st;
	tier_get_stats(t, &st);
	cr_assert_eq(st.crc_errors, 1);
	cr_assert_eq(st.n_used, 19);
	for (unsigned i = 0; i < 20; i++)
		if (i != 6)
			cr_assert_eq(read_block(t, i), 0);
	/* The slot is reusable and the drop persists across a restart. */
	write_blocks(t, 20, 21);
	tier_close(t);
	t = open_tier(path, 64ull * MIB, BIG);
	cr_assert_eq(tier_lookup(t, &k, &len), -ENOENT);
	tier_get_stats(t, &st);
	cr_assert_eq(st.n_used, 20);
	tier_close(t);
}

Test(tier, corrupt_index_records_are_dropped)
{
	struct tier *t = open_tier(path, 64ull * MIB, BIG);
	write_blocks(t, 0, 20);
	struct tier_stats st;
	tier_get_stats(t, &st);
	int64_t rec_off[2];
	unsigned victims[2] = {3, 11};
	for (int v = 0; v < 2; v++) {
		struct tier_key k;
		block_key(&k, victims[v]);
		int64_t slot = (tier_block_offset(t, &k) -
				(int64_t)st.data_off) / st.block_bytes;
		rec_off[v] = TIER_ALIGN + slot * 48 + 9;
	}
	tier_close(t);
	poke(path, rec_off[0]);
	poke(path, rec_off[1]);

	t = open_tier(path, 64ull * MIB, BIG);
	tier_get_stats(t, &st);
	cr_assert_eq(st.n_used, 18);
	for (unsigned i = 0; i < 20; i++)
		cr_assert_eq(read_block(t, i),
			     i == 3 || i == 11 ? -ENOENT : 0, "block %u", i);
	tier_close(t);

	poke(path, 20); /* the header: the whole index goes */
	t = open_tier(path, 64ull * MIB, BIG);
	tier_get_stats(t, &st);
	cr_assert_eq(st.n_used, 0);
	write_blocks(t, 0, 4);
	read_all(t, 0, 4);
	tier_close(t);
}

Test(tier, full_tier_evicts_with_clock)
{
	/* Room for 16 blocks of 64 KiB; only odd (64 KiB) blocks used. */
	uint64_t size = 2 * TIER_ALIGN + 16ull * SMALL;
	struct tier *t = open_tier(path, size, SMALL);
	struct tier_stats st;
	tier_get_stats(t, &st);
	cr_assert_eq(st.n_slots, 16);
	for (unsigned i = 1; i < 33; i += 2)
		write_blocks(t, i, i + 1);
	cr_assert_eq(read_block(t, 5), 0); /* sets its CLOCK bit */
	for (unsigned i = 33; i < 63; i += 2) /* 15 more */
		write_blocks(t, i, i + 1);
	cr_assert_eq(read_block(t, 5), 0, "a block read recently was evicted");
	unsigned present = 0;
	for (unsigned i = 1; i < 63; i += 2) {
		int r = read_block(t, i);
		cr_assert(r == 0 || r == -ENOENT, "block %u: %d", i, r);
		present += r == 0;
	}
	tier_get_stats(t, &st);
	cr_assert_eq(present, 16);
	cr_assert_eq(st.n_used, 16);
	cr_assert_eq(st.evictions, 31 - 16);
	tier_close(t);
	t = open_tier(path, size, SMALL);
	unsigned again = 0;
	for (unsigned i = 1; i < 63; i += 2)
		again += read_block(t, i) == 0;
	cr_assert_eq(again, 16);
	tier_close(t);
}

static void round_trip_on(const char *p, bool expect_direct)
{
	struct tier *t = open_tier(p, 16ull * MIB, BIG);
	struct tier_stats st;
	tier_get_stats(t, &st);
	cr_assert_eq(st.direct, expect_direct);
	write_blocks(t, 0, 8);
	read_all(t, 0, 8);
	tier_close(t);
	t = open_tier(p, 16ull * MIB, BIG);
	read_all(t, 0, 8);
	tier_close(t);
	unlink(p);
}

Test(tier, tmpfs_path_works)
{
	char p[64];
	snprintf(p, sizeof(p), "/dev/shm/rc-tier-test-%d", getpid());
	round_trip_on(p, direct_works(p)); /* tmpfs takes O_DIRECT >= 6.6 */
}

Test(tier, refused_o_direct_falls_back_to_buffered)
{
	/* ramfs refuses O_DIRECT; mount one in a private mount namespace. */
	char mnt[96];
	ramfs_mount(dir, mnt, sizeof(mnt));
	char p[128];
	snprintf(p, sizeof(p), "%s/tier", mnt);
	cr_assert(!direct_works(p), "ramfs took O_DIRECT");
	round_trip_on(p, false);
	ramfs_umount(mnt);
}

Test(tier, missing_directory_is_a_clear_error)
{
	struct tier_config cfg = {.path = "/nonexistent-rc-dir/tier",
				  .size_bytes = 16ull * MIB,
				  .block_bytes = BIG};
	char err[256] = "";
	cr_assert_null(tier_open(&cfg, &ring, &arena_iov, 1, err, sizeof(err)));
	cr_assert_not_null(strstr(err, "/nonexistent-rc-dir/tier"), "%s", err);
	cr_assert_not_null(strstr(err, "No such file or directory"), "%s", err);
	cfg.path = path;
	cfg.size_bytes = 1ull << 50; /* more than the disk: full disk */
	cr_assert_null(tier_open(&cfg, &ring, &arena_iov, 1, err, sizeof(err)));
	cr_assert_not_null(strstr(err, "cannot reserve"), "%s", err);
	cfg.size_bytes = 16ull * MIB;
	cfg.block_bytes = 1000;
	cr_assert_null(tier_open(&cfg, &ring, &arena_iov, 1, err, sizeof(err)));
}

Test(tier, io_error_disables_the_tier)
{
	struct tier *t = open_tier(path, 16ull * MIB, BIG);
	write_blocks(t, 0, 2);
	/* Shrink the file under the tier: reads past EOF come back short. */
	cr_assert_eq(truncate(path, 0), 0);
	int r = read_block(t, 0);
	cr_assert_eq(r, -EIO);
	cr_assert(!tier_enabled(t));
	struct tier_key k;
	uint32_t len;
	block_key(&k, 1);
	cr_assert_eq(tier_lookup(t, &k, &len), -ENOENT);
	cr_assert_eq(tier_write(t, &k, wbuf(1), SMALL, NULL, NULL), -ENODEV);
	tier_close(t);
}
