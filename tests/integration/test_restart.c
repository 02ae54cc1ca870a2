/* test_restart.c - clients that outlive the daemon: a real ringcached is
 * stopped (SIGTERM) and started again on the same socket while clients
 * stay attached, against the real S3 server. Readers carry on with every
 * byte right (the library re-attaches, re-opens handles under their
 * numbers, re-registers buffers, resubmits reads in flight); a handle
 * whose object changed meanwhile fails alone with -ESTALE; a write handle
 * open across the restart gets -ECONNRESET and a new write succeeds.
 *
 * The reader loop runs in a forked child (no Criterion there): it reports
 * through its exit status and stderr. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)
#define MAX_EXT 16
#define BATCH 16
#define CHILD_TIMEOUT_MS 240000

static struct fx_daemon D;
static struct ds_spec S;
static char scratch[64]; /* the writable dataset "ck": PREFIX<scratch>/ */

/* The datasets: "ck" writable under a scratch prefix, and "slow", the
 * sample again at get_rate requests a second. */
static const char *writable_sections(unsigned get_rate)
{
	static char sections[2000];
	char sub[200], ck[600], slow[600];

	snprintf(sub, sizeof(sub), "%s/", scratch);
	fx_dataset_section(ck, sizeof(ck), "ck", sub, "allow_uids = *");
	fx_dataset_section(slow, sizeof(slow), "slow", "ds/",
			   "allow_uids = *");
	snprintf(sections, sizeof(sections),
		 "%swritable = true\nwrite_uids = 0\ndurability = local\n"
		 "part_size = 5M\n%ss3_get_rate = %u\n", ck, slow, get_rate);
	return sections;
}

static void start_writable(void)
{
	static char daemon_extra[400];

	ds_spec_default(&S);
	fx_unique(scratch, sizeof(scratch), "restart");
	snprintf(daemon_extra, sizeof(daemon_extra),
		 "journal = %s/journal\njournal_size = 64M", fx_tmpdir());
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	/* "slow" at 40 requests a second: a prefetch of it lasts seconds
	 * on any machine. */
	fx_daemon_start(&D, writable_sections(40));
}

static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

