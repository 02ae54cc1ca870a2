/* sigv4.c - AWS Signature Version 4: the canonical request (URI, query,
 * headers, payload hash), the string to sign, the signing-key chain and the
 * Authorization header value. Pure functions over caller buffers and fixed
 * stack buffers: no I/O, no allocation, nothing kept between calls. */
#include "sigv4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "s3_checksum.h"
#include "s3_types.h"

/* Limits sized for S3 requests with a 4 KiB session token and 1 KiB keys
 * (3 KiB once percent-encoded); anything larger is refused with -EINVAL. */
#define SIGV4_MAX_HEADERS 32   /* caller's headers, before the fixed ones */
#define SIGV4_MAX_NAME 64      /* header name length */
#define SIGV4_MAX_PARAMS 64    /* query parameters */
#define SIGV4_QUERY_BUF 8192   /* encoded query parameters, all together */
#define SIGV4_CANON_BUF 16384  /* canonical request */
#define SIGV4_SIGNED_BUF 1024  /* signed header list */

static const char hex_upper[] = "0123456789ABCDEF";
static const char hex_lower[] = "0123456789abcdef";

/* A bounded string builder: once full it stays failed, so callers check
 * once at the end instead of after every append. */
struct sbuf {
	char *p;
	size_t len, cap;
	int overflow;
};

static void sbuf_init(struct sbuf *b, char *p, size_t cap)
{
	b->p = p;
	b->len = 0;
	b->cap = cap;
	b->overflow = cap == 0;
	if (cap)
		p[0] = '\0';
}

static void sbuf_putn(struct sbuf *b, const char *s, size_t n)
{
	if (b->overflow)
		return;
	if (n >= b->cap - b->len) {
		b->overflow = 1;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void sbuf_puts(struct sbuf *b, const char *s)
{
	sbuf_putn(b, s, strlen(s));
}

static void sbuf_putc(struct sbuf *b, char c)
{
	sbuf_putn(b, &c, 1);
}

static void to_hex(const unsigned char *in, size_t len, char *out)
{
	for (size_t i = 0; i < len; i++) {
		out[2 * i] = hex_lower[in[i] >> 4];
		out[2 * i + 1] = hex_lower[in[i] & 15];
	}
	out[2 * len] = '\0';
}

void sigv4_sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) ||
	    mdlen != 32) {
		/* An empty digest can never match: the request fails loudly
		 * at the server instead of being signed with garbage. */
		out[0] = '\0';
		return;
	}
	to_hex(md, 32, out);
}

void sigv4_sha256_hex_pieces(const struct s3_piece *pieces, unsigned n,
			     char out[65])
{
	unsigned char md[32];
	bool ok = s3_sha256_pieces(pieces, n, md) == 0;

	sigv4_sha256_to_hex(md, ok, out);
}

void sigv4_sha256_to_hex(const unsigned char sha256[32], bool ok,
			 char out[65])
{
	if (!ok)
		out[0] = '\0'; /* as sigv4_sha256_hex: fails at the server */
	else
		to_hex(sha256, 32, out);
}

static int hmac_sha256(const void *key, size_t keylen, const void *msg,
		       size_t msglen, unsigned char out[32])
{
	unsigned int outlen = 0;

	if (!HMAC(EVP_sha256(), key, (int)keylen, msg, msglen, out, &outlen) ||
	    outlen != 32)
		return -EINVAL;
	return 0;
}

static int is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
	       c == '~';
}

static void put_encoded_byte(struct sbuf *b, unsigned char c, int keep_slash)
{
	char pct[3];

	if (is_unreserved(c) || (keep_slash && c == '/')) {
		sbuf_putc(b, (char)c);
		return;
	}
	pct[0] = '%';
	pct[1] = hex_upper[c >> 4];
	pct[2] = hex_upper[c & 15];
	sbuf_putn(b, pct, 3);
}

