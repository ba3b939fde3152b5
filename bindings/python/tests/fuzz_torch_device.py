"""A fuzzer of the `tensorref` torch device: random torch programs run on `tensorref` tensors and,
line for line, on plain CPU tensors (the shadow), checked bit for bit after every step.

    python fuzz_torch_device.py --seed 3 --steps 300             # one seed (replays exactly)
    python fuzz_torch_device.py --seeds 1-200 --steps 300         # many seeds, one process
    python fuzz_torch_device.py --seed 3 --steps 300 --shrink     # minimise a failure
    python fuzz_torch_device.py --policy flow,genoa,none ...      # managers to configure
    python fuzz_torch_device.py --seed 3 --shrink --isolate       # each replay in a child (crashes)
    python fuzz_torch_device.py --seeds 1-200 --convolutions      # convolutions among the actions
    python fuzz_torch_device.py --seeds 1-200 --complex           # complex tensors, lazy conj and neg views
    python fuzz_torch_device.py --seeds 1-200 --forward-ad        # forward-mode AD, ZeroTensors

Each step is one *action*: a line (or a few) of Python over named tensors (t1, t2, ...), run once
with DEV = "tensorref" over the device tensors and once with DEV = "cpu" over their shadows. The
device side runs first. A step makes tensors (from CPU tensors of every dtype, factories, seeded
random ops: on the simulated device they draw from the CPU generator), takes views of every kind
(views stay views: a later in-place write through one must reach its base on both sides), runs
elementwise ops, reductions, matmuls, multi-output and data-dependent ops, writes in place
(through views too, setitem, index_put_, copy_ across devices and dtypes, resize_, set_), out=
variants (with outs of the wrong size), autograd, value reads (.item, .tolist, .cpu, torch.equal),
drops tensors, or configures / disables the residency manager (policies flow, genoa, resident,
budgets of a few KiB to a few MiB, recomputation off, cheaper or always, one-op sessions) or
runs with none.

Checked:
- an op that raises on one side raises on the other, with the same exception type; the only
  exception the device may add is torch.OutOfMemoryError saying `needs N bytes at once` with N
  over the budget, and then nothing may have changed (the CPU side is not run);
- every new tensor, and every live tensor on steps that check them all (a per-seed probability,
  so that reads do not always hide what the manager does between them): dtype, shape, strides,
  storage offset, whether it is a view, and its values bit for bit (NaN payloads and -0.0
  included); values read (.item(), .tolist(), grads ...) equal too;
- which live tensors share a storage is the same on both sides (views stay views);
- while a bounded budget is configured: stats().peak_device_bytes and device_memory().peak are
  within it (with --cuda-allocator, where kernels allocate as CUDA's do and the room for their
  outputs is made beforehand, device_memory().peak within it plus the largest kernel's scratch).
A failure prints the seed, the step, its category and the last lines; --shrink minimises the
lines to the fewest that fail the same way and prints them as a standalone script.
"""
from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import gc
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import tensorref  # noqa: E402,F401  (registers the device with libtorch)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tensorref import residency, torch_device  # noqa: E402

torch_device.register()
warnings.filterwarnings("ignore")

