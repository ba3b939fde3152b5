"""A tiny op through the Python binding against the same op in PyTorch eager, in one process
and one run: a 4-element float32 add, as a new tensor (`a + b`) and in place (`a += b`). Each
tensorref row is measured twice, side by side: with the compiled accelerator
(tensorref._speedups: Tensor's operators and finalizer in C) and on the pure-ctypes path the
package falls back to without it (TENSORREF_PURE_PYTHON=1), switched in-process.

    make bench-python        # release build and the accelerator, then this script on them
    TENSORREF_LIB=target/release/libtensorref.so python3 benches/python/bench_ops.py

PyTorch and libtensorref share the process's one libtorch (one intra-op thread here). Each
figure is the best of several repetitions of a timed loop; the variants are interleaved so
that machine load affects them alike. Rows:

  torch a + b            PyTorch eager, result freed by refcounting each iteration
  tensorref a + b        no scope open: the result's Python object owns its handle; when
                         dropped its handle joins the deferred-release buffer, released 64
                         at a time with one tr_tensor_release_many call
  tensorref a + b, batch 1   the same with a release batch of 1: each collected result is
                         released at once (one release call per op, as before batching)
  tensorref a + b, scope results belong to a scope, disposed every 100 ops (included)
  torch / tensorref a += b   in place with the named op (x.add_(y) / a.add_(b)): no new
                         tensor on either side. a.add_ is a generated op wrapper, which the
                         accelerator does not route: ctypes in both columns
  ... a += b (operator)  in place with the operator (x += y / a += b), which it routes
  C floor                the same C calls (tr_tensor_add + tr_tensor_release) in a C loop,
                         when a C compiler is at hand
  one ctypes call/op     one ctypes call per op into a C helper that does add + release:
                         what any ctypes binding pays at least (the library's op as seen from
                         a Python loop, whose caches are colder than a C loop's)

The bar (the project's issue): a Python op on small tensors costs no more than the same op in
PyTorch eager, ratio <= 1.0.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import timeit

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bindings/python"))
os.environ.setdefault("TENSORREF_LIB", str(ROOT / "target/release/libtensorref.so"))

import tensorref as tr  # noqa: E402

LOOP = 100        # ops per timed call (one scope per call in the scoped variant)
NUMBER = 500      # timed calls per repetition
REPEAT = 15


def c_floors() -> tuple[float, float] | None:
    """tr_tensor_add + tr_tensor_release timed in a C loop, and one ctypes call per op into a C
    function doing both, on the same library; in microseconds."""
    cc = shutil.which("cc")
    if cc is None:
        return None
    src = r'''
    #include <stdint.h>
    #include <stddef.h>
    #include <time.h>
    typedef struct { uint64_t id; } tr_tensor;
    int tr_tensor_add(tr_tensor, tr_tensor, tr_tensor *);
    int tr_tensor_release(tr_tensor);
    double bench(tr_tensor a, tr_tensor b, int n) {
        struct timespec t0, t1; tr_tensor c;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < n; i++) { tr_tensor_add(a, b, &c); tr_tensor_release(c); }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n / 1e3;
    }
    int add_release(tr_tensor a, tr_tensor b) {
        tr_tensor c; int st = tr_tensor_add(a, b, &c);
        return st ? st : tr_tensor_release(c);
    }'''
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "floor.c").write_text(src)
        so = str(pathlib.Path(d) / "floor.so")
        lib_dir = os.path.dirname(tr.LIB_PATH)
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", f"{d}/floor.c", "-o", so, f"-L{lib_dir}",
                            "-l:" + os.path.basename(tr.LIB_PATH), f"-Wl,-rpath,{lib_dir}"],
                           capture_output=True)
        if r.returncode:
            return None
        floor = ctypes.CDLL(so)
        floor.bench.argtypes = (tr.Tensor, tr.Tensor, ctypes.c_int)
        floor.bench.restype = ctypes.c_double
        call = floor.add_release
        call.argtypes = (tr.Tensor, tr.Tensor)
        call.restype = ctypes.c_int32
        a = tr.from_numpy(np.arange(4, dtype=np.float32))
        assert call(a, a) == 0

        def one_call():
            for _ in range(LOOP):
                call(a, a)

        in_c = min(floor.bench(a, a, LOOP * NUMBER) for _ in range(5))
        from_py = min(timeit.timeit(one_call, number=NUMBER) for _ in range(REPEAT)) / (NUMBER * LOOP) * 1e6
        a.close()
        return in_c, from_py


def main() -> int:
    from tensorref import _accel

    torch.set_num_threads(1)
    live_at_start = tr.live_handles()
    x, y = torch.arange(4, dtype=torch.float32), torch.ones(4)
    a, b = tr.from_numpy(np.arange(4, dtype=np.float32)), tr.ones(4)
    xi, ai = x.clone(), a + 0.0  # in-place targets
    xo, ao = x.clone(), a + 0.0

    def torch_add():
        for _ in range(LOOP):
            x + y

    def tr_add():
        for _ in range(LOOP):
            a + b

    def tr_add_immediate():
        prev = tr.set_release_batch(1)
        for _ in range(LOOP):
            a + b
        tr.set_release_batch(prev)

    def tr_add_scoped():
        with tr.scope():
            for _ in range(LOOP):
                a + b

    def torch_iadd():
        for _ in range(LOOP):
            xi.add_(y)

    def tr_iadd():
        for _ in range(LOOP):
            ai.add_(b)

    def torch_iadd_op():
        t = xo
        for _ in range(LOOP):
            t += y

    def tr_iadd_op():
        t = ao
        for _ in range(LOOP):
            t += b

    def empty_loop():
        for _ in range(LOOP):
            pass

    # name: (function, the torch row it is compared with, or None for a torch row)
    rows = {"torch a + b": (torch_add, None), "tensorref a + b": (tr_add, "torch a + b"),
            "tensorref a + b, batch 1": (tr_add_immediate, "torch a + b"),
            "tensorref a + b, scope": (tr_add_scoped, "torch a + b"),
            "torch a += b": (torch_iadd, None), "tensorref a += b": (tr_iadd, "torch a += b"),
            "torch a += b (operator)": (torch_iadd_op, None),
            "tensorref a += b (operator)": (tr_iadd_op, "torch a += b (operator)")}
    modes = (True, False) if _accel.FAST is not None else (False,)
    variants = [("loop", None, empty_loop)]
    for name, (fn, ref) in rows.items():
        variants += [(name, mode, fn) for mode in (modes if ref else (None,))]
    best = {(name, mode): float("inf") for name, mode, _ in variants}
    prev_mode = _accel.active
    try:
        for _ in range(REPEAT):
            for name, mode, fn in variants:
                if mode is not None:
                    _accel.use(mode)
                t = timeit.timeit(fn, number=NUMBER) / (NUMBER * LOOP) * 1e6
                best[name, mode] = min(best[name, mode], t)
    finally:
        if _accel.FAST is not None:
            _accel.use(prev_mode)
    loop = best.pop(("loop", None))
    us = {k: v - loop for k, v in best.items()}  # the bare `for` loop costs the same to all

    print(f"{tr.version()}\nlibrary {tr.LIB_PATH}\ntorch {torch.__version__}, "
          f"4-element float32, 1 thread, best of {REPEAT} x {NUMBER} x {LOOP} ops (loop overhead "
          f"{loop * 1e3:.0f} ns subtracted)")
    print("accelerator: " + ("tensorref._speedups (compiled operators and finalizer)"
                             if _accel.FAST is not None else f"not available ({_accel.reason})")
          + "\n")
    print(f"{'':<29}{'accelerated':>22}{'pure ctypes':>22}")
    print(f"{'variant':<29}{'us/op':>10}{'vs torch':>12}{'us/op':>10}{'vs torch':>12}")
    ratio = {}
    for name, (_, ref) in rows.items():
        cells = ""
        for mode in (True, False):
            if ref is None:
                cells += f"{us[name, None]:10.3f}{1.0:12.2f}" if mode else ""
            elif (name, mode) in us:
                ratio[name, mode] = us[name, mode] / us[ref, None]
                cells += f"{us[name, mode]:10.3f}{ratio[name, mode]:12.2f}"
            else:
                cells += f"{'n/a':>10}{'':12}"
        print(f"{name:<29}{cells}")
    floors = c_floors()
    if floors is not None:
        for name, t in zip(("C floor (add + release)", "one ctypes call/op"), floors):
            t -= loop if "ctypes" in name else 0
            print(f"{name:<29}{t:10.3f}{t / us['torch a + b', None]:12.2f}")

    def verdict(r: float) -> str:
        return "met" if r <= 1.0 else "NOT met"

    print("\nbar: ratio <= 1.0")
    for mode in modes:
        add = max(ratio["tensorref a + b", mode], ratio["tensorref a + b, scope", mode])
        iadd, named = ratio["tensorref a += b (operator)", mode], ratio["tensorref a += b", mode]
        print(f"  {'accelerated' if mode else 'pure ctypes':<12} a + b {verdict(add)} (worst "
              f"ratio {add:.2f}, with and without a scope); a += b {verdict(iadd)} ({iadd:.2f}); "
              f"a.add_(b) {verdict(named)} ({named:.2f})")
    for t in (a, b, ai, ao):
        t.close()
    if tr.live_handles() != live_at_start:
        print(f"leak: {tr.live_handles()} live handles after the benchmark, {live_at_start} before")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
