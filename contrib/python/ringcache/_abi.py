"""_abi.py - owns the ctypes mirror of include/ringcache.h: the struct
layouts the binding touches, the constants it needs, and the prototypes of
the exported synchronous functions of libringcache.so (reads and the
checkpoint write-back calls).

The header's fast path (rc_get_sqe, rc_submit, ...) is static inline and so
not reachable from ctypes; the binding uses the exported synchronous helpers,
which wait for their own completions. Struct layouts here must match the
header byte for byte: tests/python/test_binding.py compiles a C snippet that
prints the real sizes and offsets and compares them with these.
"""

import ctypes
import ctypes.util
import os

RC_ABI_VERSION = 2
RC_MAX_ETAG = 128
RC_DATASET_NAME_MAX = 64
RC_MAX_IO = 1 << 30
RC_NO_LEASE = 0xFFFFFFFF
RC_OP_PREFETCH_PLAN = 8
RC_PLAN_APPEND = 1
RC_WRITE_HANDLE = 0x40000000
RC_SYNC_ALL = 0xFFFFFFFF


class rc_arena_map(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("size", ctypes.c_size_t),
                ("cuda_pinned", ctypes.c_int)]


class rc_dataset_info(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * RC_DATASET_NAME_MAX),
        ("id", ctypes.c_uint32),
        ("access", ctypes.c_uint32),
        ("arena_size", ctypes.c_uint64),
    ]


class rc_client(ctypes.Structure):
    """Mirrored field by field so that ctypes allocates exactly
    sizeof(struct rc_client); the binding reads only n_datasets, datasets
    and block_size, and never writes any field itself."""

    _fields_ = [
        ("sock", ctypes.c_int),
        ("sq_efd", ctypes.c_int),
        ("cq_efd", ctypes.c_int),
        ("region", ctypes.c_void_p),
        ("region_size", ctypes.c_size_t),
        ("hdr", ctypes.c_void_p),
        ("sqes", ctypes.c_void_p),
        ("cqes", ctypes.c_void_p),
        ("args", ctypes.c_void_p),
        ("sq_mask", ctypes.c_uint32),
        ("cq_mask", ctypes.c_uint32),
        ("sq_local_tail", ctypes.c_uint32),
        ("inflight", ctypes.c_uint32),
        ("block_size", ctypes.c_uint32),
        ("shard", ctypes.c_uint32),
        ("n_datasets", ctypes.c_uint32),
        ("datasets", ctypes.POINTER(rc_dataset_info)),
        ("arenas", ctypes.POINTER(rc_arena_map)),
        ("arg_free", ctypes.POINTER(ctypes.c_uint64)),
        ("arg_slots", ctypes.c_uint32),
        ("spin", ctypes.c_uint32),
        ("lazy_errors", ctypes.c_uint32),
        ("batch_pending", ctypes.c_uint32),
    ]


class rc_attach_opts(ctypes.Structure):
    _fields_ = [
        ("gpu", ctypes.c_int),
        ("numa_node", ctypes.c_int),
        ("sq_entries", ctypes.c_uint32),
        ("cq_entries", ctypes.c_uint32),
        ("arg_slots", ctypes.c_uint32),
    ]


class rc_stat(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint64), ("etag", ctypes.c_char * RC_MAX_ETAG)]


class rc_extent(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("len", ctypes.c_uint32),
        ("lease", ctypes.c_uint32),
    ]


class rc_list_entry(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint64),
        ("name_len", ctypes.c_uint16),
        ("is_prefix", ctypes.c_uint16),
        ("rec_len", ctypes.c_uint32),
    ]


class rc_plan_entry(ctypes.Structure):
    _fields_ = [
        ("handle", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("len", ctypes.c_uint64),
    ]


# name -> (restype, argtypes) of every exported function the binding calls.
_CLIENT_P = ctypes.POINTER(rc_client)
_PROTOTYPES = {
    "rc_attach": (ctypes.c_int, [_CLIENT_P, ctypes.c_char_p,
                                 ctypes.POINTER(rc_attach_opts)]),
    "rc_detach": (None, [_CLIENT_P]),
    "rc_dataset": (ctypes.c_int, [_CLIENT_P, ctypes.c_char_p]),
    "rc_register_buffer": (ctypes.c_int, [_CLIENT_P, ctypes.c_int,
                                          ctypes.c_size_t]),
    "rc_unregister_buffer": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32]),
    "rc_alloc_buffer": (ctypes.c_int, [_CLIENT_P, ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_void_p)]),
    "rc_stats": (ctypes.c_ssize_t, [_CLIENT_P, ctypes.c_char_p,
                                    ctypes.c_char_p, ctypes.c_size_t]),
    "rc_open": (ctypes.c_int, [_CLIENT_P, ctypes.c_int, ctypes.c_char_p,
                               ctypes.POINTER(rc_stat)]),
    "rc_stat_handle": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32,
                                      ctypes.POINTER(rc_stat)]),
    "rc_close": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32]),
    "rc_read": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32, ctypes.c_uint64,
                               ctypes.c_uint64, ctypes.POINTER(rc_extent),
                               ctypes.c_int]),
    "rc_release": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32]),
    "rc_read_into": (ctypes.c_ssize_t, [_CLIENT_P, ctypes.c_uint32,
                                        ctypes.c_uint64, ctypes.c_uint64,
                                        ctypes.c_uint32, ctypes.c_uint64]),
    "rc_list": (ctypes.c_int, [_CLIENT_P, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_uint64, ctypes.c_uint32,
                               ctypes.c_uint64, ctypes.c_uint64,
                               ctypes.POINTER(ctypes.c_int)]),
    "rc_prefetch_plan": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32,
                                        ctypes.c_uint64, ctypes.c_uint64]),
    "rc_prefetch_plan_append": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32,
                                               ctypes.c_uint64,
                                               ctypes.c_uint64]),
    "rc_write_open": (ctypes.c_int, [_CLIENT_P, ctypes.c_int,
                                     ctypes.c_char_p]),
    "rc_write": (ctypes.c_ssize_t, [_CLIENT_P, ctypes.c_uint32,
                                    ctypes.c_uint64, ctypes.c_uint64,
                                    ctypes.c_uint32, ctypes.c_uint64]),
    "rc_commit": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32]),
    "rc_abort": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32]),
    "rc_rename": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32,
                                 ctypes.c_char_p]),
    "rc_sync": (ctypes.c_int, [_CLIENT_P, ctypes.c_uint32]),
    "rc_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "rc_last_error": (ctypes.c_char_p, [_CLIENT_P, ctypes.c_int]),
    "rc_cuda_pin_arenas": (ctypes.c_int, [_CLIENT_P]),
    "rc_cuda_error": (ctypes.c_char_p, []),
}


def _candidates():
    """Where libringcache.so may be, most explicit first."""
    env = os.environ.get("RINGCACHE_LIB")
    if env:
        yield env
        return
    found = ctypes.util.find_library("ringcache")
    if found:
        yield found
    # A source checkout: contrib/python/ringcache/ -> build/.
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "..", "..", "..", "build", "libringcache.so")


def load_library():
    """Loads libringcache.so and declares the prototypes; raises OSError
    naming every place tried."""
    tried = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        return lib
    raise OSError("ringcache: cannot load libringcache.so; set RINGCACHE_LIB. "
                  "Tried: " + "; ".join(tried))
