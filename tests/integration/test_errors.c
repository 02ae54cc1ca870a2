/* test_errors.c - each misconfiguration a user meets reaches them as its
 * own errno and a text naming the dataset, the bucket and the cause
 * (docs/ERRORS.md): through the C API (rc_last_error), the CLI's stderr
 * and ringcached --check-config. Against the real S3 server; the broken
 * endpoints are a port nobody listens on and a host name with a label
 * longer than DNS allows (63 bytes), which the resolver refuses before
 * sending a query: a name under .invalid alone would still be asked of
 * the machine's name server, past this machine. Also: a reload whose
 * credential fetch is slow holds no client of the shard. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define CLI RC_BUILD_DIR "/ringcache"
#define RUN_MS 60000

static struct fx_daemon D;
static char out[16384];

static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

TestSuite(errors, .fini = kill_daemon, .timeout = 240);

static int cli(const char *a1, const char *a2, const char *a3)
{
	char *argv[] = {CLI, "-s", D.socket_path, (char *)a1, (char *)a2,
			(char *)a3, NULL};
	return fx_run(argv, out, sizeof(out), RUN_MS);
}

/* A daemon whose S3 is unusable answers at once: no retries. */
static void start(const char *endpoint, const char *secret, const char *extra)
{
	fx_daemon_init(&D);
	D.s3_endpoint = endpoint;
	D.secret_key = secret;
	D.max_retries = 0;
	fx_daemon_start(&D, extra);
}

/* What a C client sees for OPEN and LIST of dataset name: err, and a
 * text holding every string of want. */
static void expect_client_error(const char *name, int err,
				const char *const *want)
{
	struct rc_client c;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, name);
	cr_assert_geq(ds, 0, "dataset %s: %s", name, rc_strerror(ds));
	int h = rc_open(&c, ds, "edge/one", NULL);
	cr_assert_eq(h, err, "rc_open: %d (%s), want %d", h, rc_strerror(h),
		     err);
	const char *text = rc_last_error(&c, h);
	for (const char *const *w = want; *w; w++)
		cr_assert(strstr(text, *w), "rc_open's error lacks '%s': %s",
			  *w, text);
	/* Another errno than the last failure's: the generic text. */
	cr_assert_str_eq(rc_last_error(&c, -EBADF), rc_strerror(-EBADF));

	void *mem;
	int buf = rc_alloc_buffer(&c, 1 << 16, &mem);
	cr_assert_geq(buf, 0);
	int more;
	int n = rc_list(&c, ds, "", 0, (uint32_t)buf, 0, 1 << 16, &more);
	cr_assert_eq(n, err, "rc_list: %d (%s), want %d", n, rc_strerror(n),
		     err);
	text = rc_last_error(&c, n);
	for (const char *const *w = want; *w; w++)
		cr_assert(strstr(text, *w), "rc_list's error lacks '%s': %s",
			  *w, text);
	rc_detach(&c);
}

/* The same through `ringcache ls` and `ringcache cat`: exit 1, stderr. */
static void expect_cli_error(const char *name, const char *const *want)
{
	int rc = cli("ls", name, NULL);
	cr_assert_eq(rc, 1, "ls: exit %d: %s", rc, out);
	for (const char *const *w = want; *w; w++)
		cr_assert(strstr(out, *w), "ls's stderr lacks '%s': %s", *w, out);
	rc = cli("cat", name, "edge/one");
	cr_assert_eq(rc, 1, "cat: exit %d: %s", rc, out);
	for (const char *const *w = want; *w; w++)
		cr_assert(strstr(out, *w), "cat's stderr lacks '%s': %s", *w,
			  out);
}

Test(errors, a_missing_bucket_is_enodev_naming_dataset_and_bucket)
{
	char bucket[96], section[300];
	fx_unique(bucket, sizeof(bucket), "no-such-bucket");
	for (char *p = bucket; *p; p++)
		*p = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
	snprintf(section, sizeof(section),
		 "\n[dataset nobucket]\nuri = s3://%s/x/\nallow_uids = *\n",
		 bucket);
	start(NULL, NULL, section);
	char where[200];
	snprintf(where, sizeof(where), "dataset nobucket, s3://%s/x/", bucket);
	const char *want[] = {where, "the bucket does not exist",
			      "NoSuchBucket", NULL};
	expect_client_error("nobucket", -ENODEV, want);
	expect_cli_error("nobucket", want);
	/* The default dataset, in a bucket that exists, still reads. */
	int rc = cli("ls", "ds", NULL);
	cr_assert_eq(rc, 0, "ls ds: %s", out);
	/* The start checked the buckets, off the reactor, and said so. */
	char warn[300];
	snprintf(warn, sizeof(warn), "warn preflight: %s: the bucket does "
		 "not exist", where);
	for (int i = 0; i < 1000 && !fx_daemon_log_contains(&D, warn); i++)
		usleep(10000);
	cr_assert(fx_daemon_log_contains(&D, warn), "no '%s' in the log", warn);
	cr_assert(fx_daemon_log_contains(&D, "info preflight: dataset ds, "),
		  "the good bucket is not reported");
	fx_daemon_stop(&D);
	cr_assert(fx_daemon_log_contains(&D, " warn dataset nobucket: "),
		  "a missing bucket is a warning in the log");
}

