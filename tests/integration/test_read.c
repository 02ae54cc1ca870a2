/* test_read.c - the read path end to end: a real ringcached in front of the
 * real S3 server, clients attached through include/ringcache.h, every
 * byte checked against tools/dataset. Each test starts its own daemon with
 * its own socket, config and S3 keys, so tests may run in parallel.
 *
 * Forked children (several clients, other uids, killed clients) never use
 * Criterion: they report through their exit status and stderr. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)
#define BLOCK MiB
#define CHUNK (4u * MiB)
#define MAX_EXT 8

static struct fx_daemon D;
static struct ds_spec S;

static void start_default(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	fx_daemon_start(&D, NULL);
}

/* Called at the end of each test body: Criterion ignores assertions made
 * in .fini, and a daemon that crashes or leaks must fail the test. */
static void stop_daemon(void)
{
	bool leaked = fx_daemon_log_contains(&D, fx_env()->secret_key);

	fx_daemon_stop(&D);
	cr_assert(!leaked, "the daemon's log contains the S3 secret key");
}

/* .fini: a test that failed early leaves its daemon running. */
static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

static void attach(struct rc_client *c, const char *sock)
{
	struct rc_attach_opts o = { .gpu = -1, .numa_node = -1 };
	int r = rc_attach(c, sock, &o);

	cr_assert_eq(r, 0, "rc_attach(%s): %s", sock, rc_strerror(r));
}

static int dataset_id(struct rc_client *c, const char *name)
{
	int id = rc_dataset(c, name);

	cr_assert_geq(id, 0, "rc_dataset(%s): %s", name, rc_strerror(id));
	return id;
}

static int open_ds(struct rc_client *c, int ds, size_t i, struct rc_stat *st)
{
	char key[DS_KEY_MAX];
	int h = rc_open(c, ds, ds_key(&S, i, key), st);

	cr_assert_geq(h, 0, "rc_open(%s): %s", key, rc_strerror(h));
	if (st)
		cr_assert_eq(st->size, ds_size(&S, i),
			     "rc_open(%s): size %llu, want %llu", key,
			     (unsigned long long)st->size,
			     (unsigned long long)ds_size(&S, i));
	return h;
}

/* ---- verification usable in forked children (no Criterion) -------------- */

/* Zero-copy reads [off, off+len) of object i through rc_read, compares
 * every extent and releases its lease. Returns bytes read or a negated
 * errno; -EILSEQ for wrong bytes (msg says where). */
static int64_t zc_read_check(struct rc_client *c, uint32_t h, size_t i,
			     uint64_t off, uint64_t len, char *msg,
			     size_t mlen)
{
	uint64_t done = 0;

	while (done < len) {
		struct rc_extent ext[MAX_EXT];
		int n = rc_read(c, h, off + done, len - done, ext, MAX_EXT);
		uint64_t got = 0;

		if (n < 0) {
			snprintf(msg, mlen, "rc_read(off %llu): %s",
				 (unsigned long long)(off + done),
				 rc_strerror(n));
			return n;
		}
		if (n == 0)
			break; /* EOF */
		for (int e = 0; e < n; e++) {
			int64_t at = ext[e].data ?
				fx_ds_mismatch(&S, i, off + done + got,
					       ext[e].data, ext[e].len) : 0;
			int rr = ext[e].lease == RC_NO_LEASE ?
				0 : rc_release(c, ext[e].lease);

			if (at >= 0) {
				snprintf(msg, mlen, "zero-copy bytes differ at "
					 "offset %lld (extent %d of %d)%s",
					 (long long)at, e, n,
					 ext[e].data ? "" : ": NULL data");
				return -EILSEQ;
			}
			if (rr != 0) {
				snprintf(msg, mlen, "rc_release(%u): %s",
					 ext[e].lease, rc_strerror(rr));
				return rr;
			}
			got += ext[e].len;
		}
		if (got == 0) {
			snprintf(msg, mlen, "rc_read returned %d empty "
				 "extents at %llu", n,
				 (unsigned long long)(off + done));
			return -EPROTO;
		}
		done += got;
	}
	return (int64_t)done;
}

/* The same through READ_INTO into a registered buffer of bufsize bytes. */
static int64_t into_read_check(struct rc_client *c, uint32_t h, size_t i,
			       uint64_t off, uint64_t len, int bi,
			       const uint8_t *buf, size_t bufsize,
			       uint64_t buf_off, char *msg, size_t mlen)
{
	uint64_t done = 0;

	while (done < len) {
		uint64_t want = len - done;
		ssize_t n;
		int64_t at;

		if (want > bufsize - buf_off)
			want = bufsize - buf_off;
		n = rc_read_into(c, h, off + done, want, (uint32_t)bi, buf_off);
		if (n < 0) {
			snprintf(msg, mlen, "rc_read_into(off %llu): %s",
				 (unsigned long long)(off + done),
				 rc_strerror((int)n));
			return n;
		}
		if (n == 0)
			break;
		if ((uint64_t)n > want) {
			snprintf(msg, mlen, "rc_read_into returned %zd > %llu",
				 n, (unsigned long long)want);
			return -EPROTO;
		}
		at = fx_ds_mismatch(&S, i, off + done, buf + buf_off, (size_t)n);
		if (at >= 0) {
			snprintf(msg, mlen, "READ_INTO bytes differ at offset "
				 "%lld", (long long)at);
			return -EILSEQ;
		}
		done += (uint64_t)n;
	}
	return (int64_t)done;
}

/* Opens object i and checks it whole; zero-copy or READ_INTO. */
static int verify_object(struct rc_client *c, int ds, size_t i, bool into,
			 int bi, const uint8_t *buf, size_t bufsize,
			 char *msg, size_t mlen)
{
	char key[DS_KEY_MAX];
	struct rc_stat st;
	uint64_t size = ds_size(&S, i);
	int h = rc_open(c, ds, ds_key(&S, i, key), &st);
	int64_t r;
	int n = 0;

	if (h < 0) {
		snprintf(msg, mlen, "rc_open(%s): %s", key, rc_strerror(h));
		return h;
	}
	if (st.size != size) {
		snprintf(msg, mlen, "%s: size %llu, want %llu", key,
			 (unsigned long long)st.size, (unsigned long long)size);
		return -EPROTO;
	}
	if (into)
		r = into_read_check(c, (uint32_t)h, i, 0, size, bi, buf,
				    bufsize, i % 64, msg, mlen);
	else
		r = zc_read_check(c, (uint32_t)h, i, 0, size, msg, mlen);
	if (r >= 0 && (uint64_t)r != size) {
		snprintf(msg, mlen, "read %lld of %llu bytes", (long long)r,
			 (unsigned long long)size);
		r = -EPROTO;
	}
	if (r >= 0) {
		struct rc_extent ext[1];

		n = rc_read(c, (uint32_t)h, size, 100, ext, 1);
		if (n != 0) {
			snprintf(msg, mlen, "read at EOF gave %d, want 0", n);
			r = -EPROTO;
		}
	}
	if (r < 0) {
		size_t l = strlen(msg);
		snprintf(msg + l, mlen - l, " [object %s]", key);
	}
	n = rc_close(c, (uint32_t)h);
	if (r >= 0 && n != 0) {
		snprintf(msg, mlen, "rc_close(%s): %s", key, rc_strerror(n));
		return n;
	}
	return r < 0 ? (int)r : 0;
}

