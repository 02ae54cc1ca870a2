/* metrics.h - the daemon's statistics: per-shard counters (declared once
 * in metrics_table.h), read-wait histograms per GPU, hits per dataset,
 * the write-back backlog, and their Prometheus text.
 *
 * Ownership: a shard's struct metrics is written only by its own thread
 * and read by any thread rendering (a STATS message on another shard, the
 * HTTP endpoint's thread), hence every field is atomic: an update is one
 * atomic add, a render a set of relaxed loads (a scrape may see one
 * counter a moment behind another; each value is whole).
 * Use: sh->m.FIELD++ for a table counter; the metrics_* calls below for
 * the rest, on the shard's own thread. */
#ifndef RC_METRICS_H
#define RC_METRICS_H

#include <stdbool.h>
#include <stddef.h>
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

struct daemon;
struct shard;
struct wobject;

/* Copies what other threads render from the shard's plain state (journal,
 * tier) into its struct metrics: once per reactor turn. */
void metrics_publish(struct shard *sh);
/* Prometheus text of every shard's statistics into buf (NUL-terminated,
 * truncated at len); returns the bytes written. Any thread. */
size_t metrics_render(const struct daemon *d, char *buf, size_t len);

/* A READ or READ_INTO of a session that named gpu (-1: none) completed
 * wait_ns after its submission was taken from the ring. */
void metrics_read_wait(struct metrics *m, int gpu, uint64_t wait_ns);
/* A block lookup of dataset id: served from memory (hit) or not. */
void metrics_dataset_lookup(struct metrics *m, uint32_t ds_id, bool hit);
/* A committed object enters the write-back backlog (commit, replay), and
 * leaves it when its upload ends (in S3 or failed); each once. */
void metrics_wb_enter(struct shard *sh, struct wobject *w);
void metrics_wb_leave(struct shard *sh, struct wobject *w);

#endif
