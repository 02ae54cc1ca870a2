/* test_upload.c - the upload engine (src/store/upload.c) against the real S3
 * server from the env, driven by a small poll loop over a curl multi handle
 * (upload.h's upload_loop; the reactor is the daemon's driver): single PUTs
 * and multipart uploads read back byte for byte with their ETags checked,
 * eight at once, through injected faults (rc-proxy), failures and cancels
 * that leave no multipart upload behind, clean-up of an abandoned upload,
 * rename of a completed object, and a read_slow source read only on the
 * driver's workers.
 *
 * Every key is unique under $RINGCACHE_TEST_PREFIX "upload/". */
#include <criterion/criterion.h>

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../fixture/fixture.h"
#include "creds.h"
#include "s3.h"
#include "upload.h"
#include "../../tools/upload_run.h"

#define MiB (1024u * 1024u)
/* The driver is upload.h's upload_loop, the one upload_run uses. */
static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- clients and the engine ---- */

struct env {
	struct creds_provider *creds;
	struct s3_client *s3;        /* what the engine uses */
	struct s3_client *direct;    /* checks, straight to S3 */
	struct upload_loop *loop;
	struct upload_engine *e;
};

static struct s3_client *client_new(struct env *t, const char *endpoint,
				    unsigned retries)
{
	const struct fx_env *env = fx_env();
	struct s3_config sc = {
		.endpoint = endpoint ? endpoint : env->endpoint,
		.region = env->region, .addressing = S3_PATH_STYLE,
		.tls_verify = true, .connect_timeout_ms = 2000,
		.request_timeout_ms = 20000, .max_retries = retries,
		.backoff_base_ms = 10, .backoff_cap_ms = 100, .creds = t->creds,
	};
	char err[256] = "";
	struct s3_client *c = s3_client_new(&sc, err, sizeof(err));
	cr_assert_not_null(c, "s3_client_new: %s", err);
	return c;
}

static void env_open(struct env *t, const char *endpoint, unsigned retries)
{
	const struct fx_env *env = fx_env();
	struct creds_config cc = { .source = CREDS_CONFIG,
				   .access_key = env->access_key,
				   .secret_key = env->secret_key,
				   .timeout_ms = 2000 };
	char err[256] = "";

	memset(t, 0, sizeof(*t));
	cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
	t->creds = creds_provider_new(&cc, err, sizeof(err));
	cr_assert_not_null(t->creds, "creds: %s", err);
	t->s3 = client_new(t, endpoint, retries);
	t->direct = client_new(t, NULL, 3);
	t->loop = upload_loop_new();
	cr_assert_not_null(t->loop);
	t->e = upload_engine_new(t->s3, upload_loop_driver(t->loop),
				 "itest-upload");
	cr_assert_not_null(t->e);
}

/* Runs the loop until every upload reported and nothing is left. */
static void env_drain(struct env *t)
{
	uint64_t end = now_ms() + 50000;
	while (upload_engine_active(t->e) || upload_engine_pending(t->e)) {
		cr_assert(now_ms() < end, "uploads still running after 50 s");
		upload_loop_turn(t->loop);
	}
	cr_assert_eq(upload_loop_in_flight(t->loop), 0);
}

static void env_close(struct env *t)
{
	env_drain(t);
	upload_engine_free(t->e);
	upload_loop_free(t->loop);
	if (t->s3 != t->direct)
		s3_client_free(t->s3);
	s3_client_free(t->direct);
	creds_provider_free(t->creds);
	curl_global_cleanup();
}

/* ---- objects and checks ---- */

static void ukey(char *buf, size_t len, const char *name)
{
	char u[96];
	fx_unique(u, sizeof(u), name);
	int n = snprintf(buf, len, "%supload/%s", fx_env()->prefix, u);
	cr_assert(n > 0 && (size_t)n < len);
}

/* GET the whole object and HEAD it: bytes and ETag as expected. */
static void assert_object(struct env *t, const char *key,
			  const unsigned char *data, size_t size,
			  size_t part_size)
{
	struct s3_req_params get = { .op = S3_GET_OBJECT,
				     .bucket = fx_env()->bucket, .key = key };
	struct s3_req_params hd = get;
	struct s3_result res;
	char *body = NULL, want[64];
	size_t len = 0;

	hd.op = S3_HEAD_OBJECT;
	cr_assert_eq(s3_perform(t->direct, &get, &res, &body, &len), 0,
		     "GET %s: %s %s", key, res.code, res.message);
	cr_assert_eq(len, size, "%s: %zu bytes in S3, uploaded %zu", key, len, size);
	cr_assert_eq(fx_mismatch(body, data, size), -1, "%s: bytes differ", key);
	free(body);
	cr_assert_eq(s3_perform(t->direct, &hd, &res, NULL, NULL), 0);
	fx_s3_etag(data, size, part_size, want);
	cr_assert_str_eq(res.etag, want, "%s: ETag", key);
}

/* Multipart uploads in progress for exactly this key, or (exact false)
 * for every key under it. */
