/* arena.c - owns arena memory: memfds, mappings, superblocks, slots and the
 * shard's memory budget. Knows nothing of what the bytes are. */
#include "arena.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hugepages.h"
#include "log.h"

#define PAGE ARENA_PAGE
#define MIN_CLASS 64u   /* slot alignment: a cache line */
/* A populate's step, and its ends' alignment: one 2 MiB page where the
 * arena gets them, so a populate faults whole huge pages in. */
#define FILL_CHUNK (2u << 20)

static uint64_t floor_pow2(uint64_t x)
{
	return 1ull << (63 - __builtin_clzll(x));
}

/* The step after class s: 64 B up to 1 KiB, then 1/16 of the power of two
 * at or below s (at most 1/16 of s); from 64 KiB on that is whole pages. */
static uint64_t class_step(uint64_t s)
{
	uint64_t step = floor_pow2(s) / 16;
	return step < MIN_CLASS ? MIN_CLASS : step;
}

int arena_budget_init(struct arena_budget *b, uint64_t memory_bytes,
		      uint32_t block_bytes)
{
	memset(b, 0, sizeof(*b));
	b->block_bytes = block_bytes;
	b->sb_bytes = block_bytes * 4ull;
	if (b->sb_bytes < (4u << 20))
		b->sb_bytes = 4u << 20;
	b->sb_total = memory_bytes / b->sb_bytes;
	b->bytes_total = b->sb_total * b->sb_bytes;
	if (b->sb_total == 0)
		return -EINVAL;
	uint32_t n = 0;
	for (uint64_t s = MIN_CLASS;
	     s < block_bytes && n < ARENA_MAX_CLASSES - 1; s += class_step(s))
		b->class_size[n++] = (uint32_t)s;
	b->class_size[n++] = block_bytes;
	b->n_classes = n;
	return 0;
}

