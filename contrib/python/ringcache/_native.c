/* _native.c - owns ringcache._native, the CPython extension that does the
 * Python binding's hot read path in C: a session (the rc_client, attached
 * and detached here; the ctypes side of the package borrows it for every
 * other call), open, close, zero-copy reads handed out as read-only
 * memoryviews over the lease, and a batch read of whole objects
 * (rc_read_many: one READ_KEY entry per sample, all in one submission).
 *
 * Why C: through ctypes a warm sample costs tens of microseconds of Python
 * (argument conversion, struct boxing, one ring round trip per call); here
 * a batch costs one round trip and a few small allocations per sample.
 *
 * Ownership: a Session owns its struct rc_client (its memory and its
 * session with the daemon). A View (the exporter behind each memoryview
 * handed out) owns one lease and a strong reference to its Session; when
 * the last memoryview, numpy array or tensor over it goes, the lease is
 * released lazily (rc_release_lazy: it goes with the session's next
 * submission, or at once when RELEASE_BATCH are waiting; libringcache
 * consumes the completions, so they mix with every other call). A View
 * dropped while its session is inside a call (another thread, the GIL
 * released) is queued and posted when the call returns.
 *
 * A daemon restart is a pause: open and close are libringcache's rc_open
 * and rc_close (handles re-opened under their numbers), a read resubmits
 * what rc_wait_cqe's -ECONNRESET says was lost, and read_many re-attaches
 * inside libringcache (docs/RESTART.md).
 *
 * Use: one Session per thread, as for rc_client. A call that finds the
 * session busy (another thread inside it) raises RuntimeError. Blocking
 * waits release the GIL. In a forked child a Session (and every View of
 * it) is dead: views do not release, detach() closes the copies of the fds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <poll.h>
#include <pthread.h>
#include <sched.h>

#include "ringcache.h"

/* Lazy releases posted but not published that make us submit anyway. */
#define RELEASE_BATCH 16u
/* Extents asked per sample of a batch; a larger object is continued. */
#define EXT_PER_KEY 4u

/* Bumped in every forked child: sessions of an older generation are the
 * parent's. */
static unsigned fork_generation;
static PyObject *error_classes; /* errno -> exception class (__init__.py) */

static void on_fork_child(void)
{
	fork_generation++;
}

/* ---- Session ------------------------------------------------------------ */

struct deferred {
	uint8_t op;   /* RC_OP_RELEASE (or RC_OP_CLOSE) */
	uint32_t id;  /* lease or handle */
};

typedef struct {
	PyObject_HEAD
	struct rc_client *c;
	unsigned generation;  /* fork_generation at attach */
	int attached;
	int busy;             /* a call is inside (the GIL may be released) */
	int closing;          /* detach() came while views lived */
	Py_ssize_t views;     /* live Views: the mappings stay while any */
	uint32_t unsent;      /* lazy entries posted since the last submit */
	struct deferred *queue; /* dropped while busy, not yet posted */
	size_t queued, queue_cap;
	struct Batch *pending_batch; /* started, not yet waited for */
} Session;

/* A read_many_start batch: in flight until the next call on its session
 * (or its wait()) completes it into results. */
typedef struct Batch {
	PyObject_HEAD
	Session *session;
	int dataset;
	PyObject *keys;              /* tuple: the requests' key bytes live here */
	struct rc_read_req *q;
	struct rc_extent *e;
	struct rc_read_batch *batch; /* NULL once completed */
	PyObject *results;           /* list, once completed */
	int err;                     /* the wait's error, once completed */
} Batch;

typedef struct {
	PyObject_HEAD
	Session *session;
	const void *data;
	Py_ssize_t len;
	uint32_t lease;
} View;

static PyTypeObject SessionType;
static PyTypeObject ViewType;
static PyTypeObject BatchType;
static void batch_complete(Batch *b);

static int session_live(const Session *s)
{
	return s->attached && s->generation == fork_generation;
}

/* OSError(errno, "what: text"[, filename]): OSError's constructor picks
 * the subclass (FileNotFoundError, ...), error_classes ringcache's own.
 * text is rc_strerror's unless the caller has the daemon's. */
static PyObject *make_error_text(int res, const char *what,
				 PyObject *filename, const char *text)
{
	PyObject *cls = PyExc_OSError;
	if (error_classes) {
		PyObject *k = PyLong_FromLong(-res);
		PyObject *v = k ? PyDict_GetItemWithError(error_classes, k) : NULL;
		Py_XDECREF(k);
		if (v)
			cls = v;
		else if (PyErr_Occurred())
			return NULL;
	}
	PyObject *msg = PyUnicode_FromFormat("%s: %s", what, text);
	if (!msg)
		return NULL;
	PyObject *e = filename ?
		PyObject_CallFunction(cls, "iOO", -res, msg, filename) :
		PyObject_CallFunction(cls, "iO", -res, msg);
	Py_DECREF(msg);
	return e;
}

static PyObject *make_error(int res, const char *what, PyObject *filename)
{
	return make_error_text(res, what, filename, rc_strerror(res));
}

static PyObject *raise_text(int res, const char *what, PyObject *filename,
			    const char *text)
{
	PyObject *e = make_error_text(res, what, filename, text);
	if (e) {
		PyErr_SetObject((PyObject *)Py_TYPE(e), e);
		Py_DECREF(e);
	}
	return NULL;
}

