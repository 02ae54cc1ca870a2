/* session.h - client sessions (session.c): the socket handshake, the
 * rings, and the completion of client operations.
 *
 * Ownership: a session is reference counted (session_put); it holds its
 * ops, handles, leases and registered buffers, and frees them when the
 * last reference goes after session_close.
 * Use: on the owning shard's thread; the lifecycle calls the session_*
 * functions from its loop, and registers op_complete and op_block_* as
 * the engine's completion callbacks (fetch_ops, write-back). */
#ifndef RC_SESSION_H
#define RC_SESSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "session_state.h"

struct daemon;
struct shard;
struct op;
struct object;
struct cache_entry;
struct listing;

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
/* Completes an op: posts its CQE (if the session lives), frees it. */
void op_complete(struct op *op);
/* Called by the fetch engine as blocks of a READ/READ_INTO become valid. */
void op_block_ready(struct op *op, struct cache_entry *e);
void op_block_failed(struct op *op, int err);
void op_list_ready(struct op *op, const struct listing *l, int err);

#endif
