"""ringcache.torch - owns the PyTorch adapter: a map-style Dataset whose
samples are the objects of a ringcache dataset, and a sampler wrapper that
hands each epoch's order to the daemon as a prefetch plan, and the next
epoch's order too, appended, while this one runs.

    from ringcache.torch import RingcacheDataset, PlanSampler
    ds = RingcacheDataset(sock, "imagenet", prefix="train/")
    loader = DataLoader(ds, sampler=PlanSampler(RandomSampler(ds), ds),
                        num_workers=8)

Each DataLoader worker attaches its own session on first use (the Client
notices the fork); with the spawn start method the Dataset pickles without
its client and attaches in the worker the same way.

Batches: with batch_size set, the DataLoader calls __getitems__ with the
batch's indices, and the whole batch is one Client.read_many (one
READ_KEY entry per sample, all in one submission). Where torch does not call __getitems__,
hand the dataset whole batches with sampler=BatchSampler(...),
batch_size=None, collate_fn=torch.utils.data.default_collate: __getitem__
takes a list of indices the same way.

Subclasses: a subclass that overrides __getitem__ (the PyTorch idiom,
`return i, decode(super().__getitem__(i))`) gets its own samples from a
batched DataLoader too: __getitems__ still reads the batch in one
read_many, then calls the subclass's __getitem__ for each index, and the
base __getitem__ hands out the sample already read. A subclass that
overrides __getitems__ as well is called as it is. For a per-sample
function without a subclass, transform= runs on every sample in both
paths.

Handing samples over by reference: with handoff="reference", a batch a
DataLoader worker makes crosses to the main process as its keys (a few
hundred bytes) instead of its bytes. The worker still asks for the batch
(one Client.probe_many: a byte of every block read, so the blocks are
warm, and a missing key raises there, naming its sample) without mapping
or copying the rest, and default_collate gives a RingcacheBatch. The
main process resolves it as it unpickles it, against its own attachment:
one read_many of warm blocks copied straight into the batch tensor (or the
list of bytes default_collate would have made). That is one copy from the
arena to the trainer instead of three (arena to a sample tensor, the stack
into new shared memory, the main process's first touch of it). The batch
tensor's memory is a buffer a dropped batch used before (_BatchPool):
its pages are mapped already, so the copy takes no page faults. With
pin_memory=True and a GPU, torch's pin thread unpickles the batch and
calls its pin_memory(): the copy lands directly in pinned memory. Raw
samples only (output "bytes" or "tensor", no transform, no subclass
__getitem__): anything that must look at a sample's bytes runs in the
worker, and those samples cross as tensors as usual.

Resuming mid-epoch: StatefulLoader is a DataLoader that counts the samples
it has handed out; its state_dict() (save it with the model) holds the
epoch's order, how far it was read and the next epoch's order drawn ahead,
and load_state_dict() in a restarted trainer makes the next epoch yield
exactly the samples not yet handed out, in the same order:

    loader = StatefulLoader(ds, sampler=PlanSampler(DistributedSampler(ds),
                            ds), batch_size=32, num_workers=8)
    if resuming:
        loader.load_state_dict(torch.load(path)["loader"])
"""

import collections
import hashlib
import logging
import mmap
import os
import threading
import weakref

import numpy

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data._utils import collate as _collate
from torch.utils.data._utils.pin_memory import _pin_memory_loop

import ringcache

log = logging.getLogger("ringcache.torch")

__all__ = ["RingcacheDataset", "RingcacheBatch", "PlanSampler",
           "StatefulLoader"]

# Version of the state_dict layouts below; load_state_dict refuses others.
STATE_VERSION = 1