static PyObject *raise_error(int res, const char *what, PyObject *filename)
{
	PyObject *e = make_error(res, what, filename);
	if (e) {
		PyErr_SetObject((PyObject *)Py_TYPE(e), e);
		Py_DECREF(e);
	}
	return NULL;
}

static int queue_push(Session *s, uint8_t op, uint32_t id)
{
	if (s->queued == s->queue_cap) {
		size_t cap = s->queue_cap ? 2 * s->queue_cap : 64;
		struct deferred *q = PyMem_Realloc(s->queue, cap * sizeof(*q));
		if (!q)
			return -ENOMEM; /* the lease stays until detach */
		s->queue = q;
		s->queue_cap = cap;
	}
	s->queue[s->queued++] = (struct deferred){op, id};
	return 0;
}

/* Posts the queued RELEASE/CLOSE entries lazily (an SQE each; they go
 * with the next submission). */
static void post_queued(Session *s)
{
	for (size_t i = 0; i < s->queued; i++) {
		if (s->queue[i].op == RC_OP_CLOSE)
			rc_close_lazy(s->c, s->queue[i].id);
		else
			rc_release_lazy(s->c, s->queue[i].id);
	}
	s->unsent += (uint32_t)s->queued;
	s->queued = 0;
}

static void maybe_submit(Session *s)
{
	if (s->unsent >= RELEASE_BATCH) {
		rc_submit(s->c);
		s->unsent = 0;
	}
}

static void release_now(Session *s, uint32_t lease)
{
	if (lease != RC_NO_LEASE) {
		rc_release_lazy(s->c, lease);
		s->unsent++;
	}
}

/* Called by a View's dealloc (any thread holding the GIL). */
static void session_release(Session *s, uint32_t lease)
{
	if (!session_live(s))
		return;
	if (s->busy) {
		queue_push(s, RC_OP_RELEASE, lease);
		return;
	}
	release_now(s, lease);
	maybe_submit(s);
}

/* The next completion of ours (libringcache consumes the lazy ones);
 * blocks without the GIL. */
static int next_cqe(Session *s, struct rc_cqe *out)
{
	struct rc_cqe *cqe = rc_peek_cqe(s->c);
	if (!cqe) {
		int r;
		Py_BEGIN_ALLOW_THREADS
		r = rc_wait_cqe(s->c, &cqe);
		Py_END_ALLOW_THREADS
		if (r < 0)
			return r;
	}
	*out = *cqe;
	rc_cqe_seen(s->c);
	return 0;
}

/* An SQE; when the SQ is full of lazy entries and nothing of the caller's
 * is in flight, publishes them and yields until the daemon takes some. */
static struct rc_sqe *get_sqe(Session *s, size_t inflight)
{
	struct rc_sqe *sqe;
	for (unsigned tries = 0; !(sqe = rc_get_sqe(s->c)) && !inflight &&
				 tries < 100000; tries++) {
		if (rc_submit(s->c) < 0)
			return NULL;
		s->unsent = 0;
		rc_peek_cqe(s->c);
		sched_yield();
	}
	return sqe;
}

/* Publishes what is posted and waits until the daemon has completed every
 * entry of this client (c->inflight counts the lazy ones too). */
static int wait_idle(Session *s)
{
	struct rc_client *c = s->c;
	int r = rc_submit(c);
	s->unsent = 0;
	while (r >= 0) {
		rc_peek_cqe(c);
		if (c->inflight == 0)
			return 0;
		atomic_fetch_or(&c->hdr->cq_flags, RC_CQ_NEED_WAKEUP);
		if (rc_peek_cqe(c))
			return -EPROTO; /* a completion nobody waits for */
		if (c->inflight == 0)
			return 0;
		struct pollfd p[2] = {{c->cq_efd, POLLIN, 0},
				      {c->sock, POLLRDHUP, 0}};
		Py_BEGIN_ALLOW_THREADS
		r = poll(p, 2, 100);
		Py_END_ALLOW_THREADS
		if (r < 0)
			r = errno == EINTR ? 0 : -errno;
		uint64_t v;
		if (r > 0 && (p[0].revents & POLLIN) &&
		    read(c->cq_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			r = -errno;
		if (r > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			/* The daemon went: what it had went with it, and the
			 * session comes back with nothing in flight. */
			Py_BEGIN_ALLOW_THREADS
			r = rc_reconnect(c);
			Py_END_ALLOW_THREADS
			if (r >= 0)
				return 0;
		}
	}
	return r;
}

/* Entry of every call: one thread at a time, a live session, the queue
 * flushed into the SQ (sent with the call's own entries). */
static int enter(Session *s)
{
	if (!session_live(s) || s->closing) {
		PyErr_SetString(PyExc_ValueError,
				s->attached && !s->closing ?
				"ringcache session of the parent process" :
				"ringcache session is detached");
		return -1;
	}
	if (s->busy) {
		PyErr_SetString(PyExc_RuntimeError, "ringcache client busy: "
				"a Client is not thread-safe");
		return -1;
	}
	s->busy = 1;
	/* First: a batch nobody waits for any more drops its views here, and
	 * their releases go with this call. */
	if (s->pending_batch)
		batch_complete(s->pending_batch);
	post_queued(s);
	return 0;
}

static void leave(Session *s)
{
	s->busy = 0;
	post_queued(s);
	maybe_submit(s);
}

static int Session_init(Session *s, PyObject *args, PyObject *kw)
{
	static char *names[] = {"socket", "gpu", "numa_node", NULL};
	const char *path = NULL;
	int gpu = -1, node = -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zii", names, &path, &gpu,
					 &node))
		return -1;
	if (s->c) {
		PyErr_SetString(PyExc_RuntimeError, "Session already attached");
		return -1;
	}
	s->c = PyMem_Calloc(1, sizeof(*s->c));
	if (!s->c) {
		PyErr_NoMemory();
		return -1;
	}
	struct rc_attach_opts opts = {.gpu = gpu, .numa_node = node};
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = rc_attach(s->c, path, &opts);
	Py_END_ALLOW_THREADS
	if (r < 0) {
		PyObject *p = path ? PyUnicode_FromString(path) : NULL;
		raise_error(r, "attach", p);
		Py_XDECREF(p);
		return -1;
	}
	s->attached = 1;
	s->generation = fork_generation;
	return 0;
}

