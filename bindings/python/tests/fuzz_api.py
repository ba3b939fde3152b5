"""A fuzzer of our own (issue 22, deliverable 2): a stateful random sequence of calls over the
public Python API, run against the real library with plain PyTorch as the shadow, checked bit
for bit at every step.

    python fuzz_api.py --seed 12 --steps 400          # one seed (replays exactly)
    python fuzz_api.py --seconds 600                  # fresh seeds until the time is up
    python fuzz_api.py --seed 12 --steps 400 --shrink # minimise a failure to its shortest calls
    python fuzz_api.py --policy flow,genoa ...        # only these policies when configuring
    python fuzz_api.py --cuda-allocator ...           # the simulated device's kernels allocating as CUDA's

Single-threaded, so a seed replays deterministically. Each step is one *action* (a dataclass
of plain values that names the handles it uses: t3, s1, e2), chosen from the state by a
random.Random(seed) and executed by `Fuzzer.execute` on both sides: the library and a shadow
of torch tensors computed the same way by plain torch. Views stay views of their shadow base,
so a write through a view reaches the base in both; memory shared with the outside (from_torch,
to_torch, DLPack with NumPy) is shadowed by one shadow storage shared the same way, and writes
from the outside are made on the real memory and on the shadow.

Checked at every step:
- every live handle's values, shape and dtype equal its shadow's, bit for bit (NaN-aware), read
  through numpy(); every outside torch tensor / NumPy array equals its shadow too (the value
  check of a step is skipped with probability 1 - check_p, a per-seed value, so that reads do
  not always hide what a manager would do between two reads);
- handles released or disposed with their scope raise TR_ERR_STALE_HANDLE when used;
- tr.live_handles() equals the baseline plus the handles the fuzzer holds; the current scope is
  the one the model says, and each open scope owns what the model says;
- under a bounded policy, stats() shows device bytes and the peak within the budget, and so does
  every event the manager reports; with --cuda-allocator, where the simulated device's kernels
  allocate without asking as CUDA's do and each op reserves room for its outputs first, its real
  peak stays within the budget plus the most one kernel allocated beyond its outputs and the
  outputs that came unreserved;
- nothing hangs (a watchdog prints the report and exits after STEP_TIMEOUT seconds).

A library call that fails is allowed only when its precondition holds: torch fails the same
call on the shadow; or the manager's budget is smaller than the op's inputs, output and the
pinned bytes together (TR_ERR_BUDGET_TOO_SMALL); or pinning would pass the budget; or a call
needs a manager and none is configured; or a scope is disposed. Then nothing may have changed
(the shadow stays the state and the live count is checked). Anything else is a failure: the
seed, the step, the category and the last 30 calls as Python lines are printed.
"""
from __future__ import annotations

import argparse
import copy as _copy
import dataclasses
import gc
import os
import random
import re
import sys
import threading
import time
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tensorref as tr  # noqa: E402

warnings.filterwarnings("ignore")

POLICIES = ("resident", "genoa", "flow")
RECOMPUTE = ("off", "cheaper", "always")
STEP_TIMEOUT = float(os.environ.get("FUZZ_STEP_TIMEOUT", "60"))
HISTORY = 30
MAX_LIVE = 36
STALE = "TR_ERR_STALE_HANDLE"
BUDGET_ERR = "TR_ERR_BUDGET_TOO_SMALL"

TORCH_DTYPE = {"float32": torch.float32, "int64": torch.int64, "bool_": torch.bool,
               "float64": torch.float64, "int32": torch.int32, "float16": torch.float16,
               "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
               "bfloat16": torch.bfloat16}


class Failure(Exception):
    """A check failed: `category` groups failures of one kind (used when shrinking)."""

    def __init__(self, category: str, detail: str):
        super().__init__(f"{category}: {detail}")
        self.category = category
        self.detail = detail


@dataclasses.dataclass
class Action:
    kind: str                 # what to do (see Fuzzer.execute)
    refs: tuple = ()          # names of the handles / scopes / outside tensors it uses
    outs: tuple = ()          # names it creates
    p: dict = dataclasses.field(default_factory=dict)  # plain parameters
    check: bool = True        # whether the values are read back after it


class H:
    """A live handle of the model: the library's Tensor, its shadow, its owner scope and the
    library storage it is a view of (for the budget's preconditions)."""
    __slots__ = ("name", "t", "s", "scope", "sid")

    def __init__(self, name, t, s, scope, sid):
        self.name, self.t, self.s, self.scope, self.sid = name, t, s, scope, sid


class Ext:
    """Memory shared with the outside: a torch tensor or a NumPy array (`real`) and its shadow
    (the same kind of object over the shadow's memory)."""
    __slots__ = ("name", "real", "s", "kind", "sid")

    def __init__(self, name, real, s, kind, sid):
        self.name, self.real, self.s, self.kind, self.sid = name, real, s, kind, sid


# ------------------------------------------------------------------ comparing
def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        na, nb = np.isnan(a), np.isnan(b)
        if not np.array_equal(na, nb):
            return False
        ia = a.view(np.dtype(f"i{a.dtype.itemsize}"))
        ib = b.view(np.dtype(f"i{b.dtype.itemsize}"))
        return bool(np.array_equal(ia[~na], ib[~nb]))
    return bool(np.array_equal(a, b))


def _np_of(s: torch.Tensor) -> np.ndarray:
    s = s.detach()
    if s.dtype == torch.bfloat16:
        s = s.float()
    return s.contiguous().numpy().copy()


def _short(arr) -> str:
    a = np.asarray(arr)
    text = np.array2string(a.ravel()[:12], separator=",", threshold=20)
    return f"{a.dtype}{list(a.shape)} {text}{'...' if a.size > 12 else ''}"


def _span_bytes(s: torch.Tensor) -> int:
    """The bytes a DLPack import's storage spans (what libtorch's fromDLPack allocates over)."""
    if s.numel() == 0:
        return 0
    return (1 + sum((n - 1) * st for n, st in zip(s.shape, s.stride()))) * s.element_size()


def _storage_key(s: torch.Tensor) -> int:
    return s.untyped_storage().data_ptr()


def _dlpack(s: torch.Tensor) -> torch.Tensor:
    """`s` through a DLPack round trip, as the library's imports and exports see it: the same
    memory under another storage (libtorch's overlap checks do not see the two as one)."""
    return torch.from_dlpack(s.detach())


def _first_diff(got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"shapes {got.shape} != {want.shape}"
    g, w = got.reshape(-1), want.reshape(-1)
    for i in range(g.size):
        if not _bits_equal(g[i:i + 1], w[i:i + 1]):
            idx = np.unravel_index(i, got.shape) if got.ndim else ()
            return (f"first difference at {tuple(int(x) for x in idx)}: {g[i]!r} != {w[i]!r} "
                    f"({int((g != w).sum())} of {g.size} differ)")
    return "no difference"


# ------------------------------------------------------------------ the watchdog
class Watchdog:
    """Prints the report and exits the process when a step runs past its deadline (a hang in
    the library cannot be interrupted from Python)."""

    def __init__(self):
        self.deadline = None
        self.report = lambda: ""
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def arm(self, seconds: float, report):
        self.report = report
        self.deadline = time.monotonic() + seconds

    def disarm(self):
        self.deadline = None

    def _run(self):
        while True:
            time.sleep(0.25)
            d = self.deadline
            if d is not None and time.monotonic() > d:
                try:
                    sys.stderr.write("\nFUZZ HANG: a step ran past its deadline\n" + self.report() + "\n")
                    import faulthandler
                    faulthandler.dump_traceback(all_threads=True)
                    sys.stderr.flush()
                    sys.stdout.flush()
                finally:
                    os._exit(3)


_WATCHDOG = None


def watchdog() -> Watchdog:
    global _WATCHDOG
    if _WATCHDOG is None:
        _WATCHDOG = Watchdog()
    return _WATCHDOG


# ------------------------------------------------------------------ ops
def _slice_sh(a, dim, start, end, step):
    return torch.ops.aten.slice.Tensor(a, dim, start, end, step)


def _key_lib(key):
    out = []
    for k in key:
        if isinstance(k, tuple) and k and k[0] == "slice":
            out.append(slice(*k[1:]))
        elif k == "...":
            out.append(Ellipsis)
        elif isinstance(k, tuple) and k and k[0] == "mask":
            out.append(np.array(k[1], dtype=bool).reshape(k[2]))
        elif isinstance(k, tuple) and k and k[0] == "list":
            out.append(list(k[1]))
        else:
            out.append(k)
    return tuple(out)


def _key_sh(key):
    out = []
    for k in _key_lib(key):
        if isinstance(k, np.ndarray):
            out.append(torch.from_numpy(k.copy()))
        elif isinstance(k, list):
            out.append(torch.tensor(k, dtype=torch.int64))
        else:
            out.append(k)
    return tuple(out)


def _key_text(key) -> str:
    parts = []
    for k in key:
        if isinstance(k, tuple) and k and k[0] == "slice":
            a, b, c = k[1:]
            parts.append(f"{'' if a is None else a}:{'' if b is None else b}" + (f":{c}" if c not in (None, 1) else ""))
        elif k == "...":
            parts.append("...")
        elif k is None:
            parts.append("None")
        elif isinstance(k, tuple) and k and k[0] == "mask":
            parts.append(f"np.array({list(map(bool, k[1]))}).reshape({k[2]})")
        elif isinstance(k, tuple) and k and k[0] == "list":
            parts.append(str(list(k[1])))
        else:
            parts.append(repr(k))
    return ", ".join(parts) if parts else "()"


def _dt_lib(name):
    return getattr(tr, name)


def _dt_sh(name):
    return TORCH_DTYPE[name]


# Each op: (lib(args, p), shadow(args, p), text(names, p)). Non-in-place ops return a tensor
# or a tuple of tensors; in-place ones return nothing useful (the first argument is written).
VIEW_OPS = {
    "transpose": (lambda a, p: a[0].transpose(p["d0"], p["d1"]), lambda a, p: a[0].transpose(p["d0"], p["d1"]),
                  lambda n, p: f"{n[0]}.transpose({p['d0']}, {p['d1']})"),
    "permute": (lambda a, p: a[0].permute(*p["dims"]), lambda a, p: a[0].permute(list(p["dims"])),
                lambda n, p: f"{n[0]}.permute{tuple(p['dims'])}"),
    "reshape": (lambda a, p: a[0].reshape(*p["shape"]), lambda a, p: a[0].reshape(list(p["shape"])),
                lambda n, p: f"{n[0]}.reshape{tuple(p['shape'])}"),
    "view": (lambda a, p: a[0].view(*p["shape"]), lambda a, p: a[0].view(list(p["shape"])),
             lambda n, p: f"{n[0]}.view{tuple(p['shape'])}"),
    "narrow": (lambda a, p: a[0].narrow(p["dim"], p["start"], p["len"]),
               lambda a, p: a[0].narrow(p["dim"], p["start"], p["len"]),
               lambda n, p: f"{n[0]}.narrow({p['dim']}, {p['start']}, {p['len']})"),
    "select": (lambda a, p: a[0].select(p["dim"], p["i"]), lambda a, p: a[0].select(p["dim"], p["i"]),
               lambda n, p: f"{n[0]}.select({p['dim']}, {p['i']})"),
    "slice": (lambda a, p: a[0].slice(p["dim"], p["start"], p["end"], p["step"]),
              lambda a, p: _slice_sh(a[0], p["dim"], p["start"], p["end"], p["step"]),
              lambda n, p: f"{n[0]}.slice({p['dim']}, {p['start']}, {p['end']}, {p['step']})"),
    "expand": (lambda a, p: a[0].expand(*p["shape"]), lambda a, p: a[0].expand(list(p["shape"])),
               lambda n, p: f"{n[0]}.expand{tuple(p['shape'])}"),
    "unsqueeze": (lambda a, p: a[0].unsqueeze(p["dim"]), lambda a, p: a[0].unsqueeze(p["dim"]),
                  lambda n, p: f"{n[0]}.unsqueeze({p['dim']})"),
    "squeeze": (lambda a, p: a[0].squeeze(p["dim"]),
                lambda a, p: a[0].squeeze() if p["dim"] is None else a[0].squeeze(p["dim"]),
                lambda n, p: f"{n[0]}.squeeze({'' if p['dim'] is None else p['dim']})"),
    "contiguous": (lambda a, p: a[0].contiguous(), lambda a, p: a[0].contiguous(),
                   lambda n, p: f"{n[0]}.contiguous()"),
    "to_same": (lambda a, p: a[0].to_dtype(a[0].dtype), lambda a, p: a[0].to(a[0].dtype),
                lambda n, p: f"{n[0]}.to_dtype({n[0]}.dtype)"),
    "float": (lambda a, p: a[0].float(), lambda a, p: a[0].float(), lambda n, p: f"{n[0]}.float()"),
    "long": (lambda a, p: a[0].long(), lambda a, p: a[0].long(), lambda n, p: f"{n[0]}.long()"),
    "detach": (lambda a, p: a[0].detach(), lambda a, p: a[0].detach(), lambda n, p: f"{n[0]}.detach()"),
    "alias": (lambda a, p: a[0].alias(), lambda a, p: a[0], lambda n, p: f"{n[0]}.alias()"),
    "copy": (lambda a, p: _copy.copy(a[0]), lambda a, p: a[0], lambda n, p: f"copy.copy({n[0]})"),
    "T": (lambda a, p: a[0].T, lambda a, p: a[0].permute(list(range(a[0].ndim - 1, -1, -1))), lambda n, p: f"{n[0]}.T"),
    "getitem": (lambda a, p: a[0][_key_lib(p["key"])], lambda a, p: a[0][_key_sh(p["key"])],
                lambda n, p: f"{n[0]}[{_key_text(p['key'])}]"),
}

_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
        "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "matmul": "@",
        "pow": "**"}


