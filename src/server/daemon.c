/* daemon.c - owns the daemon's lifecycle: config, credentials and the S3
 * client, topology and shards (their caches, loops, tier, write-back),
 * datasets and their arenas, the listening socket, signals, reload
 * (SIGHUP) and teardown. The shards' loops are lifecycle.c's. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arenafill.h"
#include "budget.h"
#include "clock.h"
#include "daemon.h"
#include "lifecycle.h"
#include "session.h"
#include "fetch.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "prefetch.h"
#include "preflight.h"
#include "tiering.h"
#include "vec.h"
#include "workers.h"
#include "writeback.h"

/* ---- datasets ----------------------------------------------------------- */

static void dataset_cfg_free(struct rc_dataset_config *c)
{
	if (c) {
		config_dataset_clear(c);
		free(c);
	}
}

/* The arenas of every shard are made here, each bound to its shard's node;
 * a shard joins its arena to its own cache itself (on its thread). */
static int dataset_add(struct daemon *d, const struct rc_dataset_config *cfg)
{
	uint32_t id = atomic_load(&d->n_datasets);
	if (id >= RC_MAX_DATASETS)
		return -ENOSPC;
	struct dataset *ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->cfg = config_dataset_dup(cfg);
	ds->budget = budget_new(cfg->s3_get_rate, cfg->s3_put_rate);
	int err = ds->cfg && ds->budget ? 0 : -ENOMEM;
	uint32_t made = 0;
	for (; made < d->n_shards && !err; made++) {
		char name[96];
		snprintf(name, sizeof(name), "ringcache-%s-%u", cfg->name, made);
		struct arena *a = &ds->arena[made];
		err = arena_init(a, &d->shards[made].budget, name,
				 d->cfg.hugepages, d->cfg.mlock);
		if (!err && d->topo.n_shards > 1 &&
		    topology_bind_memory(&d->topo, (int)made, a->base, a->size) < 0)
			log_warn("dataset %s: shard %u's arena not bound to its "
				 "node", cfg->name, made);
	}
	if (err) {
		for (uint32_t k = 0; k + 1 < made; k++)
			arena_destroy(&ds->arena[k]);
		dataset_cfg_free(ds->cfg);
		budget_free(ds->budget);
		free(ds);
		return err;
	}
	ds->id = id;
	ds->enabled = true;
	d->datasets[id] = ds;
	atomic_store_explicit(&d->n_datasets, id + 1, memory_order_release);
	log_info("dataset %s: %s (id %u)", cfg->name, cfg->uri, ds->id);
	return 0;
}

void daemon_shard_sync_datasets(struct shard *sh)
{
	struct daemon *d = sh->d;
	uint32_t n = atomic_load_explicit(&d->n_datasets, memory_order_acquire);
	for (; sh->n_datasets_seen < n; sh->n_datasets_seen++) {
		struct dataset *ds = d->datasets[sh->n_datasets_seen];
		ds->ca[sh->id] = cache_add_arena(&sh->cache, &ds->arena[sh->id]);
		if (!ds->ca[sh->id]) {
			log_error("dataset %s: out of memory on shard %u",
				  ds->cfg->name, sh->id);
			break; /* its sessions will see it as absent */
		}
	}
}

static void retire_cfg(struct daemon *d, struct rc_dataset_config *c)
{
	if (RC_GROW(d->retired_cfgs, d->cap_retired, d->n_retired + 1))
		return; /* leaked rather than freed under a reader */
	d->retired_cfgs[d->n_retired++] = c;
}

/* ---- reload ------------------------------------------------------------- */

/* Keys a reload applies to the running daemon; any other changed key of
 * [daemon] or [s3] needs a restart and is logged as such. */
static const struct {
	const char *section, *key;
} live_keys[] = {
	{"daemon", "log_level"},    {"daemon", "metadata_ttl"},
	{"daemon", "max_sessions"}, {"daemon", "open_fetch"},
	{"daemon", "root_reserved_sessions"},
	{"daemon", "max_sessions_per_uid"},
	{"daemon", "max_leased_per_session"},
	{"daemon", "max_leased_per_uid"},
	{"daemon", "max_pinned_per_uid"},
	{"daemon", "max_inflight_per_session"},
	{"daemon", "max_inflight_per_uid"},
	{"daemon", "max_plan_entries"},
	{"daemon", "max_plan_entries_per_uid"},
	{"daemon", "max_handles"},         {"daemon", "max_registered"},
	{"daemon", "max_handles_per_uid"}, {"daemon", "max_leases_per_uid"},
	{"daemon", "max_registered_per_uid"}, {"daemon", "max_staged_per_uid"},
	{"s3", "credentials"},      {"s3", "access_key"},
	{"s3", "secret_key"},       {"s3", "session_token"},
	{"s3", "profile"},          {"s3", "credentials_file"},
};

