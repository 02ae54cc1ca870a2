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
"""

import logging

import torch

import ringcache

log = logging.getLogger("ringcache.torch")

__all__ = ["RingcacheDataset", "PlanSampler"]


class RingcacheDataset(torch.utils.data.Dataset):
    """Sample i is the whole object keys[i] of `dataset`.

    keys: the object keys (relative to the dataset), or prefix: every
    object under that prefix, listed recursively once here, sorted.
    output: "bytes" (default) or "tensor" (a 1-D uint8 tensor); either way
    exactly one copy out of the daemon's arena. transform: applied to that.
    """

    def __init__(self, socket, dataset, keys=None, prefix=None,
                 transform=None, output="bytes", gpu=-1):
        if (keys is None) == (prefix is None):
            raise ValueError("give exactly one of keys or prefix")
        if output not in ("bytes", "tensor"):
            raise ValueError("output must be 'bytes' or 'tensor'")
        self.socket = socket
        self.dataset = dataset
        self.transform = transform
        self.output = output
        self.gpu = gpu
        self._client_obj = None
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
        key = self.keys[index]
        with self.client().open(self.dataset, key) as f:
            with f.read() as lease:
                if self.output == "tensor":
                    sample = torch.empty(len(lease), dtype=torch.uint8)
                    lease.copy_into(sample.numpy())
                else:
                    sample = lease.tobytes()
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

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client_obj"] = None  # each process attaches on its own
        state.pop("_plan_files", None)
        return state


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
    the next one replaces the plan rather than appending to a stale one."""

    def __init__(self, sampler, dataset, ahead=True):
        self.sampler = sampler
        self.dataset = dataset
        self.ahead = ahead
        self._iters = 0
        self._next = None  # (epoch tag, order) drawn and appended early
        self._finished = True  # the last epoch's order was read through

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

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
        tag = self._tag(0)
        drawn, self._next = self._next, None
        if drawn is not None and drawn[0] == tag:
            order = drawn[1]
            if self._finished:  # already appended behind the last epoch
                self.dataset.plan = self.dataset.next_plan
                self.dataset.next_plan = None
            else:
                self.dataset.send_plan(order)
        else:
            order = list(iter(self.sampler))
            self.dataset.send_plan(order)
        if self.ahead:
            nxt = self._draw_next()
            self.dataset.send_plan(nxt, append=True)
            self._next = (self._tag(1), nxt)
        self._iters += 1
        self._finished = False
        return self._yield(order)

    def _yield(self, order):
        yield from order
        self._finished = True

    def __len__(self):
        return len(self.sampler)