class RingcacheDataset(torch.utils.data.Dataset):
    """Sample i is the whole object keys[i] of `dataset`.

    keys: the object keys (relative to the dataset), or prefix: every
    object under that prefix, listed recursively once here, sorted.
    output: "bytes" (default) or "tensor" (a 1-D uint8 tensor); either way
    exactly one copy out of the daemon's arena. Or "view": a read-only
    memoryview, zero-copy over the arena for an object within one cache
    block, holding its lease until it (and any numpy.frombuffer /
    torch.frombuffer made of it) is dropped. transform: applied to that.
    handoff: "copy" (default) or "reference": a DataLoader worker's batch
    crosses to the main process as its keys and is read there (see the
    module's documentation); raw samples only (output "bytes" or "tensor",
    no transform, no subclass __getitem__: ValueError).
    """

    def __init__(self, socket, dataset, keys=None, prefix=None,
                 transform=None, output="bytes", gpu=-1, handoff="copy"):
        if (keys is None) == (prefix is None):
            raise ValueError("give exactly one of keys or prefix")
        if output not in ("bytes", "tensor", "view"):
            raise ValueError("output must be 'bytes', 'tensor' or 'view'")
        if handoff not in ("copy", "reference"):
            raise ValueError("handoff must be 'copy' or 'reference'")
        if handoff == "reference":
            why = ("a transform runs on the sample in the worker"
                   if transform is not None else
                   "output='view' is a lease of the worker's session"
                   if output == "view" else
                   f"{type(self).__name__}.__getitem__ makes the sample "
                   "in the worker" if self._overridden() else None)
            if why:
                raise ValueError("handoff='reference' hands raw samples to "
                                 f"the main process, but {why}: use "
                                 "handoff='copy'")
        self.handoff = handoff
        self.socket = socket
        self.dataset = dataset
        self.transform = transform
        self.output = output
        self.gpu = gpu
        self._client_obj = None
        self._batch_read = None  # {index: sample} of the batch being served
        self.plan = None  # the epoch order being read (keys)
        self.next_plan = None  # the order appended after it, if any
        self._plan_logged = False
        self.keys = list(keys) if keys is not None else self._walk(prefix)

    def client(self):
        """This process's Client (made on first use; a forked worker's
        inherited one re-attaches by itself)."""
        if self._client_obj is None:
            self._client_obj = ringcache.Client(self.socket, gpu=self.gpu)
        return self._client_obj

    def _walk(self, prefix):
        keys = []
        todo = [prefix]
        while todo:
            for e in self.client().list(self.dataset, todo.pop()):
                (todo if e.is_prefix else keys).append(e.name)
        return sorted(keys)

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, index):
        if isinstance(index, (list, tuple)):  # a BatchSampler's batch
            return self.__getitems__(index)
        batch = getattr(self, "_batch_read", None)
        if batch and index in batch:
            return batch.pop(index)
        return self._read([index])[0]

    def __getitems__(self, indices):
        """The samples of indices, read in one batch (read_many); the
        first key's error is raised if any fails. A subclass that
        overrides __getitem__ (and not this) has it called for each index,
        over the batch read here."""
        if not self._overridden():
            if getattr(self, "handoff", "copy") == "reference" and \
                    torch.utils.data.get_worker_info() is not None:
                return self._references(indices)
            return self._read(indices)  # no override, or the subclass's own
        self._batch_read = dict(zip(indices, self._read(indices)))
        try:
            return [self.__getitem__(i) for i in indices]
        finally:
            self._batch_read = None  # samples the override skipped go now

    def _overridden(self):
        """A subclass's __getitem__ must see every sample (and its own
        __getitems__, if it has one, is what torch calls instead)."""
        cls = type(self)
        return cls.__getitem__ is not RingcacheDataset.__getitem__ and \
            cls.__getitems__ is RingcacheDataset.__getitems__

    def _references(self, indices):
        """handoff="reference" in a worker: probes the batch (every block
        cached, a failing key raised here against its sample, unequal
        sizes of a tensor batch too) without reading its bytes; the
        samples go on as references."""
        keys = [self.keys[i] for i in indices]
        sizes = self.client().probe_many(self.dataset, keys)
        error = _first_error(sizes)
        if error is None and self.output == "tensor":
            error = _unequal(sizes)
        if error:
            raise error
        return [SampleRef(self.socket, self.gpu, self.dataset, k,
                          self.output) for k in keys]

    def _read(self, indices):
        views = self.client().read_many(self.dataset,
                                        [self.keys[i] for i in indices])
        error = _first_error(views)
        samples = None if error else [self._sample(v) for v in views]
        del views  # the leases go now (not with the error, nor with the
        # next batch: a worker may wait long for it)
        if self.output != "view":
            self.client().send_releases()
        if error:
            raise error
        return samples

    def _sample(self, view):
        if self.output == "tensor":
            sample = torch.empty(len(view), dtype=torch.uint8)
            sample.numpy().data[:] = view
        elif self.output == "bytes":
            sample = view.tobytes()
        else:
            sample = view
        return self.transform(sample) if self.transform else sample

    def send_plan(self, indices, append=False):
        """Hands the epoch's sample order to the daemon as the prefetch
        plan of this dataset's GPU queue (whole objects, in order).
        append=True sends the next epoch's order after the current plan
        (RC_PLAN_APPEND) instead of replacing it: the daemon then knows
        each sample's next use across the epoch boundary.

        The plan goes out from the process that iterates the sampler (the
        DataLoader's main process) while the workers read: give the dataset
        gpu=<local rank> so their sessions share the queue and their reads
        move its window. Planned keys stay open in this process (a handle
        is a pointer in the daemon), reused from epoch to epoch."""
        keys = [self.keys[i] for i in indices]
        if append:
            self.next_plan = keys
        else:
            self.plan, self.next_plan = keys, None
        client = self.client()
        if not hasattr(self, "_plan_files"):
            self._plan_files = {}
        extents = []
        for key in keys:
            f = self._plan_files.get(key)
            if f is None:
                f = self._plan_files[key] = client.open(self.dataset, key)
            extents.append((f, 0, max(f.size, 1)))
        try:
            client.prefetch_plan([e for e in extents if e[0].size > 0],
                                 append=append)
        except OSError as e:
            if not self._plan_logged:
                log.warning("ringcache: prefetch plan refused: %s", e)
                self._plan_logged = True

    def keys_digest(self):
        """SHA-256 over the sample keys in index order: a saved sampler
        position means something only over the same keys."""
        h = hashlib.sha256(self.dataset.encode() + b"\0")
        for key in self.keys:
            h.update(key.encode() + b"\0")
        return h.hexdigest()

    def state_dict(self):
        return {"version": STATE_VERSION, "dataset": self.dataset,
                "n_keys": len(self.keys), "keys_sha256": self.keys_digest()}

    def load_state_dict(self, state):
        """Checks that state was saved over the same keys (a listing that
        changed in S3 since would shift every index): ValueError if not."""
        _check_version(state, "dataset")
        if state["dataset"] != self.dataset or \
                state["n_keys"] != len(self.keys) or \
                state["keys_sha256"] != self.keys_digest():
            raise ValueError(
                f"ringcache: cannot resume: dataset {self.dataset} now has "
                f"{len(self.keys)} keys (digest {self.keys_digest()[:12]}), "
                f"the saved position is over {state['n_keys']} keys of "
                f"{state['dataset']} (digest {state['keys_sha256'][:12]})")

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client_obj"] = None  # each process attaches on its own
        state["_batch_read"] = None
        state.pop("_plan_files", None)
        return state