Test(errors, nothing_listening_at_the_endpoint_is_econnrefused)
{
	/* Port 1 on loopback: nothing listens, the connect fails at once. */
	start("http://127.0.0.1:1", NULL, NULL);
	const struct fx_env *e = fx_env();
	char where[300];
	snprintf(where, sizeof(where), "dataset ds, s3://%s/%sds/", e->bucket,
		 e->prefix);
	const char *want[] = {where, "S3's endpoint http://127.0.0.1:1 "
			      "refused the connection", NULL};
	expect_client_error("ds", -ECONNREFUSED, want);
	expect_cli_error("ds", want);
	fx_daemon_stop(&D);
}

#define LABEL64 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define UNRESOLVABLE "http://" LABEL64 ".invalid:9000"

Test(errors, an_endpoint_that_does_not_resolve_is_enxio)
{
	start(UNRESOLVABLE, NULL, NULL);
	const struct fx_env *e = fx_env();
	char where[300];
	snprintf(where, sizeof(where), "dataset ds, s3://%s/%sds/", e->bucket,
		 e->prefix);
	const char *want[] = {where, "the host name of S3's endpoint "
			      UNRESOLVABLE " does not resolve (DNS)", NULL};
	expect_client_error("ds", -ENXIO, want);
	expect_cli_error("ds", want);
	fx_daemon_stop(&D);
}

Test(errors, a_wrong_secret_key_is_ekeyrejected)
{
	start(NULL, "wrong-secret-key-0123456789abcdefghijklmn", NULL);
	const struct fx_env *e = fx_env();
	char where[300];
	snprintf(where, sizeof(where), "dataset ds, s3://%s/%sds/", e->bucket,
		 e->prefix);
	const char *want[] = {where, "S3 rejected the daemon's credentials",
			      "SignatureDoesNotMatch", NULL};
	expect_client_error("ds", -EKEYREJECTED, want);
	expect_cli_error("ds", want);
	fx_daemon_stop(&D);
	/* The key is never in what a client or the log is told. */
	cr_assert_not(fx_daemon_log_contains(&D, "wrong-secret-key"));
	cr_assert_null(strstr(out, "wrong-secret-key"));
}

/* ---- ringcached --check-config ------------------------------------------ */

/* ringcached --check-config on text; offline: the file alone, no request
 * to S3 (a test sends nothing past this machine: a file whose endpoint is
 * AWS is checked offline). */
static int check_config_as(const char *text, char *path, size_t len,
			   bool offline)
{
	static char dir[256];
	if (!dir[0])
		snprintf(dir, sizeof(dir), "%s", fx_tmpdir());
	snprintf(path, len, "%s/check.conf", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
	char *argv[] = {RC_BUILD_DIR "/ringcached", "--check-config", path,
			offline ? "--offline" : NULL, NULL};
	return fx_run(argv, out, sizeof(out), RUN_MS);
}

static int check_config(const char *text, char *path, size_t len)
{
	return check_config_as(text, path, len, false);
}

/* No endpoint: the daemon talks to AWS, and says so. */
Test(errors, check_config_prints_the_aws_endpoint_when_none_is_set)
{
	char path[300];
	int rc = check_config_as("[s3]\nregion = eu-west-3\n"
				 "credentials = config\n"
				 "access_key = AKIDEXAMPLE\nsecret_key = x\n"
				 "[dataset d]\nuri = s3://bucket-a/x\n",
				 path, sizeof(path), true);
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "endpoint: https://s3.eu-west-3.amazonaws.com "
			 "(AWS S3 in region eu-west-3: [s3] endpoint is not "
			 "set)"), "%s", out);
	cr_assert_null(strstr(out, "dataset d,"),
		       "--offline checked the bucket: %s", out);
	/* A set endpoint is printed as it is. */
	rc = check_config_as("[s3]\nendpoint = http://127.0.0.1:1\n"
			     "[dataset d]\nuri = s3://bucket-a/x\n", path,
			     sizeof(path), true);
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "endpoint: http://127.0.0.1:1\n"), "%s", out);
}

