#!/usr/bin/python3
"""test_native.py - the binding's C extension (ringcache._native) and its
ctypes fallback against a real ringcached and S3: the same bytes for the
same keys as an independent S3 client (Debian's awscli), lease lifetime of
the zero-copy views (numpy and torch included), a batch with a missing key
failing alone, and RingcacheDataset's batch reads under a 2-worker
DataLoader.

Reuses test_binding.py's environment (S3 server, dataset upload, daemon,
the numpy copy of the dataset generator, the TAP report). Run:
/usr/bin/python3 tests/python/test_native.py (meson test python_native
sets PYTHONPATH, RINGCACHE_LIB, RINGCACHE_BUILD_DIR, RINGCACHE_TAP_FILE
and RINGCACHE_PY_BACKEND=native, so a missing extension fails).
"""

import errno
import gc
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_binding as tb  # noqa: E402
from test_binding import (Env, ds_bytes, ds_size, leases_active,  # noqa: E402,F401
                          setUpModule, small_key, tearDownModule)
import ringcache  # noqa: E402

MIB = 1 << 20
# Objects of every shape: within one block, several blocks, empty, one
# byte, exactly a block, a block and a byte.
KEYS = [small_key(11), small_key(12), "large/0.bin", "edge/empty",
        "edge/one", "edge/block", "edge/block-plus-one"]


def aws_get(keys):
    """{key: bytes} read by Debian's awscli (not the daemon, not rc-s3),
    all in one aws-batch.py process."""
    d = tempfile.mkdtemp(dir=Env.tmp)
    e = os.environ
    with open(os.path.join(d, "aws.conf"), "w") as f:
        f.write(f"[default]\nregion = {e['RINGCACHE_TEST_S3_REGION']}\n"
                "s3 =\n    addressing_style = path\n")
    prefix = e["RINGCACHE_TEST_PREFIX"] + "ds/"
    with open(os.path.join(d, "cmds"), "w") as f:
        for i, key in enumerate(keys):
            f.write("\t".join(["--endpoint-url",
                               e["RINGCACHE_TEST_S3_ENDPOINT"], "--output",
                               "text", "s3api", "get-object", "--bucket",
                               e["RINGCACHE_TEST_S3_BUCKET"], "--key",
                               prefix + key, os.path.join(d, f"{i}.bin")])
                    + "\n")
    env = {"HOME": d, "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8",
           "AWS_ACCESS_KEY_ID": e["RINGCACHE_TEST_S3_ACCESS_KEY"],
           "AWS_SECRET_ACCESS_KEY": e["RINGCACHE_TEST_S3_SECRET_KEY"],
           "AWS_CONFIG_FILE": os.path.join(d, "aws.conf"),
           "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
           "AWS_EC2_METADATA_DISABLED": "true"}
    subprocess.run(["/usr/bin/python3",
                    os.path.join(tb.SRC, "tests/fixture/aws-batch.py"), d,
                    os.path.join(d, "cmds")], env=env, check=True,
                   timeout=300)
    out = {}
    for i, key in enumerate(keys):
        with open(os.path.join(d, f"{i}.rc")) as f:
            rc = f.read().strip()
        if rc != "0":
            with open(os.path.join(d, f"{i}.err")) as f:
                raise AssertionError(f"aws get-object {key}: exit {rc}: "
                                     + f.read())
        with open(os.path.join(d, f"{i}.bin"), "rb") as f:
            out[key] = f.read()
    return out


def arena_of(client, address):
    """The dataset id whose arena mapping holds address, else None."""
    for i in range(client._c.n_datasets):
        a = client._c.arenas[i]
        if a.base and a.base <= address < a.base + a.size:
            return i
    return None


def drained(client):
    """The daemon's lease count once the client's releases are through."""
    gc.collect()
    client.flush()
    return leases_active(client)


