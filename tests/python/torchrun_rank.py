#!/usr/bin/python3
"""torchrun_rank.py - one rank of the torchrun test in test_cluster.py,
started by `torchrun --nproc_per_node=4` with gloo on CPU.

Each rank reads the whole sample dataset "ds" (every object, small, large
and edge) through ringcached with DistributedSampler + PlanSampler, its
dataset attached with gpu=LOCAL_RANK (its own GPU queue of the node's one
cache), for two epochs and one DataLoader worker. Every sample's crc32 is
checked against the dataset generator (test_binding.ds_bytes). Between
epochs the ranks meet at a barrier and rank 0 reads the daemon's S3 GET
counter. Each rank writes --out/rank<N>.json: the indices it read per
epoch, the mismatches, and (rank 0) the GET counter at each barrier.
"""

import argparse
import json
import os
import sys
import zlib

import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_binding as tb  # noqa: E402  (the dataset generator)
import ringcache  # noqa: E402
from ringcache.torch import PlanSampler, RingcacheDataset  # noqa: E402


class Checked(RingcacheDataset):
    """Sample i as (i, crc32 of its bytes): the bytes stay in the worker."""

    def __getitem__(self, index):
        return index, zlib.crc32(super().__getitem__(index))


def gets(socket):
    return int(ringcache.parse_stats(ringcache.stats(socket))
               .get("ringcache_s3_get_total", -1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    ds = Checked(a.socket, "ds", prefix="", gpu=local_rank)
    sampler = PlanSampler(DistributedSampler(ds, shuffle=True, seed=3), ds)
    loader = DataLoader(ds, sampler=sampler, batch_size=None, num_workers=1)
    result = {"rank": rank, "local_rank": local_rank, "epochs": [],
              "mismatches": [], "gets": [gets(a.socket)] if rank == 0 else [],
              "plan_refused": False}
    dist.barrier()
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        read = []
        for index, crc in loader:
            key = ds.keys[index]
            if crc != zlib.crc32(tb.ds_bytes(key)):
                result["mismatches"].append([epoch, key])
            read.append(index)
        result["epochs"].append(read)
        dist.barrier()  # every rank has read its shard of this epoch
        if rank == 0:
            result["gets"].append(gets(a.socket))
        dist.barrier()
    result["plan_refused"] = ds._plan_logged
    if rank == 0:  # for a failure message
        result["stats"] = ringcache.parse_stats(ringcache.stats(a.socket))
    result["keys"] = ds.keys
    with open(os.path.join(a.out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
