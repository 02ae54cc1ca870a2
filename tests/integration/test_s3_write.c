/* test_s3_write.c - the write operations of src/s3/s3.c (what checkpoint
 * write-back uploads with) against the real S3 server from the env:
 * PutObject with Content-MD5 and CRC-32C, a body refused by its signed
 * SHA-256, the multipart API (create,
 * parts, complete, abort, list), CopyObject, the errors each refuses with,
 * and a multipart upload that survives injected faults (rc-proxy).
 *
 * Every key is unique under $RINGCACHE_TEST_PREFIX "s3write/". */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fixture/fixture.h"
#include "crc32c.h"
#include "creds.h"
#include "s3.h"
#include "sigv4.h"

#define MiB (1024u * 1024u)

struct wclient {
	struct creds_provider *creds;
	struct s3_client *s3;
};

static void wclient_open(struct wclient *w, const char *endpoint,
			 unsigned max_retries)
{
	const struct fx_env *env = fx_env();
	struct creds_config cc = { .source = CREDS_CONFIG,
				   .access_key = env->access_key,
				   .secret_key = env->secret_key,
				   .timeout_ms = 2000 };
	struct s3_config sc = {
		.endpoint = endpoint ? endpoint : env->endpoint,
		.region = env->region,
		.addressing = S3_PATH_STYLE,
		.tls_verify = true,
		.connect_timeout_ms = 2000,
		.request_timeout_ms = 20000,
		.max_retries = max_retries,
		.backoff_base_ms = 10,
		.backoff_cap_ms = 100,
	};
	char err[256] = "";

	cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
	w->creds = creds_provider_new(&cc, err, sizeof(err));
	cr_assert_not_null(w->creds, "creds: %s", err);
	sc.creds = w->creds;
	w->s3 = s3_client_new(&sc, err, sizeof(err));
	cr_assert_not_null(w->s3, "s3_client_new: %s", err);
}

static void wclient_close(struct wclient *w)
{
	s3_client_free(w->s3);
	creds_provider_free(w->creds);
	curl_global_cleanup();
}

/* PREFIX "s3write/<unique>/" name. */
static void wkey(char *buf, size_t len, const char *name)
{
	char u[96];

	fx_unique(u, sizeof(u), name);
	int n = snprintf(buf, len, "%ss3write/%s", fx_env()->prefix, u);
	cr_assert(n > 0 && (size_t)n < len);
}

static void md5_raw(const void *d, size_t n, unsigned char out[16])
{
	unsigned int len = 0;

	cr_assert_eq(EVP_Digest(d, n, out, &len, EVP_md5(), NULL), 1);
}

