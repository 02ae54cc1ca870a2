/* test_writeback.c - checkpoint write-back through a real ringcached into
 * the real S3 server: objects of every shape arrive byte for byte, at each
 * durability level, read back with Debian's awscli; renames; SIGKILL of
 * the daemon at five points of a write's life, then a restart on the same
 * journal: every acknowledged object in S3 byte for byte, nothing partial,
 * the uncommitted object discarded and reported, no multipart upload left;
 * writes are refused where the config says so; saves and renames of one
 * key land in the order asked for. Objects are read back with
 * an S3 client (awscli, or s3_perform), not through the daemon. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "creds.h"
#include "fixture/fixture.h"
#include "ringcache.h"
#include "s3.h"
#include "unit/sample.h"

#define MiB (1024u * 1024u)

static struct fx_daemon D;
static struct fx_proxy P;
static bool proxy_on;
static char sections[2048], daemon_extra[512], scratch[128];
static char journal_path[300]; /* start_behind_proxy's */
static const char *s3_extra; /* start_behind_proxy's [s3] lines, or NULL */
static const char *proxied_extra; /* start_behind_proxy's [daemon] lines */

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

/* Datasets "ck" (durability from the caller) over the run's scratch
 * prefix and "ro" (not writable) next to it: nested, their different
 * write lists would be refused. */
static void start(const char *durability, const char *extra_daemon)
{
	fx_unique(scratch, sizeof(scratch), "wb");
	char sub[200], ro_sub[210], ck[600], ro[600];
	snprintf(sub, sizeof(sub), "%s/", scratch);
	snprintf(ro_sub, sizeof(ro_sub), "%s-ro/", scratch);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, "allow_uids = *");
	fx_dataset_section(ro, sizeof(ro), "ro", ro_sub, "allow_uids = *");
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

/* Dataset "ck" (durability local, 5 MiB parts, then ck_extra) over the
 * scratch prefix sub (NULL: a fresh one) and a fresh journal, with the
 * daemon's S3 behind P. */
static void start_behind_proxy(const char *sub_prefix, unsigned retries,
			       const char *ck_extra)
{
	if (sub_prefix)
		snprintf(scratch, sizeof(scratch), "%s", sub_prefix);
	else
		fx_unique(scratch, sizeof(scratch), "wb");
	char sub[200], ck[600];
	snprintf(sub, sizeof(sub), "%s/", scratch);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, "allow_uids = *");
	snprintf(sections, sizeof(sections),
		 "%swritable = true\nwrite_uids = 0\ndurability = local\n"
		 "part_size = 5M\n%s", ck, ck_extra ? ck_extra : "");
	/* 64M: enough for any of these tests, and the file is allocated
	 * whole (a test that starts many daemons fills /tmp otherwise). */
	snprintf(journal_path, sizeof(journal_path), "%s/journal", fx_tmpdir());
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "journal = %s\njournal_size = 64M\n%s", journal_path,
		 proxied_extra ? proxied_extra : "");
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	D.s3_endpoint = P.endpoint;
	D.s3_extra = s3_extra;
	D.max_retries = retries;
	fx_daemon_start(&D, sections);
}

/* The same behind a new rc-proxy started with proxy_args. */
static void start_proxied(const char *const *proxy_args, unsigned retries,
			  const char *ck_extra)
{
	fx_proxy_start(&P, proxy_args);
	proxy_on = true;
	start_behind_proxy(NULL, retries, ck_extra);
}

static void attach(struct rc_client *c)
{
	int r = rc_attach(c, D.socket_path, NULL);
	cr_assert_eq(r, 0, "attach: %s", rc_strerror(r));
}

