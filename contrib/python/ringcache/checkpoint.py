"""checkpoint.py - owns the checkpoint flows built on ringcache.Writer:
saving a PyTorch object the way sharded checkpoint writers do (write to a
temporary key, commit, rename to the final key, optionally wait for S3)
and loading one back through the read path.

    from ringcache import Client, checkpoint
    c = Client("/run/ringcache/ringcache.sock")
    checkpoint.save(model.state_dict(), c, "checkpoints",
                    f"step-{step}/rank{rank}.pt")
    state = checkpoint.load(c, "checkpoints", f"step-{step}/rank{rank}.pt")

The final key never names a half-written object: the bytes go to
KEY.tmp-PID, and only a committed object is renamed (free while the
daemon still holds it, a server-side copy once it is in S3).
"""

import io
import os

__all__ = ["load", "save", "tmp_key"]


def tmp_key(key):
    """The temporary key this process writes before the rename."""
    return f"{key}.tmp-{os.getpid()}"


def save(obj, client, dataset, key, sync=False, **torch_kwargs):
    """torch.save(obj) to dataset/key through write-back, by the tmp +
    rename flow. sync=True returns only when S3 holds the object;
    otherwise it returns once the dataset's durability is reached (the
    upload goes on in the background). Returns key. On an exception
    nothing is committed and the temporary object is aborted."""
    import torch
    w = client.writer(dataset, tmp_key(key))
    try:
        with w:
            torch.save(obj, w, **torch_kwargs)
        w.rename(key)
        if sync:
            w.sync()
    finally:
        w.release()
    return key


def load(client, dataset, key, **torch_kwargs):
    """torch.load of dataset/key read through the cache."""
    import torch
    with client.open(dataset, key) as f:
        data = bytearray(f.size)
        f.read_into(0, data)
    return torch.load(io.BytesIO(data), **torch_kwargs)
