/* allocbench.c - rc-allocbench: the allocator under ringcached's own
 * small-object churn, without a network: threads build and free signed
 * S3 requests (req: a GET; put: an UploadPart, plus the 64 KiB upload
 * buffer libcurl allocates for each upload it performs; s3_req_new: a
 * curl easy handle, its header list, URL and buffers; SigV4) and decode and free ListObjectsV2 pages of 1000 keys
 * (s3_parse_list: a string per key, a growing array), each thread keeping
 * its last LIST_KEEP pages as the listing cache does. It prints one line,
 * "MODE THREADS OPS_PER_CPU_S OPS_PER_S RSS_MIB IDLE_RSS_MIB": operations
 * per second of the process's CPU time (all its threads, the allocator's
 * own included), which a machine shared with other work disturbs far
 * less than the wall-clock rate beside it; then the resident size once
 * every thread has freed everything and exited, and again after --idle
 * seconds of doing nothing (what an idle daemon gives back). perf/allocbench.sh runs it linked
 * against each allocator (rc-allocbench: jemalloc as ringcached is
 * configured, src/common/alloc.c; rc-allocbench-libc: glibc malloc).
 *
 * Usage: rc-allocbench req|put|list [--threads N] [--seconds S] [--idle S] */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "creds.h"
#include "s3.h"

#define LIST_KEEP 32

/* libcurl's UPLOADBUFFER_DEFAULT: what each PUT or UploadPart it
 * performs allocates, and frees with the handle. */
#define CURL_UPLOAD_BUF (64u << 10)

enum mode { MODE_REQ, MODE_PUT, MODE_LIST };

struct bench {
	enum mode mode;
	double seconds, idle;
	struct s3_client *s3;
	char *page;          /* the canned ListObjectsV2 page */
	size_t page_len;
};

struct worker {
	pthread_t thread;
	const struct bench *b;
	unsigned id;
	uint64_t ops;
	int err;
	struct s3_list_page kept[LIST_KEEP]; /* the last pages, by ops */
};

/* A ListObjectsV2 page as RGW sends one: 1000 keys of ~40 bytes. */
static char *make_page(size_t *len)
{
	size_t cap = 1000 * 256 + 512, n = 0;
	char *p = malloc(cap);

	if (!p)
		return NULL;
	n += (size_t)snprintf(p + n, cap - n,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult "
		"xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
		"<Prefix>ds/</Prefix><KeyCount>1000</KeyCount>"
		"<IsTruncated>false</IsTruncated>");
	for (unsigned i = 0; i < 1000; i++)
		n += (size_t)snprintf(p + n, cap - n,
			"<Contents><Key>ds/train/shard-%05u/sample-%08u.jpg</Key>"
			"<Size>%u</Size><ETag>&quot;%032x&quot;</ETag>"
			"<StorageClass>STANDARD</StorageClass></Contents>",
			i / 100, i, 500000 + i, i * 2654435761u);
	n += (size_t)snprintf(p + n, cap - n, "</ListBucketResult>");
	*len = n;
	return p;
}

static int one_req(const struct bench *b, unsigned id, uint64_t i)
{
	char key[96], err[256];
	struct s3_req_params p = {
		.op = S3_GET_OBJECT, .bucket = "ringcache-bench", .key = key,
		.range_off = (i % 64) << 20, .range_len = 1 << 20,
	};
	snprintf(key, sizeof(key), "ds/train/shard-%05u/sample-%08" PRIu64
		 ".jpg", id, i % 100000);
	struct s3_req *r = s3_req_new(b->s3, &p, err, sizeof(err));
	if (!r) {
		fprintf(stderr, "rc-allocbench: %s\n", err);
		return -EINVAL;
	}
	s3_req_free(r);
	return 0;
}

static int one_put(const struct bench *b, unsigned id, uint64_t i)
{
	static const char body[1024];
	char key[96], err[256];
	struct s3_req_params p = {
		.op = S3_UPLOAD_PART, .bucket = "ringcache-bench", .key = key,
		.upload_id = "2~bench", .part_number = (unsigned)(i % 10000) + 1,
		.body = body, .body_len = sizeof(body),
		.content_md5_value = "DMF1ucDxtqgxw5niaXcmYQ==",
		.payload_sha256 = "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
	};
	snprintf(key, sizeof(key), "ckpt/step-%05u/shard-%08" PRIu64, id, i);
	struct s3_req *r = s3_req_new(b->s3, &p, err, sizeof(err));
	char *ulbuf = malloc(CURL_UPLOAD_BUF);
	if (!r || !ulbuf) {
		fprintf(stderr, "rc-allocbench: %s\n", r ? "no memory" : err);
		s3_req_free(r);
		free(ulbuf);
		return -EINVAL;
	}
	memcpy(ulbuf, body, sizeof(body));
	free(ulbuf);
	s3_req_free(r);
	return 0;
}

