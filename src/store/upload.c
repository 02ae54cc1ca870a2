/* upload.c - the upload engine (see upload.h): per object a state machine
 * of S3 requests (PUT, or Create / UploadPart x N / Complete, Abort on
 * failure), driven by callbacks from a driver that owns the event loop.
 * A copy job is the same machine with the parts' bytes on the server: a
 * HEAD of the source when its ETag is known (X_SOURCE), CopyObject, or
 * Create / UploadPartCopy x N / Complete, then a DELETE of the source
 * (X_DELETE), so it retries, throttles and aborts as uploads do.
 *
 * Lifetime: an upload lives until its done callback has run and none of
 * its transfers (requests in flight or waiting on a retry timer) is left;
 * timers cannot be cancelled, so a transfer whose upload has stopped stays
 * allocated until its timer fires, then just frees itself. */
#include "upload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "hugemem.h"
#include "list.h"
#include "log.h"
#include "md5x.h"
#include "s3_checksum.h"
#include "sha256x.h"
#include "sigv4.h"
#include "vec.h"

/* X_EXISTS: HEAD of the key for no_overwrite, before a Complete (a server
 * may ignore If-None-Match there) or after a 412 (our own earlier attempt,
 * or another writer's object?). */
enum xfer_kind { X_PUT, X_CREATE, X_PART, X_COMPLETE, X_ABORT, X_VERIFY,
		 X_EXISTS, X_COPY, X_DELETE, X_SOURCE };

struct xfer {
	enum xfer_kind kind;
	struct upload *u;
	struct s3_req *req;      /* non-NULL while in the driver's multi */
	bool waiting;            /* on a retry timer */
	unsigned attempt;        /* retries made */
	uint64_t first_ns;       /* first launch: write_retry_budget runs from it */
	unsigned part;           /* X_PART: 1-based */
	const void *body;
	size_t body_len;
	struct s3_piece *pieces; /* the body in place (view), or NULL */
	unsigned n_pieces;
	void *own_buf;           /* read-callback bytes of this part */
	size_t own_cap;          /* its size (part_buf_get) */
	uint64_t load_off;       /* read_slow: what the worker reads first */
	bool unread;             /* read_slow: own_buf not yet filled */
	int read_err;            /* read_slow's error, seen on the driver's */
	bool hashing;            /* a worker computes the digests below */
	bool hashed;
	unsigned char md5[16];
	bool md5_ok;             /* false: no MD5 here (FIPS), md5 zeroed */
	char md5_b64[25];
	char sha256[65];         /* hex, for the signature */
	struct rc_list link;     /* on the upload's xfers */
};

enum upload_state { U_RUNNING, U_STOPPING, U_DONE };

struct upload {
	struct upload_engine *e;
	struct upload_params p;
	char *bucket, *key;
	enum upload_state state;
	bool cancelled;
	bool completing;         /* Complete (or its verification) started */
	bool refused;            /* a 412 to no_overwrite: X_EXISTS decides */
	bool landed;             /* the key holds these bytes already: the
				    upload ends in success once aborted */
	unsigned busy;           /* engine frames using it: not freed under them */
	char *from_key;          /* a copy job's source; NULL for an upload */
	char *copy_src;          /* "bucket/from_key", x-amz-copy-source */
	/* The ETag the source must still have: HEAD before a copy, then
	 * x-amz-copy-source-if-match and the source DELETE's If-Match (a
	 * delete-only job's own If-Match); NULL: unconditional. */
	char *source_etag;
	bool deleting;           /* the copy landed: the source's DELETE runs */
	bool delete_only;        /* a delete job: its DELETE is all it does */
	char upload_id[256];
	char token[S3_UPLOAD_TOKEN_LEN + 1]; /* "" if none (upload_params) */
	unsigned n_parts, next_part, parts_done, parts_inflight;
	unsigned char (*md5s)[16];
	char (*etags)[128];
	struct rc_list xfers;    /* its transfers, newest first */
	unsigned n_xfers;
	struct upload_outcome out;  /* the first failure, or the result */
	struct rc_list link;     /* on the engine's uploads */
};

/* A part buffer kept for the next part (see part_buf_get). */
struct spare_buf {
	struct rc_list link;     /* on the engine's spares */
	size_t cap;
};

struct upload_engine {
	struct s3_client *s3;
	struct upload_driver drv;
	char *daemon_id;
	struct rc_list uploads;
	unsigned active, pending;
	struct rc_list spares;   /* struct spare_buf, most recent first */
	uint64_t spare_bytes;
};

static void upload_advance(struct upload *u);
static void xfer_launch(struct xfer *x);
static void part_bounds(const struct upload *u, unsigned part, uint64_t *off,
			size_t *len);
static int digests_ready(struct xfer *x);

/* ---- helpers ------------------------------------------------------------ */