static size_t uploads_under(struct env *t, const char *key, bool exact)
{
	struct s3_req_params p = { .op = S3_LIST_MULTIPART,
				   .bucket = fx_env()->bucket, .prefix = key };
	struct s3_result res;
	struct s3_upload_page pg;
	char *body = NULL, err[256] = "";
	size_t len = 0, n = 0;

	cr_assert_eq(s3_perform(t->direct, &p, &res, &body, &len), 0);
	cr_assert_eq(s3_parse_uploads(body, len, &pg, err, sizeof(err)), 0,
		     "%s", err);
	free(body);
	for (size_t i = 0; i < pg.n_uploads; i++)
		n += !exact || strcmp(pg.uploads[i].key, key) == 0;
	s3_upload_page_free(&pg);
	return n;
}

static size_t uploads_of(struct env *t, const char *key)
{
	return uploads_under(t, key, true);
}

static int head_err(struct env *t, const char *key)
{
	struct s3_req_params p = { .op = S3_HEAD_OBJECT,
				   .bucket = fx_env()->bucket, .key = key };
	struct s3_result res;
	return s3_perform(t->direct, &p, &res, NULL, NULL);
}

/* ---- one upload's bookkeeping ---- */

struct job {
	const unsigned char *data;
	size_t size;
	int fail_at_off_ge;     /* read callback: -EIO from this offset (>0) */
	uint64_t max_read_off;  /* highest offset the engine asked for */
	size_t piece;           /* view: the source shows pieces this long */
	uint64_t refuse_view_at; /* view: ranges over this offset are read */
	unsigned views, reads;
	bool done;
	struct upload_outcome out;
};

static int job_read(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct job *j = ctx;
	cr_assert(off + len <= j->size);
	if (off > j->max_read_off)
		j->max_read_off = off;
	if (j->fail_at_off_ge > 0 && off >= (uint64_t)j->fail_at_off_ge)
		return -EIO;
	memcpy(dst, j->data + off, len);
	j->reads++;
	return 0;
}

/* The source in place, in pieces that do not line up with the parts. */
static int job_view(void *ctx, uint64_t off, size_t len,
		    struct s3_piece *pieces, unsigned max)
{
	struct job *j = ctx;
	cr_assert(off + len <= j->size);
	if (j->refuse_view_at && off <= j->refuse_view_at &&
	    j->refuse_view_at < off + len)
		return 0;
	unsigned n = 0;
	while (len) {
		size_t take = j->piece - off % j->piece;
		if (take > len)
			take = len;
		if (n < max)
			pieces[n] = (struct s3_piece){j->data + off, take};
		n++;
		off += take;
		len -= take;
	}
	j->views += max ? 1 : 0;
	return (int)n;
}

static void job_done(void *ctx, const struct upload_outcome *out)
{
	struct job *j = ctx;
	cr_assert(!j->done, "done reported twice");
	j->done = true;
	j->out = *out;
}

static struct upload *job_start(struct env *t, struct job *j, const char *key,
				size_t part, unsigned conc, bool use_read)
{
	struct upload_params p = {
		.bucket = fx_env()->bucket, .key = key, .size = j->size,
		.data = use_read ? NULL : j->data,
		.read = use_read ? job_read : NULL, .read_ctx = j,
		.view = use_read && j->piece ? job_view : NULL,
		.part_size = part, .concurrency = conc,
		.done = job_done, .done_ctx = j,
	};
	int err = 0;
	struct upload *u = upload_start(t->e, &p, &err);
	cr_assert_not_null(u, "upload_start %s: %s", key, strerror(-err));
	cr_assert(!j->done, "done reported inside upload_start");
	return u;
}

/* Uploads size bytes, checks outcome, bytes and ETag. */
static void roundtrip(struct env *t, const char *name, size_t size,
		      size_t part, unsigned conc, bool use_read)
{
	char key[512];
	unsigned char *data = fx_pattern(size, (unsigned)size);
	struct job j = { .data = data, .size = size };

	ukey(key, sizeof(key), name);
	job_start(t, &j, key, part, conc, use_read);
	env_drain(t);
	cr_assert(j.done);
	cr_assert_eq(j.out.err, 0, "%s: %s %s %s", name, strerror(-j.out.err),
		     j.out.code, j.out.message);
	char want[64];
	fx_s3_etag(data, size, part, want);
	cr_assert_str_eq(j.out.etag, want, "%s: reported ETag", name);
	assert_object(t, key, data, size, part);
	cr_assert_eq(uploads_of(t, key), 0);
	free(data);
}

TestSuite(upload, .timeout = 120);

Test(upload, sizes_byte_identical)
{
	struct env t;
	env_open(&t, NULL, 3);
	roundtrip(&t, "zero", 0, 5 * MiB, 4, false);
	roundtrip(&t, "one", 1, 5 * MiB, 4, true);
	roundtrip(&t, "exactly-one-part", 5 * MiB, 5 * MiB, 4, true);
	roundtrip(&t, "one-part-plus-1", 5 * MiB + 1, 5 * MiB, 4, false);
	roundtrip(&t, "many-uneven", 23 * MiB, 5 * MiB, 4, true);
	env_close(&t);
}

