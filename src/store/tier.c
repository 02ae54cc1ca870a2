/* tier.c - owns the NVMe tier (see tier.h for the contract and the on-disk
 * layout): the tier file, its slot table and key index, CLOCK eviction,
 * the io_uring reads and writes between arena memory and the file, CRC32C
 * checks and the persisted index. */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "log.h"
#include "privfile.h"
#include "uring.h"
#include "tier.h"

#define TIER_MAGIC 0x3152454954435228ull /* "(RCTIER1" */
#define TIER_VERSION 1u
#define TIER_HDR_BYTES 4096u
#define NO_SLOT UINT32_MAX

/* On disk, little-endian; rec_crc covers the bytes before it. */
struct tier_rec {
	uint64_t id[2];
	uint64_t blkno;
	uint64_t gen;
	uint32_t len; /* 0: empty slot */
	uint32_t data_crc;
	uint32_t flags;
	uint32_t rec_crc;
};
_Static_assert(sizeof(struct tier_rec) == 48, "tier_rec is 48 bytes on disk");

struct tier_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t block_bytes;
	uint64_t size_bytes;
	uint64_t n_slots;
	uint64_t data_off;
	uint32_t reserved;
	uint32_t hdr_crc; /* covers the bytes before it */
};

enum slot_state { SLOT_FREE, SLOT_WRITING, SLOT_VALID, SLOT_DROPPED };

struct slot {
	struct tier_key key;
	uint64_t gen;
	uint32_t len, crc;
	uint32_t hnext;   /* next slot in the hash chain */
	uint16_t readers; /* reads in flight: never reused meanwhile */
	uint8_t state;
	uint8_t ref;      /* CLOCK bit: read since the hand last passed */
};

/* One I/O in flight; its address is the SQE's user_data. */
struct tier_io {
	struct rc_ev ev;  /* the SQE's user_data: tier_on_cqe */
	struct tier *t;
	bool is_write;
	uint32_t slot;
	uint32_t len;
	void *buf;
	tier_done_fn done;
	void *ctx;
	struct tier_io *next_free;
};

static void tier_on_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe);

/* The index sync in flight on the caller's ring: idxbuf written (in as
 * many writes as the kernel takes), then one fdatasync. idxbuf is not
 * touched meanwhile; changes made meanwhile leave the tier dirty again. */
struct tier_sync {
	struct rc_ev ev; /* the SQE's user_data: sync_on_cqe */
	size_t written;
	bool busy;
};

struct tier {
	struct io_uring *ring;
	char *path;
	int fd;
	bool direct, fixed_file, fixed_bufs, enabled, dirty;
	struct iovec *iovs; /* copy of the registered buffers */
	unsigned n_iovs;
	uint32_t block_bytes;
	uint64_t offset;    /* where the tier starts in the file or device */
	uint64_t size_bytes, data_off;
	uint32_t n_slots;
	_Atomic uint32_t n_used; /* tier_bytes_used() reads it from any thread */
	struct slot *slots;
	uint32_t *buckets, bucket_mask;
	uint32_t *free_stack, n_free;
	uint32_t hand;
	uint64_t next_gen;
	uint8_t *idxbuf; /* header + records, TIER_ALIGN aligned */
	struct tier_io *io_free;
	unsigned inflight;
	struct tier_sync sync;
	struct tier_stats st;
};

void tier_key_make(struct tier_key *k, const char *dataset,
		   const char *object_key, const char *etag, uint64_t blkno)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	/* The NULs are hashed too, so ("ab","c") and ("a","bc") differ. */
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	EVP_DigestUpdate(c, dataset, strlen(dataset) + 1);
	EVP_DigestUpdate(c, object_key, strlen(object_key) + 1);
	EVP_DigestUpdate(c, etag, strlen(etag) + 1);
	EVP_DigestFinal_ex(c, md, &mdlen);
	EVP_MD_CTX_free(c);
	memcpy(k->id, md, sizeof(k->id));
	k->blkno = blkno;
}