uint32_t arena_class_of(const struct arena_budget *b, uint32_t len)
{
	uint32_t lo = 0, hi = b->n_classes - 1;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (b->class_size[mid] >= len)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* Readers get ro_fd, but a memfd's inode is created 0777: any reader could
 * reopen /proc/self/fd/N read-write and write, punch or seal the cache.
 * Mode 0400 makes that reopen EACCES for every other uid (and fchmod
 * EPERM: they do not own the inode); through the O_RDONLY fd itself
 * ftruncate, fallocate and F_ADD_SEALS need FMODE_WRITE and fail.
 * F_SEAL_SEAL stops even the daemon's own uid from adding
 * F_SEAL_FUTURE_WRITE, which would make every punch (sb_give_back) EPERM.
 * F_SEAL_FUTURE_WRITE itself is no option for the same reason. */
static int seal_for_readers(int fd)
{
	if (fcntl(fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
	    fchmod(fd, 0400) < 0)
		return -errno;
	return 0;
}

int arena_init(struct arena *a, struct arena_budget *b, const char *name,
	       bool hugepages, bool do_mlock)
{
	memset(a, 0, sizeof(*a));
	a->budget = b;
	/* Address space for the memory twice over plus a part-filled
	 * superblock per class: part-filled ones cost only their pages. */
	a->n_sb = (uint32_t)(b->sb_total * 2 + b->n_classes);
	a->size = (uint64_t)a->n_sb * b->sb_bytes;
	a->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (a->fd < 0)
		return -errno;
	int err = 0;
	if (ftruncate(a->fd, (off_t)a->size) < 0) {
		err = -errno;
		goto fail;
	}
	if ((err = seal_for_readers(a->fd)))
		goto fail;
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a->fd);
	a->ro_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (a->ro_fd < 0) {
		err = -errno;
		goto fail;
	}
	a->base = hp_map_aligned(a->fd, a->size, PROT_READ | PROT_WRITE);
	if (a->base == MAP_FAILED) {
		a->base = NULL;
		err = -errno;
		goto fail;
	}
	if (hugepages)
		madvise(a->base, a->size, MADV_HUGEPAGE); /* advice only */
	if (do_mlock && mlock2(a->base, a->size, MLOCK_ONFAULT) < 0)
		log_warn("arena %s: mlock failed: %s", name, strerror(errno));
	a->sbs = calloc(a->n_sb, sizeof(*a->sbs));
	a->free_sb = malloc(a->n_sb * sizeof(*a->free_sb));
	if (!a->sbs || !a->free_sb) {
		err = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < a->n_sb; i++) {
		a->free_sb[i] = a->n_sb - 1 - i; /* low offsets first */
		a->sbs[i].cls = UINT16_MAX;
	}
	a->n_free_sb = a->n_sb;
	for (uint32_t c = 0; c < ARENA_MAX_CLASSES; c++)
		a->classes[c].partial_head = ARENA_NONE;
	return 0;
fail:
	arena_destroy(a);
	return err;
}

void arena_destroy(struct arena *a)
{
	if (a->base)
		munmap(a->base, a->size);
	if (a->fd > 0)
		close(a->fd);
	if (a->ro_fd > 0)
		close(a->ro_fd);
	for (uint32_t i = 0; a->sbs && i < a->n_sb; i++) {
		struct arena_sb *s = &a->sbs[i];
		if (a->budget && s->populated > s->charged)
			a->budget->prefault_ahead -=
				(uint64_t)(s->populated - s->charged) * PAGE;
		if (a->budget && a->sbs[i].cls != UINT16_MAX) {
			a->budget->bytes_used -= (uint64_t)a->sbs[i].charged * PAGE;
			a->budget->sb_used--;
		}
		free(a->sbs[i].free_bits);
	}
	free(a->sbs);
	free(a->free_sb);
	memset(a, 0, sizeof(*a));
}

uint64_t arena_slot_off(const struct arena *a, uint32_t sb, uint32_t slot)
{
	return (uint64_t)sb * a->budget->sb_bytes +
	       (uint64_t)slot * arena_slot_size(a, sb);
}

static void partial_push(struct arena *a, uint32_t sbi)
{
	struct arena_sb *s = &a->sbs[sbi];
	struct arena_class *c = &a->classes[s->cls];
	s->prev_partial = ARENA_NONE;
	s->next_partial = c->partial_head;
	if (c->partial_head != ARENA_NONE)
		a->sbs[c->partial_head].prev_partial = sbi;
	c->partial_head = sbi;
}

static void partial_remove(struct arena *a, uint32_t sbi)
{
	struct arena_sb *s = &a->sbs[sbi];
	struct arena_class *c = &a->classes[s->cls];
	if (s->prev_partial != ARENA_NONE)
		a->sbs[s->prev_partial].next_partial = s->next_partial;
	else
		c->partial_head = s->next_partial;
	if (s->next_partial != ARENA_NONE)
		a->sbs[s->next_partial].prev_partial = s->prev_partial;
	s->next_partial = s->prev_partial = ARENA_NONE;
}

/* Pages from the superblock's start to the end of its slot `slot`. */
static uint32_t pages_to_end_of(const struct arena *a, uint32_t sbi,
				uint32_t slot)
{
	uint64_t end = (uint64_t)(slot + 1) * arena_slot_size(a, sbi);
	return (uint32_t)((end + PAGE - 1) / PAGE);
}

/* Charges pages to the budget if it has them. */
static bool budget_charge(struct arena_budget *b, uint32_t pages)
{
	uint64_t bytes = (uint64_t)pages * PAGE;
	if (b->bytes_used + bytes > b->bytes_total)
		return false;
	b->bytes_used += bytes;
	return true;
}

/* Pages populated ahead of the charged ones: the reserve's share. */
static uint64_t sb_ahead(const struct arena_sb *s)
{
	return s->populated > s->charged
		       ? (uint64_t)(s->populated - s->charged) * PAGE
		       : 0;
}

/* Sets a superblock's charged and populated pages, keeping the budget's
 * count of the pages populated ahead. */
static void sb_set_pages(struct arena *a, struct arena_sb *s,
			 uint32_t charged, uint32_t populated)
{
	a->budget->prefault_ahead -= sb_ahead(s);
	s->charged = charged;
	s->populated = populated;
	a->budget->prefault_ahead += sb_ahead(s);
}

static uint32_t sb_top(const struct arena_sb *s)
{
	return s->charged > s->populated ? s->charged : s->populated;
}

static void punch(struct arena *a, uint32_t sbi, uint32_t from, uint32_t to)
{
	uint64_t start = (uint64_t)sbi * a->budget->sb_bytes +
			 (uint64_t)from * PAGE;
	if (fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)start, (off_t)(to - from) * PAGE) < 0)
		log_warn("arena: punching a superblock failed: %s",
			 strerror(errno));
}

/* Returns the pages above keep, populated ones with the charged: the
 * budget is memory, not address space. */
static void sb_uncharge_above(struct arena *a, uint32_t sbi, uint32_t keep)
{
	struct arena_sb *s = &a->sbs[sbi];
	if (sb_top(s) <= keep)
		return;
	punch(a, sbi, keep, sb_top(s));
	if (s->charged > keep)
		a->budget->bytes_used -= (uint64_t)(s->charged - keep) * PAGE;
	sb_set_pages(a, s, s->charged < keep ? s->charged : keep,
		     s->populated < keep ? s->populated : keep);
}

