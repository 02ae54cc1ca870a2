/* test_prefetch.c - prefetch plans against a real ringcached and S3: one
 * submission carries a large plan, reads that follow a plan hit, a
 * replaced plan cancels its GETs, queues share a saturated backend fairly,
 * and planned, unread blocks survive another client's scan. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)

static struct fx_daemon D;
static struct fx_proxy P;
static bool proxy_on;
static struct ds_spec S;

static void teardown(void)
{
	fx_daemon_kill(&D);
	if (proxy_on)
		fx_proxy_kill(&P);
}

static void start(const char *memory, const char *daemon_extra,
		  const char *const *proxy_args)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.memory = memory;
	D.daemon_extra = daemon_extra;
	if (proxy_args) {
		fx_proxy_start(&P, proxy_args);
		proxy_on = true;
		D.s3_endpoint = P.endpoint;
	}
	fx_daemon_start(&D, NULL);
}

static void attach(struct rc_client *c)
{
	int r = rc_attach(c, D.socket_path, NULL);
	cr_assert_eq(r, 0, "attach: %s", rc_strerror(r));
}

/* Opens every "small/" object; returns how many, handles in h. */
static size_t open_small(struct rc_client *c, int ds, uint32_t *h,
			 size_t *idx, size_t max)
{
	size_t n = 0;
	char key[256];
	for (size_t i = 0; i < ds_count(&S) && n < max; i++) {
		ds_key(&S, i, key);
		if (strncmp(key, "small/", 6) != 0)
			continue;
		int r = rc_open(c, ds, key, NULL);
		cr_assert_geq(r, 0, "open %s: %s", key, rc_strerror(r));
		h[n] = (uint32_t)r;
		idx[n++] = i;
	}
	return n;
}

/* READ_INTO of a whole object through the async API; returns cqe flags. */
static uint32_t read_whole(struct rc_client *c, uint32_t h, uint64_t size,
			   uint32_t buf, const void *mem, size_t i)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	cr_assert_not_null(sqe);
	rc_prep_read_into(sqe, h, 0, size, buf, 0, 7);
	cr_assert_eq(rc_submit(c), 1);
	struct rc_cqe *cqe;
	cr_assert_eq(rc_wait_cqe(c, &cqe), 0);
	cr_assert_eq(cqe->res, (int32_t)size, "read_into: %d", cqe->res);
	uint32_t flags = cqe->flags;
	rc_cqe_seen(c);
	fx_assert_ds_bytes(&S, i, 0, mem, size, "planned read");
	return flags;
}

