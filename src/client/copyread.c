/* copyread.c - owns libringcache's copy-or-map choice for the extents of
 * rc_read_many/rc_read_key: a fresh process that maps arena pages it never
 * touched pays their page-table set-up, which with 4 KiB pages costs more
 * than the bytes' copy (perf/README.md, "First touch": 2 GB/s against a
 * memcpy's 18 GB/s on a VM; with 2 MiB pages mapping wins, 26 GB/s). So
 * per arena the library measures what the kernel gives it and, where
 * mapping is the slower way, copies each extent with pread() from the
 * arena's memfd into a buffer of this process whose pages are already
 * touched (as read() would), releases the daemon's lease at once and hands
 * out a local lease (RC_LEASE_LOCAL) that rc_release/rc_release_lazy free
 * here. The daemon never writes into this process's memory for it.
 *
 * The measure: once per arena, whether the kernel maps it with huge
 * pages (the first extent is populated and PAGEMAP_SCAN asked; before
 * Linux 6.7 the populate's speed over 3 extents against MAP_MIN_BPNS):
 * huge pages are always mapped. On a 4 KiB arena, per extent: one whose
 * pages this process has mapped already (/proc/self/pagemap's present
 * bits: an earlier epoch, the prefault helper) is mapped, it costs
 * nothing; one that is not goes the way measured faster on this machine
 * so far, first-touch populate or pread (by COPY_OVER_MAP), each timed as
 * it is used (the other tried again every EXPLORE_EVERY choices: load
 * changes both).
 * $RINGCACHE_READ_COPY=0 never copies, =1 always does (tests, benches).
 *
 * Ownership: the arena table (process-wide, a dup of each arena's fd,
 * under a mutex: clients of one process share what they learn) and each
 * client's bounce region (client_state.bounce, freed at rc_detach). */
#include "copyread.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "clock.h"
#include "client_priv.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* PAGEMAP_SCAN (Linux 6.7, include/uapi/linux/fs.h), declared here for
 * older headers: the ABI is the kernel's. */
struct copyread_pm_scan_arg {
	uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
	uint64_t category_inverted, category_mask, category_anyof_mask;
	uint64_t return_mask;
};
struct copyread_page_region {
	uint64_t start, end, categories;
};
#define COPYREAD_PAGEMAP_SCAN _IOWR('f', 16, struct copyread_pm_scan_arg)
#define COPYREAD_PAGE_IS_HUGE (1ull << 6)

#define MAX_ARENAS 256
/* Mapping first-touched pages faster than this (bytes per ns, i.e. GB/s)
 * beats a copy; 4 KiB pages map at ~2 on a VM, 2 MiB ones at ~26. */
#define MAP_MIN_BPNS 8.0
#define TIMED_MIN_LEN (64u << 10) /* shorter extents time the syscall */
#define TIMED_SAMPLES 3

/* The bounce region: BOUNCE_CHUNKS chunks, an extent takes a run of them,
 * lowest free first (pages touched before are used again). Reserved, not
 * committed: only what was in use at once becomes resident. */
#define CHUNK_SHIFT 16
#define BOUNCE_CHUNKS 4096u /* 256 MiB of address space */
#define BOUNCE_WORDS (BOUNCE_CHUNKS / 64)

/* Every this many choices for an unmapped extent, the way measured
 * slower is taken again (its figure ages with the load). */
#define EXPLORE_EVERY 16u
#define PAGEMAP_MAX 1024u /* present bits read per extent at most */
/* A copy must be this much faster than a first touch to be taken: a
 * mapped page is free the next time this process reads it (the next
 * epoch of a long-lived reader), a copied one costs the copy again. On
 * issue 21's VM a copy ran 9x faster; on perf/README's, about as fast. */
#define COPY_OVER_MAP 2.0

/* MAP: huge pages, always mapped; COPY: 4 KiB pages, chosen per extent. */
enum mode { UNKNOWN, MAP, COPY };

