/* s3.c - owns the S3 wire protocol: the client's parsed endpoint, building
 * and signing libcurl easy handles for each operation, capturing response
 * headers and bodies, classifying outcomes into errno values with a retry
 * verdict, parsing S3's XML (expat), and the blocking retry loop tools use.
 * Write operations (multipart upload, copy) share all of it: they differ
 * only in method, query, body and a few signed headers.
 *
 * Ownership: an s3_client owns copies of its config strings. An s3_req owns
 * its easy handle, header list, URL and response buffer; a PUT body is
 * borrowed from the caller. The reactor drives easy handles itself and gets
 * the request back through CURLOPT_PRIVATE. */
#include "log.h"
#include "s3.h"

#include <ctype.h>
#include <errno.h>
#include <expat.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sigv4.h"

#define S3_KEY_MAX 1024                 /* S3's own limit, in bytes */
#define S3_ERROR_BODY_CAP (64u << 10)   /* error documents are small */
#define S3_LIST_BODY_CAP (16u << 20)    /* one ListObjectsV2 page */
#define S3_SMALL_BODY_CAP (64u << 10)   /* PUT/DELETE/bucket replies */
#define S3_GET_MEM_CAP (1u << 30)       /* GET collected in memory */
#define XML_TEXT_CAP (64u << 10)        /* one element's text */

struct s3_client {
	struct s3_config cfg;   /* strings below are the owned copies */
	char *endpoint, *region, *ca_file;
	char *scheme;           /* "http" or "https" */
	char *host;             /* Host header value, ":port" if not default */
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
	enum s3_op op;
	uint64_t range_off, range_len;
	s3_sink_fn sink;
	void *sink_ctx;
	void *priv;

	/* Response, reset at every status line (1xx, redirects). */
	long status;
	char etag[128];
	bool etag_too_long;    /* the header did not fit etag[]: a protocol error */
	bool have_length, have_range;
	uint64_t content_length;
	uint64_t range_first, range_last, range_total; /* total 0: "*" */
	bool range_total_known;
	uint64_t body_bytes;
	enum s3_abort abort;

	char *buf;             /* collected body, NUL-terminated when non-NULL */
	size_t buf_len, buf_cap;
	char errbuf[CURL_ERROR_SIZE];
};

static void copy_str(char *dst, size_t dstlen, const char *src, size_t n)
{
	if (!dstlen)
		return;
	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- client ------------------------------------------------------------ */

static char *dup_or_null(const char *s, bool *oom)
{
	if (!s)
		return NULL;
	char *d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

/* Splits the endpoint with libcurl's URL parser (IPv6 literals, userinfo
 * and friends are its problem, not a hand-rolled scanner's). */
static int parse_endpoint(struct s3_client *c, char *err, size_t errlen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL;
	int rc = -1;

	if (!u) {
		rc_set_err(err, errlen, "out of memory");
		return -1;
	}
	if (curl_url_set(u, CURLUPART_URL, c->endpoint, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		rc_set_err(err, errlen, "s3 endpoint '%s' is not a URL", c->endpoint);
		goto out;
	}
	if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
		rc_set_err(err, errlen, "s3 endpoint '%s': scheme must be http or https",
			c->endpoint);
		goto out;
	}
	if (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK &&
	    strcmp(path, "/") != 0 && path[0] != '\0') {
		rc_set_err(err, errlen, "s3 endpoint '%s' must not have a path",
			c->endpoint);
		goto out;
	}
	CURLUcode pc = curl_url_get(u, CURLUPART_PORT, &port, 0);
	bool default_port = pc != CURLUE_OK ||
		(strcmp(scheme, "http") == 0 && strcmp(port, "80") == 0) ||
		(strcmp(scheme, "https") == 0 && strcmp(port, "443") == 0);
	size_t hlen = strlen(host) + (port ? strlen(port) : 0) + 2;
	c->host = malloc(hlen);
	c->scheme = strdup(scheme);
	if (!c->host || !c->scheme) {
		rc_set_err(err, errlen, "out of memory");
		goto out;
	}
	if (default_port)
		snprintf(c->host, hlen, "%s", host);
	else
		snprintf(c->host, hlen, "%s:%s", host, port);
	rc = 0;
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_url_cleanup(u);
	return rc;
}

static void apply_defaults(struct s3_config *cfg)
{
	if (!cfg->connect_timeout_ms)
		cfg->connect_timeout_ms = 3000;
	if (!cfg->request_timeout_ms)
		cfg->request_timeout_ms = 30000;
	if (!cfg->low_speed_time_s)
		cfg->low_speed_time_s = 10;
	if (!cfg->backoff_base_ms)
		cfg->backoff_base_ms = 50;
	if (!cfg->backoff_cap_ms)
		cfg->backoff_cap_ms = 5000;
}

struct s3_client *s3_client_new(const struct s3_config *cfg, char *err,
				size_t errlen)
{
	bool oom = false;
	const char *region = cfg->region && *cfg->region ? cfg->region : "us-east-1";

	if (strlen(region) > 64 || strpbrk(region, "/ \r\n")) {
		rc_set_err(err, errlen, "s3 region '%s' is not valid", region);
		return NULL;
	}
	struct s3_client *c = calloc(1, sizeof(*c));
	if (!c) {
		rc_set_err(err, errlen, "out of memory");
		return NULL;
	}
	c->cfg = *cfg;
	c->region = dup_or_null(region, &oom);
	c->ca_file = cfg->ca_file && *cfg->ca_file ? dup_or_null(cfg->ca_file, &oom) : NULL;
	if (cfg->endpoint && *cfg->endpoint) {
		c->endpoint = dup_or_null(cfg->endpoint, &oom);
	} else if (c->region && asprintf(&c->endpoint, "https://s3.%s.amazonaws.com",
					 c->region) < 0) {
		c->endpoint = NULL;
		oom = true;
	}
	if (oom) {
		rc_set_err(err, errlen, "out of memory");
		s3_client_free(c);
		return NULL;
	}
	if (parse_endpoint(c, err, errlen) < 0) {
		s3_client_free(c);
		return NULL;
	}
	c->cfg.endpoint = c->endpoint;
	c->cfg.region = c->region;
	c->cfg.ca_file = c->ca_file;
	apply_defaults(&c->cfg);
	return c;
}

void s3_client_free(struct s3_client *c)
{
	if (!c)
		return;
	free(c->endpoint);
	free(c->region);
	free(c->ca_file);
	free(c->scheme);
	free(c->host);
	free(c);
}

const struct s3_config *s3_client_config(const struct s3_client *c)
{
	return &c->cfg;
}

/* ---- response capture --------------------------------------------------- */

static void reset_response(struct s3_req *r)
{
	r->status = 0;
	r->etag[0] = '\0';
	r->etag_too_long = false;
	r->have_length = r->have_range = r->range_total_known = false;
	r->content_length = 0;
	r->range_first = r->range_last = r->range_total = 0;
	r->body_bytes = 0;
	r->buf_len = 0;
	if (r->buf)
		r->buf[0] = '\0';
}

static bool parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0 || n > 20)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return false;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

/* "bytes FIRST-LAST/TOTAL"; an unknown total ("*") leaves the total unset. */
static void parse_content_range(struct s3_req *r, const char *v, size_t n)
{
	if (n < 6 || strncasecmp(v, "bytes ", 6) != 0)
		return;
	v += 6;
	n -= 6;
	const char *slash = memchr(v, '/', n);
	if (!slash)
		return;
	size_t span = (size_t)(slash - v), tail = n - span - 1;
	uint64_t total;
	if (parse_u64(slash + 1, tail, &total)) {
		r->range_total = total;
		r->range_total_known = true;
	}
	const char *dash = memchr(v, '-', span);
	if (!dash)
		return;
	if (parse_u64(v, (size_t)(dash - v), &r->range_first) &&
	    parse_u64(dash + 1, span - (size_t)(dash - v) - 1, &r->range_last) &&
	    r->range_first <= r->range_last)
		r->have_range = true;
}

static void parse_status_line(struct s3_req *r, const char *line, size_t n)
{
	reset_response(r);
	const char *sp = memchr(line, ' ', n);
	if (!sp)
		return;
	size_t rest = n - (size_t)(sp + 1 - line);
	uint64_t code;
	if (rest >= 3 && parse_u64(sp + 1, 3, &code))
		r->status = (long)code;
}

static size_t on_header(char *data, size_t size, size_t nitems, void *userp)
{
	struct s3_req *r = userp;
	size_t n = size * nitems, len = n;

	while (len && (data[len - 1] == '\r' || data[len - 1] == '\n'))
		len--;
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		parse_status_line(r, data, len);
		return n;
	}
	const char *colon = memchr(data, ':', len);
	if (!colon)
		return n;
	size_t nlen = (size_t)(colon - data);
	const char *v = colon + 1;
	size_t vlen = len - nlen - 1;
	while (vlen && (*v == ' ' || *v == '\t')) {
		v++;
		vlen--;
	}
	while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;

	if (nlen == 4 && strncasecmp(data, "etag", 4) == 0) {
		r->etag_too_long = vlen >= sizeof(r->etag);
		copy_str(r->etag, sizeof(r->etag), v, vlen);
	}
	else if (nlen == 14 && strncasecmp(data, "content-length", 14) == 0)
		r->have_length = parse_u64(v, vlen, &r->content_length);
	else if (nlen == 13 && strncasecmp(data, "content-range", 13) == 0)
		parse_content_range(r, v, vlen);
	return n;
}

