"""The call forms PyTorch users bring, over the generated ops of ``_ops_generated.py``:

- shapes as varargs or one sequence: ``tr.zeros(2, 3)``, ``tr.zeros((2, 3))``,
  ``t.reshape(4, 1)``, ``t.view(-1)``, ``t.permute(1, 0)``, ``t.expand(3, -1)``; NumPy integers
  anywhere an int goes;
- reductions over all elements or over dims: ``t.sum()``, ``t.sum(0)``, ``t.mean((0, 1),
  keepdim=True)``, ``t.max()``, ``t.max(1)`` (values and indices), ``t.argmax()``;
- ``t.squeeze()`` without a dim, ``tr.full((2,), 3)`` and ``tr.arange(5)`` typed by their values
  (int64 for ints, as in PyTorch), ``t.to(dtype)``, ``t.float()``, ``t.long()`` ...

Each is a thin layer over one or two generated ops; every error still comes from the library.
"""
from __future__ import annotations

from operator import index as _index
from typing import NamedTuple

from . import _ops_generated
from . import dtypes as _dtypes
from ._tensor import Tensor

__all__ = ["zeros", "ones", "rand", "randn", "full", "arange", "reshape", "view", "permute",
           "expand", "sum", "mean", "max", "min", "argmax", "argmin", "squeeze"]


def _ints(args, name: str) -> list[int]:
    """Varargs ints, or one sequence of ints: (2, 3) and ((2, 3),) alike."""
    if len(args) == 1 and not hasattr(args[0], "__index__"):
        args = args[0]
        if isinstance(args, Tensor):
            args = args.tolist()
    try:
        return [_index(a) for a in args]
    except TypeError:
        raise TypeError(f"`{name}` must be ints or one sequence of ints, not {args!r}") from None


def _creation(op):
    def create(*size, dtype=None):
        if size and isinstance(size[-1], _dtypes.DType) and dtype is None:
            *size, dtype = size  # the positional dtype of the generated form: zeros([2], int64)
        return op(_ints(size, "size"), _dtypes.float32 if dtype is None else dtype)
    create.__name__ = create.__qualname__ = op.__name__
    create.__doc__ = f"{op.__doc__.splitlines()[0]} ``{op.__name__}(2, 3)``, ``{op.__name__}((2, 3))``, dtype float32 unless given."
    return create


zeros, ones, rand, randn = (_creation(op) for op in (_ops_generated.zeros, _ops_generated.ones, _ops_generated.rand, _ops_generated.randn))


def _inferred(*values) -> _dtypes.DType:
    """PyTorch's dtype for Python numbers: bool, int64 if all are ints, else float32."""
    if all(isinstance(v, bool) for v in values):
        return _dtypes.bool_
    if all(hasattr(v, "__index__") and not isinstance(v, float) for v in values):
        return _dtypes.int64
    return _dtypes.float32


def full(size, fill_value, dtype=None) -> Tensor:
    """A tensor of shape `size` filled with `fill_value`; the dtype follows the value (int64 for
    an int, bool for a bool, float32 for a float) unless given."""
    return _ops_generated.full(_ints((size,), "size"), fill_value, _inferred(fill_value) if dtype is None else dtype)


def arange(start, end=None, step=1, dtype=None) -> Tensor:
    """`start` (0 when one argument is given) up to `end` by `step`; int64 when all are ints,
    float32 otherwise, unless `dtype` is given."""
    if end is None:
        start, end = 0, start
    d = _inferred(start, end, step) if dtype is None else dtype
    return _ops_generated.arange(float(start), float(end), float(step), d)


# ------------------------------------------------------------ shapes as varargs
def reshape(self, *shape) -> Tensor:
    """Same elements in a new shape: ``t.reshape(4, 1)`` or ``t.reshape((4, 1))``."""
    return _ops_generated.reshape(self, _ints(shape, "shape"))


def view(self, *shape) -> Tensor:
    """A view with a new shape: ``t.view(-1)``."""
    return _ops_generated.view(self, _ints(shape, "shape"))


def permute(self, *dims) -> Tensor:
    """A view with dimensions reordered: ``t.permute(1, 0)``."""
    return _ops_generated.permute(self, _ints(dims, "dims"))


