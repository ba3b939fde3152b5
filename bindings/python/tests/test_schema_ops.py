"""Ops generated from libtorch's schema, through the Python wrappers, written as a user writes
them and checked against torch: optional arguments left out or given None, strings, dtypes,
lists of optional tensors, tuples unpacked, lists longer than the wrappers' first buffer, in
place forms, errors, and nothing left behind."""
import gc

import numpy as np
import pytest

import tensorref as tr

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)


def same(ours, theirs):
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    assert ours.numpy().dtype == theirs.numpy().dtype


def sample():
    a = RNG.standard_normal((4, 6, 8)).astype(np.float32)
    return tr.from_numpy(a), torch.from_numpy(a)


def test_optional_arguments_and_values():
    ours, theirs = sample()
    w = RNG.random(8).astype(np.float32)
    same(ours.rms_norm([8], tr.from_numpy(w), 1e-5), torch.rms_norm(theirs, [8], torch.from_numpy(w), 1e-5))
    same(ours.rms_norm([8], None, None), torch.rms_norm(theirs, [8]))
    same(ours.cumsum(1, tr.float64), theirs.cumsum(1, dtype=torch.float64))
    same(ours.sum_dim_intlist([0, 2], True, None), theirs.sum((0, 2), keepdim=True))
    same(ours.clamp_tensor(None, tr.zeros([8])), theirs.clamp(max=torch.zeros(8)))
    assert ours.size_int(1) == 6 and ours.is_floating_point() is True
    assert ours.result_type_scalar(2) is tr.float32 and tr.promote_types(tr.int64, tr.float16) is tr.float16


def test_strings_and_lists():
    ours, theirs = sample()
    same(ours.div_tensor_mode(ours.abs() + 1, "floor"), torch.div(theirs, theirs.abs() + 1, rounding_mode="floor"))
    a, b = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32)
    same(tr.einsum("ij,jk->ik", [tr.from_numpy(a), tr.from_numpy(b)], None), torch.from_numpy(a) @ torch.from_numpy(b))
    idx = np.array([5, 0, 2])
    same(ours.index_tensor([None, tr.from_numpy(idx)]), theirs[:, torch.from_numpy(idx)])
    with pytest.raises(tr.TensorRefError, match="rounding_mode"):
        ours.div_tensor_mode(ours, "sideways")


def test_tuples_unpack_and_long_lists_come_whole():
    ours, theirs = sample()
    values, indices = ours.topk(3, -1, True, True)
    want_values, want_indices = theirs.topk(3)
    same(values, want_values)
    same(indices, want_indices)
    # More results than the wrappers' first buffer of 64: the op runs again with room for all.
    rows = tr.arange(0, 200, 1, tr.float32).reshape([100, 2])
    parts = rows.unbind_int(0)
    assert len(parts) == 100 and parts[99].numpy().tolist() == [198.0, 199.0]


def test_in_place_returns_the_receiver_and_temporaries_leave_nothing():
    ours, theirs = sample()
    gc.collect()
    tr.flush_releases()
    live = tr.live_handles()
    y = ours.clone()
    assert y.clamp_min_(0.0) is y
    same(y, theirs.clamp_min(0.0))
    for _ in range(3):
        ours.topk(2, 0, True, True)
        ours.split_tensor(3, 1)
        ours.rms_norm([8], None, None).sum()
    del y
    gc.collect()
    tr.flush_releases()
    assert tr.live_handles() == live