def _binop(sym):
    import operator as o
    f = {"+": o.add, "-": o.sub, "*": o.mul, "/": o.truediv, "//": o.floordiv, "%": o.mod,
         "==": o.eq, "!=": o.ne, "<": o.lt, "<=": o.le, ">": o.gt, ">=": o.ge, "@": o.matmul,
         "**": o.pow}[sym]
    return f


OPS = {}
for _name, _sym in _BIN.items():
    _f = _binop(_sym)
    OPS[f"t_{_name}"] = ((lambda f: lambda a, p: f(a[0], a[1]))(_f), (lambda f: lambda a, p: f(a[0], a[1]))(_f),
                         (lambda s: lambda n, p: f"{n[0]} {s} {n[1]}")(_sym))
    if _name != "matmul":
        OPS[f"s_{_name}"] = ((lambda f: lambda a, p: f(a[0], p["s"]))(_f), (lambda f: lambda a, p: f(a[0], p["s"]))(_f),
                             (lambda s: lambda n, p: f"{n[0]} {s} {p['s']!r}")(_sym))
        OPS[f"r_{_name}"] = ((lambda f: lambda a, p: f(p["s"], a[0]))(_f), (lambda f: lambda a, p: f(p["s"], a[0]))(_f),
                             (lambda s: lambda n, p: f"{p['s']!r} {s} {n[0]}")(_sym))
for _name in ("neg", "abs", "relu", "exp", "log", "sqrt", "sigmoid", "tanh", "gelu", "silu", "clone",
              "nonzero", "zeros_like", "ones_like"):
    if _name in ("gelu", "silu"):
        _sh = (lambda nm: lambda a, p: getattr(F, nm)(a[0]))(_name)
    elif _name in ("zeros_like", "ones_like"):
        _sh = (lambda nm: lambda a, p: getattr(torch, nm)(a[0]))(_name)
    else:
        _sh = (lambda nm: lambda a, p: getattr(a[0], nm)())(_name)
    OPS[_name] = ((lambda nm: lambda a, p: getattr(a[0], nm)())(_name), _sh,
                  (lambda nm: lambda n, p: f"{n[0]}.{nm}()")(_name))
OPS.update({
    "clamp": (lambda a, p: a[0].clamp(p["lo"], p["hi"]), lambda a, p: a[0].clamp(p["lo"], p["hi"]),
              lambda n, p: f"{n[0]}.clamp({p['lo']!r}, {p['hi']!r})"),
    "where": (lambda a, p: a[0].where_self(a[1], a[2]), lambda a, p: torch.where(a[1], a[0], a[2]),
              lambda n, p: f"{n[0]}.where_self({n[1]}, {n[2]})"),
    "sum": (lambda a, p: a[0].sum(), lambda a, p: a[0].sum(), lambda n, p: f"{n[0]}.sum()"),
    "sum_dim": (lambda a, p: a[0].sum(p["dims"], p["keep"]), lambda a, p: a[0].sum(p["dims"], p["keep"]),
                lambda n, p: f"{n[0]}.sum({p['dims']}, keepdim={p['keep']})"),
    "mean": (lambda a, p: a[0].mean(), lambda a, p: a[0].mean(), lambda n, p: f"{n[0]}.mean()"),
    "mean_dim": (lambda a, p: a[0].mean(p["dims"], p["keep"]), lambda a, p: a[0].mean(p["dims"], p["keep"]),
                 lambda n, p: f"{n[0]}.mean({p['dims']}, keepdim={p['keep']})"),
    "max": (lambda a, p: a[0].max(), lambda a, p: a[0].max(), lambda n, p: f"{n[0]}.max()"),
    "min": (lambda a, p: a[0].min(), lambda a, p: a[0].min(), lambda n, p: f"{n[0]}.min()"),
    "max_dim": (lambda a, p: tuple(a[0].max(p["dim"], p["keep"])), lambda a, p: tuple(a[0].max(p["dim"], p["keep"])),
                lambda n, p: f"{n[0]}.max({p['dim']}, keepdim={p['keep']})"),
    "min_dim": (lambda a, p: tuple(a[0].min(p["dim"], p["keep"])), lambda a, p: tuple(a[0].min(p["dim"], p["keep"])),
                lambda n, p: f"{n[0]}.min({p['dim']}, keepdim={p['keep']})"),
    "argmax": (lambda a, p: a[0].argmax(p["dim"], p["keep"]) if p["dim"] is not None else a[0].argmax(),
               lambda a, p: a[0].argmax(p["dim"], p["keep"]) if p["dim"] is not None else a[0].argmax(),
               lambda n, p: f"{n[0]}.argmax({'' if p['dim'] is None else str(p['dim']) + ', ' + str(p['keep'])})"),
    "softmax": (lambda a, p: a[0].softmax(p["dim"]), lambda a, p: a[0].softmax(p["dim"]),
                lambda n, p: f"{n[0]}.softmax({p['dim']})"),
    "log_softmax": (lambda a, p: a[0].log_softmax(p["dim"]), lambda a, p: a[0].log_softmax(p["dim"]),
                    lambda n, p: f"{n[0]}.log_softmax({p['dim']})"),
    "bmm": (lambda a, p: a[0].bmm(a[1]), lambda a, p: a[0].bmm(a[1]), lambda n, p: f"{n[0]}.bmm({n[1]})"),
    "linear": (lambda a, p: tr.linear(a[0], a[1], a[2] if len(a) > 2 else None),
               lambda a, p: F.linear(a[0], a[1], a[2] if len(a) > 2 else None),
               lambda n, p: f"tr.linear({', '.join(n)})"),
    "cat": (lambda a, p: tr.cat(list(a), p["dim"]), lambda a, p: torch.cat(list(a), p["dim"]),
            lambda n, p: f"tr.cat([{', '.join(n)}], {p['dim']})"),
    "stack": (lambda a, p: tr.stack(list(a), p["dim"]), lambda a, p: torch.stack(list(a), p["dim"]),
              lambda n, p: f"tr.stack([{', '.join(n)}], {p['dim']})"),
    "index_select": (lambda a, p: a[0].index_select(p["dim"], a[1]), lambda a, p: a[0].index_select(p["dim"], a[1]),
                     lambda n, p: f"{n[0]}.index_select({p['dim']}, {n[1]})"),
    "masked_select": (lambda a, p: a[0].masked_select(a[1]), lambda a, p: a[0].masked_select(a[1]),
                      lambda n, p: f"{n[0]}.masked_select({n[1]})"),
    "embedding": (lambda a, p: tr.embedding(a[0], a[1]), lambda a, p: F.embedding(a[1], a[0]),
                  lambda n, p: f"tr.embedding({n[0]}, {n[1]})"),
    "mse_loss": (lambda a, p: tr.mse_loss(a[0], a[1]), lambda a, p: F.mse_loss(a[0], a[1]),
                 lambda n, p: f"tr.mse_loss({n[0]}, {n[1]})"),
    "to_dtype": (lambda a, p: a[0].to(_dt_lib(p["dtype"])), lambda a, p: a[0].to(_dt_sh(p["dtype"])),
                 lambda n, p: f"{n[0]}.to(tr.{p['dtype']})"),
    "dropout": (lambda a, p: a[0].dropout(p["p"], p["train"]), lambda a, p: F.dropout(a[0], p["p"], p["train"]),
                lambda n, p: f"{n[0]}.dropout({p['p']}, {p['train']})"),
    "deepcopy": (lambda a, p: _copy.deepcopy(a[0]), lambda a, p: a[0].clone(), lambda n, p: f"copy.deepcopy({n[0]})"),
})
RANDOM_OPS = {"dropout"}


def _ip(name_lib, name_sh=None, text=None):
    name_sh = name_sh or name_lib
    return (lambda a, p: getattr(a[0], name_lib)(*a[1:], *p.get("args", ())),
            lambda a, p: getattr(a[0], name_sh)(*a[1:], *p.get("args", ())),
            text or (lambda n, p: f"{n[0]}.{name_lib}({', '.join(list(n[1:]) + [repr(x) for x in p.get('args', ())])})"))


