/* prefetch.c - owns prefetch plans: validating and copying a session's
 * plan, the window of pinned blocks ahead of the session's reads, and the
 * deficit-round-robin scheduler that shares prefetch GETs between queues.
 * What to issue, unpin or evict is decided by plan.c's pure functions;
 * this file applies it to the shard (fetches, cache pins, quotas). */
#include "prefetch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "fetch.h"
#include "log.h"

/* ---- the plan index (plan.h): (object, block) -> its next planned use
 * A cache entry's plan_hint is nonzero while the index may plan it. */

uint64_t prefetch_hint(const struct shard *sh, uint64_t obj_id, uint64_t b)
{
	return plan_index_hint(&sh->plan_index, obj_id, b);
}

int64_t prefetch_next_use(void *shard, struct cache_entry *e)
{
	struct shard *sh = shard;
	if (!e->plan_hint || !sh->plan_index.keys)
		return INT64_MAX;
	int64_t best = plan_index_next_use(&sh->plan_index, e->obj_id,
					   e->blkno, sh->d->cfg.block_bytes);
	if (best == INT64_MAX)
		e->plan_hint = 0; /* no further use planned: skip the lookup */
	return best;
}

/* A planned block already cached learns its place. */
static void hint_cached(void *shard, uint64_t obj_id, uint64_t b)
{
	struct shard *sh = shard;
	struct cache_entry *e = cache_lookup(&sh->cache, obj_id, b, false);
	if (e)
		e->plan_hint = prefetch_hint(sh, obj_id, b);
}

static void index_rebuild(struct shard *sh)
{
	uint32_t n = 0;
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->pqueues)
		n += pqueue_of(pos)->plan != NULL;
	struct plan **plans = malloc((n ? n : 1) * sizeof(*plans));
	int r = -ENOMEM;
	if (plans) {
		n = 0;
		rc_list_for_each(pos, &sh->pqueues)
			if (pqueue_of(pos)->plan)
				plans[n++] = pqueue_of(pos)->plan;
		r = plan_index_build(&sh->plan_index, plans, n,
				     sh->d->cfg.block_bytes, hint_cached, sh);
		free(plans);
	} else {
		plan_index_free(&sh->plan_index);
	}
	/* on -ENOMEM the default policy stands */
	sh->cache.plans_active = r > 0;
}

/* What all windows together may pin: half the memory. */
static uint64_t pinned_budget(const struct shard *sh)
{
	return sh->budget.sb_total * sh->budget.sb_bytes / 2;
}

static uint64_t window_bytes(const struct shard *sh)
{
	return plan_window_bytes(sh->d->cfg.prefetch_window_bytes,
				 sh->budget.sb_total * sh->budget.sb_bytes,
				 sh->n_planned);
}

/* Whether the plan's uid pins all it may: its windows stop growing. */
static bool uid_pins_full(const struct shard *sh, const struct plan *p)
{
	return p->usage &&
	       atomic_load_explicit(&p->usage->pinned_bytes,
				    memory_order_relaxed) >=
		       sh->d->quota.v->pinned_per_uid;
}

/* The plan's own count goes in plan.c; the shard's and the uid's here. */
static void pinned_sub(struct shard *sh, struct plan *p, uint64_t bytes)
{
	sh->pf_pinned_bytes -= bytes;
	if (p->usage)
		quota_uncharge(&p->usage->pinned_bytes, bytes);
}

static void unpin_until(struct shard *sh, struct plan *p, uint64_t item)
{
	struct cache_entry *e;
	while ((e = plan_pin_pop_before(p, item))) {
		pinned_sub(sh, p, e->len);
		cache_unpin(&sh->cache, e);
	}
}

bool prefetch_shed(void *shard)
{
	struct shard *sh = shard;
	struct plan *p = NULL;
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->pqueues) {
		struct pqueue *q = pqueue_of(pos);
		if (q->plan && q->plan->pin_tail > q->plan->pin_head &&
		    (!p || q->plan->pinned_bytes > p->pinned_bytes))
			p = q->plan;
	}
	if (!p)
		return false;
	uint64_t n = (plan_pin_count(p) + 3) / 4;
	while (n--) {
		struct cache_entry *e = plan_pin_pop_last(p);
		pinned_sub(sh, p, e->len);
		cache_unpin(&sh->cache, e);
	}
	sh->m.prefetch_shed++;
	return true;
}

