#!/usr/bin/env python3
"""pybench.py - what the Python binding costs per warm sample, with the C
extension (ringcache._native) and with the ctypes binding, and a PyTorch
DataLoader over ringcache against the same loader over local files.

Part 1, per sample (every object already in the daemon's cache): the wall
and CPU time (this process: time.process_time) per object of
  native batch16   Client.read_many of 16 keys, each view dropped
  native single    Client.read_many of one key
  ctypes batch16   the same call on the ctypes backend (open, read, close
                   per key)
  ctypes classic   open + read() + lease.view + release + close, as
                   RingcacheDataset did before the extension
Each is PASSES passes over every key; the medians are printed.

Part 2, DataLoader: RingcacheDataset(output="tensor") with batch_size 16
(one read_many per batch through __getitems__), RandomSampler, 2 workers,
workers re-created each epoch (persistent_workers=False), default collate;
against a Dataset reading the same files from LOCALDIR (page cache warm)
the same way. Rows (PYBENCH_SOURCES, default all:
native,reference,overridden,ctypes,local,mount): the copy path
(handoff="copy", the default), the reference path (handoff="reference",
where this tree has it), a subclass overriding __getitem__ (the batch
still one read_many), ctypes, local files, and with MOUNTDIR (`ringcache
mount` of the dataset) the local-files Dataset, unchanged, reading the
mount: what an unmodified loader gets (issue 22). Columns: pin_memory off
and on, and a training step that only counts the batch or also reads one
byte of each 4 KiB page of it. The cells run interleaved, one epoch each
per round, EPOCHS rounds after a warm-up one; medians of samples/s and of
the per-round ratio to local files.

Part 3, where a batch's time goes: each stage from the daemon to the
training step alone, in this process (copy and local: the sample tensors,
default_collate into new shared memory as in a worker, the trip through a
torch.multiprocessing queue, the main process's first touch; reference:
the worker's check (probe_many) and collate, the trip with the read in
the main process, the first touch).

Part 4, the overriding subclass against the batch path without a
DataLoader: __getitems__ of 16 in this process, wall and CPU time,
interleaved.

Part 5 (only when PYBENCH_PARTS names it), the CPU an epoch costs each
process: the main process, the workers, and the main process's reads of
the batches handed over by reference (CPU and minor faults).

PYBENCH_PARTS (default "1 2 3 4") picks the parts.

usage: pybench.py SOCKET DATASET LOCALDIR [PASSES] [EPOCHS] [MOUNTDIR]
LOCALDIR holds the objects as files under their keys (pybench.sh makes
both). PYTHONPATH must reach contrib/python (and the build of the
extension: RINGCACHE_BUILD_DIR).
"""
import inspect
import os
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

import ringcache
from ringcache.torch import RingcacheDataset

BATCH = 16
WORKERS = 2


def per_sample(fn, keys, passes):
    """Median wall and CPU microseconds per key of fn(keys) over passes."""
    walls, cpus = [], []
    for _ in range(passes):
        w0, c0 = time.perf_counter(), time.process_time()
        fn(keys)
        w1, c1 = time.perf_counter(), time.process_time()
        walls.append((w1 - w0) / len(keys) * 1e6)
        cpus.append((c1 - c0) / len(keys) * 1e6)
    return statistics.median(walls), statistics.median(cpus)


def batched(client, dataset):
    def run(keys):
        for i in range(0, len(keys), BATCH):
            for v in client.read_many(dataset, keys[i:i + BATCH]):
                len(v)
    return run


def single(client, dataset):
    def run(keys):
        for k in keys:
            for v in client.read_many(dataset, [k]):
                len(v)
    return run


def classic(client, dataset):
    ds = client.dataset(dataset)

    def run(keys):
        for k in keys:
            with client.open(ds, k) as f, f.read() as lease:
                len(lease.view)
    return run


def part1(sock, dataset, keys, passes):
    print(f"## per warm sample ({len(keys)} objects of "
          f"{os.environ.get('PYBENCH_SIZE', '?')} B, median of {passes} "
          "passes)\n")
    print("| path | wall us/sample | CPU us/sample |")
    print("|---|---|---|")
    native = ringcache.Client(sock, backend="native")
    cts = ringcache.Client(sock, backend="ctypes")
    batched(native, dataset)(keys)  # every key warm, handles' metadata too
    rows = [("native read_many x16", batched(native, dataset)),
            ("native read_many x1", single(native, dataset)),
            ("ctypes read_many x16", batched(cts, dataset)),
            ("ctypes open+read+release+close", classic(cts, dataset))]
    for name, fn in rows:
        wall, cpu = per_sample(fn, keys, passes)
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
    native.close()
    cts.close()
    print()