static void hex16(const unsigned char in[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", in[i]);
}

void upload_multipart_etag(const unsigned char (*md5s)[16], unsigned n,
			   char *out, size_t outlen)
{
	unsigned char all[16];
	char hex[33];

	/* the MD5 of the parts' MD5s, side by side in md5s */
	if (s3_md5(md5s, (size_t)n * 16, all) < 0) {
		snprintf(out, outlen, "%s", "");
		return;
	}
	hex16(all, hex);
	snprintf(out, outlen, "\"%s-%u\"", hex, n);
}

static void set_failure(struct upload *u, int err, const struct s3_result *r)
{
	if (u->out.err)
		return; /* the first failure is the one worth reporting */
	u->out.err = err;
	if (!r)
		return;
	u->out.transient = r->retryable || err == -EBADMSG;
	u->out.http_status = r->http_status;
	snprintf(u->out.code, sizeof(u->out.code), "%s", r->code);
	snprintf(u->out.message, sizeof(u->out.message), "%s", r->message);
}

/* ---- part buffers ------------------------------------------------------- */

/* Parts read from a callback need a buffer each. Fresh memory costs a page
 * fault per page on first touch (see hugemem.h), so buffers go back to a
 * spare list, up to UPLOAD_SPARE_MAX bytes, and the next part of a size
 * that fits reuses one. */
#define UPLOAD_SPARE_MAX (256ull << 20)

static void *part_buf_get(struct upload_engine *e, size_t len, size_t *cap)
{
	struct rc_list *pos;

	rc_list_for_each(pos, &e->spares) {
		struct spare_buf *b = rc_list_entry(pos, struct spare_buf, link);
		if (b->cap >= len && b->cap / 2 < len + HUGEMEM_PAGE) {
			rc_list_del(&b->link);
			e->spare_bytes -= b->cap;
			*cap = b->cap;
			return b;
		}
	}
	*cap = len < sizeof(struct spare_buf) ? sizeof(struct spare_buf) : len;
	return hugemem_alloc(*cap);
}

static void part_buf_put(struct upload_engine *e, void *p, size_t cap)
{
	if (!p)
		return;
	if (cap < HUGEMEM_PAGE || e->spare_bytes + cap > UPLOAD_SPARE_MAX) {
		hugemem_free(p, cap);
		return;
	}
	struct spare_buf *b = p;
	b->cap = cap;
	rc_list_add(&e->spares, &b->link);
	e->spare_bytes += cap;
}

static void part_bufs_release(struct upload_engine *e)
{
	struct rc_list *pos, *tmp;

	rc_list_for_each_safe(pos, tmp, &e->spares) {
		struct spare_buf *b = rc_list_entry(pos, struct spare_buf, link);
		hugemem_free(b, b->cap);
	}
	rc_list_init(&e->spares);
	e->spare_bytes = 0;
}

/* ---- transfers ---------------------------------------------------------- */

static struct xfer *xfer_new(struct upload *u, enum xfer_kind kind)
{
	struct xfer *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	x->kind = kind;
	x->u = u;
	rc_list_add(&u->xfers, &x->link);
	u->n_xfers++;
	u->e->pending++;
	return x;
}

static void upload_free(struct upload *u)
{
	rc_list_del(&u->link);
	free(u->bucket);
	free(u->key);
	free(u->from_key);
	free(u->copy_src);
	free(u->source_etag);
	free(u->md5s);
	free(u->etags);
	free(u);
}

/* Frees x; frees its upload too once that is done and has nothing left. */
static void xfer_free(struct xfer *x)
{
	struct upload *u = x->u;
	if (x->req)
		s3_req_free(x->req);
	if (x->kind == X_PART && u->parts_inflight)
		u->parts_inflight--;
	part_buf_put(u->e, x->own_buf, x->own_cap);
	free(x->pieces);
	rc_list_del(&x->link);
	u->n_xfers--;
	u->e->pending--;
	free(x);
	if (u->state == U_DONE && u->n_xfers == 0 && u->busy == 0)
		upload_free(u);
}

/* Entry points hold their upload so nothing below frees it under them. */
static void upload_hold(struct upload *u)
{
	u->busy++;
}

static void upload_release(struct upload *u)
{
	if (--u->busy == 0 && u->state == U_DONE && u->n_xfers == 0)
		upload_free(u);
}

static void fill_params(const struct xfer *x, struct s3_req_params *p)
{
	const struct upload *u = x->u;
	memset(p, 0, sizeof(*p));
	p->bucket = u->bucket;
	p->key = u->key;
	switch (x->kind) {
	case X_PUT:
		p->op = S3_PUT_OBJECT;
		p->content_md5 = true;
		p->if_none_match = u->p.no_overwrite;
		p->meta_daemon = u->e->daemon_id;
		p->meta_upload = u->token[0] ? u->token : NULL;
		break;
	case X_CREATE:
		p->op = S3_CREATE_MULTIPART;
		p->meta_daemon = u->e->daemon_id;
		p->meta_upload = u->token[0] ? u->token : NULL;
		break;
	case X_PART:
		p->op = u->from_key ? S3_UPLOAD_PART_COPY : S3_UPLOAD_PART;
		p->part_number = x->part;
		p->upload_id = u->upload_id;
		break;
	case X_COPY:
		p->op = S3_COPY_OBJECT;
		p->if_none_match = u->p.no_overwrite;
		break;
	case X_DELETE:
		p->op = S3_DELETE_OBJECT;
		p->key = u->from_key;
		p->if_match = u->source_etag;
		break;
	case X_SOURCE:
		p->op = S3_HEAD_OBJECT;
		p->key = u->from_key;
		break;
	case X_COMPLETE:
		p->op = S3_COMPLETE_MULTIPART;
		p->upload_id = u->upload_id;
		p->if_none_match = u->p.no_overwrite;
		break;
	case X_ABORT:
		p->op = S3_ABORT_MULTIPART;
		p->upload_id = u->upload_id;
		break;
	case X_VERIFY:
	case X_EXISTS:
		p->op = S3_HEAD_OBJECT;
		break;
	}
	if (u->from_key && (x->kind == X_COPY || x->kind == X_PART)) {
		p->copy_source = u->copy_src;
		p->copy_source_if_match = u->source_etag;
	}
	if (u->from_key && x->kind == X_PART) {
		size_t len;
		part_bounds(u, x->part, &p->copy_range_off, &len);
		p->copy_range_len = len;
	} else if (x->kind == X_PUT || x->kind == X_PART) {
		p->body = x->body;
		p->body_len = x->body_len;
		p->pieces = x->pieces;
		p->n_pieces = x->n_pieces;
		p->content_md5_value = x->md5_b64;
		p->payload_sha256 = x->sha256;
	}
}

/* Sends x (again). A failure to even build the request ends the upload. */
static void xfer_launch(struct xfer *x)
{
	struct upload *u = x->u;
	struct upload_engine *e = u->e;
	struct s3_req_params p;
	struct s3_part *parts = NULL;
	char err[256] = "";

	int ready = digests_ready(x);
	if (ready == 0)
		return;
	if (ready < 0) {
		set_failure(u, ready, NULL);
		goto fail;
	}
	if (!x->first_ns)
		x->first_ns = rc_now_ns();
	fill_params(x, &p);
	if (x->kind == X_COMPLETE) {
		parts = calloc(u->n_parts, sizeof(*parts));
		if (!parts)
			goto fail_nomem;
		for (unsigned i = 0; i < u->n_parts; i++)
			parts[i] = (struct s3_part){ i + 1, u->etags[i], NULL };
		p.parts = parts;
		p.n_parts = u->n_parts;
	}
	x->req = s3_req_new(e->s3, &p, err, sizeof(err));
	free(parts); /* the request built its body from them */
	if (!x->req) {
		struct s3_result r = { .err = errno ? -errno : -EINVAL };
		snprintf(r.message, sizeof(r.message), "%s", err);
		set_failure(u, r.err, &r);
		goto fail;
	}
	s3_req_set_private(x->req, x);
	int rc = e->drv.add_transfer(e->drv.ctx, x->req);
	if (rc == 0)
		return;
	set_failure(u, rc, NULL);
	goto fail;
fail_nomem:
	set_failure(u, -ENOMEM, NULL);
fail:
	if (x->kind == X_ABORT)
		u->upload_id[0] = '\0'; /* cannot abort: cleanup will */
	xfer_free(x);
	upload_advance(u);
}

static void xfer_retry_due(void *arg)
{
	struct xfer *x = arg;
	struct upload *u = x->u;
	x->waiting = false;
	upload_hold(u);
	/* Parts, the single PUT and a Create not yet answered are pointless
	 * once the upload stops (an upload a lost Create answer made is the
	 * clean-up's); Complete and Abort decide how it ends, so they go on. */
	bool sends = x->kind == X_PART || x->kind == X_PUT ||
		     x->kind == X_CREATE || x->kind == X_COPY;
	if (u->state != U_RUNNING && sends) {
		xfer_free(x);
		upload_advance(u);
	} else {
		xfer_launch(x);
	}
	upload_release(u);
}

/* A body S3 refused as damaged (BadDigest, XAmzContentSHA256Mismatch) was
 * hashed from bytes the engine's source keeps unchanged until done (the
 * daemon's own snapshot), so it was damaged on the way: sent again, as a
 * reset would be. A source that did change them fails when the retries
 * run out, and S3 stores nothing of it. */
static bool damaged_on_the_way(const struct xfer *x, const struct s3_result *r)
{
	return r->err == -EBADMSG && (x->kind == X_PUT || x->kind == X_PART);
}

/* Schedules a retry if the policy allows; false if x failed for good.
 * An upload rides out a longer outage than a read (write_retry_budget):
 * nobody waits on most of them, and what fails may be a checkpoint. */
static bool xfer_retry(struct xfer *x, const struct s3_result *r)
{
	struct upload_engine *e = x->u->e;
	unsigned delay;
	if (!s3_retry_next(e->s3, r->retryable || damaged_on_the_way(x, r),
			   x->attempt,
			   (rc_now_ns() - x->first_ns) / 1000000u,
			   s3_client_config(e->s3)->write_retry_budget_ms,
			   &delay))
		return false;
	x->attempt++;
	x->u->out.retries++;
	char reason[512];
	log_debug("upload %s: %s, retry %u", rc_esc(x->u->key),
		  s3_result_reason(r, reason, sizeof(reason)), x->attempt);
	s3_req_free(x->req);
	x->req = NULL;
	x->waiting = true;
	if (e->drv.add_timer(e->drv.ctx, delay, xfer_retry_due, x) == 0)
		return true;
	x->waiting = false;
	return false;
}

/* ---- the state machine -------------------------------------------------- */

static void part_bounds(const struct upload *u, unsigned part, uint64_t *off,
			size_t *len)
{
	*off = (uint64_t)(part - 1) * u->p.part_size;
	uint64_t left = u->p.size - *off;
	*len = (size_t)(left < u->p.part_size ? left : u->p.part_size);
}

/* The body in place where the source can show it: 1, or 0 (read it), or
 * -errno. A part's pieces are kept for its retries, like a copy would be. */
static int xfer_view(struct xfer *x, uint64_t off, size_t len)
{
	const struct upload_params *p = &x->u->p;
	unsigned max = 0;
	int n = p->view(p->read_ctx, off, len, NULL, 0);
	while (n > 0 && (unsigned)n > max) {
		free(x->pieces);
		max = (unsigned)n;
		if (!(x->pieces = malloc(max * sizeof(*x->pieces))))
			return -ENOMEM;
		n = p->view(p->read_ctx, off, len, x->pieces, max);
	}
	if (n <= 0) {
		free(x->pieces);
		x->pieces = NULL;
		return n;
	}
	x->n_pieces = (unsigned)n;
	return 1;
}

/* Body of a PUT or part: a slice of the buffer, the source's bytes in
 * place, or read from the source. */
static int xfer_load(struct xfer *x, uint64_t off, size_t len)
{
	struct upload *u = x->u;
	int rc;
	x->body_len = len;
	if (u->p.data) {
		x->body = (const char *)u->p.data + off;
	} else if (len && u->p.view && (rc = xfer_view(x, off, len)) != 0) {
		return rc < 0 ? rc : 0;
	} else if (len) {
		x->own_buf = part_buf_get(u->e, len, &x->own_cap);
		if (!x->own_buf)
			return -ENOMEM;
		if (u->p.read_slow) { /* with the digests, on a worker */
			x->body = x->own_buf;
			x->load_off = off;
			x->unread = true;
			return 0;
		}
		rc = u->p.read(u->p.read_ctx, off, x->own_buf, len);
		if (rc < 0)
			return rc;
		x->body = x->own_buf;
	}
	return 0;
}

/* ---- digests ------------------------------------------------------------ */

void upload_hash_run_many(void **jobs, unsigned n)
{
	while (n) {
		unsigned batch = n < MD5X_MAX ? n : MD5X_MAX, k = 0;
		struct md5x_body b[MD5X_MAX];
		struct s3_piece whole[MD5X_MAX];
		struct xfer *xs[MD5X_MAX];
		for (unsigned i = 0; i < batch; i++) {
			struct xfer *x = jobs[i];
			if (x->unread) {
				const struct upload_params *p = &x->u->p;
				x->read_err = p->read_slow(p->read_ctx,
							   x->load_off,
							   x->own_buf,
							   x->body_len);
				x->unread = false;
				if (x->read_err < 0)
					continue;
			}
			if (x->pieces) {
				b[k] = (struct md5x_body){.pieces = x->pieces,
							  .n_pieces = x->n_pieces};
			} else {
				whole[k] = (struct s3_piece){
					x->body ? x->body : "", x->body_len};
				b[k] = (struct md5x_body){.pieces = &whole[k],
							  .n_pieces = 1};
			}
			xs[k++] = x;
		}
		md5x(b, k);
		struct sha256x_body sb[MD5X_MAX];
		for (unsigned i = 0; i < k; i++)
			sb[i] = (struct sha256x_body){.pieces = b[i].pieces,
						      .n_pieces = b[i].n_pieces};
		sha256x(sb, k);
		for (unsigned i = 0; i < k; i++) {
			xs[i]->md5_ok = b[i].ok;
			memcpy(xs[i]->md5, b[i].md5, 16);
			sigv4_sha256_to_hex(sb[i].sha256, sb[i].ok,
					    xs[i]->sha256);
		}
		jobs += batch;
		n -= batch;
	}
}

void upload_hash_run(void *job)
{
	upload_hash_run_many(&job, 1);
}

/* The MD5 goes into Content-MD5 and the object's ETag. */
static void digests_apply(struct xfer *x)
{
	struct upload *u = x->u;
	x->hashing = false;
	x->hashed = true;
	s3_md5_b64(x->md5, x->md5_ok, x->md5_b64);
	if (x->kind == X_PART) {
		memcpy(u->md5s[x->part - 1], x->md5, 16);
	} else {
		char hex[33];
		hex16(x->md5, hex);
		snprintf(u->out.etag, sizeof(u->out.etag), "\"%s\"", hex);
	}
}

static bool any_hashing(const struct upload *u)
{
	const struct rc_list *pos;

	rc_list_for_each(pos, &u->xfers)
		if (rc_list_entry(pos, const struct xfer, link)->hashing)
			return true;
	return false;
}

/* A body's digests (and a read_slow body), by the driver's workers where
 * it has them: 1 when they are ready now, 0 when upload_hash_done will go
 * on, -errno when a read_slow body found no worker (never read here). */
static int digests_ready(struct xfer *x)
{
	struct upload_engine *e = x->u->e;
	if (x->hashed || (x->kind != X_PUT && x->kind != X_PART) ||
	    x->u->from_key)
		return 1; /* a copy sends no body */
	x->hashing = true;
	int r = e->drv.hash ? e->drv.hash(e->drv.ctx, x) : -ENOSYS;
	if (r == 0)
		return 0;
	if (x->unread) {
		x->hashing = false;
		return r;
	}
	upload_hash_run(x);
	digests_apply(x);
	return 1;
}

/* read_slow failed on the worker: the upload ends with that error. */
static void body_unreadable(struct xfer *x)
{
	struct upload *u = x->u;
	x->hashing = false;
	set_failure(u, x->read_err, NULL);
	if (u->out.err == x->read_err)
		snprintf(u->out.message, sizeof(u->out.message),
			 "reading part %u: %s", x->part,
			 strerror(-x->read_err));
	if (u->state == U_RUNNING)
		u->state = U_STOPPING;
}

void upload_hash_done(void *job)
{
	struct xfer *x = job;
	struct upload *u = x->u;
	upload_hold(u);
	if (x->read_err < 0)
		body_unreadable(x);
	else
		digests_apply(x);
	if (u->state != U_RUNNING || u->out.err) { /* stopped meanwhile */
		xfer_free(x);
		upload_advance(u);
	} else {
		xfer_launch(x);
	}
	upload_release(u);
}

static void start_simple(struct upload *u, enum xfer_kind kind)
{
	struct xfer *x = xfer_new(u, kind);
	if (!x) {
		set_failure(u, -ENOMEM, NULL);
		return;
	}
	xfer_launch(x);
}

/* Keeps up to concurrency parts in flight. */
static void launch_parts(struct upload *u)
{
	while (u->state == U_RUNNING && u->next_part <= u->n_parts &&
	       u->parts_inflight < u->p.concurrency) {
		struct xfer *x = xfer_new(u, X_PART);
		if (!x) {
			set_failure(u, -ENOMEM, NULL);
			u->state = U_STOPPING;
			return;
		}
		x->part = u->next_part++;
		u->parts_inflight++;
		uint64_t off;
		size_t len;
		part_bounds(u, x->part, &off, &len);
		int rc = u->from_key ? 0 : xfer_load(x, off, len);
		if (rc < 0) {
			set_failure(u, rc, NULL);
			snprintf(u->out.message, sizeof(u->out.message),
				 "reading part %u: %s", x->part, strerror(-rc));
			u->state = U_STOPPING;
			xfer_free(x);
			return;
		}
		xfer_launch(x);
	}
}

static void report_done(struct upload *u)
{
	struct upload_engine *e = u->e;
	if (u->state == U_DONE)
		return;
	u->state = U_DONE;
	e->active--;
	if (u->deleting && u->out.err && !u->delete_only) {
		/* The copy stands: only its source is left behind. */
		u->out.source_err = u->out.err;
		u->out.err = 0;
	}
	if (u->landed) {
		u->out.err = 0;
		u->out.http_status = 0;
		u->out.code[0] = u->out.message[0] = '\0';
	}
	if (u->out.err)
		u->out.etag[0] = '\0';
	u->out.parts = u->n_parts;
	u->p.done(u->p.done_ctx, &u->out);
	if (u->n_xfers == 0 && u->busy == 0)
		upload_free(u);
}

/* Takes every part transfer out of the driver. */
static void drop_parts(struct upload *u)
{
	struct upload_engine *e = u->e;
	struct rc_list *pos, *tmp;

	/* Never the last reference: u is U_STOPPING, not freed under us. */
	rc_list_for_each_safe(pos, tmp, &u->xfers) {
		struct xfer *x = rc_list_entry(pos, struct xfer, link);
		if (x->kind != X_PART || !x->req)
			continue; /* those waiting on a timer free themselves */
		e->drv.remove_transfer(e->drv.ctx, x->req);
		xfer_free(x);
	}
}

static bool has_kind(const struct upload *u, enum xfer_kind kind)
{
	const struct rc_list *pos;

	rc_list_for_each(pos, &u->xfers) {
		const struct xfer *x = rc_list_entry(pos, const struct xfer, link);
		if (x->kind == kind && (x->req || x->waiting))
			return true;
	}
	return false;
}

/* Decides the next step after any change: stop, abort, complete, finish. */
static void upload_advance(struct upload *u)
{
	if (u->state == U_DONE)
		return;
	if (u->out.err && u->state == U_RUNNING)
		u->state = U_STOPPING;
	if (u->state == U_STOPPING) {
		drop_parts(u);
		if (has_kind(u, X_CREATE) || has_kind(u, X_ABORT) ||
		    has_kind(u, X_COMPLETE) || has_kind(u, X_VERIFY) ||
		    has_kind(u, X_EXISTS) || has_kind(u, X_SOURCE))
			return; /* its answer decides what there is to abort */
		if (any_hashing(u))
			return; /* a worker still reads a body */
		if (u->upload_id[0]) {
			struct xfer *x = xfer_new(u, X_ABORT);
			if (x) {
				xfer_launch(x);
				return;
			}
		}
		report_done(u);
		return;
	}
	if (!u->p.part_size || u->n_parts == 0)
		return; /* a single PUT finishes in its own completion */
	if (!u->upload_id[0])
		return;
	launch_parts(u);
	if (u->state == U_STOPPING) {
		upload_advance(u);
		return;
	}
	if (u->parts_done == u->n_parts && !u->completing) {
		u->completing = true;
		upload_multipart_etag((const unsigned char (*)[16])u->md5s,
				      u->n_parts, u->out.etag, sizeof(u->out.etag));
		start_simple(u, u->p.no_overwrite ? X_EXISTS : X_COMPLETE);
		if (u->out.err)
			upload_advance(u);
	}
}

/* 412 to If-None-Match: X_EXISTS tells our own bytes from another's. */
static bool refused_overwrite(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	if (!u->p.no_overwrite || r->err != -ESTALE)
		return false;
	u->refused = true;
	xfer_free(x);
	start_simple(u, X_EXISTS);
	upload_advance(u);
	return true;
}

/* The key exists with other bytes: the upload fails with -EEXIST. */
static void set_exists(struct upload *u, const struct s3_result *r)
{
	struct s3_result ex = *r;
	ex.err = -EEXIST;
	ex.http_status = 412; /* what a server honouring If-None-Match says */
	snprintf(ex.code, sizeof(ex.code), "PreconditionFailed");
	snprintf(ex.message, sizeof(ex.message),
		 "the key holds another object (%s, ETag %.60s) and "
		 "overwrite = false", u->refused ? "If-None-Match refused"
						 : "HEAD before writing it",
		 r->etag);
	set_failure(u, -EEXIST, &ex);
}

/* A copy's source no longer has the ETag the job was given (412 to
 * x-amz-copy-source-if-match): another object replaced it, and copying
 * that one would move its bytes and then delete them. */
static void source_changed(struct upload *u, const struct s3_result *r)
{
	struct s3_result ex = *r;
	ex.err = -ESTALE;
	ex.http_status = 412;
	snprintf(ex.code, sizeof(ex.code), "PreconditionFailed");
	snprintf(ex.message, sizeof(ex.message),
		 "the source no longer has ETag %.60s: another object "
		 "replaced it", u->source_etag);
	set_failure(u, -ESTALE, &ex);
}

/* A request of u failed: for a copy given its source's ETag a 412 is
 * that source changed (x-amz-copy-source-if-match), else S3's failure. */
static void request_failed(struct upload *u, const struct s3_result *r)
{
	if (r->err == -ESTALE && u->source_etag)
		source_changed(u, r);
	else
		set_failure(u, r->err, r);
}

/* The object a HEAD found is this writer's: it carries the token only
 * the writer has. Never the bytes (an ETag): anyone may write the same
 * bytes to the key, and an upload taken for landed makes its writer the
 * owner of the object there (a RENAME then moves it away). */
static bool is_ours(const struct upload *u, const struct s3_result *r)
{
	return r->err == 0 && u->token[0] &&
	       strcmp(r->upload_token, u->token) == 0;
}

static void finish(struct upload *u);

static void on_exists_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	bool ours = is_ours(u, r);
	xfer_free(x);
	if (r->err && r->err != -ENOENT) {
		set_failure(u, r->err, r);
	} else if (u->refused) {
		if (!ours && r->err == -ENOENT && u->source_etag) {
			source_changed(u, r); /* not If-None-Match's 412 */
		} else if (!ours) {
			set_exists(u, r);
		} else if (u->upload_id[0]) {
			u->landed = true; /* abort ours, then success */
			u->state = U_STOPPING;
		} else {
			finish(u); /* our PUT or copy landed before */
			return;
		}
	} else if (r->err == 0 && !ours) {
		set_exists(u, r);
	} else if (u->state == U_RUNNING) {
		/* Absent, or our own earlier attempt: copy or complete (a
		 * server that ignores If-None-Match there leaves a race
		 * until that request). */
		start_simple(u, u->from_key && !u->n_parts ? X_COPY
							   : X_COMPLETE);
	}
	upload_advance(u);
}

