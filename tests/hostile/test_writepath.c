/* test_writepath.c - the write path under attack by an unprivileged uid
 * (nobody) that may write a dataset (write_uids = *): keys that are too
 * long only with the dataset's prefix are refused at WRITE_OPEN and RENAME
 * (-ENAMETOOLONG) instead of being acknowledged and never uploading; a
 * sparse WRITE far out is refused (-EFBIG) instead of uploading that many
 * zeros; and after a journal's worth of such attempts the journal still
 * rewinds: another writer commits and its bytes reach S3 (read back with
 * awscli). On an overwrite = false dataset root's objects survive a
 * RENAME onto them (before and after the upload, CopyObject and multipart
 * copy) and the same bytes written back (not taken for a retry of ours),
 * and the bytes of a write S3 will refuse are never served meanwhile; a
 * RENAME racing another writer or batched with its COMMIT replaces
 * nothing. The tier and journal files are owner-only even when they
 * existed before. Saving a key in a loop delays another uid's save of it
 * by one turn, never for ever, and S3 ends with the last save. A uid's
 * failed uploads fail its own SYNC of all objects, never another's. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)
#define JOURNAL_MIB 16u
/* Twice the journal: it must have rewound at least once. */
#define ATTEMPTS (2u * JOURNAL_MIB)

static struct fx_daemon D;
static char scratch[128];
static const char *more_extra = ""; /* more [daemon] lines for start() */
static const char *more_sections = ""; /* more datasets for start() */
static struct fx_proxy P;              /* pid 0: none */

static void teardown(void)
{
	fx_daemon_kill(&D);
	fx_proxy_kill(&P);
}

/* PREFIX/scratch/SUB: a dataset's bucket prefix. */
static const char *bucket_prefix(const char *sub)
{
	static char p[2][400];
	static int i;
	i ^= 1;
	snprintf(p[i], sizeof(p[i]), "%s%s/%s", fx_env()->prefix, scratch, sub);
	return p[i];
}

/* "ck": writable by everyone, durability local, 5 MiB parts (so at most
 * 50 GB per object); "tiny": the same with max_object_size = 1M; "keep":
 * the same with overwrite = false, copies above 5 MiB multipart. */
static void start(void)
{
	static char sections[4096], extra[512], sockdir[64];
	char sub[200], ck[600], tiny[600], keep[600];
	fx_unique(scratch, sizeof(scratch), "hwp");
	snprintf(sub, sizeof(sub), "%s/ck/", scratch);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, "allow_uids = *");
	snprintf(sub, sizeof(sub), "%s/tiny/", scratch);
	fx_dataset_section(tiny, sizeof(tiny), "tiny", sub, "allow_uids = *");
	snprintf(sub, sizeof(sub), "%s/keep/", scratch);
	fx_dataset_section(keep, sizeof(keep), "keep", sub, "allow_uids = *");
	snprintf(sections, sizeof(sections),
		 "%swritable = true\nwrite_uids = *\ndurability = local\n"
		 "part_size = 5M\n"
		 "%swritable = true\nwrite_uids = *\ndurability = local\n"
		 "part_size = 5M\nmax_object_size = 1M\n"
		 "%swritable = true\nwrite_uids = *\ndurability = local\n"
		 "part_size = 5M\ncopy_threshold = 5M\noverwrite = false\n%s",
		 ck, tiny, keep, more_sections);
	snprintf(extra, sizeof(extra), "journal = %s/journal\n"
		 "journal_size = %uM\n%s", fx_tmpdir(), JOURNAL_MIB,
		 more_extra);
	fx_daemon_init(&D);
	D.daemon_extra = extra;
	if (P.pid > 0)
		D.s3_endpoint = P.endpoint;
	snprintf(sockdir, sizeof(sockdir), "/tmp/rc-hwp-XXXXXX");
	cr_assert_not_null(mkdtemp(sockdir));
	chmod(sockdir, 0755);
	D.socket_dir = sockdir;
	fx_daemon_start(&D, sections);
}

/* A key of n 'k's. */
static char *key_of(size_t n)
{
	char *k = malloc(n + 1);
	if (k) {
		memset(k, 'k', n);
		k[n] = 0;
	}
	return k;
}

/* An attacker's session: attached, one dataset, one buffer. */
struct nobody {
	struct rc_client c;
	int ds, buf;
	void *mem;
};

/* Attaches at socket and takes dataset and a buffer of size bytes: 0, or
 * the exit code of the step that failed (2: attach, 3: dataset or
 * buffer), as every attacker below numbers them. */
static int nobody_attach(struct nobody *n, const char *socket,
			 const char *dataset, size_t size)
{
	if (rc_attach(&n->c, socket, NULL))
		return 2;
	n->ds = rc_dataset(&n->c, dataset);
	n->buf = rc_alloc_buffer(&n->c, size, &n->mem);
	return n->ds < 0 || n->buf < 0 ? 3 : 0;
}

struct attack {
	const char *socket;
	size_t fit;       /* the longest key that fits under ck's prefix */
	unsigned seed;    /* of the last object the attacker renames to "evil" */
};

