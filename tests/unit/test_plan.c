/* test_plan.c - the prefetch planner's core (src/engine/plan.c) without a
 * daemon: the window advances as reads consume the plan and never runs
 * more than its entries or bytes ahead; the next-use index orders the
 * cache's eviction (the block used furthest in the future goes first,
 * against the real cache.c); several GPU queues' plans share blocks; an
 * appended next epoch continues the window and the use chains. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "plan.h"

#define BS 4096u
#define MiB (1024u * 1024u)

/* Stand-ins for the daemon's objects: plan.c only compares the pointers. */
static char objects[16];
#define OBJ(i) ((struct object *)&objects[i])
#define OBJ_ID(i) (100u + (i))

static struct plan_item item(unsigned obj, uint64_t offset, uint64_t len)
{
	return (struct plan_item){OBJ(obj), OBJ_ID(obj), offset, len, 0};
}

/* A plan of one-block entries: blocks[i] of object obj. */
static struct plan *plan_of_blocks(unsigned obj, const uint64_t *blocks,
				   uint64_t n, uint64_t bs, uint64_t gen)
{
	struct plan *p = calloc(1, sizeof(*p));
	cr_assert_not_null(p);
	p->items = malloc((n ? n : 1) * sizeof(*p->items));
	cr_assert_not_null(p->items);
	for (uint64_t i = 0; i < n; i++)
		p->items[i] = item(obj, blocks[i] * bs, bs);
	p->n = n;
	p->generation = gen;
	p->ramp = UINT32_MAX;
	cr_assert_eq(plan_link(p, bs), 0);
	return p;
}

static struct plan *plan_sequential(unsigned obj, uint64_t n, uint64_t bs,
				    uint64_t gen)
{
	uint64_t *b = malloc(n * sizeof(*b));
	for (uint64_t i = 0; i < n; i++)
		b[i] = i;
	struct plan *p = plan_of_blocks(obj, b, n, bs, gen);
	free(b);
	return p;
}

static void plan_del(struct plan *p)
{
	free(p->items);
	free(p->blk_next);
	free(p->pins);
	free(p);
}

/* Fake cache entries to pin: plan.c reads only their len (the tests
 * their block numbers). */
struct pool {
	struct cache_entry e[4096];
	unsigned used;
};

/* What prefetch_schedule does for one plan, without fetching: issue
 * and pin blocks while the window is open. Returns blocks issued. */
static unsigned fill(struct plan *p, struct pool *pool, uint64_t entries,
		     uint64_t bytes)
{
	unsigned n = 0;
	while (plan_window_open(p, entries, bytes)) {
		uint64_t b;
		const struct plan_item *it = plan_next_block(p, BS, &b);
		/* a ring: an entry is reused only long after it was unpinned */
		struct cache_entry *e = &pool->e[pool->used++ % 4096];
		*e = (struct cache_entry){.obj_id = it->obj_id, .blkno = b,
					  .len = BS};
		cr_assert_eq(plan_pin_push(p, p->issued, e), 0);
		plan_block_issued(p, BS);
		n++;
	}
	return n;
}

/* A read of obj at offset, as prefetch_consumed handles it. */
static bool consume(struct plan *p, unsigned obj, uint64_t offset,
		    uint64_t horizon)
{
	uint64_t i = plan_find(p, OBJ(obj), offset, horizon);
	if (i == UINT64_MAX)
		return false;
	plan_move_cursor(p, i);
	while (plan_pin_pop_before(p, i))
		;
	return true;
}

/* Every pin belongs to an entry in [cursor, issued), in entry order. */
static void check_pins(const struct plan *p)
{
	uint64_t bytes = 0, last = 0;
	for (uint64_t k = p->pin_head; k < p->pin_tail; k++) {
		cr_assert_geq(p->pins[k].item, p->cursor);
		cr_assert_leq(p->pins[k].item, p->issued);
		cr_assert_geq(p->pins[k].item, last);
		last = p->pins[k].item;
		bytes += p->pins[k].e->len;
	}
	cr_assert_eq(bytes, p->pinned_bytes);
}

/* ---- entries ------------------------------------------------------------ */