static void on_put_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	if (refused_overwrite(x, r))
		return;
	xfer_free(x);
	if (r->err)
		set_failure(u, r->err, r);
	report_done(u);
}

static void on_create_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	char err[160];
	size_t len = 0;
	const char *body = s3_req_body(x->req, &len);
	if (r->err) {
		set_failure(u, r->err, r);
	} else if (s3_parse_upload_id(body, len, u->upload_id,
				      sizeof(u->upload_id), err, sizeof(err)) < 0) {
		struct s3_result bad = { .err = -EPROTO };
		snprintf(bad.message, sizeof(bad.message), "%s", err);
		set_failure(u, -EPROTO, &bad);
	}
	xfer_free(x);
	upload_advance(u);
}

/* An upload part's ETag is its header; a copy's is in its body
 * (CopyObjectResult, CopyPartResult). 0, or -EPROTO with the failure set. */
static int answered_etag(struct xfer *x, const struct s3_result *r,
			 char *etag, size_t etaglen)
{
	char err[160] = "";
	size_t len = 0;
	const char *body = s3_req_body(x->req, &len);
	int rc = 0;

	etag[0] = '\0';
	if (x->kind == X_COPY)
		rc = s3_parse_copy_result(body, len, etag, etaglen, err,
					  sizeof(err));
	else if (x->u->from_key)
		rc = s3_parse_copy_part_result(body, len, etag, etaglen, err,
					       sizeof(err));
	else
		snprintf(etag, etaglen, "%s", r->etag);
	if (rc == 0 && etag[0])
		return 0;
	struct s3_result bad = { .err = -EPROTO };
	if (x->kind == X_COPY)
		snprintf(bad.message, sizeof(bad.message), "CopyObject: %s",
			 err);
	else
		snprintf(bad.message, sizeof(bad.message),
			 "%s %u answered without an ETag%s%s",
			 x->u->from_key ? "UploadPartCopy" : "UploadPart",
			 x->part, err[0] ? ": " : "", err);
	set_failure(x->u, -EPROTO, &bad);
	return -EPROTO;
}