/* Parts sent from the source's own memory (view), in pieces across part
 * edges, and read where the source cannot show a range in place. */
Test(upload, view_sends_pieces_in_place)
{
	struct env t;
	char key[512];
	size_t size = 13 * MiB + 5;
	unsigned char *data = fx_pattern(size, 4242);
	struct job j = { .data = data, .size = size, .piece = MiB + 7,
			 .refuse_view_at = 11 * MiB };

	env_open(&t, NULL, 3);
	ukey(key, sizeof(key), "view");
	job_start(&t, &j, key, 5 * MiB, 4, true);
	env_drain(&t);
	cr_assert_eq(j.out.err, 0, "%s %s", j.out.code, j.out.message);
	cr_assert_eq(j.out.parts, 3);
	cr_assert_eq(j.views, 2, "parts 1 and 2 in place: %u", j.views);
	cr_assert_eq(j.reads, 1, "part 3 read: %u", j.reads);
	char want[64];
	fx_s3_etag(data, size, 5 * MiB, want);
	cr_assert_str_eq(j.out.etag, want);
	assert_object(&t, key, data, size, 5 * MiB);
	free(data);
	env_close(&t);
}

Test(upload, eight_at_once)
{
	struct env t;
	struct job j[8];
	char keys[8][512];
	unsigned char *data[8];

	env_open(&t, NULL, 3);
	for (int i = 0; i < 8; i++) {
		size_t size = 11 * MiB + (size_t)i * 4099;
		data[i] = fx_pattern(size, 100u + (unsigned)i);
		j[i] = (struct job){ .data = data[i], .size = size };
		ukey(keys[i], sizeof(keys[i]), "eight");
		job_start(&t, &j[i], keys[i], 5 * MiB, 2, i % 2);
	}
	cr_assert_eq(upload_engine_active(t.e), 8);
	env_drain(&t);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(j[i].out.err, 0, "upload %d: %s %s", i,
			     j[i].out.code, j[i].out.message);
		cr_assert_eq(j[i].out.parts, 3);
		assert_object(&t, keys[i], data[i], j[i].size, 5 * MiB);
		free(data[i]);
	}
	env_close(&t);
}

static uint64_t proxy_faults(const struct fx_proxy *px)
{
	const char *stats = fx_proxy_control(px, "stats\n");
	return fx_proxy_stat(stats, "fault_503") +
	       fx_proxy_stat(stats, "fault_slowdown") +
	       fx_proxy_stat(stats, "fault_reset") +
	       fx_proxy_stat(stats, "fault_truncate");
}

/* One round: a small PUT, a one-part PUT and a 4-part upload at once. */
static unsigned faulty_round(struct env *t, unsigned round)
{
	struct job j[3];
	char keys[3][512];
	unsigned char *data[3];
	size_t sizes[3] = { 1000, 5 * MiB, 17 * MiB + 3 };
	unsigned retries = 0;

	for (int i = 0; i < 3; i++) {
		data[i] = fx_pattern(sizes[i], 7u * round + (unsigned)i);
		j[i] = (struct job){ .data = data[i], .size = sizes[i] };
		if (round % 2 == 0) /* retried parts resent from the source */
			j[i].piece = 3 * MiB + 1;
		ukey(keys[i], sizeof(keys[i]), "faults");
		job_start(t, &j[i], keys[i], 5 * MiB, 4, i == 2);
	}
	env_drain(t);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(j[i].out.err, 0, "upload %d: %s %s", i,
			     j[i].out.code, j[i].out.message);
		assert_object(t, keys[i], data[i], sizes[i], 5 * MiB);
		retries += j[i].out.retries;
		free(data[i]);
	}
	return retries;
}

/* Faults on 30% of requests: rounds until at least 5 were injected (at
 * most 8 rounds), every object byte-identical with its ETag. A Create
 * whose answer the proxy cut leaves an upload the engine never learnt of
 * (S3's Create is not idempotent): the clean-up finds those, as the daemon
 * runs it, and then none is left. */
Test(upload, survives_faults)
{
	static const char *const opts[] = { "--latency-ms", "0", "--fault-rate",
		"0.3", "--faults", "503,slowdown,reset,truncate", NULL };
	struct fx_proxy px;
	struct env t;
	unsigned retries = 0, round = 0;

	fx_proxy_start(&px, opts);
	env_open(&t, px.endpoint, 12);
	while (round < 8 && proxy_faults(&px) < 5)
		retries += faulty_round(&t, round++);
	uint64_t faults = proxy_faults(&px);
	cr_assert_geq(faults, 5, "the proxy injected only %lu faults",
		      (unsigned long)faults);
	cr_assert_gt(retries, 0, "faults injected but nothing retried");
	char under[512];
	snprintf(under, sizeof(under), "%supload/faults-", fx_env()->prefix);
	struct s3_result res;
	int orphans = upload_cleanup_abandoned(t.direct, fx_env()->bucket, under,
					       0, upload_engine_owns, t.e, &res);
	cr_assert_geq(orphans, 0, "cleanup: %s %s", res.code, res.message);
	cr_assert_eq(uploads_under(&t, under, false), 0);
	cr_log_info("%u rounds: faults injected %lu, requests retried %u, "
		    "orphaned Creates cleaned %d", round, (unsigned long)faults,
		    retries, orphans);
	env_close(&t);
	fx_proxy_stop(&px);
}