static void Session_dealloc(Session *s)
{
	if (s->attached)
		rc_detach(s->c);
	PyMem_Free(s->c);
	PyMem_Free(s->queue);
	Py_TYPE(s)->tp_free((PyObject *)s);
}

/* ---- reads -------------------------------------------------------------- */

/* One block-sized READ of a batch; item is the key (or 0 for read()). */
struct piece {
	uint32_t item, handle;
	uint64_t offset, len;
	int32_t res;
	uint32_t lease;
	const void *data;
};

/* Submits every piece's READ, at most window in flight; fills res, data,
 * lease. Returns 0 or a negated errno of the session itself (then the
 * pieces' leases are lost with it). */
static int read_pieces(Session *s, struct piece *p, size_t n)
{
	size_t next = 0, inflight = 0;
	uint32_t window = s->c->sq_mask + 1;
	for (size_t i = 0; i < n; i++) {
		/* A handle that did not survive a daemon restart. */
		int err = rc_handle_check(s->c, p[i].handle);
		if (err < 0)
			return err;
		p[i].res = 1; /* not back yet */
	}
	while (next < n || inflight) {
		for (; next < n && inflight < window; next++) {
			if (p[next].res != 1)
				continue; /* back before a re-attach */
			struct rc_sqe *sqe = get_sqe(s, inflight);
			if (!sqe)
				break;
			rc_prep_read(sqe, p[next].handle, p[next].offset,
				     p[next].len, next);
			inflight++;
		}
		int r = rc_submit(s->c);
		struct rc_cqe cqe;
		if (r >= 0 && !inflight)
			r = -EBUSY; /* the SQ stayed full */
		if (r >= 0 && (r = next_cqe(s, &cqe)) == -ECONNRESET) {
			/* The daemon restarted and the session is back
			 * without our READs: those not back go again. What
			 * came back stays readable (old arena, old lease). */
			int err = rc_handle_check(s->c, p[0].handle);
			if (err < 0)
				return err;
			next = 0;
			inflight = 0;
			continue;
		}
		if (r < 0)
			return r;
		inflight--;
		if (cqe.user_data >= n)
			return -EPROTO;
		struct piece *q = &p[cqe.user_data];
		q->res = cqe.res;
		q->lease = cqe.lease;
		q->data = cqe.res > 0 ? rc_cqe_data(s->c, &cqe) : NULL;
		if (cqe.res > 0 && !q->data)
			q->res = -EFAULT; /* an arena this process did not map */
	}
	return 0;
}

/* A memoryview over extents [0, n) of one object: zero-copy over a single
 * leased block (the View owns the lease), else a copy into bytes (the
 * leases released at once). */
static PyObject *view_of(Session *s, struct rc_extent *e, size_t n)
{
	if (n == 1 && e[0].lease != RC_NO_LEASE) {
		View *v = PyObject_New(View, &ViewType);
		if (!v)
			return NULL;
		Py_INCREF(s);
		s->views++;
		v->session = s;
		v->data = e[0].data;
		v->len = e[0].len;
		v->lease = e[0].lease;
		e[0].lease = RC_NO_LEASE;
		PyObject *mv = PyMemoryView_FromObject((PyObject *)v);
		Py_DECREF(v);
		return mv;
	}
	Py_ssize_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += e[i].len;
	PyObject *b = PyBytes_FromStringAndSize(NULL, total);
	char *out = b ? PyBytes_AS_STRING(b) : NULL;
	for (size_t i = 0; i < n; i++) {
		if (out) {
			memcpy(out, e[i].data, e[i].len);
			out += e[i].len;
		}
		release_now(s, e[i].lease);
		e[i].lease = RC_NO_LEASE;
	}
	if (!b)
		return NULL;
	PyObject *mv = PyMemoryView_FromObject(b);
	Py_DECREF(b);
	return mv;
}

/* Pieces as extents: those before the first empty one (EOF); the leases
 * of any after it are released. Returns the count. */
