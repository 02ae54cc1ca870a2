/* journal.h - the write-back journal: an append-only log on local disk
 * that makes acknowledged checkpoint bytes durable before S3 has them, and
 * gives them back after a crash.
 *
 * Ownership. As with the tier (tier.h), the caller (a shard's reactor)
 * owns the io_uring and its loop: the journal queues SQEs (and submits
 * each write and fdatasync at once, so the disk is busy while the caller
 * goes on appending), each carrying a struct rc_ev (uring.h) whose
 * handler calls journal_complete(): the caller hands every CQE to
 * rc_ev_dispatch. The journal registers nothing with the ring.
 *
 * Use. journal_append_*() record what happens to an object (OPEN, DATA,
 * COMMIT, RENAME, DONE once S3 has it, ABORT). They copy what they are
 * given into the journal's own 4 KiB aligned buffers, so every buffer and
 * string passed in is the caller's again on return. Nothing appended is
 * durable until journal_flush()'s callback says so: that is the moment the
 * daemon may acknowledge `local` durability.
 *
 * Restart. journal_open() replays the file: journal_replayed() lists every
 * object COMMITTED and not DONE or ABORTED (dataset, final key after
 * renames, the keys it had before them, size, optional MD5, and the extents
 * that hold its bytes in the journal file; journal_read() reads them back,
 * checked), and marks superseded the ones whose dataset and key another
 * object took later (its COMMIT, or its RENAME once committed, comes after
 * theirs in the log, whether it was uploaded since or not): their bytes
 * are older than what the writer last acknowledged for that key. Objects opened
 * but never committed are listed by journal_discarded() and forgotten
 * (ABORT records are appended for them). Replayed objects stay live in the
 * journal under their ids: the caller appends DONE (or ABORT) for them once
 * handled.
 *
 * On disk: a 4 KiB header (magic, version, epochs, CRC32C), then records
 * from offset 4096, each a 40-byte header (magic, type, payload length,
 * epoch, object id, argument, CRC32C of the payload, CRC32C of the header)
 * and its payload, 8-byte aligned; a record never starts in the last 40
 * bytes of a 4 KiB block. Writes are whole 4 KiB blocks (O_DIRECT where the
 * file system takes it, buffered I/O otherwise; an fdatasync through the
 * ring either way). Records by type (the argument is the header's):
 *   OPEN    u16 dataset length, u16 key length, dataset, key
 *   DATA    argument = offset in the object; the bytes
 *   COMMIT  argument = size; flag 1: the object's MD5 (16 bytes); flag 2:
 *           then the writer's token (16 bytes: the proof that an object
 *           found in S3 is this one's upload, see upload.h; a version 1
 *           reader without it ignores the flag); flag 4: then the
 *           writer's uid (u32: whose SYNC a failed replay is reported
 *           to; ignored the same way by readers without it)
 *   RENAME  the new key (replay keeps the old ones: old_keys)
 *   DONE    the ETag S3 gave
 *   ABORT   empty (also for an upload S3 refused for good)
 * Version 1 (unchanged by the write-path work: RENAME and ABORT were
 * already records; what changed is that the daemon flushes them before it
 * acknowledges). A file of another version is refused at open with a
 * clear error, never reformatted: move it aside (its objects are then
 * lost) or start the version that wrote it to drain it.
 * Replay stops at the first record that is torn, fails a
 * checksum, or carries an epoch older than the one before it (left over
 * from an earlier pass over the same space): nothing after it is trusted.
 *
 * Space. The file never grows past size_limit. OPEN and DATA give -ENOSPC
 * when they would eat into the room kept for the COMMIT/DONE/ABORT/RENAME
 * records of the live objects; the caller applies back-pressure and tries
 * again later. Once every object is DONE or ABORTED and the writes have
 * completed, the next append rewinds the journal to its start (a new epoch,
 * in the header, written on the ring ahead of the new records: a record
 * after the rewind is durable, and its flush done, only with the header
 * on the disk). Short of
 * room, it rewinds as well when the live objects are all open (not yet
 * committed, so nothing of them was acknowledged): their OPEN records are
 * written again and their DATA records become stale; journal_dropped()
 * then says so, and the writer logs the object's bytes again (after
 * journal_relog_start) before its COMMIT, which is -ESTALE until then.
 * Only committed objects not yet DONE keep the journal from rewinding:
 * an open object, however small or idle, cannot. DATA past what the
 * journal could hold for one object alone is -ENOSPC at once. RENAME,
 * like OPEN and DATA, may not use the room kept for the live objects'
 * COMMIT and DONE (-ENOSPC). */
#ifndef RC_JOURNAL_H
#define RC_JOURNAL_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_MAX_NAME 1024 /* longest dataset name, key or ETag */

struct journal;

struct journal_config {
	const char *path;    /* regular file, created if missing */
	uint64_t size_limit; /* bytes, header included; rounded down to 4 KiB */
};

/* Where some of an object's bytes lie in the journal file. Extents are in
 * the order they were written: a later one overwrites an earlier one where
 * they overlap. Bytes no extent covers are zeros. */
struct journal_extent {
	uint64_t file_off;
	uint64_t obj_off;
	uint32_t len;
	uint32_t crc; /* CRC32C of the len bytes */
};