/* ---- index: key -> slot ---- */

static uint32_t key_bucket(const struct tier *t, const struct tier_key *k)
{
	uint64_t h = k->id[0] ^ (k->id[1] * 0x9e3779b97f4a7c15ull) ^
		     (k->blkno * 0xff51afd7ed558ccdull);
	h ^= h >> 33;
	return (uint32_t)h & t->bucket_mask;
}

static bool key_eq(const struct tier_key *a, const struct tier_key *b)
{
	return a->id[0] == b->id[0] && a->id[1] == b->id[1] &&
	       a->blkno == b->blkno;
}

static uint32_t index_find(const struct tier *t, const struct tier_key *k)
{
	for (uint32_t s = t->buckets[key_bucket(t, k)]; s != NO_SLOT;
	     s = t->slots[s].hnext)
		if (key_eq(&t->slots[s].key, k))
			return s;
	return NO_SLOT;
}

static void index_insert(struct tier *t, uint32_t s)
{
	uint32_t b = key_bucket(t, &t->slots[s].key);
	t->slots[s].hnext = t->buckets[b];
	t->buckets[b] = s;
}

static void index_remove(struct tier *t, uint32_t s)
{
	uint32_t *p = &t->buckets[key_bucket(t, &t->slots[s].key)];
	while (*p != s)
		p = &t->slots[*p].hnext;
	*p = t->slots[s].hnext;
}

/* ---- slots ---- */

static void slot_free(struct tier *t, uint32_t s)
{
	t->slots[s].state = SLOT_FREE;
	t->slots[s].len = 0;
	t->free_stack[t->n_free++] = s;
	t->n_used--;
}

/* Forgets a block; a slot still being read is freed by its last reader. */
static void slot_drop(struct tier *t, uint32_t s)
{
	index_remove(t, s);
	t->dirty = true;
	if (t->slots[s].readers)
		t->slots[s].state = SLOT_DROPPED;
	else
		slot_free(t, s);
}

/* A free slot, else the CLOCK victim: a block not read since the hand
 * last passed it and not in I/O. NO_SLOT when every block is busy. */
static uint32_t slot_take(struct tier *t)
{
	if (t->n_free) {
		t->n_used++;
		return t->free_stack[--t->n_free];
	}
	for (uint64_t step = 0; step < 2ull * t->n_slots; step++) {
		uint32_t s = t->hand;
		struct slot *sl = &t->slots[s];
		t->hand = (t->hand + 1) % t->n_slots;
		if (sl->state != SLOT_VALID || sl->readers)
			continue;
		if (sl->ref) {
			sl->ref = 0;
			continue;
		}
		index_remove(t, s);
		t->st.evictions++;
		t->dirty = true;
		return s;
	}
	return NO_SLOT;
}

static uint64_t slot_off(const struct tier *t, uint32_t s)
{
	return t->offset + t->data_off + (uint64_t)s * t->block_bytes;
}

/* ---- I/O ---- */

static void disable(struct tier *t, int res, const char *what)
{
	t->st.io_errors++;
	if (!t->enabled)
		return;
	t->enabled = false;
	log_error("tier: %s on %s failed (%s): tier disabled, serving from "
		  "DRAM and S3 only", what, t->path, strerror(-res));
}

static struct tier_io *io_get(struct tier *t)
{
	struct tier_io *io = t->io_free;
	if (io)
		t->io_free = io->next_free;
	else if (!(io = malloc(sizeof(*io))))
		return NULL;
	memset(io, 0, sizeof(*io));
	return io;
}

static void io_put(struct tier *t, struct tier_io *io)
{
	io->next_free = t->io_free;
	t->io_free = io;
}

