/* test_revoke.c - reload as a revocation, attacked by an unprivileged
 * client (uid 65534, fx_as_nobody): a uid a SIGHUP removed from a
 * dataset's allow_uids keeps no access through the session it opened
 * before (new opens, reads and STATs through old handles, LIST and a new
 * attach all fail with EACCES), while the uids still listed read exactly
 * S3's bytes; a config that nests a root-only dataset inside a public one
 * is refused at start and at reload; a key with a newline cannot forge a
 * log line. */
#include <criterion/criterion.h>

#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1u << 20)
#define OTHER_UID 4242 /* stays in the list: reads on after the reload */

static struct fx_daemon D;
static struct ds_spec S;

static void teardown(void)
{
	fx_daemon_kill(&D);
}

TestSuite(revoke, .fini = teardown, .timeout = 240);

/* Two small objects of the sample dataset (read whole in one call). */
static void small_objects(size_t *a, size_t *b)
{
	size_t found = 0;
	for (size_t i = 0; i < ds_count(&S) && found < 2; i++) {
		if (ds_size(&S, i) == 0 || ds_size(&S, i) > MiB)
			continue;
		if (found++ == 0)
			*a = i;
		else
			*b = i;
	}
	cr_assert_eq(found, 2, "the sample dataset has no two small objects");
}

/* Starts the daemon with [dataset ds] guarded by `allow`. */
static void start_with(const char *allow)
{
	char section[1024];
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.no_default_dataset = true;
	fx_dataset_section(section, sizeof(section), "ds", "ds/", allow);
	fx_daemon_start(&D, section);
}

/* Opens object i through c, reads it whole into a fresh buffer and
 * compares with the dataset: 0 when equal, else a negated errno or 1.
 * Safe in a forked child (no Criterion). *handle gets the handle. */
static int read_object(struct rc_client *c, int ds, size_t i, int *handle)
{
	char key[DS_KEY_MAX];
	void *mem;
	int buf = rc_alloc_buffer(c, MiB, &mem);
	if (buf < 0)
		return buf;
	int h = rc_open(c, ds, ds_key(&S, i, key), NULL);
	if (h < 0)
		return h;
	if (handle)
		*handle = h;
	ssize_t n = rc_read_into(c, (uint32_t)h, 0, ds_size(&S, i),
				 (uint32_t)buf, 0);
	if (n < 0)
		return (int)n;
	if ((uint64_t)n != ds_size(&S, i) ||
	    fx_ds_mismatch(&S, i, 0, mem, (size_t)n) >= 0)
		return 1;
	return 0;
}

/* ---- a removed uid loses its live session ------------------------------ */

struct revoke_ctx {
	int to_parent[2], to_child[2];
	size_t a, b;
	char narrowed[1024]; /* [dataset ds] without uid 65534 */
};

/* The reload when the child asks for it (EOF: it died early). */
static void reload_when_asked(struct revoke_ctx *x)
{
	char go;
	char verdict = 'x';
	if (read(x->to_parent[0], &go, 1) == 1)
		verdict = fx_daemon_reload(&D, x->narrowed) == 0 ? 'y' : 'n';
	if (write(x->to_child[1], &verdict, 1) != 1)
		perror("write");
}

/* As nobody: reads before the reload, then probes every way back in.
 * Exit codes name the step that wrongly succeeded (or failed). */
