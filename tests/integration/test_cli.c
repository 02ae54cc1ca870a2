/* test_cli.c - the `ringcache` CLI (src/client/cli.c) run as a user would run it,
 * against a real ringcached in front of the real S3 server: what ls
 * prints, the bytes cat writes, what status reports, what prefetch warms,
 * and the exit codes and messages of the failures. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define CLI RC_BUILD_DIR "/ringcache"
#define OUT_MAX (256u * 1024u)
#define RUN_MS 60000

static struct fx_daemon D;
static struct ds_spec S;
static char out[OUT_MAX];

static void start_default(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	fx_daemon_start(&D, NULL);
}

/* .fini: a test that failed early leaves its daemon running. */
static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

/* `ringcache -s SOCK args...`, stdout and stderr together into out. */
static int cli(const char *a1, const char *a2, const char *a3)
{
	char *argv[] = {CLI, "-s", D.socket_path, (char *)a1, (char *)a2,
			(char *)a3, NULL};

	return fx_run(argv, out, sizeof(out), RUN_MS);
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* `ringcache cat` with stdout alone in a file (cat writes binary bytes;
 * fx_run's text capture would stop at a NUL). Returns the exit status and
 * the bytes in *data (malloc'd) and *len. */
static int cat_to_file(const char *key, uint8_t **data, size_t *len)
{
	char path[400];
	struct stat st;
	int status;

	snprintf(path, sizeof(path), "%s/cat.out", fx_tmpdir());
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
			_exit(126);
		execl(CLI, CLI, "-s", D.socket_path, "cat", "ds", key,
		      (char *)NULL);
		_exit(127);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0 && fstat(fd, &st) == 0, "no output file %s", path);
	*len = (size_t)st.st_size;
	*data = malloc(*len + 1);
	cr_assert(*data);
	cr_assert_eq(read(fd, *data, *len), (ssize_t)*len);
	close(fd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TestSuite(cli, .init = start_default, .fini = kill_daemon, .timeout = 300);

Test(cli, ls_shows_the_top_level_directories)
{
	int rc = cli("ls", "ds", NULL);

	cr_assert_eq(rc, 0, "ls ds: exit %d: %s", rc, out);
	cr_assert_eq(count_lines(out), 3, "ls ds: want 3 lines, got:\n%s", out);
	const char *dirs[] = {"edge/", "large/", "small/"};
	for (size_t i = 0; i < 3; i++) {
		char want[32];
		snprintf(want, sizeof(want), "  %s\n", dirs[i]);
		cr_assert(strstr(out, want), "ls ds lacks %s:\n%s", dirs[i], out);
	}
	fx_daemon_stop(&D);
}

/* Every small object once, each with its real size. */
Test(cli, ls_small_lists_300_objects_with_sizes)
{
	int rc = cli("ls", "ds", "small/");
	bool seen[DS_DEFAULT_SMALL] = {0};
	int lines = 0;

	cr_assert_eq(rc, 0, "ls ds small/: exit %d: %s", rc, out);
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned long long size;
		char name[DS_KEY_MAX + 1];
		cr_assert_eq(sscanf(line, "%llu %64s", &size, name), 2,
			     "unparsable ls line '%s'", line);
		long i = ds_index(&S, name);
		cr_assert(i >= 0 && (size_t)i < S.n_small,
			  "ls lists '%s', not a small object", name);
		cr_assert(!seen[i], "ls lists '%s' twice", name);
		seen[i] = true;
		cr_assert_eq(size, ds_size(&S, (size_t)i),
			     "%s: ls says %llu bytes, want %" PRIu64, name,
			     size, ds_size(&S, (size_t)i));
		lines++;
	}
	cr_assert_eq(lines, DS_DEFAULT_SMALL);
	fx_daemon_stop(&D);
}

Test(cli, cat_writes_exactly_the_objects_bytes)
{
	size_t i = fx_ds_find(&S, "edge/block-plus-one");
	uint8_t *data;
	size_t len;
	int rc = cat_to_file("edge/block-plus-one", &data, &len);

	cr_assert_eq(rc, 0, "cat: exit %d", rc);
	cr_assert_eq(len, ds_size(&S, i), "cat wrote %zu bytes, want %" PRIu64,
		     len, ds_size(&S, i));
	fx_assert_ds_bytes(&S, i, 0, data, len, "ringcache cat");
	free(data);

	rc = cat_to_file("edge/empty", &data, &len);
	cr_assert_eq(rc, 0, "cat edge/empty: exit %d", rc);
	cr_assert_eq(len, 0u, "cat edge/empty wrote %zu bytes", len);
	free(data);
	fx_daemon_stop(&D);
}

/* Two cats of one object: the second is served from the cache, and status
 * reports the same hits and sessions as the daemon's counters. */
Test(cli, status_reports_sessions_and_hits)
{
	uint8_t *data;
	size_t len;
	unsigned long long hits = 0, misses = 0, active = 9, total = 0;

	for (int k = 0; k < 2; k++) {
		cr_assert_eq(cat_to_file("edge/one", &data, &len), 0);
		free(data);
	}
	int rc = cli("status", NULL, NULL);
	cr_assert_eq(rc, 0, "status: exit %d: %s", rc, out);
	const char *s = strstr(out, "sessions");
	const char *h = strstr(out, "hit ratio");
	cr_assert(s && sscanf(s, "sessions %llu active, %llu since start",
			      &active, &total) == 2, "no sessions line:\n%s", out);
	cr_assert(h && (h = strchr(h, '(')) &&
		  sscanf(h, "(%llu hits, %llu misses)", &hits, &misses) == 2,
		  "no hit count:\n%s", out);
	cr_assert_eq(active, 0, "sessions active after the cats:\n%s", out);
	cr_assert_geq(total, 2, "sessions since start:\n%s", out);
	cr_assert_gt(hits, 0, "the second cat should hit:\n%s", out);
	cr_assert_eq((int64_t)hits,
		     fx_stat_value(D.socket_path, "ringcache_cache_hits_total"));
	cr_assert_eq((int64_t)misses,
		     fx_stat_value(D.socket_path, "ringcache_cache_misses_total"));
	fx_daemon_stop(&D);
}

/* After prefetch, reading the objects costs no S3 GET. */
Test(cli, prefetch_warms_the_cache)
{
	int rc = cli("prefetch", "ds", "edge/");

	cr_assert_eq(rc, 0, "prefetch: exit %d: %s", rc, out);
	cr_assert(strstr(out, "4/4 objects"), "prefetch output:\n%s", out);
	int64_t gets = fx_stat_value(D.socket_path, "ringcache_s3_get_total");
	cr_assert_gt(gets, 0);

	uint8_t *data;
	size_t len;
	size_t i = fx_ds_find(&S, "edge/block");
	cr_assert_eq(cat_to_file("edge/block", &data, &len), 0);
	cr_assert_eq(len, ds_size(&S, i));
	free(data);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_s3_get_total"),
		     gets, "cat after prefetch went to S3");
	fx_daemon_stop(&D);
}

Test(cli, unknown_dataset_fails_with_a_clear_message)
{
	int rc = cli("ls", "no-such-dataset", NULL);

	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "unknown dataset 'no-such-dataset'"),
		  "message: %s", out);

	rc = cli("cat", "ds", "edge/no-such-object");
	cr_assert_eq(rc, 1, "cat of a missing key: exit %d: %s", rc, out);
	cr_assert(strstr(out, "no such object"), "message: %s", out);

	rc = cli("prefetch", "ds", "no-such-prefix/");
	cr_assert_eq(rc, 1, "prefetch of nothing: exit %d: %s", rc, out);
	cr_assert(strstr(out, "no objects under 'no-such-prefix/'"),
		  "message: %s", out);
	fx_daemon_stop(&D);
}

