/* _native.c - owns ringcache._native, the CPython extension that does the
 * Python binding's hot read path in C: a session (the rc_client, attached
 * and detached here; the ctypes side of the package borrows it for every
 * other call), open, close, zero-copy reads handed out as read-only
 * memoryviews over the lease, and a batch read of whole objects in one
 * submission per phase (OPENs, then READs; the CLOSEs and RELEASEs go out
 * without waiting).
 *
 * Why C: through ctypes a warm sample costs tens of microseconds of Python
 * (argument conversion, struct boxing, one ring round trip per call); here
 * a batch costs two round trips and a few small allocations per sample.
 *
 * Ownership: a Session owns its struct rc_client (its memory and its
 * session with the daemon). A View (the exporter behind each memoryview
 * handed out) owns one lease and a strong reference to its Session; when
 * the last memoryview, numpy array or tensor over it goes, the lease is
 * queued for release. Queued RELEASEs (and the batch's CLOSEs) are sent
 * with the session's next call, or as soon as RELEASE_BATCH are queued, and
 * their completions are reaped later: quiesce() sends and reaps them all,
 * which the ctypes side calls before each of its synchronous calls (they
 * expect the next completion to be their own).
 *
 * Use: one Session per thread, as for rc_client. A call that finds the
 * session busy (another thread inside it) raises RuntimeError. Blocking
 * waits release the GIL. In a forked child a Session (and every View of
 * it) is dead: views do not release, forget() closes the copies of the fds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <pthread.h>

#include "ringcache.h"

/* user_data of SQEs whose completions nobody waits for. */
#define TAG_ASYNC (1ull << 63)
/* Queued releases that are sent without waiting for the next call. */
#define RELEASE_BATCH 16u

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
	uint8_t op;   /* RC_OP_RELEASE or RC_OP_CLOSE */
	uint32_t id;  /* lease or handle */
};

typedef struct {
	PyObject_HEAD
	struct rc_client *c;
	unsigned generation;  /* fork_generation at attach */
	int attached;
	int busy;             /* a call is inside (the GIL may be released) */
	uint32_t async;       /* TAG_ASYNC entries submitted, not reaped */
	struct deferred *queue;
	size_t queued, queue_cap;
} Session;

typedef struct {
	PyObject_HEAD
	Session *session;
	const void *data;
	Py_ssize_t len;
	uint32_t lease;
} View;

static PyTypeObject SessionType;
static PyTypeObject ViewType;

static int session_live(const Session *s)
{
	return s->attached && s->generation == fork_generation;
}

/* OSError(errno, "what: text"[, filename]): OSError's constructor picks
 * the subclass (FileNotFoundError, ...), error_classes ringcache's own. */
static PyObject *make_error(int res, const char *what, PyObject *filename)
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
	PyObject *msg = PyUnicode_FromFormat("%s: %s", what, rc_strerror(res));
	if (!msg)
		return NULL;
	PyObject *e = filename ?
		PyObject_CallFunction(cls, "iOO", -res, msg, filename) :
		PyObject_CallFunction(cls, "iO", -res, msg);
	Py_DECREF(msg);
	return e;
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

/* Drops completions of TAG_ASYNC entries that are ready, without waiting. */
static void reap_async_ready(Session *s)
{
	struct rc_cqe *cqe;
	while (s->async && (cqe = rc_peek_cqe(s->c)) &&
	       (cqe->user_data & TAG_ASYNC)) {
		rc_cqe_seen(s->c);
		s->async--;
	}
}

/* Moves queued RELEASE/CLOSE entries into the SQ (submitted by the caller
 * or here with submit). What does not fit stays queued. */
static int send_queued(Session *s, int submit)
{
	reap_async_ready(s);
	size_t i = 0;
	for (; i < s->queued; i++) {
		struct rc_sqe *sqe = rc_get_sqe(s->c);
		if (!sqe)
			break;
		sqe->opcode = s->queue[i].op;
		sqe->handle = s->queue[i].id;
		sqe->user_data = TAG_ASYNC;
		s->async++;
	}
	memmove(s->queue, s->queue + i, (s->queued - i) * sizeof(*s->queue));
	s->queued -= i;
	return submit ? rc_submit(s->c) : 0;
}

