/* vec.h - the one growable array: capacity doubles, overflow checked.
 *
 * Use: keep (T *items, uint32_t cap) in the owner; before writing index
 * need-1, call RC_GROW(items, cap, need): 0, or -ENOMEM with items and cap
 * unchanged. New slots are zeroed. The owner frees items. */
#ifndef RC_VEC_H
#define RC_VEC_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int rc_grow(void **items, uint32_t *cap, uint64_t need,
			  size_t elem, uint32_t first_cap)
{
	if (need <= *cap)
		return 0;
	uint64_t n = *cap ? *cap : (first_cap ? first_cap : 8);
	while (n < need)
		n *= 2;
	if (n > UINT32_MAX || n > SIZE_MAX / elem)
		return -ENOMEM;
	void *p = realloc(*items, (size_t)n * elem);
	if (!p)
		return -ENOMEM;
	memset((char *)p + (size_t)*cap * elem, 0,
	       (size_t)(n - *cap) * elem);
	*items = p;
	*cap = (uint32_t)n;
	return 0;
}

#define RC_GROW(items, cap, need) \
	rc_grow((void **)&(items), &(cap), (need), sizeof(*(items)), 0)
/* The same, starting at first slots rather than 8. */
#define RC_GROW_FROM(items, cap, need, first) \
	rc_grow((void **)&(items), &(cap), (need), sizeof(*(items)), (first))

#endif