static int nobody_across_reload(void *arg)
{
	struct revoke_ctx *x = arg;
	struct rc_client c;
	struct rc_stat st;
	struct rc_extent ext;
	char key[DS_KEY_MAX];
	int h;
	if (rc_attach(&c, D.socket_path, NULL) < 0)
		return 10;
	int ds = rc_dataset(&c, "ds");
	if (ds < 0 || read_object(&c, ds, x->a, &h) != 0)
		return 11;
	/* A lease taken before the reload. */
	int n = rc_read(&c, (uint32_t)h, 0, 1, &ext, 1);
	if (n != 1 || fx_ds_mismatch(&S, x->a, 0, ext.data, 1) >= 0)
		return 12;
	char verdict = 0;
	if (write(x->to_parent[1], "r", 1) != 1 ||
	    read(x->to_child[0], &verdict, 1) != 1 || verdict != 'y')
		return 13;

	if (rc_open(&c, ds, ds_key(&S, x->b, key), NULL) != -EACCES)
		return 20; /* a new key through the old session */
	void *mem;
	int buf = rc_alloc_buffer(&c, MiB, &mem);
	if (buf < 0 || rc_read_into(&c, (uint32_t)h, 0, 1, (uint32_t)buf, 0) !=
			       -EACCES)
		return 21; /* the handle opened before */
	struct rc_extent probe;
	if (rc_read(&c, (uint32_t)h, 0, 1, &probe, 1) != -EACCES)
		return 22;
	if (rc_stat_handle(&c, (uint32_t)h, &st) != -EACCES)
		return 23;
	int more;
	if (rc_list(&c, ds, "", 0, (uint32_t)buf, 0, MiB, &more) != -EACCES)
		return 24;
	/* The lease granted before stays mapped until released. */
	if (fx_ds_mismatch(&S, x->a, 0, ext.data, 1) >= 0 ||
	    rc_release(&c, ext.lease) != 0)
		return 25;
	if (rc_close(&c, (uint32_t)h) != 0)
		return 26;
	rc_detach(&c);

	struct rc_client fresh;
	if (rc_attach(&fresh, D.socket_path, NULL) < 0)
		return 27;
	int r = rc_dataset(&fresh, "ds");
	rc_detach(&fresh);
	return r == -EACCES ? 0 : 28;
}

/* In a child that is OTHER_UID: reads object i whole; exit 0 if exact. */
static int other_uid_reads(size_t i)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct rc_client c;
		if (setgroups(0, NULL) < 0 ||
		    setresgid(OTHER_UID, OTHER_UID, OTHER_UID) < 0 ||
		    setresuid(OTHER_UID, OTHER_UID, OTHER_UID) < 0)
			_exit(125);
		if (rc_attach(&c, D.socket_path, NULL) < 0)
			_exit(2);
		int ds = rc_dataset(&c, "ds");
		int r = ds < 0 ? 3 : read_object(&c, ds, i, NULL) ? 4 : 0;
		rc_detach(&c);
		_exit(r);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 125,
		  "could not become uid %d", OTHER_UID);
	return WEXITSTATUS(st);
}

Test(revoke, a_uid_removed_by_reload_loses_its_live_session)
{
	start_with("allow_uids = *");
	struct revoke_ctx x;
	small_objects(&x.a, &x.b);
	fx_dataset_section(x.narrowed, sizeof(x.narrowed), "ds", "ds/",
			   "allow_uids = 0, " "4242");
	cr_assert_eq(pipe(x.to_parent), 0);
	cr_assert_eq(pipe(x.to_child), 0);

	/* Root's session, open across the reload too. */
	struct rc_client root;
	cr_assert_eq(rc_attach(&root, D.socket_path, NULL), 0);
	int ds = rc_dataset(&root, "ds");
	int h;
	cr_assert_eq(read_object(&root, ds, x.a, &h), 0);

	/* No thread beside the fork (fx_as_nobody_start says why). */
	pid_t child = fx_as_nobody_start(nobody_across_reload, &x);
	close(x.to_parent[1]); /* a child that dies early: EOF */
	reload_when_asked(&x);
	int rc = fx_as_nobody_wait(child);
	cr_assert_eq(rc, 0, "nobody's step %d was not refused as it should "
		     "be (see the test's exit codes)", rc);

	/* Those still listed read the exact bytes, old handle and new. */
	void *mem;
	int buf = rc_alloc_buffer(&root, MiB, &mem);
	cr_assert_geq(buf, 0);
	ssize_t n = rc_read_into(&root, (uint32_t)h, 0, ds_size(&S, x.a),
				 (uint32_t)buf, 0);
	cr_assert_eq(n, (ssize_t)ds_size(&S, x.a), "root's old handle: %zd", n);
	fx_assert_ds_bytes(&S, x.a, 0, mem, (size_t)n, "root, old handle");
	cr_assert_eq(read_object(&root, ds, x.b, NULL), 0);
	rc_detach(&root);
	cr_assert_eq(other_uid_reads(x.b), 0, "uid %d, still listed, cannot "
		     "read after the reload", OTHER_UID);

	cr_assert(fx_daemon_log_contains(&D, "reload revoked read access of "
					 "session"), "no log line for the "
		  "revoked session");
	cr_assert(fx_daemon_log_contains(&D, "uid 65534"));
	fx_daemon_stop(&D);
}

