/* session_socket.c - owns a session's socket protocol: the messages on
 * its Unix socket (ATTACH with the ACL and ring setup, REGISTER and
 * UNREGISTER of buffers by SCM_RIGHTS memfds, LAST_ERROR, STATS), the
 * hand-over of a session to the shard its ATTACH names, and the dispatch
 * of the socket's and the doorbell's events. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "daemon.h"
#include "session.h"
#include "session_priv.h"
#include "prefetch.h"
#include "log.h"
#include "metrics.h"
#include "readkey.h"
#include "regbuf_warm.h"
#include "validate.h"

#define MSG_MAX 65536

/* ---- socket messages ---------------------------------------------------- */

static int send_reply(struct session *s, const void *msg, size_t len,
		      const int *fds, unsigned nfds)
{
	struct iovec iov = {(void *)msg, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	char ctl[CMSG_SPACE(sizeof(int) * (RC_MAX_DATASETS + 3))];
	if (nfds) {
		memset(ctl, 0, sizeof(ctl));
		mh.msg_control = ctl;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	if (sendmsg(s->sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

static void reply_status(struct session *s, uint16_t type, int status)
{
	struct rc_regbuf_reply r = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION, type | RC_MSG_REPLY,
			sizeof(r), status}};
	send_reply(s, &r, sizeof(r), NULL, 0);
}

static int setup_ring(struct session *s, const struct rc_attach_req *req)
{
	struct ring_geometry g;
	validate_ring_geometry(req->sq_entries, req->cq_entries,
			       req->arg_slots, &g);
	s->sq_entries = g.sq_entries;
	s->cq_entries = g.cq_entries;
	s->arg_slots = g.arg_slots;
	uint64_t sq_off = g.sq_off, cq_off = g.cq_off, arg_off = g.arg_off;
	uint64_t size = g.size;
	s->ring_fd = memfd_create("ringcache-session",
				  MFD_CLOEXEC | MFD_ALLOW_SEALING);
	/* Sealed before the client has it: a client that could shrink the
	 * region would SIGBUS the reactor on its next access. */
	if (s->ring_fd < 0 || ftruncate(s->ring_fd, (off_t)size) < 0 ||
	    fcntl(s->ring_fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return -errno;
	s->region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
			 s->ring_fd, 0);
	if (s->region == MAP_FAILED) {
		s->region = NULL;
		return -errno;
	}
	s->region_size = size;
	s->hdr = (struct rc_ring_hdr *)s->region;
	s->hdr->magic = RC_MSG_MAGIC;
	s->hdr->abi_version = RC_ABI_VERSION;
	s->hdr->sq_entries = s->sq_entries;
	s->hdr->cq_entries = s->cq_entries;
	s->hdr->arg_slots = s->arg_slots;
	s->hdr->sq_off = sq_off;
	s->hdr->cq_off = cq_off;
	s->hdr->arg_off = arg_off;
	s->hdr->region_size = size;
	s->sqes = (struct rc_sqe *)(s->region + sq_off);
	s->cqes = (struct rc_cqe *)(s->region + cq_off);
	s->args = s->region + arg_off;
	/* Both non-blocking: the client can fill a counter to its limit, and
	 * the reactor must then drop a doorbell, not sleep in write(). */
	s->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->cq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->sq_efd < 0 || s->cq_efd < 0)
		return -errno;
	return 0;
}

static void peer_access(struct session *s)
{
	struct daemon *d = s->sh->d;
	/* Before the ACLs are read: a reload after this load bumps it again. */
	s->acl_gen = atomic_load_explicit(&d->acl_gen, memory_order_acquire);
	gid_t groups[256];
	socklen_t gl = sizeof(groups);
	int ng = 0;
	if (getsockopt(s->sock, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0)
		ng = (int)(gl / sizeof(gid_t));
	for (uint32_t i = 0; i < s->sh->n_datasets_seen; i++) {
		struct dataset *ds = d->datasets[i];
		s->access[i] = 0;
		if (!ds || !ds->enabled)
			continue;
		if (config_dataset_allows(ds->cfg, s->uid, s->gid, groups, ng))
			s->access[i] |= RC_ACCESS_READ;
		if (config_dataset_allows_write(ds->cfg, s->uid, s->gid, groups,
						ng))
			s->access[i] |= RC_ACCESS_WRITE;
	}
}

/* A failed attach gives its slot back. */
static void session_detach_quota(struct session *s)
{
	s->attached = false;
	s->sh->n_sessions--;
	quota_session_end(&s->sh->d->quota, s->usage);
}

/* A reload changed some dataset's lists: recompute this session's access
 * before its next entry. What it lost is logged; the arena it mapped at
 * attach cannot be taken back from its process (docs/SECURITY.md). */
void session_recheck_access(struct session *s)
{
	struct daemon *d = s->sh->d;
	if (s->acl_gen == atomic_load_explicit(&d->acl_gen,
					       memory_order_acquire))
		return;
	uint32_t before[RC_MAX_DATASETS];
	uint32_t n = s->sh->n_datasets_seen;
	memcpy(before, s->access, n * sizeof(before[0]));
	peer_access(s);
	bool lost_read = false;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t lost = before[i] & ~s->access[i];
		lost_read |= (lost & RC_ACCESS_READ) != 0;
		if (!lost || !d->datasets[i]->enabled)
			continue;
		log_warn("dataset %s: reload revoked %s%s%s access of session "
			 "pid %d uid %d: %s", d->datasets[i]->cfg->name,
			 lost & RC_ACCESS_READ ? "read" : "",
			 lost == (RC_ACCESS_READ | RC_ACCESS_WRITE) ? "/" : "",
			 lost & RC_ACCESS_WRITE ? "write" : "", (int)s->pid,
			 (int)s->uid, lost & RC_ACCESS_READ ?
			 "its opens and reads there now fail with EACCES; its "
			 "arena mapping stays until it exits" :
			 "its writes there now fail with EACCES");
	}
	/* Its plan would keep fetching into the arena it still maps. */
	if (lost_read) {
		struct pf_client pc = session_pf(s);
		prefetch_set_plan(&pc, NULL, 0, false);
	}
}

static void handle_attach(struct session *s, const void *msg, size_t len)
{
	struct daemon *d = s->sh->d;
	const struct rc_attach_req *req = msg;
	if (len < sizeof(*req) || s->hdr) {
		reply_status(s, RC_MSG_ATTACH, -EINVAL);
		return;
	}
	int err = quota_session_begin(&d->quota, s->usage);
	if (err) {
		s->sh->m.sessions_refused++;
		reply_status(s, RC_MSG_ATTACH, err);
		return;
	}
	s->attached = true;
	s->sh->n_sessions++;
	s->lease_gen = req->lease_gen <= RC_LEASE_GEN_MAX ? req->lease_gen : 0;
	err = setup_ring(s, req);
	if (err) {
		session_detach_quota(s);
		reply_status(s, RC_MSG_ATTACH, err);
		return;
	}
	peer_access(s);
	s->pq = pqueue_get(s->sh, req->gpu, s->uid);
	uint32_t n_ds = s->sh->n_datasets_seen;
	size_t rlen = sizeof(struct rc_attach_reply) +
		      n_ds * sizeof(struct rc_dataset_info);
	struct rc_attach_reply *r = calloc(1, rlen);
	int fds[RC_MAX_DATASETS + 3] = {s->ring_fd, s->sq_efd, s->cq_efd};
	unsigned nfds = 3;
	if (!r) {
		session_detach_quota(s);
		reply_status(s, RC_MSG_ATTACH, -ENOMEM);
		return;
	}
	r->hdr = (struct rc_msg_hdr){RC_MSG_MAGIC, RC_ABI_VERSION,
				     RC_MSG_ATTACH | RC_MSG_REPLY,
				     (uint32_t)rlen, 0};
	r->shard = s->sh->id;
	r->n_datasets = n_ds;
	r->ring_size = s->region_size;
	r->block_size = d->cfg.block_bytes;
	r->lease_gen = s->lease_gen;
	for (uint32_t i = 0; i < n_ds; i++) {
		struct rc_dataset_info *di = &r->datasets[i];
		struct dataset *ds = d->datasets[i];
		di->id = i;
		if (!ds || !ds->enabled)
			continue; /* removed: no name, an unknown dataset */
		snprintf(di->name, sizeof(di->name), "%s", ds->cfg->name);
		di->access = s->access[i];
		if (s->access[i] & RC_ACCESS_READ) {
			di->arena_size = ds->arena[s->sh->id].size;
			fds[nfds++] = ds->arena[s->sh->id].ro_fd;
		}
	}
	err = send_reply(s, r, rlen, fds, nfds);
	free(r);
	if (err) {
		log_warn("attach reply to pid %d failed: %s", (int)s->pid,
			 strerror(-err));
		session_close(s);
		return;
	}
	s->sh->m.sessions_total++;
	log_debug("session pid %d uid %d attached", (int)s->pid, (int)s->uid);
	session_arm_bell(s);
}

/* A registered buffer must never shrink under our mapping (SIGBUS on the
 * reactor): sealed first, its size checked after, so no shrink can slip in
 * between. Only a memfd made with MFD_ALLOW_SEALING, passed read-write,
 * can be sealed; anything else (a file on a filesystem the client may
 * serve itself, e.g. FUSE, would stall our page faults) is -EPERM. So is a
 * hugetlb memfd: its owner can punch a page out and use up the pool, and
 * our next copy there SIGBUSes (measured); a shmem page fault can only
 * wait for memory. */
static int seal_regbuf(int fd, uint64_t size)
{
	struct statfs fs;
	if (fstatfs(fd, &fs) < 0 || fs.f_type == HUGETLBFS_MAGIC)
		return -EPERM;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -EPERM; /* not a memfd or shmem file */
	if (!(seals & F_SEAL_SHRINK) &&
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
		return -EPERM;
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < size)
		return -EINVAL; /* a mapping past EOF would SIGBUS us */
	return 0;
}

static void handle_register(struct session *s, const void *msg, size_t len,
			    int fd)
{
	const struct rc_regbuf_req *req = msg;
	int status = 0;
	unsigned idx = 0;
	if (len < sizeof(*req) || fd < 0 || !s->hdr ||
	    validate_regbuf_size(req->size)) {
		status = fd < 0 ? -EBADF : -EINVAL;
		goto out;
	}
	struct quota *q = &s->sh->d->quota;
	if (req->size > q->v->registered - s->registered_bytes) {
		quota_refused(q, REFUSED_REGISTERED);
		status = -EDQUOT; /* copies fault its pages in, charged to us */
		goto out;
	}
	while (idx < 64 && s->bufs[idx].base)
		idx++;
	if (idx == 64) {
		status = -ENOSPC;
		goto out;
	}
	/* Per uid too: a uid's sessions together, or 128 sessions of one
	 * uid would multiply what the daemon may fault in for it. */
	if ((status = quota_charge(q, &s->usage->registered_bytes, req->size,
				   q->v->registered_per_uid,
				   REFUSED_REGISTERED_PER_UID)))
		goto out;
	if ((status = seal_regbuf(fd, req->size))) {
		quota_uncharge(&s->usage->registered_bytes, req->size);
		goto out;
	}
	/* Not populated: a sparse buffer of any size would cost its whole
	 * size in memory, faulted in on the reactor thread. Pages fault in
	 * as copies reach them. */
	void *p = mmap(NULL, req->size, PROT_READ | PROT_WRITE, MAP_SHARED,
		       fd, 0);
	if (p == MAP_FAILED) {
		/* EACCES: sent read-only; EPERM: sealed against writes */
		status = errno == EACCES ? -EPERM : -errno;
		quota_uncharge(&s->usage->registered_bytes, req->size);
		goto out;
	}
	s->bufs[idx] = (struct regbuf){p, req->size, 0, NULL};
	s->registered_bytes += req->size;
	regbuf_warm_start(s, &s->bufs[idx], fd, session_put);
out:
	if (fd >= 0)
		close(fd);
	struct rc_regbuf_reply r = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION,
			RC_MSG_REGISTER_BUF | RC_MSG_REPLY, sizeof(r), status},
		.buf_index = idx};
	send_reply(s, &r, sizeof(r), NULL, 0);
}

static void handle_unregister(struct session *s, const void *msg, size_t len)
{
	const struct rc_regbuf_req *req = msg;
	int status = 0;
	if (len < sizeof(*req) || validate_buf_index(req->buf_index) ||
	    !s->bufs[req->buf_index].base)
		status = -EBADF;
	else if (s->bufs[req->buf_index].users)
		status = -EBUSY; /* an operation still copies into it */
	else {
		if (!regbuf_warm_unmap(&s->bufs[req->buf_index]))
			munmap(s->bufs[req->buf_index].base,
			       s->bufs[req->buf_index].size);
		s->bufs[req->buf_index].base = NULL;
		s->registered_bytes -= s->bufs[req->buf_index].size;
		quota_uncharge(&s->usage->registered_bytes,
			       s->bufs[req->buf_index].size);
	}
	reply_status(s, RC_MSG_UNREGISTER_BUF, status);
}

/* The last failure's errno (0: none) and cause, NUL-terminated. */
static void handle_last_error(struct session *s)
{
	struct {
		struct rc_msg_hdr hdr;
		char text[RC_LAST_ERROR_MAX];
	} r = {.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION,
		       RC_MSG_LAST_ERROR | RC_MSG_REPLY, 0, s->last_err}};
	snprintf(r.text, sizeof(r.text), "%s",
		 s->last_cause ? s->last_cause : "");
	size_t len = sizeof(r.hdr) + strlen(r.text) + 1;
	r.hdr.len = (uint32_t)len;
	send_reply(s, &r, len, NULL, 0);
}

