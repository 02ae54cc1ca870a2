/* test_s3.c - src/s3/s3.c against a real S3-compatible server (the one named
 * by RINGCACHE_TEST_S3_*, started by tests/run): PUT/HEAD, ranged and
 * conditional GETs, error mapping, ListObjectsV2 paging and delimiters,
 * signature rejection, retries against a dead endpoint, awkward keys.
 *
 * Every object lives under $RINGCACHE_TEST_PREFIX "s3test/<pid>/", so runs
 * (and Criterion's parallel test processes) never see each other's keys. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "creds.h"
#include "fixture/fixture.h"
#include "s3.h"

/* ---- environment and client helpers ---- */

static const char *test_env(const char *name)
{
	const char *v = getenv(name);

	cr_assert(v && *v, "%s is not set: run the integration tests with "
		  "tests/run (it starts the S3 server and sets "
		  "RINGCACHE_TEST_S3_*)", name);
	return v;
}

struct test_client {
	struct creds_provider *creds;
	struct s3_client *s3;
};

struct client_opts {
	const char *endpoint;   /* NULL: from the env */
	const char *secret_key; /* NULL: from the env */
	unsigned max_retries;
	unsigned backoff_base_ms, backoff_cap_ms;
};

static void client_open_opts(struct test_client *tc,
			     const struct client_opts *o)
{
	struct creds_config cc = {
		.source = CREDS_CONFIG,
		.access_key = test_env("RINGCACHE_TEST_S3_ACCESS_KEY"),
		.secret_key = o->secret_key ? o->secret_key
					    : test_env("RINGCACHE_TEST_S3_SECRET_KEY"),
		.timeout_ms = 2000,
	};
	struct s3_config sc = {
		.endpoint = o->endpoint ? o->endpoint
					: test_env("RINGCACHE_TEST_S3_ENDPOINT"),
		.region = test_env("RINGCACHE_TEST_S3_REGION"),
		.addressing = S3_PATH_STYLE,
		.tls_verify = true,
		.connect_timeout_ms = 2000,
		.request_timeout_ms = 20000,
		.low_speed_time_s = 10,
		.max_retries = o->max_retries,
		.backoff_base_ms = o->backoff_base_ms,
		.backoff_cap_ms = o->backoff_cap_ms,
	};
	char err[256] = "";

	cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
	tc->creds = creds_provider_new(&cc, err, sizeof(err));
	cr_assert_not_null(tc->creds, "creds_provider_new: %s", err);
	sc.creds = tc->creds;
	tc->s3 = s3_client_new(&sc, err, sizeof(err));
	cr_assert_not_null(tc->s3, "s3_client_new: %s", err);
}

static void client_open(struct test_client *tc)
{
	struct client_opts o = { .max_retries = 3, .backoff_base_ms = 20,
				 .backoff_cap_ms = 200 };

	client_open_opts(tc, &o);
}

static void client_close(struct test_client *tc)
{
	s3_client_free(tc->s3);
	creds_provider_free(tc->creds);
	curl_global_cleanup();
}

static const char *bucket(void)
{
	return test_env("RINGCACHE_TEST_S3_BUCKET");
}

/* PREFIX "s3test/<pid>/" name, into a caller buffer. */
static void test_key(char *buf, size_t len, const char *name)
{
	int n = snprintf(buf, len, "%ss3test/%ld/%s",
			 test_env("RINGCACHE_TEST_PREFIX"), (long)getpid(),
			 name);

	cr_assert(n > 0 && (size_t)n < len, "key too long: %s", name);
}

static void md5_etag(const void *data, size_t len, char *out, size_t outlen)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t pos;

	cr_assert_eq(EVP_Digest(data, len, md, &mdlen, EVP_md5(), NULL), 1);
	cr_assert(outlen >= 2 * mdlen + 3);
	out[0] = '"';
	pos = 1;
	for (unsigned int i = 0; i < mdlen; i++, pos += 2)
		snprintf(out + pos, 3, "%02x", md[i]);
	out[pos++] = '"';
	out[pos] = '\0';
}

static void put_object(struct test_client *tc, const char *key,
		       const void *body, size_t len, struct s3_result *res)
{
	struct s3_req_params p = { .op = S3_PUT_OBJECT, .bucket = bucket(),
				   .key = key, .body = body, .body_len = len };
	int rc = s3_perform(tc->s3, &p, res, NULL, NULL);

	cr_assert_eq(rc, 0, "PUT %s: err %d http %ld code '%s' msg '%s'", key,
		     rc, res->http_status, res->code, res->message);
}

