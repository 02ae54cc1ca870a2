/* s3_result.h - what a finished request means: its outcome as a negated
 * errno with a retry verdict (s3_result.c), a phrase for the log, the
 * retry policy (backoff with full jitter within a time budget) and the
 * blocking retry loop tools use.
 *
 * Ownership: a struct s3_result is plain data, the caller's. */
#ifndef RC_S3_RESULT_H
#define RC_S3_RESULT_H

#include "s3_request.h"

/* Outcome of a finished request. err is 0 or a negated errno:
 *   -ENOENT (404 NoSuchKey, NoSuchUpload), -ENODEV (404 NoSuchBucket, or
 *   any 404 to HeadBucket), -EKEYEXPIRED (ExpiredToken,
 *   TokenRefreshRequired), -EKEYREJECTED (403 SignatureDoesNotMatch,
 *   InvalidAccessKeyId, other credential refusals), -EPERM (other
 *   403: S3 denies the daemon's credentials this bucket or key; distinct
 *   from the local ACL's -EACCES), -ESTALE (412 PreconditionFailed), -ERANGE (416), -EPROTO
 *   (malformed response), -EBADMSG (BadDigest, InvalidDigest,
 *   XAmzContentSHA256Mismatch: the body did not match its Content-MD5,
 *   checksum or signed SHA-256), -EINVAL (InvalidPart,
 *   InvalidPartOrder, EntityTooSmall, MalformedXML, InvalidArgument: the
 *   request is wrong, never retried); without a response: -ENXIO (the
 *   endpoint's host name does not resolve), -ECONNREFUSED,
 *   -EHOSTUNREACH, -ENETUNREACH, -ETIMEDOUT (connecting failed so);
 *   -EIO (anything else).
 * CompleteMultipartUpload, CopyObject and UploadPartCopy can answer 200
 * with an <Error> body: that is a failure, classified by its <Code>
 * (InternalError and SlowDown retryable). */
struct s3_result {
	long http_status;     /* 0 if no response */
	CURLcode curl_code;
	int err;
	bool retryable;       /* 5xx, SlowDown, reset, timeout, short body */
	char code[64];        /* S3 error <Code>, or "" */
	char message[256];    /* <Message> or curl's error text; never secrets */
	char etag[128];       /* ETag header, quotes included */
	/* x-amz-meta-ringcache-upload (HEAD, GET): the writer's token, "" if
	 * absent or not S3_UPLOAD_TOKEN_LEN characters */
	char upload_token[S3_UPLOAD_TOKEN_LEN + 1];
	uint64_t content_length;
	uint64_t object_size; /* HEAD: Content-Length; GET: total from Content-Range */
	uint64_t body_bytes;  /* bytes the sink or buffer received */
};

/* Why a request failed, in one phrase for a log line: "AccessDenied: text
 * (HTTP 403)", the code or the HTTP status when S3 sent no message (a
 * HEAD has no body; RGW sends empty <Message>s), curl's text without a
 * response. Never repeats itself; S3's text is escaped (rc_esc). */
const char *s3_result_reason(const struct s3_result *r, char *buf,
			     size_t len);

/* Call once the transfer is done (CURLMSG_DONE, or after curl_easy_perform).
 * Also notes the outcome in the client's reachability (s3_reach.h). */
void s3_req_result(struct s3_req *r, CURLcode code, struct s3_result *out);

/* Blocking: builds, performs, retries per policy. body_out (optional)
 * receives a malloc'd copy of the collected body. Returns res->err. */
int s3_perform(struct s3_client *c, const struct s3_req_params *p,
	       struct s3_result *res, char **body_out, size_t *body_len);

/* Delay before retry number attempt (1-based): full jitter, uniform in
 * [0, min(backoff_cap_ms, backoff_base_ms * 2^(attempt-1))]. */
unsigned s3_backoff_ms(const struct s3_client *c, unsigned attempt);

/* The retry policy, one decision: whether a request that failed
 * (retryable: its s3_result's verdict) after `retries` retries, spent_ms
 * after its first try began, is tried again, and *delay_ms before it.
 * No once max_retries retries were made or budget_ms has passed; the
 * delay is s3_backoff_ms, cut to end at the budget's end (one last try
 * there). Callers pass their budget: the config's retry_budget_ms, or
 * write_retry_budget_ms for an upload's transfers. */
bool s3_retry_next(const struct s3_client *c, bool retryable,
		   unsigned retries, uint64_t spent_ms, unsigned budget_ms,
		   unsigned *delay_ms);

#endif
