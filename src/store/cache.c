/* cache.c - owns the block index (hash of object id and block number),
 * entry lifetimes, leases, and the S3-FIFO eviction of arena slots. */
#include "cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "vec.h"

#define SMALL_PERCENT 10
#define MAX_FREQ 3
#define COLD_SCAN 4 /* superblocks looked at per cold reclaim */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t entry_hash(uint64_t obj_id, uint64_t blkno)
{
	return mix64(obj_id * 0x9e3779b97f4a7c15ull + blkno);
}

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t p = 1;
	while (p < n)
		p <<= 1;
	return p;
}

int cache_init(struct cache *c, struct arena_budget *budget)
{
	memset(c, 0, sizeof(*c));
	c->budget = budget;
	/* Sized for entries of 4 KiB on average (smaller ones make longer
	 * chains, not failures). */
	uint64_t max_entries = budget->bytes_total / 4096;
	uint64_t nb = pow2_at_least(max_entries / 2 + 1024);
	c->buckets = calloc(nb, sizeof(*c->buckets));
	uint64_t ng = pow2_at_least(budget->sb_total * 8 + 4096);
	c->ghost = calloc(ng, sizeof(*c->ghost));
	if (!c->buckets || !c->ghost) {
		cache_destroy(c);
		return -ENOMEM;
	}
	c->mask = nb - 1;
	c->ghost_mask = ng - 1;
	return 0;
}

static void queue_push(struct cache_queue *q, struct cache_entry *e)
{
	e->qnext = NULL;
	e->qprev = q->tail;
	if (q->tail)
		q->tail->qnext = e;
	else
		q->head = e;
	q->tail = e;
	q->n++;
}

static void queue_remove(struct cache_queue *q, struct cache_entry *e)
{
	if (e->qprev)
		e->qprev->qnext = e->qnext;
	else
		q->head = e->qnext;
	if (e->qnext)
		e->qnext->qprev = e->qprev;
	else
		q->tail = e->qprev;
	e->qprev = e->qnext = NULL;
	q->n--;
}

static struct cache_pool *entry_pool(const struct cache *c,
				     const struct cache_entry *e)
{
	uint32_t sb = arena_sb_of(e->ca->arena, e->off);
	(void)c;
	return &e->ca->pools[e->ca->arena->sbs[sb].cls];
}

static struct cache_queue *entry_queue(struct cache *c, struct cache_entry *e)
{
	struct cache_pool *p = entry_pool(c, e);
	return e->queue == QUEUE_MAIN ? &p->main : &p->small;
}

static void hash_unlink(struct cache *c, struct cache_entry *e)
{
	struct cache_entry **pp =
		&c->buckets[entry_hash(e->obj_id, e->blkno) & c->mask];
	while (*pp && *pp != e)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = e->hnext;
	e->hnext = NULL;
}

static void owner_set(struct cache_arena *ca, uint64_t off,
		      struct cache_entry *e)
{
	struct arena *a = ca->arena;
	uint32_t sb = arena_sb_of(a, off);
	uint32_t cls_size = a->budget->class_size[a->sbs[sb].cls];
	uint32_t slot = (uint32_t)((off - (uint64_t)sb * a->budget->sb_bytes) /
				   cls_size);
	ca->owners[sb][slot] = e;
}

/* Frees the entry and its slot: it must be unpinned and out of the hash. */
static void entry_free(struct cache *c, struct cache_entry *e)
{
	if (e->queue != QUEUE_NONE)
		queue_remove(entry_queue(c, e), e);
	owner_set(e->ca, e->off, NULL);
	arena_free(e->ca->arena, e->off);
	c->stats.entries--;
	c->stats.bytes_cached -= e->len;
	free(e);
}

static void ghost_add(struct cache *c, const struct cache_entry *e)
{
	uint64_t h = entry_hash(e->obj_id, e->blkno) | 1;
	c->ghost[h & c->ghost_mask] = h;
}

static bool ghost_take(struct cache *c, uint64_t obj_id, uint64_t blkno)
{
	uint64_t h = entry_hash(obj_id, blkno) | 1;
	uint64_t *g = &c->ghost[h & c->ghost_mask];
	if (*g != h)
		return false;
	*g = 0;
	return true;
}

static bool pinned(const struct cache_entry *e)
{
	return e->leases > 0 || e->plan_pins > 0 || e->state == ENTRY_FETCHING;
}