/* A copied part's ETag is the MD5 of its bytes (S3's and RGW's, for
 * objects not encrypted with KMS): the object's ETag is computed from
 * them as from an upload's parts when Complete's answer has none. */
static void md5_of_etag(const char *etag, unsigned char md5[16])
{
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(etag + 1 + 2 * i, "%2x", &v) != 1) {
			memset(md5, 0, 16);
			return;
		}
		md5[i] = (unsigned char)v;
	}
}

static void on_part_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	char etag[128];
	if (r->err) {
		request_failed(u, r);
	} else if (answered_etag(x, r, etag, sizeof(etag)) == 0) {
		snprintf(u->etags[x->part - 1], sizeof(u->etags[0]), "%s", etag);
		if (u->from_key)
			md5_of_etag(etag, u->md5s[x->part - 1]);
		u->parts_done++;
	}
	xfer_free(x);
	upload_advance(u);
}

/* The object is in place; a copy job then deletes its source. */
static void finish(struct upload *u)
{
	if (!u->from_key) {
		report_done(u);
		return;
	}
	u->deleting = true;
	start_simple(u, X_DELETE);
	if (u->out.err) /* not even sent: report_done makes it source_err */
		report_done(u);
}

static void on_copy_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	char etag[128];
	if (refused_overwrite(x, r))
		return;
	if (r->err)
		request_failed(u, r);
	else if (answered_etag(x, r, etag, sizeof(etag)) == 0)
		snprintf(u->out.etag, sizeof(u->out.etag), "%s", etag);
	xfer_free(x);
	if (u->out.err)
		report_done(u);
	else
		finish(u);
}

