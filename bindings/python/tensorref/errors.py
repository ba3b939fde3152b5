"""The exceptions of tensorref: one class per status group of the C ABI, under TensorRefError.
The groups (their codes and meaning) come from the ABI manifest (``_abi_generated.STATUS_GROUPS``, generated
from tr_status's doc comment); each class here names one, and its docstring gets the group's codes.

Every failing C call raises the class of its status group, carrying the status code, its name
and the library's own message (``tr_last_error``). Python-side misuse (a wrong argument type)
raises the ordinary TypeError / ValueError instead.
"""
from __future__ import annotations

from ._abi_generated import STATUS_GROUPS, status_group

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
    """A NULL pointer, a bad argument value, a buffer too small."""


class HandleError(TensorRefError):
    """A stale (released, disposed) or invalid handle."""


class ScopeError(TensorRefError):
    """The scope was already disposed."""


class ShapeDtypeError(TensorRefError, ValueError):
    """The tensors' shapes or dtypes do not fit the operation."""


class DeviceError(TensorRefError):
    """A device is unavailable, tensors are on different devices, out of memory
    (host or device), or the residency budget is too small."""


class TorchError(TensorRefError, RuntimeError):
    """Any other error reported by libtorch (a RuntimeError, as PyTorch raises
    libtorch's errors: an in-place write to a tensor saved for backward, say)."""


class FileError(TensorRefError):
    """A file is missing or unreadable, or its contents are malformed."""


class PanicError(TensorRefError):
    """A bug in libtensorref, caught at the C boundary."""


class AbiMismatchError(ImportError):
    """The shared library was built for another ABI version than this package was generated for."""


# The class of each status group of the manifest.
GROUP_CLASSES = {"argument": ArgumentError, "handle": HandleError, "scope": ScopeError,
                 "shape_dtype": ShapeDtypeError, "device": DeviceError, "torch": TorchError,
                 "file": FileError, "panic": PanicError}
for _name, (_first, _last, _) in STATUS_GROUPS.items():
    if _name in GROUP_CLASSES:
        GROUP_CLASSES[_name].__doc__ = f"Status {_first}-{_last}: {GROUP_CLASSES[_name].__doc__}"
del _name, _first, _last


def error_class(status: int) -> type[TensorRefError]:
    """The exception class for a status code (TensorRefError itself for an unknown group)."""
    return GROUP_CLASSES.get(status_group(status), TensorRefError)
