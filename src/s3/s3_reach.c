/* s3_reach.c - owns the endpoint's reachability (s3_reach.h): which
 * finished requests say "no response", the consecutive count that turns
 * them into an outage, its start and latest error, and the two log lines
 * an outage earns: when it is noticed and when it ends. */
#include "s3_private.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "s3_reach.h"

/* Failures where no HTTP response came back: the endpoint did not
 * answer. Any status line, even a 503, means something answered. */
static bool no_response(long http_status, CURLcode code)
{
	if (http_status)
		return false;
	switch (code) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_SSL_CONNECT_ERROR:
		return true;
	default:
		return false;
	}
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void s3_reach_init(struct s3_client *c)
{
	pthread_mutex_init(&c->reach.lock, NULL);
}

void s3_reach_destroy(struct s3_client *c)
{
	pthread_mutex_destroy(&c->reach.lock);
}

void s3_reach_note(struct s3_client *c, long http_status, int curl_code,
		   const char *message)
{
	struct s3_reach_state *s = &c->reach;
	bool failed = no_response(http_status, (CURLcode)curl_code);
	if (!failed && !http_status)
		return; /* aborted by us, or local: says nothing of S3 */
	enum { SAME, DOWN, UP } change = SAME;
	char error[sizeof(s->error)];
	uint64_t since = 0, lasted_ms = 0;

	pthread_mutex_lock(&s->lock);
	if (failed) {
		if (s->failures++ == 0) {
			s->first_ns = rc_now_ns();
			s->first_wall_ms = wall_ms();
		}
		snprintf(s->error, sizeof(s->error), "%s", message);
		if (!s->down && s->failures >= S3_UNREACHABLE_AFTER) {
			s->down = true;
			s->outages++;
			change = DOWN;
		}
	} else {
		if (s->down) {
			s->down = false;
			lasted_ms = (rc_now_ns() - s->first_ns) / 1000000u;
			change = UP;
		}
		s->failures = 0;
	}
	since = s->first_wall_ms;
	memcpy(error, s->error, sizeof(error));
	pthread_mutex_unlock(&s->lock);

	if (change == DOWN) {
		char when[32];
		time_t t = (time_t)(since / 1000u);
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
		log_warn("S3 endpoint %s unreachable since %s: %s; requests "
			 "wait for it within retry_budget", c->endpoint, when,
			 rc_esc(error));
	} else if (change == UP) {
		log_warn("S3 endpoint %s reachable again after %" PRIu64 ".%01"
			 PRIu64 " s", c->endpoint, lasted_ms / 1000u,
			 lasted_ms % 1000u / 100u);
	}
}

void s3_reach_get(const struct s3_client *c, struct s3_reach *out)
{
	struct s3_reach_state *s = (struct s3_reach_state *)&c->reach;
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	out->unreachable = s->down;
	out->outages = s->outages;
	if (s->down) {
		out->since_unix_ms = s->first_wall_ms;
		out->for_ms = (rc_now_ns() - s->first_ns) / 1000000u;
		snprintf(out->error, sizeof(out->error), "%s", s->error);
	}
	pthread_mutex_unlock(&s->lock);
}
