"""Indexing, assignment and reductions where the fuzzer (fuzz_api.py, KNOWN_HABITS) found the
binding's habits apart from PyTorch's, each checked against torch itself in the same test:
negative index entries, masks over empty tensors, max / min over a dim of bools, values with
leading size-1 dimensions, a tensor assigned into itself, writes through expanded views, and
index_put_'s dtype rule."""
import warnings

import numpy as np
import pytest
import torch

import tensorref as tr


def same(ours, theirs):
    assert isinstance(ours, tr.Tensor), type(ours)
    assert tuple(ours.shape) == tuple(theirs.shape), (ours.shape, theirs.shape)
    assert ours.dtype.name.rstrip("_") == str(theirs.dtype).removeprefix("torch."), (ours.dtype, theirs.dtype)
    assert ours.tolist() == theirs.tolist()


def both(make):
    """`make(m)` for tensorref and for torch (m: the module), with `m.T` for tensor()."""
    return make(_TR), make(_TORCH)


class _Module:
    def __init__(self, m):
        self.m = m

    def __getattr__(self, name):
        return getattr(self.m, name)

    def T(self, *a, **k):  # noqa: N802
        return self.m.tensor(*a, **k)


_TR, _TORCH = _Module(tr), _Module(torch)


def outcome(fn, *args):
    """The result of fn(*args), or the exception it raised."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        return e


def assign(t, key, value):
    t[key] = value
    return t


def six(m):
    return m.T([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])


# ------------------------------------------------------------ B1: negative index entries
@pytest.mark.parametrize("key", [
    [-1], [-2, 1, -1], np.array([-1, 0]), "tensor", (slice(None), [-1, 0, -3]),
    (slice(None), "tensor2d"), "tensor0d", [],
], ids=str)
def test_negative_index_entries_count_from_the_end_when_reading(key):
    def k(m):
        if isinstance(key, str):
            return {"tensor": m.T([-2, 1]), "tensor0d": m.T(-1)}[key]
        if isinstance(key, tuple) and key[1] == "tensor2d":
            return (slice(None), m.T([[-1, 0], [1, -2]]))
        return key
    ours, theirs = both(lambda m: six(m)[k(m)])
    same(ours, theirs)


def test_negative_index_entries_count_from_the_end_when_writing():
    ours, theirs = both(lambda m: assign(m.T([0.0, 1.0, 2.0, 3.0]), [-1, 0], m.T([7.0, 8.0])))
    same(ours, theirs)
    ours, theirs = both(lambda m: assign(m.T([0.0, 1.0, 2.0, 3.0]), m.T([-1, -2]), 9.0))
    same(ours, theirs)
    ours, theirs = both(lambda m: assign(six(m), (slice(None), [[0, -1]]),
                                         m.T([[[5.0, 6.0]], [[7.0, 8.0]]])))
    same(ours, theirs)
    ours, theirs = both(lambda m: assign(m.T([0, 1, 2]), m.T([-3], dtype=m.int32), 5))
    same(ours, theirs)


@pytest.mark.parametrize("key", [[2], [-3], [0, 5], (slice(None), [3]), (slice(None), [-4])], ids=str)
def test_index_entries_out_of_range_are_an_index_error_as_in_torch(key):
    with pytest.raises(IndexError) as theirs:
        six(_TORCH)[key]
    with pytest.raises(IndexError, match="out of bounds") as ours:
        six(_TR)[key]
    bad = str(theirs.value).split()[1]
    assert f"index {bad} is out of bounds" in str(ours.value)
    for value in (1.0, "tensor"):
        with pytest.raises(IndexError):
            assign(six(_TORCH), key, value if value != "tensor" else torch.tensor(1.0))
        with pytest.raises(IndexError, match="out of bounds"):
            assign(six(_TR), key, value if value != "tensor" else tr.tensor(1.0))


# ------------------------------------------------------------ B2: masks over empty tensors
@pytest.mark.parametrize("case", ["zeros(2,0)[mask]", "a[0:0, mask]", "a[0:0, tensor mask]",
                                  "empty[empty mask]", "zeros(0,2,2)[:, mask2d]", "a[:, 0-d mask]"])
def test_masks_over_empty_tensors_read_like_torch(case):
    def make(m):
        return {
            "zeros(2,0)[mask]": lambda: m.zeros(2, 0)[np.array([True, False])],
            "a[0:0, mask]": lambda: six(m)[0:0, np.array([True, False, True])],
            "a[0:0, tensor mask]": lambda: six(m)[0:0, m.T([True, False, True])],
            "empty[empty mask]": lambda: m.zeros(0)[m.zeros(0) > 0],
            "zeros(0,2,2)[:, mask2d]": lambda: m.zeros(0, 2, 2)[:, m.T([[True, False], [True, True]])],
            "a[:, 0-d mask]": lambda: six(m)[:, m.T(False)],
        }[case]()
    ours, theirs = both(make)
    same(ours, theirs)


def test_masks_over_empty_tensors_write_like_torch():
    for make in (lambda m: assign(m.zeros(2, 0), np.array([True, False]), 1.0),
                 lambda m: assign(m.zeros(2, 0), np.array([True, False]), m.zeros(1, 0)),
                 lambda m: assign(six(m), (slice(0, 0), np.array([True, False, True])), 3.0),
                 lambda m: assign(six(m), (slice(0, 0), np.array([True, False, True])), m.zeros(2))):
        ours, theirs = both(make)
        same(ours, theirs)
    # a value that does not broadcast to the (empty) indexing result: both refuse
    with pytest.raises(RuntimeError, match="shape mismatch"):
        assign(six(_TORCH), (slice(0, 0), np.array([True, False, True])), torch.zeros(3))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        assign(six(_TR), (slice(0, 0), np.array([True, False, True])), tr.zeros(3))


# ------------------------------------------------------------ B3: max / min over a dim of bools
@pytest.mark.parametrize("which", ["max", "min"])
@pytest.mark.parametrize("values,dim,keepdim", [
    ([[True, False]], 1, False), ([[True, False], [False, False]], 1, True),
    ([[True, False], [False, True]], 0, False), ([[False, False, True]], -1, False)])
def test_max_and_min_over_a_dim_of_bools_give_values_and_indices(which, values, dim, keepdim):
    ours = getattr(tr.tensor(values), which)(dim, keepdim=keepdim)
    theirs = getattr(torch.tensor(values), which)(dim, keepdim=keepdim)
    same(ours.values, theirs.values)
    same(ours.indices, theirs.indices)


def test_max_over_a_dim_of_an_empty_bool_tensor_and_argmin_of_bools_as_in_torch():
    ours, theirs = tr.zeros(0, 2, dtype=tr.bool_).max(1), torch.zeros(0, 2, dtype=torch.bool).max(1)
    same(ours.values, theirs.values)
    same(ours.indices, theirs.indices)
    with pytest.raises(RuntimeError, match="does not support bool"):
        torch.tensor([[True, False]]).argmin(1)
    with pytest.raises(RuntimeError, match="does not support bool"):  # still refused, as torch does
        tr.tensor([[True, False]]).argmin(1)


# ------------------------------------------------------------ B6: leading size-1 dims of the value
@pytest.mark.parametrize("key,shape", [(0, (1, 3)), (0, (1, 1, 3)), (slice(None), (1, 1, 2, 3)),
                                       ((1, 2), (1, 1)), ([0], (1, 1, 3)), ((slice(None), [1]), (1, 2, 1)),
                                       (np.array([True, False]), (1, 1, 3))], ids=str)
def test_assignment_drops_the_values_leading_size_one_dims(key, shape):
    def make(m):
        value = m.arange(1.0, 1.0 + int(np.prod(shape))).reshape(*shape)
        return assign(m.zeros(2, 3), key, value)
    ours, theirs = both(make)
    same(ours, theirs)


def test_a_value_that_does_not_broadcast_still_fails():
    with pytest.raises(RuntimeError):
        assign(torch.zeros(2, 3), 0, torch.ones(2, 3))
    with pytest.raises((RuntimeError, ValueError)):
        assign(tr.zeros(2, 3), 0, tr.ones(2, 3))


# ------------------------------------------------------------ B7: a tensor assigned into itself
@pytest.mark.parametrize("case", ["t[0] = t", "t[:] = t", "t[...] = t", "t[None] = t",
                                  "t[0] = t[0:1]", "t[:] = t[0]", "t[1:] = t[0]", "t[:, None] = t[:, None]",
                                  "t[mask] = t[1]"])
def test_assigning_a_tensor_its_own_memory_works_as_in_torch(case):
    def make(m):
        t = m.T([5.0]) if case == "t[0] = t" else m.T([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
        if case in ("t[:] = t[0]", "t[1:] = t[0]", "t[mask] = t[1]"):
            t = m.T([0.0, 1.0, 2.0, 3.0])
        key, value = {
            "t[0] = t": (0, lambda: t), "t[:] = t": (slice(None), lambda: t),
            "t[...] = t": (Ellipsis, lambda: t), "t[None] = t": (None, lambda: t),
            "t[0] = t[0:1]": (0, lambda: t[0:1]), "t[:] = t[0]": (slice(None), lambda: t[0]),
            "t[1:] = t[0]": (slice(1, None), lambda: t[0]),
            "t[:, None] = t[:, None]": ((slice(None), None), lambda: t[:, None]),
            "t[mask] = t[1]": (np.array([True, False, True, False]), lambda: t[1]),
        }[case]
        return assign(t, key, value())
    ours, theirs = both(make)
    same(ours, theirs)


@pytest.mark.parametrize("case", ["t[1:] = t[:3]", "t[[1, 2, 3]] = t[:3]", "t[[1, 2]] = t[0]",
                                  "t[[1, 2]] = t[0:1]", "t[[0, 1, 2, 3]] = t", "t[mask] = t[1:3]",
                                  "rows[mask] = rows[0]"])
def test_a_value_overlapping_the_target_otherwise_raises_as_in_torch(case):
    def attempt(m):
        t = m.T([0.0, 1.0, 2.0, 3.0])
        mask = m.T([True, False, True, False])
        rows = six(m)
        {"t[1:] = t[:3]": lambda: assign(t, slice(1, None), t[:3]),
         "t[[1, 2, 3]] = t[:3]": lambda: assign(t, [1, 2, 3], t[:3]),
         "t[[1, 2]] = t[0]": lambda: assign(t, [1, 2], t[0]),
         "t[[1, 2]] = t[0:1]": lambda: assign(t, [1, 2], t[0:1]),
         "t[[0, 1, 2, 3]] = t": lambda: assign(t, [0, 1, 2, 3], t),
         "t[mask] = t[1:3]": lambda: assign(t, mask, t[1:3]),
         "rows[mask] = rows[0]": lambda: assign(rows, m.T([True, True]), rows[0])}[case]()
        return t, rows
    for m in (torch, tr):
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            attempt(_TORCH if m is torch else _TR)


def test_a_value_sharing_memory_without_overlap_is_written_as_in_torch():
    ours, theirs = both(lambda m: (lambda t: assign(t, [1, 2], t[0::2]))(m.T([0.0, 1.0, 2.0, 3.0])))
    same(ours, theirs)
    ours, theirs = both(lambda m: (lambda t: assign(t, (slice(None), [0]), t[:, 1:2]))(six(m)))
    same(ours, theirs)


# ------------------------------------------------------------ B8: writes through expanded views
def expanded(m):
    return m.zeros(1, 3).expand(2, 3)


@pytest.mark.parametrize("key", [slice(None), Ellipsis, None, (slice(None), 0), (slice(None), slice(0, 2))],
                         ids=str)
@pytest.mark.parametrize("value", [1.0, "0-d", "row"])
def test_basic_assignment_into_an_expanded_view_raises_as_in_torch(key, value):
    for m in (_TORCH, _TR):
        t = expanded(m)
        v = {1.0: 1.0, "0-d": m.T(1.0), "row": m.ones(t[key].shape[-1])}[value]
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            t[key] = v
        assert t.tolist() == [[0.0] * 3] * 2  # nothing written


@pytest.mark.parametrize("case", ["E[0:1] = 1", "E[0] = 1", "E1d[0] = 1", "empty[:] = 1",
                                  "E[[0]] = 1", "E[mask2d] = 1", "E[:, [0]] = 1", "E[[0]] = row",
                                  "E[[0, 1]] = rows", "E[[0, 1]] = row", "E[mask] = rows",
                                  "E2[[0, 1]] = rows", "E2[:, [2, 0]] = block"])
def test_assignment_that_torch_takes_on_an_expanded_view_writes_the_same(case):
    def make(m):
        e, e2 = expanded(m), m.zeros(1, 1).expand(2, 3)
        rows = m.T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        return {
            "E[0:1] = 1": lambda: assign(e, slice(0, 1), 1.0),
            "E[0] = 1": lambda: assign(e, 0, 1.0),
            "E1d[0] = 1": lambda: assign(m.zeros(1).expand(3), 0, 1.0),
            "empty[:] = 1": lambda: assign(m.zeros(1, 0).expand(2, 0), slice(None), 1.0),
            "E[[0]] = 1": lambda: assign(e, [0], 1.0),
            "E[mask2d] = 1": lambda: assign(e, m.T([[True, False, True], [False, False, False]]), 1.0),
            "E[:, [0]] = 1": lambda: assign(e, (slice(None), [0]), 1.0),
            "E[[0]] = row": lambda: assign(e, [0], m.T([[1.0, 2.0, 3.0]])),
            "E[[0, 1]] = rows": lambda: assign(e, [0, 1], rows),
            "E[[0, 1]] = row": lambda: assign(e, [0, 1], m.T([1.0, 2.0, 3.0])),
            "E[mask] = rows": lambda: assign(e, m.T([True, True]), rows),
            "E2[[0, 1]] = rows": lambda: assign(e2, [0, 1], rows),
            "E2[:, [2, 0]] = block": lambda: assign(e2, (slice(None), [2, 0]), m.T([[0.0, 1.0], [2.0, 3.0]])),
        }[case]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both warn that index_put_ on expanded tensors is deprecated
        ours, theirs = both(make)
    same(ours, theirs)


# ------------------------------------------------------------ B9: index_put_'s dtype rule
@pytest.mark.parametrize("case", ["bool[[0, 0]] = floats", "float[[0]] = 0-d long", "float[[0]] = long",
                                  "float[mask] = two longs"])
def test_index_put_of_a_tensor_of_another_dtype_raises_as_in_torch(case):
    def attempt(m):
        return {
            "bool[[0, 0]] = floats": lambda: assign(m.T([False, False]), [0, 0], m.T([2.5, 0.0])),
            "float[[0]] = 0-d long": lambda: assign(m.zeros(2), [0], m.T(2)),
            "float[[0]] = long": lambda: assign(m.zeros(2), [0], m.T([2])),
            "float[mask] = two longs": lambda: assign(m.zeros(4), m.T([True, False, True, False]), m.T([7, 8])),
        }[case]()
    for m in (_TORCH, _TR):
        with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
            attempt(m)


@pytest.mark.parametrize("case", ["bool[0] = 0-d float", "bool[0:1] = floats", "bool[[0]] = 2.5",
                                  "float[mask] = one long", "float[mask] = 0-d long"])
def test_what_torch_converts_is_still_converted(case):
    def make(m):
        return {
            "bool[0] = 0-d float": lambda: assign(m.T([False, False]), 0, m.T(2.5)),
            "bool[0:1] = floats": lambda: assign(m.T([False, False]), slice(0, 1), m.T([2.5])),
            "bool[[0]] = 2.5": lambda: assign(m.T([False, False]), [0], 2.5),
            "float[mask] = one long": lambda: assign(m.zeros(2), m.T([True, False]), m.T([2])),
            "float[mask] = 0-d long": lambda: assign(m.zeros(2), m.T([True, False]), m.T(2)),
        }[case]()
    ours, theirs = both(make)
    same(ours, theirs)


def test_index_put_shape_rule_as_in_torch():
    for m in (_TORCH, _TR):
        with pytest.raises(RuntimeError, match="shape mismatch: value tensor of shape \\[3\\] cannot be "
                                               "broadcast to indexing result of shape \\[2\\]"):
            assign(m.zeros(4), [0, 1], m.T([1.0, 2.0, 3.0]))
        with pytest.raises(RuntimeError, match="shape mismatch"):
            assign(m.zeros(4), m.T([True, False, True, False]), m.T([1.0, 2.0, 3.0]))
    for make in (lambda m: assign(m.zeros(4), m.T([True, False, True, False]), m.T([[7.0, 8.0]])),
                 lambda m: assign(m.zeros(4), [0, 0], m.T([1.0, 2.0])),  # the last write wins
                 lambda m: assign(m.zeros(4), m.T(1), m.T([9.0]))):
        ours, theirs = both(make)
        same(ours, theirs)


# ------------------------------------------------------------ uint8 indices are masks
def test_a_uint8_index_is_a_mask_as_in_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in both
        for make in (lambda m: m.T([0.0, 1.0, 2.0, 3.0])[m.T([1, 0, 1, 0], dtype=m.uint8)],
                     lambda m: m.T([0.0, 1.0, 2.0, 3.0])[np.array([1, 0, 1, 0], dtype=np.uint8)],
                     lambda m: m.T([[0.0, 1.0], [2.0, 3.0]])[:, m.T([0, 1], dtype=m.uint8)]):
            ours, theirs = both(make)
            same(ours, theirs)


def test_non_contiguous_targets_with_whole_masks_still_write():
    def make(m):
        t = m.arange(6.0).reshape(3, 2).permute(1, 0)
        return assign(t, t > 2, m.T([10.0, 20.0, 30.0]))
    ours, theirs = both(make)
    same(ours, theirs)
