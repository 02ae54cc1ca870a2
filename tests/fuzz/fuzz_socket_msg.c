/* fuzz_socket_msg.c - the daemon's socket protocol (session_socket.c's
 * read_message and the handlers behind it) on a live in-process daemon:
 * each input is one client connection sending up to 16 SEQPACKET
 * messages, each with an optional fd.
 *
 * Input: chunks of [ctl u8][len u16 little-endian][len bytes].
 *   ctl & 3: the fd passed along: none, a 1 MiB memfd, a 4 KiB memfd
 *            sealed against shrinking, the read end of a pipe
 *   ctl & 4: raw: the bytes go as they are; otherwise a valid header is
 *            written over them (magic, version, type ctl >> 4, length)
 * A message with a valid header is always answered, with a reply of its
 * type; only a foreign header makes the daemon hang up. Once the client
 * has gone, every fd the daemon received or made for it is closed. */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "fuzz_daemon.h"

#define MAX_MSGS 16
#define MAX_LEN 8192

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_daemon();
	return 0;
}

static int make_fd(unsigned kind)
{
	int fd = -1, p[2];
	switch (kind) {
	case 1:
	case 2:
		fd = memfd_create("rc-fuzz-buf", MFD_CLOEXEC |
				  (kind == 2 ? MFD_ALLOW_SEALING : 0));
		if (fd >= 0 && ftruncate(fd, kind == 1 ? 1 << 20 : 4096) < 0)
			abort();
		if (kind == 2 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
			abort();
		break;
	case 3:
		if (pipe2(p, O_CLOEXEC) < 0)
			abort();
		close(p[1]);
		fd = p[0];
		break;
	}
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct daemon *d = fuzz_daemon();
	static uint8_t msg[MAX_LEN];
	int client, fds_before = fuzz_open_fds();
	fuzz_session_new(d, &client);
	size_t i = 0;
	for (int m = 0; m < MAX_MSGS && i + 3 <= size; m++) {
		uint8_t ctl = data[i];
		uint16_t len;
		memcpy(&len, data + i + 1, 2);
		i += 3;
		if (len > size - i)
			len = (uint16_t)(size - i);
		if (len > MAX_LEN)
			len = MAX_LEN;
		memcpy(msg, data + i, len);
		i += len;
		bool raw = ctl & 4;
		size_t n = len;
		if (!raw) {
			if (n < sizeof(struct rc_msg_hdr)) {
				memset(msg + n, 0, sizeof(struct rc_msg_hdr) - n);
				n = sizeof(struct rc_msg_hdr);
			}
			struct rc_msg_hdr h = {RC_MSG_MAGIC, RC_ABI_VERSION,
					       ctl >> 4, (uint32_t)n, 0};
			memcpy(msg, &h, sizeof(h));
		}
		int fd = make_fd(ctl & 3);
		int r = fuzz_send(client, msg, n, fd);
		if (fd >= 0)
			close(fd);
		if (r < 0)
			break;
		struct rc_msg_hdr reply;
		long got = fuzz_reply(d, client, &reply, sizeof(reply));
		if (got == 0)
			break; /* hung up */
		FUZZ_CHECK(got >= (long)sizeof(reply));
		FUZZ_CHECK(reply.magic == RC_MSG_MAGIC);
		FUZZ_CHECK(reply.status <= 0 && reply.status > -4096);
		if (!raw)
			FUZZ_CHECK(reply.type == ((ctl >> 4) | RC_MSG_REPLY));
	}
	if (fuzz_session_end(d, client))
		FUZZ_CHECK(fuzz_open_fds() == fds_before);
	return 0;
}
