/* daemon.h - the daemon's shared state: datasets, shards, objects,
 * client operations and S3 fetches, and how they refer to each other
 * (sessions are the server's: session.h). Each subsystem file owns one
 * part (see its header comment). */
#ifndef RC_DAEMON_H
#define RC_DAEMON_H

#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "arena.h"
#include "cache.h"
#include "hugepages.h"
#include "clock.h"
#include "config.h"
#include "curlio.h"
#include "quota.h"
#include "reactor.h"
#include "creds.h"
#include "list.h"
#include "listing.h"
#include "counters.h"
#include "plan.h"
#include "ringcache.h"
#include "s3.h"
#include "tier.h"
#include "topology.h"

struct shard;
struct budget;
struct fetch_ops;
struct pqueue;
struct wobject;
struct wtimer;

#define RC_MAX_SHARDS 16

struct dataset {
	uint32_t id;
	/* A reload replaces both while other shards read them. */
	_Atomic bool enabled;     /* false once removed by a reload */
	struct rc_dataset_config *_Atomic cfg; /* owned copy (daemon.c) */
	struct arena arena[RC_MAX_SHARDS];   /* one per shard, on its node */
	struct cache_arena *ca[RC_MAX_SHARDS]; /* set by the shard itself */
	struct budget *budget;    /* its prefix's S3 requests (budget.h) */
};

/* One object version as S3 last described it. */
struct object {
	uint64_t id;              /* unique per (dataset, key, ETag) */
	struct dataset *ds;
	char *key;                /* relative to the dataset prefix */
	char etag[RC_MAX_ETAG];
	uint64_t size;
	uint64_t fetched_ns;      /* when HEAD/LIST last confirmed it */
	uint32_t refs;            /* handles, ops, fetches */
	bool stale;               /* replaced or gone: not in the table */
	void *pending;            /* written here, not yet in S3: the bytes */
	void (*unpend)(void *pending); /* drops that reference (fetch_ops) */
	bool head_pending;
	bool missing;             /* S3 said 404 at fetched_ns (negative) */
	bool has_blocks;          /* a block of it was put in the cache */
	uint64_t used_ns;         /* last looked up, learned or confirmed */
	struct rc_list lru;       /* on shard->objects_lru while in the table */
	struct waiter *head_waiters;
	struct object *hnext;
};

/* A client operation that waits for S3. */
/* An operation the engine completes (fetch_ops, write-back). The server
 * allocates it inside its own struct (struct client_op, session_state.h)
 * and finds that again by container_of: the engine names no server type. */
struct op {
	struct shard *sh;         /* where it runs: write-back completes there */
	struct rc_cqe cqe;        /* the completion being built */
	uint8_t opcode;
	struct object *obj;       /* READ, READ_INTO, OPEN */
	struct dataset *ds;       /* LIST */
	uint64_t offset, len;     /* clamped range */
	uint8_t *dst;             /* READ_INTO destination */
	uint32_t pending;         /* blocks or requests still awaited */
	uint16_t arg;
	int32_t err;
	uint32_t open_at;         /* OPEN with RC_OPEN_AT: the handle wanted */
	bool has_open_at;
	uint64_t charged;         /* READ bytes in flight (quota) */
	uint64_t start_ns;        /* taken from the ring (read-wait metric) */
	char *cause;              /* err's cause in words (cause.h), owned */
};

struct waiter {
	struct op *op;
	struct waiter *next;
};

struct fetch;

struct wtimer;
struct wdelay;
struct journal;
struct upload_engine;
struct arenafill;

#define TIER_STAGING 16 /* blocks being copied out to the tier at once */
struct tier_staging {
	struct shard *sh;
	uint8_t *mem;
	bool busy;
};

