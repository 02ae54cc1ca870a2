/* metrics_http.h - the Prometheus endpoint (metrics_listen): GET /metrics
 * over HTTP/1.x on one TCP address, served by a thread of its own.
 *
 * Ownership: metrics_http_start owns the listening socket, the thread and
 * every connection until metrics_http_stop. The thread only reads the
 * daemon's statistics (metrics_render); it never blocks a shard.
 * Use: start after daemon_init (the signal mask is set: the thread blocks
 * every signal), stop before daemon_destroy.
 * Limits, for a hostile scraper: a request (line and headers) of at most
 * 4 KiB, 5 s for a connection from accept to the last byte of the reply,
 * 16 connections at once (a new one pushes out the oldest still sending
 * its request), then Connection: close. */
#ifndef RC_METRICS_HTTP_H
#define RC_METRICS_HTTP_H

#include <stddef.h>

struct daemon;
struct metrics_http;

/* Binds d->cfg.metrics_host:metrics_port and starts the thread. *out is
 * NULL (and 0 returned) when metrics_listen is not set. A negated errno
 * with err set when the address cannot be bound. */
int metrics_http_start(const struct daemon *d, struct metrics_http **out,
		       char *err, size_t errlen);
/* Stops the thread, closes every socket, frees h (NULL: nothing). */
void metrics_http_stop(struct metrics_http *h);

#endif
