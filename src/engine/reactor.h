/* reactor.h - a shard's event loop, the ground floor of the daemon: one
 * io_uring, a list of timers and a cross-thread wake-up. It knows nothing
 * of sessions, datasets, fetches or uploads: every SQE carries a struct
 * rc_ev (uring.h) and each CQE goes to the handler its event names.
 *
 * Ownership: reactor_new makes the ring, the timer list and the wake
 * eventfd; reactor_free releases them (pending requests are dropped with
 * the ring). Timers and events are the caller's memory, linked in while
 * armed or in flight.
 * Use: one thread per reactor; only reactor_wake may be called from
 * another thread. A loop calls reactor_run_timers, does its own work,
 * then reactor_turn, which submits, waits (at most until the next timer
 * or max_wait_ns), and dispatches the CQEs ready then (those its handlers
 * cause wait for the next turn: the loop's own work is never starved). */
#ifndef RC_REACTOR_H
#define RC_REACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "uring.h"

struct reactor;

struct reactor_timer;
typedef void (*reactor_timer_fn)(struct reactor_timer *t);
/* Embed one; the fields are the reactor's. */
struct reactor_timer {
	reactor_timer_fn fn;
	uint64_t due_ns;
	bool armed;
	struct reactor_timer *next, **pprev;
};

/* A ring of at least depth entries; NULL with *err set (negated errno). */
struct reactor *reactor_new(unsigned depth, int *err);
void reactor_free(struct reactor *r);
/* The ring, for the tier and the journal, which queue their own SQEs. */
struct io_uring *reactor_ring(struct reactor *r);
/* An SQE (a full SQ is submitted to make room). */
struct io_uring_sqe *reactor_sqe(struct reactor *r);
bool reactor_cq_ready(struct reactor *r);

/* Submits, waits for a completion at most max_wait_ns (0: no wait) and
 * never past the next timer, and dispatches the CQEs ready then. */
void reactor_turn(struct reactor *r, int64_t max_wait_ns);
/* Runs every timer due now (one that re-arms itself runs next time). */
void reactor_run_timers(struct reactor *r);

void reactor_timer_init(struct reactor_timer *t, reactor_timer_fn fn);
/* Arms (or moves) t to fire once at due_ns (rc_now_ns clock). */
void reactor_timer_at(struct reactor *r, struct reactor_timer *t,
		      uint64_t due_ns);
void reactor_timer_after(struct reactor *r, struct reactor_timer *t,
			 uint64_t delay_ns);
void reactor_timer_cancel(struct reactor_timer *t);

/* fn(ctx) runs on the reactor's thread after each reactor_wake. */
void reactor_on_wake(struct reactor *r, void (*fn)(void *ctx), void *ctx);
/* Any thread: interrupts the reactor's wait and calls its wake handler. */
void reactor_wake(struct reactor *r);

#endif
