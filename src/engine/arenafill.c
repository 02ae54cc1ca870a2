/* arenafill.c - owns a shard's populate jobs: the arenas' prefault reserve
 * faulted in on the digest threads, so the shard's thread finds the pages
 * of a fresh slot mapped instead of faulting and zeroing them on the
 * fetch path (perf/README.md, cold small samples). */
#include "arenafill.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "arena.h"
#include "daemon.h"
#include "log.h"
#include "workers.h"

/* Populates in flight per shard at most: the reserve (2 MiB a job) at
 * once for arena_prefault up to 64M, and a bound on what is queued. */
#define ARENAFILL_JOBS 32

struct arenafill_job {
	struct arena *arena;
	uint64_t off, len;
	int err;   /* the worker's result */
	bool busy; /* submitted, its done callback not run yet */
};

struct arenafill {
	struct arenafill_job jobs[ARENAFILL_JOBS];
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older glibc lacks the name */
#endif

/* On a worker: fault the pages in writable, as a write would, without
 * writing (the reactor may be filling a slot on them meanwhile). */
static void fill_run(void *arg)
{
	struct arenafill_job *j = arg;
	j->err = madvise(j->arena->base + j->off, j->len,
			 MADV_POPULATE_WRITE) < 0 ? -errno : 0;
}

static void fill_done(void *arg)
{
	struct arenafill_job *j = arg;
	j->busy = false;
	struct arena_budget *b = j->arena->budget;
	if (j->err && b->prefault_target)
		log_warn("arena_prefault: populating arena pages failed (%s): "
			 "the reserve is off, fresh slots fault on the shard's "
			 "thread%s", strerror(-j->err),
			 j->err == -EINVAL ? " (a kernel before 5.14 lacks "
					     "MADV_POPULATE_WRITE)" : "");
	arena_populated(j->arena, j->off, j->len, j->err);
}

static int populate(void *ctx, struct arena *a, uint64_t off, uint64_t len)
{
	struct shard *sh = ctx;
	for (unsigned i = 0; i < ARENAFILL_JOBS; i++) {
		struct arenafill_job *j = &sh->fill->jobs[i];
		if (j->busy)
			continue;
		*j = (struct arenafill_job){.arena = a, .off = off, .len = len,
					    .busy = true};
		if (workers_submit(sh->workers, fill_run, fill_done, j) < 0) {
			j->busy = false;
			return -ENOMEM;
		}
		return 0;
	}
	return -EBUSY;
}

void arenafill_init(struct shard *sh, uint64_t target)
{
	if (target == 0)
		return;
	if (!sh->workers || !(sh->fill = calloc(1, sizeof(*sh->fill)))) {
		log_warn("shard %u: arena_prefault off (%s): fresh slots fault "
			 "on the shard's thread", sh->id,
			 sh->workers ? "out of memory" : "no digest threads");
		return;
	}
	sh->budget.populate = populate;
	sh->budget.populate_ctx = sh;
	sh->budget.prefault_target = target;
}

void arenafill_free(struct shard *sh)
{
	free(sh->fill);
	sh->fill = NULL;
	sh->budget.populate = NULL;
}