/* GET (range_len 0: whole object) into a malloc'd buffer the caller frees. */
static int get_object(struct test_client *tc, const char *key, uint64_t off,
		      uint64_t len, const char *if_match,
		      struct s3_result *res, char **body, size_t *body_len)
{
	struct s3_req_params p = { .op = S3_GET_OBJECT, .bucket = bucket(),
				   .key = key, .range_off = off,
				   .range_len = len, .if_match = if_match };

	*body = NULL;
	*body_len = 0;
	return s3_perform(tc->s3, &p, res, body, body_len);
}

static int head_object(struct test_client *tc, const char *key,
		       struct s3_result *res)
{
	struct s3_req_params p = { .op = S3_HEAD_OBJECT, .bucket = bucket(),
				   .key = key };

	return s3_perform(tc->s3, &p, res, NULL, NULL);
}

/* ---- PUT, HEAD, GET ---- */

Test(s3, put_then_head_gives_size_and_etag)
{
	struct test_client tc;
	struct s3_result put_res, head_res;
	enum { LEN = 100000 };
	static unsigned char data[LEN];
	char key[512], md5[64];

	client_open(&tc);
	fx_fill_pattern(data, LEN, 1);
	md5_etag(data, LEN, md5, sizeof(md5));
	test_key(key, sizeof(key), "put-head.bin");

	put_object(&tc, key, data, LEN, &put_res);
	cr_expect_eq(put_res.http_status, 200);

	cr_assert_eq(head_object(&tc, key, &head_res), 0, "HEAD: %d %s",
		     head_res.err, head_res.code);
	cr_expect_eq(head_res.http_status, 200);
	cr_expect_eq(head_res.object_size, LEN);
	cr_expect_str_eq(head_res.etag, md5, "HEAD ETag %s, MD5 %s",
			 head_res.etag, md5);
	cr_expect_str_eq(put_res.etag, head_res.etag);
	client_close(&tc);
}

Test(s3, get_whole_object_returns_the_bytes)
{
	struct test_client tc;
	struct s3_result res;
	enum { LEN = 300001 };
	static unsigned char data[LEN];
	char key[512], *body;
	size_t body_len;

	client_open(&tc);
	fx_fill_pattern(data, LEN, 2);
	test_key(key, sizeof(key), "whole.bin");
	put_object(&tc, key, data, LEN, &res);

	cr_assert_eq(get_object(&tc, key, 0, 0, NULL, &res, &body, &body_len),
		     0, "GET: %d %s", res.err, res.code);
	cr_expect_eq(res.http_status, 200);
	cr_assert_eq(body_len, LEN);
	cr_expect_eq(res.body_bytes, LEN);
	cr_expect_eq(memcmp(body, data, LEN), 0, "GET bytes differ from PUT");
	free(body);
	client_close(&tc);
}

Test(s3, ranged_get_returns_exactly_those_bytes)
{
	struct test_client tc;
	struct s3_result res;
	enum { LEN = 10000 };
	static unsigned char data[LEN];
	char key[512], *body;
	size_t body_len;

	client_open(&tc);
	fx_fill_pattern(data, LEN, 3);
	test_key(key, sizeof(key), "range.bin");
	put_object(&tc, key, data, LEN, &res);

	cr_assert_eq(get_object(&tc, key, 100, 500, NULL, &res, &body,
				&body_len), 0, "GET range: %d", res.err);
	cr_expect_eq(res.http_status, 206);
	cr_expect_eq(res.object_size, LEN, "total from Content-Range");
	cr_assert_eq(body_len, 500);
	cr_expect_eq(memcmp(body, data + 100, 500), 0);
	free(body);

	/* The last byte alone. */
	cr_assert_eq(get_object(&tc, key, LEN - 1, 1, NULL, &res, &body,
				&body_len), 0);
	cr_assert_eq(body_len, 1);
	cr_expect_eq((unsigned char)body[0], data[LEN - 1]);
	free(body);
	client_close(&tc);
}

