/* curlio.c - owns a reactor's curl multi handle: curl's socket callbacks
 * as io_uring polls, its timer as a reactor timer, and the table from
 * each easy handle to the done callback of its transfer. One loop, no
 * second event system (curl_multi_socket_action). */
#include "curlio.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "list.h"
#include "log.h"
#include "reactor.h"

struct curl_sock {
	struct rc_ev ev;
	struct curlio *c;
	curl_socket_t fd;
	int want;          /* CURL_POLL_IN/OUT/INOUT */
	unsigned armed_mask;
	bool armed, dead, in_dispatch;
	struct rc_list link;   /* on curlio.socks */
};

/* One transfer: the easy handle and where its end goes. */
struct xfer {
	CURL *easy;
	curlio_done_fn done;
	void *ctx;
	struct xfer *next;
};

struct curlio {
	struct reactor *r;
	CURLM *multi;
	struct reactor_timer timer;
	struct rc_list socks;     /* every curl_sock, freed with the multi */
	struct xfer **table;      /* hash of easy handle -> xfer */
	uint32_t mask, n;
	_Atomic uint32_t inflight;
	struct rc_ev ignore_ev;   /* a poll-remove's own completion */
};

static void sock_free(struct curl_sock *cs)
{
	rc_list_del(&cs->link);
	free(cs);
}

static unsigned poll_mask(int what)
{
	unsigned m = 0;
	if (what & CURL_POLL_IN)
		m |= POLLIN;
	if (what & CURL_POLL_OUT)
		m |= POLLOUT;
	return m;
}

static void sock_arm(struct curl_sock *cs)
{
	struct io_uring_sqe *sqe = reactor_sqe(cs->c->r);
	cs->armed_mask = poll_mask(cs->want);
	io_uring_prep_poll_add(sqe, cs->fd, cs->armed_mask);
	io_uring_sqe_set_data(sqe, &cs->ev);
	cs->armed = true;
}

static void sock_disarm(struct curl_sock *cs)
{
	struct io_uring_sqe *sqe = reactor_sqe(cs->c->r);
	io_uring_prep_poll_remove(sqe, (__u64)(uintptr_t)&cs->ev);
	io_uring_sqe_set_data(sqe, &cs->c->ignore_ev);
}

/* ---- the transfer table ------------------------------------------------- */

static struct xfer **xfer_slot(struct curlio *c, CURL *easy)
{
	uintptr_t h = (uintptr_t)easy;
	h ^= h >> 17;
	h *= 0x9e3779b97f4a7c15ull;
	struct xfer **pp = &c->table[(h >> 20) & c->mask];
	while (*pp && (*pp)->easy != easy)
		pp = &(*pp)->next;
	return pp;
}

static int table_grow(struct curlio *c)
{
	uint32_t old = c->mask + 1;
	struct xfer **t = c->table;
	c->table = calloc(old * 2, sizeof(*t));
	if (!c->table) {
		c->table = t;
		return -ENOMEM;
	}
	c->mask = old * 2 - 1;
	for (uint32_t i = 0; i < old; i++) {
		for (struct xfer *x = t[i], *next; x; x = next) {
			next = x->next;
			struct xfer **pp = xfer_slot(c, x->easy);
			x->next = *pp;
			*pp = x;
		}
	}
	free(t);
	return 0;
}

/* Unlinks the transfer of easy and returns it (NULL if unknown). */
static struct xfer *xfer_take(struct curlio *c, CURL *easy)
{
	struct xfer **pp = xfer_slot(c, easy), *x = *pp;
	if (x) {
		*pp = x->next;
		c->n--;
	}
	return x;
}

/* ---- curl's callbacks --------------------------------------------------- */

static void check_done(struct curlio *c)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(c->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		CURL *easy = msg->easy_handle;
		CURLcode code = msg->data.result;
		curl_multi_remove_handle(c->multi, easy);
		c->inflight--;
		struct xfer *x = xfer_take(c, easy);
		if (!x)
			continue;
		curlio_done_fn done = x->done;
		void *ctx = x->ctx;
		free(x);
		done(ctx, easy, code);
	}
}

static void action(struct curlio *c, curl_socket_t fd, int events)
{
	int running;
	curl_multi_socket_action(c->multi, fd, events, &running);
	check_done(c);
}

