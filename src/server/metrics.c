/* metrics.c - owns the daemon's counters as Prometheus text (the STATS
 * message, `ringcache stats`). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "lifecycle.h"
#include "prefetch.h"
#include "journal.h"

struct out {
	char *buf;
	size_t len, used;
};

static void emit(struct out *o, const char *name, const char *type,
		 const char *help, uint64_t v)
{
	if (o->used >= o->len)
		return;
	int n = snprintf(o->buf + o->used, o->len - o->used,
			 "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help,
			 name, type, name, (unsigned long long)v);
	if (n > 0)
		o->used += (size_t)n < o->len - o->used ? (size_t)n
							 : o->len - o->used - 1;
}

/* Per-queue prefetch progress, labelled by GPU and queue id. */
static void emit_queues(struct out *o, const struct daemon *d)
{
	bool first = true;
	for (uint32_t i = 0; i < d->n_shards; i++) {
		pthread_mutex_t *lock = (pthread_mutex_t *)&d->shards[i].lock;
		pthread_mutex_lock(lock);
		for (const struct pqueue *q = d->shards[i].pqueues; q;
		     q = q->next) {
			if (!q->plan || o->used >= o->len)
				continue;
			int n = snprintf(o->buf + o->used, o->len - o->used,
				"%sringcache_queue_prefetch_bytes{shard=\"%u\",queue=\"%u\",gpu=\"%d\"} %llu\n",
				first ? "# HELP ringcache_queue_prefetch_bytes Bytes prefetched for the queue's current plan.\n"
					"# TYPE ringcache_queue_prefetch_bytes gauge\n" : "",
				i, q->id, q->gpu,
				(unsigned long long)q->plan->prefetched_bytes);
			if (n > 0 && (size_t)n < o->len - o->used)
				o->used += (size_t)n;
			first = false;
		}
		pthread_mutex_unlock(lock);
	}
}

/* Every refusal of a limit (quota.h), labelled by its reason. */
static void emit_refused(struct out *o, const struct daemon *d)
{
	for (unsigned r = 0; r < REFUSED__COUNT && o->used < o->len; r++) {
		uint64_t v = atomic_load_explicit(
			(_Atomic uint64_t *)&d->quota.refused[r],
			memory_order_relaxed);
		int n = snprintf(o->buf + o->used, o->len - o->used,
			"%sringcache_refused_total{reason=\"%s\"} %llu\n",
			r ? "" : "# HELP ringcache_refused_total Requests refused by a limit per uid or per session, or accepts that ran out of file descriptors.\n"
				 "# TYPE ringcache_refused_total counter\n",
			refusal_name(r), (unsigned long long)v);
		if (n > 0 && (size_t)n < o->len - o->used)
			o->used += (size_t)n;
	}
}

/* Whether the running config is the file's: changed on disk since the
 * last load, the last reload refused, keys that wait for a restart. */
static void emit_config(struct out *o, const struct daemon *d)
{
	emit(o, "ringcache_config_file_changed", "gauge",
	     "1 if the config file changed since it was last loaded (send SIGHUP).",
	     daemon_config_file_changed(d));
	emit(o, "ringcache_config_reload_refused", "gauge",
	     "1 if the last reload was refused (the log says why).",
	     d->reload_refused);
	const char *k = d->restart_keys;
	bool first = true;
	while (*k && o->used < o->len) {
		size_t n = strcspn(k, " ");
		int w = snprintf(o->buf + o->used, o->len - o->used,
			"%sringcache_config_restart_pending{key=\"%.*s\"} 1\n",
			first ? "# HELP ringcache_config_restart_pending A key changed in the file that applies only at a restart.\n"
				"# TYPE ringcache_config_restart_pending gauge\n" : "",
			(int)n, k);
		if (w > 0 && (size_t)w < o->len - o->used)
			o->used += (size_t)w;
		first = false;
		k += n + strspn(k + n, " ");
	}
}

