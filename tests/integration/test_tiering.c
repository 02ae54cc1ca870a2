/* test_tiering.c - the NVMe tier inside a real ringcached: a dataset
 * larger than memory is served from memory and the tier on its second
 * pass without S3, a restarted daemon starts warm from the tier, and
 * corrupted tier blocks are detected and refetched, never served. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"
#include "tier.h"

#define MiB (1024u * 1024u)

static struct fx_daemon D;
static struct ds_spec S;
static char tier_path[300], daemon_extra[1024];

static void teardown(void)
{
	fx_daemon_kill(&D);
}

static void start(void)
{
	fx_daemon_init(&D);
	D.memory = "48M";
	D.daemon_extra = daemon_extra;
	fx_daemon_start(&D, NULL);
}

/* The sample dataset and a daemon with a 512 MiB tier file in a fresh
 * folder (tier_path). */
static void start_with_tier(void)
{
	ds_spec_default(&S);
	snprintf(tier_path, sizeof(tier_path), "%s/ringcache.tier",
		 fx_tmpdir());
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "tier_path = %s\ntier_size = 512M", tier_path);
	start();
}

/* Reads the first max small/ objects whole through READ_INTO and checks
 * them, as a client of gpu (-1: none named). */
static void read_pass_gpu(int gpu, size_t max)
{
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = gpu, .numa_node = -1};
	cr_assert_eq(rc_attach(&c, D.socket_path, gpu < 0 ? NULL : &o), 0);
	int ds = rc_dataset(&c, "ds");
	void *mem;
	int buf = rc_alloc_buffer(&c, MiB, &mem);
	cr_assert(ds >= 0 && buf >= 0);
	char key[256];
	for (size_t i = 0, n = 0; i < ds_count(&S) && n < max; i++) {
		ds_key(&S, i, key);
		if (strncmp(key, "small/", 6) != 0)
			continue;
		n++;
		int h = rc_open(&c, ds, key, NULL);
		cr_assert_geq(h, 0, "open %s: %s", key, rc_strerror(h));
		uint64_t size = ds_size(&S, i);
		ssize_t got = rc_read_into(&c, (uint32_t)h, 0, size,
					   (uint32_t)buf, 0);
		cr_assert_eq(got, (ssize_t)size, "%s: %s", key,
			     rc_strerror((int)got));
		fx_assert_ds_bytes(&S, i, 0, mem, size, key);
		rc_close(&c, (uint32_t)h);
	}
	rc_detach(&c);
}

static void read_pass(void)
{
	read_pass_gpu(-1, SIZE_MAX);
}

static int64_t stat_of(const char *name)
{
	return fx_stat_value(D.socket_path, name);
}

/* Waits until the tier has written what memory evicted: the count of
 * written blocks unchanged for 500 ms (one 50 ms look was within a
 * stall of a busy machine's disk and CPUs), for up to 60 s. */
static void settle(void)
{
	int64_t last = -1;
	int same = 0;
	for (int i = 0; i < 1200 && same < 10; i++) {
		int64_t now = stat_of("ringcache_tier_admitted_total");
		same = now == last ? same + 1 : 0;
		last = now;
		usleep(50000);
	}
}

Test(tiering, larger_than_memory_second_pass_and_restart_need_no_s3,
     .fini = teardown, .timeout = 240)
{
	start_with_tier();
	read_pass(); /* 300 x 570 KB = 3.5 x the 48 MiB of memory */
	int64_t gets = stat_of("ringcache_s3_get_total");
	cr_assert_geq(gets, 300);
	cr_assert_gt(stat_of("ringcache_cache_evictions_total"), 0);
	settle();
	/* A tier behind the evictions drops blocks rather than stall the
	 * reactor (tier_skipped): only those may go to S3 again. On an idle
	 * disk none are dropped; a busy shared CI disk drops a few. */
	int64_t skipped = stat_of("ringcache_tier_skipped_total");
	cr_assert_lt(skipped, 30, "the tier dropped %lld of 300 blocks",
		     (long long)skipped);
	read_pass();
	cr_assert_leq(stat_of("ringcache_s3_get_total") - gets, skipped,
		      "the second pass went to S3 for blocks the tier holds");
	cr_assert_gt(stat_of("ringcache_tier_hits_total"), 200);
	settle();
	skipped = stat_of("ringcache_tier_skipped_total");
	fx_daemon_stop(&D);

	/* A new daemon on the same tier file starts warm. */
	start();
	read_pass();
	cr_assert_leq(stat_of("ringcache_s3_get_total"), skipped,
		      "the restarted daemon went to S3 for blocks the tier holds");
	cr_assert_gt(stat_of("ringcache_tier_hits_total"), 250);
	fx_daemon_stop(&D);
}

