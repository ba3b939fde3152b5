"""The Tensor class: a libtensorref handle as a Python object, its lifetime, metadata, host
copies (NumPy) and the arithmetic operators. The ops of the table are attached by the generated
``_ops_generated.py``; the PyTorch habits (indexing, varargs shapes, comparisons, NumPy protocols) by
``_habits.py``.

Lifetime: Python frees on the last reference, and so does a Tensor. Every Tensor the package
makes for a new handle holds that handle's reference and releases it on ``close()``, on leaving a
``with`` block, or (deferred, in batches: see ``flush_releases``) once the object is garbage
collected, whether or not a scope owns the handle: releasing takes the handle out of its scope,
as TorchSharp's Dispose does. A scope (opened through this package) releases at its end only
what the program still references. The slot ``_own`` says what the object does: True (it
releases its handle), None (closed), unset or False (``Tensor(handle)``, a view of someone
else's handle, which never releases it).

Tensor is a ``c_uint64`` holding the handle, and the very class the ctypes signatures declare
for tr_tensor: ctypes passes an instance of exactly the declared class without conversion.

When the optional accelerator is in use (``tensorref._accel``), ``Tensor.__del__`` below and the
arithmetic operators of ``_ops_generated.py`` are replaced by compiled versions in ``_speedups.c``, which
share the release state of ``_ownership`` (``_pending``, ``_limit``, ``in_callback``): a change
to the release rules must be made there too (``tests/test_accel.py`` compares them).
"""
from __future__ import annotations

from ctypes import byref, c_bool, c_int32, c_int64, c_size_t, c_uint64

import numpy as np

from . import dtypes as _dtypes
from . import _lib
from ._abi_generated import ScopeHandle
from ._lib import fail, lib
from ._ownership import _limit, _pending, flush_releases, in_callback
from ._scalar import Scalar as _Scalar, from_c as _from_scalar

_release = lib.tr_tensor_release
_from_data = lib.tr_tensor_from_data
_copy_to = lib.tr_tensor_copy_to
_shape = lib.tr_tensor_shape
_dtype = lib.tr_tensor_dtype
_numel = lib.tr_tensor_numel
_item = lib.tr_tensor_item_scalar
_alias = lib.tr_tensor_alias
_is_valid = lib.tr_tensor_is_valid


