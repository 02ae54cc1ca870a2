/* plan.h - the core of a prefetch plan, without a shard: its entries and
 * their block-use chains, the cursor the session's reads move, the window
 * of blocks issued and pinned ahead of it, and the index that tells the
 * cache how far ahead each planned block is next used.
 *
 * Use: prefetch.c owns plans and queues, and does what touches the shard
 * (fetches, cache pins, quotas); it asks these functions what to do. They
 * do no I/O and take the block size and limits as arguments, so
 * tests/unit/test_plan.c drives them alone.
 *
 * Ownership: a plan's items, blk_next and pins arrays are the plan's
 * (plan_link and plan_append_items replace them); the objects its items
 * point to are referenced by the caller, never by these functions. A
 * plan_index owns its tables and a copy of the list of plans, which must
 * outlive it (rebuild it when a plan comes, grows or goes). */
#ifndef RC_PLAN_H
#define RC_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "ringcache.h"

struct object;
struct cache_entry;
struct uid_usage;

struct plan_item {
	struct object *obj;  /* compared, never dereferenced here */
	uint64_t obj_id;
	uint64_t offset, len;
	uint64_t blk;        /* its first block's slot in plan.blk_next */
};

struct plan_pin {
	uint64_t item;
	struct cache_entry *e;
};

/* Entry indexes are absolute: appending drops the entries before the
 * cursor and raises base, so the indexes cache entries hold stay valid. */
struct plan {
	struct plan_item *items; /* entries base .. n-1 */
	uint64_t base, n;
	uint64_t *blk_next;  /* per block of an entry: the next entry that
				uses that block, UINT64_MAX if none */
	uint64_t cursor;     /* first entry the session has not reached */
	uint64_t issued;     /* entries before it have their blocks pinned */
	uint64_t issued_blk; /* next block of items[issued] */
	struct plan_pin *pins; /* FIFO in entry order */
	uint64_t pin_head, pin_tail;
	uint32_t pin_cap;
	uint64_t pinned_bytes;
	int64_t deficit;
	uint32_t inflight;   /* its prefetch GETs in flight */
	uint32_t ramp;       /* how many it may have: slow start, so the
				first samples are not shared out among a full
				window of transfers */
	uint64_t generation;
	_Atomic uint64_t prefetched_bytes; /* stats (other shards read it) */
	uint64_t blocks;     /* block uses of entries base .. n-1 */
	struct uid_usage *usage; /* its uid's: blocks and pins charged */
	uint64_t charged;    /* blocks charged to usage */
	bool pins_held;      /* its uid's pinned bytes are at their limit */
};

static inline const struct plan_item *plan_item_at(const struct plan *p,
						   uint64_t idx)
{
	return &p->items[idx - p->base];
}

/* ---- entries ------------------------------------------------------------ */

/* A client's entry once its handle named an object of obj_size bytes:
 * reserved set, len 0, or offset at or past the end is -EINVAL. */
int plan_entry_check(const struct rc_plan_entry *e, uint64_t obj_size);
/* The item for a checked entry, its len clamped to the object. */
struct plan_item plan_item_make(struct object *obj, uint64_t obj_id,
				uint64_t obj_size,
				const struct rc_plan_entry *e);
/* Blocks of block size bs the item covers (at least 1). */
uint64_t plan_item_blocks(const struct plan_item *it, uint64_t bs);

/* Numbers the entries' blocks (p->blocks, items[].blk) and chains each
 * block's uses (blk_next). 0 or -ENOMEM (the plan unchanged). */
int plan_link(struct plan *p, uint64_t bs);
/* Adds n items after p's last, dropping p's entries before its cursor,
 * and relinks. On success *dropped is p's old item array, whose first
 * *n_dropped items left the plan (the caller releases their objects and
 * frees the array); on -ENOMEM p is as it was. */
int plan_append_items(struct plan *p, const struct plan_item *more,
		      uint64_t n, uint64_t bs, struct plan_item **dropped,
		      uint64_t *n_dropped);
