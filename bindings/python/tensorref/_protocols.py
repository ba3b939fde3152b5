"""The Python and NumPy protocols of Tensor, as PyTorch tensors have them: what builtins
(``float``, ``int``, ``bool``, ``len``, iteration, ``hash``, ``copy``, ``repr``), NumPy
(``np.asarray``, NumPy's operators) and DLPack consumers (``torch.from_dlpack``,
``np.from_dlpack``) see. A Tensor is a ctypes integer underneath: none of them may ever see the
handle number instead of the values.
"""
from __future__ import annotations

import ctypes
import sys
from ctypes import byref, c_int32, c_void_p

import numpy as np

from . import dtypes as _dtypes
from ._abi_generated import DEVICE_CODES
from ._lib import fail, lib
from ._tensor import Tensor
from .interop import dlpack_capsule

_DEFAULT_DTYPES = (_dtypes.float32, _dtypes.int64, _dtypes.bool_)
_KDLCPU, _KDLCUDA = 1, 2  # DLPack's device types


def _one_element(t: Tensor, what: str):
    n = t.numel()
    if n != 1:
        raise ValueError(f"{what}: a tensor with {n} elements cannot be converted to a Python "
                         f"scalar; use .tolist() or .numpy()")
    return t.item()


# ------------------------------------------------------------ numbers
def __float__(self) -> float:
    return float(_one_element(self, "float()"))


def __int__(self) -> int:
    return int(_one_element(self, "int()"))


def __index__(self) -> int:
    if self.dtype.is_floating_point:
        raise TypeError("only integer tensors of a single element can be converted to an index "
                        f"(this one is {self.dtype.name}); write int(t) to truncate")
    return int(_one_element(self, "__index__"))


def __bool__(self) -> bool:
    n = self.numel()
    if n != 1:
        raise ValueError(f"the truth value of a tensor with {n} elements is ambiguous; use "
                         f"(t != 0).sum() > 0 or compare .numpy() with .any() / .all()")
    return bool(self.item())


def __format__(self, spec: str) -> str:
    if spec and self.numel() == 1:
        return format(self.item(), spec)
    return format(str(self), spec)


# ------------------------------------------------------------ NumPy
def __array__(self, dtype=None, copy=None):
    """A NumPy array of the values: always a copy (the library's memory is shared only through
    DLPack: ``np.from_dlpack(t)``)."""
    if copy is False:
        raise ValueError("a tensorref.Tensor cannot become a NumPy array without a copy; use "
                         "np.from_dlpack(t) to share its memory")
    arr = self.numpy()
    return arr if dtype is None else arr.astype(dtype, copy=False)


# ------------------------------------------------------------ DLPack
def _where(t: Tensor) -> tuple[bool, int]:
    """Whether `t`'s memory is on a CUDA device, and that device's number."""
    kind, index = c_int32(), c_int32()
    st = lib.tr_tensor_device(t, byref(kind), byref(index))
    if st:
        fail(st, "tr_tensor_device", t)
    return kind.value == DEVICE_CODES["CUDA"], index.value


def __dlpack_device__(self) -> tuple[int, int]:
    cuda, index = _where(self)
    return (_KDLCUDA, index) if cuda else (_KDLCPU, 0)


def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    """A "dltensor" capsule sharing this tensor's memory (DLPack's unversioned struct, which
    every consumer accepts whatever ``max_version`` it asks for). ``copy=True`` exports a copy;
    another ``dl_device`` than the tensor's is refused (BufferError, as the protocol says)."""
    if dl_device is not None and tuple(dl_device) != __dlpack_device__(self):
        raise BufferError(f"the tensor is on DLPack device {__dlpack_device__(self)}, not "
                          f"{tuple(dl_device)}; copy it there first")
    return dlpack_capsule(self.clone() if copy else self)


@property
def device(self) -> str:
    """"cpu" or "cuda:n": where the tensor's memory is (its home under a residency manager)."""
    cuda, index = _where(self)
    return f"cuda:{index}" if cuda else "cpu"


# ------------------------------------------------------------ sequences and shapes
def __len__(self) -> int:
    shape = self.shape
    if not shape:
        raise TypeError("len() of a 0-d tensor")
    return shape[0]


def __iter__(self):
    n = len(self) if self.shape else None
    if n is None:
        raise TypeError("iteration over a 0-d tensor")
    for i in range(n):
        yield self.select(0, i)


def __contains__(self, element) -> bool:
    return bool((self == element).sum().item())


def size(self, dim: int | None = None):
    """The shape (a tuple), or the size of dimension `dim` (negative counts from the end)."""
    shape = self.shape
    return shape if dim is None else shape[dim]


@property
def T(self) -> Tensor:  # noqa: N802  (PyTorch's name)
    """A view with the dimensions reversed (the tensor itself, aliased, for 0-d and 1-d)."""
    n = self.ndim
    return self.alias() if n < 2 else self.permute(list(range(n - 1, -1, -1)))


