/* extents.h - the one walk over a file's data extents (SEEK_DATA /
 * SEEK_HOLE): the pages a memfd holds, its holes skipped. Used where a
 * mapping of a client's or the daemon's memfd is populated ahead of use
 * (the client's prefault helper, the daemon's registered-buffer warm-up)
 * so that a hole stays a hole. */
#ifndef RC_EXTENTS_H
#define RC_EXTENTS_H

#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/* The next data extent of fd at or after *pos, clipped to size: true and
 * [*pos, *end), or false when there is none (ENXIO, an error, or past
 * size). Walk: for (pos = 0; rc_next_data_extent(fd, size, &pos, &end);
 * pos = end) */
static inline bool rc_next_data_extent(int fd, uint64_t size, uint64_t *pos,
				       uint64_t *end)
{
	if (*pos >= size)
		return false;
	off_t data = lseek(fd, (off_t)*pos, SEEK_DATA);
	if (data < 0 || (uint64_t)data >= size)
		return false;
	off_t hole = lseek(fd, data, SEEK_HOLE);
	*pos = (uint64_t)data;
	*end = hole < 0 || (uint64_t)hole > size ? size : (uint64_t)hole;
	return true;
}

#endif
