/* test_journal.c - the write-back journal (src/store/journal.c) through a
 * private io_uring: round trips of objects from 0 bytes to several MiB,
 * replay after reopen (commit, rename, done, abort, never committed), crash
 * cuts every 512 bytes and corrupted bytes (a sample of them under a
 * sanitizer: sample.h), the size limit and the rewind, and a file system
 * that refuses O_DIRECT. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "journal.h"
#include "uring.h"
#include "ramfs.h"
#include "sample.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

static struct io_uring ring;
static char dir[64];
static char path[128];

static void setup(void)
{
	cr_assert_eq(io_uring_queue_init(64, &ring, 0), 0);
	strcpy(dir, "/tmp/rc-journal-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/journal", dir);
}

static void teardown(void)
{
	io_uring_queue_exit(&ring);
	unlink(path);
	rmdir(dir);
}

TestSuite(journal, .init = setup, .fini = teardown, .timeout = 240);

/* ---- helpers ---- */

/* The byte at offset off of object id. */
static uint8_t pattern(uint64_t id, uint64_t off)
{
	uint64_t x = (id + 1) * 0x9e3779b97f4a7c15ull ^ (off / 8) * 0xff51afd7ed558ccdull;
	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (off % 8)));
}

static uint8_t *make_bytes(uint64_t id, uint64_t off, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(id, off + i);
	return p;
}

static void drain(struct journal *j)
{
	while (journal_inflight(j)) {
		struct io_uring_cqe *cqe;
		cr_assert_geq(io_uring_submit_and_wait(&ring, 1), 0);
		unsigned head, n = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			rc_ev_dispatch(cqe); /* its handler: journal_complete */
			n++;
		}
		io_uring_cq_advance(&ring, n);
	}
}

struct result {
	int res;
	bool done;
};

static void on_flushed(void *ctx, int res)
{
	struct result *r = ctx;
	r->res = res;
	r->done = true;
}

static void flush(struct journal *j)
{
	struct result r = {0};
	cr_assert_eq(journal_flush(j, on_flushed, &r), 0);
	drain(j);
	cr_assert(r.done, "flush callback did not run");
	cr_assert_eq(r.res, 0);
}

/* Retries while the journal says "after completions". */
static int retry(struct journal *j, int r)
{
	return r == -EAGAIN && journal_inflight(j) ? (drain(j), 1) : 0;
}

/* Appends [off, off+len) of object id's pattern in pieces of `piece`. */
static int write_range(struct journal *j, uint64_t id, uint64_t off,
		       size_t len, size_t piece)
{
	for (size_t done = 0; done < len;) {
		size_t n = len - done < piece ? len - done : piece;
		uint8_t *p = make_bytes(id, off + done, n);
		int r;
		while (retry(j, r = journal_append_data(j, id, off + done, p,
							  n)))
			;
		free(p);
		if (r < 0)
			return r;
		done += n;
	}
	return 0;
}

static void put_object(struct journal *j, uint64_t id, const char *key,
		       size_t size, size_t piece)
{
	cr_assert_eq(journal_append_open(j, id, "ckpt", key), 0, "open %llu",
		     (unsigned long long)id);
	cr_assert_eq(write_range(j, id, 0, size, piece), 0);
	cr_assert_eq(journal_append_commit(j, id, size, NULL, NULL, NULL), 0);
}

static struct journal *open_at(const char *p, uint64_t limit)
{
	struct journal_config cfg = {.path = p, .size_limit = limit};
	char err[256] = "";
	struct journal *j = journal_open(&cfg, &ring, err, sizeof(err));
	cr_assert_not_null(j, "journal_open: %s", err);
	return j;
}

static const struct journal_object *find_replayed(struct journal *j,
						  uint64_t id)
{
	for (size_t i = 0; i < journal_n_replayed(j); i++)
		if (journal_replayed(j, i)->id == id)
			return journal_replayed(j, i);
	return NULL;
}

/* True if the object's bytes read back from the journal are its pattern. */
static bool bytes_match(struct journal *j, const struct journal_object *o)
{
	uint8_t *got = malloc(o->size + 1);
	uint8_t *want = make_bytes(o->id, 0, o->size);
	bool ok = journal_read(j, o, 0, got, o->size) == 0 &&
		  memcmp(got, want, o->size) == 0;
	free(got);
	free(want);
	return ok;
}

static void close_journal(struct journal *j)
{
	drain(j);
	journal_close(j);
}

/* ---- round trips ---- */

