/* plan.c - owns the pure core of prefetch plans (plan.h): entries and
 * their block-use chains, cursor and window arithmetic, the pin FIFO and
 * the (object, block) -> next use index. No shard, no cache calls, no
 * I/O: prefetch.c applies what these decide. */
#include "plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "vec.h"

/* ---- entries ------------------------------------------------------------ */

int plan_entry_check(const struct rc_plan_entry *e, uint64_t obj_size)
{
	return e->reserved || e->len == 0 || e->offset >= obj_size ? -EINVAL
								    : 0;
}

struct plan_item plan_item_make(struct object *obj, uint64_t obj_id,
				uint64_t obj_size,
				const struct rc_plan_entry *e)
{
	uint64_t left = obj_size - e->offset;
	return (struct plan_item){obj, obj_id, e->offset,
				  e->len < left ? e->len : left, 0};
}

static uint64_t item_first_block(const struct plan_item *it, uint64_t bs)
{
	return it->offset / bs;
}

static uint64_t item_last_block(const struct plan_item *it, uint64_t bs)
{
	return (it->offset + it->len - 1) / bs;
}

uint64_t plan_item_blocks(const struct plan_item *it, uint64_t bs)
{
	return item_last_block(it, bs) - item_first_block(it, bs) + 1;
}

/* Keys are 64-bit hashes: a rare collision only misplaces one block in
 * the eviction order. Never 0 (an empty slot). */
static uint64_t block_key(uint64_t obj_id, uint64_t b)
{
	uint64_t x = obj_id * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return (x ^ (x >> 29)) | 1;
}

static uint64_t table_cap(uint64_t blocks)
{
	uint64_t cap = 1024;
	while (cap < blocks * 2)
		cap <<= 1;
	return cap;
}

/* Walks the plan backwards with a table of the nearest later use of each
 * block. */
