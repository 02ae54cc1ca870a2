/* test_readkey.c - the one-entry sample path end to end (issue 13): a
 * real ringcached in front of the real S3 server, rc_read_many and
 * rc_read_key (READ_KEY entries), every byte checked against
 * tools/dataset; lazily posted RELEASE/CLOSE never leak a lease (a killed
 * client included); a listed key is one GET with no HEAD, and a changed
 * object is -ESTALE, never mixed bytes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)
#define MAX_EXT 64

static struct fx_daemon D;
static struct ds_spec S;

static void start_default(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	fx_daemon_start(&D, NULL);
}

static void start_scratch(void)
{
	char extra[1024];

	ds_spec_default(&S);
	fx_daemon_init(&D);
	fx_dataset_section(extra, sizeof(extra), "scratch", "rk-scratch/",
			   "allow_uids = *");
	D.metadata_ttl = 60; /* what a LIST learns is trusted this long */
	fx_daemon_start(&D, extra);
}

static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

static void stop_daemon(void)
{
	bool leaked = fx_daemon_log_contains(&D, fx_env()->secret_key);

	fx_daemon_stop(&D);
	cr_assert(!leaked, "the daemon's log contains the S3 secret key");
}

static void attach(struct rc_client *c)
{
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(c, D.socket_path, &o);

	cr_assert_eq(r, 0, "rc_attach: %s", rc_strerror(r));
}

/* Checks one request's extents against object i's [off, off+want). */
static void check_req(const struct rc_read_req *q, size_t i, uint64_t want)
{
	uint64_t pos = q->offset;
	if (q->res == -EDQUOT) {
		static char st[65536];
		rc_stats(NULL, D.socket_path, st, sizeof(st));
		for (char *l = strtok(st, "\n"); l; l = strtok(NULL, "\n"))
			if (strstr(l, "refused_total{") || strstr(l, "leases_active"))
				fprintf(stderr, "%s\n", l);
	}

	cr_assert_eq(q->res, (int64_t)want, "%s [%llu,+%llu): res %lld (%s), "
		     "want %llu", q->key, (unsigned long long)q->offset,
		     (unsigned long long)q->len, (long long)q->res,
		     q->res < 0 ? rc_strerror((int)q->res) : "",
		     (unsigned long long)want);
	cr_assert_eq(q->size, ds_size(&S, i), "%s: size %llu", q->key,
		     (unsigned long long)q->size);
	cr_assert(q->etag[0], "%s: no ETag", q->key);
	for (uint32_t e = 0; e < q->n_ext; e++) {
		cr_assert_not_null(q->ext[e].data);
		fx_assert_ds_bytes(&S, i, pos, q->ext[e].data, q->ext[e].len,
				   q->key);
		pos += q->ext[e].len;
	}
	cr_assert_eq(pos - q->offset, want, "%s: extents hold %llu bytes",
		     q->key, (unsigned long long)(pos - q->offset));
}

static void release_all(struct rc_client *c, struct rc_read_req *q, size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (uint32_t e = 0; e < q[k].n_ext; e++)
			cr_assert_eq(rc_release_lazy(c, q[k].ext[e].lease), 0);
}

static uint64_t clamp_want(size_t i, uint64_t off, uint64_t len)
{
	uint64_t size = ds_size(&S, i);

	if (off >= size)
		return 0;
	if (len == 0 || len > size - off)
		return size - off;
	return len;
}

/* Every object of the dataset whole, in one batch, twice (cold, warm),
 * then ranges: unaligned, across blocks, at and past EOF. */
