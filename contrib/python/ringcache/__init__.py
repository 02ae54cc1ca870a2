"""ringcache - Python binding of the ringcache client (include/ringcache.h).

Owns the Python face of a client session: attaching to ringcached (again
after a fork), opening objects, zero-copy reads handed out as leased
memoryviews over the read-only arena mapping, copies into caller buffers
through registered memfd buffers, listing, counters, and turning negated
errnos into OSError, and checkpoint writers (file-like objects that
torch.save can write to; committed, renamed and synced through the daemon's
write-back). The C library (libringcache.so, loaded by ctypes in
_abi.py) does the socket and ring work.

    import ringcache
    c = ringcache.Client("/run/ringcache/ringcache.sock")
    with c.open("imagenet", "train/00001.jpg") as f:
        with f.read() as lease:          # zero-copy, leased until release
            decode(lease.view)
        buf = c.buffer(f.size)           # registered memfd: read_into lands
        f.read_into(0, buf)              # here without an extra copy
    with c.writer("checkpoints", "step-100/rank0.pt") as w:
        torch.save(model.state_dict(), w)  # committed on a clean exit
    w.sync()                             # returns when S3 has it

A Client is not thread-safe: use one per thread. It is fork-aware: in a
child process (a DataLoader worker) its first use attaches a new session;
Files re-open themselves, but leases and buffers of the parent are not
usable in the child.

Two backends: the C extension ringcache._native (built by meson where
Python's headers are installed) does the session, open, close and the
zero-copy reads (File.view, Client.read_many); the ctypes binding does
everything else on the same session, and all of it where the extension is
missing. RINGCACHE_PY_BACKEND=ctypes forces ctypes alone, =native insists
on the extension (ImportError without it); Client(backend=...) per client.
"""

import ctypes
import errno as _errno
import importlib
import io
import mmap
import os
import threading
import weakref
from collections import namedtuple

from . import _abi

# A source checkout: the extension is built in BUILD/contrib/python/
# ringcache ($RINGCACHE_BUILD_DIR, else the tree's build/).
_BUILD_PKG = os.path.join(
    os.environ.get("RINGCACHE_BUILD_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
        "build"), "contrib", "python", "ringcache")
if os.path.isdir(_BUILD_PKG):
    __path__.append(_BUILD_PKG)

# The release, as meson.build's project version (tests/package/
# test_install.sh checks that they agree).
__version__ = "0.1.0"

__all__ = ["Client", "DatasetAccessError", "File", "Lease", "ListEntry",
           "RingcacheError", "S3AccessDenied", "Writer", "parse_stats",
           "stats"]

# Copies through the staging buffer go in pieces of at most this size, so a
# huge read_into into an unregistered buffer does not pin a huge memfd.
STAGING_MAX = 8 << 20
# A Writer's own registered buffer: writes are gathered here and handed to
# the daemon in runs of up to this size (one rc_write round trip each).
WRITE_BUFFER = 8 << 20
# Extents asked of one rc_read call (it clamps to the SQ ring size anyway).
MAX_EXTENTS = 64
LIST_BUFFER = 1 << 20
STATS_BUFFER = 256 << 10

_lib = None

ListEntry = namedtuple("ListEntry", "name size is_prefix")


class RingcacheError(OSError):
    """Raised for errors that carry no errno of their own (misuse)."""


class DatasetAccessError(PermissionError):
    """EACCES: the dataset's ACL in the daemon's config (allow_uids/gids,
    write_uids/gids) does not admit this user; a reload may have removed
    it. Fixed in ringcache.conf, not in S3."""


class S3AccessDenied(PermissionError):
    """EPERM: S3 answered AccessDenied to the daemon: its S3 credentials or
    the bucket policy do not allow the key. Fixed in S3 (IAM, bucket
    policy), not in allow_uids."""


# Errnos whose cause is ringcache's own: an exception class that says so
# (both remain PermissionError for code that catches that).
_ERRORS = {_errno.EACCES: DatasetAccessError, _errno.EPERM: S3AccessDenied}


_native_ext = None  # the module (not named _native: that is its own)
_native_error = None
BACKENDS = ("auto", "native", "ctypes")


def _native_module():
    """ringcache._native, or None (ctypes) when it cannot be imported."""
    global _native_ext, _native_error
    if _native_ext is None and _native_error is None:
        try:
            mod = importlib.import_module("._native", __name__)
            mod.set_errors(dict(_ERRORS))
            _native_ext = mod
        except ImportError as e:
            _native_error = e
    return _native_ext


