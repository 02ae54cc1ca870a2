// header_cxx.cpp - include/ringcache.h compiled as C++17: the layout list
// as C++ sees it, and the inline fast path driven from C++ on a ring the
// C test (test_ring.c) builds and checks.
#include <cstddef>
#include <cstring>

#include "ringcache.h"
#include "abi_layout.h"

extern "C" {
size_t rc_cxx_layout(const size_t **out);
int rc_cxx_submit_read(struct rc_client *c, uint32_t handle, uint64_t offset,
		       uint64_t len, uint64_t user_data);
int rc_cxx_reap(struct rc_client *c, struct rc_cqe *out);
int rc_cxx_submit_read_key(struct rc_client *c, int dataset, int slot,
			   const char *key, uint64_t user_data);
}

size_t rc_cxx_layout(const size_t **out)
{
	static const size_t layout[] = {RC_ABI_LAYOUT(RC_ABI_LAYOUT_ENTRY)};
	*out = layout;
	return sizeof(layout) / sizeof(layout[0]);
}

int rc_cxx_submit_read(struct rc_client *c, uint32_t handle, uint64_t offset,
		       uint64_t len, uint64_t user_data)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	rc_prep_read(sqe, handle, offset, len, user_data);
	return rc_submit(c);
}

int rc_cxx_reap(struct rc_client *c, struct rc_cqe *out)
{
	struct rc_cqe *cqe = rc_peek_cqe(c);
	if (!cqe)
		return 0;
	std::memcpy(out, cqe, sizeof(*out));
	rc_cqe_seen(c);
	return 1;
}

int rc_cxx_submit_read_key(struct rc_client *c, int dataset, int slot,
			   const char *key, uint64_t user_data)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	int r = rc_prep_read_key(c, sqe, dataset, slot, key, 0, RC_MAX_IO,
				 RC_READ_KEY_CLOSE, user_data);
	return r < 0 ? r : rc_submit(c);
}