static void stop_daemon(void)
{
	fx_daemon_stop(&D);
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the reader child --------------------------------------------------- */

#define FAIL(...)                                                            \
	do {                                                                 \
		fprintf(stderr, "reader: " __VA_ARGS__);                     \
		fputc('\n', stderr);                                         \
		_exit(1);                                                    \
	} while (0)

static void check_extents(size_t i, uint64_t off, const struct rc_extent *ext,
			  int n, uint64_t want, const char *how)
{
	uint64_t got = 0;

	for (int e = 0; e < n; e++) {
		if (!ext[e].data)
			FAIL("%s: object %zu extent %d has no data", how, i, e);
		int64_t bad = ds_mismatch(&S, i, off + got, ext[e].data,
					  ext[e].len);
		if (bad >= 0)
			FAIL("%s: object %zu differs at byte %lld", how, i,
			     (long long)bad);
		got += ext[e].len;
	}
	if (got != want)
		FAIL("%s: object %zu: %llu bytes, want %llu", how, i,
		     (unsigned long long)got, (unsigned long long)want);
}

/* One sample a call, rc_read_many batches, and rc_open + rc_read. */
static void read_pass(struct rc_client *c, int ds, unsigned pass)
{
	size_t n = S.n_small;
	char keys[BATCH][DS_KEY_MAX];
	struct rc_extent ext[BATCH][MAX_EXT];
	struct rc_read_req q[BATCH];

	for (size_t i = 0; i < n;) {
		size_t k = n - i < BATCH ? n - i : BATCH;

		if ((i / BATCH + pass) % 2 == 0) {
			memset(q, 0, sizeof(q));
			for (size_t j = 0; j < k; j++) {
				q[j].key = ds_key(&S, i + j, keys[j]);
				q[j].ext = ext[j];
				q[j].max_ext = MAX_EXT;
			}
			int r = rc_read_many(c, ds, q, k);
			if (r < 0)
				FAIL("rc_read_many: %s", rc_strerror(r));
			for (size_t j = 0; j < k; j++) {
				if (q[j].res < 0)
					FAIL("rc_read_many %s: %s", keys[j],
					     rc_strerror((int)q[j].res));
				check_extents(i + j, 0, ext[j], (int)q[j].n_ext,
					      ds_size(&S, i + j), "read_many");
				for (uint32_t e = 0; e < q[j].n_ext; e++)
					rc_release_lazy(c, ext[j][e].lease);
			}
		} else {
			for (size_t j = 0; j < k; j++) {
				char key[DS_KEY_MAX];
				int h = rc_open(c, ds, ds_key(&S, i + j, key),
						NULL);
				if (h < 0)
					FAIL("rc_open %s: %s", key,
					     rc_strerror(h));
				uint64_t sz = ds_size(&S, i + j);
				struct rc_extent e[MAX_EXT];
				int m = rc_read(c, (uint32_t)h, 0, sz, e,
						MAX_EXT);
				if (m < 0)
					FAIL("rc_read %s: %s", key,
					     rc_strerror(m));
				check_extents(i + j, 0, e, m, sz, "rc_read");
				for (int x = 0; x < m; x++)
					if (rc_release(c, e[x].lease) < 0)
						FAIL("rc_release %s", key);
				if ((m = rc_close(c, (uint32_t)h)) < 0)
					FAIL("rc_close %s: %s", key,
					     rc_strerror(m));
			}
		}
		i += k;
	}
}

/* Reads the dataset over and over until it has seen the daemon go and
 * come back and has read a whole pass after that. A handle opened at
 * the start, a registered buffer and a lease taken before the restart
 * are used after it. Writes one byte to `ready` after its first pass. */
static int reader(int ready)
{
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(&c, D.socket_path, &o);
	if (r < 0)
		FAIL("rc_attach: %s", rc_strerror(r));
	int ds = rc_dataset(&c, "ds");
	if (ds < 0)
		FAIL("rc_dataset: %s", rc_strerror(ds));
	size_t big = S.n_small; /* the first large object */
	char key[DS_KEY_MAX];
	struct rc_stat st;
	int h = rc_open(&c, ds, ds_key(&S, big, key), &st);
	if (h < 0)
		FAIL("rc_open %s: %s", key, rc_strerror(h));
	void *buf;
	int bi = rc_alloc_buffer(&c, 4 * MiB, &buf);
	if (bi < 0)
		FAIL("rc_alloc_buffer: %s", rc_strerror(bi));
	/* A lease from before the restart: readable after it. */
	struct rc_extent old[MAX_EXT];
	int n_old = rc_read(&c, (uint32_t)h, 0, 2 * MiB, old, MAX_EXT);
	if (n_old <= 0)
		FAIL("rc_read before: %s", rc_strerror(n_old));
	uint32_t gen0 = RC_LEASE_GEN(old[0].lease);

	int64_t deadline = mono_ms() + CHILD_TIMEOUT_MS;
	unsigned pass = 0, passes_after = 0;
	while (passes_after < 1) {
		if (mono_ms() > deadline)
			FAIL("no restart seen within %d s (reconnects %u)",
			     CHILD_TIMEOUT_MS / 1000, rc_reconnects(&c));
		bool seen_before = rc_reconnects(&c) > 0;
		read_pass(&c, ds, pass);
		/* The long-lived handle through the registered buffer. */
		uint64_t off = (uint64_t)(pass % 8) * MiB;
		ssize_t got = rc_read_into(&c, (uint32_t)h, off, 4 * MiB,
					   (uint32_t)bi, 0);
		if (got < 0)
			FAIL("rc_read_into (pass %u): %s", pass,
			     rc_strerror((int)got));
		int64_t bad = ds_mismatch(&S, big, off, buf, (size_t)got);
		if (bad >= 0)
			FAIL("rc_read_into: differs at %lld", (long long)bad);
		if (pass == 0 && write(ready, "x", 1) != 1)
			FAIL("ready pipe");
		if (seen_before)
			passes_after++;
		pass++;
	}
	/* The old arena is still mapped: the old lease reads right, and
	 * releasing it is a no-op that cannot touch the new session. */
	check_extents(big, 0, old, n_old, 2 * MiB, "old lease");
	if (RC_LEASE_GEN(old[0].lease) != gen0)
		FAIL("lease id changed");
	for (int x = 0; x < n_old; x++)
		if ((r = rc_release(&c, old[x].lease)) != 0)
			FAIL("rc_release of an old lease: %s", rc_strerror(r));
	/* Nothing of the old session is used any more: its arenas go, and
	 * the new session reads on. */
	if ((r = rc_unmap_old_arenas(&c)) < 1)
		FAIL("rc_unmap_old_arenas: %d", r);
	struct rc_stat st2;
	if ((r = rc_stat_handle(&c, (uint32_t)h, &st2)) < 0 ||
	    strcmp(st.etag, st2.etag) != 0)
		FAIL("rc_stat_handle after: %s", rc_strerror(r));
	read_pass(&c, ds, pass);
	rc_detach(&c);
	fprintf(stderr, "reader: %u passes, %u after the restart\n", pass,
		passes_after);
	return 0;
}

Test(restart, reader_loop_outlives_the_daemon, .init = start_writable,
     .fini = kill_daemon, .timeout = 400)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(reader(p[1]));
	}
	close(p[1]);
	struct pollfd pf = {p[0], POLLIN, 0};
	char x;
	cr_assert_eq(poll(&pf, 1, 120000), 1, "the reader made no pass");
	cr_assert_eq(read(p[0], &x, 1), 1, "the reader died before a pass");
	/* Mid-run: the reader is inside its second pass. */
	fx_daemon_restart(&D, NULL);
	int status = 0;
	int64_t deadline = mono_ms() + CHILD_TIMEOUT_MS;
	pid_t w = 0;
	while ((w = waitpid(pid, &status, WNOHANG)) == 0 &&
	       mono_ms() < deadline)
		usleep(50000);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cr_assert_fail("the reader did not finish");
	}
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the reader failed (status 0x%x): see its stderr", status);
	stop_daemon();
}