struct arena {
	const uint8_t *base;
	size_t size;
	int fd;
	enum mode mode;
	int samples;
	double best_bpns;
	double fault_bpns, copy_bpns; /* measured so far; 0: not yet */
	uint32_t choices;
};

struct bounce {
	uint8_t *base;
	uint64_t used[BOUNCE_WORDS];
	uint16_t run[BOUNCE_CHUNKS]; /* chunks of the extent starting here */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct arena arenas[MAX_ARENAS];
/* /proc/self/pagemap of pagemap_pid (a fork()ed child opens its own);
 * -1: unusable. Under the lock. */
static int pagemap_fd = -1;
static pid_t pagemap_pid;
static bool no_pagemap_scan;

static int forced_mode(void)
{
	const char *env = getenv("RINGCACHE_READ_COPY");
	if (env && strcmp(env, "0") == 0)
		return MAP;
	if (env && strcmp(env, "1") == 0)
		return COPY;
	return UNKNOWN;
}

void copyread_arena_add(const void *base, size_t size, int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (d < 0)
		return; /* no copies from this arena: extents stay mapped */
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ARENAS; i++)
		if (!arenas[i].base) {
			arenas[i] = (struct arena){base, size, d, UNKNOWN, 0, 0};
			d = -1;
			break;
		}
	pthread_mutex_unlock(&lock);
	if (d >= 0)
		close(d);
}

void copyread_arena_drop(const void *base)
{
	int fd = -1;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ARENAS; i++)
		if (arenas[i].base == base) {
			fd = arenas[i].fd;
			arenas[i] = (struct arena){0};
			break;
		}
	pthread_mutex_unlock(&lock);
	if (fd >= 0)
		close(fd);
}

static int pagemap(void)
{
	pid_t pid = getpid();
	if (pagemap_pid != pid) {
		if (pagemap_fd >= 0)
			close(pagemap_fd); /* the parent's */
		pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
		pagemap_pid = pid;
	}
	return pagemap_fd;
}

/* 1: some page of [p, p+len) is mapped huge, 0: none, -1: no PAGEMAP_SCAN. */
static int mapped_huge(const void *p, size_t len)
{
	if (no_pagemap_scan || pagemap() < 0)
		return -1;
	struct copyread_page_region r[1];
	struct copyread_pm_scan_arg a = {
		.size = sizeof(a), .start = (uintptr_t)p,
		.end = (uintptr_t)p + len, .vec = (uintptr_t)r, .vec_len = 1,
		.category_anyof_mask = COPYREAD_PAGE_IS_HUGE,
		.return_mask = COPYREAD_PAGE_IS_HUGE};
	long n = ioctl(pagemap_fd, COPYREAD_PAGEMAP_SCAN, &a);
	if (n < 0) {
		no_pagemap_scan = true; /* ENOTTY/EINVAL: before 6.7 */
		return -1;
	}
	return n > 0;
}

/* Whether this process has every page of [lo, hi) mapped (a pagemap
 * entry's bit 63), as far as PAGEMAP_MAX pages; false when unknown. */
static bool all_present(uintptr_t lo, uintptr_t hi, uintptr_t pg)
{
	uint64_t ent[PAGEMAP_MAX];
	size_t n = (hi - lo) / pg;
	if (n > PAGEMAP_MAX)
		n = PAGEMAP_MAX;
	if (pagemap() < 0)
		return false;
	ssize_t got = pread(pagemap_fd, ent, n * sizeof(ent[0]),
			    (off_t)(lo / pg * sizeof(ent[0])));
	if (got != (ssize_t)(n * sizeof(ent[0])))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(ent[i] >> 63))
			return false;
	return true;
}

static void page_range(const struct rc_extent *e, uintptr_t *lo,
		       uintptr_t *hi, uintptr_t *pg)
{
	*pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	*lo = (uintptr_t)e->data & ~(*pg - 1);
	*hi = ((uintptr_t)e->data + e->len + *pg - 1) & ~(*pg - 1);
}

/* Maps the extent's pages in (the caller reads them next anyway);
 * returns bytes per ns. */