def _backend(choice):
    """The backend a Client uses: choice, else $RINGCACHE_PY_BACKEND,
    else auto (the extension when importable)."""
    choice = choice or os.environ.get("RINGCACHE_PY_BACKEND") or "auto"
    if choice not in BACKENDS:
        raise ValueError(f"ringcache backend {choice!r}: one of {BACKENDS}")
    if choice == "ctypes":
        return None
    mod = _native_module()
    if mod is None and choice == "native":
        raise ImportError("ringcache: the C extension ringcache._native "
                          f"is not importable: {_native_error}")
    return mod


def _library():
    global _lib
    if _lib is None:
        _lib = _abi.load_library()
    return _lib


# The daemon's words for the failure a Client._call just returned (the
# dataset, the bucket and S3's cause), per thread as clients are.
_cause = threading.local()


def _take_cause(res):
    got = getattr(_cause, "value", None)
    _cause.value = None
    if got is not None and got[0] == res:
        return got[1]
    return _library().rc_strerror(res).decode(errors="replace")


def _error(res, what, filename=None):
    """OSError for a negated errno: OSError picks the subclass
    (FileNotFoundError for ENOENT, ConnectionRefusedError when no daemon
    listens, ...), _ERRORS the ACL's and S3's refusals. The text is the
    daemon's cause when the failing call was a Client's."""
    err = -res
    text = _take_cause(res)
    cls = _ERRORS.get(err, OSError)
    if filename is not None:
        return cls(err, f"{what}: {text}", filename)
    return cls(err, f"{what}: {text}")


def _check(res, what, filename=None):
    if res < 0:
        raise _error(res, what, filename)
    return res


def _address_of(view):
    """Start address of a writable, C-contiguous, non-empty buffer."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def _encode(s):
    return s.encode() if isinstance(s, str) else bytes(s)


def parse_stats(text):
    """Prometheus text -> {metric name: value summed over its labels}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def stats(socket=None):
    """The daemon's counters (Prometheus text) without attaching."""
    buf = ctypes.create_string_buffer(STATS_BUFFER)
    path = _encode(socket) if socket is not None else None
    n = _check(_library().rc_stats(None, path, buf, len(buf)), "stats")
    return buf.raw[:n].decode()