static void hex(const unsigned char *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* "hex(md5(md5(p1)||md5(p2)||...))-N", quotes included. */
static void multipart_etag(const unsigned char *data, const size_t *sizes,
			   size_t n, char *out)
{
	unsigned char cat[16 * 16], md[16];
	size_t off = 0;

	cr_assert(n <= 16);
	for (size_t i = 0; i < n; i++) {
		md5_raw(data + off, sizes[i], cat + 16 * i);
		off += sizes[i];
	}
	md5_raw(cat, 16 * n, md);
	out[0] = '"';
	hex(md, 16, out + 1);
	sprintf(out + 33, "-%zu\"", n);
}

static const char *bkt(void)
{
	return fx_env()->bucket;
}

static int put(struct wclient *w, const char *key, const void *body,
	       size_t len, const char *md5_value, const char *crc,
	       struct s3_result *res)
{
	struct s3_req_params p = { .op = S3_PUT_OBJECT, .bucket = bkt(),
				   .key = key, .body = body, .body_len = len,
				   .content_md5 = true,
				   .content_md5_value = md5_value,
				   .checksum_crc32c = crc };

	return s3_perform(w->s3, &p, res, NULL, NULL);
}

static int head(struct wclient *w, const char *key, struct s3_result *res)
{
	struct s3_req_params p = { .op = S3_HEAD_OBJECT, .bucket = bkt(),
				   .key = key };

	return s3_perform(w->s3, &p, res, NULL, NULL);
}

/* GETs the object and asserts it is exactly want[0..len). */
static void assert_object(struct wclient *w, const char *key,
			  const unsigned char *want, size_t len)
{
	struct s3_req_params p = { .op = S3_GET_OBJECT, .bucket = bkt(),
				   .key = key };
	struct s3_result res;
	char *body = NULL;
	size_t got = 0;

	cr_assert_eq(s3_perform(w->s3, &p, &res, &body, &got), 0,
		     "GET %s: %d %s %s", key, res.err, res.code, res.message);
	cr_assert_eq(got, len, "GET %s: %zu bytes, want %zu", key, got, len);
	ssize_t at = fx_mismatch(body, want, len);
	cr_assert_eq(at, -1, "GET %s: first difference at byte %zd", key, at);
	free(body);
}

static void create_upload(struct wclient *w, const char *key, char *id,
			  size_t idlen)
{
	struct s3_req_params p = { .op = S3_CREATE_MULTIPART, .bucket = bkt(),
				   .key = key };
	struct s3_result res;
	char *body = NULL, err[256] = "";
	size_t len = 0;

	cr_assert_eq(s3_perform(w->s3, &p, &res, &body, &len), 0,
		     "CreateMultipartUpload: %d %s", res.err, res.code);
	cr_assert_eq(s3_parse_upload_id(body, len, id, idlen, err, sizeof(err)),
		     0, "%s: %s", err, body);
	free(body);
}

static int upload_part(struct wclient *w, const char *key, const char *id,
		       unsigned num, const void *data, size_t len,
		       struct s3_result *res)
{
	struct s3_req_params p = { .op = S3_UPLOAD_PART, .bucket = bkt(),
				   .key = key, .upload_id = id,
				   .part_number = num, .body = data,
				   .body_len = len };

	return s3_perform(w->s3, &p, res, NULL, NULL);
}

static int complete(struct wclient *w, const char *key, const char *id,
		    const struct s3_part *parts, size_t n,
		    struct s3_result *res)
{
	struct s3_req_params p = { .op = S3_COMPLETE_MULTIPART,
				   .bucket = bkt(), .key = key,
				   .upload_id = id, .parts = parts,
				   .n_parts = n };
	char *body = NULL, etag[128], err[256] = "";
	size_t len = 0;
	int rc = s3_perform(w->s3, &p, res, &body, &len);

	if (rc == 0)
		cr_expect_eq(s3_parse_complete(body, len, etag, sizeof(etag),
					       err, sizeof(err)), 0,
			     "%s: %s", err, body);
	free(body);
	return rc;
}

static void abort_upload(struct wclient *w, const char *key, const char *id)
{
	struct s3_req_params p = { .op = S3_ABORT_MULTIPART, .bucket = bkt(),
				   .key = key, .upload_id = id };
	struct s3_result res;

	cr_assert_eq(s3_perform(w->s3, &p, &res, NULL, NULL), 0,
		     "AbortMultipartUpload: %d %s", res.err, res.code);
}

/* Uploads data as parts of the given sizes; etags[i] receives each ETag. */
static void upload_parts(struct wclient *w, const char *key, const char *id,
			 const unsigned char *data, const size_t *sizes,
			 size_t n, char (*etags)[128], struct s3_part *parts)
{
	size_t off = 0;

	for (size_t i = 0; i < n; i++) {
		struct s3_result res;
		int rc = upload_part(w, key, id, (unsigned)i + 1, data + off,
				     sizes[i], &res);
		cr_assert_eq(rc, 0, "UploadPart %zu: %d %s %s", i + 1, res.err,
			     res.code, res.message);
		cr_assert(res.etag[0], "UploadPart %zu: no ETag", i + 1);
		snprintf(etags[i], 128, "%s", res.etag);
		parts[i] = (struct s3_part){ (unsigned)i + 1, etags[i], NULL };
		off += sizes[i];
	}
}

/* True if key has an upload with id (all pages, under key as prefix). */
static bool upload_listed(struct wclient *w, const char *key, const char *id)
{
	struct s3_req_params p = { .op = S3_LIST_MULTIPART, .bucket = bkt(),
				   .prefix = key };
	struct s3_result res;
	struct s3_upload_page pg;
	char *body = NULL, err[256] = "";
	size_t len = 0;
	bool found = false;

	cr_assert_eq(s3_perform(w->s3, &p, &res, &body, &len), 0,
		     "ListMultipartUploads: %d %s", res.err, res.code);
	cr_assert_eq(s3_parse_uploads(body, len, &pg, err, sizeof(err)), 0,
		     "%s", err);
	free(body);
	for (size_t i = 0; i < pg.n_uploads; i++)
		if (strcmp(pg.uploads[i].key, key) == 0 &&
		    strcmp(pg.uploads[i].upload_id, id) == 0)
			found = true;
	s3_upload_page_free(&pg);
	return found;
}

/* ---- PutObject with checksums ---- */

Test(s3_write, put_with_content_md5_round_trips)
{
	struct wclient w;
	struct s3_result res;
	char key[512], want[40];
	unsigned char md[16];
	const size_t len = 300000;
	unsigned char *data = fx_pattern(len, 1);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "put-md5");
	cr_assert_eq(put(&w, key, data, len, NULL, NULL, &res), 0,
		     "PUT: %d %s %s", res.err, res.code, res.message);
	md5_raw(data, len, md);
	want[0] = '"';
	hex(md, 16, want + 1);
	strcpy(want + 33, "\"");
	cr_expect_str_eq(res.etag, want);
	assert_object(&w, key, data, len);
	free(data);
	wclient_close(&w);
}

