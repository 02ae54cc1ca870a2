/* test_writepath.c - "nothing acknowledged is lost" on the write path,
 * against the real S3 server through rc-proxy: the checkpoint pattern of
 * issue 11 (each rank writes a shard to a temporary key, COMMITs, RENAMEs
 * it to its final key, durability local), then kill -9 of the daemon right
 * after every RENAME was acknowledged and a restart on the same journal:
 * renames before the upload started, during it, after it (server-side
 * copy), rename chains, SIGTERM with renames pending; the restarted daemon
 * is waited for with a prefix SYNC on the final keys. Each checked with
 * awscli: the final keys byte for byte, no temporary key, no multipart
 * upload left. And conditional commit (overwrite = false) on the real
 * server: an object already at the key is never replaced, SYNC says
 * -EEXIST, and the journal space of refused objects comes back. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "creds.h"
#include "fixture/fixture.h"
#include "ringcache.h"
#include "s3.h"

#define MiB (1024u * 1024u)
#define PART "5M"
#define PART_BYTES (5 * MiB)

static struct fx_daemon D;
static struct fx_proxy P;
static bool proxy_on;
static char scratch[200], sections[2048], daemon_extra[512];

static void teardown(void)
{
	fx_daemon_kill(&D);
	if (proxy_on)
		fx_proxy_kill(&P);
}

/* PREFIX/scratch/ */
static const char *scratch_prefix(void)
{
	static char p[300];
	snprintf(p, sizeof(p), "%s%s/", fx_env()->prefix, scratch);
	return p;
}

/* Dataset "ck" over PREFIX/sub/ (durability local, 5 MiB parts, then
 * ck_extra) with a fresh journal of journal_mib; S3 behind P when the
 * proxy runs. */
static void start(const char *sub, const char *ck_extra, unsigned journal_mib)
{
	char dsub[260], ck[700];
	snprintf(scratch, sizeof(scratch), "%s", sub);
	snprintf(dsub, sizeof(dsub), "%s/", sub);
	fx_dataset_section(ck, sizeof(ck), "ck", dsub, "allow_uids = *");
	snprintf(sections, sizeof(sections),
		 "%swritable = true\nwrite_uids = 0\ndurability = local\n"
		 "part_size = " PART "\nupload_concurrency = 2\n%s", ck,
		 ck_extra ? ck_extra : "");
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "journal = %s/journal\njournal_size = %uM", fx_tmpdir(),
		 journal_mib);
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	if (proxy_on) {
		D.s3_endpoint = P.endpoint;
		D.max_retries = 10; /* 503s hold uploads: they retry */
	}
	fx_daemon_start(&D, sections);
}

/* The same config and journal: what a restart after a crash finds. */
static void restart(void)
{
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	if (proxy_on) {
		D.s3_endpoint = P.endpoint;
		D.max_retries = 10;
	}
	fx_daemon_start(&D, sections);
}

static void attach(struct rc_client *c)
{
	int r = rc_attach(c, D.socket_path, NULL);
	cr_assert_eq(r, 0, "attach: %s", rc_strerror(r));
}

/* size bytes of fx_pattern(seed) as key; the write handle. */
static uint32_t write_object(struct rc_client *c, const char *key,
			     uint64_t size, unsigned seed, bool commit)
{
	int ds = rc_dataset(c, "ck");
	cr_assert_geq(ds, 0);
	void *mem;
	int buf = rc_alloc_buffer(c, size ? size : 1, &mem);
	cr_assert_geq(buf, 0);
	fx_fill_pattern(mem, size, seed);
	int h = rc_write_open(c, ds, key);
	cr_assert_geq(h, 0, "write_open %s: %s", key, rc_strerror(h));
	ssize_t w = rc_write(c, (uint32_t)h, 0, size, (uint32_t)buf, 0);
	cr_assert_eq(w, (ssize_t)size, "write %s: %s", key,
		     rc_strerror((int)w));
	if (commit) {
		int r = rc_commit(c, (uint32_t)h);
		cr_assert_eq(r, 0, "commit %s: %s", key, rc_strerror(r));
	}
	return (uint32_t)h;
}

/* SYNC with RC_SYNC_PREFIX through the ring (libringcache has no call for
 * it): every committed object of dataset ds under prefix. */
