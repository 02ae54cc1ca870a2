/* prefetch.c - owns prefetch plans: validating and copying a session's
 * plan, the window of pinned blocks ahead of the session's reads, and the
 * deficit-round-robin scheduler that shares prefetch GETs between queues. */
#include "prefetch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "fetch.h"
#include "log.h"

/* ---- the plan index: (object, block) -> its next planned use ----------
 * One slot per (block, plan using it), holding a hint: the plan's
 * generation (low 24 bits) and the entry index (40 bits) of the block's
 * first use at or after the plan's cursor. Rebuilt whenever a plan comes,
 * grows or goes (once an epoch), so blocks fetched later learn their place
 * too. Once a session reads past a slot's entry, its plan's chain of uses
 * of that block gives the next one (the next epoch's, when it was
 * appended); the block's next use is the nearest over its plans, as the
 * next epoch usually gives it to another GPU's queue. Keys are 64-bit
 * hashes: a rare collision only misplaces one block in the eviction order.
 * A cache entry's plan_hint is nonzero while the index may plan it. */

#define HINT_IDX_BITS 40

static uint64_t block_key(uint64_t obj_id, uint64_t b)
{
	uint64_t x = obj_id * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return (x ^ (x >> 29)) | 1;
}

static uint64_t hint_make(uint64_t gen, uint64_t idx)
{
	uint64_t g = gen & 0xffffff;
	return ((g ? g : 1) << HINT_IDX_BITS) | (idx & ((1ull << HINT_IDX_BITS) - 1));
}

static struct plan *plan_of_hint(const struct shard *sh, uint64_t hint)
{
	uint64_t g = hint >> HINT_IDX_BITS;
	for (const struct pqueue *q = sh->pqueues; q; q = q->next) {
		uint64_t qg = q->plan ? q->plan->generation & 0xffffff : 0;
		if (q->plan && (qg ? qg : 1) == g)
			return q->plan;
	}
	return NULL;
}

uint64_t prefetch_hint(const struct shard *sh, uint64_t obj_id, uint64_t b)
{
	if (!sh->plan_keys)
		return 0;
	uint64_t k = block_key(obj_id, b);
	for (uint64_t i = k & sh->plan_mask;; i = (i + 1) & sh->plan_mask) {
		if (sh->plan_keys[i] == k && sh->plan_hints[i])
			return sh->plan_hints[i];
		if (sh->plan_keys[i] == 0)
			return 0;
	}
}

static const struct plan_item *plan_item_at(const struct plan *p,
					     uint64_t idx)
{
	return &p->items[idx - p->base];
}

static uint64_t item_first_block(const struct plan_item *it, uint64_t bs)
{
	return it->offset / bs;
}

static uint64_t item_last_block(const struct plan_item *it, uint64_t bs)
{
	return (it->offset + it->len - 1) / bs;
}

/* The entry after idx that uses block b of idx's object: UINT64_MAX if
 * none (or b is not idx's: a hash collision). */
static uint64_t next_use_of_block(const struct plan *p, uint64_t idx,
				  uint64_t b, uint64_t bs)
{
	const struct plan_item *it = plan_item_at(p, idx);
	if (b < item_first_block(it, bs) || b > item_last_block(it, bs))
		return UINT64_MAX;
	return p->blk_next[it->blk + b - item_first_block(it, bs)];
}

/* How far ahead of its plan's cursor slot i's block is next used
 * (INT64_MAX: not any more); moves the slot along its chain. */
static int64_t slot_distance(struct shard *sh, uint64_t i, uint64_t b)
{
	uint64_t hint = sh->plan_hints[i];
	const struct plan *p = hint ? plan_of_hint(sh, hint) : NULL;
	uint64_t idx = hint & ((1ull << HINT_IDX_BITS) - 1);
	if (!p || idx < p->base) {
		sh->plan_hints[i] = 0; /* plan gone, or that use long past */
		return INT64_MAX;
	}
	while (idx < p->cursor) /* read already: follow the chain */
		idx = next_use_of_block(p, idx, b, sh->d->cfg.block_bytes);
	if (idx == UINT64_MAX) {
		sh->plan_hints[i] = 0;
		return INT64_MAX;
	}
	sh->plan_hints[i] = hint_make(p->generation, idx);
	return (int64_t)(idx - p->cursor);
}

