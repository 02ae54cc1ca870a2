/* bulkcopy.c - rc-bulkcopy: the "copy the dataset first" baseline, the way
 * s5cmd does it before training starts.
 *
 * It owns: listing a prefix (ListObjectsV2, every page), then downloading
 * every object with whole-object GETs, J at a time on one curl multi
 * handle, each straight into DIR/<key relative to the prefix>. Requests are
 * signed by the project's SigV4 code (src/s3/s3.h), so the server checks them
 * for real. A retryable failure is retried a few times, as s5cmd does.
 *
 * Output: one TSV line (columns in perf/README.md). Its secs column is the
 * time before training could start on local copies. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "s3.h"
#include "bench.h"
#include "vec.h"

#define MAX_ATTEMPTS 4

struct object {
	char *key;     /* full S3 key */
	uint64_t size;
	unsigned attempts;
};

struct transfer {
	struct object *obj;
	struct s3_req *req;
	int fd;
};

struct copy {
	struct s3_client *s3;
	const char *bucket, *prefix, *dir;
	struct object *objs;
	size_t n, next;          /* next: first object not yet started */
	uint32_t cap;
	uint64_t bytes, errors;
	double t0;
	char error[256];
};

static int add_object(struct copy *c, const char *key, uint64_t size)
{
	if (RC_GROW(c->objs, c->cap, c->n + 1))
		return -ENOMEM;
	c->objs[c->n] = (struct object){ .key = strdup(key), .size = size };
	return c->objs[c->n++].key ? 0 : -ENOMEM;
}

static int list_prefix(struct copy *c)
{
	char *token = NULL;
	for (;;) {
		struct s3_req_params p = { .op = S3_LIST_OBJECTS_V2,
					   .bucket = c->bucket,
					   .prefix = c->prefix,
					   .continuation_token = token };
		struct s3_result r;
		struct s3_list_page pg;
		char *body = NULL, err[256] = "";
		size_t len = 0;
		if (s3_perform(c->s3, &p, &r, &body, &len) < 0) {
			fprintf(stderr, "rc-bulkcopy: list: http %ld %s %s\n",
				r.http_status, r.code, r.message);
			free(body);
			return -1;
		}
		int prc = s3_parse_list(body, len, &pg, err, sizeof(err));
		free(body);
		free(token);
		token = NULL;
		if (prc < 0) {
			fprintf(stderr, "rc-bulkcopy: list: %s\n", err);
			return -1;
		}
		for (size_t i = 0; i < pg.n_objects; i++)
			if (add_object(c, pg.objects[i].key, pg.objects[i].size) < 0)
				return -1;
		bool more = pg.truncated && pg.next_token;
		if (more)
			token = strdup(pg.next_token);
		s3_list_page_free(&pg);
		if (!more)
			return 0;
	}
}

/* mkdir -p of the directories above path. */
static int make_parents(char *path)
{
	for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		int r = mkdir(path, 0755);
		*s = '/';
		if (r < 0 && errno != EEXIST)
			return -errno;
	}
	return 0;
}

static int sink(void *ctx, uint64_t off, const void *data, size_t len)
{
	struct transfer *t = ctx;
	return pwrite(t->fd, data, len, (off_t)off) == (ssize_t)len ? 0 : -1;
}

static struct transfer *start_one(struct copy *c, CURLM *multi,
				  struct object *o)
{
	char path[4096], err[256];
	snprintf(path, sizeof(path), "%s/%s", c->dir,
		 o->key + strlen(c->prefix));
	struct transfer *t = calloc(1, sizeof(*t));
	if (!t || make_parents(path) < 0 ||
	    (t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			  0644)) < 0) {
		fprintf(stderr, "rc-bulkcopy: %s: %s\n", path, strerror(errno));
		free(t);
		return NULL;
	}
	t->obj = o;
	o->attempts++;
	struct s3_req_params p = { .op = S3_GET_OBJECT, .bucket = c->bucket,
				   .key = o->key, .sink = sink, .sink_ctx = t };
	t->req = s3_req_new(c->s3, &p, err, sizeof(err));
	if (!t->req) {
		fprintf(stderr, "rc-bulkcopy: %s: %s\n", o->key, err);
		close(t->fd);
		free(t);
		return NULL;
	}
	s3_req_set_private(t->req, t);
	curl_multi_add_handle(multi, s3_req_easy(t->req));
	return t;
}

static struct transfer *transfer_of(CURL *easy)
{
	struct s3_req *req;
	curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&req);
	return s3_req_get_private(req);
}