static void verify_all(bool into)
{
	struct rc_client c;
	size_t bufsize = CHUNK + 64;
	void *buf = NULL;
	int bi = -1, ds;
	char msg[512] = "";

	attach(&c, D.socket_path);
	ds = dataset_id(&c, "ds");
	if (into) {
		bi = rc_alloc_buffer(&c, bufsize, &buf);
		cr_assert_geq(bi, 0, "rc_alloc_buffer: %s", rc_strerror(bi));
	}
	for (size_t i = 0; i < ds_count(&S); i++) {
		int r = verify_object(&c, ds, i, into, bi, buf, bufsize, msg,
				      sizeof(msg));

		cr_assert_eq(r, 0, "%s", msg);
	}
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_leases_active"),
		     0, "leases left after every extent was released");
	rc_detach(&c);
}

Test(read, every_byte_zero_copy, .init = start_default, .fini = kill_daemon,
     .timeout = 240)
{
	verify_all(false);
	stop_daemon();
}

Test(read, every_byte_read_into, .init = start_default, .fini = kill_daemon,
     .timeout = 240)
{
	verify_all(true);
	stop_daemon();
}

/* ---- the arenas' prefault reserve (arena_prefault) ----------------------- */

static int64_t stat_or_zero(const char *name)
{
	int64_t v = fx_stat_value(D.socket_path, name);
	return v > 0 ? v : 0;
}

/* The digest threads populate arena pages ahead of the fetches and the
 * fetched blocks land on them (bytes charged on queued pages count);
 * every byte still equals the dataset's, block edges included. With
 * arena_prefault = 0 nothing is queued: the counters follow the key. */
Test(read, prefault_reserve_is_used_and_bytes_equal, .fini = kill_daemon,
     .timeout = 240)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.daemon_extra = "arena_prefault = 8M";
	fx_daemon_start(&D, NULL);
	verify_all(false);
	int64_t queued = stat_or_zero("ringcache_arena_prefault_bytes_total");
	int64_t used = stat_or_zero("ringcache_arena_prefault_used_bytes_total");
	cr_assert_gt(used, 0, "no fetched block landed on the reserve "
		     "(queued %lld)", (long long)queued);
	cr_assert_leq(used, queued);
	stop_daemon();

	fx_daemon_init(&D);
	D.daemon_extra = "arena_prefault = 0";
	fx_daemon_start(&D, NULL);
	struct rc_client c;
	char msg[512] = "";
	attach(&c, D.socket_path);
	int ds = dataset_id(&c, "ds");
	for (size_t i = 0; i < 4 && i < ds_count(&S); i++)
		cr_assert_eq(verify_object(&c, ds, i, false, -1, NULL, 0, msg,
					   sizeof(msg)), 0, "%s", msg);
	rc_detach(&c);
	cr_assert_eq(stat_or_zero("ringcache_arena_prefault_bytes_total"), 0);
	cr_assert_eq(stat_or_zero("ringcache_arena_prefault_used_bytes_total"),
		     0);
	stop_daemon();
}

/* SIGTERM while populates may be queued or running (a reserve larger
 * than the reads, stopped right after them): the daemon exits 0, and in
 * the sanitizer builds without a report (fx_daemon_stop checks both). */
Test(read, stop_during_prefault_exits_clean, .fini = kill_daemon,
     .timeout = 240)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.daemon_extra = "arena_prefault = 64M";
	fx_daemon_start(&D, NULL);
	struct rc_client c;
	char msg[512] = "";
	attach(&c, D.socket_path);
	int ds = dataset_id(&c, "ds");
	cr_assert_eq(verify_object(&c, ds, 0, false, -1, NULL, 0, msg,
				   sizeof(msg)), 0, "%s", msg);
	cr_assert_gt(stat_or_zero("ringcache_arena_prefault_bytes_total"), 0);
	rc_detach(&c);
	stop_daemon();
}

/* ---- edges ---------------------------------------------------------------- */

/* One raw SQE through the ring; returns its completion. */
static struct rc_cqe raw_one(struct rc_client *c, const struct rc_sqe *tmpl)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	struct rc_cqe *cqe = NULL, out;
	int r;

	cr_assert_not_null(sqe, "SQ ring full");
	*sqe = *tmpl;
	cr_assert_eq(rc_submit(c), 1);
	r = rc_wait_cqe(c, &cqe);
	cr_assert_eq(r, 0, "rc_wait_cqe: %s", rc_strerror(r));
	out = *cqe;
	rc_cqe_seen(c);
	cr_assert_eq(out.user_data, tmpl->user_data,
		     "completion for user_data %llu, want %llu",
		     (unsigned long long)out.user_data,
		     (unsigned long long)tmpl->user_data);
	return out;
}

/* Checks rc_read and rc_read_into of [off, off+len) return exactly
 * `want` correct bytes. */
static void check_range(struct rc_client *c, uint32_t h, size_t i,
			uint64_t off, uint64_t len, uint64_t want, int bi,
			const uint8_t *buf, size_t bufsize)
{
	char msg[512] = "";
	int64_t r = zc_read_check(c, h, i, off, len, msg, sizeof(msg));

	cr_assert_eq(r, (int64_t)want, "zero-copy [%llu,+%llu): got %lld "
		     "want %llu %s", (unsigned long long)off,
		     (unsigned long long)len, (long long)r,
		     (unsigned long long)want, msg);
	if (len > bufsize - 7)
		return;
	r = into_read_check(c, h, i, off, len, bi, buf, bufsize, 7, msg,
			    sizeof(msg));
	cr_assert_eq(r, (int64_t)want, "READ_INTO [%llu,+%llu): got %lld "
		     "want %llu %s", (unsigned long long)off,
		     (unsigned long long)len, (long long)r,
		     (unsigned long long)want, msg);
}

static void release_if_leased(struct rc_client *c, const struct rc_cqe *cqe)
{
	if (cqe->res >= 0 && cqe->lease != RC_NO_LEASE) {
		int r = rc_release(c, cqe->lease);

		cr_assert_eq(r, 0, "rc_release(%u): %s", cqe->lease,
			     rc_strerror(r));
	}
}

/* A raw READ: bytes returned must be exactly `want` and correct. */
static void check_raw_read(struct rc_client *c, uint32_t h, size_t i,
			   uint64_t off, uint64_t len, int32_t want)
{
	struct rc_sqe s = { 0 };
	struct rc_cqe cqe;

	rc_prep_read(&s, h, off, len, 0x1000 + off);
	cqe = raw_one(c, &s);
	cr_assert_eq(cqe.res, want, "READ [%llu,+%llu): res %d (%s), want %d",
		     (unsigned long long)off, (unsigned long long)len, cqe.res,
		     cqe.res < 0 ? rc_strerror(cqe.res) : "bytes", want);
	if (want > 0) {
		const void *data = rc_cqe_data(c, &cqe);

		cr_assert_not_null(data, "READ completion outside the arenas");
		cr_assert_neq(cqe.lease, RC_NO_LEASE, "READ without a lease");
		fx_assert_ds_bytes(&S, i, off, data, (size_t)cqe.res, "READ");
	}
	release_if_leased(c, &cqe);
}

