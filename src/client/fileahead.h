/* fileahead.h - fetch-ahead within a file for `ringcache mount`
 * (fileahead.c): tells, from the READs the kernel sends for a file, when
 * a reader reads it in order, and which bytes past its reads to fetch
 * into the daemon's cache, within a budget of bytes fetched and not read
 * yet. Pure bookkeeping: no I/O, no locking (the caller serialises calls
 * on one struct fileahead). */
#ifndef RC_CLIENT_FILEAHEAD_H
#define RC_CLIENT_FILEAHEAD_H

#include <stdint.h>

#define FILEAHEAD_STREAMS 32          /* files followed at once */
#define FILEAHEAD_CONFIRM (2u << 20)  /* bytes read in order: a stream */
#define FILEAHEAD_MAX (32u << 20)     /* at most this far past the reads */
#define FILEAHEAD_STEP (2u << 20)     /* fetched in pieces at least this big */
/* READs this far either side of a stream's front still follow it: the
 * kernel's readahead (8 MiB on the mount) sends its READs to several
 * workers at once, so they arrive out of order. */
#define FILEAHEAD_GAP (8u << 20)

/* One file read in order: how far its reads went, how much of it was
 * read in order, and how far it was fetched. */
struct fileahead_stream {
	uint64_t file;    /* 0: a free slot */
	uint64_t used_ns; /* its last READ */
	uint64_t front;   /* the end of its furthest READ */
	uint64_t run;     /* bytes read in order up to front */
	uint64_t ahead;   /* fetched up to here (<= front: nothing ahead) */
};

struct fileahead {
	struct fileahead_stream s[FILEAHEAD_STREAMS];
	/* The bound (-o ahead_bytes) on the bytes fetched past the
	 * streams' fronts, and those bytes now, all streams. A stream's
	 * leave the sum when its reader reads them, or life_ns after its
	 * last READ (the slot is free again then, not before). */
	uint64_t budget, unread, life_ns;
};

/* What to fetch: len bytes at off (len 0: nothing). */
struct fileahead_fetch {
	uint64_t off, len;
};

/* file (any id but 0) of size bytes (0: not known) was read at
 * [off, off + len) at now_ns. Returns the bytes to fetch ahead of the
 * reader: none until FILEAHEAD_CONFIRM bytes were read in order; then
 * as far past the front as the reader read in order, at most
 * FILEAHEAD_MAX and never past size, in pieces of at least
 * FILEAHEAD_STEP (the last piece of the file may be less), never a byte
 * twice while the stream lasts, and never more than the budget allows
 * past all fronts together. A READ away from the stream's front (a
 * seek) starts it again. No slot free (each holds bytes fetched and not
 * read, younger than life_ns): the file is not followed. */
struct fileahead_fetch fileahead_note(struct fileahead *fa, uint64_t file,
				      uint64_t size, uint64_t off,
				      uint64_t len, uint64_t now_ns);

#endif
