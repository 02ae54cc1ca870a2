/* listing.h - a shard's LIST continuations: the checked entries of one
 * directory level as S3 paged them, a bounded window of them, and the
 * continuation token to resume from, so a LIST at entry N continues where
 * the previous call stopped instead of re-listing from the first page.
 *
 * Everything here comes from S3 and is checked before it is kept: names
 * must lie under the prefix asked for, sizes under the dataset's
 * max_object_size. Memory is bounded per listing (RC_LIST_WINDOW_BYTES of
 * names ahead of the client) and per shard (RC_LIST_KEPT listings); a
 * listing longer than RC_LIST_MAX_PAGES pages is a protocol error. */
#ifndef RC_LISTING_H
#define RC_LISTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3.h"

#define RC_LIST_MAX_PAGES 10000u         /* pages per listing (10M keys) */
#define RC_LIST_WINDOW_BYTES (4u << 20)  /* names held ahead of a client */
#define RC_LIST_KEPT 16u                 /* continuations kept per shard */
#define RC_LIST_NAME_MAX 1024u           /* S3's longest key */
#define RC_LIST_IDLE_NS (60ull * 1000000000ull) /* a continuation unused
						    this long is dropped */

struct listing;
struct listing_cache {
	struct listing *head; /* most recently kept first */
	unsigned n;
};

/* The kept listing of (dataset, prefix) that can serve entry `from`,
 * removed from the cache, if from > 0 and it was used within
 * RC_LIST_IDLE_NS; else a new one (a LIST at entry 0 lists afresh). NULL:
 * out of memory. The caller owns it until listing_keep/free. */
struct listing *listing_take(struct listing_cache *lc, uint32_t ds_id,
			     const char *prefix, uint64_t from, uint64_t now);
/* Back into the cache (replacing an older one of the same key, evicting
 * the least recently kept past RC_LIST_KEPT). */
void listing_keep(struct listing_cache *lc, struct listing *l);
void listing_free(struct listing *l);
void listing_cache_clear(struct listing_cache *lc);

/* Entries before `from` are served: drop them, now and as pages arrive. */
void listing_advance(struct listing *l, uint64_t from);

/* Checks every name and size of a page against the rules above. full
 * prefix: the dataset prefix plus the prefix listed; ds_prefix_len: how
 * much of a key the client does not see. 0, or -EPROTO with why set. */
int listing_check_page(const struct s3_list_page *page,
		       const char *full_prefix, size_t ds_prefix_len,
		       uint64_t max_size, char *why, size_t whylen);
/* Moves a checked page's entries (common prefixes first, as S3 pages
 * them) and its continuation token in. 0, -EPROTO (too many pages, why
 * set) or -ENOMEM. */
int listing_add_page(struct listing *l, struct s3_list_page *page,
		     size_t ds_prefix_len, char *why, size_t whylen);

/* True when no more pages are needed to answer a LIST at `from` into
 * room bytes: the records fill it, the window is full, or S3 said done. */
bool listing_enough(const struct listing *l, uint64_t room);
/* Where to resume (NULL: the first page). */
const char *listing_token(const struct listing *l);
bool listing_complete(const struct listing *l);
/* Entry idx (absolute), if the window holds it. */
bool listing_at(const struct listing *l, uint64_t idx, const char **name,
		uint64_t *size, bool *is_prefix);
/* The record size a LIST entry of a name this long takes. */
size_t listing_rec_len(size_t name_len);

#endif
