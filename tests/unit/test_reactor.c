/* test_reactor.c - a shard's event loop (src/engine/reactor.c) on its own
 * ring: one turn dispatches the completions that were ready when it began
 * and leaves those its handlers caused to the next turn, so that timers,
 * client completions and new entries get their turn while transfers
 * stream (a cold start's GETs kept one turn busy for 300 ms and more). */
#include <criterion/criterion.h>

#include "reactor.h"

/* A chain of NOPs: each handler submits the next one at once, and a NOP
 * completes within its submit, so its CQE is ready before the handler
 * returns, as a curl handler's recv lets a poll complete meanwhile. */
struct chain {
	struct rc_ev ev;
	struct reactor *r;
	int done, left;
};

static void submit_nop(struct chain *c)
{
	struct io_uring_sqe *sqe = reactor_sqe(c->r);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, &c->ev);
	io_uring_submit(reactor_ring(c->r));
}

static void on_nop(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	struct chain *c = rc_container_of(ev, struct chain, ev);
	cr_assert_eq(cqe->res, 0);
	c->done++;
	if (c->left > 0) {
		c->left--;
		submit_nop(c);
	}
}

Test(reactor, a_turn_leaves_completions_its_handlers_caused_to_the_next)
{
	int err = 0;
	struct reactor *r = reactor_new(64, &err);
	cr_assert_not_null(r, "reactor_new: %d", err);
	struct chain c = {.ev.fn = on_nop, .r = r, .left = 1000};
	submit_nop(&c);
	reactor_turn(r, 0);
	cr_assert_eq(c.done, 1, "one turn ran %d handlers of a chain", c.done);
	cr_assert(reactor_cq_ready(r), "the next NOP's completion waits");
	/* Nothing is lost: each turn takes the next link. */
	for (int turns = 0; c.done < 1001 && turns < 5000; turns++)
		reactor_turn(r, 0);
	cr_assert_eq(c.done, 1001);
	cr_assert_not(reactor_cq_ready(r));
	reactor_free(r);
}

/* Several completions ready together all go in one turn. */
Test(reactor, a_turn_dispatches_every_completion_ready_when_it_began)
{
	int err = 0;
	struct reactor *r = reactor_new(64, &err);
	cr_assert_not_null(r, "reactor_new: %d", err);
	struct chain c = {.ev.fn = on_nop, .r = r};
	for (int i = 0; i < 10; i++) {
		struct io_uring_sqe *sqe = reactor_sqe(r);
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, &c.ev);
	}
	reactor_turn(r, 0);
	cr_assert_eq(c.done, 10);
	reactor_free(r);
}
