/* upload.h - the upload engine of checkpoint write-back: one object's bytes
 * to S3, as a single PUT (size <= part size) or a multipart upload with
 * parallel parts, Content-MD5 on every request, retries with the S3
 * client's backoff (a body S3 refused as damaged on the way is sent
 * again too), CompleteMultipartUpload when every part is in and
 * AbortMultipartUpload on failure or cancel. Also the blocking clean-up
 * of abandoned uploads; the blocking driver of the engine (one upload or
 * rename run to its end on a private poll loop) is tools/upload_run.h.
 *
 * A copy job (upload_copy_start) is the rename of an object already in S3,
 * made of the same requests and retries: CopyObject up to a threshold
 * (S3's limit is 5 GiB), else a multipart upload whose parts are
 * UploadPartCopy ranges of the source, then a DELETE of the source. A
 * delete job (upload_delete_start) is that DELETE alone.
 *
 * The engine owns no event loop. Its driver (the shard's reactor, or a
 * test's poll loop) runs the transfers and the timers:
 *   - add_transfer: add s3_req_easy(req) to the curl multi handle; when it
 *     is CURLMSG_DONE, remove it and call upload_transfer_done(req, code).
 *   - remove_transfer: take a transfer out of the multi handle now (cancel);
 *     the engine then frees it and upload_transfer_done is not called.
 *   - add_timer: call cb(arg) once, after delay_ms (retry backoff). Timers
 *     are never cancelled: the engine keeps arg valid until it fires.
 * Every request the engine makes has s3_req_get_private() == an engine
 * object (upload_req_tag reads it). */
#ifndef RC_UPLOAD_H
#define RC_UPLOAD_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "s3.h"

#define UPLOAD_MIN_PART (5ull << 20)     /* S3's smallest part but the last */
#define UPLOAD_DEFAULT_PART (64ull << 20)
#define UPLOAD_MAX_PARTS 10000u
#define UPLOAD_COPY_MAX (5ull << 30)     /* CopyObject's and a part's limit */

struct upload_driver {
	void *ctx;
	int (*add_transfer)(void *ctx, struct s3_req *req); /* 0 or -errno */
	void (*remove_transfer)(void *ctx, struct s3_req *req);
	int (*add_timer)(void *ctx, unsigned delay_ms, void (*cb)(void *arg),
			 void *arg);                          /* 0 or -errno */
	/* Optional (NULL: inline). The digests of a PUT or part body (MD5,
	 * SHA-256) off the driver's thread: run upload_hash_run(job), or
	 * upload_hash_run_many over it and others queued with it, on
	 * another thread, then upload_hash_done(job) on the driver's. 0, or
	 * -errno and the engine computes them inline. */
	int (*hash)(void *ctx, void *job);
	/* Optional: every answer S3 gave a request (before retries are
	 * decided), e.g. to slow down on SlowDown. */
	void (*replied)(void *ctx, struct s3_req *req,
			const struct s3_result *r);
};

/* Source of an object's bytes: fill dst with [off, off+len). 0 or -errno
 * (the upload then fails with that error). Called from the driver's
 * thread (read) or a hash worker (read_slow), once per part attempt
 * sequence (the part is kept for retries). */
typedef int (*upload_read_fn)(void *ctx, uint64_t off, void *dst, size_t len);

/* A source's bytes in place, without a copy: the pieces of memory that
 * hold [off, off+len) in order, up to max of them filled. Returns how many
 * pieces the range takes (more than max: call again with room for that
 * many), 0 when it cannot be shown in place (the engine then reads it with
 * read), or -errno. The bytes must stay valid and unchanged until done has
 * been reported, as data's: a part sent from them is resent from them. */
typedef int (*upload_view_fn)(void *ctx, uint64_t off, size_t len,
			      struct s3_piece *pieces, unsigned max);

/* Final outcome. err 0: etag is the object's ETag (quotes included; for a
 * multipart upload the md5-of-md5s "-N" form, computed locally when the
 * server's Complete answer has none). Else a negated errno as s3.h
 * classifies it, -ECANCELED after upload_cancel, with the S3 code and
 * message of the request that failed; -EEXIST when no_overwrite found the
 * key taken. */
