/* budget.h - the S3 request budget of one prefix: token buckets that
 * shape the requests a daemon sends to one dataset's prefix, so that the
 * nodes reading it stay under S3's per-prefix request rates (5,500
 * GET/HEAD and 3,500 PUT/COPY/POST/DELETE per second per partitioned
 * prefix) instead of finding them with SlowDown replies.
 *
 * Two classes per budget: reads (GET, HEAD, LIST) and writes (PUT,
 * UploadPart, Create/Complete/AbortMultipartUpload, DELETE). Each is a
 * token bucket of `rate` requests/s whose rate follows AIMD between a
 * floor and the configured ceiling: a SlowDown (or any 503) cuts it to
 * 0.9 times what S3 was answering (at most once per 0.5 s while the
 * rate is near that), each successful reply adds back a little while
 * the bucket is in use. It starts slow: 1/8 of the ceiling at the first
 * request, doubling every 250 ms until the ceiling or a SlowDown. The
 * numbers, and why, are in budget.c.
 *
 * Ownership: budget_new allocates, budget_free frees; the daemon keeps one
 * per dataset for the dataset's life.
 * Use: any thread (the shards share a dataset's budget; a small mutex
 * guards it). A request that is about to start calls budget_admit, which
 * always grants it a slot and says how long to wait for it: the caller
 * delays the request on its own timer (never sleeps, never fails it).
 * A cut takes back the slots lent before it (they were timed for the old
 * rate): when the timer fires, the request goes if budget_ticket_valid,
 * else it asks budget_admit again. Every reply goes to budget_reply. Times are the
 * caller's monotonic clock in nanoseconds (rc_now_ns(), clock.h), passed in
 * so the unit test can drive them. */
#ifndef RC_BUDGET_H
#define RC_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

enum budget_class { BUDGET_GET, BUDGET_PUT, BUDGET_CLASSES };

/* What a reply says about the rate: S3 answered normally (2xx, 3xx, 4xx
 * other than throttling), asked to slow down (503, SlowDown), or nothing
 * (no answer, another 5xx). */
enum budget_reply { BUDGET_REPLY_OK, BUDGET_REPLY_SLOWDOWN,
		    BUDGET_REPLY_OTHER };

/* The shortest delay worth a timer: below it the request goes at once
 * (the bucket still counts it). */
#define BUDGET_MIN_DELAY_NS 200000ull

struct budget;

/* Ceilings in requests/s per class; 0: that class is not shaped. NULL
 * when out of memory. */
struct budget *budget_new(uint32_t get_rate, uint32_t put_rate);
void budget_free(struct budget *b);

/* A reload's new ceiling (0: not shaped); the current rate is clamped to
 * it and the floor follows it. */
void budget_set_ceiling(struct budget *b, enum budget_class c, uint32_t rate);

/* Takes a slot for one request at now: 0 to send it now, else the
 * nanoseconds to wait first (below BUDGET_MIN_DELAY_NS counts as now)
 * and *ticket, to check with budget_ticket_valid then. b NULL: 0. */
uint64_t budget_admit(struct budget *b, enum budget_class c, uint64_t now,
		      uint32_t *ticket);

/* True if no cut happened since the slot of ticket was lent. */
bool budget_ticket_valid(struct budget *b, enum budget_class c,
			 uint32_t ticket);

/* A reply to a request of class c arrived at now. b NULL: nothing. */
void budget_reply(struct budget *b, enum budget_class c, enum budget_reply r,
		  uint64_t now);

/* The class of a reply from its HTTP status (0: none) and S3 error code
 * ("" or NULL: none; CompleteMultipartUpload may say SlowDown in a 200). */
enum budget_reply budget_classify(long http_status, const char *code);

/* The current rate of class c in requests/s (0: not shaped). */
double budget_rate(struct budget *b, enum budget_class c);

#endif
