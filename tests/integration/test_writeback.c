/* test_writeback.c - checkpoint write-back through a real ringcached into
 * the real S3 server: objects of every shape arrive byte for byte, at each
 * durability level; renames; a daemon killed with SIGKILL after COMMIT was
 * acknowledged uploads the object when it comes back; writes are refused
 * where the config says so. Objects are read back with the S3 client
 * (s3_perform), not through the daemon. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "creds.h"
#include "fixture/fixture.h"
#include "ringcache.h"
#include "s3.h"

#define MiB (1024u * 1024u)

static struct fx_daemon D;
static struct fx_proxy P;
static bool proxy_on;
static char sections[2048], daemon_extra[512], scratch[128];

static void teardown(void)
{
	fx_daemon_kill(&D);
	if (proxy_on)
		fx_proxy_kill(&P);
}

static uint8_t pattern(uint64_t seed, uint64_t off)
{
	uint64_t x = (off + 1) * 0x9e3779b97f4a7c15ull ^ seed;
	x ^= x >> 29;
	return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

/* Datasets "ck" (durability from the caller) and "ro" (not writable),
 * both over the run's scratch prefix. */
static void start(const char *durability, const char *extra_daemon)
{
	fx_unique(scratch, sizeof(scratch), "wb");
	char sub[200], ck[600], ro[600];
	snprintf(sub, sizeof(sub), "%s/", scratch);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, "allow_uids = *");
	fx_dataset_section(ro, sizeof(ro), "ro", sub, "allow_uids = *");
	snprintf(sections, sizeof(sections),
		 "%swritable = true\nwrite_uids = 0\ndurability = %s\n"
		 "part_size = 5M\nupload_concurrency = 3\n%s",
		 ck, durability, ro);
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "journal = %s/journal\njournal_size = 256M\n%s", fx_tmpdir(),
		 extra_daemon ? extra_daemon : "");
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	/* A directory another uid can reach (the run's tmp is 0700). */
	static char sockdir[64];
	snprintf(sockdir, sizeof(sockdir), "/tmp/rc-wb-XXXXXX");
	cr_assert_not_null(mkdtemp(sockdir));
	chmod(sockdir, 0755);
	D.socket_dir = sockdir;
	fx_daemon_start(&D, sections);
}

/* Dataset "ck" (durability local, 5 MiB parts) with the daemon's S3
 * behind an rc-proxy started with proxy_args. */
static void start_proxied(const char *const *proxy_args, unsigned retries)
{
	fx_proxy_start(&P, proxy_args);
	proxy_on = true;
	fx_unique(scratch, sizeof(scratch), "wb");
	char sub[200], ck[600];
	snprintf(sub, sizeof(sub), "%s/", scratch);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, "allow_uids = *");
	snprintf(sections, sizeof(sections),
		 "%swritable = true\nwrite_uids = 0\ndurability = local\n"
		 "part_size = 5M\n", ck);
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "journal = %s/journal\njournal_size = 256M", fx_tmpdir());
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	D.s3_endpoint = P.endpoint;
	D.max_retries = retries;
	fx_daemon_start(&D, sections);
}

static void attach(struct rc_client *c)
{
	int r = rc_attach(c, D.socket_path, NULL);
	cr_assert_eq(r, 0, "attach: %s", rc_strerror(r));
}

/* Writes size bytes of pattern(seed) as key, in 1 MiB writes; returns
 * the write handle (committed if commit). */
static int write_object(struct rc_client *c, const char *key, uint64_t size,
			uint64_t seed, bool commit)
{
	int ds = rc_dataset(c, "ck");
	cr_assert_geq(ds, 0);
	void *mem;
	int buf = rc_alloc_buffer(c, MiB, &mem);
	cr_assert_geq(buf, 0);
	int h = rc_write_open(c, ds, key);
	cr_assert_geq(h, 0, "write_open %s: %s", key, rc_strerror(h));
	cr_assert((uint32_t)h & RC_WRITE_HANDLE);
	for (uint64_t off = 0; off < size; off += MiB) {
		uint64_t n = size - off < MiB ? size - off : MiB;
		for (uint64_t i = 0; i < n; i++)
			((uint8_t *)mem)[i] = pattern(seed, off + i);
		ssize_t w = rc_write(c, (uint32_t)h, off, n, (uint32_t)buf, 0);
		cr_assert_eq(w, (ssize_t)n, "write %s at %llu: %s", key,
			     (unsigned long long)off, rc_strerror((int)w));
	}
	if (commit) {
		int r = rc_commit(c, (uint32_t)h);
		cr_assert_eq(r, 0, "commit %s: %s", key, rc_strerror(r));
	}
	return h;
}