def expand(self, *shape) -> Tensor:
    """A view broadcast to `shape` (-1 keeps a dimension): ``t.expand(3, -1)``."""
    return _ops_generated.expand(self, _ints(shape, "shape"))


def squeeze(self, dim=None) -> Tensor:
    """Without `dim`, every dimension of size 1 removed; with it, that one if its size is 1."""
    if dim is not None:
        return _ops_generated.squeeze(self, dim)
    return _ops_generated.reshape(self, [d for d in self.shape if d != 1])


# ------------------------------------------------------------ reductions
def _dims(dim) -> list[int]:
    return [_index(dim)] if hasattr(dim, "__index__") else [_index(d) for d in dim]


def sum(self, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """The sum of all elements, or over `dim` (an int or a sequence of them)."""
    return _ops_generated.sum(self) if dim is None else _ops_generated.sum_dim(self, _dims(dim), keepdim)


def mean(self, dim=None, keepdim: bool = False) -> Tensor:
    """The mean of all elements, or over `dim` (an int or a sequence of them)."""
    return _ops_generated.mean(self) if dim is None else _ops_generated.mean_dim(self, _dims(dim), keepdim)


class MinMax(NamedTuple):
    """What ``t.max(dim)`` / ``t.min(dim)`` give, as in PyTorch."""
    values: Tensor
    indices: Tensor


def _ordered(t: Tensor) -> Tensor:
    """`t` as the argmax / argmin kernels take it: bool, which they refuse (as PyTorch's do),
    as uint8 with the same order, for the indices of ``max(dim)`` / ``min(dim)``, which PyTorch
    gives for bool too."""
    return _ops_generated.to_dtype(t, _dtypes.uint8) if t.dtype is _dtypes.bool_ else t


def max(self, dim=None, keepdim: bool = False):  # noqa: A001
    """The largest element; with `dim`, the largest values along it and their indices."""
    if dim is None:
        return _ops_generated.max(self)
    return MinMax(_ops_generated.max_dim(self, dim, keepdim), _ops_generated.argmax(_ordered(self), dim, keepdim))


def min(self, dim=None, keepdim: bool = False):  # noqa: A001
    """The smallest element; with `dim`, the smallest values along it and their indices."""
    if dim is None:
        return _ops_generated.min(self)
    return MinMax(_ops_generated.min_dim(self, dim, keepdim), _ops_generated.argmin(_ordered(self), dim, keepdim))


def argmax(self, dim=None, keepdim: bool = False) -> Tensor:
    """The index of the largest element (of the flattened tensor without `dim`)."""
    if dim is None:
        return _ops_generated.argmax(_ops_generated.reshape(self, [-1]), 0, False)
    return _ops_generated.argmax(self, dim, keepdim)


def argmin(self, dim=None, keepdim: bool = False) -> Tensor:
    """The index of the smallest element (of the flattened tensor without `dim`)."""
    if dim is None:
        return _ops_generated.argmin(_ops_generated.reshape(self, [-1]), 0, False)
    return _ops_generated.argmin(self, dim, keepdim)


# ------------------------------------------------------------ dtype conversions
def to(self, dtype) -> Tensor:
    """Conversion to `dtype` (a tensorref, NumPy or torch dtype, or its name). Devices are not a
    conversion here: the residency manager places tensors (``tr.residency``)."""
    try:
        d = _dtypes.dtype(dtype)
    except TypeError:
        raise TypeError(f"Tensor.to({dtype!r}): only a dtype; the residency manager moves tensors "
                        f"between devices (tr.residency.session(device='cuda', ...))") from None
    return _ops_generated.to_dtype(self, d)


def _as(d: _dtypes.DType):
    def convert(self) -> Tensor:
        return _ops_generated.to_dtype(self, d)
    convert.__doc__ = f"Conversion to {d.name}."
    return convert


_METHODS = {"reshape": reshape, "view": view, "permute": permute, "expand": expand,
            "squeeze": squeeze, "sum": sum, "mean": mean, "max": max, "min": min,
            "argmax": argmax, "argmin": argmin, "to": to, "float": _as(_dtypes.float32),
            "double": _as(_dtypes.float64), "half": _as(_dtypes.float16), "long": _as(_dtypes.int64),
            "int": _as(_dtypes.int32), "bool": _as(_dtypes.bool_)}


def install() -> None:
    for name, f in _METHODS.items():
        setattr(Tensor, name, f)
