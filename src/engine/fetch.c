/* fetch.c - owns a shard's fetch engine: the object metadata table (what
 * S3 last said of each key: size, ETag; a changed ETag retires the old
 * version and its blocks) and every S3 fetch: HEAD (or a GET of block 0)
 * for OPEN, ranged GETs with If-Match for blocks (one fetch per block,
 * however many reads wait: coalesced), paginated LIST, and retries. It
 * completes client operations through the callbacks its caller
 * registered (fetch.h), never by calling up. */
#include "fetch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "daemon.h"
#include "budget.h"
#include "cause.h"
#include "log.h"
#include "tiering.h"

/* One S3 request of the read path and what waits for it. */
enum fetch_kind { FETCH_BLOCK, FETCH_HEAD, FETCH_LIST };

struct fetch {
	enum fetch_kind kind;
	struct shard *sh;
	struct s3_req *req;
	struct object *obj;
	struct cache_entry *entry; /* FETCH_BLOCK */
	struct op *op;             /* FETCH_LIST */
	char *list_prefix;         /* FETCH_LIST: dataset prefix + asked */
	struct listing *lst;       /* FETCH_LIST: owned while fetching */
	unsigned attempt;          /* retries made */
	uint64_t first_ns;         /* its first try: retry_budget runs from it */
	uint64_t new_ns, sent_ns;  /* made; its last try handed to curl */
	uint64_t budget_ns;        /* waited for the request budget, in all */
	bool head_only;            /* FETCH_HEAD: a HEAD (the object is empty) */
	bool open_get;             /* FETCH_HEAD sent as a GET of block 0 */
	bool force_get;            /* FETCH_HEAD: a GET to learn why (403) */
	bool prefetch;             /* FETCH_BLOCK for a plan, nobody waited */
	bool tier_reading, from_tier; /* FETCH_BLOCK served by the NVMe tier */
	struct pending_io *pio;    /* FETCH_BLOCK read from a pending file */
	bool budgeted;             /* holds a budget slot, waiting for it */
	bool silent;               /* its last try got no response at all */
	uint32_t budget_ticket;    /* that slot's (budget_ticket_valid) */
	uint64_t plan_gen;         /* which plan asked for it */
	struct reactor_timer retry; /* armed while waiting to retry */
	uint64_t received;
	struct fetch *all_next, *all_prev; /* shard's list of fetches */
	bool in_curl;
	char *cause;               /* why it failed (cause.h), for its ops */
};

/* A pending object's block whose bytes only a blocking read gets (a
 * replayed checkpoint in the journal file): the server reads them off the
 * reactor into a buffer of the read's own, copied into the slot if the
 * fetch is still there (fetch_shard_cancel may have ended it). */
struct pending_io {
	struct fetch *f; /* NULL once the fetch ended without it */
	void *buf;
	uint32_t len;
};

/* An op that failed keeps the first cause it is given. */
static void op_take_cause(struct op *op, const char *cause)
{
	if (!op->cause && cause)
		op->cause = strdup(cause);
}

/* ---- objects ------------------------------------------------------------ */

