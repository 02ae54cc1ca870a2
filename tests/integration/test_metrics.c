/* test_metrics.c - the statistics a scraper sees, against a real
 * ringcached in front of the real S3 server: the metrics_listen endpoint
 * answers GET /metrics with what the reads did (a read-wait histogram per
 * GPU counting every READ and READ_INTO, hits per dataset adding up to the
 * cache's), promtool accepts its real output, the write-back backlog
 * counts committed objects and their bytes until S3 has them (and the
 * oldest one's age grows meanwhile), `ringcache status` shows the
 * prefetch, backlog and read-wait lines, an address already taken
 * stops the daemon with a message naming the key, and a reload leaves
 * the endpoint where it is, saying metrics_listen needs a restart. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "fixture/scrape.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)
#define BODY_MAX (1u << 20)

static struct fx_daemon D;
static struct fx_proxy P;
static bool proxy_on;
static struct ds_spec S;
static unsigned port;
static char daemon_extra[512], sections[1024], out[BODY_MAX];

static void teardown(void)
{
	fx_daemon_kill(&D);
	if (proxy_on)
		fx_proxy_kill(&P);
}

/* A daemon whose endpoint is on a free loopback port; extra sections. */
static void start(const char *extra)
{
	ds_spec_default(&S);
	port = fx_metrics_daemon_init(&D, daemon_extra, sizeof(daemon_extra),
				      NULL);
	cr_assert_neq(port, 0);
	fx_daemon_start(&D, extra);
}

static void attach_gpu(struct rc_client *c, int gpu)
{
	struct rc_attach_opts o = {.gpu = gpu, .numa_node = -1};
	int r = rc_attach(c, D.socket_path, gpu >= 0 ? &o : NULL);
	cr_assert_eq(r, 0, "attach: %s", rc_strerror(r));
}

/* The first object of the dataset of at least min bytes. */
static size_t big_object(uint64_t min)
{
	for (size_t i = 0; i < ds_count(&S); i++)
		if (ds_size(&S, i) >= min)
			return i;
	cr_assert_fail("no object of %llu bytes in the dataset",
		       (unsigned long long)min);
	return 0;
}

/* Zero-copy READs of blocks [0, n) of object i, checked; returns how
 * many READ entries that took. */
static unsigned read_blocks(struct rc_client *c, size_t i, unsigned n)
{
	char key[DS_KEY_MAX];
	struct rc_stat st;
	int ds = rc_dataset(c, "ds");
	int h = rc_open(c, ds, ds_key(&S, i, key), &st);
	cr_assert_geq(h, 0, "open: %s", rc_strerror(h));
	unsigned reads = 0;
	for (uint64_t off = 0; off < (uint64_t)n * MiB;) {
		struct rc_extent ext[4];
		int k = rc_read(c, (uint32_t)h, off, (uint64_t)n * MiB - off,
				ext, 4);
		cr_assert_gt(k, 0, "read: %s", rc_strerror(k));
		reads += (unsigned)k; /* one READ per block */
		for (int j = 0; j < k; j++) {
			fx_assert_ds_bytes(&S, i, off, ext[j].data, ext[j].len,
					   "read");
			off += ext[j].len;
			rc_release(c, ext[j].lease);
		}
	}
	rc_close(c, (uint32_t)h);
	return reads;
}

static double value(const char *series)
{
	return fx_prom_value(out, series);
}

static void scrape(void)
{
	int st = fx_scrape(port, out, sizeof(out));
	cr_assert_eq(st, 200, "GET /metrics: %d\n%.300s", st, out);
}

Test(metrics, endpoint_shows_read_wait_per_gpu_and_hits_per_dataset,
     .fini = teardown, .timeout = 120)
{
	start(NULL);
	struct rc_client g3, plain;
	attach_gpu(&g3, 3);
	attach_gpu(&plain, -1);
	size_t i = big_object(8 * MiB);
	unsigned cold = read_blocks(&g3, i, 4);
	unsigned warm = read_blocks(&g3, i, 4);
	unsigned other = read_blocks(&plain, i, 2);
	scrape();
	/* Every READ of the session that named GPU 3 is in its histogram,
	 * the other session's under gpu="none". */
	cr_assert_eq(value("ringcache_read_wait_seconds_count{gpu=\"3\"}"),
		     (double)(cold + warm));
	cr_assert_eq(value("ringcache_read_wait_seconds_bucket{gpu=\"3\",le=\"+Inf\"}"),
		     (double)(cold + warm));
	cr_assert_eq(value("ringcache_read_wait_seconds_count{gpu=\"none\"}"),
		     (double)other);
	cr_assert_gt(value("ringcache_read_wait_seconds_sum{gpu=\"3\"}"), 0);
	cr_assert(isnan(value("ringcache_read_wait_seconds_count{gpu=\"0\"}")),
		  "a GPU nobody named has no histogram");
	/* The dataset's lookups are the cache's: 4 misses then hits. */
	double hits = value("ringcache_dataset_cache_hits_total{dataset=\"ds\"}");
	double misses = value("ringcache_dataset_cache_misses_total{dataset=\"ds\"}");
	cr_assert_eq(hits, value("ringcache_cache_hits_total"));
	cr_assert_eq(misses, value("ringcache_cache_misses_total"));
	cr_assert_eq(misses, 4);
	cr_assert_eq(hits, 4 + 2);
	cr_assert_float_eq(value("ringcache_dataset_hit_ratio{dataset=\"ds\"}"),
			   hits / (hits + misses), 1e-5);
	/* The same numbers as the STATS message. */
	cr_assert_eq((int64_t)hits,
		     fx_stat_value(D.socket_path, "ringcache_cache_hits_total"));
	rc_detach(&g3);
	rc_detach(&plain);
	fx_daemon_stop(&D);
}

