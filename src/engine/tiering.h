/* tiering.h - a shard's NVMe tier glue: the cache's evictions go to the
 * tier (tier.h), fetches ask it before S3.
 *
 * Ownership: the tier (sh->tier) and its staging buffers belong to the
 * shard; tiering_open makes them (logs and runs memory-only on failure),
 * the shard's teardown closes them.
 * Use: on the shard's thread only. */
#ifndef RC_TIERING_H
#define RC_TIERING_H

#include "tier.h"

struct shard;
struct object;
struct cache_entry;

/* Opens [daemon] tier_path on the shard's ring, hooks cache evictions
 * and starts the 30 s index sync. */
void tiering_open(struct shard *sh);
/* Names e the way the tier keys it (dataset URI, key, ETag, block). */
void tiering_name_entry(struct shard *sh, const struct object *o,
			struct cache_entry *e);
/* Starts reading e's block from the tier into e: 0 (done(ctx, res) comes
 * later), or a negated errno (no tier, not there: ask S3). */
int tiering_read(struct shard *sh, const struct object *o,
		 struct cache_entry *e, tier_done_fn done, void *ctx);
/* Waits (bounded) until the tier has no I/O in flight (shutdown). */
void tiering_drain(struct shard *sh);
/* Shutdown: the valid blocks in memory go to the tier too (for up to
 * 3 s), then its I/O is waited for, so a restart comes back warm. */
void tiering_save_resident(struct shard *sh);

#endif
