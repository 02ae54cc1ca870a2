/* test_metrics.c (hostile_metrics) - a hostile scraper against the
 * metrics_listen endpoint of a live daemon: slow senders (slowloris), a
 * header that never ends, garbage and wrong requests, hundreds of idle
 * connections. Each attack is answered or cut off within the endpoint's
 * bounds (4 KiB request, 5 s per connection, 16 connections), a
 * well-behaved scrape still gets its 200 meanwhile, clients keep reading
 * the right bytes through their rings, and the daemon exits cleanly. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "fixture/fixture.h"
#include "fixture/scrape.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)

static struct fx_daemon D;
static struct ds_spec S;
static unsigned port;
static char daemon_extra[128], out[1u << 20];

static void teardown(void)
{
	fx_daemon_kill(&D);
}

static void start(void)
{
	ds_spec_default(&S);
	port = fx_metrics_daemon_init(&D, daemon_extra, sizeof(daemon_extra),
				      NULL);
	cr_assert_neq(port, 0);
	fx_daemon_start(&D, NULL);
}

static int dial(void)
{
	int fd = fx_dial(port);
	cr_assert_geq(fd, 0, "connect: %s", strerror(errno));
	return fd;
}

/* True once the daemon has closed fd (EOF or reset), waiting up to ms. */
static bool closed_within(int fd, int ms)
{
	uint64_t until = rc_now_ms() + (uint64_t)ms;
	for (;;) {
		int64_t left = (int64_t)(until - rc_now_ms());
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, left > 0 ? (int)left : 0) <= 0)
			return false;
		char sink[4096];
		ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return true;
	}
}

/* A scrape that behaves: 200 and the statistics (fx_scrape gives up
 * after 5 s). Whether it waited behind held connections is asked by
 * order where there are some (they are still open once it answered),
 * not by its time: a busy machine running the sanitizer builds side by
 * side stretches a scrape to seconds. */
static void good_scrape(const char *during)
{
	uint64_t t0 = rc_now_ms();
	int st = fx_scrape(port, out, sizeof(out));
	cr_assert_eq(st, 200, "scrape during %s: %d (%llu ms)", during, st,
		     (unsigned long long)(rc_now_ms() - t0));
	cr_assert(strstr(out, "ringcache_cache_hits_total "),
		  "scrape during %s: no statistics", during);
}

/* How many of fds[0..n) the daemon has not closed yet (open[k] false:
 * already seen closed). */
static unsigned still_open(const int *fds, const bool *open, unsigned n)
{
	unsigned k, left = 0;
	for (k = 0; k < n; k++)
		left += (!open || open[k]) && !closed_within(fds[k], 0);
	return left;
}

/* A client reads an object through its ring, byte for byte. */
static void ring_still_serves(void)
{
	struct rc_client c;
	cr_assert_eq(rc_attach(&c, D.socket_path, NULL), 0);
	size_t i = fx_ds_find(&S, "small/00042.bin");
	char key[DS_KEY_MAX];
	struct rc_stat st;
	int h = rc_open(&c, rc_dataset(&c, "ds"), ds_key(&S, i, key), &st);
	cr_assert_geq(h, 0, "open: %s", rc_strerror(h));
	void *mem;
	int buf = rc_alloc_buffer(&c, st.size, &mem);
	cr_assert_geq(buf, 0);
	ssize_t n = rc_read_into(&c, (uint32_t)h, 0, st.size, (uint32_t)buf, 0);
	cr_assert_eq(n, (ssize_t)st.size, "read: %s", rc_strerror((int)n));
	fx_assert_ds_bytes(&S, i, 0, mem, st.size, "read during the attack");
	rc_detach(&c);
}

static unsigned daemon_fds(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)D.pid);
	DIR *dir = opendir(path);
	cr_assert_not_null(dir);
	unsigned n = 0;
	while (readdir(dir))
		n++;
	closedir(dir);
	return n;
}

