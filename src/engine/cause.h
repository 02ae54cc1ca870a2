/* cause.h - why a read-path S3 request failed, in one line a user can
 * act on: the dataset, the bucket and key (or prefix), the cause behind
 * the errno, and S3's or curl's own words. Sessions hand it to the
 * client (RC_MSG_LAST_ERROR), so it never holds a credential.
 *
 * Ownership: the returned string is malloc'd, the caller's. */
#ifndef RC_CAUSE_H
#define RC_CAUSE_H

#include "s3.h"

/* NULL when out of memory. r may be NULL (no request was made). */
char *fetch_cause(const char *dataset, const char *bucket, const char *key,
		  const char *endpoint, int err, const struct s3_result *r);

#endif