static void proxy_set(const char *cmds)
{
	const char *reply = fx_proxy_control(&P, cmds);
	cr_assert_null(strstr(reply, "error"), "proxy: %s", reply);
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

/* GETs bucket key PREFIX/scratch/key; -ENOENT if absent, else checks it. */
static int check_in_s3(const char *key, uint64_t size, uint64_t seed)
{
	char full[512];
	snprintf(full, sizeof(full), "%s%s/%s", fx_env()->prefix, scratch, key);
	char *body;
	size_t len;
	int err = fx_get_object(full, &body, &len);
	if (!err) {
		cr_assert_eq(len, size, "%s: %zu bytes in S3, %llu written",
			     key, len, (unsigned long long)size);
		for (uint64_t i = 0; i < size; i++)
			if ((uint8_t)body[i] != pattern(seed, i))
				cr_assert_fail("%s: byte %llu differs", key,
					       (unsigned long long)i);
	}
	free(body);
	return err;
}

/* size bytes of pattern(seed), as a test expects to find them. */
static uint8_t *pattern_buf(uint64_t size, uint64_t seed)
{
	uint8_t *b = malloc(size ? size : 1);
	cr_assert_not_null(b);
	for (uint64_t i = 0; i < size; i++)
		b[i] = pattern(seed, i);
	return b;
}

/* The bucket prefix of this test's objects: PREFIX/scratch/. */
static const char *scratch_prefix(void)
{
	static char prefix[300];
	snprintf(prefix, sizeof(prefix), "%s%s/", fx_env()->prefix, scratch);
	return prefix;
}

/* What the test wrote as key: its bucket key (in full, len bytes) and
 * bytes (the caller frees .data). */
static struct fx_s3_object written(char *full, size_t len, const char *key,
				   uint64_t size, uint64_t seed)
{
	int n = snprintf(full, len, "%s%s", scratch_prefix(), key);
	cr_assert(n > 0 && (size_t)n < len, "key too long");
	return (struct fx_s3_object){full, pattern_buf(size, seed), size};
}

/* 0 B, 1 B, exactly one part, one part and a byte, three whole parts,
 * many parts with an uneven last one (parts of 5 MiB). */
static const uint64_t shape_sizes[] = {0, 1, 5 * MiB, 5 * MiB + 1, 15 * MiB,
				       12 * MiB + 123};
#define N_SHAPES (sizeof(shape_sizes) / sizeof(*shape_sizes))

static void shapes(const char *durability)
{
	start(durability, NULL);
	struct rc_client c;
	attach(&c);
	char key[64], full[N_SHAPES][300];
	struct fx_s3_object objs[N_SHAPES];
	for (unsigned i = 0; i < N_SHAPES; i++) {
		snprintf(key, sizeof(key), "shape-%u", i);
		write_object(&c, key, shape_sizes[i], i + 7, true);
		objs[i] = written(full[i], sizeof(full[i]), key, shape_sizes[i],
				  i + 7);
	}
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	fx_aws_assert_objects(scratch_prefix(), objs, N_SHAPES, 5 * MiB);
	for (unsigned i = 0; i < N_SHAPES; i++)
		free((void *)objs[i].data);
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

/* staging_warm: a shard that may be written faults its staging in at
 * start, on a digest thread, so the first checkpoint of a fresh daemon
 * copies into touched memory (the spare list) rather than zeroing fresh
 * pages on the reactor. */
#define SPARE "ringcache_writeback_staging_spare_bytes"

static int64_t spare_bytes(void)
{
	return fx_stat_value(D.socket_path, SPARE);
}

/* Writes [0, 1 MiB) and [6 MiB, 7 MiB) of pattern(seed) as key and
 * commits: the hole between them must reach S3 as zeros, so a warmed
 * chunk the save reuses must hold none of the warm-up's bytes. */
static void write_with_hole(struct rc_client *c, const char *key,
			    uint64_t seed)
{
	int ds = rc_dataset(c, "ck");
	void *mem;
	int buf = rc_alloc_buffer(c, MiB, &mem);
	cr_assert_geq(buf, 0);
	int h = rc_write_open(c, ds, key);
	cr_assert_geq(h, 0, "write_open: %s", rc_strerror(h));
	const uint64_t at[] = {0, 6 * MiB};
	for (unsigned k = 0; k < 2; k++) {
		for (uint64_t i = 0; i < MiB; i++)
			((uint8_t *)mem)[i] = pattern(seed, at[k] + i);
		ssize_t w = rc_write(c, (uint32_t)h, at[k], MiB, (uint32_t)buf, 0);
		cr_assert_eq(w, (ssize_t)MiB, "write: %s", rc_strerror((int)w));
	}
	cr_assert_eq(rc_commit(c, (uint32_t)h), 0);
	cr_assert_eq(rc_sync(c, (uint32_t)h), 0);
}

static void check_hole_in_s3(const char *key, uint64_t seed)
{
	char full[512];
	snprintf(full, sizeof(full), "%s%s", scratch_prefix(), key);
	char *body;
	size_t len;
	cr_assert_eq(fx_get_object(full, &body, &len), 0, "%s not in S3", key);
	cr_assert_eq(len, 7 * MiB);
	for (uint64_t i = 0; i < len; i++) {
		bool hole = i >= MiB && i < 6 * MiB;
		uint8_t want = hole ? 0 : pattern(seed, i);
		if ((uint8_t)body[i] != want)
			cr_assert_fail("%s: byte %llu is %u, not %u", key,
				       (unsigned long long)i, (uint8_t)body[i],
				       want);
	}
	free(body);
}

Test(writeback, staging_warmed_at_start_is_what_the_first_save_uses,
     .fini = teardown, .timeout = 120)
{
	start("memory", "staging_memory = 32M\nstaging_warm = 24M\n");
	cr_assert_eq(fx_wait_stat(D.socket_path, SPARE, 24 * MiB, 60000),
		     24 * MiB, "the warm-up did not end at staging_warm");
	struct rc_client c;
	attach(&c);
	write_with_hole(&c, "warm", 5);
	check_hole_in_s3("warm", 5);
	/* The save took its two chunks from the warmed ones and gave them
	 * back: no fresh chunk beside them. */
	cr_assert_eq(spare_bytes(), 24 * MiB);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(writeback, staging_warm_stops_at_staging_memory, .fini = teardown,
     .timeout = 120)
{
	start("memory", "staging_memory = 16M\nstaging_warm = 1G\n");
	cr_assert_eq(fx_wait_stat(D.socket_path, SPARE, 16 * MiB, 60000),
		     16 * MiB, "the warm-up did not end at staging_memory");
	struct rc_client c;
	attach(&c);
	write_with_hole(&c, "capped", 6);
	check_hole_in_s3("capped", 6);
	cr_assert_eq(spare_bytes(), 16 * MiB);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* A save and a stop right after the start, while the digest threads may
 * still be warming 1 GiB of staging: the save is whole, the spare list
 * never passes staging_memory, and the daemon exits 0 with no sanitizer
 * report (fx_daemon_stop) whether or not a warm-up job was left. */
Test(writeback, a_stop_during_the_warm_up_exits_clean, .fini = teardown,
     .timeout = 120)
{
	start("memory", "staging_memory = 1G\nstaging_warm = 1G\n");
	struct rc_client c;
	attach(&c);
	write_with_hole(&c, "early", 8);
	check_hole_in_s3("early", 8);
	cr_assert_leq(spare_bytes(), 1024 * MiB);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* staging_warm = 0: staging is touched by the saves only; after one save
 * of two chunks the spare list holds those two, not staging_memory. */
Test(writeback, staging_warm_0_faults_in_nothing_before_a_save,
     .fini = teardown, .timeout = 120)
{
	start("memory", "staging_warm = 0\n");
	struct rc_client c;
	attach(&c);
	cr_assert_eq(spare_bytes(), 0);
	write_with_hole(&c, "cold", 7);
	check_hole_in_s3("cold", 7);
	cr_assert_eq(spare_bytes(), 8 * MiB);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* The daemon's RssShmem in KiB (its registered buffers and arenas). */
static long rss_shmem_kib(void)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)D.pid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "RssShmem: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* REGISTER_BUF maps what the memfd holds into the daemon off its reactor
 * (regbuf_warm.c): the 8 MiB the client wrote show up in the daemon's
 * RssShmem with no operation, the 8 MiB hole stays a hole (not resident
 * in the memfd), and a save from the buffer is byte for byte. */
Test(writeback, registered_pages_mapped_in_at_registration,
     .fini = teardown, .timeout = 120)
{
	start("memory", NULL);
	struct rc_client c;
	attach(&c);
	int fd = memfd_create("warm", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, 16 * MiB), 0);
	uint8_t *mem = mmap(NULL, 16 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED,
			    fd, 0);
	cr_assert_neq(mem, MAP_FAILED);
	for (uint64_t i = 0; i < 8 * MiB; i++)
		mem[i] = pattern(11, i);
	long before = rss_shmem_kib();
	int buf = rc_register_buffer(&c, fd, 16 * MiB);
	cr_assert_geq(buf, 0, "register: %s", rc_strerror(buf));
	long after = before;
	for (int i = 0; i < 3000 && after - before < 8 * 1024; i++) {
		usleep(10000);
		after = rss_shmem_kib();
	}
	cr_log_info("daemon RssShmem %ld -> %ld KiB", before, after);
	cr_assert_geq(after - before, 8 * 1024,
		      "the written 8 MiB were not mapped in: %ld KiB",
		      after - before);
	cr_assert_lt(after - before, 12 * 1024, "the hole was mapped in");
	unsigned char vec[2048];
	cr_assert_eq(mincore(mem + 8 * MiB, 8 * MiB, vec), 0);
	for (unsigned i = 0; i < 8 * MiB / 4096; i++)
		cr_assert_eq(vec[i] & 1, 0, "page %u of the hole allocated", i);
	int ds = rc_dataset(&c, "ck");
	int h = rc_write_open(&c, ds, "warm");
	cr_assert_geq(h, 0, "write_open: %s", rc_strerror(h));
	ssize_t w = rc_write(&c, (uint32_t)h, 0, 8 * MiB, (uint32_t)buf, 0);
	cr_assert_eq(w, (ssize_t)(8 * MiB), "write: %s", rc_strerror((int)w));
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	char full[512], *body;
	size_t len;
	snprintf(full, sizeof(full), "%swarm", scratch_prefix());
	cr_assert_eq(fx_get_object(full, &body, &len), 0, "%s not in S3", full);
	cr_assert_eq(len, 8 * MiB);
	for (uint64_t i = 0; i < len; i++)
		if ((uint8_t)body[i] != pattern(11, i))
			cr_assert_fail("byte %llu differs", (unsigned long long)i);
	free(body);
	cr_assert_eq(rc_unregister_buffer(&c, (uint32_t)buf), 0);
	munmap(mem, 16 * MiB);
	close(fd);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(writeback, committed_objects_read_back_before_s3_has_them,
     .fini = teardown, .timeout = 120)
{
	const char *slow[] = {"--latency-ms", "4000", NULL};
	start_proxied(slow, 3, NULL);
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
	/* Proven: the rest of the upload need not crawl (the request in
	 * flight is released, the others go at once). */
	proxy_set("set latency-ms 0\nrelease\n");
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
	start_proxied(fault_args, 10, NULL);
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

/* ---- SIGKILL at five points, then a restart on the same journal -------- */

enum kill_point {
	KILL_WRITING,             /* WRITEs of an object never committed */
	KILL_ACKED_UNSENT,        /* COMMIT acknowledged, no request in S3 */
	KILL_MULTIPART_HALF,      /* some parts in S3, no Complete */
	KILL_UPLOADED_UNRECORDED, /* in S3, S3's answer still on its way */
	KILL_DURING_REPLAY,       /* as KILL_ACKED_UNSENT, then again while
				     the restarted daemon uploads */
	KILL_POINTS
};

static const char *const kill_point_names[KILL_POINTS] = {
	"while writing", "acknowledged, nothing sent",
	"multipart half done", "uploaded, not journaled", "during replay",
};

/* Acknowledged (durability local) before the kill, at every point. */
static const struct {
	const char *key;
	uint64_t size;
} acked[] = {
	{"small", 100 * 1024 + 3}, /* one PUT */
	{"multi", 11 * MiB + 7},   /* three parts, two at a time */
};
#define N_ACKED (sizeof(acked) / sizeof(*acked))
#define PARTIAL "partial"          /* written, never committed */
/* The proxy holds every answer this long: the window the kills aim at. */
#define HOLD_MS "1000"

static uint64_t proxy_counter(const char *name)
{
	return fx_proxy_stat(fx_proxy_control(&P, "stats\n"), name);
}

static int head_in_s3(const char *key)
{
	char full[512];
	snprintf(full, sizeof(full), "%s%s", scratch_prefix(), key);
	return fx_head_object(full);
}

/* Multipart uploads in progress under the scratch prefix. */
static size_t uploads_in_progress(void)
{
	return fx_uploads_in_progress(scratch_prefix());
}

static bool acked_all_in_s3(void)
{
	for (size_t i = 0; i < N_ACKED; i++)
		if (head_in_s3(acked[i].key) != 0)
			return false;
	return true;
}

static bool unsent_held(void)
{
	return proxy_counter("fault_503") >= N_ACKED; /* a try of each */
}

static bool parts_answered(void)
{
	/* The PUT of small, parts 1 and 2, and part 3: S3 answered one. */
	return proxy_counter("put") >= 4;
}

static bool replay_uploading(void)
{
	/* small's PUT, and parts 1 and 2 of multi: its Create answered. */
	return proxy_counter("put") >= 3;
}

static void wait_for(bool (*cond)(void), const char *what)
{
	for (int i = 0; i < 1500 && !cond(); i++)
		usleep(20000);
	cr_assert(cond(), "%s: not within 30 s", what);
}

#define KILL_RETRIES 10 /* uploads held by 503s still retry at the kill */
#define KILL_CK "upload_concurrency = 2\n"

/* The same config and journal behind P (what a restart after a crash
 * finds), with these [s3] lines (or none) and retries. */
static void restart_daemon_with(const char *s3_lines, unsigned retries)
{
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	D.s3_endpoint = P.endpoint;
	D.s3_extra = s3_lines;
	D.max_retries = retries;
	fx_daemon_start(&D, sections);
}

static void restart_daemon(void)
{
	restart_daemon_with(NULL, KILL_RETRIES);
}

/* PARTIAL's first 2 MiB, the acknowledged objects (whose COMMITs make
 * PARTIAL's records durable too: a flush covers all appended before it),
 * then one more WRITE of PARTIAL, which stays open: the session stays
 * attached (a detach would abort it). */
static void write_workload(struct rc_client *c)
{
	attach(c);
	int h = write_object(c, PARTIAL, 2 * MiB, 9, false);
	for (size_t i = 0; i < N_ACKED; i++)
		write_object(c, acked[i].key, acked[i].size, i + 1, true);
	void *mem;
	int buf = rc_alloc_buffer(c, MiB, &mem);
	cr_assert_geq(buf, 0);
	memset(mem, 0x5a, MiB);
	ssize_t w = rc_write(c, (uint32_t)h, 2 * MiB, MiB, (uint32_t)buf, 0);
	cr_assert_eq(w, (ssize_t)MiB, "write: %s", rc_strerror((int)w));
}

/* Arms the proxy for the point, writes, waits for the point, kills. The
 * proxy's latency holds S3's answers, not the requests (a PUT under it is
 * in S3 at once): "nothing sent" holds the uploads with 503s instead, which
 * the proxy gives without asking S3. */
static void kill_at(enum kill_point pt, const char *name)
{
	static const char *const arm[KILL_POINTS] = {
		[KILL_WRITING] = "",
		[KILL_ACKED_UNSENT] = "set faults 503\nset fault-rate 1\n",
		[KILL_MULTIPART_HALF] = "set latency-ms " HOLD_MS "\n",
		[KILL_UPLOADED_UNRECORDED] = "set latency-ms " HOLD_MS "\n",
		[KILL_DURING_REPLAY] = "set faults 503\nset fault-rate 1\n",
	};
	struct rc_client c;
	proxy_set(arm[pt]);
	write_workload(&c);
	switch (pt) {
	case KILL_WRITING:
		break;
	case KILL_ACKED_UNSENT:
	case KILL_DURING_REPLAY:
		wait_for(unsent_held, name);
		break;
	case KILL_MULTIPART_HALF:
		wait_for(parts_answered, name);
		break;
	case KILL_UPLOADED_UNRECORDED:
		wait_for(acked_all_in_s3, name);
		break;
	default:
		cr_assert_fail("no such point");
	}
	fx_daemon_kill(&D);
	rc_detach(&c);
}

/* What S3 must show right after the kill for the point to be the one
 * named (else the test aimed wrong, e.g. a machine too slow). */
static void assert_point_reached(enum kill_point pt, const char *name)
{
	switch (pt) {
	case KILL_ACKED_UNSENT:
	case KILL_DURING_REPLAY:
		cr_assert(head_in_s3("small") == -ENOENT &&
			  head_in_s3("multi") == -ENOENT &&
			  uploads_in_progress() == 0,
			  "%s: a request reached S3", name);
		break;
	case KILL_MULTIPART_HALF:
		cr_assert_eq(head_in_s3("multi"), -ENOENT,
			     "%s: multi was complete", name);
		cr_assert_eq(uploads_in_progress(), 1, "%s", name);
		break;
	default:
		break;
	}
}

/* KILL_DURING_REPLAY's second kill: the restarted daemon replays both
 * objects over a slow link and dies with multi's upload begun. */
static void kill_during_replay(const char *name, struct fx_daemon *first)
{
	proxy_set("set fault-rate 0\nset latency-ms " HOLD_MS "\nreset-stats\n");
	restart_daemon();
	*first = D;
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"),
		     (int64_t)N_ACKED, "%s", name);
	wait_for(replay_uploading, name);
	fx_daemon_kill(&D);
	cr_assert_eq(uploads_in_progress(), 1,
		     "%s: the replay's upload was not under way", name);
}

/* Restarts straight through and waits for the replay; adds the
 * acknowledged objects to objs (bytes allocated) for the check with aws. */
static void recover(enum kill_point pt, const char *name,
		    const struct fx_daemon *first, struct fx_s3_object *objs,
		    char (*keys)[300])
{
	proxy_set("set fault-rate 0\nset latency-ms 0\n");
	restart_daemon();
	if (pt != KILL_DURING_REPLAY)
		first = &D;
	int64_t replayed = fx_stat_value(D.socket_path,
					 "ringcache_writeback_replayed_total");
	/* multi was in flight at every kill but the first. */
	if (pt == KILL_ACKED_UNSENT)
		cr_assert_eq(replayed, (int64_t)N_ACKED, "%s", name);
	else if (pt != KILL_WRITING)
		cr_assert_geq(replayed, 1, "%s: multi was not replayed", name);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total",
				  replayed, 30000), replayed,
		     "%s: the replay did not finish", name);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_failed_total"), 0,
		     "%s", name);
	cr_assert(fx_daemon_log_contains(first, "journal: ck/" PARTIAL
					 " was never committed: discarded"),
		  "%s: the uncommitted object was not reported (log %s)", name,
		  first->log_path);
	fx_daemon_stop(&D);
	unlink(journal_path); /* five points: five journals otherwise */
	for (size_t i = 0; i < N_ACKED; i++)
		objs[i] = written(keys[i], sizeof(keys[i]), acked[i].key,
				  acked[i].size, i + 1);
}

/* Each point over its own prefix and journal, one rc-proxy for all; then
 * one read-back with aws of everything under the points' parent prefix:
 * the acknowledged objects byte for byte, nothing else (no PARTIAL, no
 * partial object), no multipart upload left. A point costs ~12 s under
 * TSan on a loaded machine (three daemon starts, 14 MiB written): a
 * sanitizer build runs "during replay" (which kills "acknowledged,
 * nothing sent" first) and two more points drawn each run (sample.h;
 * RINGCACHE_TEST_LONG=1 runs all five). */
Test(writeback, kill_9_at_each_point_then_restart, .fini = teardown,
     .timeout = 300)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	char parent[128], sub[160], keys[KILL_POINTS * N_ACKED][300];
	struct fx_s3_object objs[KILL_POINTS * N_ACKED];
	bool keep[KILL_POINTS] = {[KILL_DURING_REPLAY] = true};
	sample_steps("kill_9_at_each_point_then_restart", keep, KILL_POINTS,
		     2);
	size_t n = 0;
	fx_unique(parent, sizeof(parent), "wb-kill");
	fx_proxy_start(&P, pass);
	proxy_on = true;
	for (int pt = 0; pt < KILL_POINTS; pt++) {
		char name[80];
		struct fx_daemon first;
		if (!keep[pt])
			continue;
		snprintf(name, sizeof(name), "kill -9 %s", kill_point_names[pt]);
		snprintf(sub, sizeof(sub), "%s/%d", parent, pt);
		proxy_set("set fault-rate 0\nset latency-ms 0\nreset-stats\n");
		start_behind_proxy(sub, KILL_RETRIES, KILL_CK);
		kill_at(pt, name);
		assert_point_reached(pt, name);
		if (pt == KILL_DURING_REPLAY)
			kill_during_replay(name, &first);
		recover(pt, name, &first, objs + n, keys + n);
		n += N_ACKED;
		cr_log_info("%s: recovered", name);
	}
	char prefix[300];
	snprintf(prefix, sizeof(prefix), "%s%s/", fx_env()->prefix, parent);
	fx_aws_assert_objects(prefix, objs, n, 5 * MiB);
	for (size_t i = 0; i < n; i++)
		free((void *)objs[i].data);
	fx_proxy_stop(&P);
	proxy_on = false;
}

/* An object a test writes: key, size and pattern seed. */
struct wobj {
	const char *key;
	uint64_t size;
	uint64_t seed;
};

/* After uploads failed for a cause a later try could cure: the log names
 * it (one of the codes given) and the bytes were kept, not dropped. */
static void assert_failed_and_kept(const char *code, const char *or_code)
{
	cr_assert(fx_daemon_log_contains(&D, code) ||
		  (or_code && fx_daemon_log_contains(&D, or_code)),
		  "the failure does not name its cause (log %s)", D.log_path);
	cr_assert_not(fx_daemon_log_contains(&D, "dropped from the journal"),
		      "acknowledged bytes were dropped (log %s)", D.log_path);
}

/* aws reads the scratch prefix back: exactly these n objects, byte for
 * byte, and no multipart upload left (fx_aws_assert_objects). */
static void aws_assert_only(const struct wobj *objs, int n)
{
	char keys[4][300];
	struct fx_s3_object want[4];
	cr_assert(n <= 4);
	for (int i = 0; i < n; i++)
		want[i] = written(keys[i], sizeof(keys[i]), objs[i].key,
				  objs[i].size, objs[i].seed);
	fx_aws_assert_objects(scratch_prefix(), want, (size_t)n, 5 * MiB);
	for (int i = 0; i < n; i++)
		free((void *)want[i].data);
}

/* Stops the daemon, starts it again on the same journal with the proxy
 * passing everything: the n objects are replayed and land byte for byte.
 * Then stops both. */
static void restart_and_land(const struct wobj *objs, int n)
{
	fx_daemon_stop(&D);
	proxy_set("set fault-rate 0\nset damage-bodies 0\n");
	restart_daemon();
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"), n);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total", n,
				  30000), n, "the replay did not finish");
	for (int i = 0; i < n; i++)
		cr_assert_eq(check_in_s3(objs[i].key, objs[i].size,
					 objs[i].seed), 0, "%s", objs[i].key);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
	proxy_on = false;
}

