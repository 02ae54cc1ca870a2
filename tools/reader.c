/* reader.c - rc-reader: the demo client. Attaches to ringcached, walks a
 * dataset with LIST, reads every object through the rings (zero-copy READ,
 * or READ_INTO a registered buffer with --into) and prints what it read,
 * a checksum, and how fast. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ringcache.h"
#include "vec.h"

#define LIST_BUF (1u << 20)
#define READ_BUF (64u << 20)

struct walk {
	char **keys;
	uint64_t *sizes;
	size_t n;
	uint32_t cap;
};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static int add_key(struct walk *w, const char *key, uint64_t size)
{
	/* Two arrays, one capacity: keys may end up the larger. */
	uint32_t key_cap = w->cap;
	if (RC_GROW(w->keys, key_cap, w->n + 1) ||
	    RC_GROW(w->sizes, w->cap, w->n + 1))
		return -ENOMEM;
	if (!(w->keys[w->n] = strdup(key)))
		return -ENOMEM;
	w->sizes[w->n++] = size;
	return 0;
}

/* Depth-first over LIST's directory levels. */
static int walk(struct rc_client *c, int ds, uint32_t buf, const uint8_t *mem,
		const char *prefix, struct walk *w)
{
	uint64_t start = 0;
	int more = 1;
	while (more) {
		int n = rc_list(c, ds, prefix, start, buf, 0, LIST_BUF, &more);
		if (n < 0)
			return n;
		const struct rc_list_entry *e = (const void *)mem;
		char **dirs = calloc((size_t)n + 1, sizeof(*dirs));
		int nd = 0;
		for (int i = 0; i < n; i++, e = rc_list_next(e)) {
			char name[RC_MAX_KEY + 1];
			snprintf(name, sizeof(name), "%.*s", e->name_len,
				 rc_list_name(e));
			if (e->is_prefix)
				dirs[nd++] = strdup(name);
			else if (add_key(w, name, e->size) < 0)
				return -ENOMEM;
		}
		start += (uint64_t)n;
		for (int i = 0; i < nd; i++) {
			int r = walk(c, ds, buf, mem, dirs[i], w);
			free(dirs[i]);
			if (r < 0)
				return r;
		}
		free(dirs);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *sock = NULL, *dataset = "sample", *prefix = "";
	int into = 0, quiet = 0, passes = 1;
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"dataset", required_argument, NULL, 'd'},
		{"prefix", required_argument, NULL, 'p'},
		{"into", no_argument, NULL, 'i'},
		{"passes", required_argument, NULL, 'n'},
		{"quiet", no_argument, NULL, 'q'},
		{0},
	};
	int o;
	while ((o = getopt_long(argc, argv, "s:d:p:in:q", opts, NULL)) != -1) {
		switch (o) {
		case 's': sock = optarg; break;
		case 'd': dataset = optarg; break;
		case 'p': prefix = optarg; break;
		case 'i': into = 1; break;
		case 'n': passes = atoi(optarg); break;
		case 'q': quiet = 1; break;
		default:
			fprintf(stderr, "usage: rc-reader [-s SOCKET] [-d DATASET] "
				"[-p PREFIX] [--into] [--passes N] [-q]\n");
			return 2;
		}
	}
	struct rc_client c;
	int r = rc_attach(&c, sock, NULL);
	if (r < 0) {
		fprintf(stderr, "rc-reader: attach: %s\n", rc_strerror(r));
		return 1;
	}
	int ds = rc_dataset(&c, dataset);
	void *list_mem, *read_mem;
	int lb = ds >= 0 ? rc_alloc_buffer(&c, LIST_BUF, &list_mem) : ds;
	int rb = lb >= 0 ? rc_alloc_buffer(&c, READ_BUF, &read_mem) : lb;
	struct walk w = {0};
	if (rb < 0 || (r = walk(&c, ds, (uint32_t)lb, list_mem, prefix, &w)) < 0) {
		fprintf(stderr, "rc-reader: dataset %s: %s\n", dataset,
			rc_strerror(rb < 0 ? rb : r));
		return 1;
	}
	printf("dataset %s: %zu objects under '%s'\n", dataset, w.n, prefix);
	for (int pass = 1; pass <= passes; pass++) {
		uint64_t bytes = 0, sum = 1469598103934665603ull;
		double t0 = rc_now_s();
		for (size_t i = 0; i < w.n; i++) {
			struct rc_stat st;
			int h = rc_open(&c, ds, w.keys[i], &st);
			if (h < 0) {
				fprintf(stderr, "%s: %s\n", w.keys[i], rc_strerror(h));
				return 1;
			}
			uint64_t h_sum = 1469598103934665603ull;
			for (uint64_t off = 0; off < st.size;) {
				if (into) {
					uint64_t n = st.size - off < READ_BUF ? st.size - off : READ_BUF;
					ssize_t got = rc_read_into(&c, (uint32_t)h, off, n, (uint32_t)rb, 0);
					if (got <= 0) {
						fprintf(stderr, "%s: %s\n", w.keys[i], rc_strerror((int)got));
						return 1;
					}
					h_sum = fnv1a(h_sum, read_mem, (size_t)got);
					off += (uint64_t)got;
					continue;
				}
				struct rc_extent ext[16];
				int n = rc_read(&c, (uint32_t)h, off, 16ull << 20, ext, 16);
				if (n <= 0) {
					fprintf(stderr, "%s: %s\n", w.keys[i], rc_strerror(n ? n : -EIO));
					return 1;
				}
				for (int k = 0; k < n; k++) {
					h_sum = fnv1a(h_sum, ext[k].data, ext[k].len);
					off += ext[k].len;
					rc_release(&c, ext[k].lease);
				}
			}
			rc_close(&c, (uint32_t)h);
			bytes += st.size;
			sum ^= h_sum;
			if (!quiet && pass == 1 && (i < 5 || i + 1 == w.n))
				printf("  %-40s %10llu bytes  fnv1a %016llx\n",
				       w.keys[i], (unsigned long long)st.size,
				       (unsigned long long)h_sum);
			else if (!quiet && pass == 1 && i == 5)
				printf("  ...\n");
		}
		double dt = rc_now_s() - t0;
		printf("pass %d (%s, %s): %zu objects, %.1f MB in %.3f s = %.1f MB/s, "
		       "%.0f objects/s, checksum %016llx\n", pass,
		       pass == 1 ? "cold" : "warm", into ? "READ_INTO" : "zero-copy READ",
		       w.n, (double)bytes / 1e6, dt, (double)bytes / 1e6 / dt,
		       (double)w.n / dt, (unsigned long long)sum);
	}
	rc_detach(&c);
	return 0;
}
