/* arenafill.h - the arenas' prefault reserve (store/arena.h) faulted in on
 * a shard's digest threads (common/workers.h).
 *
 * Ownership: the shard owns its struct arenafill (sh->fill) and its jobs;
 * a job is busy from its submission until its done callback ran on the
 * shard's thread. A worker touches only its job and the arena's mapping,
 * which outlives the workers (daemon_destroy frees the workers first,
 * then this, then the arenas). */
#ifndef RC_ARENAFILL_H
#define RC_ARENAFILL_H

#include <stdint.h>

struct shard;

/* Sets the shard's budget to populate through its workers, target bytes
 * ahead (0, no workers or no memory: off, said in the log). After
 * writeback_init made the workers. */
void arenafill_init(struct shard *sh, uint64_t target);
/* After workers_free: no job runs. NULL sh->fill is fine. */
void arenafill_free(struct shard *sh);

#endif
