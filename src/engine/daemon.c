/* daemon.c - owns the daemon's lifecycle (config, credentials, S3 client,
 * datasets and their arenas, the listening socket, reload), the object
 * metadata table, and every S3 fetch: HEAD for OPEN, ranged GETs with
 * If-Match for blocks (coalesced per block), paginated LIST, and retries. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "budget.h"
#include "daemon.h"
#include "log.h"

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
	return o;
}

void object_get(struct object *o)
{
	o->refs++;
}

static void object_unpend(struct object *o)
{
	if (o->pending) {
		writeback_put(o->pending);
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

/* The object changed or vanished in S3: new OPENs must ask S3 again, and
 * its cached blocks (of the old ETag) are dropped unless leased. */
static void object_retire(struct shard *sh, struct object *o)
{
	struct daemon *d = sh->d;
	if (o->stale)
		return;
	o->stale = true;
	struct object **pp = object_slot(sh, o->ds->id, o->key);
	if (*pp == o) {
		*pp = o->hnext;
		sh->n_objects--;
	}
	o->hnext = NULL;
	uint64_t bs = d->cfg.block_bytes;
	uint64_t nblocks = (o->size + bs - 1) / bs;
	for (uint64_t b = 0; b < nblocks; b++) {
		struct cache_entry *e = cache_lookup(&sh->cache, o->id,
						     b, false);
		if (e && e->state == ENTRY_VALID)
			cache_discard(&sh->cache, e);
	}
	sh->m.stale++;
	object_put(d, o); /* the table's reference */
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
	o->fetched_ns = now_ns();
	return o;
}

/* ---- fetches ------------------------------------------------------------ */

static char *full_key(const struct dataset *ds, const char *key)
{
	size_t pl = strlen(ds->cfg->prefix), kl = strlen(key);
	char *k = malloc(pl + kl + 1);
	if (k) {
		memcpy(k, ds->cfg->prefix, pl);
		memcpy(k + pl, key, kl + 1);
	}
	return k;
}

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

static bool fetch_throttled(struct fetch *f);

