"""The habits PyTorch users bring, each checked against torch itself where it computes: indexing
and assignment through indices, len / iteration / .T / size() / device, shapes as varargs,
reductions over dims, comparisons and equality, the missing operators, hashing, and a repr that
shows the values. Where a habit cannot hold, the error says what to write instead."""
import numpy as np
import pytest
import torch

import tensorref as tr


def pair(values):
    return tr.tensor(values), torch.tensor(values)


def same(ours, theirs):
    assert isinstance(ours, tr.Tensor), type(ours)
    assert tuple(ours.shape) == tuple(theirs.shape), (ours.shape, theirs.shape)
    assert ours.tolist() == theirs.tolist()


M = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
KEYS = [0, -1, (1, 2), (slice(None), slice(1, 3)), (slice(None, None, 2),), (Ellipsis, 1),
        (None, 0), (slice(1, None), None, slice(None, -1)), (Ellipsis, None), (1, Ellipsis, 2)]


@pytest.mark.parametrize("key", KEYS, ids=str)
def test_basic_indexing_reads_views_like_torch(key):
    a, t = pair(M)
    same(a[key], t[key])
    view = a[key]
    if view.numel() and view.ndim:  # a view: writing through it changes `a`
        view.zero_()
        t[key] = 0
        same(a, t)


def test_index_tensors_masks_and_lists_read_like_torch():
    a, t = pair(M)
    mask = t > 4
    same(a[a > 4], t[mask])
    same(a[tr.tensor([2, 0])], t[torch.tensor([2, 0])])
    same(a[[0, 2]], t[[0, 2]])
    same(a[:, tr.tensor([[0, 1], [3, 3]])], t[:, torch.tensor([[0, 1], [3, 3]])])
    same(a[tr.tensor([True, False, True])], t[torch.tensor([True, False, True])])
    same(a[1:, np.array([3, 1])], t[1:, [3, 1]])
    with pytest.raises(IndexError, match="one dimension at a time"):
        a[tr.tensor([0]), tr.tensor([1])]
    with pytest.raises(IndexError, match="out of bounds"):
        a[3]
    with pytest.raises(IndexError, match="too many indices"):
        a[0, 0, 0]
    with pytest.raises(ValueError, match="positive"):
        a[::-1]


def test_assignment_through_every_kind_of_index_matches_torch():
    a, t = pair([[float(x) for x in row] for row in M])
    writes = [((0,), 100.0), ((slice(None), 1), -1.0), ((1, slice(1, 3)), tr.tensor([7.0, 8.0])),
              ((Ellipsis, 3), np.float32(2.5)), ((t > 6,), 0.0), ((torch.tensor([2, 0]),), 5.0),
              ((slice(None), torch.tensor([0, 3])), torch.tensor([[1.0, 2.0]]))]
    for key, value in writes:
        ours_key = tuple(tr.from_torch(k) if isinstance(k, torch.Tensor) else k for k in key)
        ours_value = tr.from_torch(value) if isinstance(value, torch.Tensor) else value
        t[key] = torch.tensor(value.tolist()) if isinstance(value, tr.Tensor) else (value.item() if isinstance(value, np.generic) else value)
        a[ours_key] = ours_value
        same(a, t)
    a[a > 50] = tr.tensor([1.0] * int((t > 50).sum()))
    t[t > 50] = 1.0
    same(a, t)
    ints = tr.tensor([1, 2, 3])
    ints[0] = 2 ** 62 + 1  # exact: an integer scalar
    assert ints.tolist() == [2 ** 62 + 1, 2, 3]


def test_len_iteration_transpose_size_and_device():
    a, t = pair(M)
    assert len(a) == 3
    assert [row.tolist() for row in a] == M
    same(a.T, t.T)
    assert a.size() == (3, 4) and a.size(1) == 4 and a.size(-2) == 3
    assert a.device == "cpu"
    assert 5 in a and 12 not in a
    with pytest.raises(TypeError, match="0-d"):
        len(tr.tensor(1.0))
    with pytest.raises(TypeError, match="0-d"):
        iter(tr.tensor(1.0)).__next__()