Test(journal, objects_survive_reopen)
{
	struct journal *j = open_at(path, 64ull * MIB);
	struct journal_stats st;
	journal_get_stats(j, &st);
	cr_assert(st.direct, "ext4 /tmp should take O_DIRECT");
	put_object(j, 1, "empty", 0, 1);
	put_object(j, 2, "one", 1, 1);
	put_object(j, 3, "big", 5 * MIB + 12345, 65537);
	put_object(j, 4, "pending", 0, 1);
	cr_assert_eq(journal_append_abort(j, 4), 0);
	put_object(j, 5, "uploaded", 300 * KIB, 100 * KIB);
	cr_assert_eq(journal_append_done(j, 5, "\"abc\""), 0);
	uint8_t token6[16] = {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6};
	cr_assert_eq(journal_append_open(j, 6, "ckpt", "tmp/shard.0"), 0);
	cr_assert_eq(write_range(j, 6, 0, 200 * KIB, 7 * KIB), 0);
	uint32_t uid6 = 1234;
	cr_assert_eq(journal_append_commit(j, 6, 200 * KIB, NULL, token6,
					   &uid6), 0);
	cr_assert_eq(journal_append_rename(j, 6, "final/shard.0"), 0);
	/* Random offsets: garbage first, then the right bytes over it. */
	cr_assert_eq(journal_append_open(j, 7, "ckpt", "random"), 0);
	uint8_t junk[3000];
	memset(junk, 0xaa, sizeof(junk));
	cr_assert_eq(journal_append_data(j, 7, 5000, junk, sizeof(junk)), 0);
	cr_assert_eq(write_range(j, 7, 4000, 6000, 6000), 0);
	cr_assert_eq(write_range(j, 7, 0, 4000, 999), 0);
	uint8_t md5[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
	uint8_t token[16] = {0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87,
			     0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
	uint32_t uid7 = 65534;
	cr_assert_eq(journal_append_commit(j, 7, 10000, md5, token, &uid7),
		     0);
	/* Never committed: reported for discard. */
	cr_assert_eq(journal_append_open(j, 8, "ckpt", "half"), 0);
	cr_assert_eq(write_range(j, 8, 0, 50 * KIB, 10 * KIB), 0);
	/* State errors append nothing. */
	cr_assert_eq(journal_append_open(j, 3, "ckpt", "dup"), -EEXIST);
	cr_assert_eq(journal_append_data(j, 3, 0, junk, 1), -EINVAL);
	cr_assert_eq(journal_append_done(j, 8, "x"), -EINVAL);
	cr_assert_eq(journal_append_abort(j, 99), -ENOENT);
	flush(j);
	close_journal(j);

	j = open_at(path, 64ull * MIB);
	cr_assert_eq(journal_n_replayed(j), 5);
	uint64_t ids[] = {1, 2, 3, 6, 7};
	const char *keys[] = {"empty", "one", "big", "final/shard.0", "random"};
	uint64_t sizes[] = {0, 1, 5 * MIB + 12345, 200 * KIB, 10000};
	for (int i = 0; i < 5; i++) {
		const struct journal_object *o = find_replayed(j, ids[i]);
		cr_assert_not_null(o, "object %llu not replayed",
				   (unsigned long long)ids[i]);
		cr_assert_str_eq(o->key, keys[i]);
		cr_assert_str_eq(o->dataset, "ckpt");
		cr_assert_eq(o->size, sizes[i]);
		cr_assert(bytes_match(j, o), "object %llu differs",
			  (unsigned long long)ids[i]);
	}
	cr_assert(find_replayed(j, 7)->has_md5);
	cr_assert_eq(memcmp(find_replayed(j, 7)->md5, md5, 16), 0);
	cr_assert(!find_replayed(j, 3)->has_md5);
	/* The writer's token comes back after the MD5 (and alone, below). */
	cr_assert(find_replayed(j, 7)->has_token);
	cr_assert_eq(memcmp(find_replayed(j, 7)->token, token, 16), 0);
	cr_assert(!find_replayed(j, 3)->has_token);
	cr_assert(find_replayed(j, 6)->has_token);
	cr_assert_eq(memcmp(find_replayed(j, 6)->token, token6, 16), 0);
	/* The writer's uid after them (COMMIT flag 4). */
	cr_assert(find_replayed(j, 6)->has_uid);
	cr_assert_eq(find_replayed(j, 6)->uid, uid6);
	cr_assert(find_replayed(j, 7)->has_uid);
	cr_assert_eq(find_replayed(j, 7)->uid, uid7);
	cr_assert(!find_replayed(j, 3)->has_uid);
	cr_assert_eq(journal_n_discarded(j), 1);
	cr_assert_eq(journal_discarded(j, 0)->id, 8);
	cr_assert_str_eq(journal_discarded(j, 0)->key, "half");

	/* Replayed objects are live: finishing them empties the journal. */
	for (int i = 0; i < 5; i++)
		cr_assert_eq(journal_append_done(j, ids[i], "\"e\""), 0);
	flush(j);
	close_journal(j);
	j = open_at(path, 64ull * MIB);
	cr_assert_eq(journal_n_replayed(j), 0);
	cr_assert_eq(journal_n_discarded(j), 0);
	close_journal(j);
}

/* A rename chain replays as its last key, with every earlier key in order
 * (the daemon cleans up uploads under them), also after a second restart
 * that leaves the object live. */
Test(journal, rename_chain_replays_final_key_and_old_keys)
{
	struct journal *j = open_at(path, 64ull * MIB);
	put_object(j, 1, "a.tmp", 100 * KIB, 9 * KIB);
	cr_assert_eq(journal_append_rename(j, 1, "b.mid"), 0);
	cr_assert_eq(journal_append_rename(j, 1, "c"), 0);
	put_object(j, 2, "plain", 10, 10);
	flush(j);
	close_journal(j);
	for (int pass = 0; pass < 2; pass++) {
		j = open_at(path, 64ull * MIB);
		const struct journal_object *o = find_replayed(j, 1);
		cr_assert_not_null(o);
		cr_assert_str_eq(o->key, "c");
		cr_assert_eq(o->n_old_keys, 2, "pass %d", pass);
		cr_assert_str_eq(o->old_keys[0], "a.tmp");
		cr_assert_str_eq(o->old_keys[1], "b.mid");
		cr_assert(bytes_match(j, o));
		cr_assert_eq(find_replayed(j, 2)->n_old_keys, 0);
		close_journal(j);
	}
}

/* A later COMMIT of the same dataset and key supersedes an earlier
 * committed object still in the journal, whether the later one was
 * uploaded since (DONE) or not; so does a RENAME onto the key once
 * committed. Not an object committed to another key, nor one whose
 * newer namesake was never committed. */
Test(journal, a_later_commit_of_the_key_supersedes_the_older)
{
	struct journal *j = open_at(path, 64ull * MIB);
	put_object(j, 1, "latest", 10 * KIB, 4 * KIB);  /* older, never DONE */
	put_object(j, 2, "latest", 20 * KIB, 4 * KIB);  /* newer, uploaded */
	cr_assert_eq(journal_append_done(j, 2, "\"etag\""), 0);
	put_object(j, 3, "other", 10, 10);
	put_object(j, 4, "renamed", 10, 10);           /* older of "renamed" */
	put_object(j, 5, "tmp", 30, 30);
	cr_assert_eq(journal_append_rename(j, 5, "renamed"), 0);
	put_object(j, 6, "open-after", 10, 10);
	cr_assert_eq(journal_append_open(j, 7, "ckpt", "open-after"), 0);
	put_object(j, 8, "latest-ds", 10, 10);
	cr_assert_eq(journal_append_open(j, 9, "other-ds", "latest-ds"), 0);
	cr_assert_eq(journal_append_commit(j, 9, 0, NULL, NULL, NULL), 0);
	flush(j);
	close_journal(j);
	for (int pass = 0; pass < 2; pass++) {
		j = open_at(path, 64ull * MIB);
		cr_assert(find_replayed(j, 1)->superseded, "pass %d", pass);
		cr_assert_null(find_replayed(j, 2));
		cr_assert_not(find_replayed(j, 3)->superseded);
		cr_assert(find_replayed(j, 4)->superseded);
		cr_assert_not(find_replayed(j, 5)->superseded);
		cr_assert_not(find_replayed(j, 6)->superseded,
			      "superseded by an object never committed");
		cr_assert_not(find_replayed(j, 8)->superseded,
			      "superseded from another dataset");
		cr_assert_not(find_replayed(j, 9)->superseded);
		close_journal(j);
	}
}

/* Completes one CQE of the journal's; false when none is in flight. */
static bool complete_one(struct journal *j)
{
	struct io_uring_cqe *cqe;
	if (!journal_inflight(j))
		return false;
	cr_assert_geq(io_uring_submit(&ring), 0);
	cr_assert_eq(io_uring_wait_cqe(&ring, &cqe), 0);
	journal_complete(j, cqe);
	io_uring_cqe_seen(&ring, cqe);
	return true;
}

/* An append the disk is behind on (-EAGAIN) waits for a write to complete,
 * not for an fdatasync, and then goes in; its bytes replay intact. */
Test(journal, busy_journal_wakes_a_waiting_append_after_a_write)
{
	struct journal *j = open_at(path, 256ull * MIB);
	cr_assert_eq(journal_append_open(j, 1, "ckpt", "busy"), 0);
	uint64_t off = 0;
	uint8_t *p = make_bytes(1, off, 8 * MIB);
	int r;
	while ((r = journal_append_data(j, 1, off, p, 8 * MIB)) == 0) {
		off += 8 * MIB;
		free(p);
		p = make_bytes(1, off, 8 * MIB);
		cr_assert_lt(off, 200ull * MIB, "never behind");
	}
	cr_assert_eq(r, -EAGAIN);
	struct journal_stats before, after;
	journal_get_stats(j, &before);
	struct result woke = {0};
	cr_assert_eq(journal_wait_room(j, on_flushed, &woke), 0);
	while (!woke.done && complete_one(j))
		;
	cr_assert(woke.done, "the waiting append was never woken");
	cr_assert_eq(woke.res, 0);
	journal_get_stats(j, &after);
	cr_assert_eq(after.fsyncs, before.fsyncs, "woken by an fdatasync");
	while (retry(j, r = journal_append_data(j, 1, off, p, 8 * MIB)))
		;
	cr_assert_eq(r, 0);
	free(p);
	cr_assert_eq(journal_append_commit(j, 1, off + 8 * MIB,
					   NULL, NULL, NULL), 0);
	flush(j);
	close_journal(j);

	j = open_at(path, 256ull * MIB);
	const struct journal_object *o = find_replayed(j, 1);
	cr_assert_not_null(o);
	cr_assert_eq(o->size, off + 8 * MIB);
	cr_assert(bytes_match(j, o), "replayed bytes differ");
	close_journal(j);
}

Test(journal, unflushed_records_are_written_at_close)
{
	struct journal *j = open_at(path, 16ull * MIB);
	put_object(j, 1, "a", 100 * KIB, 100 * KIB);
	close_journal(j);
	j = open_at(path, 16ull * MIB);
	cr_assert_eq(journal_n_replayed(j), 1);
	cr_assert(bytes_match(j, journal_replayed(j, 0)));
	close_journal(j);
}

/* ---- crashes ---- */

#define N_CRASH_OBJS 10

static const size_t crash_sizes[N_CRASH_OBJS] = {
	0, 1, 3000, 20000, 60000, 5000, 4096, 23457, 40, 30000};

/* Writes the objects, one flush each; frontier[i] is the file offset by
 * which object i is durable. Returns the file's used length. */
static uint64_t write_crash_journal(uint64_t *frontier)
{
	struct journal *j = open_at(path, 4ull * MIB);
	for (int i = 0; i < N_CRASH_OBJS; i++) {
		char key[32];
		snprintf(key, sizeof(key), "shard.%d", i);
		put_object(j, (uint64_t)i + 1, key, crash_sizes[i], 33333);
		if (i == 4) /* renamed after its commit was flushed */
			cr_assert_eq(journal_append_rename(j, 3, "renamed"), 0);
		flush(j);
		struct journal_stats st;
		journal_get_stats(j, &st);
		frontier[i] = 4096 + st.used_bytes;
	}
	/* A tail that was never flushed: may or may not survive. */
	cr_assert_eq(journal_append_open(j, 100, "ckpt", "tail"), 0);
	cr_assert_eq(write_range(j, 100, 0, 10000, 10000), 0);
	struct journal_stats st;
	journal_get_stats(j, &st);
	close_journal(j);
	return 4096 + st.used_bytes + 4096;
}

static uint8_t *slurp(const char *p, uint64_t len)
{
	uint8_t *buf = calloc(1, len);
	int fd = open(p, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, buf, len, 0), (ssize_t)len);
	close(fd);
	return buf;
}

static void write_image(const char *p, const uint8_t *img, uint64_t len)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, img, len), (ssize_t)len);
	close(fd);
}