static size_t extents_of(Session *s, struct piece *p, size_t n,
			 struct rc_extent *e)
{
	size_t m = 0;
	int eof = 0;
	for (size_t i = 0; i < n; i++) {
		eof = eof || p[i].res <= 0;
		if (eof)
			release_now(s, p[i].lease);
		else
			e[m++] = (struct rc_extent){p[i].data,
						    (uint32_t)p[i].res,
						    p[i].lease};
	}
	return m;
}

/* Splits [offset, offset + len) of handle into block-aligned pieces. */
static size_t split(struct piece *p, uint32_t item, uint32_t handle,
		    uint64_t offset, uint64_t len, uint64_t bs)
{
	size_t n = 0;
	for (uint64_t pos = offset; pos < offset + len; n++) {
		uint64_t end = (pos / bs + 1) * bs;
		if (end > offset + len)
			end = offset + len;
		p[n] = (struct piece){item, handle, pos, end - pos, 0,
				      RC_NO_LEASE, NULL};
		pos = end;
	}
	return n;
}

static size_t blocks_of(uint64_t offset, uint64_t len, uint64_t bs)
{
	return len ? (offset + len - 1) / bs - offset / bs + 1 : 0;
}

/* ---- Session methods ---------------------------------------------------- */

static PyObject *Session_read(Session *s, PyObject *args)
{
	unsigned int handle;
	unsigned long long offset, len;
	if (!PyArg_ParseTuple(args, "IKK", &handle, &offset, &len))
		return NULL;
	if (len > RC_MAX_IO || offset > UINT64_MAX - len) {
		PyErr_SetString(PyExc_ValueError, "read: range too large");
		return NULL;
	}
	if (enter(s) < 0)
		return NULL;
	size_t n = blocks_of(offset, len, s->c->block_size);
	struct piece one, *p = n > 1 ? PyMem_Malloc(n * sizeof(*p)) : &one;
	struct rc_extent e1, *e = n > 1 ? PyMem_Malloc(n * sizeof(*e)) : &e1;
	PyObject *ret = NULL;
	if (!p || !e) {
		PyErr_NoMemory();
		goto out;
	}
	split(p, 0, handle, offset, len, s->c->block_size);
	int r = read_pieces(s, p, n);
	int err = r;
	for (size_t i = 0; !err && i < n; i++)
		if (p[i].res < 0)
			err = p[i].res;
	if (err) {
		for (size_t i = 0; r == 0 && i < n; i++)
			release_now(s, p[i].lease);
		/* The daemon's words (dataset, bucket, cause) for this
		 * single call's failure. */
		raise_text(err, "read", NULL, rc_last_error(s->c, err));
	} else {
		ret = view_of(s, e, extents_of(s, p, n, e));
	}
out:
	if (p && p != &one)
		PyMem_Free(p);
	if (e && e != &e1)
		PyMem_Free(e);
	leave(s);
	return ret;
}

/* key (str or bytes) -> pointer and length, checked against RC_MAX_KEY. */
static int key_bytes(PyObject *key, const char **k, Py_ssize_t *len)
{
	if (PyUnicode_Check(key))
		*k = PyUnicode_AsUTF8AndSize(key, len);
	else if (PyBytes_Check(key) && PyBytes_AsStringAndSize(key, (char **)k,
							      len) == 0)
		;
	else {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "key must be str or bytes");
		return -1;
	}
	return *k ? 0 : -1;
}

static PyObject *Session_open(Session *s, PyObject *args)
{
	int dataset;
	PyObject *key;
	const char *k;
	Py_ssize_t len;
	if (!PyArg_ParseTuple(args, "iO", &dataset, &key) ||
	    key_bytes(key, &k, &len) < 0)
		return NULL;
	if ((size_t)len > RC_MAX_KEY || memchr(k, 0, (size_t)len)) {
		raise_error(-ENAMETOOLONG, "open", key);
		return NULL;
	}
	if (enter(s) < 0)
		return NULL;
	/* libringcache's rc_open: the handle is re-opened under its number
	 * if the daemon restarts. */
	char *kz = PyMem_Malloc((size_t)len + 1);
	struct rc_stat st;
	int r = -ENOMEM;
	if (kz) {
		memcpy(kz, k, (size_t)len);
		kz[len] = 0;
		Py_BEGIN_ALLOW_THREADS
		r = rc_open(s->c, dataset, kz, &st);
		Py_END_ALLOW_THREADS
		PyMem_Free(kz);
	}
	s->unsent = 0;
	PyObject *ret = NULL;
	if (r >= 0)
		ret = Py_BuildValue("iKs", r, (unsigned long long)st.size,
				    st.etag);
	else /* the daemon's words: dataset, bucket, cause */
		raise_text(r, "open", key, rc_last_error(s->c, r));
	leave(s);
	return ret;
}

static PyObject *Session_close(Session *s, PyObject *args)
{
	unsigned int handle;
	if (!PyArg_ParseTuple(args, "I", &handle) || enter(s) < 0)
		return NULL;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = rc_close(s->c, handle);
	Py_END_ALLOW_THREADS
	s->unsent = 0;
	leave(s);
	if (r < 0)
		return raise_error(r, "close", NULL);
	Py_RETURN_NONE;
}

/* The rest of a sample larger than EXT_PER_KEY blocks: rc_read_key from
 * where the batch stopped, into a larger extent array (*e, *n updated).
 * Returns 0 or a negated errno (then every lease of it is released). */