Test(upload, failure_aborts_and_reports)
{
	struct env t;
	char key[512];
	size_t size = 23 * MiB;
	unsigned char *data = fx_pattern(size, 3);
	struct job j = { .data = data, .size = size,
			 .fail_at_off_ge = 10 * MiB };

	env_open(&t, NULL, 3);
	ukey(key, sizeof(key), "readfail");
	struct upload *u = job_start(&t, &j, key, 5 * MiB, 2, true);
	char id[256] = "";
	while (!j.done) {
		if (!id[0] && upload_id(u)[0])
			snprintf(id, sizeof(id), "%s", upload_id(u));
		upload_loop_turn(t.loop);
	}
	env_drain(&t);
	cr_assert(id[0], "no multipart upload was created");
	cr_assert_eq(j.out.err, -EIO, "err %d", j.out.err);
	cr_assert_eq(uploads_of(&t, key), 0, "the failed upload was not aborted");
	cr_assert_eq(head_err(&t, key), -ENOENT, "a failed upload left an object");

	/* A bucket that does not exist: Create fails, reported as such. */
	struct job nb = { .data = data, .size = size };
	struct upload_params p = { .bucket = "ringcache-no-such-bucket-x",
				   .key = key, .size = size, .data = data,
				   .part_size = 5 * MiB, .done = job_done,
				   .done_ctx = &nb };
	int err = 0;
	cr_assert_not_null(upload_start(t.e, &p, &err));
	env_drain(&t);
	cr_assert_eq(nb.out.err, -ENODEV, "err %d %s", nb.out.err, nb.out.code);
	cr_assert_str_eq(nb.out.code, "NoSuchBucket");

	/* Parameters the engine refuses up front. */
	p.part_size = 1 * MiB;
	cr_assert_null(upload_start(t.e, &p, &err));
	cr_assert_eq(err, -EINVAL);
	free(data);
	env_close(&t);
}

/* ---- read_slow: a source that may block, never read on the driver's ---- */

/* The loop's driver plus a hash hook that runs each job on a thread of
 * its own (joined at once) and hands it back on a later turn, as a
 * shard's workers do (workers_reap): upload_hash_done never runs inside
 * hash. refuse: the hook takes no job (a pool out of memory). */
static struct {
	struct upload_driver drv;
	pthread_t driver;
	void *back[64];
	unsigned n_back;
	bool refuse;
	unsigned reads_on_driver, reads_on_workers;
} slow;

static void *hash_thread(void *job)
{
	upload_hash_run(job);
	return NULL;
}

static int slow_hash(void *ctx, void *job)
{
	(void)ctx;
	if (slow.refuse || slow.n_back == 64)
		return -ENOMEM;
	pthread_t th;
	if (pthread_create(&th, NULL, hash_thread, job))
		return -EAGAIN;
	pthread_join(th, NULL);
	slow.back[slow.n_back++] = job;
	return 0;
}

/* job_read without asserts: it runs on the hash thread. */
static int slow_read(void *ctx, uint64_t off, void *dst, size_t len)
{
	struct job *j = ctx;
	if (pthread_equal(pthread_self(), slow.driver))
		slow.reads_on_driver++;
	else
		slow.reads_on_workers++;
	if (off + len > j->size ||
	    (j->fail_at_off_ge > 0 && off >= (uint64_t)j->fail_at_off_ge))
		return -EIO;
	memcpy(dst, j->data + off, len);
	return 0;
}

static void slow_open(struct env *t)
{
	env_open(t, NULL, 3);
	upload_engine_free(t->e);
	memset(&slow, 0, sizeof(slow));
	slow.drv = *upload_loop_driver(t->loop);
	slow.drv.hash = slow_hash;
	slow.driver = pthread_self();
	t->e = upload_engine_new(t->s3, &slow.drv, "itest-upload");
	cr_assert_not_null(t->e);
}

static void slow_drain(struct env *t)
{
	uint64_t end = now_ms() + 50000;
	while (upload_engine_active(t->e) || upload_engine_pending(t->e)) {
		cr_assert(now_ms() < end, "uploads still running after 50 s");
		while (slow.n_back) {
			void *job = slow.back[0];
			memmove(slow.back, slow.back + 1,
				--slow.n_back * sizeof(*slow.back));
			upload_hash_done(job);
		}
		upload_loop_turn(t->loop);
	}
}