/* Opens the image: every object returned has the right bytes and key;
 * every object durable before `intact` is returned. */
static struct journal *check_image(const char *p, const uint64_t *frontier,
				   uint64_t intact)
{
	struct journal *j = open_at(p, 4ull * MIB);
	for (size_t i = 0; i < journal_n_replayed(j); i++) {
		const struct journal_object *o = journal_replayed(j, i);
		cr_assert(o->id >= 1 && o->id <= N_CRASH_OBJS,
			  "replayed an object never committed: %llu",
			  (unsigned long long)o->id);
		cr_assert_eq(o->size, crash_sizes[o->id - 1]);
		cr_assert(bytes_match(j, o), "object %llu has wrong bytes "
			  "(intact up to %llu)", (unsigned long long)o->id,
			  (unsigned long long)intact);
		if (o->id == 3 && frontier[4] <= intact)
			cr_assert_str_eq(o->key, "renamed");
	}
	for (int i = 0; i < N_CRASH_OBJS; i++)
		if (frontier[i] <= intact)
			cr_assert_not_null(find_replayed(j, (uint64_t)i + 1),
					   "object %d durable by %llu lost at "
					   "%llu", i + 1,
					   (unsigned long long)frontier[i],
					   (unsigned long long)intact);
	return j;
}

