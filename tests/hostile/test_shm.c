/* test_shm.c - attacks on the shared memory a client receives (arena
 * memfds, the ring region, the eventfds) and on the buffers it registers,
 * each made by uid 65534 (fx_as_nobody) against a live ringcached in front
 * of the real S3 server. After each one the daemon must be alive, answer
 * STATS, stop cleanly on SIGTERM, and a root session must read the
 * dataset's exact bytes.
 *
 * Attackers run in forked children without Criterion: each returns 0 when
 * every attack was refused, else the code of the first that was not (the
 * codes are in the comments beside each return). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"
#include "wire.h"

#define MiB (1024u * 1024u)
#define GiB (1024ull * MiB)

static struct fx_daemon D;
static struct ds_spec S;

static void kill_daemon(void)
{
	fx_daemon_kill(&D);
}

static void start_daemon(void)
{
	ds_spec_default(&S);
	fx_daemon_init(&D);
	/* Above the sparse 2 GiB buffer: what these tests measure is its
	 * memory cost, not the registration quota (test_limits.c does). */
	D.daemon_extra = "max_registered = 4G\n";
	fx_daemon_start(&D, NULL);
}

/* ---- a raw session: the fds exactly as the daemon sends them ----------- */

struct raw {
	int sock, ring_fd, sq_efd, cq_efd;
	int arena_fd[RC_MAX_DATASETS];
	unsigned n_arenas;
	uint8_t *region;
	size_t region_size;
	struct rc_ring_hdr *hdr;
};

/* Attaches without the client library, keeping every fd it receives.
 * Returns 0 or a negated errno. */
