/* test_workers.c - a shard's helper threads (src/common/workers.c): every job
 * runs once on a worker thread and its done callback once on the caller's
 * thread after the eventfd says so; done may submit more; freeing with
 * jobs queued runs no callback and leaks nothing; jobs of a kind are
 * taken together, in queue order, never more than the kind's max, and
 * never with jobs of another kind. */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "workers.h"

#define N_JOBS 200

struct job {
	struct workers *w;
	uint64_t in, out;
	pthread_t ran_on;
	int runs, dones;
	bool again;          /* done submits one follow-up job */
	struct job *follow;
};

static pthread_t main_thread;

static void job_run(void *arg)
{
	struct job *j = arg;
	j->out = j->in * j->in + 1;
	j->ran_on = pthread_self();
	j->runs++;
}

static void job_done(void *arg)
{
	struct job *j = arg;
	cr_assert(pthread_equal(pthread_self(), main_thread),
		  "done ran off the caller's thread");
	j->dones++;
	if (j->again)
		cr_assert_eq(workers_submit(j->w, job_run, job_done, j->follow),
			     0);
}

/* Reaps until nothing is pending; each wait is for the eventfd. */
static void reap_all(struct workers *w)
{
	while (workers_pending(w)) {
		struct pollfd p = {.fd = workers_fd(w), .events = POLLIN};
		cr_assert_eq(poll(&p, 1, 10000), 1, "eventfd never readable");
		workers_reap(w);
	}
}

Test(workers, every_job_runs_once_then_is_done_on_the_callers_thread)
{
	static struct job jobs[N_JOBS], follow;
	main_thread = pthread_self();
	struct workers *w = workers_new(3, "test");
	cr_assert_not_null(w);
	for (int i = 0; i < N_JOBS; i++) {
		jobs[i] = (struct job){.w = w, .in = (uint64_t)i};
		cr_assert_eq(workers_submit(w, job_run, job_done, &jobs[i]), 0);
	}
	follow = (struct job){.w = w, .in = 7};
	jobs[N_JOBS / 2].again = true;
	jobs[N_JOBS / 2].follow = &follow;
	reap_all(w);
	for (int i = 0; i < N_JOBS; i++) {
		cr_assert_eq(jobs[i].runs, 1, "job %d ran %d times", i,
			     jobs[i].runs);
		cr_assert_eq(jobs[i].dones, 1, "job %d done %d times", i,
			     jobs[i].dones);
		cr_assert_eq(jobs[i].out, (uint64_t)i * i + 1);
		cr_assert(!pthread_equal(jobs[i].ran_on, main_thread),
			  "job %d ran on the caller's thread", i);
	}
	cr_assert_eq(follow.dones, 1, "the job submitted by done never ended");
	cr_assert_eq(follow.out, 50);
	workers_free(w);
}

static atomic_int slow_runs;

/* 20 of these take 5 s on one thread: this thread would have to stall
 * that long between queueing them and workers_free() for all to run
 * (at 20 ms each, a 400 ms stall on a busy machine was enough). */
static void slow_run(void *arg)
{
	(void)arg;
	usleep(250000);
	atomic_fetch_add(&slow_runs, 1);
}

static void never_done(void *arg)
{
	(void)arg;
	cr_assert_fail("done ran for a pool being freed");
}

Test(workers, free_with_jobs_queued_calls_no_done)
{
	struct workers *w = workers_new(1, "test");
	cr_assert_not_null(w);
	for (int i = 0; i < 20; i++)
		cr_assert_eq(workers_submit(w, slow_run, never_done, NULL), 0);
	workers_free(w); /* waits for the running job, drops the rest */
	cr_assert_lt(atomic_load(&slow_runs), 20, "queued jobs were all run");
}

/* Jobs of a kind queued behind one that holds the only thread are taken
 * together (max at a time, in queue order), plain jobs one by one. */
static atomic_bool gate_open;
static int batch_sizes[64], n_batches;
static uintptr_t order[64];
static int n_order;

static void gate_run(void *arg)
{
	(void)arg;
	while (!atomic_load(&gate_open))
		usleep(1000);
}

static void many_run(void **args, unsigned n)
{
	cr_assert_leq(n, 4u, "a batch larger than the kind's max");
	batch_sizes[n_batches] = (int)n;
	for (unsigned i = 0; i < n; i++) {
		struct job *j = args[i];
		j->runs++;
		j->out = (uint64_t)n_batches;
		order[n_order++] = (uintptr_t)j->in;
	}
	n_batches++;
}

static void plain_run(void *arg)
{
	struct job *j = arg;
	j->runs++;
	j->out = 1000;
	order[n_order++] = (uintptr_t)j->in;
}

static void count_done(void *arg)
{
	((struct job *)arg)->dones++;
}

Test(workers, jobs_of_a_kind_run_together_up_to_its_max)
{
	static const struct workers_kind kind = {many_run, 4};
	static struct job jobs[11], gate;
	struct workers *w = workers_new(1, "test");
	cr_assert_not_null(w);
	cr_assert_eq(workers_submit(w, gate_run, count_done, &gate), 0);
	for (int i = 0; i < 11; i++) {
		jobs[i] = (struct job){.w = w, .in = (uint64_t)i};
		int r = i == 5 ? workers_submit(w, plain_run, count_done,
						&jobs[i])
			       : workers_submit_kind(w, &kind, count_done,
						     &jobs[i]);
		cr_assert_eq(r, 0);
	}
	atomic_store(&gate_open, true);
	reap_all(w);
	workers_free(w);
	/* 10 of the kind behind the gate: 4, 4, 2 (the plain job 5 between
	 * them runs alone, after the first batch took 0-3 and 4, 6, 7, 8
	 * went into the second). */
	cr_assert_eq(n_batches, 3);
	cr_assert_eq(batch_sizes[0], 4);
	cr_assert_eq(batch_sizes[1], 4);
	cr_assert_eq(batch_sizes[2], 2);
	static const uintptr_t want[11] = {0, 1, 2, 3, 4, 6, 7, 8, 5, 9, 10};
	cr_assert_eq(n_order, 11);
	for (int i = 0; i < 11; i++) {
		cr_assert_eq(order[i], want[i], "run %d was job %lu", i,
			     (unsigned long)order[i]);
		cr_assert_eq(jobs[i].runs, 1);
		cr_assert_eq(jobs[i].dones, 1);
	}
	cr_assert_eq(jobs[5].out, 1000);
}