struct shard {
	uint32_t id;
	struct daemon *d;
	pthread_t thread;          /* shards > 0 run a thread each */
	struct reactor *reactor;   /* its wake: inbox, new datasets, stop */
	struct curlio *curl;
	pthread_mutex_t lock;      /* inbox, and the lists metrics walk */
	struct rc_list inbox;      /* sessions handed over by shard 0 */
	const struct fetch_ops *fops; /* how fetches complete (lifecycle.c) */
	uint32_t n_datasets_seen;  /* datasets whose arena this shard uses */
	struct object **objects;   /* hash (dataset, key) -> current version */
	uint64_t objects_mask, n_objects, next_obj_id;
	/* The table's memory (entries and their keys) under its budget
	 * (metadata_memory / shards): most recently used first; the sweep
	 * frees entries unused past metadata_ttl. */
	struct rc_list objects_lru;
	uint64_t objects_bytes, objects_budget;
	struct reactor_timer objects_sweep;
	struct arena_budget budget;
	struct cache cache;
	struct rc_list sessions;   /* struct session, newest first */
	/* Atomic, like struct metrics: other shards render them too. */
	_Atomic uint32_t n_sessions;
	uint32_t n_zombies;        /* closed, waiting for their I/O to end */
	struct listing_cache listings; /* LIST continuations */
	struct fetch *fetches;     /* all live fetches, for shutdown */
	bool s3_silent;            /* a fetch got no response since S3's
				      last answer: an answer wakes retries */
	struct rc_list pqueues;    /* struct pqueue, newest first */
	uint32_t n_planned;        /* queues with a plan */
	uint32_t pq_next_id;
	uint32_t pf_inflight, pf_rr;
	_Atomic uint64_t pf_pinned_bytes;
	uint64_t pf_generation;
	struct plan_index plan_index; /* (object, block) -> next use */
	struct journal *journal;   /* write-back, durability local */
	void (*wb_op_done)(struct op *op); /* writeback_set_completion */
	struct upload_engine *uploads;
	struct rc_list wobjects;   /* objects being written or uploaded */
	struct rc_list wb_failed;  /* committed objects S3 does not have */
	struct rc_list wb_timers;  /* the upload engine's (struct wtimer) */
	struct rc_list wb_delayed; /* upload requests waiting for the budget */
	struct rc_list wb_cleanups; /* start-up S3 clean-up on a worker */
	uint32_t wb_cleaning;      /* of replayed objects: uploads wait */
	_Atomic uint64_t wb_staged;
	uint64_t wb_next_id;
	uint64_t wb_change_seq;    /* of the last S3 change asked for (key waits) */
	uint32_t wb_key_waiters;   /* objects whose key_wait is set */
	bool wb_key_waking, wb_key_rewake; /* key_waiters_start re-entered */
	bool wb_key_cancelled;     /* writeback_drain: no waiting change starts */
	void *wb_spare;            /* staging chunks kept for reuse (a list) */
	uint64_t wb_spare_bytes;   /* on wb_spare */
	struct rc_list wb_warming; /* staging_warm jobs on a worker */
	struct workers *workers;   /* upload digests off this thread */
	struct rc_ev workers_ev;
	struct arenafill *fill;    /* the arenas' prefault reserve's jobs */
	struct tier *tier;         /* NULL: memory only */
	struct tier_staging staging[TIER_STAGING];
	struct reactor_timer tier_tick; /* index sync every 30 s */
	struct reactor_timer metrics_tick; /* metrics_publish_start */
	struct metrics m;
};

/* The config as status shows it (daemon_config_status). */
struct config_status {
	struct timespec mtime;        /* the file as last loaded */
	ino_t ino;
	off_t size;
	bool reload_refused;          /* the last SIGHUP changed nothing */
	char refused_why[512];        /* its first reason, as logged */
	char restart_keys[512];       /* "daemon.memory s3.region": changed
					 in the file, running the old value */
};

