#!/usr/bin/python3
"""test_fsspec.py - the "ringcache" fsspec file system
(contrib/python/ringcache/fs.py) against a real ringcached and S3.

Reuses test_binding.py's environment (S3 server, dataset upload, daemon,
the independent numpy copy of the dataset generator, rc-s3 read-back, the
TAP report). Run: /usr/bin/python3 tests/python/test_fsspec.py (meson test
fsspec sets the environment as for test_binding.py).
"""

import errno
import hashlib
import os
import subprocess
import sys
import unittest

import test_binding as tb
from test_binding import Env, ds_bytes, s3_get, setUpModule, tearDownModule  # noqa: F401

import fsspec

MIB = 1 << 20


def fs():
    return fsspec.filesystem("ringcache", socket=Env.socket)


class TestRegistration(unittest.TestCase):
    def test_fsspec_open_without_importing_ringcache(self):
        """The entry point alone registers the protocol: a fresh
        interpreter opens ringcache:// knowing only fsspec."""
        code = (
            "import fsspec, hashlib, sys\n"
            "assert 'ringcache' not in sys.modules\n"
            "with fsspec.open('ringcache://ds/large/1.bin', 'rb',\n"
            "                 socket=sys.argv[1]) as f:\n"
            "    print(hashlib.md5(f.read()).hexdigest())\n")
        r = subprocess.run([sys.executable, "-c", code, Env.socket],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=os.environ, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(r.stdout.decode().strip(),
                         hashlib.md5(ds_bytes("large/1.bin")).hexdigest())


class TestRead(unittest.TestCase):
    def test_ls_levels(self):
        f = fs()
        # Every dataset of test_binding's config: root may read them all.
        self.assertEqual({e["name"] for e in f.ls("")},
                         {"ds", "nobucket", "private", "ck"})
        top = f.ls("ringcache://ds")
        self.assertEqual([(e["name"], e["type"]) for e in top],
                         [("ds/edge", "directory"), ("ds/large", "directory"),
                          ("ds/small", "directory")])
        edge = {e["name"]: (e["size"], e["type"]) for e in f.ls("ds/edge/")}
        self.assertEqual(edge, {
            "ds/edge/block": (MIB, "file"),
            "ds/edge/block-plus-one": (MIB + 1, "file"),
            "ds/edge/empty": (0, "file"), "ds/edge/one": (1, "file")})
        small = f.ls("ds/small", detail=False)
        self.assertEqual(small, [f"ds/{tb.small_key(i)}"
                                 for i in range(tb.N_SMALL)])

    def test_info(self):
        f = fs()
        i = f.info("ringcache://ds/large/2.bin")
        self.assertEqual((i["type"], i["size"]), ("file", 48 * MIB - 1))
        self.assertEqual(f.info("ds/large")["type"], "directory")
        self.assertTrue(f.exists("ds/edge/empty"))
        self.assertFalse(f.exists("ds/edge/none"))
        with self.assertRaises(FileNotFoundError):
            f.info("ds/no/such/key")

    def test_cat_whole_and_ranges(self):
        f = fs()
        self.assertEqual(f.cat("ringcache://ds/edge/block-plus-one"),
                         ds_bytes("edge/block-plus-one"))
        self.assertEqual(f.cat_file("ds/large/1.bin", MIB - 5, 3 * MIB + 7),
                         ds_bytes("large/1.bin", MIB - 5, 2 * MIB + 12))
        self.assertEqual(f.cat_file("ds/edge/block", -10),
                         ds_bytes("edge/block", MIB - 10))
        many = f.cat(["ds/edge/one", "ds/edge/empty"])
        self.assertEqual(many, {"ds/edge/one": ds_bytes("edge/one"),
                                "ds/edge/empty": b""})

    def test_open_seek_read(self):
        with fsspec.open("ringcache://ds/large/0.bin", "rb",
                         socket=Env.socket) as f:
            self.assertEqual(f.seek(3 * MIB - 3), 3 * MIB - 3)
            self.assertEqual(f.read(10), ds_bytes("large/0.bin", 3 * MIB - 3,
                                                  10))
            f.seek(-4, os.SEEK_END)
            self.assertEqual(f.read(), ds_bytes("large/0.bin", 20 * MIB - 4))
            self.assertEqual(f.read(5), b"")

    def test_missing_object(self):
        with self.assertRaises(FileNotFoundError):
            fs().cat("ds/edge/none")
        with self.assertRaises(FileNotFoundError):
            fs().ls("nodataset/x")


class TestWrite(unittest.TestCase):
    def setUp(self):
        self.sub = f"fsspec-{os.getpid()}/"

    def test_put_and_pipe_reach_s3(self):
        f = fs()
        local = os.path.join(Env.tmp, "put-src.bin")
        data = os.urandom(6 * MIB + 7)
        with open(local, "wb") as out:
            out.write(data)
        f.put(local, f"ringcache://ck/{self.sub}put.bin")
        f.pipe_file(f"ck/{self.sub}pipe.bin", b"small object")
        f.sync()
        self.assertEqual(s3_get(self.sub + "put.bin"), data)
        self.assertEqual(s3_get(self.sub + "pipe.bin"), b"small object")
        self.assertEqual(f.cat(f"ck/{self.sub}put.bin"), data)
        self.assertEqual(f.info(f"ck/{self.sub}pipe.bin")["size"], 12)

    def test_refusals(self):
        f = fs()
        with self.assertRaises(OSError) as cm:
            f.pipe_file("ds/new.bin", b"x")
        self.assertEqual(cm.exception.errno, errno.EROFS)
        with self.assertRaises(NotImplementedError):
            f.rm("ds/edge/one")
        with self.assertRaises(NotImplementedError):
            f.open("ck/x.bin", "ab")


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(
        sys.modules[__name__])
    runner = unittest.TextTestRunner(resultclass=tb.TapResult, verbosity=2)
    result = runner.run(suite)
    tap_file = os.environ.get("RINGCACHE_TAP_FILE")
    if tap_file:
        os.makedirs(os.path.dirname(tap_file), exist_ok=True)
        with open(tap_file, "w") as out:
            out.write(f"1..{len(result.tap)}\n" + "\n".join(result.tap)
                      + "\n")
    sys.exit(0 if result.wasSuccessful() and result.testsRun else 1)


if __name__ == "__main__":
    main()
