/* validate.h - the checks on what a client writes: submission entries,
 * keys in arg slots, buffer ranges, handle and lease ids, ring indices
 * and the ring sizes it asks for at ATTACH.
 *
 * Use: session_ring.c calls these on its private copy of an entry (never on
 * the shared ring, which the client may change after the check), at the
 * points where it makes each check, so the errno a malformed entry gets
 * is the one include/ringcache.h documents. Every function is pure: no
 * session, no shard, no I/O; the caller passes the state a check needs
 * (slot count, table capacity, buffer size).
 *
 * Ownership: nothing is allocated or kept; validate_key_copy writes only
 * the caller's buffer. */
#ifndef RC_VALIDATE_H
#define RC_VALIDATE_H

#include <stdbool.h>
#include <stdint.h>

#include "ringcache.h"

#define VALIDATE_MAX_BUFS 64u        /* registered buffers per session */
#define VALIDATE_MAX_REGBUF (1ull << 40)
#define VALIDATE_RING_HDR 4096u      /* the header page before the SQ */
#define VALIDATE_DEFAULT_SQ 256u
#define VALIDATE_MAX_SQ 4096u
#define VALIDATE_DEFAULT_ARGS 64u
#define VALIDATE_MAX_ARGS 1024u

/* The entry as a whole, before anything else: an opcode past RC_OP__COUNT,
 * a flag bit the opcode does not accept, a reserved field set, or a field
 * the opcode does not read (include/ringcache.h's table) is -EINVAL. SYNC
 * reads dataset and arg only with handle RC_SYNC_PREFIX. 0 if well
 * formed. */
int validate_sqe(const struct rc_sqe *e);

/* An arg slot index against the session's slot count: -EINVAL past it. */
int validate_arg_slot(uint32_t arg, uint32_t arg_slots);

/* A key (or prefix) in arg slot `arg` of `arg_len` bytes: the slot must
 * exist and the length be at most RC_MAX_KEY, and not 0 unless
 * allow_empty; copies the bytes from the slot array `args` into key
 * (RC_MAX_KEY + 1 bytes, NUL-terminated) and checks the copy, so a
 * client rewriting the slot meanwhile cannot change what was checked.
 * -EINVAL for any of those, a NUL inside, a leading '/', or a "." or ".."
 * segment (URL normalisation would leave the dataset's prefix). */
int validate_key_copy(const uint8_t *args, uint32_t arg_slots, uint32_t arg,
		      uint32_t arg_len, bool allow_empty, char *key);
/* The checks on the copy alone: key is NUL-terminated, len its length as
 * the client stated it. */
int validate_key(const char *key, uint32_t len);

/* A dataset id against the datasets the session knows: -ENOENT past them. */
int validate_dataset_id(uint32_t id, uint32_t n_datasets);
/* A known dataset for a read: -ENOENT if removed (disabled) by a reload,
 * -EACCES if `access` (RC_ACCESS_*) lacks `need`. */
int validate_access(bool enabled, uint32_t access, uint32_t need);

/* A table id (object handle, lease id) against the table's capacity:
 * -EBADF past it. The caller then finds the slot empty or not (-EBADF). */
int validate_table_id(uint32_t id, uint32_t cap);

/* A registered buffer index: -EBADF past VALIDATE_MAX_BUFS. */
int validate_buf_index(uint32_t index);
/* [offset, offset + len) inside a registered buffer of `size` bytes (0:
 * that index is not registered, -EBADF); -EFAULT if it leaves the
 * buffer, whatever the overflow. */
int validate_buf_range(uint64_t offset, uint64_t len, uint64_t size);
/* REGISTER_BUF's size: 0 or past VALIDATE_MAX_REGBUF is -EINVAL. */
int validate_regbuf_size(uint64_t size);

/* READ, READ_INTO and WRITE move at most RC_MAX_IO bytes: -EINVAL past. */
int validate_io_len(uint64_t len);
/* LIST's entry offset is a 32-bit count: -EINVAL from 2^32 on. */
int validate_list_offset(uint64_t offset);
/* PREFETCH_PLAN's len: whole rc_plan_entry records, or -EINVAL. */
int validate_plan_len(uint64_t len);

/* How many entries to take from the SQ: sq_tail is the client's, sq_head
 * the daemon's private copy; a wild tail (behind the head, or more than
 * a ring ahead) yields at most one ring's worth. */
uint32_t validate_sq_pending(uint32_t sq_tail, uint32_t sq_head,
			     uint32_t sq_entries);
/* Free CQ slots: cq_head is the client's, cq_tail the daemon's; a wild
 * head (ahead of the tail, or a ring behind) leaves no room, so
 * completions wait in the backlog and nothing is overwritten. */
uint32_t validate_cq_room(uint32_t cq_tail, uint32_t cq_head,
			  uint32_t cq_entries);

/* The region a session's rings take, from the sizes ATTACH asks for (0:
 * defaults): SQ and CQ rounded up to powers of two within their maxima,
 * the CQ at least the SQ and 2 entries (every offset 64-byte aligned),
 * the arg slots within their maximum; offsets of each part and the
 * page-rounded size. */
struct ring_geometry {
	uint32_t sq_entries, cq_entries, arg_slots;
	uint64_t sq_off, cq_off, arg_off, size;
};
void validate_ring_geometry(uint32_t sq, uint32_t cq, uint32_t args,
			    struct ring_geometry *g);

#endif
