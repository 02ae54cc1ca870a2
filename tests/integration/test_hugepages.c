/* test_hugepages.c - ringcached says at start what its arenas get (2 MiB
 * or 4 KiB pages), why and the command that fixes it, and `ringcache
 * status` and the metrics show huge-page bytes against arena bytes. The
 * shmem THP policy comes from a fake sysfs root (RINGCACHE_SYSFS_ROOT, the
 * documented test hook): the machine's knob is never touched. The daemon's
 * probe asks the real kernel, so where this kernel hands out huge pages
 * anyway the expected verdict is "2 MiB pages". Every case reads objects
 * and compares their bytes with the dataset: arenas with and without huge
 * pages serve the same bytes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "hugepages.h"
#include "ringcache.h"

#define CLI RC_BUILD_DIR "/ringcache"
#define N_OBJ 24

static struct fx_daemon D;
static struct ds_spec S;
static char out[64 * 1024];
static char root[400];

static void teardown(void)
{
	fx_daemon_kill(&D);
	unsetenv("RINGCACHE_SYSFS_ROOT");
}

/* Whether this kernel maps an advised memfd with 2 MiB pages (the real
 * knob, not the fake one). */
static bool kernel_gives_huge(void)
{
	struct hp_report r;
	unsetenv("RINGCACHE_SYSFS_ROOT");
	hp_check(&r, true);
	cr_assert_eq(r.probe_err, 0, "probe: %s", strerror(-r.probe_err));
	return r.probe_huge;
}

static void fake_policy(const char *line)
{
	snprintf(root, sizeof(root), "%s/sysfs", fx_tmpdir());
	char dir[512], path[600];
	snprintf(dir, sizeof(dir), "%s/kernel/mm/transparent_hugepage", root);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
	cr_assert_eq(system(cmd), 0);
	snprintf(path, sizeof(path), "%s/shmem_enabled", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "%s\n", line);
	fclose(f);
	setenv("RINGCACHE_SYSFS_ROOT", root, 1);
}

/* Starts the daemon under the fake policy (fake_policy first), reads N_OBJ objects (bytes
 * checked), and checks the start-up line, the status line and the
 * metrics against `want` (the verdict's words). */
static void check_case(bool asked, const char *want, bool huge)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	D.daemon_extra = asked ? "hugepages = true" : "hugepages = false";
	fx_daemon_start(&D, NULL);

	char line[1300];
	snprintf(line, sizeof(line), "ringcached: %s", want);
	if (!fx_daemon_log_contains(&D, line)) {
		fx_daemon_log_tail(&D, 20);
		cr_assert_fail("no start-up line \"%s\"", line);
	}

	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	cr_assert_eq(rc_attach(&c, D.socket_path, &o), 0);
	int ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0, "dataset: %s", rc_strerror(ds));
	for (size_t i = 0; i < N_OBJ; i++)
		cr_assert_eq(fx_read_whole(&c, ds, &S, i), 0, "object %zu", i);
	rc_detach(&c);

	char *argv[] = {CLI, "-s", D.socket_path, "status", NULL};
	int rc = fx_run(argv, out, sizeof(out), 60000);
	cr_assert_eq(rc, 0, "status: exit %d: %s", rc, out);
	const char *s = strstr(out, "  huge pages  ");
	cr_assert_not_null(s, "no huge pages line:\n%s", out);
	const char *eol = strchr(s, '\n');
	cr_assert(eol && memmem(s, (size_t)(eol - s), want, strlen(want)),
		  "status does not say \"%s\":\n%s", want, out);

	/* The measure is at most a second old: poll for the reads. */
	int64_t res = 0;
	for (int k = 0; k < 300 && res <= 0; k++) {
		res = fx_stat_value(D.socket_path,
				    "ringcache_arena_resident_bytes");
		if (res <= 0)
			usleep(100 * 1000);
	}
	int64_t hp = fx_stat_value(D.socket_path,
				   "ringcache_arena_hugepage_bytes");
	cr_assert_gt(res, 0, "the read objects are resident:\n%s", out);
	cr_assert_leq(hp, res);
	if (!huge)
		cr_assert_eq(hp, 0, "4 KiB arenas with %" PRId64 " huge bytes", hp);
	cr_assert_eq(fx_stat_value(D.socket_path, "ringcache_arena_hugepages"),
		     huge ? 1 : 0);
	fx_daemon_stop(&D);
}

Test(hugepages, never_is_named_with_its_fix, .fini = teardown)
{
	bool huge = kernel_gives_huge();
	fake_policy("always within_size advise [never] deny force");
	char want[1200];
	snprintf(want, sizeof(want),
		 "arenas get 4 KiB pages: shmem_enabled is never (%s/%s); "
		 "fix: echo advise > %s/%s", root, HP_SHMEM_FILE, root,
		 HP_SHMEM_FILE);
	check_case(true, huge ? "arenas get 2 MiB pages" : want, huge);
}

Test(hugepages, advise_says_2mib_or_why_not, .fini = teardown)
{
	bool huge = kernel_gives_huge();
	fake_policy("always within_size [advise] never deny force");
	check_case(true, huge ? "arenas get 2 MiB pages (shmem_enabled advise"
			: "arenas get 4 KiB pages although shmem_enabled is "
			  "advise: the kernel had no free 2 MiB page",
		   huge);
}

Test(hugepages, not_asked_names_the_config_key, .fini = teardown)
{
	/* Unadvised, an arena gets huge pages only where the kernel forces
	 * them on every shmem mapping. */
	FILE *f = fopen("/sys/" HP_SHMEM_FILE, "r");
	char real[128] = "";
	if (f) {
		(void)!fgets(real, sizeof(real), f);
		fclose(f);
	}
	bool forced = strstr(real, "[always]") || strstr(real, "[force]") ||
		      strstr(real, "[within_size]");
	fake_policy("always within_size [advise] never deny force");
	check_case(false, forced ? "arenas get 2 MiB pages"
			  : "arenas get 4 KiB pages: hugepages = false in the "
			    "config and shmem_enabled is advise; fix: set "
			    "hugepages = true",
		   forced);
}
