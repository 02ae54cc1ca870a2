/* regbuf_warm.c - owns the warm jobs of registered buffers (see
 * regbuf_warm.h): mincore over a window, MADV_POPULATE_READ over its
 * resident runs, on a worker thread; the done callback on the reactor. */
#include "regbuf_warm.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "session_state.h"
#include "workers.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#define WARM_WINDOW_PAGES 4096u /* one mincore vector: 16 MiB of 4 KiB pages */

struct regbuf_warm {
	struct session *s;
	void (*put)(struct session *s); /* drops the job's reference */
	struct regbuf *b;       /* reactor only; NULL once unregistered */
	uint8_t *base;          /* the mapping, unmapped by done if orphaned */
	uint64_t size;
	_Atomic bool stop;      /* unregistered: the worker stops early */
	uint64_t populated;     /* worker: bytes mapped in */
	int err;                /* worker: why it stopped, 0 if it did not */
};

static void warm_run(void *arg)
{
	struct regbuf_warm *j = arg;
	long pg = sysconf(_SC_PAGESIZE);
	size_t page = pg > 0 ? (size_t)pg : 4096;
	unsigned char vec[WARM_WINDOW_PAGES];

	for (uint64_t off = 0; off < j->size && !j->err; ) {
		if (atomic_load_explicit(&j->stop, memory_order_relaxed))
			break;
		uint64_t wlen = j->size - off;
		if (wlen > (uint64_t)WARM_WINDOW_PAGES * page)
			wlen = (uint64_t)WARM_WINDOW_PAGES * page;
		size_t n = (size_t)((wlen + page - 1) / page);
		if (mincore(j->base + off, wlen, vec) < 0) {
			j->err = -errno;
			break;
		}
		/* Only the pages the memfd holds: a hole stays a hole. */
		for (size_t i = 0; i < n && !j->err; ) {
			if (!(vec[i] & 1)) {
				i++;
				continue;
			}
			size_t k = i;
			while (k < n && (vec[k] & 1))
				k++;
			uint64_t a = off + (uint64_t)i * page;
			uint64_t e = off + (uint64_t)k * page;
			if (e > j->size)
				e = j->size;
			if (madvise(j->base + a, e - a, MADV_POPULATE_READ) < 0) {
				/* EINVAL: a kernel before 5.14; EFAULT: a
				 * page went away meanwhile. Copies fault. */
				if (errno == EINVAL || errno == ENOMEM)
					j->err = -errno;
			} else {
				j->populated += e - a;
			}
			i = k;
		}
		off += wlen;
	}
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
	j->put(j->s);
	free(j);
}

void regbuf_warm_start(struct session *s, struct regbuf *b,
		       void (*put)(struct session *s))
{
	struct workers *w = s->sh->workers;
	if (!w)
		return;
	struct regbuf_warm *j = calloc(1, sizeof(*j));
	if (!j)
		return; /* only slower: the copies fault the pages in */
	*j = (struct regbuf_warm){.s = s, .put = put, .b = b,
				  .base = b->base, .size = b->size};
	s->refs++;
	b->warm = j;
	if (workers_submit(w, warm_run, warm_done, j) < 0) {
		b->warm = NULL;
		s->refs--;
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
