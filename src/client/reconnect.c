/* reconnect.c - owns a client's way back after the daemon was lost (a
 * restart, a crash): the records of what the session held (handles by
 * key and ETag, registered buffers, the prefetch plan) and the re-attach
 * that rebuilds it on the next daemon, so that a restart costs the
 * application a pause and not its handles.
 *
 * What survives, and why it is safe: handles are re-opened under the
 * numbers the application holds (OPEN with RC_OPEN_AT), each through the
 * same ACL and dataset checks as any OPEN; one whose object changed (or
 * went) is dead: -ESTALE for it alone. Buffers are registered again from
 * the memfds the library dup'ed, at the same indices. Leases of the old
 * session stay readable: its arenas stay mapped until rc_detach, and
 * their lease ids carry the old generation (RC_LEASE_GEN), so releasing
 * one is a local no-op and never touches the new session's. A write
 * handle's uncommitted object went with the daemon: its calls fail with
 * -ECONNRESET. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ringcache.h"
#include "client_priv.h"
#include "clock.h"
#include "copyread.h"
#include "prefault.h"
#include "vec.h"

#define BACKOFF_FIRST_MS 5u   /* the new daemon is usually up in < 1 s */
#define BACKOFF_MAX_MS 100u   /* a connect() is cheap; keep the pause short */

/* ---- Records ------------------------------------------------------------ */

static void unmap_old(struct client_state *st);

static struct handle_rec *rec_of(struct client_state *st, uint32_t h)
{
	if (h & RC_WRITE_HANDLE) {
		h &= ~RC_WRITE_HANDLE;
		return h < st->n_wh ? &st->wh[h] : NULL;
	}
	return h < st->n_rh ? &st->rh[h] : NULL;
}

static void rec_clear(struct handle_rec *r)
{
	free(r->key);
	memset(r, 0, sizeof(*r));
}

/* A dead handle of the application keeps its number: an OPEN the daemon
 * answers with it is held (closed along with the dead one), and the
 * caller opens again. */
static int hold_if_dead(struct handle_rec *r)
{
	if (r->kind != HREC_DEAD || r->held)
		return 0;
	r->held = 1;
	return 1;
}

int client_track_read(struct rc_client *c, uint32_t h, uint32_t dataset,
		      const char *key, const char *etag)
{
	struct client_state *st = client_state(c);
	if (RC_GROW_FROM(st->rh, st->n_rh, (uint64_t)h + 1, 64) < 0)
		return -ENOMEM;
	struct handle_rec *r = &st->rh[h];
	if (hold_if_dead(r))
		return 0;
	char *k = strdup(key);
	if (!k)
		return -ENOMEM;
	rec_clear(r);
	*r = (struct handle_rec){.kind = HREC_READ, .dataset = dataset,
				 .key = k};
	snprintf(r->etag, sizeof(r->etag), "%s", etag);
	return 1;
}

int client_track_write(struct rc_client *c, uint32_t h)
{
	struct client_state *st = client_state(c);
	if (RC_GROW_FROM(st->wh, st->n_wh,
			 (uint64_t)(h & ~RC_WRITE_HANDLE) + 1, 64) < 0)
		return -ENOMEM;
	struct handle_rec *r = &st->wh[h & ~RC_WRITE_HANDLE];
	if (hold_if_dead(r))
		return 0;
	rec_clear(r);
	r->kind = HREC_WRITE;
	return 1;
}

void client_track_commit(struct rc_client *c, uint32_t h)
{
	struct handle_rec *r = rec_of(client_state(c), h);
	if (r && r->kind == HREC_WRITE)
		r->committed = 1;
}

int client_untrack(struct rc_client *c, uint32_t h)
{
	struct handle_rec *r = rec_of(client_state(c), h);
	if (!r || r->kind == HREC_FREE)
		return 1; /* not the library's: the daemon judges */
	int tell = r->kind != HREC_DEAD || r->held;
	rec_clear(r);
	return tell;
}

