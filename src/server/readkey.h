/* readkey.h - READ_KEY, the one-entry sample: OPEN, READ and CLOSE of a
 * key in one submission.
 *
 * Ownership: the op readkey_submit makes is owned like any op (fetch_open,
 * then fetch_read, then op_complete frees it); readkey_step takes over
 * op_complete's work between the two stages. The handle it opens belongs
 * to the session until closed here (RC_READ_KEY_CLOSE) or by the client.
 * Use: session_ring.c calls readkey_submit for an RC_OP_READ_KEY entry whose
 * fields passed its field table, and readkey_step at the top of
 * op_complete for an op of that opcode. */
#ifndef RC_READKEY_H
#define RC_READKEY_H

#include <stdbool.h>

#include "daemon.h"

struct session;

/* Validates the entry (dataset, key, range; every byte is the client's)
 * and starts the open. Returns a negated errno to complete now, or
 * WB_DEFERRED when the op owns the completion. */
int readkey_submit(struct session *s, const struct rc_sqe *e);
/* True when the op went on to its next stage (op_complete must return at
 * once, the op may be gone); false: post op->cqe as built and free. */
bool readkey_step(struct op *op);

/* session_ring.c's helpers readkey.c builds on (defined there). */
int session_copy_key(struct session *s, const struct rc_sqe *e, char *key,
		     bool allow_empty);
struct dataset *session_readable_dataset(struct session *s, uint32_t id,
					 int *err);
bool session_lease_quota_full(struct session *s);
int session_handle_open(struct session *s, struct object *o);
/* What prefetch needs of s (prefetch.h), as it is now. */
struct pf_client session_pf(struct session *s);
int session_handle_close(struct session *s, uint32_t h);

#endif
