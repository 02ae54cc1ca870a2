/* wire.h - the socket protocol between libringcache and ringcached: one
 * SOCK_SEQPACKET message per request, fds by SCM_RIGHTS. Private to the
 * two sides (src/client/client.c; src/server/session_socket.c and the
 * session's state, session_state.h): applications use the calls in
 * include/ringcache.h and never build these messages. Any change to a
 * message bumps RC_ABI_VERSION, which both sides check in every message
 * header. A new message type does not: a daemon that predates it answers
 * -EINVAL, and the client falls back (rc_last_error: rc_strerror).
 *
 * ABI: little-endian, natural alignment, fixed-size fields; a reply's
 * status is 0 or a negated errno. */
#ifndef RC_WIRE_H
#define RC_WIRE_H

#include <stdint.h>

#include "ringcache.h"

#define RC_MSG_MAGIC 0x52434331u /* "RCC1", as RC_RING_MAGIC */

/* ---- Socket protocol (SOCK_SEQPACKET, one message per request) --------- */
enum rc_msg_type {
	RC_MSG_ATTACH = 1,
	RC_MSG_REGISTER_BUF = 2,   /* + 1 fd (memfd), reply: index */
	RC_MSG_UNREGISTER_BUF = 3,
	RC_MSG_STATS = 4,          /* reply: Prometheus text */
	RC_MSG_LAST_ERROR = 5,     /* reply: status = the session's last
				      failed CQE res (0: none), then its
				      cause, NUL-terminated ("" if none) */
	RC_MSG_REPLY = 0x80,
};

struct rc_msg_hdr {
	uint32_t magic;   /* RC_MSG_MAGIC */
	uint16_t version; /* RC_ABI_VERSION */
	uint16_t type;    /* enum rc_msg_type */
	uint32_t len;     /* bytes of the whole message */
	int32_t status;   /* replies: 0 or a negated errno */
};

struct rc_attach_req {
	struct rc_msg_hdr hdr;
	int32_t gpu;        /* GPU index this process feeds, or -1 */
	int32_t numa_node;  /* or -1: derived from gpu, else the first shard */
	uint32_t sq_entries, cq_entries, arg_slots; /* 0: defaults */
	/* Carried in bits RC_LEASE_GEN_SHIFT.. of every lease id of the
	 * session (0..RC_LEASE_GEN_MAX; 0 on a first attach): a client that
	 * re-attached after a restart tells its old leases from the new
	 * daemon's by it. A daemon that ignores it echoes 0. */
	uint32_t lease_gen;
};

/* Reply fds, in order: ring region, SQ eventfd, CQ eventfd, then one arena
 * memfd (read-only) per dataset with RC_ACCESS_READ, in dataset order. */
struct rc_attach_reply {
	struct rc_msg_hdr hdr;
	uint32_t shard, n_datasets;
	uint64_t ring_size;
	uint32_t block_size;
	uint32_t lease_gen; /* the request's, as this session applies it */
	struct rc_dataset_info datasets[];
};

#define RC_LAST_ERROR_MAX 1024u /* bytes of a LAST_ERROR reply's text */

struct rc_regbuf_req {
	struct rc_msg_hdr hdr;
	uint64_t size;      /* bytes of the memfd to map */
	uint32_t buf_index; /* UNREGISTER_BUF: which */
	uint32_t flags;
};

struct rc_regbuf_reply {
	struct rc_msg_hdr hdr;
	uint32_t buf_index;
	uint32_t reserved;
};

#endif