/* Called by a View's dealloc (any thread holding the GIL). */
static void session_release(Session *s, uint32_t lease)
{
	if (!session_live(s) || queue_push(s, RC_OP_RELEASE, lease) < 0)
		return;
	if (!s->busy && s->queued >= RELEASE_BATCH)
		send_queued(s, 1);
}

/* The next completion that is not TAG_ASYNC; blocks (without the GIL). */
static int next_cqe(Session *s, struct rc_cqe *out)
{
	for (;;) {
		struct rc_cqe *cqe = rc_peek_cqe(s->c);
		if (!cqe) {
			int r;
			Py_BEGIN_ALLOW_THREADS
			r = rc_wait_cqe(s->c, &cqe);
			Py_END_ALLOW_THREADS
			if (r < 0)
				return r;
		}
		int async = (cqe->user_data & TAG_ASYNC) != 0;
		if (!async)
			*out = *cqe;
		rc_cqe_seen(s->c);
		if (!async)
			return 0;
		s->async--;
	}
}

/* An SQE; when the SQ is full and nothing of the caller's is in flight,
 * submits and waits for unwaited entries to complete (the daemon has then
 * consumed SQ entries). NULL if the SQ stays full. */
static struct rc_sqe *get_sqe(Session *s, size_t inflight)
{
	struct rc_sqe *sqe;
	while (!(sqe = rc_get_sqe(s->c)) && !inflight && s->async) {
		struct rc_cqe *cqe;
		int r = rc_submit(s->c);
		if (r < 0)
			return NULL;
		if (!(cqe = rc_peek_cqe(s->c))) {
			Py_BEGIN_ALLOW_THREADS
			r = rc_wait_cqe(s->c, &cqe);
			Py_END_ALLOW_THREADS
			if (r < 0 || !(cqe->user_data & TAG_ASYNC))
				return NULL;
		}
		if (!(cqe->user_data & TAG_ASYNC))
			return NULL;
		rc_cqe_seen(s->c);
		s->async--;
	}
	return sqe;
}

/* Waits until every TAG_ASYNC entry has completed. */
static int drain_async(Session *s)
{
	while (s->async) {
		struct rc_cqe *cqe;
		int r;
		if (!(cqe = rc_peek_cqe(s->c))) {
			Py_BEGIN_ALLOW_THREADS
			r = rc_wait_cqe(s->c, &cqe);
			Py_END_ALLOW_THREADS
			if (r < 0)
				return r;
		}
		if (!(cqe->user_data & TAG_ASYNC))
			return -EPROTO; /* nothing else may be in flight */
		rc_cqe_seen(s->c);
		s->async--;
	}
	return 0;
}

/* Entry of every call: one thread at a time, a live session, the queue
 * flushed into the SQ (sent with the call's own entries). */
