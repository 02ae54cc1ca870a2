/* stallbench.c - rc-stallbench: owns the data-stall benchmark (issue 4,
 * benchmark 1). One consumer, like a training loop without loader workers,
 * reads each sample with READ_INTO into a registered buffer and then
 * "computes" for a fixed step time; it reports the fraction of wall time
 * spent waiting for data, per epoch.
 *
 * Workloads over the dataset of tools/dataset.h:
 *   small  the small objects (~570 KB each), one sample per object, in a
 *          shuffled order;
 *   large  the 3 large objects (20-48 MiB) read in 1 MiB samples,
 *          sequentially inside an object, objects in a shuffled order (the
 *          shape of a sharded tar/record format).
 * With --prefetch the epoch's order is handed to the daemon as a prefetch
 * plan at the start of the epoch (its submission counts as waiting).
 *
 * The step begins when a sample arrives: the sample is checked against
 * tools/dataset.h (that check is part of the step, so a corrupt byte can
 * never hide) and the process then sleeps (or spins) until the step's end.
 * Objects are opened before the first epoch starts: opening is dataset
 * indexing, not a per-step cost.
 *
 * Besides the stall over the whole epoch it reports the wait for the
 * first sample (plan submission included: the start-up latency of a cold
 * epoch) and the steady stall without it.
 *
 * Run it against a fresh daemon for a cold first epoch; perf/bench4.sh
 * does. Output: one "RESULT key=value ..." line per epoch. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringcache.h"
#include "../tools/dataset.h"
#include "bench.h"

#define MIB (1024u * 1024u)
#define MAX_EPOCHS 16

enum workload { W_SMALL, W_LARGE };

struct opts {
	const char *socket, *dataset;
	enum workload workload;
	size_t n_small;   /* the dataset's scale, as uploaded */
	size_t max_samples; /* 0: all */
	double step_ms;
	bool prefetch, spin, zero_copy;
	long client_spin_us; /* -1: the library's default */
	int epochs, gpu;
	uint64_t seed;
};

struct sample {
	size_t obj;   /* dataset index */
	uint64_t off, len;
};

struct bench {
	const struct opts *o;
	struct ds_spec spec;
	struct rc_client c;
	int ds;
	uint32_t *handles;   /* by dataset index; UINT32_MAX: not opened */
	uint8_t *data;       /* registered sample buffer */
	const uint8_t *sample; /* the last sample's bytes: data, or arena */
	uint32_t lease;      /* --zero-copy: the last sample's lease */
	size_t posted;       /* RELEASEs posted, completions not yet reaped */
	int data_buf;
	struct rc_plan_entry *plan; /* registered plan buffer */
	int plan_buf;
	struct sample *order;
	size_t n_order;
	size_t *objs;        /* scratch: the workload's objects */
	size_t *first_sample; /* by dataset index: canonical sample number */
	double *waits;       /* per sample of the epoch, seconds */
};

struct epoch_result {
	size_t samples, hits;
	double wall_s, wait_s;
	double p50_ms, p99_ms, max_ms; /* per-sample waits */
	double first_s;  /* wait for the first sample: start-up, not steady */
};

static void die(const char *what, int err)
{
	fprintf(stderr, "rc-stallbench: %s: %s\n", what, rc_strerror(err));
	exit(1);
}

/* The objects a workload reads, as dataset indices. */
static size_t workload_objects(const struct bench *b, size_t *out)
{
	size_t n = 0;
	if (b->o->workload == W_SMALL) {
		for (size_t i = 0; i < b->spec.n_small; i++)
			out[n++] = i;
	} else {
		for (size_t i = 0; i < DS_N_LARGE; i++)
			out[n++] = b->spec.n_small + i;
	}
	return n;
}

/* Opens every object of the workload with OPENs in flight together: a
 * serial open costs one S3 HEAD round trip each. */
