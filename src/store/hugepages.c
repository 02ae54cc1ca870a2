/* hugepages.c - owns the huge-page check of the arenas: the shmem THP
 * policy, the probe memfd, the verdict and its message, and the measure
 * of huge-page bytes in /proc/self/smaps (see hugepages.h for why). */
#include "hugepages.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PROBE_BYTES (2u << 20) /* one huge page, mapped aligned */

void hp_read_policy(struct hp_report *r, const char *root)
{
	snprintf(r->path, sizeof(r->path), "%s/%s", root, HP_SHMEM_FILE);
	r->policy[0] = 0;
	FILE *f = fopen(r->path, "re");
	if (!f)
		return;
	char line[256];
	if (fgets(line, sizeof(line), f)) {
		/* "always within_size advise [never] deny force": the
		 * bracketed word; a file of one word (a test's) is that. */
		const char *p = strchr(line, '[');
		p = p ? p + 1 : line + strspn(line, " \t");
		size_t n = strcspn(p, "] \t\n");
		if (n >= sizeof(r->policy))
			n = sizeof(r->policy) - 1;
		memcpy(r->policy, p, n);
		r->policy[n] = 0;
	}
	fclose(f);
}

void *hp_map_aligned(int fd, uint64_t len, int prot)
{
	const uint64_t huge = 2u << 20;
	uint8_t *r = mmap(NULL, len + huge, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return MAP_FAILED;
	uint8_t *a = (uint8_t *)(((uintptr_t)r + huge - 1) & ~(uintptr_t)(huge - 1));
	void *m = mmap(a, len, prot, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED) {
		int e = errno;
		munmap(r, len + huge);
		errno = e;
		return MAP_FAILED;
	}
	if (a > r)
		munmap(r, (size_t)(a - r));
	munmap(a + len, (size_t)(r + huge - a));
	return m;
}

/* A memfd made, advised and touched like an arena: whether its mapping
 * holds a 2 MiB page. Negated errno if it cannot tell. */
static int probe(bool asked, bool *huge)
{
	*huge = false;
	int fd = memfd_create("ringcache-hugepage-probe", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	int err = 0;
	uint8_t *m = MAP_FAILED;
	if (ftruncate(fd, PROBE_BYTES) < 0)
		err = -errno;
	else if ((m = hp_map_aligned(fd, PROBE_BYTES,
				     PROT_READ | PROT_WRITE)) == MAP_FAILED)
		err = -errno;
	if (!err) {
		if (asked)
			madvise(m, PROBE_BYTES, MADV_HUGEPAGE);
		((volatile uint8_t *)m)[0] = 1; /* the fault */
		uint64_t res, hp;
		struct hp_range r = {m, PROBE_BYTES};
		err = hp_measure(&r, 1, &res, &hp);
		*huge = !err && hp > 0;
		munmap(m, PROBE_BYTES);
	}
	close(fd);
	return err;
}

void hp_judge(struct hp_report *r)
{
	const char *p = r->policy;
	if (r->probe_huge)
		r->verdict = HP_HUGE;
	else if (r->probe_err)
		r->verdict = HP_PROBE_FAILED;
	else if (!*p)
		r->verdict = HP_NO_THP;
	else if (!strcmp(p, "never") || !strcmp(p, "deny"))
		r->verdict = HP_POLICY;
	else if (!r->asked && !strcmp(p, "advise"))
		r->verdict = HP_NOT_ASKED;
	else
		r->verdict = HP_REFUSED;
}

void hp_check(struct hp_report *r, bool asked)
{
	memset(r, 0, sizeof(*r));
	r->asked = asked;
	const char *root = getenv("RINGCACHE_SYSFS_ROOT");
	hp_read_policy(r, root && *root ? root : "/sys");
	r->probe_err = probe(asked, &r->probe_huge);
	hp_judge(r);
}

const char *hp_describe(const struct hp_report *r, char *buf, size_t len)
{
	switch (r->verdict) {
	case HP_HUGE:
		snprintf(buf, len, "arenas get 2 MiB pages (shmem_enabled "
			 "%s, hugepages = %s)", *r->policy ? r->policy : "absent",
			 r->asked ? "true" : "false");
		break;
	case HP_NOT_ASKED:
		snprintf(buf, len, "arenas get 4 KiB pages: hugepages = false in "
			 "the config and shmem_enabled is advise; fix: set "
			 "hugepages = true and restart ringcached");
		break;
	case HP_NO_THP:
		snprintf(buf, len, "arenas get 4 KiB pages: this kernel has no "
			 "shmem transparent huge pages (%s missing: "
			 "CONFIG_TRANSPARENT_HUGEPAGE off); fix: boot a kernel "
			 "built with CONFIG_TRANSPARENT_HUGEPAGE=y", r->path);
		break;
	case HP_POLICY:
		snprintf(buf, len, "arenas get 4 KiB pages: shmem_enabled is %s "
			 "(%s); fix: echo advise > %s (the package's "
			 "tmpfiles.d/ringcached-hugepages.conf does it at boot); "
			 "pages already cached stay 4 KiB until a restart",
			 r->policy, r->path, r->path);
		break;
	case HP_REFUSED:
		snprintf(buf, len, "arenas get 4 KiB pages although shmem_enabled "
			 "is %s: the kernel had no free 2 MiB page for a probe "
			 "(memory fragmented); fix: echo 1 > "
			 "/proc/sys/vm/compact_memory, then restart ringcached",
			 r->policy);
		break;
	case HP_PROBE_FAILED:
		snprintf(buf, len, "arenas: huge pages unknown: the probe failed "
			 "(%s); shmem_enabled is %s", strerror(-r->probe_err),
			 *r->policy ? r->policy : "absent");
		break;
	}
	return buf;
}

static bool overlaps(const struct hp_range *r, size_t n, uintptr_t lo,
		     uintptr_t hi)
{
	for (size_t i = 0; i < n; i++) {
		uintptr_t b = (uintptr_t)r[i].base;
		if (r[i].len && lo < b + r[i].len && b < hi)
			return true;
	}
	return false;
}

int hp_measure(const struct hp_range *ranges, size_t n, uint64_t *resident,
	       uint64_t *huge)
{
	*resident = *huge = 0;
	FILE *f = fopen("/proc/self/smaps", "re");
	if (!f)
		return -errno;
	char line[512];
	bool in = false;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;
		char name[32];
		uint64_t kb;
		/* A mapping's header starts with its range ("lo-hi perms"),
		 * its fields with "Name:". */
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2) {
			in = overlaps(ranges, n, lo, hi);
			continue;
		}
		if (!in || sscanf(line, "%31[^:]: %" SCNu64 " kB", name, &kb) != 2)
			continue;
		/* Rss leaves hugetlb pages out: they count in both. */
		bool tlb = !strcmp(name, "Shared_Hugetlb") ||
			   !strcmp(name, "Private_Hugetlb");
		if (!strcmp(name, "Rss") || tlb)
			*resident += kb << 10;
		if (tlb || !strcmp(name, "ShmemPmdMapped") ||
		    !strcmp(name, "FilePmdMapped"))
			*huge += kb << 10;
	}
	fclose(f);
	return 0;
}
