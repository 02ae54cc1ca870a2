/* uring.h - the one way this project takes an SQE, and what its user_data
 * is. The ring is shared by the reactor, the tier, the journal and the
 * sessions: a full SQ is submitted to make room rather than failing the
 * caller, and every SQE's user_data is a struct rc_ev (or NULL) whose
 * handler gets the CQE, so the loop that reaps needs to know nothing of
 * who submitted (as in redis ae or libuv).
 *
 * Ownership: the submitter owns the rc_ev and keeps it valid until its
 * CQE is handled (for a cancelled request too).
 * Use: embed a struct rc_ev, set fn, pass its address to
 * io_uring_sqe_set_data; the handler finds its object with
 * rc_container_of. A NULL user_data or fn means: nothing to do. */
#ifndef RC_URING_H
#define RC_URING_H

#include <liburing.h>
#include <stddef.h>

struct rc_ev;
typedef void (*rc_ev_fn)(struct rc_ev *ev, struct io_uring_cqe *cqe);
struct rc_ev {
	rc_ev_fn fn;
};

#define rc_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Hands one CQE to the handler its submission carries. */
static inline void rc_ev_dispatch(struct io_uring_cqe *cqe)
{
	struct rc_ev *ev = io_uring_cqe_get_data(cqe);
	if (ev && ev->fn)
		ev->fn(ev, cqe);
}

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