/* Two shards (a described 2-node machine): each has its own region of
 * the one tier file, so the clients of both nodes restart warm. */
/* Blocks that never left memory are written to the tier at SIGTERM: a
 * restart comes back warm with them too, not only with the evicted. */
Test(tiering, blocks_in_memory_at_sigterm_come_back_warm,
     .fini = teardown, .timeout = 240)
{
	start_with_tier();
	read_pass_gpu(-1, 40); /* 23 MB: all of it stays in the 48 MiB */
	cr_assert_geq(stat_of("ringcache_s3_get_total"), 40);
	cr_assert_eq(stat_of("ringcache_cache_evictions_total"), 0);
	cr_assert_eq(stat_of("ringcache_tier_admitted_total"), 0);
	fx_daemon_stop(&D);
	cr_assert(fx_daemon_log_contains(&D, "written at shutdown"),
		  "no shutdown save in the log");

	start();
	read_pass_gpu(-1, 40);
	cr_assert_eq(stat_of("ringcache_s3_get_total"), 0,
		     "the restarted daemon went to S3 for blocks that were in "
		     "memory at SIGTERM");
	cr_assert_geq(stat_of("ringcache_tier_hits_total"), 40);
	fx_daemon_stop(&D);
}

Test(tiering, every_shard_restarts_warm_from_its_region,
     .fini = teardown, .timeout = 240)
{
	ds_spec_default(&S);
	char topology[400];
	fx_two_node_topology(fx_tmpdir(), topology, sizeof(topology));
	snprintf(tier_path, sizeof(tier_path), "%s/ringcache.tier",
		 fx_tmpdir());
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "%s\ntier_path = %s\ntier_size = 384M", topology, tier_path);
	start();
	/* 150 objects (85 MB) a node: 3.5 times a shard's 24 MiB of memory
	 * (as in the test above), fewer than the 191 slots of its half of
	 * the tier. */
	for (int pass = 0; pass < 2; pass++) { /* the second evicts the rest */
		read_pass_gpu(0, 150);
		read_pass_gpu(7, 150);
		settle();
	}
	int64_t skipped = stat_of("ringcache_tier_skipped_total");
	fx_daemon_stop(&D);
	cr_assert(fx_daemon_log_contains(&D, "shard 1: "), "no tier region "
		  "for shard 1");

	start();
	read_pass_gpu(0, 150);
	read_pass_gpu(7, 150);
	cr_assert_leq(stat_of("ringcache_s3_get_total"), skipped,
		      "a restarted shard went to S3 for blocks its tier holds");
	cr_assert_geq(stat_of("ringcache_tier_hits_total"), 300 - skipped);
	fx_daemon_stop(&D);
}

/* Flips bytes at the start of every tier slot. */
static void corrupt_every_slot(void)
{
	struct io_uring ring;
	cr_assert_eq(io_uring_queue_init(8, &ring, 0), 0);
	struct tier_config tc = {.path = tier_path, .size_bytes = 512u * MiB,
				 .block_bytes = MiB};
	char err[256];
	struct tier *t = tier_open(&tc, &ring, NULL, 0, err, sizeof(err));
	cr_assert_not_null(t, "tier_open: %s", err);
	struct tier_stats st;
	tier_get_stats(t, &st);
	cr_assert_gt(st.n_used, 0);
	tier_close(t);
	io_uring_queue_exit(&ring);
	int fd = open(tier_path, O_WRONLY);
	cr_assert_geq(fd, 0);
	char junk[512];
	memset(junk, 0x5a, sizeof(junk));
	for (uint64_t i = 0; i < st.n_slots; i++)
		cr_assert_eq(pwrite(fd, junk, sizeof(junk),
				    (off_t)(st.data_off + i * st.block_bytes)),
			     (ssize_t)sizeof(junk));
	close(fd);
}

Test(tiering, corrupted_blocks_are_refetched_not_served, .fini = teardown,
     .timeout = 240)
{
	start_with_tier();
	read_pass();
	settle();
	fx_daemon_stop(&D);
	corrupt_every_slot();
	start();
	read_pass(); /* every byte checked: nothing corrupt reaches a client */
	cr_assert_gt(stat_of("ringcache_tier_read_errors_total"), 0);
	cr_assert_gt(stat_of("ringcache_s3_get_total"), 0);
	fx_daemon_stop(&D);
}

Test(tiering, an_unusable_tier_leaves_the_daemon_serving, .fini = teardown,
     .timeout = 120)
{
	ds_spec_default(&S);
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "tier_path = /nonexistent-dir/ringcache.tier\ntier_size = 64M");
	start();
	cr_assert(fx_daemon_log_contains(&D, "running from memory only"));
	read_pass();
	fx_daemon_stop(&D);
}