static int sb_take(struct arena *a, uint32_t cls)
{
	struct arena_budget *b = a->budget;
	if (a->n_free_sb == 0)
		return -ENOSPC;
	uint32_t sbi = a->free_sb[a->n_free_sb - 1];
	struct arena_sb *s = &a->sbs[sbi];
	uint32_t n_slots = (uint32_t)(b->sb_bytes / b->class_size[cls]);
	uint32_t words = (n_slots + 63) / 64;
	if (words > s->words_cap) {
		uint64_t *bits = realloc(s->free_bits, words * sizeof(*bits));
		if (!bits)
			return -ENOMEM;
		s->free_bits = bits;
		s->words_cap = words;
	}
	a->n_free_sb--;
	b->sb_used++;
	s->cls = (uint16_t)cls;
	/* charged is 0 (given back); populated pages stay: the reserve's. */
	s->used = s->hint = 0;
	s->n_slots = n_slots;
	memset(s->free_bits, 0xff, words * sizeof(*s->free_bits));
	if (n_slots % 64)
		s->free_bits[words - 1] = (1ull << (n_slots % 64)) - 1;
	a->classes[cls].n_sb++;
	partial_push(a, sbi);
	return (int)sbi;
}

static void sb_give_back(struct arena *a, uint32_t sbi)
{
	struct arena_sb *s = &a->sbs[sbi];
	partial_remove(a, sbi);
	a->classes[s->cls].n_sb--;
	sb_uncharge_above(a, sbi, 0);
	s->cls = UINT16_MAX;
	a->free_sb[a->n_free_sb++] = sbi;
	a->budget->sb_used--;
}

static uint32_t lowest_free(struct arena_sb *s)
{
	uint32_t words = (s->n_slots + 63) / 64;
	for (uint32_t w = s->hint; w < words; w++) {
		if (s->free_bits[w]) {
			s->hint = w;
			return w * 64 + (uint32_t)__builtin_ctzll(s->free_bits[w]);
		}
	}
	return UINT32_MAX;
}

/* The lowest free slot of a partial superblock, charging the pages it
 * reaches past the charged ones; -ENOSPC if the budget lacks them. */
static int64_t sb_alloc(struct arena *a, uint32_t sbi)
{
	struct arena_sb *s = &a->sbs[sbi];
	uint32_t slot = lowest_free(s);
	uint32_t end = pages_to_end_of(a, sbi, slot);
	if (end > s->charged) {
		if (!budget_charge(a->budget, end - s->charged))
			return -ENOSPC;
		if (s->populated > s->charged)
			atomic_fetch_add_explicit(
				&a->budget->prefault_used,
				(uint64_t)((s->populated < end ? s->populated : end) -
					   s->charged) * PAGE,
				memory_order_relaxed);
		sb_set_pages(a, s, end, s->populated);
	}
	s->free_bits[slot / 64] &= ~(1ull << (slot % 64));
	if (s->used++ == 0)
		a->n_empty--;
	if (s->used == s->n_slots)
		partial_remove(a, sbi);
	return (int64_t)arena_slot_off(a, sbi, slot);
}

/* Queues the population of the pages above a superblock's charged and
 * populated ones, a 2 MiB-aligned step at a time, while the reserve and
 * the superblock's share of it (a quarter, so the classes in use each
 * get some) have room. */
static void fill_sb(struct arena *a, uint32_t sbi)
{
	struct arena_budget *b = a->budget;
	struct arena_sb *s = &a->sbs[sbi];
	uint32_t sb_pages = (uint32_t)(b->sb_bytes / PAGE);
	uint32_t chunk = FILL_CHUNK / PAGE;
	uint64_t share = b->prefault_target / 4 < FILL_CHUNK
				 ? FILL_CHUNK
				 : b->prefault_target / 4;
	for (;;) {
		uint32_t from = sb_top(s);
		if (from >= sb_pages)
			return;
		uint32_t to = (from / chunk + 1) * chunk;
		if (to > sb_pages)
			to = sb_pages;
		uint64_t len = (uint64_t)(to - from) * PAGE;
		if (b->prefault_ahead + len > b->prefault_target ||
		    sb_ahead(s) + len > share)
			return;
		uint64_t off = (uint64_t)sbi * b->sb_bytes + (uint64_t)from * PAGE;
		if (b->populate(b->populate_ctx, a, off, len) < 0)
			return; /* no job free: the next allocation asks again */
		atomic_fetch_add_explicit(&b->prefault_queued, len,
					  memory_order_relaxed);
		sb_set_pages(a, s, s->charged, to);
	}
}

