#!/usr/bin/python3
"""resume_trainer.py - the trainer test_cluster.py SIGKILLs mid-epoch and
restarts: one rank of a DistributedSampler world reading dataset "ds"
(small/) through ringcached with a StatefulLoader, two DataLoader workers.

After every batch it appends "epoch crc32" per sample to --log, then saves
{"loader": loader.state_dict(), "step"} to --ckpt (write, rename).
With --pause-at STEP it prints "paused" after that step and sleeps: the
test kills it there, with the workers alive and reading ahead. Started
again with the same --ckpt, it resumes from the checkpoint.
"""

import argparse
import os
import sys
import time
import zlib

import torch
from torch.utils.data.distributed import DistributedSampler

from ringcache.torch import PlanSampler, RingcacheDataset, StatefulLoader


def crcs(batch):
    """The batch's samples as crc32s (what the workers send back)."""
    return [zlib.crc32(sample) for sample in batch]


def main():
    ap = argparse.ArgumentParser()
    for name in ("socket", "ckpt", "log"):
        ap.add_argument("--" + name, required=True)
    for name, default in (("rank", 0), ("world", 2), ("epochs", 2),
                          ("batch", 10), ("seed", 11), ("pause-at", -1)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    ds = RingcacheDataset(a.socket, "ds", prefix="small/", gpu=a.rank)
    sampler = PlanSampler(DistributedSampler(ds, num_replicas=a.world,
                                             rank=a.rank, shuffle=True,
                                             seed=a.seed), ds)
    loader = StatefulLoader(ds, sampler, batch_size=a.batch,
                            num_workers=2, collate_fn=crcs)
    epoch, step = 0, 0
    if os.path.exists(a.ckpt):
        state = torch.load(a.ckpt)
        loader.load_state_dict(state["loader"])
        epoch, step = sampler.epoch, state["step"]
        print(f"resumed at epoch {epoch} step {step}", flush=True)
    with open(a.log, "a") as log:
        while epoch < a.epochs:
            sampler.set_epoch(epoch)
            for batch in loader:
                log.write("".join(f"{epoch} {c}\n" for c in batch))
                log.flush()
                step += 1
                tmp = a.ckpt + ".tmp"
                torch.save({"loader": loader.state_dict(),
                            "step": step}, tmp)
                os.replace(tmp, a.ckpt)
                if step == a.pause_at:
                    print("paused", flush=True)
                    time.sleep(3600)
            epoch += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