/* The buckets, checked with the file's credentials: a warning naming the
 * cause, exit 0 (S3 may be away for a moment). */
Test(errors, check_config_checks_each_bucket)
{
	const struct fx_env *e = fx_env();
	char path[300], text[2048], bucket[96];
	fx_unique(bucket, sizeof(bucket), "no-such-bucket");
	for (char *p = bucket; *p; p++)
		*p = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
	const char *s3 = "[s3]\nendpoint = %s\nregion = %s\naddressing = path\n"
			 "tls_verify = false\ncredentials = config\n"
			 "access_key = %s\nsecret_key = %s\n"
			 "[dataset ds]\nuri = s3://%s/%sds/\n"
			 "[dataset nobucket]\nuri = s3://%s/x/\n";
	snprintf(text, sizeof(text), s3, e->endpoint, e->region, e->access_key,
		 e->secret_key, e->bucket, e->prefix, bucket);
	int rc = check_config(text, path, sizeof(path));
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	char want[400];
	snprintf(want, sizeof(want), "dataset ds, s3://%s/%sds/: the bucket is "
		 "there and readable at %s", e->bucket, e->prefix, e->endpoint);
	cr_assert(strstr(out, want), "want '%s' in: %s", want, out);
	snprintf(want, sizeof(want), "warning: dataset nobucket, s3://%s/x/: "
		 "the bucket does not exist", bucket);
	cr_assert(strstr(out, want), "want '%s' in: %s", want, out);
	/* A wrong secret: named, for both. */
	snprintf(text, sizeof(text), s3, e->endpoint, e->region, e->access_key,
		 "not-the-secret", e->bucket, e->prefix, bucket);
	rc = check_config(text, path, sizeof(path));
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "warning: dataset ds, "), "%s", out);
	cr_assert(strstr(out, "S3 rejected the daemon's credentials"), "%s",
		  out);
	cr_assert_null(strstr(out, "not-the-secret"), "%s", out);
	/* Nobody listening: named, and still exit 0. */
	snprintf(text, sizeof(text), s3, "http://127.0.0.1:1", e->region,
		 e->access_key, e->secret_key, e->bucket, e->prefix, bucket);
	rc = check_config(text, path, sizeof(path));
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "warning: dataset ds, "), "%s", out);
	cr_assert(strstr(out, "S3's endpoint http://127.0.0.1:1 refused the "
			 "connection"), "%s", out);
}

/* A directory passed the check and failed the start with "cannot read:
 * Input/output error": now the check names file, line and cause. */
Test(errors, check_config_refuses_a_directory_as_credentials_file)
{
	char path[300], text[600], dir[256];
	snprintf(dir, sizeof(dir), "%s", fx_tmpdir());
	snprintf(text, sizeof(text), "[s3]\n"
		 "credentials = file\n"
		 "credentials_file = %s\n"
		 "[dataset d]\nuri = s3://bucket-a/x\n", dir);
	int rc = check_config(text, path, sizeof(path));
	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	char want[1024];
	snprintf(want, sizeof(want), "%s:3: [s3] credentials_file: not a "
		 "regular file (a directory) (got '%s')", path, dir);
	cr_assert(strstr(out, want), "want '%s' in: %s", want, out);
	/* A typo'd key: the nearest one, not a list cut off. */
	rc = check_config("[s3]\nendpont = http://127.0.0.1:1\n"
			  "[dataset d]\nuri = s3://bucket-a/x\n", path,
			  sizeof(path));
	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	cr_assert(strstr(out, ":2: [s3] endpont: unknown key (did you mean "
			 "'endpoint'?)"), "%s", out);
}

/* ---- a reload that fetches credentials ----------------------------------- */

struct reload_arg {
	int rc;
};

static void *reload_thread(void *arg)
{
	((struct reload_arg *)arg)->rc = fx_daemon_reload(&D, NULL);
	return NULL;
}

static uint64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A SIGHUP that switches to container credentials from an endpoint that
 * holds its first answer past the daemon's 2 s timeout (bad-s3.py
 * creds-slow): the fetch runs on shard 0's workers, so the one shard,
 * whose thread takes the SIGHUP, serves reads (cached and not) meanwhile;
 * that reload is refused with the timeout as its reason. The next one
 * gets its answer at once and applies: the fetched keys sign a GET. */
