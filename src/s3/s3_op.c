/* s3_op.c - owns the table of S3 operations (method, key, body, write)
 * and the validation of a caller's parameters (s3_op.h): bucket names,
 * key lengths, ranges, upload ids, part lists, and header values without
 * control characters, since they go on the wire verbatim. */
#include "s3_op.h"

#include <ctype.h>
#include <string.h>

#include "log.h"


static bool valid_bucket(const char *b)
{
	size_t n = b ? strlen(b) : 0;
	if (n == 0 || n > 255)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)b[i]) && !strchr("._-", b[i]))
			return false;
	return true;
}

/* Header values go on the wire verbatim: no control characters. */
static bool valid_header_value(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 || *v == 0x7f)
			return false;
	return true;
}

bool s3_op_has_key(enum s3_op op)
{
	return op == S3_HEAD_OBJECT || op == S3_GET_OBJECT ||
	       op == S3_PUT_OBJECT || op == S3_DELETE_OBJECT ||
	       op == S3_CREATE_MULTIPART || op == S3_UPLOAD_PART ||
	       op == S3_COMPLETE_MULTIPART || op == S3_ABORT_MULTIPART ||
	       op == S3_COPY_OBJECT || op == S3_UPLOAD_PART_COPY;
}

static bool op_copies(enum s3_op op)
{
	return op == S3_COPY_OBJECT || op == S3_UPLOAD_PART_COPY;
}

/* Operations that send a caller's body (borrowed, resent on retries). */
bool s3_op_sends_body(enum s3_op op)
{
	return op == S3_PUT_OBJECT || op == S3_UPLOAD_PART;
}

static bool op_needs_upload_id(enum s3_op op)
{
	return op == S3_UPLOAD_PART || op == S3_COMPLETE_MULTIPART ||
	       op == S3_ABORT_MULTIPART || op == S3_UPLOAD_PART_COPY;
}

const char *s3_op_method(enum s3_op op)
{
	switch (op) {
	case S3_HEAD_OBJECT:
	case S3_HEAD_BUCKET:
		return "HEAD";
	case S3_GET_OBJECT:
	case S3_LIST_OBJECTS_V2:
		return "GET";
	case S3_PUT_OBJECT:
	case S3_CREATE_BUCKET:
	case S3_UPLOAD_PART:
	case S3_COPY_OBJECT:
	case S3_UPLOAD_PART_COPY:
		return "PUT";
	case S3_DELETE_OBJECT:
	case S3_ABORT_MULTIPART:
		return "DELETE";
	case S3_CREATE_MULTIPART:
	case S3_COMPLETE_MULTIPART:
		return "POST";
	case S3_LIST_MULTIPART:
		return "GET";
	}
	return NULL;
}

static int validate_parts(const struct s3_req_params *p, char *err,
			  size_t errlen)
{
	if (!p->parts || p->n_parts == 0 || p->n_parts > 10000) {
		rc_set_err(err, errlen, "CompleteMultipartUpload needs 1..10000 parts");
		return -1;
	}
	for (size_t i = 0; i < p->n_parts; i++) {
		const struct s3_part *pt = &p->parts[i];
		if (pt->number < 1 || pt->number > 10000 || !pt->etag ||
		    !pt->etag[0]) {
			rc_set_err(err, errlen, "part %zu: needs a number in 1..10000 "
				"and an ETag", i);
			return -1;
		}
	}
	return 0;
}

/* What the write operations need beyond bucket and key. */
static int validate_write_params(const struct s3_req_params *p, char *err,
				 size_t errlen)
{
	if (op_needs_upload_id(p->op) && (!p->upload_id || !p->upload_id[0])) {
		rc_set_err(err, errlen, "this operation needs an upload id");
		return -1;
	}
	if ((p->op == S3_UPLOAD_PART || p->op == S3_UPLOAD_PART_COPY) &&
	    (p->part_number < 1 || p->part_number > 10000)) {
		rc_set_err(err, errlen, "part number %u is not in 1..10000",
			p->part_number);
		return -1;
	}
	if (p->op == S3_COMPLETE_MULTIPART && validate_parts(p, err, errlen) < 0)
		return -1;
	if (op_copies(p->op) &&
	    (!p->copy_source || !strchr(p->copy_source, '/'))) {
		rc_set_err(err, errlen, "a copy needs a source \"bucket/key\"");
		return -1;
	}
	if (p->op == S3_UPLOAD_PART_COPY && (p->copy_range_len == 0 ||
	    p->copy_range_off > UINT64_MAX - p->copy_range_len)) {
		rc_set_err(err, errlen, "UploadPartCopy needs a source range");
		return -1;
	}
	if ((p->content_md5_value && !valid_header_value(p->content_md5_value)) ||
	    (p->checksum_crc32c && !valid_header_value(p->checksum_crc32c)) ||
	    (p->meta_daemon && !valid_header_value(p->meta_daemon)) ||
	    (p->meta_upload && !valid_header_value(p->meta_upload)) ||
	    (p->copy_source_if_match &&
	     !valid_header_value(p->copy_source_if_match))) {
		rc_set_err(err, errlen, "a header value has control characters");
		return -1;
	}
	return 0;
}

int s3_validate_params(const struct s3_req_params *p, char *err,
			   size_t errlen)
{
	if (!s3_op_method(p->op)) {
		rc_set_err(err, errlen, "unknown S3 operation %d", (int)p->op);
		return -1;
	}
	if (!valid_bucket(p->bucket)) {
		rc_set_err(err, errlen, "bucket name '%s' is not valid",
			p->bucket ? p->bucket : "(null)");
		return -1;
	}
	if (s3_op_has_key(p->op)) {
		size_t n = p->key ? strlen(p->key) : 0;
		if (n == 0 || n > S3_KEY_MAX) {
			rc_set_err(err, errlen, "object key must be 1..%d bytes (got %zu)",
				S3_KEY_MAX, n);
			return -1;
		}
	}
	if (p->op == S3_GET_OBJECT && p->range_len &&
	    p->range_off > UINT64_MAX - p->range_len) {
		rc_set_err(err, errlen, "range overflows");
		return -1;
	}
	if (p->if_match && !valid_header_value(p->if_match)) {
		rc_set_err(err, errlen, "If-Match value has control characters");
		return -1;
	}
	if (s3_op_sends_body(p->op) && p->body_len && !p->body && !p->pieces) {
		rc_set_err(err, errlen, "PUT body is NULL but body_len is %zu",
			p->body_len);
		return -1;
	}
	if (s3_op_sends_body(p->op) && p->n_pieces && !p->pieces) {
		rc_set_err(err, errlen, "PUT pieces is NULL but n_pieces is %u",
			p->n_pieces);
		return -1;
	}
	return validate_write_params(p, err, errlen);
}

/* Percent-encodes s into a fresh string; NULL on failure. */

bool s3_op_is_multipart(enum s3_op op)
{
	return op == S3_CREATE_MULTIPART || op == S3_UPLOAD_PART ||
	       op == S3_COMPLETE_MULTIPART || op == S3_ABORT_MULTIPART ||
	       op == S3_LIST_MULTIPART || op == S3_UPLOAD_PART_COPY;
}

bool s3_op_writes(enum s3_op op)
{
	return op == S3_PUT_OBJECT || op == S3_UPLOAD_PART ||
	       op == S3_CREATE_MULTIPART || op == S3_COMPLETE_MULTIPART ||
	       op_copies(op);
}