Test(metrics, promtool_accepts_the_endpoint_output, .fini = teardown,
     .timeout = 120)
{
	if (access("/usr/bin/promtool", X_OK) != 0)
		cr_skip_test("promtool is missing: install Debian's prometheus "
			     "(contrib/install-deps.sh does)");
	char second[600];
	fx_dataset_section(second, sizeof(second), "other", "other/",
			   "allow_uids = *");
	start(second);
	struct rc_client c;
	attach_gpu(&c, 1);
	size_t i = big_object(4 * MiB);
	read_blocks(&c, i, 3);
	/* A plan: the per-queue family has a sample too. */
	char key[DS_KEY_MAX];
	struct rc_stat st;
	int h = rc_open(&c, rc_dataset(&c, "ds"), ds_key(&S, i, key), &st);
	cr_assert_geq(h, 0);
	void *mem;
	int buf = rc_alloc_buffer(&c, 4096, &mem);
	cr_assert_geq(buf, 0);
	*(struct rc_plan_entry *)mem = (struct rc_plan_entry){
		.handle = (uint32_t)h, .offset = 0, .len = st.size};
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)buf, 0, 1), 1);
	scrape();
	cr_assert(strstr(out, "ringcache_queue_prefetch_bytes{"),
		  "no queue sample:\n%s", out);
	cr_assert(strstr(out, "\nringcache_dataset_hit_ratio{dataset=\"other\"} "
			 "NaN\n"), "a dataset never read has no ratio yet, "
		  "spelled as the exposition format spells it:\n%s", out);
	/* What runs and since when: this build's version and commit, a
	 * start within the daemon's life. */
	char info[128];
	snprintf(info, sizeof(info), "\nringcache_build_info{version=\"%s\",",
		 RC_PROJECT_VERSION);
	cr_assert(strstr(out, info), "no %s in:\n%s", info + 1, out);
	/* the mount trusts names and attributes this long */
	cr_assert(strstr(out, "\nringcache_metadata_ttl_seconds "),
		  "no metadata_ttl gauge:\n%s", out);
	cr_assert_eq(value("ringcache_metadata_ttl_seconds"),
		     (double)D.metadata_ttl);
	double started = value("ringcache_start_time_seconds");
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	cr_assert(started <= (double)wall.tv_sec + 1 &&
		  started > (double)wall.tv_sec - 600,
		  "start time %.3f, now %lld", started, (long long)wall.tv_sec);
	char path[300];
	snprintf(path, sizeof(path), "%s/metrics.txt", fx_tmpdir());
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(out, f);
	fclose(f);
	char cmd[400], res[8192];
	snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s'", path);
	char *argv[] = {"/bin/sh", "-c", cmd, NULL};
	int rc = fx_run(argv, res, sizeof(res), 30000);
	cr_assert_eq(rc, 0, "promtool check metrics (%d):\n%s", rc, res);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* Writes size bytes (byte k = (k * 7 + seed) & 255) as key in dataset
 * "ck" and commits; returns the write handle. */
static int write_commit(struct rc_client *c, const char *key, uint64_t size,
			unsigned seed)
{
	void *mem;
	int buf = rc_alloc_buffer(c, size, &mem);
	cr_assert_geq(buf, 0);
	for (uint64_t k = 0; k < size; k++)
		((uint8_t *)mem)[k] = (uint8_t)(k * 7 + seed);
	int h = rc_write_open(c, rc_dataset(c, "ck"), key);
	cr_assert_geq(h, 0, "write_open: %s", rc_strerror(h));
	ssize_t w = rc_write(c, (uint32_t)h, 0, size, (uint32_t)buf, 0);
	cr_assert_eq(w, (ssize_t)size, "write: %s", rc_strerror((int)w));
	int r = rc_commit(c, (uint32_t)h);
	cr_assert_eq(r, 0, "commit: %s", rc_strerror(r));
	return h;
}

