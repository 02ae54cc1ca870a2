/* test_ring.c - the SQ/CQ fast path inlined in include/ringcache.h, tested
 * on a ring region built in memory with a simulated daemon on the other
 * side (same thread, or a second thread for the ordering test). No daemon,
 * no socket: only the index arithmetic, the memory ordering and the
 * doorbell rule. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "ringcache.h"
#include "sample.h"

#define SQ_ENTRIES 8u
#define CQ_ENTRIES 16u

/* The ring region and the client view of it. */
struct ring {
	struct rc_ring_hdr *hdr;
	struct rc_sqe *sqes;
	struct rc_cqe *cqes;
	struct rc_client c;
};

static struct ring R;

static void ring_setup_at(uint32_t sq_start, uint32_t cq_start)
{
	memset(&R, 0, sizeof(R));
	R.hdr = aligned_alloc(64, 4096);
	R.sqes = aligned_alloc(64, SQ_ENTRIES * sizeof(struct rc_sqe));
	R.cqes = aligned_alloc(64, CQ_ENTRIES * sizeof(struct rc_cqe));
	cr_assert(R.hdr && R.sqes && R.cqes);
	memset(R.hdr, 0, 4096);
	/* Garbage in the slots: rc_get_sqe must hand out zeroed entries. */
	memset(R.sqes, 0xa5, SQ_ENTRIES * sizeof(struct rc_sqe));
	memset(R.cqes, 0x5a, CQ_ENTRIES * sizeof(struct rc_cqe));

	R.hdr->magic = RC_RING_MAGIC;
	R.hdr->abi_version = RC_ABI_VERSION;
	R.hdr->sq_entries = SQ_ENTRIES;
	R.hdr->cq_entries = CQ_ENTRIES;
	atomic_store(&R.hdr->sq_head, sq_start);
	atomic_store(&R.hdr->sq_tail, sq_start);
	atomic_store(&R.hdr->cq_head, cq_start);
	atomic_store(&R.hdr->cq_tail, cq_start);

	R.c.hdr = R.hdr;
	R.c.sqes = R.sqes;
	R.c.cqes = R.cqes;
	R.c.sq_mask = SQ_ENTRIES - 1;
	R.c.cq_mask = CQ_ENTRIES - 1;
	R.c.sq_local_tail = sq_start;
	R.c.sq_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	R.c.cq_efd = -1;
	R.c.sock = -1;
	cr_assert(R.c.sq_efd >= 0, "eventfd: %s", strerror(errno));
}

static void ring_setup(void)
{
	ring_setup_at(0, 0);
}

static void ring_teardown(void)
{
	if (R.c.sq_efd >= 0)
		close(R.c.sq_efd);
	free(R.hdr);
	free(R.sqes);
	free(R.cqes);
}

/* ---- the simulated daemon ---------------------------------------------- */

/* Takes one published SQE, or returns false if none. */
static bool daemon_pop_sqe(struct rc_sqe *out)
{
	uint32_t head = atomic_load_explicit(&R.hdr->sq_head,
					     memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&R.hdr->sq_tail,
					     memory_order_acquire);

	if (head == tail)
		return false;
	*out = R.sqes[head & (SQ_ENTRIES - 1)];
	atomic_store_explicit(&R.hdr->sq_head, head + 1, memory_order_release);
	return true;
}

static bool daemon_cq_full(void)
{
	uint32_t tail = atomic_load_explicit(&R.hdr->cq_tail,
					     memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&R.hdr->cq_head,
					     memory_order_acquire);

	return tail - head >= CQ_ENTRIES;
}

static void daemon_push_cqe(uint64_t user_data, int32_t res)
{
	uint32_t tail = atomic_load_explicit(&R.hdr->cq_tail,
					     memory_order_relaxed);
	struct rc_cqe *cqe = &R.cqes[tail & (CQ_ENTRIES - 1)];

	cqe->user_data = user_data;
	cqe->res = res;
	cqe->flags = 0;
	cqe->addr = user_data * 3;
	cqe->lease = RC_NO_LEASE;
	cqe->arena = 0;
	atomic_store_explicit(&R.hdr->cq_tail, tail + 1, memory_order_release);
}

