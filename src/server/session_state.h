/* session_state.h - owns the shape of a client session's state (struct
 * session) and of what it holds: its lease table and registered buffers.
 * Only the server's files that serve sessions include it (session.c,
 * readkey.c, lifecycle.c, metrics.c, daemon.c); the engine sees a session
 * through narrow types it defines (struct wb_client, struct pf_client)
 * and the ops it completes (struct op, daemon.h, which struct client_op
 * below embeds). */
#ifndef RC_SESSION_STATE_H
#define RC_SESSION_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "list.h"
#include "prefetch.h"
#include "ringcache.h"
#include "wire.h"
#include "writeback.h"

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
	struct regbuf_warm *warm;  /* its pages being mapped in (regbuf_warm.h) */
};

struct session {
	struct rc_ev sock_ev, bell_ev;
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
	uint32_t lease_gen;        /* in every lease id's top bits (wire.h) */
	uint64_t leased_bytes;     /* of the blocks its leases hold */
	uint64_t inflight_bytes;   /* of the blocks its reads wait for */
	struct regbuf bufs[64];
	uint64_t registered_bytes;
	struct uid_usage *usage;   /* its uid's, from accept to free */
	struct pqueue *pq;         /* this session's GPU prefetch queue */
	struct wb_client wb;       /* its write handles (writeback.h) */
	int32_t last_err;          /* the last failed CQE's res (not lazy ones) */
	char *last_cause;          /* and its cause in words, or NULL */
	struct rc_list link;       /* on shard->sessions, or on an inbox */
};

static inline struct session *session_of(const struct rc_list *n)
{
	return rc_list_entry(n, struct session, link);
}

/* A client's operation: the engine's op (what the engine completes, and
 * hands back to op_complete and op_block_*) inside what the server keeps
 * of it: the session it came from and the registered buffer it uses,
 * held. Allocated and freed whole by the server; READ_KEY's wraps it
 * again (readkey.c). */
struct client_op {
	struct op op;              /* first: freeing the op frees it all */
	struct session *s;
	struct regbuf *buf;        /* NULL if none */
};

static inline struct client_op *client_op_of(struct op *op)
{
	return rc_container_of(op, struct client_op, op);
}

static inline struct session *op_session(struct op *op)
{
	return client_op_of(op)->s;
}

#endif