/* The registered buffer holding [p, p+len), or -1. */
static int buf_index(const struct tier *t, const void *p, size_t len)
{
	if (!t->fixed_bufs)
		return -1;
	uintptr_t a = (uintptr_t)p;
	for (unsigned i = 0; i < t->n_iovs; i++) {
		uintptr_t b = (uintptr_t)t->iovs[i].iov_base;
		if (a >= b && a + len <= b + t->iovs[i].iov_len)
			return (int)i;
	}
	return -1;
}

static struct io_uring_sqe *get_sqe(struct tier *t)
{
	return uring_sqe(t->ring);
}

/* Queues io (buf, len rounded to 4 KiB) against slot io->slot. */
static int io_queue(struct tier *t, struct tier_io *io)
{
	struct io_uring_sqe *sqe = get_sqe(t);
	if (!sqe)
		return -EBUSY;
	uint32_t n = tier_io_len(io->len);
	uint64_t off = slot_off(t, io->slot);
	int fd = t->fixed_file ? 0 : t->fd;
	int bi = buf_index(t, io->buf, n);
	if (io->is_write) {
		if (bi >= 0)
			io_uring_prep_write_fixed(sqe, fd, io->buf, n, off, bi);
		else
			io_uring_prep_write(sqe, fd, io->buf, n, off);
	} else {
		if (bi >= 0)
			io_uring_prep_read_fixed(sqe, fd, io->buf, n, off, bi);
		else
			io_uring_prep_read(sqe, fd, io->buf, n, off);
	}
	if (t->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, io);
	t->inflight++;
	return 0;
}

int tier_lookup(struct tier *t, const struct tier_key *k, uint32_t *len)
{
	uint32_t s = t->enabled ? index_find(t, k) : NO_SLOT;
	if (s == NO_SLOT || t->slots[s].state != SLOT_VALID) {
		t->st.misses++;
		return -ENOENT;
	}
	*len = t->slots[s].len;
	return 0;
}

int tier_read(struct tier *t, const struct tier_key *k, void *dst,
	      uint32_t len, tier_done_fn done, void *ctx)
{
	if (!t->enabled)
		return -ENODEV;
	uint32_t s = index_find(t, k);
	if (s == NO_SLOT || t->slots[s].state != SLOT_VALID)
		return -ENOENT;
	struct slot *sl = &t->slots[s];
	if (len < sl->len || ((uintptr_t)dst & (TIER_ALIGN - 1)))
		return -EINVAL;
	struct tier_io *io = io_get(t);
	if (!io)
		return -ENOMEM;
	*io = (struct tier_io){.ev = {tier_on_cqe}, .t = t, .slot = s, .len = sl->len,
			       .buf = dst, .done = done, .ctx = ctx};
	int r = io_queue(t, io);
	if (r < 0) {
		io_put(t, io);
		return r;
	}
	sl->ref = 1;
	sl->readers++;
	return 0;
}

int tier_write(struct tier *t, const struct tier_key *k, const void *src,
	       uint32_t len, tier_done_fn done, void *ctx)
{
	if (!t->enabled)
		return -ENODEV;
	if (!len || len > t->block_bytes || ((uintptr_t)src & (TIER_ALIGN - 1)))
		return -EINVAL;
	if (index_find(t, k) != NO_SLOT)
		return -EEXIST;
	uint32_t s = slot_take(t);
	if (s == NO_SLOT)
		return -EBUSY;
	struct tier_io *io = io_get(t);
	if (!io) {
		slot_free(t, s);
		return -ENOMEM;
	}
	*io = (struct tier_io){.ev = {tier_on_cqe}, .t = t, .is_write = true, .slot = s,
			       .len = len, .buf = (void *)src, .done = done,
			       .ctx = ctx};
	struct slot *sl = &t->slots[s];
	*sl = (struct slot){.key = *k, .gen = t->next_gen++, .len = len,
			    .crc = crc32c(0, src, len), .state = SLOT_WRITING};
	index_insert(t, s);
	int r = io_queue(t, io);
	if (r < 0) {
		index_remove(t, s);
		slot_free(t, s);
		io_put(t, io);
	}
	return r;
}