static uint64_t str_hash(uint32_t ds, const char *s)
{
	uint64_t h = 1469598103934665603ull ^ ds;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static struct object **object_slot(struct shard *d, uint32_t ds,
				   const char *key)
{
	struct object **pp = &d->objects[str_hash(ds, key) & d->objects_mask];
	while (*pp && ((*pp)->ds->id != ds || strcmp((*pp)->key, key) != 0))
		pp = &(*pp)->hnext;
	return pp;
}

static void objects_grow(struct shard *d)
{
	uint64_t n = (d->objects_mask + 1) * 2;
	struct object **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return; /* keep the longer chains */
	for (uint64_t i = 0; i <= d->objects_mask; i++) {
		for (struct object *o = d->objects[i], *next; o; o = next) {
			next = o->hnext;
			struct object **b = &nb[str_hash(o->ds->id, o->key) & (n - 1)];
			o->hnext = *b;
			*b = o;
		}
	}
	free(d->objects);
	d->objects = nb;
	d->objects_mask = n - 1;
}

/* What an entry costs the daemon: the struct, its key, the allocator's
 * headers and its share of the hash array (kept at most half full). */
static uint64_t object_cost(const struct object *o)
{
	return sizeof(*o) + strlen(o->key) + 1 + 32 + 2 * sizeof(o);
}

static void object_touch(struct shard *sh, struct object *o)
{
	o->used_ns = rc_now_ns();
	rc_list_del(&o->lru);
	rc_list_add(&sh->objects_lru, &o->lru);
}

static void object_retire(struct shard *sh, struct object *o);
static void objects_evict(struct shard *sh, const struct object *keep);

static struct object *object_new(struct shard *d, struct dataset *ds,
				 const char *key)
{
	struct object *o = calloc(1, sizeof(*o));
	if (!o || !(o->key = strdup(key))) {
		free(o);
		return NULL;
	}
	o->id = ++d->next_obj_id;
	o->ds = ds;
	o->refs = 1; /* the table's */
	if (d->n_objects + 1 > d->objects_mask + 1)
		objects_grow(d);
	struct object **pp = object_slot(d, ds->id, key);
	o->hnext = *pp;
	*pp = o;
	d->n_objects++;
	rc_list_init(&o->lru);
	object_touch(d, o);
	d->objects_bytes += object_cost(o);
	d->m.meta_bytes = d->objects_bytes;
	objects_evict(d, o);
	return o;
}

void object_get(struct object *o)
{
	o->refs++;
}

static void object_unpend(struct object *o)
{
	if (o->pending) {
		o->unpend(o->pending);
		o->pending = NULL;
	}
}

void object_put(struct daemon *d, struct object *o)
{
	(void)d;
	if (--o->refs == 0) {
		object_unpend(o);
		free(o->key);
		free(o);
	}
}

/* Out of the table: new OPENs will not find it. Its cached blocks (of
 * its id, which nothing can look up again) are dropped unless leased. */
static void object_unlist(struct shard *sh, struct object *o)
{
	struct daemon *d = sh->d;
	o->stale = true;
	struct object **pp = object_slot(sh, o->ds->id, o->key);
	if (*pp == o) {
		*pp = o->hnext;
		sh->n_objects--;
	}
	o->hnext = NULL;
	rc_list_del(&o->lru);
	sh->objects_bytes -= object_cost(o);
	sh->m.meta_bytes = sh->objects_bytes;
	uint64_t bs = d->cfg.block_bytes;
	uint64_t nblocks = o->has_blocks ? (o->size + bs - 1) / bs : 0;
	for (uint64_t b = 0; b < nblocks; b++) {
		struct cache_entry *e = cache_lookup(&sh->cache, o->id,
						     b, false);
		if (e && e->state == ENTRY_VALID)
			cache_discard(&sh->cache, e);
	}
	object_put(d, o); /* the table's reference */
}

/* The object changed or vanished in S3: new OPENs must ask S3 again, and
 * its cached blocks (of the old ETag) are dropped unless leased. */
static void object_retire(struct shard *sh, struct object *o)
{
	if (o->stale)
		return;
	object_unlist(sh, o);
	sh->m.stale++;
}

/* Only the table holds it and nothing waits on it: it may go. */
static bool object_idle(const struct object *o)
{
	return o->refs == 1 && !o->head_pending && !o->pending;
}

/* Entries looked at per insertion past the budget: ones in use are
 * skipped (handles and ops hold them, bounded by the per-uid limits). */
#define EVICT_SCAN 64u

/* Over the budget: the least recently used idle entries go (not keep,
 * the one just made). A listing of 100M keys, or an endless one, costs
 * at most the budget. Entries whose object has cached blocks go last:
 * freeing one drops its blocks, so a client walking a huge listing
 * would otherwise flush everyone's cache; they are passed over (moved
 * to the warm end) while an entry without blocks can go, and the
 * coldest goes when none can. */
static void objects_evict(struct shard *sh, const struct object *keep)
{
	unsigned seen = 0;
	struct object *cold = NULL;
	struct rc_list *pos = sh->objects_lru.prev;
	while (sh->objects_bytes > sh->objects_budget &&
	       pos != &sh->objects_lru && seen++ < EVICT_SCAN) {
		struct object *o = rc_list_entry(pos, struct object, lru);
		pos = pos->prev;
		if (o == keep)
			continue;
		if (!object_idle(o) || o->has_blocks) {
			/* To the warm end, so entries held by handles (or
			 * worth their blocks) at the cold end cannot stop
			 * every later eviction. */
			if (!cold && object_idle(o))
				cold = o;
			object_touch(sh, o);
			continue;
		}
		object_unlist(sh, o);
		sh->m.meta_evicted++;
	}
	if (sh->objects_bytes > sh->objects_budget && cold) {
		object_unlist(sh, cold);
		sh->m.meta_evicted++;
	}
}

/* Entries visited per sweep at most (those kept: in use, or with cached
 * blocks, which are worth their metadata). */
#define SWEEP_SCAN 65536u
#define SWEEP_MIN_NS 1000000000ull

/* Entries unused past metadata_ttl are of no use as metadata: freed,
 * unless in use or holding cached blocks (their next OPEN revalidates
 * them with a HEAD and keeps the blocks). Negative and listed-only
 * entries thus never outlive the TTL by more than a sweep. */
static void objects_sweep(struct reactor_timer *t)
{
	struct shard *sh = rc_container_of(t, struct shard, objects_sweep);
	uint64_t ttl = daemon_metadata_ttl_ns(sh->d), now = rc_now_ns();
	unsigned seen = 0;
	struct rc_list *pos = sh->objects_lru.prev;
	while (pos != &sh->objects_lru && seen++ < SWEEP_SCAN) {
		struct object *o = rc_list_entry(pos, struct object, lru);
		pos = pos->prev;
		if (now - o->used_ns < ttl)
			break; /* newer ones follow */
		if (object_idle(o) && !o->has_blocks) {
			object_unlist(sh, o);
			sh->m.meta_evicted++;
		} else {
			object_touch(sh, o); /* kept: looked at again in a TTL */
		}
	}
	reactor_timer_after(sh->reactor, t,
			    ttl / 2 > SWEEP_MIN_NS ? ttl / 2 : SWEEP_MIN_NS);
}

/* Records what S3 said about a key; returns the current version. */
static struct object *object_update(struct shard *sh, struct object *o,
				    const char *etag, uint64_t size)
{
	if (o->etag[0] && strcmp(o->etag, etag) != 0) {
		struct dataset *ds = o->ds;
		char *key = strdup(o->key);
		if (!key)
			return NULL;
		object_retire(sh, o);
		o = object_new(sh, ds, key);
		free(key);
		if (!o)
			return NULL;
	}
	snprintf(o->etag, sizeof(o->etag), "%s", etag);
	o->size = size;
	o->missing = false;
	o->fetched_ns = rc_now_ns();
	object_touch(sh, o);
	return o;
}

/* ---- fetches ------------------------------------------------------------ */

static void fetch_finish(struct fetch *f, int err);
static struct dataset *fetch_dataset(const struct fetch *f)
{
	return f->kind == FETCH_LIST ? f->op->ds : f->obj->ds;
}

/* The prefix's request budget: every request (retries and second tries
 * too) takes a slot; one whose slot is later waits for it on its retry
 * timer, then goes, unless a SlowDown took the slot back meanwhile. */
static bool fetch_throttled(struct fetch *f)
{
	struct budget *b = fetch_dataset(f)->budget;
	if (f->budgeted) {
		f->budgeted = false;
		if (budget_ticket_valid(b, BUDGET_GET, f->budget_ticket))
			return false;
	}
	uint64_t wait = budget_admit(b, BUDGET_GET, rc_now_ns(),
				     &f->budget_ticket);
	if (!wait)
		return false;
	f->budgeted = true;
	f->budget_ns += wait;
	f->sh->m.s3_throttled_ns += wait;
	reactor_timer_after(f->sh->reactor, &f->retry, wait);
	return true;
}

/* What the reply says about the prefix's request rate. */
static void fetch_budget_reply(struct fetch *f, const struct s3_result *r)
{
	enum budget_reply k = budget_classify(r->http_status, r->code);
	budget_reply(fetch_dataset(f)->budget, BUDGET_GET, k, rc_now_ns());
	if (k == BUDGET_REPLY_SLOWDOWN)
		f->sh->m.s3_slowdowns++;
}

static void fetch_retry_due(struct reactor_timer *t);
static void fetch_done(struct fetch *f, CURLcode code);

static int block_sink(void *ctx, uint64_t body_off, const void *data,
		      size_t len)
{
	struct fetch *f = ctx;
	struct cache_entry *e = f->entry;
	if (body_off > e->len || len > e->len - body_off)
		return -1; /* more than the range: never write past the slot */
	memcpy(cache_entry_data(e) + body_off, data, len);
	f->received = body_off + len;
	return 0;
}

static bool first_block_cached(struct shard *sh, const struct object *o)
{
	const struct cache_entry *e = o->etag[0] ?
		cache_lookup(&sh->cache, o->id, 0, false) : NULL;
	return e && e->state == ENTRY_VALID;
}

static void fetch_transfer_done(void *ctx, CURL *easy, CURLcode code)
{
	struct fetch *f = ctx;
	(void)easy;
	f->in_curl = false;
	fetch_done(f, code);
}

static bool fetch_throttled(struct fetch *f);

static int fetch_start(struct fetch *f)
{
	struct shard *sh = f->sh;
	struct daemon *d = sh->d;
	struct s3_req_params p = {0};
	char *key = NULL;
	if (fetch_throttled(f))
		return 0;
	if (!f->first_ns) /* the rate budget's wait is not S3 failing */
		f->first_ns = rc_now_ns();
	p.bucket = f->kind == FETCH_LIST ? f->op->ds->cfg->bucket
					 : f->obj->ds->cfg->bucket;
	if (f->kind != FETCH_LIST) {
		key = dataset_bucket_key(f->obj->ds, f->obj->key);
		if (!key)
			return -ENOMEM;
		p.key = key;
	}
	switch (f->kind) {
	case FETCH_HEAD:
		if (f->head_only ||
		    (!f->force_get && (!daemon_open_fetches_block(d) ||
				       (sh->tier && tier_enabled(sh->tier)) ||
				       first_block_cached(sh, f->obj)))) {
			p.op = S3_HEAD_OBJECT;
			f->open_get = false;
			sh->m.s3_head++;
			break;
		}
		/* OPEN asks for the first block, not a HEAD: size and ETag
		 * come with it (Content-Range), and a small object arrives
		 * whole in the same round trip. Errors carry S3's code. A
		 * HEAD when the block is here already (revalidation), or with
		 * an NVMe tier, which may hold the bytes. */
		p.op = S3_GET_OBJECT;
		p.range_len = d->cfg.block_bytes;
		f->open_get = true;
		sh->m.s3_get++;
		break;
	case FETCH_BLOCK:
		p.op = S3_GET_OBJECT;
		p.range_off = (uint64_t)f->entry->blkno * d->cfg.block_bytes;
		p.range_len = f->entry->len;
		p.if_match = f->obj->etag;
		p.sink = block_sink;
		p.sink_ctx = f;
		sh->m.s3_get++;
		break;
	case FETCH_LIST:
		p.op = S3_LIST_OBJECTS_V2;
		p.prefix = f->list_prefix;
		p.delimiter = "/";
		p.continuation_token = listing_token(f->lst);
		sh->m.s3_list++;
		break;
	}
	char err[256];
	f->received = 0;
	f->req = s3_req_new(d->s3, &p, err, sizeof(err));
	free(key);
	if (!f->req) {
		log_limited(RC_LOG_WARN, "S3 request: %s", err);
		return -EINVAL;
	}
	f->sent_ns = rc_now_ns();
	int r = curlio_add(sh->curl, s3_req_easy(f->req), fetch_transfer_done, f);
	if (r < 0) {
		fetch_done(f, CURLE_FAILED_INIT);
		return 0; /* finished: not the caller's any more */
	}
	f->in_curl = true;
	return 0;
}

static void fetch_free(struct fetch *f)
{
	reactor_timer_cancel(&f->retry);
	if (f->prefetch) {
		f->sh->pf_inflight--;
		if (f->sh->fops->prefetch_done)
			f->sh->fops->prefetch_done(f->sh, f->plan_gen);
	}
	if (f->all_prev)
		f->all_prev->all_next = f->all_next;
	else
		f->sh->fetches = f->all_next;
	if (f->all_next)
		f->all_next->all_prev = f->all_prev;
	if (f->req)
		s3_req_free(f->req);
	if (f->pio)
		f->pio->f = NULL; /* its read lands in its own buffer */
	if (f->obj)
		object_put(f->sh->d, f->obj);
	free(f->list_prefix);
	listing_free(f->lst);
	free(f->cause);
	free(f);
}

static struct fetch *fetch_new(struct shard *sh, enum fetch_kind kind,
			       struct object *o)
{
	struct fetch *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->kind = kind;
	f->sh = sh;
	f->new_ns = rc_now_ns();
	reactor_timer_init(&f->retry, fetch_retry_due);
	f->all_next = sh->fetches;
	if (sh->fetches)
		sh->fetches->all_prev = f;
	sh->fetches = f;
	if (o) {
		object_get(o);
		f->obj = o;
	}
	return f;
}

static void retry_schedule(struct fetch *f, unsigned delay_ms)
{
	struct shard *sh = f->sh;
	f->attempt++;
	reactor_timer_after(sh->reactor, &f->retry,
			    (uint64_t)delay_ms * 1000000ull);
	sh->m.s3_retries++;
}

/* S3 answered after this shard's requests got no response (an outage
 * ended): the fetches backing off from such a failure go again within
 * 100 ms, spread, instead of at the end of waits of up to 20 s. Those
 * backing off from an answer (503, SlowDown) keep their wait. */
static void wake_silent_retries(struct shard *sh)
{
	uint64_t seed = rc_now_ns();
	for (struct fetch *f = sh->fetches; f; f = f->all_next) {
		if (!f->silent || !f->retry.armed || f->budgeted || f->req)
			continue;
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		reactor_timer_after(sh->reactor, &f->retry,
				    (seed >> 33) % 100000000ull);
	}
}

/* The retry policy (s3_retry_next) within the config's retry_budget:
 * a read waits through an outage that long, then fails. */
static bool fetch_retry_next(const struct fetch *f, const struct s3_result *r,
			     unsigned *delay_ms)
{
	const struct s3_client *c = f->sh->d->s3;
	return s3_retry_next(c, r->retryable, f->attempt,
			     (rc_now_ns() - f->first_ns) / 1000000u,
			     s3_client_config(c)->retry_budget_ms, delay_ms);
}

static void fetch_retry_due(struct reactor_timer *t)
{
	struct fetch *f = rc_container_of(t, struct fetch, retry);
	int err = fetch_start(f);
	if (err)
		fetch_finish(f, err);
}

static uint64_t next_use(const struct shard *sh, uint64_t obj, uint64_t b)
{
	return sh->fops->next_use ? sh->fops->next_use(sh, obj, b) : UINT64_MAX;
}

/* OPEN's GET brought the first block: cache it, unless it is there. */
static void prefill_first_block(struct shard *sh, struct object *o,
				const struct s3_req *req)
{
	uint64_t bs = sh->d->cfg.block_bytes;
	uint32_t want = (uint32_t)(o->size < bs ? o->size : bs);
	size_t len;
	const char *body = s3_req_body(req, &len);
	if (want == 0 || len != want ||
	    cache_lookup(&sh->cache, o->id, 0, false))
		return;
	int err;
	o->has_blocks = true;
	struct cache_entry *e = cache_insert(&sh->cache, o->ds->ca[sh->id],
					     o->id, 0, want, &err);
	if (!e)
		return; /* memory is pinned: the read will fetch it */
	e->plan_hint = next_use(sh, o->id, 0);
	tiering_name_entry(sh, o, e);
	memcpy(cache_entry_data(e), body, want);
	e->state = ENTRY_VALID;
	sh->m.bytes_from_s3 += want;
}

/* S3 said the key does not exist: remembered for metadata_ttl like an
 * ETag, so OPENs of missing keys cost one HEAD per key and TTL, not one
 * each (an entry like any other: the table's budget bounds them). */
static void remember_missing(struct shard *sh, const struct object *gone)
{
	if (daemon_metadata_ttl_ns(sh->d) == 0 ||
	    *object_slot(sh, gone->ds->id, gone->key))
		return; /* not cached, or someone learned of it meanwhile */
	struct object *o = object_new(sh, gone->ds, gone->key);
	if (o) {
		o->missing = true;
		o->fetched_ns = rc_now_ns();
	}
}

void fetch_forget_missing(struct shard *sh, const struct dataset *ds,
			  const char *key)
{
	struct object *o = *object_slot(sh, ds->id, key);
	if (o && o->missing)
		object_unlist(sh, o);
}

static void head_finish(struct fetch *f, int err, const struct s3_result *r)
{
	struct shard *sh = f->sh;
	struct object *o = f->obj, *cur = o;
	o->head_pending = false;
	struct waiter *w = o->head_waiters;
	o->head_waiters = NULL;
	if (err == 0) {
		cur = object_update(sh, o, r->etag, r->object_size);
		if (!cur)
			err = -ENOMEM;
		else if (f->req && f->open_get)
			prefill_first_block(sh, cur, f->req);
	} else if (err == -ENOENT || !o->etag[0]) {
		object_retire(sh, o);
		if (err == -ENOENT)
			remember_missing(sh, o);
	}
	while (w) {
		struct waiter *next = w->next;
		struct op *op = w->op;
		op->err = err;
		if (err == 0) {
			object_get(cur);
			op->obj = cur;
		} else {
			op_take_cause(op, f->cause);
		}
		sh->fops->op_done(op);
		free(w);
		w = next;
	}
}

static void block_finish(struct fetch *f, int err)
{
	struct shard *sh = f->sh;
	struct cache_entry *e = f->entry;
	struct waiter *w = e->waiters;
	e->waiters = NULL;
	if (err == 0) {
		e->state = ENTRY_VALID;
		if (!f->from_tier && !f->obj->pending)
			sh->m.bytes_from_s3 += e->len;
	}
	while (w) {
		struct waiter *next = w->next;
		if (err == 0) {
			sh->fops->block_ready(w->op, e);
		} else {
			op_take_cause(w->op, f->cause);
			sh->fops->block_failed(w->op, err);
		}
		free(w);
		w = next;
	}
	if (err) {
		cache_discard(&sh->cache, e);
		if (err == -ESTALE || err == -ENOENT)
			object_retire(sh, f->obj);
	}
}

/* A listing also tells each object's ETag and size: OPEN after LIST needs
 * no HEAD while the metadata is fresh. The page is checked already. */
static void list_learn(struct shard *sh, struct dataset *ds,
		       const struct s3_list_page *page)
{
	size_t pl = strlen(ds->cfg->prefix);
	if (daemon_metadata_ttl_ns(sh->d) == 0)
		return;
	for (size_t i = 0; i < page->n_objects; i++) {
		const struct s3_list_object *lo = &page->objects[i];
		if (!lo->etag[0])
			continue;
		const char *key = lo->key + pl;
		struct object *o = *object_slot(sh, ds->id, key);
		if (!o)
			o = object_new(sh, ds, key);
		if (o && !o->head_pending)
			object_update(sh, o, lo->etag, lo->size);
	}
}

/* One line per reply that broke a rule: which dataset, bucket and key,
 * and what the rule was. Never a credential (none is in these). */
static void log_protocol_error(const struct fetch *f, const char *why)
{
	const struct dataset *ds = f->kind == FETCH_LIST ? f->op->ds
							 : f->obj->ds;
	const char *rel = f->kind == FETCH_LIST ? f->list_prefix : f->obj->key;
	const char *pfx = f->kind == FETCH_LIST ? "" : ds->cfg->prefix;
	log_limited(RC_LOG_WARN,
		 "dataset %s: s3://%s/%s%s: S3 protocol error (%s): %s",
		 ds->cfg->name, ds->cfg->bucket, pfx, rc_esc(rel),
		 f->kind == FETCH_LIST ? "LIST" :
		 f->kind == FETCH_HEAD ? "HEAD" : "GET", rc_esc(why));
}

/* A page arrived: check it, keep its entries, and ask for the next one
 * while the client's LIST needs more. True if another page is on its way. */
static bool list_continue(struct fetch *f, int *err)
{
	struct dataset *ds = f->op->ds;
	size_t len, pl = strlen(ds->cfg->prefix);
	const char *body = s3_req_body(f->req, &len);
	struct s3_list_page page = {0};
	char why[256];
	*err = s3_parse_list(body, len, &page, why, sizeof(why));
	if (*err == 0)
		*err = listing_check_page(&page, f->list_prefix, pl,
					  ds->cfg->max_object_size, why,
					  sizeof(why));
	if (*err == 0) {
		list_learn(f->sh, ds, &page);
		*err = listing_add_page(f->lst, &page, pl, why, sizeof(why));
	}
	s3_list_page_free(&page);
	if (*err == -EPROTO)
		log_protocol_error(f, why);
	if (*err || listing_enough(f->lst, f->op->len))
		return false;
	s3_req_free(f->req);
	f->req = NULL;
	f->attempt = 0; /* a new page, a new request: its own budget */
	f->first_ns = 0;
	*err = fetch_start(f);
	return *err == 0;
}

/* The LIST op is answered from the listing, which is kept to resume
 * from unless it failed. */
static void list_finish(struct fetch *f, int err)
{
	if (err)
		op_take_cause(f->op, f->cause);
	f->sh->fops->list_ready(f->op, f->lst, err);
	if (err == 0) {
		listing_keep(&f->sh->listings, f->lst);
		f->lst = NULL;
	}
}

static void fetch_finish(struct fetch *f, int err)
{
	struct s3_result none = {0};
	switch (f->kind) {
	case FETCH_HEAD:
		head_finish(f, err, &none);
		break;
	case FETCH_BLOCK:
		block_finish(f, err);
		break;
	case FETCH_LIST:
		list_finish(f, err);
		break;
	}
	fetch_free(f);
}

/* One line per failed fetch, once its retries and second tries are over:
 * dataset, bucket, key and S3's reason. A missing key (a client's typo, a
 * probe) or a changed object is routine: info, not a warning. */
static void log_fetch_failure(const struct fetch *f, int err,
			      const struct s3_result *r)
{
	const struct dataset *ds = f->kind == FETCH_LIST ? f->op->ds
							 : f->obj->ds;
	static const char *const what[] = {[FETCH_BLOCK] = "GET",
					   [FETCH_HEAD] = "OPEN",
					   [FETCH_LIST] = "LIST"};
	char *key = f->kind == FETCH_LIST ? NULL
					  : dataset_bucket_key(ds, f->obj->key);
	char reason[512];
	s3_result_reason(r, reason, sizeof(reason));
	const char *why = err == -EPERM ?
		": S3 denied the daemon access (its credentials or the bucket "
		"policy, not allow_uids)" : "";
	log_limited(err == -ENOENT || err == -ESTALE ? RC_LOG_INFO : RC_LOG_WARN,
	       "dataset %s: %s bucket %s key %s failed: %s%s", ds->cfg->name,
	       what[f->kind], ds->cfg->bucket,
	       rc_esc(key ? key : f->list_prefix ? f->list_prefix : "?"),
	       reason, why);
	free(key);
}

/* Why f failed, for the ops waiting on it (and through their sessions
 * the client): kept until f is freed. */
static void note_cause(struct fetch *f, int err, const struct s3_result *r)
{
	const struct dataset *ds = fetch_dataset(f);
	char *key = f->kind == FETCH_LIST ? NULL
					  : dataset_bucket_key(ds, f->obj->key);
	free(f->cause);
	f->cause = fetch_cause(ds->cfg->name, ds->cfg->bucket,
			       key ? key : f->list_prefix,
			       s3_client_endpoint(f->sh->d->s3), err, r);
	free(key);
}

/* Sends f again as its second try (HEAD's 403 as a GET, an empty
 * object's 416 as a HEAD): true if it went. */
static bool fetch_again(struct fetch *f, int *err)
{
	s3_req_free(f->req);
	f->req = NULL;
	*err = fetch_start(f);
	return *err == 0;
}

/* What a successful HEAD or GET says about the object must be possible:
 * a size under the dataset's max_object_size, an ETag, and for a block
 * the size the object had when it was opened. -EPROTO with r->message. */
static int check_object_reply(const struct fetch *f, struct s3_result *r)
{
	const struct object *o = f->obj;
	uint64_t max = o->ds->cfg->max_object_size;
	if (f->kind == FETCH_HEAD && r->object_size > max)
		snprintf(r->message, sizeof(r->message),
			 "object size %llu over max_object_size %llu",
			 (unsigned long long)r->object_size,
			 (unsigned long long)max);
	else if (f->kind == FETCH_HEAD && !r->etag[0])
		snprintf(r->message, sizeof(r->message), "no ETag");
	else if (f->kind == FETCH_BLOCK && r->object_size != o->size)
		snprintf(r->message, sizeof(r->message),
			 "object size %llu in the reply, %llu when opened",
			 (unsigned long long)r->object_size,
			 (unsigned long long)o->size);
	else
		return 0;
	r->retryable = false;
	return -EPROTO;
}

/* At debug level, one line per GET or HEAD answered (each try): where
 * its time went (made to sent: the request budget and, past it, retries;
 * sent to the first byte and to the end, as curl timed them, which
 * includes waiting for one of max_connections) and how many requests the
 * shard had in flight. perf/README.md ("Cold small samples") reads a cold
 * start so. */
static void log_timeline(const struct fetch *f, const struct s3_result *r)
{
	if (rc_log_level < RC_LOG_DEBUG || f->kind == FETCH_LIST)
		return;
	const struct dataset *ds = f->obj->ds;
	curl_off_t first_us = 0, total_us = 0;
	CURL *easy = s3_req_easy(f->req);
	curl_easy_getinfo(easy, CURLINFO_STARTTRANSFER_TIME_T, &first_us);
	curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME_T, &total_us);
	char *key = dataset_bucket_key(ds, f->obj->key);
	log_debug("dataset %s: %s bucket %s key %s: HTTP %ld, timeline: "
		  "sent after %.1f ms (request budget %.1f ms, tries %u), "
		  "first byte %.1f ms and done %.1f ms after sending, "
		  "%u requests in flight",
		  ds->cfg->name,
		  f->kind == FETCH_BLOCK || f->open_get ? "GET" : "HEAD",
		  ds->cfg->bucket, rc_esc(key ? key : "?"), r->http_status,
		  (double)(f->sent_ns - f->new_ns) / 1e6,
		  (double)f->budget_ns / 1e6, f->attempt + 1,
		  (double)first_us / 1e3, (double)total_us / 1e3,
		  curlio_inflight(f->sh->curl));
	free(key);
}