/* ---- handles, sequentially across a restart ------------------------------ */

static void attach(struct rc_client *c)
{
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(c, D.socket_path, &o);
	cr_assert_eq(r, 0, "rc_attach: %s", rc_strerror(r));
}

struct open_call {
	struct rc_client *c;
	int ds;
	const char *key;
	bool many; /* rc_open_many of the one key */
	int h;
	struct rc_stat st;
};

static void *open_thread(void *arg)
{
	struct open_call *o = arg;
	if (!o->many) {
		o->h = rc_open(o->c, o->ds, o->key, &o->st);
		return NULL;
	}
	int32_t h = -1;
	int r = rc_open_many(o->c, o->ds, &o->key, 1, &h, &o->st.size);
	o->h = r < 0 ? r : h;
	return NULL;
}

/* A daemon may answer an OPEN into its arg slot (the ETag over the key)
 * and be lost before its completion is seen: the call submits the OPEN
 * again on the daemon that takes over, which must read the key, not the
 * answer (the reader loop above once failed so: the new daemon was asked
 * for the key "\"252a598ecdb76a"). The daemon is stopped while the OPEN
 * waits in its ring, the slot is overwritten as it would have, and the
 * daemon is killed and started again. */
static void open_after_a_lost_answer(bool many)
{
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0);
	char key[DS_KEY_MAX];
	struct open_call o = {.c = &c, .ds = ds, .key = ds_key(&S, 0, key),
			      .many = many, .h = -1};
	cr_assert_eq(kill(D.pid, SIGSTOP), 0);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, open_thread, &o), 0);
	int64_t deadline = mono_ms() + 30000;
	while (atomic_load(&c.hdr->sq_tail) == atomic_load(&c.hdr->sq_head) &&
	       mono_ms() < deadline)
		usleep(1000);
	cr_assert_neq(atomic_load(&c.hdr->sq_tail),
		      atomic_load(&c.hdr->sq_head), "the OPEN was not submitted");
	static const char answer[] = "\"252a598ecdb76a0123456789abcdef\"";
	for (uint32_t s = 0; s < c.arg_slots; s++)
		memcpy(rc_arg_ptr(&c, (int)s), answer, sizeof(answer));
	fx_daemon_kill(&D);
	fx_daemon_restart(&D, NULL);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_geq(o.h, 0, "rc_open %s after the restart: %s", key,
		      rc_strerror(o.h));
	cr_assert_eq(o.st.size, ds_size(&S, 0));
	cr_assert_eq(rc_reconnects(&c), 1);
	struct rc_extent e[MAX_EXT];
	int m = rc_read(&c, (uint32_t)o.h, 0, o.st.size, e, MAX_EXT);
	cr_assert_gt(m, 0, "rc_read: %s", rc_strerror(m));
	uint64_t got = 0;
	for (int x = 0; x < m; x++) {
		cr_assert_lt(ds_mismatch(&S, 0, got, e[x].data, e[x].len), 0);
		got += e[x].len;
		cr_assert_eq(rc_release(&c, e[x].lease), 0);
	}
	cr_assert_eq(got, o.st.size);
	cr_assert_eq(rc_close(&c, (uint32_t)o.h), 0);
	rc_detach(&c);
	stop_daemon();
}

