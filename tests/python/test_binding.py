#!/usr/bin/python3
"""test_binding.py - integration tests of the Python binding
(contrib/python/ringcache) and its PyTorch adapter against a real ringcached
and a real S3 server.

Owns: its S3 environment (tests/run's RINGCACHE_TEST_*, else a private RGW
from tests/fixture/s3-up.sh plus an uploaded dataset), one daemon started
from a generated config (as tests/fixture/fixture.c does), an independent
numpy copy of the tools/dataset.c generator for expected bytes (itself
checked against `rc-s3 get`), and a TAP report (RINGCACHE_TAP_FILE) so
tests/run counts each case.

Run: /usr/bin/python3 tests/python/test_binding.py (meson test python sets
PYTHONPATH, RINGCACHE_LIB, RINGCACHE_BUILD_DIR, RINGCACHE_TAP_FILE).
"""

import ctypes
import errno
import gc
import hashlib
import io
import os
import resource
import shutil
import signal
import socket as socketlib
import subprocess
import threading
import sys
import tempfile
import time
import unittest

import numpy as np

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "contrib", "python"))
BUILD = os.environ.get("RINGCACHE_BUILD_DIR", os.path.join(SRC, "build"))
os.environ.setdefault("RINGCACHE_LIB",
                      os.path.join(BUILD, "libringcache.so"))

import ringcache  # noqa: E402