static bool key_is_live(const char *section, const char *key)
{
	for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++)
		if (!strcmp(live_keys[i].section, section) &&
		    !strcmp(live_keys[i].key, key))
			return true;
	return false;
}

struct reload {
	struct daemon *d;
	struct rc_config *nc;
	bool creds_changed;
	unsigned n_live, n_restart;
	char restart_keys[sizeof(((struct config_status *)0)->restart_keys)];
};

static void note_change(void *ctx, const char *section, const char *key,
			const char *old_value, const char *new_value)
{
	(void)old_value;
	(void)new_value;
	struct reload *r = ctx;
	if (key_is_live(section, key)) {
		r->n_live++;
		r->creds_changed |= !strcmp(section, "s3");
		return;
	}
	r->n_restart++;
	size_t used = strlen(r->restart_keys);
	snprintf(r->restart_keys + used, sizeof(r->restart_keys) - used,
		 "%s%s.%s", used ? " " : "", section, key);
}

static void log_change(void *ctx, const char *section, const char *key,
		       const char *old_value, const char *new_value)
{
	(void)ctx;
	bool secret = config_key_is_secret(key);
	const char *was = secret ? "(hidden)" : old_value ? old_value : "(default)";
	const char *now = secret ? "(hidden)" : new_value ? new_value : "(default)";
	if (key_is_live(section, key))
		log_info("reload: [%s] %s: %s -> %s, applied", section, key,
			 rc_esc(was), rc_esc(now));
	else
		log_warn("reload: [%s] %s: %s -> %s needs a restart; still "
			 "running with %s", section, key, rc_esc(was),
			 rc_esc(now), rc_esc(was));
}

static bool dataset_kept(const struct dataset *ds, const struct rc_config *nc)
{
	for (size_t j = 0; j < nc->n_datasets; j++)
		if (!strcmp(nc->datasets[j].name, ds->cfg->name) &&
		    !strcmp(nc->datasets[j].uri, ds->cfg->uri))
			return true;
	return false;
}

/* Why the running daemon cannot serve nc's datasets, or NULL. Checked
 * before anything changes: a refused reload changes nothing. */
static const char *reload_refusal(struct daemon *d, const struct rc_config *nc,
				  char *why, size_t len)
{
	uint32_t added = 0;
	for (size_t j = 0; j < nc->n_datasets; j++) {
		const struct rc_dataset_config *c = &nc->datasets[j];
		if (c->writable && c->durability == DURABILITY_LOCAL &&
		    !d->shards[0].journal) {
			snprintf(why, len, "dataset %s: durability = local needs "
				 "the journal, and this daemon started without "
				 "one: restart ringcached to open %s", c->name,
				 nc->journal_path ? nc->journal_path : "it");
			return why;
		}
		const struct dataset *ds = dataset_by_name(d, c->name);
		if (!ds || strcmp(ds->cfg->uri, c->uri) != 0)
			added++;
	}
	if (d->n_datasets + added > RC_MAX_DATASETS) {
		snprintf(why, len, "%u datasets added or moved: this daemon has "
			 "room for %u more until a restart", added,
			 RC_MAX_DATASETS - d->n_datasets);
		return why;
	}
	return NULL;
}

struct creds_provider *daemon_creds_for(const struct rc_config *c, char *err,
					size_t errlen)
{
	struct creds_config cc = {
		.source = c->creds_source,
		.access_key = c->access_key,
		.secret_key = c->secret_key,
		.session_token = c->session_token,
		.profile = c->profile,
		.credentials_file = c->credentials_file,
		.timeout_ms = 2000,
	};
	return creds_provider_new(&cc, err, errlen);
}

/* Datasets: removed ones disabled (mapped arenas stay valid), changed
 * ACLs swapped in, new ones added. Returns how many changed. */