Test(s3_write, wrong_content_md5_is_refused_not_retried)
{
	struct wclient w;
	struct s3_result res, hres;
	char key[512], other[25];
	unsigned char *data = fx_pattern(4096, 2);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "bad-md5");
	s3_content_md5("something else", 14, other);
	cr_assert_eq(put(&w, key, data, 4096, other, NULL, &res), -EBADMSG,
		     "err %d http %ld code %s", res.err, res.http_status,
		     res.code);
	cr_expect_eq(res.http_status, 400);
	cr_expect_str_eq(res.code, "BadDigest");
	cr_expect_not(res.retryable);
	cr_expect_eq(head(&w, key, &hres), -ENOENT, "refused PUT left an object");
	free(data);
	wclient_close(&w);
}

/* The signed x-amz-content-sha256 binds a body to its request as its
 * Content-MD5 does, and the server checks it: a body whose signed hash is
 * another's (a body damaged on the way, with the MD5 right or absent) is
 * refused (PUT and UploadPart) as a damaged body, -EBADMSG like
 * BadDigest (write-back keeps it journaled: not a refusal for good),
 * never retried, and stores nothing. */
Test(s3_write, wrong_signed_payload_hash_is_refused)
{
	struct wclient w;
	struct s3_result res, hres;
	char key[512], id[256], other[65];
	unsigned char *data = fx_pattern(65536, 4);

	wclient_open(&w, NULL, 3);
	sigv4_sha256_hex("something else", 14, other);
	wkey(key, sizeof(key), "bad-sha");
	struct s3_req_params p = { .op = S3_PUT_OBJECT, .bucket = bkt(),
				   .key = key, .body = data, .body_len = 65536,
				   .payload_sha256 = other };
	int rc = s3_perform(w.s3, &p, &res, NULL, NULL);
	cr_log_info("PUT, wrong signed hash: err %d http %ld code '%s'", rc,
		    res.http_status, res.code);
	cr_expect(rc == -EBADMSG && res.http_status == 400 && !res.retryable,
		  "PUT with another body's signed hash: err %d http %ld %s",
		  rc, res.http_status, res.code);
	cr_expect_eq(head(&w, key, &hres), -ENOENT, "refused PUT left an object");

	wkey(key, sizeof(key), "bad-sha-part");
	create_upload(&w, key, id, sizeof(id));
	p = (struct s3_req_params){ .op = S3_UPLOAD_PART, .bucket = bkt(),
				    .key = key, .upload_id = id,
				    .part_number = 1, .body = data,
				    .body_len = 65536, .payload_sha256 = other };
	rc = s3_perform(w.s3, &p, &res, NULL, NULL);
	cr_log_info("UploadPart, wrong signed hash: err %d http %ld code '%s'",
		    rc, res.http_status, res.code);
	cr_expect(rc == -EBADMSG && res.http_status == 400 && !res.retryable,
		  "UploadPart with another body's signed hash: err %d http %ld %s",
		  rc, res.http_status, res.code);
	abort_upload(&w, key, id);
	free(data);
	wclient_close(&w);
}

