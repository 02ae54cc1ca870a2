/* test_sigv4.c - SigV4 against AWS's published vectors: the generic
 * aws-sig-v4-test-suite (service "service", us-east-1, 20150830T123600Z)
 * and the S3 single-chunk examples (examplebucket, 20130524T000000Z);
 * beside them the MD5 values S3 checks (s3_checksum.c, the upload ETag)
 * and the lane-parallel digests of upload parts (md5x.c, sha256x.c). */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "md5x.h"
#include "s3_checksum.h"
#include "sha256x.h"
#include "sigv4.h"
#include "upload.h"

#define SUITE_SECRET "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
#define SUITE_PREFIX \
	"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/" \
	"service/aws4_request, "
#define S3_PREFIX \
	"AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/" \
	"us-east-1/s3/aws4_request, "
#define STS_TOKEN \
	"AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQ" \
	"WLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMc" \
	"GdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp7" \
	"5YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZb" \
	"qBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/o" \
	"LxBA=="

static const time_t suite_time = 1440938160; /* 2015-08-30T12:36:00Z */
static const time_t s3_time = 1369353600;    /* 2013-05-24T00:00:00Z */

static struct rc_creds suite_creds(const char *token)
{
	struct rc_creds cr;

	memset(&cr, 0, sizeof(cr));
	strcpy(cr.access_key, "AKIDEXAMPLE");
	strcpy(cr.secret_key, SUITE_SECRET);
	if (token)
		strcpy(cr.session_token, token);
	return cr;
}

static struct rc_creds s3_creds(void)
{
	struct rc_creds cr;

	memset(&cr, 0, sizeof(cr));
	strcpy(cr.access_key, "AKIAIOSFODNN7EXAMPLE");
	strcpy(cr.secret_key, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
	return cr;
}

static struct sigv4_request suite_req(const char *method, const char *path,
				      const char *query)
{
	struct sigv4_request req = {
		.method = method,
		.path = path,
		.query = query,
		.host = "example.amazonaws.com",
		.payload_sha256 = SIGV4_EMPTY_SHA256,
		.region = "us-east-1",
		.service = "service",
		.now = suite_time,
	};
	return req;
}

static struct sigv4_request s3_req(const char *method, const char *path,
				   const char *query)
{
	struct sigv4_request req = {
		.method = method,
		.path = path,
		.query = query,
		.host = "examplebucket.s3.amazonaws.com",
		.payload_sha256 = SIGV4_EMPTY_SHA256,
		.region = "us-east-1",
		.service = "s3",
		.now = s3_time,
	};
	return req;
}

static void expect_auth(const struct sigv4_request *req,
			const struct rc_creds *cr, const char *expected)
{
	struct sigv4_result res;

	cr_assert_eq(sigv4_sign(req, cr, &res), 0);
	cr_assert_str_eq(res.authorization, expected);
}

static void expect_canonical(const struct sigv4_request *req,
			     const struct rc_creds *cr, const char *amz_date,
			     const char *expected)
{
	char canon[8192], signed_headers[512];

	cr_assert_eq(sigv4_canonical_request(req, cr, amz_date, canon,
					     sizeof(canon), signed_headers,
					     sizeof(signed_headers)), 0);
	cr_assert_str_eq(canon, expected);
}

Test(sha256, known_digests)
{
	char hex[65];

	sigv4_sha256_hex("", 0, hex);
	cr_assert_str_eq(hex, SIGV4_EMPTY_SHA256);
	sigv4_sha256_hex("Welcome to Amazon S3.", 21, hex);
	cr_assert_str_eq(hex, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b"
			      "4b4e99e42034a8b803f8b072");
	sigv4_sha256_hex("Param1=value1", 13, hex);
	cr_assert_str_eq(hex, "9095672bbd1f56dfc5b65f3e153adc8731a4a654"
			      "192329106275f4c7b24d0b6e");
}

/* A body in pieces hashes as the same bytes in one piece, with empty
 * pieces and no pieces at all (the digests upload and sigv4 send). */
Test(sha256, pieces_hash_as_one_body)
{
	static const char body[] = "Welcome to Amazon S3.";
	const struct s3_piece pieces[] = {
		{body, 7}, {body + 7, 0}, {body + 7, 1}, {body + 8, 13}};
	unsigned char md5_one[16], md5_cut[16];
	char hex_one[65], hex_cut[65];

	sigv4_sha256_hex(body, 21, hex_one);
	sigv4_sha256_hex_pieces(pieces, 4, hex_cut);
	cr_assert_str_eq(hex_cut, hex_one);
	sigv4_sha256_hex_pieces(NULL, 0, hex_cut);
	cr_assert_str_eq(hex_cut, SIGV4_EMPTY_SHA256);
	cr_assert_eq(s3_md5(body, 21, md5_one), 0);
	cr_assert_eq(s3_md5_pieces(pieces, 4, md5_cut), 0);
	cr_assert_arr_eq(md5_cut, md5_one, 16);
}

#define BODIES 40

/* 8 KiB of bytes that are not a pattern of any block size. */
static const uint8_t *digest_input(void)
{
	static uint8_t data[8192];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 2654435761u >> 11);
	return data;
}