Test(readkey, every_byte_whole_and_ranges, .init = start_default,
     .fini = kill_daemon, .timeout = 300)
{
	struct rc_client c;
	size_t n = ds_count(&S);
	struct rc_read_req *q = calloc(n, sizeof(*q));
	struct rc_extent *ext = calloc(n * MAX_EXT, sizeof(*ext));
	char (*keys)[DS_KEY_MAX] = calloc(n, DS_KEY_MAX);
	int ds, r;

	cr_assert(q && ext && keys);
	attach(&c);
	ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0);
	/* Batches of up to 8 and 32 MiB (one large object alone): a batch's
	 * leases stay within max_leased_per_session (memory/4). */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < n; i++)
			q[i] = (struct rc_read_req){
				.key = ds_key(&S, i, keys[i]),
				.ext = ext + i * MAX_EXT, .max_ext = MAX_EXT};
		for (size_t at = 0, m; at < n; at += m) {
			uint64_t bytes = ds_size(&S, at);
			for (m = 1; at + m < n && m < 8; m++) {
				bytes += ds_size(&S, at + m);
				if (bytes > 32 * MiB)
					break;
			}
			r = rc_read_many(&c, ds, q + at, m);
			cr_assert_eq(r, 0, "rc_read_many: %s", rc_strerror(r));
			for (size_t i = at; i < at + m; i++)
				check_req(&q[i], i, ds_size(&S, i));
			release_all(&c, q + at, m);
		}
	}
	/* Ranges of each large and edge object. */
	static const struct { uint64_t off, len; } rg[] = {
		{1, 7}, {MiB - 3, 10}, {MiB + 17, 2 * MiB + 5}, {0, MiB},
		{MiB, 1}, {12345, 0},
	};
	for (size_t i = 0; i < n; i++) {
		if (ds_size(&S, i) < MiB && i % 50)
			continue;
		size_t nr = sizeof(rg) / sizeof(rg[0]);
		for (size_t k = 0; k < nr; k++)
			q[k] = (struct rc_read_req){
				.key = ds_key(&S, i, keys[0]),
				.offset = rg[k].off, .len = rg[k].len,
				.ext = ext + k * MAX_EXT, .max_ext = MAX_EXT};
		/* EOF exactly and past it. */
		uint64_t size = ds_size(&S, i);
		q[nr] = (struct rc_read_req){.key = keys[0], .offset = size,
					     .len = 10, .ext = ext + nr * MAX_EXT,
					     .max_ext = MAX_EXT};
		q[nr + 1] = (struct rc_read_req){.key = keys[0],
			.offset = size ? size - 1 : 0, .len = 100,
			.ext = ext + (nr + 1) * MAX_EXT, .max_ext = MAX_EXT};
		r = rc_read_many(&c, ds, q, nr + 2);
		cr_assert_eq(r, 0);
		for (size_t k = 0; k < nr + 2; k++)
			check_req(&q[k], i, clamp_want(i, q[k].offset, q[k].len));
		release_all(&c, q, nr + 2);
	}
	/* rc_read_key with room for one extent: short at the block end. */
	size_t big = fx_ds_find(&S, "large/0.bin");
	struct rc_stat st;
	int ne = rc_read_key(&c, ds, ds_key(&S, big, keys[0]), MiB - 5, 100,
			     ext, 1, &st);
	cr_assert_eq(ne, 1, "rc_read_key: %d (%s)", ne, rc_strerror(ne));
	cr_assert_eq(ext[0].len, 5);
	cr_assert_eq(st.size, ds_size(&S, big));
	fx_assert_ds_bytes(&S, big, MiB - 5, ext[0].data, 5, "short read");
	rc_release_lazy(&c, ext[0].lease);
	cr_assert_eq(rc_submit(&c) >= 0, 1);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_handles_open", 0,
				  30000), 0);
	cr_assert_eq(c.lazy_errors, 0);
	rc_detach(&c);
	free(q);
	free(ext);
	free(keys);
	stop_daemon();
}

/* A missing key, an over-long key and an empty object in the middle of a
 * batch fail (or read 0) alone. */