/* RGW 16.2 predates flexible checksums: it takes the header and ignores it
 * (a wrong value is stored too), so Content-MD5 is what protects a body
 * there. A server that checks it must accept the right value. */
Test(s3_write, put_with_crc32c_round_trips)
{
	struct wclient w;
	struct s3_result res;
	char key[512], crc[9];
	unsigned char *data = fx_pattern(65536, 3);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "put-crc");
	s3_crc32c_b64(crc32c(0, data, 65536), crc);
	cr_assert_eq(put(&w, key, data, 65536, NULL, crc, &res), 0,
		     "PUT with x-amz-checksum-crc32c: %d %s %s", res.err,
		     res.code, res.message);
	assert_object(&w, key, data, 65536);

	s3_crc32c_b64(crc32c(0, "x", 1), crc);
	wkey(key, sizeof(key), "put-badcrc");
	int rc = put(&w, key, data, 65536, NULL, crc, &res);
	cr_log_info("wrong x-amz-checksum-crc32c: err %d http %ld code '%s'",
		    rc, res.http_status, res.code);
	cr_expect(rc == 0 || rc == -EBADMSG || rc == -EINVAL,
		  "wrong CRC: neither ignored nor refused as a bad digest: %d %s",
		  rc, res.code);
	free(data);
	wclient_close(&w);
}

Test(s3_write, crc32c_header_value_is_base64_big_endian)
{
	char out[9];

	s3_crc32c_b64(0xe3069283u, out); /* crc32c("123456789") */
	cr_expect_str_eq(out, "4waSgw==");
	char md5[25];
	s3_content_md5("", 0, md5);
	cr_expect_str_eq(md5, "1B2M2Y8AsgTpgAmY7PhCfg==");
}

/* ---- multipart ---- */

Test(s3_write, three_parts_assemble_byte_identical)
{
	struct wclient w;
	struct s3_result res;
	char key[512], id[256], etags[3][128], want[48];
	const size_t sizes[3] = { 5 * MiB, 5 * MiB, 1 };
	const size_t total = 10 * MiB + 1;
	struct s3_part parts[3];
	unsigned char *data = fx_pattern(total, 4);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "mpu3");
	create_upload(&w, key, id, sizeof(id));
	cr_expect(upload_listed(&w, key, id), "new upload not listed");
	upload_parts(&w, key, id, data, sizes, 3, etags, parts);
	cr_expect_eq(head(&w, key, &res), -ENOENT,
		     "object visible before Complete (HEAD err %d)", res.err);
	cr_assert_eq(complete(&w, key, id, parts, 3, &res), 0,
		     "Complete: %d %s %s", res.err, res.code, res.message);

	int again = complete(&w, key, id, parts, 3, &res);
	cr_log_info("Complete repeated: err %d http %ld code '%s'", again,
		    res.http_status, res.code);
	cr_assert_eq(head(&w, key, &res), 0, "HEAD after Complete: %d", res.err);
	cr_expect_eq(res.object_size, total);
	multipart_etag(data, sizes, 3, want);
	cr_expect_str_eq(res.etag, want);
	assert_object(&w, key, data, total);
	cr_expect_not(upload_listed(&w, key, id), "completed upload still listed");
	free(data);
	wclient_close(&w);
}

