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
#include <sys/random.h>
#include <unistd.h>

#include "budget.h"
#include "clock.h"
#include "daemon.h"
#include "fetch.h"
#include "hugemem.h"
#include "journal.h"
#include "log.h"
#include "upload.h"
#include "vec.h"
#include "workers.h"

#define WB_CHUNK (2u * HUGEMEM_PAGE) /* staging: huge pages, see hugemem.h */
#define DRAIN_NS (60ull * 1000000000ull) /* SIGTERM waits this for uploads */
#define WB_MAX_PENDING_RENAMES 8u /* RENAMEs of an object not yet in S3 */
#define WB_AGAIN_MAX_MS (30u * 60u * 1000u) /* longest pause between uploads */
/* Digest threads per shard: MD5 and SHA-256 of the parts run at ~0.45 GB/s
 * together on one core, about what a shard uploads; two keep the reactor
 * free of them. */
#define WB_HASH_THREADS 2

/* An engine timer: a reactor timer, listed for shutdown. */
struct wtimer {
	struct reactor_timer t;
	struct shard *sh;
	void (*cb)(void *arg);
	void *arg;
	struct rc_list link;      /* on shard->wb_timers */
};

/* An upload request waiting for its slot in the dataset's request budget
 * (budget.h); req NULL once the engine removed it (the timer still runs). */
struct wdelay {
	struct shard *sh;
	struct s3_req *req;
	enum budget_class cls;
	uint32_t ticket;
	struct rc_list link;      /* on shard->wb_delayed */
};

/* ---- the upload engine's driver: the shard's curl handle and timers ---- */

static int drv_add_timer(void *ctx, unsigned delay_ms, void (*cb)(void *),
			 void *arg);

static enum budget_class req_class(struct s3_req *req)
{
	const char *m = NULL;
	curl_easy_getinfo(s3_req_easy(req), CURLINFO_EFFECTIVE_METHOD, &m);
	return m && strcmp(m, "HEAD") == 0 ? BUDGET_GET : BUDGET_PUT;
}

static void drv_transfer_done(void *ctx, CURL *easy, CURLcode code)
{
	(void)easy;
	upload_transfer_done(ctx, code);
}

static int transfer_now(struct shard *sh, struct s3_req *req)
{
	return curlio_add(sh->curl, s3_req_easy(req), drv_transfer_done, req);
}

/* The slot's time came; a SlowDown may have taken it back meanwhile. */
static void delay_due(void *arg)
{
	struct wdelay *dl = arg;
	struct shard *sh = dl->sh;
	if (dl->req) {
		struct budget *b = upload_req_tag(dl->req);
		uint64_t wait = budget_ticket_valid(b, dl->cls, dl->ticket) ? 0 :
			budget_admit(b, dl->cls, rc_now_ns(), &dl->ticket);
		if (wait && drv_add_timer(sh, (unsigned)((wait + 999999) / 1000000),
					  delay_due, dl) == 0) {
			sh->m.s3_throttled_ns += wait;
			return;
		}
	}
	rc_list_del(&dl->link);
	if (dl->req && transfer_now(sh, dl->req) < 0)
		upload_transfer_done(dl->req, CURLE_FAILED_INIT);
	free(dl);
}

/* A request whose budget slot is later waits for it on a timer. */
static int drv_add_transfer(void *ctx, struct s3_req *req)
{
	struct shard *sh = ctx;
	enum budget_class cls = req_class(req);
	uint32_t ticket;
	uint64_t wait = budget_admit(upload_req_tag(req), cls, rc_now_ns(),
				     &ticket);
	struct wdelay *dl = wait ? calloc(1, sizeof(*dl)) : NULL;
	if (!dl || drv_add_timer(sh, (unsigned)((wait + 999999) / 1000000),
				 delay_due, dl) < 0) {
		free(dl);
		return transfer_now(sh, req); /* no memory to wait: go */
	}
	sh->m.s3_throttled_ns += wait;
	dl->sh = sh;
	dl->req = req;
	dl->cls = cls;
	dl->ticket = ticket;
	rc_list_add(&sh->wb_delayed, &dl->link);
	return 0;
}

static void drv_remove_transfer(void *ctx, struct s3_req *req)
{
	struct shard *sh = ctx;
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->wb_delayed) {
		struct wdelay *dl = rc_list_entry(pos, struct wdelay, link);
		if (dl->req == req) {
			dl->req = NULL;
			return;
		}
	}
	curlio_remove(sh->curl, s3_req_easy(req));
}

static void wtimer_due(struct reactor_timer *rt)
{
	struct wtimer *t = rc_container_of(rt, struct wtimer, t);
	rc_list_del(&t->link);
	void (*cb)(void *) = t->cb;
	void *arg = t->arg;
	free(t);
	cb(arg);
}

static void drv_replied(void *ctx, struct s3_req *req,
			const struct s3_result *r)
{
	struct shard *sh = ctx;
	enum budget_reply k = budget_classify(r->http_status, r->code);
	budget_reply(upload_req_tag(req), req_class(req), k, rc_now_ns());
	if (k == BUDGET_REPLY_SLOWDOWN)
		sh->m.s3_slowdowns++;
}

static int drv_add_timer(void *ctx, unsigned delay_ms, void (*cb)(void *),
			 void *arg)
{
	struct shard *sh = ctx;
	struct wtimer *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->sh = sh;
	t->cb = cb;
	t->arg = arg;
	rc_list_add(&sh->wb_timers, &t->link);
	reactor_timer_init(&t->t, wtimer_due);
	reactor_timer_after(sh->reactor, &t->t, (uint64_t)delay_ms * 1000000ull);
	return 0;
}

/* Parts queued together are hashed together (their MD5s in SIMD lanes). */
static const struct workers_kind hash_kind = {upload_hash_run_many,
					      WORKERS_MANY_MAX};

static int drv_hash(void *ctx, void *job)
{
	struct shard *sh = ctx;
	return sh->workers ? workers_submit_kind(sh->workers, &hash_kind,
						 upload_hash_done, job)
			   : -ENOSYS;
}

static void writeback_arm_workers(struct shard *sh)
{
	if (!sh->workers)
		return;
	struct io_uring_sqe *sqe = reactor_sqe(sh->reactor);
	io_uring_prep_poll_add(sqe, workers_fd(sh->workers), POLLIN);
	io_uring_sqe_set_data(sqe, &sh->workers_ev);
}

/* The digest threads finished jobs: they go on, the poll is queued again. */
static void workers_ready(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	struct shard *sh = rc_container_of(ev, struct shard, workers_ev);
	(void)cqe;
	workers_reap(sh->workers);
	writeback_arm_workers(sh);
}

/* ---- staging chunks ------------------------------------------------------ */

/* Chunks go back to a per-shard spare list, never to the system: memory
 * the daemon touched before is cheap to fill again, fresh memory is not
 * (first touch of a page measured 7 s/GB on a VM, see hugemem.h). The list
 * holds at most staging_memory, the budget the configuration grants. */
static void spare_publish(struct shard *sh)
{
	atomic_store_explicit(&sh->m.wb_staging_spare, sh->wb_spare_bytes,
			      memory_order_relaxed);
}

static void chunk_put(struct shard *sh, uint8_t *c)
{
	memcpy(c, &sh->wb_spare, sizeof(void *));
	sh->wb_spare = c;
	sh->wb_spare_bytes += WB_CHUNK;
	spare_publish(sh);
}

/* A chunk whose bytes outside [keep_off, keep_off + keep_len) are zero
 * (the caller writes that range at once). */
static uint8_t *chunk_get(struct shard *sh, size_t keep_off, size_t keep_len)
{
	uint8_t *c = sh->wb_spare;
	if (!c)
		return hugemem_alloc(WB_CHUNK);
	memcpy(&sh->wb_spare, c, sizeof(void *));
	sh->wb_spare_bytes -= WB_CHUNK;
	spare_publish(sh);
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
	sh->wb_spare_bytes = 0;
	spare_publish(sh);
}

/* ---- staging warmed at start (staging_warm) ------------------------------ */

/* The first checkpoint of a fresh daemon paid the first touch of its
 * staging on the reactor, inside the writers' blocked window: zeroing
 * fresh pages took 1.3 s of the reactor's CPU per 512 MiB on a VM whose
 * host backs a guest page at its first touch (perf/README, issue 21),
 * against 0.2 s for the whole save into reused chunks. So a shard that
 * may be written faults its staging in at start, on a digest thread, and
 * puts it on the spare list the saves take from. A job stays listed until
 * its done callback ran: a shutdown frees what a job faulted in. */
#define WB_WARM_BATCH 8u /* chunks per job (32 MiB): digests queue behind */

struct wwarm {
	struct shard *sh;
	unsigned want, n;         /* chunks asked for, chunks in c[] */
	uint8_t *c[WB_WARM_BATCH];
	struct rc_list link;      /* on shard->wb_warming */
};

static void warm_run(void *arg)
{
	struct wwarm *j = arg;
	for (; j->n < j->want; j->n++) {
		volatile uint8_t *c = hugemem_alloc(WB_CHUNK);
		if (!c)
			break; /* the saves allocate their own */
		/* A write per 4 KiB page: a huge page takes the first, small
		 * pages (no THP) each need theirs. Zero keeps chunk_get's
		 * promise that a spare chunk's bytes are zero or rewritten. */
		for (size_t off = 0; off < WB_CHUNK; off += 4096)
			c[off] = 0;
		j->c[j->n] = (uint8_t *)c;
	}
}