class LocalFiles(Dataset):
    """The same samples from files: one read into a new uint8 tensor."""

    def __init__(self, root, keys):
        self.paths = [os.path.join(root, k) for k in keys]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            t = torch.empty(size, dtype=torch.uint8)
            f.readinto(t.numpy())
            return t


class Overriding(RingcacheDataset):
    """The PyTorch idiom: a subclass wrapping each sample in __getitem__;
    the batch is still one read_many (RingcacheDataset.__getitems__)."""

    def __getitem__(self, i):
        return super().__getitem__(i)


def step(batch, touch):
    """The training step: takes the batch; touch: reads one byte of every
    4 KiB page of it, as a copy to the device or a decode would (the
    batch's pages are faulted in here, in the main process)."""
    if touch:
        if isinstance(batch, torch.Tensor):
            batch.view(-1)[::4096].sum()
        else:
            sum(b[j] for b in batch for j in range(0, len(b), 4096))
    return len(batch)


def epoch(loader, touch):
    """samples/s of one epoch (the loader's workers started anew)."""
    t0 = time.perf_counter()
    n = 0
    for batch in loader:
        n += step(batch, touch)
    return n / (time.perf_counter() - t0)


def sources(sock, dataset, local, keys, mount=None):
    """(name, dataset maker) of each DataLoader row PYBENCH_SOURCES
    names; handoff="reference" only where this tree has it."""
    want = os.environ.get(
        "PYBENCH_SOURCES",
        "native,reference,overridden,ctypes,local,mount").split(",")
    ref = "handoff" in inspect.signature(RingcacheDataset).parameters

    def rc(cls=RingcacheDataset, backend="native", **kw):
        def make():
            os.environ["RINGCACHE_PY_BACKEND"] = backend  # for the workers
            return cls(sock, dataset, keys=keys, output="tensor", **kw)
        return make
    rows = [("native", "ringcache native, copy", rc()),
            ("reference", "ringcache native, by reference",
             rc(handoff="reference") if ref else None),
            ("overridden", "ringcache native, __getitem__ overridden",
             rc(Overriding)),
            ("ctypes", "ringcache ctypes, copy", rc(backend="ctypes")),
            ("local", "local files", lambda: LocalFiles(local, keys)),
            ("mount", "the same files through `ringcache mount`",
             (lambda: LocalFiles(mount, keys)) if mount else None)]
    return [(name, make) for tag, name, make in rows
            if tag in want and make is not None]


def part2(sock, dataset, local, keys, n_epochs, mount=None):
    """Every (source, pin, touch) cell runs one epoch per round, the cells
    interleaved (each round starting one cell later), so that the load of
    a shared machine drifts over all of them alike; round 0 warms up.
    x local: the median over rounds of the cell's rate / local files' in
    the same round and column."""
    print(f"## DataLoader: batch {BATCH}, {WORKERS} workers re-created each "
          f"epoch, shuffled, warm ({len(keys)} samples; medians of "
          f"{n_epochs} interleaved rounds)\n")
    cols = [(pin, touch) for pin in (False, True) for touch in (False, True)]
    rows = []
    for name, make in sources(sock, dataset, local, keys, mount):
        ds = make()
        for pin, touch in cols:
            rows.append((name, pin, touch, DataLoader(
                ds, batch_size=BATCH, num_workers=WORKERS,
                sampler=RandomSampler(ds), persistent_workers=False,
                pin_memory=pin)))
    rates = {(n, p, t): [] for n, p, t, _ in rows}
    for r in range(n_epochs + 1):
        k = r % len(rows)
        for name, pin, touch, loader in rows[k:] + rows[:k]:
            os.environ["RINGCACHE_PY_BACKEND"] = \
                "ctypes" if "ctypes" in name else "native"
            rate = epoch(loader, touch)
            if r:
                rates[(name, pin, touch)].append(rate)
    over, batch = ("ringcache native, __getitem__ overridden",
                   "ringcache native, copy")
    ratios = [statistics.median(
        a / b for a, b in zip(rates[(over, p, t)], rates[(batch, p, t)]))
        for p, t in cols] if (over, False, False) in rates and \
        (batch, False, False) in rates else None
    print("| source | " + " | ".join(
        f"samples/s pin={int(p)} touch={int(t)} | x local"
        for p, t in cols) + " |")
    print("|---|" + "---:|---:|" * len(cols))
    for name in dict.fromkeys(n for n, _, _, _ in rows):
        cells = []
        for p, t in cols:
            mine = rates[(name, p, t)]
            base = rates.get(("local files", p, t))
            ratio = statistics.median(a / b for a, b in zip(mine, base)) \
                if base else float("nan")
            cells.append(f"{statistics.median(mine):.0f} | {ratio:.2f}x")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if ratios:
        print(f"\n{over} / the batch path (copy), median per-round "
              "ratio: " + ", ".join(f"pin={int(p)} touch={int(t)} {x:.2f}x"
                                    for (p, t), x in zip(cols, ratios)))
    print()