Test(s3_write, small_part_not_last_fails_entity_too_small)
{
	struct wclient w;
	struct s3_result res;
	char key[512], id[256], etags[2][128];
	const size_t sizes[2] = { 1 * MiB, 1 };
	struct s3_part parts[2];
	unsigned char *data = fx_pattern(MiB + 1, 5);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "too-small");
	create_upload(&w, key, id, sizeof(id));
	upload_parts(&w, key, id, data, sizes, 2, etags, parts);
	cr_expect_eq(complete(&w, key, id, parts, 2, &res), -EINVAL,
		     "Complete: err %d http %ld code %s", res.err,
		     res.http_status, res.code);
	cr_expect_str_eq(res.code, "EntityTooSmall");
	cr_expect_not(res.retryable);
	cr_expect_eq(head(&w, key, &res), -ENOENT);
	abort_upload(&w, key, id);
	free(data);
	wclient_close(&w);
}

Test(s3_write, wrong_part_etag_fails_invalid_part)
{
	struct wclient w;
	struct s3_result res;
	char key[512], id[256], etags[1][128];
	const size_t sizes[1] = { 1000 };
	struct s3_part parts[1];
	unsigned char *data = fx_pattern(1000, 6);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "bad-part");
	create_upload(&w, key, id, sizeof(id));
	upload_parts(&w, key, id, data, sizes, 1, etags, parts);
	parts[0].etag = "\"0123456789abcdef0123456789abcdef\"";
	cr_expect_eq(complete(&w, key, id, parts, 1, &res), -EINVAL,
		     "Complete: err %d http %ld code %s", res.err,
		     res.http_status, res.code);
	cr_expect_str_eq(res.code, "InvalidPart");
	cr_expect_not(res.retryable);
	abort_upload(&w, key, id);
	free(data);
	wclient_close(&w);
}

Test(s3_write, abort_removes_the_upload)
{
	struct wclient w;
	struct s3_result res;
	char key[512], id[256], etags[1][128];
	const size_t sizes[1] = { 5000 };
	struct s3_part parts[1];
	unsigned char *data = fx_pattern(5000, 7);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "abort");
	create_upload(&w, key, id, sizeof(id));
	upload_parts(&w, key, id, data, sizes, 1, etags, parts);
	cr_assert(upload_listed(&w, key, id));
	abort_upload(&w, key, id);
	cr_expect_not(upload_listed(&w, key, id), "aborted upload still listed");
	cr_expect_eq(upload_part(&w, key, id, 2, data, 5000, &res), -ENOENT,
		     "UploadPart after abort: %d %s", res.err, res.code);
	cr_expect_str_eq(res.code, "NoSuchUpload");
	/* RGW 16.2 answers this with 500 InternalError (retried, then
	 * failed), AWS with 404 NoSuchUpload: either way it must fail. */
	cr_expect_neq(complete(&w, key, id, parts, 1, &res), 0,
		      "Complete after abort succeeded");
	cr_log_info("Complete after abort: err %d http %ld code %s", res.err,
		    res.http_status, res.code);
	cr_expect_eq(head(&w, key, &res), -ENOENT, "aborted object appeared");
	free(data);
	wclient_close(&w);
}