int64_t tier_block_offset(struct tier *t, const struct tier_key *k)
{
	uint32_t s = index_find(t, k);
	return s == NO_SLOT ? -ENOENT : (int64_t)slot_off(t, s);
}

static int read_done(struct tier *t, struct tier_io *io, int res)
{
	struct slot *sl = &t->slots[io->slot];
	sl->readers--;
	if (res != (int)tier_io_len(io->len)) {
		disable(t, res < 0 ? res : -EIO, "read");
		res = -EIO;
	} else if (crc32c(0, io->buf, io->len) != sl->crc) {
		t->st.crc_errors++;
		log_warn("tier: block at slot %u of %s failed its CRC32C "
			 "check: dropped", io->slot, t->path);
		if (sl->state == SLOT_VALID)
			slot_drop(t, io->slot);
		res = -EBADMSG;
	} else {
		t->st.hits++;
		res = (int)io->len;
	}
	if (sl->state == SLOT_DROPPED && !sl->readers)
		slot_free(t, io->slot);
	return res;
}

static int write_done(struct tier *t, struct tier_io *io, int res)
{
	struct slot *sl = &t->slots[io->slot];
	if (res != (int)tier_io_len(io->len)) {
		disable(t, res < 0 ? res : -ENOSPC, "write");
		index_remove(t, io->slot);
		slot_free(t, io->slot);
		return res < 0 ? res : -EIO;
	}
	sl->state = SLOT_VALID;
	t->dirty = true;
	t->st.writes++;
	return (int)io->len;
}

static void tier_on_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	tier_complete(rc_container_of(ev, struct tier_io, ev)->t, cqe);
}

void tier_complete(struct tier *t, struct io_uring_cqe *cqe)
{
	struct tier_io *io = io_uring_cqe_get_data(cqe);
	t->inflight--;
	int res = io->is_write ? write_done(t, io, cqe->res)
			       : read_done(t, io, cqe->res);
	tier_done_fn done = io->done;
	void *ctx = io->ctx;
	io_put(t, io); /* before done(), which may queue the next I/O */
	if (done)
		done(ctx, res);
}

/* ---- persisted index ---- */

static void rec_seal(struct tier_rec *r)
{
	r->rec_crc = crc32c(0, r, offsetof(struct tier_rec, rec_crc));
}

static bool rec_ok(const struct tier_rec *r)
{
	return r->rec_crc == crc32c(0, r, offsetof(struct tier_rec, rec_crc));
}

static void hdr_fill(struct tier *t)
{
	struct tier_hdr *h = (struct tier_hdr *)t->idxbuf;
	memset(t->idxbuf, 0, TIER_HDR_BYTES);
	*h = (struct tier_hdr){.magic = TIER_MAGIC, .version = TIER_VERSION,
			       .block_bytes = t->block_bytes,
			       .size_bytes = t->size_bytes,
			       .n_slots = t->n_slots, .data_off = t->data_off};
	h->hdr_crc = crc32c(0, h, offsetof(struct tier_hdr, hdr_crc));
}

/* Header and records of the slots as they stand into idxbuf. */
static void index_fill(struct tier *t)
{
	hdr_fill(t);
	struct tier_rec *recs = (struct tier_rec *)(t->idxbuf + TIER_HDR_BYTES);
	for (uint32_t s = 0; s < t->n_slots; s++) {
		const struct slot *sl = &t->slots[s];
		struct tier_rec *r = &recs[s];
		memset(r, 0, sizeof(*r));
		if (sl->state == SLOT_VALID) { /* a write in flight is not yet */
			r->id[0] = sl->key.id[0];
			r->id[1] = sl->key.id[1];
			r->blkno = sl->key.blkno;
			r->gen = sl->gen;
			r->len = sl->len;
			r->data_crc = sl->crc;
		}
		rec_seal(r);
	}
}

