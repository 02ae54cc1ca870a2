/* client.c - libringcache: attaching to ringcached over its Unix socket,
 * mapping the ring region and arenas, registered buffers, and the
 * synchronous helpers built on the ring fast path of ringcache.h, which
 * re-attach (reconnect.c) and resubmit when the daemon was lost.
 * Depends on libc only; CUDA pinning lives in cuda.c. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ringcache.h"
#include "clock.h"
#include "client_priv.h"
#include "cuda_visible.h"
#include "copyread.h"
#include "prefault.h"
#include "wire.h"

#define DEFAULT_SOCKET "/run/ringcache/ringcache.sock"
#define SPIN_DEFAULT_NS 20000 /* poll the CQ this long before sleeping */
#define SYNC_TAG 0x5259434353594e43ull /* user_data of synchronous calls */

static const char *socket_path_or_default(const char *path)
{
	if (path && *path)
		return path;
	const char *env = getenv("RINGCACHE_SOCKET");
	return env && *env ? env : DEFAULT_SOCKET;
}

static int connect_daemon(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	path = socket_path_or_default(path);
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		/* No socket file, or one nobody accepts on: no daemon there
		 * (ENOENT would read as a missing object or dataset). */
		int e = errno == ENOENT ? -ECONNREFUSED : -errno;
		close(fd);
		return e;
	}
	return fd;
}

