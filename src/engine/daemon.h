/* daemon.h - the daemon's shared state: datasets, shards, sessions,
 * objects, client operations and S3 fetches, and how they refer to each
 * other. Each subsystem file owns one part (see its header comment). */
#ifndef RC_DAEMON_H
#define RC_DAEMON_H

#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "arena.h"
#include "cache.h"
#include "config.h"
#include "prefetch.h"
#include "quota.h"
#include "creds.h"
#include "listing.h"
#include "metrics.h"
#include "ringcache.h"
#include "wire.h"
#include "s3.h"
#include "tier.h"
#include "topology.h"
#include "writeback.h"

struct shard;
struct session;
struct budget;

/* Every io_uring submission carries a pointer to one of these. */
enum ev_kind {
	EV_ACCEPT = 1,
	EV_SIGNAL,
	EV_SESSION_SOCK,
	EV_SESSION_DOORBELL,
	EV_CURL_SOCK,
	EV_IGNORE,
	/* 7 is EV_TIER (tier.h) */
	EV_WAKE = 8,
	/* 9 is EV_JOURNAL (journal.h) */
	EV_WORKERS = 10, /* the shard's helper threads finished jobs */
};
#define RC_MAX_SHARDS 16
struct ev {
	uint8_t kind;
};

struct dataset {
	uint32_t id;
	bool enabled;             /* false once removed by a reload */
	struct rc_dataset_config *cfg; /* owned copy (see daemon.c) */
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
	struct wobject *pending;  /* written here, not yet in S3: the bytes */
	bool head_pending;
	struct waiter *head_waiters;
	struct object *hnext;
};

/* A client operation that waits for S3. */
struct op {
	struct session *s;
	struct rc_cqe cqe;        /* the completion being built */
	uint8_t opcode;
	struct object *obj;       /* READ, READ_INTO, OPEN */
	struct dataset *ds;       /* LIST */
	uint64_t offset, len;     /* clamped range */
	uint8_t *dst;             /* READ_INTO destination */
	struct regbuf *buf;       /* registered buffer it uses, held */
	uint32_t pending;         /* blocks or requests still awaited */
	uint16_t arg;
	int32_t err;
	uint64_t charged;         /* READ bytes in flight (quota) */
	uint64_t start_ns;        /* taken from the ring (read-wait metric) */
};

struct waiter {
	struct op *op;
	struct waiter *next;
};

enum fetch_kind { FETCH_BLOCK, FETCH_HEAD, FETCH_LIST };

struct fetch {
	enum fetch_kind kind;
	struct shard *sh;
	struct s3_req *req;
	struct object *obj;
	struct cache_entry *entry; /* FETCH_BLOCK */
	struct op *op;             /* FETCH_LIST */
	char *list_prefix;         /* FETCH_LIST: dataset prefix + asked */
	struct listing *lst;       /* FETCH_LIST: owned while fetching */
	unsigned attempt;
	bool head_only;            /* FETCH_HEAD: a HEAD (the object is empty) */
	bool open_get;             /* FETCH_HEAD sent as a GET of block 0 */
	bool force_get;            /* FETCH_HEAD: a GET to learn why (403) */
	bool prefetch;             /* FETCH_BLOCK for a plan, nobody waited */
	bool tier_reading, from_tier; /* FETCH_BLOCK served by the NVMe tier */
	bool budgeted;             /* holds a budget slot, waiting for it */
	uint32_t budget_ticket;    /* that slot's (budget_ticket_valid) */
	uint64_t plan_gen;         /* which plan asked for it */
	uint64_t due_ns;           /* retry time */
	uint64_t received;
	struct fetch *next_retry;
	struct fetch *all_next, *all_prev; /* shard's list of fetches */
	bool in_curl;
};

struct lease_table {
	struct cache_entry **e;
	uint32_t cap, n_used;
	uint32_t *free;            /* stack of free ids */
	uint32_t n_free;
};

struct regbuf {
	uint8_t *base;
	uint64_t size;
	uint32_t users;            /* ops in flight copying to or from it */
};

