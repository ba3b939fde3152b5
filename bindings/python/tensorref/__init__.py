"""tensorref: Python binding of libtensorref, reference-counted handles to libtorch tensors with
TorchSharp-style dispose scopes, through the library's C ABI (ctypes).

    import tensorref as tr
    w = tr.randn([4, 4])
    with tr.scope():
        y = (w @ w).relu().sum().move_to_outer_scope()   # temporaries die with the scope
    print(y.item())

The shared library is found through TENSORREF_LIB, else the repository's
target/{release,debug}/libtensorref.so (see tensorref._lib). Its ABI version is checked on
import. ``tensorref.accelerated`` says whether the optional compiled hot path (the operators and
the finalizer of Tensor, tensorref._accel) is in use; TENSORREF_PURE_PYTHON=1 turns it off.
"""
from __future__ import annotations

import sys as _sys
from ctypes import byref as _byref, c_uint64 as _c_uint64

from . import errors
from ._abi_generated import DEVICE_CODES as _DEVICE_CODES, TR_ABI_VERSION, TR_VERSION
from ._lib import LIB_PATH, check as _check, lib as _cdll
from ._ops_generated import *  # noqa: F401,F403  (the op table)
from ._ops_generated import __all__ as _op_names
from ._ops_generated import abs, pow, slice  # noqa: A004  (kept out of `import *`)
from ._habits import (MinMax, arange, argmax, argmin, expand, full, max, mean, min, ones,  # noqa: A004
                      permute, rand, randn, reshape, squeeze, sum, view, zeros)
from ._ownership import flush_releases, set_release_batch
from ._tensor import Tensor, from_numpy, tensor
from .dtypes import (DType, bfloat16, bool_, dtype, float16, float32, float64, int8, int16,
                     int32, int64, uint8)
from .errors import (AbiMismatchError, ArgumentError, DeviceError, FileError, HandleError,
                     PanicError, ScopeError, ShapeDtypeError, TensorRefError, TorchError)
from .interop import from_dlpack, from_torch, to_torch, to_torch_device
from .scope import Scope, Stats, current_scope, reset_stats, scope, stats
from . import weights  # tr.weights.load(path)
from . import residency  # the residency manager: tr.residency.session(...), tr.residency.stats() ...
from . import _habits, _indexing, _protocols
_protocols.install()
_indexing.install()
_habits.install()
from . import _accel  # after _ops_generated: the compiled operators replace the generated ones
_protocols.hide_buffer()  # after _accel, which checks its reading of Tensor against the buffer
# The `tensorref` torch device (model.to("tensorref")): registered in libtorch now, before any
# backward starts the autograd engine's device threads; named in torch's Python once torch is
# imported (now, or by a manager's configuration, or by tensorref.torch_device.register()).
_check(_cdll.tr_torch_device_register(), "tr_torch_device_register")
if "torch" in _sys.modules:
    from . import torch_device
    torch_device.register()

__version__ = ".".join(map(str, TR_VERSION))


def __getattr__(name):
    if name == "accelerated":
        # Whether Tensor's operators and finalizer run compiled (tensorref._speedups) rather
        # than through ctypes alone; see tensorref._accel (and its `reason` when False).
        return _accel.active
    raise AttributeError(f"module 'tensorref' has no attribute {name!r}")


def abi_version() -> int:
    """The library's tr_abi_version() (equal to TR_ABI_VERSION, or the import would have failed)."""
    return _cdll.tr_abi_version()


def version() -> str:
    """The library's version text: its version, ABI, libtorch version and CUDA availability."""
    return _cdll.tr_version().decode()


def live_handles() -> int:
    """Live tensor handles in the whole process (all threads), for leak checks; deferred
    releases are flushed first."""
    flush_releases()
    return _cdll.tr_live_handles()


def panics_caught() -> int:
    """Panics the library's C boundary has caught in this process (each raised as PanicError):
    every one is a bug of libtensorref, so a correct run reads 0."""
    return _cdll.tr_panics_caught()


def live_bytes(device: str = "cpu") -> int:
    """Logical bytes held by live handles on a device: "cpu" (host memory), or "cuda" / "cuda:n"
    (deferred releases are flushed first)."""
    kind, _, index = str(device).partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise ValueError(f"live_bytes: a device is \"cpu\", \"cuda\" or \"cuda:n\", not {device!r}")
    flush_releases()
    out = _c_uint64()
    _check(_cdll.tr_live_bytes(_DEVICE_CODES[kind.upper()], int(index or 0), _byref(out)), "tr_live_bytes")
    return out.value


def manual_seed(seed: int) -> None:
    """Seeds libtorch's default generator (rand, randn, dropout)."""
    _check(_cdll.tr_manual_seed(seed), "tr_manual_seed")


class no_grad:
    """Context manager: gradient tracking off on this thread inside the block."""

    def __enter__(self):
        from ctypes import byref, c_bool
        prev = c_bool()
        _check(_cdll.tr_grad_set_enabled(False, byref(prev)), "tr_grad_set_enabled")
        self._prev = prev.value
        return self

    def __exit__(self, *exc):
        _check(_cdll.tr_grad_set_enabled(self._prev, None), "tr_grad_set_enabled")


__all__ = [
    *_op_names, "Tensor", "from_numpy", "tensor", "from_dlpack", "from_torch", "to_torch", "to_torch_device",
    "weights", "flush_releases", "set_release_batch", "MinMax", "residency",
    "Scope", "Stats", "scope", "current_scope", "stats", "reset_stats",
    "DType", "dtype", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
    "float64", "bool_", "bfloat16",
    "TensorRefError", "ArgumentError", "HandleError", "ScopeError", "ShapeDtypeError",
    "DeviceError", "TorchError", "FileError", "PanicError", "AbiMismatchError", "errors",
    "abi_version", "version", "live_handles", "live_bytes", "panics_caught", "manual_seed", "no_grad",
    "TR_ABI_VERSION", "LIB_PATH",
]
