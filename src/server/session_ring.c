/* session_ring.c - owns a session's ring protocol: the validation of
 * every submission entry (the rules: validate.c), handles and leases,
 * client operations and their completion entries (CQE posting, backlog),
 * LIST output, and what readkey.c builds on. A malformed entry fails
 * alone. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "session.h"
#include "session_priv.h"
#include "fetch.h"
#include "prefetch.h"
#include "writeback.h"
#include "log.h"
#include "metrics.h"
#include "readkey.h"
#include "validate.h"
#include "vec.h"

#define MAX_LEASES (1u << 20)
#define MAX_BACKLOG (1u << 16)

/* The read-wait clock (metrics.h): one reading per pass over a session's
 * SQ stamps every op taken in it, and an op that completes before its
 * pass ends (a hit) is recorded as no wait, without a second reading: a
 * clock read per READ cost about as much as the READ (perf/README.md). */
static _Thread_local uint64_t pass_ns; /* 0: not in a pass */

/* ---- completions -------------------------------------------------------- */

/* The session's last failure, for RC_MSG_LAST_ERROR; cause is taken
 * (NULL: none known). Lazy RELEASE/CLOSE failures are the library's. */
static void note_failure(struct session *s, const struct rc_cqe *cqe,
			 char *cause)
{
	if (cqe->res >= 0 || cqe->user_data == RC_USER_DATA_LAZY) {
		free(cause);
		return;
	}
	free(s->last_cause);
	s->last_cause = cause;
	s->last_err = cqe->res;
}

static void post_cqe(struct session *s, const struct rc_cqe *cqe)
{
	note_failure(s, cqe, NULL);
	uint32_t head = atomic_load_explicit(&s->hdr->cq_head,
					     memory_order_acquire);
	if (s->n_backlog == 0 && validate_cq_room(s->cq_tail, head,
						  s->cq_entries)) {
		s->cqes[s->cq_tail & (s->cq_entries - 1)] = *cqe;
		s->cq_tail++;
		s->cq_dirty = true;
		return;
	}
	if (s->n_backlog == s->cap_backlog) {
		if (s->cap_backlog >= MAX_BACKLOG) {
			/* The client stopped reaping (or broke cq_head). */
			log_warn("session pid %d: completion backlog full, "
				 "closing it", (int)s->pid);
			session_close(s);
			return;
		}
		if (RC_GROW_FROM(s->backlog, s->cap_backlog,
				 s->n_backlog + 1, 64) < 0) {
			session_close(s);
			return;
		}
	}
	s->backlog[s->n_backlog++] = *cqe;
}