/* Exit codes say which step went wrong (0: every attack refused). */
static int attack(void *arg)
{
	const struct attack *a = arg;
	struct nobody n;
	int step = nobody_attach(&n, a->socket, "ck", MiB);
	if (step)
		return step;
	int tiny = rc_dataset(&n.c, "tiny");
	char *too_long = key_of(a->fit + 1), *fits = key_of(a->fit);
	if (tiny < 0 || !too_long || !fits)
		return 3;
	if (rc_write_open(&n.c, n.ds, too_long) != -ENAMETOOLONG)
		return 4;
	int h = rc_write_open(&n.c, n.ds, fits);
	if (h < 0 || rc_abort(&n.c, (uint32_t)h) != 0)
		return 5;
	for (unsigned i = 0; i < ATTEMPTS; i++) {
		char tmp[32];
		snprintf(tmp, sizeof(tmp), "evil.tmp-%u", i);
		if ((h = rc_write_open(&n.c, n.ds, tmp)) < 0)
			return 6;
		fx_fill_pattern(n.mem, MiB, i);
		if (rc_write(&n.c, (uint32_t)h, 0, MiB, (uint32_t)n.buf, 0) !=
		    MiB)
			return 7;
		if (rc_rename(&n.c, (uint32_t)h, too_long) != -ENAMETOOLONG)
			return 8;
		/* 5 bytes at 1 TiB: past what 10000 parts of 5 MiB hold. */
		if (rc_write(&n.c, (uint32_t)h, 1ull << 40, 5,
			     (uint32_t)n.buf, 0) != -EFBIG)
			return 9;
		if (rc_commit(&n.c, (uint32_t)h) != 0)
			return 10;
		if (rc_rename(&n.c, (uint32_t)h, "evil") != 0)
			return 11;
		if (rc_rename(&n.c, (uint32_t)h, too_long) != -ENAMETOOLONG)
			return 12;
		if (rc_sync(&n.c, (uint32_t)h) != 0 ||
		    rc_close(&n.c, (uint32_t)h))
			return 13;
	}
	/* tiny: max_object_size = 1M, a sparse write just past it. */
	if ((h = rc_write_open(&n.c, tiny, "sparse")) < 0)
		return 14;
	if (rc_write(&n.c, (uint32_t)h, MiB - 2, 5, (uint32_t)n.buf, 0) !=
	    -EFBIG)
		return 15;
	if (rc_write(&n.c, (uint32_t)h, UINT64_MAX - 2, 5, (uint32_t)n.buf,
		     0) != -EFBIG)
		return 16;
	if (rc_abort(&n.c, (uint32_t)h) != 0)
		return 17;
	free(too_long);
	free(fits);
	rc_detach(&n.c);
	return 0;
}

Test(writepath, long_keys_and_far_writes_refused_the_journal_goes_on,
     .fini = teardown, .timeout = 300)
{
	start();
	struct attack a = {.socket = D.socket_path,
			   .fit = RC_MAX_KEY - strlen(bucket_prefix("ck/")),
			   .seed = ATTEMPTS - 1};
	int st = fx_as_nobody(attack, &a);
	cr_assert_eq(st, 0, "the attack was not refused at step %d", st);

	/* Another writer: the journal took twice its size from the attacker
	 * and still takes this. */
	struct rc_client c;
	void *mem;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ck");
	int buf = rc_alloc_buffer(&c, 4 * MiB, &mem);
	cr_assert_geq(buf, 0);
	const size_t vsize = 3 * MiB + 5;
	unsigned char *victim = fx_pattern(vsize, 4242);
	memcpy(mem, victim, vsize);
	int h = rc_write_open(&c, ds, "victim.tmp");
	cr_assert_geq(h, 0, "write_open: %s", rc_strerror(h));
	cr_assert_eq(rc_write(&c, (uint32_t)h, 0, vsize, (uint32_t)buf, 0),
		     (ssize_t)vsize);
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	cr_assert_eq(rc_rename(&c, (uint32_t)h, "victim"), 0);
	int r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, 0, "sync: %s", rc_strerror(r));
	rc_detach(&c);

	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_rejected_total"), 0);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_uploaded_total"),
		     ATTEMPTS + 1);
	char evil[400], vkey[400];
	unsigned char *last = fx_pattern(MiB, a.seed);
	snprintf(evil, sizeof(evil), "%sevil", bucket_prefix("ck/"));
	snprintf(vkey, sizeof(vkey), "%svictim", bucket_prefix("ck/"));
	/* Exactly these: no temporary name, no over-long key, nothing of
	 * the sparse writes, no multipart upload. */
	struct fx_s3_object objs[] = {{evil, last, MiB},
				      {vkey, victim, vsize}};
	fx_aws_assert_objects(bucket_prefix(""), objs, 2, 5 * MiB);
	free(last);
	free(victim);
	fx_daemon_stop(&D);
}

/* ---- one open byte does not block the journal -------------------------- */

struct holder {
	const char *socket;
	int ready[2], go[2];
};

#define HELD_TAIL (3 * MiB)

/* nobody writes 1 byte to a new object and keeps it open while root
 * checkpoints more than the journal holds; then it writes on, commits,
 * and its bytes (relogged: the rewinds dropped its first one) must be
 * what S3 gets. Exit codes say which step failed. */
static int hold_one_byte(void *arg)
{
	struct holder *hd = arg;
	struct nobody n;
	char ch = 'R';
	close(hd->ready[0]);
	close(hd->go[1]);
	int step = nobody_attach(&n, hd->socket, "ck", 4 * MiB);
	if (step)
		return step;
	int h = rc_write_open(&n.c, n.ds, "held");
	if (h < 0)
		return 3;
	fx_fill_pattern(n.mem, 1 + HELD_TAIL, 777);
	if (rc_write(&n.c, (uint32_t)h, 0, 1, (uint32_t)n.buf, 0) != 1)
		return 4;
	if (write(hd->ready[1], &ch, 1) != 1)
		return 5;
	while (read(hd->go[0], &ch, 1) < 0 && errno == EINTR)
		;
	if (rc_write(&n.c, (uint32_t)h, 1, HELD_TAIL, (uint32_t)n.buf, 1) !=
	    (ssize_t)HELD_TAIL)
		return 6;
	if (rc_commit(&n.c, (uint32_t)h) != 0)
		return 7;
	if (rc_sync(&n.c, (uint32_t)h) != 0 || rc_close(&n.c, (uint32_t)h))
		return 8;
	rc_detach(&n.c);
	return 0;
}

#define CKPT_SIZE (6 * MiB + 7)
#define CKPTS 5 /* 30 MiB through a 16 MiB journal */

