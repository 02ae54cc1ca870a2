/* s3tool.c - `rc-s3`, a small S3 client for scripts and tests. It owns
 * command-line parsing and the parallel dataset upload/verify driver; every
 * request goes through s3.c (real SigV4), so using the tool exercises the
 * same code the daemon runs.
 *
 *   rc-s3 [global options] COMMAND ARGS...
 * Exit status 0 on success, 1 on any failure (details on stderr). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "creds.h"
#include "s3.h"
#include "upload_run.h"
#include "dataset.h"
#include "vec.h"

#define MAX_ARGS 8
#define DEFAULT_JOBS 16
#define MAX_JOBS 256
#define DEFAULT_MPU_JOBS 4
#define MAX_PART_SIZE (5ull << 30)

struct options {
	const char *endpoint, *region, *access_key, *secret_key, *session_token;
	enum s3_addressing addressing;
	bool no_verify_tls;
	/* command options */
	const char *range, *delimiter, *part_size;
	size_t n_small;
	uint64_t seed;
	unsigned jobs;
	bool jobs_given;
	/* positionals: COMMAND ARGS... */
	const char *args[MAX_ARGS];
	int n_args;
};

struct tool {
	struct options opt;
	struct creds_provider *creds;
	struct s3_client *s3;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rc-s3 [options] COMMAND ARGS...\n"
		"commands:\n"
		"  mb BUCKET                         create a bucket (ok if already ours)\n"
		"  put BUCKET KEY FILE|-             upload a file or stdin\n"
		"  get BUCKET KEY [--range A-B] [FILE|-]   download (default stdout)\n"
		"  head BUCKET KEY                   print size and ETag\n"
		"  ls BUCKET [PREFIX] [--delimiter D]      list every page: SIZE ETAG KEY\n"
		"  rm BUCKET KEY                     delete an object\n"
		"  gen-dataset BUCKET PREFIX [--small N] [--seed S] [--jobs J]\n"
		"  verify-dataset BUCKET PREFIX [--small N] [--seed S] [--jobs J]\n"
		"  mpu-put BUCKET KEY FILE [--part-size 5M] [--jobs 4]\n"
		"                                    multipart upload, parts in parallel\n"
		"  mpu-ls BUCKET [PREFIX]            unfinished uploads: INITIATED ID KEY\n"
		"  mpu-abort BUCKET KEY UPLOADID     abort an unfinished upload\n"
		"  cp BUCKET SRC DST                 server-side copy, prints the ETag\n"
		"options (defaults from RINGCACHE_TEST_S3_{ENDPOINT,REGION,ACCESS_KEY,\n"
		"SECRET_KEY}, else AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID...):\n"
		"  --endpoint URL --region R --access-key K --secret-key S\n"
		"  --path-style (default) | --virtual    --no-verify-tls\n");
}

static const char *env_first(const char *a, const char *b, const char *c)
{
	const char *names[] = { a, b, c };
	for (int i = 0; i < 3; i++) {
		const char *v = names[i] ? getenv(names[i]) : NULL;
		if (v && *v)
			return v;
	}
	return NULL;
}

static void options_from_env(struct options *o)
{
	o->endpoint = env_first("RINGCACHE_TEST_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3",
				"AWS_ENDPOINT_URL");
	o->region = env_first("RINGCACHE_TEST_S3_REGION", "AWS_REGION",
			      "AWS_DEFAULT_REGION");
	if (getenv("RINGCACHE_TEST_S3_ACCESS_KEY")) {
		o->access_key = getenv("RINGCACHE_TEST_S3_ACCESS_KEY");
		o->secret_key = getenv("RINGCACHE_TEST_S3_SECRET_KEY");
	} else {
		o->access_key = getenv("AWS_ACCESS_KEY_ID");
		o->secret_key = getenv("AWS_SECRET_ACCESS_KEY");
		o->session_token = getenv("AWS_SESSION_TOKEN");
	}
	o->addressing = S3_PATH_STYLE;
	o->n_small = DS_DEFAULT_SMALL;
	o->seed = DS_DEFAULT_SEED;
	o->jobs = DEFAULT_JOBS;
}

static int parse_number(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-' || v > max)
		return -1;
	*out = v;
	return 0;
}

