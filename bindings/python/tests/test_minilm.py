"""all-MiniLM-L6-v2 through the Python binding (one short test, the model is ~90 MB): the
embeddings of a few sentences equal an independent PyTorch implementation of the model
(tests/model/minilm_torch.py, fed by a small WordPiece tokenizer here), are bit for bit the same
under Flow with a budget a quarter of the weights in chunk mode on the simulated device, and
paraphrases are closer than unrelated sentences. Skipped when the model is not installed."""
import json
import pathlib
import re
import sys

import numpy as np
import pytest

import tensorref as tr

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


def test_minilm_embeddings_match_pytorch_and_flow():
    try:
        path = pathlib.Path(tr.minilm.model_dir())
    except FileNotFoundError as e:
        pytest.skip(str(e))
    torch = pytest.importorskip("torch")
    before = tr.live_handles()
    with tr.MiniLM(path, batch_size=2) as model:
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
