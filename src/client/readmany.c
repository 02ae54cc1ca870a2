/* readmany.c - libringcache's one-entry sample path: rc_read_many (a batch
 * of READ_KEY entries in flight together, continued with READs for the
 * samples that span blocks; requested again from the start after a
 * re-attach), rc_read_key on top of it, and the lazily posted RELEASE and
 * CLOSE whose completions rc_peek_cqe consumes. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ringcache.h"
#include "client_priv.h"
#include "copyread.h"

#define EXT_BITS 20 /* user_data: request index << EXT_BITS | extent */
#define EXT_MAX ((1u << EXT_BITS) - 1)

/* True once the daemon hung up: a queue that never drains must fail. */
static bool daemon_gone(struct rc_client *c)
{
	struct pollfd p = {c->sock, POLLRDHUP, 0};
	return poll(&p, 1, 0) > 0 &&
	       (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* A free SQE; when the ring is full, what is queued is published and the
 * daemon, which takes entries whatever the CQ holds, makes room. */
static struct rc_sqe *sqe_wait(struct rc_client *c, int *err)
{
	struct rc_sqe *sqe;
	*err = 0;
	while (!(sqe = rc_get_sqe(c))) {
		int r = rc_submit(c);
		if (r < 0) {
			*err = r;
			return NULL;
		}
		rc_peek_cqe(c); /* consumes lazy completions at the head */
		if (daemon_gone(c)) {
			*err = -EPIPE;
			return NULL;
		}
		sched_yield();
	}
	return sqe;
}

static int lazy_post(struct rc_client *c, uint8_t op, uint32_t id)
{
	int err;
	struct rc_sqe *sqe = sqe_wait(c, &err);
	if (!sqe)
		return err;
	sqe->opcode = op;
	sqe->handle = id;
	sqe->user_data = RC_USER_DATA_LAZY;
	return 0;
}

/* A lease or handle of a session the daemon took with it is forgotten
 * here; and when the SQ cannot drain because the daemon is gone, the
 * session comes back first (what was queued went with the old ring). */
static int lazy_post_or_back(struct rc_client *c, uint8_t op, uint32_t id)
{
	int r = lazy_post(c, op, id);
	if (r != -EPIPE || (r = client_reconnect(c)) < 0)
		return r;
	if (op == RC_OP_RELEASE ? client_lease_is_old(c, id)
				: !client_untrack(c, id))
		return 0;
	return lazy_post(c, op, id);
}

int rc_release_lazy(struct rc_client *c, uint32_t lease)
{
	if (lease != RC_NO_LEASE && (lease & RC_LEASE_LOCAL)) {
		if (copyread_release(c, lease) < 0)
			c->lazy_errors++; /* as the daemon's -EBADF would be */
		return 0;
	}
	if (client_lease_is_old(c, lease))
		return 0;
	return lazy_post_or_back(c, RC_OP_RELEASE, lease);
}

int rc_close_lazy(struct rc_client *c, uint32_t handle)
{
	if (!client_untrack(c, handle))
		return 0; /* died with an earlier session */
	return lazy_post_or_back(c, RC_OP_CLOSE, handle);
}

/* ---- rc_read_many ------------------------------------------------------- */

enum { ST_IDLE, ST_KEY, ST_MORE, ST_DONE };

struct req_state {
	uint8_t stage;
	int slot;             /* READ_KEY's arg slot while in flight */
	uint32_t handle;      /* RC_NO_HANDLE once closed */
	uint32_t issued;      /* extents asked for */
	uint32_t outstanding; /* READs not yet completed */
	uint64_t next, end;   /* continuation: next byte to ask for, end */
	int err;
};

struct rc_read_batch {
	struct rc_client *c;
	int dataset;
	struct rc_read_req *reqs;
	struct req_state *st;
	size_t n, next_key, done;
	size_t *more;         /* requests in ST_MORE with reads to issue */
	size_t n_more;
	size_t *redo;         /* requests to ask for again (re-attached) */
	size_t n_redo;
	uint32_t session;     /* rc_reconnects when its entries went out */
	uint32_t inflight;    /* this call's entries awaiting completion */
};

static void req_finish(struct rc_read_batch *b, size_t i)
{
	struct rc_read_req *q = &b->reqs[i];
	struct req_state *s = &b->st[i];
	if (s->err) {
		for (uint32_t e = 0; e < q->n_ext; e++)
			if (q->ext[e].lease != RC_NO_LEASE)
				rc_release_lazy(b->c, q->ext[e].lease);
		q->n_ext = 0;
		q->res = s->err;
	} else {
		q->res = 0;
		for (uint32_t e = 0; e < q->n_ext; e++)
			q->res += q->ext[e].len;
	}
	s->stage = ST_DONE;
	b->done++;
}

/* Closes the request's handle (once) after its last READ was queued. */
static void req_close(struct rc_read_batch *b, size_t i)
{
	struct req_state *s = &b->st[i];
	if (s->handle != RC_NO_HANDLE) {
		rc_close_lazy(b->c, s->handle);
		s->handle = RC_NO_HANDLE;
	}
}

/* Queues the READs of the blocks after the first one. False when the SQ
 * ring filled first (the request stays on the list). */
static bool issue_more(struct rc_read_batch *b, size_t i)
{
	struct rc_read_req *q = &b->reqs[i];
	struct req_state *s = &b->st[i];
	uint64_t bs = b->c->block_size;
	while (s->next < s->end && s->issued < q->max_ext) {
		struct rc_sqe *sqe = rc_get_sqe(b->c);
		if (!sqe)
			return false;
		uint64_t stop = (s->next / bs + 1) * bs;
		if (stop > s->end)
			stop = s->end;
		rc_prep_read(sqe, s->handle, s->next, stop - s->next,
			     ((uint64_t)i << EXT_BITS) | s->issued);
		s->issued++;
		s->outstanding++;
		b->inflight++;
		s->next = stop;
	}
	req_close(b, i);
	return true;
}

static bool issue_key(struct rc_read_batch *b, size_t i)
{
	struct rc_read_req *q = &b->reqs[i];
	struct req_state *s = &b->st[i];
	q->n_ext = 0;
	q->size = 0;
	q->etag[0] = 0;
	s->handle = RC_NO_HANDLE;
	if (!q->key || q->max_ext == 0 || !q->ext ||
	    strlen(q->key) > RC_MAX_KEY) {
		s->err = q->key && q->ext && q->max_ext ? -ENAMETOOLONG
							: -EINVAL;
		req_finish(b, i);
		return true;
	}
	int slot = rc_arg_get(b->c);
	if (slot < 0)
		return false;
	struct rc_sqe *sqe = rc_get_sqe(b->c);
	if (!sqe) {
		rc_arg_put(b->c, slot);
		return false;
	}
	uint64_t len = q->len == 0 || q->len > RC_MAX_IO ? RC_MAX_IO : q->len;
	rc_prep_read_key(b->c, sqe, b->dataset, slot, q->key, q->offset, len,
			 RC_READ_KEY_CLOSE, (uint64_t)i << EXT_BITS);
	s->slot = slot;
	s->stage = ST_KEY;
	b->inflight++;
	return true;
}

/* READ_KEY's completion: the first extent and the object's metadata. */
static void key_done(struct rc_read_batch *b, size_t i,
		     const struct rc_cqe *cqe)
{
	struct rc_read_req *q = &b->reqs[i];
	struct req_state *s = &b->st[i];
	if (cqe->res < 0) {
		rc_arg_put(b->c, s->slot);
		s->err = cqe->res;
		req_finish(b, i);
		return;
	}
	struct rc_key_result kr;
	memcpy(&kr, rc_key_result_of(b->c, s->slot), sizeof(kr));
	rc_arg_put(b->c, s->slot);
	kr.etag[RC_MAX_ETAG - 1] = 0;
	q->size = kr.size;
	memcpy(q->etag, kr.etag, RC_MAX_ETAG);
	s->handle = kr.handle;
	if (cqe->res > 0) {
		q->ext[0] = (struct rc_extent){rc_cqe_data(b->c, cqe),
					       (uint32_t)cqe->res, cqe->lease};
		copyread_settle(b->c, &q->ext[0]);
		q->n_ext = 1;
	}
	s->issued = 1;
	s->next = q->offset + (uint64_t)cqe->res;
	s->end = kr.size;
	if (q->len && q->offset < kr.size && q->len < kr.size - q->offset)
		s->end = q->offset + q->len;
	if (cqe->res == 0 || s->next >= s->end || q->max_ext == 1 ||
	    s->handle == RC_NO_HANDLE) {
		req_close(b, i);
		req_finish(b, i);
		return;
	}
	s->stage = ST_MORE;
	b->more[b->n_more++] = i;
}

static void read_done(struct rc_read_batch *b, size_t i, uint32_t e,
		      const struct rc_cqe *cqe)
{
	struct rc_read_req *q = &b->reqs[i];
	struct req_state *s = &b->st[i];
	s->outstanding--;
	if (cqe->res < 0 && !s->err)
		s->err = cqe->res;
	if (cqe->res > 0 && e < q->max_ext) {
		q->ext[e] = (struct rc_extent){rc_cqe_data(b->c, cqe),
					       (uint32_t)cqe->res, cqe->lease};
		copyread_settle(b->c, &q->ext[e]);
		if (e + 1 > q->n_ext)
			q->n_ext = e + 1;
	}
	/* Done once every READ is back and none is left to issue (issue_more
	 * closed the handle with the last one). */
	if (s->outstanding == 0 && s->handle == RC_NO_HANDLE)
		req_finish(b, i);
}

static void on_cqe(struct rc_read_batch *b, const struct rc_cqe *cqe)
{
	size_t i = (size_t)(cqe->user_data >> EXT_BITS);
	uint32_t e = (uint32_t)(cqe->user_data & EXT_MAX);
	if (i >= b->n || b->st[i].stage == ST_DONE ||
	    b->st[i].stage == ST_IDLE) {
		if (cqe->res > 0 && cqe->lease != RC_NO_LEASE)
			rc_release_lazy(b->c, cqe->lease); /* not ours */
		return;
	}
	b->inflight--;
	if (e == 0 && b->st[i].stage == ST_KEY)
		key_done(b, i, cqe);
	else
		read_done(b, i, e, cqe);
}

/* Issues continuations first (they hold leases already), then new keys,
 * as far as the SQ ring and the arg slots allow. */
static void issue(struct rc_read_batch *b)
{
	while (b->n_redo && issue_key(b, b->redo[b->n_redo - 1]))
		b->n_redo--;
	if (b->n_redo)
		return;
	size_t k = 0;
	for (; k < b->n_more; k++)
		if (!issue_more(b, b->more[k]))
			break;
	memmove(b->more, b->more + k, (b->n_more - k) * sizeof(*b->more));
	b->n_more -= k;
	if (b->n_more)
		return;
	while (b->next_key < b->n && issue_key(b, b->next_key))
		b->next_key++;
}

/* The daemon was lost: the session is back with none of this batch's
 * entries. Every request issued and not finished is asked for again
 * from its start; what it had read is dropped (its leases died with the
 * old session, its handle too). */
static int batch_restart(struct rc_read_batch *b, int lost)
{
	int r = lost ? client_reconnect(b->c) : 0;
	if (r < 0)
		return r;
	b->session = rc_reconnects(b->c);
	b->n_more = 0;
	b->inflight = 0;
	for (size_t i = 0; i < b->next_key; i++) {
		struct req_state *s = &b->st[i];
		if (s->stage == ST_DONE || s->stage == ST_IDLE)
			continue;
		if (s->stage == ST_KEY)
			rc_arg_put(b->c, s->slot);
		*s = (struct req_state){.stage = ST_IDLE};
		/* Copied extents outlive the session: give their room back. */
		for (uint32_t e = 0; e < b->reqs[i].n_ext; e++)
			if ((b->reqs[i].ext[e].lease & RC_LEASE_LOCAL) &&
			    b->reqs[i].ext[e].lease != RC_NO_LEASE)
				copyread_release(b->c, b->reqs[i].ext[e].lease);
		b->reqs[i].n_ext = 0;
		b->redo[b->n_redo++] = i;
	}
	return 0;
}

static int batch_run(struct rc_read_batch *b)
{
	struct rc_client *c = b->c;
	while (b->done < b->n) {
		issue(b);
		int r = rc_submit(c);
		if (r < 0)
			return r;
		if (b->inflight == 0 && b->done < b->n) {
			/* Nothing issued: the SQ ring is full of lazy entries
			 * the daemon is taking, or no arg slot is free. */
			uint32_t head = atomic_load_explicit(
				&c->hdr->sq_head, memory_order_acquire);
			if (c->sq_local_tail - head <= c->sq_mask) {
				/* The caller holds every arg slot: what is
				 * left fails alone, what was read is kept. */
				for (; b->next_key < b->n; b->next_key++) {
					b->st[b->next_key].err = -EBUSY;
					req_finish(b, b->next_key);
				}
				for (; b->n_redo; b->n_redo--) {
					b->st[b->redo[b->n_redo - 1]].err =
						-EBUSY;
					req_finish(b, b->redo[b->n_redo - 1]);
				}
				continue;
			}
			rc_peek_cqe(c);
			if (daemon_gone(c) && (r = batch_restart(b, 1)) < 0)
				return r;
			sched_yield();
			continue;
		}
		if (b->inflight == 0)
			break;
		/* A lazy post while the batch was pending may have
		 * re-attached already: its entries are not on this ring. */
		if (b->session != rc_reconnects(c)) {
			batch_restart(b, 0);
			continue;
		}
		struct rc_cqe *cqe;
		if ((r = client_wait_cqe(c, &cqe)) == -EPIPE) {
			if ((r = batch_restart(b, 1)) < 0)
				return r;
			continue;
		}
		if (r < 0)
			return r;
		struct rc_cqe copy = *cqe;
		rc_cqe_seen(c);
		on_cqe(b, &copy);
	}
	return rc_submit(c) < 0 ? -EPIPE : 0;
}

static void batch_free(struct rc_read_batch *b)
{
	free(b->st);
	free(b->more);
	free(b->redo);
	free(b);
}

int rc_read_many_start(struct rc_client *c, int dataset,
		       struct rc_read_req *reqs, size_t n,
		       struct rc_read_batch **out)
{
	*out = NULL;
	if (dataset < 0)
		return dataset;
	if (c->batch_pending)
		return -EBUSY;
	if (n > (SIZE_MAX >> EXT_BITS))
		return -EINVAL;
	struct rc_read_batch *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	*b = (struct rc_read_batch){.c = c, .dataset = dataset, .reqs = reqs,
				    .n = n};
	b->st = calloc(n + 1, sizeof(*b->st));
	b->more = malloc((n + 1) * sizeof(*b->more));
	b->redo = malloc((n + 1) * sizeof(*b->redo));
	if (!b->st || !b->more || !b->redo) {
		batch_free(b);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		if (reqs[i].max_ext > EXT_MAX)
			reqs[i].max_ext = EXT_MAX;
	b->session = rc_reconnects(c);
	issue(b);
	int r = rc_submit(c);
	if (r < 0) {
		batch_free(b);
		return r;
	}
	c->batch_pending = 1;
	*out = b;
	return 0;
}

int rc_read_many_wait(struct rc_read_batch *b)
{
	if (!b)
		return -EINVAL;
	b->c->batch_pending = 0;
	int err = batch_run(b);
	batch_free(b);
	return err;
}

int rc_read_many(struct rc_client *c, int dataset, struct rc_read_req *reqs,
		 size_t n)
{
	if (n == 0 && dataset >= 0)
		return c->batch_pending ? -EBUSY : 0;
	struct rc_read_batch *b;
	int err = rc_read_many_start(c, dataset, reqs, n, &b);
	return err < 0 ? err : rc_read_many_wait(b);
}

int rc_read_key(struct rc_client *c, int dataset, const char *key,
		uint64_t offset, uint64_t len, struct rc_extent *ext,
		int max_ext, struct rc_stat *st)
{
	if (max_ext <= 0)
		return -EINVAL;
	struct rc_read_req q = {.key = key, .offset = offset, .len = len,
				.ext = ext, .max_ext = (uint32_t)max_ext};
	int r = rc_read_many(c, dataset, &q, 1);
	if (r < 0)
		return r;
	if (q.res < 0)
		return (int)q.res;
	if (st) {
		st->size = q.size;
		memcpy(st->etag, q.etag, RC_MAX_ETAG);
	}
	return (int)q.n_ext;
}