static void fetch_done(struct fetch *f, CURLcode code)
{
	struct shard *sh = f->sh;
	struct s3_result r;
	s3_req_result(f->req, code, &r);
	log_timeline(f, &r);
	fetch_budget_reply(f, &r);
	f->silent = !r.http_status && r.retryable;
	if (f->silent) {
		sh->s3_silent = true;
	} else if (r.http_status && sh->s3_silent) {
		sh->s3_silent = false;
		wake_silent_retries(sh);
	}
	int err = r.err;
	if (err == 0 && f->kind != FETCH_LIST)
		err = check_object_reply(f, &r);
	if (err == 0 && f->kind == FETCH_BLOCK && f->received != f->entry->len) {
		err = -EIO; /* short body */
		r.retryable = true;
	}
	if (err == 0 && f->kind == FETCH_BLOCK && r.etag[0] &&
	    strcmp(r.etag, f->obj->etag) != 0) {
		err = -ESTALE; /* a server that ignored If-Match */
		r.retryable = false;
	}
	if (err) {
		unsigned delay;
		sh->m.s3_errors++;
		if (fetch_retry_next(f, &r, &delay)) {
			char reason[512];
			log_debug("S3 %s, retry %u in %u ms",
				  s3_result_reason(&r, reason, sizeof(reason)),
				  f->attempt + 1, delay);
			s3_req_free(f->req);
			f->req = NULL;
			retry_schedule(f, delay);
			return;
		}
	}
	if (f->kind == FETCH_HEAD && !f->open_get && !f->force_get &&
	    (err == -EPERM || err == -ENOENT) && !r.code[0]) {
		/* A HEAD's 403 or 404 has no body to say why (which
		 * refusal; no key or no bucket): a GET does. */
		f->force_get = true;
		if (fetch_again(f, &err))
			return;
	}
	if (f->kind == FETCH_HEAD && !f->head_only && err == -ERANGE) {
		/* 416: an empty object has no first byte to range over. */
		f->head_only = true;
		if (fetch_again(f, &err))
			return;
	}
	if (err == -EPROTO)
		log_protocol_error(f, r.message);
	else if (err)
		log_fetch_failure(f, err, &r);
	if (err)
		note_cause(f, err, &r);
	if (f->kind == FETCH_HEAD) {
		head_finish(f, err, &r);
		fetch_free(f);
		return;
	}
	if (f->kind == FETCH_LIST && err == 0 && list_continue(f, &err))
		return;
	fetch_finish(f, err);
}