/* Bodies damaged on the way to S3: rc-proxy flips the first byte of PUT
 * bodies. S3 finds them by the signed SHA-256 or the Content-MD5 (RGW
 * answers XAmzContentSHA256Mismatch; that 400 used to count as a refusal
 * for good, which dropped acknowledged bytes from the journal). One
 * damaged body per object (a single PUT's, one part of a multipart
 * upload) is sent again and the object lands intact; a link that damages
 * every body fails the upload as a damaged body (-EBADMSG) with nothing
 * under the key (no object, no multipart upload left), the bytes stay
 * journaled, and the next start uploads them intact. */
Test(writeback, bodies_damaged_on_the_way_are_sent_again_never_dropped,
     .fini = teardown, .timeout = 180)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const struct wobj objs[] = {{"damaged-put", 100 * 1024 + 3, 90},
				    {"damaged-multi", 11 * MiB + 7, 91}};
	const struct wobj always = {"damaged-always", 11 * MiB + 7, 93};
	start_proxied(pass, 3, NULL);
	struct rc_client c;
	attach(&c);
	for (int i = 0; i < 2; i++) {
		proxy_set("set damage-bodies 1\n");
		write_object(&c, objs[i].key, objs[i].size, objs[i].seed, true);
		int r = rc_sync(&c, RC_SYNC_ALL);
		cr_assert_eq(r, 0, "%s: sync after one damaged body: %s",
			     objs[i].key, rc_strerror(r));
		cr_assert_eq(check_in_s3(objs[i].key, objs[i].size,
					 objs[i].seed), 0, "%s", objs[i].key);
	}
	cr_assert_eq(fx_proxy_stat(fx_proxy_control(&P, "stats\n"),
				   "bodies_damaged"), 2);

	proxy_set("set damage-bodies 1000000\nreset-stats\n");
	int h = write_object(&c, always.key, always.size, always.seed, true);
	int r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, -EBADMSG, "sync with every body damaged: %s",
		     rc_strerror(r));
	rc_detach(&c);
	cr_assert_gt(fx_proxy_stat(fx_proxy_control(&P, "stats\n"),
				   "bodies_damaged"), 1, "not sent again");
	cr_assert_eq(check_in_s3(always.key, 0, 0), -ENOENT,
		     "a damaged upload left an object");
	cr_assert_eq(uploads_in_progress(), 0,
		     "a damaged multipart upload was left open");
	assert_failed_and_kept("XAmzContentSHA256Mismatch", "BadDigest");
	restart_and_land(&always, 1);
	const struct wobj all[] = {objs[0], objs[1], always};
	aws_assert_only(all, 3);
}