Test(plan_entries, checked_and_clamped)
{
	struct rc_plan_entry e = {.handle = 1, .offset = 0, .len = 10};
	cr_assert_eq(plan_entry_check(&e, 100), 0);
	e.offset = 99;
	cr_assert_eq(plan_entry_check(&e, 100), 0);
	struct plan_item it = plan_item_make(OBJ(0), 7, 100, &e);
	cr_assert_eq(it.len, 1, "len clamped to the object's end");
	cr_assert_eq(it.obj_id, 7);
	e.offset = 100;
	cr_assert_eq(plan_entry_check(&e, 100), -EINVAL);
	e.offset = UINT64_MAX;
	cr_assert_eq(plan_entry_check(&e, 100), -EINVAL);
	e = (struct rc_plan_entry){.len = 0};
	cr_assert_eq(plan_entry_check(&e, 100), -EINVAL);
	e = (struct rc_plan_entry){.len = 1, .reserved = 1};
	cr_assert_eq(plan_entry_check(&e, 100), -EINVAL);
	e = (struct rc_plan_entry){.offset = 5, .len = UINT64_MAX};
	cr_assert_eq(plan_entry_check(&e, 100), 0);
	it = plan_item_make(OBJ(0), 7, 100, &e);
	cr_assert_eq(it.offset + it.len, 100, "no overflow past the end");
}

Test(plan_entries, blocks_an_entry_covers)
{
	struct plan_item it = item(0, 0, 1);
	cr_assert_eq(plan_item_blocks(&it, BS), 1);
	it = item(0, BS - 1, 2); /* straddles a boundary */
	cr_assert_eq(plan_item_blocks(&it, BS), 2);
	it = item(0, 3 * BS, BS);
	cr_assert_eq(plan_item_blocks(&it, BS), 1);
	it = item(0, 3 * BS + 1, 3 * BS);
	cr_assert_eq(plan_item_blocks(&it, BS), 4);
}

Test(plan_entries, link_chains_each_blocks_uses)
{
	uint64_t order[] = {0, 1, 0, 2, 1, 0};
	struct plan *p = plan_of_blocks(0, order, 6, BS, 1);
	cr_assert_eq(p->blocks, 6);
	cr_assert_eq(plan_next_use_of(p, 0, 0, BS), 2);
	cr_assert_eq(plan_next_use_of(p, 2, 0, BS), 5);
	cr_assert_eq(plan_next_use_of(p, 5, 0, BS), UINT64_MAX);
	cr_assert_eq(plan_next_use_of(p, 1, 1, BS), 4);
	cr_assert_eq(plan_next_use_of(p, 3, 2, BS), UINT64_MAX);
	/* a block the entry does not cover */
	cr_assert_eq(plan_next_use_of(p, 0, 1, BS), UINT64_MAX);
	cr_assert_eq(plan_blocks_ahead(p), 6);
	p->cursor = 4;
	cr_assert_eq(plan_blocks_ahead(p), 2);
	p->cursor = 6;
	cr_assert_eq(plan_blocks_ahead(p), 0);
	plan_del(p);
}

/* ---- the window --------------------------------------------------------- */

Test(plan_window, advances_with_consumption)
{
	const uint64_t n = 100, w = 8;
	struct plan *p = plan_sequential(0, n, BS, 1);
	static struct pool pool;
	cr_assert_eq(fill(p, &pool, w, UINT64_MAX), w);
	cr_assert_eq(p->issued, w);
	cr_assert_eq(plan_pin_count(p), w);
	cr_assert_eq(fill(p, &pool, w, UINT64_MAX), 0, "the window is full");
	for (uint64_t i = 0; i < n; i++) {
		cr_assert(consume(p, 0, i * BS + 17, w + 16));
		cr_assert_eq(p->cursor, i);
		fill(p, &pool, w, UINT64_MAX);
		uint64_t want = i + w < n ? i + w : n;
		cr_assert_eq(p->issued, want, "read %lu: issued %lu",
			     (unsigned long)i, (unsigned long)p->issued);
		cr_assert_leq(p->issued - p->cursor, w);
		cr_assert_eq(plan_pin_count(p), want - i,
			     "pins before the cursor were dropped");
		check_pins(p);
	}
	cr_assert_eq(p->issued, n);
	cr_assert_eq(pool.used, n, "each block issued once");
	plan_del(p);
}

/* A wide window over a long plan: the pin FIFO wraps its storage many
 * times (compacting, growing) and keeps entry order and byte counts. */