int sigv4_uri_encode(const char *s, size_t len, int keep_slash, char *out,
		     size_t outlen)
{
	struct sbuf b;

	if (!s || !out)
		return -EINVAL;
	sbuf_init(&b, out, outlen);
	for (size_t i = 0; i < len; i++)
		put_encoded_byte(&b, (unsigned char)s[i], keep_slash);
	if (b.overflow)
		return -EINVAL;
	return (int)b.len;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Appends s[0..len) in canonical form: percent-escapes are decoded and the
 * bytes re-encoded, so already-encoded and raw input give the same result
 * and nothing is encoded twice. A '%' not followed by two hex digits is a
 * literal '%'. In a path, an escaped "%2F" stays escaped: it is part of a
 * segment, not a separator. '+' is a literal plus, never a space. */
static void put_canonical(struct sbuf *b, const char *s, size_t len,
			  int is_path)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '%' && i + 2 < len && hex_value(s[i + 1]) >= 0 &&
		    hex_value(s[i + 2]) >= 0) {
			c = (unsigned char)(hex_value(s[i + 1]) * 16 +
					    hex_value(s[i + 2]));
			i += 2;
			if (is_path && c == '/') {
				sbuf_puts(b, "%2F");
				continue;
			}
		}
		put_encoded_byte(b, c, is_path);
	}
}

struct query_param {
	const char *name;  /* encoded, NUL-terminated, inside the scratch */
	const char *value; /* encoded, NUL-terminated, inside the scratch */
};

static int param_cmp(const void *a, const void *b)
{
	const struct query_param *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	return r ? r : strcmp(x->value, y->value);
}

/* Encodes s[0..len) into the scratch as a NUL-terminated string. */
static const char *scratch_canonical(struct sbuf *scratch, const char *s,
				     size_t len)
{
	size_t start = scratch->len;

	put_canonical(scratch, s, len, 0);
	if (scratch->overflow || scratch->len + 1 >= scratch->cap) {
		scratch->overflow = 1;
		return NULL;
	}
	/* Terminate, and step past the NUL so the next string follows it. */
	scratch->p[scratch->len++] = '\0';
	return scratch->p + start;
}

static int canonical_query(const char *query, struct sbuf *out)
{
	struct query_param params[SIGV4_MAX_PARAMS];
	char buf[SIGV4_QUERY_BUF];
	struct sbuf scratch;
	size_t n = 0;
	const char *p = query;

	if (!query || !*query)
		return 0;
	sbuf_init(&scratch, buf, sizeof(buf));
	while (*p) {
		const char *end = strchr(p, '&');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		size_t nlen = eq ? (size_t)(eq - p) : len;

		if (len > 0) {
			if (n == SIGV4_MAX_PARAMS)
				return -EINVAL;
			params[n].name = scratch_canonical(&scratch, p, nlen);
			params[n].value = eq ? scratch_canonical(&scratch,
					eq + 1, len - nlen - 1) :
				scratch_canonical(&scratch, "", 0);
			if (!params[n].name || !params[n].value)
				return -EINVAL;
			n++;
		}
		p += len;
		if (*p == '&')
			p++;
	}
	qsort(params, n, sizeof(params[0]), param_cmp);
	for (size_t i = 0; i < n; i++) {
		if (i)
			sbuf_putc(out, '&');
		sbuf_puts(out, params[i].name);
		sbuf_putc(out, '=');
		sbuf_puts(out, params[i].value);
	}
	return out->overflow ? -EINVAL : 0;
}

struct canon_header {
	char name[SIGV4_MAX_NAME]; /* lowercased */
	const char *value;
	size_t order;              /* caller's order, for stable merging */
};

static int header_cmp(const void *a, const void *b)
{
	const struct canon_header *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	if (r)
		return r;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* RFC 7230 token characters: anything else in a name is refused rather
 * than signed and then mangled by the HTTP layer. */
static int is_token_char(unsigned char c)
{
	return is_unreserved(c) || (c && strchr("!#$%&'*+^`|", c));
}

static int add_header(struct canon_header *h, size_t *n, const char *name,
		      const char *value)
{
	size_t len, i;

	if (!name || !value || *n >= SIGV4_MAX_HEADERS + 4)
		return -EINVAL;
	len = strlen(name);
	if (len == 0 || len >= SIGV4_MAX_NAME)
		return -EINVAL;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (!is_token_char(c))
			return -EINVAL;
		h[*n].name[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
	}
	h[*n].name[len] = '\0';
	/* CR or LF in a value would let it inject headers. */
	if (strpbrk(value, "\r\n"))
		return -EINVAL;
	h[*n].value = value;
	h[*n].order = *n;
	(*n)++;
	return 0;
}

/* Trims leading and trailing blanks and squeezes inner runs to one space. */
static void put_trimmed(struct sbuf *b, const char *v)
{
	int pending_space = 0, started = 0;

	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			pending_space = started;
			continue;
		}
		if (pending_space)
			sbuf_putc(b, ' ');
		pending_space = 0;
		started = 1;
		sbuf_putc(b, *v);
	}
}

