"""Who releases a tensor handle, and when: the ownership helpers every module that makes or drops
tensors uses (the Tensor class, scopes, the residency manager, interop), below all of them.

A garbage-collected Tensor does not release its handle itself: its finalizer appends the handle
to `_pending`, and the handles are released together, with one tr_tensor_release_many call, once
`_limit[0]` of them have gathered, and whenever `flush_releases` runs: on leaving a scope, before
live_handles / live_bytes / stats and every residency call, and at interpreter exit. `close()`
(and `with tensor:`) still releases at once.

When the optional accelerator is in use, its compiled Tensor.__del__ shares `_pending`, `_limit`
and `in_callback` (tensorref._accel passes them to _speedups.c).
"""
from __future__ import annotations

import atexit
from ctypes import c_uint64

from ._lib import lib

_release = lib.tr_tensor_release
_release_many = lib.tr_tensor_release_many

_pending: list[int] = []
RELEASE_BATCH = 64
_limit = [RELEASE_BATCH]   # a list so that finalizers can hold it through shutdown

# One entry per residency event callback running now (on any thread; residency's trampoline
# pushes and pops, atomic under the GIL). The callback runs while the library holds the
# manager's lock, and the garbage collector may run finalizers inside it: a finalizer then only
# appends to `_pending`, never calls the library, and the next finalizer or flush outside a
# callback releases the batch.
in_callback: list[int] = []


def flush_releases(_pending=_pending, _release_many=_release_many, _release=_release,
                   _u64=c_uint64) -> int:
    """Releases every handle whose owning Tensor object was garbage collected and is waiting in
    the deferred-release buffer, with a tr_tensor_release_many call (tr_tensor_release for a
    single one); returns how many. Safe from any thread and from a finalizer that runs during a
    flush (each handle is taken from the buffer exactly once). Handles that join the buffer
    meanwhile (the array's allocation may run the collector, whose finalizers append, and `pop`
    takes the newest first) are released too, in up to four rounds (so that a thread that keeps
    dropping tensors cannot hold this one here)."""
    total = 0
    for _ in range(4):
        if not _pending:
            break
        n = len(_pending)
        if n == 1:
            try:
                _release(_pending.pop())
            except IndexError:  # another thread took it
                break
            total += 1
            continue
        arr = (_u64 * n)()
        pop = _pending.pop
        i = 0
        try:
            while i < n:
                arr[i] = pop()
                i += 1
        except IndexError:  # another thread, or a finalizer's flush, took the rest
            pass
        if i:
            _release_many(arr, i)  # a stale handle (released elsewhere first) changes nothing
        total += i
    return total


def set_release_batch(n: int) -> int:
    """How many collected objects' handles gather before one batched release (1: each is
    released as its object is collected, as without batching). Returns the previous value."""
    if n < 1:
        raise ValueError("the release batch is at least 1")
    prev = _limit[0]
    flush_releases()
    _limit[0] = int(n)
    return prev


def _at_exit() -> None:
    # Interpreter exit: release what is waiting, and release each later one at once.
    _limit[0] = 1
    flush_releases()


atexit.register(_at_exit)
