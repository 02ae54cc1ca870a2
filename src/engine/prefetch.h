/* prefetch.h - per-GPU prefetch queues fed by plans (a sampler's order).
 *
 * Sessions that name the same GPU (and run as the same user) share one
 * queue: a DataLoader's main process hands over the epoch's order while
 * its worker processes read, and any of their reads moves the queue's
 * window. A session without a GPU has a queue of its own. A plan is an
 * ordered list of extents. The shard keeps a
 * window ahead of what the session has read (bytes and entries) fetched
 * and pinned, so prefetched-but-unread blocks are never evicted by another
 * queue's prefetch; the window slides as the session's reads match plan
 * entries. Backend bandwidth is shared between the sessions' queues by
 * deficit round robin over a per-shard limit of prefetch GETs in flight.
 * A new plan replaces the old one: its pins go, its GETs in flight that
 * nobody waits for are cancelled. An appended plan (RC_PLAN_APPEND: the
 * next epoch's order, known early) extends the current one instead: the
 * window slides on into it, and each planned block's uses are chained, so
 * its next use is known across the epoch boundary. */
#ifndef RC_PREFETCH_H
#define RC_PREFETCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "list.h"
#include "plan.h"
#include "config.h" /* RC_MAX_PLAN_ENTRIES */
#include "ringcache.h"

struct shard;
struct object;
struct cache_entry;
struct uid_usage;


struct pqueue {
	int gpu;             /* -1: private to one session */
	uid_t uid;
	uint32_t id;         /* for the stats */
	uint32_t refs;       /* sessions */
	struct plan *plan;   /* or NULL */
	struct rc_list link; /* on shard->pqueues */
};

static inline struct pqueue *pqueue_of(const struct rc_list *n)
{
	return rc_list_entry(n, struct pqueue, link);
}

/* The queue for a session attaching with gpu, as uid. */
struct pqueue *pqueue_get(struct shard *sh, int gpu, uid_t uid);
/* A session leaves its queue; the last one drops the plan. */
void pqueue_put(struct shard *sh, struct pqueue *q);

/* What prefetch needs of a client (the server's session): its shard, its
 * queue, its uid's usage, and how its handles name objects. */
typedef struct object *(*plan_resolve_fn)(void *ctx, uint32_t handle);
struct pf_client {
	struct shard *sh;
	struct pqueue *pq;         /* pqueue_get's */
	struct uid_usage *usage;
	plan_resolve_fn resolve;   /* a handle's object, or NULL */
	void *resolve_ctx;
};

/* PREFETCH_PLAN: entries is the client's array (already bounds-checked),
 * copied and validated here, each handle turned into its object by the
 * client's resolve (NULL: -EBADF); append: RC_PLAN_APPEND. Returns entries
 * accepted or a negated errno: -E2BIG past max_plan_entries (counted in
 * blocks: an entry covering k blocks counts k; appended entries add to
 * those from the cursor on), -EDQUOT past the uid's
 * max_plan_entries_per_uid (the same count over its plans). */
int prefetch_set_plan(const struct pf_client *c,
		      const struct rc_plan_entry *entries, uint64_t n,
		      bool append);
/* The client read obj at offset: slide its queue's window. */
void prefetch_consumed(const struct pf_client *c, const struct object *obj,
		       uint64_t offset);
/* The next planned use of block b of object obj_id, as a cache entry's
 * plan_hint (0: none); and the cache's next_use callback over hints. */
uint64_t prefetch_hint(const struct shard *sh, uint64_t obj_id, uint64_t b);
int64_t prefetch_next_use(void *shard, struct cache_entry *e);

/* A prefetch GET of plan generation gen ended: its queue may open up. */
void prefetch_fetch_done(struct shard *sh, uint64_t gen);

/* The cache's shed_pins callback: the fullest window gives back its
 * farthest quarter (at least one block), to be prefetched again later. */
bool prefetch_shed(void *shard);

/* Issues prefetch GETs across sessions, fairly, within the limits. */
void prefetch_schedule(struct shard *sh);

#endif