Test(read, edges_and_block_boundaries, .init = start_default,
     .fini = kill_daemon, .timeout = 60)
{
	struct rc_client c;
	size_t bufsize = 3 * MiB;
	void *buf;
	struct rc_stat st;
	int ds, bi, h;
	size_t i;

	attach(&c, D.socket_path);
	ds = dataset_id(&c, "ds");
	bi = rc_alloc_buffer(&c, bufsize, &buf);
	cr_assert_geq(bi, 0, "rc_alloc_buffer: %s", rc_strerror(bi));

	/* 0-byte object: everything reads 0. */
	i = fx_ds_find(&S, "edge/empty");
	h = open_ds(&c, ds, i, &st);
	check_range(&c, (uint32_t)h, i, 0, 100, 0, bi, buf, bufsize);
	check_raw_read(&c, (uint32_t)h, i, 0, 100, 0);
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);

	/* 1-byte object. */
	i = fx_ds_find(&S, "edge/one");
	h = open_ds(&c, ds, i, &st);
	check_range(&c, (uint32_t)h, i, 0, 100, 1, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, 1, 10, 0, bi, buf, bufsize);
	check_raw_read(&c, (uint32_t)h, i, 0, 1, 1);
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);

	/* Exactly one block. */
	i = fx_ds_find(&S, "edge/block");
	h = open_ds(&c, ds, i, &st);
	check_range(&c, (uint32_t)h, i, 0, 2 * MiB, MiB, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, MiB - 1, 10, 1, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, MiB, 1, 0, bi, buf, bufsize);
	check_raw_read(&c, (uint32_t)h, i, 0, 2 * MiB, (int32_t)MiB);
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);

	/* One block and one byte: the second block holds one byte. */
	i = fx_ds_find(&S, "edge/block-plus-one");
	h = open_ds(&c, ds, i, &st);
	check_range(&c, (uint32_t)h, i, MiB, 10, 1, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, MiB - 6, 100, 7, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, 0, MiB + 1, MiB + 1, bi, buf, bufsize);
	check_raw_read(&c, (uint32_t)h, i, 0, 2 * MiB, (int32_t)MiB);
	check_raw_read(&c, (uint32_t)h, i, MiB, 2 * MiB, 1);
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);

	/* A large object: unaligned ranges, boundaries, EOF, past EOF. */
	i = fx_ds_find(&S, "large/1.bin");
	h = open_ds(&c, ds, i, &st);
	uint64_t size = st.size;
	check_range(&c, (uint32_t)h, i, 1, 1, 1, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, 4095, 4097, 4097, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, MiB - 100, 200, 200, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, 3 * MiB + 7, 2 * MiB + 3, 2 * MiB + 3,
		    bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, size - 5, 100, 5, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, size, 1, 0, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, size + 1, 1, 0, bi, buf, bufsize);
	check_range(&c, (uint32_t)h, i, UINT64_MAX / 2, 10, 0, bi, buf,
		    bufsize);
	check_range(&c, (uint32_t)h, i, 100, 0, 0, bi, buf, bufsize);
	struct rc_extent ext[MAX_EXT];
	int n = rc_read(&c, (uint32_t)h, 100, 0, ext, MAX_EXT);
	cr_assert_eq(n, 0, "rc_read of 0 bytes: %d", n);
	ssize_t got = rc_read_into(&c, (uint32_t)h, 100, 0, (uint32_t)bi, 0);
	cr_assert_eq(got, 0, "rc_read_into of 0 bytes: %zd", got);
	/* A raw READ completes short at the block boundary. */
	check_raw_read(&c, (uint32_t)h, i, MiB - 100, 200, 100);
	check_raw_read(&c, (uint32_t)h, i, MiB, 100, 100);
	check_raw_read(&c, (uint32_t)h, i, 5 * MiB + 3, 4 * MiB,
		       (int32_t)(MiB - 3));
	check_raw_read(&c, (uint32_t)h, i, size - 1, 100, 1);
	check_raw_read(&c, (uint32_t)h, i, size, 100, 0);
	check_raw_read(&c, (uint32_t)h, i, 12345, 0, 0);
	/* rc_read across a boundary gives one extent per block. */
	n = rc_read(&c, (uint32_t)h, MiB - 100, 200, ext, MAX_EXT);
	cr_assert_eq(n, 2, "rc_read across a boundary: %d extents, want 2", n);
	cr_assert_eq(ext[0].len, 100);
	cr_assert_eq(ext[1].len, 100);
	fx_assert_ds_bytes(&S, i, MiB - 100, ext[0].data, 100, "extent 0");
	fx_assert_ds_bytes(&S, i, MiB, ext[1].data, 100, "extent 1");
	cr_assert_eq(rc_release(&c, ext[0].lease), 0);
	cr_assert_eq(rc_release(&c, ext[1].lease), 0);
	/* Releasing twice is an error, not a double free. */
	n = rc_release(&c, ext[1].lease);
	cr_assert_eq(n, -EBADF, "second release of lease %u: %d (%s)",
		     ext[1].lease, n, rc_strerror(n));
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	rc_detach(&c);
	stop_daemon();
}

Test(read, second_read_is_a_hit, .init = start_default, .fini = kill_daemon,
     .timeout = 60)
{
	struct rc_client c;
	size_t bufsize = MiB;
	void *buf;
	char msg[512] = "";
	int ds, bi, h;
	size_t i = 7; /* a small object: one block, no read-ahead to race */
	int64_t hits0, miss0, gets0, hits1, gets1;
	int64_t r;

	attach(&c, D.socket_path);
	ds = dataset_id(&c, "ds");
	bi = rc_alloc_buffer(&c, bufsize, &buf);
	cr_assert_geq(bi, 0, "rc_alloc_buffer: %s", rc_strerror(bi));
	h = open_ds(&c, ds, i, NULL);

	miss0 = fx_stat_value(D.socket_path, "ringcache_cache_misses_total");
	r = into_read_check(&c, (uint32_t)h, i, 0, ds_size(&S, i), bi, buf,
			    bufsize, 0, msg, sizeof(msg));
	cr_assert_eq(r, (int64_t)ds_size(&S, i), "first read: %s", msg);
	cr_assert_gt(fx_stat_value(D.socket_path,
				   "ringcache_cache_misses_total"), miss0,
		     "a cold read must count a miss");
	hits0 = fx_stat_value(D.socket_path, "ringcache_cache_hits_total");
	gets0 = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	cr_assert_gt(gets0, 0, "a cold read must GET from S3");

	memset(buf, 0, bufsize);
	r = into_read_check(&c, (uint32_t)h, i, 0, ds_size(&S, i), bi, buf,
			    bufsize, 0, msg, sizeof(msg));
	cr_assert_eq(r, (int64_t)ds_size(&S, i), "second read: %s", msg);
	r = zc_read_check(&c, (uint32_t)h, i, 0, ds_size(&S, i), msg,
			  sizeof(msg));
	cr_assert_eq(r, (int64_t)ds_size(&S, i), "zero-copy reread: %s", msg);

	struct rc_sqe s = { 0 };
	rc_prep_read(&s, (uint32_t)h, 1000, 100, 77);
	struct rc_cqe cqe = raw_one(&c, &s);
	cr_assert_eq(cqe.res, 100, "READ: %d", cqe.res);
	cr_assert(cqe.flags & RC_CQE_F_HIT, "a cached READ lacks RC_CQE_F_HIT");
	release_if_leased(&c, &cqe);

	hits1 = fx_stat_value(D.socket_path, "ringcache_cache_hits_total");
	gets1 = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	cr_assert_gt(hits1, hits0, "cache_hits_total did not grow (%lld)",
		     (long long)hits1);
	cr_assert_eq(gets1, gets0, "s3_get_total grew from %lld to %lld on "
		     "cached reads", (long long)gets0, (long long)gets1);
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
	rc_detach(&c);
	stop_daemon();
}

/* ---- several processes ----------------------------------------------------- */

#define N_PROCS 8