/* Options may appear anywhere after the program name. */
static int parse_args(int argc, char **argv, struct options *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char **str_dst = NULL;
		uint64_t *num_dst = NULL, max = 0, v;

		if (strcmp(a, "--path-style") == 0) {
			o->addressing = S3_PATH_STYLE;
			continue;
		} else if (strcmp(a, "--virtual") == 0) {
			o->addressing = S3_VIRTUAL_HOSTED;
			continue;
		} else if (strcmp(a, "--no-verify-tls") == 0) {
			o->no_verify_tls = true;
			continue;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(a, "--endpoint") == 0) str_dst = &o->endpoint;
		else if (strcmp(a, "--region") == 0) str_dst = &o->region;
		else if (strcmp(a, "--access-key") == 0) str_dst = &o->access_key;
		else if (strcmp(a, "--secret-key") == 0) str_dst = &o->secret_key;
		else if (strcmp(a, "--range") == 0) str_dst = &o->range;
		else if (strcmp(a, "--delimiter") == 0) str_dst = &o->delimiter;
		else if (strcmp(a, "--part-size") == 0) str_dst = &o->part_size;
		else if (strcmp(a, "--seed") == 0) { num_dst = &o->seed; max = UINT64_MAX; }
		else if (strcmp(a, "--small") == 0 || strcmp(a, "--jobs") == 0) {
			num_dst = &v;
			max = strcmp(a, "--jobs") == 0 ? MAX_JOBS : 10000000;
		}
		if (str_dst || num_dst) {
			if (i + 1 >= argc) {
				fprintf(stderr, "rc-s3: %s needs a value\n", a);
				return -1;
			}
			const char *val = argv[++i];
			if (str_dst) {
				*str_dst = val;
			} else if (parse_number(val, max, num_dst) < 0) {
				fprintf(stderr, "rc-s3: %s: '%s' is not a number in range\n",
					a, val);
				return -1;
			} else if (strcmp(a, "--small") == 0) {
				o->n_small = (size_t)v;
			} else if (strcmp(a, "--jobs") == 0) {
				o->jobs = v ? (unsigned)v : 1;
				o->jobs_given = true;
			}
			continue;
		}
		if (a[0] == '-' && a[1] != '\0') {
			fprintf(stderr, "rc-s3: unknown option '%s'\n", a);
			return -1;
		}
		if (o->n_args == MAX_ARGS) {
			fprintf(stderr, "rc-s3: too many arguments\n");
			return -1;
		}
		o->args[o->n_args++] = a;
	}
	return 0;
}

static int tool_open(struct tool *t)
{
	char err[256] = "";
	struct creds_config cc = { .source = CREDS_AUTO, .timeout_ms = 2000 };

	if (t->opt.access_key || t->opt.secret_key) {
		if (!t->opt.access_key || !t->opt.secret_key) {
			fprintf(stderr, "rc-s3: give both an access key and a secret key\n");
			return -1;
		}
		cc.source = CREDS_CONFIG;
		cc.access_key = t->opt.access_key;
		cc.secret_key = t->opt.secret_key;
		cc.session_token = t->opt.session_token;
	}
	t->creds = creds_provider_new(&cc, err, sizeof(err));
	if (!t->creds) {
		fprintf(stderr, "rc-s3: credentials: %s\n", err);
		return -1;
	}
	struct s3_config cfg = {
		.endpoint = t->opt.endpoint,
		.region = t->opt.region ? t->opt.region : "us-east-1",
		.addressing = t->opt.addressing,
		.tls_verify = !t->opt.no_verify_tls,
		.connect_timeout_ms = 5000,
		.request_timeout_ms = 600000, /* a 48 MiB object over a slow link */
		.low_speed_time_s = 20,
		.max_retries = 5,
		.creds = t->creds,
	};
	t->s3 = s3_client_new(&cfg, err, sizeof(err));
	if (!t->s3) {
		fprintf(stderr, "rc-s3: %s\n", err);
		return -1;
	}
	return 0;
}

static void tool_close(struct tool *t)
{
	s3_client_free(t->s3);
	creds_provider_free(t->creds);
}

/* One line naming what failed: status, S3 code and message. */
static void report(const char *what, const char *bucket, const char *key,
		   const struct s3_result *r)
{
	fprintf(stderr, "rc-s3: %s %s%s%s: ", what, bucket, key ? "/" : "",
		key ? key : "");
	if (r->http_status)
		fprintf(stderr, "HTTP %ld ", r->http_status);
	char bare[32];
	snprintf(bare, sizeof(bare), "HTTP %ld", r->http_status);
	/* RGW's messages are empty (s3.c then repeats the code) and a HEAD
	 * has no body: print each fact once. */
	bool say_msg = r->message[0] && strcmp(r->message, r->code) != 0 &&
		       strcmp(r->message, bare) != 0;
	if (r->code[0])
		fprintf(stderr, "%s%s", r->code, say_msg ? ": " : " ");
	if (say_msg)
		fprintf(stderr, "%s ", r->message);
	fprintf(stderr, "(%s)\n", strerror(-r->err));
}