def _iop(sym):
    import operator as o
    f = {"+": o.iadd, "-": o.isub, "*": o.imul, "/": o.itruediv}[sym]

    def run(a, p):
        r = f(a[0], a[1] if len(a) > 1 else p["s"])
        if r is not a[0]:
            raise AssertionError(f"x {sym}= y did not return x itself")
    return run, run, lambda n, p: f"{n[0]} {sym}= {n[1] if len(n) > 1 else repr(p['s'])}"


def _setitem(a, p):
    a[0][_key_lib(p["key"])] = a[1] if len(a) > 1 else p["v"]


def _setitem_sh(a, p):
    a[0][_key_sh(p["key"])] = a[1] if len(a) > 1 else p["v"]


INPLACE = {
    "add_": _ip("add_"), "sub_": _ip("sub_"), "mul_": _ip("mul_"), "div_": _ip("div_"),
    "copy_": _ip("copy_"), "pow_": _ip("pow_"), "floor_divide_": _ip("floor_divide_"),
    "remainder_": _ip("remainder_"),
    "add_scalar_": _ip("add_scalar_", "add_"), "sub_scalar_": _ip("sub_scalar_", "sub_"),
    "mul_scalar_": _ip("mul_scalar_", "mul_"), "div_scalar_": _ip("div_scalar_", "div_"),
    "pow_scalar_": _ip("pow_scalar_", "pow_"),
    "mul_py": _ip("mul_"),     # t.mul_(0.5): a PyTorch habit (issue 22, item 8)
    "fill_": _ip("fill_"), "zero_": _ip("zero_"),
    "masked_fill_": _ip("masked_fill_"), "index_fill_": (
        lambda a, p: a[0].index_fill_(p["dim"], a[1], p["v"]),
        lambda a, p: a[0].index_fill_(p["dim"], a[1], p["v"]),
        lambda n, p: f"{n[0]}.index_fill_({p['dim']}, {n[1]}, {p['v']!r})"),
    "index_copy_": (lambda a, p: a[0].index_copy_(p["dim"], a[1], a[2]),
                    lambda a, p: a[0].index_copy_(p["dim"], a[1], a[2]),
                    lambda n, p: f"{n[0]}.index_copy_({p['dim']}, {n[1]}, {n[2]})"),
    "masked_scatter_": _ip("masked_scatter_"),
    "iadd": _iop("+"), "isub": _iop("-"), "imul": _iop("*"), "idiv": _iop("/"),
    "setitem": (_setitem, _setitem_sh,
                lambda n, p: f"{n[0]}[{_key_text(p['key'])}] = {n[1] if len(n) > 1 else repr(p['v'])}"),
}