Test(cli, bad_usage_exits_2_and_no_daemon_exits_1)
{
	cr_assert_eq(cli("frobnicate", NULL, NULL), 2, "%s", out);
	cr_assert(strstr(out, "usage:"), "%s", out);
	cr_assert_eq(cli("cat", "ds", NULL), 2, "%s", out);

	fx_daemon_stop(&D);
	int rc = cli("status", NULL, NULL);
	cr_assert_eq(rc, 1, "status without a daemon: exit %d: %s", rc, out);
	cr_assert(strstr(out, "cannot reach the daemon"), "%s", out);
}

/* A second ringcached on a socket the first serves stops with the reason
 * and takes nothing away: the first still answers on the same path. */
Test(cli, a_served_socket_stops_a_second_daemon)
{
	char *argv[] = {RC_BUILD_DIR "/ringcached", "-c", D.config_path, NULL};
	char res[8192];
	int rc = fx_run(argv, res, sizeof(res), 20000);
	cr_assert_eq(rc, 1, "second daemon: exit %d:\n%s", rc, res);
	cr_assert(strstr(res, "another ringcached is serving it"), "%s", res);
	rc = cli("status", NULL, NULL);
	cr_assert_eq(rc, 0, "the first daemon after it: exit %d: %s", rc, out);
	cr_assert(strstr(out, "sessions"), "%s", out);
}

