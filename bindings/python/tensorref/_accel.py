"""The optional compiled hot path: ``tensorref._speedups``, a small C extension that
``pip install`` builds from ``_speedups.c`` (no library is linked in), takes over Tensor's
arithmetic operators (those with a CPython number slot, generated from the operator attributes of
src/ops/ops.def: ``+ - * / % // @ **``, their reflected and in-place forms, unary ``-`` and
``abs``; ``_ops_generated._ACCELERATED``) and its finalizer (the deferred release), and the generated ops
that mean the same on two Tensors (``add``, ``add_``, ``remainder``... ``_ops_generated._ACCELERATED_NAMED``,
as methods and as module functions).
``tensorref.accelerated`` says whether it is in use.

It binds at import to the library ctypes already loaded, through the addresses of its C
functions, and shares this package's state (the deferred-release buffer and batch size, the
list that marks running event callbacks, ``_lib.fail``): ownership, deferred releases, errors
and results are those of the ctypes path. Every case it does not handle (another operand type,
a NumPy number, an int beyond int64) goes to the pure-Python method it replaced, kept in
``PURE``.

The package stays pure ctypes, silently, when the extension was not built or does not import,
when it cannot bind to the loaded library (a function the library lacks), or when the
environment sets ``TENSORREF_PURE_PYTHON`` (to anything but "" or "0"); ``reason`` says why.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys

from . import _lib, _ops_generated, _ownership
from ._tensor import Tensor

# The methods it replaces, as the generated _ops_generated.py and _tensor.py define them.
ROUTED = _ops_generated._ACCELERATED + ("__del__",)
PURE = {name: Tensor.__dict__[name] for name in ROUTED}

# Generated ops that are an operator on two exact Tensors (name -> that operator's method). Their
# routed form calls the compiled operator then, and the generated function for anything else
# (whose errors, a TypeError for a float say, stay those of the generated op).
NAMED = dict(_ops_generated._ACCELERATED_NAMED)
PURE_NAMED = {name: getattr(_ops_generated, name) for name in NAMED}
FAST_NAMED: dict = {}

# The compiled methods (name -> method descriptor), or None; whether they are on Tensor now.
_speedups = None
FAST: dict | None = None
active = False
reason = ""


def _address(name: str) -> int:
    """The address of the loaded library's C function `name` (AttributeError if it lacks it)."""
    fn = getattr(_lib.lib, name)
    if name in _lib.missing or not isinstance(fn, ctypes._CFuncPtr):
        raise AttributeError(f"{_lib.LIB_PATH} does not export {name}")
    return ctypes.cast(fn, ctypes.c_void_p).value


def use(on: bool) -> bool:
    """Puts the compiled (True) or the pure-Python (False) methods on Tensor; returns whether the
    compiled ones were there. For the tests and the benchmark: both keep the same state, so
    objects made under one are handled right under the other."""
    global active
    if on and FAST is None:
        raise RuntimeError(f"tensorref._speedups is not available: {reason}")
    prev = active
    for name, method in (FAST if on else PURE).items():
        setattr(Tensor, name, method)
    package = sys.modules[__package__]
    for name, function in (FAST_NAMED if on else PURE_NAMED).items():
        for holder in (Tensor, _ops_generated, package):  # Tensor.add is tensorref.add, as generated
            setattr(holder, name, function)
    if on:
        _speedups.bind_slots()  # the type's operator and finalizer slots straight to them
    active = bool(on)
    return prev


def _load() -> None:
    global _speedups, FAST, reason
    if os.environ.get("TENSORREF_PURE_PYTHON", "") not in ("", "0"):
        reason = "TENSORREF_PURE_PYTHON is set"
        return
    try:
        ext = importlib.import_module(__package__ + "._speedups")
    except ImportError as e:
        if getattr(e, "name", None) == __package__ + "._speedups":
            reason = ("the extension was not built (pip install with a C compiler; for a source "
                      "tree, python3 setup.py build_ext --inplace in bindings/python)")
        else:
            reason = f"the extension does not import: {e}"
        return
    try:
        FAST = ext.install(Tensor, _address, dict(PURE), _ownership._pending, _ownership._limit,
                           _ownership.in_callback, _lib.fail)
    except Exception as e:  # noqa: BLE001  (any failure to bind means: stay pure ctypes)
        reason = f"the extension cannot bind to {_lib.LIB_PATH}: {e}"
        return
    _speedups = ext
    FAST_NAMED.update({name: _named(PURE_NAMED[name], FAST[op]) for name, op in NAMED.items()})
    use(True)


def _named(pure, fast):
    def named(a, b, _T=Tensor):
        if type(a) is _T and type(b) is _T:
            return fast(a, b)
        return pure(a, b)
    return functools.update_wrapper(named, pure)


_load()