def part3(sock, dataset, local, keys, runs=15):
    """Where a batch's time goes from the daemon to the training step: each
    stage alone (its input made beforehand, untimed), in this process with
    no other of the benchmark's running, stages interleaved round by
    round; median us per batch of 16."""
    import torch.multiprocessing as tmp
    from torch.utils.data import default_collate
    from torch.utils.data._utils import worker as wmod
    print(f"## Where a batch of {BATCH} goes (us per batch, median of "
          f"{runs} interleaved rounds; each stage alone, one process)\n")
    os.environ["RINGCACHE_PY_BACKEND"] = "native"
    client = ringcache.Client(sock)
    batch_keys = keys[:BATCH]
    local_ds = LocalFiles(local, batch_keys)
    q = tmp.Queue()
    saved = wmod._worker_info

    def in_worker(fn):
        wmod._worker_info = True  # get_worker_info(): as in a worker
        try:
            return fn()
        finally:
            wmod._worker_info = saved

    def tensors():
        out = []
        for v in client.read_many(dataset, batch_keys):
            t = torch.empty(len(v), dtype=torch.uint8)
            t.numpy().data[:] = v
            out.append(t)
        return out

    def trip(batch):
        q.put(batch)
        return q.get()

    def touch(batch):
        batch.view(-1)[::4096].sum()
    # (name, setup() -> input, stage(input))
    stages = [
        ("copy: read_many x16 + copy into 16 sample tensors (worker)",
         lambda: None, lambda _: tensors()),
        ("local: 16 files read into tensors (worker)",
         lambda: None, lambda _: [local_ds[i] for i in range(BATCH)]),
        ("copy/local: default_collate, stack into new shared memory "
         "(worker)", tensors,
         lambda s: in_worker(lambda: default_collate(s))),
        ("copy/local: the trip, queue put + get (shm fd passed)",
         lambda: in_worker(lambda: default_collate(tensors())), trip),
        ("copy/local: main's first touch of every page of the batch",
         lambda: trip(in_worker(lambda: default_collate(tensors()))),
         touch)]
    if "handoff" in inspect.signature(RingcacheDataset).parameters:
        ref_ds = RingcacheDataset(sock, dataset, keys=batch_keys,
                                  output="tensor", handoff="reference")

        def refs():
            return in_worker(lambda: default_collate(
                ref_ds.__getitems__(list(range(BATCH)))))
        stages += [
            ("reference: the worker's check (probe_many x16) + collate "
             "(worker)", lambda: None, lambda _: refs()),
            ("reference: the trip, resolved in main (read_many x16 copied "
             "into the batch)", refs, trip),
            ("reference: main's first touch of every page of the batch",
             lambda: trip(refs()), touch)]
    times = {name: [] for name, _, _ in stages}
    for r in range(runs + 1):
        for name, setup, stage in stages:
            arg = setup()
            t0 = time.perf_counter()
            stage(arg)
            if r:
                times[name].append((time.perf_counter() - t0) * 1e6)
            del arg
    print("| stage | us/batch |")
    print("|---|---:|")
    for name, _, _ in stages:
        print(f"| {name} | {statistics.median(times[name]):.0f} |")
    client.close()
    print()