static void slow_start(struct env *t, struct job *j, const char *key)
{
	struct upload_params p = {
		.bucket = fx_env()->bucket, .key = key, .size = j->size,
		.read_slow = slow_read, .read_ctx = j, .part_size = 5 * MiB,
		.concurrency = 2, .done = job_done, .done_ctx = j,
	};
	int err = 0;
	cr_assert_not_null(upload_start(t->e, &p, &err), "upload_start %s: %s",
			   key, strerror(-err));
}

/* A replayed checkpoint's bytes lie in a file: the engine reads them with
 * the digests, on the driver's workers, whole parts and single PUTs alike;
 * a read error fails the upload and aborts it; a driver without workers
 * is refused up front, one whose workers refuse fails the upload. */
Test(upload, read_slow_runs_on_the_workers_only)
{
	struct env t;
	char key[512];
	size_t sizes[2] = { 12 * MiB + 3, 1 * MiB + 1 };
	slow_open(&t);
	for (int i = 0; i < 2; i++) {
		unsigned char *data = fx_pattern(sizes[i], 70 + (unsigned)i);
		struct job j = { .data = data, .size = sizes[i] };
		ukey(key, sizeof(key), i ? "slow-put" : "slow-parts");
		slow.reads_on_workers = 0;
		slow_start(&t, &j, key);
		slow_drain(&t);
		cr_assert(j.done);
		cr_assert_eq(j.out.err, 0, "%s: %s %s", key, j.out.code,
			     j.out.message);
		assert_object(&t, key, data, sizes[i], 5 * MiB);
		cr_assert_eq(slow.reads_on_workers, i ? 1u : 3u);
		free(data);
	}

	unsigned char *data = fx_pattern(sizes[0], 72);
	struct job bad = { .data = data, .size = sizes[0],
			   .fail_at_off_ge = 5 * MiB };
	ukey(key, sizeof(key), "slow-fails");
	slow_start(&t, &bad, key);
	slow_drain(&t);
	cr_assert_eq(bad.out.err, -EIO, "err %d", bad.out.err);
	cr_assert_not_null(strstr(bad.out.message, "reading part"), "%s",
			   bad.out.message);
	cr_assert_eq(uploads_of(&t, key), 0, "the failed upload was not aborted");
	cr_assert_eq(head_err(&t, key), -ENOENT);

	slow.refuse = true;
	struct job refused = { .data = data, .size = MiB };
	ukey(key, sizeof(key), "slow-refused");
	slow_start(&t, &refused, key);
	slow_drain(&t);
	cr_assert_eq(refused.out.err, -ENOMEM, "err %d", refused.out.err);
	cr_assert_eq(head_err(&t, key), -ENOENT);
	cr_assert_eq(slow.reads_on_driver, 0, "read_slow ran on the driver");
	upload_engine_free(t.e);

	/* The plain loop has no workers: refused before anything starts. */
	t.e = upload_engine_new(t.s3, upload_loop_driver(t.loop),
				"itest-upload");
	struct upload_params p = {
		.bucket = fx_env()->bucket, .key = key, .size = MiB,
		.read_slow = slow_read, .read_ctx = &refused,
		.done = job_done, .done_ctx = &refused,
	};
	int err = 0;
	cr_assert_null(upload_start(t.e, &p, &err));
	cr_assert_eq(err, -EINVAL);
	p.data = data; /* two sources */
	cr_assert_null(upload_start(t.e, &p, &err));
	cr_assert_eq(err, -EINVAL);
	free(data);
	env_close(&t);
}

Test(upload, cancel_mid_upload_aborts)
{
	struct env t;
	char key[512];
	size_t size = 30 * MiB;
	unsigned char *data = fx_pattern(size, 5);
	struct job j = { .data = data, .size = size };

	env_open(&t, NULL, 3);
	ukey(key, sizeof(key), "cancel");
	struct upload *u = job_start(&t, &j, key, 5 * MiB, 2, true);
	/* Parts 1 and 2 go first; a read of part 3 means one part is in. */
	uint64_t end = now_ms() + 30000;
	while (j.max_read_off < 10 * MiB && !j.done && now_ms() < end)
		upload_loop_turn(t.loop);
	cr_assert(!j.done, "finished before the cancel");
	cr_assert(upload_id(u)[0]);
	upload_cancel(u);
	env_drain(&t);
	cr_assert(j.done);
	cr_assert_eq(j.out.err, -ECANCELED, "err %d", j.out.err);
	cr_assert_eq(uploads_of(&t, key), 0, "the cancelled upload is still there");
	cr_assert_eq(head_err(&t, key), -ENOENT);

	/* Cancel of a single PUT before it went out: nothing in S3. */
	struct job s = { .data = data, .size = 1000 };
	ukey(key, sizeof(key), "cancel-put");
	upload_cancel(job_start(&t, &s, key, 5 * MiB, 1, false));
	cr_assert(s.done);
	cr_assert_eq(s.out.err, -ECANCELED);
	env_drain(&t);
	cr_assert_eq(head_err(&t, key), -ENOENT);
	free(data);
	env_close(&t);
}