/* Body k of the set at base: base + 3k bytes (4000 more for every fifth),
 * in one piece (every third) or in four cut at odd places, one of them
 * empty; pieces[k][0..n_pieces[k]). */
static void cut_bodies(const uint8_t *data, size_t base,
		       struct s3_piece pieces[BODIES][4],
		       unsigned n_pieces[BODIES])
{
	for (unsigned k = 0; k < BODIES; k++) {
		size_t len = base + k * 3 + (k % 5 == 0 ? 4000 : 0);
		size_t cut1 = len / 3, cut2 = len / 3 + (k % 7);
		if (cut2 > len)
			cut2 = len;
		const uint8_t *p = data + k;
		pieces[k][0] = (struct s3_piece){p, cut1};
		pieces[k][1] = (struct s3_piece){p + cut1, 0};
		pieces[k][2] = (struct s3_piece){p + cut1, cut2 - cut1};
		pieces[k][3] = (struct s3_piece){p + cut2, len - cut2};
		n_pieces[k] = k % 3 ? 4 : 1;
		if (k % 3 == 0)
			pieces[k][0].len = len;
	}
}

/* md5x gives OpenSSL's MD5 of every body, with the lanes and without:
 * every length around the padding's edges (55, 56, 63, 64 ...), bodies
 * cut into pieces at odd places (empty pieces, a block across three),
 * lanes of different lengths ending at different blocks, one body alone
 * and more bodies than lanes. */
static void md5x_matches_openssl(bool lanes)
{
	const uint8_t *data = digest_input();
	md5x_use_lanes(lanes);
#if defined(__x86_64__)
	__builtin_cpu_init();
	cr_assert_eq(md5x_lanes(),
		     lanes && __builtin_cpu_supports("avx512f") ? 16u : 1u,
		     "md5x does not use the lanes this CPU has");
#endif
	struct s3_piece pieces[BODIES][4];
	unsigned n_pieces[BODIES];
	struct md5x_body b[BODIES];
	for (size_t base = 0; base < 300; base += 37) {
		cut_bodies(data, base, pieces, n_pieces);
		for (unsigned k = 0; k < BODIES; k++)
			b[k] = (struct md5x_body){.pieces = pieces[k],
						  .n_pieces = n_pieces[k]};
		for (unsigned n = 1; n <= BODIES; n += n < 18 ? 1 : 11) {
			memset(b[0].md5, 0, sizeof(b[0].md5));
			md5x(b, n);
			for (unsigned k = 0; k < n; k++) {
				unsigned char want[16];
				cr_assert_eq(s3_md5_pieces(b[k].pieces,
							   b[k].n_pieces, want),
					     0);
				cr_assert(b[k].ok);
				cr_assert_arr_eq(b[k].md5, want, 16,
						 "body %u of %u (base %zu, "
						 "lanes %u) differs",
						 k, n, base, md5x_lanes());
			}
		}
	}
	/* Bodies each in a buffer of exactly its size: a lane that read past
	 * a piece's end would show under ASan. */
	for (size_t len = 0; len < 200; len += 13) {
		uint8_t *own[MD5X_MAX];
		struct s3_piece one[MD5X_MAX];
		for (unsigned k = 0; k < MD5X_MAX; k++) {
			size_t n = len + k;
			own[k] = malloc(n ? n : 1);
			cr_assert_not_null(own[k]);
			memcpy(own[k], data + k, n);
			one[k] = (struct s3_piece){own[k], n};
			b[k] = (struct md5x_body){.pieces = &one[k],
						  .n_pieces = 1};
		}
		md5x(b, MD5X_MAX);
		for (unsigned k = 0; k < MD5X_MAX; k++) {
			unsigned char want[16];
			cr_assert_eq(s3_md5(own[k], len + k, want), 0);
			cr_assert_arr_eq(b[k].md5, want, 16, "%zu bytes",
					 len + k);
			free(own[k]);
		}
	}
	struct md5x_body none = {.pieces = NULL, .n_pieces = 0};
	struct md5x_body two[2] = {none, none};
	md5x(two, 2); /* no pieces at all: the MD5 of nothing */
	char b64[25];
	s3_md5_b64(two[1].md5, two[1].ok, b64);
	cr_assert_str_eq(b64, "1B2M2Y8AsgTpgAmY7PhCfg==");
	md5x_use_lanes(true);
}

