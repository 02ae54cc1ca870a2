/* fuzz_daemon.c - the in-process daemon fuzz_daemon.h describes. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_daemon.h"
#include "clock.h"
#include "log.h"
#include "preflight.h"

static struct server server_;
static bool started;
static char run_dir[] = "/tmp/rc-fuzz-daemon.XXXXXX";

/* The daemon lives as long as the process; its files go with it. */
static void remove_files(void)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/sock", run_dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/ringcache.conf", run_dir);
	unlink(path);
	rmdir(run_dir);
}

static void write_config(const char *dir, char *path, size_t len)
{
	snprintf(path, len, "%s/ringcache.conf", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		abort();
	fprintf(f,
		"[daemon]\n"
		"socket = %s/sock\n"
		"memory = 64M\n"
		"block_size = 64K\n"
		"log_level = error\n"
		"hugepages = false\n"
		"metadata_ttl = 0\n"
		"shards = 1\n"
		"max_sessions = 4\n"
		"staging_memory = 16M\n"
		"[s3]\n"
		"endpoint = http://127.0.0.1:1\n"
		"region = us-east-1\n"
		"addressing = path\n"
		"tls_verify = false\n"
		"credentials = anonymous\n"
		"max_retries = 0\n"
		"connect_timeout_ms = 100\n"
		"request_timeout_ms = 500\n"
		"[dataset ro]\n"
		"uri = s3://bucket/ro/\n"
		"allow_uids = *\n"
		"[dataset rw]\n"
		"uri = s3://bucket/rw/\n"
		"allow_uids = *\n"
		"writable = true\n"
		"write_uids = *\n"
		"durability = memory\n"
		"part_size = 5M\n"
		"max_object_size = 64M\n"
		"[dataset deny]\n"
		"uri = s3://bucket/deny/\n"
		"allow_uids = 4242\n",
		dir);
	if (fclose(f))
		abort();
}

struct daemon *fuzz_daemon(void)
{
	if (started)
		return &server_.d;
	char path[128], err[512];
	if (!mkdtemp(run_dir))
		abort();
	atexit(remove_files);
	write_config(run_dir, path, sizeof(path));
	if (daemon_init(&server_, path, err, sizeof(err)) < 0) {
		fprintf(stderr, "fuzz: daemon_init: %s\n", err);
		abort();
	}
	/* The start-up bucket check runs on a thread of its own with its
	 * own sockets: done before the first input, or the targets' open-fd
	 * counts would catch its connection instead of a leak. */
	preflight_join(server_.preflight);
	server_.preflight = NULL;
	/* So does the abandoned-upload sweep (writeback.c), on a worker. */
	struct shard *sh = &server_.d.shards[0];
	uint64_t until = rc_now_ns() + 30000000000ull;
	while (!rc_list_empty(&sh->wb_cleanups) && rc_now_ns() < until)
		shard_poll_once(sh);
	if (!rc_list_empty(&sh->wb_cleanups)) {
		fprintf(stderr, "fuzz: the start-up sweep did not end in 30 s\n");
		abort();
	}
	rc_log_level = -1; /* refusals are what the fuzzer asks for */
	started = true;
	return &server_.d;
}

struct session *fuzz_session_new(struct daemon *d, int *client)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	session_accept(d, sv[1]);
	*client = sv[0];
	struct rc_list *first = rc_list_first(&d->shards[0].sessions);
	return first ? session_of(first) : NULL;
}

int fuzz_send(int client, const void *msg, size_t len, int fd)
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
	return sendmsg(client, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -errno
								     : 0;
}

static long receive(int client, void *reply, size_t cap)
{
	static uint8_t buf[65536];
	char ctl[CMSG_SPACE(sizeof(int) * (RC_MAX_DATASETS + 3))];
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl, .msg_controllen = sizeof(ctl)};
	ssize_t n = recvmsg(client, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EAGAIN ? -1 : 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int nf = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < nf; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			close(fd);
		}
	}
	if (reply)
		memcpy(reply, buf, (size_t)n < cap ? (size_t)n : cap);
	return (long)n;
}

long fuzz_reply(struct daemon *d, int client, void *reply, size_t cap)
{
	for (int i = 0; i < 8; i++) {
		struct pollfd p = {client, POLLIN, 0};
		if (poll(&p, 1, 0) > 0)
			return receive(client, reply, cap);
		if (rc_list_empty(&d->shards[0].sessions))
			return 0;
		shard_poll_once(&d->shards[0]);
	}
	return -1;
}

void fuzz_turn(struct daemon *d, unsigned n)
{
	struct shard *sh = &d->shards[0];
	for (unsigned i = 0; i < n; i++) {
		/* Only with completions ready: the loop itself would sleep. */
		io_uring_submit(reactor_ring(sh->reactor));
		if (reactor_cq_ready(sh->reactor))
			shard_poll_once(sh);
	}
}

bool fuzz_session_end(struct daemon *d, int client)
{
	struct shard *sh = &d->shards[0];
	uint64_t until = rc_now_ns() + 2000000000ull;
	close(client);
	while ((!rc_list_empty(&sh->sessions) || sh->n_zombies ||
		sh->fetches) && rc_now_ns() < until)
		shard_poll_once(sh);
	return rc_list_empty(&sh->sessions) && !sh->n_zombies && !sh->fetches;
}

int fuzz_open_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	int n = 0;
	if (!dir)
		abort();
	while (readdir(dir))
		n++;
	closedir(dir);
	return n;
}