static int sync_prefix(struct rc_client *c, int ds, const char *prefix)
{
	int slot = rc_arg_get(c);
	cr_assert_geq(slot, 0);
	memcpy(rc_arg_ptr(c, slot), prefix, strlen(prefix));
	struct rc_sqe *sqe = rc_get_sqe(c);
	cr_assert_not_null(sqe);
	sqe->opcode = RC_OP_SYNC;
	sqe->handle = RC_SYNC_PREFIX;
	sqe->dataset = (uint32_t)ds;
	sqe->arg = (uint16_t)slot;
	sqe->arg_len = (uint32_t)strlen(prefix);
	sqe->user_data = 0x5717c;
	cr_assert_eq(rc_submit(c), 1);
	struct rc_cqe *cqe;
	cr_assert_eq(rc_wait_cqe(c, &cqe), 0);
	cr_assert_eq(cqe->user_data, 0x5717c);
	int res = cqe->res;
	rc_cqe_seen(c);
	rc_arg_put(c, slot);
	return res;
}

static void proxy_set(const char *cmds)
{
	const char *reply = fx_proxy_control(&P, cmds);
	cr_assert_null(strstr(reply, "error"), "proxy: %s", reply);
}

/* HEAD of PREFIX/scratch/key straight at S3: 0 or -ENOENT. */
static int head_in_s3(const char *key)
{
	char full[600];
	snprintf(full, sizeof(full), "%s%s", scratch_prefix(), key);
	return fx_head_object(full);
}

/* Multipart uploads in progress under PREFIX/scratch/. */
static size_t uploads_in_progress(void)
{
	return fx_uploads_in_progress(scratch_prefix());
}

/* ---- renames acknowledged, then kill -9 -------------------------------- */

/* Four ranks' shards: two single PUTs, two multipart (three parts). */
#define RANKS 4
static const uint64_t shard_size[RANKS] = {MiB + 3, 11 * MiB + 7, 200 * 1024,
					   6 * MiB};

enum scenario {
	BEFORE_UPLOAD,  /* uploads held by 503s: nothing in S3 yet */
	DURING_UPLOAD,  /* PUTs and parts in S3 under the temporary keys,
			   S3's answers held */
	AFTER_UPLOAD,   /* in S3 under the temporary key: server-side copy */
	CHAIN,          /* tmp -> mid -> final while held */
	CHAIN_DURING,   /* tmp -> mid -> final with the uploads in S3 */
	SIGTERM_PENDING,/* held, then SIGTERM instead of kill -9 */
	SCENARIOS
};

static const char *const scenario_names[SCENARIOS] = {
	"rename before the upload started", "rename during the upload",
	"rename after the upload (server-side copy)", "rename chain, held",
	"rename chain during the upload", "SIGTERM with renames pending",
};

static void tmp_key(char *buf, size_t len, int rank, const char *stage)
{
	snprintf(buf, len, "tmp/shard-%d.%s-%d", rank, stage, (int)getpid());
}

static void final_key(char *buf, size_t len, int rank)
{
	snprintf(buf, len, "ckpt/shard-%d", rank);
}

static unsigned shard_seed(int sc, int rank)
{
	return (unsigned)(100 * sc + rank + 1);
}

static bool single_puts_landed(void)
{
	char k[64];
	for (int r = 0; r < RANKS; r++) {
		if (shard_size[r] > PART_BYTES)
			continue;
		tmp_key(k, sizeof(k), r, "tmp");
		if (head_in_s3(k) != 0)
			return false;
	}
	return true;
}

static void wait_for(bool (*cond)(void), const char *what)
{
	for (int i = 0; i < 1500 && !cond(); i++)
		usleep(20000);
	cr_assert(cond(), "%s: not within 30 s", what);
}

static bool multiparts_begun(void)
{
	return uploads_in_progress() >= 2;
}

/* Writes, commits, renames every shard as the scenario says; returns with
 * every RENAME acknowledged. */