/* A failure a later try could cure is no refusal, whatever its status:
 * S3's 400 RequestTimeout (a link too slow for S3's patience) to every
 * request, past the retries, fails the SYNC but keeps the acknowledged
 * bytes journaled (as a 4xx it once counted as a refusal for good and
 * was dropped from the journal), says so in the log, and the next start
 * uploads them: a single PUT and a multipart upload. */
Test(writeback, a_4xx_a_retry_could_cure_keeps_the_checkpoint_journaled,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const struct wobj objs[] = {{"slow-put", 100 * 1024 + 3, 95},
				    {"slow-multi", 11 * MiB + 7, 96}};
	start_proxied(pass, 2, NULL);
	struct rc_client c;
	attach(&c);
	proxy_set("set faults requesttimeout\nset fault-rate 1\n");
	int h[2];
	for (int i = 0; i < 2; i++)
		h[i] = write_object(&c, objs[i].key, objs[i].size,
				    objs[i].seed, true);
	for (int i = 0; i < 2; i++) {
		int r = rc_sync(&c, (uint32_t)h[i]);
		cr_assert_eq(r, -EIO, "%s: sync with every request timed "
			     "out: %s", objs[i].key, rc_strerror(r));
	}
	rc_detach(&c);
	cr_assert_geq(fx_proxy_stat(fx_proxy_control(&P, "stats\n"),
				    "fault_requesttimeout"), 6,
		      "not retried (3 tries of each)");
	for (int i = 0; i < 2; i++)
		cr_assert_eq(check_in_s3(objs[i].key, 0, 0), -ENOENT, "%s",
			     objs[i].key);
	assert_failed_and_kept("RequestTimeout", NULL);
	cr_assert(fx_daemon_log_contains(&D, "(uploaded again in a while; "
					 "journaled for the next start)"),
		  "the failure does not say the bytes are kept (log %s)",
		  D.log_path);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_rejected_total"), 0);
	restart_and_land(objs, 2);
	aws_assert_only(objs, 2);
}

/* The journal's COMMIT keeps the writer's uid: after a restart, a replayed
 * object whose upload fails is reported to its uid's SYNC of all (what a
 * client whose handle died with the old daemon sends), and no longer once
 * it has gone again and landed. */
Test(writeback, a_replay_that_fails_is_reported_to_its_writers_sync,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const struct wobj obj = {"replayed", 100 * 1024 + 3, 88};
	start_proxied(pass, 2, NULL);
	struct rc_client c;
	attach(&c);
	proxy_set("set latency-ms 60000\n"); /* held until the kill */
	write_object(&c, obj.key, obj.size, obj.seed, true);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_backlog_objects", 1,
				  30000), 1);
	fx_daemon_kill(&D);
	rc_detach(&c);
	proxy_set("set latency-ms 0\nrelease\n"
		  "set faults requesttimeout\nset fault-rate 1\n");
	restart_daemon_with("retry_budget = 2", 2);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_failed_objects", 1,
				  60000), 1, "the replay did not fail");
	attach(&c);
	int r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, -EIO, "sync of all after the replay failed: %s",
		     rc_strerror(r));
	proxy_set("set fault-rate 0\n");
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total", 1,
				  60000), 1, "not uploaded again");
	r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, 0, "sync of all once it landed: %s", rc_strerror(r));
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_failed_objects"), 0);
	rc_detach(&c);
	aws_assert_only(&obj, 1);
}

/* A RENAME deletes the name it leaves only if S3 still holds what it put
 * there: the DELETE carries that ETag (If-Match), and S3's 412, when
 * another writer replaced the object meanwhile (rc-proxy answers every
 * conditional DELETE so), leaves the old name alone; the RENAME still
 * succeeds. Both ways a name is left: a RENAME after the upload (copy,
 * then the source's DELETE) and during it (the upload lands under the
 * old name, which is deleted before the upload under the new one). */
Test(writeback, a_rename_leaves_a_source_another_object_replaced,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const uint64_t size = 100 * 1024 + 3;
	start_proxied(pass, 3, NULL);
	struct rc_client c;
	attach(&c);
	proxy_set("set fail-conditional-deletes 1\n");
	int h = write_object(&c, "after.tmp", size, 86, true);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	int r = rc_rename(&c, (uint32_t)h, "after");
	cr_assert_eq(r, 0, "rename after the upload: %s", rc_strerror(r));
	cr_assert_eq(fx_proxy_stat(fx_proxy_control(&P, "stats\n"),
				   "conditional_deletes"), 1,
		     "the source's DELETE was not conditional");
	cr_assert_eq(check_in_s3("after", size, 86), 0);
	cr_assert_eq(check_in_s3("after.tmp", size, 86), 0,
		     "deleted in spite of the 412");
	cr_assert(fx_daemon_log_contains(&D, "another object replaced it"),
		  "the log does not say why the name is left (log %s)",
		  D.log_path);

	/* The upload's PUT held 1.5 s: the RENAME comes while it runs. */
	proxy_set("set latency-ms 1500\n");
	h = write_object(&c, "during.tmp", size, 87, true);
	r = rc_rename(&c, (uint32_t)h, "during");
	cr_assert_eq(r, 0, "rename during the upload: %s", rc_strerror(r));
	proxy_set("set latency-ms 0\n");
	r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, 0, "sync: %s", rc_strerror(r));
	cr_assert_eq(fx_proxy_stat(fx_proxy_control(&P, "stats\n"),
				   "conditional_deletes"), 2,
		     "the old name's DELETE was not conditional");
	cr_assert_eq(check_in_s3("during", size, 87), 0);
	cr_assert_eq(check_in_s3("during.tmp", size, 87), 0,
		     "deleted in spite of the 412");
	rc_detach(&c);
}