Test(s3_write, list_uploads_paginates)
{
	struct wclient w;
	char base[512], keys[3][600], ids[3][256];
	char *marker = NULL, *id_marker = NULL;
	size_t seen = 0, pages = 0;

	wclient_open(&w, NULL, 3);
	wkey(base, sizeof(base), "list");
	for (int i = 0; i < 3; i++) {
		snprintf(keys[i], sizeof(keys[i]), "%s/%d", base, i);
		create_upload(&w, keys[i], ids[i], sizeof(ids[i]));
	}
	for (;;) {
		struct s3_req_params p = { .op = S3_LIST_MULTIPART, .bucket = bkt(),
					   .prefix = base, .max_uploads = 2,
					   .key_marker = marker,
					   .upload_id_marker = id_marker };
		struct s3_result res;
		struct s3_upload_page pg;
		char *body = NULL, err[256] = "";
		size_t len = 0;

		cr_assert_eq(s3_perform(w.s3, &p, &res, &body, &len), 0,
			     "ListMultipartUploads: %d %s", res.err, res.code);
		cr_assert_eq(s3_parse_uploads(body, len, &pg, err, sizeof(err)),
			     0, "%s", err);
		free(body);
		cr_assert_leq(pg.n_uploads, 2);
		for (size_t i = 0; i < pg.n_uploads; i++, seen++) {
			cr_assert_lt(seen, 3);
			cr_expect_str_eq(pg.uploads[i].key, keys[seen]);
			cr_expect_str_eq(pg.uploads[i].upload_id, ids[seen]);
			cr_expect(pg.uploads[i].initiated[0], "no <Initiated>");
		}
		pages++;
		free(marker);
		free(id_marker);
		marker = pg.next_key_marker ? strdup(pg.next_key_marker) : NULL;
		id_marker = pg.next_upload_id_marker ?
			strdup(pg.next_upload_id_marker) : NULL;
		bool more = pg.truncated;
		s3_upload_page_free(&pg);
		if (!more)
			break;
		cr_assert_lt(pages, 5, "listing does not end");
	}
	free(marker);
	free(id_marker);
	cr_expect_eq(seen, 3);
	cr_expect_eq(pages, 2);
	for (int i = 0; i < 3; i++)
		abort_upload(&w, keys[i], ids[i]);
	wclient_close(&w);
}

/* ---- CopyObject ---- */

Test(s3_write, copy_object_copies_bytes)
{
	struct wclient w;
	struct s3_result res, hres;
	char src[512], dst[512], source[600], etag[128], err[256] = "";
	char *body = NULL;
	size_t len = 0;
	unsigned char *data = fx_pattern(200000, 8);

	wclient_open(&w, NULL, 3);
	wkey(src, sizeof(src), "copy src+&=?");
	wkey(dst, sizeof(dst), "copy-dst");
	cr_assert_eq(put(&w, src, data, 200000, NULL, NULL, &res), 0);
	snprintf(source, sizeof(source), "%s/%s", bkt(), src);
	struct s3_req_params p = { .op = S3_COPY_OBJECT, .bucket = bkt(),
				   .key = dst, .copy_source = source };
	cr_assert_eq(s3_perform(w.s3, &p, &res, &body, &len), 0,
		     "CopyObject: %d %ld %s %s", res.err, res.http_status,
		     res.code, res.message);
	cr_assert_eq(s3_parse_copy_result(body, len, etag, sizeof(etag), err,
					  sizeof(err)), 0, "%s: %s", err, body);
	free(body);
	assert_object(&w, dst, data, 200000);
	cr_assert_eq(head(&w, dst, &hres), 0);
	cr_expect_str_eq(hres.etag, etag, "HEAD %s, copy result %s", hres.etag,
			 etag);

	snprintf(source, sizeof(source), "%s/%s-missing", bkt(), src);
	cr_expect_eq(s3_perform(w.s3, &p, &res, NULL, NULL), -ENOENT,
		     "copy of a missing source: %d %s", res.err, res.code);
	free(data);
	wclient_close(&w);
}

/* x-amz-copy-source-if-match, which write-back's RENAME sends so that a
 * key a later save replaced is neither copied nor deleted: with the
 * source's own ETag (quoted, as S3 gives it) CopyObject and UploadPartCopy
 * copy. With another, S3 answers 412 (-ESTALE) and writes nothing; Ceph
 * RGW reads x-amz-copy-if-match instead and copies all the same, which
 * is why the upload engine HEADs the source first (upload.c,
 * on_source_done; writeback/a_rename_never_moves_a_later_save_of_its_key
 * tests that). */
