/* s3.h - S3 requests over libcurl: building and signing easy handles,
 * classifying responses, parsing S3's XML (expat), the retry policy.
 *
 * The module does not drive transfers: the reactor adds s3_req_easy() to
 * its curl multi handle, and tools call s3_perform() which blocks. */
#ifndef RC_S3_H
#define RC_S3_H

/* S3's largest object: 5 TiB. */
#define RC_S3_MAX_OBJECT (5ull << 40)

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "creds.h"

enum s3_addressing { S3_PATH_STYLE = 0, S3_VIRTUAL_HOSTED };

struct s3_config {
	const char *endpoint;    /* "http://127.0.0.1:9080", "https://s3.us-east-1.amazonaws.com";
				    NULL: https://s3.<region>.amazonaws.com */
	const char *region;      /* "us-east-1" */
	enum s3_addressing addressing;
	bool tls_verify;         /* true unless the config turns it off */
	const char *ca_file;     /* NULL: system store */
	long connect_timeout_ms; /* default 3000 */
	long request_timeout_ms; /* whole transfer, default 30000 */
	long low_speed_time_s;   /* abort if < 1 KB/s for this long, default 10 */
	unsigned max_retries;    /* default 5 */
	unsigned backoff_base_ms, backoff_cap_ms; /* default 50, 5000 */
	struct creds_provider *creds; /* borrowed */
};

struct s3_client;
struct s3_client *s3_client_new(const struct s3_config *cfg, char *err,
				size_t errlen);
void s3_client_free(struct s3_client *c);
const struct s3_config *s3_client_config(const struct s3_client *c);

enum s3_op {
	S3_HEAD_OBJECT,
	S3_GET_OBJECT,
	S3_LIST_OBJECTS_V2,
	S3_PUT_OBJECT,
	S3_DELETE_OBJECT,
	S3_CREATE_BUCKET,
	S3_HEAD_BUCKET,
	/* Write path (checkpoint write-back). */
	S3_CREATE_MULTIPART,   /* POST ?uploads: parse with s3_parse_upload_id */
	S3_UPLOAD_PART,        /* PUT ?partNumber=N&uploadId=U: ETag in result */
	S3_COMPLETE_MULTIPART, /* POST ?uploadId=U with the part list */
	S3_ABORT_MULTIPART,    /* DELETE ?uploadId=U */
	S3_LIST_MULTIPART,     /* GET ?uploads (bucket): s3_parse_uploads */
	S3_COPY_OBJECT,        /* PUT with x-amz-copy-source: s3_parse_copy_result */
};

/* One part of a CompleteMultipartUpload, in ascending part order. */
struct s3_part {
	unsigned number;       /* 1..10000 */
	const char *etag;      /* as UploadPart returned it, quotes included */
	const char *crc32c;    /* base64 x-amz-checksum-crc32c, or NULL */
};

/* GET bodies go to a sink. It returns 0, or -1 to abort the transfer (for
 * example more bytes than expected: the request then fails retryably). */
typedef int (*s3_sink_fn)(void *ctx, uint64_t body_off, const void *data,
			  size_t len);

struct s3_req_params {
	enum s3_op op;
	const char *bucket;
	const char *key;              /* object key, not URI-encoded */
	uint64_t range_off, range_len; /* GET: range_len 0 = whole object */
	const char *if_match;         /* GET/HEAD: ETag as S3 sent it, quotes included */
	/* ListObjectsV2 */
	const char *prefix, *delimiter, *continuation_token, *start_after;
	unsigned max_keys;            /* 0: server default (1000) */
	/* PUT: body (borrowed, must outlive the request) */
	const void *body;
	size_t body_len;
	/* GET: where the body goes; NULL collects it in memory (s3_req_body) */
	s3_sink_fn sink;
	void *sink_ctx;
	/* Write path. PUT and UploadPart: content_md5 sends the body's MD5
	 * (UploadPart always does); content_md5_value overrides the computed
	 * value (tests send a wrong one). checksum_crc32c is the base64
	 * big-endian CRC-32C of the body (s3_crc32c_b64), sent as
	 * x-amz-checksum-crc32c; on CreateMultipartUpload any non-NULL value
	 * asks for x-amz-checksum-algorithm: CRC32C. */
	bool content_md5;
	const char *content_md5_value;
	const char *checksum_crc32c;
	/* Hex SHA-256 of the body for the signature, when the caller has it
	 * (computed off its event loop); NULL: computed here. */
	const char *payload_sha256;
	const char *upload_id;        /* UploadPart, Complete, Abort */
	unsigned part_number;         /* UploadPart: 1..10000 */
	const struct s3_part *parts;  /* Complete (borrowed) */
	size_t n_parts;
	const char *copy_source;      /* CopyObject: "bucket/key", not encoded */
	/* PUT and CreateMultipartUpload: sent (and signed) as
	 * x-amz-meta-ringcache-daemon, so an object or an in-progress upload
	 * says which daemon wrote it. NULL: not sent. */
	const char *meta_daemon;
	/* PUT and CompleteMultipartUpload: sends If-None-Match: *, so the
	 * server refuses (412, -ESTALE) to replace an existing object. Not
	 * every server honours it on Complete (Ceph RGW 16 ignores it). */
	bool if_none_match;
	/* ListMultipartUploads (prefix above): pagination markers */
	const char *key_marker, *upload_id_marker;
	unsigned max_uploads;         /* 0: server default (1000) */
};

