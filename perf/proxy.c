/* proxy.c - rc-proxy: a TCP proxy that makes a local S3 server behave like
 * S3 across a WAN, and injects faults, because the kernel here has no netem.
 *
 * It owns: the listening socket, one thread per client connection (each with
 * its own upstream connection), HTTP/1.1 request and response framing
 * (Content-Length, chunked, close-delimited, bodiless), first-byte latency,
 * token-bucket bandwidth caps (per connection and in total, on response
 * bytes), per-request faults (503, SlowDown, reset, truncate, stall), the
 * counters and the control socket that reads and changes all of it at run
 * time.
 *
 * Blocking I/O with a thread per connection keeps every request's timeline
 * (latency, pacing, stalls) a plain sequence of sleeps and writes. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define MAX_CONNS 1024
#define MAX_HEAD (64 * 1024)       /* request or response header block */
#define SEND_SLICE (16 * 1024)     /* pacing granularity of response bytes */
#define CLIENT_IDLE_S 120          /* idle keep-alive client is dropped */
#define UPSTREAM_TIMEOUT_S 60
#define THREAD_STACK (256 * 1024)

enum fault_kind {
	FAULT_503 = 0,
	FAULT_SLOWDOWN,
	FAULT_RESET,
	FAULT_TRUNCATE,
	FAULT_STALL,
	FAULT_KINDS,
	FAULT_NONE = -1,
};

static const char *const fault_names[FAULT_KINDS] = {
	"503", "slowdown", "reset", "truncate", "stall",
};

/* Knobs the control socket may change while connections run. */
struct settings {
	_Atomic uint32_t fault_ppm;  /* fault probability, parts per million */
	_Atomic uint32_t fault_mask; /* bit per enum fault_kind */
	_Atomic uint32_t latency_ms, jitter_ms, stall_ms;
	_Atomic uint64_t bw_conn, bw_total; /* bytes/s, 0 = unlimited */
};

struct stats {
	_Atomic uint64_t requests, gets, puts, heads, deletes, posts;
	_Atomic uint64_t bytes_up, bytes_down; /* client->server, server->client */
	_Atomic uint64_t faults[FAULT_KINDS];
	_Atomic uint64_t conns_total, conns_refused, upstream_errors;
	_Atomic uint32_t conns_active;
};

/* A token bucket that lets takers go into debt: each taker reserves its
 * bytes and sleeps off the deficit, so concurrent takers share the rate. */
struct bucket {
	pthread_mutex_t lock;
	double tokens;
	uint64_t last_ns;
};

static struct settings cfg;
static struct stats st;
static struct bucket total_bucket = {.lock = PTHREAD_MUTEX_INITIALIZER};
static struct addrinfo *upstream_ai;  /* owned, freed at exit */
static const char *control_path;
static uint64_t base_seed;
static _Atomic uint64_t conn_serial;

/* ------------------------------------------------------------------ time */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
			      .tv_nsec = (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static void sleep_ms(uint32_t ms)
{
	sleep_ns((uint64_t)ms * 1000000ull);
}

/* ------------------------------------------------------------- buckets */

static void bucket_take(struct bucket *b, uint64_t rate, size_t n)
{
	if (rate == 0)
		return;
	/* A burst of 1 ms (at least two slices) absorbs sleep overshoot
	 * without letting a whole object through at loopback speed. */
	double burst = (double)rate / 1000.0;
	if (burst < 2 * SEND_SLICE)
		burst = 2 * SEND_SLICE;
	pthread_mutex_lock(&b->lock);
	uint64_t now = now_ns();
	if (b->last_ns == 0)
		b->tokens = burst;
	else
		b->tokens += (double)(now - b->last_ns) * (double)rate / 1e9;
	if (b->tokens > burst)
		b->tokens = burst;
	b->last_ns = now;
	b->tokens -= (double)n;
	double debt = b->tokens < 0 ? -b->tokens : 0;
	pthread_mutex_unlock(&b->lock);
	if (debt > 0)
		sleep_ns((uint64_t)(debt * 1e9 / (double)rate));
}

/* ----------------------------------------------------------------- rng */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t rng_below(uint64_t *s, uint32_t n)
{
	return n ? (uint32_t)(splitmix64(s) % n) : 0;
}

/* ----------------------------------------------------------- inbuf */

/* Bytes read from a socket and not consumed yet. Everything read goes
 * through here so bytes past one request (pipelining) stay for the next. */
struct inbuf {
	char data[MAX_HEAD];
	size_t start, end;
};

static size_t inbuf_avail(const struct inbuf *b)
{
	return b->end - b->start;
}

static void inbuf_consume(struct inbuf *b, size_t n)
{
	b->start += n;
	if (b->start == b->end)
		b->start = b->end = 0;
}

/* Reads more; returns bytes read, 0 on EOF, -1 on error (errno set). */
static ssize_t inbuf_fill(struct inbuf *b, int fd)
{
	if (b->start > 0 && b->end == sizeof(b->data)) {
		memmove(b->data, b->data + b->start, inbuf_avail(b));
		b->end -= b->start;
		b->start = 0;
	}
	if (b->end == sizeof(b->data)) {
		errno = EMSGSIZE;
		return -1;
	}
	ssize_t n;
	do
		n = read(fd, b->data + b->end, sizeof(b->data) - b->end);
	while (n < 0 && errno == EINTR);
	if (n > 0)
		b->end += (size_t)n;
	return n;
}

enum head_result { HEAD_OK, HEAD_EOF, HEAD_TOO_BIG, HEAD_ERROR };

/* Reads until a complete header block is buffered; *head_len includes the
 * blank line. HEAD_EOF means the peer closed before sending a byte. */
static enum head_result read_head(struct inbuf *b, int fd, size_t *head_len)
{
	for (;;) {
		char *p = memmem(b->data + b->start, inbuf_avail(b), "\r\n\r\n", 4);
		if (p) {
			*head_len = (size_t)(p + 4 - (b->data + b->start));
			return HEAD_OK;
		}
		if (inbuf_avail(b) >= sizeof(b->data))
			return HEAD_TOO_BIG;
		ssize_t n = inbuf_fill(b, fd);
		if (n == 0)
			return inbuf_avail(b) == 0 ? HEAD_EOF : HEAD_ERROR;
		if (n < 0)
			return HEAD_ERROR;
	}
}

/* ------------------------------------------------------------ sockets */

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static void set_timeout(int fd, int seconds)
{
	struct timeval tv = {.tv_sec = seconds};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0)
		log_warn("setsockopt timeout: %s", strerror(errno));
}