struct upload_outcome {
	int err;
	long http_status;
	char code[64];
	char message[256];
	char etag[128];
	unsigned parts;       /* 0 for a single PUT or CopyObject */
	unsigned retries;     /* requests that were retried */
	/* err is one a later try could cure (5xx, SlowDown, 429,
	 * RequestTimeout, a network error, a body damaged on the way) and
	 * the retries ran out: not a refusal, whatever the status. */
	bool transient;
	/* A copy job whose copy landed (err 0) but whose source's DELETE
	 * failed: that error (code and message describe it); the source is
	 * left behind. A 404 is no failure. */
	int source_err;
};
typedef void (*upload_done_fn)(void *ctx, const struct upload_outcome *out);

struct upload_params {
	const char *bucket, *key;     /* copied */
	uint64_t size;
	const void *data;             /* whole object (borrowed until done), or */
	upload_read_fn read;          /* a source callback */
	upload_view_fn view;          /* optional with read: its bytes in place */
	/* or one that may block (a file): the engine calls it only on the
	 * driver's hash workers, with the part's digests, never on the
	 * driver's thread; it needs the driver's hash (else -EINVAL), and
	 * a part whose job the driver refuses fails the upload. */
	upload_read_fn read_slow;
	void *read_ctx;               /* of read or read_slow */
	uint64_t part_size;           /* 0: UPLOAD_DEFAULT_PART; >= UPLOAD_MIN_PART */
	unsigned concurrency;         /* parts in flight; 0: 4 */
	upload_done_fn done;          /* called exactly once, never from inside
					 upload_start (upload_cancel may) */
	void *done_ctx;
	/* Never replace an object already at key: If-None-Match: * on the
	 * PUT and the Complete, and a HEAD before the Complete (a server may
	 * ignore the header there: Ceph RGW 16 does; a writer that creates
	 * the key between that HEAD and the Complete is then overwritten).
	 * A 412 is checked with a HEAD: the object is this writer's own
	 * earlier attempt (success) only if it carries token; matching bytes
	 * prove nothing (anyone may write the same bytes). Else -EEXIST. */
	bool no_overwrite;
	/* S3_UPLOAD_TOKEN_LEN hex characters (copied), sent as S3_META_UPLOAD
	 * on the PUT and the Create: what only the writer has. NULL or "":
	 * none sent, and an existing object is never taken for our own. */
	const char *token;
	/* A multipart upload even when size fits one part (rc-s3 mpu-put):
	 * one part, possibly empty, and a "-1" ETag. */
	bool multipart;
	/* The owner's, for its driver: upload_req_tag of every request. */
	void *tag;
};

struct upload_engine;
struct upload;

/* daemon_id (copied, may be NULL) is sent as x-amz-meta-ringcache-daemon
 * on every object and multipart upload the engine creates. */
struct upload_engine *upload_engine_new(struct s3_client *s3,
					const struct upload_driver *drv,
					const char *daemon_id);
/* Only once upload_engine_active() is 0 and no timer is pending. */
void upload_engine_free(struct upload_engine *e);
/* Uploads not yet reported done. */
unsigned upload_engine_active(const struct upload_engine *e);
/* Requests and timers outstanding (0: the engine may be freed). */
unsigned upload_engine_pending(const struct upload_engine *e);

/* Starts an upload. NULL with *err = -EINVAL (bad params: part size below
 * 5 MiB, more than 10000 parts, no source or two, read_slow without the
 * driver's hash) or -ENOMEM. */
struct upload *upload_start(struct upload_engine *e,
			    const struct upload_params *p, int *err);

/* A copy job: to_key gets from_key's bytes (bucket, both keys copied),
 * then from_key is deleted. size is the source's; up to threshold (0:
 * UPLOAD_COPY_MAX; else UPLOAD_MIN_PART..UPLOAD_COPY_MAX) one CopyObject,
 * above it parts of part_size (0: UPLOAD_DEFAULT_PART; grown to fit 10000
 * parts) copied concurrency at a time (0: 4). done, done_ctx and tag as in
 * upload_params; the outcome's etag is the new object's. Cancelled
 * (upload_cancel) before the copy landed it ends -ECANCELED with the
 * source in place; once landed the DELETE finishes and done says success.
 * NULL with *err = -EINVAL (bad params, from_key == to_key) or -ENOMEM. */
