"""The exceptions of tensorref: one class per status group of the C ABI, under TensorRefError.

Every failing C call raises the class of its status group, carrying the status code, its name
and the library's own message (``tr_last_error``). Python-side misuse (a wrong argument type)
raises the ordinary TypeError / ValueError instead.
"""
from __future__ import annotations

__all__ = [
    "TensorRefError", "ArgumentError", "HandleError", "ScopeError", "ShapeDtypeError",
    "DeviceError", "TorchError", "FileError", "PanicError", "AbiMismatchError", "error_class",
]


class TensorRefError(Exception):
    """A libtensorref call failed. ``status`` is the tr_status code, ``status_name`` its TR_*
    name, ``function`` the C function and ``message`` the library's text for this failure."""

    def __init__(self, status: int, status_name: str, function: str, message: str):
        self.status = status
        self.status_name = status_name
        self.function = function
        self.message = message
        super().__init__(f"{function}: {message} [{status_name}]")


class ArgumentError(TensorRefError, ValueError):
    """Status 100-199: a NULL pointer, a bad argument value, a buffer too small."""


class HandleError(TensorRefError):
    """Status 200-299: a stale (released, disposed) or invalid handle."""


class ScopeError(TensorRefError):
    """Status 300-399: the scope was already disposed."""


class ShapeDtypeError(TensorRefError, ValueError):
    """Status 400-499: the tensors' shapes or dtypes do not fit the operation."""


class DeviceError(TensorRefError):
    """Status 500-599: a device is unavailable, tensors are on different devices, out of memory
    (host or device), or the residency budget is too small."""


class TorchError(TensorRefError, RuntimeError):
    """Status 600-699: any other error reported by libtorch (a RuntimeError, as PyTorch raises
    libtorch's errors: an in-place write to a tensor saved for backward, say)."""


class FileError(TensorRefError):
    """Status 700-799: a file is missing or unreadable, or its contents are malformed."""


class PanicError(TensorRefError):
    """Status 900-999: a bug in libtensorref, caught at the C boundary."""


class AbiMismatchError(ImportError):
    """The shared library was built for another ABI version than this package was generated for."""


_GROUPS = {1: ArgumentError, 2: HandleError, 3: ScopeError, 4: ShapeDtypeError,
           5: DeviceError, 6: TorchError, 7: FileError, 9: PanicError}


def error_class(status: int) -> type[TensorRefError]:
    """The exception class for a status code (TensorRefError itself for an unknown group)."""
    return _GROUPS.get(status // 100, TensorRefError)
