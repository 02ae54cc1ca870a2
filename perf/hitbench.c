/* hitbench.c - rc-hitbench: owns the hit-ratio benchmark (issue 4,
 * benchmark 2): a dataset about twice the cache, several shuffled epochs,
 * one reader process per GPU queue, in one of three modes:
 *   default   no plans: the default eviction policy alone;
 *   plans     each reader hands its epoch's order to the daemon as a
 *             prefetch plan at the start of the epoch (replacing the last);
 *   ahead     as a sampler that knows the next epoch's order early: at the
 *             start of epoch e the reader also appends epoch e+1's order
 *             (RC_PLAN_APPEND), so eviction sees next uses across the
 *             boundary (the last epoch appends nothing).
 *
 * Sharding is DistributedSampler's: every epoch one permutation of all the
 * small objects of tools/dataset.h (seeded by the epoch), and reader r of
 * P takes positions r, r+P, r+2P, ... Each reader attaches with gpu = r,
 * so each has its own prefetch queue. A reader reads each sample with
 * READ_INTO, checks it against tools/dataset.h, and sleeps for the step
 * time (the GPU step), so that prefetch has something to overlap with.
 *
 * The parent starts the epochs together (a barrier over pipes) and reads
 * the daemon's counters between epochs; per epoch it prints:
 *   hit       samples served without waiting for S3 (RC_CQE_F_HIT),
 *   blk_hit   ringcache_cache_hits / (hits + misses) over the epoch,
 *   s3_get    S3 GETs the epoch cost (demand fetches and prefetches),
 *   reuse     1 - s3_get / block lookups: the share of reads the cache
 *             saved from S3, which prefetch cannot inflate (a prefetched
 *             block that is then read is a hit but still cost a GET),
 *   entries   blocks in the cache at the end of the epoch.
 * Then two summary lines: epoch=all over every epoch, and epoch=warm over
 * epochs 2.. (epoch 1's misses are compulsory for every policy). In a warm
 * epoch no policy can save more than cache/dataset of its reads: a block
 * read once per epoch hits only if it was cached when the epoch began.
 * Run it against a fresh daemon whose memory holds about half the
 * dataset; perf/bench4.sh does. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ringcache.h"
#include "../tools/dataset.h"
#include "bench.h"

#define MIB (1024u * 1024u)
#define MAX_PROCS 64
#define MAX_EPOCHS 16
#define STATS_BUF (256 * 1024)

enum mode { MODE_DEFAULT, MODE_PLANS, MODE_AHEAD };
static const char *const mode_names[] = {"default", "plans", "ahead"};

struct opts {
	const char *socket, *dataset;
	int procs, epochs;
	enum mode mode;
	double step_ms;
	size_t n_small;
	uint64_t seed;
};

struct reply {
	int32_t status;
	uint32_t pad;
	uint64_t samples, hits;
	double wait_s;
};

struct reader {
	const struct opts *o;
	int rank;
	struct ds_spec spec;
	struct rc_client c;
	int ds;
	uint32_t *handles;
	uint8_t *data;
	int data_buf;
	struct rc_plan_entry *plan;
	int plan_buf;
	size_t *perm, *mine;
	size_t n_mine;
};

struct counters {
	uint64_t hits, misses, s3_get, entries, evictions;
};

static void fail(const char *what)
{
	fprintf(stderr, "rc-hitbench: %s\n", what);
	exit(1);
}

static void die(const char *what, int err)
{
	fprintf(stderr, "rc-hitbench: %s: %s\n", what, rc_strerror(err));
	exit(1);
}

/* Opens every small object, OPENs in flight together. */
static void open_all(struct reader *r)
{
	size_t n = r->spec.n_small;
	char (*names)[DS_KEY_MAX] = calloc(n, sizeof(*names));
	const char **keys = calloc(n, sizeof(*keys));
	int32_t *res = calloc(n, sizeof(*res));
	uint64_t *sizes = calloc(n, sizeof(*sizes));
	r->handles = calloc(n, sizeof(*r->handles));
	if (!names || !keys || !res || !sizes || !r->handles)
		die("open", -ENOMEM);
	for (size_t i = 0; i < n; i++)
		keys[i] = ds_key(&r->spec, i, names[i]);
	int err = rc_open_many(&r->c, r->ds, keys, n, res, sizes);
	if (err < 0)
		die("open", err);
	for (size_t i = 0; i < n; i++) {
		if (res[i] < 0)
			die("OPEN", res[i]);
		if (sizes[i] != ds_size(&r->spec, i))
			die("OPEN: size differs from tools/dataset.h", -EIO);
		r->handles[i] = (uint32_t)res[i];
	}
	free(names);
	free(keys);
	free(res);
	free(sizes);
}