/* ---- errors that name the real cause ----------------------------------- */

/* Nothing at the path, or a socket file nobody listens on: both say no
 * daemon listens there, never a missing object or dataset. */
Test(cli, no_daemon_is_named_as_such)
{
	fx_daemon_stop(&D);
	int rc = cli("ls", "ds", NULL);
	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "no daemon is listening on the socket"), "%s", out);
	cr_assert_null(strstr(out, "no such object"), "%s", out);

	/* A stale socket file (a daemon killed with SIGKILL leaves one). */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", D.socket_path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	close(fd);
	rc = cli("status", NULL, NULL);
	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "cannot reach the daemon at") &&
		  strstr(out, "no daemon is listening on the socket"), "%s", out);
	unlink(D.socket_path);
}

/* awscli with the env's endpoint and keys, in a clean environment (as
 * fixture.c's aws-batch runs it); the output lands in out. */
static int aws(const char *const *args)
{
	const struct fx_env *e = fx_env();
	static char home[300], key[300], secret[300], region[100];
	snprintf(home, sizeof(home), "HOME=%s", fx_tmpdir());
	snprintf(key, sizeof(key), "AWS_ACCESS_KEY_ID=%s", e->access_key);
	snprintf(secret, sizeof(secret), "AWS_SECRET_ACCESS_KEY=%s",
		 e->secret_key);
	snprintf(region, sizeof(region), "AWS_DEFAULT_REGION=%s", e->region);
	char *argv[32] = {"/usr/bin/env", "-i", home, "PATH=/usr/bin:/bin",
			  "LC_ALL=C.UTF-8", key, secret, region,
			  "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
			  "AWS_CONFIG_FILE=/dev/null",
			  "AWS_EC2_METADATA_DISABLED=true", "/usr/bin/aws",
			  "--endpoint-url", (char *)e->endpoint, "s3api"};
	int n = 15;
	while (*args && n < 31)
		argv[n++] = (char *)*args++;
	argv[n] = NULL;
	return fx_run(argv, out, sizeof(out), RUN_MS);
}

static char denied_bucket[64];

/* A bucket of our own whose denied/ keys S3 refuses to everyone (an
 * explicit Deny in its policy: RGW sends AccessDenied, empty Message). */
static void make_denied_bucket(void)
{
	char tag[48], body[300], policy[600], resource[128];
	fx_unique(tag, sizeof(tag), "deny");
	snprintf(denied_bucket, sizeof(denied_bucket), "rc-%s", tag);
	for (char *c = denied_bucket; *c; c++)
		*c = *c == '_' ? '-' : (char)tolower((unsigned char)*c);
	snprintf(body, sizeof(body), "%s/obj", fx_tmpdir());
	FILE *f = fopen(body, "w");
	cr_assert(f && fputs("secret bytes\n", f) >= 0 && fclose(f) == 0);
	snprintf(resource, sizeof(resource), "arn:aws:s3:::%s/denied/*",
		 denied_bucket);
	snprintf(policy, sizeof(policy),
		 "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":"
		 "\"Deny\",\"Principal\":\"*\",\"Action\":\"s3:GetObject\","
		 "\"Resource\":\"%s\"}]}", resource);
	cr_assert_eq(aws((const char *[]){"create-bucket", "--bucket",
					  denied_bucket, NULL}), 0, "%s: %s", denied_bucket, out);
	cr_assert_eq(aws((const char *[]){"put-object", "--bucket",
					  denied_bucket, "--key", "denied/x",
					  "--body", body, NULL}), 0, "%s", out);
	cr_assert_eq(aws((const char *[]){"put-bucket-policy", "--bucket",
					  denied_bucket, "--policy", policy,
					  NULL}), 0, "%s", out);
}

static void drop_denied_bucket(void)
{
	if (!denied_bucket[0])
		return;
	aws((const char *[]){"delete-bucket-policy", "--bucket", denied_bucket,
			     NULL});
	aws((const char *[]){"delete-object", "--bucket", denied_bucket,
			     "--key", "denied/x", NULL});
	aws((const char *[]){"delete-bucket", "--bucket", denied_bucket, NULL});
	denied_bucket[0] = '\0';
}

