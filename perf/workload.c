/* workload.c - rc-workload: the training-job reader of the benchmark harness.
 *
 * It owns the access patterns: a list of objects (SIZE KEY lines), read in
 * sequential or shuffled order (one permutation per epoch, the same for
 * every tool given the same seed), sharded over N reader processes (one per
 * GPU), for E epochs in a row. Each reader reads its objects one at a time
 * in chunks, as a dataloader worker does, and touches every byte (a word
 * sum), so a zero-copy read is not credited for bytes nobody looked at.
 *
 * Two back ends read the same keys:
 *   ringcache  through include/ringcache.h: each reader reads its shard
 *              in batches (one READ_KEY entry per sample, --batch
 *              samples and at most 32 MiB a submission), the next batch
 *              in flight (rc_read_many_start) while this one's bytes are
 *              summed, releasing lazily; --list: the first epoch starts with one
 *              LIST of the keys' folders (by the parent, before the
 *              readers start), as a loader building its index does (a
 *              listed cold sample is one GET, no HEAD).
 *              --per-op: the earlier path, kept for comparison: open the
 *              whole shard (OPENs pipelined), hand the daemon the order as
 *              a prefetch plan (--no-plan: not), then zero-copy rc_read,
 *              rc_release and rc_close per object
 *   fs         open/read under a directory: page-cache local files, a bulk
 *              download's output, or a FUSE mount (s3fs, rclone)
 *
 * One TSV line per epoch goes to stdout (columns in perf/README.md); the
 * checksum column is order independent, so the driver can check that every
 * tool returned the same bytes. With RC_WORKLOAD_TIMES set, each epoch's
 * start (wall clock, ms) goes to stderr, to place it in a daemon's log. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ringcache.h"
#include "vec.h"

#define MAX_READERS 64
#define MAX_EXTENTS 64

enum backend { BACKEND_RINGCACHE, BACKEND_FS };

struct options {
	enum backend backend;
	const char *keys_path, *dir, *socket, *dataset, *label;
	int readers, epochs;
	bool shuffled, plan, per_op, list, pipeline;
	int batch;
	uint64_t seed, chunk;
	long spin; /* rc_client.spin override; -1: the library's default */
};

struct object {
	char *key;
	uint64_t size;
};

/* What one reader reports back through shared memory. */
struct reader_result {
	uint64_t files, bytes, checksum, errors;
	int64_t first_byte_ns; /* since the epoch start; -1: none */
	int64_t end_ns;
	char error[160];
};

/* An epoch's shared memory: results and per-read latencies (ns). */
struct epoch_shm {
	int64_t t0; /* epoch start, set before the barrier opens */
	struct reader_result res[MAX_READERS];
	int64_t lat[];
};

/* A reader's view while it runs. */
struct reader {
	const struct options *opt;
	struct reader_result *res;
	int64_t *lat;      /* this reader's latency slots */
	size_t n_lat;
	const int64_t *epoch_t0; /* in shared memory */
	int64_t t0;        /* epoch start, CLOCK_MONOTONIC ns */
	uint8_t *buf;      /* fs back end */
	struct rc_client rc;
	int ds;
	int epoch;
	int *handles;      /* ringcache: this reader's shard, in read order */
	uint64_t *sizes;
};

/* Sum of the 64-bit words (tail bytes shifted in): touches every byte at
 * memory speed and does not depend on how reads were split. */
static uint64_t word_sum(const uint8_t *p, size_t n, uint64_t off)
{
	uint64_t s = 0;
	size_t i = 0;
	/* Chunks start at multiples of 8 in the object, so words line up
	 * the same way whatever the chunk or extent size. */
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		s += w;
	}
	for (; i < n; i++)
		s += (uint64_t)p[i] << (8 * ((off + i) % 8));
	return s;
}

static void set_error(struct reader *r, const char *what, const char *key,
		      const char *why)
{
	r->res->errors++;
	if (!r->res->error[0])
		snprintf(r->res->error, sizeof(r->res->error), "%s %s: %s",
			 what, key, why);
}

static void note_bytes(struct reader *r, uint64_t n)
{
	if (n && r->res->first_byte_ns < 0)
		r->res->first_byte_ns = (int64_t)rc_now_ns() - r->t0;
	r->res->bytes += n;
}