Test(prefetch, plan_of_100k_entries_in_one_submission, .fini = teardown,
     .timeout = 60)
{
	start(NULL, NULL, NULL);
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "ds");
	uint32_t h[300];
	size_t idx[300];
	size_t n = open_small(&c, ds, h, idx, 300);
	cr_assert_geq(n, 100);
	const uint64_t count = 100000;
	void *mem;
	int buf = rc_alloc_buffer(&c, count * sizeof(struct rc_plan_entry), &mem);
	cr_assert_geq(buf, 0);
	struct rc_plan_entry *plan = mem;
	for (uint64_t i = 0; i < count; i++)
		plan[i] = (struct rc_plan_entry){.handle = h[i % n],
						 .offset = 0, .len = 4096};
	int r = rc_prefetch_plan(&c, (uint32_t)buf, 0, count);
	cr_assert_eq(r, (int)count, "plan: %s", rc_strerror(r));
	double t0 = rc_now_s(); /* 30 s: a hang, not a loaded machine */
	while (fx_stat_value(D.socket_path, "ringcache_prefetch_bytes_total") == 0
	       && rc_now_s() - t0 < 30)
		usleep(10000);
	cr_assert_gt(fx_stat_value(D.socket_path,
				   "ringcache_prefetch_bytes_total"), 0);
	/* A plan naming a wild handle fails whole and changes nothing. */
	plan[77].handle = 999999;
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)buf, 0, count), -EBADF);
	plan[77].handle = h[0];
	plan[78].reserved = 1;
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)buf, 0, count), -EINVAL);
	/* A length that is not a whole number of entries is malformed. */
	struct rc_sqe *sqe = rc_get_sqe(&c);
	rc_prep_prefetch_plan(sqe, (uint32_t)buf, 0, 1, 5);
	sqe->len = sizeof(struct rc_plan_entry) + 3;
	rc_submit(&c);
	struct rc_cqe *cqe;
	cr_assert_eq(rc_wait_cqe(&c, &cqe), 0);
	cr_assert_eq(cqe->res, -EINVAL);
	rc_cqe_seen(&c);
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)buf, 0, 0), 0, "drop plan");
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* A plan is handed over by `planner`; `reader` reads in that order with a
 * short "GPU step" between reads. They are one client, or two attached
 * for the same GPU (a DataLoader's main process and its worker). */
static void follow_plan(bool shared_gpu)
{
	start("512M", NULL, NULL);
	struct rc_client pc, rc;
	struct rc_attach_opts o = {.gpu = 3, .numa_node = -1};
	int r = rc_attach(&pc, D.socket_path, shared_gpu ? &o : NULL);
	cr_assert_eq(r, 0);
	struct rc_client *planner = &pc, *reader = &pc;
	if (shared_gpu) {
		cr_assert_eq(rc_attach(&rc, D.socket_path, &o), 0);
		reader = &rc;
	}
	int ds = rc_dataset(planner, "ds");
	uint32_t ph[300], rh[300];
	size_t idx[300];
	size_t n = open_small(planner, ds, ph, idx, 300);
	if (shared_gpu)
		open_small(reader, ds, rh, idx, 300);
	else
		memcpy(rh, ph, sizeof(ph));
	void *plan_mem, *data;
	int pb = rc_alloc_buffer(planner, n * sizeof(struct rc_plan_entry), &plan_mem);
	int db = rc_alloc_buffer(reader, 2 * MiB, &data);
	cr_assert(pb >= 0 && db >= 0);
	/* A shuffled epoch order, as a sampler would produce. */
	size_t order[300];
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	srand(42);
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rand() % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	struct rc_plan_entry *plan = plan_mem;
	for (size_t k = 0; k < n; k++)
		plan[k] = (struct rc_plan_entry){
			.handle = ph[order[k]], .len = ds_size(&S, idx[order[k]])};
	cr_assert_eq(rc_prefetch_plan(planner, (uint32_t)pb, 0, n), (int)n);
	size_t hits = 0, counted = 0;
	for (size_t k = 0; k < n; k++) {
		size_t o2 = order[k];
		uint32_t flags = read_whole(reader, rh[o2], ds_size(&S, idx[o2]),
					    (uint32_t)db, data, idx[o2]);
		if (k >= 16) { /* after warm-up */
			counted++;
			hits += (flags & RC_CQE_F_HIT) != 0;
		}
		usleep(3000); /* the "GPU step" */
	}
	cr_log_info("planned reads served as hits: %zu of %zu", hits, counted);
	cr_assert_geq(hits * 100, counted * 90,
		      "only %zu of %zu planned reads were hits", hits, counted);
	rc_detach(&pc);
	if (shared_gpu)
		rc_detach(&rc);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_prefetch_pinned_bytes", 0, 30000), 0);
	fx_daemon_stop(&D);
}

Test(prefetch, reads_that_follow_the_plan_hit, .fini = teardown,
     .timeout = 120)
{
	follow_plan(false);
}

Test(prefetch, a_gpu_queue_follows_its_workers_reads, .fini = teardown,
     .timeout = 120)
{
	follow_plan(true);
}

/* The proxy's latency for GETs a test must catch in flight: a test
 * that stalls this long on a busy machine (the sanitizer builds' tests
 * side by side) finds them done. 400 ms was too short for that. */
#define HELD_MS "2000"

static void set_latency(const char *ms)
{
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "set latency-ms %s\n", ms);
	const char *r = fx_proxy_control(&P, cmd);
	cr_assert_str_eq(r, "ok\n", "proxy control: %s", r);
}