static void set_nodelay(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		log_warn("setsockopt TCP_NODELAY: %s", strerror(errno));
}

/* Closes with an RST instead of a FIN: what a client sees as a reset. */
static void close_with_reset(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) != 0)
		log_warn("setsockopt SO_LINGER: %s", strerror(errno));
	close(fd);
}

static int connect_upstream(void)
{
	for (struct addrinfo *ai = upstream_ai; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
				ai->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			set_nodelay(fd);
			set_timeout(fd, UPSTREAM_TIMEOUT_S);
			return fd;
		}
		close(fd);
	}
	atomic_fetch_add(&st.upstream_errors, 1);
	return -1;
}

/* Splits "HOST:PORT" ("[v6]:PORT" too) into caller's buffers. */
static int split_hostport(const char *s, char *host, size_t hostlen,
			  char *port, size_t portlen)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s || colon[1] == '\0')
		return -1;
	const char *h = s;
	size_t hl = (size_t)(colon - s);
	if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	if (hl >= hostlen || strlen(colon + 1) >= portlen)
		return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	strcpy(port, colon + 1);
	for (const char *p = port; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	return 0;
}

static struct addrinfo *resolve(const char *hostport, bool passive)
{
	char host[256], port[16];
	if (split_hostport(hostport, host, sizeof(host), port, sizeof(port))) {
		log_error("bad address '%s' (want HOST:PORT)", hostport);
		return NULL;
	}
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = passive ? AI_PASSIVE : 0};
	struct addrinfo *ai = NULL;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		log_error("resolve '%s': %s", hostport, gai_strerror(rc));
		return NULL;
	}
	return ai;
}

/* ------------------------------------------------------------- HTTP */

struct http_req {
	char method[16];
	size_t head_len;
	uint64_t content_length;
	bool expect_continue, close, chunked;
	size_t expect_off, expect_len; /* the Expect line, stripped upstream */
};

enum body_kind { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE };

struct http_resp {
	int status;
	size_t head_len;
	enum body_kind body;
	uint64_t content_length;
	bool close;
};

/* Calls fn for each "Name: value" line after the start line; value is
 * trimmed. off/len locate the whole line (CRLF included) in head. */
typedef int (*header_fn)(void *ctx, const char *name, size_t nlen,
			 const char *val, size_t vlen, size_t off, size_t len);

static int for_each_header(const char *head, size_t head_len, header_fn fn,
			   void *ctx)
{
	const char *end = head + head_len;
	const char *line = memmem(head, head_len, "\r\n", 2);
	if (!line)
		return -1;
	line += 2;
	while (line < end) {
		const char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);
		if (!eol)
			return -1;
		if (eol == line)
			return 0; /* the blank line */
		const char *colon = memchr(line, ':', (size_t)(eol - line));
		if (!colon || colon == line)
			return -1;
		const char *v = colon + 1, *ve = eol;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		if (fn(ctx, line, (size_t)(colon - line), v, (size_t)(ve - v),
		       (size_t)(line - head), (size_t)(eol + 2 - line)))
			return -1;
		line = eol + 2;
	}
	return -1;
}

static bool name_is(const char *name, size_t nlen, const char *want)
{
	return strlen(want) == nlen && strncasecmp(name, want, nlen) == 0;
}

static bool value_has_token(const char *v, size_t vlen, const char *token)
{
	size_t tl = strlen(token);
	for (size_t i = 0; i + tl <= vlen; i++)
		if (strncasecmp(v + i, token, tl) == 0)
			return true;
	return false;
}