static void open_all(struct bench *b)
{
	size_t count = ds_count(&b->spec);
	size_t *objs = calloc(count, sizeof(*objs));
	char (*names)[DS_KEY_MAX] = calloc(count, sizeof(*names));
	const char **keys = calloc(count, sizeof(*keys));
	int32_t *res = calloc(count, sizeof(*res));
	uint64_t *sizes = calloc(count, sizeof(*sizes));
	b->handles = malloc(count * sizeof(*b->handles));
	if (!objs || !names || !keys || !res || !sizes || !b->handles)
		die("open", -ENOMEM);
	memset(b->handles, 0xff, count * sizeof(*b->handles));
	size_t n = workload_objects(b, objs);
	for (size_t k = 0; k < n; k++)
		keys[k] = ds_key(&b->spec, objs[k], names[k]);
	int err = rc_open_many(&b->c, b->ds, keys, n, res, sizes);
	if (err < 0)
		die("open", err);
	for (size_t k = 0; k < n; k++) {
		if (res[k] < 0)
			die("OPEN", res[k]);
		if (sizes[k] != ds_size(&b->spec, objs[k]))
			die("OPEN: size differs from tools/dataset.h", -EIO);
		b->handles[objs[k]] = (uint32_t)res[k];
	}
	free(objs);
	free(names);
	free(keys);
	free(res);
	free(sizes);
}

/* The samples of one epoch, in the order they are read: the workload's
 * objects shuffled, each read whole (small) or in 1 MiB samples front to
 * back (large). --samples keeps the same first N samples of the canonical
 * order in every epoch, so a warm epoch reads what the cold one fetched. */
static void build_order(struct bench *b, int epoch)
{
	size_t *objs = b->objs;
	size_t n_obj = workload_objects(b, objs);
	size_t cap = b->o->max_samples ? b->o->max_samples : SIZE_MAX;
	uint64_t step = b->o->workload == W_SMALL ? UINT64_MAX : MIB;
	/* Canonical sample number of each object's first sample. */
	for (size_t k = 0, first = 0; k < n_obj; k++) {
		b->first_sample[objs[k]] = first;
		uint64_t size = ds_size(&b->spec, objs[k]);
		first += step == UINT64_MAX ? 1 : (size + step - 1) / step;
	}
	shuffle(objs, n_obj, b->o->seed * 1000003u + (uint64_t)epoch);
	b->n_order = 0;
	for (size_t k = 0; k < n_obj; k++) {
		uint64_t size = ds_size(&b->spec, objs[k]);
		size_t canon = b->first_sample[objs[k]];
		uint64_t len = step < size ? step : size;
		for (uint64_t off = 0; off < size && canon < cap;
		     off += len, canon++)
			b->order[b->n_order++] = (struct sample){
				objs[k], off, size - off < len ? size - off : len};
	}
}

static void send_plan(struct bench *b)
{
	for (size_t i = 0; i < b->n_order; i++)
		b->plan[i] = (struct rc_plan_entry){
			.handle = b->handles[b->order[i].obj],
			.offset = b->order[i].off,
			.len = b->order[i].len,
		};
	int r = rc_prefetch_plan(&b->c, (uint32_t)b->plan_buf, 0, b->n_order);
	if (r < 0 || (size_t)r != b->n_order)
		die("PREFETCH_PLAN", r < 0 ? r : -EINVAL);
}

#define RELEASE_TAG UINT64_MAX /* user_data of posted RELEASEs */

/* Reads one sample (into the data buffer, or --zero-copy: leased in the
 * arena); returns true if it was a hit (served without waiting for S3).
 * Completions of earlier posted RELEASEs are reaped on the way. */
static bool read_sample(struct bench *b, const struct sample *s)
{
	struct rc_sqe *sqe = rc_get_sqe(&b->c);
	if (!sqe)
		die("READ", -EBUSY);
	if (b->o->zero_copy)
		rc_prep_read(sqe, b->handles[s->obj], s->off, s->len, 0);
	else
		rc_prep_read_into(sqe, b->handles[s->obj], s->off, s->len,
				  (uint32_t)b->data_buf, 0, 0);
	rc_submit(&b->c);
	struct rc_cqe *cqe;
	for (;;) {
		int r = rc_wait_cqe(&b->c, &cqe);
		if (r < 0)
			die("wait", r);
		if (cqe->user_data != RELEASE_TAG)
			break;
		if (cqe->res < 0)
			die("RELEASE", cqe->res);
		rc_cqe_seen(&b->c);
		b->posted--;
	}
	if (cqe->res < 0)
		die("READ", cqe->res);
	if ((uint64_t)cqe->res != s->len)
		die("READ: short read (a sample spans one block)", -EIO);
	bool hit = cqe->flags & RC_CQE_F_HIT;
	b->sample = b->o->zero_copy ? rc_cqe_data(&b->c, cqe) : b->data;
	b->lease = cqe->lease;
	rc_cqe_seen(&b->c);
	return hit;
}

