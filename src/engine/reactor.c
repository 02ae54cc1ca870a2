/* reactor.c - owns a shard's io_uring loop: curl's sockets (poll) and timer
 * (the loop's wait timeout), client doorbells, the listening socket and
 * signals. One loop, no second event system: libcurl is driven with
 * curl_multi_socket_action. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <time.h>

#include "daemon.h"
#include "journal.h"
#include "log.h"
#include "uring.h"
#include "upload.h"

#define RING_DEPTH 1024
#define IDLE_SPIN_NS 20000 /* poll client rings this long before sleeping */

struct curl_sock {
	struct ev ev;
	struct shard *sh;
	curl_socket_t fd;
	int want;          /* CURL_POLL_IN/OUT/INOUT */
	unsigned armed_mask;
	bool armed, dead, in_dispatch;
	struct curl_sock *next, *prev;
};

static void curl_sock_free(struct curl_sock *cs)
{
	struct shard *sh = cs->sh;
	if (cs->prev)
		cs->prev->next = cs->next;
	else
		sh->csocks = cs->next;
	if (cs->next)
		cs->next->prev = cs->prev;
	free(cs);
}

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct ev ignore_ev = {EV_IGNORE};

struct io_uring_sqe *reactor_sqe(struct shard *sh)
{
	return uring_sqe(&sh->ring);
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

static void curl_sock_arm(struct curl_sock *cs)
{
	struct io_uring_sqe *sqe = reactor_sqe(cs->sh);
	cs->armed_mask = poll_mask(cs->want);
	io_uring_prep_poll_add(sqe, cs->fd, cs->armed_mask);
	io_uring_sqe_set_data(sqe, &cs->ev);
	cs->armed = true;
}

static void curl_sock_disarm(struct curl_sock *cs)
{
	struct io_uring_sqe *sqe = reactor_sqe(cs->sh);
	io_uring_prep_poll_remove(sqe, (__u64)(uintptr_t)&cs->ev);
	io_uring_sqe_set_data(sqe, &ignore_ev);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
			  void *socketp)
{
	struct shard *sh = userp;
	struct curl_sock *cs = socketp;
	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (!cs)
			return 0;
		curl_multi_assign(sh->multi, fd, NULL);
		cs->dead = true;
		if (cs->armed)
			curl_sock_disarm(cs); /* freed by its completion */
		else if (!cs->in_dispatch)
			curl_sock_free(cs);
		return 0;
	}
	if (!cs) {
		cs = calloc(1, sizeof(*cs));
		if (!cs)
			return -1;
		cs->ev.kind = EV_CURL_SOCK;
		cs->sh = sh;
		cs->fd = fd;
		cs->next = sh->csocks;
		if (sh->csocks)
			sh->csocks->prev = cs;
		sh->csocks = cs;
		curl_multi_assign(sh->multi, fd, cs);
	}
	cs->want = what;
	if (cs->armed && cs->armed_mask != poll_mask(what))
		curl_sock_disarm(cs); /* re-armed when the poll completes */
	else if (!cs->armed && !cs->in_dispatch)
		curl_sock_arm(cs);
	return 0;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct shard *sh = userp;
	(void)multi;
	sh->curl_due_ns = timeout_ms < 0 ? -1
			  : (int64_t)(now_ns() + (uint64_t)timeout_ms * 1000000ull);
	return 0;
}

static void curl_check_done(struct shard *sh)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(sh->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		CURL *easy = msg->easy_handle;
		CURLcode code = msg->data.result;
		struct s3_req *req = NULL;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&req);
		curl_multi_remove_handle(sh->multi, easy);
		sh->s3_inflight--;
		if (upload_is_engine_req(req)) {
			upload_transfer_done(req, code);
			continue;
		}
		((struct fetch *)s3_req_get_private(req))->in_curl = false;
		fetch_done(s3_req_get_private(req), code);
	}
}

