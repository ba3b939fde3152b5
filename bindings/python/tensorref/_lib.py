"""Loads libtensorref, checks its ABI version, sets the signature of every C function (from
the generated ``_abi_generated.signatures``), and owns the one checked-call error path (``fail``).

The library is found as follows (the first that exists wins):

1. ``TENSORREF_LIB``: the path of ``libtensorref.so`` (or of the directory holding it);
2. the library inside this package (a wheel, ``make wheel``), which finds libtorch as the torch
   package of the same environment has loaded it: torch is imported first;
3. the repository this package sits in, or the one around the current directory:
   ``target/release/libtensorref.so`` or ``target/debug/libtensorref.so``, the newer of the two;
4. the system loader's search path (``LD_LIBRARY_PATH``, ldconfig).

Handles are passed as ``c_uint64``: ``tr_tensor`` and ``tr_scope`` are C structs of one
``uint64_t`` passed by value, which the x86-64 SysV and AArch64 calling conventions pass exactly
like a bare ``uint64_t``. Tensor and Scope objects *are* c_uint64 instances (subclasses), so a
call passes them without any conversion and an op writes its result straight into the new
Tensor object. Tensor parameters are declared with the Tensor class itself: ctypes accepts an
instance of exactly the declared class fastest.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import byref, c_size_t, c_uint32
from pathlib import Path

from ._abi_generated import STATUS_CODES, TR_ABI_VERSION, signatures, status_group
from .errors import AbiMismatchError, error_class

LIBNAME = "libtensorref.so"
STATUS_NAMES = {code: name for name, code in STATUS_CODES.items()}

# Declared functions the loaded library does not export (an older build); the test suite
# requires this to be empty.
missing: list[str] = []


def _repo_roots():
    """Checkouts of libtensorref around this package or the current directory."""
    seen = set()
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for d in (start, *start.parents):
            if d not in seen and (d / "Cargo.toml").is_file() and (d / "include/tensorref.h").is_file():
                seen.add(d)
                yield d


def find_library() -> str:
    """The path (or bare name) of the shared library to load; see the module docstring."""
    env = os.environ.get("TENSORREF_LIB")
    if env:
        path = Path(env)
        if path.is_dir():
            path = path / LIBNAME
        if not path.is_file():
            raise ImportError(f"TENSORREF_LIB={env!r}: no such file ({path})")
        return str(path)
    bundled = Path(__file__).resolve().parent / LIBNAME
    if bundled.is_file():
        import torch  # noqa: F401  (loads the libtorch the bundled library links by name)
        return str(bundled)
    for root in _repo_roots():
        built = [p for p in (root / "target/release" / LIBNAME, root / "target/debug" / LIBNAME) if p.is_file()]
        if built:
            return str(max(built, key=lambda p: p.stat().st_mtime))
    return LIBNAME


def check_abi(lib: ctypes.CDLL, path: str, expected: int = TR_ABI_VERSION) -> int:
    """Compares the library's ``tr_abi_version()`` with the version this package was generated
    for; raises AbiMismatchError with what to do when they differ. Returns the version."""
    try:
        fn = lib.tr_abi_version
    except AttributeError:
        raise AbiMismatchError(f"{path} is not libtensorref: it exports no tr_abi_version()") from None
    fn.argtypes, fn.restype = (), c_uint32
    found = fn()
    if found != expected:
        raise AbiMismatchError(
            f"{path} implements C ABI version {found}, but this tensorref package was generated "
            f"for ABI version {expected}. Build the library and install the binding from the same "
            f"checkout (cargo build; pip install bindings/python), or point TENSORREF_LIB at a "
            f"matching library.")
    return found


def declare(lib: ctypes.CDLL, name: str, restype, argtypes):
    """The library's function `name` with its signature set; for a function the library does not
    export (a build older than this binding), a stand-in that raises with what to do, so that
    the rest of the package still loads. Such names are listed in `missing`."""
    try:
        fn = getattr(lib, name)
    except AttributeError:
        missing.append(name)

        def fn(*args, **kwargs):
            raise NotImplementedError(f"{LIB_PATH} does not export {name}: it is older than this "
                                      f"binding; rebuild it (cargo build)")
        return fn
    fn.restype, fn.argtypes = restype, argtypes
    return fn


def load(path: str | None = None) -> ctypes.CDLL:
    """Loads the library and checks its ABI version (`declare_all` then sets the signatures)."""
    path = path or find_library()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"cannot load libtensorref ({path}): {e}. Build it with `cargo build` in the "
            f"repository, or set TENSORREF_LIB to the path of libtensorref.so.") from None
    check_abi(lib, path)
    return lib


# tensorref.Tensor, once `declare_all` has been given it.
Tensor = None


def declare_all(tensor_class) -> None:
    """Sets the signature of every C function, with `tensor_class` as tr_tensor."""
    global Tensor
    Tensor = tensor_class
    for name, (restype, argtypes) in signatures(tensor_class).items():
        setattr(lib, name, declare(lib, name, restype, argtypes))


LIB_PATH = find_library()
lib = load(LIB_PATH)

_last_error = lib.tr_last_error
_status_str = lib.tr_status_str


def last_error() -> str:
    """The calling thread's last error message from the library."""
    n = c_size_t()
    _last_error(None, 0, byref(n))
    buf = ctypes.create_string_buffer(n.value + 1)
    if _last_error(buf, n.value + 1, byref(n)):
        return ""
    return buf.value.decode("utf-8", "replace")


def status_str(status: int) -> str:
    """The library's static text for a status code."""
    return _status_str(status).decode()


def fail(status: int, function: str, *tensors):
    """The one error path of every checked call: raises the class of the status group with the
    library's message for this failure. `tensors` are the call's tensor arguments: ctypes lets a
    bare int through as a handle, so a handle error on a non-Tensor argument is a TypeError."""
    if status_group(status) == "handle":
        wrong = [type(t).__name__ for t in tensors if t is not None and not isinstance(t, Tensor)]
        if wrong:
            raise TypeError(f"{function}: expected tensorref.Tensor arguments, got {', '.join(wrong)}")
    name = STATUS_NAMES.get(status, f"status {status}")
    raise error_class(status)(status, name, function, last_error() or status_str(status))


def c_path(path) -> bytes:
    """A path (str, bytes, os.PathLike) as the bytes of a C string. A NUL inside would end the C
    string there (weights.load("a\\0b") would open "a"): ValueError, as open() raises."""
    b = os.fsencode(path)
    if b"\0" in b:
        raise ValueError(f"the path {path!r} contains a NUL byte, which a C string cannot carry")
    return b


def check(status: int, function: str) -> None:
    """Raises for a non-zero status (for the calls that are not on a hot path)."""
    if status:
        fail(status, function)
