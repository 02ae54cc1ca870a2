/* ahead.h - fetch-ahead for readers by path (ahead.c): tells, from the
 * files a reader reads from their start, when it walks a directory in
 * listing order, and which files to fetch ahead of it. Pure bookkeeping:
 * no I/O, no locking (the caller serialises calls on one struct ahead). */
#ifndef RC_CLIENT_AHEAD_H
#define RC_CLIENT_AHEAD_H

#include <stdint.h>

#define AHEAD_STREAMS 64     /* readers followed at once (least recent goes) */
#define AHEAD_MIN 8          /* files fetched ahead when a walk is confirmed */
#define AHEAD_MAX 32         /* at most this many files ahead of a reader */
#define AHEAD_MAX_STRIDE 16  /* readers sharing one walk round-robin */
#define AHEAD_CONFIRM 3      /* equal forward steps before the first fetch */

/* One reader in one directory: the listing index of its last file, the
 * step between its files, and how far ahead of it files were asked for. */
struct ahead_stream {
	uint64_t reader, dir; /* 0, 0: a free slot */
	uint64_t used;        /* when last noted: the least recent is reused */
	uint32_t last, stride, hits, window, ahead;
};

struct ahead {
	struct ahead_stream s[AHEAD_STREAMS];
	uint64_t tick;
};

/* What to fetch: count files, at first, first + stride, ... */
struct ahead_fetch {
	uint32_t first, stride, count, window;
};

/* reader (a process id) read file `index` of directory `dir` (any id but
 * 0) from its start. Returns the files to fetch ahead of it (count 0:
 * none): after AHEAD_CONFIRM equal forward steps of at most
 * AHEAD_MAX_STRIDE files, AHEAD_MIN ahead, doubling at each further step
 * up to AHEAD_MAX; never a file asked for already in this walk. Any
 * other step (back, a jump, another stride) ends the walk: nothing more
 * until a new one is confirmed. The same file again changes nothing. */
struct ahead_fetch ahead_note(struct ahead *a, uint64_t reader, uint64_t dir,
			      uint32_t index);

#endif