static void curl_action(struct shard *sh, curl_socket_t fd, int events)
{
	int running;
	curl_multi_socket_action(sh->multi, fd, events, &running);
	curl_check_done(sh);
}

static void on_curl_poll(struct curl_sock *cs, int res)
{
	cs->armed = false;
	if (cs->dead) {
		curl_sock_free(cs);
		return;
	}
	if (res != -ECANCELED) {
		int ev = 0;
		if (res < 0)
			ev = CURL_CSELECT_ERR;
		else {
			if (res & POLLIN)
				ev |= CURL_CSELECT_IN;
			if (res & POLLOUT)
				ev |= CURL_CSELECT_OUT;
			if (res & (POLLERR | POLLHUP))
				ev |= CURL_CSELECT_ERR;
		}
		cs->in_dispatch = true;
		curl_action(cs->sh, cs->fd, ev);
		cs->in_dispatch = false;
	}
	if (cs->dead)
		curl_sock_free(cs);
	else if (cs->want)
		curl_sock_arm(cs);
}

void reactor_add_transfer(struct shard *sh, struct fetch *f)
{
	s3_req_set_private(f->req, f);
	CURLMcode mc = curl_multi_add_handle(sh->multi, s3_req_easy(f->req));
	if (mc != CURLM_OK) {
		log_error("curl_multi_add_handle: %s", curl_multi_strerror(mc));
		fetch_done(f, CURLE_FAILED_INIT);
		return;
	}
	sh->s3_inflight++;
	f->in_curl = true;
}