/* ---- client operations -------------------------------------------------- */

static int add_waiter(struct waiter **list, struct op *op)
{
	struct waiter *w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->op = op;
	w->next = *list;
	*list = w;
	return 0;
}

/* Read your writes: an object committed here and not yet in S3 is served
 * from its staged bytes under a version of its own. Takes w's reference. */
static struct object *open_pending(struct shard *sh, struct object *o,
				   struct dataset *ds, const char *key,
				   void *w, uint64_t id, uint64_t size)
{
	const struct fetch_ops *ops = sh->fops;
	char etag[RC_MAX_ETAG];
	snprintf(etag, sizeof(etag), "\"ringcache-pending-%llu\"",
		 (unsigned long long)id);
	if (o && o->pending == w) {
		ops->pending_put(w);
		return o;
	}
	if (!o && !(o = object_new(sh, ds, key))) {
		ops->pending_put(w);
		return NULL;
	}
	o = object_update(sh, o, etag, size);
	if (!o) {
		ops->pending_put(w);
		return NULL;
	}
	object_unpend(o);
	o->pending = w;
	o->unpend = ops->pending_put;
	return o;
}

static void open_done(struct shard *sh, struct op *op, struct object *o,
		      int err)
{
	op->err = err;
	if (o) {
		object_get(o);
		op->obj = o;
	}
	sh->fops->op_done(op);
}

