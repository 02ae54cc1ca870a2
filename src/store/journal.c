/* journal.c - owns the write-back journal (see journal.h for the contract
 * and the on-disk format): the journal file and its header, the table of
 * live objects, record encoding into aligned write buffers, the writes and
 * fdatasyncs queued on the caller's io_uring, flush waiters, replay, and
 * the rewind that reclaims space once every object is finished. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "hugemem.h"
#include "journal.h"
#include "list.h"
#include "log.h"
#include "privfile.h"
#include "uring.h"
#include "vec.h"

#define J_MAGIC 0x314a4352u          /* "RCJ1" */
#define J_HDR_MAGIC 0x4c4e524a43522852ull /* "R(RCJRNL" */
#define J_VERSION 1u
#define J_BLOCK 4096u
#define J_FILE_HDR J_BLOCK           /* records start here */
#define J_BUF (1024u * 1024u)        /* one write buffer */
#define J_MAX_PENDING (64ull * J_BUF) /* bytes written and not completed */
/* Write buffers come from one huge-page pool (page faults are costly, see
 * hugemem.h); past it, from the heap. */
#define J_POOL_BUFS ((unsigned)(J_MAX_PENDING / J_BUF) + 2u)
/* Kept back per live object for its COMMIT and DONE (worst_case of each). */
#define J_CTL_RESERVE (2u * (J_BLOCK + 2u * 40u + 8u + JOURNAL_MAX_NAME))
#define J_MIN_CHUNK (64u * 1024u)    /* smaller DATA room: next buffer */

enum rec_type {
	REC_PAD = 1,
	REC_OPEN,
	REC_DATA,
	REC_COMMIT,
	REC_DONE,
	REC_ABORT,
	REC_RENAME,
};
#define REC_F_MD5 1u
#define REC_F_TOKEN 2u /* after the MD5 when both are there */
#define REC_F_UID 4u   /* after the token (and MD5): u32, as OPEN's u16s */

/* On disk, little-endian; hdr_crc covers the bytes before it, data_crc the
 * payload, so together they check the whole record. */
struct rec_hdr {
	uint32_t magic;
	uint16_t type;
	uint16_t flags;
	uint32_t len;
	uint32_t epoch;
	uint64_t obj_id;
	uint64_t arg; /* DATA: object offset; COMMIT: size */
	uint32_t data_crc;
	uint32_t hdr_crc;
};
#define J_REC_HDR ((uint32_t)sizeof(struct rec_hdr))
_Static_assert(sizeof(struct rec_hdr) == 40, "rec_hdr is 40 bytes on disk");

/* The file's first block. Records with an epoch below base_epoch are left
 * over from before the last rewind; epoch is the newest ever handed out. */
struct file_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t base_epoch;
	uint32_t epoch;
	uint32_t hdr_crc;
};

enum obj_state { OBJ_OPEN = 1, OBJ_COMMITTED };

struct jobj {
	struct journal_object o;
	uint32_t cap_extents;
	uint8_t state;
	bool dropped; /* a rewind made its DATA stale: log them again */
};

enum jio_op { JIO_WRITE = 1, JIO_FSYNC };

/* Every SQE's user_data: the handler (journal_on_cqe) and the journal. */
struct jio {
	struct rc_ev ev;
	struct journal *j;
	uint8_t op;
};
static void journal_on_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe);

/* One write buffer: whole records, written as whole 4 KiB blocks. */
struct jbuf {
	struct jio io;
	bool written;
	bool pooled;        /* mem lies in the journal's pool */
	uint8_t *mem;       /* J_BUF bytes, 4 KiB aligned */
	uint64_t file_off;  /* where mem[0] goes, 4 KiB aligned */
	uint32_t used;
	uint32_t n_new;     /* records appended since it was started */
	uint64_t lsn_end;   /* records appended when it was sealed */
	struct rc_list link; /* on issued (in issue order) or free_bufs */
};

struct waiter {
	uint64_t lsn;
	journal_done_fn done;
	void *ctx;
	struct rc_list link; /* on waiters or room_waiters, FIFO */
};

struct journal {
	struct io_uring *ring;
	char *path;
	int fd, rfd; /* rfd: buffered, for replay and journal_read */
	bool direct;
	int failed;  /* -errno once a write or sync failed */
	uint64_t limit;
	uint32_t base_epoch, epoch;
	struct jobj *objs;
	size_t n_objs;
	uint32_t cap_objs;
	struct jbuf *cur;
	struct rc_list issued, free_bufs;
	uint8_t *pool;          /* pool_bufs buffers, carved in order */
	unsigned pool_bufs, pool_carved;
	unsigned writes_inflight;
	uint64_t pending_bytes;
	struct jio fsync_io;
	bool fsync_inflight;
	uint64_t fsync_lsn;
	uint64_t lsn, written_lsn, synced_lsn;
	struct rc_list waiters;      /* journal_flush, by lsn */
	struct rc_list room_waiters; /* journal_wait_room */
	struct journal_object *replayed, *discarded;
	size_t n_replayed, n_discarded;
	struct journal_stats st;
};

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* A record may not start where its header would cross a block end. */
static uint64_t rec_start(uint64_t pos)
{
	uint64_t room = J_BLOCK - pos % J_BLOCK;
	return room < J_REC_HDR ? pos + room : pos;
}

/* ---- the object table (few live objects: a linear scan) ---- */

static struct jobj *obj_find(struct journal *j, uint64_t id)
{
	for (size_t i = 0; i < j->n_objs; i++)
		if (j->objs[i].o.id == id)
			return &j->objs[i];
	return NULL;
}

static void object_free(struct journal_object *o)
{
	free(o->dataset);
	free(o->key);
	free(o->extents);
	for (size_t i = 0; i < o->n_old_keys; i++)
		free(o->old_keys[i]);
	free(o->old_keys);
}

/* Replay keeps every key an object had: the daemon cleans up what an
 * upload under an older one may have left in S3. */
static int push_old_key(struct journal_object *o, char *key)
{
	if (RC_GROW(o->old_keys, o->cap_old_keys, o->n_old_keys + 1))
		return -ENOMEM;
	o->old_keys[o->n_old_keys++] = key;
	return 0;
}

static int copy_old_keys(struct journal_object *dst,
			 const struct journal_object *src)
{
	dst->old_keys = NULL; /* dst is a copy of src: none of its own yet */
	dst->n_old_keys = 0;
	dst->cap_old_keys = 0;
	for (size_t i = 0; i < src->n_old_keys; i++) {
		char *k = strdup(src->old_keys[i]);
		if (!k || push_old_key(dst, k) < 0) {
			free(k);
			return -ENOMEM;
		}
	}
	return 0;
}

