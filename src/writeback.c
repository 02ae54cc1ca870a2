/* writeback.c - owns checkpoint write-back on a shard: write handles,
 * staging memory, the journal records of `local` durability, acknowledging
 * COMMIT at the right moment, the uploads (driving the upload engine from
 * the shard's reactor), SYNC, RENAME, and replaying the journal at start. */
#include "writeback.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "hugemem.h"
#include "journal.h"
#include "log.h"
#include "upload.h"
#include "workers.h"

#define WB_CHUNK (2u * HUGEMEM_PAGE) /* staging: huge pages, see hugemem.h */
#define DRAIN_NS (60ull * 1000000000ull) /* SIGTERM waits this for uploads */
/* Digest threads per shard: MD5 and SHA-256 of the parts run at ~0.45 GB/s
 * together on one core, about what a shard uploads; two keep the reactor
 * free of them. */
#define WB_HASH_THREADS 2

struct wtimer {
	uint64_t due_ns;
	void (*cb)(void *arg);
	void *arg;
	struct wtimer *next;
};

/* ---- the upload engine's driver: the shard's curl handle and timers ---- */

static int drv_add_transfer(void *ctx, struct s3_req *req)
{
	struct shard *sh = ctx;
	if (curl_multi_add_handle(sh->multi, s3_req_easy(req)) != CURLM_OK)
		return -EIO;
	sh->s3_inflight++;
	return 0;
}

static void drv_remove_transfer(void *ctx, struct s3_req *req)
{
	struct shard *sh = ctx;
	curl_multi_remove_handle(sh->multi, s3_req_easy(req));
	sh->s3_inflight--;
}