Test(metrics, writeback_backlog_until_s3_has_the_objects, .fini = teardown,
     .timeout = 120)
{
	/* No latency while the daemon starts (its start-up requests go
	 * through the proxy too); then S3's answers are held 4 s while we
	 * look, and released before the SYNC. */
	const char *pass[] = {"--latency-ms", "0", NULL};
	fx_proxy_start(&P, pass);
	proxy_on = true;
	char scratch[96], sub[128], ck[600];
	fx_unique(scratch, sizeof(scratch), "metrics");
	snprintf(sub, sizeof(sub), "%s/", scratch);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, "allow_uids = *");
	snprintf(sections, sizeof(sections),
		 "%swritable = true\nwrite_uids = 0\ndurability = memory\n", ck);
	ds_spec_default(&S);
	port = fx_metrics_daemon_init(&D, daemon_extra, sizeof(daemon_extra),
				      NULL);
	D.s3_endpoint = P.endpoint;
	fx_daemon_start(&D, sections);
	struct rc_client c;
	attach_gpu(&c, -1);
	cr_assert_null(strstr(fx_proxy_control(&P, "set latency-ms 4000\n"),
			      "error"));
	const uint64_t a = MiB + 5, b = 3 * MiB + 1;
	write_commit(&c, "a", a, 1);
	write_commit(&c, "b", b, 2);
	scrape();
	cr_assert_eq(value("ringcache_writeback_backlog_objects"), 2, "%s", out);
	cr_assert_eq(value("ringcache_writeback_backlog_bytes"), (double)(a + b));
	usleep(1200 * 1000);
	scrape();
	double age = value("ringcache_writeback_oldest_unuploaded_seconds");
	cr_assert(age >= 1.1 && age < 60, "oldest: %f", age);
	char *argv[] = {RC_BUILD_DIR "/ringcache", "-s", D.socket_path,
			"status", NULL};
	char res[8192];
	cr_assert_eq(fx_run(argv, res, sizeof(res), 30000), 0, "%s", res);
	static const char line[] = "backlog     2 objects (4.0 MiB) not yet "
				   "in S3, the oldest committed ";
	const char *p = strstr(res, line);
	cr_assert(p, "%s", res);
	p += sizeof(line) - 1;
	cr_assert(p[0] >= '1' && p[0] <= '5' && !strncmp(p + 1, "s ago", 5),
		  "%s", res);
	cr_assert(strstr(res, "prefetch    0 B fetched ahead"), "%s", res);
	cr_assert_null(strstr(fx_proxy_control(&P, "set latency-ms 0\n"
					       "release\n"), "error"));
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	scrape();
	cr_assert_eq(value("ringcache_writeback_backlog_objects"), 0);
	cr_assert_eq(value("ringcache_writeback_backlog_bytes"), 0);
	cr_assert_eq(value("ringcache_writeback_oldest_unuploaded_seconds"), 0);
	cr_assert_eq(value("ringcache_writeback_uploaded_total"), 2);
	rc_detach(&c);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
	proxy_on = false;
}

Test(metrics, status_shows_prefetch_and_read_wait, .fini = teardown,
     .timeout = 120)
{
	start(NULL);
	struct rc_client c;
	attach_gpu(&c, 2);
	size_t i = big_object(8 * MiB);
	char key[DS_KEY_MAX];
	struct rc_stat st;
	int h = rc_open(&c, rc_dataset(&c, "ds"), ds_key(&S, i, key), &st);
	cr_assert_geq(h, 0);
	void *mem;
	int buf = rc_alloc_buffer(&c, 4096, &mem);
	*(struct rc_plan_entry *)mem = (struct rc_plan_entry){
		.handle = (uint32_t)h, .offset = 0, .len = 8 * MiB};
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)buf, 0, 1), 1);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_prefetch_bytes_total", 8 * MiB,
				  10000), 8 * MiB);
	unsigned reads = read_blocks(&c, i, 2);
	char *argv[] = {RC_BUILD_DIR "/ringcache", "-s", D.socket_path,
			"status", NULL};
	char res[8192], want[128];
	cr_assert_eq(fx_run(argv, res, sizeof(res), 30000), 0, "%s", res);
	cr_assert(strstr(res, "prefetch    8.0 MiB fetched ahead"), "%s", res);
	cr_assert(strstr(res, "1 queues with a plan"), "%s", res);
	snprintf(want, sizeof(want), "read wait   gpu 2: %u reads, mean wait ",
		 reads);
	cr_assert(strstr(res, want), "no '%s' in:\n%s", want, res);
	cr_assert(strstr(res, "backlog     0 objects (0 B) not yet in S3"),
		  "%s", res);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* The journal's and the tier's gauges are copied by their shard's thread
 * (metrics_publish_start): the endpoint's thread shows them all the same. */