/* Polls until the daemon has a GET in flight (it sends them when its
 * loop next turns, later on a busy machine); fails after 30 s. */
static void wait_for_inflight(void)
{
	double t0 = rc_now_s();
	while (fx_stat_value(D.socket_path, "ringcache_s3_inflight") <= 0 &&
	       rc_now_s() - t0 < 30)
		usleep(2000);
	cr_assert_gt(fx_stat_value(D.socket_path, "ringcache_s3_inflight"), 0,
		     "no GET in flight");
}

/* A daemon behind a proxy holding GETs HELD_MS and a client that planned
 * up to max small objects (handles in h, indexes in idx, *n of them) in
 * the plan buffer *pb, returned once their GETs are in flight. The opens
 * (one HEAD each) go before the latency: 64 of them at 400 ms were 26 s
 * of waiting that tested nothing. */
static struct rc_plan_entry *plan_in_flight(struct rc_client *c, uint32_t *h,
					    size_t *idx, size_t max,
					    size_t *n, int *pb)
{
	const char *proxy[] = {"--latency-ms", "0", NULL};
	start(NULL, "prefetch_inflight = 16", proxy);
	attach(c);
	*n = open_small(c, rc_dataset(c, "ds"), h, idx, max);
	set_latency(HELD_MS);
	void *mem;
	*pb = rc_alloc_buffer(c, *n * sizeof(struct rc_plan_entry), &mem);
	struct rc_plan_entry *plan = mem;
	for (size_t k = 0; k < *n; k++)
		plan[k] = (struct rc_plan_entry){.handle = h[k], .len = 1};
	cr_assert_eq(rc_prefetch_plan(c, (uint32_t)*pb, 0, *n), (int)*n);
	wait_for_inflight();
	return plan;
}

Test(prefetch, replaced_plan_cancels_its_gets, .fini = teardown,
     .timeout = 60)
{
	struct rc_client c;
	uint32_t h[64];
	size_t idx[64], n;
	int pb;
	struct rc_plan_entry *plan = plan_in_flight(&c, h, idx, 64, &n, &pb);
	plan[0] = (struct rc_plan_entry){.handle = h[n - 1], .len = 1};
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)pb, 0, 1), 1);
	cr_assert_gt(fx_stat_value(D.socket_path,
				   "ringcache_prefetch_cancelled_total"), 0);
	set_latency("0"); /* the reads below need no hold */
	/* Cancelled blocks leave no pins or half-filled entries behind: the
	 * objects read back correctly. */
	void *data;
	int db = rc_alloc_buffer(&c, MiB, &data);
	for (size_t k = 0; k < 8; k++)
		read_whole(&c, h[k], ds_size(&S, idx[k]), (uint32_t)db, data,
			   idx[k]);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* A trainer killed mid-epoch comes back and reads what it had planned:
 * the GETs its plan had in flight finish into the cache. */
Test(prefetch, a_departed_clients_gets_fill_the_cache, .fini = teardown,
     .timeout = 60)
{
	struct rc_client c;
	uint32_t h[8];
	size_t idx[8], n;
	int pb;
	plan_in_flight(&c, h, idx, 8, &n, &pb);
	rc_detach(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_s3_inflight", 0,
				  30000), 0);
	set_latency("0"); /* the reads below need no hold */
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_prefetch_cancelled_total"), 0);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	cr_assert_gt(gets, 0);

	attach(&c);
	int ds = rc_dataset(&c, "ds");
	void *data;
	int db = rc_alloc_buffer(&c, MiB, &data);
	cr_assert_eq(open_small(&c, ds, h, idx, 8), n);
	int64_t hits = 0;
	for (size_t k = 0; k < n; k++)
		hits += (read_whole(&c, h[k], ds_size(&S, idx[k]),
				    (uint32_t)db, data, idx[k]) &
			 RC_CQE_F_HIT) != 0;
	/* Every object read once from S3 over both sessions. */
	cr_assert_eq(hits, gets, "%lld GETs before, %lld hits after",
		     (long long)gets, (long long)hits);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
		     (int64_t)n);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