int64_t prefetch_next_use(void *shard, struct cache_entry *e)
{
	struct shard *sh = shard;
	if (!e->plan_hint || !sh->plan_keys)
		return INT64_MAX;
	uint64_t k = block_key(e->obj_id, e->blkno);
	int64_t best = INT64_MAX;
	for (uint64_t i = k & sh->plan_mask; sh->plan_keys[i];
	     i = (i + 1) & sh->plan_mask) {
		if (sh->plan_keys[i] != k || !sh->plan_hints[i])
			continue;
		int64_t d = slot_distance(sh, i, e->blkno);
		if (d < best)
			best = d;
	}
	if (best == INT64_MAX)
		e->plan_hint = 0; /* no further use planned: skip the lookup */
	return best;
}

/* Adds the block's use in the hint's plan, unless that plan has a nearer
 * one already (entries are added in order from the cursor). */
static void index_put(struct shard *sh, uint64_t k, uint64_t hint)
{
	for (uint64_t i = k & sh->plan_mask;; i = (i + 1) & sh->plan_mask) {
		if (sh->plan_keys[i] == 0) {
			sh->plan_keys[i] = k;
			sh->plan_hints[i] = hint;
			return;
		}
		if (sh->plan_keys[i] == k &&
		    sh->plan_hints[i] >> HINT_IDX_BITS == hint >> HINT_IDX_BITS)
			return;
	}
}

static void index_rebuild(struct shard *sh)
{
	uint64_t bs = sh->d->cfg.block_bytes, blocks = 0;
	for (struct pqueue *q = sh->pqueues; q; q = q->next) {
		struct plan *p = q->plan;
		for (uint64_t i = p ? p->cursor : 0; p && i < p->n; i++)
			blocks += item_last_block(plan_item_at(p, i), bs) -
				  item_first_block(plan_item_at(p, i), bs) + 1;
	}
	free(sh->plan_keys);
	free(sh->plan_hints);
	sh->plan_keys = sh->plan_hints = NULL;
	sh->cache.plans_active = blocks > 0;
	if (!blocks)
		return;
	uint64_t cap = 1024;
	while (cap < blocks * 2)
		cap <<= 1;
	sh->plan_keys = calloc(cap, sizeof(uint64_t));
	sh->plan_hints = calloc(cap, sizeof(uint64_t));
	if (!sh->plan_keys || !sh->plan_hints) {
		free(sh->plan_keys);
		free(sh->plan_hints);
		sh->plan_keys = sh->plan_hints = NULL;
		sh->cache.plans_active = false; /* the default policy stands */
		return;
	}
	sh->plan_mask = cap - 1;
	for (struct pqueue *q = sh->pqueues; q; q = q->next) {
		struct plan *p = q->plan;
		for (uint64_t i = p ? p->cursor : 0; p && i < p->n; i++) {
			const struct plan_item *it = plan_item_at(p, i);
			uint64_t hint = hint_make(p->generation, i);
			for (uint64_t b = item_first_block(it, bs);
			     b <= item_last_block(it, bs); b++) {
				uint64_t k = block_key(it->obj->id, b);
				index_put(sh, k, hint);
				struct cache_entry *e = cache_lookup(
					&sh->cache, it->obj->id, b, false);
				if (e)
					e->plan_hint = prefetch_hint(sh, it->obj->id, b);
			}
		}
	}
}

/* What all windows together may pin: half the memory. */
static uint64_t pinned_budget(const struct shard *sh)
{
	return sh->budget.sb_total * sh->budget.sb_bytes / 2;
}

/* One plan's window: the configured bytes, at most a quarter of memory
 * and its queue's share of the pinned budget, so a queue that runs ahead
 * (into the next epoch's appended order, while others finish this one)
 * cannot hold the pins another queue needs for its next sample. */
static uint64_t window_bytes(const struct shard *sh)
{
	uint64_t cap = sh->budget.sb_total * sh->budget.sb_bytes / 4;
	uint64_t share = pinned_budget(sh) / (sh->n_planned ? sh->n_planned : 1);
	uint64_t w = sh->d->cfg.prefetch_window_bytes;
	w = w < cap ? w : cap;
	return w < share ? w : share;
}

/* Whether the plan's uid pins all it may: its windows stop growing. */
static bool uid_pins_full(const struct shard *sh, const struct plan *p)
{
	return p->usage &&
	       atomic_load_explicit(&p->usage->pinned_bytes,
				    memory_order_relaxed) >=
		       sh->d->quota.v.pinned_per_uid;
}

