/* test_faults.c - the daemon's read path under S3 faults: a real ringcached
 * whose S3 endpoint is rc-proxy in front of the real S3 server, with
 * the proxy injecting 503s, SlowDowns, resets, truncated bodies, stalls and
 * latency. Checks that retries deliver exactly the source bytes, that
 * exhausted retries fail a read with -EIO in bounded time and leave the
 * daemon serving, that misses are fetched in parallel, that stalls only
 * delay, and that a truncated body never reaches a client.
 *
 * Each test starts its own proxy and daemon and reads the default dataset
 * at ${RINGCACHE_TEST_PREFIX}ds/. Faults are switched on through the
 * proxy's control socket after OPEN where a test is about the READ alone
 * (OPEN sends a HEAD through the same proxy). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)
#define MAX_EXT 8
#define N_SMALL_CHECKED 40
#define N_PARALLEL 16
/* As set through the control socket below: long enough that a stall of
 * a busy machine while the GETs go out still leaves them overlapping. */
#define LATENCY_MS 1000
#define LATENCY_MS_STR "1000"
#define STALL_MS 300

static struct fx_daemon D;
static struct fx_proxy P;
static struct ds_spec S;

static const char *const no_faults[] = { "--latency-ms", "0", NULL };

/* Starts the proxy with opts, then a daemon pointed at it with max_retries
 * and more [s3] lines. */
static void start_through_proxy(const char *const *opts, unsigned max_retries,
				const char *s3_extra)
{
	ds_spec_default(&S);
	fx_proxy_start(&P, opts);
	fx_daemon_init(&D);
	D.s3_endpoint = P.endpoint;
	D.max_retries = max_retries;
	D.s3_extra = s3_extra;
	fx_daemon_start(&D, NULL);
}

/* End of every test body: the daemon must exit cleanly, so a crash or a
 * sanitizer report under faults fails the test (Criterion ignores
 * assertions in .fini). */
static void stop_all(void)
{
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
}