Test(plan_window, pin_fifo_survives_wrapping)
{
	const uint64_t n = 3000, w = 200;
	struct plan *p = plan_sequential(0, n, BS, 1);
	static struct pool pool;
	for (uint64_t i = 0; i < n; i += 3) {
		cr_assert(consume(p, 0, i * BS, w + 16));
		fill(p, &pool, w, UINT64_MAX);
		check_pins(p);
		cr_assert_eq(plan_pin_count(p), p->issued - i);
		cr_assert_eq(p->pins[p->pin_head].e->blkno, i,
			     "the oldest pin is the cursor's block");
		cr_assert_leq(p->pin_cap, 512, "compacted, not grown without end");
	}
	plan_del(p);
}

Test(plan_window, never_more_than_its_bytes_ahead)
{
	/* entries of 3 blocks, a window of 5 blocks' bytes */
	struct plan *p = calloc(1, sizeof(*p));
	p->items = malloc(40 * sizeof(*p->items));
	for (unsigned i = 0; i < 40; i++)
		p->items[i] = item(0, (uint64_t)i * 3 * BS, 3 * BS);
	p->n = 40;
	p->ramp = UINT32_MAX;
	cr_assert_eq(plan_link(p, BS), 0);
	cr_assert_eq(p->blocks, 120);
	static struct pool pool;
	const uint64_t bytes = 5 * BS;
	for (unsigned i = 0; i < 40; i++) {
		cr_assert(consume(p, 0, (uint64_t)i * 3 * BS, 64));
		fill(p, &pool, 1000, bytes);
		check_pins(p);
		/* it stops once the bytes are reached: one block past at most */
		cr_assert_lt(p->pinned_bytes, bytes + BS);
		if (p->issued < p->n)
			cr_assert_geq(p->pinned_bytes, bytes);
	}
	plan_del(p);
}

Test(plan_window, reads_off_plan_or_past_the_horizon_move_nothing)
{
	struct plan *p = plan_sequential(0, 50, BS, 1);
	static struct pool pool;
	fill(p, &pool, 4, UINT64_MAX);
	cr_assert_not(consume(p, 1, 0, 20), "another object");
	cr_assert_not(consume(p, 0, 50 * BS, 20), "past the plan's extents");
	cr_assert_not(consume(p, 0, 30 * BS, 20), "beyond the horizon");
	cr_assert_eq(p->cursor, 0);
	cr_assert_eq(p->issued, 4);
	/* a jump within the horizon skips ahead and drops the skipped pins */
	cr_assert(consume(p, 0, 10 * BS, 20));
	cr_assert_eq(p->cursor, 10);
	cr_assert_eq(p->issued, 10, "issuing resumes at the cursor");
	cr_assert_eq(plan_pin_count(p), 0);
	fill(p, &pool, 4, UINT64_MAX);
	cr_assert_eq(p->issued, 14);
	/* reading an entry behind the cursor does not move it back */
	cr_assert_not(consume(p, 0, 9 * BS, 20));
	cr_assert_eq(p->cursor, 10);
	plan_del(p);
}

Test(plan_window, ramp_limits_gets_in_flight)
{
	struct plan *p = plan_sequential(0, 50, BS, 1);
	p->ramp = 2;
	static struct pool pool;
	unsigned issued = 0;
	while (plan_window_open(p, 16, UINT64_MAX)) {
		uint64_t b;
		plan_next_block(p, BS, &b);
		struct cache_entry *e = &pool.e[pool.used++];
		e->len = BS;
		plan_pin_push(p, p->issued, e);
		plan_block_issued(p, BS);
		p->inflight++;
		issued++;
	}
	cr_assert_eq(issued, 2, "slow start: two GETs first");
	plan_fetch_done(p, 4);
	cr_assert_eq(p->inflight, 1);
	cr_assert_eq(p->ramp, 3);
	plan_fetch_done(p, 4);
	plan_fetch_done(p, 4);
	cr_assert_eq(p->ramp, 4, "never past prefetch_inflight");
	cr_assert_eq(p->inflight, 0, "never below zero");
	plan_del(p);
}

Test(plan_window, bytes_share_between_plans)
{
	const uint64_t mem = 1024 * MiB;
	cr_assert_eq(plan_window_bytes(64 * MiB, mem, 1), 64 * MiB);
	cr_assert_eq(plan_window_bytes(UINT64_MAX, mem, 1), mem / 4);
	cr_assert_eq(plan_window_bytes(UINT64_MAX, mem, 0), mem / 4);
	cr_assert_eq(plan_window_bytes(UINT64_MAX, mem, 4), mem / 8);
	cr_assert_eq(plan_window_bytes(200 * MiB, mem, 4), 128 * MiB);
	cr_assert_eq(plan_window_bytes(0, mem, 4), 0);
}