static void warm_free(struct wwarm *j)
{
	rc_list_del(&j->link);
	for (unsigned i = 0; i < j->n; i++)
		hugemem_free(j->c[i], WB_CHUNK);
	free(j);
}

/* The reactor's half: spare plus staged never passes staging_memory (a
 * save that began meanwhile allocated its own chunks). */
static void warm_done(void *arg)
{
	struct wwarm *j = arg;
	struct shard *sh = j->sh;
	while (j->n > 0 && sh->wb_spare_bytes + sh->wb_staged + WB_CHUNK <=
				   sh->d->cfg.staging_bytes)
		chunk_put(sh, j->c[--j->n]);
	warm_free(j);
}

static bool shard_may_write(const struct daemon *d)
{
	for (size_t i = 0; i < d->cfg.n_datasets; i++)
		if (d->cfg.datasets[i].writable)
			return true;
	return false;
}

/* Queues the warming of min(staging_warm, staging_memory) on the digest
 * threads; none without them (inline it would only move the cost). */
static void staging_warm(struct shard *sh)
{
	const struct rc_config *cfg = &sh->d->cfg;
	uint64_t bytes = cfg->staging_warm_bytes < cfg->staging_bytes
				 ? cfg->staging_warm_bytes
				 : cfg->staging_bytes;
	uint64_t chunks = bytes / WB_CHUNK;
	if (!sh->workers || !chunks || !shard_may_write(sh->d))
		return;
	while (chunks > 0) {
		struct wwarm *j = calloc(1, sizeof(*j));
		if (!j)
			return;
		j->sh = sh;
		j->want = chunks < WB_WARM_BATCH ? (unsigned)chunks
						 : WB_WARM_BATCH;
		chunks -= j->want;
		rc_list_add(&sh->wb_warming, &j->link);
		if (workers_submit(sh->workers, warm_run, warm_done, j) < 0) {
			warm_free(j);
			return;
		}
	}
}

/* ---- the backlog figures (metrics.h): committed, not yet in S3 ---- */

static void backlog_enter(struct shard *sh, struct wobject *w)
{
	if (w->in_backlog)
		return;
	w->in_backlog = true;
	w->committed_ns = rc_now_ns();
	atomic_fetch_add_explicit(&sh->m.wb_backlog_objects, 1,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&sh->m.wb_backlog_bytes, w->size,
				  memory_order_relaxed);
	if (!atomic_load_explicit(&sh->m.wb_oldest_ns, memory_order_relaxed))
		atomic_store_explicit(&sh->m.wb_oldest_ns, w->committed_ns,
				      memory_order_relaxed);
}

/* The oldest commit time among the shard's backlog, 0 if it is empty:
 * walked only when the oldest leaves, on the shard's thread. */
static uint64_t backlog_oldest(const struct shard *sh)
{
	uint64_t t = 0;
	const struct rc_list *pos;
	rc_list_for_each(pos, &sh->wobjects) {
		const struct wobject *w = wobject_of(pos);
		if (w->in_backlog && (!t || w->committed_ns < t))
			t = w->committed_ns;
	}
	return t;
}

static void backlog_leave(struct shard *sh, struct wobject *w)
{
	if (!w->in_backlog)
		return;
	w->in_backlog = false;
	atomic_fetch_sub_explicit(&sh->m.wb_backlog_objects, 1,
				  memory_order_relaxed);
	atomic_fetch_sub_explicit(&sh->m.wb_backlog_bytes, w->size,
				  memory_order_relaxed);
	if (w->committed_ns <= atomic_load_explicit(&sh->m.wb_oldest_ns, memory_order_relaxed))
		atomic_store_explicit(&sh->m.wb_oldest_ns, backlog_oldest(sh),
				      memory_order_relaxed);
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
	rc_list_del(&w->link);
	free(w->key);
	free(w->up_key);
	free(w->rename_key);
	free(w);
}

static void token_set(struct wobject *w, const uint8_t token[16])
{
	memcpy(w->token, token, 16);
	for (int i = 0; i < 16; i++)
		snprintf(w->token_hex + 2 * i, 3, "%02x", w->token[i]);
}

/* 128 random bits no client chooses or sees: an attacker writing the same
 * bytes to the key cannot make its upload pass for ours. */
static int token_new(struct wobject *w)
{
	uint8_t t[16];
	if (getrandom(t, sizeof(t), 0) != (ssize_t)sizeof(t))
		return -EIO;
	token_set(w, t);
	return 0;
}

static struct wobject *wobject_new(struct shard *sh, struct dataset *ds,
				   const char *key)
{
	struct wobject *w = calloc(1, sizeof(*w));
	if (!w || token_new(w) < 0 || !(w->key = strdup(key))) {
		free(w);
		return NULL;
	}
	w->sh = sh;
	w->id = ++sh->wb_next_id;
	w->ds = ds;
	w->refs = 1;
	w->uid = WB_UID_UNKNOWN;
	rc_list_add(&sh->wobjects, &w->link);
	return w;
}

static char *bucket_key(const struct wobject *w)
{
	return dataset_bucket_key(w->ds, w->key);
}

/* S3 keys are at most 1024 bytes: a longer one is refused when named
 * (WRITE_OPEN, RENAME), never acknowledged and then failed. */
static bool key_fits(const struct dataset *ds, const char *key)
{
	return strlen(ds->cfg->prefix) + strlen(key) <= RC_MAX_KEY;
}

static void left_behind(const struct dataset *ds, const char *bkey,
			const char *code, const char *message)
{
	log_warn("dataset %s: s3://%s/%s (renamed) left behind: %s %s",
		 ds->cfg->name, ds->cfg->bucket, bkey, code, message);
}

/* Blocking DeleteObject of an object an upload left under a name the
 * object no longer has (a RENAME overtook it): only off the reactor, on
 * a worker (the start-up clean-up). */
static void delete_old_name_blocking(struct s3_client *s3,
				     const struct dataset *ds,
				     const char *bkey)
{
	struct s3_req_params p = {.op = S3_DELETE_OBJECT,
				  .bucket = ds->cfg->bucket, .key = bkey};
	struct s3_result r;
	if (s3_perform(s3, &p, &r, NULL, NULL) < 0 && r.err != -ENOENT)
		left_behind(ds, bkey, r.code, r.message);
}

/* ---- completion of waiters ---------------------------------------------- */

void writeback_set_completion(struct shard *sh, void (*fn)(struct op *))
{
	sh->wb_op_done = fn;
}

/* Through the callback the shard's owner registered: no call up. */
static void op_done(struct op *op)
{
	op->sh->wb_op_done(op);
}