Test(writepath, an_open_byte_does_not_block_the_journal, .fini = teardown,
     .timeout = 300)
{
	start();
	struct holder hd = {.socket = D.socket_path};
	cr_assert_eq(pipe(hd.ready), 0);
	cr_assert_eq(pipe(hd.go), 0);
	pid_t pid = fx_as_nobody_start(hold_one_byte, &hd);
	close(hd.ready[1]); /* a holder that dies is EOF, not a hang */
	close(hd.go[0]);
	char ch = 0;
	if (read(hd.ready[0], &ch, 1) != 1) {
		int st = fx_as_nobody_wait(pid);
		cr_assert_fail("the holder failed at step %d", st);
	}

	/* Root's checkpoints, each written 1 MiB at a time, committed and
	 * synced: on main the fourth WRITE of the third got -ENOSPC. */
	struct rc_client c;
	void *mem;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ck");
	int buf = rc_alloc_buffer(&c, 8 * MiB, &mem);
	cr_assert_geq(buf, 0);
	unsigned char *ckpt[CKPTS];
	char keys[CKPTS][400];
	struct fx_s3_object objs[CKPTS + 1];
	for (unsigned i = 0; i < CKPTS; i++) {
		char key[32];
		snprintf(key, sizeof(key), "ckpt-%u", i);
		ckpt[i] = fx_pattern(CKPT_SIZE, 100 + i);
		memcpy(mem, ckpt[i], CKPT_SIZE);
		int h = rc_write_open(&c, ds, key);
		cr_assert_geq(h, 0, "write_open %s: %s", key, rc_strerror(h));
		for (uint64_t off = 0; off < CKPT_SIZE; off += MiB) {
			uint64_t n = CKPT_SIZE - off < MiB ? CKPT_SIZE - off
							   : MiB;
			ssize_t r = rc_write(&c, (uint32_t)h, off, n,
					     (uint32_t)buf, off);
			cr_assert_eq(r, (ssize_t)n, "%s: WRITE at %llu: %s",
				     key, (unsigned long long)off,
				     rc_strerror((int)r));
		}
		int r = rc_commit(&c, (uint32_t)h);
		cr_assert_eq(r, 0, "%s: COMMIT: %s", key, rc_strerror(r));
		r = rc_sync(&c, (uint32_t)h);
		cr_assert_eq(r, 0, "%s: SYNC: %s", key, rc_strerror(r));
		cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
		snprintf(keys[i], sizeof(keys[i]), "%s%s",
			 bucket_prefix("ck/"), key);
		objs[i] = (struct fx_s3_object){keys[i], ckpt[i], CKPT_SIZE};
	}
	rc_detach(&c);
	int64_t relogs = fx_stat_value(D.socket_path,
				       "ringcache_writeback_relogs_total");

	/* The holder goes on: its byte was dropped by the rewinds and is
	 * journaled again at its COMMIT. */
	cr_assert_eq(write(hd.go[1], &ch, 1), 1);
	int st = fx_as_nobody_wait(pid);
	cr_assert_eq(st, 0, "the holder failed at step %d", st);
	cr_assert_gt(fx_stat_value(D.socket_path,
				   "ringcache_writeback_relogs_total"), relogs,
		     "the held object's COMMIT journaled its bytes again");
	cr_assert_geq(relogs, 1, "root's own open objects were rewound too");
	char held[400];
	snprintf(held, sizeof(held), "%sheld", bucket_prefix("ck/"));
	unsigned char *hbytes = fx_pattern(1 + HELD_TAIL, 777);
	objs[CKPTS] = (struct fx_s3_object){held, hbytes, 1 + HELD_TAIL};
	fx_aws_assert_objects(bucket_prefix(""), objs, CKPTS + 1, 5 * MiB);
	for (unsigned i = 0; i < CKPTS; i++)
		free(ckpt[i]);
	free(hbytes);
	fx_daemon_stop(&D);
}

/* ---- open objects cannot hold every writer's staging ------------------- */

#define STAGING_MIB 16u   /* staging_memory; a chunk is 4 MiB */

/* nobody opens objects and writes 1 byte to each, holding a 4 MiB
 * staging chunk per byte: past its uid's share (staging_memory/2) the
 * WRITE is EDQUOT; the objects stay open while root writes. */
static int hold_staging(void *arg)
{
	struct holder *hd = arg;
	struct nobody s;
	char ch = 'R';
	int n = 0, h, r = 0;
	close(hd->ready[0]);
	close(hd->go[1]);
	int step = nobody_attach(&s, hd->socket, "ck", MiB);
	if (step)
		return step;
	for (; n < 8; n++) {
		char key[32];
		snprintf(key, sizeof(key), "hoard-%d", n);
		if ((h = rc_write_open(&s.c, s.ds, key)) < 0)
			return 4;
		r = (int)rc_write(&s.c, (uint32_t)h, 0, 1, (uint32_t)s.buf, 0);
		if (r != 1)
			break;
	}
	if (r != -EDQUOT || n != STAGING_MIB / 2 / 4)
		return 5; /* 2 chunks of 4 MiB, then EDQUOT */
	if (write(hd->ready[1], &ch, 1) != 1)
		return 6;
	while (read(hd->go[0], &ch, 1) < 0 && errno == EINTR)
		;
	rc_detach(&s.c); /* aborts them: the share comes back */
	return 0;
}

Test(writepath, open_objects_cannot_hold_all_staging, .fini = teardown,
     .timeout = 300)
{
	more_extra = "staging_memory = 16M\n";
	start();
	more_extra = "";
	struct holder hd = {.socket = D.socket_path};
	cr_assert_eq(pipe(hd.ready), 0);
	cr_assert_eq(pipe(hd.go), 0);
	pid_t pid = fx_as_nobody_start(hold_staging, &hd);
	close(hd.ready[1]);
	close(hd.go[0]);
	char ch = 0;
	if (read(hd.ready[0], &ch, 1) != 1) {
		int st = fx_as_nobody_wait(pid);
		cr_assert_fail("the hoarder failed at step %d", st);
	}
	cr_assert_geq(fx_stat_value(D.socket_path,
		"ringcache_refused_total{reason=\"staged_per_uid\"}"), 1);
	/* Root writes 6 MiB + 3 (2 chunks) while nobody holds its share. */
	struct rc_client c;
	void *mem;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ck");
	int buf = rc_alloc_buffer(&c, 8 * MiB, &mem);
	cr_assert_geq(buf, 0);
	const size_t size = 6 * MiB + 3;
	unsigned char *bytes = fx_pattern(size, 4343);
	memcpy(mem, bytes, size);
	int h = rc_write_open(&c, ds, "root-ckpt");
	cr_assert_geq(h, 0);
	ssize_t w = rc_write(&c, (uint32_t)h, 0, size, (uint32_t)buf, 0);
	cr_assert_eq(w, (ssize_t)size, "root's WRITE: %s", rc_strerror((int)w));
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	rc_detach(&c);
	cr_assert_eq(write(hd.go[1], &ch, 1), 1);
	int st = fx_as_nobody_wait(pid);
	cr_assert_eq(st, 0, "the hoarder failed at step %d", st);
	char key[400];
	snprintf(key, sizeof(key), "%sroot-ckpt", bucket_prefix("ck/"));
	struct fx_s3_object objs[] = {{key, bytes, size}};
	fx_aws_assert_objects(bucket_prefix(""), objs, 1, 5 * MiB);
	free(bytes);
	fx_daemon_stop(&D);
}

