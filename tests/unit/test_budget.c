/* test_budget.c - the S3 request budget's arithmetic (src/engine/budget.c)
 * on a clock the test drives: the token bucket's burst and spacing, slots
 * lent ahead, AIMD (a SlowDown cuts to a share of the answered rate, once
 * per hold time; successes climb back while in use; floor and ceiling),
 * the reply classes, and the lock under threads. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "budget.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (1000 * SEC) /* any clock value but 0 */

static uint32_t tkt; /* tickets the test does not look at */

/* Ends class c's slow start: its first request 10 s before T0 (the ramp
 * is over in 0.75 s; the bucket is full again by T0). */
static void warm(struct budget *b, enum budget_class c)
{
	budget_admit(b, c, T0 - 10 * SEC, &tkt);
}

Test(budget, unshaped_class_never_waits)
{
	struct budget *b = budget_new(0, 0);
	cr_assert_not_null(b);
	for (int i = 0; i < 100000; i++)
		cr_assert_eq(budget_admit(b, BUDGET_GET, T0, &tkt), 0);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, T0);
	cr_assert_eq(budget_admit(b, BUDGET_PUT, T0, &tkt), 0);
	cr_assert_eq(budget_rate(b, BUDGET_GET), 0);
	budget_free(b);
	cr_assert_eq(budget_admit(NULL, BUDGET_GET, T0, &tkt), 0);
}

/* 100/s: a burst of 5 (50 ms) at once, then one every 10 ms. */
Test(budget, burst_then_spacing)
{
	struct budget *b = budget_new(100, 0);
	warm(b, BUDGET_GET);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(budget_admit(b, BUDGET_GET, T0, &tkt), 0, "burst slot %d", i);
	for (int i = 1; i <= 20; i++) {
		uint64_t w = budget_admit(b, BUDGET_GET, T0, &tkt);
		cr_assert(w >= (uint64_t)i * 10 * MS - 1000 &&
			  w <= (uint64_t)i * 10 * MS + 1000,
			  "slot %d: wait %llu ns, want %d ms", i,
			  (unsigned long long)w, i * 10);
	}
	/* The PUT class is separate and unshaped. */
	cr_assert_eq(budget_admit(b, BUDGET_PUT, T0, &tkt), 0);
	budget_free(b);
}

/* Over a long run the bucket grants exactly its rate, and idle time
 * saves at most one burst. */
Test(budget, long_run_rate_and_capped_saving)
{
	struct budget *b = budget_new(1000, 0);
	warm(b, BUDGET_GET);
	uint64_t t = T0, sent = 0;
	/* Offer 4000/s for 10 s: a request every 0.25 ms that waits. */
	uint64_t last_due = 0;
	for (int i = 0; i < 40000; i++, t += 250000) {
		uint64_t w = budget_admit(b, BUDGET_GET, t, &tkt);
		last_due = t + w;
		sent++;
	}
	/* 40000 slots at 1000/s less the 50-slot burst: ~39.95 s after T0. */
	double end_s = (double)(last_due - T0) / 1e9;
	cr_assert(end_s > 39.9 && end_s < 40.0, "last slot at %.3f s", end_s);
	/* A long pause refills one burst only. */
	t = last_due + 3600 * SEC;
	int free_now = 0;
	while (budget_admit(b, BUDGET_GET, t, &tkt) == 0)
		free_now++;
	cr_assert_eq(free_now, 50, "after an hour idle %d slots at once",
		     free_now);
	cr_assert_eq(sent, 40000);
	budget_free(b);
}

/* Replies: OK at `rate` per second for `secs`, from t; returns the end. */
static uint64_t answer_ok(struct budget *b, double rate, double secs,
			  uint64_t t)
{
	uint64_t step = (uint64_t)(1e9 / rate);
	uint64_t end = t + (uint64_t)(secs * 1e9);
	for (; t < end; t += step)
		budget_reply(b, BUDGET_GET, BUDGET_REPLY_OK, t);
	return t;
}