class SampleRef:
    """One raw sample handed over by reference: it pickles as its key and
    is read again, whole, where it is unpickled (a process's own
    attachment; the block is warm, so one READ_KEY). default_collate turns
    a batch of them into a RingcacheBatch."""

    __slots__ = ("socket", "gpu", "dataset", "key", "output")

    def __init__(self, socket, gpu, dataset, key, output):
        self.socket, self.gpu, self.dataset = socket, gpu, dataset
        self.key, self.output = key, output

    def __reduce__(self):
        return (_resolve_sample, (self.socket, self.gpu, self.dataset,
                                  self.key, self.output))


class RingcacheBatch:
    """A batch of raw samples handed over by reference (what
    default_collate makes of SampleRefs). Unpickled in the main process it
    is the batch default_collate would have made of the samples: a
    (batch, size) uint8 tensor for output="tensor", a list of bytes for
    output="bytes"; read straight into that tensor, pinned when torch's
    pin_memory thread asks for it (pin_memory()). Unpickled in torch's pin
    thread it stays a RingcacheBatch until that pin_memory() call."""

    def __init__(self, socket, gpu, dataset, keys, output):
        self.socket, self.gpu, self.dataset = socket, gpu, dataset
        self.keys, self.output = keys, output

    def __len__(self):
        return len(self.keys)

    def __reduce__(self):
        return (_resolve_batch, (self.socket, self.gpu, self.dataset,
                                 self.keys, self.output))

    def resolve(self, pin=False):
        """The batch's samples read here (pin: into pinned memory)."""
        attached = _attachment(self.socket, self.gpu)
        with attached.lock:
            views = attached.client.read_many(self.dataset, self.keys)
            error = _first_error(views)
            if error is None and self.output == "tensor":
                error = _unequal(views)
            batch = None if error else [v.tobytes() for v in views] \
                if self.output == "bytes" else _stacked(views, pin)
            # No lease outlives the batch's copy: the views go before any
            # error is raised (its traceback would hold them).
            del views
            attached.client.send_releases()
        if error:
            raise error
        return batch

    def pin_memory(self, device=None):
        return self.resolve(pin=torch.cuda.is_available())


