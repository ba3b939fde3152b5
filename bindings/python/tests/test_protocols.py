"""NumPy and Python builtins see a Tensor's values, never its handle number (a Tensor is a ctypes
integer underneath): np.asarray, NumPy scalars and arrays on either side of an operator,
float() / int() / bool() / operator.index(), tr.tensor(t), and DLPack both ways."""
import operator

import numpy as np
import pytest
import torch

import tensorref as tr


def test_numpy_arrays_hold_the_values():
    a = tr.tensor([[1.0, 2.0], [3.0, 4.0]])
    arr = np.asarray(a)
    assert arr.dtype == np.float32 and arr.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert np.array(a, dtype=np.float64).dtype == np.float64
    assert np.asarray(tr.tensor([1, 2])).dtype == np.int64
    assert np.array(tr.tensor(7)).shape == ()
    with pytest.raises(ValueError, match="np.from_dlpack"):
        np.asarray(a, copy=False)  # NumPy 2: a copy cannot be avoided
    assert np.asarray(a, copy=True).tolist() == arr.tolist()
    assert np.stack([tr.tensor([1.0]), tr.tensor([2.0])]).tolist() == [[1.0], [2.0]]
    with pytest.raises(TypeError):
        memoryview(a)  # the 8 bytes of the handle are not the data


def test_numpy_scalars_and_arrays_on_either_side_of_an_operator():
    a = tr.tensor([1.0, 2.0])
    for r in (a + np.float32(1), np.float32(1) + a, a + np.float64(1), a + np.int64(1)):
        assert isinstance(r, tr.Tensor) and r.tolist() == [2.0, 3.0]
    assert (a + np.float64(1)).dtype is tr.float32  # a scalar never widens the tensor
    r = np.ones(2) * a
    assert isinstance(r, tr.Tensor) and r.tolist() == [1.0, 2.0]
    assert r.dtype is tr.float64  # an array is a tensor of its dtype, as torch.as_tensor makes it
    assert (np.array([10.0, 20.0], dtype=np.float32) - a).tolist() == [9.0, 18.0]
    assert (a / np.array([2.0, 4.0], dtype=np.float32)).tolist() == [0.5, 0.5]
    assert (tr.tensor([1, 2]) + np.int32(1)).dtype is tr.int64
    assert (a > np.float32(1.5)).tolist() == [False, True]


def test_builtins_read_one_element_tensors():
    assert float(tr.tensor(2.5)) == 2.5
    assert float(tr.tensor([[3.0]])) == 3.0
    assert int(tr.tensor(7)) == 7 and int(tr.tensor(2.9)) == 2
    assert operator.index(tr.tensor(3)) == 3
    assert [10, 11, 12, 13][tr.tensor(2)] == 12
    assert range(10)[tr.tensor([4])] == 4
    with pytest.raises(TypeError, match="only integer tensors"):
        operator.index(tr.tensor(1.0))
    with pytest.raises(ValueError, match="2 elements"):
        float(tr.ones(2))
    assert bool(tr.tensor([1.0])) and not bool(tr.tensor([0]))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(tr.ones(2))
    assert f"{tr.tensor(3.14159):.2f}" == "3.14"


def test_tensor_of_a_tensor_copies_values():
    a = tr.tensor([1.5, 2.5])
    b = tr.tensor(a)
    assert b.tolist() == [1.5, 2.5] and b.dtype is tr.float32 and b.handle != a.handle
    a.add_(tr.ones(2))
    assert b.tolist() == [1.5, 2.5]  # a copy, as torch.tensor(t)
    assert tr.tensor([tr.tensor(1.0), tr.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert tr.tensor(np.arange(3, dtype=np.int32)).dtype is tr.int32  # NumPy's dtype kept


def test_torch_and_numpy_take_a_tensor_through_dlpack():
    a = tr.tensor([1.0, 2.0, 3.0])
    assert a.__dlpack_device__() == (1, 0) and a.device == "cpu"
    t = torch.from_dlpack(a)
    assert t.tolist() == [1.0, 2.0, 3.0]
    t.add_(1)  # shared memory: the write is seen through the Tensor
    assert a.tolist() == [2.0, 3.0, 4.0]
    n = np.from_dlpack(a)
    assert n.tolist() == [2.0, 3.0, 4.0]
    before = tr.live_handles()
    del t, n
    a.close()
    assert tr.live_handles() == before - 1


def test_live_bytes_name_devices_as_torch_does():
    before = tr.live_bytes()
    a = tr.zeros([4, 8], dtype=tr.float64)
    assert tr.live_bytes("cpu") == before + 4 * 8 * 8
    assert tr.live_bytes("cuda") == tr.live_bytes("cuda:0") == 0  # no CUDA handle
    for wrong in ("simulated", "cpu:0", "cuda:x", -1):
        with pytest.raises(ValueError, match="live_bytes: a device is"):
            tr.live_bytes(wrong)
    a.close()
    assert tr.live_bytes() == before


def test_an_unconsumed_dlpack_capsule_gives_its_reference_back():
    x = torch.zeros(3)
    a = tr.from_torch(x)  # the library's tensor holds x's TensorImpl
    assert x._use_count() == 2
    for _ in range(10):
        a.__dlpack__()  # exports dropped without a consumer
    a.close()
    assert x._use_count() == 1  # an export kept alive would still hold it
    c = tr.tensor([1.0, 2.0])
    copied = torch.from_dlpack(c.__dlpack__(copy=True))
    copied.add_(1)
    assert c.tolist() == [1.0, 2.0]
    with pytest.raises(BufferError):
        c.__dlpack__(dl_device=(2, 0))