def __pos__(self) -> Tensor:
    return self.alias()


# ------------------------------------------------------------ copies
def __copy__(self) -> Tensor:
    """A new handle to the same storage (PyTorch's copy.copy shares the data too)."""
    return self.alias()


def __deepcopy__(self, memo) -> Tensor:
    out = self.clone()
    memo[id(self)] = out
    return out


# ------------------------------------------------------------ repr
def _element_format(arr: np.ndarray):
    """PyTorch's element format for these values: `1.` for integral floats, 4 decimals, or
    scientific notation for wide ranges; ints and bools as they are."""
    kind = arr.dtype.kind
    if kind == "b":
        return lambda v: "True" if v else "False"
    if kind != "f":
        return lambda v: str(int(v))
    finite = np.abs(arr[np.isfinite(arr)].astype(np.float64))
    special = lambda v, f: f(v) if np.isfinite(v) else str(float(v))  # noqa: E731
    if finite.size and np.all(finite == np.round(finite)) and finite.max() < 1e8:
        return lambda v: special(v, lambda x: f"{x:.0f}.")
    nonzero = finite[finite != 0]
    if nonzero.size and (nonzero.max() / nonzero.min() > 1000 or nonzero.max() > 1e8
                         or nonzero.min() < 1e-4):
        return lambda v: special(v, lambda x: f"{x:.4e}")
    return lambda v: special(v, lambda x: f"{x:.4f}")


def __repr__(self) -> str:
    if getattr(self, "_own", False) is None:
        return f"tensorref.Tensor(<closed>, handle={self.value:#x})"
    try:
        arr, dtype = self.numpy(), self.dtype
    except Exception as e:  # noqa: BLE001  (a dead handle: say so rather than fail)
        return f"tensorref.Tensor(<{getattr(e, 'status_name', 'error')}>, handle={self.value:#x})"
    fmt = _element_format(arr)
    flat = arr.reshape(-1)
    shown = flat if flat.size <= 2000 else np.concatenate([flat[:1000], flat[-1000:]])
    width = max((len(fmt(v)) for v in shown), default=0)
    body = np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3,
                           formatter={"all": lambda v: fmt(v).rjust(width)}, max_line_width=80)
    extra = "" if dtype in _DEFAULT_DTYPES else f", dtype=tensorref.{dtype.name}"
    if arr.size == 0:
        extra += f", size={tuple(arr.shape)}" if arr.ndim > 1 else ""
    if dtype.is_floating_point and self.requires_grad():
        extra += ", requires_grad=True"
    return f"tensor({body}{extra})"


_METHODS = (__float__, __int__, __index__, __bool__, __format__, __array__, __dlpack__,
            __dlpack_device__, __len__, __iter__, __contains__, __pos__, __copy__, __deepcopy__,
            __repr__, size)


def install() -> None:
    """Puts the protocols on Tensor."""
    for f in _METHODS:
        setattr(Tensor, f.__name__, f)
    Tensor.__str__ = __repr__
    Tensor.device, Tensor.T = device, T
    Tensor.__array_ufunc__ = None  # NumPy's operators return NotImplemented: Tensor's reflected
    Tensor.__array_priority__ = 1000  # operators run (`np.ones(2) * t` is a Tensor)


# Where PyTypeObject keeps tp_as_buffer: its 21st pointer-sized field in every CPython 3 release
# (after the object header's 3 words and 17 slots); debug builds (Py_TRACE_REFS, which have
# sys.getobjects) put 2 more words in the header.
_TP_AS_BUFFER = 20 * ctypes.sizeof(c_void_p)


def hide_buffer() -> bool:
    """Takes the buffer protocol off Tensor. ctypes gives every c_uint64 one (the 8 bytes of its
    value), and NumPy asks for a buffer before ``__array__``: ``np.asarray(t)`` would be the
    handle number. Tensor is a heap type whose ``tp_as_buffer`` points into the type object
    itself, at ctypes' ``bf_getbuffer``; that pointer is cleared, after checking that it is what
    it should be (else nothing is changed and False returned). Runs after the accelerator has
    checked its view of Tensor's memory against the buffer protocol."""
    if sys.implementation.name != "cpython" or hasattr(sys, "getobjects"):
        return False
    start, size = id(Tensor), type.__sizeof__(Tensor)
    procs = c_void_p.from_address(start + _TP_AS_BUFFER).value
    ctypes_procs = c_void_p.from_address(id(ctypes.c_uint64) + _TP_AS_BUFFER).value
    if not procs or not ctypes_procs or not start < procs < start + size:
        return False
    getbuffer = c_void_p.from_address(procs)  # PyBufferProcs.bf_getbuffer, its first field
    if getbuffer.value is None:
        return True  # taken off already
    if getbuffer.value != c_void_p.from_address(ctypes_procs).value:
        return False
    getbuffer.value = None
    return True
