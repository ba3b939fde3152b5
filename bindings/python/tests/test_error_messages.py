"""The errors of issue 13's table and of NUL bytes, each saying what happened and, where a habit
cannot hold, what to write instead."""
import json
import struct

import numpy as np
import pytest
import torch

import tensorref as tr


def safetensors(path, names):
    """A safetensors file with one float32 [1] tensor per name (value: its index)."""
    header = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
              for i, n in enumerate(names)}
    text = json.dumps(header).encode()
    data = np.arange(len(names), dtype=np.float32).tobytes()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_weights_load_of_a_directory_says_so(tmp_path):
    with pytest.raises(tr.FileError, match="is a directory"):
        tr.weights.load(tmp_path)


def test_names_with_a_nul_byte_are_refused_not_split(tmp_path):
    good = tr.weights.load(safetensors(tmp_path / "good.safetensors", ["a", "c"]))
    assert {k: v.item() for k, v in good.items()} == {"a": 0.0, "c": 1.0}
    with pytest.raises(tr.FileError, match="NUL"):
        tr.weights.load(safetensors(tmp_path / "nul.safetensors", ["a\0b", "c"]))


def test_paths_with_a_nul_byte_are_refused(tmp_path):
    safetensors(tmp_path / "a", ["x"])
    with pytest.raises(ValueError, match="NUL"):
        tr.weights.load(str(tmp_path / "a") + "\0b")  # would have opened `a`


def test_from_torch_names_a_dtype_it_has_no_type_for():
    with pytest.raises(TypeError, match=r"torch\.uint16.*t\.to\("):
        tr.from_torch(torch.zeros(2, dtype=torch.uint16))


def test_numpy_integers_are_ints_and_big_endian_arrays_convert():
    assert tr.zeros(np.int64(3)).shape == (3,)
    assert tr.ones([np.int32(2), np.int64(1)]).shape == (2, 1)
    big = np.arange(4, dtype=">f4")
    assert tr.from_numpy(big).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert tr.tensor(np.array([1, 2], dtype=">i8")).tolist() == [1, 2]


def test_cat_of_nothing_is_an_argument_error():
    with pytest.raises(tr.ArgumentError, match="at least one tensor"):
        tr.cat([], 0)


def test_a_timeline_that_cannot_be_written_is_a_file_error(tmp_path):
    with tr.residency.session(policy="flow", budget_bytes=1 << 20):
        with pytest.raises(tr.ArgumentError, match="timeline"):
            tr.residency.timeline_write(tmp_path / "t.json")  # never started
        tr.residency.timeline_start()
        (tr.ones(4) + 1).close()
        with pytest.raises(tr.FileError, match="cannot write"):
            tr.residency.timeline_write(tmp_path / "no" / "such" / "dir.json")


def test_entering_a_disposed_scope_raises():
    s = tr.scope()
    s.dispose()
    with pytest.raises(tr.ScopeError, match="disposed already"):
        with s:
            pass


def test_the_resident_policy_says_once_that_it_ignores_the_budget():
    tr.residency._warned_resident.clear()
    with pytest.warns(UserWarning, match="ignores budget_bytes"):
        with tr.residency.session(policy="resident", budget_bytes=1 << 20):
            pass
    with tr.residency.session(policy="resident", budget_bytes=1 << 20):  # once: no second warning
        pass
    with tr.residency.session(policy="resident"):  # no budget given: nothing to say
        pass
