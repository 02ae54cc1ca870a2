/* test_cli.c - the `ringcache` CLI (src/cli.c) run as a user would run it,
 * against a real ringcached in front of the real S3 server: what ls
 * prints, the bytes cat writes, what status reports, what prefetch warms,
 * and the exit codes and messages of the failures. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"

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