static int send_msg(int sock, const void *msg, size_t len, int fd)
{
	struct iovec iov = {(void *)msg, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	char ctl[CMSG_SPACE(sizeof(int))];
	if (fd >= 0) {
		memset(ctl, 0, sizeof(ctl));
		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	for (;;) {
		if (sendmsg(sock, &mh, MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/* Receives one reply; fds (up to max_fds) are returned in fds/nfds. */
static ssize_t recv_msg(int sock, void *buf, size_t len, int *fds,
			unsigned max_fds, unsigned *nfds)
{
	char ctl[CMSG_SPACE(sizeof(int) * (RC_MAX_DATASETS + 3))];
	struct iovec iov = {buf, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	ssize_t n;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EPIPE;
	unsigned got = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		unsigned k = (unsigned)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *p = (int *)CMSG_DATA(cm);
		for (unsigned i = 0; i < k; i++) {
			if (got < max_fds)
				fds[got++] = p[i];
			else
				close(p[i]);
		}
	}
	if (nfds)
		*nfds = got;
	const struct rc_msg_hdr *h = buf;
	if ((size_t)n < sizeof(*h) || h->magic != RC_MSG_MAGIC)
		return -EPROTO;
	return n;
}

void client_unmap_session(struct rc_client *c, const void *owner)
{
	rc_prefault_stop(owner);
	if (c->arenas) {
		rc_cuda_unpin_arenas(c);
		for (uint32_t i = 0; i < c->n_datasets; i++)
			if (c->arenas[i].base) {
				copyread_arena_drop(c->arenas[i].base);
				munmap((void *)c->arenas[i].base,
				       c->arenas[i].size);
			}
	}
	if (c->region)
		munmap(c->region, c->region_size);
	free(c->arenas);
	free(c->datasets);
	int fds[] = {c->sock, c->sq_efd, c->cq_efd};
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	memset(c, 0, sizeof(*c));
	c->sock = c->sq_efd = c->cq_efd = -1;
}

static int map_region(struct rc_client *c, int fd, uint64_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	c->region = p;
	c->region_size = size;
	c->hdr = p;
	const struct rc_ring_hdr *h = c->hdr;
	if (h->magic != RC_RING_MAGIC || h->region_size != size ||
	    h->sq_off + (uint64_t)h->sq_entries * sizeof(struct rc_sqe) > size ||
	    h->cq_off + (uint64_t)h->cq_entries * sizeof(struct rc_cqe) > size ||
	    h->arg_off + (uint64_t)h->arg_slots * RC_ARG_SLOT_SIZE > size)
		return -EPROTO;
	c->sqes = (struct rc_sqe *)(c->region + h->sq_off);
	c->cqes = (struct rc_cqe *)(c->region + h->cq_off);
	c->args = c->region + h->arg_off;
	c->sq_mask = h->sq_entries - 1;
	c->cq_mask = h->cq_entries - 1;
	c->sq_local_tail = atomic_load(&c->hdr->sq_tail);
	c->arg_slots = h->arg_slots;
	return 0;
}

static int map_arenas(struct rc_client *c, const void *owner,
		      const struct rc_attach_reply *r, const int *fds,
		      unsigned nfds)
{
	unsigned next = 3;
	c->n_datasets = r->n_datasets;
	c->datasets = calloc(r->n_datasets + 1, sizeof(*c->datasets));
	c->arenas = calloc(r->n_datasets + 1, sizeof(*c->arenas));
	if (!c->datasets || !c->arenas)
		return -ENOMEM;
	memcpy(c->datasets, r->datasets, r->n_datasets * sizeof(*c->datasets));
	for (uint32_t i = 0; i < r->n_datasets; i++) {
		c->datasets[i].name[RC_DATASET_NAME_MAX - 1] = 0;
		if (!(c->datasets[i].access & RC_ACCESS_READ))
			continue;
		if (next >= nfds)
			return -EPROTO;
		void *p = mmap(NULL, c->datasets[i].arena_size, PROT_READ,
			       MAP_SHARED, fds[next++], 0);
		if (p == MAP_FAILED)
			return -errno;
		rc_prefault_start(owner, fds[next - 1], p,
				  c->datasets[i].arena_size);
		copyread_arena_add(p, c->datasets[i].arena_size, fds[next - 1]);
		c->arenas[i].base = p;
		c->arenas[i].size = c->datasets[i].arena_size;
	}
	return 0;
}

/* The daemon numbers the machine's GPUs; the caller names the CUDA
 * ordinal it sees (cuda_visible.h). An ordinal CUDA_VISIBLE_DEVICES does
 * not show is passed on as it is: a caller that already gives the
 * machine's index keeps working. */
static int machine_gpu(int ordinal)
{
	if (ordinal < 0)
		return ordinal;
	int index = cuda_visible_gpu_index("/", getenv("CUDA_VISIBLE_DEVICES"),
					   ordinal, NULL, 0);
	return index >= 0 ? index : ordinal;
}

int client_attach_session(struct rc_client *c, const void *owner,
			  const char *socket_path,
			  const struct rc_attach_opts *opts, uint32_t gen,
			  uint32_t *gen_out)
{
	memset(c, 0, sizeof(*c));
	c->sock = c->sq_efd = c->cq_efd = -1;
	c->spin = SPIN_DEFAULT_NS;
	int sock = connect_daemon(socket_path);
	if (sock < 0)
		return sock;
	c->sock = sock;
	struct rc_attach_req req = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION, RC_MSG_ATTACH,
			sizeof(req), 0},
		.gpu = opts ? machine_gpu(opts->gpu) : -1,
		.numa_node = opts ? opts->numa_node : -1,
		.sq_entries = opts ? opts->sq_entries : 0,
		.cq_entries = opts ? opts->cq_entries : 0,
		.arg_slots = opts ? opts->arg_slots : 0,
		.lease_gen = gen,
	};
	size_t cap = sizeof(struct rc_attach_reply) +
		     RC_MAX_DATASETS * sizeof(struct rc_dataset_info);
	struct rc_attach_reply *r = malloc(cap);
	int fds[RC_MAX_DATASETS + 3];
	unsigned nfds = 0;
	int err = r ? send_msg(sock, &req, sizeof(req), -1) : -ENOMEM;
	ssize_t n = 0;
	if (!err) {
		n = recv_msg(sock, r, cap, fds, RC_MAX_DATASETS + 3, &nfds);
		if (n < 0)
			err = (int)n;
	}
	if (!err && r->hdr.status)
		err = r->hdr.status;
	if (!err && ((size_t)n < sizeof(*r) || nfds < 3 ||
		     r->n_datasets > RC_MAX_DATASETS ||
		     (size_t)n < sizeof(*r) + r->n_datasets * sizeof(r->datasets[0])))
		err = -EPROTO;
	if (!err) {
		c->sq_efd = fds[1];
		c->cq_efd = fds[2];
		c->block_size = r->block_size;
		c->shard = r->shard;
		*gen_out = r->lease_gen;
		err = map_region(c, fds[0], r->ring_size);
		if (!err)
			err = map_arenas(c, owner, r, fds, nfds);
	}
	for (unsigned i = 0; i < nfds; i++)
		if (i != 1 && i != 2)
			close(fds[i]); /* mappings keep what they need */
	if (err && nfds >= 3) {
		if (c->sq_efd < 0)
			close(fds[1]);
		if (c->cq_efd < 0)
			close(fds[2]);
	}
	free(r);
	if (err)
		client_unmap_session(c, owner);
	return err;
}

/* RINGCACHE_RECONNECT_TIMEOUT: seconds a client re-attaches for after the
 * daemon was lost (0: not at all). */
static uint32_t default_timeout_ms(void)
{
	const char *env = getenv("RINGCACHE_RECONNECT_TIMEOUT");
	if (!env || !*env)
		return RC_RECONNECT_TIMEOUT_DEFAULT_MS;
	char *end;
	double s = strtod(env, &end);
	if (*end || s < 0 || s > 86400)
		return RC_RECONNECT_TIMEOUT_DEFAULT_MS;
	return (uint32_t)(s * 1000);
}

int rc_attach(struct rc_client *c, const char *socket_path,
	      const struct rc_attach_opts *opts)
{
	uint32_t gen = 0;
	int err = client_attach_session(c, c, socket_path, opts, 0, &gen);
	if (err)
		return err;
	size_t words = (c->arg_slots + 63) / 64;
	struct client_state *st =
		calloc(1, sizeof(*st) + words * sizeof(uint64_t));
	const char *path = socket_path_or_default(socket_path);
	if (st)
		st->socket_path = strdup(path);
	if (!st || !st->socket_path) {
		free(st);
		client_unmap_session(c, c);
		return -ENOMEM;
	}
	st->opts = opts ? *opts
			: (struct rc_attach_opts){.gpu = -1, .numa_node = -1};
	st->timeout_ms = default_timeout_ms();
	st->lease_gen = gen;
	for (unsigned i = 0; i < CLIENT_MAX_BUFS; i++)
		st->bufs[i].fd = -1;
	for (uint32_t i = 0; i < c->arg_slots; i++)
		st->arg_free[i / 64] |= 1ull << (i % 64);
	c->arg_free = st->arg_free;
	return 0;
}

void rc_detach(struct rc_client *c)
{
	if (c->arg_free)
		client_state_free(c);
	client_unmap_session(c, c);
}

struct client_state *client_state(struct rc_client *c)
{
	return (struct client_state *)(void *)((char *)c->arg_free -
					       offsetof(struct client_state,
							arg_free));
}

int rc_set_reconnect_timeout(struct rc_client *c, uint32_t ms)
{
	if (!c->arg_free)
		return -EINVAL;
	client_state(c)->timeout_ms = ms;
	return 0;
}

int rc_dataset(const struct rc_client *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_datasets; i++) {
		if (strcmp(c->datasets[i].name, name) != 0)
			continue;
		return (c->datasets[i].access & RC_ACCESS_READ) ? (int)i
								: -EACCES;
	}
	return -ENOENT;
}

/* A socket call failed this way: the daemon is gone. */
static int lost(int err)
{
	return err == -EPIPE || err == -ECONNRESET || err == -ENOTCONN;
}

int client_regbuf_send(struct rc_client *c, int memfd, uint64_t size)
{
	struct rc_regbuf_req req = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION, RC_MSG_REGISTER_BUF,
			sizeof(req), 0},
		.size = size};
	int err = send_msg(c->sock, &req, sizeof(req), memfd);
	if (err)
		return err;
	struct rc_regbuf_reply r;
	ssize_t n = recv_msg(c->sock, &r, sizeof(r), NULL, 0, NULL);
	if (n < 0)
		return (int)n;
	if ((size_t)n < sizeof(r))
		return -EPROTO;
	return r.hdr.status ? r.hdr.status : (int)r.buf_index;
}

int rc_register_buffer(struct rc_client *c, int memfd, size_t size)
{
	for (;;) {
		int r = client_regbuf_send(c, memfd, size);
		if (!lost(r)) {
			if (r >= 0 && client_track_buf(c, (uint32_t)r, memfd,
						       size) < 0) {
				client_unregbuf_send(c, (uint32_t)r);
				return -ENOMEM;
			}
			return r;
		}
		if ((r = client_reconnect(c)) < 0)
			return r;
	}
}

int rc_unregister_buffer(struct rc_client *c, uint32_t buf_index)
{
	for (;;) {
		int r = client_unregbuf_send(c, buf_index);
		if (!lost(r)) {
			if (r == 0)
				client_untrack_buf(c, buf_index);
			return r;
		}
		if ((r = client_reconnect(c)) < 0)
			return r;
	}
}

int client_unregbuf_send(struct rc_client *c, uint32_t buf_index)
{
	struct rc_regbuf_req req = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION, RC_MSG_UNREGISTER_BUF,
			sizeof(req), 0},
		.buf_index = buf_index};
	int err = send_msg(c->sock, &req, sizeof(req), -1);
	if (err)
		return err;
	struct rc_regbuf_reply r;
	ssize_t n = recv_msg(c->sock, &r, sizeof(r), NULL, 0, NULL);
	if (n < 0)
		return (int)n;
	return r.hdr.status;
}

