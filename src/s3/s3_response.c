/* s3_response.c - owns response capture (s3_response.h): the status line,
 * ETag, Content-Length and Content-Range of each response, the body into
 * the caller's sink or a capped buffer, and the PUT body fed to curl. */
#include "s3_response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "decimal.h"
#include "vec.h"

#define S3_ERROR_BODY_CAP (64u << 10)   /* error documents are small */
#define S3_LIST_BODY_CAP (16u << 20)    /* one ListObjectsV2 page */
#define S3_SMALL_BODY_CAP (64u << 10)   /* PUT/DELETE/bucket replies */
#define S3_GET_MEM_CAP (1u << 30)       /* GET collected in memory */


static void reset_response(struct s3_req *r)
{
	r->status = 0;
	r->etag[0] = '\0';
	r->upload_token[0] = '\0';
	r->etag_too_long = false;
	r->have_length = r->have_range = r->range_total_known = false;
	r->content_length = 0;
	r->range_first = r->range_last = r->range_total = 0;
	r->body_bytes = 0;
	r->buf_len = 0;
	if (r->buf)
		r->buf[0] = '\0';
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
	if (rc_parse_dec_u64(slash + 1, tail, &total)) {
		r->range_total = total;
		r->range_total_known = true;
	}
	const char *dash = memchr(v, '-', span);
	if (!dash)
		return;
	if (rc_parse_dec_u64(v, (size_t)(dash - v), &r->range_first) &&
	    rc_parse_dec_u64(dash + 1, span - (size_t)(dash - v) - 1, &r->range_last) &&
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
	if (rest >= 3 && rc_parse_dec_u64(sp + 1, 3, &code))
		r->status = (long)code;
}

size_t s3_resp_on_header(char *data, size_t size, size_t nitems, void *userp)
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
		snprintf(r->etag, sizeof(r->etag), "%.*s", (int)vlen, v);
	}
	else if (nlen == 14 && strncasecmp(data, "content-length", 14) == 0)
		r->have_length = rc_parse_dec_u64(v, vlen, &r->content_length);
	else if (nlen == 13 && strncasecmp(data, "content-range", 13) == 0)
		parse_content_range(r, v, vlen);
	else if (nlen == sizeof(S3_META_UPLOAD) - 1 &&
		 strncasecmp(data, S3_META_UPLOAD, nlen) == 0 &&
		 vlen == S3_UPLOAD_TOKEN_LEN)
		snprintf(r->upload_token, sizeof(r->upload_token), "%.*s",
			 (int)vlen, v);
	return n;
}

size_t s3_resp_body_cap(const struct s3_req *r)
{
	if (!s3_is_2xx(r->status))
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
	size_t cap = s3_resp_body_cap(r);
	if (r->buf_len + n > cap) {
		if (!s3_is_2xx(r->status)) {
			n = cap > r->buf_len ? cap - r->buf_len : 0;
			if (!n)
				return 0;
		} else {
			r->abort = ABORT_TOO_LARGE;
			return -1;
		}
	}
	if (RC_GROW(r->buf, r->buf_cap, (uint64_t)r->buf_len + n + 1)) {
		r->abort = ABORT_NOMEM;
		return -1;
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

size_t s3_resp_on_body(char *data, size_t size, size_t nmemb, void *userp)
{
	struct s3_req *r = userp;
	size_t n = size * nmemb;

	if (r->sink && s3_is_2xx(r->status)) {
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

/* A body in pieces: copies from the cursor on, moving it. */
static size_t read_pieces(struct s3_req *r, char *dst, size_t room)
{
	size_t n = 0;
	while (n < room && r->piece < r->n_pieces) {
		const struct s3_piece *pc = &r->pieces[r->piece];
		size_t left = pc->len - r->piece_pos;
		size_t take = left < room - n ? left : room - n;
		if (take)
			memcpy(dst + n, (const char *)pc->data + r->piece_pos, take);
		n += take;
		r->piece_pos += take;
		if (r->piece_pos == pc->len) {
			r->piece++;
			r->piece_pos = 0;
		}
	}
	return n;
}

size_t s3_resp_on_read(char *dst, size_t size, size_t nitems, void *userp)
{
	struct s3_req *r = userp;
	size_t room = size * nitems, left = r->body_len - r->body_pos;
	size_t n = left < room ? left : room;

	if (r->pieces)
		n = read_pieces(r, dst, n);
	else if (n)
		memcpy(dst, r->body + r->body_pos, n);
	r->body_pos += n;
	return n;
}

int s3_resp_on_seek(void *userp, curl_off_t offset, int origin)
{
	struct s3_req *r = userp;

	if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > r->body_len)
		return CURL_SEEKFUNC_FAIL;
	r->body_pos = (size_t)offset;
	if (r->pieces) { /* a retry or a redirect rewinds: find the piece */
		size_t at = r->body_pos;
		r->piece = 0;
		while (r->piece < r->n_pieces && at >= r->pieces[r->piece].len) {
			at -= r->pieces[r->piece].len;
			r->piece++;
		}
		r->piece_pos = at;
	}
	return CURL_SEEKFUNC_OK;
}