/* Child k verifies objects i % N_PROCS == k, alternating the two paths. */
static int child_verify_share(const char *sock, int k)
{
	struct rc_attach_opts o = { .gpu = k % 2, .numa_node = -1 };
	struct rc_client c;
	size_t bufsize = CHUNK + 64;
	void *buf = NULL;
	char msg[512] = "";
	int r, ds, bi;

	r = rc_attach(&c, sock, &o);
	if (r < 0) {
		fprintf(stderr, "child %d: rc_attach: %s\n", k, rc_strerror(r));
		return 2;
	}
	ds = rc_dataset(&c, "ds");
	bi = rc_alloc_buffer(&c, bufsize, &buf);
	if (ds < 0 || bi < 0) {
		fprintf(stderr, "child %d: rc_dataset %d, rc_alloc_buffer %d\n",
			k, ds, bi);
		return 3;
	}
	for (size_t i = (size_t)k; i < ds_count(&S); i += N_PROCS) {
		r = verify_object(&c, ds, i, (i / N_PROCS) % 2, bi, buf,
				  bufsize, msg, sizeof(msg));
		if (r != 0) {
			fprintf(stderr, "child %d: %s\n", k, msg);
			return 4;
		}
	}
	rc_detach(&c);
	return 0;
}

Test(read, eight_processes_at_once, .init = start_default,
     .fini = kill_daemon, .timeout = 240)
{
	pid_t pids[N_PROCS];
	int failed = 0;

	fflush(NULL);
	for (int k = 0; k < N_PROCS; k++) {
		pids[k] = fork();
		cr_assert_geq(pids[k], 0, "fork: %s", strerror(errno));
		if (pids[k] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			_exit(child_verify_share(D.socket_path, k));
		}
	}
	for (int k = 0; k < N_PROCS; k++) {
		int status;

		cr_assert_eq(waitpid(pids[k], &status, 0), pids[k]);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "client %d: status 0x%x\n", k, status);
			failed++;
		}
	}
	cr_assert_eq(failed, 0, "%d of %d clients failed (see stderr)", failed,
		     N_PROCS);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_sessions_active", 0,
				  30000), 0, "sessions left after the clients");
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_leases_active"), 0);
	stop_daemon();
}

/* ---- a killed client -------------------------------------------------------- */

/* Holds leases on one object and leaves cold READs in flight on another,
 * then says 'R' on fd and waits to be killed. */
static void child_hold_and_wait(const char *sock, int fd)
{
	struct rc_attach_opts o = { .gpu = -1, .numa_node = -1 };
	struct rc_client c;
	struct rc_extent ext[4];
	char key[DS_KEY_MAX];
	char status = 'F';
	int ds, h0, h1, n;

	if (rc_attach(&c, sock, &o) < 0 || (ds = rc_dataset(&c, "ds")) < 0)
		goto out;
	h0 = rc_open(&c, ds, ds_key(&S, fx_ds_find(&S, "large/0.bin"), key),
		     NULL);
	h1 = rc_open(&c, ds, ds_key(&S, fx_ds_find(&S, "large/2.bin"), key),
		     NULL);
	if (h0 < 0 || h1 < 0) {
		fprintf(stderr, "killed child: open %d %d\n", h0, h1);
		goto out;
	}
	n = rc_read(&c, (uint32_t)h0, 0, 3 * MiB, ext, 4);
	if (n != 3) {
		fprintf(stderr, "killed child: rc_read gave %d, want 3\n", n);
		goto out;
	}
	for (int k = 0; k < 8; k++) {
		struct rc_sqe *sqe = rc_get_sqe(&c);

		if (!sqe)
			break;
		rc_prep_read(sqe, (uint32_t)h1, (uint64_t)(10 + 4 * k) * MiB,
			     MiB, 100 + (uint64_t)k);
	}
	if (rc_submit(&c) <= 0)
		goto out;
	status = 'R';
out:
	if (write(fd, &status, 1) != 1)
		_exit(5);
	for (;;)
		pause();
}

Test(read, killed_client_leaves_no_lease, .init = start_default,
     .fini = kill_daemon, .timeout = 60)
{
	int pfd[2];
	char status = 0;
	pid_t pid;
	struct pollfd p;
	int64_t v;

	cr_assert_eq(pipe(pfd), 0);
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pfd[0]);
		child_hold_and_wait(D.socket_path, pfd[1]);
	}
	close(pfd[1]);
	p = (struct pollfd){ .fd = pfd[0], .events = POLLIN };
	if (poll(&p, 1, 30000) != 1 || read(pfd[0], &status, 1) != 1 ||
	    status != 'R') {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		cr_assert_fail("the client did not get its leases (status %c)",
			       status ? status : '?');
	}
	close(pfd[0]);
	v = fx_stat_value(D.socket_path, "ringcache_leases_active");
	cr_expect_geq(v, 3, "the client holds 3 leases, stats say %lld",
		      (long long)v);
	cr_expect_geq(fx_stat_value(D.socket_path, "ringcache_sessions_active"),
		      1);

	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	v = fx_wait_stat(D.socket_path, "ringcache_leases_active", 0, 30000);
	cr_assert_eq(v, 0, "%lld leases survive their killed client",
		     (long long)v);
	v = fx_wait_stat(D.socket_path, "ringcache_sessions_active", 0, 30000);
	cr_assert_eq(v, 0, "%lld sessions survive their killed client",
		     (long long)v);

	/* The daemon still serves, and the blocks are evictable again. */
	struct rc_client c;
	char msg[512] = "";
	size_t i = fx_ds_find(&S, "large/0.bin");
	attach(&c, D.socket_path);
	int ds = dataset_id(&c, "ds");
	int h = open_ds(&c, ds, i, NULL);
	int64_t r = zc_read_check(&c, (uint32_t)h, i, 0, 4 * MiB, msg,
				  sizeof(msg));
	cr_assert_eq(r, 4 * MiB, "read after the kill: %s", msg);
	rc_detach(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	stop_daemon();
}

/* ---- ACLs: a client of another uid ------------------------------------------- */

static char acl_dir[64];

/* Copies of objects 5 and 6 under a prefix of their own: the restricted
 * datasets may not nest in the public one (a config that did would serve
 * their keys to everyone through it, and is refused). */
static void copy_acl_objects(char *sub, size_t len)
{
	char tag[64], key[DS_KEY_MAX], full[512];
	fx_unique(tag, sizeof(tag), "acl");
	snprintf(sub, len, "%s/", tag);
	for (size_t i = 5; i <= 6; i++) {
		size_t size = (size_t)ds_size(&S, i);
		uint8_t *data = malloc(size);
		cr_assert_not_null(data);
		ds_fill(&S, i, 0, data, size);
		snprintf(full, sizeof(full), "%s%s%s", fx_env()->prefix, sub,
			 ds_key(&S, i, key));
		cr_assert_eq(fx_put_object(full, data, size), 0, "PUT %s", full);
		free(data);
	}
}

static void start_acl(void)
{
	char extra[2048], sec[1024], sub[128];

	ds_spec_default(&S);
	copy_acl_objects(sub, sizeof(sub));
	fx_daemon_init(&D);
	/* The run's tmp dir may be 0700: the socket must be reachable by the
	 * unprivileged child, so it lives in a world-traversable dir. */
	snprintf(acl_dir, sizeof(acl_dir), "/tmp/rc-acl-XXXXXX");
	cr_assert(mkdtemp(acl_dir), "mkdtemp: %s", strerror(errno));
	cr_assert_eq(chmod(acl_dir, 0755), 0);
	D.socket_dir = acl_dir;
	fx_dataset_section(extra, sizeof(extra), "rootonly", sub,
			   "allow_uids = 0");
	fx_dataset_section(sec, sizeof(sec), "owneronly", sub, "");
	strncat(extra, sec, sizeof(extra) - strlen(extra) - 1);
	fx_daemon_start(&D, extra);
}

