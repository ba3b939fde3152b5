"""The `tensorref` device in torch: tensors whose storages the residency manager holds, so that a
PyTorch model nobody wrote for this library runs under its budget unchanged.

    import torch, tensorref
    with tensorref.residency.session(policy="flow", budget_bytes=1 << 30):
        model.to("tensorref")
        y = model(x.to("tensorref")).cpu()

`import tensorref` registers it with libtorch (before any backward: the autograd engine sizes its
device threads once, at its first backward), and, when torch is imported already, names it in
torch's Python (`register`; a program that imports torch later calls it). The library takes
torch's PrivateUse1 backend and names it `tensorref`; `torch.tensorref` is its device module.
"""
from __future__ import annotations

import threading
import types

import torch

from . import residency
from ._lib import check, lib

NAME = "tensorref"


class _Index:
    """`torch.tensorref.device(d)`: what torch enters to make storages on one of a device's
    indices (`torch.load` does); the device has one."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _generator() -> torch.Generator:
    """The generator the device's random ops draw from: the compute device's (CUDA's under a CUDA
    manager, the CPU's otherwise)."""
    index = residency.cuda_index()
    return torch.default_generator if index is None else torch.cuda.default_generators[index]


def _device_name() -> str:
    """What the device computes on, in words: a CUDA device's name under a CUDA manager."""
    index = residency.cuda_index()
    return "tensorref (the host's kernels)" if index is None else f"tensorref on {torch.cuda.get_device_name(index)}"


def _device_module() -> types.ModuleType:
    """What code expects of a backend's module: autocast asks for its supported dtypes,
    `torch.load` enters `device`, and activation checkpointing and `torch.random.fork_rng` keep
    and restore the generator's state (checkpointing only where `_initialized`), so that dropout
    recomputed in backward draws what it drew in forward."""
    m = types.ModuleType(f"torch.{NAME}")
    m.is_available = lambda: True
    m.is_initialized = lambda: True
    m._initialized = True
    m.device = _Index
    m.get_rng_state = lambda device=None: _generator().get_state()
    m.set_rng_state = lambda new_state, device=None: _generator().set_state(new_state)
    m._lazy_init = lambda: None
    m._is_in_bad_fork = lambda: False
    m.device_count = lambda: 1
    m.current_device = lambda: 0
    m.set_device = lambda device: None
    m.synchronize = lambda device=None: torch.accelerator.synchronize()  # the guard waits for CUDA's stream
    # Ops draw with the compute device's generator (the CPU's on the simulated device), which
    # torch.manual_seed seeds already; it calls these too.
    m.manual_seed = m.manual_seed_all = lambda seed: None
    m.get_amp_supported_dtype = lambda: [torch.float16, torch.bfloat16]
    m.is_bf16_supported = lambda including_emulation=True: True
    m.get_device_name = lambda device=None: _device_name()
    m.get_device_capability = lambda device=None: torch.accelerator.get_device_capability()
    m.current_stream = lambda device=None: torch.accelerator.current_stream()
    # Memory as the device's allocator reports it (src/torch_device/device.cpp): the manager's
    # device copies against its budget. The device is libtorch's accelerator (registered, it
    # comes before CUDA), so torch.accelerator's functions read it.
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
                 "reset_peak_memory_stats", "reset_accumulated_memory_stats"):
        setattr(m, name, getattr(torch.accelerator, name))
    m.empty_cache = torch.accelerator.empty_cache
    m.mem_get_info = torch.accelerator.get_memory_info
    return m


def register() -> None:
    """Registers the device with libtorch (tr_torch_device_register), names it in torch, and
    marks iterations at modules' forward calls while a manager runs (`mark_iterations`).
    Idempotent."""
    check(lib.tr_torch_device_register(), "tr_torch_device_register")
    if getattr(torch, NAME, None) is None:
        torch.utils.rename_privateuse1_backend(NAME)
        torch._register_device_module(NAME, _device_module())
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    if mark_iterations not in residency._followers:
        residency._followers.append(mark_iterations)
        mark_iterations(residency.enabled())


_calls = threading.local()  # .depth: module forward calls running on this thread
_hooks: list = []


def _before_forward(module, args):
    depth = getattr(_calls, "depth", 0)
    _calls.depth = depth + 1
    if depth == 0 and not residency.marked_by_program and _on_device(module) and residency.enabled():
        residency.mark_iteration()
        residency.marked_by_program.clear()


def _after_forward(module, args, output):
    # Never below 0: the hooks may be installed while a forward call runs (a session opened
    # inside one), whose end then comes without its beginning.
    _calls.depth = max(0, getattr(_calls, "depth", 0) - 1)


def _on_device(module) -> bool:
    p = next(module.parameters(), None)
    return p is not None and p.device.type == NAME


def mark_iterations(on: bool = True) -> None:
    """Iterations without being told: each outermost forward call of a module whose parameters
    are on the device marks one (a training step's forward, backward and optimizer step; one
    decode step of generate()), so Flow learns the op order of a model that never calls
    `residency.mark_iteration`. A program that marks itself turns it off (until the next
    manager). Global module hooks, so each module call costs two Python calls more: installed
    (`on`) while a manager configured from Python runs, or one `register` finds running, and
    removed as it stops, so that outside a session a process's modules (and torch.compile, which
    warns of global hooks) see none."""
    if on and not _hooks:
        _hooks.append(torch.nn.modules.module.register_module_forward_pre_hook(_before_forward))
        _hooks.append(torch.nn.modules.module.register_module_forward_hook(_after_forward, always_call=True))
    elif not on:
        while _hooks:
            _hooks.pop().remove()
