/* test_retry.c - the S3 retry policy without a server: the backoff's
 * full jitter stays inside its window and spreads over all of it, the
 * cap follows the budget, s3_retry_next never plans a try past the time
 * budget nor one past max_retries; and the reachability tracker turns
 * consecutive unanswered requests into one outage and any response back
 * into its end. */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "s3.h"

static struct s3_client *client(unsigned budget_ms, unsigned max_retries)
{
	struct s3_config cfg = {
		.endpoint = "http://127.0.0.1:1",
		.region = "us-east-1",
		.max_retries = max_retries,
		.retry_budget_ms = budget_ms,
	};
	char err[256] = "";
	struct s3_client *c = s3_client_new(&cfg, err, sizeof(err));
	cr_assert_not_null(c, "%s", err);
	return c;
}

Test(retry, cap_follows_the_budget)
{
	struct s3_client *c = client(0, S3_RETRIES_UNBOUNDED);
	const struct s3_config *k = s3_client_config(c);
	cr_assert_eq(k->retry_budget_ms, 60000, "default budget");
	cr_assert_eq(k->backoff_cap_ms, 20000, "AWS's 20 s per try");
	cr_assert_eq(k->write_retry_budget_ms, 300000, "uploads: 5x");
	cr_assert_eq(k->backoff_base_ms, 50);
	s3_client_free(c);
	c = client(3000, S3_RETRIES_UNBOUNDED);
	cr_assert_eq(s3_client_config(c)->backoff_cap_ms, 1000,
		     "a short budget: a third of it");
	s3_client_free(c);
}

/* Each retry's delay is uniform over [0, window]: inside it always,
 * near both ends sometimes, about half of it on average (full jitter,
 * not "equal jitter", whose delays never go under half the window). */
Test(retry, backoff_is_full_jitter_within_the_window)
{
	struct s3_client *c = client(60000, S3_RETRIES_UNBOUNDED);
	enum { N = 4000 };
	for (unsigned a = 1; a <= 14; a++) {
		unsigned window = 50u << (a - 1);
		if (window > 20000)
			window = 20000;
		unsigned lo = ~0u, hi = 0;
		double sum = 0;
		for (int n = 0; n < N; n++) {
			unsigned d = s3_backoff_ms(c, a);
			cr_assert_leq(d, window, "retry %u: %u ms over %u", a, d,
				      window);
			lo = d < lo ? d : lo;
			hi = d > hi ? d : hi;
			sum += d;
		}
		double mean = sum / N;
		cr_assert_lt(lo, window / 10 + 1, "retry %u: lowest %u of %u",
			     a, lo, window);
		cr_assert_gt(hi, window - window / 10 - 1,
			     "retry %u: highest %u of %u", a, hi, window);
		cr_assert(mean > 0.4 * window && mean < 0.6 * window,
			  "retry %u: mean %.1f of %u", a, mean, window);
	}
	s3_client_free(c);
}

/* A failing request, simulated: each try costs try_ms, then the policy
 * decides. Returns how many tries were made; *last_start when the last
 * one began, *end when the request gave up. */
static unsigned simulate(struct s3_client *c, unsigned budget_ms,
			 unsigned try_ms, uint64_t *last_start, uint64_t *end)
{
	uint64_t t = 0;
	unsigned tries = 0, delay;
	for (;;) {
		*last_start = t;
		tries++;
		t += try_ms;
		if (!s3_retry_next(c, true, tries - 1, t, budget_ms, &delay))
			break;
		t += delay;
	}
	*end = t;
	return tries;
}

Test(retry, the_budget_bounds_every_request)
{
	struct s3_client *c = client(60000, S3_RETRIES_UNBOUNDED);
	for (int run = 0; run < 300; run++) {
		uint64_t last, end;
		unsigned budget = run % 3 == 0 ? 60000 : run % 3 == 1 ? 3000 : 250;
		unsigned tries = simulate(c, budget, 3, &last, &end);
		cr_assert_leq(last, budget, "a try began at %llu ms, budget %u",
			      (unsigned long long)last, budget);
		cr_assert_geq(end, budget, "gave up at %llu ms, before the "
			      "budget %u ran out", (unsigned long long)end,
			      budget);
		cr_assert_leq(end, budget + 3, "gave up at %llu ms",
			      (unsigned long long)end);
		cr_assert_geq(tries, 4, "%u tries in %u ms", tries, budget);
	}
	/* A 30 s outage inside the default budget: some try falls after it
	 * ends, every time (what "rides out a 30 s outage" means). */
	for (int run = 0; run < 300; run++) {
		uint64_t t = 0;
		unsigned delay, retries = 0;
		while (t < 30000) {
			t += 3;
			cr_assert(s3_retry_next(c, true, retries++, t, 60000,
						&delay), "gave up at %llu ms",
				  (unsigned long long)t);
			t += delay;
		}
		cr_assert_leq(t, 50000, "first try after the outage at %llu ms",
			      (unsigned long long)t);
	}
	s3_client_free(c);
}

Test(retry, no_retry_when_not_retryable_or_out_of_count)
{
	unsigned delay;
	struct s3_client *c = client(60000, 2);
	cr_assert_not(s3_retry_next(c, false, 0, 0, 60000, &delay),
		      "a 404 is not retried");
	cr_assert(s3_retry_next(c, true, 1, 10, 60000, &delay));
	cr_assert_not(s3_retry_next(c, true, 2, 10, 60000, &delay),
		      "max_retries = 2 also bounds the count");
	cr_assert_not(s3_retry_next(c, true, 0, 60000, 60000, &delay),
		      "budget spent");
	cr_assert(s3_retry_next(c, true, 0, 59990, 60000, &delay));
	cr_assert_leq(delay, 10, "the last try lands at the budget's end");
	s3_client_free(c);
}

static void refused(struct s3_client *c)
{
	s3_reach_note(c, 0, CURLE_COULDNT_CONNECT,
		      "Couldn't connect to server");
}

Test(retry, consecutive_unanswered_requests_make_one_outage)
{
	struct s3_client *c = client(60000, S3_RETRIES_UNBOUNDED);
	struct s3_reach st;

	for (int i = 0; i < S3_UNREACHABLE_AFTER - 1; i++)
		refused(c);
	/* Ours, not S3's (a sink's abort): changes nothing. */
	s3_reach_note(c, 0, CURLE_WRITE_ERROR, "aborted");
	s3_reach_get(c, &st);
	cr_assert_not(st.unreachable, "a blip is not an outage");
	refused(c);
	s3_reach_get(c, &st);
	cr_assert(st.unreachable);
	cr_assert_eq(st.outages, 1);
	cr_assert_str_eq(st.error, "Couldn't connect to server");
	cr_assert_gt(st.since_unix_ms, 1600000000000ull, "a wall time");
	for (int i = 0; i < 5; i++)
		refused(c);
	s3_reach_get(c, &st);
	cr_assert_eq(st.outages, 1, "still the same outage");
	s3_reach_note(c, 503, CURLE_OK, ""); /* a 503 is an answer */
	s3_reach_get(c, &st);
	cr_assert_not(st.unreachable);
	cr_assert_eq(st.since_unix_ms, 0);
	cr_assert_str_eq(st.error, "");
	refused(c);
	s3_reach_get(c, &st);
	cr_assert_not(st.unreachable, "the count starts again");
	s3_client_free(c);
}
