"""Indexing as PyTorch users write it: ``t[0]``, ``t[:, 1:3]``, ``t[..., None]``, ``t[mask]``,
``t[idx]``, ``t[[0, 2]]``, ``t[[-1]]``, and assignment through each of them, with PyTorch's rules.

Integers, slices, ``None`` and ``...`` give views (``select``, ``slice``, ``unsqueeze``). One index
tensor (an integer tensor, a bool mask, a list or a NumPy array) may come with them, as in
PyTorch: negative entries count from the end, an entry out of range is an IndexError, and a
uint8 tensor is a mask (deprecated in PyTorch too). Reading gathers a copy (``index_select``; a
mask goes through ``nonzero``, or ``masked_select`` when it covers every dimension). Several index
tensors in one subscript are refused with what to write instead.

Assignment follows PyTorch's ``__setitem__`` (``at::indexing::set_item``):

- through basic indices only, it is ``copy_to``: a tensor value is copied into the view with
  ``copy_``, after dropping its leading size-1 dimensions when the shapes differ
  (``t[0] = ones(1, 3)``) and expanding it as a view. So a value that is the view's own memory
  (``t[0] = t`` for a one-element ``t``) is left as it is, and one overlapping the view otherwise
  raises. A view in which several elements share memory (an expanded tensor) is refused, a
  number included (written with ``fill_`` once libtorch has checked that): libtorch's
  RuntimeError, the library's TorchError;
- through an index tensor, it is ``index_put_``: a number, or with a mask any one-element value,
  fills (``index_fill_`` / ``masked_fill_``); otherwise the value (its leading size-1 dimensions
  dropped) must broadcast to the indexing result, have the target's dtype and not overlap the
  target (RuntimeError each, as in PyTorch), and is written with ``index_copy_`` (a mask through
  its ``nonzero`` positions, or ``masked_scatter_`` where the masked dimensions cannot be
  flattened as a view). A target whose elements share memory is written in order, with
  PyTorch's deprecation warning, as ``index_put_`` does.

Values that are neither numbers nor tensors (lists, NumPy arrays) are converted to the target's
dtype first, as numbers are; PyTorch itself takes only numbers and tensors there.
"""
from __future__ import annotations

import warnings
from math import prod

import numpy as np

from . import _ops_generated
from . import dtypes as _dtypes
from ._scalar import operand as _operand
from ._tensor import Tensor, from_numpy, tensor
from .errors import TorchError

_TOO_MANY = ("indexing with more than one index tensor is not supported: index one dimension "
             "at a time, e.g. t[i][:, j] to read")
# libtorch's words for its two memory-overlap checks (at::assert_no_internal_overlap and
# at::assert_no_overlap / assert_no_partial_overlap).
_INTERNAL_OVERLAP = "more than one element of the written-to tensor refers to a single memory location"
_INPUT_OVERLAP = "some elements of the input tensor and the written-to tensor refer to a single memory location"


# ------------------------------------------------------------ index tensors
def _index_tensor(item):
    """`item` as an index: a Tensor (int64 or bool), a NumPy array (int64 or bool: a list or an
    array, kept on the host until its range is checked), or None for a basic index."""
    if isinstance(item, Tensor):
        d = item.dtype
        if d is _dtypes.bool_ or d is _dtypes.int64:
            return item
        if d is _dtypes.uint8:
            warnings.warn("indexing with dtype uint8 is deprecated (as in PyTorch), please use a "
                          "bool mask instead", UserWarning, stacklevel=4)
            return item.to_dtype(_dtypes.bool_)
        if not d.is_floating_point:
            return item.to_dtype(_dtypes.int64)
        raise IndexError(f"tensors used as indices must be integer or bool tensors, not {d.name}")
    if isinstance(item, (np.ndarray, list, tuple)):
        arr = np.asarray(item)
        kind = arr.dtype.kind
        if kind == "b":
            return arr
        if kind == "u" and arr.dtype.itemsize == 1:
            warnings.warn("indexing with dtype uint8 is deprecated (as in PyTorch), please use a "
                          "bool mask instead", UserWarning, stacklevel=4)
            return arr.astype(np.bool_)
        if kind in "iu" or arr.size == 0:
            return arr.astype(np.int64)
        raise IndexError(f"tensors used as indices must be integer or bool tensors, not {arr.dtype}")
    return None