/* The first request that writes: a copy job's after its source's HEAD. */
static enum xfer_kind first_write(const struct upload *u)
{
	/* A copy that must not replace looks first (a server may ignore
	 * If-None-Match on CopyObject). */
	return u->n_parts ? X_CREATE : !u->from_key ? X_PUT :
	       u->p.no_overwrite ? X_EXISTS : X_COPY;
}

/* The HEAD of a copy's source before anything is written: it must still
 * have the ETag the job was given. x-amz-copy-source-if-match says the
 * same on every copy request, but a server may ignore it (Ceph RGW reads
 * x-amz-copy-if-match instead: tested); an object that replaces the
 * source between this HEAD and the copy is then copied. */
static void on_source_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	xfer_free(x);
	if (!r->err && strcmp(r->etag, u->source_etag) != 0)
		source_changed(u, r);
	else if (r->err)
		set_failure(u, r->err, r);
	else if (u->state == U_RUNNING)
		start_simple(u, first_write(u));
	upload_advance(u);
}

static void on_delete_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	if (r->err && r->err != -ENOENT) /* 404: gone (a retry's first try) */
		request_failed(u, r); /* 412: another object took the key */
	xfer_free(x);
	report_done(u);
}

/* A retried Complete whose first answer was lost finds NoSuchUpload: the
 * object is there if HEAD shows the ETag these parts make. */
