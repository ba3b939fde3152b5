"""The residency manager (docs/residency.md) from Python, as ``tensorref.residency``: where
tensors' bytes live under a hard device budget, with the policies Resident, Genoa and Flow.

    with tr.residency.session(policy="flow", budget_bytes=64 << 20):  # simulated device by default
        for batch in data:
            y = model(batch)
            tr.residency.mark_iteration()                             # Flow learns the order
        print(tr.residency.stats())
    # the manager is disabled here (or the one this block replaced is configured again)

The names are the C ABI's without `tr_residency_` (configure, disable, enabled, stats,
mark_iteration, set_callback, timeline_start, timeline_write), its structs' without
`tr_residency_` (Config, Stats, Event); tensors have `pin_resident` and `is_resident`.

One manager per process, shared by every thread and language. While one is configured through
this module, garbage-collected tensors are released at once rather than in batches (their bytes
count against the budget). The event callback runs on the op's thread while the manager is
locked: it must not call tensorref; its exceptions are caught and kept (`callback_errors()`).
"""
from __future__ import annotations

import dataclasses
import sys
import warnings
from ctypes import byref, c_bool
from typing import Callable, NamedTuple

from . import _ownership, _torch_saved
from ._abi_generated import DEVICE_CODES, EVENT_KIND_CODES, POLICY_CODES, RECOMPUTE_CODES, EventFn as _EventFn
from ._abi_generated import DeviceMemory as _CDeviceMemory, ResidencyConfig as _CConfig, ResidencyStats as _CStats
from ._abi_generated import ScheduleModel as _CScheduleModel
from ._lib import c_path, fail, lib
from ._ownership import flush_releases
from ._tensor import Tensor

__all__ = ["Config", "Stats", "Event", "configure", "disable", "enabled", "session", "stats",
           "mark_iteration", "set_callback", "callback_errors", "timeline_start", "timeline_write"]

_EVENT_NAMES = {v: k.lower() for k, v in EVENT_KIND_CODES.items()}


def _check(st: int, function: str) -> None:
    if st:
        fail(st, function)


def _code(table: dict, value, what: str) -> int:
    if isinstance(value, int):
        if value not in table.values():
            raise ValueError(f"unknown {what} code {value}")
        return value
    try:
        return table[str(value).upper()]
    except KeyError:
        raise ValueError(f"unknown {what} {value!r}: one of {', '.join(k.lower() for k in table)}") from None


def _defaults() -> _CConfig:
    c = _CConfig()
    _check(lib.tr_residency_config_default(byref(c)), "tr_residency_config_default")
    return c