static uint64_t eventfd_count(int fd)
{
	uint64_t v = 0;

	if (read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v)) {
		cr_assert(errno == EAGAIN, "eventfd read: %s", strerror(errno));
		return 0;
	}
	return v;
}

/* ---- tests --------------------------------------------------------------- */

Test(ring, abi_layout)
{
	cr_assert_eq(sizeof(struct rc_sqe), 64);
	cr_assert_eq(sizeof(struct rc_cqe), 32);
	cr_assert_eq(offsetof(struct rc_ring_hdr, sq_head) % 64, 0);
	cr_assert_eq(offsetof(struct rc_ring_hdr, sq_tail) % 64, 0);
	cr_assert_eq(offsetof(struct rc_ring_hdr, cq_head) % 64, 0);
	cr_assert_eq(offsetof(struct rc_ring_hdr, cq_tail) % 64, 0);
	cr_assert_neq(offsetof(struct rc_ring_hdr, sq_head),
		      offsetof(struct rc_ring_hdr, sq_tail));
	cr_assert(sizeof(struct rc_ring_hdr) <= 4096);
	/* Callers allocate struct rc_client: its size is the library's ABI
	 * (batch_pending went into the tail padding of RINGCACHE_1.1). */
	cr_assert_eq(sizeof(struct rc_client), 136);
	cr_assert_eq(offsetof(struct rc_client, batch_pending), 132);
}

Test(ring, get_sqe_hands_out_zeroed_entries, .init = ring_setup,
     .fini = ring_teardown)
{
	struct rc_sqe *sqe = rc_get_sqe(&R.c);
	static const struct rc_sqe zero;

	cr_assert_not_null(sqe);
	cr_assert_eq(memcmp(sqe, &zero, sizeof(zero)), 0,
		     "a fresh SQE must be all zero (reserved fields!)");
	rc_prep_read_into(sqe, 7, 4096, 100, 3, 64, 0xfeed);
	cr_assert_eq(sqe->opcode, RC_OP_READ_INTO);
	cr_assert_eq(sqe->handle, 7);
	cr_assert_eq(sqe->offset, 4096);
	cr_assert_eq(sqe->len, 100);
	cr_assert_eq(sqe->buf_index, 3);
	cr_assert_eq(sqe->buf_offset, 64);
	cr_assert_eq(sqe->user_data, 0xfeed);
	cr_assert_eq(sqe->reserved0, 0);
	cr_assert_eq(sqe->reserved1, 0);
	/* Prepared but not submitted: invisible to the daemon. */
	cr_assert_eq(atomic_load(&R.hdr->sq_tail), 0);
	cr_assert_eq(rc_submit(&R.c), 1);
	cr_assert_eq(atomic_load(&R.hdr->sq_tail), 1);
	cr_assert_eq(R.c.inflight, 1);
}

Test(ring, full_ring_detection, .init = ring_setup, .fini = ring_teardown)
{
	struct rc_sqe got;
	int n = 0;

	while (rc_get_sqe(&R.c))
		n++;
	cr_assert_eq(n, (int)SQ_ENTRIES, "ring of %u took %d entries",
		     SQ_ENTRIES, n);
	cr_assert_null(rc_get_sqe(&R.c), "full ring must stay full");
	/* Unsubmitted entries are not consumable, so the ring stays full. */
	cr_assert(!daemon_pop_sqe(&got));
	cr_assert_null(rc_get_sqe(&R.c));
	cr_assert_eq(rc_submit(&R.c), (int)SQ_ENTRIES);
	for (int i = 0; i < 3; i++)
		cr_assert(daemon_pop_sqe(&got));
	n = 0;
	while (rc_get_sqe(&R.c))
		n++;
	cr_assert_eq(n, 3, "after 3 consumed, 3 slots free (got %d)", n);
}

