"""Loads libtensorref, checks its ABI version, declares the hand-written C functions, and owns
the one checked-call error path (``fail``).

The library is found as follows (the first that exists wins):

1. ``TENSORREF_LIB``: the path of ``libtensorref.so`` (or of the directory holding it);
2. the repository this package sits in, or the one around the current directory:
   ``target/release/libtensorref.so`` or ``target/debug/libtensorref.so``, the newer of the two;
3. the system loader's search path (``LD_LIBRARY_PATH``, ldconfig).

Handles are passed as ``c_uint64``: ``tr_tensor`` and ``tr_scope`` are C structs of one
``uint64_t`` passed by value, which the x86-64 SysV and AArch64 calling conventions pass exactly
like a bare ``uint64_t``. Tensor and Scope objects *are* c_uint64 instances (subclasses), so a
call passes them without any conversion and an op writes its result straight into the new
Tensor object. Tensor parameters are declared with the Tensor class itself: ctypes accepts an
instance of exactly the declared class fastest. Every other signature is spelled out below or in the generated
``_ops.py``; ``tests/test_abi.py`` checks that every function of include/tensorref.h has one.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, byref, c_bool, c_char, c_char_p, c_double, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path

from ._abi import STATUS_NAMES, TR_ABI_VERSION
from ._scalar import Scalar
from .errors import AbiMismatchError, error_class

LIBNAME = "libtensorref.so"


class ScopeHandle(c_uint64):
    """A ``tr_scope`` passed by value; the base of ``tensorref.Scope``."""
    __slots__ = ()


class MiniLMHandle(c_uint64):
    """A ``tr_minilm`` model handle passed by value."""
    __slots__ = ()


# C types of the signatures: handles by value, outputs by pointer. The tensor handle type is
# tensorref.Tensor itself, which _tensor.py defines and passes to `declare_all`.
SCOPE = ScopeHandle
STATUS = c_int32
P_U64 = POINTER(c_uint64)
P_SCOPE = POINTER(SCOPE)
P_I64 = POINTER(c_int64)
P_SIZE = POINTER(c_size_t)
P_BOOL = POINTER(c_bool)
P_DOUBLE = POINTER(c_double)
P_I32 = POINTER(c_int32)


class Stats(ctypes.Structure):
    """``tr_stats``."""
    _fields_ = [("created_outside_scope", c_uint64), ("disposed_outside_scope", c_uint64),
                ("created_in_scope", c_uint64), ("disposed_in_scope", c_uint64),
                ("attached_to_scope", c_uint64), ("detached_from_scope", c_uint64),
                ("live", c_int64)]


class ResidencyConfig(ctypes.Structure):
    """``tr_residency_config``."""
    _fields_ = [("device", c_int32), ("device_index", c_int32), ("policy", c_int32),
                ("budget_bytes", c_uint64), ("pin_host_memory", c_bool),
                ("prefetch_depth", c_uint32), ("simulated_capacity", c_uint64)]


class ResidencyStats(ctypes.Structure):
    """``tr_residency_stats``."""
    _fields_ = [(name, c_uint64) for name in (
        "budget", "device_bytes", "peak_device_bytes", "pinned_bytes", "ops", "loads",
        "load_bytes", "evictions", "evicted_bytes", "write_backs", "write_back_bytes",
        "prefetches", "prefetch_bytes", "prefetch_hits", "prefetch_misses", "transfer_wait_ns",
        "oom_retries", "page_locked_allocs", "page_locked_bytes", "pageable_copies",
        "pageable_copy_bytes", "op_waits", "read_waits", "needless_write_backs")]


class Event(ctypes.Structure):
    """``tr_event``: valid only during the callback."""
    _fields_ = [("kind", c_int32), ("entry", c_uint64), ("bytes", c_uint64),
                ("device_bytes", c_uint64), ("op", c_char_p), ("time_us", c_double),
                ("duration_us", c_double)]


# tr_event_fn: void (*)(const tr_event *, void *user)
EVENT_FN = ctypes.CFUNCTYPE(None, POINTER(Event), c_void_p)


class MiniLMOptions(ctypes.Structure):
    """``tr_minilm_options``."""
    _fields_ = [("weight_mode", c_int32), ("chunk_capacity", c_uint64), ("batch_size", c_uint32),
                ("max_seq_length", c_uint32), ("embedding_block_bytes", c_uint64),
                ("progress", c_bool)]


def signatures(TENSOR) -> dict:
    """The hand-written part of the C ABI: (restype, argtypes) per function. `TENSOR` is the
    class of tensorref.Tensor: ctypes passes an instance of exactly the declared class fastest."""
    P_TENSOR = POINTER(TENSOR)
    return {
        # errors and versions
        "tr_last_error": (STATUS, (POINTER(c_char), c_size_t, P_SIZE)),
        "tr_status_str": (c_char_p, (c_int32,)),
        "tr_abi_version": (c_uint32, ()),
        "tr_version": (c_char_p, ()),
        # lifecycle, host data, metadata
        "tr_tensor_retain": (STATUS, (TENSOR,)),
        "tr_tensor_release": (STATUS, (TENSOR,)),
        "tr_tensor_release_many": (STATUS, (P_U64, c_size_t)),
        "tr_tensor_alias": (STATUS, (TENSOR, P_TENSOR)),
        "tr_tensor_is_valid": (STATUS, (TENSOR, P_BOOL)),
        "tr_tensor_from_data": (STATUS, (c_void_p, c_size_t, P_I64, c_size_t, c_int32, P_TENSOR)),
        "tr_tensor_copy_to": (STATUS, (TENSOR, c_void_p, c_size_t, P_SIZE)),
        "tr_tensor_shape": (STATUS, (TENSOR, P_I64, c_size_t, P_SIZE)),
        "tr_tensor_dtype": (STATUS, (TENSOR, P_I32)),
        "tr_tensor_numel": (STATUS, (TENSOR, P_SIZE)),
        "tr_tensor_item": (STATUS, (TENSOR, P_DOUBLE)),
        "tr_tensor_item_scalar": (STATUS, (TENSOR, POINTER(Scalar))),
        "tr_tensor_device": (STATUS, (TENSOR, P_I32)),
        "tr_tensor_scope": (STATUS, (TENSOR, P_SCOPE)),
        "tr_live_handles": (c_size_t, ()),
        "tr_live_bytes": (c_uint64, (c_int32,)),
        "tr_manual_seed": (STATUS, (c_uint64,)),
        "tr_grad_set_enabled": (STATUS, (c_bool, P_BOOL)),
        # DLPack
        "tr_tensor_from_dlpack": (STATUS, (c_void_p, P_TENSOR)),
        "tr_tensor_to_dlpack": (STATUS, (TENSOR, POINTER(c_void_p))),
        # scopes
        "tr_scope_new": (STATUS, (P_SCOPE,)),
        "tr_scope_dispose": (STATUS, (SCOPE,)),
        "tr_scope_dispose_everything": (STATUS, (SCOPE,)),
        "tr_scope_dispose_everything_but": (STATUS, (SCOPE, P_U64, c_size_t)),
        "tr_scope_attach": (STATUS, (SCOPE, TENSOR)),
        "tr_scope_detach": (STATUS, (SCOPE, TENSOR)),
        "tr_scope_move_to_outer": (STATUS, (SCOPE, TENSOR)),
        "tr_scope_contains": (STATUS, (SCOPE, TENSOR, P_BOOL)),
        "tr_scope_len": (STATUS, (SCOPE, P_SIZE)),
        "tr_scope_current": (STATUS, (P_SCOPE,)),
        "tr_tensor_move_to_outer_scope": (STATUS, (TENSOR,)),
        "tr_tensor_detach_from_scope": (STATUS, (TENSOR,)),
        "tr_tensor_move_to_scope": (STATUS, (TENSOR, SCOPE)),
        "tr_scope_stats_get": (STATUS, (POINTER(Stats),)),
        "tr_scope_stats_reset": (STATUS, ()),
        # residency manager (the Python API is tensorref.residency)
        "tr_residency_config_default": (STATUS, (POINTER(ResidencyConfig),)),
        "tr_residency_configure": (STATUS, (POINTER(ResidencyConfig),)),
        "tr_residency_disable": (STATUS, ()),
        "tr_residency_enabled": (c_bool, ()),
        "tr_residency_stats_get": (STATUS, (POINTER(ResidencyStats),)),
        "tr_residency_mark_iteration": (STATUS, ()),
        "tr_tensor_pin_resident": (STATUS, (TENSOR, c_bool)),
        "tr_tensor_is_resident": (STATUS, (TENSOR, P_BOOL)),
        "tr_residency_set_callback": (STATUS, (EVENT_FN, c_void_p)),
        "tr_residency_timeline_start": (STATUS, ()),
        "tr_residency_timeline_write": (STATUS, (c_char_p,)),
        # weights (safetensors)
        "tr_weights_load": (STATUS, (c_char_p, P_TENSOR, c_size_t, POINTER(c_char), c_size_t, P_SIZE, P_SIZE)),
        # all-MiniLM-L6-v2 (the Python API is tensorref.minilm)
        "tr_minilm_options_default": (STATUS, (POINTER(MiniLMOptions),)),
        "tr_minilm_load": (STATUS, (c_char_p, POINTER(MiniLMOptions), POINTER(MiniLMHandle))),
        "tr_minilm_release": (STATUS, (MiniLMHandle,)),
        "tr_minilm_set_weight_mode": (STATUS, (MiniLMHandle, c_int32, c_uint64)),
        "tr_minilm_dim": (STATUS, (MiniLMHandle, P_SIZE)),
        "tr_minilm_weight_bytes": (STATUS, (MiniLMHandle, P_U64)),
        "tr_minilm_embed": (STATUS, (MiniLMHandle, POINTER(c_char_p), c_size_t, c_void_p, c_size_t, P_SIZE)),
    }

# Declared functions the loaded library does not export (an older build); the test suite
# requires this to be empty.
missing: list[str] = []


def _repo_roots():
    """Checkouts of libtensorref around this package or the current directory."""
    seen = set()
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for d in (start, *start.parents):
            if d not in seen and (d / "Cargo.toml").is_file() and (d / "include/tensorref.h").is_file():
                seen.add(d)
                yield d


def find_library() -> str:
    """The path (or bare name) of the shared library to load; see the module docstring."""
    env = os.environ.get("TENSORREF_LIB")
    if env:
        path = Path(env)
        if path.is_dir():
            path = path / LIBNAME
        if not path.is_file():
            raise ImportError(f"TENSORREF_LIB={env!r}: no such file ({path})")
        return str(path)
    for root in _repo_roots():
        built = [p for p in (root / "target/release" / LIBNAME, root / "target/debug" / LIBNAME) if p.is_file()]
        if built:
            return str(max(built, key=lambda p: p.stat().st_mtime))
    return LIBNAME


def check_abi(lib: ctypes.CDLL, path: str, expected: int = TR_ABI_VERSION) -> int:
    """Compares the library's ``tr_abi_version()`` with the version this package was generated
    for; raises AbiMismatchError with what to do when they differ. Returns the version."""
    try:
        fn = lib.tr_abi_version
    except AttributeError:
        raise AbiMismatchError(f"{path} is not libtensorref: it exports no tr_abi_version()") from None
    fn.argtypes, fn.restype = (), c_uint32
    found = fn()
    if found != expected:
        raise AbiMismatchError(
            f"{path} implements C ABI version {found}, but this tensorref package was generated "
            f"for ABI version {expected}. Build the library and install the binding from the same "
            f"checkout (cargo build; pip install bindings/python), or point TENSORREF_LIB at a "
            f"matching library.")
    return found


def declare(lib: ctypes.CDLL, name: str, restype, argtypes):
    """The library's function `name` with its signature set; for a function the library does not
    export (a build older than this binding), a stand-in that raises with what to do, so that
    the rest of the package still loads. Such names are listed in `missing`."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        missing.append(name)

        def fn(*args, **kwargs):
            raise NotImplementedError(f"{LIB_PATH} does not export {name}: it is older than this "
                                      f"binding; rebuild it (cargo build)")
        return fn
    fn.restype, fn.argtypes = restype, argtypes
    return fn


