/* cli.c - the `ringcache` command: an operator's view of a running
 * ringcached (status, stats) and a client's (ls, cat, prefetch), built only
 * on the public client library (include/ringcache.h).
 *
 * Exit codes: 0 success, 1 the daemon or S3 said no (message on stderr),
 * 2 bad usage. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "mount.h"
#include "ringcache.h"
#include "vec.h"
#include "version.h"

#define EXIT_FAIL 1
#define EXIT_USAGE 2

#define DEFAULT_SOCKET "/run/ringcache/ringcache.sock"
#define STATS_BUF (64u * 1024u)
#define LIST_BUF (1u << 20)
#define CAT_MAX_EXT 16
#define CAT_CHUNK (16ull << 20)
#define PF_CHUNK (4ull << 20)  /* bytes per READ_INTO while prefetching */
#define PF_DEPTH 8             /* READ_INTOs in flight */
#define PF_BATCH 32            /* objects opened at once */
#define BAR_WIDTH 30

static const char *socket_opt; /* -s, else NULL: the library's default */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ringcache [-s SOCKET] COMMAND [ARGS]\n"
		"       ringcache --version\n"
		"\n"
		"Commands:\n"
		"  status                    daemon health: sessions, leases, cache,\n"
		"                            hit ratio, huge pages (and why not),\n"
		"                            S3 requests, write-back and\n"
		"                            its backlog, prefetch, read wait per\n"
		"                            GPU, uptime\n"
		"  stats [--prometheus]      all counters (name value), or the raw\n"
		"                            Prometheus text exposition\n"
		"  ls DATASET [PREFIX]       one directory level: size and name,\n"
		"                            directories end with '/'\n"
		"  cat DATASET KEY           an object's bytes to stdout\n"
		"  prefetch DATASET PREFIX   read every object under PREFIX into\n"
		"                            the cache (progress bar on a terminal)\n"
		"  mount [-f] [-o OPTS] DATASET DIR\n"
		"                            the dataset as a file system at DIR\n"
		"                            (FUSE; docs/MOUNT.md)\n"
		"  sync                      wait until S3 has every committed\n"
		"                            checkpoint object, on every shard\n"
		"  help                      this text\n"
		"\n"
		"SOCKET defaults to $RINGCACHE_SOCKET, else " DEFAULT_SOCKET ".\n"
		"Exit status: 0 ok, 1 the daemon or S3 failed, 2 bad usage.\n");
}

static const char *socket_shown(void)
{
	const char *env = getenv("RINGCACHE_SOCKET");

	if (socket_opt)
		return socket_opt;
	return env && *env ? env : DEFAULT_SOCKET;
}

static int fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("ringcache: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_FAIL;
}

/* ---- status and stats: no attach, just the STATS message --------------- */

/* Connecting fails for the socket's reasons, not a dataset's. */
static const char *reach_error(int err)
{
	if (err == -EACCES || err == -EPERM)
		return "permission denied on the socket (its socket_mode and "
		       "group decide who may connect)";
	return rc_strerror(err);
}

static int fetch_stats(char *buf, size_t len)
{
	ssize_t n = rc_stats(NULL, socket_opt, buf, len);

	if (n < 0)
		return fail("cannot reach the daemon at %s: %s", socket_shown(),
			    reach_error((int)n));
	return 0;
}

/* Sum of every sample of metric `name` (all label sets); -1 if absent. */
static int64_t metric(const char *text, const char *name)
{
	size_t nl = strlen(name);
	int64_t sum = -1;

	for (const char *p = text; *p; ) {
		const char *eol = strchrnul(p, '\n');

		if (strncmp(p, name, nl) == 0 &&
		    (p[nl] == ' ' || p[nl] == '{')) {
			const char *v = memchr(p + nl, ' ', (size_t)(eol - p - nl));
			if (v)
				sum = (sum < 0 ? 0 : sum) + strtoll(v + 1, NULL, 10);
		}
		p = *eol ? eol + 1 : eol;
	}
	return sum;
}