static void reader_setup(struct reader *r, const struct opts *o, int rank)
{
	*r = (struct reader){.o = o, .rank = rank};
	r->spec = (struct ds_spec){.n_small = o->n_small,
				   .seed = DS_DEFAULT_SEED};
	struct rc_attach_opts ao = {.gpu = rank, .numa_node = -1};
	int err = rc_attach(&r->c, o->socket, &ao);
	if (err < 0)
		die("attach", err);
	if ((r->ds = rc_dataset(&r->c, o->dataset)) < 0)
		die(o->dataset, r->ds);
	void *p;
	if ((r->data_buf = rc_alloc_buffer(&r->c, MIB, &p)) < 0)
		die("register buffer", r->data_buf);
	r->data = p;
	r->plan_buf = rc_alloc_buffer(&r->c, o->n_small * sizeof(*r->plan), &p);
	if (r->plan_buf < 0)
		die("register buffer", r->plan_buf);
	r->plan = p;
	r->perm = calloc(o->n_small, sizeof(*r->perm));
	r->mine = calloc(o->n_small, sizeof(*r->mine));
	if (!r->perm || !r->mine)
		die("setup", -ENOMEM);
	open_all(r);
}

/* This reader's samples of the epoch: DistributedSampler's sharding. */
static void shard_epoch(struct reader *r, int epoch)
{
	for (size_t i = 0; i < r->o->n_small; i++)
		r->perm[i] = i;
	shuffle(r->perm, r->o->n_small, r->o->seed * 1000003u + (uint64_t)epoch);
	r->n_mine = 0;
	for (size_t i = (size_t)r->rank; i < r->o->n_small;
	     i += (size_t)r->o->procs)
		r->mine[r->n_mine++] = r->perm[i];
}

/* Sends this reader's order of the epoch as its plan, or appended to it. */
static void send_plan(struct reader *r, int epoch, bool append)
{
	shard_epoch(r, epoch);
	for (size_t i = 0; i < r->n_mine; i++)
		r->plan[i] = (struct rc_plan_entry){
			.handle = r->handles[r->mine[i]],
			.len = ds_size(&r->spec, r->mine[i]),
		};
	int n = append ? rc_prefetch_plan_append(&r->c, (uint32_t)r->plan_buf,
						 0, r->n_mine)
		       : rc_prefetch_plan(&r->c, (uint32_t)r->plan_buf, 0,
					  r->n_mine);
	if (n < 0 || (size_t)n != r->n_mine)
		die("PREFETCH_PLAN", n < 0 ? n : -EINVAL);
}

/* Hands over the plans the mode sends at the start of the epoch. */
static void plan_epoch(struct reader *r, int epoch)
{
	const struct opts *o = r->o;
	if (o->mode == MODE_PLANS || (o->mode == MODE_AHEAD && epoch == 1))
		send_plan(r, epoch, false);
	if (o->mode == MODE_AHEAD && epoch < o->epochs)
		send_plan(r, epoch + 1, true);
}

/* Reads object i whole; returns true if it was served without waiting. */
static bool read_sample(struct reader *r, size_t i)
{
	uint64_t len = ds_size(&r->spec, i);
	struct rc_sqe *sqe = rc_get_sqe(&r->c);
	if (!sqe)
		die("READ_INTO", -EBUSY);
	rc_prep_read_into(sqe, r->handles[i], 0, len, (uint32_t)r->data_buf,
			  0, 0);
	rc_submit(&r->c);
	struct rc_cqe *cqe;
	int err = rc_wait_cqe(&r->c, &cqe);
	if (err < 0)
		die("wait", err);
	if (cqe->res < 0)
		die("READ_INTO", cqe->res);
	if ((uint64_t)cqe->res != len)
		die("READ_INTO: short read", -EIO);
	bool hit = cqe->flags & RC_CQE_F_HIT;
	rc_cqe_seen(&r->c);
	if (ds_mismatch(&r->spec, i, 0, r->data, len) >= 0)
		die("sample differs from tools/dataset.h", -EIO);
	return hit;
}