Test(readkey, failures_stay_alone, .init = start_default,
     .fini = kill_daemon, .timeout = 120)
{
	struct rc_client c;
	struct rc_extent ext[6][4];
	struct rc_read_req q[6];
	char k0[DS_KEY_MAX], k5[DS_KEY_MAX], missing[128];
	char *longkey = malloc(RC_MAX_KEY + 2);
	size_t a = 3, z = fx_ds_find(&S, "edge/empty"), b = 7;
	int ds, r;

	memset(longkey, 'x', RC_MAX_KEY + 1);
	longkey[RC_MAX_KEY + 1] = 0;
	fx_unique(missing, sizeof(missing), "no/such/sample");
	attach(&c);
	ds = rc_dataset(&c, "ds");
	const char *keys[6] = {ds_key(&S, a, k0), missing, longkey,
			       "../escape", ds_key(&S, z, k5), NULL};
	char kb[DS_KEY_MAX];
	keys[5] = ds_key(&S, b, kb);
	for (int k = 0; k < 6; k++)
		q[k] = (struct rc_read_req){.key = keys[k], .ext = ext[k],
					    .max_ext = 4};
	r = rc_read_many(&c, ds, q, 6);
	cr_assert_eq(r, 0, "rc_read_many: %s", rc_strerror(r));
	check_req(&q[0], a, ds_size(&S, a));
	cr_assert_eq(q[1].res, -ENOENT, "missing: %lld", (long long)q[1].res);
	cr_assert_eq(q[2].res, -ENAMETOOLONG);
	cr_assert_eq(q[3].res, -EINVAL, "../: %lld", (long long)q[3].res);
	cr_assert_eq(q[1].n_ext + q[2].n_ext + q[3].n_ext, 0);
	check_req(&q[4], z, 0);
	check_req(&q[5], b, ds_size(&S, b));
	release_all(&c, q, 6);
	/* A dataset id the client may not use fails the whole call. */
	cr_assert_eq(rc_read_many(&c, -ENOENT, q, 6), -ENOENT);
	/* The caller holds every arg slot: each request fails alone. */
	int held[1024], n_held = 0;
	while (n_held < 1024 && (held[n_held] = rc_arg_get(&c)) >= 0)
		n_held++;
	cr_assert_eq(rc_read_many(&c, ds, q, 2), 0);
	cr_assert_eq(q[0].res, -EBUSY);
	cr_assert_eq(q[1].res, -EBUSY);
	for (int k = 0; k < n_held; k++)
		rc_arg_put(&c, held[k]);
	rc_submit(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_handles_open", 0,
				  30000), 0);
	rc_detach(&c);
	free(longkey);
	stop_daemon();
}

/* Lazily released leases interleave with synchronous calls (whose
 * completions arrive behind the lazy ones) and never leak: neither with a
 * live client nor with one killed holding leases and queued releases. */
Test(readkey, lazy_release_never_leaks, .init = start_default,
     .fini = kill_daemon, .timeout = 120)
{
	struct rc_client c;
	struct rc_extent ext[8];
	struct rc_stat st;
	char key[DS_KEY_MAX];
	int ds;

	attach(&c);
	ds = rc_dataset(&c, "ds");
	for (int round = 0; round < 2000; round++) {
		size_t i = (size_t)round % 300;
		int n = rc_read_key(&c, ds, ds_key(&S, i, key), 0, 0, ext, 8,
				    &st);
		cr_assert_gt(n, 0, "round %d: %s", round, rc_strerror(n));
		fx_assert_ds_bytes(&S, i, 0, ext[0].data, ext[0].len, key);
		for (int e = 0; e < n; e++)
			rc_release_lazy(&c, ext[e].lease);
		if (round % 7 == 0) { /* a synchronous call between */
			int h = rc_open(&c, ds, key, NULL);
			cr_assert_geq(h, 0, "rc_open: %s", rc_strerror(h));
			cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
		}
	}
	/* A lease released twice: counted, nothing else. */
	int n = rc_read_key(&c, ds, ds_key(&S, 1, key), 0, 0, ext, 8, &st);
	cr_assert_eq(n, 1);
	rc_release_lazy(&c, ext[0].lease);
	rc_release_lazy(&c, ext[0].lease);
	cr_assert_eq(rc_read_key(&c, ds, key, 0, 0, ext, 8, &st), 1);
	rc_release_lazy(&c, ext[0].lease);
	rc_submit(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	/* Reap what is left: the second release's -EBADF is counted. */
	cr_assert_eq(rc_read_key(&c, ds, key, 0, 0, ext, 8, &st), 1);
	rc_release(&c, ext[0].lease);
	cr_assert_eq(c.lazy_errors, 1, "lazy errors %u", c.lazy_errors);
	rc_detach(&c);

	/* A client killed with leases held and releases queued. */
	int pipefd[2];
	cr_assert_eq(pipe(pipefd), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct rc_client cc;
		struct rc_extent e2[MAX_EXT];
		struct rc_read_req rq[16];
		char kk[16][DS_KEY_MAX];
		/* The daemon's leases, not copies (whose leases went at once) */
		setenv("RINGCACHE_READ_COPY", "0", 1);
		if (rc_attach(&cc, D.socket_path, NULL) < 0)
			_exit(2);
		int d2 = rc_dataset(&cc, "ds");
		for (int k = 0; k < 16; k++)
			rq[k] = (struct rc_read_req){
				.key = ds_key(&S, (size_t)k, kk[k]),
				.ext = e2 + k * 4, .max_ext = 4};
		if (rc_read_many(&cc, d2, rq, 16) < 0)
			_exit(3);
		for (int k = 0; k < 8; k++) /* queued, never submitted */
			rc_release_lazy(&cc, rq[k].ext[0].lease);
		if (write(pipefd[1], "x", 1) != 1)
			_exit(4);
		pause();
		_exit(0);
	}
	close(pipefd[1]);
	char x;
	cr_assert_eq(read(pipefd[0], &x, 1), 1, "child failed");
	close(pipefd[0]);
	cr_assert_geq(fx_stat_value(D.socket_path, "ringcache_leases_active"),
		      16);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0, "leases of a killed client remain");
	stop_daemon();
}

