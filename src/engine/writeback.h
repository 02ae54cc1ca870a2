/* writeback.h - checkpoint write-back on a shard: objects written by
 * clients are staged in memory (and journaled for `local` durability),
 * acknowledged at COMMIT as their dataset's durability level says, and
 * uploaded in the background by the upload engine (single PUT or
 * multipart). After a crash the journal gives back every acknowledged
 * object, which is uploaded again; objects never committed are dropped. */
#ifndef RC_WRITEBACK_H
#define RC_WRITEBACK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "list.h"
#include "ringcache.h"
#include "s3_types.h"

struct shard;
struct dataset;
struct uid_usage;
struct op;
struct waiter;
struct upload;

enum wstate { W_OPEN, W_COMMITTED, W_DONE, W_FAILED, W_ABORTED };

struct wobject {
	struct shard *sh;
	uint64_t id;              /* journal id, unique on the shard */
	struct dataset *ds;
	char *key;                /* relative to the dataset prefix */
	uint8_t **chunks;         /* staged bytes, WB_CHUNK each */
	uint32_t n_chunks;
	uint64_t size;
	enum wstate state;
	bool journaled;           /* durability local: in the journal */
	bool replayed;            /* bytes come from the journal file */
	uint64_t replay_index;    /* journal_replayed(j, index) */
	struct upload *up;
	char *up_key;             /* bucket key of the last upload started */
	struct upload *del;       /* DELETE of up_key, landed before a RENAME */
	bool cleanup_wait;        /* its upload waits for the start-up clean-up */
	/* Its upload (or, with rename_op, its RENAME's copy) waits for
	 * another object's change of the same S3 key to end (key_taken). */
	bool key_wait;
	uint64_t change_seq;      /* when that change was asked for: the order */
	bool restart;             /* upload cancelled for a rename: again */
	uint32_t renames;         /* RENAMEs while not yet in S3 */
	uint32_t agains;          /* uploads started again after a failure */
	bool again_pending;       /* the next one waits on a timer */
	bool superseded;          /* a later object took its key: never again */
	bool evicted;             /* its staging went to newer saves meanwhile */
	struct op *commit_op;     /* COMMIT waiting for its durability */
	struct waiter *syncs;     /* SYNCs waiting for S3 */
	int err;                  /* final upload error, or 0 */
	char etag[128];
	/* Random, made at WRITE_OPEN (or read back from the journal's
	 * COMMIT): sent with every upload as S3_META_UPLOAD, and the only
	 * proof that an object found at the key is this one's (upload.h). */
	uint8_t token[16];
	char token_hex[S3_UPLOAD_TOKEN_LEN + 1];
	struct upload *copy;      /* RENAME of a W_DONE object: its copy job */
	char *rename_key;         /* the copy's new key (relative) */
	struct op *rename_op;     /* the RENAME waiting for the copy */
	uint32_t refs;            /* write handles + a running upload or copy */
	struct uid_usage *usage;  /* the writer's uid while open (quota.h) */
	uid_t uid;                /* the writer's (journaled at COMMIT), or
				     WB_UID_UNKNOWN */
	uint64_t uid_staged;      /* staging charged to it while open */
	uint64_t committed_ns;    /* in the backlog since (metrics.c) */
	bool in_backlog;          /* committed, upload not ended */
	struct rc_list link;      /* on shard->wobjects */
};

#define WB_UID_UNKNOWN ((uid_t)-1)

/* A committed object S3 does not have: its upload failed. A SYNC of all
 * objects or of a prefix by the same uid reports it, whenever it failed
 * (not only if it was still uploading when the SYNC came), until an
 * object of the same dataset and key lands in S3 (a later save, or this
 * one gone again: again_later). The newest
 * WB_FAILED_PER_UID of each uid on a shard are kept. */
struct wb_failed {
	struct rc_list link;      /* on shard->wb_failed, oldest first */
	uid_t uid;
	const struct dataset *ds; /* datasets live as long as the daemon */
	char *key;                /* relative to the dataset prefix */
	int err;
};
#define WB_FAILED_PER_UID 256

static inline struct wobject *wobject_of(const struct rc_list *n)
{
	return rc_list_entry(n, struct wobject, link);
}

/* A client of write-back: what the engine needs of a session (the
 * server's), which embeds one and keeps sh, usage and access current.
 * The engine owns the write handles in it. */
struct wb_client {
	struct shard *sh;          /* the session's */
	struct uid_usage *usage;   /* its uid's (quota.h) */
	const uint32_t *access;    /* RC_ACCESS_* by dataset id */
	struct wobject **handles;  /* write handles (RC_WRITE_HANDLE | index) */
	uint32_t cap_handles;
};

/* How write-back's deferred ops (COMMIT, SYNC, RENAME, ABORT) complete:
 * the session layer's completion, set before writeback_init. */
void writeback_set_completion(struct shard *sh, void (*op_done)(struct op *));
/* Opens the shard's journal (replaying it: acknowledged objects are
 * uploaded again) and upload engine. 0, or -1 with err set. */
int writeback_init(struct shard *sh, char *err, size_t errlen);
/* Waits (bounded) for uploads of objects nobody else holds and for the
 * copies of RENAMEs, cancels the rest, and frees everything. */
void writeback_drain(struct shard *sh);
void writeback_destroy(struct shard *sh);

/* A client's operations: each returns a result now, or WB_DEFERRED when an
 * op completes it later (never a handle nor a negated errno). */
#define WB_DEFERRED INT32_MIN
int writeback_open(struct wb_client *wc, struct dataset *ds, const char *key,
		   uint32_t *handle);
int writeback_write(struct wb_client *wc, uint32_t handle, uint64_t off,
		    const uint8_t *src, uint64_t len, struct op *op);
int writeback_commit(struct wb_client *wc, uint32_t handle, struct op *op);
int writeback_abort(struct wb_client *wc, uint32_t handle, struct op *op);
int writeback_rename(struct wb_client *wc, uint32_t handle, const char *key,
		     struct op *op);
int writeback_sync(struct wb_client *wc, uint32_t handle, struct dataset *ds,
		   const char *prefix, struct op *op);
int writeback_close(struct wb_client *wc, uint32_t handle);
/* Read your writes: the newest committed object for (ds, key) whose bytes
 * are still here (staged or journaled) and not yet in S3, with a
 * reference for the caller; NULL if none, and always NULL on an
 * overwrite = false dataset (S3 may still refuse those bytes). */
struct wobject *writeback_pending(struct shard *sh, const struct dataset *ds,
				  const char *key);
/* Its bytes; 0 or -errno. -ESTALE once they have gone to S3,
 * -EWOULDBLOCK when they lie in the journal file (a replayed object):
 * then writeback_read_start. */
int writeback_read(struct wobject *w, uint64_t off, void *dst, size_t len);
/* The same off the reactor, on the shard's digest workers: done(ctx, err)
 * on the reactor's thread once dst is filled (0) or not (-errno). dst
 * must stay valid until then. 0 when started, else -errno (done is then
 * not called). */
int writeback_read_start(struct wobject *w, uint64_t off, void *dst,
			 size_t len, void (*done)(void *ctx, int err),
			 void *ctx);
void writeback_put(struct wobject *w);

/* A closing client drops all its write handles. */
void writeback_client_closed(struct wb_client *wc);

#endif