void session_flush(struct session *s)
{
	if (s->closed || !s->hdr)
		return;
	if (s->n_backlog) {
		uint32_t head = atomic_load_explicit(&s->hdr->cq_head,
						     memory_order_acquire);
		uint32_t i = 0;
		while (i < s->n_backlog &&
		       validate_cq_room(s->cq_tail, head, s->cq_entries)) {
			s->cqes[s->cq_tail & (s->cq_entries - 1)] = s->backlog[i++];
			s->cq_tail++;
			s->cq_dirty = true;
		}
		memmove(s->backlog, s->backlog + i,
			(s->n_backlog - i) * sizeof(*s->backlog));
		s->n_backlog -= i;
		atomic_store_explicit(&s->hdr->cq_overflow, s->n_backlog,
				      memory_order_relaxed);
	}
	if (!s->cq_dirty)
		return;
	s->cq_dirty = false;
	atomic_store_explicit(&s->hdr->cq_tail, s->cq_tail,
			      memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&s->hdr->cq_flags, memory_order_relaxed) &
	    RC_CQ_NEED_WAKEUP) {
		atomic_fetch_and(&s->hdr->cq_flags, ~RC_CQ_NEED_WAKEUP);
		uint64_t one = 1;
		if (write(s->cq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			log_debug("cq doorbell: %s", strerror(errno));
	}
}

/* Whether the session, or its uid, already holds its leased bytes. */
static bool lease_quota_full(struct session *s)
{
	struct quota *q = &s->sh->d->quota;
	if (s->leased_bytes >= q->v->leased_per_session) {
		quota_refused(q, REFUSED_LEASED_PER_SESSION);
		return true;
	}
	if (atomic_load_explicit(&s->usage->leased_bytes,
				 memory_order_relaxed) >= q->v->leased_per_uid) {
		quota_refused(q, REFUSED_LEASED_PER_UID);
		return true;
	}
	return false;
}

static int lease_charge(struct session *s, uint64_t bytes)
{
	struct quota *q = &s->sh->d->quota;
	return quota_charge2(q, &s->leased_bytes, q->v->leased_per_session,
			     REFUSED_LEASED_PER_SESSION,
			     &s->usage->leased_bytes, q->v->leased_per_uid,
			     REFUSED_LEASED_PER_UID, bytes);
}

static void lease_uncharge(struct session *s, uint64_t bytes)
{
	s->leased_bytes -= bytes;
	quota_uncharge(&s->usage->leased_bytes, bytes);
}

/* A table of ids (leases, handles): its entries and its stack of free
 * ids, both from cap to new_cap slots; the new entries are zeroed (NULL)
 * and their ids pushed, lowest on top. The quota sizes the table, not
 * the allocation: RC_GROW may leave room beyond new_cap, unused. */
static int ids_grow(void **items, size_t elem, uint32_t **free_ids,
		    uint32_t *n_free, uint32_t cap, uint32_t new_cap)
{
	uint32_t ci = cap, cf = cap;
	if (rc_grow(items, &ci, new_cap, elem, 0) < 0 ||
	    RC_GROW(*free_ids, cf, new_cap) < 0)
		return -ENOMEM;
	memset((char *)*items + (size_t)cap * elem, 0,
	       (size_t)(new_cap - cap) * elem);
	for (uint32_t i = new_cap; i > cap; i--)
		(*free_ids)[(*n_free)++] = i - 1;
	return 0;
}
#define table_grow(items, free_ids, n_free, cap, new_cap) \
	ids_grow((void **)(items), sizeof(**(items)), (free_ids), (n_free), \
		 (cap), (new_cap))

/* The new slots are charged to the uid first (what its sessions' tables
 * hold together); the last growth takes what is left of its share. */
static int lease_grow(struct session *s, struct lease_table *lt)
{
	if (lt->cap >= MAX_LEASES)
		return -EMFILE;
	struct quota *q = &s->sh->d->quota;
	uint32_t want = lt->cap ? lt->cap : 256;
	if (want > MAX_LEASES - lt->cap)
		want = MAX_LEASES - lt->cap;
	uint32_t add = (uint32_t)quota_charge_upto(q, &s->usage->lease_slots,
						   1, want,
						   q->v->leases_per_uid,
						   REFUSED_LEASES_PER_UID);
	if (!add)
		return -EDQUOT;
	uint32_t cap = lt->cap + add;
	if (table_grow(&lt->e, &lt->free, &lt->n_free, lt->cap, cap) < 0) {
		quota_uncharge(&s->usage->lease_slots, add);
		return -ENOMEM;
	}
	lt->cap = cap;
	return 0;
}

static int lease_alloc(struct session *s, struct cache_entry *e)
{
	struct lease_table *lt = &s->leases;
	int err = lease_charge(s, e->len);
	if (err)
		return err;
	if (lt->n_free == 0 && (err = lease_grow(s, lt)) < 0) {
		lease_uncharge(s, e->len);
		return err;
	}
	uint32_t id = lt->free[--lt->n_free];
	lt->e[id] = e;
	lt->n_used++;
	cache_lease(&s->sh->cache, e);
	return (int)(id | s->lease_gen << RC_LEASE_GEN_SHIFT);
}

static int lease_release(struct session *s, uint32_t lease)
{
	struct lease_table *lt = &s->leases;
	/* A lease of the client's earlier session (another generation) is
	 * not this session's, whatever its index. */
	if (RC_LEASE_GEN(lease) != s->lease_gen)
		return -EBADF;
	uint32_t id = lease & ((1u << RC_LEASE_GEN_SHIFT) - 1);
	if (validate_table_id(id, lt->cap) || !lt->e[id])
		return -EBADF;
	lease_uncharge(s, lt->e[id]->len);
	cache_release(&s->sh->cache, lt->e[id]);
	lt->e[id] = NULL;
	lt->free[lt->n_free++] = id;
	lt->n_used--;
	return 0;
}

/* Handles come off a stack of free ones: O(1) whatever the table holds. */
static int handles_grow(struct session *s)
{
	struct quota *q = &s->sh->d->quota;
	if (s->cap_handles >= q->v->handles) {
		quota_refused(q, REFUSED_HANDLES);
		return -EDQUOT;
	}
	uint32_t cap = s->cap_handles ? s->cap_handles * 2 : 64;
	if (cap > q->v->handles)
		cap = q->v->handles;
	/* The new slots are charged to the uid first: its sessions' tables
	 * together (the last growth takes what is left of its share). */
	uint32_t add = (uint32_t)quota_charge_upto(q, &s->usage->handle_slots,
						   1, cap - s->cap_handles,
						   q->v->handles_per_uid,
						   REFUSED_HANDLES_PER_UID);
	if (!add)
		return -EDQUOT;
	cap = s->cap_handles + add;
	if (table_grow(&s->handles, &s->handles_free, &s->n_handles_free,
		       s->cap_handles, cap) < 0) {
		quota_uncharge(&s->usage->handle_slots, add);
		return -ENOMEM;
	}
	s->cap_handles = cap;
	return 0;
}

static int handle_alloc(struct session *s, struct object *o)
{
	int err;
	if (s->n_handles_free == 0 && (err = handles_grow(s)) < 0)
		return err;
	uint32_t h = s->handles_free[--s->n_handles_free];
	object_get(o);
	s->handles[h] = o;
	s->n_handles++;
	return (int)h;
}

/* A re-attached client re-opens its handles under the numbers its
 * application holds (RC_OPEN_AT): only within max_handles, only a free
 * one, and only in this session's own table. */
static int handle_alloc_at(struct session *s, struct object *o, uint32_t h)
{
	int err;
	while (h >= s->cap_handles)
		if ((err = handles_grow(s)) < 0)
			return err;
	if (s->handles[h])
		return -EBUSY;
	for (uint32_t i = 0; i < s->n_handles_free; i++) {
		if (s->handles_free[i] != h)
			continue;
		s->handles_free[i] = s->handles_free[--s->n_handles_free];
		break;
	}
	object_get(o);
	s->handles[h] = o;
	s->n_handles++;
	return (int)h;
}

static struct object *handle_get(struct session *s, uint32_t h)
{
	return validate_table_id(h, s->cap_handles) ? NULL : s->handles[h];
}

/* Reads through a handle opened before a reload took the dataset (or
 * this peer's access to it) away fail like a new OPEN would. */
static struct object *readable_handle(struct session *s, uint32_t h, int *err)
{
	struct object *o = handle_get(s, h);
	*err = -EBADF;
	if (!o)
		return NULL;
	*err = validate_access(o->ds->enabled, s->access[o->ds->id],
			       RC_ACCESS_READ);
	return *err ? NULL : o;
}

struct object *session_handle(struct session *s, uint32_t handle)
{
	int err;
	return readable_handle(s, handle, &err);
}

static void write_etag(struct session *s, uint16_t arg, const struct object *o)
{
	snprintf((char *)s->args + (size_t)arg * RC_ARG_SLOT_SIZE, RC_MAX_ETAG,
		 "%s", o->etag);
}

void op_complete(struct op *op)
{
	struct session *s = op_session(op);
	struct shard *sh = s->sh;
	if (op->opcode == RC_OP_READ_KEY && readkey_step(op))
		return; /* opened: now reading */
	if (!s->closed) {
		if (op->err) {
			op->cqe.res = op->err;
		} else if (op->opcode == RC_OP_READ_INTO) {
			op->cqe.res = (int32_t)op->len;
		} else if (op->opcode == RC_OP_OPEN) {
			int h = op->has_open_at
					? handle_alloc_at(s, op->obj, op->open_at)
					: handle_alloc(s, op->obj);
			op->cqe.res = h;
			if (h >= 0) {
				op->cqe.addr = op->obj->size;
				write_etag(s, op->arg, op->obj);
			}
		}
		if (op->cqe.res < 0) {
			op->cqe.lease = RC_NO_LEASE;
			op->cqe.addr = 0;
		}
		post_cqe(s, &op->cqe);
		note_failure(s, &op->cqe, op->cause);
		op->cause = NULL;
	}
	free(op->cause);
	if (op->opcode == RC_OP_READ || op->opcode == RC_OP_READ_INTO ||
	    op->opcode == RC_OP_READ_KEY)
		metrics_read_wait(&sh->m, s->pq ? s->pq->gpu : -1,
				  op->start_ns == pass_ns ? 0
				  : rc_now_ns() - op->start_ns);
	if (op->charged) {
		s->inflight_bytes -= op->charged;
		quota_uncharge(&s->usage->inflight_bytes, op->charged);
	}
	if (op->obj)
		object_put(sh->d, op->obj);
	if (client_op_of(op)->buf)
		client_op_of(op)->buf->users--;
	free(client_op_of(op));
	session_put(s);
}

void op_block_ready(struct op *op, struct cache_entry *e)
{
	struct shard *sh = op_session(op)->sh;
	uint64_t bs = sh->d->cfg.block_bytes;
	uint64_t blk_start = (uint64_t)e->blkno * bs;
	if (op->opcode == RC_OP_READ || op->opcode == RC_OP_READ_KEY) {
		if (!op_session(op)->closed && op->err == 0) {
			int id = lease_alloc(op_session(op), e);
			if (id < 0) {
				op->err = id;
			} else {
				op->cqe.lease = (uint32_t)id;
				op->cqe.addr = e->off + (op->offset - blk_start);
				op->cqe.arena = op->obj->ds->id;
				op->cqe.res = (int32_t)op->len;
				sh->m.bytes_served_zero_copy += op->len;
			}
		}
	} else if (op->err == 0) {
		uint64_t lo = op->offset > blk_start ? op->offset : blk_start;
		uint64_t end = op->offset + op->len;
		uint64_t hi = blk_start + e->len < end ? blk_start + e->len : end;
		memcpy(op->dst + (lo - op->offset),
		       cache_entry_data(e) + (lo - blk_start), hi - lo);
		sh->m.bytes_copied += hi - lo;
	}
	if (--op->pending == 0)
		op_complete(op);
}

void op_block_failed(struct op *op, int err)
{
	if (op->err == 0)
		op->err = err;
	op->cqe.flags &= ~RC_CQE_F_HIT;
	if (--op->pending == 0)
		op_complete(op);
}

/* ---- LIST output -------------------------------------------------------- */

/* One record; names were checked (under 1024 bytes) when listed. */
static size_t list_put(uint8_t *dst, size_t room, const char *name,
		       uint64_t size, bool is_prefix)
{
	size_t nl = strlen(name), rec = listing_rec_len(nl);
	if (nl > UINT16_MAX || rec > room)
		return 0;
	struct rc_list_entry e = {.size = size, .name_len = (uint16_t)nl,
				  .is_prefix = is_prefix,
				  .rec_len = (uint32_t)rec};
	memcpy(dst, &e, sizeof(e));
	memcpy(dst + sizeof(e), name, nl);
	memset(dst + sizeof(e) + nl, 0, rec - sizeof(e) - nl);
	return rec;
}

void op_list_ready(struct op *op, const struct listing *l, int err)
{
	if (err) {
		op->err = err;
		op_complete(op);
		return;
	}
	uint64_t idx = op->offset, size;
	size_t used = 0;
	int32_t count = 0;
	const char *name;
	bool is_prefix;
	while (count < INT32_MAX &&
	       listing_at(l, idx, &name, &size, &is_prefix)) {
		size_t w = list_put(op->dst + used, op->len - used, name, size,
				    is_prefix);
		if (w == 0)
			break;
		used += w;
		count++;
		idx++;
	}
	if (listing_at(l, idx, &name, &size, &is_prefix) ||
	    !listing_complete(l))
		op->cqe.flags |= RC_CQE_F_MORE;
	op->cqe.res = count;
	op_complete(op);
}

/* ---- submissions -------------------------------------------------------- */

/* submit_* return a result to complete now (>= 0, or a negated errno), or
 * DEFERRED when an op owns the completion. */
#define DEFERRED WB_DEFERRED

/* Copies the key from the arg slot and checks it stays in its dataset. */
static int copy_key(struct session *s, const struct rc_sqe *e, char *key,
		    bool allow_empty)
{
	return validate_key_copy(s->args, s->arg_slots, e->arg, e->arg_len,
				 allow_empty, key);
}

static int check_buf(struct session *s, const struct rc_sqe *e, uint64_t len,
		     uint8_t **dst)
{
	int err = validate_buf_index(e->buf_index);
	if (err)
		return err;
	const struct regbuf *b = &s->bufs[e->buf_index];
	if ((err = validate_buf_range(e->buf_offset, len,
				      b->base ? b->size : 0)))
		return err;
	*dst = b->base + e->buf_offset;
	return 0;
}

/* The op copies into or out of the entry's buffer until it completes:
 * UNREGISTER_BUF is -EBUSY until then. */
static void op_hold_buf(struct op *op, const struct rc_sqe *e)
{
	struct client_op *cop = client_op_of(op);
	cop->buf = &cop->s->bufs[e->buf_index];
	cop->buf->users++;
}

static struct dataset *readable_dataset(struct session *s, uint32_t id,
					int *err)
{
	struct daemon *d = s->sh->d;
	if ((*err = validate_dataset_id(id, s->sh->n_datasets_seen)))
		return NULL;
	*err = d->datasets[id] ? validate_access(d->datasets[id]->enabled,
						 s->access[id], RC_ACCESS_READ)
			       : -ENOENT;
	return *err ? NULL : d->datasets[id];
}

static struct op *op_new(struct session *s, const struct rc_sqe *e)
{
	struct client_op *cop = calloc(1, sizeof(*cop));
	if (!cop)
		return NULL;
	struct op *op = &cop->op;
	cop->s = s;
	op->sh = s->sh;
	op->opcode = e->opcode;
	op->cqe.user_data = e->user_data;
	op->cqe.lease = RC_NO_LEASE;
	op->arg = e->arg;
	op->start_ns = pass_ns ? pass_ns : rc_now_ns();
	s->refs++;
	return op;
}

static int submit_open(struct session *s, const struct rc_sqe *e)
{
	int err;
	struct dataset *ds = readable_dataset(s, e->dataset, &err);
	if (!ds)
		return err;
	char key[RC_MAX_KEY + 1];
	if ((err = copy_key(s, e, key, false)))
		return err;
	struct quota *q = &s->sh->d->quota;
	if ((e->flags & RC_OPEN_AT) && e->handle >= q->v->handles) {
		quota_refused(q, REFUSED_HANDLES);
		return -EDQUOT; /* refused before it costs S3 a request */
	}
	struct op *op = op_new(s, e);
	if (!op)
		return -ENOMEM;
	op->has_open_at = (e->flags & RC_OPEN_AT) != 0;
	op->open_at = e->handle;
	fetch_open(s->sh, op, ds, key);
	return DEFERRED;
}

static int submit_list(struct session *s, const struct rc_sqe *e)
{
	int err;
	struct dataset *ds = readable_dataset(s, e->dataset, &err);
	if (!ds)
		return err;
	char prefix[RC_MAX_KEY + 1];
	uint8_t *dst;
	if ((err = copy_key(s, e, prefix, true)) ||
	    (err = check_buf(s, e, e->len, &dst)))
		return err;
	if ((err = validate_list_offset(e->offset)))
		return err;
	struct op *op = op_new(s, e);
	if (!op)
		return -ENOMEM;
	op->dst = dst;
	op->len = e->len;
	op->offset = e->offset;
	op->ds = ds;
	op_hold_buf(op, e);
	fetch_list(s->sh, op, ds, prefix);
	return DEFERRED;
}

static int submit_read(struct session *s, const struct rc_sqe *e)
{
	int err;
	struct object *o = readable_handle(s, e->handle, &err);
	if (!o)
		return err;
	if ((err = validate_io_len(e->len)))
		return err;
	uint8_t *dst = NULL;
	if (e->opcode == RC_OP_READ_INTO && (err = check_buf(s, e, e->len, &dst)))
		return err;
	if (e->offset >= o->size || e->len == 0)
		return 0; /* EOF */
	if (e->opcode == RC_OP_READ && lease_quota_full(s))
		return -EDQUOT; /* refused before fetching what it could not lease */
	struct pf_client pc = session_pf(s);
	prefetch_consumed(&pc, o, e->offset);
	uint64_t bs = s->sh->d->cfg.block_bytes;
	uint64_t len = o->size - e->offset < e->len ? o->size - e->offset : e->len;
	if (e->opcode == RC_OP_READ) {
		uint64_t blk_end = (e->offset / bs + 1) * bs;
		if (e->offset + len > blk_end)
			len = blk_end - e->offset;
	}
	/* Every block it spans may take a cache entry until fetched. */
	uint64_t charge = ((e->offset + len - 1) / bs - e->offset / bs + 1) * bs;
	struct quota *q = &s->sh->d->quota;
	if ((err = quota_charge2(q, &s->inflight_bytes, q->v->inflight_per_session,
				 REFUSED_INFLIGHT_PER_SESSION,
				 &s->usage->inflight_bytes, q->v->inflight_per_uid,
				 REFUSED_INFLIGHT_PER_UID, charge)))
		return err;
	struct op *op = op_new(s, e);
	if (!op) {
		s->inflight_bytes -= charge;
		quota_uncharge(&s->usage->inflight_bytes, charge);
		return -ENOMEM;
	}
	op->charged = charge;
	object_get(o);
	op->obj = o;
	op->offset = e->offset;
	op->len = len;
	op->dst = dst;
	if (dst)
		op_hold_buf(op, e);
	op->cqe.flags = RC_CQE_F_HIT; /* cleared if any block must be fetched */
	fetch_read(s->sh, op);
	return DEFERRED;
}

static int submit_stat(struct session *s, const struct rc_sqe *e,
		       struct rc_cqe *cqe)
{
	int err;
	struct object *o = readable_handle(s, e->handle, &err);
	if (!o)
		return err;
	if ((err = validate_arg_slot(e->arg, s->arg_slots)))
		return err;
	write_etag(s, e->arg, o);
	cqe->addr = o->size;
	return 0;
}

static int submit_plan(struct session *s, const struct rc_sqe *e)
{
	uint8_t *src;
	int err;
	if ((err = validate_plan_len(e->len)) ||
	    (err = check_buf(s, e, e->len, &src)))
		return err;
	struct pf_client pc = session_pf(s);
	return prefetch_set_plan(&pc, (const struct rc_plan_entry *)src,
				 e->len / sizeof(struct rc_plan_entry),
				 e->flags & RC_PLAN_APPEND);
}

static struct object *plan_handle(void *s, uint32_t handle)
{
	return session_handle(s, handle);
}

struct pf_client session_pf(struct session *s)
{
	return (struct pf_client){.sh = s->sh, .pq = s->pq, .usage = s->usage,
				  .resolve = plan_handle, .resolve_ctx = s};
}

static struct dataset *writable_dataset(struct session *s, uint32_t id,
					int *err)
{
	struct daemon *d = s->sh->d;
	if ((*err = validate_dataset_id(id, s->sh->n_datasets_seen)))
		return NULL;
	if (!d->datasets[id] || !d->datasets[id]->enabled) {
		*err = -ENOENT;
		return NULL;
	}
	return d->datasets[id];
}

static int submit_write_open(struct session *s, const struct rc_sqe *e)
{
	int err;
	struct dataset *ds = writable_dataset(s, e->dataset, &err);
	char key[RC_MAX_KEY + 1];
	if (!ds || (err = copy_key(s, e, key, false)))
		return err;
	uint32_t h;
	err = writeback_open(&s->wb, ds, key, &h);
	return err ? err : (int)h;
}

static int submit_write(struct session *s, const struct rc_sqe *e)
{
	uint8_t *src;
	int err;
	if ((err = validate_io_len(e->len)) ||
	    (err = check_buf(s, e, e->len, &src)))
		return err;
	struct op *op = op_new(s, e); /* used only if the journal is behind */
	if (!op)
		return -ENOMEM;
	int r = writeback_write(&s->wb, e->handle, e->offset, src, e->len, op);
	if (r != WB_DEFERRED) {
		free(client_op_of(op));
		session_put(s);
	} else {
		op_hold_buf(op, e); /* parked: it reads src when it retries */
	}
	return r;
}

static int writeback_op(struct session *s, const struct rc_sqe *e,
			struct dataset *ds, const char *key, struct op *op)
{
	switch (e->opcode) {
	case RC_OP_COMMIT:
		return writeback_commit(&s->wb, e->handle, op);
	case RC_OP_ABORT:
		return writeback_abort(&s->wb, e->handle, op);
	case RC_OP_RENAME:
		return writeback_rename(&s->wb, e->handle, key, op);
	default:
		return writeback_sync(&s->wb, e->handle, ds, key, op);
	}
}

/* COMMIT, SYNC, ABORT and RENAME may complete later (the journal's disk,
 * S3): they get an op. */
static int submit_wait_op(struct session *s, const struct rc_sqe *e)
{
	struct dataset *ds = NULL;
	char key[RC_MAX_KEY + 1] = ""; /* RENAME's new key, SYNC's prefix */
	int err;
	if (e->opcode == RC_OP_SYNC && e->handle == RC_SYNC_PREFIX) {
		if (!(ds = writable_dataset(s, e->dataset, &err)) ||
		    (err = copy_key(s, e, key, true)))
			return err;
	} else if (e->opcode == RC_OP_RENAME) {
		if ((err = copy_key(s, e, key, false)))
			return err;
	} /* other fields: validate_sqe */
	struct op *op = op_new(s, e);
	if (!op)
		return -ENOMEM;
	int r = writeback_op(s, e, ds, key, op);
	if (r != WB_DEFERRED) {
		op->opcode = RC_OP_NOP; /* completed here, not by the op */
		free(client_op_of(op));
		session_put(s);
	}
	return r == WB_DEFERRED ? DEFERRED : r;
}

static int submit_close(struct session *s, uint32_t h)
{
	if (h & RC_WRITE_HANDLE)
		return writeback_close(&s->wb, h);
	struct object *o = handle_get(s, h);
	if (!o)
		return -EBADF;
	s->handles[h] = NULL;
	s->handles_free[s->n_handles_free++] = h;
	s->n_handles--;
	object_put(s->sh->d, o);
	return 0;
}

static int submit_one(struct session *s, const struct rc_sqe *e,
		      struct rc_cqe *cqe)
{
	int err = validate_sqe(e);
	if (err)
		return err;
	switch (e->opcode) {
	case RC_OP_NOP:
		return 0;
	case RC_OP_OPEN:
		return submit_open(s, e);
	case RC_OP_LIST:
		return submit_list(s, e);
	case RC_OP_READ:
	case RC_OP_READ_INTO:
		return submit_read(s, e);
	case RC_OP_STAT:
		return submit_stat(s, e, cqe);
	case RC_OP_RELEASE:
		return lease_release(s, e->handle);
	case RC_OP_CLOSE:
		return submit_close(s, e->handle);
	case RC_OP_PREFETCH_PLAN:
		return submit_plan(s, e);
	case RC_OP_WRITE_OPEN:
		return submit_write_open(s, e);
	case RC_OP_WRITE:
		return submit_write(s, e);
	case RC_OP_COMMIT:
	case RC_OP_SYNC:
	case RC_OP_ABORT:
	case RC_OP_RENAME:
		return submit_wait_op(s, e);
	case RC_OP_READ_KEY:
		return readkey_submit(s, e);
	}
	return -EINVAL;
}

bool session_process(struct session *s)
{
	if (s->closed || !s->hdr)
		return false;
	uint32_t tail = atomic_load_explicit(&s->hdr->sq_tail,
					     memory_order_acquire);
	uint32_t n = validate_sq_pending(tail, s->sq_head, s->sq_entries);
	if (n == 0)
		return false;
	s->refs++; /* completions below may close the session */
	session_recheck_access(s);
	pass_ns = rc_now_ns();
	for (uint32_t i = 0; i < n && !s->closed; i++) {
		struct rc_sqe e;
		copy_from_client(&e, &s->sqes[s->sq_head & (s->sq_entries - 1)],
				 sizeof(e));
		s->sq_head++;
		s->sh->m.ops++;
		struct rc_cqe cqe = {.user_data = e.user_data,
				     .lease = RC_NO_LEASE};
		int r = submit_one(s, &e, &cqe);
		if (r == DEFERRED)
			continue;
		if (r < 0 && (r == -EINVAL || r == -EBADF || r == -EFAULT))
			s->sh->m.bad_entries++;
		cqe.res = r;
		post_cqe(s, &cqe);
	}
	pass_ns = 0;
	atomic_store_explicit(&s->hdr->sq_head, s->sq_head,
			      memory_order_release);
	session_put(s);
	return true;
}

/* ---- what readkey.c builds on (readkey.h) ------------------------------- */

int session_copy_key(struct session *s, const struct rc_sqe *e, char *key,
		     bool allow_empty)
{
	return copy_key(s, e, key, allow_empty);
}

struct dataset *session_readable_dataset(struct session *s, uint32_t id,
					 int *err)
{
	return readable_dataset(s, id, err);
}

bool session_lease_quota_full(struct session *s)
{
	return lease_quota_full(s);
}

int session_handle_open(struct session *s, struct object *o)
{
	return handle_alloc(s, o);
}

int session_handle_close(struct session *s, uint32_t h)
{
	return submit_close(s, h);
}
