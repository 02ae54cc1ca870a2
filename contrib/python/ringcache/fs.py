"""ringcache.fs - an fsspec file system over ringcached: paths are
"ringcache://DATASET/KEY", so fsspec.open, pandas, HF datasets and other
fsspec users read datasets from the daemon's shared cache and put
checkpoints through its write-back.

Registered for the "ringcache" protocol by the package's entry point
(ringcache-*.dist-info/entry_points.txt, group fsspec.specs), so
fsspec.open("ringcache://imagenet/train/0001.JPEG") works without importing
ringcache first; importing ringcache.fs registers it too.

Supported: open (rb, wb), cat/cat_file (ranges), ls, info, exists, put /
put_file / pipe_file to writable datasets. No rm or mv (the ring API has
no DELETE: NotImplementedError), no append.
Reads copy once, out of the daemon's arena into the caller's buffer; there
is no read-ahead cache here (the daemon's cache is the cache)."""

import errno
import io
import os

import fsspec
from fsspec.spec import AbstractFileSystem

from . import Client, RingcacheError, _seek_position

PROTOCOL = "ringcache"


class RingcacheReader(io.RawIOBase):
    """A seekable, read-only file over one object."""

    def __init__(self, fs, path, f):
        super().__init__()
        self.fs = fs
        self.path = path
        self.name = path
        self.mode = "rb"
        self.size = f.size
        self._f = f
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        self._pos = _seek_position(self._pos, self.size, offset, whence)
        return self._pos

    def readinto(self, b):
        view = memoryview(b).cast("B")
        n = min(len(view), max(0, self.size - self._pos))
        if n == 0:
            return 0
        with self._f.read(self._pos, n) as lease:
            got = lease.copy_into(view)
        self._pos += got
        return got

    def readall(self):
        n = max(0, self.size - self._pos)
        data = self._f.pread(self._pos, n) if n else b""
        self._pos += len(data)
        return data

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


class RingcacheFileSystem(AbstractFileSystem):
    """fsspec file system of a ringcached's datasets.

    socket: the daemon's socket (None: $RINGCACHE_SOCKET, else
    /run/ringcache/ringcache.sock); gpu: the local rank this process
    feeds (the daemon serves it from that GPU's shard). One session per
    process, attached on first use and again in a forked child (DataLoader
    workers)."""

    protocol = PROTOCOL
    root_marker = ""

    def __init__(self, socket=None, gpu=-1, **kwargs):
        super().__init__(socket=socket, gpu=gpu, **kwargs)
        self.socket = socket
        self.gpu = gpu
        self._client = None

    @property
    def client(self):
        if self._client is None:
            self._client = Client(self.socket, gpu=self.gpu)
        return self._client

    # ---- paths ----------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith(PROTOCOL + "://"):
            path = path[len(PROTOCOL) + 3:]
        return path.strip("/")

    @staticmethod
    def _split(path):
        """(dataset, key) of a stripped path."""
        ds, _, key = path.partition("/")
        if not ds:
            raise FileNotFoundError(errno.ENOENT, "no dataset in path", path)
        return ds, key

    # ---- listing and attributes -----------------------------------------

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            entries = [{"name": n, "size": 0, "type": "directory"}
                       for n in self.client.datasets()]
        else:
            entries = self._ls_dataset(path)
        if not entries:
            info = self.info(path)  # a file lists itself
            entries = [info]
        return entries if detail else [e["name"] for e in entries]

    def _ls_dataset(self, path):
        ds, key = self._split(path)
        prefix = key + "/" if key else ""
        out = []
        for e in self.client.list(ds, prefix):
            name = e.name.rstrip("/")
            if not name or name == key:
                continue
            out.append({"name": f"{ds}/{name}", "size": e.size,
                        "type": "directory" if e.is_prefix else "file"})
        return out

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            return {"name": "", "size": 0, "type": "directory"}
        ds, key = self._split(path)
        if not key:
            self.client.dataset(ds)  # ENOENT / EACCES for a bad name
            return {"name": ds, "size": 0, "type": "directory"}
        try:
            with self.client.open(ds, key) as f:
                return {"name": path, "size": f.size, "type": "file",
                        "ETag": f.etag}
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EINVAL):
                raise
        if self._ls_dataset(path):
            return {"name": path, "size": 0, "type": "directory"}
        raise FileNotFoundError(errno.ENOENT, "no such object or prefix",
                                path)

    # ---- reading ----------------------------------------------------------

    def _open(self, path, mode="rb", block_size=None, autocommit=True,
              cache_options=None, **kwargs):
        path = self._strip_protocol(path)
        ds, key = self._split(path)
        if mode == "rb":
            return RingcacheReader(self, path, self.client.open(ds, key))
        if mode == "wb":
            return self.client.writer(ds, key)  # close() commits
        raise NotImplementedError(
            f"mode {mode!r}: ringcache objects are read (rb) or written "
            "whole (wb)")

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        ds, key = self._split(path)
        with self.client.open(ds, key) as f:
            start = 0 if start is None else start
            end = f.size if end is None else end
            start = max(0, f.size + start) if start < 0 else start
            end = max(0, f.size + end) if end < 0 else min(end, f.size)
            return f.pread(start, max(0, end - start))

    # ---- writing ----------------------------------------------------------

    def pipe_file(self, path, value, **kwargs):
        with self.open(path, "wb") as f:
            f.write(value)

    def mkdir(self, path, create_parents=True, **kwargs):
        pass  # S3 has no directories: a key's prefixes appear with it

    def makedirs(self, path, exist_ok=False):
        pass

    def sync(self):
        """Returns when S3 has every object written through this shard."""
        self.client.sync_all()

    def rm_file(self, path):
        raise NotImplementedError("ringcache has no delete")

    def _rm(self, path):
        raise NotImplementedError("ringcache has no delete")

    def rm(self, path, recursive=False, maxdepth=None):
        raise NotImplementedError("ringcache has no delete")


fsspec.register_implementation(PROTOCOL, RingcacheFileSystem, clobber=True)

__all__ = ["RingcacheFileSystem", "RingcacheReader", "RingcacheError"]