/* ---- renaming in a loop cannot keep an object from S3 ------------------ */

#define LOOPED_SIZE (12 * MiB + 1) /* multipart: 5 MiB parts */

/* nobody commits a multipart object and renames it as fast as it can:
 * each RENAME restarted the upload and took a journal record, so the
 * object, committed, never reached S3 and the journal could never
 * rewind. After 8 the RENAME is EBUSY, and SYNC lands the object under
 * its last name. */
static int rename_loop(void *arg)
{
	const struct attack *a = arg;
	struct nobody s;
	int step = nobody_attach(&s, a->socket, "ck", 16 * MiB);
	if (step)
		return step;
	int h = rc_write_open(&s.c, s.ds, "loop-0");
	if (h < 0)
		return 3;
	fx_fill_pattern(s.mem, LOOPED_SIZE, 999);
	if (rc_write(&s.c, (uint32_t)h, 0, LOOPED_SIZE, (uint32_t)s.buf, 0) !=
	    (ssize_t)LOOPED_SIZE || rc_commit(&s.c, (uint32_t)h) != 0)
		return 4;
	int r = 0, n = 0;
	for (; n < 200; n++) {
		char key[32];
		snprintf(key, sizeof(key), "loop-%d", n + 1);
		if ((r = rc_rename(&s.c, (uint32_t)h, key)) != 0)
			break;
	}
	if (r != -EBUSY || n != 8)
		return 5;
	if (rc_sync(&s.c, (uint32_t)h) != 0 || rc_close(&s.c, (uint32_t)h))
		return 6;
	rc_detach(&s.c);
	return 0;
}

Test(writepath, renames_cannot_keep_an_object_from_s3, .fini = teardown,
     .timeout = 300)
{
	/* The upload that COMMIT starts must still run through the loop:
	 * one that ended first makes the next RENAME a copy in S3 (EBUSY
	 * while it runs), which a loaded CI machine once did (2026-11-30:
	 * step 5 after a few renames). Its Complete is held 3 s. */
	const char *hold[] = {"--latency-ms", "0", "--bw-conn", "0",
			      "--complete-delay-ms", "3000", NULL};
	fx_proxy_start(&P, hold);
	start();
	struct attack a = {.socket = D.socket_path};
	int st = fx_as_nobody(rename_loop, &a);
	cr_assert_eq(st, 0, "the rename loop was not stopped (step %d)", st);
	char key[400];
	snprintf(key, sizeof(key), "%sloop-8", bucket_prefix("ck/"));
	unsigned char *bytes = fx_pattern(LOOPED_SIZE, 999);
	struct fx_s3_object objs[] = {{key, bytes, LOOPED_SIZE}};
	/* Only the last name: no earlier one, no multipart upload left. */
	fx_aws_assert_objects(bucket_prefix(""), objs, 1, 5 * MiB);
	free(bytes);
	fx_daemon_stop(&D);
}

/* ---- overwrite = false: RENAME and "our own retry" ------------------------ */

#define SMALL (MiB + 7)       /* one PUT, renamed by CopyObject */
#define BIG (6 * MiB + 3)     /* multipart, renamed by UploadPartCopy */
#define SEED_SMALL 101u
#define SEED_BIG 102u

/* Root's object at key of "keep", in S3 when this returns. */
static void root_writes(const char *key, size_t len, unsigned seed)
{
	struct rc_client c;
	void *mem;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "keep");
	int buf = rc_alloc_buffer(&c, len, &mem);
	cr_assert(ds >= 0 && buf >= 0);
	fx_fill_pattern(mem, len, seed);
	int h = rc_write_open(&c, ds, key);
	cr_assert_geq(h, 0, "write_open %s: %s", key, rc_strerror(h));
	cr_assert_eq(rc_write(&c, (uint32_t)h, 0, len, (uint32_t)buf, 0),
		     (ssize_t)len);
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	int r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, 0, "sync %s: %s", key, rc_strerror(r));
	rc_close(&c, (uint32_t)h);
	rc_detach(&c);
}

/* An object of nobody's at key of "keep": WRITE_OPEN, one WRITE of len
 * bytes from buf; committed unless rename_first is set, in which case it
 * is renamed to rename_first before COMMIT. The handle, or -step. */
static int nobody_object(struct nobody *n, const char *key, size_t len,
			 const char *rename_first, int step)
{
	int h = rc_write_open(&n->c, n->ds, key);
	if (h < 0 || rc_write(&n->c, (uint32_t)h, 0, len, (uint32_t)n->buf,
			      0) != (ssize_t)len)
		return -step;
	if (rename_first && rc_rename(&n->c, (uint32_t)h, rename_first) != 0)
		return -step - 1;
	if (rc_commit(&n->c, (uint32_t)h) != 0)
		return -step - 2;
	return h;
}

/* Its own object at key, len bytes of seed's pattern, in S3 (synced):
 * the handle, or -step .. -(step + 3) for the step that failed. */
static int nobody_in_s3(struct nobody *n, const char *key, size_t len,
			unsigned seed, int step)
{
	fx_fill_pattern(n->mem, len, seed);
	int h = nobody_object(n, key, len, NULL, step);
	if (h >= 0 && rc_sync(&n->c, (uint32_t)h) != 0)
		return -step - 3;
	return h;
}

/* Through the daemon, the bytes of key: len of them, equal to seed's
 * pattern, and never a staged version ("ringcache-pending-N"). 0 if so. */
