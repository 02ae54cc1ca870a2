/* metrics_http.c - owns the Prometheus HTTP endpoint: its listening
 * socket, its thread and its connections. Everything a scraper sends is
 * hostile: requests are bounded in size and time, the connection count is
 * capped, and only "GET /metrics" gets the statistics. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "log.h"
#include "metrics.h"
#include "metrics_http.h"

#define HTTP_MAX_CONN 16
#define HTTP_REQ_MAX 4096
#define HTTP_DEADLINE_MS 5000
/* Rendered statistics: grown up to this while a render is truncated. */
#define HTTP_BODY_MAX (16u << 20)

struct conn {
	int fd;                   /* -1: free slot */
	bool writing;
	uint64_t deadline_ms, accepted_ms;
	char req[HTTP_REQ_MAX];
	size_t req_len;
	char *out;
	size_t out_len, out_off;
};

struct metrics_http {
	const struct daemon *d;
	int listen_fd, stop_fd;
	pthread_t thread;
	struct conn conns[HTTP_MAX_CONN];
	size_t body_cap;
	uint64_t accept_resume_ms; /* out of fds: accepts paused until then */
};

static void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
	c->writing = false;
	c->req_len = c->out_len = c->out_off = 0;
}

/* ---- replies ------------------------------------------------------------ */

static void reply(struct conn *c, const char *status, const char *body,
		  size_t body_len)
{
	char head[256];
	int hl = snprintf(head, sizeof(head),
		"HTTP/1.1 %s\r\n"
		"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
		"Content-Length: %zu\r\nConnection: close\r\n\r\n",
		status, body_len);
	c->out = malloc((size_t)hl + body_len);
	if (!c->out) {
		conn_close(c);
		return;
	}
	memcpy(c->out, head, (size_t)hl);
	memcpy(c->out + hl, body, body_len);
	c->out_len = (size_t)hl + body_len;
	c->out_off = 0;
	c->writing = true;
	shutdown(c->fd, SHUT_RD); /* nothing more is read */
}

static void reply_error(struct conn *c, const char *status)
{
	char body[96];
	int n = snprintf(body, sizeof(body), "%s\n", status);
	reply(c, status, body, (size_t)n);
}

static void reply_metrics(struct metrics_http *h, struct conn *c)
{
	for (;;) {
		char *body = malloc(h->body_cap);
		if (!body) {
			reply_error(c, "503 Service Unavailable");
			return;
		}
		size_t n = metrics_render(h->d, body, h->body_cap);
		if (n + 1 < h->body_cap || h->body_cap >= HTTP_BODY_MAX) {
			reply(c, "200 OK", body, n);
			free(body);
			return;
		}
		free(body); /* truncated: a larger buffer from now on */
		h->body_cap *= 2;
	}
}

/* The request line of a complete request: only GET /metrics (with or
 * without a query string) over HTTP/1.x. */
static void answer(struct metrics_http *h, struct conn *c)
{
	char *eol = memchr(c->req, '\n', c->req_len);
	size_t n = (size_t)(eol - c->req);
	if (n && c->req[n - 1] == '\r')
		n--;
	char line[HTTP_REQ_MAX];
	memcpy(line, c->req, n);
	line[n] = 0;
	char *sp1 = strchr(line, ' ');
	char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || strchr(sp2 + 1, ' ') ||
	    strncmp(sp2 + 1, "HTTP/1.", 7) || strlen(sp2 + 1) != 8) {
		reply_error(c, "400 Bad Request");
		return;
	}
	*sp1 = *sp2 = 0;
	const char *path = sp1 + 1;
	size_t pl = strcspn(path, "?");
	if (pl != 8 || strncmp(path, "/metrics", 8))
		reply_error(c, "404 Not Found");
	else if (strcmp(line, "GET"))
		reply_error(c, "405 Method Not Allowed");
	else
		reply_metrics(h, c);
}

/* A request ends at its blank line; a NUL in it is garbage. Only the
 * bytes from `from` on are new (a byte-at-a-time sender costs no rescan). */
static bool request_complete(const struct conn *c, size_t from, bool *bad)
{
	*bad = memchr(c->req + from, 0, c->req_len - from) != NULL;
	for (size_t i = from ? from : 1; i < c->req_len; i++)
		if (c->req[i] == '\n' &&
		    (c->req[i - 1] == '\n' ||
		     (i >= 3 && !memcmp(c->req + i - 3, "\r\n\r", 3))))
			return true;
	return false;
}

/* ---- I/O ---------------------------------------------------------------- */

static void on_readable(struct metrics_http *h, struct conn *c)
{
	ssize_t n = recv(c->fd, c->req + c->req_len,
			 sizeof(c->req) - c->req_len, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c);
		return;
	}
	size_t from = c->req_len;
	c->req_len += (size_t)n;
	bool bad;
	bool done = request_complete(c, from, &bad);
	if (bad)
		reply_error(c, "400 Bad Request");
	else if (done)
		answer(h, c);
	else if (c->req_len == sizeof(c->req))
		reply_error(c, "431 Request Header Fields Too Large");
}

static void on_writable(struct conn *c)
{
	ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c);
		return;
	}
	c->out_off += (size_t)n;
	if (c->out_off == c->out_len)
		conn_close(c);
}

/* A free slot; when all are taken, the oldest connection still sending
 * its request gives way (a slow sender loses to a new one), else none. */