Test(metrics, journal_and_tier_gauges_reach_the_endpoint, .fini = teardown,
     .timeout = 60)
{
	char more[sizeof(daemon_extra)];
	snprintf(more, sizeof(more),
		 "journal = %s/journal\njournal_size = 64M\n"
		 "tier_path = %s/tier\ntier_size = 64M", fx_tmpdir(), fx_tmpdir());
	ds_spec_default(&S);
	port = fx_metrics_daemon_init(&D, daemon_extra, sizeof(daemon_extra),
				      more);
	fx_daemon_start(&D, NULL);
	scrape();
	cr_assert_eq(value("ringcache_writeback_journal_bytes"), 64.0 * MiB,
		     "%s", out);
	cr_assert_gt(value("ringcache_tier_capacity_bytes"), 0);
	cr_assert_leq(value("ringcache_tier_capacity_bytes"), 64.0 * MiB);
	cr_assert_eq(value("ringcache_tier_bytes_used"), 0);
	fx_daemon_stop(&D);
}

/* An address another socket holds: the daemon does not start, and says
 * which key and address. */
Test(metrics, a_taken_address_stops_the_start, .fini = teardown,
     .timeout = 60)
{
	int holder = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(holder, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(holder, 1), 0);
	getsockname(holder, (struct sockaddr *)&a, &al);
	const struct fx_env *e = fx_env();
	char path[300], conf[2048], res[8192];
	snprintf(path, sizeof(path), "%s/taken.conf", fx_tmpdir());
	snprintf(conf, sizeof(conf),
		 "[daemon]\nsocket = %s/taken.sock\nmemory = 64M\n"
		 "metrics_listen = 127.0.0.1:%u\n"
		 "[s3]\nendpoint = %s\nregion = %s\ncredentials = config\n"
		 "access_key = %s\nsecret_key = %s\n"
		 "[dataset ds]\nuri = s3://%s/%sds/\n",
		 fx_tmpdir(), ntohs(a.sin_port), e->endpoint, e->region,
		 e->access_key, e->secret_key, e->bucket, e->prefix);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(conf, f);
	fclose(f);
	chmod(path, 0600);
	char *argv[] = {RC_BUILD_DIR "/ringcached", "-c", path, NULL};
	int rc = fx_run(argv, res, sizeof(res), 20000);
	close(holder);
	cr_assert_eq(rc, 1, "exit %d:\n%s", rc, res);
	char want[96];
	snprintf(want, sizeof(want), "metrics_listen: 127.0.0.1:%u: Address "
		 "already in use", ntohs(a.sin_port));
	cr_assert(strstr(res, want), "no '%s' in:\n%s", want, res);
}

/* metrics_listen is read at start only: a reload that changes it keeps
 * the endpoint where it was, logs that the key needs a restart, and
 * `ringcache status` names it until then. */
Test(metrics, a_reload_keeps_the_endpoint_and_says_it_needs_a_restart,
     .fini = teardown, .timeout = 120)
{
	start(NULL);
	cr_assert_eq(fx_scrape(port, out, sizeof(out)), 200, "%s", out);
	unsigned old_port = port, new_port = fx_free_port();
	cr_assert_neq(new_port, 0);
	cr_assert_neq(new_port, old_port);
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "metrics_listen = 127.0.0.1:%u", new_port);
	cr_assert_eq(fx_daemon_reload(&D, NULL), 0);
	char want[200];
	snprintf(want, sizeof(want), "reload: [daemon] metrics_listen: "
		 "127.0.0.1:%u -> 127.0.0.1:%u needs a restart; still running "
		 "with 127.0.0.1:%u", old_port, new_port, old_port);
	cr_assert(fx_daemon_log_contains(&D, want), "no '%s' in the log", want);
	cr_assert_eq(fx_scrape(old_port, out, sizeof(out)), 200,
		     "the endpoint moved or stopped at the reload");
	int fd = fx_dial(new_port);
	int err = errno;
	if (fd >= 0)
		close(fd);
	cr_assert(fd < 0 && err == ECONNREFUSED,
		  "something listens on the new address before a restart");
	char *argv[] = {RC_BUILD_DIR "/ringcache", "-s", D.socket_path,
			"status", NULL};
	char res[8192];
	cr_assert_eq(fx_run(argv, res, sizeof(res), 30000), 0, "%s", res);
	cr_assert(strstr(res, "differs from the file until a restart: "
			 "daemon.metrics_listen"), "%s", res);
}
