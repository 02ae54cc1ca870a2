/* test_s3xml.c - S3 XML parsing (ListObjectsV2 pages, error documents) and
 * the pieces of s3.c that need no server: backoff bounds, request building
 * and the classification of canned responses. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3.h"

#define NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

static int parse(const char *xml, struct s3_list_page *pg, char *err)
{
	return s3_parse_list(xml, strlen(xml), pg, err, 256);
}

Test(s3xml, list_objects_and_etags)
{
	const char *xml =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<ListBucketResult " NS "><Name>b</Name><Prefix>ds/</Prefix>"
		"<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>"
		"<IsTruncated>false</IsTruncated>"
		"<Contents><Key>ds/a.bin</Key><LastModified>2024-01-01T00:00:00.000Z"
		"</LastModified><ETag>&quot;0123abcd&quot;</ETag><Size>570001</Size>"
		"<StorageClass>STANDARD</StorageClass></Contents>"
		"<Contents><Size>0</Size><Key>ds/empty</Key></Contents>"
		"</ListBucketResult>";
	struct s3_list_page pg;
	char err[256] = "";

	cr_assert_eq(parse(xml, &pg, err), 0, "%s", err);
	cr_assert_eq(pg.n_objects, 2);
	cr_assert_str_eq(pg.objects[0].key, "ds/a.bin");
	cr_assert_eq(pg.objects[0].size, 570001);
	cr_assert_str_eq(pg.objects[0].etag, "\"0123abcd\"");
	cr_assert_str_eq(pg.objects[1].key, "ds/empty");
	cr_assert_eq(pg.objects[1].size, 0);
	cr_assert_str_eq(pg.objects[1].etag, "");
	cr_assert_eq(pg.n_prefixes, 0);
	cr_assert(!pg.truncated);
	cr_assert_null(pg.next_token);
	s3_list_page_free(&pg);
}

Test(s3xml, list_common_prefixes)
{
	const char *xml =
		"<ListBucketResult " NS "><Prefix>ds/</Prefix>"
		"<Delimiter>/</Delimiter><IsTruncated>false</IsTruncated>"
		"<Contents><Key>ds/top</Key><Size>3</Size></Contents>"
		"<CommonPrefixes><Prefix>ds/large/</Prefix></CommonPrefixes>"
		"<CommonPrefixes><Prefix>ds/small/</Prefix></CommonPrefixes>"
		"</ListBucketResult>";
	struct s3_list_page pg;
	char err[256] = "";

	cr_assert_eq(parse(xml, &pg, err), 0, "%s", err);
	cr_assert_eq(pg.n_objects, 1);
	cr_assert_str_eq(pg.objects[0].key, "ds/top");
	/* The top-level <Prefix> is the request's, not a common prefix. */
	cr_assert_eq(pg.n_prefixes, 2);
	cr_assert_str_eq(pg.prefixes[0], "ds/large/");
	cr_assert_str_eq(pg.prefixes[1], "ds/small/");
	s3_list_page_free(&pg);
}