Test(s3_write, copy_source_if_match_is_accepted)
{
	struct wclient w;
	struct s3_result res;
	char src[512], dst[512], source[600], key[512], id[256], etag[128];
	unsigned char *data = fx_pattern(200000, 9);

	wclient_open(&w, NULL, 3);
	wkey(src, sizeof(src), "copy-if-src");
	wkey(dst, sizeof(dst), "copy-if-dst");
	cr_assert_eq(put(&w, src, data, 200000, NULL, NULL, &res), 0);
	snprintf(etag, sizeof(etag), "%s", res.etag);
	cr_assert_eq(etag[0], '"', "ETag %s", etag);
	snprintf(source, sizeof(source), "%s/%s", bkt(), src);
	struct s3_req_params p = { .op = S3_COPY_OBJECT, .bucket = bkt(),
				   .key = dst, .copy_source = source,
				   .copy_source_if_match = etag };
	cr_assert_eq(s3_perform(w.s3, &p, &res, NULL, NULL), 0,
		     "CopyObject, its ETag %s: %d %ld %s", etag, res.err,
		     res.http_status, res.code);
	assert_object(&w, dst, data, 200000);
	wkey(key, sizeof(key), "copy-if-part");
	create_upload(&w, key, id, sizeof(id));
	struct s3_req_params pp = { .op = S3_UPLOAD_PART_COPY, .bucket = bkt(),
				    .key = key, .upload_id = id,
				    .part_number = 1, .copy_source = source,
				    .copy_range_off = 0,
				    .copy_range_len = 200000,
				    .copy_source_if_match = etag };
	cr_assert_eq(s3_perform(w.s3, &pp, &res, NULL, NULL), 0,
		     "UploadPartCopy, its ETag: %d %ld %s", res.err,
		     res.http_status, res.code);
	abort_upload(&w, key, id);

	wkey(dst, sizeof(dst), "copy-if-other");
	p.copy_source_if_match = "\"0123456789abcdef0123456789abcdef\"";
	int rc = s3_perform(w.s3, &p, &res, NULL, NULL);
	cr_assert(rc == 0 || (rc == -ESTALE && res.http_status == 412),
		  "CopyObject, another ETag: %d %ld %s", res.err,
		  res.http_status, res.code);
	if (rc == -ESTALE)
		cr_assert_eq(head(&w, dst, &res), -ENOENT, "copied after a 412");
	else
		cr_log_info("the server ignores x-amz-copy-source-if-match");
	free(data);
	wclient_close(&w);
}

/* DeleteObject with If-Match (conditional delete): with the object's own
 * ETag the object goes; with another, S3 answers 412 (-ESTALE) and keeps
 * it. A RENAME's DELETE of its source carries the ETag it copied, so a
 * writer's newer object under the old name is never deleted (rc-proxy's
 * fail-conditional-deletes stands in for that 412 in
 * writeback/a_rename_leaves_a_source_another_object_replaced: Ceph RGW
 * before Tentacle ignores the header and deletes all the same). */