static int read_rest(Session *s, int dataset, struct rc_read_req *q,
		     struct rc_extent **e, size_t *n)
{
	uint64_t done = (uint64_t)q->res, bs = s->c->block_size;
	size_t more = blocks_of(done, q->size - done, bs);
	struct rc_extent *all = PyMem_Malloc((q->n_ext + more) * sizeof(*all));
	int r = all ? 0 : -ENOMEM;
	struct rc_stat st = {0};
	if (all) {
		memcpy(all, q->ext, q->n_ext * sizeof(*all));
		Py_BEGIN_ALLOW_THREADS
		r = rc_read_key(s->c, dataset, q->key, done, 0,
				all + q->n_ext, (int)more, &st);
		Py_END_ALLOW_THREADS
	}
	if (r >= 0 && (st.size != q->size || strcmp(st.etag, q->etag))) {
		for (int i = 0; i < r; i++)
			release_now(s, all[q->n_ext + i].lease);
		r = -ESTALE; /* changed between the two reads */
	}
	if (r < 0) {
		for (uint32_t i = 0; i < q->n_ext; i++)
			release_now(s, q->ext[i].lease);
		PyMem_Free(all);
		return r;
	}
	*e = all;
	*n = q->n_ext + (size_t)r;
	return 0;
}

/* Key i's result: its memoryview, or its OSError. */
static PyObject *sample_of(Session *s, int dataset, struct rc_read_req *q,
			   PyObject *key)
{
	struct rc_extent *e = q->ext;
	size_t n = q->n_ext;
	int r = (int)(q->res < 0 ? q->res : 0);
	if (r == 0 && n == EXT_PER_KEY && (uint64_t)q->res < q->size)
		r = read_rest(s, dataset, q, &e, &n);
	if (r < 0)
		return make_error(r, "read", key);
	PyObject *v = view_of(s, e, n);
	if (e != q->ext)
		PyMem_Free(e);
	return v;
}

/* The requests of a batch: keys (str or bytes, kept alive by the tuple)
 * and room for EXT_PER_KEY extents each. A key with a NUL byte is
 * refused here (-EINVAL): as a C string it would name another object. */
static int batch_reqs(PyObject *keys, struct rc_read_req *q,
		      struct rc_extent *e)
{
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
		const char *k;
		Py_ssize_t len;
		if (key_bytes(PyTuple_GET_ITEM(keys, i), &k, &len) < 0)
			return -1;
		q[i].key = strlen(k) == (size_t)len ? k : NULL;
		q[i].ext = e + (size_t)i * EXT_PER_KEY;
		q[i].max_ext = EXT_PER_KEY;
	}
	return 0;
}

static PyObject *batch_results(Session *s, int dataset, PyObject *keys,
			       struct rc_read_req *q)
{
	Py_ssize_t n = PyTuple_GET_SIZE(keys);
	PyObject *list = PyList_New(n);
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *key = PyTuple_GET_ITEM(keys, i);
		PyObject *item = !list ? NULL : q[i].key ?
			sample_of(s, dataset, &q[i], key) :
			make_error(-EINVAL, "read", key);
		if (!item) { /* no memory: what is left is released */
			Py_CLEAR(list);
			for (uint32_t j = 0; q[i].res >= 0 && j < q[i].n_ext; j++)
				release_now(s, q[i].ext[j].lease);
			continue;
		}
		PyList_SET_ITEM(list, i, item);
	}
	return list;
}

/* ---- pipelined batches -------------------------------------------------- */

/* Completes b (its session entered, b its pending batch): waits for its
 * entries, then makes its results. */
static void batch_complete(Batch *b)
{
	Session *s = b->session;
	int r;
	s->pending_batch = NULL;
	Py_BEGIN_ALLOW_THREADS
	r = rc_read_many_wait(b->batch);
	Py_END_ALLOW_THREADS
	b->batch = NULL;
	b->err = r;
	if (r == 0) {
		b->results = batch_results(s, b->dataset, b->keys, b->q);
		if (!b->results) { /* no memory: reported by wait() */
			PyErr_Clear();
			b->err = -ENOMEM;
		}
	}
	PyMem_Free(b->q);
	PyMem_Free(b->e);
	b->q = NULL;
	b->e = NULL;
	Py_DECREF(b); /* the session's reference */
}

/* A Batch in flight for args (dataset_id, keys); what names the call in
 * errors. */
static Batch *start_batch(Session *s, PyObject *args, const char *what)
{
	int dataset;
	PyObject *keys_in;
	if (!PyArg_ParseTuple(args, "iO", &dataset, &keys_in))
		return NULL;
	if (dataset < 0) {
		raise_error(-ENOENT, what, NULL);
		return NULL;
	}
	Batch *b = PyObject_New(Batch, &BatchType);
	if (!b)
		return NULL;
	Py_INCREF(s);
	b->session = s;
	b->dataset = dataset;
	b->batch = NULL;
	b->results = NULL;
	b->err = 0;
	b->keys = PySequence_Tuple(keys_in);
	size_t n = b->keys ? (size_t)PyTuple_GET_SIZE(b->keys) : 0;
	b->q = PyMem_Calloc(n + 1, sizeof(*b->q));
	b->e = PyMem_Calloc(n * EXT_PER_KEY + 1, sizeof(*b->e));
	if (!b->keys || !b->q || !b->e) {
		if (b->keys)
			PyErr_NoMemory();
		Py_DECREF(b);
		return NULL;
	}
	if (batch_reqs(b->keys, b->q, b->e) < 0 || enter(s) < 0) {
		Py_DECREF(b);
		return NULL;
	}
	/* Every request goes; refused keys ride as empty ones and get their
	 * error in the results. */
	for (size_t i = 0; i < n; i++)
		if (!b->q[i].key)
			b->q[i].max_ext = 0;
	int r = rc_read_many_start(s->c, dataset, b->q, n, &b->batch);
	if (r == 0) {
		Py_INCREF(b); /* until completed */
		s->pending_batch = b;
	}
	leave(s);
	if (r < 0) {
		Py_DECREF(b);
		raise_error(r, what, NULL);
		return NULL;
	}
	return b;
}