int tier_sync_index(struct tier *t)
{
	if (t->sync.busy)
		return -EBUSY;
	if (!t->dirty || !t->enabled)
		return 0;
	index_fill(t);
	size_t n = t->data_off;
	for (size_t done = 0; done < n;) {
		ssize_t w = pwrite(t->fd, t->idxbuf + done, n - done,
				   (off_t)(t->offset + done));
		if (w <= 0) {
			int e = w < 0 ? -errno : -EIO;
			disable(t, e, "index write");
			return e;
		}
		done += (size_t)w;
	}
	if (fdatasync(t->fd) < 0) {
		int e = -errno;
		disable(t, e, "index fdatasync");
		return e;
	}
	t->dirty = false;
	return 0;
}

#define SYNC_CHUNK (1u << 30) /* one SQE's length is 32 bits */

/* Queues the next step of the sync: the rest of idxbuf, else fdatasync. */
static int sync_queue(struct tier *t)
{
	struct io_uring_sqe *sqe = get_sqe(t);
	if (!sqe)
		return -EBUSY;
	int fd = t->fixed_file ? 0 : t->fd;
	size_t left = t->data_off - t->sync.written;
	if (left)
		io_uring_prep_write(sqe, fd, t->idxbuf + t->sync.written,
				    left < SYNC_CHUNK ? (unsigned)left
						      : SYNC_CHUNK,
				    t->offset + t->sync.written);
	else
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
	if (t->fixed_file)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, &t->sync.ev);
	t->inflight++;
	return 0;
}

static void sync_on_cqe(struct rc_ev *ev, struct io_uring_cqe *cqe)
{
	struct tier *t = rc_container_of(ev, struct tier, sync.ev);
	t->inflight--;
	bool writing = t->sync.written < t->data_off;
	if (cqe->res < 0 || (writing && cqe->res == 0)) {
		t->sync.busy = false;
		disable(t, cqe->res < 0 ? cqe->res : -EIO,
			writing ? "index write" : "index fdatasync");
		return;
	}
	if (!writing) {
		t->sync.busy = false; /* on the disk */
		return;
	}
	t->sync.written += (size_t)cqe->res;
	if (sync_queue(t) < 0) { /* SQ full: the next sync writes it */
		t->sync.busy = false;
		t->dirty = true;
	}
}

int tier_sync_index_start(struct tier *t)
{
	if (!t->enabled)
		return -ENODEV;
	if (t->sync.busy)
		return -EBUSY;
	if (!t->dirty)
		return 0;
	index_fill(t);
	t->sync = (struct tier_sync){.ev = {sync_on_cqe}, .busy = true};
	int r = sync_queue(t);
	if (r < 0) {
		t->sync.busy = false;
		return r;
	}
	t->dirty = false; /* a change from now on sets it again */
	return 1;
}

static bool hdr_matches(const struct tier *t)
{
	const struct tier_hdr *h = (const struct tier_hdr *)t->idxbuf;
	return h->hdr_crc == crc32c(0, h, offsetof(struct tier_hdr, hdr_crc)) &&
	       h->magic == TIER_MAGIC && h->version == TIER_VERSION &&
	       h->block_bytes == t->block_bytes &&
	       h->size_bytes == t->size_bytes && h->n_slots == t->n_slots &&
	       h->data_off == t->data_off;
}

