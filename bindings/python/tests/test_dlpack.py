"""Zero-copy exchange with PyTorch through DLPack (tr_tensor_from_dlpack/_to_dlpack): storage is
shared both ways, so writes through one side are seen by the other, and the memory lives until
both sides have let go."""
import gc

import numpy as np
import pytest

import tensorref as tr

torch = pytest.importorskip("torch")

TORCH_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.float32, torch.float64, torch.bool, torch.bfloat16]


def test_from_torch_shares_storage_both_ways():
    t = torch.zeros(2, 3)
    x = tr.from_torch(t)
    assert x.shape == (2, 3) and x.dtype is tr.float32
    t[0, 1] = 5.0  # torch writes, tensorref reads
    assert x.numpy()[0, 1] == 5.0
    x.add_(tr.ones([2, 3]))  # tensorref writes in place, torch reads
    assert t.tolist() == [[1.0, 6.0, 1.0], [1.0, 1.0, 1.0]]
    x.close()


def test_to_torch_shares_storage_both_ways():
    x = tr.zeros(4)
    t = x.to_torch()
    assert t.shape == (4,) and t.dtype == torch.float32
    t.add_(2.0)  # torch writes
    assert x.numpy().tolist() == [2.0] * 4
    x.copy_(tr.tensor([1.0, 2.0, 3.0, 4.0]))  # tensorref writes
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert t.data_ptr() == tr.from_torch(t).to_torch().data_ptr()
    x.close()


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_every_dtype_crosses_both_ways(dtype):
    t = (torch.arange(6) % 2 if dtype == torch.bool else torch.arange(6)).to(dtype).reshape(2, 3)
    with tr.from_torch(t) as x:
        assert x.dtype is tr.dtype(dtype)
        back = x.to_torch()
    assert back.dtype == dtype and torch.equal(back, t)
    assert back.data_ptr() == t.data_ptr()


def test_views_keep_their_strides():
    base = torch.arange(12.0).reshape(3, 4)
    view = base.t()[1:]  # non-contiguous, offset
    with tr.from_torch(view) as x:
        np.testing.assert_array_equal(x.numpy(), view.numpy())
        x.mul_scalar_(10.0)
    assert base[0, 1] == 10.0 and base[0, 0] == 0.0


def test_memory_outlives_either_side():
    x = tr.from_torch(torch.full((3,), 7.0))  # the torch tensor is gone at once
    gc.collect()
    assert x.numpy().tolist() == [7.0, 7.0, 7.0]
    t = x.to_torch()
    x.close()  # the handle is gone; the torch view still holds the memory
    assert t.tolist() == [7.0, 7.0, 7.0]


def test_imports_belong_to_the_current_scope():
    t = torch.ones(2)
    with tr.scope() as s:
        x = tr.from_torch(t)
        assert x in s
    assert not x.is_valid()
    assert t.tolist() == [1.0, 1.0]  # torch still owns its storage


def test_results_of_ops_on_imported_tensors_are_ordinary_tensors():
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with tr.scope():
        y = (tr.from_torch(a) @ tr.from_torch(b)).relu()
        np.testing.assert_allclose(y.numpy(), torch.relu(a @ b).numpy(), rtol=1e-5, atol=1e-6)
        assert torch.allclose(y.to_torch(), torch.relu(a @ b), atol=1e-6)


def test_tensor_requiring_grad_is_refused_like_any_dlpack_export():
    p = torch.ones(2, requires_grad=True)
    with pytest.raises(BufferError, match="require"):
        tr.from_torch(p)
    with tr.from_torch(p.detach()) as x:
        assert x.numpy().tolist() == [1.0, 1.0]


def test_export_drops_the_autograd_graph():
    w = tr.ones(2).requires_grad_(True)
    t = w.to_torch()
    assert not t.requires_grad
    w.close()


def test_numpy_arrays_are_dlpack_producers_too():
    arr = np.arange(4.0)
    with tr.from_dlpack(arr) as x:
        x.mul_scalar_(2.0)
    assert arr.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_capsule_is_consumed_once():
    cap = torch.utils.dlpack.to_dlpack(torch.ones(1))
    with tr.from_dlpack(cap) as x:
        assert x.item() == 1.0
    with pytest.raises(TypeError, match="unused 'dltensor' capsule"):
        tr.from_dlpack(cap)