static unsigned reload_datasets(struct daemon *d, const struct rc_config *nc)
{
	unsigned changed = 0;
	for (uint32_t i = 0; i < d->n_datasets; i++) {
		struct dataset *ds = d->datasets[i];
		if (ds->enabled && !dataset_kept(ds, nc)) {
			ds->enabled = false;
			changed++;
			log_info("dataset %s removed: its sessions' handles and "
				 "new opens fail with ENOENT", ds->cfg->name);
		}
	}
	for (size_t j = 0; j < nc->n_datasets; j++) {
		struct dataset *ds = dataset_by_name(d, nc->datasets[j].name);
		if (!ds) {
			int e = dataset_add(d, &nc->datasets[j]);
			changed++;
			if (e)
				log_error("dataset %s: %s", nc->datasets[j].name,
					  strerror(-e));
			continue;
		}
		bool same_acl = config_dataset_same_acl(ds->cfg,
							&nc->datasets[j]);
		struct rc_dataset_config *c = config_dataset_dup(&nc->datasets[j]);
		if (!c) {
			log_error("dataset %s: out of memory: keeping its old "
				  "access lists", ds->cfg->name);
			continue;
		}
		/* Other shards may be reading the old one: it is freed with
		 * the daemon. */
		retire_cfg(d, ds->cfg);
		ds->cfg = c;
		budget_set_ceiling(ds->budget, BUDGET_GET, c->s3_get_rate);
		budget_set_ceiling(ds->budget, BUDGET_PUT, c->s3_put_rate);
		if (same_acl)
			continue;
		changed++;
		log_info("dataset %s: access lists changed: live sessions "
			 "recheck before their next entry", c->name);
	}
	return changed;
}

static void apply_live_keys(struct daemon *d, struct rc_config *nc)
{
	d->cfg.log_level = nc->log_level;
	rc_log_level = nc->log_level;
	/* Read by every shard (daemon.h's accessors). */
	__atomic_store_n(&d->cfg.metadata_ttl_s, nc->metadata_ttl_s,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&d->cfg.open_fetches_block, nc->open_fetches_block,
			 __ATOMIC_RELAXED);
	d->cfg.max_sessions = nc->max_sessions;
	d->cfg.root_reserved_sessions = nc->root_reserved_sessions;
	d->cfg.max_sessions_per_uid = nc->max_sessions_per_uid;
	d->cfg.max_leased_per_session = nc->max_leased_per_session;
	d->cfg.max_leased_per_uid = nc->max_leased_per_uid;
	d->cfg.max_pinned_per_uid = nc->max_pinned_per_uid;
	d->cfg.max_inflight_per_session = nc->max_inflight_per_session;
	d->cfg.max_inflight_per_uid = nc->max_inflight_per_uid;
	d->cfg.max_plan_entries = nc->max_plan_entries;
	d->cfg.max_plan_entries_per_uid = nc->max_plan_entries_per_uid;
	d->cfg.max_handles = nc->max_handles;
	d->cfg.max_registered = nc->max_registered;
	if (quota_set_limits(&d->quota, &d->cfg) < 0)
		log_warn("reload: out of memory: the session and uid limits "
			 "stay as they were");
	for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++)
		if (config_adopt_value(&d->cfg, nc, live_keys[i].section,
				       live_keys[i].key) < 0)
			log_warn("reload: out of memory recording [%s] %s",
				 live_keys[i].section, live_keys[i].key);
}

/* The file as loaded: st from before the load (a change made while it
 * was read shows as a change). */
static void note_config_file(struct daemon *d, const struct stat *st)
{
	pthread_mutex_lock(&d->config_lock);
	d->config_status.mtime = st->st_mtim;
	d->config_status.ino = st->st_ino;
	d->config_status.size = st->st_size;
	pthread_mutex_unlock(&d->config_lock);
}

/* why: the refusal's first reason (kept for `ringcache status`), or
 * NULL for an accepted reload. */
static void note_reload(struct daemon *d, const char *why,
			const char *restart_keys)
{
	struct config_status *cs = &d->config_status;
	pthread_mutex_lock(&d->config_lock);
	cs->reload_refused = why != NULL;
	snprintf(cs->refused_why, sizeof(cs->refused_why), "%s",
		 why ? why : "");
	if (restart_keys)
		snprintf(cs->restart_keys, sizeof(cs->restart_keys), "%s",
			 restart_keys);
	pthread_mutex_unlock(&d->config_lock);
}