Test(plan_window, shed_gives_back_the_far_end)
{
	struct plan *p = plan_sequential(0, 50, BS, 1);
	static struct pool pool;
	fill(p, &pool, 8, UINT64_MAX);
	struct cache_entry *last = plan_pin_pop_last(p);
	cr_assert_not_null(last);
	cr_assert_eq(last->blkno, 7, "the farthest block goes");
	cr_assert_eq(p->issued, 7, "and is issued again later");
	cr_assert_eq(plan_pin_pop_last(p)->blkno, 6);
	cr_assert_eq(p->issued, 6);
	check_pins(p);
	cr_assert_eq(fill(p, &pool, 8, UINT64_MAX), 2);
	cr_assert_eq(p->issued, 8);
	plan_del(p);
}

/* ---- the next-use index ------------------------------------------------- */

static int64_t next_use(struct plan_index *ix, unsigned obj, uint64_t b,
			uint64_t bs)
{
	return plan_index_next_use(ix, OBJ_ID(obj), b, bs);
}

Test(plan_index, distance_from_the_cursor)
{
	uint64_t order[] = {0, 1, 2, 3, 0, 2};
	struct plan *p = plan_of_blocks(0, order, 6, BS, 1);
	struct plan_index ix = {0};
	cr_assert_eq(plan_index_build(&ix, &p, 1, BS, NULL, NULL), 1);
	cr_assert_eq(next_use(&ix, 0, 0, BS), 0);
	cr_assert_eq(next_use(&ix, 0, 1, BS), 1);
	cr_assert_eq(next_use(&ix, 0, 2, BS), 2);
	cr_assert_eq(next_use(&ix, 0, 3, BS), 3);
	cr_assert_eq(next_use(&ix, 0, 4, BS), INT64_MAX, "never planned");
	cr_assert_eq(next_use(&ix, 1, 0, BS), INT64_MAX, "another object");
	cr_assert_neq(plan_index_hint(&ix, OBJ_ID(0), 3), 0);
	cr_assert_eq(plan_index_hint(&ix, OBJ_ID(0), 4), 0);
	/* reads move the cursor; the index follows the chains, unrebuilt */
	p->cursor = 4;
	cr_assert_eq(next_use(&ix, 0, 0, BS), 0);
	cr_assert_eq(next_use(&ix, 0, 2, BS), 1);
	cr_assert_eq(next_use(&ix, 0, 1, BS), INT64_MAX, "used up");
	cr_assert_eq(next_use(&ix, 0, 3, BS), INT64_MAX);
	p->cursor = 6;
	cr_assert_eq(next_use(&ix, 0, 0, BS), INT64_MAX);
	plan_index_free(&ix);
	plan_del(p);
}

Test(plan_index, empty_plans_build_nothing)
{
	struct plan *p = plan_sequential(0, 4, BS, 1);
	p->cursor = 4;
	struct plan *plans[] = {NULL, p};
	struct plan_index ix = {0};
	cr_assert_eq(plan_index_build(&ix, plans, 2, BS, NULL, NULL), 0);
	cr_assert_null(ix.keys);
	cr_assert_eq(next_use(&ix, 0, 0, BS), INT64_MAX);
	plan_index_free(&ix);
	plan_del(p);
}

static unsigned each_calls;
static void count_each(void *ctx, uint64_t obj_id, uint64_t b)
{
	(void)b;
	cr_assert_eq(ctx, &each_calls);
	cr_assert_eq(obj_id, OBJ_ID(2));
	each_calls++;
}

Test(plan_index, build_visits_every_block_ahead)
{
	struct plan *p = calloc(1, sizeof(*p));
	p->items = malloc(3 * sizeof(*p->items));
	p->items[0] = item(2, 0, 2 * BS);      /* blocks 0, 1 */
	p->items[1] = item(2, BS + 5, 3 * BS); /* blocks 1..4 */
	p->items[2] = item(2, 9 * BS, 1);      /* block 9 */
	p->n = 3;
	p->generation = 9;
	cr_assert_eq(plan_link(p, BS), 0);
	cr_assert_eq(p->blocks, 7);
	struct plan_index ix = {0};
	each_calls = 0;
	plan_index_build(&ix, &p, 1, BS, count_each, &each_calls);
	cr_assert_eq(each_calls, 7);
	cr_assert_eq(next_use(&ix, 2, 1, BS), 0);
	cr_assert_eq(next_use(&ix, 2, 4, BS), 1);
	cr_assert_eq(next_use(&ix, 2, 9, BS), 2);
	p->cursor = 1; /* block 1's use in entry 0 passed: entry 1's is next */
	cr_assert_eq(next_use(&ix, 2, 1, BS), 0);
	cr_assert_eq(next_use(&ix, 2, 0, BS), INT64_MAX);
	plan_index_free(&ix);
	plan_del(p);
}

