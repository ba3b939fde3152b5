"""Zero-copy exchange with PyTorch (and any DLPack producer) in the same process.

PyTorch and libtensorref share one libtorch in the process, and DLPack hands a tensor's memory
across without copying: ``from_torch(t)`` and ``x.to_torch()`` share storage, so writes through
one are seen by the other. The memory lives until both sides have let go. ``dlpack_capsule``
is the producer side of the DLPack protocol (``Tensor.__dlpack__``): ``torch.from_dlpack(x)``
and ``np.from_dlpack(x)`` share the memory the same way.
"""
from __future__ import annotations

import ctypes
from ctypes import byref, c_char_p, c_int, c_void_p, py_object

from . import dtypes
from ._lib import fail, lib
from ._tensor import Tensor, new

__all__ = ["from_dlpack", "from_torch", "to_torch", "dlpack_capsule"]

_api = ctypes.pythonapi
_get_pointer = _api.PyCapsule_GetPointer
_get_pointer.argtypes, _get_pointer.restype = (py_object, c_char_p), c_void_p
_set_name = _api.PyCapsule_SetName
_set_name.argtypes, _set_name.restype = (py_object, c_char_p), c_int
_is_valid = _api.PyCapsule_IsValid
_is_valid.argtypes, _is_valid.restype = (py_object, c_char_p), c_int
_new_capsule = _api.PyCapsule_New
_new_capsule.argtypes, _new_capsule.restype = (c_void_p, c_char_p, c_void_p), py_object

_DLTENSOR = b"dltensor"
_USED = b"used_dltensor"

# The same C functions taking the capsule as a raw pointer, for the capsule destructor (which
# runs while the capsule is being freed: it must not make a new reference to it).
_is_valid_raw = ctypes.PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer", _api))
_new_capsule_with = ctypes.PYFUNCTYPE(py_object, c_void_p, c_char_p, c_void_p)(("PyCapsule_New", _api))


class _DLManagedTensor(ctypes.Structure):
    """dlpack.h's DLManagedTensor; only ``deleter`` is read (to give back an unconsumed one)."""


_DLManagedTensor._fields_ = [
    ("data", c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
    ("ndim", ctypes.c_int32), ("dtype_code", ctypes.c_uint8), ("dtype_bits", ctypes.c_uint8),
    ("dtype_lanes", ctypes.c_uint16), ("shape", c_void_p), ("strides", c_void_p),
    ("byte_offset", ctypes.c_uint64), ("manager_ctx", c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))),
]


def _give_back(managed: int) -> None:
    """Runs the deleter of a DLManagedTensor nobody took."""
    m = ctypes.cast(managed, ctypes.POINTER(_DLManagedTensor))
    m.contents.deleter(m)


@ctypes.CFUNCTYPE(None, c_void_p)
def _capsule_destructor(capsule):
    # A consumer that took the tensor renamed the capsule "used_dltensor" and owns it now; a
    # capsule still named "dltensor" was never consumed, so its tensor is given back here.
    if _is_valid_raw(capsule, _DLTENSOR):
        _give_back(_get_pointer_raw(capsule, _DLTENSOR))


def dlpack_capsule(t: Tensor):
    """A "dltensor" capsule sharing the memory of `t` (DLPack's unversioned DLManagedTensor), as
    ``__dlpack__`` returns it: a consumer (``torch.from_dlpack``, ``np.from_dlpack``) takes it over;
    one that is dropped unconsumed gives its reference back."""
    managed = c_void_p()
    st = lib.tr_tensor_to_dlpack(t, byref(managed))
    if st:
        fail(st, "tr_tensor_to_dlpack", t)
    try:
        return _new_capsule_with(managed.value, _DLTENSOR, ctypes.cast(_capsule_destructor, c_void_p))
    except BaseException:
        _give_back(managed.value)
        raise


def from_dlpack(obj) -> Tensor:
    """A new tensor sharing the memory of `obj`: an object with ``__dlpack__`` (a torch.Tensor,
    a NumPy array, ...) or an unused "dltensor" capsule, which this consumes."""
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    if not _is_valid(capsule, _DLTENSOR):
        raise TypeError("from_dlpack needs an object with __dlpack__ or an unused 'dltensor' capsule")
    managed = _get_pointer(capsule, _DLTENSOR)
    # From here the library owns `managed` whatever happens: mark the capsule used so its
    # destructor does not run the deleter a second time.
    _set_name(capsule, _USED)
    out = new()
    st = lib.tr_tensor_from_dlpack(managed, out)
    if st:
        fail(st, "tr_tensor_from_dlpack")
    return out


def from_torch(t) -> Tensor:
    """A new tensor sharing the storage of the torch.Tensor `t` (no copy). Like every DLPack
    export, PyTorch refuses a tensor that requires grad (BufferError): pass ``t.detach()``.
    A dtype libtensorref has no type for (uint16, complex ...) is a TypeError naming it.
    A tensor on the `tensorref` device is one storage of the residency manager with the new
    tensor (tr_torch_device_handle): each sees the other's writes."""
    if t.device.type == "tensorref":
        out = new()
        st = lib.tr_torch_device_handle(c_void_p(t._cdata), out)
        if st:
            fail(st, "tr_torch_device_handle")
        return out
    try:
        dtypes.dtype(t.dtype)
    except TypeError:
        raise TypeError(f"from_torch: {t.dtype} has no libtensorref dtype; convert it first, e.g. "
                        f"t.to(torch.int32) or t.to(torch.float32)") from None
    return from_dlpack(t)


def to_torch(t: Tensor):
    """A torch.Tensor sharing the storage of `t` (no copy; the autograd graph is not carried)."""
    managed = c_void_p()
    st = lib.tr_tensor_to_dlpack(t, byref(managed))
    if st:
        fail(st, "tr_tensor_to_dlpack")
    return torch_taking(managed.value)


def to_torch_device(t: Tensor):
    """A torch.Tensor on the `tensorref` device over the storage of `t` (no copy): one storage of
    the residency manager, so torch ops on it run under the manager and each sees the other's
    writes (tr_torch_device_tensor)."""
    import torch

    impl = c_void_p()
    st = lib.tr_torch_device_tensor(t, byref(impl))
    if st:
        fail(st, "tr_torch_device_tensor")
    try:
        # A capsule of the pointer (no destructor): torch takes a reference of its own.
        return torch._C._wrap_tensor_impl(_new_capsule(impl.value, None, None))
    finally:
        lib.tr_torch_device_tensor_release(impl)


def torch_taking(managed: int):
    """A torch.Tensor taking over the DLManagedTensor* `managed` (given back if PyTorch refuses)."""
    import torch.utils.dlpack

    capsule = _new_capsule(managed, _DLTENSOR, None)
    try:
        return torch.utils.dlpack.from_dlpack(capsule)
    finally:
        if _is_valid(capsule, _DLTENSOR):  # PyTorch did not take it: give it back
            _give_back(managed)


def _to_torch(self: Tensor):
    """A torch.Tensor sharing this tensor's memory (DLPack, no copy)."""
    return to_torch(self)


_to_torch.__name__ = "to_torch"
Tensor.to_torch = _to_torch
Tensor.to_torch_device = to_torch_device