static void ranks_checkpoint(struct rc_client *c, enum scenario sc)
{
	uint32_t h[RANKS];
	char k[64];
	for (int r = 0; r < RANKS; r++) {
		tmp_key(k, sizeof(k), r, "tmp");
		h[r] = write_object(c, k, shard_size[r], shard_seed(sc, r),
				    true);
	}
	if (sc == DURING_UPLOAD || sc == CHAIN_DURING) {
		wait_for(single_puts_landed, scenario_names[sc]);
		wait_for(multiparts_begun, scenario_names[sc]);
	} else if (sc == AFTER_UPLOAD) {
		cr_assert_eq(rc_sync(c, RC_SYNC_ALL), 0);
	}
	for (int r = 0; r < RANKS; r++) {
		if (sc == CHAIN || sc == CHAIN_DURING) {
			tmp_key(k, sizeof(k), r, "mid");
			cr_assert_eq(rc_rename(c, h[r], k), 0, "rename to %s", k);
		}
		final_key(k, sizeof(k), r);
		int e = rc_rename(c, h[r], k);
		cr_assert_eq(e, 0, "rename to %s: %s", k, rc_strerror(e));
	}
}

/* What S3 must show at the kill for the scenario to be the one named. */
static void assert_point_reached(enum scenario sc)
{
	char k[64];
	const char *name = scenario_names[sc];
	switch (sc) {
	case BEFORE_UPLOAD:
	case CHAIN:
	case SIGTERM_PENDING:
		cr_assert_eq(uploads_in_progress(), 0, "%s", name);
		for (int r = 0; r < RANKS; r++) {
			tmp_key(k, sizeof(k), r, "tmp");
			cr_assert_eq(head_in_s3(k), -ENOENT, "%s: %s", name, k);
		}
		break;
	case DURING_UPLOAD:
	case CHAIN_DURING:
		/* Under the temporary names: what the replay cleans up. */
		cr_assert(single_puts_landed(), "%s", name);
		break;
	case AFTER_UPLOAD:
		for (int r = 0; r < RANKS; r++) {
			final_key(k, sizeof(k), r);
			cr_assert_eq(head_in_s3(k), 0, "%s: %s", name, k);
		}
		break;
	default:
		break;
	}
}

static void arm(enum scenario sc)
{
	switch (sc) {
	case BEFORE_UPLOAD:
	case CHAIN:
	case SIGTERM_PENDING:
		proxy_set("set faults 503\nset fault-rate 1\n");
		break;
	case DURING_UPLOAD:
	case CHAIN_DURING:
		proxy_set("set latency-ms 1500\n");
		break;
	default:
		break;
	}
}

/* Restart on the same journal, wait with a prefix SYNC on the final keys
 * (it must cover objects the replay uploads), add them to objs. */
static void recover(enum scenario sc, struct fx_s3_object *objs,
		    char (*keys)[400])
{
	const char *name = scenario_names[sc];
	proxy_set("set fault-rate 0\nset latency-ms 0\n");
	restart();
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "ck");
	int r = sync_prefix(&c, ds, "ckpt/");
	cr_assert_eq(r, 0, "%s: prefix sync: %s", name, rc_strerror(r));
	int64_t replayed = fx_stat_value(D.socket_path,
					 "ringcache_writeback_replayed_total");
	cr_assert_eq(replayed, sc == AFTER_UPLOAD ? 0 : RANKS, "%s", name);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_uploaded_total"),
		     replayed, "%s", name);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_failed_total"), 0,
		     "%s", name);
	/* The prefix SYNC returned: the final keys are there now. */
	for (int i = 0; i < RANKS; i++) {
		char k[64];
		final_key(k, sizeof(k), i);
		cr_assert_eq(head_in_s3(k), 0, "%s: %s missing after SYNC",
			     name, k);
		snprintf(keys[i], sizeof(keys[i]), "%s%s", scratch_prefix(), k);
		objs[i] = (struct fx_s3_object){
			keys[i], fx_pattern(shard_size[i], shard_seed(sc, i)),
			shard_size[i]};
	}
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(writepath, renames_acknowledged_then_kill_9_then_restart,
     .fini = teardown, .timeout = 400)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	char parent[128], sub[200], keys[SCENARIOS * RANKS][400];
	struct fx_s3_object objs[SCENARIOS * RANKS];
	fx_unique(parent, sizeof(parent), "wp-rename");
	fx_proxy_start(&P, pass);
	proxy_on = true;
	for (int sc = 0; sc < SCENARIOS; sc++) {
		snprintf(sub, sizeof(sub), "%s/%d", parent, sc);
		proxy_set("set fault-rate 0\nset latency-ms 0\nreset-stats\n");
		start(sub, NULL, 64);
		arm(sc);
		struct rc_client c;
		attach(&c);
		ranks_checkpoint(&c, sc);
		if (sc == SIGTERM_PENDING)
			fx_daemon_stop(&D); /* exits 0, uploads left journaled */
		else
			fx_daemon_kill(&D);
		rc_detach(&c);
		assert_point_reached(sc);
		recover(sc, objs + sc * RANKS, keys + sc * RANKS);
		cr_log_info("%s: recovered", scenario_names[sc]);
	}
	/* Exactly the final keys of every scenario: no temporary or middle
	 * name, no multipart upload under any. */
	char prefix[300];
	snprintf(prefix, sizeof(prefix), "%s%s/", fx_env()->prefix, parent);
	fx_aws_assert_objects(prefix, objs, SCENARIOS * RANKS, PART_BYTES);
	for (size_t i = 0; i < SCENARIOS * RANKS; i++)
		free((void *)objs[i].data);
	fx_proxy_stop(&P);
	proxy_on = false;
}