static void pinned_sub(struct shard *sh, struct plan *p, uint64_t bytes)
{
	p->pinned_bytes -= bytes;
	sh->pf_pinned_bytes -= bytes;
	if (p->usage)
		quota_uncharge(&p->usage->pinned_bytes, bytes);
}

static void unpin_until(struct shard *sh, struct plan *p, uint64_t item)
{
	while (p->pin_head < p->pin_tail && p->pins[p->pin_head].item < item) {
		struct cache_entry *e = p->pins[p->pin_head++].e;
		pinned_sub(sh, p, e->len);
		cache_unpin(&sh->cache, e);
	}
	if (p->pin_head == p->pin_tail)
		p->pin_head = p->pin_tail = 0;
}

bool prefetch_shed(void *shard)
{
	struct shard *sh = shard;
	struct plan *p = NULL;
	for (struct pqueue *q = sh->pqueues; q; q = q->next)
		if (q->plan && q->plan->pin_tail > q->plan->pin_head &&
		    (!p || q->plan->pinned_bytes > p->pinned_bytes))
			p = q->plan;
	if (!p)
		return false;
	uint64_t n = (p->pin_tail - p->pin_head + 3) / 4;
	while (n--) {
		struct plan_pin *pin = &p->pins[--p->pin_tail];
		pinned_sub(sh, p, pin->e->len);
		if (pin->item < p->issued) {
			p->issued = pin->item; /* prefetched again later */
			p->issued_blk = 0;
		}
		cache_unpin(&sh->cache, pin->e);
	}
	sh->m.prefetch_shed++;
	return true;
}

static int pin_push(struct shard *sh, struct plan *p, uint64_t item,
		    struct cache_entry *e)
{
	if (p->pin_tail == p->pin_cap) {
		if (p->pin_head > 0) {
			memmove(p->pins, p->pins + p->pin_head,
				(p->pin_tail - p->pin_head) * sizeof(*p->pins));
			p->pin_tail -= p->pin_head;
			p->pin_head = 0;
		} else {
			uint64_t cap = p->pin_cap ? p->pin_cap * 2 : 256;
			struct plan_pin *np = realloc(p->pins, cap * sizeof(*np));
			if (!np)
				return -ENOMEM;
			p->pins = np;
			p->pin_cap = cap;
		}
	}
	p->pins[p->pin_tail++] = (struct plan_pin){item, e};
	p->pinned_bytes += e->len;
	sh->pf_pinned_bytes += e->len;
	if (p->usage) /* the limit is checked before (plan_has_work) */
		atomic_fetch_add_explicit(&p->usage->pinned_bytes, e->len,
					  memory_order_relaxed);
	cache_pin(&sh->cache, e);
	return 0;
}

static void plan_free(struct shard *sh, struct plan *p)
{
	unpin_until(sh, p, UINT64_MAX);
	if (p->usage)
		quota_uncharge(&p->usage->plan_entries, p->charged);
	for (uint64_t i = p->base; i < p->n; i++)
		object_put(sh->d, plan_item_at(p, i)->obj);
	free(p->items);
	free(p->blk_next);
	free(p->pins);
	free(p);
}

/* Numbers the entries' blocks and chains each block's uses, walking the
 * plan backwards with a table of the nearest later use of each block. */
static int plan_link(struct shard *sh, struct plan *p)
{
	uint64_t bs = sh->d->cfg.block_bytes, blocks = 0;
	for (uint64_t i = p->base; i < p->n; i++) {
		p->items[i - p->base].blk = blocks;
		blocks += item_last_block(plan_item_at(p, i), bs) -
			  item_first_block(plan_item_at(p, i), bs) + 1;
	}
	p->blocks = blocks;
	uint64_t cap = 1024;
	while (cap < blocks * 2)
		cap <<= 1;
	uint64_t *keys = calloc(cap, sizeof(*keys));
	uint64_t *uses = malloc(cap * sizeof(*uses));
	uint64_t *next = malloc((blocks ? blocks : 1) * sizeof(*next));
	if (!keys || !uses || !next) {
		free(keys);
		free(uses);
		free(next);
		return -ENOMEM;
	}
	for (uint64_t i = p->n; i-- > p->base;) {
		const struct plan_item *it = plan_item_at(p, i);
		for (uint64_t b = item_first_block(it, bs);
		     b <= item_last_block(it, bs); b++) {
			uint64_t k = block_key(it->obj->id, b), j = k & (cap - 1);
			while (keys[j] && keys[j] != k)
				j = (j + 1) & (cap - 1);
			next[it->blk + b - item_first_block(it, bs)] =
				keys[j] ? uses[j] : UINT64_MAX;
			keys[j] = k;
			uses[j] = i;
		}
	}
	free(keys);
	free(uses);
	free(p->blk_next);
	p->blk_next = next;
	return 0;
}