static void sleep_until(double deadline)
{
	double left = deadline - rc_now_s();
	if (left <= 0)
		return;
	struct timespec ts = {(time_t)left,
			      (long)((left - (double)(time_t)left) * 1e9)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static struct reply reader_epoch(struct reader *r, int epoch)
{
	struct reply rep = {0};
	double t0 = rc_now_s();
	plan_epoch(r, epoch);
	shard_epoch(r, epoch);
	rep.wait_s = rc_now_s() - t0;
	for (size_t k = 0; k < r->n_mine; k++) {
		double a = rc_now_s();
		rep.hits += read_sample(r, r->mine[k]);
		double b = rc_now_s();
		rep.wait_s += b - a;
		sleep_until(b + r->o->step_ms / 1e3);
	}
	rep.samples = r->n_mine;
	return rep;
}

static void write_all(int fd, const void *p, size_t n)
{
	if (write(fd, p, n) != (ssize_t)n)
		die("pipe write", -errno);
}

static bool read_all(int fd, void *p, size_t n)
{
	return read(fd, p, n) == (ssize_t)n;
}

/* A reader process: ready, then one epoch per command until 0. */
static void reader_main(const struct opts *o, int rank, int cmd_fd,
			int reply_fd)
{
	struct reader r;
	reader_setup(&r, o, rank);
	struct reply ready = {0};
	write_all(reply_fd, &ready, sizeof(ready));
	int32_t epoch;
	while (read_all(cmd_fd, &epoch, sizeof(epoch)) && epoch > 0) {
		struct reply rep = reader_epoch(&r, epoch);
		write_all(reply_fd, &rep, sizeof(rep));
	}
	rc_detach(&r.c);
	exit(0);
}

static uint64_t counter(const char *text, const char *name)
{
	size_t nl = strlen(name);
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, name, nl) && p[nl] == ' ')
			return strtoull(p + nl + 1, NULL, 10);
	return 0;
}

static struct counters read_counters(const char *socket)
{
	static char buf[STATS_BUF];
	ssize_t n = rc_stats(NULL, socket, buf, sizeof(buf));
	if (n < 0)
		die("stats", (int)n);
	return (struct counters){
		.hits = counter(buf, "ringcache_cache_hits_total"),
		.misses = counter(buf, "ringcache_cache_misses_total"),
		.s3_get = counter(buf, "ringcache_s3_get_total"),
		.entries = counter(buf, "ringcache_cache_entries"),
		.evictions = counter(buf, "ringcache_cache_evictions_total"),
	};
}

struct proc {
	pid_t pid;
	int cmd_fd, reply_fd;
};

static void start_readers(const struct opts *o, struct proc *pr)
{
	for (int i = 0; i < o->procs; i++) {
		int cmd[2], rep[2];
		if (pipe(cmd) < 0 || pipe(rep) < 0)
			die("pipe", -errno);
		pid_t pid = fork();
		if (pid < 0)
			die("fork", -errno);
		if (pid == 0) {
			close(cmd[1]);
			close(rep[0]);
			for (int k = 0; k < i; k++) {
				close(pr[k].cmd_fd);
				close(pr[k].reply_fd);
			}
			reader_main(o, i, cmd[0], rep[1]);
		}
		close(cmd[0]);
		close(rep[1]);
		pr[i] = (struct proc){pid, cmd[1], rep[0]};
	}
	for (int i = 0; i < o->procs; i++) {
		struct reply ready;
		if (!read_all(pr[i].reply_fd, &ready, sizeof(ready)))
			fail("a reader failed to start");
	}
}

/* What epochs cost, summed. */
struct tally {
	uint64_t samples, hits, blk_hits, lookups, gets, evictions;
	double wait_s;
};

static void tally_add(struct tally *t, const struct tally *e)
{
	t->samples += e->samples;
	t->hits += e->hits;
	t->blk_hits += e->blk_hits;
	t->lookups += e->lookups;
	t->gets += e->gets;
	t->evictions += e->evictions;
	t->wait_s += e->wait_s;
}