/* Reads the ranges of a large object around its block edges in the
 * current $RINGCACHE_READ_COPY mode; returns how many extents came back
 * copied (RC_LEASE_LOCAL) and sets *mapped to how many stayed leased. */
static int read_edges(size_t big, int *mapped)
{
	static const struct { uint64_t off, len; } rg[] = {
		{MiB - 1, 2}, {MiB - 3, 10}, {MiB + 17, 2 * MiB + 5},
		{0, 3 * MiB}, {2 * MiB, 1}, {2 * MiB - 4096, 8192},
		{12345, 0},
	};
	enum { NR = sizeof(rg) / sizeof(rg[0]) };
	struct rc_client c;
	struct rc_read_req q[NR];
	struct rc_extent ext[NR * MAX_EXT];
	char key[DS_KEY_MAX];
	int copied = 0;

	*mapped = 0;
	attach(&c);
	int ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0);
	for (int pass = 0; pass < 2; pass++) { /* cold, then warm */
		for (size_t k = 0; k < NR; k++)
			q[k] = (struct rc_read_req){
				.key = ds_key(&S, big, key), .offset = rg[k].off,
				.len = rg[k].len, .ext = ext + k * MAX_EXT,
				.max_ext = MAX_EXT};
		cr_assert_eq(rc_read_many(&c, ds, q, NR), 0);
		for (size_t k = 0; k < NR; k++) {
			check_req(&q[k], big, clamp_want(big, rg[k].off,
							 rg[k].len));
			for (uint32_t e = 0; e < q[k].n_ext; e++) {
				if (q[k].ext[e].lease & RC_LEASE_LOCAL)
					copied++;
				else
					(*mapped)++;
			}
		}
		release_all(&c, q, NR);
	}
	/* A local lease nobody holds, released: -EBADF, nothing else. */
	cr_assert_eq(rc_release(&c, RC_LEASE_LOCAL | 7), -EBADF);
	cr_assert_eq(rc_release(&c, RC_LEASE_LOCAL | 0x7ffffffeu), -EBADF);
	cr_assert_eq(rc_submit(&c) >= 0, 1);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0, "a copied extent kept its lease");
	cr_assert_eq(c.lazy_errors, 0);
	rc_detach(&c);
	return copied;
}

/* Copy or map (include/ringcache.h, struct rc_read_req): both give the
 * bytes of every range across block edges, a copied extent holds no
 * lease of the daemon's, and the choice made by itself is one of them
 * for a whole arena. */
Test(readkey, copy_or_map_same_bytes_across_block_edges,
     .init = start_default, .fini = kill_daemon, .timeout = 300)
{
	size_t big = fx_ds_find(&S, "large/0.bin");
	int mapped, copied;

	cr_assert_geq(ds_size(&S, big), 3 * MiB + 1);
	setenv("RINGCACHE_READ_COPY", "1", 1);
	copied = read_edges(big, &mapped);
	cr_assert(copied > 0 && mapped == 0, "forced copy: %d copied, %d "
		  "mapped", copied, mapped);
	setenv("RINGCACHE_READ_COPY", "0", 1);
	copied = read_edges(big, &mapped);
	cr_assert(copied == 0 && mapped > 0, "forced map: %d copied, %d "
		  "mapped", copied, mapped);
	unsetenv("RINGCACHE_READ_COPY");
	copied = read_edges(big, &mapped);
	/* The first extents are mapped while the choice is measured (3
	 * where the kernel has no PAGEMAP_SCAN), and one choice in 16 takes
	 * the way measured slower again (copyread.c's EXPLORE_EVERY): the
	 * other way gets no more than those. */
	int other_way = 3 + (copied + mapped) / 16;
	cr_log_info("chosen by the library: %d extents copied, %d mapped",
		    copied, mapped);
	cr_assert(copied <= other_way || mapped <= other_way, "copied %d and "
		  "mapped %d extents of one arena", copied, mapped);
	stop_daemon();
}