static int raw_attach(const char *path, struct raw *r)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	memset(r, 0, sizeof(*r));
	r->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (r->sock < 0 ||
	    connect(r->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	struct rc_attach_req req = {
		.hdr = {RC_MSG_MAGIC, RC_ABI_VERSION, RC_MSG_ATTACH,
			sizeof(req), 0},
		.gpu = -1, .numa_node = -1};
	if (send(r->sock, &req, sizeof(req), 0) != (ssize_t)sizeof(req))
		return -errno;
	static _Alignas(8) uint8_t buf[65536];
	static char ctl[CMSG_SPACE(sizeof(int) * (RC_MAX_DATASETS + 3))];
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	ssize_t n = recvmsg(r->sock, &mh, MSG_CMSG_CLOEXEC);
	const struct rc_attach_reply *rep = (const void *)buf;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	if (n < (ssize_t)sizeof(*rep) || rep->hdr.status || !cm)
		return n < 0 ? -errno : -EPROTO;
	int nf = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
	int *fds = (int *)CMSG_DATA(cm);
	if (nf < 3)
		return -EPROTO;
	r->ring_fd = fds[0];
	r->sq_efd = fds[1];
	r->cq_efd = fds[2];
	for (int i = 3; i < nf; i++)
		r->arena_fd[r->n_arenas++] = fds[i];
	r->region_size = rep->ring_size;
	r->region = mmap(NULL, r->region_size, PROT_READ | PROT_WRITE,
			 MAP_SHARED, r->ring_fd, 0);
	if (r->region == MAP_FAILED)
		return -errno;
	r->hdr = (struct rc_ring_hdr *)r->region;
	return 0;
}

static struct rc_sqe *raw_sqe(struct raw *r, uint32_t i)
{
	return (struct rc_sqe *)(r->region + r->hdr->sq_off) +
	       (i & (r->hdr->sq_entries - 1));
}

static void raw_ring(struct raw *r)
{
	uint64_t one = 1;
	if (write(r->sq_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		perror("sq doorbell");
}

/* Submits a NOP and waits up to 30 s for the daemon to complete it.
 * Returns 0, or -ETIMEDOUT. */
static int raw_nop(struct raw *r, uint64_t user_data)
{
	uint32_t tail = atomic_load(&r->hdr->sq_tail);
	uint32_t cq = atomic_load(&r->hdr->cq_tail);
	*raw_sqe(r, tail) = (struct rc_sqe){.opcode = RC_OP_NOP,
					     .user_data = user_data};
	atomic_store(&r->hdr->sq_tail, tail + 1);
	raw_ring(r);
	for (int i = 0; i < 30000; i++) { /* >= 30 s: a busy machine */
		if (atomic_load(&r->hdr->cq_tail) != cq)
			return 0;
		usleep(1000);
	}
	return -ETIMEDOUT;
}

/* ---- what must hold after every attack --------------------------------- */

/* STATS from a forked child killed after 5 s: a hung reactor fails here
 * instead of hanging the test. */
static bool stats_answer(void)
{
	fflush(NULL);
	pid_t pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		static char buf[65536];
		alarm(5);
		_exit(rc_stats(NULL, D.socket_path, buf, sizeof(buf)) > 0 ? 0 : 1);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		cr_assert_eq(errno, EINTR);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void assert_daemon_alive(void)
{
	int st;
	pid_t r = waitpid(D.pid, &st, WNOHANG);
	if (r == D.pid) {
		D.pid = -1;
		fx_daemon_log_tail(&D, 40);
		cr_assert_fail("ringcached died (%s %d)",
			       WIFSIGNALED(st) ? "signal" : "status",
			       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
	cr_assert(stats_answer(), "ringcached does not answer STATS in 5 s");
}

/* A root session reads objects whole, zero-copy (the arena itself) and
 * by READ_INTO, and compares every byte with the dataset. */
static void assert_root_reads(void)
{
	static const char *const keys[] = {"small/00000.bin", "small/00001.bin",
					   "edge/block-plus-one", "large/0.bin"};
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(&c, D.socket_path, &o);
	cr_assert_eq(r, 0, "root rc_attach: %s", rc_strerror(r));
	int ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0, "rc_dataset: %s", rc_strerror(ds));
	void *buf;
	int bi = rc_alloc_buffer(&c, 32 * MiB, &buf);
	cr_assert_geq(bi, 0, "rc_alloc_buffer: %s", rc_strerror(bi));
	for (size_t k = 0; k < sizeof(keys) / sizeof(*keys); k++) {
		size_t i = fx_ds_find(&S, keys[k]);
		uint64_t size = ds_size(&S, i);
		char key[DS_KEY_MAX];
		int h = rc_open(&c, ds, ds_key(&S, i, key), NULL);
		cr_assert_geq(h, 0, "rc_open(%s): %s", keys[k], rc_strerror(h));
		ssize_t n = rc_read_into(&c, (uint32_t)h, 0, size, (uint32_t)bi, 0);
		cr_assert_eq(n, (ssize_t)size, "rc_read_into(%s): %zd", keys[k], n);
		fx_assert_ds_bytes(&S, i, 0, buf, size, keys[k]);
		for (uint64_t off = 0; off < size;) {
			struct rc_extent ext[4];
			int ne = rc_read(&c, (uint32_t)h, off, size - off, ext, 4);
			cr_assert_gt(ne, 0, "rc_read(%s, %llu): %s", keys[k],
				     (unsigned long long)off, rc_strerror(ne));
			for (int e = 0; e < ne; e++) {
				fx_assert_ds_bytes(&S, i, off, ext[e].data,
						   ext[e].len, keys[k]);
				off += ext[e].len;
				cr_assert_eq(rc_release(&c, ext[e].lease), 0);
			}
		}
		cr_assert_eq(rc_close(&c, (uint32_t)h), 0);
	}
	rc_detach(&c);
}

static void assert_survived(void)
{
	assert_daemon_alive();
	assert_root_reads();
	fx_daemon_stop(&D); /* SIGTERM: a clean exit 0 */
}

static void run_attack(int (*fn)(void *), void *arg, const char *what)
{
	int st = fx_as_nobody(fn, arg);
	cr_assert_eq(st, 0, "%s: the attacker as uid 65534 returned %d (see "
		     "the code in tests/hostile/test_shm.c)", what, st);
}

/* ---- arena memfds: no reopen, chmod, punch or seal --------------------- */

static int attack_arena(void *arg)
{
	(void)arg;
	struct raw r;
	int err = raw_attach(D.socket_path, &r);
	if (err) {
		fprintf(stderr, "attach: %s\n", strerror(-err));
		return 10;
	}
	if (r.n_arenas == 0)
		return 11; /* no arena to attack: the test proves nothing */
	for (unsigned a = 0; a < r.n_arenas; a++) {
		int fd = r.arena_fd[a];
		struct stat st;
		if (fstat(fd, &st) < 0 || st.st_size == 0)
			return 12;
		char path[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		int rw = open(path, O_RDWR);
		if (rw >= 0 || errno != EACCES) {
			if (rw >= 0) { /* the poison the root reader must not see */
				void *p = mmap(NULL, (size_t)st.st_size,
					       PROT_WRITE, MAP_SHARED, rw, 0);
				if (p != MAP_FAILED)
					memset(p, 0xAA, (size_t)st.st_size);
			}
			return 13; /* reopened read-write */
		}
		if (fchmod(fd, 0666) == 0 || errno != EPERM)
			return 14; /* changed the mode */
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
			      st.st_size) == 0)
			return 15; /* punched the cache out */
		if (fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0 ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0)
			return 16; /* sealed: the daemon could not return memory */
		if (ftruncate(fd, 0) == 0)
			return 17; /* shrunk */
		void *w = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
			       MAP_SHARED, fd, 0);
		if (w != MAP_FAILED)
			return 18; /* mapped writable */
		void *ro = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED,
				fd, 0);
		if (ro == MAP_FAILED)
			return 19; /* readers must still map it */
		if (mprotect(ro, (size_t)st.st_size, PROT_READ | PROT_WRITE) == 0)
			return 20; /* made the read-only mapping writable */
	}
	return 0;
}

Test(shm, arena_fd_cannot_be_made_writable, .fini = kill_daemon)
{
	start_daemon();
	assert_root_reads(); /* the blocks the attacker would poison */
	run_attack(attack_arena, NULL, "arena memfd");
	assert_survived();
}

/* ---- ring region: sealed ---------------------------------------------- */

static int attack_ring(void *arg)
{
	(void)arg;
	struct raw r;
	if (raw_attach(D.socket_path, &r))
		return 30;
	if (ftruncate(r.ring_fd, 0) == 0)
		return 31; /* shrunk: the daemon's next access SIGBUSes */
	if (ftruncate(r.ring_fd, (off_t)r.region_size * 2) == 0)
		return 32; /* grown */
	if (fallocate(r.ring_fd, 0, 0, (off_t)r.region_size * 2) == 0)
		return 33; /* grown by fallocate */
	if (fcntl(r.ring_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0)
		return 34; /* the seals are sealed */
	if (raw_nop(&r, 42))
		return 35; /* the daemon no longer serves the session */
	struct rc_cqe *cqe = (struct rc_cqe *)(r.region + r.hdr->cq_off);
	if (cqe->user_data != 42 || cqe->res != 0)
		return 36;
	return 0;
}

Test(shm, ring_region_cannot_be_resized, .fini = kill_daemon)
{
	start_daemon();
	run_attack(attack_ring, NULL, "ring memfd");
	assert_survived();
}

/* ---- CQ eventfd: a counter at its limit ------------------------------- */

static int attack_cq_eventfd(void *arg)
{
	(void)arg;
	struct raw r;
	if (raw_attach(D.socket_path, &r))
		return 40;
	uint64_t max = 0xfffffffffffffffeull;
	if (write(r.cq_efd, &max, sizeof(max)) != sizeof(max))
		return 41;
	/* Every completion now rings the full doorbell. */
	for (int i = 0; i < 4; i++) {
		atomic_fetch_or(&r.hdr->cq_flags, RC_CQ_NEED_WAKEUP);
		if (raw_nop(&r, (uint64_t)i))
			return 42; /* the daemon stopped completing */
	}
	return 0;
}

Test(shm, full_cq_eventfd_does_not_block_the_daemon, .fini = kill_daemon)
{
	start_daemon();
	run_attack(attack_cq_eventfd, NULL, "CQ eventfd");
	assert_survived();
}

/* ---- REGISTER_BUF against a buffer shrinking under it ------------------ */

struct shrinker {
	int fd;
	off_t size;
	atomic_bool stop;
};

/* Ends small if the seal lands right after a shrink: the size the daemon
 * checked before sealing would then be a lie. */
static void *shrink_loop(void *arg)
{
	struct shrinker *sk = arg;
	while (!atomic_load(&sk->stop)) {
		if (ftruncate(sk->fd, sk->size) < 0)
			break;
		if (ftruncate(sk->fd, 0) < 0)
			continue; /* sealed at full size: the attack lost */
		if (fcntl(sk->fd, F_GET_SEALS) & F_SEAL_SHRINK)
			break;
	}
	return NULL;
}

static int attack_register_race(void *arg)
{
	(void)arg;
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	if (rc_attach(&c, D.socket_path, &o))
		return 50;
	size_t i = (size_t)ds_index(&S, "edge/block");
	uint64_t size = ds_size(&S, i);
	char key[DS_KEY_MAX];
	int h = rc_open(&c, rc_dataset(&c, "ds"), ds_key(&S, i, key), NULL);
	if (h < 0)
		return 51;
	unsigned won = 0, refused = 0;
	for (int round = 0; round < 200; round++) {
		struct shrinker sk = {.size = (off_t)size};
		sk.fd = memfd_create("race", MFD_ALLOW_SEALING | MFD_CLOEXEC);
		if (sk.fd < 0 || ftruncate(sk.fd, sk.size) < 0)
			return 52;
		pthread_t t;
		if (pthread_create(&t, NULL, shrink_loop, &sk))
			return 53;
		int bi = rc_register_buffer(&c, sk.fd, size);
		atomic_store(&sk.stop, true);
		pthread_join(t, NULL);
		if (bi == -EINVAL) {
			refused++; /* it saw the shrunk size after sealing */
			close(sk.fd);
			continue;
		}
		if (bi < 0)
			return 54;
		won++;
		struct stat st;
		if (fstat(sk.fd, &st) < 0 || (uint64_t)st.st_size < size)
			return 55; /* registered, then shrunk under the daemon */
		if (rc_read_into(&c, (uint32_t)h, 0, size, (uint32_t)bi, 0) !=
		    (ssize_t)size)
			return 56;
		void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, sk.fd, 0);
		if (p == MAP_FAILED || fx_ds_mismatch(&S, i, 0, p, size) >= 0)
			return 57;
		munmap(p, size);
		if (rc_unregister_buffer(&c, (uint32_t)bi))
			return 58;
		close(sk.fd);
	}
	fprintf(stderr, "register race: %u registered, %u refused as shrunk\n",
		won, refused);
	rc_detach(&c);
	return won ? 0 : 59; /* 59: never registered, nothing was read */
}

Test(shm, register_buf_shrink_race, .fini = kill_daemon)
{
#ifdef __SANITIZE_THREAD__
	/* The attack starts a thread in a child forked from this threaded
	 * process, which TSan cannot follow ("dup thread with used id"); the
	 * plain and ASan builds run it. */
	cr_skip_test("ThreadSanitizer cannot follow threads started after fork");
#endif
	start_daemon();
	run_attack(attack_register_race, NULL, "REGISTER_BUF shrink race");
	assert_survived();
}

/* ---- REGISTER_BUF of a sparse 2 GiB memfd ------------------------------ */

static long vm_rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int attack_sparse_buffer(void *arg)
{
	(void)arg;
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	if (rc_attach(&c, D.socket_path, &o))
		return 60;
	long before = vm_rss_kib(D.pid);
	if (before < 0)
		return 61;
	uint64_t size = 2 * GiB;
	int fd = memfd_create("sparse", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		return 62;
	int bi = rc_register_buffer(&c, fd, size);
	if (bi < 0) {
		fprintf(stderr, "register 2 GiB: %s\n", rc_strerror(bi));
		return 63;
	}
	long after = vm_rss_kib(D.pid);
	/* The buffer still works where it is used: its far end. */
	size_t i = (size_t)ds_index(&S, "edge/block");
	uint64_t len = ds_size(&S, i), at = size - len;
	char key[DS_KEY_MAX];
	int h = rc_open(&c, rc_dataset(&c, "ds"), ds_key(&S, i, key), NULL);
	if (h < 0 || rc_read_into(&c, (uint32_t)h, 0, len, (uint32_t)bi, at) !=
			     (ssize_t)len)
		return 64;
	long after_read = vm_rss_kib(D.pid);
	uint8_t *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED || fx_ds_mismatch(&S, i, 0, p + at, len) >= 0)
		return 65;
	fprintf(stderr, "daemon VmRSS: %ld KiB before, %ld after registering "
		"a sparse 2 GiB memfd, %ld after a 1 MiB READ_INTO at its end\n",
		before, after, after_read);
	if (after - before > 64 * 1024)
		return 66; /* the registration populated the buffer */
	if (rc_unregister_buffer(&c, (uint32_t)bi))
		return 67;
	rc_detach(&c);
	return 0;
}

Test(shm, sparse_registered_buffer_costs_no_memory, .fini = kill_daemon)
{
	start_daemon();
	run_attack(attack_sparse_buffer, NULL, "sparse 2 GiB REGISTER_BUF");
	assert_survived();
}

/* ---- REGISTER_BUF of what cannot be sealed ----------------------------- */

static int attack_unsealable(void *arg)
{
	const char *dir = arg;
	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	if (rc_attach(&c, D.socket_path, &o))
		return 70;
	char path[300];
	snprintf(path, sizeof(path), "%s/not-a-memfd", dir);
	int file = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (file < 0 || ftruncate(file, MiB) < 0)
		return 71;
	if (rc_register_buffer(&c, file, MiB) != -EPERM)
		return 72; /* a file on a filesystem */
	int nosealing = memfd_create("nosealing", MFD_CLOEXEC);
	if (nosealing < 0 || ftruncate(nosealing, MiB) < 0)
		return 73;
	if (rc_register_buffer(&c, nosealing, MiB) != -EPERM)
		return 74; /* a memfd made without MFD_ALLOW_SEALING */
	int small = memfd_create("small", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (small < 0 || ftruncate(small, MiB) < 0)
		return 75;
	if (rc_register_buffer(&c, small, 2 * MiB) != -EINVAL)
		return 76; /* larger than the memfd */
	int pipefd[2];
	if (pipe(pipefd) < 0 || rc_register_buffer(&c, pipefd[1], MiB) != -EPERM)
		return 77; /* not even a file */
	int fresh = memfd_create("fresh", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (fresh < 0 || ftruncate(fresh, MiB) < 0)
		return 78;
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fresh);
	int ro = open(self, O_RDONLY | O_CLOEXEC);
	if (ro < 0 || rc_register_buffer(&c, ro, MiB) != -EPERM)
		return 79; /* sent read-only: the daemon cannot seal it */
	if (fcntl(fresh, F_ADD_SEALS, F_SEAL_SHRINK) < 0 ||
	    rc_register_buffer(&c, ro, MiB) != -EPERM)
		return 80; /* sealed already, but still read-only */
	if (fcntl(fresh, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0 ||
	    rc_register_buffer(&c, fresh, MiB) != -EPERM)
		return 81; /* sealed against writes: no writable mapping */
	/* hugetlb: its owner could punch a page and take the pool, and the
	 * daemon's next copy there would SIGBUS. Refused before mapping, so
	 * this holds with no huge pages configured too. */
	int huge = memfd_create("huge", MFD_HUGETLB | MFD_ALLOW_SEALING |
					MFD_CLOEXEC);
	if (huge >= 0 && (ftruncate(huge, 2 * MiB) < 0 ||
			  rc_register_buffer(&c, huge, 2 * MiB) != -EPERM))
		return 82;
	rc_detach(&c);
	return 0;
}

Test(shm, unsealable_buffers_are_refused, .fini = kill_daemon)
{
	start_daemon();
	const char *dir = fx_tmpdir();
	chmod(dir, 0777); /* the attacker's file lives here */
	run_attack(attack_unsealable, (void *)dir, "unsealable REGISTER_BUF");
	assert_survived();
}

/* ---- random bytes over the whole ring region -------------------------- */

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int attack_scribble(void *arg)
{
	(void)arg;
	struct raw r;
	if (raw_attach(D.socket_path, &r))
		return 90;
	uint32_t sq_entries = r.hdr->sq_entries; /* before it is scribbled */
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	uint64_t *w = (uint64_t *)r.region;
	for (int round = 0; round < 400; round++) {
		/* Header (sizes, offsets, indices, flags), SQEs, CQEs and arg
		 * slots; every other round the tail says a full ring. */
		for (size_t k = 0; k < r.region_size / 8; k++)
			w[k] = xorshift(&seed);
		if (round % 2 == 0)
			atomic_store(&r.hdr->sq_tail,
				     (uint32_t)xorshift(&seed) + sq_entries);
		raw_ring(&r);
		if (round % 16 == 0)
			usleep(2000);
	}
	return 0;
}

Test(shm, random_bytes_over_the_ring_region, .fini = kill_daemon)
{
	start_daemon();
	run_attack(attack_scribble, NULL, "ring region scribbler");
	assert_daemon_alive();
	cr_assert_gt(fx_stat_value(D.socket_path, "ringcache_bad_entries_total"),
		     0, "the daemon never took the scribbled entries");
	assert_survived();
}