static int is_fixed_header(const char *lname)
{
	return !strcmp(lname, "host") || !strcmp(lname, "x-amz-date") ||
	       !strcmp(lname, "x-amz-content-sha256") ||
	       !strcmp(lname, "x-amz-security-token");
}

/* S3 signs the payload hash header; other services (and AWS's generic
 * test suite) do not send it. */
static int signs_content_sha256(const struct sigv4_request *req)
{
	return !strcmp(req->service, "s3");
}

static int collect_headers(const struct sigv4_request *req,
			   const struct rc_creds *cr, const char *amz_date,
			   struct canon_header *h, size_t *n)
{
	size_t i;
	int rc = 0;

	*n = 0;
	if (req->n_headers > SIGV4_MAX_HEADERS ||
	    (req->n_headers && !req->headers))
		return -EINVAL;
	for (i = 0; i < req->n_headers && !rc; i++) {
		rc = add_header(h, n, req->headers[i].name,
				req->headers[i].value);
		/* The fixed headers are ours: a second copy would be
		 * ambiguous on the wire. */
		if (!rc && is_fixed_header(h[*n - 1].name))
			rc = -EINVAL;
	}
	if (!rc)
		rc = add_header(h, n, "host", req->host);
	if (!rc)
		rc = add_header(h, n, "x-amz-date", amz_date);
	if (!rc && signs_content_sha256(req))
		rc = add_header(h, n, "x-amz-content-sha256",
				req->payload_sha256);
	if (!rc && cr->session_token[0])
		rc = add_header(h, n, "x-amz-security-token",
				cr->session_token);
	if (rc)
		return rc;
	qsort(h, *n, sizeof(h[0]), header_cmp);
	return 0;
}

/* Writes "name:v1,v2\n" lines and the "a;b;c" list; repeated names are
 * merged into one line, values in the caller's order. */
static void put_headers(struct sbuf *canon, struct sbuf *signed_list,
			const struct canon_header *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int repeat = i > 0 && !strcmp(h[i].name, h[i - 1].name);

		if (repeat) {
			sbuf_putc(canon, ',');
		} else {
			if (i > 0) {
				sbuf_putc(canon, '\n');
				sbuf_putc(signed_list, ';');
			}
			sbuf_puts(canon, h[i].name);
			sbuf_putc(canon, ':');
			sbuf_puts(signed_list, h[i].name);
		}
		put_trimmed(canon, h[i].value);
	}
	sbuf_putc(canon, '\n');
}