static struct jobj *obj_add(struct journal *j, uint64_t id,
			    const char *dataset, size_t dlen, const char *key,
			    size_t klen)
{
	if (RC_GROW(j->objs, j->cap_objs, j->n_objs + 1))
		return NULL;
	struct jobj *ob = &j->objs[j->n_objs];
	*ob = (struct jobj){.o.id = id, .state = OBJ_OPEN};
	ob->o.dataset = strndup(dataset, dlen);
	ob->o.key = strndup(key, klen);
	if (!ob->o.dataset || !ob->o.key) {
		object_free(&ob->o);
		return NULL;
	}
	j->n_objs++;
	return ob;
}

static void obj_remove(struct journal *j, struct jobj *ob)
{
	object_free(&ob->o);
	*ob = j->objs[--j->n_objs];
}

static int obj_add_extent(struct jobj *ob, const struct journal_extent *e)
{
	if (RC_GROW(ob->o.extents, ob->cap_extents, ob->o.n_extents + 1))
		return -ENOMEM;
	ob->o.extents[ob->o.n_extents++] = *e;
	return 0;
}

/* ---- the file header ---- */

/* The header block as it stands into blk (J_BLOCK bytes). */
static void hdr_fill(const struct journal *j, uint8_t *blk)
{
	memset(blk, 0, J_BLOCK);
	struct file_hdr h = {.magic = J_HDR_MAGIC, .version = J_VERSION,
			     .base_epoch = j->base_epoch, .epoch = j->epoch};
	h.hdr_crc = crc32c(0, &h, offsetof(struct file_hdr, hdr_crc));
	memcpy(blk, &h, sizeof(h));
}

/* Blocking: at open only (a rewind queues it on the ring: hdr_queue). */
static int hdr_write(struct journal *j)
{
	uint8_t *blk = aligned_alloc(J_BLOCK, J_BLOCK);
	if (!blk)
		return -ENOMEM;
	hdr_fill(j, blk);
	int r = 0;
	errno = 0;
	if (pwrite(j->fd, blk, J_BLOCK, 0) != J_BLOCK || fdatasync(j->fd) < 0)
		r = errno ? -errno : -EIO;
	free(blk);
	return r;
}

/* 0: a valid header was read; 1: no header yet (empty or zeroed file). */
static int hdr_read(struct journal *j, char *err, size_t errlen)
{
	uint8_t blk[sizeof(struct file_hdr)];
	ssize_t n = pread(j->rfd, blk, sizeof(blk), 0);
	if (n < 0) {
		rc_set_err(err, errlen, "journal: reading %s: %s", j->path,
			strerror(errno));
		return -1;
	}
	static const uint8_t zero[sizeof(struct file_hdr)];
	if (n < (ssize_t)sizeof(blk) || !memcmp(blk, zero, sizeof(blk)))
		return 1;
	struct file_hdr h;
	memcpy(&h, blk, sizeof(h));
	if (h.magic != J_HDR_MAGIC || h.version != J_VERSION ||
	    h.hdr_crc != crc32c(0, &h, offsetof(struct file_hdr, hdr_crc))) {
		rc_set_err(err, errlen, "journal: %s is not a ringcache journal "
			"(or its header is damaged): refusing to overwrite it",
			j->path);
		return -1;
	}
	j->base_epoch = h.base_epoch;
	j->epoch = h.epoch;
	return 0;
}

/* ---- replay ---- */

struct reader {
	int fd;
	uint64_t file_end;
	uint8_t *win;
	uint64_t win_off;
	size_t win_len;
};
#define J_WIN (4u * J_BUF)

/* Makes [off, off+n) readable at r->win + (off - r->win_off). */
static const uint8_t *reader_get(struct reader *r, uint64_t off, size_t n)
{
	if (off >= r->win_off && off + n <= r->win_off + r->win_len)
		return r->win + (off - r->win_off);
	ssize_t got = pread(r->fd, r->win, J_WIN, (off_t)off);
	if (got < (ssize_t)n)
		return NULL;
	r->win_off = off;
	r->win_len = (size_t)got;
	return r->win;
}

/* The next valid record at pos, or NULL: the log ends there. */
static const uint8_t *next_record(struct reader *r, uint64_t pos,
				  uint32_t min_epoch, uint32_t max_epoch,
				  struct rec_hdr *h)
{
	if (pos + J_REC_HDR > r->file_end)
		return NULL;
	const uint8_t *p = reader_get(r, pos, J_REC_HDR);
	if (!p)
		return NULL;
	memcpy(h, p, sizeof(*h));
	if (h->magic != J_MAGIC ||
	    h->hdr_crc != crc32c(0, h, offsetof(struct rec_hdr, hdr_crc)) ||
	    h->len > J_BUF - J_REC_HDR || pos + J_REC_HDR + h->len > r->file_end ||
	    h->epoch < min_epoch || h->epoch > max_epoch)
		return NULL;
	p = reader_get(r, pos, J_REC_HDR + h->len);
	if (!p || crc32c(0, p + J_REC_HDR, h->len) != h->data_crc)
		return NULL;
	return p + J_REC_HDR;
}

static void replay_open(struct journal *j, const struct rec_hdr *h,
			const uint8_t *pl)
{
	uint16_t dlen, klen;
	if (h->len < 4)
		return;
	memcpy(&dlen, pl, 2);
	memcpy(&klen, pl + 2, 2);
	if (4u + dlen + klen > h->len || obj_find(j, h->obj_id)) {
		log_warn("journal: %s: ignoring a bad OPEN of object %llu",
			 j->path, (unsigned long long)h->obj_id);
		return;
	}
	if (!obj_add(j, h->obj_id, (const char *)pl + 4, dlen,
		     (const char *)pl + 4 + dlen, klen))
		log_error("journal: out of memory replaying %s", j->path);
}

/* ob was just committed, or renamed once committed: any other committed
 * object of its dataset and key holds older bytes for that key. */
static void supersede_older(struct journal *j, const struct jobj *ob)
{
	for (size_t i = 0; i < j->n_objs; i++) {
		struct jobj *o = &j->objs[i];
		if (o != ob && o->state == OBJ_COMMITTED &&
		    strcmp(o->o.key, ob->o.key) == 0 &&
		    strcmp(o->o.dataset, ob->o.dataset) == 0)
			o->o.superseded = true;
	}
}

/* Applies one record to the object table. Records that do not fit the
 * object's state (never written by this code) are skipped, with a warning. */
