/* arena.h - shared-memory arenas carved into size-classed slots.
 *
 * One arena per (dataset, shard): a memfd mapped read-write here and
 * read-only by the clients allowed to read that dataset, so a client never
 * maps bytes of a dataset it may not read. All arenas of a shard draw on
 * one budget: the shard's memory size, charged by the 4 KiB page.
 *
 * Ownership: the shard's thread owns its budget and arenas; other threads
 * only read budget->bytes_used and sb_used (STATS).
 *
 * Use: an arena is cut into superblocks of sb_bytes (max(4 blocks, 4 MiB))
 * of address space; each serves one size class. Slots are taken lowest
 * first and a superblock is charged only for the pages from its start to
 * the end of its highest slot ever taken (its "charged" pages), so a
 * part-filled superblock, and the tail a class leaves, cost nothing. The
 * address space is larger than the memory (memfd sparse) so every class
 * can hold a part-filled superblock. arena_trim punches out empty
 * superblocks, arena_trim_sb the pages above one superblock's highest used
 * slot (the cache empties superblocks of another class from the top),
 * which returns them to the system and to the budget.
 *
 * The prefault reserve: faulting a fresh page in costs the shard's thread
 * (clear_page, the shmem fault) on the fetch path, a quarter of its CPU
 * in a cold epoch (perf/README.md). With a populate hook set, each
 * allocation asks for the pages just above a superblock's charged ones,
 * and the first pages of the superblock taken next, to be populated on
 * another thread (MADV_POPULATE_WRITE), up to prefault_target bytes per
 * budget. Those pages are resident but not charged: memory above the
 * budget by at most prefault_target. A punch takes them back with the
 * charged ones; a populate that finished after its pages were punched is
 * undone by arena_populated.
 *
 * Classes go in steps of 64 B up to 1 KiB, then in steps of at most 1/16
 * (a power of two over 16) up to the block size, so rounding wastes at most
 * 6.25% of any object of 1 KiB or more. Slots are 64-byte aligned; classes
 * of 64 KiB and more are whole pages (4 KiB aligned: the tier's O_DIRECT
 * reads go straight into them).
 */
#ifndef RC_ARENA_H
#define RC_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#define ARENA_MAX_CLASSES 512
#define ARENA_PAGE 4096u
#define ARENA_NONE UINT32_MAX

struct arena;

struct arena_budget {
	uint64_t sb_total; /* superblocks the memory holds: memory / sb_bytes */
	_Atomic uint64_t sb_used; /* superblocks taken (address space) */
	uint64_t bytes_total;     /* the memory: charged pages stay below it */
	/* Pages charged, in bytes. Atomic: other shards read it for STATS. */
	_Atomic uint64_t bytes_used;
	uint64_t sb_bytes;
	uint32_t block_bytes;
	uint32_t n_classes;
	uint32_t class_size[ARENA_MAX_CLASSES];
	/* The prefault reserve; off while populate is NULL or target 0. */
	uint64_t prefault_target; /* bytes populated ahead of the charged */
	uint64_t prefault_ahead;  /* populated (or queued), not charged */
	/* Queues the population of [off, off + len) of arena a; 0, or a
	 * negated errno (nothing queued). arena_populated follows. */
	int (*populate)(void *ctx, struct arena *a, uint64_t off, uint64_t len);
	void *populate_ctx;
	/* Bytes queued, and bytes charged that a populate had faulted in
	 * (other threads read them for metrics). */
	_Atomic uint64_t prefault_queued;
	_Atomic uint64_t prefault_used;
};

struct arena_sb {
	uint16_t cls;       /* class index, or UINT16_MAX when free */
	uint32_t used;      /* slots in use */
	uint32_t n_slots;
	uint32_t charged;   /* pages from its start charged to the budget */
	uint32_t populated; /* pages from its start populated (or queued) */
	uint32_t hint;      /* no free bit below this word */
	uint32_t words_cap; /* free_bits capacity, in words */
	uint32_t next_partial, prev_partial; /* class partial list */
	uint64_t *free_bits;                 /* 1 = slot free */
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

/* A slot of class cls: its byte offset, or -ENOSPC if neither a charged
 * free slot nor the budget has room (the caller evicts and retries),
 * -ENOMEM if a slot bitmap cannot be allocated. */
int64_t arena_alloc(struct arena *a, uint32_t cls);
void arena_free(struct arena *a, uint64_t off);
/* Gives empty superblocks back to the budget; returns how many. */
uint32_t arena_trim(struct arena *a);
/* Gives back the pages of superblock sb above its highest used slot (all
 * of them, and the superblock, when it is empty). */
void arena_trim_sb(struct arena *a, uint32_t sb);

/* A populate the hook queued has run (err: its result, 0 or a negated
 * errno): pages of it punched meanwhile are punched again, and an error
 * turns the reserve off (a kernel without MADV_POPULATE_WRITE). */
void arena_populated(struct arena *a, uint64_t off, uint64_t len, int err);

/* Superblock bookkeeping for eviction. */
static inline uint32_t arena_sb_of(const struct arena *a, uint64_t off)
{
	return (uint32_t)(off / a->budget->sb_bytes);
}
/* Bytes a slot of this superblock holds (its class size). */
static inline uint32_t arena_slot_size(const struct arena *a, uint32_t sb)
{
	return a->budget->class_size[a->sbs[sb].cls];
}
/* First byte offset of slot i of superblock sb. */
uint64_t arena_slot_off(const struct arena *a, uint32_t sb, uint32_t slot);

#endif