static int refuse(struct daemon *d, const char *why)
{
	note_reload(d, why, NULL);
	log_error("reload refused, keeping the running config: %s", why);
	return -EINVAL;
}

/* One SIGHUP's reload, from the load to the apply. Its [s3] credentials,
 * when they changed, are built on shard 0's digest workers (workers.h):
 * a container or IMDS source fetches its first set there, up to its
 * timeout, while the reactor serves; the reload is applied, or refused,
 * when they are back, and a SIGHUP meanwhile waits for that. */
struct reload_job {
	struct daemon *d;
	struct rc_config nc;
	struct reload r;
	struct stat before;
	bool have_stat;
	struct creds_provider *fresh;
	char cerr[400];
};

static void reload_job_free(struct reload_job *j)
{
	config_free(&j->nc);
	free(j);
}

static void reload_apply(struct reload_job *j)
{
	struct daemon *d = j->d;
	struct rc_config *nc = &j->nc;
	config_changes(&d->cfg, nc, log_change, NULL);
	unsigned ds_changed = reload_datasets(d, nc);
	apply_live_keys(d, nc);
	if (j->fresh) {
		creds_provider_replace(d->creds, j->fresh);
		log_info("reload: credentials now from %s",
			 creds_source_name(d->creds));
	}
	/* After the datasets' new ACLs: a session that sees the new
	 * generation sees them (release/acquire). */
	atomic_fetch_add_explicit(&d->acl_gen, 1, memory_order_release);
	note_reload(d, NULL, j->r.restart_keys);
	if (j->have_stat)
		note_config_file(d, &j->before);
	/* Off the reactor: a dead endpoint costs the check seconds. */
	struct server *srv = server_of(d);
	srv->preflight = preflight_start(srv->preflight, nc, d->creds);
	daemon_shard_sync_datasets(&d->shards[0]);
	for (uint32_t i = 1; i < d->n_shards; i++)
		shard_wake(&d->shards[i]);
	log_info("reloaded %s: %u datasets, %u changed; %u keys applied, %u "
		 "need a restart%s%s", d->config_path, d->n_datasets,
		 ds_changed, j->r.n_live, j->r.n_restart,
		 j->r.n_restart ? ": " : "", j->r.restart_keys);
}

/* On a worker: reads only the job's config copy. */
static void reload_creds_run(void *arg)
{
	struct reload_job *j = arg;
	j->fresh = daemon_creds_for(&j->nc, j->cerr, sizeof(j->cerr));
}

static void reload_creds_done(void *arg)
{
	struct reload_job *j = arg;
	struct daemon *d = j->d;
	d->reloading = false;
	if (j->fresh) {
		reload_apply(j);
	} else {
		char why[512];
		snprintf(why, sizeof(why), "[s3] credentials: %s", j->cerr);
		refuse(d, why);
	}
	reload_job_free(j);
	if (d->reload_again) { /* a SIGHUP came meanwhile: the shard loop */
		d->reload_again = false;
		d->reload = true;
	}
}

int daemon_reload(struct daemon *d)
{
	static char err[CONFIG_ERR_MAX];
	char why[512];
	if (d->reloading) {
		d->reload_again = true;
		log_info("reload: the previous one still fetches its "
			 "credentials; this one follows it");
		return 0;
	}
	struct reload_job *j = calloc(1, sizeof(*j));
	if (!j)
		return refuse(d, "out of memory");
	j->d = d;
	j->have_stat = stat(d->config_path, &j->before) == 0;
	if (config_load(d->config_path, &j->nc, err, sizeof(err)) < 0) {
		free(j);
		/* Logged one per line; status keeps the first. */
		char *first = strtok(err, "\n");
		for (char *line = strtok(NULL, "\n"); line;
		     line = strtok(NULL, "\n"))
			log_error("reload refused, keeping the running config: "
				  "%s", line);
		refuse(d, first ? first : "the config does not load");
		return -EINVAL;
	}
	j->r = (struct reload){.d = d, .nc = &j->nc};
	config_changes(&d->cfg, &j->nc, note_change, &j->r);
	const char *no = reload_refusal(d, &j->nc, why, sizeof(why));
	if (!no && j->r.creds_changed) {
		struct workers *w = d->shards[0].workers;
		if (w && workers_submit(w, reload_creds_run, reload_creds_done,
					j) == 0) {
			d->reloading = true;
			return 0; /* reload_creds_done goes on */
		}
		no = "[s3] credentials: no worker thread to fetch them on "
		     "(see the start-up log); restart ringcached to apply";
	}
	if (no) {
		refuse(d, no);
		reload_job_free(j);
		return -EINVAL;
	}
	reload_apply(j);
	reload_job_free(j);
	return 0;
}