/* Adopts the records of a matching index; the rest of the tier is free. */
static void index_load(struct tier *t)
{
	const struct tier_rec *recs =
		(const struct tier_rec *)(t->idxbuf + TIER_HDR_BYTES);
	uint32_t bad = 0, loaded = 0;
	bool valid_hdr = hdr_matches(t);
	for (uint32_t s = t->n_slots; s-- > 0;) {
		const struct tier_rec *r = &recs[s];
		struct slot *sl = &t->slots[s];
		*sl = (struct slot){.hnext = NO_SLOT};
		bool ok = valid_hdr && rec_ok(r);
		struct tier_key k = {{r->id[0], r->id[1]}, r->blkno};
		if (valid_hdr && !ok)
			bad++;
		if (!ok || !r->len || r->len > t->block_bytes ||
		    index_find(t, &k) != NO_SLOT) {
			t->free_stack[t->n_free++] = s;
			continue;
		}
		*sl = (struct slot){.key = k, .gen = r->gen, .len = r->len,
				    .crc = r->data_crc, .state = SLOT_VALID};
		index_insert(t, s);
		if (r->gen >= t->next_gen)
			t->next_gen = r->gen + 1;
		loaded++;
	}
	t->n_used = loaded;
	if (!valid_hdr)
		log_info("tier: %s has no index for this geometry: starting "
			 "empty", t->path);
	else
		log_info("tier: %s: %u blocks found", t->path, loaded);
	if (bad)
		log_warn("tier: %s: dropped %u index records with a bad "
			 "checksum", t->path, bad);
	t->dirty = !valid_hdr || bad; /* write a clean index back */
}

/* ---- open / close ---- */

/* Opens with O_DIRECT and checks one aligned read works; falls back to
 * buffered I/O on file systems that refuse O_DIRECT. */
static int open_file(struct tier *t, char *err, size_t errlen)
{
	int flags = O_RDWR | O_CREAT | O_CLOEXEC;
	t->fd = open(t->path, flags | O_DIRECT, 0600);
	if (t->fd >= 0 && pread(t->fd, t->idxbuf, TIER_ALIGN, 0) < 0 &&
	    errno == EINVAL) {
		close(t->fd);
		t->fd = -1;
		errno = EINVAL;
	}
	if (t->fd < 0 && errno == EINVAL) {
		log_warn("tier: %s refuses O_DIRECT: using buffered I/O (the "
			 "page cache will hold tier blocks too)", t->path);
		t->fd = open(t->path, flags, 0600);
	} else {
		t->direct = t->fd >= 0;
	}
	if (t->fd < 0) {
		rc_set_err(err, errlen, "tier: cannot open %s: %s", t->path,
			strerror(errno));
		return -1;
	}
	/* Before a byte is read or written: a pre-created file keeps its mode. */
	return privfile_secure(t->fd, "tier", t->path, err, errlen);
}

/* Makes the file (or device) hold offset + size_bytes; a device caps the
 * size. */
static int size_file(struct tier *t, char *err, size_t errlen)
{
	struct stat sb;
	if (fstat(t->fd, &sb) < 0) {
		rc_set_err(err, errlen, "tier: stat %s: %s", t->path,
			strerror(errno));
		return -1;
	}
	if (S_ISBLK(sb.st_mode)) {
		uint64_t dev = 0;
		if (ioctl(t->fd, BLKGETSIZE64, &dev) < 0) {
			rc_set_err(err, errlen, "tier: size of %s: %s", t->path,
				strerror(errno));
			return -1;
		}
		if (dev <= t->offset) {
			rc_set_err(err, errlen, "tier: %s holds %llu bytes, "
				"less than the offset %llu", t->path,
				(unsigned long long)dev,
				(unsigned long long)t->offset);
			return -1;
		}
		if (dev - t->offset < t->size_bytes)
			t->size_bytes = (dev - t->offset) &
					~(uint64_t)(TIER_ALIGN - 1);
		return 0;
	}
	if (!S_ISREG(sb.st_mode)) {
		rc_set_err(err, errlen, "tier: %s is not a file or block device",
			t->path);
		return -1;
	}
	uint64_t end = t->offset + t->size_bytes;
	if ((uint64_t)sb.st_size >= end)
		return 0;
	/* Reserve the space now so a full disk fails here, not mid-run. */
	int r = posix_fallocate(t->fd, (off_t)t->offset,
				(off_t)t->size_bytes);
	if (r == EOPNOTSUPP || r == EINVAL)
		r = ftruncate(t->fd, (off_t)end) < 0 ? errno : 0;
	if (r) {
		rc_set_err(err, errlen, "tier: cannot reserve %llu bytes for %s: %s",
			(unsigned long long)t->size_bytes, t->path, strerror(r));
		return -1;
	}
	return 0;
}

