/* prefault.h - private to libringcache: maps in, in the background after
 * attach, the pages of an arena that already hold cached bytes.
 *
 * Use: rc_prefault_start right after mmap of an arena's read-only fd (the
 * fd may be closed after it returns: the job holds a dup); rc_prefault_stop
 * before the client unmaps its arenas. fork() first stops every helper
 * (at most one chunk later): the child forgets the parent's jobs, the
 * parent's stay stopped, their pages mapped as far as they got. A helper
 * that cannot get half a CPU stops by itself.
 * Ownership: a job holds its dup'ed fd and a helper thread, keyed by the
 * client; it touches only the page tables of its mapping.
 * Only data ranges (SEEK_DATA/SEEK_HOLE) are populated: a read fault on a
 * hole of a memfd allocates a page, so populating the whole (sparse,
 * twice the memory) mapping would fill it.
 * $RINGCACHE_PREFAULT=0 turns it off, =sync populates in rc_attach
 * itself (perf/touchbench.c compares the three). */
#ifndef RC_CLIENT_PREFAULT_H
#define RC_CLIENT_PREFAULT_H

#include <stddef.h>

void rc_prefault_start(const void *owner, int fd, const void *base,
		       size_t size);
/* Stops and joins the owner's jobs. */
void rc_prefault_stop(const void *owner);

#endif