def _is_mask(index) -> bool:
    return index.dtype == np.bool_ if isinstance(index, np.ndarray) else index.dtype is _dtypes.bool_


def _as_tensor(index) -> Tensor:
    return from_numpy(index) if isinstance(index, np.ndarray) else index


def _out_of_range(i: int, n: int, dim: int) -> IndexError:
    return IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")


def _positions(index, n: int, dim: int) -> Tensor:
    """An integer index into a dimension `dim` of size `n` as 1-d int64 positions, negative
    entries counted from the end, as in PyTorch; IndexError for an entry out of range."""
    if isinstance(index, np.ndarray):
        flat = index.reshape(-1)
        if flat.size:
            lo, hi = int(flat.min()), int(flat.max())
            if hi >= n or lo < -n:
                raise _out_of_range(hi if hi >= n else lo, n, dim)
            if lo < 0:
                flat = flat % n
        return from_numpy(flat)
    flat = index.reshape([-1])
    if flat.numel():
        lo, hi = _ops_generated.min(flat).item(), _ops_generated.max(flat).item()
        if hi >= n or lo < -n:
            raise _out_of_range(hi if hi >= n else lo, n, dim)
        if lo < 0:
            flat = _ops_generated.remainder_scalar(flat, n)
    return flat


def _plan(t: Tensor, key):
    """The view of `t` that the basic indices of `key` select, and the one index (Tensor or
    NumPy array) with the dimension of that view where it applies (or None, None)."""
    items = key if isinstance(key, tuple) else (key,)
    advanced = []
    for i, x in enumerate(items):
        index = _index_tensor(x)
        if index is not None:
            advanced.append((i, index))
    if len(advanced) > 1:
        raise IndexError(_TOO_MANY)
    consumed = sum(x.ndim if _is_mask(x) else 1 for _, x in advanced)
    consumed += sum(1 for x in items if x is not None and x is not Ellipsis
                    and not isinstance(x, (Tensor, np.ndarray, list, tuple)))
    ndim = t.ndim
    if consumed > ndim:
        raise IndexError(f"too many indices for a tensor of dimension {ndim}")
    if sum(1 for x in items if x is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    view, dim, index, at = t, 0, None, None
    for i, item in enumerate(items):
        if item is Ellipsis:
            dim += ndim - consumed
        elif item is None:
            view = view.unsqueeze(dim)
            dim += 1
        elif isinstance(item, slice):
            start, stop, step = item.indices(view.shape[dim])
            if step <= 0:
                raise ValueError("slice steps must be positive, as in PyTorch; to reverse, index "
                                 "with a tensor: t[tr.arange(n - 1, -1, -1)]")
            view = view.slice(dim, start, max(stop, start), step)
            dim += 1
        elif advanced and advanced[0][0] == i:
            index, at = advanced[0][1], dim
            dim += index.ndim if _is_mask(index) else 1
        elif isinstance(item, bool) or not hasattr(item, "__index__"):
            raise TypeError(f"tensors are indexed by ints, slices, None, ..., and integer or bool "
                            f"tensors (or lists, NumPy arrays), not {type(item).__name__}")
        else:
            size = view.shape[dim]
            i_ = item.__index__()
            if not -size <= i_ < size:
                raise IndexError(f"index {i_} is out of bounds for dimension {dim} with size {size}")
            view = view.select(dim, i_ % size)
    return view, index, at


def _check_mask(view: Tensor, mask: Tensor, at: int) -> None:
    """IndexError unless `mask` has the shape of dims at..at+k of `view`."""
    k = mask.ndim
    shape = view.shape
    if tuple(shape[at:at + k]) != tuple(mask.shape):
        raise IndexError(f"the mask of shape {tuple(mask.shape)} does not match the indexed "
                         f"dimensions {tuple(shape[at:at + k])}")


def _mask_positions(mask: Tensor) -> Tensor:
    """The int64 positions (1-d) where `mask` is true, counted over its elements in order."""
    return mask.reshape([-1]).nonzero().reshape([-1])


def _flattened(view: Tensor, at: int, k: int) -> list[int]:
    """The shape of `view` with dims at..at+k flattened into one (sizes spelled out: an empty
    tensor leaves -1 ambiguous)."""
    shape = view.shape
    return list(shape[:at]) + [prod(shape[at:at + k])] + list(shape[at + k:])


# ------------------------------------------------------------ reading
def __getitem__(self, key) -> Tensor:
    view, index, at = _plan(self, key)
    if index is None:
        return view.alias() if view is self else view
    if _is_mask(index):
        mask = _as_tensor(index)
        _check_mask(view, mask, at)
        if at == 0 and mask.ndim == view.ndim:
            return view.masked_select(mask)
        positions = _mask_positions(mask)
        if mask.ndim != 1:
            view = view.reshape(_flattened(view, at, mask.ndim))  # a read: a copy is fine
        return view.index_select(at, positions)
    shape = view.shape
    out = view.index_select(at, _positions(index, shape[at], at))
    return out.reshape(list(shape[:at]) + list(index.shape) + list(shape[at + 1:]))


# ------------------------------------------------------------ writing
def _strip_leading_ones(shape) -> tuple[int, ...]:
    """PyTorch's slicePrefix1sSize: `shape` without its leading size-1 dimensions."""
    shape = tuple(shape)
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return shape[i:]


def _stripped(value: Tensor) -> Tensor:
    shape = value.shape
    short = _strip_leading_ones(shape)
    return value if short == shape else value.view(list(short))


def _assert_no_internal_overlap(view: Tensor) -> None:
    """PyTorch writes a number through basic indices with copy_ from a 0-d tensor, which refuses
    (before writing anything) a view in which several elements share memory, an expanded tensor:
    libtorch's assert_no_internal_overlap. fill_ writes the number without a temporary (no
    device memory under a residency budget) but does not check, so libtorch is asked first:
    index_copy_ runs that very check before any other, and given an index of two dimensions it
    always fails afterwards (an index has one), so it never writes."""
    if view.ndim == 0:
        return
    index = view if view.ndim >= 2 else view.unsqueeze(0)
    try:
        view.index_copy_(0, index, view)
    except TorchError as e:
        if _INTERNAL_OVERLAP in str(e):
            raise
    except Exception:  # noqa: BLE001  (the checks that follow: expected)
        pass


def _copy_to(dst: Tensor, src) -> None:
    """PyTorch's at::indexing::copy_to: a write through basic indices of `src`, a tensor or a
    number (which PyTorch makes a 0-d tensor of `dst`'s dtype and copies)."""
    if not isinstance(src, Tensor):
        _assert_no_internal_overlap(dst)
        dst.fill_(src)
        return
    shape = tuple(dst.shape)
    if shape == tuple(src.shape):
        dst.copy_(src)
    elif src.ndim == 0:
        # PyTorch's fill_(Tensor): copy_ from the value, cloned first when it may be an element
        # of `dst` (one element: cheaper to clone than to find out)
        dst.copy_(src.clone())
    else:
        # expanded as a view first, as PyTorch does (expand_inplace): a value that is the view's
        # own memory then has its strides too, and copy_ leaves it (t[None] = t)
        src = _stripped(src)
        dst.copy_(src if tuple(src.shape) == shape else src.expand(list(shape)))


def _broadcasts(shape, to) -> bool:
    """Whether `shape` broadcasts to `to` (PyTorch's is_expandable_to)."""
    if len(shape) > len(to):
        return False
    return all(s == 1 or s == t for s, t in zip(reversed(shape), reversed(to)))


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _check_put(view: Tensor, value: Tensor, result) -> None:
    """index_put_'s first checks of a tensor value (its leading 1s dropped) against the indexing
    result shape `result`: it must broadcast to it and have the target's dtype (RuntimeError, with
    PyTorch's words)."""
    if not _broadcasts(tuple(value.shape), tuple(result)):
        raise RuntimeError(f"shape mismatch: value tensor of shape {_dims(value.shape)} cannot be "
                           f"broadcast to indexing result of shape {_dims(result)}")
    d, v = view.dtype, value.dtype
    if d is not v:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{d.name} for the destination and {v.name} for the source.")


def _assert_no_overlap(view: Tensor, value: Tensor) -> None:
    """PyTorch's index_put_ refuses a value sharing memory with the target (at::assert_no_overlap)
    before it broadcasts the value. Once broadcast (a stride-0 view or a copy) libtorch can no
    longer tell, so ask it now: index_copy_ runs that very check on its source first, and with
    no index it writes nothing (its shape checks then fail, which is ignored)."""
    if not value.numel():
        return  # nothing to overlap; and index_copy_ could succeed (a no-op)
    try:
        view.index_copy_(0, _ops_generated.zeros([0], _dtypes.int64), value)
    except TorchError as e:
        if _INPUT_OVERLAP in str(e):
            raise
    except Exception:  # noqa: BLE001  (the shape checks that follow: expected)
        pass


def _copy_in_order(dst: Tensor, src: Tensor) -> None:
    """dst.copy_(src) for a `dst` whose elements may share memory: block by block along the first
    dimension, in order, so that the last write to an element wins (as index_put_ writes)."""
    try:
        dst.copy_(src)
        return
    except TorchError as e:
        if _INTERNAL_OVERLAP not in str(e) or dst.ndim == 0:
            raise
    for i in range(dst.shape[0]):
        _copy_in_order(dst.select(0, i), src.select(0, i))


def _index_copy(view: Tensor, at: int, positions: Tensor, src: Tensor) -> None:
    """index_put_ of `src` (shaped like the flattened indexing result) at `positions` along `at`.
    A target whose elements share memory (an expanded tensor), which index_copy_ refuses, is
    written position by position in order, with PyTorch's warning."""
    try:
        view.index_copy_(at, positions, src)
        return
    except TorchError as e:
        if _INTERNAL_OVERLAP not in str(e):
            raise
    warnings.warn("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor "
                  "before performing this operation. This also applies to advanced indexing e.g. "
                  "tensor[indices] = tensor", UserWarning, stacklevel=4)
    order = positions.tolist()

    def put(dst, s, at):
        if at == 0:
            for j, p in enumerate(order):
                _copy_in_order(dst.select(0, p), s.select(0, j))
        else:
            for i in range(dst.shape[0]):
                put(dst.select(0, i), s.select(0, i), at - 1)

    put(view, src, at)


def _put(view: Tensor, at: int, positions: Tensor, result, value: Tensor) -> None:
    """index_put_ of the tensor `value` (leading 1s dropped) at `positions` (1-d) along `at`,
    where the indexing result has shape `result`."""
    _check_put(view, value, result)
    shape = view.shape
    flat = list(shape[:at]) + [positions.shape[0]] + list(shape[at + 1:])
    if tuple(value.shape) != tuple(flat):
        _assert_no_overlap(view, value)  # (otherwise index_copy_ checks it)
        value = value.expand(list(result)).reshape(flat)
    _index_copy(view, at, positions, value)


def _value(value, like: Tensor):
    """The assigned value: a number (kept), a Tensor (kept), or anything else (a list, a NumPy
    array) as a tensor of `like`'s dtype."""
    if _operand(value, "value") is not None or isinstance(value, Tensor):
        return value
    value = tensor(np.asarray(value))
    return value if value.dtype is like.dtype else value.to_dtype(like.dtype)


def __setitem__(self, key, value) -> None:
    view, index, at = _plan(self, key)
    value = _value(value, view)
    scalar = not isinstance(value, Tensor)
    if index is None:
        if view is self:
            view = self.alias()
        _copy_to(view, value)
        return
    shape = view.shape
    if _is_mask(index):
        mask = _as_tensor(index)
        k = mask.ndim
        _check_mask(view, mask, at)
        if scalar or value.numel() == 1:
            # index_put_ with a mask and one value is masked_fill_ (any dtype, any shape)
            fill = value if scalar else value.item()
            view.masked_fill_(mask.reshape(list(mask.shape) + [1] * (view.ndim - at - k)), fill)
            return
        value = _stripped(value)
        positions = _mask_positions(mask)
        result = list(shape[:at]) + [positions.shape[0]] + list(shape[at + k:])
        if k == 1:
            _put(view, at, positions, result, value)
            return
        try:
            flat = view.view(_flattened(view, at, k))
        except (TorchError, ValueError):  # the masked dims cannot be flattened as a view
            flat = None
        if flat is not None:
            _put(flat, at, positions, result, value)
            return
        _check_put(view, value, result)
        _assert_no_overlap(view, value)
        src = value.expand(result).contiguous()  # in the order masked_scatter_ takes it
        view.masked_scatter_(mask.reshape(list(mask.shape) + [1] * (view.ndim - at - k)), src)
        return
    positions = _positions(index, shape[at], at)
    if scalar:
        view.index_fill_(at, positions, value)
        return
    result = list(shape[:at]) + list(index.shape) + list(shape[at + 1:])
    _put(view, at, positions, result, _stripped(value))


def install() -> None:
    Tensor.__getitem__ = __getitem__
    Tensor.__setitem__ = __setitem__
