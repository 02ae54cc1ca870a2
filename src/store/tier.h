/* tier.h - the NVMe tier: blocks evicted from DRAM kept in one file (or
 * block device) of a fixed size, driven through the caller's io_uring, its
 * index persisted with checksums so a restarted daemon starts warm.
 *
 * Ownership. The caller (a shard's reactor) owns the io_uring and its
 * loop: the tier only queues SQEs (submitting itself only when the SQ is
 * full), each carrying a struct rc_ev (uring.h) whose handler calls
 * tier_complete(): the caller hands every CQE to rc_ev_dispatch. The tier takes the ring's
 * registered-file table (the tier file) and registered-buffer table (the
 * arena iovecs given to tier_open), so nothing else may register files or
 * buffers on that ring; if either registration fails (table busy,
 * RLIMIT_MEMLOCK) the tier logs it once and uses plain READ/WRITE.
 *
 * Registered buffers are pinned pages: the caller must not punch holes in
 * (or otherwise replace the pages of) a registered arena mapping while the
 * tier is open, or fixed I/O would land in the old pages.
 *
 * On disk, from the configured offset: a 4 KiB header (magic, version,
 * block size, tier size, slot count, CRC32C), one 48-byte record per slot
 * (key, length, data CRC32C, generation, record CRC32C), then the slots,
 * block_bytes each. A block
 * is identified by a 128-bit hash of "dataset\0key\0etag" plus its block
 * number, so identities survive restarts and an object whose ETag changed
 * simply never matches. Every read is checked against the block's CRC32C:
 * a mismatch drops the block and reports -EBADMSG, so the caller refetches
 * from S3; stale records left by a crash between index syncs fail that
 * check too and are never served.
 *
 * Buffers: I/O is done in whole 4 KiB units (O_DIRECT), so src/dst must be
 * 4 KiB aligned with room for tier_io_len(len) bytes. src must stay
 * unchanged and dst untouched until the callback runs. */
#ifndef RC_TIER_H
#define RC_TIER_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define TIER_ALIGN 4096u

struct tier;

struct tier_config {
	const char *path;     /* regular file (created) or block device */
	uint64_t offset;      /* where this tier starts in path (4 KiB aligned):
				 shards share one file or device, each its
				 own region */
	uint64_t size_bytes;  /* header + index + slots; a device's size caps it */
	uint32_t block_bytes; /* slot size: largest block, multiple of 4 KiB */
};

struct tier_key {
	uint64_t id[2];       /* 128-bit hash of "dataset\0key\0etag" */
	uint64_t blkno;
};

/* Completion callback: res is the block's length, or -errno. */
typedef void (*tier_done_fn)(void *ctx, int res);

void tier_key_make(struct tier_key *k, const char *dataset,
		   const char *object_key, const char *etag, uint64_t blkno);

static inline uint32_t tier_io_len(uint32_t len)
{
	return (len + TIER_ALIGN - 1) & ~(TIER_ALIGN - 1);
}

/* Opens (and formats or loads) the tier. Returns NULL with err set when
 * the tier cannot be used (missing directory or device, full disk, bad
 * size); the caller then runs DRAM-only. */
struct tier *tier_open(const struct tier_config *cfg, struct io_uring *ring,
		       const struct iovec *arena_iovs, unsigned n_iovs,
		       char *err, size_t errlen);

/* Syncs the index and releases everything. tier_inflight() must be 0. */
void tier_close(struct tier *t);

/* 0 and *len if the block is on the tier, else -ENOENT. */
int tier_lookup(struct tier *t, const struct tier_key *k, uint32_t *len);

/* Reads a block into dst; done(ctx, len) after its CRC32C matched,
 * done(ctx, -EBADMSG) if it did not (the block is dropped), -EIO if the
 * device failed (the tier is disabled). Returns 0 when queued, -ENOENT if
 * the block is absent, -ENODEV when the tier is disabled. */
int tier_read(struct tier *t, const struct tier_key *k, void *dst,
	      uint32_t len, tier_done_fn done, void *ctx);

/* Admits a block (len <= block_bytes), evicting with CLOCK when full.
 * done(ctx, len) once it is on the tier. Returns 0 when queued, -EEXIST if
 * the key is present or being written, -EBUSY if every slot is in I/O,
 * -EINVAL for a bad length, -ENODEV when disabled. */
int tier_write(struct tier *t, const struct tier_key *k, const void *src,
	       uint32_t len, tier_done_fn done, void *ctx);

/* Handles one CQE of the tier's (its rc_ev handler calls this). */
void tier_complete(struct tier *t, struct io_uring_cqe *cqe);

/* Writes the index (pwrite + fdatasync; blocks the caller) if it changed:
 * at open and close, off any reactor. Returns 0, -EBUSY while
 * tier_sync_index_start's sync is in flight, or -errno (the tier is then
 * disabled). */
int tier_sync_index(struct tier *t);

/* The same without blocking, for a reactor: queues the index's write and
 * then an fdatasync on the tier's ring (counted in tier_inflight()).
 * Returns 1 when queued, 0 when the index has not changed, -EBUSY while
 * the previous one is in flight or the SQ is full (try again later),
 * -ENODEV when the tier is disabled. A failure on the disk disables the
 * tier (logged). Blocks written while it is in flight are in the next. */
int tier_sync_index_start(struct tier *t);

bool tier_enabled(const struct tier *t);
unsigned tier_inflight(const struct tier *t);

/* File offset of a block's data, or -ENOENT (tests, debugging tools). */
int64_t tier_block_offset(struct tier *t, const struct tier_key *k);

struct tier_stats {
	uint64_t n_slots, n_used;
	uint64_t data_off;    /* first slot from the tier's offset; records
				 from 4096 */
	uint32_t block_bytes;
	uint64_t hits, misses, writes, evictions, crc_errors, io_errors;
	bool direct, fixed_files, fixed_bufs;
};
void tier_get_stats(const struct tier *t, struct tier_stats *st);
/* Bytes in used slots and in all slots; unlike tier_get_stats, safe from
 * a thread other than the owner's (STATS rendered on another shard). */
void tier_bytes_used(const struct tier *t, uint64_t *used, uint64_t *total);

#endif
