/* sigv4.h - AWS Signature Version 4 (OpenSSL HMAC-SHA256 / SHA-256).
 * Pure functions: no I/O, no allocation beyond the caller's buffers. */
#ifndef RC_SIGV4_H
#define RC_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SIGV4_EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct rc_creds {
	char access_key[128];
	char secret_key[128];
	char session_token[4096]; /* "" if none */
	time_t expires;           /* 0: does not expire */
};

struct sigv4_header {
	const char *name;  /* any case; signed lowercased and trimmed */
	const char *value;
};

struct sigv4_request {
	const char *method;        /* "GET" */
	const char *path;          /* already URI-encoded, e.g. "/bucket/a%20b" */
	const char *query;         /* raw query without '?', may be NULL/"" */
	const char *host;          /* Host header value, with :port if not default */
	const struct sigv4_header *headers; /* extra headers to sign */
	size_t n_headers;
	const char *payload_sha256; /* hex, or SIGV4_UNSIGNED_PAYLOAD */
	const char *region;
	const char *service;       /* "s3" */
	time_t now;
};

/* Output: the headers the caller must send along with its own. */
struct sigv4_result {
	char authorization[1024];   /* value of Authorization: */
	char amz_date[17];          /* value of x-amz-date: YYYYMMDDTHHMMSSZ */
	char content_sha256[65];    /* value of x-amz-content-sha256: */
};

/* Returns 0, or -EINVAL if an input is too large for the buffers. The
 * x-amz-date, x-amz-content-sha256 and (if any) x-amz-security-token
 * headers are always signed; pass only the others in req->headers.
 * (x-amz-content-sha256 is signed when service is "s3", as AWS's SDKs do;
 * other services do not use it.) The path and query are canonicalized by
 * decoding then re-encoding, so raw and encoded input sign alike; a query
 * parameter without '=' ("uploads") is signed as "uploads=". */
int sigv4_sign(const struct sigv4_request *req, const struct rc_creds *cr,
	       struct sigv4_result *out);

/* Building blocks, exposed for the test vectors. */
void sigv4_sha256_hex(const void *data, size_t len, char out[65]);
/* The same of a body in pieces (s3_types.h), taken in order. */
struct s3_piece;
void sigv4_sha256_hex_pieces(const struct s3_piece *pieces, unsigned n,
			     char out[65]);
/* A SHA-256 computed elsewhere (sha256x.h) as the payload hash; "" where
 * ok is false, as above. */
void sigv4_sha256_to_hex(const unsigned char sha256[32], bool ok,
			 char out[65]);
/* Canonical request and string to sign into caller buffers; 0 or -EINVAL. */
int sigv4_canonical_request(const struct sigv4_request *req,
			    const struct rc_creds *cr, const char *amz_date,
			    char *out, size_t outlen, char *signed_headers,
			    size_t shlen);
/* URI-encode s per SigV4 (unreserved kept; '/' kept if keep_slash).
 * Returns the encoded length, or -EINVAL if out is too small. */
int sigv4_uri_encode(const char *s, size_t len, int keep_slash, char *out,
		     size_t outlen);

#endif