/* Indices start just below 2^32 and wrap during the test: the free-slot
 * arithmetic and the slot positions must not care. */
Test(ring, sq_index_wraps_around_uint32, .fini = ring_teardown)
{
	const uint32_t start = UINT32_MAX - 5;
	uint64_t next = 0, expect = 0;
	struct rc_sqe got;

	ring_setup_at(start, 0);
	for (int round = 0; round < 5; round++) {
		struct rc_sqe *sqe;
		int n = 0;

		while ((sqe = rc_get_sqe(&R.c))) {
			uint32_t slot = (R.c.sq_local_tail - 1) & R.c.sq_mask;

			cr_assert_eq(sqe, &R.sqes[slot],
				     "SQE not at tail & mask");
			sqe->opcode = RC_OP_NOP;
			sqe->user_data = next++;
			n++;
		}
		cr_assert_eq(n, (int)SQ_ENTRIES, "round %d: %d free slots",
			     round, n);
		cr_assert_eq(rc_submit(&R.c), (int)SQ_ENTRIES);
		while (daemon_pop_sqe(&got))
			cr_assert_eq(got.user_data, expect++,
				     "SQE out of order across the wrap");
	}
	cr_assert_eq(expect, 5 * SQ_ENTRIES);
	cr_assert_eq(atomic_load(&R.hdr->sq_tail), start + 5 * SQ_ENTRIES,
		     "tail must wrap modulo 2^32");
	cr_assert_lt(atomic_load(&R.hdr->sq_tail), start,
		     "the test must actually wrap");
}

Test(ring, cq_peek_and_seen_in_order_across_wrap, .fini = ring_teardown)
{
	const uint32_t start = UINT32_MAX - 3;
	uint64_t next = 100, expect = 100;

	ring_setup_at(0, start);
	R.c.inflight = 1000;
	cr_assert_null(rc_peek_cqe(&R.c), "empty CQ must give NULL");
	for (int round = 0; round < 4; round++) {
		struct rc_cqe *cqe;

		while (!daemon_cq_full())
			daemon_push_cqe(next++, (int32_t)round);
		for (uint32_t i = 0; i < CQ_ENTRIES; i++) {
			cqe = rc_peek_cqe(&R.c);
			cr_assert_not_null(cqe, "round %d: CQE %u missing",
					   round, i);
			/* Peeking twice is idempotent until seen. */
			cr_assert_eq(rc_peek_cqe(&R.c), cqe);
			cr_assert_eq(cqe->user_data, expect,
				     "CQE %llu out of order",
				     (unsigned long long)cqe->user_data);
			cr_assert_eq(cqe->res, round);
			cr_assert_eq(cqe->addr, expect * 3);
			expect++;
			rc_cqe_seen(&R.c);
		}
		cr_assert_null(rc_peek_cqe(&R.c));
	}
	cr_assert_eq(R.c.inflight, 1000 - 4 * CQ_ENTRIES,
		     "rc_cqe_seen must count down inflight");
	cr_assert_lt(atomic_load(&R.hdr->cq_head), start, "CQ must wrap");
}