static void evict(struct cache *c, struct cache_entry *e)
{
	if (c->on_evict && e->state == ENTRY_VALID)
		c->on_evict(c->evict_ctx, e);
	ghost_add(c, e);
	hash_unlink(c, e);
	c->stats.evictions++;
	entry_free(c, e);
}

/* One S3-FIFO step on a pool: evicts one entry and returns true, or false
 * when every entry is pinned. */
/* -DPLAN_SAMPLE=... -DPLAN_SCAN=... compare this sample with a full scan
 * (perf/bench4.sh: the same reuse within 0.002 on its hit benchmark). */
#ifndef PLAN_SAMPLE
#define PLAN_SAMPLE 64   /* candidates compared by next planned use */
#endif
#ifndef PLAN_SCAN
#define PLAN_SCAN 512    /* entries looked at, pinned ones included */
#endif

static bool pool_evict_planned(struct cache *c, struct cache_pool *p)
{
	struct cache_entry *best = NULL;
	int64_t best_d = -1;
	unsigned seen = 0, looked = 0;
	struct cache_queue *qs[2] = {&p->small, &p->main};
	for (int qi = 0; qi < 2 && best_d != INT64_MAX; qi++) {
		for (struct cache_entry *e = qs[qi]->head;
		     e && seen < PLAN_SAMPLE && looked < PLAN_SCAN;
		     e = e->qnext, looked++) {
			if (pinned(e))
				continue;
			seen++;
			int64_t d = c->next_use(c->owner_ctx, e);
			if (d > best_d) {
				best = e;
				best_d = d;
				if (d == INT64_MAX)
					break; /* no planned use: goes first */
			}
		}
	}
	if (!best)
		return false;
	queue_remove(entry_queue(c, best), best);
	best->queue = QUEUE_NONE;
	evict(c, best);
	return true;
}

static bool pool_evict_one(struct cache *c, struct cache_pool *p)
{
	if (c->plans_active && c->next_use && pool_evict_planned(c, p))
		return true;
	/* Each visit lowers a frequency or evicts: this bounds the scan. */
	uint64_t budget = (MAX_FREQ + 2) * (p->small.n + p->main.n) + 2;
	while (budget--) {
		bool from_small = p->small.n > 0 &&
				  (p->small.n * 100 >=
					   (p->small.n + p->main.n) * SMALL_PERCENT ||
				   p->main.n == 0);
		struct cache_queue *q = from_small ? &p->small : &p->main;
		struct cache_entry *e = q->head;
		if (!e)
			return false;
		queue_remove(q, e);
		if (pinned(e)) {
			queue_push(q, e);
			continue;
		}
		if (e->freq > 0) {
			if (from_small) {
				e->queue = QUEUE_MAIN;
				e->freq = 0;
				queue_push(&p->main, e);
			} else {
				e->freq--;
				queue_push(q, e);
			}
			continue;
		}
		e->queue = QUEUE_NONE;
		evict(c, e);
		return true;
	}
	return false;
}

/* True if every entry of the superblock may go now (cold: and none was
 * touched since it came in). */
static bool sb_evictable(const struct cache *c, const struct cache_arena *ca,
			 uint32_t sb, bool cold)
{
	const struct arena_sb *s = &ca->arena->sbs[sb];
	if (s->cls == UINT16_MAX || ca->owners_cap[sb] < s->n_slots)
		return false;
	for (uint32_t i = 0; i < s->n_slots; i++) {
		struct cache_entry *e = ca->owners[sb][i];
		if (e && (pinned(e) || (cold && e->freq > 0)))
			return false;
		/* A planned block is not cold, however long it waited. */
		if (e && cold && c->plans_active && c->next_use &&
		    c->next_use(c->owner_ctx, e) != INT64_MAX)
			return false;
	}
	return true;
}

/* Evicts the superblock's entries from its top slot down until the pages
 * above its highest used slot hold `need` bytes, and gives those pages
 * back: the budget is charged by the page, so memory moves between
 * classes a slot at a time, not a superblock (newer entries below stay). */