static int reads_exactly(struct nobody *n, const char *key, size_t len,
			 unsigned seed)
{
	struct rc_stat st;
	int h = rc_open(&n->c, n->ds, key, &st);
	if (h < 0 || st.size != len || strstr(st.etag, "ringcache-pending"))
		return 1;
	ssize_t got = rc_read_into(&n->c, (uint32_t)h, 0, len,
				   (uint32_t)n->buf, 0);
	rc_close(&n->c, (uint32_t)h);
	unsigned char *want = fx_pattern(len, seed);
	int bad = got != (ssize_t)len || !want ||
		  memcmp(n->mem, want, len) != 0;
	free(want);
	return bad;
}

/* Exit codes say which step got through (0: every attack refused). */
static int attack_overwrite(void *arg)
{
	(void)arg;
	struct nobody n;
	int step = nobody_attach(&n, D.socket_path, "keep", 8 * MiB);
	if (step)
		return step;
	/* 1. Its own objects, in S3, renamed onto root's: CopyObject and a
	 * multipart copy. Refused; they keep their names; renaming one onto
	 * its own name changes nothing. */
	int h = nobody_in_s3(&n, "a.tmp", SMALL, 201, 10);
	if (h < 0)
		return -h;
	if (rc_rename(&n.c, (uint32_t)h, "small") != -EEXIST)
		return 14;
	if (rc_rename(&n.c, (uint32_t)h, "a.tmp") != 0)
		return 15;
	h = nobody_in_s3(&n, "b.tmp", BIG, 202, 20);
	if (h < 0)
		return -h;
	if (rc_rename(&n.c, (uint32_t)h, "big") != -EEXIST)
		return 24;
	/* 2. Renamed onto root's before the upload: the upload is a write
	 * to that key, refused at SYNC; nothing lands under either name. */
	fx_fill_pattern(n.mem, SMALL, 203);
	h = nobody_object(&n, "c.tmp", SMALL, "small", 30);
	if (h < 0)
		return -h;
	if (rc_sync(&n.c, (uint32_t)h) != -EEXIST)
		return 33;
	fx_fill_pattern(n.mem, BIG, 204);
	h = nobody_object(&n, "d.tmp", BIG, "big", 40);
	if (h < 0)
		return -h;
	if (rc_sync(&n.c, (uint32_t)h) != -EEXIST)
		return 43;
	rc_detach(&n.c);
	return 0;
}

static int attack_same_bytes(void *arg)
{
	(void)arg;
	struct nobody n;
	int step = nobody_attach(&n, D.socket_path, "keep", 8 * MiB);
	if (step)
		return step;
	/* Root's bytes, read and written back to root's keys: S3's 412
	 * (PUT) or the HEAD before Complete find an object without this
	 * writer's token: not a retry of its own, so no uploaded handle
	 * whose RENAME would move root's object away. */
	const char *keys[] = {"small", "big"};
	const size_t lens[] = {SMALL, BIG};
	const unsigned seeds[] = {SEED_SMALL, SEED_BIG};
	for (int i = 0; i < 2; i++) {
		if (reads_exactly(&n, keys[i], lens[i], seeds[i]))
			return 50 + 10 * i;
		int h = nobody_object(&n, keys[i], lens[i], NULL, 51 + 10 * i);
		if (h < 0)
			return -h;
		if (rc_sync(&n.c, (uint32_t)h) != -EEXIST)
			return 54 + 10 * i;
		if (rc_rename(&n.c, (uint32_t)h, "stolen") != -EINVAL)
			return 55 + 10 * i;
	}
	rc_detach(&n.c);
	return 0;
}

/* Root's small and big objects are exactly in S3, with what else is
 * listed (n of the others, nobody's a.tmp and b.tmp). */
static void assert_root_objects_and(size_t n)
{
	char k[4][400];
	unsigned char *small = fx_pattern(SMALL, SEED_SMALL);
	unsigned char *big = fx_pattern(BIG, SEED_BIG);
	unsigned char *a = fx_pattern(SMALL, 201), *b = fx_pattern(BIG, 202);
	snprintf(k[0], sizeof(k[0]), "%ssmall", bucket_prefix("keep/"));
	snprintf(k[1], sizeof(k[1]), "%sbig", bucket_prefix("keep/"));
	snprintf(k[2], sizeof(k[2]), "%sa.tmp", bucket_prefix("keep/"));
	snprintf(k[3], sizeof(k[3]), "%sb.tmp", bucket_prefix("keep/"));
	/* Root's bytes under root's keys; nobody's under its own; nothing
	 * else (no c.tmp, d.tmp, stolen; no multipart upload left). */
	struct fx_s3_object objs[] = {{k[0], small, SMALL}, {k[1], big, BIG},
				      {k[2], a, SMALL}, {k[3], b, BIG}};
	fx_aws_assert_objects(bucket_prefix("keep/"), objs, 2 + n, 5 * MiB);
	free(small);
	free(big);
	free(a);
	free(b);
}

/* Hole 1 of issue 20: RENAME onto a protected key returned 0 and S3 held
 * the attacker's bytes (the copy carried no condition). */
Test(writepath, overwrite_false_holds_against_rename, .fini = teardown,
     .timeout = 300)
{
	start();
	root_writes("small", SMALL, SEED_SMALL);
	root_writes("big", BIG, SEED_BIG);
	int st = fx_as_nobody(attack_overwrite, NULL);
	cr_assert_eq(st, 0, "the attack got through at step %d", st);
	/* Refused uploads: c.tmp and d.tmp (renamed before COMMIT). */
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_rejected_total"), 2);
	cr_assert(fx_daemon_log_contains(&D, "overwrite = false"));
	assert_root_objects_and(2);
	fx_daemon_stop(&D);
}

/* Hole 2: root's bytes written back were taken for the writer's own retry
 * (same ETag), which then held an uploaded handle on root's object. */
Test(writepath, same_bytes_are_not_our_own_retry, .fini = teardown,
     .timeout = 300)
{
	start();
	root_writes("small", SMALL, SEED_SMALL);
	root_writes("big", BIG, SEED_BIG);
	int st = fx_as_nobody(attack_same_bytes, NULL);
	cr_assert_eq(st, 0, "the attack got through at step %d", st);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_rejected_total"), 2);
	assert_root_objects_and(0);
	fx_daemon_stop(&D);
}