static int parse_u64(const char *v, size_t vlen, uint64_t *out)
{
	if (vlen == 0 || vlen > 19)
		return -1;
	uint64_t x = 0;
	for (size_t i = 0; i < vlen; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	*out = x;
	return 0;
}

struct hdr_common {
	bool have_length, chunked, close, expect;
	uint64_t length;
	size_t expect_off, expect_len;
};

static int collect_header(void *ctx, const char *name, size_t nlen,
			  const char *val, size_t vlen, size_t off, size_t len)
{
	struct hdr_common *h = ctx;
	if (name_is(name, nlen, "content-length")) {
		uint64_t n;
		if (parse_u64(val, vlen, &n))
			return -1;
		if (h->have_length && n != h->length)
			return -1; /* conflicting lengths: request smuggling */
		h->have_length = true;
		h->length = n;
	} else if (name_is(name, nlen, "transfer-encoding")) {
		h->chunked = value_has_token(val, vlen, "chunked");
		if (!h->chunked)
			return -1; /* other codings are not framed by us */
	} else if (name_is(name, nlen, "connection")) {
		if (value_has_token(val, vlen, "close"))
			h->close = true;
	} else if (name_is(name, nlen, "expect")) {
		if (value_has_token(val, vlen, "100-continue")) {
			h->expect = true;
			h->expect_off = off;
			h->expect_len = len;
		}
	}
	return 0;
}

static bool http10(const char *line, size_t len)
{
	return len >= 8 && memcmp(line + len - 8, "HTTP/1.0", 8) == 0;
}

/* 0, or -1 on a malformed request head. */
static int parse_request(const char *head, size_t head_len, struct http_req *r)
{
	memset(r, 0, sizeof(*r));
	r->head_len = head_len;
	const char *eol = memmem(head, head_len, "\r\n", 2);
	const char *sp = memchr(head, ' ', (size_t)(eol - head));
	if (!sp || sp == head || (size_t)(sp - head) >= sizeof(r->method))
		return -1;
	memcpy(r->method, head, (size_t)(sp - head));
	const char *sp2 = memchr(sp + 1, ' ', (size_t)(eol - sp - 1));
	if (!sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
		return -1;
	struct hdr_common h = {0};
	if (for_each_header(head, head_len, collect_header, &h))
		return -1;
	r->content_length = h.have_length ? h.length : 0;
	r->chunked = h.chunked;
	r->close = h.close || http10(head, (size_t)(eol - head));
	r->expect_continue = h.expect;
	r->expect_off = h.expect_off;
	r->expect_len = h.expect_len;
	return 0;
}

static int parse_response(const char *head, size_t head_len, bool head_req,
			  struct http_resp *r)
{
	memset(r, 0, sizeof(*r));
	r->head_len = head_len;
	if (head_len < 12 || strncmp(head, "HTTP/1.", 7) != 0 || head[8] != ' ')
		return -1;
	int status = 0;
	for (int i = 9; i < 12; i++) {
		if (head[i] < '0' || head[i] > '9')
			return -1;
		status = status * 10 + (head[i] - '0');
	}
	r->status = status;
	struct hdr_common h = {0};
	if (for_each_header(head, head_len, collect_header, &h))
		return -1;
	r->close = h.close || strncmp(head, "HTTP/1.0", 8) == 0;
	if (head_req || status / 100 == 1 || status == 204 || status == 304) {
		r->body = BODY_NONE;
	} else if (h.chunked) {
		r->body = BODY_CHUNKED;
	} else if (h.have_length) {
		r->body = h.length ? BODY_LENGTH : BODY_NONE;
		r->content_length = h.length;
	} else {
		r->body = BODY_UNTIL_CLOSE;
		r->close = true;
	}
	return 0;
}

/* Follows chunked framing over raw bytes that are forwarded unchanged, to
 * find where the body ends. */
enum chunk_state { CK_SIZE, CK_EXT, CK_DATA, CK_DATA_END, CK_TRAILER, CK_DONE };

struct chunk_scan {
	enum chunk_state state;
	uint64_t size;
	unsigned digits;
	size_t line_len;
};

/* Returns how many of the n bytes belong to the body (fewer once the end is
 * reached), or -1 on bad framing. */
static ssize_t chunk_scan(struct chunk_scan *ck, const char *p, size_t n)
{
	size_t i = 0;
	while (i < n && ck->state != CK_DONE) {
		char c = p[i];
		switch (ck->state) {
		case CK_SIZE:
		case CK_EXT:
			if (c == '\n') {
				if (ck->digits == 0)
					return -1;
				ck->state = ck->size ? CK_DATA : CK_TRAILER;
				ck->line_len = 0;
			} else if (ck->state == CK_EXT || c == ';') {
				ck->state = CK_EXT; /* extensions are skipped */
			} else if (c != '\r') {
				int d = (c >= '0' && c <= '9') ? c - '0'
					: (c >= 'a' && c <= 'f') ? c - 'a' + 10
					: (c >= 'A' && c <= 'F') ? c - 'A' + 10
					: -1;
				if (d < 0 || ++ck->digits > 15)
					return -1;
				ck->size = ck->size * 16 + (uint64_t)d;
			}
			i++;
			break;
		case CK_DATA: {
			uint64_t take = n - i < ck->size ? n - i : ck->size;
			ck->size -= take;
			i += take;
			if (ck->size == 0)
				ck->state = CK_DATA_END;
			break;
		}
		case CK_DATA_END:
			if (c == '\n') {
				ck->state = CK_SIZE;
				ck->digits = 0;
			} else if (c != '\r') {
				return -1;
			}
			i++;
			break;
		case CK_TRAILER:
			if (c == '\n') {
				if (ck->line_len == 0)
					ck->state = CK_DONE;
				ck->line_len = 0;
			} else if (c != '\r') {
				ck->line_len++;
			}
			i++;
			break;
		case CK_DONE:
			break;
		}
	}
	return (ssize_t)i;
}

/* ------------------------------------------------------- connections */

struct conn {
	int cfd, ufd;
	bool upstream_reused;
	uint64_t rng;
	struct bucket bw;
	struct inbuf cin, uin;
};

static void count_method(const char *m)
{
	atomic_fetch_add(&st.requests, 1);
	if (strcmp(m, "GET") == 0)
		atomic_fetch_add(&st.gets, 1);
	else if (strcmp(m, "PUT") == 0)
		atomic_fetch_add(&st.puts, 1);
	else if (strcmp(m, "HEAD") == 0)
		atomic_fetch_add(&st.heads, 1);
	else if (strcmp(m, "DELETE") == 0)
		atomic_fetch_add(&st.deletes, 1);
	else if (strcmp(m, "POST") == 0)
		atomic_fetch_add(&st.posts, 1);
}

static enum fault_kind pick_fault(struct conn *c)
{
	uint32_t ppm = atomic_load(&cfg.fault_ppm);
	uint32_t mask = atomic_load(&cfg.fault_mask);
	if (ppm == 0 || mask == 0 || rng_below(&c->rng, 1000000) >= ppm)
		return FAULT_NONE;
	unsigned enabled = (unsigned)__builtin_popcount(mask);
	unsigned nth = rng_below(&c->rng, enabled);
	for (int k = 0; k < FAULT_KINDS; k++)
		if ((mask & (1u << k)) && nth-- == 0)
			return (enum fault_kind)k;
	return FAULT_NONE;
}

static void first_byte_delay(struct conn *c)
{
	uint32_t ms = atomic_load(&cfg.latency_ms);
	uint32_t jitter = atomic_load(&cfg.jitter_ms);
	if (jitter)
		ms += rng_below(&c->rng, jitter + 1);
	if (ms)
		sleep_ms(ms);
}

/* Response bytes to the client, paced by both buckets. */
static int send_paced(struct conn *c, const char *p, size_t len)
{
	while (len > 0) {
		size_t n = len < SEND_SLICE ? len : SEND_SLICE;
		bucket_take(&c->bw, atomic_load(&cfg.bw_conn), n);
		bucket_take(&total_bucket, atomic_load(&cfg.bw_total), n);
		if (write_all(c->cfd, p, n))
			return -1;
		atomic_fetch_add(&st.bytes_down, n);
		p += n;
		len -= n;
	}
	return 0;
}

/* Moves len request-body bytes from the client to fd (-1: discard). */
static int relay_request_body(struct conn *c, uint64_t len, int fd)
{
	while (len > 0) {
		if (inbuf_avail(&c->cin) == 0 && inbuf_fill(&c->cin, c->cfd) <= 0)
			return -1;
		size_t n = inbuf_avail(&c->cin);
		if (n > len)
			n = (size_t)len;
		if (fd >= 0 && write_all(fd, c->cin.data + c->cin.start, n))
			return -1;
		atomic_fetch_add(&st.bytes_up, n);
		inbuf_consume(&c->cin, n);
		len -= n;
	}
	return 0;
}

static int send_simple(struct conn *c, int status, const char *reason,
		       const char *code, bool close_after)
{
	char body[512], msg[1024];
	int blen = snprintf(body, sizeof(body),
			    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			    "<Error><Code>%s</Code><Message>%s (injected by "
			    "rc-proxy)</Message><RequestId>rc-proxy</RequestId>"
			    "</Error>\n", code, reason);
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\n"
			 "Content-Length: %d\r\n%s\r\n%s",
			 status, reason, blen,
			 close_after ? "Connection: close\r\n" : "", body);
	return send_paced(c, msg, (size_t)n);
}

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* 503/SlowDown answered by the proxy itself; the body is still read so the
 * connection stays usable. Returns 0 to keep the connection. */
static int answer_fault(struct conn *c, const struct http_req *r,
			enum fault_kind f)
{
	inbuf_consume(&c->cin, r->head_len);
	atomic_fetch_add(&st.bytes_up, r->head_len);
	if (r->expect_continue &&
	    write_all(c->cfd, continue_line, sizeof(continue_line) - 1))
		return -1;
	if (relay_request_body(c, r->content_length, -1))
		return -1;
	first_byte_delay(c);
	const char *code = f == FAULT_SLOWDOWN ? "SlowDown" : "ServiceUnavailable";
	const char *reason = f == FAULT_SLOWDOWN ? "Please reduce your request rate"
						  : "Service Unavailable";
	if (send_simple(c, 503, reason, code, r->close))
		return -1;
	return r->close ? -1 : 0;
}

static void drop_upstream(struct conn *c)
{
	if (c->ufd >= 0)
		close(c->ufd);
	c->ufd = -1;
	c->uin.start = c->uin.end = 0;
}

/* Sends the request head (less any Expect line) upstream. */
static int send_request_head(struct conn *c, const struct http_req *r)
{
	const char *h = c->cin.data + c->cin.start;
	if (!r->expect_continue)
		return write_all(c->ufd, h, r->head_len);
	if (write_all(c->ufd, h, r->expect_off))
		return -1;
	size_t rest = r->expect_off + r->expect_len;
	return write_all(c->ufd, h + rest, r->head_len - rest);
}

/* Forwards one request and reads the response head into c->uin. A request
 * without a body is retried once on a fresh connection when a kept-alive
 * upstream connection turns out to be closed. Returns 0, -1 if upstream
 * failed, -2 if the client went away. */
static int forward_request(struct conn *c, const struct http_req *r,
			   bool head_req, struct http_resp *resp)
{
	bool has_body = r->content_length > 0;
	for (int attempt = 0;; attempt++) {
		if (c->ufd < 0) {
			c->ufd = connect_upstream();
			c->upstream_reused = false;
			if (c->ufd < 0)
				return -1;
		}
		bool may_retry = c->upstream_reused && !has_body && attempt == 0;
		enum head_result hr = HEAD_ERROR;
		size_t hl = 0;
		if (send_request_head(c, r) == 0) {
			if (has_body) {
				/* The head leaves the buffer before the body
				 * streams through it. */
				inbuf_consume(&c->cin, r->head_len);
				if (r->expect_continue &&
				    write_all(c->cfd, continue_line,
					      sizeof(continue_line) - 1))
					return -2;
				if (relay_request_body(c, r->content_length, c->ufd))
					return -2;
			}
			hr = read_head(&c->uin, c->ufd, &hl);
		}
		if (hr == HEAD_OK || !may_retry || hr == HEAD_TOO_BIG) {
			if (!has_body)
				inbuf_consume(&c->cin, r->head_len);
			atomic_fetch_add(&st.bytes_up, r->head_len);
			if (hr != HEAD_OK)
				return -1;
			return parse_response(c->uin.data + c->uin.start, hl,
					      head_req, resp);
		}
		drop_upstream(c);
	}
}

struct cut {
	uint64_t at;   /* body bytes to send before the fault acts */
	bool known;    /* at is fixed (length known or first piece seen) */
};

/* Acts on a mid-body fault. Returns 1 if the connection is finished. */
static int apply_body_fault(struct conn *c, enum fault_kind f)
{
	switch (f) {
	case FAULT_RESET:
		close_with_reset(c->cfd);
		c->cfd = -1;
		return 1;
	case FAULT_TRUNCATE:
		shutdown(c->cfd, SHUT_WR);
		close(c->cfd);
		c->cfd = -1;
		return 1;
	case FAULT_STALL:
		sleep_ms(atomic_load(&cfg.stall_ms));
		return 0;
	default:
		return 0;
	}
}

/* Streams the response body from upstream to the client, applying f at the
 * cut. Returns 0 when the body is complete, 1 if a fault ended the client
 * connection, -1 on error. */
static int relay_response_body(struct conn *c, const struct http_resp *resp,
			       enum fault_kind f)
{
	uint64_t left = resp->content_length, sent = 0;
	struct chunk_scan ck = {0};
	struct cut cut = {.known = resp->body == BODY_LENGTH,
			  .at = resp->content_length / 2};
	bool fault_pending = f == FAULT_RESET || f == FAULT_TRUNCATE ||
			     f == FAULT_STALL;
	for (;;) {
		if (resp->body == BODY_LENGTH && left == 0)
			return 0;
		if (resp->body == BODY_CHUNKED && ck.state == CK_DONE)
			return 0;
		if (inbuf_avail(&c->uin) == 0) {
			ssize_t r = inbuf_fill(&c->uin, c->ufd);
			if (r == 0 && resp->body == BODY_UNTIL_CLOSE)
				return 0;
			if (r <= 0)
				return -1;
		}
		const char *p = c->uin.data + c->uin.start;
		size_t n = inbuf_avail(&c->uin);
		if (resp->body == BODY_LENGTH && n > left)
			n = (size_t)left;
		if (fault_pending) {
			if (!cut.known) {
				cut.at = n / 2;
				cut.known = true;
			}
			if (sent + n > cut.at)
				n = (size_t)(cut.at - sent);
		}
		/* Scan only what is sent now, so no byte is scanned twice. */
		if (resp->body == BODY_CHUNKED) {
			ssize_t used = chunk_scan(&ck, p, n);
			if (used < 0)
				return -1;
			n = (size_t)used;
		}
		if (n && send_paced(c, p, n))
			return -1;
		sent += n;
		inbuf_consume(&c->uin, n);
		if (resp->body == BODY_LENGTH)
			left -= n;
		if (fault_pending && sent == cut.at) {
			fault_pending = false;
			if (apply_body_fault(c, f))
				return 1;
		}
	}
}

static void count_fault(enum fault_kind f)
{
	if (f != FAULT_NONE)
		atomic_fetch_add(&st.faults[f], 1);
}

/* Serves one request. Returns 0 to keep the connection, -1 to close it. */
static int serve_request(struct conn *c, const struct http_req *r)
{
	count_method(r->method);
	enum fault_kind f = pick_fault(c);
	count_fault(f);
	if (f == FAULT_503 || f == FAULT_SLOWDOWN)
		return answer_fault(c, r, f);

	bool head_req = strcmp(r->method, "HEAD") == 0;
	struct http_resp resp;
	for (;;) {
		int rc = forward_request(c, r, head_req, &resp);
		if (rc == -2)
			return -1; /* the client went away mid-body */
		if (rc < 0) {
			log_warn("upstream failed for %s; answering 502", r->method);
			drop_upstream(c);
			send_simple(c, 502, "Bad Gateway", "BadGateway", true);
			return -1;
		}
		if (resp.status / 100 != 1 || resp.status == 101)
			break;
		/* Informational: pass on, then wait for the final answer. */
		if (write_all(c->cfd, c->uin.data + c->uin.start, resp.head_len))
			return -1;
		inbuf_consume(&c->uin, resp.head_len);
		if (read_head(&c->uin, c->ufd, &resp.head_len) != HEAD_OK)
			return -1;
	}
	c->upstream_reused = true;
	first_byte_delay(c);

	if (resp.body == BODY_NONE && f != FAULT_NONE) {
		/* No body to cut: the fault acts before the headers. */
		if (f != FAULT_STALL)
			drop_upstream(c);
		if (apply_body_fault(c, f))
			return -1;
	}
	if (send_paced(c, c->uin.data + c->uin.start, resp.head_len))
		return -1;
	inbuf_consume(&c->uin, resp.head_len);
	if (resp.body == BODY_NONE)
		return (resp.close || r->close) ? -1 : 0;

	int rc = relay_response_body(c, &resp, f);
	if (rc != 0 || resp.close)
		drop_upstream(c);
	if (rc != 0)
		return -1;
	return (resp.close || r->close) ? -1 : 0;
}

static void reject_request(struct conn *c, int status, const char *reason)
{
	send_simple(c, status, reason, "InvalidRequest", true);
}

static void serve_connection(struct conn *c)
{
	for (;;) {
		size_t hl;
		enum head_result hr = read_head(&c->cin, c->cfd, &hl);
		if (hr == HEAD_TOO_BIG) {
			reject_request(c, 431, "Request Header Fields Too Large");
			return;
		}
		if (hr != HEAD_OK)
			return;
		struct http_req r;
		if (parse_request(c->cin.data + c->cin.start, hl, &r)) {
			reject_request(c, 400, "Bad Request");
			return;
		}
		if (r.chunked) {
			reject_request(c, 501, "Chunked Request Bodies Not Supported");
			return;
		}
		if (serve_request(c, &r))
			return;
	}
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	serve_connection(c);
	if (c->cfd >= 0)
		close(c->cfd);
	drop_upstream(c);
	pthread_mutex_destroy(&c->bw.lock);
	free(c);
	atomic_fetch_sub(&st.conns_active, 1);
	return NULL;
}

static void start_connection(int cfd)
{
	if (atomic_load(&st.conns_active) >= MAX_CONNS) {
		atomic_fetch_add(&st.conns_refused, 1);
		close(cfd);
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		log_error("out of memory for a connection");
		close(cfd);
		return;
	}
	c->cfd = cfd;
	c->ufd = -1;
	c->rng = base_seed ^ (atomic_fetch_add(&conn_serial, 1) * 0x9e3779b97f4a7c15ull);
	pthread_mutex_init(&c->bw.lock, NULL);
	set_nodelay(cfd);
	set_timeout(cfd, CLIENT_IDLE_S);

	pthread_attr_t attr;
	pthread_t tid;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, THREAD_STACK);
	atomic_fetch_add(&st.conns_active, 1);
	atomic_fetch_add(&st.conns_total, 1);
	int rc = pthread_create(&tid, &attr, conn_thread, c);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		log_error("pthread_create: %s", strerror(rc));
		atomic_fetch_sub(&st.conns_active, 1);
		pthread_mutex_destroy(&c->bw.lock);
		close(cfd);
		free(c);
	}
}