void fetch_open(struct shard *sh, struct op *op, struct dataset *ds,
		const char *key)
{
	struct daemon *d = sh->d;
	const struct fetch_ops *ops = sh->fops;
	struct object *o = *object_slot(sh, ds->id, key);
	uint64_t ttl = daemon_metadata_ttl_ns(d);
	if (o && o->pending && ops->pending_uploaded(o->pending)) {
		/* Uploaded since: what S3 says now, not the staged copy. */
		object_retire(sh, o);
		o = NULL;
	}
	uint64_t wid, wsize;
	void *w = ops->pending_lookup ?
		ops->pending_lookup(sh, ds, key, &wid, &wsize) : NULL;
	if (w) {
		o = open_pending(sh, o, ds, key, w, wid, wsize);
		open_done(sh, op, o, o ? 0 : -ENOMEM);
		return;
	}
	if (o && !o->head_pending && (o->etag[0] || o->missing) &&
	    rc_now_ns() - o->fetched_ns < ttl) {
		object_touch(sh, o);
		if (o->missing) {
			sh->m.meta_negative_hits++;
			open_done(sh, op, NULL, -ENOENT);
			return;
		}
		open_done(sh, op, o, 0);
		return;
	}
	if (!o && !(o = object_new(sh, ds, key))) {
		open_done(sh, op, NULL, -ENOMEM);
		return;
	}
	if (add_waiter(&o->head_waiters, op) < 0) {
		open_done(sh, op, NULL, -ENOMEM);
		return;
	}
	if (o->head_pending)
		return;
	struct fetch *f = fetch_new(sh, FETCH_HEAD, o);
	o->head_pending = true;
	int err = f ? fetch_start(f) : -ENOMEM;
	if (err) {
		if (f)
			fetch_free(f);
		struct fetch tmp = {.kind = FETCH_HEAD, .sh = sh, .obj = o};
		head_finish(&tmp, err, NULL);
	}
}

