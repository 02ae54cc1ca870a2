#!/usr/bin/python3
"""mount_imagefolder.py - run by test_mount.c: `write DIR` saves PNG images
made with Pillow into DIR/CLASS/ (through a ringcache mount), `check DIR`
loads DIR with torchvision's ImageFolder and compares every sample with
the image it was made from. Prints "ok N" on success."""
import os
import sys

import numpy as np
from PIL import Image

CLASSES = ["cat", "dog", "emu"]
PER_CLASS = 7


def image(c, i):
    rng = np.random.default_rng(1000 * c + i)
    h, w = 17 + 3 * i, 23 + 5 * c  # sizes differ: no accidental match
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def write(root):
    for c, name in enumerate(CLASSES):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(PER_CLASS):
            Image.fromarray(image(c, i)).save(
                os.path.join(root, name, f"{i:03d}.png"))
    fd = os.open(root, os.O_RDONLY)
    os.fsync(fd)  # every file in S3 before the mount goes
    os.close(fd)
    print("ok", len(CLASSES) * PER_CLASS)


def check(root):
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(root, transform=np.asarray)
    assert ds.classes == CLASSES, ds.classes
    assert len(ds) == len(CLASSES) * PER_CLASS, len(ds)
    for (path, label), (arr, lab2) in zip(ds.samples, ds):
        i = int(os.path.basename(path)[:3])
        assert label == lab2
        assert np.array_equal(arr, image(label, i)), path
    print("ok", len(ds))


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
