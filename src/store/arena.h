/* arena.h - shared-memory arenas carved into size-classed slots.
 *
 * One arena per (dataset, shard): a memfd mapped read-write here and
 * read-only by the clients allowed to read that dataset, so a client never
 * maps bytes of a dataset it may not read. All arenas of a shard draw
 * superblocks (sb_bytes, e.g. 4 MiB) from one budget: the shard's memory
 * size. An arena's memfd is sparse; a superblock given back is punched out
 * so its pages return to the system and to the budget.
 *
 * A superblock serves one size class. Classes go in 4 KiB steps up to
 * 64 KiB, then in steps of at most 1/16 up to the block size, so an object
 * smaller than a block wastes at most ~6% to rounding plus the superblock
 * tail, never half a block.
 */
#ifndef RC_ARENA_H
#define RC_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#define ARENA_MAX_CLASSES 128
#define ARENA_NONE UINT32_MAX

struct arena_budget {
	uint64_t sb_total; /* superblocks the memory size allows */
	_Atomic uint64_t sb_used; /* atomic: other shards read it for STATS */
	uint64_t sb_bytes;
	uint32_t block_bytes;
	uint32_t n_classes;
	uint32_t class_size[ARENA_MAX_CLASSES];
};

struct arena_sb {
	uint16_t cls;       /* class index, or ARENA_NONE & 0xffff when free */
	uint16_t used;      /* slots in use */
	uint16_t n_slots;
	uint16_t fresh;     /* taken, never used: not counted in n_empty */
	uint32_t next_partial, prev_partial; /* class partial list */
	uint64_t free_bits[16];              /* 1 = slot free (<= 1024 slots) */
};

struct arena_class {
	uint32_t partial_head; /* superblocks with a free slot */
	uint32_t n_sb;         /* superblocks of this class */
};

struct arena {
	int fd;          /* memfd, read-write */
	int ro_fd;       /* the same memfd opened read-only, for clients; the
			  * inode is 0400 and sealed so no reopen writes */
	uint8_t *base;
	uint64_t size;
	uint32_t n_sb;
	uint32_t n_free_sb;
	uint32_t n_empty;    /* superblocks with no slot in use */
	uint32_t *free_sb;   /* stack of unused superblock indices */
	struct arena_sb *sbs;
	struct arena_class classes[ARENA_MAX_CLASSES];
	struct arena_budget *budget;
};

/* Class table for a block size and memory size. */
int arena_budget_init(struct arena_budget *b, uint64_t memory_bytes,
		      uint32_t block_bytes);
/* Smallest class that holds len bytes (1 <= len <= block_bytes). */
uint32_t arena_class_of(const struct arena_budget *b, uint32_t len);

/* name is for /proc (memfd name). Returns 0 or a negated errno. */
int arena_init(struct arena *a, struct arena_budget *b, const char *name,
	       bool hugepages, bool do_mlock);
void arena_destroy(struct arena *a);

/* A slot of class cls: its byte offset, or -ENOSPC if neither a partial
 * superblock nor the budget has room (the caller evicts and retries). */
int64_t arena_alloc(struct arena *a, uint32_t cls);
void arena_free(struct arena *a, uint64_t off);
/* Gives empty superblocks back to the budget; returns how many. */
uint32_t arena_trim(struct arena *a);

/* Superblock bookkeeping for eviction. */
static inline uint32_t arena_sb_of(const struct arena *a, uint64_t off)
{
	return (uint32_t)(off / a->budget->sb_bytes);
}
/* First byte offset of slot i of superblock sb. */
uint64_t arena_slot_off(const struct arena *a, uint32_t sb, uint32_t slot);

#endif
