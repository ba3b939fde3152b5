"""Room for the outputs of ops that libtorch's C++ has no meta kernel for, on the `tensorref`
device where kernels allocate as CUDA's do (without asking the manager): attention, the backward
of embedding and layer_norm, dropout, index_select, var ... A C, C++, C# or Rust program has
only libtorch's C++ meta kernels, so the device sizes these ops' outputs by rules of its own
(src/residency/core/outputs_by_rule.cpp). The checks run in a child process whose PyTorch has
no meta kernels written in Python, as such a program's: each op, alone, at a budget of exactly
its inputs' and its outputs' bytes, runs (nothing reserved beyond its outputs) with no output
unreserved (nothing short), and equals the CPU's.

CUDA's attention kernels do not run on the CPU: stand-ins registered for the CPU here make what
PyTorch's meta kernels say they make (zeros), their random seeds and offsets included, which
CUDA's kernels allocate on the device too.

    python test_torch_device_outputs.py     # the child's checks, one line an op
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import tensorref  # noqa: E402,F401  (registers the device with libtorch)
import torch  # noqa: E402

from tensorref import residency, torch_device  # noqa: E402

torch_device.register()
aten = torch.ops.aten


def _attention(L=5, S=7, E=8, Ev=8, dtype=torch.float32):
    torch.manual_seed(0)
    return (torch.randn(2, 3, L, E, dtype=dtype), torch.randn(2, 3, S, E, dtype=dtype), torch.randn(2, 3, S, Ev, dtype=dtype))


def _layer_norm_backward():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    _, mean, rstd = aten.native_layer_norm(x, [8], w, b, 1e-5)
    return aten.native_layer_norm_backward.default, (torch.randn(4, 8), x, [8], mean, rstd, w, b, [True, True, True])


def _flash_for_cpu_backward():
    q, k, v = _attention()
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
    return aten._scaled_dot_product_flash_attention_for_cpu_backward.default, (torch.randn_like(out), q, k, v, out, lse, 0.0, False)


def _none():
    return torch.empty(0)


# Each case: the op and its arguments on the CPU.
CASES = {
    "index_select": lambda: (aten.index_select.default, (torch.randn(6, 5), 1, torch.tensor([4, 0, 4]))),
    "floor_divide": lambda: (aten.floor_divide.default, (torch.arange(1, 5).reshape(4, 1), torch.tensor([3, 2, 7], dtype=torch.int32))),
    "var.correction": lambda: (aten.var.correction, (torch.randn(4, 6), [1])),
    "std_mean.correction": lambda: (aten.std_mean.correction, (torch.randn(4, 6),)),
    "max": lambda: (aten.max.default, (torch.randn(4, 6),)),
    "histc": lambda: (aten.histc.default, (torch.randn(50), 10)),
    "mse_loss_backward": lambda: (aten.mse_loss_backward.default, (torch.tensor(1.0), torch.randn(5), torch.randn(5), 1)),
    "native_dropout": lambda: (aten.native_dropout.default, (torch.randn(64), 0.5, True)),
    "embedding_dense_backward": lambda: (aten.embedding_dense_backward.default,
                                         (torch.randn(2, 3, 8), torch.tensor([[1, 2, 9], [0, 2, 2]]), 10, -1, False)),
    "native_layer_norm_backward": _layer_norm_backward,
    "convolution": lambda: (aten.convolution.default, (torch.randn(2, 4, 9, 9), torch.randn(6, 2, 3, 3), torch.randn(6),
                                                       [2, 2], [1, 1], [1, 1], False, [0, 0], 2)),
    "convolution transposed": lambda: (aten.convolution.default, (torch.randn(2, 4, 5), torch.randn(4, 3, 2), None,
                                                                  [2], [0], [1], True, [1], 1)),
    "convolution_backward": lambda: (aten.convolution_backward.default,
                                     (torch.randn(2, 6, 5, 5), torch.randn(2, 4, 9, 9), torch.randn(6, 2, 3, 3), [6],
                                      [2, 2], [1, 1], [1, 1], False, [0, 0], 2, [True, True, True])),
    "_scaled_dot_product_flash_attention_for_cpu": lambda: (aten._scaled_dot_product_flash_attention_for_cpu.default, _attention()),
    "_scaled_dot_product_flash_attention_for_cpu_backward": _flash_for_cpu_backward,
    # CUDA's, through the stand-ins.
    "_scaled_dot_product_flash_attention": lambda: (aten._scaled_dot_product_flash_attention.default, _attention()),
    "_scaled_dot_product_flash_attention debug mask": lambda: (aten._scaled_dot_product_flash_attention.default,
                                                              (*_attention(S=200), 0.0, False, True)),
    "_scaled_dot_product_flash_attention_backward": lambda: (
        aten._scaled_dot_product_flash_attention_backward.default,
        (torch.randn(2, 3, 5, 8), *_attention(), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5), _none(), _none(), 5, 7, 0.0, False,
         torch.zeros(2, dtype=torch.uint64), torch.zeros((), dtype=torch.uint64))),
    "_scaled_dot_product_efficient_attention": lambda: (aten._scaled_dot_product_efficient_attention.default,
                                                        (*_attention(Ev=4), None, True)),
    "_scaled_dot_product_efficient_attention_backward": lambda: (
        aten._scaled_dot_product_efficient_attention_backward.default,
        (torch.randn(2, 3, 5, 4), *_attention(Ev=4), torch.randn(2, 3, 5, 7), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 32),
         torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long), 0.0, [True, True, True, True])),
    "_scaled_dot_product_cudnn_attention": lambda: (aten._scaled_dot_product_cudnn_attention.default,
                                                    (*_attention(Ev=4, dtype=torch.float16), None, True)),
    "_scaled_dot_product_cudnn_attention_backward": lambda: (
        aten._scaled_dot_product_cudnn_attention_backward.default,
        (torch.randn(2, 3, 5, 8), *_attention(), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 1), torch.zeros((), dtype=torch.long),
         torch.zeros((), dtype=torch.long), _none(), _none(), _none(), 5, 7, 0.0, False)),
}

# CUDA's attention ops whose stand-ins run on the CPU: PyTorch's meta kernel of each (a Python
# function of torch._meta_registrations, called directly: the child has no meta kernels
# registered in Python).
STAND_INS = {
    "_scaled_dot_product_flash_attention": "meta__scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_backward": "meta__scaled_dot_product_flash_backward",
    "_scaled_dot_product_efficient_attention": "meta__scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward": "meta__scaled_dot_product_efficient_backward",
    "_scaled_dot_product_cudnn_attention": "meta__scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_cudnn_attention_backward": "meta__scaled_dot_product_cudnn_backward",
}


def _materialised(m):
    """A CPU tensor of zeros with the meta tensor `m`'s geometry over a storage of its bytes."""
    if not isinstance(m, torch.Tensor):
        return _none() if m is None else m
    storage = torch.zeros(m.untyped_storage().nbytes(), dtype=torch.uint8)
    return storage.view(m.dtype).as_strided(m.size(), m.stride(), m.storage_offset())