static int one_list(const struct bench *b, struct s3_list_page *pg)
{
	char err[256];
	int rc;

	s3_list_page_free(pg);
	rc = s3_parse_list(b->page, b->page_len, pg, err, sizeof(err));
	if (rc == 0 && pg->n_objects != 1000)
		rc = -EPROTO;
	if (rc)
		fprintf(stderr, "rc-allocbench: list page: %s\n", err);
	return rc;
}

static int one_op(struct worker *w)
{
	switch (w->b->mode) {
	case MODE_REQ:
		return one_req(w->b, w->id, w->ops);
	case MODE_PUT:
		return one_put(w->b, w->id, w->ops);
	case MODE_LIST:
		break;
	}
	return one_list(w->b, &w->kept[w->ops % LIST_KEEP]);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	double end = rc_now_s() + w->b->seconds;

	while (!w->err && rc_now_s() < end) {
		for (unsigned k = 0; k < 16 && !w->err; k++, w->ops++)
			w->err = one_op(w);
	}
	for (unsigned i = 0; i < LIST_KEEP; i++)
		s3_list_page_free(&w->kept[i]);
	return NULL;
}

static int run(struct bench *b, unsigned threads, uint64_t *ops)
{
	struct worker *w = calloc(threads, sizeof(*w));
	unsigned started = 0;
	int rc = 0;

	if (!w)
		return -ENOMEM;
	for (; started < threads; started++) {
		w[started] = (struct worker){ .b = b, .id = started };
		if (pthread_create(&w[started].thread, NULL, worker_main,
				   &w[started])) {
			rc = -EAGAIN;
			break;
		}
	}
	*ops = 0;
	for (unsigned i = 0; i < started; i++) {
		pthread_join(w[i].thread, NULL);
		*ops += w[i].ops;
		if (w[i].err)
			rc = w[i].err;
	}
	free(w);
	return rc;
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Resident size in MiB (/proc/self/statm), or -1. */
static double rss_mib(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	unsigned long size, resident;
	int n = f ? fscanf(f, "%lu %lu", &size, &resident) : 0;

	if (f)
		fclose(f);
	return n == 2 ? (double)resident * 4096.0 / (1 << 20) : -1;
}

static void idle_for(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int parse_args(int argc, char **argv, struct bench *b,
		      unsigned *threads)
{
	static const char *const names[] = { "req", "put", "list" };
	unsigned m = 0;

	while (argc >= 2 && m < 3 && strcmp(argv[1], names[m]))
		m++;
	if (argc < 2 || m == 3)
		return -1;
	b->mode = (enum mode)m;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--threads"))
			*threads = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			b->seconds = strtod(argv[i + 1], NULL);
		else if (!strcmp(argv[i], "--idle"))
			b->idle = strtod(argv[i + 1], NULL);
		else
			return -1;
	}
	return *threads && b->seconds > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct bench b = { .seconds = 3 };
	unsigned threads = 2;
	uint64_t ops = 0;
	char err[256];

	if (parse_args(argc, argv, &b, &threads) < 0) {
		fprintf(stderr, "usage: rc-allocbench req|put|list [--threads N] "
			"[--seconds S]\n");
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	struct creds_config cc = { .source = CREDS_CONFIG,
		.access_key = "AKIDEXAMPLE",
		.secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" };
	struct creds_provider *cp = creds_provider_new(&cc, err, sizeof(err));
	struct s3_config sc = { .endpoint = "http://127.0.0.1:9",
				.region = "us-east-1", .creds = cp };
	b.s3 = cp ? s3_client_new(&sc, err, sizeof(err)) : NULL;
	b.page = make_page(&b.page_len);
	if (!b.s3 || !b.page) {
		fprintf(stderr, "rc-allocbench: %s\n", b.page ? err : "no memory");
		return 1;
	}
	double t0 = rc_now_s(), c0 = cpu_s();
	int rc = run(&b, threads, &ops);
	double dt = rc_now_s() - t0, dc = cpu_s() - c0;
	double rss = rss_mib();
	idle_for(b.idle);
	if (rc == 0)
		printf("%s %u %.0f %.0f %.1f %.1f\n", argv[1], threads,
		       (double)ops / dc, (double)ops / dt, rss, rss_mib());
	s3_client_free(b.s3);
	creds_provider_free(cp);
	free(b.page);
	curl_global_cleanup();
	return rc ? 1 : 0;
}
