/* budget.c - owns the S3 request budget's arithmetic (budget.h): per class
 * a token bucket that lends slots ahead (negative tokens are requests
 * waiting for their turn), an estimate of the rate S3 answers at, and the
 * AIMD rule that moves the bucket's rate between its floor and ceiling. */
#include "budget.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A bucket holds this many seconds of its rate: enough for the requests
 * one reactor turn starts together, small against S3's one-second view. */
#define BUDGET_BURST_S 0.05
/* On SlowDown the rate becomes this share of what S3 was answering: the
 * answered rate is what S3 allows now, a little under it drains the
 * excess. Halving (TCP's) would waste a quarter of the allowance. */
#define BUDGET_DECREASE 0.9
/* Replies to requests sent before a cut still say SlowDown: one cut per
 * this long, unless the rate is still well above what S3 answers (the
 * first cut, from an estimate of a few replies, can be far off). */
#define BUDGET_HOLD_NS 500000000ull
#define BUDGET_HOLD_ABOVE_NS 50000000ull
#define BUDGET_ABOVE 1.1
/* Additive increase, per successful reply: the rate grows by this share of
 * the answered rate per second (about 3 s from a cut back to where it
 * was), plus this share of the ceiling per second (a floor's way back). */
#define BUDGET_INCREASE 0.03
#define BUDGET_INCREASE_CEIL 0.0002
/* Below the rate it was cut from, the rate closes the gap to it with this
 * time constant (then probes above it at the shares above): a SlowDown
 * from a burst (a stalled thread sending late) or a cut made from a
 * lagging estimate costs about a second of the link, not the tens of
 * seconds 3% a second would take; a limit that is really there answers
 * SlowDown again about a second later. */
#define BUDGET_RECOVER_S 0.5
/* Increase only while the answered rate is at least this share of the
 * allowed one: an idle budget does not climb to where it was cut from. */
#define BUDGET_IN_USE 0.5
/* The floor is this share of the ceiling (and at least 1/s): shaping never
 * stops a prefix altogether. */
#define BUDGET_FLOOR_SHARE 0.001
/* Slow start: a budget's first request finds 1/8 of the ceiling, doubled
 * every 250 ms until the ceiling or the first SlowDown. A daemon starting
 * with a cold cache (every node of a job at once) otherwise spends its
 * first round trip at the full ceiling, and S3 refuses most of it. */
#define BUDGET_START_SHARE 0.125
#define BUDGET_DOUBLE_S 0.25
/* Time constant of the answered-rate estimate. */
#define BUDGET_TAU_S 0.5

struct bucket {
	double ceiling, floor;  /* requests/s; ceiling 0: not shaped */
	double rate;            /* current, floor..ceiling */
	double tokens;          /* slots ready now; < 0: lent ahead */
	uint64_t last_ns;       /* tokens as of then; 0: never used */
	/* Answered rate: exponentially decayed count of OK replies,
	 * bias-corrected for the time since the first (see ok_rate). */
	double ok_acc;
	uint64_t ok_last_ns, ok_first_ns;
	uint64_t cut_ns;        /* the last cut */
	double cut_from;        /* the rate just before it */
	uint64_t start_ns;      /* the first request; 0: none yet */
	bool probing;           /* slow start: no SlowDown yet */
	uint32_t cuts;          /* tickets: slots lent since the last cut */
	uint64_t ok_since_cut;  /* OK replies since then */
};

struct budget {
	pthread_mutex_t lock;
	struct bucket c[BUDGET_CLASSES];
};

static void bucket_set_ceiling(struct bucket *k, uint32_t rate)
{
	k->ceiling = rate;
	k->probing = k->start_ns == 0;
	k->floor = fmax(1.0, rate * BUDGET_FLOOR_SHARE);
	if (rate == 0)
		k->floor = 0;
	if (k->rate == 0 || k->rate > k->ceiling)
		k->rate = k->ceiling;
	if (k->rate < k->floor)
		k->rate = k->floor;
}

struct budget *budget_new(uint32_t get_rate, uint32_t put_rate)
{
	struct budget *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	pthread_mutex_init(&b->lock, NULL);
	bucket_set_ceiling(&b->c[BUDGET_GET], get_rate);
	bucket_set_ceiling(&b->c[BUDGET_PUT], put_rate);
	return b;
}

void budget_free(struct budget *b)
{
	if (!b)
		return;
	pthread_mutex_destroy(&b->lock);
	free(b);
}

void budget_set_ceiling(struct budget *b, enum budget_class c, uint32_t rate)
{
	pthread_mutex_lock(&b->lock);
	bucket_set_ceiling(&b->c[c], rate);
	pthread_mutex_unlock(&b->lock);
}

static double burst_of(const struct bucket *k)
{
	return fmax(1.0, k->rate * BUDGET_BURST_S);
}

/* Slow start's rate at now (see BUDGET_START_SHARE). */
static void probe(struct bucket *k, uint64_t now)
{
	if (!k->probing)
		return;
	if (k->start_ns == 0)
		k->start_ns = now;
	double s = (double)(now - k->start_ns) / 1e9;
	k->rate = k->ceiling * BUDGET_START_SHARE * exp2(s / BUDGET_DOUBLE_S);
	if (k->rate >= k->ceiling) {
		k->rate = k->ceiling;
		k->probing = false;
	}
	if (k->rate < k->floor)
		k->rate = k->floor;
}

static void refill(struct bucket *k, uint64_t now)
{
	double burst = burst_of(k);
	if (k->last_ns == 0)
		k->tokens = burst;
	else if (now > k->last_ns)
		k->tokens += (double)(now - k->last_ns) * k->rate / 1e9;
	if (k->tokens > burst)
		k->tokens = burst;
	if (now > k->last_ns)
		k->last_ns = now;
}