def _first_error(views):
    """read_many's first failed key, if any (no view stays referenced)."""
    return next((v for v in views if isinstance(v, BaseException)), None)


def _unequal(views):
    """default_collate's own refusal of samples of unequal sizes, in its
    words (returned, not raised); views or their sizes."""
    sizes = [v if isinstance(v, int) else len(v) for v in views]
    n = sizes[0]
    for i, size in enumerate(sizes):
        if size != n:
            return RuntimeError(
                "stack expects each tensor to be equal size, but got "
                f"[{n}] at entry 0 and [{size}] at entry {i}")
    return None


def _stacked(views, pin):
    """What default_collate makes of equal-size uint8 tensors, with the
    bytes copied once, from the arena into the batch (pinned: torch's
    caching host allocator reuses its blocks; else a pooled buffer)."""
    n = len(views[0])
    if pin:
        out = torch.empty((len(views), n), dtype=torch.uint8,
                          pin_memory=True)
        rows = out.numpy()
    else:
        rows = _pool.take((len(views), n))
        out = torch.from_numpy(rows)
    for i, v in enumerate(views):
        rows[i].data[:] = v
    return out


class _BatchPool:
    """Batch buffers of the main process, used again once their batch is
    gone. A new batch tensor (9 MB for 16 x 570 KB) is memory the
    allocator got from the kernel anew or that the last fork of the
    workers write-protected, and the copy into it faults in every 4 KiB
    page: measured on the 2-vCPU VM, ~1,500 minor faults a batch and
    about a third of the main process's CPU time. A buffer of shared
    memory used before keeps its pages mapped across forks. A batch is
    a tensor over an array made for it over the buffer: when the last
    tensor sharing its storage (a view, a slice) goes, torch drops the
    array, and its finalizer hands the buffer back. At most MAX_BYTES
    wait free (a trainer that keeps its batches keeps their buffers);
    the rest go to the allocator."""

    MAX_BYTES = 256 << 20

    def __init__(self):
        self.free = {}  # shape -> deque of arrays whose pages are touched
        self.free_bytes = 0
        # Reentrant: a collection inside take() may finalize a batch in
        # this very thread.
        self.lock = threading.RLock()

    def take(self, shape):
        buf = None
        with self.lock:
            q = self.free.get(shape)
            if q:
                buf = q.pop()
                self.free_bytes -= buf.nbytes
        if buf is None:
            # Shared, not private: a DataLoader forks its workers each
            # epoch, and a fork write-protects every private page of
            # this process; the next copy into the buffer would fault
            # each page again (and copy it, while a worker lives).
            size = shape[0] * shape[1]
            buf = numpy.frombuffer(mmap.mmap(-1, max(size, 1)),
                                   dtype=numpy.uint8,
                                   count=size).reshape(shape)
        rows = buf.view()  # the batch's own array: its end frees buf
        weakref.finalize(rows, self._give_back, buf)
        return rows

    def _give_back(self, buf):
        # Runs where the batch's last tensor goes, in any thread.
        with self.lock:
            if self.free_bytes + buf.nbytes > self.MAX_BYTES:
                return
            self.free.setdefault(buf.shape, collections.deque()).append(
                buf)
            self.free_bytes += buf.nbytes