/* ---- lifecycle ---------------------------------------------------------- */

static void on_conn(void *ctx, int fd)
{
	session_accept(ctx, fd);
}

static void on_fds_exhausted(void *ctx)
{
	struct daemon *d = ctx;
	quota_refused(&d->quota, REFUSED_ACCEPT_FDS);
}

static int listen_socket(struct daemon *d, char *err, size_t errlen)
{
	struct listener_ops ops = {.on_conn = on_conn,
				   .on_exhausted = on_fds_exhausted, .ctx = d};
	struct server *srv = server_of(d);
	srv->listener = listener_open(d->shards[0].reactor, d->cfg.socket_path,
				      d->cfg.socket_mode, &ops, err, errlen);
	return srv->listener ? 0 : -1;
}

static int signals_init(struct daemon *d)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	signal(SIGPIPE, SIG_IGN);
	d->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
	return d->signal_fd < 0 ? -errno : 0;
}

static int s3_init(struct daemon *d, char *err, size_t errlen)
{
	const struct rc_config *c = &d->cfg;
	d->creds = daemon_creds_for(c, err, errlen);
	if (!d->creds)
		return -1;
	log_info("credentials from %s", creds_source_name(d->creds));
	struct s3_config sc = {
		.endpoint = c->endpoint,
		.region = c->region,
		.addressing = c->addressing,
		.tls_verify = c->tls_verify,
		.ca_file = c->ca_file,
		.connect_timeout_ms = c->connect_timeout_ms,
		.request_timeout_ms = c->request_timeout_ms,
		.low_speed_time_s = 10,
		.max_retries = c->max_retries == RC_MAX_RETRIES_UNSET ?
			S3_RETRIES_UNBOUNDED : c->max_retries,
		.retry_budget_ms = c->retry_budget_s * 1000u,
		.creds = d->creds,
	};
	d->s3 = s3_client_new(&sc, err, errlen);
	if (!d->s3)
		return -1;
	if (c->max_retries != RC_MAX_RETRIES_UNSET)
		log_warn("[s3] max_retries = %u: a request fails after %u "
			 "retries, maybe long before retry_budget = %u s; an S3 "
			 "outage longer than a few seconds then fails reads. "
			 "Remove max_retries to let retry_budget decide",
			 c->max_retries, c->max_retries, c->retry_budget_s);
	return 0;
}

static int topology_init(struct daemon *d, char *err, size_t errlen)
{
	char terr[256];
	int r;
	if (d->cfg.topology_file) {
		FILE *f = fopen(d->cfg.topology_file, "r");
		char text[16384];
		size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
		if (f)
			fclose(f);
		text[n] = 0;
		r = topology_from_description(&d->topo, text, terr, sizeof(terr));
	} else {
		r = topology_from_sysfs(&d->topo, "/", terr, sizeof(terr));
	}
	if (r < 0) {
		snprintf(err, errlen, "topology %s: %s",
			 d->cfg.topology_file ? d->cfg.topology_file : "(sysfs)",
			 terr);
		return -1;
	}
	int nodes = topology_shard_count(&d->topo);
	d->n_shards = d->cfg.shards ? d->cfg.shards : (uint32_t)nodes;
	if (d->n_shards < 1)
		d->n_shards = 1;
	if (d->n_shards > RC_MAX_SHARDS)
		d->n_shards = RC_MAX_SHARDS;
	if (d->cfg.memory_bytes / d->n_shards < d->cfg.block_bytes * 4ull) {
		snprintf(err, errlen, "memory %llu is too small for %u shards",
			 (unsigned long long)d->cfg.memory_bytes, d->n_shards);
		return -1;
	}
	log_info("topology: %d NUMA node(s) with CPUs and memory, %d GPU(s): "
		 "%u shard(s)", nodes, d->topo.n_gpus, d->n_shards);
	return 0;
}