/* SYNC of all objects promises that S3 has them: an upload that failed
 * before the SYNC came (its handle closed since) fails it too, in every
 * session of the uid, until a later save of the key lands; a save of
 * another key does not cure it. (SYNC of all used to count only the
 * uploads still running and said 0.) */
Test(writeback, a_sync_of_all_reports_a_failure_that_came_before_it,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const struct wobj failed = {"failed-early", 100 * 1024 + 3, 97};
	const struct wobj other = {"other", 64 * 1024, 98};
	start_proxied(pass, 2, NULL);
	struct rc_client c, again;
	attach(&c);
	proxy_set("set faults requesttimeout\nset fault-rate 1\n");
	int h = write_object(&c, failed.key, failed.size, failed.seed, true);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_failed_objects", 1,
				  60000), 1, "the upload did not fail");
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
	int r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, -EIO, "sync of all after a failed upload: %s",
		     rc_strerror(r));
	attach(&again);
	r = rc_sync(&again, RC_SYNC_ALL);
	cr_assert_eq(r, -EIO, "another session of the uid: %s",
		     rc_strerror(r));

	proxy_set("set fault-rate 0\n");
	h = write_object(&c, other.key, other.size, other.seed, true);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, -EIO, "another key's save cured the failure: %s",
		     rc_strerror(r));
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_failed_objects"), 1);

	write_object(&c, failed.key, failed.size, failed.seed, true);
	r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, 0, "the key saved again and landed: %s",
		     rc_strerror(r));
	cr_assert_eq(rc_sync(&again, RC_SYNC_ALL), 0);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_failed_objects"), 0);
	rc_detach(&again);
	rc_detach(&c);
	const struct wobj all[] = {failed, other};
	aws_assert_only(all, 2);
}

/* The same key saved twice; the daemon is killed while the first save's
 * upload still waits for S3's answers and the second waits for it (one
 * key): the restart must not upload the older bytes over the newer (it
 * used to: the replay sent every journaled object). */
Test(writeback, a_restart_never_uploads_an_older_save_over_a_newer,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const uint64_t old_size = 6 * MiB + 5, new_size = 2 * MiB + 3;
	start_proxied(pass, 2, NULL);
	struct rc_client c;
	attach(&c);
	proxy_set("set latency-ms 60000\n"); /* the first save's answers */
	write_object(&c, "latest", old_size, 80, true);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_backlog_objects", 1,
				  30000), 1);
	/* The second save waits for the first's upload: one key. */
	write_object(&c, "latest", new_size, 81, true);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_key_waits_total", 1,
				  30000), 1, "the second save did not wait");
	fx_daemon_kill(&D);
	proxy_set("set latency-ms 0\nrelease\n");

	restart_daemon();
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_superseded_total"), 1);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total", 1,
				  30000), 1, "the newer save did not land");
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"), 1,
		     "the older save was replayed");
	cr_assert(fx_daemon_log_contains(&D, "/latest was committed again "
					 "later: the older bytes are not "
					 "uploaded"), "log %s", D.log_path);
	cr_assert_eq(check_in_s3("latest", new_size, 81), 0);
	fx_daemon_stop(&D);
	/* Its ABORT is on disk: the next start has nothing of it. */
	restart_daemon();
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_superseded_total"), 0);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"), 0);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
	proxy_on = false;
	rc_detach(&c); /* its daemon is gone: frees what the client holds */
	const struct wobj newer = {"latest", new_size, 81};
	aws_assert_only(&newer, 1);
}

/* An S3 outage longer than the uploads' retries: the upload fails, and
 * the object goes again by itself once S3 is back (a pause of
 * retry_budget, doubling), without a restart, from the staged bytes the
 * pause holds. */
Test(writeback, an_upload_that_failed_goes_again_when_s3_is_back,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	s3_extra = "retry_budget = 2";
	start_proxied(pass, 2, NULL);
	s3_extra = NULL;
	struct rc_client c;
	attach(&c);
	proxy_set("set outage-ms 120000\n");
	write_object(&c, "after-outage", 11 * MiB + 7, 97, true);
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_failed_total", 1, 30000),
		     1, "the upload did not fail during the outage");
	cr_assert(fx_daemon_log_contains(&D, "(uploaded again in a while; "
					 "journaled for the next start)"),
		  "log %s", D.log_path);
	cr_assert_eq(check_in_s3("after-outage", 0, 0), -ENOENT);
	proxy_set("set outage-ms 0\n");
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total", 1,
				  60000), 1, "not uploaded again after the outage");
	cr_assert(fx_daemon_log_contains(&D, "/after-outage again ("),
		  "log %s", D.log_path);
	/* Nothing live is left, so a later save rewinds the journal (once
	 * the DONE records before it are on disk: a pause before each save
	 * lets the last one's reach it): it has its room back. A failed
	 * object used to hold it until a restart. */
	int64_t used = 0;
	for (int i = 0; i < 20; i++) {
		usleep(200 * 1000);
		int h = write_object(&c, "next", 64 * 1024, 98, true);
		cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
		cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
		used = fx_stat_value(D.socket_path,
				     "ringcache_writeback_journal_used_bytes");
		if (used < MiB)
			break;
	}
	cr_assert_lt(used, MiB, "the journal kept the room: %lld bytes",
		     (long long)used);
	int r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, 0, "sync once uploaded: %s", rc_strerror(r));
	cr_assert_eq(check_in_s3("after-outage", 11 * MiB + 7, 97), 0);
	rc_detach(&c);
	fx_daemon_stop(&D);
	restart_daemon(); /* its DONE is in the journal */
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"), 0);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
	proxy_on = false;
}

/* The staging an upload waiting to go again holds is the first to go when
 * a newer save needs it: the newer save never waits for it, and the older
 * object, still journaled, is not sent again before the next start, which
 * uploads it. staging_memory 16M: a 12 MiB object waiting to go again,
 * then a 12 MiB save of another key. */
Test(writeback, a_newer_save_takes_the_staging_of_one_waiting_to_go_again,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const struct wobj older = {"older", 12 * MiB, 84};
	const struct wobj newer = {"newer", 12 * MiB + 1, 85};
	s3_extra = "retry_budget = 60";
	proxied_extra = "staging_memory = 16M\nmax_staged_per_uid = 16M\n"
			"staging_warm = 0\n";
	start_proxied(pass, 2, NULL);
	s3_extra = proxied_extra = NULL;
	struct rc_client c;
	attach(&c);
	proxy_set("set faults requesttimeout\nset fault-rate 1\n");
	int h = write_object(&c, older.key, older.size, older.seed, true);
	int r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, -EIO, "the older save's upload: %s", rc_strerror(r));
	cr_assert(fx_daemon_log_contains(&D, "(uploaded again in a while; "
					 "journaled for the next start)"),
		  "log %s", D.log_path);
	proxy_set("set fault-rate 0\n");
	h = write_object(&c, newer.key, newer.size, newer.seed, true);
	r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, 0, "the newer save: %s", rc_strerror(r));
	cr_assert(fx_daemon_log_contains(&D, "/older: its staging went to "
					 "newer saves: not uploaded again "
					 "before the next start (journaled)"),
		  "log %s", D.log_path);
	cr_assert_eq(check_in_s3(older.key, 0, 0), -ENOENT);
	r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, -EIO, "S3 lacks the older save: %s", rc_strerror(r));
	rc_detach(&c);
	restart_and_land(&older, 1);
	const struct wobj all[] = {older, newer};
	aws_assert_only(all, 2);
}

/* A save whose upload failed waits to go again; a newer save of the same
 * key lands meanwhile: the older one never goes again (it would land
 * over the newer), leaves the journal, and a restart has nothing of it.
 * The pause (retry_budget 10 s) leaves the test ample time to commit the
 * newer save first. */