static void handle_stats(struct session *s)
{
	char *buf = malloc(MSG_MAX);
	if (!buf)
		return;
	size_t hl = sizeof(struct rc_msg_hdr);
	size_t n = metrics_render(s->sh->d, buf + hl, MSG_MAX - hl);
	struct rc_msg_hdr h = {RC_MSG_MAGIC, RC_ABI_VERSION,
			       RC_MSG_STATS | RC_MSG_REPLY,
			       (uint32_t)(hl + n), 0};
	memcpy(buf, &h, hl);
	send_reply(s, buf, hl + n, NULL, 0);
	free(buf);
}

/* The shard for a client's GPU (its node's); if not this one, the session
 * moves there: the poll's reference is dropped here, the open one goes
 * with it, and this thread never touches it again. */
static bool attach_elsewhere(struct session *s, const void *msg, size_t len)
{
	struct daemon *d = s->sh->d;
	const struct rc_attach_req *req = msg;
	if (d->n_shards < 2 || len < sizeof(*req) || s->hdr)
		return false;
	bool fell_back = false;
	int target = topology_shard_for(&d->topo, req->gpu, req->numa_node,
					&fell_back);
	if (fell_back)
		log_info("session pid %d: gpu %d / node %d not in the topology, "
			 "served by shard %d", (int)s->pid, req->gpu,
			 req->numa_node, target);
	target %= (int)d->n_shards;
	if ((uint32_t)target == s->sh->id)
		return false;
	struct shard *to = &d->shards[target];
	s->attach = *req;
	session_unlink(s->sh, s);
	s->refs--; /* the poll that just completed */
	pthread_mutex_lock(&to->lock);
	rc_list_add(&to->inbox, &s->link);
	pthread_mutex_unlock(&to->lock);
	reactor_wake(to->reactor);
	return true;
}

