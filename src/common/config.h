/* config.h - the daemon's INI configuration (read by inifile.h): loaded
 * by config.c (values read by config_values.c, checked whole by
 * config_check.c), its dataset access rule in config_acl.c, what a reload
 * compares and the release in config_running.c. */
#ifndef RC_CONFIG_H
#define RC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "s3_names.h"

struct rc_dataset_config {
	char *name;      /* from [dataset NAME] */
	char *uri;       /* s3://bucket/prefix/ as written */
	char *bucket;
	char *prefix;    /* "" or ends with '/' */
	bool allow_all;  /* allow_uids = * */
	uid_t *uids;
	size_t n_uids;
	gid_t *gids;
	size_t n_gids;
	int line;        /* where the section starts */
	/* Write-back (checkpoints): writable = true */
	bool writable;
	bool write_all;  /* write_uids = * */
	uid_t *write_uids;  /* write_uids/write_gids; neither: daemon's user, root */
	size_t n_write_uids;
	gid_t *write_gids;
	size_t n_write_gids;
	enum rc_durability { DURABILITY_MEMORY, DURABILITY_LOCAL,
			     DURABILITY_S3 } durability; /* durability = local */
	uint64_t part_size;          /* part_size = 64M (5M..5G) */
	/* copy_threshold = 5G (5M..5G): RENAME after upload copies up to
	 * it with CopyObject, above it part_size parts (UploadPartCopy). */
	uint64_t copy_threshold;
	uint32_t upload_concurrency; /* upload_concurrency = 4 */
	/* max_object_size = 5T (S3's largest object): a HEAD or LIST size
	 * above it is a protocol error, a WRITE past it -EFBIG. */
	uint64_t max_object_size;
	/* overwrite = true; false: an upload never replaces an object
	 * already at its key (SYNC then fails with -EEXIST). */
	bool no_overwrite;
	/* s3_get_rate = 5500, s3_put_rate = 3500: the request budget of the
	 * prefix, requests/s (S3's per-prefix rates; 0: not shaped). */
	uint32_t s3_get_rate, s3_put_rate;
};

/* The largest max_plan_entries: a plan's entries are copied and scanned
 * on a shard's thread (prefetch.c). */
#define RC_MAX_PLAN_ENTRIES (16u << 20)
/* [s3] max_retries when the file does not set it. */
#define RC_MAX_RETRIES_UNSET UINT32_MAX

