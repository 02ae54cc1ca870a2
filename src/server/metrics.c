/* metrics.c - owns the daemon's statistics as Prometheus text (the STATS
 * message, `ringcache stats`, the HTTP endpoint of metrics_http.c): the
 * counters of metrics_table.h summed across shards, the gauges read from
 * each layer's state, read-wait histograms per GPU, hits per dataset,
 * the write-back backlog and whether the S3 endpoint answers. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "daemon.h"
#include "prefetch.h"
#include "session_state.h"
#include "writeback.h"
#include "journal.h"
#include "metrics.h"
#include "version.h"

struct out {
	char *buf;
	size_t len, used;
};

/* Appends to o; a line that does not fit is dropped whole, and nothing
 * after it is written (a truncated render stays parseable). */
__attribute__((format(printf, 2, 3)))
static void put(struct out *o, const char *fmt, ...)
{
	if (o->used + 1 >= o->len)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(o->buf + o->used, o->len - o->used, fmt, ap);
	va_end(ap);
	if (n > 0 && (size_t)n < o->len - o->used) {
		o->used += (size_t)n;
	} else {
		o->buf[o->used] = 0;
		o->used = o->len; /* full: stop */
	}
}

static void head(struct out *o, const char *name, const char *type,
		 const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void emit(struct out *o, const char *name, const char *type,
		 const char *help, uint64_t v)
{
	head(o, name, type, help);
	put(o, "%s %llu\n", name, (unsigned long long)v);
}

static uint64_t load(const counter_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* ---- the counter table, summed across shards ---------------------------- */

static void emit_table(struct out *o, const struct daemon *d)
{
#define RC_COUNTER_EMIT(field, type, name, help)                               \
	{                                                                      \
		uint64_t v = 0;                                                \
		for (uint32_t i = 0; i < d->n_shards; i++)                     \
			v += load(&d->shards[i].m.field);                      \
		emit(o, name, #type, help, v);                                 \
	}
	RC_COUNTERS(RC_COUNTER_EMIT)
#undef RC_COUNTER_EMIT
}

static void emit_throttled(struct out *o, const struct daemon *d)
{
	const char *name = "ringcache_s3_throttled_seconds_total";
	uint64_t ns = 0;
	for (uint32_t i = 0; i < d->n_shards; i++)
		ns += load(&d->shards[i].m.s3_throttled_ns);
	head(o, name, "counter",
	     "Time S3 requests waited for their prefix's request budget "
	     "(s3_get_rate, s3_put_rate), summed over requests.");
	put(o, "%s %.6f\n", name, (double)ns / 1e9);
}

/* ---- gauges read from each layer's own state ---------------------------- */

static uint64_t sh_handles(const struct shard *sh)
{
	uint64_t n = 0;
	pthread_mutex_lock((pthread_mutex_t *)&sh->lock);
	const struct rc_list *pos;
	rc_list_for_each(pos, &sh->sessions)
		n += session_of(pos)->n_handles;
	pthread_mutex_unlock((pthread_mutex_t *)&sh->lock);
	return n;
}

/* G(name, type, help, value of one shard `sh`): summed across shards. */
#define RC_GAUGES(G)                                                           \
	G("ringcache_sessions_active", gauge, "Attached client sessions.",     \
	  sh->n_sessions)                                                      \
	G("ringcache_handles_open", gauge, "Open object handles.",             \
	  sh_handles(sh))                                                      \
	G("ringcache_leases_active", gauge,                                    \
	  "Blocks leased to clients (not evictable).", sh->cache.stats.leases) \
	G("ringcache_cache_entries", gauge, "Blocks in the cache.",            \
	  sh->cache.stats.entries)                                             \
	G("ringcache_cache_evictions_total", counter, "Blocks evicted.",       \
	  sh->cache.stats.evictions)                                           \
	G("ringcache_cache_bytes", gauge, "Bytes of the blocks in the cache.", \
	  sh->cache.stats.bytes_cached)                                        \
	G("ringcache_arena_bytes_used", gauge,                                 \
	  "Arena memory charged for them (pages holding slots).",              \
	  sh->budget.bytes_used)                                               \
	G("ringcache_arena_capacity_bytes", gauge, "Arena memory budget.",    \
	  sh->budget.bytes_total)                                              \
	G("ringcache_arena_prefault_bytes_total", counter,                     \
	  "Arena bytes queued for population ahead of use (arena_prefault).",  \
	  sh->budget.prefault_queued)                                          \
	G("ringcache_arena_prefault_used_bytes_total", counter,                \
	  "Arena bytes charged to a slot that a populate had faulted in.",     \
	  sh->budget.prefault_used)                                            \
	G("ringcache_s3_inflight", gauge, "S3 requests in flight.",            \
	  curlio_inflight(sh->curl))                                           \
	G("ringcache_prefetch_pinned_bytes", gauge,                            \
	  "Prefetched, unread bytes protected from eviction.",                 \
	  sh->pf_pinned_bytes)                                                 \
	G("ringcache_writeback_staged_bytes", gauge,                           \
	  "Checkpoint bytes held in staging memory.", sh->wb_staged)

static void emit_gauges(struct out *o, const struct daemon *d)
{
#define RC_GAUGE_EMIT(name, type, help, expr)                                  \
	{                                                                      \
		uint64_t v = 0;                                                \
		for (uint32_t i = 0; i < d->n_shards; i++) {                   \
			const struct shard *sh = &d->shards[i];                \
			v += (uint64_t)(expr);                                 \
		}                                                              \
		emit(o, name, #type, help, v);                                 \
	}
	RC_GAUGES(RC_GAUGE_EMIT)
#undef RC_GAUGE_EMIT
}

/* ---- labelled families --------------------------------------------------- */

/* Per-queue prefetch progress, labelled by the machine's GPU (the one its
 * clients' CUDA ordinal maps to), its queue id and the NUMA node serving
 * it. */
static void emit_queues(struct out *o, const struct daemon *d)
{
	head(o, "ringcache_queue_prefetch_bytes", "gauge",
	     "Bytes prefetched for the queue's current plan.");
	for (uint32_t i = 0; i < d->n_shards; i++) {
		pthread_mutex_t *lock = (pthread_mutex_t *)&d->shards[i].lock;
		pthread_mutex_lock(lock);
		const struct rc_list *pos;
		rc_list_for_each(pos, &d->shards[i].pqueues) {
			const struct pqueue *q = pqueue_of(pos);
			if (q->plan)
				put(o, "ringcache_queue_prefetch_bytes{shard=\"%u\",queue=\"%u\",gpu=\"%d\",node=\"%d\"} %llu\n",
				    i, q->id, q->gpu,
				    topology_shard_node(&d->topo, (int)i),
				    (unsigned long long)q->plan->prefetched_bytes);
		}
		pthread_mutex_unlock(lock);
	}
}

/* Every refusal of a limit (quota.h), labelled by its reason. */
static void emit_refused(struct out *o, const struct daemon *d)
{
	head(o, "ringcache_refused_total", "counter",
	     "Requests refused by a limit per uid or per session, or accepts that ran out of file descriptors.");
	for (unsigned r = 0; r < REFUSED__COUNT; r++)
		put(o, "ringcache_refused_total{reason=\"%s\"} %llu\n",
		    refusal_name(r),
		    (unsigned long long)atomic_load_explicit(
			    (_Atomic uint64_t *)&d->quota.refused[r],
			    memory_order_relaxed));
}

static const uint64_t wait_le_ns[RC_WAIT_BUCKETS] = {
	100000,    250000,    500000,    1000000,   2500000,    5000000,
	10000000,  25000000,  50000000,  100000000, 250000000,  500000000,
	1000000000, 2500000000, 5000000000, 10000000000,
};

/* The data stall each GPU saw: READ/READ_INTO wait, summed over shards. */
static void emit_read_wait(struct out *o, const struct daemon *d)
{
	static const char name[] = "ringcache_read_wait_seconds";
	head(o, name, "histogram",
	     "Time a READ or READ_INTO waited from its submission to its completion (the data stall), by the GPU its session named (none: no GPU).");
	for (unsigned g = 0; g <= RC_WAIT_NO_GPU; g++) {
		uint64_t b[RC_WAIT_BUCKETS + 1] = {0}, sum = 0, n = 0;
		for (uint32_t i = 0; i < d->n_shards; i++) {
			const struct read_wait *w = &d->shards[i].m.wait[g];
			for (unsigned k = 0; k <= RC_WAIT_BUCKETS; k++)
				b[k] += load(&w->bucket[k]);
			sum += load(&w->sum_ns);
		}
		for (unsigned k = 0; k <= RC_WAIT_BUCKETS; k++)
			n += b[k];
		if (!n)
			continue;
		char gpu[16];
		if (g == RC_WAIT_NO_GPU)
			snprintf(gpu, sizeof(gpu), "none");
		else
			snprintf(gpu, sizeof(gpu), "%u", g);
		uint64_t cum = 0;
		for (unsigned k = 0; k < RC_WAIT_BUCKETS; k++) {
			cum += b[k];
			put(o, "%s_bucket{gpu=\"%s\",le=\"%g\"} %llu\n", name,
			    gpu, (double)wait_le_ns[k] / 1e9,
			    (unsigned long long)cum);
		}
		put(o, "%s_bucket{gpu=\"%s\",le=\"+Inf\"} %llu\n", name, gpu,
		    (unsigned long long)n);
		put(o, "%s_sum{gpu=\"%s\"} %.9f\n", name, gpu,
		    (double)sum / 1e9);
		put(o, "%s_count{gpu=\"%s\"} %llu\n", name, gpu,
		    (unsigned long long)n);
	}
}

/* Hits, misses and their ratio for each dataset the config holds now. */
static void emit_datasets(struct out *o, const struct daemon *d)
{
	uint32_t n_ds = atomic_load_explicit(
		(_Atomic uint32_t *)&d->n_datasets, memory_order_acquire);
	uint64_t hits[RC_MAX_DATASETS] = {0}, misses[RC_MAX_DATASETS] = {0};
	for (uint32_t i = 0; i < d->n_shards; i++)
		for (uint32_t k = 0; k < n_ds && k < RC_MAX_DATASETS; k++) {
			hits[k] += load(&d->shards[i].m.ds_hits[k]);
			misses[k] += load(&d->shards[i].m.ds_misses[k]);
		}
	static const char *const fam[3][3] = {
		{"ringcache_dataset_cache_hits_total", "counter",
		 "Block lookups of the dataset served from the cache."},
		{"ringcache_dataset_cache_misses_total", "counter",
		 "Block lookups of the dataset that waited for S3 or the tier."},
		{"ringcache_dataset_hit_ratio", "gauge",
		 "Hits over lookups of the dataset since start (NaN before its first read)."},
	};
	for (unsigned f = 0; f < 3; f++) {
		head(o, fam[f][0], fam[f][1], fam[f][2]);
		for (uint32_t k = 0; k < n_ds && k < RC_MAX_DATASETS; k++) {
			const struct dataset *ds = d->datasets[k];
			if (!ds || !ds->enabled)
				continue;
			uint64_t all = hits[k] + misses[k];
			if (f < 2)
				put(o, "%s{dataset=\"%s\"} %llu\n", fam[f][0],
				    ds->cfg->name, (unsigned long long)(
				    f ? misses[k] : hits[k]));
			else if (all)
				put(o, "%s{dataset=\"%s\"} %.6g\n", fam[f][0],
				    ds->cfg->name,
				    (double)hits[k] / (double)all);
			else /* the exposition format spells it NaN */
				put(o, "%s{dataset=\"%s\"} NaN\n", fam[f][0],
				    ds->cfg->name);
		}
	}
}

/* Age of the oldest committed object not yet in S3, 0 with none. */
static void emit_wb_oldest(struct out *o, const struct daemon *d)
{
	uint64_t oldest = 0;
	for (uint32_t i = 0; i < d->n_shards; i++) {
		uint64_t t = load(&d->shards[i].m.wb_oldest_ns);
		if (t && (!oldest || t < oldest))
			oldest = t;
	}
	uint64_t now = rc_now_ns();
	head(o, "ringcache_writeback_oldest_unuploaded_seconds", "gauge",
	     "Seconds since the oldest committed checkpoint object not yet in S3 was committed (0: none).");
	put(o, "ringcache_writeback_oldest_unuploaded_seconds %.3f\n",
	    oldest && now > oldest ? (double)(now - oldest) / 1e9 : 0.0);
}

/* A label value as Prometheus reads it: backslash, quote and newline
 * escaped; other control bytes (an S3 or curl message) as spaces. */
static const char *label_esc(const char *s, char *buf, size_t len)
{
	size_t n = 0;
	for (; *s && n + 3 < len; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '\\' || ch == '"' || ch == '\n') {
			buf[n++] = '\\';
			buf[n++] = ch == '\n' ? 'n' : (char)ch;
		} else {
			buf[n++] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
		}
	}
	buf[n] = 0;
	return buf;
}

/* Whether the S3 endpoint answers (s3_reach.h): since when it does not,
 * and why, for alerts and `ringcache status`. */
static void emit_s3_reach(struct out *o, const struct daemon *d)
{
	if (!d->s3)
		return;
	struct s3_reach r;
	char ep[512], err[600];
	s3_reach_get(d->s3, &r);
	label_esc(s3_client_config(d->s3)->endpoint, ep, sizeof(ep));
	head(o, "ringcache_s3_reachable", "gauge",
	     "0 while the S3 endpoint does not answer (consecutive requests "
	     "refused, reset, timed out or unresolved): reads wait for it "
	     "within retry_budget; 1 otherwise.");
	put(o, "ringcache_s3_reachable{endpoint=\"%s\"} %d\n", ep,
	    !r.unreachable);
	head(o, "ringcache_s3_unreachable_since_seconds", "gauge",
	     "Unix time of the first failed request of the current S3 "
	     "outage, labelled with the latest error (no sample while "
	     "reachable).");
	if (r.unreachable)
		put(o, "ringcache_s3_unreachable_since_seconds{endpoint=\"%s\","
		    "error=\"%s\"} %.3f\n", ep,
		    label_esc(r.error, err, sizeof(err)),
		    (double)r.since_unix_ms / 1e3);
	emit(o, "ringcache_s3_outages_total", "counter",
	     "Times the S3 endpoint became unreachable since start.",
	     r.outages);
}

/* Whether the running config is the file's: changed on disk since the
 * last load, the last reload refused, keys that wait for a restart. */
static void emit_config(struct out *o, const struct daemon *d)
{
	struct config_status cs;
	bool changed;
	daemon_config_status(d, &cs, &changed);
	/* `ringcache mount` lets the kernel trust names and attributes
	 * this long: the daemon asks S3 again no sooner. */
	emit(o, "ringcache_metadata_ttl_seconds", "gauge",
	     "metadata_ttl: seconds an object's size and ETag are trusted.",
	     daemon_metadata_ttl_ns(d) / 1000000000ull);
	emit(o, "ringcache_config_file_changed", "gauge",
	     "1 if the config file changed since it was last loaded (send SIGHUP).",
	     changed);
	emit(o, "ringcache_config_reload_refused", "gauge",
	     "1 if the last reload was refused (the log says why).",
	     cs.reload_refused);
	head(o, "ringcache_config_reload_refused_reason", "gauge",
	     "The first reason the last reload was refused, as logged (only while refused).");
	if (cs.reload_refused) {
		char why[2 * sizeof(cs.refused_why)];
		put(o, "ringcache_config_reload_refused_reason{reason=\"%s\"} 1\n",
		    label_esc(cs.refused_why, why, sizeof(why)));
	}
	head(o, "ringcache_config_restart_pending", "gauge",
	     "A key changed in the file that applies only at a restart.");
	const char *k = cs.restart_keys;
	while (*k) {
		size_t n = strcspn(k, " ");
		put(o, "ringcache_config_restart_pending{key=\"%.*s\"} 1\n",
		    (int)n, k);
		k += n + strspn(k + n, " ");
	}
}

/* What runs and since when: the build_info idiom (value 1, the facts in
 * labels) lets a fleet's versions be counted; the start time as Unix
 * seconds shows a restart as a step (uptime restarts from 0 unseen
 * between two scrapes). */
static void emit_build(struct out *o, const struct daemon *d)
{
	head(o, "ringcache_build_info", "gauge",
	     "The daemon's version and the commit it was built from (value 1).");
	put(o, "ringcache_build_info{version=\"%s\",commit=\"%s\"} 1\n",
	    rc_build_version, rc_build_commit);
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	double up = (double)(rc_now_ns() - d->started_ns) / 1e9;
	head(o, "ringcache_start_time_seconds", "gauge",
	     "When the daemon started, in seconds since the Unix epoch.");
	put(o, "ringcache_start_time_seconds %.3f\n",
	    (double)wall.tv_sec + (double)wall.tv_nsec / 1e9 - up);
}

#define HP_MEASURE_NS 1000000000ull

/* Measures the arenas in /proc/self/smaps: a walk of the page tables of
 * every mapping, so at most once a second (d->hp_seen) whoever renders. */
static void measure_arenas(const struct daemon *d)
{
	uint32_t n = atomic_load_explicit(
		(_Atomic uint32_t *)&d->n_datasets, memory_order_acquire);
	struct hp_range *r = calloc((size_t)n * d->n_shards + 1, sizeof(*r));
	uint64_t res = 0, huge = 0;
	size_t k = 0;
	for (uint32_t i = 0; r && i < n; i++)
		for (uint32_t s = 0; s < d->n_shards; s++)
			r[k++] = (struct hp_range){d->datasets[i]->arena[s].base,
						   d->datasets[i]->arena[s].size};
	if (r && k)
		hp_measure(r, k, &res, &huge);
	free(r);
	struct daemon *w = (struct daemon *)d; /* a cache, not the state */
	atomic_store_explicit(&w->hp_seen.resident, res, memory_order_relaxed);
	atomic_store_explicit(&w->hp_seen.huge, huge, memory_order_relaxed);
	atomic_store_explicit(&w->hp_seen.at_ns, rc_now_ns(),
			      memory_order_relaxed);
}

/* Huge-page bytes against arena bytes (at most a second old), and the
 * start-up verdict with its reason. */
static void emit_hugepages(struct out *o, const struct daemon *d)
{
	uint64_t at = atomic_load_explicit(&d->hp_seen.at_ns,
					   memory_order_relaxed);
	if (!at || rc_now_ns() - at >= HP_MEASURE_NS)
		measure_arenas(d);
	uint64_t res = atomic_load_explicit(&d->hp_seen.resident,
					    memory_order_relaxed);
	uint64_t huge = atomic_load_explicit(&d->hp_seen.huge,
					     memory_order_relaxed);
	emit(o, "ringcache_arena_resident_bytes", "gauge",
	     "Arena memory mapped by the daemon (Rss of the arena mappings).",
	     res);
	emit(o, "ringcache_arena_hugepage_bytes", "gauge",
	     "Arena memory mapped by 2 MiB pages (ShmemPmdMapped).", huge);
	char why[768], esc[2 * sizeof(why)];
	head(o, "ringcache_arena_hugepages", "gauge",
	     "1 if the start-up probe got 2 MiB pages for the arenas; the "
	     "reason says why not and how to fix it.");
	put(o, "ringcache_arena_hugepages{reason=\"%s\"} %d\n",
	    label_esc(hp_describe(&d->hugepages, why, sizeof(why)), esc,
		      sizeof(esc)),
	    d->hugepages.verdict == HP_HUGE);
}

size_t metrics_render(const struct daemon *d, char *buf, size_t len)
{
	struct out o = {buf, len, 0};
	if (len)
		buf[0] = 0;
	emit_table(&o, d);
	emit_throttled(&o, d);
	emit_gauges(&o, d);
	emit_hugepages(&o, d);
	emit_refused(&o, d);
	emit_queues(&o, d);
	emit_read_wait(&o, d);
	emit_datasets(&o, d);
	emit_wb_oldest(&o, d);
	emit(&o, "ringcache_uptime_seconds", "gauge", "Seconds since start.",
	     (rc_now_ns() - d->started_ns) / 1000000000ull);
	emit_build(&o, d);
	emit_config(&o, d);
	emit_s3_reach(&o, d);
	return o.used < o.len ? o.used : (len ? strlen(buf) : 0);
}

/* ---- updates, on the owning shard's thread ------------------------------ */

#define METRICS_PUBLISH_MS 100

/* The journal's and the tier's fields are plain, written by this thread:
 * copied into atomics here so another thread never reads them. */
static void publish(struct shard *sh)
{
	if (sh->journal) {
		struct journal_stats js;
		journal_get_stats(sh->journal, &js);
		atomic_store_explicit(&sh->m.wb_journal_used, js.used_bytes,
				      memory_order_relaxed);
		atomic_store_explicit(&sh->m.wb_journal_limit, js.size_limit,
				      memory_order_relaxed);
	}
	if (sh->tier) {
		uint64_t u, t;
		tier_bytes_used(sh->tier, &u, &t);
		atomic_store_explicit(&sh->m.tier_used, u, memory_order_relaxed);
		atomic_store_explicit(&sh->m.tier_capacity, t,
				      memory_order_relaxed);
	}
}

static void publish_tick(struct reactor_timer *t)
{
	struct shard *sh = rc_container_of(t, struct shard, metrics_tick);
	publish(sh);
	reactor_timer_after(sh->reactor, t, METRICS_PUBLISH_MS * 1000000ull);
}

void metrics_publish_start(struct shard *sh)
{
	reactor_timer_init(&sh->metrics_tick, publish_tick);
	publish_tick(&sh->metrics_tick);
}

/* Only the owning shard's thread writes its struct metrics: a relaxed
 * load and store (two plain moves) instead of a locked add, still whole
 * values for a reader on another thread. */
static void add(counter_t *c, uint64_t v)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed)
			      + v, memory_order_relaxed);
}

void metrics_read_wait(struct metrics *m, int gpu, uint64_t wait_ns)
{
	unsigned g = gpu >= 0 && gpu < RC_WAIT_NO_GPU ? (unsigned)gpu
						      : RC_WAIT_NO_GPU;
	unsigned k = 0;
	while (k < RC_WAIT_BUCKETS && wait_ns > wait_le_ns[k])
		k++;
	add(&m->wait[g].bucket[k], 1);
	if (wait_ns) /* a hit's 0 costs no second atomic add */
		add(&m->wait[g].sum_ns, wait_ns);
}