static uint64_t queue_bytes(const char *stats, int nth)
{
	const char *needle = "ringcache_queue_prefetch_bytes{";
	const char *p = stats;
	for (int i = 0; (p = strstr(p, needle)); i++, p++)
		if (i == nth)
			return strtoull(strchr(p, '}') + 1, NULL, 10);
	return UINT64_MAX;
}

Test(prefetch, two_queues_share_a_saturated_backend_fairly,
     .fini = teardown, .timeout = 60)
{
	const char *proxy[] = {"--latency-ms", "5", "--bw-total", "20", NULL};
	start("512M", "prefetch_inflight = 4\nprefetch_window = 128M", proxy);
	struct rc_client a, b;
	attach(&a);
	attach(&b);
	int ds = rc_dataset(&a, "ds");
	int ha = rc_open(&a, ds, "large/1.bin", NULL);
	int hb = rc_open(&b, ds, "large/2.bin", NULL);
	cr_assert(ha >= 0 && hb >= 0);
	void *ma, *mb;
	int pa = rc_alloc_buffer(&a, sizeof(struct rc_plan_entry), &ma);
	int pb = rc_alloc_buffer(&b, sizeof(struct rc_plan_entry), &mb);
	*(struct rc_plan_entry *)ma = (struct rc_plan_entry){
		.handle = (uint32_t)ha, .len = 30 * MiB};
	*(struct rc_plan_entry *)mb = (struct rc_plan_entry){
		.handle = (uint32_t)hb, .len = 30 * MiB};
	cr_assert_eq(rc_prefetch_plan(&a, (uint32_t)pa, 0, 1), 1);
	cr_assert_eq(rc_prefetch_plan(&b, (uint32_t)pb, 0, 1), 1);
	/* Compare progress after both queues are busy: the first plan's
	 * head start (it filled the in-flight slots alone) is not unfair. */
	static char stats[65536];
	usleep(500000);
	cr_assert_gt(rc_stats(NULL, D.socket_path, stats, sizeof(stats)), 0);
	double t0 = rc_now_s();
	uint64_t x0 = queue_bytes(stats, 0);
	uint64_t y0 = queue_bytes(stats, 1);
	usleep(1500000);
	cr_assert_gt(rc_stats(NULL, D.socket_path, stats, sizeof(stats)), 0);
	/* The window as it was: a busy machine stretches the 1.5 s. */
	double window = rc_now_s() - t0;
	uint64_t x = queue_bytes(stats, 0);
	uint64_t y = queue_bytes(stats, 1);
	cr_assert(x0 != UINT64_MAX && y0 != UINT64_MAX && x != UINT64_MAX &&
		  y != UINT64_MAX, "%s", stats);
	x -= x0;
	y -= y0;
	uint64_t hi = x > y ? x : y, lo = x > y ? y : x;
	cr_log_info("prefetched in %.2f s: %llu and %llu bytes", window,
		    (unsigned long long)x, (unsigned long long)y);
	/* 20 MB/s in all: one queue's 40 MiB in 1.5 s would be no cap. */
	cr_assert_lt((double)hi, 40.0 * MiB * window / 1.5,
		     "the backend was not saturated: %llu bytes in %.2f s",
		     (unsigned long long)hi, window);
	cr_assert_gt(lo, 2ull * MiB, "a queue made no progress");
	cr_assert_geq(lo * 100, hi * 80, "unfair: %llu vs %llu",
		      (unsigned long long)x, (unsigned long long)y);
	rc_detach(&a);
	rc_detach(&b);
	fx_daemon_stop(&D);
}

/* A rank names the CUDA ordinal it uses; under CUDA_VISIBLE_DEVICES its
 * queue is the machine's GPU behind that ordinal, and the status says which
 * GPU and node each queue serves. */