def load(path: str | None = None) -> ctypes.CDLL:
    """Loads the library and checks its ABI version (`declare_all` then sets the signatures)."""
    path = path or find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"cannot load libtensorref ({path}): {e}. Build it with `cargo build` in the "
            f"repository, or set TENSORREF_LIB to the path of libtensorref.so.") from None
    check_abi(lib, path)
    return lib


# tensorref.Tensor, once `declare_all` has been given it.
Tensor = None


def declare_all(tensor_class) -> None:
    """Sets the signature of every hand-written function, with `tensor_class` as tr_tensor."""
    global Tensor
    Tensor = tensor_class
    for name, (restype, argtypes) in signatures(tensor_class).items():
        setattr(lib, name, declare(lib, name, restype, argtypes))


LIB_PATH = find_library()
lib = load(LIB_PATH)

_last_error = lib.tr_last_error
_status_str = lib.tr_status_str


def last_error() -> str:
    """The calling thread's last error message from the library."""
    n = c_size_t()
    _last_error(None, 0, byref(n))
    buf = ctypes.create_string_buffer(n.value + 1)
    if _last_error(buf, n.value + 1, byref(n)):
        return ""
    return buf.value.decode("utf-8", "replace")


def status_str(status: int) -> str:
    """The library's static text for a status code."""
    return _status_str(status).decode()


def fail(status: int, function: str, *tensors):
    """The one error path of every checked call: raises the class of the status group with the
    library's message for this failure. `tensors` are the call's tensor arguments: ctypes lets a
    bare int through as a handle, so a handle error on a non-Tensor argument is a TypeError."""
    if 200 <= status < 300:
        wrong = [type(t).__name__ for t in tensors if t is not None and not isinstance(t, Tensor)]
        if wrong:
            raise TypeError(f"{function}: expected tensorref.Tensor arguments, got {', '.join(wrong)}")
    name = STATUS_NAMES.get(status, f"status {status}")
    raise error_class(status)(status, name, function, last_error() or status_str(status))


def c_path(path) -> bytes:
    """A path (str, bytes, os.PathLike) as the bytes of a C string. A NUL inside would end the C
    string there (load_weights("a\\0b") would open "a"): ValueError, as open() raises."""
    b = os.fsencode(path)
    if b"\0" in b:
        raise ValueError(f"the path {path!r} contains a NUL byte, which a C string cannot carry")
    return b


def check(status: int, function: str) -> None:
    """Raises for a non-zero status (for the calls that are not on a hot path)."""
    if status:
        fail(status, function)