static void on_complete_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	char etag[128] = "", err[160];
	size_t len = 0;
	const char *body = s3_req_body(x->req, &len);
	bool retried = x->attempt > 0;

	if (refused_overwrite(x, r))
		return;
	if (r->err == 0 && s3_parse_complete(body, len, etag, sizeof(etag),
					     err, sizeof(err)) < 0) {
		struct s3_result bad = { .err = -EPROTO };
		snprintf(bad.message, sizeof(bad.message), "%s", err);
		set_failure(u, -EPROTO, &bad);
	} else if (r->err == -ENOENT && retried) {
		xfer_free(x);
		start_simple(u, X_VERIFY);
		upload_advance(u);
		return;
	} else if (r->err) {
		set_failure(u, r->err, r);
	} else {
		if (strlen(etag) > 2) /* RGW's is empty */
			snprintf(u->out.etag, sizeof(u->out.etag), "%s", etag);
		u->upload_id[0] = '\0'; /* nothing left to abort */
		/* The object exists: a cancel that came too late loses. */
		memset(&u->out.err, 0, sizeof(u->out.err));
		u->out.http_status = 0;
		u->out.code[0] = u->out.message[0] = '\0';
	}
	xfer_free(x);
	if (u->out.err) {
		upload_advance(u);
		return;
	}
	finish(u);
}

static void on_verify_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	/* These parts' ETag, and (when it has one) the writer's token. */
	if (r->err == 0 && strcmp(r->etag, u->out.etag) == 0 &&
	    (!u->token[0] || is_ours(u, r))) {
		u->upload_id[0] = '\0';
		u->out.err = 0; /* as in on_complete_done */
		u->out.code[0] = u->out.message[0] = '\0';
		xfer_free(x);
		finish(u);
		return;
	}
	struct s3_result bad = *r;
	bad.err = r->err ? r->err : -EIO;
	snprintf(bad.message, sizeof(bad.message),
		 "upload vanished after Complete; HEAD ETag %.60s, expected %.60s",
		 r->etag, u->out.etag);
	set_failure(u, bad.err, &bad);
	xfer_free(x);
	upload_advance(u);
}

static void on_abort_done(struct xfer *x, const struct s3_result *r)
{
	struct upload *u = x->u;
	/* NoSuchUpload on a retry: the first attempt did it. */
	if (r->err && !(r->err == -ENOENT && x->attempt > 0)) {
		char reason[512];
		log_warn("upload %s: AbortMultipartUpload %s failed: %s",
			 rc_esc(u->key), rc_esc(u->upload_id),
			 s3_result_reason(r, reason, sizeof(reason)));
	}
	u->upload_id[0] = '\0';
	xfer_free(x);
	if (u->landed && u->from_key && !u->deleting) {
		finish(u); /* our copy is in place: its source goes */
		return;
	}
	report_done(u);
}

void *upload_req_tag(const struct s3_req *req)
{
	const struct xfer *x = s3_req_get_private(req);
	return x->u->p.tag;
}

void upload_transfer_done(struct s3_req *req, CURLcode code)
{
	struct xfer *x = s3_req_get_private(req);
	struct upload *u = x->u;
	struct s3_result r;
	s3_req_result(req, code, &r);
	if (u->e->drv.replied)
		u->e->drv.replied(u->e->drv.ctx, req, &r);
	if (r.err && xfer_retry(x, &r))
		return;
	upload_hold(u);
	if (r.err && r.retryable)
		log_debug("upload %s: giving up after %u retries",
			  rc_esc(x->u->key), x->attempt); /* the owner logs why */
	switch (x->kind) {
	case X_PUT: on_put_done(x, &r); break;
	case X_CREATE: on_create_done(x, &r); break;
	case X_PART: on_part_done(x, &r); break;
	case X_COMPLETE: on_complete_done(x, &r); break;
	case X_VERIFY: on_verify_done(x, &r); break;
	case X_ABORT: on_abort_done(x, &r); break;
	case X_EXISTS: on_exists_done(x, &r); break;
	case X_COPY: on_copy_done(x, &r); break;
	case X_DELETE: on_delete_done(x, &r); break;
	case X_SOURCE: on_source_done(x, &r); break;
	}
	upload_release(u);
}

/* ---- public ------------------------------------------------------------- */

struct upload_engine *upload_engine_new(struct s3_client *s3,
					const struct upload_driver *drv,
					const char *daemon_id)
{
	struct upload_engine *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->s3 = s3;
	e->drv = *drv;
	rc_list_init(&e->uploads);
	rc_list_init(&e->spares);
	if (daemon_id && !(e->daemon_id = strdup(daemon_id))) {
		free(e);
		return NULL;
	}
	return e;
}

void upload_engine_free(struct upload_engine *e)
{
	if (!e)
		return;
	part_bufs_release(e);
	free(e->daemon_id);
	free(e);
}

unsigned upload_engine_active(const struct upload_engine *e)
{
	return e->active;
}

