#!/usr/bin/env python3
"""torchgpu.py - the pinned-buffer path from PyTorch: every object of a
warm dataset goes from its zero-copy lease view to the GPU with
a non-blocking copy_ into a GPU tensor, with the arenas unpinned and then
pinned (Client.pin_for_cuda), against the same bytes from a pinned torch
tensor copied object by object (the same calls, from torch's own pinned
memory) and in one copy (the DMA ceiling). Prints GB/s (median of passes) and checks that
what the last pass left on the GPU, copied back, equals each object's
bytes as read() gives them.

usage: torchgpu.py SOCKET DATASET [PREFIX] [PASSES]
"""
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/contrib/python")
from ringcache.torch import RingcacheDataset  # noqa: E402

warnings.filterwarnings("ignore", message="The given buffer is not writable")


def one_pass(client, files, dev):
    torch.cuda.synchronize()
    start = time.perf_counter()
    leases, used = [], 0
    for f in files:
        lease = f.read()
        for view in lease.views:
            n = len(view)
            dev[used:used + n].copy_(torch.frombuffer(view, dtype=torch.uint8),
                                     non_blocking=True)
            used += n
        leases.append(lease)
    torch.cuda.synchronize()
    secs = time.perf_counter() - start
    for lease in leases:
        lease.release()
    return secs


def main():
    sock, dataset = sys.argv[1], sys.argv[2]
    prefix = sys.argv[3] if len(sys.argv) > 3 else ""
    passes = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    listing = RingcacheDataset(sock, dataset, prefix=prefix, gpu=0)
    client = listing.client()
    files = [f for f in (client.open(dataset, k) for k in listing.keys) if f.size]
    total = sum(f.size for f in files)
    dev = torch.empty(total, dtype=torch.uint8, device="cuda")
    one_pass(client, files, dev)  # warm the cache
    pinned = torch.empty(total, dtype=torch.uint8).pin_memory()
    sizes = [f.size for f in files]

    def pinned_copy(per_object):
        torch.cuda.synchronize()
        t = time.perf_counter()
        if per_object:  # the same copies a loader makes, one per object
            at = 0
            for n in sizes:
                dev[at:at + n].copy_(pinned[at:at + n], non_blocking=True)
                at += n
        else:
            dev.copy_(pinned, non_blocking=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    def gbps(run):
        return total / statistics.median(run() for _ in range(passes)) / 1e9

    rows = [("pinned tensor, one copy per object", gbps(lambda: pinned_copy(True))),
            ("pinned tensor, one copy in all", gbps(lambda: pinned_copy(False))),
            ("lease views, arena unpinned", gbps(lambda: one_pass(client, files, dev)))]
    client.pin_for_cuda()
    rows.append(("lease views, arena pinned", gbps(lambda: one_pass(client, files, dev))))
    used = 0
    for f in files:  # what the last pass left on the GPU, object by object
        lease = f.read()
        want = torch.frombuffer(bytearray(lease.tobytes()), dtype=torch.uint8)
        lease.release()
        if not torch.equal(dev[used:used + len(want)].cpu(), want):
            sys.exit(f"torchgpu: GPU bytes differ for {f.key}")
        used += len(want)
    print(f"# PyTorch {torch.__version__}: {len(files)} objects, {total / 1e6:.1f} MB, "
          f"{passes} passes; every object's bytes checked on the GPU")
    print("| path | GB/s (median) | / pinned tensor per object |\n|---|---:|---:|")
    for label, gbps in rows:
        print(f"| {label} | {gbps:.2f} | {gbps / rows[0][1]:.2f}x |")


if __name__ == "__main__":
    main()
