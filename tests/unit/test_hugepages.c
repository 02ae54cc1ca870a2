/* test_hugepages.c - unit tests of the arenas' huge-page check
 * (src/store/hugepages.c): the shmem THP policy read from a fake sysfs
 * root (RINGCACHE_SYSFS_ROOT, never the machine's knob), the verdict and
 * its message for each cause, the probe against the real kernel, the
 * smaps measure, and arenas with and without huge-page advice holding the
 * same bytes as a reader's read-only mapping sees them. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "hugepages.h"

#define MiB (1024u * 1024u)

static char root[256];

/* A fake sysfs root whose shmem_enabled holds `line` (NULL: no file, as
 * a kernel without THP). */
static const char *fake_root(const char *line)
{
	const char *tmp = getenv("RINGCACHE_TEST_TMP");
	snprintf(root, sizeof(root), "%s/hp-sysfs.XXXXXX", tmp ? tmp : "/tmp");
	cr_assert_not_null(mkdtemp(root));
	char p[512];
	snprintf(p, sizeof(p), "%s/kernel/mm/transparent_hugepage", root);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "mkdir -p %s", p);
	cr_assert_eq(system(cmd), 0);
	if (line) {
		strcat(p, "/shmem_enabled");
		FILE *f = fopen(p, "w");
		cr_assert_not_null(f);
		fprintf(f, "%s\n", line);
		fclose(f);
	}
	return root;
}

static void rm_root(void)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	if (root[0])
		(void)!system(cmd);
	root[0] = 0;
}

/* The real kernel's answer for a memfd advised like an arena. */
static bool kernel_gives_huge(void)
{
	struct hp_report r;
	hp_check(&r, true);
	cr_assert_eq(r.probe_err, 0, "probe: %s", strerror(-r.probe_err));
	return r.probe_huge;
}

Test(hugepages, policy_is_the_bracketed_word, .fini = rm_root)
{
	struct hp_report r = {0};
	hp_read_policy(&r, fake_root("always within_size advise [never] deny force"));
	cr_assert_str_eq(r.policy, "never");
	cr_assert(strstr(r.path, root) == r.path, "path %s", r.path);
	rm_root();
	hp_read_policy(&r, fake_root("[advise]"));
	cr_assert_str_eq(r.policy, "advise");
	rm_root();
	hp_read_policy(&r, fake_root("within_size"));
	cr_assert_str_eq(r.policy, "within_size");
}

Test(hugepages, never_names_the_knob_and_the_command, .fini = rm_root)
{
	struct hp_report r = {.asked = true};
	char msg[768];
	hp_read_policy(&r, fake_root("always within_size advise [never] deny force"));
	hp_judge(&r);
	cr_assert_eq(r.verdict, HP_POLICY);
	hp_describe(&r, msg, sizeof(msg));
	char fix[400];
	snprintf(fix, sizeof(fix), "fix: echo advise > %s", r.path);
	cr_assert(strstr(msg, "4 KiB pages: shmem_enabled is never"), "%s", msg);
	cr_assert(strstr(msg, fix), "%s", msg);
	rm_root();
	hp_read_policy(&r, fake_root("always within_size advise never [deny] force"));
	hp_judge(&r);
	cr_assert_eq(r.verdict, HP_POLICY);
	cr_assert(strstr(hp_describe(&r, msg, sizeof(msg)),
			 "shmem_enabled is deny"), "%s", msg);
}

Test(hugepages, each_cause_has_its_verdict_and_fix, .fini = rm_root)
{
	char msg[768];
	struct hp_report r = {.asked = true};
	hp_read_policy(&r, fake_root(NULL)); /* no THP in this kernel */
	hp_judge(&r);
	cr_assert_eq(r.verdict, HP_NO_THP);
	cr_assert(strstr(hp_describe(&r, msg, sizeof(msg)),
			 "CONFIG_TRANSPARENT_HUGEPAGE"), "%s", msg);
	rm_root();

	hp_read_policy(&r, fake_root("always within_size [advise] never deny force"));
	r.asked = false;
	hp_judge(&r);
	cr_assert_eq(r.verdict, HP_NOT_ASKED);
	cr_assert(strstr(hp_describe(&r, msg, sizeof(msg)),
			 "hugepages = false"), "%s", msg);
	cr_assert(strstr(msg, "set hugepages = true"), "%s", msg);

	r.asked = true; /* allowed, advised, and still 4 KiB: no free page */
	hp_judge(&r);
	cr_assert_eq(r.verdict, HP_REFUSED);
	cr_assert(strstr(hp_describe(&r, msg, sizeof(msg)),
			 "/proc/sys/vm/compact_memory"), "%s", msg);

	r.probe_huge = true;
	hp_judge(&r);
	cr_assert_eq(r.verdict, HP_HUGE);
	cr_assert(strstr(hp_describe(&r, msg, sizeof(msg)),
			 "arenas get 2 MiB pages (shmem_enabled advise"), "%s", msg);
	cr_assert_null(strstr(msg, "fix"), "%s", msg);

	r.probe_huge = false;
	r.probe_err = -ENOMEM;
	hp_judge(&r);
	cr_assert_eq(r.verdict, HP_PROBE_FAILED);
	cr_assert(strstr(hp_describe(&r, msg, sizeof(msg)), strerror(ENOMEM)),
		  "%s", msg);
}