static void sync_one_done(struct op *op, int err)
{
	if (err && !op->err)
		op->err = err;
	if (--op->pending == 0)
		op_done(op);
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
	op_done(op);
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

/* A part straight from staging (upload_view_fn): no copy into a part
 * buffer on the reactor. Staging stays until upload_done, and a committed
 * object's chunks never change, so a failed part is resent from them. A
 * range with a chunk never written (zeros) is read instead. */
static int view_staged(void *ctx, uint64_t off, size_t len,
		       struct s3_piece *pieces, unsigned max)
{
	struct wobject *w = ctx;
	unsigned n = 0;
	while (len) {
		uint32_t c = (uint32_t)(off / WB_CHUNK);
		size_t in = off % WB_CHUNK;
		size_t take = WB_CHUNK - in < len ? WB_CHUNK - in : len;
		if (c >= w->n_chunks || !w->chunks[c])
			return 0;
		if (n < max)
			pieces[n] = (struct s3_piece){w->chunks[c] + in, take};
		n++;
		off += take;
		len -= take;
	}
	return (int)n;
}

static int read_journaled(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct wobject *w = ctx;
	struct shard *sh = w->sh;
	const struct journal_object *jo =
		journal_replayed(sh->journal, w->replay_index);
	return journal_read(sh->journal, jo, off, dst, len);
}

/* ---- one change of an S3 key at a time ---------------------------------- */

/* Whether rel, a key of ds, is bucket key bkey of bucket. */
static bool names_key(const struct dataset *ds, const char *rel,
		      const char *bucket, const char *bkey)
{
	const char *prefix = ds->cfg->prefix;
	size_t n = strlen(prefix);
	return rel && strcmp(ds->cfg->bucket, bucket) == 0 &&
	       strncmp(bkey, prefix, n) == 0 && strcmp(bkey + n, rel) == 0;
}

/* Whether an object other than self changes bucket/bkey in S3 now (an
 * upload, an old name's DELETE, a RENAME's copy, which ends with the
 * DELETE of its source) or waits to, asked for before seq. S3 keeps
 * whichever change lands last, and two in flight land in any order: an
 * older save's Complete could land over a newer one's, a copy's DELETE
 * of its source remove a newer upload to that name. So the changes of a
 * key go one at a time, in the order they were asked for. */
static bool key_taken(const struct shard *sh, const struct wobject *self,
		      const char *bucket, const char *bkey, uint64_t seq)
{
	const struct rc_list *pos;
	rc_list_for_each(pos, &sh->wobjects) {
		const struct wobject *x = wobject_of(pos);
		if (x == self)
			continue;
		if ((x->up || x->del) && x->up_key &&
		    strcmp(x->ds->cfg->bucket, bucket) == 0 &&
		    strcmp(x->up_key, bkey) == 0)
			return true;
		bool waits = (x->key_wait || x->cleanup_wait) &&
			     x->change_seq < seq;
		if ((x->copy || waits) && names_key(x->ds, x->key, bucket, bkey))
			return true;
		if ((x->copy || (waits && x->rename_op)) &&
		    names_key(x->ds, x->rename_key, bucket, bkey))
			return true;
	}
	return false;
}

/* w waits (holding a reference) until key_waiters_start finds its key
 * free. */
static void key_wait(struct shard *sh, struct wobject *w)
{
	if (w->key_wait)
		return;
	w->key_wait = true;
	w->refs++;
	sh->wb_key_waiters++;
	sh->m.wb_key_waits++;
}

static void key_waiters_start(struct shard *sh);

static void upload_start_for(struct shard *sh, struct wobject *w);

/* The old name's DELETE ended: the upload under the new name goes now,
 * after it, so that a RENAME back to the old name cannot be undone by a
 * DELETE landing late. */
static void old_name_deleted(void *ctx, const struct upload_outcome *out)
{
	struct wobject *w = ctx;
	struct shard *sh = w->sh;
	w->del = NULL;
	if (out->err)
		left_behind(w->ds, w->up_key, out->code, out->message);
	upload_start_for(sh, w);
	wobject_put(sh, w); /* the DELETE's (the ended upload's) */
	key_waiters_start(sh);
}

/* The upload landed under a name a RENAME has since replaced: that copy
 * goes, through the upload engine (retries, budget, no reactor stall),
 * and the upload under the new name follows (old_name_deleted). The
 * DELETE carries the ETag the upload got (If-Match): another writer's
 * object under that name since is left alone. False if the DELETE could
 * not even start: the copy is left behind. */
static bool delete_old_name(struct shard *sh, struct wobject *w,
			    const char *etag)
{
	struct upload_delete_params p = {
		.bucket = w->ds->cfg->bucket, .key = w->up_key, .if_match = etag,
		.done = old_name_deleted, .done_ctx = w, .tag = w->ds->budget,
	};
	int err = -ENOMEM;
	if (w->up_key)
		w->del = upload_delete_start(sh->uploads, &p, &err);
	if (!w->del && w->up_key)
		left_behind(w->ds, w->up_key, "", strerror(-err));
	return w->del != NULL;
}

/* DONE records need no waiter: losing one only uploads again. */
static void flushed_nothing(void *ctx, int res)
{
	(void)ctx;
	(void)res;
}

/* A committed object the next start must not upload: its records are
 * closed with ABORT. No waiter either: losing the record only uploads it
 * again, which the replay's own checks then settle. */
static void unjournal(struct shard *sh, struct wobject *w)
{
	if (!w->journaled || !sh->journal)
		return;
	journal_append_abort(sh->journal, w->id);
	journal_flush(sh->journal, flushed_nothing, NULL);
	w->journaled = false;
}

/* S3 refused the object for good (a 4xx, an overwrite refused, a request
 * that cannot be made): uploading again at the next start would fail the
 * same way while its records kept the journal from rewinding, so it is
 * dropped from the journal. Not so for credentials (a refresh may cure
 * them) and for a failure a later try could cure, whatever its status
 * (429, 400 RequestTimeout, a body damaged on the way: BadDigest,
 * XAmzContentSHA256Mismatch; the journal's bytes are checked). Those and
 * the other failures (S3 down past the retries, a cancel at shutdown)
 * leave the bytes journaled: uploaded again at the next start, and the
 * curable ones in a while too (again_later), from staging, which is all
 * a memory-durability object has. */
static bool failed_for_good(const struct upload_outcome *out)
{
	if (out->err == -EEXIST || out->err == -EINVAL)
		return true;
	return !out->transient && out->http_status >= 400 &&
	       out->http_status < 500 &&
	       out->err != -EKEYREJECTED && out->err != -EKEYEXPIRED;
}

/* Why an upload or copy failed, in one phrase (s3_result_reason). */
static const char *outcome_reason(const struct upload_outcome *out, int err,
				  char *buf, size_t len)
{
	struct s3_result r;
	upload_outcome_result(out, &r);
	r.err = err;
	if (!r.code[0] && !r.message[0])
		snprintf(r.message, sizeof(r.message), "%s", strerror(-err));
	return s3_result_reason(&r, buf, len);
}

/* ---- failures a SYNC reports (struct wb_failed) ------------------------ */

static void failed_count(struct shard *sh, int64_t d)
{
	atomic_fetch_add_explicit(&sh->m.wb_failed_objects, (uint64_t)d,
				  memory_order_relaxed);
}

static void failed_free(struct shard *sh, struct wb_failed *f)
{
	failed_count(sh, -1);
	rc_list_del(&f->link);
	free(f->key);
	free(f);
}

/* A later object of the key landed: S3 has the key again. */
static void failed_forget(struct shard *sh, const struct dataset *ds,
			  const char *key)
{
	struct rc_list *pos, *tmp;
	rc_list_for_each_safe(pos, tmp, &sh->wb_failed) {
		struct wb_failed *f = rc_list_entry(pos, struct wb_failed, link);
		if (f->ds == ds && strcmp(f->key, key) == 0)
			failed_free(sh, f);
	}
}

/* Objects replayed from a journal written before uids (COMMIT flag 4)
 * have none: their failures are in the log and the metrics only. */
static void failed_remember(struct shard *sh, const struct wobject *w)
{
	if (w->uid == WB_UID_UNKNOWN)
		return;
	struct wb_failed *oldest = NULL;
	uint32_t n = 0;
	struct rc_list *pos, *tmp;
	rc_list_for_each_safe(pos, tmp, &sh->wb_failed) {
		struct wb_failed *f = rc_list_entry(pos, struct wb_failed, link);
		if (f->uid != w->uid)
			continue;
		if (f->ds == w->ds && strcmp(f->key, w->key) == 0) {
			failed_free(sh, f); /* the newer failure replaces it */
			continue;
		}
		if (!oldest)
			oldest = f;
		n++;
	}
	/* One uid's failures never push out another's. */
	if (n >= WB_FAILED_PER_UID)
		failed_free(sh, oldest);
	struct wb_failed *f = calloc(1, sizeof(*f));
	if (!f || !(f->key = strdup(w->key))) {
		free(f);
		log_error("dataset %s: out of memory: a SYNC of all objects "
			  "will not report the failure of %s", w->ds->cfg->name,
			  rc_esc(w->key));
		return;
	}
	f->uid = w->uid;
	f->ds = w->ds;
	f->err = w->err ? w->err : -EIO;
	rc_list_add_tail(&sh->wb_failed, &f->link);
	failed_count(sh, 1);
}

/* ---- failed uploads go again ------------------------------------------- */

static void again_due(void *arg)
{
	struct wobject *w = arg;
	struct shard *sh = w->sh;
	w->again_pending = false;
	if (w->state == W_FAILED && !w->superseded && !w->evicted &&
	    w->ds->enabled && !sh->d->stopping) {
		char *key = bucket_key(w);
		log_info("dataset %s: upload of s3://%s/%s again (%u after "
			 "failures)", w->ds->cfg->name, w->ds->cfg->bucket,
			 rc_esc(key ? key : w->key), w->agains);
		free(key);
		w->state = W_COMMITTED;
		w->err = 0;
		backlog_enter(sh, w);
		upload_start_for(sh, w);
	}
	wobject_put(sh, w);
}

/* A failure a later try could cure, past the engine's retries (an S3
 * outage longer than write_retry_budget): the object goes again after a
 * pause, from the bytes the shard still holds (the pause's reference
 * keeps its staging), so it reaches S3 when S3 is back rather than at the
 * next start; unless a later object takes its key meanwhile
 * (supersede_failed). The pause is retry_budget, doubling up to
 * WB_AGAIN_MAX_MS. Not with durability s3, whose COMMIT already failed.
 * True when the next try is set. */
static bool again_later(struct shard *sh, struct wobject *w,
			const struct upload_outcome *out)
{
	if (!(out->transient || out->err == -EKEYREJECTED ||
	      out->err == -EKEYEXPIRED) ||
	    w->ds->cfg->durability == DURABILITY_S3 || w->again_pending ||
	    w->superseded || sh->d->stopping)
		return false;
	uint64_t ms = (uint64_t)s3_client_config(sh->d->s3)->retry_budget_ms
		      << (w->agains < 16 ? w->agains : 16);
	if (ms > WB_AGAIN_MAX_MS)
		ms = WB_AGAIN_MAX_MS;
	if (drv_add_timer(sh, (unsigned)ms, again_due, w) < 0)
		return false;
	w->agains++;
	w->again_pending = true;
	w->refs++;
	return true;
}

/* The writer's latest bytes for ds's key are now another object's (a
 * COMMIT, a RENAME onto the key): an older object of that key waiting to
 * go again must not, or it would land over them. As at a restart
 * (journal.h), it leaves the journal. An older one uploading right now
 * is not stopped: two uploads of a key in flight end with the last
 * Complete, as they always did. */
static void supersede_failed(struct shard *sh, const struct dataset *ds,
			     const char *key)
{
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->wobjects) {
		struct wobject *o = wobject_of(pos);
		if (!o->again_pending || o->superseded || o->ds != ds ||
		    strcmp(o->key, key) != 0)
			continue;
		o->superseded = true;
		log_warn("dataset %s: %s was committed again: the older bytes, "
			 "whose upload failed, are not uploaded again",
			 ds->cfg->name, rc_esc(key));
		sh->m.wb_superseded++;
		unjournal(sh, o);
		staging_free(sh, o); /* nothing reads a failed object's */
	}
}

