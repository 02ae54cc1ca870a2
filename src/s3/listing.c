/* listing.c - owns a shard's LIST continuations (see listing.h): the
 * checks on what a ListObjectsV2 page names, the window of entries kept
 * ahead of a client, and the cache of continuations by (dataset, prefix). */
#include "listing.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "ringcache.h"
#include "vec.h"

struct list_rec {
	char *name;          /* relative to the dataset prefix */
	uint64_t size;
	bool is_prefix;
};

struct listing {
	uint32_t ds_id;
	char *prefix;        /* as the client asked, relative to the dataset */
	uint64_t used_ns;    /* when a LIST last took it */
	struct list_rec *recs;
	size_t first, n;     /* the window is recs[first, n) */
	uint32_t cap;
	uint64_t base;       /* entry index of recs[first] */
	uint64_t drop_before; /* the last LIST started here: below it, gone */
	uint64_t next_index; /* entry index the next page starts at */
	size_t name_bytes, rec_bytes; /* of the window */
	char *token;         /* NULL: first page, or done */
	bool complete;
	unsigned pages;
	struct listing *next;
};

size_t listing_rec_len(size_t name_len)
{
	return (sizeof(struct rc_list_entry) + name_len + 7) & ~(size_t)7;
}

void listing_free(struct listing *l)
{
	if (!l)
		return;
	for (size_t i = l->first; i < l->n; i++)
		free(l->recs[i].name);
	free(l->recs);
	free(l->prefix);
	free(l->token);
	free(l);
}

void listing_cache_clear(struct listing_cache *lc)
{
	while (lc->head) {
		struct listing *l = lc->head;
		lc->head = l->next;
		listing_free(l);
	}
	lc->n = 0;
}

static struct listing *listing_new(uint32_t ds_id, const char *prefix,
				   uint64_t now)
{
	struct listing *l = calloc(1, sizeof(*l));
	if (!l || !(l->prefix = strdup(prefix))) {
		free(l);
		return NULL;
	}
	l->ds_id = ds_id;
	l->used_ns = now;
	return l;
}

static struct listing **find_slot(struct listing_cache *lc, uint32_t ds_id,
				  const char *prefix)
{
	struct listing **pp = &lc->head;
	while (*pp && ((*pp)->ds_id != ds_id ||
		       strcmp((*pp)->prefix, prefix) != 0))
		pp = &(*pp)->next;
	return pp;
}

struct listing *listing_take(struct listing_cache *lc, uint32_t ds_id,
			     const char *prefix, uint64_t from, uint64_t now)
{
	struct listing **pp = find_slot(lc, ds_id, prefix), *l = *pp;
	if (l) {
		*pp = l->next;
		l->next = NULL;
		lc->n--;
		if (from > 0 && from >= l->drop_before &&
		    now - l->used_ns < RC_LIST_IDLE_NS) {
			l->used_ns = now;
			return l;
		}
		listing_free(l); /* stale, or the client went back */
	}
	return listing_new(ds_id, prefix, now);
}

void listing_keep(struct listing_cache *lc, struct listing *l)
{
	struct listing **pp = find_slot(lc, l->ds_id, l->prefix);
	if (*pp) {
		struct listing *old = *pp;
		*pp = old->next;
		listing_free(old);
		lc->n--;
	}
	l->next = lc->head;
	lc->head = l;
	if (++lc->n <= RC_LIST_KEPT)
		return;
	pp = &lc->head;
	while ((*pp)->next)
		pp = &(*pp)->next;
	listing_free(*pp);
	*pp = NULL;
	lc->n--;
}

static void drop_front(struct listing *l)
{
	while (l->first < l->n && l->base < l->drop_before) {
		struct list_rec *r = &l->recs[l->first++];
		size_t nl = strlen(r->name);
		l->name_bytes -= nl;
		l->rec_bytes -= listing_rec_len(nl);
		free(r->name);
		l->base++;
	}
	if (l->first == l->n)
		l->first = l->n = 0; /* the next entry pushed sets base */
}

void listing_advance(struct listing *l, uint64_t from)
{
	if (from > l->drop_before)
		l->drop_before = from;
	drop_front(l);
}

/* No empty name, none over S3's longest key, no "." or ".." segment: a
 * client may join these to a path. (A NUL cannot get here: XML has none.) */
static const char *name_problem(const char *rel, size_t len)
{
	if (len == 0)
		return "an empty name";
	if (len > RC_LIST_NAME_MAX)
		return "a name over 1024 bytes";
	for (const char *s = rel, *end = rel + len; s < end;) {
		const char *slash = memchr(s, '/', (size_t)(end - s));
		size_t seg = slash ? (size_t)(slash - s) : (size_t)(end - s);
		if ((seg == 1 && s[0] == '.') ||
		    (seg == 2 && s[0] == '.' && s[1] == '.'))
			return "a '.' or '..' segment";
		if (!slash)
			break;
		s = slash + 1;
	}
	return NULL;
}