static PyObject *Session_read_many_start(Session *s, PyObject *args)
{
	return (PyObject *)start_batch(s, args, "read_many_start");
}

/* Completes the pending batch, if any, keeping its results for its
 * wait(): for what does not go through enter(). */
static void complete_pending(Session *s)
{
	if (s->pending_batch && session_live(s) && !s->busy) {
		s->busy = 1;
		batch_complete(s->pending_batch);
		leave(s);
	}
}

/* Before a ctypes call on the same rc_client. */
static PyObject *Session_settle(Session *s, PyObject *unused)
{
	(void)unused;
	complete_pending(s);
	Py_RETURN_NONE;
}

static PyObject *Batch_wait(Batch *b, PyObject *unused)
{
	(void)unused;
	if (b->batch) {
		if (enter(b->session) < 0) /* completes b */
			return NULL;
		leave(b->session);
	}
	if (b->err < 0)
		return raise_error(b->err, "read_many", NULL);
	if (!b->results) {
		PyErr_SetString(PyExc_RuntimeError, "batch already waited for");
		return NULL;
	}
	PyObject *r = b->results;
	b->results = NULL;
	return r;
}

/* The batch started and waited for at once: one path for both calls. */
static PyObject *Session_read_many(Session *s, PyObject *args)
{
	Batch *b = start_batch(s, args, "read_many");
	if (!b)
		return NULL;
	PyObject *views = Batch_wait(b, NULL);
	Py_DECREF(b);
	return views;
}

/* One byte of every block of each request's object (q[i].size known):
 * the rest after the first, all in one rc_read_many, each released at
 * once. A block that fails fails its request. */
static int probe_rest(Session *s, int dataset, struct rc_read_req *q,
		      size_t n)
{
	uint64_t bs = s->c->block_size;
	size_t more = 0;
	for (size_t i = 0; i < n; i++)
		if (q[i].key && q[i].res >= 0 && q[i].size > bs)
			more += blocks_of(bs, q[i].size - bs, bs);
	if (more == 0)
		return 0;
	struct rc_read_req *r = PyMem_Calloc(more, sizeof(*r));
	struct rc_extent *e = PyMem_Calloc(more, sizeof(*e));
	size_t *of = PyMem_Calloc(more, sizeof(*of));
	int err = r && e && of ? 0 : -ENOMEM;
	size_t m = 0;
	for (size_t i = 0; !err && i < n; i++)
		for (uint64_t at = bs; q[i].key && q[i].res >= 0 &&
		     at < q[i].size; at += bs, m++) {
			r[m] = (struct rc_read_req){.key = q[i].key, .offset = at,
						    .len = 1, .ext = &e[m],
						    .max_ext = 1};
			of[m] = i;
		}
	if (!err) {
		Py_BEGIN_ALLOW_THREADS
		err = rc_read_many(s->c, dataset, r, m);
		Py_END_ALLOW_THREADS
	}
	for (size_t j = 0; !err && j < m; j++) {
		if (r[j].res < 0 && q[of[j]].res >= 0)
			q[of[j]].res = r[j].res; /* e.g. -ESTALE: changed since */
		for (uint32_t x = 0; r[j].res >= 0 && x < r[j].n_ext; x++)
			release_now(s, r[j].ext[x].lease);
	}
	PyMem_Free(r);
	PyMem_Free(e);
	PyMem_Free(of);
	return err;
}

/* probe_many(dataset_id, keys) -> [size or OSError]: what read_many
 * would answer for each key, without its bytes: one byte of every block
 * of each object is read (so every block is cached) and released at
 * once. For a caller that only needs the samples to be there (a
 * DataLoader worker handing them over by reference): a whole read in a
 * process that never mapped the arena pays every page's first touch, or
 * a copy, for bytes it drops. */