Test(s3xml, list_truncated_with_token)
{
	const char *xml =
		"<ListBucketResult " NS "><IsTruncated>true</IsTruncated>"
		"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
		"<Contents><Key>k</Key><Size>1</Size></Contents>"
		"</ListBucketResult>";
	struct s3_list_page pg;
	char err[256] = "";

	cr_assert_eq(parse(xml, &pg, err), 0, "%s", err);
	cr_assert(pg.truncated);
	cr_assert_str_eq(pg.next_token,
			 "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	s3_list_page_free(&pg);
}

Test(s3xml, list_truncated_without_token_is_an_error)
{
	const char *xml = "<ListBucketResult><IsTruncated>true</IsTruncated>"
			  "</ListBucketResult>";
	struct s3_list_page pg;
	char err[256] = "";

	/* Otherwise a caller paging until !truncated would loop forever. */
	cr_assert_eq(parse(xml, &pg, err), -EPROTO);
	cr_assert(strstr(err, "NextContinuationToken"), "%s", err);
	cr_assert_eq(pg.n_objects, 0);
}

Test(s3xml, list_entities_in_keys)
{
	const char *xml =
		"<ListBucketResult><IsTruncated>false</IsTruncated>"
		"<Contents><Key>a&amp;b &lt;c&gt; &quot;d&apos; &#x41;&#66;</Key><Size>7</Size></Contents>"
		"<Contents><Key>caf\xc3\xa9/\xe2\x82\xac.bin</Key><Size>8</Size></Contents>"
		"</ListBucketResult>";
	struct s3_list_page pg;
	char err[256] = "";

	cr_assert_eq(parse(xml, &pg, err), 0, "%s", err);
	cr_assert_eq(pg.n_objects, 2);
	cr_assert_str_eq(pg.objects[0].key, "a&b <c> \"d' AB");
	cr_assert_str_eq(pg.objects[1].key, "caf\xc3\xa9/\xe2\x82\xac.bin");
	s3_list_page_free(&pg);
}

Test(s3xml, list_empty_result)
{
	const char *xml = "<ListBucketResult " NS "><Name>b</Name><Prefix>none/</Prefix>"
			  "<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"
			  "</ListBucketResult>";
	struct s3_list_page pg;
	char err[256] = "";

	cr_assert_eq(parse(xml, &pg, err), 0, "%s", err);
	cr_assert_eq(pg.n_objects, 0);
	cr_assert_eq(pg.n_prefixes, 0);
	cr_assert(!pg.truncated);
	s3_list_page_free(&pg);
}

Test(s3xml, list_thousand_entries)
{
	size_t cap = 1 << 20, len = 0;
	char *xml = malloc(cap);
	cr_assert_not_null(xml);
	len += (size_t)snprintf(xml + len, cap - len,
				"<ListBucketResult " NS "><IsTruncated>true</IsTruncated>"
				"<NextContinuationToken>tok</NextContinuationToken>");
	for (int i = 0; i < 1000; i++)
		len += (size_t)snprintf(xml + len, cap - len,
					"<Contents><Key>small/%05d.bin</Key>"
					"<ETag>\"e%d\"</ETag><Size>%d</Size></Contents>",
					i, i, 560000 + i * 7);
	len += (size_t)snprintf(xml + len, cap - len, "</ListBucketResult>");

	struct s3_list_page pg;
	char err[256] = "";
	cr_assert_eq(s3_parse_list(xml, len, &pg, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(pg.n_objects, 1000);
	for (int i = 0; i < 1000; i++) {
		char key[32], etag[32];
		snprintf(key, sizeof(key), "small/%05d.bin", i);
		snprintf(etag, sizeof(etag), "\"e%d\"", i);
		cr_assert_str_eq(pg.objects[i].key, key);
		cr_assert_str_eq(pg.objects[i].etag, etag);
		cr_assert_eq(pg.objects[i].size, (uint64_t)(560000 + i * 7));
	}
	s3_list_page_free(&pg);
	free(xml);
}

Test(s3xml, list_malformed_is_eproto)
{
	const char *bad[] = {
		"<ListBucketResult><Contents><Key>a</Key>",          /* cut off */
		"<ListBucketResult><Contents></Key></ListBucketResult>",
		"not xml at all",
		"<ListBucketResult><Contents><Key>a</Key><Size>12x</Size>"
		"</Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Key>a</Key><Size>-1</Size>"
		"</Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Key>a</Key><Size>99999999999999999999999"
		"</Size></Contents></ListBucketResult>",
		"<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
		"<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
		"<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult><Contents>"
		"<Key>&a;</Key><Size>1</Size></Contents></ListBucketResult>",
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_list_page pg;
		char err[256] = "";
		cr_assert_eq(parse(bad[i], &pg, err), -EPROTO, "case %zu", i);
		cr_assert(err[0], "case %zu: no message", i);
		cr_assert_eq(pg.n_objects, 0, "case %zu", i);
		cr_assert_null(pg.objects, "case %zu", i);
	}
}

Test(s3xml, list_wrong_root_is_eproto)
{
	struct s3_list_page pg;
	char err[256] = "";

	cr_assert_eq(parse("<Error><Code>NoSuchBucket</Code></Error>", &pg, err),
		     -EPROTO);
	cr_assert(strstr(err, "Error"), "%s", err);
	cr_assert(strstr(err, "ListBucketResult"), "%s", err);
}

/* UploadPartCopy's answer: the part's ETag, quoted as a header's. */
Test(s3xml, copy_part_result)
{
	const char *ok = "<CopyPartResult xmlns=\"http://s3.amazonaws.com/doc/"
			 "2006-03-01/\"><LastModified>2024-01-01T00:00:00Z"
			 "</LastModified><ETag>9b2cf535f27731c974343645a3985328"
			 "</ETag></CopyPartResult>";
	const char *none = "<CopyPartResult><LastModified>x</LastModified>"
			   "</CopyPartResult>";
	const char *other = "<CopyObjectResult><ETag>\"e\"</ETag>"
			    "</CopyObjectResult>";
	char etag[128], err[256];

	cr_assert_eq(s3_parse_copy_part_result(ok, strlen(ok), etag,
					       sizeof(etag), err,
					       sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(etag, "\"9b2cf535f27731c974343645a3985328\"");
	cr_assert_eq(s3_parse_copy_part_result(none, strlen(none), etag,
					       sizeof(etag), err, sizeof(err)),
		     -EPROTO);
	cr_assert_eq(s3_parse_copy_part_result(other, strlen(other), etag,
					       sizeof(etag), err, sizeof(err)),
		     -EPROTO);
}

Test(s3xml, error_with_message)
{
	const char *xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			  "<Error><Code>SignatureDoesNotMatch</Code>"
			  "<Message>The request signature we calculated does not match</Message>"
			  "<RequestId>tx1</RequestId></Error>";
	char code[64], msg[256];

	cr_assert_eq(s3_parse_error(xml, strlen(xml), code, sizeof(code), msg,
				    sizeof(msg)), 0);
	cr_assert_str_eq(code, "SignatureDoesNotMatch");
	cr_assert_str_eq(msg, "The request signature we calculated does not match");
}

Test(s3xml, error_without_message)
{
	/* RGW's shape: an empty <Message/> or none at all. */
	const char *xml1 = "<Error><Code>NoSuchKey</Code><Message></Message>"
			   "<BucketName>b</BucketName></Error>";
	const char *xml2 = "<Error><Code>AccessDenied</Code></Error>";
	char code[64], msg[256];

	cr_assert_eq(s3_parse_error(xml1, strlen(xml1), code, sizeof(code), msg,
				    sizeof(msg)), 0);
	cr_assert_str_eq(code, "NoSuchKey");
	cr_assert_str_eq(msg, "");
	cr_assert_eq(s3_parse_error(xml2, strlen(xml2), code, sizeof(code), msg,
				    sizeof(msg)), 0);
	cr_assert_str_eq(code, "AccessDenied");
}

Test(s3xml, error_truncates_long_fields)
{
	const char *xml = "<Error><Code>ABCDEFGHIJ</Code><Message>0123456789</Message></Error>";
	char code[5], msg[4];

	cr_assert_eq(s3_parse_error(xml, strlen(xml), code, sizeof(code), msg,
				    sizeof(msg)), 0);
	cr_assert_str_eq(code, "ABCD");
	cr_assert_str_eq(msg, "012");
}

Test(s3xml, error_malformed_and_wrong_root)
{
	const char *bad[] = {
		"<Error><Code>SlowDown</Code>",
		"<html><body>502 Bad Gateway</body></html>",
		"<ListBucketResult></ListBucketResult>",
		"\x01\x02garbage",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char code[64] = "x", msg[64] = "x";
		cr_assert_eq(s3_parse_error(bad[i], strlen(bad[i]), code,
					    sizeof(code), msg, sizeof(msg)),
			     -EPROTO, "case %zu", i);
	}
}

/* ---- no-server checks of the client --------------------------------- */

static struct s3_client *client(const char *endpoint, unsigned base,
				unsigned cap)
{
	struct s3_config cfg = {
		.endpoint = endpoint,
		.region = "us-east-1",
		.backoff_base_ms = base,
		.backoff_cap_ms = cap,
	};
	char err[256] = "";
	struct s3_client *c = s3_client_new(&cfg, err, sizeof(err));
	cr_assert_not_null(c, "%s", err);
	return c;
}

Test(s3client, backoff_is_capped_full_jitter)
{
	struct s3_client *c = client("http://127.0.0.1:1", 50, 1000);
	unsigned max_seen[8] = {0};

	for (int n = 0; n < 2000; n++) {
		for (unsigned a = 1; a < 8; a++) {
			unsigned d = s3_backoff_ms(c, a);
			unsigned ceiling = 50u << (a - 1);
			if (ceiling > 1000)
				ceiling = 1000;
			cr_assert_leq(d, ceiling, "attempt %u: %u ms", a, d);
			if (d > max_seen[a])
				max_seen[a] = d;
		}
	}
	/* Jitter spreads over the whole window, up to near its top. */
	cr_assert_geq(max_seen[1], 40);
	cr_assert_geq(max_seen[7], 800);
	s3_client_free(c);
}

Test(s3client, bad_endpoints_are_rejected)
{
	const char *bad[] = { "ftp://x", "not a url", "http://h:9000/some/path" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_config cfg = { .endpoint = bad[i], .region = "us-east-1" };
		char err[256] = "";
		cr_assert_null(s3_client_new(&cfg, err, sizeof(err)), "%s", bad[i]);
		cr_assert(err[0]);
	}
}

Test(s3client, default_endpoint_from_region)
{
	struct s3_config cfg = { .region = "eu-west-3" };
	char err[256] = "";
	struct s3_client *c = s3_client_new(&cfg, err, sizeof(err));

	cr_assert_not_null(c, "%s", err);
	cr_assert_str_eq(s3_client_config(c)->endpoint,
			 "https://s3.eu-west-3.amazonaws.com");
	cr_assert_eq(s3_client_config(c)->connect_timeout_ms, 3000);
	s3_client_free(c);
}

static char *effective_url(struct s3_client *c, const struct s3_req_params *p)
{
	char err[256] = "";
	struct s3_req *r = s3_req_new(c, p, err, sizeof(err));
	cr_assert_not_null(r, "%s", err);
	char *url = NULL;
	cr_assert_eq(curl_easy_getinfo(s3_req_easy(r), CURLINFO_EFFECTIVE_URL,
				       &url), CURLE_OK);
	char *copy = strdup(url);
	s3_req_free(r);
	return copy;
}

Test(s3client, urls_encode_keys_and_queries)
{
	struct s3_client *c = client("http://127.0.0.1:9080", 0, 0);
	struct s3_req_params get = { .op = S3_GET_OBJECT, .bucket = "bk",
				     .key = "dir/a b+c&d.bin" };
	char *u = effective_url(c, &get);
	cr_assert_str_eq(u, "http://127.0.0.1:9080/bk/dir/a%20b%2Bc%26d.bin");
	free(u);

	struct s3_req_params list = { .op = S3_LIST_OBJECTS_V2, .bucket = "bk",
				      .prefix = "ds/x y", .delimiter = "/",
				      .continuation_token = "a+b/c=",
				      .max_keys = 10 };
	u = effective_url(c, &list);
	cr_assert_str_eq(u, "http://127.0.0.1:9080/bk?continuation-token=a%2Bb%2Fc%3D"
			 "&delimiter=%2F&list-type=2&max-keys=10&prefix=ds%2Fx%20y");
	free(u);
	s3_client_free(c);

	struct s3_config vcfg = { .endpoint = "https://s3.example.com",
				  .region = "us-east-1",
				  .addressing = S3_VIRTUAL_HOSTED };
	char err[256];
	c = s3_client_new(&vcfg, err, sizeof(err));
	cr_assert_not_null(c, "%s", err);
	u = effective_url(c, &get);
	cr_assert_str_eq(u, "https://bk.s3.example.com/dir/a%20b%2Bc%26d.bin");
	free(u);
	s3_client_free(c);
}

Test(s3client, bad_params_are_rejected)
{
	struct s3_client *c = client("http://127.0.0.1:9080", 0, 0);
	char longkey[1100];
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	struct s3_req_params bad[] = {
		{ .op = S3_GET_OBJECT, .bucket = "bk", .key = "" },
		{ .op = S3_GET_OBJECT, .bucket = "bk", .key = NULL },
		{ .op = S3_GET_OBJECT, .bucket = "bk", .key = longkey },
		{ .op = S3_GET_OBJECT, .bucket = "b/k", .key = "x" },
		{ .op = S3_GET_OBJECT, .bucket = "", .key = "x" },
		{ .op = S3_GET_OBJECT, .bucket = "bk", .key = "x",
		  .if_match = "\"e\"\r\nX-Evil: 1" },
		{ .op = S3_GET_OBJECT, .bucket = "bk", .key = "x",
		  .range_off = UINT64_MAX - 1, .range_len = 10 },
		{ .op = (enum s3_op)99, .bucket = "bk", .key = "x" },
		{ .op = S3_UPLOAD_PART_COPY, .bucket = "bk", .key = "x",
		  .upload_id = "u", .part_number = 1, .copy_source = "bk/y" },
		{ .op = S3_UPLOAD_PART_COPY, .bucket = "bk", .key = "x",
		  .upload_id = "u", .part_number = 1, .copy_source = "y",
		  .copy_range_len = 5 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[256] = "";
		cr_assert_null(s3_req_new(c, &bad[i], err, sizeof(err)), "case %zu", i);
		cr_assert(err[0], "case %zu", i);
	}
	s3_client_free(c);
}

Test(s3client, connection_refused_is_retryable_eio)
{
	/* Port 1 on loopback: nothing listens, the connect fails at once. */
	struct s3_config cfg = { .endpoint = "http://127.0.0.1:1",
				 .region = "us-east-1", .max_retries = 2,
				 .backoff_base_ms = 1, .backoff_cap_ms = 2 };
	char err[256] = "";
	struct s3_client *c = s3_client_new(&cfg, err, sizeof(err));
	cr_assert_not_null(c, "%s", err);
	struct s3_req_params p = { .op = S3_HEAD_OBJECT, .bucket = "bk", .key = "k" };
	struct s3_result res;
	cr_assert_eq(s3_perform(c, &p, &res, NULL, NULL), -ECONNREFUSED);
	cr_assert(res.retryable);
	cr_assert_eq(res.curl_code, CURLE_COULDNT_CONNECT);
	cr_assert_eq(res.http_status, 0);
	cr_assert(res.message[0]);
	s3_client_free(c);
}