/* Copies and validates the client's entries, covering at most
 * max_blocks blocks (-E2BIG past them). Returns the new plan (not yet
 * linked, p->blocks counted) or NULL with *err set. */
static struct plan *plan_copy(struct session *s,
			      const struct rc_plan_entry *entries, uint64_t n,
			      uint64_t max_blocks, plan_resolve_fn resolve,
			      int *err)
{
	uint64_t bs = s->sh->d->cfg.block_bytes;
	struct plan *p = calloc(1, sizeof(*p));
	if (!p || (n && !(p->items = malloc(n * sizeof(*p->items))))) {
		free(p);
		*err = -ENOMEM;
		return NULL;
	}
	*err = 0;
	for (uint64_t i = 0; i < n && !*err; i++) {
		struct rc_plan_entry e;
		copy_from_client(&e, &entries[i], sizeof(e));
		struct object *o = resolve(s, e.handle);
		if (!o)
			*err = -EBADF;
		else if (e.reserved || e.len == 0 || e.offset >= o->size)
			*err = -EINVAL;
		if (*err)
			break;
		object_get(o);
		struct plan_item *it = &p->items[p->n++];
		*it = (struct plan_item){
			o, e.offset,
			e.len < o->size - e.offset ? e.len : o->size - e.offset, 0};
		p->blocks += item_last_block(it, bs) - item_first_block(it, bs) + 1;
		if (p->blocks > max_blocks)
			*err = -E2BIG; /* the cost of a plan is its blocks */
	}
	if (*err == -E2BIG)
		quota_refused(&s->sh->d->quota, REFUSED_PLAN_ENTRIES);
	if (*err) {
		plan_free(s->sh, p);
		return NULL;
	}
	return p;
}

/* Moves more's entries to the end of p, dropping p's entries before its
 * cursor (read already: nothing refers to them but stale hints, which
 * index_rebuild renews). more is freed; on -ENOMEM both stay as they
 * were. */
static int plan_append(struct shard *sh, struct plan *p, struct plan *more)
{
	uint64_t keep = p->n - p->cursor;
	struct plan_item *items = malloc((keep + more->n) * sizeof(*items));
	if (!items)
		return -ENOMEM;
	memcpy(items, p->items + (p->cursor - p->base), keep * sizeof(*items));
	memcpy(items + keep, more->items, more->n * sizeof(*items));
	struct plan_item *old = p->items;
	uint64_t old_base = p->base, old_n = p->n;
	p->items = items;
	p->base = p->cursor;
	p->n = p->cursor + keep + more->n;
	if (plan_link(sh, p) < 0) {
		p->items = old;
		p->base = old_base;
		p->n = old_n;
		free(items);
		return -ENOMEM;
	}
	for (uint64_t i = old_base; i < p->base; i++)
		object_put(sh->d, old[i - old_base].obj);
	free(old);
	more->n = 0; /* its objects' references moved to p */
	plan_free(sh, more);
	return 0;
}

static void queue_drop_plan(struct shard *sh, struct pqueue *q)
{
	struct plan *p = q->plan;
	if (!p)
		return;
	pthread_mutex_lock(&sh->lock); /* the stats read q->plan under it */
	q->plan = NULL;
	pthread_mutex_unlock(&sh->lock);
	sh->n_planned--;
	fetch_cancel_prefetch(sh, p->generation);
	plan_free(sh, p);
	index_rebuild(sh);
}

struct pqueue *pqueue_get(struct shard *sh, int gpu, uid_t uid)
{
	if (gpu >= 0) {
		for (struct pqueue *q = sh->pqueues; q; q = q->next) {
			if (q->gpu == gpu && q->uid == uid) {
				q->refs++;
				return q;
			}
		}
	}
	struct pqueue *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->gpu = gpu < 0 ? -1 : gpu;
	q->uid = uid;
	q->id = ++sh->pq_next_id;
	q->refs = 1;
	pthread_mutex_lock(&sh->lock); /* the stats walk this list */
	q->next = sh->pqueues;
	if (sh->pqueues)
		sh->pqueues->prev = q;
	sh->pqueues = q;
	pthread_mutex_unlock(&sh->lock);
	return q;
}