static void upload_failed(struct shard *sh, struct wobject *w,
			  const struct upload_outcome *out)
{
	const struct rc_dataset_config *c = w->ds->cfg;
	bool for_good = failed_for_good(out);
	char *key = bucket_key(w);
	const char *shown = rc_esc(key ? key : w->key);
	w->state = W_FAILED;
	if (out->err == -ECANCELED && sh->d->stopping) {
		/* A shutdown's cancel is no failure where the journal keeps
		 * the bytes. */
		rc_log(w->journaled ? RC_LOG_INFO : RC_LOG_WARN,
		       "dataset %s: upload of s3://%s/%s stopped by "
		       "shutdown: %s", c->name, c->bucket, shown, w->journaled ?
		       "journaled, uploaded again at the next start" :
		       "not journaled (durability is not local): not in S3");
		free(key);
		if (w->journaled)
			return;
		sh->m.wb_failed++;
		return;
	}
	sh->m.wb_failed++;
	if (for_good)
		sh->m.wb_rejected++;
	bool again = !for_good && again_later(sh, w, out);
	char reason[512];
	log_error("dataset %s: upload of s3://%s/%s failed%s: %s",
		  c->name, c->bucket, shown,
		  for_good ? " for good, dropped from the journal"
		  : again && w->journaled ? " (uploaded again in a while; "
					    "journaled for the next start)"
		  : again ? " (uploaded again in a while; not journaled)"
		  : w->journaled ? " (journaled: uploaded again at the next "
				   "start)" : "",
		  outcome_reason(out, out->err, reason, sizeof(reason)));
	free(key);
	if (for_good) {
		unjournal(sh, w);
		staging_free(sh, w);
	}
}

static void upload_ended(struct shard *sh, struct wobject *w,
			 const struct upload_outcome *out)
{
	w->up = NULL;
	if (w->restart && out->err == -ECANCELED && sh->d->stopping)
		w->restart = false; /* the drain's cancel: the journal has it */
	if (w->restart) { /* renamed while uploading: again, new key */
		w->restart = false;
		/* It landed under the old name first: that copy goes, then
		 * the upload (the reference passes to the DELETE). */
		if (out->err == 0 && delete_old_name(sh, w, out->etag))
			return;
		upload_start_for(sh, w);
		wobject_put(sh, w);
		return;
	}
	w->err = out->err;
	backlog_leave(sh, w);
	if (out->err == 0) {
		w->state = W_DONE;
		snprintf(w->etag, sizeof(w->etag), "%s", out->etag);
		fetch_forget_missing(sh, w->ds, w->key);
		failed_forget(sh, w->ds, w->key);
		sh->m.wb_uploaded++;
		sh->m.wb_uploaded_bytes += w->size;
		if (w->journaled && sh->journal) {
			journal_append_done(sh->journal, w->id, out->etag);
			journal_flush(sh->journal, flushed_nothing, NULL);
		}
		staging_free(sh, w);
	} else {
		upload_failed(sh, w, out);
		if (!sh->d->stopping)
			failed_remember(sh, w);
	}
	if (w->ds->cfg->durability == DURABILITY_S3)
		ack_commit(w, out->err);
	wake_syncs(w);
	wobject_put(sh, w);
}

static void upload_done(void *ctx, const struct upload_outcome *out)
{
	struct wobject *w = ctx;
	struct shard *sh = w->sh;
	upload_ended(sh, w, out);
	key_waiters_start(sh);
}

static void upload_start_for(struct shard *sh, struct wobject *w)
{
	if (!w->change_seq) /* a restart under a new name keeps its turn */
		w->change_seq = ++sh->wb_change_seq;
	/* The start-up clean-up aborts the multipart uploads of replayed
	 * keys: none of this shard's starts before it has ended (held by a
	 * reference, started by cleanups_ended). */
	if (sh->wb_cleaning) {
		if (!w->cleanup_wait) {
			w->cleanup_wait = true;
			w->refs++;
		}
		return;
	}
	char *key = bucket_key(w);
	if (key && key_taken(sh, w, w->ds->cfg->bucket, key, w->change_seq)) {
		free(key);
		key_wait(sh, w);
		return;
	}
	struct upload_params p = {
		.bucket = w->ds->cfg->bucket,
		.key = key,
		.size = w->size,
		.read = read_staged,
		.view = view_staged,
		.read_ctx = w,
		.part_size = w->ds->cfg->part_size,
		.concurrency = w->ds->cfg->upload_concurrency,
		.done = upload_done,
		.done_ctx = w,
		.no_overwrite = w->ds->cfg->no_overwrite,
		.token = w->token_hex,
		.tag = w->ds->budget,
	};
	if (w->replayed) { /* a file read: on the digest workers (upload.h) */
		p.read = NULL;
		p.view = NULL;
		p.read_slow = read_journaled;
	}
	int err = key ? 0 : -ENOMEM;
	if (!err)
		w->up = upload_start(sh->uploads, &p, &err);
	free(w->up_key);
	w->up_key = key;
	if (!w->up) {
		struct upload_outcome out = {.err = err};
		snprintf(out.message, sizeof(out.message), "%s", strerror(-err));
		w->refs++;
		upload_done(w, &out);
		return;
	}
	w->refs++; /* the upload's */
}

/* ---- a client's write handles --------------------------------------------- */

static struct wobject *whandle(struct wb_client *wc, uint32_t h)
{
	if (!(h & RC_WRITE_HANDLE))
		return NULL;
	h &= ~RC_WRITE_HANDLE;
	return h < wc->cap_handles ? wc->handles[h] : NULL;
}

/* A reload may have removed the dataset or the writer's uid from its
 * write_* lists since WRITE_OPEN: no more bytes reach S3 through it. */
static int write_revoked(const struct wb_client *wc, const struct wobject *w)
{
	if (!w->ds->enabled)
		return -ENOENT;
	if (!w->ds->cfg->writable)
		return -EROFS;
	return wc->access[w->ds->id] & RC_ACCESS_WRITE ? 0 : -EACCES;
}

static int whandle_alloc(struct wb_client *wc, struct wobject *w, uint32_t *out)
{
	uint32_t i = 0;
	while (i < wc->cap_handles && wc->handles[i])
		i++;
	if (i == wc->cap_handles) {
		if (wc->cap_handles >= (1u << 16))
			return -EMFILE;
		if (RC_GROW_FROM(wc->handles, wc->cap_handles, i + 1, 16) < 0)
			return -ENOMEM;
	}
	wc->handles[i] = w;
	*out = i | RC_WRITE_HANDLE;
	return 0;
}

int writeback_open(struct wb_client *wc, struct dataset *ds, const char *key,
		   uint32_t *handle)
{
	struct shard *sh = wc->sh;
	if (!ds->cfg->writable)
		return -EROFS;
	if (!(wc->access[ds->id] & RC_ACCESS_WRITE))
		return -EACCES;
	if (!key_fits(ds, key))
		return -ENAMETOOLONG;
	struct wobject *w = wobject_new(sh, ds, key);
	if (!w)
		return -ENOMEM;
	w->usage = wc->usage;
	w->uid = wc->usage ? wc->usage->uid : WB_UID_UNKNOWN;
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
	int err = whandle_alloc(wc, w, handle);
	if (err) {
		if (w->journaled)
			journal_append_abort(sh->journal, w->id);
		wobject_put(sh, w);
	}
	return err;
}

/* Staging chunks a write of [off, off+len) would add. */
static uint64_t staging_fresh(const struct wobject *w, uint64_t off,
			      uint64_t len)
{
	uint64_t fresh = 0, end = (off + len + WB_CHUNK - 1) / WB_CHUNK;
	for (uint64_t c = off / WB_CHUNK; c < end; c++)
		fresh += c < w->n_chunks && w->chunks[c] ? 0 : WB_CHUNK;
	return fresh;
}

/* Staging of objects not yet committed is charged to the writer's uid:
 * one open byte holds a whole chunk, and a uid holding staging_memory
 * with open objects made every writer of the shard wait. Committed
 * bytes leave the charge: they are on their way to S3. */
static int staged_charge(struct shard *sh, struct wobject *w, uint64_t n)
{
	if (!w->usage || !n)
		return 0;
	struct quota *q = &sh->d->quota;
	int err = quota_charge(q, &w->usage->staged_bytes, n,
			       q->v->staged_per_uid, REFUSED_STAGED_PER_UID);
	if (!err)
		w->uid_staged += n;
	return err;
}

static void staged_release(struct wobject *w)
{
	if (w->usage)
		quota_uncharge(&w->usage->staged_bytes, w->uid_staged);
	w->usage = NULL;
	w->uid_staged = 0;
}

/* Staging held by objects waiting to go again (again_later) is the first
 * to go when a new save needs it: newer saves never wait for older ones
 * that S3 would not take. Such an object's bytes stay in the journal
 * (local: the next start uploads them) or are lost (memory, as they were
 * before objects went again). Oldest first; frees at least need bytes if
 * it can. */