/* ------------------------------------------------------ stats, control */

/* Writes the counters as "name value" lines; returns the length. */
static size_t format_stats(char *out, size_t cap)
{
	size_t n = 0;
#define STAT(name, val)                                                       \
	do {                                                                  \
		int w = snprintf(out + n, cap - n, "%s %" PRIu64 "\n", name,  \
				 (uint64_t)(val));                            \
		if (w > 0 && (size_t)w < cap - n)                             \
			n += (size_t)w;                                       \
	} while (0)
	STAT("requests", atomic_load(&st.requests));
	STAT("get", atomic_load(&st.gets));
	STAT("put", atomic_load(&st.puts));
	STAT("head", atomic_load(&st.heads));
	STAT("delete", atomic_load(&st.deletes));
	STAT("post", atomic_load(&st.posts));
	STAT("bytes_up", atomic_load(&st.bytes_up));
	STAT("bytes_down", atomic_load(&st.bytes_down));
	for (int k = 0; k < FAULT_KINDS; k++) {
		char name[32];
		snprintf(name, sizeof(name), "fault_%s", fault_names[k]);
		STAT(name, atomic_load(&st.faults[k]));
	}
	STAT("connections_total", atomic_load(&st.conns_total));
	STAT("connections_active", atomic_load(&st.conns_active));
	STAT("connections_refused", atomic_load(&st.conns_refused));
	STAT("upstream_errors", atomic_load(&st.upstream_errors));
#undef STAT
	return n;
}

