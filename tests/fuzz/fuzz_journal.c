/* fuzz_journal.c - journal replay (journal.c): a journal file built from
 * the input is opened (replayed), every replayed object read back, and the
 * journal closed.
 *
 * The input describes the records rather than being the file, so the
 * fuzzer gets past the CRCs: byte 0 is the header's base epoch, byte 1 its
 * epoch, then records of
 *   type u8, flags u8 (0x80: spoil the payload CRC), epoch u8, object id
 *   u8, arg u32 (little-endian, DATA: offset, COMMIT: size), len u16,
 *   payload (len bytes, or what is left)
 * laid out where the journal writes them (8-byte aligned, never in the
 * last 40 bytes of a 4 KiB block). A type byte 0xff ends the records and
 * the rest of the input is copied raw after them: torn and foreign data. */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "fuzz.h"
#include "journal.h"
#include "log.h"

#define BLOCK 4096u
#define REC_HDR 40u
#define FILE_MAX (256u * 1024u)
#define READ_MAX (1u << 20)

/* journal.c's on-disk structs (see its header comment). */
struct file_hdr {
	uint64_t magic;
	uint32_t version, base_epoch, epoch, hdr_crc;
};
struct rec_hdr {
	uint32_t magic;
	uint16_t type, flags;
	uint32_t len, epoch;
	uint64_t obj_id, arg;
	uint32_t data_crc, hdr_crc;
};

static char dir[] = "/dev/shm/rc-fuzz-journal.XXXXXX";
static char path[256];
static struct io_uring ring;
static uint8_t *file;
static uint8_t *readbuf;

static void remove_files(void)
{
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	rc_log_level = -1;
	if (!mkdtemp(dir) || io_uring_queue_init(64, &ring, 0) < 0)
		abort();
	atexit(remove_files);
	snprintf(path, sizeof(path), "%s/journal", dir);
	file = calloc(1, FILE_MAX);
	readbuf = malloc(READ_MAX);
	if (!file || !readbuf)
		abort();
	return 0;
}

static uint64_t rec_start(uint64_t pos)
{
	uint64_t room = BLOCK - pos % BLOCK;
	return room < REC_HDR ? pos + room : pos;
}

/* Lays the input out as a journal file; returns its length. */
static size_t build(const uint8_t *d, size_t n)
{
	memset(file, 0, FILE_MAX);
	struct file_hdr fh = {0x4c4e524a43522852ull, 1, d[0], d[1], 0};
	fh.hdr_crc = crc32c(0, &fh, offsetof(struct file_hdr, hdr_crc));
	memcpy(file, &fh, sizeof(fh));
	size_t i = 2, pos = BLOCK;
	while (i + 10 <= n && d[i] != 0xff) {
		struct rec_hdr h = {.magic = 0x314a4352u, .type = d[i],
				    .flags = d[i + 1] & 0x7f,
				    .epoch = d[i + 2], .obj_id = d[i + 3]};
		uint32_t arg;
		uint16_t len;
		memcpy(&arg, d + i + 4, 4);
		memcpy(&len, d + i + 8, 2);
		bool spoil = d[i + 1] & 0x80;
		i += 10;
		h.arg = arg;
		h.len = len <= n - i ? len : (uint32_t)(n - i);
		if (pos + REC_HDR + h.len > FILE_MAX)
			break;
		memcpy(file + pos + REC_HDR, d + i, h.len);
		h.data_crc = crc32c(0, d + i, h.len) ^ (spoil ? 1u : 0u);
		h.hdr_crc = crc32c(0, &h, offsetof(struct rec_hdr, hdr_crc));
		memcpy(file + pos, &h, sizeof(h));
		i += h.len;
		pos = rec_start((pos + REC_HDR + h.len + 7) & ~(size_t)7);
	}
	if (i < n && d[i] == 0xff) {
		size_t raw = n - i - 1;
		if (raw > FILE_MAX - pos)
			raw = FILE_MAX - pos;
		memcpy(file + pos, d + i + 1, raw);
		pos += raw;
	}
	return pos;
}

static void read_back(struct journal *j, const struct journal_object *o)
{
	FUZZ_CHECK(o->dataset && o->key);
	uint64_t len = o->size < READ_MAX ? o->size : READ_MAX;
	int r = journal_read(j, o, 0, readbuf, (size_t)len);
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EIO);
	if (o->size > 1) {
		r = journal_read(j, o, o->size / 2, readbuf, 1);
		FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EIO);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t len = build(data, size);
	unlink(path);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		abort();
	/* Whole: no zero-fill of a short file on open. */
	if (write(fd, file, len) != (ssize_t)len || ftruncate(fd, FILE_MAX))
		abort();
	close(fd);
	struct journal_config cfg = {path, FILE_MAX};
	char err[512];
	struct journal *j = journal_open(&cfg, &ring, err, sizeof(err));
	if (!j)
		return 0;
	for (size_t k = 0; k < journal_n_replayed(j); k++)
		read_back(j, journal_replayed(j, k));
	for (size_t k = 0; k < journal_n_discarded(j); k++)
		FUZZ_CHECK(journal_discarded(j, k)->dataset);
	journal_close(j);
	return 0;
}