/* ---- a write S3 may still refuse is not served --------------------------- */

#define SERVED (2 * MiB)
#define REFUSED (12 * MiB) /* multipart (3 parts): its upload takes a while */

/* Nobody commits 12 MiB onto root's key; until its SYNC says -EEXIST,
 * another session of its own and the writing session read S3's object. */
static int attack_pending(void *arg)
{
	(void)arg;
	struct nobody w, r;
	int step = nobody_attach(&w, D.socket_path, "keep", REFUSED);
	if (!step)
		step = nobody_attach(&r, D.socket_path, "keep", SERVED);
	if (step)
		return step;
	fx_fill_pattern(w.mem, REFUSED, 302);
	int h = nobody_object(&w, "served", REFUSED, NULL, 4);
	if (h < 0)
		return -h;
	if (reads_exactly(&r, "served", SERVED, 301))
		return 10; /* another session was served the staged bytes */
	if (reads_exactly(&w, "served", SERVED, 301))
		return 11; /* so was the writer's */
	if (rc_sync(&w.c, (uint32_t)h) != -EEXIST)
		return 12;
	if (reads_exactly(&r, "served", SERVED, 301))
		return 13;
	rc_detach(&r.c);
	rc_detach(&w.c);
	return 0;
}

Test(writepath, bytes_s3_may_refuse_are_not_served, .fini = teardown,
     .timeout = 300)
{
	start();
	root_writes("served", SERVED, 301);
	int st = fx_as_nobody(attack_pending, NULL);
	cr_assert_eq(st, 0, "pending bytes were served at step %d", st);
	char k[400];
	unsigned char *served = fx_pattern(SERVED, 301);
	snprintf(k, sizeof(k), "%sserved", bucket_prefix("keep/"));
	struct fx_s3_object objs[] = {{k, served, SERVED}};
	fx_aws_assert_objects(bucket_prefix("keep/"), objs, 1, 5 * MiB);
	free(served);
	fx_daemon_stop(&D);
}

/* ---- the tier and journal files are owner-only --------------------------- */

static int read_as_other(void *arg)
{
	const char *const *paths = arg;
	for (int i = 0; paths[i]; i++) {
		int fd = open(paths[i], O_RDONLY);
		if (fd >= 0)
			return 10 + i; /* it could read cached bytes */
		if (errno != EACCES)
			return 20 + i;
	}
	return 0;
}

static void precreate(const char *path, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	cr_assert(fd >= 0, "create %s: %s", path, strerror(errno));
	cr_assert_eq(fchmod(fd, mode), 0); /* past the umask */
	close(fd);
}

/* Pre-created 0644 (an installer, a drop-in's ExecStartPre): the daemon
 * makes them 0600 and says so; another uid's journal is refused. */
Test(writepath, precreated_tier_and_journal_are_made_owner_only,
     .fini = teardown, .timeout = 300)
{
	static char extra[1024];
	char dir[300], journal[320], tier[320];
	snprintf(dir, sizeof(dir), "%s", fx_tmpdir());
	snprintf(journal, sizeof(journal), "%s/journal", dir);
	snprintf(tier, sizeof(tier), "%s/tier", dir);
	precreate(journal, 0644);
	precreate(tier, 0644);
	snprintf(extra, sizeof(extra), "journal = %s\njournal_size = 16M\n"
		 "tier_path = %s\ntier_size = 64M\n", journal, tier);
	fx_daemon_init(&D);
	D.daemon_extra = extra;
	fx_daemon_start(&D, NULL);
	struct stat sb;
	cr_assert_eq(stat(journal, &sb), 0);
	cr_assert_eq(sb.st_mode & 07777, 0600, "journal mode %o",
		     sb.st_mode & 07777);
	cr_assert_eq(stat(tier, &sb), 0);
	cr_assert_eq(sb.st_mode & 07777, 0600, "tier mode %o",
		     sb.st_mode & 07777);
	cr_assert(fx_daemon_log_contains(&D, "had mode 0644 (readable by "
					 "others): changed to 0600"));
	cr_assert_eq(fx_daemon_log_count(&D, "changed to 0600, owner only"),
		     2);
	const char *paths[] = {journal, tier, NULL};
	cr_assert_eq(fx_as_nobody(read_as_other, paths), 0,
		     "another uid opened a file of cached bytes");
	fx_daemon_stop(&D);

	/* Owned by another uid: it could chmod it back; refused at start,
	 * with the reason. */
	cr_assert_eq(chown(journal, 65534, 65534), 0);
	char out[8192];
	char *argv[] = {RC_BUILD_DIR "/ringcached", "-c", D.config_path, NULL};
	int rc = fx_run(argv, out, sizeof(out), 60000);
	cr_assert(rc > 0 && rc < 128, "ringcached exit %d:\n%s", rc, out);
	cr_assert(strstr(out, "is owned by uid 65534, not by the daemon's"),
		  "%s", out);
	cr_assert(strstr(out, journal), "%s", out);
}

/* ---- fresh angles on the RENAME rule ------------------------------------ */

/* nobody: RENAME onto a key root holds open (not in S3 yet), COMMIT and
 * RENAME in one batch, RENAME onto its own name mid-upload. Root's key
 * is root's unless root's own upload finds it taken (then SYNC -EEXIST:
 * first writer wins, nothing replaced). Exit codes name the step. */
