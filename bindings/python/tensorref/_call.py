"""What the generated op wrappers (_ops_generated.py) call around the C functions: tensor and
integer sequences as C arrays, the exception a Python hook raised inside the library, and the
message of a call with arguments of the wrong types."""
from __future__ import annotations

from ctypes import c_int64, c_uint64
from operator import index

from ._tensor import Tensor


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