/* rc_read_many_start/_wait: every small object in batches of 16 with the
 * next batch in flight while this one is checked, cold then warm; while
 * a batch is pending, calls that wait for completions are -EBUSY and
 * lazy releases are fine; nothing leaks. */
Test(readkey, pipelined_batches, .init = start_default,
     .fini = kill_daemon, .timeout = 300)
{
	enum { B = 16 };
	struct rc_client c;
	size_t n = 0, *idx = calloc(ds_count(&S), sizeof(*idx));
	cr_assert_not_null(idx);
	for (size_t i = 0; i < ds_count(&S); i++)
		if (ds_size(&S, i) < MiB)
			idx[n++] = i; /* within one block: two extents at most */
	struct rc_read_req *q = calloc(n, sizeof(*q));
	struct rc_extent *ext = calloc(n * 2, sizeof(*ext));
	char (*keys)[DS_KEY_MAX] = calloc(n, DS_KEY_MAX);
	cr_assert(q && ext && keys && n > 4 * B);
	attach(&c);
	int ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < n; i++)
			q[i] = (struct rc_read_req){
				.key = ds_key(&S, idx[i], keys[i]),
				.ext = ext + i * 2, .max_ext = 2};
		struct rc_read_batch *next = NULL, *cur;
		size_t at = 0, m = n < B ? n : B;
		cr_assert_eq(rc_read_many_start(&c, ds, q, m, &next), 0);
		/* Submitted by the start: the daemon completes entries
		 * before anyone waits. */
		for (int t = 0; t < 30000 && atomic_load(&c.hdr->cq_tail) ==
					    atomic_load(&c.hdr->cq_head); t++)
			usleep(1000);
		cr_assert_neq(atomic_load(&c.hdr->cq_tail),
			      atomic_load(&c.hdr->cq_head),
			      "nothing completed before the wait");
		while (at < n) {
			cur = next;
			int r = rc_read_many_wait(cur);
			cr_assert_eq(r, 0, "wait: %s", rc_strerror(r));
			size_t nat = at + m, nm = n - nat < B ? n - nat : B;
			if (nm) {
				r = rc_read_many_start(&c, ds, q + nat, nm,
						       &next);
				cr_assert_eq(r, 0, "start: %s", rc_strerror(r));
				struct rc_read_batch *other;
				cr_assert_eq(rc_read_many_start(&c, ds, q, 1,
								&other), -EBUSY);
				cr_assert_null(other);
				cr_assert_eq(rc_open(&c, ds, keys[0], NULL),
					     -EBUSY);
			}
			for (size_t i = at; i < at + m; i++)
				check_req(&q[i], idx[i], ds_size(&S, idx[i]));
			release_all(&c, q + at, m); /* lazy: allowed */
			at = nat;
			m = nm;
		}
	}
	cr_assert_eq(rc_submit(&c) >= 0, 1);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	cr_assert_eq(c.lazy_errors, 0);
	/* No batch pending: the synchronous calls work again. */
	int h = rc_open(&c, ds, keys[0], NULL);
	cr_assert_geq(h, 0, "rc_open: %s", rc_strerror(h));
	cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
	rc_detach(&c);
	free(idx);
	free(q);
	free(ext);
	free(keys);
	stop_daemon();
}

/* After a LIST, a cold sample is one GET and no HEAD; a PUT of a new
 * version then gives -ESTALE (never mixed bytes), and the next READ_KEY
 * reads the new version. */
