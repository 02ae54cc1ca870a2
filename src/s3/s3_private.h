/* s3_private.h - the two structures the S3 modules share, for the .c
 * files of src/s3/s3_*.c only: the client and the request. Everything
 * outside src/s3 sees them as opaque (s3.h). It includes only
 * s3_types.h, so no module reaches another through it.
 *
 * Ownership: an s3_client owns copies of its config strings. An s3_req
 * owns its easy handle, header list, URL, own body and response buffer;
 * body points at the caller's PUT body or at own_body. Who writes what:
 * s3_request.c fills the request half, s3_response.c (curl's callbacks)
 * the response half, s3_result.c only reads. */
#ifndef RC_S3_PRIVATE_H
#define RC_S3_PRIVATE_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3_types.h"

#define S3_KEY_MAX 1024                 /* S3's own limit, in bytes */

/* Whether the endpoint answers (s3_reach.c), under lock. */
struct s3_reach_state {
	pthread_mutex_t lock;
	unsigned failures;      /* consecutive requests without a response */
	bool down;              /* failures reached S3_UNREACHABLE_AFTER */
	uint64_t first_ns, first_wall_ms; /* the first of those failures */
	uint64_t outages;
	char error[256];        /* the latest failure's message */
};

struct s3_client {
	struct s3_config cfg;   /* strings below are the owned copies */
	char *endpoint, *region, *ca_file;
	char *scheme;           /* "http" or "https" */
	char *host;             /* Host header value, ":port" if not default */
	struct s3_reach_state reach;
};

/* Why a transfer was aborted from inside a callback. */
enum s3_abort {
	ABORT_NONE = 0,
	ABORT_SINK,        /* the sink returned -1 */
	ABORT_OVERRUN,     /* more bytes than the range asked for */
	ABORT_BAD_RANGE,   /* 206 for another range, or a range ignored */
	ABORT_TOO_LARGE,   /* in-memory body over its cap */
	ABORT_NOMEM,
};

struct s3_req {
	struct s3_client *c;
	CURL *easy;
	struct curl_slist *headers;
	char *url;
	char *own_body;        /* CreateBucketConfiguration, Complete's parts */
	char *copy_source;     /* CopyObject's header value, encoded */
	const unsigned char *body;
	size_t body_len, body_pos;
	const struct s3_piece *pieces; /* the body in pieces, or NULL */
	unsigned n_pieces;
	unsigned piece;        /* body_pos lies in pieces[piece] ... */
	size_t piece_pos;      /* ... at this offset */
	enum s3_op op;
	uint64_t range_off, range_len;
	s3_sink_fn sink;
	void *sink_ctx;
	void *priv;

	/* Response, reset at every status line (1xx, redirects). */
	long status;
	char etag[128];
	char upload_token[S3_UPLOAD_TOKEN_LEN + 1]; /* x-amz-meta-ringcache-upload */
	bool etag_too_long;    /* the header did not fit etag[]: a protocol error */
	bool have_length, have_range;
	uint64_t content_length;
	uint64_t range_first, range_last, range_total; /* total 0: "*" */
	bool range_total_known;
	uint64_t body_bytes;
	enum s3_abort abort;

	char *buf;             /* collected body, NUL-terminated when non-NULL */
	size_t buf_len;
	uint32_t buf_cap;       /* vec.h; bodies are capped far below 4 GiB */
	char errbuf[CURL_ERROR_SIZE];
};

static inline bool s3_is_2xx(long status)
{
	return status >= 200 && status < 300;
}

#endif
