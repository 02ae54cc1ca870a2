/* test_budget.c - the S3 request budget (src/engine/budget.c) in a real
 * ringcached reading the real S3 server through rc-proxy, which answers
 * 503 SlowDown above a request rate as S3 does per prefix. A cold read of
 * the whole default dataset by 8 readers at once (one session each, the
 * way 8 GPUs' loaders read) must deliver every byte right with few
 * SlowDowns: with the dataset's s3_get_rate at the limit, and with the
 * default rate far above it, where AIMD has to find the limit from the
 * SlowDowns themselves.
 *
 * Each test starts its own proxy and daemon; the dataset is the one
 * tests/run uploads to ${RINGCACHE_TEST_PREFIX}ds/. The write path: a
 * checkpoint upload waits for PUT-class slots, and lands whole through
 * SlowDowns. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define READERS 8
/* Sanitizer builds: the readers' byte checks, not the budget, set the
 * pace, so the pace is not checked there (see link_used). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
#define LIMIT 100     /* the proxy's requests/s */
#define LIMIT_STR "100"
#define MAX_EXT 8

static struct fx_daemon D;
static struct fx_proxy P;
static struct ds_spec S;

static void kill_all(void)
{
	fx_daemon_kill(&D);
	fx_proxy_kill(&P);
}

TestSuite(budget, .fini = kill_all, .timeout = 300);

/* The proxy limits at LIMIT/s; the daemon reads through it with the
 * dataset's budget lines (NULL: the defaults). */
static void start_with_daemon(const char *budget_lines);

static void start(const char *budget_lines)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	start_with_daemon(budget_lines);
}

/* start(), on a D the caller set up with fx_daemon_init. */
static void start_with_daemon(const char *budget_lines)
{
	static const char *const opts[] = { "--latency-ms", "5",
		"--rate-limit", LIMIT_STR, NULL };
	char ds[512], allow[256];
	fx_proxy_start(&P, opts);
	D.s3_endpoint = P.endpoint;
	D.max_retries = 10; /* a SlowDown is retried, never a failed read */
	D.memory = "512M";
	D.no_default_dataset = true;
	snprintf(allow, sizeof(allow), "allow_uids = *\n%s",
		 budget_lines ? budget_lines : "");
	fx_dataset_section(ds, sizeof(ds), "ds", "ds/", allow);
	fx_daemon_start(&D, ds);
}

struct reader {
	int index;
	atomic_uint *failures;
	char why[256];         /* the first failure */
	uint64_t bytes;
};

static void fail(struct reader *r, const char *fmt, const char *key, long v)
{
	if (atomic_fetch_add(r->failures, 1) == 0 || !r->why[0])
		snprintf(r->why, sizeof(r->why), fmt, key, v);
}

/* Reads object i whole, zero-copy, checking every byte. */
static void read_object(struct reader *r, struct rc_client *c, int ds,
			size_t i)
{
	char key[DS_KEY_MAX];
	struct rc_stat st;
	ds_key(&S, i, key);
	int h = rc_open(c, ds, key, &st);
	if (h < 0 || st.size != ds_size(&S, i)) {
		fail(r, "open %s: %ld", key, h);
		return;
	}
	for (uint64_t off = 0; off < st.size;) {
		struct rc_extent ext[MAX_EXT];
		int n = rc_read(c, (uint32_t)h, off, st.size - off, ext,
				MAX_EXT);
		if (n <= 0) {
			fail(r, "read %s: %ld", key, n);
			break;
		}
		for (int e = 0; e < n; e++) {
			if (fx_ds_mismatch(&S, i, off, ext[e].data,
					   ext[e].len) >= 0)
				fail(r, "%s: wrong bytes at %ld", key,
				     (long)off);
			off += ext[e].len;
			r->bytes += ext[e].len;
			rc_release(c, ext[e].lease);
		}
	}
	rc_close(c, (uint32_t)h);
}

/* Reader k reads objects k, k + READERS, ... in its own session. */
static void *reader_main(void *arg)
{
	struct reader *r = arg;
	struct rc_client c;
	struct rc_attach_opts o = { .gpu = -1, .numa_node = -1 };
	int err = rc_attach(&c, D.socket_path, &o);
	if (err < 0) {
		fail(r, "attach%s: %ld", "", err);
		return NULL;
	}
	int ds = rc_dataset(&c, "ds");
	for (size_t i = (size_t)r->index; ds >= 0 && i < ds_count(&S);
	     i += READERS)
		read_object(r, &c, ds, i);
	if (ds < 0)
		fail(r, "dataset%s: %ld", "", ds);
	rc_detach(&c);
	return NULL;
}

