/* listener.h - the daemon's listening Unix socket and its accept loop on a
 * reactor.
 *
 * Ownership: listener_open binds the socket (refusing a path another
 * ringcached serves) and owns it; listener_close closes and unlinks it.
 * Each accepted descriptor is handed to on_conn, which owns it from then.
 * Use: listener_start listens (until then a connect is refused, so a
 * client that gets in finds the whole daemon up) and arms the first
 * accept; each one re-arms itself until listener_stop. Out of
 * descriptors, accepting pauses (10 ms doubling to 1 s, a reactor timer)
 * and on_exhausted counts each failure. */
#ifndef RC_LISTENER_H
#define RC_LISTENER_H

#include <stddef.h>
#include <sys/types.h>

struct reactor;
struct listener;

struct listener_ops {
	void (*on_conn)(void *ctx, int fd);
	void (*on_exhausted)(void *ctx); /* EMFILE and the like, each time */
	void *ctx;
};

/* NULL with err set. */
struct listener *listener_open(struct reactor *r, const char *path,
			       mode_t mode, const struct listener_ops *ops,
			       char *err, size_t errlen);
/* 0, or -errno from listen(). */
int listener_start(struct listener *l);
/* No accept is armed again (a pending one completes or is dropped). */
void listener_stop(struct listener *l);
void listener_close(struct listener *l);

#endif