size_t metrics_render(const struct daemon *d, char *buf, size_t len)
{
	struct out o = {buf, len, 0};
	struct metrics m = {0};
	uint64_t sessions = 0, handles = 0, leases = 0, used = 0, total = 0;
	uint64_t entries = 0, evictions = 0, inflight = 0, pinned = 0;
	uint64_t tier_used = 0, tier_total = 0, staged = 0;
	uint64_t journal_used = 0, journal_size = 0;
	if (len)
		buf[0] = 0;
	for (uint32_t i = 0; i < d->n_shards; i++) {
		const struct shard *sh = &d->shards[i];
		const struct metrics *s = &sh->m;
		m.hits += s->hits;
		m.misses += s->misses;
		m.s3_get += s->s3_get;
		m.s3_head += s->s3_head;
		m.s3_list += s->s3_list;
		m.s3_errors += s->s3_errors;
		m.s3_retries += s->s3_retries;
		m.bytes_from_s3 += s->bytes_from_s3;
		m.bytes_served_zero_copy += s->bytes_served_zero_copy;
		m.bytes_copied += s->bytes_copied;
		m.ops += s->ops;
		m.bad_entries += s->bad_entries;
		m.sessions_total += s->sessions_total;
		m.sessions_refused += s->sessions_refused;
		m.stale += s->stale;
		m.prefetch_bytes += s->prefetch_bytes;
		m.prefetch_cancelled += s->prefetch_cancelled;
		m.prefetch_shed += s->prefetch_shed;
		pinned += sh->pf_pinned_bytes;
		m.wb_committed += s->wb_committed;
		m.wb_uploaded += s->wb_uploaded;
		m.wb_uploaded_bytes += s->wb_uploaded_bytes;
		m.wb_failed += s->wb_failed;
		m.wb_rejected += s->wb_rejected;
		if (sh->journal) {
			struct journal_stats js;
			journal_get_stats(sh->journal, &js);
			journal_used += js.used_bytes;
			journal_size += js.size_limit;
		}
		m.wb_written_bytes += s->wb_written_bytes;
		m.wb_replayed += s->wb_replayed;
		m.wb_write_waits += s->wb_write_waits;
		staged += sh->wb_staged;
		m.tier_hits += s->tier_hits;
		m.tier_read_errors += s->tier_read_errors;
		m.tier_admitted += s->tier_admitted;
		m.tier_skipped += s->tier_skipped;
		if (sh->tier) {
			uint64_t u, t;
			tier_bytes_used(sh->tier, &u, &t);
			tier_used += u;
			tier_total += t;
		}
		sessions += sh->n_sessions;
		pthread_mutex_lock((pthread_mutex_t *)&sh->lock);
		for (const struct session *se = sh->sessions; se; se = se->next)
			handles += se->n_handles;
		pthread_mutex_unlock((pthread_mutex_t *)&sh->lock);
		leases += sh->cache.stats.leases;
		entries += sh->cache.stats.entries;
		evictions += sh->cache.stats.evictions;
		used += sh->budget.sb_used * sh->budget.sb_bytes;
		total += sh->budget.sb_total * sh->budget.sb_bytes;
		inflight += curlio_inflight(sh->curl);
	}
	emit(&o, "ringcache_sessions_active", "gauge", "Attached client sessions.", sessions);
	emit(&o, "ringcache_sessions_total", "counter", "Sessions attached since start.", m.sessions_total);
	emit(&o, "ringcache_sessions_refused_total", "counter", "Attaches refused (max_sessions, max_sessions_per_uid).", m.sessions_refused);
	emit_refused(&o, d);
	emit(&o, "ringcache_handles_open", "gauge", "Open object handles.", handles);
	emit(&o, "ringcache_leases_active", "gauge", "Blocks leased to clients (not evictable).", leases);
	emit(&o, "ringcache_ops_total", "counter", "Submission entries processed.", m.ops);
	emit(&o, "ringcache_bad_entries_total", "counter", "Malformed submission entries.", m.bad_entries);
	emit(&o, "ringcache_cache_hits_total", "counter", "Block lookups served from the cache.", m.hits);
	emit(&o, "ringcache_cache_misses_total", "counter", "Block lookups that waited for S3.", m.misses);
	emit(&o, "ringcache_cache_entries", "gauge", "Blocks in the cache.", entries);
	emit(&o, "ringcache_cache_evictions_total", "counter", "Blocks evicted.", evictions);
	emit(&o, "ringcache_arena_bytes_used", "gauge", "Arena bytes in superblocks in use.", used);
	emit(&o, "ringcache_arena_bytes_total", "gauge", "Arena memory budget.", total);
	emit(&o, "ringcache_s3_get_total", "counter", "S3 GET requests (ranged block fetches).", m.s3_get);
	emit(&o, "ringcache_s3_head_total", "counter", "S3 HEAD requests.", m.s3_head);
	emit(&o, "ringcache_s3_list_total", "counter", "S3 ListObjectsV2 requests.", m.s3_list);
	emit(&o, "ringcache_s3_errors_total", "counter", "Failed S3 requests (before retry).", m.s3_errors);
	emit(&o, "ringcache_s3_retries_total", "counter", "S3 requests retried.", m.s3_retries);
	emit(&o, "ringcache_s3_inflight", "gauge", "S3 requests in flight.", inflight);
	emit(&o, "ringcache_s3_bytes_total", "counter", "Bytes fetched from S3.", m.bytes_from_s3);
	emit(&o, "ringcache_objects_stale_total", "counter", "Objects found changed or gone in S3.", m.stale);
	emit(&o, "ringcache_read_bytes_zero_copy_total", "counter", "Bytes served by zero-copy READ.", m.bytes_served_zero_copy);
	emit(&o, "ringcache_read_bytes_copied_total", "counter", "Bytes copied by READ_INTO.", m.bytes_copied);
	emit(&o, "ringcache_prefetch_bytes_total", "counter", "Bytes of prefetch GETs started for plans.", m.prefetch_bytes);
	emit(&o, "ringcache_prefetch_cancelled_total", "counter", "Prefetch GETs cancelled by a replaced plan.", m.prefetch_cancelled);
	emit(&o, "ringcache_prefetch_shed_total", "counter", "Times prefetch windows gave memory back to reads.", m.prefetch_shed);
	emit(&o, "ringcache_prefetch_pinned_bytes", "gauge", "Prefetched, unread bytes protected from eviction.", pinned);
	emit_queues(&o, d);
	emit(&o, "ringcache_writeback_written_bytes_total", "counter", "Checkpoint bytes written by clients.", m.wb_written_bytes);
	emit(&o, "ringcache_writeback_committed_total", "counter", "Checkpoint objects committed.", m.wb_committed);
	emit(&o, "ringcache_writeback_uploaded_total", "counter", "Checkpoint objects in S3.", m.wb_uploaded);
	emit(&o, "ringcache_writeback_uploaded_bytes_total", "counter", "Checkpoint bytes in S3.", m.wb_uploaded_bytes);
	emit(&o, "ringcache_writeback_failed_total", "counter", "Checkpoint uploads that failed after retries.", m.wb_failed);
	emit(&o, "ringcache_writeback_rejected_total", "counter", "Checkpoint uploads S3 refused for good (4xx, overwrite = false): dropped from the journal.", m.wb_rejected);
	emit(&o, "ringcache_writeback_journal_used_bytes", "gauge", "Write-back journal bytes from its first live record to its tail.", journal_used);
	emit(&o, "ringcache_writeback_journal_bytes", "gauge", "Write-back journal size limit.", journal_size);
	emit(&o, "ringcache_writeback_replayed_total", "counter", "Acknowledged objects uploaded again after a restart.", m.wb_replayed);
	emit(&o, "ringcache_writeback_journal_waits_total", "counter", "Writes that waited for the journal's disk.", m.wb_write_waits);
	emit(&o, "ringcache_writeback_staged_bytes", "gauge", "Checkpoint bytes held in staging memory.", staged);
	emit(&o, "ringcache_tier_hits_total", "counter", "Block misses served by the NVMe tier.", m.tier_hits);
	emit(&o, "ringcache_tier_read_errors_total", "counter", "Tier reads that failed their CRC32C or I/O (refetched from S3).", m.tier_read_errors);
	emit(&o, "ringcache_tier_admitted_total", "counter", "Evicted blocks written to the tier.", m.tier_admitted);
	emit(&o, "ringcache_tier_skipped_total", "counter", "Evicted blocks not written (tier busy or failed).", m.tier_skipped);
	emit(&o, "ringcache_tier_bytes_used", "gauge", "Tier slots in use, in bytes.", tier_used);
	emit(&o, "ringcache_tier_bytes_total", "gauge", "Tier capacity in bytes.", tier_total);
	emit(&o, "ringcache_uptime_seconds", "gauge", "Seconds since start.", (now_ns() - d->started_ns) / 1000000000ull);
	emit_config(&o, d);
	return o.used;
}
