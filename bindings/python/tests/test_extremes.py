"""Every op of the op table (src/ops/ops.def, read through tools/optable.py) called through the C
ABI with extreme scalar and size arguments: NaN, the infinities, 1e30, the int64 limits, 0 and
negative sizes, beside ordinary tensors of several dtypes and ranks. Each call must succeed or
return a status; none may reach a panic, whatever status the boundary then returns, so the
library's count of caught panics must stay 0 (a caught panic would also be a PanicError)."""
import contextlib
import math
import pathlib
import sys

import numpy as np
import pytest

import tensorref as tr

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tools"))
from optable import load  # noqa: E402

OPS = load()

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
EXTREMES = {
    "scalar": [math.nan, math.inf, -math.inf, 1e30, -1e30, I64_MAX, I64_MIN, 0, -1, True, 0.0],
    "f64": [math.nan, math.inf, -math.inf, 1e30, -1e30, 0.0, -1.0],
    "i64": [I64_MAX, I64_MIN, 2**62, -(2**62), 0, -1],
    "i64[]": [[I64_MAX], [I64_MIN], [2**62, 2**62], [0], [-1], [], [0, -1], [I64_MAX, 0]],
    "bool": [True, False],
}
ORDINARY = {"scalar": 2, "f64": 0.5, "i64": 1, "i64[]": [2, 3], "bool": False, "dtype": tr.float32}


def tensors():
    """Inputs of several dtypes and ranks (0-dim and empty included)."""
    return [tr.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3)),
            tr.from_numpy(np.arange(6, dtype=np.int64).reshape(2, 3)),
            tr.from_numpy(np.array(1.5, np.float32)),
            tr.from_numpy(np.zeros((0, 3), np.float32)),
            tr.from_numpy(np.array([True, False]))]


def tensor_arg(ty, t):
    if ty.startswith("T[]") or ty == "params":
        return [t, t]
    return t


def calls(op, inputs):
    """(arguments) tuples: each non-tensor parameter takes each extreme, the others ordinary
    values, with each input tensor in every tensor parameter."""
    kinds = [p.ty.rstrip("!?") for p in op.params]
    for t in (inputs if any(k.startswith("T") for k in kinds) else [None]):
        base = [tensor_arg(p.ty, t) if k.startswith("T") else ORDINARY.get(k) for p, k in zip(op.params, kinds)]
        yield tuple(base)
        for i, k in enumerate(kinds):
            for value in EXTREMES.get(k, []):
                args = list(base)
                args[i] = value
                yield tuple(args)


@pytest.mark.parametrize("managed", [False, True], ids=["unmanaged", "flow"])
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_extreme_arguments_give_statuses_never_panics(op, managed):
    fn = getattr(tr._ops_generated, op.name)
    inputs = tensors()
    before = tr.panics_caught()
    made = []
    session = tr.residency.session(policy="flow", budget_bytes=1 << 20) if managed else contextlib.nullcontext()
    try:
        with session:
            for args in calls(op, inputs):
                try:
                    out = fn(*args)
                except tr.PanicError as e:
                    pytest.fail(f"{op.name}{args!r}: {e}")
                except (tr.TensorRefError, TypeError, ValueError, OverflowError):
                    continue
                if isinstance(out, tr.Tensor) and not any(out is x for x in inputs):
                    made.append(out)
                assert tr.panics_caught() == before, f"{op.name}{args!r} reached a panic"
    finally:
        for t in made + inputs:
            t.close()
    assert tr.panics_caught() == before
