/* touchbench.c - rc-touchbench: owns the first-touch benchmark. A
 * DataLoader worker is a new process every epoch: it attaches, maps the
 * arenas afresh and reads objects the cache already holds. Every page it
 * reads the first time is a page fault in the new process. This program
 * warms the cache with N objects, then for each mode (RINGCACHE_PREFAULT=0:
 * no pre-faulting, =sync: in rc_attach, unset: libringcache's default, a
 * helper thread after attach) fork/execs itself --runs
 * times as a fresh client that attaches, then reads every object once
 * (open, zero-copy READ, a load from every 64-byte line, RELEASE, close)
 * and then a second time. It prints, per mode, the medians of: attach
 * time, time to first byte (from before fork to the first byte of the
 * first object loaded), the reading thread's CPU time and minor faults
 * per object in the first and the second pass, and the CPU time of the
 * process's other threads (the pre-faulting helper). The first pass minus
 * the second is what first touch costs an object. CPU time and fault
 * counts, unlike wall time, hold on a loaded machine.
 *
 * Run it through perf/touchbench.sh (S3, the daemon and the dataset).
 *
 * --probe [--probe-mib M] needs no daemon: the machine's own figures, so a
 * ratio measured on one machine can be read on another (perf/run puts
 * them in results.md's header). A memfd of M MiB (default 128) is filled,
 * then a fresh process maps it and loads a word from every 64-byte line:
 * bytes per second of that process's CPU time, with 4 KiB pages and with
 * 2 MiB pages (shmem THP where the policy allows it, else a hugetlb memfd
 * where vm.nr_hugepages has room, else "n/a" and why), and a memcpy
 * between two buffers already touched. Medians of 5; CPU time, unlike
 * wall time, holds on a loaded machine. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ringcache.h"
#include "../tools/dataset.h"
#include "bench.h"
#include "hugepages.h"

#define MAX_RUNS 51
#define N_EXT 8

struct opts {
	const char *socket, *dataset;
	size_t n;          /* objects (the dataset's small/ ones) */
	uint64_t read_bytes; /* 0: whole objects */
	int runs;
	struct ds_spec spec;
};

static volatile uint64_t sink;

static void die(const char *what, int err)
{
	fprintf(stderr, "rc-touchbench: %s: %s\n", what, strerror(-err));
	exit(1);
}

/* Reads one object (or its first read_bytes); loads a word from every
 * 64-byte line. check: compare with the dataset instead. *first: set to
 * the time the first byte was loaded if 0. */
static void read_object(struct rc_client *c, int ds, const struct opts *o,
			size_t i, int check, double *first)
{
	char key[DS_KEY_MAX];
	struct rc_stat st;
	int h = rc_open(c, ds, ds_key(&o->spec, i, key), &st);
	if (h < 0)
		die(key, h);
	uint64_t len = o->read_bytes && o->read_bytes < st.size ? o->read_bytes
								 : st.size;
	for (uint64_t off = 0; off < len;) {
		struct rc_extent ext[N_EXT];
		int n = rc_read(c, (uint32_t)h, off, len - off, ext, N_EXT);
		if (n <= 0)
			die("rc_read", n ? n : -EIO);
		for (int k = 0; k < n; k++) {
			const uint8_t *p = ext[k].data;
			uint64_t sum = 0;
			if (check && ds_mismatch(&o->spec, i, off, p, ext[k].len) >= 0)
				die(key, -EBADMSG);
			for (uint32_t b = 0; b + 8 <= ext[k].len; b += 64)
				sum += *(const uint64_t *)(p + b);
			if (first && *first == 0)
				*first = rc_now_s();
			sink += sum;
			off += ext[k].len;
			rc_release(c, ext[k].lease);
		}
	}
	rc_close(c, (uint32_t)h);
}

static int attach(struct rc_client *c, const struct opts *o)
{
	int err = rc_attach(c, o->socket, NULL);
	if (err)
		die("rc_attach", err);
	int ds = rc_dataset(c, o->dataset);
	if (ds < 0)
		die(o->dataset, ds);
	return ds;
}

