"""Dispose scopes (TorchSharp's, see docs/dispose-scopes.md) and their statistics.

    with tensorref.scope() as s:
        h = (x @ w).relu()          # temporaries belong to s
        y = h.sum().move_to_outer_scope()
    # every handle s owned is released here; y survives

A scope is per thread: it captures the handles created on the thread that opened it while it is
the innermost open scope there. Dispose it with ``with`` (on every exit path) or ``dispose()``;
a Scope object that is dropped without either leaves its scope open (as an undisposed
DisposeScope does in TorchSharp). A scope holds only what the program can still reach: a Tensor
object whose last reference goes away releases its handle, which leaves the scope then (see
``tensorref._tensor``), so a loop inside one scope keeps a constant number of live handles.
"""
from __future__ import annotations

from ctypes import byref, c_bool, c_size_t, c_uint64
from typing import NamedTuple

from ._abi_generated import ScopeHandle, Stats as _CStats
from ._lib import fail, lib
from .errors import ScopeError
from ._ownership import flush_releases
from ._tensor import Tensor

__all__ = ["Scope", "Stats", "scope", "current_scope", "stats", "reset_stats"]



def _tensors(items) -> list:
    """Flattens `items` (tensors, or one iterable of tensors) into a list of Tensors."""
    if len(items) == 1 and not isinstance(items[0], Tensor):
        items = tuple(items[0])
    for t in items:
        if not isinstance(t, Tensor):
            raise TypeError(f"expected tensorref.Tensor, got {type(t).__name__}")
    return list(items)


def _one_or_all(items: list):
    return items[0] if len(items) == 1 else tuple(items)


class Scope(ScopeHandle):
    """A dispose scope: it owns the handles created on its thread while it is current there."""
    __slots__ = ()

    @classmethod
    def _view(cls, handle: int) -> Scope:
        return cls(handle)

    @property
    def handle(self) -> int:
        return self.value

    def __eq__(self, other) -> bool:
        return isinstance(other, ScopeHandle) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"tensorref.Scope(handle={self.value:#x})"

    def __enter__(self) -> Scope:
        if self.disposed:
            raise ScopeError(300, "TR_ERR_SCOPE_DISPOSED", "Scope.__enter__",
                             "this scope was disposed already; open a new one with tr.scope()")
        return self

    def __exit__(self, *exc) -> None:
        self.dispose()

    def dispose(self) -> None:
        """Releases every handle the scope owns and closes it (also out of order: scopes opened
        inside it then link to its outer scope). A second dispose is a no-op."""
        st = lib.tr_scope_dispose(self)
        flush_releases()
        if st:
            fail(st, "tr_scope_dispose")

    close = dispose

    @property
    def disposed(self) -> bool:
        n = c_size_t()
        st = lib.tr_scope_len(self, byref(n))
        if st == 300:  # TR_ERR_SCOPE_DISPOSED
            return True
        if st:
            fail(st, "tr_scope_len")
        return False

    def dispose_everything(self) -> None:
        """Releases every handle the scope owns; the scope stays open and keeps capturing."""
        st = lib.tr_scope_dispose_everything(self)
        if st:
            fail(st, "tr_scope_dispose_everything")

    def dispose_everything_but(self, *keep) -> None:
        """Releases every owned handle except those in `keep` (tensors, or one iterable of
        them), which stay owned and die with the scope. Tensors the scope does not own are left
        alone."""
        keep = _tensors(keep)
        arr = (c_uint64 * len(keep))(*[t.value for t in keep])
        st = lib.tr_scope_dispose_everything_but(self, arr, len(keep))
        if st:
            fail(st, "tr_scope_dispose_everything_but")

    def attach(self, *tensors):
        """The scope takes ownership of the tensors (from another scope or from the caller).
        Returns the tensor, or a tuple of them."""
        ts = _tensors(tensors)
        for t in ts:
            st = lib.tr_scope_attach(self, t)
            if st:
                fail(st, "tr_scope_attach")
        return _one_or_all(ts)

    def detach(self, *tensors):
        """Tensors this scope owns leave it and belong to their Python objects; others are left
        as they are. Returns the tensor, or a tuple of them."""
        ts = _tensors(tensors)
        for t in ts:
            st = lib.tr_scope_detach(self, t)
            if st:
                fail(st, "tr_scope_detach")
        return _one_or_all(ts)

    def move_to_outer(self, *tensors):
        """Tensors this scope owns move to its outer scope (to their Python objects if there is
        none). Returns the tensor, or a tuple of them."""
        ts = _tensors(tensors)
        for t in ts:
            st = lib.tr_scope_move_to_outer(self, t)
            if st:
                fail(st, "tr_scope_move_to_outer")
        return _one_or_all(ts)

    def contains(self, t: Tensor) -> bool:
        """Whether the scope owns the handle (by identity; false for a released one)."""
        out = c_bool()
        st = lib.tr_scope_contains(self, t, byref(out))
        if st:
            fail(st, "tr_scope_contains")
        return out.value

    __contains__ = contains

    def __len__(self) -> int:
        n = c_size_t()
        st = lib.tr_scope_len(self, byref(n))
        if st:
            fail(st, "tr_scope_len")
        return n.value


@property
def _scope_of(self: Tensor) -> Scope | None:
    """The Scope that owns this handle, or None when the caller does."""
    out = ScopeHandle()
    st = lib.tr_tensor_scope(self, out)
    if st:
        fail(st, "tr_tensor_scope")
    return Scope._view(out.value) if out.value else None


Tensor.scope = _scope_of


def scope() -> Scope:
    """Opens a scope on this thread and makes it current; use it with ``with``."""
    s = Scope()
    st = lib.tr_scope_new(s)
    if st:
        fail(st, "tr_scope_new")
    return s


def current_scope() -> Scope | None:
    """This thread's innermost open scope, or None."""
    s = Scope()
    st = lib.tr_scope_current(s)
    if st:
        fail(st, "tr_scope_current")
    return s if s.value else None


class Stats(NamedTuple):
    """Per-thread scope statistics, in the order of docs/dispose-scopes.md's tuples."""
    created_outside_scope: int
    disposed_outside_scope: int
    created_in_scope: int
    disposed_in_scope: int
    attached_to_scope: int
    detached_from_scope: int
    live: int


def stats() -> Stats:
    """This thread's counters (they only grow, until ``reset_stats``). Deferred releases are
    flushed first, and count on the thread that flushes them."""
    flush_releases()
    s = _CStats()
    st = lib.tr_scope_stats_get(byref(s))
    if st:
        fail(st, "tr_scope_stats_get")
    return Stats(*(getattr(s, f) for f in Stats._fields))


def reset_stats() -> None:
    """Zeroes this thread's counters (after flushing the deferred releases)."""
    flush_releases()
    st = lib.tr_scope_stats_reset()
    if st:
        fail(st, "tr_scope_stats_reset")