static bool keep_id(void *ctx, const char *key, const char *id)
{
	(void)key;
	return strcmp(ctx, id) == 0;
}

Test(upload, cleanup_abandoned)
{
	struct env t;
	char key[600], prefix[512], id[256] = "", err[160];
	struct s3_result res;
	char *body = NULL;
	size_t len = 0;

	env_open(&t, NULL, 3);
	ukey(prefix, sizeof(prefix), "abandon");
	snprintf(key, sizeof(key), "%s/left-behind", prefix);
	struct s3_req_params cp = { .op = S3_CREATE_MULTIPART,
				    .bucket = fx_env()->bucket, .key = key,
				    .meta_daemon = "itest-upload" };
	cr_assert_eq(s3_perform(t.direct, &cp, &res, &body, &len), 0,
		     "%s %s", res.code, res.message);
	cr_assert_eq(s3_parse_upload_id(body, len, id, sizeof(id), err,
					sizeof(err)), 0, "%s", err);
	free(body);
	cr_assert_eq(uploads_of(&t, key), 1);

	/* Too young, or claimed by keep: left alone. */
	cr_assert_eq(upload_cleanup_abandoned(t.direct, fx_env()->bucket,
					      prefix, 3600, NULL, NULL, &res), 0);
	cr_assert_eq(upload_cleanup_abandoned(t.direct, fx_env()->bucket,
					      prefix, 0, keep_id, id, &res), 0);
	cr_assert_eq(upload_cleanup_abandoned(t.direct, fx_env()->bucket, prefix,
					      0, upload_engine_owns, t.e, &res), 1,
		     "%s %s", res.code, res.message);
	cr_assert_eq(uploads_of(&t, key), 0);
	env_close(&t);
}

Test(upload, rename_completed)
{
	struct env t;
	char from[512], to[512], etag[128] = "";
	size_t size = 12 * MiB;
	unsigned char *data = fx_pattern(size, 9);
	struct job j = { .data = data, .size = size };
	struct s3_result res;

	env_open(&t, NULL, 3);
	ukey(from, sizeof(from), "rename-tmp");
	ukey(to, sizeof(to), "rename-final");
	job_start(&t, &j, from, 5 * MiB, 4, false);
	env_drain(&t);
	cr_assert_eq(j.out.err, 0);
	cr_assert_eq(upload_rename_completed(t.direct, fx_env()->bucket, from,
					     to, etag, sizeof(etag), &res), 0,
		     "%s %s", res.code, res.message);
	cr_assert(etag[0]);
	cr_assert_eq(head_err(&t, from), -ENOENT, "the source is still there");
	struct s3_req_params get = { .op = S3_GET_OBJECT,
				     .bucket = fx_env()->bucket, .key = to };
	char *body = NULL;
	size_t len = 0;
	cr_assert_eq(s3_perform(t.direct, &get, &res, &body, &len), 0);
	cr_assert_eq(len, size);
	cr_assert_eq(fx_mismatch(body, data, size), -1);
	free(body);
	free(data);
	env_close(&t);
}

/* ---- copy jobs: CopyObject, multipart copy, then the source's DELETE ---- */

static struct upload *copy_start(struct env *t, struct job *j,
				 const char *from, const char *to,
				 uint64_t size, uint64_t threshold)
{
	struct upload_copy_params p = {
		.bucket = fx_env()->bucket, .from_key = from, .to_key = to,
		.size = size, .threshold = threshold, .part_size = 5 * MiB,
		.concurrency = 2, .done = job_done, .done_ctx = j,
	};
	int err = 0;
	struct upload *u = upload_copy_start(t->e, &p, &err);
	cr_assert_not_null(u, "upload_copy_start %s: %s", to, strerror(-err));
	cr_assert(!j->done, "done reported inside upload_copy_start");
	return u;
}

/* The outcome's ETag is the one S3 gives the new object. */
static void assert_head_etag(struct env *t, const char *key, const char *etag)
{
	struct s3_req_params hd = { .op = S3_HEAD_OBJECT,
				    .bucket = fx_env()->bucket, .key = key };
	struct s3_result res;
	cr_assert_eq(s3_perform(t->direct, &hd, &res, NULL, NULL), 0);
	cr_assert_str_eq(etag, res.etag, "%s: reported ETag", key);
}

/* A copy's source: size bytes of pattern seed uploaded as key (parts of
 * part); the bytes, for the caller to free. */
static unsigned char *copy_source(struct env *t, const char *key,
				  size_t size, unsigned seed, size_t part)
{
	unsigned char *data = fx_pattern(size, seed);
	struct job up = { .data = data, .size = size };
	job_start(t, &up, key, part, 4, false);
	env_drain(t);
	cr_assert_eq(up.out.err, 0);
	return data;
}

/* 12 MiB: one CopyObject under the default threshold; three 5 MiB
 * UploadPartCopy ranges under a 5 MiB one. Bytes, ETag, source gone. */
