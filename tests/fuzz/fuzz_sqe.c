/* fuzz_sqe.c - SQE validation against a live session (session_ring.c's
 * session_process and everything behind it): an in-process daemon
 * attaches a session (64 SQEs, 128 CQEs, 16 arg slots, a 1 MiB
 * registered buffer), then the input plays the client's side of the ring
 * region.
 *
 * Input: actions, each starting with a byte a; a >> 5 picks:
 *   0-2: an SQE: the next 64 bytes; with a & 1 its fields are first
 *        brought into range (opcode, dataset, buffer, arg slot, handle,
 *        small offsets and lengths, reserved fields zero) so the fuzzer
 *        reaches past field validation
 *   3:   arg slot a & 15 gets the next u16 length of bytes
 *   4:   submit the SQEs so far (sq_tail, then the daemon's turn)
 *   5:   reap the CQ (cq_head = cq_tail), checking every CQE
 *   6:   a wild index: sq_tail (a & 1) or cq_head set to the next u32
 *   7:   turn the daemon's loop (completions of fetches)
 * Whatever the client writes, completions carry 0, a count or a negated
 * errno, and the session's region stays the daemon's to describe. Each
 * submitted SQE gets a serial number as its user_data, and one that
 * validate_sqe (src/server/validate.c) calls malformed must complete with
 * -EINVAL: the daemon applies the rules it was unit-tested with. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_daemon.h"
#include "validate.h"

#define SQ 64u
#define CQ 128u
#define ARGS 16u
#define BUF_SIZE (1u << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_daemon();
	return 0;
}

static bool live(struct daemon *d, struct session *s)
{
	struct rc_list *pos;
	rc_list_for_each(pos, &d->shards[0].sessions)
		if (session_of(pos) == s && !s->closed)
			return true;
	return false;
}

/* Attaches and registers the buffer; NULL if the daemon refused. */
static struct session *attach(struct daemon *d, int *client)
{
	struct session *s = fuzz_session_new(d, client);
	struct rc_attach_req req = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION, RC_MSG_ATTACH,
			sizeof(req), 0},
		.gpu = -1, .numa_node = -1,
		.sq_entries = SQ, .cq_entries = CQ, .arg_slots = ARGS};
	struct rc_msg_hdr reply;
	if (fuzz_send(*client, &req, sizeof(req), -1) < 0 ||
	    fuzz_reply(d, *client, &reply, sizeof(reply)) <= 0 ||
	    reply.status != 0 || !live(d, s))
		return NULL;
	int fd = memfd_create("rc-fuzz-regbuf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, BUF_SIZE) < 0)
		abort();
	struct rc_regbuf_req rb = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION, RC_MSG_REGISTER_BUF,
			sizeof(rb), 0},
		.size = BUF_SIZE};
	int r = fuzz_send(*client, &rb, sizeof(rb), fd);
	close(fd);
	if (r < 0 || fuzz_reply(d, *client, &reply, sizeof(reply)) <= 0 ||
	    reply.status != 0)
		return NULL;
	return s;
}

static void in_range(struct rc_sqe *e)
{
	e->opcode %= RC_OP__COUNT;
	e->flags &= 1;
	e->arg %= ARGS;
	e->handle = (e->handle & 0x80000000u) | (e->handle & 7u);
	e->offset &= 0x3fffff;
	e->len &= 0x3fffff;
	e->buf_index &= 1;
	e->dataset &= 3;
	e->buf_offset &= 0x1fffff;
	e->arg_len &= 0x7ff;
	e->reserved0 = 0;
	e->reserved1 = 0;
}

/* By user_data (a serial from 1): 0 never submitted, 1 well formed,
 * 2 malformed. Ring slots a wild sq_tail reaches hold submitted entries
 * (the same verdict) or zeros (user_data 0: not checked). */
enum { SERIALS = 1u << 16 };
static uint8_t verdict[SERIALS];

static void reap(struct session *s)
{
	struct rc_ring_hdr *h = s->hdr;
	uint32_t head = atomic_load(&h->cq_head);
	uint32_t tail = atomic_load(&h->cq_tail);
	/* A wild cq_head may stand anywhere: check one ring's worth. */
	for (uint32_t n = 0; head != tail && n < CQ; head++, n++) {
		const struct rc_cqe *c = &s->cqes[head & (CQ - 1)];
		FUZZ_CHECK(c->res > -4096);
		if (c->user_data < SERIALS && verdict[c->user_data] == 2)
			FUZZ_CHECK(c->res == -EINVAL);
	}
	atomic_store(&h->cq_head, tail);
}

struct client_side {
	struct session *s;
	struct rc_sqe batch[SQ];
	uint32_t n, tail;
	uint64_t serial;
};

static void tag(struct client_side *c, struct rc_sqe *e)
{
	e->user_data = ++c->serial < SERIALS ? c->serial : 0;
	if (e->user_data)
		verdict[e->user_data] = validate_sqe(e) ? 2 : 1;
}

static void submit(struct daemon *d, struct client_side *c)
{
	struct session *s = c->s;
	for (uint32_t k = 0; k < c->n; k++) {
		tag(c, &c->batch[k]);
		s->sqes[(c->tail + k) & (SQ - 1)] = c->batch[k];
	}
	c->tail += c->n;
	c->n = 0;
	atomic_store(&s->hdr->sq_tail, c->tail);
	session_process(s);
	if (live(d, s))
		session_flush(s);
	fuzz_turn(d, 2);
}

static size_t action(struct daemon *d, struct client_side *c,
		     const uint8_t *p, size_t left)
{
	uint8_t a = p[0];
	uint16_t len;
	uint32_t v;
	switch (a >> 5) {
	case 0: case 1: case 2:
		if (left < 1 + sizeof(struct rc_sqe))
			return left;
		memcpy(&c->batch[c->n], p + 1, sizeof(struct rc_sqe));
		if (a & 1)
			in_range(&c->batch[c->n]);
		if (++c->n == SQ)
			submit(d, c);
		return 1 + sizeof(struct rc_sqe);
	case 3:
		if (left < 3)
			return left;
		memcpy(&len, p + 1, 2);
		if (len > left - 3)
			len = (uint16_t)(left - 3);
		if (len > RC_ARG_SLOT_SIZE)
			len = RC_ARG_SLOT_SIZE;
		memcpy(c->s->args + (size_t)(a & 15) * RC_ARG_SLOT_SIZE,
		       p + 3, len);
		return 3u + len;
	case 4:
		submit(d, c);
		return 1;
	case 5:
		reap(c->s);
		return 1;
	case 6:
		if (left < 5)
			return left;
		memcpy(&v, p + 1, 4);
		if (a & 1) {
			c->tail = v;
			atomic_store(&c->s->hdr->sq_tail, v);
		} else {
			atomic_store(&c->s->hdr->cq_head, v);
		}
		return 5;
	default:
		fuzz_turn(d, 8);
		return 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct daemon *d = fuzz_daemon();
	struct client_side c = {0};
	int client;
	memset(verdict, 0, sizeof(verdict));
	c.s = attach(d, &client);
	if (c.s) {
		c.tail = atomic_load(&c.s->hdr->sq_tail);
		size_t i = 0;
		while (i < size && live(d, c.s))
			i += action(d, &c, data + i, size - i);
		if (live(d, c.s) && c.n)
			submit(d, &c);
		if (live(d, c.s))
			reap(c.s);
	}
	fuzz_session_end(d, client);
	return 0;
}
