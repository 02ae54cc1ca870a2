/* client_priv.h - private to libringcache: what a client keeps beside the
 * public struct rc_client (whose size is ABI) so that it can re-attach
 * after the daemon was lost (reconnect.c), and the calls client.c,
 * readmany.c and reconnect.c share.
 *
 * Ownership: struct client_state is one allocation per attached client;
 * rc_client.arg_free points at its last member, so the state is found
 * from the client without a field of its own. It owns the key strings of
 * its handle records, the dup'ed fds of registered buffers, a copy of the
 * prefetch plan, the arena mappings of earlier sessions and the bounce
 * region of copied extents. */
#ifndef RC_CLIENT_PRIV_H
#define RC_CLIENT_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "ringcache.h"

#define CLIENT_MAX_BUFS 64u

enum handle_kind {
	HREC_FREE = 0,
	HREC_READ,  /* re-opened by key after a re-attach */
	HREC_WRITE, /* lost at a re-attach */
	HREC_DEAD,  /* every call on it fails with err */
};

struct handle_rec {
	uint8_t kind;
	uint8_t committed; /* write: COMMIT succeeded */
	uint8_t held;      /* dead: the daemon holds an object at its number
			    * that nobody is given (closed with it) */
	int32_t err;       /* dead: what its calls return */
	uint32_t dataset;  /* read: id in the session it was opened in */
	char *key;         /* read: relative to the dataset */
	char etag[RC_MAX_ETAG];
};

struct old_map {
	void *base;
	size_t size;
	int cuda_pinned;
};

struct client_state {
	char *socket_path;          /* as rc_attach resolved it */
	struct rc_attach_opts opts;
	uint32_t timeout_ms;        /* re-attach for this long; 0: never */
	uint32_t lease_gen;         /* of the current session */
	uint32_t reconnects;
	struct handle_rec *rh;      /* read handles, by number */
	uint32_t n_rh;
	struct handle_rec *wh;      /* write handles, by number & ~WRITE bit */
	uint32_t n_wh;
	struct {
		int fd;             /* dup of the memfd, -1: index unused */
		uint64_t size;
	} bufs[CLIENT_MAX_BUFS];
	struct rc_plan_entry *plan; /* the session's plan, as sent */
	size_t n_plan;
	uint32_t cap_plan;
	struct old_map *old;        /* arenas of sessions before a re-attach */
	size_t n_old;
	struct bounce *bounce;      /* copied extents (copyread.c), or NULL */
	uint64_t arg_free[];        /* rc_client.arg_free points here */
};

struct client_state *client_state(struct rc_client *c);

/* Attaches c (fields only, no state) with lease generation gen; prefault
 * jobs are keyed by owner. */
int client_attach_session(struct rc_client *c, const void *owner,
			  const char *path, const struct rc_attach_opts *opts,
			  uint32_t gen, uint32_t *gen_out);
void client_unmap_session(struct rc_client *c, const void *owner);
/* Waits for one completion; -EPIPE when the daemon is gone (no
 * re-attach: the callers that can resubmit do). */
int client_wait_cqe(struct rc_client *c, struct rc_cqe **out);
int client_regbuf_send(struct rc_client *c, int fd, uint64_t size);
int client_unregbuf_send(struct rc_client *c, uint32_t index);

/* reconnect.c */
/* Re-attaches after the daemon was lost, within the client's timeout:
 * re-registers buffers, re-opens handles, resends the plan. 0 or the
 * last attach error (-EPIPE when re-attaching is off). */
int client_reconnect(struct rc_client *c);
/* 0 for a handle the session knows; a dead one's error. */
int client_handle_check(struct rc_client *c, uint32_t handle);
/* A handle the library opened: recorded for re-opening. False when its
 * number is one a dead handle of the application still holds (the
 * daemon's handle then stays held, unseen: open again). */
int client_track_read(struct rc_client *c, uint32_t handle, uint32_t dataset,
		      const char *key, const char *etag);
int client_track_write(struct rc_client *c, uint32_t handle);
void client_track_commit(struct rc_client *c, uint32_t handle);
/* Forgets a handle; true when the daemon must be told (CLOSE sent). */
int client_untrack(struct rc_client *c, uint32_t handle);
int client_track_buf(struct rc_client *c, uint32_t index, int fd,
		     uint64_t size);
void client_untrack_buf(struct rc_client *c, uint32_t index);
/* Copies a plan the daemon took out of its registered buffer (one the
 * library keeps a dup of) to send it again after a re-attach. */
int client_track_plan(struct rc_client *c, uint32_t buf_index,
		      uint64_t buf_offset, uint64_t n, int append);
/* True for a lease of an earlier session: releasing it is a no-op. */
int client_lease_is_old(struct rc_client *c, uint32_t lease);
void client_state_free(struct rc_client *c);

#endif