unsigned upload_engine_pending(const struct upload_engine *e)
{
	return e->pending;
}

static int check_params(const struct upload_params *p, uint64_t part_size)
{
	if (!p->bucket || !p->key || !p->done ||
	    (!p->data && !p->read && !p->read_slow) ||
	    (p->read_slow && (p->data || p->read)) || (p->view && !p->read))
		return -EINVAL;
	if (part_size < UPLOAD_MIN_PART || part_size > (5ull << 30))
		return -EINVAL;
	if (p->size > part_size &&
	    (p->size + part_size - 1) / part_size > UPLOAD_MAX_PARTS)
		return -EINVAL;
	return 0;
}

static struct upload *upload_alloc(struct upload_engine *e,
				   const struct upload_params *p)
{
	struct upload *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->e = e;
	u->p = *p;
	rc_list_init(&u->xfers);
	u->bucket = strdup(p->bucket);
	u->key = strdup(p->key);
	if (p->token)
		snprintf(u->token, sizeof(u->token), "%s", p->token);
	u->p.token = NULL; /* the copy above is the one read */
	/* A copy job's params say multipart when it is one (size alone
	 * does not: CopyObject takes up to its threshold). */
	if ((p->size > p->part_size &&
	     (p->data || p->read || p->read_slow)) || p->multipart) {
		u->n_parts = (unsigned)((p->size + p->part_size - 1) / p->part_size);
		u->n_parts += u->n_parts == 0; /* one empty part */
		u->md5s = calloc(u->n_parts, sizeof(*u->md5s));
		u->etags = calloc(u->n_parts, sizeof(*u->etags));
	}
	if (!u->bucket || !u->key || (u->n_parts && (!u->md5s || !u->etags))) {
		free(u->bucket);
		free(u->key);
		free(u->md5s);
		free(u->etags);
		free(u);
		return NULL;
	}
	u->next_part = 1;
	rc_list_add(&e->uploads, &u->link);
	e->active++;
	return u;
}

/* The first request goes out from a zero-delay timer, so done never runs
 * inside upload_start. A single PUT's body is read now: it is the only
 * step, and a read error is then upload_start's to report. */
static int start_first(struct upload *u)
{
	struct upload_engine *e = u->e;
	enum xfer_kind first = u->delete_only ? X_DELETE :
			       u->source_etag ? X_SOURCE : first_write(u);
	struct xfer *x = xfer_new(u, first);
	if (!x)
		return -ENOMEM;
	if (x->kind == X_PUT) {
		int rc = xfer_load(x, 0, (size_t)u->p.size);
		if (rc < 0)
			return rc;
	}
	x->waiting = true;
	return e->drv.add_timer(e->drv.ctx, 0, xfer_retry_due, x);
}

/* Sends u's first request, or undoes upload_alloc: NULL with *err set. */
static struct upload *upload_go(struct upload *u, int *err)
{
	struct upload_engine *e = u->e;
	*err = start_first(u);
	if (*err == 0)
		return u;
	e->active--;
	u->state = U_DONE; /* never reported: upload_start fails instead */
	if (rc_list_empty(&u->xfers)) {
		upload_free(u);
		return NULL;
	}
	/* xfer_free frees u with the last: never read u after that one. */
	while (u->xfers.next != u->xfers.prev)
		xfer_free(rc_list_entry(u->xfers.next, struct xfer, link));
	xfer_free(rc_list_entry(u->xfers.next, struct xfer, link));
	return NULL;
}

struct upload *upload_start(struct upload_engine *e,
			    const struct upload_params *params, int *err)
{
	struct upload_params p = *params;
	if (!p.part_size)
		p.part_size = UPLOAD_DEFAULT_PART;
	if (!p.concurrency)
		p.concurrency = 4;
	*err = check_params(&p, p.part_size);
	if (!*err && p.read_slow && !e->drv.hash)
		*err = -EINVAL; /* nowhere to run it but the driver's thread */
	if (*err)
		return NULL;
	struct upload *u = upload_alloc(e, &p);
	if (!u) {
		*err = -ENOMEM;
		return NULL;
	}
	return upload_go(u, err);
}

/* The part size of a multipart copy: the asked one, grown to keep within
 * S3's 10000 parts (whole MiB). */
static uint64_t copy_part_size(const struct upload_copy_params *cp)
{
	uint64_t part = cp->part_size ? cp->part_size : UPLOAD_DEFAULT_PART;
	uint64_t least = (cp->size + UPLOAD_MAX_PARTS - 1) / UPLOAD_MAX_PARTS;
	least = (least + (1u << 20) - 1) & ~((1ull << 20) - 1);
	return part < least ? least : part;
}

static int check_copy_params(const struct upload_copy_params *cp)
{
	if (!cp->bucket || !cp->from_key || !cp->to_key || !cp->done ||
	    strcmp(cp->from_key, cp->to_key) == 0)
		return -EINVAL;
	if (cp->threshold && (cp->threshold < UPLOAD_MIN_PART ||
			      cp->threshold > UPLOAD_COPY_MAX))
		return -EINVAL;
	uint64_t part = copy_part_size(cp);
	if (part < UPLOAD_MIN_PART || part > UPLOAD_COPY_MAX)
		return -EINVAL;
	return 0;
}

struct upload *upload_copy_start(struct upload_engine *e,
				 const struct upload_copy_params *cp, int *err)
{
	*err = check_copy_params(cp);
	if (*err)
		return NULL;
	uint64_t threshold = cp->threshold ? cp->threshold : UPLOAD_COPY_MAX;
	struct upload_params p = {
		.bucket = cp->bucket, .key = cp->to_key, .size = cp->size,
		.part_size = copy_part_size(cp),
		.concurrency = cp->concurrency ? cp->concurrency : 4,
		.done = cp->done, .done_ctx = cp->done_ctx,
		.multipart = cp->size > threshold, .tag = cp->tag,
		.no_overwrite = cp->no_overwrite, .token = cp->token,
	};
	struct upload *u = upload_alloc(e, &p);
	if (!u) {
		*err = -ENOMEM;
		return NULL;
	}
	u->from_key = strdup(cp->from_key);
	if (cp->source_etag && cp->source_etag[0])
		u->source_etag = strdup(cp->source_etag);
	if (!u->from_key ||
	    (cp->source_etag && cp->source_etag[0] && !u->source_etag) ||
	    asprintf(&u->copy_src, "%s/%s", cp->bucket, cp->from_key) < 0) {
		u->copy_src = NULL;
		*err = -ENOMEM;
		e->active--;
		upload_free(u);
		return NULL;
	}
	return upload_go(u, err);
}

