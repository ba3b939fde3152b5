"""all-MiniLM-L6-v2 through the Python add-on tensorref_minilm (the model is ~90 MB): the
embeddings of a few sentences equal an independent PyTorch implementation of the model
(tests/model/minilm_torch.py, fed by a small WordPiece tokenizer here), are bit for bit the same
under Flow with a budget a quarter of the weights in chunk mode on the simulated device, and
paraphrases are closer than unrelated sentences; a closed model is refused, and a freed pointer
is refused by the library. The tests that load the model skip when it is not installed.

The add-on's declarations match its own header (include/tensorref_minilm.h), and the core
package never imports it."""
import json
import os
import pathlib
import re
import subprocess
import sys
from ctypes import POINTER, c_char_p, c_int32, c_size_t, c_uint64, c_void_p

import numpy as np
import pytest

import tensorref as tr
import tensorref_minilm
from tensorref_minilm import MiniLM, model_dir
from tensorref_minilm._abi_generated import WEIGHT_MODE_CODES, MiniLMOptions, MiniLMPtr
import test_abi
from test_abi import PACKAGE_DIR, c_type

ROOT = pathlib.Path(__file__).resolve().parents[3]
SENTENCES = ["A man is playing a guitar.", "Someone is strumming a guitar on stage.",
             "The stock market fell sharply today."]
TOLERANCE = 1e-6  # measured: 0.0 on CPU


def wordpiece_ids(text: str, vocab: dict) -> list[int]:
    """BERT uncased tokenization for plain ASCII text: lower case, words and punctuation,
    greedy longest-match word pieces, [CLS] ... [SEP]."""
    ids = [vocab["[CLS]"]]
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = ("##" if start else "") + word[start:end]
                if piece in vocab:
                    pieces.append(vocab[piece])
                    start = end
                    break
            else:
                pieces, start = [vocab["[UNK]"]], len(word)
        ids += pieces
    return ids + [vocab["[SEP]"]]


def installed_model() -> pathlib.Path:
    try:
        return pathlib.Path(model_dir())
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_minilm_embeddings_match_pytorch_and_flow():
    path = installed_model()
    torch = pytest.importorskip("torch")
    before = tr.live_handles()
    with MiniLM(path, batch_size=2) as model:
        assert model.dim == 384 and model.weight_bytes > 80 << 20
        plain = model.embed(SENTENCES)
        model.set_weight_mode("chunk", capacity=model.weight_bytes // 8)
        with tr.residency.session(policy="flow", budget_bytes=model.weight_bytes // 4):
            managed = model.embed(SENTENCES)
            s = tr.residency.stats()
        with pytest.raises(ValueError):
            model.set_weight_mode("lru")
    assert tr.live_handles() == before
    assert np.array_equal(managed, plain)  # the manager moves bytes, never changes results
    assert 0 < s.peak_device_bytes <= s.budget and s.pinned_bytes > 0

    sys.path.insert(0, str(ROOT / "tests/model"))
    from minilm_torch import MiniLM as TorchMiniLM

    vocab = json.loads((path / "tokenizer.json").read_text())["model"]["vocab"]
    rows = [wordpiece_ids(t, vocab) for t in SENTENCES]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    with torch.no_grad():
        reference = TorchMiniLM.load()(ids, mask).numpy()
    worst = np.abs(plain - reference).max()
    assert worst <= TOLERANCE, worst

    cos = plain @ plain.T
    assert cos[0, 1] > 0.5 > cos[0, 2] and cos[0, 1] > cos[1, 2]


def test_a_closed_model_is_refused_and_a_freed_pointer_too():
    model = MiniLM(installed_model())
    raw = MiniLMPtr(model._h.value)
    model.close()
    model.close()  # a second close is a no-op
    with pytest.raises(ValueError, match="closed"):
        model.embed(["too late"])
    lib = tensorref_minilm.lib
    assert lib.tr_minilm_free(raw) == tr._abi_generated.STATUS_CODES["TR_ERR_INVALID_HANDLE"]
    assert "tr_minilm" in tr._lib.last_error() and "not live" in tr._lib.last_error()
    assert lib.tr_minilm_dim(raw, None) == tr._abi_generated.STATUS_CODES["TR_ERR_NULL_ARG"]
    assert lib.tr_minilm_free(MiniLMPtr()) == 0  # NULL: a no-op


def test_paths_with_a_nul_byte_are_refused(tmp_path):
    with pytest.raises(ValueError, match="NUL"):
        MiniLM(str(tmp_path) + "\0x")


def test_a_missing_model_folder_is_a_file_error(tmp_path):
    with pytest.raises(tr.FileError):
        MiniLM(tmp_path / "nothing here")


MINILM_HEADER = (ROOT / "include/tensorref_minilm.h").read_text()
C_TO_CTYPES = {
    "struct tr_minilm_options *": POINTER(MiniLMOptions), "const struct tr_minilm_options *": POINTER(MiniLMOptions),
    "struct tr_minilm *": MiniLMPtr, "const struct tr_minilm *": MiniLMPtr, "struct tr_minilm **": POINTER(MiniLMPtr),
    "const char *": c_char_p, "const char const **": POINTER(c_char_p), "tr_weight_mode": c_int32,
    "uint64_t": c_uint64, "uint64_t *": POINTER(c_uint64), "size_t": c_size_t, "size_t *": POINTER(c_size_t),
    "float *": c_void_p, "tr_status": c_int32,
}
PROTOTYPES = [(m.group(2), " ".join(m.group(1).split()), m.group(3))
              for m in re.finditer(r"^([A-Za-z_][\w \*]*?)\b(tr_\w+)\(([^)]*)\);", MINILM_HEADER, re.M)]


def test_the_addon_header_declares_the_model_and_the_core_header_does_not():
    assert {p[0] for p in PROTOTYPES} == {"tr_minilm_options_default", "tr_minilm_load", "tr_minilm_free",
                                          "tr_minilm_set_weight_mode", "tr_minilm_dim",
                                          "tr_minilm_weight_bytes", "tr_minilm_embed"}
    assert not any(name.startswith("tr_minilm") for name, _, _ in test_abi.PROTOTYPES)
    assert "struct tr_minilm" not in test_abi.HEADER and "TR_WEIGHT_MODE" not in test_abi.HEADER
    assert not any(name.startswith("tr_minilm") for name in tr._abi_generated.signatures(tr.Tensor))


@pytest.mark.parametrize("name,ret,params", PROTOTYPES, ids=[p[0] for p in PROTOTYPES])
def test_every_addon_function_has_matching_argtypes_and_restype(name, ret, params):
    fn = getattr(tensorref_minilm.lib, name)
    assert tuple(fn.argtypes) == tuple(C_TO_CTYPES[c_type(p)] for p in params.split(","))
    assert fn.restype == C_TO_CTYPES[c_type(ret, named=False)]


def test_the_addon_codes_and_options_match_its_header():
    codes = re.findall(r"^\s+TR_WEIGHT_MODE_(\w+) = (\d+),", MINILM_HEADER, re.M)
    assert WEIGHT_MODE_CODES == {k: int(v) for k, v in codes} == {"PAGE": 0, "CHUNK": 1}
    test_abi.test_structs_have_the_headers_fields_in_order("tr_minilm_options", MiniLMOptions, MINILM_HEADER)


def test_the_core_package_never_imports_the_addon():
    code = ("import sys, tensorref; assert 'tensorref_minilm' not in sys.modules, 'imported'; "
            "assert not hasattr(tensorref, 'MiniLM'); print('ok')")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=PACKAGE_DIR),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