Test(hostile_metrics, slowloris_is_cut_off_at_the_deadline, .fini = teardown,
     .timeout = 60)
{
	start();
	enum { SLOW = 8 };
	int fd[SLOW];
	bool open_[SLOW];
	uint64_t t0 = rc_now_ms();
	bool scraped = false;
	for (int k = 0; k < SLOW; k++) {
		fd[k] = dial();
		open_[k] = true;
		send(fd[k], "GET /metrics HTTP/1.1\r\nX-Slow: ", 31, MSG_NOSIGNAL);
	}
	/* One byte each every 250 ms: never a whole request. */
	while (rc_now_ms() - t0 < 8000) {
		bool any = false;
		for (int k = 0; k < SLOW; k++) {
			if (open_[k] && (send(fd[k], "a", 1, MSG_NOSIGNAL) < 0 ||
					 closed_within(fd[k], 1)))
				open_[k] = false;
			any |= open_[k];
		}
		if (!any)
			break;
		/* Once, a second in, while they are still open (not in a
		 * 300 ms window that a loaded machine's loop can step over). */
		if (!scraped && rc_now_ms() - t0 > 1000) {
			scraped = true;
			good_scrape("slowloris");
			cr_assert_gt(still_open(fd, open_, SLOW), 0,
				     "the scrape waited for the slow "
				     "connections' cut");
			ring_still_serves();
		}
		usleep(250 * 1000);
	}
	uint64_t took = rc_now_ms() - t0;
	for (int k = 0; k < SLOW; k++) {
		cr_assert(!open_[k], "slow connection %d still open after %llu ms",
			  k, (unsigned long long)took);
		close(fd[k]);
	}
	cr_assert_geq(took, 4500, "cut off before the 5 s deadline");
	cr_assert(scraped, "no scrape while the slow connections were open");
	good_scrape("after slowloris");
	fx_daemon_stop(&D);
}

Test(hostile_metrics, a_header_that_never_ends_is_refused, .fini = teardown,
     .timeout = 60)
{
	start();
	/* 1 MiB of header lines: the reply (431) comes at 4 KiB, or the
	 * connection is reset under the rest; never a wait. */
	size_t len = MiB;
	char *req = malloc(len);
	cr_assert_not_null(req);
	memcpy(req, "GET /metrics HTTP/1.1\r\n", 23);
	for (size_t k = 23; k < len; k++)
		req[k] = (k % 64 == 63) ? '\n' : (k % 64 == 62 ? '\r' : 'h');
	/* A wait would last until the 5 s deadline: the bounds stop short
	 * of it and leave a busy machine the rest. */
	uint64_t t0 = rc_now_ms();
	int st = fx_http(port, req, len, out, sizeof(out), 4500);
	cr_assert(st == 431 || st == 0, "huge header: %d\n%.200s", st, out);
	cr_assert_lt(rc_now_ms() - t0, 4500);
	/* Exactly at the limit without an end: 431, not a wait. */
	int fd = dial();
	cr_assert_eq(send(fd, req, 4096, MSG_NOSIGNAL), 4096);
	cr_assert(closed_within(fd, 4500), "4 KiB without a blank line kept");
	close(fd);
	free(req);
	good_scrape("huge headers");
	fx_daemon_stop(&D);
}

/* One try of random bytes on its own connection: what the endpoint
 * answered, kept for the test's thread to assert (a worker thread must
 * not). */
enum { JUNK_TRIES = 64, JUNK_CONNS = 8 };
static struct junk {
	char req[6144], reply[512];
	size_t len;
	int status;
} junk[JUNK_TRIES];

static void *junk_worker(void *arg)
{
	for (int t = (int)(intptr_t)arg; t < JUNK_TRIES; t += JUNK_CONNS)
		junk[t].status = fx_http(port, junk[t].req, junk[t].len,
					 junk[t].reply, sizeof(junk[t].reply),
					 7000);
	return NULL;
}