struct journal_object {
	uint64_t id;
	char *dataset;
	char *key;       /* after every RENAME */
	char **old_keys; /* replayed: the keys it had before, oldest first
			    (uploads under them may have reached S3) */
	size_t n_old_keys;
	uint32_t cap_old_keys; /* RC_GROW's */
	uint64_t size;   /* from COMMIT; 0 for a discarded object */
	bool has_md5;
	uint8_t md5[16]; /* MD5 of the object (S3's single-part ETag) */
	bool has_token;
	uint8_t token[16]; /* the writer's token (COMMIT flag 2) */
	bool has_uid;
	uint32_t uid;      /* the writer's uid (COMMIT flag 4) */
	bool superseded; /* replayed: a later object took its dataset and key */
	struct journal_extent *extents;
	size_t n_extents;
};

/* Completion callback of journal_flush(): res is 0 when every record
 * appended before the flush is on disk, or -errno (the journal failed). */
typedef void (*journal_done_fn)(void *ctx, int res);

/* Opens (creating and formatting, or replaying) the journal. Returns NULL
 * with err set when it cannot be used (missing directory, a file that is
 * not a journal, no space for size_limit). Blocks: reads the whole log. */
struct journal *journal_open(const struct journal_config *cfg,
			     struct io_uring *ring, char *err, size_t errlen);

/* Writes what was appended and not yet flushed (blocking pwrite and
 * fdatasync) when no I/O is in flight, then frees everything. */
void journal_close(struct journal *j);

/* Each returns 0 when the record is queued, or -errno: -EEXIST (id already
 * live), -ENOENT (unknown id), -EINVAL (wrong state, e.g. DATA after
 * COMMIT, or a name longer than JOURNAL_MAX_NAME), -ENOSPC (journal full:
 * back-pressure), -EAGAIN (too many bytes waiting for the disk: retry
 * after completions), -EIO (the journal failed). Nothing is appended when
 * an error is returned. */
int journal_append_open(struct journal *j, uint64_t id, const char *dataset,
			const char *key);
int journal_append_data(struct journal *j, uint64_t id, uint64_t obj_off,
			const void *buf, size_t len);
/* md5, token and uid may be NULL. */
int journal_append_commit(struct journal *j, uint64_t id, uint64_t size,
			  const uint8_t md5[16], const uint8_t token[16],
			  const uint32_t *uid);
int journal_append_done(struct journal *j, uint64_t id, const char *etag);
int journal_append_abort(struct journal *j, uint64_t id);
int journal_append_rename(struct journal *j, uint64_t id, const char *key);

/* Whether a rewind made object id's DATA records stale since it was
 * opened or since journal_relog_start (false for an unknown id). */
bool journal_dropped(const struct journal *j, uint64_t id);
/* The writer starts logging id's bytes again: journal_dropped is false
 * until the next rewind. 0, -ENOENT, or -EINVAL (not open). */
int journal_relog_start(struct journal *j, uint64_t id);

/* Writes out everything appended so far and queues an fdatasync ordered
 * after those writes (it is queued once they completed); done(ctx, 0) runs
 * when all of it is durable. done runs before journal_flush returns when
 * nothing is pending. Returns 0, -ENOMEM or -EIO (done is then not
 * called). */
int journal_flush(struct journal *j, journal_done_fn done, void *ctx);

/* For an append that gave -EAGAIN: done(ctx, 0) runs once a write in
 * flight has completed, so the append may be tried again (it may give
 * -EAGAIN again); done(ctx, res < 0) when the journal failed. Unlike
 * journal_flush it waits for no fdatasync. With no write in flight it
 * falls back to journal_flush. Returns 0, -ENOMEM or -EIO (done is then
 * not called). */
int journal_wait_room(struct journal *j, journal_done_fn done, void *ctx);

/* Handles one CQE whose user_data is the journal's (its rc_ev handler calls this). */
void journal_complete(struct journal *j, struct io_uring_cqe *cqe);

/* SQEs queued and not yet completed. */
unsigned journal_inflight(const struct journal *j);

/* What journal_open found; valid until journal_close. */
size_t journal_n_replayed(const struct journal *j);
const struct journal_object *journal_replayed(const struct journal *j,
					      size_t i);
size_t journal_n_discarded(const struct journal *j);
const struct journal_object *journal_discarded(const struct journal *j,
					       size_t i);

/* Reads [off, off+len) of a replayed object into dst (blocking preads),
 * checking each extent's CRC32C. Returns 0, -EBADMSG (an extent failed its
 * check) or -EIO. */
int journal_read(struct journal *j, const struct journal_object *o,
		 uint64_t off, void *dst, size_t len);

struct journal_stats {
	uint64_t size_limit;
	uint64_t used_bytes;   /* from the first record to the tail */
	uint64_t live_objects; /* opened, not DONE or ABORTED */
	uint32_t epoch;
	uint64_t records, data_bytes, writes, fsyncs, rewinds;
	uint64_t dropped;      /* open objects whose DATA a rewind dropped */
	bool direct;
	bool failed;
};
void journal_get_stats(const struct journal *j, struct journal_stats *st);

#endif