int client_handle_check(struct rc_client *c, uint32_t h)
{
	struct handle_rec *r = rec_of(client_state(c), h);
	return r && r->kind == HREC_DEAD ? r->err : 0;
}

int client_lease_is_old(struct rc_client *c, uint32_t lease)
{
	return lease != RC_NO_LEASE && !(lease & RC_LEASE_LOCAL) &&
	       RC_LEASE_GEN(lease) != client_state(c)->lease_gen;
}

int client_track_buf(struct rc_client *c, uint32_t index, int fd,
		     uint64_t size)
{
	struct client_state *st = client_state(c);
	if (index >= CLIENT_MAX_BUFS)
		return 0;
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (d < 0)
		return -errno;
	if (st->bufs[index].fd >= 0)
		close(st->bufs[index].fd);
	st->bufs[index].fd = d;
	st->bufs[index].size = size;
	return 0;
}

void client_untrack_buf(struct rc_client *c, uint32_t index)
{
	struct client_state *st = client_state(c);
	if (index >= CLIENT_MAX_BUFS || st->bufs[index].fd < 0)
		return;
	close(st->bufs[index].fd);
	st->bufs[index].fd = -1;
}

int client_track_plan(struct rc_client *c, uint32_t buf_index,
		      uint64_t buf_offset, uint64_t n, int append)
{
	struct client_state *st = client_state(c);
	if (!append)
		st->n_plan = 0;
	if (buf_index >= CLIENT_MAX_BUFS || st->bufs[buf_index].fd < 0 || !n)
		return 0;
	size_t need = st->n_plan + n;
	if (RC_GROW_FROM(st->plan, st->cap_plan, need, 256))
		return -ENOMEM;
	size_t bytes = n * sizeof(struct rc_plan_entry);
	ssize_t got = pread(st->bufs[buf_index].fd, st->plan + st->n_plan,
			    bytes, (off_t)buf_offset);
	if (got == (ssize_t)bytes)
		st->n_plan = need;
	return 0;
}

void client_state_free(struct rc_client *c)
{
	struct client_state *st = client_state(c);
	for (uint32_t i = 0; i < st->n_rh; i++)
		free(st->rh[i].key);
	free(st->rh);
	free(st->wh);
	for (unsigned i = 0; i < CLIENT_MAX_BUFS; i++)
		if (st->bufs[i].fd >= 0)
			close(st->bufs[i].fd);
	unmap_old(st);
	copyread_free(c);
	free(st->old);
	free(st->plan);
	free(st->socket_path);
	free(st);
	c->arg_free = NULL;
}

/* ---- The re-attach ------------------------------------------------------ */

/* The old session's region, sockets and tables go; its arenas stay
 * mapped (leases handed out point into them). n's session takes over. */
static int swap_in(struct rc_client *c, struct rc_client *n)
{
	struct client_state *st = client_state(c);
	struct old_map *om = realloc(st->old, (st->n_old + c->n_datasets) *
						      sizeof(*om));
	if (!om)
		return -ENOMEM;
	st->old = om;
	/* The arg slots the application holds keep what it wrote there. */
	uint32_t slots = n->arg_slots < c->arg_slots ? n->arg_slots
						    : c->arg_slots;
	memcpy(n->args, c->args, (size_t)slots * RC_ARG_SLOT_SIZE);
	int repin = 0;
	for (uint32_t i = 0; i < c->n_datasets; i++) {
		struct rc_arena_map *a = &c->arenas[i];
		if (!a->base)
			continue;
		repin |= a->cuda_pinned;
		copyread_arena_drop(a->base); /* no new extents from it */
		st->old[st->n_old++] = (struct old_map){(void *)a->base,
							a->size,
							a->cuda_pinned};
	}
	if (n->arg_slots != c->arg_slots) {
		size_t words = (n->arg_slots + 63) / 64;
		struct client_state *ns =
			realloc(st, sizeof(*st) + words * sizeof(uint64_t));
		if (!ns)
			return -ENOMEM;
		st = ns;
		for (uint32_t i = c->arg_slots; i < words * 64; i++) {
			if (i < n->arg_slots)
				st->arg_free[i / 64] |= 1ull << (i % 64);
			else
				st->arg_free[i / 64] &= ~(1ull << (i % 64));
		}
	}
	munmap(c->region, c->region_size);
	close(c->sock);
	close(c->sq_efd);
	close(c->cq_efd);
	free(c->arenas);
	free(c->datasets);
	uint32_t spin = c->spin, lazy = c->lazy_errors;
	uint32_t batch = c->batch_pending;
	*c = *n;
	c->spin = spin;
	c->lazy_errors = lazy;
	c->batch_pending = batch;
	c->arg_free = st->arg_free;
	if (repin)
		rc_cuda_pin_arenas(c);
	return 0;
}