Test(writeback, a_newer_save_stops_an_older_one_going_again,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const uint64_t old_size = 6 * MiB + 5, new_size = 2 * MiB + 3;
	s3_extra = "retry_budget = 10";
	start_proxied(pass, 2, NULL);
	s3_extra = NULL;
	struct rc_client c;
	attach(&c);
	proxy_set("set faults requesttimeout\nset fault-rate 1\n");
	write_object(&c, "latest", old_size, 82, true);
	int r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, -EIO, "the first save's upload: %s", rc_strerror(r));
	proxy_set("set fault-rate 0\n");
	write_object(&c, "latest", new_size, 83, true);
	r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, 0, "the second save's upload: %s", rc_strerror(r));
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_superseded_total"), 1);
	cr_assert(fx_daemon_log_contains(&D, "latest was committed again: the "
					 "older bytes, whose upload failed, "
					 "are not uploaded again"),
		  "log %s", D.log_path);
	sleep(12); /* past the older one's pause */
	cr_assert_not(fx_daemon_log_contains(&D, "/latest again ("),
		      "the older save went again (log %s)", D.log_path);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_uploaded_total"), 1);
	cr_assert_eq(check_in_s3("latest", new_size, 83), 0);
	rc_detach(&c);
	fx_daemon_stop(&D);
	restart_daemon();
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"), 0);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_superseded_total"), 0,
		     "the older save's ABORT did not reach the journal");
	cr_assert_eq(check_in_s3("latest", new_size, 83), 0);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
	proxy_on = false;
}

/* Reads key through the daemon into mem (buffer buf) and checks every
 * byte against pattern(seed). */
static void read_back(struct rc_client *c, int buf, const void *mem,
		      const char *key, uint64_t size, uint64_t seed)
{
	struct rc_stat st;
	int h = rc_open(c, rc_dataset(c, "ck"), key, &st);
	cr_assert_geq(h, 0, "open %s: %s", key, rc_strerror(h));
	cr_assert_eq(st.size, size, "%s", key);
	ssize_t n = rc_read_into(c, (uint32_t)h, 0, size, (uint32_t)buf, 0);
	cr_assert_eq(n, (ssize_t)size, "read %s: %s", key,
		     rc_strerror((int)n));
	for (uint64_t i = 0; i < size; i++)
		if (((const uint8_t *)mem)[i] != pattern(seed, i))
			cr_assert_fail("%s: byte %llu differs", key,
				       (unsigned long long)i);
	rc_close(c, (uint32_t)h);
}

/* Acknowledged objects a restart finds in the journal, read back before
 * S3 has them (its answers held past the start-up clean-up, which every
 * replayed upload waits for): served from the journal file, read on the
 * shard's workers rather than its reactor (the meson test `blocking`
 * holds that), byte for byte, with no GET sent to S3; S3 then takes
 * them. */
Test(writeback, replayed_objects_read_back_from_the_journal,
     .fini = teardown, .timeout = 180)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	char sub[128];
	fx_unique(sub, sizeof(sub), "wb-replay-read");
	fx_proxy_start(&P, pass);
	proxy_on = true;
	start_behind_proxy(sub, KILL_RETRIES, KILL_CK);
	kill_at(KILL_ACKED_UNSENT, "replay read");
	assert_point_reached(KILL_ACKED_UNSENT, "replay read");
	proxy_set("set fault-rate 0\nset latency-ms 8000\nreset-stats\n");
	restart_daemon();
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_replayed_total"),
		     (int64_t)N_ACKED);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	struct rc_client c;
	attach(&c);
	void *mem;
	int buf = rc_alloc_buffer(&c, 12 * MiB, &mem);
	cr_assert_geq(buf, 0);
	for (size_t i = 0; i < N_ACKED; i++)
		read_back(&c, buf, mem, acked[i].key, acked[i].size, i + 1);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
		     gets, "read your writes went to S3");
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_uploaded_total"), 0,
		     "uploaded before the reads: S3 was not held long enough");
	proxy_set("set latency-ms 0\nrelease\n");
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total",
				  (int64_t)N_ACKED, 60000), (int64_t)N_ACKED,
		     "the replay did not finish");
	for (size_t i = 0; i < N_ACKED; i++)
		cr_assert_eq(check_in_s3(acked[i].key, acked[i].size, i + 1),
			     0, "%s", acked[i].key);
	rc_detach(&c);
	fx_daemon_stop(&D);
	unlink(journal_path);
	fx_proxy_stop(&P);
	proxy_on = false;
}

/* ---- a clean SIGTERM with uploads held ------------------------------------ */

/* SIGTERM while S3 refuses every upload (503s): each stopped upload is one
 * info line saying the journal keeps it, never an error; the next start
 * uploads it, and aws reads back exactly the bytes. */
Test(writeback, sigterm_with_uploads_held_logs_no_error, .fini = teardown,
     .timeout = 180)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	char sub[160], keys[N_ACKED][300], prefix[300];
	struct fx_s3_object objs[N_ACKED];
	fx_unique(sub, sizeof(sub), "wb-term");
	fx_proxy_start(&P, pass);
	proxy_on = true;
	start_behind_proxy(sub, KILL_RETRIES, KILL_CK);
	/* After the start: its blocking cleanup of old uploads would retry. */
	proxy_set("set faults 503\nset fault-rate 1\n");
	struct rc_client c;
	attach(&c);
	for (size_t i = 0; i < N_ACKED; i++)
		write_object(&c, acked[i].key, acked[i].size, i + 1, true);
	rc_detach(&c);
	wait_for(unsent_held, "uploads held by 503s");
	struct fx_daemon first = D;
	fx_daemon_stop(&D);
	cr_assert_eq(fx_daemon_log_count(&first, " error "), 0,
		     "a clean stop logged an error (log %s)", first.log_path);
	cr_assert_eq(fx_daemon_log_count(&first, "stopped by shutdown: "
					 "journaled, uploaded again at the "
					 "next start"), (int)N_ACKED,
		     "one info line per stopped upload (log %s)",
		     first.log_path);

	proxy_set("set fault-rate 0\n");
	restart_daemon();
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total",
				  (int64_t)N_ACKED, 30000), (int64_t)N_ACKED);
	fx_daemon_stop(&D);
	unlink(journal_path);
	for (size_t i = 0; i < N_ACKED; i++)
		objs[i] = written(keys[i], sizeof(keys[i]), acked[i].key,
				  acked[i].size, i + 1);
	snprintf(prefix, sizeof(prefix), "%s%s/", fx_env()->prefix, sub);
	fx_aws_assert_objects(prefix, objs, N_ACKED, 5 * MiB);
	for (size_t i = 0; i < N_ACKED; i++)
		free((void *)objs[i].data);
	fx_proxy_stop(&P);
	proxy_on = false;
}

/* ---- RENAME of an object in S3: a copy job on the shard's reactor ---- */

/* The daemon's S3 behind a proxy that answers at once but holds every
 * server-side copy copy_ms; renames above 5 MiB copy 5 MiB parts. One
 * shard: every session shares the reactor a blocking copy would hold. */
static void start_copy_proxied(const char *copy_ms, unsigned retries)
{
	const char *args[] = {"--latency-ms", "0", "--copy-delay-ms", copy_ms,
			      NULL};
	fx_proxy_start(&P, args);
	proxy_on = true;
	start_behind_proxy(NULL, retries, "copy_threshold = 5M\n");
}

/* The same, a client attached and key (size bytes of pattern seed)
 * uploaded: its write handle. */
static int start_with_uploaded(struct rc_client *c, const char *copy_ms,
			       unsigned retries, const char *key,
			       uint64_t size, uint64_t seed)
{
	start_copy_proxied(copy_ms, retries);
	attach(c);
	int h = write_object(c, key, size, seed, true);
	cr_assert_eq(rc_sync(c, RC_SYNC_ALL), 0);
	return h;
}

/* RENAME without waiting for it: its completion is tagged user_data. */
static void rename_submit(struct rc_client *c, uint32_t h, const char *key,
			  uint64_t user_data)
{
	int slot = rc_arg_get(c);
	cr_assert_geq(slot, 0);
	struct rc_sqe *sqe = rc_get_sqe(c);
	cr_assert_not_null(sqe);
	sqe->opcode = RC_OP_RENAME;
	sqe->arg = (uint16_t)slot;
	sqe->handle = h;
	sqe->arg_len = (uint32_t)strlen(key);
	sqe->user_data = user_data;
	memcpy(rc_arg_ptr(c, slot), key, strlen(key));
	cr_assert_eq(rc_submit(c), 1);
}

static int32_t wait_res(struct rc_client *c, uint64_t user_data)
{
	struct rc_cqe *cqe;
	cr_assert_eq(rc_wait_cqe(c, &cqe), 0);
	cr_assert_eq(cqe->user_data, user_data, "completions out of order");
	int32_t res = cqe->res;
	rc_cqe_seen(c);
	return res;
}

/* Reads all of key through the daemon into buf (registered, at mem);
 * the milliseconds from OPEN to the last byte. */
