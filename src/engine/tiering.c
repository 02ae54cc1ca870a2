/* tiering.c - owns the glue between a shard's cache and its NVMe tier
 * (tier.h): opening it on the shard's ring, naming blocks the way the tier
 * keys them, copying evicted blocks out to it, reading a block back for a
 * fetch, the 30 s index sync, and waiting for its I/O at shutdown. */
#include "tiering.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "daemon.h"
#include "log.h"
#include "vec.h"

void tiering_name_entry(struct shard *sh, const struct object *o,
			struct cache_entry *e)
{
	if (!sh->tier || !tier_enabled(sh->tier))
		return;
	struct tier_key k;
	tier_key_make(&k, o->ds->cfg->uri, o->key, o->etag, e->blkno);
	memcpy(e->ident, &k, sizeof(e->ident));
}

int tiering_read(struct shard *sh, const struct object *o,
		 struct cache_entry *e, tier_done_fn done, void *ctx)
{
	if (!sh->tier || !tier_enabled(sh->tier))
		return -ENODEV;
	/* The tier reads whole pages: only into a slot that holds them. */
	if (tier_io_len(e->len) > cache_entry_room(e))
		return -ENODEV;
	struct tier_key k;
	tiering_name_entry(sh, o, e);
	memcpy(&k, e->ident, sizeof(k));
	return tier_read(sh->tier, &k, cache_entry_data(e), e->len, done, ctx);
}

#define TIER_SYNC_NS 30000000000ull

static void tier_tick(struct reactor_timer *t)
{
	struct shard *sh = rc_container_of(t, struct shard, tier_tick);
	if (!sh->tier)
		return;
	reactor_timer_after(sh->reactor, t, TIER_SYNC_NS);
	/* On the shard's ring: a disk failure disables the tier (logged by
	 * the tier); -EBUSY (one still in flight) waits for the next tick. */
	tier_sync_index_start(sh->tier);
}

static void tier_tick_start(struct shard *sh)
{
	reactor_timer_init(&sh->tier_tick, tier_tick);
	reactor_timer_after(sh->reactor, &sh->tier_tick, TIER_SYNC_NS);
}

static void tier_write_done(void *ctx, int res)
{
	struct tier_staging *st = ctx;
	st->busy = false;
	if (res >= 0)
		st->sh->m.tier_admitted++;
}

/* The cache evicts a valid block: copy it out (the slot is reused at
 * once) and let the tier write it in the background. */
static void tier_admit(void *ctx, const struct cache_entry *e)
{
	struct shard *sh = ctx;
	if (!tier_enabled(sh->tier) || !(e->ident[0] | e->ident[1]))
		return;
	struct tier_staging *st = NULL;
	for (unsigned i = 0; i < TIER_STAGING && !st; i++)
		if (!sh->staging[i].busy)
			st = &sh->staging[i];
	if (!st) {
		sh->m.tier_skipped++; /* the tier is behind: drop, not wait */
		return;
	}
	struct tier_key k;
	memcpy(&k, e->ident, sizeof(e->ident));
	memcpy(st->mem, cache_entry_data(e), e->len);
	int r = tier_write(sh->tier, &k, st->mem, e->len, tier_write_done, st);
	if (r == 0)
		st->busy = true;
	else if (r != -EEXIST)
		sh->m.tier_skipped++;
}

/* Shards split tier_size evenly: shard i has the i-th region of the one
 * file or device, each with its own header, index and slots. */