static struct s3_client *s3(struct creds_provider **cp)
{
	const struct fx_env *e = fx_env();
	struct creds_config cc = {.source = CREDS_CONFIG,
				  .access_key = e->access_key,
				  .secret_key = e->secret_key};
	char err[256];
	*cp = creds_provider_new(&cc, err, sizeof(err));
	cr_assert_not_null(*cp, "%s", err);
	struct s3_config sc = {.endpoint = e->endpoint, .region = e->region,
			       .addressing = S3_PATH_STYLE,
			       .connect_timeout_ms = 3000,
			       .request_timeout_ms = 30000, .max_retries = 3,
			       .backoff_base_ms = 20, .backoff_cap_ms = 200,
			       .creds = *cp};
	struct s3_client *c = s3_client_new(&sc, err, sizeof(err));
	cr_assert_not_null(c, "%s", err);
	return c;
}

/* GETs bucket key PREFIX/scratch/key; -ENOENT if absent, else checks it. */
static int check_in_s3(const char *key, uint64_t size, uint64_t seed)
{
	struct creds_provider *cp;
	struct s3_client *c = s3(&cp);
	char full[512];
	snprintf(full, sizeof(full), "%s%s/%s", fx_env()->prefix, scratch, key);
	struct s3_req_params p = {.op = S3_GET_OBJECT,
				  .bucket = fx_env()->bucket, .key = full};
	struct s3_result r;
	char *body = NULL;
	size_t len = 0;
	int err = s3_perform(c, &p, &r, &body, &len);
	if (!err) {
		cr_assert_eq(len, size, "%s: %zu bytes in S3, %llu written",
			     key, len, (unsigned long long)size);
		for (uint64_t i = 0; i < size; i++)
			if ((uint8_t)body[i] != pattern(seed, i))
				cr_assert_fail("%s: byte %llu differs", key,
					       (unsigned long long)i);
	}
	free(body);
	s3_client_free(c);
	creds_provider_free(cp);
	return err;
}

static void shapes(const char *durability)
{
	start(durability, NULL);
	struct rc_client c;
	attach(&c);
	const uint64_t sizes[] = {0, 1, 5 * MiB, 5 * MiB + 1, 12 * MiB + 123};
	char key[64];
	for (unsigned i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "shape-%u", i);
		write_object(&c, key, sizes[i], i + 7, true);
	}
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	for (unsigned i = 0; i < 5; i++) {
		snprintf(key, sizeof(key), "shape-%u", i);
		cr_assert_eq(check_in_s3(key, sizes[i], i + 7), 0, "%s missing", key);
	}
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(writeback, shapes_durability_local, .fini = teardown, .timeout = 120)
{
	shapes("local");
}

Test(writeback, shapes_durability_memory, .fini = teardown, .timeout = 120)
{
	shapes("memory");
}

Test(writeback, shapes_durability_s3, .fini = teardown, .timeout = 120)
{
	shapes("s3");
}

