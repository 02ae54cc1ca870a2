/* lifecycle.c - owns the shards' loops: each shard's reactor and curl
 * multi handle, the turn of its loop (client rings, timers, prefetch,
 * completions, then the wait), signals, the hand-over inbox, the threads
 * of shards > 0, and the drain at SIGTERM. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "lifecycle.h"
#include "session.h"
#include "fetch.h"
#include "prefetch.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "tiering.h"
#include "writeback.h"

#define RING_DEPTH 1024
#define IDLE_SPIN_NS 20000 /* poll client rings this long before sleeping */
#define MAX_WAIT_NS 1000000000ll /* wake at least once a second */

/* ---- signals ------------------------------------------------------------ */

static void on_signal(struct rc_ev *ev, struct io_uring_cqe *cqe);

static void arm_signal(struct daemon *d)
{
	struct io_uring_sqe *sqe = reactor_sqe(d->shards[0].reactor);
	io_uring_prep_read(sqe, d->signal_fd, d->sigbuf,
			   sizeof(struct signalfd_siginfo), 0);
	io_uring_sqe_set_data(sqe, &d->signal_ev);
}

static void on_signal(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	struct daemon *d = rc_container_of(ev, struct daemon, signal_ev);
	if (cqe->res == (int)sizeof(struct signalfd_siginfo)) {
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

/* ---- a shard's loop ------------------------------------------------------ */

/* Another shard handed sessions over, added datasets, or asks to stop. */
static void on_wake(void *ctx)
{
	struct shard *sh = ctx;
	struct rc_list in = RC_LIST_INIT(in), *pos, *tmp;
	pthread_mutex_lock(&sh->lock);
	rc_list_splice_tail(&in, &sh->inbox);
	pthread_mutex_unlock(&sh->lock);
	daemon_shard_sync_datasets(sh);
	rc_list_for_each_safe(pos, tmp, &in) {
		rc_list_del(pos);
		session_adopt(sh, session_of(pos));
	}
}

/* Read your writes: write-back's staged objects, as fetch.h asks. */
static void *pending_lookup(struct shard *sh, const struct dataset *ds,
			    const char *key, uint64_t *id, uint64_t *size)
{
	struct wobject *w = writeback_pending(sh, ds, key);
	if (w) {
		*id = w->id;
		*size = w->size;
	}
	return w;
}

static bool pending_uploaded(const void *w)
{
	return ((const struct wobject *)w)->state != W_COMMITTED;
}

static int pending_read(void *w, uint64_t off, void *dst, size_t len)
{
	return writeback_read(w, off, dst, len);
}

static int pending_read_start(void *w, uint64_t off, void *dst, size_t len,
			      void (*done)(void *ctx, int err), void *ctx)
{
	return writeback_read_start(w, off, dst, len, done, ctx);
}

static void pending_put(void *w)
{
	writeback_put(w);
}

/* The layers above the fetch engine, wired here, at the top. */
static const struct fetch_ops shard_fetch_ops = {
	.op_done = op_complete,
	.block_ready = op_block_ready,
	.block_failed = op_block_failed,
	.list_ready = op_list_ready,
	.next_use = prefetch_hint,
	.prefetch_done = prefetch_fetch_done,
	.pending_lookup = pending_lookup,
	.pending_uploaded = pending_uploaded,
	.pending_read = pending_read,
	.pending_read_start = pending_read_start,
	.pending_put = pending_put,
};

int shard_loop_init(struct shard *sh)
{
	fetch_set_ops(sh, &shard_fetch_ops);
	writeback_set_completion(sh, op_complete);
	int err = 0;
	sh->reactor = reactor_new(RING_DEPTH, &err);
	if (!sh->reactor)
		return err;
	reactor_on_wake(sh->reactor, on_wake, sh);
	fetch_shard_start(sh);
	sh->curl = curlio_new(sh->reactor, (long)sh->d->cfg.max_connections);
	return sh->curl ? 0 : -ENOMEM;
}

void shard_loop_destroy(struct shard *sh)
{
	curlio_free(sh->curl);
	sh->curl = NULL;
	reactor_free(sh->reactor);
	sh->reactor = NULL;
}

void shard_wake(struct shard *sh)
{
	reactor_wake(sh->reactor);
}

static bool process_sessions(struct shard *sh)
{
	bool busy = false;
	struct rc_list *pos, *tmp;
	rc_list_for_each_safe(pos, tmp, &sh->sessions)
		busy |= session_process(session_of(pos));
	return busy;
}

static void flush_sessions(struct shard *sh)
{
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->sessions)
		session_flush(session_of(pos));
}

static void set_need_wakeup(struct shard *sh, bool on)
{
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->sessions) {
		struct session *s = session_of(pos);
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
	struct rc_list *pos;
	rc_list_for_each(pos, &sh->sessions) {
		struct session *s = session_of(pos);
		if (s->hdr && atomic_load_explicit(&s->hdr->sq_tail,
					 memory_order_acquire) != s->sq_head)
			return true;
	}
	return false;
}

/* Spins briefly on the client rings, then (the doorbell rule: flag,
 * fence, re-check) sleeps in the reactor unless work came. */
static void wait_events(struct shard *sh, bool busy)
{
	struct reactor *r = sh->reactor;
	if (!busy && !rc_list_empty(&sh->sessions)) {
		uint64_t until = rc_now_ns() + IDLE_SPIN_NS;
		for (unsigned i = 1; !sessions_have_work(sh) &&
				     !reactor_cq_ready(r); i++) {
			__builtin_ia32_pause();
			if (i % 64 == 0 && rc_now_ns() >= until)
				break; /* the clock is read rarely: it costs */
		}
		busy = sessions_have_work(sh);
	}
	if (!busy) {
		set_need_wakeup(sh, true);
		atomic_thread_fence(memory_order_seq_cst);
		busy = sessions_have_work(sh);
	}
	reactor_turn(r, busy ? 0 : MAX_WAIT_NS);
	set_need_wakeup(sh, false);
}

void shard_poll_once(struct shard *sh)
{
	reactor_run_timers(sh->reactor);
	wait_events(sh, false);
}

/* Drain: sessions go (their leases with them); transfers are abandoned,
 * nothing acknowledged is pending on the read path. */
static void shard_drain(struct shard *sh)
{
	struct rc_list in = RC_LIST_INIT(in), *pos, *tmp;
	pthread_mutex_lock(&sh->lock);
	rc_list_splice_tail(&in, &sh->inbox);
	pthread_mutex_unlock(&sh->lock);
	rc_list_for_each_safe(pos, tmp, &in) { /* handed over, never attached */
		struct session *s = session_of(pos);
		rc_list_del(pos);
		s->sh = s->wb.sh = sh;
		s->closed = true;
		sh->n_zombies++;
		session_put(s);
	}
	while (!rc_list_empty(&sh->sessions))
		session_close(session_of(sh->sessions.next));
	writeback_drain(sh);
	tiering_save_resident(sh);
	tiering_drain(sh);
	/* Closed sessions are freed when their cancelled polls complete. */
	for (int i = 0; i < 100 && sh->n_zombies; i++)
		reactor_turn(sh->reactor, 10000000);
}

static void shard_loop(struct shard *sh)
{
	struct daemon *d = sh->d;
	while (!d->stopping) {
		if (sh->id == 0 && d->reload) {
			d->reload = false;
			daemon_reload(d);
		}
		bool busy = process_sessions(sh);
		reactor_run_timers(sh->reactor);
		prefetch_schedule(sh);
		flush_sessions(sh);
		wait_events(sh, busy);
	}
	/* What the last turn answered is posted: a client whose answer was
	 * written but whose completion was not would resend it after the
	 * restart, over the answer in its arg slot. */
	flush_sessions(sh);
	if (sh->id == 0)
		listener_stop(server_of(d)->listener);
	shard_drain(sh);
}

static void *shard_thread(void *arg)
{
	struct shard *sh = arg;
	int r = topology_bind_thread(&sh->d->topo, (int)sh->id);
	if (r < 0)
		log_warn("shard %u: not pinned to its node's CPUs: %s", sh->id,
			 strerror(-r));
	shard_loop(sh);
	return NULL;
}

int daemon_run(struct daemon *d)
{
	struct shard *sh0 = &d->shards[0];
	d->signal_ev.fn = on_signal;
	int lr = listener_start(server_of(d)->listener);
	if (lr < 0) {
		log_error("%s: listen: %s", d->cfg.socket_path, strerror(-lr));
		return -1;
	}
	arm_signal(d);
	uint32_t started = 1;
	for (; started < d->n_shards; started++) {
		int r = pthread_create(&d->shards[started].thread, NULL,
				       shard_thread, &d->shards[started]);
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
		shard_wake(&d->shards[i]);
		pthread_join(d->shards[i].thread, NULL);
	}
	return 0;
}