static int valid_amz_date(const char *d)
{
	if (!d || strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z')
		return 0;
	for (int i = 0; i < 15; i++)
		if (i != 8 && (d[i] < '0' || d[i] > '9'))
			return 0;
	return 1;
}

static int valid_request(const struct sigv4_request *req,
			 const struct rc_creds *cr)
{
	return req && cr && req->method && *req->method && req->path &&
	       req->host && *req->host && req->payload_sha256 &&
	       *req->payload_sha256 && req->region && *req->region &&
	       req->service && *req->service;
}

int sigv4_canonical_request(const struct sigv4_request *req,
			    const struct rc_creds *cr, const char *amz_date,
			    char *out, size_t outlen, char *signed_headers,
			    size_t shlen)
{
	struct canon_header headers[SIGV4_MAX_HEADERS + 4];
	struct sbuf canon, list;
	size_t n;
	int rc;

	if (!valid_request(req, cr) || !valid_amz_date(amz_date) || !out ||
	    !signed_headers)
		return -EINVAL;
	sbuf_init(&canon, out, outlen);
	sbuf_init(&list, signed_headers, shlen);

	sbuf_puts(&canon, req->method);
	sbuf_putc(&canon, '\n');
	if (*req->path)
		put_canonical(&canon, req->path, strlen(req->path), 1);
	else
		sbuf_putc(&canon, '/');
	sbuf_putc(&canon, '\n');
	rc = canonical_query(req->query, &canon);
	if (rc)
		return rc;
	sbuf_putc(&canon, '\n');

	rc = collect_headers(req, cr, amz_date, headers, &n);
	if (rc)
		return rc;
	put_headers(&canon, &list, headers, n);
	sbuf_putc(&canon, '\n');
	sbuf_puts(&canon, signed_headers);
	sbuf_putc(&canon, '\n');
	sbuf_puts(&canon, req->payload_sha256);
	if (canon.overflow || list.overflow)
		return -EINVAL;
	return 0;
}

static int format_amz_date(time_t now, char out[17])
{
	struct tm tm;

	if (!gmtime_r(&now, &tm) ||
	    strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm) != 16)
		return -EINVAL;
	return 0;
}

/* kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region),
 * service), "aws4_request"). The secret's copy is wiped after use. */
static int signing_key(const struct rc_creds *cr, const char *date8,
		       const char *region, const char *service,
		       unsigned char key[32])
{
	char k_secret[4 + sizeof(cr->secret_key)];
	size_t slen = strnlen(cr->secret_key, sizeof(cr->secret_key));
	int rc;

	if (slen == sizeof(cr->secret_key))
		return -EINVAL;
	memcpy(k_secret, "AWS4", 4);
	memcpy(k_secret + 4, cr->secret_key, slen);
	rc = hmac_sha256(k_secret, 4 + slen, date8, 8, key);
	explicit_bzero(k_secret, sizeof(k_secret));
	if (!rc)
		rc = hmac_sha256(key, 32, region, strlen(region), key);
	if (!rc)
		rc = hmac_sha256(key, 32, service, strlen(service), key);
	if (!rc)
		rc = hmac_sha256(key, 32, "aws4_request", 12, key);
	return rc;
}

int sigv4_sign(const struct sigv4_request *req, const struct rc_creds *cr,
	       struct sigv4_result *out)
{
	char canon[SIGV4_CANON_BUF], signed_headers[SIGV4_SIGNED_BUF];
	char canon_hash[65], scope[256], to_sign[512], signature[65];
	unsigned char key[32], mac[32];
	char date8[9];
	int rc, n;

	if (!valid_request(req, cr) || !out)
		return -EINVAL;
	if (strlen(req->payload_sha256) >= sizeof(out->content_sha256))
		return -EINVAL;
	rc = format_amz_date(req->now, out->amz_date);
	if (rc)
		return rc;
	memcpy(date8, out->amz_date, 8);
	date8[8] = '\0';
	rc = sigv4_canonical_request(req, cr, out->amz_date, canon,
				     sizeof(canon), signed_headers,
				     sizeof(signed_headers));
	if (rc)
		return rc;
	sigv4_sha256_hex(canon, strlen(canon), canon_hash);

	n = snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", date8,
		     req->region, req->service);
	if (n < 0 || (size_t)n >= sizeof(scope))
		return -EINVAL;
	n = snprintf(to_sign, sizeof(to_sign), "AWS4-HMAC-SHA256\n%s\n%s\n%s",
		     out->amz_date, scope, canon_hash);
	if (n < 0 || (size_t)n >= sizeof(to_sign))
		return -EINVAL;

	rc = signing_key(cr, date8, req->region, req->service, key);
	if (!rc)
		rc = hmac_sha256(key, 32, to_sign, (size_t)n, mac);
	explicit_bzero(key, sizeof(key));
	if (rc)
		return rc;
	to_hex(mac, 32, signature);

	n = snprintf(out->authorization, sizeof(out->authorization),
		     "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, "
		     "Signature=%s",
		     cr->access_key, scope, signed_headers, signature);
	if (n < 0 || (size_t)n >= sizeof(out->authorization))
		return -EINVAL;
	strcpy(out->content_sha256, req->payload_sha256);
	return 0;
}
