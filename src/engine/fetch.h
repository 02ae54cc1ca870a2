/* fetch.h - a shard's fetch engine: the object metadata table and the S3
 * requests of the read path (HEAD/GET for OPEN, block GETs, LIST), with
 * retries, one fetch per block however many reads wait for it, and ETag
 * changes (the old version retired: -ESTALE).
 *
 * Ownership: objects are reference counted (object_get/object_put); the
 * table holds one reference to each current version. A fetch holds its
 * object and, for a block, the cache entry it fills. Ops stay the
 * caller's: the engine only keeps pointers to them until it calls back.
 * Use: on the shard's thread. The caller registers struct fetch_ops once
 * (fetch_set_ops) before the first request: every completion goes through
 * it, so nothing here calls the layers above (sessions, prefetch plans,
 * write-back). */
#ifndef RC_FETCH_H
#define RC_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shard;
struct daemon;
struct dataset;
struct object;
struct op;
struct cache_entry;
struct listing;

struct fetch_ops {
	/* OPEN finished: op->err set, and on success op->obj (referenced);
	 * LIST failed before any page: op->err set. */
	void (*op_done)(struct op *op);
	/* A block of a READ is valid (held for op) or failed. */
	void (*block_ready)(struct op *op, struct cache_entry *e);
	void (*block_failed)(struct op *op, int err);
	/* A LIST has its pages, or failed with err. */
	void (*list_ready)(struct op *op, const struct listing *l, int err);
	/* Optional: the next use of (object, block) by a plan (cache.h's
	 * plan_hint), and the end of a GET a plan asked for. */
	uint64_t (*next_use)(const struct shard *sh, uint64_t obj_id,
			     uint64_t b);
	void (*prefetch_done)(struct shard *sh, uint64_t gen);
	/* Optional, read your writes: the newest object committed on this
	 * shard and not yet in S3 for (ds, key), referenced, with a stable
	 * id and its size; NULL if none. */
	void *(*pending_lookup)(struct shard *sh, const struct dataset *ds,
				const char *key, uint64_t *id, uint64_t *size);
	bool (*pending_uploaded)(const void *w); /* in S3 since: ask S3 */
	/* 0, -errno, or -EWOULDBLOCK: the bytes lie where only a blocking
	 * read gets them (a file), then pending_read_start: done(ctx, err)
	 * once dst is filled, on the reactor's thread, never inside it. */
	int (*pending_read)(void *w, uint64_t off, void *dst, size_t len);
	int (*pending_read_start)(void *w, uint64_t off, void *dst, size_t len,
				  void (*done)(void *ctx, int err), void *ctx);
	void (*pending_put)(void *w);
};

void fetch_set_ops(struct shard *sh, const struct fetch_ops *ops);
int fetch_shard_init(struct shard *sh);
/* Arms the table's sweep (metadata_ttl) once the shard has its reactor. */
void fetch_shard_start(struct shard *sh);
/* Finishes every fetch with -ECANCELED (their ops complete) and drops
 * the listing cache. */
void fetch_shard_cancel(struct shard *sh);
/* Frees the object table (after fetch_shard_cancel). */
void fetch_shard_free(struct shard *sh);

void object_get(struct object *o);
void object_put(struct daemon *d, struct object *o);

/* OPEN: resolves the key (metadata cache or HEAD), then ops->op_done. */
void fetch_open(struct shard *sh, struct op *op, struct dataset *ds,
		const char *key);
/* READ/READ_INTO: entries for op's blocks of op->obj, fetching misses
 * (coalesced with a fetch in flight); ops->block_ready or block_failed
 * per block, then ops->op_done once when none is pending. */
void fetch_read(struct shard *sh, struct op *op);
void fetch_list(struct shard *sh, struct op *op, struct dataset *ds,
		const char *prefix);
/* The block's entry, inserted and fetched for plan gen if absent. */
int fetch_prefetch_block(struct shard *sh, struct object *o, uint64_t b,
			 uint64_t gen, struct cache_entry **out,
			 bool *started);
/* A write through this shard put key in S3: a remembered 404 of it is
 * dropped (other shards and nodes learn it when their TTL ends). */
void fetch_forget_missing(struct shard *sh, const struct dataset *ds,
			  const char *key);
/* Cancels plan gen's GETs that no read waits for. */
void fetch_cancel_prefetch(struct shard *sh, uint64_t gen);

#endif
