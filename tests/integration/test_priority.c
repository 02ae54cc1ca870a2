/* test_priority.c - ringcached's nice value: every one of its threads runs
 * at the config's `nice` (-5 unless written) where the kernel allows it,
 * says so at start, says why not where it does not, and a daemon started
 * under nice(1) keeps what it was given unless the file says otherwise.
 * Linux keeps the value per thread, so each thread is read on its own
 * (/proc/PID/task/TID/stat). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"

static struct fx_daemon D;

static void teardown(void)
{
	fx_daemon_kill(&D);
}

TestSuite(priority, .fini = teardown, .timeout = 60);

/* The nice field (19th) of a /proc stat line; the command name in
 * parentheses may hold blanks, so fields count from its last ')'. */
static int stat_nice(const char *path)
{
	char buf[1024];
	FILE *f = fopen(path, "r");
	if (!f)
		return 100; /* the thread ended: not a nice value */
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	cr_assert_not_null(p, "%s: %s", path, buf);
	int field = 2, nice = 100;
	for (char *tok = strtok(p + 1, " "); tok; tok = strtok(NULL, " "))
		if (++field == 19) {
			nice = atoi(tok);
			break;
		}
	cr_assert_eq(field, 19, "%s: short stat line", path);
	return nice;
}

/* Asserts every thread of pid runs at want; returns how many there are. */
static int threads_at(pid_t pid, int want)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[400], comm[64] = "?";
		snprintf(path, sizeof(path), "%s/%s/comm", dir, e->d_name);
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = '\0';
			comm[strcspn(comm, "\n")] = '\0';
			fclose(f);
		}
		snprintf(path, sizeof(path), "%s/%s/stat", dir, e->d_name);
		int nice = stat_nice(path);
		if (nice == 100)
			continue;
		cr_expect_eq(nice, want, "thread %s (%s) at nice %d, not %d",
			     e->d_name, comm, nice, want);
		n++;
	}
	closedir(d);
	return n;
}

/* Whether a process of this test's credentials may lower its nice to -5:
 * asked in a child, so this process keeps its own. */
static bool may_lower(void)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(setpriority(PRIO_PROCESS, 0, -5) == 0 ? 0 : 1);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void start(const char *daemon_extra)
{
	fx_daemon_init(&D);
	D.daemon_extra = daemon_extra;
	fx_daemon_start(&D, NULL);
}

Test(priority, default_is_minus_five_where_allowed)
{
	cr_assert_eq(getpriority(PRIO_PROCESS, 0), 0,
		     "the test must start at nice 0");
	bool lower = may_lower();
	start(NULL);
	int n = threads_at(D.pid, lower ? -5 : 0);
	cr_assert_geq(n, 3, "the shard and digest threads were counted");
	const char *line = lower ? "ringcached: running at nice -5"
				 : "ringcached: default nice -5 not applied";
	if (!fx_daemon_log_contains(&D, line)) {
		fx_daemon_log_tail(&D, 20);
		cr_assert_fail("no line \"%s\"", line);
	}
	fx_daemon_stop(&D);
}

/* Raising one's nice needs no privilege: this holds for every uid. */
Test(priority, the_file_decides)
{
	start("nice = 3");
	cr_assert_geq(threads_at(D.pid, 3), 3);
	cr_assert(fx_daemon_log_contains(&D, "ringcached: running at nice 3"));
	fx_daemon_stop(&D);
}

/* Started under nice(1): the operator chose; neither the default nor
 * `nice = 0` undo it (this test process raises its own nice; the daemon
 * inherits it). */
Test(priority, started_niced_keeps_it)
{
	cr_assert_eq(setpriority(PRIO_PROCESS, 0, 7), 0, "%s", strerror(errno));
	static const char *const files[] = {NULL, "nice = 0"};
	for (int i = 0; i < 2; i++) {
		start(files[i]);
		cr_assert_geq(threads_at(D.pid, 7), 3);
		cr_assert_not(fx_daemon_log_contains(&D, "nice"),
			      "%s", files[i] ? files[i] : "default");
		fx_daemon_stop(&D);
	}
}
