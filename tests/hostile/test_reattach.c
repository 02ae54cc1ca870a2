/* test_reattach.c - re-attaching after a restart gains a hostile client
 * nothing: nobody (fx_as_nobody) re-opening handles under chosen numbers
 * (RC_OPEN_AT) gets them only in its own session, through the same ACL
 * checks as any OPEN, within max_handles; a lease of another generation
 * releases nothing; and a uid whose clients all re-attach after a restart
 * (in a tight loop, too) still holds max_sessions_per_uid sessions at
 * most, while root reads the right bytes.
 *
 * The attacks run in children as nobody and report through their exit
 * status and stderr, never through Criterion. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define SESSIONS_PER_UID 3
#define HANDLES_MAX 64

static struct fx_daemon D;
static struct ds_spec S;

static void start(void)
{
	static char extra[700], daemon_extra[200];
	char secret[600];

	ds_spec_default(&S);
	fx_dataset_section(secret, sizeof(secret), "secret", "secret/",
			   "allow_uids = 0");
	snprintf(extra, sizeof(extra), "%s", secret);
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "max_sessions_per_uid = %d\nmax_handles = %d\n",
		 SESSIONS_PER_UID, HANDLES_MAX);
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	fx_daemon_start(&D, extra);
}

static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

#define FAIL(...)                                                            \
	do {                                                                 \
		fprintf(stderr, "nobody: " __VA_ARGS__);                     \
		fputc('\n', stderr);                                         \
		return 1;                                                    \
	} while (0)

/* One raw entry, waited for. */
static int raw(struct rc_client *c, struct rc_sqe *e, struct rc_cqe *out)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	*sqe = *e;
	rc_submit(c);
	struct rc_cqe *cqe;
	int r = rc_wait_cqe(c, &cqe);
	if (r < 0)
		return r;
	*out = *cqe;
	rc_cqe_seen(c);
	return 0;
}

static int open_at(struct rc_client *c, int ds, const char *key, uint32_t h)
{
	int slot = rc_arg_get(c);
	if (slot < 0)
		return slot;
	size_t kl = strlen(key);
	memcpy(rc_arg_ptr(c, slot), key, kl);
	struct rc_sqe e = {.opcode = RC_OP_OPEN, .flags = RC_OPEN_AT,
			   .arg = (uint16_t)slot, .handle = h,
			   .dataset = (uint32_t)ds, .arg_len = (uint32_t)kl};
	struct rc_cqe cqe;
	int r = raw(c, &e, &cqe);
	rc_arg_put(c, slot);
	return r < 0 ? r : cqe.res;
}

static int claim_handles(void *arg)
{
	const char *sock = arg;
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(&c, sock, &o);
	if (r < 0)
		FAIL("attach: %s", rc_strerror(r));
	int ds = rc_dataset(&c, "ds");
	if (ds < 0)
		FAIL("dataset ds: %s", rc_strerror(ds));
	/* root's dataset: listed, not readable, and no handle number
	 * opens it. */
	int secret = -1;
	for (uint32_t i = 0; i < c.n_datasets; i++)
		if (strcmp(c.datasets[i].name, "secret") == 0)
			secret = (int)i;
	if (secret < 0 || rc_dataset(&c, "secret") != -EACCES)
		FAIL("secret dataset: %d", rc_dataset(&c, "secret"));
	char key[DS_KEY_MAX];
	ds_key(&S, 0, key);
	if ((r = open_at(&c, secret, key, 0)) != -EACCES)
		FAIL("OPEN_AT 0 of root's dataset: %d, want -EACCES", r);
	if ((r = open_at(&c, secret, key, 7)) != -EACCES)
		FAIL("OPEN_AT 7 of root's dataset: %d, want -EACCES", r);
	/* Numbers root holds in its session are just numbers here. */
	if ((r = open_at(&c, ds, key, 0)) != 0)
		FAIL("OPEN_AT 0: %d (%s)", r, rc_strerror(r));
	if ((r = open_at(&c, ds, key, 0)) != -EBUSY)
		FAIL("OPEN_AT 0 twice: %d, want -EBUSY", r);
	if ((r = open_at(&c, ds, key, HANDLES_MAX)) != -EDQUOT)
		FAIL("OPEN_AT max_handles: %d, want -EDQUOT", r);
	if ((r = open_at(&c, ds, key, 0xffffffffu)) != -EDQUOT)
		FAIL("OPEN_AT ~0: %d, want -EDQUOT", r);
	if ((r = open_at(&c, ds, key, HANDLES_MAX - 1)) != HANDLES_MAX - 1)
		FAIL("OPEN_AT max_handles - 1: %d", r);
	/* Reading through the handle gives this object's bytes. */
	struct rc_extent e[4];
	int n = rc_read(&c, 0, 0, ds_size(&S, 0), e, 4);
	if (n <= 0 || ds_mismatch(&S, 0, 0, e[0].data, e[0].len) >= 0)
		FAIL("read through OPEN_AT handle: %d", n);
	/* A lease id of another generation releases nothing. */
	struct rc_sqe rel = {.opcode = RC_OP_RELEASE,
			     .handle = e[0].lease ^ (1u << RC_LEASE_GEN_SHIFT)};
	struct rc_cqe cqe;
	if ((r = raw(&c, &rel, &cqe)) < 0 || cqe.res != -EBADF)
		FAIL("RELEASE of another generation: %d, want -EBADF",
		     r < 0 ? r : cqe.res);
	for (int i = 0; i < n; i++)
		if ((r = rc_release(&c, e[i].lease)) != 0)
			FAIL("release own lease: %s", rc_strerror(r));
	rc_detach(&c);
	return 0;
}