static int attack_fresh(void *arg)
{
	(void)arg;
	struct nobody n;
	int step = nobody_attach(&n, D.socket_path, "keep", 8 * MiB);
	if (step)
		return step;
	/* Its object in S3, renamed onto "race", which root holds open. */
	int h = nobody_in_s3(&n, "e.tmp", SMALL, 401, 10);
	if (h < 0)
		return -h;
	if (rc_rename(&n.c, (uint32_t)h, "race") != 0)
		return 14; /* nothing there yet: a write there is allowed */
	/* COMMIT and RENAME onto root's "small" in one batch, then a
	 * RENAME onto its own name: SYNC -EEXIST, nothing lands. */
	h = rc_write_open(&n.c, n.ds, "f.tmp");
	if (h < 0 || rc_write(&n.c, (uint32_t)h, 0, BIG, (uint32_t)n.buf, 0) !=
	    (ssize_t)BIG)
		return 20;
	struct rc_sqe *s1 = rc_get_sqe(&n.c), *s2;
	int slot = rc_arg_get(&n.c);
	if (!s1 || slot < 0)
		return 21;
	s1->opcode = RC_OP_COMMIT;
	s1->handle = (uint32_t)h;
	s1->user_data = 1;
	s2 = rc_get_sqe(&n.c);
	if (!s2)
		return 22;
	s2->opcode = RC_OP_RENAME;
	s2->handle = (uint32_t)h;
	s2->arg = (uint16_t)slot;
	s2->arg_len = (uint32_t)strlen("small");
	memcpy(rc_arg_ptr(&n.c, (uint32_t)slot), "small", s2->arg_len);
	s2->user_data = 2;
	if (rc_submit(&n.c) != 2)
		return 23;
	int got = 0, res[3] = {0};
	while (got < 2) {
		struct rc_cqe *cq;
		if (rc_wait_cqe(&n.c, &cq) < 0)
			return 24;
		if (cq->user_data == 1 || cq->user_data == 2) {
			res[cq->user_data] = cq->res;
			got++;
		}
		rc_cqe_seen(&n.c);
	}
	rc_arg_put(&n.c, slot);
	if (res[1] != 0 || (res[2] != 0 && res[2] != -EEXIST))
		return 25;
	if (rc_rename(&n.c, (uint32_t)h, res[2] ? "f.tmp" : "small") != 0)
		return 26;
	int sr = rc_sync(&n.c, (uint32_t)h);
	if (res[2] == 0 && sr != -EEXIST)
		return 27;
	rc_detach(&n.c);
	return 0;
}

Test(writepath, rename_races_and_batches_replace_nothing, .fini = teardown,
     .timeout = 300)
{
	const char *plain[] = {"--latency-ms", "0", "--bw-conn", "0", NULL};
	fx_proxy_start(&P, plain);
	start();
	root_writes("small", SMALL, SEED_SMALL);
	root_writes("big", BIG, SEED_BIG);
	/* nobody's RENAME onto its own name must come mid-upload: once
	 * (2026-11-30, TSan lane) the upload failed on root's "small"
	 * while the batch's RENAME waited for its fdatasync, and the next
	 * RENAME of the failed object was -EINVAL (step 26). Every answer
	 * from S3 now takes 1 s. */
	cr_assert_null(strstr(fx_proxy_control(&P, "set latency-ms 1000\n"),
			      "error"));
	struct rc_client c;
	void *mem;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "keep");
	int buf = rc_alloc_buffer(&c, SMALL, &mem);
	int h = rc_write_open(&c, ds, "race");
	cr_assert(ds >= 0 && buf >= 0 && h >= 0);
	fx_fill_pattern(mem, SMALL, 402);
	cr_assert_eq(rc_write(&c, (uint32_t)h, 0, SMALL, (uint32_t)buf, 0),
		     (ssize_t)SMALL);
	int st = fx_as_nobody(attack_fresh, NULL);
	cr_assert_eq(st, 0, "the attack got through at step %d", st);
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), -EEXIST,
		     "root's later write replaced nobody's earlier one");
	rc_detach(&c);
	char k[3][400];
	unsigned char *small = fx_pattern(SMALL, SEED_SMALL);
	unsigned char *big = fx_pattern(BIG, SEED_BIG);
	unsigned char *e = fx_pattern(SMALL, 401);
	snprintf(k[0], sizeof(k[0]), "%ssmall", bucket_prefix("keep/"));
	snprintf(k[1], sizeof(k[1]), "%sbig", bucket_prefix("keep/"));
	snprintf(k[2], sizeof(k[2]), "%srace", bucket_prefix("keep/"));
	struct fx_s3_object objs[] = {{k[0], small, SMALL}, {k[1], big, BIG},
				      {k[2], e, SMALL}};
	fx_aws_assert_objects(bucket_prefix("keep/"), objs, 3, 5 * MiB);
	free(small);
	free(big);
	free(e);
	fx_daemon_stop(&D);
}

/* nobody's side of the test below: saves of "shared" on ck (2 MiB
 * each), one after the other without waiting for
 * S3, until the stop pipe is closed; then SYNC. *last is the seed of the
 * last save committed. */
#define FLOOD_SIZE (2u * MiB)
#define FLOOD_SEED 600u

struct flood {
	const char *socket;
	int stop_fd;            /* readable (EOF) once root is done */
	int stop_wr;            /* its write end: the parent's alone */
	volatile unsigned *last; /* shared with the parent */
};

static int flood_key(void *arg)
{
	const struct flood *f = arg;
	close(f->stop_wr);
	struct nobody n;
	int step = nobody_attach(&n, f->socket, "ck", FLOOD_SIZE);
	if (step)
		return step;
	fcntl(f->stop_fd, F_SETFL, O_NONBLOCK);
	for (unsigned i = 0;; i++) {
		char b;
		if (i > 0 && read(f->stop_fd, &b, 1) == 0)
			break;
		if (i >= 2000)
			return 4; /* never told to stop */
		int h = rc_write_open(&n.c, n.ds, "shared");
		if (h < 0)
			return 5;
		fx_fill_pattern(n.mem, FLOOD_SIZE, FLOOD_SEED + i);
		ssize_t w;
		int tries = 0;
		/* Staging or the journal full: the earlier saves are still
		 * uploading. */
		while (((w = rc_write(&n.c, (uint32_t)h, 0, FLOOD_SIZE,
				      (uint32_t)n.buf, 0)) == -EAGAIN ||
			w == -ENOSPC) && ++tries < 3000)
			usleep(10000);
		if (w != (ssize_t)FLOOD_SIZE)
			return 6;
		if (rc_commit(&n.c, (uint32_t)h) != 0 ||
		    rc_close(&n.c, (uint32_t)h) != 0)
			return 7;
		*f->last = FLOOD_SEED + i;
	}
	if (rc_sync(&n.c, RC_SYNC_ALL) != 0)
		return 8;
	rc_detach(&n.c);
	return 0;
}

