/* session_priv.h - owns what the session files share and nothing else
 * includes: session.c (lifetime, arming), session_socket.c (the socket
 * protocol) and session_ring.c (the ring protocol). */
#ifndef RC_SESSION_PRIV_H
#define RC_SESSION_PRIV_H

#include "session_state.h"

struct shard;

/* session.c: the shard's list of sessions (under its lock, for STATS on
 * other threads) and the polls a session keeps armed on the reactor. */
void session_link(struct shard *sh, struct session *s);
void session_unlink(struct shard *sh, struct session *s);
void session_arm_sock(struct session *s);
void session_arm_bell(struct session *s);

/* session_socket.c: whether the peer may still use each dataset after a
 * reload changed the ACLs (the ring protocol asks before an op). */
void session_recheck_access(struct session *s);

#endif