Test(s3, range_past_the_end_is_clamped)
{
	struct test_client tc;
	struct s3_result res;
	enum { LEN = 10000 };
	static unsigned char data[LEN];
	char key[512], *body;
	size_t body_len;

	client_open(&tc);
	fx_fill_pattern(data, LEN, 4);
	test_key(key, sizeof(key), "range-clamp.bin");
	put_object(&tc, key, data, LEN, &res);

	cr_assert_eq(get_object(&tc, key, LEN - 100, 500, NULL, &res, &body,
				&body_len), 0, "GET: %d", res.err);
	cr_expect_eq(res.http_status, 206);
	cr_expect_eq(res.object_size, LEN);
	cr_assert_eq(body_len, 100, "clamped to the 100 bytes that exist");
	cr_expect_eq(memcmp(body, data + LEN - 100, 100), 0);
	free(body);
	client_close(&tc);
}

Test(s3, range_starting_past_the_end_is_erange)
{
	struct test_client tc;
	struct s3_result res;
	enum { LEN = 10000 };
	static unsigned char data[LEN];
	char key[512], *body;
	size_t body_len;
	int rc;

	client_open(&tc);
	fx_fill_pattern(data, LEN, 5);
	test_key(key, sizeof(key), "range-416.bin");
	put_object(&tc, key, data, LEN, &res);

	rc = get_object(&tc, key, LEN, 10, NULL, &res, &body, &body_len);
	cr_expect_eq(rc, -ERANGE, "got %d", rc);
	cr_expect_eq(res.err, -ERANGE);
	cr_expect_eq(res.http_status, 416);
	cr_expect_not(res.retryable);
	free(body);
	client_close(&tc);
}

struct sink_buf {
	unsigned char *data;
	size_t cap, got;
	bool out_of_order;
};

static int sink_collect(void *ctx, uint64_t body_off, const void *data,
			size_t len)
{
	struct sink_buf *s = ctx;

	if (body_off != s->got)
		s->out_of_order = true;
	if (body_off + len > s->cap)
		return -1;
	memcpy(s->data + body_off, data, len);
	s->got += len;
	return 0;
}

Test(s3, ranged_get_into_a_sink)
{
	struct test_client tc;
	struct s3_result res;
	enum { LEN = 3 << 20, OFF = 1 << 20, RLEN = (1 << 20) + 17 };
	unsigned char *data = malloc(LEN);
	struct sink_buf sink = { .data = malloc(RLEN), .cap = RLEN };
	char key[512];

	cr_assert(data && sink.data);
	client_open(&tc);
	fx_fill_pattern(data, LEN, 6);
	test_key(key, sizeof(key), "sink.bin");
	put_object(&tc, key, data, LEN, &res);

	struct s3_req_params p = { .op = S3_GET_OBJECT, .bucket = bucket(),
				   .key = key, .range_off = OFF,
				   .range_len = RLEN, .sink = sink_collect,
				   .sink_ctx = &sink };
	cr_assert_eq(s3_perform(tc.s3, &p, &res, NULL, NULL), 0, "GET: %d %s",
		     res.err, res.message);
	cr_expect_not(sink.out_of_order, "sink offsets are body offsets, in order");
	cr_assert_eq(sink.got, RLEN);
	cr_expect_eq(res.body_bytes, RLEN);
	cr_expect_eq(memcmp(sink.data, data + OFF, RLEN), 0);
	free(sink.data);
	free(data);
	client_close(&tc);
}

/* ---- conditional requests and errors ---- */

Test(s3, if_match_wrong_etag_is_estale)
{
	struct test_client tc;
	struct s3_result res;
	static unsigned char data[4096];
	char key[512], etag[128], *body;
	size_t body_len;
	int rc;

	client_open(&tc);
	fx_fill_pattern(data, sizeof(data), 7);
	test_key(key, sizeof(key), "if-match.bin");
	put_object(&tc, key, data, sizeof(data), &res);
	snprintf(etag, sizeof(etag), "%s", res.etag);

	rc = get_object(&tc, key, 0, 100, "\"0123456789abcdef0123456789abcdef\"",
			&res, &body, &body_len);
	cr_expect_eq(rc, -ESTALE, "got %d http %ld", rc, res.http_status);
	cr_expect_eq(res.http_status, 412);
	cr_expect_not(res.retryable);
	free(body);

	/* The right ETag is served. */
	rc = get_object(&tc, key, 0, 100, etag, &res, &body, &body_len);
	cr_assert_eq(rc, 0, "If-Match %s: %d", etag, rc);
	cr_assert_eq(body_len, 100);
	cr_expect_eq(memcmp(body, data, 100), 0);
	free(body);
	client_close(&tc);
}