static int fetch_start(struct fetch *f)
{
	struct shard *sh = f->sh;
	struct daemon *d = sh->d;
	struct s3_req_params p = {0};
	char *key = NULL;
	if (fetch_throttled(f))
		return 0;
	p.bucket = f->kind == FETCH_LIST ? f->op->ds->cfg->bucket
					 : f->obj->ds->cfg->bucket;
	if (f->kind != FETCH_LIST) {
		key = full_key(f->obj->ds, f->obj->key);
		if (!key)
			return -ENOMEM;
		p.key = key;
	}
	switch (f->kind) {
	case FETCH_HEAD:
		if (f->head_only ||
		    (!f->force_get && (!d->cfg.open_fetches_block ||
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
		log_warn("S3 request: %s", err);
		return -EINVAL;
	}
	reactor_add_transfer(sh, f);
	return 0;
}

static void fetch_free(struct fetch *f)
{
	if (f->prefetch) {
		f->sh->pf_inflight--;
		prefetch_fetch_done(f->sh, f->plan_gen);
	}
	if (f->all_prev)
		f->all_prev->all_next = f->all_next;
	else
		f->sh->fetches = f->all_next;
	if (f->all_next)
		f->all_next->all_prev = f->all_prev;
	if (f->req)
		s3_req_free(f->req);
	if (f->obj)
		object_put(f->sh->d, f->obj);
	free(f->list_prefix);
	listing_free(f->lst);
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

/* f starts again (fetch_start) at due_ns, from the shard's timers. */
static void retry_insert(struct fetch *f, uint64_t due_ns)
{
	struct fetch **pp = &f->sh->retries;
	f->due_ns = due_ns;
	while (*pp && (*pp)->due_ns <= f->due_ns)
		pp = &(*pp)->next_retry;
	f->next_retry = *pp;
	*pp = f;
}

static void retry_schedule(struct fetch *f)
{
	struct shard *sh = f->sh;
	f->attempt++;
	retry_insert(f, now_ns() + (uint64_t)s3_backoff_ms(sh->d->s3,
							   f->attempt) * 1000000ull);
	sh->m.s3_retries++;
}

static struct dataset *fetch_dataset(const struct fetch *f)
{
	return f->kind == FETCH_LIST ? f->op->ds : f->obj->ds;
}

/* The prefix's request budget: every request (retries and second tries
 * too) takes a slot; one whose slot is later waits for it on the retry
 * timers, then goes, unless a SlowDown took the slot back meanwhile. */
static bool fetch_throttled(struct fetch *f)
{
	struct budget *b = fetch_dataset(f)->budget;
	if (f->budgeted) {
		f->budgeted = false;
		if (budget_ticket_valid(b, BUDGET_GET, f->budget_ticket))
			return false;
	}
	uint64_t now = now_ns();
	uint64_t wait = budget_admit(b, BUDGET_GET, now, &f->budget_ticket);
	if (!wait)
		return false;
	f->budgeted = true;
	f->sh->m.s3_throttled_ns += wait;
	retry_insert(f, now + wait);
	return true;
}

/* What the reply says about the prefix's request rate. */
static void fetch_budget_reply(struct fetch *f, const struct s3_result *r)
{
	enum budget_reply k = budget_classify(r->http_status, r->code);
	budget_reply(fetch_dataset(f)->budget, BUDGET_GET, k, now_ns());
	if (k == BUDGET_REPLY_SLOWDOWN)
		f->sh->m.s3_slowdowns++;
}

static void fetch_finish(struct fetch *f, int err);

void fetch_run_retries(struct shard *sh)
{
	uint64_t now = now_ns();
	while (sh->retries && sh->retries->due_ns <= now) {
		struct fetch *f = sh->retries;
		sh->retries = f->next_retry;
		f->next_retry = NULL;
		int err = fetch_start(f);
		if (err)
			fetch_finish(f, err);
	}
}

/* Names a block the way the NVMe tier keys it (dataset URI, key, ETag). */
static void entry_tier_name(struct shard *sh, const struct object *o,
			    struct cache_entry *e)
{
	if (!sh->tier || !tier_enabled(sh->tier))
		return;
	struct tier_key k;
	tier_key_make(&k, o->ds->cfg->uri, o->key, o->etag, e->blkno);
	memcpy(e->ident, &k, sizeof(e->ident));
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
	struct cache_entry *e = cache_insert(&sh->cache, o->ds->ca[sh->id],
					     o->id, 0, want, &err);
	if (!e)
		return; /* memory is pinned: the read will fetch it */
	e->plan_hint = prefetch_hint(sh, o->id, 0);
	entry_tier_name(sh, o, e);
	memcpy(cache_entry_data(e), body, want);
	e->state = ENTRY_VALID;
	sh->m.bytes_from_s3 += want;
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
	}
	while (w) {
		struct waiter *next = w->next;
		struct op *op = w->op;
		op->err = err;
		if (err == 0) {
			object_get(cur);
			op->obj = cur;
		}
		op_complete(op);
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
		if (!f->from_tier)
			sh->m.bytes_from_s3 += e->len;
	}
	while (w) {
		struct waiter *next = w->next;
		if (err == 0)
			op_block_ready(w->op, e);
		else
			op_block_failed(w->op, err);
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
	if (sh->d->cfg.metadata_ttl_s == 0)
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
	log_warn("dataset %s: s3://%s/%s%s: S3 protocol error (%s): %s",
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
	f->attempt = 0;
	*err = fetch_start(f);
	return *err == 0;
}

/* The LIST op is answered from the listing, which is kept to resume
 * from unless it failed. */
static void list_finish(struct fetch *f, int err)
{
	op_list_ready(f->op, f->lst, err);
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
	char *key = f->kind == FETCH_LIST ? NULL : full_key(ds, f->obj->key);
	char reason[512];
	s3_result_reason(r, reason, sizeof(reason));
	const char *why = err == -EPERM ?
		": S3 denied the daemon access (its credentials or the bucket "
		"policy, not allow_uids)" : "";
	rc_log(err == -ENOENT || err == -ESTALE ? RC_LOG_INFO : RC_LOG_WARN,
	       "dataset %s: %s bucket %s key %s failed: %s%s", ds->cfg->name,
	       what[f->kind], ds->cfg->bucket,
	       rc_esc(key ? key : f->list_prefix ? f->list_prefix : "?"),
	       reason, why);
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

void fetch_done(struct fetch *f, CURLcode code)
{
	struct shard *sh = f->sh;
	struct s3_result r;
	s3_req_result(f->req, code, &r);
	fetch_budget_reply(f, &r);
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
		sh->m.s3_errors++;
		if (r.retryable && f->attempt < sh->d->cfg.max_retries) {
			char reason[512];
			log_debug("S3 %s, retrying",
				  s3_result_reason(&r, reason, sizeof(reason)));
			s3_req_free(f->req);
			f->req = NULL;
			retry_schedule(f);
			return;
		}
	}
	if (f->kind == FETCH_HEAD && !f->open_get && !f->force_get &&
	    err == -EPERM && !r.code[0]) {
		/* A HEAD's 403 has no body to say why: a GET does. */
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
 * from its staged bytes under a version of its own. */
static struct object *open_pending(struct shard *sh, struct object *o,
				   struct dataset *ds, const char *key,
				   struct wobject *w)
{
	char etag[RC_MAX_ETAG];
	snprintf(etag, sizeof(etag), "\"ringcache-pending-%llu\"",
		 (unsigned long long)w->id);
	if (o && o->pending == w) {
		writeback_put(w);
		return o;
	}
	if (!o && !(o = object_new(sh, ds, key))) {
		writeback_put(w);
		return NULL;
	}
	o = object_update(sh, o, etag, w->size);
	if (!o) {
		writeback_put(w);
		return NULL;
	}
	object_unpend(o);
	o->pending = w;
	return o;
}

void daemon_open(struct shard *sh, struct op *op, struct dataset *ds,
		 const char *key, size_t key_len)
{
	struct daemon *d = sh->d;
	(void)key_len;
	struct object *o = *object_slot(sh, ds->id, key);
	uint64_t ttl = (uint64_t)d->cfg.metadata_ttl_s * 1000000000ull;
	if (o && o->pending && o->pending->state != W_COMMITTED) {
		/* Uploaded since: what S3 says now, not the staged copy. */
		object_retire(sh, o);
		o = NULL;
	}
	struct wobject *w = writeback_pending(sh, ds, key);
	if (w) {
		if (!(o = open_pending(sh, o, ds, key, w))) {
			op->err = -ENOMEM;
			op_complete(op);
			return;
		}
		object_get(o);
		op->obj = o;
		op_complete(op);
		return;
	}
	if (o && !o->head_pending && o->etag[0] &&
	    now_ns() - o->fetched_ns < ttl) {
		object_get(o);
		op->obj = o;
		op_complete(op);
		return;
	}
	if (!o && !(o = object_new(sh, ds, key))) {
		op->err = -ENOMEM;
		op_complete(op);
		return;
	}
	if (add_waiter(&o->head_waiters, op) < 0) {
		op->err = -ENOMEM;
		op_complete(op);
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

/* ---- the NVMe tier ------------------------------------------------------ */

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

/* A block miss: from the tier if it holds the block, else from S3. */
static int block_fetch_begin(struct fetch *f)
{
	struct shard *sh = f->sh;
	struct cache_entry *e = f->entry;
	if (sh->tier && tier_enabled(sh->tier)) {
		struct tier_key k;
		entry_tier_name(sh, f->obj, e);
		memcpy(&k, e->ident, sizeof(k));
		if (tier_read(sh->tier, &k, cache_entry_data(e), e->len,
			      tier_read_done, f) == 0) {
			f->tier_reading = true;
			return 0;
		}
	}
	return fetch_start(f);
}

static void tier_write_done(void *ctx, int res)
{
	struct tier_staging *st = ctx;
	st->busy = false;
	if (res >= 0)
		st->sh->m.tier_admitted++;
}

/* The cache evicts a valid block: copy it out (the slot is reused at
 * once) and let the tier write it in the background. */
static void tier_admit(void *ctx, const struct cache_entry *e)
{
	struct shard *sh = ctx;
	if (!tier_enabled(sh->tier) || !(e->ident[0] | e->ident[1]))
		return;
	struct tier_staging *st = NULL;
	for (unsigned i = 0; i < TIER_STAGING && !st; i++)
		if (!sh->staging[i].busy)
			st = &sh->staging[i];
	if (!st) {
		sh->m.tier_skipped++; /* the tier is behind: drop, not wait */
		return;
	}
	struct tier_key k;
	memcpy(&k, e->ident, sizeof(e->ident));
	memcpy(st->mem, cache_entry_data(e), e->len);
	int r = tier_write(sh->tier, &k, st->mem, e->len, tier_write_done, st);
	if (r == 0)
		st->busy = true;
	else if (r != -EEXIST)
		sh->m.tier_skipped++;
}

static void tier_init(struct daemon *d, struct shard *sh)
{
	const struct rc_config *c = &d->cfg;
	struct tier_config tc = {.path = c->tier_path,
				 .size_bytes = c->tier_bytes,
				 .block_bytes = c->block_bytes};
	char err[256];
	/* No fixed buffers: arenas are sparse and give pages back, which
	 * registered (pinned) buffers would not follow. */
	sh->tier = tier_open(&tc, &sh->ring, NULL, 0, err, sizeof(err));
	if (!sh->tier) {
		log_error("tier %s: %s; running from memory only", c->tier_path,
			  err);
		return;
	}
	for (unsigned i = 0; i < TIER_STAGING; i++) {
		sh->staging[i].sh = sh;
		if (posix_memalign((void **)&sh->staging[i].mem, TIER_ALIGN,
				   tier_io_len(c->block_bytes))) {
			log_error("tier: out of memory; running from memory only");
			tier_close(sh->tier);
			sh->tier = NULL;
			return;
		}
	}
	sh->cache.on_evict = tier_admit;
	sh->cache.evict_ctx = sh;
	sh->tier_sync_due_ns = now_ns() + 30000000000ull;
	struct tier_stats ts;
	tier_get_stats(sh->tier, &ts);
	log_info("tier %s: %llu slots of %u KiB, %llu blocks already there%s",
		 c->tier_path, (unsigned long long)ts.n_slots,
		 ts.block_bytes >> 10, (unsigned long long)ts.n_used,
		 ts.direct ? "" : " (buffered: no O_DIRECT here)");
}

void daemon_tier_tick(struct shard *sh)
{
	if (!sh->tier || now_ns() < sh->tier_sync_due_ns)
		return;
	sh->tier_sync_due_ns = now_ns() + 30000000000ull;
	if (tier_sync_index(sh->tier) < 0)
		log_error("tier: index sync failed; tier disabled");
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
	int err = writeback_read(o->pending,
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
	if (o->stale) {
		op_block_failed(op, -ESTALE);
		return;
	}
	struct cache_entry *e = cache_insert(&sh->cache, o->ds->ca[sh->id], o->id,
		b, block_len(o, b, sh->d->cfg.block_bytes), &err);
	if (!e) {
		op_block_failed(op, err);
		return;
	}
	if (o->pending) { /* the bytes are here: no S3 */
		err = fill_from_pending(sh, o, e);
		if (err) {
			cache_discard(&sh->cache, e);
			op_block_failed(op, err);
			return;
		}
		op_block_ready(op, e);
		return;
	}
	e->plan_hint = prefetch_hint(sh, o->id, b);
	struct fetch *f = fetch_new(sh, FETCH_BLOCK, o);
	if (!f || add_waiter(&e->waiters, op) < 0) {
		if (f)
			fetch_free(f);
		cache_discard(&sh->cache, e);
		op_block_failed(op, -ENOMEM);
		return;
	}
	f->entry = e;
	err = block_fetch_begin(f);
	if (err)
		fetch_finish(f, err);
}

int daemon_prefetch_block(struct shard *sh, struct object *o, uint64_t b,
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
	e = cache_insert(&sh->cache, o->ds->ca[sh->id], o->id, b,
			 block_len(o, b, sh->d->cfg.block_bytes), &err);
	if (!e)
		return err;
	e->plan_hint = prefetch_hint(sh, o->id, b);
	if (o->pending) {
		if ((err = fill_from_pending(sh, o, e)) < 0) {
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

void daemon_cancel_prefetch(struct shard *sh, uint64_t gen)
{
	for (struct fetch *f = sh->fetches, *next; f; f = next) {
		next = f->all_next;
		if (!f->prefetch || f->plan_gen != gen || !f->in_curl ||
		    f->entry->waiters)
			continue;
		curl_multi_remove_handle(sh->multi, s3_req_easy(f->req));
		sh->s3_inflight--;
		f->in_curl = false;
		sh->m.prefetch_cancelled++;
		fetch_finish(f, -ECANCELED);
	}
}

void daemon_read(struct shard *sh, struct op *op)
{
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
			op_block_ready(op, e);
			continue;
		}
		sh->m.misses++;
		metrics_dataset_lookup(&sh->m, o->ds->id, false);
		op->cqe.flags &= ~RC_CQE_F_HIT;
		if (e) {
			if (add_waiter(&e->waiters, op) < 0)
				op_block_failed(op, -ENOMEM);
			continue;
		}
		start_block(sh, op, b);
	}
	if (--op->pending == 0)
		op_complete(op);
}

void daemon_list(struct shard *sh, struct op *op, struct dataset *ds,
		 const char *prefix, size_t len)
{
	(void)len;
	struct listing *l = listing_take(&sh->listings, ds->id, prefix,
					 op->offset, now_ns());
	if (!l) {
		op->err = -ENOMEM;
		op_complete(op);
		return;
	}
	listing_advance(l, op->offset);
	if (listing_enough(l, op->len)) {
		op_list_ready(op, l, 0);
		listing_keep(&sh->listings, l);
		return;
	}
	struct fetch *f = fetch_new(sh, FETCH_LIST, NULL);
	if (!f || !(f->list_prefix = full_key(ds, prefix))) {
		listing_free(l);
		if (f)
			fetch_free(f);
		op->err = -ENOMEM;
		op_complete(op);
		return;
	}
	f->op = op;
	f->lst = l;
	int err = fetch_start(f);
	if (err)
		fetch_finish(f, err);
}

/* ---- datasets ----------------------------------------------------------- */

static void dataset_cfg_free(struct rc_dataset_config *c)
{
	if (c) {
		config_dataset_clear(c);
		free(c);
	}
}

/* The arenas of every shard are made here, each bound to its shard's node;
 * a shard joins its arena to its own cache itself (on its thread). */
static int dataset_add(struct daemon *d, const struct rc_dataset_config *cfg)
{
	uint32_t id = atomic_load(&d->n_datasets);
	if (id >= RC_MAX_DATASETS)
		return -ENOSPC;
	struct dataset *ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->cfg = config_dataset_dup(cfg);
	ds->budget = budget_new(cfg->s3_get_rate, cfg->s3_put_rate);
	int err = ds->cfg && ds->budget ? 0 : -ENOMEM;
	uint32_t made = 0;
	for (; made < d->n_shards && !err; made++) {
		char name[96];
		snprintf(name, sizeof(name), "ringcache-%s-%u", cfg->name, made);
		struct arena *a = &ds->arena[made];
		err = arena_init(a, &d->shards[made].budget, name,
				 d->cfg.hugepages, d->cfg.mlock);
		if (!err && d->topo.n_shards > 1 &&
		    topology_bind_memory(&d->topo, (int)made, a->base, a->size) < 0)
			log_warn("dataset %s: shard %u's arena not bound to its "
				 "node", cfg->name, made);
	}
	if (err) {
		for (uint32_t k = 0; k + 1 < made; k++)
			arena_destroy(&ds->arena[k]);
		dataset_cfg_free(ds->cfg);
		budget_free(ds->budget);
		free(ds);
		return err;
	}
	ds->id = id;
	ds->enabled = true;
	d->datasets[id] = ds;
	atomic_store_explicit(&d->n_datasets, id + 1, memory_order_release);
	log_info("dataset %s: %s (id %u)", cfg->name, cfg->uri, ds->id);
	return 0;
}

void daemon_shard_sync_datasets(struct shard *sh)
{
	struct daemon *d = sh->d;
	uint32_t n = atomic_load_explicit(&d->n_datasets, memory_order_acquire);
	for (; sh->n_datasets_seen < n; sh->n_datasets_seen++) {
		struct dataset *ds = d->datasets[sh->n_datasets_seen];
		ds->ca[sh->id] = cache_add_arena(&sh->cache, &ds->arena[sh->id]);
		if (!ds->ca[sh->id]) {
			log_error("dataset %s: out of memory on shard %u",
				  ds->cfg->name, sh->id);
			break; /* its sessions will see it as absent */
		}
	}
}

static void retire_cfg(struct daemon *d, struct rc_dataset_config *c)
{
	struct rc_dataset_config **r =
		realloc(d->retired_cfgs, (d->n_retired + 1) * sizeof(*r));
	if (!r)
		return; /* leaked rather than freed under a reader */
	d->retired_cfgs = r;
	r[d->n_retired++] = c;
}

struct dataset *dataset_by_name(struct daemon *d, const char *name)
{
	for (uint32_t i = 0; i < d->n_datasets; i++)
		if (d->datasets[i]->enabled &&
		    strcmp(d->datasets[i]->cfg->name, name) == 0)
			return d->datasets[i];
	return NULL;
}

/* ---- reload ------------------------------------------------------------- */

/* Keys a reload applies to the running daemon; any other changed key of
 * [daemon] or [s3] needs a restart and is logged as such. */
static const struct {
	const char *section, *key;
} live_keys[] = {
	{"daemon", "log_level"},    {"daemon", "metadata_ttl"},
	{"daemon", "max_sessions"}, {"daemon", "open_fetch"},
	{"daemon", "root_reserved_sessions"},
	{"daemon", "max_sessions_per_uid"},
	{"daemon", "max_leased_per_session"},
	{"daemon", "max_leased_per_uid"},
	{"daemon", "max_pinned_per_uid"},
	{"daemon", "max_inflight_per_session"},
	{"daemon", "max_inflight_per_uid"},
	{"daemon", "max_plan_entries"},
	{"daemon", "max_plan_entries_per_uid"},
	{"daemon", "max_handles"},         {"daemon", "max_registered"},
	{"s3", "credentials"},      {"s3", "access_key"},
	{"s3", "secret_key"},       {"s3", "session_token"},
	{"s3", "profile"},          {"s3", "credentials_file"},
};

static bool key_is_live(const char *section, const char *key)
{
	for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++)
		if (!strcmp(live_keys[i].section, section) &&
		    !strcmp(live_keys[i].key, key))
			return true;
	return false;
}

struct reload {
	struct daemon *d;
	struct rc_config *nc;
	bool creds_changed;
	unsigned n_live, n_restart;
	char restart_keys[sizeof(((struct daemon *)0)->restart_keys)];
};

static void note_change(void *ctx, const char *section, const char *key,
			const char *old_value, const char *new_value)
{
	(void)old_value;
	(void)new_value;
	struct reload *r = ctx;
	if (key_is_live(section, key)) {
		r->n_live++;
		r->creds_changed |= !strcmp(section, "s3");
		return;
	}
	r->n_restart++;
	size_t used = strlen(r->restart_keys);
	snprintf(r->restart_keys + used, sizeof(r->restart_keys) - used,
		 "%s%s.%s", used ? " " : "", section, key);
}

static void log_change(void *ctx, const char *section, const char *key,
		       const char *old_value, const char *new_value)
{
	(void)ctx;
	bool secret = config_key_is_secret(key);
	const char *was = secret ? "(hidden)" : old_value ? old_value : "(default)";
	const char *now = secret ? "(hidden)" : new_value ? new_value : "(default)";
	if (key_is_live(section, key))
		log_info("reload: [%s] %s: %s -> %s, applied", section, key,
			 rc_esc(was), rc_esc(now));
	else
		log_warn("reload: [%s] %s: %s -> %s needs a restart; still "
			 "running with %s", section, key, rc_esc(was),
			 rc_esc(now), rc_esc(was));
}

static bool dataset_kept(const struct dataset *ds, const struct rc_config *nc)
{
	for (size_t j = 0; j < nc->n_datasets; j++)
		if (!strcmp(nc->datasets[j].name, ds->cfg->name) &&
		    !strcmp(nc->datasets[j].uri, ds->cfg->uri))
			return true;
	return false;
}

/* Why the running daemon cannot serve nc's datasets, or NULL. Checked
 * before anything changes: a refused reload changes nothing. */
static const char *reload_refusal(struct daemon *d, const struct rc_config *nc,
				  char *why, size_t len)
{
	uint32_t added = 0;
	for (size_t j = 0; j < nc->n_datasets; j++) {
		const struct rc_dataset_config *c = &nc->datasets[j];
		if (c->writable && c->durability == DURABILITY_LOCAL &&
		    !d->shards[0].journal) {
			snprintf(why, len, "dataset %s: durability = local needs "
				 "the journal, and this daemon started without "
				 "one: restart ringcached to open %s", c->name,
				 nc->journal_path ? nc->journal_path : "it");
			return why;
		}
		const struct dataset *ds = dataset_by_name(d, c->name);
		if (!ds || strcmp(ds->cfg->uri, c->uri) != 0)
			added++;
	}
	if (d->n_datasets + added > RC_MAX_DATASETS) {
		snprintf(why, len, "%u datasets added or moved: this daemon has "
			 "room for %u more until a restart", added,
			 RC_MAX_DATASETS - d->n_datasets);
		return why;
	}
	return NULL;
}

static struct creds_provider *creds_for(const struct rc_config *c, char *err,
					size_t errlen)
{
	struct creds_config cc = {
		.source = c->creds_source,
		.access_key = c->access_key,
		.secret_key = c->secret_key,
		.session_token = c->session_token,
		.profile = c->profile,
		.credentials_file = c->credentials_file,
		.timeout_ms = 2000,
	};
	return creds_provider_new(&cc, err, errlen);
}

/* Datasets: removed ones disabled (mapped arenas stay valid), changed
 * ACLs swapped in, new ones added. Returns how many changed. */
static unsigned reload_datasets(struct daemon *d, const struct rc_config *nc)
{
	unsigned changed = 0;
	for (uint32_t i = 0; i < d->n_datasets; i++) {
		struct dataset *ds = d->datasets[i];
		if (ds->enabled && !dataset_kept(ds, nc)) {
			ds->enabled = false;
			changed++;
			log_info("dataset %s removed: its sessions' handles and "
				 "new opens fail with ENOENT", ds->cfg->name);
		}
	}
	for (size_t j = 0; j < nc->n_datasets; j++) {
		struct dataset *ds = dataset_by_name(d, nc->datasets[j].name);
		if (!ds) {
			int e = dataset_add(d, &nc->datasets[j]);
			changed++;
			if (e)
				log_error("dataset %s: %s", nc->datasets[j].name,
					  strerror(-e));
			continue;
		}
		bool same_acl = config_dataset_same_acl(ds->cfg,
							&nc->datasets[j]);
		struct rc_dataset_config *c = config_dataset_dup(&nc->datasets[j]);
		if (!c) {
			log_error("dataset %s: out of memory: keeping its old "
				  "access lists", ds->cfg->name);
			continue;
		}
		/* Other shards may be reading the old one: it is freed with
		 * the daemon. */
		retire_cfg(d, ds->cfg);
		ds->cfg = c;
		budget_set_ceiling(ds->budget, BUDGET_GET, c->s3_get_rate);
		budget_set_ceiling(ds->budget, BUDGET_PUT, c->s3_put_rate);
		if (same_acl)
			continue;
		changed++;
		log_info("dataset %s: access lists changed: live sessions "
			 "recheck before their next entry", c->name);
	}
	return changed;
}

static void apply_live_keys(struct daemon *d, struct rc_config *nc)
{
	d->cfg.log_level = nc->log_level;
	rc_log_level = nc->log_level;
	d->cfg.metadata_ttl_s = nc->metadata_ttl_s;
	d->cfg.max_sessions = nc->max_sessions;
	d->cfg.open_fetches_block = nc->open_fetches_block;
	d->cfg.root_reserved_sessions = nc->root_reserved_sessions;
	d->cfg.max_sessions_per_uid = nc->max_sessions_per_uid;
	d->cfg.max_leased_per_session = nc->max_leased_per_session;
	d->cfg.max_leased_per_uid = nc->max_leased_per_uid;
	d->cfg.max_pinned_per_uid = nc->max_pinned_per_uid;
	d->cfg.max_inflight_per_session = nc->max_inflight_per_session;
	d->cfg.max_inflight_per_uid = nc->max_inflight_per_uid;
	d->cfg.max_plan_entries = nc->max_plan_entries;
	d->cfg.max_plan_entries_per_uid = nc->max_plan_entries_per_uid;
	d->cfg.max_handles = nc->max_handles;
	d->cfg.max_registered = nc->max_registered;
	quota_set_limits(&d->quota, &d->cfg);
	for (size_t i = 0; i < sizeof(live_keys) / sizeof(live_keys[0]); i++)
		if (config_adopt_value(&d->cfg, nc, live_keys[i].section,
				       live_keys[i].key) < 0)
			log_warn("reload: out of memory recording [%s] %s",
				 live_keys[i].section, live_keys[i].key);
}

static void note_config_file(struct daemon *d)
{
	struct stat st;
	if (stat(d->config_path, &st) == 0) {
		d->config_mtime = st.st_mtim;
		d->config_ino = st.st_ino;
		d->config_size = st.st_size;
	}
}

bool daemon_config_file_changed(const struct daemon *d)
{
	struct stat st;
	if (stat(d->config_path, &st) != 0)
		return true;
	return st.st_ino != d->config_ino || st.st_size != d->config_size ||
	       st.st_mtim.tv_sec != d->config_mtime.tv_sec ||
	       st.st_mtim.tv_nsec != d->config_mtime.tv_nsec;
}

static int refuse(struct daemon *d, const char *why)
{
	d->reload_refused = true;
	log_error("reload refused, keeping the running config: %s", why);
	return -EINVAL;
}

int daemon_reload(struct daemon *d)
{
	struct rc_config nc;
	static char err[CONFIG_ERR_MAX];
	char why[512];
	struct stat before;
	bool have_stat = stat(d->config_path, &before) == 0;
	if (config_load(d->config_path, &nc, err, sizeof(err)) < 0) {
		for (char *line = strtok(err, "\n"); line;
		     line = strtok(NULL, "\n"))
			refuse(d, line);
		return -EINVAL;
	}
	struct reload r = {.d = d, .nc = &nc};
	config_changes(&d->cfg, &nc, note_change, &r);
	struct creds_provider *fresh = NULL;
	const char *no = reload_refusal(d, &nc, why, sizeof(why));
	if (!no && r.creds_changed) {
		char cerr[400];
		if (!(fresh = creds_for(&nc, cerr, sizeof(cerr)))) {
			snprintf(why, sizeof(why), "[s3] credentials: %s", cerr);
			no = why;
		}
	}
	if (no) {
		refuse(d, no);
		config_free(&nc);
		return -EINVAL;
	}
	config_changes(&d->cfg, &nc, log_change, NULL);
	unsigned ds_changed = reload_datasets(d, &nc);
	apply_live_keys(d, &nc);
	if (fresh) {
		creds_provider_replace(d->creds, fresh);
		log_info("reload: credentials now from %s",
			 creds_source_name(d->creds));
	}
	/* After the datasets' new ACLs: a session that sees the new
	 * generation sees them (release/acquire). */
	atomic_fetch_add_explicit(&d->acl_gen, 1, memory_order_release);
	snprintf(d->restart_keys, sizeof(d->restart_keys), "%s",
		 r.restart_keys);
	d->reload_refused = false;
	if (have_stat) {
		d->config_mtime = before.st_mtim;
		d->config_ino = before.st_ino;
		d->config_size = before.st_size;
	}
	config_free(&nc);
	daemon_shard_sync_datasets(&d->shards[0]);
	for (uint32_t i = 1; i < d->n_shards; i++)
		reactor_wake(&d->shards[i]);
	log_info("reloaded %s: %u datasets, %u changed; %u keys applied, %u "
		 "need a restart%s%s", d->config_path, d->n_datasets,
		 ds_changed, r.n_live, r.n_restart, r.n_restart ? ": " : "",
		 r.restart_keys);
	return 0;
}

/* ---- lifecycle ---------------------------------------------------------- */

static int listen_socket(struct daemon *d, char *err, size_t errlen)
{
	const char *path = d->cfg.socket_path;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	char dir[sizeof(sa.sun_path)];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
			snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
			return -1;
		}
	}
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		snprintf(err, errlen, "%s: another ringcached is serving it",
			 path);
		close(fd);
		return -1;
	}
	unlink(path);
	mode_t old = umask(0777 & ~d->cfg.socket_mode);
	int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || chmod(path, d->cfg.socket_mode) < 0 || listen(fd, 256) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	d->listen_fd = fd;
	return 0;
}

static int signals_init(struct daemon *d)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return -errno;
	signal(SIGPIPE, SIG_IGN);
	d->signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
	return d->signal_fd < 0 ? -errno : 0;
}

static int s3_init(struct daemon *d, char *err, size_t errlen)
{
	const struct rc_config *c = &d->cfg;
	d->creds = creds_for(c, err, errlen);
	if (!d->creds)
		return -1;
	log_info("credentials from %s", creds_source_name(d->creds));
	struct s3_config sc = {
		.endpoint = c->endpoint,
		.region = c->region,
		.addressing = c->addressing,
		.tls_verify = c->tls_verify,
		.ca_file = c->ca_file,
		.connect_timeout_ms = c->connect_timeout_ms,
		.request_timeout_ms = c->request_timeout_ms,
		.low_speed_time_s = 10,
		.max_retries = c->max_retries,
		.backoff_base_ms = 50,
		.backoff_cap_ms = 5000,
		.creds = d->creds,
	};
	d->s3 = s3_client_new(&sc, err, errlen);
	return d->s3 ? 0 : -1;
}

static int topology_init(struct daemon *d, char *err, size_t errlen)
{
	char terr[256];
	int r;
	if (d->cfg.topology_file) {
		FILE *f = fopen(d->cfg.topology_file, "r");
		char text[16384];
		size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
		if (f)
			fclose(f);
		text[n] = 0;
		r = topology_from_description(&d->topo, text, terr, sizeof(terr));
	} else {
		r = topology_from_sysfs(&d->topo, "/", terr, sizeof(terr));
	}
	if (r < 0) {
		snprintf(err, errlen, "topology %s: %s",
			 d->cfg.topology_file ? d->cfg.topology_file : "(sysfs)",
			 terr);
		return -1;
	}
	int nodes = topology_shard_count(&d->topo);
	d->n_shards = d->cfg.shards ? d->cfg.shards : (uint32_t)nodes;
	if (d->n_shards < 1)
		d->n_shards = 1;
	if (d->n_shards > RC_MAX_SHARDS)
		d->n_shards = RC_MAX_SHARDS;
	if (d->cfg.memory_bytes / d->n_shards < d->cfg.block_bytes * 4ull) {
		snprintf(err, errlen, "memory %llu is too small for %u shards",
			 (unsigned long long)d->cfg.memory_bytes, d->n_shards);
		return -1;
	}
	log_info("topology: %d NUMA node(s) with CPUs and memory, %d GPU(s): "
		 "%u shard(s)", nodes, d->topo.n_gpus, d->n_shards);
	return 0;
}

static int shard_init(struct daemon *d, struct shard *sh, uint32_t id,
		      char *err, size_t errlen)
{
	sh->d = d;
	sh->id = id;
	sh->wake_fd = -1;
	pthread_mutex_init(&sh->lock, NULL);
	sh->objects_mask = 1023;
	sh->objects = calloc(sh->objects_mask + 1, sizeof(*sh->objects));
	if (!sh->objects ||
	    arena_budget_init(&sh->budget, d->cfg.memory_bytes / d->n_shards,
			      d->cfg.block_bytes) < 0 ||
	    cache_init(&sh->cache, &sh->budget) < 0) {
		snprintf(err, errlen, "memory %llu too small for block size %u",
			 (unsigned long long)d->cfg.memory_bytes,
			 d->cfg.block_bytes);
		return -1;
	}
	sh->cache.next_use = prefetch_next_use;
	sh->cache.owner_ctx = sh;
	sh->cache.shed_pins = prefetch_shed;
	int r = reactor_init(sh);
	if (r < 0) {
		snprintf(err, errlen, "io_uring/curl init: %s", strerror(-r));
		return -1;
	}
	return 0;
}

/* After the datasets: replayed objects name theirs. */
static int writeback_start(struct daemon *d, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < d->n_shards; i++)
		if (writeback_init(&d->shards[i], err, errlen) < 0)
			return -1;
	return 0;
}

int daemon_init(struct daemon *d, const char *config_path, char *err,
		size_t errlen)
{
	memset(d, 0, sizeof(*d));
	d->listen_fd = d->signal_fd = -1;
	d->started_ns = now_ns();
	if (config_load(config_path, &d->cfg, err, errlen) < 0)
		return -1;
	d->config_path = strdup(config_path);
	rc_log_level = d->cfg.log_level;
	quota_init(&d->quota, &d->cfg);
	if (d->config_path)
		note_config_file(d);
	if (topology_init(d, err, errlen) < 0)
		return -1;
	d->shards = calloc(d->n_shards, sizeof(*d->shards));
	if (!d->config_path || !d->shards) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (s3_init(d, err, errlen) < 0)
		return -1;
	int r;
	for (uint32_t i = 0; i < d->n_shards; i++)
		if ((r = shard_init(d, &d->shards[i], i, err, errlen)) < 0)
			return -1;
	if (d->cfg.tier_path)
		tier_init(d, &d->shards[0]);
	for (size_t i = 0; i < d->cfg.n_datasets; i++) {
		r = dataset_add(d, &d->cfg.datasets[i]);
		if (r < 0) {
			snprintf(err, errlen, "dataset %s: arena: %s",
				 d->cfg.datasets[i].name, strerror(-r));
			return -1;
		}
	}
	for (uint32_t i = 0; i < d->n_shards; i++)
		daemon_shard_sync_datasets(&d->shards[i]);
	if (writeback_start(d, err, errlen) < 0)
		return -1;
	struct shard *sh = &d->shards[0];
	if ((r = signals_init(d)) < 0) {
		snprintf(err, errlen, "signals: %s", strerror(-r));
		return -1;
	}
	if (listen_socket(d, err, errlen) < 0)
		return -1;
	log_info("ringcached: %s, %u shard(s), %llu MiB in %llu superblocks "
		 "each, block %u KiB, socket %s", config_path, d->n_shards,
		 (unsigned long long)(sh->budget.sb_total * sh->budget.sb_bytes >> 20),
		 (unsigned long long)sh->budget.sb_total,
		 d->cfg.block_bytes >> 10, d->cfg.socket_path);
	return 0;
}

void daemon_destroy(struct daemon *d)
{
	for (uint32_t i = 0; d->shards && i < d->n_shards; i++) {
		struct shard *sh = &d->shards[i];
		if (!sh->d)
			continue; /* init failed before this shard */
		while (sh->sessions)
			session_close(sh->sessions);
		sh->retries = NULL;
		while (sh->fetches) {
			struct fetch *f = sh->fetches;
			if (f->in_curl)
				curl_multi_remove_handle(sh->multi,
							 s3_req_easy(f->req));
			fetch_finish(f, -ECANCELED);
		}
		listing_cache_clear(&sh->listings);
		writeback_destroy(sh);
		if (sh->tier) {
			tier_close(sh->tier); /* syncs the index */
			sh->tier = NULL;
		}
		for (unsigned k = 0; k < TIER_STAGING; k++)
			free(sh->staging[k].mem);
		reactor_destroy(sh);
		plan_index_free(&sh->plan_index);
		sh->cache.on_evict = NULL;
		cache_destroy(&sh->cache);
	}
	for (uint32_t i = 0; i < d->n_datasets; i++) {
		for (uint32_t k = 0; k < d->n_shards; k++)
			arena_destroy(&d->datasets[i]->arena[k]);
		dataset_cfg_free(d->datasets[i]->cfg);
		budget_free(d->datasets[i]->budget);
		free(d->datasets[i]);
	}
	for (size_t i = 0; i < d->n_retired; i++)
		dataset_cfg_free(d->retired_cfgs[i]);
	free(d->retired_cfgs);
	for (uint32_t k = 0; d->shards && k < d->n_shards; k++) {
		struct shard *sh = &d->shards[k];
		for (uint64_t i = 0; sh->objects && i <= sh->objects_mask; i++) {
			for (struct object *o = sh->objects[i], *n; o; o = n) {
				n = o->hnext;
				free(o->key);
				free(o);
			}
		}
		free(sh->objects);
		if (sh->wake_fd >= 0)
			close(sh->wake_fd);
		pthread_mutex_destroy(&sh->lock);
	}
	free(d->shards);
	if (d->s3)
		s3_client_free(d->s3);
	if (d->creds)
		creds_provider_free(d->creds);
	if (d->listen_fd >= 0) {
		close(d->listen_fd);
		unlink(d->cfg.socket_path);
	}
	if (d->signal_fd >= 0)
		close(d->signal_fd);
	quota_destroy(&d->quota);
	config_free(&d->cfg);
	free(d->config_path);
}