class _RegisteredBuffer:
    """A memfd mapped here and registered with the session. The fd stays
    open so the same memory could be registered again. The daemon seals
    it against shrinking (F_SEAL_SHRINK), so sealing must be allowed."""

    def __init__(self, client, size):
        self.size = size
        self.fd = os.memfd_create("ringcache-py",
                                  os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            self.map = mmap.mmap(self.fd, size)
            self.address = _address_of(self.map)
            self.index = _check(_library().rc_register_buffer(
                client._ptr(), self.fd, size), "register buffer")
        except BaseException:
            self.close()
            raise

    def contains(self, address, length):
        return self.address <= address and \
            address + length <= self.address + self.size

    def close(self):
        if getattr(self, "map", None) is not None:
            try:
                self.map.close()
            except BufferError:
                pass  # views still exported: the mapping dies with them
            self.map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _DoneBatch:
    """read_many_start's result through ctypes: read already."""

    def __init__(self, results):
        self._results = results

    def wait(self):
        if self._results is None:
            raise RuntimeError("batch already waited for")
        results, self._results = self._results, None
        return results


class Client:
    """One session with ringcached.

    socket: the daemon's socket path (None: $RINGCACHE_SOCKET, else
    /run/ringcache/ringcache.sock). gpu / numa_node: which GPU (or node)
    this process feeds, so the daemon serves it from that node's shard;
    gpu is the CUDA ordinal this process uses (cuda:N), mapped to the
    machine's GPU through CUDA_VISIBLE_DEVICES by the library.
    backend: "native", "ctypes" or "auto" (None: $RINGCACHE_PY_BACKEND,
    else auto); self.backend says which one runs.
    """

    def __init__(self, socket=None, gpu=-1, numa_node=-1, backend=None):
        self.socket = socket
        self.gpu = gpu
        self.numa_node = numa_node
        self._native_mod = _backend(backend)
        self.backend = "native" if self._native_mod else "ctypes"
        self._session = None  # the _native.Session owning self._c
        self._c = None
        self._pid = None
        self.generation = 0  # bumped on every (re)attach
        self._busy = False
        self._deferred = []  # lease ids whose release __del__ postponed
        self._leases = weakref.WeakSet()
        self._buffers = []
        self._staging = None
        self._attach()

    # ---- session lifetime -------------------------------------------------

    def _attach(self):
        if self._native_mod is not None:
            return self._attach_native()
        c = _abi.rc_client()
        opts = _abi.rc_attach_opts(gpu=self.gpu, numa_node=self.numa_node)
        path = _encode(self.socket) if self.socket is not None else None
        res = _library().rc_attach(ctypes.byref(c), path, ctypes.byref(opts))
        if res == -_errno.EACCES:  # the socket's mode, not a dataset's ACL
            raise PermissionError(_errno.EACCES, "attach: permission denied "
                                  "on the daemon's socket (socket_mode)",
                                  self.socket)
        _check(res, "attach", self.socket)
        self._c = c
        self._pid = os.getpid()
        self.generation += 1

    def _attach_native(self):
        """The session is the extension's; ctypes borrows its rc_client."""
        path = os.fsdecode(self.socket) if self.socket is not None else None
        try:
            session = self._native_mod.Session(path, self.gpu,
                                               self.numa_node)
        except PermissionError as e:
            if e.errno != _errno.EACCES:
                raise
            raise PermissionError(_errno.EACCES, "attach: permission denied "
                                  "on the daemon's socket (socket_mode)",
                                  self.socket) from None
        self._session = session
        self._c = _abi.rc_client.from_address(session.address)
        self._pid = os.getpid()
        self.generation += 1

    def _detach(self):
        if self._session is not None:
            self._c = None
            self._session.detach()
            self._session = None
        else:
            _library().rc_detach(ctypes.byref(self._c))
            self._c = None

    def _forget_parent_session(self):
        """In a forked child: close our copies of the parent's fds and
        mappings (the parent's session is untouched) and drop everything
        that belonged to it."""
        self._detach()
        self._deferred.clear()
        for lease in list(self._leases):
            lease._orphan()
        self._leases = weakref.WeakSet()
        for b in self._buffers:
            b.close()
        self._buffers = []
        self._staging = None

    def _ptr(self):
        """The rc_client of this process, attaching first after a fork."""
        if self._pid != os.getpid():
            if self._c is not None:
                self._forget_parent_session()
            self._attach()
        if self._c is None:
            raise RingcacheError(_errno.EBADF, "client is closed")
        return ctypes.byref(self._c)

    def close(self):
        """Release every outstanding lease and detach. Memoryviews of
        Leases (File.read) must not be touched afterwards (the arena is
        unmapped). With the extension, views from read_many and
        File.view keep their bytes mapped and leased: the session ends
        when the last of them goes."""
        if self._c is None:
            return
        if self._pid != os.getpid():
            self._forget_parent_session()
            return
        for lease in list(self._leases):
            lease.release()
        self._flush_deferred()
        for b in self._buffers:
            b.close()
        self._buffers = []
        self._staging = None
        self._detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def block_size(self):
        self._ptr()
        return self._c.block_size

    # ---- calls --------------------------------------------------------------

    def _call(self, fn, *args):
        """Calls a libringcache function on this session. Marks the client
        busy so a lease's __del__ running meanwhile (GC in another thread)
        defers its release instead of re-entering the C client."""
        ptr = self._ptr()
        session = self._session
        if session is not None:
            session.settle()  # a read_many_start batch owns the CQ
        self._flush_deferred()
        self._busy = True
        if session is not None:
            session.busy = 1  # views dropped meanwhile queue their release
        try:
            res = fn(ptr, *args)
            if isinstance(res, int) and res < 0 and res != -_errno.EPIPE:
                text = _library().rc_last_error(ptr, res)
                _cause.value = (res, text.decode(errors="replace"))
            return res
        finally:
            self._busy = False
            if session is not None:
                session.busy = 0

    def _flush_deferred(self):
        if self._session is not None and not self._busy:
            self._session.post()  # views dropped during a ctypes call
        while self._deferred and not self._busy:
            lease_id = self._deferred.pop()
            _library().rc_release(ctypes.byref(self._c), lease_id)

    def send_releases(self):
        """Sends the releases of views already dropped, without waiting
        (they otherwise go with the next call, or 16 at a time): the
        daemon lets those leases go as soon as it reads them."""
        self._ptr()
        self._flush_deferred()
        if self._session is not None and not self._busy:
            self._session.submit()

    def flush(self):
        """Sends the releases of dropped views now and waits until the
        daemon has them (they otherwise go with the next call, or in
        batches of a few)."""
        self._ptr()
        self._flush_deferred()
        if self._session is not None:
            self._session.quiesce()

    def _release(self, lease_id, generation, deferred_ok):
        if generation != self.generation or self._c is None or \
                self._pid != os.getpid():
            return  # the lease died with its session
        if self._busy:
            if not deferred_ok:
                raise RingcacheError(_errno.EBUSY, "client busy")
            self._deferred.append(lease_id)
            return
        _check(self._call(_library().rc_release, lease_id), "release")

    def dataset(self, name):
        """The dataset id for name: FileNotFoundError (ENOENT) for a dataset
        the daemon does not run (never configured, or removed by a reload),
        DatasetAccessError (EACCES) for one its ACL keeps from this user."""
        if isinstance(name, int):
            return name
        self._ptr()
        if self._session is not None:
            return self._session.dataset(name)
        return _check(self._call(_library().rc_dataset, _encode(name)),
                      "dataset", name)

    def datasets(self):
        """Names of the datasets the daemon listed at attach."""
        self._ptr()
        names = (self._c.datasets[i].name.decode()
                 for i in range(self._c.n_datasets))
        return [n for n in names if n]  # a removed one has no name

    def open(self, dataset, key):
        """Opens dataset (name or id) / key; returns a File."""
        ds = self.dataset(dataset)
        return File(self, ds, key, *self._open_handle(ds, key))

    def _open_handle(self, ds, key):
        """(handle, size, etag) of a new OPEN."""
        self._ptr()
        if self._session is not None:
            return self._session.open(ds, key)
        name = _encode(key)
        if b"\0" in name:  # as a C string it would name another object
            raise _error(-_errno.EINVAL, "open", key)
        st = _abi.rc_stat()
        handle = _check(self._call(_library().rc_open, ds, name,
                                   ctypes.byref(st)), "open", key)
        return handle, st.size, st.etag.decode()

    def read_many(self, dataset, keys):
        """Whole objects of dataset (name or id), one per key, read
        together: with the extension, one READ_KEY entry per key (open,
        read, close in one), all in one submission. Returns a list with, for
        each key, a read-only memoryview or the OSError of that key alone
        (FileNotFoundError for a missing one). A view of an object within
        one cache block is zero-copy over the daemon's arena and holds the
        lease until the view and every array or tensor made from it
        (numpy.frombuffer, torch.frombuffer) are gone; a larger object is
        one copy. With the extension a view outlives close(): the session
        ends when the last view goes; through ctypes it must not be
        touched after close()."""
        ds = self.dataset(dataset)
        self._ptr()
        if self._session is not None:
            return self._session.read_many(ds, keys)
        out = []
        for key in keys:
            try:
                with self.open(ds, key) as f:
                    out.append(f.view())
            except OSError as e:
                out.append(e)
        return out

    def probe_many(self, dataset, keys):
        """What read_many would answer for each key, without the bytes:
        the object's size, or the OSError of that key alone. One byte of
        every block of each object is read (the daemon has every block
        cached once this returns) and released at once: nothing is
        mapped or copied here for the rest. For a process that only needs
        the samples to be there, e.g. a DataLoader worker handing them
        over by reference (ringcache.torch)."""
        ds = self.dataset(dataset)
        self._ptr()
        if self._session is not None:
            return self._session.probe_many(ds, keys)
        out = []
        for key in keys:
            try:
                with self.open(ds, key) as f:
                    for at in range(0, f.size, self.block_size):
                        f.read(at, 1).release()
                    out.append(f.size)
            except OSError as e:
                out.append(e)
        return out

    def read_many_start(self, dataset, keys):
        """read_many in two halves: the batch's entries go to the daemon
        now and the call returns at once; the returned object's wait()
        gives what read_many would have. Start batch k+1, then work on
        batch k's samples: the daemon serves the next batch meanwhile.
        One batch in flight per Client: any other call on it completes
        the pending batch first (its wait() then returns at once). Through
        ctypes the batch is read here and wait() only hands it over."""
        ds = self.dataset(dataset)
        self._ptr()
        if self._session is not None:
            return self._session.read_many_start(ds, keys)
        return _DoneBatch(self.read_many(ds, keys))

    def writer(self, dataset, key):
        """A Writer for a new object dataset / key (the dataset must be
        writable = true and this user in its write ACL: else OSError
        EROFS / EACCES). Nothing is visible in S3 before close()."""
        ds = self.dataset(dataset)
        handle = _check(self._call(_library().rc_write_open, ds,
                                   _encode(key)), "write open", key)
        try:
            return Writer(self, ds, key, handle)
        except BaseException:
            self._call(_library().rc_close, handle)
            raise

    def sync_all(self):
        """Waits until S3 has every object committed through this shard;
        raises if it lacks one of this uid's (an upload that failed, even
        before the call, until a later save of its key lands)."""
        _check(self._call(_library().rc_sync, _abi.RC_SYNC_ALL), "sync")

    def list(self, dataset, prefix=""):
        """Yields ListEntry(name, size, is_prefix) for one directory level
        under prefix (names as the daemon returns them)."""
        ds = self.dataset(dataset)
        start = 0
        while True:
            buf = self._staging_buffer(LIST_BUFFER)
            more = ctypes.c_int(0)
            n = _check(self._call(_library().rc_list, ds, _encode(prefix),
                                  start, buf.index, 0, buf.size,
                                  ctypes.byref(more)), "list", prefix)
            # Decode the page before yielding: the caller may use this
            # client (and its staging buffer) between entries.
            yield from self._list_records(buf, n)
            start += n
            if not more.value or n == 0:
                return

    @staticmethod
    def _list_records(buf, n):
        entries = []
        pos = 0
        head = ctypes.sizeof(_abi.rc_list_entry)
        for _ in range(n):
            rec = _abi.rc_list_entry.from_buffer_copy(buf.map, pos)
            name = buf.map[pos + head:pos + head + rec.name_len].decode()
            entries.append(ListEntry(name, rec.size, bool(rec.is_prefix)))
            pos += rec.rec_len
        return entries

    def prefetch_plan(self, extents, append=False):
        """Hands the daemon the order of future reads: extents is a list
        of (File, offset, length) of this client. Replaces the previous
        plan; an empty list drops it. append=True (RC_PLAN_APPEND) puts
        them after the current plan instead, cancelling nothing: the next
        epoch's order, sent while this one runs, so the cache keeps what
        the next epoch reads early. Sessions attached with the same gpu
        share the plan's queue, so a DataLoader's workers (gpu=rank)
        advance the window the main process planned. Returns the number
        of entries accepted."""
        n = len(extents)
        size = max(n, 1) * ctypes.sizeof(_abi.rc_plan_entry)
        buf = _RegisteredBuffer(self, size)
        try:
            arr = (_abi.rc_plan_entry * max(n, 1)).from_buffer(buf.map)
            for i, (f, offset, length) in enumerate(extents):
                arr[i].handle = f._h()
                arr[i].offset = offset
                arr[i].len = length
            del arr
            fn = (_library().rc_prefetch_plan_append if append
                  else _library().rc_prefetch_plan)
            return _check(self._call(fn, buf.index, 0, n), "prefetch plan")
        finally:
            self._call(_library().rc_unregister_buffer, buf.index)
            buf.close()

    def buffer(self, size):
        """A writable memoryview over a new memfd registered with the
        daemon: read_into() into it (or any slice of it) is a single copy
        by the daemon, and the memory can be pinned for DMA, e.g.
        torch.cuda.cudart().cudaHostRegister(addr, size, 0). Lives until
        close(); not usable in a forked child."""
        self._ptr()
        b = _RegisteredBuffer(self, size)
        self._buffers.append(b)
        return memoryview(b.map)

    def pin_for_cuda(self):
        """Page-locks this session's arena mappings for the GPU
        (cudaHostRegister through libringcache, which dlopens the CUDA
        runtime): a tensor over a read()'s view then goes to the GPU by
        DMA with no staging copy, e.g.
        torch.frombuffer(view, dtype=torch.uint8).to("cuda",
        non_blocking=True). Undone at close(). Raises OSError: ENOSYS
        without a CUDA runtime, EIO with CUDA's reason otherwise."""
        res = self._call(_library().rc_cuda_pin_arenas)
        if res < 0:
            why = _library().rc_cuda_error().decode(errors="replace")
            raise OSError(-res, f"pin_for_cuda: {why}")

    def _staging_buffer(self, size):
        """The private registered buffer for copies and listings."""
        self._ptr()
        if self._staging is None or self._staging.size < size:
            if self._staging is not None:
                self._call(_library().rc_unregister_buffer,
                           self._staging.index)
                self._buffers.remove(self._staging)
                self._staging.close()
            self._staging = _RegisteredBuffer(self, size)
            self._buffers.append(self._staging)
        return self._staging

    def _registered_at(self, address, length):
        for b in self._buffers:
            if b is not self._staging and b.contains(address, length):
                return b
        return None

    def stats(self):
        """The daemon's counters, Prometheus text."""
        buf = ctypes.create_string_buffer(STATS_BUFFER)
        n = _check(self._call(_library().rc_stats, None, buf, len(buf)),
                   "stats")
        return buf.raw[:n].decode()

    def counters(self):
        """stats() as {name: value summed over labels}."""
        return parse_stats(self.stats())


class File:
    """An open object. Re-opens itself in a forked child."""

    def __init__(self, client, dataset, key, handle, size, etag):
        self.client = client
        self.dataset = dataset
        self.key = key
        self.size = size
        self.etag = etag
        self._handle = handle
        self._generation = client.generation

    def _h(self):
        if self._handle is None:
            raise RingcacheError(_errno.EBADF, "file is closed", self.key)
        self.client._ptr()
        if self._generation != self.client.generation:
            self._handle, self.size, self.etag = self.client._open_handle(
                self.dataset, self.key)
            self._generation = self.client.generation
        return self._handle

    def _span(self, offset, length):
        if offset < 0 or (length is not None and length < 0):
            raise ValueError("negative offset or length")
        end = self.size if length is None else min(self.size, offset + length)
        return max(0, end - offset)

    def read(self, offset=0, length=None):
        """Zero-copy read of [offset, offset+length) (None: to the end):
        a Lease whose .view / .views are read-only memoryviews over the
        daemon's arena. The bytes stay put until the lease is released."""
        todo = self._span(offset, length)
        h = self._h()
        extents = []
        ext = (_abi.rc_extent * MAX_EXTENTS)()
        lease = Lease(self.client, extents)
        try:
            while todo > 0:
                n = _check(self.client._call(_library().rc_read, h, offset,
                                             todo, ext, MAX_EXTENTS),
                           "read", self.key)
                if n == 0:
                    break  # the object shrank under us: EOF
                for e in ext[:n]:
                    extents.append((e.data, e.len, e.lease))
                    offset += e.len
                    todo -= e.len
        except BaseException:
            lease.release()
            raise
        return lease

    def view(self, offset=0, length=None):
        """[offset, offset+length) (None: to the end) as one read-only
        memoryview: zero-copy over the arena when the range lies in one
        cache block (the lease is held until the view and everything made
        from it are gone), else one copy."""
        todo = self._span(offset, length)
        h = self._h()
        session = self.client._session
        if session is not None:
            return session.read(h, offset, todo)
        lease = self.read(offset, todo)
        if len(lease._extents) == 1:
            return lease.view
        with lease:
            return memoryview(lease.tobytes())

    def pread(self, offset=0, length=None):
        """[offset, offset+length) as bytes (one copy out of the arena)."""
        with self.read(offset, length) as lease:
            return lease.tobytes()

    def read_into(self, offset, buf):
        """Fills buf (any writable contiguous buffer) from offset; returns
        the bytes copied (short at EOF). Into a Client.buffer() view the
        daemon copies directly; elsewhere through a staging buffer."""
        view = memoryview(buf).cast("B")
        if view.readonly:
            raise TypeError("read_into needs a writable buffer")
        want = self._span(offset, len(view))
        if want == 0:
            return 0
        h = self._h()
        reg = self.client._registered_at(_address_of(view), want)
        if reg is not None:
            base = _address_of(view) - reg.address
            return self._copy(h, offset, want, reg, base, None)
        stage = self.client._staging_buffer(min(want, STAGING_MAX))
        return self._copy(h, offset, want, stage, 0, view)

    def _copy(self, h, offset, want, reg, buf_offset, out):
        """rc_read_into in pieces; with out, each piece is moved from the
        staging buffer (reg) into out."""
        done = 0
        piece_max = _abi.RC_MAX_IO if out is None else reg.size
        while done < want:
            piece = min(want - done, piece_max)
            n = _check(self.client._call(
                _library().rc_read_into, h, offset + done, piece, reg.index,
                buf_offset + (0 if out is not None else done)),
                "read_into", self.key)
            if n == 0:
                break
            if out is not None:
                out[done:done + n] = reg.map[:n]
            done += n
        return done

    def stat(self):
        """Refreshes size and etag from the daemon."""
        st = _abi.rc_stat()
        _check(self.client._call(_library().rc_stat_handle, self._h(),
                                 ctypes.byref(st)), "stat", self.key)
        self.size, self.etag = st.size, st.etag.decode()
        return self

    def close(self):
        if self._handle is None:
            return
        h, self._handle = self._handle, None
        if self._generation == self.client.generation and \
                self.client._c is not None and \
                self.client._pid == os.getpid():
            if self.client._session is not None:
                self.client._session.close(h)
            else:
                _check(self.client._call(_library().rc_close, h), "close",
                       self.key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._handle is not None and not self.client._busy:
                self.close()
        except Exception:
            pass


class Lease:
    """Leased extents of one zero-copy read. Every memoryview made from it
    keeps it alive; release() (or the with block, or garbage collection of
    the lease and all its views) hands the blocks back to the cache.
    Views must not be used after release: the daemon may reuse the bytes."""

    def __init__(self, client, extents):
        self._client = client
        self._generation = client.generation
        self._extents = extents  # [(address, length, lease id)]
        self.released = False
        client._leases.add(self)

    def __len__(self):
        return sum(e[1] for e in self._extents)

    def _view_of(self, address, length):
        arr = (ctypes.c_char * length).from_address(address)
        arr._pin = self  # the view keeps arr, arr keeps the lease
        return memoryview(arr).cast("B").toreadonly()

    @property
    def views(self):
        """One read-only memoryview per extent (cache block), zero-copy."""
        if self.released:
            raise ValueError("lease released")
        return [self._view_of(a, n) for a, n, _ in self._extents if n]

    @property
    def view(self):
        """The whole range as one zero-copy memoryview; ValueError if it
        spans several cache blocks (use views or tobytes())."""
        if self.released:
            raise ValueError("lease released")
        if len(self._extents) == 0:
            return memoryview(b"")
        if len(self._extents) > 1:
            raise ValueError(f"range spans {len(self._extents)} cache "
                             "blocks: use .views or .tobytes()")
        a, n, _ = self._extents[0]
        return self._view_of(a, n)

    def tobytes(self):
        return b"".join(v.tobytes() for v in self.views)

    def copy_into(self, buf):
        """Copies the leased bytes into buf (writable, contiguous, at least
        len(self) bytes): the one copy out of the arena. Returns len."""
        out = memoryview(buf).cast("B")
        pos = 0
        for v in self.views:
            out[pos:pos + len(v)] = v
            pos += len(v)
        return pos

    def release(self, _deferred_ok=False):
        if self.released:
            return
        self.released = True
        self._client._leases.discard(self)
        for _, _, lease_id in self._extents:
            if lease_id != _abi.RC_NO_LEASE:
                self._client._release(lease_id, self._generation,
                                      _deferred_ok)

    def _orphan(self):
        """The session is gone (fork): nothing to hand back."""
        self.released = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release(_deferred_ok=True)
        except Exception:
            pass


def _seek_position(pos, size, offset, whence):
    """The position io's seek(offset, whence) gives a stream at pos of
    size bytes (ValueError as io raises it)."""
    base = {io.SEEK_SET: 0, io.SEEK_CUR: pos, io.SEEK_END: size}
    if whence not in base:
        raise ValueError(f"invalid whence {whence}")
    new = base[whence] + offset
    if new < 0:
        raise ValueError("negative seek position")
    return new


class Writer(io.RawIOBase):
    """A checkpoint object being written through the daemon's write-back:
    writable and seekable, so torch.save(obj, writer) works.

    write() gathers bytes in a registered buffer of its own and hands them
    to the daemon (rc_write) in pieces of up to WRITE_BUFFER bytes at the
    current position; seek() anywhere (holes read as zeros). close()
    commits: the object is then as durable as the dataset's durability
    says and uploads in the background. The write handle lives until
    release() (or garbage collection), so rename() and sync() work after
    close(). As a context manager it commits on a clean exit and aborts on
    an exception. A Writer dropped without close() is aborted, never
    committed half-written. Not usable in a forked child."""

    def __init__(self, client, dataset, key, handle):
        super().__init__()
        self.client = client
        self.dataset = dataset
        self.key = key
        self.committed = False
        self.aborted = False
        self._handle = handle
        self._generation = client.generation
        self._pos = 0
        self._size = 0
        self._pending_at = 0   # object offset of the buffered bytes
        self._pending = 0      # bytes buffered, not yet handed over
        self._buf = _RegisteredBuffer(client, WRITE_BUFFER)
        client._buffers.append(self._buf)

    # ---- io.RawIOBase -------------------------------------------------------

    def writable(self):
        return True

    def seekable(self):
        return True

    def readable(self):
        return False

    def tell(self):
        self._checkClosed()
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        self._checkClosed()
        self._pos = _seek_position(self._pos,
                                   max(self._size, self._pending_end()),
                                   offset, whence)
        return self._pos

    def write(self, b):
        self._checkClosed()
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view):
            if self._pending and self._pos != self._pending_end():
                self._hand_over()  # a seek broke the run of bytes
            if not self._pending:
                self._pending_at = self._pos
            room = self._buf.size - self._pending
            n = min(room, len(view) - done)
            self._buf.map[self._pending:self._pending + n] = \
                view[done:done + n]
            self._pending += n
            self._pos += n
            done += n
            if self._pending == self._buf.size:
                self._hand_over()
        return done

    def flush(self):
        """Hands buffered bytes to the daemon (staged, not committed)."""
        if not self.closed and not self.aborted:
            self._hand_over()

    def close(self):
        """Commits the object (COMMIT) unless aborted; idempotent."""
        if self.closed:
            return
        try:
            if not self.aborted:
                self._hand_over()
                _check(self.client._call(_library().rc_commit, self._h()),
                       "commit", self.key)
                self.committed = True
        finally:
            super().close()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
            return False
        if not self.closed:
            try:
                self.abort()
            except OSError:
                self.release()  # CLOSE drops an uncommitted object too
        return False

    def __del__(self):
        # Not IOBase's close(): a forgotten writer must not commit.
        try:
            self.aborted = self.aborted or not self.committed
            self.release()
        except Exception:
            pass

    # ---- write-back ---------------------------------------------------------

    def abort(self):
        """Drops the uncommitted object; nothing reaches S3."""
        if self.committed:
            raise RingcacheError(_errno.EBUSY, "already committed", self.key)
        if not self.aborted:
            self._pending = 0
            self.aborted = True
            _check(self.client._call(_library().rc_abort, self._h()),
                   "abort", self.key)
        super().close()

    def rename(self, key):
        """Gives the object a new key: free while it is pending, a
        server-side copy once it is in S3. Works after close()."""
        _check(self.client._call(_library().rc_rename, self._h(),
                                 _encode(key)), "rename", key)
        self.key = key

    def sync(self):
        """Returns when S3 has the committed object."""
        if not self.committed:
            raise RingcacheError(_errno.EINVAL, "sync before close()",
                                 self.key)
        _check(self.client._call(_library().rc_sync, self._h()), "sync",
               self.key)

    def release(self):
        """Drops the write handle and the buffer (an uncommitted object
        is aborted by the daemon). rename() and sync() fail afterwards."""
        if not self.closed:
            self.aborted = self.aborted or not self.committed
            super().close()
        h, self._handle = self._handle, None
        c = self.client
        if h is None or self._generation != c.generation or \
                c._c is None or c._pid != os.getpid():
            return  # the session (and the handle) died first
        if self._buf in c._buffers:
            c._buffers.remove(self._buf)
            c._call(_library().rc_unregister_buffer, self._buf.index)
            self._buf.close()
        _check(c._call(_library().rc_close, h), "close", self.key)

    # ---- internals ----------------------------------------------------------

    def _h(self):
        if self._handle is None:
            raise RingcacheError(_errno.EBADF, "writer released", self.key)
        self.client._ptr()
        if self._generation != self.client.generation:
            raise RingcacheError(_errno.EBADF, "write handle of another "
                                 "session (forked?)", self.key)
        return self._handle

    def _pending_end(self):
        return self._pending_at + self._pending

    def _hand_over(self):
        """rc_write of the buffered run at its object offset."""
        done = 0
        h = self._h() if self._pending else None
        while done < self._pending:
            n = _check(self.client._call(
                _library().rc_write, h, self._pending_at + done,
                self._pending - done, self._buf.index, done),
                "write", self.key)
            if n == 0:
                raise OSError(_errno.EIO, "write: daemon took no bytes",
                              self.key)
            done += n
        self._size = max(self._size, self._pending_end())
        self._pending = 0
