/* s3_query.c - owns the strings of a request (s3_query.h): URI-encoded
 * paths and queries, the addressing style's host, and the XML body of
 * CompleteMultipartUpload, built in one growable string. */
#include "s3_query.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3_op.h"
#include "sigv4.h"
#include "vec.h"

char *s3_uri_encode(const char *s, int keep_slash)
{
	size_t n = strlen(s), cap = 3 * n + 1;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	if (sigv4_uri_encode(s, n, keep_slash, out, cap) < 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* A growable string for paths and queries. */
struct strbuf {
	char *s;
	size_t len;
	uint32_t cap;
	bool failed;
};

static void sb_add(struct strbuf *b, const char *s)
{
	size_t n = strlen(s);
	if (b->failed)
		return;
	if (RC_GROW(b->s, b->cap, (uint64_t)b->len + n + 1)) {
		b->failed = true;
		return;
	}
	memcpy(b->s + b->len, s, n + 1);
	b->len += n;
}

static void sb_add_encoded(struct strbuf *b, const char *s, int keep_slash)
{
	char *e = s3_uri_encode(s, keep_slash);
	if (!e) {
		b->failed = true;
		return;
	}
	sb_add(b, e);
	free(e);
}

/* One query parameter, in the caller's (sorted) order. */
static void sb_add_param(struct strbuf *b, const char *name, const char *value)
{
	if (!value || !*value)
		return;
	if (b->len)
		sb_add(b, "&");
	sb_add(b, name);
	sb_add(b, "=");
	sb_add_encoded(b, value, 0);
}

/* ListObjectsV2's query, parameters already in SigV4's sorted order so the
 * signed and the sent query are the same string. */
char *s3_list_query(const struct s3_req_params *p)
{
	struct strbuf q = {0};
	char max_keys[16] = "";

	if (p->max_keys)
		snprintf(max_keys, sizeof(max_keys), "%u", p->max_keys);
	sb_add_param(&q, "continuation-token", p->continuation_token);
	sb_add_param(&q, "delimiter", p->delimiter);
	sb_add_param(&q, "list-type", "2");
	sb_add_param(&q, "max-keys", max_keys);
	sb_add_param(&q, "prefix", p->prefix);
	sb_add_param(&q, "start-after", p->start_after);
	if (q.failed) {
		free(q.s);
		return NULL;
	}
	return q.s;
}

/* A query parameter without a value ("uploads"): SigV4 signs it as
 * "uploads=", S3 takes it either way. */
static void sb_add_flag(struct strbuf *b, const char *name)
{
	if (b->len)
		sb_add(b, "&");
	sb_add(b, name);
}

/* The query of the multipart operations, parameters in sorted order. */
char *s3_multipart_query(const struct s3_req_params *p)
{
	struct strbuf q = {0};
	char num[16] = "";

	switch (p->op) {
	case S3_CREATE_MULTIPART:
		sb_add_flag(&q, "uploads");
		break;
	case S3_UPLOAD_PART:
	case S3_UPLOAD_PART_COPY:
		snprintf(num, sizeof(num), "%u", p->part_number);
		sb_add_param(&q, "partNumber", num);
		sb_add_param(&q, "uploadId", p->upload_id);
		break;
	case S3_COMPLETE_MULTIPART:
	case S3_ABORT_MULTIPART:
		sb_add_param(&q, "uploadId", p->upload_id);
		break;
	case S3_LIST_MULTIPART:
		if (p->max_uploads)
			snprintf(num, sizeof(num), "%u", p->max_uploads);
		sb_add_param(&q, "key-marker", p->key_marker);
		sb_add_param(&q, "max-uploads", num);
		sb_add_param(&q, "prefix", p->prefix);
		sb_add_param(&q, "upload-id-marker", p->upload_id_marker);
		sb_add_flag(&q, "uploads");
		break;
	default:
		break;
	}
	if (q.failed) {
		free(q.s);
		return NULL;
	}
	return q.s;
}

/* Host and path for the addressing style: the bucket goes in the path or
 * in front of the host. */
int s3_build_target(const struct s3_client *c, const struct s3_req_params *p,
			char **host_out, char **path_out)
{
	struct strbuf path = {0};
	char *host = NULL;

	if (c->cfg.addressing == S3_VIRTUAL_HOSTED) {
		if (asprintf(&host, "%s.%s", p->bucket, c->host) < 0)
			return -1;
		sb_add(&path, "/");
	} else {
		host = strdup(c->host);
		if (!host)
			return -1;
		sb_add(&path, "/");
		sb_add(&path, p->bucket);
		if (s3_op_has_key(p->op))
			sb_add(&path, "/");
	}
	if (s3_op_has_key(p->op))
		sb_add_encoded(&path, p->key, 1);
	if (path.failed) {
		free(host);
		free(path.s);
		return -1;
	}
	*host_out = host;
	*path_out = path.s;
	return 0;
}

static void sb_add_xml(struct strbuf *b, const char *s)
{
	char one[2] = "";

	for (; *s; s++) {
		switch (*s) {
		case '&': sb_add(b, "&amp;"); break;
		case '<': sb_add(b, "&lt;"); break;
		case '>': sb_add(b, "&gt;"); break;
		case '"': sb_add(b, "&quot;"); break;
		case '\'': sb_add(b, "&apos;"); break;
		default:
			one[0] = *s;
			sb_add(b, one);
		}
	}
}

/* CompleteMultipartUpload's body: the parts as the caller listed them
 * (order and numbers are the server's to judge). */
char *s3_complete_body(const struct s3_req_params *p)
{
	struct strbuf b = {0};
	char num[16];

	sb_add(&b, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
	for (size_t i = 0; i < p->n_parts; i++) {
		snprintf(num, sizeof(num), "%u", p->parts[i].number);
		sb_add(&b, "<Part><PartNumber>");
		sb_add(&b, num);
		sb_add(&b, "</PartNumber><ETag>");
		sb_add_xml(&b, p->parts[i].etag);
		sb_add(&b, "</ETag>");
		if (p->parts[i].crc32c) {
			sb_add(&b, "<ChecksumCRC32C>");
			sb_add_xml(&b, p->parts[i].crc32c);
			sb_add(&b, "</ChecksumCRC32C>");
		}
		sb_add(&b, "</Part>");
	}
	sb_add(&b, "</CompleteMultipartUpload>");
	if (b.failed) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

/* Checksum and copy headers of the write operations; -1 when out of
 * memory. All x-amz-* headers are signed, as S3 requires. */
