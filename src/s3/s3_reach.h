/* s3_reach.h - whether the S3 endpoint answers at all: every finished
 * request is noted (s3_req_result does it), and consecutive requests
 * that got no response (refused, reset, timed out, no DNS answer) mark
 * the endpoint unreachable until one gets any HTTP response again. The
 * two changes are logged once each, not once a retry; the daemon's
 * status and metrics read the state (s3_reach_get).
 *
 * Ownership: the state lives in the s3_client, behind its own lock:
 * shard threads and the upload engine note requests concurrently. */
#ifndef RC_S3_REACH_H
#define RC_S3_REACH_H

#include <stdbool.h>
#include <stdint.h>

struct s3_client;

/* Consecutive requests without a response that make an outage: one
 * reset is a blip, three in a row (a request and its first retries, or
 * several requests) is S3 gone. */
#define S3_UNREACHABLE_AFTER 3

struct s3_reach {
	bool unreachable;
	uint64_t since_unix_ms;  /* wall time of the outage's first failure */
	uint64_t for_ms;         /* how long it has lasted so far */
	uint64_t outages;        /* outages since the client was made */
	char error[256];         /* the latest failure's text, while down */
};

void s3_reach_init(struct s3_client *c);
void s3_reach_destroy(struct s3_client *c);
/* A finished request: the HTTP status it got (0: none), curl's result
 * code (a CURLcode) and its error text. */
void s3_reach_note(struct s3_client *c, long http_status, int curl_code,
		   const char *message);
void s3_reach_get(const struct s3_client *c, struct s3_reach *out);

#endif