POLICIES = ("flow", "genoa", "resident", "none")
BUDGETS = (2 << 10, 4 << 10, 8 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Families of actions a run adds where asked, each its maker: convolutions and their gradients;
# complex tensors with lazy conj() and negative views (bits the kernels read, not the storage);
# forward-mode AD and its ZeroTensors.
EXTRAS = {"convolutions": "convolution", "complex": "lazy_bits", "forward_ad": "forward_ad"}
MAX_LIVE = 24
HISTORY = 30
STEP_TIMEOUT = float(os.environ.get("FUZZ_STEP_TIMEOUT", "120"))
AT_ONCE = re.compile(r"needs (\d+) bytes at once, the budget is (\d+) bytes")


# Helpers the lines call, on both sides (and in a reproducer, by this source).
PRELUDE = '''
def src(seed, shape, dtype):
    """A CPU tensor of `dtype`, some with NaN, inf and -0.0."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-8, 9, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    if seed % 4 == 0:
        m = torch.randint(0, 10, shape, generator=g)
        x = torch.where(m == 0, math.nan, torch.where(m == 1, -math.inf, torch.where(m == 2, -0.0, x)))
    return x.to(dtype)


def idx(seed, shape, high):
    """A CPU int64 tensor of indices in [0, high)."""
    return torch.randint(0, max(high, 1), shape, generator=torch.Generator().manual_seed(seed))
'''
exec(PRELUDE)  # noqa: S102  (src, idx here too, for generating)


class _NoManager:
    """`residency` on the CPU side: sessions there configure nothing."""

    class session:
        def __init__(self, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False


@dataclasses.dataclass
class Action:
    """One step: `code` run on both sides (or, for the manager, on the device side only);
    `outs`: the tensors it makes (pooled); `vals`: values it reads (compared, then dropped)."""
    code: str
    outs: list = dataclasses.field(default_factory=list)
    vals: list = dataclasses.field(default_factory=list)
    kind: str = "op"          # op | manager | drop
    manager: list | None = None  # ["configure", policy, budget] | ["disable"] | ["mark"]
    budget: int | None = None    # the budget of the session an op runs in (None: the fuzzer's)
    check: bool = False          # check every live tensor after it


class Failure(Exception):
    def __init__(self, category: str, detail: str):
        super().__init__(f"{category}: {detail}")
        self.category, self.detail = category, detail


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor as integers of its width, so that equality is bit for bit (NaNs, -0.0)."""
    if t.dtype.is_complex:
        return _bits(torch.view_as_real(t))
    if t.dtype.is_floating_point:
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _first_diff(got: torch.Tensor, want: torch.Tensor) -> str:
    ne = _bits(got) != _bits(want)
    ne = (ne.any(-1) if got.dtype.is_complex else ne).nonzero()  # (a complex's bits: a last dim of 2)
    if len(ne) == 0:
        return "?"
    i = tuple(ne[0].tolist())
    return f"{(ne.shape[0])} element(s) differ, first at {list(i)}: got {got[i].item()!r}, want {want[i].item()!r}"


def _oom_allowed(e: BaseException, budget: int | None) -> bool:
    m = AT_ONCE.search(str(e)) if isinstance(e, torch.OutOfMemoryError) else None
    return bool(m) and budget is not None and int(m.group(2)) == budget and int(m.group(1)) > budget


def _sum_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of a full `.sum()` of a tensor of `dtype`: integers and bools sum to int64."""
    return dtype if dtype.is_floating_point or dtype.is_complex else torch.int64


def _storage_key(t: torch.Tensor):
    if t._is_zerotensor():  # no memory, so nothing to share
        return None
    s = t.untyped_storage()
    return s.data_ptr() if s.nbytes() > 0 else None


class Fuzzer:
    def __init__(self, seed: int, policies=POLICIES, check_p: float | None = None, extras=()):
        self.seed = seed
        # Families of actions that join only where asked (`EXTRAS`), so that a seed's program
        # without them is the one it was before they came.
        unknown = set(extras) - set(EXTRAS)
        if unknown:
            raise ValueError(f"unknown extras {sorted(unknown)}; there are {sorted(EXTRAS)}")
        self.extras = tuple(e for e in EXTRAS if e in extras)
        self.rng = random.Random(seed)
        # Recomputation is drawn apart, so that a seed's program is the one it was before it.
        self.recompute_rng = random.Random(f"recompute {seed}")
        self.policies = tuple(policies)
        self.check_p = check_p if check_p is not None else self.rng.choice((0.2, 0.5, 1.0))
        self.step = 0
        self.history: list[str] = []
        self.names: list[str] = []
        self.counter = 0
        self.budget: int | None = None   # the bounded budget configured now
        self.policy = "none"
        self.skipped = 0
        self.remade = 0  # results the manager made again (a report, counted between steps)
        self._remade_seen = 0
        base = {"torch": torch, "F": F, "math": math}
        exec(PRELUDE, base)  # noqa: S102
        self.env = {"dev": dict(base, DEV="tensorref", residency=residency),
                    "cpu": dict(base, DEV="cpu", residency=_NoManager)}
        self.fixed = set(self.env["dev"])

    # ------------------------------------------------------------------ state
    def S(self, n: str) -> torch.Tensor:
        """The shadow of `n` (its metadata is the device tensor's, checked)."""
        return self.env["cpu"][n]

    def new(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    def pick(self, pred=lambda s: True, exclude=()):
        c = [n for n in self.names if n not in exclude and pred(self.S(n))]
        return self.rng.choice(c) if c else None

    def shares(self, n: str) -> set:
        """The other live tensors that view n's storage (empty storages too)."""
        k = self.S(n).untyped_storage()._cdata
        return {m for m in self.names if m != n and self.S(m).untyped_storage()._cdata == k}

    # ------------------------------------------------------------------ random values
    def shape(self, max_numel=96):
        r = self.rng
        nd = r.choices((0, 1, 2, 3, 4), (1, 3, 4, 2, 1))[0]
        while True:
            s = tuple(0 if r.random() < 0.04 else r.choice((1, 1, 2, 3, 4, 5, 6)) for _ in range(nd))
            if math.prod(s) <= max_numel:
                return s

    def dtype(self, floats=False):
        return self.rng.choice(FLOATS if floats else DTYPES + (torch.float32, torch.float32))

    def scalar(self, s: torch.Tensor | None = None):
        r = self.rng
        if s is not None and s.dtype == torch.bool:
            return r.choice(("True", "False"))
        if s is not None and not s.dtype.is_floating_point:
            return str(r.randint(-4, 5))
        return r.choice(("2", "-1", "0.5", "-2.25", "3.0", "0", "math.nan", "math.inf"))

    def dim(self, s: torch.Tensor):
        return self.rng.randrange(-s.dim(), s.dim()) if s.dim() else self.rng.choice((0, -1))

    def fresh(self, shape, dtype) -> str:
        return f"src({self.rng.randrange(1 << 20)}, {tuple(shape)}, {dtype}).to(DEV)"

    def index(self, s: torch.Tensor) -> str:
        """A basic index: slices with steps, ints, None, Ellipsis."""
        r = self.rng
        parts = []
        for d in range(s.dim()):
            if r.random() < 0.3 and parts:
                break
            n = s.shape[d]
            k = r.random()
            if k < 0.45:
                a, b = r.randint(-1, n), r.randint(0, n + 1)
                st = r.choice(("", ":2", ":3", ":1"))
                parts.append(f"{a if a >= 0 else ''}:{b}{st}")
            elif k < 0.65 and n:
                parts.append(str(r.randrange(-n, n) if r.random() < 0.95 else n))
            elif k < 0.75:
                parts.append("None")
            elif k < 0.8:
                parts.append("...")
            else:
                parts.append(":")
        if not parts:
            parts = ["..."] if r.random() < 0.5 else ["None"]
        # One Ellipsis at most: libtorch's CPU indexing takes a second one, and every other device
        # (meta too) refuses it, so it is no difference of the tensorref device's (seed 799).
        first = parts.index("...") if "..." in parts else len(parts)
        parts = parts[:first + 1] + [":" if p == "..." else p for p in parts[first + 1:]]
        return "[" + ", ".join(parts) + "]"

    def tindex(self, n: str, s: torch.Tensor) -> str:
        """An advanced index: an int64 tensor of the device, a bool mask, or a list."""
        r = self.rng
        k = r.random()
        if k < 0.4 and s.dim():
            return f"[idx({r.randrange(1 << 20)}, ({r.randint(0, 4)},), {s.shape[0]}).to(DEV)]"
        if k < 0.7 and s.dtype != torch.bool:
            return f"[{n} > 0]"
        if k < 0.85 and s.dim() >= 2:
            return f"[:, idx({r.randrange(1 << 20)}, ({r.randint(1, 3)},), {s.shape[1]}).to(DEV)]"
        return f"[[{', '.join(str(r.randrange(-1, max(s.shape[0], 1))) for _ in range(r.randint(1, 3)))}]]" if s.dim() else "[None]"

    def broadcastable(self, s: torch.Tensor, exclude=()):
        def ok(o):  # o broadcasts to s's shape
            return o.dim() <= s.dim() and all(y in (1, x) for x, y in zip(s.shape[::-1], o.shape[::-1]))
        return self.pick(ok, exclude)

    # ------------------------------------------------------------------ actions
    def gen(self) -> Action:
        r = self.rng
        if len(self.names) > MAX_LIVE or (self.names and r.random() < 0.08):
            k = r.randint(1, max(1, len(self.names) // 4))
            return Action("del " + ", ".join(r.sample(self.names, k)), kind="drop")
        if not self.names or r.random() < 0.12:
            a = self.make()
        else:
            makers = ((self.make, 8), (self.random_op, 3), (self.view, 16), (self.elementwise, 12),
                      (self.reduction, 7), (self.matmul, 4), (self.multi, 7), (self.misc, 9),
                      (self.inplace, 16), (self.out, 6), (self.read, 6), (self.autograd, 3),
                      (self.manager, 4)) + tuple((getattr(self, EXTRAS[e]), 5) for e in self.extras)
            a = None
            while a is None:
                a = r.choices([m for m, _ in makers], [w for _, w in makers])[0]()
        a.check = r.random() < self.check_p
        return a

    def make(self):
        r, t = self.rng, self.new()
        shape = self.shape()
        if r.random() < 0.05:
            shape = r.choice(((32, 64), (64, 64), (16, 16, 16)))
        dt = self.dtype()
        k = r.randrange(8)
        code = [f"{t} = {self.fresh(shape, dt)}",
                f"{t} = torch.zeros({shape}, dtype={dt}, device=DEV)",
                f"{t} = torch.ones({shape}, dtype={dt}, device=DEV)",
                f"{t} = torch.empty({shape}, dtype={dt}, device=DEV).fill_({self.scalar(torch.empty(0, dtype=dt))})",
                f"{t} = torch.arange({r.randint(0, 40)}, dtype={dt if dt != torch.bool else torch.int64}, device=DEV)",
                f"{t} = torch.full({shape}, {self.scalar(torch.empty(0, dtype=dt))}, dtype={dt}, device=DEV)",
                f"{t} = torch.tensor({src(r.randrange(1 << 20), (r.randint(0, 5),), dt).tolist()}, dtype={dt}, device=DEV)",
                f"{t} = src({r.randrange(1 << 20)}, {shape}, {dt}).to(DEV, non_blocking=True)"][k]
        return Action(code, [t])

    def random_op(self):
        r, t, k = self.rng, self.new(), self.rng.randrange(1 << 16)
        shape = self.shape()
        a = self.pick(lambda s: s.dtype.is_floating_point)
        choices = [f"torch.manual_seed({k}); {t} = torch.rand({shape}, device=DEV)",
                   f"torch.manual_seed({k}); {t} = torch.randn({shape}, dtype={self.dtype(True)}, device=DEV)",
                   f"torch.manual_seed({k}); {t} = torch.randint(-5, 5, {shape}, device=DEV)",
                   f"torch.manual_seed({k}); {t} = torch.randperm({r.randint(0, 30)}, device=DEV)"]
        if a:
            choices += [f"torch.manual_seed({k}); {t} = F.dropout({a}, p={r.choice((0.1, 0.5, 0.9))})",
                        f"torch.manual_seed({k}); {t} = torch.bernoulli(torch.full_like({a}, 0.3))",
                        f"torch.manual_seed({k}); {t} = {a}.clone().uniform_(-1, 1)",
                        f"torch.manual_seed({k}); {t} = torch.normal(0.0, 1.0, {shape}, device=DEV)"]
            b = self.pick(lambda s: s.dtype.is_floating_point and s.dim() == 2 and s.shape[1] > 0)
            if b:
                choices.append(f"torch.manual_seed({k}); {t} = torch.multinomial({b}.abs().nan_to_num(1.0, 1.0, 1.0) + 0.1, 2, replacement=True)")
        return Action(r.choice(choices), [t])

    def view(self):
        r = self.rng
        a = self.pick()
        s, t = self.S(a), self.new()
        nd = s.dim()
        k = r.randrange(17)
        if k == 0:
            code = f"{t} = {a}{self.index(s)}"
        elif k == 1 and nd <= 2:
            code = f"{t} = {a}.t()"
        elif k == 2 and nd:
            code = f"{t} = {a}.transpose({self.dim(s)}, {self.dim(s)})"
        elif k == 3:
            p = list(range(nd))
            r.shuffle(p)
            code = f"{t} = {a}.permute({p})"
        elif k in (4, 5):
            n = s.numel()
            divs = [d for d in range(1, n + 1) if n % d == 0] or [1]
            d = r.choice(divs)
            new = r.choice(([-1], [d, -1], [n // d, d], [1, n], [n, 1, 1]))
            code = f"{t} = {a}.{'view' if k == 4 else 'reshape'}({new})"
        elif k == 6:
            shape = [r.choice((1, 2, 3)) if x == 1 else x for x in s.shape]
            lead = [r.choice((1, 2))] if r.random() < 0.5 else []
            code = f"{t} = {a}.expand({lead + shape})"
        elif k == 7:
            code = f"{t} = {a}.unsqueeze({r.randint(-nd - 1, nd)})"
        elif k == 8:
            code = f"{t} = {a}.squeeze({self.dim(s) if nd and r.random() < 0.6 else ''})"
        elif k == 9 and nd:
            d = self.dim(s)
            st = r.randint(0, s.shape[d])
            code = f"{t} = {a}.narrow({d}, {st}, {r.randint(0, s.shape[d] - st)})"
        elif k == 10 and nd:
            d = self.dim(s)
            code = f"{t} = {a}.select({d}, {r.randrange(-s.shape[d], s.shape[d]) if s.shape[d] else 0})"
        elif k == 11 and nd >= 2:
            code = f"{t} = {a}.diagonal({r.randint(-1, 1)}, {self.dim(s)}, {self.dim(s)})"
        elif k == 12 and nd:
            d = self.dim(s)
            code = f"{t} = {a}.unfold({d}, {r.randint(1, max(1, s.shape[d]))}, {r.randint(1, 2)})"
        elif k == 13:
            n = s.untyped_storage().nbytes() // s.element_size()
            if n == 0:
                return None
            nd2 = r.randint(1, 2)
            size = [r.randint(1, 4) for _ in range(nd2)]
            stride = [r.randint(0, 3) for _ in range(nd2)]
            while sum((z - 1) * st for z, st in zip(size, stride)) >= n:
                size = [max(1, z - 1) for z in size]
                stride = [max(0, st - 1) for st in stride]
            off = r.randrange(0, n - sum((z - 1) * st for z, st in zip(size, stride)))
            code = f"{t} = {a}.as_strided({size}, {stride}, {off})"
        elif k == 14:
            to = {torch.float32: torch.int32, torch.int32: torch.float32, torch.float64: torch.int64,
                  torch.int64: torch.float64, torch.float16: torch.bfloat16, torch.bfloat16: torch.float16,
                  torch.bool: torch.uint8, torch.complex64: torch.float64,
                  torch.complex128: torch.complex64}.get(s.dtype) or {1: torch.bool, 2: torch.float16}[s.element_size()]
            if r.random() < 0.3 and 2 <= s.element_size() <= 8:
                to = {2: torch.bool, 4: torch.float16, 8: torch.int32}[s.element_size()]
            code = f"{t} = {a}.view({to})"
        elif k == 15:
            code = f"{t} = {a}{self.tindex(a, s)}"  # advanced: a copy
        elif k == 16:
            code = f"{t} = {a}.flatten()" if r.random() < 0.5 else f"{t} = {a}.movedim(0, -1)" if nd else f"{t} = {a}.view(1)"
        else:
            code = f"{t} = {a}[...]"
        return Action(code, [t])

    def elementwise(self):
        r = self.rng
        a = self.pick()
        s, t = self.S(a), self.new()
        fl = s.dtype.is_floating_point
        k = r.randrange(7)
        if k == 0:
            ops = (("neg", "exp", "abs", "sqrt", "sin", "tanh", "sigmoid", "floor", "sign", "reciprocal",
                    "log1p", "round", "trunc", "isnan", "nan_to_num", "erf", "rsqrt", "frac")
                   if fl else ("neg", "abs", "sign", "bitwise_not", "logical_not", "square"))
            code = f"{t} = torch.{r.choice(ops)}({a})"
        elif k in (1, 2):
            op = r.choice(("add", "sub", "mul", "div", "maximum", "minimum", "remainder", "pow", "atan2",
                           "eq", "lt", "logical_and", "bitwise_and", "fmod", "hypot", "floor_divide"))
            b = self.broadcastable(s) if r.random() < 0.7 else None
            other = b or r.choice((self.scalar(s), f"torch.tensor({self.scalar(s)})", self.fresh(s.shape, self.dtype())))
            code = f"{t} = torch.{op}({a}, {other})"
            if op in ("add", "sub") and r.random() < 0.3:
                code = code[:-1] + ", alpha=2)"
        elif k == 3:
            b = self.broadcastable(s) or a
            code = f"{t} = torch.where({a} > 0, {a}, {b})" if s.dtype != torch.bool else f"{t} = torch.where({a}, {b}, {self.scalar(s)})"
        elif k == 4:
            lo, hi = sorted((r.randint(-3, 2), r.randint(-2, 3)))
            code = f"{t} = torch.clamp({a}, min={lo}, max={hi})" if r.random() < 0.7 else f"{t} = {a}.clamp(max={hi})"
        elif k == 5 and fl:
            code = r.choice((f"{t} = F.relu({a})", f"{t} = F.gelu({a})", f"{t} = F.silu({a})",
                             f"{t} = torch.lerp({a}, {self.broadcastable(s) or a}, 0.25)",
                             f"{t} = torch.addcmul({a}, {a}, {self.broadcastable(s) or a}, value=0.5)"))
        else:
            code = f"{t} = {a}.to({self.dtype()})"
        return Action(code, [t])

    def reduction(self):
        r = self.rng
        a = self.pick()
        s, t = self.S(a), self.new()
        d = self.dim(s)
        kd = r.random() < 0.3
        fl = s.dtype.is_floating_point
        op = r.choice(("sum", "sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "any", "all", "var",
                       "logsumexp", "std", "norm", "count_nonzero", "nansum", "cumsum", "cumprod", "softmax",
                       "log_softmax", "layer_norm", "flip", "roll", "tril", "repeat"))
        if op in ("sum", "amax", "amin") and s.dim() >= 2 and r.random() < 0.3:
            code = f"{t} = {a}.{op}(dim=(0, -1), keepdim={kd})"
        elif op in ("sum", "mean", "prod", "norm", "std", "nansum") and r.random() < 0.3:
            code = f"{t} = {a}.{op}()"
        elif op in ("cumsum", "cumprod", "softmax", "log_softmax"):
            code = f"{t} = torch.{op}({a}, {d})" if op[0] == "c" or fl else f"{t} = torch.{op}({a}, {d}, dtype=torch.float32)"
        elif op == "layer_norm":
            k = r.randint(1, max(1, s.dim()))
            w = self.pick(lambda o: o.shape == s.shape[-k:] and o.dtype == s.dtype) if r.random() < 0.5 else None
            code = f"{t} = F.layer_norm({a}, {a}.shape[-{k}:]{', ' + w if w else ''})" if s.dim() else f"{t} = F.layer_norm({a}, ())"
        elif op == "flip":
            code = f"{t} = {a}.flip({d})"
        elif op == "roll":
            code = f"{t} = {a}.roll({r.randint(-3, 3)}, {d})"
        elif op == "tril":
            code = f"{t} = {a}.{r.choice(('tril', 'triu'))}({r.randint(-1, 1)})"
        elif op == "repeat":
            code = f"{t} = {a}.repeat({[r.randint(1, 2) for _ in range(s.dim() + r.randint(0, 1))]})"
        elif op == "count_nonzero":
            code = f"{t} = torch.count_nonzero({a}, {d})"
        else:
            code = f"{t} = {a}.{op}({d}, keepdim={kd})" if op not in ("norm", "logsumexp", "std", "var") or fl else f"{t} = {a}.float().{op}({d})"
        return Action(code, [t])

    def matmul(self):
        r = self.rng
        a = self.pick(lambda s: s.dtype.is_floating_point and 1 <= s.dim() <= 3)
        if a is None:
            return None
        s, t = self.S(a), self.new()
        k = s.shape[-1]
        b = self.pick(lambda o: o.dtype == s.dtype and o.dim() in (1, 2) and o.shape[0] == k)
        other = b or (f"{a}.mT" if s.dim() >= 2 and r.random() < 0.5 else self.fresh((k, r.randint(1, 5)), s.dtype))
        if s.dim() == 3:
            code = r.choice((f"{t} = torch.bmm({a}, {a}.transpose(1, 2))", f"{t} = {a} @ {other}"))
        elif s.dim() == 2:
            code = r.choice((f"{t} = torch.mm({a}, {other})", f"{t} = {a} @ {other}",
                             f"{t} = F.linear({a}, {self.fresh((r.randint(1, 4), k), s.dtype)})",
                             f"{t} = torch.addmm({a}.new_ones(1), {a}, {other})"))
        else:
            code = f"{t} = torch.matmul({a}, {other})"
        return Action(code, [t])

    def convolution(self):
        """A convolution of a float tensor of 3 or 4 dims (1-d or 2-d), with a fresh weight: strided,
        padded, grouped, with a bias or not, or transposed; or its gradients."""
        r = self.rng
        a = self.pick(lambda s: s.dtype in (torch.float32, torch.float64) and s.dim() in (3, 4) and s.numel())
        if a is None:
            return None
        s, t = self.S(a), self.new()
        n, c = s.dim() - 2, s.shape[1]
        groups = r.choice([g for g in (1, 2, 3) if c % g == 0])
        out = groups * r.randint(1, 3)
        kernel = tuple(r.randint(1, min(3, size)) for size in s.shape[2:])
        if r.random() < 0.3:
            weight = self.fresh((c, out // groups, *kernel), s.dtype)
            code = f"{t} = F.conv_transpose{n}d({a}, {weight}, stride={r.randint(1, 2)}, groups={groups})"
        else:
            weight = self.fresh((out, c // groups, *kernel), s.dtype)
            bias = self.fresh((out,), s.dtype) if r.random() < 0.5 else None
            code = f"{t} = F.conv{n}d({a}, {weight}, {bias}, stride={r.randint(1, 2)}, padding={r.randint(0, 1)}, groups={groups})"
        if r.random() < 0.3:
            lines = [f"_a = {a}.detach().clone().nan_to_num(0.5, 1.0, -1.0).requires_grad_()",
                     f"_w = {self.fresh((out, c // groups, *kernel), s.dtype)}.requires_grad_()",
                     f"_y = F.conv{n}d(_a, _w, groups={groups}).square().sum()", "_y.backward()", "v = (_y.detach(), _a.grad, _w.grad)"]
            return Action("\n".join(lines), vals=["v"])
        return Action(code, [t])

    def lazy_bits(self):
        """Complex tensors and their lazy views: `conj()` and a negative view set a bit the kernels
        read (`mm`, `dot`, `copy_` ...), not the storage; ops over them, in-place writes through
        them, copies into and out of them, and their results' bits (`vdot` returns a conj view)."""
        r = self.rng
        a = self.pick(lambda s: s.dtype.is_complex)
        if a is None or r.random() < 0.2:
            t, shape = self.new(), self.shape(max_numel=24)
            seeds = (r.randrange(1 << 20), r.randrange(1 << 20))
            dtype = r.choice(("torch.float32", "torch.float64"))
            return Action(f"{t} = torch.complex(src({seeds[0]}, {shape}, {dtype}), src({seeds[1]}, {shape}, {dtype})).to(DEV)", [t])
        s, t = self.S(a), self.new()
        flat = f"{a}.flatten()"
        k = r.randrange(12)
        if k == 0:
            code = f"{t} = {a}.conj()"
        elif k == 1:
            code = f"{t} = torch._neg_view({a})"
        elif k == 2 and s.dim() == 2:
            code = r.choice((f"{t} = {a} @ {a}.mH", f"{t} = torch.mm({a}.conj(), {a}.mT)", f"{t} = torch.addmm({a}[:, :1], {a}, {a}.mH)"))
        elif k == 3:
            code = r.choice((f"{t} = torch.vdot({flat}, {flat}.conj())", f"{t} = torch.dot({flat}.conj(), {flat})",
                             f"{t} = torch.vdot({flat}.conj(), {flat})"))
        elif k == 4:
            code = f"{t} = {a}.{r.choice(('conj().clone()', 'conj().resolve_conj()', 'conj().contiguous()', 'conj_physical()'))}"
        elif k == 5:
            code = f"{a}.conj().mul_({self.scalar()})\n{t} = {a}.conj()"
        elif k == 6:
            code = f"{t} = {a}.clone()\n{t}.conj().copy_({a})"
        elif k == 7:
            code = f"{t} = {a}.conj() * {self.scalar()} + torch._neg_view({a})"
        elif k == 8:
            code = f"{t} = torch.view_as_real({a}{'.conj()' if r.random() < 0.5 else ''})"
        elif k == 9:
            code = f"{t} = {a}.conj().{r.choice(('sum', 'abs', 'exp', 'sqrt', 'angle'))}()"
        elif k == 10:
            code = f"{t} = {a}.conj().to(torch.complex128 if {a}.dtype == torch.complex64 else torch.complex64)"
        else:  # (not through .cpu(): on the shadow's side it is the tensor itself, a view)
            code = f"{t} = {a}.conj().detach()"
        return Action(code, [t])

    def forward_ad(self):
        """Forward-mode AD, whose zero tangents are ZeroTensors (zeros with no memory): jvp and
        jacfwd of float tensors, and ZeroTensors themselves under views, ops that take them as they
        are (dot, copy_ from one, clone, mul by a number) and ops that make them real."""
        r = self.rng
        a = self.pick(lambda s: s.dtype in (torch.float32, torch.float64) and 1 <= s.numel() <= 24)
        if a is None:
            return None
        s, t = self.S(a), self.new()
        k = r.randrange(6)
        if k == 0:
            f = r.choice(("x.sin() * x", "(x * 2).exp().sum()", "torch.where(x > 0, x, x * 0.5)", "x.cumsum(0) if x.dim() else x"))
            return Action(f"{t} = torch.func.jvp(lambda x: {f}, ({a},), (torch.ones_like({a}),))[1]", [t])
        if k == 1:
            return Action(f"{t} = torch.func.jacfwd(lambda x: (x.tanh() * x).flatten())({a}.detach())", [t])
        zero = f"torch._efficientzerotensor({tuple(s.shape)}, dtype={s.dtype}, device=DEV)"
        if k == 2:
            op = r.choice(("{z}.flatten()[:2]", "{z} + {a}", "{z} * {a}", "{z}.clone()", "{z} * 3",
                           "torch.dot({z}.flatten(), {a}.flatten())", "{z}.t() if {z}.dim() == 2 else {z}.unsqueeze(0)"))
            # (cloned: on the CPU a ZeroTensor refuses tolist(), which reads its memory; CUDA's and
            # the device's copy it to the host first)
            return Action(f"_z = {zero}\n{t} = ({op.format(z='_z', a=a)}).clone()", [t])
        if k == 3:
            return Action(f"{t} = {a}.clone()\n{t}.copy_({zero})", [t])
        if k == 4:
            return Action(f"v = {zero}.sum().item()", vals=["v"])
        return Action(f"v = ({zero} + {a}).sum().item()", vals=["v"])

    def multi(self):
        r = self.rng
        a = self.pick()
        s = self.S(a)
        nd = s.dim()
        d = self.dim(s)
        k = r.randrange(10)
        one = False  # the call returns one tensor, not a tuple
        if k == 0:
            same = [n for n in self.names if self.S(n).shape == s.shape][:2]
            code, outs, one = f"torch.stack([{a}, {', '.join(same)}], {r.randint(-nd - 1, nd)})", 1, True
        elif k == 1 and nd:
            same = [n for n in self.names if self.S(n).dim() == nd and all(
                x == y for i, (x, y) in enumerate(zip(self.S(n).shape, s.shape)) if i != d % nd)][:3]
            code, outs, one = f"torch.cat([{', '.join(same)}], {d})", 1, True
        elif k == 2 and nd:
            sz = r.randint(1, 3)
            code, outs = f"torch.split({a}, {sz}, {d})", len(torch.split(s, sz, d))
        elif k == 3 and nd:
            c = r.randint(1, 3)
            code, outs = f"torch.chunk({a}, {c}, {d})", len(torch.chunk(s, c, d))
        elif k == 4:
            code, outs = f"torch.sort({a}, dim={d}, descending={r.random() < 0.5}, stable={r.random() < 0.5})", 2
        elif k == 5 and nd:
            code, outs = f"torch.topk({a}, {r.randint(0, s.shape[d])}, dim={d}, largest={r.random() < 0.5})", 2
        elif k == 6:
            fn = r.choice(("max", "min", "cummax", "median", "kthvalue", "mode"))
            # The CPU's median reads past an expanded (stride 0) input: it gets its own copy.
            code, outs = f"torch.{fn}({a}{'.contiguous()' if fn == 'median' else ''}, {'1, ' if fn == 'kthvalue' else ''}{d})", 2
        elif k == 7:
            code, outs = f"torch.unique({a}, sorted=True, return_inverse=True, return_counts=True)", 3
            if r.random() < 0.3 and nd:
                code = f"torch.unique({a}, dim={d}, return_inverse=True, return_counts=True)"
        elif k == 8:
            code, outs = f"torch.nonzero({a}, as_tuple=True)", max(nd, 1)
            if r.random() < 0.5:
                code, outs, one = f"torch.nonzero({a})", 1, True
        elif nd:
            code, outs = f"{a}.unbind({d})", s.shape[d]
        else:
            return None
        names = [self.new() for _ in range(outs)]
        lhs = names[0] if one else ", ".join(names) + ("," if outs == 1 else "")
        return Action(f"{lhs} = {code}" if names else f"_ = {code}", names)

    def misc(self):
        r = self.rng
        a = self.pick()
        s, t = self.S(a), self.new()
        k = r.randrange(12)
        if k == 0:
            code = f"{t} = {a}.clone()"
        elif k == 1:
            code = f"{t} = {a}.contiguous()"
        elif k == 2:
            code = f"{t} = {a}.to(DEV)"
        elif k == 3 and s.dim() and s.shape[0]:
            w = self.pick(lambda o: o.dim() == 2 and o.dtype.is_floating_point)
            if w is None:
                return None
            code = f"{t} = F.embedding(idx({r.randrange(1 << 20)}, {self.shape(12)}, {self.S(w).shape[0]}).to(DEV), {w})"
        elif k == 4 and s.dim():
            d = self.dim(s)
            code = f"{t} = torch.index_select({a}, {d}, idx({r.randrange(1 << 20)}, ({r.randint(0, 4)},), {s.shape[d]}).to(DEV))"
        elif k == 5 and s.dim():
            d = self.dim(s)
            shp = tuple(min(x, r.randint(0, x)) if i != d % s.dim() else r.randint(0, 4) for i, x in enumerate(s.shape))
            code = f"{t} = torch.gather({a}, {d}, idx({r.randrange(1 << 20)}, {shp}, {s.shape[d]}).to(DEV))"
        elif k == 6 and s.dim():
            d = self.dim(s)
            shp = tuple(min(x, r.randint(0, x)) for x in s.shape)
            fn = r.choice(("scatter", "scatter_add"))
            val = self.fresh(shp, s.dtype)
            code = f"{t} = torch.{fn}({a}, {d}, idx({r.randrange(1 << 20)}, {shp}, {s.shape[d]}).to(DEV), {val})"
        elif k == 7:
            m = self.pick(lambda o: o.dtype == torch.bool and o.shape == s.shape)
            code = f"{t} = {a}.masked_fill({m or f'{a} != 0'}, {self.scalar(s)})"
        elif k == 8:
            code = r.choice((f"{t} = torch.zeros_like({a})", f"{t} = torch.full_like({a}, {self.scalar(s)})",
                             f"{t} = {a}.new_ones({self.shape()})", f"{t} = torch.empty_like({a}).copy_({a})",
                             f"{t} = torch.ones_like({a}, dtype={self.dtype()})"))
        elif k == 9 and s.dtype.is_floating_point:
            code = f"{t} = torch.histc({a}.float(), {r.randint(1, 6)}, -2, 2)"
        elif k == 10 and s.dim() == 1 and not s.dtype.is_floating_point and s.dtype != torch.bool:
            code = f"{t} = torch.bincount({a}.clamp(0, 63))"  # its length is the largest value
        else:
            code = f"{t} = {a}.double()"
        return Action(code, [t])

    def inplace(self):
        r = self.rng
        a = self.pick()
        s = self.S(a)
        k = r.randrange(20)
        b = self.broadcastable(s, exclude=()) if r.random() < 0.7 else None
        if k < 2:
            op = r.choice(("add_", "sub_", "mul_", "div_", "clamp_", "neg_", "abs_", "exp_"))
            if op == "clamp_":
                code = f"{a}.clamp_({r.randint(-3, 0)}, {r.randint(0, 3)})"
            elif op in ("neg_", "abs_", "exp_"):
                code = f"{a}.{op}()"
            else:
                code = f"{a}.{op}({b or self.scalar(s)})"
        elif k == 2:
            code = f"{a}.copy_({b or self.fresh(s.shape, self.dtype())})"
        elif k == 3:
            # .clone(): on the CPU side .cpu() is the tensor itself, which copy_ skips.
            code = f"{a}.copy_({self.fresh(s.shape, self.dtype())}.cpu())" if r.random() < 0.5 else f"{a}.copy_({b or a}.cpu().clone())"
        elif k == 4:
            code = f"{a}.fill_({self.scalar(s)})" if r.random() < 0.7 else f"{a}.zero_()"
        elif k in (5, 6, 7):
            idx_ = self.index(s) if r.random() < 0.6 else self.tindex(a, s)
            val = r.choice((self.scalar(s), b or self.scalar(s), f"{b or a}.sum()"))
            # The CPU fills from a 0-dim CPU value (through a Scalar); a device copies it, as
            # CUDA does: libtorch's overlap check refuses a copy within one storage, and a cast's
            # NaN payload may differ from the Scalar's. Not compared.
            if val in self.names and self.S(val).dim() == 0 and (val in self.shares(a) | {a} or self.S(val).dtype != s.dtype):
                val += ".clone()" if self.S(val).dtype == s.dtype else ".item()"
            elif val.endswith(".sum()") and _sum_dtype(self.S(val[:-len(".sum()")]).dtype) != s.dtype:
                val += ".item()"
            code = f"{a}{idx_} = {val}"
        elif k == 8 and s.dim():
            acc = r.random() < 0.5
            code = (f"{a}.index_put_((idx({r.randrange(1 << 20)}, ({r.randint(0, 4)},), {s.shape[0]}).to(DEV),), "
                    f"{self.fresh((), s.dtype) if r.random() < 0.5 else 'torch.tensor(' + self.scalar(s) + ', dtype=' + str(s.dtype) + ', device=DEV)'}, accumulate={acc})")
        elif k == 9 and s.dim():
            d = self.dim(s)
            n = r.randint(0, 3)
            shp = list(s.shape)
            shp[d] = n
            code = f"{a}.index_add_({d}, idx({r.randrange(1 << 20)}, ({n},), {s.shape[d]}).to(DEV), {self.fresh(shp, s.dtype)})"
        elif k == 10 and s.dim():
            d = self.dim(s)
            shp = tuple(min(x, r.randint(0, x)) for x in s.shape)
            code = f"{a}.scatter_({d}, idx({r.randrange(1 << 20)}, {shp}, {s.shape[d]}).to(DEV), {self.fresh(shp, s.dtype)})"
        elif k == 11:
            code = f"{a}.masked_fill_({a} != 0, {self.scalar(s)})" if s.dtype != torch.bool else f"{a}.masked_fill_({a}, False)"
        elif k == 12:
            code = r.choice((f"{a}.t_()", f"{a}.unsqueeze_(0)", f"{a}.squeeze_()",
                             f"{a}.transpose_(0, -1)" if s.dim() else f"{a}.unsqueeze_(-1)"))
        elif k in (13, 14):
            # resize_: the elements past the storage's old end are undefined: zero them at once.
            shape = self.shape(120)
            old = s.untyped_storage().nbytes() // s.element_size() - s.storage_offset()
            code = f"{a}.resize_({shape})"
            if math.prod(shape) > max(old, 0):
                code += f"; {a}.view(-1)[{max(old, 0)}:].zero_()"
        elif k == 15:
            o = self.pick(lambda o: o.dtype == s.dtype)
            code = f"{a}.set_({o})" if r.random() < 0.8 else f"{a}.set_()"
        elif k == 16 and s.dtype.is_floating_point:
            code = f"torch.manual_seed({r.randrange(1 << 16)}); {a}.{r.choice(('uniform_()', 'normal_()', 'bernoulli_(0.5)', 'exponential_()'))}"
        elif k == 17:
            code = f"{a}.copy_({a}.flip(0))" if s.dim() else f"{a}.copy_({a})"
        elif k == 18 and s.dim():
            code = f"{a}.index_fill_({self.dim(s)}, idx({r.randrange(1 << 20)}, (2,), {s.shape[0]}).to(DEV), {self.scalar(s)})"
        else:
            code = f"{a}.add_({a}{self.index(s)}.sum())" if s.dtype != torch.bool else f"{a}.logical_not_()"
        return Action(code)

    def out(self):
        r = self.rng
        a = self.pick()
        s = self.S(a)
        c = self.pick() if r.random() < 0.8 else None
        t = None
        if c is None:
            c = t = self.new()
        b = self.broadcastable(s) or self.scalar(s)
        k = r.randrange(8)
        call = [f"torch.add({a}, {b}, out={c})", f"torch.mul({a}, {b}, out={c})", f"torch.neg({a}, out={c})",
                f"torch.sum({a}, {self.dim(s)}, out={c})", f"torch.cat([{a}, {a}], out={c})",
                f"torch.clamp({a}, -1, 1, out={c})", f"torch.where({a} != 0, {a}, {b}, out={c})",
                f"torch.index_select({a}, 0, idx({r.randrange(1 << 20)}, (3,), {s.shape[0] if s.dim() else 1}).to(DEV), out={c})"][k]
        if t is not None:
            dt = s.dtype if r.random() < 0.8 else self.dtype()
            return Action(f"{t} = torch.empty({r.choice(((0,), (1,), s.shape))}, dtype={dt}, device=DEV).zero_(); {call}", [t])
        if k == 4 and r.random() < 0.3:
            i = self.pick(lambda o: o.dtype == torch.int64, exclude=(c,))
            if i:
                call = f"torch.sort({a}, {self.dim(s)}, out=({c}, {i}))"
                return Action(call)
        return Action(call)

    def read(self):
        r = self.rng
        a = self.pick()
        s = self.S(a)
        k = r.randrange(8)
        b = self.pick(lambda o: o.shape == s.shape) or a
        code = [f"v = {a}.item()" if s.numel() == 1 or r.random() < 0.1 else f"v = {a}.sum().item()",
                f"v = {a}.tolist()", f"v = torch.equal({a}, {b})", f"v = {a}.cpu()",
                f"v = {a}.to('cpu', torch.float64)", f"v = bool({a}.any())", f"v = {a}.is_contiguous()",
                f"v = {a}.max().item()" if s.numel() else f"v = len({a})"][k]
        return Action(code, vals=["v"])

    def autograd(self):
        r = self.rng
        a = self.pick(lambda s: s.dtype in (torch.float32, torch.float64) and s.numel())
        if a is None:
            return None
        s = self.S(a)
        b = self.pick(lambda o: o.dtype == s.dtype and o.shape == s.shape, exclude=(a,))
        body = r.choice(["(_a * _a).sum()", "_a.exp().mean()", "_a[..., ::2].tanh().sum()",
                         "torch.where(_a > 0, _a, _a * 0.1).sum()", "_a.abs().amax()", "torch.cumsum(_a.flatten(), 0).sum()"]
                        + (["F.softmax(_a, -1).pow(2).sum()", "F.layer_norm(_a, _a.shape[-1:]).sum()"] if s.dim() else [])
                        + (["(_a @ _a.mT).sum()"] if s.dim() == 2 else []))
        lines = [f"_a = {a}.detach().clone().nan_to_num(0.5, 1.0, -1.0).requires_grad_()"]
        if b:
            lines.append(f"_b = {b}.detach().clone().nan_to_num(0.5, 1.0, -1.0).requires_grad_()")
            body = f"({body} + (_a * _b).sum())"
        lines += [f"_y = {body}", "_y.backward()", "v = (_y.detach(), _a.grad" + (", _b.grad)" if b else ")")]
        return Action("\n".join(lines), vals=["v"])

    def configure(self, policy: str, budget: int) -> str:
        """The arguments of a session or configure call: Resident with no budget, a bounded
        policy with `budget` and a recomputation mode."""
        if policy == "resident":
            return "policy='resident', budget_bytes=0"
        recompute = self.recompute_rng.choice(("off", "off", "cheaper", "always"))
        return f"policy={policy!r}, budget_bytes={budget}" + ("" if recompute == "off" else f", recompute={recompute!r}")

    def manager(self):
        r = self.rng
        k = r.random()
        policy = r.choice(self.policies)
        budget = r.choice(BUDGETS)
        if k < 0.35 and residency.enabled():
            return Action("residency.mark_iteration()", kind="manager", manager=["mark"])
        if k < 0.55 and policy != "none":
            op = None
            while op is None or op.kind != "op" or "\n" in op.code:
                op = r.choice((self.elementwise, self.reduction, self.inplace, self.view))()
            b = budget if policy != "resident" else 0
            op.code = f"with residency.session({self.configure(policy, b)}):\n    {op.code}"
            op.budget = b or None
            return op
        if policy == "none":
            return Action("residency.disable()", kind="manager", manager=["disable"])
        b = budget if policy != "resident" else 0
        return Action(f"residency.configure({self.configure(policy, b)})", kind="manager",
                      manager=["configure", policy, b])

    # ------------------------------------------------------------------ running
    def execute(self, a: Action) -> None:
        self.step += 1
        self.history.append(a.code + ("   # [c]" if a.check else ""))
        dev, cpu = self.env["dev"], self.env["cpu"]
        if a.kind == "drop":
            for n in a.code[4:].split(", "):
                if n in self.names:
                    self.names.remove(n)
                    del dev[n], cpu[n]  # freed now: nothing else refers to them
        elif a.kind == "manager":
            if a.manager[0] == "mark" and not residency.enabled():
                return
            exec(a.code, dev)  # noqa: S102
            if a.manager[0] == "configure":
                self.policy = a.manager[1]
                self.budget = a.manager[2] or None
            elif a.manager[0] == "disable":
                self.policy, self.budget = "none", None
        else:
            self.run_op(a)
        self.count_remade()
        self.check_budget()
        if a.check:
            self.check_all()

    def _exec(self, a: Action, side: str):
        try:
            exec(a.code, self.env[side])  # noqa: S102
            return None
        except Exception as e:  # noqa: BLE001
            return e

    def _clean(self, names) -> None:
        for env in self.env.values():
            for n in [n for n in env if n not in self.fixed and n not in self.names]:
                del env[n]

    def run_op(self, a: Action) -> None:
        budget = a.budget if a.budget is not None or "residency.session" in a.code else self.budget
        e_dev = self._exec(a, "dev")
        if e_dev is not None and _oom_allowed(e_dev, budget):
            self.skipped += 1
            self._clean(a.outs)
            self.check_all()  # nothing changed
            return
        e_cpu = self._exec(a, "cpu")
        try:
            if e_dev is not None and e_cpu is None:
                raise Failure(f"raises only on the device: {type(e_dev).__name__}",
                              "".join(traceback.format_exception_only(type(e_dev), e_dev)).strip())
            if e_cpu is not None and e_dev is None:
                raise Failure(f"raises only on the CPU: {type(e_cpu).__name__}", str(e_cpu))
            if e_dev is not None and type(e_dev) is not type(e_cpu):
                raise Failure("raises another exception on the device",
                              f"device {type(e_dev).__name__}: {e_dev}; CPU {type(e_cpu).__name__}: {e_cpu}")
            if e_dev is not None:
                # Both raised: libtorch may have changed an argument before raising (an out=
                # resized, then a bad dim), the device does not: the tensors named, and the
                # other names of the same tensors, are dropped.
                named = set(re.findall(r"\bt\d+\b", a.code)) & set(self.names)
                same = {id(self.S(n)) for n in named}
                for n in [n for n in self.names if n in named or id(self.S(n)) in same]:
                    self.names.remove(n)
                    del self.env["dev"][n], self.env["cpu"][n]
            else:
                dev, cpu = self.env["dev"], self.env["cpu"]
                for n in a.outs:
                    d, c = dev.get(n), cpu.get(n)
                    if not isinstance(c, torch.Tensor) or not isinstance(d, torch.Tensor) or d.device.type != "tensorref":
                        raise Failure("not a tensorref tensor", f"{n}: device side {type(d).__name__} "
                                      f"{getattr(d, 'device', '')}, CPU side {type(c).__name__}")
                    self.names.append(n)
                    self.compare(n, d, c)
                for v in a.vals:
                    self.compare_value(v, dev.get(v), cpu.get(v))
        finally:
            self._clean(a.outs)

    # ------------------------------------------------------------------ checks
    def read_dev(self, name: str, d: torch.Tensor):
        """`d` on the host, or None where the budget cannot hold its storage."""
        try:
            return d.detach().cpu()
        except torch.OutOfMemoryError as e:
            if _oom_allowed(e, self.budget):
                return None
            raise Failure("reading a tensor failed", f"{name}: {e}") from None
        except Exception as e:  # noqa: BLE001
            raise Failure("reading a tensor failed", f"{name}: {type(e).__name__}: {e}") from None

    def compare(self, name: str, d: torch.Tensor, c: torch.Tensor) -> None:
        for what, x, y in (("dtype", d.dtype, c.dtype), ("shape", tuple(d.shape), tuple(c.shape)),
                           ("strides", d.stride(), c.stride()), ("storage offset", d.storage_offset(), c.storage_offset()),
                           ("is a view", d._is_view(), c._is_view()), ("requires_grad", d.requires_grad, c.requires_grad),
                           ("conj bit", d.is_conj(), c.is_conj()), ("neg bit", d.is_neg(), c.is_neg())):
            if x != y:
                raise Failure(f"{what} differs", f"{name}: device {x}, CPU {y}")
        got = self.read_dev(name, d)  # resolved: .cpu() copies a view's bits into its values
        want = c.detach().resolve_conj().resolve_neg()
        if got is not None and not torch.equal(_bits(got), _bits(want)):
            raise Failure("values differ", f"{name}: {_first_diff(got, want)}")

    def compare_value(self, name: str, d, c) -> None:
        if isinstance(c, torch.Tensor):
            if not isinstance(d, torch.Tensor):
                raise Failure("values differ", f"{name}: device {type(d).__name__}, CPU tensor")
            # .cpu() of a CPU tensor is itself, a view; of a device tensor, a new one: strides
            # are compared for device tensors only.
            ours = d.device.type == "tensorref"
            for what, x, y in (("dtype", d.dtype, c.dtype), ("shape", tuple(d.shape), tuple(c.shape)),
                               ("strides", d.stride() if ours else None, c.stride() if ours else None)):
                if x != y:
                    raise Failure(f"{what} differs", f"{name}: device {x}, CPU {y}")
            got = self.read_dev(name, d) if ours else d.detach().resolve_conj().resolve_neg()
            want = c.detach().resolve_conj().resolve_neg()
            if got is not None and not torch.equal(_bits(got), _bits(want)):
                raise Failure("values differ", f"{name}: {_first_diff(got, want)}")
        elif isinstance(c, (list, tuple)):
            if not isinstance(d, (list, tuple)) or len(d) != len(c):
                raise Failure("values differ", f"{name}: device {d!r}, CPU {c!r}")
            for i, (x, y) in enumerate(zip(d, c)):
                self.compare_value(f"{name}[{i}]", x, y)
        elif isinstance(c, float):
            if not isinstance(d, float) or not (d == c and math.copysign(1, d) == math.copysign(1, c)
                                                or math.isnan(d) and math.isnan(c)):
                raise Failure("values differ", f"{name}: device {d!r}, CPU {c!r}")
        elif isinstance(c, complex):
            if not isinstance(d, complex):
                raise Failure("values differ", f"{name}: device {d!r}, CPU {c!r}")
            self.compare_value(f"{name}.real", d.real, c.real)
            self.compare_value(f"{name}.imag", d.imag, c.imag)
        elif type(d) is not type(c) or d != c:
            raise Failure("values differ", f"{name}: device {d!r}, CPU {c!r}")

    def check_all(self) -> None:
        dev, cpu = self.env["dev"], self.env["cpu"]
        owner: dict = {}
        back: dict = {}
        for n in self.names:
            self.compare(n, dev[n], cpu[n])
            kd, kc = _storage_key(dev[n]), _storage_key(cpu[n])
            if kd is None or kc is None:
                continue
            if owner.setdefault(kd, (kc, n))[0] != kc or back.setdefault(kc, (kd, n))[0] != kd:
                other = owner[kd][1] if owner[kd][0] != kc else back[kc][1]
                raise Failure("storage sharing differs",
                              f"{n} and {other} share a storage on {'the device' if owner[kd][0] != kc else 'the CPU'} only")

    def count_remade(self) -> None:
        """Adds the recomputations since the last step (a new manager starts its count at 0)."""
        now = residency.stats().recomputations if residency.enabled() else 0
        self.remade += max(0, now - self._remade_seen) if now >= self._remade_seen else now
        self._remade_seen = now

    def check_budget(self) -> None:
        if self.budget is None or not residency.enabled():
            return
        s = residency.stats()
        memory = residency.device_memory()
        scratch = memory.scratch_peak  # 0 unless kernels allocate as CUDA's (outside the budget there)
        if s.peak_device_bytes > self.budget or memory.peak > self.budget + scratch or s.device_bytes > self.budget:
            raise Failure("over the budget", f"budget {self.budget}: device_bytes {s.device_bytes}, "
                          f"peak_device_bytes {s.peak_device_bytes}, device_memory().peak {memory.peak} "
                          f"(kernels' scratch at most {scratch})")

    def report(self, f: Failure) -> str:
        tail = self.history[-HISTORY:]
        return (f"seed {self.seed}, step {self.step} ({self.policy}, budget {self.budget}): {f.category}\n  {f.detail}\n"
                f"  last {len(tail)} lines:\n" + "\n".join("    " + ln.replace("\n", "\n    ") for ln in tail))

    def close(self) -> None:
        for n in list(self.names):
            del self.env["dev"][n], self.env["cpu"][n]
        self.names.clear()
        if residency.enabled():
            residency.disable()
        gc.collect()


def run_seed(seed: int, steps: int, policies=POLICIES, actions=None, check_p=None, cuda_allocator=False, extras=()):
    """Runs `steps` generated actions of `seed` (or replays `actions`), with the simulated device's
    kernels allocating as CUDA's do where `cuda_allocator`, the families of `extras` among the
    actions. Returns the fuzzer, the failure (or None) and the actions run."""
    fz = Fuzzer(seed, policies, check_p, extras)
    residency.simulate_cuda_allocator(cuda_allocator)
    done: list[Action] = []
    failure = None
    quiet = warnings.catch_warnings()  # "An output with one or more elements was resized" ...
    quiet.__enter__()
    warnings.simplefilter("ignore")
    try:
        if fz.policies and fz.policies != ("none",):
            first = [p for p in fz.policies if p != "none"]
            p = fz.rng.choice(first)
            b = fz.rng.choice(BUDGETS) if p != "resident" else 0
            start = Action(f"residency.configure({fz.configure(p, b)})", kind="manager", manager=["configure", p, b])
        else:
            start = None
        todo = iter(actions) if actions is not None else None
        for i in range(len(actions) if actions is not None else steps + (start is not None)):
            a = next(todo) if todo is not None else (start if i == 0 and start is not None else fz.gen())
            done.append(a)
            if STEP_TIMEOUT:  # a hang prints every thread's stack and exits
                faulthandler.dump_traceback_later(STEP_TIMEOUT, exit=True)
            fz.execute(a)
        fz.check_all()
        fz.check_budget()
    except Failure as f:
        failure = f
    except Exception as e:  # noqa: BLE001  (the fuzzer's own lines must not fail otherwise)
        failure = Failure(f"unexpected {type(e).__name__}", "".join(traceback.format_exception(e))[-1500:])
    finally:
        faulthandler.cancel_dump_traceback_later()
        fz.close()
        residency.simulate_cuda_allocator(False)
        quiet.__exit__(None, None, None)
    return fz, failure, done


# ---------------------------------------------------------------------------- shrinking
def _replay_isolated(actions, policies, cuda_allocator) -> str | None:
    """The failure category of `actions` replayed in a child process ("crash: rc" when it dies)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([dataclasses.asdict(a) for a in actions], f)
    as_cuda = ["--cuda-allocator"] if cuda_allocator else []
    try:
        p = subprocess.run([sys.executable, __file__, "--replay", f.name, "--policy", ",".join(policies), *as_cuda],
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "hang"
    finally:
        os.unlink(f.name)
    if p.returncode not in (0, 1):
        return f"crash: {p.returncode}"
    last = p.stdout.strip().splitlines()[-1:] or [""]
    return last[0][len("CATEGORY "):] if last[0].startswith("CATEGORY ") else None


def script(actions, cuda_allocator=False) -> str:
    """A standalone reproducer: the lines on the device, then on the CPU, then the differences."""
    body = "\n".join("    try:\n" + "".join(f"        {ln}\n" for ln in a.code.split("\n")) +
                     f"    except Exception as e:\n        print({a.code.splitlines()[0]!r}, 'raised', type(e).__name__, e)"
                     for a in actions)
    return f'''# PYTHONPATH=. TENSORREF_LIB=../../target/debug/libtensorref.so ../../.venv/bin/python THIS.py  (in bindings/python)
import math
import tensorref  # noqa: F401
import torch
import torch.nn.functional as F
from tensorref import residency, torch_device
torch_device.register()
residency.simulate_cuda_allocator({cuda_allocator})
{PRELUDE}

class NoManager:
    class session:
        def __init__(self, **kw): pass
        def __enter__(self): return self
        def __exit__(self, *exc): return False
    configure = disable = mark_iteration = staticmethod(lambda *a, **k: None)


def run(DEV, residency):
{body}
    return {{k: v for k, v in locals().items() if k[0] in "tv" and k[1:].isdigit() or k == "v"}}


dev = run("tensorref", residency)
residency.disable()
cpu = run("cpu", NoManager)
for k, c in cpu.items():
    d = dev[k]
    if isinstance(c, torch.Tensor):
        print(k, "device", d.cpu(), d.stride(), "CPU", c, c.stride(), "equal:", torch.equal(d.cpu(), c))
    else:
        print(k, "device", d, "CPU", c)
'''


def shrink(seed, steps, policies=POLICIES, isolate=False, cuda_allocator=False, extras=(), budget_s=600):
    fz, failure, actions = run_seed(seed, steps, policies, cuda_allocator=cuda_allocator, extras=extras)
    if failure is None:
        print(f"seed {seed}: no failure in {steps} steps")
        return None
    cat = failure.category
    print(fz.report(failure))
    print(f"shrinking {len(actions)} lines ({cat}) ...", flush=True)

    def fails(cand):
        if isolate:
            return _replay_isolated(cand, policies, cuda_allocator) == cat
        f = run_seed(seed, 0, policies, actions=[dataclasses.replace(a) for a in cand], cuda_allocator=cuda_allocator)[1]
        return f is not None and f.category == cat

    acts, n, t0 = actions, 2, time.monotonic()
    while len(acts) >= 2 and time.monotonic() - t0 < budget_s:
        chunk = max(1, len(acts) // n)
        for i in range(0, len(acts), chunk):
            cand = acts[:i] + acts[i + chunk:]
            if cand and fails(cand):
                acts, n = cand, max(n - 1, 2)
                break
        else:
            if chunk == 1:
                break
            n = min(len(acts), n * 2)
    fz, f, _ = run_seed(seed, 0, policies, actions=acts, cuda_allocator=cuda_allocator)
    print(f"seed {seed}: {cat} minimised to {len(acts)} lines:")
    print("\n".join("    " + a.code.replace("\n", "\n    ") for a in acts))
    print(f"  -> {f}")
    print("\n# ---- reproducer\n" + script(acts, cuda_allocator))
    return acts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", help="a range A-B of seeds to run in this process")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--policy", default=",".join(POLICIES), help="managers to configure, comma-separated "
                    "(flow, genoa, resident; none: no manager)")
    ap.add_argument("--check-p", type=float, default=None, help="probability of checking every tensor after a step")
    ap.add_argument("--cuda-allocator", action="store_true", help="kernels allocate as CUDA's do (see the module)")
    ap.add_argument("--convolutions", action="store_true", help="convolutions and their gradients among the actions")
    ap.add_argument("--complex", action="store_true", help="complex tensors, their lazy conj() and neg views among the actions")
    ap.add_argument("--forward-ad", action="store_true", help="forward-mode AD and ZeroTensors among the actions")
    ap.add_argument("--shrink", action="store_true", help="minimise the failure of --seed")
    ap.add_argument("--isolate", action="store_true", help="with --shrink: replay each candidate in a child process")
    ap.add_argument("--replay", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    faulthandler.enable()
    policies = tuple(args.policy.split(","))
    extras = tuple(e for e in EXTRAS if getattr(args, e))
    if args.replay:
        with open(args.replay) as f:
            acts = [Action(**a) for a in json.load(f)]
        f = run_seed(0, 0, policies, actions=acts, cuda_allocator=args.cuda_allocator)[1]
        print(f"CATEGORY {f.category}" if f else "OK", flush=True)
        return 0
    if args.shrink:
        return 0 if shrink(args.seed, args.steps, policies, args.isolate, args.cuda_allocator, extras) is None else 1
    lo, hi = map(int, args.seeds.split("-")) if args.seeds else (args.seed, args.seed)
    bad = 0
    for seed in range(lo, hi + 1):
        t0 = time.monotonic()
        fz, failure, _ = run_seed(seed, args.steps, policies, check_p=args.check_p, cuda_allocator=args.cuda_allocator,
                                  extras=extras)
        if failure is None:
            print(f"seed {seed}: ok, {args.steps} steps ({fz.skipped} over the budget, {fz.remade} made again) in {time.monotonic() - t0:.1f} s", flush=True)
        else:
            bad += 1
            print("FAIL " + fz.report(failure), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
