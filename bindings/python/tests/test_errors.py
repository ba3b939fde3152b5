"""Errors: every failing C call raises the class of its status group (a TensorRefError
subclass) carrying the status, its name, the C function and the library's own message
(tr_last_error); Python-side misuse raises TypeError."""
import gc

import pytest

import tensorref as tr
from tensorref import _lib
from tensorref.errors import error_class


def test_argument_group_null_pointer():
    t = tr.ones(1)
    with pytest.raises(tr.ArgumentError) as e:
        _lib.check(_lib.lib.tr_tensor_numel(t, None), "tr_tensor_numel")
    err = e.value
    assert (err.status, err.status_name, err.function) == (100, "TR_ERR_NULL_ARG", "tr_tensor_numel")
    assert "`out` is NULL" in err.message
    assert isinstance(err, ValueError)
    assert str(err) == f"tr_tensor_numel: {err.message} [TR_ERR_NULL_ARG]"
    t.close()


def test_handle_group_stale_after_close_and_after_scope():
    t = tr.ones(1)
    t.close()
    with pytest.raises(tr.HandleError) as e:
        t.relu()
    assert e.value.status_name == "TR_ERR_STALE_HANDLE"
    assert f"{t.handle:#x}" in e.value.message and "released" in e.value.message
    with tr.scope():
        u = tr.ones(1)
    with pytest.raises(tr.HandleError, match="stale tensor handle"):
        u + u


def test_handle_group_invalid_handle():
    with pytest.raises(tr.HandleError) as e:
        tr.Tensor(12345).numel()
    assert e.value.status_name == "TR_ERR_INVALID_HANDLE"


def test_scope_group():
    s = tr.scope()
    s.dispose()
    with pytest.raises(tr.ScopeError) as e:
        s.dispose_everything()
    assert e.value.status == 300 and e.value.function == "tr_scope_dispose_everything"


def test_shape_and_dtype_group():
    a = tr.ones([2, 3])
    with pytest.raises(tr.ShapeDtypeError) as e:
        a @ a
    assert e.value.status_name == "TR_ERR_SHAPE" and "2x3" in e.value.message
    ints = tr.tensor([1, 2])
    with pytest.raises(tr.ShapeDtypeError) as e:
        tr.embedding(a, a)
    assert e.value.status_name == "TR_ERR_DTYPE" and "indices" in e.value.message
    with pytest.raises(tr.ShapeDtypeError, match="one element"):
        a.item()
    a.close()
    ints.close()


def test_device_group_out_of_memory():
    with pytest.raises(tr.DeviceError) as e:
        tr.zeros([1 << 40])  # 4 TiB of float32
    assert e.value.status_name == "TR_ERR_OUT_OF_MEMORY" and "allocate" in e.value.message


def test_torch_group():
    a = tr.ones(2)
    with pytest.raises(tr.TorchError) as e:
        a.sum().backward()
    assert e.value.status_name == "TR_ERR_TORCH" and "does not require grad" in e.value.message
    a.close()


def test_each_group_maps_to_its_class():
    groups = {100: tr.ArgumentError, 102: tr.ArgumentError, 200: tr.HandleError, 201: tr.HandleError,
              300: tr.ScopeError, 400: tr.ShapeDtypeError, 401: tr.ShapeDtypeError,
              500: tr.DeviceError, 501: tr.DeviceError, 502: tr.DeviceError, 600: tr.TorchError,
              700: tr.FileError, 701: tr.FileError, 900: tr.PanicError}
    for status, cls in groups.items():
        assert error_class(status) is cls
        assert issubclass(cls, tr.TensorRefError)
    assert error_class(800) is tr.TensorRefError  # a group this package does not know yet
    with pytest.raises(tr.PanicError) as e:  # a panic cannot be provoked from outside: the path
        _lib.fail(900, "tr_example")
    assert e.value.status_name == "TR_ERR_PANIC" and e.value.message


def test_the_groups_are_the_manifests_and_each_has_a_class():
    import json
    import pathlib
    from tensorref import _abi_generated
    from tensorref.errors import GROUP_CLASSES
    manifest = json.loads((pathlib.Path(__file__).resolve().parents[3] / "include/tensorref_abi.json").read_text())
    groups = {g["name"]: (g["first"], g["last"]) for g in manifest["status_groups"]}
    assert {k: v[:2] for k, v in _abi_generated.STATUS_GROUPS.items()} == groups
    assert set(GROUP_CLASSES) == set(groups), "a status group without its exception class"
    for name, (first, last) in groups.items():
        cls = GROUP_CLASSES[name]
        assert error_class(first) is cls and error_class(last) is cls
        assert cls.__doc__.startswith(f"Status {first}-{last}: ")
    for code in _abi_generated.STATUS_CODES.values():  # every code the library returns, but TR_OK, has one
        assert (_abi_generated.status_group(code) is None) == (code == 0)
    assert error_class(0) is tr.TensorRefError and error_class(1000) is tr.TensorRefError


def test_a_handle_status_on_a_non_tensor_argument_is_a_type_error():
    with pytest.raises(TypeError, match="expected tensorref.Tensor"):
        _lib.fail(200, "tr_tensor_neg", 5)
    with pytest.raises(tr.ShapeDtypeError):  # another group: the library's error, whatever the argument
        _lib.fail(400, "tr_tensor_neg", 5)


def test_failed_call_writes_no_output_and_leaks_nothing():
    before = tr.live_handles()
    a = tr.ones([2, 3])
    for _ in range(3):
        with pytest.raises(tr.ShapeDtypeError):
            a @ a
    a.close()
    assert tr.live_handles() == before


def test_python_misuse_is_a_type_error():
    a = tr.ones(2)
    with pytest.raises(TypeError, match="expected tensorref.Tensor"):
        tr.matmul(a, 3)  # an int would otherwise pass as a raw handle
    with pytest.raises(TypeError, match=r"matmul\(a: Tensor, b: Tensor\)"):
        tr.matmul(a, 3.0)
    with pytest.raises(TypeError, match="unsupported operand"):
        a + "x"
    with pytest.raises(TypeError, match="not a libtensorref dtype"):
        tr.zeros(2, dtype="complex64")
    with pytest.raises(TypeError, match="sequence of tensorref.Tensor"):
        tr.cat([a, 1], 0)
    with pytest.raises(TypeError, match="sequence of ints"):
        a.reshape(["x"])
    with pytest.raises(TypeError, match="sequence of ints"):
        tr.sum_dim(a, ["x"], False)
    a.close()


def test_close_and_del_never_raise_on_dead_handles():
    gc.collect()
    tr.flush_releases()  # what earlier tests let go
    live = tr.live_handles()
    with tr.scope():
        t = tr.ones(1)
    t.close()  # its scope released it already
    o = tr.ones(1)
    _lib.lib.tr_tensor_release(o)  # released behind the object's back
    del o  # __del__ sees a stale handle (an exception there fails the test: see conftest.py)
    gc.collect()
    tr.flush_releases()  # the deferred release of the stale handle is silent too
    assert tr.live_handles() == live
