/* curlio.h - libcurl's multi interface driven by a reactor: curl's
 * sockets become io_uring polls, its timer a reactor timer, and each
 * finished transfer goes to the done callback it was added with.
 *
 * Ownership: curlio_new makes the multi handle (connection limits from
 * max_connections); curlio_free drops it with every transfer still in it
 * (their callbacks are not called). The easy handles stay the caller's.
 * Use: curlio_add(c, easy, done, ctx): done(ctx, easy, code) runs once,
 * on the reactor's thread, after the transfer left the multi handle;
 * curlio_remove takes one out now and done is never called. */
#ifndef RC_CURLIO_H
#define RC_CURLIO_H

#include <curl/curl.h>
#include <stdint.h>

struct reactor;
struct curlio;

typedef void (*curlio_done_fn)(void *ctx, CURL *easy, CURLcode code);

struct curlio *curlio_new(struct reactor *r, long max_connections);
void curlio_free(struct curlio *c);
/* 0, or a negated errno (the transfer was not added, done not called). */
int curlio_add(struct curlio *c, CURL *easy, curlio_done_fn done, void *ctx);
void curlio_remove(struct curlio *c, CURL *easy);
/* Transfers in the multi handle; any thread may read it (metrics). */
uint32_t curlio_inflight(const struct curlio *c);

#endif
