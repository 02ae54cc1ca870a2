/* s3_request.c - owns building a request (s3_request.h): the signed
 * headers (SigV4 with the provider's current credentials), the bodies of
 * Complete and CreateBucket, and the easy handle's method, callbacks
 * (s3_response.c) and transport options. */
#include "s3_private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "creds.h"
#include "log.h"
#include "s3_checksum.h"
#include "s3_op.h"
#include "s3_query.h"
#include "s3_request.h"
#include "s3_response.h"
#include "sigv4.h"

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
	char copy_range[64];
	char md5[25];
};

/* The MD5 of the request's body, whole or in pieces (s3_md5). */
static int body_md5(const struct s3_req *r, unsigned char md5[16])
{
	if (r->pieces)
		return s3_md5_pieces(r->pieces, r->n_pieces, md5);
	return s3_md5(r->body, r->body_len, md5);
}

/* XML text: the five characters XML reserves, escaped. */
static int add_write_headers(struct s3_req *r, const struct s3_req_params *p,
			     struct signed_headers *sh)
{
	unsigned char md5[16];

	if (s3_op_sends_body(p->op) && (p->content_md5 || p->content_md5_value ||
				     p->op == S3_UPLOAD_PART)) {
		if (p->content_md5_value)
			snprintf(sh->md5, sizeof(sh->md5), "%s", p->content_md5_value);
		else
			s3_md5_b64(md5, body_md5(r, md5) == 0, sh->md5);
		sh->h[sh->n++] = (struct sigv4_header){ "Content-MD5", sh->md5 };
	}
	if (s3_op_sends_body(p->op) && p->checksum_crc32c)
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-checksum-crc32c",
							p->checksum_crc32c };
	if (p->op == S3_CREATE_MULTIPART && p->checksum_crc32c)
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-checksum-algorithm",
							"CRC32C" };
	if (p->meta_daemon &&
	    (p->op == S3_PUT_OBJECT || p->op == S3_CREATE_MULTIPART))
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-meta-ringcache-daemon",
							p->meta_daemon };
	if (p->meta_upload &&
	    (p->op == S3_PUT_OBJECT || p->op == S3_CREATE_MULTIPART))
		sh->h[sh->n++] = (struct sigv4_header){ S3_META_UPLOAD,
							p->meta_upload };
	if (p->if_none_match &&
	    (p->op == S3_PUT_OBJECT || p->op == S3_COMPLETE_MULTIPART ||
	     p->op == S3_COPY_OBJECT))
		sh->h[sh->n++] = (struct sigv4_header){ "If-None-Match", "*" };
	if (p->op == S3_COPY_OBJECT || p->op == S3_UPLOAD_PART_COPY) {
		r->copy_source = s3_uri_encode(p->copy_source, 1);
		if (!r->copy_source)
			return -1;
		sh->h[sh->n++] = (struct sigv4_header){ "x-amz-copy-source",
							r->copy_source };
		if (p->copy_source_if_match)
			sh->h[sh->n++] = (struct sigv4_header){
				"x-amz-copy-source-if-match",
				p->copy_source_if_match };
	}
	if (p->op == S3_UPLOAD_PART_COPY) {
		snprintf(sh->copy_range, sizeof(sh->copy_range),
			 "bytes=%" PRIu64 "-%" PRIu64, p->copy_range_off,
			 p->copy_range_off + p->copy_range_len - 1);
		sh->h[sh->n++] = (struct sigv4_header){
			"x-amz-copy-source-range", sh->copy_range };
	}
	return 0;
}

static int prepare_body(struct s3_req *r, const struct s3_req_params *p)
{
	if (s3_op_sends_body(p->op)) {
		r->body = p->body;
		r->body_len = p->body_len;
		if (p->pieces) {
			r->body = NULL;
			r->pieces = p->pieces;
			r->n_pieces = p->n_pieces;
			r->body_len = 0;
			for (unsigned i = 0; i < p->n_pieces; i++)
				r->body_len += p->pieces[i].len;
		}
		return 0;
	}
	if (p->op == S3_COMPLETE_MULTIPART) {
		if (!(r->own_body = s3_complete_body(p)))
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
	if (p->if_match && (p->op == S3_GET_OBJECT || p->op == S3_HEAD_OBJECT ||
			    p->op == S3_DELETE_OBJECT))
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
	if (p->payload_sha256 && s3_op_sends_body(p->op))
		snprintf(payload_sha, sizeof(payload_sha), "%s", p->payload_sha256);
	else if (r->pieces)
		sigv4_sha256_hex_pieces(r->pieces, r->n_pieces, payload_sha);
	else if (r->body_len)
		sigv4_sha256_hex(r->body, r->body_len, payload_sha);
	else
		snprintf(payload_sha, sizeof(payload_sha), "%s", SIGV4_EMPTY_SHA256);

	struct sigv4_request sreq = {
		.method = s3_op_method(p->op),
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

/* The body goes through s3_resp_on_read/s3_resp_on_seek so a retry or a redirect of the
 * connection rewinds it instead of asking the caller again. */
static CURLcode set_body_reader(struct s3_req *r)
{
	CURL *e = r->easy;
	CURLcode rc;

	if ((rc = curl_easy_setopt(e, CURLOPT_READFUNCTION, s3_resp_on_read)) == CURLE_OK &&
	    (rc = curl_easy_setopt(e, CURLOPT_READDATA, r)) == CURLE_OK &&
	    (rc = curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, s3_resp_on_seek)) == CURLE_OK)
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
	case S3_UPLOAD_PART_COPY:
		if ((rc = curl_easy_setopt(e, CURLOPT_UPLOAD, 1L)) == CURLE_OK &&
		    (rc = curl_easy_setopt(e, CURLOPT_READFUNCTION, s3_resp_on_read)) == CURLE_OK &&
		    (rc = curl_easy_setopt(e, CURLOPT_READDATA, r)) == CURLE_OK &&
		    (rc = curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, s3_resp_on_seek)) == CURLE_OK &&
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
	SETOPT(CURLOPT_HEADERFUNCTION, s3_resp_on_header);
	SETOPT(CURLOPT_HEADERDATA, r);
	SETOPT(CURLOPT_WRITEFUNCTION, s3_resp_on_body);
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
	if (s3_validate_params(p, err, errlen) < 0)
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

	if (s3_build_target(c, p, &host, &path) < 0 || prepare_body(r, p) < 0)
		goto nomem;
	if (p->op == S3_LIST_OBJECTS_V2 && !(query = s3_list_query(p)))
		goto nomem;
	if (s3_op_is_multipart(p->op) && !(query = s3_multipart_query(p)))
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

