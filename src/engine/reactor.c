/* reactor.c - owns a shard's io_uring, its timers and its wake eventfd,
 * and hands each CQE to the handler its rc_ev carries. Nothing above this
 * file (sessions, fetches, uploads, the journal) is known here. */
#include "reactor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

struct reactor {
	struct io_uring ring;
	struct reactor_timer *timers; /* sorted by due_ns */
	int wake_fd;
	uint64_t wake_buf;
	struct rc_ev wake_ev;
	void (*on_wake)(void *ctx);
	void *wake_ctx;
};

static void arm_wake(struct reactor *r);

static void on_wake_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	struct reactor *r = rc_container_of(ev, struct reactor, wake_ev);
	if (cqe->res == -ECANCELED)
		return;
	arm_wake(r);
	if (r->on_wake)
		r->on_wake(r->wake_ctx);
}

static void arm_wake(struct reactor *r)
{
	struct io_uring_sqe *sqe = reactor_sqe(r);
	io_uring_prep_read(sqe, r->wake_fd, &r->wake_buf, sizeof(r->wake_buf),
			   0);
	io_uring_sqe_set_data(sqe, &r->wake_ev);
}

struct reactor *reactor_new(unsigned depth, int *err)
{
	struct reactor *r = calloc(1, sizeof(*r));
	if (!r) {
		*err = -ENOMEM;
		return NULL;
	}
	struct io_uring_params p = {0};
	p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
	int e = io_uring_queue_init_params(depth, &r->ring, &p);
	if (e < 0) { /* an older kernel: without the flags */
		memset(&p, 0, sizeof(p));
		e = io_uring_queue_init_params(depth, &r->ring, &p);
	}
	if (e < 0) {
		free(r);
		*err = e;
		return NULL;
	}
	r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->wake_fd < 0) {
		*err = -errno;
		io_uring_queue_exit(&r->ring);
		free(r);
		return NULL;
	}
	r->wake_ev.fn = on_wake_cqe;
	arm_wake(r);
	return r;
}

void reactor_free(struct reactor *r)
{
	if (!r)
		return;
	while (r->timers)
		reactor_timer_cancel(r->timers);
	io_uring_queue_exit(&r->ring);
	close(r->wake_fd);
	free(r);
}

struct io_uring *reactor_ring(struct reactor *r)
{
	return &r->ring;
}

struct io_uring_sqe *reactor_sqe(struct reactor *r)
{
	return uring_sqe(&r->ring);
}

bool reactor_cq_ready(struct reactor *r)
{
	return io_uring_cq_ready(&r->ring) > 0;
}

/* Only the CQEs ready on entry: the handlers' own syscalls (curl's recv,
 * a full SQ's submit) let the kernel post more meanwhile, and a loop that
 * followed the tail ran as long as any transfer had bytes coming (300 ms
 * and more of a cold start, perf/README.md), while timers, completions
 * for the clients (published after the turn) and new entries waited. The
 * rest is the next turn's. */
static void reap(struct reactor *r)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0, ready = io_uring_cq_ready(&r->ring);
	io_uring_for_each_cqe(&r->ring, head, cqe) {
		if (n == ready)
			break;
		rc_ev_dispatch(cqe);
		n++;
	}
	io_uring_cq_advance(&r->ring, n);
}

void reactor_turn(struct reactor *r, int64_t max_wait_ns)
{
	if (r->timers) {
		uint64_t now = rc_now_ns();
		int64_t t = r->timers->due_ns > now
				    ? (int64_t)(r->timers->due_ns - now) : 0;
		if (t < max_wait_ns)
			max_wait_ns = t;
	}
	if (max_wait_ns <= 0 || io_uring_cq_ready(&r->ring)) {
		io_uring_submit(&r->ring);
	} else {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts = {
			.tv_sec = max_wait_ns / 1000000000ll,
			.tv_nsec = max_wait_ns % 1000000000ll};
		io_uring_submit_and_wait_timeout(&r->ring, &cqe, 1, &ts, NULL);
	}
	reap(r);
}

/* ---- timers ------------------------------------------------------------- */

void reactor_timer_init(struct reactor_timer *t, reactor_timer_fn fn)
{
	memset(t, 0, sizeof(*t));
	t->fn = fn;
}

void reactor_timer_cancel(struct reactor_timer *t)
{
	if (!t->armed)
		return;
	*t->pprev = t->next;
	if (t->next)
		t->next->pprev = t->pprev;
	t->armed = false;
	t->next = NULL;
	t->pprev = NULL;
}

void reactor_timer_at(struct reactor *r, struct reactor_timer *t,
		      uint64_t due_ns)
{
	reactor_timer_cancel(t);
	t->due_ns = due_ns;
	struct reactor_timer **pp = &r->timers;
	while (*pp && (*pp)->due_ns <= due_ns)
		pp = &(*pp)->next;
	t->next = *pp;
	if (*pp)
		(*pp)->pprev = &t->next;
	t->pprev = pp;
	*pp = t;
	t->armed = true;
}

void reactor_timer_after(struct reactor *r, struct reactor_timer *t,
			 uint64_t delay_ns)
{
	reactor_timer_at(r, t, rc_now_ns() + delay_ns);
}

/* The due timers move to a list of their own first: one that re-arms for
 * "now" waits for the next turn instead of running forever, and one that
 * a handler cancels (its owner freed) leaves that list safely. */
void reactor_run_timers(struct reactor *r)
{
	uint64_t now = rc_now_ns();
	struct reactor_timer *due = NULL, **tail = &due;
	while (r->timers && r->timers->due_ns <= now) {
		struct reactor_timer *t = r->timers;
		reactor_timer_cancel(t);
		t->pprev = tail;
		*tail = t;
		tail = &t->next;
		t->armed = true;
	}
	while (due) {
		struct reactor_timer *t = due;
		reactor_timer_cancel(t);
		t->fn(t);
	}
}

/* ---- wake-ups from other threads ---------------------------------------- */

void reactor_on_wake(struct reactor *r, void (*fn)(void *ctx), void *ctx)
{
	r->on_wake = fn;
	r->wake_ctx = ctx;
}

void reactor_wake(struct reactor *r)
{
	uint64_t one = 1;
	if (write(r->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("reactor wake: %s", strerror(errno));
}
