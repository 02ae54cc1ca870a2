/* metrics_table.h - owns the list of the daemon's per-shard counters: each
 * is declared once here, and struct metrics (metrics.h), the sum across
 * shards and the Prometheus text (metrics.c) are generated from it.
 *
 * Use: X(field, type, name, help): `field` is the member of struct metrics
 * the engine increments (sh->m.field++), `type` counter or gauge (a gauge
 * here goes up and down on its shard's thread, or is copied from a
 * layer's own state by metrics_publish_start's timer), `name` the
 * Prometheus name (counters end in _total), `help` its HELP line. Adding
 * a counter is one line here and the increment where it happens. */
#ifndef RC_METRICS_TABLE_H
#define RC_METRICS_TABLE_H

#define RC_COUNTERS(X)                                                        \
	X(sessions_total, counter, "ringcache_sessions_total",                 \
	  "Sessions attached since start.")                                    \
	X(sessions_refused, counter, "ringcache_sessions_refused_total",       \
	  "Attaches refused (max_sessions, max_sessions_per_uid).")            \
	X(ops, counter, "ringcache_ops_total",                                 \
	  "Submission entries processed.")                                     \
	X(bad_entries, counter, "ringcache_bad_entries_total",                 \
	  "Malformed submission entries.")                                     \
	X(hits, counter, "ringcache_cache_hits_total",                         \
	  "Block lookups served from the cache.")                              \
	X(misses, counter, "ringcache_cache_misses_total",                     \
	  "Block lookups that waited for S3.")                                 \
	X(s3_get, counter, "ringcache_s3_get_total",                           \
	  "S3 GET requests (ranged block fetches).")                           \
	X(s3_head, counter, "ringcache_s3_head_total", "S3 HEAD requests.")    \
	X(s3_list, counter, "ringcache_s3_list_total",                         \
	  "S3 ListObjectsV2 requests.")                                        \
	X(s3_errors, counter, "ringcache_s3_errors_total",                     \
	  "Failed S3 requests (before retry).")                                \
	X(s3_retries, counter, "ringcache_s3_retries_total",                   \
	  "S3 requests retried.")                                              \
	X(s3_slowdowns, counter, "ringcache_s3_slowdowns_total",               \
	  "S3 replies asking to slow down (503, SlowDown).")                   \
	X(bytes_from_s3, counter, "ringcache_s3_bytes_total",                  \
	  "Bytes fetched from S3.")                                            \
	X(stale, counter, "ringcache_objects_stale_total",                     \
	  "Objects found changed or gone in S3.")                              \
	X(meta_bytes, gauge, "ringcache_metadata_bytes",                       \
	  "Memory of the object metadata table (entries and keys).")          \
	X(meta_evicted, counter, "ringcache_metadata_evicted_total",           \
	  "Metadata entries dropped: over metadata_memory, or unused past "    \
	  "metadata_ttl.")                                                     \
	X(meta_negative_hits, counter,                                         \
	  "ringcache_metadata_negative_hits_total",                            \
	  "OPENs answered ENOENT from a remembered 404 (no HEAD).")            \
	X(bytes_served_zero_copy, counter,                                     \
	  "ringcache_read_bytes_zero_copy_total",                              \
	  "Bytes served by zero-copy READ.")                                   \
	X(bytes_copied, counter, "ringcache_read_bytes_copied_total",          \
	  "Bytes copied by READ_INTO.")                                        \
	X(prefetch_bytes, counter, "ringcache_prefetch_bytes_total",           \
	  "Bytes of prefetch GETs started for plans.")                         \
	X(prefetch_cancelled, counter, "ringcache_prefetch_cancelled_total",   \
	  "Prefetch GETs cancelled by a replaced plan.")                       \
	X(prefetch_shed, counter, "ringcache_prefetch_shed_total",             \
	  "Times prefetch windows gave memory back to reads.")                 \
	X(wb_written_bytes, counter,                                           \
	  "ringcache_writeback_written_bytes_total",                           \
	  "Checkpoint bytes written by clients.")                              \
	X(wb_committed, counter, "ringcache_writeback_committed_total",        \
	  "Checkpoint objects committed.")                                     \
	X(wb_uploaded, counter, "ringcache_writeback_uploaded_total",          \
	  "Checkpoint objects in S3.")                                         \
	X(wb_uploaded_bytes, counter,                                          \
	  "ringcache_writeback_uploaded_bytes_total",                          \
	  "Checkpoint bytes in S3.")                                           \
	X(wb_failed, counter, "ringcache_writeback_failed_total",              \
	  "Checkpoint uploads that failed after retries.")                     \
	X(wb_rejected, counter, "ringcache_writeback_rejected_total",          \
	  "Checkpoint uploads S3 refused for good (4xx, overwrite = false): "  \
	  "dropped from the journal.")                                         \
	X(wb_replayed, counter, "ringcache_writeback_replayed_total",          \
	  "Acknowledged objects uploaded again after a restart.")              \
	X(wb_superseded, counter, "ringcache_writeback_superseded_total",      \
	  "Objects whose failed upload is not tried again, at a restart or "   \
	  "in a while: another object took their key later.")                  \
	X(wb_key_waits, counter, "ringcache_writeback_key_waits_total",        \
	  "Uploads and RENAME copies that waited for another object's "        \
	  "upload, copy or delete of the same S3 key to end.")                 \
	X(wb_write_waits, counter, "ringcache_writeback_journal_waits_total",  \
	  "Writes that waited for the journal's disk.")                        \
	X(wb_relogs, counter, "ringcache_writeback_relogs_total",              \
	  "COMMITs that journaled their bytes again: a rewind dropped them "   \
	  "while the object was open.")                                        \
	X(wb_backlog_objects, gauge, "ringcache_writeback_backlog_objects",    \
	  "Committed checkpoint objects not yet in S3 (waiting for or in "     \
	  "their upload).")                                                    \
	X(wb_backlog_bytes, gauge, "ringcache_writeback_backlog_bytes",        \
	  "Bytes of the committed checkpoint objects not yet in S3.")          \
	X(wb_failed_objects, gauge, "ringcache_writeback_failed_objects",     \
	  "Committed checkpoint objects S3 does not have: their upload "      \
	  "failed and no later save of their key has landed (a SYNC of all "  \
	  "or of a prefix by their uid reports them).")                       \
	X(wb_staging_spare, gauge, "ringcache_writeback_staging_spare_bytes", \
	  "Staging memory faulted in and free for the next checkpoint "       \
	  "(staging_warm at start, then what saves gave back).")              \
	X(wb_journal_used, gauge, "ringcache_writeback_journal_used_bytes",  \
	  "Write-back journal bytes from its first live record to its tail.") \
	X(wb_journal_limit, gauge, "ringcache_writeback_journal_bytes",        \
	  "Write-back journal size limit.")                                    \
	X(tier_used, gauge, "ringcache_tier_bytes_used",                       \
	  "Tier slots in use, in bytes.")                                      \
	X(tier_capacity, gauge, "ringcache_tier_capacity_bytes",               \
	  "Tier capacity in bytes.")                                           \
	X(tier_hits, counter, "ringcache_tier_hits_total",                     \
	  "Block misses served by the NVMe tier.")                             \
	X(tier_read_errors, counter, "ringcache_tier_read_errors_total",       \
	  "Tier reads that failed their CRC32C or I/O (refetched from S3).")   \
	X(tier_admitted, counter, "ringcache_tier_admitted_total",             \
	  "Evicted blocks written to the tier.")                               \
	X(tier_skipped, counter, "ringcache_tier_skipped_total",               \
	  "Evicted blocks not written (tier busy or failed).")

#endif