/* Returns true if the object must be fetched again. */
static bool finish_one(struct copy *c, CURLM *multi, CURL *easy,
		       CURLcode code)
{
	struct transfer *t = transfer_of(easy);
	struct s3_req *req = t->req;
	struct s3_result r;
	s3_req_result(req, code, &r);
	curl_multi_remove_handle(multi, easy);
	bool ok = r.err == 0 && r.body_bytes == t->obj->size;
	bool retry = !ok && r.retryable && t->obj->attempts < MAX_ATTEMPTS;
	if (ok)
		c->bytes += r.body_bytes;
	else if (!retry) {
		c->errors++;
		if (!c->error[0])
			snprintf(c->error, sizeof(c->error), "%.100s: http %ld %.32s %.60s",
				 t->obj->key, r.http_status, r.code, r.message);
	}
	close(t->fd);
	s3_req_free(req);
	free(t);
	return retry;
}

static int download_all(struct copy *c, int jobs)
{
	CURLM *multi = curl_multi_init();
	struct object **retry = calloc(c->n ? c->n : 1, sizeof(*retry));
	size_t n_retry = 0;
	int running = 0, active = 0;
	if (!multi || !retry)
		return -1;
	c->t0 = rc_now_s();
	for (;;) {
		while (active < jobs && (n_retry || c->next < c->n)) {
			struct object *o = n_retry ? retry[--n_retry]
						   : &c->objs[c->next++];
			if (!start_one(c, multi, o))
				c->errors++;
			else
				active++;
		}
		if (active == 0)
			break;
		curl_multi_perform(multi, &running);
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			CURL *easy = m->easy_handle;
			struct object *obj = transfer_of(easy)->obj;
			if (finish_one(c, multi, easy, m->data.result))
				retry[n_retry++] = obj;
			active--;
		}
		curl_multi_poll(multi, NULL, 0, 100, NULL);
	}
	curl_multi_cleanup(multi);
	free(retry);
	return 0;
}

static const char *env(const char *name, const char *fallback)
{
	const char *v = getenv(name);
	return v && *v ? v : fallback;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rc-bulkcopy [--endpoint URL] [--jobs J] [--label TEXT]\n"
		"                   BUCKET PREFIX DIR\n"
		"  downloads every object under PREFIX into DIR (key minus PREFIX),\n"
		"  J whole-object GETs at a time (default 32). Credentials and the\n"
		"  default endpoint from RINGCACHE_TEST_S3_{ENDPOINT,REGION,\n"
		"  ACCESS_KEY,SECRET_KEY}.\n"
		"output, one TSV line:\n"
		"  label objects bytes secs mb_s files_s errors first_error\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"endpoint", required_argument, NULL, 'e'},
		{"jobs", required_argument, NULL, 'j'},
		{"label", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	const char *endpoint = env("RINGCACHE_TEST_S3_ENDPOINT", NULL);
	const char *label = "bulk";
	int jobs = 32, o;
	while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (o) {
		case 'e': endpoint = optarg; break;
		case 'j': jobs = atoi(optarg); break;
		case 'l': label = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 3 || jobs < 1 || !endpoint) {
		usage(stderr);
		return 2;
	}
	struct copy c = { .bucket = argv[optind], .prefix = argv[optind + 1],
			  .dir = argv[optind + 2] };
	char err[256] = "";
	struct creds_config cc = {
		.source = CREDS_CONFIG,
		.access_key = env("RINGCACHE_TEST_S3_ACCESS_KEY", NULL),
		.secret_key = env("RINGCACHE_TEST_S3_SECRET_KEY", NULL),
	};
	struct creds_provider *creds = creds_provider_new(&cc, err, sizeof(err));
	if (!creds) {
		fprintf(stderr, "rc-bulkcopy: credentials: %s\n", err);
		return 1;
	}
	struct s3_config cfg = {
		.endpoint = endpoint,
		.region = env("RINGCACHE_TEST_S3_REGION", "us-east-1"),
		.addressing = S3_PATH_STYLE,
		.tls_verify = strncmp(endpoint, "https:", 6) == 0,
		.connect_timeout_ms = 5000,
		.request_timeout_ms = 600000,
		.low_speed_time_s = 20,
		.max_retries = 3,
		.creds = creds,
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	c.s3 = s3_client_new(&cfg, err, sizeof(err));
	if (!c.s3) {
		fprintf(stderr, "rc-bulkcopy: %s\n", err);
		return 1;
	}
	if (list_prefix(&c) < 0 || download_all(&c, jobs) < 0)
		return 1;
	double secs = rc_now_s() - c.t0;
	printf("%s\t%zu\t%" PRIu64 "\t%.3f\t%.1f\t%.1f\t%" PRIu64 "\t%s\n",
	       label, c.n, c.bytes, secs, (double)c.bytes / 1e6 / secs,
	       (double)c.n / secs, c.errors, c.error[0] ? c.error : "-");
	for (size_t i = 0; i < c.n; i++)
		free(c.objs[i].key);
	free(c.objs);
	s3_client_free(c.s3);
	creds_provider_free(creds);
	curl_global_cleanup();
	return c.errors ? 1 : 0;
}