Test(prefetch, a_ranks_queue_is_the_gpu_cuda_visible_devices_names,
     .fini = teardown, .timeout = 60)
{
	start("256M", NULL, NULL);
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = 1, .numa_node = -1};
	setenv("CUDA_VISIBLE_DEVICES", "3,6", 1);
	int r = rc_attach(&c, D.socket_path, &o);
	unsetenv("CUDA_VISIBLE_DEVICES");
	cr_assert_eq(r, 0, "attach: %s", rc_strerror(r));
	int ds = rc_dataset(&c, "ds");
	int h = rc_open(&c, ds, "small/00001.bin", NULL);
	cr_assert_geq(h, 0, "open: %s", rc_strerror(h));
	void *m;
	int p = rc_alloc_buffer(&c, sizeof(struct rc_plan_entry), &m);
	cr_assert_geq(p, 0);
	*(struct rc_plan_entry *)m = (struct rc_plan_entry){
		.handle = (uint32_t)h, .len = 1};
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)p, 0, 1), 1);
	static char stats[65536];
	cr_assert_gt(rc_stats(NULL, D.socket_path, stats, sizeof(stats)), 0);
	cr_assert(strstr(stats, "ringcache_queue_prefetch_bytes{shard=\"0\","
			 "queue=") && strstr(stats, ",gpu=\"6\",node=\""),
		  "cuda:1 under CUDA_VISIBLE_DEVICES=3,6 is GPU 6:\n%s", stats);
	char out[8192];
	char *argv[] = {RC_BUILD_DIR "/ringcache", "-s", D.socket_path,
			"status", NULL};
	cr_assert_eq(fx_run(argv, out, sizeof(out), 10000), 0, "%s", out);
	cr_assert(strstr(out, ": gpu 6, node "), "status names the GPU: %s",
		  out);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(prefetch, planned_unread_blocks_survive_a_scan, .fini = teardown,
     .timeout = 120)
{
	/* 96 MiB of cache: the window (capped at a quarter) holds the plan,
	 * the scan of ~150 other objects (85 MB) must evict around it. */
	start("96M", "prefetch_window = 24M", NULL);
	struct rc_client a, b;
	attach(&a);
	attach(&b);
	int ds = rc_dataset(&a, "ds");
	uint32_t ha[300], hb[300];
	size_t ia[300], ib[300];
	size_t na = open_small(&a, ds, ha, ia, 300);
	open_small(&b, ds, hb, ib, 300);
	const size_t planned = 24;
	void *pm, *da, *dbm;
	int pb = rc_alloc_buffer(&a, planned * sizeof(struct rc_plan_entry), &pm);
	int bufa = rc_alloc_buffer(&a, MiB, &da);
	int bufb = rc_alloc_buffer(&b, MiB, &dbm);
	struct rc_plan_entry *plan = pm;
	for (size_t k = 0; k < planned; k++)
		plan[k] = (struct rc_plan_entry){.handle = ha[k],
						 .len = ds_size(&S, ia[k])};
	cr_assert_eq(rc_prefetch_plan(&a, (uint32_t)pb, 0, planned),
		     (int)planned);
	/* Wait until the whole plan is fetched and pinned (13 MB; 40 s
	 * tells a stall from a loaded machine). */
	double t0 = rc_now_s();
	while (fx_stat_value(D.socket_path, "ringcache_prefetch_pinned_bytes") <
		       (int64_t)(planned * 550000) && rc_now_s() - t0 < 40)
		usleep(20000);
	while (fx_stat_value(D.socket_path, "ringcache_s3_inflight") > 0 &&
	       rc_now_s() - t0 < 40)
		usleep(20000);
	for (size_t k = 100; k < na; k++)
		read_whole(&b, hb[k], ds_size(&S, ib[k]), (uint32_t)bufb, dbm,
			   ib[k]);
	cr_assert_gt(fx_stat_value(D.socket_path,
				   "ringcache_cache_evictions_total"), 0);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	for (size_t k = 0; k < planned; k++) {
		uint32_t f = read_whole(&a, ha[k], ds_size(&S, ia[k]),
					(uint32_t)bufa, da, ia[k]);
		cr_assert(f & RC_CQE_F_HIT, "planned object %zu was evicted", k);
	}
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
		     gets, "planned reads went to S3");
	rc_detach(&a);
	rc_detach(&b);
	fx_daemon_stop(&D);
}