void session_adopt(struct shard *sh, struct session *s)
{
	s->sh = s->wb.sh = sh;
	session_link(sh, s);
	handle_attach(s, &s->attach, sizeof(s->attach));
	if (!s->closed)
		session_arm_sock(s);
}

enum { MSG_GONE = 0, MSG_OK = 1, MSG_HANDED_OVER = 2 };

/* Reads one message: MSG_GONE when the peer is gone. */
static int read_message(struct session *s)
{
	_Alignas(8) uint8_t buf[4096]; /* per call: shards run in threads */
	char ctl[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	ssize_t n = recvmsg(s->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? MSG_OK : MSG_GONE;
	/* n == 0 (an empty message, or the peer gone) may still carry fds:
	 * the header check below closes them and drops the peer. */
	int fd = -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int nf = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *fds = (int *)CMSG_DATA(cm);
		for (int i = 0; i < nf; i++) {
			if (fd < 0)
				fd = fds[i];
			else
				close(fds[i]); /* only one fd is ever expected */
		}
	}
	const struct rc_msg_hdr *h = (const void *)buf;
	if ((size_t)n < sizeof(*h) || h->magic != RC_MSG_MAGIC ||
	    h->version != RC_ABI_VERSION) {
		if (fd >= 0)
			close(fd);
		return MSG_GONE; /* not our protocol: drop the peer */
	}
	switch (h->type) {
	case RC_MSG_ATTACH:
		if (attach_elsewhere(s, buf, (size_t)n)) {
			if (fd >= 0)
				close(fd);
			return MSG_HANDED_OVER;
		}
		handle_attach(s, buf, (size_t)n);
		break;
	case RC_MSG_REGISTER_BUF:
		handle_register(s, buf, (size_t)n, fd);
		fd = -1;
		break;
	case RC_MSG_UNREGISTER_BUF:
		handle_unregister(s, buf, (size_t)n);
		break;
	case RC_MSG_STATS:
		handle_stats(s);
		break;
	case RC_MSG_LAST_ERROR:
		handle_last_error(s);
		break;
	default:
		reply_status(s, h->type, -EINVAL);
	}
	if (fd >= 0)
		close(fd);
	return MSG_OK;
}

void session_on_sock(struct session *s, int res)
{
	s->sock_armed = false;
	if (s->closed || res == -ECANCELED) {
		session_put(s);
		return;
	}
	bool alive = res >= 0 && !(res & (POLLERR | POLLHUP | POLLNVAL));
	if (alive && (res & POLLIN)) {
		int r = read_message(s);
		if (r == MSG_HANDED_OVER)
			return; /* another shard's now */
		alive = r == MSG_OK;
	}
	if (alive && (res & POLLRDHUP) && !(res & POLLIN))
		alive = false;
	if (!s->closed) {
		if (alive)
			session_arm_sock(s);
		else
			session_close(s);
	}
	session_put(s);
}

void session_on_doorbell(struct session *s, int res)
{
	s->bell_armed = false;
	if (!s->closed && res != -ECANCELED) {
		session_process(s);
		session_arm_bell(s);
	}
	session_put(s);
}