struct upload_copy_params {
	const char *bucket, *from_key, *to_key;
	uint64_t size;
	uint64_t threshold;
	uint64_t part_size;
	unsigned concurrency;
	upload_done_fn done;
	void *done_ctx;
	void *tag;
	/* As in upload_params, for the destination: a RENAME onto a key obeys
	 * the rules of a write to it. A HEAD of to_key first (Ceph RGW 16
	 * ignores If-None-Match on CopyObject, tested), then If-None-Match: *
	 * on CopyObject or the Complete; an object there is -EEXIST unless it
	 * carries token (this job's own earlier attempt: CopyObject keeps the
	 * source's metadata, a multipart copy's Create sends the token). */
	bool no_overwrite;
	const char *token;
	/* The source's ETag as the caller last knew it (copied): a HEAD of
	 * the source first, and x-amz-copy-source-if-match on CopyObject
	 * and every UploadPartCopy (a server may ignore it: Ceph RGW does),
	 * so a source another object has replaced since is neither copied
	 * nor deleted: the job ends -ESTALE. NULL or "": neither. */
	const char *source_etag;
};
struct upload *upload_copy_start(struct upload_engine *e,
				 const struct upload_copy_params *p, int *err);

/* A delete job: one DeleteObject of key (bucket and key copied), with
 * the retries and the request budget (tag) of the engine's other
 * requests; done reports err 0 when the key is gone (a 404 included),
 * else the DELETE's error. upload_cancel does not stop it. NULL with
 * *err = -EINVAL (no bucket, key or done) or -ENOMEM. */
struct upload_delete_params {
	const char *bucket, *key;
	/* The ETag the object must still have (If-Match; S3 answers 412,
	 * -ESTALE, if another writer replaced it), or NULL: unconditional. */
	const char *if_match;
	upload_done_fn done;
	void *done_ctx;
	void *tag;
};
struct upload *upload_delete_start(struct upload_engine *e,
				   const struct upload_delete_params *p,
				   int *err);

/* Stops an upload: in-flight parts are removed, a created multipart upload
 * is aborted, then done reports -ECANCELED. A single PUT already sent may
 * still have landed in S3; a Complete already answered wins (done then
 * reports success). No effect once done has been reported. */
void upload_cancel(struct upload *u);

/* The multipart upload id, or "" before CreateMultipartUpload answered or
 * for a single PUT. */
const char *upload_id(const struct upload *u);

/* The two halves of a driver's hash job: any thread, then the driver's. */
void upload_hash_run(void *job);
/* The same for n jobs at once (their MD5s side by side, md5x.h): the
 * run of a workers_kind. */
void upload_hash_run_many(void **jobs, unsigned n);
void upload_hash_done(void *job);

/* The tag of the upload an engine request belongs to. */
void *upload_req_tag(const struct s3_req *req);
/* The driver's completion call for every request added by add_transfer. */
void upload_transfer_done(struct s3_req *req, CURLcode code);

/* True if key/upload_id is an upload of this engine still running: the
 * keep callback of upload_cleanup_abandoned. */
bool upload_engine_owns(void *engine, const char *key, const char *upload_id);

/* Blocking (s3_perform): aborts the multipart uploads under bucket/prefix
 * initiated more than older_than_s seconds ago, except those keep() claims
 * (keep may be NULL). S3 does not list an upload's metadata, so ownership
 * is the prefix (a daemon's writable prefix) plus age plus keep; the
 * x-amz-meta-ringcache-daemon marker identifies the daemon on the objects
 * themselves. Returns the number aborted, or a negated errno (res filled). */
int upload_cleanup_abandoned(struct s3_client *s3, const char *bucket,
			     const char *prefix, unsigned older_than_s,
			     bool (*keep)(void *ctx, const char *key,
					  const char *upload_id),
			     void *keep_ctx, struct s3_result *res);

/* The outcome as an s3_result (s3_result_reason words it): err is the
 * failure, else a copy's source_err; code, message, status and ETag. */
void upload_outcome_result(const struct upload_outcome *out,
			   struct s3_result *res);

/* The multipart ETag of parts whose raw MD5s are md5s[0..n): hex MD5 of
 * their concatenation, "-n", in quotes. */
void upload_multipart_etag(const unsigned char (*md5s)[16], unsigned n,
			   char *out, size_t outlen);

#endif