/* Outcome of a finished request. err is 0 or a negated errno:
 *   -ENOENT (404 NoSuchKey/NoSuchBucket), -EKEYREJECTED (403
 *   SignatureDoesNotMatch, InvalidAccessKeyId, ExpiredToken), -EPERM (other
 *   403: S3 denies the daemon's credentials this bucket or key; distinct
 *   from the local ACL's -EACCES), -ESTALE (412 PreconditionFailed), -ERANGE (416), -EPROTO
 *   (malformed response), -EBADMSG (BadDigest, InvalidDigest: the body
 *   did not match its Content-MD5 or checksum), -EINVAL (InvalidPart,
 *   InvalidPartOrder, EntityTooSmall, MalformedXML, InvalidArgument: the
 *   request is wrong, never retried), -EIO (anything else).
 * CompleteMultipartUpload and CopyObject can answer 200 with an <Error>
 * body: that is a failure, classified by its <Code> (InternalError and
 * SlowDown retryable). */
struct s3_result {
	long http_status;     /* 0 if no response */
	CURLcode curl_code;
	int err;
	bool retryable;       /* 5xx, SlowDown, reset, timeout, short body */
	char code[64];        /* S3 error <Code>, or "" */
	char message[256];    /* <Message> or curl's error text; never secrets */
	char etag[128];       /* ETag header, quotes included */
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

struct s3_req;
/* Builds and signs a request. Returns NULL with err set on bad params. */
struct s3_req *s3_req_new(struct s3_client *c, const struct s3_req_params *p,
			  char *err, size_t errlen);
CURL *s3_req_easy(struct s3_req *r);
/* Call once the transfer is done (CURLMSG_DONE, or after curl_easy_perform). */
void s3_req_result(struct s3_req *r, CURLcode code, struct s3_result *out);
/* Response body collected when no sink was given (error XML, list pages). */
const char *s3_req_body(const struct s3_req *r, size_t *len);
void s3_req_free(struct s3_req *r);
void *s3_req_get_private(const struct s3_req *r);
void s3_req_set_private(struct s3_req *r, void *priv);

/* Blocking: builds, performs, retries per policy. body_out (optional)
 * receives a malloc'd copy of the collected body. Returns res->err. */
int s3_perform(struct s3_client *c, const struct s3_req_params *p,
	       struct s3_result *res, char **body_out, size_t *body_len);

/* Delay before retry number attempt (1-based): capped exponential backoff
 * with full jitter. */
unsigned s3_backoff_ms(const struct s3_client *c, unsigned attempt);

/* ListObjectsV2 page. Strings are owned by the page. */
struct s3_list_object {
	char *key;
	uint64_t size;
	char etag[128];
};
struct s3_list_page {
	struct s3_list_object *objects;
	size_t n_objects;
	char **prefixes;          /* CommonPrefixes */
	size_t n_prefixes;
	bool truncated;
	char *next_token;         /* NextContinuationToken, or NULL */
};
/* 0, or -EPROTO for malformed XML (err says where). */
int s3_parse_list(const char *xml, size_t len, struct s3_list_page *page,
		  char *err, size_t errlen);
void s3_list_page_free(struct s3_list_page *page);
/* InitiateMultipartUploadResult's UploadId into buf; 0 or -EPROTO. */
int s3_parse_upload_id(const char *xml, size_t len, char *buf, size_t buflen,
		       char *err, size_t errlen);

/* CompleteMultipartUploadResult or CopyObjectResult: the ETag in the
 * header's form, quotes included (added when the body has none, as RGW's
 * do). Complete's may be empty (RGW): HEAD has it. 0 or -EPROTO. */
int s3_parse_complete(const char *xml, size_t len, char *etag,
		      size_t etaglen, char *err, size_t errlen);
int s3_parse_copy_result(const char *xml, size_t len, char *etag,
			 size_t etaglen, char *err, size_t errlen);

/* ListMultipartUploads page. Strings are owned by the page. */
struct s3_upload {
	char *key;
	char *upload_id;
	char initiated[40];       /* ISO 8601 as the server sent it */
};
struct s3_upload_page {
	struct s3_upload *uploads;
	size_t n_uploads;
	bool truncated;
	char *next_key_marker, *next_upload_id_marker; /* or NULL */
};
int s3_parse_uploads(const char *xml, size_t len, struct s3_upload_page *page,
		     char *err, size_t errlen);
void s3_upload_page_free(struct s3_upload_page *page);

/* Content-MD5 value of a body: base64 of its MD5 (24 chars + NUL). */
void s3_content_md5(const void *data, size_t len, char out[25]);
/* x-amz-checksum-crc32c value of a CRC-32C: base64 of its 4 big-endian
 * bytes (8 chars + NUL). The CRC itself comes from crc32c.h. */
void s3_crc32c_b64(uint32_t crc, char out[9]);

/* Parses an S3 <Error> document into code/message; 0 or -EPROTO. */
int s3_parse_error(const char *xml, size_t len, char *code, size_t codelen,
		   char *msg, size_t msglen);

#endif