struct epoch {
	double secs;
	uint64_t bytes;
	uint64_t passed, limited; /* at the proxy */
	int64_t slowdowns, throttled_s, gets, heads;
};

/* A cold read of the whole dataset by READERS sessions at once; asserts
 * every byte right. */
static void cold_epoch(struct epoch *ep)
{
	pthread_t th[READERS];
	struct reader rd[READERS];
	atomic_uint failures = 0;
	struct timespec t0, t1;
	fx_proxy_control(&P, "reset-stats\n");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int k = 0; k < READERS; k++) {
		rd[k] = (struct reader){ .index = k, .failures = &failures };
		cr_assert_eq(pthread_create(&th[k], NULL, reader_main, &rd[k]),
			     0);
	}
	ep->bytes = 0;
	for (int k = 0; k < READERS; k++) {
		pthread_join(th[k], NULL);
		ep->bytes += rd[k].bytes;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ep->secs = (double)(t1.tv_sec - t0.tv_sec) +
		   (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	for (int k = 0; k < READERS; k++)
		cr_assert_eq(rd[k].why[0], '\0', "reader %d: %s (%u failures)",
			     k, rd[k].why, atomic_load(&failures));
	cr_assert_eq(atomic_load(&failures), 0);
	cr_assert_eq(ep->bytes, ds_total_bytes(&S), "read %llu of %llu bytes",
		     (unsigned long long)ep->bytes,
		     (unsigned long long)ds_total_bytes(&S));
	const char *stats = fx_proxy_control(&P, "stats\n");
	ep->limited = fx_proxy_stat(stats, "rate_limited");
	ep->passed = fx_proxy_stat(stats, "requests") - ep->limited;
	ep->slowdowns = fx_stat_value(D.socket_path,
				      "ringcache_s3_slowdowns_total");
	ep->throttled_s = fx_stat_value(D.socket_path,
		"ringcache_s3_throttled_seconds_total");
	ep->gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	ep->heads = fx_stat_value(D.socket_path, "ringcache_s3_head_total");
	fprintf(stderr, "budget: %.2f s, %llu requests passed (%.1f/s at a "
		"limit of %d/s), %llu SlowDown (%.2f%%), daemon: %lld GET, "
		"%lld HEAD, %lld SlowDown, %lld s throttled\n", ep->secs,
		(unsigned long long)ep->passed, ep->passed / ep->secs, LIMIT,
		(unsigned long long)ep->limited,
		100.0 * ep->limited / (double)(ep->passed + ep->limited),
		(long long)ep->gets, (long long)ep->heads,
		(long long)ep->slowdowns, (long long)ep->throttled_s);
}

/* The daemon saw every SlowDown the proxy sent, and the budget delayed
 * requests rather than letting S3 refuse them. */
static void common_checks(const struct epoch *ep)
{
	cr_expect_eq((uint64_t)ep->slowdowns, ep->limited,
		     "daemon counted %lld SlowDowns, proxy sent %llu",
		     (long long)ep->slowdowns,
		     (unsigned long long)ep->limited);
	/* Readers slowed by a sanitizer may not ask for more than the
	 * limit at all. */
	if (!SANITIZED)
		cr_expect_gt(ep->throttled_s, 0,
			     "no request waited for the budget");
	/* Passed requests never beat the limit (its 0.1 s burst aside). */
	cr_expect_leq(ep->passed, LIMIT * ep->secs + LIMIT / 10 + 1,
		      "%llu requests passed in %.2f s at %d/s",
		      (unsigned long long)ep->passed, ep->secs, LIMIT);
}

/* The budget does not starve the link. Loosely, and not in sanitizer
 * builds: there the readers' byte checks are the limit on a loaded 2-core
 * machine (~67/s under ASan, ~25/s under TSan, shaping off too).
 * perf/budgetbench.sh measures how close to the limit it gets. */
static void link_used(const struct epoch *ep)
{
	if (SANITIZED)
		return;
	cr_expect_geq(ep->passed / ep->secs, 0.5 * LIMIT,
		      "%.1f requests/s at a limit of %d/s",
		      ep->passed / ep->secs, LIMIT);
}

/* A daemon with budget_lines behind the limiting proxy, one cold epoch. */
static void epoch_with(const char *budget_lines, struct epoch *ep)
{
	start(budget_lines);
	cold_epoch(ep);
}

static void stop_all(void)
{
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
}

/* The operator set the dataset's rate at what S3 allows the node:
 * (almost) nothing is refused. */
Test(budget, rate_at_the_limit_reads_every_byte_without_slowdowns)
{
	struct epoch ep;
	epoch_with("s3_get_rate = " LIMIT_STR "\n", &ep);
	common_checks(&ep);
	cr_expect_leq(ep.limited * 100, (ep.passed + ep.limited) * 1,
		      "%llu of %llu requests refused (over 1%%)",
		      (unsigned long long)ep.limited,
		      (unsigned long long)(ep.passed + ep.limited));
	link_used(&ep);
	stop_all();
}

/* The default rate (5500/s) is far above the proxy's: AIMD must find the
 * limit from the SlowDowns. Few are allowed (most come in the first
 * 0.2 s, while it finds the limit; shaping off gets ~37% here), and the
 * reads all succeed. */
Test(budget, aimd_finds_a_lower_limit_and_reads_every_byte)
{
	struct epoch ep;
	epoch_with(NULL, &ep);
	common_checks(&ep);
	cr_expect_leq(ep.limited * 100, (ep.passed + ep.limited) * 8,
		      "%llu of %llu requests refused (over 8%%)",
		      (unsigned long long)ep.limited,
		      (unsigned long long)(ep.passed + ep.limited));
	link_used(&ep);
	stop_all();
}

/* At debug level the daemon logs each GET's timeline (perf/README.md
 * reads cold starts so): one line per GET it counted, naming bucket and
 * key, and the request budget's wait in it, not 0 for all of them at a
 * rate the epoch overruns. */
Test(budget, each_get_logs_its_timeline_at_debug_level)
{
	struct epoch ep;
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.log_level = "debug";
	start_with_daemon("s3_get_rate = " LIMIT_STR "\n");
	cold_epoch(&ep);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
	int lines = fx_daemon_log_count(&D, ": GET bucket ");
	int timed = fx_daemon_log_count(&D, "timeline: sent after ");
	int unthrottled = fx_daemon_log_count(&D, "(request budget 0.0 ms,");
	cr_expect_eq(lines, ep.gets, "%d GET lines for %lld GETs", lines,
		     (long long)ep.gets);
	cr_expect_geq(timed, lines);
	char key[DS_KEY_MAX], needle[DS_KEY_MAX + 16];
	ds_key(&S, 0, key);
	snprintf(needle, sizeof(needle), "%s: HTTP 20", key);
	cr_expect(fx_daemon_log_contains(&D, needle), "no line for %s", key);
	if (!SANITIZED)
		cr_expect_lt(unthrottled, lines,
			     "no GET waited for the budget (%d of %d)",
			     unthrottled, lines);
}

/* s3_get_rate = 0 turns shaping off: every byte still arrives (SlowDowns
 * are retried), the request wait counter stays at zero. */
Test(budget, rate_zero_does_not_shape)
{
	struct epoch ep;
	epoch_with("s3_get_rate = 0\n", &ep);
	cr_expect_eq(ep.throttled_s, 0);
	cr_expect_eq((uint64_t)ep.slowdowns, ep.limited);
	stop_all();
}

/* ---- the write path: checkpoint uploads take PUT-class slots ---------- */

#define MiB (1024u * 1024u)
static char scratch[160];

static uint8_t pattern(uint64_t off)
{
	uint64_t x = (off + 1) * 0x9e3779b97f4a7c15ull;
	x ^= x >> 29;
	return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

/* Dataset "ck", writable, 5 MiB parts, with more lines; the daemon's S3
 * is P when endpoint is set. */
static void start_writer(const char *endpoint, const char *ck_lines)
{
	char sub[200], ck[1024], lines[512];
	fx_unique(scratch, sizeof(scratch), "budget");
	snprintf(sub, sizeof(sub), "%s/", scratch);
	snprintf(lines, sizeof(lines),
		 "allow_uids = *\nwritable = true\nwrite_uids = 0\n"
		 "durability = memory\npart_size = 5M\nupload_concurrency = 4\n"
		 "%s", ck_lines);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, lines);
	fx_daemon_init(&D);
	D.s3_endpoint = endpoint;
	D.max_retries = 10;
	fx_daemon_start(&D, ck);
}

/* Writes size bytes of pattern() as key, commits, waits for S3, and
 * checks the object there byte for byte. Returns the seconds it took. */
static double upload_and_check(const char *key, uint64_t size)
{
	struct rc_client c;
	struct timespec t0, t1;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ck");
	cr_assert_geq(ds, 0);
	void *mem;
	int buf = rc_alloc_buffer(&c, MiB, &mem);
	cr_assert_geq(buf, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int h = rc_write_open(&c, ds, key);
	cr_assert_geq(h, 0, "write_open: %s", rc_strerror(h));
	for (uint64_t off = 0; off < size; off += MiB) {
		uint64_t n = size - off < MiB ? size - off : MiB;
		for (uint64_t i = 0; i < n; i++)
			((uint8_t *)mem)[i] = pattern(off + i);
		cr_assert_eq(rc_write(&c, (uint32_t)h, off, n, (uint32_t)buf,
				      0), (ssize_t)n);
	}
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	int r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, 0, "sync: %s", rc_strerror(r));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	rc_detach(&c);
	char full[512];
	char *body;
	size_t len;
	snprintf(full, sizeof(full), "%s%s/%s", fx_env()->prefix, scratch, key);
	cr_assert_eq(fx_get_object(full, &body, &len), 0, "%s not in S3", full);
	cr_assert_eq(len, size);
	for (uint64_t i = 0; i < size; i++)
		if ((uint8_t)body[i] != pattern(i))
			cr_assert_fail("%s: byte %llu differs", key,
				       (unsigned long long)i);
	free(body);
	return (double)(t1.tv_sec - t0.tv_sec) +
	       (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

/* s3_put_rate = 4: a 26 MiB checkpoint is Create + 6 parts + Complete,
 * 8 requests, so at least ~1.75 s (one burst slot) however fast S3 is;
 * the object lands whole. */
Test(budget, uploads_wait_for_the_put_budget)
{
	start_writer(NULL, "s3_put_rate = 4\n");
	double secs = upload_and_check("shard-0.pt", 26 * MiB);
	cr_expect_geq(secs, 1.6, "8 PUT-class requests at 4/s in %.2f s",
		      secs);
	cr_expect_gt(fx_stat_value(D.socket_path,
		"ringcache_s3_throttled_seconds_total"), 0);
	fx_daemon_stop(&D);
}

/* An S3 refusing uploads over 5 requests/s with the default PUT rate
 * (3500/s): the parts' SlowDowns are counted, AIMD slows the PUT class,
 * retries land every byte. */
Test(budget, uploads_through_slowdowns_land_whole)
{
	static const char *const opts[] = { "--latency-ms", "5",
		"--rate-limit", "5", NULL };
	fx_proxy_start(&P, opts);
	start_writer(P.endpoint, "");
	/* The start-up bucket check (preflight.c) and the abandoned-upload
	 * sweep (writeback.c) have their own S3 clients, outside the
	 * counters, and go through the proxy too: count from their ends. */
	static const char *const startup[] = {
		"preflight: dataset ds,", "preflight: dataset ck,",
		"abandoned multipart uploads checked"};
	for (size_t k = 0; k < sizeof(startup) / sizeof(startup[0]); k++) {
		for (int i = 0; i < 3000 &&
		     !fx_daemon_log_contains(&D, startup[k]); i++)
			usleep(10000);
		cr_assert(fx_daemon_log_contains(&D, startup[k]),
			  "no \"%s\" in the log within 30 s", startup[k]);
	}
	uint64_t before = fx_proxy_stat(fx_proxy_control(&P, "stats\n"),
					"rate_limited");
	upload_and_check("shard-1.pt", 26 * MiB);
	int64_t slow = fx_stat_value(D.socket_path,
				     "ringcache_s3_slowdowns_total");
	uint64_t limited = fx_proxy_stat(fx_proxy_control(&P, "stats\n"),
					 "rate_limited") - before;
	cr_expect_eq((uint64_t)slow, limited, "daemon %lld, proxy %llu",
		     (long long)slow, (unsigned long long)limited);
	cr_expect_gt(slow, 0, "5/s was never exceeded");
	stop_all();
}