/* --zero-copy: hands the sample's lease back without waiting (posted,
 * reaped by the next read), as a loader does once the GPU has the bytes. */
static void release_sample(struct bench *b)
{
	struct rc_sqe *sqe = rc_get_sqe(&b->c);
	if (!sqe)
		die("RELEASE", -EBUSY);
	rc_prep_release(sqe, b->lease, RELEASE_TAG);
	rc_submit(&b->c);
	b->posted++;
}

/* Reaps the posted RELEASEs: the synchronous helpers expect an idle ring. */
static void drain_releases(struct bench *b)
{
	while (b->posted) {
		struct rc_cqe *cqe;
		int r = rc_wait_cqe(&b->c, &cqe);
		if (r < 0)
			die("wait", r);
		if (cqe->user_data != RELEASE_TAG || cqe->res < 0)
			die("RELEASE", cqe->res < 0 ? cqe->res : -EPROTO);
		rc_cqe_seen(&b->c);
		b->posted--;
	}
}

static void compute_until(const struct opts *o, double deadline)
{
	if (o->spin) {
		while (rc_now_s() < deadline)
			;
		return;
	}
	double left = deadline - rc_now_s();
	if (left <= 0)
		return;
	struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static struct epoch_result run_epoch(struct bench *b, int epoch)
{
	struct epoch_result r = {0};
	build_order(b, epoch);
	double start = rc_now_s();
	if (b->o->prefetch)
		send_plan(b);
	r.wait_s = rc_now_s() - start;
	for (size_t i = 0; i < b->n_order; i++) {
		const struct sample *s = &b->order[i];
		double t0 = rc_now_s();
		r.hits += read_sample(b, s);
		double t1 = rc_now_s();
		r.wait_s += t1 - t0;
		b->waits[i] = t1 - t0;
		if (i == 0)
			r.first_s = r.wait_s;
		if (ds_mismatch(&b->spec, s->obj, s->off, b->sample, s->len) >= 0)
			die("sample differs from tools/dataset.h", -EIO);
		if (b->o->zero_copy)
			release_sample(b);
		compute_until(b->o, t1 + b->o->step_ms / 1e3);
	}
	r.wall_s = rc_now_s() - start;
	drain_releases(b);
	r.samples = b->n_order;
	qsort(b->waits, b->n_order, sizeof(*b->waits), cmp_double);
	if (b->n_order) {
		r.p50_ms = 1e3 * b->waits[b->n_order / 2];
		r.p99_ms = 1e3 * b->waits[(b->n_order * 99) / 100];
		r.max_ms = 1e3 * b->waits[b->n_order - 1];
	}
	return r;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rc-stallbench --socket PATH --dataset NAME [options]\n"
		"  --workload small|large  570 KB objects, or the large ones in 1 MiB\n"
		"                          samples (default small)\n"
		"  --step-ms X             compute time per sample (default 20)\n"
		"  --prefetch              send each epoch's order as a prefetch plan\n"
		"  --epochs N              epochs against the same daemon (default 2:\n"
		"                          cold, then warm)\n"
		"  --samples N             read only the first N samples of an epoch\n"
		"  --small N               the dataset's scale as uploaded (default 300)\n"
		"  --spin                  busy-wait the step instead of sleeping\n"
		"  --zero-copy             READ (leased in the arena, released without\n"
		"                          waiting) instead of READ_INTO a buffer\n"
		"  --client-spin-us N      poll the CQ this long before sleeping\n"
		"                          (rc_client.spin; default the library's)\n"
		"  --gpu N                 GPU index to attach with (default 0)\n"
		"  --seed N                shuffle seed (default 1)\n");
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"socket", required_argument, NULL, 'S'},
		{"dataset", required_argument, NULL, 'd'},
		{"workload", required_argument, NULL, 'w'},
		{"step-ms", required_argument, NULL, 't'},
		{"prefetch", no_argument, NULL, 'p'},
		{"epochs", required_argument, NULL, 'e'},
		{"samples", required_argument, NULL, 'n'},
		{"small", required_argument, NULL, 's'},
		{"spin", no_argument, NULL, 'b'},
		{"client-spin-us", required_argument, NULL, 'c'},
		{"zero-copy", no_argument, NULL, 'z'},
		{"gpu", required_argument, NULL, 'g'},
		{"seed", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	*o = (struct opts){.workload = W_SMALL, .n_small = DS_DEFAULT_SMALL,
			   .step_ms = 20, .epochs = 2, .seed = 1,
			   .client_spin_us = -1};
	int opt;
	while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (opt) {
		case 'S': o->socket = optarg; break;
		case 'd': o->dataset = optarg; break;
		case 'w':
			if (!strcmp(optarg, "small"))
				o->workload = W_SMALL;
			else if (!strcmp(optarg, "large"))
				o->workload = W_LARGE;
			else
				goto bad;
			break;
		case 't': o->step_ms = atof(optarg); break;
		case 'p': o->prefetch = true; break;
		case 'e': o->epochs = atoi(optarg); break;
		case 'n': o->max_samples = strtoull(optarg, NULL, 10); break;
		case 's': o->n_small = strtoull(optarg, NULL, 10); break;
		case 'b': o->spin = true; break;
		case 'c': o->client_spin_us = atol(optarg); break;
		case 'z': o->zero_copy = true; break;
		case 'g': o->gpu = atoi(optarg); break;
		case 'r': o->seed = strtoull(optarg, NULL, 10); break;
		case 'h': usage(stdout); exit(0);
		default: goto bad;
		}
	}
	if (optind == argc && o->dataset && o->epochs >= 1 &&
	    o->epochs <= MAX_EPOCHS && o->step_ms >= 0 && o->n_small >= 1 &&
	    o->n_small <= DS_DEFAULT_SMALL * 64)
		return;
