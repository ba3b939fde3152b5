"""Element types: one DType object per TR_DTYPE_* code of the C ABI (c10's ScalarType numbers),
and the conversions from the spellings users bring (NumPy and PyTorch dtypes, names, codes)."""
from __future__ import annotations

import numpy as np

from ._abi_generated import DTYPE_CODES

__all__ = ["DType", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
           "bool_", "bfloat16", "dtype", "ALL"]


class DType:
    """An element type of libtensorref. ``code`` is its tr_dtype; ``numpy`` the NumPy dtype used
    for host copies (None for bfloat16, which NumPy lacks); ``itemsize`` its bytes."""
    __slots__ = ("name", "code", "itemsize", "numpy")

    def __init__(self, name: str, code: int, itemsize: int, numpy_dtype):
        self.name, self.code, self.itemsize = name, code, itemsize
        self.numpy = None if numpy_dtype is None else np.dtype(numpy_dtype)

    @property
    def is_floating_point(self) -> bool:
        return self.name.startswith(("float", "bfloat"))

    def __repr__(self) -> str:
        return f"tensorref.{self.name}"

    def __reduce__(self):
        return (dtype, (self.name,))


#                     C name   Python name  size  NumPy
_TABLE = [("U8", "uint8", 1, np.uint8), ("I8", "int8", 1, np.int8), ("I16", "int16", 2, np.int16),
          ("I32", "int32", 4, np.int32), ("I64", "int64", 8, np.int64),
          ("F16", "float16", 2, np.float16), ("F32", "float32", 4, np.float32),
          ("F64", "float64", 8, np.float64), ("BOOL", "bool_", 1, np.bool_), ("BF16", "bfloat16", 2, None)]
if {c for c, *_ in _TABLE} != set(DTYPE_CODES):
    raise ImportError(f"tensorref.dtypes knows {[c for c, *_ in _TABLE]}, the C ABI has {sorted(DTYPE_CODES)}")

ALL = tuple(DType(py, DTYPE_CODES[c], size, npd) for c, py, size, npd in _TABLE)
uint8, int8, int16, int32, int64, float16, float32, float64, bool_, bfloat16 = ALL

_BY_CODE = {d.code: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL} | {"bool": bool_, "float": float32, "double": float64,
                                         "half": float16, "long": int64, "int": int32}
_BY_NUMPY = {d.numpy: d for d in ALL if d.numpy is not None}


def from_code(code: int) -> DType:
    """The DType of a tr_dtype code."""
    return _BY_CODE[code]


def dtype(spec) -> DType:
    """A DType from a DType, a name ("float32"), a NumPy dtype or a torch dtype."""
    if type(spec) is DType:
        return spec
    if isinstance(spec, str):
        key = spec.removeprefix("torch.")
        if key in _BY_NAME:
            return _BY_NAME[key]
    elif type(spec).__module__ == "torch" and type(spec).__name__ == "dtype":
        return dtype(str(spec))
    else:
        try:
            found = _BY_NUMPY.get(np.dtype(spec))
        except TypeError:
            found = None
        if found is not None:
            return found
    raise TypeError(f"{spec!r} is not a libtensorref dtype; the dtypes are: "
                    + ", ".join(d.name for d in ALL))


def code_of(spec) -> int:
    """The tr_dtype code of anything ``dtype`` accepts (used by the generated wrappers)."""
    if type(spec) is DType:
        return spec.code
    return dtype(spec).code