static void replay_apply(struct journal *j, const struct rec_hdr *h,
			 const uint8_t *pl, uint64_t file_off)
{
	if (h->type == REC_PAD)
		return;
	if (h->type == REC_OPEN) {
		replay_open(j, h, pl);
		return;
	}
	struct jobj *ob = obj_find(j, h->obj_id);
	bool ok = ob != NULL;
	if (ok && h->type == REC_DATA && ob->state == OBJ_OPEN) {
		struct journal_extent e = {file_off, h->arg, h->len,
					   h->data_crc};
		ok = obj_add_extent(ob, &e) == 0;
	} else if (ok && h->type == REC_COMMIT && ob->state == OBJ_OPEN) {
		ob->state = OBJ_COMMITTED;
		ob->o.size = h->arg;
		ob->o.has_md5 = (h->flags & REC_F_MD5) && h->len >= 16;
		if (ob->o.has_md5)
			memcpy(ob->o.md5, pl, 16);
		uint32_t at = ob->o.has_md5 ? 16 : 0;
		ob->o.has_token = (h->flags & REC_F_TOKEN) && h->len >= at + 16;
		if (ob->o.has_token)
			memcpy(ob->o.token, pl + at, 16);
		at += ob->o.has_token ? 16 : 0;
		ob->o.has_uid = (h->flags & REC_F_UID) && h->len >= at + 4;
		if (ob->o.has_uid)
			memcpy(&ob->o.uid, pl + at, 4);
		supersede_older(j, ob);
	} else if (ok && h->type == REC_RENAME) {
		char *k = strndup((const char *)pl, h->len);
		ok = k != NULL && push_old_key(&ob->o, ob->o.key) == 0;
		if (ok)
			ob->o.key = k;
		else
			free(k);
		if (ok && ob->state == OBJ_COMMITTED)
			supersede_older(j, ob);
	} else if (ok && (h->type == REC_DONE || h->type == REC_ABORT)) {
		obj_remove(j, ob);
	} else {
		ok = false;
	}
	if (!ok)
		log_warn("journal: %s: ignoring record type %u of object %llu",
			 j->path, h->type, (unsigned long long)h->obj_id);
}

/* Reads the log from the first record; returns the tail offset. */
static int64_t replay(struct journal *j, char *err, size_t errlen)
{
	struct stat sb;
	if (fstat(j->rfd, &sb) < 0) {
		rc_set_err(err, errlen, "journal: stat %s: %s", j->path,
			strerror(errno));
		return -1;
	}
	struct reader r = {.fd = j->rfd, .file_end = (uint64_t)sb.st_size,
			   .win = malloc(J_WIN)};
	if (!r.win) {
		rc_set_err(err, errlen, "journal: out of memory");
		return -1;
	}
	uint64_t pos = rec_start(J_FILE_HDR);
	uint32_t last_epoch = j->base_epoch;
	struct rec_hdr h;
	const uint8_t *pl;
	while ((pl = next_record(&r, pos, last_epoch, j->epoch, &h))) {
		last_epoch = h.epoch;
		replay_apply(j, &h, pl, pos + J_REC_HDR);
		j->st.records++;
		pos = rec_start(round_up(pos + J_REC_HDR + h.len, 8));
	}
	free(r.win);
	return (int64_t)pos;
}

/* Moves what replay found into the replayed and discarded lists; the
 * discarded ones leave the table. */
static int sort_replayed(struct journal *j)
{
	j->replayed = calloc(j->n_objs + 1, sizeof(*j->replayed));
	j->discarded = calloc(j->n_objs + 1, sizeof(*j->discarded));
	if (!j->replayed || !j->discarded)
		return -ENOMEM;
	for (size_t i = 0; i < j->n_objs;) {
		struct jobj *ob = &j->objs[i];
		struct journal_object c = ob->o;
		c.dataset = strdup(ob->o.dataset);
		c.key = strdup(ob->o.key);
		c.extents = malloc((ob->o.n_extents + 1) * sizeof(*c.extents));
		int keys = copy_old_keys(&c, &ob->o);
		if (!c.dataset || !c.key || !c.extents || keys < 0) {
			object_free(&c);
			return -ENOMEM;
		}
		if (ob->o.n_extents) /* extents may be NULL: an empty object */
			memcpy(c.extents, ob->o.extents,
			       ob->o.n_extents * sizeof(*c.extents));
		if (ob->state == OBJ_COMMITTED) {
			j->replayed[j->n_replayed++] = c;
			i++;
		} else {
			log_warn("journal: %s: object %llu (%s/%s) was never "
				 "committed: discarded", j->path,
				 (unsigned long long)c.id, c.dataset, rc_esc(c.key));
			j->discarded[j->n_discarded++] = c;
			obj_remove(j, ob);
		}
	}
	return 0;
}

/* ---- write buffers ---- */

/* The pool is allocated and touched when the journal opens, so the first
 * checkpoint after a start pays no page faults on its write path. */
static void pool_init(struct journal *j)
{
	/* No more than a journal this size can hold pending: touching 66
	 * MiB at each open of a small journal is most of its open time (a
	 * second an open under ThreadSanitizer). */
	uint64_t fit = j->limit / J_BUF + 2;
	j->pool_bufs = fit < J_POOL_BUFS ? (unsigned)fit : J_POOL_BUFS;
	j->pool = hugemem_alloc((size_t)j->pool_bufs * J_BUF);
	if (j->pool)
		memset(j->pool, 0, (size_t)j->pool_bufs * J_BUF);
}

/* A new buffer's memory: the next one of the pool, else the heap's. */
static uint8_t *buf_mem(struct journal *j, bool *pooled)
{
	*pooled = j->pool && j->pool_carved < j->pool_bufs;
	if (*pooled)
		return j->pool + (size_t)J_BUF * j->pool_carved++;
	return aligned_alloc(J_BLOCK, J_BUF);
}

static struct jbuf *buf_get(struct journal *j, uint64_t file_off)
{
	struct rc_list *spare = rc_list_first(&j->free_bufs);
	struct jbuf *b = spare ? rc_list_entry(spare, struct jbuf, link) : NULL;
	if (b) {
		rc_list_del(&b->link);
	} else {
		b = calloc(1, sizeof(*b));
		if (b && !(b->mem = buf_mem(j, &b->pooled))) {
			free(b);
			b = NULL;
		}
		if (!b)
			return NULL;
	}
	uint8_t *mem = b->mem;
	bool pooled = b->pooled;
	*b = (struct jbuf){.io = {{journal_on_cqe}, j, JIO_WRITE}, .mem = mem,
			   .pooled = pooled, .file_off = file_off};
	return b;
}