static bool is_2xx(long status)
{
	return status >= 200 && status < 300;
}

static size_t body_cap(const struct s3_req *r)
{
	if (!is_2xx(r->status))
		return S3_ERROR_BODY_CAP;
	switch (r->op) {
	case S3_LIST_OBJECTS_V2:
	case S3_LIST_MULTIPART:
		return S3_LIST_BODY_CAP;
	case S3_GET_OBJECT:
		return S3_GET_MEM_CAP;
	default:
		return S3_SMALL_BODY_CAP;
	}
}

/* Appends to the in-memory body. Error bodies past their cap are dropped
 * (the rest is drained so the connection stays reusable); success bodies
 * past theirs abort, since a truncated list page would be wrong. */
static int buffer_append(struct s3_req *r, const char *data, size_t n)
{
	size_t cap = body_cap(r);
	if (r->buf_len + n > cap) {
		if (!is_2xx(r->status)) {
			n = cap > r->buf_len ? cap - r->buf_len : 0;
			if (!n)
				return 0;
		} else {
			r->abort = ABORT_TOO_LARGE;
			return -1;
		}
	}
	if (r->buf_len + n + 1 > r->buf_cap) {
		size_t want = r->buf_cap ? r->buf_cap : 4096;
		while (want < r->buf_len + n + 1)
			want *= 2;
		char *nb = realloc(r->buf, want);
		if (!nb) {
			r->abort = ABORT_NOMEM;
			return -1;
		}
		r->buf = nb;
		r->buf_cap = want;
	}
	memcpy(r->buf + r->buf_len, data, n);
	r->buf_len += n;
	r->buf[r->buf_len] = '\0';
	return 0;
}

/* Before the first byte of a ranged GET reaches the sink: the bytes must
 * be the ones asked for, or the sink would store them at the wrong place. */
static bool range_matches(const struct s3_req *r)
{
	if (r->range_len == 0)
		return true;
	if (r->status == 206)
		return r->have_range && r->range_first == r->range_off;
	return r->range_off == 0; /* 200: whole object, starts at 0 */
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userp)
{
	struct s3_req *r = userp;
	size_t n = size * nmemb;

	if (r->sink && is_2xx(r->status)) {
		if (r->body_bytes == 0 && !range_matches(r)) {
			r->abort = ABORT_BAD_RANGE;
			return 0;
		}
		if (r->range_len && r->body_bytes + n > r->range_len) {
			r->abort = ABORT_OVERRUN;
			return 0;
		}
		if (r->sink(r->sink_ctx, r->body_bytes, data, n) != 0) {
			r->abort = ABORT_SINK;
			return 0;
		}
	} else if (buffer_append(r, data, n) < 0) {
		return 0;
	}
	r->body_bytes += n;
	return n;
}

static size_t on_read(char *dst, size_t size, size_t nitems, void *userp)
{
	struct s3_req *r = userp;
	size_t room = size * nitems, left = r->body_len - r->body_pos;
	size_t n = left < room ? left : room;

	if (n)
		memcpy(dst, r->body + r->body_pos, n);
	r->body_pos += n;
	return n;
}

static int on_seek(void *userp, curl_off_t offset, int origin)
{
	struct s3_req *r = userp;

	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > r->body_len)
		return CURL_SEEKFUNC_FAIL;
	r->body_pos = (size_t)offset;
	return CURL_SEEKFUNC_OK;
}

/* ---- request building --------------------------------------------------- */

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

static bool op_has_key(enum s3_op op)
{
	return op == S3_HEAD_OBJECT || op == S3_GET_OBJECT ||
	       op == S3_PUT_OBJECT || op == S3_DELETE_OBJECT ||
	       op == S3_CREATE_MULTIPART || op == S3_UPLOAD_PART ||
	       op == S3_COMPLETE_MULTIPART || op == S3_ABORT_MULTIPART ||
	       op == S3_COPY_OBJECT;
}

/* Operations that send a caller's body (borrowed, resent on retries). */
static bool op_sends_body(enum s3_op op)
{
	return op == S3_PUT_OBJECT || op == S3_UPLOAD_PART;
}

static bool op_needs_upload_id(enum s3_op op)
{
	return op == S3_UPLOAD_PART || op == S3_COMPLETE_MULTIPART ||
	       op == S3_ABORT_MULTIPART;
}

static const char *op_method(enum s3_op op)
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
	if (p->op == S3_UPLOAD_PART &&
	    (p->part_number < 1 || p->part_number > 10000)) {
		rc_set_err(err, errlen, "part number %u is not in 1..10000",
			p->part_number);
		return -1;
	}
	if (p->op == S3_COMPLETE_MULTIPART && validate_parts(p, err, errlen) < 0)
		return -1;
	if (p->op == S3_COPY_OBJECT && (!p->copy_source || !strchr(p->copy_source, '/'))) {
		rc_set_err(err, errlen, "CopyObject needs a source \"bucket/key\"");
		return -1;
	}
	if ((p->content_md5_value && !valid_header_value(p->content_md5_value)) ||
	    (p->checksum_crc32c && !valid_header_value(p->checksum_crc32c)) ||
	    (p->meta_daemon && !valid_header_value(p->meta_daemon))) {
		rc_set_err(err, errlen, "checksum value has control characters");
		return -1;
	}
	return 0;
}

static int validate_params(const struct s3_req_params *p, char *err,
			   size_t errlen)
{
	if (!op_method(p->op)) {
		rc_set_err(err, errlen, "unknown S3 operation %d", (int)p->op);
		return -1;
	}
	if (!valid_bucket(p->bucket)) {
		rc_set_err(err, errlen, "bucket name '%s' is not valid",
			p->bucket ? p->bucket : "(null)");
		return -1;
	}
	if (op_has_key(p->op)) {
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
	if (op_sends_body(p->op) && p->body_len && !p->body) {
		rc_set_err(err, errlen, "PUT body is NULL but body_len is %zu",
			p->body_len);
		return -1;
	}
	return validate_write_params(p, err, errlen);
}

/* Percent-encodes s into a fresh string; NULL on failure. */
static char *uri_encode(const char *s, int keep_slash)
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
	size_t len, cap;
	bool failed;
};

