/* copyread.h - private to libringcache: the copy-or-map choice for the
 * extents of rc_read_many (copyread.c).
 *
 * Use: copyread_arena_add right after mmap of an arena's read-only fd
 * (it keeps a dup), copyread_arena_drop before the mapping goes or its
 * session is replaced; copyread_settle on each extent a READ_KEY/READ
 * completion leased; copyread_release for a lease with RC_LEASE_LOCAL;
 * copyread_free from rc_detach. */
#ifndef RC_CLIENT_COPYREAD_H
#define RC_CLIENT_COPYREAD_H

#include <stddef.h>
#include <stdint.h>

#include "ringcache.h"

void copyread_arena_add(const void *base, size_t size, int fd);
void copyread_arena_drop(const void *base);
/* Leaves e mapped, or copies its bytes into the client's bounce region,
 * releases the daemon's lease (lazily) and makes e a local lease. */
void copyread_settle(struct rc_client *c, struct rc_extent *e);
/* 0, or -EBADF for a local lease not held. */
int copyread_release(struct rc_client *c, uint32_t lease);
void copyread_free(struct rc_client *c);

#endif