bad:
	usage(stderr);
	exit(2);
}

static void setup(struct bench *b, const struct opts *o)
{
	*b = (struct bench){.o = o};
	b->spec = (struct ds_spec){.n_small = o->n_small,
				   .seed = DS_DEFAULT_SEED};
	struct rc_attach_opts ao = {.gpu = o->gpu, .numa_node = -1};
	int r = rc_attach(&b->c, o->socket, &ao);
	if (r < 0)
		die("attach", r);
	if (o->client_spin_us >= 0)
		b->c.spin = (uint32_t)(o->client_spin_us * 1000);
	if ((b->ds = rc_dataset(&b->c, o->dataset)) < 0)
		die(o->dataset, b->ds);
	size_t max_order = o->n_small + 128; /* large: ~101 samples of 1 MiB */
	b->order = calloc(max_order, sizeof(*b->order));
	b->objs = calloc(o->n_small + DS_N_LARGE, sizeof(*b->objs));
	b->first_sample = calloc(ds_count(&b->spec), sizeof(*b->first_sample));
	b->waits = calloc(max_order, sizeof(*b->waits));
	if (!b->order || !b->objs || !b->first_sample || !b->waits)
		die("setup", -ENOMEM);
	void *p;
	if ((b->data_buf = rc_alloc_buffer(&b->c, MIB, &p)) < 0)
		die("register buffer", b->data_buf);
	b->data = p;
	b->plan_buf = rc_alloc_buffer(&b->c, max_order * sizeof(*b->plan), &p);
	if (b->plan_buf < 0)
		die("register buffer", b->plan_buf);
	b->plan = p;
	open_all(b);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse_opts(argc, argv, &o);
	struct bench b;
	setup(&b, &o);
	const char *wl = o.workload == W_SMALL ? "small" : "large";
	const char *mode = o.prefetch ? "prefetch" : "no-plan";
	for (int e = 1; e <= o.epochs; e++) {
		struct epoch_result r = run_epoch(&b, e);
		printf("RESULT workload=%s step_ms=%g mode=%s read=%s epoch=%d "
		       "samples=%zu hits=%zu wall_s=%.3f wait_s=%.4f "
		       "stall_pct=%.3f wait_p50_ms=%.2f wait_p99_ms=%.2f "
		       "wait_max_ms=%.2f first_ms=%.2f steady_pct=%.3f\n",
		       wl, o.step_ms, mode, o.zero_copy ? "zero-copy" : "copy",
		       e, r.samples, r.hits, r.wall_s,
		       r.wait_s, 100.0 * r.wait_s / r.wall_s, r.p50_ms, r.p99_ms,
		       r.max_ms, 1e3 * r.first_s,
		       100.0 * (r.wait_s - r.first_s) / (r.wall_s - r.first_s));
		fflush(stdout);
	}
	rc_detach(&b.c);
	return 0;
}