class TestBackends(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.native = ringcache.Client(Env.socket, backend="native")
        cls.ctypes = ringcache.Client(Env.socket, backend="ctypes")

    @classmethod
    def tearDownClass(cls):
        cls.native.close()
        cls.ctypes.close()

    def test_backend_choice(self):
        """RINGCACHE_PY_BACKEND picks the default; a bad name is refused."""
        self.assertEqual(self.native.backend, "native")
        self.assertEqual(self.ctypes.backend, "ctypes")
        with self.assertRaises(ValueError):
            ringcache.Client(Env.socket, backend="cffi")
        code = ("import ringcache, sys\n"
                "print(ringcache.Client(sys.argv[1]).backend)\n")
        for choice in ("ctypes", "native"):
            r = subprocess.run([sys.executable, "-c", code, Env.socket],
                               env=dict(os.environ,
                                        RINGCACHE_PY_BACKEND=choice),
                               stdout=subprocess.PIPE, check=True)
            self.assertEqual(r.stdout.decode().strip(), choice)

    def test_same_bytes_as_s3(self):
        """Extension and ctypes read_many give, key for key, the bytes an
        independent S3 client reads."""
        want = aws_get(KEYS)
        for key in KEYS:  # the generator agrees too
            self.assertEqual(len(want[key]), ds_size(key), key)
        for c in (self.native, self.ctypes):
            got = c.read_many("ds", KEYS)
            self.assertEqual(len(got), len(KEYS))
            for key, v in zip(KEYS, got):
                self.assertIsInstance(v, memoryview, (c.backend, key))
                self.assertTrue(v.readonly, key)
                self.assertTrue(v.tobytes() == want[key], (c.backend, key))
            del got
            self.assertEqual(drained(c), 0, c.backend)

    def test_file_view_ranges(self):
        """File.view: ranges inside a block, across blocks, past EOF,
        empty; both backends equal the generator."""
        key = "large/1.bin"
        size = ds_size(key)
        for c in (self.native, self.ctypes):
            with c.open("ds", key) as f:
                self.assertEqual(f.size, size)
                for off, n in [(0, 4096), (MIB - 3, 7), (5 * MIB + 1,
                               3 * MIB + 5), (size - 10, 100), (size, 10),
                               (123, 0)]:
                    v = f.view(off, n)
                    self.assertTrue(v.readonly)
                    self.assertTrue(v.tobytes() == ds_bytes(key, off, n),
                                    (c.backend, off, n))
                    del v
            self.assertEqual(drained(c), 0, c.backend)

    def test_batch_missing_key_fails_alone(self):
        """A missing key is its own FileNotFoundError; the keys around it
        are read right, and nothing stays leased or open."""
        keys = [small_key(20), "small/missing.bin", small_key(21),
                "x" * 2000, small_key(22), small_key(23) + "\0tail"]
        for c in (self.native, self.ctypes):
            got = c.read_many("ds", keys)
            self.assertIsInstance(got[1], FileNotFoundError, c.backend)
            self.assertEqual(got[1].errno, errno.ENOENT)
            self.assertEqual(got[1].filename, "small/missing.bin")
            self.assertIsInstance(got[3], OSError, c.backend)
            self.assertEqual(got[3].errno, errno.ENAMETOOLONG, c.backend)
            # A NUL would cut the key short and name another object.
            self.assertEqual(got[5].errno, errno.EINVAL, c.backend)
            for i in (0, 2, 4):
                self.assertTrue(got[i].tobytes() == ds_bytes(keys[i]),
                                (c.backend, keys[i]))
            del got
            self.assertEqual(drained(c), 0, c.backend)
        self.assertEqual(self.native.read_many("ds", []), [])
        with self.assertRaises(FileNotFoundError):
            self.native.read_many("no-such-dataset", [small_key(1)])
        with self.assertRaises(FileNotFoundError):
            self.native.read_many(-3, [small_key(1)])
        with self.assertRaises(TypeError):
            self.native.read_many("ds", [small_key(1), 7])

    def test_probe_many_sizes_errors_and_warm_blocks(self):
        """probe_many answers what read_many would, sizes for bytes, each
        key alone, both backends; it leaves every block of a multi-block
        object cached (a read after it asks S3 for nothing) and holds no
        lease."""
        def s3_gets():
            return tb._counter(ringcache.stats(Env.socket),
                               "ringcache_s3_get_total")
        big = "large/2.bin"  # read by no other test here: cold
        keys = [small_key(40), "small/missing.bin", big, "edge/empty",
                "x" * 2000, small_key(41) + "\0tail", "edge/one"]
        before = s3_gets()
        got = self.native.probe_many("ds", keys)
        self.assertGreaterEqual(s3_gets() - before, ds_size(big) // MIB,
                                "the big object's blocks not fetched")
        self.assertEqual(got[0], ds_size(small_key(40)))
        self.assertIsInstance(got[1], FileNotFoundError)
        self.assertEqual(got[1].filename, "small/missing.bin")
        self.assertEqual(got[2], ds_size(big))
        self.assertEqual(got[3], 0)
        self.assertEqual(got[4].errno, errno.ENAMETOOLONG)
        self.assertEqual(got[5].errno, errno.EINVAL)
        self.assertEqual(got[6], 1)
        self.assertEqual(drained(self.native), 0)
        before = s3_gets()
        whole = self.native.read_many("ds", [big])[0]
        self.assertEqual(s3_gets(), before, "a block was left cold")
        self.assertTrue(whole.tobytes() == ds_bytes(big))
        del whole
        self.assertEqual(drained(self.native), 0)
        for c in (self.native, self.ctypes):
            got = c.probe_many("ds", keys)
            self.assertEqual([g if isinstance(g, int) else g.errno
                              for g in got],
                             [ds_size(small_key(40)), errno.ENOENT,
                              ds_size(big), 0, errno.ENAMETOOLONG,
                              errno.EINVAL, 1], c.backend)
            self.assertEqual(drained(c), 0, c.backend)
        self.assertEqual(self.native.probe_many("ds", []), [])
        with self.assertRaises(FileNotFoundError):
            self.native.probe_many("no-such-dataset", [small_key(1)])
        with self.assertRaises(TypeError):
            self.native.probe_many("ds", [small_key(1), 7])

    def test_errors_match_ctypes(self):
        """The extension raises what the ctypes binding raises."""
        for c in (self.native, self.ctypes):
            with self.assertRaises(FileNotFoundError) as cm:
                c.open("ds", "small/missing.bin")
            self.assertIn("no such object", str(cm.exception))
            self.assertEqual(cm.exception.filename, "small/missing.bin")
        with self.assertRaises(ConnectionRefusedError):
            ringcache.Client(os.path.join(Env.tmp, "no.sock"),
                             backend="native")


class TestLeases(unittest.TestCase):
    """Zero-copy views hold their lease exactly as long as something
    (the view, a numpy array, a tensor) refers to the bytes."""

    @classmethod
    def setUpClass(cls):
        cls.c = ringcache.Client(Env.socket, backend="native")

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_views_are_zero_copy_over_the_arena(self):
        v = self.c.read_many("ds", [small_key(30)])[0]
        arr = np.frombuffer(v, dtype=np.uint8)
        self.assertEqual(arena_of(self.c, arr.ctypes.data),
                         self.c.dataset("ds"))
        self.assertFalse(arr.flags.writeable)
        with self.assertRaises(ValueError):
            arr[0] = 1  # read-only: never a write into the cache
        del v, arr
        self.assertEqual(drained(self.c), 0)

    def test_no_leak_after_views_dropped(self):
        # Counted in the daemon's leases: every extent mapped, none copied
        # (a copied one's lease is the library's, include/ringcache.h).
        os.environ["RINGCACHE_READ_COPY"] = "0"
        self.addCleanup(os.environ.pop, "RINGCACHE_READ_COPY", None)
        keys = [small_key(i) for i in range(40, 90)]
        views = self.c.read_many("ds", keys)
        self.c.flush()
        self.assertGreaterEqual(leases_active(self.c), len(keys))
        half = views[:25]
        del views
        self.assertGreaterEqual(drained(self.c), 25)  # half still held
        del half
        self.assertEqual(drained(self.c), 0)
        # Many rounds: dropped views never pile up leases in the daemon.
        for _ in range(20):
            for key, v in zip(keys, self.c.read_many("ds", keys[:16])):
                self.assertEqual(len(v), ds_size(key))
        del v
        self.assertEqual(drained(self.c), 0)

    def test_numpy_and_torch_keep_the_lease(self):
        import torch
        import warnings
        v = self.c.read_many("ds", [small_key(31)])[0]
        arr = np.frombuffer(v, dtype=np.uint8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "buffer is not writable"
            t = torch.frombuffer(v, dtype=torch.uint8)
        self.assertEqual(t.data_ptr(), arr.ctypes.data)  # no copy
        del v
        self.assertEqual(drained(self.c), 1)
        self.assertTrue(arr.tobytes() == ds_bytes(small_key(31)))
        del arr
        self.assertEqual(drained(self.c), 1)  # the tensor holds it
        self.assertTrue(t.numpy().tobytes() == ds_bytes(small_key(31)))
        del t
        self.assertEqual(drained(self.c), 0)

    def test_release_explicitly(self):
        v = self.c.read_many("ds", [small_key(32)])[0]
        self.assertEqual(drained(self.c), 1)
        v.release()
        self.assertEqual(drained(self.c), 0)

    def test_close_with_live_views_then_fork(self):
        """A forked child reads with its own session and never releases
        the parent's lease; close() with a view alive keeps its bytes
        mapped and leased until the view goes, then the session ends."""
        c = ringcache.Client(Env.socket, backend="native")
        v = c.read_many("ds", [small_key(33)])[0]
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                w = c.read_many("ds", [small_key(34)])[0]
                ok = w.tobytes() == ds_bytes(small_key(34))
                del w
                c.flush()
                ok = ok and leases_active(c) == 1  # the parent's one
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertTrue(v.tobytes() == ds_bytes(small_key(33)))
        c.close()
        with self.assertRaises(OSError):
            c.read_many("ds", [small_key(33)])  # closed: EBADF
        self.assertTrue(v.tobytes() == ds_bytes(small_key(33)))
        self.assertEqual(drained(self.c), 1)  # still leased, still mapped
        arr = np.frombuffer(v, dtype=np.uint8)
        del v
        self.assertEqual(drained(self.c), 1)  # the array holds it
        self.assertTrue(arr.tobytes() == ds_bytes(small_key(33)))
        del arr
        self.assertEqual(drained(self.c), 0)  # detached, leases dropped

    def test_views_dropped_in_another_thread(self):
        """Views dropped by another thread, also while a batch waits
        without the GIL, are released: nothing leaks, nothing breaks.
        Each batch is read while the thread drops the one before, and
        waits for that drop before handing over its own: on a busy
        machine the thread lagged behind by batches, and the leases it
        had not yet dropped went past the session's leased-bytes limit
        (EDQUOT), which is the daemon's limit working, not this test's
        subject."""
        import queue
        import threading
        q = queue.Queue()

        def dropper():
            while (item := q.get()) is not None:
                del item
                q.task_done()
            q.task_done()
        t = threading.Thread(target=dropper)
        t.start()
        keys = [small_key(i) for i in range(200, 216)]
        try:
            for _ in range(30):
                views = self.c.read_many("ds", keys)
                for k, v in zip(keys, views):
                    self.assertNotIsInstance(v, OSError, f"{k}: {v!r}")
                    self.assertEqual(len(v), ds_size(k))
                q.join()  # the batch before is dropped
                q.put(views)
                del views, v
        finally:
            q.put(None)
            t.join()
        self.assertEqual(drained(self.c), 0)

    def test_ctypes_calls_between_batches(self):
        """A ctypes call after a batch sees no stray completion (the
        extension's CLOSEs and RELEASEs are reaped first)."""
        for i in range(5):
            vs = self.c.read_many("ds", [small_key(50 + i)] * 3)
            del vs[1]
            with self.c.open("ds", small_key(60)) as f, f.read() as lease:
                self.assertTrue(lease.tobytes() == ds_bytes(small_key(60)))
            self.assertEqual(len(list(self.c.list("ds", "edge/"))), 4)
            del vs
        self.assertEqual(drained(self.c), 0)


class TestPipelined(unittest.TestCase):
    """read_many_start: the next batch in flight while this one is used."""

    def test_batches_in_flight_give_read_many_results(self):
        keys = [small_key(i) for i in range(100, 164)]
        for backend in ("native", "ctypes"):
            with ringcache.Client(Env.socket, backend=backend) as c:
                batches = [keys[i:i + 16] for i in range(0, len(keys), 16)]
                pending = c.read_many_start("ds", batches[0])
                for k, batch in enumerate(batches):
                    views = pending.wait()
                    if k + 1 < len(batches):
                        pending = c.read_many_start("ds", batches[k + 1])
                    for key, v in zip(batch, views):
                        self.assertTrue(v.tobytes() == ds_bytes(key),
                                        (backend, key))
                    del views, v
                with self.assertRaises(RuntimeError):
                    pending.wait()  # handed over already
                self.assertEqual(drained(c), 0, backend)

    def test_other_calls_complete_the_pending_batch(self):
        """A call on the client while a batch is in flight (the
        extension's own, a ctypes one, another start) completes it first;
        its wait() then hands over the same results; a batch never waited
        for leaks no lease once the client goes on."""
        c = ringcache.Client(Env.socket, backend="native")
        try:
            a = c.read_many_start("ds", [small_key(1), "no/such-key"])
            with c.open("ds", small_key(2)) as f, f.read() as lease:
                self.assertTrue(lease.tobytes() == ds_bytes(small_key(2)))
            b = c.read_many_start("ds", [small_key(3)])
            self.assertEqual(len(list(c.list("ds", "edge/"))), 4)  # ctypes
            got = c.read_many("ds", [small_key(4)])
            self.assertTrue(got[0].tobytes() == ds_bytes(small_key(4)))
            va, vb = a.wait(), b.wait()
            self.assertTrue(va[0].tobytes() == ds_bytes(small_key(1)))
            self.assertIsInstance(va[1], FileNotFoundError)
            self.assertTrue(vb[0].tobytes() == ds_bytes(small_key(3)))
            del va, vb, got
            c.read_many_start("ds", [small_key(5)])  # dropped unwaited
            self.assertEqual(drained(c), 0)
        finally:
            c.close()
        with self.assertRaises(FileNotFoundError):
            ringcache.Client(Env.socket).read_many_start("no-such-ds", [])


class TestDataLoader(unittest.TestCase):
    def check_loader(self, loader, keys_of_batch):
        import torch
        seen = []
        for batch in loader:
            keys = keys_of_batch()
            self.assertEqual(len(batch), len(keys))
            for key, sample in zip(keys, batch):
                self.assertIsInstance(sample, torch.Tensor)
                self.assertTrue(sample.numpy().tobytes() == ds_bytes(key),
                                key)
                seen.append(key)
        return seen

    def test_getitems_two_workers(self):
        """batch_size 16, shuffled, 2 workers: each batch is one
        read_many (__getitems__) and every sample is right."""
        import torch
        from torch.utils.data import DataLoader
        from ringcache.torch import RingcacheDataset
        keys = [small_key(i) for i in range(100)]
        ds = RingcacheDataset(Env.socket, "ds", keys=keys, output="tensor")
        calls = []
        orig = ds.__getitems__

        def spy(indices):
            calls.append(list(indices))
            return orig(indices)
        ds.__getitems__ = spy  # in this process only (num_workers=0)
        batch = next(iter(DataLoader(ds, batch_size=16, shuffle=True,
                                     collate_fn=list)))
        self.assertEqual(len(calls), 1)
        self.assertEqual(len(calls[0]), 16)
        self.assertEqual(len(batch), 16)
        del ds.__getitems__
        from torch.utils.data import RandomSampler

        def shuffled():
            return RandomSampler(ds, generator=torch.Generator().manual_seed(3))
        loader = DataLoader(ds, batch_size=16, sampler=shuffled(),
                            num_workers=2, collate_fn=list)
        order = list(shuffled())
        seen = []
        for batch in loader:
            for sample in batch:
                key = keys[order[len(seen)]]
                self.assertTrue(sample.numpy().tobytes() == ds_bytes(key),
                                key)
                seen.append(key)
        self.assertEqual(sorted(seen), keys)

    def test_batch_sampler_two_workers(self):
        """Without __getitems__ (older torch): a BatchSampler hands the
        dataset whole batches, read the same way."""
        from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
        from ringcache.torch import RingcacheDataset
        keys = [small_key(i) for i in range(100, 140)] + ["edge/empty"]
        ds = RingcacheDataset(Env.socket, "ds", keys=keys, output="bytes")
        loader = DataLoader(ds, sampler=BatchSampler(SequentialSampler(ds),
                                                     16, False),
                            batch_size=None, num_workers=2)
        seen = []
        for batch in loader:
            self.assertIsInstance(batch, list)
            for sample in batch:
                self.assertTrue(sample == ds_bytes(keys[len(seen)]))
                seen.append(keys[len(seen)])
        self.assertEqual(seen, keys)

    def test_view_output_and_missing_key(self):
        from ringcache.torch import RingcacheDataset
        ds = RingcacheDataset(Env.socket, "ds", output="view",
                              keys=[small_key(1), "small/missing.bin"])
        v = ds[0]
        self.assertIsInstance(v, memoryview)
        self.assertTrue(v.tobytes() == ds_bytes(small_key(1)))
        del v
        with self.assertRaises(FileNotFoundError):
            ds.__getitems__([0, 1])
        self.assertEqual(drained(ds.client()), 0)


def main():
    mod = sys.modules[__name__]
    loader = unittest.defaultTestLoader
    suite = loader.loadTestsFromNames(sys.argv[1:], mod) if sys.argv[1:] \
        else loader.loadTestsFromModule(mod)
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