static PyObject *Session_probe_many(Session *s, PyObject *args)
{
	int dataset;
	PyObject *keys_in;
	if (!PyArg_ParseTuple(args, "iO", &dataset, &keys_in))
		return NULL;
	if (dataset < 0)
		return raise_error(-ENOENT, "probe_many", NULL);
	PyObject *keys = PySequence_Tuple(keys_in);
	if (!keys)
		return NULL;
	size_t n = (size_t)PyTuple_GET_SIZE(keys);
	struct rc_read_req *q = PyMem_Calloc(n + 1, sizeof(*q));
	struct rc_extent *e = PyMem_Calloc(n + 1, sizeof(*e));
	PyObject *list = NULL;
	if (!q || !e) {
		PyErr_NoMemory();
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const char *k;
		Py_ssize_t len;
		if (key_bytes(PyTuple_GET_ITEM(keys, i), &k, &len) < 0)
			goto out;
		/* A key with a NUL byte rides as an empty request (-EINVAL). */
		q[i] = (struct rc_read_req){.len = 1, .ext = &e[i]};
		q[i].key = strlen(k) == (size_t)len ? k : NULL;
		q[i].max_ext = q[i].key ? 1 : 0;
	}
	if (enter(s) < 0)
		goto out;
	int r;
	Py_BEGIN_ALLOW_THREADS
	r = rc_read_many(s->c, dataset, q, n);
	Py_END_ALLOW_THREADS
	for (size_t i = 0; r == 0 && i < n; i++)
		for (uint32_t x = 0; q[i].key && q[i].res >= 0 &&
		     x < q[i].n_ext; x++)
			release_now(s, q[i].ext[x].lease);
	if (r == 0)
		r = probe_rest(s, dataset, q, n);
	leave(s);
	if (r < 0) {
		raise_error(r, "probe_many", NULL);
		goto out;
	}
	list = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; list && i < n; i++) {
		PyObject *key = PyTuple_GET_ITEM(keys, i);
		PyObject *item = !q[i].key ? make_error(-EINVAL, "read", key) :
			q[i].res < 0 ? make_error((int)q[i].res, "read", key) :
			PyLong_FromUnsignedLongLong(q[i].size);
		if (!item) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, item);
	}
out:
	PyMem_Free(q);
	PyMem_Free(e);
	Py_DECREF(keys);
	return list;
}

static void Batch_dealloc(Batch *b)
{
	/* Pending batches are owned by their session too: here b is done
	 * (or its session is gone with the fork: its memory only). */
	Py_XDECREF(b->results);
	Py_XDECREF(b->keys);
	PyMem_Free(b->q);
	PyMem_Free(b->e);
	Py_XDECREF(b->session);
	PyObject_Free(b);
}

static PyMethodDef Batch_methods[] = {
	{"wait", (PyCFunction)Batch_wait, METH_NOARGS,
	 "wait() -> [memoryview or OSError], as read_many returns"},
	{NULL, NULL, 0, NULL}};

static PyTypeObject BatchType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ringcache._native.Batch",
	.tp_basicsize = sizeof(Batch),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "a read_many batch in flight (read_many_start); wait() "
		  "completes it",
	.tp_dealloc = (destructor)Batch_dealloc,
	.tp_methods = Batch_methods,
};

static PyObject *Session_dataset(Session *s, PyObject *args)
{
	const char *name;
	if (!PyArg_ParseTuple(args, "s", &name))
		return NULL;
	if (!session_live(s)) {
		PyErr_SetString(PyExc_ValueError, "ringcache session is detached");
		return NULL;
	}
	int r = rc_dataset(s->c, name);
	if (r < 0)
		return raise_error(r, "dataset", PyTuple_GET_ITEM(args, 0));
	return PyLong_FromLong(r);
}

/* Publishes the lazy RELEASE/CLOSE entries and waits until the daemon has
 * completed them (and everything else of this client). */
static PyObject *Session_quiesce(Session *s, PyObject *unused)
{
	(void)unused;
	if (!session_live(s))
		Py_RETURN_NONE;
	if (enter(s) < 0)
		return NULL;
	int r = wait_idle(s);
	leave(s);
	if (r < 0)
		return raise_error(r, "quiesce", NULL);
	Py_RETURN_NONE;
}

/* Posts what views dropped during a ctypes call queued (no waiting). */
static PyObject *Session_post(Session *s, PyObject *unused)
{
	(void)unused;
	if (session_live(s) && !s->busy) {
		post_queued(s);
		maybe_submit(s);
	}
	Py_RETURN_NONE;
}

/* Submits every release and close posted so far, without waiting: the
 * daemon lets those leases go as soon as it reads them, not with this
 * session's next call (a trainer's last batch of an epoch has none). */
static PyObject *Session_submit(Session *s, PyObject *unused)
{
	(void)unused;
	if (session_live(s) && !s->busy) {
		post_queued(s);
		if (s->unsent) {
			rc_submit(s->c);
			s->unsent = 0;
		}
	}
	Py_RETURN_NONE;
}

/* detach(): the session ends (the daemon drops its leases and handles),
 * at once or, while views live, when the last of them goes: until then
 * their bytes stay mapped and leased, and every call is refused. In a
 * forked child it closes the copies of the parent's fds and mappings. */
static PyObject *Session_detach(Session *s, PyObject *unused)
{
	(void)unused;
	if (s->busy) {
		PyErr_SetString(PyExc_RuntimeError, "ringcache client busy");
		return NULL;
	}
	complete_pending(s);
	s->queued = 0;
	s->unsent = 0;
	if (s->views > 0) {
		/* Unmapping now would leave views over nothing: the last one
		 * to go detaches (the daemon then drops its leases). */
		s->closing = 1;
		Py_RETURN_NONE;
	}
	if (s->attached)
		rc_detach(s->c);
	s->attached = 0;
	Py_RETURN_NONE;
}

static PyObject *Session_address(Session *s, void *unused)
{
	(void)unused;
	return PyLong_FromVoidPtr(s->c);
}