/* After a crash the journal goes on at the torn tail: a new object
 * written there and everything replayed before both survive. */
static void append_after_crash(struct journal *j, const char *p)
{
	size_t before = journal_n_replayed(j);
	put_object(j, 200, "after", 50000, 7000);
	flush(j);
	close_journal(j);
	j = open_at(p, 4ull * MIB);
	cr_assert_eq(journal_n_replayed(j), before + 1);
	const struct journal_object *o = find_replayed(j, 200);
	cr_assert_not_null(o);
	cr_assert(bytes_match(j, o));
	for (size_t i = 0; i < journal_n_replayed(j); i++)
		cr_assert(bytes_match(j, journal_replayed(j, i)));
	close_journal(j);
}

/* Marks the step of a loop over offsets first + step * i that is the
 * last before `at` and the first at or after it: where an object becomes
 * durable, or its records end, is where replay has to decide. */
static void keep_around(bool *keep, size_t n, uint64_t first, uint64_t step,
			uint64_t at)
{
	size_t i = at <= first ? 0 : (size_t)((at - first + step - 1) / step);
	if (i < n)
		keep[i] = true;
	if (i > 0 && i - 1 < n)
		keep[i - 1] = true;
}

/* Every cut in the plain build; under a sanitizer (a replay there takes
 * over a second on a loaded machine) the first and last cuts, those on
 * each side of every object's durability, and 24 drawn at random. */