/* ---- overwrite = false --------------------------------------------------- */

/* Commits key (acknowledged at once: durability local) and returns what
 * SYNC says of it. */
static int commit_and_sync(struct rc_client *c, const char *key,
			   uint64_t size, unsigned seed)
{
	uint32_t h = write_object(c, key, size, seed, true);
	int r = rc_sync(c, h);
	cr_assert_eq(rc_close(c, h), 0);
	return r;
}

Test(writepath, overwrite_false_never_replaces_an_object, .fini = teardown,
     .timeout = 300)
{
	char sub[128], full[4][400];
	fx_unique(sub, sizeof(sub), "wp-cond");
	start(sub, "overwrite = false\n", 16);
	/* Already in S3: one small, one where the upload is multipart (Ceph
	 * RGW 16 ignores If-None-Match on Complete: the HEAD before it
	 * refuses). */
	unsigned char *taken = fx_pattern(1000, 1);
	unsigned char *taken_multi = fx_pattern(2000, 2);
	snprintf(full[0], sizeof(full[0]), "%staken", scratch_prefix());
	snprintf(full[1], sizeof(full[1]), "%staken-multi", scratch_prefix());
	cr_assert_eq(fx_put_object(full[0], taken, 1000), 0);
	cr_assert_eq(fx_put_object(full[1], taken_multi, 2000), 0);

	struct rc_client c;
	attach(&c);
	cr_assert_eq(commit_and_sync(&c, "taken", MiB, 11), -EEXIST);
	cr_assert_eq(commit_and_sync(&c, "taken-multi", 11 * MiB, 12), -EEXIST);
	cr_assert_eq(commit_and_sync(&c, "fresh", MiB + 1, 13), 0);
	cr_assert_eq(commit_and_sync(&c, "fresh", MiB + 1, 14), -EEXIST,
		     "the second upload of a key replaced the first");
	cr_assert_eq(commit_and_sync(&c, "fresh-multi", 11 * MiB, 15), 0);
	cr_assert(fx_daemon_log_contains(&D, "dataset ck: upload of s3://"),
		  "no log line names the refused object");
	cr_assert(fx_daemon_log_contains(&D, "/taken failed for good"));
	cr_assert(fx_daemon_log_contains(&D, "overwrite = false"));

	/* Refused objects give their journal space back: twice the 16 MiB
	 * journal of them, and a new key still goes through. */
	for (int i = 0; i < 32; i++)
		cr_assert_eq(commit_and_sync(&c, "taken", MiB, 20 + i),
			     -EEXIST, "attempt %d", i);
	cr_assert_eq(commit_and_sync(&c, "after", 2 * MiB, 16), 0);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_rejected_total"), 35);
	rc_detach(&c);
	fx_daemon_stop(&D);

	/* Nothing refused is left live in the journal. */
	restart();
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"), 0);
	fx_daemon_stop(&D);

	char fresh[400], fresh_multi[400], after[400];
	snprintf(fresh, sizeof(fresh), "%sfresh", scratch_prefix());
	snprintf(fresh_multi, sizeof(fresh_multi), "%sfresh-multi",
		 scratch_prefix());
	snprintf(after, sizeof(after), "%safter", scratch_prefix());
	struct fx_s3_object objs[] = {
		{full[0], taken, 1000},
		{full[1], taken_multi, 2000},
		{fresh, fx_pattern(MiB + 1, 13), MiB + 1},
		{fresh_multi, fx_pattern(11 * MiB, 15), 11 * MiB},
		{after, fx_pattern(2 * MiB, 16), 2 * MiB},
	};
	fx_aws_assert_objects(scratch_prefix(), objs, 5, PART_BYTES);
	for (size_t i = 0; i < 5; i++)
		free((void *)objs[i].data);
}

