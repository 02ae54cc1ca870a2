/* test_fetch.c - the fetch engine (src/engine/fetch.h) on its own: no
 * session, no client, no S3. A one-shard daemon (its reactor, curl, cache)
 * fetches from a stub transport, a minimal HTTP responder on a thread of
 * this process that plays S3's HEAD and ranged GET (If-Match, 412, 503),
 * and the test registers its own fetch_ops to see every completion.
 * Checked: bytes read == bytes served, retries after 5xx, one GET per
 * block however many reads wait for it, and a changed ETag -> -ESTALE. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "lifecycle.h"
#include "fetch.h"

#define BLOCK (64u * 1024u)
#define OBJ_SIZE (3u * BLOCK + 1000u)

/* ---- the stub transport: S3's HEAD and ranged GET for one object ---- */

static struct stub {
	int fd, port;
	pthread_t thread;
	pthread_mutex_t mu;
	char etag[64];
	unsigned fail_gets;      /* answer this many GETs 503 first */
	unsigned gets[8], heads; /* requests served, GETs by block */
	unsigned failed;         /* 503s sent */
} stub;

static uint8_t byte_at(uint64_t i)
{
	return (uint8_t)(i * 7 + i / 251);
}

static void header(const char *raw, const char *name, char *out, size_t cap)
{
	size_t n = strlen(name);
	out[0] = 0;
	for (const char *p = strstr(raw, "\r\n"); p && p[2];
	     p = strstr(p + 2, "\r\n")) {
		if (!strncasecmp(p + 2, name, n) && p[2 + n] == ':') {
			const char *v = p + 3 + n, *e = strstr(v, "\r\n");
			while (*v == ' ')
				v++;
			snprintf(out, cap, "%.*s", (int)(e - v), v);
			return;
		}
	}
}

static void reply(int c, const char *status, const char *headers,
		  const void *body, size_t len)
{
	char head[512];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %s\r\n%sContent-Length: "
			 "%zu\r\nConnection: close\r\n\r\n", status, headers,
			 len);
	if (write(c, head, (size_t)n) < 0 || (len && write(c, body, len) < 0))
		return;
}

static void serve(int c)
{
	char raw[8192] = "", method[8], path[256], range[64], ifm[64];
	size_t len = 0;
	while (!strstr(raw, "\r\n\r\n") && len < sizeof(raw) - 1) {
		ssize_t n = read(c, raw + len, sizeof(raw) - 1 - len);
		if (n <= 0)
			return;
		len += (size_t)n;
		raw[len] = 0;
	}
	if (sscanf(raw, "%7s %255s", method, path) != 2)
		return;
	header(raw, "Range", range, sizeof(range));
	header(raw, "If-Match", ifm, sizeof(ifm));
	pthread_mutex_lock(&stub.mu);
	char etag[64], hdrs[256];
	snprintf(etag, sizeof(etag), "%s", stub.etag);
	bool known = !strncmp(path, "/bkt/pfx/obj", 12) && !path[12];
	unsigned long long a = 0, b = OBJ_SIZE - 1;
	bool ranged = sscanf(range, "bytes=%llu-%llu", &a, &b) == 2;
	bool fail = false;
	if (known && !strcmp(method, "GET")) {
		if (stub.fail_gets) {
			stub.fail_gets--;
			stub.failed++;
			fail = true;
		} else if (a / BLOCK < 8) {
			stub.gets[a / BLOCK]++;
		}
	} else if (known) {
		stub.heads++;
	}
	pthread_mutex_unlock(&stub.mu);
	if (!known) {
		reply(c, "404 Not Found", "", NULL, 0);
	} else if (fail) {
		static const char slow[] = "<Error><Code>ServiceUnavailable"
					   "</Code></Error>";
		reply(c, "503 Service Unavailable", "", slow, sizeof(slow) - 1);
	} else if (!strcmp(method, "HEAD")) {
		snprintf(hdrs, sizeof(hdrs), "ETag: %s\r\n", etag);
		char head[512];
		int n = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\n%s"
				 "Content-Length: %u\r\nConnection: close\r\n\r\n",
				 hdrs, OBJ_SIZE);
		if (write(c, head, (size_t)n) < 0)
			return;
	} else if (ifm[0] && strcmp(ifm, etag) != 0) {
		static const char pf[] = "<Error><Code>PreconditionFailed"
					 "</Code></Error>";
		reply(c, "412 Precondition Failed", "", pf, sizeof(pf) - 1);
	} else {
		if (!ranged || b >= OBJ_SIZE)
			b = OBJ_SIZE - 1;
		size_t n = (size_t)(b - a + 1);
		uint8_t *body = malloc(n);
		for (size_t i = 0; i < n; i++)
			body[i] = byte_at(a + i);
		snprintf(hdrs, sizeof(hdrs), "ETag: %s\r\nContent-Range: bytes "
			 "%llu-%llu/%u\r\n", etag, a, b, OBJ_SIZE);
		reply(c, "206 Partial Content", hdrs, body, n);
		free(body);
	}
}