Test(ring, doorbell_only_when_daemon_sleeps, .init = ring_setup,
     .fini = ring_teardown)
{
	struct rc_sqe got;

	/* Daemon awake: no system call, no doorbell. */
	cr_assert_not_null(rc_get_sqe(&R.c));
	cr_assert_eq(rc_submit(&R.c), 1);
	cr_assert_eq(eventfd_count(R.c.sq_efd), 0,
		     "doorbell rung while the daemon was awake");

	/* Daemon asleep: one write per rc_submit that publishes entries. */
	atomic_store(&R.hdr->sq_flags, RC_SQ_NEED_WAKEUP);
	cr_assert_not_null(rc_get_sqe(&R.c));
	cr_assert_not_null(rc_get_sqe(&R.c));
	cr_assert_eq(rc_submit(&R.c), 2);
	cr_assert_eq(eventfd_count(R.c.sq_efd), 1);
	cr_assert_not_null(rc_get_sqe(&R.c));
	cr_assert_eq(rc_submit(&R.c), 1);
	cr_assert_not_null(rc_get_sqe(&R.c));
	cr_assert_eq(rc_submit(&R.c), 1);
	cr_assert_eq(eventfd_count(R.c.sq_efd), 2);

	/* Nothing new to publish: no doorbell even if asleep. */
	cr_assert_eq(rc_submit(&R.c), 0);
	cr_assert_eq(eventfd_count(R.c.sq_efd), 0);

	/* Awake again. */
	atomic_store(&R.hdr->sq_flags, 0);
	while (daemon_pop_sqe(&got))
		;
	cr_assert_not_null(rc_get_sqe(&R.c));
	cr_assert_eq(rc_submit(&R.c), 1);
	cr_assert_eq(eventfd_count(R.c.sq_efd), 0);
	cr_assert_eq(R.c.inflight, 6);
}

Test(ring, cqe_data_checks_the_arena, .init = ring_setup,
     .fini = ring_teardown)
{
	static uint8_t arena0[4096];
	struct rc_arena_map arenas[2] = {
		{ arena0, sizeof(arena0) },
		{ NULL, 0 },
	};
	struct rc_cqe cqe = { .addr = 100, .arena = 0 };

	R.c.arenas = arenas;
	R.c.n_datasets = 2;
	cr_assert_eq(rc_cqe_data(&R.c, &cqe), arena0 + 100);
	cqe.arena = 1;
	cr_assert_null(rc_cqe_data(&R.c, &cqe), "unmapped arena");
	cqe.arena = 2;
	cr_assert_null(rc_cqe_data(&R.c, &cqe), "arena beyond n_datasets");
	cqe.arena = UINT32_MAX;
	cr_assert_null(rc_cqe_data(&R.c, &cqe));
}

/* ---- FIFO with a concurrent daemon thread ------------------------------- */

/* SQEs sent: 60000 in the plain build, 10000 under a sanitizer (TSan on a
 * loaded machine passes about 2000 a second); both cross the 32-bit index
 * wrap and go round each ring many times. Set before the daemon thread
 * starts. */
static unsigned fifo_total;
/* A stall, not a slow machine, fails the test: no completion for this
 * long. */
#define FIFO_STALL_MS 30000

static atomic_bool daemon_stop;
static atomic_uint daemon_errors;

