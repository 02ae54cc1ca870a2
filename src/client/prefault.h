/* prefault.h - private to libringcache: maps in, at attach, the pages of
 * an arena that already hold cached bytes.
 *
 * Use: after mmap of an arena's read-only fd, before the fd is closed.
 * Ownership: touches only the mapping's page tables; no state kept.
 * Only data ranges (SEEK_DATA/SEEK_HOLE) are populated: a read fault on
 * a hole of a memfd allocates a page, so populating the whole (sparse,
 * twice the memory) mapping would fill it.
 * $RINGCACHE_PREFAULT=0 turns it off (perf/touchbench.c compares). */
#ifndef RC_CLIENT_PREFAULT_H
#define RC_CLIENT_PREFAULT_H

#include <stddef.h>

/* Best effort: returns the bytes populated (0 when off or unsupported). */
size_t rc_prefault_arena(int fd, const void *base, size_t size);

#endif