int rc_alloc_buffer(struct rc_client *c, size_t size, void **out)
{
	int fd = memfd_create("ringcache-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int r = ftruncate(fd, (off_t)size) < 0 ? -errno : 0;
	void *p = MAP_FAILED;
	if (!r) {
		/* Populated here, in this process: a buffer is allocated to be
		 * filled, and the daemon maps in at registration, off its
		 * reactor, only the pages the memfd already holds. */
		p = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_POPULATE, fd, 0);
		if (p == MAP_FAILED)
			r = -errno;
	}
	if (!r)
		r = rc_register_buffer(c, fd, size);
	close(fd);
	if (r < 0) {
		if (p != MAP_FAILED)
			munmap(p, size);
		return r;
	}
	*out = p;
	return r;
}

ssize_t rc_stats(struct rc_client *c, const char *socket_path, char *buf,
		 size_t buflen)
{
	int sock = c ? c->sock : connect_daemon(socket_path);
	if (sock < 0)
		return sock;
	struct rc_msg_hdr req = {RC_MSG_MAGIC, RC_ABI_VERSION, RC_MSG_STATS,
				 sizeof(req), 0};
	char *msg = malloc(65536);
	ssize_t n = msg ? send_msg(sock, &req, sizeof(req), -1) : -ENOMEM;
	if (n == 0)
		n = recv_msg(sock, msg, 65536, NULL, 0, NULL);
	if (n >= 0) {
		size_t text = (size_t)n - sizeof(struct rc_msg_hdr);
		if (buflen == 0) {
			n = -ENOSPC;
		} else {
			if (text >= buflen)
				text = buflen - 1;
			memcpy(buf, msg + sizeof(struct rc_msg_hdr), text);
			buf[text] = 0;
			n = (ssize_t)text;
		}
	}
	free(msg);
	if (!c)
		close(sock);
	return n;
}

int rc_arg_get(struct rc_client *c)
{
	for (uint32_t w = 0; w < (c->arg_slots + 63) / 64; w++) {
		if (c->arg_free[w]) {
			int bit = __builtin_ctzll(c->arg_free[w]);
			c->arg_free[w] &= ~(1ull << bit);
			return (int)(w * 64 + (uint32_t)bit);
		}
	}
	return -EBUSY;
}