static int pin_push(struct shard *sh, struct plan *p, uint64_t item,
		    struct cache_entry *e)
{
	if (plan_pin_push(p, item, e) < 0)
		return -ENOMEM;
	sh->pf_pinned_bytes += e->len;
	if (p->usage) /* the limit is checked before (plan_has_work) */
		atomic_fetch_add_explicit(&p->usage->pinned_bytes, e->len,
					  memory_order_relaxed);
	cache_pin(&sh->cache, e);
	return 0;
}

static void plan_free(struct shard *sh, struct plan *p)
{
	unpin_until(sh, p, UINT64_MAX);
	if (p->usage)
		quota_uncharge(&p->usage->plan_entries, p->charged);
	for (uint64_t i = p->base; i < p->n; i++)
		object_put(sh->d, plan_item_at(p, i)->obj);
	free(p->items);
	free(p->blk_next);
	free(p->pins);
	free(p);
}

/* Copies and validates the client's entries, covering at most
 * max_blocks blocks (-E2BIG past them). Returns the new plan (not yet
 * linked, p->blocks counted) or NULL with *err set. */
static struct plan *plan_copy(const struct pf_client *c,
			      const struct rc_plan_entry *entries, uint64_t n,
			      uint64_t max_blocks, int *err)
{
	uint64_t bs = c->sh->d->cfg.block_bytes;
	struct plan *p = calloc(1, sizeof(*p));
	if (!p || (n && !(p->items = malloc(n * sizeof(*p->items))))) {
		free(p);
		*err = -ENOMEM;
		return NULL;
	}
	*err = 0;
	for (uint64_t i = 0; i < n && !*err; i++) {
		struct rc_plan_entry e;
		copy_from_client(&e, &entries[i], sizeof(e));
		struct object *o = c->resolve(c->resolve_ctx, e.handle);
		*err = o ? plan_entry_check(&e, o->size) : -EBADF;
		if (*err)
			break;
		object_get(o);
		struct plan_item *it = &p->items[p->n++];
		*it = plan_item_make(o, o->id, o->size, &e);
		p->blocks += plan_item_blocks(it, bs);
		if (p->blocks > max_blocks)
			*err = -E2BIG; /* the cost of a plan is its blocks */
	}
	if (*err == -E2BIG)
		quota_refused(&c->sh->d->quota, REFUSED_PLAN_ENTRIES);
	if (*err) {
		plan_free(c->sh, p);
		return NULL;
	}
	return p;
}

/* Moves more's entries to the end of p, dropping p's entries before its
 * cursor (read already: nothing refers to them but stale hints, which
 * index_rebuild renews). more is freed; on -ENOMEM both stay as they
 * were. */
static int plan_append(struct shard *sh, struct plan *p, struct plan *more)
{
	struct plan_item *old;
	uint64_t n_old;
	if (plan_append_items(p, more->items, more->n, sh->d->cfg.block_bytes,
			      &old, &n_old) < 0)
		return -ENOMEM;
	for (uint64_t i = 0; i < n_old; i++)
		object_put(sh->d, old[i].obj);
	free(old);
	more->n = 0; /* its objects' references moved to p */
	plan_free(sh, more);
	return 0;
}

/* A replaced or emptied plan cancels its GETs nobody waits for: the
 * client named what it needs instead. A plan whose clients all left keeps
 * them running: the GETs are paid for, bounded by prefetch_inflight, and a
 * restarted trainer reads those blocks next. */
static void queue_drop_plan(struct shard *sh, struct pqueue *q, bool cancel)
{
	struct plan *p = q->plan;
	if (!p)
		return;
	pthread_mutex_lock(&sh->lock); /* the stats read q->plan under it */
	q->plan = NULL;
	pthread_mutex_unlock(&sh->lock);
	sh->n_planned--;
	if (cancel)
		fetch_cancel_prefetch(sh, p->generation);
	index_rebuild(sh); /* first: the index lists the plans it reads */
	plan_free(sh, p);
}

