/* tierbench.c - NVMe tier hit throughput and IOPS against fio.
 *
 * For 4 KiB, 128 KiB and 1 MiB blocks: fills a tier file (src/store/tier.c) on a
 * real disk, then reads random resident blocks at queue depth 32 through
 * the tier (fixed file, fixed buffers, CRC32C check of every block), and
 * runs `fio --ioengine=io_uring --direct=1 --rw=randread --iodepth=32` over
 * the same byte range of the same file. Tier and fio runs alternate; the
 * medians of --runs runs and the tier/fio ratios are printed.
 *
 *   rc-tierbench [--file PATH] [--size-mib N] [--seconds S] [--runs N]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "tier.h"
#include "bench.h"

#define QD 32
#define TMPFS_MAGIC_ 0x01021994

struct opts {
	const char *file;
	uint64_t size_mib;
	double seconds;
	int runs;
};

struct rate {
	double iops, mbps;
};

struct bench {
	struct tier *t;
	struct io_uring ring;
	uint8_t *bufs;
	uint32_t bs, n_blocks;
	uint64_t rng, ops, errors;
	bool stop;
};

static uint64_t next_rand(struct bench *b)
{
	b->rng ^= b->rng << 13;
	b->rng ^= b->rng >> 7;
	b->rng ^= b->rng << 17;
	return b->rng;
}

static void key_of(struct tier_key *k, uint32_t i)
{
	*k = (struct tier_key){{0x7469657262656e63ull, 0x68u}, i};
}

static void drain_some(struct bench *b, unsigned want)
{
	struct io_uring_cqe *cqe;
	io_uring_submit_and_wait(&b->ring, want);
	unsigned head, n = 0;
	io_uring_for_each_cqe(&b->ring, head, cqe) {
		tier_complete(b->t, cqe);
		n++;
	}
	io_uring_cq_advance(&b->ring, n);
}

static void count_done(void *ctx, int res)
{
	struct bench *b = ctx;
	if (res < 0)
		b->errors++;
}

/* Writes n_blocks blocks, QD at a time, each from its own buffer. */
static int fill(struct bench *b)
{
	for (uint32_t i = 0; i < b->n_blocks; i++) {
		uint8_t *buf = b->bufs + (size_t)(i % QD) * b->bs;
		if (i % QD == 0 && i)
			while (tier_inflight(b->t))
				drain_some(b, 1);
		memset(buf, (int)(i * 31 + 7), b->bs);
		memcpy(buf, &i, sizeof(i));
		struct tier_key k;
		key_of(&k, i);
		if (tier_write(b->t, &k, buf, b->bs, count_done, b) < 0)
			return -1;
	}
	while (tier_inflight(b->t))
		drain_some(b, 1);
	tier_sync_index(b->t);
	return b->errors ? -1 : 0;
}

static void read_done(void *ctx, int res);

struct slot_ctx {
	struct bench *b;
	uint8_t *buf;
};
static struct slot_ctx slots[QD];

static void issue(struct slot_ctx *s)
{
	struct bench *b = s->b;
	struct tier_key k;
	key_of(&k, (uint32_t)(next_rand(b) % b->n_blocks));
	if (tier_read(b->t, &k, s->buf, b->bs, read_done, s) < 0)
		b->errors++;
}

static void read_done(void *ctx, int res)
{
	struct slot_ctx *s = ctx;
	if (res < 0)
		s->b->errors++;
	else
		s->b->ops++;
	if (!s->b->stop)
		issue(s);
}

static struct rate run_tier(struct bench *b, double seconds)
{
	b->ops = 0;
	b->stop = false;
	for (int i = 0; i < QD; i++) {
		slots[i] = (struct slot_ctx){b, b->bufs + (size_t)i * b->bs};
		issue(&slots[i]);
	}
	double t0 = rc_now_s(), t1;
	while ((t1 = rc_now_s()) - t0 < seconds)
		drain_some(b, 1);
	uint64_t ops = b->ops;
	b->stop = true;
	while (tier_inflight(b->t))
		drain_some(b, 1);
	double el = t1 - t0;
	return (struct rate){ops / el, ops * (double)b->bs / el / 1e6};
}