static int shard_init(struct daemon *d, struct shard *sh, uint32_t id,
		      char *err, size_t errlen)
{
	sh->d = d;
	sh->id = id;
	pthread_mutex_init(&sh->lock, NULL);
	rc_list_init(&sh->inbox);
	rc_list_init(&sh->sessions);
	rc_list_init(&sh->pqueues);
	rc_list_init(&sh->wobjects);
	rc_list_init(&sh->wb_failed);
	rc_list_init(&sh->wb_timers);
	rc_list_init(&sh->wb_delayed);
	rc_list_init(&sh->wb_cleanups);
	rc_list_init(&sh->wb_warming);
	if (fetch_shard_init(sh) < 0 ||
	    arena_budget_init(&sh->budget, d->cfg.memory_bytes / d->n_shards,
			      d->cfg.block_bytes) < 0 ||
	    cache_init(&sh->cache, &sh->budget) < 0) {
		snprintf(err, errlen, "memory %llu too small for block size %u",
			 (unsigned long long)d->cfg.memory_bytes,
			 d->cfg.block_bytes);
		return -1;
	}
	sh->cache.next_use = prefetch_next_use;
	sh->cache.owner_ctx = sh;
	sh->cache.shed_pins = prefetch_shed;
	int r = shard_loop_init(sh);
	if (r < 0) {
		snprintf(err, errlen, "io_uring/curl init: %s", strerror(-r));
		return -1;
	}
	return 0;
}

/* After the datasets: replayed objects name theirs. */
static int writeback_start(struct daemon *d, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < d->n_shards; i++) {
		if (writeback_init(&d->shards[i], err, errlen) < 0)
			return -1;
		/* Its populates run on the digest threads writeback made. */
		arenafill_init(&d->shards[i], d->cfg.arena_prefault_bytes);
	}
	return 0;
}

/* The daemon does the jobs' work on their critical path (a COMMIT's
 * acknowledgement, a read's completion) and sits idle otherwise; on a
 * loaded node its threads waiting for a core are what the jobs wait on
 * (perf/README.md, "A loaded node"). Linux keeps the nice value per
 * thread, so it is set before the first thread starts, and every thread
 * inherits it. A daemon started under nice(1) keeps what it was given
 * unless the file says otherwise; `nice = 0` leaves it as started. */
static void apply_nice(const struct rc_config *cfg)
{
	if (cfg->nice == 0)
		return;
	bool written = config_written(cfg, "daemon", "nice");
	errno = 0;
	int now = getpriority(PRIO_PROCESS, 0);
	if (errno != 0 || now == cfg->nice || (!written && now != 0))
		return;
	if (setpriority(PRIO_PROCESS, 0, cfg->nice) == 0) {
		log_info("ringcached: running at nice %d", cfg->nice);
		return;
	}
	int e = errno;
	if (written)
		log_warn("ringcached: nice = %d not applied: %s (a nice below "
			 "the caller's needs CAP_SYS_NICE or RLIMIT_NICE); "
			 "running at nice %d", cfg->nice, strerror(e), now);
	else
		log_info("ringcached: default nice %d not applied: %s; running "
			 "at nice %d (`nice = 0` in [daemon] keeps it quiet)",
			 cfg->nice, strerror(e), now);
}