static void buf_put(struct journal *j, struct jbuf *b)
{
	rc_list_add(&j->free_bufs, &b->link);
}

static void buf_destroy(struct jbuf *b)
{
	if (!b->pooled)
		free(b->mem);
	free(b);
}

static void bufs_free(struct rc_list *bufs)
{
	struct rc_list *pos, *tmp;

	rc_list_for_each_safe(pos, tmp, bufs)
		buf_destroy(rc_list_entry(pos, struct jbuf, link));
	rc_list_init(bufs);
}

static uint64_t tail_off(const struct journal *j)
{
	return j->cur->file_off + j->cur->used;
}

static struct io_uring_sqe *get_sqe(struct journal *j)
{
	return uring_sqe(j->ring);
}

/* Pads cur to a block end: a PAD record where one fits, zeros otherwise
 * (replay skips a block's last J_REC_HDR - 1 bytes by the same rule). */
static void buf_pad(struct journal *j, struct jbuf *b)
{
	uint32_t end = (uint32_t)round_up(b->used, J_BLOCK);
	uint32_t room = end - b->used;
	memset(b->mem + b->used, 0, room);
	if (room >= J_REC_HDR) {
		struct rec_hdr h = {.magic = J_MAGIC, .type = REC_PAD,
				    .len = room - J_REC_HDR, .epoch = j->epoch,
				    .data_crc = crc32c(0, b->mem + b->used +
						       J_REC_HDR,
						       room - J_REC_HDR)};
		h.hdr_crc = crc32c(0, &h, offsetof(struct rec_hdr, hdr_crc));
		memcpy(b->mem + b->used, &h, sizeof(h));
	}
	b->used = end;
}

/* Writes b (whole blocks, lsn_end set) through sqe, after every buffer
 * issued before it as far as written_lsn goes. */
static void buf_issue(struct journal *j, struct jbuf *b,
		      struct io_uring_sqe *sqe)
{
	io_uring_prep_write(sqe, j->fd, b->mem, b->used, b->file_off);
	io_uring_sqe_set_data(sqe, &b->io);
	/* At once, not at the reactor's next wait: the disk writes this
	 * buffer while the reactor copies the next bytes of a WRITE. */
	io_uring_submit(j->ring);
	rc_list_add_tail(&j->issued, &b->link);
	j->writes_inflight++;
	j->pending_bytes += b->used;
	j->st.writes++;
}

/* Queues cur's write and starts the next buffer after it. */
static int buf_seal(struct journal *j)
{
	struct jbuf *b = j->cur;
	if (!b->n_new)
		return 0;
	struct jbuf *next = buf_get(j, b->file_off + round_up(b->used, J_BLOCK));
	struct io_uring_sqe *sqe = next ? get_sqe(j) : NULL;
	if (!sqe) {
		if (next)
			buf_put(j, next);
		return next ? -EBUSY : -ENOMEM;
	}
	buf_pad(j, b);
	b->lsn_end = j->lsn;
	buf_issue(j, b, sqe);
	j->cur = next;
	return 0;
}

/* A rewind's header, written on the ring like a buffer of records and
 * issued before any record of the new epoch. written_lsn passes only a
 * prefix of completed writes and an fdatasync covers written_lsn, so a
 * record after the rewind is acknowledged only once the header is on the
 * disk with it. Until then a crash finds the old header, whose epochs
 * refuse the new records: replay ends where they begin, and none of them
 * was acknowledged. No reactor waits for the disk. */
static int hdr_queue(struct journal *j)
{
	struct jbuf *b = buf_get(j, 0);
	struct io_uring_sqe *sqe = b ? get_sqe(j) : NULL;
	if (!sqe) {
		if (b)
			buf_put(j, b);
		return b ? -EBUSY : -ENOMEM;
	}
	hdr_fill(j, b->mem);
	b->used = J_BLOCK;
	b->lsn_end = j->lsn;
	buf_issue(j, b, sqe);
	return 0;
}

/* Room for a record of len payload bytes in cur (sealing it when full):
 * returns where the record goes, or NULL. */
static uint8_t *rec_reserve(struct journal *j, uint32_t len)
{
	struct jbuf *b = j->cur;
	uint64_t at = rec_start(b->used);
	if (at + J_REC_HDR + len > J_BUF) {
		if (buf_seal(j) < 0 || j->cur == b)
			return NULL;
		b = j->cur;
		at = 0;
	}
	memset(b->mem + b->used, 0, at - b->used);
	b->used = (uint32_t)at;
	return b->mem + at;
}

/* Writes a record at p (from rec_reserve) and accounts for it. */
static uint32_t rec_commit(struct journal *j, uint8_t *p, uint16_t type,
			   uint16_t flags, uint64_t id, uint64_t arg,
			   uint32_t len)
{
	struct rec_hdr h = {.magic = J_MAGIC, .type = type, .flags = flags,
			    .len = len, .epoch = j->epoch, .obj_id = id,
			    .arg = arg,
			    .data_crc = crc32c(0, p + J_REC_HDR, len)};
	h.hdr_crc = crc32c(0, &h, offsetof(struct rec_hdr, hdr_crc));
	memcpy(p, &h, sizeof(h));
	uint32_t end = (uint32_t)(p - j->cur->mem) + J_REC_HDR + len;
	uint32_t padded = (uint32_t)round_up(end, 8);
	memset(j->cur->mem + end, 0, padded - end);
	j->cur->used = padded;
	j->cur->n_new++;
	j->lsn++;
	j->st.records++;
	return h.data_crc;
}

/* Appends a record whose payload is the len bytes at pl. */
static int rec_append(struct journal *j, uint16_t type, uint16_t flags,
		      uint64_t id, uint64_t arg, const void *pl, uint32_t len)
{
	uint8_t *p = rec_reserve(j, len);
	if (!p)
		return -ENOMEM;
	if (len)
		memcpy(p + J_REC_HDR, pl, len);
	rec_commit(j, p, type, flags, id, arg, len);
	return 0;
}

/* ---- space ---- */

/* Bytes that len payload bytes may add to the tail: per record its header,
 * a skipped block end, alignment, and a buffer sealed before it (padded to
 * a block). DATA records fill whole buffers but for the first and last. */
static uint64_t worst_case(uint64_t len)
{
	uint64_t records = len / (J_BUF - J_MIN_CHUNK - 2 * J_REC_HDR) + 2;
	return len + records * (J_BLOCK + 2ull * J_REC_HDR + 8);
}