static void cleanup_acl(void)
{
	fx_daemon_kill(&D);
	unlink(D.socket_path);
	rmdir(acl_dir);
}

static int find_listed_id(const struct rc_client *c, const char *name)
{
	for (uint32_t k = 0; k < c->n_datasets; k++)
		if (strcmp(c->datasets[k].name, name) == 0)
			return (int)c->datasets[k].id;
	return -1;
}

/* As uid/gid 65534: returns 0 when every refusal and the one permitted
 * read behave; else a distinct code with a line on stderr. */
static int child_nobody(const char *sock)
{
	struct rc_attach_opts o = { .gpu = -1, .numa_node = -1 };
	struct rc_client c;
	char key[DS_KEY_MAX], msg[512] = "";
	int r, id, slot, ds;

	if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) {
		perror("drop privileges");
		return 10;
	}
	r = rc_attach(&c, sock, &o);
	if (r < 0) {
		fprintf(stderr, "nobody: rc_attach: %s\n", rc_strerror(r));
		return 11;
	}
	r = rc_dataset(&c, "rootonly");
	if (r != -EACCES) {
		fprintf(stderr, "nobody: rc_dataset(rootonly) = %d, want "
			"-EACCES\n", r);
		return 12;
	}
	r = rc_dataset(&c, "owneronly");
	if (r != -EACCES) {
		fprintf(stderr, "nobody: rc_dataset(owneronly) = %d, want "
			"-EACCES (no allow_* admits only the daemon's uid)\n",
			r);
		return 13;
	}
	if (rc_dataset(&c, "no-such-dataset") != -ENOENT) {
		fprintf(stderr, "nobody: unknown dataset is not -ENOENT\n");
		return 14;
	}
	/* Forge an OPEN on the refused dataset's id. */
	id = find_listed_id(&c, "rootonly");
	slot = rc_arg_get(&c);
	if (id < 0 || slot < 0) {
		fprintf(stderr, "nobody: id %d slot %d\n", id, slot);
		return 15;
	}
	ds_key(&S, 3, key);
	memcpy(rc_arg_ptr(&c, slot), key, strlen(key));
	struct rc_sqe *sqe = rc_get_sqe(&c);
	struct rc_cqe *cqe;
	sqe->opcode = RC_OP_OPEN;
	sqe->dataset = (uint32_t)id;
	sqe->arg = (uint16_t)slot;
	sqe->arg_len = (uint32_t)strlen(key);
	sqe->user_data = 4242;
	rc_submit(&c);
	if (rc_wait_cqe(&c, &cqe) != 0 || cqe->user_data != 4242 ||
	    cqe->res != -EACCES) {
		fprintf(stderr, "nobody: forged OPEN on rootonly: res %d\n",
			cqe ? cqe->res : 0);
		return 16;
	}
	rc_cqe_seen(&c);
	rc_arg_put(&c, slot);
	r = rc_open(&c, id, key, NULL);
	if (r != -EACCES) {
		fprintf(stderr, "nobody: rc_open(rootonly) = %d\n", r);
		return 17;
	}
	/* The world-readable dataset works. */
	ds = rc_dataset(&c, "ds");
	if (ds < 0) {
		fprintf(stderr, "nobody: rc_dataset(ds) = %d\n", ds);
		return 18;
	}
	r = verify_object(&c, ds, 3, false, -1, NULL, 0, msg, sizeof(msg));
	if (r != 0) {
		fprintf(stderr, "nobody: reading ds: %s\n", msg);
		return 19;
	}
	rc_detach(&c);
	return 0;
}

Test(read, acl_refuses_other_uid, .init = start_acl, .fini = cleanup_acl,
     .timeout = 60)
{
	struct rc_client c;
	char msg[512] = "";
	int status, ds;
	pid_t pid;

	if (geteuid() != 0)
		cr_skip_test("needs root to run a client as uid 65534");
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(child_nobody(D.socket_path));
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the uid 65534 client failed with status 0x%x (codes in "
		  "child_nobody; details on stderr)", status);

	/* Root may read both restricted datasets. */
	attach(&c, D.socket_path);
	ds = dataset_id(&c, "rootonly");
	cr_assert_eq(verify_object(&c, ds, 5, false, -1, NULL, 0, msg,
				   sizeof(msg)), 0, "%s", msg);
	ds = dataset_id(&c, "owneronly");
	cr_assert_eq(verify_object(&c, ds, 6, false, -1, NULL, 0, msg,
				   sizeof(msg)), 0, "%s", msg);
	rc_detach(&c);
	stop_daemon();
}

/* ---- S3 errors ------------------------------------------------------------- */

#define WRONG_SECRET "h6WrongSecretKeyDoNotLog0123456789"

static void start_wrong_secret(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.secret_key = WRONG_SECRET;
	fx_daemon_start(&D, NULL);
}

Test(read, wrong_secret_is_keyrejected, .init = start_wrong_secret,
     .fini = kill_daemon, .timeout = 60)
{
	struct rc_client c;
	char key[DS_KEY_MAX];
	int ds, h;

	attach(&c, D.socket_path);
	ds = dataset_id(&c, "ds");
	h = rc_open(&c, ds, ds_key(&S, 0, key), NULL);
	cr_expect_eq(h, -EKEYREJECTED, "rc_open with a wrong secret: %d (%s)",
		     h, rc_strerror(h));
	rc_detach(&c);
	fx_daemon_stop(&D);
	cr_assert(!fx_daemon_log_contains(&D, WRONG_SECRET),
		  "the daemon logged its secret key");
}

Test(read, missing_key_is_enoent, .init = start_default, .fini = kill_daemon,
     .timeout = 60)
{
	struct rc_client c;
	char key[128];
	int ds, h;

	attach(&c, D.socket_path);
	ds = dataset_id(&c, "ds");
	fx_unique(key, sizeof(key), "no/such/key");
	h = rc_open(&c, ds, key, NULL);
	cr_assert_eq(h, -ENOENT, "rc_open(%s): %d (%s)", key, h,
		     rc_strerror(h));
	/* A "directory" is not an object either. */
	h = rc_open(&c, ds, "small", NULL);
	cr_assert_eq(h, -ENOENT, "rc_open(small): %d (%s)", h, rc_strerror(h));
	rc_detach(&c);
	stop_daemon();
}

/* ---- an object changed behind the cache ------------------------------------ */

static void start_scratch(void)
{
	char extra[1024];

	ds_spec_default(&S);
	fx_daemon_init(&D);
	fx_dataset_section(extra, sizeof(extra), "scratch", "h6-scratch/",
			   "allow_uids = *");
	fx_daemon_start(&D, extra);
}

/* 3 MiB of version v: the dataset stream of object v (unbounded). */
static uint8_t *make_version(int v)
{
	uint8_t *b = malloc(3 * MiB);

	cr_assert_not_null(b);
	ds_fill(&S, (size_t)v, 0, b, 3 * MiB);
	return b;
}