/* ---- blocks: the NVMe tier, else S3 ------------------------------------ */

static void tier_read_done(void *ctx, int res)
{
	struct fetch *f = ctx;
	struct shard *sh = f->sh;
	f->tier_reading = false;
	if (res >= 0 && (uint32_t)res == f->entry->len) {
		sh->m.tier_hits++;
		f->from_tier = true;
		fetch_finish(f, 0);
		return;
	}
	/* A bad checksum or a failed device: S3 still has the bytes. */
	sh->m.tier_read_errors++;
	int err = fetch_start(f);
	if (err)
		fetch_finish(f, err);
}

static void pending_io_done(void *ctx, int err)
{
	struct pending_io *io = ctx;
	struct fetch *f = io->f;
	if (f) {
		f->pio = NULL;
		if (!err)
			memcpy(cache_entry_data(f->entry), io->buf, io->len);
		fetch_finish(f, err);
	}
	free(io->buf);
	free(io);
}

static int pending_read_begin(struct fetch *f)
{
	const struct fetch_ops *ops = f->sh->fops;
	struct cache_entry *e = f->entry;
	if (!ops->pending_read_start)
		return -EIO;
	struct pending_io *io = calloc(1, sizeof(*io));
	if (!io || !(io->buf = malloc(e->len ? e->len : 1))) {
		free(io);
		return -ENOMEM;
	}
	io->f = f;
	io->len = e->len;
	int err = ops->pending_read_start(f->obj->pending,
		(uint64_t)e->blkno * f->sh->d->cfg.block_bytes, io->buf,
		e->len, pending_io_done, io);
	if (err) {
		free(io->buf);
		free(io);
		return err;
	}
	f->pio = io;
	return 0;
}

