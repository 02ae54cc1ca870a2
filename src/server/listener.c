/* listener.c - owns the listening socket: bind (one daemon per path), the
 * armed accept on the reactor, and the pause when descriptors run out. */
#include "listener.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "reactor.h"

#define ACCEPT_PAUSE_MIN_MS 10
#define ACCEPT_PAUSE_MAX_MS 1000

struct listener {
	struct reactor *r;
	struct listener_ops ops;
	char *path;
	int fd;
	bool armed, stopped;
	struct rc_ev ev;
	/* accept() out of fds: paused, then retried with a doubling pause;
	 * failures counted, logged once per episode. */
	struct reactor_timer resume;
	uint32_t pause_ms;
	uint64_t failures;
};

static void on_accept(struct rc_ev *ev, struct io_uring_cqe *cqe);

static void arm(struct listener *l)
{
	struct io_uring_sqe *sqe = reactor_sqe(l->r);
	io_uring_prep_accept(sqe, l->fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, &l->ev);
	l->armed = true;
}

/* Out of file descriptors, accept() would fail at once again: stop
 * accepting for a while (doubling, up to a second) instead of spinning.
 * Waiting clients stay in the listen backlog. One line per episode. */
static void pause_accept(struct listener *l, int err)
{
	if (l->ops.on_exhausted)
		l->ops.on_exhausted(l->ops.ctx);
	l->failures++;
	if (l->pause_ms == 0)
		log_warn("accept: %s: no new connections for now, retrying "
			 "every %d ms to %d ms until descriptors are freed",
			 strerror(err), ACCEPT_PAUSE_MIN_MS,
			 ACCEPT_PAUSE_MAX_MS);
	l->pause_ms = l->pause_ms ? 2 * l->pause_ms : ACCEPT_PAUSE_MIN_MS;
	if (l->pause_ms > ACCEPT_PAUSE_MAX_MS)
		l->pause_ms = ACCEPT_PAUSE_MAX_MS;
	reactor_timer_after(l->r, &l->resume, l->pause_ms * 1000000ull);
}

static void resumed(struct listener *l)
{
	if (l->pause_ms == 0)
		return;
	log_info("accept: connections accepted again after %llu failures "
		 "(out of file descriptors)",
		 (unsigned long long)l->failures);
	l->pause_ms = 0;
	l->failures = 0;
}

/* The pause stays until an accept succeeds. */
static void on_resume(struct reactor_timer *t)
{
	struct listener *l = rc_container_of(t, struct listener, resume);
	if (!l->armed && !l->stopped)
		arm(l);
}

static void on_accept(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	struct listener *l = rc_container_of(ev, struct listener, ev);
	int res = cqe->res;
	l->armed = false;
	if (res >= 0 && l->stopped) {
		/* Stopping: a client re-attaching must not get a session of a
		 * daemon about to exit (it would be cut off again); closed at
		 * once, it tries again until the next daemon listens. */
		close(res);
	} else if (res >= 0) {
		resumed(l);
		l->ops.on_conn(l->ops.ctx, res);
	} else if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS ||
		   res == -ENOMEM) {
		pause_accept(l, -res);
		return; /* on_resume arms it again */
	} else if (res != -ECANCELED) {
		log_warn("accept: %s", strerror(-res));
	}
	if (!l->stopped)
		arm(l);
}

static int bind_socket(struct listener *l, mode_t mode, char *err,
		       size_t errlen)
{
	const char *path = l->path;
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
	mode_t old = umask(0777 & ~mode);
	int r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || chmod(path, mode) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	l->fd = fd;
	return 0;
}

struct listener *listener_open(struct reactor *r, const char *path,
			       mode_t mode, const struct listener_ops *ops,
			       char *err, size_t errlen)
{
	struct listener *l = calloc(1, sizeof(*l));
	if (!l || !(l->path = strdup(path))) {
		free(l);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l->r = r;
	l->ops = *ops;
	l->fd = -1;
	l->ev.fn = on_accept;
	reactor_timer_init(&l->resume, on_resume);
	if (bind_socket(l, mode, err, errlen) < 0) {
		free(l->path);
		free(l);
		return NULL;
	}
	return l;
}

int listener_start(struct listener *l)
{
	if (listen(l->fd, 256) < 0)
		return -errno;
	l->stopped = false;
	if (!l->armed)
		arm(l);
	return 0;
}

void listener_stop(struct listener *l)
{
	l->stopped = true;
	reactor_timer_cancel(&l->resume);
}

void listener_close(struct listener *l)
{
	if (!l)
		return;
	reactor_timer_cancel(&l->resume);
	close(l->fd);
	unlink(l->path);
	free(l->path);
	free(l);
}