/* Two GPUs' queues: a block's next use is the nearest over both plans,
 * each measured from its own cursor. */
Test(plan_index, multiple_gpu_queues)
{
	uint64_t a_order[] = {5, 6, 7, 8, 9, 10, 11, 0};  /* block 0 late */
	uint64_t b_order[] = {1, 0, 2, 3};                /* block 0 soon */
	struct plan *a = plan_of_blocks(0, a_order, 8, BS, 1);
	struct plan *b = plan_of_blocks(0, b_order, 4, BS, 2);
	struct plan *plans[] = {a, b};
	struct plan_index ix = {0};
	cr_assert_eq(plan_index_build(&ix, plans, 2, BS, NULL, NULL), 1);
	cr_assert_eq(next_use(&ix, 0, 0, BS), 1, "queue b needs it next");
	cr_assert_eq(next_use(&ix, 0, 5, BS), 0);
	cr_assert_eq(next_use(&ix, 0, 3, BS), 3);
	b->cursor = 2; /* queue b read past it: queue a's use remains */
	cr_assert_eq(next_use(&ix, 0, 0, BS), 7);
	a->cursor = 4;
	cr_assert_eq(next_use(&ix, 0, 0, BS), 3);
	a->cursor = 8;
	cr_assert_eq(next_use(&ix, 0, 0, BS), INT64_MAX);
	/* a queue whose plan went (not in the rebuilt list) plans nothing */
	b->cursor = 0;
	cr_assert_eq(plan_index_build(&ix, &a, 1, BS, NULL, NULL), 0);
	a->cursor = 0;
	cr_assert_eq(plan_index_build(&ix, &a, 1, BS, NULL, NULL), 1);
	cr_assert_eq(next_use(&ix, 0, 1, BS), INT64_MAX);
	cr_assert_eq(next_use(&ix, 0, 0, BS), 7);
	plan_index_free(&ix);
	plan_del(a);
	plan_del(b);
}

/* The next epoch, appended while this one runs: the entries before the
 * cursor go, indexes stay absolute, the window slides on into the new
 * entries and each block's next use is known across the boundary. */
Test(plan_index, appended_next_epoch)
{
	uint64_t epoch1[] = {0, 1, 2, 3};
	uint64_t epoch2[] = {2, 3, 1, 0};
	struct plan *p = plan_of_blocks(0, epoch1, 4, BS, 1);
	static struct pool pool;
	fill(p, &pool, 3, UINT64_MAX);
	cr_assert(consume(p, 0, 2 * BS, 16));
	cr_assert_eq(p->cursor, 2);
	struct plan_item more[4];
	for (unsigned i = 0; i < 4; i++)
		more[i] = item(0, epoch2[i] * BS, BS);
	struct plan_item *dropped;
	uint64_t n_dropped;
	cr_assert_eq(plan_append_items(p, more, 4, BS, &dropped, &n_dropped), 0);
	cr_assert_eq(n_dropped, 2);
	cr_assert_eq(dropped[0].offset, 0);
	cr_assert_eq(dropped[1].offset, BS);
	free(dropped);
	cr_assert_eq(p->base, 2);
	cr_assert_eq(p->n, 8);
	cr_assert_eq(plan_item_at(p, 4)->offset, 2 * BS, "epoch 2 starts at 4");
	cr_assert_eq(p->blocks, 6);
	cr_assert_eq(plan_blocks_ahead(p), 6);
	check_pins(p);

	struct plan_index ix = {0};
	cr_assert_eq(plan_index_build(&ix, &p, 1, BS, NULL, NULL), 1);
	cr_assert_eq(next_use(&ix, 0, 2, BS), 0);
	cr_assert_eq(next_use(&ix, 0, 3, BS), 1);
	cr_assert_eq(next_use(&ix, 0, 1, BS), 4, "epoch 2's use, entry 6");
	cr_assert_eq(next_use(&ix, 0, 0, BS), 5, "epoch 2's use, entry 7");
	/* epoch 1 ends: blocks 2 and 3 are next used in epoch 2, found by
	 * following the chains across the boundary (the index unrebuilt) */
	cr_assert(consume(p, 0, 3 * BS, 16));
	cr_assert(consume(p, 0, 2 * BS, 16), "epoch 2's first entry");
	cr_assert_eq(p->cursor, 4);
	cr_assert_eq(next_use(&ix, 0, 2, BS), 0);
	cr_assert_eq(next_use(&ix, 0, 3, BS), 1);
	cr_assert_eq(next_use(&ix, 0, 1, BS), 2);
	cr_assert_eq(next_use(&ix, 0, 0, BS), 3);
	/* the window slid on into epoch 2 */
	fill(p, &pool, 3, UINT64_MAX);
	cr_assert_eq(p->issued, 7);
	check_pins(p);
	plan_index_free(&ix);
	plan_del(p);
}

