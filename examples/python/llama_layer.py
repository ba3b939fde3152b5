"""A Llama decoder layer written with tensorref's ops (not torch's), run under Flow with a device
budget that holds its largest projection and that projection's activations but not the whole
layer, and compared with transformers' LlamaDecoderLayer on the same weights.

    python3 examples/python/llama_layer.py               # prints the budget, the peak and the difference
    python3 examples/python/llama_layer.py --fixture F   # writes F (safetensors): the weights,
                                                         # `x` and transformers' `expected` output,
                                                         # for the C, C++ and C# versions

The layer: RMSNorm, rotary position embeddings, grouped-query attention through
scaled_dot_product_attention, a SwiGLU MLP, and the two residual additions. Every op is one of
the library's (most generated from libtorch's schema: rms_norm, cos, sin, outer, silu,
scaled_dot_product_attention ...); torch only makes the weights and the reference.
"""
from __future__ import annotations

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

import tensorref as tr

THETA = 10000.0  # the rotary base
CONFIG = LlamaConfig(hidden_size=64, intermediate_size=172, num_attention_heads=4, num_key_value_heads=2,
                     rms_norm_eps=1e-6, rope_theta=THETA, attn_implementation="sdpa")
BATCH, SEQ = 2, 8


def rotate_half(x: tr.Tensor, half: int) -> tr.Tensor:
    """The last dimension's halves swapped, the second negated: [-x2, x1]."""
    return tr.cat([-x.narrow(-1, half, half), x.narrow(-1, 0, half)], -1)


def rotary(seq: int, head_dim: int, theta: float) -> tuple[tr.Tensor, tr.Tensor]:
    """cos and sin of the rotary angles, [seq, head_dim], as LlamaRotaryEmbedding makes them."""
    inv_freq = 1.0 / tr.arange(0, head_dim, 2, tr.float32).div_scalar(head_dim).rpow_scalar(theta)
    angles = tr.arange(0, seq, 1, tr.float32).outer(inv_freq)
    emb = tr.cat([angles, angles], -1)
    return emb.cos(), emb.sin()


def layer(x: tr.Tensor, w: dict[str, tr.Tensor], cfg: LlamaConfig) -> tr.Tensor:
    b, t, d = x.shape
    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = d // heads
    cos, sin = rotary(t, hd, THETA)

    def project(n, name, h):
        return tr.linear(n, w[name], None).reshape([b, t, h, hd]).transpose(1, 2)

    def rope(q):
        return q * cos + rotate_half(q, hd // 2) * sin

    n = x.rms_norm([d], w["input_layernorm.weight"], cfg.rms_norm_eps)
    q = rope(project(n, "self_attn.q_proj.weight", heads))
    k = rope(project(n, "self_attn.k_proj.weight", kv_heads))
    v = project(n, "self_attn.v_proj.weight", kv_heads)
    attn = q.scaled_dot_product_attention(k, v, None, 0.0, True, None, True)  # causal, grouped-query
    h = x + tr.linear(attn.transpose(1, 2).reshape([b, t, d]), w["self_attn.o_proj.weight"], None)
    n = h.rms_norm([d], w["post_attention_layernorm.weight"], cfg.rms_norm_eps)
    gate = tr.linear(n, w["mlp.gate_proj.weight"], None).silu()
    up = tr.linear(n, w["mlp.up_proj.weight"], None)
    return h + tr.linear(gate * up, w["mlp.down_proj.weight"], None)


def reference(cfg: LlamaConfig, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    ref = LlamaDecoderLayer(cfg, layer_idx=0).eval()
    with torch.no_grad():
        for p in ref.parameters():  # norms away from 1, so that their weights matter
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else 0.1) + (1.0 if p.dim() == 1 else 0.0))
        positions = torch.arange(x.shape[1]).unsqueeze(0)
        cos_sin = LlamaRotaryEmbedding(cfg)(x, positions)
        out = ref(x, position_embeddings=cos_sin)
    out = out[0] if isinstance(out, tuple) else out
    return out, {k: v.detach().clone() for k, v in ref.state_dict().items()}


def budget_for(cfg: LlamaConfig) -> tuple[int, int]:
    """A budget that holds the largest projection (gate, up or down: hidden x intermediate) and
    its input and output activations, and the whole layer's weights, in bytes."""
    d, i = cfg.hidden_size, cfg.intermediate_size
    largest = d * i * 4 + BATCH * SEQ * (d + i) * 4
    kv = d * d // cfg.num_attention_heads * cfg.num_key_value_heads
    weights = (2 * d * d + 2 * kv + 3 * d * i + 2 * d) * 4
    return largest * 5 // 4, weights


def main() -> float:
    torch.manual_seed(1)
    x = torch.randn(BATCH, SEQ, CONFIG.hidden_size)
    want, weights = reference(CONFIG, x)
    budget, layer_bytes = budget_for(CONFIG)
    assert budget < layer_bytes, "the budget must not hold the whole layer"
    with tr.residency.session(policy="flow", budget_bytes=budget):
        w = {k: tr.from_numpy(v.numpy()) for k, v in weights.items()}
        got = layer(tr.from_numpy(x.numpy()), w, CONFIG).numpy()
        peak = tr.residency.stats().peak_device_bytes
    diff = float(np.abs(got - want.numpy()).max())
    print(f"budget {budget} B (the layer's weights: {layer_bytes} B), peak {peak} B; "
          f"largest difference from transformers: {diff:.2e}")
    assert peak <= budget, f"peak {peak} B over the budget {budget} B"
    assert diff <= 1e-5, f"differs from transformers' LlamaDecoderLayer by {diff}"
    return diff


def write_fixture(path: str) -> None:
    """The weights (transformers' names), the input `x` and transformers' output `expected`, for
    the same layer in C, C++ and C# (examples/{c,cpp,csharp}), which compare their output with it."""
    from safetensors.torch import save_file

    torch.manual_seed(1)
    x = torch.randn(BATCH, SEQ, CONFIG.hidden_size)
    want, weights = reference(CONFIG, x)
    save_file({**weights, "x": x, "expected": want.contiguous()}, path)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--fixture"]:
        write_fixture(sys.argv[2])
    else:
        main()
