"""The `tensorref` device in torch: tensors whose storages the residency manager holds, so that a
PyTorch model nobody wrote for this library runs under its budget unchanged.

    import torch, tensorref
    with tensorref.residency.session(policy="flow", budget_bytes=1 << 30):
        model.to("tensorref")
        y = model(x.to("tensorref")).cpu()

`import tensorref` registers it when torch can be imported (`register`). The library takes
torch's PrivateUse1 backend and names it `tensorref`; `torch.tensorref` is its device module.
"""
from __future__ import annotations

import types

import torch

from ._lib import check, lib

NAME = "tensorref"


def _device_module() -> types.ModuleType:
    """What code expects of a backend's module (autocast asks for its supported dtypes)."""
    m = types.ModuleType(f"torch.{NAME}")
    m.is_available = lambda: True
    m.is_initialized = lambda: True
    m._lazy_init = lambda: None
    m._is_in_bad_fork = lambda: False
    m.device_count = lambda: 1
    m.current_device = lambda: 0
    m.set_device = lambda device: None
    m.synchronize = lambda device=None: None
    # Ops draw with the compute device's generator (the CPU's on the simulated device), which
    # torch.manual_seed seeds already; it calls these too.
    m.manual_seed = m.manual_seed_all = lambda seed: None
    m.get_amp_supported_dtype = lambda: [torch.float16, torch.bfloat16]
    return m


def register() -> None:
    """Registers the device with libtorch (tr_torch_device_register) and names it in torch."""
    check(lib.tr_torch_device_register(), "tr_torch_device_register")
    if getattr(torch, NAME, None) is None:
        torch.utils.rename_privateuse1_backend(NAME)
        torch._register_device_module(NAME, _device_module())
        torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