Test(plan_index, append_nothing_keeps_the_plan)
{
	struct plan *p = plan_sequential(0, 4, BS, 1);
	p->cursor = 1;
	struct plan_item *dropped;
	uint64_t n_dropped;
	cr_assert_eq(plan_append_items(p, NULL, 0, BS, &dropped, &n_dropped), 0);
	free(dropped);
	cr_assert_eq(n_dropped, 1);
	cr_assert_eq(p->n, 4);
	cr_assert_eq(p->base, 1);
	cr_assert_eq(plan_item_at(p, 3)->offset, 3 * BS);
	plan_del(p);
}

/* ---- eviction by next use, through the real cache ---------------------- */

struct cache_fixture {
	struct arena_budget budget;
	struct arena arena;
	struct cache cache;
	struct cache_arena *ca;
	struct plan_index ix;
};

static int64_t fixture_next_use(void *ctx, struct cache_entry *e)
{
	struct cache_fixture *f = ctx;
	return plan_index_next_use(&f->ix, e->obj_id, e->blkno, MiB);
}

/* 4 superblocks of 4 MiB with 1 MiB blocks: 16 slots. */
static void cache_up(struct cache_fixture *f)
{
	memset(f, 0, sizeof(*f));
	cr_assert_eq(arena_budget_init(&f->budget, 16ull * MiB, MiB), 0);
	cr_assert_eq(arena_init(&f->arena, &f->budget, "test-plan", false,
				false), 0);
	cr_assert_eq(cache_init(&f->cache, &f->budget), 0);
	f->ca = cache_add_arena(&f->cache, &f->arena);
	cr_assert_not_null(f->ca);
	f->cache.next_use = fixture_next_use;
	f->cache.owner_ctx = f;
}

static void cache_down(struct cache_fixture *f)
{
	plan_index_free(&f->ix);
	cache_destroy(&f->cache);
	arena_destroy(&f->arena);
}

static struct cache_entry *insert(struct cache_fixture *f, uint64_t obj_id,
				  uint64_t b)
{
	int err = 0;
	struct cache_entry *e = cache_insert(&f->cache, f->ca, obj_id, b, MiB,
					     &err);
	cr_assert_not_null(e, "insert: %s", strerror(-err));
	return e;
}

static void cache_full_of_object0(struct cache_fixture *f)
{
	for (uint64_t b = 0; b < 16; b++)
		insert(f, OBJ_ID(0), b)->state = ENTRY_VALID;
}

/* Inserting new blocks (kept FETCHING, so never evicted themselves) must
 * evict the cached blocks in order of their next use, farthest first. */
static void check_eviction_order(struct cache_fixture *f,
				 const uint64_t *want, unsigned n)
{
	struct cache_entry *fresh[16];
	for (unsigned k = 0; k < n; k++) {
		fresh[k] = insert(f, OBJ_ID(9), k);
		for (unsigned j = 0; j <= k; j++)
			cr_assert_null(cache_lookup(&f->cache, OBJ_ID(0), want[j],
						    false),
				       "eviction %u: block %lu still cached", k,
				       (unsigned long)want[j]);
		for (unsigned j = k + 1; j < n; j++)
			cr_assert_not_null(cache_lookup(&f->cache, OBJ_ID(0),
							want[j], false),
					   "eviction %u took block %lu too early",
					   k, (unsigned long)want[j]);
	}
	for (unsigned k = 0; k < n; k++)
		fresh[k]->state = ENTRY_VALID;
}