@dataclasses.dataclass
class Config:
    """tr_residency_config. `device`: "simulated" (host memory accounted as device memory),
    "cuda" or "cpu"; `policy`: "resident", "genoa" or "flow" (or their codes); `recompute`:
    whether evicted results that can be made again from their inputs are dropped rather than
    written back, "off", "cheaper" (when estimated cheaper than the copies) or "always". The
    other defaults are the library's (tr_residency_config_default)."""
    policy: str = "flow"
    budget_bytes: int = 0
    device: str = "simulated"
    device_index: int = 0
    pin_host_memory: bool = dataclasses.field(default_factory=lambda: _defaults().pin_host_memory)
    prefetch_depth: int = dataclasses.field(default_factory=lambda: _defaults().prefetch_depth)
    simulated_capacity: int = 0
    recompute: str = "off"

    def to_c(self) -> _CConfig:
        # ctypes would wrap a negative or oversized number silently (-1 -> 2**64 - 1).
        for name, bits in (("budget_bytes", 64), ("device_index", 31), ("prefetch_depth", 32), ("simulated_capacity", 64)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << bits:
                raise ValueError(f"{name} must be an integer from 0 to {(1 << bits) - 1}, got {value!r}")
        c = _defaults()
        c.device = _code(DEVICE_CODES, self.device, "device")
        c.device_index = self.device_index
        c.policy = _code(POLICY_CODES, self.policy, "policy")
        c.budget_bytes = self.budget_bytes
        c.pin_host_memory = self.pin_host_memory
        c.prefetch_depth = self.prefetch_depth
        c.simulated_capacity = self.simulated_capacity
        c.recompute = _code(RECOMPUTE_CODES, self.recompute, "recompute mode")
        return c


# Whether the Resident policy's ignored budget was pointed out (once per process).
_warned_resident: list[bool] = []

# Configurations made through this module, outermost first; the deferred-release batch size
# in force before the first.
_configured: list[Config] = []
_saved_batch: list[int] = []

# Called with True as a manager configured through this module starts and False as it stops:
# the `tensorref` torch device's iteration marks follow it (torch_device.mark_iterations).
_followers: list[Callable[[bool], None]] = []


def _follow(on: bool) -> None:
    for follower in _followers:
        follower(on)


def configure(config: Config | None = None, **fields) -> Config:
    """Starts (or replaces) the process's manager with `config`, or a Config of `fields`.
    A replaced manager writes its device copies back; its counters, pins, trace and timeline
    are not carried over (its event callback is). Returns the configuration."""
    if config is None:
        config = Config(**fields)
    elif fields:
        config = dataclasses.replace(config, **fields)
    c = config.to_c()
    if c.policy == POLICY_CODES["RESIDENT"] and config.budget_bytes and not _warned_resident:
        _warned_resident.append(True)
        warnings.warn("the Resident policy keeps every tensor on the device and ignores "
                      "budget_bytes (its stats report no budget); use policy='flow' or 'genoa' to "
                      "stay within a budget", UserWarning, stacklevel=3)
    flush_releases()
    _check(lib.tr_residency_configure(byref(c)), "tr_residency_configure")
    _torch_saved.follow(c.device != DEVICE_CODES["CPU"])
    if c.device == DEVICE_CODES["CUDA"] and "torch" in sys.modules:
        # PyTorch's own lazy CUDA initialisation, which the manager's start in C++ does not run:
        # until it runs, torch.manual_seed only queues the CUDA generator's seed, and the random
        # ops of the `tensorref` device, which run on CUDA, would draw unseeded.
        sys.modules["torch"].cuda.init()
    marked_by_program.clear()
    _follow(True)
    if not _saved_batch:
        _saved_batch.append(_ownership.set_release_batch(1))
    _configured.append(config)
    return config


def disable() -> None:
    """Stops the manager: device copies are written back and freed. No-op without one."""
    flush_releases()
    _check(lib.tr_residency_disable(), "tr_residency_disable")
    _torch_saved.follow(False)
    _follow(False)
    _configured.clear()
    if _saved_batch:
        _ownership.set_release_batch(_saved_batch.pop())


def enabled() -> bool:
    """Whether a manager is configured (by any language in the process)."""
    return bool(lib.tr_residency_enabled())


def cuda_index() -> int | None:
    """The CUDA device the manager configured through this module computes on; None where there
    is none (no manager, the simulated device, the CPU)."""
    if not _configured or _code(DEVICE_CODES, _configured[-1].device, "device") != DEVICE_CODES["CUDA"]:
        return None
    return _configured[-1].device_index


def saved_tensors_managed() -> bool:
    """Whether the tensors the library's ops save for backward on this thread go through the
    manager: a manager that moves data is configured. In a process that imported torch, PyTorch's
    engine runs backward and keeps its saved-tensor hooks per thread: there the manager's are
    pushed during the library's calls on the thread that configured it (each `session` block's
    own), and other threads' saved tensors stay on the device until backward. (The `tensorref`
    device's tensors are the manager's whatever autograd saves.)"""
    return bool(lib.tr_residency_saved_tensors_managed()) or _torch_saved.pushed()


class session:
    """Context manager: configures a manager on entry (a Config, or its fields as keywords) and
    on exit disables it, or configures again the one this block replaced when that one was
    configured through this module (with fresh counters). `as` gives the Config."""

    def __init__(self, config: Config | None = None, **fields):
        self._config = config if config is not None and not fields else (
            dataclasses.replace(config, **fields) if config is not None else Config(**fields))

    def __enter__(self) -> Config:
        self._outer = _configured[-1] if _configured else None
        self._depth = len(_configured)
        configure(self._config)
        return self._config

    def __exit__(self, *exc) -> None:
        if self._outer is None:
            disable()
        else:
            del _configured[self._depth:]
            flush_releases()
            c = self._outer.to_c()
            _check(lib.tr_residency_configure(byref(c)), "tr_residency_configure")
            _torch_saved.follow(c.device != DEVICE_CODES["CPU"])


# tr_residency_stats field by field, as its ctypes Structure (generated into _abi_generated.py from the ABI
# manifest) has them: a field the library adds reaches Stats by `make gen`.
Stats = NamedTuple("Stats", [(name, int) for name, _ in _CStats._fields_])
Stats.__doc__ = "tr_residency_stats: the manager's counters since it was configured (device bytes)."


def stats() -> Stats:
    """The manager's counters; raises ArgumentError without a manager."""
    flush_releases()
    s = _CStats()
    _check(lib.tr_residency_stats_get(byref(s)), "tr_residency_stats_get")
    return Stats(*(getattr(s, f) for f in Stats._fields))


def device_memory(reset_peak: bool = False):
    """The simulated device's memory as its allocator counts it: a tr_device_memory with `live`
    (bytes alive), `peak` (the most alive at once since the manager was configured, or since the
    last `reset_peak`), `in_flight` (allocated by running ops, not yet the manager's storages)
    and `in_flight_here` (on this thread), and `scratch_peak` (the most a kernel allocated beyond
    its outputs at once, where the device allocates as CUDA's: `simulate_cuda_allocator`). The
    budget holds of `peak`; of `peak` less `scratch_peak` where the device allocates as CUDA's."""
    out = _CDeviceMemory()
    _check(lib.tr_residency_device_memory(reset_peak, byref(out)), "tr_residency_device_memory")
    return out


def schedule_log_start() -> None:
    """Starts logging each iteration for the schedule model (`schedule_model`); under recompute
    "cheaper", which prices with it, the manager logs from the start."""
    _check(lib.tr_residency_schedule_log_start(), "tr_residency_schedule_log_start")


def schedule_model(element_bytes: int = 4):
    """The schedule model of the last complete iteration logged since `schedule_log_start` (the
    manager's copies and ops on a GPU with a copy engine each way, at the rates the manager prices
    with: an H100's on the simulated device), its matrix products counting elements of
    `element_bytes` bytes. A tr_schedule_model: `step_s`, a lower bound of the iteration's time
    on that GPU; `unmanaged_s`, the same iteration with everything resident; `bound_s`, what no
    schedule of its copies and ops beats; `loaded_bytes` and `written_bytes`. Raises
    ArgumentError without a manager or before an iteration was logged."""
    out = _CScheduleModel()
    _check(lib.tr_residency_schedule_model(element_bytes, byref(out)), "tr_residency_schedule_model")
    return out


def simulate_cuda_allocator(on: bool) -> None:
    """With `on`, the simulated device's kernels allocate as CUDA's do from now on: counted by
    `device_memory()`, but without asking the manager for room, which is then made before each
    op's kernel for the outputs it will make, from their sizes, as on CUDA. For tests of that path
    without a GPU."""
    _check(lib.tr_residency_simulate_cuda_allocator(bool(on)), "tr_residency_simulate_cuda_allocator")


# Whether the program marks iterations itself (then the tensorref device's modules do not).
marked_by_program: list[bool] = []


def mark_iteration() -> None:
    """Marks the end of an iteration (a step, a forward pass): Flow evicts and prefetches by
    the ops since the previous mark. A model on the `tensorref` torch device is marked at each
    outermost forward call until the program calls this itself (under each manager)."""
    marked_by_program[:] = [True]
    _check(lib.tr_residency_mark_iteration(), "tr_residency_mark_iteration")


# ------------------------------------------------------------ tensors
def _pin_resident(self: Tensor, pinned: bool = True) -> Tensor:
    """Pins the tensor resident on the device (loaded now, never evicted, counted against the
    budget), or unpins it with `pinned=False`. Raises DeviceError (TR_ERR_BUDGET_TOO_SMALL)
    when the pinned bytes would exceed the budget. Returns self."""
    flush_releases()
    st = lib.tr_tensor_pin_resident(self, pinned)
    if st:
        fail(st, "tr_tensor_pin_resident", self)
    return self


def _is_resident(self: Tensor) -> bool:
    """Whether the tensor has a copy on the compute device now (needs a manager)."""
    out = c_bool()
    st = lib.tr_tensor_is_resident(self, byref(out))
    if st:
        fail(st, "tr_tensor_is_resident", self)
    return out.value


Tensor.pin_resident = _pin_resident
Tensor.is_resident = property(_is_resident)


# ------------------------------------------------------------ events
class Event(NamedTuple):
    """One manager event (a copy of tr_event): `kind` is "load", "evict", "write_back",
    "op_begin", "op_end", "prefetch", "recompute" or "drop"."""
    kind: str
    entry: int
    bytes: int
    device_bytes: int
    op: str
    time_us: float
    duration_us: float


# The registered CFUNCTYPE object: it must stay alive while the library may call it.
_callback = None
# Exceptions raised by the event callback (the trampoline catches them all; they cannot unwind
# into the library), oldest first, at most 100. Cleared by set_callback.
_callback_errors: list[BaseException] = []


def callback_errors() -> list:
    """The exceptions the event callback raised since set_callback, oldest first (at most 100)."""
    return list(_callback_errors)


def _trampoline(fn: Callable[[Event], None]):
    names = _EVENT_NAMES
    inside = _ownership.in_callback  # while non-empty, finalizers do not call the library

    def call(ev, _user):
        inside.append(1)
        try:
            e = ev.contents
            fn(Event(names.get(e.kind, str(e.kind)), e.entry, e.bytes, e.device_bytes,
                     (e.op or b"").decode("utf-8", "replace"), e.time_us, e.duration_us))
        except BaseException as exc:  # noqa: BLE001  (nothing may unwind into the library)
            try:
                if len(_callback_errors) < 100:
                    _callback_errors.append(exc)
            except BaseException:  # noqa: BLE001
                pass
        finally:
            inside.pop()
    return _EventFn(call)


def set_callback(fn: Callable[[Event], None] | None) -> None:
    """Calls `fn(event)` for every manager event, on the thread of the op that caused it,
    while the manager is locked: `fn` must not call tensorref. None removes it. The callback
    carries over when the manager is reconfigured. Needs a manager."""
    global _callback
    cb = _trampoline(fn) if fn is not None else _EventFn()  # _EventFn(): NULL
    _check(lib.tr_residency_set_callback(cb, None), "tr_residency_set_callback")
    # The library no longer calls the previous one when set_callback returns: drop it now.
    _callback = cb if fn is not None else None
    _callback_errors.clear()


# ------------------------------------------------------------ timeline
def timeline_start() -> None:
    """Starts recording the manager's events for `timeline_write`."""
    _check(lib.tr_residency_timeline_start(), "tr_residency_timeline_start")


def timeline_write(path) -> None:
    """Writes the recorded events to `path`: to a ``.svg`` path, a picture of memory over time
    (device bytes stacked by what they hold, the budget line, loads, prefetches and write-backs,
    iteration boundaries); to any other, Chrome trace / Perfetto JSON. Raises ArgumentError
    without a timeline started, FileError when the path cannot be written."""
    _check(lib.tr_residency_timeline_write(c_path(path)), "tr_residency_timeline_write")