/* fio over the tier's slots; terse v3: field 7 read KiB/s, 8 read IOPS. */
static struct rate run_fio(const char *file, uint64_t off, uint64_t len,
			   uint32_t bs, double seconds)
{
	char cmd[1024], line[8192];
	struct rate r = {0, 0};
	snprintf(cmd, sizeof(cmd),
		 "fio --name=tier --filename=%s --ioengine=io_uring --direct=1 "
		 "--rw=randread --bs=%u --iodepth=32 --offset=%llu --size=%llu "
		 "--runtime=%.0f --time_based --norandommap --randrepeat=0 "
		 "--minimal 2>&1", file, bs, (unsigned long long)off,
		 (unsigned long long)len, seconds);
	FILE *p = popen(cmd, "r");
	if (!p)
		return r;
	while (fgets(line, sizeof(line), p)) {
		if (strncmp(line, "3;", 2) != 0)
			continue;
		char *save = NULL, *f = strtok_r(line, ";", &save);
		for (int i = 0; f; i++, f = strtok_r(NULL, ";", &save)) {
			if (i == 6)
				r.mbps = atof(f) * 1024 / 1e6;
			if (i == 7)
				r.iops = atof(f);
		}
	}
	if (pclose(p) != 0)
		fprintf(stderr, "fio failed: %s\n", cmd);
	return r;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bench_size(const struct opts *o, uint32_t bs)
{
	struct bench b = {.bs = bs, .rng = 0x9e3779b97f4a7c15ull};
	char err[256];
	if (io_uring_queue_init(2 * QD, &b.ring, 0) < 0)
		return -1;
	b.bufs = aligned_alloc(TIER_ALIGN, (size_t)QD * bs);
	struct iovec iov = {b.bufs, (size_t)QD * bs};
	struct tier_config cfg = {.path = o->file,
				  .size_bytes = o->size_mib << 20,
				  .block_bytes = bs};
	b.t = tier_open(&cfg, &b.ring, &iov, 1, err, sizeof(err));
	if (!b.t) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	struct tier_stats st;
	tier_get_stats(b.t, &st);
	b.n_blocks = (uint32_t)st.n_slots;
	if (fill(&b) < 0) {
		fprintf(stderr, "filling the tier failed\n");
		return -1;
	}
	double ti[16], tm[16], fi[16], fm[16];
	for (int r = 0; r < o->runs; r++) {
		struct rate a = run_tier(&b, o->seconds);
		struct rate f = run_fio(o->file, st.data_off,
					(uint64_t)b.n_blocks * bs, bs,
					o->seconds);
		ti[r] = a.iops, tm[r] = a.mbps, fi[r] = f.iops, fm[r] = f.mbps;
		printf("  %7u B run %d: tier %.0f MB/s, fio %.0f MB/s\n", bs,
		       r + 1, a.mbps, f.mbps);
		fflush(stdout);
	}
	double mti = median(ti, o->runs), mtm = median(tm, o->runs);
	double mfi = median(fi, o->runs), mfm = median(fm, o->runs);
	printf("%7u B  tier %9.0f IOPS %8.1f MB/s | fio %9.0f IOPS %8.1f MB/s"
	       " | tier/fio %.2f%s\n", bs, mti, mtm, mfi, mfm,
	       mfi > 0 ? mti / mfi : 0, b.errors ? "  (read errors!)" : "");
	tier_close(b.t);
	io_uring_queue_exit(&b.ring);
	free(b.bufs);
	return b.errors ? -1 : 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			return -1;
		if (!strcmp(argv[i], "--file"))
			o->file = v;
		else if (!strcmp(argv[i], "--size-mib"))
			o->size_mib = strtoull(v, NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			o->seconds = atof(v);
		else if (!strcmp(argv[i], "--runs"))
			o->runs = atoi(v);
		else
			return -1;
		i++;
	}
	return o->runs >= 1 && o->runs <= 15 && o->seconds >= 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct opts o = {"/tmp/rc-tierbench.dat", 1024, 3, 3};
	if (parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: %s [--file PATH] [--size-mib N] "
			"[--seconds S] [--runs N<=15]\n", argv[0]);
		return 2;
	}
	rc_log_level = RC_LOG_WARN;
	struct statfs sf;
	FILE *probe = fopen(o.file, "a");
	if (probe)
		fclose(probe);
	if (statfs(o.file, &sf) == 0 && sf.f_type == TMPFS_MAGIC_)
		fprintf(stderr, "warning: %s is on tmpfs, not a disk\n", o.file);
	printf("tier file %s, %llu MiB, queue depth %d, %.0f s x %d runs "
	       "(medians)\n", o.file, (unsigned long long)o.size_mib, QD,
	       o.seconds, o.runs);
	uint32_t sizes[] = {4096, 128 * 1024, 1024 * 1024};
	int rc = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		rc |= bench_size(&o, sizes[i]);
	unlink(o.file);
	return rc ? 1 : 0;
}