/* Block uses of the entries from the cursor on. */
uint64_t plan_blocks_ahead(const struct plan *p);
/* The entry after idx that uses block b of idx's object, UINT64_MAX if
 * none (or b is not one of idx's blocks). */
uint64_t plan_next_use_of(const struct plan *p, uint64_t idx, uint64_t b,
			  uint64_t bs);

/* ---- the window --------------------------------------------------------- */

/* The entry a read of obj at offset matches, looking `horizon` entries
 * from the cursor: UINT64_MAX if none (a read off plan moves nothing). */
uint64_t plan_find(const struct plan *p, const struct object *obj,
		   uint64_t offset, uint64_t horizon);
/* The session reached entry idx: the cursor moves there, and issuing
 * resumes there if it was behind. The caller unpins what lies before
 * (plan_pin_pop_before). */
void plan_move_cursor(struct plan *p, uint64_t idx);
/* One plan's window in bytes: the configured bytes, at most a quarter of
 * memory and its share (over n_planned plans) of half of it. */
uint64_t plan_window_bytes(uint64_t configured, uint64_t memory,
			   uint32_t n_planned);
/* Whether the plan may issue another block: entries left, a GET slot
 * under its ramp, fewer than `entries` entries issued past the cursor,
 * fewer than `bytes` pinned. */
bool plan_window_open(const struct plan *p, uint64_t entries,
		      uint64_t bytes);
/* The next block to issue: its item, block number in *b. */
const struct plan_item *plan_next_block(const struct plan *p, uint64_t bs,
					uint64_t *b);
/* That block was issued: move on to the next. */
void plan_block_issued(struct plan *p, uint64_t bs);
/* One of its GETs ended: a slot frees, and the ramp grows by one up to
 * max_inflight (doubling per round trip). */
void plan_fetch_done(struct plan *p, uint32_t max_inflight);

/* ---- pins (a FIFO in entry order) --------------------------------------- */

/* Records e, pinned for entry item; 0 or -ENOMEM. */
int plan_pin_push(struct plan *p, uint64_t item, struct cache_entry *e);
/* The oldest pin of an entry before item, removed (NULL if none): the
 * caller unpins it. */
struct cache_entry *plan_pin_pop_before(struct plan *p, uint64_t item);
/* The newest pin, removed, issuing rewound to its entry so it is
 * prefetched again (NULL if none): the caller unpins it. */
struct cache_entry *plan_pin_pop_last(struct plan *p);
uint64_t plan_pin_count(const struct plan *p);

/* ---- the next-use index over a shard's plans --------------------------- */

/* One slot per (block, plan using it), holding a hint: the plan's
 * generation (low 24 bits) and the entry index (40 bits) of the block's
 * first use at or after the plan's cursor. */
struct plan_index {
	uint64_t *keys, *hints;
	uint64_t mask;
	struct plan **plans;
	uint32_t n_plans;
};

/* Rebuilds ix over the plans (NULLs skipped), calling each(ctx, obj_id,
 * b) for every planned block after indexing it. Returns 1 if any block
 * is planned, 0 if none (ix empty), -ENOMEM (ix empty). */
int plan_index_build(struct plan_index *ix, struct plan *const *plans,
		     uint32_t n, uint64_t bs,
		     void (*each)(void *ctx, uint64_t obj_id, uint64_t b),
		     void *ctx);
/* The hint of block b of object obj_id (0: not planned). */
uint64_t plan_index_hint(const struct plan_index *ix, uint64_t obj_id,
			 uint64_t b);
/* How many entries ahead of its plan's cursor the block is next used,
 * the nearest over the plans (INT64_MAX: no planned use); slots of uses
 * already read follow their plan's chain. */
int64_t plan_index_next_use(struct plan_index *ix, uint64_t obj_id,
			    uint64_t b, uint64_t bs);
void plan_index_free(struct plan_index *ix);

#endif