Test(s3, missing_key_is_enoent)
{
	struct test_client tc;
	struct s3_result res;
	char key[512], *body;
	size_t body_len;
	int rc;

	client_open(&tc);
	test_key(key, sizeof(key), "no-such-key");

	rc = get_object(&tc, key, 0, 0, NULL, &res, &body, &body_len);
	cr_expect_eq(rc, -ENOENT, "GET got %d", rc);
	cr_expect_eq(res.http_status, 404);
	cr_expect_str_eq(res.code, "NoSuchKey");
	cr_expect_not(res.retryable);
	free(body);

	rc = head_object(&tc, key, &res);
	cr_expect_eq(rc, -ENOENT, "HEAD got %d", rc);
	cr_expect_eq(res.http_status, 404);
	client_close(&tc);
}

Test(s3, deleted_key_is_enoent)
{
	struct test_client tc;
	struct s3_result res;
	char key[512];

	client_open(&tc);
	test_key(key, sizeof(key), "deleted");
	put_object(&tc, key, "x", 1, &res);
	cr_assert_eq(head_object(&tc, key, &res), 0);

	struct s3_req_params p = { .op = S3_DELETE_OBJECT, .bucket = bucket(),
				   .key = key };
	cr_assert_eq(s3_perform(tc.s3, &p, &res, NULL, NULL), 0, "DELETE: %d",
		     res.err);
	cr_expect_eq(head_object(&tc, key, &res), -ENOENT);
	client_close(&tc);
}

Test(s3, wrong_secret_is_ekeyrejected)
{
	struct test_client tc;
	struct client_opts o = { .secret_key = "not-the-secret-key-at-all",
				 .max_retries = 2, .backoff_base_ms = 10,
				 .backoff_cap_ms = 50 };
	struct s3_result res;
	char key[512], *body;
	size_t body_len;
	int rc;

	client_open_opts(&tc, &o);
	test_key(key, sizeof(key), "wrong-secret");

	struct s3_req_params p = { .op = S3_PUT_OBJECT, .bucket = bucket(),
				   .key = key, .body = "data", .body_len = 4 };
	rc = s3_perform(tc.s3, &p, &res, NULL, NULL);
	cr_expect_eq(rc, -EKEYREJECTED, "PUT got %d", rc);
	cr_expect_eq(res.http_status, 403);
	cr_expect_str_eq(res.code, "SignatureDoesNotMatch");
	cr_expect_not(res.retryable);

	rc = get_object(&tc, key, 0, 0, NULL, &res, &body, &body_len);
	cr_expect_eq(rc, -EKEYREJECTED, "GET got %d", rc);
	cr_expect_str_eq(res.code, "SignatureDoesNotMatch");
	free(body);
	client_close(&tc);
}

/* ---- retries against a dead endpoint ---- */

/* A port on 127.0.0.1 that nothing listens on (bound, then closed). */
static int closed_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t slen = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert(fd >= 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &slen), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

Test(s3, unreachable_endpoint_is_retryable_eio)
{
	struct test_client tc;
	char endpoint[64], key[512];
	struct client_opts o = { .endpoint = endpoint, .max_retries = 3,
				 .backoff_base_ms = 5, .backoff_cap_ms = 20 };
	struct s3_result res;
	double t0;
	int rc;

	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d",
		 closed_port());
	client_open_opts(&tc, &o);
	test_key(key, sizeof(key), "unreachable");

	struct s3_req_params p = { .op = S3_HEAD_OBJECT, .bucket = bucket(),
				   .key = key };
	t0 = rc_now_s();
	rc = s3_perform(tc.s3, &p, &res, NULL, NULL);
	cr_expect_eq(rc, -ECONNREFUSED, "got %d", rc);
	cr_expect(res.retryable);
	cr_expect_eq(res.http_status, 0);
	cr_expect_eq(res.curl_code, CURLE_COULDNT_CONNECT, "curl code %d",
		     res.curl_code);
	cr_expect(rc_now_s() - t0 < 5.0, "backoff is capped (took %.2fs)",
		  rc_now_s() - t0);
	client_close(&tc);
}

/* A server that accepts connections and closes them at once, counting
 * them: each attempt of s3_perform is one connection. */