Test(md5, lanes_give_openssls_md5)
{
	md5x_matches_openssl(true);
}

Test(md5, one_at_a_time_gives_openssls_md5)
{
	md5x_matches_openssl(false);
}

Test(md5, content_md5_and_multipart_etag)
{
	unsigned char md5s[2][16];
	char b64[25], etag[64];

	cr_assert_eq(s3_md5("", 0, md5s[0]), 0);
	s3_md5_b64(md5s[0], true, b64);
	cr_assert_str_eq(b64, "1B2M2Y8AsgTpgAmY7PhCfg==");
	s3_content_md5("", 0, b64);
	cr_assert_str_eq(b64, "1B2M2Y8AsgTpgAmY7PhCfg==");
	s3_md5_b64(md5s[0], false, b64); /* no MD5: no value, not a stale one */
	cr_assert_str_eq(b64, "");

	/* S3's multipart ETag: the MD5 of the parts' MD5s, then "-parts" */
	cr_assert_eq(s3_md5("a", 1, md5s[0]), 0);
	cr_assert_eq(s3_md5("b", 1, md5s[1]), 0);
	upload_multipart_etag((const unsigned char (*)[16])md5s, 2, etag,
			      sizeof(etag));
	cr_assert_str_eq(etag, "\"96e024ba2074fe77e8e965ba43a704be-2\"");
}

Test(suite, get_vanilla)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_request req = suite_req("GET", "/", NULL);
	struct sigv4_result res;

	expect_canonical(&req, &cr, "20150830T123600Z",
			 "GET\n/\n\nhost:example.amazonaws.com\n"
			 "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
			 SIGV4_EMPTY_SHA256);
	cr_assert_eq(sigv4_sign(&req, &cr, &res), 0);
	cr_assert_str_eq(res.amz_date, "20150830T123600Z");
	cr_assert_str_eq(res.content_sha256, SIGV4_EMPTY_SHA256);
	cr_assert_str_eq(res.authorization, SUITE_PREFIX
			 "SignedHeaders=host;x-amz-date, Signature="
			 "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8a"
			 "ae1d763fbf31");
}

Test(suite, get_vanilla_query_order_key_case)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_request req =
		suite_req("GET", "/", "Param2=value2&Param1=value1");

	expect_canonical(&req, &cr, "20150830T123600Z",
			 "GET\n/\nParam1=value1&Param2=value2\n"
			 "host:example.amazonaws.com\n"
			 "x-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
			 SIGV4_EMPTY_SHA256);
	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec9"
		    "4cdf2500");
}

Test(suite, get_vanilla_query_order_value)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_request req =
		suite_req("GET", "/", "Param1=value2&Param1=Value1");

	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15"
		    "b2382bd1");
}

Test(suite, get_vanilla_query_unreserved)
{
	struct rc_creds cr = suite_creds(NULL);
	const char *unres = "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "abcdefghijklmnopqrstuvwxyz";
	char query[256];
	struct sigv4_request req;

	snprintf(query, sizeof(query), "%s=%s", unres, unres);
	req = suite_req("GET", "/", query);
	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb1"
		    "43a40197");
}

Test(suite, get_utf8_path)
{
	struct rc_creds cr = suite_creds(NULL);
	char path[64];
	struct sigv4_request req;

	/* The path arrives encoded; "\xe1\x88\xb4" is U+1234. */
	cr_assert_eq(sigv4_uri_encode("/\xe1\x88\xb4", 4, 1, path,
				      sizeof(path)), 10);
	cr_assert_str_eq(path, "/%E1%88%B4");
	req = suite_req("GET", path, NULL);
	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd031"
		    "41be5d85");
}