/* An OPEN record's payload: both lengths, then the two names. */
static int append_open_rec(struct journal *j, uint64_t id,
			   const char *dataset, const char *key)
{
	uint16_t lens[2] = {(uint16_t)strlen(dataset), (uint16_t)strlen(key)};
	uint32_t len = 4u + lens[0] + lens[1];
	uint8_t *p = rec_reserve(j, len);
	if (!p)
		return -ENOMEM;
	memcpy(p + J_REC_HDR, lens, 4);
	memcpy(p + J_REC_HDR + 4, dataset, lens[0]);
	memcpy(p + J_REC_HDR + 4 + lens[0], key, lens[1]);
	rec_commit(j, p, REC_OPEN, 0, id, 0, len);
	return 0;
}

/* The log may start over when no live object is committed. An object
 * still open was never acknowledged (replay discards it), so its records
 * carry no promise: it is simply logged again, its OPEN at once and its
 * bytes (journal_dropped) by its writer before its COMMIT. Before, one
 * open object holding a single byte kept the log from ever rewinding, and
 * every writer of the shard got -ENOSPC once the file was full. */
static bool rewind_possible(const struct journal *j)
{
	for (size_t i = 0; i < j->n_objs; i++)
		if (j->objs[i].state != OBJ_OPEN)
			return false;
	return true;
}

/* Restarts the log at the first record: when nothing is live, or (short
 * of room) when only open objects are. A new epoch, in the header
 * (hdr_queue) ahead of any record, makes everything behind it stale.
 * Records not yet written must be written first (-EAGAIN: retry after
 * the completions): none of theirs may land after the new ones. */
static int maybe_rewind(struct journal *j, bool short_of_room)
{
	if ((j->n_objs && !short_of_room) || !rewind_possible(j) ||
	    (tail_off(j) == J_FILE_HDR && !j->cur->n_new))
		return 0;
	if (j->cur->n_new || j->writes_inflight) {
		if (!short_of_room)
			return 0;
		return buf_seal(j) < 0 ? -ENOSPC : -EAGAIN;
	}
	j->base_epoch = j->epoch = j->epoch + 1;
	int r = hdr_queue(j);
	if (r < 0) {
		log_error("journal: rewinding %s: %s", j->path, strerror(-r));
		return j->failed = -EIO;
	}
	j->cur->file_off = J_FILE_HDR;
	j->cur->used = 0;
	j->st.rewinds++;
	for (size_t i = 0; i < j->n_objs; i++) {
		struct jobj *ob = &j->objs[i];
		if (ob->o.n_extents) {
			ob->o.n_extents = 0;
			ob->dropped = true;
			j->st.dropped++;
		}
		if (append_open_rec(j, ob->o.id, ob->o.dataset, ob->o.key) < 0)
			return j->failed = -EIO;
	}
	return 0;
}

bool journal_dropped(const struct journal *j, uint64_t id)
{
	for (size_t i = 0; i < j->n_objs; i++)
		if (j->objs[i].o.id == id)
			return j->objs[i].dropped;
	return false;
}

int journal_relog_start(struct journal *j, uint64_t id)
{
	struct jobj *ob = obj_find(j, id);
	if (!ob)
		return -ENOENT;
	if (ob->state != OBJ_OPEN)
		return -EINVAL;
	ob->dropped = false;
	return 0;
}

static bool fits(const struct journal *j, uint64_t need, bool reserved)
{
	uint64_t keep = reserved ? 0 : (j->n_objs + 1) * J_CTL_RESERVE;
	return round_up(tail_off(j) + need, J_BLOCK) + keep <= j->limit;
}

/* 0 if a record taking `need` bytes may be appended now. Control records
 * (reserved) may use the room kept back for live objects. */
static int room_for(struct journal *j, uint64_t need, bool reserved)
{
	if (j->failed)
		return j->failed;
	int r = maybe_rewind(j, false);
	if (r == 0 && !fits(j, need, reserved))
		r = maybe_rewind(j, true);
	if (r < 0)
		return r;
	if (!fits(j, need, reserved))
		return -ENOSPC;
	if (j->pending_bytes && j->pending_bytes + need > J_MAX_PENDING)
		return -EAGAIN;
	return 0;
}

/* ---- appends ---- */

static int name_len(const char *s, uint32_t *len)
{
	size_t n = s ? strlen(s) : 0;
	if (!s || n > JOURNAL_MAX_NAME)
		return -EINVAL;
	*len = (uint32_t)n;
	return 0;
}

int journal_append_open(struct journal *j, uint64_t id, const char *dataset,
			const char *key)
{
	uint32_t dlen, klen;
	if (name_len(dataset, &dlen) < 0 || name_len(key, &klen) < 0)
		return -EINVAL;
	if (obj_find(j, id))
		return -EEXIST;
	int r = room_for(j, worst_case(4 + dlen + klen), false);
	if (r < 0)
		return r;
	struct jobj *ob = obj_add(j, id, dataset, dlen, key, klen);
	if (!ob)
		return -ENOMEM;
	r = append_open_rec(j, id, dataset, key);
	if (r < 0)
		obj_remove(j, ob);
	return r;
}

/* One DATA record of at most what fits in the current buffer. */
static int append_data_chunk(struct journal *j, struct jobj *ob,
			     uint64_t obj_off, const uint8_t *src,
			     uint32_t *len)
{
	uint64_t at = rec_start(j->cur->used);
	/* Too little room left here: the chunk goes in a fresh buffer. */
	uint64_t room = at + J_REC_HDR + J_MIN_CHUNK <= J_BUF
				? J_BUF - at - J_REC_HDR : J_BUF - J_REC_HDR;
	if (*len > room)
		*len = (uint32_t)room;
	uint8_t *p = rec_reserve(j, *len);
	if (!p)
		return -ENOMEM;
	memcpy(p + J_REC_HDR, src, *len);
	struct journal_extent e = {.file_off = j->cur->file_off +
				   (uint64_t)(p - j->cur->mem) + J_REC_HDR,
				   .obj_off = obj_off, .len = *len};
	e.crc = rec_commit(j, p, REC_DATA, 0, ob->o.id, obj_off, *len);
	return obj_add_extent(ob, &e);
}

int journal_append_data(struct journal *j, uint64_t id, uint64_t obj_off,
			const void *buf, size_t len)
{
	struct jobj *ob = obj_find(j, id);
	if (!ob)
		return -ENOENT;
	if (ob->state != OBJ_OPEN)
		return -EINVAL;
	/* An object the journal could not hold even empty: it could never
	 * be committed (its COMMIT must find all its bytes in the log). */
	if (obj_off + len < obj_off ||
	    J_FILE_HDR + worst_case(obj_off + len) +
			    (j->n_objs + 1) * J_CTL_RESERVE > j->limit)
		return -ENOSPC;
	int r = room_for(j, worst_case(len), false);
	if (r < 0)
		return r;
	const uint8_t *src = buf;
	for (size_t done = 0; done < len;) {
		uint32_t n = len - done > J_BUF ? J_BUF : (uint32_t)(len - done);
		r = append_data_chunk(j, ob, obj_off + done, src + done, &n);
		if (r < 0) /* out of memory midway: the journal is unusable */
			return j->failed = -EIO;
		done += n;
	}
	j->st.data_bytes += len;
	return 0;
}