static void sb_add(struct strbuf *b, const char *s)
{
	size_t n = strlen(s);
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t want = b->cap ? b->cap * 2 : 256;
		while (want < b->len + n + 1)
			want *= 2;
		char *ns = realloc(b->s, want);
		if (!ns) {
			b->failed = true;
			return;
		}
		b->s = ns;
		b->cap = want;
	}
	memcpy(b->s + b->len, s, n + 1);
	b->len += n;
}

static void sb_add_encoded(struct strbuf *b, const char *s, int keep_slash)
{
	char *e = uri_encode(s, keep_slash);
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
static char *list_query(const struct s3_req_params *p)
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
static char *multipart_query(const struct s3_req_params *p)
{
	struct strbuf q = {0};
	char num[16] = "";

	switch (p->op) {
	case S3_CREATE_MULTIPART:
		sb_add_flag(&q, "uploads");
		break;
	case S3_UPLOAD_PART:
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

static bool op_is_multipart(enum s3_op op)
{
	return op == S3_CREATE_MULTIPART || op == S3_UPLOAD_PART ||
	       op == S3_COMPLETE_MULTIPART || op == S3_ABORT_MULTIPART ||
	       op == S3_LIST_MULTIPART;
}

/* Host and path for the addressing style: the bucket goes in the path or
 * in front of the host. */
static int build_target(const struct s3_client *c, const struct s3_req_params *p,
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
		if (op_has_key(p->op))
			sb_add(&path, "/");
	}
	if (op_has_key(p->op))
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

static int add_header(struct s3_req *r, const char *name, const char *value)
{
	char line[4400];
	int n = snprintf(line, sizeof(line), "%s: %s", name, value);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -1;
	struct curl_slist *l = curl_slist_append(r->headers, line);
	if (!l)
		return -1;
	r->headers = l;
	return 0;
}

/* Headers that are both sent and signed, besides the x-amz-* trio. */
struct signed_headers {
	struct sigv4_header h[8];
	size_t n;
	char range[64];
	char md5[25];
};

/* XML text: the five characters XML reserves, escaped. */
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
static char *complete_body(const struct s3_req_params *p)
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
static int add_write_headers(struct s3_req *r, const struct s3_req_params *p,
			     struct signed_headers *sh)
{
	if (op_sends_body(p->op) && (p->content_md5 || p->content_md5_value ||
				     p->op == S3_UPLOAD_PART)) {
		if (p->content_md5_value)
			snprintf(sh->md5, sizeof(sh->md5), "%s", p->content_md5_value);
		else
			s3_content_md5(r->body, r->body_len, sh->md5);
		sh->h[sh->n++] = (struct sigv4_header){ "Content-MD5", sh->md5 };
	}
	if (op_sends_body(p->op) && p->checksum_crc32c)
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-checksum-crc32c",
							p->checksum_crc32c };
	if (p->op == S3_CREATE_MULTIPART && p->checksum_crc32c)
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-checksum-algorithm",
							"CRC32C" };
	if (p->meta_daemon &&
	    (p->op == S3_PUT_OBJECT || p->op == S3_CREATE_MULTIPART))
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-meta-ringcache-daemon",
							p->meta_daemon };
	if (p->if_none_match &&
	    (p->op == S3_PUT_OBJECT || p->op == S3_COMPLETE_MULTIPART))
		sh->h[sh->n++] = (struct sigv4_header){ "If-None-Match", "*" };
	if (p->op == S3_COPY_OBJECT) {
		r->copy_source = uri_encode(p->copy_source, 1);
		if (!r->copy_source)
			return -1;
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-copy-source",
							r->copy_source };
	}
	return 0;
}

static int prepare_body(struct s3_req *r, const struct s3_req_params *p)
{
	if (op_sends_body(p->op)) {
		r->body = p->body;
		r->body_len = p->body_len;
		return 0;
	}
	if (p->op == S3_COMPLETE_MULTIPART) {
		if (!(r->own_body = complete_body(p)))
			return -1;
		r->body = (const unsigned char *)r->own_body;
		r->body_len = strlen(r->own_body);
		return 0;
	}
	if (p->op != S3_CREATE_BUCKET || strcmp(r->c->region, "us-east-1") == 0)
		return 0;
	/* Outside us-east-1 S3 wants the region restated in the body. */
	if (asprintf(&r->own_body,
		     "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		     "<LocationConstraint>%s</LocationConstraint>"
		     "</CreateBucketConfiguration>", r->c->region) < 0) {
		r->own_body = NULL;
		return -1;
	}
	r->body = (const unsigned char *)r->own_body;
	r->body_len = strlen(r->own_body);
	return 0;
}

static int sign_and_set_headers(struct s3_req *r, const char *host,
				const char *path, const char *query,
				const struct s3_req_params *p, char *err,
				size_t errlen)
{
	struct signed_headers sh = {0};
	struct rc_creds cr;
	int anonymous = 0;
	char payload_sha[65];

	if (p->op == S3_GET_OBJECT && p->range_len) {
		snprintf(sh.range, sizeof(sh.range), "bytes=%" PRIu64 "-%" PRIu64,
			 p->range_off, p->range_off + p->range_len - 1);
		sh.h[sh.n++] = (struct sigv4_header){ "Range", sh.range };
	}
	if (p->if_match && (p->op == S3_GET_OBJECT || p->op == S3_HEAD_OBJECT))
		sh.h[sh.n++] = (struct sigv4_header){ "If-Match", p->if_match };
	if (add_write_headers(r, p, &sh) < 0)
		goto nomem;

	if (add_header(r, "Host", host) < 0)
		goto nomem;
	for (size_t i = 0; i < sh.n; i++)
		if (add_header(r, sh.h[i].name, sh.h[i].value) < 0)
			goto nomem;

	const struct s3_config *cfg = &r->c->cfg;
	if (cfg->creds) {
		int rc = creds_get(cfg->creds, &cr, &anonymous);
		if (rc < 0) {
			rc_set_err(err, errlen, "no usable credentials: %s", strerror(-rc));
			errno = EKEYREJECTED;
			return -1;
		}
	} else {
		anonymous = 1;
	}
	if (anonymous)
		return 0;

	/* RGW checks the payload hash, so it is always real, never UNSIGNED. */
	if (p->payload_sha256 && op_sends_body(p->op))
		snprintf(payload_sha, sizeof(payload_sha), "%s", p->payload_sha256);
	else if (r->body_len)
		sigv4_sha256_hex(r->body, r->body_len, payload_sha);
	else
		snprintf(payload_sha, sizeof(payload_sha), "%s", SIGV4_EMPTY_SHA256);

	struct sigv4_request sreq = {
		.method = op_method(p->op),
		.path = path,
		.query = query,
		.host = host,
		.headers = sh.h,
		.n_headers = sh.n,
		.payload_sha256 = payload_sha,
		.region = r->c->region,
		.service = "s3",
		.now = time(NULL),
	};
	struct sigv4_result sig;
	int rc = sigv4_sign(&sreq, &cr, &sig);
	explicit_bzero(cr.secret_key, sizeof(cr.secret_key));
	if (rc < 0) {
		rc_set_err(err, errlen, "request too large to sign");
		errno = EINVAL;
		return -1;
	}
	if (add_header(r, "x-amz-date", sig.amz_date) < 0 ||
	    add_header(r, "x-amz-content-sha256", sig.content_sha256) < 0 ||
	    add_header(r, "Authorization", sig.authorization) < 0 ||
	    (cr.session_token[0] &&
	     add_header(r, "x-amz-security-token", cr.session_token) < 0))
		goto nomem;
	return 0;
nomem:
	rc_set_err(err, errlen, "out of memory building headers");
	errno = ENOMEM;
	return -1;
}

static int add_raw_header(struct s3_req *r, const char *line)
{
	struct curl_slist *l = curl_slist_append(r->headers, line);
	if (!l)
		return -1;
	r->headers = l;
	return 0;
}

/* The body goes through on_read/on_seek so a retry or a redirect of the
 * connection rewinds it instead of asking the caller again. */