void rc_arg_put(struct rc_client *c, int slot)
{
	if (slot >= 0 && (uint32_t)slot < c->arg_slots)
		c->arg_free[slot / 64] |= 1ull << (slot % 64);
}

/* Polls for up to c->spin ns, reading the clock every 64 polls. Not when
 * the daemon sleeps: it must be woken first, and a spinning client only
 * takes the CPU it needs (measured: longer spins, worse p99 on 2 cores). */
static struct rc_cqe *spin_for_cqe(struct rc_client *c)
{
	struct rc_cqe *cqe = rc_peek_cqe(c);
	if (cqe || c->spin == 0 ||
	    (atomic_load_explicit(&c->hdr->sq_flags, memory_order_relaxed) &
	     RC_SQ_NEED_WAKEUP))
		return cqe;
	uint64_t until = rc_now_ns() + c->spin;
	for (unsigned i = 1;; i++) {
		if ((cqe = rc_peek_cqe(c)))
			return cqe;
		__builtin_ia32_pause();
		if (i % 64 == 0 && rc_now_ns() >= until)
			return NULL;
	}
}

int client_wait_cqe(struct rc_client *c, struct rc_cqe **out)
{
	*out = NULL;
	if (c->batch_pending)
		return -EBUSY; /* its completions are rc_read_many_wait's */
	for (;;) {
		if ((*out = spin_for_cqe(c)))
			return 0;
		atomic_fetch_or(&c->hdr->cq_flags, RC_CQ_NEED_WAKEUP);
		if ((*out = rc_peek_cqe(c)))
			return 0;
		struct pollfd p[2] = {{c->cq_efd, POLLIN, 0},
				      {c->sock, POLLRDHUP, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[0].revents & POLLIN) {
			uint64_t v;
			if (read(c->cq_efd, &v, sizeof(v)) < 0 && errno != EAGAIN &&
			    errno != EINTR)
				return -errno;
		}
		if ((*out = rc_peek_cqe(c)))
			return 0;
		if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))
			return -EPIPE;
	}
}

/* The application's own entries in flight when the daemon was lost are
 * gone with it: it learns so from -ECONNRESET, once the session is back. */
int rc_wait_cqe(struct rc_client *c, struct rc_cqe **out)
{
	int r = client_wait_cqe(c, out);
	if (r != -EPIPE)
		return r;
	return (r = client_reconnect(c)) < 0 ? r : -ECONNRESET;
}

/* An entry that was in flight when the daemon was lost, now that the
 * session is back: 1 to submit it again, else 0 with its answer in *res
 * (a dead handle's error; a CLOSE or RELEASE that has nothing left to
 * undo). */
static int still_to_do(struct rc_client *c, struct rc_sqe *e,
		       struct rc_cqe *res)
{
	*res = (struct rc_cqe){.user_data = SYNC_TAG, .lease = RC_NO_LEASE};
	switch (e->opcode) {
	case RC_OP_RELEASE:
	case RC_OP_CLOSE:
		return 0; /* forgotten with the old session */
	case RC_OP_ABORT:
		if (client_handle_check(c, e->handle))
			return 0; /* the daemon dropped it with the session */
		return 1;
	case RC_OP_SYNC:
		if (e->handle == RC_SYNC_ALL || e->handle == RC_SYNC_PREFIX)
			return 1;
		/* A committed object was durable as its dataset says: the
		 * new daemon has it (journal) or S3 does. */
		if (client_handle_check(c, e->handle) == -ECONNRESET &&
		    client_state(c)->wh &&
		    (e->handle & ~RC_WRITE_HANDLE) < client_state(c)->n_wh &&
		    client_state(c)->wh[e->handle & ~RC_WRITE_HANDLE].committed) {
			e->handle = RC_SYNC_ALL;
			return 1;
		}
		break;
	case RC_OP_STAT:
	case RC_OP_READ:
	case RC_OP_READ_INTO:
	case RC_OP_WRITE:
	case RC_OP_COMMIT:
	case RC_OP_RENAME:
		break;
	default:
		return 1; /* OPEN, LIST, plans: the new daemon does them */
	}
	int err = client_handle_check(c, e->handle);
	if (!err)
		return 1;
	res->res = err;
	return 0;
}

/* Submits what is prepared and waits for one completion of ours; if the
 * daemon is lost meanwhile, re-attaches and submits it again. The lost
 * daemon may have answered into the entry's arg slot (an OPEN's ETag
 * over its key) and gone before the completion: the input goes back into
 * the slot before the entry goes again. */
static int sync_one(struct rc_client *c, struct rc_cqe *res)
{
	struct rc_sqe e = c->sqes[(c->sq_local_tail - 1) & c->sq_mask];
	char input[RC_ARG_SLOT_SIZE];
	size_t input_len = e.arg_len <= sizeof(input) ? e.arg_len : 0;
	if (input_len)
		memcpy(input, rc_arg_ptr(c, e.arg), input_len);
	for (;;) {
		int r = rc_submit(c);
		struct rc_cqe *cqe;
		if (r >= 0 && (r = client_wait_cqe(c, &cqe)) == 0) {
			*res = *cqe;
			rc_cqe_seen(c);
			return res->user_data == SYNC_TAG ? 0 : -EPROTO;
		}
		if (r != -EPIPE || (r = client_reconnect(c)) < 0)
			return r;
		if (!still_to_do(c, &e, res))
			return 0;
		struct rc_sqe *n = rc_get_sqe(c);
		if (!n)
			return -EBUSY;
		*n = e;
		if (input_len)
			memcpy(rc_arg_ptr(c, e.arg), input, input_len);
	}
}