void pqueue_put(struct shard *sh, struct pqueue *q)
{
	if (!q || --q->refs > 0)
		return;
	queue_drop_plan(sh, q);
	pthread_mutex_lock(&sh->lock);
	if (q->prev)
		q->prev->next = q->next;
	else
		sh->pqueues = q->next;
	if (q->next)
		q->next->prev = q->prev;
	pthread_mutex_unlock(&sh->lock);
	free(q);
}

/* Charges the uid for n more plan blocks, where `freed` of its blocks go
 * once the change is made. */
static int plan_charge(struct session *s, uint64_t n, uint64_t freed)
{
	struct quota *q = &s->sh->d->quota;
	return quota_charge(q, &s->usage->plan_entries, n,
			    q->v.plan_entries_per_uid + freed,
			    REFUSED_PLAN_ENTRIES_PER_UID);
}

/* Blocks of the plan's entries from its cursor on. */
static uint64_t plan_blocks_ahead(const struct plan *p)
{
	return p->cursor < p->n ? p->blocks - plan_item_at(p, p->cursor)->blk
				: 0;
}

static int append_plan(struct session *s, struct plan *cur,
		       const struct rc_plan_entry *entries, uint64_t n,
		       plan_resolve_fn resolve)
{
	struct shard *sh = s->sh;
	uint64_t limit = sh->d->quota.v.plan_entries;
	uint64_t kept = plan_blocks_ahead(cur);
	uint64_t dropped = cur->charged - kept; /* plan_append drops them */
	int err = 0;
	if (n == 0)
		return 0;
	struct plan *p = plan_copy(s, entries, n, limit - kept, resolve,
				   &err);
	if (!p)
		return err;
	uint64_t added = p->blocks;
	if ((err = plan_charge(s, added, dropped)) == 0 &&
	    (err = plan_append(sh, cur, p)) == 0) {
		quota_uncharge(&s->usage->plan_entries, dropped);
		cur->charged = kept + added;
		index_rebuild(sh);
		return 0;
	}
	if (err != -EDQUOT)
		quota_uncharge(&s->usage->plan_entries, added);
	plan_free(sh, p);
	return err;
}

int prefetch_set_plan(struct session *s, const struct rc_plan_entry *entries,
		      uint64_t n, bool append, plan_resolve_fn resolve)
{
	struct shard *sh = s->sh;
	struct pqueue *q = s->pq;
	uint64_t limit = sh->d->quota.v.plan_entries;
	int err;
	if (n > limit) { /* every entry covers a block at least */
		quota_refused(&sh->d->quota, REFUSED_PLAN_ENTRIES);
		return -E2BIG;
	}
	if (!q)
		return -ENOMEM;
	if (sh->d->cfg.prefetch_window_bytes == 0)
		return -EOPNOTSUPP; /* prefetch turned off in the config */
	int accepted = (int)(n > INT32_MAX ? INT32_MAX : n);
	struct plan *cur = q->plan;
	if (append && cur) {
		err = append_plan(s, cur, entries, n, resolve);
		return err ? err : accepted;
	}
	if (n == 0) {
		if (!append)
			queue_drop_plan(sh, q); /* an empty plan drops the old one */
		return 0;
	}
	struct plan *p = plan_copy(s, entries, n, limit, resolve, &err);
	if (!p)
		return err;
	if ((err = plan_charge(s, p->blocks, cur ? cur->charged : 0))) {
		plan_free(sh, p);
		return err;
	}
	p->usage = s->usage;
	p->charged = p->blocks;
	if (plan_link(sh, p) < 0) {
		plan_free(sh, p);
		return -ENOMEM;
	}
	queue_drop_plan(sh, q);
	p->generation = ++sh->pf_generation;
	p->ramp = 2;
	pthread_mutex_lock(&sh->lock);
	q->plan = p;
	pthread_mutex_unlock(&sh->lock);
	sh->n_planned++;
	index_rebuild(sh);
	return accepted;
}

