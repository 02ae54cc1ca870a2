/* ahead.c - owns the fetch-ahead detector of `ringcache mount`: which
 * readers walk a directory in listing order, and how far ahead of each
 * the next files are fetched. Like the kernel's readahead, but across
 * files: a window that opens only once the pattern holds, doubles while
 * it holds and closes when it breaks, so a reader in random order
 * (a shuffled DataLoader) causes no fetch at all. */
#include "ahead.h"

#include <stddef.h>

static struct ahead_stream *stream_of(struct ahead *a, uint64_t reader,
				      uint64_t dir, uint32_t index,
				      uint64_t now)
{
	struct ahead_stream *lru = &a->s[0];
	for (unsigned i = 0; i < AHEAD_STREAMS; i++) {
		struct ahead_stream *s = &a->s[i];
		if (s->reader == reader && s->dir == dir)
			return s;
		if (s->used < lru->used)
			lru = s;
	}
	*lru = (struct ahead_stream){.reader = reader, .dir = dir,
				     .used = now, .last = index,
				     .ahead = index};
	return NULL; /* a new walk: one file says nothing yet */
}

struct ahead_fetch ahead_note(struct ahead *a, uint64_t reader, uint64_t dir,
			      uint32_t index)
{
	struct ahead_fetch f = {0};
	uint64_t now = ++a->tick;
	struct ahead_stream *s = stream_of(a, reader, dir, index, now);
	if (!s)
		return f;
	s->used = now;
	if (index == s->last)
		return f; /* the same file read again from its start */
	uint32_t d = index - s->last;
	if (index < s->last || d > AHEAD_MAX_STRIDE) {
		/* back, or a jump: the walk (if any) is over */
		*s = (struct ahead_stream){.reader = reader, .dir = dir,
					   .used = now, .last = index,
					   .ahead = index};
		return f;
	}
	if (d != s->stride) { /* a new step: a walk to confirm */
		s->stride = d;
		s->hits = 0;
		s->window = 0;
		s->ahead = s->last;
	}
	s->hits++;
	s->last = index;
	if (s->hits < AHEAD_CONFIRM)
		return f;
	s->window = s->window ? s->window * 2 : AHEAD_MIN;
	if (s->window > AHEAD_MAX)
		s->window = AHEAD_MAX;
	uint64_t target = (uint64_t)index + (uint64_t)s->window * d;
	uint64_t first = (uint64_t)(s->ahead > index ? s->ahead : index) + d;
	if (target > UINT32_MAX)
		target = UINT32_MAX - (UINT32_MAX - index) % d;
	if (first > target)
		return f;
	f.first = (uint32_t)first;
	f.stride = d;
	f.count = (uint32_t)((target - first) / d + 1);
	f.window = s->window;
	s->ahead = (uint32_t)target;
	return f;
}