def part4(sock, dataset, keys, runs=41):
    """The overriding subclass against the batch path, in this process:
    __getitems__ of a batch of 16 (one read_many either way; the subclass
    then has its __getitem__ called per index), the two interleaved round
    by round; median wall and CPU (time.process_time) us per batch, and
    the median of the per-round CPU ratio."""
    print(f"## Overriding subclass against the batch path (us per batch of "
          f"{BATCH}, output=tensor, median of {runs} interleaved rounds)\n")
    os.environ["RINGCACHE_PY_BACKEND"] = "native"
    rows = [("RingcacheDataset.__getitems__ (batch path)", RingcacheDataset),
            ("subclass overriding __getitem__", Overriding)]
    dss = [cls(sock, dataset, keys=keys, output="tensor") for _, cls in rows]
    walls = [[] for _ in rows]
    cpus = [[] for _ in rows]
    for r in range(runs + 1):
        batch = [(r * BATCH + i) % len(keys) for i in range(BATCH)]
        for i, ds in enumerate(dss):
            w0, c0 = time.perf_counter(), time.process_time()
            ds.__getitems__(batch)
            w1, c1 = time.perf_counter(), time.process_time()
            if r:
                walls[i].append((w1 - w0) * 1e6)
                cpus[i].append((c1 - c0) * 1e6)
    print("| path | wall us/batch | CPU us/batch | CPU x batch path |")
    print("|---|---:|---:|---:|")
    for i, (name, _) in enumerate(rows):
        ratio = statistics.median(a / b for a, b in zip(cpus[i], cpus[0]))
        print(f"| {name} | {statistics.median(walls[i]):.0f} | "
              f"{statistics.median(cpus[i]):.0f} | {ratio:.3f}x |")
    print()


def part5(sock, dataset, local, keys, n_epochs):
    """The CPU each process spends an epoch of the part-2 loader (pin and
    touch off), by reference and over local files, epochs interleaved:
    the main process (time.process_time), the 2 workers (RUSAGE_CHILDREN:
    they are reaped at the epoch's end), and for the reference path the
    main process's reads of its batches (ringcache.torch._resolve_batch:
    thread CPU and minor faults). Medians over n_epochs after a warm-up
    epoch."""
    import resource
    import ringcache.torch as rt
    if "handoff" not in inspect.signature(RingcacheDataset).parameters:
        return
    os.environ["RINGCACHE_PY_BACKEND"] = "native"
    print(f"## CPU per epoch of the DataLoader ({len(keys)} samples, "
          f"batch {BATCH}, {WORKERS} workers re-created each epoch; ms, "
          f"medians of {n_epochs} epochs)\n")
    reads = [0.0, 0]
    resolve = rt._resolve_batch

    def counted(*a):
        c0 = time.thread_time()
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        try:
            return resolve(*a)
        finally:
            reads[0] += time.thread_time() - c0
            reads[1] += resource.getrusage(
                resource.RUSAGE_THREAD).ru_minflt - f0
    # Workers pickle the batch's resolver by name: this one under it.
    counted.__module__, counted.__qualname__ = rt.__name__, "_resolve_batch"
    rt._resolve_batch = counted
    ref = RingcacheDataset(sock, dataset, keys=keys, output="tensor",
                           handoff="reference")
    rows = [("by reference", ref), ("local files", LocalFiles(local, keys))]
    cpu = {name: [] for name, _ in rows}
    try:
        for r in range(n_epochs + 1):
            for name, ds in rows:
                loader = DataLoader(ds, batch_size=BATCH,
                                    num_workers=WORKERS,
                                    sampler=RandomSampler(ds),
                                    persistent_workers=False)
                reads[:] = [0.0, 0]
                m0 = time.process_time()
                w0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                for _ in loader:
                    pass
                del loader
                m1 = time.process_time()
                w1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if r:
                    cpu[name].append((
                        (m1 - m0) * 1e3,
                        (w1.ru_utime + w1.ru_stime - w0.ru_utime -
                         w0.ru_stime) * 1e3, reads[0] * 1e3, reads[1]))
    finally:
        rt._resolve_batch = resolve
    print("| source | main process | both workers | main's batch reads "
          "| minor faults in them |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in rows:
        med = [statistics.median(x[i] for x in cpu[name]) for i in range(4)]
        tail = f"{med[2]:.1f} | {med[3]:.0f}" if name == "by reference" \
            else "- | -"
        print(f"| {name} | {med[0]:.1f} | {med[1]:.1f} | {tail} |")
    print()


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    sock, dataset, local = sys.argv[1:4]
    passes = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    n_epochs = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    mount = sys.argv[6] if len(sys.argv) > 6 else None
    parts = os.environ.get("PYBENCH_PARTS", "1 2 3 4").split()
    keys = sorted(os.listdir(local))
    if "1" in parts:
        part1(sock, dataset, keys, passes)
    if "3" in parts:
        part3(sock, dataset, local, keys)
    if "2" in parts:
        part2(sock, dataset, local, keys, n_epochs, mount)
    if "4" in parts:
        part4(sock, dataset, keys)
    if "5" in parts:
        part5(sock, dataset, local, keys, n_epochs)


if __name__ == "__main__":
    main()
