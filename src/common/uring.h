/* uring.h - the one way this project takes an SQE: the ring is shared by
 * the reactor, the tier and the journal, and a full SQ is submitted to
 * make room rather than failing the caller. */
#ifndef RC_URING_H
#define RC_URING_H

#include <liburing.h>

static inline struct io_uring_sqe *uring_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe; /* not NULL right after a submit of a full SQ */
}

#endif
