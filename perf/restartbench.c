/* restartbench.c - owns the reader side of the restart benchmark
 * (perf/restartbench.sh): what a daemon restart costs a client that keeps
 * reading. It attaches, opens one object and reads it whole (rc_read,
 * zero-copy, released at once) in a loop; after --warm reads it creates
 * the --ready file, and once the library has re-attached (rc_reconnects)
 * and a read has been served by the new daemon it prints the wall-clock
 * time of that read's completion (CLOCK_REALTIME ns, comparable with the
 * script's `date +%s%N` taken before its SIGTERM) and exits 0. Every read
 * is checked against the first one's bytes.
 *
 * usage: rc-restartbench --socket PATH --dataset NAME --key KEY
 *                        --ready FILE [--warm N] [--timeout S] */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringcache.h"

#define MAX_EXT 64

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int die(const char *what, int err)
{
	fprintf(stderr, "rc-restartbench: %s: %s\n", what, rc_strerror(err));
	return 1;
}

int main(int argc, char **argv)
{
	const char *sock = NULL, *dataset = "bench", *key = NULL, *ready = NULL;
	long warm = 100, timeout_s = 120;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--socket"))
			sock = argv[i + 1];
		else if (!strcmp(argv[i], "--dataset"))
			dataset = argv[i + 1];
		else if (!strcmp(argv[i], "--key"))
			key = argv[i + 1];
		else if (!strcmp(argv[i], "--ready"))
			ready = argv[i + 1];
		else if (!strcmp(argv[i], "--warm"))
			warm = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--timeout"))
			timeout_s = atol(argv[i + 1]);
	}
	if (!sock || !key || !ready) {
		fprintf(stderr, "usage: rc-restartbench --socket PATH --dataset "
				"NAME --key KEY --ready FILE [--warm N] "
				"[--timeout S]\n");
		return 2;
	}
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(&c, sock, &o);
	if (r < 0)
		return die("attach", r);
	int ds = rc_dataset(&c, dataset);
	if (ds < 0)
		return die("dataset", ds);
	struct rc_stat st;
	int h = rc_open(&c, ds, key, &st);
	if (h < 0)
		return die("open", h);
	uint8_t *want = malloc(st.size ? st.size : 1);
	if (!want)
		return die("malloc", -ENOMEM);
	uint64_t deadline = now_ns(CLOCK_MONOTONIC) +
			    (uint64_t)timeout_s * 1000000000u;
	for (long n = 0;; n++) {
		struct rc_extent ext[MAX_EXT];
		int m = rc_read(&c, (uint32_t)h, 0, st.size, ext, MAX_EXT);
		if (m < 0)
			return die("read", m);
		uint64_t done = now_ns(CLOCK_REALTIME);
		/* Counted here, not after the releases: a release can be the
		 * call that finds the daemon gone, and this read was served
		 * by the old one. */
		int served_new = rc_reconnects(&c) > 0;
		uint64_t off = 0;
		for (int e = 0; e < m; e++) {
			if (n == 0)
				memcpy(want + off, ext[e].data, ext[e].len);
			else if (memcmp(want + off, ext[e].data, ext[e].len))
				return die("bytes differ", -EIO);
			off += ext[e].len;
			rc_release(&c, ext[e].lease);
		}
		if (off != st.size)
			return die("short read", -EIO);
		if (n == warm) {
			int fd = open(ready, O_WRONLY | O_CREAT, 0644);
			if (fd < 0)
				return die("ready file", -errno);
			close(fd);
		}
		if (served_new) {
			printf("%llu\n", (unsigned long long)done);
			break;
		}
		if (now_ns(CLOCK_MONOTONIC) > deadline)
			return die("no restart seen", -ETIMEDOUT);
	}
	rc_detach(&c);
	free(want);
	return 0;
}