static double populate(uintptr_t lo, uintptr_t hi, uintptr_t pg)
{
	uint64_t t0 = rc_now_ns();
	if (madvise((void *)lo, hi - lo, MADV_POPULATE_READ) < 0) {
		volatile const uint8_t *v = (const uint8_t *)lo;
		for (uintptr_t at = 0; at < hi - lo; at += pg)
			(void)v[at]; /* before 5.14: fault them in */
	}
	uint64_t ns = rc_now_ns() - t0;
	return (double)(hi - lo) / (double)(ns ? ns : 1);
}

static void learn(double *avg, double bpns)
{
	*avg = *avg == 0 ? bpns : 0.75 * *avg + 0.25 * bpns;
}

/* The page size the arena is mapped with, learnt from a mapped extent;
 * called under the lock. */
static void measure(struct arena *a, const struct rc_extent *e)
{
	uintptr_t lo, hi, pg;
	page_range(e, &lo, &hi, &pg);
	bool was_mapped = all_present(lo, hi, pg);
	double bpns = populate(lo, hi, pg);
	if (!was_mapped && e->len >= TIMED_MIN_LEN)
		learn(&a->fault_bpns, bpns);
	int huge = mapped_huge((const void *)lo, hi - lo);
	if (huge >= 0) {
		a->mode = huge ? MAP : COPY;
		return;
	}
	if (e->len < TIMED_MIN_LEN || was_mapped)
		return;
	if (bpns > a->best_bpns)
		a->best_bpns = bpns; /* the fastest: preemption only slows */
	if (++a->samples >= TIMED_SAMPLES)
		a->mode = a->best_bpns >= MAP_MIN_BPNS ? MAP : COPY;
}

/* A 4 KiB arena's extent: true to copy it. Mapped pages stay mapped; an
 * unmapped extent goes the faster way, and a mapped one is timed. */
static bool choose_copy(struct arena *a, const struct rc_extent *e)
{
	uintptr_t lo, hi, pg;
	page_range(e, &lo, &hi, &pg);
	if (all_present(lo, hi, pg))
		return false;
	bool copy;
	if (a->copy_bpns == 0)
		copy = true; /* not measured yet */
	else if (a->fault_bpns == 0)
		copy = false;
	else
		copy = a->copy_bpns >= COPY_OVER_MAP * a->fault_bpns;
	if (++a->choices % EXPLORE_EVERY == 0)
		copy = !copy;
	if (!copy && e->len >= TIMED_MIN_LEN)
		learn(&a->fault_bpns, populate(lo, hi, pg));
	return copy;
}

/* The arena holding e and whether to copy e; fd gets the arena's dup. */
static bool want_copy(const struct rc_extent *e, int *fd, const void **base,
		      struct arena **arena)
{
	const uint8_t *p = e->data;
	bool copy = false;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ARENAS; i++) {
		struct arena *a = &arenas[i];
		if (!a->base || p < a->base || p + e->len > a->base + a->size)
			continue;
		int forced = forced_mode();
		if (forced != UNKNOWN)
			copy = forced == COPY;
		else if (a->mode == UNKNOWN)
			measure(a, e); /* this one is mapped in now */
		else
			copy = a->mode == COPY && choose_copy(a, e);
		*fd = a->fd;
		*base = a->base;
		*arena = a;
		break;
	}
	pthread_mutex_unlock(&lock);
	return copy;
}

static struct bounce *bounce_get(struct rc_client *c)
{
	struct client_state *st = client_state(c);
	if (st->bounce)
		return st->bounce;
	struct bounce *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	void *p = mmap(NULL, (size_t)BOUNCE_CHUNKS << CHUNK_SHIFT,
		       PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		free(b);
		return NULL;
	}
	/* Huge pages where anonymous THP is "madvise": a first use of the
	 * region costs a 2 MiB clear, not 512 faults. */
	madvise(p, (size_t)BOUNCE_CHUNKS << CHUNK_SHIFT, MADV_HUGEPAGE);
	b->base = p;
	st->bounce = b;
	return b;
}

