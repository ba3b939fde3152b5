"""tr.weights.load: a safetensors file (written here byte by byte, so the test needs no other
package) comes back as named tensors with the right shapes, dtypes and values; bad files raise
FileError with the library's message."""
import json
import struct

import numpy as np
import pytest

import tensorref as tr


def write_safetensors(path, arrays: dict):
    codes = {np.float32: "F32", np.float64: "F64", np.int64: "I64", np.int32: "I32",
             np.float16: "F16", np.uint8: "U8", np.int8: "I8", np.bool_: "BOOL"}
    header, blobs, offset = {}, [], 0
    for name, a in arrays.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": codes[a.dtype.type], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_tensors_come_back_by_name_in_file_order(tmp_path):
    arrays = {"layer.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
              "layer.bias": np.array([1.5, -2.5, 3.0], dtype=np.float64),
              "ids": np.array([[7, 8]], dtype=np.int64),
              "mask": np.array([True, False]), "half": np.array([0.5], dtype=np.float16)}
    f = tmp_path / "w.safetensors"
    write_safetensors(f, arrays)
    before = tr.live_handles()
    with tr.scope() as s:
        w = tr.weights.load(f)
        assert list(w) == list(arrays)
        for name, a in arrays.items():
            assert w[name].dtype is tr.dtype(a.dtype) and w[name] in s
            np.testing.assert_array_equal(w[name].numpy(), a)
    assert tr.live_handles() == before
    outside = tr.weights.load(str(f))  # no scope: each object owns its handle
    assert tr.live_handles() == before + len(arrays)
    del outside
    assert tr.live_handles() == before


def test_missing_and_malformed_files_raise_file_error(tmp_path):
    with pytest.raises(tr.FileError) as e:
        tr.weights.load(tmp_path / "absent.safetensors")
    assert e.value.status_name == "TR_ERR_IO" and "absent.safetensors" in e.value.message
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(tr.FileError) as e:
        tr.weights.load(bad)
    assert e.value.status_name == "TR_ERR_FORMAT" and e.value.message