static struct rc_sqe *sync_sqe(struct rc_client *c, uint8_t op)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	if (sqe) {
		sqe->opcode = op;
		sqe->user_data = SYNC_TAG;
	}
	return sqe;
}

static void etag_from_slot(struct rc_client *c, int slot, struct rc_stat *st,
			   uint64_t size)
{
	if (!st)
		return;
	st->size = size;
	memcpy(st->etag, rc_arg_ptr(c, slot), RC_MAX_ETAG);
	st->etag[RC_MAX_ETAG - 1] = 0;
}

/* An SQE of opcode op with an arg slot of its own, for calls that pass or
 * return bytes through the slot. */
static int slot_call(struct rc_client *c, uint8_t op, struct rc_sqe **sqe_out,
		     int *slot_out)
{
	int slot = rc_arg_get(c);
	if (slot < 0)
		return slot;
	struct rc_sqe *sqe = sync_sqe(c, op);
	if (!sqe) {
		rc_arg_put(c, slot);
		return -EBUSY;
	}
	sqe->arg = (uint16_t)slot;
	*sqe_out = sqe;
	*slot_out = slot;
	return 0;
}

static int key_call(struct rc_client *c, uint8_t op, int dataset,
		    const char *key, struct rc_sqe **sqe_out, int *slot_out)
{
	size_t len = strlen(key);
	if (len > RC_MAX_KEY || dataset < 0)
		return dataset < 0 ? dataset : -ENAMETOOLONG;
	int r = slot_call(c, op, sqe_out, slot_out);
	if (r < 0)
		return r;
	memcpy(rc_arg_ptr(c, *slot_out), key, len);
	(*sqe_out)->dataset = (uint32_t)dataset;
	(*sqe_out)->arg_len = (uint32_t)len;
	return 0;
}

/* Records an opened handle for re-opening. 1: done; 0: its number is
 * one a dead handle of the application holds (kept held), open again;
 * or a negated errno (the handle is closed). */
static int track_opened(struct rc_client *c, uint32_t h, int dataset,
			const char *key, int slot)
{
	char etag[RC_MAX_ETAG];
	memcpy(etag, rc_arg_ptr(c, slot), RC_MAX_ETAG);
	etag[RC_MAX_ETAG - 1] = 0;
	int r = client_track_read(c, h, (uint32_t)dataset, key, etag);
	if (r < 0)
		rc_close(c, h);
	return r;
}

int rc_open(struct rc_client *c, int dataset, const char *key,
	    struct rc_stat *st)
{
	for (;;) {
		struct rc_sqe *sqe;
		int slot;
		int r = key_call(c, RC_OP_OPEN, dataset, key, &sqe, &slot);
		if (r < 0)
			return r;
		struct rc_cqe cqe;
		r = sync_one(c, &cqe);
		if (r == 0 && cqe.res >= 0) {
			etag_from_slot(c, slot, st, cqe.addr);
			r = track_opened(c, (uint32_t)cqe.res, dataset, key,
					 slot);
			if (r == 0) {
				rc_arg_put(c, slot);
				continue;
			}
			r = r < 0 ? r : 0;
		}
		rc_arg_put(c, slot);
		return r < 0 ? r : cqe.res;
	}
}

int rc_open_many(struct rc_client *c, int dataset, const char *const *keys,
		 size_t n, int32_t *results, uint64_t *sizes)
{
	if (dataset < 0)
		return dataset;
	int *slot_of = malloc((n ? n : 1) * sizeof(*slot_of));
	if (!slot_of)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++)
		slot_of[k] = -1; /* >= 0 while its OPEN is in flight */
	size_t next = 0, inflight = 0;
	int err = 0;
	while (!err && (next < n || inflight)) {
		/* Keep the ring as full as the arg slots allow. */
		for (; next < n; next++) {
			struct rc_sqe *sqe;
			int slot;
			int r = key_call(c, RC_OP_OPEN, dataset, keys[next], &sqe,
					 &slot);
			if (r == -EBUSY)
				break; /* no slot or SQE: reap first */
			if (r < 0) {
				results[next] = r;
				continue;
			}
			sqe->user_data = next;
			slot_of[next] = slot;
			inflight++;
		}
		if (!inflight)
			break;
		if ((err = rc_submit(c)) < 0)
			break;
		err = 0;
		struct rc_cqe *cqe;
		if ((err = client_wait_cqe(c, &cqe)) == -EPIPE &&
		    (err = client_reconnect(c)) == 0) {
			/* Again, each key written again: the lost daemon
			 * may have answered over it (sync_one). */
			for (size_t k = 0; k < next; k++) {
				if (slot_of[k] < 0)
					continue;
				struct rc_sqe *sqe = sync_sqe(c, RC_OP_OPEN);
				if (!sqe) {
					err = -EBUSY;
					break;
				}
				size_t kl = strlen(keys[k]);
				memcpy(rc_arg_ptr(c, slot_of[k]), keys[k], kl);
				sqe->arg = (uint16_t)slot_of[k];
				sqe->arg_len = (uint32_t)kl;
				sqe->dataset = (uint32_t)dataset;
				sqe->user_data = k;
			}
			continue;
		}
		if (err < 0)
			break;
		uint64_t k = cqe->user_data;
		struct rc_cqe done = *cqe;
		rc_cqe_seen(c);
		inflight--;
		if (k >= n || slot_of[k] < 0)
			continue;
		int t = done.res < 0 ? 1 : track_opened(c, (uint32_t)done.res,
						       dataset, keys[k],
						       slot_of[k]);
		rc_arg_put(c, slot_of[k]);
		slot_of[k] = -1;
		if (t == 0) { /* its number is held: open it again */
			struct rc_sqe *sqe;
			int slot, r = key_call(c, RC_OP_OPEN, dataset, keys[k],
					       &sqe, &slot);
			if (r == 0) {
				sqe->user_data = k;
				slot_of[k] = slot;
				inflight++;
				continue;
			}
			t = r;
		}
		results[k] = t < 0 ? t : done.res;
		if (sizes)
			sizes[k] = done.res >= 0 && t > 0 ? done.addr : 0;
	}
	for (; !err && next < n; next++)
		results[next] = -EBUSY; /* not one arg slot to open with */
	free(slot_of);
	return err;
}