static void on_poll(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	struct curl_sock *cs = rc_container_of(ev, struct curl_sock, ev);
	int res = cqe->res;
	cs->armed = false;
	if (cs->dead) {
		sock_free(cs);
		return;
	}
	if (res != -ECANCELED) {
		int what = 0;
		if (res < 0)
			what = CURL_CSELECT_ERR;
		else {
			if (res & POLLIN)
				what |= CURL_CSELECT_IN;
			if (res & POLLOUT)
				what |= CURL_CSELECT_OUT;
			if (res & (POLLERR | POLLHUP))
				what |= CURL_CSELECT_ERR;
		}
		cs->in_dispatch = true;
		action(cs->c, cs->fd, what);
		cs->in_dispatch = false;
	}
	if (cs->dead)
		sock_free(cs);
	else if (cs->want)
		sock_arm(cs);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
		     void *socketp)
{
	struct curlio *c = userp;
	struct curl_sock *cs = socketp;
	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (!cs)
			return 0;
		curl_multi_assign(c->multi, fd, NULL);
		cs->dead = true;
		if (cs->armed)
			sock_disarm(cs); /* freed by its completion */
		else if (!cs->in_dispatch)
			sock_free(cs);
		return 0;
	}
	if (!cs) {
		cs = calloc(1, sizeof(*cs));
		if (!cs)
			return -1;
		cs->ev.fn = on_poll;
		cs->c = c;
		cs->fd = fd;
		rc_list_add(&c->socks, &cs->link);
		curl_multi_assign(c->multi, fd, cs);
	}
	cs->want = what;
	if (cs->armed && cs->armed_mask != poll_mask(what))
		sock_disarm(cs); /* re-armed when the poll completes */
	else if (!cs->armed && !cs->in_dispatch)
		sock_arm(cs);
	return 0;
}

static void on_timer_due(struct reactor_timer *t)
{
	struct curlio *c = rc_container_of(t, struct curlio, timer);
	action(c, CURL_SOCKET_TIMEOUT, 0);
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct curlio *c = userp;
	(void)multi;
	if (timeout_ms < 0)
		reactor_timer_cancel(&c->timer);
	else
		reactor_timer_after(c->r, &c->timer,
				    (uint64_t)timeout_ms * 1000000ull);
	return 0;
}

/* ---- the interface ------------------------------------------------------ */

struct curlio *curlio_new(struct reactor *r, long max_connections)
{
	struct curlio *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->r = r;
	rc_list_init(&c->socks);
	c->mask = 255;
	c->table = calloc(c->mask + 1, sizeof(*c->table));
	c->multi = curl_multi_init();
	if (!c->table || !c->multi) {
		curlio_free(c);
		return NULL;
	}
	reactor_timer_init(&c->timer, on_timer_due);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
			  max_connections);
	curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
			  max_connections);
	curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, max_connections);
	return c;
}

void curlio_free(struct curlio *c)
{
	if (!c)
		return;
	reactor_timer_cancel(&c->timer);
	for (uint32_t i = 0; c->table && i <= c->mask; i++) {
		for (struct xfer *x = c->table[i], *next; x; x = next) {
			next = x->next;
			curl_multi_remove_handle(c->multi, x->easy);
			free(x);
		}
	}
	if (c->multi)
		curl_multi_cleanup(c->multi);
	while (!rc_list_empty(&c->socks))
		sock_free(rc_list_entry(c->socks.next, struct curl_sock, link));
	free(c->table);
	free(c);
}

int curlio_add(struct curlio *c, CURL *easy, curlio_done_fn done, void *ctx)
{
	struct xfer *x = malloc(sizeof(*x));
	if (!x)
		return -ENOMEM;
	if (c->n + 1 > c->mask + 1)
		table_grow(c); /* or longer chains */
	*x = (struct xfer){.easy = easy, .done = done, .ctx = ctx};
	CURLMcode mc = curl_multi_add_handle(c->multi, easy);
	if (mc != CURLM_OK) {
		log_error("curl_multi_add_handle: %s", curl_multi_strerror(mc));
		free(x);
		return -EIO;
	}
	struct xfer **pp = xfer_slot(c, easy);
	x->next = *pp;
	*pp = x;
	c->n++;
	c->inflight++;
	return 0;
}

void curlio_remove(struct curlio *c, CURL *easy)
{
	struct xfer *x = xfer_take(c, easy);
	if (!x)
		return;
	curl_multi_remove_handle(c->multi, easy);
	c->inflight--;
	free(x);
}

uint32_t curlio_inflight(const struct curlio *c)
{
	return atomic_load_explicit(&c->inflight, memory_order_relaxed);
}