static void *stub_main(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(stub.fd, NULL, NULL);
		if (c < 0)
			return NULL; /* shut down */
		serve(c);
		close(c);
	}
}

static void stub_start(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof(a);
	memset(&stub, 0, sizeof(stub));
	pthread_mutex_init(&stub.mu, NULL);
	snprintf(stub.etag, sizeof(stub.etag), "\"v1\"");
	stub.fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(stub.fd, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(stub.fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(stub.fd, 64), 0);
	cr_assert_eq(getsockname(stub.fd, (struct sockaddr *)&a, &alen), 0);
	stub.port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&stub.thread, NULL, stub_main, NULL), 0);
}

static void stub_stop(void)
{
	shutdown(stub.fd, SHUT_RDWR);
	pthread_join(stub.thread, NULL);
	close(stub.fd);
}

static void stub_set_etag(const char *e)
{
	pthread_mutex_lock(&stub.mu);
	snprintf(stub.etag, sizeof(stub.etag), "%s", e);
	pthread_mutex_unlock(&stub.mu);
}

static unsigned stub_count(const unsigned *field)
{
	pthread_mutex_lock(&stub.mu);
	unsigned v = *field;
	pthread_mutex_unlock(&stub.mu);
	return v;
}

/* ---- a one-shard daemon and the test's fetch_ops ---- */

static struct server SRV; /* the daemon fetch runs in: SRV.d */
static char dir[64];

/* An op as the fetch engine sees it, and what came back. */
struct top {
	struct op op;
	bool done;
	unsigned ready, failed;
};

static void t_done(struct op *op)
{
	rc_container_of(op, struct top, op)->done = true;
}

static void t_block_ready(struct op *op, struct cache_entry *e)
{
	struct top *t = rc_container_of(op, struct top, op);
	uint64_t start = (uint64_t)e->blkno * BLOCK;
	uint64_t lo = op->offset > start ? op->offset : start;
	uint64_t end = op->offset + op->len;
	uint64_t hi = start + e->len < end ? start + e->len : end;
	memcpy(op->dst + (lo - op->offset), cache_entry_data(e) + (lo - start),
	       hi - lo);
	t->ready++;
	if (--op->pending == 0)
		t->done = true;
}

static void t_block_failed(struct op *op, int err)
{
	struct top *t = rc_container_of(op, struct top, op);
	if (op->err == 0)
		op->err = err;
	t->failed++;
	if (--op->pending == 0)
		t->done = true;
}

static void t_list_ready(struct op *op, const struct listing *l, int err)
{
	(void)l;
	op->err = err;
	t_done(op);
}

static const struct fetch_ops test_ops = {
	.op_done = t_done,
	.block_ready = t_block_ready,
	.block_failed = t_block_failed,
	.list_ready = t_list_ready,
};

