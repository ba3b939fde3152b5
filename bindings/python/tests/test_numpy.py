"""NumPy in and out: from_numpy copies any array (any layout) of every dtype NumPy shares with
libtensorref, numpy() copies back; shape, dtype, numel and item agree with NumPy."""
import numpy as np
import pytest

import tensorref as tr

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]


def sample(dtype, shape=(2, 3, 4)):
    rng = np.random.default_rng(0)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_each_dtype(dtype):
    arr = sample(dtype)
    with tr.from_numpy(arr) as t:
        assert t.shape == arr.shape and t.ndim == 3 and t.numel() == arr.size
        assert t.dtype.numpy == arr.dtype and t.dtype is tr.dtype(arr.dtype)
        back = t.numpy()
    assert back.dtype == arr.dtype
    np.testing.assert_array_equal(back, arr)


def test_extreme_values_survive():
    arr = np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max], dtype=np.int64)
    with tr.from_numpy(arr) as t:
        np.testing.assert_array_equal(t.numpy(), arr)
    f = np.array([np.inf, -np.inf, np.nan, -0.0, 1e-45], dtype=np.float32)
    with tr.from_numpy(f) as t:
        np.testing.assert_array_equal(t.numpy(), f)


def test_non_contiguous_inputs_are_copied_in_logical_order():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for view in (base.T, base[:, ::2], base[::-1], np.asfortranarray(base)):
        with tr.from_numpy(view) as t:
            np.testing.assert_array_equal(t.numpy(), view)


def test_the_copy_is_independent_of_the_array():
    arr = np.zeros(3, dtype=np.float32)
    t = tr.from_numpy(arr)
    arr[0] = 5
    assert t.numpy()[0] == 0
    out = t.numpy()
    out[1] = 7
    assert t.numpy()[1] == 0
    t.close()


def test_scalars_and_empty_arrays():
    with tr.from_numpy(np.array(2.5, dtype=np.float64)) as s:
        assert s.shape == () and s.item() == 2.5 and s.numpy().shape == ()
    with tr.from_numpy(np.zeros((0, 3), dtype=np.int32)) as e:
        assert e.shape == (0, 3) and e.numel() == 0 and e.numpy().shape == (0, 3)


def test_many_dimensions():
    arr = np.arange(2 ** 10, dtype=np.int16).reshape((2,) * 10)
    with tr.from_numpy(arr) as t:
        assert t.shape == (2,) * 10
        np.testing.assert_array_equal(t.numpy(), arr)


def test_item_follows_the_dtype():
    with tr.from_numpy(np.array([7], dtype=np.int64)) as i:
        assert i.item() == 7 and type(i.item()) is int
    with tr.from_numpy(np.array([True])) as b:
        assert b.item() is True
    with tr.from_numpy(np.array([0.5], dtype=np.float32)) as f:
        assert f.item() == 0.5 and type(f.item()) is float


def test_bfloat16_comes_out_as_float32():
    with tr.from_numpy(np.array([1.5, -2.0, 3.25], dtype=np.float32)) as f, f.to_dtype(tr.bfloat16) as b:
        assert b.dtype is tr.bfloat16
        out = b.numpy()
        assert out.dtype == np.float32 and out.tolist() == [1.5, -2.0, 3.25]


def test_tensor_from_python_lists():
    with tr.tensor([[1.0, 2.0], [3.0, 4.0]]) as t:
        assert t.dtype is tr.float32 and t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    with tr.tensor([1, 2, 3]) as i:
        assert i.dtype is tr.int64
    with tr.tensor([1, 2], dtype="float64") as d:
        assert d.dtype is tr.float64


def test_unsupported_numpy_dtypes_are_refused():
    for arr in (np.zeros(2, dtype=np.uint16), np.zeros(2, dtype=np.complex64), np.array(["a"])):
        with pytest.raises(TypeError, match="not a libtensorref dtype"):
            tr.from_numpy(arr)