Test(restart, open_after_a_lost_answer_sends_its_key_again,
     .init = start_writable, .fini = kill_daemon, .timeout = 120)
{
	open_after_a_lost_answer(false);
}

Test(restart, open_many_after_a_lost_answer_sends_its_keys_again,
     .init = start_writable, .fini = kill_daemon, .timeout = 120)
{
	open_after_a_lost_answer(true);
}

Test(restart, changed_object_is_stale_alone, .init = start_writable,
     .fini = kill_daemon, .timeout = 120)
{
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "ds"), ck = rc_dataset(&c, "ck");
	cr_assert(ds >= 0 && ck >= 0);
	/* An object of the writable dataset's prefix, put straight in S3. */
	char name[64], full[400];
	fx_unique(name, sizeof(name), "changes");
	char v1[4096], v2[4096];
	memset(v1, 'a', sizeof(v1));
	memset(v2, 'b', sizeof(v2));
	int w = rc_write_open(&c, ck, name);
	cr_assert_geq(w, 0, "rc_write_open: %s", rc_strerror(w));
	void *buf;
	int bi = rc_alloc_buffer(&c, sizeof(v1), &buf);
	cr_assert_geq(bi, 0);
	memcpy(buf, v1, sizeof(v1));
	cr_assert_eq(rc_write(&c, (uint32_t)w, 0, sizeof(v1), (uint32_t)bi, 0),
		     (ssize_t)sizeof(v1));
	cr_assert_eq(rc_commit(&c, (uint32_t)w), 0);
	cr_assert_eq(rc_sync(&c, (uint32_t)w), 0);
	cr_assert_eq(rc_close(&c, (uint32_t)w), 0);

	char key[DS_KEY_MAX];
	int keep = rc_open(&c, ds, ds_key(&S, 3, key), NULL);
	cr_assert_geq(keep, 0);
	struct rc_stat st;
	int hc = rc_open(&c, ck, name, &st);
	cr_assert_geq(hc, 0, "rc_open %s: %s", name, rc_strerror(hc));
	cr_assert_eq(st.size, sizeof(v1));

	char prefix[300];
	snprintf(prefix, sizeof(prefix), "%s%s/", fx_env()->prefix, scratch);
	snprintf(full, sizeof(full), "%s%s", prefix, name);

	/* A write handle open, uncommitted, across the restart. */
	int lost = rc_write_open(&c, ck, "lost-in-restart");
	cr_assert_geq(lost, 0);
	cr_assert_eq(rc_write(&c, (uint32_t)lost, 0, 100, (uint32_t)bi, 0), 100);

	cr_assert_eq(fx_put_object(full, v2, sizeof(v2)), 0);
	fx_daemon_restart(&D, NULL);

	/* The unchanged object's handle keeps working. */
	struct rc_extent e[MAX_EXT];
	int m = rc_read(&c, (uint32_t)keep, 0, ds_size(&S, 3), e, MAX_EXT);
	cr_assert_gt(m, 0, "rc_read after the restart: %s", rc_strerror(m));
	cr_assert_eq(fx_ds_mismatch(&S, 3, 0, e[0].data, e[0].len), -1);
	for (int x = 0; x < m; x++)
		cr_assert_eq(rc_release(&c, e[x].lease), 0);
	cr_assert_eq(rc_reconnects(&c), 1u);
	/* The changed one fails alone, with -ESTALE, until closed. */
	m = rc_read(&c, (uint32_t)hc, 0, sizeof(v2), e, MAX_EXT);
	cr_assert_eq(m, -ESTALE, "changed object: %d (%s)", m, rc_strerror(m));
	cr_assert_eq(rc_read_into(&c, (uint32_t)hc, 0, 10, (uint32_t)bi, 0),
		     -ESTALE);
	cr_assert_eq(rc_close(&c, (uint32_t)hc), 0);
	/* Opened again it reads the new bytes. */
	hc = rc_open(&c, ck, name, NULL);
	cr_assert_geq(hc, 0);
	cr_assert_eq(rc_read_into(&c, (uint32_t)hc, 0, sizeof(v2),
				  (uint32_t)bi, 0), (ssize_t)sizeof(v2));
	cr_assert_eq(memcmp(buf, v2, sizeof(v2)), 0);
	cr_assert_eq(rc_close(&c, (uint32_t)hc), 0);

	/* The write handle cannot continue: the documented error. */
	cr_assert_eq(rc_write(&c, (uint32_t)lost, 100, 100, (uint32_t)bi, 0),
		     -ECONNRESET);
	cr_assert_eq(rc_commit(&c, (uint32_t)lost), -ECONNRESET);
	cr_assert_eq(rc_close(&c, (uint32_t)lost), 0);
	/* A new write of it succeeds and reaches S3. */
	memcpy(buf, v1, sizeof(v1));
	w = rc_write_open(&c, ck, "lost-in-restart");
	cr_assert_geq(w, 0, "rc_write_open after: %s", rc_strerror(w));
	cr_assert_eq(rc_write(&c, (uint32_t)w, 0, sizeof(v1), (uint32_t)bi, 0),
		     (ssize_t)sizeof(v1));
	cr_assert_eq(rc_commit(&c, (uint32_t)w), 0);
	cr_assert_eq(rc_sync(&c, (uint32_t)w), 0);
	cr_assert_eq(rc_close(&c, (uint32_t)w), 0);
	char *body = NULL;
	size_t len = 0;
	snprintf(full, sizeof(full), "%slost-in-restart", prefix);
	cr_assert_eq(fx_get_object(full, &body, &len), 0);
	cr_assert_eq(len, sizeof(v1));
	cr_assert_eq(memcmp(body, v1, len), 0);
	free(body);
	cr_assert_eq(rc_close(&c, (uint32_t)keep), 0);
	rc_detach(&c);
	stop_daemon();
}