/* Header, records, slots: as many slots as fit in size_bytes. */
static int layout(struct tier *t, char *err, size_t errlen)
{
	uint64_t avail = t->size_bytes > TIER_HDR_BYTES
				 ? t->size_bytes - TIER_HDR_BYTES : 0;
	uint64_t n = avail / (t->block_bytes + sizeof(struct tier_rec));
	for (;; n--) {
		uint64_t recs = n * sizeof(struct tier_rec);
		t->data_off = TIER_HDR_BYTES + ((recs + TIER_ALIGN - 1) &
						~(uint64_t)(TIER_ALIGN - 1));
		if (!n || t->data_off + n * t->block_bytes <= t->size_bytes)
			break;
	}
	if (!n || n >= NO_SLOT) {
		rc_set_err(err, errlen, "tier: %s: size %llu gives %llu slots of "
			"%u bytes", t->path, (unsigned long long)t->size_bytes,
			(unsigned long long)n, t->block_bytes);
		return -1;
	}
	t->n_slots = (uint32_t)n;
	return 0;
}

static int alloc_tables(struct tier *t)
{
	uint32_t nb = 1;
	while (nb < t->n_slots)
		nb <<= 1;
	t->bucket_mask = nb - 1;
	t->buckets = malloc(nb * sizeof(*t->buckets));
	t->slots = calloc(t->n_slots, sizeof(*t->slots));
	t->free_stack = malloc(t->n_slots * sizeof(*t->free_stack));
	void *p = NULL;
	if (posix_memalign(&p, TIER_ALIGN, t->data_off) == 0)
		memset(p, 0, t->data_off);
	free(t->idxbuf);
	t->idxbuf = p;
	if (!t->buckets || !t->slots || !t->free_stack || !t->idxbuf)
		return -1;
	memset(t->buckets, 0xff, nb * sizeof(*t->buckets));
	return 0;
}

static int load_index(struct tier *t, char *err, size_t errlen)
{
	ssize_t r = pread(t->fd, t->idxbuf, t->data_off, (off_t)t->offset);
	if (r < 0) {
		rc_set_err(err, errlen, "tier: reading the index of %s: %s",
			t->path, strerror(errno));
		return -1;
	}
	if ((size_t)r < t->data_off) /* a short file: no index yet */
		memset(t->idxbuf + r, 0, t->data_off - (size_t)r);
	index_load(t);
	return 0;
}

/* Fixed file and buffers are optimisations: failures only cost speed. */
static void register_with_ring(struct tier *t, const struct iovec *iovs,
			       unsigned n_iovs)
{
	int r = io_uring_register_files(t->ring, &t->fd, 1);
	t->fixed_file = r == 0;
	if (r < 0)
		log_warn("tier: cannot register %s with the ring (%s): using "
			 "its plain fd", t->path, strerror(-r));
	if (!n_iovs)
		return;
	r = io_uring_register_buffers(t->ring, iovs, n_iovs);
	t->fixed_bufs = r == 0;
	if (r < 0) {
		log_warn("tier: cannot register %u arena buffers (%s): using "
			 "plain READ/WRITE", n_iovs, strerror(-r));
		return;
	}
	t->iovs = malloc(n_iovs * sizeof(*iovs));
	if (!t->iovs) { /* registered but unusable: plain I/O still works */
		t->fixed_bufs = false;
		return;
	}
	memcpy(t->iovs, iovs, n_iovs * sizeof(*iovs));
	t->n_iovs = n_iovs;
}

/* Frees t and all it holds, of which a failed open may have only part;
 * closes its file. */