Test(suite, get_vanilla_utf8_query)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_request req = suite_req("GET", "/", "\xe1\x88\xb4=bar");

	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c902"
		    "7818dd04");
}

Test(suite, get_space)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_request req = suite_req("GET", "/example space/", NULL);

	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "652487583200325589f1fba4c7e578f72c47cb61beeca81406b39dde"
		    "c1366741");
}

Test(suite, get_header_value_trim)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_header h[] = {
		{ "My-Header1", " value1" },
		{ "My-Header2", " \"a   b   c\"" },
	};
	struct sigv4_request req = suite_req("GET", "/", NULL);

	req.headers = h;
	req.n_headers = 2;
	expect_canonical(&req, &cr, "20150830T123600Z",
			 "GET\n/\n\nhost:example.amazonaws.com\n"
			 "my-header1:value1\nmy-header2:\"a b c\"\n"
			 "x-amz-date:20150830T123600Z\n\n"
			 "host;my-header1;my-header2;x-amz-date\n"
			 SIGV4_EMPTY_SHA256);
	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
		    "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367"
		    "055dee359757a9c736");
}

Test(suite, get_header_key_duplicate)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_header h[] = {
		{ "My-Header1", "value2" },
		{ "My-Header1", "value2" },
		{ "My-Header1", "value1" },
	};
	struct sigv4_request req = suite_req("GET", "/", NULL);

	req.headers = h;
	req.n_headers = 3;
	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;my-header1;x-amz-date, Signature="
		    "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531"
		    "a5138ea");
}

Test(suite, post_vanilla)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_request req = suite_req("POST", "/", NULL);

	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92"
		    "efbe5d6b");
}

Test(suite, post_vanilla_query)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_request req = suite_req("POST", "/", "Param1=value1");

	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date, Signature="
		    "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d1"
		    "38af7f11");
}

/* The suite's signatures for the two form posts were computed over
 * content-type only (their .sreq files show it); later .creq files added
 * content-length without updating .sts/.authz. The signatures are the
 * vectors used here: they depend on every byte of the canonical request. */
static void sign_form_post(const char *content_type, const char *expected)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_header h[] = { { "Content-Type", content_type } };
	struct sigv4_request req = suite_req("POST", "/", NULL);

	req.headers = h;
	req.n_headers = 1;
	req.payload_sha256 = "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329"
			     "106275f4c7b24d0b6e";
	expect_auth(&req, &cr, expected);
}

Test(suite, post_x_www_form_urlencoded)
{
	sign_form_post("application/x-www-form-urlencoded", SUITE_PREFIX
		       "SignedHeaders=content-type;host;x-amz-date, Signature="
		       "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196"
		       "a0fe09473a");
}

Test(suite, post_x_www_form_urlencoded_parameters)
{
	sign_form_post("application/x-www-form-urlencoded; charset=utf8",
		       SUITE_PREFIX
		       "SignedHeaders=content-type;host;x-amz-date, Signature="
		       "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d"
		       "39fa77a6fe");
}

Test(suite, canonical_headers_merge_and_sort)
{
	struct rc_creds cr = suite_creds(NULL);
	struct sigv4_header h[] = {
		{ "Content-Type", "text/plain" },
		{ "Content-Length", "13" },
		{ "X-B", "2" },
		{ "x-b", "1" },
	};
	struct sigv4_request req = suite_req("POST", "/", NULL);
	char canon[2048], sh[256];

	req.headers = h;
	req.n_headers = 4;
	cr_assert_eq(sigv4_canonical_request(&req, &cr, "20150830T123600Z",
					     canon, sizeof(canon), sh,
					     sizeof(sh)), 0);
	cr_assert_str_eq(sh, "content-length;content-type;host;x-amz-date;"
			     "x-b");
	cr_assert(strstr(canon, "\ncontent-length:13\ncontent-type:text/plain"
				"\nhost:example.amazonaws.com\n"
				"x-amz-date:20150830T123600Z\nx-b:2,1\n\n"),
		  "%s", canon);
}

Test(suite, post_sts_header_before)
{
	struct rc_creds cr = suite_creds(STS_TOKEN);
	struct sigv4_request req = suite_req("POST", "/", NULL);

	expect_auth(&req, &cr, SUITE_PREFIX
		    "SignedHeaders=host;x-amz-date;x-amz-security-token, "
		    "Signature=85d96828115b5dc0cfc3bd16ad9e210dd772bbebba0418"
		    "36c64533a82be05ead");
}