Test(budget, slowdown_cuts_to_a_share_of_the_answered_rate)
{
	struct budget *b = budget_new(5500, 0);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 5500, 1e-9);
	/* S3 answers 200/s, far under the ceiling: the rate stays (not in
	 * use enough to climb, and it is at the ceiling anyway). */
	uint64_t t = answer_ok(b, 200, 2.0, T0);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 5500, 1e-9);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
	double r = budget_rate(b, BUDGET_GET);
	cr_assert(r > 0.9 * 200 * 0.95 && r < 0.9 * 200 * 1.05,
		  "after SlowDown at 200/s answered: %.1f/s", r);
	/* Within the hold time more SlowDowns (late replies to requests
	 * sent before the cut) do not cut again while S3 keeps answering. */
	uint64_t cut = t;
	t = answer_ok(b, r, 0.1, t);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
	t = answer_ok(b, r, 0.3, t);
	cr_assert_lt(t, cut + 500 * MS);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
	cr_assert_geq(budget_rate(b, BUDGET_GET), r, "cut again in the hold");
	/* After it, one does. */
	t = answer_ok(b, r, 0.2, t);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
	cr_assert_lt(budget_rate(b, BUDGET_GET), r);
	budget_free(b);
}

/* A first cut made from a few replies can leave the rate far above what
 * S3 answers: then the next SlowDown cuts again without the long hold. */
Test(budget, a_rate_far_above_the_answers_is_cut_again_soon)
{
	struct budget *b = budget_new(5500, 0);
	/* 10 answers in the first 10 ms read as ~2000/s. */
	for (int i = 0; i < 10; i++)
		budget_reply(b, BUDGET_GET, BUDGET_REPLY_OK, T0 + i * MS);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, T0 + 10 * MS);
	double first = budget_rate(b, BUDGET_GET);
	cr_assert(first > 500 && first < 5500, "first cut to %.0f", first);
	/* Then 100/s answered for 200 ms: far under the rate. */
	uint64_t t = answer_ok(b, 100, 0.2, T0 + 20 * MS);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
	double second = budget_rate(b, BUDGET_GET);
	cr_assert(second < first / 2, "second cut %.0f after %.0f", second,
		  first);
	budget_free(b);
}

Test(budget, slowdown_without_answers_cuts_the_rate_itself)
{
	struct budget *b = budget_new(1000, 0);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, T0);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 900, 1e-6);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, T0 + 500 * MS);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 810, 1e-6);
	/* Others than SlowDown (no answer, 500) do not count. */
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_OTHER, T0 + 2 * SEC);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 810, 1e-6);
	budget_free(b);
}

Test(budget, floor_holds_under_endless_slowdowns)
{
	struct budget *b = budget_new(5500, 10);
	uint64_t t = T0;
	for (int i = 0; i < 1000; i++, t += 600 * MS) {
		budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
		budget_reply(b, BUDGET_PUT, BUDGET_REPLY_SLOWDOWN, t);
	}
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 5.5, 1e-9);
	cr_assert_float_eq(budget_rate(b, BUDGET_PUT), 1.0, 1e-9); /* >= 1/s */
	/* And the floor still admits: one slot per 1/5.5 s. */
	uint64_t w = 0;
	for (int i = 0; i < 3; i++)
		w = budget_admit(b, BUDGET_GET, t, &tkt);
	cr_assert(w > 0, "the floor still shapes");
	budget_free(b);
}

/* Past the rate it was cut from, successes climb slowly: about 3% of the
 * answered rate plus 0.02% of the ceiling per second, never past the
 * ceiling. */
