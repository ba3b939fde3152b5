"""Indexing as PyTorch users write it: ``t[0]``, ``t[:, 1:3]``, ``t[..., None]``, ``t[mask]``,
``t[idx]``, ``t[[0, 2]]``, and assignment through each of them.

Integers, slices, ``None`` and ``...`` give views (``select``, ``slice``, ``unsqueeze``), so an
assignment through them writes into the tensor (``fill_`` / ``copy_``, broadcasting). One index
tensor (an integer tensor, a bool mask, a list or a NumPy array) may come with them, as in
PyTorch: reading gathers a copy (``index_select``; a mask goes through ``nonzero``), writing
scatters into the tensor (``index_fill_`` / ``index_copy_``, ``masked_fill_`` /
``masked_scatter_``). Several index tensors in one subscript are refused with what to write
instead.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as _dtypes
from ._scalar import operand as _operand
from ._tensor import Tensor, from_numpy, tensor

_TOO_MANY = ("indexing with more than one index tensor is not supported: index one dimension "
             "at a time, e.g. t[i][:, j] to read")


def _index_tensor(item) -> Tensor | None:
    """`item` as an index tensor (int64 or bool), or None for a basic index."""
    if isinstance(item, Tensor):
        t = item
    elif isinstance(item, np.ndarray):
        t = from_numpy(item)
    elif isinstance(item, (list, tuple)):
        t = tensor(item) if item else tensor([], dtype=_dtypes.int64)
    else:
        return None
    d = t.dtype
    if d is _dtypes.bool_ or d is _dtypes.int64:
        return t
    if not d.is_floating_point:
        return t.to_dtype(_dtypes.int64)
    raise IndexError(f"tensors used as indices must be integer or bool tensors, not {d.name}")


def _plan(t: Tensor, key):
    """The view of `t` that the basic indices of `key` select, and the one index tensor with
    the dimension of that view where it applies (or None, None)."""
    items = key if isinstance(key, tuple) else (key,)
    advanced = [(i, _index_tensor(x)) for i, x in enumerate(items)]
    advanced = [(i, x) for i, x in advanced if x is not None]
    if len(advanced) > 1:
        raise IndexError(_TOO_MANY)
    consumed = sum(x.ndim if x.dtype is _dtypes.bool_ else 1 for _, x in advanced)
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
            dim += index.ndim if index.dtype is _dtypes.bool_ else 1
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


def _flat_positions(view: Tensor, index: Tensor, at: int):
    """A bool mask over dims at..at+k of `view` as int64 positions into those dims flattened,
    with the view flattened there (a view: writes through it reach the tensor)."""
    k = index.ndim
    shape = view.shape
    if tuple(shape[at:at + k]) != tuple(index.shape):
        raise IndexError(f"the mask of shape {tuple(index.shape)} does not match the indexed "
                         f"dimensions {tuple(shape[at:at + k])}")
    flat = view.view(list(shape[:at]) + [-1] + list(shape[at + k:]))
    positions = index.reshape([-1]).nonzero().reshape([-1])
    return flat, positions


def __getitem__(self, key) -> Tensor:
    view, index, at = _plan(self, key)
    if index is None:
        return view.alias() if view is self else view
    if index.dtype is _dtypes.bool_:
        if at == 0 and index.ndim == view.ndim:
            return view.masked_select(index)
        view, index = _flat_positions(view, index, at)
    out = view.index_select(at, index.reshape([-1]))
    shape = view.shape
    return out.reshape(list(shape[:at]) + list(index.shape) + list(shape[at + 1:]))


def _value(value, like: Tensor):
    """The assigned value: a scalar, or a tensor of `like`'s dtype."""
    s = _operand(value, "value")
    if s is not None:
        return value
    if not isinstance(value, Tensor):
        value = tensor(np.asarray(value))
    return value if value.dtype is like.dtype else value.to_dtype(like.dtype)


def __setitem__(self, key, value) -> None:
    view, index, at = _plan(self, key)
    value = _value(value, view)
    scalar = not isinstance(value, Tensor)
    if index is None:
        if view is self:
            view = self.alias()
        view.fill_(value) if scalar else view.copy_(value)
        return
    if index.dtype is _dtypes.bool_ and at == 0 and index.ndim == view.ndim:
        if scalar:
            view.masked_fill_(index, value)
        elif value.numel() == 1:
            view.masked_fill_(index, value.item())
        else:
            view.masked_scatter_(index, value)
        return
    if index.dtype is _dtypes.bool_:
        view, index = _flat_positions(view, index, at)
    index = index.reshape([-1])
    if scalar:
        view.index_fill_(at, index, value)
        return
    shape = view.shape
    full = list(shape[:at]) + [index.shape[0]] + list(shape[at + 1:])
    view.index_copy_(at, index, value.expand(full).contiguous())


def install() -> None:
    Tensor.__getitem__ = __getitem__
    Tensor.__setitem__ = __setitem__