Test(s3, get_object_range)
{
	struct rc_creds cr = s3_creds();
	struct sigv4_header h[] = { { "Range", "bytes=0-9" } };
	struct sigv4_request req = s3_req("GET", "/test.txt", NULL);
	struct sigv4_result res;

	req.headers = h;
	req.n_headers = 1;
	expect_canonical(&req, &cr, "20130524T000000Z",
			 "GET\n/test.txt\n\n"
			 "host:examplebucket.s3.amazonaws.com\n"
			 "range:bytes=0-9\n"
			 "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
			 "x-amz-date:20130524T000000Z\n\n"
			 "host;range;x-amz-content-sha256;x-amz-date\n"
			 SIGV4_EMPTY_SHA256);
	cr_assert_eq(sigv4_sign(&req, &cr, &res), 0);
	cr_assert_str_eq(res.amz_date, "20130524T000000Z");
	cr_assert_str_eq(res.authorization, S3_PREFIX
			 "SignedHeaders=host;range;x-amz-content-sha256;"
			 "x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed"
			 "310bd44f0170aba48dd91039c6036bdb41");
}

Test(s3, put_object)
{
	struct rc_creds cr = s3_creds();
	struct sigv4_header h[] = {
		{ "Date", "Fri, 24 May 2013 00:00:00 GMT" },
		{ "x-amz-storage-class", "REDUCED_REDUNDANCY" },
	};
	/* The key is "test$file.text": '$' is signed as %24. */
	struct sigv4_request req = s3_req("PUT", "/test%24file.text", NULL);
	char payload_hash[65];
	struct sigv4_result res;

	sigv4_sha256_hex("Welcome to Amazon S3.", 21, payload_hash);
	req.headers = h;
	req.n_headers = 2;
	req.payload_sha256 = payload_hash;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), 0);
	cr_assert_str_eq(res.content_sha256, payload_hash);
	cr_assert_str_eq(res.authorization, S3_PREFIX
			 "SignedHeaders=date;host;x-amz-content-sha256;"
			 "x-amz-date;x-amz-storage-class, Signature=98ad721746"
			 "da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108"
			 "bd");
	/* Unencoded input gives the same canonical URI. */
	req.path = "/test$file.text";
	expect_auth(&req, &cr, res.authorization);
}

Test(s3, get_bucket_lifecycle)
{
	struct rc_creds cr = s3_creds();
	struct sigv4_request req = s3_req("GET", "/", "lifecycle");

	expect_canonical(&req, &cr, "20130524T000000Z",
			 "GET\n/\nlifecycle=\n"
			 "host:examplebucket.s3.amazonaws.com\n"
			 "x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
			 "x-amz-date:20130524T000000Z\n\n"
			 "host;x-amz-content-sha256;x-amz-date\n"
			 SIGV4_EMPTY_SHA256);
	expect_auth(&req, &cr, S3_PREFIX
		    "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
		    "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91"
		    "ac7a200a0136783543");
}

Test(s3, list_objects)
{
	struct rc_creds cr = s3_creds();
	struct sigv4_request req = s3_req("GET", "/", "prefix=J&max-keys=2");

	expect_auth(&req, &cr, S3_PREFIX
		    "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
		    "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6"
		    "670ed5711ef69dc6f7");
}

Test(s3, session_token_is_signed)
{
	struct rc_creds cr = s3_creds();
	struct sigv4_request req = s3_req("GET", "/test.txt", NULL);
	char canon[8192], sh[256];

	strcpy(cr.session_token, "tok en");
	cr_assert_eq(sigv4_canonical_request(&req, &cr, "20130524T000000Z",
					     canon, sizeof(canon), sh,
					     sizeof(sh)), 0);
	cr_assert_str_eq(sh, "host;x-amz-content-sha256;x-amz-date;"
			     "x-amz-security-token");
	cr_assert(strstr(canon, "\nx-amz-security-token:tok en\n"));
}