Test(budget, additive_increase_up_to_the_ceiling)
{
	struct budget *b = budget_new(2000, 0);
	uint64_t t = answer_ok(b, 1000, 2.0, T0);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
	double cut = budget_rate(b, BUDGET_GET);
	cr_assert(cut > 870 && cut < 930, "cut to %.1f", cut);
	/* Back near 1000/s within 3 s ... */
	for (int i = 0; i < 30; i++)
		t = answer_ok(b, budget_rate(b, BUDGET_GET), 0.1, t);
	double back = budget_rate(b, BUDGET_GET);
	cr_assert(back > 990 && back < 1100, "%.1f/s 3 s after the cut", back);
	/* ... then one second of answers adds the slow shares. */
	t = answer_ok(b, back, 1.0, t);
	double up = budget_rate(b, BUDGET_GET) - back;
	double want = 0.03 * back + 0.0002 * 2000;
	cr_assert(up > 0.7 * want && up < 1.3 * want,
		  "climbed %.2f/s in 1 s, want about %.2f", up, want);
	/* Long enough: at the ceiling, not over. */
	for (int i = 0; i < 200; i++)
		t = answer_ok(b, budget_rate(b, BUDGET_GET), 0.5, t);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 2000, 1e-9);
	budget_free(b);
}

/* A cut (from a burst, or from an answered rate read low: a reply's lag,
 * a stalled thread) is undone within about a second, back towards the
 * rate it came from; above that only the slow climb. */
Test(budget, a_deep_cut_recovers_fast)
{
	struct budget *b = budget_new(1000, 0);
	uint64_t t = answer_ok(b, 700, 2.0, T0);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, t);
	double cut = budget_rate(b, BUDGET_GET);
	cr_assert(cut > 600 && cut < 660, "cut to %.0f", cut);
	for (int i = 0; i < 10; i++)
		t = answer_ok(b, budget_rate(b, BUDGET_GET), 0.1, t);
	double r = budget_rate(b, BUDGET_GET);
	cr_assert(r > 930 && r <= 1000, "%.0f/s a second after a cut to %.0f "
		  "from 1000", r, cut);
	budget_free(b);
}

Test(budget, idle_budget_does_not_climb)
{
	struct budget *b = budget_new(1000, 0);
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, T0);
	double cut = budget_rate(b, BUDGET_GET);
	/* A trickle of answers (10/s) is not using 900/s. */
	answer_ok(b, 10, 5.0, T0 + SEC);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), cut, 1e-9);
	budget_free(b);
}

Test(budget, reload_moves_the_ceiling)
{
	struct budget *b = budget_new(1000, 3500);
	budget_set_ceiling(b, BUDGET_GET, 100);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 100, 1e-9);
	budget_set_ceiling(b, BUDGET_PUT, 0);
	cr_assert_eq(budget_rate(b, BUDGET_PUT), 0);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(budget_admit(b, BUDGET_PUT, T0, &tkt), 0);
	budget_free(b);
}

Test(budget, classify)
{
	cr_assert_eq(budget_classify(503, "SlowDown"), BUDGET_REPLY_SLOWDOWN);
	cr_assert_eq(budget_classify(503, ""), BUDGET_REPLY_SLOWDOWN);
	cr_assert_eq(budget_classify(503, NULL), BUDGET_REPLY_SLOWDOWN);
	/* CompleteMultipartUpload's 200 with an <Error> body. */
	cr_assert_eq(budget_classify(200, "SlowDown"), BUDGET_REPLY_SLOWDOWN);
	cr_assert_eq(budget_classify(200, ""), BUDGET_REPLY_OK);
	cr_assert_eq(budget_classify(206, NULL), BUDGET_REPLY_OK);
	cr_assert_eq(budget_classify(404, "NoSuchKey"), BUDGET_REPLY_OK);
	cr_assert_eq(budget_classify(412, "PreconditionFailed"),
		     BUDGET_REPLY_OK);
	cr_assert_eq(budget_classify(500, "InternalError"), BUDGET_REPLY_OTHER);
	cr_assert_eq(budget_classify(0, ""), BUDGET_REPLY_OTHER);
}

/* Shards are threads: N threads taking slots at one instant share one
 * queue, so the last slot is exactly (total - burst) / rate ahead. */
#define THREADS 4
#define PER_THREAD 5000
struct taker {
	struct budget *b;
	uint64_t max_wait;
};