Test(errors, reload_fetching_credentials_leaves_the_reactor_free)
{
	static struct fx_bad_s3 b;
	fx_bad_s3_start(&b, "creds-slow", "creds/");
	char uri[128];
	snprintf(uri, sizeof(uri), "%s/container-credentials", b.endpoint);
	cr_assert_eq(setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri, 1), 0);
	struct ds_spec spec;
	ds_spec_default(&spec);
	cr_assert_geq(ds_count(&spec), 3);
	fx_daemon_init(&D);
	D.daemon_extra = "shards = 1";
	fx_daemon_start(&D, NULL);
	struct rc_client c;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0);
	cr_assert_eq(fx_read_whole(&c, ds, &spec, 0), 0);

	D.s3_creds = "credentials = container";
	int refused = fx_daemon_log_count(&D, "reload refused");
	struct reload_arg ra = {-2};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, reload_thread, &ra), 0);
	for (int i = 0; i < 3000 && fx_bad_s3_stat(&b, "creds") < 1; i++)
		usleep(10000);
	cr_assert_geq(fx_bad_s3_stat(&b, "creds"), 1, "no credential fetch");
	uint64_t t0 = ms_now();
	cr_assert_eq(fx_read_whole(&c, ds, &spec, 0), 0);
	uint64_t hot = ms_now() - t0;
	t0 = ms_now();
	cr_assert_eq(fx_read_whole(&c, ds, &spec, 1), 0);
	uint64_t cold = ms_now() - t0;
	/* By order, not by time: the reads ended before the held fetch
	 * timed out (a bound on their milliseconds failed on busy CI). */
	cr_assert_eq(fx_daemon_log_count(&D, "reload refused"), refused,
		     "the reload ended before the reads (%llu, %llu ms): "
		     "they waited for the fetch", (unsigned long long)hot,
		     (unsigned long long)cold);
	cr_log_info("reads during the credential fetch: cached %llu ms, "
		    "cold %llu ms", (unsigned long long)hot,
		    (unsigned long long)cold);
	pthread_join(th, NULL);
	cr_assert_eq(ra.rc, 1, "the held fetch did not refuse the reload");
	cr_assert(fx_daemon_log_contains(&D, "reload refused, keeping the "
					 "running config: [s3] credentials: "
					 "container credentials: GET "),
		  "no refusal naming the fetch");
	cr_assert_eq(fx_daemon_reload(&D, NULL), 0, "the second reload");
	cr_assert(fx_daemon_log_contains(&D, "reload: credentials now from "
					 "container"));
	cr_assert_eq(fx_read_whole(&c, ds, &spec, 2), 0, "signed with the "
		     "fetched keys");
	rc_detach(&c);
	fx_daemon_stop(&D);
	fx_bad_s3_stop(&b);
}

/* ---- ringcache status ----------------------------------------------------- */

/* A refused reload is shown, with its reason, also while keys of an
 * earlier reload wait for a restart. */
Test(errors, status_shows_a_refused_reload_and_why)
{
	fx_daemon_init(&D);
	D.memory = "128M";
	fx_daemon_start(&D, NULL);
	D.memory = "64M"; /* applies at a restart only */
	cr_assert_eq(fx_daemon_reload(&D, NULL), 0);
	int rc = cli("status", NULL, NULL);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "differs from the file until a restart: "
			 "daemon.memory"), "%s", out);
	D.daemon_extra = "max_sesions = 4";
	cr_assert_eq(fx_daemon_reload(&D, NULL), 1);
	rc = cli("status", NULL, NULL);
	cr_assert_eq(rc, 0, "%s", out);
	char want[600];
	snprintf(want, sizeof(want), "the last reload was refused, it runs the "
		 "config it had: %s:", D.config_path);
	cr_assert(strstr(out, want), "want '%s' in: %s", want, out);
	cr_assert(strstr(out, "[daemon] max_sesions: unknown key (did you mean "
			 "'max_sessions'?)"), "%s", out);
	cr_assert(strstr(out, "differs from the file until a restart: "
			 "daemon.memory"), "%s", out);
	/* Fixed and reloaded: the refusal is gone. */
	D.daemon_extra = NULL;
	cr_assert_eq(fx_daemon_reload(&D, NULL), 0);
	rc = cli("status", NULL, NULL);
	cr_assert_null(strstr(out, "last reload was refused"), "%s", out);
	fx_daemon_stop(&D);
}