Test(query, encodes_decoded_and_raw_alike)
{
	struct rc_creds cr = s3_creds();
	struct sigv4_request req = s3_req("GET", "/", "prefix=a%20b/c&uploads"
					  "&list-type=2&k=x+y");
	char canon[8192], sh[256];

	cr_assert_eq(sigv4_canonical_request(&req, &cr, "20130524T000000Z",
					     canon, sizeof(canon), sh,
					     sizeof(sh)), 0);
	cr_assert(strstr(canon, "\nk=x%2By&list-type=2&prefix=a%20b%2Fc"
				"&uploads=\n"), "%s", canon);
}

Test(uri_encode, reserved_utf8_slash_space_tilde)
{
	char out[128];

	cr_assert_eq(sigv4_uri_encode("a b~c", 5, 0, out, sizeof(out)), 7);
	cr_assert_str_eq(out, "a%20b~c");
	cr_assert_eq(sigv4_uri_encode("!*'();:@&=+$,/?#[]", 18, 0, out,
				      sizeof(out)), 54);
	cr_assert_str_eq(out, "%21%2A%27%28%29%3B%3A%40%26%3D%2B%24%2C%2F"
			      "%3F%23%5B%5D");
	cr_assert_eq(sigv4_uri_encode("/a/b c", 6, 1, out, sizeof(out)), 8);
	cr_assert_str_eq(out, "/a/b%20c");
	cr_assert_eq(sigv4_uri_encode("/a/b", 4, 0, out, sizeof(out)), 8);
	cr_assert_str_eq(out, "%2Fa%2Fb");
	cr_assert_eq(sigv4_uri_encode("\xc3\xa9", 2, 0, out, sizeof(out)), 6);
	cr_assert_str_eq(out, "%C3%A9");
	cr_assert_eq(sigv4_uri_encode("AZaz09-_.~", 10, 0, out, sizeof(out)),
		     10);
	cr_assert_str_eq(out, "AZaz09-_.~");
}

Test(uri_encode, embedded_nul_and_too_small)
{
	char out[8];

	cr_assert_eq(sigv4_uri_encode("a\0b", 3, 0, out, sizeof(out)), 5);
	cr_assert_str_eq(out, "a%00b");
	/* "%20%20" needs 7 bytes with its NUL: 6 are not enough. */
	cr_assert_eq(sigv4_uri_encode("  ", 2, 0, out, 6), -EINVAL);
	cr_assert_eq(sigv4_uri_encode("  ", 2, 0, out, 7), 6);
}

Test(limits, too_long_inputs_give_einval)
{
	static char big[20000];
	struct rc_creds cr = s3_creds();
	struct sigv4_request req = s3_req("GET", "/", NULL);
	struct sigv4_result res;
	char canon[256], sh[64];

	memset(big, 'a', sizeof(big) - 1);
	req.path = big;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.path = "/";
	req.query = big;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.query = NULL;
	/* A canonical request longer than the caller's buffer. */
	cr_assert_eq(sigv4_canonical_request(&req, &cr, "20130524T000000Z",
					     canon, sizeof(canon), sh,
					     sizeof(sh)), -EINVAL);
	/* A secret that fills its array with no terminator. */
	memset(cr.secret_key, 'k', sizeof(cr.secret_key));
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
}

Test(limits, largest_expected_request_fits)
{
	struct rc_creds cr = s3_creds();
	char key[1025], path[4096], token[4096];
	struct sigv4_request req;
	struct sigv4_result res;

	/* 1 KiB key of characters that all need escaping, 4 KiB token. */
	memset(key, ' ', 1024);
	key[1024] = '\0';
	cr_assert_eq(sigv4_uri_encode(key, 1024, 1, path + 1,
				      sizeof(path) - 1), 3072);
	path[0] = '/';
	memset(token, 'T', sizeof(token) - 1);
	token[sizeof(token) - 1] = '\0';
	strcpy(cr.session_token, token);
	req = s3_req("GET", path, "list-type=2&prefix=abc&max-keys=1000");
	cr_assert_eq(sigv4_sign(&req, &cr, &res), 0);
	cr_assert(strstr(res.authorization, "x-amz-security-token"));
}