def test_shapes_as_varargs_and_numpy_integers():
    assert tr.zeros(2, 3).shape == (2, 3) and tr.ones((2, 3)).shape == (2, 3)
    assert tr.zeros([2, 3], tr.int64).dtype is tr.int64  # the generated positional dtype still works
    assert tr.zeros(np.int64(3)).shape == (3,) and tr.randn(np.int32(2), 2).shape == (2, 2)
    a, t = pair(M)
    same(a.reshape(4, 3), t.reshape(4, 3))
    same(a.reshape((2, -1)), t.reshape((2, -1)))
    same(a.view(-1), t.view(-1))
    same(a.permute(1, 0), t.permute(1, 0))
    same(a[0].expand(2, -1), t[0].expand(2, -1))
    same(tr.ones(1, 3, 1).squeeze(), torch.ones(1, 3, 1).squeeze())
    same(tr.arange(5), torch.arange(5))
    assert tr.arange(0, 1, 0.25).dtype is tr.float32 and tr.arange(5).dtype is tr.int64
    same(tr.full((2,), 3), torch.full((2,), 3))


def test_reductions_over_dims_like_torch():
    a, t = pair([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    same(a.sum(0), t.sum(0))
    same(a.sum((0, 1)), t.sum((0, 1)))
    same(a.mean(1, keepdim=True), t.mean(1, keepdim=True))
    same(a.sum(), t.sum())
    values, indices = a.max(1)
    same(values, t.max(1).values)
    same(indices, t.max(1).indices)
    same(a.min(0).indices, t.min(0).indices)
    same(a.max(), t.max())
    assert a.argmax().item() == t.argmax().item() and a.argmin(1).tolist() == t.argmin(1).tolist()
    same(tr.sum(a, 1), torch.sum(t, 1))


def test_comparisons_and_equality_are_elementwise():
    a, t = pair([1.0, 2.0, 3.0])
    b, u = pair([3.0, 2.0, 1.0])
    for f in (lambda x, y: x < y, lambda x, y: x <= y, lambda x, y: x > y, lambda x, y: x >= y,
              lambda x, y: x == y, lambda x, y: x != y, lambda x, y: x < 2, lambda x, y: 2 <= x,
              lambda x, y: x == 2.0):
        same(f(a, b), f(t, u))
    assert (a == a).tolist() == [True] * 3
    assert (a == "x") is False  # not a number: Python's own comparison


def test_the_missing_operators_like_torch():
    a, t = pair([-3.5, -1.0, 2.0, 7.5])
    same(abs(a), abs(t))
    same(+a, +t)
    same(a // 2, t // 2)
    same(a % 2, t % 2)
    same(7 // a, 7 // t)
    same(2 ** a, 2 ** t)
    i, j = pair([7, -7, 5])
    same(i // 2, j // 2)
    same(i % 3, j % 3)
    same(-i, -j)
    m, n = pair([[1.0, 2.0], [3.0, 4.0]])
    v, w = pair([1.0, -1.0])
    same(m @ v, n @ w)
    same(v @ m, w @ n)
    same(v @ v, w @ w)


def test_tensors_key_a_dict_by_identity():
    ps = [tr.ones(2), tr.ones(2)]
    state = {p: i for i, p in enumerate(ps)}  # an optimizer's per-parameter state
    assert state[ps[1]] == 1 and len(state) == 2
    assert hash(ps[0]) != hash(ps[1])


def test_repr_shows_values_as_torch_does():
    assert repr(tr.tensor([1.0, 2.0, 3.0])) == repr(torch.tensor([1.0, 2.0, 3.0]))
    assert repr(tr.tensor([1.5, -2.25])) == repr(torch.tensor([1.5, -2.25]))
    assert repr(tr.tensor([[1, 2], [30, 4]])) == repr(torch.tensor([[1, 2], [30, 4]]))
    assert repr(tr.tensor([True, False])) == repr(torch.tensor([True, False]))
    assert repr(tr.tensor(3.5)) == repr(torch.tensor(3.5))
    assert repr(tr.tensor([1.0, 2.0], dtype=tr.float64)) == "tensor([1., 2.], dtype=tensorref.float64)"
    assert repr(tr.tensor([1e-6, 1.0])) == repr(torch.tensor([1e-6, 1.0]))
    assert str(tr.tensor([0.5])) == "tensor([0.5000])"
    t = tr.ones(2)
    t.close()
    assert "closed" in repr(t)


def test_a_view_of_a_raw_handle_never_releases_the_owners_reference():
    t = tr.ones(3)
    view = tr.Tensor(t.handle)
    view.close()
    assert t.is_valid() and t.tolist() == [1.0] * 3
    with tr.Tensor(t.handle):  # `with` closes it the same way
        pass
    assert t.is_valid()
    t.close()
    assert not view.is_valid()