static const char *human_bytes(uint64_t b, char *out, size_t len)
{
	static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(out, len, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
	return out;
}

static const char *human_duration(uint64_t s, char *out, size_t len)
{
	uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;

	if (d)
		snprintf(out, len, "%" PRIu64 "d %" PRIu64 "h %" PRIu64 "m", d, h, m);
	else if (h)
		snprintf(out, len, "%" PRIu64 "h %" PRIu64 "m", h, m);
	else if (m)
		snprintf(out, len, "%" PRIu64 "m %" PRIu64 "s", m, s % 60);
	else
		snprintf(out, len, "%" PRIu64 "s", s);
	return out;
}

/* A counter for display: 0 when this daemon does not export it. */
static uint64_t counter(const char *text, const char *name)
{
	int64_t v = metric(text, name);

	return v < 0 ? 0 : (uint64_t)v;
}

/* The value of label lname of metric name's first sample, unescaped:
 * false if there is none. */
static bool label(const char *text, const char *name, const char *lname,
		  char *out, size_t len)
{
	char want[160];
	snprintf(want, sizeof(want), "\n%s{%s=\"", name, lname);
	const char *p = strstr(text, want);
	if (!p || len == 0)
		return false;
	size_t n = 0;
	for (p += strlen(want); *p && *p != '"' && n + 1 < len; p++) {
		bool escaped = *p == '\\' && p[1];
		if (escaped)
			p++;
		out[n++] = escaped && *p == 'n' ? '\n' : *p;
	}
	out[n] = '\0';
	return true;
}

/* Whether the daemon runs what its config file says, and if not why. */
static void print_config_state(const char *t)
{
	static const char pending[] = "ringcache_config_restart_pending{key=\"";
	bool same = true;
	if (counter(t, "ringcache_config_reload_refused")) {
		char why[1024];
		printf("  config      the last reload was refused, it runs the "
		       "config it had: %s\n",
		       label(t, "ringcache_config_reload_refused_reason",
			     "reason", why, sizeof(why)) ? why
		       : "the daemon's log says why");
		same = false;
	} else if (counter(t, "ringcache_config_file_changed")) {
		printf("  config      the file changed since it was loaded: "
		       "reload it (SIGHUP)\n");
		same = false;
	}
	const char *p = t;
	bool first = true;
	while ((p = strstr(p, pending)) != NULL) {
		p += sizeof(pending) - 1;
		size_t n = strcspn(p, "\"");
		printf("%s%.*s", first ? "  config      differs from the file "
			"until a restart: " : ", ", (int)n, p);
		first = false;
		same = false;
	}
	if (!first)
		putchar('\n');
	if (same)
		printf("  config      as in the file\n");
}

/* What write-back still owes S3: objects, bytes, the oldest's age. */
static void print_backlog(const char *t)
{
	char a[32], b[32];
	int64_t age = metric(t, "ringcache_writeback_oldest_unuploaded_seconds");
	uint64_t n = counter(t, "ringcache_writeback_backlog_objects");
	printf("  backlog     %" PRIu64 " objects (%s) not yet in S3", n,
	       human_bytes(counter(t, "ringcache_writeback_backlog_bytes"), a,
			   sizeof(a)));
	if (n && age >= 0)
		printf(", the oldest committed %s ago",
		       human_duration((uint64_t)age, b, sizeof(b)));
	printf(", %s staged in memory\n",
	       human_bytes(counter(t, "ringcache_writeback_staged_bytes"), a,
			   sizeof(a)));
	uint64_t lacks = counter(t, "ringcache_writeback_failed_objects");
	if (lacks)
		printf("  not in S3   %" PRIu64 " committed object%s whose "
		       "upload failed (the log names them); a SYNC of all by "
		       "their writer fails until they land\n", lacks,
		       lacks == 1 ? "" : "s");
}

/* Number of samples of a labelled metric (e.g. queues with a plan). */
static unsigned samples(const char *text, const char *name)
{
	size_t nl = strlen(name);
	unsigned n = 0;
	for (const char *p = text; *p; ) {
		const char *eol = strchrnul(p, '\n');
		if (!strncmp(p, name, nl) && p[nl] == '{')
			n++;
		p = *eol ? eol + 1 : eol;
	}
	return n;
}

static void print_prefetch(const char *t)
{
	char a[32], b[32];
	printf("  prefetch    %s fetched ahead, %s pinned unread, %u queues "
	       "with a plan, %" PRIu64 " GETs cancelled, %" PRIu64
	       " windows shed\n",
	       human_bytes(counter(t, "ringcache_prefetch_bytes_total"), a,
			   sizeof(a)),
	       human_bytes(counter(t, "ringcache_prefetch_pinned_bytes"), b,
			   sizeof(b)),
	       samples(t, "ringcache_queue_prefetch_bytes"),
	       counter(t, "ringcache_prefetch_cancelled_total"),
	       counter(t, "ringcache_prefetch_shed_total"));
}

/* Each queue with a plan: the machine's GPU it serves and its NUMA node,
 * so an operator sees where a rank's CUDA_VISIBLE_DEVICES put it. */
static void print_queues(const char *t)
{
	static const char name[] = "ringcache_queue_prefetch_bytes{";
	bool first = true;
	for (const char *p = t; (p = strstr(p, name)) != NULL; p++) {
		unsigned shard, queue;
		int gpu, node;
		if (sscanf(p + sizeof(name) - 1,
			   "shard=\"%u\",queue=\"%u\",gpu=\"%d\",node=\"%d\"",
			   &shard, &queue, &gpu, &node) != 4)
			continue;
		if (gpu >= 0)
			printf("%s queue %u: gpu %d, node %d (shard %u)",
			       first ? "  queues     " : ";", queue, gpu, node,
			       shard);
		else
			printf("%s queue %u: no gpu, node %d (shard %u)",
			       first ? "  queues     " : ";", queue, node, shard);
		first = false;
	}
	if (!first)
		putchar('\n');
}

/* The data stall per GPU: reads and mean wait, from the histogram's
 * _count and _sum lines ({gpu="G"} each). */
static void print_read_wait(const char *t)
{
	static const char cnt[] = "ringcache_read_wait_seconds_count{gpu=\"";
	static const char sum[] = "ringcache_read_wait_seconds_sum{gpu=\"";
	bool first = true;
	for (const char *p = t; (p = strstr(p, cnt)) != NULL; ) {
		p += sizeof(cnt) - 1;
		size_t gl = strcspn(p, "\"");
		if (gl > 16 || p[gl] != '"')
			break;
		char gpu[17], key[sizeof(sum) + 20];
		memcpy(gpu, p, gl);
		gpu[gl] = 0;
		const char *v = strchr(p, ' ');
		double n = v ? strtod(v + 1, NULL) : 0;
		snprintf(key, sizeof(key), "%s%s\"} ", sum, gpu);
		const char *s = strstr(t, key);
		double secs = s ? strtod(s + strlen(key), NULL) : 0;
		printf("%s gpu %s: %.0f reads, mean wait %.3f ms", first ?
		       "  read wait  " : ";", gpu, n, n ? secs * 1e3 / n : 0.0);
		first = false;
	}
	if (first)
		printf("  read wait   no reads yet");
	putchar('\n');
}

/* Copies the value of label `name` from a sample line, undoing the
 * exposition format's escapes; "" when absent. */
static void label_value(const char *line, const char *name, char *out,
			size_t len)
{
	char key[64];
	snprintf(key, sizeof(key), "%s=\"", name);
	const char *p = strstr(line, key);
	const char *eol = strchrnul(line, '\n');
	size_t n = 0;
	if (p && p < eol)
		for (p += strlen(key); p < eol && *p != '"' && n + 1 < len; p++) {
			bool escaped = *p == '\\' && p + 1 < eol;
			if (escaped)
				p++;
			out[n++] = escaped && *p == 'n' ? ' ' : *p;
		}
	out[n] = 0;
}

/* Whether S3 answers: during an outage, since when, where and why. */
static void print_s3_reach(const char *t)
{
	static const char down[] = "ringcache_s3_unreachable_since_seconds{";
	const char *p = strstr(t, down);
	char ep[512] = "", err[512] = "", a[32];
	uint64_t outages = counter(t, "ringcache_s3_outages_total");
	if (metric(t, "ringcache_s3_reachable") < 0)
		return; /* an older daemon */
	if (!p) {
		const char *r = strstr(t, "ringcache_s3_reachable{");
		if (r)
			label_value(r, "endpoint", ep, sizeof(ep));
		printf("  S3 endpoint %s reachable, %" PRIu64 " outage%s since "
		       "start\n", ep, outages, outages == 1 ? "" : "s");
		return;
	}
	label_value(p, "endpoint", ep, sizeof(ep));
	label_value(p, "error", err, sizeof(err));
	const char *v = strchr(p, '}');
	double since = v ? strtod(v + 1, NULL) : 0;
	time_t when = (time_t)since;
	char stamp[40];
	struct tm tm;
	localtime_r(&when, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S %Z", &tm);
	double now = (double)time(NULL);
	printf("  S3 endpoint %s UNREACHABLE since %s (%s): %s; reads wait "
	       "for it within retry_budget\n", ep, stamp,
	       human_duration(now > since ? (uint64_t)(now - since) : 0, a,
			      sizeof(a)), err);
}

/* Huge-page bytes against arena bytes, and the start-up verdict (what the
 * arenas get and, if 4 KiB pages, why and the fix). */
static void print_hugepages(const char *t)
{
	char why[1024], a[32], b[32];
	if (!label(t, "ringcache_arena_hugepages", "reason", why, sizeof(why)))
		return; /* an older daemon */
	uint64_t res = counter(t, "ringcache_arena_resident_bytes");
	uint64_t huge = counter(t, "ringcache_arena_hugepage_bytes");
	printf("  huge pages  %s of %s arena memory in 2 MiB pages (%.0f%%): "
	       "%s\n", human_bytes(huge, a, sizeof(a)),
	       human_bytes(res, b, sizeof(b)),
	       res ? 100.0 * (double)huge / (double)res : 0.0, why);
}

static int cmd_status(void)
{
	char *t = malloc(STATS_BUF);
	char a[32], b[32];

	if (!t)
		return fail("out of memory");
	if (fetch_stats(t, STATS_BUF)) {
		free(t);
		return EXIT_FAIL;
	}
	uint64_t hits = counter(t, "ringcache_cache_hits_total");
	uint64_t misses = counter(t, "ringcache_cache_misses_total");
	uint64_t used = counter(t, "ringcache_arena_bytes_used");
	uint64_t total = counter(t, "ringcache_arena_capacity_bytes");

	printf("ringcached at %s\n", socket_shown());
	printf("  uptime      %s\n", human_duration(
		counter(t, "ringcache_uptime_seconds"), a, sizeof(a)));
	printf("  sessions    %" PRIu64 " active, %" PRIu64 " since start\n",
	       counter(t, "ringcache_sessions_active"),
	       counter(t, "ringcache_sessions_total"));
	printf("  leases      %" PRIu64 " active, %" PRIu64 " open handles\n",
	       counter(t, "ringcache_leases_active"),
	       counter(t, "ringcache_handles_open"));
	uint64_t cached = counter(t, "ringcache_cache_bytes");
	char c[32];
	printf("  cache       %s cached in %s used of %s (%.1f%%), %" PRIu64
	       " blocks, %" PRIu64 " evictions\n",
	       human_bytes(cached, c, sizeof(c)),
	       human_bytes(used, a, sizeof(a)),
	       human_bytes(total, b, sizeof(b)),
	       total ? 100.0 * (double)used / (double)total : 0.0,
	       counter(t, "ringcache_cache_entries"),
	       counter(t, "ringcache_cache_evictions_total"));
	if (hits + misses)
		printf("  hit ratio   %.1f%% (%" PRIu64 " hits, %" PRIu64
		       " misses)\n", 100.0 * (double)hits /
		       (double)(hits + misses), hits, misses);
	else
		printf("  hit ratio   - (0 hits, 0 misses)\n");
	print_hugepages(t);
	printf("  S3          %" PRIu64 " GETs (%s), %" PRIu64 " errors, %"
	       PRIu64 " retries, %" PRIu64 " in flight\n",
	       counter(t, "ringcache_s3_get_total"),
	       human_bytes(counter(t, "ringcache_s3_bytes_total"), a, sizeof(a)),
	       counter(t, "ringcache_s3_errors_total"),
	       counter(t, "ringcache_s3_retries_total"),
	       counter(t, "ringcache_s3_inflight"));
	print_s3_reach(t);
	printf("  write-back  %" PRIu64 " committed, %" PRIu64 " uploaded, %"
	       PRIu64 " failed (%" PRIu64 " refused by S3 for good), journal "
	       "%s used of %s\n",
	       counter(t, "ringcache_writeback_committed_total"),
	       counter(t, "ringcache_writeback_uploaded_total"),
	       counter(t, "ringcache_writeback_failed_total"),
	       counter(t, "ringcache_writeback_rejected_total"),
	       human_bytes(counter(t, "ringcache_writeback_journal_used_bytes"),
			   a, sizeof(a)),
	       human_bytes(counter(t, "ringcache_writeback_journal_bytes"), b,
			   sizeof(b)));
	print_backlog(t);
	print_prefetch(t);
	print_queues(t);
	print_read_wait(t);
	print_config_state(t);
	free(t);
	return 0;
}

/* Without --prometheus: "name value" lines, the HELP/TYPE comments gone. */
static int cmd_stats(int argc, char **argv)
{
	bool prom = argc == 2 && strcmp(argv[1], "--prometheus") == 0;
	char *t;

	if (argc > 2 || (argc == 2 && !prom)) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (!(t = malloc(STATS_BUF)))
		return fail("out of memory");
	if (fetch_stats(t, STATS_BUF)) {
		free(t);
		return EXIT_FAIL;
	}
	for (const char *p = t; *p; ) {
		const char *eol = strchrnul(p, '\n');

		if (prom || *p != '#')
			printf("%.*s\n", (int)(eol - p), p);
		p = *eol ? eol + 1 : eol;
	}
	free(t);
	return 0;
}

/* ---- commands that attach --------------------------------------------- */

struct session {
	struct rc_client c;
	int ds;
};

static int open_session(struct session *s, const char *dataset)
{
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(&s->c, socket_opt, &o);

	if (r < 0)
		return fail("cannot attach to the daemon at %s: %s",
			    socket_shown(), reach_error(r));
	s->ds = rc_dataset(&s->c, dataset);
	if (s->ds == -ENOENT) {
		rc_detach(&s->c);
		return fail("unknown dataset '%s' (not in the daemon's running "
			    "config)", dataset);
	}
	if (s->ds < 0) {
		r = s->ds;
		rc_detach(&s->c);
		return fail("dataset '%s': %s", dataset, rc_strerror(r));
	}
	return 0;
}

/* Calls fn on every record of one LIST level under prefix. */
typedef int (*list_fn)(const struct rc_list_entry *e, void *arg);

static int list_level(struct session *s, uint32_t buf, const void *mem,
		      const char *prefix, list_fn fn, void *arg)
{
	uint64_t start = 0;
	int more = 1;

	while (more) {
		int n = rc_list(&s->c, s->ds, prefix, start, buf, 0, LIST_BUF,
				&more);
		if (n < 0)
			return n;
		if (n == 0 && more)
			return -ENAMETOOLONG; /* one record larger than the buffer */
		const struct rc_list_entry *e = mem;
		for (int i = 0; i < n; i++, e = rc_list_next(e)) {
			int r = fn(e, arg);
			if (r < 0)
				return r;
		}
		start += (uint64_t)n;
	}
	return 0;
}

static int print_entry(const struct rc_list_entry *e, void *arg)
{
	bool slash = e->is_prefix && (e->name_len == 0 ||
				      rc_list_name(e)[e->name_len - 1] != '/');

	(void)arg;
	if (e->is_prefix)
		printf("%12s  %.*s%s\n", "-", e->name_len, rc_list_name(e),
		       slash ? "/" : "");
	else
		printf("%12" PRIu64 "  %.*s\n", e->size, e->name_len,
		       rc_list_name(e));
	return 0;
}

static int cmd_ls(int argc, char **argv)
{
	struct session s;
	void *mem;
	const char *prefix = argc == 3 ? argv[2] : "";

	if (argc < 2 || argc > 3) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (open_session(&s, argv[1]))
		return EXIT_FAIL;
	int buf = rc_alloc_buffer(&s.c, LIST_BUF, &mem);
	int r = buf < 0 ? buf :
		list_level(&s, (uint32_t)buf, mem, prefix, print_entry, NULL);
	/* The daemon's words (dataset, bucket, cause), asked before detaching. */
	const char *why = r < 0 ? rc_last_error(&s.c, r) : NULL;
	rc_detach(&s.c);
	if (r < 0)
		return fail("ls %s '%s': %s", argv[1], prefix, why);
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Zero-copy: every extent is written from the arena mapping itself. */
static int cat_object(struct rc_client *c, uint32_t h, uint64_t size)
{
	for (uint64_t off = 0; off < size; ) {
		struct rc_extent ext[CAT_MAX_EXT];
		int n = rc_read(c, h, off, CAT_CHUNK, ext, CAT_MAX_EXT);
		int err = 0;

		if (n <= 0)
			return n ? n : -EIO; /* EOF before size: it shrank */
		for (int i = 0; i < n; i++) {
			if (!err && !ext[i].data)
				err = -EFAULT;
			if (!err)
				err = write_all(STDOUT_FILENO, ext[i].data,
						ext[i].len);
			off += ext[i].len;
			if (ext[i].lease != RC_NO_LEASE)
				rc_release(c, ext[i].lease);
		}
		if (err)
			return err;
	}
	return 0;
}

static int cmd_cat(int argc, char **argv)
{
	struct session s;
	struct rc_stat st;

	if (argc != 3) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (open_session(&s, argv[1]))
		return EXIT_FAIL;
	int h = rc_open(&s.c, s.ds, argv[2], &st);
	int r = h < 0 ? h : cat_object(&s.c, (uint32_t)h, st.size);
	const char *why = r < 0 ? rc_last_error(&s.c, r) : NULL;
	if (h >= 0)
		rc_close(&s.c, (uint32_t)h);
	rc_detach(&s.c);
	if (r < 0)
		return fail("cat %s '%s': %s", argv[1], argv[2], why);
	return 0;
}

/* ---- prefetch ----------------------------------------------------------- */

struct object_list {
	char **keys;
	uint64_t *sizes;
	size_t n;
	uint32_t keys_cap, sizes_cap;
	uint64_t bytes;
	char **dirs; /* directories of the level being walked */
	size_t n_dirs;
	uint32_t dirs_cap;
};

static int push(char ***v, size_t *n, uint32_t *cap, const char *s, size_t len)
{
	if (RC_GROW_FROM(*v, *cap, *n + 1, 64))
		return -ENOMEM;
	if (!((*v)[*n] = strndup(s, len)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

static int collect_entry(const struct rc_list_entry *e, void *arg)
{
	struct object_list *ol = arg;

	if (e->is_prefix)
		return push(&ol->dirs, &ol->n_dirs, &ol->dirs_cap,
			    rc_list_name(e), e->name_len);
	if (RC_GROW_FROM(ol->sizes, ol->sizes_cap, ol->n + 1, 64))
		return -ENOMEM;
	int r = push(&ol->keys, &ol->n, &ol->keys_cap, rc_list_name(e),
		     e->name_len);
	if (r < 0)
		return r;
	ol->sizes[ol->n - 1] = e->size;
	ol->bytes += e->size;
	return 0;
}

/* Every object under prefix, depth first. */
static int collect(struct session *s, uint32_t buf, const void *mem,
		   const char *prefix, struct object_list *ol)
{
	size_t first = ol->n_dirs;
	int r = list_level(s, buf, mem, prefix, collect_entry, ol);

	for (size_t i = first; r == 0 && i < ol->n_dirs; i++)
		r = collect(s, buf, mem, ol->dirs[i], ol);
	return r;
}

static void free_object_list(struct object_list *ol)
{
	for (size_t i = 0; i < ol->n; i++)
		free(ol->keys[i]);
	for (size_t i = 0; i < ol->n_dirs; i++)
		free(ol->dirs[i]);
	free(ol->keys);
	free(ol->sizes);
	free(ol->dirs);
}

struct progress {
	bool tty;
	size_t objects, total_objects, failed;
	uint64_t bytes, total_bytes;
	double t0, last_draw;
};

static void draw(struct progress *p, bool final)
{
	double now = rc_now_s(), dt = now - p->t0;
	double frac = p->total_bytes ?
		(double)p->bytes / (double)p->total_bytes : 1.0;
	int fill = (int)(frac * BAR_WIDTH);
	char bar[BAR_WIDTH + 1];

	if (!p->tty && !final)
		return;
	if (!final && now - p->last_draw < 0.1)
		return;
	p->last_draw = now;
	memset(bar, '#', (size_t)fill);
	memset(bar + fill, '.', (size_t)(BAR_WIDTH - fill));
	bar[BAR_WIDTH] = 0;
	fprintf(stderr, "%s[%s] %zu/%zu objects  %.1f/%.1f MB  %.1f MB/s%s",
		p->tty ? "\r" : "", bar, p->objects, p->total_objects,
		(double)p->bytes / 1e6, (double)p->total_bytes / 1e6,
		dt > 0 ? (double)p->bytes / 1e6 / dt : 0.0,
		final ? "\n" : "");
}

/* One batch of open objects, read with READ_INTO chunks kept PF_DEPTH deep
 * in flight: the cold case waits on S3, so overlapping requests is what
 * makes warming fast. The bytes land in a scratch buffer and are dropped. */
struct batch {
	int handle[PF_BATCH];
	uint64_t size[PF_BATCH], next_off[PF_BATCH], left[PF_BATCH];
	const char *key[PF_BATCH];
	int err[PF_BATCH];
	size_t n, cursor;
};

static bool next_chunk(struct batch *b, size_t *obj, uint64_t *off,
		       uint64_t *len)
{
	for (; b->cursor < b->n; b->cursor++) {
		size_t i = b->cursor;
		if (b->handle[i] < 0 || b->next_off[i] >= b->size[i])
			continue;
		*obj = i;
		*off = b->next_off[i];
		*len = b->size[i] - *off < PF_CHUNK ? b->size[i] - *off : PF_CHUNK;
		b->next_off[i] += *len;
		return true;
	}
	return false;
}

static void object_done(struct batch *b, size_t i, struct progress *p)
{
	p->objects++;
	if (b->err[i]) {
		p->failed++;
		if (p->tty)
			fputc('\n', stderr);
		fprintf(stderr, "ringcache: prefetch '%s': %s\n", b->key[i],
			rc_strerror(b->err[i]));
	}
}

static int read_batch(struct rc_client *c, struct batch *b, uint32_t buf,
		      struct progress *p)
{
	size_t slot_obj[PF_DEPTH], free_slots[PF_DEPTH], n_free = PF_DEPTH;
	uint64_t slot_off[PF_DEPTH], slot_len[PF_DEPTH];
	unsigned inflight = 0;

	for (size_t i = 0; i < PF_DEPTH; i++)
		free_slots[i] = i;
	for (;;) {
		size_t obj;
		uint64_t off, len;
		while (n_free && next_chunk(b, &obj, &off, &len)) {
			struct rc_sqe *sqe = rc_get_sqe(c);
			if (!sqe) {
				b->next_off[obj] -= len; /* retry later */
				break;
			}
			size_t slot = free_slots[--n_free];
			slot_obj[slot] = obj;
			slot_off[slot] = off;
			slot_len[slot] = len;
			rc_prep_read_into(sqe, (uint32_t)b->handle[obj], off, len,
					  buf, slot * PF_CHUNK, slot);
			inflight++;
		}
		int r = rc_submit(c);
		if (r < 0)
			return r;
		if (!inflight)
			return 0;
		struct rc_cqe *cqe;
		if ((r = rc_wait_cqe(c, &cqe)) == -ECONNRESET) {
			/* The daemon restarted: the session is back (handles
			 * re-opened, the buffer registered again) without
			 * the chunks in flight. Those go again. */
			bool busy[PF_DEPTH];
			for (size_t k = 0; k < PF_DEPTH; k++)
				busy[k] = true;
			for (size_t k = 0; k < n_free; k++)
				busy[free_slots[k]] = false;
			for (size_t k = 0; k < PF_DEPTH; k++) {
				if (!busy[k])
					continue;
				struct rc_sqe *sqe = rc_get_sqe(c);
				if (!sqe)
					return -EBUSY; /* a smaller ring */
				rc_prep_read_into(sqe,
						  (uint32_t)b->handle[slot_obj[k]],
						  slot_off[k], slot_len[k], buf,
						  k * PF_CHUNK, k);
			}
			continue;
		}
		if (r < 0)
			return r;
		size_t slot = (size_t)cqe->user_data;
		size_t i = slot_obj[slot];
		if (cqe->res < 0 && !b->err[i])
			b->err[i] = cqe->res;
		else if (cqe->res > 0)
			p->bytes += (uint64_t)cqe->res;
		rc_cqe_seen(c);
		free_slots[n_free++] = slot;
		inflight--;
		/* A chunk's completion can be the object's last one. */
		if (b->left[i] > 0 && --b->left[i] == 0)
			object_done(b, i, p);
		draw(p, false);
	}
}

static uint64_t chunks_of(uint64_t size)
{
	return (size + PF_CHUNK - 1) / PF_CHUNK;
}

/* Opens objects [from, from+n) of ol synchronously (no async in flight),
 * then reads them. */
static int prefetch_batch(struct rc_client *c, int ds, uint32_t buf,
			  const struct object_list *ol, size_t from, size_t n,
			  struct progress *p)
{
	struct batch b = {.n = n};
	int r;

	for (size_t k = 0; k < n; k++) {
		struct rc_stat st;
		b.key[k] = ol->keys[from + k];
		b.handle[k] = rc_open(c, ds, b.key[k], &st);
		b.err[k] = b.handle[k] < 0 ? b.handle[k] : 0;
		b.size[k] = b.handle[k] < 0 ? 0 : st.size;
		b.left[k] = chunks_of(b.size[k]);
		if (b.left[k] == 0)
			object_done(&b, k, p); /* empty, or failed to open */
	}
	r = read_batch(c, &b, buf, p);
	for (size_t k = 0; k < n; k++)
		if (b.handle[k] >= 0)
			rc_close(c, (uint32_t)b.handle[k]);
	return r;
}

static int cmd_prefetch(int argc, char **argv)
{
	struct session s;
	struct object_list ol = {0};
	void *list_mem, *read_mem;

	if (argc != 3) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (open_session(&s, argv[1]))
		return EXIT_FAIL;
	int lb = rc_alloc_buffer(&s.c, LIST_BUF, &list_mem);
	int rb = lb < 0 ? lb :
		rc_alloc_buffer(&s.c, PF_DEPTH * PF_CHUNK, &read_mem);
	int r = rb < 0 ? rb :
		collect(&s, (uint32_t)lb, list_mem, argv[2], &ol);
	if (r < 0) {
		const char *why = rc_last_error(&s.c, r);
		rc_detach(&s.c);
		free_object_list(&ol);
		return fail("prefetch %s '%s': %s", argv[1], argv[2], why);
	}
	if (ol.n == 0) {
		rc_detach(&s.c);
		free_object_list(&ol);
		return fail("prefetch %s: no objects under '%s'", argv[1],
			    argv[2]);
	}
	struct progress p = {.tty = isatty(STDERR_FILENO),
			     .total_objects = ol.n, .total_bytes = ol.bytes,
			     .t0 = rc_now_s()};
	for (size_t i = 0; r == 0 && i < ol.n; i += PF_BATCH)
		r = prefetch_batch(&s.c, s.ds, (uint32_t)rb, &ol, i,
				   ol.n - i < PF_BATCH ? ol.n - i : PF_BATCH,
				   &p);
	draw(&p, true);
	rc_detach(&s.c);
	free_object_list(&ol);
	if (r < 0)
		return fail("prefetch %s '%s': %s", argv[1], argv[2],
			    rc_strerror(r));
	if (p.failed)
		return fail("prefetch: %zu of %zu objects failed", p.failed,
			    p.total_objects);
	return 0;
}

/* ---- main --------------------------------------------------------------- */

/* ---- sync: every shard's committed objects in S3 ------------------------ */

/* Shards are reached through the NUMA node a session names; node hints past
 * the daemon's nodes fall back to shard 0, so trying every possible node
 * id meets every shard. */
#define SYNC_NODE_HINTS 64

static int sync_shard_of_node(int node, uint64_t *synced)
{
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = node};
	int r = rc_attach(&c, socket_opt, &o);

	if (r < 0)
		return fail("cannot attach to the daemon at %s: %s",
			    socket_shown(), rc_strerror(r));
	if (c.shard < 64 && !(*synced & (1ull << c.shard))) {
		r = rc_sync(&c, RC_SYNC_ALL);
		if (r < 0) {
			const char *why = rc_last_error(&c, r);
			rc_detach(&c);
			return fail("sync of shard %u: %s", c.shard, why);
		}
		*synced |= 1ull << c.shard;
	}
	rc_detach(&c);
	return 0;
}

static int cmd_sync(int argc, char **argv)
{
	uint64_t synced = 0;

	(void)argv;
	if (argc != 1) {
		usage(stderr);
		return EXIT_USAGE;
	}
	for (int node = 0; node < SYNC_NODE_HINTS; node++) {
		int r = sync_shard_of_node(node, &synced);
		if (r)
			return r;
	}
	printf("synced %d shard%s\n", __builtin_popcountll(synced),
	       __builtin_popcountll(synced) == 1 ? "" : "s");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{0},
	};
	int o;

	/* '+': options stop at the command, whose own flags follow it. */
	while ((o = getopt_long(argc, argv, "+s:hV", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			socket_opt = optarg;
			break;
		case 'V':
			printf("ringcache %s (commit %s, ABI %d)\n", rc_build_version,
			       rc_build_commit, RC_ABI_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EXIT_USAGE;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1) {
		usage(stderr);
		return EXIT_USAGE;
	}
	const char *cmd = argv[0];
	if (strcmp(cmd, "status") == 0) {
		if (argc == 1)
			return cmd_status();
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(cmd, "stats") == 0)
		return cmd_stats(argc, argv);
	if (strcmp(cmd, "ls") == 0)
		return cmd_ls(argc, argv);
	if (strcmp(cmd, "cat") == 0)
		return cmd_cat(argc, argv);
	if (strcmp(cmd, "prefetch") == 0)
		return cmd_prefetch(argc, argv);
	if (strcmp(cmd, "mount") == 0) {
#ifdef RC_HAVE_FUSE
		return mount_main(argc, argv, socket_opt);
#else
		return fail("mount: this ringcache was built without libfuse3 "
			    "(install libfuse3-dev and rebuild)");
#endif
	}
	if (strcmp(cmd, "sync") == 0)
		return cmd_sync(argc, argv);
	if (strcmp(cmd, "help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "ringcache: unknown command '%s'\n", cmd);
	usage(stderr);
	return EXIT_USAGE;
}