int journal_append_commit(struct journal *j, uint64_t id, uint64_t size,
			  const uint8_t md5[16], const uint8_t token[16],
			  const uint32_t *uid)
{
	struct jobj *ob = obj_find(j, id);
	if (!ob)
		return -ENOENT;
	if (ob->state != OBJ_OPEN)
		return -EINVAL;
	if (ob->dropped)
		return -ESTALE; /* its bytes are not all in the log */
	uint8_t pl[36];
	uint32_t len = 0;
	uint16_t flags = 0;
	if (md5) {
		memcpy(pl, md5, 16);
		len += 16;
		flags |= REC_F_MD5;
	}
	if (token) {
		memcpy(pl + len, token, 16);
		len += 16;
		flags |= REC_F_TOKEN;
	}
	if (uid) {
		memcpy(pl + len, uid, 4);
		len += 4;
		flags |= REC_F_UID;
	}
	int r = room_for(j, worst_case(36), true);
	if (r < 0)
		return r;
	r = rec_append(j, REC_COMMIT, flags, id, size, pl, len);
	if (r < 0)
		return r;
	ob->state = OBJ_COMMITTED;
	ob->o.size = size;
	ob->o.has_md5 = md5 != NULL;
	if (md5)
		memcpy(ob->o.md5, md5, 16);
	ob->o.has_token = token != NULL;
	if (token)
		memcpy(ob->o.token, token, 16);
	ob->o.has_uid = uid != NULL;
	if (uid)
		ob->o.uid = *uid;
	return 0;
}

/* DONE and ABORT: the object leaves the table. */
static int append_end(struct journal *j, uint64_t id, uint16_t type,
		      const char *etag)
{
	uint32_t elen = 0;
	if (etag && name_len(etag, &elen) < 0)
		return -EINVAL;
	struct jobj *ob = obj_find(j, id);
	if (!ob)
		return -ENOENT;
	if (type == REC_DONE && ob->state != OBJ_COMMITTED)
		return -EINVAL;
	int r = room_for(j, worst_case(elen), true);
	if (r < 0)
		return r;
	r = rec_append(j, type, 0, id, 0, etag, elen);
	if (r == 0)
		obj_remove(j, ob);
	return r;
}

int journal_append_done(struct journal *j, uint64_t id, const char *etag)
{
	return append_end(j, id, REC_DONE, etag ? etag : "");
}

int journal_append_abort(struct journal *j, uint64_t id)
{
	return append_end(j, id, REC_ABORT, NULL);
}

int journal_append_rename(struct journal *j, uint64_t id, const char *key)
{
	uint32_t klen;
	if (name_len(key, &klen) < 0)
		return -EINVAL;
	struct jobj *ob = obj_find(j, id);
	if (!ob)
		return -ENOENT;
	char *k = strdup(key);
	if (!k)
		return -ENOMEM;
	/* Not from the room kept for COMMIT/DONE/ABORT: a writer renaming
	 * in a loop would eat it, and a DONE refused keeps the object live
	 * and the journal from ever rewinding. */
	int r = room_for(j, worst_case(klen), false);
	if (r == 0)
		r = rec_append(j, REC_RENAME, 0, id, 0, key, klen);
	if (r < 0) {
		free(k);
		return r;
	}
	free(ob->o.key);
	ob->o.key = k;
	return 0;
}

/* ---- flush and completions ---- */

static void fail(struct journal *j, int res, const char *what)
{
	if (!j->failed)
		log_error("journal: %s on %s failed (%s): no more local "
			  "durability", what, j->path, strerror(-res));
	j->failed = -EIO;
}

static struct waiter *first_waiter(const struct rc_list *list)
{
	struct rc_list *n = rc_list_first(list);
	return n ? rc_list_entry(n, struct waiter, link) : NULL;
}

static void waiters_free(struct rc_list *list)
{
	struct rc_list *pos, *tmp;

	rc_list_for_each_safe(pos, tmp, list)
		free(rc_list_entry(pos, struct waiter, link));
	rc_list_init(list);
}

/* Runs the waiters that are satisfied (or all, with res < 0). */
static void wake_waiters(struct journal *j, int res)
{
	struct waiter *w;

	while ((w = first_waiter(&j->waiters)) &&
	       (res < 0 || w->lsn <= j->synced_lsn)) {
		rc_list_del(&w->link);
		w->done(w->ctx, res); /* may append or flush again */
		free(w);
	}
}

/* Queues an fdatasync covering every completed write, if one is wanted. */
static void maybe_fsync(struct journal *j)
{
	const struct waiter *first = first_waiter(&j->waiters);
	if (j->fsync_inflight || !first || first->lsn > j->written_lsn)
		return;
	struct io_uring_sqe *sqe = get_sqe(j);
	if (!sqe) {
		fail(j, -EBUSY, "queueing fdatasync");
		wake_waiters(j, j->failed);
		return;
	}
	io_uring_prep_fsync(sqe, j->fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_data(sqe, &j->fsync_io);
	io_uring_submit(j->ring); /* a COMMIT waits for it */
	j->fsync_inflight = true;
	j->fsync_lsn = j->written_lsn;
	j->st.fsyncs++;
}

int journal_flush(struct journal *j, journal_done_fn done, void *ctx)
{
	if (j->failed)
		return -EIO;
	if (j->lsn <= j->synced_lsn) {
		done(ctx, 0);
		return 0;
	}
	struct waiter *w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	int r = buf_seal(j);
	if (r < 0) {
		free(w);
		return r;
	}
	*w = (struct waiter){.lsn = j->lsn, .done = done, .ctx = ctx};
	rc_list_add_tail(&j->waiters, &w->link);
	maybe_fsync(j);
	return 0;
}

int journal_wait_room(struct journal *j, journal_done_fn done, void *ctx)
{
	if (j->failed)
		return -EIO;
	if (!j->writes_inflight && buf_seal(j) == 0 && !j->writes_inflight)
		return journal_flush(j, done, ctx);
	struct waiter *w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct waiter){.done = done, .ctx = ctx};
	rc_list_add_tail(&j->room_waiters, &w->link);
	return 0;
}