/* A block miss: from the tier if it holds the block, else from S3; a
 * pending object's from where the server keeps it. */
static int block_fetch_begin(struct fetch *f)
{
	struct shard *sh = f->sh;
	struct cache_entry *e = f->entry;
	if (f->obj->pending)
		return pending_read_begin(f);
	if (tiering_read(sh, f->obj, e, tier_read_done, f) == 0) {
		f->tier_reading = true;
		return 0;
	}
	return fetch_start(f);
}

static uint32_t block_len(const struct object *o, uint64_t b, uint64_t bs)
{
	uint64_t start = b * bs;
	return (uint32_t)(o->size - start < bs ? o->size - start : bs);
}

/* Read your writes: a block of an object not yet in S3, from staging. */
static int fill_from_pending(struct shard *sh, struct object *o,
			     struct cache_entry *e)
{
	int err = sh->fops->pending_read(o->pending,
				 (uint64_t)e->blkno * sh->d->cfg.block_bytes,
				 cache_entry_data(e), e->len);
	if (!err)
		e->state = ENTRY_VALID;
	return err;
}

static void start_block(struct shard *sh, struct op *op, uint64_t b)
{
	struct object *o = op->obj;
	int err = 0;
	const struct fetch_ops *ops = sh->fops;
	if (o->stale) {
		ops->block_failed(op, -ESTALE);
		return;
	}
	o->has_blocks = true;
	struct cache_entry *e = cache_insert(&sh->cache, o->ds->ca[sh->id], o->id,
		b, block_len(o, b, sh->d->cfg.block_bytes), &err);
	if (!e) {
		ops->block_failed(op, err);
		return;
	}
	if (o->pending) { /* the bytes are here: no S3 */
		err = fill_from_pending(sh, o, e);
		if (err == -EWOULDBLOCK)
			goto fetch; /* off the reactor: block_fetch_begin */
		if (err) {
			cache_discard(&sh->cache, e);
			ops->block_failed(op, err);
			return;
		}
		ops->block_ready(op, e);
		return;
	}
fetch:
	e->plan_hint = next_use(sh, o->id, b);
	struct fetch *f = fetch_new(sh, FETCH_BLOCK, o);
	if (!f || add_waiter(&e->waiters, op) < 0) {
		if (f)
			fetch_free(f);
		cache_discard(&sh->cache, e);
		ops->block_failed(op, -ENOMEM);
		return;
	}
	f->entry = e;
	err = block_fetch_begin(f);
	if (err)
		fetch_finish(f, err);
}