static uint64_t timed_read(struct rc_client *c, int buf, const void *mem,
			   const char *key, uint64_t size, uint64_t seed)
{
	uint64_t t0 = rc_now_ms();
	struct rc_stat st;
	int h = rc_open(c, rc_dataset(c, "ck"), key, &st);
	cr_assert_geq(h, 0, "open %s: %s", key, rc_strerror(h));
	ssize_t n = rc_read_into(c, (uint32_t)h, 0, size, (uint32_t)buf, 0);
	uint64_t took = rc_now_ms() - t0;
	cr_assert_eq(n, (ssize_t)size, "read %s: %s", key,
		     rc_strerror((int)n));
	for (uint64_t i = 0; i < size; i++)
		if (((uint8_t *)mem)[i] != pattern(seed, i))
			cr_assert_fail("%s: byte %llu differs", key,
				       (unsigned long long)i);
	rc_close(c, (uint32_t)h);
	return took;
}

static bool copy_sent(void)
{
	return proxy_counter("copy") >= 1;
}

/* Under the threshold one CopyObject, above it three UploadPartCopy
 * ranges: the bytes under the new names, the old names gone (aws lists
 * exactly the new keys with S3's ETags). */
Test(writeback, rename_completed_by_copy_and_by_multipart_copy,
     .fini = teardown, .timeout = 120)
{
	start_copy_proxied("0", 3);
	struct rc_client c;
	attach(&c);
	const uint64_t small = 3 * MiB + 5, big = 12 * MiB;
	int hs = write_object(&c, "small.tmp", small, 31, true);
	int hb = write_object(&c, "big.tmp", big, 32, true);
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	proxy_set("reset-stats\n");
	cr_assert_eq(rc_rename(&c, (uint32_t)hs, "small"), 0);
	cr_assert_eq(proxy_counter("copy"), 1, "one CopyObject");
	cr_assert_eq(rc_rename(&c, (uint32_t)hb, "big"), 0);
	cr_assert_eq(proxy_counter("copy"), 4, "then three UploadPartCopy");
	cr_assert_eq(proxy_counter("delete"), 2, "the old names' DELETEs");
	char keys[2][300];
	struct fx_s3_object objs[2] = {
		written(keys[0], sizeof(keys[0]), "small", small, 31),
		written(keys[1], sizeof(keys[1]), "big", big, 32),
	};
	fx_aws_assert_objects(scratch_prefix(), objs, 2, 5 * MiB);
	free((void *)objs[0].data);
	free((void *)objs[1].data);
	/* The same name: nothing to do. */
	cr_assert_eq(rc_rename(&c, (uint32_t)hb, "big"), 0);
	cr_assert_eq(check_in_s3("big", big, 32), 0);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* A copy S3 takes 5 s for: the shard's other clients read (cached and
 * not) meanwhile, a second RENAME of the handle is -EBUSY, and the
 * RENAME completes once the copy did. That the reads did not wait for
 * the copy is proven by order, not by their time: they ended while the
 * RENAME's completion was not posted yet (a busy machine running the
 * sanitizer builds side by side stretches a read to seconds, and a bound
 * on its time failed CI). */
Test(writeback, rename_after_upload_leaves_the_reactor_free,
     .fini = teardown, .timeout = 120)
{
	start_copy_proxied("5000", 3);
	struct rc_client c, r;
	attach(&c);
	attach(&r);
	const uint64_t size = 1 * MiB + 7;
	int h = write_object(&c, "ckpt.tmp", size, 41, true);
	write_object(&c, "cached", size, 42, true);
	write_object(&c, "cold", size, 43, true);
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	void *mem;
	int buf = rc_alloc_buffer(&r, size, &mem);
	cr_assert_geq(buf, 0);
	timed_read(&r, buf, mem, "cached", size, 42);

	uint64_t t0 = rc_now_ms();
	rename_submit(&c, (uint32_t)h, "ckpt", 1);
	wait_for(copy_sent, "the CopyObject sent");
	uint64_t hot = timed_read(&r, buf, mem, "cached", size, 42);
	uint64_t cold = timed_read(&r, buf, mem, "cold", size, 43);
	cr_assert_null(rc_peek_cqe(&c), "the RENAME ended before the reads "
		       "(%llu, %llu ms)", (unsigned long long)hot,
		       (unsigned long long)cold);
	cr_log_info("reads during the copy: cached %llu ms, cold %llu ms",
		    (unsigned long long)hot, (unsigned long long)cold);
	rename_submit(&c, (uint32_t)h, "ckpt-2", 2);
	cr_assert_eq(wait_res(&c, 2), -EBUSY, "a second RENAME while copying");
	cr_assert_eq(wait_res(&c, 1), 0);
	cr_assert_geq(rc_now_ms() - t0, 4900, "the RENAME did not wait for S3");
	cr_assert_eq(check_in_s3("ckpt", size, 41), 0);
	cr_assert_eq(head_in_s3("ckpt.tmp"), -ENOENT);
	cr_assert_eq(head_in_s3("ckpt-2"), -ENOENT);
	rc_detach(&r);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

static bool put_sent(void)
{
	return proxy_counter("put") >= 1;
}

static bool delete_sent(void)
{
	return proxy_counter("delete") >= 1;
}

/* A RENAME while the upload's PUT is in flight: the PUT lands under the
 * old name, whose DELETE S3 takes 5 s for; the shard's other clients read
 * (cached and not) while that DELETE is still held (proven by order: the
 * proxy still has it in flight once they end, whatever their time), then
 * the object is uploaded under its new name and the old one is gone. */
Test(writeback, old_name_delete_leaves_the_reactor_free, .fini = teardown,
     .timeout = 120)
{
	const char *args[] = {"--latency-ms", "0", "--delete-delay-ms", "5000",
			      NULL};
	start_proxied(args, 3, NULL);
	struct rc_client c, r;
	attach(&c);
	attach(&r);
	const uint64_t size = 1 * MiB + 7; /* one PUT: no cancel at RENAME */
	write_object(&c, "cached", size, 72, true);
	write_object(&c, "cold", size, 73, true);
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	void *mem;
	int buf = rc_alloc_buffer(&r, size, &mem);
	cr_assert_geq(buf, 0);
	timed_read(&r, buf, mem, "cached", size, 72);

	proxy_set("set latency-ms 3000\nreset-stats\n"); /* the PUT's answer */
	int h = write_object(&c, "ck.tmp", size, 71, true);
	wait_for(put_sent, "the PUT sent");
	cr_assert_eq(rc_rename(&c, (uint32_t)h, "ck"), 0);
	proxy_set("set latency-ms 0\n");
	wait_for(delete_sent, "the old name's DELETE sent");
	uint64_t hot = timed_read(&r, buf, mem, "cached", size, 72);
	uint64_t cold = timed_read(&r, buf, mem, "cold", size, 73);
	cr_assert_geq(proxy_counter("requests_active"), 1,
		      "the reads waited for the DELETE (%llu, %llu ms)",
		      (unsigned long long)hot, (unsigned long long)cold);
	cr_log_info("reads during the DELETE: cached %llu ms, cold %llu ms",
		    (unsigned long long)hot, (unsigned long long)cold);
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	cr_assert_eq(check_in_s3("ck", size, 71), 0);
	cr_assert_eq(head_in_s3("ck.tmp"), -ENOENT);
	cr_assert_eq(proxy_counter("delete"), 1);
	rc_detach(&r);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

static bool uploads_listed(void)
{
	return proxy_counter("list_uploads") >= 1;
}

/* The start-up clean-up lists the multipart uploads S3 holds, which
 * takes it 15 s: the daemon serves meanwhile (a write read back and in
 * S3) with that listing still held. */
Test(writeback, startup_cleanup_leaves_the_reactor_free, .fini = teardown,
     .timeout = 120)
{
	const char *args[] = {"--latency-ms", "0", "--uploads-delay-ms",
			      "15000", NULL};
	start_proxied(args, 3, NULL);
	wait_for(uploads_listed, "the start-up listing sent");
	struct rc_client c;
	attach(&c);
	const uint64_t size = 1 * MiB + 9;
	int h = write_object(&c, "early", size, 81, true);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	void *mem;
	int buf = rc_alloc_buffer(&c, size, &mem);
	cr_assert_geq(buf, 0);
	timed_read(&c, buf, mem, "early", size, 81);
	cr_assert_geq(proxy_counter("requests_active"), 1,
		      "the daemon served only once the listing ended");
	cr_assert_eq(check_in_s3("early", size, 81), 0);
	rc_detach(&c);
}

static bool renamed_by_the_daemon(void)
{
	return head_in_s3("left") == 0 && head_in_s3("left.tmp") == -ENOENT;
}

/* The client goes mid-copy: the copy (three parts) and the old name's
 * DELETE still happen, and the daemon frees the object after them. */
Test(writeback, rename_outlives_its_client, .fini = teardown, .timeout = 120)
{
	struct rc_client c;
	const uint64_t size = 12 * MiB;
	int h = start_with_uploaded(&c, "1000", 3, "left.tmp", size, 51);
	rename_submit(&c, (uint32_t)h, "left", 1);
	wait_for(copy_sent, "the copy sent");
	rc_detach(&c);
	wait_for(renamed_by_the_daemon, "the rename finished");
	cr_assert_eq(check_in_s3("left", size, 51), 0);
	cr_assert_eq(uploads_in_progress(), 0);
	fx_daemon_stop(&D);
}

/* S3 refuses every copy (503 past the retries): RENAME fails with EIO,
 * logged with the dataset and both keys; the object keeps its name, and
 * a RENAME once S3 is back copies from that name. */
Test(writeback, rename_failure_keeps_the_old_name, .fini = teardown,
     .timeout = 120)
{
	struct rc_client c;
	const uint64_t size = 12 * MiB;
	int h = start_with_uploaded(&c, "0", 1, "keep.tmp", size, 61);
	proxy_set("set faults 503\nset fault-rate 1\n");
	cr_assert_eq(rc_rename(&c, (uint32_t)h, "keep"), -EIO);
	proxy_set("set fault-rate 0\n");
	cr_assert_eq(head_in_s3("keep"), -ENOENT);
	cr_assert_eq(check_in_s3("keep.tmp", size, 61), 0);
	cr_assert_geq(fx_daemon_log_count(&D, "dataset ck: rename of s3://"), 1,
		      "no log line (log %s)", D.log_path);
	cr_assert_eq(rc_rename(&c, (uint32_t)h, "keep"), 0);
	cr_assert_eq(check_in_s3("keep", size, 61), 0);
	cr_assert_eq(head_in_s3("keep.tmp"), -ENOENT);
	cr_assert_eq(uploads_in_progress(), 0);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

/* Three saves of one key whose uploads overlap: the first two multipart
 * uploads whose Completes S3 answers late, the last a single PUT. S3
 * keeps whichever change of a key lands last, so they go one at a time
 * in the order they were committed and S3 ends with the newest (the
 * single PUT used to land first, and an older save's Complete over it). */
Test(writeback, saves_of_one_key_land_in_commit_order, .fini = teardown,
     .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const struct wobj saves[] = {{"latest", 11 * MiB + 7, 70},
				     {"latest", 6 * MiB + 1, 71},
				     {"latest", 100 * 1024 + 3, 72}};
	start_proxied(pass, 2, NULL);
	struct rc_client c;
	attach(&c);
	/* Long enough that the later saves are committed while the first
	 * one's Complete is held, however slow the machine. */
	proxy_set("set complete-delay-ms 2500\n");
	for (int i = 0; i < 3; i++)
		write_object(&c, saves[i].key, saves[i].size, saves[i].seed,
			     true);
	int r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, 0, "sync: %s", rc_strerror(r));
	rc_detach(&c);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_uploaded_total"), 3);
	cr_assert_eq(check_in_s3("latest", saves[2].size, saves[2].seed), 0,
		     "S3 does not hold the newest save");
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_key_waits_total"), 2,
		     "the newer saves did not wait for the older");
	fx_daemon_stop(&D);
	aws_assert_only(&saves[2], 1);
}

/* A RENAME onto a name another save is uploading to waits for that
 * upload, and its copy lands after it: S3 holds the renamed object, the
 * change asked for last (its copy used to land at once, and the other
 * save's Complete over it). A RENAME away from a name a newer save is
 * uploading to is -EBUSY: copied once that save landed, it would move
 * the newer bytes and delete them. */
Test(writeback, a_rename_waits_for_the_upload_to_its_new_name,
     .fini = teardown, .timeout = 120)
{
	const uint64_t size = 3 * MiB + 5, other = 11 * MiB + 7;
	struct rc_client c;
	int h = start_with_uploaded(&c, "0", 2, "tmp", size, 73);
	proxy_set("set complete-delay-ms 1500\n");
	write_object(&c, "final", other, 74, true);
	int r = rc_rename(&c, (uint32_t)h, "final");
	cr_assert_eq(r, 0, "rename onto a name being uploaded: %s",
		     rc_strerror(r));
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0); /* the other save's too */
	cr_assert_eq(check_in_s3("final", size, 73), 0,
		     "the renamed object is not under its new name");
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_key_waits_total"), 1,
		     "the copy did not wait for the upload");
	cr_assert_eq(head_in_s3("tmp"), -ENOENT);

	int z = write_object(&c, "z", size, 75, true);
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	write_object(&c, "z", other, 76, true);
	r = rc_rename(&c, (uint32_t)z, "z2");
	cr_assert_eq(r, -EBUSY, "rename away from a name being uploaded: %s",
		     rc_strerror(r));
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	rc_detach(&c);
	cr_assert_eq(head_in_s3("z2"), -ENOENT);
	fx_daemon_stop(&D);
	const struct wobj left[] = {{"final", size, 73}, {"z", other, 76}};
	aws_assert_only(left, 2);
}