_pool = _BatchPool()


class _Attachment:
    """This process's own session for resolving references, shared by
    the threads that unpickle batches (main thread, pin thread)."""

    def __init__(self, socket, gpu):
        self.client = ringcache.Client(socket, gpu=gpu)
        self.lock = threading.Lock()


_attachments = {}
_attachments_lock = threading.Lock()


def _forget_attachments():
    global _attachments, _attachments_lock, _pool
    _pool = _BatchPool()  # the parent's buffers are its batches' memory
    # A forked child (a worker) starts without its parent's: a lock held
    # by a parent's thread at the fork would never be let go here.
    _attachments, _attachments_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=_forget_attachments)


def _attachment(socket, gpu):
    with _attachments_lock:
        a = _attachments.get((socket, gpu))
        if a is None:
            a = _attachments[(socket, gpu)] = _Attachment(socket, gpu)
        return a


def _in_pin_thread():
    """Whether this thread is torch's pin_memory thread (it unpickles the
    workers' batches, then pins them)."""
    return getattr(threading.current_thread(), "_target",
                   None) is _pin_memory_loop


def _resolve_batch(socket, gpu, dataset, keys, output):
    """Unpickling a RingcacheBatch. Never raises: torch unpickles a
    worker's (index, batch) as one, and an exception here would lose the
    index (the loader would wait for that batch for ever); the error
    comes back as torch's own ExceptionWrapper, re-raised by the loader
    in the trainer, naming the key."""
    batch = RingcacheBatch(socket, gpu, dataset, keys, output)
    if _in_pin_thread():
        return batch  # pin_memory() reads it into pinned memory
    try:
        return batch.resolve()
    except Exception:
        wrapped = ExceptionWrapper(
            where=f"in ringcache reading a batch of {dataset} (keys "
                  f"{keys[0]!r}...) handed over by reference")
    # An exception from inside the read (torch's SIGCHLD handler raises
    # one when a worker dies) held the views in its traceback until here.
    _attachment(socket, gpu).client.send_releases()
    return wrapped


def _resolve_sample(socket, gpu, dataset, key, output):
    try:
        b = RingcacheBatch(socket, gpu, dataset, [key], output)
        return b.resolve()[0]
    except Exception:
        wrapped = ExceptionWrapper(
            where=f"in ringcache reading {dataset}/{key} handed over by "
                  "reference")
    _attachment(socket, gpu).client.send_releases()
    return wrapped


def _collate_refs(batch, *, collate_fn_map=None):
    first = batch[0]
    return RingcacheBatch(first.socket, first.gpu, first.dataset,
                          [r.key for r in batch], first.output)


# default_collate's documented extension point: a batch of references is
# collated into one RingcacheBatch (in the worker; nothing is read there).
_collate.default_collate_fn_map[SampleRef] = _collate_refs


def _check_version(state, what):
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"ringcache: {what} state of version "
                         f"{state.get('version')!r}, this is version "
                         f"{STATE_VERSION}")