static void sb_evict(struct cache *c, struct cache_arena *ca, uint32_t sb,
		     uint64_t need)
{
	const struct arena_sb *s = &ca->arena->sbs[sb];
	uint64_t charged = (uint64_t)s->charged * ARENA_PAGE;
	uint32_t size = arena_slot_size(ca->arena, sb);
	for (uint32_t i = s->n_slots; i-- > 0;) {
		struct cache_entry *v = ca->owners[sb][i];
		if (!v)
			continue;
		uint64_t end = ((uint64_t)(i + 1) * size + ARENA_PAGE - 1) /
			       ARENA_PAGE * ARENA_PAGE;
		if (charged >= end + need)
			break; /* enough above slot i: it stays */
		evict(c, v);
	}
	c->stats.reclaims++;
	arena_trim_sb(ca->arena, sb);
}

/* Frees a whole superblock that class `cls` of arena `want` cannot use as
 * it is, so that class can grow: memory moves between classes and
 * datasets. A clock hand walks all superblocks; cold mode looks at a few
 * and takes only superblocks nobody touched again (cheap, on every miss
 * of a full cache), the other mode walks everything for any unpinned one. */
static bool reclaim_superblock(struct cache *c, struct cache_arena *want,
			       uint32_t cls, bool cold)
{
	uint64_t total = 0;
	for (uint32_t i = 0; i < c->n_arenas; i++)
		total += c->arenas[i]->arena->n_sb;
	/* Cold mode counts only superblocks in use: most of the address
	 * space is free superblocks. */
	uint64_t seen = 0, steps = cold ? COLD_SCAN : total;
	for (uint64_t k = 0; k < total && seen < steps; k++) {
		uint64_t pos = c->reclaim_hand++ % total;
		uint32_t ai = 0;
		while (pos >= c->arenas[ai]->arena->n_sb)
			pos -= c->arenas[ai++]->arena->n_sb;
		struct cache_arena *ca = c->arenas[ai];
		uint32_t sb = (uint32_t)pos;
		if (ca->arena->sbs[sb].cls == UINT16_MAX)
			continue;
		seen++;
		if (ca == want && ca->arena->sbs[sb].cls == cls)
			continue; /* its own class: evicting in it is the pool's job */
		if (!sb_evictable(c, ca, sb, cold))
			continue;
		sb_evict(c, ca, sb, c->budget->class_size[cls]);
		return true;
	}
	return false;
}

static bool trim_all(struct cache *c)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < c->n_arenas; i++)
		n += arena_trim(c->arenas[i]->arena);
	return n > 0;
}

static int64_t slot_alloc(struct cache *c, struct cache_arena *ca,
			  uint32_t cls)
{
	for (int round = 0; round < 4096; round++) {
		int64_t off = arena_alloc(ca->arena, cls);
		if (off >= 0)
			return off;
		if (trim_all(c))
			continue;
		/* Cold memory of other classes first, so a class that turns
		 * hot can grow instead of evicting its own hot blocks. */
		if (reclaim_superblock(c, ca, cls, true))
			continue;
		if (pool_evict_one(c, &ca->pools[cls]))
			continue;
		if (reclaim_superblock(c, ca, cls, false))
			continue;
		/* A read must not fail because prefetch holds the memory. */
		if (!c->shed_pins || !c->shed_pins(c->owner_ctx))
			return -ENOMEM;
	}
	return -ENOMEM;
}

/* A superblock's owner table holds a pointer per slot of its class; it
 * grows when the superblock comes back with a smaller class. Slots past
 * the old size were never used, so they start NULL. */
static int owners_ensure(struct cache_arena *ca, uint64_t off)
{
	uint32_t sb = arena_sb_of(ca->arena, off);
	uint32_t n = ca->arena->sbs[sb].n_slots;
	if (ca->owners_cap[sb] < n) {
		struct cache_entry **o =
			realloc(ca->owners[sb], n * sizeof(*o));
		if (!o)
			return -ENOMEM;
		memset(o + ca->owners_cap[sb], 0,
		       (n - ca->owners_cap[sb]) * sizeof(*o));
		ca->owners[sb] = o;
		ca->owners_cap[sb] = n;
	}
	return 0;
}

