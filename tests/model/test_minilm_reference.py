"""Correctness against the model's own definition: every run written by tests/minilm.rs (each
policy, weight mode, budget and batch size) recomputed from its token ids and masks by the
independent PyTorch implementation in minilm_torch.py; max |difference| must be <= 1e-4.

    cargo test --features models --test minilm && python3 -m pytest tests/model     (make test-model runs both)
"""
import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from minilm_torch import MiniLM  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "target/minilm-check/runs.json"
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def runs():
    if not RUNS.exists():
        pytest.fail(f"{RUNS} is missing: run `cargo test --features models --test minilm` first (make test-model does)")
    return json.loads(RUNS.read_text())


@pytest.fixture(scope="module")
def model():
    return MiniLM.load()


def reference(model, batch):
    ids = torch.tensor(batch["ids"], dtype=torch.int64).view(batch["batch"], batch["len"])
    mask = torch.tensor(batch["mask"], dtype=torch.int64).view(batch["batch"], batch["len"])
    with torch.no_grad():
        return model(ids, mask)


def test_every_run_is_covered(runs):
    names = {r["name"] for r in runs["runs"]}
    for policy in ["Resident", "Genoa 1/4", "Flow 1/4", "Flow 1/8"]:
        for mode in ["page", "chunk"]:
            assert f"{policy} {mode}" in names
    assert len({r["batch_size"] for r in runs["runs"]}) >= 3


def test_embeddings_match_the_reference(runs, model):
    worst = {}
    for run in runs["runs"]:
        got = torch.tensor(run["embeddings"], dtype=torch.float32).view(-1, 384)
        want = torch.cat([reference(model, b) for b in run["batches"]])
        assert got.shape == want.shape == (len(runs["sentences"]), 384)
        diff = (got - want).abs().max().item()
        worst[(run["name"], run["batch_size"])] = diff
        assert diff <= TOLERANCE, f"{run['name']} (batch {run['batch_size']}): max |diff| {diff:.2e}"
    print("\nmax |diff| against the PyTorch reference, per run:")
    for (name, bs), d in sorted(worst.items()):
        print(f"  {name:<18} batch {bs}: {d:.2e}")


def test_padding_does_not_change_an_embedding(runs, model):
    """A sentence embedded alone and inside a padded batch agrees (the mask does its job)."""
    alone = next(r for r in runs["runs"] if r["batch_size"] == 1 and r["name"] == "no manager")
    batched = next(r for r in runs["runs"] if r["batch_size"] > 1 and r["name"] == "no manager")
    a = torch.tensor(alone["embeddings"]).view(-1, 384)
    b = torch.tensor(batched["embeddings"]).view(-1, 384)
    assert (a - b).abs().max().item() <= TOLERANCE