Test(bad_input, rejected_not_signed)
{
	struct rc_creds cr = s3_creds();
	struct sigv4_request req = s3_req("GET", "/", NULL);
	struct sigv4_header inject[] = { { "X-A", "v\r\nEvil: 1" } };
	struct sigv4_header badname[] = { { "Bad Name", "v" } };
	struct sigv4_header dup_host[] = { { "Host", "other" } };
	struct sigv4_result res;
	char canon[512], sh[128];

	req.headers = inject;
	req.n_headers = 1;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.headers = badname;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.headers = dup_host;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.headers = NULL;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.n_headers = 0;
	req.payload_sha256 = NULL;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.payload_sha256 = SIGV4_EMPTY_SHA256;
	req.host = NULL;
	cr_assert_eq(sigv4_sign(&req, &cr, &res), -EINVAL);
	req.host = "h";
	cr_assert_eq(sigv4_canonical_request(&req, &cr, "2013-05-24", canon,
					     sizeof(canon), sh, sizeof(sh)),
		     -EINVAL);
	cr_assert_eq(sigv4_sign(NULL, &cr, &res), -EINVAL);
}

/* sha256x gives OpenSSL's SHA-256 of every body, interleaved and not:
 * the lengths around the padding's edges, bodies cut at odd places, lanes
 * that end at different blocks and take the next body (a short body next
 * to a long one), one body alone, and bodies each in a buffer of exactly
 * its size (a read past a piece's end shows under ASan). */
static void sha256x_matches_openssl(bool lanes)
{
	const uint8_t *data = digest_input();
	sha256x_use_lanes(lanes);
#if defined(__x86_64__)
	unsigned a, b7, c, d;
	bool sha = __get_cpuid_count(7, 0, &a, &b7, &c, &d) && (b7 & bit_SHA);
	cr_assert_eq(sha256x_lanes(), lanes && sha ? 2u : 1u,
		     "sha256x does not use the lanes this CPU has");
#endif
	struct s3_piece pieces[BODIES][4];
	unsigned n_pieces[BODIES];
	struct sha256x_body b[BODIES];
	for (size_t base = 0; base < 300; base += 37) {
		cut_bodies(data, base, pieces, n_pieces);
		for (unsigned k = 0; k < BODIES; k++)
			b[k] = (struct sha256x_body){.pieces = pieces[k],
						     .n_pieces = n_pieces[k]};
		for (unsigned n = 1; n <= BODIES; n += n < 18 ? 1 : 11) {
			memset(b[0].sha256, 0, sizeof(b[0].sha256));
			sha256x(b, n);
			for (unsigned k = 0; k < n; k++) {
				unsigned char want[32];
				cr_assert_eq(s3_sha256_pieces(b[k].pieces,
							      b[k].n_pieces,
							      want), 0);
				cr_assert(b[k].ok);
				cr_assert_arr_eq(b[k].sha256, want, 32,
						 "body %u of %u (base %zu, "
						 "lanes %u) differs",
						 k, n, base, sha256x_lanes());
			}
		}
	}
	for (size_t len = 0; len < 200; len += 13) {
		uint8_t *own[5];
		struct s3_piece one[5];
		for (unsigned k = 0; k < 5; k++) {
			size_t n = len + k * 61;
			own[k] = malloc(n ? n : 1);
			cr_assert_not_null(own[k]);
			memcpy(own[k], data + k, n);
			one[k] = (struct s3_piece){own[k], n};
			b[k] = (struct sha256x_body){.pieces = &one[k],
						     .n_pieces = 1};
		}
		sha256x(b, 5);
		for (unsigned k = 0; k < 5; k++) {
			char want[65], got[65];
			sigv4_sha256_hex(own[k], len + k * 61, want);
			sigv4_sha256_to_hex(b[k].sha256, b[k].ok, got);
			cr_assert_str_eq(got, want, "%zu bytes", len + k * 61);
			free(own[k]);
		}
	}
	static const char known[] = "Welcome to Amazon S3.";
	struct s3_piece welcome = {known, 21};
	struct sha256x_body two[2] = {{.pieces = NULL, .n_pieces = 0},
				      {.pieces = &welcome, .n_pieces = 1}};
	sha256x(two, 2);
	char hex[65];
	sigv4_sha256_to_hex(two[0].sha256, two[0].ok, hex);
	cr_assert_str_eq(hex, SIGV4_EMPTY_SHA256);
	sigv4_sha256_to_hex(two[1].sha256, two[1].ok, hex);
	cr_assert_str_eq(hex, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b"
			      "4b4e99e42034a8b803f8b072");
	sha256x_use_lanes(true);
}

Test(sha256, interleaved_gives_openssls_sha256)
{
	sha256x_matches_openssl(true);
}

Test(sha256, one_at_a_time_gives_openssls_sha256)
{
	sha256x_matches_openssl(false);
}
