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
the same way. Prints the median samples/s over EPOCHS epochs, after one
warm-up epoch, for native, native through a subclass that overrides
__getitem__, ctypes and local; with MOUNTDIR (`ringcache mount` of the
dataset) also the local-files Dataset, unchanged, reading the mount: what
an unmodified loader gets (issue 22), and its ratio to local files.

usage: pybench.py SOCKET DATASET LOCALDIR [PASSES] [EPOCHS] [MOUNTDIR]
LOCALDIR holds the objects as files under their keys (pybench.sh makes
both). PYTHONPATH must reach contrib/python (and the build of the
extension: RINGCACHE_BUILD_DIR). PYBENCH_PARTS (default "1 2") picks the
parts; PYBENCH_SOURCES (default all: native,overridden,ctypes,local,mount)
the DataLoader's rows.
"""
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


def epochs(ds, n_epochs):
    """samples/s of each epoch (workers started anew each time)."""
    loader = DataLoader(ds, batch_size=BATCH, num_workers=WORKERS,
                        sampler=RandomSampler(ds), persistent_workers=False)
    rates = []
    for _ in range(n_epochs + 1):
        t0 = time.perf_counter()
        n = 0
        for batch in loader:
            n += batch.shape[0]
        rates.append(n / (time.perf_counter() - t0))
    return rates[1:]  # the first epoch warms up


def part2(sock, dataset, local, keys, n_epochs, mount=None):
    print(f"## DataLoader: batch {BATCH}, {WORKERS} workers re-created each "
          f"epoch, shuffled, warm ({len(keys)} samples, median of "
          f"{n_epochs} epochs)\n")
    print("| source | samples/s | epoch s |")
    print("|---|---|---|")
    want = os.environ.get("PYBENCH_SOURCES",
                          "native,overridden,ctypes,local,mount").split(",")
    rates = {}
    for tag, name, backend, cls in (
            ("native", "ringcache native", "native", RingcacheDataset),
            ("overridden", "ringcache native, __getitem__ overridden",
             "native", Overriding),
            ("ctypes", "ringcache ctypes", "ctypes", RingcacheDataset),
            ("local", "local files", None, local),
            ("mount", "the same files through `ringcache mount`", None,
             mount)):
        if tag not in want or (not backend and not cls):
            continue
        if backend:
            os.environ["RINGCACHE_PY_BACKEND"] = backend  # for the workers
            ds = cls(sock, dataset, keys=keys, output="tensor")
        else:
            ds = LocalFiles(cls, keys)
        rate = rates[tag] = statistics.median(epochs(ds, n_epochs))
        print(f"| {name} | {rate:.0f} | {len(keys) / rate:.2f} |")
    print()
    if "local" in rates and "mount" in rates:
        print(f"mount / local files: {rates['mount'] / rates['local']:.2f}x"
              "\n")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    sock, dataset, local = sys.argv[1:4]
    passes = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    n_epochs = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    mount = sys.argv[6] if len(sys.argv) > 6 else None
    parts = os.environ.get("PYBENCH_PARTS", "1 2").split()
    keys = sorted(os.listdir(local))
    if "1" in parts:
        part1(sock, dataset, keys, passes)
    if "2" in parts:
        part2(sock, dataset, local, keys, n_epochs, mount)


if __name__ == "__main__":
    main()