static bool chunk_used(const struct bounce *b, uint32_t i)
{
	return b->used[i / 64] >> (i % 64) & 1;
}

static void chunks_set(struct bounce *b, uint32_t from, uint32_t n, bool on)
{
	for (uint32_t i = from; i < from + n; i++) {
		if (on)
			b->used[i / 64] |= 1ull << (i % 64);
		else
			b->used[i / 64] &= ~(1ull << (i % 64));
	}
}

/* The lowest run of n free chunks, or -1. */
static int64_t chunks_alloc(struct bounce *b, uint32_t n)
{
	uint32_t run = 0;
	for (uint32_t i = 0; i < BOUNCE_CHUNKS; i++) {
		if (run == 0 && (b->used[i / 64] == ~0ull) && i % 64 == 0) {
			i += 63; /* a full word */
			continue;
		}
		run = chunk_used(b, i) ? 0 : run + 1;
		if (run == n) {
			uint32_t from = i + 1 - n;
			chunks_set(b, from, n, true);
			b->run[from] = (uint16_t)n;
			return from;
		}
	}
	return -1;
}

void copyread_settle(struct rc_client *c, struct rc_extent *e)
{
	if (e->lease == RC_NO_LEASE || (e->lease & RC_LEASE_LOCAL) ||
	    e->len == 0 || !c->arg_free)
		return;
	int fd = -1;
	const void *base = NULL;
	struct arena *a = NULL;
	if (!want_copy(e, &fd, &base, &a))
		return;
	for (uint32_t i = 0; i < c->n_datasets; i++)
		if (c->arenas[i].base == base && c->arenas[i].cuda_pinned)
			return; /* the GPU copies from pinned arena pages */
	struct bounce *b = bounce_get(c);
	uint32_t n = (uint32_t)(((uint64_t)e->len + (1u << CHUNK_SHIFT) - 1) >>
				CHUNK_SHIFT);
	int64_t at = b && n <= BOUNCE_CHUNKS ? chunks_alloc(b, n) : -1;
	if (at < 0)
		return; /* all in use (a caller holding many): stays mapped */
	uint8_t *dst = b->base + ((size_t)at << CHUNK_SHIFT);
	off_t off = (const uint8_t *)e->data - (const uint8_t *)base;
	size_t got = 0;
	uint64_t t0 = rc_now_ns();
	while (got < e->len) {
		ssize_t r = pread(fd, dst + got, e->len - got,
				  off + (off_t)got);
		if (r <= 0 && !(r < 0 && errno == EINTR))
			break;
		if (r > 0)
			got += (size_t)r;
	}
	if (got < e->len) { /* cannot happen on a live memfd: stay mapped */
		chunks_set(b, (uint32_t)at, n, false);
		b->run[at] = 0;
		return;
	}
	if (e->len >= TIMED_MIN_LEN) {
		uint64_t ns = rc_now_ns() - t0;
		pthread_mutex_lock(&lock);
		if (a->base == base && a->fd == fd)
			learn(&a->copy_bpns,
			      (double)e->len / (double)(ns ? ns : 1));
		pthread_mutex_unlock(&lock);
	}
	rc_release_lazy(c, e->lease);
	e->data = dst;
	e->lease = RC_LEASE_LOCAL | (uint32_t)at;
}

int copyread_release(struct rc_client *c, uint32_t lease)
{
	struct bounce *b = c->arg_free ? client_state(c)->bounce : NULL;
	uint32_t at = lease & ~RC_LEASE_LOCAL;
	if (!b || at >= BOUNCE_CHUNKS || b->run[at] == 0)
		return -EBADF;
	chunks_set(b, at, b->run[at], false);
	b->run[at] = 0;
	return 0;
}

void copyread_free(struct rc_client *c)
{
	struct client_state *st = client_state(c);
	if (!st->bounce)
		return;
	munmap(st->bounce->base, (size_t)BOUNCE_CHUNKS << CHUNK_SHIFT);
	free(st->bounce);
	st->bounce = NULL;
}