static void tier_free(struct tier *t)
{
	if (t->fd >= 0)
		close(t->fd);
	while (t->io_free) {
		struct tier_io *io = t->io_free;
		t->io_free = io->next_free;
		free(io);
	}
	free(t->iovs);
	free(t->buckets);
	free(t->slots);
	free(t->free_stack);
	free(t->idxbuf);
	free(t->path);
	free(t);
}

struct tier *tier_open(const struct tier_config *cfg, struct io_uring *ring,
		       const struct iovec *arena_iovs, unsigned n_iovs,
		       char *err, size_t errlen)
{
	if (!cfg->path || !cfg->block_bytes ||
	    cfg->block_bytes % TIER_ALIGN || cfg->offset % TIER_ALIGN) {
		rc_set_err(err, errlen, "tier: block size %u or offset %llu is "
			"not a multiple of %u", cfg->block_bytes,
			(unsigned long long)cfg->offset, TIER_ALIGN);
		return NULL;
	}
	struct tier *t = calloc(1, sizeof(*t));
	void *hdr = NULL;
	if (t)
		t->fd = -1; /* before any failure: tier_free closes an fd >= 0 */
	if (!t || !(t->path = strdup(cfg->path)) ||
	    posix_memalign(&hdr, TIER_ALIGN, TIER_ALIGN)) {
		rc_set_err(err, errlen, "tier: out of memory");
		goto fail;
	}
	t->idxbuf = hdr;
	t->ring = ring;
	t->block_bytes = cfg->block_bytes;
	t->size_bytes = cfg->size_bytes;
	t->offset = cfg->offset;
	t->enabled = true;
	if (open_file(t, err, errlen) < 0 || size_file(t, err, errlen) < 0 ||
	    layout(t, err, errlen) < 0)
		goto fail;
	if (alloc_tables(t) < 0) {
		rc_set_err(err, errlen, "tier: out of memory for %u slots",
			t->n_slots);
		goto fail;
	}
	if (load_index(t, err, errlen) < 0)
		goto fail;
	if (tier_sync_index(t) < 0) {
		rc_set_err(err, errlen, "tier: cannot write the index of %s",
			t->path);
		goto fail;
	}
	register_with_ring(t, arena_iovs, n_iovs);
	t->st.direct = t->direct;
	log_info("tier: %s: %u slots of %u bytes, %s I/O%s%s", t->path,
		 t->n_slots, t->block_bytes, t->direct ? "direct" : "buffered",
		 t->fixed_file ? ", fixed file" : "",
		 t->fixed_bufs ? ", fixed buffers" : "");
	return t;
fail:
	if (t)
		tier_free(t);
	return NULL;
}

void tier_close(struct tier *t)
{
	if (!t)
		return;
	if (t->inflight)
		log_warn("tier: closing %s with %u I/Os in flight", t->path,
			 t->inflight);
	tier_sync_index(t);
	if (t->fixed_bufs)
		io_uring_unregister_buffers(t->ring);
	if (t->fixed_file)
		io_uring_unregister_files(t->ring);
	tier_free(t);
}

bool tier_enabled(const struct tier *t)
{
	return t && t->enabled;
}

unsigned tier_inflight(const struct tier *t)
{
	return t->inflight;
}

void tier_get_stats(const struct tier *t, struct tier_stats *st)
{
	*st = t->st;
	st->n_slots = t->n_slots;
	st->n_used = t->n_used;
	st->data_off = t->data_off;
	st->block_bytes = t->block_bytes;
	st->direct = t->direct;
	st->fixed_files = t->fixed_file;
	st->fixed_bufs = t->fixed_bufs;
}

void tier_bytes_used(const struct tier *t, uint64_t *used, uint64_t *total)
{
	*used = (uint64_t)t->n_used * t->block_bytes;
	*total = (uint64_t)t->n_slots * t->block_bytes;
}