static void again_evict(struct shard *sh, uint64_t need)
{
	struct rc_list *pos;
	uint64_t freed = 0;
	for (pos = sh->wobjects.prev; pos != &sh->wobjects && freed < need;
	     pos = pos->prev) {
		struct wobject *o = wobject_of(pos);
		if (!o->again_pending || o->evicted || !o->chunks)
			continue;
		uint64_t before = sh->wb_staged;
		staging_free(sh, o);
		freed += before - sh->wb_staged;
		o->evicted = true;
		char *key = bucket_key(o);
		log_warn("dataset %s: s3://%s/%s: its staging went to newer "
			 "saves: %s", o->ds->cfg->name, o->ds->cfg->bucket,
			 rc_esc(key ? key : o->key), o->journaled ?
			 "not uploaded again before the next start (journaled)"
			 : "not uploaded (durability is not local)");
		free(key);
	}
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
		again_evict(sh, sh->wb_staged + fresh -
				    sh->d->cfg.staging_bytes);
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

/* The dataset's max_object_size, and what its part size can upload: a
 * sparse WRITE far out would otherwise be acknowledged and upload that
 * many zeros, or never upload at all. */
static uint64_t largest_object(const struct dataset *ds)
{
	const struct rc_dataset_config *c = ds->cfg;
	uint64_t parts = c->part_size * UPLOAD_MAX_PARTS;
	return c->max_object_size < parts ? c->max_object_size : parts;
}

/* The journal first: a failed append stages nothing. */
static int try_write(struct shard *sh, struct wobject *w, uint64_t off,
		     const uint8_t *src, uint64_t len)
{
	uint64_t fresh = staging_fresh(w, off, len);
	int err = staged_charge(sh, w, fresh);
	if (err)
		return err;
	if (w->journaled)
		err = journal_append_data(sh->journal, w->id, off, src, len);
	if (!err)
		err = stage(sh, w, off, src, len);
	if (err && w->usage) { /* nothing staged (or too little to matter) */
		quota_uncharge(&w->usage->staged_bytes, fresh);
		w->uid_staged -= fresh;
	}
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
	op_done(pw->op);
	wobject_put(sh, pw->w);
	free(pw);
}

int writeback_write(struct wb_client *wc, uint32_t handle, uint64_t off,
		    const uint8_t *src, uint64_t len, struct op *op)
{
	struct shard *sh = wc->sh;
	struct wobject *w = whandle(wc, handle);
	if (!w)
		return -EBADF;
	if (w->state != W_OPEN)
		return -EINVAL; /* written after COMMIT or ABORT */
	int revoked = write_revoked(wc, w);
	if (revoked)
		return revoked;
	if (off + len < off || off + len > largest_object(w->ds))
		return -EFBIG;
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

/* The COMMIT record, then the flush that acknowledges it. 0 or -errno. */
static int commit_journal(struct shard *sh, struct wobject *w)
{
	w->refs++;
	uint32_t uid = (uint32_t)w->uid;
	int err = journal_append_commit(sh->journal, w->id, w->size, NULL,
					w->token, w->uid == WB_UID_UNKNOWN
						  ? NULL : &uid);
	if (!err)
		err = journal_flush(sh->journal, commit_flushed, w);
	if (err)
		wobject_put(sh, w);
	return err;
}

static void commit_go(struct shard *sh, struct wobject *w)
{
	staged_release(w);
	sh->m.wb_committed++;
	backlog_enter(sh, w);
	supersede_failed(sh, w->ds, w->key);
	upload_start_for(sh, w);
}

static void abort_object(struct shard *sh, struct wobject *w);

/* A COMMIT whose object's DATA records a journal rewind dropped (it was
 * open, so nothing of it was acknowledged; journal.h): its staged bytes
 * go into the log again before the COMMIT record. */
struct relog {
	struct wobject *w;
	uint64_t next;    /* object offset logged next */
	unsigned passes;
};

static void relog_resume(void *ctx, int res);

/* 0 once every staged byte is in the log, WB_DEFERRED while waiting for
 * the journal's disk (relog_resume goes on), or -errno. */
static int relog_run(struct relog *rl)
{
	struct wobject *w = rl->w;
	struct shard *sh = w->sh;
	for (;;) {
		while (rl->next < w->size) {
			uint64_t c = rl->next / WB_CHUNK;
			uint64_t end = (c + 1) * WB_CHUNK < w->size
					       ? (c + 1) * WB_CHUNK : w->size;
			int err = 0;
			if (c < w->n_chunks && w->chunks[c])
				err = journal_append_data(sh->journal, w->id,
					rl->next, w->chunks[c] +
					rl->next % WB_CHUNK, end - rl->next);
			if (err == -EAGAIN)
				return journal_wait_room(sh->journal,
					relog_resume, rl) == 0 ? WB_DEFERRED
							       : -EIO;
			if (err)
				return err;
			rl->next = end;
			if (journal_dropped(sh->journal, w->id))
				break; /* rewound meanwhile: from the start */
		}
		if (!journal_dropped(sh->journal, w->id))
			return 0;
		/* After a rewind the log holds only open objects' OPENs: the
		 * next pass fits unless other writers fill it first. */
		if (++rl->passes > 3)
			return -ENOSPC;
		journal_relog_start(sh->journal, w->id);
		rl->next = 0;
	}
}

/* The relog ended (err, or 0 and the COMMIT goes on). A failed one aborts
 * the object: its handle may be gone, and half its bytes are in the log. */
static void relog_end(struct relog *rl, int err)
{
	struct wobject *w = rl->w;
	struct shard *sh = w->sh;
	free(rl);
	if (!err && !(err = commit_journal(sh, w))) {
		commit_go(sh, w);
	} else {
		log_warn("dataset %s: COMMIT of %s: its bytes could not be "
			 "journaled again after a journal rewind (%s): "
			 "aborted", w->ds->cfg->name, rc_esc(w->key),
			 strerror(-err));
		abort_object(sh, w);
		ack_commit(w, err);
	}
	wobject_put(sh, w);
}

static void relog_resume(void *ctx, int res)
{
	struct relog *rl = ctx;
	int err = res < 0 ? -EIO : relog_run(rl);
	if (err != WB_DEFERRED)
		relog_end(rl, err);
}

int writeback_commit(struct wb_client *wc, uint32_t handle, struct op *op)
{
	struct shard *sh = wc->sh;
	struct wobject *w = whandle(wc, handle);
	if (!w)
		return -EBADF;
	if (w->state != W_OPEN)
		return -EINVAL;
	int revoked = write_revoked(wc, w);
	if (revoked)
		return revoked;
	w->state = W_COMMITTED;
	enum rc_durability dur = w->ds->cfg->durability;
	if (dur != DURABILITY_MEMORY)
		w->commit_op = op;
	if (w->journaled && journal_dropped(sh->journal, w->id)) {
		struct relog *rl = calloc(1, sizeof(*rl));
		if (!rl) {
			w->commit_op = NULL;
			w->state = W_OPEN;
			return -ENOMEM;
		}
		*rl = (struct relog){.w = w, .passes = 1};
		w->refs++;
		staged_release(w); /* the relog may wait: not the uid's now */
		sh->m.wb_relogs++;
		journal_relog_start(sh->journal, w->id);
		int err = relog_run(rl);
		if (err != WB_DEFERRED)
			relog_end(rl, err);
		return WB_DEFERRED;
	}
	if (w->journaled) {
		int err = commit_journal(sh, w);
		if (err) {
			w->commit_op = NULL;
			w->state = W_OPEN;
			return err;
		}
	}
	commit_go(sh, w);
	return dur == DURABILITY_MEMORY ? 0 : WB_DEFERRED;
}

/* An acknowledged RENAME or ABORT of a journaled object completes once its
 * record is on disk: a crash after the CQE cannot undo it. */
static void op_flushed(void *ctx, int res)
{
	struct op *op = ctx;
	if (res < 0 && !op->err)
		op->err = -EIO;
	op_done(op);
}

static int ack_when_durable(struct shard *sh, struct op *op)
{
	int err = journal_flush(sh->journal, op_flushed, op);
	return err ? err : WB_DEFERRED;
}

static void abort_object(struct shard *sh, struct wobject *w)
{
	staged_release(w);
	w->state = W_ABORTED;
	if (w->journaled)
		journal_append_abort(sh->journal, w->id);
	staging_free(sh, w);
}

int writeback_abort(struct wb_client *wc, uint32_t handle, struct op *op)
{
	struct shard *sh = wc->sh;
	struct wobject *w = whandle(wc, handle);
	if (!w)
		return -EBADF;
	if (w->state != W_OPEN)
		return -EBUSY; /* acknowledged: it will reach S3 */
	abort_object(sh, w);
	return w->journaled ? ack_when_durable(sh, op) : 0;
}

/* How a RENAME's copy ended, in the log: dataset, bucket and both keys. */
static void log_copy(const struct wobject *w, const struct upload_outcome *out)
{
	const struct rc_dataset_config *c = w->ds->cfg;
	char *from = bucket_key(w);
	char *to = dataset_bucket_key(w->ds, w->rename_key);
	char reason[512];
	if (!from || !to) {
		; /* out of memory: nothing worth a line */
	} else if (out->err == -ECANCELED && w->sh->d->stopping) {
		log_info("dataset %s: rename of s3://%s/%s to %s stopped by "
			 "shutdown: it keeps its old name", c->name, c->bucket,
			 rc_esc(from), rc_esc(to));
	} else if (out->err) {
		log_error("dataset %s: rename of s3://%s/%s to %s failed: %s; "
			  "it keeps its old name", c->name, c->bucket,
			  rc_esc(from), rc_esc(to), outcome_reason(out, out->err,
				reason, sizeof(reason)));
	} else if (out->source_err) {
		log_warn("dataset %s: s3://%s/%s (renamed to %s) left "
			 "behind: %s", c->name, c->bucket, rc_esc(from),
			 rc_esc(to),
			 outcome_reason(out, out->source_err, reason,
					sizeof(reason)));
	}
	free(from);
	free(to);
}

/* The copy job of a RENAME ended: the object has its new name (and the
 * copy's ETag), or keeps its old one and the RENAME fails. */
static void copy_done(void *ctx, const struct upload_outcome *out)
{
	struct wobject *w = ctx;
	struct shard *sh = w->sh;
	struct op *op = w->rename_op;
	log_copy(w, out);
	w->copy = NULL;
	w->rename_op = NULL;
	if (out->err == 0) {
		free(w->key);
		w->key = w->rename_key;
		w->rename_key = NULL;
		snprintf(w->etag, sizeof(w->etag), "%s", out->etag);
		fetch_forget_missing(sh, w->ds, w->key);
	}
	free(w->rename_key);
	w->rename_key = NULL;
	int rc = out->err;
	if (!rc && w->journaled)
		rc = ack_when_durable(sh, op);
	if (rc != WB_DEFERRED) {
		op->err = rc;
		op_done(op);
	}
	wobject_put(sh, w);
	key_waiters_start(sh);
}

/* The copy job of w's RENAME (rename_key, rename_op set): 0 or -errno. */
static int copy_start(struct shard *sh, struct wobject *w)
{
	char *from = bucket_key(w);
	char *to = dataset_bucket_key(w->ds, w->rename_key);
	const struct rc_dataset_config *c = w->ds->cfg;
	struct upload_copy_params p = {
		.bucket = c->bucket, .from_key = from, .to_key = to,
		.size = w->size, .threshold = c->copy_threshold,
		.part_size = c->part_size, .concurrency = c->upload_concurrency,
		.done = copy_done, .done_ctx = w, .tag = w->ds->budget,
		.no_overwrite = c->no_overwrite, .token = w->token_hex,
		.source_etag = w->etag,
	};
	int err = -ENOMEM;
	if (from && to)
		w->copy = upload_copy_start(sh->uploads, &p, &err);
	free(from);
	free(to);
	return w->copy ? 0 : err;
}

/* In S3 already: a copy job (server-side copy, then the old name's
 * delete) on the shard's reactor; the RENAME completes when it ends.
 * Another object's change of the new name (its upload, copy or DELETE)
 * goes first: the copy waits for it. One of the old name is -EBUSY: a
 * newer object replaces these bytes there, and copied after it lands
 * the RENAME would move that object's bytes and delete them. */
static int rename_in_s3(struct shard *sh, struct wobject *w, const char *key,
			struct op *op)
{
	if (strcmp(key, w->key) == 0)
		return 0; /* its name already */
	const char *bucket = w->ds->cfg->bucket;
	char *from = bucket_key(w);
	char *to = dataset_bucket_key(w->ds, key);
	w->rename_key = strdup(key);
	int err = from && to && w->rename_key ? 0 : -ENOMEM;
	if (!err && key_taken(sh, w, bucket, from, UINT64_MAX))
		err = -EBUSY;
	bool wait = !err && key_taken(sh, w, bucket, to, UINT64_MAX);
	free(from);
	free(to);
	w->rename_op = op;
	w->change_seq = ++sh->wb_change_seq;
	if (wait) {
		key_wait(sh, w);
		return WB_DEFERRED;
	}
	if (!err)
		err = copy_start(sh, w);
	if (err) {
		free(w->rename_key);
		w->rename_key = NULL;
		w->rename_op = NULL;
		return err;
	}
	w->refs++; /* the copy's: CLOSE or a dead session cannot free w */
	supersede_failed(sh, w->ds, w->rename_key);
	return WB_DEFERRED;
}

/* A RENAME whose copy waited for its new name and will not run now: it
 * fails with err, and the object keeps its name. */
static void rename_not_started(struct shard *sh, struct wobject *w, int err)
{
	struct op *op = w->rename_op;
	free(w->rename_key);
	w->rename_key = NULL;
	w->rename_op = NULL;
	op->err = err;
	op_done(op);
	wobject_put(sh, w); /* the wait's */
}

/* The oldest change waiting for its key that may go now, asked for after
 * seq; NULL if none. */
static struct wobject *next_key_waiter(struct shard *sh, uint64_t after)
{
	struct wobject *best = NULL;
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->wobjects) {
		struct wobject *x = wobject_of(pos);
		if (x->key_wait && x->change_seq > after &&
		    (!best || x->change_seq < best->change_seq))
			best = x;
	}
	return best;
}

/* Whether w's waiting change (a copy to rename_key, else its upload)
 * may go: nothing else changes its key, and nothing asked for before it
 * waits to. */
static bool key_free_for(const struct shard *sh, const struct wobject *w)
{
	char *key = w->rename_op ? dataset_bucket_key(w->ds, w->rename_key)
				 : bucket_key(w);
	bool taken = key && key_taken(sh, w, w->ds->cfg->bucket, key,
				      w->change_seq);
	free(key);
	return !taken;
}

/* After a change of a key ended: the waiting changes whose key is free
 * go, in the order they were asked for. While stopping a journaled
 * object's upload is left to the next start and a RENAME not yet copied
 * fails (it keeps its old name), as for a copy the drain cancels. A
 * start that ends at once calls back in here: the walk is then done
 * again. */
static void key_waiters_start(struct shard *sh)
{
	if (!sh->wb_key_waiters || sh->wb_key_cancelled)
		return; /* none, or writeback_drain ends the waits itself */
	if (sh->wb_key_waking) {
		sh->wb_key_rewake = true;
		return;
	}
	sh->wb_key_waking = true;
	do {
		sh->wb_key_rewake = false;
		uint64_t after = 0;
		struct wobject *w;
		while ((w = next_key_waiter(sh, after))) {
			after = w->change_seq;
			bool left = sh->d->stopping &&
				    (w->rename_op || w->journaled);
			if (!left && !key_free_for(sh, w))
				continue;
			w->key_wait = false;
			sh->wb_key_waiters--;
			if (w->rename_op) {
				int err = left ? -ECANCELED : copy_start(sh, w);
				if (err)
					rename_not_started(sh, w, err);
				/* else the wait's reference is the copy's */
				continue;
			}
			if (!left)
				upload_start_for(sh, w);
			wobject_put(sh, w);
		}
	} while (sh->wb_key_rewake);
	sh->wb_key_waking = false;
}

/* Not in S3 yet: the new name is the one the upload uses (again, if one
 * is running: it is cancelled and restarted under the new name). */
static int rename_pending(struct shard *sh, struct wobject *w,
			  const char *key)
{
	if (strcmp(key, w->key) == 0)
		return 0; /* its name already: the upload goes on */
	/* Each RENAME restarts a running upload and costs a journal record:
	 * renamed in a loop, an object would never reach S3, and being
	 * committed it would keep the journal from rewinding for every
	 * writer. A few renames (tmp -> final, a chain) are plenty. */
	if (w->renames >= WB_MAX_PENDING_RENAMES)
		return -EBUSY;
	if (w->journaled) {
		int err = journal_append_rename(sh->journal, w->id, key);
		if (err)
			return err;
	}
	char *nk = strdup(key);
	if (!nk)
		return -ENOMEM;
	free(w->key);
	w->key = nk;
	w->renames++;
	if (w->key_wait) /* its new name may be free */
		key_waiters_start(sh);
	if (w->state == W_COMMITTED)
		supersede_failed(sh, w->ds, w->key);
	if (w->up) {
		w->restart = true;
		/* A multipart upload stops at once (its Complete, if sent,
		 * wins and upload_done removes the old name). A single PUT
		 * taken back mid-flight may still land under the old name
		 * after the cancel reported: it finishes, then goes. */
		if (w->size > w->ds->cfg->part_size)
			upload_cancel(w->up);
	}
	return 0;
}

/* Journaled: acknowledged once the RENAME record (or, for an object in S3
 * already, its DONE record) is on disk, so a restart never uploads it under
 * an older name. One in S3 completes when its copy has ended (-EBUSY while
 * one runs).
 *
 * A RENAME onto a key is a write to that key, under the same rules: the
 * writer must still be allowed to write the dataset (a reload may have
 * revoked it), and with overwrite = false an object already there is
 * never replaced: before the upload, the new key is the upload's (its
 * If-None-Match and HEAD); after, the copy is conditional the same way
 * (-EEXIST, the object keeps its old name). */
int writeback_rename(struct wb_client *wc, uint32_t handle, const char *key,
		     struct op *op)
{
	struct shard *sh = wc->sh;
	struct wobject *w = whandle(wc, handle);
	if (!w)
		return -EBADF;
	if (w->state == W_ABORTED || w->state == W_FAILED)
		return -EINVAL;
	int revoked = write_revoked(wc, w);
	if (revoked)
		return revoked;
	if (!key_fits(w->ds, key))
		return -ENAMETOOLONG;
	if (w->copy || w->rename_op)
		return -EBUSY; /* its name is changing */
	if (w->state == W_DONE)
		return rename_in_s3(sh, w, key, op);
	int err = rename_pending(sh, w, key);
	if (err)
		return err;
	return w->journaled ? ack_when_durable(sh, op) : 0;
}

/* ds NULL: every object (RC_SYNC_ALL). */
static bool sync_matches(const struct dataset *obj_ds, const char *key,
			 const struct dataset *ds, const char *prefix)
{
	return !ds || (obj_ds == ds && strncmp(key, prefix,
					       strlen(prefix)) == 0);
}

/* A later save of the failed key is committed: this SYNC waits for it,
 * and S3 has the key if it lands (its own failure is reported if not). */
static bool saved_again(struct shard *sh, const struct wb_failed *f)
{
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->wobjects) {
		const struct wobject *w = wobject_of(pos);
		if (w->state == W_COMMITTED && w->ds == f->ds &&
		    strcmp(w->key, f->key) == 0)
			return true;
	}
	return false;
}

