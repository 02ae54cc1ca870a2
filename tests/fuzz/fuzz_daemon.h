/* fuzz_daemon.h - a real daemon inside the fuzzer's process, for the
 * targets that attack a session (fuzz_socket_msg, fuzz_sqe): one shard,
 * no thread of its own (the target turns its loop), S3 at a closed local
 * port so every fetch fails fast, and three datasets: "ro" (everyone
 * reads), "rw" (writable, durability memory) and "deny" (nobody here). */
#ifndef RC_FUZZ_DAEMON_H
#define RC_FUZZ_DAEMON_H

#include <stddef.h>

#include "daemon.h"
#include "lifecycle.h"
#include "session.h"

/* Starts the daemon once (aborts if it cannot). */
struct daemon *fuzz_daemon(void);

/* A new session over a SEQPACKET socketpair, as session_accept sees an
 * accepted connection; *client gets our end. */
struct session *fuzz_session_new(struct daemon *d, int *client);

/* Sends one message with an optional fd (-1: none); 0 or -errno. */
int fuzz_send(int client, const void *msg, size_t len, int fd);

/* Turns the shard's loop until the daemon answered on client or hung up;
 * the answer's fds are closed. Returns the reply's length (reply, if not
 * NULL, gets up to cap bytes of it), 0 when the daemon hung up, -1 when
 * nothing came. */
long fuzz_reply(struct daemon *d, int client, void *reply, size_t cap);

/* Closes client and turns the loop until the shard has no session, no
 * closed one waiting for its I/O and no fetch (bounded: what is left is
 * the next input's to meet). True when the shard got there. */
bool fuzz_session_end(struct daemon *d, int client);

/* File descriptors this process holds: a session that ended must leave
 * as many as there were before it began. */
int fuzz_open_fds(void);

/* Turns the shard's loop n times without waiting for anything. */
void fuzz_turn(struct daemon *d, unsigned n);

#endif