Test(read, changed_object_is_estale, .init = start_scratch,
     .fini = kill_daemon, .timeout = 60)
{
	const struct fx_env *e = fx_env();
	uint8_t *v1 = make_version(1), *v2 = make_version(2);
	char rel[128], full[512];
	struct rc_client c;
	struct rc_stat st1, st2;
	struct rc_extent ext[4];
	void *buf;
	int ds, h, n, bi;
	ssize_t r;

	cr_assert_neq(memcmp(v1, v2, 3 * MiB), 0);
	fx_unique(rel, sizeof(rel), "stale");
	snprintf(full, sizeof(full), "%sh6-scratch/%s", e->prefix, rel);
	cr_assert_eq(fx_put_object(full, v1, 3 * MiB), 0, "PUT v1");

	attach(&c, D.socket_path);
	ds = dataset_id(&c, "scratch");
	bi = rc_alloc_buffer(&c, 3 * MiB, &buf);
	cr_assert_geq(bi, 0);
	h = rc_open(&c, ds, rel, &st1);
	cr_assert_geq(h, 0, "rc_open(%s): %s", rel, rc_strerror(h));
	cr_assert_eq(st1.size, 3 * MiB);
	n = rc_read(&c, (uint32_t)h, 0, MiB, ext, 4);
	cr_assert_eq(n, 1, "block 0: %d extents (%s)", n,
		     n < 0 ? rc_strerror(n) : "");
	cr_assert_eq(ext[0].len, MiB);
	cr_assert_eq(fx_mismatch(ext[0].data, v1, MiB), -1, "block 0 != v1");
	cr_assert_eq(rc_release(&c, ext[0].lease), 0);

	cr_assert_eq(fx_put_object(full, v2, 3 * MiB), 0, "PUT v2");

	n = rc_read(&c, (uint32_t)h, 2 * MiB, MiB, ext, 4);
	if (n > 0) {
		bool is_v2 = fx_mismatch(ext[0].data, v2 + 2 * MiB,
					 ext[0].len) == -1;
		bool is_v1 = fx_mismatch(ext[0].data, v1 + 2 * MiB,
					 ext[0].len) == -1;

		for (int k = 0; k < n; k++)
			rc_release(&c, ext[k].lease);
		cr_assert(!is_v2, "the old handle returned v2 bytes: versions "
			  "mixed");
		cr_assert_fail("block 2 through the old handle gave %d extents "
			       "(%s), want -ESTALE", n,
			       is_v1 ? "v1 bytes, read ahead before the PUT" :
				       "neither version!");
	}
	cr_assert_eq(n, -ESTALE, "block 2 through the old handle: %d (%s)", n,
		     rc_strerror(n));
	r = rc_read_into(&c, (uint32_t)h, MiB, MiB, (uint32_t)bi, 0);
	cr_assert(r == -ESTALE || (r == MiB && fx_mismatch(buf, v1 + MiB,
							     MiB) == -1),
		  "block 1 through the old handle: %zd, want -ESTALE", r);
	rc_close(&c, (uint32_t)h);

	h = rc_open(&c, ds, rel, &st2);
	cr_assert_geq(h, 0, "reopen: %s", rc_strerror(h));
	cr_assert_eq(st2.size, 3 * MiB);
	cr_assert_str_neq(st1.etag, st2.etag, "ETag unchanged after the PUT");
	memset(buf, 0, 3 * MiB);
	r = rc_read_into(&c, (uint32_t)h, 0, 3 * MiB, (uint32_t)bi, 0);
	cr_assert_eq(r, 3 * MiB, "reread: %zd (%s)", r,
		     r < 0 ? rc_strerror((int)r) : "");
	ssize_t at = fx_mismatch(buf, v2, 3 * MiB);
	cr_assert_eq(at, -1, "after reopen byte %zd is not v2 (%s)", at,
		     at >= 0 && ((uint8_t *)buf)[at] == v1[at] ? "v1" : "?");
	rc_close(&c, (uint32_t)h);
	rc_detach(&c);
	free(v1);
	free(v2);
	stop_daemon();
}

/* ---- config errors ---------------------------------------------------------- */

Test(read, malformed_config_is_refused, .timeout = 60)
{
	const struct fx_env *e = fx_env();
	const char *dir = fx_tmpdir();
	char path[300], good[300], sock[200], out[4096];
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), "%s/bad.conf", dir);
	snprintf(sock, sizeof(sock), "%s/bad.sock", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "[daemon]\n"                        /* 1 */
		   "socket = %s\n"                     /* 2 */
		   "memory = 64M\n"                    /* 3 */
		   "[s3]\n"                            /* 4 */
		   "endpoint = %s\n"                   /* 5 */
		   "region = %s\n"                     /* 6 */
		   "bogus_key_h6 = 1\n"                /* 7 */
		   "[dataset ds]\n"                    /* 8 */
		   "uri = s3://%s/%sds/\n",            /* 9 */
		sock, e->endpoint, e->region, e->bucket, e->prefix);
	cr_assert_eq(fclose(f), 0);

	char *check[] = { RC_BUILD_DIR "/ringcached", "--check-config", path,
			  NULL };
	rc = fx_run(check, out, sizeof(out), 10000);
	cr_assert_eq(rc, 1, "--check-config: exit %d, want 1; output:\n%s", rc,
		     out);
	cr_assert(strstr(out, ":7:"), "no ':7:' in:\n%s", out);
	cr_assert(strstr(out, "bogus_key_h6"), "the key is not named:\n%s",
		  out);

	/* The same file without line 7 passes. */
	snprintf(good, sizeof(good), "%s/good.conf", dir);
	f = fopen(good, "w");
	cr_assert_not_null(f);
	fprintf(f, "[daemon]\nsocket = %s\nmemory = 64M\n[s3]\nendpoint = %s\n"
		   "region = %s\n\n[dataset ds]\nuri = s3://%s/%sds/\n",
		sock, e->endpoint, e->region, e->bucket, e->prefix);
	cr_assert_eq(fclose(f), 0);
	char *check_good[] = { RC_BUILD_DIR "/ringcached", "--check-config",
			       good, NULL };
	rc = fx_run(check_good, out, sizeof(out), 10000);
	cr_assert_eq(rc, 0, "--check-config of a good file: exit %d:\n%s", rc,
		     out);

	char *run[] = { RC_BUILD_DIR "/ringcached", "-c", path, NULL };
	rc = fx_run(run, out, sizeof(out), 10000);
	cr_assert(rc != 0 && rc != -1, "the daemon started on a bad config "
		  "(exit %d):\n%s", rc, out);
	cr_assert(access(sock, F_OK) != 0, "a socket appeared for a bad config");
	cr_assert(strstr(out, ":7:"), "startup error lacks ':7:':\n%s", out);
}

/* ---- wild ring entries --------------------------------------------------------- */

struct wild {
	const char *what;
	struct rc_sqe sqe;
	int32_t want;      /* expected res */
	int32_t also;      /* another acceptable res, or 1 for none */
	bool seen;
};

/* Submits every entry (in batches the SQ can hold) and checks each
 * completion by user_data. */
static void run_wild(struct rc_client *c, struct wild *w, size_t n)
{
	size_t sent = 0, done = 0;

	while (done < n) {
		struct rc_sqe *sqe;
		struct rc_cqe *cqe;
		int r;

		while (sent < n && (sqe = rc_get_sqe(c))) {
			*sqe = w[sent].sqe;
			sqe->user_data = 0xabc000 + sent;
			sent++;
		}
		rc_submit(c);
		r = rc_wait_cqe(c, &cqe);
		cr_assert_eq(r, 0, "rc_wait_cqe: %s (daemon gone?)",
			     rc_strerror(r));
		uint64_t k = cqe->user_data - 0xabc000;
		cr_assert_lt(k, sent, "completion with unknown user_data %llx",
			     (unsigned long long)cqe->user_data);
		cr_assert(!w[k].seen, "two completions for %s", w[k].what);
		w[k].seen = true;
		cr_expect(cqe->res == w[k].want || cqe->res == w[k].also,
			  "%s: res %d (%s), want %d (%s)", w[k].what, cqe->res,
			  rc_strerror(cqe->res), w[k].want,
			  rc_strerror(w[k].want));
		if (cqe->res > 0 && cqe->lease != RC_NO_LEASE &&
		    w[k].sqe.opcode == RC_OP_READ)
			rc_release(c, cqe->lease); /* tolerated success */
		rc_cqe_seen(c);
		done++;
	}
}