/* With re-attaching off, the loss is reported at once, as before. */
Test(restart, timeout_zero_fails_fast, .init = start_writable,
     .fini = kill_daemon, .timeout = 60)
{
	struct rc_client c;
	attach(&c);
	cr_assert_eq(rc_set_reconnect_timeout(&c, 0), 0);
	int ds = rc_dataset(&c, "ds");
	char key[DS_KEY_MAX];
	int h = rc_open(&c, ds, ds_key(&S, 0, key), NULL);
	cr_assert_geq(h, 0);
	fx_daemon_stop(&D);
	int64_t t0 = mono_ms();
	struct rc_extent e[MAX_EXT];
	cr_assert_eq(rc_read(&c, (uint32_t)h, 0, 10, e, MAX_EXT), -EPIPE);
	/* Half the 60 s default a re-attach would wait: not a bound a busy
	 * machine's stall comes near. */
	cr_assert_lt(mono_ms() - t0, RC_RECONNECT_TIMEOUT_DEFAULT_MS / 2);
	/* A short timeout with no daemon: -EPIPE once it has passed. */
	cr_assert_eq(rc_set_reconnect_timeout(&c, 300), 0);
	t0 = mono_ms();
	cr_assert_eq(rc_read(&c, (uint32_t)h, 0, 10, e, MAX_EXT), -EPIPE);
	cr_assert_geq(mono_ms() - t0, 300);
	rc_detach(&c);
}

