"""What the generated op wrappers (_ops_generated.py) call around the C functions: tensor and
number sequences as C arrays, optional values as a pointer or NULL, strings as UTF-8, the
results of an op that returns several tensors, the exception a Python hook raised inside the
library, and the message of a call with arguments of the wrong types."""
from __future__ import annotations

from ctypes import byref, c_double, c_int32, c_int64, c_uint64
from operator import index

from ._scalar import to_c as _scalar
from ._tensor import Tensor
from .dtypes import code_of

# The status of a list result that did not fit its buffer (TR_ERR_BUFFER_TOO_SMALL).
TOO_SMALL = 102


def hook_error(e):
    """A Python hook autograd called while the library ran (the manager's saved-tensor hooks under
    PyTorch's engine, or the program's own) raised: the call returns with that exception set, which
    Python reports as a SystemError caused by it. The hook's exception is the one to raise."""
    return e.__cause__ if isinstance(e.__cause__, Exception) else e


def handles(ts, name):
    """The Tensors of an iterable as a list, a C array of their handles, and its length. The
    caller keeps the list for the duration of the call: it is what keeps the Tensors (and their
    handles) alive, temporaries and a generator's items included."""
    if isinstance(ts, Tensor):
        raise TypeError(f"`{name}` must be a sequence of tensorref.Tensor, not one Tensor: write [t]")
    ts = list(ts)
    for t in ts:
        if not isinstance(t, Tensor):
            raise TypeError(f"`{name}` must be a sequence of tensorref.Tensor, not of {type(t).__name__}")
    return ts, (c_uint64 * len(ts))(*[t.value for t in ts]), len(ts)


def i64s(v, name):
    """A C array of int64 from an int or a sequence of ints (Python or NumPy integers, anything
    with __index__), and its length."""
    try:
        v = (index(v),) if not hasattr(v, "__iter__") else tuple(index(x) for x in v)
        return (c_int64 * len(v))(*v), len(v)
    except TypeError:
        raise TypeError(f"`{name}` must be an int or a sequence of ints, not {v!r}") from None


def bad_call(op, params, e):
    return TypeError(f"{op}({params}): {e}")


def opt_handles(ts, name):
    """Like `handles`, for a list whose elements may be None (the handle 0)."""
    if isinstance(ts, Tensor):
        raise TypeError(f"`{name}` must be a sequence of tensorref.Tensor or None, not one Tensor: write [t]")
    ts = list(ts)
    for t in ts:
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"`{name}` must be a sequence of tensorref.Tensor or None, not of {type(t).__name__}")
    return ts, (c_uint64 * len(ts))(*[0 if t is None else t.value for t in ts]), len(ts)


def f64s(v, name):
    """A C array of doubles from a number or a sequence of numbers, and its length."""
    try:
        v = (float(v),) if not hasattr(v, "__iter__") else tuple(float(x) for x in v)
        return (c_double * len(v))(*v), len(v)
    except TypeError:
        raise TypeError(f"`{name}` must be a float or a sequence of floats, not {v!r}") from None


def opt_i64s(v, name):
    """`i64s`, or NULL and 0 for None."""
    return (None, 0) if v is None else i64s(v, name)


def opt_f64s(v, name):
    """`f64s`, or NULL and 0 for None."""
    return (None, 0) if v is None else f64s(v, name)


def opt(v, ctype):
    """An optional number or bool as the C function takes it: a pointer to it, or NULL for None."""
    return None if v is None else byref(ctype(v))


def opt_dtype(v):
    return None if v is None else byref(c_int32(code_of(v)))


def opt_scalar(v, name):
    return None if v is None else byref(_scalar(v, name))


def c_str(v, name):
    """A str as NUL-terminated UTF-8 (a NUL inside it would end the C string there)."""
    if not isinstance(v, str):
        raise TypeError(f"`{name}` must be a str, not {type(v).__name__}")
    if "\0" in v:
        raise ValueError(f"`{name}` contains a NUL character, which a C string cannot carry")
    return v.encode()


def adopt_all(handles, n):
    """Tensors owning the first `n` handles a C function wrote into an array of Tensor views; None
    for the handle 0 (an output the op did not make)."""
    out = []
    for h in handles[:n]:
        t = None
        if h.value:
            t = Tensor(h.value)
            t._own = True
        out.append(t)
    return out