struct session {
	struct ev sock_ev, bell_ev;
	struct shard *sh;
	int sock, sq_efd, cq_efd, ring_fd;
	uint64_t bell_buf;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	bool closed;
	bool attached;             /* holds a session slot (quota) */
	bool sock_armed, bell_armed;
	uint32_t refs;             /* 1 while open + pending ops */
	uint8_t *region;
	size_t region_size;
	struct rc_ring_hdr *hdr;
	struct rc_sqe *sqes;
	struct rc_cqe *cqes;
	uint8_t *args;
	struct rc_attach_req attach;  /* kept while handed to another shard */
	uint32_t sq_entries, cq_entries, arg_slots;
	uint32_t sq_head, cq_tail; /* private copies: the client cannot move ours */
	struct rc_cqe *backlog;    /* completions waiting for CQ room */
	uint32_t n_backlog, cap_backlog;
	bool cq_dirty;
	uint32_t access[RC_MAX_DATASETS]; /* RC_ACCESS_* by dataset id */
	uint64_t acl_gen;          /* the daemon's when access[] was computed */
	struct object **handles;
	_Atomic uint32_t n_handles; /* read by another shard's metrics */
	uint32_t cap_handles;
	uint32_t *handles_free;    /* stack of free handles */
	uint32_t n_handles_free;
	struct lease_table leases;
	uint64_t leased_bytes;     /* of the blocks its leases hold */
	uint64_t inflight_bytes;   /* of the blocks its reads wait for */
	struct regbuf bufs[64];
	uint64_t registered_bytes;
	struct uid_usage *usage;   /* its uid's, from accept to free */
	struct pqueue *pq;         /* this session's GPU prefetch queue */
	struct wobject **whandles; /* write handles (RC_WRITE_HANDLE | index) */
	uint32_t cap_whandles;
	struct session *next, *prev;
};

struct curl_sock;

struct wtimer;
struct wdelay;
struct journal;
struct upload_engine;

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
	struct ev wake_ev;
	int wake_fd;               /* eventfd: inbox, new datasets, stop */
	uint64_t wake_buf;
	pthread_mutex_t lock;      /* inbox, and the lists metrics walk */
	struct session *inbox;     /* sessions handed over by shard 0 */
	uint32_t n_datasets_seen;  /* datasets whose arena this shard uses */
	struct object **objects;   /* hash (dataset, key) -> current version */
	uint64_t objects_mask, n_objects, next_obj_id;
	struct io_uring ring;
	CURLM *multi;
	struct arena_budget budget;
	struct cache cache;
	struct session *sessions;
	/* Atomic, like struct metrics: other shards render them too. */
	_Atomic uint32_t n_sessions;
	uint32_t n_zombies;        /* closed, waiting for their I/O to end */
	struct listing_cache listings; /* LIST continuations */
	struct fetch *retries;     /* sorted by due_ns */
	struct fetch *fetches;     /* all live fetches, for shutdown */
	struct curl_sock *csocks;  /* all curl sockets, for shutdown */
	int64_t curl_due_ns;       /* -1: no curl timer */
	_Atomic uint32_t s3_inflight;
	struct pqueue *pqueues;
	uint32_t n_planned;        /* queues with a plan */
	uint32_t pq_next_id;
	uint32_t pf_inflight, pf_rr;
	_Atomic uint64_t pf_pinned_bytes;
	uint64_t pf_generation;
	struct plan_index plan_index; /* (object, block) -> next use */
	struct journal *journal;   /* write-back, durability local */
	struct upload_engine *uploads;
	struct wobject *wobjects;  /* objects being written or uploaded */
	struct wtimer *wb_timers;  /* the upload engine's, by due time */
	struct wdelay *wb_delayed; /* upload requests waiting for the budget */
	_Atomic uint64_t wb_staged;
	uint64_t wb_next_id;
	void *wb_spare;            /* staging chunks kept for reuse (a list) */
	struct workers *workers;   /* upload digests off this thread */
	struct ev workers_ev;
	struct tier *tier;         /* NULL: memory only */
	struct tier_staging staging[TIER_STAGING];
	uint64_t tier_sync_due_ns;
	struct metrics m;
};

struct daemon {
	struct rc_config cfg;
	char *config_path;
	struct ev accept_ev, signal_ev;
	int listen_fd, signal_fd;
	bool accept_armed, reload;
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
	_Alignas(8) uint8_t sigbuf[128];
	uint64_t started_ns;
	struct quota quota;
	/* accept() out of fds: paused until resume_ns, then retried with a
	 * doubling pause; failures counted, logged once per episode. */
	uint64_t accept_resume_ns;
	uint32_t accept_pause_ms;
	uint64_t accept_failures;
	/* Reload (daemon.c): sessions recompute their access when acl_gen
	 * moves; status shows whether the file on disk still matches. */
	_Atomic uint64_t acl_gen;
	struct timespec config_mtime; /* the file as last loaded */
	ino_t config_ino;
	off_t config_size;
	bool reload_refused;          /* the last SIGHUP changed nothing */
	char restart_keys[512];       /* "daemon.memory s3.region": changed
					 in the file, running the old value */
};