Test(journal, cut_at_every_512_bytes)
{
	uint64_t frontier[N_CRASH_OBJS];
	uint64_t len = write_crash_journal(frontier);
	uint8_t *img = slurp(path, len);
	char p[160];
	snprintf(p, sizeof(p), "%s/cut", dir);
	size_t n = (size_t)((len - 4096) / 512) + 1; /* cuts 4096 + 512 i */
	cr_assert_gt(n, 250);
	bool *keep = calloc(n, sizeof(*keep));
	cr_assert_not_null(keep);
	keep[0] = keep[n - 1] = true;
	for (int i = 0; i < N_CRASH_OBJS; i++)
		keep_around(keep, n, 4096, 512, frontier[i]);
	size_t runs = sample_steps("journal::cut_at_every_512_bytes", keep, n,
				   24);
	/* After a crash the journal goes on: checked at every 16th cut, or
	 * every 4th of a sample. */
	unsigned every = runs == n ? 16 : 4, done = 0;
	for (size_t i = 0; i < n; i++) {
		if (!keep[i])
			continue;
		uint64_t cut = 4096 + 512 * (uint64_t)i;
		write_image(p, img, cut);
		struct journal *j = check_image(p, frontier, cut);
		if (done++ % every == 0)
			append_after_crash(j, p);
		else
			close_journal(j);
		unlink(p);
	}
	cr_assert_eq(done, runs);
	free(keep);
	free(img);
}