/* ---- simple commands ---------------------------------------------------- */

static int cmd_mb(struct tool *t, const char *bucket)
{
	struct s3_req_params p = { .op = S3_CREATE_BUCKET, .bucket = bucket };
	struct s3_result r;

	if (s3_perform(t->s3, &p, &r, NULL, NULL) == 0)
		return 0;
	if (strcmp(r.code, "BucketAlreadyOwnedByYou") == 0)
		return 0;
	report("mb", bucket, NULL, &r);
	return 1;
}

/* Reads a whole file (or stdin for "-") into a malloc'd buffer. */
static int read_all(const char *path, unsigned char **out, size_t *len)
{
	int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	size_t cap = 1 << 16, n = 0;
	unsigned char *buf = NULL;

	if (fd < 0) {
		fprintf(stderr, "rc-s3: %s: %s\n", path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
		cap = (size_t)st.st_size + 1;
	for (;;) {
		if (!buf || n == cap) {
			if (buf)
				cap *= 2;
			unsigned char *nb = realloc(buf, cap);
			if (!nb) {
				fprintf(stderr, "rc-s3: %s: out of memory\n", path);
				goto fail;
			}
			buf = nb;
		}
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			fprintf(stderr, "rc-s3: %s: %s\n", path, strerror(errno));
			goto fail;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	if (fd != STDIN_FILENO)
		close(fd);
	*out = buf;
	*len = n;
	return 0;
fail:
	if (fd != STDIN_FILENO)
		close(fd);
	free(buf);
	return -1;
}

static int cmd_put(struct tool *t, const char *bucket, const char *key,
		   const char *file)
{
	unsigned char *body;
	size_t len;

	if (read_all(file, &body, &len) < 0)
		return 1;
	struct s3_req_params p = { .op = S3_PUT_OBJECT, .bucket = bucket,
				   .key = key, .body = body, .body_len = len };
	struct s3_result r;
	int rc = s3_perform(t->s3, &p, &r, NULL, NULL);
	free(body);
	if (rc < 0) {
		report("put", bucket, key, &r);
		return 1;
	}
	printf("%s\n", r.etag);
	return 0;
}

/* Writes the body to a file or stdout. On a retry s3_perform restarts the
 * body at offset 0: bytes already written are skipped, so a pipe gets
 * each byte once. */
struct fd_sink {
	int fd;
	uint64_t written;
};

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int fd_sink_write(void *ctx, uint64_t off, const void *data, size_t len)
{
	struct fd_sink *s = ctx;
	if (off + len <= s->written)
		return 0;
	size_t skip = off < s->written ? (size_t)(s->written - off) : 0;
	if (write_all(s->fd, (const unsigned char *)data + skip, len - skip) < 0)
		return -1;
	s->written = off + len;
	return 0;
}

static int parse_range(const char *s, uint64_t *off, uint64_t *len)
{
	const char *dash = strchr(s, '-');
	char first[32];
	uint64_t a, b;

	if (!dash || (size_t)(dash - s) >= sizeof(first))
		return -1;
	memcpy(first, s, (size_t)(dash - s));
	first[dash - s] = '\0';
	if (parse_number(first, UINT64_MAX - 1, &a) < 0 ||
	    parse_number(dash + 1, UINT64_MAX - 1, &b) < 0 || b < a)
		return -1;
	*off = a;
	*len = b - a + 1;
	return 0;
}

static int cmd_get(struct tool *t, const char *bucket, const char *key,
		   const char *file)
{
	struct s3_req_params p = { .op = S3_GET_OBJECT, .bucket = bucket, .key = key };
	bool to_stdout = !file || strcmp(file, "-") == 0;

	if (t->opt.range && parse_range(t->opt.range, &p.range_off, &p.range_len) < 0) {
		fprintf(stderr, "rc-s3: --range '%s': expected FIRST-LAST byte offsets\n",
			t->opt.range);
		return 1;
	}
	struct fd_sink sink = { .fd = to_stdout ? STDOUT_FILENO :
				open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) };
	if (sink.fd < 0) {
		fprintf(stderr, "rc-s3: %s: %s\n", file, strerror(errno));
		return 1;
	}
	p.sink = fd_sink_write;
	p.sink_ctx = &sink;
	struct s3_result r;
	int rc = s3_perform(t->s3, &p, &r, NULL, NULL);
	if (!to_stdout && close(sink.fd) < 0 && rc == 0) {
		fprintf(stderr, "rc-s3: %s: %s\n", file, strerror(errno));
		rc = -EIO;
	}
	if (rc < 0) {
		if (r.err)
			report("get", bucket, key, &r);
		if (!to_stdout)
			unlink(file);
		return 1;
	}
	return 0;
}

static int cmd_head(struct tool *t, const char *bucket, const char *key)
{
	struct s3_req_params p = { .op = S3_HEAD_OBJECT, .bucket = bucket, .key = key };
	struct s3_result r;

	if (s3_perform(t->s3, &p, &r, NULL, NULL) < 0) {
		report("head", bucket, key, &r);
		return 1;
	}
	printf("%" PRIu64 " %s\n", r.object_size, r.etag);
	return 0;
}

static int cmd_rm(struct tool *t, const char *bucket, const char *key)
{
	struct s3_req_params p = { .op = S3_DELETE_OBJECT, .bucket = bucket, .key = key };
	struct s3_result r;

	if (s3_perform(t->s3, &p, &r, NULL, NULL) < 0) {
		report("rm", bucket, key, &r);
		return 1;
	}
	return 0;
}

/* Calls fn for every page of a listing. Returns 0 or -1 (reported). */
typedef int (*page_fn)(void *ctx, const struct s3_list_page *pg);

static int list_all(struct tool *t, const char *bucket, const char *prefix,
		    const char *delimiter, page_fn fn, void *ctx)
{
	char *token = NULL;
	int rc = -1;

	for (;;) {
		struct s3_req_params p = { .op = S3_LIST_OBJECTS_V2, .bucket = bucket,
					   .prefix = prefix, .delimiter = delimiter,
					   .continuation_token = token };
		struct s3_result r;
		char *body = NULL, err[256] = "";
		size_t len = 0;
		struct s3_list_page pg;

		if (s3_perform(t->s3, &p, &r, &body, &len) < 0) {
			report("ls", bucket, prefix, &r);
			free(body);
			break;
		}
		int prc = s3_parse_list(body, len, &pg, err, sizeof(err));
		free(body);
		if (prc < 0) {
			fprintf(stderr, "rc-s3: ls %s: %s\n", bucket, err);
			break;
		}
		int frc = fn(ctx, &pg);
		free(token);
		token = pg.truncated && pg.next_token ? strdup(pg.next_token) : NULL;
		bool more = pg.truncated;
		s3_list_page_free(&pg);
		if (frc < 0)
			break;
		if (!more) {
			rc = 0;
			break;
		}
		if (!token) {
			fprintf(stderr, "rc-s3: ls: out of memory\n");
			break;
		}
	}
	free(token);
	return rc;
}

static int print_page(void *ctx, const struct s3_list_page *pg)
{
	(void)ctx;
	for (size_t i = 0; i < pg->n_prefixes; i++)
		printf("PRE\t-\t%s\n", pg->prefixes[i]);
	for (size_t i = 0; i < pg->n_objects; i++)
		printf("%" PRIu64 "\t%s\t%s\n", pg->objects[i].size,
		       pg->objects[i].etag[0] ? pg->objects[i].etag : "-",
		       pg->objects[i].key);
	return 0;
}

static int cmd_ls(struct tool *t, const char *bucket, const char *prefix)
{
	return list_all(t, bucket, prefix, t->opt.delimiter, print_page, NULL) < 0;
}

/* ---- the parallel dataset driver ---------------------------------------- */

struct existing {
	char **keys;
	uint64_t *sizes;
	size_t n;
	uint32_t cap;
	size_t prefix_len;
};

static int collect_page(void *ctx, const struct s3_list_page *pg)
{
	struct existing *e = ctx;
	for (size_t i = 0; i < pg->n_objects; i++) {
		/* Two arrays, one capacity: keys may end up the larger. */
		uint32_t key_cap = e->cap;
		if (RC_GROW(e->keys, key_cap, e->n + 1) ||
		    RC_GROW(e->sizes, e->cap, e->n + 1))
			return -1;
		e->keys[e->n] = strdup(pg->objects[i].key + e->prefix_len);
		if (!e->keys[e->n])
			return -1;
		e->sizes[e->n++] = pg->objects[i].size;
	}
	return 0;
}

/* S3 lists in key order, so a binary search finds a key. */
static bool existing_has(const struct existing *e, const char *rel, uint64_t size)
{
	size_t lo = 0, hi = e->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(e->keys[mid], rel);
		if (c == 0)
			return e->sizes[mid] == size;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static void existing_free(struct existing *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->keys[i]);
	free(e->keys);
	free(e->sizes);
}

struct slot {
	bool busy, waiting;        /* in flight / sleeping before a retry */
	size_t idx;
	unsigned attempt;
	uint64_t retry_at_ms;
	struct s3_req *req;
	unsigned char *body;       /* gen: the object's bytes */
	int64_t mismatch;          /* verify: first bad offset, -1 none */
	const struct ds_spec *spec;
	char key[1100];
};

struct batch {
	struct tool *t;
	CURLM *multi;
	const char *bucket;
	char prefix[1024];
	struct ds_spec spec;
	bool verify;
	size_t *todo, n_todo, next;
	struct slot *slots;
	unsigned n_slots;
	size_t failures, done;
	uint64_t bytes;
};

static int verify_sink(void *ctx, uint64_t off, const void *data, size_t len)
{
	struct slot *s = ctx;
	if (s->mismatch < 0)
		s->mismatch = ds_mismatch(s->spec, s->idx, off, data, len);
	return 0;
}

static int slot_start(struct batch *b, struct slot *s)
{
	struct s3_req_params p = { .bucket = b->bucket, .key = s->key };
	char err[256] = "";
	uint64_t size = ds_size(&b->spec, s->idx);

	if (b->verify) {
		p.op = S3_GET_OBJECT;
		p.sink = verify_sink;
		p.sink_ctx = s;
		s->mismatch = -1;
	} else {
		if (!s->body && size) {
			s->body = malloc(size);
			if (!s->body) {
				fprintf(stderr, "rc-s3: %s: out of memory\n", s->key);
				return -1;
			}
			ds_fill(&b->spec, s->idx, 0, s->body, size);
		}
		p.op = S3_PUT_OBJECT;
		p.body = s->body;
		p.body_len = size;
	}
	s->req = s3_req_new(b->t->s3, &p, err, sizeof(err));
	if (!s->req) {
		fprintf(stderr, "rc-s3: %s: %s\n", s->key, err);
		return -1;
	}
	s3_req_set_private(s->req, s);
	if (curl_multi_add_handle(b->multi, s3_req_easy(s->req)) != CURLM_OK) {
		fprintf(stderr, "rc-s3: %s: cannot start transfer\n", s->key);
		s3_req_free(s->req);
		s->req = NULL;
		return -1;
	}
	s->busy = true;
	s->waiting = false;
	return 0;
}

static void slot_release(struct slot *s)
{
	free(s->body);
	s->body = NULL;
	s->busy = s->waiting = false;
	s->attempt = 0;
}

/* Fills idle slots from the to-do list and restarts due retries. */
static void batch_fill(struct batch *b)
{
	uint64_t now = rc_now_ms();
	for (unsigned i = 0; i < b->n_slots; i++) {
		struct slot *s = &b->slots[i];
		if (s->waiting && now >= s->retry_at_ms) {
			if (slot_start(b, s) < 0) {
				b->failures++;
				slot_release(s);
			}
			continue;
		}
		while (!s->busy && !s->waiting && b->next < b->n_todo) {
			s->idx = b->todo[b->next++];
			char rel[DS_KEY_MAX];
			snprintf(s->key, sizeof(s->key), "%s%s", b->prefix,
				 ds_key(&b->spec, s->idx, rel));
			if (slot_start(b, s) < 0) {
				b->failures++;
				slot_release(s);
			}
		}
	}
}

static void verify_outcome(struct batch *b, struct slot *s,
			   const struct s3_result *r)
{
	uint64_t want = ds_size(&b->spec, s->idx);
	if (r->body_bytes != want) {
		printf("SIZE %s: got %" PRIu64 " bytes, want %" PRIu64 "\n",
		       s->key, r->body_bytes, want);
		b->failures++;
	} else if (s->mismatch >= 0) {
		printf("MISMATCH %s: first differing byte at offset %" PRId64 "\n",
		       s->key, s->mismatch);
		b->failures++;
	}
}

static void slot_finish(struct batch *b, struct slot *s, CURLcode code)
{
	struct s3_result r;
	unsigned max_retries = s3_client_config(b->t->s3)->max_retries;

	s3_req_result(s->req, code, &r);
	curl_multi_remove_handle(b->multi, s3_req_easy(s->req));
	s3_req_free(s->req);
	s->req = NULL;
	s->busy = false;
	if (r.err && r.retryable && s->attempt < max_retries) {
		s->attempt++;
		s->waiting = true;
		s->retry_at_ms = rc_now_ms() + s3_backoff_ms(b->t->s3, s->attempt);
		return;
	}
	if (r.err == -ENOENT && b->verify) {
		printf("MISSING %s\n", s->key);
		b->failures++;
	} else if (r.err) {
		report(b->verify ? "get" : "put", b->bucket, s->key, &r);
		b->failures++;
	} else if (b->verify) {
		verify_outcome(b, s, &r);
	}
	b->bytes += b->verify ? r.body_bytes : ds_size(&b->spec, s->idx);
	b->done++;
	slot_release(s);
}

static bool batch_idle(const struct batch *b)
{
	if (b->next < b->n_todo)
		return false;
	for (unsigned i = 0; i < b->n_slots; i++)
		if (b->slots[i].busy || b->slots[i].waiting)
			return false;
	return true;
}

static int batch_run(struct batch *b)
{
	b->multi = curl_multi_init();
	b->slots = calloc(b->n_slots, sizeof(*b->slots));
	if (!b->multi || !b->slots) {
		fprintf(stderr, "rc-s3: out of memory\n");
		curl_multi_cleanup(b->multi);
		free(b->slots);
		return -1;
	}
	curl_multi_setopt(b->multi, CURLMOPT_MAXCONNECTS, (long)b->n_slots);
	for (unsigned i = 0; i < b->n_slots; i++)
		b->slots[i].spec = &b->spec;
	for (;;) {
		batch_fill(b);
		if (batch_idle(b))
			break;
		int running = 0, msgs;
		if (curl_multi_perform(b->multi, &running) != CURLM_OK ||
		    curl_multi_poll(b->multi, NULL, 0, 50, NULL) != CURLM_OK) {
			fprintf(stderr, "rc-s3: curl multi failed\n");
			b->failures++;
			break;
		}
		CURLMsg *m;
		while ((m = curl_multi_info_read(b->multi, &msgs))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			struct slot *s = NULL;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			/* PRIVATE is the s3_req; its private is our slot. */
			s = s3_req_get_private((struct s3_req *)s);
			slot_finish(b, s, m->data.result);
		}
	}
	for (unsigned i = 0; i < b->n_slots; i++) {
		if (b->slots[i].req) {
			curl_multi_remove_handle(b->multi, s3_req_easy(b->slots[i].req));
			s3_req_free(b->slots[i].req);
		}
		free(b->slots[i].body);
	}
	free(b->slots);
	curl_multi_cleanup(b->multi);
	return 0;
}

static int batch_init(struct tool *t, struct batch *b, const char *bucket,
		      const char *prefix)
{
	memset(b, 0, sizeof(*b));
	b->t = t;
	b->bucket = bucket;
	b->spec.n_small = t->opt.n_small;
	b->spec.seed = t->opt.seed;
	b->n_slots = t->opt.jobs;
	size_t plen = strlen(prefix);
	if (plen + 2 > sizeof(b->prefix)) {
		fprintf(stderr, "rc-s3: prefix too long\n");
		return -1;
	}
	/* PREFIX names a folder: "ds" and "ds/" are the same dataset. */
	snprintf(b->prefix, sizeof(b->prefix), "%s%s", prefix,
		 plen && prefix[plen - 1] != '/' ? "/" : "");
	b->todo = calloc(ds_count(&b->spec) + 1, sizeof(*b->todo));
	if (!b->todo) {
		fprintf(stderr, "rc-s3: out of memory\n");
		return -1;
	}
	return 0;
}

static void batch_summary(const struct batch *b, const char *verb, double secs,
			  size_t skipped)
{
	fprintf(stderr, "rc-s3: %s %zu objects, %.1f MB in %.2f s (%.0f MB/s)",
		verb, b->done, (double)b->bytes / 1e6, secs,
		secs > 0 ? (double)b->bytes / 1e6 / secs : 0.0);
	if (skipped)
		fprintf(stderr, ", %zu already present", skipped);
	fprintf(stderr, ", %zu failed\n", b->failures);
}

static int cmd_dataset(struct tool *t, const char *bucket, const char *prefix,
		       bool verify)
{
	struct batch b;
	struct existing have = {0};
	size_t skipped = 0;
	uint64_t t0 = rc_now_ms();

	if (batch_init(t, &b, bucket, prefix) < 0)
		return 1;
	b.verify = verify;
	if (!verify) {
		have.prefix_len = strlen(b.prefix);
		if (list_all(t, bucket, b.prefix, NULL, collect_page, &have) < 0) {
			existing_free(&have);
			free(b.todo);
			return 1;
		}
	}
	for (size_t i = 0; i < ds_count(&b.spec); i++) {
		char rel[DS_KEY_MAX];
		if (!verify && existing_has(&have, ds_key(&b.spec, i, rel),
					    ds_size(&b.spec, i)))
			skipped++;
		else
			b.todo[b.n_todo++] = i;
	}
	existing_free(&have);
	batch_run(&b);
	batch_summary(&b, verify ? "verified" : "uploaded",
		      (double)(rc_now_ms() - t0) / 1000.0, skipped);
	free(b.todo);
	return b.failures ? 1 : 0;
}

/* ---- multipart upload, copy ------------------------------------------- */

/* "5M", "64MiB", "1G", "5242880" -> bytes; -1 if not a size. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mult = 1;

	if (errno || end == s || s[0] == '-')
		return -1;
	switch (*end) {
	case 'k': case 'K': mult = 1ull << 10; end++; break;
	case 'm': case 'M': mult = 1ull << 20; end++; break;
	case 'g': case 'G': mult = 1ull << 30; end++; break;
	default: break;
	}
	if (strcmp(end, "") != 0 && strcmp(end, "i") != 0 &&
	    strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
		return -1;
	if (v > UINT64_MAX / mult)
		return -1;
	*out = v * mult;
	return 0;
}

/* The part size --part-size asks for, checked against S3's limits for a
 * file of len bytes; 0 or -1 (said on stderr). */
static int mpu_part_size(struct tool *t, size_t len, uint64_t *part)
{
	*part = UPLOAD_MIN_PART;
	if (t->opt.part_size && (parse_size(t->opt.part_size, part) < 0 ||
				 *part < UPLOAD_MIN_PART || *part > MAX_PART_SIZE)) {
		fprintf(stderr, "rc-s3: --part-size '%s': give 5M..5G\n",
			t->opt.part_size);
		return -1;
	}
	uint64_t n = len ? (len + *part - 1) / *part : 1;
	if (n > UPLOAD_MAX_PARTS) {
		fprintf(stderr, "rc-s3: %zu bytes need %" PRIu64 " parts of %" PRIu64
			" bytes; S3 allows %u: raise --part-size\n", len, n, *part,
			UPLOAD_MAX_PARTS);
		return -1;
	}
	return 0;
}

/* Parts --jobs at a time through upload_run (Content-MD5 on each, retried
 * by the S3 client's policy, Complete, Abort on failure); prints the ETag. */
static int cmd_mpu_put(struct tool *t, const char *bucket, const char *key,
		       const char *file)
{
	struct upload_outcome out;
	unsigned char *data;
	size_t len;
	uint64_t part;

	if (read_all(file, &data, &len) < 0)
		return 1;
	if (mpu_part_size(t, len, &part) < 0) {
		free(data);
		return 1;
	}
	struct upload_params p = {
		.bucket = bucket, .key = key, .size = len, .data = data,
		.part_size = part, .multipart = true,
		.concurrency = t->opt.jobs_given ? t->opt.jobs : DEFAULT_MPU_JOBS,
	};
	int rc = upload_run(t->s3, &p, NULL, &out);
	free(data);
	if (rc == 0) {
		printf("%s\n", out.etag);
		return 0;
	}
	struct s3_result r = { .err = rc, .http_status = out.http_status };
	snprintf(r.code, sizeof(r.code), "%s", out.code);
	snprintf(r.message, sizeof(r.message), "%s", out.message);
	report("mpu-put", bucket, key, &r);
	return 1;
}

static int cmd_mpu_ls(struct tool *t, const char *bucket, const char *prefix)
{
	char *marker = NULL, *id_marker = NULL;
	int rc = 1;

	for (;;) {
		struct s3_req_params p = { .op = S3_LIST_MULTIPART, .bucket = bucket,
					   .prefix = prefix, .key_marker = marker,
					   .upload_id_marker = id_marker };
		struct s3_result r;
		struct s3_upload_page pg;
		char *body = NULL, err[256] = "";
		size_t len = 0;

		if (s3_perform(t->s3, &p, &r, &body, &len) < 0) {
			report("mpu-ls", bucket, prefix, &r);
			free(body);
			break;
		}
		int prc = s3_parse_uploads(body, len, &pg, err, sizeof(err));
		free(body);
		if (prc < 0) {
			fprintf(stderr, "rc-s3: mpu-ls %s: %s\n", bucket, err);
			break;
		}
		for (size_t i = 0; i < pg.n_uploads; i++)
			printf("%s\t%s\t%s\n", pg.uploads[i].initiated[0] ?
			       pg.uploads[i].initiated : "-",
			       pg.uploads[i].upload_id, pg.uploads[i].key);
		free(marker);
		free(id_marker);
		marker = pg.next_key_marker ? strdup(pg.next_key_marker) : NULL;
		id_marker = pg.next_upload_id_marker ? strdup(pg.next_upload_id_marker) : NULL;
		bool more = pg.truncated;
		s3_upload_page_free(&pg);
		if (!more) {
			rc = 0;
			break;
		}
		if (!marker) {
			fprintf(stderr, "rc-s3: mpu-ls: out of memory\n");
			break;
		}
	}
	free(marker);
	free(id_marker);
	return rc;
}

static int cmd_mpu_abort(struct tool *t, const char *bucket, const char *key,
			 const char *upload_id)
{
	struct s3_req_params p = { .op = S3_ABORT_MULTIPART, .bucket = bucket,
				   .key = key, .upload_id = upload_id };
	struct s3_result r;

	if (s3_perform(t->s3, &p, &r, NULL, NULL) < 0) {
		report("mpu-abort", bucket, key, &r);
		return 1;
	}
	return 0;
}

static int cmd_cp(struct tool *t, const char *bucket, const char *src,
		  const char *dst)
{
	char *source = NULL, *body = NULL, etag[128], err[256] = "";
	size_t len = 0;
	struct s3_result r;

	if (asprintf(&source, "%s/%s", bucket, src) < 0) {
		fprintf(stderr, "rc-s3: cp: out of memory\n");
		return 1;
	}
	struct s3_req_params p = { .op = S3_COPY_OBJECT, .bucket = bucket,
				   .key = dst, .copy_source = source };
	int rc = s3_perform(t->s3, &p, &r, &body, &len);
	free(source);
	if (rc < 0) {
		report("cp", bucket, dst, &r);
		free(body);
		return 1;
	}
	rc = s3_parse_copy_result(body, len, etag, sizeof(etag), err, sizeof(err));
	free(body);
	if (rc < 0) {
		fprintf(stderr, "rc-s3: cp %s/%s: %s\n", bucket, dst, err);
		return 1;
	}
	printf("%s\n", etag);
	return 0;
}

/* ---- main --------------------------------------------------------------- */

struct command {
	const char *name;
	int min_args, max_args; /* after the command name */
};

static const struct command commands[] = {
	{ "mb", 1, 1 }, { "put", 3, 3 }, { "get", 2, 3 }, { "head", 2, 2 },
	{ "ls", 1, 2 }, { "rm", 2, 2 }, { "gen-dataset", 2, 2 },
	{ "verify-dataset", 2, 2 }, { "mpu-put", 3, 3 }, { "mpu-ls", 1, 2 },
	{ "mpu-abort", 3, 3 }, { "cp", 3, 3 },
};

static int dispatch(struct tool *t)
{
	const char *cmd = t->opt.args[0], *const *a = t->opt.args + 1;

	if (strcmp(cmd, "mb") == 0)
		return cmd_mb(t, a[0]);
	if (strcmp(cmd, "put") == 0)
		return cmd_put(t, a[0], a[1], a[2]);
	if (strcmp(cmd, "get") == 0)
		return cmd_get(t, a[0], a[1], t->opt.n_args > 3 ? a[2] : NULL);
	if (strcmp(cmd, "head") == 0)
		return cmd_head(t, a[0], a[1]);
	if (strcmp(cmd, "ls") == 0)
		return cmd_ls(t, a[0], t->opt.n_args > 2 ? a[1] : NULL);
	if (strcmp(cmd, "rm") == 0)
		return cmd_rm(t, a[0], a[1]);
	if (strcmp(cmd, "mpu-put") == 0)
		return cmd_mpu_put(t, a[0], a[1], a[2]);
	if (strcmp(cmd, "mpu-ls") == 0)
		return cmd_mpu_ls(t, a[0], t->opt.n_args > 2 ? a[1] : NULL);
	if (strcmp(cmd, "mpu-abort") == 0)
		return cmd_mpu_abort(t, a[0], a[1], a[2]);
	if (strcmp(cmd, "cp") == 0)
		return cmd_cp(t, a[0], a[1], a[2]);
	if (strcmp(cmd, "gen-dataset") == 0)
		return cmd_dataset(t, a[0], a[1], false);
	return cmd_dataset(t, a[0], a[1], true);
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	struct tool t = {0};

	options_from_env(&t.opt);
	if (parse_args(argc, argv, &t.opt) < 0)
		return 1;
	if (t.opt.n_args == 0) {
		usage(stderr);
		return 1;
	}
	const struct command *c = find_command(t.opt.args[0]);
	if (!c) {
		fprintf(stderr, "rc-s3: unknown command '%s'\n", t.opt.args[0]);
		usage(stderr);
		return 1;
	}
	int nargs = t.opt.n_args - 1;
	if (nargs < c->min_args || nargs > c->max_args) {
		fprintf(stderr, "rc-s3: %s takes %d to %d arguments (see --help)\n",
			c->name, c->min_args, c->max_args);
		return 1;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "rc-s3: curl_global_init failed\n");
		return 1;
	}
	int rc = 1;
	if (tool_open(&t) == 0)
		rc = dispatch(&t);
	tool_close(&t);
	curl_global_cleanup();
	if (fflush(stdout) != 0) {
		fprintf(stderr, "rc-s3: stdout: %s\n", strerror(errno));
		rc = 1;
	}
	return rc;
}