struct rc_config {
	char *path;
	/* [daemon] */
	char *socket_path;       /* socket = ; default /run/ringcache/ringcache.sock */
	mode_t socket_mode;      /* socket_mode = 0660 */
	uint64_t memory_bytes;   /* memory = 1G (K/M/G/T suffixes) */
	uint32_t block_bytes;    /* block_size = 1M; power of two, 64K..64M */
	int log_level;           /* log_level = info */
	bool mlock;              /* mlock = false */
	bool hugepages;          /* hugepages = true (madvise) */
	int nice;                /* nice = -5 (-20..19; 0: as started) */
	uint32_t metadata_ttl_s; /* metadata_ttl = 60 (seconds; 0: HEAD every OPEN) */
	uint64_t metadata_bytes; /* metadata_memory = 0: memory/16, all shards */
	bool open_fetches_block; /* open_fetch = head | block */
	uint32_t max_sessions;   /* max_sessions = 256, all shards */
	/* Limits (see limits.h); a size of 0 means the automatic value. */
	uint32_t root_reserved_sessions; /* root_reserved_sessions = 4 */
	uint32_t max_sessions_per_uid;   /* max_sessions_per_uid = 128 */
	uint64_t max_leased_per_session; /* max_leased_per_session = 0: memory/4 */
	uint64_t max_leased_per_uid;     /* max_leased_per_uid = 0: memory/2 */
	uint64_t max_inflight_per_session; /* max_inflight_per_session = 0: memory/4 */
	uint64_t max_inflight_per_uid;   /* max_inflight_per_uid = 0: memory/2 */
	uint64_t max_pinned_per_uid;     /* max_pinned_per_uid = 0: memory/4 */
	uint32_t max_plan_entries;       /* max_plan_entries = 1048576 */
	uint32_t max_plan_entries_per_uid; /* max_plan_entries_per_uid = 4194304 */
	uint32_t max_handles;            /* max_handles = 1048576 per session */
	uint64_t max_registered;         /* max_registered = 1G per session */
	uint32_t max_handles_per_uid;    /* max_handles_per_uid = 4194304 (slots) */
	uint32_t max_leases_per_uid;     /* max_leases_per_uid = 4194304 (slots) */
	uint64_t max_registered_per_uid; /* max_registered_per_uid = 4G */
	uint64_t prefetch_window_bytes;   /* prefetch_window = 256M per session
					     (capped at memory/4; 0: off) */
	uint32_t prefetch_window_entries; /* prefetch_window_entries = 256 */
	uint32_t prefetch_inflight;       /* prefetch_inflight = 32 GETs per shard */
	uint32_t shards;         /* shards = 0: one per NUMA node (1..16 forces) */
	char *topology_file;     /* topology_file = a described machine (tests) */
	char *journal_path;      /* journal = /nvme/ringcache.journal (write-back) */
	uint64_t journal_bytes;  /* journal_size = 8G */
	uint64_t staging_bytes;  /* staging_memory = 1G: checkpoint bytes held */
	uint64_t max_staged_per_uid; /* max_staged_per_uid = 0: staging_memory/2 */
	uint64_t arena_prefault_bytes; /* arena_prefault = 16M: arena pages
					  populated ahead, per shard */
	uint64_t staging_warm_bytes; /* staging_warm = all of staging_memory
					(UINT64_MAX) faulted in at start */
	char *tier_path;         /* tier_path = /nvme/ringcache.tier (file or device) */
	uint64_t tier_bytes;     /* tier_size = 64G; both or neither */
	/* metrics_listen = HOST:PORT, the Prometheus endpoint; port 0: off.
	 * A numeric address ("localhost" and a bare port: 127.0.0.1). */
	char metrics_host[48];
	uint16_t metrics_port;
	/* [s3] */
	char *endpoint;          /* endpoint = (default: AWS for region) */
	char *region;            /* region = us-east-1 */
	enum s3_addressing addressing; /* addressing = path | virtual */
	bool tls_verify;         /* tls_verify = true */
	char *ca_file;           /* ca_file = */
	uint32_t max_connections;/* max_connections = 64 */
	/* max_retries = N: also stop after N retries (unset: retry_budget
	 * alone decides; kept so older configs load). */
	uint32_t max_retries;
	uint32_t retry_budget_s; /* retry_budget = 60: seconds a request retries */
	uint32_t connect_timeout_ms, request_timeout_ms; /* 3000, 30000 */
	enum creds_source creds_source; /* credentials = auto|config|env|file|container|imds|anonymous */
	char *access_key, *secret_key, *session_token, *profile, *credentials_file;
	/* [dataset NAME] */
	struct rc_dataset_config *datasets;
	size_t n_datasets;
	uint32_t datasets_cap;   /* RC_GROW's */
	/* Every [daemon] and [s3] key as written: what a reload compares. */
	struct rc_config_value *values;
	size_t n_values;
	uint32_t values_cap;
};

struct rc_config_value {
	const char *section; /* "daemon" or "s3" */
	char *key, *value;
};

/* Loads and validates path. On error returns -1 and writes into err one
 * line "PATH:LINE: [section] key: what is wrong" per error of the file,
 * joined by '\n' (CONFIG_ERR_MAX holds 50 of them). */
#define CONFIG_ERR_MAX 16384
int config_load(const char *path, struct rc_config *cfg, char *err,
		size_t errlen);
void config_free(struct rc_config *cfg);
/* A dataset section that outlives its config (reloads), and its end. */
struct rc_dataset_config *config_dataset_dup(const struct rc_dataset_config *ds);
void config_dataset_clear(struct rc_dataset_config *ds);

/* Calls fn for each [daemon] or [s3] key whose value differs between the
 * files (set in one only included; old_value or new_value NULL there:
 * the default). */
typedef void config_change_fn(void *ctx, const char *section,
			      const char *key, const char *old_value,
			      const char *new_value);
void config_changes(const struct rc_config *old, const struct rc_config *new,
		    config_change_fn *fn, void *ctx);
/* Makes running's record of [section] key match from's (a change that
 * was applied live is not reported again). */
int config_adopt_value(struct rc_config *running, const struct rc_config *from,
		       const char *section, const char *key);
/* True when the file wrote [section] key (false: its default). */
bool config_written(const struct rc_config *cfg, const char *section,
		    const char *key);
/* True for the keys whose values are never logged or shown. */
bool config_key_is_secret(const char *key);

/* Parses sizes like "512M", "1G", "4096"; -1 on error. */
int config_parse_size(const char *s, uint64_t *out);

/* True if the peer (uid, gid, supplementary groups) may read ds. */
bool config_dataset_allows(const struct rc_dataset_config *ds, uid_t uid,
			   gid_t gid, const gid_t *groups, int ngroups);
/* Same readers and same writers (the secure default filled in). */
bool config_dataset_same_acl(const struct rc_dataset_config *a,
			     const struct rc_dataset_config *b);
/* True if ds is writable and the peer may write it. */
bool config_dataset_allows_write(const struct rc_dataset_config *ds, uid_t uid,
				 gid_t gid, const gid_t *groups, int ngroups);

#endif
