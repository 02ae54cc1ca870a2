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

#include "counters.h"

struct daemon;
struct shard;
struct wobject;

/* Copies what other threads render from the shard's plain state (journal,
 * tier) into its struct metrics now, then every METRICS_PUBLISH_MS on the
 * shard's reactor (a scrape needs no fresher figures). Call before the
 * shard's thread runs. */
void metrics_publish_start(struct shard *sh);
/* Prometheus text of every shard's statistics into buf (NUL-terminated,
 * truncated at len); returns the bytes written. Any thread. */
size_t metrics_render(const struct daemon *d, char *buf, size_t len);

/* A READ or READ_INTO of a session that named gpu (-1: none) completed
 * wait_ns after its submission was taken from the ring. */
void metrics_read_wait(struct metrics *m, int gpu, uint64_t wait_ns);

#endif
