/* test_shards.c - one shard per NUMA node on a described 2-node, 8-GPU
 * machine (topology_file): a client is served by its GPU's node's shard,
 * every shard serves correct bytes from its own arena, clients of both
 * shards work at once, a dataset added by a reload reaches all shards, and
 * reloads race with neither shard's reads nor with STATS. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)

static struct fx_daemon D;
static struct ds_spec S;
static char extra[512];

static void teardown(void)
{
	fx_daemon_kill(&D);
}

static void start_two_nodes(void)
{
	ds_spec_default(&S);
	fx_two_node_topology(fx_tmpdir(), extra, sizeof(extra));
	fx_daemon_init(&D);
	D.daemon_extra = extra;
	fx_daemon_start(&D, NULL);
}

static void attach_gpu(struct rc_client *c, int gpu)
{
	struct rc_attach_opts o = {.gpu = gpu, .numa_node = -1};
	int r = rc_attach(c, D.socket_path, &o);
	cr_assert_eq(r, 0, "attach gpu %d: %s", gpu, rc_strerror(r));
}

/* Reads objects first..last whole (zero-copy READ) and checks them;
 * returns 0 or 1, usable in a forked child. */
static int read_and_check(struct rc_client *c, size_t first, size_t last)
{
	int ds = rc_dataset(c, "ds");
	char key[256];
	for (size_t i = first; i <= last && i < ds_count(&S); i++) {
		ds_key(&S, i, key);
		struct rc_stat st;
		int h = rc_open(c, ds, key, &st);
		if (h < 0)
			return 1;
		for (uint64_t off = 0; off < st.size;) {
			struct rc_extent ext[8];
			int n = rc_read(c, (uint32_t)h, off, st.size - off, ext, 8);
			if (n <= 0)
				return 1;
			for (int k = 0; k < n; k++) {
				if (fx_ds_mismatch(&S, i, off, ext[k].data,
						   ext[k].len) >= 0)
					return 1;
				off += ext[k].len;
				rc_release(c, ext[k].lease);
			}
		}
		rc_close(c, (uint32_t)h);
	}
	return 0;
}

Test(shards, a_client_is_served_by_its_gpus_node, .fini = teardown,
     .timeout = 120)
{
	start_two_nodes();
	cr_assert(fx_daemon_log_contains(&D, "2 shard(s)"));
	struct rc_client a, b, c, e;
	attach_gpu(&a, 1);
	attach_gpu(&b, 6);
	attach_gpu(&c, -1);
	attach_gpu(&e, 42); /* not in the topology: shard 0, said in the log */
	cr_assert_eq(a.shard, 0);
	cr_assert_eq(b.shard, 1);
	cr_assert_eq(c.shard, 0);
	cr_assert_eq(e.shard, 0);
	cr_assert(fx_daemon_log_contains(&D, "not in the topology"));
	cr_assert_eq(read_and_check(&a, 0, 20), 0, "shard 0 served wrong bytes");
	cr_assert_eq(read_and_check(&b, 0, 20), 0, "shard 1 served wrong bytes");
	/* Each shard fetched the objects into its own arena. */
	cr_assert_geq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"), 42);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_sessions_active"), 4);
	rc_detach(&a);
	rc_detach(&b);
	rc_detach(&c);
	rc_detach(&e);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_sessions_active", 0,
				  30000), 0);
	fx_daemon_stop(&D);
}

Test(shards, clients_of_both_shards_at_once, .fini = teardown,
     .timeout = 180)
{
	start_two_nodes();
	pid_t kids[8];
	for (int g = 0; g < 8; g++) {
		kids[g] = fork();
		cr_assert_geq(kids[g], 0);
		if (kids[g] == 0) {
			struct rc_client c;
			struct rc_attach_opts o = {.gpu = g, .numa_node = -1};
			if (rc_attach(&c, D.socket_path, &o) < 0 ||
			    c.shard != (uint32_t)(g < 4 ? 0 : 1))
				_exit(2);
			int bad = read_and_check(&c, (size_t)g * 30,
						 (size_t)g * 30 + 29);
			rc_detach(&c);
			_exit(bad);
		}
	}
	for (int g = 0; g < 8; g++) {
		int st;
		cr_assert_eq(waitpid(kids[g], &st, 0), kids[g]);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "client of gpu %d failed (status %d)", g, st);
	}
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	fx_daemon_stop(&D);
}