/* One entry on the new session, without re-attaching: -EPIPE if this
 * daemon is lost too (the whole re-attach starts again). */
static int call(struct rc_client *c, const struct rc_sqe *e,
		struct rc_cqe *out)
{
	struct rc_sqe *sqe = rc_get_sqe(c);
	if (!sqe)
		return -EBUSY;
	*sqe = *e;
	int r = rc_submit(c);
	struct rc_cqe *cqe;
	if (r < 0 || (r = client_wait_cqe(c, &cqe)) < 0)
		return r;
	*out = *cqe;
	rc_cqe_seen(c);
	return 0;
}

/* Registers every buffer at its index again; a hole is filled with a
 * one-page placeholder while the ones above it go in. */
static int restore_bufs(struct rc_client *c)
{
	struct client_state *st = client_state(c);
	int top = -1;
	for (int i = 0; i < (int)CLIENT_MAX_BUFS; i++)
		if (st->bufs[i].fd >= 0)
			top = i;
	int hole = -1, err = 0;
	uint8_t placeholder[CLIENT_MAX_BUFS] = {0};
	for (int i = 0; i <= top && !err; i++) {
		int fd = st->bufs[i].fd;
		uint64_t size = st->bufs[i].size;
		if (fd < 0) {
			if (hole < 0) {
				hole = memfd_create("ringcache-placeholder",
						    MFD_CLOEXEC |
							    MFD_ALLOW_SEALING);
				if (hole < 0 || ftruncate(hole, 4096) < 0) {
					err = -errno;
					break;
				}
			}
			fd = hole;
			size = 4096;
		}
		int r = client_regbuf_send(c, fd, size);
		if (r == -EPIPE || r == -ECONNRESET) {
			err = -EPIPE;
		} else if (r != i) {
			/* Refused (a lower limit now): calls on it get
			 * -EBADF from the daemon, as for any unknown index. */
			if (r >= 0)
				client_unregbuf_send(c, (uint32_t)r);
			if (st->bufs[i].fd >= 0) {
				close(st->bufs[i].fd);
				st->bufs[i].fd = -1;
			}
		} else if (fd == hole) {
			placeholder[i] = 1;
		}
	}
	if (hole >= 0)
		close(hole);
	for (int i = 0; i <= top && !err; i++)
		if (placeholder[i] && client_unregbuf_send(c, (uint32_t)i) ==
					      -EPIPE)
			err = -EPIPE;
	return err;
}

/* The id the new daemon gives the dataset an old id named; -1 if none. */
static int new_dataset_id(const struct rc_dataset_info *old, uint32_t n_old,
			  const struct rc_client *c, uint32_t id)
{
	if (id >= n_old || !old[id].name[0])
		return -1;
	for (uint32_t i = 0; i < c->n_datasets; i++)
		if (strcmp(c->datasets[i].name, old[id].name) == 0)
			return (int)i;
	return -1;
}

static void rec_dead(struct handle_rec *r, int err, int held)
{
	free(r->key);
	r->key = NULL;
	r->kind = HREC_DEAD;
	r->err = err;
	r->held = (uint8_t)held;
}

/* Another object under the key now: its handle is closed again (lazily,
 * with the next submission), so that no entry can read the new bytes
 * through the old number. */