struct counting_server {
	int fd, port, accepted;
	volatile bool stop;
	pthread_t thread;
};

static void *counting_server_main(void *arg)
{
	struct counting_server *cs = arg;

	while (!cs->stop) {
		int c = accept(cs->fd, NULL, NULL);

		if (c < 0)
			continue;
		__atomic_add_fetch(&cs->accepted, 1, __ATOMIC_SEQ_CST);
		close(c);
	}
	return NULL;
}

static void counting_server_start(struct counting_server *cs)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t slen = sizeof(sa);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };

	memset(cs, 0, sizeof(*cs));
	cs->fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert(cs->fd >= 0);
	/* accept() wakes every 100 ms so the thread sees stop. */
	cr_assert_eq(setsockopt(cs->fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
				sizeof(tv)), 0);
	cr_assert_eq(bind(cs->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(cs->fd, 16), 0);
	cr_assert_eq(getsockname(cs->fd, (struct sockaddr *)&sa, &slen), 0);
	cs->port = ntohs(sa.sin_port);
	cr_assert_eq(pthread_create(&cs->thread, NULL, counting_server_main,
				    cs), 0);
}

static int counting_server_stop(struct counting_server *cs)
{
	cs->stop = true;
	pthread_join(cs->thread, NULL);
	close(cs->fd);
	return __atomic_load_n(&cs->accepted, __ATOMIC_SEQ_CST);
}

Test(s3, dropped_connections_retry_max_retries_times)
{
	struct counting_server cs;
	struct test_client tc;
	char endpoint[64], key[512];
	struct client_opts o = { .endpoint = endpoint, .max_retries = 4,
				 .backoff_base_ms = 5, .backoff_cap_ms = 20 };
	struct s3_result res;
	int rc, attempts;

	counting_server_start(&cs);
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", cs.port);
	client_open_opts(&tc, &o);
	test_key(key, sizeof(key), "dropped");

	struct s3_req_params p = { .op = S3_GET_OBJECT, .bucket = bucket(),
				   .key = key };
	rc = s3_perform(tc.s3, &p, &res, NULL, NULL);
	attempts = counting_server_stop(&cs);
	cr_expect_eq(rc, -EIO, "got %d", rc);
	cr_expect(res.retryable);
	cr_expect_eq(attempts, o.max_retries + 1,
		     "one attempt plus max_retries retries, saw %d", attempts);
	client_close(&tc);
}

Test(s3, backoff_is_capped)
{
	struct test_client tc;
	struct client_opts o = { .max_retries = 5, .backoff_base_ms = 10,
				 .backoff_cap_ms = 100 };
	unsigned max_seen = 0;

	client_open_opts(&tc, &o);
	for (unsigned attempt = 1; attempt <= 12; attempt++) {
		for (int i = 0; i < 50; i++) {
			unsigned ms = s3_backoff_ms(tc.s3, attempt);

			cr_assert_leq(ms, o.backoff_cap_ms, "attempt %u: %u ms",
				      attempt, ms);
			if (attempt == 1)
				cr_assert_leq(ms, 2 * o.backoff_base_ms);
			if (ms > max_seen)
				max_seen = ms;
		}
	}
	cr_expect_gt(max_seen, o.backoff_base_ms, "backoff grows");
	client_close(&tc);
}

/* ---- keys ---- */

Test(s3, awkward_keys_round_trip)
{
	static const char *const names[] = {
		"with space/and more spaces.bin",
		"plus+sign+c++.bin",
		"unicode/ünï©ødé 文件 ☃.bin",
		"odd=chars&q?x%41~!$'(),;@.bin",
	};
	struct test_client tc;
	struct s3_result res;
	char key[512], *body;
	size_t body_len;

	client_open(&tc);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		unsigned char data[777];

		fx_fill_pattern(data, sizeof(data), 100 + (unsigned)i);
		test_key(key, sizeof(key), names[i]);
		put_object(&tc, key, data, sizeof(data), &res);
		cr_assert_eq(head_object(&tc, key, &res), 0, "HEAD '%s': %d",
			     key, res.err);
		cr_expect_eq(res.object_size, sizeof(data));
		cr_assert_eq(get_object(&tc, key, 0, 0, NULL, &res, &body,
					&body_len), 0, "GET '%s': %d", key,
			     res.err);
		cr_assert_eq(body_len, sizeof(data), "'%s'", key);
		cr_expect_eq(memcmp(body, data, sizeof(data)), 0, "'%s'", key);
		free(body);

		/* Listing by the exact key finds it, spelled the same. */
		struct s3_req_params lp = { .op = S3_LIST_OBJECTS_V2,
					    .bucket = bucket(), .prefix = key };
		struct s3_list_page page;
		char err[128];
		cr_assert_eq(s3_perform(tc.s3, &lp, &res, &body, &body_len), 0,
			     "LIST '%s': %d", key, res.err);
		cr_assert_eq(s3_parse_list(body, body_len, &page, err,
					   sizeof(err)), 0, "%s", err);
		cr_expect_eq(page.n_objects, 1, "'%s'", key);
		if (page.n_objects == 1)
			cr_expect_str_eq(page.objects[0].key, key);
		s3_list_page_free(&page);
		free(body);
	}
	client_close(&tc);
}