static int drv_add_timer(void *ctx, unsigned delay_ms, void (*cb)(void *),
			 void *arg)
{
	struct shard *sh = ctx;
	struct wtimer *t = malloc(sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->due_ns = now_ns() + (uint64_t)delay_ms * 1000000ull;
	t->cb = cb;
	t->arg = arg;
	struct wtimer **pp = &sh->wb_timers;
	while (*pp && (*pp)->due_ns <= t->due_ns)
		pp = &(*pp)->next;
	t->next = *pp;
	*pp = t;
	return 0;
}

static int drv_hash(void *ctx, void *job)
{
	struct shard *sh = ctx;
	return sh->workers ? workers_submit(sh->workers, upload_hash_run,
					    upload_hash_done, job)
			   : -ENOSYS;
}

static void writeback_arm_workers(struct shard *sh)
{
	if (!sh->workers)
		return;
	struct io_uring_sqe *sqe = reactor_sqe(sh);
	io_uring_prep_poll_add(sqe, workers_fd(sh->workers), POLLIN);
	io_uring_sqe_set_data(sqe, &sh->workers_ev);
}

void writeback_workers_ready(struct shard *sh)
{
	workers_reap(sh->workers);
	writeback_arm_workers(sh);
}

void writeback_run_timers(struct shard *sh)
{
	uint64_t now = now_ns();
	struct wtimer *t;
	while ((t = sh->wb_timers) && t->due_ns <= now) {
		sh->wb_timers = t->next;
		t->cb(t->arg);
		free(t);
	}
}

int64_t writeback_next_timer(const struct shard *sh, uint64_t now)
{
	const struct wtimer *t = sh->wb_timers;
	if (!t)
		return INT64_MAX;
	return t->due_ns > now ? (int64_t)(t->due_ns - now) : 0;
}

/* ---- staging chunks ------------------------------------------------------ */

/* Chunks go back to a per-shard spare list, never to the system: memory
 * the daemon touched before is cheap to fill again, fresh memory is not
 * (first touch of a page measured 7 s/GB on a VM, see hugemem.h). The list
 * holds at most staging_memory, the budget the configuration grants. */
static void chunk_put(struct shard *sh, uint8_t *c)
{
	memcpy(c, &sh->wb_spare, sizeof(void *));
	sh->wb_spare = c;
}

/* A chunk whose bytes outside [keep_off, keep_off + keep_len) are zero
 * (the caller writes that range at once). */
static uint8_t *chunk_get(struct shard *sh, size_t keep_off, size_t keep_len)
{
	uint8_t *c = sh->wb_spare;
	if (!c)
		return hugemem_alloc(WB_CHUNK);
	memcpy(&sh->wb_spare, c, sizeof(void *));
	memset(c, 0, keep_off);
	memset(c + keep_off + keep_len, 0, WB_CHUNK - keep_off - keep_len);
	return c;
}

static void chunks_release(struct shard *sh)
{
	while (sh->wb_spare) {
		uint8_t *c = sh->wb_spare;
		memcpy(&sh->wb_spare, c, sizeof(void *));
		hugemem_free(c, WB_CHUNK);
	}
}

/* ---- objects ------------------------------------------------------------ */

static void staging_free(struct shard *sh, struct wobject *w)
{
	for (uint32_t i = 0; i < w->n_chunks; i++) {
		if (w->chunks[i]) {
			chunk_put(sh, w->chunks[i]);
			sh->wb_staged -= WB_CHUNK;
		}
	}
	free(w->chunks);
	w->chunks = NULL;
	w->n_chunks = 0;
}

static void wobject_put(struct shard *sh, struct wobject *w)
{
	if (--w->refs > 0)
		return;
	staging_free(sh, w);
	if (w->prev)
		w->prev->next = w->next;
	else
		sh->wobjects = w->next;
	if (w->next)
		w->next->prev = w->prev;
	free(w->key);
	free(w);
}

static struct wobject *wobject_new(struct shard *sh, struct dataset *ds,
				   const char *key)
{
	struct wobject *w = calloc(1, sizeof(*w));
	if (!w || !(w->key = strdup(key))) {
		free(w);
		return NULL;
	}
	w->sh = sh;
	w->id = ++sh->wb_next_id;
	w->ds = ds;
	w->refs = 1;
	w->next = sh->wobjects;
	if (sh->wobjects)
		sh->wobjects->prev = w;
	sh->wobjects = w;
	return w;
}

static char *bucket_key(const struct wobject *w)
{
	size_t pl = strlen(w->ds->cfg->prefix), kl = strlen(w->key);
	char *k = malloc(pl + kl + 1);
	if (k) {
		memcpy(k, w->ds->cfg->prefix, pl);
		memcpy(k + pl, w->key, kl + 1);
	}
	return k;
}

/* ---- completion of waiters ---------------------------------------------- */

static void sync_one_done(struct op *op, int err)
{
	if (err && !op->err)
		op->err = err;
	if (--op->pending == 0)
		op_complete(op);
}

static void wake_syncs(struct wobject *w)
{
	struct waiter *s = w->syncs;
	w->syncs = NULL;
	while (s) {
		struct waiter *next = s->next;
		sync_one_done(s->op, w->err);
		free(s);
		s = next;
	}
}

static void ack_commit(struct wobject *w, int err)
{
	struct op *op = w->commit_op;
	if (!op)
		return;
	w->commit_op = NULL;
	op->err = err;
	op_complete(op);
}

/* ---- uploads ------------------------------------------------------------ */

static int read_staged(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct wobject *w = ctx;
	uint8_t *out = dst;
	while (len) {
		uint32_t c = (uint32_t)(off / WB_CHUNK);
		size_t in = off % WB_CHUNK;
		size_t n = WB_CHUNK - in < len ? WB_CHUNK - in : len;
		if (c < w->n_chunks && w->chunks[c])
			memcpy(out, w->chunks[c] + in, n);
		else
			memset(out, 0, n); /* never written: zeros */
		out += n;
		off += n;
		len -= n;
	}
	return 0;
}

static int read_journaled(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct wobject *w = ctx;
	struct shard *sh = w->sh;
	const struct journal_object *jo =
		journal_replayed(sh->journal, w->replay_index);
	return journal_read(sh->journal, jo, off, dst, len);
}

static void upload_start_for(struct shard *sh, struct wobject *w);

/* DONE records need no waiter: losing one only uploads again. */
static void flushed_nothing(void *ctx, int res)
{
	(void)ctx;
	(void)res;
}

static void upload_done(void *ctx, const struct upload_outcome *out)
{
	struct wobject *w = ctx;
	struct shard *sh = w->sh;
	w->up = NULL;
	if (w->restart) { /* renamed while uploading: again, new key */
		w->restart = false;
		upload_start_for(sh, w);
		wobject_put(sh, w);
		return;
	}
	w->err = out->err;
	if (out->err == 0) {
		w->state = W_DONE;
		snprintf(w->etag, sizeof(w->etag), "%s", out->etag);
		sh->m.wb_uploaded++;
		sh->m.wb_uploaded_bytes += w->size;
		if (w->journaled && sh->journal) {
			journal_append_done(sh->journal, w->id, out->etag);
			journal_flush(sh->journal, flushed_nothing, NULL);
		}
		staging_free(sh, w);
	} else {
		/* Acknowledged bytes stay journaled (uploaded again at the
		 * next start); with memory durability they are lost, which
		 * that level accepts. */
		w->state = W_FAILED;
		sh->m.wb_failed++;
		log_error("upload of %s/%s failed: %s %s", w->ds->cfg->name,
			  w->key, out->code, out->message);
	}
	if (w->ds->cfg->durability == DURABILITY_S3)
		ack_commit(w, out->err);
	wake_syncs(w);
	wobject_put(sh, w);
}

static void upload_start_for(struct shard *sh, struct wobject *w)
{
	char *key = bucket_key(w);
	struct upload_params p = {
		.bucket = w->ds->cfg->bucket,
		.key = key,
		.size = w->size,
		.read = w->replayed ? read_journaled : read_staged,
		.read_ctx = w,
		.part_size = w->ds->cfg->part_size,
		.concurrency = w->ds->cfg->upload_concurrency,
		.done = upload_done,
		.done_ctx = w,
	};
	int err = key ? 0 : -ENOMEM;
	if (!err)
		w->up = upload_start(sh->uploads, &p, &err);
	free(key);
	if (!w->up) {
		struct upload_outcome out = {.err = err};
		snprintf(out.message, sizeof(out.message), "%s", strerror(-err));
		w->refs++;
		upload_done(w, &out);
		return;
	}
	w->refs++; /* the upload's */
}

/* ---- session handles ---------------------------------------------------- */

static struct wobject *whandle(struct session *s, uint32_t h)
{
	if (!(h & RC_WRITE_HANDLE))
		return NULL;
	h &= ~RC_WRITE_HANDLE;
	return h < s->cap_whandles ? s->whandles[h] : NULL;
}

static int whandle_alloc(struct session *s, struct wobject *w, uint32_t *out)
{
	uint32_t i = 0;
	while (i < s->cap_whandles && s->whandles[i])
		i++;
	if (i == s->cap_whandles) {
		if (s->cap_whandles >= (1u << 16))
			return -EMFILE;
		uint32_t cap = s->cap_whandles ? s->cap_whandles * 2 : 16;
		struct wobject **n = realloc(s->whandles, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		memset(n + s->cap_whandles, 0,
		       (cap - s->cap_whandles) * sizeof(*n));
		s->whandles = n;
		s->cap_whandles = cap;
	}
	s->whandles[i] = w;
	*out = i | RC_WRITE_HANDLE;
	return 0;
}

int writeback_open(struct session *s, struct dataset *ds, const char *key,
		   uint32_t *handle)
{
	struct shard *sh = s->sh;
	if (!ds->cfg->writable)
		return -EROFS;
	if (!(s->access[ds->id] & RC_ACCESS_WRITE))
		return -EACCES;
	struct wobject *w = wobject_new(sh, ds, key);
	if (!w)
		return -ENOMEM;
	if (ds->cfg->durability == DURABILITY_LOCAL) {
		int err = sh->journal ? journal_append_open(sh->journal, w->id,
							    ds->cfg->name, key)
				      : -EIO;
		if (err) {
			wobject_put(sh, w);
			return err == -ENOSPC ? -ENOSPC : err;
		}
		w->journaled = true;
	}
	int err = whandle_alloc(s, w, handle);
	if (err) {
		if (w->journaled)
			journal_append_abort(sh->journal, w->id);
		wobject_put(sh, w);
	}
	return err;
}

static int stage(struct shard *sh, struct wobject *w, uint64_t off,
		 const uint8_t *src, uint64_t len)
{
	uint64_t end = off + len;
	uint32_t need = (uint32_t)((end + WB_CHUNK - 1) / WB_CHUNK);
	if (need > w->n_chunks) {
		uint8_t **n = realloc(w->chunks, need * sizeof(*n));
		if (!n)
			return -ENOMEM;
		memset(n + w->n_chunks, 0, (need - w->n_chunks) * sizeof(*n));
		w->chunks = n;
		w->n_chunks = need;
	}
	uint64_t fresh = 0;
	for (uint64_t c = off / WB_CHUNK; c < need; c++)
		fresh += w->chunks[c] ? 0 : WB_CHUNK;
	if (sh->wb_staged + fresh > sh->d->cfg.staging_bytes)
		return -ENOBUFS; /* staging full: the client waits (SYNC) */
	for (uint64_t pos = off; pos < end;) {
		uint32_t c = (uint32_t)(pos / WB_CHUNK);
		size_t in = pos % WB_CHUNK;
		size_t n = WB_CHUNK - in < end - pos ? WB_CHUNK - in : end - pos;
		if (!w->chunks[c]) {
			if (!(w->chunks[c] = chunk_get(sh, in, n)))
				return -ENOMEM;
			sh->wb_staged += WB_CHUNK;
		}
		memcpy(w->chunks[c] + in, src + (pos - off), n);
		pos += n;
	}
	if (end > w->size)
		w->size = end;
	return 0;
}

/* The journal first: a failed append stages nothing. */
static int try_write(struct shard *sh, struct wobject *w, uint64_t off,
		     const uint8_t *src, uint64_t len)
{
	int err = w->journaled ? journal_append_data(sh->journal, w->id, off,
						     src, len) : 0;
	if (!err)
		err = stage(sh, w, off, src, len);
	if (!err)
		sh->m.wb_written_bytes += len;
	return err;
}

/* A WRITE waiting for the journal's disk to catch up (its -EAGAIN): the
 * client's buffer stays valid, its op waits for the completion. */
struct parked_write {
	struct wobject *w;
	struct op *op;
	uint64_t off, len;
	const uint8_t *src;
};

static void parked_retry(void *ctx, int res)
{
	struct parked_write *pw = ctx;
	struct shard *sh = pw->w->sh;
	int err = res < 0 ? -EIO : try_write(sh, pw->w, pw->off, pw->src,
					     pw->len);
	if (err == -EAGAIN && journal_wait_room(sh->journal, parked_retry,
						pw) == 0)
		return; /* still behind: wait for the next write */
	pw->op->err = err == -ENOBUFS ? -EAGAIN : err;
	pw->op->cqe.res = (int32_t)pw->len;
	op_complete(pw->op);
	wobject_put(sh, pw->w);
	free(pw);
}

int writeback_write(struct session *s, uint32_t handle, uint64_t off,
		    const uint8_t *src, uint64_t len, struct op *op)
{
	struct shard *sh = s->sh;
	struct wobject *w = whandle(s, handle);
	if (!w)
		return -EBADF;
	if (w->state != W_OPEN)
		return -EINVAL; /* written after COMMIT or ABORT */
	if (off + len < off || off + len > RC_S3_MAX_OBJECT)
		return -EFBIG; /* S3's largest object */
	if (len == 0)
		return 0;
	int err = try_write(sh, w, off, src, len);
	if (err == -EAGAIN) { /* the journal's disk is behind */
		struct parked_write *pw = malloc(sizeof(*pw));
		if (!pw)
			return -ENOMEM;
		*pw = (struct parked_write){w, op, off, len, src};
		w->refs++;
		if (journal_wait_room(sh->journal, parked_retry, pw) == 0) {
			sh->m.wb_write_waits++;
			return WB_DEFERRED;
		}
		w->refs--;
		free(pw);
		return -EIO;
	}
	if (err)
		return err == -ENOBUFS ? -EAGAIN : err;
	return (int)len;
}

static void commit_flushed(void *ctx, int res)
{
	struct wobject *w = ctx;
	struct shard *sh = w->sh;
	if (w->ds->cfg->durability == DURABILITY_LOCAL)
		ack_commit(w, res < 0 ? -EIO : 0);
	wobject_put(sh, w);
}

int writeback_commit(struct session *s, uint32_t handle, struct op *op)
{
	struct shard *sh = s->sh;
	struct wobject *w = whandle(s, handle);
	if (!w)
		return -EBADF;
	if (w->state != W_OPEN)
		return -EINVAL;
	w->state = W_COMMITTED;
	enum rc_durability dur = w->ds->cfg->durability;
	if (dur != DURABILITY_MEMORY)
		w->commit_op = op;
	if (w->journaled) {
		w->refs++;
		int err = journal_append_commit(sh->journal, w->id, w->size,
						NULL);
		if (!err)
			err = journal_flush(sh->journal, commit_flushed, w);
		if (err) {
			w->commit_op = NULL;
			wobject_put(sh, w);
			w->state = W_OPEN;
			return err;
		}
	}
	sh->m.wb_committed++;
	upload_start_for(sh, w);
	return dur == DURABILITY_MEMORY ? 0 : WB_DEFERRED;
}

int writeback_abort(struct session *s, uint32_t handle)
{
	struct shard *sh = s->sh;
	struct wobject *w = whandle(s, handle);
	if (!w)
		return -EBADF;
	if (w->state != W_OPEN)
		return -EBUSY; /* acknowledged: it will reach S3 */
	w->state = W_ABORTED;
	if (w->journaled)
		journal_append_abort(sh->journal, w->id);
	staging_free(sh, w);
	return 0;
}

int writeback_rename(struct session *s, uint32_t handle, const char *key)
{
	struct shard *sh = s->sh;
	struct wobject *w = whandle(s, handle);
	if (!w)
		return -EBADF;
	if (w->state == W_ABORTED || w->state == W_FAILED)
		return -EINVAL;
	if (w->journaled && w->state != W_DONE) {
		int err = journal_append_rename(sh->journal, w->id, key);
		if (err)
			return err;
	}
	if (w->state == W_DONE) {
		/* In S3 already: a server-side copy (blocking, see notes). */
		char *from = bucket_key(w);
		char *nk = strdup(key);
		if (!from || !nk) {
			free(from);
			free(nk);
			return -ENOMEM;
		}
		free(w->key);
		w->key = nk;
		char *to = bucket_key(w);
		struct s3_result r;
		int err = to ? upload_rename_completed(sh->d->s3,
						      w->ds->cfg->bucket, from,
						      to, w->etag,
						      sizeof(w->etag), &r)
			     : -ENOMEM;
		free(from);
		free(to);
		return err;
	}
	char *nk = strdup(key);
	if (!nk)
		return -ENOMEM;
	free(w->key);
	w->key = nk;
	if (w->up) { /* committed, uploading: again under the new name */
		w->restart = true;
		upload_cancel(w->up);
	}
	return 0;
}

static bool sync_matches(const struct wobject *w, const struct dataset *ds,
			 const char *prefix)
{
	return !ds || (w->ds == ds && strncmp(w->key, prefix,
					      strlen(prefix)) == 0);
}

int writeback_sync(struct session *s, uint32_t handle, struct dataset *ds,
		   const char *prefix, struct op *op)
{
	struct shard *sh = s->sh;
	op->pending = 1; /* held until every object is counted */
	if (handle != RC_SYNC_ALL && handle != RC_SYNC_PREFIX) {
		struct wobject *w = whandle(s, handle);
		if (!w) {
			op->pending = 0;
			return -EBADF;
		}
		if (w->state == W_COMMITTED) {
			struct waiter *x = malloc(sizeof(*x));
			if (!x)
				return -ENOMEM;
			*x = (struct waiter){op, w->syncs};
			w->syncs = x;
			op->pending++;
		} else if (w->state == W_FAILED) {
			op->err = w->err;
		}
	} else {
		for (struct wobject *w = sh->wobjects; w; w = w->next) {
			if (w->state != W_COMMITTED ||
			    !sync_matches(w, handle == RC_SYNC_PREFIX ? ds : NULL,
					  prefix))
				continue;
			struct waiter *x = malloc(sizeof(*x));
			if (!x)
				continue;
			*x = (struct waiter){op, w->syncs};
			w->syncs = x;
			op->pending++;
		}
	}
	sync_one_done(op, 0);
	return WB_DEFERRED;
}

int writeback_close(struct session *s, uint32_t handle)
{
	struct shard *sh = s->sh;
	struct wobject *w = whandle(s, handle);
	if (!w)
		return -EBADF;
	if (w->state == W_OPEN) /* never committed: nothing acknowledged */
		writeback_abort(s, handle);
	s->whandles[handle & ~RC_WRITE_HANDLE] = NULL;
	wobject_put(sh, w);
	return 0;
}

void writeback_session_closed(struct session *s)
{
	for (uint32_t i = 0; i < s->cap_whandles; i++)
		if (s->whandles[i])
			writeback_close(s, i | RC_WRITE_HANDLE);
	free(s->whandles);
	s->whandles = NULL;
	s->cap_whandles = 0;
}

/* ---- read your writes ----------------------------------------------------- */

struct wobject *writeback_pending(struct shard *sh, const struct dataset *ds,
				  const char *key)
{
	for (struct wobject *w = sh->wobjects; w; w = w->next) {
		if (w->ds == ds && w->state == W_COMMITTED &&
		    strcmp(w->key, key) == 0) {
			w->refs++;
			return w; /* the list is newest first */
		}
	}
	return NULL;
}

int writeback_read(struct wobject *w, uint64_t off, void *dst, size_t len)
{
	if (w->state != W_COMMITTED)
		return -ESTALE; /* uploaded (staging freed) or failed */
	return w->replayed ? read_journaled(w, off, dst, len)
			   : read_staged(w, off, dst, len);
}

void writeback_put(struct wobject *w)
{
	wobject_put(w->sh, w);
}

/* ---- start, replay, drain ----------------------------------------------- */

/* Keep callback: uploads of other keys that merely start with this one. */
static bool other_key(void *ctx, const char *key, const char *upload_id)
{
	(void)upload_id;
	return strcmp(key, ctx) != 0;
}

/* A replayed object may have died mid-upload: its multipart upload is
 * abandoned, and this daemon's, since the journal says it was uploading
 * that key. Abort it now rather than after ABANDONED_AGE_S (at start,
 * before the new upload exists, so no age is needed; blocking). */
static void abort_stale_uploads(struct shard *sh, struct wobject *w)
{
	char *key = bucket_key(w);
	struct s3_result r;
	if (!key)
		return;
	int n = upload_cleanup_abandoned(sh->d->s3, w->ds->cfg->bucket, key, 0,
					 other_key, key, &r);
	if (n < 0)
		log_warn("journal: %s/%s: listing its old uploads: %s %s",
			 w->ds->cfg->name, w->key, r.code, r.message);
	free(key);
}

static void replay(struct shard *sh)
{
	struct journal *j = sh->journal;
	for (size_t i = 0; i < journal_n_discarded(j); i++) {
		const struct journal_object *o = journal_discarded(j, i);
		log_warn("journal: %s/%s was never committed: discarded",
			 o->dataset, o->key);
	}
	for (size_t i = 0; i < journal_n_replayed(j); i++) {
		const struct journal_object *o = journal_replayed(j, i);
		if (o->id > sh->wb_next_id)
			sh->wb_next_id = o->id;
	}
	for (size_t i = 0; i < journal_n_replayed(j); i++) {
		const struct journal_object *o = journal_replayed(j, i);
		struct dataset *ds = dataset_by_name(sh->d, o->dataset);
		if (!ds) {
			log_error("journal: %s/%s: no such dataset now; kept in "
				  "the journal", o->dataset, o->key);
			continue;
		}
		struct wobject *w = calloc(1, sizeof(*w));
		if (!w || !(w->key = strdup(o->key))) {
			free(w);
			continue;
		}
		w->sh = sh;
		w->id = o->id;
		w->ds = ds;
		w->size = o->size;
		w->state = W_COMMITTED;
		w->journaled = w->replayed = true;
		w->replay_index = i;
		w->refs = 1; /* dropped below: the upload keeps it */
		w->next = sh->wobjects;
		if (sh->wobjects)
			sh->wobjects->prev = w;
		sh->wobjects = w;
		log_info("journal: uploading %s/%s (%llu bytes) acknowledged "
			 "before the restart", o->dataset, o->key,
			 (unsigned long long)o->size);
		sh->m.wb_replayed++;
		abort_stale_uploads(sh, w);
		upload_start_for(sh, w);
		wobject_put(sh, w);
	}
}

/* Multipart uploads a daemon started and never finished (it died) cost
 * storage until aborted. Other nodes may write the same prefix, so only
 * old ones go. Blocking, at start. */
#define ABANDONED_AGE_S (6 * 3600)
static void cleanup_abandoned(struct daemon *d)
{
	for (uint32_t i = 0; i < d->n_datasets; i++) {
		const struct rc_dataset_config *c = d->datasets[i]->cfg;
		if (!c->writable)
			continue;
		struct s3_result r;
		int n = upload_cleanup_abandoned(d->s3, c->bucket, c->prefix,
						 ABANDONED_AGE_S, NULL, NULL,
						 &r);
		if (n > 0)
			log_info("dataset %s: aborted %d abandoned multipart "
				 "upload(s)", c->name, n);
		else if (n < 0)
			log_warn("dataset %s: listing abandoned uploads: %s %s",
				 c->name, r.code, r.message);
	}
}

int writeback_init(struct shard *sh, char *err, size_t errlen)
{
	struct daemon *d = sh->d;
	struct upload_driver drv = {
		.ctx = sh,
		.add_transfer = drv_add_transfer,
		.remove_transfer = drv_remove_transfer,
		.add_timer = drv_add_timer,
		.hash = drv_hash,
	};
	char id[96], host[64] = "";
	gethostname(host, sizeof(host) - 1);
	snprintf(id, sizeof(id), "ringcached@%s", host);
	sh->uploads = upload_engine_new(d->s3, &drv, id);
	if (!sh->uploads) {
		snprintf(err, errlen, "upload engine: out of memory");
		return -1;
	}
	char wname[16];
	snprintf(wname, sizeof(wname), "rc-hash%u", sh->id);
	sh->workers_ev.kind = EV_WORKERS;
	sh->workers = workers_new(WB_HASH_THREADS, wname);
	if (!sh->workers)
		log_warn("shard %u: no digest threads (%s): digests inline",
			 sh->id, strerror(errno));
	writeback_arm_workers(sh);
	if (sh->id == 0)
		cleanup_abandoned(d);
	if (!d->cfg.journal_path)
		return 0;
	char path[4200];
	if (sh->id == 0)
		snprintf(path, sizeof(path), "%s", d->cfg.journal_path);
	else
		snprintf(path, sizeof(path), "%s.%u", d->cfg.journal_path,
			 sh->id);
	struct journal_config jc = {.path = path,
				    .size_limit = d->cfg.journal_bytes};
	char jerr[256];
	sh->journal = journal_open(&jc, &sh->ring, jerr, sizeof(jerr));
	if (!sh->journal) {
		snprintf(err, errlen, "journal %s: %s", path, jerr);
		return -1;
	}
	replay(sh);
	return 0;
}

static bool must_wait(const struct shard *sh)
{
	for (const struct wobject *w = sh->wobjects; w; w = w->next)
		if (w->state == W_COMMITTED && !w->journaled)
			return true; /* acknowledged, only in memory */
	return false;
}

void writeback_drain(struct shard *sh)
{
	if (!sh->uploads)
		return;
	uint64_t until = now_ns() + DRAIN_NS;
	while (must_wait(sh) && now_ns() < until)
		reactor_poll_once(sh);
	/* Journaled objects are uploaded again at the next start. A cancel
	 * reports the upload done, which may drop the object's last
	 * reference: ours keeps it (and its next) readable until then. */
	for (struct wobject *w = sh->wobjects, *next; w; w = next) {
		w->refs++;
		if (w->up)
			upload_cancel(w->up);
		next = w->next;
		wobject_put(sh, w);
	}
	until = now_ns() + 10ull * 1000000000ull;
	while ((upload_engine_pending(sh->uploads) ||
		(sh->journal && journal_inflight(sh->journal))) &&
	       now_ns() < until)
		reactor_poll_once(sh);
}

void writeback_destroy(struct shard *sh)
{
	workers_free(sh->workers); /* no worker reads a part body after this */
	sh->workers = NULL;
	while (sh->wb_timers) {
		struct wtimer *t = sh->wb_timers;
		sh->wb_timers = t->next;
		free(t);
	}
	while (sh->wobjects) {
		struct wobject *w = sh->wobjects;
		w->refs = 1;
		wobject_put(sh, w);
	}
	if (sh->uploads && !upload_engine_pending(sh->uploads))
		upload_engine_free(sh->uploads);
	sh->uploads = NULL;
	chunks_release(sh);
	if (sh->journal)
		journal_close(sh->journal);
	sh->journal = NULL;
}