/* As nobody: `ringcache cat private KEY`; exit 0 when the CLI names the
 * local ACL, and not S3. */
static int nobody_cats_private(void *arg)
{
	(void)arg;
	int pfd[2];
	char buf[2048] = "";
	if (pipe(pfd) < 0)
		return 2;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		execl(CLI, CLI, "-s", D.socket_path, "cat", "private", "edge/one",
		      (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	size_t used = 0;
	ssize_t n;
	while (used + 1 < sizeof(buf) &&
	       (n = read(pfd[0], buf + used, sizeof(buf) - 1 - used)) > 0)
		used += (size_t)n;
	int st;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 1)
		return 3;
	if (!strstr(buf, "dataset 'private': not allowed by the dataset's ACL"))
		return 4;
	return strstr(buf, "S3") ? 5 : 0;
}

Test(cli, s3_access_denied_and_the_local_acl_read_differently,
     .fini = drop_denied_bucket)
{
	fx_daemon_stop(&D);
	make_denied_bucket();
	char sections[1024], private[512];
	snprintf(sections, sizeof(sections),
		 "\n[dataset denied]\nuri = s3://%s/\nallow_uids = *\n",
		 denied_bucket);
	fx_dataset_section(private, sizeof(private), "private", "ds/",
			   "allow_uids = 0");
	strcat(sections, private);
	fx_daemon_init(&D);
	D.no_default_dataset = true;
	fx_daemon_start(&D, sections);

	/* S3's refusal: EPERM through the C API, its own text in the CLI. */
	struct rc_client c;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "denied");
	cr_assert_geq(ds, 0);
	cr_assert_eq(rc_open(&c, ds, "denied/x", NULL), -EPERM);
	rc_detach(&c);
	int rc = cli("cat", "denied", "denied/x");
	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	/* The daemon's words: dataset, bucket and key, the cause, S3's code. */
	char where[300];
	snprintf(where, sizeof(where), "dataset denied, s3://%s/denied/x: S3 "
		 "denied the daemon access", denied_bucket);
	cr_assert(strstr(out, where), "want '%s' in: %s", where, out);
	cr_assert(strstr(out, "AccessDenied"), "%s", out);
	cr_assert_null(strstr(out, "ACL"), "sends the user to allow_uids: %s",
		       out);
	/* The local ACL: a user not in allow_uids. */
	cr_assert_eq(fx_as_nobody(nobody_cats_private, NULL), 0,
		     "the ACL refusal reads wrong (see nobody_cats_private)");

	fx_daemon_stop(&D);
	/* One warning naming dataset, bucket, key and S3's code once. */
	char want[300];
	snprintf(want, sizeof(want), " warn dataset denied: OPEN bucket %s key "
		 "denied/x failed: AccessDenied (HTTP 403): S3 denied the "
		 "daemon access", denied_bucket);
	cr_assert_eq(fx_daemon_log_count(&D, want), 2, "one line per refusal "
		     "(C API, CLI), as '%s'", want);
	cr_assert_eq(fx_daemon_log_count(&D, "HTTP 403  HTTP 403"), 0);
}

/* A missing key is routine: info, once per cat, with its cause. */
Test(cli, a_missing_key_is_one_info_line)
{
	int rc = cli("cat", "ds", "edge/no-such-object");
	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	fx_daemon_stop(&D);
	/* A HEAD's 404 says no more: the GET that follows tells NoSuchKey
	 * from NoSuchBucket. */
	cr_assert_eq(fx_daemon_log_count(&D, "ds/edge/no-such-object failed: "
					 "NoSuchKey (HTTP 404)"), 1);
	cr_assert_eq(fx_daemon_log_count(&D, " info dataset ds: OPEN bucket "),
		     1);
	cr_assert_eq(fx_daemon_log_count(&D, " warn dataset ds"), 0);
}

/* Removed by a reload or never configured: both are unknown datasets, to
 * the CLI, a new attach and a session attached before the reload. */