Test(upload, copy_job_by_copyobject_and_by_parts)
{
	struct env t;
	char a[512], b[512], c[512];
	size_t size = 12 * MiB;

	env_open(&t, NULL, 3);
	ukey(a, sizeof(a), "copy-a");
	ukey(b, sizeof(b), "copy-b");
	ukey(c, sizeof(c), "copy-c");
	/* One PUT: a plain MD5 ETag. */
	unsigned char *data = copy_source(&t, a, size, 21, 64 * MiB);

	struct job one = {0};
	copy_start(&t, &one, a, b, size, 0);
	env_drain(&t);
	cr_assert_eq(one.out.err, 0, "%s %s", one.out.code, one.out.message);
	cr_assert_eq(one.out.source_err, 0);
	cr_assert_eq(one.out.parts, 0, "CopyObject, not parts");
	assert_object(&t, b, data, size, 64 * MiB);
	assert_head_etag(&t, b, one.out.etag);
	cr_assert_eq(head_err(&t, a), -ENOENT, "the source is still there");

	struct job parts = {0};
	copy_start(&t, &parts, b, c, size, 5 * MiB);
	env_drain(&t);
	cr_assert_eq(parts.out.err, 0, "%s %s", parts.out.code,
		     parts.out.message);
	cr_assert_eq(parts.out.parts, 3);
	assert_object(&t, c, data, size, 5 * MiB);
	assert_head_etag(&t, c, parts.out.etag);
	cr_assert_eq(head_err(&t, b), -ENOENT, "the source is still there");
	cr_assert_eq(uploads_of(&t, c), 0);

	/* The blocking helper is the same job. */
	char etag[128] = "";
	struct s3_result res;
	cr_assert_eq(upload_rename_completed(t.direct, fx_env()->bucket, c, a,
					     etag, sizeof(etag), &res), 0,
		     "%s %s", res.code, res.message);
	assert_head_etag(&t, a, etag);
	cr_assert_eq(head_err(&t, c), -ENOENT);
	free(data);
	env_close(&t);
}

/* A source that is gone fails either way (a multipart copy is aborted);
 * a cancel before the parts are in leaves the source where it was. */
Test(upload, copy_job_failure_and_cancel)
{
	struct env t;
	char a[512], b[512], gone[512];
	size_t size = 30 * MiB;

	env_open(&t, NULL, 3);
	ukey(a, sizeof(a), "copyfail-a");
	ukey(b, sizeof(b), "copyfail-b");
	ukey(gone, sizeof(gone), "copyfail-gone");
	for (int parts = 0; parts < 2; parts++) {
		struct job j = {0};
		copy_start(&t, &j, gone, b, size, parts ? 5 * MiB : 0);
		env_drain(&t);
		cr_assert_eq(j.out.err, -ENOENT, "err %d %s", j.out.err,
			     j.out.code);
		cr_assert_eq(head_err(&t, b), -ENOENT);
		cr_assert_eq(uploads_of(&t, b), 0, "the copy was not aborted");
	}

	unsigned char *data = copy_source(&t, a, size, 22, 5 * MiB);
	struct job j = {0};
	struct upload *u = copy_start(&t, &j, a, b, size, 5 * MiB);
	while (!upload_id(u)[0] && !j.done)
		upload_loop_turn(t.loop);
	upload_cancel(u);
	env_drain(&t);
	cr_assert_eq(j.out.err, -ECANCELED, "err %d", j.out.err);
	cr_assert_eq(uploads_of(&t, b), 0, "the cancelled copy is still there");
	cr_assert_eq(head_err(&t, b), -ENOENT);
	assert_object(&t, a, data, size, 5 * MiB);

	/* Parameters refused up front. */
	struct upload_copy_params p = {
		.bucket = fx_env()->bucket, .from_key = a, .to_key = a,
		.size = size, .done = job_done, .done_ctx = &j,
	};
	int err = 0;
	cr_assert_null(upload_copy_start(t.e, &p, &err), "a copy onto itself");
	cr_assert_eq(err, -EINVAL);
	p.to_key = b;
	p.threshold = 1 * MiB;
	cr_assert_null(upload_copy_start(t.e, &p, &err));
	cr_assert_eq(err, -EINVAL);
	free(data);
	env_close(&t);
}

/* ---- upload_run, the blocking helper, and rc-s3 mpu-put on it ---- */

static int failing_read(void *ctx, uint64_t off, void *dst, size_t len)
{
	if (off >= 5 * MiB)
		return -EIO;
	memcpy(dst, (const unsigned char *)ctx + off, len);
	return 0;
}

/* rc-s3 mpu-put of size bytes to key; its stdout (the ETag) into etag. */
static int mpu_put_tool(const char *key, const unsigned char *data,
			size_t size, char *etag, size_t etaglen)
{
	char path[512], out[4096] = "";
	snprintf(path, sizeof(path), "%s/mpu-put.bin", fx_tmpdir());
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, size, f), size);
	cr_assert_eq(fclose(f), 0);
	char *argv[] = { RC_BUILD_DIR "/rc-s3", "mpu-put",
			 (char *)fx_env()->bucket, (char *)key, path,
			 "--part-size", "5M", "--jobs", "3", NULL };
	int rc = fx_run(argv, out, sizeof(out), 60000);
	unlink(path);
	snprintf(etag, etaglen, "%.*s", (int)strcspn(out, "\n"), out);
	return rc;
}

