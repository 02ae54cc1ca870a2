/* cause.c - owns the one-line cause of a failed read-path request
 * (cause.h): the errno's meaning in the words of what to check, then
 * the reply's (s3_result_reason). */
#include "cause.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* What each S3 errno means to whoever runs the daemon; "%s" is the
 * endpoint where the connection is the cause. */
static const char *cause_format(int err)
{
	switch (-err) {
	case ENODEV:
		return "the bucket does not exist";
	case ENXIO:
		return "the host name of S3's endpoint %s does not resolve "
		       "(DNS)";
	case ECONNREFUSED:
		return "S3's endpoint %s refused the connection (nothing "
		       "listens there)";
	case EHOSTUNREACH:
	case ENETUNREACH:
		return "S3's endpoint %s is unreachable";
	case ETIMEDOUT:
		return "connecting to S3's endpoint %s timed out";
	case EKEYEXPIRED:
		return "S3 says the daemon's credentials expired (refresh "
		       "them)";
	case EKEYREJECTED:
		return "S3 rejected the daemon's credentials (access key or "
		       "secret key)";
	case EPERM:
		return "S3 denied the daemon access (its credentials or the "
		       "bucket policy, not allow_uids)";
	case ENOENT:
		return "no such object";
	case ESTALE:
		return "the object changed in S3";
	case EPROTO:
		return "S3's reply breaks the protocol";
	case EIO:
		return "the S3 request failed";
	default:
		return NULL;
	}
}

char *fetch_cause(const char *dataset, const char *bucket, const char *key,
		  const char *endpoint, int err, const struct s3_result *r)
{
	const char *fmt = cause_format(err);
	char what[400], reason[512] = "";
	if (fmt)
		snprintf(what, sizeof(what), fmt, endpoint ? endpoint : "?");
	else
		snprintf(what, sizeof(what), "%s", strerror(-err));
	if (r)
		s3_result_reason(r, reason, sizeof(reason));
	char *out = NULL;
	/* rc_esc: S3's text and a key may hold control bytes. */
	char *k = strdup(rc_esc(key ? key : ""));
	if (!k)
		return NULL;
	if (asprintf(&out, "dataset %s, s3://%s/%s: %s%s%s", dataset, bucket,
		     k, what, reason[0] ? ": " : "", reason) < 0)
		out = NULL;
	free(k);
	return out;
}