static int check_name(const char *key, const char *full_prefix,
		      size_t ds_prefix_len, const char *what, char *why,
		      size_t whylen)
{
	size_t fl = strlen(full_prefix), kl = strlen(key);
	if (kl == fl && strcmp(key, full_prefix) == 0) {
		rc_set_err(why, whylen, "%s '%.200s' names nothing after the "
			   "prefix listed", what, key);
		return -EPROTO;
	}
	if (kl < fl || strncmp(key, full_prefix, fl) != 0) {
		rc_set_err(why, whylen, "%s '%.200s' outside the prefix listed",
			   what, key);
		return -EPROTO;
	}
	const char *problem = name_problem(key + ds_prefix_len,
					   kl - ds_prefix_len);
	if (problem) {
		rc_set_err(why, whylen, "%s '%.200s' is %s", what, key,
			   problem);
		return -EPROTO;
	}
	return 0;
}

int listing_check_page(const struct s3_list_page *page,
		       const char *full_prefix, size_t ds_prefix_len,
		       uint64_t max_size, char *why, size_t whylen)
{
	for (size_t i = 0; i < page->n_prefixes; i++)
		if (check_name(page->prefixes[i], full_prefix, ds_prefix_len,
			       "common prefix", why, whylen) < 0)
			return -EPROTO;
	for (size_t i = 0; i < page->n_objects; i++) {
		const struct s3_list_object *o = &page->objects[i];
		if (check_name(o->key, full_prefix, ds_prefix_len, "key", why,
			       whylen) < 0)
			return -EPROTO;
		if (o->size > max_size) {
			rc_set_err(why, whylen, "key '%.200s' has size %llu, "
				   "over max_object_size %llu", o->key,
				   (unsigned long long)o->size,
				   (unsigned long long)max_size);
			return -EPROTO;
		}
	}
	return 0;
}

static int push(struct listing *l, char **name, size_t ds_prefix_len,
		uint64_t size, bool is_prefix)
{
	uint64_t idx = l->next_index++;
	if (idx < l->drop_before)
		return 0; /* served already: the page is freed by the caller */
	if (l->n == l->cap) {
		if (l->first > 0) {
			memmove(l->recs, l->recs + l->first,
				(l->n - l->first) * sizeof(*l->recs));
			l->n -= l->first;
			l->first = 0;
		}
		if (RC_GROW(l->recs, l->cap, l->n + 1))
			return -ENOMEM;
	}
	if (l->first == l->n)
		l->base = idx;
	char *full = *name;
	size_t rl = strlen(full) - ds_prefix_len;
	memmove(full, full + ds_prefix_len, rl + 1);
	l->recs[l->n++] = (struct list_rec){full, size, is_prefix};
	*name = NULL;
	l->name_bytes += rl;
	l->rec_bytes += listing_rec_len(rl);
	return 0;
}

int listing_add_page(struct listing *l, struct s3_list_page *page,
		     size_t ds_prefix_len, char *why, size_t whylen)
{
	if (++l->pages > RC_LIST_MAX_PAGES) {
		rc_set_err(why, whylen, "more than %u pages",
			   RC_LIST_MAX_PAGES);
		return -EPROTO;
	}
	int err = 0;
	for (size_t i = 0; i < page->n_prefixes && !err; i++)
		err = push(l, &page->prefixes[i], ds_prefix_len, 0, true);
	for (size_t i = 0; i < page->n_objects && !err; i++)
		err = push(l, &page->objects[i].key, ds_prefix_len,
			   page->objects[i].size, false);
	if (err)
		return err;
	free(l->token);
	l->token = NULL;
	if (page->truncated && page->next_token && page->next_token[0]) {
		l->token = page->next_token;
		page->next_token = NULL;
	} else {
		l->complete = true;
	}
	return 0;
}

bool listing_enough(const struct listing *l, uint64_t room)
{
	return l->complete || l->rec_bytes > room ||
	       l->name_bytes >= RC_LIST_WINDOW_BYTES;
}

const char *listing_token(const struct listing *l)
{
	return l->token;
}

bool listing_complete(const struct listing *l)
{
	return l->complete;
}

bool listing_at(const struct listing *l, uint64_t idx, const char **name,
		uint64_t *size, bool *is_prefix)
{
	if (idx < l->base || idx - l->base >= l->n - l->first)
		return false;
	const struct list_rec *r = &l->recs[l->first + (idx - l->base)];
	*name = r->name;
	*size = r->size;
	*is_prefix = r->is_prefix;
	return true;
}