Test(upload, run_blocking_read_back_by_awscli)
{
	struct env t;
	char prefix[512], keys[3][600], etag[128];
	size_t sizes[3] = { 13 * MiB + 7, 11 * MiB, 12 * MiB + 3 };
	unsigned char *data[3];
	struct fx_s3_object objs[3];
	struct upload_outcome out;

	env_open(&t, NULL, 3);
	ukey(prefix, sizeof(prefix), "run");
	strcat(prefix, "/");
	for (int i = 0; i < 3; i++) {
		data[i] = fx_pattern(sizes[i], 40 + (unsigned)i);
		snprintf(keys[i], sizeof(keys[i]), "%sobj%d", prefix, i);
		objs[i] = (struct fx_s3_object){ keys[i], data[i], sizes[i] };
	}
	/* From a buffer, 3 parts at once; from a source, one at a time. */
	for (int i = 0; i < 2; i++) {
		struct upload_params p = {
			.bucket = fx_env()->bucket, .key = keys[i],
			.size = sizes[i], .data = i ? NULL : data[i],
			.read = i ? job_read : NULL, .read_ctx = &(struct job){
				.data = data[i], .size = sizes[i] },
			.part_size = 5 * MiB, .concurrency = i ? 1 : 3,
		};
		cr_assert_eq(upload_run(t.s3, &p, "itest-upload", &out), 0,
			     "%s: %s %s", keys[i], out.code, out.message);
		fx_s3_etag(data[i], sizes[i], 5 * MiB, etag);
		cr_assert_str_eq(out.etag, etag);
		cr_assert_eq(out.parts, 3);
	}
	/* rc-s3 mpu-put prints the multipart ETag S3 gives the object. */
	char tool_etag[128];
	cr_assert_eq(mpu_put_tool(keys[2], data[2], sizes[2], tool_etag,
				  sizeof(tool_etag)), 0, "rc-s3: %s", tool_etag);
	fx_s3_etag(data[2], sizes[2], 5 * MiB, etag);
	cr_assert_str_eq(tool_etag, etag);
	fx_aws_assert_objects(prefix, objs, 3, 5 * MiB);
	for (int i = 0; i < 3; i++)
		free(data[i]);
	env_close(&t);
}

/* S3's ETag of a one-part multipart upload: MD5 of the part's MD5, "-1". */
static void one_part_etag(const void *data, size_t size, char out[64])
{
	unsigned char md5[16], top[16];
	cr_assert_eq(EVP_Digest(data, size, md5, NULL, EVP_md5(), NULL), 1);
	cr_assert_eq(EVP_Digest(md5, 16, top, NULL, EVP_md5(), NULL), 1);
	out[0] = '"';
	for (int i = 0; i < 16; i++)
		snprintf(out + 1 + 2 * i, 3, "%02x", top[i]);
	strcpy(out + 33, "-1\"");
}

Test(upload, run_failure_aborts_and_one_part_stays_multipart)
{
	struct env t;
	char key[512], want[64];
	size_t size = 12 * MiB;
	unsigned char *data = fx_pattern(size, 50);
	struct upload_outcome out;

	env_open(&t, NULL, 3);
	ukey(key, sizeof(key), "run-fails");
	struct upload_params p = {
		.bucket = fx_env()->bucket, .key = key, .size = size,
		.read = failing_read, .read_ctx = data, .part_size = 5 * MiB,
		.concurrency = 1,
	};
	cr_assert_eq(upload_run(t.s3, &p, NULL, &out), -EIO);
	cr_assert_eq(out.err, -EIO);
	cr_assert_eq(uploads_of(&t, key), 0, "the failed upload was not aborted");
	cr_assert_eq(head_err(&t, key), -ENOENT);

	/* multipart: a body that fits one part is still one part, "-1". */
	ukey(key, sizeof(key), "run-one-part");
	p = (struct upload_params){ .bucket = fx_env()->bucket, .key = key,
				    .size = MiB, .data = data,
				    .part_size = 5 * MiB, .multipart = true };
	cr_assert_eq(upload_run(t.s3, &p, NULL, &out), 0, "%s", out.message);
	cr_assert_eq(out.parts, 1);
	one_part_etag(data, MiB, want);
	cr_assert_str_eq(out.etag, want);
	struct s3_req_params get = { .op = S3_GET_OBJECT,
				     .bucket = fx_env()->bucket, .key = key };
	struct s3_result res;
	char *body = NULL;
	size_t len = 0;
	cr_assert_eq(s3_perform(t.direct, &get, &res, &body, &len), 0);
	cr_assert_eq(len, MiB);
	cr_assert_eq(fx_mismatch(body, data, MiB), -1);
	cr_assert_str_eq(res.etag, out.etag);
	free(body);
	free(data);
	env_close(&t);
}