int rc_stat_handle(struct rc_client *c, uint32_t handle, struct rc_stat *st)
{
	struct rc_sqe *sqe;
	int slot;
	int r = client_handle_check(c, handle);
	if (r < 0)
		return r;
	r = slot_call(c, RC_OP_STAT, &sqe, &slot);
	if (r < 0)
		return r;
	sqe->handle = handle;
	struct rc_cqe cqe;
	r = sync_one(c, &cqe);
	if (r == 0 && cqe.res >= 0)
		etag_from_slot(c, slot, st, cqe.addr);
	rc_arg_put(c, slot);
	return r < 0 ? r : cqe.res;
}

static int simple_call(struct rc_client *c, uint8_t op, uint32_t handle)
{
	struct rc_cqe cqe;
	struct rc_sqe e = {.opcode = op, .handle = handle};
	if (op != RC_OP_CLOSE && op != RC_OP_RELEASE &&
	    !still_to_do(c, &e, &cqe))
		return cqe.res; /* a dead handle's error */
	handle = e.handle;
	struct rc_sqe *sqe = sync_sqe(c, op);
	if (!sqe)
		return -EBUSY;
	sqe->handle = handle;
	int r = sync_one(c, &cqe);
	return r < 0 ? r : cqe.res;
}

int rc_close(struct rc_client *c, uint32_t handle)
{
	if (!client_untrack(c, handle))
		return 0; /* died with an earlier session */
	return simple_call(c, RC_OP_CLOSE, handle);
}

/* A lease of an earlier session: its arena stays mapped, and the daemon
 * that held it is gone. */
int rc_release(struct rc_client *c, uint32_t lease)
{
	if (lease != RC_NO_LEASE && (lease & RC_LEASE_LOCAL))
		return copyread_release(c, lease);
	if (client_lease_is_old(c, lease))
		return 0;
	return simple_call(c, RC_OP_RELEASE, lease);
}

/* Queues the READs of rc_read's extents not yet done (done[i] == 0). */
static int read_issue(struct rc_client *c, uint32_t handle, uint64_t offset,
		      uint64_t len, int n, const uint8_t *done)
{
	uint64_t bs = c->block_size, pos = offset;
	for (int i = 0; i < n; i++) {
		uint64_t end = (pos / bs + 1) * bs;
		if (end > offset + len)
			end = offset + len;
		if (!done[i]) {
			struct rc_sqe *sqe = rc_get_sqe(c);
			if (!sqe)
				return -EBUSY;
			rc_prep_read(sqe, handle, pos, end - pos, (uint64_t)i);
		}
		pos = end;
	}
	return rc_submit(c);
}