/* Echoes every SQE as a CQE, in order, never overrunning the CQ. */
static void *daemon_thread(void *arg)
{
	uint64_t expect = 0;
	struct rc_sqe sqe;

	(void)arg;
	while (!atomic_load(&daemon_stop) && expect < fifo_total) {
		if (daemon_cq_full() || !daemon_pop_sqe(&sqe)) {
			sched_yield();
			continue;
		}
		if (sqe.offset != expect || sqe.user_data != expect + 1 ||
		    sqe.opcode != RC_OP_READ || sqe.len != (expect & 0xfff))
			atomic_fetch_add(&daemon_errors, 1);
		daemon_push_cqe(sqe.user_data, (int32_t)(expect & 0x7fffffff));
		expect++;
	}
	return NULL;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Test(ring, fifo_order_with_concurrent_daemon, .fini = ring_teardown,
     .timeout = 240)
{
	uint64_t sent = 0, reaped = 0;
	int64_t deadline = mono_ms() + FIFO_STALL_MS;
	pthread_t th;

	fifo_total = sample_rounds(60000u, 10000u);
	/* Start near the wrap so it happens mid-stream on both rings. */
	ring_setup_at(UINT32_MAX - 1000, UINT32_MAX - 2000);
	atomic_store(&daemon_stop, false);
	atomic_store(&daemon_errors, 0);
	cr_assert_eq(pthread_create(&th, NULL, daemon_thread, NULL), 0);

	while (reaped < fifo_total) {
		struct rc_sqe *sqe;
		struct rc_cqe *cqe;
		uint64_t before = reaped;

		/* Never more in flight than the CQ can hold. */
		while (sent < fifo_total && sent - reaped < CQ_ENTRIES &&
		       (sqe = rc_get_sqe(&R.c))) {
			rc_prep_read(sqe, 1, sent, sent & 0xfff, sent + 1);
			sent++;
		}
		rc_submit(&R.c);
		while ((cqe = rc_peek_cqe(&R.c))) {
			if (cqe->user_data != reaped + 1 ||
			    cqe->res != (int32_t)(reaped & 0x7fffffff))
				break;
			reaped++;
			rc_cqe_seen(&R.c);
		}
		if (cqe)
			break; /* out of order: reported below */
		int64_t now = mono_ms();
		if (reaped != before)
			deadline = now + FIFO_STALL_MS;
		else if (now > deadline)
			break; /* stalled: reported below */
	}
	atomic_store(&daemon_stop, true);
	pthread_join(th, NULL);
	cr_assert_eq(atomic_load(&daemon_errors), 0,
		     "daemon saw %u SQEs out of order or corrupted",
		     atomic_load(&daemon_errors));
	cr_assert_eq(reaped, fifo_total,
		     "reaped %llu of %u completions in order (or none "
		     "for %d ms)", (unsigned long long)reaped, fifo_total,
		     FIFO_STALL_MS);
	cr_assert_eq(R.c.inflight, 0);
}

/* ---- the header as C11 and as C++17 ------------------------------------- */

size_t rc_c11_layout(const size_t **out);
size_t rc_cxx_layout(const size_t **out);
int rc_cxx_submit_read(struct rc_client *c, uint32_t handle, uint64_t offset,
		       uint64_t len, uint64_t user_data);
int rc_cxx_reap(struct rc_client *c, struct rc_cqe *out);
int rc_cxx_submit_read_key(struct rc_client *c, int dataset, int slot,
			   const char *key, uint64_t user_data);

Test(ring, cxx17_and_c11_see_the_same_layout)
{
	const size_t *c11, *cxx;
	size_t n = rc_c11_layout(&c11);

	cr_assert_eq(rc_cxx_layout(&cxx), n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(c11[i], cxx[i], "layout entry %zu: C11 %zu, C++17 %zu",
			     i, c11[i], cxx[i]);
}

/* The fast path compiled as C++ drives the ring the C daemon side reads. */
Test(ring, cxx17_fast_path_round_trip, .init = ring_setup,
     .fini = ring_teardown)
{
	struct rc_sqe sqe;
	struct rc_cqe cqe;

	cr_assert_eq(rc_cxx_submit_read(&R.c, 7, 4096, 512, 42), 1);
	cr_assert(daemon_pop_sqe(&sqe));
	cr_assert_eq(sqe.opcode, RC_OP_READ);
	cr_assert_eq(sqe.handle, 7);
	cr_assert_eq(sqe.offset, 4096);
	cr_assert_eq(sqe.len, 512);
	cr_assert_eq(sqe.user_data, 42);
	cr_assert_eq(rc_cxx_reap(&R.c, &cqe), 0, "no completion yet");
	daemon_push_cqe(42, 512);
	cr_assert_eq(rc_cxx_reap(&R.c, &cqe), 1);
	cr_assert_eq(cqe.user_data, 42);
	cr_assert_eq(cqe.res, 512);
	cr_assert_eq(R.c.inflight, 0);
	cr_assert_eq(atomic_load(&R.hdr->cq_head), 1);
}

/* Completions of lazily posted entries (user_data RC_USER_DATA_LAZY)
 * never reach the caller: rc_peek_cqe consumes them, counts the failures
 * and the entries in flight, from C and from C++. */
Test(ring, lazy_completions_are_consumed_by_peek, .init = ring_setup,
     .fini = ring_teardown)
{
	struct rc_cqe got;

	R.c.inflight = 7;
	daemon_push_cqe(RC_USER_DATA_LAZY, 0);
	daemon_push_cqe(5, 0);
	daemon_push_cqe(RC_USER_DATA_LAZY, -EBADF);
	daemon_push_cqe(RC_USER_DATA_LAZY, 0);
	daemon_push_cqe(6, 0);
	daemon_push_cqe(RC_USER_DATA_LAZY, -EBADF);
	daemon_push_cqe(RC_USER_DATA_LAZY, 0);
	struct rc_cqe *cqe = rc_peek_cqe(&R.c);
	cr_assert_not_null(cqe);
	cr_assert_eq(cqe->user_data, 5);
	cr_assert_eq(rc_peek_cqe(&R.c), cqe, "peek twice, the same entry");
	rc_cqe_seen(&R.c);
	cr_assert_eq(rc_cxx_reap(&R.c, &got), 1);
	cr_assert_eq(got.user_data, 6);
	cr_assert_null(rc_peek_cqe(&R.c));
	cr_assert_eq(R.c.lazy_errors, 2);
	cr_assert_eq(R.c.inflight, 0);
	cr_assert_eq(atomic_load(&R.hdr->cq_head), atomic_load(&R.hdr->cq_tail));
}

/* Only RC_USER_DATA_LAZY is the library's: a caller's own large tags
 * (perf/readbench.c posts its RELEASEs as UINT64_MAX) come back to it, or
 * a program that waits for them hangs. */
Test(ring, callers_large_user_data_reaches_the_caller, .init = ring_setup,
     .fini = ring_teardown)
{
	R.c.inflight = 3;
	daemon_push_cqe(UINT64_MAX, 0);
	daemon_push_cqe(RC_USER_DATA_LAZY - 1, 0);
	daemon_push_cqe(RC_USER_DATA_LAZY + 1, 0);
	const uint64_t want[] = {UINT64_MAX, RC_USER_DATA_LAZY - 1,
				 RC_USER_DATA_LAZY + 1};
	for (int i = 0; i < 3; i++) {
		struct rc_cqe *cqe = rc_peek_cqe(&R.c);
		cr_assert_not_null(cqe, "completion %d swallowed", i);
		cr_assert_eq(cqe->user_data, want[i]);
		rc_cqe_seen(&R.c);
	}
	cr_assert_null(rc_peek_cqe(&R.c));
}

/* READ_KEY prepared from C++: the key lands in its arg slot. */
Test(ring, cxx17_read_key_entry, .init = ring_setup, .fini = ring_teardown)
{
	static _Alignas(64) uint8_t args[4 * RC_ARG_SLOT_SIZE];
	struct rc_sqe e;

	R.c.args = args;
	R.c.arg_slots = 4;
	cr_assert_eq(rc_cxx_submit_read_key(&R.c, 3, 2, "train/0001.jpg", 9), 1);
	cr_assert(daemon_pop_sqe(&e));
	cr_assert_eq(e.opcode, RC_OP_READ_KEY);
	cr_assert_eq(e.flags, RC_READ_KEY_CLOSE);
	cr_assert_eq(e.arg, 2);
	cr_assert_eq(e.arg_len, 14);
	cr_assert_eq(e.dataset, 3);
	cr_assert_eq(e.len, RC_MAX_IO);
	cr_assert_eq(e.user_data, 9);
	cr_assert_eq(memcmp(args + 2 * RC_ARG_SLOT_SIZE, "train/0001.jpg", 14), 0);
	char longkey[RC_MAX_KEY + 2];
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = 0;
	cr_assert_eq(rc_cxx_submit_read_key(&R.c, 3, 1, longkey, 10),
		     -ENAMETOOLONG);
}