/* SIGTERM while a save waits for an older save's upload of its key: the
 * daemon stops at once, the waiting save stays journaled, and the next
 * start, into an S3 outage, uploads it once S3 is back (the older one,
 * superseded, not): S3 ends with it. */
Test(writeback, a_save_waiting_for_its_key_survives_a_stop,
     .fini = teardown, .timeout = 120)
{
	const char *pass[] = {"--latency-ms", "0", NULL};
	const struct wobj older = {"latest", 11 * MiB + 7, 77},
			  newer = {"latest", 2 * MiB + 3, 78};
	start_proxied(pass, 2, NULL);
	struct rc_client c;
	attach(&c);
	/* The older upload is held at its first request (Create), which a
	 * stop abandons once answered. Not at its Complete: a stop waits
	 * for a Complete in flight (it may land), and the older would land
	 * when the digests are fast enough to get there first. */
	proxy_set("set latency-ms 3000\n");
	write_object(&c, older.key, older.size, older.seed, true);
	write_object(&c, newer.key, newer.size, newer.seed, true);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_key_waits_total"), 1);
	rc_detach(&c);
	proxy_set("set latency-ms 0\n"); /* the held Create stays held */
	fx_daemon_stop(&D);
	cr_assert(fx_daemon_log_contains(&D, "stopped by shutdown: journaled"),
		  "log %s", D.log_path);
	proxy_set("reset-stats\nset outage-ms 600000\n");
	restart_daemon();
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_superseded_total"), 1);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_s3_reachable", 0,
				  60000), 0, "the restart never met the outage");
	proxy_set("set outage-ms 0\n");
	cr_assert_eq(fx_wait_stat(D.socket_path,
				  "ringcache_writeback_uploaded_total", 1,
				  30000), 1, "the newer save was not uploaded");
	cr_assert_eq(check_in_s3("latest", newer.size, newer.seed), 0);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
	proxy_on = false;
	aws_assert_only(&newer, 1);
}

/* A RENAME of an uploaded object whose key a later save has replaced in
 * S3 since: the copy is conditional on the object's own ETag
 * (x-amz-copy-source-if-match), so the RENAME fails -ESTALE, S3 keeps the
 * later save under the key and nothing lands under the new name (the
 * RENAME used to copy the later save's bytes to the new name and delete
 * them from the key: a save acknowledged and synced, gone). By CopyObject
 * and by UploadPartCopy; the later saves themselves rename as before. */
Test(writeback, a_rename_never_moves_a_later_save_of_its_key,
     .fini = teardown, .timeout = 120)
{
	const uint64_t small = 3 * MiB + 5, big = 11 * MiB + 7;
	struct rc_client c;
	int old_small = start_with_uploaded(&c, "0", 2, "k", small, 84);
	int new_small = write_object(&c, "k", small + 1, 85, true);
	int old_big = write_object(&c, "b", big, 86, true);
	int new_big = write_object(&c, "b", big + 1, 87, true);
	cr_assert_eq(rc_sync(&c, RC_SYNC_ALL), 0);
	int r = rc_rename(&c, (uint32_t)old_small, "k.old");
	cr_assert_eq(r, -ESTALE, "CopyObject of a replaced object: %s",
		     rc_strerror(r));
	r = rc_rename(&c, (uint32_t)old_big, "b.old");
	cr_assert_eq(r, -ESTALE, "UploadPartCopy of a replaced object: %s",
		     rc_strerror(r));
	cr_assert_eq(check_in_s3("k", small + 1, 85), 0);
	cr_assert_eq(check_in_s3("b", big + 1, 87), 0);
	cr_assert_eq(head_in_s3("k.old"), -ENOENT);
	cr_assert_eq(head_in_s3("b.old"), -ENOENT);
	cr_assert(fx_daemon_log_contains(&D, "another object replaced it"),
		  "the failure does not name its cause (log %s)", D.log_path);
	cr_assert_eq(rc_rename(&c, (uint32_t)new_small, "k.new"), 0);
	cr_assert_eq(rc_rename(&c, (uint32_t)new_big, "b.new"), 0);
	rc_detach(&c);
	fx_daemon_stop(&D);
	const struct wobj left[] = {{"b.new", big + 1, 87},
				    {"k.new", small + 1, 85}};
	aws_assert_only(left, 2);
}
