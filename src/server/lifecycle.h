/* lifecycle.h - the daemon's lifecycle, the top of the server layer:
 * daemon.c (config, datasets, reload, init and teardown) and lifecycle.c
 * (the shards' loops, signals, drain).
 *
 * Ownership: daemon_init fills a caller's struct server (its daemon
 * within); daemon_destroy frees what it holds (also after a failed
 * init).
 * Use: main.c: daemon_init, daemon_run (until SIGTERM), daemon_destroy.
 * Everything else runs on the shards' threads as the comments say. */
#ifndef RC_LIFECYCLE_H
#define RC_LIFECYCLE_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon.h"

struct shard;
struct rc_config;
struct creds_provider;
struct listener;
struct preflight;

/* The server's daemon: the engine's shared state (struct daemon) and
 * what only the server holds, the listening socket and the buckets'
 * check. The engine sees the daemon alone; the server finds the rest by
 * container_of (server_of). */
struct server {
	struct daemon d;
	struct listener *listener;
	struct preflight *preflight; /* preflight.h; NULL when none runs */
};

static inline struct server *server_of(struct daemon *d)
{
	return rc_container_of(d, struct server, d);
}

/* daemon.c (src/server): lifecycle, datasets, reload. */
int daemon_init(struct server *srv, const char *config_path, char *err,
		size_t errlen);
/* SIGHUP: applies the file if it is valid and the running daemon can
 * serve it (else logs why and keeps the old config): datasets and their
 * ACLs (live sessions lose what they lost), log level, limits and
 * credentials; logs each other changed key as needing a restart. */
int daemon_reload(struct daemon *d);
void daemon_destroy(struct server *srv);
/* The credentials provider c's [s3] keys name (blocking for IMDS and
 * container sources); NULL with the reason in err. */
struct creds_provider *daemon_creds_for(const struct rc_config *c, char *err,
					size_t errlen);
/* Attaches datasets added since the shard last looked (reload). */
void daemon_shard_sync_datasets(struct shard *sh);

/* lifecycle.c: the shards' loops, signals, drain. */
int daemon_run(struct daemon *d);
/* Wakes shard sh's loop from any thread (inbox, datasets, stop). */
void shard_wake(struct shard *sh);
/* One turn of the loop without client work (fuzzers, drains). */
void shard_poll_once(struct shard *sh);
/* The shard's loop state: reactor, curl, wake handler. */
int shard_loop_init(struct shard *sh);
void shard_loop_destroy(struct shard *sh);

#endif
