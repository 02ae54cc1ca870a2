/* ringcache.h - the whole client API of ringcache.
 *
 * A process attaches to ringcached over its Unix socket and receives, by
 * SCM_RIGHTS, one read-write "ring region" for its session and one read-only
 * arena mapping per dataset it may read. Requests are 64-byte submission
 * entries (SQEs) written into the SQ ring; results are 32-byte completion
 * entries (CQEs) read from the CQ ring. A zero-copy READ completes with the
 * arena offset of the bytes; they stay put (leased) until RELEASE.
 *
 * Ring region layout (offsets are in struct rc_ring_hdr, all 64-byte
 * aligned; the daemon fills the header before handing the region over):
 *
 *   0            struct rc_ring_hdr          (one 4 KiB page)
 *   sq_off       struct rc_sqe[sq_entries]   client writes, daemon reads
 *   cq_off       struct rc_cqe[cq_entries]   daemon writes, client reads
 *   arg_off      arg slots[arg_slots]        RC_ARG_SLOT_SIZE bytes each:
 *                                            keys in, ETags/names out
 *
 * Ownership of the indices: the client owns sq_tail and cq_head, the daemon
 * owns sq_head and cq_tail. Each side publishes with a release store and
 * reads the other's with an acquire load. Doorbells: the daemon sets
 * RC_SQ_NEED_WAKEUP in sq_flags before it sleeps; only then does a
 * submitter write to the SQ eventfd. A client about to block sets
 * RC_CQ_NEED_WAKEUP in cq_flags and sleeps on the CQ eventfd; the daemon
 * writes it only when that flag is set. A busy client and a busy daemon so
 * exchange work without a system call.
 *
 * Everything a client writes is validated by the daemon; a malformed entry
 * fails alone (-EINVAL, -EBADF, ...), it never stops the session.
 *
 * rc_client is not thread-safe: use one per thread (they are cheap). The
 * synchronous helpers (rc_open, rc_read, rc_read_many, ...) wait for their
 * own completion and must not be mixed with asynchronous submissions in
 * flight on the same client; lazily posted RELEASE and CLOSE entries
 * (rc_release_lazy, rc_close_lazy) mix with everything. A sample is one
 * entry: READ_KEY (rc_read_many) opens, reads and closes in one.
 *
 * Only libc is needed: link with -lringcache (pkg-config ringcache).
 */
#ifndef RINGCACHE_H
#define RINGCACHE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The ring indices are shared with another process: C11 atomics in C,
 * std::atomic (the same size and representation for a lock-free 32-bit
 * integer) in C++, so C++ loaders and PyTorch extensions use the header
 * as it is. */