/* ---- ListObjectsV2 ---- */

enum { N_LIST = 1100, PUT_PARALLEL = 32 };

/* PUTs n keys (body: the key itself) with up to PUT_PARALLEL requests in
 * flight on one curl multi handle: the same path the reactor drives. */
static void put_many(struct test_client *tc, char **keys, size_t n)
{
	CURLM *multi = curl_multi_init();
	size_t next = 0, done = 0, failed = 0;
	int running = 0;

	cr_assert_not_null(multi);
	while (done < n) {
		while (next < n && running < PUT_PARALLEL) {
			struct s3_req_params p = {
				.op = S3_PUT_OBJECT, .bucket = bucket(),
				.key = keys[next], .body = keys[next],
				.body_len = strlen(keys[next]) };
			char err[128] = "";
			struct s3_req *r = s3_req_new(tc->s3, &p, err,
						      sizeof(err));

			cr_assert_not_null(r, "s3_req_new: %s", err);
			s3_req_set_private(r, (void *)(uintptr_t)next);
			cr_assert_eq(curl_easy_setopt(s3_req_easy(r),
						      CURLOPT_PRIVATE, r),
				     CURLE_OK);
			cr_assert_eq(curl_multi_add_handle(multi,
							   s3_req_easy(r)),
				     CURLM_OK);
			next++;
			running++;
		}
		int still;
		cr_assert_eq(curl_multi_perform(multi, &still), CURLM_OK);
		cr_assert_eq(curl_multi_poll(multi, NULL, 0, 1000, NULL),
			     CURLM_OK);

		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(multi, &left))) {
			struct s3_req *r;
			struct s3_result res;

			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE,
					  (char **)&r);
			s3_req_result(r, m->data.result, &res);
			size_t idx = (uintptr_t)s3_req_get_private(r);
			curl_multi_remove_handle(multi, m->easy_handle);
			s3_req_free(r);
			running--;
			done++;
			if (res.err == 0)
				continue;
			/* One request failing under load is the server's
			 * business; retry it the blocking way. */
			put_object(tc, keys[idx], keys[idx], strlen(keys[idx]),
				   &res);
			failed++;
		}
	}
	curl_multi_cleanup(multi);
	cr_expect_lt(failed, n / 10, "%zu of %zu parallel PUTs failed", failed,
		     n);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