struct pqueue *pqueue_get(struct shard *sh, int gpu, uid_t uid)
{
	if (gpu >= 0) {
		struct rc_list *pos;
		rc_list_for_each(pos, &sh->pqueues) {
			struct pqueue *q = pqueue_of(pos);
			if (q->gpu == gpu && q->uid == uid) {
				q->refs++;
				return q;
			}
		}
	}
	struct pqueue *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->gpu = gpu < 0 ? -1 : gpu;
	q->uid = uid;
	q->id = ++sh->pq_next_id;
	q->refs = 1;
	pthread_mutex_lock(&sh->lock); /* the stats walk this list */
	rc_list_add(&sh->pqueues, &q->link);
	pthread_mutex_unlock(&sh->lock);
	return q;
}

void pqueue_put(struct shard *sh, struct pqueue *q)
{
	if (!q || --q->refs > 0)
		return;
	queue_drop_plan(sh, q, false);
	pthread_mutex_lock(&sh->lock);
	rc_list_del(&q->link);
	pthread_mutex_unlock(&sh->lock);
	free(q);
}

/* Charges the uid for n more plan blocks, where `freed` of its blocks go
 * once the change is made. */
static int plan_charge(const struct pf_client *c, uint64_t n, uint64_t freed)
{
	struct quota *q = &c->sh->d->quota;
	return quota_charge(q, &c->usage->plan_entries, n,
			    q->v->plan_entries_per_uid + freed,
			    REFUSED_PLAN_ENTRIES_PER_UID);
}

static int append_plan(const struct pf_client *c, struct plan *cur,
		       const struct rc_plan_entry *entries, uint64_t n)
{
	struct shard *sh = c->sh;
	uint64_t limit = sh->d->quota.v->plan_entries;
	uint64_t kept = plan_blocks_ahead(cur);
	uint64_t dropped = cur->charged - kept; /* plan_append drops them */
	int err = 0;
	if (n == 0)
		return 0;
	struct plan *p = plan_copy(c, entries, n, limit - kept, &err);
	if (!p)
		return err;
	uint64_t added = p->blocks;
	if ((err = plan_charge(c, added, dropped)) == 0 &&
	    (err = plan_append(sh, cur, p)) == 0) {
		quota_uncharge(&c->usage->plan_entries, dropped);
		cur->charged = kept + added;
		index_rebuild(sh);
		return 0;
	}
	if (err != -EDQUOT)
		quota_uncharge(&c->usage->plan_entries, added);
	plan_free(sh, p);
	return err;
}

int prefetch_set_plan(const struct pf_client *c,
		      const struct rc_plan_entry *entries, uint64_t n,
		      bool append)
{
	struct shard *sh = c->sh;
	struct pqueue *q = c->pq;
	uint64_t limit = sh->d->quota.v->plan_entries;
	int err;
	if (n > limit) { /* every entry covers a block at least */
		quota_refused(&sh->d->quota, REFUSED_PLAN_ENTRIES);
		return -E2BIG;
	}
	if (!q)
		return -ENOMEM;
	if (sh->d->cfg.prefetch_window_bytes == 0)
		return -EOPNOTSUPP; /* prefetch turned off in the config */
	int accepted = (int)(n > INT32_MAX ? INT32_MAX : n);
	struct plan *cur = q->plan;
	if (append && cur) {
		err = append_plan(c, cur, entries, n);
		return err ? err : accepted;
	}
	if (n == 0) {
		if (!append) /* an empty plan drops the old one */
			queue_drop_plan(sh, q, true);
		return 0;
	}
	struct plan *p = plan_copy(c, entries, n, limit, &err);
	if (!p)
		return err;
	if ((err = plan_charge(c, p->blocks, cur ? cur->charged : 0))) {
		plan_free(sh, p);
		return err;
	}
	p->usage = c->usage;
	p->charged = p->blocks;
	if (plan_link(p, sh->d->cfg.block_bytes) < 0) {
		plan_free(sh, p);
		return -ENOMEM;
	}
	queue_drop_plan(sh, q, true);
	p->generation = ++sh->pf_generation;
	p->ramp = 2;
	pthread_mutex_lock(&sh->lock);
	q->plan = p;
	pthread_mutex_unlock(&sh->lock);
	sh->n_planned++;
	index_rebuild(sh);
	return accepted;
}