int rc_read(struct rc_client *c, uint32_t handle, uint64_t offset,
	    uint64_t len, struct rc_extent *ext, int max_ext)
{
	if (max_ext <= 0)
		return -EINVAL;
	int r = client_handle_check(c, handle);
	if (r < 0)
		return r;
	if ((uint32_t)max_ext > c->sq_mask + 1)
		max_ext = (int)(c->sq_mask + 1);
	/* One READ per block the range touches, all in one batch. */
	uint64_t bs = c->block_size;
	uint32_t room = c->sq_mask + 1 - (c->sq_local_tail -
		atomic_load_explicit(&c->hdr->sq_head, memory_order_acquire));
	int n = 0;
	for (uint64_t pos = offset; pos < offset + len && n < max_ext &&
				    (uint32_t)n < room; n++)
		pos = (pos / bs + 1) * bs;
	if (n == 0)
		return 0;
	uint8_t *done = calloc((size_t)n, 1);
	if (!done)
		return -ENOMEM;
	for (int i = 0; i < n; i++)
		ext[i] = (struct rc_extent){NULL, 0, RC_NO_LEASE};
	int err = 0, got = 0, left = n;
	r = read_issue(c, handle, offset, len, n, done);
	while (r >= 0 && left > 0) {
		struct rc_cqe *cqe;
		if ((r = client_wait_cqe(c, &cqe)) == -EPIPE) {
			/* What came back stays readable in the old arena
			 * (its leases die with the session); the rest is
			 * read again from the daemon that took over. */
			if ((r = client_reconnect(c)) < 0 ||
			    (r = client_handle_check(c, handle)) < 0)
				break;
			r = read_issue(c, handle, offset, len, n, done);
			continue;
		}
		if (r < 0)
			break;
		uint64_t idx = cqe->user_data;
		if (idx < (uint64_t)n && !done[idx]) {
			done[idx] = 1;
			left--;
			if (cqe->res < 0 && !err)
				err = cqe->res;
			if (cqe->res > 0) {
				ext[idx].data = rc_cqe_data(c, cqe);
				ext[idx].len = (uint32_t)cqe->res;
				ext[idx].lease = cqe->lease;
				got++;
			}
		}
		rc_cqe_seen(c);
	}
	free(done);
	if (r < 0)
		return r; /* the session is gone: its leases with it */
	if (err) {
		for (int i = 0; i < n; i++)
			if (ext[i].lease != RC_NO_LEASE)
				rc_release(c, ext[i].lease);
		return err;
	}
	/* Extents past EOF came back empty: they are at the end. */
	return got;
}

ssize_t rc_read_into(struct rc_client *c, uint32_t handle, uint64_t offset,
		     uint64_t len, uint32_t buf_index, uint64_t buf_offset)
{
	int err = client_handle_check(c, handle);
	if (err < 0)
		return err;
	struct rc_sqe *sqe = rc_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	rc_prep_read_into(sqe, handle, offset, len, buf_index, buf_offset,
			  SYNC_TAG);
	struct rc_cqe cqe;
	int r = sync_one(c, &cqe);
	return r < 0 ? r : cqe.res;
}

int rc_list(struct rc_client *c, int dataset, const char *prefix,
	    uint64_t start, uint32_t buf_index, uint64_t buf_offset,
	    uint64_t buf_len, int *more)
{
	struct rc_sqe *sqe;
	int slot;
	int r = key_call(c, RC_OP_LIST, dataset, prefix ? prefix : "", &sqe,
			 &slot);
	if (r < 0)
		return r;
	sqe->offset = start;
	sqe->buf_index = buf_index;
	sqe->buf_offset = buf_offset;
	sqe->len = buf_len;
	struct rc_cqe cqe;
	r = sync_one(c, &cqe);
	rc_arg_put(c, slot);
	if (r < 0)
		return r;
	if (more)
		*more = (cqe.flags & RC_CQE_F_MORE) != 0;
	return cqe.res;
}

int rc_write_open(struct rc_client *c, int dataset, const char *key)
{
	for (;;) {
		struct rc_sqe *sqe;
		int slot;
		int r = key_call(c, RC_OP_WRITE_OPEN, dataset, key, &sqe,
				 &slot);
		if (r < 0)
			return r;
		struct rc_cqe cqe;
		r = sync_one(c, &cqe);
		rc_arg_put(c, slot);
		if (r < 0 || cqe.res < 0)
			return r < 0 ? r : cqe.res;
		/* 0: a lost write handle of the application has this
		 * number; the daemon's stays held until that one is
		 * closed. */
		if ((r = client_track_write(c, (uint32_t)cqe.res)) != 0) {
			if (r < 0)
				rc_close(c, (uint32_t)cqe.res);
			return r < 0 ? r : cqe.res;
		}
	}
}

int rc_sync(struct rc_client *c, uint32_t handle)
{
	return simple_call(c, RC_OP_SYNC, handle);
}

ssize_t rc_write(struct rc_client *c, uint32_t handle, uint64_t offset,
		 uint64_t len, uint32_t buf_index, uint64_t buf_offset)
{
	for (;;) {
		int err = client_handle_check(c, handle);
		if (err < 0)
			return err;
		struct rc_sqe *sqe = sync_sqe(c, RC_OP_WRITE);
		if (!sqe)
			return -EBUSY;
		sqe->handle = handle;
		sqe->offset = offset;
		sqe->len = len;
		sqe->buf_index = buf_index;
		sqe->buf_offset = buf_offset;
		struct rc_cqe cqe;
		int r = sync_one(c, &cqe);
		if (r < 0)
			return r;
		if (cqe.res != -EAGAIN)
			return cqe.res;
		/* Staging is full: wait for uploads, then again. The SYNC's
		 * answer (an upload of this uid that failed, maybe long ago)
		 * is not this write's: only a broken session ends it. */
		struct rc_sqe *wait = sync_sqe(c, RC_OP_SYNC);
		if (!wait)
			return -EBUSY;
		wait->handle = RC_SYNC_ALL;
		if ((r = sync_one(c, &cqe)) < 0)
			return r;
	}
}

int rc_commit(struct rc_client *c, uint32_t handle)
{
	int r = simple_call(c, RC_OP_COMMIT, handle);
	if (r == 0)
		client_track_commit(c, handle);
	return r;
}

int rc_abort(struct rc_client *c, uint32_t handle)
{
	return simple_call(c, RC_OP_ABORT, handle);
}

