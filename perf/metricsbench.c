/* metricsbench.c - rc-metricsbench: owns the measurement of what the
 * read-path statistics add to each READ on the shard's thread, as
 * session.c takes them: for a hit, a clock reading per pass of 32 SQEs
 * and two atomic adds (the wait's bucket, the dataset's hit); for a READ
 * that waited, a clock reading and three; against the one atomic add
 * every READ already paid (sh->m.hits). CPU only: a tight
 * loop over one shard's struct metrics, min and median of several runs,
 * so a loaded machine shows as spread, not as cost. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "daemon.h"
#include "metrics.h"

#define OPS 5000000u
#define RUNS 9

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* ns per op of the READ's old statistics: one counter. */
static double run_old(struct metrics *m)
{
	double t0 = rc_now_s();
	for (unsigned i = 0; i < OPS; i++)
		m->hits++;
	return (rc_now_s() - t0) * 1e9 / OPS;
}

/* A hit as session.c records it: one clock reading per pass of 32 SQEs,
 * the counter, the dataset's hit, the wait's bucket (0: no sum add). */
static double run_hit(struct metrics *m)
{
	double t0 = rc_now_s();
	uint64_t pass = 0;
	for (unsigned i = 0; i < OPS; i++) {
		if (i % 32 == 0)
			pass = rc_now_ns();
		m->hits++;
		metrics_dataset_lookup(m, i & 7, true);
		metrics_read_wait(m, (int)(i & 3), pass == 0);
	}
	return (rc_now_s() - t0) * 1e9 / OPS;
}

/* A READ that waited: a clock reading at completion, bucket and sum. */
static double run_wait(struct metrics *m)
{
	double t0 = rc_now_s();
	uint64_t pass = rc_now_ns();
	for (unsigned i = 0; i < OPS; i++) {
		m->misses++;
		metrics_dataset_lookup(m, i & 7, false);
		metrics_read_wait(m, (int)(i & 3), rc_now_ns() - pass);
	}
	return (rc_now_s() - t0) * 1e9 / OPS;
}

int main(void)
{
	struct metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return 1;
	double old[RUNS], hit[RUNS], wait[RUNS];
	for (int r = 0; r < RUNS; r++) { /* interleaved: same load for all */
		old[r] = run_old(m);
		hit[r] = run_hit(m);
		wait[r] = run_wait(m);
	}
	qsort(old, RUNS, sizeof(double), cmp);
	qsort(hit, RUNS, sizeof(double), cmp);
	qsort(wait, RUNS, sizeof(double), cmp);
	printf("rc-metricsbench: %u ops x %d runs, ns per READ (min / median)\n",
	       OPS, RUNS);
	printf("  before: one counter             %6.1f / %6.1f\n", old[0],
	       old[RUNS / 2]);
	printf("  a hit now                       %6.1f / %6.1f\n", hit[0],
	       hit[RUNS / 2]);
	printf("  a READ that waited now          %6.1f / %6.1f\n", wait[0],
	       wait[RUNS / 2]);
	free(m);
	return 0;
}