static void setup(void)
{
	stub_start();
	snprintf(dir, sizeof(dir), "/tmp/rc-fetch.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof(path), "%s/ringcache.conf", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fchmod(fileno(f), 0600), 0); /* it holds a secret key */
	fprintf(f, "[daemon]\nsocket = %s/s.sock\nmemory = 16M\n"
		"block_size = 64K\nshards = 1\nlog_level = error\n"
		"[s3]\nendpoint = http://127.0.0.1:%d\naddressing = path\n"
		"credentials = config\naccess_key = AK\nsecret_key = SK\n"
		"max_retries = 3\n[dataset t]\nuri = s3://bkt/pfx/\n",
		dir, stub.port);
	fclose(f);
	char err[4096];
	cr_assert_eq(daemon_init(&SRV, path, err, sizeof(err)), 0, "%s", err);
	fetch_set_ops(&SRV.d.shards[0], &test_ops);
}

static void teardown(void)
{
	daemon_destroy(&SRV);
	stub_stop();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(fetch, .init = setup, .fini = teardown, .timeout = 60);

/* Turns the shard's reactor until every op given is done (30 s at most:
 * a hang, not a loaded machine, which takes milliseconds here). */
static void run_until(struct top **ops, unsigned n)
{
	struct reactor *r = SRV.d.shards[0].reactor;
	uint64_t until = rc_now_ns() + 30000000000ull;
	for (;;) {
		bool all = true;
		for (unsigned i = 0; i < n; i++)
			all &= ops[i]->done;
		if (all)
			return;
		cr_assert_lt(rc_now_ns(), until, "fetch did not complete");
		reactor_run_timers(r);
		reactor_turn(r, 10000000);
	}
}

static struct object *open_obj(int *err)
{
	struct top t = {0};
	struct top *p = &t;
	fetch_open(&SRV.d.shards[0], &t.op, SRV.d.datasets[0], "obj");
	run_until(&p, 1);
	*err = t.op.err;
	free(t.op.cause); /* the op owns it (daemon.h) */
	return t.op.obj;
}

/* A READ_INTO of [off, off+len) into dst, started now. */
static void read_start(struct top *t, struct object *o, uint64_t off,
		       uint64_t len, uint8_t *dst)
{
	memset(t, 0, sizeof(*t));
	object_get(o);
	t->op.opcode = RC_OP_READ_INTO;
	t->op.obj = o;
	t->op.offset = off;
	t->op.len = len;
	t->op.dst = dst;
	fetch_read(&SRV.d.shards[0], &t->op);
}

static void read_end(struct top *t)
{
	object_put(&SRV.d, t->op.obj);
	free(t->op.cause);
}

static void assert_bytes(const uint8_t *b, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (b[i] != byte_at(off + i))
			cr_assert_fail("byte %llu: %u, written %u",
				       (unsigned long long)(off + i), b[i],
				       byte_at(off + i));
}

Test(fetch, open_then_read_whole_object)
{
	int err;
	struct object *o = open_obj(&err);
	cr_assert_eq(err, 0);
	cr_assert_eq(o->size, OBJ_SIZE);
	cr_assert_str_eq(o->etag, "\"v1\"");
	uint8_t *buf = malloc(OBJ_SIZE);
	struct top t, *p = &t;
	read_start(&t, o, 0, OBJ_SIZE, buf);
	run_until(&p, 1);
	cr_assert_eq(t.op.err, 0);
	cr_assert_eq(t.ready, 4);
	assert_bytes(buf, 0, OBJ_SIZE);
	for (unsigned b = 0; b < 4; b++)
		cr_assert_eq(stub_count(&stub.gets[b]), 1);
	read_end(&t);
	object_put(&SRV.d, o);
	free(buf);
}

Test(fetch, retries_after_5xx)
{
	int err;
	struct object *o = open_obj(&err);
	cr_assert_eq(err, 0);
	pthread_mutex_lock(&stub.mu);
	stub.fail_gets = 2; /* under max_retries = 3 */
	pthread_mutex_unlock(&stub.mu);
	uint8_t buf[1000];
	struct top t, *p = &t;
	read_start(&t, o, BLOCK + 10, sizeof(buf), buf);
	run_until(&p, 1);
	cr_assert_eq(t.op.err, 0);
	cr_assert_eq(stub_count(&stub.failed), 2);
	cr_assert_eq(stub_count(&stub.gets[1]), 1);
	cr_assert_geq(SRV.d.shards[0].m.s3_retries, 2);
	assert_bytes(buf, BLOCK + 10, sizeof(buf));
	read_end(&t);
	object_put(&SRV.d, o);
}

Test(fetch, retries_give_up_with_the_error)
{
	int err;
	struct object *o = open_obj(&err);
	cr_assert_eq(err, 0);
	pthread_mutex_lock(&stub.mu);
	stub.fail_gets = 100;
	pthread_mutex_unlock(&stub.mu);
	uint8_t buf[100];
	struct top t, *p = &t;
	read_start(&t, o, 0, sizeof(buf), buf);
	run_until(&p, 1);
	cr_assert_lt(t.op.err, 0);
	cr_assert_eq(t.failed, 1);
	cr_assert_eq(stub_count(&stub.failed), 4, "1 try + max_retries 3");
	read_end(&t);
	object_put(&SRV.d, o);
}

Test(fetch, concurrent_reads_of_one_block_share_one_get)
{
	int err;
	struct object *o = open_obj(&err);
	cr_assert_eq(err, 0);
	enum { N = 5 };
	struct top t[N], *p[N];
	uint8_t buf[N][4096];
	for (unsigned i = 0; i < N; i++) {
		p[i] = &t[i];
		read_start(&t[i], o, 2 * BLOCK + i * 4096, 4096, buf[i]);
	}
	run_until(p, N);
	for (unsigned i = 0; i < N; i++) {
		cr_assert_eq(t[i].op.err, 0);
		assert_bytes(buf[i], 2 * BLOCK + i * 4096, 4096);
		read_end(&t[i]);
	}
	cr_assert_eq(stub_count(&stub.gets[2]), 1, "one GET for %d reads", N);
	object_put(&SRV.d, o);
}

Test(fetch, changed_etag_fails_estale_and_retires_the_version)
{
	int err;
	struct object *o = open_obj(&err);
	cr_assert_eq(err, 0);
	stub_set_etag("\"v2\"");
	uint8_t buf[100];
	struct top t, *p = &t;
	read_start(&t, o, 0, sizeof(buf), buf);
	run_until(&p, 1);
	cr_assert_eq(t.op.err, -ESTALE);
	cr_assert(o->stale, "the old version left the table");
	read_end(&t);
	/* A new OPEN asks S3 again and gets the new version. */
	struct object *o2 = open_obj(&err);
	cr_assert_eq(err, 0);
	cr_assert_neq(o2, o);
	cr_assert_str_eq(o2->etag, "\"v2\"");
	cr_assert_eq(stub_count(&stub.heads), 2);
	object_put(&SRV.d, o2);
	object_put(&SRV.d, o);
}

/* OPEN of key, run to its end: its error (an object it got is let go). */
static int open_key(const char *key)
{
	struct top t = {0};
	struct top *p = &t;
	fetch_open(&SRV.d.shards[0], &t.op, SRV.d.datasets[0], key);
	run_until(&p, 1);
	if (t.op.obj)
		object_put(&SRV.d, t.op.obj);
	free(t.op.cause);
	return t.op.err;
}

/* A 404 is remembered (no second HEAD within the TTL), and however many
 * keys are asked for, the table stays in its budget: the least recently
 * used entries go, and an evicted missing key is asked for again. */
Test(fetch, missing_keys_are_remembered_within_the_budget)
{
	struct shard *sh = &SRV.d.shards[0];
	sh->objects_budget = 64 * 1024; /* ~300 entries */
	char key[32];
	uint64_t heads = sh->m.s3_head;
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "miss-%05d", i);
		cr_assert_eq(open_key(key), -ENOENT, "%s", key);
		cr_assert_leq(sh->objects_bytes, sh->objects_budget);
	}
	cr_assert_eq(sh->m.s3_head - heads, 1000);
	cr_assert_gt(sh->m.meta_evicted, 500);
	cr_assert_eq(sh->m.meta_bytes, sh->objects_bytes);
	/* The newest are remembered: ENOENT without asking S3. */
	heads = sh->m.s3_head;
	for (int i = 900; i < 1000; i++) {
		snprintf(key, sizeof(key), "miss-%05d", i);
		cr_assert_eq(open_key(key), -ENOENT, "%s", key);
	}
	cr_assert_eq(sh->m.s3_head, heads, "a remembered 404 was asked again");
	cr_assert_eq(sh->m.meta_negative_hits, 100);
	/* The oldest were evicted: S3 is asked again. */
	cr_assert_eq(open_key("miss-00000"), -ENOENT);
	cr_assert_eq(sh->m.s3_head, heads + 1);
	/* A key that exists is served, and its entry is not a 404. */
	cr_assert_eq(open_key("obj"), 0);
	cr_assert_eq(open_key("obj"), 0);
	cr_assert_eq(sh->m.s3_head, heads + 2, "obj's metadata is kept");
}