Test(journal, corrupt_byte_ends_replay_there)
{
	uint64_t frontier[N_CRASH_OBJS];
	uint64_t len = write_crash_journal(frontier);
	uint8_t *img = slurp(path, len);
	char p[160];
	snprintf(p, sizeof(p), "%s/bad", dir);
	/* A damaged byte every 1531 (all in the plain build; under a
	 * sanitizer the first and last, those around each object's
	 * durability, and 12 at random). */
	size_t n = (size_t)((len - 1 - (4096 + 17)) / 1531) + 1;
	cr_assert_gt(n, 80);
	bool *keep = calloc(n, sizeof(*keep));
	cr_assert_not_null(keep);
	keep[0] = keep[n - 1] = true;
	for (int i = 0; i < N_CRASH_OBJS; i++)
		keep_around(keep, n, 4096 + 17, 1531, frontier[i]);
	size_t runs = sample_steps("journal::corrupt_byte_ends_replay_there",
				   keep, n, 12), done = 0;
	for (size_t i = 0; i < n; i++) {
		if (!keep[i])
			continue;
		uint64_t off = 4096 + 17 + 1531 * (uint64_t)i;
		img[off] ^= 0x40;
		write_image(p, img, len);
		img[off] ^= 0x40;
		close_journal(check_image(p, frontier, off));
		unlink(p);
		done++;
	}
	cr_assert_eq(done, runs);
	free(keep);
	/* Objects after the damage are gone: replay stops at a bad record. */
	img[frontier[1] + 100] ^= 1;
	write_image(p, img, len);
	struct journal *j = open_at(p, 4ull * MIB);
	cr_assert_null(find_replayed(j, 10));
	close_journal(j);
	unlink(p);
	free(img);
}

/* ---- space ---- */

Test(journal, full_journal_gives_enospc_then_rewinds)
{
	uint64_t limit = 2ull * MIB;
	struct journal *j = open_at(path, limit);
	uint64_t id = 1;
	int r = 0;
	for (; id < 1000; id++) {
		char key[32];
		snprintf(key, sizeof(key), "s%llu", (unsigned long long)id);
		r = journal_append_open(j, id, "ckpt", key);
		if (r < 0)
			break;
		r = write_range(j, id, 0, 64 * KIB, 64 * KIB);
		if (r < 0) {
			cr_assert_eq(journal_append_abort(j, id), 0);
			break;
		}
		cr_assert_eq(journal_append_commit(j, id, 64 * KIB,
						   NULL, NULL, NULL), 0);
		flush(j);
	}
	cr_assert_eq(r, -ENOSPC);
	cr_assert_gt(id, 10);
	struct journal_stats st;
	journal_get_stats(j, &st);
	cr_assert_leq(4096 + st.used_bytes, limit);
	uint8_t *big = make_bytes(5000, 0, 64 * KIB);
	cr_assert_eq(journal_append_open(j, 5000, "ckpt", "more"), 0);
	cr_assert_eq(journal_append_data(j, 5000, 0, big, 64 * KIB), -ENOSPC);
	cr_assert_eq(journal_append_abort(j, 5000), 0);
	free(big);
	uint64_t committed = id - 1;
	/* DONE for all: control records use the room kept back. */
	for (uint64_t i = 1; i <= committed; i++)
		cr_assert_eq(journal_append_done(j, i, "\"e\""), 0, "done %llu",
			     (unsigned long long)i);
	flush(j);
	cr_assert_eq(journal_append_open(j, 5000, "ckpt", "more"), 0);
	journal_get_stats(j, &st);
	cr_assert_eq(st.rewinds, 1);
	cr_assert_lt(st.used_bytes, 4096);
	cr_assert_eq(write_range(j, 5000, 0, 300 * KIB, 50 * KIB), 0);
	cr_assert_eq(journal_append_commit(j, 5000, 300 * KIB,
					   NULL, NULL, NULL), 0);
	flush(j);
	close_journal(j);

	j = open_at(path, limit);
	cr_assert_eq(journal_n_replayed(j), 1);
	cr_assert_eq(journal_n_discarded(j), 0);
	cr_assert_eq(journal_replayed(j, 0)->id, 5000);
	cr_assert(bytes_match(j, journal_replayed(j, 0)));
	close_journal(j);
}

/* Objects finished one after the other, never flushed: when the tail
 * reaches the limit the journal writes what it holds (-EAGAIN), and the
 * next append after the completions rewinds, even with an object open
 * (and still empty). */