/* After a write completed: every room waiter tries again, oldest first
 * (and may wait again, on a fresh list). */
static void wake_room_waiters(struct journal *j, int res)
{
	struct rc_list woken = RC_LIST_INIT(woken), *pos, *tmp;

	rc_list_splice_tail(&woken, &j->room_waiters);
	rc_list_for_each_safe(pos, tmp, &woken) {
		struct waiter *w = rc_list_entry(pos, struct waiter, link);
		w->done(w->ctx, res);
		free(w);
	}
}

static void write_done(struct journal *j, struct jbuf *b, int res)
{
	j->writes_inflight--;
	j->pending_bytes -= b->used;
	b->written = true;
	if (res != (int)b->used)
		fail(j, res < 0 ? res : -ENOSPC, "write");
	/* Only a prefix of completed writes counts as written. */
	struct rc_list *first;
	while ((first = rc_list_first(&j->issued)) &&
	       rc_list_entry(first, struct jbuf, link)->written) {
		struct jbuf *h = rc_list_entry(first, struct jbuf, link);
		rc_list_del(&h->link);
		j->written_lsn = h->lsn_end;
		buf_put(j, h);
	}
}

static void journal_on_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	journal_complete(rc_container_of(ev, struct jio, ev)->j, cqe);
}

void journal_complete(struct journal *j, struct io_uring_cqe *cqe)
{
	struct jio *io = io_uring_cqe_get_data(cqe);
	if (io->op == JIO_WRITE) {
		write_done(j, (struct jbuf *)io, cqe->res);
	} else {
		j->fsync_inflight = false;
		if (cqe->res < 0)
			fail(j, cqe->res, "fdatasync");
		else
			j->synced_lsn = j->fsync_lsn;
	}
	if (j->failed) {
		wake_waiters(j, j->failed);
		wake_room_waiters(j, j->failed);
		return;
	}
	wake_waiters(j, 0);
	maybe_fsync(j);
	if (io->op == JIO_WRITE)
		wake_room_waiters(j, 0);
}

unsigned journal_inflight(const struct journal *j)
{
	return j->writes_inflight + j->fsync_inflight;
}

/* ---- reading objects back ---- */

/* Copies the part of extent e inside [off, off+len) to dst. */
static int read_extent(struct journal *j, const struct journal_extent *e,
		       uint64_t off, uint8_t *dst, size_t len, uint8_t *tmp)
{
	uint64_t lo = e->obj_off > off ? e->obj_off : off;
	uint64_t hi = e->obj_off + e->len < off + len ? e->obj_off + e->len
						      : off + len;
	if (lo >= hi)
		return 0;
	if (pread(j->rfd, tmp, e->len, (off_t)e->file_off) != (ssize_t)e->len)
		return -EIO;
	if (crc32c(0, tmp, e->len) != e->crc)
		return -EBADMSG;
	memcpy(dst + (lo - off), tmp + (lo - e->obj_off), hi - lo);
	return 0;
}

int journal_read(struct journal *j, const struct journal_object *o,
		 uint64_t off, void *dst, size_t len)
{
	uint8_t *tmp = malloc(J_BUF);
	if (!tmp)
		return -ENOMEM;
	memset(dst, 0, len);
	int r = 0;
	for (size_t i = 0; i < o->n_extents && r == 0; i++)
		r = read_extent(j, &o->extents[i], off, dst, len, tmp);
	free(tmp);
	return r;
}

/* ---- open / close ---- */

/* O_DIRECT where the file system takes it (checked with one aligned
 * read), buffered otherwise; plus a buffered descriptor for reading. */
static int open_files(struct journal *j, char *err, size_t errlen)
{
	int flags = O_RDWR | O_CREAT | O_CLOEXEC;
	void *probe = aligned_alloc(J_BLOCK, J_BLOCK);
	if (!probe) {
		rc_set_err(err, errlen, "journal: out of memory");
		return -1;
	}
	j->fd = open(j->path, flags | O_DIRECT, 0600);
	if (j->fd >= 0 && pread(j->fd, probe, J_BLOCK, 0) < 0 &&
	    errno == EINVAL) {
		close(j->fd);
		j->fd = -1;
		errno = EINVAL;
	}
	free(probe);
	if (j->fd < 0 && errno == EINVAL) {
		log_warn("journal: %s refuses O_DIRECT: using buffered writes "
			 "and fdatasync", j->path);
		j->fd = open(j->path, flags, 0600);
	} else {
		j->direct = j->fd >= 0;
	}
	if (j->fd >= 0)
		j->rfd = open(j->path, O_RDONLY | O_CLOEXEC);
	if (j->fd < 0 || j->rfd < 0) {
		rc_set_err(err, errlen, "journal: cannot open %s: %s", j->path,
			strerror(errno));
		return -1;
	}
	/* Before replay reads it: a pre-created file keeps its mode. */
	return privfile_secure(j->fd, "journal", j->path, err, errlen);
}

/* A new journal is written once in full: O_DIRECT writes into allocated
 * but never written blocks (what posix_fallocate leaves) cost the file
 * system an extent conversion each, and the fdatasync before a COMMIT's
 * acknowledgement then commits them all: 512 MiB at queue depth 32 took
 * 868 ms into fresh blocks and 558 ms into written ones on this project's
 * VM. Blocking, once per journal file, and only its first ZERO_FILL_MAX
 * bytes: the default 8 GiB journal would hold a first start for ~15 s on
 * that VM; past the first GiB each block pays its conversion once, on its
 * first use. */
#define ZERO_FILL_MAX (1ull << 30)

static int zero_fill(struct journal *j)
{
	uint8_t *zeros = aligned_alloc(J_BLOCK, J_BUF);
	if (!zeros)
		return ENOMEM;
	memset(zeros, 0, J_BUF);
	int r = 0;
	uint64_t end = j->limit < ZERO_FILL_MAX ? j->limit : ZERO_FILL_MAX;
	for (uint64_t off = 0; off < end && !r; off += J_BUF) {
		size_t n = end - off < J_BUF ? (size_t)(end - off) : J_BUF;
		if (pwrite(j->fd, zeros, n, (off_t)off) != (ssize_t)n)
			r = errno ? errno : ENOSPC;
	}
	if (!r && fdatasync(j->fd) < 0)
		r = errno;
	free(zeros);
	return r;
}