/* Fills a plan buffer with whole objects h[from .. from+n) of idx. */
static void plan_objects(struct rc_plan_entry *plan, const uint32_t *h,
			 const size_t *idx, size_t from, size_t n)
{
	for (size_t k = 0; k < n; k++)
		plan[k] = (struct rc_plan_entry){
			.handle = h[from + k], .len = ds_size(&S, idx[from + k])};
}

/* Two sessions over a 48 MiB cache (window of one entry): a, which plans,
 * and b, which scans; every small object opened by both, a plan buffer of
 * 30 entries for a and a sample buffer each. */
struct planner_and_scanner {
	struct rc_client a, b;
	uint32_t ha[300], hb[300];
	size_t ia[300], ib[300];
	size_t n;
	struct rc_plan_entry *plan;
	void *da, *db;
	int plan_buf, bufa, bufb;
};

static void planner_and_scanner_start(struct planner_and_scanner *t)
{
	start("48M", "prefetch_window_entries = 1", NULL);
	attach(&t->a);
	attach(&t->b);
	int ds = rc_dataset(&t->a, "ds");
	t->n = open_small(&t->a, ds, t->ha, t->ia, 300);
	open_small(&t->b, ds, t->hb, t->ib, 300);
	void *pm;
	t->plan_buf = rc_alloc_buffer(&t->a, 30 * sizeof(struct rc_plan_entry),
				      &pm);
	t->plan = pm;
	t->bufa = rc_alloc_buffer(&t->a, MiB, &t->da);
	t->bufb = rc_alloc_buffer(&t->b, MiB, &t->db);
}

/* Whole small object k through a (or b); returns the CQE flags. */
static uint32_t read_a(struct planner_and_scanner *t, size_t k)
{
	return read_whole(&t->a, t->ha[k], ds_size(&S, t->ia[k]),
			  (uint32_t)t->bufa, t->da, t->ia[k]);
}

static uint32_t read_b(struct planner_and_scanner *t, size_t k)
{
	return read_whole(&t->b, t->hb[k], ds_size(&S, t->ib[k]),
			  (uint32_t)t->bufb, t->db, t->ib[k]);
}

static void planner_and_scanner_stop(struct planner_and_scanner *t)
{
	rc_detach(&t->a);
	rc_detach(&t->b);
	fx_daemon_stop(&D);
}

/* Plan-aware eviction: blocks a plan will read soon stay, blocks nobody
 * plans go first, even when the planned ones are the oldest in memory. */
Test(prefetch, eviction_under_plans_keeps_the_next_needed_blocks,
     .fini = teardown, .timeout = 120)
{
	struct planner_and_scanner t;
	planner_and_scanner_start(&t);
	cr_assert_geq(t.n, 100);
	/* Objects 30..59 come in first (the oldest), then 0..29. */
	for (size_t k = 30; k < 60; k++)
		read_b(&t, k);
	for (size_t k = 0; k < 30; k++)
		read_b(&t, k);
	plan_objects(t.plan, t.ha, t.ia, 30, 30);
	cr_assert_eq(rc_prefetch_plan(&t.a, (uint32_t)t.plan_buf, 0, 30), 30);
	/* A scan of 40 unplanned objects overflows the 48 MiB. */
	for (size_t k = 100; k < 140; k++)
		read_b(&t, k);
	cr_assert_gt(fx_stat_value(D.socket_path,
				   "ringcache_cache_evictions_total"), 10);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	size_t hits = 0;
	for (size_t k = 0; k < 30; k++)
		hits += (read_a(&t, 30 + k) & RC_CQE_F_HIT) != 0;
	int64_t extra = fx_stat_value(D.socket_path, "ringcache_s3_get_total") -
			gets;
	cr_log_info("planned reads: %zu of 30 hits, %lld GETs", hits,
		    (long long)extra);
	cr_assert_geq(hits, 28, "plan-aware eviction dropped planned blocks: "
		      "%zu of 30 hits", hits);
	planner_and_scanner_stop(&t);
}

