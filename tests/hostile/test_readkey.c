/* test_readkey.c - READ_KEY entries written by a hostile client (uid
 * 65534, fx_as_nobody) against a live ringcached in front of the real S3
 * server: every malformed field fails its entry alone with the documented
 * error while a valid entry of the same submission reads the right bytes;
 * a key rewritten while in flight never reads outside the dataset; handles
 * and leases stay within their limits, and a failed entry holds neither.
 * Afterwards the daemon answers STATS and a root session reads the exact
 * bytes with rc_read_many.
 *
 * Attackers run in forked children without Criterion: each returns 0 when
 * every attack was refused, else the code beside the check that failed. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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

static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

static void start_daemon(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	/* Small limits, so the attacks reach them in a few entries. */
	D.daemon_extra = "max_handles = 64\nmax_leased_per_session = 8M\n";
	fx_daemon_start(&D, NULL);
}

/* One READ_KEY through the raw ring (the library's prep, then any field
 * the attack changes), completed synchronously. */
static struct rc_sqe *key_sqe(struct rc_client *c, int ds, int slot,
			      const char *key, uint64_t ud)
{
	struct rc_sqe *e = rc_get_sqe(c);
	if (e)
		rc_prep_read_key(c, e, ds, slot, key, 0, RC_MAX_IO,
				 RC_READ_KEY_CLOSE, ud);
	return e;
}

/* Reaps n completions into by_ud[user_data] (user_data < n). */
static int reap(struct rc_client *c, struct rc_cqe *by_ud, int n)
{
	for (int k = 0; k < n; k++) {
		struct rc_cqe *cqe;
		if (rc_wait_cqe(c, &cqe) < 0)
			return -1;
		if (cqe->user_data < (uint64_t)n)
			by_ud[cqe->user_data] = *cqe;
		rc_cqe_seen(c);
	}
	return 0;
}

/* Malformed entries around a valid one in one submission. */
static int attack_fields(void *arg)
{
	(void)arg;
	struct rc_client c;
	if (rc_attach(&c, D.socket_path, NULL) < 0)
		return 10;
	int ds = rc_dataset(&c, "ds");
	const char *good = "small/00005.bin";
	int slot[4];
	for (int k = 0; k < 4; k++)
		if ((slot[k] = rc_arg_get(&c)) < 0)
			return 11;
	static const int want[] = {
		-EINVAL, -EINVAL, -EINVAL, -EINVAL, -ENOENT, -EINVAL,
		-EINVAL, -EINVAL, -EINVAL, 0 /* the valid one */, -EINVAL,
	};
	enum { N = sizeof(want) / sizeof(want[0]) };
	struct rc_sqe *e[N];
	for (int k = 0; k < N; k++)
		if (!(e[k] = key_sqe(&c, ds, slot[k == 9 ? 0 : 1], good,
				     (uint64_t)k)))
			return 12;
	e[0]->flags = 0x80;                 /* an unknown flag */
	e[1]->arg = 0xffff;                 /* no such arg slot */
	e[2]->arg_len = RC_MAX_KEY + 1;     /* past the key limit */
	e[3]->arg_len = 0;                  /* empty key */
	e[4]->dataset = RC_MAX_DATASETS + 7; /* no such dataset */
	e[5]->buf_index = 1;                /* a field READ_KEY never reads */
	e[6]->reserved0 = 1;
	e[7]->len = RC_MAX_IO + 1ull;
	e[8]->handle = 3;
	e[10]->arg = (uint16_t)slot[2];     /* "../" leaves the dataset */
	memcpy(rc_arg_ptr(&c, slot[2]), "small/../../x", 13);
	e[10]->arg_len = 13;
	memcpy(rc_arg_ptr(&c, slot[1]), good, strlen(good));
	rc_submit(&c);
	struct rc_cqe got[N];
	memset(got, 0, sizeof(got));
	if (reap(&c, got, N) < 0)
		return 13;
	for (int k = 0; k < N; k++) {
		if (k == 9)
			continue;
		if (got[k].res != want[k] || got[k].lease != RC_NO_LEASE) {
			fprintf(stderr, "entry %d: res %d lease %u, want %d\n",
				k, got[k].res, got[k].lease, want[k]);
			return 20 + k;
		}
	}
	size_t i = (size_t)ds_index(&S, good);
	const struct rc_key_result *kr = rc_key_result_of(&c, slot[0]);
	if (got[9].res != (int32_t)ds_size(&S, i) || kr->size != ds_size(&S, i) ||
	    kr->handle != RC_NO_HANDLE) {
		fprintf(stderr, "valid entry: res %d size %llu handle %u\n",
			got[9].res, (unsigned long long)kr->size, kr->handle);
		return 40;
	}
	if (fx_ds_mismatch(&S, i, 0, rc_cqe_data(&c, &got[9]),
			   (size_t)got[9].res) != -1)
		return 41;
	rc_release(&c, got[9].lease);
	rc_detach(&c);
	return 0;
}

Test(readkey, malformed_fields_fail_alone, .init = start_daemon,
     .fini = kill_daemon, .timeout = 60)
{
	int st = fx_as_nobody(attack_fields, NULL);
	cr_assert_eq(st, 0, "attacker returned %d", st);
}

/* ---- a key rewritten while the entry is in flight ---------------------- */

struct flipper {
	char *slot;
	atomic_bool stop;
};

static void *flip(void *arg)
{
	struct flipper *f = arg;
	static const char a[] = "small/00001.bin", b[] = "../../../etc/xx";
	for (unsigned n = 0; !atomic_load(&f->stop); n++)
		memcpy(f->slot, n & 1 ? b : a, sizeof(a) - 1);
	return NULL;
}

