/* abi_layout.h - the public structs' sizes and field offsets as an
 * X-macro list, so the same list is evaluated by a C11 and a C++17
 * compilation of include/ringcache.h (test_ring.c compares the two). */
#ifndef RC_TEST_ABI_LAYOUT_H
#define RC_TEST_ABI_LAYOUT_H

#define RC_ABI_LAYOUT(X)                                                      \
	X(sizeof(struct rc_sqe)) X(sizeof(struct rc_cqe))                     \
	X(sizeof(struct rc_ring_hdr)) X(sizeof(struct rc_list_entry))         \
	X(sizeof(struct rc_plan_entry)) X(sizeof(struct rc_dataset_info))     \
	X(sizeof(struct rc_client)) X(sizeof(struct rc_extent))               \
	X(offsetof(struct rc_sqe, user_data)) X(offsetof(struct rc_sqe, dataset)) \
	X(offsetof(struct rc_sqe, arg_len)) X(offsetof(struct rc_cqe, lease)) \
	X(offsetof(struct rc_ring_hdr, sq_head))                              \
	X(offsetof(struct rc_ring_hdr, sq_tail))                              \
	X(offsetof(struct rc_ring_hdr, sq_flags))                             \
	X(offsetof(struct rc_ring_hdr, cq_head))                              \
	X(offsetof(struct rc_ring_hdr, cq_tail))                              \
	X(offsetof(struct rc_ring_hdr, cq_flags))                             \
	X(offsetof(struct rc_ring_hdr, cq_overflow))                          \
	X(offsetof(struct rc_client, hdr)) X(offsetof(struct rc_client, sq_mask)) \
	X(offsetof(struct rc_client, sq_local_tail))                          \
	X(offsetof(struct rc_client, inflight))                               \
	X(offsetof(struct rc_client, arenas))                                 \
	X(offsetof(struct rc_client, lazy_errors))                            \
	X(offsetof(struct rc_client, batch_pending))                          \
	X(sizeof(struct rc_key_result)) X(offsetof(struct rc_key_result, etag)) \
	X(sizeof(struct rc_read_req)) X(offsetof(struct rc_read_req, res))    \
	X(offsetof(struct rc_read_req, etag))

#define RC_ABI_LAYOUT_ENTRY(v) (size_t)(v),

#endif
