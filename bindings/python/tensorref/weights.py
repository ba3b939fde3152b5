"""Weights from safetensors files, as tensors: ``tensorref.weights.load(path)`` (tr_weights_load:
the file is memory-mapped and each tensor copied once into its own tensor in host memory)."""
from __future__ import annotations

from ctypes import byref, c_size_t, create_string_buffer

from ._lib import c_path, fail, lib
from ._tensor import Tensor, new

__all__ = ["load"]

def load(path) -> dict[str, Tensor]:
    """Every tensor of the safetensors file at `path`, by name in file order. Like other new
    tensors they belong to the current scope, or to their objects when none is open. Raises
    FileError for a missing, unreadable or malformed file (a directory, or a tensor name with a
    NUL byte, included), ValueError for a path with a NUL byte."""
    p = c_path(path)
    count, names_len = c_size_t(), c_size_t()
    _load = lib.tr_weights_load
    st = _load(p, None, 0, None, 0, byref(count), byref(names_len))
    if st and st != 102:  # TR_ERR_BUFFER_TOO_SMALL is the expected answer to the sizing call
        fail(st, "tr_weights_load")
    handles = (Tensor * count.value)()
    names = create_string_buffer(names_len.value)
    st = _load(p, handles, count.value, names, names_len.value, byref(count), byref(names_len))
    if st:
        fail(st, "tr_weights_load")
    tensors = []
    for h in handles:
        t = new()
        t.value = h.value
        tensors.append(t)
    keys = names.raw[: names_len.value].split(b"\0")[:-1]
    if len(keys) != count.value:  # the library refuses names with a NUL: this would shift them
        raise RuntimeError(f"tr_weights_load gave {len(keys)} names for {count.value} tensors")
    return dict(zip((k.decode("utf-8") for k in keys), tensors))