class Tensor(c_uint64):
    """A reference-counted handle to a libtorch tensor (see the module docstring for who
    releases it). Create tensors with the module's functions (``tensorref.zeros``,
    ``from_numpy``, ``from_torch`` ...); ``Tensor(handle)`` only views a raw handle value."""
    __slots__ = ("_own",)

    def __del__(self, _append=_pending.append, _pending=_pending, _limit=_limit,
                _in_callback=in_callback):
        # Deferred release (see `flush_releases`). Never raises: a finalizer has nobody to
        # raise to, and during interpreter shutdown anything may already be gone.
        try:
            if self._own:
                _append(self.value)
                if len(_pending) >= _limit[0] and not _in_callback:
                    flush_releases()
        except AttributeError:  # made by Tensor(handle): not ours
            pass
        except Exception:  # noqa: BLE001  (shutdown: the module's globals are being cleared)
            pass

    # ------------------------------------------------------------ lifetime
    @property
    def handle(self) -> int:
        """The tr_tensor value."""
        return self.value

    def close(self) -> None:
        """Drops this object's reference now (TorchSharp's Dispose), whichever scope owns it.
        Closing twice, or closing a tensor whose scope already released it, is a no-op, and so
        is closing a view (``Tensor(handle)``): the reference is its owner's."""
        own = getattr(self, "_own", False)
        if own is None:
            return
        self._own = None
        if not own:
            return
        st = _release(self)
        if st and st != 200:  # TR_ERR_STALE_HANDLE: already released, which is the goal
            fail(st, "tr_tensor_release")

    dispose = close

    def __enter__(self) -> Tensor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def is_valid(self) -> bool:
        """Whether the handle is alive (false once released or its scope disposed)."""
        out = c_bool()
        st = _is_valid(self, out)
        if st:
            fail(st, "tr_tensor_is_valid")
        return out.value

    def alias(self) -> Tensor:
        """A new handle to the same storage with its own life (TorchSharp's fresh reference)."""
        out = new()
        st = _alias(self, out)
        if st:
            fail(st, "tr_tensor_alias")
        return out

    # ------------------------------------------------------------ scopes
    def move_to_outer_scope(self) -> Tensor:
        """Hands the handle to the scope that was current when its owner was opened (to the
        caller if there is none). Returns self."""
        st = lib.tr_tensor_move_to_outer_scope(self)
        if st:
            fail(st, "tr_tensor_move_to_outer_scope")
        return self

    def detach_from_scope(self) -> Tensor:
        """The handle leaves its scope and belongs to this object. Returns self."""
        st = lib.tr_tensor_detach_from_scope(self)
        if st:
            fail(st, "tr_tensor_detach_from_scope")
        return self

    def move_to_scope(self, scope) -> Tensor:
        """Hands the handle to ``scope`` (None: to this object). Returns self."""
        st = lib.tr_tensor_move_to_scope(self, scope if scope is not None else ScopeHandle(0))
        if st:
            fail(st, "tr_tensor_move_to_scope")
        return self

    # ------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple[int, ...]:
        dims = (c_int64 * 8)()
        n = c_size_t()
        st = _shape(self, dims, 8, byref(n))
        if st == 102 and n.value > 8:  # TR_ERR_BUFFER_TOO_SMALL: more than 8 dimensions
            dims = (c_int64 * n.value)()
            st = _shape(self, dims, n.value, byref(n))
        if st:
            fail(st, "tr_tensor_shape")
        return tuple(dims[: n.value])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> _dtypes.DType:
        code = c_int32()
        st = _dtype(self, byref(code))
        if st:
            fail(st, "tr_tensor_dtype")
        return _dtypes.from_code(code.value)

    def numel(self) -> int:
        """The number of elements."""
        n = c_size_t()
        st = _numel(self, byref(n))
        if st:
            fail(st, "tr_tensor_numel")
        return n.value

    def item(self):
        """The value of a one-element tensor: an int (exact) for integer dtypes, a bool or a
        float."""
        v = _Scalar()
        st = _item(self, byref(v))
        if st:
            fail(st, "tr_tensor_item_scalar")
        return _from_scalar(v)

    def numpy(self) -> np.ndarray:
        """A NumPy copy of the elements (bfloat16 comes out as float32, which NumPy has)."""
        src = self
        if self.dtype is _dtypes.bfloat16:
            src = self.to_dtype(_dtypes.float32)
        arr = np.empty(src.shape, dtype=src.dtype.numpy)
        written = c_size_t()
        st = _copy_to(src, arr.ctypes.data, arr.nbytes, byref(written))
        if st:
            fail(st, "tr_tensor_copy_to")
        return arr

    def tolist(self):
        return self.numpy().tolist()

    def __reduce__(self):
        raise TypeError("tensorref.Tensor cannot be pickled; use .numpy() (or copy.deepcopy)")

    # Identity, as for PyTorch tensors (== is elementwise): tensors can key a dict.
    __hash__ = object.__hash__

    # The operators (+ - * / // % @ **, the reflected and in-place ones, == != < <= > >=,
    # unary - and abs) are generated in _ops_generated.py; the other Python and NumPy protocols (repr,
    # float(), NumPy arrays, DLPack, copies ...) are in _protocols.py, indexing in _indexing.py,
    # `scope` in scope.py, `to_torch` in interop.py, `pin_resident` in residency.py: each where
    # its concept lives, so that this module imports none of them.


_lib.declare_all(Tensor)


def new() -> Tensor:
    """An empty object for a handle about to be created: it will hold that handle's reference."""
    t = Tensor()
    t._own = True
    return t


def from_numpy(arr) -> Tensor:
    """A new tensor holding a copy of the NumPy array (any layout; the dtypes of
    ``tensorref.dtypes``)."""
    arr = np.asarray(arr)
    if not arr.dtype.isnative:  # big-endian data: the library takes the machine's byte order
        arr = arr.astype(arr.dtype.newbyteorder("="))
    d = _dtypes.dtype(arr.dtype)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # (never for 0-d arrays, which it would make 1-d)
    shape = (c_int64 * arr.ndim)(*arr.shape)
    out = new()
    st = _from_data(arr.ctypes.data, arr.nbytes, shape, arr.ndim, d.code, out)
    if st:
        fail(st, "tr_tensor_from_data")
    return out


def tensor(data, dtype=None) -> Tensor:
    """A new tensor holding a copy of `data`: nested lists of Python numbers (ints become int64,
    floats float32, as in PyTorch), a NumPy array or scalar (its dtype kept), a Tensor, or lists
    of one-element Tensors. `dtype` converts."""
    if isinstance(data, Tensor):
        out = data.clone()
        return out if dtype is None else out.to_dtype(_dtypes.dtype(dtype))
    keep = isinstance(data, (np.ndarray, np.generic))
    arr = np.asarray(data)
    if dtype is not None:
        arr = arr.astype(_dtypes.dtype(dtype).numpy)
    elif keep:
        pass
    elif arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu" and arr.dtype != np.uint8:
        arr = arr.astype(np.int64)
    return from_numpy(arr)