Test(read, wild_ring_entries_fail_alone, .init = start_default,
     .fini = kill_daemon, .timeout = 60)
{
	struct rc_client c, c2;
	size_t bufsize = MiB, i = 11;
	char msg[512] = "";
	void *buf;
	int ds, h, bi, slot;

	attach(&c, D.socket_path);
	ds = dataset_id(&c, "ds");
	bi = rc_alloc_buffer(&c, bufsize, &buf);
	cr_assert_geq(bi, 0);
	h = open_ds(&c, ds, i, NULL);
	slot = rc_arg_get(&c);
	cr_assert_geq(slot, 0);
	memset(rc_arg_ptr(&c, slot), 'k', RC_ARG_SLOT_SIZE);

	const uint32_t H = (uint32_t)h, B = (uint32_t)bi, DS = (uint32_t)ds;
	struct wild w[] = {
		{ "unknown opcode 200", { .opcode = 200 }, -EINVAL, 1 },
		{ "NOP", { .opcode = RC_OP_NOP }, 0, 1 },
		{ "NOP reserved0", { .opcode = RC_OP_NOP, .reserved0 = 1 },
		  -EINVAL, 1 },
		{ "NOP reserved1", { .opcode = RC_OP_NOP, .reserved1 = 1 },
		  -EINVAL, 1 },
		{ "NOP flags", { .opcode = RC_OP_NOP, .flags = 1 }, -EINVAL, 1 },
		{ "READ reserved0", { .opcode = RC_OP_READ, .handle = H,
		  .len = 10, .reserved0 = 7 }, -EINVAL, 1 },
		{ "READ wild handle", { .opcode = RC_OP_READ, .handle = 12345,
		  .len = 100 }, -EBADF, 1 },
		{ "RELEASE wild lease", { .opcode = RC_OP_RELEASE,
		  .handle = 999999 }, -EBADF, 1 },
		{ "CLOSE wild handle", { .opcode = RC_OP_CLOSE, .handle = 4242 },
		  -EBADF, 1 },
		{ "OPEN arg slot past arg_slots", { .opcode = RC_OP_OPEN,
		  .dataset = DS, .arg = (uint16_t)(c.arg_slots + 3),
		  .arg_len = 5 }, -EINVAL, 1 },
		{ "OPEN arg slot 65535", { .opcode = RC_OP_OPEN, .dataset = DS,
		  .arg = 65535, .arg_len = 5 }, -EINVAL, 1 },
		{ "OPEN arg_len > RC_MAX_KEY", { .opcode = RC_OP_OPEN,
		  .dataset = DS, .arg = (uint16_t)slot,
		  .arg_len = RC_MAX_KEY + 1 }, -EINVAL, 1 },
		{ "OPEN arg_len past the slot", { .opcode = RC_OP_OPEN,
		  .dataset = DS, .arg = (uint16_t)slot,
		  .arg_len = UINT32_MAX }, -EINVAL, 1 },
		{ "READ_INTO wild buf_index", { .opcode = RC_OP_READ_INTO,
		  .handle = H, .len = 100, .buf_index = 77 }, -EBADF, 1 },
		{ "READ_INTO past the buffer end", { .opcode = RC_OP_READ_INTO,
		  .handle = H, .len = 100, .buf_index = B,
		  .buf_offset = MiB - 10 }, -EFAULT, 1 },
		{ "READ_INTO buf_offset overflow", { .opcode = RC_OP_READ_INTO,
		  .handle = H, .len = 100, .buf_index = B,
		  .buf_offset = UINT64_MAX - 5 }, -EFAULT, -EINVAL },
		{ "READ_INTO len > RC_MAX_IO", { .opcode = RC_OP_READ_INTO,
		  .handle = H, .len = (uint64_t)RC_MAX_IO + 1, .buf_index = B },
		  -EINVAL, 1 },
		{ "READ offset near UINT64_MAX", { .opcode = RC_OP_READ,
		  .handle = H, .offset = UINT64_MAX - 10, .len = 100 }, 0,
		  -EINVAL },
		{ "READ_INTO offset near UINT64_MAX", { .opcode = RC_OP_READ_INTO,
		  .handle = H, .offset = UINT64_MAX - 10, .len = 100,
		  .buf_index = B }, 0, -EINVAL },
		{ "READ with a buf_index set", { .opcode = RC_OP_READ,
		  .handle = H, .len = 10, .buf_index = 3 }, -EINVAL, 1 },
	};
	size_t n = sizeof(w) / sizeof(*w);

	run_wild(&c, w, n);
	for (size_t k = 0; k < n; k++)
		cr_assert(w[k].seen, "no completion for %s", w[k].what);
	rc_arg_put(&c, slot);

	/* The session still works. */
	int64_t r = zc_read_check(&c, H, i, 0, ds_size(&S, i), msg,
				  sizeof(msg));
	cr_assert_eq(r, (int64_t)ds_size(&S, i), "READ after wild entries: %s",
		     msg);
	r = into_read_check(&c, H, i, 0, ds_size(&S, i), bi, buf, bufsize, 0,
			    msg, sizeof(msg));
	cr_assert_eq(r, (int64_t)ds_size(&S, i),
		     "READ_INTO after wild entries: %s", msg);
	/* And so does another client. */
	attach(&c2, D.socket_path);
	int ds2 = dataset_id(&c2, "ds");
	cr_assert_eq(verify_object(&c2, ds2, 12, false, -1, NULL, 0, msg,
				   sizeof(msg)), 0, "second client: %s", msg);
	rc_detach(&c2);
	rc_close(&c, H);
	rc_detach(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	stop_daemon();
}

/* open_fetch = block: an OPEN that must ask S3 asks for the first block,
 * so a small object costs one GET and no HEAD, and is then a hit. */
static void start_open_block(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.open_fetch = "block";
	fx_daemon_start(&D, NULL);
}

Test(read, open_fetching_the_first_block_saves_a_round_trip,
     .init = start_open_block, .fini = kill_daemon, .timeout = 120)
{
	struct rc_client c;
	attach(&c, D.socket_path);
	int ds = rc_dataset(&c, "ds");
	void *mem;
	int buf = rc_alloc_buffer(&c, 2 * MiB, &mem);
	cr_assert_geq(buf, 0);
	const char *keys[] = {"small/00007.bin", "edge/one", "edge/empty",
			      "edge/block", "edge/block-plus-one",
			      "large/0.bin"};
	for (unsigned k = 0; k < 6; k++) {
		size_t i = fx_ds_find(&S, keys[k]);
		int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
		int64_t heads = fx_stat_value(D.socket_path, "ringcache_s3_head_total");
		struct rc_stat st;
		int h = rc_open(&c, ds, keys[k], &st);
		cr_assert_geq(h, 0, "open %s: %s", keys[k], rc_strerror(h));
		cr_assert_eq(st.size, ds_size(&S, i), "%s: size", keys[k]);
		int64_t g = fx_stat_value(D.socket_path, "ringcache_s3_get_total") - gets;
		int64_t hd = fx_stat_value(D.socket_path, "ringcache_s3_head_total") - heads;
		if (st.size > 0)
			cr_assert(g == 1 && hd == 0, "%s: open made %lld GETs, "
				  "%lld HEADs", keys[k], (long long)g, (long long)hd);
		else /* nothing to range over: 416, then a HEAD */
			cr_assert(g == 1 && hd == 1, "%s: %lld GETs, %lld HEADs",
				  keys[k], (long long)g, (long long)hd);
		/* The first block is here: reading it asks S3 nothing. */
		uint64_t first = st.size < MiB ? st.size : MiB;
		gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
		ssize_t n = rc_read_into(&c, (uint32_t)h, 0, first, (uint32_t)buf, 0);
		cr_assert_eq(n, (ssize_t)first);
		fx_assert_ds_bytes(&S, i, 0, mem, first, keys[k]);
		cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
			     gets, "%s: the first block was fetched again", keys[k]);
		/* The rest, if any, still arrives whole and right. */
		if (st.size > first) {
			uint64_t rest = st.size - first < MiB ? st.size - first : MiB;
			n = rc_read_into(&c, (uint32_t)h, first, rest,
					 (uint32_t)buf, 0);
			cr_assert_eq(n, (ssize_t)rest);
			fx_assert_ds_bytes(&S, i, first, mem, rest, keys[k]);
		}
		rc_close(&c, (uint32_t)h);
	}
	/* Errors carry S3's answer as with HEAD. */
	cr_assert_eq(rc_open(&c, ds, "no/such/key", NULL), -ENOENT);
	rc_detach(&c);
	stop_daemon();
}