Test(journal, space_comes_back_without_an_explicit_flush)
{
	struct journal *j = open_at(path, 1ull * MIB);
	struct journal_stats st = {0};
	bool saw_eagain = false;
	for (uint64_t id = 1; id < 200 && !st.rewinds; id++) {
		int r = journal_append_open(j, id, "ckpt", "k");
		if (r == -EAGAIN) {
			saw_eagain = true;
			drain(j);
			r = journal_append_open(j, id, "ckpt", "k");
		}
		cr_assert_eq(r, 0, "open %llu: %d", (unsigned long long)id, r);
		uint8_t *p = make_bytes(id, 0, 32 * KIB);
		r = journal_append_data(j, id, 0, p, 32 * KIB);
		if (r == -EAGAIN) { /* the empty object id is logged again */
			saw_eagain = true;
			drain(j);
			r = journal_append_data(j, id, 0, p, 32 * KIB);
		}
		free(p);
		journal_get_stats(j, &st);
		cr_assert_eq(r, 0, "data %llu: %d", (unsigned long long)id, r);
		cr_assert_eq(journal_append_commit(j, id, 32 * KIB,
						   NULL, NULL, NULL), 0);
		cr_assert_eq(journal_append_done(j, id, "\"e\""), 0);
	}
	cr_assert(saw_eagain);
	cr_assert_eq(st.rewinds, 1);
	close_journal(j);
}

/* An open object holding one byte does not keep the journal from
 * rewinding (issue 20): short of room, the journal rewinds over it, its
 * COMMIT is -ESTALE until its bytes are logged again, and after that
 * replay gives its exact bytes; the dropped DATA never comes back. */
Test(journal, an_open_object_does_not_block_the_rewind)
{
	uint64_t limit = 2ull * MIB;
	struct journal *j = open_at(path, limit);
	uint8_t *one = make_bytes(7, 0, 1);
	cr_assert_eq(journal_append_open(j, 7, "ckpt", "held"), 0);
	cr_assert_eq(journal_append_data(j, 7, 0, one, 1), 0);
	free(one);
	struct journal_stats st = {0};
	/* Twice the journal of other objects, each done once committed. */
	for (uint64_t id = 100; id < 100 + 2 * 32; id++) {
		char key[32];
		snprintf(key, sizeof(key), "o%llu", (unsigned long long)id);
		int r;
		while (retry(j, r = journal_append_open(j, id, "ckpt", key)))
			;
		cr_assert_eq(r, 0, "open %llu: %d", (unsigned long long)id, r);
		cr_assert_eq(write_range(j, id, 0, 64 * KIB, 64 * KIB), 0,
			     "data %llu", (unsigned long long)id);
		cr_assert_eq(journal_append_commit(j, id, 64 * KIB,
						   NULL, NULL, NULL), 0);
		flush(j);
		cr_assert_eq(journal_append_done(j, id, "\"e\""), 0);
	}
	journal_get_stats(j, &st);
	cr_assert_geq(st.rewinds, 1);
	cr_assert_geq(st.dropped, 1);
	cr_assert(journal_dropped(j, 7));
	cr_assert_eq(journal_append_commit(j, 7, 1 + 5000, NULL, NULL, NULL),
		     -ESTALE,
		     "a COMMIT of bytes no longer in the log");
	/* Its writer logs its byte again, then more. */
	cr_assert_eq(journal_relog_start(j, 7), 0);
	cr_assert_not(journal_dropped(j, 7));
	cr_assert_eq(write_range(j, 7, 0, 1 + 5000, 4096), 0);
	cr_assert_eq(journal_append_commit(j, 7, 1 + 5000,
					   NULL, NULL, NULL), 0);
	flush(j);
	close_journal(j);
	j = open_at(path, limit);
	const struct journal_object *o = find_replayed(j, 7);
	cr_assert_not_null(o);
	cr_assert_eq(journal_n_replayed(j), 1);
	cr_assert(bytes_match(j, o));
	close_journal(j);
}

/* After a rewind the old records lie behind the new tail; with one
 * object per block, replay would run on into them (and the old DONE of
 * the reused id 1 would drop the new object) but for their older epoch. */
Test(journal, stale_records_after_a_rewind_are_ignored)
{
	struct journal *j = open_at(path, 4ull * MIB);
	for (uint64_t id = 1; id <= 20; id++) {
		put_object(j, id, "old", 1, 1);
		flush(j);
	}
	for (uint64_t id = 1; id <= 20; id++)
		cr_assert_eq(journal_append_done(j, id, "\"e\""), 0);
	flush(j);
	close_journal(j);
	j = open_at(path, 4ull * MIB);
	put_object(j, 1, "new", 1, 1);
	flush(j);
	close_journal(j);
	j = open_at(path, 4ull * MIB);
	cr_assert_eq(journal_n_replayed(j), 1);
	cr_assert_str_eq(journal_replayed(j, 0)->key, "new");
	cr_assert_eq(journal_n_discarded(j), 0);
	close_journal(j);
}