static void record_latency(struct reader *r, int64_t started)
{
	if (r->n_lat > 0) {
		*r->lat++ = (int64_t)rc_now_ns() - started;
		r->n_lat--;
	}
}

/* Per-object checksum mixed so the total does not depend on order. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static void read_fs(struct reader *r, const struct object *o)
{
	char path[4096];
	int64_t started = (int64_t)rc_now_ns();
	snprintf(path, sizeof(path), "%s/%s", r->opt->dir, o->key);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		set_error(r, "open", o->key, strerror(errno));
		return;
	}
	uint64_t off = 0, sum = 0;
	for (;;) {
		ssize_t n = read(fd, r->buf, r->opt->chunk);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			set_error(r, "read", o->key, strerror(errno));
			break;
		}
		if (n == 0)
			break;
		sum += word_sum(r->buf, (size_t)n, off);
		off += (uint64_t)n;
		note_bytes(r, (uint64_t)n);
		record_latency(r, started);
		started = (int64_t)rc_now_ns();
	}
	close(fd);
	if (off != o->size)
		set_error(r, "size", o->key, "short object");
	r->res->checksum += mix(sum ^ o->size);
	r->res->files++;
}

/* One chunk through zero-copy READs; returns bytes or a negated errno. */
static int64_t read_rc_chunk(struct reader *r, int h, uint64_t off,
			     uint64_t len, uint64_t *sum)
{
	struct rc_extent ext[MAX_EXTENTS];
	int n = rc_read(&r->rc, (uint32_t)h, off, len, ext, MAX_EXTENTS);
	if (n < 0)
		return n;
	int64_t got = 0;
	for (int i = 0; i < n; i++) {
		*sum += word_sum(ext[i].data, ext[i].len, off + (uint64_t)got);
		got += ext[i].len;
		if (ext[i].lease != RC_NO_LEASE)
			rc_release(&r->rc, ext[i].lease);
	}
	return got;
}

/* Reads one object opened by open_shard; started is when its latency
 * clock began (the first object of the epoch also pays for the opens and
 * the plan). */
static void read_rc(struct reader *r, const struct object *o, int h,
		    uint64_t size, int64_t started)
{
	uint64_t off = 0, sum = 0;
	while (off < size) {
		uint64_t len = size - off < r->opt->chunk ? size - off
							  : r->opt->chunk;
		int64_t got = read_rc_chunk(r, h, off, len, &sum);
		if (got <= 0) {
			set_error(r, "read", o->key,
				  got < 0 ? rc_strerror((int)got) : "no bytes");
			break;
		}
		off += (uint64_t)got;
		note_bytes(r, (uint64_t)got);
		record_latency(r, started);
		started = (int64_t)rc_now_ns();
	}
	if (off != o->size)
		set_error(r, "size", o->key, "size differs from the key list");
	r->res->checksum += mix(sum ^ o->size);
	r->res->files++;
}

/* Opens this reader's whole shard up front, OPENs in flight together (a
 * cold OPEN is a HEAD to S3: one at a time would cost n round trips before
 * the first byte). Fills r->handles (negated errno on failure), r->sizes. */
static int open_shard(struct reader *r, const struct object *objs,
		      const size_t *shard, size_t n)
{
	const char **keys = malloc((n ? n : 1) * sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++)
		keys[k] = objs[shard[k]].key;
	int err = rc_open_many(&r->rc, r->ds, keys, n, r->handles, r->sizes);
	free(keys);
	return err;
}

/* Hands the daemon the order of this epoch's reads: one whole-object
 * entry per opened object, in a registered buffer. */