/* After an allocation from sbi: its next pages, then the superblock the
 * next sb_take gets (the top of the free stack). */
static void prefault_refill(struct arena *a, uint32_t sbi)
{
	if (!a->budget->populate || a->budget->prefault_target == 0)
		return;
	fill_sb(a, sbi);
	if (a->n_free_sb)
		fill_sb(a, a->free_sb[a->n_free_sb - 1]);
}

void arena_populated(struct arena *a, uint64_t off, uint64_t len, int err)
{
	struct arena_budget *b = a->budget;
	uint32_t sbi = arena_sb_of(a, off);
	struct arena_sb *s = &a->sbs[sbi];
	uint32_t from = (uint32_t)((off - (uint64_t)sbi * b->sb_bytes) / PAGE);
	uint32_t to = from + (uint32_t)(len / PAGE);
	if (err) {
		b->prefault_target = 0;
		if (s->populated > from) /* those pages are not faulted in */
			sb_set_pages(a, s, s->charged,
				     from > s->charged ? from : s->charged);
	}
	/* Punched while it ran (evicted, given back): punch its pages again,
	 * those no one charged or populated since. */
	uint32_t top = sb_top(s);
	if (to > top)
		punch(a, sbi, from > top ? from : top, to);
}

static int64_t alloc_slot(struct arena *a, uint32_t cls)
{
	/* A free slot under charged pages may sit in any partial superblock
	 * once the budget is spent: look at them all before a new one. */
	uint32_t sbi = a->classes[cls].partial_head;
	while (sbi != ARENA_NONE) {
		uint32_t next = a->sbs[sbi].next_partial;
		int64_t off = sb_alloc(a, sbi);
		if (off >= 0)
			return off;
		sbi = next;
	}
	uint32_t first = (a->budget->class_size[cls] + PAGE - 1) / PAGE;
	if (a->budget->bytes_used + (uint64_t)first * PAGE >
	    a->budget->bytes_total)
		return -ENOSPC;
	int r = sb_take(a, cls);
	if (r < 0)
		return r;
	a->n_empty++; /* sb_alloc counts it out again */
	return sb_alloc(a, (uint32_t)r);
}

int64_t arena_alloc(struct arena *a, uint32_t cls)
{
	int64_t off = alloc_slot(a, cls);
	if (off >= 0)
		prefault_refill(a, arena_sb_of(a, (uint64_t)off));
	return off;
}

void arena_free(struct arena *a, uint64_t off)
{
	uint32_t sbi = arena_sb_of(a, off);
	struct arena_sb *s = &a->sbs[sbi];
	uint64_t in_sb = off - (uint64_t)sbi * a->budget->sb_bytes;
	uint32_t slot = (uint32_t)(in_sb / arena_slot_size(a, sbi));
	if (s->used == s->n_slots)
		partial_push(a, sbi);
	s->free_bits[slot / 64] |= 1ull << (slot % 64);
	if (slot / 64 < s->hint)
		s->hint = slot / 64;
	if (--s->used == 0)
		a->n_empty++;
}

/* Pages up to the end of the highest used slot. */
static uint32_t pages_in_use(const struct arena *a, uint32_t sbi)
{
	const struct arena_sb *s = &a->sbs[sbi];
	for (uint32_t w = (s->n_slots + 63) / 64; w-- > 0;) {
		uint64_t used = ~s->free_bits[w];
		if (w == s->n_slots / 64 && s->n_slots % 64)
			used &= (1ull << (s->n_slots % 64)) - 1;
		if (used)
			return pages_to_end_of(a, sbi,
					       w * 64 + 63 -
						       (uint32_t)__builtin_clzll(used));
	}
	return 0;
}

/* Empty superblocks stay with their class until the budget runs short, so
 * a class that churns one object does not punch and refault its pages;
 * so do freed slots below a superblock's top: the class reuses them. */
uint32_t arena_trim(struct arena *a)
{
	uint32_t n = 0;
	if (a->n_empty == 0)
		return 0;
	for (uint32_t sbi = 0; sbi < a->n_sb; sbi++) {
		if (a->sbs[sbi].cls != UINT16_MAX && a->sbs[sbi].used == 0) {
			sb_give_back(a, sbi);
			n++;
		}
	}
	a->n_empty = 0;
	return n;
}

void arena_trim_sb(struct arena *a, uint32_t sbi)
{
	struct arena_sb *s = &a->sbs[sbi];
	if (s->cls == UINT16_MAX)
		return;
	if (s->used > 0) {
		sb_uncharge_above(a, sbi, pages_in_use(a, sbi));
		return;
	}
	sb_give_back(a, sbi);
	a->n_empty--;
}