void prefetch_consumed(const struct pf_client *c, const struct object *obj,
		       uint64_t offset)
{
	struct plan *p = c->pq ? c->pq->plan : NULL;
	if (!p)
		return;
	uint64_t i = plan_find(p, obj, offset,
			       c->sh->d->cfg.prefetch_window_entries + 16);
	if (i == UINT64_MAX)
		return;
	plan_move_cursor(p, i);
	unpin_until(c->sh, p, i);
}

void prefetch_fetch_done(struct shard *sh, uint64_t gen)
{
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->pqueues) {
		struct plan *p = pqueue_of(pos)->plan;
		if (!p || p->generation != gen)
			continue;
		plan_fetch_done(p, sh->d->cfg.prefetch_inflight);
		return;
	}
}

static bool plan_has_work(const struct shard *sh, const struct plan *p)
{
	return plan_window_open(p, sh->d->cfg.prefetch_window_entries,
				window_bytes(sh)) &&
	       sh->pf_pinned_bytes < pinned_budget(sh) &&
	       !uid_pins_full(sh, p);
}

/* Pins the next block of the plan, fetching it if absent. Returns the
 * bytes fetched (0 if it was cached already), or -1 to stop for now. */
static int64_t plan_issue_one(struct shard *sh, struct plan *p)
{
	if (!plan_has_work(sh, p))
		return -1;
	uint64_t bs = sh->d->cfg.block_bytes, b;
	const struct plan_item *it = plan_next_block(p, bs, &b);
	int64_t cost = 0;
	if (!it->obj->stale) {
		struct cache_entry *e;
		bool started;
		if (fetch_prefetch_block(sh, it->obj, b, p->generation, &e,
					  &started) < 0 ||
		    pin_push(sh, p, p->issued, e) < 0)
			return -1; /* no memory now: try again later */
		cost = started ? e->len : 0;
		if (started) {
			p->prefetched_bytes += e->len;
			p->inflight++;
		}
	}
	plan_block_issued(p, bs);
	return cost;
}

/* Counts a window held back by its uid's pinned bytes once, when it
 * starts to be, not at every turn. */
static void note_pins_held(struct shard *sh, struct plan *p)
{
	bool held = p->issued < p->n && uid_pins_full(sh, p);
	if (held && !p->pins_held)
		quota_refused(&sh->d->quota, REFUSED_PINNED_PER_UID);
	p->pins_held = held;
}

/* Deficit round robin: a queue's turn lasts until it has spent its
 * quantum of bytes; the turn pointer survives between calls, so a queue
 * cut short by the in-flight limit resumes first when a GET completes. */
void prefetch_schedule(struct shard *sh)
{
	uint32_t limit = sh->d->cfg.prefetch_inflight;
	if (!sh->n_planned || sh->pf_inflight >= limit)
		return;
	struct plan *q[256];
	uint32_t n = 0;
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->pqueues) {
		if (n == 256)
			break;
		if (pqueue_of(pos)->plan)
			q[n++] = pqueue_of(pos)->plan;
	}
	if (n == 0)
		return;
	int64_t quantum = sh->d->cfg.block_bytes;
	uint32_t idle = 0;
	while (sh->pf_inflight < limit && idle < n) {
		struct plan *p = q[sh->pf_rr % n];
		note_pins_held(sh, p);
		if (!plan_has_work(sh, p)) {
			p->deficit = 0;
			sh->pf_rr++;
			idle++;
			continue;
		}
		if (p->deficit <= 0) {
			p->deficit += quantum;
			sh->pf_rr++;
			continue;
		}
		int64_t cost = plan_issue_one(sh, p);
		if (cost < 0) {
			sh->pf_rr++;
			idle++;
			continue;
		}
		p->deficit -= cost;
		idle = 0;
	}
}