static void reopen_done(struct rc_client *c, struct handle_rec *r, int slot,
			const struct rc_cqe *cqe)
{
	if (cqe->res >= 0) {
		const char *etag = rc_arg_ptr(c, slot);
		if (strncmp(etag, r->etag, RC_MAX_ETAG) == 0)
			return;
		rec_dead(r, -ESTALE, 0);
		struct rc_sqe *sqe = rc_get_sqe(c);
		if (sqe) {
			sqe->opcode = RC_OP_CLOSE;
			sqe->handle = (uint32_t)cqe->res;
			sqe->user_data = RC_USER_DATA_LAZY;
		}
	} else {
		/* Gone from S3 is a change too; an ACL that no longer
		 * admits this user says so. */
		rec_dead(r, cqe->res == -ENOENT ? -ESTALE : cqe->res, 0);
	}
}

/* Re-opens the read handles under their numbers, as many in flight as
 * the arg slots and the SQ ring allow; write handles and the dead are
 * dead on the new daemon (nothing held there). */
static int reopen_handles(struct rc_client *c,
			  const struct rc_dataset_info *old_ds,
			  uint32_t n_old_ds)
{
	struct client_state *st = client_state(c);
	for (uint32_t i = 0; i < st->n_wh; i++) {
		struct handle_rec *r = &st->wh[i];
		if (r->kind == HREC_WRITE)
			rec_dead(r, -ECONNRESET, 0);
		else if (r->kind == HREC_DEAD)
			r->held = 0;
	}
	int *slot_of = malloc((st->n_rh ? st->n_rh : 1) * sizeof(int));
	if (!slot_of)
		return -ENOMEM;
	uint32_t next = 0, inflight = 0;
	int err = 0;
	while (!err && (next < st->n_rh || inflight)) {
		for (; next < st->n_rh; next++) {
			struct handle_rec *r = &st->rh[next];
			slot_of[next] = -1;
			if (r->kind == HREC_DEAD)
				r->held = 0;
			if (r->kind != HREC_READ)
				continue;
			int ds = new_dataset_id(old_ds, n_old_ds, c,
						r->dataset);
			if (ds < 0) {
				rec_dead(r, -ENOENT, 0);
				continue;
			}
			int slot = rc_arg_get(c);
			if (slot < 0)
				break;
			struct rc_sqe *sqe = rc_get_sqe(c);
			if (!sqe) {
				rc_arg_put(c, slot);
				break;
			}
			size_t kl = strlen(r->key);
			memcpy(rc_arg_ptr(c, slot), r->key, kl);
			*sqe = (struct rc_sqe){.opcode = RC_OP_OPEN,
					       .flags = RC_OPEN_AT,
					       .arg = (uint16_t)slot,
					       .handle = next,
					       .user_data = next,
					       .dataset = (uint32_t)ds,
					       .arg_len = (uint32_t)kl};
			r->dataset = (uint32_t)ds;
			slot_of[next] = slot;
			inflight++;
		}
		if (!inflight) {
			if (next < st->n_rh)
				err = -EBUSY; /* the app holds every slot */
			break;
		}
		int r = rc_submit(c);
		struct rc_cqe *cqe;
		if (r < 0 || (r = client_wait_cqe(c, &cqe)) < 0) {
			err = r;
			break;
		}
		struct rc_cqe done = *cqe;
		rc_cqe_seen(c);
		inflight--;
		uint64_t h = done.user_data;
		if (h >= next || slot_of[h] < 0)
			continue;
		reopen_done(c, &st->rh[h], slot_of[h], &done);
		rc_arg_put(c, slot_of[h]);
		slot_of[h] = -1;
	}
	for (uint32_t i = 0; i < next && i < st->n_rh; i++)
		if (slot_of[i] >= 0)
			rc_arg_put(c, slot_of[i]);
	free(slot_of);
	return err;
}