int writeback_sync(struct wb_client *wc, uint32_t handle, struct dataset *ds,
		   const char *prefix, struct op *op)
{
	struct shard *sh = wc->sh;
	op->pending = 1; /* held until every object is counted */
	if (handle != RC_SYNC_ALL && handle != RC_SYNC_PREFIX) {
		struct wobject *w = whandle(wc, handle);
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
		const struct dataset *scope = handle == RC_SYNC_PREFIX ? ds
								       : NULL;
		uid_t uid = wc->usage ? wc->usage->uid : WB_UID_UNKNOWN;
		struct rc_list *pos;
		rc_list_for_each(pos, &sh->wb_failed) {
			struct wb_failed *f = rc_list_entry(pos, struct wb_failed,
							    link);
			if (uid != WB_UID_UNKNOWN && f->uid == uid &&
			    sync_matches(f->ds, f->key, scope, prefix) &&
			    !saved_again(sh, f)) {
				op->err = f->err;
				break;
			}
		}
		rc_list_for_each(pos, &sh->wobjects) {
			struct wobject *w = wobject_of(pos);
			if (w->state != W_COMMITTED ||
			    !sync_matches(w->ds, w->key, scope, prefix))
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

int writeback_close(struct wb_client *wc, uint32_t handle)
{
	struct shard *sh = wc->sh;
	struct wobject *w = whandle(wc, handle);
	if (!w)
		return -EBADF;
	if (w->state == W_OPEN) /* never committed: nothing acknowledged */
		abort_object(sh, w);
	wc->handles[handle & ~RC_WRITE_HANDLE] = NULL;
	wobject_put(sh, w);
	return 0;
}

void writeback_client_closed(struct wb_client *wc)
{
	for (uint32_t i = 0; i < wc->cap_handles; i++)
		if (wc->handles[i])
			writeback_close(wc, i | RC_WRITE_HANDLE);
	free(wc->handles);
	wc->handles = NULL;
	wc->cap_handles = 0;
}

/* ---- read your writes ----------------------------------------------------- */

/* Staged bytes are served only when S3 cannot refuse them any more: with
 * overwrite = false the upload may still fail (-EEXIST, the key was
 * taken), and every session reading the key meanwhile was served bytes S3
 * never held. Such a dataset reads what S3 has until the upload lands. */
struct wobject *writeback_pending(struct shard *sh, const struct dataset *ds,
				  const char *key)
{
	if (ds->cfg->no_overwrite)
		return NULL;
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->wobjects) {
		struct wobject *w = wobject_of(pos);
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
	if (w->replayed)
		return -EWOULDBLOCK; /* in the journal file: writeback_read_start */
	return read_staged(w, off, dst, len);
}

/* A read of a replayed object's bytes, on a digest worker: the journal
 * file is a disk read, which no reactor waits for. The job holds a
 * reference on the object; it reads only what replay fixed at open (the
 * object's extents, the journal's read descriptor). */
struct slow_read {
	struct wobject *w;
	uint64_t off;
	void *dst;
	size_t len;
	int err;
	void (*done)(void *ctx, int err);
	void *ctx;
};

static void slow_read_run(void *arg)
{
	struct slow_read *r = arg;
	r->err = read_journaled(r->w, r->off, r->dst, r->len);
}

static void slow_read_done(void *arg)
{
	struct slow_read *r = arg;
	struct wobject *w = r->w;
	r->done(r->ctx, r->err);
	wobject_put(w->sh, w);
	free(r);
}

int writeback_read_start(struct wobject *w, uint64_t off, void *dst,
			 size_t len, void (*done)(void *ctx, int err),
			 void *ctx)
{
	if (w->state != W_COMMITTED)
		return -ESTALE;
	if (!w->sh->workers)
		return -ENOSYS;
	struct slow_read *r = malloc(sizeof(*r));
	if (!r)
		return -ENOMEM;
	*r = (struct slow_read){.w = w, .off = off, .dst = dst, .len = len,
				.done = done, .ctx = ctx};
	int err = workers_submit(w->sh->workers, slow_read_run,
				 slow_read_done, r);
	if (err) {
		free(r);
		return err;
	}
	w->refs++;
	return 0;
}

void writeback_put(struct wobject *w)
{
	wobject_put(w->sh, w);
}

/* ---- start-up clean-up, on a worker ------------------------------------ */

/* S3 requests a start needs before some uploads: blocking calls (listings,
 * aborts, HEAD, DELETE with the client's backoff), so they run on one of
 * the shard's worker threads (workers.h) while its reactor serves
 * clients; done, back on the reactor, starts what waited for them. A job
 * reads only what it owns: copies of the keys, the dataset (whose config
 * is never freed under a reader), the S3 client (thread-safe). */
struct wcleanup {
	struct shard *sh;
	struct s3_client *s3;
	const struct dataset *ds;  /* NULL: the abandoned uploads of all */
	char **old_keys;           /* names it had before; copies */
	size_t n_old_keys;
	char *key;                 /* its name now; copy */
	char token_hex[S3_UPLOAD_TOKEN_LEN + 1]; /* "": none journaled */
	struct rc_list link;       /* on shard->wb_cleanups */
};

/* Keep callback: uploads of other keys that merely start with this one. */
static bool other_key(void *ctx, const char *key, const char *upload_id)
{
	(void)upload_id;
	return strcmp(key, ctx) != 0;
}

/* A replayed object may have died mid-upload: its multipart upload is
 * abandoned, and this daemon's, since the journal says it was uploading
 * that key. Abort it now rather than after ABANDONED_AGE_S (before the
 * shard starts any upload, so no age is needed: upload_start_for waits). */
static void abort_stale_uploads(const struct wcleanup *c, const char *rel_key)
{
	const struct dataset *ds = c->ds;
	char *key = dataset_bucket_key(ds, rel_key);
	struct s3_result r;
	char reason[512];
	if (!key)
		return;
	int n = upload_cleanup_abandoned(c->s3, ds->cfg->bucket, key, 0,
					 other_key, key, &r);
	if (n < 0)
		log_warn("journal: %s/%s: listing its old uploads: %s",
			 ds->cfg->name, rc_esc(rel_key),
			 s3_result_reason(&r, reason, sizeof(reason)));
	free(key);
}

/* An upload under a name the object had before an acknowledged RENAME may
 * have reached S3 before the crash (a PUT or Complete in flight). It goes
 * only if it carries the object's token (journaled with its COMMIT): the
 * object there is this one's upload, not another writer's that merely has
 * the same size. A journal written before tokens has none: such a copy
 * stays (a leftover, never another writer's loss). */
static void delete_if_ours(const struct wcleanup *c, const char *rel_key)
{
	const struct dataset *ds = c->ds;
	char *key = dataset_bucket_key(ds, rel_key);
	if (!key)
		return;
	struct s3_req_params p = {.op = S3_HEAD_OBJECT,
				  .bucket = ds->cfg->bucket, .key = key};
	struct s3_result r;
	if (s3_perform(c->s3, &p, &r, NULL, NULL) == 0 &&
	    strcmp(r.upload_token, c->token_hex) == 0) {
		log_info("journal: %s/%s: removing the copy under its old name "
			 "s3://%s/%s", ds->cfg->name, rel_key, ds->cfg->bucket,
			 key);
		delete_old_name_blocking(c->s3, ds, key);
	}
	free(key);
}

/* Multipart uploads a daemon started and never finished (it died) cost
 * storage until aborted. Other nodes may write the same prefix, so only
 * old ones go. */
#define ABANDONED_AGE_S (6 * 3600)
static void cleanup_abandoned(struct wcleanup *c)
{
	struct daemon *d = c->sh->d;
	uint32_t checked = 0;
	for (uint32_t i = 0; i < d->n_datasets; i++) {
		const struct rc_dataset_config *cfg = d->datasets[i]->cfg;
		if (!cfg->writable)
			continue;
		checked++;
		struct s3_result r;
		char reason[512];
		int n = upload_cleanup_abandoned(c->s3, cfg->bucket, cfg->prefix,
						 ABANDONED_AGE_S, NULL, NULL,
						 &r);
		if (n > 0)
			log_info("dataset %s: aborted %d abandoned multipart "
				 "upload(s)", cfg->name, n);
		else if (n < 0)
			log_warn("dataset %s: listing abandoned uploads: %s",
				 cfg->name, s3_result_reason(&r, reason,
							     sizeof(reason)));
	}
	/* It runs beside the first requests now: say when it is over (its
	 * S3 client is not the shards', so its requests are not in their
	 * counters). */
	if (checked)
		log_info("writeback: abandoned multipart uploads checked in %u "
			 "writable dataset(s)", checked);
}

/* The worker's half. Every name the object had: no multipart upload
 * stays under any, and no copy under an old one. */
static void cleanup_run(void *arg)
{
	struct wcleanup *c = arg;
	if (!c->ds) {
		cleanup_abandoned(c);
		return;
	}
	for (size_t i = 0; i < c->n_old_keys; i++) {
		if (strcmp(c->old_keys[i], c->key) == 0)
			continue;
		abort_stale_uploads(c, c->old_keys[i]);
		if (c->token_hex[0])
			delete_if_ours(c, c->old_keys[i]);
	}
	abort_stale_uploads(c, c->key);
}

static void cleanup_free(struct wcleanup *c)
{
	rc_list_del(&c->link);
	for (size_t i = 0; i < c->n_old_keys; i++)
		free(c->old_keys[i]);
	free(c->old_keys);
	free(c->key);
	free(c);
}

/* The oldest object waiting for the clean-up, or NULL. Looked for again
 * after each start: a start may complete ops whose sessions then close
 * and drop other objects. */
static struct wobject *oldest_waiting(struct shard *sh)
{
	for (struct rc_list *pos = sh->wobjects.prev; pos != &sh->wobjects;
	     pos = pos->prev)
		if (wobject_of(pos)->cleanup_wait)
			return wobject_of(pos);
	return NULL;
}

/* The last replayed object's clean-up ended: the uploads held for it
 * start, in the order they were asked for (a journaled one not while
 * stopping: the journal has it for the next start). */
static void cleanups_ended(struct shard *sh)
{
	struct wobject *w;
	while ((w = oldest_waiting(sh))) {
		w->cleanup_wait = false;
		if (!(sh->d->stopping && w->journaled))
			upload_start_for(sh, w);
		wobject_put(sh, w);
	}
}

/* The reactor's half. */
static void cleanup_done(void *arg)
{
	struct wcleanup *c = arg;
	struct shard *sh = c->sh;
	bool replayed = c->ds != NULL;
	cleanup_free(c);
	if (replayed && --sh->wb_cleaning == 0)
		cleanups_ended(sh);
}

/* Runs c on a worker, or here when the shard has none (blocking, as a
 * start without threads must). */
static void cleanup_submit(struct shard *sh, struct wcleanup *c)
{
	rc_list_add(&sh->wb_cleanups, &c->link);
	if (c->ds)
		sh->wb_cleaning++;
	if (sh->workers &&
	    workers_submit(sh->workers, cleanup_run, cleanup_done, c) == 0)
		return;
	cleanup_run(c);
	cleanup_done(c);
}

static struct wcleanup *cleanup_new(struct shard *sh)
{
	struct wcleanup *c = calloc(1, sizeof(*c));
	if (c) {
		c->sh = sh;
		c->s3 = sh->d->s3;
		rc_list_init(&c->link);
	}
	return c;
}

/* A replayed object's clean-up (every name it had); its upload, asked
 * for next, waits for it. Without memory: none, as if S3 had failed it. */
static void clean_old_names(struct shard *sh, struct dataset *ds,
			    const struct journal_object *o,
			    const struct wobject *w)
{
	struct wcleanup *c = cleanup_new(sh);
	bool ok = c && (c->key = strdup(o->key)) &&
		  (c->old_keys = calloc(o->n_old_keys + 1,
					sizeof(*c->old_keys)));
	for (size_t i = 0; ok && i < o->n_old_keys; i++, c->n_old_keys++)
		ok = (c->old_keys[i] = strdup(o->old_keys[i])) != NULL;
	if (!ok) {
		if (c)
			cleanup_free(c);
		return;
	}
	c->ds = ds;
	if (o->has_token)
		memcpy(c->token_hex, w->token_hex, sizeof(c->token_hex));
	cleanup_submit(sh, c);
}

/* ---- start, replay, drain ----------------------------------------------- */

static void replay(struct shard *sh)
{
	struct journal *j = sh->journal;
	for (size_t i = 0; i < journal_n_discarded(j); i++) {
		const struct journal_object *o = journal_discarded(j, i);
		log_warn("journal: %s/%s was never committed: discarded",
			 o->dataset, rc_esc(o->key));
	}
	for (size_t i = 0; i < journal_n_replayed(j); i++) {
		const struct journal_object *o = journal_replayed(j, i);
		if (o->id > sh->wb_next_id)
			sh->wb_next_id = o->id;
	}
	for (size_t i = 0; i < journal_n_replayed(j); i++) {
		const struct journal_object *o = journal_replayed(j, i);
		if (o->superseded) { /* uploaded now, it would undo the newer */
			log_warn("journal: %s/%s was committed again later: the "
				 "older bytes are not uploaded", o->dataset,
				 rc_esc(o->key));
			sh->m.wb_superseded++;
			journal_append_abort(j, o->id);
			continue;
		}
		struct dataset *ds = dataset_by_name(sh->d, o->dataset);
		if (!ds) {
			log_error("journal: %s/%s: no such dataset now; kept in "
				  "the journal", o->dataset, rc_esc(o->key));
			continue;
		}
		if (!key_fits(ds, o->key)) { /* the prefix grew since */
			log_error("journal: %s/%s: the key with the prefix %s is "
				  "longer than 1024 bytes: dropped", o->dataset,
				  o->key, ds->cfg->prefix);
			journal_append_abort(j, o->id);
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
		/* The token its uploads before the restart carried; a journal
		 * from before tokens: a new one (an upload that landed before
		 * the crash is then not recognised: -EEXIST if overwrite =
		 * false, the bytes in S3 being this object's all the same). */
		if (o->has_token)
			token_set(w, o->token);
		else if (token_new(w) < 0)
			memset(w->token_hex, 0, sizeof(w->token_hex));
		/* Its writer's, so that its SYNC of all hears if it fails
		 * again; none from a journal written before uids. */
		w->uid = o->has_uid ? (uid_t)o->uid : WB_UID_UNKNOWN;
		w->state = W_COMMITTED;
		w->journaled = w->replayed = true;
		w->replay_index = i;
		w->refs = 1; /* dropped below: the upload keeps it */
		rc_list_add(&sh->wobjects, &w->link);
		log_info("journal: uploading %s/%s (%llu bytes) acknowledged "
			 "before the restart", o->dataset, rc_esc(o->key),
			 (unsigned long long)o->size);
		sh->m.wb_replayed++;
		backlog_enter(sh, w);
		clean_old_names(sh, ds, o, w);
		upload_start_for(sh, w);
		wobject_put(sh, w);
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
		.replied = drv_replied,
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
	sh->workers_ev.fn = workers_ready;
	sh->workers = workers_new(WB_HASH_THREADS, wname);
	if (!sh->workers)
		log_warn("shard %u: no digest threads (%s): digests inline",
			 sh->id, strerror(errno));
	writeback_arm_workers(sh);
	struct wcleanup *c = sh->id == 0 ? cleanup_new(sh) : NULL;
	if (c)
		cleanup_submit(sh, c);
	staging_warm(sh);
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
	sh->journal = journal_open(&jc, reactor_ring(sh->reactor), jerr,
				   sizeof(jerr));
	if (!sh->journal) {
		snprintf(err, errlen, "journal %s: %s", path, jerr);
		return -1;
	}
	replay(sh);
	return 0;
}

/* One turn of the shard's reactor (timers, I/O) while draining. */
static void pump(struct shard *sh)
{
	reactor_run_timers(sh->reactor);
	reactor_turn(sh->reactor, 10000000);
}

static bool must_wait(const struct shard *sh)
{
	const struct rc_list *pos;
	rc_list_for_each(pos, &sh->wobjects) {
		const struct wobject *w = wobject_of(pos);
		if (w->state == W_COMMITTED && !w->journaled)
			return true; /* acknowledged, only in memory */
		if (w->copy)
			return true; /* a RENAME: a cancelled CopyObject may
					still land, leaving both names */
		if (w->del)
			return true; /* an old name's DELETE: then its upload */
	}
	return false;
}

void writeback_drain(struct shard *sh)
{
	if (!sh->uploads)
		return;
	uint64_t until = rc_now_ns() + DRAIN_NS;
	while (must_wait(sh) && rc_now_ns() < until)
		pump(sh);
	/* Journaled objects are uploaded again at the next start. A cancel
	 * reports the upload done, which may drop the object's last
	 * reference: ours keeps it (and its next) readable until then. */
	sh->wb_key_cancelled = true; /* nothing starts now */
	for (struct rc_list *pos = sh->wobjects.next, *next;
	     pos != &sh->wobjects; pos = next) {
		struct wobject *w = wobject_of(pos);
		w->refs++;
		if (w->key_wait) { /* cancelled before it started */
			w->key_wait = false;
			sh->wb_key_waiters--;
			if (w->rename_op) {
				rename_not_started(sh, w, -ECANCELED);
			} else {
				struct upload_outcome out = {.err = -ECANCELED};
				upload_ended(sh, w, &out);
			}
		}
		if (w->up)
			upload_cancel(w->up);
		if (w->copy) /* past the wait: the RENAME fails */
			upload_cancel(w->copy);
		next = pos->next;
		wobject_put(sh, w);
	}
	until = rc_now_ns() + 10ull * 1000000000ull;
	while ((upload_engine_pending(sh->uploads) ||
		(sh->journal && journal_inflight(sh->journal))) &&
	       rc_now_ns() < until)
		pump(sh);
}

void writeback_destroy(struct shard *sh)
{
	workers_free(sh->workers); /* no worker reads a part body after this */
	sh->workers = NULL;
	while (!rc_list_empty(&sh->wb_cleanups)) /* their done never ran */
		cleanup_free(rc_list_entry(sh->wb_cleanups.next,
					   struct wcleanup, link));
	while (!rc_list_empty(&sh->wb_warming)) /* nor theirs */
		warm_free(rc_list_entry(sh->wb_warming.next, struct wwarm,
					link));
	while (!rc_list_empty(&sh->wb_timers)) {
		struct wtimer *t = rc_list_entry(sh->wb_timers.next,
						 struct wtimer, link);
		reactor_timer_cancel(&t->t);
		rc_list_del(&t->link);
		free(t);
	}
	while (!rc_list_empty(&sh->wb_delayed)) {
		struct wdelay *dl = rc_list_entry(sh->wb_delayed.next,
						  struct wdelay, link);
		rc_list_del(&dl->link);
		free(dl);
	}
	while (!rc_list_empty(&sh->wobjects)) {
		struct wobject *w = wobject_of(sh->wobjects.next);
		w->refs = 1;
		wobject_put(sh, w);
	}
	while (!rc_list_empty(&sh->wb_failed))
		failed_free(sh, rc_list_entry(sh->wb_failed.next,
					      struct wb_failed, link));
	if (sh->uploads && !upload_engine_pending(sh->uploads))
		upload_engine_free(sh->uploads);
	sh->uploads = NULL;
	chunks_release(sh);
	if (sh->journal)
		journal_close(sh->journal);
	sh->journal = NULL;
}
