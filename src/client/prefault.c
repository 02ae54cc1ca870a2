/* prefault.c - owns libringcache's pre-faulting of arena mappings: a
 * DataLoader worker is a new process every epoch, and without this its
 * first pass over a warm cache takes a page fault per 16 pages (fault-
 * around) of every object it reads (perf/README.md, "First touch"). */
#include "prefault.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

static int prefault_enabled(void)
{
	const char *env = getenv("RINGCACHE_PREFAULT");
	return !env || strcmp(env, "0") != 0;
}

size_t rc_prefault_arena(int fd, const void *base, size_t size)
{
	size_t done = 0;
	if (!prefault_enabled())
		return 0;
	for (off_t pos = 0; (size_t)pos < size;) {
		off_t data = lseek(fd, pos, SEEK_DATA);
		if (data < 0 || (size_t)data >= size)
			break; /* ENXIO: no data past pos */
		off_t hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0 || (size_t)hole > size)
			hole = (off_t)size;
		/* A range the daemon punches meanwhile fails with EFAULT or
		 * is re-faulted as a page that holds zeros; either way only
		 * this range is skipped. */
		if (madvise((uint8_t *)base + data, (size_t)(hole - data),
			    MADV_POPULATE_READ) == 0)
			done += (size_t)(hole - data);
		else if (errno == EINVAL)
			break; /* kernel before 5.14 */
		pos = hole;
	}
	return done;
}