void prefetch_consumed(struct session *s, const struct object *obj,
		       uint64_t offset)
{
	struct plan *p = s->pq ? s->pq->plan : NULL;
	if (!p)
		return;
	uint64_t end = p->cursor + s->sh->d->cfg.prefetch_window_entries + 16;
	for (uint64_t i = p->cursor; i < p->n && i < end; i++) {
		const struct plan_item *it = plan_item_at(p, i);
		if (it->obj != obj || offset < it->offset ||
		    offset >= it->offset + it->len)
			continue;
		p->cursor = i;
		unpin_until(s->sh, p, i);
		if (p->issued < i) {
			p->issued = i;
			p->issued_blk = 0;
		}
		return;
	}
}

void prefetch_fetch_done(struct shard *sh, uint64_t gen)
{
	for (struct pqueue *q = sh->pqueues; q; q = q->next) {
		struct plan *p = q->plan;
		if (!p || p->generation != gen)
			continue;
		if (p->inflight)
			p->inflight--;
		if (p->ramp < sh->d->cfg.prefetch_inflight)
			p->ramp++; /* one more per completion: doubles per RTT */
		return;
	}
}

static bool plan_has_work(const struct shard *sh, const struct plan *p)
{
	return p->issued < p->n && p->inflight < p->ramp &&
	       p->issued < p->cursor + sh->d->cfg.prefetch_window_entries &&
	       p->pinned_bytes < window_bytes(sh) &&
	       sh->pf_pinned_bytes < pinned_budget(sh) &&
	       !uid_pins_full(sh, p);
}

/* Pins the next block of the plan, fetching it if absent. Returns the
 * bytes fetched (0 if it was cached already), or -1 to stop for now. */
static int64_t plan_issue_one(struct shard *sh, struct plan *p)
{
	if (!plan_has_work(sh, p))
		return -1;
	const struct plan_item *it = plan_item_at(p, p->issued);
	uint64_t bs = sh->d->cfg.block_bytes;
	uint64_t first = it->offset / bs, last = (it->offset + it->len - 1) / bs;
	uint64_t b = first + p->issued_blk;
	int64_t cost = 0;
	if (!it->obj->stale) {
		struct cache_entry *e;
		bool started;
		if (fetch_prefetch_block(sh, it->obj, b, p->generation, &e,
					  &started) < 0 ||
		    pin_push(sh, p, p->issued, e) < 0)
			return -1; /* no memory now: try again later */
		cost = started ? e->len : 0;
		if (started) {
			p->prefetched_bytes += e->len;
			p->inflight++;
		}
	}
	if (b >= last) {
		p->issued++;
		p->issued_blk = 0;
	} else {
		p->issued_blk++;
	}
	return cost;
}

/* Counts a window held back by its uid's pinned bytes once, when it
 * starts to be, not at every turn. */
static void note_pins_held(struct shard *sh, struct plan *p)
{
	bool held = p->issued < p->n && uid_pins_full(sh, p);
	if (held && !p->pins_held)
		quota_refused(&sh->d->quota, REFUSED_PINNED_PER_UID);
	p->pins_held = held;
}

/* Deficit round robin: a queue's turn lasts until it has spent its
 * quantum of bytes; the turn pointer survives between calls, so a queue
 * cut short by the in-flight limit resumes first when a GET completes. */
void prefetch_schedule(struct shard *sh)
{
	uint32_t limit = sh->d->cfg.prefetch_inflight;
	if (!sh->n_planned || sh->pf_inflight >= limit)
		return;
	struct plan *q[256];
	uint32_t n = 0;
	for (struct pqueue *pq = sh->pqueues; pq && n < 256; pq = pq->next)
		if (pq->plan)
			q[n++] = pq->plan;
	if (n == 0)
		return;
	int64_t quantum = sh->d->cfg.block_bytes;
	uint32_t idle = 0;
	while (sh->pf_inflight < limit && idle < n) {
		struct plan *p = q[sh->pf_rr % n];
		note_pins_held(sh, p);
		if (!plan_has_work(sh, p)) {
			p->deficit = 0;
			sh->pf_rr++;
			idle++;
			continue;
		}
		if (p->deficit <= 0) {
			p->deficit += quantum;
			sh->pf_rr++;
			continue;
		}
		int64_t cost = plan_issue_one(sh, p);
		if (cost < 0) {
			sh->pf_rr++;
			idle++;
			continue;
		}
		p->deficit -= cost;
		idle = 0;
	}
}