Test(cli, a_removed_dataset_is_an_unknown_dataset)
{
	fx_daemon_stop(&D);
	char extra[512];
	fx_dataset_section(extra, sizeof(extra), "gone", "ds/edge/",
			   "allow_uids = *");
	fx_daemon_init(&D);
	fx_daemon_start(&D, extra);
	struct rc_client c;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	int ds = rc_dataset(&c, "gone");
	cr_assert_geq(ds, 0);
	int h = rc_open(&c, ds, "one", NULL);
	cr_assert_geq(h, 0, "%s", rc_strerror(h));

	cr_assert_eq(fx_daemon_reload(&D, NULL), 0);
	cr_assert_eq(rc_open(&c, ds, "one", NULL), -ENOENT);
	struct rc_stat st;
	cr_assert_eq(rc_stat_handle(&c, (uint32_t)h, &st), -ENOENT);
	rc_detach(&c);
	int rc = cli("ls", "gone", NULL);
	cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
	cr_assert(strstr(out, "unknown dataset 'gone'"), "%s", out);
	cr_assert_null(strstr(out, "ACL"), "%s", out);
	fx_daemon_stop(&D);
}

/* ---- reload that says what it did ---------------------------------------- */

static int attach_count(int n, struct rc_client *cs)
{
	for (int i = 0; i < n; i++) {
		int r = rc_attach(&cs[i], D.socket_path, NULL);
		if (r < 0) {
			while (i-- > 0)
				rc_detach(&cs[i]);
			return r;
		}
	}
	return 0;
}

Test(cli, reload_applies_live_keys_and_names_those_needing_a_restart)
{
	int rc = cli("status", NULL, NULL);
	cr_assert(strstr(out, "config      as in the file"), "%s", out);

	fx_daemon_stop(&D);
	fx_daemon_init(&D);
	D.daemon_extra = "max_sessions = 2";
	D.memory = "128M";
	fx_daemon_start(&D, NULL);
	D.daemon_extra = "max_sessions = 1";
	D.memory = "64M";
	cr_assert_eq(fx_daemon_reload(&D, NULL), 0);
	cr_assert(fx_daemon_log_contains(&D, "reload: [daemon] max_sessions: "
					 "2 -> 1, applied"));
	cr_assert(fx_daemon_log_contains(&D, "reload: [daemon] memory: 128M -> "
					 "64M needs a restart; still running "
					 "with 128M"));
	cr_assert(fx_daemon_log_contains(&D, "1 keys applied, 1 need a restart: "
					 "daemon.memory"));
	/* max_sessions = 1 holds now. One uid's own cap is clamped to it
	 * (max_sessions_per_uid never lets one uid fill the daemon), and that
	 * cap is the refusal it meets first. */
	struct rc_client cs[2];
	cr_assert_eq(attach_count(1, cs), 0);
	struct rc_client extra_client;
	cr_assert_eq(rc_attach(&extra_client, D.socket_path, NULL), -EDQUOT);
	rc_detach(&cs[0]);

	rc = cli("status", NULL, NULL);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "differs from the file until a restart: "
			 "daemon.memory"), "%s", out);
	/* The file edited again and not reloaded yet. */
	usleep(20000); /* a new mtime */
	D.memory = "32M";
	FILE *f = fopen(D.config_path, "a");
	cr_assert(f && fputs("\n; edited\n", f) >= 0 && fclose(f) == 0);
	rc = cli("status", NULL, NULL);
	cr_assert(strstr(out, "the file changed since it was loaded"), "%s",
		  out);
	fx_daemon_stop(&D);
}

Test(cli, reload_that_needs_a_journal_is_refused_with_the_reason)
{
	char ckpt[512], daemon_extra[400];
	fx_dataset_section(ckpt, sizeof(ckpt), "ckpt", "ckpt/",
			   "allow_uids = *\nwritable = true\ndurability = local");
	snprintf(daemon_extra, sizeof(daemon_extra), "journal = %s/journal",
		 D.dir);
	D.daemon_extra = daemon_extra;
	cr_assert_eq(fx_daemon_reload(&D, ckpt), 1, "a durability = local "
		     "dataset was added without a journal");
	cr_assert(fx_daemon_log_contains(&D, "reload refused, keeping the "
					 "running config: dataset ckpt: "
					 "durability = local needs the journal, "
					 "and this daemon started without one"));
	int rc = cli("status", NULL, NULL);
	cr_assert(strstr(out, "the last reload was refused"), "%s", out);
	/* The old config runs on: no ckpt, ds reads. */
	struct rc_client c;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	cr_assert_eq(rc_dataset(&c, "ckpt"), -ENOENT);
	rc_detach(&c);
	uint8_t *data;
	size_t len;
	size_t i = fx_ds_find(&S, "edge/one");
	cr_assert_eq(cat_to_file("edge/one", &data, &len), 0);
	fx_assert_ds_bytes(&S, i, 0, data, len, "edge/one");
	free(data);
	(void)rc;
	fx_daemon_stop(&D);
}