/* CPU seconds and minor faults of this thread (who), or the process. */
static double cpu_s(int who, double *faults)
{
	struct rusage ru;
	getrusage(who, &ru);
	*faults = (double)ru.ru_minflt;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The fresh process prints, in seconds: attach, first byte (wall, from
 * before fork), this thread's CPU and minor faults in pass 1 and 2 (the
 * machine's load does not inflate CPU time as it does wall time), and
 * the CPU of the other threads (the pre-faulting helper). */
static int child(const struct opts *o, double t0)
{
	struct rc_client c;
	double f0, f1, f2, fp;
	int ds = attach(&c, o);
	double t_attach = rc_now_s(), first = 0;
	c.spin = 0; /* a spin waiting for the daemon is CPU time, not reading */
	double c0 = cpu_s(RUSAGE_THREAD, &f0);
	for (size_t i = 0; i < o->n; i++)
		read_object(&c, ds, o, i, 0, &first);
	double c1 = cpu_s(RUSAGE_THREAD, &f1);
	for (size_t i = 0; i < o->n; i++)
		read_object(&c, ds, o, i, 0, NULL);
	double c2 = cpu_s(RUSAGE_THREAD, &f2);
	rc_detach(&c); /* joins the helper */
	double cp = cpu_s(RUSAGE_SELF, &fp) - cpu_s(RUSAGE_THREAD, &fp);
	printf("%.9f %.9f %.9f %.9f %.0f %.0f %.9f\n", t_attach - t0,
	       first - t0, c1 - c0, c2 - c1, f1 - f0, f2 - f1, cp);
	return 0;
}

#define N_FIELDS 7

/* One fresh process in `mode`; fills r[N_FIELDS]. */
static void run_child(const struct opts *o, const char *mode, double *r)
{
	int pfd[2];
	if (pipe(pfd) < 0)
		die("pipe", -errno);
	char n[32], rb[32], t0[64];
	snprintf(n, sizeof(n), "%zu", o->n);
	snprintf(rb, sizeof(rb), "%" PRIu64, o->read_bytes);
	double start = rc_now_s();
	snprintf(t0, sizeof(t0), "%.9f", start);
	pid_t pid = fork();
	if (pid < 0)
		die("fork", -errno);
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		setenv("RINGCACHE_PREFAULT", mode, 1);
		execl("/proc/self/exe", "rc-touchbench", "--child", t0,
		      "--socket", o->socket, "--dataset", o->dataset,
		      "--small", n, "--read-bytes", rb, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	FILE *f = fdopen(pfd[0], "r");
	int st = 0;
	if (!f || fscanf(f, "%lf %lf %lf %lf %lf %lf %lf", &r[0], &r[1], &r[2],
			 &r[3], &r[4], &r[5], &r[6]) != N_FIELDS)
		die("child output", -EPROTO);
	fclose(f);
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		die("child", -ECHILD);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

static void bench(const struct opts *o)
{
	static const char *const modes[] = {"0", "sync", "1"};
	static const char *const names[] = {"no prefault", "sync", "background"};
	printf("first touch: %zu objects, %s, %d fresh processes per mode "
	       "(medians)\n", o->n, o->read_bytes ? "first bytes" : "whole",
	       o->runs);
	if (o->read_bytes)
		printf("read %" PRIu64 " bytes of each\n", o->read_bytes);
	printf("%-12s %9s %9s %13s %13s %11s %11s %10s\n", "mode",
	       "attach ms", "TTFB ms", "pass1 us/obj", "pass2 us/obj",
	       "pass1 flt/o", "pass2 flt/o", "helper ms");
	for (int m = 0; m < 3; m++) {
		double v[N_FIELDS][MAX_RUNS];
		for (int r = 0; r < o->runs; r++) {
			double x[N_FIELDS];
			run_child(o, modes[m], x);
			for (int k = 0; k < N_FIELDS; k++)
				v[k][r] = x[k];
		}
		double per = 1e6 / (double)o->n, n = (double)o->n;
		printf("%-12s %9.2f %9.2f %13.1f %13.1f %11.2f %11.2f %10.1f\n",
		       names[m], median(v[0], o->runs) * 1e3,
		       median(v[1], o->runs) * 1e3, median(v[2], o->runs) * per,
		       median(v[3], o->runs) * per, median(v[4], o->runs) / n,
		       median(v[5], o->runs) / n, median(v[6], o->runs) * 1e3);
	}
}

/* ---- --probe: first touch and memcpy of this machine ----------------- */

#define PROBE_RUNS 5

enum page_kind { PK_SMALL, PK_THP, PK_HUGETLB };

static double cpu_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *map_kind(int fd, size_t len, enum page_kind k, int prot)
{
	if (k == PK_HUGETLB)
		return mmap(NULL, len, prot, MAP_SHARED, fd, 0);
	void *m = hp_map_aligned(fd, len, prot);
	if (m != MAP_FAILED && k == PK_THP)
		madvise(m, len, MADV_HUGEPAGE);
	return m;
}

/* A filled memfd of len bytes in pages of kind k, or -1 (why in `why`)
 * where the kernel will not give them: for THP the pages are checked in
 * smaps, advice is not a promise. */
static int probe_memfd(size_t len, enum page_kind k, char *why, size_t wl)
{
	int fd = memfd_create("rc-probe", MFD_CLOEXEC |
			      (k == PK_HUGETLB ? MFD_HUGETLB : 0));
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
		snprintf(why, wl, "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	uint8_t *m = map_kind(fd, len, k, PROT_READ | PROT_WRITE);
	if (m == MAP_FAILED) {
		snprintf(why, wl, "mmap: %s", strerror(errno));
		close(fd);
		return -1;
	}
	memset(m, 0x5a, len);
	uint64_t res = 0, huge = 0;
	struct hp_range r = {m, len};
	hp_measure(&r, 1, &res, &huge);
	munmap(m, len);
	if ((k != PK_SMALL && huge < len / 2) || (k == PK_SMALL && huge)) {
		snprintf(why, wl, "%" PRIu64 " MiB of %zu in huge pages",
			 huge >> 20, len >> 20);
		close(fd);
		return -1;
	}
	return fd;
}

/* GB/s of CPU time of a fresh process's first pass over fd (its mmap,
 * faults and loads). */
static double first_touch(int fd, size_t len, enum page_kind k)
{
	double *out = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (out == MAP_FAILED)
		die("mmap", -errno);
	*out = 0;
	pid_t pid = fork();
	if (pid < 0)
		die("fork", -errno);
	if (pid == 0) {
		double c0 = cpu_now();
		const uint8_t *m = map_kind(fd, len, k, PROT_READ);
		if (m == MAP_FAILED)
			_exit(1);
		uint64_t sum = 0;
		for (size_t off = 0; off < len; off += 64)
			sum += *(const volatile uint64_t *)(m + off);
		sink += sum;
		*out = (double)len / (cpu_now() - c0) / 1e9;
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	double v = *out;
	munmap(out, sizeof(double));
	return v;
}

static double memcpy_gbs(size_t len)
{
	uint8_t *a = malloc(len), *b = malloc(len);
	if (!a || !b)
		die("malloc", -ENOMEM);
	memset(a, 1, len);
	memset(b, 2, len);
	double v[PROBE_RUNS];
	for (int r = 0; r < PROBE_RUNS; r++) {
		double c0 = cpu_now();
		memcpy(r & 1 ? a : b, r & 1 ? b : a, len);
		v[r] = (double)len / (cpu_now() - c0) / 1e9;
	}
	sink += a[len / 2] + b[len / 3];
	free(a);
	free(b);
	return median(v, PROBE_RUNS);
}

static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	buf[0] = 0;
	if (f && fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	if (f)
		fclose(f);
	if (!buf[0])
		snprintf(buf, len, "absent");
}

/* One line per figure, "  <what> <GB/s> GB/s (<page kind>)", so perf/run
 * copies the block as it is into results.md. */
static int probe(size_t mib)
{
	size_t len = mib << 20;
	char shmem[128], nr[32];
	read_line("/sys/" HP_SHMEM_FILE, shmem, sizeof(shmem));
	read_line("/proc/sys/vm/nr_hugepages", nr, sizeof(nr));
	printf("machine probe: a fresh process's first pass over a %zu MiB "
	       "shared memfd (a load per 64 B), and memcpy; GB/s of CPU "
	       "time, medians of %d\n", mib, PROBE_RUNS);
	printf("  shmem_enabled: %s; vm.nr_hugepages: %s\n", shmem, nr);
	static const enum page_kind kinds[] = {PK_THP, PK_HUGETLB};
	static const char *const names[] = {"shmem THP", "hugetlb"};
	for (int pass = 0; pass < 2; pass++) {
		int fd = -1, used = -1;
		char whys[2][160] = {"", ""};
		if (pass == 0)
			fd = probe_memfd(len, PK_SMALL, whys[0], sizeof(whys[0]));
		for (int i = 0; pass == 1 && i < 2 && fd < 0; i++)
			if ((fd = probe_memfd(len, kinds[i], whys[i],
					      sizeof(whys[i]))) >= 0)
				used = i;
		const char *label = pass ? "first touch, 2 MiB pages"
					 : "first touch, 4 KiB pages";
		if (fd < 0 && pass) {
			char fr[32];
			read_line("/sys/kernel/mm/hugepages/hugepages-2048kB/"
				  "free_hugepages", fr, sizeof(fr));
			size_t n = strlen(whys[1]);
			snprintf(whys[1] + n, sizeof(whys[1]) - n, ", %s of %zu "
				 "2 MiB pages free", fr, len >> 21);
		}
		if (fd < 0) {
			if (pass)
				printf("  %-26s n/a (shmem THP: %s; hugetlb: %s)\n",
				       label, whys[0], whys[1]);
			else
				printf("  %-26s n/a (%s)\n", label, whys[0]);
			continue;
		}
		double v[PROBE_RUNS];
		enum page_kind k = pass ? kinds[used] : PK_SMALL;
		for (int r = 0; r < PROBE_RUNS; r++)
			v[r] = first_touch(fd, len, k);
		close(fd);
		printf("  %-26s %6.2f GB/s (%s)\n", label, median(v, PROBE_RUNS),
		       pass ? names[used] : "4 KiB");
	}
	printf("  %-26s %6.2f GB/s\n", "memcpy", memcpy_gbs(len / 2));
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.dataset = "bench", .n = 100, .runs = 7};
	double t0 = -1;
	static const struct option lo[] = {
		{"socket", 1, 0, 's'}, {"dataset", 1, 0, 'd'},
		{"small", 1, 0, 'n'}, {"read-bytes", 1, 0, 'b'},
		{"runs", 1, 0, 'r'}, {"child", 1, 0, 'c'},
		{"probe", 0, 0, 'p'}, {"probe-mib", 1, 0, 'm'}, {0, 0, 0, 0}};
	size_t probe_mib = 0;
	for (int ch; (ch = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (ch) {
		case 's': o.socket = optarg; break;
		case 'd': o.dataset = optarg; break;
		case 'n': o.n = strtoull(optarg, NULL, 10); break;
		case 'b': o.read_bytes = strtoull(optarg, NULL, 10); break;
		case 'r': o.runs = atoi(optarg); break;
		case 'c': t0 = strtod(optarg, NULL); break;
		case 'p': probe_mib = probe_mib ? probe_mib : 128; break;
		case 'm': probe_mib = strtoull(optarg, NULL, 10); break;
		default:
			fprintf(stderr, "usage: rc-touchbench --socket PATH "
				"[--dataset NAME] [--small N] [--read-bytes B] "
				"[--runs R]\n       rc-touchbench --probe "
				"[--probe-mib M]\n");
			return 2;
		}
	}
	if (probe_mib)
		return probe(probe_mib);
	ds_spec_default(&o.spec);
	o.spec.n_small = o.n;
	if (o.runs < 1 || o.runs > MAX_RUNS || o.n < 1)
		return 2;
	if (t0 >= 0)
		return child(&o, t0);
	struct rc_client c; /* warm the cache, checking every byte */
	int ds = attach(&c, &o);
	for (size_t i = 0; i < o.n; i++)
		read_object(&c, ds, &o, i, 1, NULL);
	rc_detach(&c);
	bench(&o);
	return 0;
}