/* The base epoch in the file's header (after the magic and version),
 * read through a file descriptor of our own. */
static uint32_t base_epoch_on_disk(void)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	uint32_t e = 0;
	cr_assert_eq(pread(fd, &e, 4, 12), 4);
	close(fd);
	return e;
}

struct flush_seen {
	bool done;
	int res;
	uint32_t base_epoch; /* on the disk when the flush was done */
};

static void on_flushed_look(void *ctx, int res)
{
	struct flush_seen *f = ctx;
	f->done = true;
	f->res = res;
	f->base_epoch = base_epoch_on_disk();
}

/* A rewind's header is written on the ring, not by the appending thread
 * (a shard's reactor), and a record after the rewind is acknowledged only
 * once the header is written and synced with it: replay then finds it. */
Test(journal, rewind_header_goes_through_the_ring_before_its_records)
{
	struct journal *j = open_at(path, 4ull * MIB);
	put_object(j, 1, "old", 64 * KIB, 64 * KIB);
	flush(j);
	cr_assert_eq(journal_append_done(j, 1, "\"e\""), 0);
	flush(j);
	uint32_t before = base_epoch_on_disk();
	struct journal_stats st;
	journal_get_stats(j, &st);
	uint64_t fsyncs = st.fsyncs;
	cr_assert_eq(journal_inflight(j), 0);

	cr_assert_eq(journal_append_open(j, 2, "ckpt", "new"), 0);
	journal_get_stats(j, &st);
	cr_assert_eq(st.rewinds, 1);
	cr_assert_eq(journal_inflight(j), 1, "the header is an SQE, not a "
		     "pwrite on this thread");
	cr_assert_eq(write_range(j, 2, 0, 100 * KIB, 100 * KIB), 0);
	cr_assert_eq(journal_append_commit(j, 2, 100 * KIB,
					   NULL, NULL, NULL), 0);
	struct flush_seen f = {0};
	cr_assert_eq(journal_flush(j, on_flushed_look, &f), 0);
	drain(j);
	cr_assert(f.done);
	cr_assert_eq(f.res, 0);
	cr_assert_eq(f.base_epoch, before + 1, "acknowledged before the "
		     "rewind's header was written");
	journal_get_stats(j, &st);
	cr_assert_gt(st.fsyncs, fsyncs);
	close_journal(j);

	j = open_at(path, 4ull * MIB);
	cr_assert_eq(journal_n_replayed(j), 1);
	const struct journal_object *o = find_replayed(j, 2);
	cr_assert_not_null(o);
	cr_assert_str_eq(o->key, "new");
	cr_assert(bytes_match(j, o));
	close_journal(j);
}

/* ---- files ---- */

Test(journal, refused_o_direct_works_buffered)
{
	char mnt[96];
	ramfs_mount(dir, mnt, sizeof(mnt));
	char p[128];
	snprintf(p, sizeof(p), "%s/journal", mnt);
	cr_assert(!direct_works(p), "ramfs took O_DIRECT");
	struct journal *j = open_at(p, 16ull * MIB);
	struct journal_stats st;
	journal_get_stats(j, &st);
	cr_assert(!st.direct);
	put_object(j, 1, "a", 1 * MIB + 3, 100000);
	put_object(j, 2, "b", 1, 1);
	flush(j);
	close_journal(j);
	j = open_at(p, 16ull * MIB);
	cr_assert_eq(journal_n_replayed(j), 2);
	for (size_t i = 0; i < 2; i++)
		cr_assert(bytes_match(j, journal_replayed(j, i)));
	close_journal(j);
	unlink(p);
	ramfs_umount(mnt);
}

Test(journal, foreign_file_and_missing_directory_are_refused)
{
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	cr_assert_eq(write(fd, "#!/bin/sh\necho not a journal\n", 29), 29);
	close(fd);
	struct journal_config cfg = {.path = path, .size_limit = 16ull * MIB};
	char err[256] = "";
	cr_assert_null(journal_open(&cfg, &ring, err, sizeof(err)));
	cr_assert_not_null(strstr(err, "not a ringcache journal"), "%s", err);
	cfg.path = "/nonexistent-rc-dir/journal";
	cr_assert_null(journal_open(&cfg, &ring, err, sizeof(err)));
	cr_assert_not_null(strstr(err, "No such file or directory"), "%s", err);
	cfg.path = path;
	cfg.size_limit = 4096;
	cr_assert_null(journal_open(&cfg, &ring, err, sizeof(err)));
}