#ifdef __cplusplus
#include <atomic>
#define RC_ATOMIC(T) std::atomic<T>
#define RC_ALIGNAS(n) alignas(n)
#define rc_load_(p, mo) std::atomic_load_explicit(p, std::memory_order_##mo)
#define rc_store_(p, v, mo) \
	std::atomic_store_explicit(p, v, std::memory_order_##mo)
#define rc_fence_seq_cst_() std::atomic_thread_fence(std::memory_order_seq_cst)
#else
#include <stdatomic.h>
#define RC_ATOMIC(T) _Atomic T
#define RC_ALIGNAS(n) _Alignas(n)
#define rc_load_(p, mo) atomic_load_explicit(p, memory_order_##mo)
#define rc_store_(p, v, mo) atomic_store_explicit(p, v, memory_order_##mo)
#define rc_fence_seq_cst_() atomic_thread_fence(memory_order_seq_cst)
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define RC_ABI_VERSION 2 /* 2: READ_KEY, lazy RELEASE/CLOSE */
#define RC_RING_MAGIC 0x52434331u /* "RCC1": rc_ring_hdr.magic */

#define RC_ARG_SLOT_SIZE 2048u  /* holds an S3 key (<= 1024 bytes) and more */
#define RC_MAX_KEY 1024u
#define RC_MAX_ETAG 128u
#define RC_MAX_DATASETS 128u
#define RC_DATASET_NAME_MAX 64u
#define RC_MAX_IO (1u << 30)    /* largest len of one READ_INTO */
#define RC_NO_LEASE 0xffffffffu

/* ---- Opcodes ------------------------------------------------------------
 * Fields each opcode reads (all others must be zero, or -EINVAL):
 *
 * NOP        -                          res 0
 * OPEN       dataset, arg, arg_len      key in arg slot; res = handle,
 *                                       addr = object size, ETag written to
 *                                       the arg slot as a NUL-terminated
 *                                       string
 * STAT       handle, arg                res 0, addr = size, ETag in arg slot
 * LIST       dataset, arg, arg_len,     prefix (relative to the dataset) in
 *            offset, buf_index,         the arg slot; writes rc_list_entry
 *            buf_offset, len            records into the buffer starting at
 *                                       entry number `offset`; res = number
 *                                       of entries, RC_CQE_F_MORE if the
 *                                       buffer filled before the end
 * READ       handle, offset, len        zero-copy: res = bytes (short at a
 *                                       block boundary, 0 at/after EOF),
 *                                       arena + addr say where they lie,
 *                                       lease must be RELEASEd
 * READ_INTO  handle, offset, len,       copies [offset, offset+len) clamped
 *            buf_index, buf_offset      to the object into the registered
 *                                       buffer; res = bytes copied
 * RELEASE    handle = lease id          res 0
 * CLOSE      handle                     res 0
 * PREFETCH_PLAN  buf_index, buf_offset, len = bytes of an array of
 *            rc_plan_entry (handles of this session); replaces the
 *            session's plan (an empty array drops it); res = entries.
 *            The daemon keeps a window ahead of the entry the session
 *            last READ from fetched and protected from eviction.
 *            flags = RC_PLAN_APPEND: the entries follow the current plan
 *            instead of replacing it (the next epoch's order, sent while
 *            this one runs): nothing is cancelled, the window slides on
 *            into them, and eviction sees each block's next use across
 *            the boundary. With no current plan it starts one. Any other
 *            flag bit: -EINVAL for that entry only.
 * Checkpoint write-back (datasets with writable = true):
 * WRITE_OPEN dataset, arg, arg_len       key; res = a write handle
 *                                       (RC_WRITE_HANDLE set)
 * WRITE      handle, offset, len,       copies [buf_offset, +len) of the
 *            buf_index, buf_offset      registered buffer to offset in the
 *                                       object (any order); res = len;
 *                                       -EAGAIN: staging memory full, SYNC
 *                                       and write again
 * COMMIT     handle                     the object is complete; completes
 *                                       when it is as durable as the
 *                                       dataset's durability (memory: at
 *                                       once; local: journaled and flushed;
 *                                       s3: uploaded); it then uploads
 * ABORT      handle                     drops an uncommitted object
 * RENAME     handle, arg, arg_len       new key: free before the upload
 *                                       ends, a server-side copy after
 *                                       (completes when the copy and the
 *                                       old key's delete are done; fails
 *                                       with S3's error, e.g. EIO past the
 *                                       retries, ENOENT if the object is
 *                                       gone from S3, and the object keeps
 *                                       its name; a failed delete of the
 *                                       old key is logged and leaves it,
 *                                       the RENAME still succeeds; the
 *                                       delete is conditional on the
 *                                       ETag copied, so another writer's
 *                                       newer object there stays)
 *            (durability local: ABORT and RENAME complete once their
 *            journal record is on disk; a restart never undoes them)
 * SYNC       handle                     completes when S3 has the object;
 *            or handle RC_SYNC_ALL      ... every object of this shard;
 *            or RC_SYNC_PREFIX +        ... those under a prefix
 *            dataset, arg, arg_len      (those two also fail with the
 *                                       error of an object of the
 *                                       caller's uid whose upload failed
 *                                       before, until a later save of its
 *                                       key lands; other uids' failures
 *                                       are not theirs)
 * CLOSE on a write handle drops it (an uncommitted object is aborted).
 * One sample, one entry:
 * READ_KEY   dataset, arg, arg_len,     OPEN and READ in one entry: the key
 *            offset, len                in the arg slot; res, arena, addr
 *                                       and lease as for READ (one block at
 *                                       most: short at a block boundary, 0
 *                                       at/after EOF); on success the daemon
 *                                       writes a struct rc_key_result (size,
 *                                       handle, ETag) over the arg slot.
 *            flags = RC_READ_KEY_CLOSE: the handle is closed when the entry
 *            completes if nothing of [offset, offset+len) is left past the
 *            bytes returned (the usual sample: one block or less); else
 *            it stays open (rc_key_result.handle) for the READs of the
 *            rest, and the caller CLOSEs it. Without the flag the handle
 *            always stays open. On an error no handle and no lease are
 *            held and the arg slot is not written. Any other flag bit:
 *            -EINVAL. A cold READ_KEY whose object the daemon knows (a
 *            LIST of its prefix within metadata_ttl, or an earlier OPEN)
 *            is one ranged GET with If-Match and no HEAD; an object
 *            changed in S3 since then is -ESTALE (never mixed bytes), and
 *            the next READ_KEY of that key asks S3 afresh.
 */
enum rc_op {
	RC_OP_NOP = 0,
	RC_OP_OPEN = 1,
	RC_OP_STAT = 2,
	RC_OP_LIST = 3,
	RC_OP_READ = 4,
	RC_OP_READ_INTO = 5,
	RC_OP_RELEASE = 6,
	RC_OP_CLOSE = 7,
	RC_OP_PREFETCH_PLAN = 8,
	RC_OP_WRITE_OPEN = 9,
	RC_OP_WRITE = 10,
	RC_OP_COMMIT = 11,
	RC_OP_ABORT = 12,
	RC_OP_RENAME = 13,
	RC_OP_SYNC = 14,
	RC_OP_READ_KEY = 15,
	RC_OP__COUNT
};

/* Submission entry: 64 bytes. */
struct rc_sqe {
	uint8_t opcode;      /* enum rc_op */
	uint8_t flags;       /* RC_PLAN_APPEND, RC_READ_KEY_CLOSE; else 0 */
	uint16_t arg;        /* arg slot index */
	uint32_t handle;     /* object handle, or lease id for RELEASE */
	uint64_t offset;     /* byte offset in the object (entry index: LIST) */
	uint64_t len;        /* byte count */
	uint64_t user_data;  /* echoed in the completion */
	uint32_t buf_index;  /* registered buffer */
	uint32_t dataset;    /* dataset id from the attach reply */
	uint64_t buf_offset; /* byte offset in the registered buffer */
	uint32_t arg_len;    /* bytes of input in the arg slot */
	uint32_t reserved0;  /* must be 0 */
	uint64_t reserved1;  /* must be 0 */
};

/* Completion entry: 32 bytes. */
struct rc_cqe {
	uint64_t user_data;
	int32_t res;     /* >= 0 result, < 0 a negated errno */
	uint32_t flags;  /* RC_CQE_F_* */
	uint64_t addr;   /* READ: arena offset; OPEN/STAT: object size */
	uint32_t lease;  /* READ: lease id, or RC_NO_LEASE */
	uint32_t arena;  /* READ: dataset id of the arena holding the bytes */
};

#define RC_WRITE_HANDLE 0x40000000u /* set in every write handle (res stays >= 0) */
#define RC_SYNC_ALL 0xffffffffu
#define RC_SYNC_PREFIX 0xfffffffeu

/* SQE flags (rc_sqe.flags), by opcode; every other bit must be 0. */
#define RC_PLAN_APPEND 1u /* PREFETCH_PLAN: append to the current plan */
#define RC_READ_KEY_CLOSE 1u /* READ_KEY: close the handle when done */
/* OPEN: the handle is to get the number in rc_sqe.handle (the library
 * re-opens its handles so after a re-attach). -EBUSY if that handle is
 * open, -EDQUOT if it is not below max_handles; the OPEN itself is checked
 * like any other (ACL, dataset, key). */
#define RC_OPEN_AT 1u

/* Lease ids carry the session's lease generation in their top bits (0 on
 * a first attach, counting up with each re-attach after the daemon was
 * lost, wrapping from RC_LEASE_GEN_MAX to 1); the daemon refuses a
 * RELEASE of another generation's lease with -EBADF. */
#define RC_LEASE_GEN_SHIFT 20u
#define RC_LEASE_GEN_MAX 2047u
#define RC_LEASE_GEN(lease) ((uint32_t)(lease) >> RC_LEASE_GEN_SHIFT)
/* The daemon's lease ids stay below 1u << 31 (RC_LEASE_GEN_MAX); the
 * library marks its own with this bit: an extent of rc_read_many copied
 * into this process's memory (see struct rc_read_req). RC_NO_LEASE has it
 * too and is no lease. */
#define RC_LEASE_LOCAL 0x80000000u

/* The one user_data value the library keeps for itself: the completions
 * of lazily posted RELEASE and CLOSE (rc_release_lazy, rc_close_lazy).
 * rc_peek_cqe and rc_wait_cqe consume those themselves (counting failures
 * in rc_client.lazy_errors) and never return them. Every other value,
 * UINT64_MAX included, is the caller's. */
#define RC_USER_DATA_LAZY 0xffffffffffffff01ull

#define RC_CQE_F_MORE 1u /* LIST: more entries follow */
#define RC_CQE_F_HIT 2u  /* READ/READ_INTO: served without waiting for S3 */

/* Errors (negated in res); rc_last_error() gives the daemon's text of the
 * last one, naming dataset, bucket and cause (docs/ERRORS.md):
 *   EINVAL   malformed entry (bad opcode, reserved field set, bad slot)
 *   EBADF    unknown handle, lease or buffer index
 *   EFAULT   buffer range outside the registered buffer
 *   EACCES   the dataset's ACL in the daemon's config (allow_uids/gids,
 *            write_uids/gids) does not admit this peer; also for handles
 *            opened before a reload removed the peer from it
 *   EPERM    S3 denied the daemon access (AccessDenied: its S3
 *            credentials or the bucket policy), not the ACL above
 *   ENOENT   no such object; or an unknown dataset (never configured, or
 *            removed by a reload: also for handles opened before)
 *   ENODEV   the dataset's bucket does not exist (S3's NoSuchBucket)
 *   ENXIO    the S3 endpoint's host name does not resolve (DNS)
 *   ECONNREFUSED  nothing listens at the S3 endpoint (in a CQE; from
 *            rc_attach it means no daemon on the socket)
 *   EHOSTUNREACH, ENETUNREACH  the S3 endpoint is unreachable
 *   ETIMEDOUT  connecting to the S3 endpoint timed out
 *   ESTALE   the object changed in S3 after OPEN: open it again
 *   EKEYREJECTED  S3 refused the daemon's credentials (wrong access key
 *            or secret key: SignatureDoesNotMatch, InvalidAccessKeyId)
 *   EKEYEXPIRED  S3 says the daemon's credentials expired (ExpiredToken)
 *   EIO      S3 failed after all retries
 *   EPROTO   S3 answered with a reply that breaks a rule (never retried;
 *            the daemon logs one line naming dataset, bucket, key and the
 *            rule): a LIST name outside or shorter than the prefix, empty,
 *            over 1024 bytes or with a "." or ".." segment; a size over
 *            the dataset's max_object_size; an ETag over 127 bytes or
 *            none; a GET whose Content-Range or length is not the range
 *            asked for, or names another object size; malformed XML; a
 *            listing of more than 10000 pages
 *   ENOMEM   the cache has no evictable room (too many leases)
 *   EMFILE   too many leases in this session (the table's 1M)
 *   EDQUOT   a limit of this session or of its uid (ringcache.conf
 *            [daemon]), never a full cache: leased bytes on READ
 *            (max_leased_per_session, max_leased_per_uid; RELEASE
 *            some), bytes of READ/READ_INTO in flight, each block a
 *            read spans counting whole (max_inflight_per_session,
 *            max_inflight_per_uid; reap completions, or read less at
 *            once), handles on OPEN (max_handles: CLOSE some), plan
 *            blocks of the uid on PREFETCH_PLAN (max_plan_entries_per_uid)
 *   E2BIG    PREFETCH_PLAN: the plan covers more than max_plan_entries
 *            blocks (an entry of k blocks counts k; with RC_PLAN_APPEND,
 *            the current plan's entries from the last one read on count
 *            too); nothing changes
 *   EROFS    dataset not writable
 *   EAGAIN   write-back staging memory full (SYNC, then write again)
 *   ENOSPC   the write-back journal is full
 *   EFBIG    WRITE past the dataset's max_object_size (or past what
 *            part_size x 10000 parts can upload)
 *   ENAMETOOLONG  WRITE_OPEN or RENAME: the key with the dataset's prefix
 *            is longer than 1024 bytes (S3's limit)
 *   EBUSY    RENAME of an uploaded object whose copy to a new name (an
 *            earlier RENAME) is still running, or whose name another
 *            object's upload, copy or DELETE is changing in S3 (a newer
 *            save of that key); ABORT after COMMIT
 *   ESTALE   RENAME of an uploaded object whose key another object has
 *            replaced in S3 since (a later save of that key): nothing is
 *            copied or deleted
 *   EEXIST   SYNC (COMMIT at durability s3): the dataset has
 *            overwrite = false and S3 already has an object at the key
 *            (the object is dropped, not uploaded)
 * SYNC reports an upload S3 refused for good (a 4xx) with its error
 * (EACCES, EINVAL, ...): that object is dropped from the journal.
 */

/* LIST output record, 8-byte aligned, followed by the name bytes (zero
 * padded). Entries come in S3's page order (each page's common prefixes,
 * then its objects). A LIST at entry 0 lists afresh; one that continues at
 * the entries returned so far resumes where the last call stopped (the
 * daemon keeps the continuation, unused for up to 60 s) instead of
 * re-listing from the first page. */
struct rc_list_entry {
	uint64_t size;      /* object size, 0 for a common prefix */
	uint16_t name_len;  /* bytes of name after this struct, no NUL */
	uint16_t is_prefix; /* 1 for a "directory" (common prefix) */
	uint32_t rec_len;   /* bytes from this record to the next one */
};

/* READ_KEY's output, written over its arg slot (8-byte aligned) before
 * the completion is posted. */
struct rc_key_result {
	uint64_t size;            /* the object's size */
	uint32_t handle;          /* open read handle, or RC_NO_HANDLE */
	uint32_t reserved;        /* 0 */
	char etag[RC_MAX_ETAG];   /* NUL-terminated */
};
#define RC_NO_HANDLE 0xffffffffu

/* Prefetch plan entry: one extent the session will read, in order. */
struct rc_plan_entry {
	uint32_t handle;
	uint32_t reserved;
	uint64_t offset;
	uint64_t len;
};

/* Ring region header. Each index lives on its own cache line. */
struct rc_ring_hdr {
	uint32_t magic, abi_version;
	uint32_t sq_entries, cq_entries; /* powers of two */
	uint32_t arg_slots, reserved;
	uint64_t sq_off, cq_off, arg_off, region_size;
	RC_ALIGNAS(64) RC_ATOMIC(uint32_t) sq_head;  /* daemon */
	RC_ALIGNAS(64) RC_ATOMIC(uint32_t) sq_tail;  /* client */
	RC_ALIGNAS(64) RC_ATOMIC(uint32_t) sq_flags; /* RC_SQ_NEED_WAKEUP */
	RC_ALIGNAS(64) RC_ATOMIC(uint32_t) cq_head;  /* client */
	RC_ALIGNAS(64) RC_ATOMIC(uint32_t) cq_tail;  /* daemon */
	RC_ALIGNAS(64) RC_ATOMIC(uint32_t) cq_flags; /* RC_CQ_NEED_WAKEUP */
	RC_ALIGNAS(64) RC_ATOMIC(uint32_t) cq_overflow; /* CQEs waiting in the daemon */
};
#define RC_SQ_NEED_WAKEUP 1u
#define RC_CQ_NEED_WAKEUP 1u

/* ---- Datasets (from the attach reply) ---------------------------------- */
#define RC_ACCESS_READ 1u
#define RC_ACCESS_WRITE 2u

struct rc_dataset_info {
	char name[RC_DATASET_NAME_MAX];
	uint32_t id;
	uint32_t access;      /* RC_ACCESS_*; 0: listed but not permitted */
	uint64_t arena_size;  /* bytes of the arena mapping (0 if no access) */
};

/* ---- The client ------------------------------------------------------- */
struct rc_arena_map {
	const uint8_t *base; /* NULL when not mapped */
	size_t size;
	int cuda_pinned;     /* registered by rc_cuda_pin_arenas */
};

struct rc_client {
	int sock, sq_efd, cq_efd;
	uint8_t *region;
	size_t region_size;
	struct rc_ring_hdr *hdr;
	struct rc_sqe *sqes;
	struct rc_cqe *cqes;
	uint8_t *args;
	uint32_t sq_mask, cq_mask;
	uint32_t sq_local_tail;  /* SQEs prepared but not yet submitted */
	uint32_t inflight;       /* submitted, not yet reaped */
	uint32_t block_size, shard;
	uint32_t n_datasets;
	struct rc_dataset_info *datasets;
	struct rc_arena_map *arenas; /* by dataset id */
	uint64_t *arg_free;          /* bitmap of free arg slots */
	uint32_t arg_slots;
	uint32_t spin;               /* ns rc_wait_cqe polls before sleeping */
	uint32_t lazy_errors;        /* lazy RELEASE/CLOSE that failed */
	/* A batch of rc_read_many_start awaits its rc_read_many_wait. In
	 * what was tail padding: sizeof(struct rc_client) is unchanged. */
	uint32_t batch_pending;
};

struct rc_attach_opts {
	/* gpu: the CUDA ordinal this process uses (cuda:N), or -1. Under
	 * CUDA_VISIBLE_DEVICES (indexes or GPU UUIDs) the library maps it
	 * to the machine's GPU, whose NUMA node picks the shard; an ordinal
	 * the variable does not show is sent as it is. */
	int gpu;
	int numa_node;  /* -1 if none */
	uint32_t sq_entries, cq_entries, arg_slots; /* 0: defaults */
};

/* Attach to the daemon at socket_path (NULL: $RINGCACHE_SOCKET, else
 * /run/ringcache/ringcache.sock). Returns 0 or a negated errno:
 * -ECONNREFUSED when no daemon listens there (no socket file, or a stale
 * one), -EACCES when the socket's mode does not let this user connect.
 *
 * What the daemon hands over (and why a client cannot abuse it): the ring
 * region is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL): ftruncate
 * and fallocate on it fail with EPERM. Both eventfds are O_NONBLOCK (one
 * file description with the daemon's): poll() before read(), and expect
 * EAGAIN. An arena memfd is O_RDONLY, sealed likewise and mode 0400 owned
 * by the daemon's uid: a reopen of /proc/self/fd/N fails with EACCES, so
 * it is mapped PROT_READ from the fd received.
 *
 * Refusals: -EDQUOT: the uid has max_sessions_per_uid sessions; -EUSERS:
 * max_sessions are attached, or all but the root_reserved_sessions that
 * only root (uid 0) may take. A uid holding 2 * max_sessions_per_uid + 16
 * connections (attached or not) has further ones closed at once (-EPIPE
 * or -ECONNRESET). */
int rc_attach(struct rc_client *c, const char *socket_path,
	      const struct rc_attach_opts *opts);
void rc_detach(struct rc_client *c);

/* ---- When the daemon goes away (a restart, a crash) ---------------------
 * A lost connection is a pause, not an error: the library re-attaches to
 * the socket rc_attach used, trying again with a backoff (5 ms doubling to
 * 100 ms) for up to the client's reconnect timeout (default
 * RC_RECONNECT_TIMEOUT_DEFAULT_MS, $RINGCACHE_RECONNECT_TIMEOUT in seconds
 * at rc_attach, rc_set_reconnect_timeout; 0: never, fail with -EPIPE as
 * soon as the daemon is lost). On the new session it then
 *   - re-opens every handle opened through rc_open/rc_open_many under
 *     the same number (OPEN with RC_OPEN_AT: the same ACL checks as any
 *     OPEN). Same ETag: the handle keeps working. A changed or deleted
 *     object: that handle alone fails with -ESTALE (rc_close it; its
 *     number is not reused while the application holds it); a
 *     dataset this user may no longer read: -EACCES, one the daemon no
 *     longer runs: -ENOENT;
 *   - registers every buffer again at the same index (the library keeps
 *     a dup of its memfd until rc_unregister_buffer/rc_detach);
 *   - sends the prefetch plan again (from a copy taken when it was sent);
 *   - keeps the arg slots the application holds, with their contents.
 * Write handles cannot continue: the daemon dropped their uncommitted
 * object. Every call on one returns -ECONNRESET (write the object again
 * under a new rc_write_open); rc_abort and rc_close on it return 0;
 * rc_sync of one that was committed waits for the shard's uploads
 * (RC_SYNC_ALL). What was committed is as durable as the dataset says.
 * Leases handed out before stay readable: the old arenas stay mapped
 * (until rc_detach or rc_unmap_old_arenas) and releasing an old lease
 * (rc_release,
 * rc_release_lazy) is a local no-op; lease ids carry the session's
 * generation (RC_LEASE_GEN).
 *
 * The synchronous helpers (rc_open, rc_open_many, rc_read, rc_read_into,
 * rc_read_many, rc_read_key, rc_list, rc_stat_handle, rc_write_open,
 * rc_register_buffer, plans, ...) do all this inside the call and then
 * resubmit what they had in flight: the caller sees a slower call. Only
 * when no daemon took over within the timeout do they fail: -EPIPE.
 *
 * The raw ring (rc_get_sqe/rc_submit/rc_peek_cqe): the library cannot
 * know which of the application's entries completed, so they are not
 * resubmitted. The loss shows as the socket c->sock becoming readable
 * with POLLRDHUP/POLLHUP (rc_peek_cqe then never returns a completion:
 * nothing signals it in the ring itself). rc_wait_cqe re-attaches itself
 * and returns -ECONNRESET: the session is back (new ring: pointers from
 * rc_arg_ptr must be taken again), every entry in flight is lost and must
 * be submitted again, c->inflight is 0. An application that only polls
 * calls rc_reconnect when c->sock hangs up (or now and then). Handles
 * the application opened with raw OPEN entries are not re-opened: their
 * entries fail with -EBADF. */
#define RC_RECONNECT_TIMEOUT_DEFAULT_MS 60000u
int rc_set_reconnect_timeout(struct rc_client *c, uint32_t ms);
/* 0: the connection is fine; 1: it was lost and the session is back (as
 * for rc_wait_cqe's -ECONNRESET); or -EPIPE, no daemon within the
 * timeout (a later call tries again). */
int rc_reconnect(struct rc_client *c);
/* Re-attaches so far. */
uint32_t rc_reconnects(struct rc_client *c);
/* 0 for a handle usable as far as the library knows; for one that did
 * not survive a re-attach, what the synchronous helpers return for it
 * (-ESTALE, -ECONNRESET, -EACCES, -ENOENT). A raw-ring application checks
 * its handles with it after -ECONNRESET: the number of a dead handle is
 * closed on the daemon (-EBADF) and may later be reused by an OPEN. */
int rc_handle_check(struct rc_client *c, uint32_t handle);
/* The arenas of sessions before the last re-attach stay mapped (and their
 * memory allocated) until rc_detach, for the leases handed out then. An
 * application that holds none of those any more (no pointer into them is
 * used again) unmaps them now. Returns how many were unmapped. The Python
 * binding and `ringcache mount` do it once their old views are gone. */
int rc_unmap_old_arenas(struct rc_client *c);

/* Dataset id by name; -ENOENT if the daemon does not run it (never
 * configured, or removed by a reload before this attach); -EACCES if its
 * ACL does not let this user read it. */
int rc_dataset(const struct rc_client *c, const char *name);

/* Register a buffer (a memfd, e.g. later pinned with cudaHostRegister) for
 * READ_INTO, LIST, WRITE and plans. Returns the buffer index or a negated
 * errno. The memfd must be made with MFD_ALLOW_SEALING and passed
 * read-write: the daemon adds F_SEAL_SHRINK (it stays: the memfd can grow,
 * never shrink, from then on), then checks that it holds size bytes, and
 * maps it without populating it. Errors:
 *   EPERM    the fd cannot be sealed against shrinking or mapped writable
 *            (not a memfd, a memfd without MFD_ALLOW_SEALING, with
 *            F_SEAL_SEAL but not F_SEAL_SHRINK, with F_SEAL_WRITE or
 *            F_SEAL_FUTURE_WRITE, read-only, or an MFD_HUGETLB memfd,
 *            whose pages can be taken back from under the daemon)
 *   EINVAL   size is 0, above 1 TiB, or more than the memfd holds
 *   ENOSPC   64 buffers are registered already
 *   EDQUOT   the session's buffers would pass max_registered bytes
 * rc_unregister_buffer: EBADF (no such buffer), EBUSY while an operation
 * in flight (READ_INTO, LIST, a WRITE waiting for the journal) still
 * copies into or out of that buffer: reap its completion and retry. */
int rc_register_buffer(struct rc_client *c, int memfd, size_t size);
int rc_unregister_buffer(struct rc_client *c, uint32_t buf_index);

/* Convenience: create a memfd of size bytes, map it here populated (its
 * pages allocated now, in this process), register it. On success *out
 * points at the mapping and the index is returned. The daemon maps the
 * pages a memfd holds at registration into its own page tables on a
 * helper thread, so that WRITE and READ_INTO do not fault them in on its
 * event loop; holes are left alone (they cost the daemon nothing). */
int rc_alloc_buffer(struct rc_client *c, size_t size, void **out);

/* CUDA pinning (optional; the runtime is dlopen'ed: libcudart.so*, or the
 * file $RINGCACHE_CUDART names). rc_cuda_pin_arenas page-locks every arena
 * mapping (cudaHostRegister, read-only + portable) so cudaMemcpyAsync from
 * a READ's rc_cqe_data()/rc_extent.data DMAs the cached bytes to the GPU
 * with no staging copy; rc_detach unpins. rc_cuda_pin does the same for a
 * READ_INTO buffer (e.g. one from rc_alloc_buffer). Return 0, -ENOSYS
 * without a CUDA runtime, -EALREADY (rc_cuda_pin: already registered) or
 * -EIO with the reason in rc_cuda_error(). rc_cuda_runtime gives the dlopen
 * handle (NULL if none) so callers resolve the rest of the runtime from the
 * same copy. */
int rc_cuda_pin_arenas(struct rc_client *c);
void rc_cuda_unpin_arenas(struct rc_client *c);
int rc_cuda_pin(void *p, size_t size);
int rc_cuda_unpin(void *p);
void *rc_cuda_runtime(void);
const char *rc_cuda_error(void);

/* Daemon counters as Prometheus text into buf (NUL-terminated). Returns the
 * length or a negated errno. Works without attaching: pass c = NULL. */
ssize_t rc_stats(struct rc_client *c, const char *socket_path, char *buf,
		 size_t buflen);

/* Arg slots carry keys to OPEN/LIST and ETags back. */
int rc_arg_get(struct rc_client *c);          /* slot index or -EBUSY */
void rc_arg_put(struct rc_client *c, int slot);
static inline char *rc_arg_ptr(struct rc_client *c, int slot)
{
	return (char *)c->args + (size_t)slot * RC_ARG_SLOT_SIZE;
}

/* ---- Asynchronous fast path --------------------------------------------- */

/* Next free SQE (zeroed), or NULL if the SQ ring is full. */
static inline struct rc_sqe *rc_get_sqe(struct rc_client *c)
{
	uint32_t head = rc_load_(&c->hdr->sq_head, acquire);
	if (c->sq_local_tail - head > c->sq_mask)
		return NULL;
	struct rc_sqe *sqe = &c->sqes[c->sq_local_tail & c->sq_mask];
	memset(sqe, 0, sizeof(*sqe));
	c->sq_local_tail++;
	return sqe;
}

/* Publish prepared SQEs; rings the doorbell only if the daemon sleeps.
 * Returns the number of entries published. */
static inline int rc_submit(struct rc_client *c)
{
	uint32_t tail = rc_load_(&c->hdr->sq_tail, relaxed);
	uint32_t n = c->sq_local_tail - tail;
	if (n == 0)
		return 0;
	rc_store_(&c->hdr->sq_tail, c->sq_local_tail, release);
	c->inflight += n;
	rc_fence_seq_cst_();
	if (rc_load_(&c->hdr->sq_flags, relaxed) & RC_SQ_NEED_WAKEUP) {
		uint64_t one = 1;
		if (write(c->sq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			return -errno;
	}
	return (int)n;
}

/* A completion if one is ready, else NULL. Consume it with rc_cqe_seen.
 * Completions of the library's lazy entries (RC_USER_DATA_LAZY) are
 * consumed here, never returned. */
static inline struct rc_cqe *rc_peek_cqe(struct rc_client *c)
{
	uint32_t head0 = rc_load_(&c->hdr->cq_head, relaxed), head = head0;
	uint32_t tail = rc_load_(&c->hdr->cq_tail, acquire);
	struct rc_cqe *cqe = NULL;
	for (; head != tail; head++) {
		cqe = &c->cqes[head & c->cq_mask];
		if (cqe->user_data != RC_USER_DATA_LAZY)
			break;
		if (cqe->res < 0)
			c->lazy_errors++;
		c->inflight--;
		cqe = NULL;
	}
	if (head != head0)
		rc_store_(&c->hdr->cq_head, head, release);
	return cqe;
}

static inline void rc_cqe_seen(struct rc_client *c)
{
	uint32_t head = rc_load_(&c->hdr->cq_head, relaxed);
	rc_store_(&c->hdr->cq_head, head + 1, release);
	c->inflight--;
}

/* Wait for a completion: polls up to c->spin ns (default 20 us; not while
 * the daemon sleeps), then sleeps on the CQ eventfd. Returns 0 with *out
 * set, or a negated errno: -ECONNRESET, the daemon was lost and the
 * session re-attached (entries in flight are lost: submit them again);
 * -EPIPE, no daemon came back within the reconnect timeout. */
int rc_wait_cqe(struct rc_client *c, struct rc_cqe **out);

/* Where a READ completion's bytes lie in this process. */
static inline const void *rc_cqe_data(const struct rc_client *c,
				      const struct rc_cqe *cqe)
{
	if (cqe->arena >= c->n_datasets || !c->arenas[cqe->arena].base)
		return NULL;
	return c->arenas[cqe->arena].base + cqe->addr;
}

static inline void rc_prep_read(struct rc_sqe *sqe, uint32_t handle,
				uint64_t offset, uint64_t len,
				uint64_t user_data)
{
	sqe->opcode = RC_OP_READ;
	sqe->handle = handle;
	sqe->offset = offset;
	sqe->len = len;
	sqe->user_data = user_data;
}

static inline void rc_prep_read_into(struct rc_sqe *sqe, uint32_t handle,
				     uint64_t offset, uint64_t len,
				     uint32_t buf_index, uint64_t buf_offset,
				     uint64_t user_data)
{
	rc_prep_read(sqe, handle, offset, len, user_data);
	sqe->opcode = RC_OP_READ_INTO;
	sqe->buf_index = buf_index;
	sqe->buf_offset = buf_offset;
}

static inline void rc_prep_prefetch_plan(struct rc_sqe *sqe,
					 uint32_t buf_index,
					 uint64_t buf_offset,
					 uint64_t n_entries,
					 uint64_t user_data)
{
	sqe->opcode = RC_OP_PREFETCH_PLAN;
	sqe->buf_index = buf_index;
	sqe->buf_offset = buf_offset;
	sqe->len = n_entries * sizeof(struct rc_plan_entry);
	sqe->user_data = user_data;
}

/* The same, appending to the current plan (RC_PLAN_APPEND). */
static inline void rc_prep_prefetch_plan_append(struct rc_sqe *sqe,
						uint32_t buf_index,
						uint64_t buf_offset,
						uint64_t n_entries,
						uint64_t user_data)
{
	rc_prep_prefetch_plan(sqe, buf_index, buf_offset, n_entries, user_data);
	sqe->flags = RC_PLAN_APPEND;
}

static inline void rc_prep_release(struct rc_sqe *sqe, uint32_t lease,
				   uint64_t user_data)
{
	sqe->opcode = RC_OP_RELEASE;
	sqe->handle = lease;
	sqe->user_data = user_data;
}

/* READ_KEY: the key is copied into arg slot `slot` (from rc_arg_get; it
 * stays taken until the completion, whose rc_key_result it then holds).
 * Returns 0, or -ENAMETOOLONG for a key over RC_MAX_KEY: the entry is then
 * a NOP whose completion rc_peek_cqe consumes. */
static inline int rc_prep_read_key(struct rc_client *c, struct rc_sqe *sqe,
				   int dataset, int slot, const char *key,
				   uint64_t offset, uint64_t len,
				   uint8_t flags, uint64_t user_data)
{
	size_t kl = strlen(key);
	if (kl > RC_MAX_KEY) {
		sqe->opcode = RC_OP_NOP;
		sqe->user_data = RC_USER_DATA_LAZY;
		return -ENAMETOOLONG;
	}
	memcpy(rc_arg_ptr(c, slot), key, kl);
	sqe->opcode = RC_OP_READ_KEY;
	sqe->flags = flags;
	sqe->arg = (uint16_t)slot;
	sqe->arg_len = (uint32_t)kl;
	sqe->dataset = (uint32_t)dataset;
	sqe->offset = offset;
	sqe->len = len;
	sqe->user_data = user_data;
	return 0;
}

static inline const struct rc_key_result *
rc_key_result_of(struct rc_client *c, int slot)
{
	return (const struct rc_key_result *)(const void *)rc_arg_ptr(c, slot);
}

/* ---- Synchronous helpers ------------------------------------------------ */
struct rc_stat {
	uint64_t size;
	char etag[RC_MAX_ETAG];
};

/* Returns a handle (>= 0) or a negated errno. st may be NULL. */
int rc_open(struct rc_client *c, int dataset, const char *key,
	    struct rc_stat *st);
int rc_stat_handle(struct rc_client *c, uint32_t handle, struct rc_stat *st);
/* Opens n keys with their OPENs in flight together (a cold OPEN asks S3:
 * one round trip for the batch, not one a key). results[i] is key i's
 * handle or negated errno; sizes (may be NULL) its size. Returns 0, or a
 * negated errno if the session itself failed. */
int rc_open_many(struct rc_client *c, int dataset, const char *const *keys,
		 size_t n, int32_t *results, uint64_t *sizes);
int rc_close(struct rc_client *c, uint32_t handle);

/* One extent of a read: zero-copy (a lease on arena bytes) from rc_read;
 * from rc_read_many/rc_read_key either that or a copy (below). */
struct rc_extent {
	const void *data;
	uint32_t len;
	uint32_t lease;
};

/* Zero-copy read of up to len bytes at offset: fills at most max_ext
 * extents (each leased) covering the range, clamped to the object. Returns
 * the number of extents or a negated errno. Release each extent's lease. */
int rc_read(struct rc_client *c, uint32_t handle, uint64_t offset,
	    uint64_t len, struct rc_extent *ext, int max_ext);
int rc_release(struct rc_client *c, uint32_t lease);

/* Batched samples: n keys of one dataset read with their READ_KEY entries
 * in flight together, one submission (one doorbell at most) per batch the
 * SQ ring and the arg slots hold. For each request the caller sets key,
 * offset, len (0: to the object's end) and ext/max_ext (room for one
 * extent per block the range spans); the call fills the rest. Each
 * request succeeds or fails alone (res < 0: a negated errno, nothing
 * leased; a missing key is -ENOENT, a changed object -ESTALE, -EBUSY when
 * the caller holds every arg slot). A range
 * spanning more blocks than max_ext comes back short (res counts the
 * bytes in ext). The extents stay leased until released: rc_release_lazy
 * each one (or rc_release). Handles opened for multi-block reads are
 * closed lazily by the call. Returns 0, or a negated errno when the
 * session itself failed (-EPIPE: the daemon is gone).
 * Copy or map: where the kernel maps an arena with 4 KiB pages, a fresh
 * process's first touch of an extent can cost more than copying it. The
 * library learns once per arena whether its pages are huge (then every
 * extent is mapped); on a 4 KiB arena an extent whose pages this process
 * has mapped already stays mapped (free), and one it has not goes the way
 * measured faster here: mapped (populated), or copied as read() would
 * into a buffer of this process it reuses (pread from the arena's memfd;
 * the daemon's lease is released at once). A copied extent's lease has
 * RC_LEASE_LOCAL set; release it like any other (rc_release_lazy,
 * rc_release), it stays valid across a re-attach. Extents of arenas
 * pinned for CUDA stay mapped; so does one when the buffer (256 MiB of
 * address space, resident as far as used at once) is full.
 * $RINGCACHE_READ_COPY=0 never copies, =1 always does. */
struct rc_read_req {
	const char *key;          /* in: relative to the dataset */
	uint64_t offset, len;     /* in: the range; len 0: to the end */
	struct rc_extent *ext;    /* in: room for max_ext extents */
	uint32_t max_ext;         /* in */
	uint32_t n_ext;           /* out: extents filled, each leased */
	int64_t res;              /* out: bytes in ext, or a negated errno */
	uint64_t size;            /* out: the object's size */
	char etag[RC_MAX_ETAG];   /* out: NUL-terminated */
};
int rc_read_many(struct rc_client *c, int dataset, struct rc_read_req *reqs,
		 size_t n);

/* rc_read_many in two halves, to keep the next batch in flight while
 * the caller works on this one: rc_read_many_start queues and submits the
 * batch's entries and returns at once (*batch set); rc_read_many_wait
 * completes it and frees *batch, with rc_read_many's results and return
 * value. reqs (and each key and ext) must stay valid until the wait. One
 * batch at a time per client: until its wait, the client may post lazy
 * entries (rc_release_lazy, rc_close_lazy) and nothing else; calls that
 * wait for a completion (rc_wait_cqe, the synchronous helpers, another
 * start) fail with -EBUSY. Wait before rc_detach. Errors of start:
 * -EBUSY (a batch is pending), -ENOMEM, -EPIPE, the dataset's own. */
struct rc_read_batch;
int rc_read_many_start(struct rc_client *c, int dataset,
		       struct rc_read_req *reqs, size_t n,
		       struct rc_read_batch **batch);
int rc_read_many_wait(struct rc_read_batch *batch);

/* One sample: rc_read_many of one request. Returns the number of extents
 * (each leased) or a negated errno; st (may be NULL) gets size and ETag. */
int rc_read_key(struct rc_client *c, int dataset, const char *key,
		uint64_t offset, uint64_t len, struct rc_extent *ext,
		int max_ext, struct rc_stat *st);

/* RELEASE and CLOSE without waiting: the entry is queued and goes to the
 * daemon with the next submission of this client (any call that submits,
 * or rc_submit); its completion is consumed by whichever call next reaps
 * (rc_peek_cqe). Returns 0, or -EPIPE if the daemon is gone. A failure
 * (an unknown lease: -EBADF) is only counted in c->lazy_errors. Leases a
 * client still holds when it detaches, exits or is killed are released
 * by the daemon. */
int rc_release_lazy(struct rc_client *c, uint32_t lease);
int rc_close_lazy(struct rc_client *c, uint32_t handle);

/* Copy [offset, offset+len) into a registered buffer. Returns bytes. */
ssize_t rc_read_into(struct rc_client *c, uint32_t handle, uint64_t offset,
		     uint64_t len, uint32_t buf_index, uint64_t buf_offset);

/* List one directory level under prefix into a registered buffer, starting
 * at entry `start`. Returns the number of records; *more is set if the
 * buffer filled first. Walk records with rc_list_next. */
int rc_list(struct rc_client *c, int dataset, const char *prefix,
	    uint64_t start, uint32_t buf_index, uint64_t buf_offset,
	    uint64_t buf_len, int *more);

static inline const struct rc_list_entry *
rc_list_next(const struct rc_list_entry *e)
{
	return (const struct rc_list_entry *)((const uint8_t *)e + e->rec_len);
}

static inline const char *rc_list_name(const struct rc_list_entry *e)
{
	return (const char *)(e + 1);
}

/* Checkpoint write-back. rc_write copies from a registered buffer; it
 * waits (SYNC) and tries again while staging memory is full. */
int rc_write_open(struct rc_client *c, int dataset, const char *key);
ssize_t rc_write(struct rc_client *c, uint32_t handle, uint64_t offset,
		 uint64_t len, uint32_t buf_index, uint64_t buf_offset);
int rc_commit(struct rc_client *c, uint32_t handle);
int rc_abort(struct rc_client *c, uint32_t handle);
int rc_rename(struct rc_client *c, uint32_t handle, const char *key);
/* handle, or RC_SYNC_ALL */
int rc_sync(struct rc_client *c, uint32_t handle);

/* Hand over the order of future reads: n entries of rc_plan_entry at
 * buf_offset in a registered buffer. Returns entries accepted. */
int rc_prefetch_plan(struct rc_client *c, uint32_t buf_index,
		     uint64_t buf_offset, uint64_t n_entries);
/* The same with RC_PLAN_APPEND: the entries follow the current plan. */
int rc_prefetch_plan_append(struct rc_client *c, uint32_t buf_index,
			    uint64_t buf_offset, uint64_t n_entries);

/* A generic text for a negated errno (the table above); no daemon
 * involved, so it cannot name a dataset or bucket. */
const char *rc_strerror(int err);

/* The daemon's own words for this session's last failed completion, when
 * it failed with err: the dataset, the bucket (and key or prefix), the
 * cause and S3's or the connection's message, e.g. "dataset ds,
 * s3://bucket/x: the bucket does not exist: NoSuchBucket: ... (HTTP
 * 404)". Otherwise (another error came since, a local refusal with no
 * more to say, a daemon older than RINGCACHE_1.4, c NULL or detached)
 * rc_strerror(err). One socket round trip: call it after a failure, not
 * on the fast path. With asynchronous entries in flight, "last" is the
 * last failed CQE the daemon posted. The string is the calling thread's
 * until its next call (rc_client is one thread's anyway). Since
 * RINGCACHE_1.4. */
const char *rc_last_error(struct rc_client *c, int err);

#ifdef __cplusplus
}
#endif
#endif /* RINGCACHE_H */
