/* regbuf_warm.c - owns the warm jobs of registered buffers (see
 * regbuf_warm.h): MADV_POPULATE_READ over the data extents of the
 * client's memfd, on a worker thread; the done callback on the reactor. */
#include "regbuf_warm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "extents.h"
#include "log.h"
#include "session_state.h"
#include "workers.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#define WARM_WINDOW (16u << 20) /* populated per call: what a stop waits for */

struct regbuf_warm {
	struct session *s;
	void (*put)(struct session *s); /* drops the job's reference */
	struct regbuf *b;       /* reactor only; NULL once unregistered */
	uint8_t *base;          /* the mapping, unmapped by done if orphaned */
	int fd;                 /* the client's memfd (a dup), closed by done */
	uint64_t size;
	_Atomic bool stop;      /* unregistered: the worker stops early */
	uint64_t populated;     /* worker: bytes mapped in */
	int err;                /* worker: why it stopped, 0 if it did not */
};

/* Populates [from, to) a window at a time, so a stop waits for one;
 * false once stopped or failed. */
static bool populate(struct regbuf_warm *j, uint64_t from, uint64_t to)
{
	for (uint64_t a = from; a < to && !j->err; a += WARM_WINDOW) {
		if (atomic_load_explicit(&j->stop, memory_order_relaxed))
			return false;
		uint64_t len = to - a < WARM_WINDOW ? to - a : WARM_WINDOW;
		if (madvise(j->base + a, len, MADV_POPULATE_READ) < 0) {
			/* EINVAL: a kernel before 5.14; EFAULT: a page
			 * went away meanwhile. Copies fault. */
			if (errno == EINVAL || errno == ENOMEM)
				j->err = -errno;
		} else {
			j->populated += len;
		}
	}
	return !j->err;
}

/* Only the memfd's data extents: a hole stays a hole. */
static void warm_run(void *arg)
{
	struct regbuf_warm *j = arg;
	uint64_t end;

	for (uint64_t pos = 0; rc_next_data_extent(j->fd, j->size, &pos, &end);
	     pos = end)
		if (!populate(j, pos, end))
			break;
}

static void warm_done(void *arg)
{
	struct regbuf_warm *j = arg;
	if (j->b)
		j->b->warm = NULL;
	else
		munmap(j->base, j->size); /* unregistered meanwhile */
	if (j->err)
		log_debug("registered buffer of %llu bytes (pid %d): mapped %llu "
			  "bytes in, then stopped: %s",
			  (unsigned long long)j->size, (int)j->s->pid,
			  (unsigned long long)j->populated, strerror(-j->err));
	close(j->fd);
	j->put(j->s);
	free(j);
}

void regbuf_warm_start(struct session *s, struct regbuf *b, int fd,
		       void (*put)(struct session *s))
{
	struct workers *w = s->sh->workers;
	if (!w)
		return;
	struct regbuf_warm *j = calloc(1, sizeof(*j));
	if (!j)
		return; /* only slower: the copies fault the pages in */
	*j = (struct regbuf_warm){.s = s, .put = put, .b = b,
				  .base = b->base, .size = b->size,
				  .fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)};
	if (j->fd < 0) {
		free(j);
		return;
	}
	s->refs++;
	b->warm = j;
	if (workers_submit(w, warm_run, warm_done, j) < 0) {
		b->warm = NULL;
		s->refs--;
		close(j->fd);
		free(j);
	}
}

void regbuf_warm_stop(struct session *s)
{
	for (unsigned i = 0; i < 64; i++)
		if (s->bufs[i].warm)
			atomic_store_explicit(&s->bufs[i].warm->stop, true,
					      memory_order_relaxed);
}

bool regbuf_warm_unmap(struct regbuf *b)
{
	struct regbuf_warm *j = b->warm;
	if (!j)
		return false;
	j->b = NULL;
	atomic_store_explicit(&j->stop, true, memory_order_relaxed);
	b->warm = NULL;
	return true;
}