Test(hostile_metrics, garbage_and_wrong_requests_get_errors,
     .fini = teardown, .timeout = 180)
{
	start();
	static const struct {
		const char *req;
		size_t len;
		int status;
	} cases[] = {
#define C(s, st) {s, sizeof(s) - 1, st}
		C("\0\0\0\0\n\n", 400),
		C("GET /metrics\r\n\r\n", 400),
		C("GET /metrics HTTP/2.0\r\n\r\n", 400),
		C("GET  /metrics HTTP/1.1\r\n\r\n", 400),
		C("GET /metrics HTTP/1.1 extra\r\n\r\n", 400),
		C("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", 400),
		C("POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 405),
		C("DELETE /metrics HTTP/1.1\r\n\r\n", 405),
		C("GET /admin HTTP/1.1\r\n\r\n", 404),
		C("GET /metricsX HTTP/1.1\r\n\r\n", 404),
		C("GET ../../etc/passwd HTTP/1.1\r\n\r\n", 404),
		C("GET /metrics?format=x HTTP/1.0\n\n", 200),
		C("GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 200),
#undef C
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int st = fx_http(port, cases[k].req, cases[k].len, out,
				 sizeof(out), 3000);
		cr_assert_eq(st, cases[k].status, "case %zu: %d\n%.200s", k, st,
			     out);
	}
	/* Random bytes from a fixed seed, 64 tries of up to 6 KiB: always an
	 * error (or a cut-off at 4 KiB), never a hang or a 200. A try with
	 * no end of line waits out the 5 s deadline, so they go JUNK_CONNS
	 * at a time (well under the endpoint's 16): about 4 s instead of
	 * 20 s of waiting, every try's status still asserted. */
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int t = 0; t < JUNK_TRIES; t++) {
		struct junk *j = &junk[t];
		j->len = 1 + (size_t)(x % sizeof(j->req));
		for (size_t k = 0; k < j->len; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			j->req[k] = (char)x;
		}
	}
	pthread_t tid[JUNK_CONNS];
	for (intptr_t w = 0; w < JUNK_CONNS; w++)
		cr_assert_eq(pthread_create(&tid[w], NULL, junk_worker,
					    (void *)w), 0);
	for (int w = 0; w < JUNK_CONNS; w++)
		pthread_join(tid[w], NULL);
	for (int t = 0; t < JUNK_TRIES; t++) {
		int st = junk[t].status;
		cr_assert(st == 0 || st == 400 || st == 404 || st == 405 ||
			  st == 431 || (st == -1 && junk[t].len < 4096),
			  "junk %d (%zu bytes): %d\n%.200s", t, junk[t].len, st,
			  junk[t].reply);
	}
	good_scrape("garbage");
	ring_still_serves();
	fx_daemon_stop(&D);
}

Test(hostile_metrics, hundreds_of_idle_connections_hold_16_slots,
     .fini = teardown, .timeout = 60)
{
	start();
	unsigned before = daemon_fds();
	enum { MANY = 300 };
	static int fd[MANY];
	for (int k = 0; k < MANY; k++)
		fd[k] = dial();
	usleep(300 * 1000);
	/* The endpoint's thread keeps at most 16; the rest were closed. */
	unsigned during = daemon_fds();
	cr_assert_leq(during, before + 16, "daemon fds %u -> %u", before,
		      during);
	good_scrape("300 idle connections");
	/* The kept ones are cut at their 5 s deadline: one still open
	 * shows the scrape did not wait for that. */
	cr_assert_gt(still_open(fd, NULL, MANY), 0, "the scrape waited for "
		     "the idle connections' cut");
	ring_still_serves();
	unsigned closed = 0;
	for (int k = 0; k < MANY; k++) {
		closed += closed_within(fd[k], 0) ? 1 : 0;
		close(fd[k]);
	}
	cr_assert_geq(closed, MANY - 16, "only %u of %d closed by the daemon",
		      closed, MANY);
	fx_daemon_stop(&D);
}