/* The plan goes again through a buffer of its own, registered for it. */
static int resend_plan(struct rc_client *c)
{
	struct client_state *st = client_state(c);
	if (!st->n_plan)
		return 0;
	size_t bytes = st->n_plan * sizeof(struct rc_plan_entry);
	int fd = memfd_create("ringcache-plan", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return 0;
	int err = 0;
	if (pwrite(fd, st->plan, bytes, 0) == (ssize_t)bytes) {
		int idx = client_regbuf_send(c, fd, bytes);
		if (idx >= 0) {
			struct rc_sqe e;
			memset(&e, 0, sizeof(e));
			rc_prep_prefetch_plan(&e, (uint32_t)idx, 0, st->n_plan,
					      0);
			struct rc_cqe cqe;
			err = call(c, &e, &cqe); /* a refused plan: no prefetch */
			if (!err)
				err = client_unregbuf_send(c, (uint32_t)idx);
		} else if (idx == -EPIPE || idx == -ECONNRESET) {
			err = -EPIPE;
		}
	}
	close(fd);
	return err == -EPIPE || err == -ECONNRESET ? -EPIPE : 0;
}

static int reattach(struct rc_client *c)
{
	struct client_state *st = client_state(c);
	uint32_t gen = st->lease_gen % RC_LEASE_GEN_MAX + 1, got = 0;
	struct rc_client n;
	rc_prefault_stop(c);
	int err = client_attach_session(&n, c, st->socket_path, &st->opts,
					gen, &got);
	if (err)
		return err;
	uint32_t n_old_ds = c->n_datasets;
	struct rc_dataset_info *old_ds = c->datasets;
	c->datasets = NULL; /* kept for the handles' dataset names */
	if ((err = swap_in(c, &n)) < 0) {
		c->datasets = old_ds;
		client_unmap_session(&n, c);
		return err;
	}
	st = client_state(c);
	st->lease_gen = got;
	st->reconnects++;
	if (!(err = restore_bufs(c)) &&
	    !(err = reopen_handles(c, old_ds, n_old_ds)))
		err = resend_plan(c);
	free(old_ds);
	return err;
}

int client_reconnect(struct rc_client *c)
{
	struct client_state *st = client_state(c);
	if (!st->timeout_ms)
		return -EPIPE;
	uint64_t deadline = rc_now_ns() + (uint64_t)st->timeout_ms * 1000000u;
	uint32_t delay_ms = BACKOFF_FIRST_MS;
	for (;;) {
		int err = reattach(c);
		if (err == 0)
			return 0;
		if (err == -ENOMEM || err == -ENAMETOOLONG)
			return err;
		uint64_t now = rc_now_ns();
		if (now >= deadline)
			return -EPIPE;
		uint64_t wait_ns = (uint64_t)delay_ms * 1000000u;
		if (wait_ns > deadline - now)
			wait_ns = deadline - now;
		struct timespec ts = {(time_t)(wait_ns / 1000000000u),
				      (long)(wait_ns % 1000000000u)};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		delay_ms = delay_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS
							 : delay_ms * 2;
	}
}

int rc_reconnect(struct rc_client *c)
{
	if (!c->arg_free)
		return -EINVAL;
	struct pollfd p = {c->sock, POLLRDHUP, 0};
	if (poll(&p, 1, 0) <= 0 ||
	    !(p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return 0;
	int r = client_reconnect(c);
	return r < 0 ? r : 1;
}

static void unmap_old(struct client_state *st)
{
	for (size_t i = 0; i < st->n_old; i++) {
		if (st->old[i].cuda_pinned)
			rc_cuda_unpin(st->old[i].base);
		munmap(st->old[i].base, st->old[i].size);
	}
	st->n_old = 0;
}

int rc_unmap_old_arenas(struct rc_client *c)
{
	if (!c->arg_free)
		return -EINVAL;
	struct client_state *st = client_state(c);
	int n = (int)st->n_old;
	unmap_old(st);
	return n;
}

int rc_handle_check(struct rc_client *c, uint32_t handle)
{
	return c->arg_free ? client_handle_check(c, handle) : -EINVAL;
}

uint32_t rc_reconnects(struct rc_client *c)
{
	return c->arg_free ? client_state(c)->reconnects : 0;
}