static int send_plan(struct reader *r, size_t n)
{
	if (n == 0)
		return 0; /* more readers than objects: nothing to plan */
	size_t len = (n * sizeof(struct rc_plan_entry) + 4095) & ~(size_t)4095;
	struct rc_plan_entry *plan;
	int buf = rc_alloc_buffer(&r->rc, len, (void **)&plan);
	if (buf < 0)
		return buf;
	uint64_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (r->handles[i] >= 0 && r->sizes[i] > 0)
			plan[k++] = (struct rc_plan_entry){
				.handle = (uint32_t)r->handles[i],
				.len = r->sizes[i],
			};
	int got = k ? rc_prefetch_plan(&r->rc, (uint32_t)buf, 0, k) : 0;
	if (got >= 0 && (uint64_t)got != k)
		got = -EPROTO;
	/* The daemon copied the plan: the buffer is no longer needed. */
	rc_unregister_buffer(&r->rc, (uint32_t)buf);
	munmap(plan, len);
	return got < 0 ? got : 0;
}

/* The ringcache epoch of one reader: open the shard, send the plan, read
 * in order. */
static void read_shard_rc(struct reader *r, const struct object *objs,
			  const size_t *shard, size_t n)
{
	int64_t started = (int64_t)rc_now_ns();
	r->handles = malloc(n * sizeof(*r->handles));
	r->sizes = calloc(n, sizeof(*r->sizes));
	int e = r->handles && r->sizes ? 0 : -ENOMEM;
	if (!e)
		e = open_shard(r, objs, shard, n);
	if (e < 0) {
		set_error(r, "open", "(shard)", rc_strerror(e));
		return;
	}
	if (r->opt->plan && (e = send_plan(r, n)) < 0)
		set_error(r, "plan", "(shard)", rc_strerror(e));
	for (size_t i = 0; i < n; i++) {
		const struct object *o = &objs[shard[i]];
		if (r->handles[i] < 0) {
			set_error(r, "open", o->key, rc_strerror(r->handles[i]));
			continue;
		}
		if (i > 0)
			started = (int64_t)rc_now_ns();
		read_rc(r, o, r->handles[i], r->sizes[i], started);
		rc_close(&r->rc, (uint32_t)r->handles[i]);
	}
}

/* LISTs each folder the shard's keys are in (its metadata goes into the
 * daemon's object table: the READ_KEYs that follow need no HEAD). */
static void list_folders(struct reader *r, const struct object *objs,
			 const size_t *shard, size_t n)
{
	enum { LIST_BUF = 1 << 20 };
	void *buf;
	int bi = rc_alloc_buffer(&r->rc, LIST_BUF, &buf);
	if (bi < 0) {
		set_error(r, "list", "(buffer)", rc_strerror(bi));
		return;
	}
	char done[8][256];
	int n_done = 0;
	for (size_t i = 0; i < n && n_done < 8; i++) {
		const char *key = objs[shard[i]].key, *slash = strrchr(key, '/');
		size_t len = slash ? (size_t)(slash - key) + 1 : 0;
		if (len >= sizeof(done[0]))
			continue;
		char dir[256];
		memcpy(dir, key, len);
		dir[len] = 0;
		bool seen = false;
		for (int k = 0; k < n_done && !seen; k++)
			seen = strcmp(done[k], dir) == 0;
		if (seen)
			continue;
		strcpy(done[n_done++], dir);
		int more = 1;
		for (uint64_t at = 0; more;) {
			int got = rc_list(&r->rc, r->ds, dir, at, (uint32_t)bi,
					  0, LIST_BUF, &more);
			if (got <= 0) {
				if (got < 0)
					set_error(r, "list", key,
						  rc_strerror(got));
				break;
			}
			at += (uint64_t)got;
		}
	}
	rc_unregister_buffer(&r->rc, (uint32_t)bi);
	munmap(buf, LIST_BUF);
}

#define BATCH_BYTES (32ull << 20) /* within max_leased_per_session */

/* A batch of READ_KEYs: objs[shard[from..to)], in flight once started. */
struct batch {
	size_t from, to;
	struct rc_read_req *q;
	struct rc_extent *ext;
	struct rc_read_batch *pending;
	int err;
};

static void batch_start(struct reader *r, const struct object *objs,
			const size_t *shard, struct batch *b)
{
	for (size_t k = b->from; k < b->to; k++)
		b->q[k - b->from] = (struct rc_read_req){
			.key = objs[shard[k]].key,
			.ext = b->ext + (k - b->from) * MAX_EXTENTS,
			.max_ext = MAX_EXTENTS};
	b->err = rc_read_many_start(&r->rc, r->ds, b->q, b->to - b->from,
				    &b->pending);
}