static void start_open_block_bad_secret(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.open_fetch = "block";
	D.secret_key = "definitely-not-the-secret";
	fx_daemon_start(&D, NULL);
}

Test(read, open_fetching_a_block_reports_a_wrong_secret,
     .init = start_open_block_bad_secret, .fini = kill_daemon,
     .timeout = 60)
{
	struct rc_client c;
	attach(&c, D.socket_path);
	cr_assert_eq(rc_open(&c, rc_dataset(&c, "ds"), "edge/one", NULL),
		     -EKEYREJECTED);
	rc_detach(&c);
	fx_daemon_stop(&D);
}

Test(read, open_many_opens_a_batch_and_reports_each_key,
     .init = start_default, .fini = kill_daemon, .timeout = 120)
{
	struct rc_client c;
	attach(&c, D.socket_path);
	int ds = rc_dataset(&c, "ds");
	size_t n = ds_count(&S) + 2;
	char (*names)[DS_KEY_MAX] = calloc(n, sizeof(*names));
	const char **keys = calloc(n, sizeof(*keys));
	int32_t *res = calloc(n, sizeof(*res));
	uint64_t *sizes = calloc(n, sizeof(*sizes));
	char *longkey = malloc(RC_MAX_KEY + 2);
	cr_assert(names && keys && res && sizes && longkey);
	for (size_t i = 0; i < ds_count(&S); i++)
		keys[i] = ds_key(&S, i, names[i]);
	keys[n - 2] = "no/such/key";
	memset(longkey, 'k', RC_MAX_KEY + 1);
	longkey[RC_MAX_KEY + 1] = 0;
	keys[n - 1] = longkey;
	/* More keys than arg slots: the batch refills as OPENs complete. */
	cr_assert_gt(n, c.arg_slots);
	cr_assert_eq(rc_open_many(&c, ds, keys, n, res, sizes), 0);
	for (size_t i = 0; i < ds_count(&S); i++) {
		cr_assert_geq(res[i], 0, "%s: %s", keys[i], rc_strerror(res[i]));
		cr_assert_eq(sizes[i], ds_size(&S, i), "%s: size", keys[i]);
	}
	cr_assert_eq(res[n - 2], -ENOENT);
	cr_assert_eq(res[n - 1], -ENAMETOOLONG);
	/* The handles are real: one reads back right. */
	size_t i = fx_ds_find(&S, "edge/block-plus-one");
	void *mem;
	int buf = rc_alloc_buffer(&c, 2 * MiB, &mem);
	ssize_t got = rc_read_into(&c, (uint32_t)res[i], 0, sizes[i],
				   (uint32_t)buf, 0);
	cr_assert_eq(got, (ssize_t)sizes[i]);
	fx_assert_ds_bytes(&S, i, 0, mem, (size_t)got, keys[i]);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_handles_open"),
		     (int64_t)ds_count(&S));
	free(names);
	free(keys);
	free(res);
	free(sizes);
	free(longkey);
	rc_detach(&c);
	stop_daemon();
}

/* CUDA pinning is optional and loaded at run time: without a runtime the
 * calls say -ENOSYS and change nothing; reads go on either way. */
Test(read, cuda_pinning_without_runtime, .init = start_default,
     .fini = kill_daemon, .timeout = 60)
{
	struct rc_client c;
	void *buf;
	char msg[512] = "";
	size_t i = 3;

	setenv("RINGCACHE_CUDART", "/nonexistent/libcudart.so", 1);
	attach(&c, D.socket_path);
	int ds = dataset_id(&c, "ds");
	int bi = rc_alloc_buffer(&c, MiB, &buf);
	cr_assert_geq(bi, 0, "rc_alloc_buffer: %s", rc_strerror(bi));
	cr_assert_eq(rc_cuda_pin_arenas(&c), -ENOSYS);
	cr_assert_eq(rc_cuda_pin(buf, MiB), -ENOSYS);
	cr_assert_null(rc_cuda_runtime());
	cr_assert(strstr(rc_cuda_error(), "no CUDA runtime"), "%s",
		  rc_cuda_error());
	for (uint32_t d = 0; d < c.n_datasets; d++)
		cr_assert_eq(c.arenas[d].cuda_pinned, 0);
	int h = open_ds(&c, ds, i, NULL);
	int64_t r = into_read_check(&c, (uint32_t)h, i, 0, ds_size(&S, i), bi,
				    buf, MiB, 0, msg, sizeof(msg));
	cr_assert_eq(r, (int64_t)ds_size(&S, i), "%s", msg);
	rc_detach(&c);
	stop_daemon();
}

/* Whatever this machine has (no runtime, a runtime but no GPU, a GPU),
 * pinning answers one of the documented results, marks exactly the
 * arenas it registered, is idempotent, and detach undoes it. */
Test(read, cuda_pinning_with_this_machine, .init = start_default,
     .fini = kill_daemon, .timeout = 60)
{
	struct rc_client c;

	attach(&c, D.socket_path);
	int r = rc_cuda_pin_arenas(&c);
	cr_assert(r == 0 || r == -ENOSYS || r == -EIO, "rc_cuda_pin_arenas: %d",
		  r);
	cr_assert((r == -ENOSYS) == (rc_cuda_runtime() == NULL));
	if (r < 0)
		cr_assert_neq(strcmp(rc_cuda_error(), "no error"), 0);
	for (uint32_t d = 0; d < c.n_datasets; d++)
		cr_assert_eq(c.arenas[d].cuda_pinned,
			     r == 0 && c.arenas[d].base != NULL,
			     "dataset %u", d);
	if (r == 0)
		cr_assert_eq(rc_cuda_pin_arenas(&c), 0, "pinning twice");
	cr_log_info("CUDA pinning here: %s", r ? rc_cuda_error() : "pinned");
	rc_detach(&c);
	stop_daemon();
}
