#!/usr/bin/python3
"""train.py - an image classifier trained from S3 through ringcached: the
example the Kubernetes pod (contrib/kubernetes/training-pod.yaml) and the
Slurm material run, and CI runs for a few steps on CPU.

    torchrun --standalone --nproc_per_node=8 train.py \
        --dataset=imagenet --prefix=train/ --checkpoints=checkpoints

What it shows, each in the few lines a trainer needs:
- the samples: an ImageFolder layout in S3 (PREFIX/<class>/<file>.jpg),
  read through ringcache.torch.RingcacheDataset, each rank's dataset
  attached with gpu=LOCAL_RANK (the CUDA ordinal: the library maps it
  through CUDA_VISIBLE_DEVICES to the machine's GPU and its NUMA node), a
  subclass decoding in __getitem__ while batches are still one read_many;
- the order: DistributedSampler wrapped in PlanSampler, so the daemon
  prefetches each rank's shard of this epoch and the next in order;
- DDP (nccl on GPUs, gloo on CPU) over a torchvision ResNet;
- checkpoints through ringcache's write path: every --ckpt-every steps,
  rank 0 saves the model and optimiser, and every rank its
  StatefulLoader position, to CHECKPOINTS/RUN/step-N/ (written to a
  temporary key, committed, renamed: the daemon acknowledges at its
  durability level and uploads to S3 in the background);
- resume: started again with the same --run, it loads the newest step
  whose files are all there and goes on with exactly the samples each
  rank had not yet been handed.

Without torchrun it runs as a world of one. Prints one JSON line per
logged step and a last line "done STEP" (CI reads them).
"""

import argparse
import io
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

import ringcache
from ringcache import checkpoint
from ringcache.torch import PlanSampler, RingcacheDataset, StatefulLoader


class Images(RingcacheDataset):
    """Sample i: (image tensor C x H x W in [0, 1], class index), the
    class being the folder the object sits in under the prefix."""

    def __init__(self, socket, dataset, prefix, size, gpu):
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        super().__init__(socket, dataset, prefix=prefix, gpu=gpu)
        self.size = size
        self.prefix = prefix
        self.classes = sorted({self._class_of(k) for k in self.keys})
        self.class_index = {c: i for i, c in enumerate(self.classes)}

    def _class_of(self, key):
        rel = key[len(self.prefix):] if key.startswith(self.prefix) else key
        return rel.split("/", 1)[0] if "/" in rel else ""

    def __getitem__(self, i):
        from PIL import Image
        data = super().__getitem__(i)  # bytes, out of this batch's read
        img = Image.open(io.BytesIO(data)).convert("RGB")
        img = img.resize((self.size, self.size))
        x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
        x = x.view(self.size, self.size, 3).permute(2, 0, 1).float() / 255
        return x, self.class_index[self._class_of(self.keys[i])]


def step_dir(run, step):
    return f"{run}/step-{step:08d}"


def latest_complete_step(client, dataset, run, world):
    """The newest step of run whose checkpoint files are all in the
    dataset (model.pt and one loader file per rank), or None."""
    steps = []
    for e in client.list(dataset, run + "/"):
        name = e.name.rstrip("/").rsplit("/", 1)[-1]
        if e.is_prefix and name.startswith("step-"):
            steps.append(int(name[5:]))
    want = {"model.pt"} | {f"loader-rank{r}.pt" for r in range(world)}
    for step in sorted(steps, reverse=True):
        names = {e.name.rsplit("/", 1)[-1]
                 for e in client.list(dataset, step_dir(run, step) + "/")}
        if want <= names:
            return step
    return None


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=os.environ.get("RINGCACHE_SOCKET"),
                    help="ringcached's socket (default $RINGCACHE_SOCKET, "
                    "else /run/ringcache/ringcache.sock)")
    ap.add_argument("--dataset", required=True,
                    help="the ringcache dataset holding the images")
    ap.add_argument("--prefix", default="",
                    help="the ImageFolder root inside the dataset")
    ap.add_argument("--checkpoints", required=True,
                    help="a writable ringcache dataset for checkpoints")
    ap.add_argument("--run", default="run", help="checkpoint folder name")
    ap.add_argument("--model", default="resnet18",
                    help="a torchvision.models constructor")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=90)
    ap.add_argument("--max-steps", type=int, default=0,
                    help="stop after this many steps in all (0: no limit)")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--ckpt-every", type=int, default=1000)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args()


def main():
    a = parse_args()
    torchrun = "RANK" in os.environ
    cuda = torch.cuda.is_available()
    if torchrun:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank() if torchrun else 0
    world = dist.get_world_size() if torchrun else 1
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(a.seed)

    ds = Images(a.socket, a.dataset, a.prefix, a.image_size,
                gpu=local_rank if cuda else -1)
    if len(ds.classes) < 2:
        sys.exit(f"train.py: {a.dataset}/{a.prefix} holds "
                 f"{len(ds.classes)} class folders; an ImageFolder layout "
                 "needs at least 2")
    sampler = PlanSampler(DistributedSampler(ds, num_replicas=world,
                                             rank=rank, shuffle=True,
                                             seed=a.seed), ds)
    loader = StatefulLoader(ds, sampler, batch_size=a.batch_size,
                            num_workers=a.workers, drop_last=True,
                            pin_memory=cuda,
                            persistent_workers=a.workers > 0)

    import torchvision
    model = getattr(torchvision.models, a.model)(
        num_classes=len(ds.classes)).to(device)
    if torchrun:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9,
                          weight_decay=1e-4)

    client = ds.client()
    epoch = step = 0
    resumed = latest_complete_step(client, a.checkpoints, a.run, world)
    if resumed is not None:
        d = step_dir(a.run, resumed)
        state = checkpoint.load(client, a.checkpoints, f"{d}/model.pt",
                                map_location=device)
        (model.module if torchrun else model).load_state_dict(
            state["model"])
        opt.load_state_dict(state["optimizer"])
        loader.load_state_dict(checkpoint.load(
            client, a.checkpoints, f"{d}/loader-rank{rank}.pt"))
        epoch, step = sampler.epoch, state["step"]
        if rank == 0:
            print(json.dumps({"resumed": step, "epoch": epoch}), flush=True)

    def save(step):
        d = step_dir(a.run, step)
        # Every rank's position first, the model last: a step is whole
        # when model.pt is there (latest_complete_step checks all).
        checkpoint.save(loader.state_dict(), client, a.checkpoints,
                        f"{d}/loader-rank{rank}.pt")
        if torchrun:
            dist.barrier()
        if rank == 0:
            checkpoint.save({"model": (model.module if torchrun
                                       else model).state_dict(),
                             "optimizer": opt.state_dict(), "step": step},
                            client, a.checkpoints, f"{d}/model.pt")

    t0, seen = time.monotonic(), 0
    done = False
    while epoch < a.epochs and not done:
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            seen += len(y)
            if rank == 0 and step % a.log_every == 0:
                rate = seen * world / (time.monotonic() - t0)
                print(json.dumps({"step": step, "epoch": epoch,
                                  "loss": round(loss.item(), 4),
                                  "samples_per_s": round(rate, 1)}),
                      flush=True)
            if step % a.ckpt_every == 0:
                save(step)
            if a.max_steps and step >= a.max_steps:
                done = True
                break
        else:
            epoch += 1
    if rank == 0:
        print(f"done {step}", flush=True)
    if torchrun:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
