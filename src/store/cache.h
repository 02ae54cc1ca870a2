/* cache.h - the block index and its eviction policy.
 *
 * An entry is one block of one object version: (object id, block number),
 * where the object id is fresh for every (dataset, key, ETag), so a changed
 * object never finds its old blocks. Entries live in arena slots of their
 * size class. Eviction is S3-FIFO per (arena, class): new entries enter a
 * small FIFO, those touched again move to the main FIFO, one-hit wonders
 * leave early (scan resistance); a ghost filter of recent evictions admits
 * returning blocks straight to main. Leased and fetching entries are
 * pinned: never evicted.
 */
#ifndef RC_CACHE_H
#define RC_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"

enum entry_state { ENTRY_FETCHING = 0, ENTRY_VALID = 1 };
enum entry_queue { QUEUE_NONE = 0, QUEUE_SMALL, QUEUE_MAIN };

struct waiter; /* owned by the daemon: who waits for a fetching entry */
struct cache_arena;

struct cache_entry {
	uint64_t obj_id;
	uint64_t blkno;
	uint32_t len;          /* valid bytes in the slot */
	uint64_t off;          /* slot offset in the arena */
	uint32_t leases;
	uint32_t plan_pins;    /* prefetched for a plan window, not yet read */
	uint8_t state, queue, freq, orphan;
	struct cache_arena *ca;
	uint64_t ident[3];     /* the owner's durable name for the block */
	uint64_t plan_hint;    /* the owner's note of its next planned use */
	struct cache_entry *hnext;
	struct cache_entry *qprev, *qnext;
	struct waiter *waiters;
};

struct cache_queue {
	struct cache_entry *head, *tail; /* evict from head */
	uint64_t n;
};

struct cache_pool {
	struct cache_queue small, main;
};

struct cache_arena {
	struct arena *arena;
	struct cache_entry ***owners; /* [sb][slot] -> entry */
	uint32_t *owners_cap;         /* [sb]: slots owners[sb] holds */
	struct cache_pool pools[ARENA_MAX_CLASSES];
};

/* Atomic: another shard's thread reads them for STATS. */
struct cache_stats {
	_Atomic uint64_t hits, misses, evictions, reclaims, entries, leases,
		pins;
	_Atomic uint64_t bytes_cached;
};

struct cache {
	struct cache_entry **buckets;
	uint64_t mask;
	struct arena_budget *budget;
	struct cache_arena **arenas;
	uint32_t n_arenas, cap_arenas;
	uint64_t *ghost;
	uint64_t ghost_mask;
	uint64_t reclaim_hand;        /* clock over all superblocks */
	/* Called with every valid block about to leave memory (the NVMe
	 * tier copies it out); the slot is freed right after it returns. */
	void (*on_evict)(void *ctx, const struct cache_entry *e);
	void *evict_ctx;
	/* While plans exist: how far ahead the block's next planned use is
	 * (INT64_MAX: none). Eviction then takes, among the oldest unpinned
	 * entries, the one needed last (Belady over the known future). */
	int64_t (*next_use)(void *ctx, struct cache_entry *e);
	void *owner_ctx;
	bool plans_active;
	/* Last resort before -ENOMEM: the owner unpins prefetched, unread
	 * blocks (they are fetched again later). True if it freed any. */
	bool (*shed_pins)(void *ctx);
	struct cache_stats stats;
};

int cache_init(struct cache *c, struct arena_budget *budget);
void cache_destroy(struct cache *c);
/* Arenas join and leave as datasets are configured. */
struct cache_arena *cache_add_arena(struct cache *c, struct arena *a);
void cache_remove_arena(struct cache *c, struct cache_arena *ca);

/* Lookup counts a hit (for the policy and stats) when touch is true. */
struct cache_entry *cache_lookup(struct cache *c, uint64_t obj_id,
				 uint64_t blkno, bool touch);
/* A new FETCHING entry with a slot for len bytes, evicting as needed.
 * NULL and *err = -ENOMEM when everything evictable is pinned. */
struct cache_entry *cache_insert(struct cache *c, struct cache_arena *ca,
				 uint64_t obj_id, uint64_t blkno, uint32_t len,
				 int *err);
/* Drops an unleased entry now (a failed fetch); a leased one becomes an
 * orphan, invisible to lookups, freed at its last release. */
void cache_discard(struct cache *c, struct cache_entry *e);
void cache_lease(struct cache *c, struct cache_entry *e);
void cache_release(struct cache *c, struct cache_entry *e);
/* Plan pins protect prefetched, unread blocks like leases do. */
void cache_pin(struct cache *c, struct cache_entry *e);
void cache_unpin(struct cache *c, struct cache_entry *e);

/* Bytes the entry's slot holds (at least len). */
static inline uint32_t cache_entry_room(const struct cache_entry *e)
{
	return arena_slot_size(e->ca->arena, arena_sb_of(e->ca->arena, e->off));
}

static inline uint8_t *cache_entry_data(const struct cache_entry *e)
{
	return e->ca->arena->base + e->off;
}

#endif