struct daemon {
	struct rc_config cfg;
	char *config_path;
	struct rc_ev signal_ev;
	int signal_fd;
	bool reload;
	bool reloading;    /* a reload's credentials are being fetched */
	bool reload_again; /* a SIGHUP came meanwhile */
	_Atomic bool stopping;
	struct creds_provider *creds;
	struct s3_client *s3;
	struct dataset *datasets[RC_MAX_DATASETS];
	_Atomic uint32_t n_datasets; /* published after the dataset is whole */
	struct shard *shards;
	uint32_t n_shards;
	struct topology topo;
	struct rc_dataset_config **retired_cfgs; /* replaced by reloads */
	size_t n_retired;
	uint32_t cap_retired;
	_Alignas(8) uint8_t sigbuf[128];
	uint64_t started_ns;
	struct quota quota;
	/* Reload (daemon.c): sessions recompute their access when acl_gen
	 * moves; status shows whether the file on disk still matches. */
	_Atomic uint64_t acl_gen;
	pthread_mutex_t config_lock;  /* config_status: a reload writes it,
					 STATS and the endpoint read it */
	struct config_status config_status;
	/* What the arenas get, checked once at start (hugepages.h); read
	 * only after init, by any renderer. */
	struct hp_report hugepages;
	/* The arenas' last smaps measure (metrics.c): renders within a
	 * second reuse it, so STATS cannot make a shard walk the page
	 * tables at will. */
	struct {
		_Atomic uint64_t at_ns, resident, huge;
	} hp_seen;
};

/* An enabled dataset by its config name, or NULL. A lookup, not the
 * lifecycle's: write-back's replay uses it too. */
static inline struct dataset *dataset_by_name(struct daemon *d,
					      const char *name)
{
	for (uint32_t i = 0; i < d->n_datasets; i++)
		if (d->datasets[i]->enabled &&
		    __builtin_strcmp(d->datasets[i]->cfg->name, name) == 0)
			return d->datasets[i];
	return NULL;
}

/* The S3 key of a dataset's key (its prefix + key), malloc'd; NULL when
 * out of memory. */
static inline char *dataset_bucket_key(const struct dataset *ds,
				       const char *key)
{
	size_t pl = __builtin_strlen(ds->cfg->prefix);
	size_t kl = __builtin_strlen(key);
	char *k = __builtin_malloc(pl + kl + 1);
	if (k) {
		__builtin_memcpy(k, ds->cfg->prefix, pl);
		__builtin_memcpy(k + pl, key, kl + 1);
	}
	return k;
}

/* Live keys a reload changes while every shard reads them. */
static inline uint64_t daemon_metadata_ttl_ns(const struct daemon *d)
{
	return (uint64_t)__atomic_load_n(&d->cfg.metadata_ttl_s,
					 __ATOMIC_RELAXED) * 1000000000ull;
}

static inline bool daemon_open_fetches_block(const struct daemon *d)
{
	return __atomic_load_n(&d->cfg.open_fetches_block, __ATOMIC_RELAXED);
}

/* A copy of what the last load or reload left (daemon.c), and whether
 * the file on disk changed since. Any thread. */
static inline void daemon_config_status(const struct daemon *d,
					struct config_status *out,
					bool *file_changed)
{
	/* Not const to the lock: readers change nothing else. */
	pthread_mutex_t *lock = (pthread_mutex_t *)&d->config_lock;
	pthread_mutex_lock(lock);
	*out = d->config_status;
	pthread_mutex_unlock(lock);
	struct stat st;
	*file_changed = stat(d->config_path, &st) != 0 ||
			st.st_ino != out->ino || st.st_size != out->size ||
			st.st_mtim.tv_sec != out->mtime.tv_sec ||
			st.st_mtim.tv_nsec != out->mtime.tv_nsec;
}

/* Copies n bytes the client can change (ring region, registered buffer)
 * into dst, once: validate and use only dst. The barrier stops the
 * compiler from reading src again in place of dst, so a client racing to
 * change an entry after it was checked cannot win. */
static inline void copy_from_client(void *dst, const void *src, size_t n)
{
	__builtin_memcpy(dst, src, n);
	__asm__ volatile("" ::: "memory");
}

#endif