static CURLcode set_body_reader(struct s3_req *r)
{
	CURL *e = r->easy;
	CURLcode rc;

	if ((rc = curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read)) == CURLE_OK &&
	    (rc = curl_easy_setopt(e, CURLOPT_READDATA, r)) == CURLE_OK &&
	    (rc = curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek)) == CURLE_OK)
		rc = curl_easy_setopt(e, CURLOPT_SEEKDATA, r);
	return rc;
}

/* POST with our own body; curl's default form Content-Type is replaced
 * (unsigned, so harmless to S3, but it is not a form). */
static int set_post(struct s3_req *r)
{
	CURL *e = r->easy;

	if (curl_easy_setopt(e, CURLOPT_POST, 1L) != CURLE_OK ||
	    set_body_reader(r) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE,
			     (curl_off_t)r->body_len) != CURLE_OK)
		return -1;
	return add_raw_header(r, r->body_len ? "Content-Type: application/xml"
					     : "Content-Type:") < 0 ||
	       add_raw_header(r, "Expect:") < 0 ? -1 : 0;
}

static int set_method(struct s3_req *r)
{
	CURL *e = r->easy;
	CURLcode rc = CURLE_OK;

	switch (r->op) {
	case S3_HEAD_OBJECT:
	case S3_HEAD_BUCKET:
		rc = curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
		break;
	case S3_GET_OBJECT:
	case S3_LIST_OBJECTS_V2:
		rc = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
		break;
	case S3_CREATE_MULTIPART:
	case S3_COMPLETE_MULTIPART:
		return set_post(r);
	case S3_LIST_MULTIPART:
		rc = curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
		break;
	case S3_PUT_OBJECT:
	case S3_CREATE_BUCKET:
	case S3_UPLOAD_PART:
	case S3_COPY_OBJECT:
		if ((rc = curl_easy_setopt(e, CURLOPT_UPLOAD, 1L)) == CURLE_OK &&
		    (rc = curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read)) == CURLE_OK &&
		    (rc = curl_easy_setopt(e, CURLOPT_READDATA, r)) == CURLE_OK &&
		    (rc = curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek)) == CURLE_OK &&
		    (rc = curl_easy_setopt(e, CURLOPT_SEEKDATA, r)) == CURLE_OK)
			rc = curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE,
					      (curl_off_t)r->body_len);
		/* Waiting for "100 Continue" costs a round trip per PUT. */
		if (rc == CURLE_OK) {
			struct curl_slist *l = curl_slist_append(r->headers, "Expect:");
			if (!l)
				return -1;
			r->headers = l;
		}
		break;
	case S3_DELETE_OBJECT:
	case S3_ABORT_MULTIPART:
		rc = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
		break;
	}
	return rc == CURLE_OK ? 0 : -1;
}

static int set_transport(struct s3_req *r)
{
	const struct s3_config *cfg = &r->c->cfg;
	CURL *e = r->easy;
	long verify = cfg->tls_verify ? 1L : 0L;

#define SETOPT(opt, val)                                                    \
	do {                                                                \
		if (curl_easy_setopt(e, opt, val) != CURLE_OK)              \
			return -1;                                          \
	} while (0)
	SETOPT(CURLOPT_URL, r->url);
	SETOPT(CURLOPT_HTTPHEADER, r->headers);
	SETOPT(CURLOPT_PRIVATE, r);
	SETOPT(CURLOPT_ERRORBUFFER, r->errbuf);
	SETOPT(CURLOPT_HEADERFUNCTION, on_header);
	SETOPT(CURLOPT_HEADERDATA, r);
	SETOPT(CURLOPT_WRITEFUNCTION, on_body);
	SETOPT(CURLOPT_WRITEDATA, r);
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_TCP_NODELAY, 1L);
	SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
	SETOPT(CURLOPT_SSL_VERIFYPEER, verify);
	SETOPT(CURLOPT_SSL_VERIFYHOST, verify ? 2L : 0L);
	if (cfg->ca_file)
		SETOPT(CURLOPT_CAINFO, cfg->ca_file);
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_timeout_ms);
	SETOPT(CURLOPT_TIMEOUT_MS, cfg->request_timeout_ms);
	SETOPT(CURLOPT_LOW_SPEED_LIMIT, 1024L);
	SETOPT(CURLOPT_LOW_SPEED_TIME, cfg->low_speed_time_s);
	SETOPT(CURLOPT_USERAGENT, "ringcache/0.1");
	/* S3 redirects (wrong region) are errors to report, not to follow. */
	SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#undef SETOPT
	return 0;
}

struct s3_req *s3_req_new(struct s3_client *c, const struct s3_req_params *p,
			  char *err, size_t errlen)
{
	char *host = NULL, *path = NULL, *query = NULL;

	errno = EINVAL;
	if (!c || !p) {
		rc_set_err(err, errlen, "no client or params");
		return NULL;
	}
	if (validate_params(p, err, errlen) < 0)
		return NULL;
	struct s3_req *r = calloc(1, sizeof(*r));
	if (!r)
		goto nomem;
	r->c = c;
	r->op = p->op;
	r->range_off = p->op == S3_GET_OBJECT ? p->range_off : 0;
	r->range_len = p->op == S3_GET_OBJECT ? p->range_len : 0;
	r->sink = p->op == S3_GET_OBJECT ? p->sink : NULL;
	r->sink_ctx = p->sink_ctx;

	if (build_target(c, p, &host, &path) < 0 || prepare_body(r, p) < 0)
		goto nomem;
	if (p->op == S3_LIST_OBJECTS_V2 && !(query = list_query(p)))
		goto nomem;
	if (op_is_multipart(p->op) && !(query = multipart_query(p)))
		goto nomem;
	if (asprintf(&r->url, "%s://%s%s%s%s", c->scheme, host, path,
		     query ? "?" : "", query ? query : "") < 0) {
		r->url = NULL;
		goto nomem;
	}
	if (sign_and_set_headers(r, host, path, query, p, err, errlen) < 0)
		goto fail;
	if (!(r->easy = curl_easy_init()) || set_method(r) < 0 ||
	    set_transport(r) < 0)
		goto nomem;
	free(host);
	free(path);
	free(query);
	return r;
nomem:
	rc_set_err(err, errlen, "out of memory building the request");
	errno = ENOMEM;
fail:
	free(host);
	free(path);
	free(query);
	s3_req_free(r);
	return NULL;
}

CURL *s3_req_easy(struct s3_req *r)
{
	return r->easy;
}

const char *s3_req_body(const struct s3_req *r, size_t *len)
{
	if (len)
		*len = r->buf_len;
	return r->buf ? r->buf : "";
}

void s3_req_free(struct s3_req *r)
{
	if (!r)
		return;
	if (r->easy)
		curl_easy_cleanup(r->easy);
	curl_slist_free_all(r->headers);
	free(r->url);
	free(r->own_body);
	free(r->copy_source);
	free(r->buf);
	free(r);
}

void *s3_req_get_private(const struct s3_req *r)
{
	return r->priv;
}

void s3_req_set_private(struct s3_req *r, void *priv)
{
	r->priv = priv;
}

/* ---- classification ----------------------------------------------------- */

static bool code_is(const char *code, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(code, *set) == 0)
			return true;
	return false;
}

static const char *const auth_codes[] = {
	"SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken",
	"InvalidToken", "TokenRefreshRequired", "RequestTimeTooSkewed",
	"AuthorizationHeaderMalformed", "InvalidSecurity", NULL,
};
static const char *const retry_codes[] = {
	"SlowDown", "InternalError", "RequestTimeout", "ServiceUnavailable",
	"Throttling", "ThrottlingException", NULL,
};

/* Write-path codes with their own errno: a corrupted body, and requests
 * that are wrong however often they are sent. */
static const char *const digest_codes[] = {
	"BadDigest", "InvalidDigest", NULL,
};
static const char *const bad_request_codes[] = {
	"InvalidPart", "InvalidPartOrder", "EntityTooSmall", "EntityTooLarge",
	"MalformedXML", "InvalidArgument", "InvalidRequest", NULL,
};