int daemon_init(struct server *srv, const char *config_path, char *err,
		size_t errlen)
{
	memset(srv, 0, sizeof(*srv));
	struct daemon *d = &srv->d;
	d->signal_fd = -1;
	d->started_ns = rc_now_ns();
	pthread_mutex_init(&d->config_lock, NULL);
	struct stat before;
	bool have_stat = stat(config_path, &before) == 0;
	if (config_load(config_path, &d->cfg, err, errlen) < 0)
		return -1;
	d->config_path = strdup(config_path);
	rc_log_level = d->cfg.log_level;
	apply_nice(&d->cfg);
	int quota_err = quota_init(&d->quota, &d->cfg);
	if (have_stat)
		note_config_file(d, &before);
	if (topology_init(d, err, errlen) < 0)
		return -1;
	d->shards = calloc(d->n_shards, sizeof(*d->shards));
	if (!d->config_path || !d->shards || quota_err) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (s3_init(d, err, errlen) < 0)
		return -1;
	int r;
	for (uint32_t i = 0; i < d->n_shards; i++)
		if ((r = shard_init(d, &d->shards[i], i, err, errlen)) < 0)
			return -1;
	for (uint32_t i = 0; d->cfg.tier_path && i < d->n_shards; i++)
		tiering_open(&d->shards[i]);
	for (size_t i = 0; i < d->cfg.n_datasets; i++) {
		r = dataset_add(d, &d->cfg.datasets[i]);
		if (r < 0) {
			snprintf(err, errlen, "dataset %s: arena: %s",
				 d->cfg.datasets[i].name, strerror(-r));
			return -1;
		}
	}
	for (uint32_t i = 0; i < d->n_shards; i++)
		daemon_shard_sync_datasets(&d->shards[i]);
	if (writeback_start(d, err, errlen) < 0)
		return -1;
	struct shard *sh = &d->shards[0];
	if ((r = signals_init(d)) < 0) {
		snprintf(err, errlen, "signals: %s", strerror(-r));
		return -1;
	}
	if (listen_socket(d, err, errlen) < 0)
		return -1;
	/* Before the metrics endpoint starts: a scrape before a shard's first
	 * turn would otherwise show an empty journal and tier. */
	for (uint32_t i = 0; i < d->n_shards; i++)
		metrics_publish_start(&d->shards[i]);
	log_info("ringcached: %s, %u shard(s), %llu MiB in %llu superblocks "
		 "each, block %u KiB, socket %s", config_path, d->n_shards,
		 (unsigned long long)(sh->budget.sb_total * sh->budget.sb_bytes >> 20),
		 (unsigned long long)sh->budget.sb_total,
		 d->cfg.block_bytes >> 10, d->cfg.socket_path);
	/* Said out loud: a stock kernel gives 4 KiB pages, and a fresh
	 * reader then pays a fault per page (hugepages.h). */
	char hp[768];
	hp_check(&d->hugepages, d->cfg.hugepages);
	hp_describe(&d->hugepages, hp, sizeof(hp));
	if (d->hugepages.verdict == HP_HUGE)
		log_info("ringcached: %s", hp);
	else
		log_warn("ringcached: %s", hp);
	srv->preflight = preflight_start(NULL, &d->cfg, d->creds);
	return 0;
}

void daemon_destroy(struct server *srv)
{
	struct daemon *d = &srv->d;
	for (uint32_t i = 0; d->shards && i < d->n_shards; i++) {
		struct shard *sh = &d->shards[i];
		if (!sh->d)
			continue; /* init failed before this shard */
		while (!rc_list_empty(&sh->sessions))
			session_close(session_of(sh->sessions.next));
		fetch_shard_cancel(sh);
		writeback_destroy(sh);
		arenafill_free(sh); /* the workers are gone: no populate runs */
		if (sh->tier) {
			tier_close(sh->tier); /* syncs the index */
			sh->tier = NULL;
		}
		for (unsigned k = 0; k < TIER_STAGING; k++)
			free(sh->staging[k].mem);
		shard_loop_destroy(sh);
		plan_index_free(&sh->plan_index);
		sh->cache.on_evict = NULL;
		cache_destroy(&sh->cache);
	}
	for (uint32_t i = 0; i < d->n_datasets; i++) {
		for (uint32_t k = 0; k < d->n_shards; k++)
			arena_destroy(&d->datasets[i]->arena[k]);
		dataset_cfg_free(d->datasets[i]->cfg);
		budget_free(d->datasets[i]->budget);
		free(d->datasets[i]);
	}
	for (size_t i = 0; i < d->n_retired; i++)
		dataset_cfg_free(d->retired_cfgs[i]);
	free(d->retired_cfgs);
	for (uint32_t k = 0; d->shards && k < d->n_shards; k++) {
		struct shard *sh = &d->shards[k];
		fetch_shard_free(sh);
		pthread_mutex_destroy(&sh->lock);
	}
	free(d->shards);
	preflight_join(srv->preflight); /* it borrows d->creds */
	if (d->s3)
		s3_client_free(d->s3);
	if (d->creds)
		creds_provider_free(d->creds);
	listener_close(srv->listener);
	if (d->signal_fd >= 0)
		close(d->signal_fd);
	quota_destroy(&d->quota);
	pthread_mutex_destroy(&d->config_lock);
	config_free(&d->cfg);
	free(d->config_path);
}