def _stand_in(meta_kernel):
    def kernel(*args):
        to_meta = lambda a: a.to("meta") if isinstance(a, torch.Tensor) else a  # noqa: E731
        out = meta_kernel(*[to_meta(a) for a in args])
        return tuple(_materialised(o) for o in out)
    return kernel


def _tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _storage_bytes(tensors, besides=()):
    """The bytes of the distinct CPU storages of `tensors`, but those of `besides`."""
    seen = {t.untyped_storage().data_ptr() for t in besides}
    total = 0
    for t in tensors:
        ptr = t.untyped_storage().data_ptr()
        if t.device.type == "cpu" and ptr not in seen and t.untyped_storage().nbytes() > 0:
            seen.add(ptr)
            total += t.untyped_storage().nbytes()
    return total


def check(name) -> str:
    """Runs the case `name` on the CPU and, alone, on the device at exactly the bytes it needs;
    returns what went wrong, or '' when nothing did."""
    op, args = CASES[name]()
    torch.manual_seed(1)
    expected = op(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    inputs = list(_tensors(args))
    budget = _storage_bytes(inputs) + _storage_bytes(_tensors(expected), besides=inputs)
    residency.simulate_cuda_allocator(True)
    try:
        with residency.session(policy="flow", budget_bytes=budget):
            on = [a.to("tensorref") if isinstance(a, torch.Tensor) else a for a in args]
            torch.manual_seed(1)
            try:
                got = op(*on)
            except torch.OutOfMemoryError as e:
                return f"more reserved than its outputs' {budget} bytes with its inputs: {e}"
            got = got if isinstance(got, tuple) else (got,)
            unreserved = residency.stats().output_bytes_unreserved
            got = [g.cpu() if isinstance(g, torch.Tensor) else g for g in got]
            del on
    finally:
        residency.simulate_cuda_allocator(False)
    if unreserved:
        return f"{unreserved} bytes of its outputs came unreserved (budget {budget})"
    for i, (g, e) in enumerate(zip(got, expected)):
        same = g.dtype == e.dtype and torch.equal(g, e) if isinstance(e, torch.Tensor) else g == e
        if not same:
            return f"output {i} differs from the CPU's"
    return ""


def main() -> int:
    import torch._meta_registrations as meta
    meta._meta_lib_dont_use_me_use_register_meta._destroy()  # as in a program without PyTorch's Python
    stand_ins = torch.library.Library("aten", "IMPL", "CPU")
    for op, kernel in STAND_INS.items():
        stand_ins.impl(op, _stand_in(getattr(meta, kernel)))
    failed = 0
    for name in CASES:
        wrong = check(name)
        failed += bool(wrong)
        print(f"{name:55} {wrong or 'ok'}")
    return 1 if failed else 0


def test_ops_without_a_meta_kernel_in_cpp_reserve_exactly_their_outputs():
    child = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stdout + child.stderr


if __name__ == "__main__":
    sys.exit(main())