int fetch_prefetch_block(struct shard *sh, struct object *o, uint64_t b,
			 uint64_t gen, struct cache_entry **out, bool *started)
{
	*started = false;
	struct cache_entry *e = cache_lookup(&sh->cache, o->id, b,
					     false);
	if (e) {
		*out = e;
		return 0;
	}
	int err = 0;
	o->has_blocks = true;
	e = cache_insert(&sh->cache, o->ds->ca[sh->id], o->id, b,
			 block_len(o, b, sh->d->cfg.block_bytes), &err);
	if (!e)
		return err;
	e->plan_hint = next_use(sh, o->id, b);
	if (o->pending && (err = fill_from_pending(sh, o, e)) != -EWOULDBLOCK) {
		if (err < 0) {
			cache_discard(&sh->cache, e);
			return err;
		}
		*out = e;
		return 0;
	}
	struct fetch *f = fetch_new(sh, FETCH_BLOCK, o);
	if (!f) {
		cache_discard(&sh->cache, e);
		return -ENOMEM;
	}
	f->entry = e;
	f->prefetch = true;
	f->plan_gen = gen;
	sh->pf_inflight++;
	if ((err = block_fetch_begin(f)) < 0) {
		fetch_finish(f, err);
		return err;
	}
	sh->m.prefetch_bytes += e->len;
	*out = e;
	*started = true;
	return 0;
}

void fetch_cancel_prefetch(struct shard *sh, uint64_t gen)
{
	for (struct fetch *f = sh->fetches, *next; f; f = next) {
		next = f->all_next;
		if (!f->prefetch || f->plan_gen != gen || !f->in_curl ||
		    f->entry->waiters)
			continue;
		curlio_remove(sh->curl, s3_req_easy(f->req));
		f->in_curl = false;
		sh->m.prefetch_cancelled++;
		fetch_finish(f, -ECANCELED);
	}
}

void fetch_read(struct shard *sh, struct op *op)
{
	const struct fetch_ops *ops = sh->fops;
	uint64_t bs = sh->d->cfg.block_bytes;
	struct object *o = op->obj;
	uint64_t first = op->offset / bs;
	uint64_t last = (op->offset + op->len - 1) / bs;
	op->pending = (uint32_t)(last - first + 2); /* +1 holds op alive */
	for (uint64_t b = first; b <= last; b++) {
		struct cache_entry *e = cache_lookup(&sh->cache, o->id,
						     b, true);
		if (e && e->state == ENTRY_VALID) {
			sh->m.hits++;
			metrics_dataset_lookup(&sh->m, o->ds->id, true);
			ops->block_ready(op, e);
			continue;
		}
		sh->m.misses++;
		metrics_dataset_lookup(&sh->m, o->ds->id, false);
		op->cqe.flags &= ~RC_CQE_F_HIT;
		if (e) {
			if (add_waiter(&e->waiters, op) < 0)
				ops->block_failed(op, -ENOMEM);
			continue;
		}
		start_block(sh, op, b);
	}
	if (--op->pending == 0)
		ops->op_done(op);
}

void fetch_list(struct shard *sh, struct op *op, struct dataset *ds,
		const char *prefix)
{
	struct listing *l = listing_take(&sh->listings, ds->id, prefix,
					 op->offset, rc_now_ns());
	if (!l) {
		op->err = -ENOMEM;
		sh->fops->op_done(op);
		return;
	}
	listing_advance(l, op->offset);
	if (listing_enough(l, op->len)) {
		sh->fops->list_ready(op, l, 0);
		listing_keep(&sh->listings, l);
		return;
	}
	struct fetch *f = fetch_new(sh, FETCH_LIST, NULL);
	if (!f || !(f->list_prefix = dataset_bucket_key(ds, prefix))) {
		listing_free(l);
		if (f)
			fetch_free(f);
		op->err = -ENOMEM;
		sh->fops->op_done(op);
		return;
	}
	f->op = op;
	f->lst = l;
	int err = fetch_start(f);
	if (err)
		fetch_finish(f, err);
}

/* ---- the shard's table and teardown ------------------------------------ */

void fetch_set_ops(struct shard *sh, const struct fetch_ops *ops)
{
	sh->fops = ops;
}

int fetch_shard_init(struct shard *sh)
{
	sh->objects_mask = 1023;
	sh->objects = calloc(sh->objects_mask + 1, sizeof(*sh->objects));
	rc_list_init(&sh->objects_lru);
	uint64_t budget = sh->d->cfg.metadata_bytes
				  ? sh->d->cfg.metadata_bytes
				  : sh->d->cfg.memory_bytes / 16;
	sh->objects_budget = budget / (sh->d->n_shards ? sh->d->n_shards : 1);
	reactor_timer_init(&sh->objects_sweep, objects_sweep);
	return sh->objects ? 0 : -ENOMEM;
}

void fetch_shard_start(struct shard *sh)
{
	reactor_timer_after(sh->reactor, &sh->objects_sweep, SWEEP_MIN_NS);
}

void fetch_shard_cancel(struct shard *sh)
{
	reactor_timer_cancel(&sh->objects_sweep);
	while (sh->fetches) {
		struct fetch *f = sh->fetches;
		if (f->in_curl)
			curlio_remove(sh->curl, s3_req_easy(f->req));
		fetch_finish(f, -ECANCELED);
	}
	listing_cache_clear(&sh->listings);
}

void fetch_shard_free(struct shard *sh)
{
	for (uint64_t i = 0; sh->objects && i <= sh->objects_mask; i++) {
		for (struct object *o = sh->objects[i], *n; o; o = n) {
			n = o->hnext;
			free(o->key);
			free(o);
		}
	}
	free(sh->objects);
	sh->objects = NULL;
}