static double share(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static void print_result(const struct opts *o, const char *epoch,
			 const struct tally *t, uint64_t entries)
{
	double reuse = t->lookups ? 1.0 - share(t->gets, t->lookups) : 0;
	printf("RESULT mode=%s epoch=%s samples=%" PRIu64 " hit=%.4f "
	       "blk_hit=%.4f s3_get=%" PRIu64 " reuse=%.4f entries=%" PRIu64
	       " evictions=%" PRIu64 " wait_s=%.3f\n",
	       mode_names[o->mode], epoch, t->samples, share(t->hits, t->samples),
	       share(t->blk_hits, t->lookups), t->gets, reuse < 0 ? 0 : reuse,
	       entries, t->evictions, t->wait_s / o->procs);
	fflush(stdout);
}

static struct tally run_epoch(const struct opts *o, struct proc *pr, int epoch)
{
	struct counters a = read_counters(o->socket);
	int32_t cmd = epoch;
	for (int i = 0; i < o->procs; i++)
		write_all(pr[i].cmd_fd, &cmd, sizeof(cmd));
	struct reply sum = {0};
	for (int i = 0; i < o->procs; i++) {
		struct reply rep;
		if (!read_all(pr[i].reply_fd, &rep, sizeof(rep)))
			fail("a reader failed");
		sum.samples += rep.samples;
		sum.hits += rep.hits;
		sum.wait_s += rep.wait_s;
	}
	struct counters b = read_counters(o->socket);
	struct tally t = {
		.samples = sum.samples, .hits = sum.hits,
		.blk_hits = b.hits - a.hits,
		.lookups = (b.hits - a.hits) + (b.misses - a.misses),
		.gets = b.s3_get - a.s3_get, .wait_s = sum.wait_s,
		.evictions = b.evictions - a.evictions,
	};
	char name[16];
	snprintf(name, sizeof(name), "%d", epoch);
	print_result(o, name, &t, b.entries);
	return t;
}

static void stop_readers(const struct opts *o, struct proc *pr)
{
	int32_t stop = 0;
	int failed = 0;
	for (int i = 0; i < o->procs; i++) {
		write_all(pr[i].cmd_fd, &stop, sizeof(stop));
		close(pr[i].cmd_fd);
	}
	for (int i = 0; i < o->procs; i++) {
		int st;
		if (waitpid(pr[i].pid, &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			failed++;
		close(pr[i].reply_fd);
	}
	if (failed)
		fail("readers failed");
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rc-hitbench --socket PATH --dataset NAME [options]\n"
		"  --plans          each reader sends its epoch order as a plan\n"
		"  --plans-ahead    ... and appends the next epoch's order early\n"
		"  --procs N        reader processes, one GPU queue each (default 8)\n"
		"  --epochs N       shuffled epochs (default 3)\n"
		"  --step-ms X      sleep after each sample (default 20)\n"
		"  --small N        the dataset's scale as uploaded (default 300)\n"
		"  --seed N         shuffle seed (default 1)\n");
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"socket", required_argument, NULL, 'S'},
		{"dataset", required_argument, NULL, 'd'},
		{"plans", no_argument, NULL, 'p'},
		{"plans-ahead", no_argument, NULL, 'a'},
		{"procs", required_argument, NULL, 'P'},
		{"epochs", required_argument, NULL, 'e'},
		{"step-ms", required_argument, NULL, 't'},
		{"small", required_argument, NULL, 's'},
		{"seed", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	*o = (struct opts){.procs = 8, .epochs = 3, .step_ms = 20,
			   .n_small = DS_DEFAULT_SMALL, .seed = 1};
	int opt;
	while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (opt) {
		case 'S': o->socket = optarg; break;
		case 'd': o->dataset = optarg; break;
		case 'p': o->mode = MODE_PLANS; break;
		case 'a': o->mode = MODE_AHEAD; break;
		case 'P': o->procs = atoi(optarg); break;
		case 'e': o->epochs = atoi(optarg); break;
		case 't': o->step_ms = atof(optarg); break;
		case 's': o->n_small = strtoull(optarg, NULL, 10); break;
		case 'r': o->seed = strtoull(optarg, NULL, 10); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc || !o->dataset || o->procs < 1 ||
	    o->procs > MAX_PROCS || o->epochs < 1 || o->epochs > MAX_EPOCHS ||
	    o->step_ms < 0 || o->n_small < 1) {
		usage(stderr);
		exit(2);
	}
}

int main(int argc, char **argv)
{
	struct opts o;
	parse_opts(argc, argv, &o);
	signal(SIGPIPE, SIG_IGN);
	struct proc pr[MAX_PROCS];
	start_readers(&o, pr);
	struct tally all = {0}, warm = {0};
	for (int e = 1; e <= o.epochs; e++) {
		struct tally t = run_epoch(&o, pr, e);
		tally_add(&all, &t);
		if (e > 1)
			tally_add(&warm, &t);
	}
	uint64_t entries = read_counters(o.socket).entries;
	print_result(&o, "all", &all, entries);
	if (o.epochs > 1)
		print_result(&o, "warm", &warm, entries);
	stop_readers(&o, pr);
	return 0;
}
