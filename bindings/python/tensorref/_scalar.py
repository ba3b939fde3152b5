"""Typed scalars: the C ABI's ``tr_scalar`` made from Python and NumPy numbers, and read back.

A scalar keeps its type across the boundary, as in PyTorch: an ``int`` (or NumPy integer) is an
exact int64, a ``float`` (or NumPy floating scalar) a double, a ``bool`` a bool. The library
promotes it with the tensor as PyTorch promotes a Python number (``ints + 1`` stays int64,
``ints + 0.5`` is float32).
"""
from __future__ import annotations

import numpy as np

from ._abi_generated import SCALAR_KIND_CODES, Scalar

INT, FLOAT, BOOL = SCALAR_KIND_CODES["INT"], SCALAR_KIND_CODES["FLOAT"], SCALAR_KIND_CODES["BOOL"]
_I64_MIN, _I64_MAX = -(2 ** 63), 2 ** 63 - 1


def _int(v: int, name: str) -> Scalar:
    if _I64_MIN <= v <= _I64_MAX:
        return Scalar(INT, v, 0.0, False)
    raise OverflowError(f"`{name}`: {v} does not fit in int64; write float({v}) for a floating "
                        f"scalar")


def operand(v, name: str = "other"):
    """The Scalar of a Python or NumPy number, or None for anything else (an operator's other
    operand is then a tensor, an array, or not supported)."""
    t = type(v)
    if t is float:
        return Scalar(FLOAT, 0, v, False)
    if t is int:
        return _int(v, name)
    if t is bool or t is np.bool_:
        return Scalar(BOOL, 0, 0.0, bool(v))
    if isinstance(v, np.generic):
        kind = v.dtype.kind
        if kind in "iu":
            return _int(int(v), name)
        if kind == "f":
            return Scalar(FLOAT, 0, float(v), False)
        return None
    if isinstance(v, bool):
        return Scalar(BOOL, 0, 0.0, v)
    if isinstance(v, int):  # IntEnum and other int subclasses
        return _int(int(v), name)
    if isinstance(v, float):
        return Scalar(FLOAT, 0, float(v), False)
    return None


def to_c(v, name: str) -> Scalar:
    """The Scalar of an op's scalar argument; TypeError for anything but a number."""
    s = operand(v, name)
    if s is None:
        raise TypeError(f"`{name}` must be an int, float or bool (or a NumPy scalar), not "
                        f"{type(v).__name__}")
    return s


def from_c(s: Scalar):
    """The Python value of a Scalar the library wrote: int, float or bool."""
    if s.kind == INT:
        return s.i
    if s.kind == BOOL:
        return bool(s.b)
    return s.f