/* Every byte of a batch waited for (the next one in flight meanwhile);
 * started: when the reader wanted its first sample. */
static void batch_consume(struct reader *r, const struct object *objs,
			  const size_t *shard, const struct batch *b,
			  int64_t started)
{
	int e = b->err;
	for (size_t k = b->from; k < b->to; k++) {
		const struct object *o = &objs[shard[k]];
		struct rc_read_req *x = &b->q[k - b->from];
		if (e < 0 || x->res < 0) {
			set_error(r, "read", o->key,
				  rc_strerror(e < 0 ? e : (int)x->res));
			continue;
		}
		uint64_t sum = 0, off = 0;
		for (uint32_t j = 0; j < x->n_ext; j++) {
			sum += word_sum(x->ext[j].data, x->ext[j].len, off);
			off += x->ext[j].len;
			rc_release_lazy(&r->rc, x->ext[j].lease);
		}
		note_bytes(r, off);
		record_latency(r, started);
		started = (int64_t)rc_now_ns();
		if (off != o->size)
			set_error(r, "size", o->key,
				  "size differs from the key list");
		r->res->checksum += mix(sum ^ o->size);
		r->res->files++;
	}
}

/* The end of the batch starting at `at`: --batch samples, BATCH_BYTES. */
static size_t batch_end(const struct reader *r, const struct object *objs,
			const size_t *shard, size_t at, size_t n)
{
	uint64_t bytes = objs[shard[at]].size;
	size_t to = at + 1;
	for (; to < n && to - at < (size_t)r->opt->batch; to++) {
		bytes += objs[shard[to]].size;
		if (bytes > BATCH_BYTES)
			break;
	}
	return to;
}

/* The ringcache epoch of one reader: batches of READ_KEY entries, the
 * next one in flight while this one's bytes are summed. */
static void read_shard_batched(struct reader *r, const struct object *objs,
			       const size_t *shard, size_t n)
{
	size_t b = (size_t)r->opt->batch;
	struct batch two[2] = {{0}};
	for (int i = 0; i < 2; i++) {
		two[i].q = calloc(b, sizeof(*two[i].q));
		two[i].ext = calloc(b * MAX_EXTENTS, sizeof(*two[i].ext));
	}
	if (!two[0].q || !two[0].ext || !two[1].q || !two[1].ext) {
		set_error(r, "alloc", "(batch)", strerror(ENOMEM));
		n = 0;
	}
	if (n) {
		two[0].to = batch_end(r, objs, shard, 0, n);
		batch_start(r, objs, shard, &two[0]);
	}
	for (int cur = 0; two[cur].from < n; cur ^= 1) {
		struct batch *now = &two[cur], *next = &two[cur ^ 1];
		/* A sample's latency: from when the reader wanted it. */
		int64_t wanted = (int64_t)rc_now_ns();
		if (now->err >= 0)
			now->err = rc_read_many_wait(now->pending);
		if (!r->opt->pipeline)
			batch_consume(r, objs, shard, now, wanted);
		next->from = now->to; /* == n: the loop ends after this one */
		if (next->from < n) {
			next->to = batch_end(r, objs, shard, next->from, n);
			batch_start(r, objs, shard, next);
		}
		if (r->opt->pipeline)
			batch_consume(r, objs, shard, now, wanted);
	}
	for (int i = 0; i < 2; i++) {
		free(two[i].q);
		free(two[i].ext);
	}
}

static int reader_setup(struct reader *r)
{
	if (r->opt->backend == BACKEND_FS) {
		r->buf = malloc(r->opt->chunk);
		return r->buf ? 0 : -ENOMEM;
	}
	int e = rc_attach(&r->rc, r->opt->socket, NULL);
	if (e < 0)
		return e;
	if (r->opt->spin >= 0)
		r->rc.spin = (uint32_t)r->opt->spin;
	r->ds = rc_dataset(&r->rc, r->opt->dataset);
	return r->ds < 0 ? r->ds : 0;
}

/* The child: waits at the barrier (a pipe the parent closes), then reads
 * its shard of the permutation. */