struct upload *upload_delete_start(struct upload_engine *e,
				   const struct upload_delete_params *dp,
				   int *err)
{
	if (!dp->bucket || !dp->key || !dp->done) {
		*err = -EINVAL;
		return NULL;
	}
	struct upload_params p = {
		.bucket = dp->bucket, .key = dp->key,
		.done = dp->done, .done_ctx = dp->done_ctx, .tag = dp->tag,
	};
	struct upload *u = upload_alloc(e, &p);
	if (!u) {
		*err = -ENOMEM;
		return NULL;
	}
	/* The DELETE names from_key (a copy job's source): the same key. */
	u->from_key = strdup(dp->key);
	if (!u->from_key) {
		*err = -ENOMEM;
		e->active--;
		upload_free(u);
		return NULL;
	}
	if (dp->if_match && dp->if_match[0] &&
	    !(u->source_etag = strdup(dp->if_match))) {
		*err = -ENOMEM;
		e->active--;
		upload_free(u);
		return NULL;
	}
	u->deleting = u->delete_only = true; /* upload_cancel leaves it be */
	return upload_go(u, err);
}

/* done may run inside upload_cancel (a single PUT, or nothing to abort). */
void upload_cancel(struct upload *u)
{
	if (u->state == U_DONE || u->deleting)
		return; /* a copy in place: its source's DELETE finishes */
	struct upload_engine *e = u->e;
	upload_hold(u);
	u->cancelled = true;
	set_failure(u, -ECANCELED, NULL);
	if (u->out.err == -ECANCELED)
		snprintf(u->out.message, sizeof(u->out.message), "cancelled");
	if (!u->n_parts) {
		/* A single PUT: take it back (one waiting on its timer frees
		 * itself when that fires) and report. */
		struct rc_list *pos;
		rc_list_for_each(pos, &u->xfers) {
			struct xfer *x = rc_list_entry(pos, struct xfer, link);
			if (x->req) {
				e->drv.remove_transfer(e->drv.ctx, x->req);
				xfer_free(x); /* u is held: not freed here */
				break;
			}
		}
		if (!any_hashing(u)) /* else when its digests are done */
			report_done(u);
	} else {
		upload_advance(u);
	}
	upload_release(u);
}

const char *upload_id(const struct upload *u)
{
	return u->upload_id;
}

bool upload_engine_owns(void *engine, const char *key, const char *id)
{
	struct upload_engine *e = engine;
	const struct rc_list *pos;

	rc_list_for_each(pos, &e->uploads) {
		const struct upload *u = rc_list_entry(pos, const struct upload,
						       link);
		if (u->state != U_DONE && strcmp(u->key, key) == 0 &&
		    strcmp(u->upload_id, id) == 0)
			return true;
	}
	return false;
}

/* ---- blocking helpers --------------------------------------------------- */

/* "2024-05-01T12:34:56.000Z" as seconds since the epoch; -1 if unparsable. */
static int64_t parse_iso8601(const char *s)
{
	struct tm tm = {0};
	const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end)
		return -1;
	return (int64_t)timegm(&tm);
}

static int abort_one(struct s3_client *s3, const char *bucket,
		     const struct s3_upload *up, struct s3_result *res)
{
	struct s3_req_params p = {
		.op = S3_ABORT_MULTIPART,
		.bucket = bucket,
		.key = up->key,
		.upload_id = up->upload_id,
	};
	int rc = s3_perform(s3, &p, res, NULL, NULL);
	return rc == -ENOENT ? 0 : rc; /* gone already */
}

/* One page of the listing; aborts what qualifies. Returns the count. */
static int cleanup_page(struct s3_client *s3, const char *bucket,
			const struct s3_upload_page *pg, int64_t cutoff,
			bool (*keep)(void *, const char *, const char *),
			void *keep_ctx, struct s3_result *res)
{
	int n = 0;
	for (size_t i = 0; i < pg->n_uploads; i++) {
		const struct s3_upload *up = &pg->uploads[i];
		int64_t t = parse_iso8601(up->initiated);
		if (t < 0 || t > cutoff)
			continue;
		if (keep && keep(keep_ctx, up->key, up->upload_id))
			continue;
		int rc = abort_one(s3, bucket, up, res);
		if (rc < 0)
			return rc;
		log_info("aborted abandoned upload %s of %s (initiated %s)",
			 rc_esc(up->upload_id), rc_esc(up->key),
			 rc_esc(up->initiated));
		n++;
	}
	return n;
}

int upload_cleanup_abandoned(struct s3_client *s3, const char *bucket,
			     const char *prefix, unsigned older_than_s,
			     bool (*keep)(void *ctx, const char *key,
					  const char *upload_id),
			     void *keep_ctx, struct s3_result *res)
{
	int64_t cutoff = (int64_t)time(NULL) - older_than_s;
	char *key_marker = NULL, *id_marker = NULL;
	int total = 0, rc = 0;

	for (;;) {
		struct s3_req_params p = {
			.op = S3_LIST_MULTIPART,
			.bucket = bucket,
			.prefix = prefix,
			.key_marker = key_marker,
			.upload_id_marker = id_marker,
		};
		char *body = NULL, err[160];
		size_t len = 0;
		struct s3_upload_page pg = {0};
		rc = s3_perform(s3, &p, res, &body, &len);
		if (rc == 0 && s3_parse_uploads(body, len, &pg, err, sizeof(err)) < 0) {
			rc = res->err = -EPROTO;
			snprintf(res->message, sizeof(res->message), "%s", err);
		}
		free(body);
		if (rc == 0)
			rc = cleanup_page(s3, bucket, &pg, cutoff, keep, keep_ctx, res);
		if (rc > 0)
			total += rc;
		free(key_marker);
		free(id_marker);
		key_marker = id_marker = NULL;
		bool more = rc >= 0 && pg.truncated && pg.next_key_marker;
		if (more) {
			key_marker = strdup(pg.next_key_marker);
			id_marker = pg.next_upload_id_marker ?
				    strdup(pg.next_upload_id_marker) : NULL;
		}
		s3_upload_page_free(&pg);
		if (rc < 0)
			return rc;
		if (!more)
			return total;
		if (!key_marker)
			return -ENOMEM;
	}
}

void upload_outcome_result(const struct upload_outcome *out,
			   struct s3_result *res)
{
	memset(res, 0, sizeof(*res));
	res->err = out->err ? out->err : out->source_err;
	res->http_status = out->http_status;
	snprintf(res->code, sizeof(res->code), "%s", out->code);
	snprintf(res->message, sizeof(res->message), "%s", out->message);
	snprintf(res->etag, sizeof(res->etag), "%s", out->etag);
}