static int enter(Session *s)
{
	if (!session_live(s)) {
		PyErr_SetString(PyExc_ValueError, s->attached ?
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
	send_queued(s, 0);
	return 0;
}

static void leave(Session *s)
{
	s->busy = 0;
	if (s->queued >= RELEASE_BATCH)
		send_queued(s, 1);
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
	while (next < n || inflight) {
		for (; next < n && inflight < window; next++, inflight++) {
			struct rc_sqe *sqe = get_sqe(s, inflight);
			if (!sqe)
				break;
			rc_prep_read(sqe, p[next].handle, p[next].offset,
				     p[next].len, next);
		}
		int r = rc_submit(s->c);
		struct rc_cqe cqe;
		if (r >= 0 && !inflight)
			r = -EBUSY; /* the SQ stayed full */
		if (r < 0 || (r = next_cqe(s, &cqe)) < 0)
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

static void release_later(Session *s, struct piece *p)
{
	if (p->lease != RC_NO_LEASE)
		queue_push(s, RC_OP_RELEASE, p->lease);
	p->lease = RC_NO_LEASE;
}

/* A memoryview over pieces [0, n) of one object: zero-copy over a single
 * leased block (the View owns the lease), else a copy into bytes (leases
 * queued for release). */
static PyObject *view_of(Session *s, struct piece *p, size_t n)
{
	Py_ssize_t total = 0;
	size_t whole = 0; /* pieces before the first empty one (EOF) */
	for (; whole < n && p[whole].res > 0; whole++)
		total += p[whole].res;
	if (n == 1 && p[0].res > 0 && p[0].lease != RC_NO_LEASE) {
		View *v = PyObject_New(View, &ViewType);
		if (!v)
			return NULL;
		Py_INCREF(s);
		v->session = s;
		v->data = p[0].data;
		v->len = p[0].res;
		v->lease = p[0].lease;
		p[0].lease = RC_NO_LEASE;
		PyObject *mv = PyMemoryView_FromObject((PyObject *)v);
		Py_DECREF(v);
		return mv;
	}
	PyObject *b = PyBytes_FromStringAndSize(NULL, total);
	if (!b)
		return NULL;
	char *out = PyBytes_AS_STRING(b);
	for (size_t i = 0; i < n; i++) {
		if (i < whole) {
			memcpy(out, p[i].data, (size_t)p[i].res);
			out += p[i].res;
		}
		release_later(s, &p[i]);
	}
	PyObject *mv = PyMemoryView_FromObject(b);
	Py_DECREF(b);
	return mv;
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
	PyObject *ret = NULL;
	if (!p) {
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
			release_later(s, &p[i]);
		raise_error(err, "read", NULL);
	} else {
		ret = view_of(s, p, n);
	}
	if (p != &one)
		PyMem_Free(p);
out:
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

/* Prepares the OPEN of key i (arg slot taken); -EBUSY: no slot or SQE. */
static int prep_open(Session *s, int dataset, const char *k, Py_ssize_t len,
		     uint64_t tag, int *slot, size_t inflight)
{
	if ((size_t)len > RC_MAX_KEY)
		return -ENAMETOOLONG;
	if ((*slot = rc_arg_get(s->c)) < 0)
		return -EBUSY;
	struct rc_sqe *sqe = get_sqe(s, inflight);
	if (!sqe) {
		rc_arg_put(s->c, *slot);
		return -EBUSY;
	}
	memcpy(rc_arg_ptr(s->c, *slot), k, (size_t)len);
	sqe->opcode = RC_OP_OPEN;
	sqe->arg = (uint16_t)*slot;
	sqe->arg_len = (uint32_t)len;
	sqe->dataset = (uint32_t)dataset;
	sqe->user_data = tag;
	return 0;
}

struct opened {
	int32_t res;   /* handle or negated errno */
	int slot;
	uint64_t size;
};

/* OPENs keys[0..n) with as many in flight as arg slots allow. Returns 0 or
 * a negated errno of the session. The ETags stay in the slots of o[i] when
 * keep_slots (for open()); else the slots are put back. */
static int open_keys(Session *s, int dataset, const char *const *keys,
		     const Py_ssize_t *lens, size_t n, struct opened *o,
		     int keep_slots)
{
	size_t next = 0, inflight = 0;
	while (next < n || inflight) {
		for (; next < n; next++) {
			int r = prep_open(s, dataset, keys[next], lens[next],
					  next, &o[next].slot, inflight);
			if (r == -EBUSY && inflight)
				break;
			o[next].res = r;
			if (r == 0)
				inflight++;
			else
				o[next].slot = -1;
		}
		if (!inflight)
			break;
		int r = rc_submit(s->c);
		struct rc_cqe cqe;
		if (r < 0 || (r = next_cqe(s, &cqe)) < 0)
			return r;
		inflight--;
		if (cqe.user_data >= n)
			return -EPROTO;
		struct opened *q = &o[cqe.user_data];
		q->res = cqe.res;
		q->size = cqe.res >= 0 ? cqe.addr : 0;
		if (!keep_slots || cqe.res < 0) {
			rc_arg_put(s->c, q->slot);
			q->slot = -1;
		}
	}
	return 0;
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
	if (enter(s) < 0)
		return NULL;
	struct opened o;
	int r = open_keys(s, dataset, &k, &len, 1, &o, 1);
	PyObject *ret = NULL;
	if (r == 0 && o.res >= 0) {
		char etag[RC_MAX_ETAG];
		memcpy(etag, rc_arg_ptr(s->c, o.slot), RC_MAX_ETAG);
		etag[RC_MAX_ETAG - 1] = 0;
		rc_arg_put(s->c, o.slot);
		ret = Py_BuildValue("iKs", o.res, (unsigned long long)o.size,
				    etag);
	} else {
		raise_error(r < 0 ? r : o.res, "open", key);
	}
	leave(s);
	return ret;
}

static PyObject *Session_close(Session *s, PyObject *args)
{
	unsigned int handle;
	if (!PyArg_ParseTuple(args, "I", &handle) || enter(s) < 0)
		return NULL;
	struct rc_sqe *sqe = get_sqe(s, 0);
	struct rc_cqe cqe = {.res = -EBUSY};
	int r = 0;
	if (sqe) {
		sqe->opcode = RC_OP_CLOSE;
		sqe->handle = handle;
		if ((r = rc_submit(s->c)) >= 0)
			r = next_cqe(s, &cqe);
	}
	leave(s);
	if (r < 0 || cqe.res < 0)
		return raise_error(r < 0 ? r : cqe.res, "close", NULL);
	Py_RETURN_NONE;
}

/* The keys of a batch as pointers into their str/bytes objects (which the
 * list keeps alive). */
static int batch_keys(PyObject *seq, const char ***keys, Py_ssize_t **lens)
{
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	*keys = PyMem_Calloc((size_t)n + 1, sizeof(**keys));
	*lens = PyMem_Calloc((size_t)n + 1, sizeof(**lens));
	if (!*keys || !*lens) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (key_bytes(PySequence_Fast_GET_ITEM(seq, i), &(*keys)[i],
			      &(*lens)[i]) < 0)
			return -1;
	return 0;
}

/* Pieces of every opened object, in key order; *count set. */
static struct piece *batch_pieces(Session *s, struct opened *o, size_t n,
				  size_t *count)
{
	uint64_t bs = s->c->block_size;
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		if (o[i].res >= 0)
			total += blocks_of(0, o[i].size, bs);
	struct piece *p = PyMem_Malloc((total ? total : 1) * sizeof(*p));
	if (!p)
		return NULL;
	size_t at = 0;
	for (size_t i = 0; i < n; i++)
		if (o[i].res >= 0)
			at += split(p + at, (uint32_t)i, (uint32_t)o[i].res, 0,
				    o[i].size, bs);
	*count = at;
	return p;
}

/* results[i] for key i: its memoryview, or its OSError (the first failed
 * piece's errno). */
static PyObject *batch_results(Session *s, PyObject *seq, struct opened *o,
			       size_t n, struct piece *p, size_t np)
{
	PyObject *list = PyList_New((Py_ssize_t)n);
	size_t at = 0;
	for (size_t i = 0; list && i < n; i++) {
		size_t k = at;
		int err = o[i].res < 0 ? o[i].res : 0;
		while (at < np && p[at].item == i) {
			if (p[at].res < 0 && !err)
				err = p[at].res;
			at++;
		}
		PyObject *item;
		if (err) {
			for (size_t j = k; j < at; j++)
				release_later(s, &p[j]);
			item = make_error(err, o[i].res < 0 ? "open" : "read",
					  PySequence_Fast_GET_ITEM(seq, i));
		} else {
			item = view_of(s, p + k, at - k);
		}
		if (!item) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, item);
	}
	return list;
}

static PyObject *Session_read_many(Session *s, PyObject *args)
{
	int dataset;
	PyObject *keys_in;
	if (!PyArg_ParseTuple(args, "iO", &dataset, &keys_in))
		return NULL;
	PyObject *seq = PySequence_Fast(keys_in, "keys must be a sequence");
	if (!seq)
		return NULL;
	size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
	const char **keys = NULL;
	Py_ssize_t *lens = NULL;
	struct opened *o = NULL;
	struct piece *p = NULL;
	size_t np = 0;
	PyObject *ret = NULL;
	if (batch_keys(seq, &keys, &lens) < 0 || enter(s) < 0)
		goto out_free;
	int r = -ENOMEM;
	if ((o = PyMem_Calloc(n + 1, sizeof(*o))) &&
	    (r = open_keys(s, dataset, keys, lens, n, o, 0)) == 0 &&
	    (r = -ENOMEM, p = batch_pieces(s, o, n, &np)))
		r = read_pieces(s, p, np);
	for (size_t i = 0; r == 0 && i < n; i++)
		if (o[i].res >= 0)
			queue_push(s, RC_OP_CLOSE, (uint32_t)o[i].res);
	if (r == 0)
		ret = batch_results(s, seq, o, n, p, np);
	else
		raise_error(r, "read_many", NULL);
	send_queued(s, 1); /* the CLOSEs (and releases) go now, unwaited */
	leave(s);
out_free:
	PyMem_Free(p);
	PyMem_Free(o);
	PyMem_Free(keys);
	PyMem_Free(lens);
	Py_DECREF(seq);
	return ret;
}

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

/* Sends the queued RELEASE/CLOSE entries and waits for every unwaited
 * completion: afterwards nothing of this module is in flight. */
static PyObject *Session_quiesce(Session *s, PyObject *unused)
{
	(void)unused;
	if (!session_live(s) || (s->async == 0 && s->queued == 0))
		Py_RETURN_NONE;
	if (enter(s) < 0)
		return NULL;
	int r = 0;
	while (r == 0 && (s->queued || s->async)) {
		r = send_queued(s, 1);
		if (r >= 0)
			r = drain_async(s);
	}
	leave(s);
	if (r < 0)
		return raise_error(r, "quiesce", NULL);
	Py_RETURN_NONE;
}

/* detach(): the session ends (the daemon drops its leases and handles);
 * views still alive must not be read any more. forget() is the same for a
 * forked child's copy. */
static PyObject *Session_detach(Session *s, PyObject *unused)
{
	(void)unused;
	if (s->busy) {
		PyErr_SetString(PyExc_RuntimeError, "ringcache client busy");
		return NULL;
	}
	if (s->attached)
		rc_detach(s->c);
	s->attached = 0;
	s->queued = 0;
	s->async = 0;
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
	return PyLong_FromSize_t(s->queued + s->async);
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
	{"dataset", (PyCFunction)Session_dataset, METH_VARARGS,
	 "dataset(name) -> id"},
	{"quiesce", (PyCFunction)Session_quiesce, METH_NOARGS,
	 "send queued releases and closes, reap every completion"},
	{"detach", (PyCFunction)Session_detach, METH_NOARGS, "end the session"},
	{NULL, NULL, 0, NULL}};

static PyGetSetDef Session_getset[] = {
	{"address", (getter)Session_address, NULL,
	 "address of the struct rc_client (for ctypes.from_address)", NULL},
	{"pending", (getter)Session_pending, NULL,
	 "RELEASE/CLOSE entries queued or not yet reaped", NULL},
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
	if (v->lease != RC_NO_LEASE)
		session_release(v->session, v->lease);
	Py_DECREF(v->session);
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
	if (PyType_Ready(&SessionType) < 0 || PyType_Ready(&ViewType) < 0)
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