static void reset_stats(void)
{
	atomic_store(&st.requests, 0);
	atomic_store(&st.gets, 0);
	atomic_store(&st.puts, 0);
	atomic_store(&st.heads, 0);
	atomic_store(&st.deletes, 0);
	atomic_store(&st.posts, 0);
	atomic_store(&st.bytes_up, 0);
	atomic_store(&st.bytes_down, 0);
	for (int k = 0; k < FAULT_KINDS; k++)
		atomic_store(&st.faults[k], 0);
	atomic_store(&st.conns_total, 0);
	atomic_store(&st.conns_refused, 0);
	atomic_store(&st.upstream_errors, 0);
}

static void print_stats(const char *why)
{
	char buf[2048];
	size_t n = format_stats(buf, sizeof(buf));
	fprintf(stderr, "rc-proxy stats (%s):\n%.*s", why, (int)n, buf);
	fflush(stderr);
}

/* "503,reset" -> bit mask; "all" and "none" too. -1 on an unknown kind. */
static int parse_fault_list(const char *s, uint32_t *mask)
{
	if (strcmp(s, "all") == 0) {
		*mask = (1u << FAULT_KINDS) - 1;
		return 0;
	}
	*mask = 0;
	if (strcmp(s, "none") == 0 || *s == '\0')
		return 0;
	const char *p = s;
	while (*p) {
		size_t len = strcspn(p, ",");
		int found = -1;
		for (int k = 0; k < FAULT_KINDS; k++)
			if (strlen(fault_names[k]) == len &&
			    strncmp(p, fault_names[k], len) == 0)
				found = k;
		if (found < 0)
			return -1;
		*mask |= 1u << found;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

static int parse_ms(const char *s, uint32_t *out)
{
	double v;
	if (parse_double(s, 0, 3600 * 1000.0, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* MB/s (10^6 bytes) to bytes/s; 0 = unlimited. */
static int parse_mbps(const char *s, uint64_t *out)
{
	double v;
	if (parse_double(s, 0, 1e6, &v))
		return -1;
	*out = (uint64_t)(v * 1e6);
	return 0;
}

/* Applies one "name value" setting; shared by the command line and the
 * control socket. Returns 0 or -1 with a reason in err. */
static int apply_setting(const char *name, const char *val, char *err,
			 size_t errlen)
{
	uint32_t ms, mask;
	uint64_t bps;
	double rate;
	if (strcmp(name, "fault-rate") == 0) {
		if (parse_double(val, 0, 1, &rate))
			goto bad;
		atomic_store(&cfg.fault_ppm, (uint32_t)(rate * 1e6 + 0.5));
	} else if (strcmp(name, "faults") == 0) {
		if (parse_fault_list(val, &mask))
			goto bad;
		atomic_store(&cfg.fault_mask, mask);
	} else if (strcmp(name, "latency-ms") == 0 ||
		   strcmp(name, "jitter-ms") == 0 ||
		   strcmp(name, "stall-ms") == 0) {
		if (parse_ms(val, &ms))
			goto bad;
		_Atomic uint32_t *dst = name[0] == 'l' ? &cfg.latency_ms
					: name[0] == 'j' ? &cfg.jitter_ms
					: &cfg.stall_ms;
		atomic_store(dst, ms);
	} else if (strcmp(name, "bw-conn") == 0 || strcmp(name, "bw-total") == 0) {
		if (parse_mbps(val, &bps))
			goto bad;
		atomic_store(name[3] == 'c' ? &cfg.bw_conn : &cfg.bw_total, bps);
	} else {
		snprintf(err, errlen, "unknown setting '%s'", name);
		return -1;
	}
	return 0;
bad:
	snprintf(err, errlen, "bad value '%s' for %s", val, name);
	return -1;
}

/* One command line from the control socket; the reply goes into out. */
static size_t control_command(char *line, char *out, size_t cap)
{
	char err[256];
	char *save = NULL;
	char *cmd = strtok_r(line, " \t", &save);
	if (!cmd)
		return (size_t)snprintf(out, cap, "error: empty command\n");
	if (strcmp(cmd, "stats") == 0) {
		size_t n = format_stats(out, cap - 4);
		return n + (size_t)snprintf(out + n, cap - n, "ok\n");
	}
	if (strcmp(cmd, "reset-stats") == 0) {
		reset_stats();
		return (size_t)snprintf(out, cap, "ok\n");
	}
	if (strcmp(cmd, "set") == 0) {
		char *name = strtok_r(NULL, " \t", &save);
		char *val = strtok_r(NULL, " \t", &save);
		if (!name || !val || strtok_r(NULL, " \t", &save))
			return (size_t)snprintf(out, cap,
						"error: usage: set NAME VALUE\n");
		if (apply_setting(name, val, err, sizeof(err)))
			return (size_t)snprintf(out, cap, "error: %s\n", err);
		return (size_t)snprintf(out, cap, "ok\n");
	}
	return (size_t)snprintf(out, cap, "error: unknown command '%.64s'\n",
				cmd);
}

static void serve_control_client(int fd)
{
	char in[1024], out[4096];
	size_t len = 0;
	set_timeout(fd, 5);
	for (;;) {
		char *nl = memchr(in, '\n', len);
		if (!nl) {
			if (len == sizeof(in) - 1) {
				static const char msg[] = "error: line too long\n";
				write_all(fd, msg, sizeof(msg) - 1);
				return;
			}
			ssize_t n = read(fd, in + len, sizeof(in) - 1 - len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return;
			len += (size_t)n;
			continue;
		}
		*nl = '\0';
		if (nl > in && nl[-1] == '\r')
			nl[-1] = '\0';
		size_t n = control_command(in, out, sizeof(out));
		if (write_all(fd, out, n))
			return;
		size_t used = (size_t)(nl + 1 - in);
		memmove(in, nl + 1, len - used);
		len -= used;
	}
}

/* Clients are served one at a time: the control socket is for tests and
 * operators, never a hot path. */
static void *control_thread(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			log_error("control accept: %s", strerror(errno));
			return NULL;
		}
		serve_control_client(fd);
		close(fd);
	}
}

static int start_control(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_error("control path too long: %s", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	struct stat sb;
	/* A stale socket from an earlier run is replaced; any other file is
	 * left alone. */
	if (lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode) && unlink(path) != 0) {
		log_error("unlink %s: %s", path, strerror(errno));
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, 16) != 0) {
		log_error("control socket %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	pthread_t tid;
	int rc = pthread_create(&tid, NULL, control_thread, (void *)(intptr_t)fd);
	if (rc != 0) {
		log_error("pthread_create: %s", strerror(rc));
		close(fd);
		return -1;
	}
	pthread_detach(tid);
	return 0;
}

/* ---------------------------------------------------------------- main */

/* Takes ownership of ai. */
static int open_listener(struct addrinfo *ai, const char *hostport)
{
	int fd = -1;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
			    a->ai_protocol);
		if (fd < 0)
			continue;
		int one = 1;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
		    bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 512) == 0)
			break;
		log_error("listen on %s: %s", hostport, strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static int announce_listener(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
	    getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port,
			sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		log_error("getsockname: %s", strerror(errno));
		return -1;
	}
	printf(ss.ss_family == AF_INET6 ? "listening [%s]:%s\n"
					: "listening %s:%s\n", host, port);
	fflush(stdout);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rc-proxy --listen HOST:PORT --upstream HOST:PORT [options]\n"
		"  --listen HOST:PORT   port 0 picks one; the first stdout line says\n"
		"                       \"listening HOST:PORT\"\n"
		"  --upstream HOST:PORT the S3 server\n"
		"  --latency-ms N       first-byte latency per request (default 20)\n"
		"  --jitter-ms N        plus uniform 0..N ms (default 0)\n"
		"  --bw-conn MBPS       per-connection cap on response bytes, 10^6 B/s\n"
		"                       (default 90, 0 = unlimited)\n"
		"  --bw-total MBPS      cap over all connections (default 0 = unlimited)\n"
		"  --fault-rate P       probability 0..1 that a request gets a fault\n"
		"  --faults LIST        503,slowdown,reset,truncate,stall (default all)\n"
		"  --stall-ms N         pause of a stall fault (default 5000)\n"
		"  --seed N             random seed (default: time and pid)\n"
		"  --control PATH       unix socket: stats | reset-stats | set NAME VALUE\n"
		"  --log-level LEVEL    error, warn, info, debug\n");
}

static int parse_args(int argc, char **argv, const char **listen_addr,
		      const char **upstream)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"upstream", required_argument, NULL, 'u'},
		{"latency-ms", required_argument, NULL, 1},
		{"jitter-ms", required_argument, NULL, 1},
		{"bw-conn", required_argument, NULL, 1},
		{"bw-total", required_argument, NULL, 1},
		{"fault-rate", required_argument, NULL, 1},
		{"faults", required_argument, NULL, 1},
		{"stall-ms", required_argument, NULL, 1},
		{"seed", required_argument, NULL, 's'},
		{"control", required_argument, NULL, 'c'},
		{"log-level", required_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char err[256];
	int opt, idx;
	while ((opt = getopt_long(argc, argv, "", opts, &idx)) != -1) {
		switch (opt) {
		case 'l':
			*listen_addr = optarg;
			break;
		case 'u':
			*upstream = optarg;
			break;
		case 's': {
			char *end;
			errno = 0;
			base_seed = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end) {
				log_error("bad --seed '%s'", optarg);
				return -1;
			}
			break;
		}
		case 'c':
			control_path = optarg;
			break;
		case 'v':
			if ((rc_log_level = rc_log_level_parse(optarg)) < 0) {
				log_error("bad --log-level '%s'", optarg);
				return -1;
			}
			break;
		case 1:
			if (apply_setting(opts[idx].name, optarg, err, sizeof(err))) {
				log_error("%s", err);
				return -1;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind < argc || !*listen_addr || !*upstream) {
		usage(stderr);
		return -1;
	}
	return 0;
}

static void set_defaults(void)
{
	atomic_store(&cfg.latency_ms, 20);
	atomic_store(&cfg.stall_ms, 5000);
	atomic_store(&cfg.bw_conn, 90 * 1000000ull);
	atomic_store(&cfg.fault_mask, (1u << FAULT_KINDS) - 1);
	base_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

/* Accepts until SIGTERM/SIGINT; SIGUSR1 prints the counters. */
static int run(int lfd, int sfd)
{
	struct pollfd pfd[2] = {{.fd = lfd, .events = POLLIN},
				{.fd = sfd, .events = POLLIN}};
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_error("poll: %s", strerror(errno));
			return 1;
		}
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof(si)) != sizeof(si))
				continue;
			if (si.ssi_signo == SIGUSR1) {
				print_stats("SIGUSR1");
				continue;
			}
			return 0;
		}
		if (pfd[0].revents & POLLIN) {
			int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (cfd >= 0)
				start_connection(cfd);
			else if (errno != EINTR && errno != ECONNABORTED &&
				 errno != EAGAIN)
				log_warn("accept: %s", strerror(errno));
		}
	}
}

int main(int argc, char **argv)
{
	const char *listen_addr = NULL, *upstream = NULL;
	set_defaults();
	if (parse_args(argc, argv, &listen_addr, &upstream))
		return 2;
	upstream_ai = resolve(upstream, false);
	struct addrinfo *listen_ai = resolve(listen_addr, true);
	if (!upstream_ai || !listen_ai)
		return 2;

	/* Signals are taken by the main loop only; threads inherit the mask. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGUSR1);
	signal(SIGPIPE, SIG_IGN);
	int sfd = -1;
	if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0 ||
	    (sfd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0) {
		log_error("signalfd: %s", strerror(errno));
		return 1;
	}
	/* The control socket exists before "listening" is printed, so whoever
	 * waits for that line may use both at once. */
	int lfd = open_listener(listen_ai, listen_addr);
	if (lfd < 0 || (control_path && start_control(control_path)) ||
	    announce_listener(lfd))
		return 1;

	int rc = run(lfd, sfd);
	close(lfd);
	print_stats("exit");
	if (control_path)
		unlink(control_path);
	freeaddrinfo(upstream_ai);
	/* Connection threads may still be mid-request; ending the process
	 * ends them. */
	_exit(rc);
}