/* A key another uid keeps saving: nobody commits saves of "shared" one
 * after the other while root saves it once. A shard changes a key one
 * object at a time in the order asked for, first come, first served:
 * root's upload waits for nobody's saves committed before it, not for
 * those after, so root's SYNC returns while nobody goes on (an order
 * that let the newest go first would hold it for as long as nobody
 * liked, and the test would time out); and S3 ends with the last save
 * committed, nobody's, byte for byte (awscli). */
Test(writepath, a_key_another_uid_keeps_saving_delays_one_save_by_a_turn,
     .fini = teardown, .timeout = 240)
{
	start();
	volatile unsigned *last = mmap(NULL, sizeof(*last),
				       PROT_READ | PROT_WRITE,
				       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq((void *)last, MAP_FAILED);
	*last = 0;
	int stop[2];
	cr_assert_eq(pipe(stop), 0);
	struct flood f = {.socket = D.socket_path, .stop_fd = stop[0],
			  .stop_wr = stop[1], .last = last};
	pid_t pid = fx_as_nobody_start(flood_key, &f);
	close(stop[0]);
	for (int i = 0; fx_stat_value(D.socket_path,
				      "ringcache_writeback_committed_total") < 3;
	     i++) {
		if (i == 3000) { /* 30 s: nobody's loop stopped early */
			close(stop[1]);
			cr_assert_fail("nobody committed fewer than 3 saves "
				       "(step %d)", fx_as_nobody_wait(pid));
		}
		usleep(10000);
	}

	struct rc_client c;
	void *mem;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ck");
	int buf = rc_alloc_buffer(&c, SMALL, &mem);
	cr_assert(ds >= 0 && buf >= 0);
	fx_fill_pattern(mem, SMALL, 599);
	int h = rc_write_open(&c, ds, "shared");
	cr_assert_geq(h, 0);
	cr_assert_eq(rc_write(&c, (uint32_t)h, 0, SMALL, (uint32_t)buf, 0),
		     (ssize_t)SMALL);
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	int r = rc_sync(&c, (uint32_t)h);
	cr_assert_eq(r, 0, "root's save of a key nobody keeps saving: %s",
		     rc_strerror(r));
	close(stop[1]);
	rc_detach(&c);
	int st = fx_as_nobody_wait(pid);
	cr_assert_eq(st, 0, "nobody's saves failed at step %d", st);
	char k[400];
	snprintf(k, sizeof(k), "%sshared", bucket_prefix("ck/"));
	unsigned char *want = fx_pattern(FLOOD_SIZE, *last);
	struct fx_s3_object objs[] = {{k, want, FLOOD_SIZE}};
	fx_aws_assert_objects(bucket_prefix("ck/"), objs, 1, 5 * MiB);
	free(want);
	munmap((void *)last, sizeof(*last));
	fx_daemon_stop(&D);
}

/* ---- a failed upload is its uid's ---------------------------------------- */

/* nobody saves to a dataset over a bucket that does not exist: the upload
 * fails (404), and nobody's SYNC of all says so after the handle is
 * closed. Exit codes: the step that went wrong. */
static int fail_an_upload(void *arg)
{
	struct nobody n;
	int step = nobody_attach(&n, arg, "gone", MiB);
	if (step)
		return step;
	int h = rc_write_open(&n.c, n.ds, "lost");
	if (h < 0)
		return 4;
	fx_fill_pattern(n.mem, MiB, 61);
	if (rc_write(&n.c, (uint32_t)h, 0, MiB, (uint32_t)n.buf, 0) != MiB)
		return 5;
	if (rc_commit(&n.c, (uint32_t)h) != 0)
		return 6;
	if (rc_sync(&n.c, (uint32_t)h) != -ENODEV)
		return 7;
	if (rc_close(&n.c, (uint32_t)h) != 0)
		return 8;
	if (rc_sync(&n.c, RC_SYNC_ALL) != -ENODEV)
		return 9;
	rc_detach(&n.c);
	return 0;
}

/* A SYNC of all objects reports the failed uploads of the caller's uid:
 * were it any uid's, a neighbour could make every other job's checkpoint
 * look lost by saving to a bucket it cannot write. */
Test(writepath, another_uids_failed_upload_is_not_my_sync_error,
     .fini = teardown, .timeout = 120)
{
	static char gone[600];
	char bucket[96];
	fx_unique(bucket, sizeof(bucket), "no-such-bucket");
	for (char *p = bucket; *p; p++)
		*p = *p == '_' ? '-' : *p;
	snprintf(gone, sizeof(gone),
		 "\n[dataset gone]\nuri = s3://%s/x/\nallow_uids = *\n"
		 "writable = true\nwrite_uids = *\ndurability = local\n"
		 "part_size = 5M\n", bucket);
	more_sections = gone;
	start();
	more_sections = "";
	int st = fx_as_nobody_wait(fx_as_nobody_start(fail_an_upload,
						      (void *)D.socket_path));
	cr_assert_eq(st, 0, "nobody's failed upload: step %d", st);
	cr_assert_eq(fx_stat_value(D.socket_path,
				   "ringcache_writeback_failed_objects"), 1);

	struct rc_client c;
	void *mem;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ck");
	int buf = rc_alloc_buffer(&c, MiB, &mem);
	cr_assert(ds >= 0 && buf >= 0);
	fx_fill_pattern(mem, MiB, 62);
	int h = rc_write_open(&c, ds, "mine");
	cr_assert_geq(h, 0);
	cr_assert_eq(rc_write(&c, (uint32_t)h, 0, MiB, (uint32_t)buf, 0), MiB);
	cr_assert_eq(rc_commit(&c, (uint32_t)h), 0);
	cr_assert_eq(rc_sync(&c, (uint32_t)h), 0);
	int r = rc_sync(&c, RC_SYNC_ALL);
	cr_assert_eq(r, 0, "root's sync of all, nobody's upload failed: %s",
		     rc_strerror(r));
	rc_detach(&c);
	char k[400];
	snprintf(k, sizeof(k), "%smine", bucket_prefix("ck/"));
	unsigned char *want = fx_pattern(MiB, 62);
	struct fx_s3_object objs[] = {{k, want, MiB}};
	fx_aws_assert_objects(bucket_prefix("ck/"), objs, 1, 5 * MiB);
	free(want);
	fx_daemon_stop(&D);
}