struct cache_entry *cache_insert(struct cache *c, struct cache_arena *ca,
				 uint64_t obj_id, uint64_t blkno, uint32_t len,
				 int *err)
{
	struct cache_entry *e = calloc(1, sizeof(*e));
	if (!e) {
		*err = -ENOMEM;
		return NULL;
	}
	uint32_t cls = arena_class_of(c->budget, len ? len : 1);
	int64_t off = slot_alloc(c, ca, cls);
	if (off < 0 || owners_ensure(ca, (uint64_t)off) < 0) {
		if (off >= 0)
			arena_free(ca->arena, (uint64_t)off);
		free(e);
		*err = -ENOMEM;
		return NULL;
	}
	e->obj_id = obj_id;
	e->blkno = blkno;
	e->len = len;
	e->off = (uint64_t)off;
	e->ca = ca;
	e->state = ENTRY_FETCHING;
	owner_set(ca, e->off, e);
	struct cache_pool *p = &ca->pools[cls];
	if (ghost_take(c, obj_id, blkno)) {
		e->queue = QUEUE_MAIN;
		queue_push(&p->main, e);
	} else {
		e->queue = QUEUE_SMALL;
		queue_push(&p->small, e);
	}
	struct cache_entry **b = &c->buckets[entry_hash(obj_id, blkno) & c->mask];
	e->hnext = *b;
	*b = e;
	c->stats.entries++;
	c->stats.bytes_cached += len;
	return e;
}

struct cache_entry *cache_lookup(struct cache *c, uint64_t obj_id,
				 uint64_t blkno, bool touch)
{
	struct cache_entry *e = c->buckets[entry_hash(obj_id, blkno) & c->mask];
	while (e && (e->obj_id != obj_id || e->blkno != blkno))
		e = e->hnext;
	if (e && touch && e->freq < MAX_FREQ)
		e->freq++;
	return e;
}

void cache_discard(struct cache *c, struct cache_entry *e)
{
	if (e->orphan)
		return;
	hash_unlink(c, e);
	if (e->leases > 0 || e->plan_pins > 0) {
		e->orphan = 1;
		return;
	}
	entry_free(c, e);
}

void cache_lease(struct cache *c, struct cache_entry *e)
{
	e->leases++;
	c->stats.leases++;
}

void cache_release(struct cache *c, struct cache_entry *e)
{
	c->stats.leases--;
	if (--e->leases == 0 && e->plan_pins == 0 && e->orphan)
		entry_free(c, e);
}

void cache_pin(struct cache *c, struct cache_entry *e)
{
	e->plan_pins++;
	c->stats.pins++;
}

void cache_unpin(struct cache *c, struct cache_entry *e)
{
	c->stats.pins--;
	if (--e->plan_pins == 0 && e->leases == 0 && e->orphan)
		entry_free(c, e);
}

struct cache_arena *cache_add_arena(struct cache *c, struct arena *a)
{
	struct cache_arena *ca = calloc(1, sizeof(*ca));
	if (!ca || RC_GROW(c->arenas, c->cap_arenas, c->n_arenas + 1)) {
		free(ca);
		return NULL;
	}
	ca->arena = a;
	ca->owners = calloc(a->n_sb, sizeof(*ca->owners));
	ca->owners_cap = calloc(a->n_sb, sizeof(*ca->owners_cap));
	if (!ca->owners || !ca->owners_cap) {
		free(ca->owners);
		free(ca->owners_cap);
		free(ca);
		return NULL;
	}
	c->arenas[c->n_arenas++] = ca;
	return ca;
}

/* Every entry of the arena must be unleased (its sessions are gone). */
void cache_remove_arena(struct cache *c, struct cache_arena *ca)
{
	for (uint32_t cls = 0; cls < ARENA_MAX_CLASSES; cls++) {
		struct cache_queue *qs[2] = {&ca->pools[cls].small,
					     &ca->pools[cls].main};
		for (int qi = 0; qi < 2; qi++) {
			while (qs[qi]->head) {
				struct cache_entry *e = qs[qi]->head;
				if (!e->orphan)
					hash_unlink(c, e);
				entry_free(c, e);
			}
		}
	}
	for (uint32_t i = 0; i < c->n_arenas; i++) {
		if (c->arenas[i] == ca) {
			c->arenas[i] = c->arenas[--c->n_arenas];
			break;
		}
	}
	for (uint32_t sb = 0; sb < ca->arena->n_sb; sb++)
		free(ca->owners[sb]);
	free(ca->owners);
	free(ca->owners_cap);
	free(ca);
}

void cache_destroy(struct cache *c)
{
	while (c->n_arenas)
		cache_remove_arena(c, c->arenas[c->n_arenas - 1]);
	free(c->arenas);
	free(c->buckets);
	free(c->ghost);
	memset(c, 0, sizeof(*c));
}