/* The next epoch's order appended while this one runs: the current
 * plan's GETs go on, and the window slides on into the appended entries
 * (only as far as the window reaches past the reads). */
Test(prefetch, appended_plan_keeps_the_current_plans_gets, .fini = teardown,
     .timeout = 60)
{
	const char *proxy[] = {"--latency-ms", "0", NULL};
	start(NULL, "prefetch_inflight = 16\nprefetch_window_entries = 4",
	      proxy);
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "ds");
	uint32_t h[16];
	size_t idx[16];
	cr_assert_eq(open_small(&c, ds, h, idx, 16), 16);
	set_latency(HELD_MS); /* the opens' HEADs went before it */
	void *mem, *data;
	int pb = rc_alloc_buffer(&c, 8 * sizeof(struct rc_plan_entry), &mem);
	int db = rc_alloc_buffer(&c, MiB, &data);
	struct rc_plan_entry *plan = mem;
	plan_objects(plan, h, idx, 0, 4);
	cr_assert_eq(rc_prefetch_plan(&c, (uint32_t)pb, 0, 4), 4);
	wait_for_inflight();
	plan_objects(plan, h, idx, 8, 4);
	int r = rc_prefetch_plan_append(&c, (uint32_t)pb, 0, 4);
	cr_assert_eq(r, 4, "append: %s", rc_strerror(r));
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_prefetch_cancelled_total"), 0);
	cr_assert_gt(fx_stat_value(D.socket_path, "ringcache_s3_inflight"), 0);
	set_latency("0"); /* the held GETs were seen; the rest need no hold */
	/* The window (4 entries) holds the current plan: nothing appended is
	 * fetched before the reads move it. */
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_s3_inflight", 0,
				  30000), 0);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	cr_assert_eq(gets, 4, "GETs before any read: %lld", (long long)gets);
	for (size_t k = 0; k < 4; k++) {
		uint32_t f = read_whole(&c, h[k], ds_size(&S, idx[k]),
					(uint32_t)db, data, idx[k]);
		cr_assert(f & RC_CQE_F_HIT, "current plan's object %zu missed", k);
	}
	/* Reading the last current entry slid the window into the appended
	 * ones: they arrive without being asked for. */
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_s3_get_total", 7,
				  30000), 7);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_s3_inflight", 0,
				  30000), 0);
	for (size_t k = 8; k < 12; k++)
		read_whole(&c, h[k], ds_size(&S, idx[k]), (uint32_t)db, data,
			   idx[k]);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"), 8,
		     "the appended entries were not all prefetched once");
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* Malformed flags fail their own SQE only: an unknown flag on
 * PREFETCH_PLAN, RC_PLAN_APPEND on another opcode. An append with no plan
 * starts one; an empty append changes nothing. */
