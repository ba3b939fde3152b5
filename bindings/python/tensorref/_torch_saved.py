"""Saved tensors where PyTorch's autograd engine runs backward (a process that imported torch).

libtorch asks the default autograd engine for hooks each time an op saves a tensor for backward.
Without torch, that is the library's own engine, whose hooks hand every saved tensor to the
residency manager. Importing torch makes PyTorch's Python engine the default; it answers from the
per-thread stack `torch.autograd.graph.saved_tensors_hooks` pushes. So while a manager that moves
data is configured, `follow` makes hooks that do the same work through the C ABI (tr_saved_pack,
tr_saved_unpack, tr_saved_free), on the thread that configured it, and hands them to the library
(tr_saved_hooks_adopt), which has them on the stack only while its own calls run: what the
program's torch code saves (the `tensorref` device's tensors included) is saved as without hooks.
"""
from __future__ import annotations

import sys
import threading
from ctypes import byref, c_void_p

from ._lib import fail, lib
from ._ownership import in_callback
from .interop import torch_taking

_local = threading.local()  # .hooks: the saved_tensors_hooks this thread entered
# Tokens whose owner was collected while an event callback held the manager's lock.
_unfreed: list[int] = []


class _Saved:
    """The manager's token for one saved tensor, freed with this object."""
    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __del__(self, _free=lib.tr_saved_free, _unfreed=_unfreed, in_callback=in_callback):
        if in_callback:  # freeing would take the manager's lock: later
            _unfreed.append(self.ptr)
            return
        _free(self.ptr)
        while _unfreed:
            try:
                _free(_unfreed.pop())
            except IndexError:  # another thread took it
                break


def _pack(t):
    if t.device.type == "tensorref":
        # The manager's already (tensorref.torch_device): kept with its version, as autograd
        # leaves the check for in-place writes to the hooks.
        return t, t._version
    out = c_void_p()
    st = lib.tr_saved_pack(c_void_p(t._cdata), byref(out))
    if st:
        fail(st, "tr_saved_pack")
    return _Saved(out.value)


def _unpack(saved):
    if isinstance(saved, tuple):
        t, version = saved
        if t._version != version:
            raise RuntimeError("one of the variables needed for gradient computation has been modified by an "
                               f"inplace operation: [{t.dtype} {list(t.shape)}] is at version {t._version}; "
                               f"expected version {version} instead")
        return t
    out = c_void_p()
    st = lib.tr_saved_unpack(saved.ptr, byref(out))
    if st:
        fail(st, "tr_saved_unpack")
    return torch_taking(out.value)


def follow(moves: bool) -> None:
    """Hands the hooks to the library's calls on this thread when a manager moves data (`moves`)
    and PyTorch's engine runs backward; takes back the ones this thread handed over otherwise.
    They are pushed by `saved_tensors_hooks` and popped by it, so Python owns them throughout."""
    hooks = getattr(_local, "hooks", None)
    wanted = moves and "torch" in sys.modules and not lib.tr_residency_saved_tensors_managed()
    if wanted and hooks is None:
        import torch.autograd.graph

        hooks = torch.autograd.graph.saved_tensors_hooks(_pack, _unpack)
        hooks.__enter__()
        st = lib.tr_saved_hooks_adopt()
        if st:
            hooks.__exit__(None, None, None)
            fail(st, "tr_saved_hooks_adopt")
        _local.hooks = hooks
    elif not wanted and hooks is not None:
        _local.hooks = None
        st = lib.tr_saved_hooks_return()
        if st:
            fail(st, "tr_saved_hooks_return")
        hooks.__exit__(None, None, None)


def pushed() -> bool:
    """Whether what the library's ops save on this thread goes to the manager through these hooks."""
    return getattr(_local, "hooks", None) is not None