static bool op_writes(enum s3_op op)
{
	return op == S3_PUT_OBJECT || op == S3_UPLOAD_PART ||
	       op == S3_CREATE_MULTIPART || op == S3_COMPLETE_MULTIPART ||
	       op == S3_COPY_OBJECT;
}

static bool curl_code_retryable(CURLcode code)
{
	switch (code) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_WRITE_ERROR:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

static void classify_curl_error(const struct s3_req *r, CURLcode code,
				struct s3_result *out)
{
	out->err = -EIO;
	switch (r->abort) {
	case ABORT_SINK:
		out->retryable = true;
		snprintf(out->message, sizeof(out->message),
			 "transfer aborted by the receiver");
		return;
	case ABORT_OVERRUN:
		out->err = -EPROTO; /* a server that ignores ranges: no retry */
		snprintf(out->message, sizeof(out->message),
			 "server sent more than the %" PRIu64 " bytes asked for",
			 r->range_len);
		return;
	case ABORT_BAD_RANGE:
		out->err = -EPROTO;
		snprintf(out->message, sizeof(out->message),
			 "server answered a different range than bytes=%" PRIu64 "-",
			 r->range_off);
		return;
	case ABORT_TOO_LARGE:
		out->err = -EPROTO;
		snprintf(out->message, sizeof(out->message),
			 "response body larger than %zu bytes", body_cap(r));
		return;
	case ABORT_NOMEM:
		out->err = -ENOMEM;
		snprintf(out->message, sizeof(out->message),
			 "out of memory receiving the response");
		return;
	case ABORT_NONE:
		break;
	}
	out->retryable = curl_code_retryable(code);
	snprintf(out->message, sizeof(out->message), "%s",
		 r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
}

/* The body length a 2xx GET must have delivered, or false if unknown. */
static bool expected_get_length(const struct s3_req *r, uint64_t *want)
{
	if (r->status == 206 && r->have_range) {
		uint64_t n = r->range_last - r->range_first + 1;
		if (r->range_len && n > r->range_len)
			n = r->range_len;
		*want = n;
		return true;
	}
	if (r->have_length) {
		*want = r->content_length;
		return true;
	}
	return false;
}

static void protocol_error(struct s3_result *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void protocol_error(struct s3_result *out, const char *fmt, ...)
{
	va_list ap;
	out->err = -EPROTO;
	out->retryable = false;
	va_start(ap, fmt);
	vsnprintf(out->message, sizeof(out->message), fmt, ap);
	va_end(ap);
}

/* A 206 must describe exactly the range asked for (clamped at the end of
 * the object it names) and agree with its own Content-Length: the bytes
 * go to a cache slot sized from that range. */
static bool range_reply_ok(const struct s3_req *r, struct s3_result *out)
{
	if (!r->have_range) {
		protocol_error(out, "206 without a usable Content-Range");
		return false;
	}
	if (!r->range_total_known || r->range_total == 0) {
		protocol_error(out, "Content-Range without the object's size");
		return false;
	}
	uint64_t last = r->range_off + r->range_len - 1;
	if (last >= r->range_total)
		last = r->range_total - 1;
	if (r->range_first != r->range_off || r->range_last != last) {
		protocol_error(out, "Content-Range bytes %" PRIu64 "-%" PRIu64
			       "/%" PRIu64 " for a request of bytes=%" PRIu64
			       "-%" PRIu64, r->range_first, r->range_last,
			       r->range_total, r->range_off,
			       r->range_off + r->range_len - 1);
		return false;
	}
	if (r->have_length && r->content_length != last - r->range_first + 1) {
		protocol_error(out, "Content-Length %" PRIu64 " disagrees with "
			       "Content-Range bytes %" PRIu64 "-%" PRIu64,
			       r->content_length, r->range_first, r->range_last);
		return false;
	}
	return true;
}

static void classify_success(const struct s3_req *r, struct s3_result *out)
{
	uint64_t want;

	if ((r->op == S3_HEAD_OBJECT || r->op == S3_GET_OBJECT) &&
	    r->etag_too_long) {
		protocol_error(out, "ETag longer than %zu bytes",
			       sizeof(r->etag) - 1);
		return;
	}
	if (r->op == S3_HEAD_OBJECT) {
		if (!r->have_length)
			protocol_error(out, "HEAD without a Content-Length");
		out->object_size = r->content_length;
	}
	if (r->op != S3_GET_OBJECT)
		return;
	out->object_size = r->status == 206 && r->range_total_known ?
		r->range_total : r->content_length;
	if (r->range_len && r->status == 206 && !range_reply_ok(r, out))
		return;
	if (r->range_len && r->status != 206 && r->have_length &&
	    r->content_length > r->range_len) {
		protocol_error(out, "%" PRIu64 " bytes for a range of %" PRIu64,
			       r->content_length, r->range_len);
		return;
	}
	/* What the server promised (Content-Range or Content-Length) must
	 * all have arrived; less is a cut connection, worth a retry. */
	if (expected_get_length(r, &want) && r->body_bytes > want) {
		protocol_error(out, "%" PRIu64 " body bytes where %" PRIu64
			       " were promised", r->body_bytes, want);
		return;
	}
	if (expected_get_length(r, &want) && r->body_bytes != want) {
		out->err = -EIO;
		out->retryable = true;
		snprintf(out->message, sizeof(out->message),
			 "short body: %" PRIu64 " of %" PRIu64 " bytes",
			 r->body_bytes, want);
	}
}

static void classify_status(enum s3_op op, long status, struct s3_result *out)
{
	const char *code = out->code;

	if (op_writes(op) && code_is(code, digest_codes)) {
		out->err = -EBADMSG;
	} else if (op_writes(op) && code_is(code, bad_request_codes)) {
		out->err = -EINVAL;
	} else if (status == 404) {
		out->err = -ENOENT;
	} else if ((status == 403 || status == 400) && code_is(code, auth_codes)) {
		out->err = -EKEYREJECTED;
	} else if (status == 403) {
		out->err = -EPERM;
	} else if (status == 412) {
		out->err = -ESTALE;
	} else if (status == 416) {
		out->err = -ERANGE;
	} else {
		out->err = -EIO;
		out->retryable = status == 500 || status == 502 ||
				 status == 503 || status == 504 ||
				 status == 429 || code_is(code, retry_codes);
	}
}

/* Code and message from the error body; the status alone when there is
 * none (HEAD) or it is not S3 XML (a proxy's HTML page). */
static void fill_error_text(const struct s3_req *r, struct s3_result *out)
{
	char msg[sizeof(out->message)] = "";

	if (r->buf_len == 0) {
		snprintf(out->message, sizeof(out->message), "HTTP %ld", r->status);
		return;
	}
	if (s3_parse_error(r->buf, r->buf_len, out->code, sizeof(out->code),
			   msg, sizeof(msg)) < 0) {
		out->code[0] = '\0';
		snprintf(out->message, sizeof(out->message),
			 "HTTP %ld with a malformed error body", r->status);
		return;
	}
	snprintf(out->message, sizeof(out->message), "%s", msg);
}

const char *s3_result_reason(const struct s3_result *r, char *buf, size_t len)
{
	char status[32] = "";
	if (r->http_status)
		snprintf(status, sizeof(status), "HTTP %ld", r->http_status);
	const char *msg = r->message;
	/* fill_error_text's stand-ins say nothing the status does not. */
	if (!strcmp(msg, status) || !strcmp(msg, r->code))
		msg = "";
	if (r->code[0] && msg[0])
		snprintf(buf, len, "%s: %s (%s)", rc_esc(r->code), rc_esc(msg),
			 status[0] ? status : "no response");
	else if (r->code[0] || msg[0])
		snprintf(buf, len, "%s%s%s%s", rc_esc(r->code[0] ? r->code : msg),
			 status[0] ? " (" : "", status, status[0] ? ")" : "");
	else
		snprintf(buf, len, "%s", status[0] ? status : "no response");
	return buf;
}

/* CompleteMultipartUpload and CopyObject send 200 before they finish and
 * report a late failure as an <Error> document in that 200. True (code
 * and message filled) when this body is one. */
static bool error_in_200(const struct s3_req *r, struct s3_result *out)
{
	char msg[sizeof(out->message) - 32] = "";

	if ((r->op != S3_COMPLETE_MULTIPART && r->op != S3_COPY_OBJECT) ||
	    r->buf_len == 0)
		return false;
	if (s3_parse_error(r->buf, r->buf_len, out->code, sizeof(out->code),
			   msg, sizeof(msg)) < 0 || !out->code[0]) {
		out->code[0] = '\0';
		return false;
	}
	snprintf(out->message, sizeof(out->message), "%s (in a 200 response)",
		 msg[0] ? msg : out->code);
	return true;
}

void s3_req_result(struct s3_req *r, CURLcode code, struct s3_result *out)
{
	memset(out, 0, sizeof(*out));
	out->curl_code = code;
	out->body_bytes = r->body_bytes;
	out->content_length = r->content_length;
	snprintf(out->etag, sizeof(out->etag), "%s", r->etag);
	if (curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE,
			      &out->http_status) != CURLE_OK)
		out->http_status = r->status;

	if (code != CURLE_OK) {
		classify_curl_error(r, code, out);
		return;
	}
	if (is_2xx(out->http_status) && !error_in_200(r, out)) {
		classify_success(r, out);
		return;
	}
	if (!out->code[0])
		fill_error_text(r, out);
	classify_status(r->op, out->http_status, out);
}

/* ---- blocking loop and backoff ------------------------------------------ */

/* xorshift64*, one state per thread: jitter needs spread, not secrecy. */
static uint64_t jitter_random(void)
{
	static __thread uint64_t state;
	if (!state) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
			((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&state;
		if (!state)
			state = 0x9e3779b97f4a7c15ULL;
	}
	state ^= state >> 12;
	state ^= state << 25;
	state ^= state >> 27;
	return state * 0x2545f4914f6cdd1dULL;
}

/* Full jitter (uniform in [0, min(cap, base * 2^(attempt-1))]): clients
 * that failed together spread out instead of retrying in lockstep. */
unsigned s3_backoff_ms(const struct s3_client *c, unsigned attempt)
{
	uint64_t cap = c->cfg.backoff_cap_ms, ceiling = c->cfg.backoff_base_ms;

	if (attempt == 0)
		attempt = 1;
	for (unsigned i = 1; i < attempt && ceiling < cap; i++)
		ceiling *= 2;
	if (ceiling > cap)
		ceiling = cap;
	return (unsigned)(jitter_random() % (ceiling + 1));
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void take_body(const struct s3_req *r, char **body_out, size_t *body_len)
{
	if (!body_out)
		return;
	free(*body_out);
	*body_out = malloc(r->buf_len + 1);
	if (!*body_out)
		return;
	memcpy(*body_out, r->buf ? r->buf : "", r->buf_len);
	(*body_out)[r->buf_len] = '\0';
	if (body_len)
		*body_len = r->buf_len;
}

int s3_perform(struct s3_client *c, const struct s3_req_params *p,
	       struct s3_result *res, char **body_out, size_t *body_len)
{
	if (body_out)
		*body_out = NULL;
	if (body_len)
		*body_len = 0;
	for (unsigned attempt = 0;; attempt++) {
		char err[256] = "";
		struct s3_req *r = s3_req_new(c, p, err, sizeof(err));
		if (!r) {
			memset(res, 0, sizeof(*res));
			res->err = errno ? -errno : -EINVAL;
			snprintf(res->message, sizeof(res->message), "%s", err);
			return res->err;
		}
		CURLcode code = curl_easy_perform(r->easy);
		s3_req_result(r, code, res);
		take_body(r, body_out, body_len);
		s3_req_free(r);
		if (!res->retryable || attempt >= c->cfg.max_retries)
			return res->err;
		sleep_ms(s3_backoff_ms(c, attempt + 1));
	}
}

/* ---- XML ---------------------------------------------------------------- */

/* Shared by both parsers: the element stack (local names, namespace
 * stripped) and the text of the innermost element being collected. */
#define XML_MAX_DEPTH 16

struct xml_ctx {
	XML_Parser parser;
	int depth;
	const char *stack[XML_MAX_DEPTH]; /* only names we match on */
	char *text;
	size_t text_len, text_cap;
	bool collecting;
	char err[160];
	const char *root;      /* required root element */
	void (*on_end)(struct xml_ctx *x, const char *name);
	void *user;
};

static void xml_fail(struct xml_ctx *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void xml_fail(struct xml_ctx *x, const char *fmt, ...)
{
	if (x->err[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->err, sizeof(x->err), fmt, ap);
	va_end(ap);
	XML_StopParser(x->parser, XML_FALSE);
}

/* With XML_ParserCreateNS names arrive as "URI|local": keep the local part. */
static const char *local_name(const char *name)
{
	const char *bar = strrchr(name, '|');
	return bar ? bar + 1 : name;
}

static const char *const known_names[] = {
	"ListBucketResult", "Contents", "CommonPrefixes", "Key", "Size",
	"ETag", "Prefix", "IsTruncated", "NextContinuationToken", "KeyCount",
	"Error", "Code", "Message",
	"InitiateMultipartUploadResult", "UploadId", "Bucket",
	"CompleteMultipartUploadResult", "Location", "CopyObjectResult",
	"LastModified", "ListMultipartUploadsResult", "Upload", "Initiated",
	"NextKeyMarker", "NextUploadIdMarker", NULL,
};

static const char *intern_name(const char *name)
{
	for (const char *const *k = known_names; *k; k++)
		if (strcmp(*k, name) == 0)
			return *k;
	return "";
}

static void XMLCALL xml_start(void *userp, const XML_Char *name,
			      const XML_Char **attrs)
{
	struct xml_ctx *x = userp;
	(void)attrs;
	const char *local = local_name(name);

	if (x->depth == 0 && strcmp(local, x->root) != 0) {
		xml_fail(x, "root element is <%.40s>, expected <%s>", local, x->root);
		return;
	}
	if (x->depth >= XML_MAX_DEPTH) {
		xml_fail(x, "elements nested deeper than %d", XML_MAX_DEPTH);
		return;
	}
	x->stack[x->depth++] = intern_name(local);
	x->text_len = 0;
	x->collecting = true;
}

static void XMLCALL xml_end(void *userp, const XML_Char *name)
{
	struct xml_ctx *x = userp;

	if (x->text)
		x->text[x->text_len] = '\0';
	x->on_end(x, local_name(name));
	x->depth--;
	x->collecting = false;
	x->text_len = 0;
}

static void XMLCALL xml_text(void *userp, const XML_Char *s, int len)
{
	struct xml_ctx *x = userp;

	if (!x->collecting || len <= 0)
		return;
	if (x->text_len + (size_t)len + 1 > XML_TEXT_CAP) {
		xml_fail(x, "element text longer than %u bytes", XML_TEXT_CAP);
		return;
	}
	if (x->text_len + (size_t)len + 1 > x->text_cap) {
		size_t want = x->text_cap ? x->text_cap : 256;
		while (want < x->text_len + (size_t)len + 1)
			want *= 2;
		char *nt = realloc(x->text, want);
		if (!nt) {
			xml_fail(x, "out of memory");
			return;
		}
		x->text = nt;
		x->text_cap = want;
	}
	memcpy(x->text + x->text_len, s, (size_t)len);
	x->text_len += (size_t)len;
}

/* S3 never sends a DTD; refusing one closes off entity expansion tricks. */
static void XMLCALL xml_doctype(void *userp, const XML_Char *name,
				const XML_Char *sysid, const XML_Char *pubid,
				int has_internal_subset)
{
	(void)name;
	(void)sysid;
	(void)pubid;
	(void)has_internal_subset;
	xml_fail(userp, "DOCTYPE not allowed");
}

static const char *xml_text_of(const struct xml_ctx *x)
{
	return x->text ? x->text : "";
}

/* True if the stack (below the element now closing) is exactly path. */
static bool xml_at(const struct xml_ctx *x, int n, ...)
{
	if (x->depth != n)
		return false;
	va_list ap;
	va_start(ap, n);
	bool match = true;
	for (int i = 0; i < n; i++)
		if (strcmp(x->stack[i], va_arg(ap, const char *)) != 0)
			match = false;
	va_end(ap);
	return match;
}

static int xml_run(struct xml_ctx *x, const char *doc, size_t len,
		   char *err, size_t errlen)
{
	int rc = 0;

	if (!doc || len == 0 || len > INT32_MAX) {
		rc_set_err(err, errlen, "empty XML document");
		return -EPROTO;
	}
	x->parser = XML_ParserCreateNS(NULL, '|');
	if (!x->parser) {
		rc_set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	XML_SetUserData(x->parser, x);
	XML_SetElementHandler(x->parser, xml_start, xml_end);
	XML_SetCharacterDataHandler(x->parser, xml_text);
	XML_SetStartDoctypeDeclHandler(x->parser, xml_doctype);
	if (XML_Parse(x->parser, doc, (int)len, XML_TRUE) != XML_STATUS_OK) {
		if (!x->err[0])
			snprintf(x->err, sizeof(x->err), "%s at line %lu column %lu",
				 XML_ErrorString(XML_GetErrorCode(x->parser)),
				 (unsigned long)XML_GetCurrentLineNumber(x->parser),
				 (unsigned long)XML_GetCurrentColumnNumber(x->parser));
		rc_set_err(err, errlen, "malformed XML: %s", x->err);
		rc = -EPROTO;
	} else if (x->err[0]) {
		rc_set_err(err, errlen, "malformed XML: %s", x->err);
		rc = -EPROTO;
	}
	XML_ParserFree(x->parser);
	free(x->text);
	x->text = NULL;
	return rc;
}

/* -- ListBucketResult -- */

struct list_state {
	struct s3_list_page *page;
	struct s3_list_object cur;   /* the <Contents> being read */
	bool cur_has_key, cur_has_size;
	bool saw_truncated;
	size_t obj_cap, pfx_cap;
};

static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return true;
	size_t want = *cap ? *cap * 2 : 64;
	void *na = realloc(*arr, want * elem);
	if (!na)
		return false;
	*arr = na;
	*cap = want;
	return true;
}

static void list_end_contents(struct xml_ctx *x, struct list_state *st)
{
	struct s3_list_page *pg = st->page;

	if (!st->cur_has_key || !st->cur_has_size) {
		xml_fail(x, "<Contents> without %s",
			 st->cur_has_key ? "<Size>" : "<Key>");
		return;
	}
	if (!grow((void **)&pg->objects, &st->obj_cap, pg->n_objects,
		  sizeof(*pg->objects))) {
		xml_fail(x, "out of memory");
		return;
	}
	pg->objects[pg->n_objects++] = st->cur;
	memset(&st->cur, 0, sizeof(st->cur));
	st->cur_has_key = st->cur_has_size = false;
}

static void list_add_prefix(struct xml_ctx *x, struct list_state *st)
{
	struct s3_list_page *pg = st->page;
	char *p = strdup(xml_text_of(x));

	if (!p || !grow((void **)&pg->prefixes, &st->pfx_cap, pg->n_prefixes,
			sizeof(*pg->prefixes))) {
		free(p);
		xml_fail(x, "out of memory");
		return;
	}
	pg->prefixes[pg->n_prefixes++] = p;
}

static void list_contents_field(struct xml_ctx *x, struct list_state *st,
				const char *name)
{
	const char *t = xml_text_of(x);

	if (strcmp(name, "Key") == 0) {
		free(st->cur.key);
		st->cur.key = strdup(t);
		if (!st->cur.key)
			xml_fail(x, "out of memory");
		st->cur_has_key = true;
	} else if (strcmp(name, "Size") == 0) {
		if (!parse_u64(t, strlen(t), &st->cur.size))
			xml_fail(x, "<Size> '%.32s' is not a number", t);
		st->cur_has_size = true;
	} else if (strcmp(name, "ETag") == 0) {
		if (strlen(t) >= sizeof(st->cur.etag))
			xml_fail(x, "<ETag> longer than %zu bytes",
				 sizeof(st->cur.etag) - 1);
		else
			snprintf(st->cur.etag, sizeof(st->cur.etag), "%s", t);
	}
}

static void list_top_field(struct xml_ctx *x, struct list_state *st,
			   const char *name)
{
	const char *t = xml_text_of(x);

	if (strcmp(name, "IsTruncated") == 0) {
		if (strcmp(t, "true") == 0)
			st->page->truncated = true;
		else if (strcmp(t, "false") == 0)
			st->page->truncated = false;
		else
			xml_fail(x, "<IsTruncated> '%.16s' is not true/false", t);
		st->saw_truncated = true;
	} else if (strcmp(name, "NextContinuationToken") == 0) {
		free(st->page->next_token);
		st->page->next_token = strdup(t);
		if (!st->page->next_token)
			xml_fail(x, "out of memory");
	} else if (strcmp(name, "KeyCount") == 0) {
		uint64_t n;
		if (!parse_u64(t, strlen(t), &n))
			xml_fail(x, "<KeyCount> '%.32s' is not a number", t);
	} else if (strcmp(name, "Contents") == 0) {
		list_end_contents(x, st);
	}
}

static void list_on_end(struct xml_ctx *x, const char *name)
{
	struct list_state *st = x->user;

	/* depth counts the closing element itself. */
	if (xml_at(x, 2, "ListBucketResult", intern_name(name)))
		list_top_field(x, st, name);
	else if (xml_at(x, 3, "ListBucketResult", "Contents", intern_name(name)))
		list_contents_field(x, st, name);
	else if (xml_at(x, 3, "ListBucketResult", "CommonPrefixes", "Prefix"))
		list_add_prefix(x, st);
}

int s3_parse_list(const char *xml, size_t len, struct s3_list_page *page,
		  char *err, size_t errlen)
{
	struct list_state st = { .page = page };
	struct xml_ctx x = { .root = "ListBucketResult", .on_end = list_on_end,
			     .user = &st };

	memset(page, 0, sizeof(*page));
	int rc = xml_run(&x, xml, len, err, errlen);
	free(st.cur.key);
	if (rc == 0 && page->truncated &&
	    (!page->next_token || !page->next_token[0])) {
		rc_set_err(err, errlen,
			"malformed XML: truncated listing without NextContinuationToken");
		rc = -EPROTO;
	}
	if (rc < 0)
		s3_list_page_free(page);
	return rc;
}

void s3_list_page_free(struct s3_list_page *page)
{
	if (!page)
		return;
	for (size_t i = 0; i < page->n_objects; i++)
		free(page->objects[i].key);
	free(page->objects);
	for (size_t i = 0; i < page->n_prefixes; i++)
		free(page->prefixes[i]);
	free(page->prefixes);
	free(page->next_token);
	memset(page, 0, sizeof(*page));
}

/* -- Error -- */

struct error_state {
	char *code, *msg;
	size_t codelen, msglen;
};

static void error_on_end(struct xml_ctx *x, const char *name)
{
	struct error_state *st = x->user;
	const char *t = xml_text_of(x);

	if (xml_at(x, 2, "Error", "Code") && strcmp(name, "Code") == 0)
		copy_str(st->code, st->codelen, t, strlen(t));
	else if (xml_at(x, 2, "Error", "Message") && strcmp(name, "Message") == 0)
		copy_str(st->msg, st->msglen, t, strlen(t));
}

int s3_parse_error(const char *xml, size_t len, char *code, size_t codelen,
		   char *msg, size_t msglen)
{
	struct error_state st = { code, msg, codelen, msglen };
	struct xml_ctx x = { .root = "Error", .on_end = error_on_end, .user = &st };

	if (codelen)
		code[0] = '\0';
	if (msglen)
		msg[0] = '\0';
	return xml_run(&x, xml, len, NULL, 0);
}

/* -- one-value results: InitiateMultipartUpload, Complete, Copy -- */

struct field_state {
	const char *root, *field;
	char *buf;
	size_t buflen;
	bool seen;
	bool too_long;
};

static void field_on_end(struct xml_ctx *x, const char *name)
{
	struct field_state *st = x->user;
	const char *t = xml_text_of(x);

	if (!xml_at(x, 2, st->root, intern_name(name)) ||
	    strcmp(name, st->field) != 0)
		return;
	st->seen = true;
	if (strlen(t) >= st->buflen)
		xml_fail(x, "<%s> longer than %zu bytes", st->field, st->buflen - 1);
	else
		copy_str(st->buf, st->buflen, t, strlen(t));
}

/* The text of root/field; -EPROTO if the document has another root or,
 * when required, lacks the field. */
static int parse_field(const char *xml, size_t len, const char *root,
		       const char *field, bool required, char *buf,
		       size_t buflen, char *err, size_t errlen)
{
	struct field_state st = { .root = root, .field = field, .buf = buf,
				  .buflen = buflen };
	struct xml_ctx x = { .root = root, .on_end = field_on_end, .user = &st };

	if (buflen)
		buf[0] = '\0';
	int rc = xml_run(&x, xml, len, err, errlen);
	if (rc == 0 && required && !st.seen) {
		rc_set_err(err, errlen, "malformed XML: <%s> without <%s>", root, field);
		rc = -EPROTO;
	}
	return rc;
}

int s3_parse_upload_id(const char *xml, size_t len, char *buf, size_t buflen,
		       char *err, size_t errlen)
{
	int rc = parse_field(xml, len, "InitiateMultipartUploadResult",
			     "UploadId", true, buf, buflen, err, errlen);
	if (rc == 0 && !buf[0]) {
		rc_set_err(err, errlen, "malformed XML: empty <UploadId>");
		rc = -EPROTO;
	}
	return rc;
}

/* ETags compare with the header's form, quotes included; RGW's bodies
 * leave them out. */
static void quote_etag(char *etag, size_t etaglen)
{
	size_t n = strlen(etag);

	if (n == 0 || etag[0] == '"' || n + 3 > etaglen)
		return;
	memmove(etag + 1, etag, n);
	etag[0] = '"';
	etag[n + 1] = '"';
	etag[n + 2] = '\0';
}

int s3_parse_complete(const char *xml, size_t len, char *etag,
		      size_t etaglen, char *err, size_t errlen)
{
	int rc = parse_field(xml, len, "CompleteMultipartUploadResult", "ETag",
			     false, etag, etaglen, err, errlen);
	if (rc == 0)
		quote_etag(etag, etaglen);
	return rc;
}

int s3_parse_copy_result(const char *xml, size_t len, char *etag,
			 size_t etaglen, char *err, size_t errlen)
{
	int rc = parse_field(xml, len, "CopyObjectResult", "ETag", true, etag,
			     etaglen, err, errlen);
	if (rc == 0)
		quote_etag(etag, etaglen);
	return rc;
}

/* -- ListMultipartUploadsResult -- */

struct uploads_state {
	struct s3_upload_page *page;
	struct s3_upload cur;        /* the <Upload> being read */
	size_t cap;
};

static char *replace_str(struct xml_ctx *x, char *old)
{
	char *s = strdup(xml_text_of(x));
	free(old);
	if (!s)
		xml_fail(x, "out of memory");
	return s;
}

static void uploads_end_upload(struct xml_ctx *x, struct uploads_state *st)
{
	struct s3_upload_page *pg = st->page;

	if (!st->cur.key || !st->cur.upload_id) {
		xml_fail(x, "<Upload> without %s", st->cur.key ? "<UploadId>" : "<Key>");
		return;
	}
	if (!grow((void **)&pg->uploads, &st->cap, pg->n_uploads,
		  sizeof(*pg->uploads))) {
		xml_fail(x, "out of memory");
		return;
	}
	pg->uploads[pg->n_uploads++] = st->cur;
	memset(&st->cur, 0, sizeof(st->cur));
}

static void uploads_top_field(struct xml_ctx *x, struct uploads_state *st,
			      const char *name)
{
	const char *t = xml_text_of(x);

	if (strcmp(name, "IsTruncated") == 0) {
		if (strcmp(t, "true") != 0 && strcmp(t, "false") != 0)
			xml_fail(x, "<IsTruncated> '%.16s' is not true/false", t);
		st->page->truncated = strcmp(t, "true") == 0;
	} else if (strcmp(name, "NextKeyMarker") == 0) {
		st->page->next_key_marker = replace_str(x, st->page->next_key_marker);
	} else if (strcmp(name, "NextUploadIdMarker") == 0) {
		st->page->next_upload_id_marker =
			replace_str(x, st->page->next_upload_id_marker);
	} else if (strcmp(name, "Upload") == 0) {
		uploads_end_upload(x, st);
	}
}

static void uploads_on_end(struct xml_ctx *x, const char *name)
{
	struct uploads_state *st = x->user;
	const char *in = intern_name(name);

	if (xml_at(x, 2, "ListMultipartUploadsResult", in)) {
		uploads_top_field(x, st, name);
	} else if (xml_at(x, 3, "ListMultipartUploadsResult", "Upload", in)) {
		if (strcmp(name, "Key") == 0)
			st->cur.key = replace_str(x, st->cur.key);
		else if (strcmp(name, "UploadId") == 0)
			st->cur.upload_id = replace_str(x, st->cur.upload_id);
		else if (strcmp(name, "Initiated") == 0)
			copy_str(st->cur.initiated, sizeof(st->cur.initiated),
				 xml_text_of(x), strlen(xml_text_of(x)));
	}
}

int s3_parse_uploads(const char *xml, size_t len, struct s3_upload_page *page,
		     char *err, size_t errlen)
{
	struct uploads_state st = { .page = page };
	struct xml_ctx x = { .root = "ListMultipartUploadsResult",
			     .on_end = uploads_on_end, .user = &st };

	memset(page, 0, sizeof(*page));
	int rc = xml_run(&x, xml, len, err, errlen);
	free(st.cur.key);
	free(st.cur.upload_id);
	if (rc == 0 && page->truncated &&
	    (!page->next_key_marker || !page->next_key_marker[0])) {
		rc_set_err(err, errlen,
			"malformed XML: truncated listing without NextKeyMarker");
		rc = -EPROTO;
	}
	if (rc < 0)
		s3_upload_page_free(page);
	return rc;
}

void s3_upload_page_free(struct s3_upload_page *page)
{
	if (!page)
		return;
	for (size_t i = 0; i < page->n_uploads; i++) {
		free(page->uploads[i].key);
		free(page->uploads[i].upload_id);
	}
	free(page->uploads);
	free(page->next_key_marker);
	free(page->next_upload_id_marker);
	memset(page, 0, sizeof(*page));
}

/* ---- checksums ---------------------------------------------------------- */

void s3_content_md5(const void *data, size_t len, char out[25])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (EVP_Digest(data ? data : "", len, md, &n, EVP_md5(), NULL) != 1 ||
	    n != 16) {
		out[0] = '\0'; /* no MD5 (FIPS): the server will refuse, clearly */
		return;
	}
	EVP_EncodeBlock((unsigned char *)out, md, 16);
}

void s3_crc32c_b64(uint32_t crc, char out[9])
{
	unsigned char be[4] = { (unsigned char)(crc >> 24), (unsigned char)(crc >> 16),
				(unsigned char)(crc >> 8), (unsigned char)crc };

	EVP_EncodeBlock((unsigned char *)out, be, 4);
}