class PlanSampler(torch.utils.data.Sampler):
    """Wraps a sampler: at each epoch's __iter__ it materializes the inner
    order, sends it to dataset.send_plan(), and yields the same order.

    ahead=True (the default) also draws the next epoch's order as the epoch
    starts and appends it to the plan, so the cache keeps the samples the
    next epoch reads early instead of treating everything read this epoch
    as done with; that epoch then yields exactly the order drawn. A sampler
    with set_epoch (DistributedSampler) is drawn at epoch + 1 and set back;
    one without simply has its next order drawn a little earlier (a
    RandomSampler without its own generator then takes its seed from
    torch's global RNG at another moment). If an epoch is left unfinished,
    the next one replaces the plan rather than appending to a stale one.

    state_dict(consumed) / load_state_dict(): the epoch's whole order, how
    many of its samples were consumed, the next order drawn ahead, the inner
    sampler's generator state and its world (num_replicas, rank). After
    load_state_dict, the epoch saved (same set_epoch, or simply the next
    __iter__ for a sampler without one) yields order[consumed:] and plans
    exactly that, and the epoch after it yields the order drawn ahead
    before the crash: the run continues as if never stopped. A different
    world size or rank is refused (ValueError): the shards would differ."""

    def __init__(self, sampler, dataset, ahead=True):
        self.sampler = sampler
        self.dataset = dataset
        self.ahead = ahead
        self._iters = 0
        self._next = None  # (epoch tag, order) drawn and appended early
        self._finished = True  # the last epoch's order was read through
        self._order = None  # (tag, the whole order) of the current epoch
        self._start = 0  # where in it this run began (a resumed epoch)
        self._yielded = 0  # indices yielded since then
        self._resume = None  # (tag, order, consumed) loaded, not yet begun

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    @property
    def epoch(self):
        """The epoch the next __iter__ reads: the inner sampler's (set by
        set_epoch, and by load_state_dict to the epoch to resume), else
        the count of epochs begun."""
        return self._tag(0)[1]

    def _tag(self, offset):
        if hasattr(self.sampler, "set_epoch") and hasattr(self.sampler,
                                                          "epoch"):
            return ("epoch", self.sampler.epoch + offset)
        return ("iter", self._iters + offset)

    def _draw_next(self):
        inner = self.sampler
        if hasattr(inner, "set_epoch") and hasattr(inner, "epoch"):
            saved = inner.epoch
            inner.set_epoch(saved + 1)
            try:
                return list(iter(inner))
            finally:
                inner.set_epoch(saved)
        return list(iter(inner))

    def __iter__(self):
        # Nothing happens before the first index is asked for: a DataLoader
        # with workers calls iter() twice an epoch and drops the first
        # iterator unread, which must neither plan nor use up a resume.
        yield from self._begin_epoch()
        self._finished = True

    def _begin_epoch(self):
        """Draws (or resumes) the epoch's order and plans it; returns the
        indices to yield."""
        tag = self._tag(0)
        drawn, self._next = self._next, None
        resume, self._resume = self._resume, None
        self._start = 0
        if resume is not None and resume[0] == tag:
            order = resume[1]
            self._start = resume[2]
            self.dataset.send_plan(order[self._start:])
        elif drawn is not None and drawn[0] == tag:
            order = drawn[1]
            if self._finished:  # already appended behind the last epoch
                self.dataset.plan = self.dataset.next_plan
                self.dataset.next_plan = None
            else:
                self.dataset.send_plan(order)
        else:
            if resume is not None:
                log.warning("ringcache: saved position in %s %s dropped: "
                            "this is %s %s", *resume[0], *tag)
            order = list(iter(self.sampler))
            self.dataset.send_plan(order)
        self._order = (tag, order)
        if self.ahead:
            # A resumed epoch reuses the next order drawn before the crash:
            # the inner generator, restored, is already past it.
            if resume is not None and drawn is not None and \
                    drawn[0] == self._tag(1):
                nxt = drawn[1]
            else:
                nxt = self._draw_next()
            self.dataset.send_plan(nxt, append=True)
            self._next = (self._tag(1), nxt)
        self._iters += 1
        self._finished = False
        self._yielded = 0
        return self._counted(order[self._start:])

    def _counted(self, order):
        for index in order:
            self._yielded += 1
            yield index

    def __len__(self):
        if self._resume is not None:
            return len(self._resume[1]) - self._resume[2]
        return len(self.sampler)

    def remaining(self):
        """Samples of the current epoch not yet yielded."""
        if self._order is None:
            return 0
        return len(self._order[1]) - self._start - self._yielded

    def _world(self):
        inner = self.sampler
        if hasattr(inner, "num_replicas") and hasattr(inner, "rank"):
            return [int(inner.num_replicas), int(inner.rank)]
        return None

    def state_dict(self, consumed=None):
        """consumed: samples of the current epoch the trainer has used
        (default: those this sampler yielded, exact without DataLoader
        workers; StatefulLoader passes what it handed out)."""
        if self._resume is not None:  # loaded and not begun: unchanged
            tag, order, consumed = self._resume
        elif self._order is not None:
            tag, order = self._order
            if consumed is None:
                consumed = self._start + self._yielded
            consumed = self._start if consumed < self._start else consumed
        else:
            tag, order, consumed = None, [], 0
        gen = getattr(self.sampler, "generator", None)
        return {"version": STATE_VERSION,
                "tag": list(tag) if tag else None,
                "order": list(order), "consumed": min(consumed, len(order)),
                "next": [list(self._next[0]), list(self._next[1])]
                if self._next else None,
                "iters": self._iters, "world": self._world(),
                "generator": gen.get_state() if gen is not None else None}

    def load_state_dict(self, state):
        _check_version(state, "sampler")
        world = self._world()
        if state["world"] != world:
            raise ValueError(
                f"ringcache: cannot resume: saved at (world size, rank) "
                f"{state['world']}, this sampler is {world}")
        gen = getattr(self.sampler, "generator", None)
        if state["generator"] is not None and gen is not None:
            gen.set_state(state["generator"])
        self._iters = state["iters"]
        self._next = None
        if state["next"]:
            self._next = (tuple(state["next"][0]), list(state["next"][1]))
        tag = tuple(state["tag"]) if state["tag"] else None
        self._resume = None
        if tag and state["consumed"] < len(state["order"]):
            self._resume = (tag, list(state["order"]), state["consumed"])
            if tag[0] == "iter":
                self._iters = tag[1]  # the unfinished epoch comes next
        if tag and tag[0] == "epoch" and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(tag[1] + (self._resume is None))
        # A new process has a new session: whatever is resumed or was drawn
        # ahead is planned again, not assumed to be appended already.
        self._finished = False
        self._order = None