static struct conn *slot_for_new(struct metrics_http *h)
{
	struct conn *oldest = NULL;
	for (unsigned i = 0; i < HTTP_MAX_CONN; i++) {
		struct conn *c = &h->conns[i];
		if (c->fd < 0)
			return c;
		if (!c->writing && (!oldest || c->accepted_ms < oldest->accepted_ms))
			oldest = c;
	}
	if (oldest)
		conn_close(oldest);
	return oldest;
}

static void on_accept(struct metrics_http *h)
{
	for (;;) {
		int fd = accept4(h->listen_fd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			/* Out of fds the socket stays readable: polling it
			 * again at once would spin. */
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				h->accept_resume_ms = rc_now_ms() + 100;
			return;
		}
		struct conn *c = slot_for_new(h);
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->accepted_ms = rc_now_ms();
		c->deadline_ms = c->accepted_ms + HTTP_DEADLINE_MS;
	}
}

static void *http_thread(void *arg)
{
	struct metrics_http *h = arg;
	struct pollfd pfd[HTTP_MAX_CONN + 2];
	struct conn *owner[HTTP_MAX_CONN + 2];
	for (;;) {
		uint64_t now = rc_now_ms();
		int timeout = -1;
		unsigned n = 0;
		pfd[n++] = (struct pollfd){.fd = h->stop_fd, .events = POLLIN};
		bool paused = now < h->accept_resume_ms;
		pfd[n++] = (struct pollfd){.fd = h->listen_fd,
					   .events = paused ? 0 : POLLIN};
		if (paused)
			timeout = (int)(h->accept_resume_ms - now);
		for (unsigned i = 0; i < HTTP_MAX_CONN; i++) {
			struct conn *c = &h->conns[i];
			if (c->fd < 0)
				continue;
			if (now >= c->deadline_ms) { /* slow: dropped */
				conn_close(c);
				continue;
			}
			int left = (int)(c->deadline_ms - now);
			if (timeout < 0 || left < timeout)
				timeout = left;
			owner[n] = c;
			pfd[n++] = (struct pollfd){.fd = c->fd,
				.events = c->writing ? POLLOUT : POLLIN};
		}
		if (poll(pfd, n, timeout) < 0 && errno != EINTR) {
			log_error("metrics: poll: %s; the endpoint stops",
				  strerror(errno));
			break;
		}
		if (pfd[0].revents)
			break;
		for (unsigned i = 2; i < n; i++) {
			if (!pfd[i].revents)
				continue;
			if (owner[i]->writing)
				on_writable(owner[i]);
			else
				on_readable(h, owner[i]);
		}
		if (pfd[1].revents & POLLIN)
			on_accept(h);
	}
	return NULL;
}

/* ---- start and stop ----------------------------------------------------- */

static int listen_on(const struct rc_config *cfg, char *err, size_t errlen)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, cfg->metrics_host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(cfg->metrics_port);
		sl = sizeof(*a4);
	} else if (inet_pton(AF_INET6, cfg->metrics_host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(cfg->metrics_port);
		sl = sizeof(*a6);
	} else {
		snprintf(err, errlen, "metrics_listen: bad address %s",
			 cfg->metrics_host);
		return -EINVAL;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			0);
	int one = 1;
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (ss.ss_family == AF_INET6 &&
	     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) ||
	    bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 64) < 0) {
		int e = errno;
		snprintf(err, errlen, "metrics_listen: %s%s%s:%u: %s",
			 ss.ss_family == AF_INET6 ? "[" : "", cfg->metrics_host,
			 ss.ss_family == AF_INET6 ? "]" : "",
			 cfg->metrics_port, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	return fd;
}

int metrics_http_start(const struct daemon *d, struct metrics_http **out,
		       char *err, size_t errlen)
{
	*out = NULL;
	if (!d->cfg.metrics_port)
		return 0;
	struct metrics_http *h = calloc(1, sizeof(*h));
	if (!h) {
		snprintf(err, errlen, "metrics_listen: out of memory");
		return -ENOMEM;
	}
	h->d = d;
	h->body_cap = 256 << 10;
	for (unsigned i = 0; i < HTTP_MAX_CONN; i++)
		h->conns[i].fd = -1;
	h->listen_fd = listen_on(&d->cfg, err, errlen);
	if (h->listen_fd < 0) {
		int e = h->listen_fd;
		free(h);
		return e;
	}
	h->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int e = h->stop_fd < 0 ? errno
		: pthread_create(&h->thread, NULL, http_thread, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		snprintf(err, errlen, "metrics_listen: thread: %s", strerror(e));
		if (h->stop_fd >= 0)
			close(h->stop_fd);
		close(h->listen_fd);
		free(h);
		return -e;
	}
	pthread_setname_np(h->thread, "rc-metrics");
	log_info("metrics: serving GET /metrics on %s%s%s:%u",
		 strchr(d->cfg.metrics_host, ':') ? "[" : "",
		 d->cfg.metrics_host,
		 strchr(d->cfg.metrics_host, ':') ? "]" : "",
		 d->cfg.metrics_port);
	*out = h;
	return 0;
}

void metrics_http_stop(struct metrics_http *h)
{
	if (!h)
		return;
	uint64_t one = 1;
	if (write(h->stop_fd, &one, sizeof(one)) < 0)
		log_warn("metrics: stop: %s", strerror(errno));
	pthread_join(h->thread, NULL);
	for (unsigned i = 0; i < HTTP_MAX_CONN; i++)
		conn_close(&h->conns[i]);
	close(h->stop_fd);
	close(h->listen_fd);
	free(h);
}