/* Reserves the whole limit now so a full disk fails here, not mid-run. */
static int reserve_space(struct journal *j, char *err, size_t errlen)
{
	struct stat sb;
	if (fstat(j->fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		rc_set_err(err, errlen, "journal: %s is not a regular file",
			j->path);
		return -1;
	}
	if ((uint64_t)sb.st_size >= j->limit)
		return 0;
	int r = posix_fallocate(j->fd, 0, (off_t)j->limit);
	if (r == EOPNOTSUPP || r == EINVAL)
		r = 0; /* ramfs and friends: the limit still holds */
	if (!r && sb.st_size == 0)
		r = zero_fill(j);
	if (r) {
		rc_set_err(err, errlen, "journal: cannot reserve %llu bytes for "
			"%s: %s", (unsigned long long)j->limit, j->path,
			strerror(r));
		return -1;
	}
	return 0;
}

/* After replay: go on at the tail while objects are live (their records
 * must stay), else start over at the first record. */
static int start_writing(struct journal *j, uint64_t tail)
{
	if (!j->n_objs)
		tail = J_FILE_HDR;
	uint64_t blk = tail & ~(uint64_t)(J_BLOCK - 1);
	j->cur = buf_get(j, blk);
	if (!j->cur)
		return -ENOMEM;
	/* The valid records before the tail in its block are rewritten
	 * unchanged by the block's next write. */
	size_t pre = (size_t)(tail - blk);
	if (pre && pread(j->rfd, j->cur->mem, pre, (off_t)blk) != (ssize_t)pre)
		return -EIO;
	j->cur->used = (uint32_t)pre;
	return 0;
}

/* ABORT records for discarded objects, so no replay reports them again
 * (only needed when the old records stay, i.e. objects are live). */
static void abort_discarded(struct journal *j)
{
	if (!j->n_objs)
		return;
	for (size_t i = 0; i < j->n_discarded; i++)
		rec_append(j, REC_ABORT, 0, j->discarded[i].id, 0, NULL, 0);
}

static int load(struct journal *j, char *err, size_t errlen)
{
	pool_init(j);
	int fresh = hdr_read(j, err, errlen);
	if (fresh < 0)
		return -1;
	int64_t tail = fresh ? J_FILE_HDR : replay(j, err, errlen);
	if (tail < 0)
		return -1;
	if (sort_replayed(j) < 0) {
		rc_set_err(err, errlen, "journal: out of memory");
		return -1;
	}
	/* A new epoch for this run; a rewind makes the old records stale. */
	j->epoch++;
	if (!j->n_objs)
		j->base_epoch = j->epoch;
	int r = hdr_write(j);
	if (r == 0)
		r = start_writing(j, (uint64_t)tail);
	if (r < 0) {
		rc_set_err(err, errlen, "journal: cannot start writing %s: %s",
			j->path, strerror(-r));
		return -1;
	}
	abort_discarded(j);
	return 0;
}

static void journal_free(struct journal *j)
{
	if (j->fd >= 0)
		close(j->fd);
	if (j->rfd >= 0)
		close(j->rfd);
	for (size_t i = 0; i < j->n_objs; i++)
		object_free(&j->objs[i].o);
	for (size_t i = 0; i < j->n_replayed; i++)
		object_free(&j->replayed[i]);
	for (size_t i = 0; i < j->n_discarded; i++)
		object_free(&j->discarded[i]);
	waiters_free(&j->waiters);
	waiters_free(&j->room_waiters);
	free(j->objs);
	free(j->replayed);
	free(j->discarded);
	if (j->cur)
		buf_destroy(j->cur);
	bufs_free(&j->issued);
	bufs_free(&j->free_bufs);
	hugemem_free(j->pool, (size_t)j->pool_bufs * J_BUF);
	free(j->path);
	free(j);
}

struct journal *journal_open(const struct journal_config *cfg,
			     struct io_uring *ring, char *err, size_t errlen)
{
	uint64_t limit = cfg->size_limit & ~(uint64_t)(J_BLOCK - 1);
	if (!cfg->path || limit < J_FILE_HDR + 4 * J_BLOCK + J_CTL_RESERVE) {
		rc_set_err(err, errlen, "journal: size limit %llu is too small",
			(unsigned long long)cfg->size_limit);
		return NULL;
	}
	struct journal *j = calloc(1, sizeof(*j));
	if (!j || !(j->path = strdup(cfg->path))) {
		free(j);
		rc_set_err(err, errlen, "journal: out of memory");
		return NULL;
	}
	rc_list_init(&j->issued);
	rc_list_init(&j->free_bufs);
	rc_list_init(&j->waiters);
	rc_list_init(&j->room_waiters);
	j->ring = ring;
	j->fd = j->rfd = -1;
	j->limit = limit;
	j->fsync_io = (struct jio){{journal_on_cqe}, j, JIO_FSYNC};
	if (open_files(j, err, errlen) < 0 ||
	    reserve_space(j, err, errlen) < 0 || load(j, err, errlen) < 0) {
		journal_free(j);
		return NULL;
	}
	log_info("journal: %s: %zu objects to upload, %zu discarded, %s I/O",
		 j->path, j->n_replayed, j->n_discarded,
		 j->direct ? "direct" : "buffered");
	return j;
}

/* Shutdown: what was appended and not yet written goes out, blocking. */
static void write_out_sync(struct journal *j)
{
	struct jbuf *b = j->cur;
	if (j->failed || j->writes_inflight || !b->n_new)
		return;
	buf_pad(j, b);
	if (pwrite(j->fd, b->mem, b->used, (off_t)b->file_off) !=
		    (ssize_t)b->used || fdatasync(j->fd) < 0)
		log_error("journal: final write to %s failed: %s", j->path,
			  strerror(errno));
}

void journal_close(struct journal *j)
{
	if (!j)
		return;
	if (journal_inflight(j))
		log_warn("journal: closing %s with %u I/Os in flight", j->path,
			 journal_inflight(j));
	else
		write_out_sync(j);
	journal_free(j);
}

size_t journal_n_replayed(const struct journal *j)
{
	return j->n_replayed;
}

const struct journal_object *journal_replayed(const struct journal *j,
					      size_t i)
{
	return i < j->n_replayed ? &j->replayed[i] : NULL;
}

size_t journal_n_discarded(const struct journal *j)
{
	return j->n_discarded;
}

const struct journal_object *journal_discarded(const struct journal *j,
					       size_t i)
{
	return i < j->n_discarded ? &j->discarded[i] : NULL;
}

void journal_get_stats(const struct journal *j, struct journal_stats *st)
{
	*st = j->st;
	st->size_limit = j->limit;
	st->used_bytes = tail_off(j) - J_FILE_HDR;
	st->live_objects = j->n_objs;
	st->epoch = j->epoch;
	st->direct = j->direct;
	st->failed = j->failed != 0;
}
