"""Scalars keep their type, with PyTorch's promotion (checked against torch itself): an int keeps
an integer tensor integer and is exact to 64 bits, item() of an integer tensor is an exact int,
full() is exact and refuses what its dtype cannot hold; `s / a` is a true division; every
augmented assignment is in place."""
import numpy as np
import pytest
import torch

import tensorref as tr

TENSORS = {
    "int64": ([0, 1, -3], torch.int64), "int32": ([0, 1, -3], torch.int32),
    "uint8": ([0, 1, 3], torch.uint8), "float32": ([0.5, -1.5, 2.0], torch.float32),
    "float64": ([0.5, -1.5, 2.0], torch.float64), "float16": ([0.5, -1.5, 2.0], torch.float16),
    "bool": ([True, False, True], torch.bool),
}
SCALARS = [1, 2, -1, 0.5, 2.0, True, np.int64(3), np.float32(0.25)]
OPS = {"+": lambda a, s: a + s, "-": lambda a, s: a - s, "*": lambda a, s: a * s,
       "/": lambda a, s: a / s, "r+": lambda a, s: s + a, "r*": lambda a, s: s * a,
       "r-": lambda a, s: s - a, "r/": lambda a, s: s / a, "**": lambda a, s: a ** s,
       ">": lambda a, s: a > s, "==": lambda a, s: a == s}


def torch_scalar(s):
    return s.item() if isinstance(s, np.generic) else s


@pytest.mark.parametrize("name", TENSORS)
def test_scalar_promotion_is_pytorchs(name):
    values, tdtype = TENSORS[name]
    a, t = tr.tensor(values, dtype=name.replace("bool", "bool_")), torch.tensor(values, dtype=tdtype)
    for s in SCALARS:
        for op, f in OPS.items():
            if op == "**" and isinstance(s, bool):
                continue  # torch special-cases x ** True as a copy; libtorch has no bool pow kernel
            try:
                want = f(t, torch_scalar(s))
            except RuntimeError:  # torch refuses (bool - bool ...): so do we
                with pytest.raises(tr.TensorRefError):
                    f(a, s)
                continue
            got = f(a, s)
            assert got.dtype.name == str(want.dtype).removeprefix("torch.").replace("bool", "bool_"), (name, op, s)
            assert np.allclose(got.numpy().astype(np.float64), want.double().numpy(), equal_nan=True), (name, op, s)


def test_an_integer_index_stays_an_integer():
    idx = tr.tensor([0, 1])
    assert (idx + 1).dtype is tr.int64
    emb = tr.arange(6, dtype=tr.float32).reshape(3, 2)
    assert emb.index_select(0, idx + 1).tolist() == [[2.0, 3.0], [4.0, 5.0]]
    assert emb[idx + 1].tolist() == [[2.0, 3.0], [4.0, 5.0]]


def test_integers_are_exact_to_64_bits():
    assert (tr.tensor([2 ** 60]) + 1).item() == 2 ** 60 + 1
    assert (tr.tensor([2 ** 60]) * 2).item() == 2 ** 61
    assert tr.full([1], 2 ** 62 + 1, tr.int64).item() == 2 ** 62 + 1
    assert tr.full((2,), 2 ** 62 + 1).dtype is tr.int64  # the dtype follows the value
    assert tr.tensor([2 ** 53 + 1]).item() == 2 ** 53 + 1
    assert type(tr.tensor([3]).item()) is int and type(tr.tensor(True).item()) is bool
    assert type(tr.tensor(1.5).item()) is float
    with pytest.raises(OverflowError, match="float"):
        tr.ones(1) + 2 ** 64
    with pytest.raises(OverflowError):
        tr.full([1], 2 ** 63, tr.int64)


def test_full_refuses_what_its_dtype_cannot_hold():
    for value, dtype in ((float("inf"), tr.int64), (float("nan"), tr.int32), (256, tr.uint8),
                         (-1, tr.uint8), (1e19, tr.int64)):
        with pytest.raises(tr.ArgumentError, match="does not fit"):
            tr.full([1], value, dtype)
    assert tr.full([1], float("inf")).item() == float("inf")
    assert tr.full([2], 7, tr.float32).tolist() == [7.0, 7.0]


def test_scalar_over_tensor_is_pytorchs():
    x = np.arange(1, 1001, dtype=np.float32) * np.float32(0.37) + np.float32(0.01)
    a = tr.from_numpy(x)
    # PyTorch computes s / t as t^-1 * s: the same results as without the library, though some
    # are 1 ulp off the correctly rounded quotient.
    assert np.array_equal((3.0 / a).numpy(), (3.0 / torch.from_numpy(x)).numpy())
    assert not np.array_equal((3.0 / torch.from_numpy(x)).numpy(), np.float32(3.0) / x)
    assert np.array_equal((3 / tr.tensor([2, 4])).numpy(), np.array([1.5, 0.75], np.float32))
    assert (2 - tr.tensor([1, 5])).tolist() == [1, -3]
    assert (2 ** tr.tensor([1, 3])).tolist() == [2, 8]


@pytest.mark.parametrize("fast", [True, False], ids=["accelerated-or-pure", "pure"])
def test_every_augmented_assignment_is_in_place(fast):
    from tensorref import _accel
    prev = _accel.use(fast) if _accel.FAST else False
    try:
        x = torch.ones(3)
        a = tr.from_torch(x)  # shares x's storage: in place means torch sees every step
        keep = a
        for step, want in ((lambda t: t.__iadd__(2), 3.0), (lambda t: t.__isub__(0.5), 2.5),
                           (lambda t: t.__imul__(4), 10.0), (lambda t: t.__itruediv__(2), 5.0),
                           (lambda t: t.__ipow__(2), 25.0), (lambda t: t.__ifloordiv__(2), 12.0),
                           (lambda t: t.__imod__(5), 2.0)):
            a = step(a)
            assert a is keep and x.tolist() == [want] * 3
        a += tr.ones(3)
        a -= np.ones(3, dtype=np.float32)
        a *= tr.full([3], 3.0)
        a /= tr.full([3], 2.0)
        assert a is keep and x.tolist() == [3.0] * 3
        ints = tr.tensor([7, -7])
        ints += 1
        assert ints.tolist() == [8, -6] and ints.dtype is tr.int64
        with pytest.raises(tr.ShapeDtypeError, match="can't be cast"):
            ints /= 2  # an int64 tensor cannot hold a true quotient, as in PyTorch
        a.close()
    finally:
        if _accel.FAST:
            _accel.use(prev)