# ------------------------------------------------------------------ the fuzzer
class Fuzzer:
    def __init__(self, seed: int, policies=POLICIES, check_p=None, verbose=False, avoid=(), cuda_allocator=False):
        self.seed = seed
        self.avoid = set(avoid)
        self.rng = random.Random(seed)
        self.policies = tuple(policies)
        self.check_p = check_p if check_p is not None else self.rng.choice((1.0, 1.0, 0.5, 0.25))
        self.verbose = verbose
        self.cuda_allocator = cuda_allocator  # the simulated device's kernels allocate as CUDA's
        self.h: dict[str, H] = {}
        self.dead: list[tuple[str, tr.Tensor]] = []
        self.scopes: list = []          # open scopes, outermost first: [name, Scope]
        self.scope_obj: dict = {}       # every scope ever opened: name -> Scope
        self.ext: dict[str, Ext] = {}
        self.manager = None             # dict(policy, budget, recompute) while configured
        self.pinned: set = set()        # library storage ids pinned
        self.sbytes: dict[int, int] = {}
        self.next_sid = 0
        self.counter = 0
        self.history: list[str] = []
        self.step = 0
        self.events_max = 0
        self.events_n = 0
        self.baseline = None

    # ------------------------------------------------ names and storages
    def _name(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _new_sid(self, nbytes):
        self.next_sid += 1
        self.sbytes[self.next_sid] = nbytes
        return self.next_sid

    def _current_scope(self):
        return self.scopes[-1][0] if self.scopes else None

    def _register(self, name, t, s, sid):
        if not isinstance(t, tr.Tensor):
            raise Failure("wrong-type", f"{name}: the library returned {type(t).__name__}, not a Tensor")
        self.h[name] = H(name, t, s, self._current_scope(), sid)

    def _sid_of_result(self, out_s, ins):
        key = _storage_key(out_s)
        for hh in ins:
            if isinstance(hh, H) and _storage_key(hh.s) == key and out_s.numel() and hh.s.numel():
                return hh.sid
        return self._new_sid(out_s.untyped_storage().nbytes())

    def log(self, line):
        self.history.append(f"[{self.step}] {line}")
        if self.verbose:
            print(f"  [{self.step}] {line}")

    # ------------------------------------------------ the manager's callback
    def _on_event(self, ev):
        self.events_n += 1
        if ev.device_bytes > self.events_max:
            self.events_max = ev.device_bytes

    # ------------------------------------------------ generating actions
    def _live(self, pred=None):
        names = sorted(self.h, key=lambda n: int(n[1:]))
        return [n for n in names if pred is None or pred(self.h[n].s)]

    def _pick(self, pred=None):
        c = self._live(pred)
        return self.rng.choice(c) if c else None

    def _rand_shape(self, big=False):
        r = self.rng
        if big:
            return r.choice([(32, 32), (16, 64), (64, 16), (8, 8, 8)])
        nd = r.choice([0, 1, 1, 2, 2, 2, 3])
        dims = [r.choice([1, 2, 3, 4, 4, 5, 6, 8]) for _ in range(nd)]
        if r.random() < 0.03 and nd:
            dims[r.randrange(nd)] = 0
        return tuple(dims)

    def _data_spec(self, shape, dtype):
        r = self.rng
        return dict(shape=list(shape), dtype=dtype, a=r.choice([1, 3, 5, 7]), b=r.randrange(9),
                    m=r.choice([5, 7, 9, 11]), c=r.randrange(6))

    @staticmethod
    def _data(spec):
        n = int(np.prod(spec["shape"])) if spec["shape"] else 1
        arr = (np.arange(n) * spec["a"] + spec["b"]) % spec["m"] - spec["c"]
        return arr.astype(np.dtype(spec["dtype"])).reshape(spec["shape"])

    @staticmethod
    def _data_text(spec):
        n = int(np.prod(spec["shape"])) if spec["shape"] else 1
        return (f"((np.arange({n}) * {spec['a']} + {spec['b']}) % {spec['m']} - {spec['c']})"
                f".astype(np.{spec['dtype']}).reshape({tuple(spec['shape'])})")

    def _scalar(self, s_dtype=None):
        r = self.rng
        if s_dtype == torch.int64 or (s_dtype is None and r.random() < 0.3):
            return r.choice([-2, -1, 0, 1, 2, 3])
        return r.choice([-1.5, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 0.25])

    def generate(self) -> Action:
        r = self.rng
        nlive = len(self.h)
        weights = {
            "create": 10 if nlive < MAX_LIVE else 1, "view": 13, "op": 17, "inplace": 16,
            "close": 5 + max(0, nlive - 20), "gc_drop": 1.5,
            "scope_open": 3 if len(self.scopes) < 4 else 0, "scope_dispose": 2.5 if self.scopes else 0,
            "scope_move": 4 if self.scopes else 0.3,
            "import": 3, "export": 3, "ext_write": 6 if self.ext else 0, "ext_drop": 1 if self.ext else 0,
            "configure": 3, "disable": 1.2 if self.manager else 0.2, "mark": 2 if self.manager else 0.2,
            "pin": 3 if self.manager else 0.3, "unpin": 2 if self.pinned_names() else 0,
        }
        if nlive == 0:
            for k in ("view", "op", "inplace", "close", "gc_drop", "export", "pin", "unpin"):
                weights[k] = 0
        kinds = list(weights)
        kind = r.choices(kinds, [weights[k] for k in kinds])[0]
        act = getattr(self, f"_gen_{kind}")()
        if act is None:
            act = self._gen_create()
        act.check = r.random() < self.check_p
        return act

    def pinned_names(self):
        return [n for n in self._live() if self.h[n].sid in self.pinned]

    def _gen_create(self):
        r = self.rng
        out = self._name("t")
        k = r.choices(["numpy", "tensor", "zeros", "ones", "full", "arange", "eye", "rand", "randn",
                       "like", "big"], [10, 2, 1.5, 1.5, 2, 2, 1, 1, 1, 1.5, 1.5])[0]
        dtype = "float32" if r.random() < 0.75 else "int64"
        if k == "like" and self.h:
            return Action("create", (self._pick(),), (out,), dict(k=r.choice(["zeros_like", "ones_like"])))
        if k == "like":
            k = "numpy"
        if k in ("numpy", "big"):
            spec = self._data_spec(self._rand_shape(big=k == "big"), dtype if k == "numpy" else "float32")
            return Action("create", (), (out,), dict(k="numpy", spec=spec))
        if k == "tensor":
            shape = self._rand_shape()
            spec = self._data_spec(shape, dtype)
            return Action("create", (), (out,), dict(k="tensor", values=self._data(spec).tolist(),
                                                        dtype=dtype))
        if k == "full":
            return Action("create", (), (out,), dict(k="full", shape=list(self._rand_shape()),
                                                        v=self._scalar()))
        if k == "arange":
            n = r.randrange(0, 12)
            return Action("create", (), (out,), dict(k="arange", n=n, fl=r.random() < 0.5))
        if k == "eye":
            return Action("create", (), (out,), dict(k="eye", n=r.randrange(1, 6)))
        return Action("create", (), (out,), dict(k=k, shape=list(self._rand_shape())))

    def _gen_view(self):
        r = self.rng
        a = self._pick()
        s = self.h[a].s
        nd, shape = s.ndim, tuple(s.shape)
        out = self._name("t")
        opts = ["contiguous", "to_same", "detach", "alias", "copy", "unsqueeze", "reshape", "view",
                "getitem", "expand"]
        opts += ["float"] if s.dtype == torch.float32 else ["long"] if s.dtype == torch.int64 else []
        if nd >= 1:
            opts += ["narrow", "select", "slice", "squeeze", "getitem", "getitem"]
        if nd >= 2:
            opts += ["transpose", "permute", "T", "transpose"]
        k = r.choice(opts)
        p = {}
        if k == "transpose":
            p = dict(d0=r.randrange(nd), d1=r.randrange(-nd, nd))
        elif k == "permute":
            dims = list(range(nd))
            r.shuffle(dims)
            p = dict(dims=dims)
        elif k in ("reshape", "view"):
            p = dict(shape=self._refactor(shape))
        elif k == "narrow":
            d = r.randrange(nd)
            n = shape[d]
            st = r.randrange(0, n + 1)
            p = dict(dim=d, start=st, len=r.randrange(0, n - st + 1))
        elif k == "select":
            d = r.randrange(nd)
            p = dict(dim=d, i=r.randrange(-shape[d], shape[d]) if shape[d] else 0)
        elif k == "slice":
            d = r.randrange(nd)
            n = shape[d]
            st = r.randrange(0, n + 1)
            p = dict(dim=d, start=st, end=r.randrange(st, n + 2), step=r.choice([1, 1, 2, 3]))
        elif k == "expand":
            p = dict(shape=self._expand_shape(shape))
        elif k == "unsqueeze":
            p = dict(dim=r.randrange(-nd - 1, nd + 1))
        elif k == "squeeze":
            p = dict(dim=r.randrange(nd) if r.random() < 0.7 else None)
        elif k == "getitem":
            p = dict(key=self._key(shape, advanced=r.random() < 0.25))
        return Action("view", (a,), (out,), dict(op=k, **p))

    def _refactor(self, shape):
        r = self.rng
        n = int(np.prod(shape)) if shape else 1
        if n == 0:
            return [0, -1] if r.random() < 0.5 else list(shape)
        fs = [d for d in range(1, n + 1) if n % d == 0]
        first = r.choice(fs)
        out = [first, n // first]
        if r.random() < 0.3:
            out = [n]
        if r.random() < 0.3:
            out[r.randrange(len(out))] = -1
        if r.random() < 0.2:
            out.insert(r.randrange(len(out) + 1), 1)
        return out

    def _expand_shape(self, shape):
        r = self.rng
        out = [(r.choice([2, 3]) if d == 1 and r.random() < 0.7 else (-1 if r.random() < 0.3 else d)) for d in shape]
        if r.random() < 0.4:
            out.insert(0, r.choice([1, 2, 3]))
        return out

    def _key(self, shape, advanced=False):
        r = self.rng
        key = []
        nd = len(shape)
        d = 0
        used_adv = False
        while d < nd and r.random() < 0.8:
            n = shape[d]
            c = r.random()
            if advanced and not used_adv and c < 0.3 and n and not (0 in shape and "empty-mask" in self.avoid):
                used_adv = True
                if r.random() < 0.5:
                    lo = 0 if "neg-list-index" in self.avoid else -n
                    key.append(("list", tuple(r.randrange(lo, n) for _ in range(r.randrange(1, 4)))))
                else:
                    key.append(("mask", tuple(r.random() < 0.5 for _ in range(n)), (n,)))
            elif c < 0.45 and n:
                key.append(r.randrange(-n, n))
            elif c < 0.85 and advanced and "empty-mask" in self.avoid:
                key.append(("slice", None, None, None))
            elif c < 0.85:
                st = r.choice([None, 0, 1, n // 2])
                en = r.choice([None, n, n - 1, 1])
                key.append(("slice", st, en, r.choice([None, 1, 2])))
            elif c < 0.93:
                key.append(None)
                continue
            else:
                key.append("...")
                break
            d += 1
        if not key:
            key = [("slice", None, None, None)]
        return tuple(key)

    def _partner(self, a, kind):
        """Another live handle that fits `a` for a binary op of `kind`, or any."""
        s = self.h[a].s
        r = self.rng

        def bcast(o):
            try:
                torch.broadcast_shapes(tuple(s.shape), tuple(o.shape))
                return o.dtype == s.dtype or r.random() < 0.2
            except RuntimeError:
                return False

        if kind == "bcast":
            c = self._live(bcast)
        elif kind == "same_shape":
            c = self._live(lambda o: tuple(o.shape) == tuple(s.shape) and (o.dtype == s.dtype or r.random() < 0.2))
        elif kind == "matmul":
            c = self._live(lambda o: o.ndim >= 1 and s.ndim >= 1 and o.shape[0 if o.ndim == 1 else -2] == s.shape[-1]
                           and o.dtype == s.dtype)
        elif kind == "index":
            c = self._live(lambda o: o.dtype == torch.int64 and o.ndim == 1)
        elif kind == "mask":
            c = self._live(lambda o: o.dtype == torch.bool and tuple(o.shape) == tuple(s.shape))
        else:
            c = []
        if c and r.random() < 0.92:
            return r.choice(c)
        return self._pick()

    def _gen_op(self):
        r = self.rng
        a = self._pick()
        s = self.h[a].s
        nd = s.ndim
        out = self._name("t")
        k = r.choices(["bin", "scalar", "rscalar", "unary", "clamp", "where", "reduce", "matmul", "bmm",
                       "linear", "cat", "index_select", "masked_select", "embedding", "mse", "to_dtype",
                       "dropout", "cmp"],
                      [14, 10, 4, 9, 2, 2, 10, 5, 1, 2, 3, 2, 2, 1, 1, 3, 2, 4])[0]
        if k == "bin":
            op = r.choice(["add", "sub", "mul", "div", "mul", "add", "floordiv", "mod", "pow"])
            return Action("op", (a, self._partner(a, "bcast")), (out,), dict(op=f"t_{op}"))
        if k == "cmp":
            op = r.choice(["eq", "ne", "lt", "le", "gt", "ge"])
            if r.random() < 0.5:
                return Action("op", (a, self._partner(a, "bcast")), (out,), dict(op=f"t_{op}"))
            return Action("op", (a,), (out,), dict(op=f"s_{op}", s=self._scalar(s.dtype if r.random() < 0.7 else None)))
        if k in ("scalar", "rscalar"):
            op = r.choice(["add", "sub", "mul", "div", "mul", "floordiv", "mod", "pow"])
            sc = self._scalar(s.dtype if r.random() < 0.6 else None)
            if op == "pow":
                sc = r.choice([2, 0.5, 2.0, 3])
                if "pow-scalar" in self.avoid:
                    op = "mul"
            if op == "div" and k == "rscalar" and "rdiv" in self.avoid:
                k = "scalar"
            return Action("op", (a,), (out,), dict(op=f"{'s' if k == 'scalar' else 'r'}_{op}", s=sc))
        if k == "unary":
            return Action("op", (a,), (out,), dict(op=r.choice(["neg", "abs", "relu", "exp", "log", "sqrt", "sigmoid",
                                                               "tanh", "gelu", "silu", "clone", "clone", "nonzero",
                                                               "zeros_like", "ones_like", "deepcopy", "neg", "abs"])))
        if k == "clamp":
            lo = self._scalar(s.dtype)
            return Action("op", (a,), (out,), dict(op="clamp", lo=lo, hi=lo + r.choice([0, 1, 2])))
        if k == "where":
            return Action("op", (a, self._partner(a, "mask"), self._partner(a, "bcast")), (out,), dict(op="where"))
        if k == "reduce":
            op = r.choice(["sum", "sum_dim", "mean", "mean_dim", "max", "min", "max_dim", "min_dim", "argmax",
                           "softmax", "log_softmax", "sum", "sum_dim"])
            if op in ("max_dim", "min_dim") and s.dtype == torch.bool and "bool-minmax-dim" in self.avoid:
                op = "sum"
            p = dict(op=op)
            if op in ("sum_dim", "mean_dim"):
                p.update(dims=sorted(set(r.randrange(-max(nd, 1), max(nd, 1)) for _ in range(r.randrange(1, 3)))),
                         keep=r.random() < 0.4)
            elif op in ("max_dim", "min_dim", "argmax"):
                p.update(dim=r.randrange(-max(nd, 1), max(nd, 1)) if (nd or op != "argmax") else None, keep=r.random() < 0.4)
                if op == "argmax" and r.random() < 0.3:
                    p["dim"] = None
            elif op in ("softmax", "log_softmax"):
                p.update(dim=r.randrange(-max(nd, 1), max(nd, 1)))
            outs = (out, self._name("t")) if op in ("max_dim", "min_dim") else (out,)
            return Action("op", (a,), outs, p)
        if k == "matmul":
            return Action("op", (a, self._partner(a, "matmul")), (out,), dict(op="t_matmul"))
        if k == "bmm":
            return Action("op", (a, self._partner(a, "matmul")), (out,), dict(op="bmm"))
        if k == "linear":
            w = self._live(lambda o: o.ndim == 2 and nd >= 1 and o.shape[1] == s.shape[-1] and o.dtype == s.dtype)
            if not w:
                return Action("op", (a, self._pick()), (out,), dict(op="linear"))
            w = r.choice(w)
            wo = self.h[w].s.shape[0]
            b = self._live(lambda o: tuple(o.shape) == (wo,) and o.dtype == s.dtype)
            refs = (a, w) + ((r.choice(b),) if b and r.random() < 0.7 else ())
            return Action("op", refs, (out,), dict(op="linear"))
        if k == "cat":
            n = r.randrange(1, 4)
            refs = (a,) + tuple(self._partner(a, "same_shape") for _ in range(n - 1))
            return Action("op", refs, (out,), dict(op=r.choice(["cat", "stack"]), dim=r.randrange(-nd - 1, nd + 1) if nd else 0))
        if k == "index_select":
            return Action("op", (a, self._partner(a, "index")), (out,), dict(op="index_select", dim=r.randrange(-max(nd, 1), max(nd, 1))))
        if k == "masked_select":
            return Action("op", (a, self._partner(a, "mask")), (out,), dict(op="masked_select"))
        if k == "embedding":
            idx = self._partner(a, "index")
            return Action("op", (a, idx), (out,), dict(op="embedding"))
        if k == "mse":
            return Action("op", (a, self._partner(a, "same_shape")), (out,), dict(op="mse_loss"))
        if k == "to_dtype":
            return Action("op", (a,), (out,), dict(op="to_dtype", dtype=r.choice(["float32", "int64", "bool_", "float32", "int64"])))
        if k == "dropout":
            return Action("op", (a,), (out,), dict(op="dropout", p=r.choice([0.0, 0.25, 0.5]), train=r.random() < 0.8))
        return None

    def _gen_inplace(self):
        r = self.rng
        a = self._pick()
        s = self.h[a].s
        k = r.choices(["add_", "sub_", "mul_", "div_", "copy_", "scalar", "fill_", "zero_", "masked_fill_",
                       "index_fill_", "index_copy_", "masked_scatter_", "iop", "setitem", "mul_py",
                       "pow_scalar_", "floor_divide_", "remainder_", "pow_"],
                      [8, 3, 5, 2, 6, 10, 6, 2, 2, 2, 1, 1, 6, 8, 0 if "mul-py" in self.avoid else 0.3,
                       1, 0.5, 0.5, 0.5])[0]
        if k in ("add_", "sub_", "mul_", "div_", "copy_", "floor_divide_", "remainder_", "pow_"):
            return Action("inplace", (a, self._partner(a, "bcast")), (), dict(op=k))
        if k == "scalar":
            op = r.choice(["add_scalar_", "sub_scalar_", "mul_scalar_", "div_scalar_"])
            return Action("inplace", (a,), (), dict(op=op, args=(self._scalar(s.dtype if r.random() < 0.7 else None),)))
        if k == "pow_scalar_" and "pow-scalar" in self.avoid:
            k = "scalar"
        if k == "pow_scalar_":
            return Action("inplace", (a,), (), dict(op=k, args=(r.choice([2, 0.5, 1]),)))
        if k == "mul_py":
            return Action("inplace", (a,), (), dict(op="mul_py", args=(0.5,)))
        if k == "fill_":
            return Action("inplace", (a,), (), dict(op="fill_", args=(self._scalar(s.dtype if r.random() < 0.8 else None),)))
        if k == "zero_":
            return Action("inplace", (a,), (), dict(op="zero_"))
        if k == "masked_fill_":
            return Action("inplace", (a, self._partner(a, "mask")), (), dict(op=k, args=(self._scalar(s.dtype),)))
        if k == "index_fill_":
            return Action("inplace", (a, self._partner(a, "index")), (),
                          dict(op=k, dim=r.randrange(-max(s.ndim, 1), max(s.ndim, 1)), v=self._scalar(s.dtype)))
        if k == "index_copy_":
            return Action("inplace", (a, self._partner(a, "index"), self._pick()), (),
                          dict(op=k, dim=r.randrange(-max(s.ndim, 1), max(s.ndim, 1))))
        if k == "masked_scatter_":
            return Action("inplace", (a, self._partner(a, "mask"), self._partner(a, "same_shape")), (), dict(op=k))
        if k == "iop":
            op = r.choice(["iadd", "isub", "imul", "idiv", "iadd"])
            if r.random() < 0.5:
                return Action("inplace", (a, self._partner(a, "bcast")), (), dict(op=op))
            return Action("inplace", (a,), (), dict(op=op, s=self._scalar(s.dtype if r.random() < 0.7 else None)))
        if k == "setitem":
            key = self._key(tuple(s.shape), advanced=r.random() < 0.2)
            if r.random() < 0.3:
                b = self._pick()
                if self._setitem_known(s, key, self.h[b].s):
                    b = None
                if b is not None:
                    return Action("inplace", (a, b), (), dict(op="setitem", key=key))
            if self._setitem_known(s, key, None):
                return None
            return Action("inplace", (a,), (), dict(op="setitem", key=key, v=self._scalar(s.dtype if r.random() < 0.8 else None)))
        return None

    def _setitem_known(self, s, key, v):
        """Whether `s[key] = v` meets a known habit the generator is told to avoid."""
        if v is None:
            return "setitem-expanded" in self.avoid and any(st == 0 and n > 1 for n, st in zip(s.shape, s.stride()))
        if "setitem-dtype" in self.avoid and v.dtype != s.dtype:
            return True
        if "setitem-overlap" in self.avoid and _storage_key(v) == _storage_key(s) and v.numel():
            return True
        if "setitem-expanded" in self.avoid and any(st == 0 and n > 1 for n, st in zip(s.shape, s.stride())):
            return True
        if "setitem-leading-ones" in self.avoid:
            try:
                view = s[_key_sh(key)]
            except Exception:  # noqa: BLE001
                return False
            return v.ndim > view.ndim
        return False

    def _gen_close(self):
        return Action("close", (self._pick(),))

    def _gen_gc_drop(self):
        return Action("gc_drop", (self._pick(),))

    def _gen_scope_open(self):
        return Action("scope_open", (), (self._name("s"),))

    def _gen_scope_dispose(self):
        return Action("scope_dispose", (self.rng.choice(self.scopes)[0],))

    def _gen_scope_move(self):
        r = self.rng
        a = self._pick()
        if a is None:
            return None
        k = r.choice(["move_to_outer_scope", "detach_from_scope", "attach", "move_to_scope", "move_to_outer",
                      "detach", "dispose_everything", "dispose_everything_but", "move_to_outer_scope"])
        every = list(self.scope_obj)
        if k in ("attach", "move_to_scope") and every:
            target = r.choice(every) if r.random() < 0.85 or not self.scopes else r.choice(self.scopes)[0]
            if k == "move_to_scope" and r.random() < 0.15:
                target = None
            return Action("scope_move", (a,) + ((target,) if target else ()), (), dict(op=k))
        if k in ("move_to_outer", "detach", "dispose_everything", "dispose_everything_but") and self.scopes:
            sc = r.choice(self.scopes)[0]
            if k == "dispose_everything_but":
                keep = tuple(sorted(set(self._pick() for _ in range(r.randrange(0, 3))) - {None}))
                return Action("scope_move", (sc,) + keep, (), dict(op=k))
            if k == "dispose_everything":
                return Action("scope_move", (sc,), (), dict(op=k))
            return Action("scope_move", (a, sc), (), dict(op=k))
        return Action("scope_move", (a,), (), dict(op=r.choice(["move_to_outer_scope", "detach_from_scope"])))

    def _gen_import(self):
        r = self.rng
        out, e = self._name("t"), self._name("e")
        if self.ext and r.random() < 0.25:
            return Action("reimport", (r.choice(sorted(self.ext)),), (out,))
        spec = self._data_spec(self._rand_shape() or (3,), "float32" if r.random() < 0.75 else "int64")
        view = r.choice(["none", "none", "t", "step", "offset"])
        if len(spec["shape"]) < 2 and view == "t":
            view = "none"
        return Action("import", (), (e, out), dict(spec=spec, view=view, kind=r.choice(["torch", "torch", "numpy"])))

    def _gen_export(self):
        r = self.rng
        a = self._pick()
        kinds = ["to_torch", "to_torch", "from_dlpack"]
        if self.h[a].s.dtype in (torch.float32, torch.int64):
            kinds.append("numpy")
        return Action("export", (a,), (self._name("e"),), dict(kind=r.choice(kinds)))

    def _gen_ext_write(self):
        r = self.rng
        e = r.choice(sorted(self.ext))
        x = self.ext[e]
        isint = (x.s.dtype == torch.int64) if x.kind == "torch" else (x.s.dtype.kind == "i")
        v = r.choice([-2, 0, 1, 3, 7]) if isint else r.choice([-2.5, 0.0, 1.0, 4.0, 100.0])
        op = r.choice(["fill", "add", "mul", "setitem", "setitem"])
        p = dict(op=op, v=v)
        shape = tuple(x.s.shape)
        if op == "setitem":
            if not shape or 0 in shape:
                p["op"] = "fill"
            else:
                p["idx"] = r.randrange(shape[0])
        return Action("ext_write", (e,), (), p)

    def _gen_ext_drop(self):
        return Action("ext_drop", (self.rng.choice(sorted(self.ext)),))

    def _gen_configure(self):
        r = self.rng
        policy = r.choice(self.policies)
        sizes = [self.sbytes[h.sid] for h in self.h.values()] or [256]
        big = max(sizes)
        total = sum(self.sbytes[sid] for sid in {h.sid for h in self.h.values()}) or 256
        mode = r.choices(["tiny", "tight", "medium", "large"], [1, 4, 3, 2])[0]
        budget = {"tiny": r.choice([16, 48, 128, 256]), "tight": max(64, big * r.choice([2, 3, 4]) + r.randrange(0, 64) * 4),
                  "medium": max(256, total // r.choice([1, 2, 4])), "large": 1 << 20}[mode]
        if policy == "resident" and r.random() < 0.5:
            budget = 0
        return Action("configure", (), (), dict(policy=policy, budget=int(budget),
                                                recompute=r.choices(RECOMPUTE, [3, 2, 2])[0]))

    def _gen_disable(self):
        return Action("disable")

    def _gen_mark(self):
        return Action("mark")

    def _gen_pin(self):
        return Action("pin", (self._pick(),))

    def _gen_unpin(self):
        c = self.pinned_names()
        return Action("unpin", (self.rng.choice(c),)) if c else None

    # ------------------------------------------------ executing
    def refs_ok(self, act: Action) -> bool:
        """Whether every name the action uses exists now (a shrunk replay skips the others)."""
        for n in act.refs:
            if n is None:
                continue
            if n[0] == "t" and n not in self.h:
                return False
            if n[0] == "e" and n not in self.ext:
                return False
            if n[0] == "s" and n not in self.scope_obj:
                return False
        if act.kind == "scope_dispose" and not any(s[0] == act.refs[0] for s in self.scopes):
            return False
        if act.kind == "unpin" and self.h[act.refs[0]].sid not in self.pinned:
            return False
        return True

    def execute(self, act: Action):
        getattr(self, f"_x_{act.kind}")(act)

    @staticmethod
    def _is_budget(e):
        return isinstance(e, tr.TensorRefError) and e.status_name == BUDGET_ERR

    def _pinned_bytes(self):
        try:
            return tr.residency.stats().pinned_bytes
        except tr.TensorRefError:
            return 0

    def _need(self, ins, out_bytes):
        """Bytes an op needs on the device at once: its inputs' storages, its output and what is
        pinned besides (a lower bound for the precondition of TR_ERR_BUDGET_TOO_SMALL)."""
        sids = {h.sid for h in ins}
        inb = sum(self.sbytes[s] for s in sids) + getattr(self, "_extra", 0)
        pinned_in = sum(self.sbytes[s] for s in sids & self.pinned)
        return inb + out_bytes + max(0, self._pinned_bytes() - pinned_in)

    @staticmethod
    def _scratch_needed(e, need, budget):
        """The library's error says the op needs more than the budget, and at least the fuzzer's
        lower bound: the rest is its kernel's scratch, which the fuzzer cannot see."""
        said = re.search(r"needs (\d+) bytes at once", str(e))
        return said is not None and int(said.group(1)) > budget and int(said.group(1)) >= need

    def _budget_allowed(self, e, ins, out_bytes, what):
        m = self.manager
        if m is None or m["policy"] == "resident":
            raise Failure("spurious-budget-error", f"{what}: {e} (no bounded manager: policy {m and m['policy']})")
        need = self._need(ins, out_bytes)
        if need <= m["budget"] and not self._scratch_needed(e, need, m["budget"]):
            ins_text = ", ".join(f"{h.name} {list(h.s.shape)} {h.s.dtype} storage {self.sbytes[h.sid]} B"
                                 + (" pinned" if h.sid in self.pinned else "") for h in ins)
            raise Failure("spurious-budget-error",
                          f"{what}: {e}; the op's inputs ({ins_text}), output ({out_bytes} B) and the other "
                          f"pins need {need} bytes, budget {m['budget']} (stats: pinned {self._pinned_bytes()} B)")
        self.log(f"#   -> {type(e).__name__} {BUDGET_ERR} (allowed: needs {need} > budget {m['budget']})")

    def _call(self, act, lib_fn, sh_fn, ins, text, inplace):
        """Runs one call on both sides and classifies the outcome. Returns (lib_result,
        shadow_result) when both succeeded, None when both failed (or an allowed budget error)."""
        rng_state = torch.get_rng_state()
        try:
            got = lib_fn()
            lib_exc = None
        except Exception as e:  # noqa: BLE001
            # The traceback's frames hold the binding's temporaries (handles): drop them now, as
            # a program that does not keep the exception would, or the live count is off.
            got, lib_exc = None, e.with_traceback(None)
            lib_exc.__context__ = lib_exc.__cause__ = None
        if isinstance(lib_exc, tr.PanicError):
            raise Failure("panic", f"{text}: {lib_exc}")
        if lib_exc is not None and self._is_budget(lib_exc):
            out_bytes = 0
            if not inplace:
                try:
                    torch.set_rng_state(rng_state)
                    r = sh_fn()
                    for x in (r if isinstance(r, tuple) else (r,)):
                        if isinstance(x, torch.Tensor) and not any(_storage_key(x) == _storage_key(h.s) for h in ins):
                            out_bytes += x.untyped_storage().nbytes()
                except Exception:  # noqa: BLE001
                    self.log(f"#   -> {type(lib_exc).__name__} {BUDGET_ERR}; torch fails too")
                    return None
            self._budget_allowed(lib_exc, ins, out_bytes, text)
            return None
        torch.set_rng_state(rng_state)
        try:
            want = sh_fn()
            sh_exc = None
        except Exception as e:  # noqa: BLE001
            want, sh_exc = None, e.with_traceback(None)
        if lib_exc is not None and sh_exc is not None:
            self.log(f"#   -> both raise: {type(lib_exc).__name__} / torch {type(sh_exc).__name__}")
            return None
        if lib_exc is not None:
            tb = "".join(traceback.format_exception_only(type(lib_exc), lib_exc)).strip()
            raise Failure(f"lib-raises:{type(lib_exc).__name__}:{getattr(lib_exc, 'status_name', '')}"
                          f":{getattr(lib_exc, 'function', '')}",
                          f"{text}: the library raised where torch did not: {tb}")
        if sh_exc is not None:
            raise Failure("lib-accepts", f"{text}: torch raised {type(sh_exc).__name__}: {sh_exc}, the library "
                                         f"returned {got!r:.200}")
        return got, want

    def _x_create(self, act):
        self._extra = 0
        p, out = act.p, act.outs[0]
        k = p["k"]
        if k == "numpy":
            arr = self._data(p["spec"])
            lib_fn, sh_fn = (lambda: tr.from_numpy(arr)), (lambda: torch.from_numpy(arr.copy()))
            text = f"{out} = tr.from_numpy({self._data_text(p['spec'])})"
        elif k == "tensor":
            vals, dt = p["values"], p["dtype"]
            lib_fn = lambda: tr.tensor(vals, dtype=_dt_lib(dt))  # noqa: E731
            sh_fn = lambda: torch.tensor(vals, dtype=_dt_sh(dt))  # noqa: E731
            text = f"{out} = tr.tensor({vals!r}, dtype=tr.{dt})"
        elif k in ("zeros", "ones", "rand", "randn"):
            shp = p["shape"]
            lib_fn = lambda: getattr(tr, k)(*shp)  # noqa: E731
            sh_fn = lambda: getattr(torch, k)(list(shp))  # noqa: E731
            text = f"{out} = tr.{k}{tuple(shp)}"
        elif k == "full":
            shp, v = p["shape"], p["v"]
            lib_fn, sh_fn = (lambda: tr.full(shp, v)), (lambda: torch.full(shp, v))
            text = f"{out} = tr.full({shp}, {v!r})"
        elif k == "arange":
            n = float(p["n"]) if p["fl"] else p["n"]
            lib_fn, sh_fn = (lambda: tr.arange(n)), (lambda: torch.arange(n))
            text = f"{out} = tr.arange({n!r})"
        elif k == "eye":
            lib_fn, sh_fn = (lambda: tr.eye(p["n"])), (lambda: torch.eye(p["n"]))
            text = f"{out} = tr.eye({p['n']})"
        elif k in ("zeros_like", "ones_like"):
            a = self.h[act.refs[0]]
            lib_fn = lambda: getattr(tr, k)(a.t)  # noqa: E731
            sh_fn = lambda: getattr(torch, k)(a.s)  # noqa: E731
            text = f"{out} = tr.{k}({a.name})"
        else:
            raise ValueError(k)
        self.log(text)
        r = self._call(act, lib_fn, sh_fn, [self.h[n] for n in act.refs], text, False)
        if r is not None:
            self._register(out, r[0], r[1], self._new_sid(r[1].untyped_storage().nbytes()))

    def _run_op(self, act, table, inplace):
        p = act.p
        spec = table[p["op"]]
        ins = [self.h[n] for n in act.refs]
        self._extra = 0
        if p["op"] in ("setitem", "getitem") and any(isinstance(k, tuple) and k and k[0] in ("list", "mask")
                                                     for k in p["key"]):
            # the binding's index tensor, its reshapes, a mask's nonzero positions
            self._extra = sum(16 * len(k[1]) for k in p["key"] if isinstance(k, tuple) and k and k[0] in ("list", "mask"))
            self._extra += ins[0].s.numel() * 8
        if p["op"] == "setitem" and len(ins) > 1:
            # the binding converts the value to the target's dtype and expands it: two temporaries
            self._extra += ins[1].s.numel() * ins[0].s.element_size() * 2 + ins[0].s.numel() * 8
        text = spec[2](act.refs, p)
        if not inplace:
            text = f"{', '.join(act.outs)} = {text}"
        self.log(text)
        r = self._call(act, lambda: spec[0]([h.t for h in ins], p), lambda: spec[1]([h.s for h in ins], p),
                       ins, text, inplace)
        if r is None or inplace:
            return
        got, want = r
        gots = got if isinstance(got, tuple) else (got,)
        wants = want if isinstance(want, tuple) else (want,)
        if len(gots) != len(act.outs) or len(wants) != len(act.outs):
            raise Failure("arity", f"{text}: {len(gots)} results from the library, {len(wants)} from torch")
        for name, g, w in zip(act.outs, gots, wants):
            self._register(name, g, w, self._sid_of_result(w, ins))

    def _x_view(self, act):
        self._run_op(act, VIEW_OPS, False)

    def _x_op(self, act):
        self._run_op(act, OPS, False)

    def _x_inplace(self, act):
        self._run_op(act, INPLACE, True)

    def _kill(self, name, why):
        hh = self.h.pop(name)
        self.dead.append((f"{name} ({why})", hh.t))
        del self.dead[:-24]

    def _x_close(self, act):
        n = act.refs[0]
        self.log(f"{n}.close()")
        self.h[n].t.close()
        self._kill(n, "closed")

    def _x_gc_drop(self, act):
        n = act.refs[0]
        self.log(f"del {n}  # released when collected")
        hh = self.h.pop(n)
        hh.t = None
        del hh

    def _x_scope_open(self, act):
        n = act.outs[0]
        self.log(f"{n} = tr.scope()")
        s = tr.scope()
        self.scopes.append([n, s])
        self.scope_obj[n] = s

    def _dispose_owned(self, scope_name, keep=()):
        for name in list(self._live()):
            if self.h[name].scope == scope_name and name not in keep:
                self._kill(name, f"scope {scope_name} disposed")

    def _x_scope_dispose(self, act):
        n = act.refs[0]
        self.log(f"{n}.dispose()")
        self.scope_obj[n].dispose()
        self.scopes = [s for s in self.scopes if s[0] != n]
        self._dispose_owned(n)

    def _open(self, name):
        return any(s[0] == name for s in self.scopes)

    def _outer(self, name):
        names = [s[0] for s in self.scopes]
        i = names.index(name)
        return names[i - 1] if i > 0 else None

    def _x_scope_move(self, act):
        op = act.p["op"]
        refs = act.refs
        if op in ("dispose_everything", "dispose_everything_but"):
            sc = refs[0]
            keep = refs[1:]
            self.log(f"{sc}.{op}({', '.join(keep)})")
            obj = self.scope_obj[sc]
            if op == "dispose_everything":
                obj.dispose_everything()
            else:
                obj.dispose_everything_but(*[self.h[k].t for k in keep])
            self._dispose_owned(sc, keep if op == "dispose_everything_but" else ())
            return
        a = self.h[refs[0]]
        target = refs[1] if len(refs) > 1 else None
        if op == "move_to_outer_scope":
            self.log(f"{a.name}.move_to_outer_scope()")
            want = self._outer(a.scope) if a.scope is not None else None
            self._expect_ok(lambda: a.t.move_to_outer_scope(), op)
            a.scope = want
        elif op == "detach_from_scope":
            self.log(f"{a.name}.detach_from_scope()")
            self._expect_ok(lambda: a.t.detach_from_scope(), op)
            a.scope = None
        elif op == "attach":
            self.log(f"{target}.attach({a.name})")
            if self._expect_scope(lambda: self.scope_obj[target].attach(a.t), target, op):
                a.scope = target
        elif op == "move_to_scope":
            self.log(f"{a.name}.move_to_scope({target})")
            if target is None:
                self._expect_ok(lambda: a.t.move_to_scope(None), op)
                a.scope = None
            elif self._expect_scope(lambda: a.t.move_to_scope(self.scope_obj[target]), target, op):
                a.scope = target
        elif op == "move_to_outer":
            self.log(f"{target}.move_to_outer({a.name})")
            if self._expect_scope(lambda: self.scope_obj[target].move_to_outer(a.t), target, op):
                if a.scope == target:
                    a.scope = self._outer(target)
        elif op == "detach":
            self.log(f"{target}.detach({a.name})")
            if self._expect_scope(lambda: self.scope_obj[target].detach(a.t), target, op):
                if a.scope == target:
                    a.scope = None

    def _expect_ok(self, fn, what):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            raise Failure(f"lib-raises:{type(e).__name__}:{getattr(e, 'status_name', '')}", f"{what}: {e}")

    def _expect_scope(self, fn, target, what):
        """Runs a scope call on `target`: it must fail with ScopeError exactly when the scope is
        disposed. Returns whether it succeeded."""
        try:
            fn()
        except tr.ScopeError as e:
            if self._open(target):
                raise Failure("lib-raises:ScopeError", f"{what}: scope {target} is open: {e}")
            self.log("#   -> ScopeError (allowed: the scope is disposed)")
            return False
        except Exception as e:  # noqa: BLE001
            raise Failure(f"lib-raises:{type(e).__name__}:{getattr(e, 'status_name', '')}", f"{what}: {e}")
        if not self._open(target):
            raise Failure("scope-accepts-disposed", f"{what}: scope {target} is disposed, the call succeeded")
        return True

    # ----- memory shared with the outside
    def _x_import(self, act):
        p = act.p
        e, out = act.outs
        base = self._data(p["spec"])
        view = p["view"]

        def v(x, lib):
            if view == "t":
                return x.T if isinstance(x, np.ndarray) else x.permute(*range(x.ndim - 1, -1, -1))
            if view == "step" and x.ndim >= 1:
                return x[::2]
            if view == "offset" and x.ndim >= 1:
                return x[1:]
            return x
        if p["kind"] == "numpy":
            real = v(base.copy(), True)
            sh_base = torch.from_numpy(base.copy())
            sh_out = v(sh_base, False)
            sh = _dlpack(sh_out)
            text = f"{e} = ({self._data_text(p['spec'])}){self._view_text(view, True)}; {out} = tr.from_dlpack({e})"
            lib_fn = lambda: tr.from_dlpack(real)  # noqa: E731
            ext_s = sh_out.numpy()
        else:
            real = v(torch.from_numpy(base.copy()), False)
            sh_out = v(torch.from_numpy(base.copy()), False)
            sh = _dlpack(sh_out)
            text = f"{e} = torch.from_numpy({self._data_text(p['spec'])}){self._view_text(view, False)}; {out} = tr.from_torch({e})"
            lib_fn = lambda: tr.from_torch(real)  # noqa: E731
            ext_s = sh_out
        self.log(text)
        r = self._call(act, lib_fn, lambda: sh, [], text, False)
        if r is None:
            return
        sid = self._new_sid(_span_bytes(sh))
        self.ext[e] = Ext(e, real, ext_s, "numpy" if p["kind"] == "numpy" else "torch", sid)
        self._register(out, r[0], sh, sid)

    @staticmethod
    def _view_text(view, numpy):
        return {"none": "", "t": ".T" if numpy else ".mT", "step": "[::2]", "offset": "[1:]"}[view]

    def _x_reimport(self, act):
        e = self.ext[act.refs[0]]
        out = act.outs[0]
        if e.kind == "torch":
            text = f"{out} = tr.from_torch({e.name})"
            lib_fn, sh = (lambda: tr.from_torch(e.real)), _dlpack(e.s)
        else:
            text = f"{out} = tr.from_dlpack({e.name})"
            lib_fn = lambda: tr.from_dlpack(e.real)  # noqa: E731
            if not e.real.flags.writeable and e.real.size:  # NumPy refuses to export a read-only array (BufferError)
                sh = None
            else:
                sh = torch.from_numpy(e.s)  # NumPy's DLPack export: another storage over its memory
        self.log(text)

        def sh_fn():
            if sh is None:
                raise BufferError("Cannot export readonly array")
            return sh
        r = self._call(act, lib_fn, sh_fn, [], text, False)
        if r is not None:
            self._register(out, r[0], sh, self._new_sid(_span_bytes(sh)))

    def _x_export(self, act):
        a = self.h[act.refs[0]]
        e = act.outs[0]
        k = act.p["kind"]
        if k == "to_torch":
            text, lib_fn, sh_fn = f"{e} = {a.name}.to_torch()", (lambda: a.t.to_torch()), (lambda: _dlpack(a.s))
        elif k == "from_dlpack":
            text, lib_fn, sh_fn = f"{e} = torch.from_dlpack({a.name})", (lambda: torch.from_dlpack(a.t)), (lambda: _dlpack(a.s))
        else:
            text = f"{e} = np.from_dlpack({a.name})"
            lib_fn = lambda: np.from_dlpack(a.t)  # noqa: E731

            def sh_fn():
                return _dlpack(a.s).numpy()
        self.log(text)
        r = self._call(act, lib_fn, sh_fn, [a], text, False)
        if r is None:
            return
        got, want = r
        if k == "numpy" and not got.flags.writeable:
            want.flags.writeable = False  # NumPy marks an array from a legacy DLPack capsule read-only
        self.ext[e] = Ext(e, got, want, "numpy" if k == "numpy" else "torch", a.sid)

    def _x_ext_write(self, act):
        x = self.ext[act.refs[0]]
        p = act.p
        op, v = p["op"], p["v"]

        def do(t):
            if x.kind == "torch":
                if op == "fill":
                    t.fill_(v)
                elif op == "add":
                    t.add_(v)
                elif op == "mul":
                    t.mul_(v)
                else:
                    t[p["idx"]] = v
            else:
                if op == "fill":
                    t[...] = v
                elif op == "add":
                    t += np.array(v).astype(t.dtype)
                elif op == "mul":
                    t *= np.array(v).astype(t.dtype)
                else:
                    t[p["idx"]] = v
        text = {"fill": f"{x.name}.fill_({v!r})" if x.kind == "torch" else f"{x.name}[...] = {v!r}",
                "add": f"{x.name}.add_({v!r})" if x.kind == "torch" else f"{x.name} += {v!r}",
                "mul": f"{x.name}.mul_({v!r})" if x.kind == "torch" else f"{x.name} *= {v!r}",
                "setitem": f"{x.name}[{p.get('idx')}] = {v!r}"}[op]
        self.log(text + f"  # a write from outside ({x.kind})")
        if x.s.size == 0 if x.kind == "numpy" else x.s.numel() == 0:
            return
        try:
            do(x.real)
            real_exc = None
        except Exception as e:  # noqa: BLE001
            real_exc = e
        try:
            do(x.s)
            sh_exc = None
        except Exception as e:  # noqa: BLE001
            sh_exc = e
        if (real_exc is None) != (sh_exc is None):
            raise Failure("outside-write", f"{text}: the real memory {'raised ' + repr(real_exc) if real_exc else 'took it'},"
                                           f" the shadow {'raised ' + repr(sh_exc) if sh_exc else 'took it'}")

    def _x_ext_drop(self, act):
        n = act.refs[0]
        self.log(f"del {n}")
        del self.ext[n]

    # ----- the manager
    def _x_configure(self, act):
        p = act.p
        text = (f"tr.residency.configure(policy={p['policy']!r}, budget_bytes={p['budget']}, "
                f"recompute={p['recompute']!r})")
        self.log(text)
        try:
            tr.residency.configure(policy=p["policy"], budget_bytes=p["budget"], recompute=p["recompute"])
        except Exception as e:  # noqa: BLE001
            raise Failure(f"configure-fails:{getattr(e, 'status_name', type(e).__name__)}", f"{text}: {e}")
        self.manager = dict(p)
        self.pinned = set()
        self.events_max = 0
        tr.residency.set_callback(self._on_event)

    def _x_disable(self, act):
        self.log("tr.residency.disable()")
        try:
            tr.residency.disable()
        except Exception as e:  # noqa: BLE001
            raise Failure(f"disable-fails:{getattr(e, 'status_name', type(e).__name__)}", f"disable(): {e}")
        self.manager = None
        self.pinned = set()

    def _x_mark(self, act):
        self.log("tr.residency.mark_iteration()")
        try:
            tr.residency.mark_iteration()
        except tr.ArgumentError as e:
            if self.manager is not None:
                raise Failure("lib-raises:ArgumentError", f"mark_iteration with a manager: {e}")
            self.log("#   -> ArgumentError (allowed: no manager)")
            return
        if self.manager is None:
            raise Failure("lib-accepts", "mark_iteration() without a manager succeeded")

    def _x_pin(self, act):
        a = self.h[act.refs[0]]
        self.log(f"{a.name}.pin_resident()")
        pinned_before = self._pinned_bytes() if self.manager else 0
        try:
            a.t.pin_resident()
        except tr.ArgumentError as e:
            if self.manager is not None:
                raise Failure("lib-raises:ArgumentError", f"pin_resident with a manager: {e}")
            self.log("#   -> ArgumentError (allowed: no manager)")
            return
        except tr.DeviceError as e:
            m = self.manager
            if not self._is_budget(e) or m is None or m["policy"] == "resident":
                raise Failure(f"lib-raises:DeviceError:{getattr(e, 'status_name', '')}", f"pin_resident: {e}")
            need = pinned_before + (0 if a.sid in self.pinned else self.sbytes[a.sid])
            if need <= m["budget"]:
                raise Failure("spurious-budget-error", f"pin_resident: {e}; pinned {pinned_before} + "
                                                       f"{self.sbytes[a.sid]} <= budget {m['budget']}")
            self.log(f"#   -> {BUDGET_ERR} (allowed: pinned {pinned_before} + {self.sbytes[a.sid]} > {m['budget']})")
            return
        except Exception as e:  # noqa: BLE001
            raise Failure(f"lib-raises:{type(e).__name__}", f"pin_resident: {e}")
        if self.manager is None:
            raise Failure("lib-accepts", "pin_resident() without a manager succeeded")
        after = self._pinned_bytes()
        if after > pinned_before or a.sid in self.pinned:
            self.pinned.add(a.sid)
        else:
            self.log(f"#   -> pinned bytes stay {after}: the pin took no bytes (memory shared with the outside?)")

    def _x_unpin(self, act):
        a = self.h[act.refs[0]]
        self.log(f"{a.name}.pin_resident(False)")
        self._expect_ok(lambda: a.t.pin_resident(False), "unpin")
        self.pinned.discard(a.sid)

    # ------------------------------------------------ checking
    def check(self, values=True):
        live = tr.live_handles()
        want = self.baseline + len(self.h)
        if live != want:
            raise Failure("live-count", f"tr.live_handles() is {live}, the fuzzer holds {len(self.h)} "
                                        f"(+ baseline {self.baseline} = {want})")
        cur = tr.current_scope()
        mcur = self._current_scope()
        if (cur is None) != (mcur is None) or (cur is not None and cur != self.scope_obj[mcur]):
            raise Failure("scope-model", f"current scope is {cur}, the model says {mcur}")
        for sname, sobj in self.scopes:
            owned = sum(1 for h in self.h.values() if h.scope == sname)
            if len(sobj) != owned:
                raise Failure("scope-model", f"scope {sname} owns {len(sobj)} handles, the model says {owned}")
        for name, t in self.dead[-3:]:
            try:
                t.add_scalar(1)
            except tr.HandleError as e:
                if e.status_name != STALE:
                    raise Failure("stale", f"{name}: {e.status_name}, not {STALE}")
            except Exception as e:  # noqa: BLE001
                raise Failure("stale", f"{name} used after release raised {type(e).__name__}: {e}")
            else:
                raise Failure("stale", f"{name} is usable after its release")
            if t.is_valid():
                raise Failure("stale", f"{name}.is_valid() after its release")
        if bool(tr.residency.enabled()) != (self.manager is not None):
            raise Failure("manager-state", f"enabled() is {tr.residency.enabled()}, the model says {self.manager}")
        if self.manager is not None:
            self._check_budget()
        if values:
            self.check_values()

    def _check_budget(self):
        m = self.manager
        st = tr.residency.stats()
        if m["policy"] == "resident":
            return
        b = m["budget"]
        if st.budget != b:
            raise Failure("budget", f"stats().budget is {st.budget}, configured {b}")
        if st.device_bytes > b or st.peak_device_bytes > b:
            raise Failure("budget", f"device bytes {st.device_bytes}, peak {st.peak_device_bytes} > budget {b}")
        memory = tr.residency.device_memory()
        # As on CUDA: a kernel's scratch, and outputs no meta kernel could tell (data-dependent
        # sizes, a meta kernel that differs from the kernel), appear outside the budget.
        over = memory.scratch_peak + st.output_bytes_unreserved if self.cuda_allocator else 0
        if memory.peak > b + over:
            raise Failure("budget", f"the simulated device's allocator counted {memory.peak} bytes alive at once > budget {b}"
                                    f" (+ scratch and unreserved outputs {over})")
        if self.events_max > b:
            raise Failure("budget", f"an event reported {self.events_max} device bytes > budget {b}")
        if st.pinned_bytes > b:
            raise Failure("budget", f"pinned {st.pinned_bytes} > budget {b}")

    def check_values(self):
        for name in self._live():
            hh = self.h[name]
            try:
                got = hh.t.numpy()
                dt = hh.t.dtype.name
            except Exception as e:  # noqa: BLE001
                if self._is_budget(e):
                    raise Failure("read-budget-error", f"{name}.numpy(): {e}")
                raise Failure(f"read-fails:{type(e).__name__}:{getattr(e, 'status_name', '')}", f"{name}.numpy(): {e}")
            if TORCH_DTYPE[dt] != hh.s.dtype:
                raise Failure("dtype", f"{name} is {dt}, torch's is {hh.s.dtype}")
            want = _np_of(hh.s)
            if not _bits_equal(got, want):
                raise Failure("mismatch", f"{name}: library {_short(got)} != torch {_short(want)}; "
                                          f"{_first_diff(got, want)}")
        for name in sorted(self.ext):
            x = self.ext[name]
            if x.kind == "torch":
                got, want = _np_of(x.real), _np_of(x.s)
            else:
                got, want = np.array(x.real, copy=True), np.array(x.s, copy=True)
            if not _bits_equal(got, want):
                raise Failure("outside-mismatch", f"{name} (shared with torch/NumPy): reads {_short(got)}, "
                                                  f"should be {_short(want)}; {_first_diff(got, want)}")

    # ------------------------------------------------ one seed
    def report(self, failure=None, last=HISTORY) -> str:
        lines = [f"FUZZ FAILURE seed={self.seed} step={self.step} check_p={self.check_p}"]
        if failure is not None:
            lines.append(f"  {failure.category}: {failure.detail}")
        lines.append(f"  manager: {self.manager}; open scopes: {[s[0] for s in self.scopes]}")
        lines.append(f"  last {min(last, len(self.history))} calls:")
        lines += ["    " + h for h in self.history[-last:]]
        lines.append(f"  replay: python {os.path.relpath(__file__)} --seed {self.seed} --steps {self.step + 1}"
                     + (f" --policy {','.join(self.policies)}" if self.policies != POLICIES else ""))
        return "\n".join(lines)

    def start(self):
        self.release_batch = tr.set_release_batch(1)
        gc.collect()
        tr.flush_releases()  # what earlier tests' collected tensors left waiting is not this seed's
        if tr.residency.enabled():
            tr.residency.disable()
        while (s := tr.current_scope()) is not None:
            s.dispose()
        tr.manual_seed(self.seed)
        self.baseline = tr.live_handles()

    def cleanup(self):
        """Releases everything (in a random order), disables the manager and checks the live count
        is back at its baseline."""
        self.log("# cleanup")
        names = self._live()
        self.rng.shuffle(names)
        if self.manager is not None:
            self._x_disable(Action("disable"))
        self.check(values=True)
        for n in names:
            self._x_close(Action("close", (n,)))
        for sname, sobj in list(reversed(self.scopes)):
            self._x_scope_dispose(Action("scope_dispose", (sname,)))
        self.check_values()
        self.ext.clear()
        gc.collect()
        live = tr.live_handles()
        if live != self.baseline:
            raise Failure("live-count", f"after cleanup tr.live_handles() is {live}, baseline {self.baseline}")

    def emergency_cleanup(self):
        """After a failure: get the process back to no manager, no scope, nothing held."""
        for _ in range(3):
            try:
                if tr.residency.enabled():
                    tr.residency.disable()
                break
            except Exception:  # noqa: BLE001
                try:
                    tr.residency.configure(policy="resident")
                except Exception:  # noqa: BLE001
                    pass
        for hh in list(self.h.values()):
            try:
                hh.t.close()
            except Exception:  # noqa: BLE001
                pass
        self.h.clear()
        for _, s in reversed(self.scopes):
            try:
                s.dispose()
            except Exception:  # noqa: BLE001
                pass
        self.scopes.clear()
        self.ext.clear()
        self.dead.clear()
        gc.collect()
        return not tr.residency.enabled()


# Binding habits that differ from PyTorch, found by this fuzzer (see the report in test_fuzz.py):
# `--avoid-known` keeps the generator away from them, to look for other failures.
KNOWN_HABITS: tuple = ()


def run_seed(seed: int, steps: int, policies=POLICIES, verbose=False, quiet=False, actions=None,
             check_p=None, avoid=(), cuda_allocator=False):
    """Runs one seed for `steps` steps (or the given `actions`, skipping those whose handles are
    gone), with the simulated device's kernels allocating as CUDA's where `cuda_allocator`.
    Returns (fuzzer, failure or None, the actions executed)."""
    fz = Fuzzer(seed, policies, check_p=check_p, verbose=verbose, avoid=avoid, cuda_allocator=cuda_allocator)
    tr.residency.simulate_cuda_allocator(cuda_allocator)
    wd = watchdog()
    done = []
    failure = None
    try:
        fz.start()
        fz.check()
        source = actions if actions is not None else range(steps)
        for item in source:
            act = item if actions is not None else fz.generate()
            if actions is not None and not fz.refs_ok(act):
                continue
            wd.arm(STEP_TIMEOUT, fz.report)
            done.append(act)
            fz.execute(act)
            if not act.check:
                fz.history[-1] += "  # (values not read back after this call)"
            fz.check(values=act.check)
            fz.step += 1
        wd.arm(STEP_TIMEOUT, fz.report)
        fz.cleanup()
    except Failure as f:
        failure = f
    except Exception as e:  # noqa: BLE001  (a bug of the fuzzer, or an error nobody expected)
        failure = Failure(f"exception:{type(e).__name__}", "".join(traceback.format_exception(e))[-2000:])
    finally:
        wd.disarm()
    if failure is not None:
        if not quiet:
            print(fz.report(failure), flush=True)
        fz.clean_after = fz.emergency_cleanup()
    tr.residency.simulate_cuda_allocator(False)
    tr.set_release_batch(getattr(fz, "release_batch", 1))  # the process's own setting again
    return fz, failure, done


def shrink(seed, steps, policies=POLICIES, check_p=None, budget_s=300, avoid=(), cuda_allocator=False):
    """Minimises a failing run to the shortest list of actions that fails with the same category
    (delta debugging over the actions; a replay skips actions whose handles are gone)."""
    fz, failure, actions = run_seed(seed, steps, policies, quiet=True, check_p=check_p, avoid=avoid,
                                    cuda_allocator=cuda_allocator)
    if failure is None:
        print(f"seed {seed}: no failure in {steps} steps")
        return None
    cat = failure.category
    acts = actions  # the failing action is the last one
    t0 = time.monotonic()
    force = [True]

    def fails(cand):
        cand = _copy.deepcopy(cand)
        if force[0]:
            for a in cand:
                a.check = True
        _, f, _ = run_seed(seed, 0, policies, quiet=True, actions=cand, cuda_allocator=cuda_allocator)
        return f is not None and f.category == cat

    if not fails(acts):
        force[0] = False  # reading back at every step changes what happens: keep the seed's reads
        if not fails(acts):
            print(f"seed {seed}: the failure ({cat}) does not replay from the action list")
            return None
    n = 2
    while len(acts) >= 2 and time.monotonic() - t0 < budget_s:
        chunk = max(1, len(acts) // n)
        reduced = False
        for i in range(0, len(acts), chunk):
            cand = acts[:i] + acts[i + chunk:]
            if cand and fails(cand):
                acts = cand
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(acts), n * 2)
    final = _copy.deepcopy(acts)
    if force[0]:
        for a in final:
            a.check = True
    fz, f, done = run_seed(seed, 0, policies, quiet=True, actions=final, cuda_allocator=cuda_allocator)
    print(f"seed {seed}: {cat} minimised to {len(acts)} calls (values read after "
          f"{'every call' if force[0] else 'the calls marked [c]'}):")
    print("\n".join("    " + h for h in fz.history))
    print(f"  -> {f}")
    return acts, fz.history, f


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="run this seed (default: fresh seeds)")
    ap.add_argument("--steps", type=int, default=400, help="steps per seed")
    ap.add_argument("--seconds", type=float, help="run fresh seeds until this many seconds passed")
    ap.add_argument("--first-seed", type=int, default=None, help="first seed of --seconds (default: from the clock)")
    ap.add_argument("--policy", default=",".join(POLICIES), help="policies to configure, comma-separated")
    ap.add_argument("--check-p", type=float, default=None, help="probability of the value check per step")
    ap.add_argument("--shrink", action="store_true", help="minimise a failure of --seed")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every call")
    ap.add_argument("--cuda-allocator", action="store_true", help="the simulated device's kernels allocate as CUDA's do")
    ap.add_argument("--avoid-known", action="store_true",
                    help=f"keep away from the known binding habits ({', '.join(KNOWN_HABITS)})")
    args = ap.parse_args(argv)
    policies = tuple(p.strip() for p in args.policy.split(",") if p.strip())
    avoid = KNOWN_HABITS if args.avoid_known else ()
    for p in policies:
        if p not in POLICIES:
            ap.error(f"unknown policy {p}")
    print(f"library {tr.LIB_PATH}, torch {torch.__version__}, accelerated={tr.accelerated}", flush=True)
    if args.seed is not None and args.seconds is None:
        if args.shrink:
            shrink(args.seed, args.steps, policies, args.check_p, avoid=avoid, cuda_allocator=args.cuda_allocator)
            return 0
        t0 = time.monotonic()
        fz, f, _ = run_seed(args.seed, args.steps, policies, args.verbose, check_p=args.check_p, avoid=avoid,
                             cuda_allocator=args.cuda_allocator)
        print(f"seed {args.seed}: {'FAIL ' + f.category if f else 'ok'} ({fz.step} steps, "
              f"{time.monotonic() - t0:.1f}s)", flush=True)
        return 1 if f else 0
    seconds = args.seconds if args.seconds is not None else 60.0
    deadline = float(os.environ.get("FUZZ_DEADLINE", "0")) or time.time() + seconds
    seed = args.first_seed if args.first_seed is not None else (
        args.seed if args.seed is not None else int(time.time() * 1000) % 10_000_000)
    failures = dict(os.environ.get("FUZZ_FAILURES", "") and
                    (x.split("=", 1) for x in os.environ["FUZZ_FAILURES"].split(";")) or [])
    runs = int(os.environ.get("FUZZ_RUNS", "0"))
    while time.time() < deadline:
        t0 = time.monotonic()
        fz, f, _ = run_seed(seed, args.steps, policies, args.verbose, check_p=args.check_p, avoid=avoid,
                               cuda_allocator=args.cuda_allocator)
        runs += 1
        print(f"seed {seed}: {'FAIL ' + f.category if f else 'ok'} ({fz.step} steps, {time.monotonic() - t0:.1f}s)",
              flush=True)
        if f is not None:
            failures.setdefault(f.category, str(seed))
        seed += 1
        if f is not None and not getattr(fz, "clean_after", True):
            # the manager could not be turned off: go on in a fresh process
            print("  (the process could not be cleaned up; going on in a fresh one)", flush=True)
            env = dict(os.environ, FUZZ_DEADLINE=str(deadline), FUZZ_RUNS=str(runs),
                       FUZZ_FAILURES=";".join(f"{k}={v}" for k, v in failures.items()))
            rest, skip = [], False
            for a in (argv if argv is not None else sys.argv[1:]):
                if skip or a.startswith("--first-seed"):
                    skip = a == "--first-seed"
                    continue
                rest.append(a)
            os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *rest,
                                       f"--first-seed={seed}"], env)
    print(f"{runs} seeds run; {len(failures)} distinct failure categories", flush=True)
    for cat, s in sorted(failures.items()):
        print(f"  {cat}: first at seed {s}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