Test(s3, list_objects_v2_pages_1100_keys)
{
	struct test_client tc;
	char prefix[512], **keys = calloc(N_LIST, sizeof(char *));
	char **listed = calloc(2 * N_LIST, sizeof(char *));
	size_t n_listed = 0, pages = 0, page_sizes[8] = { 0 };
	char *token = NULL;

	cr_assert(keys && listed);
	client_open(&tc);
	test_key(prefix, sizeof(prefix), "list/");
	for (size_t i = 0; i < N_LIST; i++) {
		cr_assert_neq(asprintf(&keys[i], "%sobj-%05zu", prefix, i), -1);
	}
	put_many(&tc, keys, N_LIST);

	do {
		struct s3_req_params p = { .op = S3_LIST_OBJECTS_V2,
					   .bucket = bucket(), .prefix = prefix,
					   .max_keys = 1000,
					   .continuation_token = token };
		struct s3_result res;
		struct s3_list_page page;
		char *body, err[128];
		size_t body_len;

		cr_assert_eq(s3_perform(tc.s3, &p, &res, &body, &body_len), 0,
			     "LIST page %zu: %d %s", pages, res.err, res.code);
		cr_assert_eq(s3_parse_list(body, body_len, &page, err,
					   sizeof(err)), 0, "%s", err);
		free(body);
		cr_assert_lt(pages, 8, "too many pages");
		page_sizes[pages++] = page.n_objects;
		cr_assert_leq(n_listed + page.n_objects, 2 * N_LIST);
		for (size_t i = 0; i < page.n_objects; i++) {
			listed[n_listed++] = strdup(page.objects[i].key);
			cr_expect_eq(page.objects[i].size,
				     strlen(page.objects[i].key));
		}
		free(token);
		token = NULL;
		if (page.truncated) {
			cr_assert_not_null(page.next_token,
					   "truncated page without a token");
			token = strdup(page.next_token);
		}
		s3_list_page_free(&page);
	} while (token);

	cr_expect_eq(pages, 2, "1100 keys in pages of 1000");
	cr_expect_eq(page_sizes[0], 1000);
	cr_expect_eq(page_sizes[1], 100);
	cr_assert_eq(n_listed, N_LIST, "listed %zu keys", n_listed);
	qsort(listed, n_listed, sizeof(char *), cmp_str);
	for (size_t i = 0; i < N_LIST; i++)
		cr_assert_str_eq(listed[i], keys[i], "key %zu", i);

	for (size_t i = 0; i < N_LIST; i++)
		free(keys[i]);
	for (size_t i = 0; i < n_listed; i++)
		free(listed[i]);
	free(keys);
	free(listed);
	client_close(&tc);
}

Test(s3, delimiter_gives_common_prefixes)
{
	static const char *const names[] = { "a/1", "a/2", "b/c/1", "top1",
					     "top2" };
	struct test_client tc;
	struct s3_result res;
	struct s3_list_page page;
	char prefix[512], key[600], *body, err[128];
	size_t body_len;

	client_open(&tc);
	test_key(prefix, sizeof(prefix), "delim/");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(key, sizeof(key), "%s%s", prefix, names[i]);
		put_object(&tc, key, "d", 1, &res);
	}

	struct s3_req_params p = { .op = S3_LIST_OBJECTS_V2, .bucket = bucket(),
				   .prefix = prefix, .delimiter = "/" };
	cr_assert_eq(s3_perform(tc.s3, &p, &res, &body, &body_len), 0,
		     "LIST: %d %s", res.err, res.code);
	cr_assert_eq(s3_parse_list(body, body_len, &page, err, sizeof(err)),
		     0, "%s", err);
	free(body);

	cr_expect_not(page.truncated);
	cr_assert_eq(page.n_objects, 2);
	snprintf(key, sizeof(key), "%stop1", prefix);
	cr_expect_str_eq(page.objects[0].key, key);
	snprintf(key, sizeof(key), "%stop2", prefix);
	cr_expect_str_eq(page.objects[1].key, key);
	cr_assert_eq(page.n_prefixes, 2);
	snprintf(key, sizeof(key), "%sa/", prefix);
	cr_expect_str_eq(page.prefixes[0], key);
	snprintf(key, sizeof(key), "%sb/", prefix);
	cr_expect_str_eq(page.prefixes[1], key);
	s3_list_page_free(&page);
	client_close(&tc);
}

/* A bucket that is not there is not a key that is not there: ENODEV. */
Test(s3, missing_bucket_is_enodev)
{
	struct test_client tc;
	struct s3_result res;
	char name[64];
	int rc;

	client_open(&tc);
	snprintf(name, sizeof(name), "ringcache-none-%ld-%ld", (long)getpid(),
		 (long)time(NULL));
	struct s3_req_params p = { .op = S3_HEAD_BUCKET, .bucket = name };
	rc = s3_perform(tc.s3, &p, &res, NULL, NULL);
	cr_expect_eq(rc, -ENODEV, "got %d http %ld", rc, res.http_status);
	cr_expect_eq(res.http_status, 404);
	/* A GET names it too (NoSuchBucket), a key or not. */
	p = (struct s3_req_params){ .op = S3_GET_OBJECT, .bucket = name,
				    .key = "k" };
	rc = s3_perform(tc.s3, &p, &res, NULL, NULL);
	cr_expect_eq(rc, -ENODEV, "got %d http %ld", rc, res.http_status);
	cr_expect_str_eq(res.code, "NoSuchBucket");
	client_close(&tc);
}
