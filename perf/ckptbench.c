/* ckptbench.c - rc-ckptbench: the checkpoint writers of the benchmark
 * harness (issue 5).
 *
 * It owns the checkpoint save: N writer processes (one per GPU) each hold
 * one shard already in host memory (a deterministic pattern, filled before
 * the clock starts, as a shard copied off the GPU would be) and save it at
 * once, released together. Two back ends save the same bytes:
 *   daemon  through include/ringcache.h: WRITE_OPEN, WRITEs from a
 *           registered buffer, COMMIT (the writer is blocked until here),
 *           then SYNC (the bytes are in S3)
 *   direct  a synchronous multipart upload straight to S3 (upload_run; the FUSE
 *           practice): CreateMultipartUpload, --jobs parts in flight from
 *           the buffer, CompleteMultipartUpload; blocked == total
 * With --verify every object is then read back with a GET straight from
 * --verify-endpoint and compared byte for byte with the pattern; --delete
 * removes it afterwards (the memstore RGW holds objects in RAM).
 *
 * One TSV line to stdout: label writers bytes blocked_max_s blocked_med_s
 * total_s mb_s verified errors first_error. blocked is per writer, from its
 * first call (WRITE_OPEN / CreateMultipartUpload) to COMMIT acknowledged;
 * total is from the common release to the last byte in S3. */
#include <errno.h>
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
#include "creds.h"
#include "ringcache.h"
#include "s3.h"
#include "upload.h"
#include "../tools/upload_run.h"

#define MAX_WRITERS 64
#define MAX_JOBS 32

enum backend { BACKEND_DAEMON, BACKEND_DIRECT };

struct options {
	enum backend backend;
	const char *socket, *dataset, *endpoint, *verify_endpoint, *bucket;
	const char *s3_prefix;  /* the dataset's prefix in the bucket */
	const char *key_prefix; /* under it: this run's shards */
	const char *label;
	int writers, jobs;
	uint64_t size, chunk, part_size, seed;
	bool verify, delete_after;
};

/* What one writer reports back through shared memory. */
struct writer_result {
	int64_t start_ns, commit_ns, durable_ns; /* since the common release */
	int verified;                            /* 1 ok, 0 not checked, -1 bad */
	char error[160];
};

/* ------------------------------------------------------------ pattern */

/* Word i of shard `shard`: splitmix64, so every 8 bytes differ and a part
 * landing at the wrong offset or in the wrong object is caught. */
