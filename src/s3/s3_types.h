/* s3_types.h - the vocabulary of the S3 modules, and nothing else: the
 * client's configuration, the operations, a request's parameters, the
 * parts of a Complete, the body sink. No functions, so every s3_*.h and
 * s3_private.h can include it without the modules including each other.
 *
 * Ownership: every pointer in these structs is borrowed; s3_client_new
 * copies the config's strings, a request copies what it must keep
 * except a PUT body (see s3_request.h). */
#ifndef RC_S3_TYPES_H
#define RC_S3_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3_names.h"

struct creds_provider;

#define S3_RETRIES_UNBOUNDED (~0u) /* max_retries: the budget decides */

/* The object metadata a write-back writer puts on each object and
 * multipart upload it creates: a random token (hex) only that writer
 * knows, the proof that an object found at its key is its own (upload.h).
 * S3 answers it in HEAD and GET as this header. */
#define S3_META_UPLOAD "x-amz-meta-ringcache-upload"
#define S3_UPLOAD_TOKEN_LEN 32

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
	/* Retry policy (s3_retry_next): a retryable failure is tried again
	 * after a full-jitter exponential backoff until retry_budget_ms has
	 * passed since the first try (0: 60000), an upload's transfers until
	 * write_retry_budget_ms (0: 5 x retry_budget_ms). max_retries also
	 * stops earlier, after that many retries: S3_RETRIES_UNBOUNDED leaves
	 * the budget alone to decide, 0 never retries. */
	unsigned max_retries;
	unsigned retry_budget_ms, write_retry_budget_ms;
	/* Backoff window: base * 2^(retry-1), at most cap. 0: 50 ms, and a
	 * cap of a third of retry_budget_ms, at least base, at most 20 s. */
	unsigned backoff_base_ms, backoff_cap_ms;
	struct creds_provider *creds; /* borrowed */
};

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
	S3_UPLOAD_PART_COPY,   /* UploadPart with x-amz-copy-source(-range):
				  s3_parse_copy_part_result */
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

/* One piece of a body sent in pieces (s3_req_params.pieces). */
struct s3_piece {
	const void *data;
	size_t len;
};

struct s3_req_params {
	enum s3_op op;
	const char *bucket;
	const char *key;              /* object key, not URI-encoded */
	uint64_t range_off, range_len; /* GET: range_len 0 = whole object */
	const char *if_match;         /* GET/HEAD/DELETE: ETag as S3 sent it, quotes included */
	/* ListObjectsV2 */
	const char *prefix, *delimiter, *continuation_token, *start_after;
	unsigned max_keys;            /* 0: server default (1000) */
	/* PUT: body (borrowed, must outlive the request) */
	const void *body;
	size_t body_len;
	/* or the body in pieces, sent one after the other without a copy
	 * into one buffer (the array and the bytes borrowed likewise);
	 * body_len is then their total */
	const struct s3_piece *pieces;
	unsigned n_pieces;
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
	/* CopyObject, UploadPartCopy: "bucket/key", not encoded */
	const char *copy_source;
	/* UploadPartCopy: the source's bytes [off, off + len), len >= 1 */
	uint64_t copy_range_off, copy_range_len;
	/* CopyObject, UploadPartCopy: sent as x-amz-copy-source-if-match,
	 * so the server copies only while the source has this ETag (else
	 * 412, -ESTALE). No control characters. NULL: not sent. */
	const char *copy_source_if_match;
	/* PUT and CreateMultipartUpload: sent (and signed) as
	 * x-amz-meta-ringcache-daemon, so an object or an in-progress upload
	 * says which daemon wrote it. NULL: not sent. */
	const char *meta_daemon;
	/* PUT and CreateMultipartUpload: sent as S3_META_UPLOAD, the token
	 * only this object's writer knows (upload.h); NULL: not sent. */
	const char *meta_upload;
	/* PUT, CompleteMultipartUpload and CopyObject: sends If-None-Match: *,
	 * so the server refuses (412, -ESTALE) to replace an existing object.
	 * Not every server honours it on Complete and CopyObject (Ceph RGW 16
	 * ignores it on both: tested with awscli and boto3). */
	bool if_none_match;
	/* ListMultipartUploads (prefix above): pagination markers */
	const char *key_marker, *upload_id_marker;
	unsigned max_uploads;         /* 0: server default (1000) */
};

#endif