Test(plan_eviction, farthest_next_use_goes_first)
{
	struct cache_fixture f;
	cache_up(&f);
	cache_full_of_object0(&f);
	/* planned in the order 15, 14, ..., 4: block 4 is used last; blocks
	 * 0-3 are not planned at all and go before any planned block */
	uint64_t order[12];
	for (unsigned i = 0; i < 12; i++)
		order[i] = 15 - i;
	struct plan *p = plan_of_blocks(0, order, 12, MiB, 1);
	cr_assert_eq(plan_index_build(&f.ix, &p, 1, MiB, NULL, NULL), 1);
	f.cache.plans_active = true;
	for (unsigned i = 0; i < 4; i++) {
		insert(&f, OBJ_ID(8), i);
		unsigned gone = 0;
		for (uint64_t b = 0; b < 4; b++)
			gone += !cache_lookup(&f.cache, OBJ_ID(0), b, false);
		cr_assert_eq(gone, i + 1, "unplanned blocks go first");
	}
	uint64_t want[] = {4, 5, 6, 7, 8, 9};
	check_eviction_order(&f, want, 6);
	/* blocks 10..15, used soonest, are all still there */
	for (uint64_t b = 10; b < 16; b++)
		cr_assert_not_null(cache_lookup(&f.cache, OBJ_ID(0), b, false));
	for (uint64_t b = 0; b < 4; b++)
		cache_lookup(&f.cache, OBJ_ID(8), b, false)->state = ENTRY_VALID;
	cache_down(&f);
	plan_del(p);
}

/* As reads move the cursor, the order follows: a block just read and
 * used again much later becomes the first to go. */
Test(plan_eviction, order_follows_the_cursor)
{
	struct cache_fixture f;
	cache_up(&f);
	cache_full_of_object0(&f);
	/* 0..15, then 0 and 1 again at the very end */
	uint64_t order[18];
	for (unsigned i = 0; i < 16; i++)
		order[i] = i;
	order[16] = 0;
	order[17] = 1;
	struct plan *p = plan_of_blocks(0, order, 18, MiB, 1);
	cr_assert_eq(plan_index_build(&f.ix, &p, 1, MiB, NULL, NULL), 1);
	f.cache.plans_active = true;
	p->cursor = 2; /* blocks 0 and 1 read: next used at 16 and 17 */
	uint64_t want[] = {1, 0, 15, 14};
	check_eviction_order(&f, want, 4);
	cache_down(&f);
	plan_del(p);
}

/* Two queues: a block one queue needs late but another needs soon is
 * kept; the one both need latest goes. */
Test(plan_eviction, nearest_use_over_queues)
{
	struct cache_fixture f;
	cache_up(&f);
	cache_full_of_object0(&f);
	uint64_t a_order[16], b_order[16];
	for (unsigned i = 0; i < 16; i++) {
		a_order[i] = 15 - i; /* a needs block 0 last */
		b_order[i] = i;      /* b needs block 0 first */
	}
	struct plan *a = plan_of_blocks(0, a_order, 16, MiB, 1);
	struct plan *b = plan_of_blocks(0, b_order, 16, MiB, 2);
	struct plan *plans[] = {a, b};
	cr_assert_eq(plan_index_build(&f.ix, plans, 2, MiB, NULL, NULL), 1);
	f.cache.plans_active = true;
	/* nearest use of block k: min(15 - k, k); farthest: 7 and 8 (7) */
	struct cache_entry *fresh = insert(&f, OBJ_ID(9), 0);
	unsigned gone = 0;
	uint64_t which = 99;
	for (uint64_t k = 0; k < 16; k++)
		if (!cache_lookup(&f.cache, OBJ_ID(0), k, false)) {
			gone++;
			which = k;
		}
	cr_assert_eq(gone, 1);
	cr_assert(which == 7 || which == 8, "evicted block %lu",
		  (unsigned long)which);
	cr_assert_not_null(cache_lookup(&f.cache, OBJ_ID(0), 0, false),
			   "block 0: queue b's next read");
	cr_assert_not_null(cache_lookup(&f.cache, OBJ_ID(0), 15, false),
			   "block 15: queue a's next read");
	fresh->state = ENTRY_VALID;
	cache_down(&f);
	plan_del(a);
	plan_del(b);
}