Test(shards, a_reloaded_dataset_reaches_every_shard, .fini = teardown,
     .timeout = 120)
{
	start_two_nodes();
	char section[512];
	fx_dataset_section(section, sizeof(section), "again", "ds/",
			   "allow_uids = *");
	/* Waits for the daemon's verdict, not a fixed 300 ms: a busy
	 * machine running the TSan build takes longer to reload. */
	cr_assert_eq(fx_daemon_reload(&D, section), 0, "the reload failed");
	for (int g = 0; g < 8; g += 7) {
		struct rc_client c;
		attach_gpu(&c, g);
		/* The other shards take the datasets when they next wake:
		 * asked until they have, for 30 s (a shard that never does
		 * still fails). */
		int ds = rc_dataset(&c, "again");
		for (int i = 0; i < 1500 && ds < 0; i++) {
			usleep(20000);
			ds = rc_dataset(&c, "again");
		}
		cr_assert_geq(ds, 0, "gpu %d: no dataset 'again' after reload", g);
		char key[256];
		ds_key(&S, 5, key);
		void *mem;
		int buf = rc_alloc_buffer(&c, MiB, &mem);
		int h = rc_open(&c, ds, key, NULL);
		cr_assert(buf >= 0 && h >= 0);
		ssize_t n = rc_read_into(&c, (uint32_t)h, 0, ds_size(&S, 5),
					 (uint32_t)buf, 0);
		cr_assert_eq(n, (ssize_t)ds_size(&S, 5));
		fx_assert_ds_bytes(&S, 5, 0, mem, (size_t)n, key);
		rc_detach(&c);
	}
	fx_daemon_stop(&D);
}

/* ---- reloads while both shards serve ------------------------------------ */

struct reader {
	pthread_t t;
	int gpu;
	atomic_bool *stop;
	int failures, rounds;
	char stats[1 << 16];
};

static void *read_during_reloads(void *arg)
{
	struct reader *r = arg;
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = r->gpu, .numa_node = -1};
	if (rc_attach(&c, D.socket_path, &o) < 0) {
		r->failures++;
		return NULL;
	}
	while (!atomic_load(r->stop)) {
		r->failures += read_and_check(&c, 0, 9);
		ssize_t n = rc_stats(NULL, D.socket_path, r->stats,
				     sizeof(r->stats));
		if (n <= 0 || !strstr(r->stats, "ringcache_config_reload_"))
			r->failures++;
		r->rounds++;
	}
	rc_detach(&c);
	return NULL;
}

/* Each reload swaps a dataset's config, its ACL, live limits and a key
 * that waits for a restart while a client of each shard reads (HEAD per
 * open: metadata_ttl 0 half the time) and asks STATS: the TSan build
 * fails the test on any race the daemon's log reports. */
Test(shards, reloads_race_with_no_reader, .fini = teardown, .timeout = 180)
{
	start_two_nodes();
	atomic_bool stop = false;
	struct reader r[2] = {{.gpu = 0, .stop = &stop},
			      {.gpu = 7, .stop = &stop}};
	for (int k = 0; k < 2; k++)
		cr_assert_eq(pthread_create(&r[k].t, NULL, read_during_reloads,
					    &r[k]), 0);
	char section[512], daemon_extra[768];
	for (int k = 0; k < 10; k++) {
		fx_dataset_section(section, sizeof(section), "r", "r/",
				   k % 2 ? "allow_uids = 0" : "allow_uids = *");
		snprintf(daemon_extra, sizeof(daemon_extra),
			 "%s\nmax_handles = %d\nmax_sessions_per_uid = %d\n"
			 "prefetch_inflight = %d", extra, 4096 + k, 60 + k,
			 8 + k);
		D.daemon_extra = daemon_extra;
		D.metadata_ttl = k % 2 ? 0 : 5;
		cr_assert_eq(fx_daemon_reload(&D, section), 0, "reload %d", k);
		usleep(50000);
	}
	atomic_store(&stop, true);
	for (int k = 0; k < 2; k++) {
		pthread_join(r[k].t, NULL);
		cr_expect_eq(r[k].failures, 0, "gpu %d: %d failures in %d "
			     "rounds", r[k].gpu, r[k].failures, r[k].rounds);
		cr_expect_gt(r[k].rounds, 0);
	}
	cr_assert(fx_daemon_log_contains(&D, "prefetch_inflight: (default) -> 17 "
					 "needs a restart"));
	D.daemon_extra = extra;
	fx_daemon_stop(&D);
}