static uint64_t pattern_word(uint64_t seed, unsigned shard, uint64_t i)
{
	uint64_t x = i + seed * 0x9e3779b97f4a7c15ull + ((uint64_t)shard << 48);
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The pattern's bytes [off, off + len) into buf; off need not be aligned. */
static void pattern_fill(uint64_t seed, unsigned shard, uint64_t off,
			 uint8_t *buf, size_t len)
{
	size_t n = 0;
	while (n < len) {
		uint64_t pos = off + n, w = pattern_word(seed, shard, pos / 8);
		unsigned b = (unsigned)(pos % 8);
		if (b == 0 && len - n >= 8) {
			memcpy(buf + n, &w, 8);
			n += 8;
			continue;
		}
		for (; b < 8 && n < len; b++, n++)
			buf[n] = (uint8_t)(w >> (8 * b));
	}
}

/* ------------------------------------------------------------ S3 client */

static struct s3_client *s3_open(const char *endpoint,
				 struct creds_provider **creds_out)
{
	char err[256] = "";
	const char *ak = getenv("RINGCACHE_TEST_S3_ACCESS_KEY");
	const char *sk = getenv("RINGCACHE_TEST_S3_SECRET_KEY");
	const char *region = getenv("RINGCACHE_TEST_S3_REGION");
	struct creds_config cc = { .source = CREDS_CONFIG, .access_key = ak,
				   .secret_key = sk };
	struct creds_provider *creds = creds_provider_new(&cc, err, sizeof(err));
	if (!creds) {
		fprintf(stderr, "rc-ckptbench: credentials: %s\n", err);
		return NULL;
	}
	struct s3_config cfg = {
		.endpoint = endpoint,
		.region = region ? region : "us-east-1",
		.addressing = S3_PATH_STYLE,
		.tls_verify = strncmp(endpoint, "https:", 6) == 0,
		.connect_timeout_ms = 5000,
		.request_timeout_ms = 600000,
		.low_speed_time_s = 20,
		.max_retries = 3,
		.creds = creds,
	};
	struct s3_client *s3 = s3_client_new(&cfg, err, sizeof(err));
	if (!s3) {
		fprintf(stderr, "rc-ckptbench: %s\n", err);
		creds_provider_free(creds);
		return NULL;
	}
	*creds_out = creds;
	return s3;
}

/* ------------------------------------------------------ direct upload */

/* The synchronous save: upload_run returns once Complete has answered
 * (or the upload failed and was aborted). */
static int direct_upload(const struct options *o, struct s3_client *s3,
			 const char *key, const uint8_t *data, char *error,
			 size_t errlen)
{
	struct upload_params p = {
		.bucket = o->bucket, .key = key, .size = o->size, .data = data,
		.part_size = o->part_size, .concurrency = (unsigned)o->jobs,
		.multipart = true,
	};
	struct upload_outcome out;
	if (upload_run(s3, &p, NULL, &out) == 0)
		return 0;
	snprintf(error, errlen, "multipart upload: %s: HTTP %ld %.40s %.60s",
		 strerror(-out.err), out.http_status, out.code, out.message);
	return -1;
}

/* ------------------------------------------------------ daemon writer */

/* The save through ringcached; fills the commit and durable times. */
static int daemon_save(const struct options *o, struct rc_client *c, int ds,
		       const char *key, uint32_t buf_index, int64_t t0,
		       struct writer_result *res)
{
	int h = rc_write_open(c, ds, key);
	if (h < 0) {
		snprintf(res->error, sizeof(res->error), "write_open: %s", rc_strerror(h));
		return -1;
	}
	for (uint64_t off = 0; off < o->size; off += o->chunk) {
		uint64_t n = o->size - off < o->chunk ? o->size - off : o->chunk;
		ssize_t w = rc_write(c, (uint32_t)h, off, n, buf_index, off);
		if (w != (ssize_t)n) {
			snprintf(res->error, sizeof(res->error), "write at %" PRIu64 ": %s",
				 off, w < 0 ? rc_strerror((int)w) : "short write");
			return -1;
		}
	}
	int r = rc_commit(c, (uint32_t)h);
	res->commit_ns = (int64_t)rc_now_ns() - t0;
	if (r < 0) {
		snprintf(res->error, sizeof(res->error), "commit: %s", rc_strerror(r));
		return -1;
	}
	r = rc_sync(c, (uint32_t)h);
	res->durable_ns = (int64_t)rc_now_ns() - t0;
	if (r < 0) {
		snprintf(res->error, sizeof(res->error), "sync: %s", rc_strerror(r));
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ verify */

struct verify_ctx {
	uint64_t seed;
	unsigned shard;
	uint8_t *want;
	size_t want_len;
	bool bad;
};

static int verify_sink(void *ctx, uint64_t off, const void *data, size_t len)
{
	struct verify_ctx *v = ctx;
	if (len > v->want_len) {
		uint8_t *p = realloc(v->want, len);
		if (!p)
			return -1;
		v->want = p;
		v->want_len = len;
	}
	pattern_fill(v->seed, v->shard, off, v->want, len);
	if (memcmp(v->want, data, len) != 0)
		v->bad = true;
	return 0;
}

/* GET straight from the store (not timed): 1 the bytes match, -1 not. */
static int verify_object(const struct options *o, struct s3_client *s3,
			 const char *s3_key, unsigned shard, char *error,
			 size_t errlen)
{
	struct verify_ctx v = { .seed = o->seed, .shard = shard };
	struct s3_req_params p = { .op = S3_GET_OBJECT, .bucket = o->bucket,
				   .key = s3_key, .sink = verify_sink, .sink_ctx = &v };
	struct s3_result r;
	int rc = s3_perform(s3, &p, &r, NULL, NULL);
	free(v.want);
	if (rc < 0)
		snprintf(error, errlen, "verify GET %.80s: HTTP %ld %.40s", s3_key,
			 r.http_status, r.code);
	else if (r.body_bytes != o->size || v.bad)
		snprintf(error, errlen, "verify %.80s: %" PRIu64 " bytes, %s", s3_key,
			 r.body_bytes, v.bad ? "content differs" : "wrong size");
	else
		return 1;
	return -1;
}

static void delete_object(const struct options *o, struct s3_client *s3,
			  const char *s3_key)
{
	struct s3_req_params p = { .op = S3_DELETE_OBJECT, .bucket = o->bucket,
				   .key = s3_key };
	struct s3_result r;
	(void)s3_perform(s3, &p, &r, NULL, NULL);
}

/* ------------------------------------------------------------ writers */

/* Shard buffer: registered with the daemon, or plain memory for direct. */
static uint8_t *shard_buffer(const struct options *o, struct rc_client *c,
			     int *buf_index, char *error, size_t errlen)
{
	void *p = NULL;
	if (o->backend == BACKEND_DAEMON) {
		*buf_index = rc_alloc_buffer(c, o->size, &p);
		if (*buf_index < 0) {
			snprintf(error, errlen, "alloc_buffer: %s", rc_strerror(*buf_index));
			return NULL;
		}
	} else if ((p = malloc(o->size)) == NULL) {
		snprintf(error, errlen, "out of memory");
	}
	return p;
}

/* Waits for the parent's release: EOF on the go pipe. */
static void wait_release(int go_fd)
{
	char b;
	while (read(go_fd, &b, 1) > 0)
		;
}

static void writer_main(const struct options *o, unsigned shard, int ready_fd,
			int go_fd, const int64_t *t0, struct writer_result *res)
{
	struct rc_client c;
	struct s3_client *s3 = NULL, *vs3 = NULL;
	struct creds_provider *creds = NULL, *vcreds = NULL;
	int ds = -1, buf_index = -1, r;
	char key[512], s3_key[1024];
	uint8_t *buf = NULL;
	bool attached = false;

	snprintf(key, sizeof(key), "%sshard-%02u.bin", o->key_prefix, shard);
	snprintf(s3_key, sizeof(s3_key), "%s%s", o->s3_prefix, key);
	if (o->backend == BACKEND_DAEMON) {
		if ((r = rc_attach(&c, o->socket, NULL)) < 0)
			snprintf(res->error, sizeof(res->error), "attach: %s", rc_strerror(r));
		else if (attached = true, (ds = rc_dataset(&c, o->dataset)) < 0)
			snprintf(res->error, sizeof(res->error), "dataset: %s", rc_strerror(ds));
	} else {
		s3 = s3_open(o->endpoint, &creds);
		if (!s3)
			snprintf(res->error, sizeof(res->error), "s3 client");
	}
	if (!res->error[0])
		buf = shard_buffer(o, &c, &buf_index, res->error, sizeof(res->error));
	if (buf)
		pattern_fill(o->seed, shard, 0, buf, o->size);
	/* Ready even on failure: the parent must not wait forever. */
	if (write(ready_fd, "r", 1) != 1)
		_exit(1);
	close(ready_fd);
	wait_release(go_fd);
	if (buf) {
		res->start_ns = (int64_t)rc_now_ns() - *t0;
		if (o->backend == BACKEND_DAEMON) {
			daemon_save(o, &c, ds, key, (uint32_t)buf_index, *t0, res);
		} else if (direct_upload(o, s3, s3_key, buf, res->error,
					 sizeof(res->error)) == 0) {
			res->commit_ns = res->durable_ns = (int64_t)rc_now_ns() - *t0;
		}
	}
	if (o->verify && !res->error[0] && (vs3 = s3_open(o->verify_endpoint, &vcreds)))
		res->verified = verify_object(o, vs3, s3_key, shard, res->error,
					      sizeof(res->error));
	if (o->delete_after && (vs3 || (vs3 = s3_open(o->verify_endpoint, &vcreds))))
		delete_object(o, vs3, s3_key);
	if (attached)
		rc_detach(&c);
	_exit(res->error[0] ? 1 : 0);
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Forks the writers, releases them together, prints the summary line. */
static int run_writers(const struct options *o)
{
	size_t shm_len = sizeof(int64_t) + sizeof(struct writer_result) * (size_t)o->writers;
	uint8_t *shm = mmap(NULL, shm_len, PROT_READ | PROT_WRITE,
			    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int ready[2], go[2];
	if (shm == MAP_FAILED || pipe(ready) < 0 || pipe(go) < 0) {
		perror("rc-ckptbench");
		return 1;
	}
	memset(shm, 0, shm_len);
	int64_t *t0 = (int64_t *)shm;
	struct writer_result *res = (struct writer_result *)(shm + sizeof(int64_t));
	pid_t pids[MAX_WRITERS];
	for (int i = 0; i < o->writers; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("rc-ckptbench: fork");
			return 1;
		}
		if (pids[i] == 0) {
			close(ready[0]);
			close(go[1]);
			writer_main(o, (unsigned)i, ready[1], go[0], t0, &res[i]);
		}
	}
	close(ready[1]);
	close(go[0]);
	char b;
	for (int got = 0; got < o->writers && read(ready[0], &b, 1) == 1; got++)
		;
	*t0 = (int64_t)rc_now_ns();
	close(go[1]); /* the release */
	for (int i = 0; i < o->writers; i++)
		waitpid(pids[i], NULL, 0);

	int64_t blocked[MAX_WRITERS], total = 0;
	int errors = 0, verified = 0;
	const char *first_error = "-";
	for (int i = 0; i < o->writers; i++) {
		blocked[i] = res[i].commit_ns - res[i].start_ns;
		if (res[i].durable_ns > total)
			total = res[i].durable_ns;
		verified += res[i].verified == 1;
		if (res[i].error[0] && errors++ == 0)
			first_error = res[i].error;
	}
	qsort(blocked, (size_t)o->writers, sizeof(blocked[0]), cmp_i64);
	double bytes = (double)o->size * o->writers;
	printf("%s\t%d\t%.0f\t%.3f\t%.3f\t%.3f\t%.1f\t%s\t%d\t%s\n", o->label,
	       o->writers, bytes, blocked[o->writers - 1] / 1e9,
	       blocked[(o->writers - 1) / 2] / 1e9, total / 1e9,
	       total > 0 ? bytes / 1e6 / (total / 1e9) : 0.0,
	       !o->verify ? "-" : verified == o->writers ? "ok" : "FAIL", errors,
	       first_error);
	munmap(shm, shm_len);
	return errors ? 1 : 0;
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rc-ckptbench daemon --socket S --dataset D [options]\n"
		"       rc-ckptbench direct --endpoint URL [options]\n"
		"  --bucket B          the bucket (verify, direct)\n"
		"  --s3-prefix P       the dataset's prefix in the bucket\n"
		"  --key-prefix K      this run's shards: K shard-NN.bin under P\n"
		"  --writers N         writer processes (8)\n"
		"  --size BYTES        one shard (64M)\n"
		"  --chunk BYTES       daemon: bytes per WRITE (8M)\n"
		"  --part-size BYTES   direct: multipart part size (8M)\n"
		"  --jobs J            direct: parts in flight per writer (4)\n"
		"  --seed S            pattern seed (1)\n"
		"  --verify            GET every object back and compare\n"
		"  --verify-endpoint URL  (default $RINGCACHE_TEST_S3_ENDPOINT)\n"
		"  --delete            delete the objects afterwards\n"
		"  --label L           first column of the output line\n");
}

static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || s[0] == '-')
		return -1;
	unsigned shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (*end || v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "dataset", required_argument, NULL, 'd' },
		{ "endpoint", required_argument, NULL, 'e' },
		{ "verify-endpoint", required_argument, NULL, 'E' },
		{ "bucket", required_argument, NULL, 'b' },
		{ "s3-prefix", required_argument, NULL, 'p' },
		{ "key-prefix", required_argument, NULL, 'k' },
		{ "writers", required_argument, NULL, 'w' },
		{ "size", required_argument, NULL, 'z' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "part-size", required_argument, NULL, 'P' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "seed", required_argument, NULL, 'S' },
		{ "verify", no_argument, NULL, 'v' },
		{ "delete", no_argument, NULL, 'D' },
		{ "label", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	bool bad = false;

	if (argc < 2 || (strcmp(argv[1], "daemon") != 0 && strcmp(argv[1], "direct") != 0))
		return -1;
	o->backend = strcmp(argv[1], "daemon") == 0 ? BACKEND_DAEMON : BACKEND_DIRECT;
	optind = 2;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': o->socket = optarg; break;
		case 'd': o->dataset = optarg; break;
		case 'e': o->endpoint = optarg; break;
		case 'E': o->verify_endpoint = optarg; break;
		case 'b': o->bucket = optarg; break;
		case 'p': o->s3_prefix = optarg; break;
		case 'k': o->key_prefix = optarg; break;
		case 'w': o->writers = atoi(optarg); break;
		case 'z': bad |= parse_bytes(optarg, &o->size) < 0; break;
		case 'c': bad |= parse_bytes(optarg, &o->chunk) < 0; break;
		case 'P': bad |= parse_bytes(optarg, &o->part_size) < 0; break;
		case 'j': o->jobs = atoi(optarg); break;
		case 'S': o->seed = strtoull(optarg, NULL, 10); break;
		case 'v': o->verify = true; break;
		case 'D': o->delete_after = true; break;
		case 'l': o->label = optarg; break;
		case 'h': usage(stdout); exit(0);
		default: return -1;
		}
	}
	if (bad || optind != argc || o->writers < 1 || o->writers > MAX_WRITERS ||
	    o->jobs < 1 || o->jobs > MAX_JOBS || o->size == 0 || o->chunk == 0 ||
	    o->part_size < (5u << 20))
		return -1;
	if (o->backend == BACKEND_DAEMON && (!o->socket || !o->dataset))
		return -1;
	if (o->backend == BACKEND_DIRECT && (!o->endpoint || !o->bucket))
		return -1;
	if ((o->verify || o->delete_after) && (!o->verify_endpoint || !o->bucket))
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct options o = { .writers = 8, .jobs = 4, .size = 64u << 20,
			     .chunk = 8u << 20, .part_size = 8u << 20, .seed = 1,
			     .s3_prefix = "", .key_prefix = "",
			     .verify_endpoint = getenv("RINGCACHE_TEST_S3_ENDPOINT") };
	if (parse_args(argc, argv, &o) < 0) {
		usage(stderr);
		return 2;
	}
	if (!o.label)
		o.label = o.backend == BACKEND_DAEMON ? o.dataset : "direct";
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = run_writers(&o);
	curl_global_cleanup();
	return rc;
}