class StatefulLoader(torch.utils.data.DataLoader):
    """A DataLoader over a PlanSampler that counts the samples it hands to
    the trainer, so state_dict() records the position the trainer reached
    (workers read ahead of it; the sampler alone cannot know). Takes
    DataLoader's arguments; batch_sampler is not supported (the batches
    must be runs of batch_size consecutive indices of the sampler).

    state_dict() -> {"sampler": ..., "dataset": ...}; load_state_dict()
    checks the dataset's keys are those saved and positions the sampler:
    the next iteration (at the saved epoch) yields the samples not handed
    out before, in the same order."""

    def __init__(self, dataset, sampler, **kwargs):
        if not isinstance(sampler, PlanSampler):
            raise TypeError("StatefulLoader needs a PlanSampler")
        if kwargs.get("batch_sampler") is not None:
            raise ValueError("StatefulLoader counts batch_size runs: "
                             "batch_sampler is not supported")
        super().__init__(dataset, sampler=sampler, **kwargs)
        self._handed = 0

    def __iter__(self):
        self._handed = 0
        return self._count(super().__iter__())

    def _count(self, it):
        for batch in it:
            if self.batch_size is None:
                self._handed += 1
            else:
                self._handed += min(self.batch_size, len(
                    self.sampler._order[1]) - self.sampler._start -
                    self._handed)
            yield batch

    def state_dict(self):
        s = self.sampler
        return {"version": STATE_VERSION,
                "sampler": s.state_dict(consumed=s._start + self._handed),
                "dataset": self.dataset.state_dict()}

    def load_state_dict(self, state):
        _check_version(state, "loader")
        self.dataset.load_state_dict(state["dataset"])
        self.sampler.load_state_dict(state["sampler"])
        self._handed = 0
