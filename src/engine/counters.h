/* counters.h - owns struct metrics, a shard's statistics as the engine
 * writes them: the counters declared once in metrics_table.h, read-wait
 * histograms per GPU, hits per dataset, the write-back backlog. Their sum
 * and Prometheus text are the server's (server/metrics.h).
 *
 * Ownership: a shard's struct metrics is written only by its own thread
 * and read by any thread rendering, hence every field is atomic: an
 * update is one atomic add, a render a set of relaxed loads.
 * Use: sh->m.FIELD++ for a table counter; the helpers below for the rest,
 * on the shard's own thread. */
#ifndef RC_COUNTERS_H
#define RC_COUNTERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "metrics_table.h"
#include "ringcache.h"
#include "topology.h"

typedef _Atomic uint64_t counter_t;

/* Upper bounds of the read-wait histogram's buckets, in nanoseconds
 * (100 us to 10 s; +Inf is implicit). */
#define RC_WAIT_BUCKETS 16
/* Slot of the sessions that named no GPU (or one past the topology's). */
#define RC_WAIT_NO_GPU TOPOLOGY_MAX_GPUS

struct read_wait {
	counter_t bucket[RC_WAIT_BUCKETS + 1]; /* not cumulative; last: +Inf */
	counter_t sum_ns;
};

struct metrics {
#define RC_COUNTER_FIELD(field, type, name, help) counter_t field;
	RC_COUNTERS(RC_COUNTER_FIELD)
#undef RC_COUNTER_FIELD
	/* Time requests waited for their prefix's request budget: rendered
	 * in seconds, so outside the integer table. */
	counter_t s3_throttled_ns;
	/* Committed time of the oldest object in the backlog; 0: none. */
	counter_t wb_oldest_ns;
	counter_t ds_hits[RC_MAX_DATASETS], ds_misses[RC_MAX_DATASETS];
	struct read_wait wait[TOPOLOGY_MAX_GPUS + 1];
};

/* A block lookup of dataset id: served from memory (hit) or not. */
static inline void metrics_dataset_lookup(struct metrics *m, uint32_t ds_id,
					  bool hit)
{
	if (ds_id < RC_MAX_DATASETS)
		atomic_fetch_add_explicit(hit ? &m->ds_hits[ds_id]
					      : &m->ds_misses[ds_id],
					  1, memory_order_relaxed);
}

#endif