uint64_t budget_admit(struct budget *b, enum budget_class c, uint64_t now,
		      uint32_t *ticket)
{
	if (!b)
		return 0;
	pthread_mutex_lock(&b->lock);
	struct bucket *k = &b->c[c];
	uint64_t wait = 0;
	if (k->ceiling > 0) {
		probe(k, now);
		refill(k, now);
		k->tokens -= 1.0;
		if (k->tokens < 0)
			wait = (uint64_t)(-k->tokens / k->rate * 1e9);
	}
	*ticket = k->cuts;
	pthread_mutex_unlock(&b->lock);
	return wait < BUDGET_MIN_DELAY_NS ? 0 : wait;
}

bool budget_ticket_valid(struct budget *b, enum budget_class c,
			 uint32_t ticket)
{
	if (!b)
		return true;
	pthread_mutex_lock(&b->lock);
	bool valid = b->c[c].cuts == ticket;
	pthread_mutex_unlock(&b->lock);
	return valid;
}

/* OK replies per second around now; 0 before the first. The decayed
 * count alone would read low for the first tau after a start. */
static double ok_rate(const struct bucket *k, uint64_t now)
{
	if (k->ok_first_ns == 0)
		return 0;
	double since_last = (double)(now - k->ok_last_ns) / 1e9;
	double since_first = (double)(now - k->ok_first_ns) / 1e9;
	double weight = 1.0 - exp(-since_first / BUDGET_TAU_S);
	if (weight < 1e-3)
		return 0; /* one reply is no rate */
	return k->ok_acc * exp(-since_last / BUDGET_TAU_S) /
	       (BUDGET_TAU_S * weight);
}

static void note_ok(struct bucket *k, uint64_t now)
{
	if (k->ok_first_ns == 0)
		k->ok_first_ns = k->ok_last_ns = now;
	if (now > k->ok_last_ns) {
		k->ok_acc *= exp(-(double)(now - k->ok_last_ns) / 1e9 /
				 BUDGET_TAU_S);
		k->ok_last_ns = now;
	}
	k->ok_acc += 1.0;
	k->ok_since_cut++;
}

static void increase(struct bucket *k, uint64_t now)
{
	double answered = ok_rate(k, now);
	if (k->probing || answered < BUDGET_IN_USE * k->rate || answered <= 0)
		return;
	/* Per reply, so that per second it adds the shares above. */
	double gap = k->cut_from - k->rate;
	if (gap > 0)
		k->rate += gap / (BUDGET_RECOVER_S * answered);
	k->rate += BUDGET_INCREASE + BUDGET_INCREASE_CEIL * k->ceiling / answered;
	if (k->rate > k->ceiling)
		k->rate = k->ceiling;
}

static void decrease(struct bucket *k, uint64_t now)
{
	if (k->probing && k->start_ns)
		probe(k, now);
	k->probing = false;
	double answered = ok_rate(k, now);
	/* Soon after a cut the decayed estimate still remembers the rate
	 * before it; the replies since the cut say what S3 answers now. */
	uint64_t since = now - k->cut_ns;
	if (k->cut_ns && since >= BUDGET_HOLD_ABOVE_NS &&
	    since < BUDGET_HOLD_NS)
		answered = fmin(answered, k->ok_since_cut * 1e9 / (double)since);
	bool above = answered > 0 && k->rate > BUDGET_ABOVE * answered;
	uint64_t hold = above ? BUDGET_HOLD_ABOVE_NS : BUDGET_HOLD_NS;
	if (k->cut_ns && now < k->cut_ns + hold)
		return;
	double base = answered > 0 && answered < k->rate ? answered : k->rate;
	/* A rate over twice what S3 answers (the ceiling, at first) is no
	 * level to return to. */
	k->cut_from = k->rate > 2 * base ? base : k->rate;
	k->rate = fmax(k->floor, BUDGET_DECREASE * base);
	/* The slots lent ahead were timed for the old rate: their requests
	 * ask again (tickets) and queue at the new one. A saved-up burst is
	 * cut to the new rate's. */
	refill(k, now);
	if (k->tokens < 0)
		k->tokens = 0;
	if (k->tokens > burst_of(k))
		k->tokens = burst_of(k);
	k->cuts++;
	k->cut_ns = now;
	k->ok_since_cut = 0;
}

void budget_reply(struct budget *b, enum budget_class c, enum budget_reply r,
		  uint64_t now)
{
	if (!b || r == BUDGET_REPLY_OTHER)
		return;
	pthread_mutex_lock(&b->lock);
	struct bucket *k = &b->c[c];
	if (k->ceiling > 0) {
		if (r == BUDGET_REPLY_OK) {
			note_ok(k, now);
			increase(k, now);
		} else {
			decrease(k, now);
		}
	}
	pthread_mutex_unlock(&b->lock);
}

enum budget_reply budget_classify(long http_status, const char *code)
{
	if (http_status == 503 || (code && strcmp(code, "SlowDown") == 0))
		return BUDGET_REPLY_SLOWDOWN;
	if (http_status >= 200 && http_status < 500)
		return BUDGET_REPLY_OK;
	return BUDGET_REPLY_OTHER;
}

double budget_rate(struct budget *b, enum budget_class c)
{
	pthread_mutex_lock(&b->lock);
	double r = b->c[c].ceiling > 0 ? b->c[c].rate : 0;
	pthread_mutex_unlock(&b->lock);
	return r;
}
