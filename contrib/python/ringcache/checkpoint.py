"""checkpoint.py - owns the checkpoint flows built on ringcache.Writer:
saving a PyTorch object as a sharded checkpoint writer does (written,
committed, optionally waited for until S3 has it) and loading one back
through the read path.

    from ringcache import Client, checkpoint
    c = Client("/run/ringcache/ringcache.sock")
    checkpoint.save(model.state_dict(), c, "checkpoints",
                    f"step-{step}/rank{rank}.pt")
    state = checkpoint.load(c, "checkpoints", f"step-{step}/rank{rank}.pt")

The final key never names a half-written object, without the temporary
key and rename of a file system: the daemon shows an object to S3 and to
readers only once it is committed, and drops it if the writer fails or
goes away first. A rename after the commit would also start the upload
that began at the commit over under the new name.
"""

import io

__all__ = ["load", "save"]


def save(obj, client, dataset, key, sync=False, **torch_kwargs):
    """torch.save(obj) to dataset/key through write-back. sync=True
    returns only when S3 holds the object; otherwise it returns once the
    dataset's durability is reached (the upload goes on in the
    background). Returns key. On an exception nothing is committed: the
    object is aborted and key keeps what it held."""
    import torch
    w = client.writer(dataset, key)
    try:
        with w:
            torch.save(obj, w, **torch_kwargs)
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