Test(prefetch, malformed_plan_flags_fail_that_entry_only, .fini = teardown,
     .timeout = 60)
{
	start(NULL, NULL, NULL);
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "ds");
	uint32_t h[4];
	size_t idx[4];
	cr_assert_eq(open_small(&c, ds, h, idx, 4), 4);
	void *mem;
	int pb = rc_alloc_buffer(&c, 4 * sizeof(struct rc_plan_entry), &mem);
	plan_objects(mem, h, idx, 0, 4);
	uint8_t bad_flags[] = {0x2, 0x80, RC_PLAN_APPEND | 0x4};
	for (size_t k = 0; k < 3; k++) {
		struct rc_sqe *sqe = rc_get_sqe(&c);
		rc_prep_prefetch_plan(sqe, (uint32_t)pb, 0, 4, 10 + k);
		sqe->flags = bad_flags[k];
	}
	struct rc_sqe *sqe = rc_get_sqe(&c);
	rc_prep_read(sqe, h[0], 0, 1, 20);
	sqe->flags = RC_PLAN_APPEND;
	rc_prep_prefetch_plan_append(rc_get_sqe(&c), (uint32_t)pb, 0, 4, 30);
	rc_prep_prefetch_plan_append(rc_get_sqe(&c), (uint32_t)pb, 0, 0, 31);
	cr_assert_eq(rc_submit(&c), 6);
	for (int k = 0; k < 6; k++) {
		struct rc_cqe *cqe;
		cr_assert_eq(rc_wait_cqe(&c, &cqe), 0);
		int want = cqe->user_data == 30 ? 4 : cqe->user_data == 31 ? 0
						       : -EINVAL;
		cr_assert_eq(cqe->res, want, "sqe %llu: %d",
			     (unsigned long long)cqe->user_data, cqe->res);
		rc_cqe_seen(&c);
	}
	/* The appended plan is this session's plan: its GETs happened. */
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_s3_get_total", 4,
				  30000), 4);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_prefetch_cancelled_total"), 0);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* At an epoch boundary, the blocks read this epoch that the appended next
 * epoch reads early stay under eviction pressure; those it does not read
 * again go first, before the newer blocks of an unplanned scan. With only
 * the current epoch known, both kinds would look alike (read, no planned
 * use) and go in age order, the early ones first. */
Test(prefetch, appended_plan_keeps_next_epochs_blocks_at_the_boundary,
     .fini = teardown, .timeout = 120)
{
	struct planner_and_scanner t;
	planner_and_scanner_start(&t);
	cr_assert_geq(t.n, 200);
	/* This epoch reads 0..29; the next one, appended as this one starts,
	 * 0..14 first (then, in a real run, what was evicted); 15..29 are not
	 * read again. */
	plan_objects(t.plan, t.ha, t.ia, 0, 30);
	cr_assert_eq(rc_prefetch_plan(&t.a, (uint32_t)t.plan_buf, 0, 30), 30);
	plan_objects(t.plan, t.ha, t.ia, 0, 15);
	cr_assert_eq(rc_prefetch_plan_append(&t.a, (uint32_t)t.plan_buf, 0, 15),
		     15);
	for (size_t k = 0; k < 30; k++)
		read_a(&t, k);
	/* An unplanned scan until 25 blocks were evicted: more than the 15
	 * with no further use, fewer than those and the scan's own. */
	int64_t ev0 = fx_stat_value(D.socket_path,
				    "ringcache_cache_evictions_total");
	size_t k = 100;
	while (fx_stat_value(D.socket_path, "ringcache_cache_evictions_total") <
	       ev0 + 25) {
		cr_assert_lt(k, t.n, "the scan evicted nothing");
		read_b(&t, k++);
	}
	cr_log_info("scan of %zu objects", k - 100);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	size_t hits = 0;
	for (size_t j = 0; j < 15; j++)
		hits += (read_a(&t, j) & RC_CQE_F_HIT) != 0;
	int64_t extra = fx_stat_value(D.socket_path, "ringcache_s3_get_total") -
			gets;
	cr_log_info("next epoch's early reads: %zu of 15 hits, %lld GETs", hits,
		    (long long)extra);
	cr_assert_eq(hits, 15, "next epoch's blocks were evicted: %zu of 15 hits",
		     hits);
	/* Those with no further use went first. Block 29 is not one of
	 * them: the plan's cursor stays on the entry being read (its later
	 * blocks may come), so 29 is "next use now" until the next epoch's
	 * first read moves the cursor. Whole-superblock reclaim used to
	 * evict it as a side effect; reclaim by the page takes only what it
	 * needs. */
	size_t gone = 0;
	for (size_t j = 15; j < 29; j++)
		gone += (read_b(&t, j) & RC_CQE_F_HIT) == 0;
	cr_assert_eq(gone, 14, "only %zu of 14 unplanned blocks were evicted",
		     gone);
	planner_and_scanner_stop(&t);
}
