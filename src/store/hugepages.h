/* hugepages.h - whether the arenas get 2 MiB pages, why not, and how many
 * of their bytes they hold.
 *
 * A reader maps arena pages it has never touched: with 4 KiB pages every
 * page is a fault, and on a VM that made a fresh reader's first pass run
 * at 2 GB/s against 26 GB/s with 2 MiB pages (issue 21). `hugepages =
 * true` only advises THP on the arena's memfd; the kernel decides, by
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled (Debian: never) and by
 * whether it has a free 2 MiB page. So the daemon says out loud at start
 * what its arenas get, and `ringcache status` and the metrics show it.
 *
 * What the arenas got is measured, not inferred: a probe memfd made and
 * advised like an arena is touched and its mapping's ShmemPmdMapped read
 * from /proc/self/smaps (a PMD mapping is what makes a fault cover 2 MiB;
 * a huge folio mapped by 4 KiB entries would not help a reader). The
 * policy file explains a 4 KiB answer and names the fix.
 *
 * Test hook: RINGCACHE_SYSFS_ROOT (default /sys) is the folder whose
 * kernel/mm/transparent_hugepage/shmem_enabled is read, so tests describe
 * a policy without touching the machine's knob. The probe always asks
 * the real kernel. */
#ifndef RC_HUGEPAGES_H
#define RC_HUGEPAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HP_SHMEM_FILE "kernel/mm/transparent_hugepage/shmem_enabled"

enum hp_verdict {
	HP_HUGE,        /* the probe got a 2 MiB mapping */
	HP_NOT_ASKED,   /* hugepages = false and the policy needs advice */
	HP_NO_THP,      /* no shmem_enabled: THP not compiled in */
	HP_POLICY,      /* shmem_enabled is never or deny */
	HP_REFUSED,     /* the policy allows them, the kernel gave 4 KiB */
	HP_PROBE_FAILED /* the probe itself failed (errno in probe_err) */
};

struct hp_report {
	bool asked;          /* hugepages = true: the arenas are advised */
	char path[256];      /* the policy file read */
	char policy[16];     /* its selected value ("never"), "" if absent */
	int probe_err;       /* 0, or the negated errno the probe failed with */
	bool probe_huge;     /* the probe's mapping held a 2 MiB page */
	enum hp_verdict verdict;
};

/* An address range (an arena's mapping) for hp_measure. */
struct hp_range {
	const void *base;
	uint64_t len;
};

/* Maps len bytes of fd shared at a 2 MiB-aligned address, as an arena
 * is: the kernel aligns a shmem mapping itself only while the policy
 * allows huge pages, so an arena mapped while it was `never` could not use
 * them after the operator's fix without this. MAP_FAILED (errno) on
 * failure; munmap(p, len) frees it. */
void *hp_map_aligned(int fd, uint64_t len, int prot);

/* Fills r: the policy (under $RINGCACHE_SYSFS_ROOT), the probe, the
 * verdict. */
void hp_check(struct hp_report *r, bool asked);
/* The policy part alone: reads root/HP_SHMEM_FILE into r->path, policy. */
void hp_read_policy(struct hp_report *r, const char *root);
/* The verdict from r's asked, policy and probe fields. */
void hp_judge(struct hp_report *r);
/* One line: what the arenas get and, if not 2 MiB pages, why and the one
 * command that fixes it. Returns buf. */
const char *hp_describe(const struct hp_report *r, char *buf, size_t len);

/* Resident bytes of the mappings overlapping the ranges, and how many of
 * them are mapped by huge pages (ShmemPmdMapped, FilePmdMapped,
 * *_Hugetlb), from one pass over /proc/self/smaps. 0 or a negated errno.
 * Walks the page tables of every mapping: for status and scrapes, not a
 * hot path. */
int hp_measure(const struct hp_range *ranges, size_t n, uint64_t *resident,
	       uint64_t *huge);

#endif