void tiering_open(struct shard *sh)
{
	const struct rc_config *c = &sh->d->cfg;
	uint64_t region = c->tier_bytes / sh->d->n_shards &
			  ~(uint64_t)(TIER_ALIGN - 1);
	struct tier_config tc = {.path = c->tier_path,
				 .offset = region * sh->id,
				 .size_bytes = region,
				 .block_bytes = c->block_bytes};
	char err[256];
	/* No fixed buffers: arenas are sparse and give pages back, which
	 * registered (pinned) buffers would not follow. */
	sh->tier = tier_open(&tc, reactor_ring(sh->reactor), NULL, 0, err,
			     sizeof(err));
	if (!sh->tier) {
		log_error("tier %s: shard %u: %s; running from memory only",
			  c->tier_path, sh->id, err);
		return;
	}
	for (unsigned i = 0; i < TIER_STAGING; i++) {
		sh->staging[i].sh = sh;
		if (posix_memalign((void **)&sh->staging[i].mem, TIER_ALIGN,
				   tier_io_len(c->block_bytes))) {
			log_error("tier: out of memory; running from memory only");
			tier_close(sh->tier);
			sh->tier = NULL;
			return;
		}
	}
	sh->cache.on_evict = tier_admit;
	sh->cache.evict_ctx = sh;
	tier_tick_start(sh);
	struct tier_stats ts;
	tier_get_stats(sh->tier, &ts);
	log_info("tier %s: shard %u: %llu slots of %u KiB from offset %llu, "
		 "%llu blocks already there%s", c->tier_path, sh->id,
		 (unsigned long long)ts.n_slots,
		 ts.block_bytes >> 10, (unsigned long long)tc.offset,
		 (unsigned long long)ts.n_used,
		 ts.direct ? "" : " (buffered: no O_DIRECT here)");
}

/* The blocks still in memory at shutdown: without this only what memory
 * had evicted comes back after a restart. Bounded (a large memory at a
 * slow device would hold the restart past the service manager's stop
 * timeout); what is left is fetched from S3 again. */
#define TIER_SAVE_NS 3000000000ull

static bool staging_free(const struct shard *sh)
{
	for (unsigned i = 0; i < TIER_STAGING; i++)
		if (!sh->staging[i].busy)
			return true;
	return false;
}

void tiering_save_resident(struct shard *sh)
{
	if (!sh->tier || !tier_enabled(sh->tier))
		return;
	struct cache *c = &sh->cache;
	/* Pinned first: the reactor turns below may complete fetches whose
	 * insertions evict (and free) entries a walk of the table holds. */
	struct cache_entry **v = NULL;
	uint32_t n = 0, cap = 0;
	for (uint64_t b = 0; b <= c->mask; b++) {
		for (struct cache_entry *e = c->buckets[b]; e; e = e->hnext) {
			if (e->state != ENTRY_VALID || e->orphan ||
			    !(e->ident[0] | e->ident[1]))
				continue;
			if (RC_GROW(v, cap, n + 1) < 0)
				break;
			cache_pin(c, e);
			v[n++] = e;
		}
	}
	uint64_t until = rc_now_ns() + TIER_SAVE_NS;
	uint64_t before = sh->m.tier_admitted;
	uint32_t i = 0;
	for (; i < n; i++) {
		while (!staging_free(sh) && rc_now_ns() < until)
			reactor_turn(sh->reactor, 1000000);
		if (rc_now_ns() >= until)
			break;
		if (!v[i]->orphan)
			tier_admit(sh, v[i]); /* copied out; -EEXIST: there */
		cache_unpin(c, v[i]);
	}
	for (uint32_t k = i; k < n; k++)
		cache_unpin(c, v[k]);
	free(v);
	tiering_drain(sh);
	log_info("tier: shard %u: %llu of %u blocks in memory written at "
		 "shutdown%s", sh->id,
		 (unsigned long long)(sh->m.tier_admitted - before), n,
		 i < n ? " (stopped after 3 s; the rest comes from S3 again)"
		       : "");
}

/* Bounded by time, not by turns: with a timer overdue (nobody runs the
 * timers while draining) a turn does not wait, and a count of turns
 * passed in microseconds with the tier's writes still in flight. */
void tiering_drain(struct shard *sh)
{
	uint64_t until = rc_now_ns() + 10000000000ull;
	while (sh->tier && tier_inflight(sh->tier) && rc_now_ns() < until)
		reactor_turn(sh->reactor, 10000000);
}