/* ---- nested datasets with different ACLs -------------------------------- */

static int nobody_reads(void *arg)
{
	size_t i = *(size_t *)arg;
	struct rc_client c;
	if (rc_attach(&c, D.socket_path, NULL) < 0)
		return 2;
	int ds = rc_dataset(&c, "ds");
	int secret = rc_dataset(&c, "secret");
	int r = ds < 0 ? 3 : read_object(&c, ds, i, NULL) ? 4 :
		secret != -ENOENT ? 5 : 0;
	rc_detach(&c);
	return r;
}

Test(revoke, a_root_only_dataset_inside_a_public_one_is_refused)
{
	start_with("allow_uids = *");
	size_t a, b;
	small_objects(&a, &b);
	/* [dataset ds] stays public; the nested one would be root's. */
	char nested[2048], public[1024], secret[1024];
	fx_dataset_section(public, sizeof(public), "ds", "ds/",
			   "allow_uids = *");
	fx_dataset_section(secret, sizeof(secret), "secret", "ds/edge/",
			   "allow_uids = 0");
	snprintf(nested, sizeof(nested), "%s%s", public, secret);
	cr_assert_eq(fx_daemon_reload(&D, nested), 1, "the nested dataset "
		     "was accepted by reload");
	cr_assert(fx_daemon_log_contains(&D, "[dataset secret] uri: "),
		  "the refusal does not name the nested dataset");
	cr_assert(fx_daemon_log_contains(&D, "overlaps dataset ds (line"),
		  "the refusal does not name the outer dataset");
	/* The old config runs on: the public dataset, no 'secret'. */
	cr_assert_eq(fx_as_nobody(nobody_reads, &a), 0);

	/* At start (and --check-config) too. */
	char out[4096];
	char *argv[] = {RC_BUILD_DIR "/ringcached", "--check-config",
			D.config_path, NULL};
	int rc = fx_run(argv, out, sizeof(out), 10000);
	cr_assert_eq(rc, 1, "--check-config: exit %d: %s", rc, out);
	cr_assert(strstr(out, "[dataset secret] uri: ") &&
		  strstr(out, "overlaps dataset ds"), "%s", out);
	fx_daemon_stop(&D);
}

/* ---- a key cannot forge a log line -------------------------------------- */

#define FORGED "2031-01-01T00:00:00.000Z error forged by a key"

static int nobody_opens_evil_key(void *arg)
{
	(void)arg;
	struct rc_client c;
	if (rc_attach(&c, D.socket_path, NULL) < 0)
		return 2;
	int ds = rc_dataset(&c, "ds");
	int r = rc_open(&c, ds, "evil\n" FORGED, NULL);
	rc_detach(&c);
	return r == -ENOENT ? 0 : 3;
}

Test(revoke, a_key_with_a_newline_is_one_escaped_log_line)
{
	start_with("allow_uids = *");
	int rc = fx_as_nobody(nobody_opens_evil_key, NULL);
	cr_assert_eq(rc, 0, "nobody's OPEN of the key: step %d failed", rc);
	fx_daemon_stop(&D); /* every line written */
	cr_assert(fx_daemon_log_contains(&D, "ds/evil\\x0a" FORGED
					 " failed: "), "the key is not logged "
		  "escaped on one line");
	/* No line may start with the forged text. */
	FILE *f = fopen(D.log_path, "r");
	cr_assert_not_null(f);
	char line[8192];
	while (fgets(line, sizeof(line), f))
		cr_assert_neq(strncmp(line, FORGED, strlen(FORGED)), 0,
			      "a forged log line: %s", line);
	fclose(f);
}