static int attack_race(void *arg)
{
	(void)arg;
	struct rc_client c;
	if (rc_attach(&c, D.socket_path, NULL) < 0)
		return 50;
	int ds = rc_dataset(&c, "ds");
	int slot = rc_arg_get(&c);
	struct flipper f = {.slot = rc_arg_ptr(&c, slot)};
	pthread_t t;
	if (slot < 0 || pthread_create(&t, NULL, flip, &f))
		return 51;
	size_t i = (size_t)ds_index(&S, "small/00001.bin");
	int bad = 0;
	for (int round = 0; round < 500 && !bad; round++) {
		struct rc_sqe *e = rc_get_sqe(&c);
		if (!e)
			return 52;
		e->opcode = RC_OP_READ_KEY;
		e->flags = RC_READ_KEY_CLOSE;
		e->arg = (uint16_t)slot;
		e->arg_len = 15;
		e->dataset = (uint32_t)ds;
		e->len = RC_MAX_IO;
		rc_submit(&c);
		struct rc_cqe *cqe;
		if (rc_wait_cqe(&c, &cqe) < 0)
			return 53;
		struct rc_cqe got = *cqe;
		rc_cqe_seen(&c);
		if (got.res == -EINVAL || got.res == -ENOENT)
			continue; /* the daemon copied the "../" key: refused */
		if (got.res != (int32_t)ds_size(&S, i) ||
		    fx_ds_mismatch(&S, i, 0, rc_cqe_data(&c, &got),
				   (size_t)got.res) != -1)
			bad = 54;
		rc_release_lazy(&c, got.lease);
	}
	atomic_store(&f.stop, true);
	pthread_join(t, NULL);
	rc_detach(&c);
	return bad;
}

Test(readkey, key_rewritten_in_flight, .init = start_daemon,
     .fini = kill_daemon, .timeout = 120)
{
#ifdef __SANITIZE_THREAD__
	/* The attacker starts a thread in a child forked from this threaded
	 * process, which TSan cannot follow ("dup thread with used id"), as
	 * in test_shm.c; the plain and ASan builds run it. */
	cr_skip_test("ThreadSanitizer cannot follow threads started after fork");
#endif
	int st = fx_as_nobody(attack_race, NULL);
	cr_assert_eq(st, 0, "attacker returned %d", st);
}

/* ---- handles and leases: limits hold, failures hold nothing ------------ */

static int attack_limits(void *arg)
{
	(void)arg;
	struct rc_client c;
	if (rc_attach(&c, D.socket_path, NULL) < 0)
		return 60;
	int ds = rc_dataset(&c, "ds");
	int slot = rc_arg_get(&c);
	/* Without RC_READ_KEY_CLOSE and past EOF: a handle each, no lease. */
	int quota = 0, n_handles = 0;
	uint32_t handles[80];
	for (int k = 0; k < 80; k++) {
		struct rc_sqe *e = key_sqe(&c, ds, slot, "small/00002.bin", 1);
		if (!e)
			return 61;
		e->flags = 0;
		e->offset = 1ull << 40;
		rc_submit(&c);
		struct rc_cqe *cqe;
		if (rc_wait_cqe(&c, &cqe) < 0)
			return 62;
		int res = cqe->res;
		rc_cqe_seen(&c);
		if (res == -EDQUOT)
			quota++;
		else if (res != 0)
			return 63;
		else
			handles[n_handles++] = rc_key_result_of(&c, slot)->handle;
	}
	if (quota != 80 - 64 || n_handles != 64)
		return 64; /* max_handles = 64 */
	for (int k = 0; k < n_handles; k++)
		if (rc_close(&c, handles[k]) != 0)
			return 67;
	/* Leases: 8 MiB per session; refused, a READ_KEY holds nothing. */
	struct rc_extent ext[1];
	int held = 0, refused = 0;
	char key[DS_KEY_MAX];
	for (size_t k = 10; k < 30; k++) {
		int n = rc_read_key(&c, ds, ds_key(&S, k, key), 0, 1, ext, 1,
				    NULL);
		if (n == 1)
			held++;
		else if (n == -EDQUOT)
			refused++;
		else
			return 65;
	}
	/* Each lease counts its block (a small object's is the object). */
	if (held < 8 || refused < 1 || held + refused != 20)
		return 66;
	rc_detach(&c);
	return 0;
}

Test(readkey, limits_hold_and_failures_hold_nothing, .init = start_daemon,
     .fini = kill_daemon, .timeout = 60)
{
	int st = fx_as_nobody(attack_limits, NULL);
	cr_assert_eq(st, 0, "attacker returned %d", st);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_leases_active", 0,
				  30000), 0);
	cr_assert_eq(fx_wait_stat(D.socket_path, "ringcache_handles_open", 0,
				  30000), 0);
	/* A root session still reads the exact bytes, batched. */
	struct rc_client c;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ds");
	struct rc_extent ext[4][4];
	struct rc_read_req q[4];
	char keys[4][DS_KEY_MAX];
	for (int k = 0; k < 4; k++)
		q[k] = (struct rc_read_req){.key = ds_key(&S, (size_t)k, keys[k]),
					    .ext = ext[k], .max_ext = 4};
	cr_assert_eq(rc_read_many(&c, ds, q, 4), 0);
	for (int k = 0; k < 4; k++) {
		cr_assert_eq(q[k].res, (int64_t)ds_size(&S, (size_t)k));
		fx_assert_ds_bytes(&S, (size_t)k, 0, ext[k][0].data,
				   ext[k][0].len, keys[k]);
		rc_release_lazy(&c, ext[k][0].lease);
	}
	rc_detach(&c);
	fx_daemon_stop(&D);
}
