/* config.h - the daemon's INI configuration (libinih). */
#ifndef RC_CONFIG_H
#define RC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "creds.h"
#include "s3.h"

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
	uint32_t upload_concurrency; /* upload_concurrency = 4 */
	/* max_object_size = 5T (S3's largest object): a HEAD or LIST size
	 * above it is a protocol error, a WRITE past it -EFBIG. */
	uint64_t max_object_size;
	/* overwrite = true; false: an upload never replaces an object
	 * already at its key (SYNC then fails with -EEXIST). */
	bool no_overwrite;
};

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
	uint32_t metadata_ttl_s; /* metadata_ttl = 60 (seconds; 0: HEAD every OPEN) */
	bool open_fetches_block; /* open_fetch = head | block */
	uint32_t max_sessions;   /* max_sessions = 256 */
	uint64_t prefetch_window_bytes;   /* prefetch_window = 256M per session
					     (capped at memory/4; 0: off) */
	uint32_t prefetch_window_entries; /* prefetch_window_entries = 256 */
	uint32_t prefetch_inflight;       /* prefetch_inflight = 32 GETs per shard */
	uint32_t shards;         /* shards = 0: one per NUMA node (1..16 forces) */
	char *topology_file;     /* topology_file = a described machine (tests) */
	char *journal_path;      /* journal = /nvme/ringcache.journal (write-back) */
	uint64_t journal_bytes;  /* journal_size = 8G */
	uint64_t staging_bytes;  /* staging_memory = 1G: checkpoint bytes held */
	char *tier_path;         /* tier_path = /nvme/ringcache.tier (file or device) */
	uint64_t tier_bytes;     /* tier_size = 64G; both or neither */
	/* [s3] */
	char *endpoint;          /* endpoint = (default: AWS for region) */
	char *region;            /* region = us-east-1 */
	enum s3_addressing addressing; /* addressing = path | virtual */
	bool tls_verify;         /* tls_verify = true */
	char *ca_file;           /* ca_file = */
	uint32_t max_connections;/* max_connections = 64 */
	uint32_t max_retries;    /* max_retries = 5 */
	uint32_t connect_timeout_ms, request_timeout_ms; /* 3000, 30000 */
	enum creds_source creds_source; /* credentials = auto|config|env|file|container|imds|anonymous */
	char *access_key, *secret_key, *session_token, *profile, *credentials_file;
	/* [dataset NAME] */
	struct rc_dataset_config *datasets;
	size_t n_datasets;
};

/* Loads and validates path. On error returns -1 and writes one line
 * "PATH:LINE: [section] key: what is wrong" into err. */
int config_load(const char *path, struct rc_config *cfg, char *err,
		size_t errlen);
void config_free(struct rc_config *cfg);
/* A dataset section that outlives its config (reloads), and its end. */
struct rc_dataset_config *config_dataset_dup(const struct rc_dataset_config *ds);
void config_dataset_clear(struct rc_dataset_config *ds);

/* Parses sizes like "512M", "1G", "4096"; -1 on error. */
int config_parse_size(const char *s, uint64_t *out);

/* True if the peer (uid, gid, supplementary groups) may read ds. */
bool config_dataset_allows(const struct rc_dataset_config *ds, uid_t uid,
			   gid_t gid, const gid_t *groups, int ngroups);
/* True if ds is writable and the peer may write it. */
bool config_dataset_allows_write(const struct rc_dataset_config *ds, uid_t uid,
				 gid_t gid, const gid_t *groups, int ngroups);

#endif