static void kill_all(void)
{
	fx_daemon_kill(&D);
	fx_proxy_kill(&P);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void attach(struct rc_client *c)
{
	struct rc_attach_opts o = { .gpu = -1, .numa_node = -1 };
	int r = rc_attach(c, D.socket_path, &o);

	cr_assert_eq(r, 0, "rc_attach: %s", rc_strerror(r));
}

static int default_dataset(struct rc_client *c)
{
	int id = rc_dataset(c, "ds");

	cr_assert_geq(id, 0, "rc_dataset(ds): %s", rc_strerror(id));
	return id;
}

static uint32_t open_obj(struct rc_client *c, int ds, size_t i)
{
	char key[DS_KEY_MAX];
	struct rc_stat st;
	int h = rc_open(c, ds, ds_key(&S, i, key), &st);

	cr_assert_geq(h, 0, "rc_open(%s): %s", key, rc_strerror(h));
	cr_assert_eq(st.size, ds_size(&S, i), "rc_open(%s): size %llu", key,
		     (unsigned long long)st.size);
	return (uint32_t)h;
}

static void proxy_set(const char *cmds, const char *want)
{
	const char *r = fx_proxy_control(&P, cmds);

	cr_assert_str_eq(r, want, "proxy control '%s' answered '%s'", cmds, r);
}

static uint64_t proxy_counter(const char *name)
{
	return fx_proxy_stat(fx_proxy_control(&P, "stats\n"), name);
}

static int64_t daemon_counter(const char *name)
{
	return fx_stat_value(D.socket_path, name);
}

/* Zero-copy reads [off, off+len) of object i, checks every extent against
 * the source and releases its lease. */
static void check_zc(struct rc_client *c, uint32_t h, size_t i, uint64_t off,
		     uint64_t len)
{
	uint64_t done = 0;
	char key[DS_KEY_MAX];

	ds_key(&S, i, key);
	while (done < len) {
		struct rc_extent ext[MAX_EXT];
		int n = rc_read(c, h, off + done, len - done, ext, MAX_EXT);
		uint64_t got = 0;

		cr_assert_gt(n, 0, "READ %s at %llu: %s", key,
			     (unsigned long long)(off + done),
			     n < 0 ? rc_strerror(n) : "no extents before EOF");
		for (int e = 0; e < n; e++) {
			cr_assert_not_null(ext[e].data, "READ %s: NULL extent",
					   key);
			fx_assert_ds_bytes(&S, i, off + done + got, ext[e].data,
					   ext[e].len, "READ");
			cr_assert_eq(rc_release(c, ext[e].lease), 0);
			got += ext[e].len;
		}
		cr_assert_gt(got, 0, "READ %s: empty extents", key);
		done += got;
	}
}

/* The same through READ_INTO into buf (registered as bi, bufsize bytes). */
static void check_into(struct rc_client *c, uint32_t h, size_t i,
		       uint64_t off, uint64_t len, int bi, const uint8_t *buf,
		       size_t bufsize)
{
	char key[DS_KEY_MAX];
	uint64_t done = 0;

	ds_key(&S, i, key);
	while (done < len) {
		uint64_t want = len - done < bufsize ? len - done : bufsize;
		ssize_t n = rc_read_into(c, h, off + done, want, (uint32_t)bi, 0);

		cr_assert_gt(n, 0, "READ_INTO %s at %llu: %s", key,
			     (unsigned long long)(off + done),
			     n < 0 ? rc_strerror((int)n) : "0 bytes before EOF");
		cr_assert_leq((uint64_t)n, want);
		fx_assert_ds_bytes(&S, i, off + done, buf, (size_t)n,
				   "READ_INTO");
		done += (uint64_t)n;
	}
}

/* A READ that must fail: returns its error after checking that no lease
 * was handed out. */
static int failing_read(struct rc_client *c, uint32_t h, uint64_t off,
			uint64_t len)
{
	struct rc_extent ext[MAX_EXT];
	int n = rc_read(c, h, off, len, ext, MAX_EXT);

	for (int e = 0; e < n; e++)
		rc_release(c, ext[e].lease);
	cr_assert_lt(n, 0, "READ succeeded (%d extents) through a link that "
		     "fails every request", n);
	cr_assert_eq(daemon_counter("ringcache_leases_active"), 0,
		     "a failed READ left a lease");
	return n;
}

TestSuite(faults, .fini = kill_all, .timeout = 60);

/* (1) Faults on 30% of requests, 10 retries: every byte arrives intact. */
Test(faults, retries_deliver_exact_bytes)
{
	static const char *const opts[] = { "--latency-ms", "0", "--fault-rate",
		"0.3", "--faults", "503,slowdown,reset,truncate", NULL };
	struct rc_client c;
	size_t large, bufsize = 4 * MiB;
	void *buf;
	int ds, bi;

	start_through_proxy(opts, 10, NULL);
	large = fx_ds_find(&S, "large/0.bin");
	attach(&c);
	ds = default_dataset(&c);
	bi = rc_alloc_buffer(&c, bufsize, &buf);
	cr_assert_geq(bi, 0, "rc_alloc_buffer: %s", rc_strerror(bi));

	/* Even objects are fetched by READ, odd ones by READ_INTO; then each
	 * is read whole the other way, from the cache. */
	for (size_t i = 0; i < N_SMALL_CHECKED; i++) {
		uint32_t h = open_obj(&c, ds, i);
		uint64_t size = ds_size(&S, i);

		if (i % 2 == 0) {
			check_zc(&c, h, i, 0, size);
			check_into(&c, h, i, 0, size, bi, buf, bufsize);
		} else {
			check_into(&c, h, i, 0, size, bi, buf, bufsize);
			check_zc(&c, h, i, 0, size);
		}
		cr_assert_eq(rc_close(&c, h), 0);
	}

	/* The large object: its first half fetched by READ, the rest by
	 * READ_INTO, then all of it both ways. */
	uint32_t h = open_obj(&c, ds, large);
	uint64_t size = ds_size(&S, large), half = size / 2;

	check_zc(&c, h, large, 0, half);
	check_into(&c, h, large, half, size - half, bi, buf, bufsize);
	check_zc(&c, h, large, 0, size);
	check_into(&c, h, large, 0, size, bi, buf, bufsize);
	cr_assert_eq(rc_close(&c, h), 0);

	int64_t errors = daemon_counter("ringcache_s3_errors_total");
	int64_t retries = daemon_counter("ringcache_s3_retries_total");
	const char *stats = fx_proxy_control(&P, "stats\n");
	uint64_t faults = fx_proxy_stat(stats, "fault_503") +
			  fx_proxy_stat(stats, "fault_slowdown") +
			  fx_proxy_stat(stats, "fault_reset") +
			  fx_proxy_stat(stats, "fault_truncate");

	cr_log_info("faults injected %llu, daemon errors %lld, retries %lld",
		    (unsigned long long)faults, (long long)errors,
		    (long long)retries);
	cr_assert_gt(errors, 0, "no S3 error counted under 30%% faults");
	cr_assert_gt(retries, 0, "no retry counted under 30%% faults");
	/* Every error was retried (none exhausted 10 retries), and the daemon
	 * saw no error the proxy did not inject. */
	cr_assert_eq(retries, errors);
	cr_assert_leq((uint64_t)errors, faults, "proxy stats:\n%s", stats);
	rc_detach(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	stop_all();
}

/* (2) Every request fails: the READ fails with -EIO after max_retries, and
 * the daemon serves again once the link heals. */
Test(faults, exhausted_retries_fail_with_eio_then_recover)
{
	struct rc_client c;
	size_t i = 3, bufsize = MiB;
	void *buf;
	int ds, bi, r;

	start_through_proxy(no_faults, 2, NULL);
	attach(&c);
	ds = default_dataset(&c);
	bi = rc_alloc_buffer(&c, bufsize, &buf);
	cr_assert_geq(bi, 0);
	uint32_t h = open_obj(&c, ds, i);
	int64_t retries0 = daemon_counter("ringcache_s3_retries_total");

	proxy_set("set faults 503\nset fault-rate 1\nreset-stats\n",
		  "ok\nok\nok\n");
	int64_t t0 = now_ms();
	r = failing_read(&c, h, 0, ds_size(&S, i));
	int64_t ms = now_ms() - t0;

	cr_assert_eq(r, -EIO, "READ: %s, want EIO", rc_strerror(r));
	/* Backoff is capped at 50 and 100 ms for two retries: 10 s means a
	 * hang, not a slow machine. */
	cr_assert_lt(ms, 10000, "the failing READ took %lld ms", (long long)ms);
	cr_assert_eq(proxy_counter("get"), 3, "want 1 GET + 2 retries");
	cr_assert_eq(daemon_counter("ringcache_s3_retries_total") - retries0, 2);

	/* READ_INTO fails the same way (the failed block was not cached). */
	ssize_t n = rc_read_into(&c, h, 0, ds_size(&S, i), (uint32_t)bi, 0);
	cr_assert_eq(n, -EIO, "READ_INTO: %zd (%s)", n,
		     n < 0 ? rc_strerror((int)n) : "bytes");

	proxy_set("set fault-rate 0\n", "ok\n");
	check_zc(&c, h, i, 0, ds_size(&S, i));
	check_into(&c, h, i, 0, ds_size(&S, i), bi, buf, bufsize);
	/* And a fresh OPEN (a HEAD) works too. */
	uint32_t h2 = open_obj(&c, ds, i + 1);
	check_zc(&c, h2, i + 1, 0, ds_size(&S, i + 1));
	rc_detach(&c);
	stop_all();
}

/* (3) 16 misses of LATENCY_MS each, submitted together, overlap. */
Test(faults, misses_are_fetched_in_parallel)
{
	struct rc_client c;
	uint32_t h[N_PARALLEL];
	bool seen[N_PARALLEL] = { false };
	int ds;

	start_through_proxy(no_faults, 3, NULL);
	attach(&c);
	ds = default_dataset(&c);
	for (size_t k = 0; k < N_PARALLEL; k++)
		h[k] = open_obj(&c, ds, 100 + k);
	proxy_set("set latency-ms " LATENCY_MS_STR "\nreset-stats\n",
		  "ok\nok\n");

	int64_t t0 = now_ms();
	for (size_t k = 0; k < N_PARALLEL; k++) {
		struct rc_sqe *sqe = rc_get_sqe(&c);

		cr_assert_not_null(sqe, "the SQ ring holds fewer than %d",
				   N_PARALLEL);
		rc_prep_read(sqe, h[k], 0, ds_size(&S, 100 + k), k);
	}
	cr_assert_eq(rc_submit(&c), N_PARALLEL);

	struct rc_cqe done[N_PARALLEL];
	for (size_t k = 0; k < N_PARALLEL; k++) {
		struct rc_cqe *cqe;
		int r = rc_wait_cqe(&c, &cqe);

		cr_assert_eq(r, 0, "rc_wait_cqe: %s", rc_strerror(r));
		cr_assert_lt(cqe->user_data, N_PARALLEL);
		cr_assert(!seen[cqe->user_data], "two completions for %llu",
			  (unsigned long long)cqe->user_data);
		seen[cqe->user_data] = true;
		done[cqe->user_data] = *cqe;
		rc_cqe_seen(&c);
	}
	int64_t ms = now_ms() - t0;

	cr_log_info("%d parallel misses at %d ms latency: %lld ms "
		    "(sequential would be >= %d ms)", N_PARALLEL, LATENCY_MS,
		    (long long)ms, N_PARALLEL * LATENCY_MS);
	for (size_t k = 0; k < N_PARALLEL; k++) {
		size_t i = 100 + k;

		cr_assert_gt(done[k].res, 0, "READ of object %zu: %s", i,
			     rc_strerror(done[k].res));
		cr_assert(!(done[k].flags & RC_CQE_F_HIT),
			  "object %zu was already cached", i);
		fx_assert_ds_bytes(&S, i, 0, rc_cqe_data(&c, &done[k]),
				   (size_t)done[k].res, "parallel READ");
		cr_assert_eq(rc_release(&c, done[k].lease), 0);
		if ((uint64_t)done[k].res < ds_size(&S, i)) /* block edge */
			check_zc(&c, h[k], i, (uint64_t)done[k].res,
				 ds_size(&S, i) - (uint64_t)done[k].res);
	}
	cr_assert_geq(proxy_counter("get"), N_PARALLEL);
	cr_assert_geq(ms, LATENCY_MS, "the latency did not apply");
	/* Overlap as the proxy saw it, not as a time: each GET is held 1 s
	 * there, so a daemon that fetches in parallel has many in flight
	 * at once (all 16 at load 15 on 2 cores), however slow the machine;
	 * a quarter leaves room for its slowest. */
	uint64_t peak = proxy_counter("requests_peak");
	cr_assert_geq(peak, N_PARALLEL / 4, "%d misses took %lld ms, at most "
		      "%llu GET in flight: fetched one at a time?",
		      N_PARALLEL, (long long)ms, (unsigned long long)peak);
	rc_detach(&c);
	stop_all();
}

/* (4) A stall shorter than the request timeout only delays the body. */
Test(faults, stall_shorter_than_timeout_only_delays)
{
	struct rc_client c;
	size_t i = 7;
	int ds;

	/* No retries: a stall taken for a failure would fail the READ. */
	start_through_proxy(no_faults, 0,
			    "request_timeout_ms = 5000\n"
			    "connect_timeout_ms = 2000\n");
	attach(&c);
	ds = default_dataset(&c);
	uint32_t h = open_obj(&c, ds, i);

	proxy_set("set stall-ms 300\nset faults stall\nset fault-rate 1\n",
		  "ok\nok\nok\n");
	int64_t t0 = now_ms();
	check_zc(&c, h, i, 0, ds_size(&S, i));
	int64_t ms = now_ms() - t0;

	cr_log_info("stalled READ: %lld ms (stall %d ms)", (long long)ms,
		    STALL_MS);
	cr_assert_geq(proxy_counter("fault_stall"), 1, "no stall injected");
	cr_assert_geq(ms, STALL_MS, "the READ did not wait out the stall");
	cr_assert_eq(daemon_counter("ringcache_s3_errors_total"), 0);
	cr_assert_eq(daemon_counter("ringcache_s3_retries_total"), 0);
	rc_detach(&c);
	stop_all();
}

/* (5) Every body truncated, one retry: the READ fails and no lease (no
 * byte of the short body) is handed out; nothing short is cached. */
Test(faults, truncated_bodies_never_reach_a_client)
{
	struct rc_client c;
	size_t large, i = 11, bufsize = 2 * MiB;
	void *buf;
	int ds, bi, r;

	start_through_proxy(no_faults, 1, NULL);
	large = fx_ds_find(&S, "large/1.bin");
	attach(&c);
	ds = default_dataset(&c);
	bi = rc_alloc_buffer(&c, bufsize, &buf);
	cr_assert_geq(bi, 0);
	uint32_t h = open_obj(&c, ds, i);
	uint32_t hl = open_obj(&c, ds, large);

	proxy_set("set faults truncate\nset fault-rate 1\nreset-stats\n",
		  "ok\nok\nok\n");
	r = failing_read(&c, h, 0, ds_size(&S, i));
	cr_assert_eq(r, -EIO, "READ of a small object: %s", rc_strerror(r));
	cr_assert_eq(proxy_counter("fault_truncate"), 2,
		     "want 1 GET + 1 retry, both truncated");
	/* A whole block of the large object, at a block boundary. */
	r = failing_read(&c, hl, 5 * MiB, MiB);
	cr_assert_eq(r, -EIO, "READ of a large block: %s", rc_strerror(r));
	ssize_t n = rc_read_into(&c, hl, 5 * MiB, MiB, (uint32_t)bi, 0);
	cr_assert_eq(n, -EIO, "READ_INTO: %zd (%s)", n,
		     n < 0 ? rc_strerror((int)n) : "bytes");
	cr_assert_eq(daemon_counter("ringcache_leases_active"), 0);

	proxy_set("set fault-rate 0\n", "ok\n");
	check_zc(&c, h, i, 0, ds_size(&S, i));
	check_zc(&c, hl, large, 5 * MiB, MiB);
	check_into(&c, hl, large, 5 * MiB, MiB, bi, buf, bufsize);
	rc_detach(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	stop_all();
}