/* `ringcache prefetch` keeps going across a restart: its READ_INTOs in
 * flight go again, its handles and buffer come back. */
Test(restart, cli_prefetch_outlives_the_daemon, .init = start_writable,
     .fini = kill_daemon, .timeout = 300)
{
	char log[400];
	snprintf(log, sizeof(log), "%s/prefetch.err", fx_tmpdir());
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		execl(RC_BUILD_DIR "/ringcache", "ringcache", "-s",
		      D.socket_path, "prefetch", "slow", "small/",
		      (char *)NULL);
		_exit(127);
	}
	/* Mid-run: some GETs done (300 objects at 40 a second). */
	int64_t deadline = mono_ms() + 120000;
	while (fx_stat_value(D.socket_path, "ringcache_s3_get_total") < 20) {
		cr_assert_lt(mono_ms(), deadline, "the prefetch made no GET");
		usleep(20000);
	}
	int status = 0;
	cr_assert_eq(waitpid(pid, &status, WNOHANG), 0,
		     "the prefetch ended before the restart");
	fx_daemon_restart(&D, NULL);
	/* Restarted mid-run, its job is done: the rest of the prefetch
	 * need not crawl at 40 a second (16 s of the test's 22 s). */
	cr_assert_eq(fx_daemon_reload(&D, writable_sections(5500)), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	char *cat[] = {"/bin/cat", log, NULL};
	static char out[1 << 16];
	fx_run(cat, out, sizeof(out), 10000);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "prefetch across the restart: status 0x%x: %s", status, out);
	/* What it fetched after the restart is in the new daemon's cache:
	 * reading the last objects costs no GET. */
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	struct rc_client c;
	attach(&c);
	int ds = rc_dataset(&c, "slow");
	for (size_t i = S.n_small - 10; i < S.n_small; i++) {
		char key[DS_KEY_MAX];
		struct rc_extent e[MAX_EXT];
		int h = rc_open(&c, ds, ds_key(&S, i, key), NULL);
		cr_assert_geq(h, 0);
		int n = rc_read(&c, (uint32_t)h, 0, ds_size(&S, i), e, MAX_EXT);
		cr_assert_gt(n, 0);
		for (int x = 0; x < n; x++)
			rc_release(&c, e[x].lease);
		rc_close(&c, (uint32_t)h);
	}
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
		     gets, "the objects prefetched after the restart are "
		     "not in the new daemon's cache");
	rc_detach(&c);
	stop_daemon();
}