/* hp_check reads the root the test hook names, and its probe asks the
 * real kernel: with a fake `never` the verdict is the policy's unless
 * this kernel hands out huge pages anyway. */
Test(hugepages, check_reads_the_hook_root_and_probes_the_kernel,
     .fini = rm_root)
{
	bool huge = kernel_gives_huge();
	setenv("RINGCACHE_SYSFS_ROOT", fake_root("always advise [never] deny"), 1);
	struct hp_report r;
	hp_check(&r, true);
	unsetenv("RINGCACHE_SYSFS_ROOT");
	cr_assert(strstr(r.path, root) == r.path, "read %s", r.path);
	cr_assert_str_eq(r.policy, "never");
	cr_assert_eq(r.verdict, huge ? HP_HUGE : HP_POLICY);
	hp_check(&r, true);
	cr_assert_str_eq(r.path, "/sys/" HP_SHMEM_FILE);
}

/* What a reader sees through ro_fd: written bytes, whatever page size. */
static void fill_and_compare(bool advise)
{
	struct arena_budget b;
	struct arena a;
	cr_assert_eq(arena_budget_init(&b, 64 * MiB, 1 * MiB), 0);
	cr_assert_eq(arena_init(&a, &b, "hp-test", advise, false), 0);
	cr_assert_eq((uintptr_t)a.base % (2 * MiB), 0,
		     "arena mapped at %p, not 2 MiB aligned", (void *)a.base);
	uint32_t cls = arena_class_of(&b, 1 * MiB);
	int64_t offs[6];
	for (int i = 0; i < 6; i++) {
		offs[i] = arena_alloc(&a, cls);
		cr_assert_geq(offs[i], 0);
		for (uint32_t k = 0; k < MiB; k += 8) {
			uint64_t v = ((uint64_t)i << 40) ^ (k * 0x9e3779b1ull);
			memcpy(a.base + offs[i] + k, &v, 8);
		}
	}
	uint64_t res, huge;
	struct hp_range rg = {a.base, a.size};
	cr_assert_eq(hp_measure(&rg, 1, &res, &huge), 0);
	cr_assert_geq(res, 6ull * MiB, "resident %lu", (unsigned long)res);
	cr_assert_leq(huge, res);
	if (!advise && !kernel_gives_huge())
		cr_assert_eq(huge, 0);

	const uint8_t *ro = mmap(NULL, a.size, PROT_READ, MAP_SHARED,
				 a.ro_fd, 0);
	cr_assert_neq(ro, MAP_FAILED);
	for (int i = 0; i < 6; i++)
		for (uint32_t k = 0; k < MiB; k += 8) {
			uint64_t v = ((uint64_t)i << 40) ^ (k * 0x9e3779b1ull), g;
			memcpy(&g, ro + offs[i] + k, 8);
			if (g != v)
				cr_assert_fail("slot %d byte %u: %lx != %lx", i, k,
					       (unsigned long)g, (unsigned long)v);
		}
	munmap((void *)ro, a.size);
	arena_destroy(&a);
}

Test(hugepages, arenas_with_and_without_advice_hold_the_same_bytes)
{
	fill_and_compare(true);
	fill_and_compare(false);
}

/* The probe's verdict agrees with what an advised arena really maps. */
Test(hugepages, measure_agrees_with_the_probe)
{
	bool huge = kernel_gives_huge();
	struct arena_budget b;
	struct arena a;
	cr_assert_eq(arena_budget_init(&b, 16 * MiB, 1 * MiB), 0);
	cr_assert_eq(arena_init(&a, &b, "hp-measure", true, false), 0);
	memset(a.base, 1, 4 * MiB);
	uint64_t res, hp;
	struct hp_range rg = {a.base, a.size};
	cr_assert_eq(hp_measure(&rg, 1, &res, &hp), 0);
	cr_assert_geq(res, 4ull * MiB);
	if (huge)
		cr_assert_gt(hp, 0, "probe huge, arena %lu of %lu",
			     (unsigned long)hp, (unsigned long)res);
	else
		cr_assert_eq(hp, 0, "probe 4 KiB, arena %lu huge",
			     (unsigned long)hp);
	arena_destroy(&a);
}
