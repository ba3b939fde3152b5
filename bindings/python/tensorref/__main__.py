"""``python -m tensorref``: what this installation is. The package's version and where its library
was found, the library's own version text (its version, the C ABI version, the libtorch it was
built against, CUDA), the libtorch it runs on now when torch is importable, and the devices it
can manage: the host, the simulated accelerator, each CUDA device, and the ``tensorref`` torch
device."""
from __future__ import annotations

import os
import sys


def main() -> int:
    import tensorref as tr
    from tensorref import _lib

    print(f"tensorref {tr.__version__} (Python package, {os.path.dirname(tr.__file__)})")
    print(f"library: {os.path.abspath(_lib.LIB_PATH)}")
    print(f"  {tr.version()}")
    print(f"  C ABI version {tr.abi_version()} (this package speaks {_lib.TR_ABI_VERSION})")
    print(f"  operators: {'compiled accelerator' if tr.accelerated else 'ctypes'}")
    devices = ["cpu (host memory: homes)", "simulated (the host's kernels, under a device budget)"]
    try:
        import torch
    except ImportError:
        print("libtorch at run time: torch is not importable here (pip install torch==2.11.*)")
    else:
        print(f"libtorch at run time: torch {torch.__version__} ({os.path.dirname(torch.__file__)})")
        devices += [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
        from tensorref import torch_device

        torch_device.register()
        devices.append(f"the torch device '{torch.empty(0, device='tensorref').device.type}' "
                       "(model.to(\"tensorref\") under a residency manager)")
    print("devices:")
    for d in devices:
        print(f"  {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