static PyObject *Session_pending(Session *s, void *unused)
{
	(void)unused;
	return PyLong_FromSize_t(s->queued +
				 (session_live(s) ? s->c->inflight : 0));
}

static PyMethodDef Session_methods[] = {
	{"open", (PyCFunction)Session_open, METH_VARARGS,
	 "open(dataset_id, key) -> (handle, size, etag)"},
	{"close", (PyCFunction)Session_close, METH_VARARGS,
	 "close(handle): waits for the daemon's answer"},
	{"read", (PyCFunction)Session_read, METH_VARARGS,
	 "read(handle, offset, length) -> read-only memoryview"},
	{"read_many", (PyCFunction)Session_read_many, METH_VARARGS,
	 "read_many(dataset_id, keys) -> [memoryview or OSError]"},
	{"probe_many", (PyCFunction)Session_probe_many, METH_VARARGS,
	 "probe_many(dataset_id, keys) -> [size or OSError]"},
	{"read_many_start", (PyCFunction)Session_read_many_start, METH_VARARGS,
	 "read_many_start(dataset_id, keys) -> Batch (in flight; wait())"},
	{"settle", (PyCFunction)Session_settle, METH_NOARGS,
	 "complete a pending read_many_start batch (keeping its results)"},
	{"dataset", (PyCFunction)Session_dataset, METH_VARARGS,
	 "dataset(name) -> id"},
	{"quiesce", (PyCFunction)Session_quiesce, METH_NOARGS,
	 "publish lazy releases and closes, wait until the daemon has them"},
	{"post", (PyCFunction)Session_post, METH_NOARGS,
	 "post the releases queued while busy (no waiting)"},
	{"submit", (PyCFunction)Session_submit, METH_NOARGS,
	 "submit the releases and closes posted so far (no waiting)"},
	{"detach", (PyCFunction)Session_detach, METH_NOARGS, "end the session"},
	{NULL, NULL, 0, NULL}};

static PyGetSetDef Session_getset[] = {
	{"address", (getter)Session_address, NULL,
	 "address of the struct rc_client (for ctypes.from_address)", NULL},
	{"pending", (getter)Session_pending, NULL,
	 "entries queued, posted or in flight", NULL},
	{NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef Session_members[] = {
	{"busy", T_INT, offsetof(Session, busy), 0,
	 "set while the ctypes side calls into the same rc_client"},
	{NULL, 0, 0, 0, NULL}};

static PyTypeObject SessionType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ringcache._native.Session",
	.tp_basicsize = sizeof(Session),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Session(socket=None, gpu=-1, numa_node=-1): one attached "
		  "rc_client",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Session_init,
	.tp_dealloc = (destructor)Session_dealloc,
	.tp_methods = Session_methods,
	.tp_getset = Session_getset,
	.tp_members = Session_members,
};

/* ---- View: the buffer exporter of one lease ----------------------------- */

static int View_getbuffer(View *v, Py_buffer *b, int flags)
{
	if (!session_live(v->session)) {
		PyErr_SetString(PyExc_BufferError,
				"ringcache lease of a detached session");
		return -1;
	}
	return PyBuffer_FillInfo(b, (PyObject *)v, (void *)v->data, v->len, 1,
				 flags);
}

static void View_dealloc(View *v)
{
	Session *s = v->session;
	if (v->lease != RC_NO_LEASE && !s->closing)
		session_release(s, v->lease);
	if (--s->views == 0 && s->closing && s->attached) {
		rc_detach(s->c);
		s->attached = 0;
	}
	Py_DECREF(s);
	PyObject_Free(v);
}

static PyBufferProcs View_buffer = {
	.bf_getbuffer = (getbufferproc)View_getbuffer,
};

static PyTypeObject ViewType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ringcache._native.View",
	.tp_basicsize = sizeof(View),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "the leased bytes behind a memoryview (read-only)",
	.tp_dealloc = (destructor)View_dealloc,
	.tp_as_buffer = &View_buffer,
};

/* ---- module ------------------------------------------------------------- */

static PyObject *set_errors(PyObject *mod, PyObject *d)
{
	(void)mod;
	if (!PyDict_Check(d)) {
		PyErr_SetString(PyExc_TypeError, "set_errors needs a dict");
		return NULL;
	}
	Py_INCREF(d);
	Py_XSETREF(error_classes, d);
	Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
	{"set_errors", set_errors, METH_O,
	 "set_errors({errno: exception class}) for errors raised here"},
	{NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "ringcache._native",
	"The hot read path of the ringcache binding in C.", -1, module_methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void);
PyMODINIT_FUNC PyInit__native(void)
{
	if (PyType_Ready(&SessionType) < 0 || PyType_Ready(&ViewType) < 0 ||
	    PyType_Ready(&BatchType) < 0)
		return NULL;
	static int atfork_done;
	if (!atfork_done && pthread_atfork(NULL, NULL, on_fork_child) == 0)
		atfork_done = 1;
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	Py_INCREF(&SessionType);
	if (PyModule_AddObject(m, "Session", (PyObject *)&SessionType) < 0 ||
	    PyModule_AddIntConstant(m, "RELEASE_BATCH", RELEASE_BATCH) < 0) {
		Py_DECREF(&SessionType);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
