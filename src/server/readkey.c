/* readkey.c - owns READ_KEY, the one-entry sample: the key is opened
 * (metadata table or S3), its first block read zero-copy and leased, the
 * handle closed on completion if asked and nothing is left to read, and
 * the object's size, handle and ETag written over the entry's arg slot. A
 * sample so costs one entry, and a cold one whose metadata a listing
 * brought costs one GET. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fetch.h"
#include "prefetch.h"
#include "readkey.h"
#include "session_state.h"
#include "validate.h"
#include "writeback.h"

/* The op of one READ_KEY; the client op first, so op_complete's free of
 * it frees this. */
struct rk_op {
	struct client_op cop;
	uint8_t flags;     /* RC_READ_KEY_* */
	bool reading;      /* the open is done, the read was started */
	uint32_t handle;   /* RC_NO_HANDLE until opened */
	uint64_t want_end; /* offset + len as asked (saturated) */
};

int readkey_submit(struct session *s, const struct rc_sqe *e)
{
	int err;
	struct dataset *ds = session_readable_dataset(s, e->dataset, &err);
	if (!ds)
		return err;
	char key[RC_MAX_KEY + 1];
	if ((err = session_copy_key(s, e, key, false)))
		return err;
	if ((err = validate_io_len(e->len)))
		return err;
	if (session_lease_quota_full(s))
		return -EDQUOT; /* refused before fetching what it could not lease */
	struct rk_op *rk = calloc(1, sizeof(*rk));
	if (!rk)
		return -ENOMEM;
	struct op *op = &rk->cop.op;
	rk->cop.s = s;
	op->sh = s->sh;
	op->opcode = RC_OP_READ_KEY;
	op->cqe.user_data = e->user_data;
	op->cqe.lease = RC_NO_LEASE;
	op->arg = e->arg;
	op->start_ns = rc_now_ns(); /* the sample's wait, open included */
	op->offset = e->offset;
	op->len = e->len;
	rk->flags = e->flags;
	rk->handle = RC_NO_HANDLE;
	rk->want_end = e->offset + e->len < e->offset ? UINT64_MAX
						     : e->offset + e->len;
	s->refs++;
	fetch_open(s->sh, op, ds, key);
	return WB_DEFERRED;
}

/* The last stage: on success the result goes over the arg slot (the key
 * was copied out at submission) and the handle is closed if asked; on an
 * error the handle is dropped, so a failed entry holds nothing. */
static void finish(struct rk_op *rk)
{
	struct op *op = &rk->cop.op;
	struct session *s = op_session(op);
	if (s->closed || rk->handle == RC_NO_HANDLE)
		return;
	if (op->err) {
		session_handle_close(s, rk->handle);
		return;
	}
	const struct object *o = op->obj;
	uint64_t got = op->cqe.res > 0 ? (uint64_t)op->cqe.res : 0;
	uint64_t end = rk->want_end < o->size ? rk->want_end : o->size;
	struct rc_key_result kr = {.size = o->size, .handle = rk->handle};
	if ((rk->flags & RC_READ_KEY_CLOSE) && op->offset + got >= end) {
		session_handle_close(s, rk->handle);
		kr.handle = RC_NO_HANDLE;
	}
	snprintf(kr.etag, sizeof(kr.etag), "%s", o->etag);
	memcpy(s->args + (size_t)op->arg * RC_ARG_SLOT_SIZE, &kr, sizeof(kr));
}

/* The object is open: take a handle and read its first block as READ
 * does. True if the read went on (the op is daemon_read's now). */
static bool start_read(struct rk_op *rk)
{
	struct op *op = &rk->cop.op;
	struct session *s = op_session(op);
	struct object *o = op->obj;
	int h = session_handle_open(s, o);
	if (h < 0) {
		op->err = h;
		return false;
	}
	rk->handle = (uint32_t)h;
	if (op->offset >= o->size || op->len == 0)
		return false; /* EOF: res 0, no lease */
	if (session_lease_quota_full(s)) {
		op->err = -EDQUOT;
		return false;
	}
	struct pf_client pc = session_pf(s);
	prefetch_consumed(&pc, o, op->offset);
	uint64_t bs = s->sh->d->cfg.block_bytes;
	uint64_t len = o->size - op->offset < op->len ? o->size - op->offset
						       : op->len;
	uint64_t blk_end = (op->offset / bs + 1) * bs;
	if (op->offset + len > blk_end)
		len = blk_end - op->offset;
	struct quota *q = &s->sh->d->quota;
	int err = quota_charge2(q, &s->inflight_bytes,
				q->v->inflight_per_session,
				REFUSED_INFLIGHT_PER_SESSION,
				&s->usage->inflight_bytes, q->v->inflight_per_uid,
				REFUSED_INFLIGHT_PER_UID, bs);
	if (err) {
		op->err = err;
		return false;
	}
	op->charged = bs;
	op->len = len;
	op->cqe.flags = RC_CQE_F_HIT; /* cleared if the block must be fetched */
	rk->reading = true;
	fetch_read(s->sh, op);
	return true;
}

bool readkey_step(struct op *op)
{
	struct rk_op *rk = rc_container_of(client_op_of(op), struct rk_op, cop);
	if (!rk->reading && !op->err && !op_session(op)->closed &&
	    start_read(rk))
		return true;
	finish(rk);
	return false;
}