Test(writeback, rename_pending_and_completed, .fini = teardown,
     .timeout = 120)
{
	start("local", NULL);
	struct rc_client c;
	attach(&c);
	int h = write_object(&c, "ckpt.tmp", 3 * MiB + 5, 99, false);
	cr_assert_eq(rc_rename(&c, (uint32_t)h, "ckpt"), 0);
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	cr_assert_eq(check_in_s3("ckpt", 3 * MiB + 5, 99), 0);
	cr_assert_eq(check_in_s3("ckpt.tmp", 0, 0), -ENOENT,
		     "the temporary name reached S3");
	/* In S3 already: a server-side copy. */
	cr_assert_eq(rc_rename(&c, (uint32_t)h, "ckpt-final"), 0);
	cr_assert_eq(check_in_s3("ckpt-final", 3 * MiB + 5, 99), 0);
	cr_assert_eq(check_in_s3("ckpt", 0, 0), -ENOENT);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(writeback, refused_where_the_config_says, .fini = teardown,
     .timeout = 60)
{
	start("local", NULL);
	struct rc_client c;
	attach(&c);
	int ro = rc_dataset(&c, "ro");
	cr_assert_geq(ro, 0);
	cr_assert_eq(rc_write_open(&c, ro, "x"), -EROFS);
	int ds = rc_dataset(&c, "ck");
	cr_assert_eq(rc_write_open(&c, ds, "../escape"), -EINVAL);
	cr_assert_eq(rc_commit(&c, RC_WRITE_HANDLE | 77), -EBADF);
	int h = write_object(&c, "twice", 10, 1, true);
	cr_assert_eq(rc_commit(&c, (uint32_t)h), -EINVAL, "committed twice");
	cr_assert_eq(rc_abort(&c, (uint32_t)h), -EBUSY,
		     "an acknowledged object cannot be aborted");
	rc_detach(&c);
	if (geteuid() == 0) {
		pid_t pid = fork();
		if (pid == 0) {
			struct rc_client o;
			if (setgid(65534) || setuid(65534) ||
			    rc_attach(&o, D.socket_path, NULL))
				_exit(2);
			int r = rc_write_open(&o, rc_dataset(&o, "ck"), "nope");
			_exit(r == -EACCES ? 0 : 1);
		}
		int st;
		waitpid(pid, &st, 0);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "another uid could write (status %d)", st);
	}
	fx_daemon_stop(&D);
}

Test(writeback, acknowledged_objects_survive_kill_9, .fini = teardown,
     .timeout = 180)
{
	/* A slow S3: the upload is still running when the daemon dies. */
	const char *slow[] = {"--latency-ms", "3000", NULL};
	start_proxied(slow, 3);
	struct rc_client c;
	attach(&c);
	write_object(&c, "acked", 7 * MiB + 3, 5, true); /* acknowledged */
	write_object(&c, "never-committed", 2 * MiB, 6, false);
	kill(D.pid, SIGKILL);
	waitpid(D.pid, NULL, 0);
	D.pid = 0;
	rc_detach(&c);
	cr_assert_eq(check_in_s3("acked", 0, 0), -ENOENT,
		     "the upload finished before the kill: test too fast");
	/* The daemon comes back (straight to S3 now) and replays. */
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	fx_daemon_start(&D, sections);
	int err = -ENOENT;
	for (int i = 0; i < 150 && err == -ENOENT; i++) {
		usleep(100000);
		err = check_in_s3("acked", 7 * MiB + 3, 5);
	}
	cr_assert_eq(err, 0, "the acknowledged object never reached S3");
	cr_assert(fx_daemon_log_contains(&D, "never committed"));
	cr_assert_eq(check_in_s3("never-committed", 0, 0), -ENOENT);
	fx_daemon_stop(&D);
}

Test(writeback, eight_writers_at_once, .fini = teardown, .timeout = 180)
{
	start("local", NULL);
	pid_t kids[8];
	for (int k = 0; k < 8; k++) {
		if ((kids[k] = fork()) == 0) {
			struct rc_client c;
			if (rc_attach(&c, D.socket_path, NULL))
				_exit(2);
			int ds = rc_dataset(&c, "ck");
			void *mem;
			int buf = rc_alloc_buffer(&c, MiB, &mem);
			char key[32];
			snprintf(key, sizeof(key), "shard-%d", k);
			int h = rc_write_open(&c, ds, key);
			if (buf < 0 || h < 0)
				_exit(3);
			for (uint64_t off = 0; off < 6 * MiB; off += MiB) {
				for (uint64_t i = 0; i < MiB; i++)
					((uint8_t *)mem)[i] = pattern(100 + k, off + i);
				if (rc_write(&c, (uint32_t)h, off, MiB, (uint32_t)buf, 0) != MiB)
					_exit(4);
			}
			if (rc_commit(&c, (uint32_t)h) || rc_sync(&c, (uint32_t)h))
				_exit(5);
			_exit(0);
		}
	}
	for (int k = 0; k < 8; k++) {
		int st;
		waitpid(kids[k], &st, 0);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "writer %d failed (%d)", k, st);
	}
	char key[32];
	for (int k = 0; k < 8; k++) {
		snprintf(key, sizeof(key), "shard-%d", k);
		cr_assert_eq(check_in_s3(key, 6 * MiB, 100 + k), 0);
	}
	fx_daemon_stop(&D);
}