Test(reattach, open_at_claims_nothing, .init = start, .fini = kill_daemon,
     .timeout = 120)
{
	int st = fx_as_nobody(claim_handles, D.socket_path);
	cr_assert_eq(st, 0, "the attack was not refused as documented");
	fx_daemon_stop(&D);
}

/* Holds SESSIONS_PER_UID sessions, waits for the restart (a byte on a
 * pipe), re-attaches them all by using them, hammers rc_reconnect, and
 * checks a further attach is still refused. */
struct sessions_arg {
	const char *sock;
	int go;      /* read end: the restart is done */
	int ready;   /* write end: the sessions are attached */
};

static int reattach_sessions(void *arg)
{
	struct sessions_arg *a = arg;
	struct rc_client c[SESSIONS_PER_UID], extra;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int h[SESSIONS_PER_UID], r;
	char key[DS_KEY_MAX];
	ds_key(&S, 1, key);
	for (int i = 0; i < SESSIONS_PER_UID; i++) {
		if ((r = rc_attach(&c[i], a->sock, &o)) < 0)
			FAIL("attach %d: %s", i, rc_strerror(r));
		if ((h[i] = rc_open(&c[i], rc_dataset(&c[i], "ds"), key,
				    NULL)) < 0)
			FAIL("open %d: %s", i, rc_strerror(h[i]));
	}
	if ((r = rc_attach(&extra, a->sock, &o)) != -EDQUOT)
		FAIL("attach past the limit before: %d", r);
	if (write(a->ready, "x", 1) != 1)
		FAIL("ready");
	char x;
	if (read(a->go, &x, 1) != 1)
		FAIL("go");
	for (int i = 0; i < SESSIONS_PER_UID; i++) {
		struct rc_extent e[4];
		int n = rc_read(&c[i], (uint32_t)h[i], 0, ds_size(&S, 1), e, 4);
		if (n <= 0 || ds_mismatch(&S, 1, 0, e[0].data, e[0].len) >= 0)
			FAIL("read %d after the restart: %s", i,
			     rc_strerror(n));
		if (rc_reconnects(&c[i]) != 1)
			FAIL("session %d: %u re-attaches", i,
			     rc_reconnects(&c[i]));
		for (int k = 0; k < n; k++)
			rc_release(&c[i], e[k].lease);
	}
	/* A tight loop of re-attach requests on live sessions: nothing. */
	for (int k = 0; k < 1000; k++)
		for (int i = 0; i < SESSIONS_PER_UID; i++)
			if ((r = rc_reconnect(&c[i])) != 0)
				FAIL("rc_reconnect on a live session: %d", r);
	if ((r = rc_attach(&extra, a->sock, &o)) != -EDQUOT)
		FAIL("attach past the limit after: %d (%s)", r,
		     rc_strerror(r));
	for (int i = 0; i < SESSIONS_PER_UID; i++)
		rc_detach(&c[i]);
	return 0;
}

Test(reattach, sessions_per_uid_hold_across_restart, .init = start,
     .fini = kill_daemon, .timeout = 180)
{
	int go[2], ready[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ready), 0);
	struct sessions_arg a = {D.socket_path, go[0], ready[1]};
	pid_t pid = fx_as_nobody_start(reattach_sessions, &a);
	struct pollfd p = {ready[0], POLLIN, 0};
	char x;
	cr_assert_eq(poll(&p, 1, 60000), 1, "nobody's sessions never came up");
	cr_assert_eq(read(ready[0], &x, 1), 1, "nobody died before attaching");
	fx_daemon_restart(&D, NULL);
	cr_assert_eq(write(go[1], "x", 1), 1);
	cr_assert_eq(fx_as_nobody_wait(pid), 0,
		     "a limit did not hold across the restart");
	/* root is not held back by nobody's sessions. */
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	cr_assert_eq(rc_attach(&c, D.socket_path, &o), 0);
	struct rc_extent e[4];
	char key[DS_KEY_MAX];
	int h = rc_open(&c, rc_dataset(&c, "ds"), ds_key(&S, 2, key), NULL);
	cr_assert_geq(h, 0);
	int n = rc_read(&c, (uint32_t)h, 0, ds_size(&S, 2), e, 4);
	cr_assert_gt(n, 0);
	fx_assert_ds_bytes(&S, 2, 0, e[0].data, e[0].len, "root's read");
	rc_detach(&c);
	fx_daemon_stop(&D);
}
