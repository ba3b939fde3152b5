"""The Tensor class: a libtensorref handle as a Python object, its lifetime, metadata, host
copies (NumPy) and the arithmetic operators. The ops of the table are attached by the generated
``_ops.py``; the PyTorch habits (indexing, varargs shapes, comparisons, NumPy protocols) by
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
arithmetic operators of ``_ops.py`` are replaced by compiled versions in ``_speedups.c``, which
share this module's state (``_pending``, ``_limit``, ``in_callback``): a change to the release
rules here must be made there too (``tests/test_accel.py`` compares them).
"""
from __future__ import annotations

import atexit
from ctypes import byref, c_bool, c_int32, c_int64, c_size_t, c_uint64

import numpy as np

from . import dtypes as _dtypes
from . import _lib
from ._abi import ScopeHandle
from ._lib import fail, lib
from ._scalar import Scalar as _Scalar, from_c as _from_scalar

_release = lib.tr_tensor_release
_release_many = lib.tr_tensor_release_many
_from_data = lib.tr_tensor_from_data
_copy_to = lib.tr_tensor_copy_to
_shape = lib.tr_tensor_shape
_dtype = lib.tr_tensor_dtype
_numel = lib.tr_tensor_numel
_item = lib.tr_tensor_item_scalar
_alias = lib.tr_tensor_alias
_is_valid = lib.tr_tensor_is_valid
_tensor_scope = lib.tr_tensor_scope


# ------------------------------------------------------------ deferred releases
# A garbage-collected Tensor does not release its handle itself: its finalizer appends the
# handle to `_pending`, and the handles are released together, with one tr_tensor_release_many
# call, once `_limit[0]` of them have gathered, and whenever `flush_releases` runs: on leaving a
# scope, before live_handles / live_bytes / stats and every residency call, and at interpreter
# exit. `close()` (and `with tensor:`) still releases at once.
_pending: list[int] = []
RELEASE_BATCH = 64
_limit = [RELEASE_BATCH]   # a list so that finalizers can hold it through shutdown

# One entry per residency event callback running now (on any thread; residency's trampoline
# pushes and pops, atomic under the GIL). The callback runs while the library holds the
# manager's lock, and the garbage collector may run finalizers inside it: a finalizer then only
# appends to `_pending`, never calls the library, and the next finalizer or flush outside a
# callback releases the batch.
in_callback: list[int] = []


def flush_releases(_pending=_pending, _release_many=_release_many, _release=_release,
                   _u64=c_uint64) -> int:
    """Releases every handle whose owning Tensor object was garbage collected and is waiting in
    the deferred-release buffer, with a tr_tensor_release_many call (tr_tensor_release for a
    single one); returns how many. Safe from any thread and from a finalizer that runs during a
    flush (each handle is taken from the buffer exactly once). Handles that join the buffer
    meanwhile (the array's allocation may run the collector, whose finalizers append, and `pop`
    takes the newest first) are released too, in up to four rounds (so that a thread that keeps
    dropping tensors cannot hold this one here)."""
    total = 0
    for _ in range(4):
        if not _pending:
            break
        n = len(_pending)
        if n == 1:
            try:
                _release(_pending.pop())
            except IndexError:  # another thread took it
                break
            total += 1
            continue
        arr = (_u64 * n)()
        pop = _pending.pop
        i = 0
        try:
            while i < n:
                arr[i] = pop()
                i += 1
        except IndexError:  # another thread, or a finalizer's flush, took the rest
            pass
        if i:
            _release_many(arr, i)  # a stale handle (released elsewhere first) changes nothing
        total += i
    return total


def set_release_batch(n: int) -> int:
    """How many collected objects' handles gather before one batched release (1: each is
    released as its object is collected, as without batching). Returns the previous value."""
    if n < 1:
        raise ValueError("the release batch is at least 1")
    prev = _limit[0]
    flush_releases()
    _limit[0] = int(n)
    return prev


def _at_exit() -> None:
    # Interpreter exit: release what is waiting, and release each later one at once.
    _limit[0] = 1
    flush_releases()


atexit.register(_at_exit)


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
    @property
    def scope(self):
        """The Scope that owns this handle, or None when the caller does."""
        from .scope import Scope
        out = ScopeHandle()
        st = _tensor_scope(self, out)
        if st:
            fail(st, "tr_tensor_scope")
        return Scope._view(out.value) if out.value else None

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

    def to_torch(self):
        """A torch.Tensor sharing this tensor's memory (DLPack, no copy)."""
        from .interop import to_torch
        return to_torch(self)

    def __reduce__(self):
        raise TypeError("tensorref.Tensor cannot be pickled; use .numpy() (or copy.deepcopy)")

    # Identity, as for PyTorch tensors (== is elementwise): tensors can key a dict.
    __hash__ = object.__hash__

    # The operators (+ - * / // % @ **, the reflected and in-place ones, == != < <= > >=,
    # unary - and abs) are generated in _ops.py; the other Python and NumPy protocols (repr,
    # float(), NumPy arrays, DLPack, copies ...) are in _protocols.py, indexing in _indexing.py.


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