Test(writeback, committed_objects_read_back_before_s3_has_them,
     .fini = teardown, .timeout = 120)
{
	const char *slow[] = {"--latency-ms", "4000", NULL};
	start_proxied(slow, 3);
	struct rc_client c;
	attach(&c);
	const uint64_t size = 6 * MiB + 77; /* multipart: in S3 only at Complete */
	int h = write_object(&c, "fresh", size, 42, true);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	/* Through the read path while the upload waits on the slow link. */
	int ds = rc_dataset(&c, "ck");
	struct rc_stat st;
	int rh = rc_open(&c, ds, "fresh", &st);
	cr_assert_geq(rh, 0, "open: %s", rc_strerror(rh));
	cr_assert_eq(st.size, size);
	void *mem;
	int buf = rc_alloc_buffer(&c, 8 * MiB, &mem);
	ssize_t n = rc_read_into(&c, (uint32_t)rh, 0, size, (uint32_t)buf, 0);
	cr_assert_eq(n, (ssize_t)size, "read: %s", rc_strerror((int)n));
	for (uint64_t i = 0; i < size; i++)
		if (((uint8_t *)mem)[i] != pattern(42, i))
			cr_assert_fail("byte %llu differs", (unsigned long long)i);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
		     gets, "read your writes went to S3");
	cr_assert_eq(check_in_s3("fresh", 0, 0), -ENOENT,
		     "the upload finished first: the link is not slow enough");
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	cr_assert_eq(check_in_s3("fresh", size, 42), 0);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(writeback, a_full_journal_is_a_clear_error_not_a_lost_byte,
     .fini = teardown, .timeout = 120)
{
	start("local", "");
	/* start() gave 256M; a second daemon with a 16 MiB journal. */
	fx_daemon_stop(&D);
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "journal = %s/small-journal\njournal_size = 16M", fx_tmpdir());
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	fx_daemon_start(&D, sections);
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "ck");
	void *mem;
	int buf = rc_alloc_buffer(&c, MiB, &mem);
	int h = rc_write_open(&c, ds, "too-big");
	cr_assert(buf >= 0 && h >= 0);
	ssize_t w = 0;
	uint64_t off = 0;
	for (; off < 32 * MiB; off += MiB) {
		memset(mem, (int)(off / MiB), MiB);
		w = rc_write(&c, (uint32_t)h, off, MiB, (uint32_t)buf, 0);
		if (w != MiB)
			break;
	}
	cr_assert_eq(w, -ENOSPC, "a full journal answered %zd", w);
	cr_assert_eq(rc_abort(&c, (uint32_t)h), 0);
	/* The space comes back: a smaller object goes through whole. */
	write_object(&c, "fits", 2 * MiB + 9, 3, true);
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	cr_assert_eq(check_in_s3("fits", 2 * MiB + 9, 3), 0);
	cr_assert_eq(check_in_s3("too-big", 0, 0), -ENOENT);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(writeback, uploads_survive_503s_resets_and_short_bodies,
     .fini = teardown, .timeout = 180)
{
	const char *fault_args[] = {"--fault-rate", "0.3", "--faults",
				    "503,slowdown,reset,truncate", "--seed",
				    "7", NULL};
	start_proxied(fault_args, 10);
	struct rc_client c;
	attach(&c);
	const uint64_t sizes[] = {1 * MiB + 1, 11 * MiB + 5, 16 * MiB};
	char key[32];
	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "faulty-%d", i);
		write_object(&c, key, sizes[i], 50 + i, true);
	}
	int r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, 0, "sync: %s", rc_strerror(r));
	const char *stats = fx_proxy_control(&P, "stats\n");
	uint64_t faults = fx_proxy_stat(stats, "fault_503") +
			  fx_proxy_stat(stats, "fault_slowdown") +
			  fx_proxy_stat(stats, "fault_reset") +
			  fx_proxy_stat(stats, "fault_truncate");
	cr_assert_gt(faults, 0, "no fault injected");
	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "faulty-%d", i);
		cr_assert_eq(check_in_s3(key, sizes[i], 50 + i), 0);
	}
	rc_detach(&c);
	fx_daemon_stop(&D);
}