Test(readkey, listed_key_is_one_get_and_changes_are_estale,
     .init = start_scratch, .fini = kill_daemon, .timeout = 60)
{
	const struct fx_env *e = fx_env();
	char dir[96], rel[160], full[512];
	uint8_t *v1 = malloc(100000), *v2 = malloc(100000);
	struct rc_client c;
	struct rc_extent ext[4];
	struct rc_stat st;
	void *buf;

	cr_assert(v1 && v2);
	fx_fill_pattern(v1, 100000, 1);
	fx_fill_pattern(v2, 100000, 2);
	fx_unique(dir, sizeof(dir), "listed");
	snprintf(rel, sizeof(rel), "%s/sample.bin", dir);
	snprintf(full, sizeof(full), "%srk-scratch/%s", e->prefix, rel);
	cr_assert_eq(fx_put_object(full, v1, 100000), 0, "PUT v1");

	attach(&c);
	int ds = rc_dataset(&c, "scratch");
	cr_assert_geq(ds, 0);
	int bi = rc_alloc_buffer(&c, 1 << 16, &buf);
	cr_assert_geq(bi, 0);
	char prefix[128];
	snprintf(prefix, sizeof(prefix), "%s/", dir);
	int more = 0;
	int got = rc_list(&c, ds, prefix, 0, (uint32_t)bi, 0, 1 << 16, &more);
	cr_assert_eq(got, 1, "LIST: %d (%s)", got, rc_strerror(got));

	int64_t heads = fx_stat_value(D.socket_path, "ringcache_s3_head_total");
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	int n = rc_read_key(&c, ds, rel, 0, 0, ext, 4, &st);
	cr_assert_eq(n, 1, "read_key: %d (%s)", n, rc_strerror(n));
	cr_assert_eq(st.size, 100000);
	cr_assert_eq(fx_mismatch(ext[0].data, v1, 100000), -1, "not v1");
	rc_release_lazy(&c, ext[0].lease);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_head_total"),
		     heads, "a listed key was HEADed");
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
		     gets + 1, "a cold listed sample is not one GET");

	/* A second key, listed, then replaced in S3 before any read: the
	 * listed ETag no longer matches. */
	uint8_t *w1 = malloc(3 * MiB), *w2 = malloc(3 * MiB);
	struct rc_extent e3[4];
	char rel2[200], full2[560];
	cr_assert(w1 && w2);
	fx_fill_pattern(w1, 3 * MiB, 3);
	fx_fill_pattern(w2, 3 * MiB, 4);
	snprintf(rel2, sizeof(rel2), "%s/changed.bin", dir);
	snprintf(full2, sizeof(full2), "%srk-scratch/%s", e->prefix, rel2);
	cr_assert_eq(fx_put_object(full2, w1, 3 * MiB), 0, "PUT w1");
	got = rc_list(&c, ds, prefix, 0, (uint32_t)bi, 0, 1 << 16, &more);
	cr_assert_eq(got, 2, "LIST: %d (%s)", got, rc_strerror(got));
	cr_assert_eq(fx_put_object(full2, w2, 3 * MiB), 0, "PUT w2");
	heads = fx_stat_value(D.socket_path, "ringcache_s3_head_total");
	n = rc_read_key(&c, ds, rel2, 0, 0, e3, 4, &st);
	if (n > 0) {
		for (int k = 0; k < n; k++)
			rc_release_lazy(&c, e3[k].lease);
		cr_assert_fail("a key changed after its LIST read %d extents, "
			       "want -ESTALE", n);
	}
	cr_assert_eq(n, -ESTALE, "changed after LIST: %d (%s)", n,
		     rc_strerror(n));
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_head_total"),
		     heads, "the listed key was HEADed");
	/* The next READ_KEY asks S3 afresh: every byte of the new version. */
	n = rc_read_key(&c, ds, rel2, 0, 0, e3, 4, &st);
	cr_assert_eq(n, 3, "after -ESTALE: %d (%s)", n, rc_strerror(n));
	cr_assert_eq(st.size, 3 * MiB);
	for (int k = 0; k < 3; k++) {
		cr_assert_eq(e3[k].len, MiB);
		cr_assert_eq(fx_mismatch(e3[k].data, w2 + (size_t)k * MiB, MiB),
			     -1, "block %d is not the new version", k);
		rc_release_lazy(&c, e3[k].lease);
	}
	free(w1);
	free(w2);
	rc_submit(&c);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	rc_detach(&c);
	free(v1);
	free(v2);
	stop_daemon();
}