int rc_rename(struct rc_client *c, uint32_t handle, const char *key)
{
	struct rc_sqe *sqe;
	int slot;
	int r = client_handle_check(c, handle);
	if (r < 0)
		return r;
	r = key_call(c, RC_OP_RENAME, 0, key, &sqe, &slot);
	if (r < 0)
		return r;
	sqe->dataset = 0;
	sqe->handle = handle;
	struct rc_cqe cqe;
	r = sync_one(c, &cqe);
	rc_arg_put(c, slot);
	return r < 0 ? r : cqe.res;
}

static int send_plan(struct rc_client *c, uint32_t buf_index,
		     uint64_t buf_offset, uint64_t n_entries, uint8_t flags)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	rc_prep_prefetch_plan(sqe, buf_index, buf_offset, n_entries, SYNC_TAG);
	sqe->flags = flags;
	struct rc_cqe cqe;
	int r = sync_one(c, &cqe);
	if (r < 0)
		return r;
	if (cqe.res >= 0 && client_track_plan(c, buf_index, buf_offset,
					      n_entries, flags) < 0)
		return -ENOMEM;
	return cqe.res;
}

int rc_prefetch_plan(struct rc_client *c, uint32_t buf_index,
		     uint64_t buf_offset, uint64_t n_entries)
{
	return send_plan(c, buf_index, buf_offset, n_entries, 0);
}

int rc_prefetch_plan_append(struct rc_client *c, uint32_t buf_index,
			    uint64_t buf_offset, uint64_t n_entries)
{
	return send_plan(c, buf_index, buf_offset, n_entries, RC_PLAN_APPEND);
}

const char *rc_strerror(int err)
{
	switch (-err) {
	case EBADF:
		return "unknown handle, lease or buffer";
	case EACCES:
		return "not allowed by the dataset's ACL for this user "
		       "(allow_uids/gids, write_uids/gids)";
	case EPERM:
		return "S3 denied the daemon access (AccessDenied: its S3 "
		       "credentials or the bucket policy)";
	case ENOENT:
		return "no such object, or unknown dataset";
	case ECONNREFUSED:
		return "no daemon is listening on the socket (is ringcached "
		       "running?)";
	case ENODEV:
		return "the dataset's bucket does not exist (NoSuchBucket)";
	case ENXIO:
		return "the S3 endpoint's host name does not resolve (DNS)";
	case EHOSTUNREACH:
	case ENETUNREACH:
		return "the S3 endpoint is unreachable";
	case ETIMEDOUT:
		return "connecting to the S3 endpoint timed out";
	case EKEYEXPIRED:
		return "S3 says the daemon's credentials expired";
	case ESTALE:
		return "object changed in S3 since it was opened";
	case EKEYREJECTED:
		return "S3 rejected the daemon's credentials (access or secret "
		       "key)";
	case EIO:
		return "S3 request failed after retries";
	case EPROTO:
		return "S3 sent a reply that breaks the protocol (see the "
		       "daemon's log)";
	case EOPNOTSUPP:
		return "operation not supported by this daemon";
	case EROFS:
		return "dataset is not writable";
	case EAGAIN:
		return "write-back staging memory is full";
	case ENOSPC:
		return "write-back journal is full";
	case EPIPE:
		return "daemon connection lost (no daemon came back within the "
		       "reconnect timeout)";
	case ECONNRESET:
		return "the daemon restarted: an uncommitted write is lost (write "
		       "it again), entries in flight must be submitted again";
	case EDQUOT:
		return "over this user's or session's limit (ringcache.conf [daemon] max_*)";
	case EUSERS:
		return "the daemon serves all the sessions it may (max_sessions)";
	case E2BIG:
		return "prefetch plan longer than max_plan_entries";
	default:
		return strerror(-err);
	}
}

/* One round trip, only after a failure: the cause never rides in the
 * 32-byte CQE. Thread-local, as the client is one thread's. */
const char *rc_last_error(struct rc_client *c, int err)
{
	static _Thread_local char text[RC_LAST_ERROR_MAX + 256];
	struct {
		struct rc_msg_hdr hdr;
		char text[RC_LAST_ERROR_MAX];
	} r;
	struct rc_msg_hdr req = {RC_MSG_MAGIC, RC_ABI_VERSION,
				 RC_MSG_LAST_ERROR, sizeof(req), 0};
	ssize_t n = -EINVAL;
	if (c && c->sock >= 0 && err < 0 &&
	    (n = send_msg(c->sock, &req, sizeof(req), -1)) == 0)
		n = recv_msg(c->sock, &r, sizeof(r), NULL, 0, NULL);
	/* An older daemon answers -EINVAL with no text: the generic one. */
	if (n <= (ssize_t)sizeof(r.hdr) || r.hdr.type !=
	    (RC_MSG_LAST_ERROR | RC_MSG_REPLY) || r.hdr.status != err)
		return rc_strerror(err);
	r.text[(size_t)n - sizeof(r.hdr) < sizeof(r.text) ?
	       (size_t)n - sizeof(r.hdr) : sizeof(r.text) - 1] = '\0';
	if (!r.text[0])
		return rc_strerror(err);
	snprintf(text, sizeof(text), "%s", r.text);
	return text;
}
