/* session.c - owns a client session's lifetime: accepting a connection
 * (SO_PEERCRED, the uid's connection quota), the shard's list of
 * sessions, the socket and doorbell polls armed on the shard's reactor,
 * close and the last reference. What a session speaks lives beside it:
 * the socket protocol in session_socket.c, the ring protocol in
 * session_ring.c (session_priv.h joins them). */
#include <poll.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"
#include "session.h"
#include "session_priv.h"
#include "fetch.h"
#include "regbuf_warm.h"
#include "writeback.h"
#include "log.h"

/* The shard's lock guards its list against the thread rendering stats;
 * only the shard's own thread changes it. */
void session_link(struct shard *sh, struct session *s)
{
	pthread_mutex_lock(&sh->lock);
	rc_list_add(&sh->sessions, &s->link);
	pthread_mutex_unlock(&sh->lock);
}

void session_unlink(struct shard *sh, struct session *s)
{
	pthread_mutex_lock(&sh->lock);
	rc_list_del(&s->link);
	pthread_mutex_unlock(&sh->lock);
}

/* ---- lifetime ---------------------------------------------------------- */

static void session_free(struct session *s)
{
	if (s->closed)
		s->sh->n_zombies--;
	if (s->region)
		munmap(s->region, s->region_size);
	for (unsigned i = 0; i < 64; i++)
		if (s->bufs[i].base)
			munmap(s->bufs[i].base, s->bufs[i].size);
	int fds[] = {s->sock, s->sq_efd, s->cq_efd, s->ring_fd};
	for (unsigned i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(s->handles);
	free(s->handles_free);
	if (s->usage) { /* what its tables and buffers held, to its uid */
		quota_uncharge(&s->usage->handle_slots, s->cap_handles);
		quota_uncharge(&s->usage->lease_slots, s->leases.cap);
		quota_uncharge(&s->usage->registered_bytes,
			       s->registered_bytes);
	}
	quota_disconnect(&s->sh->d->quota, s->usage);
	free(s->leases.e);
	free(s->leases.free);
	free(s->backlog);
	free(s->last_cause);
	free(s);
}

void session_put(struct session *s)
{
	if (--s->refs == 0)
		session_free(s);
}

static void cancel_armed(struct session *s, struct rc_ev *ev)
{
	struct io_uring_sqe *sqe = reactor_sqe(s->sh->reactor);
	io_uring_prep_cancel(sqe, ev, 0);
	io_uring_sqe_set_data(sqe, NULL);
}

void session_close(struct session *s)
{
	if (s->closed)
		return;
	s->closed = true;
	struct shard *sh = s->sh;
	sh->n_zombies++;
	writeback_client_closed(&s->wb);
	regbuf_warm_stop(s);
	pqueue_put(sh, s->pq);
	s->pq = NULL;
	struct lease_table *lt = &s->leases;
	for (uint32_t i = 0; i < lt->cap; i++)
		if (lt->e[i])
			cache_release(&sh->cache, lt->e[i]);
	quota_uncharge(&s->usage->leased_bytes, s->leased_bytes);
	s->leased_bytes = 0;
	for (uint32_t i = 0; i < s->cap_handles; i++)
		if (s->handles[i])
			object_put(sh->d, s->handles[i]);
	s->n_handles = 0;
	session_unlink(sh, s);
	if (s->attached) {
		sh->n_sessions--;
		quota_session_end(&sh->d->quota, s->usage);
	}
	if (s->sock_armed)
		cancel_armed(s, &s->sock_ev);
	if (s->bell_armed)
		cancel_armed(s, &s->bell_ev);
	log_debug("session pid %d closed", (int)s->pid);
	session_put(s);
}

/* ---- arming ------------------------------------------------------------- */

static void on_sock_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	session_on_sock(rc_container_of(ev, struct session, sock_ev), cqe->res);
}

static void on_bell_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	session_on_doorbell(rc_container_of(ev, struct session, bell_ev),
			    cqe->res);
}

void session_arm_sock(struct session *s)
{
	struct io_uring_sqe *sqe = reactor_sqe(s->sh->reactor);
	io_uring_prep_poll_add(sqe, s->sock, POLLIN | POLLRDHUP);
	io_uring_sqe_set_data(sqe, &s->sock_ev);
	s->sock_armed = true;
	s->refs++;
}

void session_arm_bell(struct session *s)
{
	struct io_uring_sqe *sqe = reactor_sqe(s->sh->reactor);
	io_uring_prep_read(sqe, s->sq_efd, &s->bell_buf, sizeof(s->bell_buf),
			   0);
	io_uring_sqe_set_data(sqe, &s->bell_ev);
	s->bell_armed = true;
	s->refs++;
}

void session_accept(struct daemon *d, int fd)
{
	struct shard *sh = &d->shards[0];
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
		close(fd);
		return;
	}
	int err;
	struct uid_usage *usage = quota_connect(&d->quota, cred.uid, &err);
	if (!usage) {
		/* Closed at once: a uid holding this many connections is
		 * spending the daemon's file descriptors. */
		close(fd);
		return;
	}
	struct session *s = calloc(1, sizeof(*s));
	if (!s) {
		quota_disconnect(&d->quota, usage);
		close(fd);
		return;
	}
	s->usage = usage;
	s->sock_ev.fn = on_sock_cqe;
	s->bell_ev.fn = on_bell_cqe;
	s->sh = sh;
	s->sock = fd;
	s->sq_efd = s->cq_efd = s->ring_fd = -1;
	s->uid = cred.uid;
	s->gid = cred.gid;
	s->pid = cred.pid;
	s->refs = 1;
	s->wb = (struct wb_client){.sh = sh, .usage = usage,
				   .access = s->access};
	rc_list_init(&s->link);
	session_link(sh, s);
	session_arm_sock(s);
}