uint64_t now_ns(void);

/* daemon.c: lifecycle, datasets, objects, fetches. */
int daemon_init(struct daemon *d, const char *config_path, char *err,
		size_t errlen);
/* SIGHUP: applies the file if it is valid and the running daemon can
 * serve it (else logs why and keeps the old config): datasets and their
 * ACLs (live sessions lose what they lost), log level, limits and
 * credentials; logs each other changed key as needing a restart. */
int daemon_reload(struct daemon *d);
/* True if the config file on disk is not the one last loaded. */
bool daemon_config_file_changed(const struct daemon *d);
/* An enabled dataset by its config name, or NULL. */
struct dataset *dataset_by_name(struct daemon *d, const char *name);
void daemon_destroy(struct daemon *d);
void object_put(struct daemon *d, struct object *o);
void object_get(struct object *o);
/* OPEN: resolves the key (metadata cache or HEAD) then completes op. */
void daemon_open(struct shard *sh, struct op *op, struct dataset *ds,
		 const char *key, size_t key_len);
/* READ/READ_INTO: entries for blocks [first, last] of op->obj, fetching
 * misses; calls block_ready(op, entry) or block_failed(op, err). */
void daemon_read(struct shard *sh, struct op *op);
void daemon_list(struct shard *sh, struct op *op, struct dataset *ds,
		 const char *prefix, size_t len);
void fetch_done(struct fetch *f, CURLcode code);
/* The block's entry, inserted and fetched for plan gen if absent. */
int daemon_prefetch_block(struct shard *sh, struct object *o, uint64_t b,
			  uint64_t gen, struct cache_entry **out,
			  bool *started);
/* Cancels plan gen's GETs that no read waits for. */
void daemon_cancel_prefetch(struct shard *sh, uint64_t gen);
void fetch_run_retries(struct shard *sh);
/* Persists the tier's index every 30 s. */
void daemon_tier_tick(struct shard *sh);
/* Attaches datasets added since the shard last looked (reload). */
void daemon_shard_sync_datasets(struct shard *sh);

/* session.c */
void session_accept(struct daemon *d, int fd);
/* A session shard 0 handed over: attach it on sh. */
void session_adopt(struct shard *sh, struct session *s);
void session_on_sock(struct session *s, int res);
void session_on_doorbell(struct session *s, int res);
bool session_process(struct session *s);
void session_flush(struct session *s);
void session_close(struct session *s);
void session_put(struct session *s);
/* The object behind a read handle; NULL if unknown, or if a reload took
 * its dataset (or this peer's read access to it) away. */
struct object *session_handle(struct session *s, uint32_t handle);
/* Copies n bytes the client can change (ring region, registered buffer)
 * into dst, once: validate and use only dst. The barrier stops the
 * compiler from reading src again in place of dst, so a client racing to
 * change an entry after it was checked cannot win. */
static inline void copy_from_client(void *dst, const void *src, size_t n)
{
	__builtin_memcpy(dst, src, n);
	__asm__ volatile("" ::: "memory");
}
/* Completes an op: posts its CQE (if the session lives), frees it. */
void op_complete(struct op *op);
/* Called by daemon.c as blocks of a READ/READ_INTO become valid. */
void op_block_ready(struct op *op, struct cache_entry *e);
void op_block_failed(struct op *op, int err);
void op_list_ready(struct op *op, const struct listing *l, int err);

/* reactor.c */
int reactor_init(struct shard *sh);
void reactor_destroy(struct shard *sh);
int reactor_run(struct daemon *d);
/* Shards > 0: a thread each, until the daemon stops. */
void *reactor_thread(void *shard);
void reactor_wake(struct shard *sh);
/* One turn of the loop without client work (shutdown drains). */
void reactor_poll_once(struct shard *sh);
/* Waits until the tier has no I/O in flight (shutdown). */
void reactor_drain_tier(struct daemon *d, struct shard *sh);
struct io_uring_sqe *reactor_sqe(struct shard *sh);
void reactor_add_transfer(struct shard *sh, struct fetch *f);

#endif