# ---- the dataset generator (tools/dataset.c, independently) -------------
M64 = (1 << 64) - 1
SEED = 0x5EED0001
N_SMALL = 300
MIB = 1 << 20
LARGE = [20 * MIB, 33 * MIB + 12345, 48 * MIB - 1]
EDGE = {"edge/empty": 0, "edge/one": 1, "edge/block": MIB,
        "edge/block-plus-one": MIB + 1}


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def splitmix64_np(x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def ds_index(key):
    if key.startswith("small/"):
        return int(key[6:11])
    if key.startswith("large/"):
        return N_SMALL + int(key[6])
    return N_SMALL + 3 + list(EDGE).index(key)


def ds_size(key):
    i = ds_index(key)
    if i < N_SMALL:
        return 570000 - 10000 + splitmix64(SEED ^ (~i & M64)) % 20001
    if i < N_SMALL + 3:
        return LARGE[i - N_SMALL]
    return EDGE[key]


def ds_bytes(key, offset=0, length=None):
    """The object's bytes [offset, offset+length), clamped to its size."""
    size = ds_size(key)
    end = size if length is None else min(size, offset + length)
    if end <= offset:
        return b""
    base = splitmix64(SEED ^ splitmix64((ds_index(key) * 0x2545F4914F6CDD1D)
                                        & M64))
    w0, w1 = offset // 8, (end + 7) // 8
    words = np.arange(w0, w1, dtype=np.uint64) + np.uint64(base)
    raw = splitmix64_np(words).astype("<u8").tobytes()
    return raw[offset - w0 * 8:end - w0 * 8]


def small_key(i):
    return f"small/{i:05d}.bin"


# ---- environment: S3 server, dataset, daemon ----------------------------
class Env:
    rgw_dir = None
    tmp = None
    daemon = None
    socket = None
    log = None


def run_tool(*args, **kw):
    return subprocess.run([os.path.join(BUILD, "rc-s3"), *args], check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def start_rgw():
    Env.rgw_dir = os.path.join(Env.tmp, "rgw")
    subprocess.run(["bash", os.path.join(SRC, "tests/fixture/s3-up.sh"),
                    "memstore"], check=True,
                   env=dict(os.environ, RGW_DIR=Env.rgw_dir,
                            RC_S3=os.path.join(BUILD, "rc-s3")))
    with open(os.path.join(Env.rgw_dir, "env")) as f:
        for line in f:
            name, _, value = line.strip().removeprefix("export ").partition("=")
            if name:
                os.environ[name] = value


def write_config(path):
    e = os.environ
    Env.no_bucket = f"ringcache-no-such-bucket-{os.getpid()}"
    endpoint = e["RINGCACHE_TEST_S3_ENDPOINT"]
    text = f"""# written by tests/python/test_binding.py
[daemon]
socket = {Env.socket}
socket_mode = 0666
memory = 256M
block_size = 1M
log_level = info
metadata_ttl = 0
journal = {os.path.join(os.path.dirname(Env.socket), "journal")}
journal_size = 128M
staging_memory = 128M

[s3]
endpoint = {endpoint}
region = {e["RINGCACHE_TEST_S3_REGION"]}
addressing = path
tls_verify = {"true" if endpoint.startswith("https://") else "false"}
credentials = config
access_key = {e["RINGCACHE_TEST_S3_ACCESS_KEY"]}
secret_key = {e["RINGCACHE_TEST_S3_SECRET_KEY"]}
max_retries = 3

[dataset ds]
uri = s3://{e["RINGCACHE_TEST_S3_BUCKET"]}/{e["RINGCACHE_TEST_PREFIX"]}ds/
allow_uids = *

# A bucket that does not exist (test_errors_name_their_cause).
[dataset nobucket]
uri = s3://{Env.no_bucket}/x/
allow_uids = *

# Root's alone: the ACL refuses nobody (test_acl_and_s3_refusals_...).
[dataset private]
uri = s3://{e["RINGCACHE_TEST_S3_BUCKET"]}/{e["RINGCACHE_TEST_PREFIX"]}private/
allow_uids = 0

# Checkpoints: writable by this test's user (the daemon's), parts of 5 MiB
# so a ~20 MB torch.save is a multipart upload with an uneven last part.
[dataset ck]
uri = s3://{e["RINGCACHE_TEST_S3_BUCKET"]}/{e["RINGCACHE_TEST_PREFIX"]}ck/
allow_uids = *
writable = true
write_uids = {os.getuid()}
durability = local
part_size = 5M
upload_concurrency = 3
"""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def socket_answers(path):
    s = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start_daemon():
    d = tempfile.mkdtemp(prefix="py-", dir=Env.tmp)
    os.chmod(d, 0o755)
    Env.socket = os.path.join(d, "rc.sock")
    Env.conf = os.path.join(d, "ringcache.conf")
    Env.log = os.path.join(d, "ringcached.log")
    write_config(Env.conf)
    exec_daemon("w")


def exec_daemon(mode):
    with open(Env.log, mode) as log:
        Env.daemon = subprocess.Popen(
            [os.path.join(BUILD, "ringcached"), "-c", Env.conf],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            preexec_fn=die_with_parent)
    # 30 s as the C fixture (FX_START_TIMEOUT_MS): the suite's builds run
    # side by side, and a start can take seconds on a busy machine.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if Env.daemon.poll() is not None:
            break
        if socket_answers(Env.socket):
            return
        time.sleep(0.02)
    stop_daemon(check=False)
    raise RuntimeError("ringcached did not start; log:\n" + log_tail())


def restart_daemon():
    """SIGTERM, then the same daemon on the same socket (clients stay
    attached): what a package upgrade or systemctl restart does."""
    stop_daemon()
    exec_daemon("a")


def log_tail():
    with open(Env.log, errors="replace") as f:
        return "".join(f.readlines()[-40:])


def stop_daemon(check=True):
    p, Env.daemon = Env.daemon, None
    if p is None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = "timeout"
    if check and rc != 0:
        raise RuntimeError(f"ringcached exit {rc} after SIGTERM; log:\n"
                           + log_tail())


def setUpModule():
    Env.tmp = tempfile.mkdtemp(prefix="rcpy-",
                               dir=os.environ.get("RINGCACHE_TEST_TMP"))
    os.chmod(Env.tmp, 0o755)  # nobody reaches the socket (ACL test)
    have_s3 = bool(os.environ.get("RINGCACHE_TEST_S3_ENDPOINT"))
    if not have_s3:
        start_rgw()
    if not have_s3 or not os.environ.get("RINGCACHE_TEST_PREFIX"):
        # Not under tests/run: upload the dataset ourselves.
        prefix = f"py-{os.getpid()}-{int(time.time())}/"
        os.environ["RINGCACHE_TEST_PREFIX"] = prefix
        run_tool("gen-dataset", os.environ["RINGCACHE_TEST_S3_BUCKET"],
                 prefix + "ds/")
    start_daemon()


def tearDownModule():
    try:
        stop_daemon()
    finally:
        if Env.rgw_dir:
            subprocess.run(["bash", os.path.join(SRC,
                                                 "tests/fixture/s3-down.sh")],
                           env=dict(os.environ, RGW_DIR=Env.rgw_dir),
                           check=False)
        shutil.rmtree(Env.tmp, ignore_errors=True)


def leases_active(client):
    return client.counters().get("ringcache_leases_active", -1)


# ---- tests ----------------------------------------------------------------
ABI_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "ringcache.h"
#define S(t) printf(#t " %zu\n", sizeof(struct t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void)
{
	S(rc_client); S(rc_stat); S(rc_extent); S(rc_list_entry);
	S(rc_attach_opts); S(rc_dataset_info); S(rc_arena_map);
	S(rc_plan_entry);
	O(rc_client, block_size); O(rc_client, n_datasets);
	O(rc_client, datasets); O(rc_client, arenas); O(rc_client, spin);
	O(rc_stat, etag); O(rc_extent, lease); O(rc_list_entry, rec_len);
	O(rc_dataset_info, arena_size);
	return 0;
}
"""


class TestAbi(unittest.TestCase):
    def test_struct_layouts_match_header(self):
        """The ctypes mirrors have the C sizes and field offsets."""
        from ringcache import _abi
        d = tempfile.mkdtemp(dir=Env.tmp)
        src, exe = os.path.join(d, "abi.c"), os.path.join(d, "abi")
        with open(src, "w") as f:
            f.write(ABI_C)
        try:
            subprocess.run(["cc", "-std=gnu11", "-I",
                            os.path.join(SRC, "include"), src, "-o", exe],
                           check=True)
        except FileNotFoundError:
            self.skipTest("no C compiler")
        want = dict(line.split() for line in
                    subprocess.check_output([exe]).decode().splitlines())
        for name, value in want.items():
            struct, _, field = name.partition(".")
            t = getattr(_abi, struct)
            got = getattr(t, field).offset if field else ctypes.sizeof(t)
            self.assertEqual(got, int(value), name)


class TestCudaPinning(unittest.TestCase):
    def test_pin_for_cuda_answers_and_reads_go_on(self):
        """pin_for_cuda pins (GPU) or raises ENOSYS/EIO (no runtime / no
        GPU) and changes nothing; reads work either way."""
        with ringcache.Client(Env.socket) as c:
            try:
                c.pin_for_cuda()
                pinned = True
            except OSError as e:
                self.assertIn(e.errno, (errno.ENOSYS, errno.EIO), str(e))
                self.assertIn("pin_for_cuda: ", str(e))
                pinned = False
            arenas = [c._c.arenas[i] for i in range(c._c.n_datasets)]
            self.assertEqual([a.cuda_pinned for a in arenas],
                             [int(pinned and bool(a.base)) for a in arenas])
            with c.open("ds", small_key(5)) as f, f.read() as lease:
                self.assertEqual(lease.tobytes(), ds_bytes(small_key(5)))


class TestRead(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = ringcache.Client(Env.socket)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_generator_matches_s3(self):
        """The expected-bytes generator equals what S3 holds."""
        out = os.path.join(Env.tmp, "get.bin")
        bucket = os.environ["RINGCACHE_TEST_S3_BUCKET"]
        for key in (small_key(7), "edge/block-plus-one"):
            run_tool("get", bucket,
                     os.environ["RINGCACHE_TEST_PREFIX"] + "ds/" + key, out)
            with open(out, "rb") as f:
                self.assertEqual(f.read(), ds_bytes(key), key)

    def test_read_whole_objects(self):
        """Every byte of small, large (many blocks) and edge objects."""
        keys = [small_key(0), small_key(299), "large/1.bin", "edge/empty",
                "edge/one", "edge/block", "edge/block-plus-one"]
        for key in keys:
            with self.c.open("ds", key) as f:
                self.assertEqual(f.size, ds_size(key), key)
                self.assertTrue(f.etag, key)
                with f.read() as lease:
                    self.assertEqual(len(lease), ds_size(key), key)
                    self.assertTrue(lease.tobytes() == ds_bytes(key), key)
        self.assertEqual(leases_active(self.c), 0)

    def test_read_ranges(self):
        """Ranges across block boundaries, past EOF, and empty."""
        key = "large/2.bin"
        size = ds_size(key)
        with self.c.open("ds", key) as f:
            for off, n in [(MIB - 3, 7), (5 * MIB + 1, 3 * MIB + 5),
                           (size - 10, 100), (size, 10), (123, 0)]:
                got = f.pread(off, n)
                self.assertTrue(got == ds_bytes(key, off, n), (off, n))

    def test_zero_copy_view_and_lease_count(self):
        """read() hands out a read-only view over the arena (no copy) and
        holds a lease until release; after release the count is 0."""
        key = small_key(3)
        f = self.c.open("ds", key)
        lease = f.read()
        view = lease.view
        self.assertIsInstance(view, memoryview)
        self.assertTrue(view.readonly)
        self.assertEqual(view.tobytes(), ds_bytes(key))
        # Zero copy: two views of the lease share one address.
        a1 = ctypes.addressof(view.obj)
        self.assertEqual(a1, ctypes.addressof(lease.view.obj))
        self.assertGreaterEqual(leases_active(self.c), 1)
        lease.release()
        self.assertEqual(leases_active(self.c), 0)
        with self.assertRaises(ValueError):
            lease.view  # noqa: B018
        f.close()

    def test_view_keeps_lease_alive(self):
        """A view outliving its Lease object keeps the lease; dropping the
        last view releases it (the __del__ fallback)."""
        with self.c.open("ds", small_key(4)) as f:
            view = f.read(100, 1000).view
            self.assertEqual(view.tobytes(), ds_bytes(small_key(4), 100, 1000))
            self.assertGreaterEqual(leases_active(self.c), 1)
            del view
            self.assertEqual(leases_active(self.c), 0)

    def test_multi_block_view_refused(self):
        with self.c.open("ds", "large/0.bin") as f, f.read(MIB - 1, 2) as l:
            self.assertEqual(len(l.views), 2)
            with self.assertRaises(ValueError):
                l.view  # noqa: B018
            self.assertEqual(l.tobytes(), ds_bytes("large/0.bin", MIB - 1, 2))

    def test_read_into_staged_and_registered(self):
        key = "large/0.bin"  # 20 MiB: more than one staging piece
        want = ds_bytes(key)
        with self.c.open("ds", key) as f:
            plain = bytearray(f.size)
            self.assertEqual(f.read_into(0, plain), f.size)
            self.assertTrue(plain == want)
            arr = np.zeros(1000, dtype=np.uint8)
            self.assertEqual(f.read_into(5, arr), 1000)
            self.assertEqual(arr.tobytes(), want[5:1005])
            reg = self.c.buffer(f.size + 4096)
            # A slice of a registered buffer: the daemon copies straight in.
            self.assertIsNotNone(self.c._registered_at(
                ringcache._address_of(reg[4096:]), f.size))
            n = f.read_into(0, reg[4096:])
            self.assertEqual(n, f.size)
            self.assertTrue(reg[4096:4096 + n] == want)
            tail = bytearray(100)
            self.assertEqual(f.read_into(f.size - 10, tail), 10)
            self.assertEqual(bytes(tail[:10]), want[-10:])
            with self.assertRaises(TypeError):
                f.read_into(0, b"readonly")

    def test_list(self):
        """One directory level; names are keys relative to the dataset."""
        entries = list(self.c.list("ds", "small/"))
        self.assertEqual(sorted(e.name for e in entries),
                         [small_key(i) for i in range(N_SMALL)])
        for e in entries:
            self.assertFalse(e.is_prefix)
            self.assertEqual(e.size, ds_size(e.name), e.name)
        top = sorted(self.c.list("ds", ""))
        self.assertEqual([(e.name, e.is_prefix) for e in top],
                         [("edge/", True), ("large/", True), ("small/", True)])
        self.assertEqual(list(self.c.list("ds", "nothing-here/")), [])

    def test_errors(self):
        with self.assertRaises(FileNotFoundError) as cm:
            self.c.open("ds", "small/missing.bin")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        self.assertIn("no such object", str(cm.exception))
        with self.assertRaises(OSError) as cm:
            self.c.dataset("no-such-dataset")
        self.assertEqual(cm.exception.errno, errno.ENOENT)
        with self.assertRaises(ConnectionRefusedError) as cm:
            ringcache.Client(os.path.join(Env.tmp, "no.sock"))
        self.assertIn("no daemon is listening", str(cm.exception))
        f = self.c.open("ds", small_key(1))
        f.close()
        with self.assertRaises(OSError):
            f.read()

    def test_errors_name_their_cause(self):
        """The exception's text is the daemon's: the dataset, the bucket
        and key, the cause and S3's code."""
        with self.assertRaises(OSError) as cm:
            self.c.open("nobucket", "k")
        self.assertEqual(cm.exception.errno, errno.ENODEV)
        text = str(cm.exception)
        self.assertIn(f"dataset nobucket, s3://{Env.no_bucket}/x/k: the "
                      "bucket does not exist", text)
        self.assertIn("NoSuchBucket", text)
        with self.assertRaises(OSError) as cm:
            list(self.c.list("nobucket", ""))
        self.assertEqual(cm.exception.errno, errno.ENODEV)
        self.assertIn(f"s3://{Env.no_bucket}/x/", str(cm.exception))
        with self.assertRaises(FileNotFoundError) as cm:
            self.c.open("ds", "small/missing.bin")
        self.assertIn("ds/small/missing.bin: no such object: NoSuchKey",
                      str(cm.exception))

    def test_acl_and_s3_refusals_are_distinct(self):
        """The local ACL and S3's AccessDenied: distinct classes, errnos
        and texts, both PermissionError."""
        pid = os.fork()
        if pid == 0:  # nobody, whom [dataset private] does not list
            code = 1
            try:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                c = ringcache.Client(Env.socket)
                try:
                    c.dataset("private")
                except ringcache.DatasetAccessError as e:
                    code = 0 if (e.errno == errno.EACCES and
                                 "ACL" in str(e)) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        s3 = ringcache._error(-errno.EPERM, "open", "k")
        self.assertIsInstance(s3, ringcache.S3AccessDenied)
        self.assertIsInstance(s3, PermissionError)
        self.assertNotIsInstance(s3, ringcache.DatasetAccessError)
        self.assertIn("S3 denied the daemon access", str(s3))
        self.assertNotIn("ACL", str(s3))

    def test_fork_child_attaches_own_session(self):
        """A forked child re-attaches and re-opens; the parent's session
        and its lease are unaffected."""
        key = small_key(9)
        f = self.c.open("ds", key)
        lease = f.read()
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                ok = f.pread() == ds_bytes(key) and \
                    self.c.open("ds", small_key(10)).pread() == \
                    ds_bytes(small_key(10))
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(lease.view.tobytes(), ds_bytes(key))
        lease.release()
        self.assertEqual(f.pread(0, 64), ds_bytes(key, 0, 64))
        f.close()
        self.assertEqual(leases_active(self.c), 0)

    def test_stats(self):
        self.assertIn("ringcache_cache_hits_total", self.c.stats())
        self.assertIn("ringcache_s3_get_total", ringcache.stats(Env.socket))


class TestRestart(unittest.TestCase):
    """A daemon restart is a pause: clients, handles, views and the
    DataLoader's persistent workers carry on with every byte right."""

    @classmethod
    def tearDownClass(cls):
        restart_daemon()  # the tests after these expect a cold cache

    def with_restart(self, body, when):
        """Runs body() in a thread and restarts the daemon (from this
        thread: the daemon dies with the thread that started it) once
        when() is true; re-raises what body raised."""
        errors = []

        def run():
            try:
                body()
            except BaseException as e:  # reported below
                errors.append(e)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        deadline = time.monotonic() + 120
        while not when() and t.is_alive():
            self.assertLess(time.monotonic(), deadline, "never restarted")
            time.sleep(0.01)
        self.assertTrue(t.is_alive(), f"done before the restart: {errors}")
        restart_daemon()
        self.restarted = True
        t.join(240)
        self.assertFalse(t.is_alive(), "did not finish after the restart")
        if errors:
            raise errors[0]

    def test_client_loop_across_restart(self):
        """open/pread, read_many and a handle opened before the restart:
        no error, every byte right, through the whole restart."""
        c = ringcache.Client(Env.socket)
        self.restarted = False
        reads = [0]
        keys = [small_key(i) for i in range(N_SMALL)]

        def loop():
            big = c.open("ds", "large/1.bin")
            before = big.view(0, 100)  # a lease of the old daemon
            after = 0
            while after < 2 * len(keys):
                restarted = self.restarted
                for i in range(0, len(keys), 16):
                    batch = keys[i:i + 16]
                    if (i // 16) % 2:
                        for key, v in zip(batch, c.read_many("ds", batch)):
                            if isinstance(v, OSError):
                                raise v
                            assert bytes(v) == ds_bytes(key), key
                            v.release()
                    else:
                        for key in batch:
                            with c.open("ds", key) as f:
                                assert f.pread() == ds_bytes(key), key
                    reads[0] += len(batch)
                    if restarted:
                        after += len(batch)
                off = (reads[0] * 4099) % (big.size - 100)
                assert big.pread(off, 100) == ds_bytes("large/1.bin", off,
                                                       100), off
            assert bytes(before) == ds_bytes("large/1.bin", 0, 100)
            before.release()
            big.close()
        try:
            self.with_restart(loop, lambda: reads[0] >= 40)
        finally:
            c.close()

    def test_dataloader_persistent_workers_across_restart(self):
        """A DataLoader with persistent workers, restarted at sample 100
        of epoch 0: both epochs complete, every sample right."""
        self.dataloader_across_restart(persistent=True)

    def test_dataloader_new_workers_each_epoch_across_restart(self):
        """The same with workers re-created each epoch."""
        self.dataloader_across_restart(persistent=False)

    def dataloader_across_restart(self, persistent):
        from torch.utils.data import DataLoader
        from ringcache.torch import RingcacheDataset
        keys = [small_key(i) for i in range(N_SMALL)]
        ds = RingcacheDataset(Env.socket, "ds", keys=keys)
        loader = DataLoader(ds, batch_size=None, num_workers=2,
                            persistent_workers=persistent)
        seen = [0]
        self.restarted = False

        def epochs():
            for epoch in range(2):
                got = 0
                for i, sample in enumerate(loader):
                    assert sample == ds_bytes(keys[i]), (epoch, i)
                    seen[0] += 1
                    got += 1
                assert got == len(keys), (epoch, got)
        self.with_restart(epochs, lambda: seen[0] >= 100)


def _counter(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError(f"{name} not in the daemon's stats")


class TestTorch(unittest.TestCase):
    def test_dataloader_two_workers(self):
        """Every sample from a 2-worker DataLoader equals the source, in
        the order PlanSampler recorded as the plan."""
        import torch
        from torch.utils.data import DataLoader, RandomSampler
        from ringcache.torch import PlanSampler, RingcacheDataset
        ds = RingcacheDataset(Env.socket, "ds", prefix="small/", gpu=0)
        self.assertEqual(len(ds), N_SMALL)
        sampler = PlanSampler(RandomSampler(ds), ds)
        before = _counter(ringcache.stats(Env.socket),
                          "ringcache_prefetch_bytes_total")
        loader = DataLoader(ds, sampler=sampler, batch_size=None,
                            num_workers=2)
        it = iter(loader)  # the sampler's __iter__ runs here
        plan = list(ds.plan)
        seen = []
        for key, sample in zip(plan, it):
            seen.append(key)
            self.assertIsInstance(sample, bytes)
            self.assertTrue(sample == ds_bytes(key), key)
        self.assertEqual(sorted(seen), [small_key(i) for i in range(N_SMALL)])
        # The plan went from this process; the workers' reads moved the
        # GPU queue's window, so the daemon prefetched past the first one.
        after = _counter(ringcache.stats(Env.socket),
                         "ringcache_prefetch_bytes_total")
        self.assertGreater(after, before)
        del it
        tds = RingcacheDataset(Env.socket, "ds", output="tensor",
                               keys=[small_key(i) for i in range(20)])
        for i, t in enumerate(DataLoader(tds, batch_size=None,
                                         num_workers=2)):
            self.assertEqual(t.dtype, torch.uint8)
            self.assertEqual(t.numpy().tobytes(), ds_bytes(small_key(i)))

    def test_plan_sampler_same_order(self):
        import torch
        from torch.utils.data import RandomSampler
        from ringcache.torch import PlanSampler, RingcacheDataset
        keys = [small_key(i) for i in range(50)]
        ds = RingcacheDataset(Env.socket, "ds", keys=keys)
        inner = RandomSampler(ds, generator=torch.Generator().manual_seed(1))
        ref = RandomSampler(ds, generator=torch.Generator().manual_seed(1))
        refs = [list(ref) for _ in range(3)]
        ps = PlanSampler(inner, ds)
        self.assertEqual(len(ps), 50)
        for e in range(2):  # two epochs, each appending the next one's order
            order = list(ps)
            self.assertEqual(order, refs[e])
            self.assertEqual(ds.plan, [keys[i] for i in order])
            self.assertEqual(ds.next_plan, [keys[i] for i in refs[e + 1]])
        self.assertEqual(sorted(order), list(range(50)))
        self.assertFalse(ds._plan_logged, "the daemon refused a plan")
        # Without ahead: one plan an epoch, nothing appended.
        ds2 = RingcacheDataset(Env.socket, "ds", keys=keys)
        plain = PlanSampler(RandomSampler(ds2), ds2, ahead=False)
        order = list(plain)
        self.assertEqual(ds2.plan, [keys[i] for i in order])
        self.assertIsNone(ds2.next_plan)

    def test_plan_sampler_ahead_follows_set_epoch(self):
        """With DistributedSampler, the order drawn ahead is the one
        set_epoch(e + 1) gives; an epoch left unfinished does not shift
        the orders that follow."""
        from torch.utils.data.distributed import DistributedSampler
        from ringcache.torch import PlanSampler, RingcacheDataset
        keys = [small_key(i) for i in range(40)]
        ds = RingcacheDataset(Env.socket, "ds", keys=keys)

        def dist():
            return DistributedSampler(ds, num_replicas=2, rank=1,
                                      shuffle=True, seed=7)
        ps = PlanSampler(dist(), ds)
        ref = dist()
        for e in range(4):
            ps.set_epoch(e)
            ref.set_epoch(e)
            want = list(ref)
            it = iter(ps)
            if e == 1:  # read half of it only
                got = [next(it) for _ in range(len(want) // 2)]
                want = want[:len(got)]
            else:
                got = list(it)
            self.assertEqual(got, want, f"epoch {e}")
            self.assertEqual(ds.plan[:len(got)], [keys[i] for i in got])
            ref.set_epoch(e + 1)
            self.assertEqual(ds.next_plan, [keys[i] for i in ref])
        self.assertFalse(ds._plan_logged, "the daemon refused a plan")

    def test_subclass_getitem_honoured_in_batches(self):
        """A subclass that overrides __getitem__ only gets its own samples
        from a batched DataLoader (workers or not), each batch still one
        read_many; one that overrides __getitems__ too is called as is;
        transform= runs in both paths."""
        from torch.utils.data import DataLoader
        from ringcache.torch import RingcacheDataset
        keys = [small_key(i) for i in range(24)]

        class Samples(RingcacheDataset):
            def __getitem__(self, i):
                return i, hashlib.sha256(super().__getitem__(i)).hexdigest()

        def digest(i):
            return hashlib.sha256(ds_bytes(keys[i])).hexdigest()

        def as_list(batch):
            return list(batch)

        for workers in (0, 2):
            ds = Samples(Env.socket, "ds", keys=keys)
            got = [s for b in DataLoader(ds, batch_size=5, shuffle=True,
                                         num_workers=workers,
                                         collate_fn=as_list) for s in b]
            self.assertEqual(sorted(got), [(i, digest(i))
                                           for i in range(len(keys))],
                             f"{workers} workers")

        ds = Samples(Env.socket, "ds", keys=keys)
        calls = []
        read_many = ds.client().read_many
        ds.client().read_many = \
            lambda *a, **k: calls.append(len(a[1])) or read_many(*a, **k)
        self.assertEqual(ds.__getitems__([3, 1, 3]),
                         [(3, digest(3)), (1, digest(1)), (3, digest(3))])
        # The batch in one read; the repeated index read again on its own.
        self.assertEqual(calls, [3, 1])
        self.assertIsNone(ds._batch_read)

        class Both(RingcacheDataset):
            def __getitem__(self, i):
                raise AssertionError("__getitems__ overrides the batch path")

            def __getitems__(self, indices):
                return [("both", s) for s in super().__getitems__(indices)]
        got = [s for b in DataLoader(Both(Env.socket, "ds", keys=keys[:6]),
                                     batch_size=3, collate_fn=as_list)
               for s in b]
        self.assertEqual(got, [("both", ds_bytes(k)) for k in keys[:6]])

        tds = RingcacheDataset(Env.socket, "ds", keys=keys[:6],
                               transform=lambda b: len(b))
        got = [s for b in DataLoader(tds, batch_size=4, collate_fn=as_list)
               for s in b]
        self.assertEqual(got, [len(ds_bytes(k)) for k in keys[:6]])
        self.assertEqual(tds[2], len(ds_bytes(keys[2])))

    def test_handoff_by_reference(self):
        """handoff="reference": a worker's batch crosses to the trainer as
        its keys and is read there; the trainer gets the batch
        default_collate would have made, byte for byte; no lease is held
        once the epoch's steps are done; errors reach the trainer as the
        copy path raises them; refused where the worker must make the
        sample."""
        import torch
        from torch.utils.data import DataLoader
        import ringcache.torch as rt
        keys = [small_key(i) for i in range(40)]
        ds = rt.RingcacheDataset(Env.socket, "ds", keys=keys,
                                 handoff="reference")
        for pin in (False, True):  # a CPU-only torch ignores pin_memory
            got = []
            for batch in DataLoader(ds, batch_size=6, num_workers=2,
                                    pin_memory=pin):
                self.assertIsInstance(batch, list)
                got.extend(batch)
            self.assertEqual(len(got), len(keys))
            for k, sample in zip(keys, got):
                self.assertIsInstance(sample, bytes)
                self.assertTrue(sample == ds_bytes(k), k)
        # Read in this process, by its own attachment: nothing crossed.
        self.assertIn((Env.socket, -1), rt._attachments)
        self.assertTrue(no_leases_left(), "a lease outlived the steps")

        # output="tensor": default_collate's stacked batch, read straight
        # into it (not a tensor moved into shared memory).
        same = [small_key(7)] * 12
        tds = rt.RingcacheDataset(Env.socket, "ds", keys=same,
                                  output="tensor", handoff="reference")
        want = np.frombuffer(ds_bytes(small_key(7)), dtype=np.uint8)
        n = 0
        for batch in DataLoader(tds, batch_size=4, num_workers=2):
            self.assertEqual(batch.dtype, torch.uint8)
            self.assertEqual(tuple(batch.shape), (4, len(want)))
            self.assertFalse(batch.is_shared(), "crossed as a tensor")
            for row in batch:
                self.assertTrue(np.array_equal(row.numpy(), want))
            n += len(batch)
        self.assertEqual(n, len(same))
        # What torch's pin thread calls: the batch read here, pinned
        # where a GPU is.
        b = rt.RingcacheBatch(Env.socket, -1, "ds", same[:3], "tensor")
        pinned = b.pin_memory()
        self.assertEqual(pinned.is_pinned(), torch.cuda.is_available())
        self.assertTrue(np.array_equal(pinned[2].numpy(), want))
        self.assertTrue(no_leases_left(), "a lease outlived the steps")

        # Unequal sizes: default_collate's own refusal, as with copies; a
        # missing key: FileNotFoundError naming it, raised in the worker.
        for handoff in ("copy", "reference"):
            uneven = rt.RingcacheDataset(Env.socket, "ds", keys=keys[:4],
                                         output="tensor", handoff=handoff)
            with self.assertRaisesRegex(RuntimeError, "equal size"):
                next(iter(DataLoader(uneven, batch_size=4, num_workers=1)))
            gone = rt.RingcacheDataset(Env.socket, "ds", handoff=handoff,
                                       keys=keys[:2] + ["small/none.bin"])
            with self.assertRaisesRegex(FileNotFoundError, "small/none.bin"):
                next(iter(DataLoader(gone, batch_size=3, num_workers=1)))
        self.assertTrue(no_leases_left(), "a lease outlived the steps")

        class Samples(rt.RingcacheDataset):
            def __getitem__(self, i):
                return super().__getitem__(i)
        for kw, cause in (({"transform": len}, "transform"),
                          ({"output": "view"}, "view"),
                          ({"cls": Samples}, "Samples.__getitem__")):
            cls = kw.pop("cls", rt.RingcacheDataset)
            with self.assertRaisesRegex(ValueError, cause):
                cls(Env.socket, "ds", keys=keys, handoff="reference", **kw)
        with self.assertRaisesRegex(ValueError, "handoff"):
            rt.RingcacheDataset(Env.socket, "ds", keys=keys, handoff="move")

    def test_reference_batches_reuse_their_buffers(self):
        """handoff="reference" with output="tensor": a batch read in the
        main process goes into a buffer a dropped batch used (its pages
        mapped already), never one a live batch or a view of it still
        uses, and every byte is the batch's own; across epochs with
        workers forked anew the buffers stay few."""
        import torch
        from torch.utils.data import DataLoader
        import ringcache.torch as rt
        key = small_key(7)
        want = np.frombuffer(ds_bytes(key), dtype=np.uint8)

        pages = 3 * len(want) // 4096

        def batch():
            return rt.RingcacheBatch(Env.socket, -1, "ds", [key] * 3,
                                     "tensor").resolve()

        def faults(fn):
            """fn() and the minor faults this thread took in it."""
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            out = fn()
            return out, resource.getrusage(
                resource.RUSAGE_THREAD).ru_minflt - before
        # The key's arena pages mapped here (or its copy made); its
        # buffer stays in use, so the next batch takes a new one.
        warm = batch()
        a, n = faults(batch)
        # A new buffer faults each of its pages, unless shmem THP (the
        # global knob, left as it is) maps it with 2 MiB pages: then
        # faults say nothing of reuse, and only the bytes are checked.
        counted = n >= pages
        del warm
        used = a.data_ptr()
        a.fill_(0xAB)  # what a reused buffer held must not show through
        del a
        gc.collect()
        b, n = faults(batch)
        # The address alone proves nothing: a new mapping of the same
        # size often lands where the last one was.
        if counted:
            self.assertLess(n, pages // 2, "the dropped batch's buffer "
                            "was not used again (its pages faulted anew)")
        self.assertEqual(b.data_ptr(), used)
        for row in b:
            self.assertTrue(np.array_equal(row.numpy(), want))
        row = b[1]  # a view keeps the buffer from the next batch
        del b
        gc.collect()
        c = batch()
        self.assertNotEqual(c.data_ptr(), used)
        c.fill_(0)
        self.assertTrue(np.array_equal(row.numpy(), want),
                        "a live view's buffer was handed to another batch")
        del row, c
        gc.collect()
        # A fork (a DataLoader's workers, each epoch) leaves the pool's
        # pages mapped: private memory would be write-protected by it.
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        d, n = faults(batch)
        if counted:
            self.assertLess(n, pages // 2, "after a fork the buffer's "
                            "pages faulted again")
        self.assertTrue(np.array_equal(d[2].numpy(), want))
        del d

        keys = [key] * 24
        tds = rt.RingcacheDataset(Env.socket, "ds", keys=keys,
                                  output="tensor", handoff="reference")
        loader = DataLoader(tds, batch_size=4, num_workers=2)
        n = 0
        for epoch in range(3):  # new workers each epoch
            for got in loader:
                self.assertEqual(tuple(got.shape), (4, len(want)))
                for r in got:
                    self.assertTrue(np.array_equal(r.numpy(), want))
                got.fill_(0xCD)  # the next batch in it must overwrite it
                n += 1
        self.assertEqual(n, 18)
        self.assertTrue(no_leases_left(), "a lease outlived the steps")

    def test_killed_worker_leaves_no_lease(self):
        """A DataLoader worker SIGKILLed while it holds leases: the loader
        fails as torch reports a dead worker, and the daemon lets every
        lease of it go (its session ended with it)."""
        import signal
        from torch.utils.data import DataLoader
        import ringcache.torch as rt
        keys = [small_key(i) for i in range(60)]
        pids = os.path.join(Env.tmp, "worker-pids")
        if os.path.exists(pids):
            os.unlink(pids)

        def hold(worker_id):
            from torch.utils.data import get_worker_info
            d = get_worker_info().dataset
            # Leases held as a worker killed mid-read holds them.
            d.held = [d.client().open("ds", k).read() for k in keys[:3]]
            with open(pids, "a") as f:
                f.write(f"{os.getpid()}\n")

        ds = rt.RingcacheDataset(Env.socket, "ds", keys=keys,
                                 handoff="reference")
        loader = DataLoader(ds, batch_size=2, num_workers=2,
                            worker_init_fn=hold)
        it = iter(loader)
        next(it)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
                not os.path.exists(pids) or
                len(open(pids).read().split()) < 2 or
                leases_active(self.counters) < 6):
            time.sleep(0.05)
        self.assertGreaterEqual(leases_active(self.counters), 6)
        victim = int(open(pids).read().split()[0])
        with self.assertRaisesRegex(RuntimeError,
                                    "killed by signal|exited unexpectedly"):
            os.kill(victim, signal.SIGKILL)
            for _ in it:
                pass
        del it  # the other worker ends too
        gc.collect()
        self.assertTrue(no_leases_left(), "leases stay after the killed "
                        "worker: %d" % _counter(ringcache.stats(Env.socket),
                                                "ringcache_leases_active"))

    @classmethod
    def setUpClass(cls):
        cls.counters = ringcache.Client(Env.socket)

    @classmethod
    def tearDownClass(cls):
        cls.counters.close()


def no_leases_left(deadline_s=60):
    """Whether the daemon's lease count reaches 0 by itself (nothing is
    sent to it meanwhile but the stats request)."""
    deadline = time.monotonic() + deadline_s
    while True:
        n = _counter(ringcache.stats(Env.socket), "ringcache_leases_active")
        if n == 0 or time.monotonic() > deadline:
            return n == 0
        time.sleep(0.05)


def s3_key(key):
    """The bucket key of dataset ck's key."""
    return os.environ["RINGCACHE_TEST_PREFIX"] + "ck/" + key


def s3_get(key):
    """The object's bytes as S3 holds them, through rc-s3 (not the
    daemon), or None if S3 has no such object."""
    out = os.path.join(Env.tmp, "ck-get.bin")
    r = subprocess.run([os.path.join(BUILD, "rc-s3"), "get",
                        os.environ["RINGCACHE_TEST_S3_BUCKET"], s3_key(key),
                        out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        return None
    with open(out, "rb") as f:
        return f.read()


def s3_has(key):
    """rc-s3 head: exit 0 present, 1 absent, anything else is an error."""
    r = subprocess.run([os.path.join(BUILD, "rc-s3"), "head",
                        os.environ["RINGCACHE_TEST_S3_BUCKET"], s3_key(key)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode not in (0, 1):
        raise AssertionError(f"rc-s3 head {key}: exit {r.returncode}: "
                             + r.stderr.decode(errors="replace"))
    return r.returncode == 0


def s3_keys(prefix):
    """Dataset ck's keys under prefix in S3 (rc-s3 ls), sorted."""
    r = subprocess.run([os.path.join(BUILD, "rc-s3"), "ls",
                        os.environ["RINGCACHE_TEST_S3_BUCKET"],
                        s3_key(prefix)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise AssertionError(f"rc-s3 ls {prefix}: exit {r.returncode}: "
                             + r.stderr.decode(errors="replace"))
    strip = len(s3_key(""))
    return sorted(line.split(None, 2)[2][strip:]
                  for line in r.stdout.decode().splitlines() if line)


def state_dict():
    """A few tensors, about 20 MB, of several dtypes and shapes."""
    import torch
    g = torch.Generator().manual_seed(5)
    return {"w1": torch.randn(1024, 2048, generator=g),         # 8 MiB
            "w2": torch.randn(3, 1000, 999, generator=g).half(),  # ~5.7 MB
            "emb": torch.randint(0, 1 << 30, (700_001,), generator=g),
            "step": torch.tensor(1234)}


class TestCheckpoint(unittest.TestCase):
    """Checkpoint write-back through ringcache.Writer (dataset ck)."""

    @classmethod
    def setUpClass(cls):
        cls.c = ringcache.Client(Env.socket)
        cls.run_dir = f"py-{os.getpid()}/"

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def assertStateEqual(self, got, want):
        import torch
        self.assertEqual(sorted(got), sorted(want))
        for name, t in want.items():
            self.assertEqual(got[name].dtype, t.dtype, name)
            self.assertTrue(torch.equal(got[name], t), name)

    def test_torch_save_sync_read_back(self):
        """torch.save through a Writer, sync; S3 (via rc-s3) and the
        binding's read path both give back bytes that torch.load into
        the same tensors."""
        import torch
        key = self.run_dir + "model.pt"
        want = state_dict()
        with self.c.writer("ck", key) as w:
            torch.save(want, w)
            size = w.tell()
        self.assertTrue(w.committed)
        self.assertGreater(size, 15 * MIB)  # many 5 MiB parts
        w.sync()
        w.release()
        in_s3 = s3_get(key)
        self.assertIsNotNone(in_s3, "not in S3 after sync")
        self.assertEqual(len(in_s3), size)
        self.assertStateEqual(torch.load(io.BytesIO(in_s3)), want)
        with self.c.open("ck", key) as f:
            self.assertEqual(f.size, size)
            through_cache = f.pread()
        self.assertTrue(through_cache == in_s3)
        self.assertStateEqual(torch.load(io.BytesIO(through_cache)), want)

    def test_checkpoint_save_and_rename_flow(self):
        """checkpoint.save writes the key itself and commits: the key holds
        the object and nothing else appears under the run's prefix."""
        from ringcache import checkpoint
        key = self.run_dir + "shard-0.pt"
        want = {"a": state_dict()["w1"][:300], "b": state_dict()["step"]}
        self.assertEqual(checkpoint.save(want, self.c, "ck", key, sync=True),
                         key)
        self.assertTrue(s3_has(key))
        self.assertEqual(s3_keys(self.run_dir + "shard-0"), [key])
        self.assertStateEqual(checkpoint.load(self.c, "ck", key), want)
        # Rename after the upload finished: a server-side copy.
        w = self.c.writer("ck", self.run_dir + "late.tmp")
        w.write(b"renamed late")
        w.close()
        w.sync()
        w.rename(self.run_dir + "late.bin")
        w.sync()
        w.release()
        self.assertEqual(s3_get(self.run_dir + "late.bin"), b"renamed late")
        self.assertFalse(s3_has(self.run_dir + "late.tmp"))

    def test_exception_in_context_aborts(self):
        """A with block that raises aborts: nothing reaches S3."""
        key = self.run_dir + "aborted.bin"
        with self.assertRaises(ZeroDivisionError):
            with self.c.writer("ck", key) as w:
                w.write(b"x" * (3 * MIB))
                1 / 0
        self.assertTrue(w.aborted)
        self.assertFalse(w.committed)
        with self.assertRaises(OSError):
            w.sync()
        w.release()
        self.c.sync_all()
        self.assertFalse(s3_has(key))
        # A writer dropped without close() is aborted, not committed.
        w = self.c.writer("ck", self.run_dir + "dropped.bin")
        w.write(b"half")
        del w
        self.c.sync_all()
        self.assertFalse(s3_has(self.run_dir + "dropped.bin"))

    def test_random_offsets(self):
        """Pieces written in shuffled order (seek) across buffer and part
        boundaries, a hole left as zeros, then the tail via SEEK_END."""
        import random
        key = self.run_dir + "random.bin"
        size = 12 * MIB + 777
        want = bytearray(os.urandom(size))
        want[MIB:MIB + 4096] = bytes(4096)  # never written: zeros
        cuts = sorted(random.Random(3).sample(range(1, size - 100), 40))
        pieces = [(a, b) for a, b in zip([0] + cuts, cuts + [size - 100])
                  if not (a >= MIB and b <= MIB + 4096)]
        random.Random(4).shuffle(pieces)
        with self.c.writer("ck", key) as w:
            for a, b in pieces:
                lo, hi = a, b
                if a < MIB + 4096 and b > MIB:  # skip the hole
                    w.seek(lo)
                    w.write(want[lo:MIB])
                    lo = MIB + 4096
                if lo < hi:
                    self.assertEqual(w.seek(lo), lo)
                    self.assertEqual(w.write(want[lo:hi]), hi - lo)
                    self.assertEqual(w.tell(), hi)
            self.assertEqual(w.seek(0, io.SEEK_END), size - 100)
            w.write(want[size - 100:])
            w.seek(-50, io.SEEK_CUR)
            self.assertEqual(w.tell(), size - 50)
        w.sync()
        w.release()
        got = s3_get(key)
        self.assertEqual(len(got), size)
        self.assertTrue(got == want)
        with self.c.open("ck", key) as f:
            self.assertTrue(f.pread() == want)

    def test_read_only_dataset_refused(self):
        """Writing to a dataset without writable = true: OSError EROFS."""
        with self.assertRaises(OSError) as cm:
            self.c.writer("ds", "small/new.bin")
        self.assertEqual(cm.exception.errno, errno.EROFS)


# ---- TAP ----------------------------------------------------------------
class TapResult(unittest.TextTestResult):
    """Also writes one TAP line per test (and per module-level error)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.tap = []

    def _line(self, ok, test, extra=""):
        name = test.id().removeprefix("__main__.") if hasattr(test, "id") \
            else str(test)
        self.tap.append(f"{'ok' if ok else 'not ok'} {len(self.tap) + 1} - "
                        f"{name}{extra}")

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(True, test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line(False, test)

    def addError(self, test, err):
        super().addError(test, err)
        self._line(False, test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(True, test, f" # SKIP {reason}")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._line(True, test)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._line(False, test)


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(
        sys.modules[__name__])
    if len(sys.argv) > 1:
        suite = unittest.defaultTestLoader.loadTestsFromNames(
            sys.argv[1:], sys.modules[__name__])
    runner = unittest.TextTestRunner(resultclass=TapResult, verbosity=2)
    result = runner.run(suite)
    tap_file = os.environ.get("RINGCACHE_TAP_FILE")
    if tap_file:
        os.makedirs(os.path.dirname(tap_file), exist_ok=True)
        with open(tap_file, "w") as f:
            f.write(f"1..{len(result.tap)}\n" + "\n".join(result.tap) + "\n")
    sys.exit(0 if result.wasSuccessful() and result.testsRun else 1)


if __name__ == "__main__":
    main()
