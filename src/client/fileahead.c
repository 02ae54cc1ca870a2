/* fileahead.c - owns the in-file fetch-ahead detector of `ringcache
 * mount`: which files are read in order, and how far past a reader's
 * READs their bytes are fetched. The kernel's own readahead keeps at most
 * its window (8 MiB, READs of 1 MiB) in flight, each READ one synchronous
 * call to the daemon; a cold large file then waits on a few GETs at a
 * time where the C API's reader keeps its whole batch in flight. Fetched
 * ahead in large pieces (one READ_KEY of many blocks each), the kernel's
 * READs find their blocks in the cache or on their way. Like the
 * kernel's readahead, the window grows with what was read in order (as
 * far ahead as was read, up to FILEAHEAD_MAX) and a seek closes it, so a
 * reader of small random ranges fetches nothing; and all of it stays
 * within a budget of bytes fetched and not read yet. */
#include "fileahead.h"

#include <stddef.h>

static uint64_t unread_of(const struct fileahead_stream *s)
{
	return s->ahead > s->front ? s->ahead - s->front : 0;
}

/* file's stream, else a slot for it: a free one (or one whose last READ
 * is older than life_ns: its fetched bytes leave the budget), else the
 * least recent with nothing fetched ahead. NULL: every slot holds bytes
 * fetched and not read yet; *found says whether it was file's own. */
static struct fileahead_stream *slot_of(struct fileahead *fa, uint64_t file,
					uint64_t now_ns, int *found)
{
	struct fileahead_stream *own = NULL, *free_slot = NULL, *lru = NULL;
	for (unsigned i = 0; i < FILEAHEAD_STREAMS; i++) {
		struct fileahead_stream *x = &fa->s[i];
		if (x->file && now_ns > x->used_ns + fa->life_ns) {
			fa->unread -= unread_of(x);
			*x = (struct fileahead_stream){0};
		}
		if (x->file && x->file == file)
			own = x;
		else if (!x->file && !free_slot)
			free_slot = x;
		else if (x->file && !unread_of(x) &&
			 (!lru || x->used_ns < lru->used_ns))
			lru = x;
	}
	*found = own != NULL;
	return own ? own : free_slot ? free_slot : lru;
}

struct fileahead_fetch fileahead_note(struct fileahead *fa, uint64_t file,
				      uint64_t size, uint64_t off,
				      uint64_t len, uint64_t now_ns)
{
	struct fileahead_fetch f = {0};
	int found;
	struct fileahead_stream *s = slot_of(fa, file, now_ns, &found);
	uint64_t end = off + len;
	if (!s || !file)
		return f;
	if (!found || off > s->front + FILEAHEAD_GAP ||
	    end + FILEAHEAD_GAP < s->front) {
		/* a new stream, or a seek: what was fetched past the old
		 * front is no longer this reader's next bytes */
		fa->unread -= unread_of(s);
		*s = (struct fileahead_stream){.file = file, .front = end,
					       .run = len, .ahead = end};
	} else if (end > s->front) {
		uint64_t before = unread_of(s);
		s->run += end - s->front;
		s->front = end;
		fa->unread -= before - unread_of(s); /* read: out of the sum */
	}
	if (now_ns > s->used_ns)
		s->used_ns = now_ns;
	if (s->run < FILEAHEAD_CONFIRM)
		return f;
	uint64_t window = s->run < FILEAHEAD_MAX ? s->run : FILEAHEAD_MAX;
	uint64_t target = s->front + window;
	if (size && target > size)
		target = size;
	uint64_t from = s->ahead > s->front ? s->ahead : s->front;
	if (target <= from)
		return f;
	uint64_t want = target - from;
	uint64_t room = fa->budget > fa->unread ? fa->budget - fa->unread : 0;
	if (want > room)
		want = room;
	if (!want || (want < FILEAHEAD_STEP && from + want != size))
		return f; /* a piece too small to be worth a call */
	f.off = from;
	f.len = want;
	s->ahead = from + want;
	fa->unread += want;
	return f;
}
