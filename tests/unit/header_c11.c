/* header_c11.c - include/ringcache.h compiled as strict C11 (-std=c11
 * -pedantic, see tests/meson.build): the layout list as C sees it. */
#include <stddef.h>

#include "ringcache.h"
#include "abi_layout.h"

size_t rc_c11_layout(const size_t **out);

size_t rc_c11_layout(const size_t **out)
{
	static const size_t layout[] = {RC_ABI_LAYOUT(RC_ABI_LAYOUT_ENTRY)};
	*out = layout;
	return sizeof(layout) / sizeof(layout[0]);
}