static void reader_main(struct reader *r, const struct object *objs,
			const size_t *perm, size_t n, int index, int barrier)
{
	r->res->first_byte_ns = -1;
	int e = reader_setup(r);
	if (e < 0)
		set_error(r, "attach", r->opt->socket ? r->opt->socket : "",
			  rc_strerror(e));
	char c;
	while (read(barrier, &c, 1) < 0 && errno == EINTR)
		;
	close(barrier);
	r->t0 = *r->epoch_t0;
	/* This reader's shard: every Nth object of the epoch's order. */
	size_t n_mine = 0;
	size_t *shard = malloc((n / (size_t)r->opt->readers + 1) *
			       sizeof(*shard));
	for (size_t i = (size_t)index; shard && i < n;
	     i += (size_t)r->opt->readers)
		shard[n_mine++] = perm[i];
	if (!shard)
		set_error(r, "alloc", "", strerror(ENOMEM));
	else if (e >= 0 && r->opt->backend == BACKEND_RINGCACHE &&
		 r->opt->per_op)
		read_shard_rc(r, objs, shard, n_mine);
	else if (e >= 0 && r->opt->backend == BACKEND_RINGCACHE)
		read_shard_batched(r, objs, shard, n_mine);
	else if (e >= 0)
		for (size_t i = 0; i < n_mine; i++)
			read_fs(r, &objs[shard[i]]);
	r->res->end_ns = (int64_t)rc_now_ns() - r->t0;
	if (r->opt->backend == BACKEND_RINGCACHE && e >= 0)
		rc_detach(&r->rc);
	_exit(0);
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void make_order(size_t *perm, size_t n, const struct options *opt,
		       int epoch)
{
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	if (!opt->shuffled)
		return;
	uint64_t s = opt->seed * 0x9e3779b97f4a7c15ull + (uint64_t)epoch + 1;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)(rng_next(&s) % (i + 1));
		size_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

static size_t slots_of(const struct object *o, uint64_t chunk)
{
	return o->size ? (size_t)((o->size + chunk - 1) / chunk) : 1;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static double pct_ms(const int64_t *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return (double)v[i] / 1e6;
}

static void print_epoch(const struct options *opt, int epoch,
			struct epoch_shm *shm, size_t n_lat_total)
{
	struct reader_result sum = { .first_byte_ns = 0 };
	const char *err = "-";
	for (int i = 0; i < opt->readers; i++) {
		struct reader_result *x = &shm->res[i];
		sum.files += x->files;
		sum.bytes += x->bytes;
		sum.checksum += x->checksum;
		sum.errors += x->errors;
		/* Time to first byte: when the last reader got its first byte,
		 * i.e. when every GPU could start its first step. */
		if (x->first_byte_ns > sum.first_byte_ns)
			sum.first_byte_ns = x->first_byte_ns;
		if (x->end_ns > sum.end_ns)
			sum.end_ns = x->end_ns;
		if (x->error[0] && err[0] == '-')
			err = x->error;
	}
	size_t n = 0;
	for (size_t i = 0; i < n_lat_total; i++)
		if (shm->lat[i] > 0)
			shm->lat[n++] = shm->lat[i];
	qsort(shm->lat, n, sizeof(int64_t), cmp_i64);
	double secs = (double)sum.end_ns / 1e9;
	printf("%s\t%d\t%d\t%s\t%" PRIu64 "\t%" PRIu64 "\t%.3f\t%.1f\t%.1f"
	       "\t%.2f\t%.3f\t%.3f\t%016" PRIx64 "\t%" PRIu64 "\t%s\n",
	       opt->label, epoch, opt->readers,
	       opt->shuffled ? "shuffled" : "sequential", sum.files, sum.bytes,
	       secs, secs > 0 ? (double)sum.bytes / 1e6 / secs : 0,
	       secs > 0 ? (double)sum.files / secs : 0,
	       (double)sum.first_byte_ns / 1e6, pct_ms(shm->lat, n, 0.50),
	       pct_ms(shm->lat, n, 0.99), sum.checksum, sum.errors, err);
	fflush(stdout);
}

/* Forks the readers, releases them together, waits for all. */
static int run_epoch(const struct options *opt, const struct object *objs,
		     size_t n, int epoch)
{
	size_t *perm = malloc(n * sizeof(*perm));
	size_t *lat_off = calloc((size_t)opt->readers, sizeof(*lat_off));
	if (!perm || !lat_off)
		return -ENOMEM;
	make_order(perm, n, opt, epoch);
	size_t total = 0;
	for (int r = 0; r < opt->readers; r++) {
		lat_off[r] = total;
		for (size_t i = (size_t)r; i < n; i += (size_t)opt->readers)
			total += slots_of(&objs[perm[i]], opt->chunk);
	}
	size_t shm_len = sizeof(struct epoch_shm) + total * sizeof(int64_t);
	struct epoch_shm *shm = mmap(NULL, shm_len, PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int pipefd[2];
	if (shm == MAP_FAILED || pipe(pipefd) < 0)
		return -errno;
	for (int r = 0; r < opt->readers; r++) {
		pid_t pid = fork();
		if (pid < 0)
			return -errno;
		if (pid == 0) {
			close(pipefd[1]);
			size_t next = r + 1 < opt->readers ? lat_off[r + 1] : total;
			struct reader rd = {
				.opt = opt, .res = &shm->res[r],
				.lat = shm->lat + lat_off[r],
				.n_lat = next - lat_off[r],
				.epoch_t0 = &shm->t0, .epoch = epoch,
			};
			reader_main(&rd, objs, perm, n, r, pipefd[0]);
		}
	}
	close(pipefd[0]);
	/* --list: the loader's index, built once (by the parent, as a
	 * DataLoader's dataset object is) and timed as part of epoch 1. */
	struct reader lister = {.opt = opt, .res = &shm->res[0]};
	bool listing = opt->backend == BACKEND_RINGCACHE && !opt->per_op &&
		       opt->list && epoch == 1 &&
		       reader_setup(&lister) == 0;
	/* Give the readers time to attach before the clock starts: attaching
	 * is per process start-up, not per epoch. */
	usleep(100000);
	shm->t0 = (int64_t)rc_now_ns();
	if (getenv("RC_WORKLOAD_TIMES")) { /* to place it in a daemon's log */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		fprintf(stderr, "rc-workload: %s epoch %d began at %lld.%03ld\n",
			opt->label, epoch, (long long)ts.tv_sec,
			ts.tv_nsec / 1000000);
	}
	if (listing) {
		lister.t0 = shm->t0;
		list_folders(&lister, objs, perm, n);
		rc_detach(&lister.rc);
	}
	close(pipefd[1]);
	int failed = 0;
	for (int r = 0; r < opt->readers; r++) {
		int status;
		if (wait(&status) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			failed = 1;
	}
	print_epoch(opt, epoch, shm, total);
	munmap(shm, shm_len);
	free(perm);
	free(lat_off);
	return failed ? -ECHILD : 0;
}

/* "SIZE KEY" lines; keys are relative to the dataset or directory. */
static struct object *load_keys(const char *path, size_t *n_out)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	struct object *objs = NULL;
	size_t n = 0;
	uint32_t cap = 0;
	char line[RC_MAX_KEY + 64];
	while (fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');
		if (!sp)
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (RC_GROW(objs, cap, n + 1))
			break;
		objs[n].size = strtoull(line, NULL, 10);
		objs[n].key = strdup(sp + 1);
		n++;
	}
	fclose(f);
	*n_out = n;
	return objs;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rc-workload --keys FILE (--socket PATH --dataset NAME | --dir DIR)\n"
		"                   [--readers N] [--order sequential|shuffled]\n"
		"                   [--epochs E] [--seed S] [--chunk BYTES] [--label TEXT]\n"
		"                   [--batch N] [--no-pipeline] [--list]\n"
		"                   [--per-op [--no-plan]] [--spin N]\n"
		"  --keys FILE   lines \"SIZE KEY\", keys relative to the dataset or DIR\n"
		"  --socket, --dataset   read through ringcached: batches of samples, one\n"
		"                READ_KEY entry each, the next batch in flight while this\n"
		"                one is summed (rc_read_many_start), lazy releases\n"
		"  --batch N     ringcache: samples per batch (default 16; <= 32 MiB)\n"
		"  --no-pipeline ringcache: one batch at a time (rc_read_many)\n"
		"  --list        ringcache: epoch 1 starts with a LIST of the keys' folders\n"
		"  --per-op      ringcache: open the shard, send it as a prefetch plan, then\n"
		"                rc_read/rc_release/rc_close per object (the earlier path)\n"
		"  --no-plan     with --per-op: open the shard the same way, send no plan\n"
		"  --spin NS     ringcache: ns to poll the CQ before sleeping (latency studies)\n"
		"  --dir DIR     read DIR/KEY with open/read (local files, FUSE mounts)\n"
		"  --readers N   reader processes, each reads every Nth object (default 1)\n"
		"  --epochs E    epochs in a row, one output line each (default 1)\n"
		"  --chunk B     bytes per read call (default 4194304)\n"
		"output, one TSV line per epoch:\n"
		"  label epoch readers order files bytes secs mb_s files_s ttfb_ms\n"
		"  p50_ms p99_ms checksum errors first_error\n");
}

static int parse_options(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"keys", required_argument, NULL, 'k'},
		{"socket", required_argument, NULL, 's'},
		{"dataset", required_argument, NULL, 'd'},
		{"dir", required_argument, NULL, 'D'},
		{"readers", required_argument, NULL, 'r'},
		{"order", required_argument, NULL, 'o'},
		{"epochs", required_argument, NULL, 'e'},
		{"seed", required_argument, NULL, 'S'},
		{"chunk", required_argument, NULL, 'c'},
		{"label", required_argument, NULL, 'l'},
		{"no-plan", no_argument, NULL, 'P'},
		{"per-op", no_argument, NULL, 'O'},
		{"list", no_argument, NULL, 'L'},
		{"no-pipeline", no_argument, NULL, 'N'},
		{"batch", required_argument, NULL, 'b'},
		{"spin", required_argument, NULL, 'w'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	*o = (struct options){ .readers = 1, .epochs = 1, .seed = 1,
			       .chunk = 4u << 20, .label = "run",
			       .plan = true, .spin = -1, .batch = 16,
			       .pipeline = true };
	int c;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'k': o->keys_path = optarg; break;
		case 's': o->socket = optarg; break;
		case 'd': o->dataset = optarg; break;
		case 'D': o->dir = optarg; break;
		case 'r': o->readers = atoi(optarg); break;
		case 'e': o->epochs = atoi(optarg); break;
		case 'S': o->seed = strtoull(optarg, NULL, 0); break;
		case 'c': o->chunk = strtoull(optarg, NULL, 0); break;
		case 'l': o->label = optarg; break;
		case 'P': o->plan = false; break;
		case 'O': o->per_op = true; break;
		case 'L': o->list = true; break;
		case 'N': o->pipeline = false; break;
		case 'b': o->batch = atoi(optarg); break;
		case 'w': o->spin = strtol(optarg, NULL, 0); break;
		case 'o':
			if (strcmp(optarg, "shuffled") && strcmp(optarg, "sequential"))
				return -1;
			o->shuffled = strcmp(optarg, "shuffled") == 0;
			break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	o->backend = o->dir ? BACKEND_FS : BACKEND_RINGCACHE;
	if (optind != argc || !o->keys_path || (!o->dir == !o->dataset) ||
	    o->readers < 1 || o->readers > MAX_READERS || o->epochs < 1 ||
	    o->batch < 1 || o->batch > 256 ||
	    o->chunk < 4096 || o->chunk > RC_MAX_IO)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct options opt;
	if (parse_options(argc, argv, &opt) < 0) {
		usage(stderr);
		return 2;
	}
	size_t n = 0;
	struct object *objs = load_keys(opt.keys_path, &n);
	if (!objs || n == 0) {
		fprintf(stderr, "rc-workload: %s: no \"SIZE KEY\" lines\n",
			opt.keys_path);
		return 1;
	}
	int rc = 0;
	for (int e = 1; e <= opt.epochs && rc == 0; e++) {
		int r = run_epoch(&opt, objs, n, e);
		if (r < 0) {
			fprintf(stderr, "rc-workload: epoch %d: %s\n", e,
				strerror(-r));
			rc = 1;
		}
	}
	return rc;
}
