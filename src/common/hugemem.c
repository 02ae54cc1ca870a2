/* hugemem.c - owns large anonymous buffers backed by transparent huge
 * pages (see hugemem.h for why). */
#include "hugemem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Below this a huge page would mostly hold zeros: the heap serves it. */
#define HUGEMEM_MIN (HUGEMEM_PAGE / 2)

static size_t round_page(size_t len)
{
	return (len + HUGEMEM_PAGE - 1) & ~(size_t)(HUGEMEM_PAGE - 1);
}

void *hugemem_alloc(size_t len)
{
	if (len < HUGEMEM_MIN)
		return calloc(1, len ? len : 1);
	size_t size = round_page(len);
	/* Over-map by one huge page, then trim to a 2 MiB boundary: the
	 * kernel only backs aligned 2 MiB ranges with huge pages. */
	uint8_t *m = mmap(NULL, size + HUGEMEM_PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)m + HUGEMEM_PAGE - 1) &
			  ~(uintptr_t)(HUGEMEM_PAGE - 1);
	size_t head = start - (uintptr_t)m;
	if (head)
		munmap(m, head);
	munmap((uint8_t *)start + size, HUGEMEM_PAGE - head);
	madvise((void *)start, size, MADV_HUGEPAGE); /* advice only */
	return (void *)start;
}

void hugemem_free(void *p, size_t len)
{
	if (p && len < HUGEMEM_MIN)
		free(p);
	else if (p)
		munmap(p, round_page(len));
}