int plan_link(struct plan *p, uint64_t bs)
{
	uint64_t blocks = 0;
	for (uint64_t i = p->base; i < p->n; i++)
		blocks += plan_item_blocks(plan_item_at(p, i), bs);
	uint64_t cap = table_cap(blocks);
	uint64_t *keys = calloc(cap, sizeof(*keys));
	uint64_t *uses = malloc(cap * sizeof(*uses));
	uint64_t *next = malloc((blocks ? blocks : 1) * sizeof(*next));
	if (!keys || !uses || !next) {
		free(keys);
		free(uses);
		free(next);
		return -ENOMEM;
	}
	blocks = 0;
	for (uint64_t i = p->base; i < p->n; i++) {
		p->items[i - p->base].blk = blocks;
		blocks += plan_item_blocks(plan_item_at(p, i), bs);
	}
	p->blocks = blocks;
	for (uint64_t i = p->n; i-- > p->base;) {
		const struct plan_item *it = plan_item_at(p, i);
		for (uint64_t b = item_first_block(it, bs);
		     b <= item_last_block(it, bs); b++) {
			uint64_t k = block_key(it->obj_id, b), j = k & (cap - 1);
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

int plan_append_items(struct plan *p, const struct plan_item *more,
		      uint64_t n, uint64_t bs, struct plan_item **dropped,
		      uint64_t *n_dropped)
{
	uint64_t keep = p->n - p->cursor;
	struct plan_item *items = malloc((keep + n ? keep + n : 1) *
					 sizeof(*items));
	if (!items)
		return -ENOMEM;
	memcpy(items, p->items + (p->cursor - p->base), keep * sizeof(*items));
	if (n) /* more may be NULL then */
		memcpy(items + keep, more, n * sizeof(*items));
	struct plan_item *old = p->items;
	uint64_t old_base = p->base, old_n = p->n, old_blocks = p->blocks;
	p->items = items;
	p->base = p->cursor;
	p->n = p->cursor + keep + n;
	if (plan_link(p, bs) < 0) {
		p->items = old;
		p->base = old_base;
		p->n = old_n;
		p->blocks = old_blocks;
		free(items);
		return -ENOMEM;
	}
	*dropped = old;
	*n_dropped = p->base - old_base;
	return 0;
}

uint64_t plan_blocks_ahead(const struct plan *p)
{
	return p->cursor < p->n ? p->blocks - plan_item_at(p, p->cursor)->blk
				: 0;
}

uint64_t plan_next_use_of(const struct plan *p, uint64_t idx, uint64_t b,
			  uint64_t bs)
{
	const struct plan_item *it = plan_item_at(p, idx);
	if (b < item_first_block(it, bs) || b > item_last_block(it, bs))
		return UINT64_MAX;
	return p->blk_next[it->blk + b - item_first_block(it, bs)];
}

/* ---- the window --------------------------------------------------------- */

uint64_t plan_find(const struct plan *p, const struct object *obj,
		   uint64_t offset, uint64_t horizon)
{
	uint64_t end = p->cursor + horizon;
	for (uint64_t i = p->cursor; i < p->n && i < end; i++) {
		const struct plan_item *it = plan_item_at(p, i);
		if (it->obj == obj && offset >= it->offset &&
		    offset < it->offset + it->len)
			return i;
	}
	return UINT64_MAX;
}

void plan_move_cursor(struct plan *p, uint64_t idx)
{
	p->cursor = idx;
	if (p->issued < idx) {
		p->issued = idx;
		p->issued_blk = 0;
	}
}

/* A quarter of memory at most, and no more than its share of the pinned
 * budget (half of memory), so a queue that runs ahead (into the next
 * epoch's appended order, while others finish this one) cannot hold the
 * pins another queue needs for its next sample. */
uint64_t plan_window_bytes(uint64_t configured, uint64_t memory,
			   uint32_t n_planned)
{
	uint64_t cap = memory / 4;
	uint64_t share = memory / 2 / (n_planned ? n_planned : 1);
	uint64_t w = configured < cap ? configured : cap;
	return w < share ? w : share;
}

bool plan_window_open(const struct plan *p, uint64_t entries,
		      uint64_t bytes)
{
	return p->issued < p->n && p->inflight < p->ramp &&
	       p->issued < p->cursor + entries && p->pinned_bytes < bytes;
}

const struct plan_item *plan_next_block(const struct plan *p, uint64_t bs,
					uint64_t *b)
{
	const struct plan_item *it = plan_item_at(p, p->issued);
	*b = item_first_block(it, bs) + p->issued_blk;
	return it;
}

void plan_block_issued(struct plan *p, uint64_t bs)
{
	const struct plan_item *it = plan_item_at(p, p->issued);
	if (item_first_block(it, bs) + p->issued_blk >= item_last_block(it, bs)) {
		p->issued++;
		p->issued_blk = 0;
	} else {
		p->issued_blk++;
	}
}

void plan_fetch_done(struct plan *p, uint32_t max_inflight)
{
	if (p->inflight)
		p->inflight--;
	if (p->ramp < max_inflight)
		p->ramp++;
}

/* ---- pins --------------------------------------------------------------- */

int plan_pin_push(struct plan *p, uint64_t item, struct cache_entry *e)
{
	if (p->pin_tail == p->pin_cap) {
		if (p->pin_head > 0) {
			memmove(p->pins, p->pins + p->pin_head,
				(p->pin_tail - p->pin_head) * sizeof(*p->pins));
			p->pin_tail -= p->pin_head;
			p->pin_head = 0;
		} else if (RC_GROW_FROM(p->pins, p->pin_cap, p->pin_tail + 1,
					256)) {
			return -ENOMEM;
		}
	}
	p->pins[p->pin_tail++] = (struct plan_pin){item, e};
	p->pinned_bytes += e->len;
	return 0;
}

struct cache_entry *plan_pin_pop_before(struct plan *p, uint64_t item)
{
	if (p->pin_head == p->pin_tail || p->pins[p->pin_head].item >= item) {
		if (p->pin_head == p->pin_tail)
			p->pin_head = p->pin_tail = 0;
		return NULL;
	}
	struct cache_entry *e = p->pins[p->pin_head++].e;
	p->pinned_bytes -= e->len;
	if (p->pin_head == p->pin_tail)
		p->pin_head = p->pin_tail = 0;
	return e;
}

struct cache_entry *plan_pin_pop_last(struct plan *p)
{
	if (p->pin_tail == p->pin_head)
		return NULL;
	struct plan_pin *pin = &p->pins[--p->pin_tail];
	p->pinned_bytes -= pin->e->len;
	if (pin->item < p->issued) {
		p->issued = pin->item; /* prefetched again later */
		p->issued_blk = 0;
	}
	return pin->e;
}

uint64_t plan_pin_count(const struct plan *p)
{
	return p->pin_tail - p->pin_head;
}

/* ---- the next-use index -------------------------------------------------
 * Rebuilt whenever a plan comes, grows or goes (once an epoch), so blocks
 * fetched later learn their place too. Once a session reads past a
 * slot's entry, its plan's chain of uses of that block gives the next one
 * (the next epoch's, when it was appended); the block's next use is the
 * nearest over its plans, as the next epoch usually gives it to another
 * GPU's queue. */

#define HINT_IDX_BITS 40

static uint64_t hint_make(uint64_t gen, uint64_t idx)
{
	uint64_t g = gen & 0xffffff;
	return ((g ? g : 1) << HINT_IDX_BITS) | (idx & ((1ull << HINT_IDX_BITS) - 1));
}

static struct plan *plan_of_hint(const struct plan_index *ix, uint64_t hint)
{
	uint64_t g = hint >> HINT_IDX_BITS;
	for (uint32_t i = 0; i < ix->n_plans; i++) {
		uint64_t pg = ix->plans[i]->generation & 0xffffff;
		if ((pg ? pg : 1) == g)
			return ix->plans[i];
	}
	return NULL;
}

uint64_t plan_index_hint(const struct plan_index *ix, uint64_t obj_id,
			 uint64_t b)
{
	if (!ix->keys)
		return 0;
	uint64_t k = block_key(obj_id, b);
	for (uint64_t i = k & ix->mask;; i = (i + 1) & ix->mask) {
		if (ix->keys[i] == k && ix->hints[i])
			return ix->hints[i];
		if (ix->keys[i] == 0)
			return 0;
	}
}

/* How far ahead of its plan's cursor slot i's block is next used
 * (INT64_MAX: not any more); moves the slot along its chain. */
static int64_t slot_distance(struct plan_index *ix, uint64_t i, uint64_t b,
			     uint64_t bs)
{
	uint64_t hint = ix->hints[i];
	const struct plan *p = hint ? plan_of_hint(ix, hint) : NULL;
	uint64_t idx = hint & ((1ull << HINT_IDX_BITS) - 1);
	if (!p || idx < p->base) {
		ix->hints[i] = 0; /* plan gone, or that use long past */
		return INT64_MAX;
	}
	while (idx < p->cursor) /* read already: follow the chain */
		idx = plan_next_use_of(p, idx, b, bs);
	if (idx == UINT64_MAX) {
		ix->hints[i] = 0;
		return INT64_MAX;
	}
	ix->hints[i] = hint_make(p->generation, idx);
	return (int64_t)(idx - p->cursor);
}

int64_t plan_index_next_use(struct plan_index *ix, uint64_t obj_id,
			    uint64_t b, uint64_t bs)
{
	if (!ix->keys)
		return INT64_MAX;
	uint64_t k = block_key(obj_id, b);
	int64_t best = INT64_MAX;
	for (uint64_t i = k & ix->mask; ix->keys[i]; i = (i + 1) & ix->mask) {
		if (ix->keys[i] != k || !ix->hints[i])
			continue;
		int64_t d = slot_distance(ix, i, b, bs);
		if (d < best)
			best = d;
	}
	return best;
}

/* Adds the block's use in the hint's plan, unless that plan has a nearer
 * one already (entries are added in order from the cursor). */
static void index_put(struct plan_index *ix, uint64_t k, uint64_t hint)
{
	for (uint64_t i = k & ix->mask;; i = (i + 1) & ix->mask) {
		if (ix->keys[i] == 0) {
			ix->keys[i] = k;
			ix->hints[i] = hint;
			return;
		}
		if (ix->keys[i] == k &&
		    ix->hints[i] >> HINT_IDX_BITS == hint >> HINT_IDX_BITS)
			return;
	}
}

void plan_index_free(struct plan_index *ix)
{
	free(ix->keys);
	free(ix->hints);
	free(ix->plans);
	*ix = (struct plan_index){0};
}

static uint64_t blocks_from_cursors(struct plan *const *plans, uint32_t n,
				    uint64_t bs)
{
	uint64_t blocks = 0;
	for (uint32_t q = 0; q < n; q++) {
		const struct plan *p = plans[q];
		for (uint64_t i = p ? p->cursor : 0; p && i < p->n; i++)
			blocks += plan_item_blocks(plan_item_at(p, i), bs);
	}
	return blocks;
}

int plan_index_build(struct plan_index *ix, struct plan *const *plans,
		     uint32_t n, uint64_t bs,
		     void (*each)(void *ctx, uint64_t obj_id, uint64_t b),
		     void *ctx)
{
	plan_index_free(ix);
	uint64_t blocks = blocks_from_cursors(plans, n, bs);
	if (!blocks)
		return 0;
	uint64_t cap = table_cap(blocks);
	ix->keys = calloc(cap, sizeof(uint64_t));
	ix->hints = calloc(cap, sizeof(uint64_t));
	ix->plans = malloc(n * sizeof(*ix->plans));
	if (!ix->keys || !ix->hints || !ix->plans) {
		plan_index_free(ix);
		return -ENOMEM;
	}
	ix->mask = cap - 1;
	for (uint32_t q = 0; q < n; q++)
		if (plans[q])
			ix->plans[ix->n_plans++] = plans[q];
	for (uint32_t q = 0; q < ix->n_plans; q++) {
		const struct plan *p = ix->plans[q];
		for (uint64_t i = p->cursor; i < p->n; i++) {
			const struct plan_item *it = plan_item_at(p, i);
			uint64_t hint = hint_make(p->generation, i);
			for (uint64_t b = item_first_block(it, bs);
			     b <= item_last_block(it, bs); b++) {
				index_put(ix, block_key(it->obj_id, b), hint);
				if (each)
					each(ctx, it->obj_id, b);
			}
		}
	}
	return 1;
}