/* ---- an upload S3 refuses for good --------------------------------------- */

/* "gone" writes to a bucket that does not exist: every upload is a 404
 * (NoSuchBucket) from the real server. Twice the 16 MiB journal of such
 * objects, then "ck" still takes and uploads a checkpoint. */
Test(writepath, a_4xx_upload_is_dropped_from_the_journal_and_reported,
     .fini = teardown, .timeout = 300)
{
	char sub[128], gone[600], bucket[96];
	fx_unique(sub, sizeof(sub), "wp-4xx");
	fx_unique(bucket, sizeof(bucket), "no-such-bucket");
	for (char *p = bucket; *p; p++)
		*p = *p == '_' ? '-' : *p;
	snprintf(gone, sizeof(gone),
		 "\n[dataset gone]\nuri = s3://%s/x/\nallow_uids = *\n"
		 "writable = true\nwrite_uids = 0\ndurability = local\n"
		 "part_size = " PART "\n", bucket);
	start(sub, gone, 16);
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "gone");
	cr_assert_geq(ds, 0);
	void *mem;
	int buf = rc_alloc_buffer(&c, MiB, &mem);
	cr_assert_geq(buf, 0);
	for (int i = 0; i < 32; i++) {
		int h = rc_write_open(&c, ds, "lost");
		cr_assert_geq(h, 0, "attempt %d: %s", i, rc_strerror(h));
		cr_assert_eq(rc_write(&c, (uint32_t)h, 0, MiB, (uint32_t)buf, 0),
			     MiB, "attempt %d", i);
		cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
		int r = rc_sync(&c, (uint32_t)h);
		cr_assert_eq(r, -ENODEV, "attempt %d: sync: %s", i,
			     rc_strerror(r));
		cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
	}
	/* S3 does not have "lost": a SYNC of all objects, or of a prefix
	 * that holds it, says so after its handle is gone; one of another
	 * prefix or dataset does not. */
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), -ENODEV);
	cr_assert_eq(sync_prefix(&c, ds, "lo"), -ENODEV);
	cr_assert_eq(sync_prefix(&c, ds, "kept"), 0);
	int ck = rc_dataset(&c, "ck");
	cr_assert_geq(ck, 0);
	cr_assert_eq(sync_prefix(&c, ck, "lo"), 0);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_failed_objects"), 1,
		     "32 failures of one key are one object S3 lacks");
	cr_assert_eq(commit_and_sync(&c, "kept", 3 * MiB, 7), 0);
	rc_detach(&c);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_rejected_total"), 32);
	char line[300];
	snprintf(line, sizeof(line), "dataset gone: upload of s3://%s/x/lost "
		 "failed for good, dropped from the journal: NoSuchBucket "
		 "(HTTP 404)", bucket);
	cr_assert(fx_daemon_log_contains(&D, line), "no log line '%s'", line);
	char out[4096];
	char *argv[] = {RC_BUILD_DIR "/ringcache", "-s", D.socket_path,
			"status", NULL};
	cr_assert_eq(fx_run(argv, out, sizeof(out), 10000), 0, "%s", out);
	cr_assert(strstr(out, "1 uploaded, 32 failed (32 refused by S3 for "
			      "good)"), "ringcache status: %s", out);
	cr_assert(strstr(out, "not in S3   1 committed object whose upload "
			      "failed"), "ringcache status: %s", out);
	fx_daemon_stop(&D);
	restart(); /* nothing of them left to replay */
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"), 0);
	fx_daemon_stop(&D);
	char kept[400];
	snprintf(kept, sizeof(kept), "%skept", scratch_prefix());
	struct fx_s3_object objs[] = {{kept, fx_pattern(3 * MiB, 7), 3 * MiB}};
	fx_aws_assert_objects(scratch_prefix(), objs, 1, PART_BYTES);
	free((void *)objs[0].data);
}
