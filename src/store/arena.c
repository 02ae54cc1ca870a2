/* arena.c - owns arena memory: memfds, mappings, superblocks, slots and the
 * shard's memory budget. Knows nothing of what the bytes are. */
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define SB_MAX_SLOTS 1024u
#define PAGE 4096u

int arena_budget_init(struct arena_budget *b, uint64_t memory_bytes,
		      uint32_t block_bytes)
{
	memset(b, 0, sizeof(*b));
	b->block_bytes = block_bytes;
	b->sb_bytes = block_bytes * 4ull;
	if (b->sb_bytes < (4u << 20))
		b->sb_bytes = 4u << 20;
	b->sb_total = memory_bytes / b->sb_bytes;
	if (b->sb_total == 0)
		return -EINVAL;
	uint32_t n = 0;
	uint64_t s = PAGE;
	while (s < block_bytes && n < ARENA_MAX_CLASSES - 1) {
		/* a class must fit at least 4 slots... and no more than the
		 * free bitmap tracks */
		if (b->sb_bytes / s <= SB_MAX_SLOTS)
			b->class_size[n++] = (uint32_t)s;
		/* Rounded down: a step never exceeds 1/16 of the class. */
		uint64_t step = s < (64u << 10) ? PAGE : s / 16 / PAGE * PAGE;
		s += step;
	}
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
	a->n_sb = (uint32_t)b->sb_total;
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
	a->base = mmap(NULL, a->size, PROT_READ | PROT_WRITE, MAP_SHARED,
		       a->fd, 0);
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
	if (a->budget && a->sbs)
		a->budget->sb_used -= a->n_sb - a->n_free_sb;
	free(a->sbs);
	free(a->free_sb);
	memset(a, 0, sizeof(*a));
}

uint64_t arena_slot_off(const struct arena *a, uint32_t sb, uint32_t slot)
{
	const struct arena_sb *s = &a->sbs[sb];
	return (uint64_t)sb * a->budget->sb_bytes +
	       (uint64_t)slot * a->budget->class_size[s->cls];
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

static int sb_take(struct arena *a, uint32_t cls)
{
	struct arena_budget *b = a->budget;
	if (a->n_free_sb == 0 || b->sb_used >= b->sb_total)
		return -ENOSPC;
	uint32_t sbi = a->free_sb[--a->n_free_sb];
	b->sb_used++;
	struct arena_sb *s = &a->sbs[sbi];
	memset(s, 0, sizeof(*s));
	s->cls = (uint16_t)cls;
	s->fresh = 1;
	s->n_slots = (uint16_t)(b->sb_bytes / b->class_size[cls]);
	for (uint32_t i = 0; i < s->n_slots; i++)
		s->free_bits[i / 64] |= 1ull << (i % 64);
	a->classes[cls].n_sb++;
	partial_push(a, sbi);
	return (int)sbi;
}

static void sb_give_back(struct arena *a, uint32_t sbi)
{
	struct arena_sb *s = &a->sbs[sbi];
	partial_remove(a, sbi);
	a->classes[s->cls].n_sb--;
	s->cls = UINT16_MAX;
	/* Return the pages: the budget is memory, not address space. */
	if (fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)((uint64_t)sbi * a->budget->sb_bytes),
		      (off_t)a->budget->sb_bytes) < 0)
		log_warn("arena: punching a superblock failed: %s",
			 strerror(errno));
	a->free_sb[a->n_free_sb++] = sbi;
	a->budget->sb_used--;
}

int64_t arena_alloc(struct arena *a, uint32_t cls)
{
	uint32_t sbi = a->classes[cls].partial_head;
	if (sbi == ARENA_NONE) {
		int r = sb_take(a, cls);
		if (r < 0)
			return r;
		sbi = (uint32_t)r;
	}
	struct arena_sb *s = &a->sbs[sbi];
	uint32_t slot = UINT32_MAX;
	for (uint32_t w = 0; w < 16; w++) {
		if (s->free_bits[w]) {
			slot = w * 64 + (uint32_t)__builtin_ctzll(s->free_bits[w]);
			s->free_bits[w] &= s->free_bits[w] - 1;
			break;
		}
	}
	if (s->used++ == 0 && !s->fresh)
		a->n_empty--;
	s->fresh = 0;
	if (s->used == s->n_slots)
		partial_remove(a, sbi);
	return (int64_t)arena_slot_off(a, sbi, slot);
}

void arena_free(struct arena *a, uint64_t off)
{
	uint32_t sbi = arena_sb_of(a, off);
	struct arena_sb *s = &a->sbs[sbi];
	uint64_t in_sb = off - (uint64_t)sbi * a->budget->sb_bytes;
	uint32_t slot = (uint32_t)(in_sb / a->budget->class_size[s->cls]);
	if (s->used == s->n_slots)
		partial_push(a, sbi);
	s->free_bits[slot / 64] |= 1ull << (slot % 64);
	if (--s->used == 0)
		a->n_empty++;
}

/* Empty superblocks stay with their class until the budget runs short, so
 * a class that churns one object does not punch and refault 4 MiB. */
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