static void *take(void *arg)
{
	struct taker *tk = arg;
	uint32_t ticket;
	for (int i = 0; i < PER_THREAD; i++) {
		uint64_t w = budget_admit(tk->b, BUDGET_PUT, T0, &ticket);
		if (w > tk->max_wait)
			tk->max_wait = w;
		budget_reply(tk->b, BUDGET_PUT, BUDGET_REPLY_OTHER, T0);
	}
	return NULL;
}

Test(budget, threads_share_one_queue)
{
	struct budget *b = budget_new(0, 2000);
	warm(b, BUDGET_PUT);
	pthread_t th[THREADS];
	struct taker tk[THREADS];
	for (int i = 0; i < THREADS; i++) {
		tk[i] = (struct taker){ b, 0 };
		cr_assert_eq(pthread_create(&th[i], NULL, take, &tk[i]), 0);
	}
	uint64_t max = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		if (tk[i].max_wait > max)
			max = tk[i].max_wait;
	}
	/* 20000 slots, burst 100, 2000/s: the last at 9.95 s. */
	uint64_t want = (uint64_t)((THREADS * PER_THREAD - 100) / 2000.0 * 1e9);
	cr_assert(max >= want - MS && max <= want + MS,
		  "last slot %llu ns ahead, want %llu",
		  (unsigned long long)max, (unsigned long long)want);
	budget_free(b);
}

/* A cut takes back the slots lent at the old rate: their tickets are no
 * longer valid, and asking again queues them at the new rate. */
Test(budget, a_cut_takes_back_lent_slots)
{
	struct budget *b = budget_new(1000, 0);
	warm(b, BUDGET_GET);
	uint32_t first, last;
	budget_admit(b, BUDGET_GET, T0, &first);
	for (int i = 0; i < 500; i++)
		budget_admit(b, BUDGET_GET, T0, &last);
	cr_assert(budget_ticket_valid(b, BUDGET_GET, last));
	budget_reply(b, BUDGET_GET, BUDGET_REPLY_SLOWDOWN, T0 + MS);
	cr_assert_not(budget_ticket_valid(b, BUDGET_GET, first));
	cr_assert_not(budget_ticket_valid(b, BUDGET_GET, last));
	/* The queue restarts at 900/s from the cut, not behind 450 slots. */
	uint32_t again;
	uint64_t w = budget_admit(b, BUDGET_GET, T0 + MS, &again);
	cr_assert_lt(w, 10 * MS, "asked again, waits %llu ns",
		     (unsigned long long)w);
	cr_assert(budget_ticket_valid(b, BUDGET_GET, again));
	cr_assert(budget_ticket_valid(NULL, BUDGET_GET, 7));
	budget_free(b);
}

/* Slow start: the first request finds 1/8 of the ceiling, doubling every
 * 250 ms; a SlowDown ends it where it stands. */
Test(budget, slow_start_doubles_to_the_ceiling)
{
	struct budget *b = budget_new(8000, 8000);
	budget_admit(b, BUDGET_GET, T0, &tkt);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 1000, 1e-6);
	budget_admit(b, BUDGET_GET, T0 + 250 * MS, &tkt);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 2000, 1e-6);
	budget_admit(b, BUDGET_GET, T0 + 750 * MS, &tkt);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 8000, 1e-6);
	budget_admit(b, BUDGET_GET, T0 + 5 * SEC, &tkt);
	cr_assert_float_eq(budget_rate(b, BUDGET_GET), 8000, 1e-6);
	/* The other class starts its own ramp; a SlowDown at 500 ms
	 * (4000/s, nothing answered) cuts from there and ends it. */
	budget_admit(b, BUDGET_PUT, T0, &tkt);
	budget_reply(b, BUDGET_PUT, BUDGET_REPLY_SLOWDOWN, T0 + 500 * MS);
	cr_assert_float_eq(budget_rate(b, BUDGET_PUT), 3600, 1e-6);
	budget_admit(b, BUDGET_PUT, T0 + 10 * SEC, &tkt);
	cr_assert_float_eq(budget_rate(b, BUDGET_PUT), 3600, 1e-6);
	budget_free(b);
}