int reactor_init(struct shard *sh)
{
	struct io_uring_params p = {0};
	p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
	int r = io_uring_queue_init_params(RING_DEPTH, &sh->ring, &p);
	if (r < 0) {
		memset(&p, 0, sizeof(p));
		r = io_uring_queue_init_params(RING_DEPTH, &sh->ring, &p);
	}
	if (r < 0)
		return r;
	sh->multi = curl_multi_init();
	if (!sh->multi)
		return -ENOMEM;
	const struct rc_config *cfg = &sh->d->cfg;
	curl_multi_setopt(sh->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(sh->multi, CURLMOPT_SOCKETDATA, sh);
	curl_multi_setopt(sh->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(sh->multi, CURLMOPT_TIMERDATA, sh);
	curl_multi_setopt(sh->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
			  (long)cfg->max_connections);
	curl_multi_setopt(sh->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
			  (long)cfg->max_connections);
	curl_multi_setopt(sh->multi, CURLMOPT_MAXCONNECTS,
			  (long)cfg->max_connections);
	sh->curl_due_ns = -1;
	sh->wake_ev.kind = EV_WAKE;
	sh->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return sh->wake_fd < 0 ? -errno : 0;
}

void reactor_destroy(struct shard *sh)
{
	if (sh->multi)
		curl_multi_cleanup(sh->multi);
	sh->multi = NULL;
	while (sh->csocks)
		curl_sock_free(sh->csocks);
	if (sh->ring.ring_fd > 0)
		io_uring_queue_exit(&sh->ring);
	memset(&sh->ring, 0, sizeof(sh->ring));
}

static void arm_accept(struct daemon *d)
{
	struct io_uring_sqe *sqe = reactor_sqe(&d->shards[0]);
	io_uring_prep_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, &d->accept_ev);
	d->accept_armed = true;
}

#define ACCEPT_PAUSE_MIN_MS 10
#define ACCEPT_PAUSE_MAX_MS 1000

/* Out of file descriptors, accept() would fail at once again: stop
 * accepting for a while (doubling, up to a second) instead of spinning.
 * Waiting clients stay in the listen backlog. One line per episode. */
static void accept_pause(struct daemon *d, int err)
{
	quota_refused(&d->quota, REFUSED_ACCEPT_FDS);
	d->accept_failures++;
	if (d->accept_pause_ms == 0)
		log_warn("accept: %s: no new connections for now, retrying "
			 "every %d ms to %d ms until descriptors are freed",
			 strerror(err), ACCEPT_PAUSE_MIN_MS,
			 ACCEPT_PAUSE_MAX_MS);
	d->accept_pause_ms = d->accept_pause_ms
				     ? 2 * d->accept_pause_ms
				     : ACCEPT_PAUSE_MIN_MS;
	if (d->accept_pause_ms > ACCEPT_PAUSE_MAX_MS)
		d->accept_pause_ms = ACCEPT_PAUSE_MAX_MS;
	d->accept_resume_ns = now_ns() + d->accept_pause_ms * 1000000ull;
}

static void accept_resumed(struct daemon *d)
{
	if (d->accept_pause_ms == 0)
		return;
	log_info("accept: connections accepted again after %llu failures "
		 "(out of file descriptors)",
		 (unsigned long long)d->accept_failures);
	d->accept_pause_ms = 0;
	d->accept_failures = 0;
	d->accept_resume_ns = 0;
}

static void on_accept(struct daemon *d, int res)
{
	d->accept_armed = false;
	if (res >= 0) {
		accept_resumed(d);
		session_accept(d, res);
	} else if (res == -EMFILE || res == -ENFILE || res == -ENOBUFS ||
		   res == -ENOMEM) {
		accept_pause(d, -res);
		return; /* run_timers arms it again */
	} else if (res != -ECANCELED) {
		log_warn("accept: %s", strerror(-res));
	}
	if (!d->stopping)
		arm_accept(d);
}

static void arm_signal(struct daemon *d)
{
	struct io_uring_sqe *sqe = reactor_sqe(&d->shards[0]);
	io_uring_prep_read(sqe, d->signal_fd, d->sigbuf,
			   sizeof(struct signalfd_siginfo), 0);
	io_uring_sqe_set_data(sqe, &d->signal_ev);
}

static void on_signal(struct daemon *d, int res)
{
	if (res == (int)sizeof(struct signalfd_siginfo)) {
		struct signalfd_siginfo *si = (void *)d->sigbuf;
		if (si->ssi_signo == SIGHUP) {
			d->reload = true;
		} else {
			log_info("signal %u: draining and exiting",
				 si->ssi_signo);
			d->stopping = true;
		}
	}
	if (!d->stopping)
		arm_signal(d);
}

static void arm_wake(struct shard *sh)
{
	struct io_uring_sqe *sqe = reactor_sqe(sh);
	io_uring_prep_read(sqe, sh->wake_fd, &sh->wake_buf,
			   sizeof(sh->wake_buf), 0);
	io_uring_sqe_set_data(sqe, &sh->wake_ev);
}

void reactor_wake(struct shard *sh)
{
	uint64_t one = 1;
	if (write(sh->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("shard %u: wake: %s", sh->id, strerror(errno));
}

/* Another shard handed sessions over, added datasets, or asks to stop. */
static void on_wake(struct shard *sh)
{
	pthread_mutex_lock(&sh->lock);
	struct session *in = sh->inbox;
	sh->inbox = NULL;
	pthread_mutex_unlock(&sh->lock);
	daemon_shard_sync_datasets(sh);
	while (in) {
		struct session *next = in->next;
		session_adopt(sh, in);
		in = next;
	}
	if (!sh->d->stopping)
		arm_wake(sh);
}

static void dispatch(struct shard *sh, struct io_uring_cqe *cqe)
{
	struct daemon *d = sh->d;
	struct ev *ev = io_uring_cqe_get_data(cqe);
	if (!ev)
		return;
	switch (ev->kind) {
	case EV_ACCEPT:
		on_accept(d, cqe->res);
		break;
	case EV_SIGNAL:
		on_signal(d, cqe->res);
		break;
	case EV_SESSION_SOCK:
		session_on_sock((struct session *)((char *)ev -
			offsetof(struct session, sock_ev)), cqe->res);
		break;
	case EV_SESSION_DOORBELL:
		session_on_doorbell((struct session *)((char *)ev -
			offsetof(struct session, bell_ev)), cqe->res);
		break;
	case EV_CURL_SOCK:
		on_curl_poll((struct curl_sock *)ev, cqe->res);
		break;
	case EV_TIER:
		tier_complete(sh->tier, cqe);
		break;
	case EV_WAKE:
		on_wake(sh);
		break;
	case EV_JOURNAL:
		journal_complete(sh->journal, cqe);
		break;
	case EV_WORKERS:
		writeback_workers_ready(sh);
		break;
	default:
		break;
	}
}

static bool process_sessions(struct shard *sh)
{
	bool busy = false;
	for (struct session *s = sh->sessions, *n; s; s = n) {
		n = s->next;
		busy |= session_process(s);
	}
	return busy;
}

static void flush_sessions(struct shard *sh)
{
	for (struct session *s = sh->sessions; s; s = s->next)
		session_flush(s);
}

static void set_need_wakeup(struct shard *sh, bool on)
{
	for (struct session *s = sh->sessions; s; s = s->next) {
		if (!s->hdr)
			continue; /* not attached yet: no ring */
		if (on)
			atomic_fetch_or(&s->hdr->sq_flags, RC_SQ_NEED_WAKEUP);
		else
			atomic_fetch_and(&s->hdr->sq_flags, ~RC_SQ_NEED_WAKEUP);
	}
}

static bool sessions_have_work(struct shard *sh)
{
	for (struct session *s = sh->sessions; s; s = s->next)
		if (s->hdr && atomic_load_explicit(&s->hdr->sq_tail,
					 memory_order_acquire) != s->sq_head)
			return true;
	return false;
}

/* Nanoseconds until the next timer (curl or a retry), capped. */
static int64_t next_timeout(struct shard *sh, uint64_t now)
{
	int64_t t = 1000000000ll; /* wake at least once a second */
	if (sh->curl_due_ns >= 0)
		t = sh->curl_due_ns > (int64_t)now ? sh->curl_due_ns - (int64_t)now : 0;
	if (sh->retries) {
		int64_t r = sh->retries->due_ns > now ?
			    (int64_t)(sh->retries->due_ns - now) : 0;
		if (r < t)
			t = r;
	}
	int64_t w = writeback_next_timer(sh, now);
	if (w < t)
		t = w;
	if (sh->id == 0 && sh->d->accept_resume_ns) {
		uint64_t a = sh->d->accept_resume_ns;
		int64_t r = a > now ? (int64_t)(a - now) : 0;
		if (r < t)
			t = r;
	}
	return t;
}

static void run_timers(struct shard *sh)
{
	uint64_t now = now_ns();
	if (sh->curl_due_ns >= 0 && (uint64_t)sh->curl_due_ns <= now) {
		sh->curl_due_ns = -1;
		curl_action(sh, CURL_SOCKET_TIMEOUT, 0);
	}
	struct daemon *d = sh->d;
	if (sh->id == 0 && d->accept_resume_ns && d->accept_resume_ns <= now &&
	    !d->accept_armed && !d->stopping) {
		d->accept_resume_ns = 0; /* the pause stays until one succeeds */
		arm_accept(d);
	}
	fetch_run_retries(sh);
	writeback_run_timers(sh);
	daemon_tier_tick(sh);
	metrics_publish(sh);
}

static void reap(struct shard *sh)
{
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	io_uring_for_each_cqe(&sh->ring, head, cqe) {
		dispatch(sh, cqe);
		n++;
	}
	io_uring_cq_advance(&sh->ring, n);
}

static void wait_events(struct shard *sh, bool busy)
{
	if (!busy && sh->sessions) {
		uint64_t until = now_ns() + IDLE_SPIN_NS;
		for (unsigned i = 1; !sessions_have_work(sh) &&
				     !io_uring_cq_ready(&sh->ring); i++) {
			__builtin_ia32_pause();
			if (i % 64 == 0 && now_ns() >= until)
				break; /* the clock is read rarely: it costs */
		}
		busy = sessions_have_work(sh);
	}
	if (!busy) {
		set_need_wakeup(sh, true);
		atomic_thread_fence(memory_order_seq_cst);
		busy = sessions_have_work(sh);
	}
	struct io_uring_cqe *cqe;
	if (busy || io_uring_cq_ready(&sh->ring)) {
		io_uring_submit(&sh->ring);
	} else {
		int64_t t = next_timeout(sh, now_ns());
		struct __kernel_timespec ts = {.tv_sec = t / 1000000000ll,
					       .tv_nsec = t % 1000000000ll};
		io_uring_submit_and_wait_timeout(&sh->ring, &cqe, 1, &ts,
						 NULL);
	}
	set_need_wakeup(sh, false);
	reap(sh);
}

void reactor_drain_tier(struct daemon *d, struct shard *sh)
{
	(void)d;
	for (int i = 0; i < 1000 && sh->tier && tier_inflight(sh->tier); i++) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts = {.tv_nsec = 10000000};
		io_uring_submit_and_wait_timeout(&sh->ring, &cqe, 1, &ts, NULL);
		reap(sh);
	}
}

/* Drain: sessions go (their leases with them); transfers are abandoned,
 * nothing acknowledged is pending on the read path. */
static void shard_drain(struct shard *sh)
{
	pthread_mutex_lock(&sh->lock);
	struct session *in = sh->inbox;
	sh->inbox = NULL;
	pthread_mutex_unlock(&sh->lock);
	while (in) { /* handed over, never attached */
		struct session *next = in->next;
		in->sh = sh;
		in->closed = true;
		sh->n_zombies++;
		session_put(in);
		in = next;
	}
	while (sh->sessions)
		session_close(sh->sessions);
	writeback_drain(sh);
	reactor_drain_tier(sh->d, sh);
	/* Closed sessions are freed when their cancelled polls complete. */
	for (int i = 0; i < 100 && sh->n_zombies; i++) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts = {.tv_nsec = 10000000};
		io_uring_submit_and_wait_timeout(&sh->ring, &cqe, 1, &ts, NULL);
		reap(sh);
	}
}

void reactor_poll_once(struct shard *sh)
{
	run_timers(sh);
	wait_events(sh, false);
}

static void shard_loop(struct shard *sh)
{
	struct daemon *d = sh->d;
	arm_wake(sh);
	while (!d->stopping) {
		if (sh->id == 0 && d->reload) {
			d->reload = false;
			daemon_reload(d);
		}
		bool busy = process_sessions(sh);
		run_timers(sh);
		prefetch_schedule(sh);
		flush_sessions(sh);
		wait_events(sh, busy);
	}
	shard_drain(sh);
}

void *reactor_thread(void *arg)
{
	struct shard *sh = arg;
	int r = topology_bind_thread(&sh->d->topo, (int)sh->id);
	if (r < 0)
		log_warn("shard %u: not pinned to its node's CPUs: %s", sh->id,
			 strerror(-r));
	shard_loop(sh);
	return NULL;
}

int reactor_run(struct daemon *d)
{
	struct shard *sh0 = &d->shards[0];
	d->accept_ev.kind = EV_ACCEPT;
	d->signal_ev.kind = EV_SIGNAL;
	arm_accept(d);
	arm_signal(d);
	uint32_t started = 1;
	for (; started < d->n_shards; started++) {
		int r = pthread_create(&d->shards[started].thread, NULL,
				       reactor_thread, &d->shards[started]);
		if (r) {
			log_error("shard %u: thread: %s", started, strerror(r));
			d->stopping = true;
			break;
		}
	}
	if (d->n_shards > 1 && topology_bind_thread(&d->topo, 0) < 0)
		log_warn("shard 0: not pinned to its node's CPUs");
	shard_loop(sh0);
	for (uint32_t i = 1; i < started; i++) {
		reactor_wake(&d->shards[i]);
		pthread_join(d->shards[i].thread, NULL);
	}
	return 0;
}