Test(s3_write, delete_if_match_is_accepted)
{
	struct wclient w;
	struct s3_result res;
	char key[512], etag[128];
	unsigned char *data = fx_pattern(4096, 10);

	wclient_open(&w, NULL, 3);
	wkey(key, sizeof(key), "delete-if");
	cr_assert_eq(put(&w, key, data, 4096, NULL, NULL, &res), 0);
	snprintf(etag, sizeof(etag), "%s", res.etag);
	struct s3_req_params p = { .op = S3_DELETE_OBJECT, .bucket = bkt(),
				   .key = key,
				   .if_match = "\"0123456789abcdef0123456789abcdef\"" };
	int rc = s3_perform(w.s3, &p, &res, NULL, NULL);
	cr_assert(rc == 0 || (rc == -ESTALE && res.http_status == 412),
		  "DELETE, another ETag: %d %ld %s", res.err, res.http_status,
		  res.code);
	if (rc == -ESTALE) {
		assert_object(&w, key, data, 4096);
	} else {
		cr_log_info("the server ignores If-Match on DELETE");
		cr_assert_eq(put(&w, key, data, 4096, NULL, NULL, &res), 0);
	}
	p.if_match = etag;
	cr_assert_eq(s3_perform(w.s3, &p, &res, NULL, NULL), 0,
		     "DELETE, its ETag %s: %d %ld %s", etag, res.err,
		     res.http_status, res.code);
	cr_assert_eq(head(&w, key, &res), -ENOENT, "not deleted");
	free(data);
	wclient_close(&w);
}

/* ---- faults ---- */

/* One 4-part upload through w; fails the test unless the object ends up
 * byte-identical with the multipart ETag. A Complete whose response was
 * cut after the server finished is retried: RGW answers the repeat with
 * 200, AWS may say NoSuchUpload; the object's ETag decides. */
static void faulty_upload(struct wclient *w, struct wclient *direct,
			  const unsigned char *data, int round)
{
	const size_t sizes[4] = { 5 * MiB, 5 * MiB, 5 * MiB, 12345 };
	const size_t total = 15 * MiB + 12345;
	struct s3_part parts[4];
	struct s3_result res;
	char key[512], id[256], etags[4][128], want[48], tag[32];

	snprintf(tag, sizeof(tag), "mpu-faults-%d", round);
	wkey(key, sizeof(key), tag);
	create_upload(w, key, id, sizeof(id));
	upload_parts(w, key, id, data, sizes, 4, etags, parts);
	multipart_etag(data, sizes, 4, want);
	int rc = complete(w, key, id, parts, 4, &res);
	if (rc != 0)
		cr_log_info("Complete ended in err %d %s: checking the object",
			    rc, res.code);
	cr_assert_eq(head(direct, key, &res), 0, "HEAD: %d (Complete: %d)",
		     res.err, rc);
	cr_expect_str_eq(res.etag, want);
	assert_object(direct, key, data, total);
}

static uint64_t proxy_faults(const struct fx_proxy *px)
{
	const char *stats = fx_proxy_control(px, "stats\n");

	return fx_proxy_stat(stats, "fault_503") +
	       fx_proxy_stat(stats, "fault_slowdown") +
	       fx_proxy_stat(stats, "fault_reset") +
	       fx_proxy_stat(stats, "fault_truncate");
}

/* Through rc-proxy failing 30% of requests (503, SlowDown, resets and
 * truncations mid-response), retries resend the same part bytes. Uploads
 * repeat (at most 6) until the proxy has injected at least 3 faults, so
 * the test cannot pass without exercising the retries. */
Test(s3_write, multipart_through_faults_completes, .timeout = 120)
{
	struct fx_proxy px;
	const char *opts[] = { "--fault-rate", "0.3", "--faults",
			       "503,slowdown,reset,truncate", "--latency-ms",
			       "0", "--bw-conn", "0", NULL };
	struct wclient w, direct;
	unsigned char *data = fx_pattern(15 * MiB + 12345, 9);
	int round = 0;

	fx_proxy_start(&px, opts);
	wclient_open(&w, px.endpoint, 12);
	wclient_open(&direct, NULL, 3);
	do
		faulty_upload(&w, &direct, data, round);
	while (++round < 6 && proxy_faults(&px) < 3);
	uint64_t faults = proxy_faults(&px);
	cr_log_info("%d uploads, %" PRIu64 " faults injected", round, faults);
	cr_expect_geq(faults, 3, "the proxy injected only %" PRIu64 " faults",
		      faults);
	fx_proxy_stop(&px);
	free(data);
	wclient_close(&direct);
	wclient_close(&w);
}
